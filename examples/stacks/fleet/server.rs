//! One node of the fleet: an axum server whose API keys share one budget
//! with every other node through a store, beside a per-address limit of its
//! own. The end-to-end test (`tests/stacks/tests/fleet_e2e.rs`) runs this same server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::HeaderName;
use tokio::net::TcpListener;
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
use tollgate::shared::{FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, Store};
use tollgate::{KeyedLimiter, Quota};

/// The name of the fleet-wide per-key rule, as refusals name it.
pub const PER_KEY_POLICY: &str = "per-api-key";

/// The header that carries a client's API key.
pub const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The fleet-wide budget of each API key: bursts of 10, refilled at 10 an
/// hour, so over a run of seconds the bound `B + r·t` is 10 per key.
pub fn per_key_quota() -> Quota {
    Quota::new(10, 10, Duration::from_secs(3600)).expect("a valid quota")
}

/// How long a node waits for the shared store before its failure policy
/// answers instead (`Closed`: a 503): the store's own timeout and the
/// allowance's. The demo and its test run every node, the store and the
/// client on one machine, often a busy 2-core one, where a Redis round
/// trip can stall for a scheduling quantum or several: an answer that
/// slow is slow, not down, and should not be a 503.
pub const STORE_WAIT: Duration = Duration::from_secs(10);

/// Serves one node on `listener` until the process ends: every request
/// spends one token of its API key's fleet-wide budget in `store` (whose
/// quota, [`per_key_quota`] in the demo, the shared rule advertises),
/// after one of its address's budget on this node.
pub async fn serve<S: Store>(
    store: Arc<S>,
    listener: TcpListener,
) -> Result<(), Box<dyn std::error::Error>> {
    // The few lines a fleet-wide per-key limit takes: a keyed allowance
    // over the shared store, and a rule keyed by the API key header.
    let mut config = KeyedAllowanceConfig::new(FailurePolicy::Closed);
    config.allowance.timeout = STORE_WAIT;
    let per_key = KeyedAllowance::new(store, config)?;
    // Each node also limits each client address on its own; in-process
    // rules are charged first, and given back if the shared one refuses.
    let per_address = Arc::new(KeyedLimiter::new(Quota::per_second(1000)?));
    let client = extract::forwarded(
        ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::none()),
        extract::peer_ip,
    );
    let layer = RateLimitLayer::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-address")?,
            per_address,
            client,
        ))
        .rule(Rule::shared(
            PolicyName::new(PER_KEY_POLICY)?,
            per_key,
            extract::header(API_KEY),
        ))
        .build();
    let app = Router::new()
        .route("/", get(|| async { "ok\n" }))
        .layer(layer);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
