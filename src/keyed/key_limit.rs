//! One key of a keyed limiter as a limit of its own.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use super::KeyRef;
use crate::advertised::{Advertised, Shape};
use crate::clock::Clock;
use crate::error::AcquireError;
use crate::keyed::KeyedLimiter;
use crate::limit::{Identity, Limit, Taken, sealed};

/// One key of a [`KeyedLimiter`] (or of a [`Tiered`](crate::Tiered)): a
/// [`Limit`], for everything written over any limit (hierarchies, receipts,
/// [`Counted`](crate::Counted)).
///
/// ```
/// use tollgate::{KeyedLimiter, Limit, Quota, try_acquire_all};
///
/// let per_address = KeyedLimiter::builder(Quota::per_second(2)?).build::<u32>();
/// let limit = per_address.key(&7);
/// try_acquire_all(&[limit.cost(2)])?;
/// assert!(try_acquire_all(&[limit.cost(1)]).is_err());
/// assert_eq!(limit.available(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyLimit<'a, Q: ?Sized, K: Send, C, S> {
    pub(super) limiter: &'a KeyedLimiter<K, C, S>,
    pub(super) key: &'a Q,
}

impl<Q, K, C, S> sealed::Sealed for KeyLimit<'_, Q, K, C, S>
where
    K: Hash + Eq + Send,
    Q: KeyRef<K> + ?Sized,
    C: Clock,
    S: BuildHasher + Clone,
{
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        self.limiter
            .acquire_within(self.key, cost, Duration::ZERO, |decided| {
                decided.taken(cost)
            })
    }

    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        self.limiter
            .acquire_within(self.key, cost, max_wait, |decided| {
                (decided.taken(cost), decided.wait())
            })
    }

    fn undo(&self, taken: &Taken) {
        self.limiter.undo(self.key, taken, taken.tokens);
    }

    fn debit(&self, tokens: u64) {
        // A key the full table refuses again (`AtCapacity::Deny`) loses
        // its debt: `debit_key` says so, and a limit's debit has no answer.
        let _recorded = self.limiter.debit_key(self.key, tokens);
    }

    fn capacity(&self) -> u64 {
        self.limiter.quota().capacity()
    }

    fn identity(&self) -> Identity {
        Identity::of_key(self.limiter, self.limiter.hasher().hash_one(self.key))
    }
}

impl<Q, K, C, S> Advertised for KeyLimit<'_, Q, K, C, S>
where
    K: Hash + Eq + Send + Sync,
    Q: KeyRef<K> + Sync + ?Sized,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn shape(&self) -> Shape {
        Shape::from(&self.limiter.quota())
    }

    fn idle_reset(&self) -> Duration {
        self.limiter.quota().refill_interval()
    }
}

impl<Q, K, C, S> Limit for KeyLimit<'_, Q, K, C, S>
where
    K: Hash + Eq + Send + Sync,
    Q: KeyRef<K> + Sync + ?Sized,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.limiter.retry_after_of(self.key, cost)
    }

    fn available(&self) -> u64 {
        self.limiter.available_of(self.key)
    }
}
