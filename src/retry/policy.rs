//! The retry planner: one failed attempt in, "retry at" or "stop, because"
//! out.

use std::num::NonZeroU32;
use std::time::{Duration, Instant, SystemTime};

use super::header::parse_retry_after_lines;
use crate::jitter::JitterSource;

/// The methods RFC 9110 (section 9.2.2) defines as idempotent, which a
/// [`RetryPolicy`] replays by default.
///
/// Methods are case-sensitive in HTTP: `get` is not `GET` but an unknown
/// extension method, and is not replayed.
///
/// ```
/// use tollgate::retry::IDEMPOTENT_METHODS;
///
/// assert!(IDEMPOTENT_METHODS.contains(&"PUT"));
/// assert!(!IDEMPOTENT_METHODS.contains(&"POST"));
/// ```
pub const IDEMPOTENT_METHODS: [&str; 6] = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"];

/// When a response was received, on both clocks the planner needs.
///
/// `instant` (monotonic) is what waits are counted from and what
/// [`Decision::Retry`] is expressed in; `wall` is only used to turn an
/// HTTP-date into a wait. Take both as close together as possible, ideally
/// with [`Received::now`] as soon as the response head arrives.
///
/// ```
/// use std::time::{Instant, SystemTime};
/// use tollgate::retry::Received;
///
/// let received = Received::now();
/// let fixed = Received::new(Instant::now(), SystemTime::UNIX_EPOCH); // for tests
/// assert!(fixed.instant >= received.instant);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// The monotonic receive time.
    pub instant: Instant,
    /// The wall-clock receive time.
    pub wall: SystemTime,
}

impl Received {
    /// A receive time from explicit clock readings (fixed values in tests).
    pub fn new(instant: Instant, wall: SystemTime) -> Received {
        Received { instant, wall }
    }

    /// Both clocks, read now.
    pub fn now() -> Received {
        Received {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }
}

/// An attempt that got a response, as the planner needs to see it.
///
/// Built from plain values so any HTTP client can supply them: the status as
/// a `u16`, the method as the exact (case-sensitive) token sent, and the
/// Retry-After field as bytes.
///
/// ```
/// use std::time::Duration;
/// use tollgate::retry::{Attempt, Received};
///
/// let attempt = Attempt::new(1, "GET", 503, Received::now())
///     .with_retry_after(Some("120"))
///     .with_rate_limit_wait(Some(Duration::from_secs(5)));
/// // Retry-After wins over the RateLimit hint.
/// assert_eq!(attempt.server_wait(), Some(Duration::from_secs(120)));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Attempt<'a> {
    number: u32,
    method: &'a str,
    status: u16,
    received: Received,
    /// The Retry-After wait, parsed when given: the receive time is known.
    retry_after: Option<Duration>,
    rate_limit_wait: Option<Duration>,
    replay_safe: bool,
}

