//! Single-thread cost of a keyed decision, beside `governor`'s keyed limiter
//! and a locked map.
//!
//! Each group measures every implementation in the same run, on the same
//! quota and the same class of clock:
//!
//! - `keyed_hot`: one key, decided again and again (its bucket stays in
//!   cache);
//! - `keyed_100k`: 100 000 keys, all created before measuring, visited in a
//!   scattered order, so most decisions miss the caches;
//! - `keyed_1m`: 1 000 000 keys, likewise (default and coarse clocks);
//! - `keyed_zipf`: 100 000 keys visited with Zipf-like skew (exponent 1): a
//!   few keys take most decisions, as real traffic does (default and coarse
//!   clocks);
//! - `keyed_churn` (simulated time): every decision is on a key never
//!   seen before, in bounded memory (see [`keyed_churn`]);
//! - `keyed_set_quota`: a quota change over 100 000 and 1 000 000 keys
//!   (see [`keyed_set_quota`]).
//!
//! In the first four the quota never denies during a run (see `bucket.rs`),
//! so all measure the admission path. Each of them has a `default_2t` row:
//! two threads deciding at once on the default clock (spawned outside the
//! timed region, released by a barrier, a fixed total of decisions split
//! between them), each walking the same visiting order from a different
//! point, so on one key they contend for it and on many they mostly do
//! not; its time is the wall time per decision of both together. Clock
//! classes are those of `common::for_each_clock_class`; `default` is what
//! `KeyedLimiter::new` and governor's `RateLimiter::keyed` read (the
//! time-stamp counter through `quanta` on both). Implementations:
//!
//! - `tollgate`: `KeyedLimiter` with its default hasher (`ahash`);
//! - `governor`: `RateLimiter::dashmap_with_clock`, governor's default keyed
//!   store, whose hasher is std's SipHash;
//! - `governor_ahash`: the same store with `ahash`, to separate what the
//!   hasher buys from what the rest of the design does (not in
//!   `keyed_churn`);
//! - `mutex`: one global lock over a std `HashMap` of `FloatBucket`s (a
//!   floating-point balance), hashed with `ahash` like tollgate, so that the
//!   design, not the hasher, is what differs. It reads the class's clock
//!   (tollgate's own instance) before locking;
//! - `bucket` (`keyed_hot` only): a `TokenBucket` on the same clock, the
//!   floor a keyed decision on one hot key is held to (within 1.3x).
//!
//! The two-thread rows run tollgate and governor only.
//!
//! Under contention (`keyed_disjoint`, `keyed_shared`, `keyed_churn_threads`;
//! see [`keyed_threads`]): 1, 2, 4 and 8 threads on the default clock,
//! tollgate beside governor's default keyed limiter and the mutex map.
//!
//! Keys are `u64`. Run with `cargo bench -p tollgate-benches --bench keyed`; see
//! `docs/benchmarks.md`.

use std::cell::Cell;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use crossbeam_utils::CachePadded;
use governor::RateLimiter;
use governor::clock::{Clock as GovernorClock, FakeRelativeClock};
use tollgate::{Clock, DefaultClock, KeyedLimiter, Limit, ManualClock, TokenBucket};

mod common;
use common::{
    FloatBucket, OPEN, SameQuota, for_each_clock_class, mix, scattered_key, timed, zipf_ranks,
};

const MANY_KEYS: u64 = 100_000;
const MILLION_KEYS: u64 = 1_000_000;
/// Draws of the Zipf-like visiting order.
const ZIPF_DRAWS: usize = 1_000_000;

/// The most keys `keyed_churn`'s limiters hold: tollgate's key cap, and the
/// number of new keys between two prunes of the others.
const CHURN_CAP: tollgate::MaxKeys = match tollgate::MaxKeys::new(100_000) {
    Ok(cap) => cap,
    Err(_) => panic!("not zero"),
};

/// `keyed_churn`'s quota: one token, refilled in a microsecond. A bucket is
/// full again a microsecond after its single decision, so a sweep drops
/// every bucket decided before the current tick.
const CHURN_QUOTA: SameQuota = SameQuota {
    capacity: 1,
    interval: Duration::from_micros(1),
};

/// `keyed_churn`'s simulated time: one tick every [`KEYS_PER_TICK`] new
/// keys (ten million new keys a second), and tollgate's sweep interval.
const CHURN_TICK: Duration = Duration::from_millis(1);
const KEYS_PER_TICK: u64 = 10_000;

/// A keyed limiter of the simplest design: one lock over a std `HashMap` of
/// [`FloatBucket`]s.
struct MutexMap {
    buckets: Mutex<HashMap<u64, FloatBucket, ahash::RandomState>>,
    quota: SameQuota,
}

