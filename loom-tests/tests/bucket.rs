//! Loom models of `TokenBucket`'s compare-and-swap loop.
//!
//! Each model races a few operations on one bucket over a `ManualClock`. With
//! the clock frozen every run must match a sequential order exactly (see
//! `Scenario::explore_linearizable`); where threads move the clock, stale and
//! backward readings break that correspondence, so those models bound the
//! credit instead.
//!
//! Without `--cfg tollgate_loom` the file is empty; the docs stand before the
//! cfg so that the empty crate still has them.

#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
use std::time::Duration;

use loom_tests::{Op, Outcome, Run, Scenario};

const SECOND: Duration = Duration::from_secs(1);

const ADMITTED_1: Outcome = Outcome::Admitted {
    cost: 1,
    wait: Duration::ZERO,
};

const fn denied(retry_after: Duration) -> Outcome {
    Outcome::Denied { retry_after }
}

/// Asserts the credit left on a frozen clock is exactly what the race did
/// not spend.
fn assert_conserved(scenario: &Scenario, run: &Run) {
    assert_eq!(
        run.available,
        scenario.envelope(Duration::ZERO) - run.admitted(),
        "{run:?}"
    );
}

// (a) Races for the last tokens.

#[test]
fn two_threads_split_two_tokens() {
    let scenario = Scenario::new(2, 1)
        .thread([Op::Acquire(1), Op::Acquire(1)])
        .thread([Op::Acquire(1), Op::Acquire(1)]);
    for run in scenario.explore_linearizable() {
        assert_eq!(run.admitted(), 2, "{run:?}");
        assert_conserved(&scenario, &run);
    }
}

#[test]
fn three_threads_race_for_two_tokens() {
    let scenario = Scenario::new(2, 1)
        .thread([Op::Acquire(1)])
        .thread([Op::Acquire(1)])
        .thread([Op::Acquire(1)]);
    let runs = scenario.explore_linearizable();
    // Each thread is the loser in some run.
    assert_eq!(runs.len(), 3);
    for run in runs {
        assert_eq!(run.admitted(), 2, "{run:?}");
        assert_conserved(&scenario, &run);
    }
}

#[test]
fn weighted_costs_that_cannot_both_fit() {
    let scenario = Scenario::new(3, 1)
        .thread([Op::Acquire(2)])
        .thread([Op::Acquire(2)]);
    let two = Outcome::Admitted {
        cost: 2,
        wait: Duration::ZERO,
    };
    // Whichever state the loser first loaded, it decides on the winner's: its
    // retry_after is the one token it then lacks.
    let run = |first: Outcome, second: Outcome| Run {
        setup: vec![],
        threads: vec![vec![first], vec![second]],
        available: 1,
    };
    let expected = BTreeSet::from([run(two, denied(SECOND)), run(denied(SECOND), two)]);
    assert_eq!(scenario.explore_linearizable(), expected);
}

#[test]
fn weighted_costs_that_fit_together() {
    let scenario = Scenario::new(3, 1)
        .thread([Op::Acquire(2)])
        .thread([Op::Acquire(1)]);
    // Whichever compare-and-swap fails re-decides on the winner's state and
    // still fits.
    for run in scenario.explore_linearizable() {
        assert_eq!(run.admitted(), 3, "{run:?}");
        assert_conserved(&scenario, &run);
    }
}

// (b) Acquisitions racing writers that need no clock.

/// The first thread's single outcome and the credit left, over every run.
fn endings(scenario: &Scenario) -> BTreeSet<(Outcome, u64)> {
    scenario
        .explore_linearizable()
        .iter()
        .map(|run| (run.threads[0][0], run.available))
        .collect()
}

#[test]
fn a_denial_never_overwrites_a_refund() {
    let scenario = Scenario::new(2, 1)
        .setup([Op::Acquire(2)])
        .thread([Op::Acquire(1)])
        .thread([Op::Refund(1)]);
    // A denial that wrote back the state it loaded would lose a refund landing
    // between its load and its write: a denied run with nothing available.
    assert_eq!(
        endings(&scenario),
        BTreeSet::from([(denied(SECOND), 1), (ADMITTED_1, 0)])
    );
}

#[test]
fn an_admission_and_a_refund_both_land() {
    let scenario = Scenario::new(2, 1)
        .setup([Op::Acquire(1)])
        .thread([Op::Acquire(1)])
        .thread([Op::Refund(1)]);
    // Two compare-and-swap loops on one word: a lost update would leave 0
    // (refund lost) or 2 (admission lost) available.
    for run in scenario.explore_linearizable() {
        assert_eq!((run.threads[0][0], run.available), (ADMITTED_1, 1));
    }
}

