//! A CA and a server certificate it signed (for `127.0.0.1` and
//! `localhost`), generated at test time by `rcgen`, for the TLS tests of
//! the Redis store and of the gRPC layer.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

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
        // Distinct names: OpenSSL (redis-server, redis-cli) takes a
        // certificate whose subject is its issuer's for self-signed.
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "tollgate test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let server_key = KeyPair::generate().expect("server key");
        let mut server_params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
                .expect("server parameters");
        server_params
            .distinguished_name
            .push(DnType::CommonName, "tollgate test server");
        let server = server_params
            .signed_by(&server_key, &ca)
            .expect("server certificate");
        Pki {
            ca_pem: ca.pem(),
            cert_pem: server.pem(),
            key_pem: server_key.serialize_pem(),
        }
    }
}
