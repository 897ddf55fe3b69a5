//! The local allowance: a node's hot path served from tokens leased from a
//! shared store, refilled in the background.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use atomic_float::AtomicF64;
use tokio::runtime::Handle;

use crate::clock::saturating_nanos;
use crate::shared::pacing::{MIN_PAUSE, Pacer, Reply, failure_backoff};
use crate::shared::pool::{LeasePool, Take};
use crate::shared::{Grant, Lease, Store};
use crate::{AcquireError, Quota, TokenBucket};

/// The most tokens a pool can hold (`LeasePool` counts in 63 bits): a lease
/// asks for at most what still fits.
const POOL_LIMIT: u64 = u64::MAX >> 1;

/// A refill claim, ended exactly once: by [`Claim::land`], or on drop (a
/// failed call, or a refill cancelled or panicking before it ended), so
/// the in-flight bit can never be left set. A drop after the store call
/// started records a failure, since the call may have reached the store; a
/// drop before it (a refill cancelled in its pause) does not.
struct Claim<'a, S: Store> {
    inner: &'a Inner<S>,
    store_called: bool,
    /// False once the store answered with a refusal of this key: a
    /// failure, but not an outage.
    unavailable: bool,
}

impl<S: Store> Claim<'_, S> {
    fn land(self, granted: u64) {
        let inner = self.inner;
        std::mem::forget(self);
        inner.pool.land(granted);
        inner.landed.notify_waiters();
    }
}

impl<S: Store> Drop for Claim<'_, S> {
    fn drop(&mut self) {
        if self.store_called {
            self.inner.record_failure(self.unavailable);
        }
        self.inner.pool.land(0);
        self.inner.landed.notify_waiters();
    }
}

/// Adds to a cold-path counter, saturating: a store reporting absurd grants
/// must not wrap the books.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    // fetch_update cannot fail here: the closure always returns Some.
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        Some(c.saturating_add(n))
    });
}

/// What a [`LocalAllowance`] does when its pool is empty and its store could
/// not be reached on the last attempt. A caller's explicit choice: there is
/// no default.
///
/// ```
/// use tollgate::{Quota, shared::FailurePolicy};
///
/// // Ten nodes share 1000/s: alone, each may admit a tenth of it.
/// let policy = FailurePolicy::Fallback(Quota::per_second(100)?);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Deny ([`AcquireError::StoreUnavailable`]): the shared bound is never
    /// exceeded, at the price of an outage while the store is down.
    Closed,
    /// Admit everything: availability over the bound. Counted in
    /// [`AllowanceStats::failed_open`].
    Open,
    /// Admit from a local bucket with this (conservative) quota, for example
    /// the shared quota divided by the expected number of nodes. Counted in
    /// [`AllowanceStats::fallback`].
    Fallback(Quota),
}

/// How a [`LocalAllowance`] sizes and returns its leases.
///
/// ```
/// use std::time::Duration;
/// use tollgate::shared::{AllowanceConfig, FailurePolicy};
///
/// let config = AllowanceConfig {
///     max_lease: 500,
///     ..AllowanceConfig::new(FailurePolicy::Closed)
/// };
/// assert_eq!(config.lease_period, Duration::from_millis(100));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct AllowanceConfig {
    /// The fewest tokens one lease asks for (at least 1).
    pub min_lease: u64,
    /// The most tokens one lease asks for: what one node can strand at most
    /// per lease, and the largest cost a single call may ask for (with the
    /// store's capacity, once a grant has told it). Any value from
    /// `min_lease` up; a lease never asks for more than the pool can hold
    /// (`2^63 - 1` tokens).
    pub max_lease: u64,
    /// A lease asks for the smoothed local demand over this long: longer
    /// means fewer round trips and more tokens held idle per node. After a
    /// grant smaller than asked for, or one that left the store less than
    /// a batch (the shared budget is exhausted, or about to be), the next
    /// request waits until this node's share of the refill is worth
    /// a lease ([`docs/distributed.md`](crate::guide::distributed), "Pacing"), and at least a quarter
    /// of this (taken between 1 ms and 1 s); keep a quarter of it below the
    /// shared bucket's fill time `B / r`, or refill is wasted while a lone
    /// node waits. Any value, zero and `Duration::MAX` included.
    pub lease_period: Duration,
    /// Unused tokens go back to the store after the pool has been idle this
    /// long (`None`: only on shutdown or drop); checked at most once a
    /// millisecond, so `Some(Duration::ZERO)` means "after 1 to 2 ms".
    pub idle_return: Option<Duration>,
    /// The longest a store call may take; a call that times out counts as
    /// spent (its tokens, if any were granted, are stranded). Not zero
    /// ([`AllowanceError::ZeroTimeout`]); `Duration::MAX` waits as long as
    /// the store takes.
    pub timeout: Duration,
    /// What to do when the pool is empty and the store unreachable.
    pub on_failure: FailurePolicy,
}

