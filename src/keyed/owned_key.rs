//! One key of a keyed limiter, owning its key and sharing the limiter: a
//! limit to keep across awaits (a throttled body, a receipt held until a
//! response), where a borrowed [`KeyLimit`](super::KeyLimit) cannot go.

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use crate::advertised::{Advertised, Shape};
use crate::error::AcquireError;
use crate::keyed::PerKey;
use crate::limit::{Identity, Limit, Taken, sealed};
use crate::sync::unmodelled::Arc;

/// One key of any keyed limiter ([`PerKey`]), owning the key and holding
/// the limiter by `Arc`: its decisions are the key's decisions, as those of
/// [`PerKey::key`] are, with no borrow to keep.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::{KeyedLimiter, Limit, OwnedKey, Quota, Receipt};
///
/// let per_client = Arc::new(KeyedLimiter::<String>::new(Quota::per_second(2)?));
/// let alice = OwnedKey::new(Arc::clone(&per_client), "alice".to_owned());
/// // A receipt that outlives any borrow of the limiter.
/// let receipt: Receipt<OwnedKey<KeyedLimiter<String>>> = Receipt::take(alice, 2)?;
/// assert_eq!(per_client.key("alice").available(), 0);
/// receipt.undo();
/// assert_eq!(per_client.key("alice").available(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct OwnedKey<L: PerKey> {
    limiter: Arc<L>,
    key: L::Key,
}

impl<L: PerKey> OwnedKey<L> {
    /// `key` of `limiter`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{KeyedLimiter, OwnedKey, Quota};
    ///
    /// let limiter = Arc::new(KeyedLimiter::<u32>::new(Quota::per_second(2)?));
    /// let seven = OwnedKey::new(limiter, 7);
    /// assert_eq!(*seven.key(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(limiter: Arc<L>, key: L::Key) -> Self {
        OwnedKey { limiter, key }
    }

    /// The key.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{KeyedLimiter, OwnedKey, Quota};
    ///
    /// let limiter = Arc::new(KeyedLimiter::<&str>::new(Quota::per_second(2)?));
    /// assert_eq!(*OwnedKey::new(limiter, "a").key(), "a");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(&self) -> &L::Key {
        &self.key
    }

    /// The limiter.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{KeyedLimiter, OwnedKey, Quota};
    ///
    /// let limiter = Arc::new(KeyedLimiter::<u32>::new(Quota::per_second(2)?));
    /// let key = OwnedKey::new(Arc::clone(&limiter), 1);
    /// assert!(Arc::ptr_eq(key.limiter(), &limiter));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &Arc<L> {
        &self.limiter
    }
}

impl<L: PerKey> fmt::Debug for OwnedKey<L>
where
    L::Key: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedKey")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<L: PerKey> Clone for OwnedKey<L>
where
    L::Key: Clone,
{
    fn clone(&self) -> Self {
        OwnedKey {
            limiter: Arc::clone(&self.limiter),
            key: self.key.clone(),
        }
    }
}

impl<L> sealed::Sealed for OwnedKey<L>
where
    L: PerKey,
    L::Key: Hash + Eq + Clone + Sync,
{
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        self.limiter.key(&self.key).take(cost)
    }
    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        self.limiter.key(&self.key).take_within(cost, max_wait)
    }
    fn undo(&self, taken: &Taken) {
        self.limiter.key(&self.key).undo(taken);
    }
    fn debit(&self, tokens: u64) {
        self.limiter.key(&self.key).debit(tokens);
    }
    fn settle(&self, taken: &Taken, actual: u64) {
        self.limiter.key(&self.key).settle(taken, actual);
    }
    fn capacity(&self) -> u64 {
        self.limiter.key(&self.key).capacity()
    }
    fn identity(&self) -> Identity {
        self.limiter.key(&self.key).identity()
    }
}

impl<L> Limit for OwnedKey<L>
where
    L: PerKey,
    L::Key: Hash + Eq + Clone + Sync,
{
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.limiter.key(&self.key).retry_after(cost)
    }
    fn available(&self) -> u64 {
        self.limiter.key(&self.key).available()
    }
}

impl<L> Advertised for OwnedKey<L>
where
    L: PerKey,
    L::Key: Hash + Eq + Clone + Sync,
{
    fn shape(&self) -> Shape {
        self.limiter.key(&self.key).shape()
    }
    fn idle_reset(&self) -> Duration {
        self.limiter.key(&self.key).idle_reset()
    }
}
