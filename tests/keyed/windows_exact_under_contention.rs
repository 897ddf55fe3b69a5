//! Real threads racing on one window counter. On a frozen clock the totals
//! are exact, so a lost update or a double admission changes a number; on
//! a moving clock (manual, or the real one) every window an admission can
//! be placed in holds at most the limit, however the threads interleave
//! with the roll-over. Keyed window counters the same way, per key, with a
//! sweeper racing the deciders and a table smaller than its keys.

use std::collections::BTreeMap;
use std::time::Duration;

use tollgate::window::{KeyedWindow, WindowCounter, WindowKind};
use tollgate::{
    AcquireError, Clock, FixedWindow, KeyedFixedWindow, KeyedSlidingWindow, Limit, ManualClock,
    MonotonicClock, Receipt, SlidingWindow, WindowQuota,
};

use common::{Interleaving, race, race_beside, until_interleaved};
use tollgate_test_support::common;

const THREAD_COUNTS: [usize; 3] = [2, 4, 8];
const ROUNDS: usize = 10;
const LIMIT: u64 = 1_000;
const ATTEMPTS_PER_THREAD: u64 = 1_000;
const WINDOW: Duration = Duration::from_secs(1);
/// Calls of the racing side (a clock step, a sweep) completed during each
/// worker's run, at least.
const BESIDE_CALLS: u64 = 20;

fn quota() -> WindowQuota {
    WindowQuota::new(LIMIT, WINDOW).unwrap()
}

/// `cost` admitted, or 0 for a refusal, whose wait must be positive.
fn acquire<K: WindowKind, C: Clock>(limiter: &WindowCounter<K, C>, cost: u64) -> u64 {
    match limiter.try_acquire(cost) {
        Ok(()) => cost,
        Err(AcquireError::Insufficient { retry_after }) => {
            assert!(!retry_after.is_zero(), "cost {cost} refused with no wait");
            0
        }
        Err(other) => panic!("cost {cost} refused with {other:?}"),
    }
}

/// Each round, threads race for a window that nothing has spent: unit
/// costs take exactly the limit, mixed costs never more, and what they
/// leave is exactly what `available()` reports.
fn frozen_windows_admit_exactly_the_limit<K: WindowKind>() {
    for threads in THREAD_COUNTS {
        let clock = ManualClock::new();
        let limiter = WindowCounter::<K, _>::with_clock(quota(), &clock).unwrap();
        until_interleaved(ROUNDS, |round| {
            // Two windows on, so a sliding window's previous count is 0 too.
            clock.set(WINDOW * (2 * round as u32));
            let mixed = round % 2 == 1;
            let order = Interleaving::default();
            let tallies = race(threads, |t| {
                let mut me = order.worker();
                let mut admitted = 0;
                for i in 0..ATTEMPTS_PER_THREAD {
                    let got = acquire(&limiter, if mixed { 1 + (i * 7 + t as u64) % 5 } else { 1 });
                    if got > 0 {
                        me.step();
                        admitted += got;
                    }
                }
                (admitted, me.interleaved())
            });
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            let left = limiter.available();
            assert_eq!(admitted + left, LIMIT, "{threads} threads, round {round}");
            if !mixed {
                assert_eq!(left, 0, "{threads} threads, round {round}");
            }
            assert_eq!((0..=left).map(|_| acquire(&limiter, 1)).sum::<u64>(), left);
            tallies.iter().any(|t| t.1)
        });
    }
}

#[test]
fn frozen_fixed_windows_admit_exactly_the_limit() {
    frozen_windows_admit_exactly_the_limit::<tollgate::window::Fixed>();
}

#[test]
fn frozen_sliding_windows_admit_exactly_the_limit() {
    frozen_windows_admit_exactly_the_limit::<tollgate::window::Sliding>();
}

/// Units admitted to `threads` threads racing `ATTEMPTS_PER_THREAD` each,
/// and whether their admissions interleaved.
fn race_for_units<K: WindowKind>(
    threads: usize,
    limiter: &WindowCounter<K, &ManualClock>,
) -> (u64, bool) {
    let order = Interleaving::default();
    let tallies = race(threads, |_| {
        let mut me = order.worker();
        let mut admitted = 0;
        for _ in 0..ATTEMPTS_PER_THREAD {
            if acquire(limiter, 1) > 0 {
                me.step();
                admitted += 1;
            }
        }
        (admitted, me.interleaved())
    });
    (
        tallies.iter().map(|t| t.0).sum(),
        tallies.iter().any(|t| t.1),
    )
}

