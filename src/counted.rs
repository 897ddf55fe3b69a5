//! Opt-in decision counters: a limiter wrapped in [`Counted`] counts what it
//! admits and refuses; an unwrapped limiter pays nothing.

#[cfg(feature = "keyed")]
use std::borrow::Borrow;
#[cfg(feature = "keyed")]
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};
#[cfg(feature = "keyed")]
use crate::KeyedLimiter;
use crate::{AcquireError, Clock, TokenBucket};

/// Counts of a [`Counted`] limiter's decisions, summed over threads.
///
/// ```
/// use tollgate::DecisionStats;
///
/// assert_eq!(DecisionStats::default().admitted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionStats {
    /// Requests granted their tokens. A `reserve` or an async `acquire`
    /// counts when its tokens are reserved, before its wait.
    pub admitted: u64,
    /// Tokens they took.
    pub admitted_cost: u64,
    /// Requests refused for want of tokens (`Insufficient`).
    pub denied: u64,
    /// Tokens those refused requests asked for.
    pub denied_cost: u64,
    /// Requests refused for any other reason (a bad cost, a full key table).
    pub rejected: u64,
    /// Admissions that came with a non-zero wait (`reserve`, `acquire`),
    /// counted when the wait is granted: waits under way and abandoned
    /// ones included.
    pub delayed: u64,
    /// Those waits, summed as granted, in nanoseconds.
    pub delay_nanos: u64,
    /// Async `acquire`s dropped before their wait ended, whose tokens went
    /// back to the limiter. They are counted in `admitted` and `delayed`
    /// too: tokens in use are `admitted_cost` less what they gave back.
    pub abandoned: u64,
}

impl DecisionStats {
    /// Field by field, saturating.
    fn plus(self, other: DecisionStats) -> DecisionStats {
        DecisionStats {
            admitted: self.admitted.saturating_add(other.admitted),
            admitted_cost: self.admitted_cost.saturating_add(other.admitted_cost),
            denied: self.denied.saturating_add(other.denied),
            denied_cost: self.denied_cost.saturating_add(other.denied_cost),
            rejected: self.rejected.saturating_add(other.rejected),
            delayed: self.delayed.saturating_add(other.delayed),
            delay_nanos: self.delay_nanos.saturating_add(other.delay_nanos),
            abandoned: self.abandoned.saturating_add(other.abandoned),
        }
    }
}

/// One stripe of counters, on a cache line of its own.
#[derive(Debug, Default)]
struct Stripe {
    admitted: AtomicU64,
    admitted_cost: AtomicU64,
    denied: AtomicU64,
    denied_cost: AtomicU64,
    rejected: AtomicU64,
    delayed: AtomicU64,
    delay_nanos: AtomicU64,
    abandoned: AtomicU64,
}

impl Stripe {
    fn snapshot(&self) -> DecisionStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        DecisionStats {
            admitted: read(&self.admitted),
            admitted_cost: read(&self.admitted_cost),
            denied: read(&self.denied),
            denied_cost: read(&self.denied_cost),
            rejected: read(&self.rejected),
            delayed: read(&self.delayed),
            delay_nanos: read(&self.delay_nanos),
            abandoned: read(&self.abandoned),
        }
    }
}

/// A stripe, and whether the calling thread is its only writer.
#[derive(Clone, Copy)]
struct Writer<'a> {
    stripe: &'a Stripe,
    exclusive: bool,
}

impl Writer<'_> {
    /// Adds `by` to one of the stripe's counters, saturating (a total that
    /// reaches `u64::MAX` stays there rather than wrapping to small). An
    /// only writer loses nothing with a load and a store, a fraction of the
    /// cost of a locked add; a shared stripe needs the read-modify-write.
    /// Relaxed: only the sums are ever read.
    #[inline]
    fn add(self, field: fn(&Stripe) -> &AtomicU64, by: u64) {
        let counter = field(self.stripe);
        if self.exclusive {
            let sum = counter.load(Ordering::Relaxed).saturating_add(by);
            counter.store(sum, Ordering::Relaxed);
        } else {
            let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                Some(total.saturating_add(by))
            });
        }
    }

    /// Counts one admission of `cost` tokens.
    #[inline]
    fn admitted(self, cost: u64) {
        self.add(|s| &s.admitted, 1);
        self.add(|s| &s.admitted_cost, cost);
    }
}

