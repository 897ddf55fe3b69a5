//! Defects found by the adversarial review of the fleet-wide shared budgets
//! (issue 12): one test per finding, each named after the promise it
//! defends.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::shared::BudgetError;
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, Grant, KeyedAllowance, KeyedAllowanceConfig, Lease, LocalStore,
    Store,
};
use tollgate::{AcquireError, KeyedLimiter, ManualClock, Quota};

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

#[cfg(feature = "redis")]
#[path = "support/redis_cluster.rs"]
mod redis_cluster;

#[cfg(feature = "redis")]
use redis_cluster::RedisCluster;

/// Bursts of `capacity`, one token back an hour: with the clock frozen,
/// exactly `capacity` per key.
fn hourly(capacity: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_secs(3600)).unwrap()
}

/// A store giving every key `quota`, on a clock nobody advances.
fn frozen_store(quota: Quota) -> Arc<LocalStore<ManualClock>> {
    Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(quota)
            .clock(ManualClock::new())
            .sweep_interval(None)
            .build(),
    ))
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
    use tollgate::shared::{RedisConfig, RedisStore};

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

/// A `LocalStore` on a clock nobody advances, whose next batch
/// (`acquire_many`) can be made to hang for ever once: a peer that
/// blackholes one request, then answers again. Single calls never hang.
struct Blackhole {
    inner: LocalStore<ManualClock>,
    hang_next_batch: AtomicBool,
    batches: AtomicU64,
}

impl Blackhole {
    fn new(quota: Quota) -> Arc<Self> {
        Arc::new(Blackhole {
            inner: Arc::into_inner(frozen_store(quota)).unwrap(),
            hang_next_batch: AtomicBool::new(false),
            batches: AtomicU64::new(0),
        })
    }
}

impl Store for Blackhole {
    type Error = AcquireError;

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, AcquireError> {
        self.inner.acquire(key, want).await
    }

    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), AcquireError> {
        self.inner.release(key, lease, unused).await
    }

    async fn acquire_many<'a>(
        &'a self,
        requests: &'a [(&'a str, u64)],
    ) -> Vec<Result<Grant, AcquireError>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        if self.hang_next_batch.swap(false, Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.acquire_many(requests).await
    }
}