impl MutexMap {
    /// An empty map whose buckets get `quota`.
    fn new(quota: SameQuota) -> Self {
        MutexMap {
            buckets: Mutex::default(),
            quota,
        }
    }

    /// Takes `cost` from `key`'s bucket at `now`, creating it full if new.
    fn try_acquire(&self, key: u64, now: u64, cost: u64) -> bool {
        self.buckets
            .lock()
            .unwrap()
            .entry(key)
            .or_insert_with(|| self.quota.float(now))
            .try_acquire(now, cost)
    }

    /// Drops every bucket full at `now`, as governor's `retain_recent` does.
    fn retain_recent(&self, now: u64) {
        self.buckets
            .lock()
            .unwrap()
            .retain(|_, bucket| !bucket.is_full(now));
    }

    fn len(&self) -> usize {
        self.buckets.lock().unwrap().len()
    }
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

/// Benchmarks the keyed limiters for one clock class on one thread, and on
/// the default class also on two.
fn keyed_class<C, G>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
    keys: Keys,
) where
    C: Clock,
    G: GovernorClock + Clone + Sync,
{
    // The visiting order, computed before measuring: each iteration costs
    // the same index step and load for every implementation.
    let order = keys.order();
    let next = Cell::new(0usize);
    let key = || {
        let i = next.get();
        next.set(if i + 1 == order.len() { 0 } else { i + 1 });
        order[i]
    };

    let tollgate = KeyedLimiter::builder(OPEN.tollgate())
        .clock(clock)
        .build::<u64>();
    let governor = RateLimiter::dashmap_with_clock(OPEN.governor(), governor_clock.clone());
    let governor_ahash = RateLimiter::dashmap_with_clock_and_hasher(
        OPEN.governor(),
        governor_clock,
        ahash::RandomState::new(),
    );
    let mutex = MutexMap::new(OPEN);
    let clock = tollgate.clock();
    let all = keys.all();
    for key in &all {
        assert!(tollgate.try_acquire(key, 1).is_ok());
        assert!(governor.check_key(key).is_ok());
        assert!(governor_ahash.check_key(key).is_ok());
        assert!(mutex.try_acquire(*key, clock.now_nanos(), 1));
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
    group.bench_function(format!("{class}/mutex"), |b| {
        b.iter(|| black_box(&mutex).try_acquire(key(), clock.now_nanos(), 1))
    });
    if matches!(keys, Keys::Hot) {
        let bucket = TokenBucket::with_clock(OPEN.tollgate(), clock);
        group.bench_function(format!("{class}/bucket"), |b| {
            b.iter(|| black_box(&bucket).try_acquire(1))
        });
    }
    if class == "default" {
        let row = format!("{class}_2t");
        two_threads(group, &row, "tollgate", &order, |key| {
            assert!(black_box(&tollgate).try_acquire(&key, 1).is_ok())
        });
        two_threads(group, &row, "governor", &order, |key| {
            assert!(black_box(&governor).check_key(&key).is_ok())
        });
    }
    assert_eq!(tollgate.len(), all.len(), "a key was created");
    assert_eq!(mutex.len(), all.len(), "a key was created");
}

/// Two threads deciding at once, each walking `order` from its own point
/// (thread `t` from `t / 2` of the way along): a fixed total of decisions
/// split evenly, timed from their release to the last one's end.
fn two_threads(
    group: &mut BenchmarkGroup<'_, WallTime>,
    row: &str,
    name: &str,
    order: &[u64],
    decide: impl Fn(u64) + Sync,
) {
    const THREADS: usize = 2;
    let cursors: Vec<AtomicUsize> = (0..THREADS)
        .map(|t| AtomicUsize::new(t * order.len() / THREADS))
        .collect();
    group.bench_function(format!("{row}/{name}"), |b| {
        b.iter_custom(|iters| {
            timed(THREADS, iters, |thread| {
                // Each cursor is one thread's own: relaxed, uncontended.
                let cursor = &cursors[thread];
                let i = cursor.load(Ordering::Relaxed);
                cursor.store(
                    if i + 1 == order.len() { 0 } else { i + 1 },
                    Ordering::Relaxed,
                );
                decide(order[i]);
            })
        })
    });
}

fn hot_class<C: Clock, G: GovernorClock + Clone + Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    class: &str,
    clock: C,
    governor_clock: G,
) {
    keyed_class(group, class, clock, governor_clock, Keys::Hot);
}

