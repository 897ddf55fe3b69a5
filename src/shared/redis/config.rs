//! [`RedisConfig`]: where a [`RedisStore`](super::RedisStore) connects and how.

use std::fmt;
use std::time::Duration;

use ::redis::IntoConnectionInfo;

/// How a [`RedisStore`](super::RedisStore) reaches Redis: one server or a
/// Redis Cluster, the bound on every call, ACL credentials, and the
/// certificates of a `rediss://` (TLS) connection.
///
/// URLs are the `redis` crate's: `redis://host:port/db`,
/// `rediss://host:port` for TLS (verified against the system's roots, or
/// only against [`ca_certificate_pem`](Self::ca_certificate_pem) when given),
/// `redis+unix:///path` for a local socket (one server only). Credentials
/// may sit in the URL (`redis://user:password@host`) or be set here, which
/// wins. The `redis` crate's `#insecure` fragment (`rediss://host/#insecure`,
/// no certificate verification) is refused when the store connects
/// ([`RedisStoreError::InsecureTls`](super::RedisStoreError::InsecureTls)).
///
/// ```
/// use std::time::Duration;
/// use tollgate::shared::RedisConfig;
///
/// let config = RedisConfig::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
///     .timeout(Duration::from_millis(200))
///     .credentials("limiter", "s3cret");
/// assert!(config.is_cluster());
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    pub(super) nodes: Vec<String>,
    pub(super) cluster: bool,
    pub(super) timeout: Duration,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    pub(super) ca_certificate_pem: Option<Vec<u8>>,
    pub(super) client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedisConfig {
    /// The bound on each call (and on connecting) unless
    /// [`timeout`](Self::timeout) sets another: a quarter of a second, long
    /// for a round trip inside a data centre, short for a request waiting
    /// on its limiter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::shared::RedisConfig;
    ///
    /// assert_eq!(RedisConfig::DEFAULT_TIMEOUT, Duration::from_millis(250));
    /// ```
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

    /// One server (or a proxy in front of a cluster) at `url`.
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// assert!(!RedisConfig::node("redis://127.0.0.1:6379/0").is_cluster());
    /// ```
    pub fn node(url: impl Into<String>) -> RedisConfig {
        RedisConfig::new(vec![url.into()], false)
    }

    /// A Redis Cluster, discovered from `seeds` (one reachable node is
    /// enough; the client learns the slot map from it and follows `MOVED`
    /// and `ASK` redirections). All seeds share one scheme and credentials.
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// let config = RedisConfig::cluster(["redis://127.0.0.1:7000"]);
    /// assert!(config.is_cluster());
    /// ```
    pub fn cluster<I>(seeds: I) -> RedisConfig
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        RedisConfig::new(seeds.into_iter().map(Into::into).collect(), true)
    }

    fn new(nodes: Vec<String>, cluster: bool) -> RedisConfig {
        RedisConfig {
            nodes,
            cluster,
            timeout: RedisConfig::DEFAULT_TIMEOUT,
            username: None,
            password: None,
            ca_certificate_pem: None,
            client_identity_pem: None,
        }
    }

    /// Bounds every call, and each connection attempt, by `timeout`
    /// ([`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT) otherwise). Zero is
    /// refused when the store is built; `Duration::MAX` waits as long as
    /// the server takes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::shared::RedisConfig;
    ///
    /// let config = RedisConfig::node("redis://127.0.0.1/").timeout(Duration::from_millis(50));
    /// assert_eq!(config.call_timeout(), Duration::from_millis(50));
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> RedisConfig {
        self.timeout = timeout;
        self
    }

    /// The bound on each call.
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// assert_eq!(RedisConfig::node("redis://127.0.0.1/").call_timeout(), RedisConfig::DEFAULT_TIMEOUT);
    /// ```
    pub fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// Authenticates as ACL user `username` with `password` (Redis 6 and
    /// later), on every node.
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// let config = RedisConfig::node("rediss://redis.internal:6380").credentials("limiter", "s3cret");
    /// # let _ = config;
    /// ```
    pub fn credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> RedisConfig {
        self.username = Some(username.into());
        self.password = Some(password.into());
        self
    }

    /// Authenticates with `password` alone: the `default` user, or a
    /// server configured with `requirepass`.
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// let config = RedisConfig::node("redis://127.0.0.1/").password("s3cret");
    /// # let _ = config;
    /// ```
    pub fn password(mut self, password: impl Into<String>) -> RedisConfig {
        self.username = None;
        self.password = Some(password.into());
        self
    }

    /// Trusts only the CA certificates in `pem` (PEM, one or more) for a
    /// `rediss://` server, instead of the system's roots: a private CA.
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// # let ca = Vec::new();
    /// let config = RedisConfig::node("rediss://redis.internal:6380").ca_certificate_pem(ca);
    /// # let _ = config;
    /// ```
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> RedisConfig {
        self.ca_certificate_pem = Some(pem.into());
        self
    }

    /// Presents the client certificate chain `certificate` with its
    /// private key `key` (both PEM) to a server that requires client
    /// certificates (`tls-auth-clients yes`).
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// # let (cert, key) = (Vec::new(), Vec::new());
    /// let config = RedisConfig::node("rediss://redis.internal:6380").client_certificate_pem(cert, key);
    /// # let _ = config;
    /// ```
    pub fn client_certificate_pem(
        mut self,
        certificate: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> RedisConfig {
        self.client_identity_pem = Some((certificate.into(), key.into()));
        self
    }

    /// Whether this configuration is for a Redis Cluster.
    ///
    /// ```
    /// use tollgate::shared::RedisConfig;
    ///
    /// assert!(RedisConfig::cluster(["redis://127.0.0.1:7000"]).is_cluster());
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }
}

impl fmt::Debug for RedisConfig {
    /// Never shows the password, nor credentials inside the URLs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|url| address(url)).collect();
        f.debug_struct("RedisConfig")
            .field("nodes", &nodes)
            .field("cluster", &self.cluster)
            .field("timeout", &self.timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("custom_ca", &self.ca_certificate_pem.is_some())
            .field("client_certificate", &self.client_identity_pem.is_some())
            .finish()
    }
}

/// What of `url` may be logged: the address the redis crate reads from it
/// (`host:port`, or a socket's path). Credentials ride in the userinfo of a
/// TCP URL but in the query of a `redis+unix://` one (`?pass=`), so the
/// address is rebuilt from the parsed URL rather than cut out of its text.
fn address(url: &str) -> String {
    match url.into_connection_info() {
        Ok(info) => info.addr.to_string(),
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_a_password() {
        let config = RedisConfig::node("redis://user:hunter2@127.0.0.1:6379/").password("pa55");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("pa55"), "{shown}");
        assert!(shown.contains("127.0.0.1:6379"), "{shown}");
    }
}
