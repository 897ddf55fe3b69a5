//! The tower layer end to end: an axum server on a loopback port, hit by
//! reqwest or by raw TCP clients that hang up. A `ManualClock` that nobody
//! advances means no refill happens during a test, so counts are exact and
//! nothing depends on timing.
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use http::StatusCode;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::http::{PolicyName, parse_rate_limit, parse_rate_limit_policy};
use tollgate::identity::{AddrKey, ForwardedResolver, HeaderSource, PrefixPolicy, TrustedProxies};
use tollgate::{KeyedLimiter, Limit, ManualClock, Quota, TokenBucket};

/// Bursts of `capacity`, refilled at one an hour: with the clock frozen,
/// exactly `capacity` per key.
fn quota(capacity: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_secs(3600)).unwrap()
}

/// Serves `layer` on 127.0.0.1 with an ephemeral port; returns its URL.
async fn serve(layer: RateLimitLayer) -> String {
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    format!("http://{}/", serve_app(app).await)
}

/// Serves `app` on 127.0.0.1 with an ephemeral port, with the peer address
/// in `ConnectInfo`, until the test's runtime shuts down.
async fn serve_app(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// A per-address layer behind `proxies`, plus a global limit far above it.
fn per_address_layer(capacity: u64, proxies: TrustedProxies) -> RateLimitLayer {
    let clock = ManualClock::new();
    let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, proxies);
    let per_address = Arc::new(
        KeyedLimiter::builder(quota(capacity))
            .clock(clock.clone())
            .build(),
    );
    let global = Arc::new(TokenBucket::with_clock(quota(1_000_000), clock));
    RateLimitLayer::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-address").unwrap(),
            per_address,
            extract::forwarded(resolver, extract::peer_ip),
        ))
        .rule(Rule::global(PolicyName::new("global").unwrap(), global))
        .build()
}

/// Sends one GET, with an X-Forwarded-For value if given.
async fn get_as(client: &reqwest::Client, url: &str, forwarded: Option<&str>) -> reqwest::Response {
    let mut request = client.get(url);
    if let Some(value) = forwarded {
        request = request.header("x-forwarded-for", value);
    }
    request.send().await.unwrap()
}

