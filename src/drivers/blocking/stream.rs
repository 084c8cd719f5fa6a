//! A node's socket for the mio driver: TCP or a Unix domain socket, behind one type.

use std::io::{self, Read, Write};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use crate::config::Endpoint;

/// A non-blocking stream to one node.
#[derive(Debug)]
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Starts a non-blocking connect to `endpoint`.
    pub(super) fn connect(endpoint: &Endpoint) -> io::Result<Stream> {
        Ok(match endpoint {
            Endpoint::Tcp(addr) => {
                let sock = TcpStream::connect(*addr)?;
                // Best effort: a socket that refuses NODELAY still works, only slower.
                let _ = sock.set_nodelay(true);
                Stream::Tcp(sock)
            }
            Endpoint::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        })
    }

    /// The error a failed connect left on the socket, if any.
    pub(super) fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Stream::Tcp(s) => s.take_error(),
            Stream::Unix(s) => s.take_error(),
        }
    }

    /// `Ok` once the connect has completed; `NotConnected` while it is in progress.
    pub(super) fn connected(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.peer_addr().map(drop),
            Stream::Unix(s) => s.peer_addr().map(drop),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}
