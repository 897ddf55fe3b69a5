//! The store's way to Redis: one server or a Redis Cluster, over TCP or
//! TLS, and how one script call or a batch of them travels over each.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, Pipeline, RedisError, Script, TlsCertificates, Value,
};

use super::config::RedisConfig;
use super::error::RedisStoreError;

/// The connection a [`RedisStore`](super::RedisStore) talks through: to one
/// server (a `redis` [`ConnectionManager`], which reconnects on its own) or
/// to a Redis Cluster (a `redis` [`ClusterConnection`], which follows the
/// slot map and its `MOVED` and `ASK` redirections). Built from either with
/// `into()`; clones share the underlying connections.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate::shared::RedisStore;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::cluster::ClusterClient::new(vec!["redis://127.0.0.1:7000"])?;
/// let cluster = client.get_async_connection().await?;
/// let store = RedisStore::new(cluster, Quota::per_second(20)?, "rl:", Duration::from_millis(100))?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection(Route);

#[derive(Clone)]
enum Route {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl From<ConnectionManager> for RedisConnection {
    fn from(connection: ConnectionManager) -> Self {
        RedisConnection(Route::Node(connection))
    }
}

impl From<ClusterConnection> for RedisConnection {
    fn from(connection: ClusterConnection) -> Self {
        RedisConnection(Route::Cluster(connection))
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Route::Node(_) => "RedisConnection::Node",
            Route::Cluster(_) => "RedisConnection::Cluster",
        })
    }
}

impl RedisConnection {
    /// Connects as `config` says, every attempt bounded by its timeout.
    pub(super) async fn open(config: &RedisConfig) -> Result<RedisConnection, RedisStoreError> {
        let timeout = config.timeout;
        let nodes = config
            .nodes
            .iter()
            .map(|url| node_info(config, url))
            .collect::<Result<Vec<_>, _>>()?;
        let first = nodes.first().ok_or(RedisStoreError::NoNodes)?.clone();
        let certificates = certificates(config);
        // One plain attempt first: the connection manager and the cluster
        // client retry a failed connection until the timeout, and the
        // cluster client folds the cause into a string, so a wrong password
        // or an untrusted certificate would surface as a bare timeout.
        probe_any(&nodes, certificates.as_ref(), timeout).await?;
        if config.cluster {
            let mut builder = ClusterClientBuilder::new(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout);
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            let client = builder.build()?;
            let connection = bounded(timeout, client.get_async_connection()).await?;
            Ok(connection.into())
        } else {
            let client = client(first, certificates)?;
            // Reconnection attempts at most one second apart: the `redis`
            // default backs off to a minute, long for a limiter.
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(timeout)
                .set_max_delay(1000);
            let connection =
                bounded(timeout, ConnectionManager::new_with_config(client, config)).await?;
            Ok(connection.into())
        }
    }

    /// Sends one `EVALSHA` of `script` (`call`), loading the script and
    /// sending it again once on `NOSCRIPT`, all within `timeout`.
    pub(super) async fn eval(
        &self,
        script: &Script,
        call: &Cmd,
        timeout: Duration,
    ) -> Result<Value, RedisStoreError> {
        match &self.0 {
            Route::Node(connection) => {
                bounded(timeout, eval_on(&mut connection.clone(), script, call)).await
            }
            Route::Cluster(connection) => {
                bounded(timeout, eval_on(&mut connection.clone(), script, call)).await
            }
        }
    }

    /// Sends many `EVALSHA`s of `script`, one reply per call, in order.
    ///
    /// On one server they travel as one pipeline (one round trip); calls
    /// answered `NOSCRIPT` did not run, and only they are sent again after
    /// the script is loaded. On a cluster each call goes on its own, all at
    /// once (the per-node connections are multiplexed, so calls to one node
    /// share its writes): a cluster pipeline is refused across slots, and
    /// the client retries a whole pipeline when any call in it is
    /// redirected, which would run the others twice. Each call is then
    /// redirected, retried and bounded by `timeout` on its own, so a dead
    /// master fails only its own keys.
    pub(super) async fn eval_many(
        &self,
        script: &Script,
        calls: &[Cmd],
        timeout: Duration,
    ) -> Vec<Result<Value, RedisStoreError>> {
        match &self.0 {
            Route::Node(connection) => {
                let mut connection = connection.clone();
                match bounded(timeout, pipelined(&mut connection, script, calls)).await {
                    Ok(replies) => replies,
                    Err(e) => (0..calls.len()).map(|_| Err(e.duplicate())).collect(),
                }
            }
            Route::Cluster(connection) => {
                futures_util::future::join_all(calls.iter().map(|call| {
                    let mut connection = connection.clone();
                    async move { bounded(timeout, eval_on(&mut connection, script, call)).await }
                }))
                .await
            }
        }
    }
}

