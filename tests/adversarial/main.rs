//! Attacks on every layer, one test per attack, each named for the promise
//! it defends: a client, a peer or a faulty store must never get more than
//! the quota, and bad input must get a typed answer, never a panic.

use tollgate_test_support::common;

mod core;
#[cfg(feature = "tokio")]
mod fleet;
#[cfg(feature = "tower")]
mod http;
#[cfg(all(feature = "identity", feature = "keyed"))]
mod identity;
#[cfg(feature = "keyed")]
mod keyed;
#[cfg(feature = "tokio")]
mod shared;
mod striped;
