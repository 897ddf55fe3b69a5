//! Attacks on the striped layer: per-thread pools leased from one bucket
//! must never let more through than the bucket alone would.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{AcquireError, Clock, Limit, ManualClock, Quota, StripedBucket};

use crate::common::{Envelope, Interleaving, race, race_beside, until_interleaved};

/// A frozen clock at 3 s and a striped bucket of `capacity` tokens a second.
fn frozen(capacity: u64, stripes: usize, lease: u64) -> StripedBucket<ManualClock> {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(3));
    StripedBucket::with_clock(Quota::per_second(capacity).unwrap(), clock, stripes, lease)
}

/// Promise: more threads than stripes (so threads share pools and race on
/// one word) admit no more than the capacity on a frozen clock, and every
/// token is either admitted, pooled or still in the bucket.
#[test]
fn more_threads_than_stripes_admit_no_more_than_the_capacity() {
    const CAPACITY: u64 = 1_000;
    // Shown to race: a run counts only if two threads' admissions
    // interleaved (`common::Interleaving`).
    until_interleaved(1, |_| {
        let bucket = frozen(CAPACITY, 2, 64);
        let order = Interleaving::default();
        let tallies = race(8, |_| {
            let mut me = order.worker();
            let mut admitted = 0;
            for _ in 0..1_000 {
                if bucket.try_acquire(1).is_ok() {
                    me.step();
                    admitted += 1;
                }
            }
            (admitted, me.interleaved())
        });
        let admitted: u64 = tallies.iter().map(|t| t.0).sum();
        assert!(admitted <= CAPACITY);
        assert_eq!(
            admitted + bucket.pooled() + bucket.bucket().available(),
            CAPACITY
        );
        tallies.iter().any(|t| t.1)
    });
}

/// A clock that panics at its `n`-th reading from when it is armed.
#[derive(Debug, Default)]
struct Tripwire {
    time: ManualClock,
    readings_left: AtomicU64,
}

impl Tripwire {
    fn arm(&self, at_reading: u64) {
        self.readings_left.store(at_reading, Ordering::SeqCst);
    }
}

impl Clock for Tripwire {
    fn now_nanos(&self) -> u64 {
        let left = self
            .readings_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            });
        assert_ne!(left, Ok(1), "the clock failed");
        self.time.now_nanos()
    }
}

/// Promise: a thread that dies (panics) anywhere in a take, a refill
/// included, leaves no stripe wedged and no token minted: afterwards the
/// pool leases again and one instant still admits at most the capacity.
#[test]
fn a_panic_at_any_clock_reading_wedges_no_stripe() {
    for reading in 1..=4 {
        let bucket =
            StripedBucket::with_clock(Quota::per_second(10).unwrap(), Tripwire::default(), 1, 4);
        bucket.bucket().clock().arm(reading);
        let died = catch_unwind(AssertUnwindSafe(|| bucket.try_acquire(1)));
        bucket.bucket().clock().arm(0);
        // A full refill later, whatever the dead call spent.
        bucket.bucket().clock().time.advance(Duration::from_secs(2));
        bucket.try_acquire(1).unwrap();
        assert!(
            bucket.pooled() > 0,
            "panic at reading {reading} ({died:?}): the pool never leased again"
        );
        let more = (0..20).filter(|_| bucket.try_acquire(1).is_ok()).count();
        assert_eq!(more, 9, "panic at reading {reading}");
    }
}

/// Promise: a cost of zero, one above the capacity, or `u64::MAX` gets a
/// typed refusal and spends nothing, from a pool or from the bucket.
#[test]
fn bad_costs_are_typed_refusals_that_spend_nothing() {
    let bucket = frozen(10, 2, 4);
    bucket.try_acquire(1).unwrap();
    let before = (bucket.pooled(), bucket.bucket().available());
    assert_eq!(bucket.try_acquire(0), Err(AcquireError::ZeroCost));
    for cost in [11, u64::MAX] {
        assert_eq!(
            bucket.try_acquire(cost),
            Err(AcquireError::ExceedsCapacity { cost, capacity: 10 })
        );
    }
    assert_eq!((bucket.pooled(), bucket.bucket().available()), before);
}

