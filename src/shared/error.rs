//! Why a budget shared through a store refused a request.

use crate::error::AcquireError;

/// Why a shared budget ([`LocalAllowance`](super::LocalAllowance),
/// [`KeyedAllowance`](super::KeyedAllowance)) refused a request: as any
/// limit would, or because of its store.
///
/// ```
/// use std::time::Duration;
/// use tollgate::AcquireError;
/// use tollgate::shared::BudgetError;
///
/// let refused = BudgetError::from(AcquireError::Insufficient { retry_after: Duration::from_secs(2) });
/// assert_eq!(refused.retry_after(), Some(Duration::from_secs(2)));
/// assert_eq!(BudgetError::StoreUnavailable.retry_after(), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// Refused as a limit refuses: [`AcquireError::Insufficient`] with the
    /// store's wait (a shared budget refuses for want of tokens only on
    /// the store's word), [`AcquireError::ExceedsCapacity`],
    /// [`AcquireError::ZeroCost`], or [`AcquireError::TooManyKeys`] when
    /// the node's key table is full.
    #[error(transparent)]
    Limit(#[from] AcquireError),
    /// The store is unreachable, the node's leased tokens are spent, and
    /// the failure policy is to fail closed
    /// ([`FailurePolicy::Closed`](super::FailurePolicy::Closed)). A server
    /// answers 503 rather than 429: the client did nothing wrong.
    #[error("the shared budget's store is unreachable and the local allowance is spent")]
    StoreUnavailable,
    /// The store answered, but refused this key (it cannot track it, or the
    /// key holds a value the store did not write): not an outage, so no
    /// failure policy admits it, and other keys are unaffected
    /// ([`Store::unavailable`](super::Store::unavailable)). A server
    /// answers 503: the client did nothing wrong, and nothing was spent.
    #[error("the shared budget's store refused this key")]
    StoreRefused,
}

impl BudgetError {
    /// The wait after which the same request would fit, if one exists: a
    /// limit's [`AcquireError::retry_after`]; none for the store's own
    /// failures.
    ///
    /// ```
    /// use tollgate::shared::BudgetError;
    ///
    /// assert_eq!(BudgetError::StoreRefused.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            BudgetError::Limit(error) => error.retry_after(),
            BudgetError::StoreUnavailable | BudgetError::StoreRefused => None,
        }
    }
}
