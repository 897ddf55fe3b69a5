//! Loom models of a quota change (`set_quota`) racing the operations on a
//! bucket: a decision, a receipt's undo, another change, and, on a striped
//! bucket, takes from a pool the change seals.
//!
//! The clock is frozen, so every run must match one of the two orders of
//! the race, and the tokens admitted plus those left never exceed what the
//! bucket held: a change carries tokens and never adds any.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use loom_tests::gather;
use tollgate::{Limit, ManualClock, Quota, Receipt, StripedBucket, TokenBucket};

const SECOND: Duration = Duration::from_secs(1);

fn quota(capacity: u64, tokens: u64) -> Quota {
    Quota::new(capacity, tokens, SECOND).expect("valid quota")
}

fn bucket(quota: Quota) -> Arc<TokenBucket<ManualClock>> {
    Arc::new(TokenBucket::with_clock(quota, ManualClock::new()))
}

/// Tokens a frozen bucket still admits, one at a time.
fn drain(limit: &impl Limit) -> u64 {
    let mut admitted = 0;
    while limit.try_acquire(1).is_ok() {
        admitted += 1;
    }
    admitted
}

/// A decision against a change to a smaller capacity in thirds of a
/// nanosecond: before the change, the token comes out of 2 and 1 carries;
/// after it, 1 carries and the token comes out of it. Nothing else.
#[test]
fn a_decision_racing_a_change_lands_on_one_side_of_it() {
    let runs = gather(|| {
        let shared = bucket(quota(2, 1));
        let other = Arc::clone(&shared);
        let decider = thread::spawn(move || other.try_acquire(1).is_ok());
        shared.set_quota(quota(1, 3));
        let admitted = decider.join().unwrap();
        assert_eq!(shared.quota(), quota(1, 3));
        (admitted, drain(&*shared))
    });
    assert_eq!(runs.into_iter().collect::<Vec<_>>(), [(true, 0), (true, 1)]);
}

/// A receipt's undo against a change to a larger capacity: before the
/// change, its token is back and both carry; after it, the receipt belongs
/// to another generation and gives nothing, so one token carries. An undo
/// that reached the sealed word or the successor would show as a third
/// outcome.
#[test]
fn an_undo_racing_a_change_gives_back_only_before_it() {
    let runs = gather(|| {
        let shared = bucket(quota(2, 1));
        let receipt = Receipt::take(Arc::clone(&shared), 1).unwrap();
        let undoer = thread::spawn(move || receipt.undo());
        shared.set_quota(quota(3, 1));
        undoer.join().unwrap();
        drain(&*shared)
    });
    assert_eq!(runs.into_iter().collect::<Vec<_>>(), [1, 2]);
}

/// Two changes racing: one of them is in force, and the tokens went through
/// both capacities in one order or the other (`min(4, 3, 2)` either way).
#[test]
fn two_changes_racing_leave_one_in_force() {
    let runs = gather(|| {
        let shared = bucket(quota(4, 1));
        let other = Arc::clone(&shared);
        let changer = thread::spawn(move || other.set_quota(quota(3, 1)));
        shared.set_quota(quota(2, 3));
        changer.join().unwrap();
        let capacity = shared.quota().capacity();
        (capacity, drain(&*shared))
    });
    assert_eq!(runs.into_iter().collect::<Vec<_>>(), [(2, 2), (3, 2)]);
}

/// Takes from a striped bucket's pool against a change that seals it: what
/// the pool spent before the seal came out of the old capacity, the pool's
/// rest goes back before the bucket changes, and after the change at most
/// the new capacity is admitted.
#[test]
fn pool_takes_racing_a_change_stay_within_both_capacities() {
    gather(|| {
        let striped = Arc::new(StripedBucket::with_clock(
            quota(4, 1),
            ManualClock::new(),
            1,
            2,
        ));
        let other = Arc::clone(&striped);
        let taker = thread::spawn(move || {
            u64::from(other.try_acquire(1).is_ok()) + u64::from(other.try_acquire(1).is_ok())
        });
        striped.set_quota(quota(3, 1));
        let taken = taker.join().unwrap();
        let after = drain(&*striped);
        assert!(after <= 3, "{after} admitted after the change");
        assert!(taken + after <= 4, "{taken} + {after} from a bucket of 4");
        // The pool's unspent tokens came back, unless a refill held it at
        // the change: then its lease (2) was dropped with it.
        assert!(taken + after >= 2, "{taken} + {after}: tokens lost");
    });
}
