//! [`Error`]: everything an operation can end with other than success.

use std::fmt;
use std::time::Duration;

use thiserror::Error as ThisError;

/// What one node contributed to a round.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// Acquired, released or extended, as asked.
    Ok,
    /// The key holds another client's token (`SET NX` refused, or the script answered `0`).
    Held,
    /// The key does not exist (the script answered `-1`): expired, released, or lost with a
    /// restart.
    Gone,
    /// No reply within the node timeout.
    Timeout,
    /// The connection failed (refused, reset, closed).
    Io(std::io::ErrorKind),
    /// The node sent bytes that are not valid RESP (the connection was dropped).
    Protocol(resp::ErrorKind),
    /// The node answered with an error reply (its text), or with a reply of the wrong type.
    Server(String),
    /// The node was not connected and is waiting out its reconnect backoff: it was not asked.
    Down,
    /// The TLS session failed (a certificate the configured roots do not trust, a name that
    /// does not match, a handshake or record error): rustls's description.
    Tls(String),
    /// The round was decided (fail-fast) before this node's reply arrived; it will be read and
    /// dropped later.
    Undecided,
    /// The key does not hold our token, and the node cannot say whether another token holds
    /// it or it is gone: the answer of a server's native compare-and-delete (`DELIFEQ`,
    /// `DELEX ... IFEQ`) or compare-and-set (`SET ... IFEQ`), which answer both cases alike.
    NotOurs,
    /// A fenced acquisition cannot count this node: its fencing counter is not one that
    /// fenced acquisitions can have made. The node's vote is a failure, so its counter never
    /// becomes a token; the other nodes' votes still count.
    Fencing(FencingFault),
}

/// Why a node's vote in a fenced acquisition is not counted ([`NodeOutcome::Fencing`]).
///
/// Each one names a counter, or a master's setting, that needs an operator: see "A counter out
/// of range" and "Losing the counter" in `docs/redlock.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencingFault {
    /// The node answered the acquisition with a counter outside `1 ..=`
    /// [`MAX_FENCING_TOKEN`](crate::MAX_FENCING_TOKEN) (the reply is kept): something other
    /// than fenced acquisitions wrote the counter key, or something between the client and
    /// the server altered the reply.
    CounterOutOfRange(i64),
    /// The node could not increment its counter: it is at the top of the server's 64-bit
    /// range (`increment or decrement would overflow`).
    CounterOverflow,
    /// The node could not increment its counter: the key holds something that is not an
    /// integer (`value is not an integer or out of range`).
    CounterNotAnInteger,
    /// The node's `maxmemory-policy` (named) may evict the counter, a key without expiry:
    /// an `allkeys-*` policy, or one the client does not know. The counter could vanish under
    /// memory pressure and the next token start again from 1. Set `noeviction` (or a
    /// `volatile-*` policy) on the master, then reconnect (the client reads the policy when
    /// it opens a connection).
    EvictionPolicy(String),
}

impl fmt::Display for FencingFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FencingFault::CounterOutOfRange(n) => write!(
                f,
                "fencing counter {n} is outside 1..=2^53, where fenced acquisitions keep it; \
                 it was written by something else"
            ),
            FencingFault::CounterOverflow => f.write_str(
                "fencing counter cannot be incremented without overflowing; \
                 it was written by something else",
            ),
            FencingFault::CounterNotAnInteger => f.write_str(
                "fencing counter holds something that is not an integer; \
                 it was written by something else",
            ),
            FencingFault::EvictionPolicy(policy) => {
                return write!(
                    f,
                    "maxmemory-policy {policy} may evict the fencing counter; set noeviction or \
                     a volatile-* policy on this master (see \"Losing the counter\" in \
                     docs/redlock.md)"
                );
            }
        }?;
        f.write_str(
            " (repair it on this master: see \"A counter out of range\" in docs/redlock.md)",
        )
    }
}

impl NodeOutcome {
    /// Whether the node failed to answer at all (as opposed to answering "no").
    pub fn is_failure(&self) -> bool {
        !matches!(
            self,
            NodeOutcome::Ok
                | NodeOutcome::Held
                | NodeOutcome::Gone
                | NodeOutcome::NotOurs
                | NodeOutcome::Undecided
        )
    }
}

