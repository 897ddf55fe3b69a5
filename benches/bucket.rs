//! Single-thread cost of a `tollgate` decision, beside its floor and `governor`.
//!
//! Three groups, each measuring every implementation in the same run, on the
//! same quota and the same class of clock:
//!
//! - `clock`: one reading of each clock.
//! - `allow`: an admission on a bucket that never denies during the run;
//!   `tollgate_counted` is the same bucket wrapped in `Counted` (opt-in
//!   decision counters).
//!   `floor` is the least any single-word design can do: one clock read, one
//!   load and one successful compare-and-swap on a shared `AtomicU64`.
//! - `deny`: a refusal on an exhausted bucket. `floor` is one clock read and
//!   one load (a refusal never writes).
//!
//! Clock classes: `monotonic` (`Instant`; governor's `MonotonicClock`),
//! `coarse` (a background thread stores the time, a reading is one load;
//! governor's `QuantaUpkeepClock`) and, with `--features tsc`, `tsc` (the
//! time-stamp counter through `quanta`; governor's `QuantaClock`).
//!
//! Every routine gets the limiter through `black_box(&limiter)`, so nothing
//! about the quota is constant-folded, and returns the decision itself, which
//! criterion passes through `black_box` once: the whole result (including a
//! refusal's retry time) is computed, as a caller would receive it. Both
//! tollgate quotas have whole-nanosecond emission intervals (one tick per
//! nanosecond).
//!
//! Run with `cargo bench --bench bucket --all-features`; see
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use crossbeam_utils::CachePadded;
use governor::clock::{Clock as GovernorClock, MonotonicClock as GovernorMonotonic, QuantaClock};
use governor::{Quota as GovernorQuota, RateLimiter};
use tollgate::{Clock, MonotonicClock, Quota, TokenBucket};

mod common;
use common::{coarse_clock, for_each_clock_class, quanta_upkeep_clock};

/// The `allow` quota: a burst of `u32::MAX` (governor's largest) refilled at
/// one token per nanosecond. A decision costs more than a nanosecond, so the
/// bucket refills faster than the benchmark drains it and never denies.
const ALLOW_CAPACITY: u32 = u32::MAX;

fn allow_quotas() -> (Quota, GovernorQuota) {
    let tollgate = Quota::new(
        u64::from(ALLOW_CAPACITY),
        1_000_000_000,
        Duration::from_secs(1),
    )
    .expect("1 token/ns with a u32::MAX burst is a valid quota");
    let governor = GovernorQuota::with_period(Duration::from_nanos(1))
        .expect("non-zero period")
        .allow_burst(NonZeroU32::MAX);
    (tollgate, governor)
}

/// The `deny` quota: one token, refilled once an hour.
fn deny_quotas() -> (Quota, GovernorQuota) {
    let tollgate = Quota::new(1, 1, Duration::from_secs(3600)).expect("1 per hour is valid");
    let governor = GovernorQuota::per_hour(NonZeroU32::MIN);
    (tollgate, governor)
}

/// The shared word the floors compare-and-swap, on its own cache line like a
/// bucket's state.
fn shared_word(clock: &impl Clock) -> CachePadded<AtomicU64> {
    CachePadded::new(AtomicU64::new(clock.now_nanos()))
}

/// Floor of an admission: clock read, load, one successful compare-and-swap.
#[inline(always)]
fn floor_allow(clock: &impl Clock, word: &AtomicU64) -> Result<u64, u64> {
    let now = clock.now_nanos();
    let current = word.load(Ordering::Acquire);
    word.compare_exchange(current, now, Ordering::AcqRel, Ordering::Acquire)
}

/// Floor of a refusal: clock read, one load, one comparison.
#[inline(always)]
fn floor_deny(clock: &impl Clock, word: &AtomicU64) -> bool {
    let now = clock.now_nanos();
    now < word.load(Ordering::Acquire)
}

