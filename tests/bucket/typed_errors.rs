//! Invalid configuration, degenerate costs, extreme waits and misbehaving
//! clocks: each must give a typed answer (never a panic) and must leave the
//! bucket's credit exactly where the contract says.

use std::time::Duration;

use tollgate::{
    AcquireError, Clock, InitialCredit, Limit, ManualClock, Quota, QuotaError, TokenBucket,
};

use common::insufficient;
use tollgate_test_support::common;

const SECOND: Duration = Duration::from_secs(1);

/// Capacity 3, refilled at 2 tokens per second (one token per 500 ms), full.
fn three_at_two_per_second() -> (TokenBucket<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let quota = Quota::new(3, 2, SECOND).unwrap();
    (TokenBucket::with_clock(quota, clock.clone()), clock)
}

/// Unit acquisitions admitted at the current instant until the first refusal:
/// the credit the bucket really holds, whatever `available()` says.
fn drain<C: Clock>(bucket: &TokenBucket<C>) -> u64 {
    let mut admitted = 0;
    while bucket.try_acquire(1).is_ok() {
        admitted += 1;
        assert!(
            admitted <= bucket.quota().capacity(),
            "admitted past capacity"
        );
    }
    admitted
}

#[test]
fn every_quota_error_is_reported() {
    let max_period = Duration::from_nanos(u64::MAX);
    let cases = [
        (Quota::new(0, 1, SECOND), QuotaError::ZeroCapacity),
        (Quota::new(1, 0, SECOND), QuotaError::ZeroTokens),
        (Quota::new(1, 1, Duration::ZERO), QuotaError::ZeroPeriod),
        (Quota::new(1, 1, Duration::MAX), QuotaError::PeriodTooLong),
        (
            Quota::new(1, 1, max_period + Duration::from_nanos(1)),
            QuotaError::PeriodTooLong,
        ),
        (
            Quota::new(u64::MAX, 1, SECOND),
            QuotaError::Overflow { capacity: u64::MAX },
        ),
        // The largest capacity whose full refill at 1/s fits in half the
        // u64 ns range is floor(u64::MAX / 2 / 1e9); one more overflows.
        (
            Quota::new(9_223_372_037, 1, SECOND),
            QuotaError::Overflow {
                capacity: 9_223_372_037,
            },
        ),
        // One token in 2^63 ns, or in 584 years: a full refill past half
        // the range.
        (
            Quota::new(1, 1, Duration::from_nanos(u64::MAX / 2 + 1)),
            QuotaError::Overflow { capacity: 1 },
        ),
        (
            Quota::new(1, 1, max_period),
            QuotaError::Overflow { capacity: 1 },
        ),
        // Charged per request, a full refill of 2^64 - 1 tokens at 2^33
        // per second would take 2^64 eighths of a nanosecond.
        (
            Quota::new(u64::MAX, 1 << 33, SECOND),
            QuotaError::Overflow { capacity: u64::MAX },
        ),
        (
            Quota::per_second(5).and_then(|q| q.with_initial_credit(InitialCredit::Tokens(6))),
            QuotaError::InitialCreditAboveCapacity {
                credit: 6,
                capacity: 5,
            },
        ),
        (
            Quota::per_second(5)
                .and_then(|q| q.with_initial_credit(InitialCredit::Tokens(u64::MAX))),
            QuotaError::InitialCreditAboveCapacity {
                credit: u64::MAX,
                capacity: 5,
            },
        ),
    ];
    for (i, (got, expected)) in cases.into_iter().enumerate() {
        assert_eq!(got, Err(expected), "case {i}");
    }
}

