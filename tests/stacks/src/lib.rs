//! The pages of `docs/` whose recipes need a server stack, compiled and run
//! here as doc tests with this crate's dependencies (axum's server, tonic's
//! transport, actix-web's macros), so that the library's own doc tests, and
//! the demo that builds its dev-dependencies, need none of them. The
//! library shows the same pages in its guide.

/// `docs/jobs.md`, the crate's front page.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/jobs.md")]
pub struct Jobs;

/// `docs/http.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/http.md")]
pub struct Http;

/// `docs/grpc.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/grpc.md")]
pub struct Grpc;
