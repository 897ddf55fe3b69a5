//! Each thread's cache of hot keys (`KeyedBuilder::hot_keys_per_thread`):
//! a cached key decides exactly as the table would, through sweeps, quota
//! changes, evictions from the cache and panicking key code, and two threads
//! on one hot key take exactly its capacity.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{AcquireError, KeyedLimiter, ManualClock, Quota, Receipt};

const SECOND: Duration = Duration::from_secs(1);

fn per_second(n: u64) -> Quota {
    Quota::per_second(n).expect("a valid quota")
}

fn limiter(quota: Quota, clock: &ManualClock) -> KeyedLimiter<u64, ManualClock> {
    KeyedLimiter::builder(quota)
        .clock(clock.clone())
        .sweep_interval(None)
        .build()
}

/// How many of `tries` decisions of one token on `key` are admitted.
fn admitted(limiter: &KeyedLimiter<u64, ManualClock>, key: u64, tries: u64) -> u64 {
    (0..tries)
        .filter(|_| limiter.try_acquire(&key, 1).is_ok())
        .count() as u64
}

#[test]
fn a_key_decided_twice_is_cached_and_decides_exactly() {
    let clock = ManualClock::new();
    let limiter = limiter(per_second(5), &clock);
    assert_eq!(admitted(&limiter, 7, 8), 5);
    assert_eq!(limiter.table_stats().cached, 1);
    clock.advance(Duration::from_millis(400));
    assert_eq!(admitted(&limiter, 7, 3), 2);
    assert_eq!(
        limiter.try_acquire(&7, 9),
        Err(AcquireError::ExceedsCapacity {
            cost: 9,
            capacity: 5
        })
    );
    assert_eq!(limiter.table_stats().cached, 1);
}

#[test]
fn a_walk_over_many_keys_leaves_a_hot_key_cached() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(1_000_000))
        .clock(clock.clone())
        .hot_keys_per_thread(4)
        .build::<u64>();
    for cold in 1..=1000 {
        limiter.try_acquire(&0, 1).unwrap();
        limiter.try_acquire(&cold, 1).unwrap();
    }
    // The hot key, once; no key seen once, ever.
    assert_eq!(limiter.table_stats().cached, 1);
    assert_eq!(limiter.len(), 1001);
}

#[test]
fn no_cache_caches_nothing() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(3))
        .clock(clock.clone())
        .hot_keys_per_thread(0)
        .build::<u64>();
    assert_eq!(admitted(&limiter, 1, 5), 3);
    assert_eq!(limiter.table_stats().cached, 0);
}

/// A sweep drops a cached key's bucket full: the cached copy is sealed, the
/// next decision is made on a bucket created afresh, which starts full as a
/// kept one would have been, and the key is cached again.
#[test]
fn a_swept_cached_key_comes_back_with_exactly_its_credit() {
    let clock = ManualClock::new();
    let limiter = limiter(per_second(2), &clock);
    assert_eq!(admitted(&limiter, 7, 3), 2);
    clock.advance(SECOND);
    assert_eq!(limiter.sweep(), 1);
    assert!(limiter.is_empty());
    assert_eq!(admitted(&limiter, 7, 3), 2);
    let stats = limiter.table_stats();
    assert_eq!((stats.created, stats.evicted, stats.cached), (2, 1, 2));
}

/// A bucket a sweep would drop is kept when a cached decision spent from
/// it first, and the sweep after the refill drops it.
#[test]
fn a_cached_decision_keeps_its_bucket_from_the_sweep() {
    let clock = ManualClock::new();
    let limiter = limiter(per_second(2), &clock);
    assert_eq!(admitted(&limiter, 7, 2), 2);
    clock.advance(SECOND);
    assert_eq!(admitted(&limiter, 7, 1), 1);
    assert_eq!(limiter.sweep(), 0);
    assert_eq!(admitted(&limiter, 7, 2), 1);
    clock.advance(SECOND);
    assert_eq!(limiter.sweep(), 1);
}