fn many_class<C: Clock, G: GovernorClock + Clone + Sync>(
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

/// The larger and skewed key sets, on the default and the coarse clock
/// classes: the map, not the clock, is what these groups are about.
fn large_group(c: &mut Criterion, name: &str, keys: Keys) {
    let mut group = c.benchmark_group(name);
    keyed_class(
        &mut group,
        "default",
        DefaultClock::new(),
        governor::clock::DefaultClock::default(),
        keys,
    );
    let (clock, upkeep) = (common::coarse_clock(), common::quanta_upkeep_clock());
    keyed_class(&mut group, "coarse", clock, upkeep, keys);
    group.finish();
}

fn keyed_1m(c: &mut Criterion) {
    large_group(c, "keyed_1m", Keys::Uniform(MILLION_KEYS));
}

fn keyed_zipf(c: &mut Criterion) {
    large_group(c, "keyed_zipf", Keys::Zipf(MANY_KEYS));
}

/// New keys arriving continuously, in bounded memory: every decision is on
/// a key never seen before (a counter through [`mix`]), and each is
/// admitted, since a new key starts full. Tollgate's limiter holds at most
/// [`CHURN_CAP`] keys: a new key that finds the table full first sweeps it
/// (at most once per [`CHURN_TICK`]: a second sweep at the same reading
/// would find no bucket the first did not drop). Governor has no automatic
/// sweep, so its `retain_recent` runs every `CHURN_CAP` new keys, and the
/// `mutex` map is pruned the same way; both then hold at most about as many
/// keys. Neither shrinks its table afterwards: governor's documentation does
/// not prescribe `shrink_to_fit`, tollgate's sweep does not shrink, and a
/// table shrunk only to grow back would measure rehashing.
///
/// The time per decision thus includes the insertion of a key and, amortized,
/// the sweep or prune that later drops it: the cost of serving traffic whose
/// keys keep changing (addresses, sessions) without the table outgrowing its
/// bound.
///
/// Time is simulated (`ManualClock`, governor's `FakeRelativeClock`; a
/// reading is one load, like the coarse clock's): it moves one
/// [`CHURN_TICK`] every [`KEYS_PER_TICK`] new keys, so every run sees the
/// same arrivals per unit of time, whatever the machine's speed or load. On
/// a real clock a stalled clock thread would leave no bucket full at a
/// sweep, and tollgate (`AtCapacity::Deny`) would rightly refuse new keys.
fn keyed_churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_churn");
    // Keys created so far by the limiter being measured, one a decision.
    let created = Cell::new(0u64);
    let new_key = || {
        let i = created.get();
        created.set(i + 1);
        mix(i)
    };
    let prune_due = || created.get().is_multiple_of(CHURN_CAP.get() as u64);
    let tick_due = || created.get().is_multiple_of(KEYS_PER_TICK);

    let clock = ManualClock::new();
    let tollgate = KeyedLimiter::builder(CHURN_QUOTA.tollgate())
        .clock(clock.clone())
        .max_keys(CHURN_CAP)
        .sweep_interval(Some(CHURN_TICK))
        .build::<u64>();
    group.bench_function("manual/tollgate", |b| {
        b.iter(|| {
            assert!(black_box(&tollgate).try_acquire(&new_key(), 1).is_ok());
            if tick_due() {
                clock.advance(CHURN_TICK);
            }
        })
    });
    let table = tollgate.table_stats();
    assert_eq!(table.created, created.get(), "a key created twice");
    assert_eq!(
        table.evicted + table.keys,
        table.created,
        "a key neither swept nor held"
    );
    assert!(
        created.get() <= CHURN_CAP.get() as u64 || table.sweeps > 0,
        "the cap was met but no sweep ran"
    );
    if table.sweeps > 0 {
        eprintln!("keyed_churn/manual/tollgate: {} sweeps", table.sweeps);
    }
    churn_report("tollgate", created.replace(0), tollgate.len());

    let fake = FakeRelativeClock::default();
    let governor = RateLimiter::dashmap_with_clock(CHURN_QUOTA.governor(), fake.clone());
    group.bench_function("manual/governor", |b| {
        b.iter(|| {
            assert!(black_box(&governor).check_key(&new_key()).is_ok());
            if prune_due() {
                governor.retain_recent();
            }
            if tick_due() {
                fake.advance(CHURN_TICK);
            }
        })
    });
    churn_report("governor", created.replace(0), governor.len());

    let mutex = MutexMap::new(CHURN_QUOTA);
    let clock = ManualClock::new();
    group.bench_function("manual/mutex", |b| {
        b.iter(|| {
            assert!(black_box(&mutex).try_acquire(new_key(), clock.now_nanos(), 1));
            if prune_due() {
                mutex.retain_recent(clock.now_nanos());
            }
            if tick_due() {
                clock.advance(CHURN_TICK);
            }
        })
    });
    churn_report("mutex", created.replace(0), mutex.len());
    group.finish();
}