impl fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeOutcome::Ok => f.write_str("ok"),
            NodeOutcome::Held => f.write_str("held by another token"),
            NodeOutcome::Gone => f.write_str("key gone"),
            NodeOutcome::Timeout => f.write_str("timed out"),
            NodeOutcome::Io(k) => write!(f, "i/o error: {k}"),
            NodeOutcome::Protocol(k) => write!(f, "protocol error: {k}"),
            NodeOutcome::Server(msg) => write!(f, "server error: {msg}"),
            NodeOutcome::Down => f.write_str("down (reconnecting)"),
            NodeOutcome::Tls(msg) => write!(f, "TLS: {msg}"),
            NodeOutcome::Undecided => f.write_str("reply not awaited"),
            NodeOutcome::NotOurs => {
                f.write_str("not held by this token (held by another, or gone)")
            }
            NodeOutcome::Fencing(fault) => write!(f, "not counted: {fault}"),
        }
    }
}

/// One node's line in an error report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node's position in the configured list.
    pub node: usize,
    /// The node's address, as configured (without any password).
    pub addr: String,
    /// What it answered.
    pub outcome: NodeOutcome,
}

/// A list of node reports, displayed as `addr: outcome; addr: outcome`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeReports(pub Vec<NodeReport>);

impl NodeReports {
    /// How many nodes ended with `outcome`.
    pub fn count(&self, outcome: &NodeOutcome) -> usize {
        self.0.iter().filter(|r| &r.outcome == outcome).count()
    }

    /// The reports whose node refused because another token holds the key, or (a native
    /// command's answer, [`NodeOutcome::NotOurs`]) because the key is not ours.
    pub fn held(&self) -> impl Iterator<Item = &NodeReport> {
        self.0
            .iter()
            .filter(|r| matches!(r.outcome, NodeOutcome::Held | NodeOutcome::NotOurs))
    }
}

impl fmt::Display for NodeReports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", r.addr, r.outcome)?;
        }
        Ok(())
    }
}

fn held_name(held: &Option<String>) -> String {
    held.as_ref()
        .map(|r| format!(", {r:?} held"))
        .unwrap_or_default()
}