impl AllowanceConfig {
    /// Defaults (leases of 1 to 1000 tokens sized to 100 ms of demand, idle
    /// return after 1 s, a 50 ms timeout) with the given failure policy.
    ///
    /// ```
    /// use tollgate::shared::{AllowanceConfig, FailurePolicy};
    ///
    /// assert_eq!(AllowanceConfig::new(FailurePolicy::Open).max_lease, 1000);
    /// ```
    pub fn new(on_failure: FailurePolicy) -> Self {
        AllowanceConfig {
            min_lease: 1,
            max_lease: 1000,
            lease_period: Duration::from_millis(100),
            idle_return: Some(Duration::from_secs(1)),
            timeout: Duration::from_millis(50),
            on_failure,
        }
    }

    /// The configuration's own errors: lease bounds and a zero timeout.
    pub(crate) fn validate(&self) -> Result<(), AllowanceError> {
        if self.min_lease == 0 || self.min_lease > self.max_lease {
            return Err(AllowanceError::LeaseBounds);
        }
        if self.timeout.is_zero() {
            return Err(AllowanceError::ZeroTimeout);
        }
        Ok(())
    }
}

/// Where an admitted request's tokens came from.
///
/// ```
/// use tollgate::shared::Source;
///
/// assert_ne!(Source::Lease, Source::FailedOpen);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Leased from the store: within the shared bound.
    Lease,
    /// The store was unreachable and the policy is [`FailurePolicy::Open`].
    FailedOpen,
    /// The store was unreachable; the fallback quota admitted it.
    Fallback,
}

/// Counters of a [`LocalAllowance`], kept off the hot path (updated by
/// refills, returns and failure handling only).
///
/// ```
/// use tollgate::shared::AllowanceStats;
///
/// assert_eq!(AllowanceStats::default().leases, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllowanceStats {
    /// Store calls that asked for a lease (round trips), failed ones
    /// included.
    pub leases: u64,
    /// Tokens the store granted in all.
    pub leased: u64,
    /// Tokens given back to the store.
    pub returned: u64,
    /// Tokens debited from the store that this node will never spend nor
    /// give back (a failed return, tokens of older leases at return, what a
    /// grant held beyond the ask); a return in flight counts here until the
    /// store confirms it.
    pub stranded: u64,
    /// Store calls that failed or timed out.
    pub store_errors: u64,
    /// Tokens admitted by [`FailurePolicy::Open`].
    pub failed_open: u64,
    /// Tokens admitted by [`FailurePolicy::Fallback`].
    pub fallback: u64,
    /// The largest single grant so far (`leased / (leases - store_errors)`
    /// is the mean).
    pub largest_lease: u64,
    /// Tokens in the local pool now.
    pub pooled: u64,
}

