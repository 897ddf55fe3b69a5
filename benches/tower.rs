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
//! Run with `cargo bench --bench tower --all-features`.

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use tokio::runtime::Runtime;
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, LocalStore,
};
use tollgate::{KeyedLimiter, Quota};
use tower::{Layer, Service, ServiceExt};

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
        &quota(),
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
    for (row, rule) in [
        ("keyed_local", keyed),
        ("shared_hot", shared_rule(hot)),
        ("shared_cold", shared_rule(cold)),
    ] {
        let layer = RateLimitLayer::builder().rule(rule).build();
        let service = layer.layer(tower::service_fn(ok));
        group.bench_function(row, |b| {
            b.to_async(&runtime).iter(|| {
                let mut service = black_box(service.clone());
                async move {
                    let response = service
                        .ready()
                        .await
                        .expect("always ready")
                        .call(request())
                        .await
                        .expect("infallible");
                    assert_eq!(response.status(), StatusCode::OK);
                }
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = bench
}
criterion_main!(benches);