/// The values just inside each limit are accepted, so the checks above are
/// limits rather than blanket refusals.
#[test]
fn limits_are_inclusive() {
    let longest = Quota::new(1, 1, Duration::from_nanos(u64::MAX / 2)).unwrap();
    assert!(longest.is_exact());
    assert!(Quota::new(9_223_372_036, 1, SECOND).is_ok());
    // Eight billion per second is an eighth of a nanosecond: the finest
    // exact interval.
    assert!(Quota::new(1, 8_000_000_000, SECOND).unwrap().is_exact());
    let full_credit = Quota::per_second(5)
        .and_then(|q| q.with_initial_credit(InitialCredit::Tokens(5)))
        .unwrap();
    let bucket = TokenBucket::with_clock(full_credit, ManualClock::new());
    assert_eq!(drain(&bucket), 5);
}

/// Every rate from one token a year to past 2^33 a second builds a quota,
/// bytes per second included (where the emission interval is a fraction of
/// a nanosecond with a large denominator): a full bucket admits its whole
/// capacity at once and then nothing more at that instant, and the wait it
/// reports is never shorter than the exact one.
#[test]
fn every_rate_a_user_writes_is_accepted() {
    let year = Duration::from_secs(365 * 86_400);
    let quotas = [
        (1, 1, year),
        (64 << 20, 64 << 20, SECOND),
        (1 << 30, 1 << 30, SECOND),
        (1_500, 125_000_007, SECOND),
        (1, 1 << 33, SECOND),
        (1 << 33, 1 << 33, SECOND),
        (1, 3_000_000_000_001, SECOND),
        (u64::MAX, u64::MAX, SECOND),
        (3, u64::MAX, Duration::from_nanos(1)),
    ];
    for (capacity, tokens, period) in quotas {
        let quota = Quota::new(capacity, tokens, period)
            .unwrap_or_else(|e| panic!("{tokens} per {period:?}: {e}"));
        let bucket = TokenBucket::with_clock(quota, ManualClock::new());
        assert_eq!(bucket.available(), capacity, "{quota:?}");
        assert_eq!(bucket.try_acquire(capacity), Ok(()), "{quota:?}");
        assert_eq!(bucket.available(), 0, "{quota:?}");
        let wait = bucket.try_acquire(1).unwrap_err().retry_after().unwrap();
        // One token refills in period / tokens: never sooner.
        assert!(
            wait.as_nanos() * u128::from(tokens) >= period.as_nanos(),
            "{quota:?}: {wait:?}"
        );
    }
}

#[test]
fn zero_cost_is_refused_and_spends_nothing() {
    let (bucket, clock) = three_at_two_per_second();
    assert_eq!(bucket.try_acquire(0), Err(AcquireError::ZeroCost));
    assert_eq!(
        bucket.reserve(0, Duration::MAX),
        Err(AcquireError::ZeroCost)
    );
    assert_eq!(AcquireError::ZeroCost.retry_after(), None);
    assert_eq!(bucket.available(), 3);
    // Validation comes before the credit check: an empty bucket gives the
    // same input error, not a retry time.
    bucket.try_acquire(3).unwrap();
    assert_eq!(bucket.try_acquire(0), Err(AcquireError::ZeroCost));
    clock.set(Duration::from_millis(500));
    assert_eq!(drain(&bucket), 1);
}

#[test]
fn costs_above_capacity_are_refused_and_spend_nothing() {
    let (bucket, _clock) = three_at_two_per_second();
    for cost in [4, 1_000, u64::MAX] {
        let refusal = Err(AcquireError::ExceedsCapacity { cost, capacity: 3 });
        assert_eq!(bucket.try_acquire(cost), refusal);
        assert_eq!(
            bucket.reserve(cost, Duration::MAX),
            refusal.map(|()| Duration::ZERO)
        );
        assert_eq!(bucket.available(), 3, "cost {cost}");
    }
    // Still a capacity error (no retry time) when the bucket is empty.
    bucket.try_acquire(3).unwrap();
    let refusal = bucket.try_acquire(u64::MAX).unwrap_err();
    assert_eq!(refusal.retry_after(), None);
    assert_eq!(
        bucket.try_acquire(1),
        insufficient(Duration::from_millis(500))
    );
}

