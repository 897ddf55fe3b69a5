//! Rate-limit rules for HTTP requests, decided by an engine that knows no
//! framework (feature `rules`): the tower layer
//! ([`tower::RateLimitLayer`](crate::http::tower::RateLimitLayer), feature
//! `tower`), the actix-web middleware (`http::actix`, feature `actix`) and
//! gRPC answers (feature `tonic`) are thin adapters over it.
//!
//! A set of [`Rules`] holds a list of [`Rule`]s: a global limit, a keyed
//! limiter, work in flight per key, or a budget per key shared by a fleet
//! of servers ([`Rule::shared`], over a [`KeyedAllowance`](crate::shared::KeyedAllowance)),
//! with a key [`extract`]ed from the request head (the peer address, the
//! client behind trusted proxies, an API key, a principal from earlier
//! middleware, the route). Every rule that applies is charged, all or
//! nothing; a refusal becomes the [`Refusal`](crate::http::Refusal)
//! response. An admitted request stays charged unless its response has a
//! status its rule gives back ([`Rule::give_back_on`]); a client that hangs
//! up gets nothing back (but its in-flight permits: [`Rule::in_flight`]).
//! [`docs/http.md`](crate::guide::http) has the contract, and
//! `docs/architecture.md` ("The rule engine") how a request goes through
//! the files here.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::identity::{ForwardedResolver, HeaderSource, TrustedProxies};
//! use tollgate::http::PolicyName;
//! use tollgate::http::rules::{Rule, Rules, extract};
//! use tollgate::{KeyedLimiter, Quota, TokenBucket};
//!
//! let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::parse(["10.0.0.0/8"])?);
//! // The peer as the server gave it: axum's `ConnectInfo` (feature `axum`),
//! // tonic's `TcpConnectInfo` (feature `tonic`), or a bare `SocketAddr`.
//! let client = extract::forwarded(resolver, extract::peer_ip);
//! let rules = Rules::builder()
//!     .rule(Rule::keyed(PolicyName::new("per-address")?, Arc::new(KeyedLimiter::new(Quota::per_second(10)?)), client))
//!     .rule(Rule::global(PolicyName::new("global")?, Arc::new(TokenBucket::new(Quota::per_second(1000)?))))
//!     .build();
//! # let _ = rules;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod advertise;
mod builder;
mod charge;
mod cost;
mod engine;
pub mod extract;
mod in_flight;
mod kept;
mod key;
mod kind;
mod length;
mod protocol;
mod rule;
mod settle;
mod shadow;
mod shared;
mod stash;
mod token;
mod unchargeable;

pub use builder::{Rules, RulesBuilder};
pub use cost::CostError;
pub use key::{IntoKey, NoKey, NoPeer};
pub use rule::{MissingKey, Rule};
pub use settle::{ActualCost, NotSettleable, Settlement};
pub use shadow::Shadow;

pub(crate) use engine::{Decision, Engine};
pub(crate) use kept::KeptCharges;
// Read by the tower layer only: actix's body neither declares its framing
// to the cost functions nor is counted for a settlement by its bytes.
#[cfg(feature = "tower")]
pub(crate) use kept::Meter;
#[cfg(feature = "tower")]
pub(crate) use length::Framing;
pub(crate) use protocol::Protocol;
