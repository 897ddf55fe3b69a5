//! What a bucket allows: capacity, refill rate and initial credit.

use std::time::Duration;

use crate::error::QuotaError;
use crate::gcra::Gcra;

/// How much credit a new (or re-created) bucket starts with.
///
/// ```
/// use tollgate::{InitialCredit, Limit, ManualClock, Quota, TokenBucket};
///
/// let quota = Quota::per_second(10)?.with_initial_credit(InitialCredit::Tokens(4))?;
/// let bucket = TokenBucket::with_clock(quota, ManualClock::new());
/// assert_eq!(bucket.available(), 4);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum InitialCredit {
    /// Start with `capacity` tokens: an immediate burst is allowed.
    #[default]
    Full,
    /// Start with no tokens: the first token arrives one emission interval
    /// after creation.
    Empty,
    /// Start with this many tokens (at most the capacity).
    Tokens(u64),
}

/// A token-bucket contract: a capacity of `B` whole tokens, refilled at `n`
/// tokens per `period`, with an initial credit.
///
/// Construction validates everything a bucket's arithmetic relies on, so a
/// `Quota` in hand can always be used without further checks.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// // Bursts of up to 100 requests, 1000 requests per 7 seconds sustained.
/// let quota = Quota::new(100, 1000, Duration::from_secs(7))?;
/// assert_eq!(quota.capacity(), 100);
/// assert!(quota.is_exact());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    gcra: Gcra,
    tokens: u64,
    period: Duration,
    initial: InitialCredit,
}

impl Quota {
    /// A bucket of `capacity` tokens refilled at `tokens` per `period`,
    /// starting full. Every rate is accepted, from one token in `2^63 - 1`
    /// ns (292 years) to `2^64 - 1` a nanosecond, as long as a full refill
    /// (`capacity` times the interval `period / tokens`) takes less than
    /// half the bucket's clock range: `2^63` ticks, 292 years at whole
    /// nanoseconds, 36 at the finest tick (an eighth of one), which keeps
    /// every decision exact for at least as long again after creation;
    /// [`QuotaError::Overflow`] beyond. Byte rates are written in bytes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, QuotaError};
    ///
    /// assert!(Quota::new(3, 2, Duration::from_secs(1)).is_ok());
    /// // The slowest rate, and one nanosecond slower.
    /// assert!(Quota::new(1, 1, Duration::from_nanos((1 << 63) - 1)).is_ok());
    /// assert_eq!(
    ///     Quota::new(1, 1, Duration::from_nanos(1 << 63)),
    ///     Err(QuotaError::Overflow { capacity: 1 }),
    /// );
    /// // The longest period, at a rate whose full refill fits.
    /// assert!(Quota::new(1, 3, Duration::from_nanos(u64::MAX)).is_ok());
    /// // 64 MiB/s with a burst of 64 MiB, charged in bytes.
    /// assert!(Quota::new(64 << 20, 64 << 20, Duration::from_secs(1)).is_ok());
    /// assert_eq!(Quota::new(3, 0, Duration::from_secs(1)), Err(QuotaError::ZeroTokens));
    /// assert_eq!(Quota::new(3, 2, Duration::ZERO), Err(QuotaError::ZeroPeriod));
    /// ```
    pub fn new(capacity: u64, tokens: u64, period: Duration) -> Result<Self, QuotaError> {
        Ok(Quota {
            gcra: Gcra::new(capacity, tokens, period)?,
            tokens,
            period,
            initial: InitialCredit::Full,
        })
    }

