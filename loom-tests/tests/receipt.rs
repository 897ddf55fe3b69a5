//! Loom models of a receipt's undo, the one way credit flows back to a
//! bucket, racing the operations that move its state word: admissions,
//! refill (a moving clock) and resets.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::time::Duration;

use std::sync::Arc;

use loom::thread;
use loom_tests::{assert_drained_within_envelope, assert_envelope, gather, model};
use tollgate::{Limit, ManualClock, Quota, Receipt, TokenBucket};

/// A bucket of `capacity` refilled at one token per second, full at time 0.
fn bucket(capacity: u64, clock: &ManualClock) -> Arc<TokenBucket<ManualClock>> {
    let quota = Quota::new(capacity, 1, Duration::from_secs(1)).expect("valid quota");
    Arc::new(TokenBucket::with_clock(quota, clock.clone()))
}

/// On a frozen clock an undo is exact whether or not an admission came
/// between: what the racing thread admitted plus what is left is the whole
/// capacity, in every interleaving. The thread sees the receipt's token back
/// only if the undo came first.
#[test]
fn an_undo_racing_admissions_on_a_frozen_clock_is_exact() {
    let admitted = gather(|| {
        let clock = ManualClock::new();
        let shared = bucket(2, &clock);
        let receipt = Receipt::take(Arc::clone(&shared), 1).unwrap();
        let other = Arc::clone(&shared);
        let racer = thread::spawn(move || {
            u64::from(other.try_acquire(1).is_ok()) + u64::from(other.try_acquire(1).is_ok())
        });
        receipt.undo();
        let admitted = racer.join().unwrap();
        assert_eq!(
            admitted + shared.available(),
            2,
            "a token was lost or minted"
        );
        admitted
    });
    // Both outcomes are reachable: the undo before the second admission
    // (2 admitted) or after it (1 admitted, then the token returns).
    assert_eq!(admitted.into_iter().collect::<Vec<_>>(), [1, 2]);
}

/// An undo races a refill and an admission it lets in: the receipt's token
/// was taken from a full bucket at 0, another thread moves the clock to
/// 0.5 s and takes one. Giving the whole token back after that would mint
/// the half token of refill the full bucket wasted; every window of what
/// is then admitted must fit the envelope.
#[test]
fn an_undo_racing_refill_and_an_admission_mints_nothing() {
    const HALF: Duration = Duration::from_millis(500);
    model(|| {
        let clock = ManualClock::new();
        let shared = bucket(2, &clock);
        let receipt = Receipt::take(Arc::clone(&shared), 1).unwrap();
        let (other, c) = (Arc::clone(&shared), clock.clone());
        let racer = thread::spawn(move || {
            c.set(HALF);
            other.try_acquire(1).is_ok()
        });
        receipt.undo();
        let admitted_at_half = racer.join().unwrap();
        assert_drained_within_envelope(&shared, &clock, admitted_at_half.then_some(HALF));
    });
}

/// A reset races an undo and an admission after it. A reset forgives every
/// debt, the receipt's included, so it is a trusted operation like refund
/// (`docs/semantics.md`, "Giving back"): an undo after it may return the
/// receipt's cost once more, never more than that, and the state word never
/// wraps. The reachable outcomes are exactly these.
#[test]
fn an_undo_racing_a_reset_returns_at_most_its_cost_and_never_wraps() {
    let left = gather(|| {
        let clock = ManualClock::new();
        let shared = bucket(2, &clock);
        let receipt = Receipt::take(Arc::clone(&shared), 2).unwrap();
        let other = Arc::clone(&shared);
        let resetter = thread::spawn(move || {
            other.reset();
            other.try_acquire(1).is_ok()
        });
        receipt.undo();
        assert!(resetter.join().unwrap(), "a reset bucket admits");
        let left = shared.available();
        assert!(left <= 2);
        // The word is in range: a full drain admits exactly what is left.
        assert_eq!(
            (0..3).filter(|_| shared.try_acquire(1).is_ok()).count() as u64,
            left
        );
        left
    });
    // 1: the undo came before the reset's admission; 2: after it, giving
    // back (once more) what the reset had already forgiven.
    assert_eq!(left.into_iter().collect::<Vec<_>>(), [1, 2]);
}

/// A settlement above the estimate races admissions on a frozen clock:
/// the excess is charged whatever the interleaving, so what the racing
/// thread admitted, the receipt's actual cost and the debt left add up to
/// the capacity exactly, and an admission after the debit waits it out.
#[test]
fn a_settlement_above_its_estimate_racing_admissions_charges_the_excess() {
    let admitted = gather(|| {
        let clock = ManualClock::new();
        let shared = bucket(3, &clock);
        let receipt = Receipt::take(Arc::clone(&shared), 1).unwrap();
        let other = Arc::clone(&shared);
        let racer = thread::spawn(move || {
            u64::from(other.try_acquire(1).is_ok()) + u64::from(other.try_acquire(1).is_ok())
        });
        receipt.settle(3);
        let admitted = racer.join().unwrap();
        // 3 charged to the receipt plus what the racer took, against 3:
        // the racer's tokens are debt when it came first, refused after.
        let debt = admitted;
        let wait = shared.retry_after(1).unwrap();
        assert_eq!(
            wait,
            Duration::from_secs(debt + 1),
            "the debt is not what was charged"
        );
        assert_eq!(shared.available(), 0);
        admitted
    });
    // Both admitted before the debit (2), one before and one after (1), or
    // both after it (0): every interleaving reachable.
    assert_eq!(admitted.into_iter().collect::<Vec<_>>(), [0, 1, 2]);
}

/// A settlement below the estimate races an admission and a refill: the
/// rest comes back by the rule that never mints, so every window of what
/// is then admitted, the receipt's actual token at 0 included, fits the
/// envelope.
#[test]
fn a_settlement_below_its_estimate_racing_refill_mints_nothing() {
    const HALF: Duration = Duration::from_millis(500);
    model(|| {
        let clock = ManualClock::new();
        let shared = bucket(2, &clock);
        let receipt = Receipt::take(Arc::clone(&shared), 2).unwrap();
        let (other, c) = (Arc::clone(&shared), clock.clone());
        let racer = thread::spawn(move || {
            c.set(HALF);
            other.try_acquire(1).is_ok()
        });
        receipt.settle(1);
        let mut admitted_at = vec![0];
        if racer.join().unwrap() {
            admitted_at.push(HALF.as_nanos() as u64);
        }
        for at in [Duration::from_millis(600), Duration::from_secs(1)] {
            clock.set(at);
            while shared.try_acquire(1).is_ok() {
                admitted_at.push(at.as_nanos() as u64);
            }
        }
        assert_envelope(2, &admitted_at);
    });
}
