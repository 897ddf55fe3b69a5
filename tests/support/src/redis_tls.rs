//! A private TLS-only `redis-server` per test, with a CA and a server
//! certificate (for `127.0.0.1` and `localhost`) generated at test time by
//! `rcgen`; files removed and server killed on drop.
//!

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::pki::Pki;
use crate::redis_server::{Options, RedisServer, skip};

/// A fresh [`Pki`] written to files for `redis-server` and `redis-cli`;
/// removed on drop.
pub struct TlsFiles {
    /// The certificates.
    pub pki: Pki,
    dir: PathBuf,
}

impl TlsFiles {
    /// Generates the PKI and writes it; `None` after a skip notice if the
    /// files cannot be written (a panic with `CI` set).
    pub fn generate(test: &str) -> Option<TlsFiles> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let pki = Pki::generate();
        let dir = std::env::temp_dir().join(format!(
            "tollgate-tls-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = std::fs::create_dir_all(&dir).and_then(|()| {
            std::fs::write(dir.join("ca.pem"), &pki.ca_pem)?;
            std::fs::write(dir.join("server.pem"), &pki.cert_pem)?;
            std::fs::write(dir.join("server.key"), &pki.key_pem)
        });
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&dir);
            return skip(test, &format!("cannot write the TLS files: {e}"));
        }
        Some(TlsFiles { pki, dir })
    }

    /// The CA's file, for `redis-cli --cacert`.
    pub fn ca_file(&self) -> String {
        self.path("ca.pem")
    }

    /// `redis-server` options presenting the server certificate and not
    /// asking for client certificates.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert-file".into(),
            self.path("server.pem"),
            "--tls-key-file".into(),
            self.path("server.key"),
            "--tls-ca-cert-file".into(),
            self.ca_file(),
            "--tls-auth-clients".into(),
            "no".into(),
        ]
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running TLS-only server, and the PKI it presents.
pub struct TlsRedis {
    /// The server (killed on drop, before its files go).
    pub server: RedisServer,
    /// Its certificates.
    pub files: TlsFiles,
}

impl TlsRedis {
    /// Starts a server that speaks only TLS, presenting a fresh server
    /// certificate, not asking for client certificates, with `args` added
    /// (ACL users, say). `None` after a skip notice when it cannot start on
    /// a developer's machine; a panic with `CI` set.
    pub fn start(test: &str, args: &[&str]) -> Option<TlsRedis> {
        let files = TlsFiles::generate(test)?;
        let mut options = Options {
            tls: true,
            args: files.server_args(),
        };
        options.args.extend(args.iter().map(|a| a.to_string()));
        let server = RedisServer::start_with(test, &options)?;
        Some(TlsRedis { server, files })
    }

    /// A `rediss://` URL for the server.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.server.port())
    }

    /// Its certificates.
    pub fn pki(&self) -> &Pki {
        &self.files.pki
    }
}
