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
#[cfg(test)]
mod forged;
mod lua;
#[cfg(test)]
mod parity;
mod scale;

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use ::redis::{Cmd, RedisError, Script, Value};

pub use self::config::RedisConfig;
pub use self::connection::RedisConnection;
use self::scale::{EPOCH_UNIX_SECS, Scale};
use super::store::{Grant, Lease, Store};
use crate::sync::unmodelled::{Arc, LazyLock, Mutex, lock};
use crate::{InitialCredit, Quota};

// Loaded by hash: each call is an EVALSHA and, on a NOSCRIPT reply (a
// restarted or flushed server), the script is loaded and the call sent once
// more (`connection.rs`).
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ACQUIRE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RELEASE));

/// The most tokens one call asks for or gives back: every count a script
/// reads stays exact as a Lua number (below `2^53`), and no bucket the
/// scripts accept holds more (`sane` in `lua.rs`: `B * T + T < 2^53`
/// with `T >= 1`, or `B < 2^51` per request), so a full bucket of any
/// capacity grants it whole in one call.
const MAX_ASK: u64 = scale::EXACT_LIMIT - 1;

/// Why a [`RedisStore`] could not be built or a call failed.
///
/// A call that failed with [`Redis`](Self::Redis) or
/// [`Timeout`](Self::Timeout) may or may not have been applied by the
/// server: count a failed `acquire` as spent (see [`Store`]).
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
    /// A [`RedisConfig`] without any node URL.
    #[error("no redis node to connect to")]
    NoNodes,
    /// The server's clock is before 2025 or past the store's range
    /// ([`RedisStore::valid_until`]): the script refused to decide.
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
    /// [`RedisConfig::ca_certificate_pem`] instead.
    #[error("a rediss:// URL with #insecure would not verify the server's certificate")]
    InsecureTls,
}

/// A [`Store`] in Redis: one GCRA token bucket per key, shared by every
/// process that uses the same server, key prefix and quota.
///
/// - **Atomic and exact.** Each operation is one Lua script, run atomically
///   by the server, in integer ticks of `1/d` µs (see [`is_exact`](Self::is_exact)).
/// - **Server time.** The scripts read the server's `TIME`; the clocks of
///   the processes calling them never matter.
/// - **Expiry.** A key expires when its bucket is full again; an absent key
///   is a full bucket, so idle keys cost no memory and none lives forever.
/// - **One server or a cluster.** [`connect_with`](Self::connect_with)
///   takes a [`RedisConfig`]: one server or a Redis Cluster, over TCP or
///   TLS (rustls), with ACL credentials. Key `k` is stored at `{prefix}{k}`
///   with braces in `k` escaped ([`redis_key`](Self::redis_key)), so each
///   bucket is one Redis key in one cluster slot, and each script call goes
///   to that slot's master.
/// - **Batches.** [`acquire_many`](Store::acquire_many) is one pipeline on
///   one server, concurrent single calls on a cluster.
/// - **Timeouts.** Every call is bounded by the store's timeout; a timed-out
///   call may still have been applied ([`RedisStoreError::Timeout`]).
/// - **Runtime.** Calls run on tokio (the connection's tasks and the
///   timeout's timer): use the store inside a tokio runtime with time
///   enabled.
///
/// Cloning is cheap: clones share the connection.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate::shared::{RedisStore, Store};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // Bursts of 100, 50 per second, shared by every process of the fleet.
/// let quota = Quota::new(100, 50, Duration::from_secs(1))?;
/// let store = RedisStore::connect("redis://127.0.0.1/", quota, "rl:api:", Duration::from_millis(200)).await?;
///
/// let grant = store.acquire("tenant-7", 10).await?;
/// if grant.is_empty() {
///     println!("over the limit, retry in {:?}", grant.retry_after);
/// } else if grant.tokens > 1 {
///     // Spent one; give the rest back.
///     store.release("tenant-7", grant.lease, grant.tokens - 1).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    connection: RedisConnection,
    /// The quota this node sends, and the newest generation the server
    /// reported: behind one lock (a few copies per round trip to Redis),
    /// shared by clones so that one `set_quota` reaches every one of them.
    setting: Arc<Mutex<Setting>>,
    prefix: String,
    timeout: Duration,
}

