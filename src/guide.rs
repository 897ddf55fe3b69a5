//! The guide: the contract, the design and the measurements, as the pages
//! of `docs/` rendered here so docs.rs readers can open them. Each module
//! is one page; the source of truth is the Markdown file it includes.

/// The contract: units, quotas, initial credit, denial versus delay,
/// weighted costs, giving back, clocks.
#[doc = include_str!("../docs/semantics.md")]
pub mod semantics {}

/// The design: the state word, the linearization point of each operation,
/// the module map.
#[doc = include_str!("../docs/design.md")]
pub mod design {}

/// Clocks: what each costs, what a backward step does, which to choose.
#[doc = include_str!("../docs/clocks.md")]
pub mod clocks {}

/// Limits on work in flight.
#[doc = include_str!("../docs/concurrency.md")]
pub mod concurrency {}

/// Budgets shared by many nodes: local allowances, keyed shared budgets,
/// pacing, the bound and its proof.
#[doc = include_str!("../docs/distributed.md")]
pub mod distributed {}

/// The Redis store: scripts, keys, cluster, TLS, failures.
#[doc = include_str!("../docs/redis.md")]
pub mod redis {}

/// The HTTP side: 429 and 503 responses, the RateLimit fields, the tower
/// layer, shared rules.
#[doc = include_str!("../docs/http.md")]
pub mod http {}

/// Client identity: addresses, trusted proxies, prefixes.
#[doc = include_str!("../docs/identity.md")]
pub mod identity {}

/// Client-side Retry-After parsing and retry planning.
#[doc = include_str!("../docs/retry.md")]
pub mod retry {}

/// Counters and the `metrics` export.
#[doc = include_str!("../docs/observability.md")]
pub mod observability {}

/// The benchmarks: what is measured against what, the results, and the
/// commands that reproduce them.
#[doc = include_str!("../docs/benchmarks.md")]
pub mod benchmarks {}