impl<'a> Attempt<'a> {
    /// Attempt `number` (1 for the first request; 0 is read as 1), sent
    /// with `method`, answered with `status` at `received`.
    pub fn new(number: u32, method: &'a str, status: u16, received: Received) -> Attempt<'a> {
        Attempt {
            number,
            method,
            status,
            received,
            retry_after: None,
            rate_limit_wait: None,
            replay_safe: false,
        }
    }

    /// The response's Retry-After field value, if it had one: anything that
    /// is bytes (`&str`, `&[u8]`, an HTTP library's header value), so
    /// `headers.get("retry-after")` can be passed straight in. Parsed by
    /// [`parse_retry_after`](super::parse_retry_after) against the wall-clock
    /// receive time; an invalid value counts as absent. A response may carry
    /// several lines: [`with_retry_after_lines`](Attempt::with_retry_after_lines)
    /// reads them all.
    pub fn with_retry_after<V: AsRef<[u8]> + ?Sized>(self, value: Option<&V>) -> Self {
        self.with_retry_after_lines(value)
    }

    /// Every Retry-After line of the response, as received
    /// (`headers.get_all("retry-after")`): the longest valid wait among
    /// them counts, so the retry is never earlier than any line asked (see
    /// [`parse_retry_after_lines`](super::parse_retry_after_lines)). No
    /// valid line counts as absent.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::retry::{Attempt, Received};
    ///
    /// let attempt = Attempt::new(1, "GET", 503, Received::now()).with_retry_after_lines(["5", "120"]);
    /// assert_eq!(attempt.server_wait(), Some(Duration::from_secs(120)));
    /// ```
    pub fn with_retry_after_lines<V: AsRef<[u8]>>(
        mut self,
        lines: impl IntoIterator<Item = V>,
    ) -> Self {
        self.retry_after = parse_retry_after_lines(lines, self.received.wall);
        self
    }

    /// A wait derived from the response's RateLimit fields, parsed
    /// elsewhere. Used only when there is no valid Retry-After: a server that
    /// sends both has said exactly when to return in the field made for that
    /// purpose, while a quota's reset time is a weaker, indirect hint.
    pub fn with_rate_limit_wait(mut self, wait: Option<Duration>) -> Self {
        self.rate_limit_wait = wait;
        self
    }

    /// Declares that replaying this request is safe whatever its method (it
    /// carries an idempotency key the server honours, say). The planner
    /// then skips its method check for this attempt only. A 429 or 503 does
    /// not by itself make a replay safe: the first attempt may have taken
    /// effect.
    pub fn with_replay_safe(mut self, safe: bool) -> Self {
        self.replay_safe = safe;
        self
    }

    /// The server's own guidance, after precedence: a valid Retry-After,
    /// else the RateLimit wait, else `None`.
    pub fn server_wait(&self) -> Option<Duration> {
        self.retry_after.or(self.rate_limit_wait)
    }
}

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Decision {
    /// Send the next attempt at (not before) `at`, on the monotonic clock.
    /// Check the deadline again when the time comes: this is a plan, and
    /// the thread may wake late.
    Retry {
        /// When to send the next attempt.
        at: Instant,
    },
    /// Do not retry.
    Stop(StopReason),
}

impl Decision {
    /// The retry time, or `None` for [`Decision::Stop`].
    ///
    /// ```
    /// use tollgate::retry::{Decision, StopReason};
    ///
    /// assert_eq!(Decision::Stop(StopReason::DeadlineExhausted).retry_at(), None);
    /// ```
    pub fn retry_at(self) -> Option<Instant> {
        match self {
            Decision::Retry { at } => Some(at),
            Decision::Stop(_) => None,
        }
    }
}

/// Why the planner stopped. The checks run in the order of the variants,
/// so the reason is the first one that applies.
///
/// ```
/// use tollgate::retry::StopReason;
///
/// let reason = StopReason::NotRetryableStatus { status: 404 };
/// assert_eq!(reason.to_string(), "status 404 is not retried by this policy");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StopReason {
    /// The policy does not retry this status (by default only 429 and 503
    /// are retried).
    #[error("status {status} is not retried by this policy")]
    NotRetryableStatus {
        /// The response's status.
        status: u16,
    },
    /// The method is not known to be idempotent and the attempt was not
    /// declared replay-safe: repeating it could repeat its effect.
    #[error("the method is not idempotent, so replaying it could repeat its effect")]
    NonIdempotentMethod,
    /// `max` attempts have been made.
    #[error("{max} attempts made, the policy's cap")]
    AttemptCapReached {
        /// The policy's attempt cap.
        max: u32,
    },
    /// The deadline had passed at receipt, or left less than the attempt
    /// budget.
    #[error("the deadline leaves no time for another attempt")]
    DeadlineExhausted,
    /// Waiting as required (the server's wait or the local backoff,
    /// whichever is longer) would leave less than the attempt budget before
    /// the deadline. The wait is valid; it is just longer than the caller
    /// can afford, and retrying earlier instead would ignore the server.
    #[error("the required wait of {wait:?} runs past the deadline")]
    WaitExceedsDeadline {
        /// The required wait from receipt, jitter excluded.
        wait: Duration,
    },
}

