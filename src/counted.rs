//! Opt-in decision counters: a limiter wrapped in [`Counted`] counts what it
//! admits and refuses; an unwrapped limiter pays nothing.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

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
    /// Requests admitted.
    pub admitted: u64,
    /// Tokens they spent.
    pub admitted_cost: u64,
    /// Requests refused for want of tokens (`Insufficient`).
    pub denied: u64,
    /// Tokens those refused requests asked for.
    pub denied_cost: u64,
    /// Requests refused for any other reason (a bad cost, a full key table).
    pub rejected: u64,
}

/// One thread's counters, on a cache line of their own.
#[derive(Debug, Default)]
struct Stripe {
    admitted: AtomicU64,
    admitted_cost: AtomicU64,
    denied: AtomicU64,
    denied_cost: AtomicU64,
    rejected: AtomicU64,
}

/// A limiter whose decisions are counted.
///
/// Counting is opt-in: the limiter types themselves carry no counters, so
/// one that is not wrapped pays nothing. A wrapped one adds two relaxed
/// increments per decision on a cache line its thread owns (threads are
/// spread over as many stripes as there are cores; `docs/benchmarks.md`
/// measures the cost). [`stats`](Self::stats) sums a snapshot; with feature
/// `metrics`, [`export`](Self::export) publishes it through the `metrics`
/// facade.
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
    stripes: Box<[CachePadded<Stripe>]>,
}

impl<L> Counted<L> {
    /// Wraps `limiter`, with a stripe of counters per available core.
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
            stripes: (0..cores).map(|_| CachePadded::default()).collect(),
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
                .sum()
        };
        DecisionStats {
            admitted: sum(|s| &s.admitted),
            admitted_cost: sum(|s| &s.admitted_cost),
            denied: sum(|s| &s.denied),
            denied_cost: sum(|s| &s.denied_cost),
            rejected: sum(|s| &s.rejected),
        }
    }

    /// Publishes the counts through the `metrics` facade (feature `metrics`)
    /// as counters `{prefix}_admitted_total`, `_admitted_cost_total`,
    /// `_denied_total`, `_denied_cost_total` and `_rejected_total`, set to
    /// their absolute values: call it from a periodic task, or before your
    /// exporter scrapes.
    ///
    /// ```
    /// use tollgate::{Counted, Quota, TokenBucket};
    ///
    /// let bucket = Counted::new(TokenBucket::new(Quota::per_second(10)?));
    /// bucket.try_acquire(1)?;
    /// bucket.export("api_global"); // no recorder installed: a no-op
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn export(&self, prefix: &str) {
        let stats = self.stats();
        for (name, value) in [
            ("admitted_total", stats.admitted),
            ("admitted_cost_total", stats.admitted_cost),
            ("denied_total", stats.denied),
            ("denied_cost_total", stats.denied_cost),
            ("rejected_total", stats.rejected),
        ] {
            metrics::counter!(format!("{prefix}_{name}")).absolute(value);
        }
    }

    /// Counts one decision of `cost` on this thread's stripe.
    #[inline]
    fn count<T>(&self, cost: u64, decision: Result<T, AcquireError>) -> Result<T, AcquireError> {
        let stripe = &self.stripes[crate::stripe::of(self.stripes.len())];
        let bump = |counter: &AtomicU64, by: u64| counter.fetch_add(by, Ordering::Relaxed);
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
}
