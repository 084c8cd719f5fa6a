//! Floor 3, the drivers: they only move bytes between the engine and the sockets, and wait.
//! The blocking one waits on mio and hands the engine between the threads that share a
//! client; the async one is a tokio task. (The folder is not called `tokio` at the crate root,
//! where it would shadow the crate of that name.)

pub(crate) mod blocking;
#[cfg(feature = "tls")]
pub(crate) mod tls;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;

/// A TLS session for a new connection (none can exist without the `tls` feature).
#[cfg(feature = "tls")]
pub(crate) type Tls = tls::Tls;
/// A TLS session for a new connection (none can exist without the `tls` feature).
#[cfg(not(feature = "tls"))]
pub(crate) type Tls = std::convert::Infallible;

/// What a failed socket operation means for its node's vote (a TLS failure keeps its
/// description).
pub(crate) fn outcome_of(e: &std::io::Error) -> crate::error::NodeOutcome {
    #[cfg(feature = "tls")]
    {
        tls::outcome(e)
    }
    #[cfg(not(feature = "tls"))]
    {
        crate::error::NodeOutcome::Io(e.kind())
    }
}

/// The TLS session a connection to node `addr` needs, if it is a `rediss://` node.
#[cfg(feature = "tls")]
pub(crate) fn tls_for(
    cfg: &Option<std::sync::Arc<tls::TlsSetup>>,
    addr: &crate::config::NodeAddr,
) -> std::io::Result<Option<tls::Tls>> {
    match (addr.tls, cfg) {
        (true, Some(setup)) => setup.session(&addr.host).map(Some),
        _ => Ok(None),
    }
}
