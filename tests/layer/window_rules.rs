//! Window counters as tower rules: advertised as `q` = the limit and `w` =
//! the window, with what is left and the wait until one unit more in the
//! `RateLimit` field, refused with 429 and the window's Retry-After, and
//! given back on a status within the window only.

#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::http::rate_limit_value;
use tollgate::http::tower::{RateLimitLayer, Rule};
use tollgate::http::{PolicyName, RateLimitPolicy, ServiceLimit, rate_limit_policy_value};
use tollgate::window::{Fixed, Sliding, WindowCounter, WindowKind};
use tollgate::{
    Counted, KeyedFixedWindow, KeyedSlidingWindow, Limit, ManualClock, Quota, TokenBucket,
    WindowQuota,
};
use tower::{Layer, Service, ServiceExt};

const SECOND: Duration = Duration::from_secs(1);

/// The inner service: answers with the status the request carries in its
/// extensions, 200 if none.
async fn answer<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = request
        .extensions()
        .get::<StatusCode>()
        .copied()
        .unwrap_or(StatusCode::OK);
    Ok(response)
}

async fn send<S, B>(service: &mut S, status: u16) -> (StatusCode, HeaderMap)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
{
    let request = Request::get("/")
        .extension(StatusCode::from_u16(status).unwrap())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    (response.status(), response.headers().clone())
}

fn name() -> PolicyName {
    PolicyName::new("window").unwrap()
}

/// A counter of `limit` per minute, on `clock`.
fn per_minute<K: WindowKind>(
    limit: u64,
    clock: &ManualClock,
) -> Arc<WindowCounter<K, ManualClock>> {
    Arc::new(
        WindowCounter::with_clock(WindowQuota::per_minute(limit).unwrap(), clock.clone()).unwrap(),
    )
}

/// A layer with `rule` alone, advertising on every response.
fn layer_of(rule: Rule) -> RateLimitLayer {
    RateLimitLayer::builder()
        .rule(rule)
        .advertise_on_success(true)
        .build()
}

/// The fields a window rule of `limit` per minute carries with `left`
/// units left and `reset` seconds until one more.
fn fields(limit: u64, left: u64, reset: u64) -> (String, String) {
    let quota = WindowQuota::per_minute(limit).unwrap();
    let policy = RateLimitPolicy::from_window_quota(name(), &quota);
    let limit = ServiceLimit::new(name(), left).with_reset_seconds(reset);
    (
        rate_limit_policy_value(&[policy])
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned(),
        rate_limit_value(&[limit])
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned(),
    )
}

fn seen(headers: &HeaderMap) -> (String, String) {
    let field = |name: &str| headers[name].to_str().unwrap().to_owned();
    (field("ratelimit-policy"), field("ratelimit"))
}

#[tokio::test]
async fn a_fixed_window_rule_advertises_its_limit_and_the_end_of_the_window() {
    let clock = ManualClock::new();
    let limiter = per_minute::<Fixed>(3, &clock);
    let mut service =
        layer_of(Rule::global(name(), Arc::clone(&limiter))).layer(tower::service_fn(answer));
    assert_eq!(fields(3, 0, 0).0, "\"window\";q=3;w=60");

    clock.set(Duration::from_secs(15));
    let (status, headers) = send(&mut service, 200).await;
    assert_eq!(status, StatusCode::OK);
    // 2 left; one more only when the window ends, 45 s on.
    assert_eq!(seen(&headers), fields(3, 2, 45));
    assert_eq!(seen(&headers).1, "\"window\";r=2;t=45");

    send(&mut service, 200).await;
    clock.set(Duration::from_millis(20_500));
    let (_, headers) = send(&mut service, 200).await;
    assert_eq!(seen(&headers), fields(3, 0, 40));

    let (status, headers) = send(&mut service, 200).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "40");
    assert_eq!(seen(&headers), fields(3, 0, 40));
    assert_eq!(limiter.available(), 0);
}

#[tokio::test]
async fn a_sliding_window_rule_advertises_when_the_next_unit_frees() {
    let clock = ManualClock::new();
    let limiter = per_minute::<Sliding>(4, &clock);
    let mut service =
        layer_of(Rule::global(name(), Arc::clone(&limiter))).layer(tower::service_fn(answer));
    // Nothing counted: all 4 left, and the counts move at the window's end.
    clock.set(Duration::from_secs(50));
    let (_, headers) = send(&mut service, 200).await;
    // 3 left: the fourth frees when the window's 1 has rolled into the
    // previous count and faded to nothing, the next window's end, 70 s on.
    assert_eq!(seen(&headers), fields(4, 3, 70));
    for _ in 0..3 {
        send(&mut service, 200).await;
    }
    // At 75 s the previous window's 4 weigh 3: one unit left, taken. The
    // next frees when they weigh 2, at 90 s.
    clock.set(Duration::from_secs(75));
    let (status, headers) = send(&mut service, 200).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seen(&headers), fields(4, 0, 15));
    let (status, headers) = send(&mut service, 200).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "15");
}