/// Lets spawned refills, cold calls and returns run.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// "No call blocks forever": a store call that never answers costs the
/// calls in flight their timeout, and the node recovers once the store
/// answers again. Here one hot-key refill batch hangs; every caller of
/// that refill times out (the allowance bounds each refill), but the batch
/// task is still awaiting the hung `acquire_many` with no bound of its own,
/// so no hot key of the node is ever refilled again: the store is healthy
/// and the node answers `StoreUnavailable` for ever.
#[tokio::test(start_paused = true)]
async fn one_hung_refill_batch_does_not_stop_every_later_refill_of_the_node() {
    let store = Blackhole::new(hourly(1_000_000));
    let config = KeyedAllowanceConfig {
        allowance: AllowanceConfig {
            max_lease: 10,
            ..AllowanceConfig::new(FailurePolicy::Closed)
        },
        hot_at: 30,
        cold_below: 1,
        sample_every: Duration::from_millis(50),
        ..KeyedAllowanceConfig::new(FailurePolicy::Closed)
    };
    let node = KeyedAllowance::new(Arc::clone(&store), config).unwrap();
    // 100 a second against a threshold of 30 a second: the key goes hot.
    for _ in 0..100 {
        node.acquire("busy", 1, Duration::from_millis(5))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(node.is_hot("busy"));
    // One batch is blackholed: the refill it carries times out.
    store.hang_next_batch.store(true, Ordering::SeqCst);
    let batches_then = store.batches.load(Ordering::SeqCst);
    let mut refused = 0;
    for _ in 0..200 {
        if node
            .acquire("busy", 1, Duration::from_millis(5))
            .await
            .is_err()
        {
            refused += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        settle().await;
    }
    assert!(refused > 0, "the blackholed refill was never needed");
    // The store has answered every call since; two seconds on (past every
    // backoff), the hot key is served again.
    assert!(!store.hang_next_batch.load(Ordering::SeqCst));
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle().await;
    let mut admitted = 0;
    for _ in 0..50 {
        if node
            .acquire("busy", 1, Duration::from_millis(100))
            .await
            .is_ok()
        {
            admitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        settle().await;
    }
    assert_eq!(
        admitted,
        50,
        "a healthy store, yet the node refuses; batches sent since the hang: {}, stats: {:?}",
        store.batches.load(Ordering::SeqCst) - batches_then,
        node.stats()
    );
}

/// Each rule's budget is its own: a request charges the key each rule
/// extracts, under that rule. Two shared rules over one store (one
/// `RedisStore` connection and prefix is the natural setup when both
/// apply the same quota) name their keys in one space, so a client that
/// sends `x-api-key: acme` spends tenant `acme`'s budget: it can drain
/// another tenant's budget by claiming its name as an API key.
#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn two_shared_rules_over_one_store_keep_their_budgets_apart() {
    use http::{Request, StatusCode};
    use http_body_util::Full;
    use tollgate::http::PolicyName;
    use tollgate::http::tower::{RateLimitLayer, Rule, extract};
    use tower::{Layer, ServiceExt};

    let quota = hourly(5);
    let store = frozen_store(quota);
    let node = KeyedAllowance::new(
        Arc::clone(&store),
        KeyedAllowanceConfig::new(FailurePolicy::Closed),
    )
    .unwrap();
    let layer = RateLimitLayer::builder()
        .rule(Rule::shared(
            PolicyName::new("per-api-key").unwrap(),
            &quota,
            node.clone(),
            extract::header(http::HeaderName::from_static("x-api-key")),
        ))
        .rule(Rule::shared(
            PolicyName::new("per-tenant").unwrap(),
            &quota,
            node,
            extract::header(http::HeaderName::from_static("x-tenant")),
        ))
        .build();
    let send = |api_key: &str, tenant: &str| {
        let request = Request::get("/")
            .header("x-api-key", api_key)
            .header("x-tenant", tenant)
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        let service = layer.layer(tower::service_fn(|_: Request<Full<bytes::Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(bytes::Bytes::new())))
        }));
        async move { service.oneshot(request).await.unwrap().status() }
    };
    // Five requests with API key "acme", for the attacker's own tenant.
    for i in 0..5 {
        assert_eq!(send("acme", &format!("mallory-{i}")).await, StatusCode::OK);
    }
    // Tenant acme has not sent a request yet: its five are all there.
    for i in 0..5 {
        assert_eq!(
            send(&format!("acme-key-{i}"), "acme").await,
            StatusCode::OK,
            "tenant acme refused after {i} requests"
        );
    }
}

/// A store that never answers successfully: every call fails at once.
#[derive(Debug)]
struct Down;

#[derive(Debug, thiserror::Error)]
#[error("store down")]
struct DownError;

impl Store for Down {
    type Error = DownError;

    async fn acquire(&self, _: &str, _: u64) -> Result<Grant, DownError> {
        Err(DownError)
    }

    async fn release(&self, _: &str, _: Lease, _: u64) -> Result<(), DownError> {
        Err(DownError)
    }
}