impl AllowanceStats {
    /// Publishes this snapshot through the `metrics` facade (feature
    /// `metrics`): counters `{prefix}_leases_total`,
    /// `_leased_tokens_total`, `_returned_tokens_total`,
    /// `_stranded_tokens_total`, `_store_errors_total`,
    /// `_failed_open_tokens_total` and `_fallback_tokens_total` at their
    /// absolute values, and gauges `{prefix}_largest_lease_tokens` and
    /// `{prefix}_pooled_tokens`.
    ///
    /// ```
    /// use tollgate::shared::AllowanceStats;
    ///
    /// AllowanceStats::default().export("checkout_budget"); // no recorder installed: a no-op
    /// ```
    #[cfg(feature = "metrics")]
    pub fn export(&self, prefix: &str) {
        crate::export::counters(
            prefix,
            &[
                ("leases_total", self.leases),
                ("leased_tokens_total", self.leased),
                ("returned_tokens_total", self.returned),
                ("stranded_tokens_total", self.stranded),
                ("store_errors_total", self.store_errors),
                ("failed_open_tokens_total", self.failed_open),
                ("fallback_tokens_total", self.fallback),
            ],
        );
        crate::export::gauges(
            prefix,
            &[
                ("largest_lease_tokens", self.largest_lease),
                ("pooled_tokens", self.pooled),
            ],
        );
    }
}

/// Why a [`LocalAllowance`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllowanceError {
    /// Built outside a tokio runtime: refills run as tokio tasks.
    #[error("a local allowance must be built inside a tokio runtime")]
    NoRuntime,
    /// `min_lease` was zero or above `max_lease`.
    #[error("lease bounds must satisfy 1 <= min_lease <= max_lease")]
    LeaseBounds,
    /// `timeout` was zero: every call to a remote store would time out,
    /// stranding whatever it debited.
    #[error("the store timeout must be longer than zero")]
    ZeroTimeout,
    /// A keyed allowance's demand thresholds were not
    /// `cold_below < hot_at`: with no gap between them a key at the
    /// threshold would switch between leased and per-request every sample.
    #[error("demand thresholds must satisfy cold_below < hot_at")]
    DemandThresholds,
    /// A keyed allowance's `sample_every` was zero: demand is a rate over
    /// that interval.
    #[error("the demand sampling interval must be longer than zero")]
    ZeroSampleInterval,
}

/// A node's share of a budget held by a [`Store`]: the hot path takes from
/// a local pool of leased tokens (one compare-and-swap, no I/O, no lock, no
/// await); when the pool falls below a low-water mark, one refill (never
/// two) asks the store for a lease in the background.
///
/// **The bound.** Tokens enter the pool only after the store debited them,
/// and every admission takes from the pool, so over all nodes sharing a key,
/// admitted ≤ granted ≤ `B + r·t` of the store's quota, whatever the
/// interleaving and whatever fails (admissions by
/// [`FailurePolicy::Open`]/[`FailurePolicy::Fallback`] excepted, which are
/// counted). A lease whose reply is lost or late strands its tokens: fewer
/// admitted, never more. Returns are sent once, never retried.
/// [`docs/distributed.md`](crate::guide::distributed) has the proof and the trade-offs.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::Quota;
/// use tollgate::shared::{AllowanceConfig, FailurePolicy, LocalAllowance, LocalStore};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// let store = Arc::new(LocalStore::new(Quota::per_second(1000)?));
/// let node = LocalAllowance::new(store, "customer-7", AllowanceConfig::new(FailurePolicy::Closed))?;
/// node.refill().await?; // warm the pool before serving
/// assert!(node.try_acquire(1).is_ok());
/// node.shutdown().await; // unused tokens go back to the store
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LocalAllowance<S: Store> {
    inner: Arc<Inner<S>>,
}

#[derive(Debug)]
struct Inner<S: Store> {
    store: Arc<S>,
    key: String,
    config: AllowanceConfig,
    pool: LeasePool,
    /// Refill when the pool falls below this (half the last lease size).
    low_water: AtomicU64,
    /// The largest cost a call can ever be served: `max_lease`, the store's
    /// capacity once a grant has told it, and what a pool can hold.
    largest_cost: AtomicU64,
    /// Smoothed local demand, tokens per second.
    demand: AtomicF64,
    /// Whether the last store call failed with the store unreachable:
    /// failure policy in force.
    degraded: AtomicBool,
    /// Whether the last store call was refused for this key
    /// ([`Store::unavailable`] false): callers the pool cannot serve get
    /// [`AcquireError::StoreRefused`], never the failure policy.
    refused: AtomicBool,
    /// How long a denied caller should wait, in nanoseconds: the store's
    /// last `retry_after`, or the last refill's duration.
    retry_hint: AtomicU64,
    fallback: Option<TokenBucket>,
    /// The largest cost a caller found the pool short of since the last
    /// lease: the next lease asks for at least that, so a call costing more
    /// than the demand-sized lease is not refused forever.
    shortfall: AtomicU64,
    /// Woken whenever a refill ends, for callers of `acquire`.
    landed: tokio::sync::Notify,
    runtime: Handle,
    /// Cold-path state: the last lease (for returns), demand sampling.
    books: Mutex<Books>,
    stats: Stats,
}

