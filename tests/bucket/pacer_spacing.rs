//! The pacer on a `ManualClock`: departures evenly spaced to the
//! nanosecond, the queue bound (alone and under racing threads), and async
//! waits on tokio's paused clock whose cancellation gives the slot back by
//! the one rule.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{AcquireError, Clock, ManualClock, Pacer};

use common::{Interleaving, race, race_beside, until_interleaved};
use tollgate_test_support::common;

const SECOND: Duration = Duration::from_secs(1);
/// The pace of most tests: 25 a second, one start every 40 ms.
const INTERVAL: Duration = Duration::from_millis(40);

fn pacer(max_wait: Duration) -> Pacer<ManualClock> {
    Pacer::with_clock(25, SECOND, max_wait, ManualClock::new()).unwrap()
}

#[test]
fn a_burst_departs_one_interval_apart_up_to_the_queue_bound() {
    let pacer = pacer(Duration::from_millis(130));
    assert_eq!(pacer.max_queue(), 4);
    let waits: Vec<Duration> = (0..4).map(|_| pacer.reserve().unwrap()).collect();
    assert_eq!(waits, [0, 40, 80, 120].map(Duration::from_millis));
    // The fifth would start at 160 ms, past the 130 ms bound: refused, and
    // told when the same call would fit (the queue's head moves on).
    assert_eq!(
        pacer.reserve(),
        Err(AcquireError::Insufficient {
            retry_after: Duration::from_millis(30)
        })
    );
    pacer.clock().advance(Duration::from_millis(30));
    assert_eq!(pacer.reserve(), Ok(Duration::from_millis(130)));
}

#[test]
fn an_idle_pacer_starts_the_next_request_at_once() {
    let pacer = pacer(SECOND);
    assert_eq!(pacer.reserve(), Ok(Duration::ZERO));
    pacer.clock().advance(Duration::from_millis(10));
    assert_eq!(pacer.reserve(), Ok(Duration::from_millis(30)));
    // Idle for longer than an interval: no credit was saved up, the next
    // start is now and the one after a whole interval later.
    pacer.clock().advance(SECOND);
    assert_eq!(pacer.reserve(), Ok(Duration::ZERO));
    assert_eq!(pacer.reserve(), Ok(INTERVAL));
}

#[test]
fn an_irregular_interval_departs_at_its_due_times_rounded_up() {
    // 3 a second: due at k/3 s, which the waits round up to the nanosecond.
    let pacer = Pacer::with_clock(3, SECOND, Duration::from_secs(10), ManualClock::new()).unwrap();
    for k in 0..=30u64 {
        let due = (k * 1_000_000_000).div_ceil(3);
        assert_eq!(pacer.reserve(), Ok(Duration::from_nanos(due)), "start {k}");
    }
}

#[test]
fn bad_rates_are_typed_errors() {
    let clock = ManualClock::new();
    let make = |starts, period| Pacer::with_clock(starts, period, SECOND, &clock).map(drop);
    assert_eq!(make(0, SECOND), Err(tollgate::QuotaError::ZeroTokens));
    assert_eq!(
        make(1, Duration::ZERO),
        Err(tollgate::QuotaError::ZeroPeriod)
    );
}

/// The exact pacer: the next free start is one interval after the last
/// admitted one, or now if that has passed; a request is admitted if that
/// start lies within the maximum wait.
#[derive(Debug)]
struct Model {
    interval: u64,
    max_wait: u64,
    next_free: u64,
}

impl Model {
    fn reserve(&mut self, now: u64) -> Result<u64, u64> {
        let start = self.next_free.max(now);
        if start - now > self.max_wait {
            return Err(start - now - self.max_wait);
        }
        self.next_free = start + self.interval;
        Ok(start - now)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// On any schedule of arrivals, departures (arrival + wait) are those of
    /// the exact pacer: never closer than one interval, exactly one interval
    /// apart while requests queue, and at the arrival when none do.
    #[test]
    fn departures_are_evenly_spaced_to_the_nanosecond(
        interval_ns in prop::sample::select(vec![1u64, 7, 40_000_000, 999_999_937]),
        max_wait_intervals in 0u64..=5,
        gaps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..=3, 0u64..=12_000_000_000], 1..60),
    ) {
        let clock = ManualClock::new();
        let max_wait = interval_ns * max_wait_intervals + interval_ns / 2;
        let pacer = Pacer::with_clock(1, Duration::from_nanos(interval_ns), Duration::from_nanos(max_wait), &clock).unwrap();
        let mut model = Model { interval: interval_ns, max_wait, next_free: 0 };
        let (mut now, mut last_departure) = (0u64, None::<u64>);
        for gap in gaps {
            // Gaps up to 12 s, scaled down to the interval's order of size.
            now += gap % (3 * interval_ns + 1);
            clock.set(Duration::from_nanos(now));
            let got = pacer.reserve().map(|w| w.as_nanos() as u64).map_err(|e| {
                e.retry_after().expect("only refused for the queue bound").as_nanos() as u64
            });
            prop_assert_eq!(got, model.reserve(now), "at {} ns", now);
            if let Ok(wait) = got {
                let departure = now + wait;
                if let Some(last) = last_departure {
                    prop_assert!(departure >= last + interval_ns);
                }
                last_departure = Some(departure);
            }
        }
    }
}