/// What a node sends with every call: its quota, converted, and the
/// generation that orders it among the fleet's quotas.
#[derive(Clone, Copy, Debug)]
struct Setting {
    quota: Quota,
    scale: Scale,
    generation: u64,
    /// The newest generation a reply was decided under.
    stored: u64,
    /// A bucket full at every instant this node has known, in `quota`'s
    /// ticks since `origin`, carried by the continuity rule at each of its
    /// quota changes: a key may have expired full at any instant (an
    /// absent key is a full bucket of the quota it was kept under), so an
    /// absent key starts with no more than this holds. Full, so no limit,
    /// until a change raises the capacity; then it refills at the new rate.
    expired: u64,
    origin: Instant,
}

impl Setting {
    /// The most tokens an absent key starts with now.
    fn fresh(&self) -> u64 {
        let gcra = self.quota.gcra();
        gcra.available(self.expired, gcra.ticks(self.elapsed()))
    }

    fn elapsed(&self) -> u64 {
        crate::clock::saturating_nanos(self.origin.elapsed())
    }
}

impl RedisStore {
    /// A store on an existing connection — a `redis` connection manager
    /// (one server; it reconnects on its own after a failure) or cluster
    /// connection ([`RedisConnection`]) — with `quota` for every key, Redis
    /// keys under `prefix`, and every call bounded by `timeout`.
    ///
    /// The timeout bounds each call as a whole (an `EVALSHA`, and the
    /// script load after a `NOSCRIPT` reply); `Duration::MAX` waits as long
    /// as the server takes.
    ///
    /// Every store sharing a prefix on one server should use the same
    /// quota; a change is given to each as a newer generation
    /// ([`set_quota`](Self::set_quota)), and each key keeps the newest it
    /// has seen.
    ///
    /// # Errors
    ///
    /// [`RefillTooLong`](RedisStoreError::RefillTooLong) and
    /// [`InitialCreditUnsupported`](RedisStoreError::InitialCreditUnsupported)
    /// for a quota the scripts cannot apply;
    /// [`InvalidPrefix`](RedisStoreError::InvalidPrefix) for a prefix with
    /// braces; [`ZeroTimeout`](RedisStoreError::ZeroTimeout) for a zero
    /// timeout. Never panics.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::RedisStore;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let connection = redis::aio::ConnectionManager::new(client).await?;
    /// let store = RedisStore::new(connection, Quota::per_second(20)?, "rl:login:", Duration::from_millis(100))?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        connection: impl Into<RedisConnection>,
        quota: Quota,
        prefix: impl Into<String>,
        timeout: Duration,
    ) -> Result<Self, RedisStoreError> {
        let (scale, prefix) = validate(&quota, prefix.into(), timeout)?;
        Ok(RedisStore {
            connection: connection.into(),
            setting: Arc::new(Mutex::new(Setting {
                quota,
                scale,
                generation: 0,
                stored: 0,
                expired: crate::gcra::FULL,
                origin: Instant::now(),
            })),
            prefix,
            timeout,
        })
    }

    /// Connects to the server at `url` (`redis://host:port/db`,
    /// `rediss://...` for TLS, `redis+unix:///path`) and builds a store as
    /// [`new`](Self::new) does: [`connect_with`](Self::connect_with) for
    /// `RedisConfig::node(url).timeout(timeout)`.
    ///
    /// # Errors
    ///
    /// As [`connect_with`](Self::connect_with).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::RedisStore;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let quota = Quota::new(1000, 1000, Duration::from_secs(60))?;
    /// let store = RedisStore::connect("redis://127.0.0.1:6379/0", quota, "rl:", Duration::from_millis(250)).await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(
        url: &str,
        quota: Quota,
        prefix: impl Into<String>,
        timeout: Duration,
    ) -> Result<Self, RedisStoreError> {
        RedisStore::connect_with(&RedisConfig::node(url).timeout(timeout), quota, prefix).await
    }

    /// Connects as `config` says — one server or a Redis Cluster, TLS,
    /// credentials — and builds a store as [`new`](Self::new) does, every
    /// call bounded by the configuration's timeout.
    ///
    /// A connection to one server reconnects on its own after a failure,
    /// at most one second apart (the `redis` default backs off to a
    /// minute); a cluster connection follows the slot map, reconnecting to
    /// the nodes it finds. Each connection attempt is bounded by the
    /// timeout. Before that, a plain connection and a `PING` check the
    /// address, TLS and credentials, so that each fails with its own error
    /// instead of a retry until the timeout: each node (a cluster's seeds)
    /// in turn until one answers, so one seed down does not keep the store
    /// from starting; refused credentials or an untrusted certificate end
    /// the search at once, since every seed shares them.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), and [`NoNodes`](RedisStoreError::NoNodes) and
    /// [`InsecureTls`](RedisStoreError::InsecureTls), checked before
    /// connecting; then
    /// [`AuthenticationFailed`](RedisStoreError::AuthenticationFailed) for
    /// refused credentials, [`Tls`](RedisStoreError::Tls) for a server
    /// certificate that does not verify, [`Redis`](RedisStoreError::Redis)
    /// for a bad URL or a refused connection,
    /// [`Timeout`](RedisStoreError::Timeout) if no connection is made in
    /// time.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::shared::{RedisConfig, RedisStore};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let ca = std::fs::read("/etc/redis/ca.pem")?;
    /// let config = RedisConfig::cluster(["rediss://10.0.0.1:7000", "rediss://10.0.0.2:7000"])
    ///     .credentials("limiter", std::env::var("REDIS_PASSWORD")?)
    ///     .ca_certificate_pem(ca)
    ///     .timeout(Duration::from_millis(200));
    /// let store = RedisStore::connect_with(&config, Quota::per_second(100)?, "rl:api:").await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with(
        config: &RedisConfig,
        quota: Quota,
        prefix: impl Into<String>,
    ) -> Result<Self, RedisStoreError> {
        // Checked before connecting, so a bad quota or prefix fails at once.
        let prefix = prefix.into();
        validate(&quota, prefix.clone(), config.timeout)?;
        let connection = RedisConnection::open(config).await?;
        RedisStore::new(connection, quota, prefix, config.timeout)
    }

    /// The Redis key that holds `key`'s bucket: the prefix, then `key` in
    /// braces as its Redis Cluster hash tag, with `\`, `{` and `}` in `key`
    /// escaped as `\\`, `\[` and `\]`. The escaping is one-to-one, so
    /// distinct keys never share a bucket, and no key can choose another
    /// hash tag than its own (escaped) self.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// # use tollgate::shared::RedisStore;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// assert_eq!(store.redis_key("alice"), "rl:{alice}");
    /// assert_eq!(store.redis_key("a}{b"), r"rl:{a\]\[b}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn redis_key(&self, key: &str) -> String {
        redis_key(&self.prefix, key)
    }

    /// The quota this node sends with every call: the one it was built with
    /// or the last given to [`set_quota`](Self::set_quota). The server
    /// decides under a key's stored quota when it is newer
    /// ([`stored_generation`](Self::stored_generation)).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// # use tollgate::shared::RedisStore;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// assert_eq!(store.quota().capacity(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota(&self) -> Quota {
        self.setting().quota
    }

    /// The generation of [`quota`](Self::quota): 0 until
    /// [`set_quota`](Self::set_quota).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// # use tollgate::shared::RedisStore;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// assert_eq!(store.generation(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn generation(&self) -> u64 {
        self.setting().generation
    }

    /// The newest quota generation the server has decided a call of this
    /// store (or a clone) under. Above [`generation`](Self::generation),
    /// this node's configuration is stale: the server applies the newer
    /// quota to the keys that carry it (never this node's older one), and
    /// each grant's capacity and refill interval are the newer quota's; the
    /// node should be given the new quota ([`set_quota`](Self::set_quota)).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// # use tollgate::shared::RedisStore;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// if store.stored_generation() > store.generation() {
    ///     eprintln!("this node's quota is out of date");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn stored_generation(&self) -> u64 {
        self.setting().stored
    }

    /// Changes the quota this node (and every clone of this store) sends,
    /// as `generation`. Each key takes it on its next call from a node at
    /// this generation: the server converts the key's state by the
    /// continuity rule of [`docs/semantics.md`](crate::guide::semantics)
    /// ("Changing a quota") and stores the quota with it, so nodes still at
    /// an older generation are decided under this one from then on.
    /// Generations order the fleet's quotas: give each change a higher one
    /// (a version number from the configuration system). Two different
    /// quotas at one generation are a configuration error: the server
    /// keeps the one it stored first and refuses the other's calls on that
    /// key ([`QuotaConflict`](RedisStoreError::QuotaConflict)).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new) for a quota the scripts cannot apply
    /// ([`RefillTooLong`](RedisStoreError::RefillTooLong),
    /// [`InitialCreditUnsupported`](RedisStoreError::InitialCreditUnsupported));
    /// [`GenerationTooLarge`](RedisStoreError::GenerationTooLarge) for a
    /// generation at or past `2^53`. The store is unchanged after an error.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// use tollgate::shared::{RedisStore, Store};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// store.set_quota(Quota::per_second(50)?, 1)?;
    /// assert_eq!(store.acquire("alice", 50).await?.capacity, 50);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_quota(&self, quota: Quota, generation: u64) -> Result<(), RedisStoreError> {
        if generation >= scale::EXACT_LIMIT {
            return Err(RedisStoreError::GenerationTooLarge(generation));
        }
        let (scale, _) = validate(&quota, String::new(), self.timeout)?;
        let mut setting = lock(&self.setting);
        let (from, to) = (*setting.quota.gcra(), *quota.gcra());
        if from != to {
            setting.expired = from.carry(setting.expired, setting.elapsed(), &to);
        }
        setting.quota = quota;
        setting.scale = scale;
        setting.generation = generation;
        Ok(())
    }

    /// Whether the store applies the quota's emission interval exactly: it
    /// does when the interval's reduced denominator in microseconds is at
    /// most 8 (3/s, 7/s, 1000 per 7 s, 8 000 000/s). Otherwise the interval
    /// is rounded up to a multiple of 1/8 µs (by at most 0.1 %), or, where
    /// that would cost more (64 MiB/s, 2^33/s), each request is charged its
    /// exact refill rounded up to an eighth of a microsecond (by less than
    /// three): the store admits slightly less than asked, never more (see
    /// [`docs/redis.md`](crate::guide::redis), "Exactness"). (This can
    /// differ from [`Quota::is_exact`], which counts in nanoseconds.)
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// # use tollgate::shared::RedisStore;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(7)?, "rl:", Duration::from_secs(1)).await?;
    /// assert!(store.is_exact());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_exact(&self) -> bool {
        self.setting().scale.exact
    }

    /// The last instant, on the server's clock, at which the scripts still
    /// decide; after it every call fails with
    /// [`ServerClockOutOfRange`](RedisStoreError::ServerClockOutOfRange).
    /// At least 2055-01-01 for every quota the store accepts; centuries
    /// later for whole-microsecond intervals and small buckets.
    ///
    /// ```no_run
    /// # use std::time::{Duration, Instant, SystemTime};
    /// # use tollgate::Quota;
    /// # use tollgate::shared::RedisStore;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// assert!(store.valid_until() > SystemTime::now());
    /// # Ok(())
    /// # }
    /// ```
    pub fn valid_until(&self) -> SystemTime {
        self.setting().scale.valid_until()
    }

    /// A copy of the setting: every call works on one consistent quota.
    fn setting(&self) -> Setting {
        *lock(&self.setting)
    }

    /// Notes the generation a reply was decided under.
    fn saw(&self, generation: u64) {
        let mut setting = lock(&self.setting);
        setting.stored = setting.stored.max(generation);
    }

    /// One `EVALSHA` of `script` on `key` with the shared arguments of
    /// `setting` and `extra`.
    fn call(&self, setting: &Setting, script: &Script, key: &str, extra: &[u64]) -> Cmd {
        let mut call = ::redis::cmd("EVALSHA");
        call.arg(script.get_hash())
            .arg(1)
            .arg(self.redis_key(key))
            .arg(EPOCH_UNIX_SECS)
            .arg(setting.scale.ticks_per_micro)
            .arg(setting.scale.token_ticks)
            .arg(setting.scale.tolerance)
            .arg(setting.scale.last_tick)
            .arg(setting.generation)
            .arg(setting.scale.token_parts)
            .arg(setting.scale.capacity);
        for &value in extra {
            call.arg(value);
        }
        call
    }

    /// Runs one of the scripts on `key` with the shared arguments and
    /// `extra`, bounded by the timeout, and checks the reply's shape: `N`
    /// values (9 from `acquire`, 3 from `release`).
    async fn run<const N: usize>(
        &self,
        setting: &Setting,
        script: &Script,
        key: &str,
        extra: &[u64],
    ) -> Result<[u64; N], RedisStoreError> {
        let call = self.call(setting, script, key, extra);
        let reply = self.connection.eval(script, &call, self.timeout).await?;
        self.decode(key, &reply)
    }

    /// A script's reply, `N` non-negative integers (`{code, value, now}`,
    /// then `acquire`'s tokens left and quota), or the error its code
    /// stands for.
    fn decode<const N: usize>(
        &self,
        key: &str,
        reply: &Value,
    ) -> Result<[u64; N], RedisStoreError> {
        let values = parse_reply(reply)?;
        // The scripts' own error replies have one shape for both scripts.
        match values.first() {
            Some(-1) => return Err(RedisStoreError::ServerClockOutOfRange),
            Some(-2) => return Err(RedisStoreError::ForeignValue(self.redis_key(key))),
            Some(-3) => {
                return Err(RedisStoreError::QuotaConflict {
                    key: self.redis_key(key),
                    generation: values.get(1).map_or(0, |&g| g.unsigned_abs()),
                });
            }
            Some(-4) => return Err(bad_reply(reply)),
            _ => {}
        }
        let unsigned: Vec<u64> = values
            .iter()
            .map(|&v| u64::try_from(v))
            .collect::<Result<_, _>>()
            .map_err(|_| bad_reply(reply))?;
        // A reply of another length is another script version's (the
        // three or four values of an acquire before it told the quota).
        <[u64; N]>::try_from(unsigned).map_err(|_| bad_reply(reply))
    }

    async fn acquire_tokens(&self, key: &str, want: u64) -> Result<Grant, RedisStoreError> {
        let setting = self.setting();
        if want == 0 {
            return Ok(unasked(&setting));
        }
        // The script grants at most the stored quota's capacity, which this
        // node may not know: the ask is only kept exact.
        let want = want.min(MAX_ASK);
        let reply = self
            .run(&setting, &ACQUIRE, key, &[want, setting.fresh()])
            .await?;
        self.grant(want, reply)
    }

    /// Every key's acquire in one batch ([`RedisConnection::eval_many`]):
    /// one round trip to one server, concurrent calls on a cluster.
    async fn acquire_batch(&self, requests: &[(&str, u64)]) -> Vec<Result<Grant, RedisStoreError>> {
        let setting = self.setting();
        let asked: Vec<(usize, u64)> = requests
            .iter()
            .enumerate()
            .filter(|&(_, &(_, want))| want > 0)
            .map(|(i, &(_, want))| (i, want.min(MAX_ASK)))
            .collect();
        let fresh = setting.fresh();
        let calls: Vec<Cmd> = asked
            .iter()
            .map(|&(i, want)| self.call(&setting, &ACQUIRE, requests[i].0, &[want, fresh]))
            .collect();
        let replies = self
            .connection
            .eval_many(&ACQUIRE, &calls, self.timeout)
            .await;
        let mut grants: Vec<Result<Grant, RedisStoreError>> =
            requests.iter().map(|_| Ok(unasked(&setting))).collect();
        for (&(i, want), reply) in asked.iter().zip(replies) {
            grants[i] = reply
                .and_then(|reply| self.decode(requests[i].0, &reply))
                .and_then(|reply| self.grant(want, reply));
        }
        grants
    }

    /// The grant an acquire script's decoded reply stands for, with the
    /// capacity and refill interval of the quota the server decided under.
    /// A reply telling more tokens left than that bucket can hold besides
    /// the grant is no script's: refused, as is any other impossible
    /// combination.
    fn grant(
        &self,
        want: u64,
        [
            granted,
            wait,
            now,
            left,
            generation,
            capacity,
            d,
            ticks,
            parts,
        ]: [u64; 9],
    ) -> Result<Grant, RedisStoreError> {
        let fits = capacity >= 1
            && granted <= capacity
            && left <= capacity - granted
            && generation < scale::EXACT_LIMIT
            && (1..=8).contains(&d)
            && parts >= 1;
        let decided = Grant {
            // Only read when the reply fits, whose `d` and `parts` are not 0.
            refill_interval: if fits {
                token_interval(d, ticks, parts)
            } else {
                Duration::ZERO
            },
            remaining: Some(0),
            ..Grant::nothing(Duration::ZERO, capacity)
        };
        let grant = match (granted, wait, left) {
            (0, wait, 0) if wait > 0 && fits => Grant {
                retry_after: Duration::from_micros(wait),
                ..decided
            },
            (granted, 0, left) if (1..=want).contains(&granted) && fits => Grant {
                tokens: granted,
                lease: Lease { granted, at: now },
                remaining: Some(left),
                ..decided
            },
            _ => {
                return Err(RedisStoreError::BadReply(format!(
                    "acquire of {want} returned {granted} tokens, {left} left of {capacity}, \
                     with a wait of {wait} ticks"
                )));
            }
        };
        self.saw(generation);
        Ok(grant)
    }

    async fn release_tokens(
        &self,
        key: &str,
        lease: Lease,
        unused: u64,
    ) -> Result<(), RedisStoreError> {
        let setting = self.setting();
        // A lease of this store never lies beyond the range nor exceeds
        // 2^53; the script clamps it to the stored capacity, and clamping
        // here keeps its arithmetic exact whatever it is given.
        let granted = lease.granted.min(MAX_ASK);
        let unused = unused.min(granted);
        if unused == 0 || lease.at >= scale::EXACT_LIMIT {
            return Ok(());
        }
        let [code, _returned, _] = self
            .run(&setting, &RELEASE, key, &[granted, lease.at, unused])
            .await?;
        if code == 1 {
            Ok(())
        } else {
            Err(RedisStoreError::BadReply(format!(
                "release returned code {code}"
            )))
        }
    }
}