#[derive(Debug)]
struct Books {
    last_lease: Lease,
    /// The next lease request waits until then: after a scarce grant, the
    /// shared budget is exhausted or nearly so, and asking again at once
    /// would cost a round trip per trickle of refill; after a failure, the
    /// store is down, and asking at once would cost one per request.
    next_refill: tokio::time::Instant,
    /// Failed refills in a row.
    failures: u32,
    /// When to ask again after a scarce grant (short, or leaving the key
    /// nearly empty) or a failure.
    pacer: Pacer,
    /// When demand was last sampled (on tokio's clock, which tests can
    /// pause), and the tokens spent by then.
    sampled_at: tokio::time::Instant,
    spent_by_then: u64,
}

#[derive(Debug, Default)]
struct Stats {
    leases: AtomicU64,
    leased: AtomicU64,
    returned: AtomicU64,
    stranded: AtomicU64,
    store_errors: AtomicU64,
    failed_open: AtomicU64,
    fallback: AtomicU64,
    largest_lease: AtomicU64,
}

impl<S: Store> LocalAllowance<S> {
    /// An allowance of `key` in `store`, with an empty pool. Must be called
    /// inside a tokio runtime, on which refills and returns will run.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, shared::*};
    ///
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let outside = LocalAllowance::new(store, "k", AllowanceConfig::new(FailurePolicy::Closed));
    /// assert_eq!(outside.err(), Some(AllowanceError::NoRuntime));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(
        store: Arc<S>,
        key: impl Into<String>,
        config: AllowanceConfig,
    ) -> Result<Self, AllowanceError> {
        config.validate()?;
        let runtime = Handle::try_current().map_err(|_| AllowanceError::NoRuntime)?;
        let fallback = match config.on_failure {
            FailurePolicy::Fallback(quota) => Some(TokenBucket::new(quota)),
            FailurePolicy::Closed | FailurePolicy::Open => None,
        };
        let inner = Arc::new(Inner {
            store,
            key: key.into(),
            config,
            pool: LeasePool::new(),
            low_water: AtomicU64::new(config.min_lease.div_ceil(2)),
            largest_cost: AtomicU64::new(config.max_lease.min(POOL_LIMIT)),
            demand: AtomicF64::new(0.0),
            degraded: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            retry_hint: AtomicU64::new(0),
            fallback,
            shortfall: AtomicU64::new(0),
            landed: tokio::sync::Notify::new(),
            runtime,
            books: Mutex::new(Books {
                last_lease: Lease::NONE,
                next_refill: tokio::time::Instant::now(),
                failures: 0,
                pacer: Pacer::new(config.max_lease),
                sampled_at: tokio::time::Instant::now(),
                spent_by_then: 0,
            }),
            stats: Stats::default(),
        });
        if let Some(idle) = config.idle_return {
            inner
                .runtime
                .spawn(watch_idle(Arc::downgrade(&inner), idle));
        }
        Ok(LocalAllowance { inner })
    }

    /// Takes `cost` tokens from the pool now, or refuses; never waits. A
    /// take that leaves the pool low starts one background refill. An empty
    /// pool refuses with a short `retry_after` (a refill is on its way) —
    /// unless the store was unreachable on the last attempt, when the
    /// [`FailurePolicy`] decides.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{AcquireError, Quota, shared::*};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(5)?));
    /// let node = LocalAllowance::new(store, "k", AllowanceConfig::new(FailurePolicy::Closed))?;
    /// // The pool starts empty: the first call starts a refill and is refused.
    /// assert!(matches!(node.try_acquire(1), Err(AcquireError::Insufficient { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<Source, AcquireError> {
        let inner = &self.inner;
        if cost == 0 {
            return Err(AcquireError::ZeroCost);
        }
        let largest = inner.largest_cost.load(Ordering::Relaxed);
        if cost > largest {
            return Err(AcquireError::ExceedsCapacity {
                cost,
                capacity: largest,
            });
        }
        match inner
            .pool
            .take(cost, inner.low_water.load(Ordering::Relaxed))
        {
            Take::Taken { refill } => {
                if refill {
                    spawn_refill(inner);
                }
                Ok(Source::Lease)
            }
            Take::Short { refill } => {
                inner.shortfall.fetch_max(cost, Ordering::Relaxed);
                if refill {
                    spawn_refill(inner);
                }
                inner.when_short(cost)
            }
        }
    }

    /// Takes `cost` tokens, waiting up to `max_wait` for refills to land
    /// when the pool is short: for callers that prefer a short delay to a
    /// refusal, and for sparse traffic, whose pool is often empty (idle
    /// returns give tokens back between requests). Refuses as
    /// [`try_acquire`](Self::try_acquire) does once `max_wait` has passed
    /// (`Duration::MAX`: no deadline; a store failure or a cost above the
    /// capacity still ends the wait); cancelling the future takes nothing.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::{Quota, shared::*};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(5)?));
    /// let node = LocalAllowance::new(store, "k", AllowanceConfig::new(FailurePolicy::Closed))?;
    /// // The pool starts empty; this waits for the first lease.
    /// assert_eq!(node.acquire(1, Duration::from_millis(100)).await, Ok(Source::Lease));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn acquire(&self, cost: u64, max_wait: Duration) -> Result<Source, AcquireError> {
        // None past the end of tokio's clock: no deadline at all.
        let deadline = tokio::time::Instant::now().checked_add(max_wait);
        loop {
            // Registered before the attempt, so a landing between the
            // attempt and the wait still wakes this caller. A refusal for
            // want of tokens always has a landing to come: the attempt
            // either claimed a refill or saw one in flight (`LeasePool`),
            // and one that has landed since has already notified.
            let landed = self.inner.landed.notified();
            match self.try_acquire(cost) {
                Err(AcquireError::Insufficient { .. })
                    if deadline.is_none_or(|at| tokio::time::Instant::now() < at) =>
                {
                    match deadline {
                        Some(at) => {
                            if tokio::time::timeout_at(at, landed).await.is_err() {
                                return self.try_acquire(cost);
                            }
                        }
                        None => landed.await,
                    }
                }
                outcome => return outcome,
            }
        }
    }

    /// Asks the store for a lease now and waits for it, unless a refill is
    /// already in flight (then returns `Ok(0)` at once). Returns the tokens
    /// granted. Useful to warm the pool before serving.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, shared::*};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = LocalAllowance::new(store, "k", AllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert!(node.refill().await? >= 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn refill(&self) -> Result<u64, RefillError<S::Error>> {
        if !self.inner.pool.claim_refill() {
            return Ok(0);
        }
        self.inner.refill_claimed().await
    }

    /// Gives every unused token back to the store (once; a failed return
    /// strands them) and returns how many were given back.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, shared::*};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = LocalAllowance::new(store.clone(), "k", AllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.refill().await?;
    /// node.shutdown().await;
    /// assert_eq!(store.limiter().available("k"), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn shutdown(&self) -> u64 {
        self.inner.give_back().await
    }

    /// Tokens in the local pool now.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, shared::*};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = LocalAllowance::new(store, "k", AllowanceConfig::new(FailurePolicy::Closed))?;
    /// assert_eq!(node.pooled(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pooled(&self) -> u64 {
        self.inner.pool.tokens()
    }

    /// A snapshot of the counters.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, shared::*};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// let store = Arc::new(LocalStore::new(Quota::per_second(10)?));
    /// let node = LocalAllowance::new(store, "k", AllowanceConfig::new(FailurePolicy::Closed))?;
    /// node.refill().await?;
    /// assert_eq!(node.stats().leases, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> AllowanceStats {
        // The pool first: a refill raises `leased` before the pool, so a
        // snapshot read in this order never shows more pooled than leased.
        let pooled = self.pooled();
        let s = &self.inner.stats;
        let read = |counter: &AtomicU64| counter.load(Ordering::Acquire);
        AllowanceStats {
            leases: read(&s.leases),
            leased: read(&s.leased),
            returned: read(&s.returned),
            stranded: read(&s.stranded),
            store_errors: read(&s.store_errors),
            failed_open: read(&s.failed_open),
            fallback: read(&s.fallback),
            largest_lease: read(&s.largest_lease),
            pooled,
        }
    }
}

