//! What one allowance's handle, refill task and returns share: the pool,
//! the hints it refuses with, the failure policy's state, and the books.

use std::time::Duration;

use tokio::runtime::Handle;

use super::empty::{EmptyUntil, wait_for};
use super::stats::{Stats, add};
use super::{AllowanceConfig, FailurePolicy, Source};
use crate::bucket::TokenBucket;
use crate::error::AcquireError;
use crate::shared::BudgetError;
use crate::shared::pacing::{MIN_PAUSE, Pacer};
use crate::shared::pool::LeasePool;
use crate::shared::{Lease, Store};
use crate::sync::unmodelled::Arc;
use crate::sync::{AtomicBool, AtomicF64, AtomicU64, Mutex, MutexGuard, Ordering, lock};

/// The most tokens a pool can hold (`LeasePool` counts in 63 bits): a lease
/// asks for at most what still fits.
pub(super) const POOL_LIMIT: u64 = u64::MAX >> 1;

/// One allowance: what its handle, its refill task and its returns share.
#[derive(Debug)]
pub(super) struct AllowanceState<S: Store> {
    pub(super) store: Arc<S>,
    pub(super) key: String,
    pub(super) config: AllowanceConfig,
    pub(super) pool: LeasePool,
    /// Refill when the pool falls below this (half the last lease size).
    pub(super) low_water: AtomicU64,
    /// The largest cost a call can ever be served: `max_lease`, the store's
    /// capacity once a grant has told it, and what a pool can hold.
    pub(super) largest_cost: AtomicU64,
    /// Smoothed local demand, tokens per second.
    pub(super) demand: AtomicF64,
    /// Whether the last store call failed with the store unreachable:
    /// failure policy in force.
    pub(super) degraded: AtomicBool,
    /// Whether the last store call was refused for this key
    /// ([`Store::unavailable`] false): callers the pool cannot serve get
    /// [`BudgetError::StoreRefused`], never the failure policy.
    pub(super) refused: AtomicBool,
    /// How long a denied caller should wait, in nanoseconds: the store's
    /// last `retry_after`, or the last refill's duration.
    pub(super) retry_hint: AtomicU64,
    pub(super) fallback: Option<TokenBucket>,
    /// The largest cost a caller found the pool short of since the last
    /// lease: the next lease asks for at least that, so a call costing more
    /// than the demand-sized lease is not refused forever.
    pub(super) shortfall: AtomicU64,
    /// Woken whenever a refill ends, for callers of `acquire`.
    pub(super) landed: tokio::sync::Notify,
    /// Woken when a waiting caller moves the next refill earlier, for a
    /// refill that waits out its pause.
    pub(super) hurried: tokio::sync::Notify,
    /// The store's last word that the key had no token: until then a
    /// caller is refused with the store's wait (`empty` counts from
    /// `epoch`).
    pub(super) empty: EmptyUntil,
    pub(super) epoch: tokio::time::Instant,
    /// The allowance was dropped: a refill not yet at the store ends
    /// without asking it.
    pub(super) closed: AtomicBool,
    pub(super) runtime: Handle,
    /// Cold-path state: the last lease (for returns), demand sampling.
    pub(super) books: Mutex<Books>,
    pub(super) stats: Stats,
}

/// The cold-path state a lock guards: read and written by refills and
/// returns, never by an admission.
#[derive(Debug)]
pub(super) struct Books {
    pub(super) last_lease: Lease,
    /// The next lease request waits until then: after a scarce grant, the
    /// shared budget is exhausted or nearly so, and asking again at once
    /// would cost a round trip per trickle of refill; after a failure, the
    /// store is down, and asking at once would cost one per request.
    pub(super) next_refill: tokio::time::Instant,
    /// Failed refills in a row.
    pub(super) failures: u32,
    /// When to ask again after a scarce grant (short, or leaving the key
    /// nearly empty) or a failure.
    pub(super) pacer: Pacer,
    /// When demand was last sampled (on tokio's clock, which tests can
    /// pause), and the tokens spent by then.
    pub(super) sampled_at: tokio::time::Instant,
    pub(super) spent_by_then: u64,
    /// The store's last answer to a refill, if any.
    pub(super) last_answer: Option<Answer>,
    /// How long the last store call took: a waiting caller has its refill
    /// start this long (twice) before its deadline.
    pub(super) last_call: Duration,
}

