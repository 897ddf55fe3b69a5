//! [`RedisStore`]: the authoritative buckets of a shared budget, in Redis.
//!
//! Each key's bucket is one Redis string holding the GCRA state (the
//! instant the bucket is full again), changed only by three short Lua
//! scripts (acquire, release, debit) that run atomically on the server and
//! take the time from the server's own clock. The details, and what a
//! timed-out call means, are in
//! [`docs/redis.md`](crate::guide::redis).

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

/// A plain connection to a test's private server, for inspecting and
/// poking it beside the store under test.
#[cfg(test)]
async fn admin(
    server: &tollgate_test_support::redis_server::RedisServer,
) -> ::redis::aio::MultiplexedConnection {
    ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

pub use self::config::RedisConfig;
pub use self::connection::RedisConnection;
pub use self::error::RedisStoreError;
pub use self::redis_store::RedisStore;
