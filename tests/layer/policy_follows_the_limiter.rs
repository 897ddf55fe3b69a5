//! The advertised policy follows its limiter: a keyed limiter's quota
//! changed at run time reaches `RateLimit-Policy` on the next response,
//! while a policy the caller set keeps saying what the caller said.

#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::http::{PolicyName, QuotaUnit, RateLimitPolicy};
use tollgate::{KeyedLimiter, ManualClock, Quota};
use tower::{Layer, Service, ServiceExt};

async fn ok(_: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::new())))
}

async fn send<S, B>(service: &mut S) -> (StatusCode, HeaderMap)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
{
    let request = Request::get("/")
        .extension(7u32)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    (response.status(), response.headers().clone())
}

fn policy_field(headers: &HeaderMap) -> String {
    let field = headers["ratelimit-policy"].to_str().unwrap();
    // The partition key's bytes are random per layer: compare what precedes
    // them.
    field.split(";pk=").next().unwrap().to_owned()
}

fn limiter(quota: Quota) -> Arc<KeyedLimiter<u32, ManualClock>> {
    Arc::new(
        KeyedLimiter::builder(quota)
            .clock(ManualClock::new())
            .build(),
    )
}

fn name() -> PolicyName {
    PolicyName::new("per-user").unwrap()
}

#[tokio::test]
async fn a_changed_quota_reaches_the_advertised_policy() {
    let limiter = limiter(Quota::per_second(2).unwrap());
    let rule = Rule::keyed(name(), Arc::clone(&limiter), extract::extension::<u32>());
    let layer = RateLimitLayer::builder()
        .rule(rule)
        .advertise_on_success(true)
        .build();
    let mut service = layer.layer(tower::service_fn(ok));
    let (_, headers) = send(&mut service).await;
    assert_eq!(policy_field(&headers), "\"per-user\";q=2;w=1");

    limiter.set_quota(Quota::new(60, 1, std::time::Duration::from_secs(1)).unwrap());
    let (status, headers) = send(&mut service).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(policy_field(&headers), "\"per-user\";q=60;w=60");

    // A refusal carries it too.
    limiter.set_quota(Quota::per_second(1).unwrap());
    let (status, headers) = send(&mut service).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(policy_field(&headers), "\"per-user\";q=1;w=1");
}

#[tokio::test]
async fn a_policy_with_only_its_unit_changed_still_follows_the_limiter() {
    let limiter = limiter(Quota::per_second(10).unwrap());
    let rule = Rule::keyed(name(), Arc::clone(&limiter), extract::extension::<u32>());
    let bytes = rule.policy().clone().with_unit(QuotaUnit::ContentBytes);
    let layer = RateLimitLayer::builder()
        .rule(rule.with_policy(bytes))
        .advertise_on_success(true)
        .build();
    let mut service = layer.layer(tower::service_fn(ok));
    limiter.set_quota(Quota::per_second(20).unwrap());
    let (_, headers) = send(&mut service).await;
    assert_eq!(
        policy_field(&headers),
        "\"per-user\";q=20;qu=\"content-bytes\";w=1"
    );
}

#[tokio::test]
async fn a_quota_the_caller_set_is_kept_whatever_the_limiter_says() {
    let limiter = limiter(Quota::per_second(10).unwrap());
    let rule = Rule::keyed(name(), Arc::clone(&limiter), extract::extension::<u32>())
        .with_policy(RateLimitPolicy::new(name(), 5));
    let layer = RateLimitLayer::builder()
        .rule(rule)
        .advertise_on_success(true)
        .build();
    let mut service = layer.layer(tower::service_fn(ok));
    limiter.set_quota(Quota::per_second(20).unwrap());
    let (_, headers) = send(&mut service).await;
    assert_eq!(policy_field(&headers), "\"per-user\";q=5");
}
