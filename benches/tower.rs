//! Cost of one request through the tower layer with a per-API-key rule,
//! in process and shared, side by side in one run.
//!
//! One group, `tower_layer`, each row one request (key from an `x-api-key`
//! header, cost 1, a quota that never runs out) through
//! `RateLimitService::call` to an inner service that answers 200 at once,
//! awaited on a current-thread tokio runtime:
//!
//! - `keyed_local`: `Rule::keyed` over a `KeyedLimiter<String>`: the
//!   in-process baseline.
//! - `shared_hot`: `Rule::shared` over a `KeyedAllowance` whose key is hot:
//!   decided in `call` from the key's lease (one compare-and-swap), the
//!   store called only by background refills.
//! - `shared_cold`: the same rule with the key kept cold: every request is
//!   decided by the store (`LocalStore`, in process: no I/O, so the row is
//!   the cost of the decision's machinery — a spawned task, a oneshot, the
//!   response future's wait — not of a round trip).
//!
//! `shared_hot / keyed_local` is what a fleet-wide limit costs a hot key
//! over an in-process one; `shared_cold / keyed_local` the machinery of a
//! store decision, before any network. Every response is checked (a
//! refusal panics).
//!
//! A second group, `tower_two_rules`, is the server benchmark's limits
//! (`benches/server.rs`) without axum or a network: one request with the
//! peer address in axum's `ConnectInfo`, through a per-address rule and a
//! global rule of a quota that never runs out, to an inner service that
//! answers 200 at once. Rows: `unlimited` (the inner service alone),
//! `noop_layer` (a layer that maps each request to itself), `tollgate`,
//! `tower_governor` (its two layers, as its README builds them), and the
//! same two advertising their fields on every response (`tollgate_fields`:
//! `RateLimit` and `RateLimit-Policy`; `tower_governor_headers`:
//! `x-ratelimit-limit` and `x-ratelimit-remaining`). Each row less
//! `unlimited` is what its layer adds to a request.
//!
//! Run with `cargo bench -p tollgate-benches --bench tower` (one group:
//! `-- tower_two_rules`).

use std::convert::Infallible;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use http::{HeaderName, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;
use tokio::runtime::Runtime;
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::identity::{AddrKey, PrefixPolicy};
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, LocalStore,
};
use tollgate::{KeyedLimiter, Quota, TokenBucket};
use tower::util::MapRequestLayer;
use tower::{Layer, Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{GlobalKeyExtractor, PeerIpKeyExtractor};

mod common;

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const KEY: &str = "customer-7";

/// A trillion tokens refilled at a million a second: the budget never
/// refuses during a run.
fn quota() -> Quota {
    Quota::new(1_000_000_000_000, 1_000_000, Duration::from_secs(1)).expect("a valid quota")
}

/// The inner service: 200 at once.
async fn ok(_: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::new())))
}

/// A keyed allowance over an in-process store, its keys hot from the first
/// sample (`hot_at` 1, never cold again) or never hot, with fixed leases so
/// the row measures the admission rather than the lease sizing.
fn allowance(hot: bool) -> KeyedAllowance<LocalStore> {
    let store = Arc::new(LocalStore::new(quota()));
    let config = KeyedAllowanceConfig {
        allowance: AllowanceConfig {
            min_lease: 100_000,
            max_lease: 100_000,
            ..AllowanceConfig::new(FailurePolicy::Closed)
        },
        hot_at: if hot { 1 } else { u32::MAX },
        cold_below: 0,
        ..KeyedAllowanceConfig::new(FailurePolicy::Closed)
    };
    KeyedAllowance::new(store, config).expect("a valid configuration")
}

fn shared_rule(allowance: KeyedAllowance<LocalStore>) -> Rule {
    Rule::shared(
        PolicyName::new("per-api-key").expect("a valid name"),
        allowance,
        extract::header(API_KEY),
    )
}

