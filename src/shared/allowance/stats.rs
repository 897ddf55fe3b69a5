//! A local allowance's counters: the atomics its refills and returns add
//! to, and the snapshot callers read.

#[cfg(doc)]
use crate::shared::{FailurePolicy, LocalAllowance};
use crate::sync::{AtomicU64, Ordering};

/// Adds to a cold-path counter, saturating: a store reporting absurd grants
/// must not wrap the books.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    // fetch_update cannot fail here: the closure always returns Some.
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        Some(c.saturating_add(n))
    });
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
    /// Tokens returned to the store.
    pub returned: u64,
    /// Tokens debited from the store that this node will never spend nor
    /// return (a failed return, tokens of older leases at return, what a
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

/// The counters behind [`AllowanceStats`], added to off the hot path.
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) leases: AtomicU64,
    pub(super) leased: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) stranded: AtomicU64,
    pub(super) store_errors: AtomicU64,
    pub(super) failed_open: AtomicU64,
    pub(super) fallback: AtomicU64,
    pub(super) largest_lease: AtomicU64,
}

impl Stats {
    /// A snapshot of the counters, with `pooled` tokens in the pool.
    pub(super) fn snapshot(&self, pooled: u64) -> AllowanceStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Acquire);
        AllowanceStats {
            leases: read(&self.leases),
            leased: read(&self.leased),
            returned: read(&self.returned),
            stranded: read(&self.stranded),
            store_errors: read(&self.store_errors),
            failed_open: read(&self.failed_open),
            fallback: read(&self.fallback),
            largest_lease: read(&self.largest_lease),
            pooled,
        }
    }
}