/// A limiter whose decisions are counted.
///
/// Counting is opt-in: the limiter types themselves carry no counters, so
/// one that is not wrapped pays nothing. A wrapped one adds two counter
/// updates per decision (four for a decision with a wait) to a stripe that
/// only its thread writes, so they are plain loads and stores, with no
/// locked read-modify-write and no cache line shared between threads
/// ([`docs/benchmarks.md`](crate::guide::benchmarks) measures the cost). Stripes are indexed by a small
/// id each live thread holds; a thread beyond the stripes (more live
/// threads than four per core) or in its thread-local destructors counts on
/// one shared stripe with locked adds instead. [`stats`](Self::stats) sums
/// a snapshot; with feature `metrics`, [`DecisionStats::export`] publishes
/// it through the `metrics` facade.
///
/// ```
/// use tollgate::{Counted, ManualClock, Quota, TokenBucket};
///
/// let bucket = Counted::new(TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new()));
/// bucket.try_acquire(2)?;
/// assert!(bucket.try_acquire(1).is_err());
/// let stats = bucket.stats();
/// assert_eq!((stats.admitted, stats.admitted_cost, stats.denied), (1, 2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Counted<L> {
    limiter: L,
    /// Stripe `i` is written only by the live thread whose id is `i`
    /// (`crate::thread_id::current`).
    own: Box<[CachePadded<Stripe>]>,
    /// Written, with read-modify-writes, by every other thread.
    shared: CachePadded<Stripe>,
}

impl<L: std::fmt::Debug> std::fmt::Debug for Counted<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("limiter", &self.limiter)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<L> Counted<L> {
    /// Wraps `limiter`, with a stripe of counters for each of four live
    /// threads per core (at least 16 stripes: 128 bytes each).
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// assert_eq!(bucket.stats(), Default::default());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(limiter: L) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Counted {
            limiter,
            own: (0..(4 * cores).max(16))
                .map(|_| CachePadded::default())
                .collect(),
            shared: CachePadded::default(),
        }
    }

    /// The wrapped limiter, for calls that need not be counted.
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// assert_eq!(bucket.inner().quota().capacity(), 10);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn inner(&self) -> &L {
        &self.limiter
    }

    /// The counts so far, summed over threads. Each counter is read once;
    /// decisions made while summing may be partly included.
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// bucket.try_acquire(3)?;
    /// assert_eq!(bucket.stats().admitted_cost, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> DecisionStats {
        self.own
            .iter()
            .chain([&self.shared])
            .map(|stripe| stripe.snapshot())
            .fold(DecisionStats::default(), DecisionStats::plus)
    }

    /// The stripe this thread writes.
    #[inline]
    fn writer(&self) -> Writer<'_> {
        match crate::thread_id::current().and_then(|id| self.own.get(id)) {
            Some(own) => Writer {
                stripe: own,
                exclusive: true,
            },
            None => Writer {
                stripe: &self.shared,
                exclusive: false,
            },
        }
    }

    /// Counts one decision of `cost` on this thread's stripe.
    #[inline]
    fn count<T>(&self, cost: u64, decision: Result<T, AcquireError>) -> Result<T, AcquireError> {
        match &decision {
            Ok(_) => self.writer().admitted(cost),
            Err(error) => self.count_refusal(cost, error),
        }
        decision
    }

    #[inline]
    fn count_refusal(&self, cost: u64, error: &AcquireError) {
        let writer = self.writer();
        if let AcquireError::Insufficient { .. } = error {
            writer.add(|s| &s.denied, 1);
            writer.add(|s| &s.denied_cost, cost);
        } else {
            writer.add(|s| &s.rejected, 1);
        }
    }

    /// Counts a reservation of `cost` tokens that waits `wait`.
    fn count_reservation(&self, cost: u64, wait: Duration) {
        let writer = self.writer();
        writer.admitted(cost);
        if !wait.is_zero() {
            writer.add(|s| &s.delayed, 1);
            writer.add(|s| &s.delay_nanos, crate::clock::saturating_nanos(wait));
        }
    }
}

/// What a counted async `acquire` tells its counters.
#[cfg(feature = "tokio")]
struct Reservation<'a, L> {
    counted: &'a Counted<L>,
    cost: u64,
}

#[cfg(feature = "tokio")]
impl<L> crate::waiting::WaitObserver for Reservation<'_, L> {
    fn reserved(&self, wait: Duration) {
        self.counted.count_reservation(self.cost, wait);
    }

    fn abandoned(&self) {
        self.counted.writer().add(|s| &s.abandoned, 1);
    }
}