/// How long a token of the quota an acquire decided under takes to refill,
/// from its ticks of `1/d` µs per token, `ticks / parts`, in nanoseconds
/// rounded up, so that pacing on it is never early ([`refill_interval`]).
/// A quota charged per request holds the exact interval rounded down to
/// `ticks / parts`, below `(ticks + 1) / parts`: that one is rounded up.
fn token_interval(d: u64, ticks: u64, parts: u64) -> Duration {
    let ticks = u128::from(ticks) + u128::from(parts > 1);
    let nanos = (ticks * 1000).div_ceil(u128::from(parts) * u128::from(d));
    u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
}

/// The answer to an ask of nothing, given without calling the server:
/// nothing granted, and what is left untold; the capacity and refill of
/// this node's own quota, the only one it knows without asking.
fn unasked(setting: &Setting) -> Grant {
    Grant {
        refill_interval: setting.quota.refill_interval(),
        ..Grant::nothing(Duration::ZERO, setting.scale.capacity)
    }
}

impl Store for RedisStore {
    type Error = RedisStoreError;

    /// False for the errors the server answers about one key or refuses to
    /// decide on: [`ForeignValue`](RedisStoreError::ForeignValue) (that
    /// key's value) and
    /// [`ServerClockOutOfRange`](RedisStoreError::ServerClockOutOfRange)
    /// (a server that answers but whose clock no failure policy should
    /// paper over). True for the rest, [`BadReply`](RedisStoreError::BadReply)
    /// included: the scripts check each key's value themselves
    /// (`ForeignValue`), so a reply no script returns means the server runs
    /// other scripts or is not the store (a fleet half-upgraded), which
    /// holds for every key, not one.
    ///
    /// ```
    /// use tollgate::shared::{RedisStore, RedisStoreError, Store};
    ///
    /// assert!(!RedisStore::unavailable(&RedisStoreError::ForeignValue("rl:{k}".into())));
    /// assert!(RedisStore::unavailable(&RedisStoreError::BadReply("nil".into())));
    /// ```
    fn unavailable(error: &RedisStoreError) -> bool {
        !matches!(
            error,
            RedisStoreError::ForeignValue(_)
                | RedisStoreError::ServerClockOutOfRange
                | RedisStoreError::QuotaConflict { .. }
        )
    }

