//! A keyed limiter at its key cap under churn from many threads: a new key
//! is refused only when the table is full of keys that cannot be dropped.
//! Real threads, time from a shared `ManualClock`; nothing is timed.

use std::num::NonZeroUsize;
use std::sync::Barrier;
use std::time::Duration;

use tollgate::{AcquireError, AtCapacity, KeyedLimiter, ManualClock, Quota};

/// The cap: far more than the keys that can be in flight (not yet full)
/// at once, so a sweep always has keys to drop.
const MAX_KEYS: usize = 64;
/// One token per millisecond: a key decided on is full again, so
/// droppable, a millisecond later.
const REFILL: Duration = Duration::from_millis(1);
const DECISIONS_PER_THREAD: u64 = 20_000;

/// What the threads saw: refusals for want of a place, refusals for want of
/// credit (a new key created on a reading older than a sweep starts in
/// debt), and the most keys ever tracked.
#[derive(Debug, Default)]
struct Seen {
    too_many_keys: u64,
    insufficient: u64,
    most_keys: usize,
}

/// `threads` threads each make [`DECISIONS_PER_THREAD`] decisions on keys
/// never seen before, each first moving the shared clock on by [`REFILL`]:
/// every key but the few decided on at the latest readings is full, and a
/// sweep is due at every reading.
fn churn(threads: u64) -> Seen {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::new(1, 1, REFILL).expect("a valid quota"))
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(MAX_KEYS).expect("nonzero").into())
        .at_capacity(AtCapacity::Deny)
        .sweep_interval(Some(REFILL))
        .build::<u64>();
    let start = Barrier::new(threads as usize);
    let seen: Vec<Seen> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let (limiter, clock, start) = (&limiter, &clock, &start);
                scope.spawn(move || {
                    let mut seen = Seen::default();
                    start.wait();
                    for n in 0..DECISIONS_PER_THREAD {
                        clock.advance(REFILL);
                        match limiter.try_acquire(&(n * threads + thread), 1) {
                            Ok(()) => {}
                            Err(AcquireError::TooManyKeys { .. }) => seen.too_many_keys += 1,
                            Err(AcquireError::Insufficient { .. }) => seen.insufficient += 1,
                            Err(other) => panic!("unexpected refusal: {other}"),
                        }
                        seen.most_keys = seen.most_keys.max(limiter.len());
                    }
                    seen
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a churning thread panicked"))
            .collect()
    });
    seen.into_iter().fold(Seen::default(), |all, one| Seen {
        too_many_keys: all.too_many_keys + one.too_many_keys,
        insufficient: all.insufficient + one.insufficient,
        most_keys: all.most_keys.max(one.most_keys),
    })
}

fn assert_no_new_key_refused(threads: u64) {
    let seen = churn(threads);
    assert_eq!(seen.too_many_keys, 0, "{threads} threads: {seen:?}");
    assert!(seen.most_keys <= MAX_KEYS, "{threads} threads: {seen:?}");
}

#[test]
fn four_threads_churning_at_the_cap_are_never_refused_a_place() {
    assert_no_new_key_refused(4);
}

#[test]
fn eight_threads_churning_at_the_cap_are_never_refused_a_place() {
    assert_no_new_key_refused(8);
}

/// The other side of the contract: with nothing droppable, the cap holds
/// and new keys are refused (no thread waits forever for room).
#[test]
fn a_cap_full_of_spent_keys_refuses_new_keys_from_every_thread() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::new(1, 1, REFILL).expect("a valid quota"))
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(MAX_KEYS).expect("nonzero").into())
        .sweep_interval(Some(REFILL))
        .build::<u64>();
    for key in 0..MAX_KEYS as u64 {
        assert_eq!(limiter.try_acquire(&key, 1), Ok(()));
    }
    // A sweep is due, but every key is still in debt: nothing to drop.
    clock.advance(REFILL / 2);
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let limiter = &limiter;
            scope.spawn(move || {
                for n in 0..100 {
                    let key = MAX_KEYS as u64 + n * 4 + thread;
                    assert_eq!(
                        limiter.try_acquire(&key, 1),
                        Err(AcquireError::TooManyKeys { max_keys: MAX_KEYS })
                    );
                }
            });
        }
    });
    assert_eq!(limiter.len(), MAX_KEYS);
}
