//! The in-flight limiters under real threads, panics, a sequential model and
//! (feature `tokio`) paused tokio time.
//!
//! The bound is checked against tallies kept outside the library: a holder
//! adds its weight after the grant and takes it off before the drop, so the
//! tally never exceeds what the limiter truly holds, and a limiter that let
//! too much in shows up as a tally above the limit. No assertion depends on
//! how the threads happen to be scheduled or on wall-clock time.

#[cfg(feature = "keyed")]
use std::collections::HashMap;
#[cfg(feature = "keyed")]
use std::num::NonZeroUsize;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
#[cfg(feature = "keyed")]
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use common::{race, until_interleaved};
use tollgate_test_support::common;

use proptest::prelude::*;
#[cfg(feature = "keyed")]
use tollgate::concurrency::KeyedConcurrencyLimiter;
use tollgate::concurrency::{ConcurrencyLimiter, InFlightError, LimitError};

const THREAD_COUNTS: [usize; 3] = [2, 4, 8];
const ATTEMPTS_PER_THREAD: u64 = 5_000;

/// Asserts `refused` is `Full` for a state in which `weight` did not fit.
fn assert_could_not_fit(refused: InFlightError, weight: u64, limit: u64) {
    match refused {
        InFlightError::Full { in_flight, max } => {
            assert_eq!(max, limit);
            assert!(in_flight <= max, "{in_flight} in flight under {max}");
            assert!(in_flight + weight > max, "{weight} fitted in {in_flight}");
        }
        other => panic!("refused a valid weight {weight}: {other:?}"),
    }
}

/// Units held according to the holders themselves, and the most ever held.
#[derive(Default)]
struct Tally {
    held: AtomicU64,
    peak: AtomicU64,
}

impl Tally {
    /// Counts `weight` as held while `work` runs.
    fn holding(&self, weight: u64, work: impl FnOnce()) {
        let now = self.held.fetch_add(weight, Ordering::SeqCst) + weight;
        self.peak.fetch_max(now, Ordering::SeqCst);
        work();
        self.held.fetch_sub(weight, Ordering::SeqCst);
    }
}

/// A little work while holding a permit, so that holders overlap.
fn busy(iterations: u64) {
    for _ in 0..iterations {
        std::hint::spin_loop();
    }
}

// Real threads on one limiter.

#[test]
fn weighted_holders_never_exceed_the_limit() {
    const MAX: u64 = 10;
    for threads in THREAD_COUNTS {
        // The race is shown by the peak: a thread holds one permit at a
        // time, of at most 4 units, so more than 4 held at once are two
        // threads' permits at the same time.
        until_interleaved(1, |_| {
            let limiter = ConcurrencyLimiter::new(MAX).unwrap();
            let tally = Tally::default();
            let granted: u64 = race(threads, |t| {
                let mut granted = 0;
                for i in 0..ATTEMPTS_PER_THREAD {
                    let weight = 1 + (i + t as u64) % 4;
                    match limiter.try_acquire(weight) {
                        Ok(permit) => {
                            assert_eq!(permit.weight(), weight);
                            tally.holding(weight, || busy(i % 32));
                            drop(permit);
                            granted += 1;
                        }
                        Err(refused) => assert_could_not_fit(refused, weight, MAX),
                    }
                }
                granted
            })
            .into_iter()
            .sum();
            let peak = tally.peak.load(Ordering::SeqCst);
            assert!(peak <= MAX, "{threads} threads held {peak} units of {MAX}");
            assert!(granted > 0);
            assert_eq!(limiter.in_flight(), 0, "{threads} threads");
            peak > 4
        });
    }
}

