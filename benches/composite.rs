//! Single-thread cost of composite decisions: weighted costs (beside
//! `governor`, `ratelimit` and a mutex) and chains of limits (beside
//! `governor` and a mutex; `ratelimit` has no chain of its own to offer).
//!
//! Three groups, each measuring every implementation in the same run:
//!
//! - `weighted`: one decision of cost 1, 8 or 64 (the benchmark parameter):
//!   - `tollgate`: `TokenBucket::try_acquire(cost)`;
//!   - `governor`: `check_n(cost)` on a direct `RateLimiter`, whose decision
//!     is a nested `Result` (outer: a cost above the burst; inner: refused);
//!   - `ratelimit`: the `ratelimit` crate's `Ratelimiter::try_wait_n(cost)`,
//!     which refills and spends in separate compare-and-swaps, over two
//!     words (so a decision is not one atomic step), and refills at most once
//!     a microsecond;
//!   - `mutex`: a token bucket with a floating-point balance behind a
//!     `std::sync::Mutex` (`common::MutexBucket`).
//!
//!   The cost goes through `black_box`, a weight known at run time as a
//!   request's size is. All four get the same quota: a burst of `u32::MAX`
//!   (governor's largest) refilled at one token per nanosecond (governor's
//!   fastest: its emission interval is a whole number of nanoseconds). At 64
//!   tokens per decision of a few nanoseconds that drains, whatever the
//!   implementation, so each run of at most `u32::MAX / cost - 1` decisions
//!   starts on a new, full limiter made outside the timed region: none can
//!   deny, whatever its speed and refill granularity, and one more decision
//!   after each run checks that it still admits.
//! - `hierarchy`: one request through a chain of 1, 2 or 3 buckets (the
//!   parameter), one token from each, on the `weighted` quota (which never
//!   denies at one token per decision):
//!   - `tollgate`: the all-or-nothing combinator
//!     `try_acquire_all(&[a.cost(1), b.cost(1), …])`;
//!   - `tollgate_sequential`: the same buckets' `try_acquire(1)` one after
//!     the other, stopping at the first refusal: what the combinator adds;
//!   - `governor_sequential`: direct `RateLimiter`s checked one after the
//!     other. Governor has no all-or-nothing combinator: this is what a
//!     caller of it writes;
//!   - `mutex`: all the buckets' balances behind one lock, refilled together
//!     and charged only if every one holds the cost: all-or-nothing by
//!     construction, with one clock read and one lock for the whole chain.
//! - `hierarchy_refused`: the same implementations on a chain of 3 whose
//!   last bucket (one token an hour) is drained, so every decision refuses.
//!   `tollgate` takes the first two and gives them back (each undo reads
//!   the clock again), then reports the longest wait among all three limits; `tollgate_sequential` and
//!   `governor_sequential` spend the first two buckets' tokens for a request
//!   that is refused, the bug the combinator avoids (here it is harmless
//!   only because those buckets refill a token per nanosecond). After
//!   measuring, the combinator is checked to take nothing from any bucket of
//!   a refused chain and one token from each of an admitted one.
//!
//! Clock class: coarse only (`CoarseClock`, a reading is one load;
//! governor's `QuantaUpkeepClock`, started anew for `weighted` and for the
//! two chain groups, since only one may live at a time). What these groups measure is what weights and chains add to a
//! decision; the clock classes are `bucket`'s subject, and with a reading
//! that costs one load the differences between rows are the limiters' work
//! (a chain of tollgate or governor buckets reads the clock once per bucket,
//! the mutex once). The coarse clock is also what makes the combinator's
//! undo do its work: an undo gives back the cost less the time elapsed since
//! it was taken, and on a nanosecond clock a token of this quota has
//! refilled by then (the undo returns nothing), while between two ticks the
//! time stands still (the undo is a compare-and-swap that restores the
//! bucket exactly, which the check after measuring relies on). Every class
//! would also triple a run on a shared machine.
//!
//! Every routine gets its limiters through `black_box` and returns the
//! decision itself, which criterion passes through `black_box` once, as in
//! `bucket`; each limiter is charged before measuring and must decide as
//! expected before and after.
//!
//! Run with `cargo bench -p tollgate-benches --bench composite`; see
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use governor::RateLimiter;
use governor::clock::QuantaUpkeepClock;
use tollgate::{Clock, CoarseClock, Limit, Step, TokenBucket, try_acquire_all};