/// A bounded retry policy for responses that asked the client to come back
/// later (by default 429 Too Many Requests and 503 Service Unavailable).
///
/// [`plan`](RetryPolicy::plan) turns a failed [`Attempt`] into a
/// [`Decision`]. The contract:
///
/// - **Which responses**: only the configured statuses, and only for
///   idempotent methods ([`IDEMPOTENT_METHODS`], plus any added with
///   [`with_idempotent_method`](RetryPolicy::with_idempotent_method)) or
///   attempts marked [replay-safe](Attempt::with_replay_safe).
/// - **Terminal**: attempt `n` may be followed by another only while
///   `n < max_attempts`, so every retry loop ends.
/// - **Never early**: the retry time is at least `received + wait`, where
///   `wait` is the longer of the server's wait ([`Attempt::server_wait`])
///   and the local exponential backoff for this attempt
///   ([`backoff`](RetryPolicy::backoff)); with no server guidance it is the
///   backoff alone.
/// - **Jitter after the boundary**: a draw uniform over the whole jitter
///   window, `0..=window` in nanoseconds with both ends included
///   ([`JitterSource::draw_up_to`]), is added after `received + wait`,
///   never subtracted, so identical waits do not bring a fleet of clients
///   back in the same instant.
/// - **Deadline**: a retry is planned only if it leaves the attempt budget
///   before the deadline (`at + attempt_budget <= deadline`); the jitter
///   window shrinks to fit. Otherwise it stops: a wait longer than the
///   caller can afford is never shortened.
///
/// Defaults: 3 attempts in all, backoff 1 s doubling per attempt up to 30 s,
/// jitter up to 1 s, attempt budget 1 s, statuses 429 and 503.
///
/// ```
/// use std::time::{Duration, Instant, SystemTime};
/// use tollgate::retry::{Attempt, Decision, Received, RetryPolicy, StopReason};
///
/// let policy = RetryPolicy::new();
/// let received = Received::new(Instant::now(), SystemTime::now());
/// let deadline = received.instant + Duration::from_secs(10);
/// let mut jitter = || 0.25; // a real caller would use JitterGenerator
///
/// let attempt = Attempt::new(1, "GET", 429, received).with_retry_after(Some("3"));
/// assert_eq!(
///     policy.plan(&attempt, deadline, &mut jitter),
///     Decision::Retry { at: received.instant + Duration::from_millis(3250) },
/// );
///
/// let post = Attempt::new(1, "POST", 429, received).with_retry_after(Some("3"));
/// assert_eq!(
///     policy.plan(&post, deadline, &mut jitter),
///     Decision::Stop(StopReason::NonIdempotentMethod),
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: NonZeroU32,
    backoff_base: Duration,
    backoff_max: Duration,
    max_jitter: Duration,
    attempt_budget: Duration,
    statuses: Vec<u16>,
    methods: Vec<Box<str>>,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy::new()
    }
}

impl RetryPolicy {
    /// The default policy (see the type's documentation for the values).
    pub fn new() -> RetryPolicy {
        RetryPolicy {
            max_attempts: NonZeroU32::new(3).unwrap_or(NonZeroU32::MIN),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            max_jitter: Duration::from_secs(1),
            attempt_budget: Duration::from_secs(1),
            statuses: vec![429, 503],
            methods: IDEMPOTENT_METHODS.iter().map(|m| Box::from(*m)).collect(),
        }
    }

    /// At most `max` attempts in all, the first included: `1` never
    /// retries.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use tollgate::retry::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new().with_max_attempts(NonZeroU32::new(5).unwrap());
    /// # let _ = policy;
    /// ```
    pub fn with_max_attempts(mut self, max: NonZeroU32) -> Self {
        self.max_attempts = max;
        self
    }

