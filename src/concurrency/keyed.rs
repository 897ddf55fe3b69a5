//! `KeyedConcurrencyLimiter`: the weighted in-flight bound of a
//! `ConcurrencyLimiter`, per key; its entries and their lifetime are in
//! `in_flight.rs`, its permits in `keyed_permit.rs`.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};

use super::in_flight::{Shared, new_table};
use super::keyed_permit::KeyedPermit;
use super::{InFlightError, LimitError, counter};
use crate::keyed::{Find, KeyRef, KeyTable, KeyTableStats, MaxKeys, in_table};
use crate::sync::{Arc, AtomicBool, Ordering};

/// At most `max` units of work in flight per key, and optionally at most
/// `max_keys` keys with work in flight.
///
/// Per key the semantics are those of a
/// [`ConcurrencyLimiter`](super::ConcurrencyLimiter): weights of at least one
/// unit, [`InFlightError::Full`] when a weight does not fit now, release on
/// the permit's drop (unwinding included). A key's entry is created by its
/// first permit and removed when its count returns to zero, so memory
/// follows the keys in flight, not every key ever seen. With a key cap, a
/// permit for a new key is refused with [`InFlightError::TooManyKeys`] while
/// `max_keys` keys hold permits.
///
/// The keys are kept in the key table of every keyed limit (a
/// [`DashMap`](dashmap::DashMap) hashed with `S`), by default `ahash::RandomState`
/// (keyed from OS randomness: keys such as client addresses are
/// attacker-chosen). Clones share the same keys and counts.
///
/// ```
/// use tollgate::concurrency::{InFlightError, KeyedConcurrencyLimiter};
///
/// // At most 2 requests in flight per client.
/// let limiter = KeyedConcurrencyLimiter::new(2)?;
/// let a1 = limiter.try_acquire(&"alice", 1)?;
/// let a2 = limiter.try_acquire(&"alice", 1)?;
/// assert!(matches!(limiter.try_acquire(&"alice", 1), Err(InFlightError::Full { .. })));
/// let b = limiter.try_acquire(&"bob", 2)?;
/// assert_eq!(limiter.len(), 2);
/// drop((a1, a2, b));
/// assert!(limiter.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedConcurrencyLimiter<K, S = ahash::RandomState> {
    shared: Arc<Shared<K, S>>,
}

impl<K: Hash + Eq + Clone> KeyedConcurrencyLimiter<K> {
    /// A limiter allowing at most `max` units in flight per key, for any
    /// number of keys. A `max` of zero is [`LimitError::ZeroLimit`].
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::<u32>::new(4)?;
    /// assert_eq!((limiter.max(), limiter.max_keys()), (4, usize::MAX));
    /// # Ok::<(), tollgate::concurrency::LimitError>(())
    /// ```
    pub fn new(max: u64) -> Result<Self, LimitError> {
        Self::with_hasher(max, None, ahash::RandomState::new())
    }

    /// A limiter allowing at most `max` units in flight per key and at most
    /// `max_keys` keys with work in flight.
    ///
    /// ```
    /// use tollgate::MaxKeys;
    /// use tollgate::concurrency::{InFlightError, KeyedConcurrencyLimiter};
    ///
    /// let limiter = KeyedConcurrencyLimiter::with_max_keys(1, MaxKeys::new(2)?)?;
    /// let _a = limiter.try_acquire(&'a', 1)?;
    /// let _b = limiter.try_acquire(&'b', 1)?;
    /// assert_eq!(
    ///     limiter.try_acquire(&'c', 1).unwrap_err(),
    ///     InFlightError::TooManyKeys { max_keys: 2 },
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_max_keys(max: u64, max_keys: MaxKeys) -> Result<Self, LimitError> {
        Self::with_hasher(max, Some(max_keys), ahash::RandomState::new())
    }
}

