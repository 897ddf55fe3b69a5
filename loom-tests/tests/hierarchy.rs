//! Loom models of `try_acquire_all`: threads racing through a chain of
//! buckets, where a refusal by a later limit undoes the earlier ones.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{assert_drained_within_envelope, gather, model};
use tollgate::{Limit, ManualClock, Quota, TokenBucket, try_acquire_all};

/// A bucket of `capacity` refilled at one token per second, full at time 0.
fn bucket(capacity: u64, clock: &ManualClock) -> TokenBucket<ManualClock> {
    let quota = Quota::new(capacity, 1, Duration::from_secs(1)).expect("valid quota");
    TokenBucket::with_clock(quota, clock.clone())
}

/// Two threads race through the same two-limit chain for its last token: the
/// first limit has room for both, the second for one. Exactly one passes, and
/// the loser's charge of the first limit is undone in full (the clock is
/// frozen, so nothing refilled while it was held).
#[test]
fn two_threads_race_through_a_chain_for_the_last_token() {
    let outcomes = gather(|| {
        let clock = ManualClock::new();
        let per_account = Arc::new(bucket(2, &clock));
        let global = Arc::new(bucket(1, &clock));
        let racer = || {
            let (per_account, global) = (Arc::clone(&per_account), Arc::clone(&global));
            thread::spawn(move || try_acquire_all(&[per_account.cost(1), global.cost(1)]).is_ok())
        };
        let (a, b) = (racer(), racer());
        let passed = [a.join().unwrap(), b.join().unwrap()];
        assert_eq!(passed.iter().filter(|&&p| p).count(), 1, "{passed:?}");
        assert_eq!(per_account.available(), 1, "the loser's charge stayed");
        assert_eq!(global.available(), 0);
        passed
    });
    // Either thread can be the one that passes.
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

/// Two threads take the two limits in opposite orders: neither order lets
/// both through, and a refused request leaves both limits as it found them.
#[test]
fn opposite_orders_never_admit_twice() {
    model(|| {
        let clock = ManualClock::new();
        let first = Arc::new(bucket(1, &clock));
        let second = Arc::new(bucket(1, &clock));
        let (f, s) = (Arc::clone(&first), Arc::clone(&second));
        let forwards = thread::spawn(move || try_acquire_all(&[f.cost(1), s.cost(1)]).is_ok());
        let backwards = try_acquire_all(&[second.cost(1), first.cost(1)]).is_ok();
        let forwards = forwards.join().unwrap();
        // Both may lose (each holds one limit while the other refuses), but
        // never both win, and whatever lost is undone.
        let passed = u64::from(forwards) + u64::from(backwards);
        assert!(passed <= 1);
        assert_eq!(first.available(), 1 - passed);
        assert_eq!(second.available(), 1 - passed);
    });
}

/// A chain's undo races an admission that a moving clock lets in. Returning
/// the whole cost after that admission would mint the refill the bucket
/// wasted while full: here a third admission inside half a second of a
/// two-token bucket. The main thread drains what is left at 0.6 s and 1.0 s,
/// and every window of the kept admissions must fit the envelope.
#[test]
fn an_undo_racing_a_refilled_admission_mints_nothing() {
    const HALF: Duration = Duration::from_millis(500);
    model(|| {
        let clock = ManualClock::new();
        let shared = Arc::new(bucket(2, &clock));
        let exhausted = Arc::new(bucket(1, &clock));
        exhausted.try_acquire(1).unwrap();

        let (s, e) = (Arc::clone(&shared), Arc::clone(&exhausted));
        let refused = thread::spawn(move || try_acquire_all(&[s.cost(1), e.cost(1)]).is_err());
        let (s, c) = (Arc::clone(&shared), clock.clone());
        let other = thread::spawn(move || {
            c.set(HALF);
            s.try_acquire(1).is_ok()
        });
        assert!(refused.join().unwrap());
        let admitted_at_half = other.join().unwrap();
        assert_drained_within_envelope(&shared, &clock, admitted_at_half.then_some(HALF));
    });
}
