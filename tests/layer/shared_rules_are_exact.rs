//! The tower layer's shared rules: a per-API-key budget held by a store
//! (an in-process `LocalStore` on a `ManualClock` nobody advances, so no
//! refill happens and counts are exact) and decided through a
//! `KeyedAllowance`, beside in-process rules, on tokio's paused clock.
//! What a client sees (429 with the shared state, 413, 503 or a pass on a
//! store that is down), what every limit holds after a refusal, and what
//! clients that hang up, forge or duplicate keys, or flood fresh keys get.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tollgate::http::tower::{RateLimitBody, RateLimitLayer, Rule, extract};
use tollgate::http::{PolicyName, parse_rate_limit, parse_rate_limit_policy};
use tollgate::shared::{
    FailurePolicy, Grant, KeyedAllowance, KeyedAllowanceConfig, Lease, LocalStore, Store,
};
use tollgate::{Clock, KeyedLimiter, Limit, ManualClock, Quota, TokenBucket};
use tower::{Layer, Service, ServiceExt};

use common::poll_once;
use tollgate::TokioClock;
use tollgate_test_support::common;

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const TENANT: HeaderName = HeaderName::from_static("x-tenant");

/// Bursts of `capacity`, one token back an hour: with the clock frozen,
/// exactly `capacity` per key.
fn hourly(capacity: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_secs(3600)).unwrap()
}

type Shared = LocalStore<ManualClock>;

/// A store giving every key `quota`, on `clock`.
fn store(quota: Quota, clock: &ManualClock) -> Arc<Shared> {
    Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .sweep_interval(None)
            .build(),
    ))
}

/// A node's keyed allowance over `store`, keys cold (one store decision per
/// request) unless their demand says otherwise.
fn node<S: Store>(store: Arc<S>, on_failure: FailurePolicy) -> KeyedAllowance<S> {
    KeyedAllowance::new(store, KeyedAllowanceConfig::new(on_failure)).unwrap()
}

/// The per-API-key rule over `allowance`, advertised as its store's quota.
fn per_key<S: Store>(allowance: KeyedAllowance<S>) -> Rule {
    Rule::shared(
        PolicyName::new("per-api-key").unwrap(),
        allowance,
        extract::header(API_KEY),
    )
}

/// The per-API-key rule of a node over `store`, failing closed.
fn closed_per_key(store: &Arc<Shared>) -> Rule {
    per_key(node(Arc::clone(store), FailurePolicy::Closed))
}

/// Sends `n` requests with `key` through `layer`, each of which must be
/// admitted.
async fn admit(layer: &RateLimitLayer, key: &str, n: usize) {
    for _ in 0..n {
        assert_eq!(send(layer, with_key(key)).await.status(), StatusCode::OK);
    }
}

/// A layer with an in-process global limit of 10 on `clock`, then
/// `shared`; and the global limit, to count its tokens.
fn after_a_global_limit(
    clock: &ManualClock,
    shared: Rule,
) -> (Arc<TokenBucket<ManualClock>>, RateLimitLayer) {
    let local = Arc::new(TokenBucket::with_clock(hourly(10), clock.clone()));
    let layer = RateLimitLayer::builder()
        .rule(Rule::global(
            PolicyName::new("global").unwrap(),
            Arc::clone(&local),
        ))
        .rule(shared)
        .build();
    (local, layer)
}

/// The tokens `store` holds for `key` of the `per-api-key` rule.
fn left(store: &Shared, key: &str) -> u64 {
    store.limiter().available(&stored("per-api-key", key))
}

/// How a shared rule named `policy` names `key` in its store
/// (`docs/http.md`, "Shared rules"): scoped by rule.
fn stored(policy: &str, key: &str) -> String {
    format!("{}:{policy}:{key}", policy.len())
}

/// The inner service: answers with the status in the `x-status` header,
/// counting the requests that reach it.
fn inner(
    reached: &Arc<AtomicUsize>,
) -> impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
+ Clone
+ use<> {
    let reached = Arc::clone(reached);
    tower::service_fn(move |request: Request<Full<Bytes>>| {
        reached.fetch_add(1, Ordering::SeqCst);
        let status = request
            .headers()
            .get("x-status")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(200);
        async move {
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::from_u16(status).unwrap();
            Ok(response)
        }
    })
}