/// Prints what a `keyed_churn` run (warm-up included) did to a limiter's
/// table: every key created was either dropped by a sweep or prune, or is
/// still held. Criterion does not run a benchmark its filter excludes, and
/// such a run has nothing to report.
fn churn_report(name: &str, created: u64, held: usize) {
    if created > 0 {
        let dropped = created - held as u64;
        eprintln!(
            "keyed_churn/manual/{name}: {created} keys created, {dropped} dropped, {held} held"
        );
    }
}

/// Thread counts of the contention groups. The machine has 2 cores: 4 and
/// 8 threads are over-subscribed, and show how throughput changes when
/// threads are preempted, not what more cores would give.
const CONTENTION_THREADS: [usize; 4] = [1, 2, 4, 8];
/// Keys of each thread's own in `keyed_disjoint`.
const KEYS_PER_THREAD: u64 = 10_000;
/// Keys every thread visits in `keyed_shared`.
const SHARED_KEYS: u64 = 4;

/// Keyed limiters under contention: a fixed total of decisions split over
/// 1, 2, 4 and 8 threads (spawned outside the timed region, released by a
/// barrier, every thread's decisions counted), on the default clock, with
/// tollgate's `KeyedLimiter::new`, governor's `RateLimiter::keyed` and the
/// mutex map. Criterion's time is the wall time per decision of all threads
/// together; its inverse is the throughput.
///
/// - `keyed_disjoint`: each thread decides on [`KEYS_PER_THREAD`] keys of
///   its own (shards, not buckets, are shared);
/// - `keyed_shared`: every thread decides on the same [`SHARED_KEYS`] keys;
/// - `keyed_churn_threads`: every decision is on a key never seen before,
///   in bounded memory, as in [`keyed_churn`] but on the real clock (a
///   bucket is full, so sweepable, a microsecond after its decision):
///   tollgate sweeps itself at its cap, governor and the mutex map are
///   pruned every [`CHURN_CAP`] new keys by the thread that reaches the
///   count. A decision on a new key is always admitted; the bench counts
///   refusals (a full table that no sweep could yet empty) and prints
///   them.
fn keyed_threads(c: &mut Criterion) {
    for (name, shared) in [("keyed_disjoint", false), ("keyed_shared", true)] {
        let mut group = c.benchmark_group(name);
        for threads in CONTENTION_THREADS {
            let orders: Vec<Vec<u64>> = (0..threads as u64)
                .map(|t| match shared {
                    true => (0..SHARED_KEYS).map(mix).collect(),
                    false => (0..KEYS_PER_THREAD)
                        .map(|i| mix(t * KEYS_PER_THREAD + scattered_key(i, KEYS_PER_THREAD)))
                        .collect(),
                })
                .collect();
            let tollgate = KeyedLimiter::builder(OPEN.tollgate()).build::<u64>();
            let governor = RateLimiter::keyed(OPEN.governor());
            let mutex = MutexMap::new(OPEN);
            let clock = tollgate.clock();
            for key in orders.iter().flatten() {
                assert!(tollgate.try_acquire(key, 1).is_ok());
                assert!(governor.check_key(key).is_ok());
                assert!(mutex.try_acquire(*key, clock.now_nanos(), 1));
            }
            threads_row(&mut group, "tollgate", &orders, |key| {
                assert!(black_box(&tollgate).try_acquire(&key, 1).is_ok())
            });
            threads_row(&mut group, "governor", &orders, |key| {
                assert!(black_box(&governor).check_key(&key).is_ok())
            });
            threads_row(&mut group, "mutex", &orders, |key| {
                assert!(black_box(&mutex).try_acquire(key, clock.now_nanos(), 1))
            });
        }
        group.finish();
    }
    churn_threads(c);
}

/// One row of a contention group: thread `t` walks `orders[t]` round and
/// round, deciding on each key.
fn threads_row(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    orders: &[Vec<u64>],
    decide: impl Fn(u64) + Sync,
) {
    let threads = orders.len();
    // One cursor per thread, each on its own cache line.
    let cursors: Vec<CachePadded<AtomicUsize>> = (0..threads)
        .map(|_| CachePadded::new(AtomicUsize::new(0)))
        .collect();
    group.bench_function(BenchmarkId::new(name, threads), |b| {
        b.iter_custom(|iters| {
            timed(threads, iters, |thread| {
                let (order, cursor) = (&orders[thread], &cursors[thread]);
                let i = cursor.load(Ordering::Relaxed);
                cursor.store(
                    if i + 1 == order.len() { 0 } else { i + 1 },
                    Ordering::Relaxed,
                );
                decide(order[i]);
            })
        })
    });
}

