//! A plain connection to a test's private `redis-server` through the
//! `redis` crate, for inspecting and poking it beside the store under test.

use redis::aio::MultiplexedConnection;

use crate::redis_server::RedisServer;

/// A plain connection to `server`, for inspecting and poking it beside the
/// store under test.
pub async fn admin(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
