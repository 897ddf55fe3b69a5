//! Defects found by the adversarial review of the fleet-wide shared budgets
//! (issue 12): one test per finding, each named after the promise it
//! defends.

#[cfg(feature = "redis")]
use std::time::Duration;

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

#[cfg(feature = "redis")]
#[path = "support/redis_cluster.rs"]
mod redis_cluster;

#[cfg(feature = "redis")]
use redis_cluster::RedisCluster;

#[cfg(feature = "redis")]
use tollgate::Quota;

/// Bursts of `capacity`, one token back an hour: with the clock frozen,
/// exactly `capacity` per key.
#[cfg(feature = "redis")]
fn hourly(capacity: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_secs(3600)).unwrap()
}

/// `RedisConfig`'s `Debug` never shows a password, however the URL carries
/// it: a `redis+unix://` URL takes its credentials from the query
/// (`?user=...&pass=...`), and a configuration is the kind of value that
/// ends up in logs.
#[cfg(feature = "redis")]
#[test]
fn debug_of_a_redis_config_hides_a_password_given_in_the_url_query() {
    use tollgate::shared::RedisConfig;

    for url in [
        "redis+unix:///run/redis.sock?db=0&user=limiter&pass=hunter2",
        "unix:///run/redis.sock?pass=hunter2",
        "redis://limiter:hunter2@10.0.0.1:6379/0",
        "rediss://:hunter2@cache.internal:6380/#hunter2",
    ] {
        let shown = format!("{:?}", RedisConfig::node(url));
        assert!(!shown.contains("hunter2"), "{url} shows as {shown}");
        let shown = format!("{:?}", RedisConfig::cluster([url, url]));
        assert!(!shown.contains("hunter2"), "{url} shows as {shown}");
    }
}

/// A cluster is reached through any of its seeds: `RedisConfig::cluster`
/// takes several so that a node can start while one of them is down (a
/// master restarting, a seed list naming a node since removed). The check
/// made before connecting must not make the first seed a single point of
/// failure.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_connects_while_its_first_seed_is_down() {
    use tollgate::shared::{RedisConfig, RedisStore, Store};

    let test = "a_cluster_store_connects_while_its_first_seed_is_down";
    let Some(cluster) = RedisCluster::start(test) else {
        return;
    };
    // A port nobody listens on: bound, then released.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut seeds = vec![format!("redis://127.0.0.1:{dead}/")];
    seeds.extend(cluster.urls());
    let config = RedisConfig::cluster(seeds).timeout(Duration::from_millis(500));
    let store = RedisStore::connect_with(&config, hourly(3), "rl:seeds:")
        .await
        .expect("the cluster is up: two of its three seeds answer");
    assert_eq!(store.acquire("alice", 2).await.unwrap().tokens, 2);
}