/// Promise: lease sizes of 0 and `u64::MAX` are clamped to 1 and to the
/// capacity, and either way a frozen clock admits exactly the capacity.
#[test]
fn extreme_lease_sizes_are_clamped_and_admit_exactly_the_capacity() {
    for (lease, clamped) in [(0, 1), (u64::MAX, 10)] {
        let bucket = frozen(10, 3, lease);
        assert_eq!(bucket.lease(), clamped);
        let admitted = (0..100).filter(|_| bucket.try_acquire(1).is_ok()).count();
        assert_eq!(admitted, 10, "lease {lease}");
    }
}

/// Promise: a clock that goes back between a lease and its use cannot spend
/// the lease at the earlier reading, where the bucket had nothing left: the
/// envelope holds over the readings the calls were made at.
#[test]
fn a_clock_gone_back_cannot_spend_a_later_lease() {
    let clock = ManualClock::new();
    let bucket = StripedBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone(), 1, 10);
    let mut admitted = Vec::new();
    for _ in 0..10 {
        bucket.try_acquire(1).unwrap();
        admitted.push((0, 1));
    }
    clock.set(Duration::from_secs(100));
    // Leases ten at 100 s and spends one of them.
    bucket.try_acquire(1).unwrap();
    admitted.push((clock.now_nanos(), 1));
    clock.set(Duration::ZERO);
    let behind = (0..20).filter(|_| bucket.try_acquire(1).is_ok()).count();
    admitted.extend(std::iter::repeat_n((0, 1), behind));
    assert_eq!(behind, 0);
    let envelope = Envelope {
        capacity: 10,
        tokens: 10,
        period_ns: 1_000_000_000,
    };
    envelope.assert_holds_over(&admitted, 0);
}

/// Promise: a refusal while the bucket is dry leaves the stripe able to
/// lease again once it refills (the striped layer must not silently degrade
/// to one contended word for good).
#[test]
fn a_dry_bucket_leaves_every_stripe_able_to_lease_again() {
    let clock = ManualClock::new();
    let bucket = StripedBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone(), 1, 4);
    let admitted = (0..30).filter(|_| bucket.try_acquire(1).is_ok()).count();
    assert_eq!(admitted, 10);
    clock.advance(Duration::from_secs(1));
    bucket.try_acquire(1).unwrap();
    assert_eq!(bucket.pooled(), 3, "the stripe no longer leases");
}

/// Promise: flushes racing takes give back only tokens no take spent: on a
/// frozen clock, what was admitted plus what the bucket and the pools hold
/// never exceeds the capacity.
#[test]
fn flushes_racing_takes_mint_nothing() {
    const CAPACITY: u64 = 500;
    let bucket = frozen(CAPACITY, 4, 16);
    let flushed = AtomicU64::new(0);
    let admitted: u64 = race_beside(
        4,
        400,
        50,
        |_, _, admitted: &mut u64| *admitted += u64::from(bucket.try_acquire(1).is_ok()),
        || {
            flushed.fetch_add(bucket.flush(), Ordering::Relaxed);
        },
    )
    .iter()
    .sum();
    let held = bucket.pooled() + bucket.bucket().available();
    assert!(
        admitted + held <= CAPACITY,
        "{admitted} admitted, {held} held"
    );
    bucket.flush();
    assert!(admitted + bucket.bucket().available() <= CAPACITY);
}

/// A trusted refund of the inner bucket rewinds its state below what a
/// pool stacked its slots on; later leases must not stack past the
/// bucket's own state, or a pooled token outlives the refill that
/// replaced it (credit 2 beside 1 pooled on `B = 2`, before the cap).
#[test]
fn leases_after_a_trusted_refund_never_outlive_the_bucket_state() {
    let clock = tollgate::ManualClock::new();
    let quota = tollgate::Quota::new(2, 1, std::time::Duration::from_secs(1)).unwrap();
    let striped = tollgate::StripedBucket::with_clock(quota, clock.clone(), 2, 2);
    striped.try_acquire(1).unwrap();
    striped.flush();
    striped.bucket().refund(1);
    let _ = striped.try_acquire(1);
    striped.flush();
    striped.bucket().refund(2);
    let _ = striped.try_acquire(1);
    for _ in 0..3 {
        clock.advance(std::time::Duration::from_millis(700));
        assert!(
            striped.bucket().available() + striped.pooled() <= 2,
            "{} available beside {} pooled",
            striped.bucket().available(),
            striped.pooled()
        );
    }
}
