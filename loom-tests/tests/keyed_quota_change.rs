//! Loom models of a keyed limiter's quota change (`src/keyed/generations.rs`,
//! `KeyedLimiter::set_quota`): a decision racing a change, an insert racing
//! a change's walk, the lock-free reading of the current quota racing two
//! changes, a drop of a full bucket (an eviction, a sweep) racing two
//! changes, and a change finishing a walk a panic cut short while a
//! decision races it.
//!
//! The generations' real code runs on loom's atomics and mutex: the quota
//! slots and drop watermarks, `current`, the change's steps (`begin`,
//! `publish`, `convert`, `finish`), a sweep's hold (`steady`) and the
//! decisions on an entry. The dashmap shard around an entry is not
//! loom-aware, so a loom read-write lock over the entry stands in for it,
//! taken as `admission.rs` and `set_quota` take the shard: for reading by a
//! decision, for writing by an insert, a drop and the change's walk. A
//! second loom read-write lock stands in for the overflow bucket's, which a
//! change publishes under (writing) and a drop raises the watermark under
//! (reading).
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
use std::time::Duration;

use loom::sync::{Arc, RwLock};
use loom::thread;
use loom_tests::{gather, model};
use tollgate::{AcquireError, Change, Entry, Generations, Quota};

/// The clock reading every decision and the change are made at: a still
/// clock, so that a decision's outcome depends only on the order.
const NOW: u64 = 5_000_000_000;

fn per_second(n: u64) -> Quota {
    Quota::new(n, n, Duration::from_secs(1)).unwrap()
}

/// One key's shard: its entry, or none yet; and the overflow bucket's lock.
struct Shard {
    generations: Generations,
    entry: RwLock<Option<Entry>>,
    overflow: RwLock<()>,
}

impl Shard {
    fn new(quota: &Quota, entry: bool) -> Arc<Self> {
        let generations = Generations::new(quota);
        let entry = entry.then(|| generations.born(NOW));
        Arc::new(Shard {
            generations,
            entry: RwLock::new(entry),
            overflow: RwLock::new(()),
        })
    }

    /// `KeyedLimiter::set_quota` on a one-shard table: a walk cut short
    /// finished first, the next generation's slot, published under the
    /// overflow lock, then the walk under the write lock.
    fn change(&self, quota: &Quota) {
        let change = self.generations.begin(quota, |pending| self.walk(pending));
        {
            let _overflow = self.overflow.write().unwrap();
            change.publish(NOW);
        }
        self.walk(&change);
        change.finish(NOW);
    }

    /// A change published whose walk never ran, as a clock panicking
    /// before it reached the key leaves it.
    fn change_cut_short(&self, quota: &Quota) {
        let change = self.generations.begin(quota, |pending| self.walk(pending));
        let _overflow = self.overflow.write().unwrap();
        change.publish(NOW);
    }

    /// The walk of `KeyedLimiter::walk` on the one entry.
    fn walk(&self, change: &Change<'_>) -> u64 {
        if let Some(entry) = self.entry.write().unwrap().as_mut() {
            change.convert(entry, NOW);
        }
        NOW
    }

    /// A drop of the key's bucket if full, as `forget_if_full_in` makes it
    /// (in the current generation) or as a sweep does (in the generation it
    /// holds steady): under the entry's write lock, the watermark raised
    /// under the overflow lock first, and only if the generation is still
    /// current. Whether it dropped the bucket.
    fn drop_if_full(&self, sweep: bool) -> bool {
        let steady = sweep.then(|| self.generations.steady(|pending| self.walk(pending)));
        let mut held = self.entry.write().unwrap();
        // An eviction's generation is any the limiter has been in (read
        // here under the shard lock, in `forget_if_full_in` just before
        // it): it is checked again under the overflow lock.
        let generation = steady
            .as_ref()
            .map_or_else(|| self.generations.current(), |s| s.generation());
        let Some(entry) = held.as_ref() else {
            return false;
        };
        if !self.generations.droppable(entry, generation, NOW) {
            return false;
        }
        {
            let _overflow = self.overflow.read().unwrap();
            if self.generations.current() != generation {
                return false;
            }
            let full = self.generations.full_at(generation, NOW);
            self.generations.raise_dropped(generation, full);
        }
        *held = None;
        true
    }

    /// A decision on the key, held for reading; inserted first (under the
    /// write lock, as `insert_in` does) if absent. The generation it was
    /// decided in, or the refusal (as text: errors are not ordered).
    fn try_acquire(&self, cost: u64) -> Result<u64, String> {
        {
            let mut absent = self.entry.write().unwrap();
            if absent.is_none() {
                *absent = Some(self.generations.born(NOW));
            }
        }
        let held = self.entry.read().unwrap();
        let entry = held.as_ref().expect("inserted above");
        self.generations
            .try_acquire(entry, NOW, cost)
            .map_err(|refused| refused.to_string())
    }

    /// The entry's generation and whole tokens, once every thread is done.
    fn settled(&self) -> (u64, u64) {
        let held = self.entry.read().unwrap();
        let entry = held.as_ref().expect("the key was decided on");
        (entry.generation(), self.generations.available(entry, NOW))
    }

    /// The key's whole tokens once every thread is done, recreating it
    /// (as a new key's decision would) if it was dropped.
    fn tokens(&self) -> u64 {
        let mut held = self.entry.write().unwrap();
        let entry = held.get_or_insert_with(|| self.generations.born(NOW));
        self.generations.available(entry, NOW)
    }
}