    /// Refills `key`'s bucket to the server's now and grants up to `want`
    /// tokens of it, in one script. Nothing granted means `retry_after` is
    /// the exact wait for one token (rounded up to the microsecond). Every
    /// grant carries the quota's capacity. `want = 0` returns an empty grant
    /// without calling the server; a `want` above the capacity asks for the
    /// capacity.
    ///
    /// # Errors
    ///
    /// Any [`RedisStoreError`] but the construction ones. After
    /// [`Redis`](RedisStoreError::Redis) or
    /// [`Timeout`](RedisStoreError::Timeout) the tokens may have been
    /// debited: count them as spent.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// use tollgate::shared::{RedisStore, Store};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// let grant = store.acquire("alice", 3).await?;
    /// assert!(grant.tokens <= 3);
    /// # Ok(())
    /// # }
    /// ```
    fn acquire(
        &self,
        key: &str,
        want: u64,
    ) -> impl Future<Output = Result<Grant, Self::Error>> + Send {
        self.acquire_tokens(key, want)
    }

    /// Gives back up to `unused` tokens of the grant `lease` (clamped to
    /// `lease.granted`): the state moves back by
    /// `min(unused, granted - held)` tokens, where `held` is the time since
    /// the grant on the server's clock, so the refill a full bucket wasted
    /// meanwhile is never handed out again. An expired key (a full bucket)
    /// takes nothing back. Release each lease once: a repeated release
    /// returns its tokens again.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Store::acquire); a failed release may or may not have
    /// been applied, so it must not be retried blindly.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// use tollgate::shared::{RedisStore, Store};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// let grant = store.acquire("alice", 5).await?;
    /// // Used two of them.
    /// store.release("alice", grant.lease, grant.tokens.saturating_sub(2)).await?;
    /// # Ok(())
    /// # }
    /// ```
    fn release(
        &self,
        key: &str,
        lease: Lease,
        unused: u64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.release_tokens(key, lease, unused)
    }