#[tokio::test]
async fn a_window_rule_gives_back_on_a_status_within_the_window_only() {
    let clock = ManualClock::new();
    let limiter = per_minute::<Fixed>(2, &clock);
    let rule = Rule::global(name(), Arc::clone(&limiter)).give_back_on([StatusCode::UNAUTHORIZED]);
    let mut service = layer_of(rule).layer(tower::service_fn(answer));
    for _ in 0..5 {
        let (status, _) = send(&mut service, 401).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(limiter.available(), 2);
    send(&mut service, 200).await;
    assert_eq!(limiter.available(), 1);
}

#[tokio::test]
async fn a_window_and_a_bucket_rule_refuse_all_or_nothing() {
    let clock = ManualClock::new();
    let window = per_minute::<Sliding>(100, &clock);
    let bucket = Arc::new(TokenBucket::with_clock(
        Quota::per_second(1).unwrap(),
        clock.clone(),
    ));
    let layer = RateLimitLayer::builder()
        .rule(Rule::global(name(), Arc::clone(&window)))
        .rule(Rule::global(
            PolicyName::new("bucket").unwrap(),
            Arc::clone(&bucket),
        ))
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    assert_eq!(send(&mut service, 200).await.0, StatusCode::OK);
    let (status, headers) = send(&mut service, 200).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "1");
    // The refused request's unit went back to the window.
    assert_eq!(window.available(), 99);
}

#[tokio::test]
async fn a_counted_window_rule_counts_what_the_layer_decides() {
    let clock = ManualClock::new();
    let counted = Arc::new(Counted::new(
        WindowCounter::<Fixed, _>::with_clock(WindowQuota::per_second(1).unwrap(), clock.clone())
            .unwrap(),
    ));
    let mut service =
        layer_of(Rule::global(name(), Arc::clone(&counted))).layer(tower::service_fn(answer));
    send(&mut service, 200).await;
    let (status, headers) = send(&mut service, 200).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "1");
    let stats = counted.stats();
    assert_eq!((stats.admitted, stats.denied), (1, 1));
    clock.advance(SECOND);
    assert_eq!(send(&mut service, 200).await.0, StatusCode::OK);
}

/// A request carrying the key `user` in `x-user`.
async fn send_as<S, B>(service: &mut S, user: &str, status: u16) -> (StatusCode, HeaderMap)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
{
    let request = Request::get("/")
        .header("x-user", user)
        .extension(StatusCode::from_u16(status).unwrap())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    (response.status(), response.headers().clone())
}

/// The fields of a keyed rule's response, apart from each member's
/// partition key (`pk`), which tells keys apart; and that key.
fn keyed_seen(headers: &HeaderMap) -> ((String, String), String) {
    let (policy, limit) = seen(headers);
    let strip = |field: &str| field.split(";pk=").next().unwrap().to_owned();
    let pk = limit.split(";pk=").nth(1).unwrap().to_owned();
    ((strip(&policy), strip(&limit)), pk)
}

fn user(parts: &http::request::Parts) -> Option<String> {
    parts
        .headers
        .get("x-user")?
        .to_str()
        .ok()
        .map(str::to_owned)
}

#[tokio::test]
async fn a_keyed_fixed_window_rule_advertises_each_keys_window() {
    let clock = ManualClock::new();
    let limiter = Arc::new(
        KeyedFixedWindow::builder(WindowQuota::per_minute(2).unwrap())
            .clock(clock.clone())
            .build_fixed::<String>()
            .unwrap(),
    );
    let rule = Rule::keyed(name(), Arc::clone(&limiter), user);
    let mut service = layer_of(rule).layer(tower::service_fn(answer));
    clock.set(Duration::from_secs(10));
    let (_, headers) = send_as(&mut service, "alice", 200).await;
    let (alice, alice_pk) = keyed_seen(&headers);
    assert_eq!(alice, fields(2, 1, 50));
    send_as(&mut service, "alice", 200).await;
    let (status, headers) = send_as(&mut service, "alice", 200).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "50");
    // Another key has a window of its own.
    let (status, headers) = send_as(&mut service, "bob", 200).await;
    assert_eq!(status, StatusCode::OK);
    let (bob, bob_pk) = keyed_seen(&headers);
    assert_eq!(bob, fields(2, 1, 50));
    assert_ne!(alice_pk, bob_pk);
    assert_eq!(limiter.len(), 2);
}

#[tokio::test]
async fn a_keyed_sliding_window_rule_gives_back_and_forgets_an_idle_key() {
    let clock = ManualClock::new();
    let limiter = Arc::new(
        KeyedSlidingWindow::builder(WindowQuota::per_minute(4).unwrap())
            .clock(clock.clone())
            .build_sliding::<String>()
            .unwrap(),
    );
    let rule =
        Rule::keyed(name(), Arc::clone(&limiter), user).give_back_on([StatusCode::UNAUTHORIZED]);
    let mut service = layer_of(rule).layer(tower::service_fn(answer));
    let (status, _) = send_as(&mut service, "mallory", 401).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Given back within its window: nothing of it weighs, the key is gone.
    assert!(limiter.is_empty());
    let (_, headers) = send_as(&mut service, "alice", 200).await;
    assert_eq!(keyed_seen(&headers).0.0, "\"window\";q=4;w=60");
    assert_eq!(limiter.key("alice").available(), 3);
}
