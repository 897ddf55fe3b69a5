//! Real threads racing on one bucket. With a clock that does not move the
//! totals are exact, so any lost update or double admission under contention
//! changes a number. With the real clock the only timing assertion is the
//! token-bucket envelope, which holds however the threads are scheduled.
//! Each test proves its race happened: its rounds go on until one in which
//! a thread's admissions had another thread's admission between them
//! (`common::Interleaving`).

use std::time::Duration;

use tollgate::{AcquireError, Clock, Limit, ManualClock, MonotonicClock, Quota, TokenBucket};

use common::{Envelope, Interleaving, race, until_interleaved};
use tollgate_test_support::common;

const THREAD_COUNTS: [usize; 3] = [2, 4, 8];
const ROUNDS: usize = 10;
const CAPACITY: u64 = 1_000;
const ATTEMPTS_PER_THREAD: u64 = 1_000;
/// The emission interval of `CAPACITY` tokens per second.
const INTERVAL: Duration = Duration::from_millis(1);

/// A full bucket of `CAPACITY` refilled at `CAPACITY`/s, on a clock that
/// stays where it is (a non-zero time, so the stored state is not trivially
/// zero).
fn frozen_bucket() -> TokenBucket<ManualClock> {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(5));
    TokenBucket::with_clock(Quota::per_second(CAPACITY).unwrap(), clock)
}

/// Acquires `cost`: the cost admitted, or the wait a refusal carried, which
/// must be positive (the request really did not fit).
fn try_acquire<C: Clock>(bucket: &TokenBucket<C>, cost: u64) -> Result<u64, Duration> {
    match bucket.try_acquire(cost) {
        Ok(()) => Ok(cost),
        Err(AcquireError::Insufficient { retry_after }) => {
            assert!(!retry_after.is_zero(), "cost {cost} refused with no wait");
            Err(retry_after)
        }
        Err(other) => panic!("cost {cost} refused with {other:?}"),
    }
}

/// Acquires `cost` on a frozen clock, returning the cost admitted. There a
/// refusal's wait is exact, so it is at most the refill time of the whole
/// cost (credit is never negative without reservations).
fn acquire(bucket: &TokenBucket<ManualClock>, cost: u64) -> u64 {
    try_acquire(bucket, cost).unwrap_or_else(|retry_after| {
        let full_wait = INTERVAL * u32::try_from(cost).unwrap();
        assert!(
            retry_after <= full_wait,
            "cost {cost} told to retry after {retry_after:?}"
        );
        0
    })
}

#[test]
fn unit_costs_admit_exactly_the_capacity() {
    for threads in THREAD_COUNTS {
        let bucket = frozen_bucket();
        until_interleaved(ROUNDS, |round| {
            bucket.reset();
            let order = Interleaving::default();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let mut admitted = 0;
                for _ in 0..ATTEMPTS_PER_THREAD {
                    if acquire(&bucket, 1) > 0 {
                        me.step();
                        admitted += 1;
                    }
                }
                (admitted, me.interleaved())
            });
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            assert_eq!(admitted, CAPACITY, "{threads} threads, round {round}");
            assert_eq!(bucket.available(), 0);
            tallies.iter().any(|t| t.1)
        });
    }
}

#[test]
fn mixed_costs_never_overspend_and_account_for_every_token() {
    for threads in THREAD_COUNTS {
        let bucket = frozen_bucket();
        until_interleaved(ROUNDS, |round| {
            bucket.reset();
            let order = Interleaving::default();
            let tallies = race(threads, |t| {
                let mut me = order.worker();
                let mut admitted = 0;
                for i in 0..ATTEMPTS_PER_THREAD {
                    let got = acquire(&bucket, 1 + (i * 7 + t as u64) % 5);
                    if got > 0 {
                        me.step();
                        admitted += got;
                    }
                }
                (admitted, me.interleaved())
            });
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            let remaining = bucket.available();
            assert!(admitted <= CAPACITY, "{threads} threads, round {round}");
            assert_eq!(
                admitted + remaining,
                CAPACITY,
                "{threads} threads, round {round}"
            );
            // `available()` reports what is really there: exactly that many
            // unit acquisitions still succeed.
            let left: u64 = (0..=remaining).map(|_| acquire(&bucket, 1)).sum();
            assert_eq!(left, remaining);
            tallies.iter().any(|t| t.1)
        });
    }
}

