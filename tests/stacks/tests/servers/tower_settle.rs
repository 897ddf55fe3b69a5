//! Rules settled to the actual cost their response reports
//! (`Rule::settled_by`): an LLM-style budget in tokens per API key, each
//! request estimated at admission and settled to its usage, by a typed
//! extension the handler sets or a header an upstream sends; a response
//! that does not say, or never comes, leaves the estimate charged.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::http::PolicyName;
use tollgate::http::tower::{ActualCost, RateLimitLayer, Rule, Settlement, extract};
use tollgate::{KeyedLimiter, Limit, ManualClock, Quota};
use tower::{Layer, ServiceExt};

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// What the test asks the handler to report as used.
const USED: HeaderName = HeaderName::from_static("x-used");
const USAGE: HeaderName = HeaderName::from_static("x-usage-tokens");

/// 100 000 tokens a minute per key (one every 600 µs), on `clock`.
fn tokens(clock: &ManualClock) -> Arc<KeyedLimiter<String, ManualClock>> {
    Arc::new(
        KeyedLimiter::builder(Quota::per_minute(100_000).unwrap())
            .clock(clock.clone())
            .build(),
    )
}

fn rule(limiter: &Arc<KeyedLimiter<String, ManualClock>>, how: Settlement) -> Rule {
    Rule::keyed(
        PolicyName::new("tokens").unwrap(),
        Arc::clone(limiter),
        extract::header(API_KEY),
    )
    .cost(|_| 1_000)
    .settled_by(how)
    .unwrap()
}

/// The handler: reports the usage the request asks for, as the extension
/// and as an upstream's header.
async fn model<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"completion")));
    if let Some(used) = request.headers().get(USED) {
        response.headers_mut().insert(USAGE, used.clone());
        if let Ok(n) = used.to_str().unwrap_or("").parse() {
            response.extensions_mut().insert(ActualCost(n));
        }
    }
    Ok(response)
}

fn ask(used: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::post("/v1/chat").header(API_KEY, "k-1");
    if let Some(used) = used {
        request = request.header(USED, used);
    }
    request.body(Full::new(Bytes::new())).unwrap()
}

async fn send(layer: &RateLimitLayer, request: Request<Full<Bytes>>) -> StatusCode {
    layer
        .layer(tower::service_fn(model::<Full<Bytes>>))
        .oneshot(request)
        .await
        .unwrap()
        .status()
}

/// Estimated at 1000, settled to what was used: below, the rest comes
/// back exactly (nothing admitted since, the clock still); above, the
/// excess is debt, and the next request waits it out.
#[tokio::test]
async fn a_charge_settles_to_the_usage_the_handler_reports() {
    for how in [Settlement::Extension, Settlement::Header(USAGE)] {
        let clock = ManualClock::new();
        let limiter = tokens(&clock);
        let layer = RateLimitLayer::builder().rule(rule(&limiter, how)).build();
        let key = || limiter.key("k-1");
        assert_eq!(send(&layer, ask(Some("200"))).await, StatusCode::OK);
        assert_eq!(key().available(), 99_800);
        assert_eq!(send(&layer, ask(Some("150000"))).await, StatusCode::OK);
        // 150 200 used of 100 000: 50 200 in debt.
        assert_eq!(key().available(), 0);
        assert_eq!(
            key().retry_after(1_000).unwrap(),
            Duration::from_millis((50_200 + 1_000) * 6 / 10)
        );
        assert_eq!(
            send(&layer, ask(Some("1"))).await,
            StatusCode::TOO_MANY_REQUESTS
        );
        clock.advance(Duration::from_micros((50_200 + 1_000) * 600));
        assert_eq!(send(&layer, ask(Some("1000"))).await, StatusCode::OK);
    }
}

/// A response that does not say (no usage, a malformed or duplicated
/// header) leaves the estimate charged; so does one that never comes.
#[tokio::test]
async fn without_a_usage_the_estimate_stands() {
    let clock = ManualClock::new();
    let limiter = tokens(&clock);
    let layer = RateLimitLayer::builder()
        .rule(rule(&limiter, Settlement::Header(USAGE)))
        .build();
    for used in [None, Some("12abc"), Some("-5"), Some(""), Some("1, 2")] {
        let before = limiter.key("k-1").available();
        assert_eq!(send(&layer, ask(used)).await, StatusCode::OK);
        assert_eq!(limiter.key("k-1").available(), before - 1_000, "{used:?}");
    }
    // Hung up before the response: the estimate stands.
    let before = limiter.key("k-1").available();
    let hanging = tower::service_fn(|_: Request<Full<Bytes>>| async {
        std::future::pending::<Result<Response<Full<Bytes>>, Infallible>>().await
    });
    let mut call = Box::pin(layer.layer(hanging).oneshot(ask(Some("1"))));
    assert!(futures_poll_once(call.as_mut()).is_pending());
    drop(call);
    assert_eq!(limiter.key("k-1").available(), before - 1_000);
}