/// `FailurePolicy::Fallback(quota)`: while the store is down, a node admits
/// each key within the fallback quota's envelope (`docs/distributed.md`,
/// "Failure policy": `n` nodes admit up to `n` times that envelope). A
/// client that alternates bursts and silences makes its key switch between
/// cold and hot; each promotion builds a fresh pool whose fallback bucket
/// starts full, so every cycle admits another full burst of the fallback
/// quota on one node.
#[tokio::test(start_paused = true)]
async fn a_key_switching_hot_and_cold_in_an_outage_stays_within_one_fallback_envelope() {
    let fallback = hourly(10);
    let config = KeyedAllowanceConfig {
        allowance: AllowanceConfig {
            max_lease: 10,
            ..AllowanceConfig::new(FailurePolicy::Fallback(fallback))
        },
        hot_at: 30,
        cold_below: 10,
        sample_every: Duration::from_millis(50),
        ..KeyedAllowanceConfig::new(FailurePolicy::Fallback(fallback))
    };
    let node = KeyedAllowance::new(Arc::new(Down), config).unwrap();
    let mut admitted = 0u64;
    for _cycle in 0..6 {
        // A burst, 200 a second for one second: the key goes hot.
        for _ in 0..200 {
            if node.acquire("mallory", 1, Duration::ZERO).await.is_ok() {
                admitted += 1;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Silence: the key goes cold again.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let stats = node.stats();
    // Eighteen seconds at one token an hour: the envelope is the burst of
    // 10 (one more token at most, from rounding).
    assert!(
        admitted <= 11,
        "admitted {admitted} in 18 s under a fallback of 10 an hour; \
         became hot {} times, cold {} times",
        stats.became_hot,
        stats.became_cold
    );
}

/// A key's budget holds while the store answers about that key: a refusal
/// the store makes for another key (here a fresh key that does not fit in
/// a full `LocalStore`, `TooManyKeys`) is not the store being down. Yet one
/// failed cold call puts the whole node's cold path in an outage backoff,
/// and under `FailurePolicy::Open` every cold key is then admitted without
/// asking the store: a client that sends one fresh key a second keeps its
/// own exhausted key unlimited.
#[tokio::test(start_paused = true)]
async fn another_keys_store_error_does_not_open_an_exhausted_key() {
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(hourly(3))
            .clock(ManualClock::new())
            .sweep_interval(None)
            .max_keys(std::num::NonZeroUsize::new(2).unwrap())
            .build(),
    ));
    let node = KeyedAllowance::new(
        Arc::clone(&store),
        KeyedAllowanceConfig::new(FailurePolicy::Open),
    )
    .unwrap();
    let mut admitted = 0;
    for i in 0..20 {
        // Mallory's own key: three tokens, one back an hour.
        if node.acquire("mallory", 1, Duration::ZERO).await.is_ok() {
            admitted += 1;
        }
        // And a fresh key each round, which the full store cannot track.
        let _ = node.acquire(&format!("fresh-{i}"), 1, Duration::ZERO).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        admitted <= 3,
        "mallory's key admitted {admitted} times on a budget of 3; stats {:?}",
        node.stats()
    );
}

/// The hot path's side of the same promise: a pool whose own key the store
/// refuses (here a full `LocalStore`, `TooManyKeys`) is refused, typed,
/// and never admitted by its `Open` policy, which is for an unreachable
/// store only.
#[tokio::test(start_paused = true)]
async fn a_pool_whose_key_the_store_refuses_is_refused_not_failed_open() {
    use tollgate::shared::{LocalAllowance, Source};

    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(hourly(3))
            .clock(ManualClock::new())
            .sweep_interval(None)
            .max_keys(std::num::NonZeroUsize::new(1).unwrap())
            .build(),
    ));
    assert_eq!(store.acquire("tracked", 1).await.unwrap().tokens, 1);
    let pool = LocalAllowance::new(
        Arc::clone(&store),
        "refused",
        AllowanceConfig::new(FailurePolicy::Open),
    )
    .unwrap();
    assert!(pool.refill().await.is_err());
    for _ in 0..10 {
        assert_eq!(pool.try_acquire(1), Err(BudgetError::StoreRefused));
        assert_ne!(
            pool.acquire(1, Duration::from_secs(5)).await,
            Ok(Source::FailedOpen)
        );
    }
    assert_eq!(pool.stats().failed_open, 0);
}

/// A key the store refuses is the server's problem, not the client's:
/// 503, never a 429 nor an admission.
#[cfg(feature = "http")]
#[test]
fn a_store_refusal_of_a_key_is_a_503() {
    use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};

    let policy = RateLimitPolicy::from_quota(PolicyName::new("per-key").unwrap(), &hourly(3));
    let response = Refusal::from_budget(&BudgetError::StoreRefused, &policy).into_response();
    assert_eq!(response.status(), 503);
}

/// A `rediss://` URL is verified TLS or nothing: the `redis` crate's
/// `#insecure` fragment (no certificate verification, should any crate of
/// the build enable it) is refused before any connection is made.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_rediss_url_asking_for_no_certificate_verification_is_refused() {
    use tollgate::shared::{RedisConfig, RedisStore, RedisStoreError};

    for config in [
        RedisConfig::node("rediss://127.0.0.1:1/#insecure"),
        RedisConfig::cluster(["rediss://127.0.0.1:1/", "rediss://127.0.0.1:2/#insecure"]),
    ] {
        let built = RedisStore::connect_with(&config, hourly(3), "rl:tls:").await;
        assert!(
            matches!(built, Err(RedisStoreError::InsecureTls)),
            "{:?}",
            built.err()
        );
    }
}
