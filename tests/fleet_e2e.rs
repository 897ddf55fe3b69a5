//! The fleet end to end: three server processes (this test binary, started
//! again as a node) share per-API-key budgets through a private Redis, and
//! a client drives many keys across them. No key may be admitted more than
//! `B + r·t` over the run; with 10 an hour and a run of seconds, that is
//! `B` exactly. The servers and the client are those of
//! `examples/fleet`, so the example is what is tested.
//!
//! A `harness = false` target: `main` is the end-to-end check, or, when
//! [`NODE_REDIS`] is set, one fleet node. (A node as an ignored test of a
//! harnessed binary would report a skipped test on every run.)

#[path = "../examples/fleet/client.rs"]
mod client;
#[path = "../examples/fleet/nodes.rs"]
mod nodes;
#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "../examples/fleet/server.rs"]
mod server;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use redis_server::RedisServer;
use tollgate::shared::RedisStore;

/// The Redis a node process serves from, set by the test for its nodes.
const NODE_REDIS: &str = "TOLLGATE_FLEET_NODE_REDIS";
/// The Redis key prefix every node of one run shares.
const PREFIX: &str = "fleet-e2e:";
const NODES: usize = 3;
const KEYS: usize = 120;
/// Requests per key: more than twice the budget, so every key runs out.
const PER_KEY: usize = 25;

fn main() {
    match std::env::var(NODE_REDIS) {
        Ok(url) => fleet_node(&url),
        Err(_) => fleet_admits_no_key_more_than_its_bound(),
    }
}

/// One fleet node, serving from the Redis at `url` until its stdin closes.
fn fleet_node(url: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(async {
            let store = RedisStore::connect(
                url,
                server::per_key_quota(),
                PREFIX,
                Duration::from_millis(500),
            )
            .await?;
            nodes::run(Arc::new(store)).await
        })
        .unwrap();
}

/// Without a `redis-server` this prints why and passes on a developer's
/// machine, and panics (a non-zero exit, with the reason) under `CI`.
fn fleet_admits_no_key_more_than_its_bound() {
    let Some(redis) = RedisServer::start("fleet_admits_no_key_more_than_its_bound") else {
        return;
    };
    let program = std::env::current_exe().unwrap();
    let fleet: Vec<nodes::Node> = (0..NODES)
        .map(|_| {
            let mut command = Command::new(&program);
            command.env(NODE_REDIS, redis.url());
            nodes::Node::spawn(command).expect("a fleet node starts")
        })
        .collect();
    let urls: Vec<String> = fleet.iter().map(|node| node.url.clone()).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tally = runtime
        .block_on(client::drive(&urls, KEYS, PER_KEY))
        .unwrap();
    let quota = server::per_key_quota();
    tally.print(&quota);
    assert_eq!(tally.keys.len(), KEYS);
    assert_eq!(tally.over_bound(&quota), Vec::<&client::KeyTally>::new());
    for key in &tally.keys {
        // Only 200 and 429: no store failure, no error of the layer's.
        assert_eq!(key.other, 0, "{key:?}");
        assert_eq!(key.admitted + key.refused, PER_KEY as u64, "{key:?}");
        // The budget is neither lost nor out of reach: the fleet admits
        // something for every key, and refuses the rest.
        assert!(key.admitted >= 1 && key.refused >= 1, "{key:?}");
    }
    println!("fleet_e2e: {KEYS} keys across {NODES} nodes, none over its bound");
}
