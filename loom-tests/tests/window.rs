//! Loom models of the window counters' compare-and-swap loop: the race for
//! a window's last slot, the race of the first decisions of a new window
//! (the roll-over), a decision on a stale reading across a roll-over, a
//! receipt's undo racing a roll-over, and two reservations racing for the
//! room a sliding window frees within itself.
//!
//! Without `--cfg tollgate_loom` the file is empty; the docs stand before
//! the cfg so that the empty crate still has them.

#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
// The limiter is shared through std's `Arc`, a pointer receipts can hold;
// the race is on its word, which is loom's through `tollgate::sync`.
use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::gather;
use tollgate::window::{Fixed, Sliding, WindowCounter, WindowKind};
use tollgate::{AcquireError, Limit, ManualClock, Receipt, WindowQuota};

const SECOND: Duration = Duration::from_secs(1);

type Counter<K> = WindowCounter<K, ManualClock>;

/// What one `try_acquire` returned: admitted, or refused with its wait.
type Decision = Result<(), Duration>;

fn decision(result: Result<(), AcquireError>) -> Decision {
    result.map_err(|error| match error {
        AcquireError::Insufficient { retry_after } => retry_after,
        other => panic!("models only make valid requests: {other}"),
    })
}

/// A counter of `limit` per second on a manual clock at zero.
fn counter<K: WindowKind>(limit: u64) -> Arc<Counter<K>> {
    let quota = WindowQuota::new(limit, SECOND).unwrap();
    Arc::new(WindowCounter::with_clock(quota, ManualClock::new()).unwrap())
}

/// Races one `try_acquire(1)` per thread on `limiter` and returns their
/// decisions in thread order, with `available()` once both are done.
fn race_two<K: WindowKind>(limiter: Arc<Counter<K>>) -> (Vec<Decision>, u64) {
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || decision(limiter.try_acquire(1)))
        })
        .collect();
    let decisions = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (decisions, limiter.available())
}

/// Exactly one of two racing threads wins, the loser told `wait`.
fn one_winner(wait: Duration) -> BTreeSet<(Vec<Decision>, u64)> {
    BTreeSet::from([(vec![Ok(()), Err(wait)], 0), (vec![Err(wait), Ok(())], 0)])
}

// (a) The last slot of a window.

#[test]
fn two_threads_race_for_the_last_slot_of_a_fixed_window() {
    let runs = gather(|| {
        let limiter = counter::<Fixed>(2);
        limiter.try_acquire(1).unwrap();
        race_two(limiter)
    });
    // The loser decided on the winner's word: the window is full until 1 s.
    assert_eq!(runs, one_winner(SECOND));
}

#[test]
fn two_threads_race_for_the_last_slot_of_a_sliding_window() {
    let runs = gather(|| {
        let limiter = counter::<Sliding>(2);
        limiter.try_acquire(1).unwrap();
        race_two(limiter)
    });
    // Full at 0 with 2 counted: the next unit fits once the 2 weigh 1,
    // half way into the next window.
    assert_eq!(runs, one_winner(SECOND + SECOND / 2));
}

// (b) The first decisions of a new window: one roll-over, not two.

#[test]
fn racing_first_decisions_roll_a_fixed_window_over_once() {
    let runs = gather(|| {
        let limiter = counter::<Fixed>(1);
        limiter.try_acquire(1).unwrap();
        limiter.clock().set(Duration::from_millis(1200));
        race_two(limiter)
    });
    // A second roll from the old word would reset the winner's count and
    // admit both.
    assert_eq!(runs, one_winner(Duration::from_millis(800)));
}

#[test]
fn racing_first_decisions_carry_a_sliding_window_over_once() {
    let runs = gather(|| {
        let limiter = counter::<Sliding>(2);
        limiter.try_acquire(2).unwrap();
        // Half way in, the last window's 2 weigh 1: room for one.
        limiter.clock().set(SECOND + SECOND / 2);
        race_two(limiter)
    });
    // The loser sees 2 · 0.5 + 1: it fits at the next window's start,
    // where the new window's 1 weighs 1.
    assert_eq!(runs, one_winner(SECOND / 2));
}

// (c) A decision on a reading taken before another thread's roll-over.

