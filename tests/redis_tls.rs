//! `RedisStore` over TLS (`rediss://`, rustls) to a real TLS-only
//! `redis-server` whose CA and certificate are generated at test time, with
//! ACL users: a trusted server and the right credentials work; an
//! untrusted certificate is a typed `Tls` error; wrong, unknown or missing
//! credentials are a typed `AuthenticationFailed` error.

#![cfg(feature = "redis")]

#[path = "support/redis_server.rs"]
mod redis_server;

#[path = "support/redis_tls.rs"]
mod redis_tls;

use std::time::Duration;

use redis_tls::{Pki, TlsRedis};
use tollgate::Quota;
use tollgate::shared::{RedisConfig, RedisStore, RedisStoreError, Store};

const TIMEOUT: Duration = Duration::from_secs(2);

/// The `default` user is off: every connection must authenticate as
/// `limiter`, whose password is `right-password`.
const ACL: [&str; 9] = [
    "--user",
    "default",
    "off",
    "--user",
    "limiter",
    "on",
    ">right-password",
    "~*",
    "+@all",
];

fn quota() -> Quota {
    Quota::new(5, 1, Duration::from_secs(3600)).unwrap()
}

async fn connect(config: RedisConfig) -> Result<RedisStore, RedisStoreError> {
    RedisStore::connect_with(&config.timeout(TIMEOUT), quota(), "tls:").await
}

fn trusted(server: &TlsRedis) -> RedisConfig {
    RedisConfig::node(server.url()).ca_certificate_pem(server.pki.ca_pem.clone())
}

#[tokio::test]
async fn a_store_over_tls_with_a_private_ca_and_an_acl_user_works() {
    let Some(server) = TlsRedis::start(
        "a_store_over_tls_with_a_private_ca_and_an_acl_user_works",
        &ACL,
    ) else {
        return;
    };
    let store = connect(trusted(&server).credentials("limiter", "right-password"))
        .await
        .expect("a trusted server and the right password");
    assert_eq!(store.acquire("alice", 3).await.unwrap().tokens, 3);
    let batch = store.acquire_many(&[("alice", 3), ("bob", 1)]).await;
    assert_eq!(batch[0].as_ref().unwrap().tokens, 2);
    assert_eq!(batch[1].as_ref().unwrap().tokens, 1);
    // Credentials in the URL work as well.
    let in_url = format!(
        "rediss://limiter:right-password@127.0.0.1:{}/",
        server.server.port()
    );
    let store = connect(RedisConfig::node(in_url).ca_certificate_pem(server.pki.ca_pem.clone()))
        .await
        .expect("credentials in the URL");
    assert_eq!(store.acquire("alice", 1).await.unwrap().tokens, 0);
}

#[tokio::test]
async fn a_certificate_that_does_not_verify_is_a_typed_tls_error() {
    let Some(server) = TlsRedis::start(
        "a_certificate_that_does_not_verify_is_a_typed_tls_error",
        &ACL,
    ) else {
        return;
    };
    let stranger = Pki::generate();
    let untrusted = RedisConfig::node(server.url())
        .ca_certificate_pem(stranger.ca_pem)
        .credentials("limiter", "right-password");
    let failed = connect(untrusted).await;
    assert!(matches!(failed, Err(RedisStoreError::Tls(_))), "{failed:?}");
    // Nor do the system's roots know the test's CA.
    let system_roots = RedisConfig::node(server.url()).credentials("limiter", "right-password");
    let failed = connect(system_roots).await;
    assert!(matches!(failed, Err(RedisStoreError::Tls(_))), "{failed:?}");
    // Plain TCP to a TLS port is no TLS error: the handshake never starts.
    let plain = RedisConfig::node(format!("redis://127.0.0.1:{}/", server.server.port()))
        .credentials("limiter", "right-password");
    let failed = connect(plain.timeout(Duration::from_millis(300))).await;
    assert!(
        matches!(
            failed,
            Err(RedisStoreError::Redis(_) | RedisStoreError::Timeout(_))
        ),
        "{failed:?}"
    );
}

#[tokio::test]
async fn refused_credentials_are_a_typed_authentication_error() {
    let Some(server) =
        TlsRedis::start("refused_credentials_are_a_typed_authentication_error", &ACL)
    else {
        return;
    };
    for config in [
        trusted(&server).credentials("limiter", "wrong-password"),
        trusted(&server).credentials("nobody", "right-password"),
        trusted(&server).password("right-password"),
        trusted(&server),
    ] {
        let shown = format!("{config:?}");
        let failed = connect(config).await;
        assert!(
            matches!(failed, Err(RedisStoreError::AuthenticationFailed(_))),
            "{shown}: {failed:?}"
        );
    }
}
