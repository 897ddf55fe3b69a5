//! Opt-in decision counters: a limiter wrapped in [`Counted`] counts what it
//! admits and refuses; an unwrapped limiter pays nothing.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use thread_local::ThreadLocal;

use crate::{AcquireError, Clock, KeyedLimiter, TokenBucket};

/// Counts of a [`Counted`] limiter's decisions, summed over threads.
///
/// ```
/// use tollgate::DecisionStats;
///
/// assert_eq!(DecisionStats::default().admitted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionStats {
    /// Requests admitted (an async `acquire` once its wait has ended).
    pub admitted: u64,
    /// Tokens they spent.
    pub admitted_cost: u64,
    /// Requests refused for want of tokens (`Insufficient`).
    pub denied: u64,
    /// Tokens those refused requests asked for.
    pub denied_cost: u64,
    /// Requests refused for any other reason (a bad cost, a full key table).
    pub rejected: u64,
    /// Admissions that came with a wait (through `reserve` or `acquire`).
    pub delayed: u64,
    /// Those waits, summed, in nanoseconds.
    pub delay_nanos: u64,
    /// Async `acquire`s dropped before their wait ended, whose reservations
    /// went back to the limiter: counted in `delayed`, not in `admitted`.
    pub abandoned: u64,
}

/// One thread's counters, on a cache line of their own. Only that thread
/// writes them (a thread that exits hands its stripe to the next thread
/// given its id, after it); any thread may read them.
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

/// A limiter whose decisions are counted.
///
/// Counting is opt-in: the limiter types themselves carry no counters, so
/// one that is not wrapped pays nothing. A wrapped one adds two counter
/// updates per decision on a cache line that only its thread writes, so
/// they are plain loads and stores, with no locked read-modify-write and no
/// cache line shared between threads (`docs/benchmarks.md` measures the
/// cost). [`stats`](Self::stats) sums a snapshot; with feature `metrics`,
/// [`DecisionStats::export`] publishes it through the `metrics` facade.
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
#[derive(Debug)]
pub struct Counted<L> {
    limiter: L,
    stripes: ThreadLocal<CachePadded<Stripe>>,
}

impl<L> Counted<L> {
    /// Wraps `limiter`. Each thread's counters are allocated at its first
    /// decision.
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// assert_eq!(bucket.stats(), Default::default());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(limiter: L) -> Self {
        Counted {
            limiter,
            stripes: ThreadLocal::new(),
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
        let sum = |field: fn(&Stripe) -> &AtomicU64| {
            self.stripes
                .iter()
                .map(|stripe| field(stripe).load(Ordering::Relaxed))
                .fold(0, u64::saturating_add)
        };
        DecisionStats {
            admitted: sum(|s| &s.admitted),
            admitted_cost: sum(|s| &s.admitted_cost),
            denied: sum(|s| &s.denied),
            denied_cost: sum(|s| &s.denied_cost),
            rejected: sum(|s| &s.rejected),
            delayed: sum(|s| &s.delayed),
            delay_nanos: sum(|s| &s.delay_nanos),
            abandoned: sum(|s| &s.abandoned),
        }
    }

    /// This thread's counters.
    #[inline]
    fn stripe(&self) -> &Stripe {
        self.stripes.get_or_default()
    }

    /// Counts one decision of `cost` on this thread's stripe.
    #[inline]
    fn count<T>(&self, cost: u64, decision: Result<T, AcquireError>) -> Result<T, AcquireError> {
        let stripe = self.stripe();
        match &decision {
            Ok(_) => {
                bump(&stripe.admitted, 1);
                bump(&stripe.admitted_cost, cost);
            }
            Err(AcquireError::Insufficient { .. }) => {
                bump(&stripe.denied, 1);
                bump(&stripe.denied_cost, cost);
            }
            Err(_) => {
                bump(&stripe.rejected, 1);
            }
        }
        decision
    }

    /// Counts a wait that came with an admission, if there is one.
    fn count_delay(&self, wait: Duration) {
        if !wait.is_zero() {
            let stripe = self.stripe();
            bump(&stripe.delayed, 1);
            bump(&stripe.delay_nanos, crate::clock::saturating_nanos(wait));
        }
    }
}

/// Adds `by` to `counter` of this thread's own stripe. The thread is its
/// only writer, so a load and a store lose nothing, and cost a fraction of a
/// locked add; relaxed, since only the sums are ever read. Saturating: a
/// total that reaches `u64::MAX` stays there rather than wrapping to small.
#[inline]
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).saturating_add(by),
        Ordering::Relaxed,
    );
}

#[cfg(feature = "tokio")]
impl<L> crate::waiting::WaitObserver for Counted<L> {
    fn delayed(&self, wait: Duration) {
        self.count_delay(wait);
    }

    fn abandoned(&self) {
        bump(&self.stripe().abandoned, 1);
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
        let decision = self.count(cost, self.limiter.reserve(cost, max_wait));
        decision.inspect(|&wait| self.count_delay(wait))
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
        let decision = self.limiter.acquire_observed(cost, max_wait, self).await;
        self.count(cost, decision)
    }
}

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
        let decision = self.count(cost, self.limiter.reserve(key, cost, max_wait));
        decision.inspect(|&wait| self.count_delay(wait))
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
        let decision = self
            .limiter
            .acquire_observed(key, cost, max_wait, self)
            .await;
        self.count(cost, decision)
    }
}
