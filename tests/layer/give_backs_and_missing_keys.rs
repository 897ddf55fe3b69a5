//! The tower layer's per-rule behaviours, against an in-memory inner
//! service on a `ManualClock`: what is given back on 401/403 and what a
//! request that never gets its response costs, missing keys, costs read
//! from Content-Length, and the 503 case.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Version};
use http_body::{Body, Frame};
use http_body_util::Full;
use tokio::sync::Notify;
use tollgate::concurrency::KeyedConcurrencyLimiter;
use tollgate::http::PolicyName;
use tollgate::http::tower::{CostError, MissingKey, RateLimitLayer, Rule, extract};
use tollgate::{
    Advertised, Counted, KeyRef, KeyedLimiter, Limit, ManualClock, PerKey, Quota, Shape,
    TokenBucket,
};
use tower::{Layer, Service, ServiceExt};

use common::poll_once;
use tollgate_test_support::common;

/// An account id an earlier (authentication) middleware would place in the
/// request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Account(u32);

/// Bursts of `capacity`, refilled at one an hour: with the clock frozen,
/// exactly `capacity` per account.
fn hourly(capacity: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_secs(3600)).unwrap()
}

/// Bursts of `capacity`, one token back every 10 s.
fn every_ten_seconds(capacity: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_secs(10)).unwrap()
}

fn per_account(quota: Quota, clock: &ManualClock) -> Arc<KeyedLimiter<Account, ManualClock>> {
    Arc::new(
        KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .max_keys(NonZeroUsize::new(2).unwrap().into())
            .sweep_interval(None)
            .build(),
    )
}

/// The inner service: answers with the status in the `x-status` header,
/// once the request's [`Gate`] (if any) is opened.
async fn answer<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(gate) = request.extensions().get::<Gate>().cloned() {
        gate.0.notified().await;
    }
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

/// Holds a request's response back until the test opens it.
#[derive(Clone, Default)]
struct Gate(Arc<Notify>);

/// An inner service whose handler counts its starts and never answers: a
/// slow handler whose client hangs up, or an outer timeout. It borrows
/// nothing (`use<>`): the layer takes `'static` services, which a request
/// waiting for a shared store carries along.
fn hanging(
    started: &Arc<AtomicUsize>,
) -> impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>
+ Clone
+ use<> {
    let started = Arc::clone(started);
    tower::service_fn(move |_: Request<Full<Bytes>>| {
        let started = Arc::clone(&started);
        async move {
            started.fetch_add(1, Ordering::SeqCst);
            std::future::pending().await
        }
    })
}

/// A layer with one per-account rule that gives back 401 and 403.
fn giving_back(limiter: &Arc<KeyedLimiter<Account, ManualClock>>) -> RateLimitLayer {
    RateLimitLayer::builder()
        .rule(account_rule(limiter).give_back_on([StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN]))
        .build()
}

fn account_rule(limiter: &Arc<KeyedLimiter<Account, ManualClock>>) -> Rule {
    Rule::keyed(
        PolicyName::new("account").unwrap(),
        Arc::clone(limiter),
        extract::extension::<Account>(),
    )
}

