//! A keyed limiter's decision on one key table, written once for both of
//! its tables (keys kept as they are, and long keys kept as fingerprints):
//! the lookup, a new key's creation under the cap (or the overflow bucket),
//! and the state a new bucket starts from, so that no recreation ever
//! mints credit.

use std::hash::{BuildHasher, Hash};

use dashmap::DashMap;
use dashmap::mapref::entry::VacantEntry;
use dashmap::mapref::one::Ref;

use super::cap::Place;
use super::generations::{Entry, Held, Marked};
use super::key_ref::KeyRef;
use super::key_table::Found;
use super::shared_entry::Stored;
use super::{AtCapacity, KeyDecision, KeyedLimiter, Overflow};
use crate::clock::Clock;
use crate::error::AcquireError;
use crate::gcra::Gcra;
use crate::state::Admission;
use crate::sync::{Ordering, read};
use crate::timeline::Reading;

/// A key table: one bucket per stored key.
pub(super) type BucketMap<M, H> = DashMap<M, Stored, H>;

/// Which bucket serves a key's decision.
enum Bucket<'a, M> {
    Own(Ref<'a, M, Stored>),
    /// The shared overflow bucket, decided on while the key's absence is
    /// held (its shard write-locked), and the key's overflow floor.
    Overflow {
        absent: VacantEntry<'a, M, Stored>,
        floor: Option<usize>,
    },
}