/// What a decision of `cost` on a key of a `10`-per-second limiter (its
/// full bucket there already if `tracked`, else inserted by the decision)
/// and a change to `to` per second, racing, can end in: the decision's
/// generation or refusal, and the key's generation and tokens after both.
fn race(tracked: bool, to: u64, cost: u64) -> BTreeSet<(Result<u64, String>, (u64, u64))> {
    gather(move || {
        let shard = Shard::new(&per_second(10), tracked);
        let changer = {
            let shard = Arc::clone(&shard);
            thread::spawn(move || shard.change(&per_second(to)))
        };
        let decided = shard.try_acquire(cost);
        changer.join().unwrap();
        (decided, shard.settled())
    })
}

/// A decision of 6 tokens on a full bucket of 10 races a change to 4: the
/// entry is converted exactly once, whichever comes first, and the result is
/// the one the order says. Before the change: 4 left, carried (4). After: 10
/// carried clipped to 4, then 6 refused. Nothing else, so no credit minted.
#[test]
fn a_decision_racing_a_change_is_converted_once() {
    let refused = AcquireError::ExceedsCapacity {
        cost: 6,
        capacity: 4,
    };
    let before = (Ok(0), (1, 4));
    let after = (Err(refused.to_string()), (1, 4));
    assert_eq!(race(true, 4, 6), [before, after].into_iter().collect());
}

/// A decision of 3 that fits either way: decided in the old generation and
/// carried, or carried and decided in the new; never both quotas' credit.
#[test]
fn a_decision_that_fits_either_way_spends_once() {
    // Old: 7 left, carried clipped to 5. New: 5 carried, 2 left.
    let expected = [(Ok(0), (1, 5)), (Ok(1), (1, 2))];
    assert_eq!(race(true, 5, 3), expected.into_iter().collect());
}

/// A new key's insert races the change's walk: born before the walk (in the
/// old generation, then converted) or after the publication (in the new),
/// never left in the old generation after the change.
#[test]
fn an_insert_racing_the_walk_is_born_in_the_right_generation() {
    // Born old: 9 left, carried clipped to 4. Born new (or converted full
    // first): 4, then 3.
    let expected = [(Ok(0), (1, 4)), (Ok(1), (1, 3))];
    assert_eq!(race(false, 4, 1), expected.into_iter().collect());
}

/// The current quota, read holding nothing while two changes run: always
/// one of the three quotas whole, never the words of two.
#[test]
fn the_quota_read_during_two_changes_is_never_torn() {
    model(|| {
        let quotas = [per_second(10), per_second(3), per_second(7)];
        let shard = Shard::new(&quotas[0], false);
        let changer = {
            let (shard, quotas) = (Arc::clone(&shard), quotas);
            thread::spawn(move || {
                shard.change(&quotas[1]);
                shard.change(&quotas[2]);
            })
        };
        let seen = shard.generations.quota();
        changer.join().unwrap();
        assert!(quotas.contains(&seen), "{seen:?}");
        assert_eq!(shard.generations.quota(), quotas[2]);
    });
}

/// A key with 2 of 10 tokens left; the capacity drops to 2 (the key is then
/// full) and comes back to 10, while a drop of the key if full races both
/// changes, as an eviction (which holds nothing but the key's shard) and as
/// a sweep (which holds changes off). Dropped between the changes, the key
/// comes back with the 2 it carried: the watermark raised for it is
/// carried by the second change, or, if that change published first, the
/// key is not dropped and the walk converts it. Never more than 2.
#[test]
fn a_drop_racing_changes_regains_no_credit() {
    for sweep in [false, true] {
        let seen = gather(move || {
            let shard = Shard::new(&per_second(10), true);
            shard.try_acquire(8).unwrap();
            let changer = {
                let shard = Arc::clone(&shard);
                thread::spawn(move || {
                    shard.change(&per_second(2));
                    shard.change(&per_second(10));
                })
            };
            let dropped = shard.drop_if_full(sweep);
            changer.join().unwrap();
            (dropped, shard.tokens())
        });
        // Dropped or kept, the key holds 2; it can only be dropped while
        // full under the capacity of 2.
        let expected = [(false, 2), (true, 2)].into_iter().collect();
        assert_eq!(seen, expected, "sweep: {sweep}");
    }
}

/// A change whose walk was cut short (a panicking clock) leaves the key in
/// the old generation; the next change finishes that walk before it
/// rewrites the old generation's slot, while a decision races it. The
/// quotas count in ticks of 1, 3 and 7 per nanosecond, so a state read
/// under the wrong slot, or converted from the wrong quota, would show.
/// Decided under 10 (9 left, carried as 3, then 3), under 3 (2 left, then
/// 2) or under 7 (3 carried, 2 left): nothing else.
#[test]
fn a_change_finishes_a_walk_cut_short_before_rewriting_its_slot() {
    let seen = gather(|| {
        let shard = Shard::new(&per_second(10), true);
        shard.change_cut_short(&per_second(3));
        let changer = {
            let shard = Arc::clone(&shard);
            thread::spawn(move || shard.change(&per_second(7)))
        };
        let decided = shard.try_acquire(1);
        changer.join().unwrap();
        (decided, shard.settled())
    });
    let expected = [(Ok(0), (2, 3)), (Ok(1), (2, 2)), (Ok(2), (2, 2))];
    assert_eq!(seen, expected.into_iter().collect());
}
