//! Changing a keyed limiter's quota at run time: the overflow bucket and
//! the watermarks converted under its lock, then a walk over both tables
//! (`docs/proofs.md`, "Changing a keyed limiter's quota").

use std::hash::{BuildHasher, Hash};

use super::KeyedLimiter;
use super::generations::{Change, Marked};
use crate::clock::Clock;
use crate::quota::Quota;
use crate::state::Tat;
use crate::sync::{Ordering, write};

impl<K: Hash + Eq + Send, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    /// Gives every key `quota` from now on, keeping what each key has
    /// spent: every bucket (and the overflow bucket) is converted by the
    /// continuity rule of [`docs/semantics.md`](crate::guide::semantics)
    /// ("Changing a quota"): its whole tokens carry over, clipped to the new
    /// capacity, and a debt keeps the instant it is paid. Keys created from
    /// now on get the new quota's initial credit, but no more than a bucket
    /// dropped full before the change would have carried, so that a sweep
    /// between two changes gives no key back what it spent (after a raise
    /// of the capacity, for at most the new quota's refill of the tokens
    /// withheld; never if no bucket was ever dropped). A receipt taken
    /// before the change gives nothing back after it, nor does a store
    /// lease.
    ///
    /// A `Clock` that panics during the change leaves the keys it had not
    /// reached under the old quota, each decided under it; the next change
    /// or sweep converts them first.
    ///
    /// Decisions go on while it runs: it converts one shard of the table at
    /// a time, holding that shard for writing (a pause for the keys of that
    /// shard alone, measured in [`docs/benchmarks.md`](crate::guide::benchmarks)),
    /// and a decision on a bucket not converted yet is made under the old
    /// quota. Changes are serialised, with each other and with sweeps; each
    /// returns once every bucket is converted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::builder(Quota::per_second(10)?).clock(clock.clone()).build::<u32>();
    /// limiter.try_acquire(&1, 6)?;
    /// limiter.set_quota(Quota::per_second(2)?);
    /// // 4 tokens were left: 2 carry over, the new capacity.
    /// assert_eq!(limiter.available(&1), 2);
    /// assert_eq!(limiter.available(&9), 2);
    /// clock.advance(Duration::from_millis(500));
    /// limiter.set_quota(Quota::per_second(100)?);
    /// assert_eq!(limiter.available(&1), 2); // refills at the new rate from here
    /// assert_eq!(limiter.available(&9), 100);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        // A walk a panicking clock cut short is finished first: the slot
        // this change rewrites is that walk's old generation's.
        let change = self.generations.begin(&quota, |pending| self.walk(pending));
        {
            // The overflow bucket, its floors and the drop watermark are
            // converted, and the new generation published, under the
            // overflow bucket's write lock: a decision on it, a new bucket
            // reading a floor, or a drop raising the watermark, sees all
            // before or all after.
            let mut overflow = write(&self.overflow);
            let nanos = self.timeline.nanos();
            let overflow = &mut *overflow;
            let tat = std::mem::replace(&mut overflow.tat, Tat::new(0)).into_inner();
            overflow.tat = Tat::new(change.carry(tat, nanos));
            for floor in overflow.floors.iter() {
                // Carried like a state, full ones too: a floor a full
                // bucket of the old quota has reached holds that quota's
                // capacity, which may be less than the new one.
                let mark = floor.load(Ordering::Relaxed);
                let carried = Marked::state(mark)
                    .map_or(Marked::NONE, |state| Marked::of(change.carry(state, nanos)));
                floor.store(carried, Ordering::Relaxed);
            }
            change.publish(nanos);
        }
        let nanos = self.walk(&change);
        change.finish(nanos);
    }

    /// Converts every entry not yet in `change`'s generation, and returns a
    /// clock reading taken after. `iter_mut` write-locks one shard at a
    /// time; no guard of ours is alive. Each bucket is converted at a
    /// reading taken under its shard's lock, so no later than any decision
    /// made on it under the old quota. A panicking clock stops it where it
    /// is: the entries not reached stay in the old generation, decided
    /// under its quota, until the next change or sweep finishes the walk.
    pub(super) fn walk(&self, change: &Change<'_>) -> u64 {
        for mut entry in self.table.exact.iter_mut() {
            entry.value_mut().convert(change, || self.timeline.nanos());
        }
        for mut entry in self.table.fingerprints.iter_mut() {
            entry.value_mut().convert(change, || self.timeline.nanos());
        }
        self.timeline.nanos()
    }
}
