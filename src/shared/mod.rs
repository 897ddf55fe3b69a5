//! A budget shared by many processes: an authoritative [`Store`] per key,
//! and a `LocalAllowance` (feature `tokio`) that serves the hot path from tokens leased from
//! it in advance.

#[cfg(feature = "tokio")]
mod allowance;
mod local;
#[cfg(feature = "tokio")]
mod pacing;
mod pool;
mod store;

#[cfg(feature = "redis")]
mod redis;

#[cfg(feature = "tokio")]
pub use allowance::{
    AllowanceConfig, AllowanceError, AllowanceStats, FailurePolicy, LocalAllowance, RefillError,
    Source,
};
pub use local::LocalStore;
pub use pool::{LeasePool, Take};
#[cfg(feature = "redis")]
pub use redis::*;
pub use store::{Grant, Lease, Store};
