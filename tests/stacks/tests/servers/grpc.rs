//! gRPC calls through the tower layer (feature `tonic`), on tonic's server
//! with its generated health service: a refused call is a trailers-only
//! gRPC status a client acts on (RESOURCE_EXHAUSTED with the decision's
//! exact wait in `RetryInfo` and the policy in `QuotaFailure`, the RateLimit
//! fields as metadata), the layer's other answers have the gRPC codes that
//! fit, and the peer comes from tonic's `TcpConnectInfo`. Checked with
//! tonic's client and with grpcio's (`tests/stacks/tests/servers/grpc/client.py`), a second
//! implementation.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::concurrency::KeyedConcurrencyLimiter;
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::identity::AddrKey;
use tollgate::{KeyedLimiter, Limit, ManualClock, Quota};
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;
use tower::{Layer, ServiceExt};

use tollgate_test_support::pki;

/// Two calls, then one back a minute: with the clock frozen, the third
/// call waits exactly 60 s.
fn two_a_minute() -> Quota {
    Quota::new(2, 1, Duration::from_secs(60)).unwrap()
}

/// Serves tonic's health service behind `layer` on an ephemeral port of
/// 127.0.0.1 until the test's runtime ends.
async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    addr
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap();
    HealthClient::new(channel.connect().await.unwrap())
}

fn per_caller() -> Arc<KeyedLimiter<AddrKey, ManualClock>> {
    Arc::new(
        KeyedLimiter::builder(two_a_minute())
            .clock(ManualClock::new())
            .build(),
    )
}

/// The tonic client's third call is RESOURCE_EXHAUSTED, its RetryInfo the
/// wait the limiter decided for the caller's key (read back from the
/// limiter, not from a header), its QuotaFailure naming the policy, and the
/// RateLimit fields in its metadata; the caller is keyed by the address
/// tonic's `TcpConnectInfo` carries.
#[tokio::test]
async fn a_refused_call_is_resource_exhausted_with_the_exact_wait() {
    let limiter = per_caller();
    let rule = Rule::keyed(
        PolicyName::new("per-caller").unwrap(),
        Arc::clone(&limiter),
        extract::peer_addr,
    );
    let addr = serve(RateLimitLayer::builder().rule(rule).build()).await;
    let mut client = client(addr).await;
    for _ in 0..2 {
        client.check(HealthCheckRequest::default()).await.unwrap();
    }
    let refused = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");

    let caller = AddrKey::from(IpAddr::from([127, 0, 0, 1]));
    assert_eq!(limiter.len(), 1, "one key: the caller's address");
    let decided = limiter.key(&caller).retry_after(1).unwrap();
    assert_eq!(decided, Duration::from_secs(60));
    let details = refused.get_error_details();
    assert_eq!(details.retry_info().unwrap().retry_delay, Some(decided));
    let violations = &details.quota_failure().unwrap().violations;
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].subject, "per-caller");
    // The fields as metadata: 2 per 120 s (the bucket's time to fill), none
    // left, the next in 60 s, partitioned by a key that hides the address.
    let metadata = refused.metadata();
    let field = |name| metadata.get(name).unwrap().to_str().unwrap();
    assert!(field("ratelimit-policy").starts_with(r#""per-caller";q=2;w=120;pk="#));
    assert!(field("ratelimit").starts_with(r#""per-caller";r=0;t=60;pk="#));
    assert_eq!(field("retry-after"), "60");
}

/// Over tonic's own TLS the caller is keyed by the address in
/// `TlsConnectInfo<TcpConnectInfo>`, as over TCP.
#[tokio::test]
async fn a_caller_over_tls_is_keyed_by_its_address() {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
    let pki = pki::Pki::generate();
    let limiter = per_caller();
    let rule = Rule::keyed(
        PolicyName::new("per-caller").unwrap(),
        Arc::clone(&limiter),
        extract::peer_addr,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(&pki.cert_pem, &pki.key_pem));
    tokio::spawn(
        Server::builder()
            .tls_config(tls)
            .unwrap()
            .layer(RateLimitLayer::builder().rule(rule).build())
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let trust = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca_pem))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(trust)
        .unwrap();
    let mut client = HealthClient::new(channel.connect().await.unwrap());
    for _ in 0..2 {
        client.check(HealthCheckRequest::default()).await.unwrap();
    }
    let refused = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let caller = AddrKey::from(IpAddr::from([127, 0, 0, 1]));
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.key(&caller).available(), 0);
}

/// Work in flight at its limit is RESOURCE_EXHAUSTED with a QuotaFailure
/// naming the rule, as docs/grpc.md says, and no RetryInfo: work ends when
/// it ends. The caller's one slot is held from outside the server, so the
/// call finds it taken however the server schedules it.
#[tokio::test]
async fn work_in_flight_at_its_limit_is_resource_exhausted_with_a_quota_failure() {
    let slots = Arc::new(KeyedConcurrencyLimiter::<AddrKey>::new(1).unwrap());
    let caller = AddrKey::from(IpAddr::from([127, 0, 0, 1]));
    let _held = slots.try_acquire(&caller, 1).unwrap();
    let rule = Rule::in_flight(
        PolicyName::new("slots").unwrap(),
        Arc::clone(&slots),
        extract::peer_addr,
    );
    let addr = serve(RateLimitLayer::builder().rule(rule).build()).await;
    let refused = client(addr)
        .await
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let details = refused.get_error_details();
    assert!(details.retry_info().is_none(), "{refused:?}");
    let violations = &details.quota_failure().unwrap().violations;
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].subject, "slots");
    assert_eq!(slots.in_flight(&caller), 1, "the refused call held nothing");
}