mod common;
use common::{FloatBucket, OPEN, SHUT, SameQuota, coarse_clock, quanta_upkeep_clock};

/// The `weighted` costs.
const COSTS: [u32; 3] = [1, 8, 64];

/// Attempts at checking a chain between two ticks of the coarse clock, each
/// of a few hundred nanoseconds against a tick of a millisecond.
const TICK_ATTEMPTS: usize = 100;

/// A chain of [`FloatBucket`]s behind one lock.
struct MutexChain<const N: usize>(Mutex<[FloatBucket; N]>);

impl<const N: usize> MutexChain<N> {
    /// Full buckets of `limits` as of `now`.
    fn new(limits: [SameQuota; N], now: u64) -> Self {
        MutexChain(Mutex::new(limits.map(|limit| limit.float(now))))
    }

    /// Takes one token from every bucket at `now` if every one holds it.
    fn try_acquire(&self, now: u64) -> bool {
        let mut buckets = self.0.lock().unwrap();
        let admits = buckets.iter().all(|bucket| bucket.holds(now, 1));
        if admits {
            for bucket in buckets.iter_mut() {
                bucket.try_acquire(now, 1);
            }
        }
        admits
    }
}

/// Benchmarks `decide` at `cost` as `{name}/{cost}`, on a new `OPEN` limiter
/// from `fresh` for every run of decisions that could otherwise drain it.
fn bench_weighted<L, R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    cost: u32,
    fresh: impl Fn() -> L,
    decide: impl Fn(&L) -> R,
    admitted: impl Fn(&R) -> bool,
) {
    // One decision's worth is kept for the check after the run.
    let per_limiter = u64::from(OPEN.capacity / cost) - 1;
    group.bench_function(BenchmarkId::new(name, cost), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let run = left.min(per_limiter);
                let limiter = fresh();
                let started = Instant::now();
                for _ in 0..run {
                    black_box(decide(black_box(&limiter)));
                }
                elapsed += started.elapsed();
                assert!(
                    admitted(&decide(&limiter)),
                    "{name}/{cost} refused within its burst"
                );
                left -= run;
            }
            elapsed
        })
    });
}

fn weighted(c: &mut Criterion) {
    let mut group = c.benchmark_group("weighted");
    let clock = coarse_clock();
    let upkeep = quanta_upkeep_clock();
    for cost in COSTS {
        let wide = u64::from(cost);
        let nonzero = NonZeroU32::new(cost).expect("costs are non-zero");
        bench_weighted(
            &mut group,
            "tollgate",
            cost,
            || TokenBucket::with_clock(OPEN.tollgate(), clock.clone()),
            |bucket| bucket.try_acquire(black_box(wide)),
            Result::is_ok,
        );
        bench_weighted(
            &mut group,
            "governor",
            cost,
            || RateLimiter::direct_with_clock(OPEN.governor(), upkeep.clone()),
            |limiter| limiter.check_n(black_box(nonzero)),
            |decision| decision.as_ref().expect("the cost fits the burst").is_ok(),
        );
        bench_weighted(
            &mut group,
            "ratelimit",
            cost,
            || OPEN.ratelimit(clock.clone()),
            |limiter| limiter.try_wait_n(black_box(wide)),
            Result::is_ok,
        );
        bench_weighted(
            &mut group,
            "mutex",
            cost,
            || OPEN.mutex(clock.now_nanos()),
            |mutex| mutex.try_acquire(black_box(&clock).now_nanos(), black_box(wide)),
            |&admitted| admitted,
        );
    }
    group.finish();
}

/// The combinator's steps: one token from each bucket.
fn steps<const N: usize>(buckets: &[TokenBucket<CoarseClock>; N]) -> [Step<'_>; N] {
    buckets.each_ref().map(|bucket| bucket.cost(1))
}

