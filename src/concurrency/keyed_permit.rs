//! The permit of a `KeyedConcurrencyLimiter`: a key's units in flight,
//! released on drop.

use std::fmt;
use std::hash::{BuildHasher, Hash};

use super::in_flight::Shared;
use crate::sync::{Arc, AtomicU64};

/// Units in flight under one key of a [`KeyedConcurrencyLimiter`](super::KeyedConcurrencyLimiter); dropping
/// the permit returns them and, if they were the key's last, removes the
/// key's entry.
///
/// The permit owns a clone of its key and an `Arc` of the limiter's state,
/// so it can move into a spawned thread or task and outlive the limiter
/// handle it came from. The release runs in `Drop`, unwinding included, and
/// returns the units without looking the key up; removing the key's emptied
/// entry does, and if the key's `Hash` or `Eq` panics there, the empty entry
/// is purged later (before a new key is refused at the cap, and before
/// [`len`](super::KeyedConcurrencyLimiter::len) counts).
///
/// ```
/// use tollgate::concurrency::KeyedConcurrencyLimiter;
///
/// let limiter = KeyedConcurrencyLimiter::new(2)?;
/// let permit = limiter.try_acquire(&"upload".to_string(), 2)?;
/// let worker = std::thread::spawn(move || {
///     assert_eq!(permit.key(), "upload");
///     // ... the work; the permit drops here ...
/// });
/// worker.join().unwrap();
/// assert!(limiter.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping a permit releases its units at once"]
pub struct KeyedPermit<K: Hash + Eq, S: BuildHasher + Clone = ahash::RandomState> {
    pub(super) shared: Arc<Shared<K, S>>,
    /// The key's count this permit's units are in.
    pub(super) count: Arc<AtomicU64>,
    pub(super) key: K,
    pub(super) weight: u64,
}

impl<K: Hash + Eq, S: BuildHasher + Clone> KeyedPermit<K, S> {
    /// The key whose units this permit holds.
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(2)?;
    /// assert_eq!(limiter.try_acquire(&42_u16, 1)?.key(), &42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The units this permit holds (always at least one).
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(2)?;
    /// assert_eq!(limiter.try_acquire(&42_u16, 2)?.weight(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn weight(&self) -> u64 {
        self.weight
    }
}

impl<K: Hash + Eq, S: BuildHasher + Clone> Drop for KeyedPermit<K, S> {
    fn drop(&mut self) {
        self.shared.release(&self.key, &self.count, self.weight);
    }
}

impl<K: Hash + Eq + fmt::Debug, S: BuildHasher + Clone> fmt::Debug for KeyedPermit<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPermit")
            .field("key", &self.key)
            .field("weight", &self.weight)
            .finish()
    }
}