impl DecisionStats {
    /// Publishes these counts through the `metrics` facade (feature
    /// `metrics`) as counters `{prefix}_admitted_total`,
    /// `_admitted_cost_total`, `_denied_total`, `_denied_cost_total`,
    /// `_rejected_total`, `_delayed_total`, `_delay_nanos_total` and
    /// `_abandoned_total`, set to their absolute values: call it from a
    /// periodic task, or before your exporter scrapes.
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// bucket.try_acquire(1)?;
    /// bucket.stats().export("api_global"); // no recorder installed: a no-op
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn export(&self, prefix: &str) {
        crate::export::counters(
            prefix,
            &[
                ("admitted_total", self.admitted),
                ("admitted_cost_total", self.admitted_cost),
                ("denied_total", self.denied),
                ("denied_cost_total", self.denied_cost),
                ("rejected_total", self.rejected),
                ("delayed_total", self.delayed),
                ("delay_nanos_total", self.delay_nanos),
                ("abandoned_total", self.abandoned),
            ],
        );
    }
}

impl<C: Clock> Counted<TokenBucket<C>> {
    /// [`TokenBucket::try_acquire`], counted.
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// assert!(bucket.try_acquire(0).is_err());
    /// assert_eq!(bucket.stats().rejected, 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        self.count(cost, self.limiter.try_acquire(cost))
    }

    /// [`TokenBucket::reserve`], counted, with its wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Counted, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new()));
    /// bucket.try_acquire(2)?;
    /// assert_eq!(bucket.reserve(1, Duration::from_secs(1))?, Duration::from_millis(500));
    /// let stats = bucket.stats();
    /// assert_eq!((stats.admitted, stats.delayed, stats.delay_nanos), (2, 1, 500_000_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve(&self, cost: u64, max_wait: Duration) -> Result<Duration, AcquireError> {
        self.limiter
            .reserve(cost, max_wait)
            .inspect(|&wait| self.count_reservation(cost, wait))
            .inspect_err(|error| self.count_refusal(cost, error))
    }

    /// [`TokenBucket::acquire`], counted, with its wait and whether it was
    /// abandoned.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Counted, ManualClock, Quota, TokenBucket};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let bucket = Counted::new(TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new()));
    /// bucket.acquire(2, Duration::ZERO).await?;
    /// bucket.acquire(1, Duration::from_secs(1)).await?; // waits 500 ms
    /// assert_eq!((bucket.stats().delayed, bucket.stats().delay_nanos), (1, 500_000_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, cost: u64, max_wait: Duration) -> Result<(), AcquireError> {
        let reservation = Reservation {
            counted: self,
            cost,
        };
        self.limiter
            .acquire_observed(cost, max_wait, &reservation)
            .await
            .inspect_err(|error| self.count_refusal(cost, error))
    }
}

#[cfg(feature = "keyed")]
impl<K: Hash + Eq, C: Clock, S: BuildHasher + Clone> Counted<KeyedLimiter<K, C, S>> {
    /// [`KeyedLimiter::try_acquire`], counted.
    ///
    /// ```
    /// use tollgate::{Counted, KeyedLimiter, Quota};
    ///
    /// let limiter = Counted::new(KeyedLimiter::<u32>::new(Quota::per_second(1)?));
    /// limiter.try_acquire(&7, 1)?;
    /// assert!(limiter.try_acquire(&7, 1).is_err());
    /// assert_eq!(limiter.stats().denied, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.count(cost, self.limiter.try_acquire(key, cost))
    }

    /// [`KeyedLimiter::reserve`], counted, with its wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Counted, KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = Counted::new(
    ///     KeyedLimiter::builder(Quota::per_second(1)?).clock(ManualClock::new()).build::<u32>(),
    /// );
    /// limiter.try_acquire(&7, 1)?;
    /// assert_eq!(limiter.reserve(&7, 1, Duration::from_secs(1))?, Duration::from_secs(1));
    /// assert_eq!(limiter.stats().delay_nanos, 1_000_000_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.limiter
            .reserve(key, cost, max_wait)
            .inspect(|&wait| self.count_reservation(cost, wait))
            .inspect_err(|error| self.count_refusal(cost, error))
    }

    /// [`KeyedLimiter::acquire`], counted, with its wait and whether it was
    /// abandoned.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Counted, KeyedLimiter, ManualClock, Quota};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = Counted::new(
    ///     KeyedLimiter::builder(Quota::per_second(1)?).clock(ManualClock::new()).build::<u32>(),
    /// );
    /// limiter.acquire(&7, 1, Duration::ZERO).await?;
    /// limiter.acquire(&7, 1, Duration::from_secs(1)).await?; // waits 1 s
    /// assert_eq!(limiter.stats().delayed, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(), AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let reservation = Reservation {
            counted: self,
            cost,
        };
        self.limiter
            .acquire_observed(key, cost, max_wait, &reservation)
            .await
            .inspect_err(|error| self.count_refusal(cost, error))
    }
}