/// A configuration the builder refuses.
#[derive(Debug, Clone, PartialEq, ThisError)]
#[non_exhaustive]
pub enum ConfigError {
    /// No node was given.
    #[error("no nodes configured")]
    NoNodes,
    /// An address that does not parse.
    #[error("invalid node address {addr:?}: {reason}")]
    InvalidAddress {
        /// The address as given (any password blanked).
        addr: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An address whose host does not resolve.
    #[error("cannot resolve node address {addr:?}: {kind}")]
    Resolve {
        /// The address as given (any password blanked).
        addr: String,
        /// The resolver's error.
        kind: std::io::ErrorKind,
    },
    /// The same server (address and database) listed twice: it would vote twice.
    #[error("node {0} is listed twice")]
    DuplicateNode(String),
    /// A quorum outside (N/2, N].
    #[error("quorum {quorum} is not a majority of {nodes} nodes (must be in {min}..={nodes})")]
    Quorum {
        /// The quorum asked for.
        quorum: usize,
        /// The number of nodes.
        nodes: usize,
        /// The smallest majority, N/2 + 1.
        min: usize,
    },
    /// A drift factor that is not a finite number in [0, 1).
    #[error("drift factor {0} is not in [0, 1)")]
    DriftFactor(f64),
    /// A node timeout of zero, or above [`MAX_OPTION_DURATION`](crate::MAX_OPTION_DURATION).
    #[error("node timeout {0:?} is outside (0, 24h]")]
    NodeTimeout(Duration),
    /// A retry delay above [`MAX_OPTION_DURATION`](crate::MAX_OPTION_DURATION).
    #[error("retry delay {0:?} is above 24h")]
    RetryDelay(Duration),
    /// Zero tries.
    #[error("tries must be at least 1")]
    Tries,
    /// Fair mode's claim lease of zero, or above [`MAX_OPTION_DURATION`](crate::MAX_OPTION_DURATION).
    #[error("claim lease {0:?} is outside (0, 24h]")]
    ClaimLease(Duration),
    /// Fair mode's client id: 1 to 64 ASCII letters, digits, `-` or `_` (it names the
    /// client's bell channel and its place in the lines).
    #[error("client id {0:?} is not 1 to 64 letters, digits, '-' or '_'")]
    ClientId(String),
    /// The async client was built outside a tokio runtime.
    #[error("the async client must be built inside a tokio runtime")]
    NoRuntime,
    /// A lock over no resources, or over more than [`MAX_RESOURCES`](crate::MAX_RESOURCES).
    #[error("a lock covers 1 ..= {max} resources, not {count}")]
    Resources {
        /// How many were given.
        count: usize,
        /// The most one lock may cover.
        max: usize,
    },
    /// A semaphore with no permits, more than [`MAX_PERMITS`](crate::MAX_PERMITS), or an
    /// empty name.
    #[error("a semaphore has a name and 1 ..= {max} permits, not {permits} (name {name:?})")]
    Permits {
        /// The name given.
        name: String,
        /// How many permits were given.
        permits: usize,
        /// The most a semaphore may have.
        max: usize,
    },
    /// The same resource given twice to one lock.
    #[error("resource {0:?} is given twice")]
    DuplicateResource(String),
    /// A TLS setting that cannot be used: a CA, certificate or key file that cannot be read or
    /// parsed, or a server name that is not valid.
    #[error("TLS: {0}")]
    Tls(String),
    /// A fencing counter key that is empty, or is also one of the lock's resources.
    #[error("fencing counter key {0:?} is empty or names a locked resource")]
    FencingKey(String),
    /// A ttl at or below the clock-drift allowance (a lock that would be expired when
    /// granted), or above [`MAX_TTL`](crate::MAX_TTL).
    #[error("ttl {ttl:?} is outside {min:?} ..= {max:?} (at or below the clock-drift allowance no lock is ever valid)")]
    Ttl {
        /// The ttl given.
        ttl: Duration,
        /// The shortest accepted, [`Config::min_ttl`](crate::Config::min_ttl).
        min: Duration,
        /// The longest accepted, [`MAX_TTL`](crate::MAX_TTL).
        max: Duration,
    },
    /// A [`KeepAlive`](crate::KeepAlive) policy that cannot keep a lock of this ttl: an
    /// extension round (up to one node timeout) does not fit in the time it is given before
    /// the validity ends.
    #[error("keep-alive cannot work: an extension round may take the node timeout {node_timeout:?}, which does not fit before a {ttl:?} lock's validity ends")]
    KeepAlive {
        /// The lock's ttl.
        ttl: Duration,
        /// The configured node timeout.
        node_timeout: Duration,
    },
}

/// Why an operation did not succeed.
///
/// Lock acquisition ends with [`Conflict`](Error::Conflict) when other clients hold the lock,
/// [`NoQuorum`](Error::NoQuorum) when too few nodes could answer, or
/// [`ValiditySpent`](Error::ValiditySpent) when a quorum was reached too late to be of use.
/// Release and extension end with [`NotHeld`](Error::NotHeld) when another token holds the
/// key, [`Expired`](Error::Expired) when the lock had run out, or `NoQuorum`.
#[derive(Debug, Clone, PartialEq, ThisError)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by another client: too many nodes refused for a quorum to be possible.
    #[error("lock held by another client ({} of {} nodes refused{}): {nodes}", .nodes.count(&NodeOutcome::Held), .nodes.0.len(), held_name(.held))]
    Conflict {
        /// Every node's answer; those that refused are [`NodeOutcome::Held`].
        nodes: NodeReports,
        /// A resource found held by another token: for a lock over several resources, the
        /// first one a refusing node named; for a single resource, that resource. `None`
        /// when no node said which.
        held: Option<String>,
    },
    /// Too few nodes answered usefully for a quorum (timeouts, I/O, protocol or server errors).
    #[error("no quorum reachable: {nodes}")]
    NoQuorum {
        /// Every node's answer or failure.
        nodes: NodeReports,
    },
    /// A quorum was reached, but the time it took (plus the drift allowance) used up the whole
    /// ttl, so the lock was never valid. It has been released.
    #[error("quorum reached after {elapsed:?}, leaving no validity out of a {ttl:?} ttl")]
    ValiditySpent {
        /// Time from before the first send to the quorum.
        elapsed: Duration,
        /// The ttl asked for.
        ttl: Duration,
    },
    /// The lock is not held by this token: another client holds the key on some node.
    #[error("lock not held: another token holds it ({nodes})")]
    NotHeld {
        /// Every node's answer.
        nodes: NodeReports,
    },
    /// The lock had already expired: its validity ran out, or the keys are gone.
    #[error("lock already expired")]
    Expired,
    /// The configuration, or an argument, is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The client could not finish the operation: the code running its round panicked (in
    /// another caller's thread, for the blocking client), or its driver task is gone (the
    /// async client's runtime is shutting down). Nothing is known of what reached the nodes:
    /// a key it may have set expires with its ttl. The client itself stays usable.
    #[error("operation aborted: the client's driver failed before the round ended")]
    Aborted,
    /// The client was built in another process: this one is a `fork()` of it. Parent and
    /// child would share the client's connections (and each could read the other's replies),
    /// so a client, and the guards it made, do nothing in a forked child: operations end with
    /// this error before anything is sent, and an inherited guard reports itself lost
    /// ([`Loss::ExtendFailed`](crate::Loss::ExtendFailed) with this error) and releases
    /// nothing when dropped. The parent's client is unaffected. Build a new client in the
    /// child (`Redlock::with_config(client.config().clone())`).
    #[error("the client belongs to the process that forked this one: build a new client here")]
    Forked,
}
