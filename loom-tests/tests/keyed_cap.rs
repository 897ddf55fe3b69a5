//! Loom models of the keyed limiter's key cap (`src/keyed/cap.rs`): new
//! keys racing for places in a full table while one of them sweeps.
//!
//! The cap's real code runs on loom's atomics and mutex. The dashmap tables
//! around it are not loom-aware (a loom thread blocked on a shard lock would
//! hang the model), so a stand-in table takes their place: a loom mutex over
//! a list of keys, each with the reading from which its bucket is full (so
//! droppable); a sweep at a reading drops the keys full at it and returns how
//! many, as `drop_full` does. Every model checks the bound (never more than
//! `max_keys` keys, in the table or counted), that the count matches the
//! table, and that a new key is refused only when nothing could be dropped.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::model;
use tollgate::KeyCap;

/// The reading every new key's decision is made on, and the sweep interval:
/// at `NOW` a first automatic sweep is due, a second one is not.
const NOW: u64 = 1;
const INTERVAL: u64 = 10;
/// Marks a key that no sweep may drop (its bucket is in debt for good).
const SPENT: u64 = u64::MAX;

/// A key cap and the stand-in table it counts.
struct Table {
    cap: KeyCap,
    max_keys: usize,
    /// Each key and the earliest reading at which its bucket is full, so
    /// droppable.
    keys: Mutex<Vec<(u32, u64)>>,
    /// What reading the clock again returns: later than [`NOW`] when the
    /// inserting threads' readings are stale.
    fresh: u64,
}

impl Table {
    /// A table of `max_keys` places, full of keys droppable from the
    /// reading `full_from` on, on a clock that now reads `fresh`.
    fn full(max_keys: usize, full_from: u64, fresh: u64) -> Arc<Self> {
        let table = Arc::new(Table {
            cap: KeyCap::new(max_keys, Some(INTERVAL)),
            max_keys,
            keys: Mutex::new(Vec::new()),
            fresh,
        });
        for key in 0..max_keys as u32 {
            assert!(table.insert(key + 100), "room before the cap");
        }
        for key in table.keys.lock().unwrap().iter_mut() {
            key.1 = full_from;
        }
        table
    }

    /// Inserts `key` as the keyed limiter does: a place first (waiting for
    /// or running a sweep at the cap), then the bucket. Whether it went in.
    /// The new key has just spent from its bucket: no sweep may drop it.
    fn insert(&self, key: u32) -> bool {
        let Some(place) = self.cap.take_place(
            NOW,
            || self.fresh,
            |at| {
                self.sweep(at);
            },
        ) else {
            return false;
        };
        let mut keys = self.keys.lock().unwrap();
        keys.push((key, SPENT));
        assert!(keys.len() <= self.max_keys, "{} keys: {keys:?}", keys.len());
        assert!(
            self.cap.counted() <= self.max_keys,
            "{} counted",
            self.cap.counted()
        );
        place.keep();
        true
    }

    /// Drops every key full at `at` and uncounts them, as `drop_idle`
    /// does; how many.
    fn sweep(&self, at: u64) -> usize {
        let mut keys = self.keys.lock().unwrap();
        let before = keys.len();
        keys.retain(|&(_, full_from)| full_from > at);
        let dropped = before - keys.len();
        self.cap.forget(dropped);
        dropped
    }

    /// Asserts that the count and the table agree, under the cap.
    fn assert_settled(&self) {
        let keys = self.keys.lock().unwrap();
        assert_eq!(self.cap.counted(), keys.len(), "{keys:?}");
        assert!(keys.len() <= self.max_keys);
    }
}

/// Two threads race a new key each into a table of two places full of keys
/// droppable from `full_from` on, on a clock that reads `fresh` again;
/// asserts that neither is refused.
fn assert_two_new_keys_get_places(full_from: u64, fresh: u64) {
    model(move || {
        let table = Table::full(2, full_from, fresh);
        let other = Arc::clone(&table);
        let racer = thread::spawn(move || other.insert(1));
        let mine = table.insert(2);
        let theirs = racer.join().unwrap();
        assert!(mine && theirs, "refused: mine {mine}, theirs {theirs}");
        table.assert_settled();
        assert_eq!(table.cap.counted(), 2);
    });
}

/// Two threads insert a new key each into a table full of droppable keys;
/// whichever takes the sweep lock first sweeps, the other waits for that
/// sweep or finds it ended. Neither is refused.
#[test]
fn two_new_keys_at_a_full_droppable_table_both_get_places() {
    assert_two_new_keys_get_places(0, NOW);
}

/// One thread sweeps by hand (`KeyedLimiter::sweep`) while another, finding
/// the table full, counts a key in (sweeping itself if it gets the lock
/// first: a first automatic sweep is due). The key gets a place, and the two
/// sweeps never uncount a key twice: the count still equals the table.
#[test]
fn a_new_key_beside_a_manual_sweep_gets_a_place() {
    model(|| {
        let table = Table::full(1, 0, NOW);
        let other = Arc::clone(&table);
        let sweeper = thread::spawn(move || other.cap.sweep(|| other.sweep(NOW)));
        let inserted = table.insert(1);
        let dropped = sweeper.join().unwrap();
        assert!(inserted);
        assert!(dropped <= 1);
        table.assert_settled();
    });
}

/// With nothing droppable, both new keys are refused, neither waits for
/// ever, and the table keeps its keys.
#[test]
fn new_keys_at_a_table_of_spent_keys_are_refused() {
    model(|| {
        let table = Table::full(1, SPENT, NOW);
        let other = Arc::clone(&table);
        let racer = thread::spawn(move || other.insert(1));
        let mine = table.insert(2);
        assert!(!mine && !racer.join().unwrap());
        table.assert_settled();
        assert_eq!(table.cap.counted(), 1);
    });
}

/// Both new keys decide on a stale reading: due, but so old that a sweep at
/// it drops nothing (the keys became full after it). The sweeping thread
/// reads the clock again and sweeps at that reading; neither key is
/// refused.
#[test]
fn new_keys_on_a_stale_reading_get_places_from_a_fresh_sweep() {
    assert_two_new_keys_get_places(NOW + 4, NOW + 4);
}