/// Threads racing for the first decisions of a new window roll it once:
/// exactly the limit is admitted in it, whatever the window before held.
#[test]
fn racing_roll_overs_reset_a_fixed_window_once() {
    for threads in THREAD_COUNTS {
        let clock = ManualClock::new();
        let limiter = FixedWindow::with_clock(quota(), &clock).unwrap();
        until_interleaved(ROUNDS, |round| {
            clock.set(WINDOW * round as u32);
            let (admitted, interleaved) = race_for_units(threads, &limiter);
            assert_eq!(admitted, LIMIT, "{threads} threads, round {round}");
            interleaved
        });
    }
}

/// The same for a sliding window, whose new window starts with the last
/// one's count at full weight: half a window on, half of it is left.
#[test]
fn racing_roll_overs_carry_a_sliding_window_once() {
    for threads in THREAD_COUNTS {
        let clock = ManualClock::new();
        let limiter = SlidingWindow::with_clock(quota(), &clock).unwrap();
        until_interleaved(ROUNDS, |round| {
            let round = round as u32;
            // A full window after an empty one, then the race half way into
            // the next, where the full one weighs half the limit.
            clock.set(WINDOW * (3 * round));
            limiter.try_acquire(LIMIT).unwrap();
            clock.set(WINDOW * (3 * round + 1) + WINDOW / 2);
            let (admitted, interleaved) = race_for_units(threads, &limiter);
            assert_eq!(admitted, LIMIT / 2, "{threads} threads, round {round}");
            interleaved
        });
    }
}

/// Admissions by window, for those whose window is certain: the clock read
/// before and after the decision lay in the same window (a decision is
/// counted in the window of its own reading, or a later one that another
/// decision already reached, which is never later than the reading after).
fn admissions_by_window<K: WindowKind, C: Clock + Sync>(
    limiter: &WindowCounter<K, C>,
    threads: usize,
    attempts: u64,
    beside: Option<impl Fn() + Sync>,
) -> (BTreeMap<u64, u64>, u64) {
    let window = window_nanos(limiter);
    let attempt = |t: usize, i: u64, (certain, all): &mut (BTreeMap<u64, u64>, u64)| {
        let before = limiter.clock().now_nanos() / window;
        let cost = acquire(limiter, 1 + (i + t as u64) % 3);
        let after = limiter.clock().now_nanos() / window;
        *all += cost;
        if before == after {
            *certain.entry(before).or_insert(0) += cost;
        }
    };
    let per_thread = match beside {
        Some(beside) => race_beside(threads, attempts, BESIDE_CALLS, attempt, beside),
        None => race(threads, |t| {
            let mut tally = Default::default();
            for i in 0..attempts {
                attempt(t, i, &mut tally);
            }
            tally
        }),
    };
    let mut certain = BTreeMap::new();
    let mut all = 0;
    for (theirs, total) in per_thread {
        all += total;
        for (window, cost) in theirs {
            *certain.entry(window).or_insert(0) += cost;
        }
    }
    (certain, all)
}

fn window_nanos<K: WindowKind, C: Clock>(limiter: &WindowCounter<K, C>) -> u64 {
    u64::try_from(limiter.quota().window().as_nanos()).unwrap()
}

/// A thread moves the manual clock through windows while others decide:
/// no window is ever credited more than the limit, and over the run no
/// more than the limit per window the clock reached.
#[test]
fn a_moving_manual_clock_never_lets_a_window_exceed_its_limit() {
    const STEPS: u64 = 5_000;
    fn check<K: WindowKind>(threads: usize) {
        let clock = ManualClock::new();
        let quota = WindowQuota::new(50, Duration::from_nanos(700)).unwrap();
        let limiter = WindowCounter::<K, _>::with_clock(quota, &clock).unwrap();
        let step = std::sync::atomic::AtomicU64::new(0);
        let advance = || {
            if step.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < STEPS {
                clock.advance(Duration::from_nanos(97));
            }
        };
        let (certain, all) = admissions_by_window(&limiter, threads, 10_000, Some(advance));
        for (window, cost) in &certain {
            assert!(
                *cost <= 50,
                "window {window}: {cost} with {threads} threads"
            );
        }
        let windows = clock.now_nanos() / 700 + 1;
        assert!(all <= 50 * windows, "{all} over {windows} windows");
        assert!(all > 0);
    }
    for threads in THREAD_COUNTS {
        check::<tollgate::window::Fixed>(threads);
        check::<tollgate::window::Sliding>(threads);
    }
}

