//! Cost of one decision on a keyed shared budget, hot and cold, beside a
//! plain token bucket, a single-key local allowance and one store call per
//! request.
//!
//! One group, `keyed_allowance`, every row in the same run, each admitting
//! cost 1 on a quota that never runs out:
//!
//! - `token_bucket`: `TokenBucket::try_acquire` on the default clock, the
//!   in-process baseline (the target: a hot key within 2x of it).
//! - `local_allowance`: `LocalAllowance::try_acquire`, one key's pool.
//! - `keyed_hot`: `KeyedAllowance::try_acquire` on a hot key: the key's
//!   table lookup, then its pool's compare-and-swap.
//! - `keyed_cold`: `KeyedAllowance::acquire` on a cold key: one store
//!   decision (a task, the store call, the one-shot reply), awaited.
//! - `store_per_request`: one `Store::acquire`, awaited.
//!
//! The two awaited rows run their calls in a task on the runtime's worker,
//! as a request handler does.
//!
//! The store is the in-process `LocalStore` (no I/O): the cold rows are
//! the keyed allowance's own overhead around a decision; over Redis a
//! round trip adds the same to both. Every admission is checked inside the
//! loop (a refusal panics).
//!
//! Run with `cargo bench -p tollgate-benches --bench keyed_allowance`; see
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tokio::runtime::Runtime;
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, LocalAllowance,
    LocalStore, Store,
};
use tollgate::{Limit, Quota, TokenBucket};

mod common;

const KEY: &str = "customer-7";

/// A trillion tokens refilled at one per microsecond: a run never exhausts
/// it.
fn quota() -> Quota {
    Quota::new(1_000_000_000_000, 1_000_000, Duration::from_secs(1))
        .expect("a trillion tokens at 1/µs is a valid quota")
}

/// Fixed leases, large enough that a refill (on the runtime's worker)
/// lands long before a pool runs dry, and kept: the rows measure the
/// admission, not the lease sizing.
fn leases() -> AllowanceConfig {
    const LEASE: u64 = 50_000_000;
    AllowanceConfig {
        min_lease: LEASE,
        max_lease: LEASE,
        idle_return: None,
        timeout: Duration::from_secs(1),
        ..AllowanceConfig::new(FailurePolicy::Closed)
    }
}

/// A keyed allowance whose keys switch at the given demand (tokens a
/// second), sampled every millisecond.
fn keyed(
    runtime: &Runtime,
    store: &Arc<LocalStore>,
    hot_at: u32,
    cold_below: u32,
) -> KeyedAllowance<LocalStore> {
    let _inside = runtime.enter();
    let config = KeyedAllowanceConfig {
        allowance: leases(),
        hot_at,
        cold_below,
        sample_every: Duration::from_millis(1),
        ..KeyedAllowanceConfig::new(FailurePolicy::Closed)
    };
    KeyedAllowance::new(Arc::clone(store), config).expect("a valid configuration")
}

fn keyed_allowance(c: &mut Criterion) {
    // One worker runs refills, promotions and cold calls' tasks while the
    // synchronous rows loop on this thread.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("a tokio runtime");
    let store = Arc::new(LocalStore::new(quota()));
    let mut group = c.benchmark_group("keyed_allowance");

    let bucket = TokenBucket::new(quota());
    group.bench_function("token_bucket", |b| {
        b.iter(|| {
            black_box(&bucket)
                .try_acquire(1)
                .expect("the bucket refused")
        })
    });

    let single = {
        let _inside = runtime.enter();
        LocalAllowance::new(Arc::clone(&store), "single", leases()).expect("inside a runtime")
    };
    runtime.block_on(single.refill()).expect("the first lease");
    group.bench_function("local_allowance", |b| {
        b.iter(|| black_box(&single).try_acquire(1).expect("the pool refused"))
    });

    // Hot at any demand at all: a few requests make the key hot.
    let hot = keyed(&runtime, &store, 1, 0);
    runtime.block_on(async {
        while !(hot.is_hot(KEY) && hot.pooled(KEY) > 0) {
            hot.acquire(KEY, 1, Duration::ZERO)
                .await
                .expect("the store refused");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    group.bench_function("keyed_hot", |b| {
        b.iter(|| {
            black_box(&hot)
                .try_acquire(KEY, 1)
                .expect("the hot key refused")
        })
    });
    assert!(hot.is_hot(KEY), "the key went cold during the run");

    // Never hot, whatever the demand.
    let cold = Arc::new(keyed(&runtime, &store, u32::MAX, u32::MAX - 1));
    group.bench_function("keyed_cold", |b| {
        b.iter_custom(|iters| {
            let cold = Arc::clone(&cold);
            on_a_worker(&runtime, iters, move || {
                let cold = Arc::clone(&cold);
                async move {
                    black_box(&cold)
                        .acquire(KEY, 1, Duration::ZERO)
                        .await
                        .expect("the store refused");
                }
            })
        })
    });

    group.bench_function("store_per_request", |b| {
        b.iter_custom(|iters| {
            let store = Arc::clone(&store);
            on_a_worker(&runtime, iters, move || {
                let store = Arc::clone(&store);
                async move {
                    let grant = black_box(&store)
                        .acquire(KEY, 1)
                        .await
                        .expect("the store call failed");
                    assert_eq!(grant.tokens, 1, "the store refused");
                }
            })
        })
    });
    group.finish();
}

/// Times `iters` awaited calls of `call` inside one task on the runtime's
/// worker, as a server's request handler makes them (criterion's async
/// bencher would drive them from this thread instead, adding a wake-up of
/// the worker to every task a call spawns).
fn on_a_worker<F, Fut>(runtime: &Runtime, iters: u64, call: F) -> Duration
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    runtime
        .block_on(runtime.spawn(async move {
            let start = std::time::Instant::now();
            for _ in 0..iters {
                call().await;
            }
            start.elapsed()
        }))
        .expect("the measuring task panicked")
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = keyed_allowance
}
criterion_main!(benches);
