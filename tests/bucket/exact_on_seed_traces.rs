//! Worked token-bucket traces from the project's reference notes, replayed
//! against the real bucket on a manual clock.
//!
//! The notes describe an ideal strict bucket: refill `min(B, credit + r * dt)`,
//! admit only when the cost fits, and a refusal spends nothing. Every number
//! below (allow patterns, waits, final credit) is what that ideal bucket gives,
//! so any drift in the implementation's arithmetic shows up as a mismatch.

use std::time::Duration;

use tollgate::{AcquireError, Limit, ManualClock, Quota, TokenBucket};

use common::{Envelope, insufficient};
use tollgate_test_support::common;

const SECOND: u64 = 1_000_000_000;

/// A full bucket of `capacity` refilled at `tokens` per second, on a clock the
/// test drives.
fn bucket(capacity: u64, tokens: u64) -> (TokenBucket<ManualClock>, ManualClock) {
    let quota = Quota::new(capacity, tokens, Duration::from_secs(1)).unwrap();
    // Whole-second rates with small denominators are the exact regime, where
    // the implementation must match the ideal bucket to the nanosecond.
    assert!(quota.is_exact());
    let clock = ManualClock::new();
    (TokenBucket::with_clock(quota, clock.clone()), clock)
}

/// Capacity 3, rate 2/s: a burst, two early retries, refill, a long idle gap
/// that must not bank more than the capacity, then an oversized request.
#[test]
fn burst_refill_and_idle_trace() {
    let (bucket, clock) = bucket(3, 2);
    let quarter = SECOND / 4;
    // (time in ns, cost, expected outcome). The denial waits are the exact
    // time until the missing credit refills at 2 tokens/s.
    let trace = [
        (0, 1, Ok(())),
        (0, 1, Ok(())),
        (0, 1, Ok(())),
        (0, 1, insufficient(Duration::from_millis(500))),
        (quarter, 1, insufficient(Duration::from_millis(250))),
        (2 * quarter, 1, Ok(())),
        (6 * quarter, 2, Ok(())),
        (100 * SECOND, 1, Ok(())),
        (100 * SECOND, 1, Ok(())),
        (100 * SECOND, 1, Ok(())),
        (100 * SECOND, 1, insufficient(Duration::from_millis(500))),
    ];
    let (mut events, mut pattern) = (Vec::new(), Vec::new());
    for (i, &(at, cost, ref expected)) in trace.iter().enumerate() {
        clock.set(Duration::from_nanos(at));
        let outcome = bucket.try_acquire(cost);
        assert_eq!(&outcome, expected, "event {i} at {at} ns, cost {cost}");
        events.push((at, if outcome.is_ok() { cost } else { 0 }));
        pattern.push(outcome.is_ok());
    }
    assert_eq!(
        pattern,
        [
            true, true, true, false, false, true, true, true, true, true, false
        ]
    );
    assert_eq!(bucket.available(), 0);
    let envelope = Envelope {
        capacity: 3,
        tokens: 2,
        period_ns: SECOND,
    };
    envelope.assert_holds_over(&events, 0);

    // After another long idle gap the bucket is full again, but a cost above
    // the capacity can never fit: it is refused without a retry time and
    // without touching the stored credit.
    clock.set(Duration::from_secs(200));
    let oversized = bucket.try_acquire(4);
    assert_eq!(
        oversized,
        Err(AcquireError::ExceedsCapacity {
            cost: 4,
            capacity: 3
        })
    );
    assert_eq!(oversized.unwrap_err().retry_after(), None);
    assert_eq!(bucket.available(), 3);
    assert_eq!(bucket.try_acquire(3), Ok(()));
    assert_eq!(bucket.available(), 0);
}

/// Independent per-worker buckets multiply the burst; one shared bucket does
/// not.
#[test]
fn independent_buckets_admit_four_times_one_shared_bucket() {
    let workers: Vec<_> = (0..4).map(|_| bucket(3, 2)).collect();
    let local = workers
        .iter()
        .flat_map(|(b, _)| (0..4).map(move |_| b.try_acquire(1)))
        .filter(Result::is_ok)
        .count();
    let (shared, _clock) = bucket(3, 2);
    let global = (0..16).filter(|_| shared.try_acquire(1).is_ok()).count();
    assert_eq!((local, global), (12, 3));
}

/// Capacity 5, rate 2/s: the burst is five at once, not five per second.
#[test]
fn burst_of_five_then_one_token_per_half_second() {
    let (bucket, clock) = bucket(5, 2);
    for i in 0..5 {
        assert_eq!(bucket.try_acquire(1), Ok(()), "burst request {i}");
    }
    assert_eq!(
        bucket.try_acquire(1),
        insufficient(Duration::from_millis(500))
    );
    clock.set(Duration::from_millis(500));
    assert_eq!(bucket.available(), 1);
    assert_eq!(bucket.try_acquire(1), Ok(()));
    assert_eq!(
        bucket.try_acquire(1),
        insufficient(Duration::from_millis(500))
    );
}

/// An exercise from the notes: with capacity 8 refilled at 1 token/s, a burst
/// of eight at time zero empties the bucket, and three seconds later exactly
/// three more unit requests fit.
#[test]
fn capacity_eight_exercise() {
    let (bucket, clock) = bucket(8, 1);
    for i in 0..8 {
        assert_eq!(bucket.try_acquire(1), Ok(()), "burst request {i}");
    }
    assert_eq!(bucket.available(), 0);
    assert_eq!(bucket.try_acquire(1), insufficient(Duration::from_secs(1)));

    // One token per second: a nanosecond short of each whole second the
    // token is not there yet, and the wait says exactly one nanosecond.
    for second in 1..=3 {
        clock.set(Duration::from_secs(second) - Duration::from_nanos(1));
        assert_eq!(bucket.available(), second - 1);
        assert_eq!(
            bucket.try_acquire(second),
            insufficient(Duration::from_nanos(1))
        );
        clock.set(Duration::from_secs(second));
        assert_eq!(bucket.available(), second);
    }
    for i in 0..3 {
        assert_eq!(bucket.try_acquire(1), Ok(()), "refilled request {i}");
    }
    assert_eq!(bucket.try_acquire(1), insufficient(Duration::from_secs(1)));
}

/// A bucket one nanosecond short of a token reports the one-nanosecond wait,
/// and retrying after exactly that wait succeeds: the wait is never early.
#[test]
fn retry_after_is_exactly_long_enough() {
    let (bucket, clock) = bucket(3, 2);
    bucket.try_acquire(3).unwrap();
    clock.set(Duration::from_nanos(SECOND / 2 - 1));
    let wait = bucket.try_acquire(1).unwrap_err().retry_after().unwrap();
    assert_eq!(wait, Duration::from_nanos(1));
    clock.advance(wait);
    assert_eq!(bucket.try_acquire(1), Ok(()));
}