/// An unbounded wait budget admits every reservation, and each wait is the
/// exact time its tokens take to refill behind the debt already taken.
#[test]
fn unbounded_reservations_queue_exactly_and_recover() {
    let (bucket, clock) = three_at_two_per_second();
    assert_eq!(bucket.reserve(3, Duration::MAX), Ok(Duration::ZERO));
    assert_eq!(
        bucket.reserve(1, Duration::MAX),
        Ok(Duration::from_millis(500))
    );
    assert_eq!(
        bucket.reserve(2, Duration::MAX),
        Ok(Duration::from_millis(1500))
    );
    assert_eq!(bucket.available(), 0);
    // Three tokens owed: a plain acquisition must wait for them and its own.
    assert_eq!(bucket.try_acquire(1), insufficient(Duration::from_secs(2)));

    clock.set(Duration::from_millis(1500));
    assert_eq!(bucket.available(), 0, "the debt is paid, nothing left over");
    clock.set(Duration::from_secs(2));
    assert_eq!(bucket.available(), 1);
    clock.set(Duration::from_secs(60));
    assert_eq!(bucket.available(), 3);
    assert_eq!(drain(&bucket), 3);
}

/// Near the end of the 64-bit time range an unbounded reservation cannot be
/// scheduled; it must be refused, not wrap around into a past start time.
#[test]
fn unbounded_reservations_near_the_end_of_time_are_refused() {
    // Each token takes a quarter of the range, so two full refills fill it.
    let quota = Quota::new(2, 1, Duration::from_nanos(u64::MAX / 4)).unwrap();
    let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    let outcomes: Vec<_> = (0..4).map(|_| bucket.reserve(2, Duration::MAX)).collect();
    assert_eq!(outcomes[0], Ok(Duration::ZERO));
    assert_eq!(outcomes[1], Ok(Duration::from_nanos(u64::MAX / 4 * 2)));
    for outcome in &outcomes[2..] {
        assert!(
            matches!(outcome, Err(AcquireError::Insufficient { retry_after }) if !retry_after.is_zero()),
            "{outcome:?}"
        );
    }
    assert_eq!(bucket.available(), 0);
}

#[test]
fn huge_refunds_are_clipped_at_capacity() {
    let (bucket, _clock) = three_at_two_per_second();
    bucket.refund(u64::MAX);
    assert_eq!(bucket.available(), 3);
    assert_eq!(drain(&bucket), 3);

    // Even from deep reservation debt, a refund restores at most a full
    // bucket.
    for _ in 0..4 {
        bucket.reserve(3, Duration::MAX).unwrap();
    }
    bucket.refund(u64::MAX);
    assert_eq!(bucket.available(), 3);
    assert_eq!(drain(&bucket), 3);
    assert_eq!(
        bucket.try_acquire(1),
        insufficient(Duration::from_millis(500))
    );
}

#[test]
fn zero_refund_changes_nothing() {
    let (bucket, clock) = three_at_two_per_second();
    bucket.try_acquire(3).unwrap();
    bucket.refund(0);
    assert_eq!(bucket.available(), 0);
    clock.set(Duration::from_millis(250));
    bucket.refund(0);
    assert_eq!(
        bucket.try_acquire(1),
        insufficient(Duration::from_millis(250))
    );
}