/// `keyed_churn_threads`; see [`keyed_threads`].
fn churn_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_churn_threads");
    for threads in CONTENTION_THREADS {
        // New keys: thread `t`'s `n`-th is `mix(n * 8 + t)`, distinct across
        // threads and runs.
        let created: Vec<CachePadded<AtomicU64>> = (0..threads)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        let new_key = |thread: usize| {
            let n = created[thread].fetch_add(1, Ordering::Relaxed);
            (mix(n * 8 + thread as u64), n)
        };
        let prune_every = CHURN_CAP.get() as u64 / threads as u64;
        let refused = AtomicU64::new(0);

        let tollgate = KeyedLimiter::builder(CHURN_QUOTA.tollgate())
            .max_keys(CHURN_CAP)
            .sweep_interval(Some(CHURN_TICK))
            .build::<u64>();
        group.bench_function(BenchmarkId::new("tollgate", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |thread| {
                    let (key, _) = new_key(thread);
                    if black_box(&tollgate).try_acquire(&key, 1).is_err() {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
        });
        churn_threads_report("tollgate", threads, &created, &refused);

        let governor = RateLimiter::keyed(CHURN_QUOTA.governor());
        group.bench_function(BenchmarkId::new("governor", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |thread| {
                    let (key, n) = new_key(thread);
                    if black_box(&governor).check_key(&key).is_err() {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    if n % prune_every == 0 {
                        governor.retain_recent();
                    }
                })
            })
        });
        churn_threads_report("governor", threads, &created, &refused);

        let mutex = MutexMap::new(CHURN_QUOTA);
        let clock = DefaultClock::new();
        group.bench_function(BenchmarkId::new("mutex", threads), |b| {
            b.iter_custom(|iters| {
                timed(threads, iters, |thread| {
                    let (key, n) = new_key(thread);
                    if !black_box(&mutex).try_acquire(key, clock.now_nanos(), 1) {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    if n % prune_every == 0 {
                        mutex.retain_recent(clock.now_nanos());
                    }
                })
            })
        });
        churn_threads_report("mutex", threads, &created, &refused);
    }
    group.finish();
}

/// Prints how many keys a `keyed_churn_threads` row created and how many of
/// their decisions were refused, and starts the counts again.
fn churn_threads_report(
    name: &str,
    threads: usize,
    created: &[CachePadded<AtomicU64>],
    refused: &AtomicU64,
) {
    let total: u64 = created.iter().map(|c| c.swap(0, Ordering::Relaxed)).sum();
    let refused = refused.swap(0, Ordering::Relaxed);
    if total > 0 {
        eprintln!("keyed_churn_threads/{name}/{threads}: {total} keys created, {refused} refused");
    }
}

/// A quota change ([`KeyedLimiter::set_quota`]) over a table of 100 000
/// and of 1 000 000 keys (one decision each, on the default clock), from a
/// quota in whole nanoseconds to one in thirds of a nanosecond and back, so
/// that every bucket's state is carried across tick units. A change walks
/// every shard once, write-locking one at a time: the time of a change
/// divided by the shard count (dashmap's default, four times the available
/// parallelism rounded up to a power of two) is the pause of one shard,
/// the longest a decision on one of its keys waits for the change.
fn keyed_set_quota(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_set_quota");
    group.sample_size(10);
    let quotas = [
        tollgate::Quota::per_second(1000).unwrap(),
        tollgate::Quota::per_second(3000).unwrap(),
    ];
    for keys in [MANY_KEYS, MILLION_KEYS] {
        let limiter = KeyedLimiter::builder(quotas[0]).build::<u64>();
        for i in 0..keys {
            assert!(limiter.try_acquire(&mix(i), 1).is_ok());
        }
        let changes = Cell::new(0usize);
        group.bench_function(BenchmarkId::new("tollgate", keys), |b| {
            b.iter(|| {
                changes.set(changes.get() + 1);
                black_box(&limiter).set_quota(quotas[changes.get() % 2]);
            })
        });
        assert_eq!(limiter.len() as u64, keys, "a change dropped keys");
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = keyed_hot, keyed_100k, keyed_1m, keyed_zipf, keyed_churn, keyed_threads, keyed_set_quota
}
criterion_main!(benches);
