//! A keyed allowance's counters, kept off the hot path.

use crate::sync::{AtomicU64, Ordering};

use crate::shared::AllowanceStats;

/// Counters of a [`KeyedAllowance`](super::KeyedAllowance): its key table,
/// its cold decisions, and the leases of its keys hot now.
///
/// ```
/// use tollgate::shared::KeyedAllowanceStats;
///
/// assert_eq!(KeyedAllowanceStats::default().cold_calls, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedAllowanceStats {
    /// Keys tracked now.
    pub tracked_keys: u64,
    /// Keys hot now (with a lease pool).
    pub hot_keys: u64,
    /// Bytes the tracked keys take, as the byte bound counts them.
    pub tracked_bytes: u64,
    /// Decisions on keys that could not be tracked (key cap or byte
    /// bound): served cold, their demand unmeasured.
    pub untracked: u64,
    /// Store calls deciding a cold request (round trips), failed ones
    /// included.
    pub cold_calls: u64,
    /// Tokens admitted by cold decisions.
    pub cold_admitted: u64,
    /// Cold requests the store refused (too few tokens, or a cost above
    /// the key's capacity).
    pub cold_refused: u64,
    /// Requests refused without a store call: the store had said the key
    /// had no token until later (to a cold call; or to a hot key's refill,
    /// for a refusal by `try_acquire`).
    pub refused_locally: u64,
    /// Tokens of grants short of the cost, of grants whose caller had
    /// gone, or of undone cold receipts, returned to the store.
    pub returned: u64,
    /// Tokens debited at the store that this node will never admit nor
    /// return: a cold grant's excess over the ask, a failed return, and
    /// tokens receipts gave back to a hot key's pool that went before they
    /// were spent (or undone after it went).
    pub stranded: u64,
    /// Tokens of settled costs' excess over what was taken for them
    /// ([`KeyedReceipt::settle`](super::KeyedReceipt::settle)) that the
    /// store was charged, into debt.
    pub debited: u64,
    /// Tokens of settled excess the store could not be told of (a debit
    /// that failed or timed out): spent beyond the shared budget, as what
    /// a store outage lets through.
    pub undebited: u64,
    /// Cold store calls that failed or timed out.
    pub store_errors: u64,
    /// Tokens admitted by `FailurePolicy::Open` on cold keys.
    pub failed_open: u64,
    /// Tokens admitted by `FailurePolicy::Fallback` on cold keys.
    pub fallback: u64,
    /// Keys that became hot, in all.
    pub became_hot: u64,
    /// Keys that went cold again, in all.
    pub became_cold: u64,
    /// Idle keys forgotten, in all.
    pub forgotten: u64,
    /// The leases of the keys hot now, summed.
    pub hot: AllowanceStats,
}

/// The atomic side of [`KeyedAllowanceStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) untracked: AtomicU64,
    pub(crate) cold_calls: AtomicU64,
    pub(crate) cold_admitted: AtomicU64,
    pub(crate) cold_refused: AtomicU64,
    pub(crate) refused_locally: AtomicU64,
    pub(crate) returned: AtomicU64,
    pub(crate) stranded: AtomicU64,
    pub(crate) debited: AtomicU64,
    pub(crate) undebited: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) failed_open: AtomicU64,
    pub(crate) fallback: AtomicU64,
    pub(crate) became_hot: AtomicU64,
    pub(crate) became_cold: AtomicU64,
    pub(crate) forgotten: AtomicU64,
}

impl Counters {
    /// The counters' part of a snapshot; the caller fills in the table's.
    pub(crate) fn snapshot(&self) -> KeyedAllowanceStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Acquire);
        KeyedAllowanceStats {
            untracked: read(&self.untracked),
            cold_calls: read(&self.cold_calls),
            cold_admitted: read(&self.cold_admitted),
            cold_refused: read(&self.cold_refused),
            refused_locally: read(&self.refused_locally),
            returned: read(&self.returned),
            stranded: read(&self.stranded),
            debited: read(&self.debited),
            undebited: read(&self.undebited),
            store_errors: read(&self.store_errors),
            failed_open: read(&self.failed_open),
            fallback: read(&self.fallback),
            became_hot: read(&self.became_hot),
            became_cold: read(&self.became_cold),
            forgotten: read(&self.forgotten),
            ..KeyedAllowanceStats::default()
        }
    }
}

/// Sums the counters of several allowances' snapshots, saturating.
pub(crate) fn sum(total: &mut AllowanceStats, one: &AllowanceStats) {
    let pairs = [
        (&mut total.leases, one.leases),
        (&mut total.leased, one.leased),
        (&mut total.returned, one.returned),
        (&mut total.stranded, one.stranded),
        (&mut total.store_errors, one.store_errors),
        (&mut total.failed_open, one.failed_open),
        (&mut total.fallback, one.fallback),
        (&mut total.pooled, one.pooled),
    ];
    for (into, n) in pairs {
        *into = into.saturating_add(n);
    }
    total.largest_lease = total.largest_lease.max(one.largest_lease);
}
