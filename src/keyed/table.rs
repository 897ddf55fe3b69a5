//! The decisions, creations and evictions of one key table, written once
//! for both of a limiter's tables (keys kept as they are, and long keys kept
//! as fingerprints), and the watermarks the two share so that no eviction
//! ever mints credit.

use std::hash::{BuildHasher, Hash};

use dashmap::DashMap;
use dashmap::mapref::entry::{Entry, VacantEntry};
use dashmap::mapref::one::Ref;

use super::cap::Place;
use super::key_ref::{Find, KeyRef};
use super::{AtCapacity, KeyedLimiter};
use crate::state::{Admission, FIRST, Tat};
use crate::sync::{AtomicU64, Ordering};
use crate::{AcquireError, Clock};

/// A key table: one bucket state per stored key.
pub(super) type Table<M, H> = DashMap<M, Tat, H>;

/// Which bucket serves a key's decision.
enum Bucket<'a, M> {
    Own(Ref<'a, M, Tat>),
    /// The shared overflow bucket, decided on while the key's absence is
    /// held (its shard write-locked), and the key's overflow floor.
    Overflow {
        absent: VacantEntry<'a, M, Tat>,
        floor: Option<&'a AtomicU64>,
    },
}

impl<K: Hash + Eq, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    /// Makes one admission on `key`'s bucket in `table` (created if new, or
    /// the overflow bucket at the cap) with `admit(bucket, now)`; whether
    /// the overflow bucket served it.
    #[inline]
    pub(super) fn decide_in<M, Q, H>(
        &self,
        table: &Table<M, H>,
        key: &Q,
        admit: impl FnOnce(&Tat, u64) -> Result<Admission, AcquireError>,
    ) -> Result<(Admission, bool), AcquireError>
    where
        M: Hash + Eq,
        Q: KeyRef<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        // The guard holds the key's shard for reading until the decision is
        // made; no other map operation may run before it is dropped, or a
        // writer on that shard deadlocks. The clock is read after the lookup,
        // so the read does not stall behind the lock's read-modify-write
        // (`docs/benchmarks.md`, "Measured design choices"), and for a
        // tracked key no sweep can fall between the reading and the decision
        // (a new key's reading is older; `fresh_tat` covers that).
        let found = key.find_in(table);
        let now = self.now();
        let bucket = match found {
            Some(tat) => Bucket::Own(tat),
            None => self.insert_in(table, key, now)?,
        };
        match bucket {
            Bucket::Own(tat) => admit(&tat, now).map(|admission| (admission, false)),
            Bucket::Overflow { absent, floor } => {
                let admission = admit(&self.overflow, now)?;
                // Recorded before the key's absence is released, so a bucket
                // of its own created next starts from here or later.
                if let Some(floor) = floor {
                    floor.fetch_max(admission.after, Ordering::AcqRel);
                }
                drop(absent);
                self.counters.overflowed();
                Ok((admission, true))
            }
        }
    }

    #[cold]
    fn insert_in<'t, M, Q, H>(
        &'t self,
        table: &'t Table<M, H>,
        key: &Q,
        now: u64,
    ) -> Result<Bucket<'t, M>, AcquireError>
    where
        M: Hash + Eq,
        Q: KeyRef<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        // The key's own code runs below (`to_owned`, and `hash` and `eq` in
        // the map) and may panic. Whatever its outcome must depend on is
        // settled first: the floor is found before anything is admitted (a
        // panic between the overflow admission and its record would let the
        // key's own bucket start fuller), and the place under the cap is
        // handed back if the bucket never goes in.
        let floor = self.overflow_floor_in(table, key);
        // Counted (and perhaps swept) before `entry`: a sweep write-locks
        // shards, and the failed `get` has already dropped its guard, so no
        // guard of ours is alive here.
        let place = self.take_place(now);
        if place.is_none() && self.bound.at_capacity == AtCapacity::Deny {
            // Refusing needs no write lock and no owned key; only a bucket
            // created for this key meanwhile is worth a second look.
            return match key.find_in(table) {
                Some(raced) => Ok(Bucket::Own(raced)),
                None => Err(AcquireError::TooManyKeys {
                    max_keys: self.bound.max_keys,
                }),
            };
        }
        match (table.entry(key.to_owned()), place) {
            // Another thread created it between our `get` and `entry`; our
            // place, if any, goes back as it drops.
            (Entry::Occupied(raced), _) => Ok(Bucket::Own(raced.into_ref().downgrade())),
            (Entry::Vacant(vacant), Some(place)) => {
                let tat = vacant.insert(Tat::new(self.fresh_tat(floor, now)));
                place.keep();
                self.counters.created();
                Ok(Bucket::Own(tat.downgrade()))
            }
            // Only the overflow policy gets here without a place. The vacant
            // entry keeps the key's shard write-locked until the overflow
            // decision is made and recorded: a bucket of its own created for
            // this key meanwhile would start from a floor that misses it.
            (Entry::Vacant(absent), None) => Ok(Bucket::Overflow { absent, floor }),
        }
    }

    /// Counts a new key in; at the cap, waits for a sweep in progress or
    /// runs one that is due (see `cap.rs`).
    // This and the two helpers below are marked `#[inline]`: `insert_in`
    // has an instantiation per table, and the compiler then stops inlining
    // them into it, which slows a new key's decision (`docs/benchmarks.md`,
    // "Measured design choices").
    #[inline]
    fn take_place(&self, now: u64) -> Option<Place<'_>> {
        self.cap
            .take_place(now, || self.now(), |at| self.drop_full_at(at))
    }

    /// The state a new bucket starts from at `now`: the quota's initial
    /// credit, but never fuller than a bucket dropped by a sweep, nor (under
    /// [`AtCapacity::SharedOverflow`]) than the overflow bucket after the
    /// key's latest overflow decision, recorded in its `floor`. A caller
    /// whose `now` is older than the last sweep thus sees a debt, as the
    /// dropped twin would have shown it.
    #[inline]
    pub(super) fn fresh_tat(&self, floor: Option<&AtomicU64>, now: u64) -> u64 {
        let gcra = self.quota.gcra();
        let initial = now.saturating_add(gcra.initial_tat(self.quota.initial_credit()));
        let overflowed = floor.map_or(0, |floor| floor.load(Ordering::Acquire));
        initial
            .max(self.swept_at.load(Ordering::Acquire))
            .max(overflowed)
    }

    /// The overflow floor of `key`'s slot of table hashes, under the
    /// overflow policy.
    #[inline]
    pub(super) fn overflow_floor_in<M, Q, H>(
        &self,
        table: &Table<M, H>,
        key: &Q,
    ) -> Option<&AtomicU64>
    where
        M: Hash + Eq,
        Q: Hash + ?Sized,
        H: BuildHasher + Clone,
    {
        let slots = self.overflow_floors.len();
        (slots > 0).then(|| {
            let hash = table.hasher().hash_one(key);
            &self.overflow_floors[(hash % slots as u64) as usize]
        })
    }

    /// Gives back `ticks` of `admission` to `key`'s bucket in `table` by the
    /// one rule that never mints credit (`Tat::undo`). A key no longer
    /// tracked was full when dropped: nothing is owed. Drops the key's
    /// bucket if the undo left it full.
    pub(super) fn undo_in<M, Q, H>(
        &self,
        table: &Table<M, H>,
        key: &Q,
        admission: &Admission,
        ticks: u64,
    ) where
        M: Hash + Eq,
        Q: Find<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        if let Some(tat) = key.find_in(table) {
            tat.undo(self.quota.gcra(), admission, ticks, FIRST, || self.now());
        }
        // The guard above is dropped: the map may be written now.
        self.forget_if_full_in(table, key);
    }

    /// Drops `key`'s bucket if it is full, as a sweep would (losslessly,
    /// with the same watermarks), so that a key created by a request a later
    /// limit refused leaves no trace in the table: refusals elsewhere must
    /// not fill this limiter's key cap.
    fn forget_if_full_in<M, Q, H>(&self, table: &Table<M, H>, key: &Q)
    where
        M: Hash + Eq,
        Q: Find<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        let now = self.now();
        self.swept_at.fetch_max(now, Ordering::AcqRel);
        self.overflow.raise_to(now);
        if key.remove_in_if(table, |_, tat| tat.is_full(now)) {
            self.cap.forget(1);
            self.counters.evicted_one();
        }
    }

    /// Drops every bucket full at `now` from both tables; how many. Run
    /// only as a sweep of the cap, which uncounts them.
    pub(super) fn drop_full_at(&self, now: u64) -> usize {
        // Published before any bucket goes: whoever recreates a dropped key
        // reads it under the same shard lock (see `fresh_tat`).
        self.swept_at.fetch_max(now, Ordering::AcqRel);
        // A dropped key may come back through the overflow bucket, so that
        // bucket, too, must be no fuller than one full at `now`: otherwise a
        // decision on an older reading would credit it the refill the
        // dropped bucket wasted while full.
        self.overflow.raise_to(now);
        let dropped = drop_full(&self.exact, now) + drop_full(&self.fingerprints, now);
        self.counters.swept(dropped);
        dropped
    }
}

/// Drops every bucket of `table` full at `now`; how many.
fn drop_full<M: Hash + Eq, H: BuildHasher + Clone>(table: &Table<M, H>, now: u64) -> usize {
    let mut dropped = 0;
    // `retain` write-locks one shard at a time; no guard of ours is alive.
    table.retain(|_, tat| {
        let full = tat.is_full(now);
        dropped += usize::from(full);
        !full
    });
    dropped
}
