//! Loom models of `StripedBucket`: takes racing a lease, its refill, a
//! flush and a clock advance for the last tokens of one pool.
//!
//! Loom runs its threads on one OS thread, so they all map to one stripe
//! unless a model pins them (`tollgate::pin_stripe`): most models race on
//! one pool's words (and the bucket's), which is where most races of the
//! striped layer are; two pin their threads to two pools leasing from one
//! bucket, one with a flush walking the other's pool. Each model checks the bound the
//! striped bucket promises: on a frozen clock no token is admitted twice
//! (admitted + pooled + available never exceeds the capacity), and across a
//! clock advance one instant admits at most the capacity.
//!
//! Without `--cfg tollgate_loom` the file is empty.

#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::model;
use tollgate::{Clock, Limit, ManualClock, Quota, StripedBucket};

/// A striped bucket of one pool leasing `lease` at a time, full at time 0 and
/// refilled at one token per second.
fn striped(capacity: u64, lease: u64) -> Arc<StripedBucket<ManualClock>> {
    let quota = Quota::new(capacity, 1, Duration::from_secs(1)).expect("valid quota");
    Arc::new(StripedBucket::with_clock(
        quota,
        ManualClock::new(),
        1,
        lease,
    ))
}

/// How many of `attempts` single-token takes were admitted.
fn take(bucket: &StripedBucket<ManualClock>, attempts: u64) -> u64 {
    (0..attempts)
        .map(|_| u64::from(bucket.try_acquire(1).is_ok()))
        .sum()
}

/// Asserts no token was admitted twice on a frozen clock.
fn assert_nothing_minted(bucket: &StripedBucket<ManualClock>, capacity: u64, admitted: u64) {
    let (pooled, available) = (bucket.pooled(), bucket.bucket().available());
    assert!(
        admitted + pooled + available <= capacity,
        "{admitted} admitted, {pooled} pooled, {available} available of {capacity}"
    );
}

/// Asserts that at the clock's current reading, where `admitted` tokens
/// were already admitted, the bucket and the pools hold no more than the
/// capacity allows, and that taking everything there confirms it.
fn assert_at_most_the_capacity_at_once(
    bucket: &StripedBucket<ManualClock>,
    capacity: u64,
    admitted: u64,
) {
    let (pooled, available) = (bucket.pooled(), bucket.bucket().available());
    assert!(
        pooled + available <= capacity,
        "{pooled} pooled, {available} available of {capacity}"
    );
    let at_once = admitted + take(bucket, capacity + 1);
    assert!(at_once <= capacity, "{at_once} admitted at one instant");
}

/// Two threads race for the last tokens through one pool that leases one
/// token at a time, so that both find it empty and race for its refill: on
/// a frozen clock every token is admitted once at most, and none is lost
/// from the accounting (two refills at once would lose a lease).
#[test]
fn two_threads_race_through_a_refill_for_the_last_tokens() {
    model(|| {
        let bucket = striped(4, 1);
        assert!(bucket.try_acquire(1).is_ok());
        let racer = |attempts| {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || take(&bucket, attempts))
        };
        let (a, b) = (racer(2), racer(1));
        let admitted = 1 + a.join().unwrap() + b.join().unwrap();
        assert_eq!(
            admitted + bucket.pooled() + bucket.bucket().available(),
            4,
            "{admitted} admitted"
        );
    });
}

/// In every interleaving: a pool keeps a token leased at
/// t = 0 while one thread moves the clock past a whole refill and another
/// takes. Whatever the order, the takes decided at the later reading
/// (known from a reading before each) plus everything the main thread can
/// then take at that instant stay within the capacity.
#[test]
fn a_clock_advance_racing_takes_admits_at_most_the_capacity_at_one_instant() {
    const LATER: Duration = Duration::from_secs(10);
    model(|| {
        let bucket = striped(2, 2);
        assert!(bucket.try_acquire(1).is_ok());
        let advancer = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.bucket().clock().advance(LATER))
        };
        let taker = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                (0..2)
                    .filter(|_| {
                        let later = bucket.bucket().clock().now_nanos() >= LATER.as_nanos() as u64;
                        bucket.try_acquire(1).is_ok() && later
                    })
                    .count() as u64
            })
        };
        advancer.join().unwrap();
        let taken_later = taker.join().unwrap();
        assert_at_most_the_capacity_at_once(&bucket, 2, taken_later);
    });
}