#[tokio::test]
async fn given_back_statuses_return_the_charge_and_carry_no_fields() {
    let clock = ManualClock::new();
    let limiter = per_account(hourly(2), &clock);
    let layer = RateLimitLayer::builder()
        .rule(account_rule(&limiter).give_back_on([StatusCode::UNAUTHORIZED]))
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
async fn a_missing_key_is_refused_with_400_unless_skipped() {
    let clock = ManualClock::new();
    let limiter = per_account(hourly(2), &clock);
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

/// Of several rules a request cannot be charged by, the first bound
/// answers: the token rules' keys are read before the permits', whatever
/// the order the rules were added in (a missing account is the client's
/// 400, before a permit rule's missing peer address, the server's 500).
#[tokio::test]
async fn a_token_rules_missing_key_answers_before_a_permit_rules() {
    let limiter = per_account(hourly(2), &ManualClock::new());
    let slots = Arc::new(KeyedConcurrencyLimiter::<std::net::IpAddr>::new(1).unwrap());
    let permits = Rule::in_flight(PolicyName::new("slots").unwrap(), slots, extract::peer_ip);
    for permits_first in [true, false] {
        let builder = RateLimitLayer::builder();
        let layer = if permits_first {
            builder.rule(permits.clone()).rule(account_rule(&limiter))
        } else {
            builder.rule(account_rule(&limiter)).rule(permits.clone())
        }
        .build();
        let response = layer
            .layer(tower::service_fn(answer))
            .oneshot(request(None, 200))
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "permits first: {permits_first}"
        );
    }
}

#[tokio::test]
async fn a_full_key_table_is_a_503_with_its_own_retry_after() {
    let clock = ManualClock::new();
    let limiter = per_account(hourly(1_000), &clock);
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

/// As measured: B = 1, a frozen clock, a hundred requests each
/// polled once and dropped. Only the first reaches the handler; the other
/// 99 are refused, although the rule gives back 401 and 403.
#[tokio::test]
async fn hanging_up_after_the_handler_started_gives_nothing_back() {
    let clock = ManualClock::new();
    let limiter = per_account(hourly(1), &clock);
    let layer = giving_back(&limiter);
    let started = Arc::new(AtomicUsize::new(0));
    let mut service = layer.layer(hanging(&started));
    let mut refused = 0;
    for _ in 0..100 {
        let mut future = Box::pin(service.ready().await.unwrap().call(request(Some(1), 200)));
        if let Poll::Ready(response) = poll_once(&mut future) {
            assert_eq!(response.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
            refused += 1;
        }
        drop(future); // the client hung up
    }
    assert_eq!(started.load(Ordering::SeqCst), 1);
    assert_eq!(refused, 99);
}

/// With time passing: B = 1, one token per 10 s. A slow request
/// dropped after 10 s must not let a third request in beside the second:
/// over those 10 s the envelope is B + r * t = 2.
#[tokio::test]
async fn a_slow_request_dropped_after_ten_seconds_lets_no_third_one_in() {
    let clock = ManualClock::new();
    let limiter = per_account(every_ten_seconds(1), &clock);
    let layer = giving_back(&limiter);
    let started = Arc::new(AtomicUsize::new(0));
    let mut service = layer.layer(hanging(&started));
    let mut slow = Box::pin(service.ready().await.unwrap().call(request(Some(1), 200)));
    assert!(poll_once(&mut slow).is_pending());
    clock.advance(Duration::from_secs(10));
    let mut second = Box::pin(service.ready().await.unwrap().call(request(Some(1), 200)));
    assert!(poll_once(&mut second).is_pending());
    drop(slow); // an outer timeout, 10 s in
    let mut third = Box::pin(service.ready().await.unwrap().call(request(Some(1), 200)));
    let Poll::Ready(third) = poll_once(&mut third) else {
        panic!("a third request reached the handler within B + r * t = 2");
    };
    assert_eq!(third.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(started.load(Ordering::SeqCst), 2);
}

/// An inner service that fails has done (or started) the work: its error
/// says nothing about a status to give back, so the charge stays.
#[tokio::test]
async fn an_inner_service_error_keeps_the_charge() {
    let clock = ManualClock::new();
    let limiter = per_account(hourly(1), &clock);
    let layer = giving_back(&limiter);
    let failing = tower::service_fn(|_: Request<Full<Bytes>>| async {
        Err::<Response<Full<Bytes>>, _>(std::io::Error::other("the handler failed"))
    });
    let mut service = layer.layer(failing);
    let outcome = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 401))
        .await;
    assert!(outcome.is_err());
    assert_eq!(limiter.available(&Account(1)), 0);
    let again = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 401))
        .await;
    assert_eq!(again.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A 401 given back after another request was admitted from the same
/// bucket returns the cost less the time it was held, not the whole cost:
/// B = 2, one token per 10 s; the 401 took its token at 0 s and answers at
/// 4 s, so 6 s of it go back and the bucket holds exactly 1 token.
#[tokio::test]
async fn a_give_back_after_another_admission_returns_the_cost_less_the_time_held() {
    let clock = ManualClock::new();
    let limiter = per_account(every_ten_seconds(2), &clock);
    let layer = giving_back(&limiter);
    let mut service = layer.layer(tower::service_fn(answer));
    let gate = Gate::default();
    let mut denied = request(Some(1), 401);
    denied.extensions_mut().insert(gate.clone());
    let mut denied = Box::pin(service.ready().await.unwrap().call(denied));
    assert!(poll_once(&mut denied).is_pending());
    let admitted = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 200))
        .await;
    assert_eq!(admitted.unwrap().status(), StatusCode::OK);
    clock.advance(Duration::from_secs(4));
    gate.0.notify_one();
    assert_eq!(denied.await.unwrap().status(), StatusCode::UNAUTHORIZED);
    // 1 token exactly: the next 2 are a whole token (10 s) away. Giving
    // the whole cost back would leave 1.4 tokens, 6 s from 2.
    assert_eq!(limiter.available(&Account(1)), 1);
    assert_eq!(
        limiter.retry_after(&Account(1), 2),
        Ok(Duration::from_secs(10))
    );
}

/// A body that streams without declaring its length, as a chunked upload
/// (or an HTTP/2 body without Content-Length) does.
struct Undeclared(Option<Bytes>);

impl Body for Undeclared {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().0.take().map(|data| Ok(Frame::data(data))))
    }
}