/// `future`, failing with [`RedisStoreError::Timeout`] after `timeout`,
/// also when the client's own timers (set to the same bound) fire first.
async fn bounded<T>(
    timeout: Duration,
    future: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisStoreError> {
    match tokio::time::timeout(timeout, future).await {
        Ok(Err(e)) if e.is_timeout() => Err(RedisStoreError::Timeout(timeout)),
        Ok(result) => result.map_err(RedisStoreError::from),
        Err(_) => Err(RedisStoreError::Timeout(timeout)),
    }
}

async fn eval_on<C: ConnectionLike>(
    connection: &mut C,
    script: &Script,
    call: &Cmd,
) -> Result<Value, RedisError> {
    match call.query_async::<Value>(connection).await {
        Err(e) if e.kind() == ErrorKind::NoScriptError => {
            script.load_async(connection).await?;
            call.query_async(connection).await
        }
        reply => reply,
    }
}

/// `calls` as one pipeline, then the ones answered `NOSCRIPT` (which did
/// not run) once more after loading the script. Fails as a whole only when
/// the first pipeline does, when no call is known to have run.
async fn pipelined(
    connection: &mut ConnectionManager,
    script: &Script,
    calls: &[Cmd],
) -> Result<Vec<Result<Value, RedisStoreError>>, RedisError> {
    let mut replies = send(connection, calls.iter()).await?;
    let missing: Vec<usize> = (0..replies.len())
        .filter(|&i| matches!(&replies[i], Err(e) if e.kind() == ErrorKind::NoScriptError))
        .collect();
    if missing.is_empty() {
        return Ok(replies.into_iter().map(|r| r.map_err(Into::into)).collect());
    }
    let again = match script.load_async(connection).await {
        Ok(_) => send(connection, missing.iter().map(|&i| &calls[i])).await,
        Err(e) => Err(e),
    };
    let mut out: Vec<Result<Value, RedisStoreError>> = Vec::with_capacity(replies.len());
    match again {
        Ok(again) => {
            for (&i, reply) in missing.iter().zip(again) {
                replies[i] = reply;
            }
            out.extend(replies.into_iter().map(|r| r.map_err(Into::into)));
        }
        Err(e) => {
            // Only the calls that had not run fail; the others keep the
            // replies (and debits) they already have.
            let e = RedisStoreError::from(e);
            out.extend(replies.into_iter().map(|r| match r {
                Err(lost) if lost.kind() == ErrorKind::NoScriptError => Err(e.duplicate()),
                r => r.map_err(Into::into),
            }));
        }
    }
    Ok(out)
}

/// One pipeline of `calls`, one reply each: a server error answers only
/// its own call.
async fn send<'a>(
    connection: &mut ConnectionManager,
    calls: impl Iterator<Item = &'a Cmd>,
) -> Result<Vec<Result<Value, RedisError>>, RedisError> {
    let mut pipeline = Pipeline::new();
    for call in calls {
        pipeline.add_command(call.clone());
    }
    let count = pipeline.len();
    let values = connection.req_packed_commands(&pipeline, 0, count).await?;
    if values.len() != count {
        return Err(RedisError::from((
            ErrorKind::ParseError,
            "a pipeline's reply count differs from its call count",
            format!("{} replies to {count} calls", values.len()),
        )));
    }
    Ok(values
        .into_iter()
        .map(|value| match value {
            Value::ServerError(e) => Err(e.into()),
            value => Ok(value),
        })
        .collect())
}

/// `url` with the configuration's credentials, which win over the URL's.
fn node_info(config: &RedisConfig, url: &str) -> Result<ConnectionInfo, RedisStoreError> {
    let mut info = url.into_connection_info()?;
    if let ConnectionAddr::TcpTls { insecure: true, .. } = info.addr {
        return Err(RedisStoreError::InsecureTls);
    }
    if config.password.is_some() {
        info.redis.username.clone_from(&config.username);
        info.redis.password.clone_from(&config.password);
    }
    Ok(info)
}

