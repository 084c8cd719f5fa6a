//! A node's socket for the mio driver: TCP, a Unix domain socket, or TLS over TCP (the
//! session is `drivers::tls`, shared with the async driver), behind one type.

use std::io::{self, Read, Write};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use crate::config::Endpoint;

use crate::drivers::Tls;

/// A non-blocking stream to one node.
#[derive(Debug)]
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(TcpStream, Box<crate::drivers::tls::Tls>),
}

impl Stream {
    /// Starts a non-blocking connect to `endpoint`, with TLS over it when `tls` is given (the
    /// handshake runs as the first bytes are written and read).
    pub(super) fn connect(endpoint: &Endpoint, tls: Option<Tls>) -> io::Result<Stream> {
        Ok(match endpoint {
            Endpoint::Tcp(addr) => {
                let sock = TcpStream::connect(*addr)?;
                // Best effort: a socket that refuses NODELAY still works, only slower.
                let _ = sock.set_nodelay(true);
                match tls {
                    #[cfg(feature = "tls")]
                    Some(session) => Stream::Tls(sock, Box::new(session)),
                    _ => Stream::Tcp(sock),
                }
            }
            Endpoint::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        })
    }

    /// Whether a read shorter than the buffer means the socket is drained (so that the read
    /// that would only say `WouldBlock` can be skipped under edge-triggered readiness). Not
    /// over TLS: the session reads the socket a record at a time.
    pub(super) fn short_read_drains(&self) -> bool {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(..) => false,
            _ => true,
        }
    }

    /// Whether the socket must still be driven for what was written to reach the server (a
    /// TLS handshake in progress, or ciphertext not yet written); never for a plain socket,
    /// whose kernel sends on its own.
    pub(super) fn busy(&self) -> bool {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(_, tls) => tls.busy(),
            _ => false,
        }
    }

    /// The error a failed connect left on the socket, if any.
    pub(super) fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Stream::Tcp(s) => s.take_error(),
            Stream::Unix(s) => s.take_error(),
            #[cfg(feature = "tls")]
            Stream::Tls(s, _) => s.take_error(),
        }
    }

    /// `Ok` once the connect has completed; `NotConnected` while it is in progress.
    pub(super) fn connected(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.peer_addr().map(drop),
            Stream::Unix(s) => s.peer_addr().map(drop),
            #[cfg(feature = "tls")]
            Stream::Tls(s, _) => s.peer_addr().map(drop),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s, tls) => tls.read(s, buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s, tls) => tls.write(s, buf),
        }
    }

    /// Writes the ciphertext a TLS session still holds (nothing to do on a plain socket).
    fn flush(&mut self) -> io::Result<()> {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(s, tls) => tls.flush(s),
            _ => Ok(()),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
            #[cfg(feature = "tls")]
            Stream::Tls(s, _) => s.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
            #[cfg(feature = "tls")]
            Stream::Tls(s, _) => s.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
            #[cfg(feature = "tls")]
            Stream::Tls(s, _) => s.deregister(r),
        }
    }
}