    /// Local backoff: `base` after the first attempt, doubling after each
    /// further one, never more than `max`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::retry::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new().with_backoff(Duration::from_millis(100), Duration::from_secs(1));
    /// assert_eq!(policy.backoff(4), Duration::from_millis(800));
    /// assert_eq!(policy.backoff(5), Duration::from_secs(1));
    /// ```
    pub fn with_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max;
        self
    }

    /// The jitter window: each retry is pushed back by a uniform draw from
    /// `0..=max` (from less when the deadline is close). Zero disables
    /// jitter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::retry::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new().with_max_jitter(Duration::from_millis(250));
    /// # let _ = policy;
    /// ```
    pub fn with_max_jitter(mut self, max: Duration) -> Self {
        self.max_jitter = max;
        self
    }

    /// Time reserved before the deadline for the retried attempt itself: no
    /// retry is planned to start later than `deadline - budget`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::retry::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new().with_attempt_budget(Duration::from_millis(500));
    /// # let _ = policy;
    /// ```
    pub fn with_attempt_budget(mut self, budget: Duration) -> Self {
        self.attempt_budget = budget;
        self
    }

    /// Replaces the set of retried statuses.
    ///
    /// ```
    /// use tollgate::retry::RetryPolicy;
    ///
    /// // Also retry 502 Bad Gateway and 504 Gateway Timeout.
    /// let policy = RetryPolicy::new().with_retry_statuses([429, 502, 503, 504]);
    /// # let _ = policy;
    /// ```
    pub fn with_retry_statuses(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Treats `method` (exact, case-sensitive token) as idempotent too: an
    /// extension method whose definition says so, or `POST` on an API
    /// where every request carries an idempotency key.
    ///
    /// ```
    /// use tollgate::retry::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new().with_idempotent_method("PROPFIND");
    /// # let _ = policy;
    /// ```
    pub fn with_idempotent_method(mut self, method: &str) -> Self {
        if !self.is_idempotent(method) {
            self.methods.push(Box::from(method));
        }
        self
    }

    /// The local backoff after attempt `attempt` (0 is read as 1):
    /// `base · 2^(attempt-1)`, at most the configured maximum.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::retry::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new();
    /// let waits: Vec<u64> = (1..=7).map(|n| policy.backoff(n).as_secs()).collect();
    /// assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
    /// ```
    pub fn backoff(&self, attempt: u32) -> Duration {
        1u32.checked_shl(attempt.max(1) - 1)
            .and_then(|factor| self.backoff_base.checked_mul(factor))
            .map_or(self.backoff_max, |wait| wait.min(self.backoff_max))
    }

    /// Decides what follows `attempt`, given the caller's overall `deadline`
    /// (monotonic) and a jitter source. Pure: the same inputs and jitter
    /// draw give the same decision, and no clock is read. The contract
    /// is in the type's documentation; [`StopReason`] lists the ways it
    /// stops, in the order they are checked.
    ///
    /// ```
    /// use std::time::{Duration, Instant, SystemTime};
    /// use tollgate::retry::{Attempt, Decision, Received, RetryPolicy, StopReason, JitterGenerator};
    ///
    /// let policy = RetryPolicy::new();
    /// let received = Received::new(Instant::now(), SystemTime::now());
    /// let deadline = received.instant + Duration::from_secs(30);
    /// let mut jitter = JitterGenerator::new(1);
    ///
    /// // A wait beyond the deadline is not shortened: stop instead.
    /// let busy = Attempt::new(1, "GET", 503, received).with_retry_after(Some("3600"));
    /// assert_eq!(
    ///     policy.plan(&busy, deadline, &mut jitter),
    ///     Decision::Stop(StopReason::WaitExceedsDeadline { wait: Duration::from_secs(3600) }),
    /// );
    /// ```
    pub fn plan<J: JitterSource + ?Sized>(
        &self,
        attempt: &Attempt<'_>,
        deadline: Instant,
        jitter: &mut J,
    ) -> Decision {
        use StopReason::*;
        if !self.statuses.contains(&attempt.status) {
            return Decision::Stop(NotRetryableStatus {
                status: attempt.status,
            });
        }
        if !attempt.replay_safe && !self.is_idempotent(attempt.method) {
            return Decision::Stop(NonIdempotentMethod);
        }
        let number = attempt.number.max(1);
        if number >= self.max_attempts.get() {
            return Decision::Stop(AttemptCapReached {
                max: self.max_attempts.get(),
            });
        }
        let received = attempt.received.instant;
        let remaining = deadline.saturating_duration_since(received);
        // `room`: how long after receipt the next attempt may still start.
        let room = match remaining.checked_sub(self.attempt_budget) {
            Some(room) if !remaining.is_zero() => room,
            _ => return Decision::Stop(DeadlineExhausted),
        };
        let wait = attempt
            .server_wait()
            .unwrap_or(Duration::ZERO)
            .max(self.backoff(number));
        if wait > room {
            return Decision::Stop(WaitExceedsDeadline { wait });
        }
        // Scaling the window down to the slack (rather than clamping the
        // draw) keeps the spread uniform when the deadline is close.
        let window = self.max_jitter.min(room - wait);
        let extra = jitter_within(window, jitter);
        // `wait + extra <= room <= remaining`, so this is at most
        // `deadline` and cannot overflow.
        Decision::Retry {
            at: received + (wait + extra),
        }
    }

    fn is_idempotent(&self, method: &str) -> bool {
        self.methods.iter().any(|m| **m == *method)
    }
}

