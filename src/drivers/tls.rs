//! TLS for `rediss://` nodes (feature `tls`), one layer for both drivers.
//!
//! rustls keeps the protocol apart from I/O: a [`Tls`] session is fed ciphertext read from a
//! socket and hands back plaintext, takes plaintext and produces ciphertext for the socket.
//! Each driver passes its own socket (mio's, or an adapter over tokio's `try_read` /
//! `try_write`) as a non-blocking `Read + Write`; `WouldBlock` means the same as on a plain
//! socket. The engine never sees TLS: it gets and gives plaintext, as over TCP.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::error::{ConfigError, NodeOutcome};

/// The TLS options a builder collects.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsOptions {
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) system_roots: bool,
    pub(crate) server_name: Option<String>,
    pub(crate) client_auth: Option<(PathBuf, PathBuf)>,
}

/// The validated client settings, shared by every connection.
#[derive(Debug)]
pub(crate) struct TlsSetup {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

fn bad(what: &str, path: &std::path::Path, e: impl std::fmt::Display) -> ConfigError {
    ConfigError::Tls(format!("{what} {}: {e}", path.display()))
}

impl TlsSetup {
    /// Reads the CA file, the client certificate and key, and the system roots as asked.
    pub(crate) fn new(opts: &TlsOptions) -> Result<TlsSetup, ConfigError> {
        let mut roots = RootCertStore::empty();
        if let Some(path) = &opts.ca_file {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad("CA file", path, e))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad("CA file", path, e))?;
            if certs.is_empty() {
                return Err(bad("CA file", path, "no certificate in it"));
            }
            for c in certs {
                roots.add(c).map_err(|e| bad("CA file", path, e))?;
            }
        }
        if opts.system_roots || opts.ca_file.is_none() {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                // A system root rustls cannot use is skipped, as every TLS client does.
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(ConfigError::Tls(
                    "no root certificates: give a CA file (tls_ca_file)".into(),
                ));
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ConfigError::Tls(e.to_string()))?
            .with_root_certificates(roots);
        let config = match &opts.client_auth {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| bad("client certificate", cert, e))?
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad("client certificate", cert, e))?;
                let key =
                    PrivateKeyDer::from_pem_file(key).map_err(|e| bad("client key", key, e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| ConfigError::Tls(format!("client certificate and key: {e}")))?
            }
        };
        let server_name = opts
            .server_name
            .as_deref()
            .map(|n| {
                ServerName::try_from(n.to_string())
                    .map_err(|e| ConfigError::Tls(format!("server name {n:?}: {e}")))
            })
            .transpose()?;
        Ok(TlsSetup {
            config: Arc::new(config),
            server_name,
        })
    }

    /// A session for a node whose host is `host` (checked against its certificate unless a
    /// server name was configured).
    pub(crate) fn session(&self, host: &str) -> io::Result<Tls> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => ServerName::try_from(host.to_string())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        };
        let conn = ClientConnection::new(self.config.clone(), name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(Tls { conn })
    }
}

/// One connection's TLS session.
#[derive(Debug)]
pub(crate) struct Tls {
    conn: ClientConnection,
}

impl Tls {
    /// Reads plaintext into `buf`, reading ciphertext from `io` as needed and answering the
    /// handshake. `Ok(0)` at the end of the stream; `WouldBlock` when `io` has nothing more.
    pub(crate) fn read(
        &mut self,
        io: &mut (impl Read + Write),
        buf: &mut [u8],
    ) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(io) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            self.conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // The handshake's answers, and anything written while it ran.
            self.flush(io)?;
        }
    }

    /// Takes plaintext (as much as the session buffers) and writes what ciphertext `io`
    /// takes. `WouldBlock` when nothing could be taken.
    pub(crate) fn write(&mut self, io: &mut (impl Read + Write), buf: &[u8]) -> io::Result<usize> {
        let n = self.conn.writer().write(buf)?;
        self.flush(io)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Writes pending ciphertext until `io` would block or none is left.
    pub(crate) fn flush(&mut self, io: &mut (impl Read + Write)) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(io) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(self.why_closed(io, e)),
            }
        }
        Ok(())
    }

    /// What a failed write stands for. A server may end the session with an alert and close
    /// the connection right after the handshake (one that wants a client certificate and got
    /// none: TLS 1.3 lets the client finish first), and the next write then says only "broken
    /// pipe": the alert, if it is still to be read, is reported in its place. Best effort, a
    /// bounded number of reads: a reset may have dropped it.
    fn why_closed(&mut self, io: &mut impl Read, e: io::Error) -> io::Error {
        for _ in 0..16 {
            match self.conn.read_tls(io) {
                Ok(n) if n > 0 => {
                    if let Err(tls) = self.conn.process_new_packets() {
                        return io::Error::new(io::ErrorKind::InvalidData, tls);
                    }
                }
                _ => break,
            }
        }
        e
    }

    /// Whether ciphertext is waiting to be written.
    pub(crate) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Whether the session still needs the socket driven for what was written to reach the
    /// server: a handshake in progress (plaintext waits inside the session until it ends), or
    /// ciphertext not yet written.
    pub(crate) fn busy(&self) -> bool {
        self.conn.is_handshaking() || self.conn.wants_write()
    }
}

/// What an I/O error on a node's socket means for its vote: a TLS failure keeps rustls's
/// description; anything else is its kind.
pub(crate) fn outcome(e: &io::Error) -> NodeOutcome {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => NodeOutcome::Tls(tls.to_string()),
        None => NodeOutcome::Io(e.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket whose writes fail as a closed connection's do, and whose reads give what the
    /// server sent before it closed.
    struct Closed(std::io::Cursor<Vec<u8>>);

    impl Read for Closed {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn session() -> Tls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        let name = ServerName::try_from("localhost".to_string()).unwrap();
        Tls {
            conn: ClientConnection::new(Arc::new(config), name).unwrap(),
        }
    }

    /// A write that finds the session closed reports the alert the server sent before it
    /// closed (a server that wanted a client certificate: `CertificateRequired`), not the
    /// broken pipe; with nothing to read, the broken pipe it is (CI saw one node of three
    /// report "broken pipe" for a refusal the others reported as the alert).
    #[test]
    fn a_write_to_a_closed_session_reports_the_alert_sent_before_it() {
        // An alert record: fatal (2), certificate_required (116).
        let alert = vec![0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x74];
        let mut tls = session();
        let e = tls
            .flush(&mut Closed(std::io::Cursor::new(alert)))
            .unwrap_err();
        match outcome(&e) {
            NodeOutcome::Tls(why) => assert!(why.contains("CertificateRequired"), "{why}"),
            other => panic!("{other:?}"),
        }
        let mut tls = session();
        let e = tls
            .flush(&mut Closed(std::io::Cursor::new(Vec::new())))
            .unwrap_err();
        assert_eq!(outcome(&e), NodeOutcome::Io(io::ErrorKind::BrokenPipe));
    }
}
