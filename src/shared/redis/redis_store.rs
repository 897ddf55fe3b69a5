//! [`RedisStore`]: the handle on a shared budget in Redis (its connection,
//! the quota it sends, its key prefix and timeout), how one is built and
//! what it tells of itself.

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use super::config::RedisConfig;
use super::connection::RedisConnection;
use super::error::RedisStoreError;
use super::scale::{self, Scale};
use crate::quota::{InitialCredit, Quota};
use crate::sync::unmodelled::{Arc, Mutex, lock};

/// A [`Store`](crate::shared::Store) in Redis: one GCRA token bucket per key, shared by every
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
/// - **Batches.** [`acquire_many`](crate::shared::Store::acquire_many) is one pipeline on
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
    pub(super) connection: RedisConnection,
    /// The quota this node sends, and the newest generation the server
    /// reported: behind one lock (a few copies per round trip to Redis),
    /// shared by clones so that one `set_quota` reaches every one of them.
    setting: Arc<Mutex<Setting>>,
    prefix: String,
    pub(super) timeout: Duration,
}

/// What a node sends with every call: its quota, converted, and the
/// generation that orders it among the fleet's quotas.
#[derive(Clone, Copy, Debug)]
pub(super) struct Setting {
    pub(super) quota: Quota,
    pub(super) scale: Scale,
    pub(super) generation: u64,
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
    pub(super) fn fresh(&self) -> u64 {
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
    pub(super) fn setting(&self) -> Setting {
        *lock(&self.setting)
    }

    /// Notes the generation a reply was decided under.
    pub(super) fn saw(&self, generation: u64) {
        let mut setting = lock(&self.setting);
        setting.stored = setting.stored.max(generation);
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
}
