//! `RedisStore` on a real three-master Redis Cluster, started and stopped
//! by each test (`tests/support/src/redis_cluster.rs`): keys in their own hash
//! tag's slot, the bound per key across masters, a slot migrated during a
//! run (ASK, then MOVED) without a lost or doubled debit, and a killed
//! master (typed errors for its keys only, the failure policy, service
//! again once it is back).

use tollgate_test_support::redis_cluster;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use redis_cluster::RedisCluster;
use tollgate::Quota;
use tollgate::shared::BudgetError;
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, LocalAllowance, RedisConfig, RedisStore, RedisStoreError,
    Source, Store,
};

const TIMEOUT: Duration = Duration::from_millis(500);
/// Ten tokens, one refilled an hour: nothing refills during a test, so
/// every grant is a debit that stays visible.
const CAPACITY: u64 = 10;

fn quota() -> Quota {
    Quota::new(CAPACITY, 1, Duration::from_secs(3600)).unwrap()
}

async fn store(cluster: &RedisCluster, prefix: &str) -> RedisStore {
    let config = RedisConfig::cluster(cluster.urls()).timeout(TIMEOUT);
    RedisStore::connect_with(&config, quota(), prefix)
        .await
        .expect("connect to the test cluster")
}

fn slot(cluster: &RedisCluster, name: &str) -> u16 {
    cluster
        .cli(0, &["CLUSTER", "KEYSLOT", name])
        .parse()
        .expect("a slot number")
}

/// Keys whose buckets live on each master: `keys[i]` on node `i`.
fn keys_by_master(
    cluster: &RedisCluster,
    store: &RedisStore,
    per_master: usize,
) -> Vec<Vec<String>> {
    let mut keys = vec![Vec::new(), Vec::new(), Vec::new()];
    for n in 0.. {
        if keys.iter().all(|k: &Vec<String>| k.len() >= per_master) {
            break;
        }
        let key = format!("user-{n}");
        let owner = cluster.owner(slot(cluster, &store.redis_key(&key)));
        if keys[owner].len() < per_master {
            keys[owner].push(key);
        }
    }
    keys
}

/// Each key's bucket is one Redis key in the slot of its own hash tag,
/// whatever the prefix and whatever braces the key holds, on the master
/// that serves that slot; the keys spread over all three masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bucket_lives_in_its_own_hash_tag_slot_on_its_master() {
    let Some(cluster) =
        RedisCluster::start("each_bucket_lives_in_its_own_hash_tag_slot_on_its_master")
    else {
        return;
    };
    let other_prefix = store(&cluster, "rl:other:").await;
    let store = store(&cluster, "rl:a:").await;
    let keys = [
        "alice",
        "",
        "{",
        "}",
        "{}",
        "x}{victim",
        r"a\b",
        "é{ü}",
        "user-17",
        "{user-17}",
    ];
    let mut masters = BTreeSet::new();
    for key in keys {
        let name = store.redis_key(key);
        let slot_here = slot(&cluster, &name);
        if !key.is_empty() {
            // The slot follows the key alone, never the prefix.
            assert_eq!(
                slot_here,
                slot(&cluster, &other_prefix.redis_key(key)),
                "{key:?}"
            );
        }
        let grant = store.acquire(key, 3).await.expect("acquire");
        assert_eq!(grant.tokens, 3, "{key:?}");
        let owner = cluster.owner(slot_here);
        masters.insert(owner);
        assert_eq!(
            cluster.cli(owner, &["EXISTS", &name]),
            "1",
            "{key:?} on node {owner}"
        );
    }
    // `x}{victim` and `{user-17}` did not land in another key's bucket.
    assert_eq!(
        store.acquire("user-17", CAPACITY).await.unwrap().tokens,
        CAPACITY - 3
    );
    assert!(
        masters.len() >= 2,
        "keys spread over the masters: {masters:?}"
    );
}