    /// `n` tokens per second with a burst capacity of `n`, starting full
    /// (all `n` at once, then one every `1 s / n`).
    ///
    /// ```
    /// use tollgate::Quota;
    /// assert_eq!(Quota::per_second(50)?.capacity(), 50);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_second(n: u64) -> Result<Self, QuotaError> {
        Quota::new(n, n, Duration::from_secs(1))
    }

    /// `n` tokens per minute with a burst capacity of `n`. A new limiter
    /// starts full, so it admits all `n` at once and then one every
    /// `60 s / n`: for an even spread from the start, begin empty
    /// ([`with_initial_credit`](Self::with_initial_credit),
    /// [`InitialCredit::Empty`]) or take a smaller burst with
    /// [`new`](Self::new).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{InitialCredit, Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_minute(30)?, ManualClock::new());
    /// for _ in 0..30 {
    ///     bucket.try_acquire(1)?; // the whole burst, at once
    /// }
    /// assert_eq!(bucket.retry_after(1)?, Duration::from_secs(2)); // then one every 2 s
    /// let even = Quota::per_minute(30)?.with_initial_credit(InitialCredit::Empty)?;
    /// assert_eq!(TokenBucket::with_clock(even, ManualClock::new()).available(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_minute(n: u64) -> Result<Self, QuotaError> {
        Quota::new(n, n, Duration::from_secs(60))
    }

    /// `n` tokens per hour with a burst capacity of `n`. A new limiter
    /// starts full, so it admits all `n` at once and then one every
    /// `3600 s / n` (see [`per_minute`](Self::per_minute) for an even
    /// spread from the start).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_hour(1200)?, ManualClock::new());
    /// assert_eq!(bucket.available(), 1200);
    /// bucket.try_acquire(1200)?;
    /// assert_eq!(bucket.retry_after(1)?, Duration::from_secs(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_hour(n: u64) -> Result<Self, QuotaError> {
        Quota::new(n, n, Duration::from_secs(3600))
    }

    /// The same quota with another initial credit.
    ///
    /// ```
    /// use tollgate::{InitialCredit, Quota, QuotaError};
    ///
    /// let quota = Quota::per_second(5)?;
    /// assert!(quota.with_initial_credit(InitialCredit::Empty).is_ok());
    /// assert_eq!(
    ///     quota.with_initial_credit(InitialCredit::Tokens(6)),
    ///     Err(QuotaError::InitialCreditAboveCapacity { credit: 6, capacity: 5 }),
    /// );
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn with_initial_credit(self, initial: InitialCredit) -> Result<Self, QuotaError> {
        if let InitialCredit::Tokens(credit) = initial
            && credit > self.capacity()
        {
            return Err(QuotaError::InitialCreditAboveCapacity {
                credit,
                capacity: self.capacity(),
            });
        }
        Ok(Quota { initial, ..self })
    }

    /// The largest number of tokens the bucket holds, and so the largest cost
    /// it can ever admit.
    ///
    /// ```
    /// use tollgate::Quota;
    /// assert_eq!(Quota::per_second(8)?.capacity(), 8);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.gcra.capacity()
    }

    /// The refill rate as given: `tokens` per `period`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// assert_eq!(Quota::per_second(8)?.refill(), (8, Duration::from_secs(1)));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn refill(&self) -> (u64, Duration) {
        (self.tokens, self.period)
    }

    /// The most cost a bucket with this quota admits over any interval of
    /// length `elapsed` (`floor(B + r * elapsed)`, saturating): the envelope
    /// that [`docs/semantics.md`](crate::guide::semantics) proves, useful for capacity planning and for
    /// checking a run.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let quota = Quota::new(3, 2, Duration::from_secs(1))?;
    /// assert_eq!(quota.envelope(Duration::ZERO), 3);
    /// assert_eq!(quota.envelope(Duration::from_millis(1499)), 5);
    /// assert_eq!(quota.envelope(Duration::from_millis(1500)), 6);
    /// assert_eq!(Quota::per_second(1_000_000_000)?.envelope(Duration::MAX), u64::MAX);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn envelope(&self, elapsed: Duration) -> u64 {
        let period = self.period.as_nanos();
        // A saturated product still divides to more than u64::MAX, so the
        // result saturates as it should.
        let refilled = u128::from(self.tokens).saturating_mul(elapsed.as_nanos()) / period;
        u64::try_from(refilled)
            .unwrap_or(u64::MAX)
            .saturating_add(self.capacity())
    }

    /// The initial-credit policy.
    ///
    /// ```
    /// use tollgate::{InitialCredit, Quota};
    /// assert_eq!(Quota::per_second(8)?.initial_credit(), InitialCredit::Full);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn initial_credit(&self) -> InitialCredit {
        self.initial
    }

    /// Whether the emission interval (`period / tokens`) is represented
    /// exactly. It is whenever its reduced denominator in nanoseconds is at
    /// most 8 (1000/s, 3/s, 7/s, 1000 per 7 s, ...). Otherwise charges are
    /// rounded up, so the bucket admits very slightly less than asked and
    /// never more: the interval by less than an eighth of a nanosecond per
    /// token and at most 0.1 % (11/s), or, for faster irregular rates (bytes
    /// per second), each request by less than 3/8 ns
    /// ([`docs/semantics.md`](crate::guide::semantics), "Exactness").
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// assert!(Quota::per_second(7)?.is_exact());
    /// assert!(!Quota::per_second(11)?.is_exact());
    /// assert!(!Quota::new(1 << 30, 1 << 30, Duration::from_secs(1))?.is_exact());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_exact(&self) -> bool {
        self.gcra.is_exact()
    }

    pub(crate) fn gcra(&self) -> &Gcra {
        &self.gcra
    }

    /// The time one token takes to refill: `period / tokens`, rounded up to
    /// the nanosecond, since pacing on a slightly slower refill only waits
    /// a little longer (what a store reports, and what an HTTP field says
    /// of a full bucket).
    pub(crate) fn refill_interval(&self) -> Duration {
        let nanos = self
            .period
            .as_nanos()
            .div_ceil(u128::from(self.tokens.max(1)));
        u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
    }

    /// The time to refill the whole capacity from empty, rounded up to
    /// whole seconds, at least 1: the window a bucket advertises.
    pub(crate) fn refill_seconds(&self) -> u64 {
        // capacity * period / tokens, in nanoseconds, then up to seconds.
        // Both products fit in u128; `tokens` is never zero in a Quota.
        let numerator = u128::from(self.capacity()) * self.period.as_nanos();
        let denominator = u128::from(self.tokens.max(1)) * 1_000_000_000;
        let seconds = numerator.div_ceil(denominator).max(1);
        u64::try_from(seconds).unwrap_or(u64::MAX)
    }

    /// The quota of parts taken from a valid quota ([`Self::gcra`],
    /// [`Self::refill`], [`Self::initial_credit`]): a limiter whose quota
    /// changes keeps them in atomics and puts them back together.
    #[cfg(feature = "keyed")]
    pub(crate) fn from_parts(
        gcra: Gcra,
        (tokens, period): (u64, Duration),
        initial: InitialCredit,
    ) -> Quota {
        Quota {
            gcra,
            tokens,
            period,
            initial,
        }
    }
}