impl<K: Hash + Eq + Send, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    /// Makes one admission on `key`'s bucket in `table` (created if new, or
    /// the overflow bucket at the cap) with `admit(bucket, now)`, `now` in
    /// the ticks of the bucket's quota generation. A new key's bucket is
    /// created only if `cost` is within its quota's capacity. `done` makes
    /// the caller's outcome of the decision where it is made: a decision
    /// handed back from two places would be built in memory even for a
    /// caller that drops it.
    #[inline(always)]
    pub(super) fn decide_in<M, Q, H, R>(
        &self,
        table: &BucketMap<M, H>,
        key: &Q,
        cost: u64,
        admit: impl FnOnce(Held<'_>, u64, Reading) -> Result<Admission, AcquireError>,
        done: impl FnOnce(KeyDecision) -> R,
    ) -> Result<R, AcquireError>
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
        // (a new key's reading is older; `fresh_tat` covers that), nor a
        // quota change's conversion of the bucket.
        let found = key.find_in(table);
        let reading = self.timeline.read();
        let nanos = reading.nanos();
        let bucket = match found {
            Some(entry) => Bucket::Own(entry),
            None => self.insert_in(table, key, cost, nanos)?,
        };
        match bucket {
            Bucket::Own(entry) => {
                let held = entry.held(&self.generations);
                let now = held.gcra.ticks(nanos);
                let admission = admit(held, now, reading)?;
                Ok(done(KeyDecision::new(admission, held.gcra, reading, false)))
            }
            Bucket::Overflow { absent, floor } => {
                let overflow = read(&self.overflow);
                let held = self.overflow_held(&overflow);
                let admission = admit(held, held.gcra.ticks(nanos), reading)?;
                // Recorded before the key's absence is released, so a bucket
                // of its own created next starts from here or later; and
                // before the overflow bucket is released, so in the same
                // generation as its state.
                if let Some(floor) = floor {
                    overflow.floors[floor].fetch_max(Marked::of(admission.after), Ordering::AcqRel);
                }
                let gcra = held.gcra;
                drop(overflow);
                self.table.counters.overflowed();
                // Last, the key's owned copy, whose `Drop` may panic.
                drop(absent);
                Ok(done(KeyDecision::new(admission, gcra, reading, true)))
            }
        }
    }

    /// The overflow bucket and its quota generation: the current one,
    /// which cannot change while its lock is held.
    pub(super) fn overflow_held<'o>(&self, overflow: &'o Overflow) -> Held<'o> {
        let generation = self.generations.current();
        Held {
            tat: &overflow.tat,
            gcra: self.generations.gcra(generation),
            generation,
        }
    }

    #[cold]
    fn insert_in<'t, M, Q, H>(
        &'t self,
        table: &'t BucketMap<M, H>,
        key: &Q,
        cost: u64,
        nanos: u64,
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
        let place = self.take_place(nanos);
        // The generation is read under the shard's write lock (in `make`),
        // so the bucket is born before a change's walk of this shard (and
        // converted by it) or after it (and born in the new generation);
        // and under the overflow lock if there are floors, so in the
        // generation of the floor it reads.
        let make = || {
            let overflow = floor.map(|_| read(&self.overflow));
            let generation = self.generations.current();
            let gcra = self.generations.gcra(generation);
            // A cost no bucket could take creates nothing.
            AcquireError::check_cost(cost, gcra.capacity())?;
            let floor = overflow.as_ref().zip(floor).map_or(0, |(overflow, slot)| {
                Marked::floor(overflow.floors[slot].load(Ordering::Acquire))
            });
            Ok(Stored::Inline(Entry::new(
                generation,
                self.fresh_tat(&gcra, generation, floor, nanos),
            )))
        };
        let check = || AcquireError::check_cost(cost, self.quota().capacity());
        Ok(
            match self.table.insert_in(table, key, place, check, make)? {
                Found::Own(entry) => Bucket::Own(entry),
                // The absence keeps the key's shard write-locked until the
                // overflow decision is made and recorded: a bucket of its own
                // created for this key meanwhile would start from a floor that
                // misses it.
                Found::Absent(absent) => Bucket::Overflow { absent, floor },
            },
        )
    }

    /// Counts a new key in; at the cap, waits for a sweep in progress or
    /// runs one that is due (see `cap.rs`), at clock readings in
    /// nanoseconds, which every generation shares.
    // This and the two helpers below are marked `#[inline]`: `insert_in`
    // has an instantiation per table, and the compiler then stops inlining
    // them into it, which slows a new key's decision (`docs/benchmarks.md`,
    // "Measured design choices").
    #[inline]
    fn take_place(&self, nanos: u64) -> Option<Place<'_>> {
        self.table.cap.take_place(
            nanos,
            || self.timeline.nanos(),
            |at| {
                self.drop_full_at(at);
            },
        )
    }

    /// The state a new bucket of `generation` (quota `gcra`) starts from at
    /// the clock reading `nanos`: the quota's initial credit, but never
    /// fuller than a bucket dropped (by a sweep or an eviction, in this
    /// generation or, carried by the continuity rule, an earlier one), nor
    /// (under [`AtCapacity::SharedOverflow`]) than the overflow bucket after
    /// the key's latest overflow decision, recorded in its `floor` (in the
    /// generation's ticks). A caller whose reading is older than the last
    /// drop thus sees a debt, as the dropped twin would have shown it, and
    /// a key dropped before a raise of the capacity comes back with what it
    /// carried, not the new capacity.
    #[inline]
    pub(super) fn fresh_tat(&self, gcra: &Gcra, generation: u64, floor: u64, nanos: u64) -> u64 {
        self.generations.fresh(generation, gcra, nanos).max(floor)
    }

    /// The slot of `key`'s overflow floor among the slots of table hashes,
    /// under the overflow policy.
    #[inline]
    pub(super) fn overflow_floor_in<M, Q, H>(
        &self,
        table: &BucketMap<M, H>,
        key: &Q,
    ) -> Option<usize>
    where
        M: Hash + Eq,
        Q: Hash + ?Sized,
        H: BuildHasher + Clone,
    {
        (self.table.bound.at_capacity == AtCapacity::SharedOverflow).then(|| {
            let hash = table.hasher().hash_one(key);
            (hash % super::OVERFLOW_FLOOR_SLOTS as u64) as usize
        })
    }

    /// What a bucket not in `table` would hold for `key` at the clock
    /// reading `nanos`: its quota, state and `now` in its ticks.
    pub(super) fn unknown_in<M, Q, H>(
        &self,
        table: &BucketMap<M, H>,
        key: &Q,
        nanos: u64,
    ) -> (Gcra, u64, u64)
    where
        M: Hash + Eq,
        Q: Hash + ?Sized,
        H: BuildHasher + Clone,
    {
        // The overflow lock keeps the current generation, and so its slot
        // and the floors, from changing while they are read.
        let overflow = read(&self.overflow);
        let generation = self.generations.current();
        let gcra = self.generations.gcra(generation);
        let floor = self.overflow_floor_in(table, key).map_or(0, |slot| {
            Marked::floor(overflow.floors[slot].load(Ordering::Acquire))
        });
        let tat = self.fresh_tat(&gcra, generation, floor, nanos);
        (gcra, tat, gcra.ticks(nanos))
    }
}
