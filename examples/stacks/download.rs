//! Downloads capped at 1 MiB/s per client: an axum server streams each
//! response body through `ThrottledBody`, paced by the client's own key
//! of a keyed limiter (its address, under the default IPv6 /64 policy),
//! and clients on this machine download over loopback and report the
//! rate they achieved. Two clients from one address share its budget;
//! with `--clients N` the first N download at once.
//!
//!     cargo run --release -p tollgate-examples --example download [-- --clients 2 --mib 4]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::{Router, routing::get};
use bytes::Bytes;
use http_body_util::StreamBody;
use tollgate::http::tower::ThrottledBody;
use tollgate::identity::{AddrKey, PrefixPolicy};
use tollgate::{KeyedLimiter, OwnedKey, Quota};

const MIB: u64 = 1 << 20;

type PerClient = Arc<KeyedLimiter<AddrKey>>;

/// `GET /`: `mib` MiB of data in 64 KiB chunks, sent at the client's rate.
async fn download(
    State((per_client, mib)): State<(PerClient, u64)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Body {
    let chunks = (0..mib * 16).map(|_| {
        Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from(vec![b'x'; 64 << 10])))
    });
    let body = StreamBody::new(futures_util::stream::iter(chunks));
    let client = OwnedKey::new(per_client, AddrKey::new(peer.ip(), PrefixPolicy::default()));
    Body::new(ThrottledBody::new(body, client))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(default)
    };
    let (clients, mib) = (flag("--clients", 1), flag("--mib", 4));

    // 1 MiB a second per client, a burst of 1 MiB.
    let per_client: PerClient = Arc::new(KeyedLimiter::new(Quota::per_second(MIB)?));
    let app = Router::new()
        .route("/", get(download))
        .with_state((Arc::clone(&per_client), mib));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await
    });

    let client = reqwest::Client::new();
    let started = Instant::now();
    let downloads = (0..clients).map(|_| {
        let client = client.clone();
        async move {
            let mut body = client.get(format!("http://{addr}/")).send().await?;
            let mut received = 0u64;
            while let Some(chunk) = body.chunk().await? {
                received += chunk.len() as u64;
            }
            Ok::<_, reqwest::Error>((received, started.elapsed()))
        }
    });
    let (mut total, mut last) = (0, std::time::Duration::ZERO);
    for (i, done) in futures_util::future::join_all(downloads)
        .await
        .into_iter()
        .enumerate()
    {
        let (received, took) = done?;
        println!(
            "client {i}: {:.2} MiB in {:.3} s",
            received as f64 / MIB as f64,
            took.as_secs_f64()
        );
        total += received;
        last = last.max(took);
    }
    // The clients all came from 127.0.0.1: one key, one budget, shared.
    let past_burst = total.saturating_sub(MIB) as f64 / MIB as f64;
    println!(
        "{} key(s): {:.3} MiB/s achieved after the 1 MiB burst (the cap: 1 MiB/s per key)",
        per_client.len(),
        past_burst / last.as_secs_f64(),
    );
    Ok(())
}
