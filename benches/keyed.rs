//! Single-thread cost of a keyed decision, beside `governor`'s keyed limiter.
//!
//! Two groups, each measuring every implementation in the same run, on the
//! same quota and the same class of clock:
//!
//! - `keyed_hot`: one key, decided again and again (its bucket stays in
//!   cache);
//! - `keyed_100k`: 100 000 keys, all created before measuring, visited in a
//!   scattered order, so most decisions miss the caches.
//!
//! The quota never denies during a run (see `bucket.rs`), so both measure the
//! admission path. Implementations:
//!
//! - `tollgate`: `KeyedLimiter` with its default hasher (`ahash`);
//! - `governor`: `RateLimiter::dashmap_with_clock`, governor's default keyed
//!   store, whose hasher is std's SipHash;
//! - `governor_ahash`: the same store with `ahash`, to separate what the
//!   hasher buys from what the rest of the design does.
//!
//! Keys are `u64`. Run with `cargo bench --bench keyed --all-features`; see
//! `docs/benchmarks.md`.

use std::cell::Cell;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use governor::clock::Clock as GovernorClock;
use governor::{Quota as GovernorQuota, RateLimiter};
use tollgate::{Clock, KeyedLimiter, Quota};

mod common;
use common::for_each_clock_class;

const MANY_KEYS: u64 = 100_000;

/// A burst of `u32::MAX` refilled at one token per nanosecond: never denies.
fn quotas() -> (Quota, GovernorQuota) {
    let tollgate = Quota::new(u64::from(u32::MAX), 1_000_000_000, Duration::from_secs(1))
        .expect("a valid quota");
    let governor = GovernorQuota::with_period(Duration::from_nanos(1))
        .expect("non-zero period")
        .allow_burst(NonZeroU32::MAX);
    (tollgate, governor)
}

/// The `i`-th key of the scattered visiting order: a multiplier coprime to
/// `MANY_KEYS` permutes the indices, and a 64-bit mix spreads the values.
fn scattered_key(i: u64) -> u64 {
    let index = i * 48_271 % MANY_KEYS;
    index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5A5_A5A5
}

/// The keys a group visits: one, or `MANY_KEYS` in scattered order.
#[derive(Clone, Copy)]
enum Keys {
    Hot,
    Many,
}

impl Keys {
    fn count(self) -> u64 {
        match self {
            Keys::Hot => 1,
            Keys::Many => MANY_KEYS,
        }
    }
}

/// Benchmarks the three keyed limiters for one clock class.
fn keyed_class<C, G>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
    keys: Keys,
) where
    C: Clock,
    G: GovernorClock + Clone,
{
    let (quota, governor_quota) = quotas();
    // The visiting order, computed before measuring: each iteration costs
    // the same index step and load for every implementation.
    let order: Vec<u64> = (0..keys.count()).map(scattered_key).collect();
    let next = Cell::new(0usize);
    let key = || {
        let i = next.get();
        next.set(if i + 1 == order.len() { 0 } else { i + 1 });
        order[i]
    };

    let tollgate = KeyedLimiter::builder(quota).clock(clock).build::<u64>();
    let governor = RateLimiter::dashmap_with_clock(governor_quota, governor_clock.clone());
    let governor_ahash = RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota,
        governor_clock,
        ahash::RandomState::new(),
    );
    for key in &order {
        assert!(tollgate.try_acquire(key, 1).is_ok());
        assert!(governor.check_key(key).is_ok());
        assert!(governor_ahash.check_key(key).is_ok());
    }

    group.bench_function(format!("{class}/tollgate"), |b| {
        b.iter(|| black_box(&tollgate).try_acquire(&key(), 1))
    });
    group.bench_function(format!("{class}/governor"), |b| {
        b.iter(|| black_box(&governor).check_key(&key()))
    });
    group.bench_function(format!("{class}/governor_ahash"), |b| {
        b.iter(|| black_box(&governor_ahash).check_key(&key()))
    });
    assert_eq!(tollgate.len() as u64, keys.count(), "a key was created");
}

fn hot_class<C: Clock, G: GovernorClock + Clone>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
) {
    keyed_class(group, class, clock, governor_clock, Keys::Hot);
}

fn many_class<C: Clock, G: GovernorClock + Clone>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
) {
    keyed_class(group, class, clock, governor_clock, Keys::Many);
}

fn keyed_hot(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_hot");
    for_each_clock_class!(&mut group, hot_class);
    group.finish();
}

fn keyed_100k(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_100k");
    for_each_clock_class!(&mut group, many_class);
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = keyed_hot, keyed_100k
}
criterion_main!(benches);