impl<S: Store> Drop for LocalAllowance<S> {
    /// Returns the unused tokens in the background, best effort, once a
    /// refill in flight has landed (so its lease goes back too): if the
    /// runtime is shutting down, they are stranded.
    fn drop(&mut self) {
        let inner = Arc::clone(&self.inner);
        self.inner.runtime.spawn(async move {
            inner.close().await;
        });
    }
}

/// Why [`LocalAllowance::refill`] brought nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RefillError<E: std::error::Error + 'static> {
    /// The store refused or could not be reached.
    #[error("store call failed: {0}")]
    Store(#[source] E),
    /// The store did not answer within the configured timeout; whatever it
    /// granted is stranded.
    #[error("store call timed out")]
    Timeout,
}

fn spawn_refill<S: Store>(inner: &Arc<Inner<S>>) {
    let inner = Arc::clone(inner);
    let runtime = inner.runtime.clone();
    runtime.spawn(async move {
        // Failures are counted in the stats and handled by the policy.
        let _ = inner.refill_claimed().await;
    });
}

/// Returns the pool's tokens once it has sat unchanged for `idle`.
async fn watch_idle<S: Store>(inner: Weak<Inner<S>>, idle: Duration) {
    let idle = idle.max(MIN_PAUSE);
    let mut last = None;
    loop {
        tokio::time::sleep(idle).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = (
            inner.pool.tokens(),
            inner.stats.leases.load(Ordering::Relaxed),
        );
        if last == Some(now) && now.0 > 0 {
            inner.give_back().await;
        }
        last = Some((
            inner.pool.tokens(),
            inner.stats.leases.load(Ordering::Relaxed),
        ));
    }
}