fn futures_poll_once<F: std::future::Future>(
    future: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    future.poll(&mut cx)
}

/// An in-flight rule has no cost to settle: it says so with a typed error.
#[test]
fn an_in_flight_rule_cannot_settle() {
    use tollgate::concurrency::KeyedConcurrencyLimiter;
    let slots = Arc::new(KeyedConcurrencyLimiter::<String>::new(2).unwrap());
    let rule = Rule::in_flight(
        PolicyName::new("slots").unwrap(),
        slots,
        extract::header(API_KEY),
    );
    let error = rule.settled_by(Settlement::Extension).unwrap_err();
    assert_eq!(error.policy.as_str(), "slots");
}

/// The LLM-gateway job end to end on axum: the handler reports its usage
/// as an `ActualCost` extension of its response, and a key that used its
/// minute's tokens in one answer is refused until the debt is repaid.
#[tokio::test]
async fn an_llm_endpoint_on_axum_settles_tokens_per_api_key() {
    use axum::{Extension, Router, routing::post};
    let clock = ManualClock::new();
    let limiter = tokens(&clock);
    let layer = RateLimitLayer::builder()
        .rule(rule(&limiter, Settlement::Extension))
        .build();
    async fn chat(headers: http::HeaderMap) -> (Extension<ActualCost>, &'static str) {
        let used = headers
            .get(USED)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        (Extension(ActualCost(used)), "completion")
    }
    let app = Router::new().route("/v1/chat", post(chat)).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = reqwest::Client::new();
    let chat = |used: &'static str| {
        client
            .post(format!("http://{addr}/v1/chat"))
            .header(API_KEY, "k-1")
            .header(USED, used)
            .send()
    };
    assert_eq!(chat("99000").await.unwrap().status(), 200);
    assert_eq!(limiter.key("k-1").available(), 1_000);
    assert_eq!(chat("5000").await.unwrap().status(), 200);
    let refused = chat("10").await.unwrap();
    assert_eq!(refused.status(), 429);
    // 4000 in debt and 1000 for the estimate: 3 s at 600 µs a token.
    assert_eq!(refused.headers()["retry-after"], "3");
}

/// Settled by the body's bytes: charged what the body streamed, when it
/// ends; a body dropped before its end (the client hung up) is charged
/// the bytes it had sent.
#[tokio::test]
async fn a_charge_settles_to_the_bytes_its_body_streamed() {
    use http_body_util::{BodyExt, StreamBody};
    let clock = ManualClock::new();
    let bytes = Arc::new(tollgate::TokenBucket::with_clock(
        Quota::new(100_000, 1, Duration::from_secs(3600)).unwrap(),
        clock,
    ));
    let rule = Rule::global(PolicyName::new("bytes").unwrap(), Arc::clone(&bytes))
        .cost(|_| 1_000)
        .settled_by(Settlement::BodyBytes)
        .unwrap();
    let layer = RateLimitLayer::builder().rule(rule).build();
    type Chunks = StreamBody<
        futures_util::stream::Iter<std::vec::IntoIter<Result<http_body::Frame<Bytes>, Infallible>>>,
    >;
    let chunked = |n: usize| -> Chunks {
        let frames: Vec<_> = (0..n)
            .map(|_| Ok(http_body::Frame::data(Bytes::from(vec![0; 2_000]))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    };
    let serve = |n: usize| {
        layer.layer(tower::service_fn(move |_: Request<Full<Bytes>>| async move {
            Ok::<_, Infallible>(Response::new(chunked(n)))
        }))
    };
    // 5 chunks of 2000: estimated 1000, settled to 10 000 at the end.
    let response = serve(5).oneshot(ask(None)).await.unwrap();
    assert_eq!(
        bytes.available(),
        99_000,
        "the estimate, until the body ends"
    );
    let sent = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(sent.len(), 10_000);
    assert_eq!(bytes.available(), 90_000);
    // Two chunks sent, then the client hangs up: 4000 charged.
    let mut body = serve(5).oneshot(ask(None)).await.unwrap().into_body();
    for _ in 0..2 {
        body.frame().await.unwrap().unwrap();
    }
    drop(body);
    assert_eq!(bytes.available(), 86_000);
    // An empty body: nothing sent, the estimate given back by the one rule
    // (exactly: nothing admitted since, the clock still).
    let body = serve(0).oneshot(ask(None)).await.unwrap().into_body();
    assert_eq!(body.collect().await.unwrap().to_bytes().len(), 0);
    assert_eq!(bytes.available(), 86_000);
}