/// Checks everything a 429 must carry.
async fn check_refusal(response: reqwest::Response) {
    assert_eq!(response.status(), 429);
    let headers = response.headers().clone();
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["content-type"], "application/problem+json");
    // Both fields are well-formed Lists by sfv's own parser, and by ours.
    for field in ["ratelimit", "ratelimit-policy"] {
        let value = headers[field].as_bytes();
        assert!(
            sfv::Parser::new(value).parse_list().is_ok(),
            "{field}: {value:?}"
        );
    }
    let limits = parse_rate_limit(headers.get_all("ratelimit").iter().map(|v| v.as_bytes()));
    let mine = limits.iter().find(|l| l.policy == "per-address").unwrap();
    assert_eq!(mine.remaining, 0);
    assert!(mine.partition_key.as_ref().is_some_and(|pk| pk.len() == 8));
    assert!(mine.reset.is_some_and(|t| t.as_secs() <= retry));
    let policies = parse_rate_limit_policy(
        headers
            .get_all("ratelimit-policy")
            .iter()
            .map(|v| v.as_bytes()),
    );
    assert_eq!(policies.len(), 2);
    assert_eq!(policies[0].policy, "per-address");
    let doc: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(
        doc["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(doc["status"], 429);
    assert_eq!(doc["violated-policies"], serde_json::json!(["per-address"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_admit_exactly_the_quota() {
    const QUOTA: u64 = 37;
    let url = serve(per_address_layer(QUOTA, TrustedProxies::none())).await;
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..25 {
                    let response = get_as(&client, &url, None).await;
                    if response.status() == 200 {
                        admitted += 1;
                    } else {
                        check_refusal(response).await;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert_eq!(admitted, QUOTA);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_gives_each_forwarded_client_its_own_budget() {
    let url = serve(per_address_layer(
        3,
        TrustedProxies::parse(["127.0.0.1"]).unwrap(),
    ))
    .await;
    let client = reqwest::Client::new();
    for forwarded in ["203.0.113.1", "203.0.113.2", "198.51.100.7, 203.0.113.3"] {
        for _ in 0..3 {
            assert_eq!(get_as(&client, &url, Some(forwarded)).await.status(), 200);
        }
        check_refusal(get_as(&client, &url, Some(forwarded)).await).await;
    }
    // A client cannot escape by prepending addresses: the rightmost
    // untrusted entry (203.0.113.1) is still the one keyed.
    check_refusal(get_as(&client, &url, Some("192.0.2.99, 203.0.113.1")).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoofed_header_from_an_untrusted_peer_buys_nothing() {
    let url = serve(per_address_layer(3, TrustedProxies::none())).await;
    let client = reqwest::Client::new();
    let mut admitted = 0;
    for i in 0..12 {
        let spoof = format!("203.0.113.{i}");
        let response = get_as(&client, &url, Some(&spoof)).await;
        if response.status() == 200 {
            admitted += 1;
        } else {
            check_refusal(response).await;
        }
    }
    assert_eq!(admitted, 3);
}

/// What the slow handler reports: it started, or its future was dropped.
#[derive(Debug, PartialEq)]
enum Handler {
    Started,
    Dropped,
}

/// Sends [`Handler::Dropped`] when the handler's future is dropped.
struct OnDrop(mpsc::UnboundedSender<Handler>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Handler::Dropped);
    }
}

/// Writes all of `bytes` (tokio's `io-util` is not among the features).
async fn write_all(stream: &TcpStream, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        stream.writable().await.unwrap();
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("write failed: {e}"),
        }
    }
}

/// Reads until the status line is in, and returns the status.
async fn read_status(stream: &TcpStream) -> u16 {
    let mut head = Vec::new();
    let mut buf = [0; 1024];
    while !head.windows(2).any(|w| w == b"\r\n") {
        stream.readable().await.unwrap();
        match stream.try_read(&mut buf) {
            Ok(0) => panic!("the server closed without a response"),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read failed: {e}"),
        }
    }
    let line = String::from_utf8_lossy(&head);
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Over real TCP: B = 1, clock frozen; the handler waits on a
/// signal that never comes. Ten clients each connect, send one request and
/// close. hyper drops the first one's future when it sees the connection
/// close; the request stays charged all the same (the rule gives back only
/// 401 and 403, and no response arrived), so the handler starts once, the
/// other nine are answered 429, and so is a last client that waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_hang_up_stay_charged_over_tcp() {
    const CLIENTS: usize = 10;
    let per_address = Arc::new(
        KeyedLimiter::builder(quota(1))
            .clock(ManualClock::new())
            .build(),
    );
    let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::none());
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::keyed(
                PolicyName::new("per-address").unwrap(),
                Arc::clone(&per_address),
                extract::forwarded(resolver, extract::peer_ip),
            )
            .give_back_on([StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN]),
        )
        .build();
    let (events, mut handler) = mpsc::unbounded_channel();
    let never = Arc::new(Notify::new());
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let (events, never) = (events.clone(), Arc::clone(&never));
                async move {
                    let _ = events.send(Handler::Started);
                    let _dropped = OnDrop(events);
                    never.notified().await;
                    "too late"
                }
            }),
        )
        .layer(layer);
    let addr = serve_app(app).await;
    let request = b"GET / HTTP/1.1\r\nhost: tollgate.test\r\n\r\n";

    let (mut started, mut refused) = (0, 0);
    for _ in 0..CLIENTS {
        let stream = TcpStream::connect(addr).await.unwrap();
        write_all(&stream, request).await;
        tokio::select! {
            event = handler.recv() => {
                assert_eq!(event, Some(Handler::Started));
                started += 1;
                drop(stream); // the client hangs up
                // Wait for hyper to drop the handler, so the next client
                // comes after whatever the drop did. The timeout only keeps
                // a broken server from hanging the test.
                let dropped = tokio::time::timeout(Duration::from_secs(30), handler.recv()).await;
                assert_eq!(dropped.ok().flatten(), Some(Handler::Dropped));
            }
            status = read_status(&stream) => {
                assert_eq!(status, 429);
                refused += 1;
            }
        }
    }
    assert_eq!((started, refused), (1, CLIENTS - 1));
    let patient = TcpStream::connect(addr).await.unwrap();
    write_all(&patient, request).await;
    assert_eq!(read_status(&patient).await, 429);
    let me = AddrKey::new(IpAddr::from([127, 0, 0, 1]), PrefixPolicy::default());
    assert_eq!(per_address.available(&me), 0);
}

/// A slowloris upload under a per-byte rule: a chunked request head, then
/// nothing. The layer answers 411 from the head alone, without waiting for
/// (or charging 0 for) a body of undeclared length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_chunked_upload_is_answered_411_from_its_head() {
    let bytes = Arc::new(TokenBucket::with_clock(quota(1 << 20), ManualClock::new()));
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::global(PolicyName::new("upload-bytes").unwrap(), Arc::clone(&bytes))
                .try_cost(extract::content_length),
        )
        .build();
    let app = Router::new()
        .route("/upload", post(|| async { "stored" }))
        .layer(layer);
    let addr = serve_app(app).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let head =
        b"POST /upload HTTP/1.1\r\nhost: tollgate.test\r\ntransfer-encoding: chunked\r\n\r\n";
    write_all(&stream, head).await;
    assert_eq!(read_status(&stream).await, 411);
    assert_eq!(bytes.available(), 1 << 20);
}