#[test]
fn owned_permits_released_on_other_threads_keep_the_bound() {
    // Each thread takes owned permits and hands them to a dropper thread of
    // its own, so grants and releases run on different threads.
    const MAX: u64 = 6;
    for threads in THREAD_COUNTS {
        // The race is shown by a grant made while another thread's permits
        // were held: more units held than this thread's own.
        until_interleaved(1, |_| {
            let limiter = Arc::new(ConcurrencyLimiter::new(MAX).unwrap());
            let tally = Arc::new(Tally::default());
            let shown = race(threads, |t| {
                let (send, receive) = std::sync::mpsc::channel();
                let mine = Arc::new(AtomicU64::new(0));
                let (tally_for_dropper, mine_for_dropper) = (Arc::clone(&tally), Arc::clone(&mine));
                let dropper = thread::spawn(move || {
                    for (permit, weight) in receive {
                        busy(8);
                        // The total first: a grant read between the two
                        // then finds the total no larger than its own.
                        tally_for_dropper.held.fetch_sub(weight, Ordering::SeqCst);
                        mine_for_dropper.fetch_sub(weight, Ordering::SeqCst);
                        drop(permit);
                    }
                });
                let mut beside_others = false;
                for i in 0..ATTEMPTS_PER_THREAD / 4 {
                    let weight = 1 + (i * 3 + t as u64) % 3;
                    match limiter.try_acquire_owned(weight) {
                        Ok(permit) => {
                            let own = mine.fetch_add(weight, Ordering::SeqCst) + weight;
                            let now = tally.held.fetch_add(weight, Ordering::SeqCst) + weight;
                            tally.peak.fetch_max(now, Ordering::SeqCst);
                            beside_others |= now > own;
                            send.send((permit, weight)).unwrap();
                        }
                        Err(refused) => assert_could_not_fit(refused, weight, MAX),
                    }
                }
                drop(send);
                dropper.join().unwrap();
                beside_others
            });
            let peak = tally.peak.load(Ordering::SeqCst);
            assert!(peak <= MAX, "{threads} threads held {peak} units of {MAX}");
            assert_eq!(limiter.in_flight(), 0, "{threads} threads");
            shown.into_iter().any(|shown| shown)
        });
    }
}

#[test]
fn split_shares_are_returned_by_whoever_drops_them() {
    let limiter = Arc::new(ConcurrencyLimiter::new(8).unwrap());
    for _ in 0..100 {
        let mut permit = limiter.try_acquire_owned(8).unwrap();
        let shares: Vec<_> = (0..7).map(|_| permit.split(1).unwrap()).collect();
        assert_eq!((permit.weight(), limiter.in_flight()), (1, 8));
        assert!(permit.split(1).is_none());
        let droppers: Vec<_> = shares
            .into_iter()
            .map(|share| thread::spawn(move || drop(share)))
            .collect();
        for dropper in droppers {
            dropper.join().unwrap();
        }
        assert_eq!(limiter.in_flight(), 1);
        drop(permit);
        assert_eq!(limiter.in_flight(), 0);
    }
}

// Panics.

#[test]
fn a_panicking_holder_releases_its_units() {
    let limiter = ConcurrencyLimiter::new(5).unwrap();
    let unwound = panic::catch_unwind(AssertUnwindSafe(|| {
        let _first = limiter.try_acquire(3).unwrap();
        let _second = limiter.try_acquire(2).unwrap();
        assert_eq!(limiter.in_flight(), 5);
        panic!("the work failed while holding its permits");
    }));
    assert!(unwound.is_err());
    assert_eq!(limiter.in_flight(), 0);
    assert!(limiter.try_acquire(5).is_ok());
}

#[test]
fn a_thread_that_panics_returns_its_owned_permit() {
    let limiter = Arc::new(ConcurrencyLimiter::new(2).unwrap());
    let permit = limiter.try_acquire_owned(2).unwrap();
    let joined = thread::spawn(move || {
        let _permit = permit;
        panic!("worker failed");
    })
    .join();
    assert!(joined.is_err());
    assert_eq!(limiter.in_flight(), 0);
}

#[cfg(feature = "keyed")]
#[test]
fn a_panicking_keyed_holder_releases_and_removes_its_key() {
    let limiter = KeyedConcurrencyLimiter::with_max_keys(2, NonZeroUsize::MIN.into()).unwrap();
    let unwound = panic::catch_unwind(AssertUnwindSafe(|| {
        let _permit = limiter.try_acquire(&"tenant", 2).unwrap();
        assert_eq!(limiter.in_flight(&"tenant"), 2);
        panic!("the work failed while holding its permit");
    }));
    assert!(unwound.is_err());
    assert_eq!(limiter.len(), 0);
    // The key cap's slot came back too.
    assert!(limiter.try_acquire(&"another", 2).is_ok());
}

