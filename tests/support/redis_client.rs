//! What test crates that inspect a private `redis-server` through the
//! `redis` crate share: starting the server or returning from the test, and
//! a plain connection for inspecting and poking it.
//!
//! Kept apart from `redis_server.rs`, which stays `std`-only for every test
//! crate, sync or async, and which this module builds on, so that crates
//! using only that one never see these unused. Include both, this one with
//! `#[macro_use]`, after its companion and before the modules using it:
//!
//! ```ignore
//! #[path = "support/redis_server.rs"]
//! mod redis_server;
//! #[macro_use]
//! #[path = "support/redis_client.rs"]
//! mod redis_client;
//! ```

use redis::aio::MultiplexedConnection;

// A sibling in every crate that includes both: a test crate's root, or the
// library's Redis module for its own tests.
use super::redis_server::RedisServer;

/// Starts this test's server, or returns from the test when one cannot be
/// started outside CI (`RedisServer::start` prints why; under CI it
/// panics). `RedisServer` must be in scope where it is used.
macro_rules! start_server {
    ($test:expr) => {
        match RedisServer::start($test) {
            Some(server) => server,
            None => return,
        }
    };
}

/// A plain connection to `server`, for inspecting and poking it beside the
/// store under test.
pub async fn admin(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