/// What the store's answer to one refill said of the key.
#[derive(Clone, Copy, Debug)]
pub(super) struct Answer {
    pub(super) at: tokio::time::Instant,
    /// Whole tokens the store held right after it: what it said, or, from
    /// a store that cannot tell, none after a short grant and plenty after
    /// a full one.
    pub(super) left: u64,
    /// The store's exact wait for its next token, after an empty grant.
    pub(super) first_token: Option<Duration>,
    pub(super) refill_interval: Duration,
}

impl Answer {
    /// When `cost` tokens could be in the store by this answer: exact
    /// after an empty grant; otherwise at most one refill interval late
    /// (the part of a token the store held is not told); `None` if the
    /// answer left them.
    pub(super) fn due(&self, cost: u64) -> Option<tokio::time::Instant> {
        if self.left >= cost {
            return None;
        }
        let wait = match self.first_token {
            Some(first) => wait_for(cost, 0, first, self.refill_interval),
            None => wait_for(
                cost - self.left,
                0,
                self.refill_interval,
                self.refill_interval,
            ),
        };
        Some(self.at.checked_add(wait).unwrap_or_else(far_future))
    }
}

/// An instant past every wait: tokio's far future.
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

impl<S: Store> AllowanceState<S> {
    /// An allowance of `key` with an empty pool, whose refills and returns
    /// run on `runtime`.
    pub(super) fn new(
        store: Arc<S>,
        key: String,
        config: AllowanceConfig,
        runtime: Handle,
    ) -> Self {
        let fallback = match config.on_failure {
            FailurePolicy::Fallback(quota) => Some(TokenBucket::new(quota)),
            FailurePolicy::Closed | FailurePolicy::Open => None,
        };
        AllowanceState {
            store,
            key,
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
            hurried: tokio::sync::Notify::new(),
            empty: EmptyUntil::default(),
            epoch: tokio::time::Instant::now(),
            closed: AtomicBool::new(false),
            runtime,
            books: Mutex::new(Books {
                last_lease: Lease::NONE,
                next_refill: tokio::time::Instant::now(),
                failures: 0,
                pacer: Pacer::new(config.max_lease),
                sampled_at: tokio::time::Instant::now(),
                spent_by_then: 0,
                last_answer: None,
                last_call: Duration::ZERO,
            }),
            stats: Stats::default(),
        }
    }

    /// The refusal or admission for a caller the pool could not serve.
    #[cold]
    pub(super) fn when_short(&self, cost: u64) -> Result<Source, BudgetError> {
        if self.refused.load(Ordering::Acquire) {
            return Err(BudgetError::StoreRefused);
        }
        if !self.degraded.load(Ordering::Acquire) {
            // Never zero: a refused caller told to retry at once would spin.
            let hint = Duration::from_nanos(self.retry_hint.load(Ordering::Relaxed));
            return Err(AcquireError::Insufficient {
                retry_after: hint.max(MIN_PAUSE),
            }
            .into());
        }
        match (self.config.on_failure, &self.fallback) {
            (FailurePolicy::Open, _) => {
                add(&self.stats.failed_open, cost);
                Ok(Source::FailedOpen)
            }
            (FailurePolicy::Fallback(_), Some(bucket)) => {
                crate::limit::Limit::try_acquire(bucket, cost)?;
                add(&self.stats.fallback, cost);
                Ok(Source::Fallback)
            }
            _ => Err(BudgetError::StoreUnavailable),
        }
    }

    pub(super) fn lock_books(&self) -> MutexGuard<'_, Books> {
        lock(&self.books)
    }
}
