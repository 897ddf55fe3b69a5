//! The striped bucket under real threads: exact accounting on a frozen
//! clock, the envelope on the real one.

use std::time::Duration;

use tollgate::{Clock, ManualClock, Quota, StripedBucket};

mod common;
use common::{Envelope, race};

/// On a frozen clock, however threads and stripes race, what they admitted
/// plus what the pools hold plus what the bucket holds is exactly the
/// capacity: no token minted or lost. A flush then moves pooled tokens back
/// into the bucket, dropping only those of older leases.
#[test]
fn frozen_clock_accounting_is_exact() {
    const CAPACITY: u64 = 5_000;
    for (threads, stripes) in [(2, 2), (4, 2), (8, 4), (8, 8)] {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(3));
        let bucket =
            StripedBucket::with_clock(Quota::per_second(CAPACITY).unwrap(), clock, stripes, 64);
        let admitted: u64 = race(threads, |_| {
            (0..2_000).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64
        })
        .iter()
        .sum();
        let pooled = bucket.pooled();
        assert_eq!(
            admitted + pooled + bucket.bucket().available(),
            CAPACITY,
            "{threads} threads, {stripes} stripes: {admitted} admitted, {pooled} pooled"
        );
        let returned = bucket.flush();
        assert!(returned <= pooled);
        assert_eq!(bucket.pooled(), 0);
        let available = bucket.bucket().available();
        assert!(admitted + available <= CAPACITY);
        assert!(admitted + available + stripes as u64 * 64 >= CAPACITY);
    }
}

/// On the real clock, admissions stay within `B + r·t` over the run.
#[test]
fn real_clock_admissions_stay_within_the_envelope() {
    let (capacity, rate) = (100, 50_000);
    for threads in [2, 4, 8] {
        let bucket = StripedBucket::new(
            Quota::new(capacity, rate, Duration::from_secs(1)).unwrap(),
            4,
            16,
        );
        let start = bucket.bucket().clock().now_nanos();
        let admitted: u64 = race(threads, |_| {
            (0..20_000)
                .filter(|_| bucket.try_acquire(1).is_ok())
                .count() as u64
        })
        .iter()
        .sum();
        let elapsed = bucket.bucket().clock().now_nanos() - start;
        let envelope = Envelope {
            capacity,
            tokens: rate,
            period_ns: 1_000_000_000,
        };
        assert!(admitted >= capacity / 2, "{threads} threads: {admitted}");
        assert!(
            envelope.admits(u128::from(admitted), elapsed),
            "{admitted} in {elapsed} ns"
        );
    }
}

#[test]
fn a_cost_above_the_lease_goes_to_the_bucket_and_bad_costs_are_typed() {
    let bucket =
        StripedBucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new(), 2, 2);
    bucket.try_acquire(5).unwrap();
    assert_eq!(bucket.try_acquire(0), Err(tollgate::AcquireError::ZeroCost));
    assert!(matches!(
        bucket.try_acquire(11),
        Err(tollgate::AcquireError::ExceedsCapacity { .. })
    ));
}

/// Issue 11, finding 2: a pool's tokens must not outlive the refill of the
/// slots they were leased in. Take 5 at t = 0 on B = 10 (one stripe, a lease
/// of the whole capacity), let 100 s pass: one instant then admits at most
/// B = 10, as a plain bucket would, and never the 5 pooled tokens on top.
#[test]
fn pooled_tokens_expire_as_the_bucket_refills() {
    let clock = ManualClock::new();
    let bucket = StripedBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone(), 1, 10);
    for _ in 0..5 {
        bucket.try_acquire(1).unwrap();
    }
    clock.advance(Duration::from_secs(100));
    assert!(
        bucket.bucket().available() + bucket.pooled() <= 10,
        "{} available beside {} pooled",
        bucket.bucket().available(),
        bucket.pooled()
    );
    let at_one_instant = (0..100).filter(|_| bucket.try_acquire(1).is_ok()).count();
    assert_eq!(at_one_instant, 10);
}
