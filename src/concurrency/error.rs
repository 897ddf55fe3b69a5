//! Typed outcomes for a bad limit and for refused permits.

/// Why a concurrency limiter could not be built.
///
/// ```
/// use tollgate::concurrency::{ConcurrencyLimiter, LimitError};
///
/// assert_eq!(ConcurrencyLimiter::new(0).unwrap_err(), LimitError::ZeroLimit);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// The limit was zero units: such a limiter could never grant a permit.
    #[error("the in-flight limit must be at least one unit")]
    ZeroLimit,
}

/// Why a permit was refused.
///
/// A refusal takes nothing: the units in flight are as they were.
///
/// ```
/// use tollgate::concurrency::{ConcurrencyLimiter, InFlightError};
///
/// let limiter = ConcurrencyLimiter::new(4)?;
/// assert_eq!(limiter.try_acquire(0).unwrap_err(), InFlightError::ZeroWeight);
/// assert_eq!(
///     limiter.try_acquire(5).unwrap_err(),
///     InFlightError::ExceedsLimit { weight: 5, max: 4 },
/// );
/// let _held = limiter.try_acquire(3)?;
/// assert_eq!(
///     limiter.try_acquire(2).unwrap_err(),
///     InFlightError::Full { in_flight: 3, max: 4 },
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InFlightError {
    /// A weight of zero units was asked for. Refused as input error rather
    /// than granted as an empty permit, since it usually means a
    /// mis-computed weight (as `AcquireError::ZeroCost` does for buckets).
    #[error("weight must be at least one unit")]
    ZeroWeight,
    /// The weight is larger than the limit: it can never be granted, however
    /// long the caller waits.
    #[error("weight {weight} exceeds the in-flight limit {max} and can never be granted")]
    ExceedsLimit {
        /// The requested weight.
        weight: u64,
        /// The limit.
        max: u64,
    },
    /// The weight would not fit now: `in_flight + weight > max` for the
    /// `in_flight` the decision was made on. It fits once enough permits
    /// are dropped.
    #[error("{in_flight} of {max} units in flight: no room for this weight now")]
    Full {
        /// The units in flight when the request was refused (for a keyed
        /// limiter, under the requested key).
        in_flight: u64,
        /// The limit (for a keyed limiter, the per-key limit).
        max: u64,
    },
    /// A keyed limiter already has `max_keys` keys with work in flight and
    /// the request is for a new key. Keys already in flight are unaffected.
    #[error("{max_keys} keys already have work in flight")]
    TooManyKeys {
        /// The limiter's cap on keys in flight.
        max_keys: usize,
    },
    /// An async acquire waited its `max_wait` without the weight fitting.
    /// Nothing was taken.
    #[cfg(feature = "tokio")]
    #[error("the wait ran out before the weight fitted")]
    Timeout,
}
