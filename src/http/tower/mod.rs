//! Rate limiting as tower middleware (feature `tower`), for axum, hyper
//! and any other tower-based server: an adapter over the rule engine of
//! [`http::rules`](crate::http::rules), whose vocabulary ([`Rule`],
//! [`extract`], ...) it re-exports.
//!
//! A [`RateLimitLayer`] holds a list of [`Rule`]s: a global bucket, a
//! keyed limiter, or a budget per key shared by a fleet of servers
//! ([`Rule::shared`], over a [`KeyedAllowance`](crate::shared::KeyedAllowance)),
//! with a key [`extract`]ed from the request head (the peer address, the
//! client behind trusted proxies, an API key, a principal from earlier
//! middleware, the route). Every rule that applies is charged, all or
//! nothing; a refusal becomes the [`Refusal`](crate::http::Refusal)
//! response. An admitted request stays charged unless its response has a
//! status its rule gives back ([`Rule::give_back_on`]); a client that hangs
//! up gets nothing back (but its in-flight permits: [`Rule::in_flight`]). [`docs/http.md`](crate::guide::http) has the contract and an axum
//! example, and `examples/stacks/axum_server.rs` a runnable server.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
//! use tollgate::http::PolicyName;
//! use tollgate::http::tower::{RateLimitLayer, Rule, extract};
//! use tollgate::{KeyedLimiter, Quota, TokenBucket};
//!
//! let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["10.0.0.0/8"])?);
//! // The peer as the server gave it: axum's `ConnectInfo` (feature `axum`),
//! // tonic's `TcpConnectInfo` (feature `tonic`), or a bare `SocketAddr`.
//! let client = extract::forwarded(resolver, extract::peer_ip);
//! let layer = RateLimitLayer::builder()
//!     .rule(Rule::keyed(PolicyName::new("per-address")?, Arc::new(KeyedLimiter::new(Quota::per_second(10)?)), client))
//!     .rule(Rule::global(PolicyName::new("global")?, Arc::new(TokenBucket::new(Quota::per_second(1000)?))))
//!     .build();
//! # let _ = layer;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod body;
mod future;
mod layer;
mod metered;
mod service;
mod throttle;

pub use body::{BodyKind, EitherBody, InnerBody, RateLimitBody};
pub use future::ResponseFuture;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use metered::{MeteredBody, Metering};
pub use service::RateLimitService;
pub use throttle::{ThrottleError, ThrottledBody};

// The rules' vocabulary, where tower users have always found it.
pub use crate::http::rules::{
    ActualCost, CostError, IntoKey, MissingKey, NoKey, NoPeer, NotSettleable, Rule, Settlement,
    Shadow, extract,
};
