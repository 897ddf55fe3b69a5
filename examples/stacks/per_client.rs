//! The rule the tonic, actix-web and hyper example servers share: one
//! budget per client, keyed by the connection's peer address (an IPv6
//! client per /64, so that rotating through its own prefix buys nothing).

use std::sync::Arc;
use std::time::Duration;

use tollgate::http::PolicyName;
use tollgate::http::rules::{Rule, Rules, extract};
use tollgate::{KeyedLimiter, Quota};

/// Each client's budget when the example runs: bursts of 5, refilled at 1
/// a second.
pub fn demo_quota() -> Quota {
    Quota::new(5, 1, Duration::from_secs(1)).expect("a valid quota")
}

/// `quota` per client address, as policy "per-client". Over it a request
/// is refused with the wait: 429 with Retry-After, the RateLimit fields and
/// problem+json, or, to a gRPC call, RESOURCE_EXHAUSTED with RetryInfo.
/// Each server makes its stack's middleware of these rules.
pub fn rules(quota: Quota) -> Rules {
    let per_client = Arc::new(KeyedLimiter::new(quota));
    let name = PolicyName::new("per-client").expect("a valid policy name");
    Rules::builder()
        .rule(Rule::keyed(name, per_client, extract::peer_addr))
        .build()
}
