//! [`RedisStoreError`]: what a Redis store's construction or call can fail
//! with.

use std::time::Duration;

use ::redis::RedisError;

use crate::quota::InitialCredit;

/// Why a [`RedisStore`](super::RedisStore) could not be built or a call failed.
///
/// A call that failed with [`Redis`](Self::Redis) or
/// [`Timeout`](Self::Timeout) may or may not have been applied by the
/// server: count a failed `acquire` as spent (see [`Store`](crate::shared::Store)).
///
/// ```
/// use tollgate::shared::RedisStoreError;
///
/// fn may_have_been_applied(e: &RedisStoreError) -> bool {
///     matches!(e, RedisStoreError::Redis(_) | RedisStoreError::Timeout(_))
/// }
/// assert!(may_have_been_applied(&RedisStoreError::Timeout(std::time::Duration::from_millis(50))));
/// assert!(!may_have_been_applied(&RedisStoreError::InvalidPrefix));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The client or the server reported an error: no connection, a
    /// dropped connection, a script error, a wrong-type key, a cluster
    /// slot without a reachable master. A dropped connection may have
    /// carried the call to the server first.
    #[error("redis: {0}")]
    Redis(#[source] RedisError),
    /// The server refused the credentials: a wrong password, an unknown or
    /// disabled ACL user, or none given to a server that requires them.
    #[error("redis refused the credentials: {0}")]
    AuthenticationFailed(String),
    /// The TLS connection failed: the server's certificate does not verify
    /// against the trusted roots (or the configured CA), names another
    /// host, or has expired; or the handshake itself failed.
    #[error("TLS with the redis server failed: {0}")]
    Tls(String),
    /// No reply within the store's timeout. The call may still have reached
    /// the server and been applied: a timed-out `acquire` may have debited
    /// its tokens.
    #[error("no reply from redis within {0:?}; the call may still have been applied")]
    Timeout(Duration),
    /// The server's reply was not what the store's scripts return.
    #[error("unexpected reply from redis: {0}")]
    BadReply(String),
    /// Capacity times the emission interval (a full refill) is too long for
    /// the scripts' exact range (integers below `2^53` ticks) to last 30
    /// years from 2025; or, for a rate charged per request (too fast and
    /// irregular for a whole number of ticks per token), the capacity is
    /// `2^51` tokens or more.
    #[error(
        "capacity {capacity} refilled at this rate is too long for the redis store's exact range"
    )]
    RefillTooLong {
        /// The quota's capacity.
        capacity: u64,
    },
    /// The quota's initial credit is not [`InitialCredit::Full`]. An absent
    /// key is a full bucket (that is what lets keys expire), so a store
    /// cannot tell a new key from one that refilled and expired.
    #[error("a redis store's buckets start full: initial credit {0:?} is not supported")]
    InitialCreditUnsupported(InitialCredit),
    /// The timeout was zero: every call would time out (and a timed-out
    /// `acquire` may still have debited its tokens).
    #[error("the redis store's timeout must be longer than zero")]
    ZeroTimeout,
    /// The key prefix contains `{` or `}`, which would move every key's
    /// Redis Cluster hash tag into the prefix.
    #[error("the key prefix must not contain '{{' or '}}'")]
    InvalidPrefix,
    /// A [`RedisConfig`](super::RedisConfig) without any node URL.
    #[error("no redis node to connect to")]
    NoNodes,
    /// The server's clock is before 2025 or past the store's range
    /// ([`RedisStore::valid_until`](super::RedisStore::valid_until)): the script refused to decide.
    #[error("the redis server's clock is outside the store's range (2025 to its valid_until)")]
    ServerClockOutOfRange,
    /// The key holds a value this store did not write (not
    /// `"<d>:<tat>:<born>"` nor the older `"<d>:<tat>"`); it is left
    /// untouched.
    #[error("redis key {0:?} holds a value that is not a tollgate bucket")]
    ForeignValue(String),
    /// The key is kept under a quota of the same generation as this
    /// node's, but not this node's quota: two nodes were given different
    /// quotas as one generation. The server keeps the quota it stored
    /// first for that key and refuses the other's calls on it (give each
    /// change a higher generation).
    #[error("redis key {key:?} is kept under another quota of generation {generation}")]
    QuotaConflict {
        /// The Redis key.
        key: String,
        /// The generation both quotas claim.
        generation: u64,
    },
    /// A quota generation at or past `2^53`, beyond what the scripts count
    /// exactly.
    #[error("quota generation {0} is past 2^53")]
    GenerationTooLarge(u64),
    /// A `rediss://` URL ends in `#insecure`, which tells the `redis` crate
    /// to skip verifying the server's certificate (when its
    /// `tls-rustls-insecure` feature is on, which any crate of the build
    /// can turn on): anyone on the path could then answer for the store.
    /// Trust a private CA with
    /// [`RedisConfig::ca_certificate_pem`](super::RedisConfig::ca_certificate_pem) instead.
    #[error("a rediss:// URL with #insecure would not verify the server's certificate")]
    InsecureTls,
}
