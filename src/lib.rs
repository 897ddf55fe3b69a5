//! A lock-free, in-process rate limiter for the hot paths of latency-sensitive
//! servers.
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
//! Every limiter that spends tokens makes its decisions through one trait,
//! [`Limit`]: the bucket, a key of a keyed limiter, a striped bucket, and
//! any of them wrapped in [`Counted`].
//!
//! Around the bucket:
//!
//! - [`KeyedLimiter`] (feature `keyed`): a bucket per key, in bounded
//!   memory; [`identity`] (feature `identity`) turns client addresses
//!   (behind trusted proxies) into keys;
//! - [`try_acquire_all`]: several limits, all or nothing;
//! - [`Receipt`]: an admission that may be given back, by the one rule that
//!   never mints credit ([`docs/semantics.md`](crate::guide::semantics), "Giving back");
//! - [`StripedBucket`]: one hot bucket shared by many threads through
//!   per-thread pools;
//! - [`window`]: "N per window" limits, fixed and sliding, each in one
//!   atomic word;
//! - [`Pacer`]: requests started evenly spaced, behind a bounded queue;
//! - [`concurrency`]: limits on work in flight, with RAII permits;
//! - [`shared`] (feature `keyed`): a budget shared by many nodes through a
//!   store (in-process, or Redis with feature `redis`), served from local
//!   allowances (feature `tokio`);
//! - `http` (feature `http`; its tower layer with feature `tower`): 429
//!   responses, the RateLimit fields, problem+json;
//! - [`retry`] (feature `retry`): Retry-After parsing and retry planning
//!   for clients.
//!
//! Features `keyed`, `identity` and `retry` are on by default. Without
//! default features the crate is the bucket alone ([`TokenBucket`],
//! [`StripedBucket`], [`try_acquire_all`], [`Receipt`], [`Counted`], the
//! clocks, [`concurrency`] without keys) on three dependencies;
//! [`docs/design.md`](crate::guide::design), "Features", says what each
//! feature brings and costs to build.
//!
//! The contract (units, initial credit, denial versus delay, clocks) is in
//! [`docs/semantics.md`](crate::guide::semantics); the state packing and linearization points are in
//! [`docs/design.md`](crate::guide::design).

#![forbid(unsafe_code)]
// On docs.rs (nightly, `--cfg docsrs`): each item gated by a feature says
// which. Stable builds never see the unstable attribute.
#![cfg_attr(docsrs, feature(doc_cfg))]

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

pub use bucket::TokenBucket;
pub use clock::{
    Clock, ClockChoice, CoarseClock, DefaultClock, ManualClock, MonotonicClock, TscClock,
};
pub use counted::{Counted, DecisionStats};
pub use error::{AcquireError, QuotaError};
pub use hierarchy::{HierarchyError, MAX_STEPS, Step, try_acquire_all};
#[cfg(feature = "keyed")]
pub use keyed::{AtCapacity, KeyLimit, KeyRef, KeyTableStats, KeyedBuilder, KeyedLimiter, Tiered};
/// The keyed limiter's quota generations, for the loom models only.
#[cfg(all(tollgate_loom, feature = "keyed"))]
#[doc(hidden)]
pub use keyed::{Change, Entry, Generations, Steady};
/// The keyed limiter's key cap, for the loom models only.
#[cfg(all(tollgate_loom, feature = "keyed"))]
#[doc(hidden)]
pub use keyed::{KeyCap, Place};
pub use limit::Limit;
pub use pacer::Pacer;
pub use quota::{InitialCredit, Quota};
pub use receipt::Receipt;
pub use striped::StripedBucket;
pub use window::{FixedWindow, SlidingWindow, WindowQuota};
#[cfg(feature = "keyed")]
pub use window::{KeyedFixedWindow, KeyedSlidingWindow};

/// Compiles and runs the README's examples as doc tests, so the quickstart
/// cannot drift from the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