impl<K: Hash + Eq + Clone, S: BuildHasher + Clone> KeyedConcurrencyLimiter<K, S> {
    /// A limiter hashing keys with `hasher`: at most `max` units in flight
    /// per key and, if given, at most `max_keys` keys in flight.
    ///
    /// ```
    /// use std::hash::RandomState;
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// // SipHash from std, for keys that should not depend on ahash.
    /// let limiter = KeyedConcurrencyLimiter::<String, _>::with_hasher(3, None, RandomState::new())?;
    /// let permit = limiter.try_acquire(&"tenant-7".to_string(), 3)?;
    /// assert_eq!(limiter.in_flight(permit.key()), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_hasher(max: u64, max_keys: Option<MaxKeys>, hasher: S) -> Result<Self, LimitError> {
        if max == 0 {
            return Err(LimitError::ZeroLimit);
        }
        let max_keys = max_keys.map_or(usize::MAX, MaxKeys::get);
        Ok(KeyedConcurrencyLimiter {
            shared: Arc::new(Shared {
                table: new_table(hasher, max_keys),
                max,
                stale: AtomicBool::new(false),
            }),
        })
    }

    /// Takes `weight` units under `key` now, or refuses without taking
    /// anything.
    ///
    /// The errors are those of
    /// [`ConcurrencyLimiter::try_acquire`](super::ConcurrencyLimiter::try_acquire),
    /// per key (`Full` reports the key's units in flight), plus
    /// [`InFlightError::TooManyKeys`] for a new key while the key cap is
    /// reached. The permit owns a clone of the key and an `Arc` of the
    /// limiter's state, so it is `'static` whenever `K` is.
    ///
    /// A grant takes a read lock on the key's shard (a write lock when the
    /// key has no entry yet); nothing else is locked.
    ///
    /// ```
    /// use tollgate::concurrency::{InFlightError, KeyedConcurrencyLimiter};
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(5)?;
    /// let permit = limiter.try_acquire(&10_u32, 4)?;
    /// assert_eq!((permit.key(), permit.weight()), (&10, 4));
    /// assert_eq!(
    ///     limiter.try_acquire(&10, 2).unwrap_err(),
    ///     InFlightError::Full { in_flight: 4, max: 5 },
    /// );
    /// assert!(limiter.try_acquire(&11, 2).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire<Q>(&self, key: &Q, weight: u64) -> Result<KeyedPermit<K, S>, InFlightError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        let shared = &*self.shared;
        counter::validate(weight, shared.max)?;
        // Cloned before anything is taken: between the increment and the
        // permit that owns it, nothing may run that could unwind (a user's
        // `Clone`) and leak the units.
        let permit_key = key.to_owned();
        let count = shared.take(key, weight)?;
        Ok(KeyedPermit {
            shared: Arc::clone(&self.shared),
            count,
            key: permit_key,
            weight,
        })
    }

    /// The units in flight under `key` (zero for a key with no entry), as
    /// of one load under the shard's read lock.
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::<String>::new(5)?;
    /// let _permit = limiter.try_acquire("k", 3)?;
    /// assert_eq!((limiter.in_flight("k"), limiter.in_flight("other")), (3, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The guard from `find_in` is dropped inside `map_or`.
        let table = &self.shared.table;
        in_table!(table, key, |map| key
            .find_in(map)
            .map_or(0, |count| count.load(Ordering::Acquire)))
    }

    /// The number of keys with an entry: those with work in flight, plus any
    /// whose last permit is being dropped at this instant, as counted
    /// against the key cap (one load).
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(5)?;
    /// let permit = limiter.try_acquire(&1_u8, 1)?;
    /// assert_eq!(limiter.len(), 1);
    /// drop(permit);
    /// assert_eq!(limiter.len(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.shared.purge();
        self.shared.table.len()
    }

    /// Whether no key has work in flight.
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(5)?;
    /// let permit = limiter.try_acquire(&1_u8, 1)?;
    /// assert!(!limiter.is_empty());
    /// drop(permit);
    /// assert!(limiter.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry with no work in flight, and returns how many. A
    /// key's entry goes with its last permit, so this finds only the empty
    /// entries a removal cut short by a panicking `Hash` or `Eq` left (they
    /// are also dropped before a new key is refused at the cap), or one
    /// whose last permit is being dropped at this instant. Each shard is
    /// write-locked while it is swept.
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(5)?;
    /// drop(limiter.try_acquire(&1_u8, 1)?);
    /// assert_eq!(limiter.sweep(), 0); // the permit's drop removed its entry
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sweep(&self) -> usize {
        self.shared.sweep()
    }

    /// What the key table holds and has dropped so far: entries created
    /// (a key's first permit), removed (`evicted`: its last permit's
    /// release, or a sweep), and sweeps run (`overflowed` stays zero: a new
    /// key at the cap is refused).
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(5)?;
    /// let permit = limiter.try_acquire(&1_u8, 1)?;
    /// drop(permit);
    /// let stats = limiter.table_stats();
    /// assert_eq!((stats.created, stats.evicted, stats.keys), (1, 1, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn table_stats(&self) -> KeyTableStats {
        self.shared.purge();
        self.shared.table.stats()
    }

    /// Returns to the allocator the table space left by removed entries.
    /// Entries go when their keys' work does, but the map keeps its
    /// high-water capacity until this is called. It write-locks each shard
    /// in turn, blocking that shard's acquires and releases meanwhile.
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let limiter = KeyedConcurrencyLimiter::new(1)?;
    /// let permits: Vec<_> = (0..1000_u32).map(|k| limiter.try_acquire(&k, 1)).collect::<Result<_, _>>()?;
    /// drop(permits);
    /// limiter.shrink_to_fit();
    /// assert_eq!(limiter.len(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shrink_to_fit(&self) {
        self.shared.table.exact.shrink_to_fit();
        self.shared.table.fingerprints.shrink_to_fit();
    }
}

