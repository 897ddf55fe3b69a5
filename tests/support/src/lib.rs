//! What tollgate's integration tests share, in one crate rather than in
//! files each test binary includes by path.
//!
//! - [`common`]: the exact models' arithmetic and the race helpers, computed
//!   independently of the library so that a bug there cannot hide a bug in
//!   the code under test.
//! - [`redis_server`], [`redis_cluster`], [`fake_redis`]: a private
//!   `redis-server` (or cluster, or a scripted fake) per test, `std` only,
//!   so the library's own unit tests use them too.
//! - [`admin`] (feature `redis`), [`pki`] and [`redis_tls`] (feature `tls`).
#![allow(missing_docs)]

#[cfg(feature = "redis")]
pub mod admin;
pub mod common;
pub mod fake_redis;
#[cfg(feature = "tls")]
pub mod pki;
pub mod redis_cluster;
pub mod redis_server;
#[cfg(feature = "tls")]
pub mod redis_tls;
