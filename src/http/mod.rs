//! The conversation with clients: refusals as HTTP responses, and the
//! RateLimit fields in both directions (feature `http`).
//!
//! - [`Refusal`] turns an [`AcquireError`](crate::AcquireError) or a
//!   [`HierarchyError`](crate::HierarchyError) into a 429 (or 503, 413, 500)
//!   with Retry-After (rounded up: [`delay_seconds`]), `Cache-Control:
//!   no-store`, a problem+json body (RFC 9457) and, when given, the
//!   RateLimit fields.
//! - [`RateLimitPolicy`] and [`ServiceLimit`] are the members of the
//!   `RateLimit-Policy` and `RateLimit` fields of
//!   draft-ietf-httpapi-ratelimit-headers (-10/-11), serialised with `sfv` by
//!   [`rate_limit_policy_value`] and [`rate_limit_value`].
//!   [`RateLimitPolicy::from_quota`] maps a token bucket onto the draft's
//!   quota-and-window model; [`PartitionKeys`] derives `pk` values that never
//!   expose the key; [`Jitter`] spreads advertised windows.
//! - [`parse_rate_limit`] and [`parse_rate_limit_policy`] read the fields on
//!   the client, ignoring what is malformed, and [`rate_limit_wait`] turns
//!   them into a wait for [`retry`](crate::retry).
//! - With feature `tonic`, [`Refusal::to_grpc_status`] and
//!   [`Refusal::into_grpc_response`] answer a gRPC call: `RESOURCE_EXHAUSTED`
//!   with the exact wait in a `google.rpc.RetryInfo`.
//! - With feature `rules`, [`rules::Rules`] decide all of this for a
//!   request head, in an engine that knows no framework; with feature
//!   `tower`, [`tower::RateLimitLayer`] is that engine as tower middleware
//!   (answering gRPC calls in gRPC with feature `tonic`), and with feature
//!   `actix`, [`actix::RateLimit`] as actix-web middleware.
//!
//! [`docs/http.md`](crate::guide::http) has the response contract and the reasoning.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Limit, ManualClock, Quota, TokenBucket};
//! use tollgate::http::{PolicyName, RateLimitPolicy, Refusal, ServiceLimit, delay_seconds};
//!
//! let quota = Quota::per_second(2)?;
//! let bucket = TokenBucket::with_clock(quota, ManualClock::new());
//! let policy = RateLimitPolicy::from_quota(PolicyName::new("per-client")?, &quota);
//! bucket.try_acquire(2)?;
//! let refused = bucket.try_acquire(1).unwrap_err();
//! let next_token = bucket.retry_after(1)?;
//! let live = ServiceLimit::new(policy.name().clone(), bucket.available())
//!     .with_reset_seconds(delay_seconds(next_token));
//! let response = Refusal::from_acquire(&refused, &policy)
//!     .with_service_limits([live])
//!     .into_response();
//! assert_eq!(response.status(), 429);
//! assert_eq!(response.headers()["ratelimit"], r#""per-client";r=0;t=1"#);
//! assert_eq!(response.headers()["ratelimit-policy"], r#""per-client";q=2;w=1"#);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "actix")]
pub mod actix;
mod error;
mod fields;
#[cfg(feature = "tonic")]
mod grpc;
mod jitter;
mod parse;
mod partition;
mod policy;
mod problem;
mod refusal;
// Without an adapter (tower, actix) nothing calls the engine: only the
// rules' vocabulary is reachable.
#[cfg(feature = "rules")]
#[cfg_attr(
    not(any(feature = "tower", feature = "actix")),
    allow(dead_code, unused_imports)
)]
pub mod rules;
mod seconds;
#[cfg(feature = "tower")]
pub mod tower;

pub use error::HttpError;
pub use fields::{
    RATELIMIT, RATELIMIT_POLICY, ServiceLimit, rate_limit_policy_value, rate_limit_value,
};
pub use jitter::Jitter;
pub use parse::{
    ParsedPolicy, ParsedServiceLimit, parse_rate_limit, parse_rate_limit_policy, rate_limit_wait,
};
pub use partition::{PartitionKey, PartitionKeys};
pub use policy::{PolicyName, QuotaUnit, RateLimitPolicy};
pub use problem::{PROBLEM_JSON, ProblemType};
pub use refusal::{DEFAULT_UNAVAILABLE_RETRY, Refusal};
pub use seconds::delay_seconds;