/// A request with `key` in the API-key header.
fn with_key(key: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header(API_KEY, key)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Sends `request` through `layer` to a fresh inner service.
async fn send(
    layer: &RateLimitLayer,
    request: Request<Full<Bytes>>,
) -> Response<RateLimitBody<Full<Bytes>>> {
    let reached = Arc::new(AtomicUsize::new(0));
    layer.layer(inner(&reached)).oneshot(request).await.unwrap()
}

async fn problem(response: Response<RateLimitBody<Full<Bytes>>>) -> serde_json::Value {
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_cold_key_goes_to_the_store_and_its_refusal_carries_the_shared_state() {
    let clock = ManualClock::new();
    let store = store(hourly(3), &clock);
    let layer = RateLimitLayer::builder()
        .rule(closed_per_key(&store))
        .build();
    // A cold key is never refused as "not local": the store decides, and
    // admits all three tokens.
    admit(&layer, "alice", 3).await;
    assert_eq!(left(&store, "alice"), 0);
    let refused = send(&layer, with_key("alice")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = refused.headers().clone();
    // The store's wait for the next token: one hour.
    assert_eq!(headers["retry-after"], "3600");
    let limits = parse_rate_limit(headers.get_all("ratelimit").iter().map(|v| v.as_bytes()));
    assert_eq!(limits.len(), 1);
    assert_eq!(limits[0].policy, "per-api-key");
    assert_eq!(limits[0].remaining, 0);
    assert_eq!(limits[0].reset, Some(Duration::from_secs(3600)));
    assert!(
        limits[0]
            .partition_key
            .as_ref()
            .is_some_and(|pk| pk.len() == 8)
    );
    let policies = parse_rate_limit_policy(
        headers
            .get_all("ratelimit-policy")
            .iter()
            .map(|v| v.as_bytes()),
    );
    assert_eq!(policies.len(), 1);
    assert_eq!(policies[0].quota, 3);
    assert_eq!(policies[0].window, Some(Duration::from_secs(3 * 3600)));
    let doc = problem(refused).await;
    assert_eq!(doc["violated-policies"], serde_json::json!(["per-api-key"]));
    // Another key has its own budget.
    assert_eq!(send(&layer, with_key("bob")).await.status(), StatusCode::OK);
    assert_eq!((left(&store, "alice"), left(&store, "bob")), (0, 2));
}

#[tokio::test(start_paused = true)]
async fn a_cost_above_the_shared_capacity_is_413_and_spends_nothing() {
    let clock = ManualClock::new();
    let store = store(hourly(3), &clock);
    let (local, layer) = after_a_global_limit(&clock, closed_per_key(&store).cost(|_| 4));
    let response = send(&layer, with_key("alice")).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(left(&store, "alice"), 3);
    assert_eq!(local.available(), 10);
}

/// A store that cannot be reached: every call fails.
struct Down;

impl Store for Down {
    type Error = std::io::Error;

    fn quota(&self) -> Quota {
        hourly(3)
    }

    async fn acquire(&self, _: &str, _: u64) -> Result<Grant, Self::Error> {
        Err(std::io::Error::other("connection refused"))
    }

    async fn release(&self, _: &str, _: Lease, _: u64) -> Result<(), Self::Error> {
        Err(std::io::Error::other("connection refused"))
    }

    async fn debit(&self, _: &str, _: u64) -> Result<(), Self::Error> {
        Err(std::io::Error::other("connection refused"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_is_down_is_503_when_closed_and_spends_nothing_here() {
    let clock = ManualClock::new();
    let (local, layer) =
        after_a_global_limit(&clock, per_key(node(Arc::new(Down), FailurePolicy::Closed)));
    for _ in 0..5 {
        let response = send(&layer, with_key("alice")).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        // Not the client's doing, and the shared policy's window says
        // nothing about when the store is back.
        assert_eq!(response.headers()["retry-after"], "1");
        let doc = problem(response).await;
        assert_eq!(
            doc["type"],
            "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
        );
    }
    // The in-process limit took nothing for the refused requests.
    assert_eq!(local.available(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_is_down_lets_requests_through_when_open() {
    let layer = RateLimitLayer::builder()
        .rule(per_key(node(Arc::new(Down), FailurePolicy::Open)))
        .build();
    admit(&layer, "alice", 5).await;
}

#[tokio::test(start_paused = true)]
async fn a_shared_refusal_gives_back_everything_the_local_rules_took() {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    struct Account(u32);
    let clock = ManualClock::new();
    let store = store(hourly(2), &clock);
    let per_account = Arc::new(
        KeyedLimiter::builder(hourly(5))
            .clock(clock.clone())
            .build::<Account>(),
    );
    let global = Arc::new(TokenBucket::with_clock(hourly(5), clock.clone()));
    // Added shared first: the layer still charges it after the local ones.
    let layer = RateLimitLayer::builder()
        .rule(closed_per_key(&store))
        .rule(Rule::keyed(
            PolicyName::new("per-account").unwrap(),
            Arc::clone(&per_account),
            extract::extension::<Account>(),
        ))
        .rule(Rule::global(
            PolicyName::new("global").unwrap(),
            Arc::clone(&global),
        ))
        .build();
    let request = || {
        let mut request = with_key("alice");
        request.extensions_mut().insert(Account(7));
        request
    };
    let mut admitted = 0;
    for _ in 0..6 {
        if send(&layer, request()).await.status() == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 2);
    // Every limit holds exactly the two admitted requests' tokens.
    assert_eq!(left(&store, "alice"), 0);
    assert_eq!(per_account.available(&Account(7)), 3);
    assert_eq!(global.available(), 3);
}

/// A node over `store` whose keys go hot at 20 requests a second.
fn hot_soon(store: &Arc<Shared>) -> KeyedAllowance<Shared> {
    let config = KeyedAllowanceConfig {
        hot_at: 20,
        cold_below: 1,
        ..KeyedAllowanceConfig::new(FailurePolicy::Closed)
    };
    KeyedAllowance::new(Arc::clone(store), config).unwrap()
}

/// Demand well above `hot_at` for a few samples, each request admitted,
/// makes `key` hot; returns the requests admitted.
async fn make_hot(layer: &RateLimitLayer, key: &str) -> u64 {
    for _ in 0..5 {
        admit(layer, key, 20).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    100
}

/// A per-tenant shared rule over `tenants`, tenants holding one token.
fn per_tenant(tenants: &Arc<Shared>) -> Rule {
    Rule::shared(
        PolicyName::new("per-tenant").unwrap(),
        node(Arc::clone(tenants), FailurePolicy::Closed),
        extract::header(TENANT),
    )
}

/// `request`, for `tenant`.
fn for_tenant(mut request: Request<Full<Bytes>>, tenant: &str) -> Request<Full<Bytes>> {
    request
        .headers_mut()
        .insert(TENANT, tenant.parse().unwrap());
    request
}

/// Lets give-backs to the store, which run in the background, land.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_later_shared_refusal_gives_the_earlier_shared_charge_back() {
    let clock = ManualClock::new();
    let keys = store(hourly(10), &clock);
    let tenants = store(hourly(1), &clock);
    let layer = RateLimitLayer::builder()
        .rule(closed_per_key(&keys))
        .rule(per_tenant(&tenants))
        .build();
    let request = || for_tenant(with_key("alice"), "acme");
    assert_eq!(send(&layer, request()).await.status(), StatusCode::OK);
    for _ in 0..3 {
        let refused = send(&layer, request()).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let doc = problem(refused).await;
        assert_eq!(doc["violated-policies"], serde_json::json!(["per-tenant"]));
    }
    // What the per-key budget took for each refused request went back
    // through its receipt: only the admitted request is spent.
    settle().await;
    assert_eq!(
        tenants.limiter().available(&stored("per-tenant", "acme")),
        0
    );
    assert_eq!(left(&keys, "alice"), 10 - 1);
}

/// The first shared rule's key is hot (decided from its lease pool), the
/// second's is cold and empty: each refusal gives the hot key's token back
/// into its pool, and the store's books show only the admitted requests.
#[tokio::test(start_paused = true)]
async fn a_later_shared_refusal_gives_a_hot_keys_token_back_into_its_pool() {
    let clock = ManualClock::new();
    let keys = store(hourly(1000), &clock);
    let tenants = store(hourly(1), &clock);
    let per_key_node = hot_soon(&keys);
    let alone = RateLimitLayer::builder()
        .rule(per_key(per_key_node.clone()))
        .build();
    let mut admitted = make_hot(&alone, "alice").await;
    assert!(per_key_node.is_hot(&stored("per-api-key", "alice")));
    let layer = RateLimitLayer::builder()
        .rule(per_key(per_key_node.clone()))
        .rule(per_tenant(&tenants))
        .build();
    let request = || for_tenant(with_key("alice"), "acme");
    assert_eq!(send(&layer, request()).await.status(), StatusCode::OK);
    admitted += 1;
    settle().await;
    let pooled = per_key_node.pooled(&stored("per-api-key", "alice"));
    for _ in 0..5 {
        let refused = send(&layer, request()).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(per_key_node.pooled(&stored("per-api-key", "alice")), pooled);
    assert_eq!(
        left(&keys, "alice"),
        1000 - admitted - per_key_node.pooled(&stored("per-api-key", "alice"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_hangs_up_while_the_store_decides_stays_charged_here() {
    let clock = ManualClock::new();
    let store = store(hourly(3), &clock);
    let (local, layer) = after_a_global_limit(&clock, closed_per_key(&store));
    let reached = Arc::new(AtomicUsize::new(0));
    let mut service = layer.layer(inner(&reached));
    for _ in 0..4 {
        let mut future = Box::pin(service.ready().await.unwrap().call(with_key("alice")));
        // The key is cold: the store's decision is on its way.
        assert!(poll_once(&mut future).is_pending());
        drop(future); // the client hung up
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0);
    // The in-process charges stay, as for any client that hangs up.
    assert_eq!(local.available(), 6);
    // The store's grants, admitted by no one, went back (exactly: the
    // store's clock has not moved): the key's budget is whole.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(left(&store, "alice"), 3);
    // A request that waits for its answer is served.
    let served = service
        .ready()
        .await
        .unwrap()
        .call(with_key("alice"))
        .await
        .unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
    assert_eq!(left(&store, "alice"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_hangs_up_once_admitted_stays_charged_everywhere() {
    let clock = ManualClock::new();
    let store = store(hourly(2), &clock);
    let layer = RateLimitLayer::builder()
        .rule(closed_per_key(&store).give_back_on([StatusCode::UNAUTHORIZED]))
        .build();
    let handler = tower::service_fn(|_: Request<Full<Bytes>>| async {
        std::future::pending::<Result<Response<Full<Bytes>>, Infallible>>().await
    });
    let mut service = layer.layer(handler);
    for _ in 0..2 {
        let mut future = Box::pin(service.ready().await.unwrap().call(with_key("alice")));
        for _ in 0..10 {
            assert!(poll_once(&mut future).is_pending());
            tokio::task::yield_now().await;
        }
        drop(future); // admitted, in the handler, and gone
    }
    assert_eq!(left(&store, "alice"), 0);
    assert_eq!(
        send(&layer, with_key("alice")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn duplicated_or_folded_api_keys_are_400_and_charge_no_one() {
    let clock = ManualClock::new();
    let store = store(hourly(3), &clock);
    let (local, layer) = after_a_global_limit(&clock, closed_per_key(&store));
    let twice = Request::get("/")
        .header(API_KEY, "alice")
        .header(API_KEY, "bob")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let folded = with_key("alice, bob");
    let empty = with_key("");
    let too_long = with_key(&"k".repeat(extract::MAX_HEADER_KEY_LEN + 1));
    let missing = Request::get("/").body(Full::new(Bytes::new())).unwrap();
    for request in [twice, folded, empty, too_long, missing] {
        assert_eq!(
            send(&layer, request).await.status(),
            StatusCode::BAD_REQUEST
        );
    }
    assert_eq!((left(&store, "alice"), left(&store, "bob")), (3, 3));
    assert!(store.limiter().is_empty());
    assert_eq!(local.available(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_forged_api_key_spends_the_budget_of_the_key_it_claims() {
    let clock = ManualClock::new();
    let store = store(hourly(3), &clock);
    let layer = RateLimitLayer::builder()
        .rule(closed_per_key(&store))
        .build();
    // The layer charges the key a request claims: whoever sends alice's
    // key spends alice's budget (docs/http.md, "Shared rules").
    admit(&layer, "alice", 1).await;
    // Lookalikes are other keys, each with its own budget: no
    // normalisation merges them into alice's.
    for lookalike in ["Alice", "alice_", "ALICE"] {
        admit(&layer, lookalike, 1).await;
        assert_eq!(left(&store, lookalike), 2);
    }
    // Whitespace and non-ASCII lookalikes are no key at all.
    for unkeyed in ["alice ", "alice\t", "\u{430}lice"] {
        let response = send(&layer, with_key(unkeyed)).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
    assert_eq!(left(&store, "alice"), 2);
    assert_eq!(store.limiter().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_fresh_api_keys_keeps_the_node_bounded_and_each_key_within_its_budget() {
    let clock = ManualClock::new();
    // The store refuses to track more than 64 keys; the node tracks 16.
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(hourly(1))
            .clock(clock.clone())
            .max_keys(NonZeroUsize::new(64).unwrap().into())
            .sweep_interval(None)
            .build(),
    ));
    let allowance = KeyedAllowance::new(
        Arc::clone(&store),
        KeyedAllowanceConfig {
            max_keys: tollgate::MaxKeys::new(16).unwrap(),
            ..KeyedAllowanceConfig::new(FailurePolicy::Closed)
        },
    )
    .unwrap();
    let layer = RateLimitLayer::builder()
        .rule(per_key(allowance.clone()))
        .build();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..200 {
        let key = format!("flood-{i}");
        for _ in 0..2 {
            let status = send(&layer, with_key(&key)).await.status().as_u16();
            *statuses.entry(status).or_default() += 1;
        }
        assert!(allowance.stats().tracked_keys <= 16);
    }
    // The first 64 keys got one request each (their budget) and a 429; the
    // store, full, refuses every newer key, which fails closed as 503.
    assert_eq!(statuses.get(&200), Some(&64));
    assert_eq!(statuses.get(&429), Some(&64));
    assert_eq!(statuses.get(&503), Some(&(2 * 136)));
    assert_eq!(store.limiter().len(), 64);
}

#[tokio::test(start_paused = true)]
async fn a_hot_key_is_decided_without_awaiting_and_an_empty_lease_waits_for_its_refill() {
    let clock = ManualClock::new();
    let store = store(hourly(1000), &clock);
    let allowance = hot_soon(&store);
    let layer = RateLimitLayer::builder()
        .rule(per_key(allowance.clone()))
        .build();
    let mut admitted = make_hot(&layer, "alice").await;
    assert!(allowance.is_hot(&stored("per-api-key", "alice")));
    let reached = Arc::new(AtomicUsize::new(0));
    let mut service = layer.layer(inner(&reached));
    // Hot with its pool filled: decided in `call`, ready at the first poll.
    // Hot with its pool empty: a refill is on its way, so the request waits
    // for it (within the store wait) instead of being told 429.
    let mut at_once = 0;
    for _ in 0..50 {
        let mut future = Box::pin(service.ready().await.unwrap().call(with_key("alice")));
        let response = match poll_once(&mut future) {
            Poll::Ready(response) => {
                at_once += 1;
                response
            }
            Poll::Pending => future.await,
        };
        assert_eq!(response.unwrap().status(), StatusCode::OK);
        admitted += 1;
    }
    assert!(at_once > 0);
    // The store debited every admission (and what the node holds leased).
    assert_eq!(
        left(&store, "alice"),
        1000 - admitted - allowance.pooled(&stored("per-api-key", "alice"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_refused_in_process_never_reaches_the_store() {
    let clock = ManualClock::new();
    let store = store(hourly(5), &clock);
    let local = Arc::new(TokenBucket::with_clock(hourly(1), clock.clone()));
    // The shared rule is added first; the in-process one still goes first.
    let layer = RateLimitLayer::builder()
        .rule(closed_per_key(&store))
        .rule(Rule::global(
            PolicyName::new("global").unwrap(),
            Arc::clone(&local),
        ))
        .build();
    admit(&layer, "alice", 1).await;
    for _ in 0..3 {
        let refused = send(&layer, with_key("alice")).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let doc = problem(refused).await;
        assert_eq!(doc["violated-policies"], serde_json::json!(["global"]));
    }
    assert_eq!(left(&store, "alice"), 4);
}

#[tokio::test(start_paused = true)]
async fn a_response_given_back_returns_the_local_and_the_shared_charge() {
    let clock = ManualClock::new();
    let store = store(hourly(5), &clock);
    let local = Arc::new(TokenBucket::with_clock(hourly(5), clock.clone()));
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::global(PolicyName::new("global").unwrap(), Arc::clone(&local))
                .give_back_on([StatusCode::UNAUTHORIZED]),
        )
        .rule(closed_per_key(&store).give_back_on([StatusCode::UNAUTHORIZED]))
        .build();
    let mut unauthorized = with_key("alice");
    unauthorized
        .headers_mut()
        .insert("x-status", "401".parse().unwrap());
    assert_eq!(
        send(&layer, unauthorized).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(local.available(), 5);
    // The shared token too, to the store by the one rule (no time held).
    settle().await;
    assert_eq!(left(&store, "alice"), 5);
    // A status the rule does not give back on keeps it spent.
    admit(&layer, "alice", 1).await;
    settle().await;
    assert_eq!(left(&store, "alice"), 4);
}

/// A store that never answers.
struct Hung;

impl Store for Hung {
    type Error = std::io::Error;

    fn quota(&self) -> Quota {
        hourly(3)
    }

    async fn acquire(&self, _: &str, _: u64) -> Result<Grant, Self::Error> {
        std::future::pending().await
    }

    async fn release(&self, _: &str, _: Lease, _: u64) -> Result<(), Self::Error> {
        std::future::pending().await
    }

    async fn debit(&self, _: &str, _: u64) -> Result<(), Self::Error> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_hangs_is_a_503_within_its_timeout_not_a_request_held_for_ever() {
    let clock = ManualClock::new();
    let (local, layer) =
        after_a_global_limit(&clock, per_key(node(Arc::new(Hung), FailurePolicy::Closed)));
    // The allowance's store timeout (50 ms by default) ends the call: an
    // instant of tokio's paused clock, which only that timer moves, and
    // no real time passes.
    let timed_out_by = tokio::time::Instant::now()
        + KeyedAllowanceConfig::new(FailurePolicy::Closed)
            .allowance
            .timeout;
    let response = send(&layer, with_key("alice")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(tokio::time::Instant::now() <= timed_out_by);
    assert_eq!(local.available(), 10);
}

/// A shared rule's 429 is the store's word: a client sending 200 requests
/// a second for a fresh key of "100 a minute" on one node (cold, then hot
/// and leased, then exhausted; the store on tokio's paused clock, so that
/// it refills while requests wait) is refused only while neither the store
/// nor the node holds a token for it, and each refusal's Retry-After and
/// RateLimit `t` are the store's own wait for the next token, rounded up.
/// Every token the store refilled over the run is admitted or still held.
#[tokio::test(start_paused = true)]
async fn a_shared_refusal_is_the_stores_word_and_its_wait_the_stores() {
    const GAP: Duration = Duration::from_millis(5);
    const REQUESTS: u32 = 300;
    let quota = Quota::new(100, 100, Duration::from_secs(60)).unwrap();
    let clock = TokioClock::new();
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(quota)
            .clock(clock)
            .sweep_interval(None)
            .build(),
    ));
    let allowance = node(Arc::clone(&store), FailurePolicy::Closed);
    let layer = RateLimitLayer::builder()
        .rule(per_key(allowance.clone()))
        .build();
    let key = stored("per-api-key", "fresh");
    let (mut admitted, mut refused) = (0u64, 0u64);
    for request in 0..REQUESTS {
        let response = send(&layer, with_key("fresh")).await;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
            let headers = response.headers();
            let held = (store.limiter().available(&key), allowance.pooled(&key));
            assert_eq!(
                held,
                (0, 0),
                "request {request}: refused while tokens were held"
            );
            let wait = store.limiter().retry_after(&key, 1).unwrap();
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            assert_eq!(
                headers["retry-after"],
                seconds.to_string().as_str(),
                "request {request}: the store waits {wait:?}"
            );
            let limits =
                parse_rate_limit(headers.get_all("ratelimit").iter().map(|v| v.as_bytes()));
            assert_eq!(limits[0].remaining, 0);
            assert_eq!(limits[0].reset, Some(Duration::from_secs(seconds)));
        } else {
            assert_eq!(response.status(), StatusCode::OK, "request {request}");
            admitted += 1;
        }
        tokio::time::sleep(GAP).await;
    }
    assert!(allowance.is_hot(&key), "the key went hot on the way");
    // What the store refilled over the run, one token each 600 ms.
    let refilled = clock.now_nanos() / 600_000_000;
    assert_eq!(
        admitted + allowance.pooled(&key) + store.limiter().available(&key),
        100 + refilled
    );
    assert_eq!(admitted + refused, u64::from(REQUESTS));
}

/// Each rule's budget is its own: a request charges the key each rule
/// extracts, under that rule. Two shared rules over one store (one
/// `RedisStore` connection and prefix is the natural setup when both
/// apply the same quota) name their keys in one space, so a client that
/// sends `x-api-key: acme` spends tenant `acme`'s budget: it can drain
/// another tenant's budget by claiming its name as an API key.
#[tokio::test(start_paused = true)]
async fn two_shared_rules_over_one_store_keep_their_budgets_apart() {
    let quota = hourly(5);
    let store = store(quota, &ManualClock::new());
    let node = KeyedAllowance::new(
        Arc::clone(&store),
        KeyedAllowanceConfig::new(FailurePolicy::Closed),
    )
    .unwrap();
    let layer = RateLimitLayer::builder()
        .rule(Rule::shared(
            PolicyName::new("per-api-key").unwrap(),
            node.clone(),
            extract::header(API_KEY),
        ))
        .rule(Rule::shared(
            PolicyName::new("per-tenant").unwrap(),
            node,
            extract::header(TENANT),
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

#[tokio::test(start_paused = true)]
async fn an_in_flight_permit_is_held_while_the_store_decides_and_released_by_its_refusal_or_a_hang_up()
 {
    let clock = ManualClock::new();
    let store = store(hourly(1), &clock);
    let exports =
        Arc::new(tollgate::concurrency::KeyedConcurrencyLimiter::<String>::new(5).unwrap());
    let layer = RateLimitLayer::builder()
        .rule(closed_per_key(&store))
        .rule(Rule::in_flight(
            PolicyName::new("exports").unwrap(),
            Arc::clone(&exports),
            extract::header(API_KEY),
        ))
        .build();
    let reached = Arc::new(AtomicUsize::new(0));
    let mut service = layer.layer(inner(&reached));
    let alice = "alice".to_owned();
    // A cold key: the store decides after `call`, the permit held meanwhile.
    let mut waiting = Box::pin(service.ready().await.unwrap().call(with_key("alice")));
    assert!(poll_once(&mut waiting).is_pending());
    assert_eq!(exports.in_flight(&alice), 1);
    drop(waiting); // the client hung up while the store decided
    assert_eq!(exports.in_flight(&alice), 0);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    // Admitted by the store, then the store's refusal: no permit kept.
    let admitted = service
        .ready()
        .await
        .unwrap()
        .call(with_key("alice"))
        .await
        .unwrap();
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(exports.in_flight(&alice), 0);
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(with_key("alice"))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(exports.in_flight(&alice), 0);
    assert_eq!(exports.len(), 0);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
}

/// What the rule advertises of its store's quota on `response`.
fn advertised_quota(response: &Response<RateLimitBody<Full<Bytes>>>) -> (u64, Option<Duration>) {
    let policies = parse_rate_limit_policy(
        response
            .headers()
            .get_all("ratelimit-policy")
            .iter()
            .map(|v| v.as_bytes()),
    );
    assert_eq!(policies.len(), 1);
    (policies[0].quota, policies[0].window)
}

#[tokio::test(start_paused = true)]
async fn a_shared_rule_advertises_its_stores_quota_and_follows_a_change_of_it() {
    let clock = ManualClock::new();
    let store = store(hourly(3), &clock);
    let rule = closed_per_key(&store);
    // Given once, to the store: the rule reads it from there.
    assert_eq!(rule.policy().quota(), 3);
    let layer = RateLimitLayer::builder()
        .rule(rule)
        .advertise_on_success(true)
        .build();
    let admitted = send(&layer, with_key("alice")).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(
        advertised_quota(&admitted),
        (3, Some(Duration::from_secs(3 * 3600)))
    );
    store.set_quota(hourly(5));
    let admitted = send(&layer, with_key("alice")).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(
        advertised_quota(&admitted),
        (5, Some(Duration::from_secs(5 * 3600)))
    );
}