/// A layer charging Content-Length bytes from a bucket of 10 (10 per
/// second, frozen), and the bucket.
fn per_byte(clock: &ManualClock) -> (RateLimitLayer, Arc<TokenBucket<ManualClock>>) {
    let bytes = Arc::new(TokenBucket::with_clock(
        Quota::per_second(10).unwrap(),
        clock.clone(),
    ));
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::global(PolicyName::new("bytes").unwrap(), Arc::clone(&bytes))
                .try_cost(extract::content_length),
        )
        .build();
    (layer, bytes)
}

/// Sends `request` through `layer` to [`answer`].
async fn send<B: Body + Send + 'static>(
    layer: &RateLimitLayer,
    request: Request<B>,
) -> Response<tollgate::http::tower::RateLimitBody<Full<Bytes>>>
where
    B::Data: Send,
{
    let mut service = layer.layer(tower::service_fn(answer::<B>));
    service.ready().await.unwrap().call(request).await.unwrap()
}

/// Checks a 4xx of the layer's own: status, problem+json, no-store.
async fn check_problem(
    response: Response<tollgate::http::tower::RateLimitBody<Full<Bytes>>>,
    status: StatusCode,
    title: &str,
) {
    use http_body_util::BodyExt;
    assert_eq!(response.status(), status);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["type"], "about:blank");
    assert_eq!(doc["title"], title);
    assert_eq!(doc["status"], status.as_u16());
}

fn with_length(lengths: &[&str], body: &'static [u8]) -> Request<Full<Bytes>> {
    let mut request = Request::post("/upload");
    for length in lengths {
        request = request.header("content-length", *length);
    }
    request.body(Full::new(Bytes::from_static(body))).unwrap()
}