impl<S: Store> Inner<S> {
    /// The refusal or admission for a caller the pool could not serve.
    #[cold]
    fn when_short(&self, cost: u64) -> Result<Source, AcquireError> {
        if self.refused.load(Ordering::Acquire) {
            return Err(AcquireError::StoreRefused);
        }
        if !self.degraded.load(Ordering::Acquire) {
            // Never zero: a refused caller told to retry at once would spin.
            let hint = Duration::from_nanos(self.retry_hint.load(Ordering::Relaxed));
            return Err(AcquireError::Insufficient {
                retry_after: hint.max(MIN_PAUSE),
            });
        }
        match (self.config.on_failure, &self.fallback) {
            (FailurePolicy::Open, _) => {
                add(&self.stats.failed_open, cost);
                Ok(Source::FailedOpen)
            }
            (FailurePolicy::Fallback(_), Some(bucket)) => {
                crate::Limit::try_acquire(bucket, cost)?;
                add(&self.stats.fallback, cost);
                Ok(Source::Fallback)
            }
            _ => Err(AcquireError::StoreUnavailable),
        }
    }

    /// Runs the refill this caller claimed, and always ends it: a guard
    /// lands nothing if this future is dropped or the store panics before
    /// the end. Holding the claim while waiting for the next refill time
    /// keeps every other caller from asking meanwhile.
    async fn refill_claimed(&self) -> Result<u64, RefillError<S::Error>> {
        let mut claim = Claim {
            inner: self,
            store_called: false,
            unavailable: true,
        };
        let not_before = self.lock_books().next_refill;
        if not_before > tokio::time::Instant::now() {
            tokio::time::sleep_until(not_before).await;
        }
        // Only the claimant adds to the pool: what fits now fits at landing.
        let want = self.lease_size().min(POOL_LIMIT - self.pool.tokens());
        if want == 0 {
            claim.land(0);
            return Ok(0);
        }
        let started = Instant::now();
        let since_last_call = self.lock_books().pacer.calling(tokio::time::Instant::now());
        let call = tokio::time::timeout(self.config.timeout, self.store.acquire(&self.key, want));
        claim.store_called = true;
        add(&self.stats.leases, 1);
        match call.await {
            Ok(Ok(grant)) => {
                let granted = self.accept(grant, want, started, since_last_call);
                claim.land(granted);
                Ok(granted)
            }
            // Either way the store may have debited a lease we will never
            // see: counted as spent, never asked for again as if lost.
            // Dropping the claim records the failure and ends the refill.
            Ok(Err(error)) => {
                claim.unavailable = S::unavailable(&error);
                drop(claim);
                Err(RefillError::Store(error))
            }
            Err(_elapsed) => {
                drop(claim);
                Err(RefillError::Timeout)
            }
        }
    }