/// Benchmarks floor, tollgate and governor for one clock class on the allow path.
fn allow_class<C, G>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
) where
    C: Clock,
    G: GovernorClock,
{
    let (quota, governor_quota) = allow_quotas();

    let word = shared_word(&clock);
    group.bench_function(format!("{class}/floor"), |b| {
        b.iter(|| floor_allow(black_box(&clock), black_box(&word)))
    });

    let bucket = TokenBucket::with_clock(quota, clock);
    assert!(bucket.try_acquire(1).is_ok());
    group.bench_function(format!("{class}/tollgate"), |b| {
        b.iter(|| black_box(&bucket).try_acquire(1))
    });
    assert!(bucket.try_acquire(1).is_ok(), "the allow bucket denied");

    // The same bucket with opt-in decision counters: their cost is the
    // difference from the row above.
    let counted = tollgate::Counted::new(bucket);
    group.bench_function(format!("{class}/tollgate_counted"), |b| {
        b.iter(|| black_box(&counted).try_acquire(1))
    });
    assert!(counted.stats().denied == 0, "the allow bucket denied");

    let limiter = RateLimiter::direct_with_clock(governor_quota, governor_clock);
    assert!(limiter.check().is_ok());
    group.bench_function(format!("{class}/governor"), |b| {
        b.iter(|| black_box(&limiter).check())
    });
    assert!(limiter.check().is_ok(), "the allow limiter denied");
}

/// Benchmarks floor, tollgate and governor for one clock class on the deny path.
fn deny_class<C, G>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
) where
    C: Clock,
    G: GovernorClock,
{
    let (quota, governor_quota) = deny_quotas();

    // A word an hour in the future: every comparison refuses.
    let word = CachePadded::new(AtomicU64::new(clock.now_nanos() + 3_600_000_000_000));
    assert!(floor_deny(&clock, &word));
    group.bench_function(format!("{class}/floor"), |b| {
        b.iter(|| floor_deny(black_box(&clock), black_box(&word)))
    });

    let bucket = TokenBucket::with_clock(quota, clock);
    assert!(bucket.try_acquire(1).is_ok());
    assert!(
        bucket.try_acquire(1).is_err(),
        "the deny bucket is not drained"
    );
    group.bench_function(format!("{class}/tollgate"), |b| {
        b.iter(|| black_box(&bucket).try_acquire(1))
    });
    assert!(bucket.try_acquire(1).is_err(), "the deny bucket admitted");

    let limiter = RateLimiter::direct_with_clock(governor_quota, governor_clock);
    assert!(limiter.check().is_ok());
    assert!(limiter.check().is_err(), "the deny limiter is not drained");
    group.bench_function(format!("{class}/governor"), |b| {
        b.iter(|| black_box(&limiter).check())
    });
    assert!(limiter.check().is_err(), "the deny limiter admitted");
}

fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");

    group.bench_function("std_instant_now", |b| b.iter(Instant::now));

    let monotonic = MonotonicClock::new();
    group.bench_function("tollgate_monotonic", |b| {
        b.iter(|| black_box(&monotonic).now_nanos())
    });
    let coarse = coarse_clock();
    group.bench_function("tollgate_coarse", |b| {
        b.iter(|| black_box(&coarse).now_nanos())
    });
    #[cfg(feature = "tsc")]
    {
        let tsc = tollgate::TscClock::new();
        group.bench_function("tollgate_tsc", |b| b.iter(|| black_box(&tsc).now_nanos()));
        let quanta = quanta::Clock::new();
        group.bench_function("quanta_now", |b| b.iter(|| black_box(&quanta).now()));
        group.bench_function("quanta_raw", |b| b.iter(|| black_box(&quanta).raw()));
    }

    let governor_monotonic = GovernorMonotonic;
    group.bench_function("governor_monotonic", |b| {
        b.iter(|| black_box(&governor_monotonic).now())
    });
    let governor_quanta = QuantaClock::default();
    group.bench_function("governor_quanta", |b| {
        b.iter(|| black_box(&governor_quanta).now())
    });
    let governor_upkeep = quanta_upkeep_clock();
    group.bench_function("governor_quanta_upkeep", |b| {
        b.iter(|| black_box(&governor_upkeep).now())
    });

    group.finish();
}

fn allow(c: &mut Criterion) {
    let mut group = c.benchmark_group("allow");
    for_each_clock_class!(&mut group, allow_class);
    group.finish();
}

fn deny(c: &mut Criterion) {
    let mut group = c.benchmark_group("deny");
    for_each_clock_class!(&mut group, deny_class);
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = clock, allow, deny
}
criterion_main!(benches);
