//! The local allowance: a node's hot path served from tokens leased from a
//! shared store, refilled in the background.
//!
//! [`LocalAllowance`] (this file) is the handle callers hold; `state.rs`
//! what its handle and tasks share; `refill.rs` the refill task;
//! `returns.rs` the returns of unused tokens; `word.rs` and `empty.rs`
//! the store's word a caller waits for before it is refused; `config.rs`
//! and `stats.rs` what a caller sets and reads.

mod config;
mod empty;
mod refill;
mod returns;
mod state;
mod stats;
mod word;

use std::time::Duration;

use tokio::runtime::Handle;

use crate::error::AcquireError;
use crate::jitter::JitterGenerator;
use crate::shared::BudgetError;
use crate::shared::Store;
use crate::shared::pacing;
use crate::shared::pool::Take;
use crate::sync::Ordering;
use crate::sync::unmodelled::Arc;
use refill::spawn_refill;
use returns::watch_idle;
use state::AllowanceState;

pub use config::{AllowanceConfig, AllowanceError, FailurePolicy};
pub(crate) use empty::{EmptyUntil, wait_for};
pub use refill::RefillError;
pub use stats::AllowanceStats;
pub(crate) use stats::add;

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
    inner: Arc<AllowanceState<S>>,
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
        let inner = Arc::new(AllowanceState::new(store, key.into(), config, runtime));
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
    /// assert!(matches!(node.try_acquire(1), Err(BudgetError::Limit(AcquireError::Insufficient { .. }))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<Source, BudgetError> {
        let inner = &self.inner;
        if cost == 0 {
            return Err(AcquireError::ZeroCost.into());
        }
        let largest = inner.largest_cost.load(Ordering::Relaxed);
        if cost > largest {
            return Err(AcquireError::ExceedsCapacity {
                cost,
                capacity: largest,
            }
            .into());
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
    /// returns give tokens back between requests).
    ///
    /// A refusal is the store's word, never the pool's alone: the store
    /// said it had no token until later (refused at once with the rest of
    /// its wait, or, if that fits in `max_wait`, asked again after it), or
    /// a refill that answered during this wait left the store short of the
    /// cost (refused once `max_wait` has passed). A refill that the pacing
    /// rule holds until after `max_wait` is moved earlier so that it
    /// answers within it; if the store is slower than that, the call
    /// outlasts `max_wait` by that one answer (bounded by the store
    /// timeout). `Duration::MAX`: no deadline. A store failure, a refusal
    /// of the key or a cost above the capacity ends the wait as
    /// [`try_acquire`](Self::try_acquire) says; cancelling the future
    /// takes nothing.
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
    pub async fn acquire(&self, cost: u64, max_wait: Duration) -> Result<Source, BudgetError> {
        let inner = &self.inner;
        let began = tokio::time::Instant::now();
        // None past the end of tokio's clock: no deadline at all.
        let deadline = began.checked_add(max_wait);
        // Drawn only once the store's word makes this caller wait.
        let mut jitter: Option<JitterGenerator> = None;
        loop {
            // Registered before the attempt, so a landing between the
            // attempt and the wait still wakes this caller. A refusal for
            // want of tokens always has a landing to come: the attempt
            // either claimed a refill or saw one in flight (`LeasePool`),
            // and one that has landed since has already notified.
            let landed = inner.landed.notified();
            match self.try_acquire(cost) {
                Err(BudgetError::Limit(AcquireError::Insufficient { .. })) => {}
                outcome => return outcome,
            }
            let now = tokio::time::Instant::now();
            if let Some(retry_after) = inner.refused_by_the_store(cost, now) {
                let jitter = jitter.get_or_insert_with(JitterGenerator::from_entropy);
                let word_ends = inner.empty.holds_for(now - inner.epoch);
                match pacing::pause_before_asking_again(retry_after, word_ends, deadline, jitter) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => return Err(AcquireError::Insufficient { retry_after }.into()),
                }
                continue;
            }
            match deadline {
                Some(at) if now < at => {
                    // Once the store has answered short during this wait,
                    // the paced refill (or the deadline) is soon enough:
                    // that answer already stands for a refusal.
                    if inner.drained_since(began, cost, now).is_none() {
                        inner.hurry(cost, at, now);
                    }
                    // Woken by a landing, or at the deadline to look again.
                    let _ = tokio::time::timeout_at(at, landed).await;
                }
                Some(at) => {
                    if let Some(retry_after) = inner.drained_since(began, cost, now) {
                        return Err(AcquireError::Insufficient { retry_after }.into());
                    }
                    // No word yet: the refill in flight (or one now) gives it.
                    inner.hurry(cost, at, now);
                    landed.await;
                }
                None => landed.await,
            }
        }
    }

    /// The store's wait for `cost` tokens while its last empty answer to
    /// this pool's refills holds: a caller the pool cannot serve may be
    /// refused with it, on the store's word.
    pub(crate) fn refused_by_the_store(&self, cost: u64) -> Option<Duration> {
        self.inner
            .refused_by_the_store(cost, tokio::time::Instant::now())
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

    /// Returns every unused token to the store (once; a failed return
    /// strands them); the result is how many the store took back.
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
        self.inner.return_unused().await
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
        self.inner.stats.snapshot(pooled)
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
