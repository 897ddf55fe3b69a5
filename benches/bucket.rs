//! Single-thread cost of a `tollgate` decision, beside its floor and the
//! other limiters of the ecosystem.
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
//! - `manual`: tollgate alone on a `ManualClock` that stands still (a reading
//!   is one load), admitted and refused, once per kind of quota the core
//!   represents: a whole-nanosecond interval, an exact fraction of one
//!   (three per nanosecond), one rounded per token (11/s) and one charged
//!   per request (1 GiB/s). With the clock nearly free, these rows isolate
//!   the core's own arithmetic.
//! - `default_clock`: a reading, an admission and a refusal on the default
//!   clock beside the same on `TscClock`, the counter it reads where it
//!   trusts it: what its choice between two sources costs.
//! - `quota_change`: on the same clock, a bucket (and a striped bucket)
//!   whose quota never changed beside one that changed once
//!   (`set_quota`), admitted and refused: what a change costs the
//!   decisions after it (`docs/benchmarks.md`, "Changing a quota").
//!
//! The baselines of `allow` and `deny`, beside `tollgate`:
//!
//! - `governor`: a direct `RateLimiter` (`check`);
//! - `ratelimit`: the `ratelimit` crate's `Ratelimiter` (`try_wait`), which
//!   refills and spends in separate compare-and-swaps, over two words (so a
//!   decision is not one atomic step), and refills at most once a
//!   microsecond;
//! - `mutex`: a token bucket with a floating-point balance behind a
//!   `std::sync::Mutex` (`common::MutexBucket`), the design a one-word bucket
//!   replaces; it reads the class's clock at each decision.
//!
//! Clock classes: `monotonic` (`Instant`; governor's `MonotonicClock`),
//! `coarse` (a background thread stores the time, a reading is one load;
//! governor's `QuantaUpkeepClock`) and `default` (each crate's default, on
//! both the time-stamp counter through `quanta`: tollgate's `DefaultClock`,
//! governor's `QuantaClock`).
//! `ratelimit` reads tollgate's clock of the class through its own clock
//! trait (`common::RatelimitClock`).
//!
//! Every routine gets the limiter through `black_box(&limiter)`, so nothing
//! about the quota is constant-folded, and returns the decision itself, which
//! criterion passes through `black_box` once: the whole result (including a
//! refusal's retry time) is computed, as a caller would receive it. Both
//! tollgate quotas have whole-nanosecond emission intervals (one tick per
//! nanosecond).
//!
//! Run with `cargo bench -p tollgate-benches --bench bucket`; see
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use crossbeam_utils::CachePadded;
use governor::RateLimiter;
use governor::clock::{Clock as GovernorClock, MonotonicClock as GovernorMonotonic, QuantaClock};
use tollgate::{Clock, Limit, ManualClock, MonotonicClock, Quota, StripedBucket, TokenBucket};

mod common;
use common::{SameQuota, coarse_clock, for_each_clock_class, quanta_upkeep_clock};

/// The `allow` quota: refills faster than the benchmark drains it.
const ALLOW: SameQuota = common::OPEN;

/// The `deny` quota: one token an hour, drained before measuring.
const DENY: SameQuota = common::SHUT;

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

/// Benchmarks `decide` as `{class}/{name}`. Charged once first (which drains
/// a `deny` bucket), it must decide `admits` before and after measuring: the
/// `allow` limiters never deny during the run, the `deny` ones never admit.
fn bench_decision<R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    name: &str,
    admits: bool,
    decide: impl Fn() -> R + Copy,
    admitted: impl Fn(&R) -> bool,
) {
    let id = format!("{class}/{name}");
    assert!(admitted(&decide()), "{id} refused its first charge");
    assert_eq!(admitted(&decide()), admits, "{id} before measuring");
    // By value (a closure of references is `Copy`): given `&decide`, the
    // timing loop called it out of line, a call per decision.
    group.bench_function(&id, |b| b.iter(decide));
    assert_eq!(admitted(&decide()), admits, "{id} after measuring");
}

/// Benchmarks the `ratelimit` and `mutex` baselines of `class` on `limit`.
fn baselines<C: Clock>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: &C,
    limit: SameQuota,
    admits: bool,
) {
    let limiter = limit.ratelimit(clock);
    bench_decision(
        group,
        class,
        "ratelimit",
        admits,
        || black_box(&limiter).try_wait(),
        Result::is_ok,
    );

    let mutex = limit.mutex(clock.now_nanos());
    bench_decision(
        group,
        class,
        "mutex",
        admits,
        || black_box(&mutex).try_acquire(black_box(clock).now_nanos(), 1),
        |&admitted| admitted,
    );
}

/// Benchmarks every implementation for one clock class on the allow path.
fn allow_class<C, G>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
) where
    C: Clock,
    G: GovernorClock,
{
    let word = shared_word(&clock);
    group.bench_function(format!("{class}/floor"), |b| {
        b.iter(|| floor_allow(black_box(&clock), black_box(&word)))
    });

    // They borrow the clock, so they run before the bucket takes it.
    baselines(group, class, &clock, ALLOW, true);

    let bucket = TokenBucket::with_clock(ALLOW.tollgate(), clock);
    bench_decision(
        group,
        class,
        "tollgate",
        true,
        || black_box(&bucket).try_acquire(1),
        Result::is_ok,
    );

    // The same bucket with opt-in decision counters: their cost is the
    // difference from the row above.
    let counted = tollgate::Counted::new(bucket);
    bench_decision(
        group,
        class,
        "tollgate_counted",
        true,
        || black_box(&counted).try_acquire(1),
        Result::is_ok,
    );
    // The counters saw every decision of the run, not just the last.
    assert!(counted.stats().denied == 0, "the allow bucket denied");

    let limiter = RateLimiter::direct_with_clock(ALLOW.governor(), governor_clock);
    bench_decision(
        group,
        class,
        "governor",
        true,
        || black_box(&limiter).check(),
        Result::is_ok,
    );
}