    /// Acquires for every key in one batch: one pipeline of script calls
    /// on one server (one round trip), or every call at once on a cluster,
    /// each routed to its key's master. Each key is still decided by its
    /// own atomic script; each outcome is as [`acquire`](Store::acquire)'s,
    /// in order. The whole batch is bounded by one timeout (each call on a
    /// cluster by its own, so a dead master fails only its keys).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::Quota;
    /// use tollgate::shared::{RedisStore, Store};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = RedisStore::connect("redis://127.0.0.1/", Quota::per_second(5)?, "rl:", Duration::from_secs(1)).await?;
    /// let grants = store.acquire_many(&[("alice", 3), ("bob", 9)]).await;
    /// assert_eq!(grants.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    fn acquire_many<'a>(
        &'a self,
        requests: &'a [(&'a str, u64)],
    ) -> impl Future<Output = Vec<Result<Grant, Self::Error>>> + Send + 'a {
        self.acquire_batch(requests)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("setting", &self.setting())
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Checks a store's configuration; shared by both constructors so that
/// `connect` refuses a bad one before touching the network.
fn validate(
    quota: &Quota,
    prefix: String,
    timeout: Duration,
) -> Result<(Scale, String), RedisStoreError> {
    if timeout.is_zero() {
        return Err(RedisStoreError::ZeroTimeout);
    }
    if quota.initial_credit() != InitialCredit::Full {
        return Err(RedisStoreError::InitialCreditUnsupported(
            quota.initial_credit(),
        ));
    }
    if prefix.contains(['{', '}']) {
        return Err(RedisStoreError::InvalidPrefix);
    }
    let scale = Scale::new(quota)?;
    Ok((scale, prefix))
}

