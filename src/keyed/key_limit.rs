//! One key of a keyed limiter as a limit of a hierarchy.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use crate::hierarchy::{Limit, Step, Taken};
use crate::{AcquireError, Clock, KeyedLimiter};

/// One key of a [`KeyedLimiter`], usable as a [`Limit`] in a hierarchy.
///
/// ```
/// use tollgate::{KeyedLimiter, Quota, try_acquire_all};
///
/// let per_address = KeyedLimiter::builder(Quota::per_second(2)?).build::<u32>();
/// let limit = per_address.key(&7);
/// try_acquire_all(&[limit.cost(2)])?;
/// assert!(try_acquire_all(&[limit.cost(1)]).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyLimit<'a, Q: ?Sized, K, C, S> {
    pub(super) limiter: &'a KeyedLimiter<K, C, S>,
    pub(super) key: &'a Q,
}

impl<Q, K, C, S> crate::hierarchy::sealed::Sealed for KeyLimit<'_, Q, K, C, S>
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
    S: BuildHasher + Clone,
{
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        let (admission, overflow) = self.limiter.acquire_within(self.key, cost, 0)?;
        Ok(Taken {
            admission,
            tokens: cost,
            overflow,
        })
    }

    fn undo(&self, taken: &Taken) {
        self.limiter.undo(self.key, taken, taken.tokens);
    }

    fn wait(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.limiter.retry_after(self.key, cost)
    }
}

impl<'a, Q, K, C, S> Limit for KeyLimit<'a, Q, K, C, S>
where
    K: Hash + Eq + Borrow<Q> + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
}

impl<'a, Q, K, C, S> KeyLimit<'a, Q, K, C, S>
where
    K: Hash + Eq + Borrow<Q> + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    /// This key's limit charged `cost` tokens, as a step of a hierarchy.
    ///
    /// The step borrows this `KeyLimit`: build the steps inside the call to
    /// [`try_acquire_all`](crate::try_acquire_all), or bind the `KeyLimit`
    /// first (`let account = limiter.key(&id); let steps = [account.cost(1)];`).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota, try_acquire_all};
    ///
    /// let per_tenant = KeyedLimiter::builder(Quota::per_second(100)?).build::<String>();
    /// try_acquire_all(&[per_tenant.key("north").cost(10)])?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost(&self, cost: u64) -> Step<'_> {
        Step::new(self, cost)
    }
}