/// A quota change converts a cached key's bucket: the cached copy is
/// sealed, and the next decision is made under the new quota, with what
/// the old one left carried over.
#[test]
fn a_quota_change_reaches_a_cached_key() {
    let clock = ManualClock::new();
    let limiter = limiter(per_second(10), &clock);
    assert_eq!(admitted(&limiter, 7, 4), 4);
    limiter.set_quota(per_second(3));
    assert_eq!(limiter.available(&7), 3);
    assert_eq!(admitted(&limiter, 7, 5), 3);
    limiter.set_quota(per_second(100));
    assert_eq!(admitted(&limiter, 7, 5), 0);
    clock.advance(Duration::from_millis(50));
    assert_eq!(admitted(&limiter, 7, 10), 5);
    assert!(limiter.table_stats().cached >= 3);
}

/// A receipt taken on a cached key gives back to the key's bucket.
#[test]
fn a_receipt_of_a_cached_decision_gives_back_to_the_key() {
    let clock = ManualClock::new();
    let limiter = limiter(per_second(3), &clock);
    assert_eq!(admitted(&limiter, 7, 2), 2);
    let receipt = tollgate::Receipt::take(limiter.key(&7), 1).unwrap();
    assert_eq!(limiter.available(&7), 0);
    receipt.undo();
    assert_eq!(limiter.available(&7), 1);
    assert_eq!(admitted(&limiter, 7, 2), 1);
}

/// Two threads on one hot key, each deciding from its own cache until
/// refused, on a clock that does not move: together exactly the capacity.
/// Each caches the key (two decisions) before either races, so both race
/// from their caches by construction.
#[test]
fn two_threads_on_a_hot_key_take_exactly_its_capacity() {
    const CAPACITY: u64 = 20_000;
    let clock = ManualClock::new();
    let limiter = limiter(Quota::new(CAPACITY, 1, SECOND).unwrap(), &clock);
    let cached = std::sync::Barrier::new(2);
    let taken = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let warm = admitted(&limiter, 7, 2);
                    cached.wait();
                    warm + admitted_until_refused(&limiter, 7, &|| {})
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum::<u64>()
    });
    assert_eq!(taken, CAPACITY);
    assert_eq!(limiter.table_stats().cached, 2);
}

/// Admissions of one token on `key` until one is refused, calling `pace`
/// after each.
fn admitted_until_refused(
    limiter: &KeyedLimiter<u64, ManualClock>,
    key: u64,
    pace: &dyn Fn(),
) -> u64 {
    let mut taken = 0;
    while limiter.try_acquire(&key, 1).is_ok() {
        taken += 1;
        pace();
    }
    taken
}

/// Two threads deciding on one hot key from their caches while a third
/// changes the quota back and forth (same capacity, other rates, on a clock
/// that does not move, so every carry is exact) and a fourth sweeps: every
/// change seals the cached buckets under the deciders, and together they
/// still take exactly the capacity. Each decider waits, every 500
/// admissions, for one more change, so changes land between decisions by
/// construction.
#[test]
fn changes_and_sweeps_racing_cached_decisions_neither_mint_nor_lose() {
    const CAPACITY: u64 = 20_000;
    let clock = ManualClock::new();
    let quotas = [
        Quota::new(CAPACITY, 1, SECOND).unwrap(),
        Quota::new(CAPACITY, 3, SECOND).unwrap(),
    ];
    let limiter = limiter(quotas[0], &clock);
    let changes = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let taken = std::thread::scope(|s| {
        s.spawn(|| {
            let mut next = 1;
            while !done.load(Ordering::Acquire) {
                limiter.set_quota(quotas[next % 2]);
                next += 1;
                changes.fetch_add(1, Ordering::Release);
            }
        });
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                limiter.sweep();
            }
        });
        let deciders: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let step = Cell::new(0u64);
                    let wait_for_a_change = || {
                        step.set(step.get() + 1);
                        if step.get().is_multiple_of(500) {
                            let seen = changes.load(Ordering::Acquire);
                            while changes.load(Ordering::Acquire) == seen {
                                std::hint::spin_loop();
                            }
                        }
                    };
                    admitted_until_refused(&limiter, 7, &wait_for_a_change)
                })
            })
            .collect();
        let taken = deciders.into_iter().map(|t| t.join().unwrap()).sum::<u64>();
        done.store(true, Ordering::Release);
        taken
    });
    assert_eq!(taken, CAPACITY);
    // The decider with the most admissions (at least half) waited for a
    // new change at every 500th of them.
    assert!(changes.load(Ordering::Relaxed) >= CAPACITY / 1000);
    assert_eq!(limiter.available(&7), 0);
}

