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

/// The TLS client settings of a client's `rediss://` nodes: `None` when it has none; nothing
/// at all without the `tls` feature.
#[cfg(feature = "tls")]
pub(crate) type TlsSetup = Option<std::sync::Arc<tls::TlsSetup>>;
/// The TLS client settings of a client's `rediss://` nodes: `None` when it has none; nothing
/// at all without the `tls` feature.
#[cfg(not(feature = "tls"))]
pub(crate) type TlsSetup = ();

/// The TLS options a builder collects (none without the `tls` feature).
#[cfg(feature = "tls")]
pub(crate) type TlsOptions = tls::TlsOptions;
/// The TLS options a builder collects (none without the `tls` feature).
#[cfg(not(feature = "tls"))]
pub(crate) type TlsOptions = ();

/// The TLS settings `config`'s nodes need, made from `opts`: none unless some node is
/// `rediss://`, which without the `tls` feature is refused.
pub(crate) fn tls_setup(
    config: &crate::Config,
    opts: &TlsOptions,
) -> Result<TlsSetup, crate::ConfigError> {
    let tls_node = config.nodes().iter().find(|n| n.tls);
    #[cfg(feature = "tls")]
    {
        Ok(match tls_node {
            Some(_) => Some(std::sync::Arc::new(tls::TlsSetup::new(opts)?)),
            None => None,
        })
    }
    #[cfg(not(feature = "tls"))]
    {
        let () = opts;
        match tls_node {
            Some(node) => Err(crate::ConfigError::InvalidAddress {
                addr: node.to_string(),
                reason: "rediss:// needs the crate's `tls` feature",
            }),
            None => Ok(()),
        }
    }
}

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
pub(crate) fn tls_for(cfg: &TlsSetup, addr: &crate::NodeAddr) -> std::io::Result<Option<tls::Tls>> {
    match (addr.tls, cfg) {
        (true, Some(setup)) => setup.session(&addr.host).map(Some),
        _ => Ok(None),
    }
}

/// The next step of `op` after `input`, at the time read now, with the drivers' randomness;
/// the events the step reports are handed to the facades at once (a wait is counted as it
/// starts, not after it: an async caller may go away during it). Both clients' loops take
/// every step through here.
pub(crate) fn next_step<'a, O: redlock_core::op::Operation>(
    op: &'a mut O,
    input: redlock_core::op::Input,
    cfg: &'a crate::Config,
    events: &mut redlock_core::event::Events,
) -> redlock_core::op::Step<'a> {
    let step = {
        let mut cx = redlock_core::op::Cx {
            now: std::time::Instant::now(),
            rng: &mut OsRandom,
            events: &mut *events,
        };
        op.step(input, cfg, &mut cx)
    };
    crate::observe::events(cfg, events);
    step
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
///
/// A token of your own (for [`Lock::from_token`](crate::Lock::from_token), say):
/// `Token::from_random(&mut OsRandom)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsRandom;

impl redlock_core::random::Randomness for OsRandom {
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

/// The process a client was built in, to tell a forked child from it (see `Error::Forked`).
///
/// The process id tells them apart, with one system call, except where the child is in a new
/// pid namespace (`clone(CLONE_NEWPID)`, as sandboxes do) and happens to get the same number:
/// certain when the creator is its namespace's init (pid 1, a container's entrypoint), as the
/// first process of a new namespace is pid 1 too. For a client built by a pid 1, the pid
/// namespace is compared as well (a `readlink` of `/proc/self/ns/pid`, some microseconds per
/// operation, paid only there). A child in a new namespace that got another creator's number
/// later on is not told apart (it takes as many processes in that namespace first).
#[derive(Debug, Clone)]
pub(crate) struct Birth {
    pid: u32,
    /// The pid namespace, where the pid alone may not tell (the creator is pid 1).
    ns: Option<std::path::PathBuf>,
}

impl Birth {
    /// The current process.
    pub(crate) fn here() -> Birth {
        let pid = std::process::id();
        let ns = (pid == 1).then(pid_namespace).flatten();
        Birth { pid, ns }
    }

    /// Whether the current process is not the one this was taken in.
    pub(crate) fn forked(&self) -> bool {
        if std::process::id() != self.pid {
            return true;
        }
        match &self.ns {
            None => false,
            // Unreadable now, though it was readable: not the same process's view.
            Some(ns) => pid_namespace().as_ref() != Some(ns),
        }
    }
}

/// The current process's pid namespace, as `/proc` names it (`pid:[inode]`).
fn pid_namespace() -> Option<std::path::PathBuf> {
    std::fs::read_link("/proc/self/ns/pid").ok()
}
