//! Certificates for TLS tests, made on the spot with rcgen: a CA, a server certificate for
//! `localhost` and `127.0.0.1` signed by it, and a client certificate for mutual TLS. Written as
//! PEM files into a directory of the caller's, for `redis-server --tls-*` and for the client's
//! `tls_ca_file` / `tls_client_auth`.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};

/// The PEM files of one test CA and the certificates it signed.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn err(e: rcgen::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl TlsFiles {
    /// A fresh CA and its certificates, written into `dir` (created if missing).
    pub fn generate(dir: &Path) -> io::Result<TlsFiles> {
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "redlock-mux test CA");
        let ca = ca_params.self_signed(&ca_key).map_err(err)?;

        let server_key = KeyPair::generate().map_err(err)?;
        let mut server = CertificateParams::new(vec!["localhost".to_string()]).map_err(err)?;
        server
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = server.signed_by(&server_key, &ca, &ca_key).map_err(err)?;

        let client_key = KeyPair::generate().map_err(err)?;
        let mut client = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        client
            .distinguished_name
            .push(DnType::CommonName, "redlock-mux test client");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client = client.signed_by(&client_key, &ca, &ca_key).map_err(err)?;

        let files = TlsFiles {
            ca: dir.join("ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        };
        std::fs::write(&files.ca, ca.pem())?;
        std::fs::write(&files.server_cert, server.pem())?;
        std::fs::write(&files.server_key, server_key.serialize_pem())?;
        std::fs::write(&files.client_cert, client.pem())?;
        std::fs::write(&files.client_key, client_key.serialize_pem())?;
        Ok(files)
    }

    /// The `redis-server` arguments that serve TLS on `port` with these files; clients must
    /// present a certificate when `auth_clients`.
    pub fn server_args(&self, port: u16, auth_clients: bool) -> Vec<String> {
        let p = |p: &PathBuf| p.display().to_string();
        vec![
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            p(&self.server_cert),
            "--tls-key-file".into(),
            p(&self.server_key),
            "--tls-ca-cert-file".into(),
            p(&self.ca),
            "--tls-auth-clients".into(),
            if auth_clients { "yes" } else { "no" }.into(),
        ]
    }
}