// Bad input.

#[test]
fn invalid_limits_and_weights_are_typed_errors() {
    assert_eq!(
        ConcurrencyLimiter::new(0).unwrap_err(),
        LimitError::ZeroLimit
    );
    #[cfg(feature = "keyed")]
    assert_eq!(
        KeyedConcurrencyLimiter::<u8>::new(0).unwrap_err(),
        LimitError::ZeroLimit
    );
    let limiter = ConcurrencyLimiter::new(u64::MAX).unwrap();
    assert_eq!(
        limiter.try_acquire(0).unwrap_err(),
        InFlightError::ZeroWeight
    );
    let _most = limiter.try_acquire(u64::MAX - 1).unwrap();
    assert_eq!(
        limiter.try_acquire(2).unwrap_err(),
        InFlightError::Full {
            in_flight: u64::MAX - 1,
            max: u64::MAX
        }
    );
    let small = ConcurrencyLimiter::new(3).unwrap();
    assert_eq!(
        small.try_acquire(4).unwrap_err(),
        InFlightError::ExceedsLimit { weight: 4, max: 3 }
    );
    assert_eq!(small.in_flight(), 0);
}

// Keyed: real threads on a few keys.

/// Per-key units and keys held according to the holders, updated as one
/// step under a mutex (outside the limiter, which runs unlocked).
#[cfg(feature = "keyed")]
#[derive(Default)]
struct KeyTally {
    held: Mutex<HashMap<u32, u64>>,
}

#[cfg(feature = "keyed")]
impl KeyTally {
    /// Counts `weight` held under `key`, asserting the per-key and key-count
    /// bounds, while `work` runs.
    fn holding(&self, key: u32, weight: u64, max: u64, max_keys: usize, work: impl FnOnce()) {
        {
            let mut held = self.held.lock().unwrap();
            let units = held.entry(key).or_default();
            *units += weight;
            assert!(*units <= max, "key {key}: {units} units held of {max}");
            assert!(
                held.len() <= max_keys,
                "{} keys held of {max_keys}",
                held.len()
            );
        }
        work();
        let mut held = self.held.lock().unwrap();
        let units = held.get_mut(&key).unwrap();
        *units -= weight;
        if *units == 0 {
            held.remove(&key);
        }
    }
}

#[cfg(feature = "keyed")]
#[test]
fn keyed_holders_keep_each_key_within_its_limit() {
    const MAX: u64 = 3;
    const KEYS: u32 = 3;
    for threads in THREAD_COUNTS {
        // Shown to race by a refusal: a thread holds one permit at a time,
        // of at most 2 units of a key's 3, so it is refused only while
        // another thread holds the same key.
        until_interleaved(1, |_| {
            let limiter = KeyedConcurrencyLimiter::new(MAX).unwrap();
            let tally = KeyTally::default();
            let crowded = race(threads, |t| {
                let mut crowded = false;
                for i in 0..ATTEMPTS_PER_THREAD / 2 {
                    let key = (i as u32 + t as u32) % KEYS;
                    let weight = 1 + (i + 2 * t as u64) % 2;
                    match limiter.try_acquire(&key, weight) {
                        Ok(permit) => {
                            assert_eq!((*permit.key(), permit.weight()), (key, weight));
                            tally.holding(key, weight, MAX, usize::MAX, || busy(i % 16));
                        }
                        Err(refused) => {
                            assert_could_not_fit(refused, weight, MAX);
                            crowded = true;
                        }
                    }
                }
                crowded
            });
            assert_eq!(limiter.len(), 0, "{threads} threads");
            for key in 0..KEYS {
                assert_eq!(limiter.in_flight(&key), 0);
            }
            crowded.into_iter().any(|crowded| crowded)
        });
    }
}