    /// Books what the store answered to a request for `want` tokens and
    /// returns the tokens for the pool. Nothing the store says is trusted
    /// beyond what was asked: at most `want` tokens enter the pool (any
    /// excess is stranded), the receipt kept for returns covers at most
    /// those, and the pause a scarce grant sets (`pacing`) is at least 1 ms
    /// and at most 10 s, whatever its `retry_after` or refill interval. The
    /// store's capacity bounds every later cost.
    fn accept(
        &self,
        grant: Grant,
        want: u64,
        started: Instant,
        since_last_call: Option<Duration>,
    ) -> u64 {
        self.degraded.store(false, Ordering::Release);
        self.refused.store(false, Ordering::Release);
        let largest = self.config.max_lease.min(grant.capacity).min(POOL_LIMIT);
        self.largest_cost.store(largest, Ordering::Relaxed);
        let tokens = grant.tokens.min(want);
        add(&self.stats.leased, grant.tokens);
        add(&self.stats.stranded, grant.tokens - tokens);
        self.stats
            .largest_lease
            .fetch_max(tokens, Ordering::Relaxed);
        let mut books = self.lock_books();
        books.failures = 0;
        if tokens > 0 {
            books.last_lease = Lease {
                granted: grant.lease.granted.min(tokens),
                at: grant.lease.at,
            };
        }
        let reply = Reply {
            asked: want,
            granted: tokens,
            remaining: grant.remaining,
            retry_after: grant.retry_after,
            refill_interval: grant.refill_interval,
            capacity: grant.capacity,
        };
        let hint = if books.pacer.is_scarce(&reply) {
            let pause =
                books
                    .pacer
                    .after_scarce(since_last_call, reply, self.config.lease_period / 4);
            books.next_refill = tokio::time::Instant::now() + pause;
            // Callers are told the store's own wait when it is longer: the
            // node asks again sooner only to notice a change early.
            pause.max(grant.retry_after)
        } else {
            books.pacer.after_full(grant.capacity);
            started.elapsed()
        };
        self.retry_hint
            .store(saturating_nanos(hint), Ordering::Relaxed);
        tokens
    }

    /// Records a failed refill: the failure policy comes into force, and
    /// the next attempt waits a backoff that doubles with each failure in a
    /// row, from a quarter lease period up to 1 s, so a store that fails
    /// fast is not asked once per request.
    /// A refusal of this key (`unavailable` false) backs off the same way
    /// but refuses callers instead of applying the failure policy.
    fn record_failure(&self, unavailable: bool) {
        // Flagged first, so that whoever sees the error counted also sees
        // the failure policy (or the refusal) in force.
        if unavailable {
            self.refused.store(false, Ordering::Release);
            self.degraded.store(true, Ordering::Release);
        } else {
            // The store answered: it is up.
            self.refused.store(true, Ordering::Release);
            self.degraded.store(false, Ordering::Release);
        }
        self.stats.store_errors.fetch_add(1, Ordering::Release);
        let mut books = self.lock_books();
        books.failures = books.failures.saturating_add(1);
        let backoff = failure_backoff(self.config.lease_period, books.failures);
        books.next_refill = tokio::time::Instant::now() + backoff;
    }

