//! `RedisStore` over TLS (`rediss://`, rustls) to a real TLS-only
//! `redis-server` whose CA and certificate are generated at test time, with
//! ACL users: a trusted server and the right credentials work; an
//! untrusted certificate is a typed `Tls` error; wrong, unknown or missing
//! credentials are a typed `AuthenticationFailed` error. The same over a
//! three-master cluster whose clients and bus speak only TLS.

use tollgate_test_support::pki;
use tollgate_test_support::redis_tls;

use tollgate_test_support::redis_cluster;

use std::time::Duration;

use pki::Pki;
use redis_cluster::{Access, RedisCluster};
use redis_tls::{TlsFiles, TlsRedis};
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
    RedisConfig::node(server.url()).ca_certificate_pem(server.pki().ca_pem.clone())
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
    let store = connect(RedisConfig::node(in_url).ca_certificate_pem(server.pki().ca_pem.clone()))
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

/// A fleet's deployment: a Redis Cluster over TLS (clients and the
/// cluster bus), with an ACL user. A batch over keys on every master is
/// granted; an untrusted CA and a wrong password fail with their typed
/// errors, as on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_with_an_acl_user_serves_every_master() {
    let test = "a_cluster_over_tls_with_an_acl_user_serves_every_master";
    let Some(files) = TlsFiles::generate(test) else {
        return;
    };
    let mut server_args = files.server_args();
    server_args.extend(ACL.map(String::from));
    let access = Access {
        tls: true,
        server_args,
        cli_args: ["--tls", "--cacert", &files.ca_file()]
            .into_iter()
            .chain([
                "--user",
                "limiter",
                "--pass",
                "right-password",
                "--no-auth-warning",
            ])
            .map(String::from)
            .collect(),
    };
    let Some(cluster) = RedisCluster::start_with(test, access) else {
        return;
    };
    let trusted =
        || RedisConfig::cluster(cluster.urls()).ca_certificate_pem(files.pki.ca_pem.clone());
    let store = connect(trusted().credentials("limiter", "right-password"))
        .await
        .expect("a trusted cluster and the right password");
    let names: Vec<String> = (0..30).map(|n| format!("tenant-{n}")).collect();
    let requests: Vec<(&str, u64)> = names.iter().map(|k| (k.as_str(), 9)).collect();
    for grant in store.acquire_many(&requests).await {
        assert_eq!(grant.expect("a batch over TLS").tokens, 5);
    }
    let masters: std::collections::BTreeSet<usize> = names
        .iter()
        .map(|k| {
            let slot = cluster.cli(0, &["CLUSTER", "KEYSLOT", &store.redis_key(k)]);
            cluster.owner(slot.parse().unwrap())
        })
        .collect();
    assert_eq!(masters.len(), 3, "the batch reached every master");

    let failed = connect(trusted().credentials("limiter", "wrong-password")).await;
    assert!(
        matches!(failed, Err(RedisStoreError::AuthenticationFailed(_))),
        "{failed:?}"
    );
    let untrusted = RedisConfig::cluster(cluster.urls())
        .ca_certificate_pem(Pki::generate().ca_pem)
        .credentials("limiter", "right-password");
    let failed = connect(untrusted).await;
    assert!(matches!(failed, Err(RedisStoreError::Tls(_))), "{failed:?}");
}

/// A `rediss://` URL is verified TLS or nothing: the `redis` crate's
/// `#insecure` fragment (no certificate verification, should any crate of
/// the build enable it) is refused before any connection is made.
#[tokio::test]
async fn a_rediss_url_asking_for_no_certificate_verification_is_refused() {
    for config in [
        RedisConfig::node("rediss://127.0.0.1:1/#insecure"),
        RedisConfig::cluster(["rediss://127.0.0.1:1/", "rediss://127.0.0.1:2/#insecure"]),
    ] {
        let built = RedisStore::connect_with(
            &config,
            Quota::new(3, 1, Duration::from_secs(3600)).unwrap(),
            "rl:tls:",
        )
        .await;
        assert!(
            matches!(built, Err(RedisStoreError::InsecureTls)),
            "{:?}",
            built.err()
        );
    }
}