#[cfg(feature = "keyed")]
#[test]
fn keyed_churn_removes_every_entry_and_respects_the_key_cap() {
    // One unit per key, so nearly every grant creates an entry and nearly
    // every release removes one: the removal races the next acquire of the
    // same key all the time.
    const MAX_KEYS: usize = 4;
    const KEYS: u32 = 16;
    for threads in THREAD_COUNTS {
        // Shown to race by a refusal: a thread holds one key at a time, so
        // a key held or a table full is another thread's doing.
        until_interleaved(1, |_| {
            let cap = tollgate::MaxKeys::new(MAX_KEYS).unwrap();
            let limiter = KeyedConcurrencyLimiter::with_max_keys(1, cap).unwrap();
            let tally = KeyTally::default();
            let crowded = race(threads, |t| {
                let mut crowded = false;
                for i in 0..ATTEMPTS_PER_THREAD {
                    let key = (i as u32 * 5 + t as u32 * 3) % KEYS;
                    match limiter.try_acquire(&key, 1) {
                        Ok(_permit) => tally.holding(key, 1, 1, MAX_KEYS, || busy(i % 4)),
                        Err(InFlightError::TooManyKeys { max_keys }) => {
                            assert_eq!(max_keys, MAX_KEYS);
                            crowded = true;
                        }
                        Err(refused) => {
                            assert_could_not_fit(refused, 1, 1);
                            crowded = true;
                        }
                    }
                }
                crowded
            });
            assert_eq!(limiter.len(), 0, "{threads} threads");
            // Every slot of the key cap came back: `MAX_KEYS` new keys fit
            // at once.
            let permits: Vec<_> = (100..100 + MAX_KEYS as u32)
                .map(|key| limiter.try_acquire(&key, 1).unwrap())
                .collect();
            assert_eq!(limiter.len(), MAX_KEYS);
            drop(permits);
            assert_eq!(limiter.len(), 0);
            crowded.into_iter().any(|crowded| crowded)
        });
    }
}

#[cfg(feature = "keyed")]
#[test]
fn one_hot_key_hammered_by_every_thread() {
    // The entry is removed and re-created constantly; with a cap of one key
    // the same key is never refused as a new key, since its slot is
    // returned under the same lock that removes it.
    for threads in THREAD_COUNTS {
        // Shown to race: two threads held the key at once.
        until_interleaved(1, |_| {
            let limiter =
                KeyedConcurrencyLimiter::with_max_keys(2, NonZeroUsize::MIN.into()).unwrap();
            let tally = KeyTally::default();
            let (at_once, most) = (AtomicU64::new(0), AtomicU64::new(0));
            race(threads, |_| {
                for i in 0..ATTEMPTS_PER_THREAD {
                    match limiter.try_acquire(&7, 1) {
                        Ok(_permit) => tally.holding(7, 1, 2, 1, || {
                            let now = at_once.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            busy(i % 4);
                            at_once.fetch_sub(1, Ordering::SeqCst);
                        }),
                        Err(refused) => assert_could_not_fit(refused, 1, 2),
                    }
                }
            });
            assert_eq!(limiter.len(), 0, "{threads} threads");
            most.load(Ordering::SeqCst) >= 2
        });
    }
}

// A sequential model.

#[derive(Clone, Debug)]
enum Op {
    Acquire(u64),
    Drop(usize),
    Split(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..=7_u64).prop_map(Op::Acquire),
        any::<usize>().prop_map(Op::Drop),
        (any::<usize>(), 0..=4_u64).prop_map(|(i, w)| Op::Split(i, w)),
    ]
}

proptest! {
    /// One thread against the obvious model: a list of held weights, whose
    /// sum is the units in flight.
    #[test]
    fn matches_a_list_of_held_weights(max in 1..=6_u64, ops in prop::collection::vec(op(), 0..60)) {
        let limiter = ConcurrencyLimiter::new(max).unwrap();
        let mut permits = Vec::new();
        let mut model: Vec<u64> = Vec::new();
        for op in ops {
            let in_flight: u64 = model.iter().sum();
            match op {
                Op::Acquire(weight) => {
                    let expected = if weight == 0 {
                        Err(InFlightError::ZeroWeight)
                    } else if weight > max {
                        Err(InFlightError::ExceedsLimit { weight, max })
                    } else if in_flight + weight > max {
                        Err(InFlightError::Full { in_flight, max })
                    } else {
                        Ok(weight)
                    };
                    let got = limiter.try_acquire(weight);
                    prop_assert_eq!(got.as_ref().map(|p| p.weight()).map_err(|e| *e), expected);
                    if let Ok(permit) = got {
                        permits.push(permit);
                        model.push(weight);
                    }
                }
                Op::Drop(i) if !permits.is_empty() => {
                    let i = i % permits.len();
                    drop(permits.swap_remove(i));
                    model.swap_remove(i);
                }
                Op::Split(i, weight) if !permits.is_empty() => {
                    let i = i % permits.len();
                    let fits = weight > 0 && weight < model[i];
                    let split = permits[i].split(weight);
                    prop_assert_eq!(split.is_some(), fits);
                    if let Some(share) = split {
                        prop_assert_eq!(share.weight(), weight);
                        model[i] -= weight;
                        permits.push(share);
                        model.push(weight);
                    }
                    prop_assert_eq!(permits[i].weight(), model[i]);
                }
                Op::Drop(_) | Op::Split(..) => {}
            }
            prop_assert_eq!(limiter.in_flight(), model.iter().sum::<u64>());
        }
        drop(permits);
        prop_assert_eq!(limiter.in_flight(), 0);
    }
}

