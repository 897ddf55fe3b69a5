//! Loom models of a keyed limiter's quota change (`src/keyed/generations.rs`,
//! `KeyedLimiter::set_quota`): a decision racing a change, an insert racing
//! a change's walk, and the lock-free reading of the current quota racing
//! two changes.
//!
//! The generations' real code runs on loom's atomics and mutex: the quota
//! slots, `current`, the change's steps (`begin`, `publish`, `convert`,
//! `finish`) and the decisions on an entry. The dashmap shard around an
//! entry is not loom-aware, so a loom read-write lock over the entry stands
//! in for it, taken as `table.rs` and `set_quota` take the shard: for
//! reading by a decision, for writing by an insert and by the change's walk.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
use std::time::Duration;

use loom::sync::{Arc, RwLock};
use loom::thread;
use loom_tests::{gather, model};
use tollgate::{AcquireError, Entry, Generations, Quota};

/// The clock reading every decision and the change are made at: a still
/// clock, so that a decision's outcome depends only on the order.
const NOW: u64 = 5_000_000_000;

fn per_second(n: u64) -> Quota {
    Quota::new(n, n, Duration::from_secs(1)).unwrap()
}

/// One key's shard: its entry, or none yet.
struct Shard {
    generations: Generations,
    entry: RwLock<Option<Entry>>,
}

impl Shard {
    fn new(quota: &Quota, entry: bool) -> Arc<Self> {
        let generations = Generations::new(quota);
        let entry = entry.then(|| generations.born());
        Arc::new(Shard {
            generations,
            entry: RwLock::new(entry),
        })
    }

    /// `KeyedLimiter::set_quota` on a one-shard table: the next
    /// generation's slot, published, then the walk under the write lock.
    fn change(&self, quota: &Quota) {
        let change = self.generations.begin(quota);
        change.publish();
        if let Some(entry) = self.entry.write().unwrap().as_mut() {
            change.convert(entry, NOW);
        }
        change.finish(NOW);
    }

    /// A decision on the key, held for reading; inserted first (under the
    /// write lock, as `insert_in` does) if absent. The generation it was
    /// decided in, or the refusal (as text: errors are not ordered).
    fn try_acquire(&self, cost: u64) -> Result<u64, String> {
        {
            let mut absent = self.entry.write().unwrap();
            if absent.is_none() {
                *absent = Some(self.generations.born());
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