/// A flush races a thread whose takes cross the low-water mark and refill,
/// on a frozen clock and after a token and a half's worth of time has passed
/// (so that the flush returns slots above the spent ones, not exactly them): a
/// take that loaded the pool before the flush emptied it either lands
/// before the flush (which then returns the rest) or fails and retries, so
/// no token is both admitted and given back. Everything admitted at the
/// racing instant, and everything left to take there, fits the capacity.
#[test]
fn a_flush_racing_takes_and_a_refill_mints_nothing() {
    for advance in [Duration::ZERO, Duration::from_millis(1500)] {
        model(move || {
            let bucket = striped(4, 4);
            assert!(bucket.try_acquire(1).is_ok());
            bucket.bucket().clock().advance(advance);
            let flusher = {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || bucket.flush())
            };
            let admitted = take(&bucket, 2);
            let returned = flusher.join().unwrap();
            assert!(
                returned <= 3,
                "returned {returned}: only three tokens were pooled"
            );
            assert_at_most_the_capacity_at_once(&bucket, 4, admitted);
        });
    }
}

/// Two flushes race a take for the one pooled token: it is returned once at
/// most, and whether the take spends it from the pool or, once returned,
/// from the bucket, no token is admitted twice.
#[test]
fn racing_flushes_return_a_pooled_token_once() {
    model(|| {
        let bucket = striped(2, 2);
        assert!(bucket.try_acquire(1).is_ok());
        let flusher = || {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.flush())
        };
        let (a, b) = (flusher(), flusher());
        let admitted = 1 + take(&bucket, 1);
        let returned = a.join().unwrap() + b.join().unwrap();
        assert!(
            returned <= 1,
            "{returned} returned: only one token was pooled"
        );
        assert_nothing_minted(&bucket, 2, admitted);
    });
}

/// A striped bucket of two pools, each leasing `lease` at a time from one
/// bucket, full at time 0 and refilled at one token per second.
fn two_pools(capacity: u64, lease: u64) -> Arc<StripedBucket<ManualClock>> {
    let quota = Quota::new(capacity, 1, Duration::from_secs(1)).expect("valid quota");
    Arc::new(StripedBucket::with_clock(
        quota,
        ManualClock::new(),
        2,
        lease,
    ))
}

/// Two threads pinned to two stripes (`tollgate::pin_stripe`), each taking
/// through its own pool, both pools leasing from one bucket: on a frozen
/// clock no token is admitted twice across the pools, and after a flush
/// every token is admitted or back in the bucket.
#[test]
fn two_pools_leasing_from_one_bucket_admit_no_token_twice() {
    model(|| {
        let capacity = 4;
        let bucket = two_pools(capacity, 2);
        let takers: Vec<_> = (0..2)
            .map(|stripe| {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || {
                    tollgate::pin_stripe(stripe);
                    take(&bucket, 3)
                })
            })
            .collect();
        let admitted: u64 = takers.into_iter().map(|t| t.join().unwrap()).sum();
        assert_nothing_minted(&bucket, capacity, admitted);
        bucket.flush();
        assert_eq!(admitted + bucket.bucket().available(), capacity);
    });
}

/// A flush walking both pools races a take through one of them on another
/// stripe: the pool's tokens go back to the bucket or to the take, never
/// both; a flush may drop a token its `next` moved past (at most one a
/// flush, `docs/proofs.md`, "Striped buckets"), which refills in the
/// bucket in time.
#[test]
fn a_flush_walking_another_stripes_pool_races_its_take() {
    model(|| {
        let capacity = 4;
        let bucket = two_pools(capacity, 2);
        // Stripe 1's pool leases first, so the flush has tokens to return.
        let warm = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                tollgate::pin_stripe(1);
                take(&bucket, 1)
            })
        };
        let warmed = warm.join().unwrap();
        let taker = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                tollgate::pin_stripe(1);
                take(&bucket, 2)
            })
        };
        // A flush walks every stripe's pool, whichever thread calls it.
        let flusher = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.flush())
        };
        let admitted = warmed + taker.join().unwrap();
        flusher.join().unwrap();
        assert_nothing_minted(&bucket, capacity, admitted);
        bucket.flush();
        let accounted = admitted + bucket.bucket().available();
        // The racing flush may lose the one token its `next` moves past;
        // the last flush, alone, loses nothing more.
        assert!(
            accounted <= capacity && accounted + 1 >= capacity,
            "{admitted} admitted and {} available of {capacity} after two flushes",
            bucket.bucket().available()
        );
    });
}
