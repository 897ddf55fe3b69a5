//! The guide: the contract, the architecture, the proofs and the
//! measurements, as the pages of `docs/` rendered here so docs.rs readers
//! can open them. Each module is one page; the source of truth is the
//! Markdown file it includes, and its Rust examples run as doc tests.
//!
//! A page about one feature's layer is included only with that feature
//! (`cfg_attr` on its `doc` attribute), so that its examples compile and
//! its links resolve in every build that shows it; without the feature the
//! module keeps its one-line summary, and links to it still resolve. The
//! pages whose recipes need a server stack (`http`, `grpc`, and the crate's
//! front page) run as doc tests of `tests/stacks`, which has those stacks
//! as dependencies.

/// The contract: units, quotas, initial credit, denial versus delay,
/// weighted costs, giving back, clocks.
#[doc = include_str!("../docs/semantics.md")]
pub mod semantics {}

/// The architecture: the workspace, the layers, the tower layer, a map of
/// the files, the features, and what a new limiter or adapter touches.
#[doc = include_str!("../docs/architecture.md")]
pub mod architecture {}

/// The proofs: exact arithmetic, the linearization point of each lock-free
/// operation, why nothing mints credit, the loom models, the property
/// tests' exact models, and where each promise is tested.
#[doc = include_str!("../docs/proofs.md")]
pub mod proofs {}

/// Clocks: what each costs, what a backward step does, which to choose.
#[doc = include_str!("../docs/clocks.md")]
pub mod clocks {}

/// Keyed limiters: `KeyTable`, which every keyed limiter implements, and
/// what a trait cannot say about them (features `keyed` and `tokio`).
#[cfg_attr(feature = "tokio", doc = include_str!("../docs/keyed.md"))]
pub mod keyed {}

/// Limits on work in flight.
#[doc = include_str!("../docs/concurrency.md")]
pub mod concurrency {}

/// Budgets shared by many nodes: local allowances, keyed shared budgets,
/// pacing, the bound and its proof (feature `tokio`).
#[cfg_attr(feature = "tokio", doc = include_str!("../docs/distributed.md"))]
pub mod distributed {}

/// The Redis store: scripts, keys, cluster, TLS, failures (feature
/// `redis`).
#[cfg_attr(feature = "redis", doc = include_str!("../docs/redis.md"))]
pub mod redis {}

/// The HTTP side: 429 and 503 responses, the RateLimit fields, the tower
/// layer, shared rules (features `http` and `tower`).
#[cfg_attr(all(feature = "tower", not(doctest)), doc = include_str!("../docs/http.md"))]
pub mod http {}

/// gRPC: what a gRPC client sees of the tower layer's answers (feature
/// `tonic`).
#[cfg_attr(all(feature = "tonic", not(doctest)), doc = include_str!("../docs/grpc.md"))]
pub mod grpc {}

/// Client identity: addresses, trusted proxies, prefixes (feature
/// `identity`).
#[cfg_attr(feature = "identity", doc = include_str!("../docs/identity.md"))]
pub mod identity {}

/// Client-side Retry-After parsing and retry planning (feature `retry`).
#[cfg_attr(feature = "retry", doc = include_str!("../docs/retry.md"))]
pub mod retry {}

/// Counters and the `metrics` export (features `metrics` and `tokio`).
#[cfg_attr(
    all(feature = "metrics", feature = "tokio"),
    doc = include_str!("../docs/observability.md")
)]
pub mod observability {}

/// The benchmarks: what is measured against what, the results, and the
/// commands that reproduce them.
#[doc = include_str!("../docs/benchmarks.md")]
pub mod benchmarks {}
