//! The entries of a `KeyedConcurrencyLimiter`: a count of units in flight
//! per key, in the key table's map, each entry existing only while its key
//! has work in flight.
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

use std::hash::{BuildHasher, Hash};

use dashmap::mapref::entry::Entry;

use super::{InFlightError, counter};
use crate::keyed::{AtCapacity, Find, KeyBound, KeyRef, KeyState, Table, in_table};
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};

/// What the limiter and its permits share.
pub(super) struct Shared<K, S> {
    /// Units in flight per key, each count shared with the permits that
    /// hold units of it, in the key table every keyed limit keeps its keys
    /// in (its cap, counters and sweeps; every key kept as itself). An
    /// entry with a zero count exists only between the release that zeroed
    /// it and that release's `remove_if`, or, if the key's `Hash` or `Eq`
    /// panicked in that removal, until the next purge.
    ///
    /// Its key cap counts entries: counted in just before an insert and
    /// uncounted just before a removal, each under the shard's write lock,
    /// so no thread can see an entry that is not counted. A new key is
    /// refused while the count is at the cap, so keys with work in flight
    /// never exceed it. (An entry whose count has dropped to zero still
    /// counts until its removal a moment later.)
    pub(super) table: Table<K, Arc<AtomicU64>, S>,
    pub(super) max: u64,
    /// Whether a removal was cut short by a panic, leaving an empty entry
    /// behind: [`Shared::purge`] then drops the empty entries.
    pub(super) stale: AtomicBool,
}

/// An entry is idle, and a sweep drops it, when no unit is in flight under
/// its key.
impl KeyState<()> for Arc<AtomicU64> {
    fn is_idle(&self, _: &(), _: u64) -> bool {
        // Relaxed: the shard's write lock, held by every caller, orders the
        // increments before it.
        self.load(Ordering::Relaxed) == 0
    }
}

/// The table of a keyed concurrency limiter: at most `max_keys` keys, each
/// kept as itself (a permit holds a clone of its key anyway), refused at
/// the cap, never swept automatically (an entry goes with its last permit).
pub(super) fn new_table<K: Hash + Eq, S: BuildHasher + Clone>(
    hasher: S,
    max_keys: usize,
) -> Table<K, Arc<AtomicU64>, S> {
    Table::new(
        hasher,
        KeyBound {
            max_keys,
            at_capacity: AtCapacity::Deny,
            sweep_interval: None,
            max_exact_key_bytes: usize::MAX,
            hot_keys: 0,
        },
    )
}

impl<K: Hash + Eq, S: BuildHasher + Clone> Shared<K, S> {
    /// Adds `weight` (validated) to `key`'s count, creating its entry if
    /// there is none; the count, for the permit.
    pub(super) fn take<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        weight: u64,
    ) -> Result<Arc<AtomicU64>, InFlightError> {
        // Fast path, for a key already in flight: increment under the
        // shard's read lock, so acquires on one shard run side by side. The
        // `Ref` is consumed by the closure and dropped when it returns,
        // before the `entry` below asks for the same shard's write lock.
        let existing = in_table!(self.table, key, |table| key.find_in(table).map(|count| {
            counter::try_add(&count, weight, self.max, Ordering::Acquire)
                .map(|()| Arc::clone(&count))
        }));
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
        in_table!(self.table, key, |table| match table.entry(key.to_owned()) {
            Entry::Occupied(entry) => {
                counter::try_add(entry.get(), weight, self.max, Ordering::Acquire)
                    .map(|()| Arc::clone(entry.get()))
            }
            Entry::Vacant(entry) => {
                // Counted in without waiting: the cap's sweeps are never
                // run here, so nothing under this shard's lock waits.
                let place = self
                    .table
                    .cap
                    .count_in()
                    .ok_or(InFlightError::TooManyKeys {
                        max_keys: self.table.bound.max_keys,
                    })?;
                let count = Arc::new(AtomicU64::new(weight));
                entry.insert(Arc::clone(&count));
                place.keep();
                self.table.counters.created();
                Ok(count)
            }
        })
    }

    /// Returns `weight` units to `count`, `key`'s, removing its entry if
    /// that left it at zero. Called only by a permit's drop.
    pub(super) fn release(&self, key: &K, count: &AtomicU64, weight: u64) {
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
        in_table!(self.table, key, |table| {
            let removed = key.remove_in_if(table, |_, count| {
                let idle = count.is_idle(&(), 0);
                if idle {
                    self.table.cap.forget(1);
                }
                idle
            });
            std::mem::forget(removing);
            if removed.is_some() {
                self.table.counters.evicted(1);
            }
            drop(removed);
        });
    }

    /// Drops the empty entries removals cut short by a panic left, if any;
    /// whether there were any to look for. Holds no guard of the caller's.
    pub(super) fn purge(&self) -> bool {
        if !self.stale.swap(false, Ordering::Acquire) {
            return false;
        }
        self.drop_empty();
        true
    }

    /// Drops every empty entry, whatever left it; how many.
    pub(super) fn sweep(&self) -> usize {
        self.stale.store(false, Ordering::Release);
        self.drop_empty()
    }

    /// Drops every entry whose count is zero; how many. Holds no guard of
    /// the caller's.
    fn drop_empty(&self) -> usize {
        // A key's `Drop` may panic in here too: the flag is set again.
        let purging = Stale(&self.stale);
        // A sweep of the table (`retain` write-locks one shard at a time);
        // it uncounts what it dropped as it ends.
        let dropped = self.table.cap.sweep(|| self.table.drop_idle(&(), 0));
        std::mem::forget(purging);
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
