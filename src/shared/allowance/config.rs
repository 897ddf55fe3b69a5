//! What a caller chooses for a local allowance: lease sizes, returns, the
//! store timeout and the failure policy, and why a configuration is refused.

use std::time::Duration;

use crate::quota::Quota;
#[cfg(doc)]
use crate::shared::{AllowanceStats, LocalAllowance};

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
    /// Deny ([`BudgetError::StoreUnavailable`](crate::shared::BudgetError::StoreUnavailable)): the shared bound is never
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
