//! The peer address on every stack: axum's `ConnectInfo`, a bare hyper
//! server's `SocketAddr` (tonic's `TcpConnectInfo` is in `tests/stacks/tests/servers/grpc.rs`),
//! and a server that gives none, which is its own misconfiguration: a 500
//! that says so, reported once through `tracing`, never a 400 that blames
//! the client.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::{Router, routing::get};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tollgate::http::PolicyName;
use tollgate::http::tower::{MissingKey, RateLimitLayer, Rule, extract};
use tollgate::identity::AddrKey;
use tollgate::{KeyedLimiter, Limit, ManualClock, Quota, TokenBucket};
use tower::{Layer, ServiceExt};

/// `capacity` per peer, one token back an hour: with the clock frozen,
/// exactly `capacity` per peer.
fn per_peer(capacity: u64) -> Arc<KeyedLimiter<AddrKey, ManualClock>> {
    let quota = Quota::new(capacity, 1, Duration::from_secs(3600)).unwrap();
    Arc::new(
        KeyedLimiter::builder(quota)
            .clock(ManualClock::new())
            .build(),
    )
}

fn peer_rule(limiter: &Arc<KeyedLimiter<AddrKey, ManualClock>>) -> Rule {
    Rule::keyed(
        PolicyName::new("per-peer").unwrap(),
        Arc::clone(limiter),
        extract::peer_addr,
    )
}

async fn ok<B>(_: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

/// Every `tracing` event's text, as the fmt subscriber writes it.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Log {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A request the server gave no peer address is a 500 whose problem says
/// the server is misconfigured, under either missing-key policy (skipping
/// would lift the limit), charges no other rule, and is reported once per
/// rule, not once per request.
#[tokio::test]
async fn no_peer_address_is_a_500_reported_once() {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // The test's runtime runs on this thread: the layer reports here.
    let _guard = tracing::subscriber::set_default(subscriber);

    let limiter = per_peer(5);
    let global = Arc::new(TokenBucket::with_clock(
        Quota::new(10, 1, Duration::from_secs(3600)).unwrap(),
        ManualClock::new(),
    ));
    for missing in [MissingKey::Reject, MissingKey::Skip] {
        let layer = RateLimitLayer::builder()
            .rule(Rule::global(
                PolicyName::new("global").unwrap(),
                Arc::clone(&global),
            ))
            .rule(peer_rule(&limiter).on_missing_key(missing))
            .build();
        for _ in 0..3 {
            let request = Request::new(Full::new(Bytes::new()));
            let response = layer
                .layer(tower::service_fn(ok::<Full<Bytes>>))
                .oneshot(request)
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(problem["status"], 500);
            let detail = problem["detail"].as_str().unwrap();
            assert!(
                detail.contains("misconfigured") && detail.contains("per-peer"),
                "{detail}"
            );
        }
    }
    assert_eq!(global.available(), 10, "a 500 charges no rule");
    assert!(limiter.is_empty());
    let text = log.text();
    // One report per rule (two layers, two rules), each with its policy
    // and the fix.
    assert_eq!(text.matches("found none").count(), 2, "{text}");
    assert_eq!(text.matches("policy=\"per-peer\"").count(), 2, "{text}");
    assert!(
        text.contains("into_make_service_with_connect_info"),
        "{text}"
    );
    assert!(text.contains("ERROR"), "{text}");
}

async fn serve_axum(app: Router, connect_info: bool) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if connect_info {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app).await.unwrap();
        } else {
            axum::serve(listener, app).await.unwrap();
        }
    });
    addr
}

/// On axum the peer comes from `ConnectInfo`: two requests pass, the third
/// is refused for the same address; served without connect info, every
/// request is the server's 500, not the client's 400.
#[tokio::test]
async fn axum_keys_on_connect_info_and_its_absence_is_a_500() {
    for connect_info in [true, false] {
        let limiter = per_peer(2);
        let layer = RateLimitLayer::builder().rule(peer_rule(&limiter)).build();
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer);
        let url = format!("http://{}/", serve_axum(app, connect_info).await);
        let client = reqwest::Client::new();
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(client.get(&url).send().await.unwrap().status().as_u16());
        }
        if connect_info {
            assert_eq!(statuses, [200, 200, 429]);
            let key = AddrKey::from("127.0.0.1".parse::<std::net::IpAddr>().unwrap());
            assert_eq!(limiter.len(), 1);
            assert_eq!(limiter.key(&key).available(), 0);
        } else {
            assert_eq!(statuses, [500, 500, 500]);
            assert!(limiter.is_empty());
        }
    }
}

/// A bare hyper server that inserts each connection's `SocketAddr` into
/// its requests is keyed by it.
#[tokio::test]
async fn a_bare_hyper_server_keys_on_its_socket_addr() {
    let limiter = per_peer(2);
    let layer = RateLimitLayer::builder().rule(peer_rule(&limiter)).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let service = layer.layer(tower::service_fn(ok));
            let service = tower::ServiceBuilder::new()
                .map_request(move |mut request: Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(peer);
                    request
                })
                .service(service);
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)),
            );
        }
    });
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(client.get(&url).send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(limiter.len(), 1);
}