/// A sweeper that drops the hot key whenever it is full, racing two threads
/// that decide on it from their caches and give each admission straight
/// back by its receipt (exact on a clock that does not move), so that the
/// key is full, and droppable, between their decisions: the sweeps really
/// drop it (counted: the deciders go on until 100 drops landed among their
/// decisions), every decision after a drop lands on the bucket the table
/// holds, not on the cached copy of the dropped one, and nothing is
/// minted: afterwards the key admits exactly its capacity.
#[test]
fn sweeps_that_drop_a_cached_key_between_its_decisions_mint_nothing() {
    const CAPACITY: u64 = 10;
    let clock = ManualClock::new();
    let limiter = limiter(Quota::new(CAPACITY, 1, SECOND).unwrap(), &clock);
    let dropped = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                dropped.fetch_add(limiter.sweep() as u64, Ordering::AcqRel);
            }
        });
        let deciders: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let key = limiter.key(&7);
                    let mut decided = 0u64;
                    while decided < 1_000 || dropped.load(Ordering::Acquire) < 100 {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "{} drops among {decided} decisions in 600 s",
                            dropped.load(Ordering::Acquire)
                        );
                        if let Ok(receipt) = Receipt::take(&key, 1) {
                            receipt.undo();
                        }
                        decided += 1;
                    }
                })
            })
            .collect();
        for decider in deciders {
            decider.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });
    assert!(dropped.load(Ordering::Relaxed) >= 100);
    assert_eq!(admitted_until_refused(&limiter, 7, &|| {}), CAPACITY);
}

/// A key the full table refuses is never cached, however often it comes.
#[test]
fn a_key_refused_at_the_cap_is_not_cached() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(3))
        .clock(clock.clone())
        .max_keys(std::num::NonZeroUsize::MIN.into())
        .sweep_interval(None)
        .build::<u64>();
    assert_eq!(admitted(&limiter, 1, 2), 2);
    for _ in 0..10 {
        assert_eq!(
            limiter.try_acquire(&2, 1),
            Err(AcquireError::TooManyKeys { max_keys: 1 })
        );
    }
    assert_eq!(limiter.table_stats().cached, 1);
    assert_eq!(admitted(&limiter, 1, 2), 1);
}

/// A cached key hit three times keeps its slot against a challenger until
/// the challenger's repeated misses have worn that standing off.
#[test]
fn a_challenger_takes_a_hot_slot_only_after_wearing_its_standing_off() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(1_000_000))
        .clock(clock.clone())
        .hot_keys_per_thread(1)
        .build::<u64>();
    // Cached at its second decision, then hit three times.
    for _ in 0..5 {
        limiter.try_acquire(&1, 1).unwrap();
    }
    assert_eq!(limiter.table_stats().cached, 1);
    // The challenger's first miss is recorded, the next three wear the
    // standing off, the fifth takes the slot.
    for _ in 0..4 {
        limiter.try_acquire(&2, 1).unwrap();
    }
    assert_eq!(limiter.table_stats().cached, 1);
    limiter.try_acquire(&2, 1).unwrap();
    assert_eq!(limiter.table_stats().cached, 2);
    // Another key missing between a challenger's misses restarts its run.
    limiter.try_acquire(&3, 1).unwrap();
    limiter.try_acquire(&1, 1).unwrap();
    limiter.try_acquire(&3, 1).unwrap();
    assert_eq!(limiter.table_stats().cached, 2);
}
