//! [`RedisStore`]: the authoritative buckets of a shared budget, in Redis.
//!
//! Each key's bucket is one Redis string holding the GCRA state (the
//! instant the bucket is full again), changed only by two short Lua scripts
//! that run atomically on the server and take the time from the server's
//! own clock. The details, and what a timed-out call means, are in
//! [`docs/redis.md`](crate::guide::redis).

// The tests' support first: its macro is in scope only after it.
#[cfg(test)]
#[path = "../../../tests/support/redis_server.rs"]
mod redis_server;
#[cfg(test)]
#[macro_use]
#[path = "../../../tests/support/redis_client.rs"]
mod redis_client;

mod config;
mod connection;
mod error;
mod eval;
#[cfg(test)]
mod forged;
mod lua;
mod operations;
#[cfg(test)]
mod parity;
mod redis_store;
mod scale;

pub use self::config::RedisConfig;
pub use self::connection::RedisConnection;
pub use self::error::RedisStoreError;
pub use self::redis_store::RedisStore;
