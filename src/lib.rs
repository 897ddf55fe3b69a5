// The front page's recipes need server stacks (axum's server, tonic's
// transport): `tests/stacks` runs them as its doc tests, so that this
// crate's own doc tests and dev-dependencies stay light.
#![cfg_attr(not(doctest), doc = include_str!("../docs/jobs.md"))]
//!
//! # The bucket
//!
//! A [`TokenBucket`] keeps its whole state in one atomic word: refill, check
//! and deduction are a single linearizable compare-and-swap, with no lock and
//! no background timer. Its arithmetic is exact: for every quota whose
//! emission interval has a reduced denominator of at most 8 in nanoseconds it
//! makes the same decisions as a rational-arithmetic token bucket, and for
//! the rest it rounds towards admitting less.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{AcquireError, Limit, Quota, TokenBucket};
//!
//! // A burst of 10, refilled at 5 tokens per second.
//! let bucket = TokenBucket::new(Quota::new(10, 5, Duration::from_secs(1))?);
//! match bucket.try_acquire(1) {
//!     Ok(()) => { /* serve the request */ }
//!     Err(AcquireError::Insufficient { retry_after }) => { /* 429, Retry-After */ let _ = retry_after; }
//!     Err(other) => return Err(other.into()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every limiter that spends tokens decides through one trait, [`Limit`]:
//! take now, take now and wait before use, or look without spending. The
//! combinators, the counters, the async wait and the tower layer are
//! written once against it. What a limit tells clients about itself (its
//! [`Shape`], the reset of an HTTP field) is a trait of its own,
//! [`Advertised`], which the HTTP layer reads.
//!
//! # Limiters
//!
//! - [`TokenBucket`]: the exact token bucket, configured by a [`Quota`]
//!   (with its [`InitialCredit`]); bad configuration is a [`QuotaError`], a
//!   refusal an [`AcquireError`].
//! - [`StripedBucket`]: one hot bucket shared by many threads through
//!   per-thread pools, within the bucket's own bound.
//! - [`FixedWindow`] and [`SlidingWindow`]: "N per window" limits from a
//!   [`WindowQuota`], each in one atomic word ([`window`]).
//! - [`Pacer`]: requests started evenly spaced, behind a bounded queue.
//!
//! # Keyed limiters (feature `keyed`)
//!
//! - [`KeyedLimiter`]: a bucket per key in bounded memory, configured by a
//!   [`KeyedBuilder`] (key cap and its [`AtCapacity`] policy, sweeps,
//!   hasher); one key of it is a [`KeyLimit`], looked up by any form
//!   [`KeyRef`] allows.
//! - [`Tiered`]: a quota per key, each key's tier picked by a resolver.
//! - [`KeyedFixedWindow`] and [`KeyedSlidingWindow`]: a window word per key
//!   in the same bounded table.
//! - [`KeyTable`]: the trait every keyed limiter implements for its table
//!   of keys (`len`, `max_keys`, `sweep`, `table_stats`), so that one
//!   timer can sweep them all; [`KeyTableStats`]: what a key table holds
//!   and has dropped.
//! - [`PerKey`]: the trait over every limiter with a limit per key, which
//!   [`Counted`] and the tower layer's keyed rules are written against.
//!
//! # Combinators
//!
//! - [`try_acquire_all`]: one request through several limits, its
//!   [`Step`]s (at most [`MAX_STEPS`]), all or nothing; a refusal is a
//!   [`HierarchyError`] naming the limit.
//! - [`Receipt`]: an admission that may be given back, by the one rule that
//!   never mints credit.
//! - [`Counted`]: opt-in decision counters around any limit, read as
//!   [`DecisionStats`].
//!
//! # Clocks
//!
//! - [`Clock`]: what a limiter reads time from.
//! - [`DefaultClock`]: the default, the time-stamp counter where every
//!   CPU's is checked to agree, the OS clock elsewhere; [`ClockChoice`]
//!   says which and why.
//! - [`TscClock`], [`MonotonicClock`], [`CoarseClock`]: each source on its
//!   own, chosen explicitly; [`ManualClock`]: time set by hand, for tests.
//!
//! # Shared budgets
//!
//! - [`shared`] (feature `keyed`): a budget shared by many nodes. A
//!   [`Store`](shared::Store) holds the authoritative bucket of each key:
//!   [`LocalStore`](shared::LocalStore) in-process, or
//!   [`RedisStore`](shared::RedisStore) (feature `redis`).
//! - [`LocalAllowance`](shared::LocalAllowance) (feature `tokio`): one
//!   key's budget served from leased tokens, one compare-and-swap a
//!   request, as its [`AllowanceConfig`](shared::AllowanceConfig) and
//!   [`FailurePolicy`](shared::FailurePolicy) say.
//! - [`KeyedAllowance`](shared::KeyedAllowance) (feature `tokio`): a shared
//!   budget per key, leasing only for the keys whose demand pays for it.
//!
//! # HTTP and tower
//!
//! - [`http`] (feature `http`): a refusal as the response a client can act
//!   on ([`Refusal`](http::Refusal): 429 or 503, Retry-After,
//!   problem+json), and the RateLimit fields out
//!   ([`RateLimitPolicy`](http::RateLimitPolicy)) and in
//!   ([`parse_rate_limit`](http::parse_rate_limit)).
//! - [`http::tower`] (feature `tower`): the whole job as middleware,
//!   [`RateLimitLayer`](http::tower::RateLimitLayer) with its
//!   [`Rule`](http::tower::Rule)s over any limit, keyed limiter or keyed
//!   shared budget.
//!
//! # Identity
//!
//! - [`identity`] (feature `identity`): client addresses as keys
//!   ([`AddrKey`](identity::AddrKey), per IPv6 /64 by default), and the
//!   client behind trusted proxies
//!   ([`ForwardedResolver`](identity::ForwardedResolver)).
//!
//! # Retry and jitter
//!
//! - [`retry`] (feature `retry`): for the client that was refused,
//!   Retry-After parsing ([`parse_retry_after`](retry::parse_retry_after))
//!   and retry planning ([`RetryPolicy`](retry::RetryPolicy)).
//! - [`jitter`]: the crate's one jitter generator
//!   ([`JitterGenerator`](jitter::JitterGenerator), exact and lock-free),
//!   which the retry planner, the HTTP fields and the shared budgets'
//!   pacing draw from.
//!
//! # Concurrency
//!
//! - [`concurrency`]: limits on work in flight, with RAII permits:
//!   [`ConcurrencyLimiter`](concurrency::ConcurrencyLimiter), and per key
//!   [`KeyedConcurrencyLimiter`](concurrency::KeyedConcurrencyLimiter)
//!   (feature `keyed`).
//!
//! # The guide
//!
//! - [`semantics`](guide::semantics): the contract (units, initial credit,
//!   denial versus delay, giving back, quota changes, keys, windows) and the
//!   proof of the bound.
//! - [`architecture`](guide::architecture): the workspace, the layers, the
//!   tower layer, a map of the files, the features.
//! - [`proofs`](guide::proofs): exactness, the linearization point of each
//!   operation, the loom models, and where each promise is tested.
//! - [`clocks`](guide::clocks): what each clock costs and trades.
//! - [`keyed`](guide::keyed): [`KeyTable`], which every keyed limiter
//!   implements, and what differs between them.
//! - [`concurrency`](guide::concurrency): in-flight limits.
//! - [`distributed`](guide::distributed) and [`redis`](guide::redis):
//!   shared budgets, the bound across nodes, the Redis store.
//! - [`http`](guide::http): responses, the RateLimit fields, the tower
//!   layer.
//! - [`identity`](guide::identity): client identity and trusted proxies.
//! - [`retry`](guide::retry): Retry-After and retry planning.
//! - [`observability`](guide::observability): counters and their export.
//! - [`benchmarks`](guide::benchmarks): measured costs beside governor, and
//!   the commands that reproduce them.
//!
//! # Features
//!
//! Each feature is the boundary of one layer; `keyed`, `identity` and
//! `retry` are on by default.
//!
//! - `keyed` (default): [keyed limiters](guide::keyed), [`shared`]'s stores.
//! - `identity` (default): [client identity](guide::identity).
//! - `retry` (default): [Retry-After and retry planning](guide::retry).
//! - `tokio`: async waits, [shared budgets](guide::distributed), `TokioClock`.
//! - `redis`: [the Redis store](guide::redis).
//! - `http`: [responses and the RateLimit fields](guide::http).
//! - `tower`: [the tower layer](guide::http) (settled and shadow rules,
//!   throttled bodies).
//! - `axum`: the [peer address](guide::http) from axum's `ConnectInfo`.
//! - `tonic`, `tonic-tls`: [gRPC answers](guide::grpc) and tonic's peer.
//! - `actix`: the layer's rules as [actix-web middleware](guide::http).
//! - `metrics`: [every counter exported](guide::observability).
//!
//! Without default features the crate is the bucket alone ([`TokenBucket`],
//! [`StripedBucket`], the window counters, [`Pacer`], [`try_acquire_all`],
//! [`Receipt`], [`Counted`], the clocks, [`jitter`], [`concurrency`]
//! without keys) on crossbeam-utils, thiserror, arc-swap and quanta (and,
//! for the default clock's check, core_affinity on Linux and raw-cpuid on
//! x86-64); the guide's [`architecture`](guide::architecture), "Features",
//! says what each feature brings and costs to build.

