//! Loom models of the keyed limiter's key cap (`src/keyed/cap.rs`): new
//! keys racing for places in a full table while one of them sweeps.
//!
//! The cap's real code runs on loom's atomics and mutex. The dashmap tables
//! around it are not loom-aware (a loom thread blocked on a shard lock would
//! hang the model), so a stand-in table, a loom mutex over a list of keys
//! each marked droppable (a full bucket) or not, takes their place: a sweep
//! drops the droppable keys and returns how many, as `drop_full` does. Every
//! model checks the bound (never more than `max_keys` keys, in the table or
//! counted) and that a new key is refused only when nothing could be dropped.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::model;
use tollgate::KeyCap;

/// The clock's reading in every model, and the sweep interval: at `NOW` a
/// first automatic sweep is due, a second one is not.
const NOW: u64 = 1;
const INTERVAL: u64 = 10;

/// A key cap and the stand-in table it counts.
struct Table {
    cap: KeyCap,
    max_keys: usize,
    /// Each key and whether it is droppable.
    keys: Mutex<Vec<(u32, bool)>>,
}

impl Table {
    /// A table of `max_keys` places holding `held` keys, each droppable or
    /// not.
    fn full(max_keys: usize, droppable: bool) -> Arc<Self> {
        let table = Arc::new(Table {
            cap: KeyCap::new(max_keys, Some(INTERVAL)),
            max_keys,
            keys: Mutex::new(Vec::new()),
        });
        for key in 0..max_keys as u32 {
            assert!(table.insert(key + 100, droppable), "room before the cap");
        }
        table
    }

    /// Inserts `key` as the keyed limiter does: a place first (waiting for
    /// or running a sweep at the cap), then the bucket. Whether it went in.
    fn insert(&self, key: u32, droppable: bool) -> bool {
        let Some(place) = self.cap.take_place(NOW, || NOW, |_| self.sweep()) else {
            return false;
        };
        let mut keys = self.keys.lock().unwrap();
        keys.push((key, droppable));
        assert!(keys.len() <= self.max_keys, "{} keys: {keys:?}", keys.len());
        assert!(
            self.cap.len() <= self.max_keys,
            "{} counted",
            self.cap.len()
        );
        place.keep();
        true
    }

    /// Drops every droppable key; how many.
    fn sweep(&self) -> usize {
        let mut keys = self.keys.lock().unwrap();
        let before = keys.len();
        keys.retain(|&(_, droppable)| !droppable);
        before - keys.len()
    }

    /// Asserts that the count and the table agree, under the cap.
    fn assert_settled(&self) {
        let keys = self.keys.lock().unwrap();
        assert_eq!(self.cap.len(), keys.len(), "{keys:?}");
        assert!(keys.len() <= self.max_keys);
    }
}

/// Two threads insert a new key each into a table full of droppable keys;
/// whichever takes the sweep lock first sweeps, the other waits for that
/// sweep or finds it ended. Neither is refused.
#[test]
fn two_new_keys_at_a_full_droppable_table_both_get_places() {
    model(|| {
        let table = Table::full(2, true);
        let other = Arc::clone(&table);
        let racer = thread::spawn(move || other.insert(1, false));
        let mine = table.insert(2, false);
        let theirs = racer.join().unwrap();
        assert!(mine && theirs, "refused: mine {mine}, theirs {theirs}");
        table.assert_settled();
        assert_eq!(table.cap.len(), 2);
    });
}

/// One thread sweeps by hand (`KeyedLimiter::sweep`) while another, finding
/// the table full, counts a key in (sweeping itself if it gets the lock
/// first: a first automatic sweep is due). The key gets a place, and the two
/// sweeps never uncount a key twice: the count still equals the table.
#[test]
fn a_new_key_beside_a_manual_sweep_gets_a_place() {
    model(|| {
        let table = Table::full(1, true);
        let other = Arc::clone(&table);
        let sweeper = thread::spawn(move || other.cap.sweep(|| other.sweep()));
        let inserted = table.insert(1, false);
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
        let table = Table::full(1, false);
        let other = Arc::clone(&table);
        let racer = thread::spawn(move || other.insert(1, false));
        let mine = table.insert(2, false);
        assert!(!mine && !racer.join().unwrap());
        table.assert_settled();
        assert_eq!(table.cap.len(), 1);
    });
}
