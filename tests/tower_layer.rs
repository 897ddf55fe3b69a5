//! The tower layer's per-rule behaviours, against an in-memory inner
//! service on a frozen clock: refunds of 401/403 (also when the response
//! never arrives), missing keys, costs, and the 503 and 413 cases.

#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::{KeyedLimiter, ManualClock, Quota, TokenBucket};
use tower::{Layer, Service, ServiceExt};

/// An account id an earlier (authentication) middleware would place in the
/// request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Account(u32);

fn per_account(capacity: u64, clock: &ManualClock) -> Arc<KeyedLimiter<Account, ManualClock>> {
    Arc::new(
        KeyedLimiter::builder(
            Quota::new(capacity, 1, std::time::Duration::from_secs(3600)).unwrap(),
        )
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(2).unwrap())
        .sweep_interval(None)
        .build(),
    )
}

/// The inner service: answers with the status in the `x-status` header.
async fn answer(request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let status = request
        .headers()
        .get("x-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    Ok(response)
}

fn request(account: Option<u32>, status: u16) -> Request<Full<Bytes>> {
    let mut request = Request::get("/").header("x-status", status.to_string());
    if let Some(account) = account {
        request = request.extension(Account(account));
    }
    request.body(Full::new(Bytes::new())).unwrap()
}

fn account_rule(limiter: &Arc<KeyedLimiter<Account, ManualClock>>) -> Rule {
    Rule::keyed(
        PolicyName::new("account").unwrap(),
        Arc::clone(limiter),
        extract::extension::<Account>(),
    )
}

#[tokio::test]
async fn refunded_statuses_give_the_cost_back_and_carry_no_fields() {
    let clock = ManualClock::new();
    let limiter = per_account(2, &clock);
    let layer = RateLimitLayer::builder()
        .rule(account_rule(&limiter).refund_on([StatusCode::UNAUTHORIZED]))
        .advertise_on_success(true)
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    for _ in 0..5 {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request(Some(1), 401))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers().get("ratelimit").is_none());
    }
    assert_eq!(limiter.available(&Account(1)), 2);
    // A 200 is charged, and carries the fields.
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 200))
        .await
        .unwrap();
    assert!(response.headers().get("ratelimit").is_some());
    assert_eq!(limiter.available(&Account(1)), 1);
}

#[tokio::test]
async fn a_response_that_never_arrives_is_refunded_where_refunds_are_configured() {
    let clock = ManualClock::new();
    let limiter = per_account(2, &clock);
    let layer = RateLimitLayer::builder()
        .rule(account_rule(&limiter).refund_on([StatusCode::UNAUTHORIZED]))
        .build();
    let never = tower::service_fn(|_: Request<Full<Bytes>>| async {
        std::future::pending::<Result<Response<Full<Bytes>>, Infallible>>().await
    });
    let mut service = layer.layer(never);
    for _ in 0..2 {
        let pending = service.ready().await.unwrap().call(request(Some(1), 200));
        drop(pending); // the client hung up
    }
    assert_eq!(limiter.available(&Account(1)), 2);
}

#[tokio::test]
async fn a_missing_key_is_refused_with_400_unless_skipped() {
    let clock = ManualClock::new();
    let limiter = per_account(2, &clock);
    let strict = RateLimitLayer::builder()
        .rule(account_rule(&limiter))
        .build();
    let mut service = strict.layer(tower::service_fn(answer));
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request(None, 200))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let lenient = RateLimitLayer::builder()
        .rule(account_rule(&limiter).on_missing_key(tollgate::http::tower::MissingKey::Skip))
        .build();
    let mut service = lenient.layer(tower::service_fn(answer));
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request(None, 200))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(limiter.is_empty());
}

#[tokio::test]
async fn a_full_key_table_is_a_503_with_its_own_retry_after() {
    let clock = ManualClock::new();
    let limiter = per_account(1_000, &clock);
    let layer = RateLimitLayer::builder()
        .rule(account_rule(&limiter))
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    for account in 0..2 {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request(Some(account), 200))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(9), 200))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(response.headers()["cache-control"], "no-store");
}

#[tokio::test]
async fn an_unreadable_content_length_is_never_free() {
    let clock = ManualClock::new();
    let bytes = Arc::new(TokenBucket::with_clock(
        Quota::new(10, 10, std::time::Duration::from_secs(1)).unwrap(),
        clock.clone(),
    ));
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::global(PolicyName::new("bytes").unwrap(), Arc::clone(&bytes))
                .cost(extract::content_length),
        )
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    for length in ["99999999999999999999", "+5", "ten"] {
        let request = Request::post("/")
            .header("content-length", length)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE, "{length}");
    }
    let request = Request::post("/")
        .header("content-length", "4")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(bytes.available(), 6);
}
