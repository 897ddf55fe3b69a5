//! One bucket contended by 1, 2, 4 and 8 threads: total decisions per second.
//!
//! Every implementation runs in the same process on the same quota (never
//! denying) and the coarse clock class (so that contention, not the clock
//! reading, is what is measured):
//!
//! - `floor`: a clock read and one compare-and-swap on one shared word;
//! - `tollgate`: one `TokenBucket`;
//! - `striped`: a `StripedBucket` with one stripe per thread, leasing 1024;
//! - `governor`: a direct `RateLimiter` on `QuantaUpkeepClock`;
//! - `ratelimit`: the `ratelimit` crate's `Ratelimiter` (two words: a
//!   refill compare-and-swap, then a spend compare-and-swap);
//! - `mutex`: a token bucket behind a `std::sync::Mutex`.
//!
//! Threads are spawned outside the timed region: each measurement releases
//! them with a barrier, times a fixed amount of total work (split evenly),
//! and counts every thread's decisions. The machine has 2 cores, so 4 and 8
//! threads are over-subscribed: they show what preemption in the middle of
//! a contended section costs. Criterion reports time per decision; the
//! decisions per second are its inverse, for all threads together.
//!
//! Run with `cargo bench -p tollgate-benches --bench contention`; see `docs/benchmarks.md`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use crossbeam_utils::CachePadded;
use governor::RateLimiter;
use tollgate::{Clock, Limit, StripedBucket, TokenBucket};

mod common;
use common::{OPEN, coarse_clock, quanta_upkeep_clock, timed};

const THREADS: [usize; 4] = [1, 2, 4, 8];

fn contention(c: &mut Criterion) {
    let mut group = c.benchmark_group("contention");
    let clock = coarse_clock();
    for threads in THREADS {
        let word = CachePadded::new(AtomicU64::new(0));
        group.bench_function(BenchmarkId::new("floor", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |_| {
                    let now = black_box(&clock).now_nanos();
                    let current = word.load(Ordering::Acquire);
                    let _ =
                        word.compare_exchange(current, now, Ordering::AcqRel, Ordering::Acquire);
                })
            })
        });

        let bucket = TokenBucket::with_clock(OPEN.tollgate(), &clock);
        group.bench_function(BenchmarkId::new("tollgate", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |_| {
                    black_box(black_box(&bucket).try_acquire(1)).unwrap()
                })
            })
        });

        let striped = StripedBucket::with_clock(OPEN.tollgate(), &clock, threads, 1024);
        group.bench_function(BenchmarkId::new("striped", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |_| {
                    black_box(black_box(&striped).try_acquire(1)).unwrap()
                })
            })
        });

        let ratelimit = OPEN.ratelimit(&clock);
        group.bench_function(BenchmarkId::new("ratelimit", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |_| {
                    black_box(black_box(&ratelimit).try_wait()).unwrap()
                })
            })
        });

        let mutex = OPEN.mutex(clock.now_nanos());
        group.bench_function(BenchmarkId::new("mutex", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |_| {
                    assert!(black_box(&mutex).try_acquire(black_box(&clock).now_nanos(), 1));
                })
            })
        });
    }
    drop(clock);

    let upkeep = quanta_upkeep_clock();
    for threads in THREADS {
        let limiter = RateLimiter::direct_with_clock(OPEN.governor(), upkeep.clone());
        group.bench_function(BenchmarkId::new("governor", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |_| {
                    black_box(black_box(&limiter).check()).unwrap()
                })
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = contention
}
criterion_main!(benches);