/// 150 keys over three masters, asked for more than their capacity in one
/// batch and then again, by racing single calls from four connections
/// after a `SCRIPT FLUSH` on every master: every key grants exactly `B` in
/// all, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_on_many_keys_across_masters_hold_the_bound() {
    let Some(cluster) = RedisCluster::start("grants_on_many_keys_across_masters_hold_the_bound")
    else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(Arc::new(store(&cluster, "rl:many:").await));
    }
    // One more on a cluster connection built by hand.
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let connection = client.get_async_connection().await.unwrap();
    let by_hand = RedisStore::new(connection, quota(), "rl:many:", TIMEOUT).unwrap();
    stores.push(Arc::new(by_hand));
    let names: Vec<String> = (0..150).map(|n| format!("tenant-{n}")).collect();
    let requests: Vec<(&str, u64)> = names.iter().map(|k| (k.as_str(), 4)).collect();
    let mut granted = vec![0u64; names.len()];
    for grant in stores[0]
        .acquire_many(&requests)
        .await
        .into_iter()
        .enumerate()
    {
        granted[grant.0] += grant.1.expect("a batch on a healthy cluster").tokens;
    }
    assert!(granted.iter().all(|&g| g == 4), "{granted:?}");
    // Every master forgets the scripts: each call answers NOSCRIPT (it did
    // not run), loads the script and runs once.
    for node in 0..3 {
        cluster.cli(node, &["SCRIPT", "FLUSH"]);
    }
    // Four connections race single calls for what is left.
    let mut tasks = Vec::new();
    for store in &stores {
        let store = Arc::clone(store);
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = vec![0u64; names.len()];
            for (i, key) in names.iter().enumerate() {
                got[i] += store.acquire(key, 3).await.expect("acquire").tokens;
            }
            got
        }));
    }
    for task in tasks {
        for (i, got) in task.await.unwrap().into_iter().enumerate() {
            granted[i] += got;
        }
    }
    // A last batch finds every bucket empty, with an exact wait.
    for grant in stores[1].acquire_many(&requests).await {
        let grant = grant.expect("a batch on a healthy cluster");
        assert_eq!(grant.tokens, 0);
        assert!(grant.retry_after > Duration::ZERO);
    }
    assert!(granted.iter().all(|&g| g == CAPACITY), "{granted:?}");
}

/// A key's slot moves from one master to another while a run acquires on
/// it: before the migration (source), while it is migrating with the key
/// still on the source, after `MIGRATE` (the source answers ASK: the call
/// runs on the target), after `SETSLOT NODE` (MOVED). The key's state
/// afterwards is exactly `B` minus what was granted: no debit was lost or
/// applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_during_a_run_counts_every_debit_exactly_once() {
    let Some(cluster) =
        RedisCluster::start("a_slot_moved_during_a_run_counts_every_debit_exactly_once")
    else {
        return;
    };
    let quota = Quota::new(1000, 1, Duration::from_secs(3600)).unwrap();
    let config = RedisConfig::cluster(cluster.urls()).timeout(Duration::from_secs(5));
    let store = RedisStore::connect_with(&config, quota, "rl:move:")
        .await
        .unwrap();
    let key = "moving";
    let name = store.redis_key(key);
    let moved_slot = slot(&cluster, &name);
    let source = cluster.owner(moved_slot);
    let target = (source + 1) % 3;
    let bystander = (source + 2) % 3;
    // Another key elsewhere, batched with the moving one.
    let other = (0..)
        .map(|n| format!("still-{n}"))
        .find(|k| cluster.owner(slot(&cluster, &store.redis_key(k))) == bystander)
        .unwrap();
    let mut granted = 0;
    let mut other_granted = 0;
    let run = async |granted: &mut u64, other_granted: &mut u64| {
        for _ in 0..5 {
            *granted += store.acquire(key, 3).await.expect("acquire").tokens;
            let batch = store.acquire_many(&[(key, 2), (&other, 1)]).await;
            *granted += batch[0].as_ref().expect("batched acquire").tokens;
            *other_granted += batch[1].as_ref().expect("batched acquire").tokens;
        }
    };
    run(&mut granted, &mut other_granted).await;

    let (source_id, target_id) = (cluster.id(source), cluster.id(target));
    let slot_text = moved_slot.to_string();
    cluster.cli(
        target,
        &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &source_id],
    );
    cluster.cli(
        source,
        &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &target_id],
    );
    // Migrating, the key still on the source: the source runs the script.
    run(&mut granted, &mut other_granted).await;
    assert_eq!(cluster.cli(source, &["EXISTS", &name]), "1");

    let target_port = cluster.urls()[target]
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let migrated = cluster.cli(
        source,
        &["MIGRATE", "127.0.0.1", &target_port, &name, "0", "5000"],
    );
    assert_eq!(migrated, "OK");
    // The key is on the target, the slot still the source's: ASK.
    assert!(cluster.cli(source, &["EXISTS", &name]).starts_with("ASK "));
    run(&mut granted, &mut other_granted).await;

    for node in [target, source, bystander] {
        cluster.cli(
            node,
            &["CLUSTER", "SETSLOT", &slot_text, "NODE", &target_id],
        );
    }
    // The slot is the target's: MOVED, then the refreshed map.
    run(&mut granted, &mut other_granted).await;
    assert_eq!(cluster.owner(moved_slot), target);

    assert_eq!(granted, 4 * 5 * (3 + 2));
    // What is left is exactly what was not granted, on the target.
    let rest = store.acquire(key, 1000).await.unwrap();
    assert_eq!(rest.tokens, 1000 - granted, "every debit counted once");
    assert_eq!(cluster.cli(target, &["EXISTS", &name]), "1");
    let rest = store.acquire(&other, 1000).await.unwrap();
    assert_eq!(rest.tokens, 1000 - other_granted);
}