/// A clock set backwards after spending must not refill the bucket: whatever
/// it reads, the bucket may admit no more than if time had stood still until
/// the clock caught up again.
#[test]
fn a_clock_going_backwards_never_mints_credit() {
    let drained_at = Duration::from_secs(10);
    let (bucket, clock) = three_at_two_per_second();
    let (forward, forward_clock) = three_at_two_per_second();
    for (b, c) in [(&bucket, &clock), (&forward, &forward_clock)] {
        c.set(drained_at);
        assert_eq!(drain(b), 3);
    }

    clock.set(Duration::ZERO);
    assert_eq!(bucket.available(), 0);
    // The retry time points at the same instant as before the jump (10.5 s on
    // this clock), so it is only longer, never shorter.
    assert_eq!(
        bucket.try_acquire(1),
        insufficient(drained_at + Duration::from_millis(500))
    );

    let (mut total, mut forward_total) = (0, 0);
    for step in 0..=120 {
        let now = Duration::from_millis(100 * step);
        clock.set(now);
        forward_clock.set(now.max(drained_at));
        total += drain(&bucket);
        forward_total += drain(&forward);
        if now < drained_at {
            assert_eq!(total, 0, "admitted at {now:?}, before the drain");
        }
        assert!(
            total <= forward_total,
            "{total} > {forward_total} at {now:?}"
        );
    }
    // Once the clock is past the drain, refill resumes normally: 2 s at 2/s.
    assert_eq!((total, forward_total), (4, 4));
}

/// At the end of the clock's range time can no longer advance, so a bucket
/// that reaches it must refuse rather than overflow or wrap around to an
/// early time (which would see a full bucket). A bucket counts `d` ticks per
/// nanosecond from its creation, so its range ends `u64::MAX / d`
/// nanoseconds after it.
#[test]
fn the_end_of_the_clock_range_only_denies() {
    let quotas_and_ticks_per_nano = [
        (Quota::new(3, 2, SECOND).unwrap(), 1), // whole-nanosecond interval
        (Quota::per_second(3).unwrap(), 3),     // thirds of a nanosecond
        (Quota::per_second(11).unwrap(), 8),    // rounded, eighths of a nanosecond
    ];
    for (quota, ticks_per_nano) in quotas_and_ticks_per_nano {
        let first_past_range = (u64::MAX / ticks_per_nano).saturating_add(1);
        for end in [first_past_range, u64::MAX] {
            for initial in [InitialCredit::Full, InitialCredit::Empty] {
                let quota = quota.with_initial_credit(initial).unwrap();
                let clock = ManualClock::new();
                let untouched = TokenBucket::with_clock(quota, clock.clone());
                let used = TokenBucket::with_clock(quota, clock.clone());
                let _ = used.try_acquire(1);
                clock.set(Duration::from_nanos(end));
                for bucket in [&untouched, &used] {
                    let context = format!("{quota:?} at {end} ns");
                    let denied = bucket.try_acquire(1).unwrap_err();
                    assert!(denied.retry_after().is_some(), "{context}: {denied:?}");
                    assert!(bucket.reserve(1, Duration::MAX).is_err(), "{context}");
                    bucket.refund(u64::MAX);
                    bucket.reset();
                    assert!(bucket.try_acquire(1).is_err(), "{context}");
                    // available() agrees with the refusals rather than
                    // reporting credit that can no longer be spent.
                    assert_eq!(bucket.available(), 0, "{context}");
                }
            }
        }
    }
}

/// Ticks count from each bucket's creation, not from the clock's epoch, so a
/// clock whose epoch lies far back (one counting from 1970, say) does not eat
/// into a bucket's range: created at a reading past where a range from the
/// epoch would end, the bucket still decides exactly.
#[test]
fn a_clock_with_an_old_epoch_leaves_the_range_whole() {
    // 11/s uses eighths of a nanosecond: a range counted from the epoch would
    // have ended at u64::MAX / 8 ns.
    let quota = Quota::new(3, 11, SECOND).unwrap();
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(u64::MAX / 8 + 1));
    let bucket = TokenBucket::with_clock(quota, clock.clone());
    assert_eq!(bucket.available(), 3);
    for _ in 0..3 {
        bucket.try_acquire(1).unwrap();
    }
    // 1e9/11 ns rounded up to eighths: 727_272_728 / 8 = 90_909_091 ns.
    assert_eq!(
        bucket.try_acquire(1),
        Err(AcquireError::Insufficient {
            retry_after: Duration::from_nanos(90_909_091)
        })
    );
    clock.advance(Duration::from_nanos(90_909_091));
    bucket.try_acquire(1).unwrap();
    assert_eq!(bucket.available(), 0);
}
