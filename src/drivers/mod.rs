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

/// The drivers' randomness: token bytes and jitter from the operating system's generator.
///
/// Tokens are not drawn from a user-space generator seeded once per thread: a process that
/// forks after drawing from one (a pre-forking server, say) leaves parent and child with the
/// same generator state, so both would draw the same tokens, and one could release the
/// other's lock. The kernel's generator (`getrandom(2)` on Linux) has no state in the process
/// to copy; it costs one system call per acquisition, small beside the round trip it
/// precedes. Should the call fail (it does not on any supported kernel), the bytes come from
/// the thread's generator with the process id folded in, so that processes forked from one
/// state still draw different tokens.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OsRandom;

impl crate::core::random::Randomness for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) {
        use rand::{RngCore, TryRngCore};
        if rand::rngs::OsRng.try_fill_bytes(buf).is_err() {
            rand::rng().fill_bytes(buf);
            for (b, p) in buf.iter_mut().zip(std::process::id().to_le_bytes()) {
                *b ^= p;
            }
        }
    }

    fn up_to(&mut self, max: u64) -> u64 {
        // From the kernel too: a thread's generator is not reseeded on fork, so workers
        // forked from one parent that had retried would retry in step (one system call per
        // retry or wake-up, against the round trip it is spent waiting for).
        use rand::{Rng, TryRngCore};
        match rand::rngs::OsRng.try_next_u64() {
            Ok(n) => match max.checked_add(1) {
                Some(span) => n % span,
                None => n,
            },
            Err(_) => rand::rng().random_range(0..=max),
        }
    }
}

impl crate::Token {
    /// A fresh token: 20 bytes from the operating system's generator, drawn anew for every
    /// token (see `OsRandom` for why, and `tests/fork.rs`).
    pub fn generate() -> crate::Token {
        crate::Token::from_random(&mut OsRandom)
    }
}
