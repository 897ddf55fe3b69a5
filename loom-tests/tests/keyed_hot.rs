//! Loom models of a thread's cached hot key (`src/keyed/hot_keys.rs`,
//! `src/keyed/shared_entry.rs`): a decision on a shared entry, made outside
//! the shard lock, racing the quota change's walk that seals and converts
//! the entry, and racing a drop that seals it full.
//!
//! The generations' real code runs on loom's atomics: the decision on the
//! shared entry with the quota its cache copied (`try_acquire_shared`), the
//! change's steps with `convert_shared`, and the drop's `drop_shared`. A
//! loom read-write lock over the table's slot stands in for the dashmap
//! shard, taken as the limiter takes it: for writing by the walk, the drop
//! and a decision that must insert its key again, for reading by a decision
//! that met the seal and found its key in the table. Two threads' caches of
//! one key race the conversion in one model.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::{Arc, RwLock};
use loom::thread;
use loom_tests::gather;
use tollgate::{AcquireError, Entry, Generations, Quota, SharedEntry};

/// The clock reading everything happens at: a still clock, so that an
/// outcome depends only on the order.
const NOW: u64 = 5_000_000_000;

fn per_second(n: u64) -> Quota {
    Quota::new(n, n, Duration::from_secs(1)).unwrap()
}

/// One key's slot in the table: its shared entry, then (after a change's
/// walk) its converted inline entry, or none (after a drop).
enum Slot {
    Shared(Arc<Entry>),
    Inline(Entry),
    Absent,
}

struct Table {
    generations: Generations,
    slot: RwLock<Slot>,
}

impl Table {
    /// A full key, shared with a thread's cache: the table and the cache.
    fn new(quota: &Quota) -> (Arc<Self>, SharedEntry) {
        let generations = Generations::new(quota);
        let entry = Arc::new(generations.born(NOW));
        let cached = generations.share(Arc::clone(&entry));
        let table = Table {
            generations,
            slot: RwLock::new(Slot::Shared(entry)),
        };
        (Arc::new(table), cached)
    }

    /// A cached decision of `cost` tokens: on the cached entry, and in the
    /// table if that entry was sealed (a key no longer there is born again).
    fn decide(&self, cached: &SharedEntry, cost: u64) -> Result<u64, AcquireError> {
        if let Some(decided) = self.generations.try_acquire_shared(cached, NOW, cost) {
            return decided;
        }
        // A key in the table is decided under the shard's read lock; only
        // one born again takes the write lock, to insert it.
        {
            let slot = self.slot.read().unwrap();
            match &*slot {
                Slot::Shared(entry) => return self.generations.try_acquire(entry, NOW, cost),
                Slot::Inline(entry) => return self.generations.try_acquire(entry, NOW, cost),
                Slot::Absent => {}
            }
        }
        let mut slot = self.slot.write().unwrap();
        if let Slot::Absent = *slot {
            *slot = Slot::Inline(self.generations.born(NOW));
        }
        match &*slot {
            Slot::Shared(entry) => self.generations.try_acquire(entry, NOW, cost),
            Slot::Inline(entry) => self.generations.try_acquire(entry, NOW, cost),
            Slot::Absent => unreachable!(),
        }
    }

    /// Whole tokens the table holds for the key.
    fn tokens(&self) -> u64 {
        match &*self.slot.read().unwrap() {
            Slot::Shared(entry) => self.generations.available(entry, NOW),
            Slot::Inline(entry) => self.generations.available(entry, NOW),
            Slot::Absent => u64::MAX,
        }
    }
}

