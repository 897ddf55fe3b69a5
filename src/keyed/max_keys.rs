//! The bound on a keyed table's keys, one type wherever a keyed limiter
//! is built.

use std::num::NonZeroUsize;

/// The most keys a keyed limiter tracks at once: a count that is never
/// zero (a table that may hold no key could never decide one).
///
/// The one bound of every keyed limiter that takes one:
/// [`KeyedBuilder::max_keys`](crate::KeyedBuilder::max_keys) (keyed buckets,
/// tiers and keyed windows),
/// [`KeyedConcurrencyLimiter::with_max_keys`](crate::concurrency::KeyedConcurrencyLimiter::with_max_keys)
/// and (feature `tokio`) `KeyedAllowanceConfig::max_keys`. Made from a
/// `usize` (zero is [`MaxKeysError`]) or from a [`NonZeroUsize`].
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::{KeyedLimiter, MaxKeys, MaxKeysError, Quota};
///
/// let cap = MaxKeys::new(100_000)?;
/// assert_eq!(cap.get(), 100_000);
/// assert_eq!(MaxKeys::new(0), Err(MaxKeysError));
/// assert_eq!(MaxKeys::from(NonZeroUsize::MIN).get(), 1);
///
/// let limiter = KeyedLimiter::builder(Quota::per_second(10)?).max_keys(cap).build::<String>();
/// assert_eq!(limiter.max_keys(), 100_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MaxKeys(NonZeroUsize);

impl MaxKeys {
    /// `max_keys` as a bound, or [`MaxKeysError`] for zero.
    ///
    /// ```
    /// use tollgate::MaxKeys;
    ///
    /// assert!(MaxKeys::new(1).is_ok());
    /// assert!(MaxKeys::new(0).is_err());
    /// ```
    pub const fn new(max_keys: usize) -> Result<MaxKeys, MaxKeysError> {
        match NonZeroUsize::new(max_keys) {
            Some(max_keys) => Ok(MaxKeys(max_keys)),
            None => Err(MaxKeysError),
        }
    }

    /// The bound, as a count.
    ///
    /// ```
    /// use tollgate::MaxKeys;
    ///
    /// assert_eq!(MaxKeys::new(8)?.get(), 8);
    /// # Ok::<(), tollgate::MaxKeysError>(())
    /// ```
    pub const fn get(self) -> usize {
        self.0.get()
    }
}

impl From<NonZeroUsize> for MaxKeys {
    fn from(max_keys: NonZeroUsize) -> MaxKeys {
        MaxKeys(max_keys)
    }
}

impl TryFrom<usize> for MaxKeys {
    type Error = MaxKeysError;

    fn try_from(max_keys: usize) -> Result<MaxKeys, MaxKeysError> {
        MaxKeys::new(max_keys)
    }
}

/// A key bound of zero: a keyed limiter tracks at least one key.
///
/// ```
/// use tollgate::{MaxKeys, MaxKeysError};
///
/// let zero: Result<MaxKeys, _> = 0_usize.try_into();
/// assert_eq!(zero, Err(MaxKeysError));
/// assert_eq!(MaxKeysError.to_string(), "max_keys must be at least one");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("max_keys must be at least one")]
pub struct MaxKeysError;