    /// The next lease's size from the smoothed demand, or what pacing asks
    /// for if more (a second of demand up to a batch, and at least a batch
    /// while the budget is exhausted), within the bounds; also moves the
    /// low-water mark to half the demand-sized lease (not the paced ask: a
    /// node whose demand is below its share of an exhausted budget refills
    /// when its pool runs low, instead of piling up batches it cannot
    /// spend while other nodes refuse).
    fn lease_size(&self) -> u64 {
        let spent = self.spent();
        let (demand, least) = {
            let mut books = self.lock_books();
            let elapsed = books.sampled_at.elapsed().as_secs_f64();
            let rate = spent.saturating_sub(books.spent_by_then) as f64 / elapsed.max(1e-6);
            books.sampled_at = tokio::time::Instant::now();
            books.spent_by_then = spent;
            // Half old, half new: follows a change of demand within a few
            // leases without chasing every burst.
            let old = self.demand.load(Ordering::Relaxed);
            let smoothed = if old == 0.0 {
                rate
            } else {
                0.5 * old + 0.5 * rate
            };
            self.demand.store(smoothed, Ordering::Relaxed);
            (smoothed, books.pacer.least_ask(smoothed))
        };
        let wanted = (demand * self.config.lease_period.as_secs_f64()).ceil();
        // `as` saturates for floats; the clamp bounds it either way. (Not
        // by the store's capacity: a grant of less than asked is what tells
        // an exhausted budget, and sets the pause before the next request.)
        let (min, max) = (self.config.min_lease, self.config.max_lease);
        let by_demand = (wanted as u64)
            .max(self.shortfall.swap(0, Ordering::Relaxed))
            .clamp(min, max);
        self.low_water
            .store(by_demand.div_ceil(2), Ordering::Relaxed);
        by_demand.max(least).clamp(min, max)
    }

    /// Tokens spent from leases so far (granted, less pooled and returned
    /// and stranded ones). An estimate while refills and returns run.
    fn spent(&self) -> u64 {
        let s = &self.stats;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        load(&s.leased)
            .saturating_sub(load(&s.returned))
            .saturating_sub(load(&s.stranded))
            .saturating_sub(self.pool.tokens())
    }

    /// Drains the pool and gives the tokens back, once, against the last
    /// lease's receipt. Which lease a pooled token came from does not matter
    /// to the store, which only sees grants; what matters is that no receipt
    /// is used for more than it granted, so the tokens given back are taken
    /// off the receipt. Tokens beyond it came from older leases, whose
    /// receipts are not kept: they are stranded. The drained tokens count as
    /// stranded until the store confirms the return, so a return cancelled
    /// while in flight (which may or may not have reached the store) leaves
    /// the books whole.
    async fn give_back(&self) -> u64 {
        let drained = self.pool.drain();
        if drained == 0 {
            return 0;
        }
        add(&self.stats.stranded, drained);
        let lease = self.lock_books().last_lease.split_off(drained);
        if lease.granted == 0 {
            return 0;
        }
        let sent = tokio::time::timeout(
            self.config.timeout,
            self.store.release(&self.key, lease, lease.granted),
        )
        .await;
        let Ok(Ok(())) = sent else {
            self.stats.store_errors.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        // Returned before no longer stranded: a snapshot in between may
        // count them twice, never as spent.
        add(&self.stats.returned, lease.granted);
        self.stats
            .stranded
            .fetch_sub(lease.granted, Ordering::Relaxed);
        lease.granted
    }

    /// The final return of a dropped allowance: waits for a refill in
    /// flight to land (bounded by its pause and the store timeout), so that
    /// its lease goes back too instead of landing in a pool nobody reads.
    async fn close(&self) {
        loop {
            // Registered before the check, so a landing in between wakes it.
            let landed = self.landed.notified();
            if !self.pool.refilling() {
                break;
            }
            landed.await;
        }
        self.give_back().await;
    }

    fn lock_books(&self) -> std::sync::MutexGuard<'_, Books> {
        crate::sync::lock(&self.books)
    }
}
