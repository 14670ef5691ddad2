//! Certificates made at test time (rcgen): a CA, a server certificate for `localhost` and a
//! client certificate, all signed by that CA and written as PEM files into a temp folder for
//! redis-server. No key is checked in.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA and what it signed, as PEM text and as files.
pub struct TestCerts {
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    dir: tempfile::TempDir,
}

impl TestCerts {
    /// A new CA, a server certificate valid for the DNS name `localhost` only (so that
    /// `127.0.0.1` is a wrong host name), and a client certificate.
    pub fn generate() -> Self {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "lockman test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca, ca_key);

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(names).expect("leaf params");
            params
                .distinguished_name
                .push(DnType::CommonName, "lockman test");
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &issuer).expect("leaf certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert_pem, client_key_pem) =
            leaf(Vec::new(), ExtendedKeyUsagePurpose::ClientAuth);

        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).expect("write a certificate file")
        };
        write("ca.pem", &ca_cert.pem());
        write("server.pem", &server_cert);
        write("server.key", &server_key);
        write("client.pem", &client_cert_pem);
        write("client.key", &client_key_pem);
        Self {
            ca_pem: ca_cert.pem(),
            client_cert_pem,
            client_key_pem,
            dir,
        }
    }

    /// A file in the certificates' folder: `ca.pem`, `server.pem`, `server.key`, `client.pem`,
    /// `client.key`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The kit's TLS files for a server with these certificates, whose connections present the
    /// client certificate (required by the server with `auth_clients`).
    pub fn tls_files(&self, auth_clients: bool) -> lockman::testing::TlsFiles {
        let files = lockman::testing::TlsFiles::new(
            self.file("server.pem"),
            self.file("server.key"),
            self.file("ca.pem"),
        );
        match auth_clients {
            true => files.require_client(self.file("client.pem"), self.file("client.key")),
            false => files.client(self.file("client.pem"), self.file("client.key")),
        }
    }

    /// The redis-server arguments of a TLS-only server on `port`.
    pub fn server_args(&self, port: u16, auth_clients: bool) -> Vec<String> {
        let path = |name: &str| self.file(name).display().to_string();
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path("server.pem"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.pem"),
            "--tls-auth-clients".into(),
            if auth_clients { "yes" } else { "no" }.into(),
        ]
    }

    /// redis-rs's certificates for a client that trusts this CA and presents its client
    /// certificate.
    pub fn redis_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert_pem.clone().into_bytes(),
                client_key: self.client_key_pem.clone().into_bytes(),
            }),
            root_cert: Some(self.ca_pem.clone().into_bytes()),
        }
    }
}