/// A cached decision of 8 of 10 tokens races a change to a capacity of 4:
/// before the seal it is admitted under the old quota and the 2 left carry
/// over; after it, it meets the seal, goes to the table and is refused by
/// the new capacity, which the 10 tokens carried fill. Never both, and
/// never a decision under the old quota on the converted state.
#[test]
fn a_cached_decision_racing_a_conversion_is_decided_once() {
    let outcomes = gather(|| {
        let (table, cached) = Table::new(&per_second(10));
        let changer = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let generations = &table.generations;
                let change = generations.begin(&per_second(4), |_| NOW);
                change.publish(NOW);
                {
                    let mut slot = table.slot.write().unwrap();
                    if let Slot::Shared(entry) = &*slot {
                        let converted = change.convert_shared(entry, || NOW).unwrap();
                        *slot = Slot::Inline(converted);
                    }
                }
                change.finish(NOW);
            })
        };
        let decided = table
            .decide(&cached, 8)
            .map_err(|refused| refused.to_string());
        changer.join().unwrap();
        (decided, table.tokens())
    });
    let exceeds = Err(AcquireError::ExceedsCapacity {
        cost: 8,
        capacity: 4,
    }
    .to_string());
    assert_eq!(outcomes, [(Ok(0), 2), (exceeds, 4)].into_iter().collect());
}

/// A cached decision of one token races a drop of the full bucket: either
/// it lands first and the drop keeps the bucket, or the drop seals and
/// takes it and the decision is made on a bucket born again full. Either
/// way one token is taken of the ten.
#[test]
fn a_cached_decision_racing_a_drop_is_decided_once() {
    let outcomes = gather(|| {
        let (table, cached) = Table::new(&per_second(10));
        let dropper = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let mut slot = table.slot.write().unwrap();
                let Slot::Shared(entry) = &*slot else {
                    unreachable!("only the drop takes the entry out");
                };
                let dropped = table.generations.drop_shared(entry, 0, NOW);
                if dropped {
                    table
                        .generations
                        .raise_dropped(0, table.generations.full_at(0, NOW));
                    *slot = Slot::Absent;
                }
                dropped
            })
        };
        let decided = table
            .decide(&cached, 1)
            .map_err(|refused| refused.to_string());
        let dropped = dropper.join().unwrap();
        (decided, dropped, table.tokens())
    });
    assert_eq!(
        outcomes,
        [(Ok(0), false, 9), (Ok(0), true, 9)].into_iter().collect()
    );
}

/// Two threads' caches of one hot key, each deciding 3 of 10 tokens, race
/// a change to a capacity of 4: a decision before the seal is made under
/// the old quota and what is left carries over (at most 4); one after it
/// meets the seal and is made in the table under the new capacity. Every
/// outcome is one of those orders: both before (4 left), one before and
/// one after (1 left), both after (the second refused, 1 left).
#[test]
fn two_cached_decisions_racing_a_conversion_are_each_decided_once() {
    let outcomes = gather(|| {
        let quota = per_second(10);
        let generations = Generations::new(&quota);
        let entry = Arc::new(generations.born(NOW));
        let caches = [
            generations.share(Arc::clone(&entry)),
            generations.share(Arc::clone(&entry)),
        ];
        let table = Arc::new(Table {
            generations,
            slot: RwLock::new(Slot::Shared(entry)),
        });
        let changer = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let generations = &table.generations;
                let change = generations.begin(&per_second(4), |_| NOW);
                change.publish(NOW);
                {
                    let mut slot = table.slot.write().unwrap();
                    if let Slot::Shared(entry) = &*slot {
                        let converted = change.convert_shared(entry, || NOW).unwrap();
                        *slot = Slot::Inline(converted);
                    }
                }
                change.finish(NOW);
            })
        };
        let [first, second] = caches;
        let other = {
            let table = Arc::clone(&table);
            thread::spawn(move || table.decide(&second, 3).is_ok())
        };
        let mine = table.decide(&first, 3).is_ok();
        let theirs = other.join().unwrap();
        changer.join().unwrap();
        let mut admitted = [mine, theirs];
        admitted.sort_unstable();
        (admitted, table.tokens())
    });
    let allowed = [([true, true], 4), ([true, true], 1), ([false, true], 1)];
    for outcome in &outcomes {
        assert!(allowed.contains(outcome), "{outcome:?} of {outcomes:?}");
    }
    // The orders all happened: the seal landed before, between and after
    // the decisions.
    assert_eq!(outcomes.len(), allowed.len(), "{outcomes:?}");
}
