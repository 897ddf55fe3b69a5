//! The example servers of `examples/stacks/` (axum, tonic, actix-web,
//! plain hyper), each served from its own file on a loopback port: after
//! its quota, a client gets the refusal the example's header documents.
//! Each example limits a client for an hour here, so no refill happens
//! during a test.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use tollgate::Quota;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

// Each example whole, its `main` included, which only `cargo run` calls
// (the example's own build finds any code of it that is really unused),
// and its own copy of the rule module the three share (`per_client.rs`),
// as in its build.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../../../../examples/stacks/actix_server.rs"]
mod actix_server;
#[allow(dead_code)]
#[path = "../../../../examples/stacks/axum_server.rs"]
mod axum_server;
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../../../../examples/stacks/hyper_server.rs"]
mod hyper_server;
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../../../../examples/stacks/tonic_server.rs"]
mod tonic_server;

/// Three requests per client, one back an hour.
const ADMITTED: usize = 3;

fn hourly() -> Quota {
    Quota::new(ADMITTED as u64, 1, Duration::from_secs(3600)).unwrap()
}

/// Sends `ADMITTED` GETs to `url`, each admitted, and returns the next
/// one's answer.
async fn past_the_quota(url: &str) -> reqwest::Response {
    let client = reqwest::Client::new();
    for _ in 0..ADMITTED {
        let response = client.get(url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.text().await.unwrap(), "hello\n");
    }
    client.get(url).send().await.unwrap()
}

/// What the HTTP examples document for a client over its quota: 429 with
/// Retry-After (a wait, and no more than the hour one token takes, plus
/// the example's `jitter`), the RateLimit fields, and a problem+json
/// naming policy "per-client".
async fn check_refusal(refused: reqwest::Response, jitter: u64) {
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let header = |name: &str| refused.headers()[name].to_str().unwrap().to_owned();
    let retry_after: u64 = header("retry-after").parse().unwrap();
    assert!((1..=3600 + jitter).contains(&retry_after), "{retry_after}");
    assert!(header("ratelimit-policy").starts_with(r#""per-client";q=3;"#));
    assert!(header("ratelimit").starts_with(r#""per-client";r=0;"#));
    assert_eq!(header("content-type"), "application/problem+json");
    let problem: serde_json::Value =
        serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    assert_eq!(problem["status"], 429);
    assert_eq!(
        problem["violated-policies"],
        serde_json::json!(["per-client"])
    );
}

/// The axum example keys a client by its address, or, from its trusted
/// proxy (127.0.0.1), by the X-Forwarded-For the proxy writes: the fourth
/// request is refused, and a client behind the proxy has its own budget.
#[tokio::test]
async fn the_axum_example_refuses_a_client_over_its_quota() {
    let app = axum_server::app(hourly()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    // Its Retry-After is raised by up to a second of jitter.
    check_refusal(past_the_quota(&url).await, 1).await;
    let behind_the_proxy = reqwest::Client::new()
        .get(&url)
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(behind_the_proxy.status(), StatusCode::OK);
}

/// The hyper example's accept loop puts the peer in each request where the
/// layer reads it: its per-client rule counts the client (a peer inserted
/// too late would make every answer a 500) and refuses the fourth request.
#[tokio::test]
async fn the_hyper_example_refuses_a_client_over_its_quota() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(hyper_server::serve(listener, hourly()));
    check_refusal(past_the_quota(&url).await, 0).await;
}

/// The actix example, through the layer's actix middleware: the same
/// answers.
#[actix_web::test]
async fn the_actix_example_refuses_a_client_over_its_quota() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    actix_web::rt::spawn(actix_server::server(listener, hourly()).unwrap());
    check_refusal(past_the_quota(&url).await, 0).await;
}

/// The tonic example refuses a caller's fourth call with
/// RESOURCE_EXHAUSTED, its RetryInfo a wait of no more than the hour one
/// token takes, its QuotaFailure naming the policy.
#[tokio::test]
async fn the_tonic_example_refuses_a_caller_over_its_quota() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(tonic_server::serve(listener, hourly()));
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap();
    let mut client = HealthClient::new(channel.connect().await.unwrap());
    for _ in 0..ADMITTED {
        client.check(HealthCheckRequest::default()).await.unwrap();
    }
    let refused = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let details = refused.get_error_details();
    let wait = details.retry_info().unwrap().retry_delay.unwrap();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(3600),
        "{wait:?}"
    );
    let violations = &details.quota_failure().unwrap().violations;
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].subject, "per-client");
}