/// A Content-Length that is not one length (not digits, a sign, beyond
/// u64) is a 400 with a problem+json body, and charges nothing.
#[tokio::test]
async fn a_malformed_content_length_is_a_400_problem() {
    let clock = ManualClock::new();
    let (layer, bytes) = per_byte(&clock);
    for length in ["ten", "+5", "-1", "0x4", "4 4", "", "99999999999999999999"] {
        let response = send(&layer, with_length(&[length], b"")).await;
        check_problem(response, StatusCode::BAD_REQUEST, "Bad Request").await;
    }
    assert_eq!(bytes.available(), 10);
    let response = send(&layer, with_length(&["4"], b"four")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(bytes.available(), 6);
}

/// Several Content-Length values are one length only if they agree (RFC
/// 9110 section 8.6): as separate lines or as one list. Otherwise 400.
#[tokio::test]
async fn conflicting_content_lengths_are_a_400() {
    let clock = ManualClock::new();
    let (layer, bytes) = per_byte(&clock);
    for lengths in [&["4", "5"][..], &["4, 5"], &["5", "4"], &["4", ""]] {
        let response = send(&layer, with_length(lengths, b"four")).await;
        check_problem(response, StatusCode::BAD_REQUEST, "Bad Request").await;
    }
    assert_eq!(bytes.available(), 10);
    for lengths in [&["4", "4"][..], &["4, 4"]] {
        let response = send(&layer, with_length(lengths, b"four")).await;
        assert_eq!(response.status(), StatusCode::OK, "{lengths:?}");
    }
    assert_eq!(bytes.available(), 2);
}

/// A request with a body of undeclared length under a per-byte rule is
/// never charged 0: it is a 411 (Length Required), before a byte of the
/// body is read. Both framings at once (Transfer-Encoding beside a
/// Content-Length, the request-smuggling shape) is a 400.
#[tokio::test]
async fn a_body_of_undeclared_length_is_a_411_on_a_per_byte_rule() {
    let clock = ManualClock::new();
    let (layer, bytes) = per_byte(&clock);
    let upload = || Request::post("/upload");
    let cases = [
        (
            upload().header("transfer-encoding", "chunked"),
            StatusCode::LENGTH_REQUIRED,
        ),
        (
            upload().version(Version::HTTP_2),
            StatusCode::LENGTH_REQUIRED,
        ),
        (
            upload()
                .header("transfer-encoding", "chunked")
                .header("content-length", "1"),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (request, status) in cases {
        let request = request
            .body(Undeclared(Some(Bytes::from_static(b"0123456789"))))
            .unwrap();
        let title = status.canonical_reason().unwrap();
        check_problem(send(&layer, request).await, status, title).await;
    }
    assert_eq!(bytes.available(), 10);
}

/// One run of [`refusals_of`]: each request's status, headers and body.
type Answers = Vec<(StatusCode, http::HeaderMap, Bytes)>;

/// The answers to a fixed sequence of requests through a per-account rule
/// (2 an hour) and a global rule (3 an hour, a search costing 5), each
/// rule giving back `give_back_on`, in the inner service's body type if
/// `inner_body`: refusals by the account rule, by the global rule, and of a
/// cost above its capacity.
async fn refusals_of(give_back_on: &[StatusCode], inner_body: bool) -> Answers {
    let clock = ManualClock::new();
    let global = Arc::new(TokenBucket::with_clock(hourly(3), clock.clone()));
    let layer = RateLimitLayer::builder()
        .rule(account_rule(&per_account(hourly(2), &clock)).give_back_on(give_back_on.to_vec()))
        .rule(
            Rule::global(PolicyName::new("global").unwrap(), global)
                .cost(|parts| if parts.uri.path() == "/search" { 5 } else { 1 })
                .give_back_on(give_back_on.to_vec()),
        )
        .partition_keys(tollgate::http::PartitionKeys::with_secret([7; 16]))
        .build();
    let inner = tower::service_fn(answer);
    if inner_body {
        answers(layer.with_inner_body().layer(inner)).await
    } else {
        answers(layer.layer(inner)).await
    }
}

/// What `service` answers to the sequence of [`refusals_of`].
async fn answers<S, B>(mut service: S) -> Answers
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
    B: Body,
    B::Error: std::fmt::Debug,
{
    let search = || {
        let mut search = request(Some(3), 200);
        *search.uri_mut() = "/search".parse().unwrap();
        search
    };
    let mut answers = Vec::new();
    for request in [
        request(Some(1), 200),
        request(Some(1), 200),
        request(Some(1), 200), // the account's third: refused by its rule
        request(Some(2), 200),
        request(Some(2), 200), // the global rule's fourth: refused there
        search(),              // a cost above the global capacity: 413
    ] {
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .unwrap()
            .to_bytes();
        answers.push((parts.status, parts.headers, body));
    }
    answers
}

/// A layer that keeps no charge past `call` (no status to give back, no
/// fields on success) charges its chain straight from the rules it bound,
/// without recording charges; one that keeps them records each. Both
/// refuse alike: the same statuses, the same fields and Retry-After, the
/// same problem bodies. And so does a layer answering in the inner
/// service's body type.
#[tokio::test]
async fn refusals_read_the_same_whether_or_not_charges_are_kept() {
    let kept = refusals_of(&[StatusCode::IM_A_TEAPOT], false).await;
    let statuses: Vec<u16> = kept.iter().map(|(status, ..)| status.as_u16()).collect();
    assert_eq!(statuses, [200, 200, 429, 200, 429, 413]);
    assert!(kept[2].1.contains_key("ratelimit"));
    assert_eq!(refusals_of(&[], false).await, kept);
    assert_eq!(refusals_of(&[], true).await, kept);
    assert_eq!(refusals_of(&[StatusCode::IM_A_TEAPOT], true).await, kept);
}

/// The fields of an admitted response, written from each rule's text
/// serialised when the layer was built, are the fields built per request
/// from the same policies, partition keys and live limits; and a layer of
/// one unkeyed rule sends the value it built once.
#[tokio::test]
async fn the_fields_of_an_admitted_response_are_those_built_per_request() {
    use tollgate::http::{PartitionKeys, RateLimitPolicy, ServiceLimit};
    use tollgate::http::{rate_limit_policy_value, rate_limit_value};

    let clock = ManualClock::new();
    let accounts = per_account(every_ten_seconds(5), &clock);
    let quota = Quota::new(1000, 10, Duration::from_secs(1)).unwrap();
    let global = Arc::new(TokenBucket::with_clock(quota, clock.clone()));
    let keys = PartitionKeys::with_secret([9; 16]);
    let per_account = PolicyName::new(r#"per "account""#).unwrap();
    let everyone = PolicyName::new("global").unwrap();
    let both = RateLimitLayer::builder()
        .rule(Rule::keyed(
            per_account.clone(),
            Arc::clone(&accounts),
            extract::extension::<Account>(),
        ))
        .rule(Rule::global(everyone.clone(), Arc::clone(&global)))
        .partition_keys(keys.clone())
        .advertise_on_success(true)
        .build();
    let response = send(&both, request(Some(1), 200)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let pk = keys.key(&per_account, &Account(1));
    let policies = [
        RateLimitPolicy::from_quota(per_account.clone(), &every_ten_seconds(5))
            .with_partition_key(pk),
        RateLimitPolicy::from_quota(everyone.clone(), &quota),
    ];
    // 4 of the account's 5 tokens left, the next in 10 s; 999 of the
    // global 1000, the next in 100 ms (one second, rounded up).
    let limits = [
        ServiceLimit::new(per_account, 4)
            .with_reset_seconds(10)
            .with_partition_key(pk),
        ServiceLimit::new(everyone.clone(), 999).with_reset_seconds(1),
    ];
    assert_eq!(
        response.headers().get("ratelimit-policy"),
        rate_limit_policy_value(&policies).as_ref()
    );
    assert_eq!(
        response.headers().get("ratelimit"),
        rate_limit_value(&limits).as_ref()
    );

    let alone = RateLimitLayer::builder()
        .rule(Rule::global(everyone.clone(), Arc::clone(&global)))
        .advertise_on_success(true)
        .build();
    for left in [998, 997] {
        let response = send(&alone, request(None, 200)).await;
        let policy = RateLimitPolicy::from_quota(everyone.clone(), &quota);
        assert_eq!(
            response.headers().get("ratelimit-policy"),
            rate_limit_policy_value(&[policy]).as_ref()
        );
        let limit = ServiceLimit::new(everyone.clone(), left).with_reset_seconds(1);
        assert_eq!(
            response.headers().get("ratelimit"),
            rate_limit_value(&[limit]).as_ref()
        );
    }
}

/// A layer whose rules `names` each charge `cost` of `bucket`, keeping its
/// charges past the call (to give back 418s) if `keeps`.
fn charging_one_bucket(
    bucket: &Arc<TokenBucket<ManualClock>>,
    names: &[&str],
    cost: u64,
    keeps: bool,
) -> RateLimitLayer {
    let mut builder = RateLimitLayer::builder();
    for name in names {
        let rule =
            Rule::global(PolicyName::new(*name).unwrap(), Arc::clone(bucket)).cost(move |_| cost);
        builder = builder.rule(if keeps {
            rule.give_back_on([StatusCode::IM_A_TEAPOT])
        } else {
            rule
        });
    }
    builder.build()
}

/// Two rules charging one bucket 3 each, beyond its capacity of 5, can
/// never admit a request: every request is a 413, never a 429 whose
/// Retry-After no wait can honour, and nothing is spent.
#[tokio::test]
async fn rules_charging_one_limit_beyond_its_capacity_are_a_413() {
    for keeps in [false, true] {
        let clock = ManualClock::new();
        let bucket = Arc::new(TokenBucket::with_clock(hourly(5), clock.clone()));
        let layer = charging_one_bucket(&bucket, &["reads", "writes"], 3, keeps);
        for _ in 0..3 {
            let response = send(&layer, request(None, 200)).await;
            assert_eq!(
                response.status(),
                StatusCode::PAYLOAD_TOO_LARGE,
                "keeps: {keeps}"
            );
            assert!(response.headers().get("retry-after").is_none());
            clock.advance(Duration::from_secs(3600));
        }
        assert_eq!(bucket.available(), 5);
    }
}

/// Two rules charging one bucket 2 each: once it is spent, a request waits
/// for all 4 tokens it needs (40 s at one per 10 s), not for the 2 one rule
/// needs alone; and a client that waits its Retry-After out is admitted.
#[tokio::test]
async fn the_retry_after_of_rules_sharing_a_limit_lets_the_request_through() {
    for keeps in [false, true] {
        let clock = ManualClock::new();
        let bucket = Arc::new(TokenBucket::with_clock(every_ten_seconds(4), clock.clone()));
        let layer = charging_one_bucket(&bucket, &["reads", "writes"], 2, keeps);
        assert_eq!(
            send(&layer, request(None, 200)).await.status(),
            StatusCode::OK
        );
        let refused = send(&layer, request(None, 200)).await;
        assert_eq!(
            refused.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "keeps: {keeps}"
        );
        assert_eq!(refused.headers()["retry-after"], "40", "keeps: {keeps}");
        clock.advance(Duration::from_secs(39));
        let early = send(&layer, request(None, 200)).await;
        assert_eq!(
            early.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "keeps: {keeps}"
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            send(&layer, request(None, 200)).await.status(),
            StatusCode::OK
        );
    }
}

/// Every rule whose limit would refuse what the request charges it in all
/// is violated: of two rules charging 2 each of a bucket holding 3, the
/// first passes alone, but not beside the second.
#[tokio::test]
async fn every_rule_charging_a_short_limit_is_violated() {
    for keeps in [false, true] {
        let clock = ManualClock::new();
        let bucket = Arc::new(TokenBucket::with_clock(every_ten_seconds(4), clock.clone()));
        bucket.try_acquire(1).unwrap();
        let layer = charging_one_bucket(&bucket, &["reads", "writes"], 2, keeps);
        let refused = send(&layer, request(None, 200)).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()["retry-after"], "10", "keeps: {keeps}");
        let body = http_body_util::BodyExt::collect(refused.into_body())
            .await
            .unwrap()
            .to_bytes();
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            doc["violated-policies"],
            serde_json::json!(["writes", "reads"]),
            "keeps: {keeps}"
        );
    }
}

#[tokio::test]
async fn a_counted_keyed_limiter_is_a_keyed_rule_whose_decisions_are_counted() {
    let clock = ManualClock::new();
    let limiter = Arc::new(Counted::new(
        KeyedLimiter::builder(hourly(2))
            .clock(clock.clone())
            .build::<Account>(),
    ));
    let rule = Rule::keyed(
        PolicyName::new("account").unwrap(),
        Arc::clone(&limiter),
        extract::extension::<Account>(),
    )
    .give_back_on([StatusCode::UNAUTHORIZED]);
    let mut service = RateLimitLayer::builder()
        .rule(rule)
        .build()
        .layer(tower::service_fn(answer));
    let mut statuses = Vec::new();
    for status in [200, 401, 200, 200] {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request(Some(1), status))
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    // The 401 was given back, so the third request fits and the fourth does not.
    assert_eq!(statuses, [200, 401, 200, 429]);
    let stats = limiter.stats();
    assert_eq!((stats.admitted, stats.abandoned, stats.denied), (3, 1, 1));
}

/// Buckets made ahead for a fixed set of accounts: a keyed limiter of the
/// caller's own.
struct TwoAccounts([TokenBucket<ManualClock>; 2]);

impl PerKey for TwoAccounts {
    type Key = Account;

    fn key<'a, Q>(&'a self, key: &'a Q) -> impl Advertised + 'a
    where
        Q: KeyRef<Account> + Sync + ?Sized,
    {
        let Account(index) = key.to_owned();
        &self.0[index as usize % 2]
    }

    fn shape(&self) -> Shape {
        self.0[0].shape()
    }
}

#[tokio::test]
async fn a_keyed_limiter_of_the_callers_own_is_a_keyed_rule() {
    let clock = ManualClock::new();
    let bucket = || TokenBucket::with_clock(hourly(1), clock.clone());
    let limiter = Arc::new(TwoAccounts([bucket(), bucket()]));
    let rule = Rule::keyed(
        PolicyName::new("account").unwrap(),
        Arc::clone(&limiter),
        extract::extension::<Account>(),
    );
    assert_eq!(rule.policy().quota(), 1);
    let mut service = RateLimitLayer::builder()
        .rule(rule)
        .build()
        .layer(tower::service_fn(answer));
    let mut statuses = Vec::new();
    for account in [0, 0, 1, 1] {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request(Some(account), 200))
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 429, 200, 429]);
    assert_eq!((limiter.0[0].available(), limiter.0[1].available()), (0, 0));
}

/// Two reports in flight per account, the handler held by a gate.
fn in_flight_layer(limiter: &Arc<KeyedConcurrencyLimiter<Account>>) -> RateLimitLayer {
    RateLimitLayer::builder()
        .rule(Rule::in_flight(
            PolicyName::new("reports").unwrap(),
            Arc::clone(limiter),
            extract::extension::<Account>(),
        ))
        .build()
}

fn gated(account: u32, gate: &Gate) -> Request<Full<Bytes>> {
    let mut request = request(Some(account), 200);
    request.extensions_mut().insert(gate.clone());
    request
}

async fn problem<B: Body<Data = Bytes>>(response: Response<B>) -> serde_json::Value
where
    B::Error: std::fmt::Debug,
{
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn an_in_flight_rule_holds_a_permit_until_the_inner_service_answers() {
    let limiter = Arc::new(KeyedConcurrencyLimiter::<Account>::new(2).unwrap());
    let mut service = in_flight_layer(&limiter).layer(tower::service_fn(answer));
    let (first_gate, second_gate) = (Gate::default(), Gate::default());
    let mut first = Box::pin(service.ready().await.unwrap().call(gated(1, &first_gate)));
    let mut second = Box::pin(service.ready().await.unwrap().call(gated(1, &second_gate)));
    assert!(poll_once(&mut first).is_pending());
    assert!(poll_once(&mut second).is_pending());
    assert_eq!(limiter.in_flight(&Account(1)), 2);
    // A third for the same account finds no room: 429, no wait to promise.
    let third = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 200))
        .await
        .unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(third.headers().get("retry-after").is_none());
    assert!(third.headers().get("ratelimit-policy").is_none());
    assert_eq!(
        problem(third).await["violated-policies"],
        serde_json::json!(["reports"])
    );
    // Another account is not affected.
    let other = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(2), 200))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(limiter.in_flight(&Account(2)), 0);
    // The first answers: its unit comes back, and a new request fits.
    first_gate.0.notify_one();
    assert_eq!(first.await.unwrap().status(), StatusCode::OK);
    assert_eq!(limiter.in_flight(&Account(1)), 1);
    let mut fourth = Box::pin(service.ready().await.unwrap().call(gated(1, &first_gate)));
    assert!(poll_once(&mut fourth).is_pending());
    assert_eq!(limiter.in_flight(&Account(1)), 2);
    // Requests dropped unanswered (the client hung up) release theirs.
    drop((second, fourth));
    assert_eq!(limiter.in_flight(&Account(1)), 0);
    assert_eq!(limiter.len(), 0);
}