/// Racing reservations on a frozen clock each get their own slot: the first
/// `CAPACITY` start now, then one per emission interval, with no slot handed
/// out twice or skipped, up to the wait budget.
#[test]
fn racing_reservations_get_distinct_slots() {
    const SLOTS_AFTER_BURST: u64 = 500;
    for threads in THREAD_COUNTS {
        until_interleaved(1, |_| {
            let bucket = frozen_bucket();
            let order = Interleaving::default();
            let max_wait = INTERVAL * u32::try_from(SLOTS_AFTER_BURST).unwrap();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let mut waits = Vec::new();
                for _ in 0..ATTEMPTS_PER_THREAD {
                    if let Ok(wait) = bucket.reserve(1, max_wait) {
                        me.step();
                        waits.push(wait);
                    }
                }
                (waits, me.interleaved())
            });
            let mut waits: Vec<Duration> = tallies.iter().flat_map(|t| t.0.clone()).collect();
            waits.sort_unstable();
            let expected: Vec<Duration> = (0..CAPACITY)
                .map(|_| Duration::ZERO)
                .chain((1..=SLOTS_AFTER_BURST).map(|k| INTERVAL * u32::try_from(k).unwrap()))
                .collect();
            assert_eq!(waits, expected, "{threads} threads");
            tallies.iter().any(|t| t.1)
        });
    }
}

/// On the real clock: at least the full burst is admitted (a full bucket must
/// not refuse), and no more than `B + r * elapsed`, where elapsed is measured
/// on the bucket's own clock around all the operations.
#[test]
fn real_clock_admissions_stay_within_the_envelope() {
    const BURST: u64 = 100;
    const RATE_PER_SECOND: u64 = 10_000;
    const OPS_PER_THREAD: u64 = 5_000;
    let interval = Duration::from_secs(1) / u32::try_from(RATE_PER_SECOND).unwrap();
    for threads in THREAD_COUNTS {
        until_interleaved(1, |_| {
            let quota = Quota::new(BURST, RATE_PER_SECOND, Duration::from_secs(1)).unwrap();
            let bucket = TokenBucket::with_clock(quota, MonotonicClock::new());
            let order = Interleaving::default();
            let start = bucket.clock().now_nanos();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let (mut admitted, mut longest_wait) = (0, Duration::ZERO);
                for _ in 0..OPS_PER_THREAD {
                    match try_acquire(&bucket, 1) {
                        Ok(cost) => {
                            me.step();
                            admitted += cost;
                        }
                        Err(wait) => longest_wait = longest_wait.max(wait),
                    }
                }
                (admitted, longest_wait, me.interleaved())
            });
            let elapsed = bucket.clock().now_nanos() - start;
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            assert!(
                admitted >= BURST,
                "{threads} threads admitted only {admitted}"
            );
            // A thread deciding on a reading that others have since
            // overtaken sees less credit and a longer wait, never a shorter
            // one; but the staleness is bounded by the run, so a wait beyond
            // one interval plus the whole run would be wrong.
            let longest_wait = tallies.iter().map(|t| t.1).max().unwrap();
            assert!(longest_wait <= interval + Duration::from_nanos(elapsed));
            let envelope = Envelope {
                capacity: BURST,
                tokens: RATE_PER_SECOND,
                period_ns: 1_000_000_000,
            };
            assert!(
                envelope.admits(u128::from(admitted), elapsed),
                "{threads} threads admitted {admitted} in {elapsed} ns"
            );
            tallies.iter().any(|t| t.2)
        });
    }
}

/// Refunds racing acquisitions are neither lost nor double-counted. Each
/// thread only returns tokens it holds, so credit never exceeds the capacity,
/// no refund is clipped, and the final credit is exact.
#[test]
fn refunds_racing_acquisitions_are_all_accounted_for() {
    for threads in THREAD_COUNTS {
        let bucket = frozen_bucket();
        until_interleaved(ROUNDS, |round| {
            bucket.reset();
            let order = Interleaving::default();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let (mut admitted, mut refunded) = (0, 0);
                for _ in 0..ATTEMPTS_PER_THREAD {
                    let got = acquire(&bucket, 1);
                    if got > 0 {
                        me.step();
                        admitted += got;
                    }
                    if admitted > 2 * refunded + 1 {
                        bucket.refund(1);
                        me.step();
                        refunded += 1;
                    }
                }
                (admitted, refunded, me.interleaved())
            });
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            let refunded: u64 = tallies.iter().map(|t| t.1).sum();
            assert!(refunded > 0 && admitted - refunded <= CAPACITY);
            assert_eq!(
                bucket.available(),
                CAPACITY - (admitted - refunded),
                "{threads} threads, round {round}: {admitted} admitted, {refunded} refunded"
            );
            tallies.iter().any(|t| t.2)
        });
    }
}
