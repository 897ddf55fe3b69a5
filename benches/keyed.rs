//! Single-thread cost of a keyed decision, beside `governor`'s keyed limiter.
//!
//! Two groups, each measuring every implementation in the same run, on the
//! same quota and the same class of clock:
//!
//! - `keyed_hot`: one key, decided again and again (its bucket stays in
//!   cache);
//! - `keyed_100k`: 100 000 keys, all created before measuring, visited in a
//!   scattered order, so most decisions miss the caches;
//! - `keyed_1m` (coarse clock only): 1 000 000 keys, likewise;
//! - `keyed_zipf` (coarse clock only): 100 000 keys visited with Zipf-like
//!   skew (exponent 1): a few keys take most decisions, as real traffic
//!   does.
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
const MILLION_KEYS: u64 = 1_000_000;
/// Draws of the Zipf-like visiting order.
const ZIPF_DRAWS: usize = 1_000_000;

/// A burst of `u32::MAX` refilled at one token per nanosecond: never denies.
fn quotas() -> (Quota, GovernorQuota) {
    let tollgate = Quota::new(u64::from(u32::MAX), 1_000_000_000, Duration::from_secs(1))
        .expect("a valid quota");
    let governor = GovernorQuota::with_period(Duration::from_nanos(1))
        .expect("non-zero period")
        .allow_burst(NonZeroU32::MAX);
    (tollgate, governor)
}

/// The `i`-th of `n` keys in scattered order: a multiplier coprime to `n`
/// (a power of ten) permutes the indices, and a 64-bit mix spreads the
/// values.
fn scattered_key(i: u64, n: u64) -> u64 {
    let index = i * 48_271 % n;
    index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5A5_A5A5
}

/// The keys a group visits.
#[derive(Clone, Copy)]
enum Keys {
    Hot,
    Uniform(u64),
    Zipf(u64),
}

impl Keys {
    /// Every key the order can visit, to create before measuring.
    fn all(self) -> Vec<u64> {
        let n = match self {
            Keys::Hot => 1,
            Keys::Uniform(n) | Keys::Zipf(n) => n,
        };
        (0..n).map(|i| scattered_key(i, n)).collect()
    }

    /// The visiting order, computed before measuring.
    fn order(self) -> Vec<u64> {
        match self {
            Keys::Hot | Keys::Uniform(_) => self.all(),
            Keys::Zipf(n) => zipf_ranks(n, ZIPF_DRAWS)
                .into_iter()
                .map(|rank| scattered_key(rank, n))
                .collect(),
        }
    }
}

/// `draws` ranks in `0..n` with probability proportional to `1 / (rank + 1)`,
/// by inverse CDF on a fixed-seed generator, so every run visits the same
/// sequence. (A splitmix step rather than a `rand` dependency: the bench
/// needs reproducible draws, not statistical quality.)
fn zipf_ranks(n: u64, draws: usize) -> Vec<u64> {
    let mut cumulative = Vec::with_capacity(n as usize);
    let mut total = 0.0;
    for rank in 0..n {
        total += 1.0 / (rank + 1) as f64;
        cumulative.push(total);
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..draws)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let u = (z ^ (z >> 31)) as f64 / u64::MAX as f64 * total;
            cumulative.partition_point(|&c| c < u) as u64
        })
        .map(|rank| rank.min(n - 1))
        .collect()
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
    let order = keys.order();
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
    let all = keys.all();
    for key in &all {
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
    assert_eq!(tollgate.len(), all.len(), "a key was created");
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
    keyed_class(
        group,
        class,
        clock,
        governor_clock,
        Keys::Uniform(MANY_KEYS),
    );
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

/// The larger and skewed key sets, on the coarse clock class only: the
/// clock reading is the same for every implementation and the map is what
/// these groups measure.
fn keyed_1m(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_1m");
    let (clock, upkeep) = (common::coarse_clock(), common::quanta_upkeep_clock());
    keyed_class(
        &mut group,
        "coarse",
        clock,
        upkeep,
        Keys::Uniform(MILLION_KEYS),
    );
    group.finish();
}

fn keyed_zipf(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_zipf");
    let (clock, upkeep) = (common::coarse_clock(), common::quanta_upkeep_clock());
    keyed_class(&mut group, "coarse", clock, upkeep, Keys::Zipf(MANY_KEYS));
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = keyed_hot, keyed_100k, keyed_1m, keyed_zipf
}
criterion_main!(benches);
