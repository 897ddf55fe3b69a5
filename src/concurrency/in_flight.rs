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

use std::hash::{BuildHasher, Hash};
use std::num::NonZeroUsize;

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use super::{InFlightError, counter};
use crate::keyed::{KeyRef, TableCounters};
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// What the limiter and its permits share.
pub(super) struct Shared<K, S> {
    /// Units in flight per key, each count shared with the permits that
    /// hold units of it. An entry with a zero count exists only between the
    /// release that zeroed it and that release's `remove_if`, or, if the
    /// key's `Hash` or `Eq` panicked in that removal, until the next purge.
    pub(super) counts: DashMap<K, Arc<AtomicU64>, S>,
    pub(super) max: u64,
    pub(super) keys: Option<KeyCap>,
    /// Whether a removal was cut short by a panic, leaving an empty entry
    /// behind: [`Shared::purge`] then drops the empty entries.
    pub(super) stale: AtomicBool,
    /// Entries created, sweeps, entries removed.
    pub(super) counters: CachePadded<TableCounters>,
}

/// The cap on keys in flight, and the entries counted against it.
pub(super) struct KeyCap {
    pub(super) max: NonZeroUsize,
    /// Entries counted against the cap: incremented just before an insert
    /// and decremented just before a removal, each under the shard's write
    /// lock, so no thread can see an entry that is not counted. A new key
    /// is refused while the count is at the cap, so keys with work in
    /// flight never exceed it. (An entry whose count has dropped to zero
    /// still counts until its removal a moment later.)
    pub(super) count: CachePadded<AtomicUsize>,
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