#[tokio::test]
async fn a_request_a_token_rule_refuses_holds_no_permit() {
    let clock = ManualClock::new();
    let tokens = per_account(hourly(2), &clock);
    let in_flight = Arc::new(KeyedConcurrencyLimiter::<Account>::new(1).unwrap());
    let layer = RateLimitLayer::builder()
        .rule(account_rule(&tokens))
        .rule(Rule::in_flight(
            PolicyName::new("reports").unwrap(),
            Arc::clone(&in_flight),
            extract::extension::<Account>(),
        ))
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    let gate = Gate::default();
    let mut held = Box::pin(service.ready().await.unwrap().call(gated(1, &gate)));
    assert!(poll_once(&mut held).is_pending());
    assert_eq!(
        (
            in_flight.in_flight(&Account(1)),
            tokens.available(&Account(1))
        ),
        (1, 1)
    );
    // No permit is free: refused by the in-flight rule, and no token taken.
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 200))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(tokens.available(&Account(1)), 1);
    gate.0.notify_one();
    assert_eq!(held.await.unwrap().status(), StatusCode::OK);
    let admitted = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 200))
        .await
        .unwrap();
    assert_eq!(admitted.status(), StatusCode::OK);
    // A permit is free, the tokens are not: refused by the token rule,
    // whose refusal advertises its own policy only, and no permit is held.
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 200))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(in_flight.in_flight(&Account(1)), 0);
    assert_eq!(refused.headers()["retry-after"], "3600");
    let policy = refused.headers()["ratelimit-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.starts_with("\"account\""), "{policy}");
    assert!(!policy.contains("reports"), "{policy}");
    assert_eq!(
        problem(refused).await["violated-policies"],
        serde_json::json!(["account"])
    );
}