/// Benchmarks every implementation for one clock class on the deny path.
fn deny_class<C, G>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
) where
    C: Clock,
    G: GovernorClock,
{
    // A word an hour in the future: every comparison refuses.
    let word = CachePadded::new(AtomicU64::new(clock.now_nanos() + 3_600_000_000_000));
    assert!(floor_deny(&clock, &word));
    group.bench_function(format!("{class}/floor"), |b| {
        b.iter(|| floor_deny(black_box(&clock), black_box(&word)))
    });

    // They borrow the clock, so they run before the bucket takes it.
    baselines(group, class, &clock, DENY, false);

    let bucket = TokenBucket::with_clock(DENY.tollgate(), clock);
    bench_decision(
        group,
        class,
        "tollgate",
        false,
        || black_box(&bucket).try_acquire(1),
        Result::is_ok,
    );

    let limiter = RateLimiter::direct_with_clock(DENY.governor(), governor_clock);
    bench_decision(
        group,
        class,
        "governor",
        false,
        || black_box(&limiter).check(),
        Result::is_ok,
    );
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

/// The kinds of quota of the `manual` rows: the name and the refill.
/// `2^32` tokens of capacity outlast every run of the `allow` rows, since
/// the clock never moves.
const MANUAL_KINDS: [(&str, u64, Duration); 4] = [
    ("whole_ns", 1, Duration::from_nanos(1)),
    ("thirds", 3, Duration::from_nanos(1)),
    ("rounded", 11, Duration::from_secs(1)),
    ("per_request", 1 << 30, Duration::from_secs(1)),
];

fn manual(c: &mut Criterion) {
    let mut group = c.benchmark_group("manual");
    for (kind, tokens, period) in MANUAL_KINDS {
        for (path, capacity) in [("allow", 1 << 32), ("deny", 1)] {
            let quota = Quota::new(capacity, tokens, period).expect("a valid quota");
            let bucket = TokenBucket::with_clock(quota, ManualClock::new());
            bench_decision(
                &mut group,
                path,
                kind,
                path == "allow",
                || black_box(&bucket).try_acquire(1),
                Result::is_ok,
            );
        }
    }
    group.finish();
}

/// `quota` as built, or reached by a change from a quota one token larger.
fn changed_or_not(quota: Quota, changed: bool) -> TokenBucket<ManualClock> {
    if !changed {
        return TokenBucket::with_clock(quota, ManualClock::new());
    }
    let (tokens, period) = quota.refill();
    let before = Quota::new(quota.capacity() + 1, tokens, period).expect("a valid quota");
    let bucket = TokenBucket::with_clock(before, ManualClock::new());
    bucket.set_quota(quota);
    bucket
}

fn quota_change(c: &mut Criterion) {
    let mut group = c.benchmark_group("quota_change");
    for (path, capacity) in [("allow", 1 << 40), ("deny", 1)] {
        let quota = Quota::new(capacity, 1, Duration::from_nanos(1)).expect("a valid quota");
        for changed in [false, true] {
            let bucket = changed_or_not(quota, changed);
            let name = if changed { "changed" } else { "unchanged" };
            bench_decision(
                &mut group,
                path,
                name,
                path == "allow",
                || black_box(&bucket).try_acquire(1),
                Result::is_ok,
            );
        }
    }
    let quota = Quota::new(1 << 40, 1, Duration::from_nanos(1)).expect("a valid quota");
    for changed in [false, true] {
        let striped = StripedBucket::with_clock(quota, ManualClock::new(), 1, 64);
        if changed {
            striped.set_quota(Quota::new(1 << 39, 1, Duration::from_nanos(1)).expect("valid"));
        }
        let name = if changed { "changed" } else { "unchanged" };
        bench_decision(
            &mut group,
            "striped",
            name,
            true,
            || black_box(&striped).try_acquire(1),
            Result::is_ok,
        );
    }
    group.finish();
}

/// The default clock beside the counter it reads where it trusts it: a
/// reading, an admission and a refusal on each, in one run, so the cost of
/// the default's branch between its two sources is the difference of each
/// pair (`docs/benchmarks.md`, "The default clock"). On a machine whose
/// default reads the OS clock instead, the `default` rows measure that.
fn default_clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("default_clock");
    let tsc = tollgate::TscClock::new();
    let default = tollgate::DefaultClock::new();
    group.bench_function("read/tsc", |b| b.iter(|| black_box(&tsc).now_nanos()));
    group.bench_function("read/default", |b| {
        b.iter(|| black_box(&default).now_nanos())
    });
    for (path, limit) in [("allow", ALLOW), ("deny", DENY)] {
        let on_tsc = TokenBucket::with_clock(limit.tollgate(), tsc.clone());
        let on_default = TokenBucket::with_clock(limit.tollgate(), default.clone());
        let admits = path == "allow";
        bench_decision(
            &mut group,
            path,
            "tsc",
            admits,
            || black_box(&on_tsc).try_acquire(1),
            Result::is_ok,
        );
        bench_decision(
            &mut group,
            path,
            "default",
            admits,
            || black_box(&on_default).try_acquire(1),
            Result::is_ok,
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = clock, allow, deny, manual, quota_change, default_clock
}
criterion_main!(benches);
