//! A private TLS-only `redis-server` per test, with a CA and a server
//! certificate (for `127.0.0.1` and `localhost`) generated at test time by
//! `rcgen`; files removed and server killed on drop.
//!
//! Include it beside `redis_server.rs`, which it builds on:
//!
//! ```ignore
//! #[path = "support/redis_server.rs"]
//! mod redis_server;
//! #[path = "support/redis_tls.rs"]
//! mod redis_tls;
//! ```

// Each test crate that includes this module uses only part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use super::redis_server::{Options, RedisServer, skip};

/// A CA and a server certificate it signed, all PEM.
pub struct Pki {
    /// The CA's certificate: what a client trusts.
    pub ca_pem: String,
    /// The server's certificate, for `127.0.0.1` and `localhost`.
    pub cert_pem: String,
    /// The server's private key.
    pub key_pem: String,
}

impl Pki {
    /// A fresh CA and a server certificate signed by it.
    pub fn generate() -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let server_key = KeyPair::generate().expect("server key");
        let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
            .expect("server parameters")
            .signed_by(&server_key, &ca)
            .expect("server certificate");
        Pki {
            ca_pem: ca.pem(),
            cert_pem: server.pem(),
            key_pem: server_key.serialize_pem(),
        }
    }
}

/// A running TLS-only server, and the PKI it presents.
pub struct TlsRedis {
    /// The server (killed on drop).
    pub server: RedisServer,
    /// Its certificates.
    pub pki: Pki,
    files: PathBuf,
}

impl TlsRedis {
    /// Starts a server that speaks only TLS, presenting a fresh server
    /// certificate, not asking for client certificates, with `args` added
    /// (ACL users, say). `None` after a skip notice when it cannot start on
    /// a developer's machine; a panic with `CI` set.
    pub fn start(test: &str, args: &[&str]) -> Option<TlsRedis> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let pki = Pki::generate();
        let files = std::env::temp_dir().join(format!(
            "tollgate-tls-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = std::fs::create_dir_all(&files).and_then(|()| {
            std::fs::write(files.join("ca.pem"), &pki.ca_pem)?;
            std::fs::write(files.join("server.pem"), &pki.cert_pem)?;
            std::fs::write(files.join("server.key"), &pki.key_pem)
        });
        if let Err(e) = written {
            return skip(test, &format!("cannot write the TLS files: {e}"));
        }
        let path = |name: &str| files.join(name).to_string_lossy().into_owned();
        let mut options = Options {
            tls: true,
            args: vec![
                "--tls-cert-file".into(),
                path("server.pem"),
                "--tls-key-file".into(),
                path("server.key"),
                "--tls-ca-cert-file".into(),
                path("ca.pem"),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
        };
        options.args.extend(args.iter().map(|a| a.to_string()));
        let Some(server) = RedisServer::start_with(test, &options) else {
            let _ = std::fs::remove_dir_all(&files);
            return None;
        };
        Some(TlsRedis { server, pki, files })
    }

    /// A `rediss://` URL for the server.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.server.port())
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.files);
    }
}