#[test]
fn a_reset_orders_against_a_denial() {
    let scenario = Scenario::new(2, 1)
        .setup([Op::Acquire(2)])
        .thread([Op::Acquire(1)])
        .thread([Op::Reset]);
    // Denied before the reset, so it ends full; or admitted from the reset's
    // full bucket, so one is spent. Admitted-and-full would mean the reset
    // erased an admission that came after it; denied-with-one-spent, that the
    // denial undid the reset.
    assert_eq!(
        endings(&scenario),
        BTreeSet::from([(denied(SECOND), 2), (ADMITTED_1, 1)])
    );
}

// `reset` is a swap rather than a store: loom 0.7.3 lets a plain store land
// between the read and the write of a racing read-modify-write
// (tokio-rs/loom#254), an execution C++ atomics forbid, which would make this
// model report a lost reset that real hardware cannot produce.
#[test]
fn a_reset_orders_against_an_admission() {
    let scenario = Scenario::new(2, 1)
        .setup([Op::Acquire(1)])
        .thread([Op::Acquire(1)])
        .thread([Op::Reset]);
    // A reset landing between the acquirer's load and its compare-and-swap
    // fails the swap; the retry admits from the full bucket.
    assert_eq!(
        endings(&scenario),
        BTreeSet::from([(ADMITTED_1, 2), (ADMITTED_1, 1)])
    );
}

// (c) Clock readings that are stale or go backwards.

/// Asserts that no run spends or keeps more than the quota allows by
/// `t_final`, nor more than the most generous sequential order spends.
fn assert_no_credit_minted(scenario: &Scenario, runs: &BTreeSet<Run>, t_final: Duration) {
    let envelope = scenario.envelope(t_final);
    let sequential_best = scenario.sequential().iter().map(Run::admitted).max();
    for run in runs {
        assert!(run.admitted() + run.available <= envelope, "{run:?}");
        assert!(Some(run.admitted()) <= sequential_best, "{run:?}");
    }
}

#[test]
fn a_stale_clock_reading_mints_no_credit() {
    // Full at zero, one more token refilled by the advance. The first thread
    // may read the clock before the advance, find its two tokens, lose its
    // compare-and-swap to the second thread's fresh admission, and re-decide
    // on its stale reading.
    let scenario = Scenario::new(2, 1)
        .thread([Op::Acquire(2), Op::Acquire(1)])
        .thread([Op::Advance(SECOND), Op::Acquire(1)]);
    let runs = scenario.explore();
    assert_no_credit_minted(&scenario, &runs, SECOND);
    // A stale decision is visible as a retry_after counted from zero rather
    // than from the advanced clock: without one the model would not exercise
    // staleness.
    assert!(
        runs.iter()
            .any(|run| run.threads[0][0] == denied(2 * SECOND)),
        "no stale reading explored"
    );
}

#[test]
fn a_clock_set_backwards_mints_no_credit() {
    // One token refilled by t = 1s; the clock then steps back to zero and
    // forward again while the first thread acquires. Replaying the second
    // up-step must not refill the token twice.
    let scenario = Scenario::new(1, 1)
        .setup([Op::Acquire(1), Op::SetClock(SECOND)])
        .thread([Op::Acquire(1), Op::Acquire(1)])
        .thread([Op::SetClock(Duration::ZERO), Op::SetClock(SECOND)]);
    // The clock never shows more than 1s: the forward-only envelope.
    assert_no_credit_minted(&scenario, &scenario.explore(), SECOND);
}

// (d) Delay racing denial.

#[test]
fn a_reservation_races_an_acquire_for_the_last_token() {
    let scenario = Scenario::new(2, 1)
        .setup([Op::Acquire(1)])
        .thread([Op::Acquire(1)])
        .thread([Op::Reserve(1, SECOND)])
        .thread([Op::Reserve(1, SECOND)]);
    for run in scenario.explore_linearizable() {
        // On a frozen clock at zero an admission's start is its wait.
        let mut starts: Vec<(Duration, u64)> = run
            .outcomes()
            .filter_map(|outcome| match *outcome {
                Outcome::Admitted { cost, wait } => Some((wait, cost)),
                _ => None,
            })
            .collect();
        starts.sort();
        let mut started = 0;
        for (start, cost) in starts {
            started += cost;
            assert!(started <= scenario.envelope(start), "{run:?}");
        }
        // A one-second wait budget reaches exactly the envelope at 1s,
        // whoever wins the last immediate token.
        assert_eq!(run.admitted(), scenario.envelope(SECOND), "{run:?}");
        assert_eq!(run.available, 0, "{run:?}");
    }
}