/// The same on the real clock, with windows short enough that a run
/// crosses many of them.
#[test]
fn the_real_clock_never_lets_a_window_exceed_its_limit() {
    fn check<K: WindowKind>(threads: usize) {
        let quota = WindowQuota::new(40, Duration::from_micros(200)).unwrap();
        let limiter = WindowCounter::<K, _>::with_clock(quota, MonotonicClock::new()).unwrap();
        let (certain, all) = admissions_by_window(&limiter, threads, 5_000, None::<fn()>);
        for (window, cost) in &certain {
            assert!(
                *cost <= 40,
                "window {window}: {cost} with {threads} threads"
            );
        }
        let windows = limiter.clock().now_nanos() / 200_000 + 1;
        assert!(all <= 40 * windows, "{all} over {windows} windows");
    }
    for threads in THREAD_COUNTS {
        check::<tollgate::window::Fixed>(threads);
        check::<tollgate::window::Sliding>(threads);
    }
}

/// Receipts taken and undone by racing threads within one window leave
/// exactly what was kept counted.
#[test]
fn racing_receipts_leave_exactly_what_was_kept() {
    for threads in THREAD_COUNTS {
        // Shown to race: a run counts only if two threads' receipts
        // interleaved (`common::Interleaving`).
        until_interleaved(1, |_| {
            let clock = ManualClock::new();
            let limiter = SlidingWindow::with_clock(quota(), &clock).unwrap();
            let order = Interleaving::default();
            let tallies = race(threads, |t| {
                let mut me = order.worker();
                let mut kept = 0;
                for i in 0..ATTEMPTS_PER_THREAD {
                    let cost = 1 + (i + t as u64) % 4;
                    if let Ok(receipt) = Receipt::take(&limiter, cost) {
                        if i % 2 == 0 {
                            receipt.undo();
                        } else {
                            kept += cost;
                            receipt.keep();
                        }
                        me.step();
                    }
                }
                (kept, me.interleaved())
            });
            let kept: u64 = tallies.iter().map(|t| t.0).sum();
            assert!(kept <= LIMIT);
            assert_eq!(limiter.available(), LIMIT - kept, "{threads} threads");
            tallies.iter().any(|t| t.1)
        });
    }
}

/// Threads racing reservations on a sliding window frozen at the start of
/// a window whose previous one counted the limit: nothing fits now, and
/// the `k`-th unit counted is due when the previous count weighs `N - k`,
/// at `ceil(k·W/N)`, for `k` below `N` (the `N`-th is due only at the next
/// window, which a reservation never reaches). However they interleave,
/// exactly those `N - 1` reservations are granted, each wait once, and
/// every other call is refused with the wait until that next window.
#[test]
fn racing_reservations_on_a_sliding_window_are_granted_each_slot_once() {
    let window_nanos = u64::try_from(WINDOW.as_nanos()).unwrap();
    let expected: Vec<Duration> = (1..LIMIT)
        .map(|k| Duration::from_nanos((k * window_nanos).div_ceil(LIMIT)))
        .collect();
    for threads in THREAD_COUNTS {
        // Shown to race: a run counts only if two threads' grants
        // interleaved (`common::Interleaving`).
        until_interleaved(1, |_| {
            let clock = ManualClock::new();
            let limiter = SlidingWindow::with_clock(quota(), &clock).unwrap();
            limiter.try_acquire(LIMIT).unwrap();
            clock.set(WINDOW);
            let order = Interleaving::default();
            let per_thread = race(threads, |_| {
                let mut me = order.worker();
                let mut granted = Vec::new();
                for _ in 0..ATTEMPTS_PER_THREAD {
                    match limiter.reserve(1, WINDOW) {
                        Ok(wait) => {
                            me.step();
                            granted.push(wait);
                        }
                        Err(refused) => assert_eq!(
                            refused,
                            AcquireError::Insufficient {
                                retry_after: WINDOW
                            }
                        ),
                    }
                }
                (granted, me.interleaved())
            });
            let mut granted: Vec<Duration> = per_thread.iter().flat_map(|t| t.0.clone()).collect();
            granted.sort();
            assert_eq!(granted, expected, "{threads} threads");
            assert_eq!(limiter.available(), 0);
            per_thread.iter().any(|t| t.1)
        });
    }
}

// Keyed windows: many keys, a sweeper racing the deciders, and the cap.