impl<K, S> KeyedConcurrencyLimiter<K, S> {
    /// The most units in flight per key.
    ///
    /// ```
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// assert_eq!(KeyedConcurrencyLimiter::<u64>::new(7)?.max(), 7);
    /// # Ok::<(), tollgate::concurrency::LimitError>(())
    /// ```
    pub fn max(&self) -> u64 {
        self.shared.max
    }

    /// The most keys with work in flight at once: the cap it was built
    /// with, `usize::MAX` if none.
    ///
    /// ```
    /// use tollgate::MaxKeys;
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let cap = MaxKeys::new(100)?;
    /// assert_eq!(KeyedConcurrencyLimiter::<u64>::with_max_keys(7, cap)?.max_keys(), 100);
    /// assert_eq!(KeyedConcurrencyLimiter::<u64>::new(7)?.max_keys(), usize::MAX);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.shared.table.cap.max_keys()
    }
}

impl<K, S> KeyTable for KeyedConcurrencyLimiter<K, S>
where
    K: Hash + Eq + Clone + Send + Sync,
    S: BuildHasher + Clone + Send + Sync,
{
    fn len(&self) -> usize {
        KeyedConcurrencyLimiter::len(self)
    }

    fn max_keys(&self) -> usize {
        KeyedConcurrencyLimiter::max_keys(self)
    }

    fn sweep(&self) -> usize {
        KeyedConcurrencyLimiter::sweep(self)
    }

    fn table_stats(&self) -> KeyTableStats {
        KeyedConcurrencyLimiter::table_stats(self)
    }
}

impl<K, S> Clone for KeyedConcurrencyLimiter<K, S> {
    /// Another handle on the same keys and counts.
    fn clone(&self) -> Self {
        KeyedConcurrencyLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K, S> fmt::Debug for KeyedConcurrencyLimiter<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConcurrencyLimiter")
            .field("max", &self.shared.max)
            .field("max_keys", &self.max_keys())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lives_exactly_as_long_as_its_permits() {
        let limiter = KeyedConcurrencyLimiter::new(3).unwrap();
        let first = limiter.try_acquire(&"k", 1).unwrap();
        let second = limiter.try_acquire(&"k", 2).unwrap();
        assert_eq!(limiter.in_flight(&"k"), 3);
        drop(first);
        assert_eq!(limiter.len(), 1);
        drop(second);
        assert_eq!(limiter.len(), 0);
        // A fresh entry after the removal starts from zero.
        let again = limiter.try_acquire(&"k", 3).unwrap();
        assert_eq!(limiter.in_flight(&"k"), 3);
        drop(again);
        assert_eq!(limiter.len(), 0);
    }

    #[test]
    fn the_key_cap_frees_a_slot_when_a_key_empties() {
        let limiter = KeyedConcurrencyLimiter::with_max_keys(2, MaxKeys::new(1).unwrap()).unwrap();
        let a = limiter.try_acquire(&'a', 1).unwrap();
        // A key already in flight is not a new key.
        let a2 = limiter.try_acquire(&'a', 1).unwrap();
        assert_eq!(
            limiter.try_acquire(&'b', 1).unwrap_err(),
            InFlightError::TooManyKeys { max_keys: 1 }
        );
        drop(a);
        assert_eq!(
            limiter.try_acquire(&'b', 1).unwrap_err(),
            InFlightError::TooManyKeys { max_keys: 1 }
        );
        drop(a2);
        let b = limiter.try_acquire(&'b', 1).unwrap();
        assert_eq!(b.key(), &'b');
    }

    #[test]
    fn refusals_create_no_entry() {
        let limiter = KeyedConcurrencyLimiter::new(2).unwrap();
        assert_eq!(
            limiter.try_acquire(&1, 0).unwrap_err(),
            InFlightError::ZeroWeight
        );
        assert_eq!(
            limiter.try_acquire(&1, 3).unwrap_err(),
            InFlightError::ExceedsLimit { weight: 3, max: 2 }
        );
        assert_eq!(limiter.len(), 0);
        let _held = limiter.try_acquire(&1, 2).unwrap();
        assert!(limiter.try_acquire(&1, 1).is_err());
        assert_eq!(limiter.in_flight(&1), 2);
    }

    #[test]
    fn a_permit_outlives_the_limiter_handle() {
        let limiter = KeyedConcurrencyLimiter::new(1).unwrap();
        let observer = limiter.clone();
        let permit = limiter.try_acquire(&"k", 1).unwrap();
        drop(limiter);
        assert_eq!(observer.in_flight(&"k"), 1);
        drop(permit);
        assert_eq!(observer.len(), 0);
    }
}
