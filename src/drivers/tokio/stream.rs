//! A node's socket for the tokio driver: TCP, a Unix domain socket, or TLS over TCP (the
//! session is `drivers::tls`, shared with the blocking driver), behind one type.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::net::{TcpStream, UnixStream};

use crate::config::Endpoint;

use crate::drivers::Tls;

/// A stream to one node.
#[derive(Debug)]
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(TcpStream, Box<crate::drivers::tls::Tls>),
}

/// tokio's non-blocking `try_read` / `try_write` as `Read` / `Write`, for the TLS session.
#[cfg(feature = "tls")]
struct TryIo<'a>(&'a TcpStream);

#[cfg(feature = "tls")]
impl std::io::Read for TryIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

#[cfg(feature = "tls")]
impl std::io::Write for TryIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A connect in progress.
pub(super) type Connecting = Pin<Box<dyn Future<Output = io::Result<Stream>> + Send>>;

impl Stream {
    /// Connects to `endpoint` (the returned future owns what it needs), with TLS over it when
    /// `tls` is given (the handshake runs as the first bytes are written and read).
    pub(super) fn connect(endpoint: &Endpoint, tls: Option<Tls>) -> Connecting {
        match endpoint.clone() {
            Endpoint::Tcp(addr) => Box::pin(async move {
                let sock = TcpStream::connect(addr).await?;
                // Best effort: a socket that refuses NODELAY still works, only slower.
                let _ = sock.set_nodelay(true);
                Ok(match tls {
                    #[cfg(feature = "tls")]
                    Some(session) => Stream::Tls(sock, Box::new(session)),
                    _ => Stream::Tcp(sock),
                })
            }),
            Endpoint::Unix(path) => {
                Box::pin(async move { UnixStream::connect(path).await.map(Stream::Unix) })
            }
        }
    }

    pub(super) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_write_ready(cx),
            Stream::Unix(s) => s.poll_write_ready(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(s, _) => s.poll_write_ready(cx),
        }
    }

    pub(super) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Unix(s) => s.poll_read_ready(cx),
            #[cfg(feature = "tls")]
            Stream::Tls(s, _) => s.poll_read_ready(cx),
        }
    }

    pub(super) fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Unix(s) => s.try_write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s, tls) => tls.write(&mut TryIo(s), buf),
        }
    }

    pub(super) fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
            Stream::Unix(s) => s.try_read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s, tls) => tls.read(&mut TryIo(s), buf),
        }
    }

    /// Whether a TLS session holds ciphertext the socket has not taken yet.
    pub(super) fn wants_write(&self) -> bool {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(_, tls) => tls.wants_write(),
            _ => false,
        }
    }

    /// Writes the ciphertext a TLS session holds, as far as the socket takes it.
    pub(super) fn try_flush(&mut self) -> io::Result<()> {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(s, tls) => tls.flush(&mut TryIo(s)),
            _ => Ok(()),
        }
    }
}