/// Thread 0 acquires one unit on whatever reading it gets; thread 1 moves
/// the clock to `then` in the next window, then acquires one. The first
/// window is full (`limit` of `limit`), and at `then` there is room for
/// exactly one more.
fn stale_race<K: WindowKind>(limit: u64, then: Duration) -> BTreeSet<Vec<Decision>> {
    gather(move || {
        let limiter = counter::<K>(limit);
        limiter.try_acquire(limit).unwrap();
        let racer = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || decision(limiter.try_acquire(1)))
        };
        limiter.clock().set(then);
        let mover = decision(limiter.try_acquire(1));
        vec![racer.join().unwrap(), mover]
    })
}

/// Asserts one admission in every run, and that some run decided a
/// reading of 0 on the rolled word: counted in the new window, full by
/// then, its wait running from 0.
fn assert_stale_decisions_count_in_the_new_window(
    runs: &BTreeSet<Vec<Decision>>,
    stale_wait: Duration,
) {
    for run in runs {
        assert_eq!(run.iter().filter(|d| d.is_ok()).count(), 1, "{run:?}");
    }
    assert!(
        runs.contains(&vec![Err(stale_wait), Ok(())]),
        "no stale decision after the roll explored: {runs:?}"
    );
}

#[test]
fn a_stale_reading_never_reopens_a_fixed_window() {
    // The new window is full until 2 s.
    let runs = stale_race::<Fixed>(1, SECOND);
    assert_stale_decisions_count_in_the_new_window(&runs, 2 * SECOND);
}

#[test]
fn a_stale_reading_never_reopens_a_sliding_window() {
    // At 1.5 s the first window's 2 weigh 1: room for one. Decided at the
    // new window's start (its heaviest point) after the mover's unit, the
    // stale unit fits only when the 2 have faded out, at 2 s.
    let runs = stale_race::<Sliding>(2, SECOND + SECOND / 2);
    assert_stale_decisions_count_in_the_new_window(&runs, 2 * SECOND);
}

// (d) A receipt's undo racing a roll-over.

#[test]
fn an_undo_racing_a_roll_over_never_frees_the_new_window() {
    let runs = gather(|| {
        let limiter = counter::<Fixed>(1);
        let receipt = Receipt::take(Arc::clone(&limiter), 1).unwrap();
        let undo = thread::spawn(move || receipt.undo());
        limiter.clock().set(SECOND);
        let admitted = decision(limiter.try_acquire(1));
        undo.join().unwrap();
        (admitted, limiter.available())
    });
    // Whenever the undo lands, the new window's one slot stays taken.
    assert_eq!(runs, BTreeSet::from([(Ok(()), 0)]));
}

#[test]
fn an_undo_racing_a_roll_over_never_lightens_the_new_window() {
    let runs = gather(|| {
        let limiter = counter::<Sliding>(2);
        let receipt = Receipt::take(Arc::clone(&limiter), 1).unwrap();
        limiter.try_acquire(1).unwrap();
        let undo = thread::spawn(move || receipt.undo());
        limiter.clock().set(SECOND + SECOND / 2);
        let admitted = decision(limiter.try_acquire(1));
        undo.join().unwrap();
        (admitted, limiter.available())
    });
    // Undone in the first window, the last window weighs 1 · 0.5; not
    // undone, 2 · 0.5. With the new 1 either leaves less than one unit.
    // An undo taken out of the new window's count would leave one.
    assert_eq!(runs, BTreeSet::from([(Ok(()), 0)]));
}

// (e) Reservations racing for the room that frees within a window.

#[test]
fn two_reservations_race_for_the_room_a_sliding_window_frees_within_it() {
    let runs = gather(|| {
        let limiter = counter::<Sliding>(2);
        limiter.try_acquire(2).unwrap();
        // At the next window's start the last window's 2 weigh 2: one unit
        // fits half way in, when they weigh 1.
        limiter.clock().set(SECOND);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || decision(limiter.reserve(1, SECOND).map(drop)))
            })
            .collect();
        let decisions: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (decisions, limiter.available())
    });
    // The loser decided on the winner's count: its unit fits only when the
    // winner's weighs nothing, at the start of the window after, which is
    // not this one: refused, with the wait until the same call succeeds.
    assert_eq!(runs, one_winner(SECOND));
}
