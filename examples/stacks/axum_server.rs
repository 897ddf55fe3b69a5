//! An axum server behind the tollgate layer: a per-client limit (the client
//! resolved from X-Forwarded-For, believed only from 127.0.0.1), a global
//! limit, and a per-byte limit on uploads. Over a limit it answers 429 with
//! Retry-After, the RateLimit fields and a problem+json body; an upload
//! without a readable Content-Length gets 400, a chunked one 411.
//!
//!     cargo run -p tollgate-examples --example axum_server [-- PORT]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::http::{Jitter, PolicyName, QuotaUnit};
use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
use tollgate::{KeyedLimiter, Quota, TokenBucket};

/// The server's routes behind its rules, `per_client` each client's
/// quota. Serve it with its peer addresses, as `main` does.
pub fn app(per_client: Quota) -> Result<Router, Box<dyn std::error::Error>> {
    // Only the local reverse proxy may say who the client is; anyone else is
    // keyed on its own address. For this demo that "proxy" is curl on this
    // machine, so any local client can choose its key: in production, trust
    // your proxies' addresses only, never a port that clients reach.
    let resolver = ForwardedResolver::new(
        HeaderSource::XForwardedFor,
        TrustedProxies::parse(["127.0.0.1"])?,
    );
    // The peer is read from axum's `ConnectInfo` (feature `axum`): the
    // server below is made with `into_make_service_with_connect_info`, and
    // without it every request is answered 500, reported once in the log.
    let client = extract::forwarded(resolver, extract::peer_ip);

    let per_client = Arc::new(
        KeyedLimiter::builder(per_client)
            .max_keys(100_000.try_into()?)
            .build(),
    );
    // 50 per second in all.
    let global = Arc::new(TokenBucket::new(Quota::per_second(50)?));
    // Uploads: 1 MiB at once, 64 KiB a second, charged by the length the
    // request declares before its body is read.
    let upload_bytes = Rule::global(
        PolicyName::new("upload-bytes")?,
        Arc::new(TokenBucket::new(Quota::new(
            1 << 20,
            64 << 10,
            Duration::from_secs(1),
        )?)),
    )
    .try_cost(extract::content_length)
    .when(|parts| parts.uri.path() == "/upload");
    let per_byte = upload_bytes
        .policy()
        .clone()
        .with_unit(QuotaUnit::ContentBytes);
    let upload_bytes = upload_bytes.with_policy(per_byte);
    let layer = RateLimitLayer::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-client")?,
            per_client,
            client,
        ))
        .rule(Rule::global(PolicyName::new("global")?, global))
        .rule(upload_bytes)
        .jitter(Jitter::up_to(1))
        .advertise_on_success(true)
        .build();

    Ok(Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route(
            "/upload",
            post(|body: String| async move { format!("{} bytes\n", body.len()) }),
        )
        .layer(layer))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 3000,
    };
    // Bursts of 5 per client, refilled at 1 per second.
    let app = app(Quota::new(5, 1, Duration::from_secs(1))?)?;
    let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let url = format!("http://{}", listener.local_addr()?);
    println!("listening on {url}");
    println!("try:");
    println!("  for i in $(seq 7); do curl -si {url}/ | head -n 12; echo; done");
    println!("  # another client behind the trusted proxy gets its own budget:");
    println!("  curl -si -H 'X-Forwarded-For: 203.0.113.9' {url}/");
    println!("  # uploads are charged by Content-Length; a chunked one is refused with 411:");
    println!("  curl -si --data-binary 'some bytes' {url}/upload");
    println!("  curl -si -H 'Transfer-Encoding: chunked' --data-binary 'some bytes' {url}/upload");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
