//! Typed outcomes for bad configuration and refused decisions.

use std::time::Duration;

/// Why a [`Quota`](crate::Quota) could not be built.
///
/// Every invalid configuration is reported here; none panics.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Quota, QuotaError};
///
/// assert_eq!(Quota::new(0, 1, Duration::from_secs(1)), Err(QuotaError::ZeroCapacity));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The capacity was zero: such a bucket could never admit anything.
    #[error("capacity must be at least one token")]
    ZeroCapacity,
    /// The refill amount was zero tokens per period.
    #[error("refill must add at least one token per period")]
    ZeroTokens,
    /// The refill period was zero: the rate would be infinite.
    #[error("refill period must be longer than zero")]
    ZeroPeriod,
    /// The refill period does not fit in 64 bits of nanoseconds (about 584 years).
    #[error("refill period is longer than 2^64 - 1 nanoseconds")]
    PeriodTooLong,
    /// Refilling the whole bucket (capacity times the emission interval)
    /// would take half the bucket's clock range (`2^63` ticks) or more: 36
    /// years at the finest tick (1/8 ns), 292 years at whole nanoseconds,
    /// so one token in 584 years is refused. The other half is what keeps
    /// every decision exact for that long after creation.
    #[error("capacity {capacity} refilled at this rate takes longer than half the clock range")]
    Overflow {
        /// The requested capacity.
        capacity: u64,
    },
    /// A window counter's limit is too large to pack beside a window index
    /// that names 36 years of its windows: each count takes the limit's bit
    /// length, one count for a fixed window and two for a sliding one, and
    /// the index the rest of the 64-bit word
    /// ([`docs/semantics.md`](crate::guide::semantics), "Windows"). A
    /// longer window, or a fixed window, takes a larger limit.
    #[error("a window limit of {limit} does not fit one word with this window: at most {max}")]
    LimitTooLarge {
        /// The requested limit.
        limit: u64,
        /// The largest limit that fits with this window and kind.
        max: u64,
    },
    /// A keyed window counter was asked for
    /// `AtCapacity::SharedOverflow`: keyed windows refuse new keys at the
    /// cap (`AtCapacity::Deny`), since a window shared by every key over
    /// the cap would need per-key floors to stay safe
    /// ([`docs/semantics.md`](crate::guide::semantics), "Windows").
    #[error("keyed window counters support only AtCapacity::Deny at the key cap")]
    SharedOverflowUnsupported,
    /// The initial credit was larger than the capacity.
    #[error("initial credit {credit} exceeds capacity {capacity}")]
    InitialCreditAboveCapacity {
        /// The requested initial credit.
        credit: u64,
        /// The bucket's capacity.
        capacity: u64,
    },
}

/// Why a limit refused a request for tokens: what a limit itself decides.
///
/// A refusal never changes the bucket: no credit is spent. What surrounds a
/// limit has errors of its own, each wrapping this one: a chain of limits
/// ([`HierarchyError`](crate::HierarchyError)) and a budget shared through
/// a store (`shared::BudgetError`, feature `keyed`).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{AcquireError, Limit, ManualClock, Quota, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert_eq!(bucket.try_acquire(3), Err(AcquireError::ExceedsCapacity { cost: 3, capacity: 2 }));
/// bucket.try_acquire(2)?;
/// let denied = bucket.try_acquire(1).unwrap_err();
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(500)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// Not enough credit now. The same request would be admitted after
    /// `retry_after` (exact, rounded up to the nanosecond) if nothing else
    /// spends credit in the meantime.
    #[error("rate limited: retry after {retry_after:?}")]
    Insufficient {
        /// The wait until the same request would fit.
        retry_after: Duration,
    },
    /// The cost is larger than the capacity: it can never be admitted, so no
    /// retry time exists.
    #[error("cost {cost} exceeds capacity {capacity} and can never be admitted")]
    ExceedsCapacity {
        /// The requested cost.
        cost: u64,
        /// The bucket's capacity.
        capacity: u64,
    },
    /// A cost of zero tokens was asked for. It is refused as input error
    /// rather than admitted silently, since it usually means a mis-computed
    /// weight.
    #[error("cost must be at least one token")]
    ZeroCost,
    /// A keyed limiter already tracks its maximum number of keys, none of
    /// them could be dropped without losing spent credit, and its policy at
    /// that cap is to refuse new keys
    /// ([`AtCapacity::Deny`](crate::AtCapacity::Deny)). Keys it already
    /// tracks are unaffected.
    #[error("the limiter tracks its maximum of {max_keys} keys and refuses new ones")]
    TooManyKeys {
        /// The limiter's key cap.
        max_keys: usize,
    },
}

impl AcquireError {
    /// Refuses a cost of zero and a cost above `capacity`, which no
    /// decision can admit: the input checks every limiter makes first.
    #[inline]
    pub(crate) fn check_cost(cost: u64, capacity: u64) -> Result<(), AcquireError> {
        if cost == 0 {
            return Err(AcquireError::ZeroCost);
        }
        if cost > capacity {
            return Err(AcquireError::ExceedsCapacity { cost, capacity });
        }
        Ok(())
    }

    /// The wait after which the same request would fit, if one exists.
    ///
    /// ```
    /// use tollgate::AcquireError;
    /// assert_eq!(AcquireError::ZeroCost.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            AcquireError::Insufficient { retry_after } => Some(*retry_after),
            AcquireError::ExceedsCapacity { .. }
            | AcquireError::ZeroCost
            | AcquireError::TooManyKeys { .. } => None,
        }
    }
}