fn certificates(config: &RedisConfig) -> Option<TlsCertificates> {
    if config.ca_certificate_pem.is_none() && config.client_identity_pem.is_none() {
        return None;
    }
    Some(TlsCertificates {
        client_tls: config
            .client_identity_pem
            .clone()
            .map(|(client_cert, client_key)| ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: config.ca_certificate_pem.clone(),
    })
}

fn client(
    info: ConnectionInfo,
    certificates: Option<TlsCertificates>,
) -> Result<Client, RedisError> {
    match certificates {
        Some(certificates) => Client::build_with_tls(info, certificates),
        None => Client::open(info),
    }
}

/// [`probe`] of each node in turn until one answers, each bounded by
/// `timeout`: a cluster's seeds are several so that one down (a master
/// restarting, a seed since removed) does not keep a node from starting.
/// Refused credentials or an untrusted certificate end the search at once:
/// every seed shares them, so no other seed would accept them.
async fn probe_any(
    nodes: &[ConnectionInfo],
    certificates: Option<&TlsCertificates>,
    timeout: Duration,
) -> Result<(), RedisStoreError> {
    let mut failure = RedisStoreError::NoNodes;
    for node in nodes {
        match bounded(timeout, probe(node.clone(), certificates.cloned(), timeout)).await {
            Ok(()) => return Ok(()),
            Err(e @ (RedisStoreError::AuthenticationFailed(_) | RedisStoreError::Tls(_))) => {
                return Err(e);
            }
            Err(e) => failure = e,
        }
    }
    Err(failure)
}

/// One connection to `info` and a `PING`: connection, TLS handshake,
/// `AUTH` and permission to run commands, each failing with its own error.
async fn probe(
    info: ConnectionInfo,
    certificates: Option<TlsCertificates>,
    timeout: Duration,
) -> Result<(), RedisError> {
    let config = AsyncConnectionConfig::new().set_connection_timeout(timeout);
    let mut connection = client(info, certificates)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    ::redis::cmd("PING")
        .query_async::<Value>(&mut connection)
        .await
        .map(drop)
}

impl From<RedisError> for RedisStoreError {
    /// Sorts out the failures a caller acts on differently: credentials
    /// refused, a server certificate that does not verify.
    fn from(e: RedisError) -> Self {
        if e.kind() == ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
        {
            return RedisStoreError::AuthenticationFailed(e.to_string());
        }
        if let Some(tls) = tls_cause(&e) {
            return RedisStoreError::Tls(tls.to_string());
        }
        RedisStoreError::Redis(e)
    }
}

/// The rustls error under `e`: a TLS handshake fails inside the I/O error
/// the client reports.
fn tls_cause(e: &RedisError) -> Option<&rustls::Error> {
    let io = std::error::Error::source(e)?.downcast_ref::<std::io::Error>()?;
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

impl RedisStoreError {
    /// The same failure for another call of one batch (the `redis` error
    /// cannot be cloned; its kind and text are kept).
    fn duplicate(&self) -> RedisStoreError {
        use RedisStoreError as E;
        match self {
            E::Redis(e) => E::Redis(RedisError::from((
                e.kind(),
                "a batch of calls failed",
                e.to_string(),
            ))),
            E::Timeout(timeout) => E::Timeout(*timeout),
            E::BadReply(reply) => E::BadReply(reply.clone()),
            E::AuthenticationFailed(why) => E::AuthenticationFailed(why.clone()),
            E::Tls(why) => E::Tls(why.clone()),
            E::RefillTooLong { capacity } => E::RefillTooLong {
                capacity: *capacity,
            },
            E::InitialCreditUnsupported(credit) => E::InitialCreditUnsupported(*credit),
            E::ZeroTimeout => E::ZeroTimeout,
            E::InvalidPrefix => E::InvalidPrefix,
            E::NoNodes => E::NoNodes,
            E::ServerClockOutOfRange => E::ServerClockOutOfRange,
            E::ForeignValue(key) => E::ForeignValue(key.clone()),
            E::InsecureTls => E::InsecureTls,
            E::QuotaConflict { key, generation } => E::QuotaConflict {
                key: key.clone(),
                generation: *generation,
            },
            E::GenerationTooLarge(generation) => E::GenerationTooLarge(*generation),
        }
    }
}
