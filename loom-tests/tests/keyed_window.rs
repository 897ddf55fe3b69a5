//! Loom models of the keyed window counters (`src/window/keyed.rs`,
//! `src/window/keys.rs`): a key's decision racing a sweep that drops and an
//! insert that recreates the same key, the race of two new keys' first
//! decisions for a window's last slot, and the roll-over of a key's window
//! raced by a sweep.
//!
//! A key's word, its fresh state and the sweep watermark are the real code
//! (`WindowKeys`, `WindowState`) on loom's atomics. The dashmap shard around
//! them is not loom-aware, so a loom `RwLock` over the key's slot stands in
//! for it, taken as `keyed.rs` takes the shard: for reading to decide on a
//! tracked key, for writing to insert one or to sweep; the clock reading is
//! taken after the lookup, and a sweep publishes its reading before it
//! locks anything.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
use std::time::Duration;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, RwLock};
use loom::thread;
use loom_tests::gather;
use tollgate::window::{Fixed, Sliding, WindowKeys, WindowKind, WindowState};
use tollgate::{AcquireError, WindowQuota};

const SECOND: u64 = 1_000_000_000;

/// One key's slot in a stand-in shard, its window rules, and the clock.
struct Shard<K> {
    slot: RwLock<Option<WindowState>>,
    keys: WindowKeys<K>,
    clock: AtomicU64,
}

/// What one decision saw and got: its reading, and the window its unit was
/// counted in (or the refusal's wait).
type Decided = (u64, Result<u64, Duration>);

impl<K: WindowKind> Shard<K> {
    /// A shard of `limit` per second whose key, if `spent`, has counted
    /// `limit` in window 0; the clock at 0.
    fn new(limit: u64, spent: bool) -> Arc<Self> {
        let quota = WindowQuota::new(limit, Duration::from_secs(1)).unwrap();
        let keys = WindowKeys::for_model(&quota).unwrap();
        let slot = spent.then(|| {
            let state = keys.fresh(0);
            keys.try_acquire(&state, 0, limit).unwrap();
            state
        });
        Arc::new(Shard {
            slot: RwLock::new(slot),
            keys,
            clock: AtomicU64::new(0),
        })
    }

    /// One unit for the key, as `KeyedWindow::admit` takes it.
    fn decide(&self) -> Decided {
        {
            let tracked = self.slot.read().unwrap();
            if let Some(state) = tracked.as_ref() {
                let at = self.clock.load(Ordering::Acquire);
                return (at, self.counted(state, at));
            }
        }
        // Not found: the reading is taken before the insert, which a sweep
        // may precede.
        let at = self.clock.load(Ordering::Acquire);
        let mut slot = self.slot.write().unwrap();
        let state = slot.get_or_insert_with(|| self.keys.fresh(at));
        (at, self.counted(state, at))
    }

    fn counted(&self, state: &WindowState, at: u64) -> Result<u64, Duration> {
        self.keys
            .try_acquire(state, at, 1)
            .map_err(|error| match error {
                AcquireError::Insufficient { retry_after } => retry_after,
                other => panic!("models only make valid requests: {other}"),
            })
    }

    /// A sweep at the clock's reading, as `KeyedWindow::sweep` runs it.
    fn sweep(&self) {
        let at = self.clock.load(Ordering::Acquire);
        self.keys.sweeping_at(at);
        let mut slot = self.slot.write().unwrap();
        if slot
            .as_ref()
            .is_some_and(|state| self.keys.is_idle(state, at))
        {
            *slot = None;
        }
    }
}

/// A new key: one thread spends its one unit of window 0, moves the clock
/// to `then` and sweeps; the other decides on whatever reading it gets.
/// Every run's two decisions, the other thread's first.
fn decide_racing_a_sweep<K: WindowKind>(then: u64) -> BTreeSet<(Decided, Decided)> {
    gather(move || {
        let shard = Shard::<K>::new(1, false);
        let spender = {
            let shard = Arc::clone(&shard);
            thread::spawn(move || {
                let decided = shard.decide();
                shard.clock.store(then, Ordering::Release);
                shard.sweep();
                decided
            })
        };
        let decided = shard.decide();
        (spender.join().unwrap(), decided)
    })
}

/// No run counts two units in window 0; and some run decided a reading
/// of 0, taken before the other thread's insert, on the word it recreated
/// after the sweep dropped the spent key: counted in the sweep's window,
/// not the reading's. Without the sweep's watermark that run counts a
/// second unit in window 0.
fn assert_no_window_is_reopened(runs: &BTreeSet<(Decided, Decided)>, then: u64) {
    for (spender, decider) in runs {
        assert!(
            !(spender.1 == Ok(0) && decider.1 == Ok(0)),
            "window 0 reopened: {runs:?}"
        );
    }
    assert!(
        runs.contains(&((0, Ok(0)), (0, Ok(then / SECOND)))),
        "no stale decision on a recreated key explored: {runs:?}"
    );
}

#[test]
fn a_swept_and_recreated_fixed_key_never_reopens_its_window() {
    let runs = decide_racing_a_sweep::<Fixed>(SECOND);
    assert_no_window_is_reopened(&runs, SECOND);
}

#[test]
fn a_swept_and_recreated_sliding_key_never_reopens_its_window() {
    // A sliding key is idle once the window after its last has ended too.
    let runs = decide_racing_a_sweep::<Sliding>(2 * SECOND);
    assert_no_window_is_reopened(&runs, 2 * SECOND);
}

/// Two threads decide on the key, with a sweep on the main thread; the
/// number of units admitted, and the key's state after.
fn two_decisions_and_a_sweep<K: WindowKind>(spent: bool, at: u64) -> BTreeSet<(usize, bool)> {
    gather(move || {
        let shard = Shard::<K>::new(1, spent);
        shard.clock.store(at, Ordering::Release);
        let deciders: Vec<_> = (0..2)
            .map(|_| {
                let shard = Arc::clone(&shard);
                thread::spawn(move || shard.decide())
            })
            .collect();
        shard.sweep();
        let admitted = deciders
            .into_iter()
            .map(|decider| decider.join().unwrap())
            .filter(|(_, decided)| decided.is_ok())
            .count();
        (admitted, shard.slot.read().unwrap().is_some())
    })
}

#[test]
fn two_new_keys_race_for_the_last_slot_once() {
    // One slot, no key yet: one insert wins, the other decides on its word.
    let runs = two_decisions_and_a_sweep::<Fixed>(false, 0);
    assert_eq!(runs, BTreeSet::from([(1, true)]));
    let runs = two_decisions_and_a_sweep::<Sliding>(false, 0);
    assert_eq!(runs, BTreeSet::from([(1, true)]));
}

#[test]
fn a_keys_window_rolls_over_once_whatever_the_sweep_does() {
    // Window 0 spent, both readings in window 1 (sliding: window 2, where
    // the spent window no longer weighs): the sweep may drop the key before
    // either decision, between them, or not at all; one unit, once.
    let runs = two_decisions_and_a_sweep::<Fixed>(true, SECOND);
    assert_eq!(runs, BTreeSet::from([(1, true)]));
    let runs = two_decisions_and_a_sweep::<Sliding>(true, 2 * SECOND);
    assert_eq!(runs, BTreeSet::from([(1, true)]));
}