// Async waiting, on paused tokio time (feature `tokio`).

#[cfg(feature = "tokio")]
mod waiting {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::time::{Instant, sleep, timeout};
    use tollgate::concurrency::{ConcurrencyLimiter, InFlightError};

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn acquire_waits_until_a_permit_drops_and_no_longer() {
        let limiter = Arc::new(ConcurrencyLimiter::new(2).unwrap());
        let held = limiter.try_acquire_owned(2).unwrap();
        let start = Instant::now();
        let waiter = {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let permit = limiter.acquire(1, 10 * SECOND).await;
                (Instant::now(), permit.map(|p| p.weight()))
            })
        };
        // The paused clock runs ahead to the 3 s sleep: the waiter has slept
        // through it, holding nothing.
        sleep(3 * SECOND).await;
        assert!(!waiter.is_finished());
        assert_eq!(limiter.in_flight(), 2);
        drop(held);
        let (granted_at, granted) = waiter.await.unwrap();
        assert_eq!(granted, Ok(1));
        assert_eq!(granted_at, start + 3 * SECOND);
        // The permit was dropped at the end of the task.
        assert_eq!(limiter.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_times_out_at_the_deadline_taking_nothing() {
        let limiter = ConcurrencyLimiter::new(3).unwrap();
        let held = limiter.try_acquire(2).unwrap();
        let start = Instant::now();
        let max_wait = 5 * SECOND;
        assert_eq!(
            limiter.acquire(2, max_wait).await.unwrap_err(),
            InFlightError::Timeout
        );
        assert_eq!(Instant::now(), start + max_wait);
        assert_eq!(limiter.in_flight(), 2);
        drop(held);
        assert_eq!(limiter.in_flight(), 0);
    }

    /// `Duration::MAX` waits for a release, with no `Instant` overflow.
    #[tokio::test(start_paused = true)]
    async fn an_unbounded_wait_ends_at_the_release() {
        let limiter = Arc::new(ConcurrencyLimiter::new(1).unwrap());
        let held = limiter.try_acquire_owned(1).unwrap();
        let waiter = tokio::spawn(limiter.acquire_owned(1, Duration::MAX));
        sleep(3600 * SECOND).await;
        assert!(!waiter.is_finished());
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap().weight(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_weight_that_fits_needs_no_time_left() {
        let limiter = ConcurrencyLimiter::new(3).unwrap();
        let permit = limiter.acquire(3, Duration::ZERO).await.unwrap();
        assert_eq!(limiter.in_flight(), permit.weight());
    }

    #[tokio::test(start_paused = true)]
    async fn invalid_weights_are_refused_without_waiting() {
        let limiter = ConcurrencyLimiter::new(3).unwrap();
        let _held = limiter.try_acquire(3).unwrap();
        let start = Instant::now();
        let max_wait = SECOND;
        assert_eq!(
            limiter.acquire(0, max_wait).await.unwrap_err(),
            InFlightError::ZeroWeight
        );
        assert_eq!(
            limiter.acquire(4, max_wait).await.unwrap_err(),
            InFlightError::ExceedsLimit { weight: 4, max: 3 }
        );
        assert_eq!(Instant::now(), start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_acquire_takes_nothing() {
        let limiter = ConcurrencyLimiter::new(1).unwrap();
        let held = limiter.try_acquire(1).unwrap();
        let far = 60 * SECOND;
        // Dropped while pending, by the outer timeout.
        assert!(timeout(SECOND, limiter.acquire(1, far)).await.is_err());
        assert_eq!(limiter.in_flight(), 1);
        drop(held);
        assert_eq!(limiter.in_flight(), 0);
        // The limiter is whole: all of it can be taken again.
        let again = limiter.try_acquire(1).unwrap();
        assert_eq!(again.weight(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_cancelled_after_its_wake_up_takes_nothing() {
        let limiter = Arc::new(ConcurrencyLimiter::new(1).unwrap());
        let held = limiter.try_acquire_owned(1).unwrap();
        let far = 60 * SECOND;
        let cancelled = tokio::spawn(limiter.acquire_owned(1, far));
        let survivor = tokio::spawn(limiter.acquire_owned(1, far));
        sleep(SECOND).await;
        // Both wait; the release wakes both, and the first is cancelled
        // before it can run.
        drop(held);
        cancelled.abort();
        assert!(cancelled.await.unwrap_err().is_cancelled());
        let permit = survivor.await.unwrap().unwrap();
        assert_eq!(limiter.in_flight(), 1);
        drop(permit);
        assert_eq!(limiter.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_light_waiter_is_not_stuck_behind_a_heavy_one() {
        // Notify-one would hand the only wake-up of the first release to the
        // heavy waiter (it waited first), which cannot fit, and the light
        // waiter would sleep to its deadline with a unit free.
        let limiter = Arc::new(ConcurrencyLimiter::new(3).unwrap());
        let one = limiter.try_acquire_owned(1).unwrap();
        let two = limiter.try_acquire_owned(2).unwrap();
        let start = Instant::now();
        let max_wait = 60 * SECOND;
        let spawn_waiter = |weight| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let permit = limiter.acquire_owned(weight, max_wait).await.unwrap();
                (Instant::now(), permit)
            })
        };
        let heavy = spawn_waiter(3);
        sleep(SECOND).await;
        let light = spawn_waiter(1);
        sleep(SECOND).await;
        drop(one);
        let (light_at, light_permit) = light.await.unwrap();
        assert_eq!(light_at, start + 2 * SECOND);
        assert!(!heavy.is_finished());
        sleep(SECOND).await;
        drop((two, light_permit));
        let (heavy_at, heavy_permit) = heavy.await.unwrap();
        assert_eq!(heavy_at, start + 3 * SECOND);
        assert_eq!(heavy_permit.weight(), 3);
    }

    /// Real threads and real time: a release on another thread racing the
    /// waiter's registration must wake it. A lost wake-up would leave the
    /// waiter asleep until its (distant) deadline and fail with `Timeout`;
    /// nothing here measures time. The releaser spins rather than blocks, so
    /// that its drop lands within a few hundred nanoseconds of the hand-over,
    /// across the waiter's registration.
    #[tokio::test]
    async fn a_release_racing_the_waiter_is_never_lost() {
        const ROUNDS: u32 = 20_000;
        let limiter = Arc::new(ConcurrencyLimiter::new(1).unwrap());
        let slot = Arc::new(Mutex::new(None));
        let handed_over = Arc::new(AtomicU32::new(0));
        let releaser = {
            let (slot, handed_over) = (Arc::clone(&slot), Arc::clone(&handed_over));
            std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    while handed_over.load(Ordering::Acquire) != round {
                        std::hint::spin_loop();
                    }
                    for _ in 0..round % 64 {
                        std::hint::spin_loop();
                    }
                    drop(slot.lock().unwrap().take());
                }
            })
        };
        for round in 1..=ROUNDS {
            *slot.lock().unwrap() = Some(limiter.try_acquire_owned(1).unwrap());
            handed_over.store(round, Ordering::Release);
            let granted = limiter.acquire(1, 30 * SECOND).await;
            assert_eq!(granted.map(|p| p.weight()), Ok(1), "round {round}");
        }
        releaser.join().unwrap();
        assert_eq!(limiter.in_flight(), 0);
    }
}
