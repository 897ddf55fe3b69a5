//! Single-thread cost of a keyed window counter's decision, beside the
//! keyed bucket (`KeyedLimiter`) on the same clock and key table.
//!
//! Groups, each measuring every implementation in the same run, in
//! [`ROUNDS`] alternating rounds (bucket, fixed, sliding, then again), so a
//! shared machine's drift touches all of them alike; compare the medians of
//! the per-round ratios:
//!
//! - `keyed_window_hot`: one key, admitted again and again: the keyed bucket
//!   on `common::OPEN`, a keyed fixed window of `2^33 - 1` per second (the
//!   largest that packs). A sliding window's limit (at most 65 535 per
//!   second) is spent by a tight loop on one key, so it is not in this
//!   group.
//! - `keyed_window_deny`: a refusal on one exhausted key (one an hour), with
//!   its exact retry time: bucket, fixed and sliding.
//! - `keyed_window_100k`: 100 000 keys, all created before measuring,
//!   visited in a scattered order, admitted: bucket, fixed (`2^33 - 1` per
//!   second) and sliding (65 535 per second per key, which the run never
//!   spends on any one key).
//!
//! On the default clock (the TSC). Keys are `u64`. Run with
//! `cargo bench -p tollgate-benches --bench keyed_window`; see
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use tollgate::{
    AcquireError, DefaultClock, KeyedFixedWindow, KeyedLimiter, KeyedSlidingWindow, Limit,
    WindowQuota,
};

mod common;
use common::{OPEN, SHUT};

/// Alternating rounds of every implementation in each group.
const ROUNDS: usize = 3;
const MANY_KEYS: u64 = 100_000;
const HOUR: Duration = Duration::from_secs(3600);

fn keyed_bucket(quota: common::SameQuota) -> KeyedLimiter<u64> {
    KeyedLimiter::builder(quota.tollgate())
        .clock(DefaultClock::new())
        .build()
}

fn fixed(quota: WindowQuota) -> KeyedFixedWindow<u64> {
    KeyedFixedWindow::builder(quota).build_fixed().unwrap()
}

fn sliding(quota: WindowQuota) -> KeyedSlidingWindow<u64> {
    KeyedSlidingWindow::builder(quota).build_sliding().unwrap()
}

/// Benchmarks `decide` as `round{round}/{name}`, checking before and after
/// that it admits (or refuses) as the group expects.
fn bench<R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    round: usize,
    name: &str,
    admits: bool,
    mut decide: impl FnMut() -> Result<R, AcquireError>,
) {
    let id = format!("round{round}/{name}");
    assert_eq!(decide().is_ok(), admits, "{id} before measuring");
    group.bench_function(&id, |b| b.iter(&mut decide));
    assert_eq!(decide().is_ok(), admits, "{id} after measuring");
}

/// A scattered walk over `n` keys: a multiplier coprime with `n` spreads
/// consecutive visits over the table.
fn scattered(n: u64) -> Vec<u64> {
    (0..n).map(|i| i.wrapping_mul(40_503) % n).collect()
}

/// A decision on the next key of `order`, round and round.
fn walker<'a, L: Limit + 'a>(
    order: &'a [u64],
    limit_of: impl Fn(&'a u64) -> L + 'a,
) -> impl FnMut() -> Result<(), AcquireError> + 'a {
    let mut at = 0;
    move || {
        at = (at + 1) % order.len();
        black_box(limit_of(&order[at])).try_acquire(1)
    }
}

fn keyed_window_hot(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_window_hot");
    let bucket = keyed_bucket(OPEN);
    let fixed = fixed(WindowQuota::per_second((1 << 33) - 1).unwrap());
    for round in 0..ROUNDS {
        bench(&mut group, round, "bucket", true, || {
            black_box(&bucket).key(&7).try_acquire(1)
        });
        bench(&mut group, round, "fixed", true, || {
            black_box(&fixed).key(&7).try_acquire(1)
        });
    }
    group.finish();
}

fn keyed_window_deny(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_window_deny");
    let bucket = keyed_bucket(SHUT);
    let quota = WindowQuota::new(1, HOUR).unwrap();
    let (fixed, sliding) = (fixed(quota), sliding(quota));
    bucket.try_acquire(&7, 1).unwrap();
    fixed.key(&7).try_acquire(1).unwrap();
    sliding.key(&7).try_acquire(1).unwrap();
    for round in 0..ROUNDS {
        bench(&mut group, round, "bucket", false, || {
            black_box(&bucket).key(&7).try_acquire(1)
        });
        bench(&mut group, round, "fixed", false, || {
            black_box(&fixed).key(&7).try_acquire(1)
        });
        bench(&mut group, round, "sliding", false, || {
            black_box(&sliding).key(&7).try_acquire(1)
        });
    }
    group.finish();
}

fn keyed_window_100k(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_window_100k");
    let order = scattered(MANY_KEYS);
    let bucket = keyed_bucket(OPEN);
    let fixed = fixed(WindowQuota::per_second((1 << 33) - 1).unwrap());
    let sliding = sliding(WindowQuota::per_second((1 << 16) - 1).unwrap());
    for key in &order {
        bucket.try_acquire(key, 1).unwrap();
        fixed.key(key).try_acquire(1).unwrap();
        sliding.key(key).try_acquire(1).unwrap();
    }
    for round in 0..ROUNDS {
        bench(
            &mut group,
            round,
            "bucket",
            true,
            walker(&order, |key| bucket.key(key)),
        );
        bench(
            &mut group,
            round,
            "fixed",
            true,
            walker(&order, |key| fixed.key(key)),
        );
        bench(
            &mut group,
            round,
            "sliding",
            true,
            walker(&order, |key| sliding.key(key)),
        );
    }
    assert_eq!(
        (bucket.len(), fixed.len(), sliding.len()),
        (100_000, 100_000, 100_000)
    );
    group.finish();
}

criterion_group! {
    name = keyed_window_benches;
    config = common::config();
    targets = keyed_window_hot, keyed_window_deny, keyed_window_100k
}
criterion_main!(keyed_window_benches);