#[tokio::test]
async fn an_in_flight_rule_answers_a_heavy_request_413_a_full_key_table_503_and_no_key_400() {
    let limiter = Arc::new(
        KeyedConcurrencyLimiter::<Account>::with_max_keys(2, NonZeroUsize::new(1).unwrap().into())
            .unwrap(),
    );
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::in_flight(
                PolicyName::new("reports").unwrap(),
                Arc::clone(&limiter),
                extract::extension::<Account>(),
            )
            .cost(|parts| if parts.uri.path() == "/heavy" { 3 } else { 1 }),
        )
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    let mut heavy = request(Some(1), 200);
    *heavy.uri_mut() = "/heavy".parse().unwrap();
    let heavy = service.ready().await.unwrap().call(heavy).await.unwrap();
    assert_eq!(heavy.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let gate = Gate::default();
    let mut held = Box::pin(service.ready().await.unwrap().call(gated(1, &gate)));
    assert!(poll_once(&mut held).is_pending());
    // One key in flight is the cap: a second key is the server's shortage.
    let other = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(2), 200))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(other.headers()["retry-after"], "1");
    let anonymous = service
        .ready()
        .await
        .unwrap()
        .call(request(None, 200))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::BAD_REQUEST);
    gate.0.notify_one();
    assert_eq!(held.await.unwrap().status(), StatusCode::OK);
    assert_eq!(limiter.len(), 0);
}

