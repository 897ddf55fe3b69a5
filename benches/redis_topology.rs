//! `RedisStore` on one server beside a three-master Redis Cluster, all on
//! loopback, started for the run (private ports, no persistence).
//!
//! One group, `redis_topology`, every row in the same run:
//!
//! - `acquire/<topology>`: one `Store::acquire` of one token, awaited: one
//!   round trip and one script.
//! - `acquire_many_100/<topology>`: `Store::acquire_many` for 100 keys:
//!   one pipeline on one server; on the cluster, 100 calls at once over the
//!   three masters' multiplexed connections.
//! - `sequential_100/<topology>`: the same 100 keys, one awaited
//!   `acquire` after the other (what `acquire_many` replaces).
//!
//! Topologies: `node` (one `redis-server`) and `cluster` (three masters
//! joined by `redis-cli --cluster create`, reached through the cluster
//! client). Without `redis-server` or `redis-cli` the rows are skipped with
//! a notice on stderr, unless `CI` is set, where the run fails instead.
//!
//! Every call's grant is checked inside the loop (a refusal or an error
//! panics). Run with `cargo bench -p tollgate-benches --bench redis_topology`;
//! see `docs/benchmarks.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use tokio::runtime::Runtime;
use tollgate::Quota;
use tollgate::shared::{RedisConfig, RedisStore, Store};

mod common;
use tollgate_test_support::redis_cluster;
use tollgate_test_support::redis_server;

use redis_cluster::RedisCluster;
use redis_server::RedisServer;

/// A trillion tokens refilled at one per microsecond: no row ever runs a
/// key dry.
fn quota() -> Quota {
    Quota::new(1_000_000_000_000, 1_000_000, Duration::from_secs(1))
        .expect("a trillion tokens at 1/µs is a valid quota")
}

/// Generous, so that a loaded machine slows a row instead of failing it.
const TIMEOUT: Duration = Duration::from_secs(2);
const KEYS: usize = 100;

fn rows(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    topology: &str,
    config: RedisConfig,
) {
    let store = runtime
        .block_on(RedisStore::connect_with(
            &config.timeout(TIMEOUT),
            quota(),
            "bench:",
        ))
        .expect("connect to the private servers");
    let names: Vec<String> = (0..KEYS).map(|n| format!("tenant-{n}")).collect();
    let requests: Vec<(&str, u64)> = names.iter().map(|k| (k.as_str(), 1)).collect();
    let (store, requests) = (&store, &requests[..]);

    group.bench_function(format!("acquire/{topology}"), |b| {
        b.to_async(runtime).iter(|| async move {
            let grant = black_box(store)
                .acquire("tenant-0", 1)
                .await
                .expect("acquire");
            assert_eq!(grant.tokens, 1, "the store refused");
        })
    });
    group.bench_function(format!("acquire_many_{KEYS}/{topology}"), |b| {
        b.to_async(runtime).iter(|| async move {
            for grant in black_box(store).acquire_many(requests).await {
                assert_eq!(grant.expect("acquire_many").tokens, 1, "the store refused");
            }
        })
    });
    group.bench_function(format!("sequential_{KEYS}/{topology}"), |b| {
        b.to_async(runtime).iter(|| async move {
            for &(key, want) in requests {
                let grant = black_box(store).acquire(key, want).await.expect("acquire");
                assert_eq!(grant.tokens, 1, "the store refused");
            }
        })
    });
}

fn redis_topology(c: &mut Criterion) {
    // One worker for the connections' I/O beside the bench thread, as in
    // the `allowance` bench.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("redis_topology");
    // `start` prints why it skips, or panics when `CI` is set.
    if let Some(server) = RedisServer::start("redis_topology: node rows") {
        rows(
            &mut group,
            &runtime,
            "node",
            RedisConfig::node(server.url()),
        );
    }
    if let Some(cluster) = RedisCluster::start("redis_topology: cluster rows") {
        rows(
            &mut group,
            &runtime,
            "cluster",
            RedisConfig::cluster(cluster.urls()),
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = redis_topology
}
criterion_main!(benches);
