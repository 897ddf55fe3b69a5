//! `KeyedConcurrencyLimiter`: the weighted in-flight bound of a
//! `ConcurrencyLimiter`, per key, in a `DashMap` whose entries exist only
//! while their key has work in flight.
//!
//! Each key's count is the same word and the same compare-and-swap loop
//! (`counter.rs`) as the single limiter's. What the map adds is the entry's
//! lifetime, made race-free by the shard locks:
//!
//! - every increment runs while holding a guard on the key's shard (a read
//!   guard from `get`, or the write guard of `entry` when the key is new);
//! - an entry is removed only by `remove_if`, under the shard's write lock,
//!   and only if its count is zero at that moment.
//!
//! So a removal and an increment exclude each other: an acquire either
//! increments an entry before its removal (which then sees a non-zero count
//! and keeps it) or finds no entry afterwards and inserts a fresh one. No
//! permit's units can land in a removed entry.
//!
//! A permit holds its entry's count (an `Arc` of it), so its release
//! subtracts without looking the key up: a key whose `Hash` or `Eq` panics
//! cannot keep its units in flight. Only the removal of an emptied entry
//! looks the key up; if that panics, the empty entry is left behind, the
//! limiter notes it, and the entries left so are purged before a new key is
//! refused at the cap and before the keys are counted.
//!
//! Dashmap deadlocks if a thread holding a guard (`Ref`, `RefMut`, `Entry`)
//! makes another call on the same map that locks the same shard. Every
//! place below where a guard is live says what ends it.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::num::NonZeroUsize;

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use super::{InFlightError, LimitError, counter};
use crate::keyed::{KeyRef, KeyTableStats, TableCounters};
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Ordering};

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
/// The map is a [`DashMap`] hashed with `S`, by default `ahash::RandomState`
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

/// What the limiter and its permits share.
struct Shared<K, S> {
    /// Units in flight per key, each count shared with the permits that
    /// hold units of it. An entry with a zero count exists only between the
    /// release that zeroed it and that release's `remove_if`, or, if the
    /// key's `Hash` or `Eq` panicked in that removal, until the next purge.
    counts: DashMap<K, Arc<AtomicU64>, S>,
    max: u64,
    keys: Option<KeyCap>,
    /// Whether a removal was cut short by a panic, leaving an empty entry
    /// behind: [`Shared::purge`] then drops the empty entries.
    stale: AtomicBool,
    /// Entries created, sweeps, entries removed.
    counters: CachePadded<TableCounters>,
}

