//! A budget shared by many processes: an authoritative [`Store`] per key,
//! and a `LocalAllowance` (feature `tokio`) that serves the hot path from tokens leased from
//! it in advance, and a `KeyedAllowance` (feature `tokio`) that does so
//! for many keys, leasing only for the hot ones.

#[cfg(feature = "tokio")]
mod allowance;
#[cfg(feature = "tokio")]
mod error;
#[cfg(feature = "tokio")]
mod keyed;
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
#[cfg(feature = "tokio")]
pub use error::BudgetError;
#[cfg(feature = "tokio")]
pub use keyed::{
    HotAnswer, KeyedAllowance, KeyedAllowanceConfig, KeyedAllowanceStats, KeyedReceipt,
    STORE_KEY_LITERAL_MAX, store_key,
};
pub use local::LocalStore;
pub use pool::{LeasePool, Take};
#[cfg(feature = "redis")]
pub use redis::*;
pub use store::{Grant, Lease, Store};