/// Many threads reserving at one instant share out exactly the queue's
/// places, one interval apart, none twice.
#[test]
fn the_queue_bound_holds_under_racing_threads() {
    for threads in [2, 4, 8] {
        // Shown to race: a run counts only if two threads' places
        // interleaved (`common::Interleaving`).
        until_interleaved(1, |_| {
            let pacer = pacer(SECOND);
            let order = Interleaving::default();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let mut waits = Vec::new();
                for _ in 0..100 {
                    if let Ok(wait) = pacer.reserve() {
                        me.step();
                        waits.push(wait);
                    }
                }
                (waits, me.interleaved())
            });
            let mut waits: Vec<Duration> = tallies.iter().flat_map(|t| t.0.clone()).collect();
            waits.sort_unstable();
            let expected: Vec<Duration> = (0..pacer.max_queue() as u32)
                .map(|k| INTERVAL * k)
                .collect();
            assert_eq!(waits, expected, "{threads} threads");
            tallies.iter().any(|t| t.1)
        });
    }
}

/// With the clock moving while threads reserve, no wait exceeds the bound
/// and the starts, at least an interval apart from time zero, number at
/// most one plus the intervals up to the last moment a start could be due.
#[test]
fn the_queue_bound_holds_while_the_clock_moves() {
    for threads in [2, 4, 8] {
        let clock = ManualClock::new();
        let max_wait = Duration::from_millis(200);
        let pacer = Pacer::with_clock(25, SECOND, max_wait, &clock).unwrap();
        let step = std::sync::atomic::AtomicU32::new(0);
        let advance = || {
            if step.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 2_000 {
                clock.advance(Duration::from_micros(700));
            }
        };
        let waits: Vec<Duration> = race_beside(
            threads,
            2_000,
            20,
            |_, _, waits: &mut Vec<Duration>| waits.extend(pacer.reserve().ok()),
            advance,
        )
        .concat();
        assert!(waits.iter().all(|&w| w <= max_wait));
        let horizon = Duration::from_nanos(clock.now_nanos()) + max_wait;
        let most = 1 + (horizon.as_nanos() / INTERVAL.as_nanos()) as usize;
        assert!(waits.len() <= most, "{} starts by {horizon:?}", waits.len());
        assert!(waits.len() >= pacer.max_queue() as usize);
    }
}

/// Async waits, on tokio's paused clock.
#[cfg(feature = "tokio")]
mod awaited {
    use super::*;
    use common::poll_once;

    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    #[test]
    fn concurrent_async_waits_end_one_interval_apart() {
        paused_runtime().block_on(async {
            let pacer = std::sync::Arc::new(pacer(SECOND));
            let start = tokio::time::Instant::now();
            let tasks: Vec<_> = (0..6)
                .map(|_| {
                    let pacer = std::sync::Arc::clone(&pacer);
                    tokio::spawn(async move {
                        pacer.acquire().await.unwrap();
                        start.elapsed()
                    })
                })
                .collect();
            let mut ends = Vec::new();
            for task in tasks {
                ends.push(task.await.unwrap());
            }
            ends.sort_unstable();
            // Simulated time: all six reserved at once, each started one
            // interval after the one before.
            let expected: Vec<Duration> = (0..6).map(|k| INTERVAL * k).collect();
            assert_eq!(ends, expected);
        });
    }

    #[test]
    fn a_cancelled_wait_gives_its_slot_to_the_next_request() {
        paused_runtime().block_on(async {
            let pacer = pacer(SECOND);
            pacer.acquire().await.unwrap();
            // Queued 40 ms out, then abandoned: nothing reserved since, so the
            // slot goes back exactly.
            let mut waiting = Box::pin(pacer.acquire());
            assert!(poll_once(&mut waiting).is_pending());
            drop(waiting);
            assert_eq!(pacer.reserve(), Ok(INTERVAL));
        });
    }

    #[test]
    fn a_cancelled_wait_behind_a_later_reservation_gives_nothing_back() {
        paused_runtime().block_on(async {
            let pacer = pacer(SECOND);
            pacer.acquire().await.unwrap();
            let mut waiting = Box::pin(pacer.acquire());
            assert!(poll_once(&mut waiting).is_pending());
            // A later request holds the start after it, promised to its caller:
            // giving the earlier slot back would hand that start out twice.
            assert_eq!(pacer.reserve(), Ok(2 * INTERVAL));
            drop(waiting);
            assert_eq!(pacer.reserve(), Ok(3 * INTERVAL));
        });
    }

    #[test]
    fn an_async_request_beyond_the_bound_is_refused_at_once() {
        paused_runtime().block_on(async {
            let pacer = pacer(Duration::from_millis(50));
            pacer.acquire().await.unwrap();
            pacer.reserve().unwrap();
            let refused = pacer.acquire().await;
            assert_eq!(
                refused,
                Err(AcquireError::Insufficient {
                    retry_after: Duration::from_millis(30)
                })
            );
        });
    }
}
