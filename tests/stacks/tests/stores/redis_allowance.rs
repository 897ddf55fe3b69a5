//! Local allowances as separate nodes over one key of a real Redis server
//! (started by the test, private port, no persistence): the shared bound,
//! and each failure policy while the server is killed and restarted.

use tollgate_test_support::redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_server::RedisServer;
use tollgate::shared::BudgetError;
use tollgate::shared::{AllowanceConfig, FailurePolicy, LocalAllowance, RedisStore, Source};
use tollgate::{AcquireError, Quota};

use common::Envelope;
use tollgate_test_support::common;

const KEY: &str = "customer-7";
const TIMEOUT: Duration = Duration::from_millis(200);

/// A node: its own connection (store) and its own allowance.
async fn node(
    server: &RedisServer,
    quota: Quota,
    policy: FailurePolicy,
) -> LocalAllowance<RedisStore> {
    let store = RedisStore::connect(&server.url(), quota, "test:", TIMEOUT)
        .await
        .expect("connect to the test server");
    let config = AllowanceConfig {
        max_lease: 200,
        idle_return: None,
        timeout: TIMEOUT,
        ..AllowanceConfig::new(policy)
    };
    LocalAllowance::new(Arc::new(store), KEY, config).expect("inside a runtime")
}

/// Four nodes hammer one key: the total admitted stays within `B + r·t`,
/// `t` measured on the server's clock around the run, and the nodes made
/// far fewer round trips than admissions. Nothing is timed: they run for
/// at least half a second and on until they have admitted the burst twice
/// over (the store's refills reached them), failing loudly if that has not
/// happened in 60 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_a_key_in_redis_stay_within_the_envelope() {
    let Some(server) = RedisServer::start("nodes_sharing_a_key_in_redis_stay_within_the_envelope")
    else {
        return;
    };
    let (capacity, rate) = (200, 4_000);
    let quota = Quota::new(capacity, rate, Duration::from_secs(1)).unwrap();
    let mut nodes = Vec::new();
    for _ in 0..4 {
        nodes.push(Arc::new(node(&server, quota, FailurePolicy::Closed).await));
    }
    let total = Arc::new(AtomicU64::new(0));
    let floor = tokio::time::Instant::now() + Duration::from_millis(500);
    let ceiling = tokio::time::Instant::now() + Duration::from_secs(60);
    let start = server.time_micros();
    let tasks: Vec<_> = nodes
        .iter()
        .map(|node| {
            let (node, total) = (Arc::clone(node), Arc::clone(&total));
            tokio::spawn(async move {
                let mut admitted = 0u64;
                loop {
                    let now = tokio::time::Instant::now();
                    let shown = total.load(Ordering::Relaxed) >= 2 * capacity;
                    if now >= ceiling || (now >= floor && shown) {
                        break;
                    }
                    if node.try_acquire(1).is_ok() {
                        admitted += 1;
                        total.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    let elapsed_ns = (server.time_micros() - start) * 1_000;
    let envelope = Envelope {
        capacity,
        tokens: rate,
        period_ns: 1_000_000_000,
    };
    assert!(
        envelope.admits(u128::from(admitted), elapsed_ns),
        "{admitted} in {elapsed_ns} ns"
    );
    assert!(
        admitted >= 2 * capacity,
        "in 60 s the nodes admitted {admitted}, not twice the burst of {capacity}"
    );
    let round_trips: u64 = nodes.iter().map(|n| n.stats().leases).sum();
    assert!(
        round_trips * 10 < admitted,
        "{round_trips} round trips for {admitted}"
    );
}

/// Kills the server once the nodes hold some tokens, then restarts it: each
/// policy behaves as documented while it is down, nothing panics, and
/// service resumes once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_policy_holds_while_the_server_is_down() {
    let Some(mut server) = RedisServer::start("each_failure_policy_holds_while_the_server_is_down")
    else {
        return;
    };
    let quota = Quota::per_second(1_000).unwrap();
    let fallback = Quota::new(3, 1, Duration::from_secs(3600)).unwrap();
    let closed = node(&server, quota, FailurePolicy::Closed).await;
    let open = node(&server, quota, FailurePolicy::Open).await;
    let local = node(&server, quota, FailurePolicy::Fallback(fallback)).await;
    for node in [&closed, &open, &local] {
        assert!(node.refill().await.unwrap() >= 1);
    }

    server.kill();
    // Each spends its pool (served from leases while the store is down),
    // then its refill fails.
    for node in [&closed, &open, &local] {
        while node.try_acquire(1) == Ok(Source::Lease) {}
        // A refill started by the spending, or this one, fails: retried
        // until it has, within a deadline generous enough for any machine.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while node.stats().store_errors == 0 && std::time::Instant::now() < deadline {
            let _ = node.refill().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            node.stats().store_errors >= 1,
            "no refill failed in 60 s with the server down"
        );
    }
    assert_eq!(closed.try_acquire(1), Err(BudgetError::StoreUnavailable));
    assert_eq!(open.try_acquire(1), Ok(Source::FailedOpen));
    // The fallback bucket admits its 3 tokens (one may already have gone to
    // the call that ended the spending loop above), then refuses.
    while local.try_acquire(1) == Ok(Source::Fallback) {}
    assert_eq!(local.stats().fallback, 3);
    assert!(matches!(
        local.try_acquire(1),
        Err(BudgetError::Limit(AcquireError::Insufficient { .. }))
    ));

    server.restart().expect("restart the server on its port");
    for node in [&closed, &open, &local] {
        let mut refilled = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while refilled == 0 && std::time::Instant::now() < deadline {
            match node.refill().await {
                Ok(n) if n > 0 => refilled = n,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        assert!(refilled >= 1, "no lease in 60 s after the restart");
        assert_eq!(node.try_acquire(1), Ok(Source::Lease));
    }
}

/// On a Redis store of capacity 3, a cost of 5 is refused as
/// exceeding it (a 413 over HTTP) once the first grant has told the
/// capacity, by `acquire` and `try_acquire` alike, instead of
/// `Insufficient` for ever; costs within it are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_above_the_redis_capacity_is_refused_as_exceeding_it() {
    let Some(server) =
        RedisServer::start("a_cost_above_the_redis_capacity_is_refused_as_exceeding_it")
    else {
        return;
    };
    let quota = Quota::new(3, 1, Duration::from_secs(3600)).unwrap();
    let node = node(&server, quota, FailurePolicy::Closed).await;
    let exceeds = Err(BudgetError::Limit(AcquireError::ExceedsCapacity {
        cost: 5,
        capacity: 3,
    }));
    assert_eq!(node.acquire(5, Duration::from_secs(5)).await, exceeds);
    assert_eq!(node.try_acquire(5), exceeds);
    assert_eq!(node.try_acquire(3), Ok(Source::Lease));
}