/// The cap on keys in flight, and the entries counted against it.
struct KeyCap {
    max: NonZeroUsize,
    /// Entries counted against the cap: incremented just before an insert
    /// and decremented just before a removal, each under the shard's write
    /// lock, so no thread can see an entry that is not counted. A new key
    /// is refused while the count is at the cap, so keys with work in
    /// flight never exceed it. (An entry whose count has dropped to zero
    /// still counts until its removal a moment later.)
    count: CachePadded<AtomicUsize>,
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
    /// use std::num::NonZeroUsize;
    /// use tollgate::concurrency::{InFlightError, KeyedConcurrencyLimiter};
    ///
    /// let limiter = KeyedConcurrencyLimiter::with_max_keys(1, NonZeroUsize::new(2).unwrap())?;
    /// let _a = limiter.try_acquire(&'a', 1)?;
    /// let _b = limiter.try_acquire(&'b', 1)?;
    /// assert_eq!(
    ///     limiter.try_acquire(&'c', 1).unwrap_err(),
    ///     InFlightError::TooManyKeys { max_keys: 2 },
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_max_keys(max: u64, max_keys: NonZeroUsize) -> Result<Self, LimitError> {
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
    pub fn with_hasher(
        max: u64,
        max_keys: Option<NonZeroUsize>,
        hasher: S,
    ) -> Result<Self, LimitError> {
        if max == 0 {
            return Err(LimitError::ZeroLimit);
        }
        let keys = max_keys.map(|max| KeyCap {
            max,
            count: CachePadded::new(AtomicUsize::new(0)),
        });
        Ok(KeyedConcurrencyLimiter {
            shared: Arc::new(Shared {
                counts: DashMap::with_hasher(hasher),
                max,
                keys,
                stale: AtomicBool::new(false),
                counters: CachePadded::default(),
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
        // The guard from `get` is dropped inside `map_or`.
        self.shared
            .counts
            .get(key)
            .map_or(0, |count| count.load(Ordering::Acquire))
    }

    /// The number of keys with an entry: those with work in flight, plus any
    /// whose last permit is being dropped at this instant. It read-locks
    /// each shard in turn, so it is a snapshot and costs a pass over the
    /// shards.
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
        self.shared.counts.len()
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
        let keys = self.len() as u64;
        self.shared.counters.snapshot(keys, self.max_keys() as u64)
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
        self.shared.counts.shrink_to_fit();
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
    /// use std::num::NonZeroUsize;
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// let cap = NonZeroUsize::new(100).unwrap();
    /// assert_eq!(KeyedConcurrencyLimiter::<u64>::with_max_keys(7, cap)?.max_keys(), 100);
    /// assert_eq!(KeyedConcurrencyLimiter::<u64>::new(7)?.max_keys(), usize::MAX);
    /// # Ok::<(), tollgate::concurrency::LimitError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.shared
            .keys
            .as_ref()
            .map_or(usize::MAX, |cap| cap.max.get())
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

impl<K: Hash + Eq, S: BuildHasher + Clone> Shared<K, S> {
    /// Adds `weight` (validated) to `key`'s count, creating its entry if
    /// there is none; the count, for the permit.
    fn take<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        weight: u64,
    ) -> Result<Arc<AtomicU64>, InFlightError> {
        // Fast path, for a key already in flight: increment under the
        // shard's read lock, so acquires on one shard run side by side. The
        // `Ref` is consumed by the closure and dropped when it returns,
        // before the `entry` below asks for the same shard's write lock.
        let existing = key.find_in(&self.counts).map(|count| {
            counter::try_add(&count, weight, self.max, Ordering::Acquire)
                .map(|()| Arc::clone(&count))
        });
        if let Some(decided) = existing {
            return decided;
        }
        match self.insert(key, weight) {
            // At the cap, empty entries left by removals cut short hold
            // places no key has: purged (no guard of ours is alive), then
            // one more try.
            Err(InFlightError::TooManyKeys { .. }) if self.purge() => self.insert(key, weight),
            decided => decided,
        }
    }

    /// The slow path, for a new key (or one removed since the `get`): the
    /// `Entry` write-locks the shard until the end of the `match`. Inside
    /// it only the entry itself and the key cap's atomic are touched, no
    /// other map operation, and nothing that can unwind between the
    /// place's reservation and the insertion (into the slot `entry`
    /// reserved: no rehashing).
    fn insert<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        weight: u64,
    ) -> Result<Arc<AtomicU64>, InFlightError> {
        match self.counts.entry(key.to_owned()) {
            Entry::Occupied(entry) => {
                counter::try_add(entry.get(), weight, self.max, Ordering::Acquire)
                    .map(|()| Arc::clone(entry.get()))
            }
            Entry::Vacant(entry) => {
                self.reserve_key()?;
                let count = Arc::new(AtomicU64::new(weight));
                entry.insert(Arc::clone(&count));
                self.counters.created();
                Ok(count)
            }
        }
    }

    /// Counts one more entry against the key cap, if the cap allows.
    fn reserve_key(&self) -> Result<(), InFlightError> {
        let Some(cap) = &self.keys else {
            return Ok(());
        };
        // Relaxed: the cap is a count of entries and publishes no data;
        // the modification order alone keeps it from being exceeded.
        cap.count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < cap.max.get()).then_some(n + 1)
            })
            .map(drop)
            .map_err(|_| InFlightError::TooManyKeys {
                max_keys: cap.max.get(),
            })
    }

    /// Uncounts an entry being removed, under its shard's write lock.
    fn uncount_key(&self) {
        if let Some(cap) = &self.keys {
            cap.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Returns `weight` units to `count`, `key`'s, removing its entry if
    /// that left it at zero. Called only by a permit's drop.
    fn release(&self, key: &K, count: &AtomicU64, weight: u64) {
        if counter::sub(count, weight, Ordering::Release) != 0 {
            return;
        }
        // The key's `Hash` or `Eq` may panic in the lookup below, leaving
        // the empty entry: noted, for a purge.
        let removing = Stale(&self.stale);
        // An acquire may have re-used the entry since the subtraction: the
        // check runs again under the write lock, which no increment can hold
        // a guard across. Relaxed suffices there: the lock orders the
        // increments before it. The predicate runs with the shard
        // write-locked and touches only the entry and the key cap's atomic
        // (no map operation); `true` means the entry is removed before the
        // lock is released, so the cap is uncounted exactly as the entry
        // goes, and a new insert of the same key cannot find it still
        // counted. The removed key is dropped after that (its `Drop` may
        // panic; nothing is left to do).
        let removed = self.counts.remove_if(key, |_, count| {
            let idle = count.load(Ordering::Relaxed) == 0;
            if idle {
                self.uncount_key();
            }
            idle
        });
        std::mem::forget(removing);
        if removed.is_some() {
            self.counters.evicted(1);
        }
        drop(removed);
    }

    /// Drops the empty entries removals cut short by a panic left, if any;
    /// whether there were any to look for. Holds no guard of the caller's.
    fn purge(&self) -> bool {
        if !self.stale.swap(false, Ordering::Acquire) {
            return false;
        }
        self.drop_empty();
        true
    }

    /// Drops every empty entry, whatever left it; how many.
    fn sweep(&self) -> usize {
        self.stale.store(false, Ordering::Release);
        self.drop_empty()
    }

    /// Drops every entry whose count is zero; how many. Holds no guard of
    /// the caller's.
    fn drop_empty(&self) -> usize {
        self.counters.swept();
        // A key's `Drop` may panic in here too: the flag is set again.
        let purging = Stale(&self.stale);
        let mut dropped = 0;
        // `retain` write-locks one shard at a time; an entry it drops is
        // taken out (and uncounted here) before its key is dropped.
        self.counts.retain(|_, count| {
            let idle = count.load(Ordering::Relaxed) == 0;
            if idle {
                self.uncount_key();
                dropped += 1;
            }
            !idle
        });
        std::mem::forget(purging);
        self.counters.evicted(dropped);
        dropped
    }
}

/// Sets its flag when dropped, which only an unwind does (the paths that
/// complete forget it): a removal cut short left an empty entry.
struct Stale<'a>(&'a AtomicBool);

impl Drop for Stale<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Units in flight under one key of a [`KeyedConcurrencyLimiter`]; dropping
/// the permit returns them and, if they were the key's last, removes the
/// key's entry.
///
/// The permit owns a clone of its key and an `Arc` of the limiter's state,
/// so it can move into a spawned thread or task and outlive the limiter
/// handle it came from. The release runs in `Drop`, unwinding included, and
/// returns the units without looking the key up; removing the key's emptied
/// entry does, and if the key's `Hash` or `Eq` panics there, the empty entry
/// is purged later (before a new key is refused at the cap, and before
/// [`len`](KeyedConcurrencyLimiter::len) counts).
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
    shared: Arc<Shared<K, S>>,
    /// The key's count this permit's units are in.
    count: Arc<AtomicU64>,
    key: K,
    weight: u64,
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
        let limiter = KeyedConcurrencyLimiter::with_max_keys(2, NonZeroUsize::MIN).unwrap();
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