const KEYS: u32 = 64;
const KEY_LIMIT: u64 = 5;

/// Per key, the units `threads` threads were admitted on `limiter` in one
/// frozen window, each asking `KEY_LIMIT` times per key, while another
/// thread sweeps without pause; and the most keys tracked seen meanwhile.
fn keyed_phase<K: WindowKind>(
    limiter: &KeyedWindow<u32, K, ManualClock>,
    threads: usize,
) -> (BTreeMap<u32, u64>, usize) {
    let most = std::sync::atomic::AtomicUsize::new(0);
    let per_thread = race_beside(
        threads,
        KEY_LIMIT,
        BESIDE_CALLS,
        |i, round, admitted: &mut BTreeMap<u32, u64>| {
            for k in 0..KEYS {
                // Threads walk the keys from different places.
                let key = (k + i as u32 * 7 + round as u32) % KEYS;
                let units = match limiter.key(&key).try_acquire(1) {
                    Ok(()) => 1,
                    Err(AcquireError::Insufficient { .. } | AcquireError::TooManyKeys { .. }) => 0,
                    Err(other) => panic!("refused with {other:?}"),
                };
                *admitted.entry(key).or_insert(0) += units;
                most.fetch_max(limiter.len(), std::sync::atomic::Ordering::Relaxed);
            }
        },
        || {
            limiter.sweep();
        },
    );
    let mut totals = BTreeMap::new();
    for admitted in per_thread {
        for (key, units) in admitted {
            *totals.entry(key).or_insert(0) += units;
        }
    }
    (totals, most.into_inner())
}

fn keyed_quota() -> WindowQuota {
    WindowQuota::new(KEY_LIMIT, WINDOW).unwrap()
}

/// With room for every key, each key gets exactly its limit in each
/// window, whatever the sweeper drops (an idle key only) and recreates.
fn every_key_gets_its_limit_per_window<K: WindowKind>(
    limiter: &KeyedWindow<u32, K, ManualClock>,
    step: Duration,
) {
    for threads in THREAD_COUNTS {
        for _ in 0..3 {
            let (totals, most) = keyed_phase(limiter, threads);
            assert_eq!(totals.len(), KEYS as usize);
            assert!(
                totals.values().all(|&units| units == KEY_LIMIT),
                "{threads} threads: {totals:?}"
            );
            // The count errs high for a moment, never low (so the cap is
            // never overshot): it reserves a place before each insertion
            // (at most one per racing thread), and a sweep uncounts the keys
            // it dropped when it ends, while deciders may already have
            // created them again (at most every key once).
            assert!(most <= 2 * KEYS as usize + threads, "{most} keys counted");
            limiter.clock().advance(step);
        }
    }
}

#[test]
fn keyed_fixed_windows_admit_each_key_its_limit_beside_a_sweeper() {
    let limiter = KeyedFixedWindow::builder(keyed_quota())
        .clock(ManualClock::new())
        .build_fixed::<u32>()
        .unwrap();
    every_key_gets_its_limit_per_window(&limiter, WINDOW);
}

#[test]
fn keyed_sliding_windows_admit_each_key_its_limit_beside_a_sweeper() {
    let limiter = KeyedSlidingWindow::builder(keyed_quota())
        .clock(ManualClock::new())
        .build_sliding::<u32>()
        .unwrap();
    // Two windows on, the last one's count no longer weighs.
    every_key_gets_its_limit_per_window(&limiter, 2 * WINDOW);
}

#[test]
fn a_full_keyed_window_table_never_overshoots_its_cap_nor_a_keys_limit() {
    let max_keys = KEYS as usize / 4;
    let limiter = KeyedFixedWindow::builder(keyed_quota())
        .clock(ManualClock::new())
        .max_keys(std::num::NonZeroUsize::new(max_keys).unwrap().into())
        .sweep_interval(Some(Duration::ZERO))
        .build_fixed::<u32>()
        .unwrap();
    for threads in THREAD_COUNTS {
        let (totals, most) = keyed_phase(&limiter, threads);
        assert!(most <= max_keys, "{most} keys tracked");
        assert!(
            totals.values().all(|&units| units <= KEY_LIMIT),
            "{totals:?}"
        );
        // Only keys that got a place were admitted, and no more of them
        // than the cap holds in one window.
        let admitted = totals.values().filter(|&&units| units > 0).count();
        assert!(
            (1..=max_keys).contains(&admitted),
            "{admitted} keys admitted"
        );
        limiter.clock().advance(WINDOW);
    }
}