#[tokio::test]
async fn in_flight_rules_skip_no_key_and_cost_0_refuse_a_bad_cost_and_release_every_permit_on_a_refusal()
 {
    let clock = ManualClock::new();
    let tokens = per_account(hourly(10), &clock);
    let reports = Arc::new(KeyedConcurrencyLimiter::<Account>::new(5).unwrap());
    let exports = Arc::new(KeyedConcurrencyLimiter::<Account>::new(1).unwrap());
    let in_flight = |name: &str, limiter: &Arc<KeyedConcurrencyLimiter<Account>>| {
        Rule::in_flight(
            PolicyName::new(name).unwrap(),
            Arc::clone(limiter),
            extract::extension::<Account>(),
        )
    };
    let layer = RateLimitLayer::builder()
        .rule(account_rule(&tokens).on_missing_key(MissingKey::Skip))
        .rule(
            in_flight("reports", &reports)
                .on_missing_key(MissingKey::Skip)
                .try_cost(|parts| match parts.uri.path() {
                    "/free" => Ok(0),
                    "/bad" => Err(CostError::InvalidContentLength),
                    _ => Ok(1),
                }),
        )
        .rule(in_flight("exports", &exports).on_missing_key(MissingKey::Skip))
        .advertise_on_success(true)
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    // No key: every rule skips it.
    let anonymous = service
        .ready()
        .await
        .unwrap()
        .call(request(None, 200))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::OK);
    // A cost of 0 holds no "reports" unit; the fields advertise the token
    // rule alone.
    let mut free = request(Some(1), 200);
    *free.uri_mut() = "/free".parse().unwrap();
    let gate = Gate::default();
    free.extensions_mut().insert(gate.clone());
    let mut free = Box::pin(service.ready().await.unwrap().call(free));
    assert!(poll_once(&mut free).is_pending());
    assert_eq!(
        (
            reports.in_flight(&Account(1)),
            exports.in_flight(&Account(1))
        ),
        (0, 1)
    );
    // The second in-flight rule refuses: the first's permit is released,
    // and no token is taken.
    let available = tokens.available(&Account(1));
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(request(Some(1), 200))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        problem(refused).await["violated-policies"],
        serde_json::json!(["exports"])
    );
    assert_eq!(reports.in_flight(&Account(1)), 0);
    assert_eq!(tokens.available(&Account(1)), available);
    // A cost that cannot be read is the cost error's 4xx, and holds nothing.
    let mut bad = request(Some(1), 200);
    *bad.uri_mut() = "/bad".parse().unwrap();
    let bad = service.ready().await.unwrap().call(bad).await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(reports.in_flight(&Account(1)), 0);
    gate.0.notify_one();
    let free = free.await.unwrap();
    assert_eq!(free.status(), StatusCode::OK);
    let policy = free.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(
        policy.starts_with("\"account\"") && !policy.contains("reports"),
        "{policy}"
    );
    assert!(!policy.contains("exports"), "{policy}");
    assert_eq!((reports.len(), exports.len()), (0, 0));
}

