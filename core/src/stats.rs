//! [`Stats`]: what a client's connections have seen, per node.

use crate::error::NodeOutcome;

/// Counters of one node, since the client was built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// Votes `yes`: acquired, released or extended as asked.
    pub ok: u64,
    /// Votes `no` because another token holds the key.
    pub held: u64,
    /// Votes `no` because the key is gone (release and extension).
    pub gone: u64,
    /// Votes `no` from a native command: the key is not ours, held by another or gone.
    pub not_ours: u64,
    /// Releases and extensions sent as the server's native commands rather than scripts.
    pub native_commands: u64,
    /// Votes lost to the node timeout (a reply that came too late, or never).
    pub timeouts: u64,
    /// Votes lost to a failed connection (refused, reset, closed).
    pub io_errors: u64,
    /// Votes lost to bytes that are not valid RESP (the connection was dropped).
    pub protocol_errors: u64,
    /// Votes lost to an error reply, or a reply of the wrong type.
    pub server_errors: u64,
    /// Votes not counted in fenced acquisitions because of the node's fencing counter
    /// ([`NodeOutcome::Fencing`]).
    pub fencing_faults: u64,
    /// Rounds the node was not asked in, waiting out its reconnect backoff.
    pub down: u64,
    /// Connections opened, the first one included (more than one means reconnects).
    pub connects: u64,
    /// Connections dropped because a reply was owed far past every deadline.
    pub stale_replaced: u64,
    /// Connections dropped because a reply could not answer the command it was matched to
    /// (or a sentinel came back wrong): the stream had lost or gained bytes.
    pub desyncs: u64,
    /// Replies read after their round had ended, and dropped.
    pub late_replies: u64,
    /// `EVALSHA`s answered `NOSCRIPT` and sent again as `EVAL`.
    pub noscript_fallbacks: u64,
    /// Fenced clients: connections on which the node's `maxmemory-policy` could not be read
    /// (`CONFIG` denied by an ACL, or renamed away). Fenced acquisitions count such a node
    /// as one whose policy keeps the counter; see "Losing the counter" in `docs/redlock.md`.
    pub eviction_unchecked: u64,
    /// Keys whose invalidation the node pushed (wake-ups; an invalidation of every key counts
    /// one).
    pub invalidations: u64,
    /// Fair mode: notices the node pushed that a hand-off reserved a resource for the waiter
    /// just ahead of this client in its line (`+ <resource>`; not counted as invalidations:
    /// they wake a waiter only if that reservation lapses unclaimed).
    pub lapse_notices: u64,
    /// Bytes of buffer the node's connection holds now (read and write buffers).
    pub buffered_bytes: usize,
    /// Replies the node sent to this client's commands: one per command it ran for the
    /// client, top-level only (a script's calls inside the server, which the server's `INFO
    /// commandstats` counts too, are not among them); the connections' own commands
    /// (`HELLO`, `CLIENT CACHING`, sentinel `PING`s, `SCRIPT LOAD`, `SUBSCRIBE`) included.
    pub replies: u64,
}

impl NodeStats {
    /// Counts one vote.
    pub fn count(&mut self, outcome: &NodeOutcome) {
        let counter = match outcome {
            NodeOutcome::Ok => &mut self.ok,
            NodeOutcome::Held => &mut self.held,
            NodeOutcome::Gone => &mut self.gone,
            NodeOutcome::NotOurs => &mut self.not_ours,
            NodeOutcome::Timeout => &mut self.timeouts,
            NodeOutcome::Io(_) | NodeOutcome::Tls(_) => &mut self.io_errors,
            NodeOutcome::Protocol(_) => &mut self.protocol_errors,
            NodeOutcome::Server(_) => &mut self.server_errors,
            NodeOutcome::Down => &mut self.down,
            NodeOutcome::Fencing(_) => &mut self.fencing_faults,
            NodeOutcome::Undecided => return,
        };
        *counter += 1;
    }
}

/// A snapshot of a client's counters: one [`NodeStats`] per node, in the configured order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Per node, in the order the nodes were given.
    pub nodes: Vec<NodeStats>,
    /// The most operations one write pass has carried (above 1 once callers were pipelined).
    pub largest_batch: usize,
    /// Write passes that started operations.
    pub batches: u64,
    /// Events the driver did not take in time and the engine dropped (zero in `redlock-mux`,
    /// whose drivers take them after every pass). The counters above still count them.
    pub events_dropped: u64,
    /// Operations those passes started: `batched_ops / batches` is the mean batch, how many
    /// callers' commands shared each write (and each of the masters' reads).
    pub batched_ops: u64,
    /// Tries of locks sent: rounds of `SET NX`, of the acquire script, or (fair mode) of the
    /// enter script, which joins the line where it is refused. With [`claims`](Stats::claims),
    /// the acquisition rounds: per lock granted, how many rounds it took to get one.
    pub tries: u64,
    /// Fair mode: claims sent, each the try of a waiter woken in line (by its bell, or by its
    /// timer).
    pub claims: u64,
}

impl Stats {
    /// The mean number of operations per write pass; 0 before the first.
    pub fn mean_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.batched_ops as f64 / self.batches as f64
        }
    }

    /// Buffer bytes held by all connections together.
    pub fn buffered_bytes(&self) -> usize {
        self.nodes.iter().map(|n| n.buffered_bytes).sum()
    }
}