fn request() -> Request<Full<Bytes>> {
    Request::get("/")
        .header(API_KEY, KEY)
        .body(Full::new(Bytes::new()))
        .expect("a valid request")
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new().expect("a tokio runtime");
    let keyed = Rule::keyed(
        PolicyName::new("per-api-key").expect("a valid name"),
        Arc::new(KeyedLimiter::<String>::new(quota())),
        extract::header(API_KEY),
    );
    let (hot, cold) = runtime.block_on(async {
        let hot = allowance(true);
        // Demand for a few samples makes the key hot.
        while !hot.is_hot(KEY) {
            let _ = hot.acquire(KEY, 1, Duration::from_secs(1)).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (hot, allowance(false))
    });
    let mut group = c.benchmark_group("tower_layer");
    for (name, rule) in [
        ("keyed_local", keyed),
        ("shared_hot", shared_rule(hot)),
        ("shared_cold", shared_rule(cold)),
    ] {
        let layer = RateLimitLayer::builder().rule(rule).build();
        row(
            &mut group,
            &runtime,
            name,
            layer.layer(tower::service_fn(ok)),
            request,
        );
    }
    group.finish();
}

/// The server benchmark's quota on every rule of `tower_two_rules`: bursts
/// of a billion, refilled at one a microsecond.
const BURST: u32 = 1_000_000_000;
const REFILL_EVERY: Duration = Duration::from_micros(1);

type AxumBody = axum::body::Body;

/// The inner service of `tower_two_rules`: what axum's handler of a
/// `&str` answers (200, a content type, the body), in axum's body type
/// (the one tower_governor can build its refusals in).
async fn hello(_: Request<AxumBody>) -> Result<Response<AxumBody>, Infallible> {
    let mut response = Response::new(AxumBody::from("hello\n"));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(response)
}

/// One request from the one client, as axum hands it over.
fn from_peer() -> Request<AxumBody> {
    let mut request = Request::get("/")
        .body(AxumBody::empty())
        .expect("a valid request");
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000))));
    request
}

/// Times one request (from `request`) through `service`, checking its
/// answer.
fn row<S, R, B>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    name: &str,
    service: S,
    request: fn() -> Request<R>,
) where
    S: Service<Request<R>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body,
{
    group.bench_function(name, |b| {
        b.to_async(runtime).iter(|| {
            let mut service = black_box(service.clone());
            async move {
                let response = service
                    .ready()
                    .await
                    .expect("always ready")
                    .call(request())
                    .await
                    .expect("no error");
                assert_eq!(response.status(), StatusCode::OK);
            }
        });
    });
}

/// tollgate's layer as the server benchmark builds it: the peer from
/// `ConnectInfo` per address, then a global bucket.
fn tollgate_two_rules(advertise: bool) -> RateLimitLayer {
    let quota = Quota::new(u64::from(BURST), 1, REFILL_EVERY).expect("a valid quota");
    let peer = extract::extension_map(|info: &ConnectInfo<SocketAddr>| {
        AddrKey::new(info.0.ip(), PrefixPolicy::default())
    });
    RateLimitLayer::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-address").expect("a valid name"),
            Arc::new(KeyedLimiter::new(quota)),
            peer,
        ))
        .rule(Rule::global(
            PolicyName::new("global").expect("a valid name"),
            Arc::new(TokenBucket::new(quota)),
        ))
        .advertise_on_success(advertise)
        .build()
}

/// One tower_governor configuration of the same quota, keyed by `$key`,
/// with `$headers` (`use_headers`) if given.
macro_rules! governor_layer {
    ($key:expr $(, $headers:ident)?) => {
        GovernorLayer::new(
            GovernorConfigBuilder::default()
                .period(REFILL_EVERY)
                .burst_size(BURST)
                .key_extractor($key)
                $(.$headers())?
                .finish()
                .expect("a valid quota"),
        )
    };
}

fn two_rules(c: &mut Criterion) {
    let runtime = Runtime::new().expect("a tokio runtime");
    let inner = tower::service_fn(hello);
    let mut group = c.benchmark_group("tower_two_rules");
    row(&mut group, &runtime, "unlimited", inner, from_peer);
    let noop = MapRequestLayer::new(|request: Request<AxumBody>| request);
    row(
        &mut group,
        &runtime,
        "noop_layer",
        noop.layer(inner),
        from_peer,
    );
    let limited = tollgate_two_rules(false).layer(inner);
    row(&mut group, &runtime, "tollgate", limited, from_peer);
    // The outer layer per address, as tollgate's rules are charged.
    let governor =
        governor_layer!(PeerIpKeyExtractor).layer(governor_layer!(GlobalKeyExtractor).layer(inner));
    row(&mut group, &runtime, "tower_governor", governor, from_peer);
    let limited = tollgate_two_rules(true).layer(inner);
    row(&mut group, &runtime, "tollgate_fields", limited, from_peer);
    let headers = governor_layer!(PeerIpKeyExtractor, use_headers)
        .layer(governor_layer!(GlobalKeyExtractor, use_headers).layer(inner));
    row(
        &mut group,
        &runtime,
        "tower_governor_headers",
        headers,
        from_peer,
    );
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = bench, two_rules
}
criterion_main!(benches);