#[tokio::test]
async fn a_refusal_hook_shapes_every_refusal_by_a_limit_and_nothing_else() {
    let clock = ManualClock::new();
    let bucket = Arc::new(TokenBucket::with_clock(
        Quota::per_second(3).unwrap(),
        clock.clone(),
    ));
    let reports = Arc::new(KeyedConcurrencyLimiter::<Account>::new(1).unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::global(PolicyName::new("global").unwrap(), Arc::clone(&bucket))
                .when(|parts| parts.uri.path() == "/tokens"),
        )
        .rule(
            Rule::in_flight(
                PolicyName::new("reports").unwrap(),
                Arc::clone(&reports),
                extract::extension::<Account>(),
            )
            .when(|parts| parts.uri.path() == "/reports"),
        )
        .on_refusal({
            let seen = Arc::clone(&seen);
            move |refusal| {
                let names: Vec<String> = refusal
                    .violated()
                    .iter()
                    .map(|name| name.as_str().to_owned())
                    .collect();
                seen.lock()
                    .unwrap()
                    .push((refusal.status(), names, refusal.retry_after()));
                // Only token refusals are reshaped; others keep the default.
                let wait = refusal.retry_after()?;
                let mut response = Response::new(Bytes::from(format!("{}", wait.as_nanos())));
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                Some(response)
            }
        })
        .build();
    let mut service = layer.layer(tower::service_fn(answer));
    let to = |path: &str, account: Option<u32>| {
        let mut request = request(account, 200);
        *request.uri_mut() = path.parse().unwrap();
        request
    };
    for _ in 0..3 {
        let admitted = service
            .ready()
            .await
            .unwrap()
            .call(to("/tokens", None))
            .await
            .unwrap();
        assert_eq!(admitted.status(), StatusCode::OK);
    }
    // The fourth: the hook's answer, carrying the exact wait of 3/s.
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(to("/tokens", None))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    use http_body_util::BodyExt;
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"333333334");
    // An in-flight refusal reaches it without a wait, and keeps the default.
    let gate = Gate::default();
    let mut held = to("/reports", Some(1));
    held.extensions_mut().insert(gate.clone());
    let mut held = Box::pin(service.ready().await.unwrap().call(held));
    assert!(poll_once(&mut held).is_pending());
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(to("/reports", Some(1)))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        problem(refused).await["violated-policies"],
        serde_json::json!(["reports"])
    );
    // A request no rule can charge (no key) is not a refusal: the hook
    // never sees it.
    let anonymous = service
        .ready()
        .await
        .unwrap()
        .call(to("/reports", None))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::BAD_REQUEST);
    gate.0.notify_one();
    assert_eq!(held.await.unwrap().status(), StatusCode::OK);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (
                StatusCode::TOO_MANY_REQUESTS,
                vec!["global".to_owned()],
                Some(Duration::from_nanos(333_333_334))
            ),
            (
                StatusCode::TOO_MANY_REQUESTS,
                vec!["reports".to_owned()],
                None
            ),
        ]
    );
    // The refusal charged nothing: the bucket is as three admissions left it.
    assert_eq!(bucket.retry_after(1), Ok(Duration::from_nanos(333_333_334)));
}