/// A call without the key a rule needs is UNAUTHENTICATED; a new key
/// beyond the key table's cap (the server's shortage) is UNAVAILABLE with
/// a RetryInfo: each code one a gRPC client handles, never INTERNAL from a
/// JSON body read as a message.
#[tokio::test]
async fn the_layers_other_answers_have_the_codes_that_fit() {
    let one_key = Arc::new(
        KeyedLimiter::builder(two_a_minute())
            .clock(ManualClock::new())
            .max_keys(NonZeroUsize::new(1).unwrap().into())
            .sweep_interval(None)
            .build::<String>(),
    );
    let api_key = extract::header(HeaderName::from_static("x-api-key"));
    let rule = Rule::keyed(PolicyName::new("per-api-key").unwrap(), one_key, api_key);
    let addr = serve(RateLimitLayer::builder().rule(rule).build()).await;
    let mut client = client(addr).await;

    let anonymous = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");
    assert!(anonymous.message().contains("per-api-key"), "{anonymous:?}");

    let as_key = |key: &'static str| {
        let mut request = tonic::Request::new(HealthCheckRequest::default());
        request
            .metadata_mut()
            .insert("x-api-key", key.parse().unwrap());
        request
    };
    client.check(as_key("a")).await.unwrap();
    let crowded = client.check(as_key("b")).await.unwrap_err();
    assert_eq!(crowded.code(), Code::Unavailable, "{crowded:?}");
    assert!(crowded.get_error_details().retry_info().is_some());
    assert!(crowded.get_error_details().quota_failure().is_none());
}

async fn ok<B>(_: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::new())))
}

/// What marks a call as gRPC is its content-type, with or without a
/// message-format suffix, in any case; anything else (a JSON API beside
/// the gRPC one) keeps its 429 and problem+json.
#[tokio::test]
async fn only_grpc_content_types_get_grpc_answers() {
    let limiter = Arc::new(
        KeyedLimiter::builder(Quota::new(1, 1, Duration::from_secs(60)).unwrap())
            .clock(ManualClock::new())
            .build::<()>(),
    );
    let rule = Rule::keyed(
        PolicyName::new("all").unwrap(),
        limiter,
        |_: &http::request::Parts| Some(()),
    );
    let layer = RateLimitLayer::builder().rule(rule).build();
    let admitted = layer
        .layer(tower::service_fn(ok::<Full<Bytes>>))
        .oneshot(Request::new(Full::new(Bytes::new())));
    assert_eq!(admitted.await.unwrap().status(), StatusCode::OK);
    let cases = [
        ("application/grpc", true),
        ("application/grpc+proto", true),
        ("Application/GRPC;charset=utf-8", true),
        ("application/grpc-web", false),
        ("application/grpcx", false),
        ("application/json", false),
    ];
    for (content_type, grpc) in cases {
        let request = Request::post("/grpc.health.v1.Health/Check")
            .header("content-type", content_type)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = layer
            .layer(tower::service_fn(ok::<Full<Bytes>>))
            .oneshot(request)
            .await
            .unwrap();
        if grpc {
            assert_eq!(response.status(), StatusCode::OK, "{content_type}");
            assert_eq!(response.headers()["content-type"], "application/grpc");
            let status = tonic::Status::from_header_map(response.headers()).unwrap();
            assert_eq!(status.code(), Code::ResourceExhausted, "{content_type}");
            let wait = status.get_error_details().retry_info().unwrap().retry_delay;
            assert_eq!(wait, Some(Duration::from_secs(60)));
            use http_body::Body as _;
            assert!(response.body().is_end_stream(), "trailers-only: no body");
        } else {
            assert_eq!(
                response.status(),
                StatusCode::TOO_MANY_REQUESTS,
                "{content_type}"
            );
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
        }
    }
}

/// grpcio (the C-core gRPC implementation, from PyPI) sees the same
/// refusal as tonic's client: RESOURCE_EXHAUSTED after two calls, the
/// exact wait in RetryInfo, the policy in QuotaFailure. Under `CI` a
/// missing grpcio fails the test (`.ci/run` installs it); elsewhere the
/// test says it did not run.
#[tokio::test]
async fn grpcio_reads_the_same_refusal() {
    let probe = Command::new("python3")
        .args(["-c", "import grpc, grpc_status"])
        .output();
    if !probe.as_ref().is_ok_and(|out| out.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with grpcio and grpcio-status is needed under CI: {probe:?}"
        );
        eprintln!("grpcio_reads_the_same_refusal: NOT RUN (pip install grpcio grpcio-status)");
        return;
    }
    let limiter = per_caller();
    let rule = Rule::keyed(
        PolicyName::new("per-caller").unwrap(),
        Arc::clone(&limiter),
        extract::peer_addr,
    );
    let addr = serve(RateLimitLayer::builder().rule(rule).build()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/servers/grpc/client.py");
    let output = tokio::process::Command::new("python3")
        .args([script, &addr.to_string()])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let caller = AddrKey::from(IpAddr::from([127, 0, 0, 1]));
    let decided = limiter.key(&caller).retry_after(1).unwrap();
    assert_eq!(report["admitted"], 2, "{report}");
    assert_eq!(report["code"], "RESOURCE_EXHAUSTED", "{report}");
    assert_eq!(
        report["retry_delay_ns"],
        decided.as_nanos() as u64,
        "{report}"
    );
    assert_eq!(
        report["subjects"],
        serde_json::json!(["per-caller"]),
        "{report}"
    );
    assert_eq!(report["metadata"]["retry-after"], "60", "{report}");
    let policy = report["metadata"]["ratelimit-policy"].as_str().unwrap();
    assert!(
        policy.starts_with(r#""per-caller";q=2;w=120;pk="#),
        "{report}"
    );
}
