//! Cost of one admission on a shared budget: from a local allowance, beside
//! one store call per request (the design without a local allowance).
//!
//! One group, `allowance`, measuring every row in the same run, each
//! admitting cost 1 on one key of a quota that never runs out:
//!
//! - `local_allowance/<store>`: `LocalAllowance::try_acquire`, one
//!   compare-and-swap on the local pool of leased tokens; the store is
//!   called only by the background refill, once per lease.
//! - `store_per_request/<store>`: one `Store::acquire` per admission,
//!   awaited.
//!
//! Stores: `in_process` (`LocalStore`: a keyed-limiter lookup and a
//! bucket update, no I/O) and `redis` (`RedisStore` on a private
//! `redis-server` on loopback, started for the run without persistence: one
//! round trip and one Lua script per call). Without `redis-server` the redis
//! rows are skipped with a notice on stderr, unless `CI` is set, where the
//! run fails instead.
//!
//! The ratio `store_per_request / local_allowance` of one store is what the
//! local allowance saves per admission: the store call's cost against one
//! compare-and-swap. Over Redis the per-request row is mostly the loopback
//! round trip; a server across a network adds its latency to that row only.
//! After each `local_allowance` row, its store round trips per 1000
//! admissions are printed to stderr (the per-request rows make 1000).
//!
//! Every admission is checked inside the loop (a refusal panics), and each
//! routine gets its allowance or store through `black_box`. Leases have a
//! fixed size, so the rows measure the admission rather than the lease
//! sizing: a tight loop asks far more than any real node, and a lease sized
//! to its demand by the default bounds would run dry between round trips.
//!
//! Run with `cargo bench -p tollgate-benches --bench allowance`; see
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use tokio::runtime::Runtime;
use tollgate::Quota;
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, LocalAllowance, LocalStore, RedisStore, Store,
};

mod common;
use redis_server::RedisServer;
use tollgate_test_support::redis_server;

const KEY: &str = "customer-7";

/// A trillion tokens: hours of the tightest loop here, so the shared budget
/// never refuses during a run. Refilled at one per microsecond, an interval
/// the Redis store represents exactly.
fn quota() -> Quota {
    Quota::new(1_000_000_000_000, 1_000_000, Duration::from_secs(1))
        .expect("a trillion tokens at 1/µs is a valid quota")
}

/// Tokens per lease. A refill starts when the pool falls below half of it:
/// 25 million admissions, over 100 ms of the loop, for one round trip to
/// land, even on a loaded machine.
const LEASE: u64 = 50_000_000;

/// Bound of every store call: generous, because a refill that times out on
/// a loaded machine would leave the pool to run dry.
const TIMEOUT: Duration = Duration::from_secs(1);

fn allowance_config() -> AllowanceConfig {
    AllowanceConfig {
        min_lease: LEASE,
        max_lease: LEASE,
        // Nothing goes back to the store mid-run, whatever pauses the
        // harness takes between samples.
        idle_return: None,
        timeout: TIMEOUT,
        ..AllowanceConfig::new(FailurePolicy::Closed)
    }
}

/// Benchmarks both designs over `store`, named `*/{name}`.
fn store_rows<S: Store>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    name: &str,
    store: Arc<S>,
) {
    let node = {
        let _inside = runtime.enter();
        LocalAllowance::new(Arc::clone(&store), KEY, allowance_config())
            .expect("inside a runtime, with valid lease bounds")
    };
    // Warmed before measuring, as a server warms it before serving: an empty
    // pool refuses its first call.
    let warmed = runtime.block_on(node.refill()).expect("the first lease");
    assert_eq!(warmed, LEASE, "the store granted less than a lease");
    let node = &node;
    group.bench_function(format!("local_allowance/{name}"), |b| {
        b.to_async(runtime).iter(|| async move {
            black_box(node)
                .try_acquire(1)
                .expect("the local allowance refused")
        })
    });
    // Admissions are the tokens leased less those still pooled (none were
    // given back: no idle return); a refill landing just now can blur this
    // by one lease.
    let stats = node.stats();
    let admitted = stats.leased.saturating_sub(stats.pooled);
    eprintln!(
        "local_allowance/{name}: {} store round trips for {admitted} admissions, \
         {:.6} per 1000 (warm-up included)",
        stats.leases,
        1000.0 * stats.leases as f64 / admitted.max(1) as f64,
    );

    let store = &*store;
    group.bench_function(format!("store_per_request/{name}"), |b| {
        b.to_async(runtime).iter(|| async move {
            let grant = black_box(store)
                .acquire(KEY, 1)
                .await
                .expect("the store call failed");
            assert_eq!(grant.tokens, 1, "the store refused");
            grant
        })
    });
}

fn allowance(c: &mut Criterion) {
    // Both rows run under criterion's async bencher, which drives each
    // sample's loop in one `block_on` on this thread. That loop never
    // yields (an admission from the pool is ready at once), so on a
    // current-thread runtime the refills it spawns would never run: the
    // pool would run dry after its first lease and the row would measure
    // refusals. With one worker, refills and the Redis connection's I/O run
    // there beside the loop, as on a server's other workers: the hot path
    // a handler sees. The async bencher, rather than a `block_on` per call,
    // lets the per-request row await its call as a handler would, at the
    // same harness cost as the allowance row.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("allowance");

    store_rows(
        &mut group,
        &runtime,
        "in_process",
        Arc::new(LocalStore::new(quota())),
    );

    // `start` prints why it skips, or panics when `CI` is set.
    if let Some(server) =
        RedisServer::start("allowance: local_allowance/redis and store_per_request/redis")
    {
        let store = runtime
            .block_on(RedisStore::connect(
                &server.url(),
                quota(),
                "bench:",
                TIMEOUT,
            ))
            .expect("connect to the private redis-server");
        store_rows(&mut group, &runtime, "redis", Arc::new(store));
    }

    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = allowance
}
criterion_main!(benches);