/// A draw from `0..=window` in whole nanoseconds, the end included, and
/// clamped to it whatever the source answers.
fn jitter_within<J: JitterSource + ?Sized>(window: Duration, jitter: &mut J) -> Duration {
    let window_nanos = window.as_nanos();
    let nanos = jitter.draw_up_to(window_nanos).min(window_nanos);
    // `nanos <= window_nanos`, so the seconds fit a u64 and the remainder a u32.
    Duration::new(
        u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX),
        u32::try_from(nanos % 1_000_000_000).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::JitterGenerator;

    #[test]
    fn jitter_stays_in_the_window_and_reaches_its_end() {
        let w = Duration::from_secs(2);
        assert_eq!(jitter_within(w, &mut || 0.5), Duration::from_secs(1));
        assert_eq!(jitter_within(w, &mut || f64::NAN), Duration::ZERO);
        assert_eq!(jitter_within(w, &mut || -3.0), Duration::ZERO);
        assert_eq!(jitter_within(w, &mut || f64::NEG_INFINITY), Duration::ZERO);
        assert_eq!(jitter_within(w, &mut || 7.0), w);
        assert_eq!(jitter_within(w, &mut || f64::INFINITY), w);
        assert_eq!(jitter_within(Duration::MAX, &mut || 1.0), Duration::MAX);
        assert_eq!(jitter_within(Duration::ZERO, &mut || 0.9), Duration::ZERO);
        // A source whose own draw overshoots is held to the window.
        struct Overshoot;
        impl JitterSource for Overshoot {
            fn next_fraction(&mut self) -> f64 {
                0.0
            }
            fn draw_up_to(&mut self, _max: u128) -> u128 {
                u128::MAX
            }
        }
        assert_eq!(jitter_within(w, &mut Overshoot), w);
        let mut generator = JitterGenerator::new(1);
        assert!(jitter_within(Duration::MAX, &mut generator) <= Duration::MAX);
        let one = Duration::from_nanos(1);
        assert!((0..100).any(|_| jitter_within(one, &mut generator) == one));
    }

    #[test]
    fn backoff_saturates_for_any_attempt_number() {
        let policy = RetryPolicy::new().with_backoff(Duration::MAX, Duration::MAX);
        assert_eq!(policy.backoff(u32::MAX), Duration::MAX);
        assert_eq!(RetryPolicy::new().backoff(0), Duration::from_secs(1));
        assert_eq!(
            RetryPolicy::new().backoff(u32::MAX),
            Duration::from_secs(30)
        );
        // A base above the maximum is capped from the first attempt.
        let inverted =
            RetryPolicy::new().with_backoff(Duration::from_secs(9), Duration::from_secs(2));
        assert_eq!(inverted.backoff(1), Duration::from_secs(2));
    }

    #[test]
    fn adding_a_known_method_does_not_duplicate_it() {
        let policy = RetryPolicy::new().with_idempotent_method("GET");
        assert_eq!(policy, RetryPolicy::new());
    }
}