/// A master is killed: its keys fail with a typed error within the
/// timeout (a closed allowance refuses them as `StoreUnavailable`) while
/// keys on the other masters are still served, in single calls and in one
/// batch beside the failing ones. Once the master is back (empty: no
/// persistence) its keys are served again, from full buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_fails_only_its_keys_and_service_resumes_when_it_returns() {
    let Some(mut cluster) = RedisCluster::start(
        "a_killed_master_fails_only_its_keys_and_service_resumes_when_it_returns",
    ) else {
        return;
    };
    let store = Arc::new(store(&cluster, "rl:kill:").await);
    let keys = keys_by_master(&cluster, &store, 2);
    let (dead, alive) = (&keys[0][0], &keys[1][0]);
    assert_eq!(store.acquire(dead, 4).await.unwrap().tokens, 4);
    assert_eq!(store.acquire(alive, 4).await.unwrap().tokens, 4);

    cluster.node(0).kill();

    let failed = store.acquire(dead, 1).await;
    assert!(
        matches!(
            failed,
            Err(RedisStoreError::Timeout(_) | RedisStoreError::Redis(_))
        ),
        "{failed:?}"
    );
    assert_eq!(
        store
            .acquire(alive, 1)
            .await
            .expect("another master")
            .tokens,
        1
    );
    let batch = store
        .acquire_many(&[(dead.as_str(), 1), (alive.as_str(), 1)])
        .await;
    assert!(batch[0].is_err(), "{:?}", batch[0]);
    assert_eq!(batch[1].as_ref().expect("another master").tokens, 1);

    let config = AllowanceConfig {
        max_lease: 5,
        idle_return: None,
        timeout: TIMEOUT,
        ..AllowanceConfig::new(FailurePolicy::Closed)
    };
    let closed = LocalAllowance::new(Arc::clone(&store), dead, config).unwrap();
    assert!(closed.refill().await.is_err());
    assert_eq!(closed.try_acquire(1), Err(BudgetError::StoreUnavailable));
    let served = LocalAllowance::new(Arc::clone(&store), &keys[1][1], config).unwrap();
    assert!(served.refill().await.expect("another master") >= 1);
    assert_eq!(served.try_acquire(1), Ok(Source::Lease));

    cluster
        .node(0)
        .restart()
        .expect("restart the master on its port");
    cluster.wait_until_ok().expect("the cluster heals");
    // The master kept its slots (nodes.conf) but not its data: the key is
    // a full bucket again, once the client has reconnected.
    let mut back = None;
    for _ in 0..100 {
        if let Ok(grant) = store.acquire(dead, CAPACITY).await {
            back = Some(grant.tokens);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        back,
        Some(CAPACITY),
        "the restarted master forgot the debits"
    );
    assert_eq!(
        store.acquire(alive, CAPACITY).await.unwrap().tokens,
        CAPACITY - 4 - 1 - 1,
        "the live master kept its debits"
    );
}

/// A cluster is reached through any of its seeds: `RedisConfig::cluster`
/// takes several so that a node can start while one of them is down (a
/// master restarting, a seed list naming a node since removed). The check
/// made before connecting must not make the first seed a single point of
/// failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_connects_while_its_first_seed_is_down() {
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
    let store = RedisStore::connect_with(
        &config,
        Quota::new(3, 1, Duration::from_secs(3600)).unwrap(),
        "rl:seeds:",
    )
    .await
    .expect("the cluster is up: two of its three seeds answer");
    assert_eq!(store.acquire("alice", 2).await.unwrap().tokens, 2);
}
