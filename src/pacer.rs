//! A pacer: admitted requests start evenly spaced, behind a bounded queue.

use std::time::Duration;

use crate::bucket::TokenBucket;
use crate::clock::{Clock, DefaultClock};
use crate::error::{AcquireError, QuotaError};
use crate::limit::Limit;
use crate::quota::Quota;

/// Spaces admitted requests at least `1/r` apart, for a downstream that
/// cannot take a burst at all (a payment processor, a legacy system); a
/// leaky bucket used as a meter.
///
/// Each request reserves the next free start time and is told how long to
/// wait for it; a request whose start would lie more than `max_wait`
/// ahead is refused at once, spending nothing, with the wait after which
/// the same call would be admitted. The queue is therefore bounded: at most
/// [`max_queue`](Self::max_queue) admitted requests wait or start at any
/// moment. Nothing queues inside the pacer; the waits are the callers' to
/// honour ([`reserve`](Self::reserve)) or are slept on tokio's timer
/// ([`acquire`](Self::acquire), feature `tokio`).
///
/// It is a [`TokenBucket`] of capacity 1 used through its reservation path,
/// so its promises are the bucket's ([`docs/semantics.md`](crate::guide::semantics),
/// "Pacing"): the due times of any two admissions are at least `1/r` apart
/// (the bucket's envelope with `B = 1`), each wait is its due time rounded
/// up to the nanosecond, and a cancelled async wait gives its slot back by
/// the one rule that never mints.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Pacer};
///
/// // One start every 100 ms, at most 300 ms of queue.
/// let pacer = Pacer::with_clock(10, Duration::from_secs(1), Duration::from_millis(300), ManualClock::new())?;
/// let waits: Vec<_> = (0..4).map(|_| pacer.reserve()).collect::<Result<_, _>>()?;
/// assert_eq!(waits, [0, 100, 200, 300].map(Duration::from_millis));
/// assert!(pacer.reserve().is_err()); // a fifth would wait 400 ms
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Pacer<C = DefaultClock> {
    bucket: TokenBucket<C>,
    max_wait: Duration,
}

impl Pacer<DefaultClock> {
    /// A pacer of `starts` per `period`, on the [`DefaultClock`], refusing
    /// requests that would wait more than `max_wait`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Pacer;
    ///
    /// // 25 starts a second, one every 40 ms; at most a second of queue.
    /// let pacer = Pacer::new(25, Duration::from_secs(1), Duration::from_secs(1))?;
    /// assert_eq!(pacer.reserve()?, Duration::ZERO);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(starts: u64, period: Duration, max_wait: Duration) -> Result<Self, QuotaError> {
        Pacer::with_clock(starts, period, max_wait, DefaultClock::new())
    }
}

impl<C: Clock> Pacer<C> {
    /// A pacer of `starts` per `period` reading time from `clock`. The
    /// first request starts at once; the rate's errors are the quota's
    /// ([`Quota::new`] with a capacity of 1).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Pacer, QuotaError};
    ///
    /// let second = Duration::from_secs(1);
    /// assert!(Pacer::with_clock(3, second, second, ManualClock::new()).is_ok());
    /// assert_eq!(
    ///     Pacer::with_clock(0, second, second, ManualClock::new()).unwrap_err(),
    ///     QuotaError::ZeroTokens,
    /// );
    /// ```
    pub fn with_clock(
        starts: u64,
        period: Duration,
        max_wait: Duration,
        clock: C,
    ) -> Result<Self, QuotaError> {
        Ok(Pacer {
            bucket: TokenBucket::with_clock(Quota::new(1, starts, period)?, clock),
            max_wait,
        })
    }

    /// Reserves the next start and returns how long to wait for it (zero
    /// when the pacer is idle), or refuses when that wait would exceed the
    /// maximum, spending nothing: [`AcquireError::Insufficient`] with the
    /// wait after which the same call would be admitted.
    ///
    /// The start is reserved when the call returns: a caller that does not
    /// go still holds its slot, so the one after it starts no earlier.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, ManualClock, Pacer};
    ///
    /// let clock = ManualClock::new();
    /// let pacer = Pacer::with_clock(1, Duration::from_secs(1), Duration::from_secs(1), &clock)?;
    /// assert_eq!(pacer.reserve()?, Duration::ZERO);
    /// assert_eq!(pacer.reserve()?, Duration::from_secs(1));
    /// assert_eq!(
    ///     pacer.reserve(),
    ///     Err(AcquireError::Insufficient { retry_after: Duration::from_secs(1) }),
    /// );
    /// clock.advance(Duration::from_millis(1500));
    /// assert_eq!(pacer.reserve()?, Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn reserve(&self) -> Result<Duration, AcquireError> {
        self.bucket.reserve(1, self.max_wait)
    }

    /// Reserves the next start and waits for it on tokio's timer: the async
    /// form of [`reserve`](Self::reserve), refusing at once when the wait
    /// would exceed the maximum.
    ///
    /// Cancellation-safe: a future dropped before its start gives the slot
    /// back by the one rule that never mints credit (exactly, when no later
    /// request has reserved since; nothing while a later request holds a
    /// later start, whose caller was promised it).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Pacer};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let pacer = Pacer::with_clock(2, Duration::from_secs(1), Duration::from_secs(1), ManualClock::new())?;
    /// pacer.acquire().await?;
    /// let started = tokio::time::Instant::now();
    /// pacer.acquire().await?; // the next start, 500 ms on
    /// assert_eq!(started.elapsed(), Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self) -> Result<(), AcquireError> {
        self.bucket.acquire(1, self.max_wait).await
    }

    /// The most admitted requests that can be waiting or starting at one
    /// instant: the one starting now and those whose starts fit within the
    /// maximum wait, `1 + floor(max_wait · r)`, saturating at `u64::MAX`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Pacer;
    ///
    /// let pacer = Pacer::new(10, Duration::from_secs(1), Duration::from_millis(250))?;
    /// assert_eq!(pacer.max_queue(), 3); // now, +100 ms, +200 ms
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_queue(&self) -> u64 {
        let (starts, period) = self.bucket.quota().refill();
        // `starts` times a `Duration` can pass `u128`; a saturated product
        // still divides (by at most 2^64) to more than `u64::MAX`.
        let within =
            u128::from(starts).saturating_mul(self.max_wait.as_nanos()) / period.as_nanos();
        u64::try_from(within).unwrap_or(u64::MAX).saturating_add(1)
    }

    /// The longest a request may be asked to wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Pacer;
    ///
    /// let pacer = Pacer::new(10, Duration::from_secs(1), Duration::from_millis(250))?;
    /// assert_eq!(pacer.max_wait(), Duration::from_millis(250));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The pace: `starts` per `period`, as given.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Pacer;
    ///
    /// let pacer = Pacer::new(10, Duration::from_secs(1), Duration::ZERO)?;
    /// assert_eq!(pacer.rate(), (10, Duration::from_secs(1)));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn rate(&self) -> (u64, Duration) {
        self.bucket.quota().refill()
    }

    /// The clock this pacer reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Pacer};
    ///
    /// let pacer = Pacer::with_clock(1, Duration::from_secs(1), Duration::ZERO, ManualClock::new())?;
    /// pacer.clock().advance(Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        self.bucket.clock()
    }
}