#![forbid(unsafe_code)]
// On docs.rs (nightly, `--cfg docsrs`): each item gated by a feature says
// which. Stable builds never see the unstable attribute.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod advertised;
mod bucket;
mod clock;
pub mod concurrency;
mod counted;
mod error;
#[cfg(feature = "metrics")]
mod export;
mod gcra;
pub mod guide;
mod hierarchy;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "identity")]
pub mod identity;
pub mod jitter;
#[cfg(feature = "keyed")]
mod keyed;
mod limit;
mod pacer;
mod quota;
mod receipt;
#[cfg(feature = "retry")]
pub mod retry;
// A shared budget is a table of keyed states: its in-process store is one
// keyed limiter, its keyed allowance a keyed table with a keyed fallback.
#[cfg(feature = "keyed")]
pub mod shared;
mod state;
mod striped;
mod sync;
mod thread_id;
mod timeline;
#[cfg(feature = "tokio")]
mod waiting;
pub mod window;

pub use advertised::{Advertised, Shape};
pub use bucket::TokenBucket;
/// The default clock's counter held to the OS clock, for the loom models
/// only.
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub use clock::Anchored;
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{
    Clock, ClockChoice, CoarseClock, DefaultClock, ManualClock, MonotonicClock, TscClock,
};
pub use counted::{Counted, DecisionStats};
pub use error::{AcquireError, QuotaError};
pub use hierarchy::{HierarchyError, MAX_STEPS, Step, try_acquire_all};
#[cfg(feature = "keyed")]
pub use keyed::{
    AtCapacity, KeyLimit, KeyRef, KeyTable, KeyTableStats, KeyedBuilder, KeyedLimiter, MaxKeys,
    MaxKeysError, OwnedKey, PerKey, Tiered,
};
/// The keyed limiter's quota generations, for the loom models only.
#[cfg(all(tollgate_loom, feature = "keyed"))]
#[doc(hidden)]
pub use keyed::{Change, Entry, Generations, SharedEntry, Steady};
/// The keyed limiter's key cap, for the loom models only.
#[cfg(all(tollgate_loom, feature = "keyed"))]
#[doc(hidden)]
pub use keyed::{KeyCap, Place};
pub use limit::Limit;
pub use pacer::Pacer;
pub use quota::{InitialCredit, Quota};
pub use receipt::Receipt;
pub use striped::StripedBucket;
/// The stripe a loom thread is pinned to, for the loom models only.
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub use thread_id::pin_stripe;
pub use window::{FixedWindow, SlidingWindow, WindowQuota};
#[cfg(feature = "keyed")]
pub use window::{KeyedFixedWindow, KeyedSlidingWindow};

/// Compiles and runs the README's examples as doc tests, so the quickstart
/// cannot drift from the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