/// `prefix{key}` with `\`, `{`, `}` in `key` escaped as `\\`, `\[`, `\]`.
/// The escape is a prefix code (every escape starts with `\`, which is
/// itself escaped), so it is one-to-one; the result has exactly one `{` and
/// one `}`, hence the hash tag is the whole escaped key. (An empty key has
/// the empty tag `{}`, which Redis Cluster ignores, hashing the whole name:
/// still one key in one slot.)
fn redis_key(prefix: &str, key: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + key.len() + 2);
    out.push_str(prefix);
    out.push('{');
    for c in key.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '{' => out.push_str(r"\["),
            '}' => out.push_str(r"\]"),
            c => out.push(c),
        }
    }
    out.push('}');
    out
}

/// A script's reply: a non-empty array of integers.
fn parse_reply(reply: &Value) -> Result<Vec<i64>, RedisStoreError> {
    let Value::Array(items) = reply else {
        return Err(bad_reply(reply));
    };
    let numbers: Option<Vec<i64>> = items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Some(*n),
            _ => None,
        })
        .collect();
    numbers
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad_reply(reply))
}

fn bad_reply(reply: &Value) -> RedisStoreError {
    RedisStoreError::BadReply(format!("{reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_escaped_one_to_one_inside_one_hash_tag() {
        assert_eq!(redis_key("rl:", "alice"), "rl:{alice}");
        assert_eq!(redis_key("rl:", ""), "rl:{}");
        assert_eq!(redis_key("", "{x}"), r"{\[x\]}");
        assert_eq!(redis_key("p", r"a\b"), r"p{a\\b}");
        let tricky = [
            "", "{", "}", "{}", "}{", r"\", r"\\", r"\[", r"\]", "[", "]", r"\{", "{a}", "a{b}c",
            "x", "x}", "{x", r"x\", "é{ü}",
        ];
        let mut seen = std::collections::HashSet::new();
        for key in tricky {
            let name = redis_key("rl:", key);
            assert!(seen.insert(name.clone()), "{key:?} collides");
            let inner = &name["rl:".len()..];
            assert_eq!(inner.matches('{').count(), 1, "{name}");
            assert_eq!(inner.matches('}').count(), 1, "{name}");
            assert!(inner.starts_with('{') && inner.ends_with('}'), "{name}");
        }
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        const SECOND: Duration = Duration::from_secs(1);
        let quota = Quota::per_second(5).unwrap();
        assert!(matches!(
            validate(&quota, "rl:".into(), Duration::ZERO),
            Err(RedisStoreError::ZeroTimeout)
        ));
        assert!(validate(&quota, "rl:".into(), Duration::MAX).is_ok());
        assert!(matches!(
            validate(&quota, "a{b}:".into(), SECOND),
            Err(RedisStoreError::InvalidPrefix)
        ));
        assert!(matches!(
            validate(&quota, "a}".into(), SECOND),
            Err(RedisStoreError::InvalidPrefix)
        ));
        let empty = quota.with_initial_credit(InitialCredit::Empty).unwrap();
        assert!(matches!(
            validate(&empty, "rl:".into(), SECOND),
            Err(RedisStoreError::InitialCreditUnsupported(
                InitialCredit::Empty
            ))
        ));
        // A nanosecond a token is charged per request, no longer refused.
        let fast = Quota::per_second(1_000_000_000).unwrap();
        assert!(validate(&fast, "rl:".into(), SECOND).is_ok());
        let too_long = Quota::new(9_000_000_000, 1, Duration::from_secs(1)).unwrap();
        assert!(matches!(
            validate(&too_long, "rl:".into(), SECOND),
            Err(RedisStoreError::RefillTooLong { .. })
        ));
        assert!(validate(&quota, String::new(), SECOND).is_ok());
    }

    #[test]
    fn replies_of_the_wrong_shape_are_bad_replies() {
        let ok = Value::Array(vec![Value::Int(1), Value::Int(0), Value::Int(7)]);
        assert_eq!(parse_reply(&ok).unwrap(), [1, 0, 7]);
        for reply in [
            Value::Nil,
            Value::Int(3),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1), Value::Nil, Value::Int(0)]),
        ] {
            assert!(matches!(
                parse_reply(&reply),
                Err(RedisStoreError::BadReply(_))
            ));
        }
    }

    #[test]
    fn the_scripts_read_their_arguments_where_the_store_puts_them() {
        for script in [lua::ACQUIRE, lua::RELEASE] {
            let names = ["epoch", "d", "T", "BT", "last", "gen", "D", "B"];
            for (i, name) in names.iter().enumerate() {
                let line = format!("{name} = tonumber(ARGV[{}])", i + 1);
                assert!(script.contains(&line), "{line}");
            }
        }
        assert!(lua::ACQUIRE.contains("local want = tonumber(ARGV[9])"));
        assert!(lua::ACQUIRE.contains("local fresh = tonumber(ARGV[10])"));
        assert!(lua::RELEASE.contains("local granted = tonumber(ARGV[9])"));
        assert!(lua::RELEASE.contains("local at = tonumber(ARGV[10])"));
        assert!(lua::RELEASE.contains("local unused = tonumber(ARGV[11])"));
    }
}
