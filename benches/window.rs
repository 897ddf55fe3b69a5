//! Single-thread cost of a window counter's decision and of a pacer's,
//! beside the token bucket on the same clock.
//!
//! Groups, each measuring every implementation in the same run, on the
//! `default` clock (the TSC) and on the `coarse` one (a reading is one
//! load, so the arithmetic shows):
//!
//! - `window_allow`: an admission that never refuses during the run: the
//!   bucket on `common::OPEN`, a fixed window of `2^33 - 1` per second (the
//!   largest that packs). A sliding window cannot be in this group: its
//!   two counts leave room for at most 65 535 per second, which a tight
//!   loop spends in a fraction of a window.
//! - `window_deny`: a refusal on an exhausted limiter (one an hour), with
//!   its exact retry time.
//! - `window_take_undo`: a `Receipt` taken and undone at once, for the
//!   bucket and both windows: the admission path of a sliding window,
//!   which that pair keeps from filling, beside the others'.
//! - `pacer`: `Pacer::reserve` beside `TokenBucket::reserve` on the same
//!   capacity-1 quota, idle (one start per nanosecond: every call starts
//!   at once, or within the coarse clock's tick) and queued (one start per
//!   microsecond: every call waits a little longer than the one before).
//!
//! Run with `cargo bench -p tollgate-benches --bench window`; see
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use tollgate::window::{WindowCounter, WindowKind};
use tollgate::{
    AcquireError, Clock, DefaultClock, FixedWindow, Limit, Pacer, Quota, Receipt, SlidingWindow,
    TokenBucket, WindowQuota,
};

mod common;
use common::coarse_clock;

const HOUR: Duration = Duration::from_secs(3600);
/// A pacer's most wait: never reached in a run.
const PATIENT: Duration = Duration::from_secs(1_000_000);

/// Benchmarks `decide` as `{class}/{name}`, checking before and after that
/// it admits (or refuses) as the group expects.
fn bench<R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    name: &str,
    admits: bool,
    decide: impl Fn() -> Result<R, AcquireError> + Copy,
) {
    let id = format!("{class}/{name}");
    assert_eq!(decide().is_ok(), admits, "{id} before measuring");
    group.bench_function(&id, |b| b.iter(decide));
    assert_eq!(decide().is_ok(), admits, "{id} after measuring");
}

fn window<K: WindowKind, C: Clock>(quota: WindowQuota, clock: C) -> WindowCounter<K, C> {
    WindowCounter::with_clock(quota, clock).expect("a window that packs")
}

fn allow_class<C: Clock + Clone>(group: &mut BenchmarkGroup<'_, WallTime>, class: &str, clock: C) {
    let bucket = TokenBucket::with_clock(common::OPEN.tollgate(), clock.clone());
    bench(group, class, "bucket", true, || {
        black_box(&bucket).try_acquire(1)
    });
    let quota = WindowQuota::per_second((1 << 33) - 1).unwrap();
    let fixed: FixedWindow<C> = window(quota, clock);
    bench(group, class, "fixed", true, || {
        black_box(&fixed).try_acquire(1)
    });
}

fn deny_class<C: Clock + Clone>(group: &mut BenchmarkGroup<'_, WallTime>, class: &str, clock: C) {
    let bucket = TokenBucket::with_clock(common::SHUT.tollgate(), clock.clone());
    bucket.try_acquire(1).unwrap();
    bench(group, class, "bucket", false, || {
        black_box(&bucket).try_acquire(1)
    });
    let quota = WindowQuota::new(1, HOUR).unwrap();
    let fixed: FixedWindow<C> = window(quota, clock.clone());
    fixed.try_acquire(1).unwrap();
    bench(group, class, "fixed", false, || {
        black_box(&fixed).try_acquire(1)
    });
    let sliding: SlidingWindow<C> = window(quota, clock);
    sliding.try_acquire(1).unwrap();
    bench(group, class, "sliding", false, || {
        black_box(&sliding).try_acquire(1)
    });
}

fn take_undo_class<C: Clock + Clone>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
) {
    let bucket = TokenBucket::with_clock(common::OPEN.tollgate(), clock.clone());
    bench(group, class, "bucket", true, || {
        Receipt::take(black_box(&bucket), 1).map(Receipt::undo)
    });
    let quota = WindowQuota::new(60_000, HOUR).unwrap();
    let fixed: FixedWindow<C> = window(quota, clock.clone());
    bench(group, class, "fixed", true, || {
        Receipt::take(black_box(&fixed), 1).map(Receipt::undo)
    });
    let sliding: SlidingWindow<C> = window(quota, clock);
    bench(group, class, "sliding", true, || {
        Receipt::take(black_box(&sliding), 1).map(Receipt::undo)
    });
}

fn pacer_class<C: Clock + Clone>(group: &mut BenchmarkGroup<'_, WallTime>, class: &str, clock: C) {
    for (pace, interval) in [
        ("idle", Duration::from_nanos(1)),
        ("queued", Duration::from_micros(1)),
    ] {
        let quota = Quota::new(1, 1, interval).unwrap();
        let bucket = TokenBucket::with_clock(quota, clock.clone());
        bench(
            group,
            class,
            &format!("{pace}/bucket_reserve"),
            true,
            || black_box(&bucket).reserve(1, PATIENT),
        );
        let pacer = Pacer::with_clock(1, interval, PATIENT, clock.clone()).unwrap();
        bench(group, class, &format!("{pace}/pacer"), true, || {
            black_box(&pacer).reserve()
        });
    }
}

/// Runs `class` on the default clock, then on a coarse one (whose thread
/// stops before the next group starts).
macro_rules! each_class {
    ($c:expr, $name:literal, $class:ident) => {{
        let mut group = $c.benchmark_group($name);
        $class(&mut group, "default", DefaultClock::new());
        $class(&mut group, "coarse", coarse_clock());
        group.finish();
    }};
}

fn benches(c: &mut Criterion) {
    each_class!(c, "window_allow", allow_class);
    each_class!(c, "window_deny", deny_class);
    each_class!(c, "window_take_undo", take_undo_class);
    each_class!(c, "pacer", pacer_class);
}

criterion_group! {
    name = window_benches;
    config = common::config();
    targets = benches
}
criterion_main!(window_benches);
