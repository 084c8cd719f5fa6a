//! A node's socket for the tokio driver: TCP or a Unix domain socket, behind one type.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::net::{TcpStream, UnixStream};

use crate::config::Endpoint;

/// A stream to one node.
#[derive(Debug)]
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A connect in progress.
pub(super) type Connecting = Pin<Box<dyn Future<Output = io::Result<Stream>> + Send>>;

impl Stream {
    /// Connects to `endpoint` (the returned future owns what it needs).
    pub(super) fn connect(endpoint: &Endpoint) -> Connecting {
        match endpoint.clone() {
            Endpoint::Tcp(addr) => Box::pin(async move {
                let sock = TcpStream::connect(addr).await?;
                // Best effort: a socket that refuses NODELAY still works, only slower.
                let _ = sock.set_nodelay(true);
                Ok(Stream::Tcp(sock))
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
        }
    }

    pub(super) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Unix(s) => s.poll_read_ready(cx),
        }
    }

    pub(super) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Unix(s) => s.try_write(buf),
        }
    }

    pub(super) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
            Stream::Unix(s) => s.try_read(buf),
        }
    }
}