/// Benchmarks `decide` as `{name}/{depth}`. Charged once first (which drains
/// a `SHUT` bucket), it must decide `admits` before and after measuring.
fn bench_chain<R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    depth: usize,
    admits: bool,
    decide: impl Fn() -> R + Copy,
    admitted: impl Fn(&R) -> bool,
) {
    assert!(
        admitted(&decide()),
        "{name}/{depth} refused its first charge"
    );
    assert_eq!(
        admitted(&decide()),
        admits,
        "{name}/{depth} before measuring"
    );
    // By value (a closure of references is `Copy`): given `&decide`, the
    // timing loop called it out of line, a call per decision.
    group.bench_function(BenchmarkId::new(name, depth), |b| b.iter(decide));
    assert_eq!(
        admitted(&decide()),
        admits,
        "{name}/{depth} after measuring"
    );
}

/// Checks that one decision of the combinator takes a token from every
/// bucket if it admits and from none if it refuses (what it took on the way
/// is given back). Compared between two ticks of the coarse clock, where no
/// refill can make up for a token left spent; a tick in between proves
/// nothing, so it tries again.
fn assert_all_or_nothing<const N: usize>(
    clock: &CoarseClock,
    buckets: &[TokenBucket<CoarseClock>; N],
    admits: bool,
) {
    for _ in 0..TICK_ATTEMPTS {
        let tick = clock.now_nanos();
        let before = buckets.each_ref().map(TokenBucket::available);
        let admitted = try_acquire_all(&steps(buckets)).is_ok();
        let after = buckets.each_ref().map(TokenBucket::available);
        if clock.now_nanos() == tick {
            assert_eq!(admitted, admits, "the combinator over {N} buckets");
            let taken = u64::from(admitted);
            assert_eq!(
                after,
                before.map(|available| available - taken),
                "the combinator over {N} buckets took a token from some but not all"
            );
            return;
        }
    }
    panic!("the coarse clock ticked during every check");
}

/// Benchmarks a chain of buckets of `limits` under every implementation: it
/// admits if they are all `OPEN`, and refuses once its `SHUT` one is drained.
fn chain<const N: usize>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    clock: &CoarseClock,
    upkeep: &QuantaUpkeepClock,
    limits: [SameQuota; N],
) {
    let admits = !limits.contains(&SHUT);

    let buckets = limits.map(|limit| TokenBucket::with_clock(limit.tollgate(), clock.clone()));
    bench_chain(
        group,
        "tollgate",
        N,
        admits,
        || try_acquire_all(&steps(black_box(&buckets))),
        Result::is_ok,
    );
    assert_all_or_nothing(clock, &buckets, admits);

    let buckets = limits.map(|limit| TokenBucket::with_clock(limit.tollgate(), clock.clone()));
    bench_chain(
        group,
        "tollgate_sequential",
        N,
        admits,
        || {
            black_box(&buckets)
                .iter()
                .try_for_each(|bucket| bucket.try_acquire(1))
        },
        Result::is_ok,
    );

    let limiters =
        limits.map(|limit| RateLimiter::direct_with_clock(limit.governor(), upkeep.clone()));
    bench_chain(
        group,
        "governor_sequential",
        N,
        admits,
        || {
            black_box(&limiters)
                .iter()
                .try_for_each(|limiter| limiter.check())
        },
        Result::is_ok,
    );

    let mutex = MutexChain::new(limits, clock.now_nanos());
    bench_chain(
        group,
        "mutex",
        N,
        admits,
        || black_box(&mutex).try_acquire(black_box(clock).now_nanos()),
        |&admitted| admitted,
    );
}

fn hierarchy(c: &mut Criterion) {
    let clock = coarse_clock();
    let upkeep = quanta_upkeep_clock();

    let mut group = c.benchmark_group("hierarchy");
    chain(&mut group, &clock, &upkeep, [OPEN]);
    chain(&mut group, &clock, &upkeep, [OPEN; 2]);
    chain(&mut group, &clock, &upkeep, [OPEN; 3]);
    group.finish();

    let mut group = c.benchmark_group("hierarchy_refused");
    chain(&mut group, &clock, &upkeep, [OPEN, OPEN, SHUT]);
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = weighted, hierarchy
}
criterion_main!(benches);
