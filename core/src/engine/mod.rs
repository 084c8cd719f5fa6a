//! The engine: every operation in flight on every node, with no sockets and no clock.
//!
//! Both clients run on it; their drivers only move bytes and wait. Time comes in as `now`;
//! bytes come in through [`handle_input`](Engine::handle_input) and go out through
//! [`transmit`](Engine::transmit). The engine decides everything else: which connections to
//! open and drop, what each node is sent, which reply belongs to which operation, when a node
//! has timed out, when a round is decided, and what a failure means for every round that waited
//! on that node.
//!
//! # How a driver calls it
//! - Inputs: [`submit`](Engine::submit) (a round of a command on every node),
//!   [`fire`](Engine::fire) (a release nobody waits for), [`handle_connected`](Engine::handle_connected),
//!   [`handle_input`](Engine::handle_input), [`handle_written`](Engine::handle_written),
//!   [`handle_closed`](Engine::handle_closed), [`handle_timeout`](Engine::handle_timeout).
//! - Outputs, polled after any input, in this order: [`poll_io`](Engine::poll_io) (sockets to
//!   drop or open), [`transmit`](Engine::transmit) for every node (bytes to write),
//!   [`poll_completed`](Engine::poll_completed) (decided rounds), and
//!   [`poll_timeout`](Engine::poll_timeout) (when to call `handle_timeout` next, if nothing else
//!   happens first).
//!
//! # Rules that live here, once
//! - A round is written to every node at once and tallied as replies come in; it ends when
//!   decided (fail-fast both ways, see [`Round`]) or at its deadline, `node timeout` after the
//!   instant read before its first write. Nodes still owing then count as timed out.
//! - Replies are matched to operations through each connection's FIFO of owed replies
//!   ([`Conn`]); a reply to an operation that has ended is read and dropped, never taken for
//!   another's. Every operation completes exactly once.
//! - A node whose connection fails gives every round waiting on it that failure as its vote.
//!   Its connection is opened again on the next round that needs it, after the backoff.
//! - A connection that owes a reply long past every deadline ([`stale_after`]), owes more than
//!   [`MAX_OWED`] replies, or takes longer than [`CONNECT_TIMEOUT`](crate::conn::CONNECT_TIMEOUT) to open is dropped.

// | module | its job |
// |---|---|
// | `mod.rs` | slots of operations in flight, node links, submitting a round, the socket events |
// | `dispatch.rs` | reply routing: a reply to its operation, checked and judged as a vote |
// | `timers.rs` | round deadlines and connect timeouts, the heap that keeps them |
// | `watch.rs` | waiters' watches, fired by invalidation pushes and dropped connections |
// | `lapse.rs` | fair mode: the second in line looks again when a reservation may lapse |

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use smallvec::SmallVec;

use crate::command::{Command, Expect, Extra, Form, OpKind};
use crate::config::Scripts;
use crate::config::{Config, NodeAddr};
use crate::conn::{stale_after, Conn};
use crate::conn::{How, Native};
use crate::error::NodeOutcome;
use crate::event::Event;
use crate::forms::Sent;
use crate::round::{Decision, Round, Until};
use crate::stats::NodeStats;

/// Replies one connection may owe before its node counts as stuck and is reconnected: room
/// for thousands of concurrent operations on a healthy node. (The stream check's sentinel
/// `PING` may owe one more: the simulator's `owed-bound` allows `MAX_OWED + 1`.)
pub const MAX_OWED: usize = 16 * 1024;

/// Events an engine keeps for its driver to take: a driver takes them after every pass, so
/// this bound is only met by a driver that never does.
pub const MAX_EVENTS: usize = 1024;

/// An operation in the engine: its slot and the generation that tells it from the slot's
/// earlier and later occupants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpId {
    slot: u32,
    gen: u32,
}

/// What a reply in a connection's FIFO belongs to; generation 0 is a command nobody waits for.
#[derive(Debug, Clone, Copy)]
struct Tag {
    slot: u32,
    gen: u32,
    /// The shape of the reply, as the command went out (a native command's reply is judged
    /// as such): checked for every reply, a late one too.
    expect: Expect,
}

impl Tag {
    const fn of(slot: u32, gen: u32, expect: Expect) -> Tag {
        Tag { slot, gen, expect }
    }

    /// A tag to look operation (`slot`, `gen`) up by (its `expect` is not read).
    const fn to_find(slot: u32, gen: u32) -> Tag {
        Tag::of(slot, gen, Expect::Set)
    }
}

/// A node's connection as the driver should have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// No socket.
    Closed,
    /// A socket whose connect is in progress, since then.
    Connecting(Instant),
    /// A connected socket.
    Open,
}

#[derive(Debug)]
struct Node {
    addr: NodeAddr,
    conn: Conn<Tag>,
    link: Link,
    stats: NodeStats,
}

#[derive(Debug)]
struct Op<U> {
    gen: u32,
    round: Round,
    user: U,
}

/// Whether the driver still holds the socket of a connection the engine drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Socket {
    /// It does: tell it to drop it ([`IoEvent::Close`]).
    Held,
    /// It reported the failure, and has dropped it already.
    Gone,
}

/// A socket the driver must drop or open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoEvent {
    /// Drop node `.0`'s socket (the engine has already forgotten its connection).
    Close(usize),
    /// Open a socket to node `.0`; report [`Engine::handle_connected`] or
    /// [`Engine::handle_closed`].
    Connect(usize),
}

/// A decided round, with what its submitter attached to it.
#[derive(Debug)]
pub struct Completed<U> {
    /// The round, decided.
    pub round: Round,
    /// What the submitter attached to it.
    pub user: U,
}

/// Every node's connection state and every operation in flight. `U` is what a driver attaches
/// to an operation to find its caller again (an index, a channel).
#[derive(Debug)]
pub struct Engine<U> {
    quorum: usize,
    node_timeout: Duration,
    scripts: Scripts,
    stale: Duration,
    nodes: Vec<Node>,
    ops: Vec<Option<Op<U>>>,
    free: Vec<u32>,
    next_gen: u32,
    live: usize,
    /// Round deadlines, (when, slot, generation); entries of ended rounds are skipped.
    deadlines: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    io: VecDeque<IoEvent>,
    completed: VecDeque<Completed<U>>,
    largest_batch: usize,
    /// Write passes noted, and the operations they carried.
    batches: u64,
    batched_ops: u64,
    /// Acquisition rounds started: tries (`SET NX`, the acquire or enter script) and fair
    /// waiters' claims (see [`Stats::tries`](crate::stats::Stats::tries)).
    tries: u64,
    claims: u64,
    /// The command being queued, encoded once for every node.
    wire: BytesMut,
    /// Its native form, for the nodes that take it.
    native_wire: BytesMut,
    /// How many nodes are connecting (their connect timeouts are then worth looking at).
    connecting: usize,
    /// Whether connections ask for RESP3 and tracking (wake-ups).
    wakeups: bool,
    /// Fair mode's arguments, when it is on.
    fair: Option<crate::command::Fair>,
    /// Fair mode: the bells rung for each resource lately, not yet handed to a waiter (see
    /// `watch.rs`).
    bells: Vec<watch::Bells>,
    /// Fair mode: the hand-off whose bells last woke a waiter of each resource, and when it
    /// first rang (kept a claim lease: the waiter's claim names it, see
    /// [`crate::script::CLAIM`]).
    handed: Vec<watch::Handed>,
    /// Fair mode: the lines where this client stands second behind a reservation that may
    /// lapse unclaimed, and when to look again (see `lapse.rs`).
    lapses: Vec<lapse::Lapse>,
    /// Fair mode: how long past a claim lease a reservation surely lapsed on a master (the
    /// drift allowance of a lock as long as the lease).
    lapse_margin: Duration,
    /// Waiters for a key to change: (id, key). One-shot: a watch leaves when it fires.
    watches: Vec<(u64, Box<[u8]>)>,
    /// Fair mode: the enter rounds (of one resource) in flight, and the won ones some nodes
    /// still owe an answer (see [`watch::Enter`]).
    enters: Vec<watch::Enter>,
    /// The waiters' tracked reads in flight (`OpKind::Watch`): each operation's slot and
    /// generation, and the key it reads.
    watch_reads: Vec<(u32, u32, Box<[u8]>)>,
    /// Fair mode: the waiters' rounds in flight (claims, reads of the line, enters), each
    /// operation's slot and generation, and its resources: a waiter in one of them stands in
    /// those lines though its watch is taken back (see `lapse.rs`).
    fair_rounds: Vec<watch::FairRound>,
    /// Fair mode: resources a release kept the client's place in while a waiter of them was
    /// between two watches: that waiter's next watch fires at once (see `watch.rs`).
    held_wakes: Vec<(Box<[u8]>, Instant)>,
    /// Fair mode: this client's claims that may have taken its place out of a line, and the
    /// waits and enters held back until they are answered (see `gate.rs`).
    gates: Vec<gate::Gate>,
    parked: Vec<gate::Parked>,
    /// Keys whose invalidations from some nodes wake nobody (a bit per node): the last tracked
    /// read of the key there found it absent, so no holder's release can delete it there, and
    /// a push from there only reports another waiter's try come and gone (every waiter woken by
    /// it would try, lose, release what it took there, and wake the others again: a storm
    /// while the lock is still held).
    deaf: Vec<(Box<[u8]>, u64)>,
    /// Watches that fired, with why, for the driver to tell their waiters.
    woken: VecDeque<(u64, Wake)>,
    /// Events for the driver to report ([`record`](Engine::record)), and those dropped
    /// because it did not take them.
    events: VecDeque<Event>,
    events_dropped: u64,
}

impl<U> Engine<U> {
    /// An engine for the configured nodes, no connection open yet.
    pub fn new(cfg: &Config) -> Engine<U> {
        Engine {
            quorum: cfg.quorum,
            node_timeout: cfg.node_timeout,
            scripts: cfg.scripts,
            stale: stale_after(cfg.node_timeout),
            nodes: cfg
                .nodes
                .iter()
                .map(|addr| Node {
                    addr: addr.clone(),
                    conn: Conn::new(MAX_OWED, cfg.node_timeout)
                        .checking_eviction(cfg.fencing.is_some())
                        .verifying(cfg.verify_stream)
                        .ringing(cfg.fair.as_ref().map(|f| {
                            let mut bell = crate::script::BELL_PREFIX.as_bytes().to_vec();
                            bell.extend_from_slice(&f.id);
                            bell.into_boxed_slice()
                        })),
                    link: Link::Closed,
                    stats: NodeStats::default(),
                })
                .collect(),
            ops: Vec::new(),
            free: Vec::new(),
            next_gen: 1,
            live: 0,
            deadlines: BinaryHeap::new(),
            io: VecDeque::new(),
            completed: VecDeque::new(),
            largest_batch: 0,
            batches: 0,
            batched_ops: 0,
            tries: 0,
            claims: 0,
            wire: BytesMut::with_capacity(512),
            native_wire: BytesMut::with_capacity(128),
            connecting: 0,
            wakeups: cfg.wakeups,
            fair: cfg.fair.clone(),
            bells: Vec::new(),
            handed: Vec::new(),
            lapses: Vec::new(),
            fair_rounds: Vec::new(),
            held_wakes: Vec::new(),
            gates: Vec::new(),
            parked: Vec::new(),
            lapse_margin: cfg.fair.as_ref().map_or(Duration::ZERO, |f| {
                crate::rules::drift(Duration::from_millis(f.claim_ms), cfg.drift_factor)
            }),
            watches: Vec::new(),
            watch_reads: Vec::new(),
            enters: Vec::new(),
            deaf: Vec::new(),
            woken: VecDeque::new(),
            events: VecDeque::new(),
            events_dropped: 0,
        }
    }

    /// Node `i`'s address.
    pub fn addr(&self, i: usize) -> &NodeAddr {
        &self.nodes[i].addr
    }

    /// How many operations are in flight.
    pub fn in_flight(&self) -> usize {
        self.live
    }

    /// How many replies node `i`'s connection owes (at most [`MAX_OWED`] and the sentinel
    /// queued ahead of the command that reached it), and when the oldest still owed to a
    /// command was queued: for a driver's or a test's view of the connection (the simulator
    /// checks that no command is queued on a connection owing a reply past
    /// [`stale_after`]). `(0, None)` without a connection.
    pub fn owed(&self, i: usize) -> (usize, Option<Instant>) {
        match self.nodes.get(i) {
            Some(node) if node.link != Link::Closed => node.conn.owed(),
            _ => (0, None),
        }
    }

    /// Starts a round of `cmd` on every node. `t1` is the instant read before anything of it
    /// is written; its deadline is `t1` plus the node timeout. Nodes that cannot be asked (in
    /// their reconnect backoff, or failing as the command is queued) vote at once; a round
    /// decided by those alone completes at once.
    pub fn submit(&mut self, cmd: &Command<'_>, until: Until, t1: Instant, user: U) -> OpId {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.ops.push(None);
                (self.ops.len() - 1) as u32
            }
        };
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        self.ops[slot as usize] = Some(Op {
            gen,
            round: Round::new(self.nodes.len(), self.quorum, until),
            user,
        });
        self.live += 1;
        let sent = matches!(until, Until::Sent { .. });
        let park = self.must_park(cmd);
        if !sent && !park {
            self.prune_deadlines();
            self.deadlines.push(Reverse((
                crate::time::later(t1, self.node_timeout),
                slot,
                gen,
            )));
        }
        match cmd.kind {
            OpKind::Acquire | OpKind::Enter | OpKind::Permit => self.tries += 1,
            OpKind::Claim => self.claims += 1,
            _ => {}
        }
        let tag = Tag::of(slot, gen, cmd.expect());
        if let (OpKind::Watch, [name]) = (cmd.kind, cmd.resources) {
            self.watch_reads.push((slot, gen, name.as_bytes().into()));
        }
        if let (OpKind::Enter, [name]) = (cmd.kind, cmd.resources) {
            self.entering(slot, gen, name, cmd.watch, t1);
        }
        if self.fair.is_some() && matches!(cmd.kind, OpKind::Claim | OpKind::Wait | OpKind::Enter) {
            self.fair_rounds.push(watch::FairRound {
                slot,
                gen,
                names: cmd.resources.iter().cloned().collect(),
                watch: cmd.watch,
                serves: cmd.kind != OpKind::Wait,
            });
        }
        if self.fair.is_some() && cmd.kind == OpKind::Claim {
            self.claim_opened(slot, gen, cmd, t1);
        }
        if park {
            // Behind an open claim of this client (see `gate.rs`): its deadline runs once
            // it goes out.
            self.park(cmd, tag, until);
            return OpId { slot, gen };
        }
        self.queue_everywhere(cmd, tag, until, t1);
        if sent {
            // Over once written (its votes never decide it): complete now.
            self.complete(tag);
        }
        self.unpark(t1);
        OpId { slot, gen }
    }

    /// The next socket to drop or open, in the order they must happen.
    pub fn poll_io(&mut self) -> Option<IoEvent> {
        self.io.pop_front()
    }

    /// Node `i`'s socket finished connecting.
    pub fn handle_connected(&mut self, i: usize) {
        if let Some(node) = self.nodes.get_mut(i) {
            if matches!(node.link, Link::Connecting(_)) {
                node.link = Link::Open;
                self.connecting -= 1;
            }
        }
    }

    /// Whether node `i`'s socket is still connecting.
    pub fn is_connecting(&self, i: usize) -> bool {
        matches!(self.nodes.get(i).map(|n| n.link), Some(Link::Connecting(_)))
    }

    /// The bytes to write to node `i` now (none until its socket is connected). With
    /// `verify_stream` on, the commands queued since the last call end with a sentinel
    /// first (one per connection per write pass: see [`Conn::verifying`]).
    pub fn transmit(&mut self, i: usize) -> &[u8] {
        match self.nodes.get_mut(i) {
            Some(node) if node.link == Link::Open => {
                node.conn.seal();
                &node.conn.out
            }
            _ => &[],
        }
    }

    /// Whether node `i` has bytes to write (what [`transmit`](Engine::transmit) would give,
    /// without ending the pass).
    pub fn has_output(&self, i: usize) -> bool {
        self.nodes
            .get(i)
            .is_some_and(|n| n.link == Link::Open && !n.conn.out.is_empty())
    }

    /// `n` bytes of [`transmit`](Engine::transmit) were written to node `i`.
    pub fn handle_written(&mut self, i: usize, n: usize) {
        if let Some(node) = self.nodes.get_mut(i) {
            node.conn.wrote(n);
        }
    }

    /// Node `i`'s socket failed or was closed by the peer; it is already gone on the driver's
    /// side. `outcome` says how, and is the node's vote in every round waiting on it:
    /// `NodeOutcome::Io(kind)`, or `NodeOutcome::Tls` for a TLS failure.
    pub fn handle_closed(&mut self, i: usize, outcome: NodeOutcome, now: Instant) {
        if i < self.nodes.len() && self.nodes[i].link != Link::Closed {
            self.fail_node(i, &outcome, now, Socket::Gone);
        }
        self.unpark(now);
    }

    /// The next decided round.
    pub fn poll_completed(&mut self) -> Option<Completed<U>> {
        self.completed.pop_front()
    }

    /// Whether some connection still owes work that matters after its round: bytes not yet
    /// written, or an `EVALSHA` whose reply (perhaps a `NOSCRIPT` to answer) has not come.
    pub fn owes_scripted(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.link != Link::Closed && n.conn.owes_scripted())
    }

    /// Whether a driver's pass at `now` would find anything to do: a socket to open or drop,
    /// bytes to write (or a write pass to end) on an open connection, a decided round, a
    /// watch that fired, an event to take, or a timer due by `now` (a round's deadline, a
    /// connect's timeout, a fair waiter's bells, a lapse the second in a line looks at, a claim's
    /// gate past its lease with a round held back). A driver that has just made a pass and
    /// changed something may stop when this is false, instead of making one more pass only to
    /// find nothing. It errs towards `true` (a deadline of a round that ended, any bell
    /// pending): one pass too many, never one too few.
    pub fn has_work(&self, now: Instant) -> bool {
        !self.io.is_empty()
            || !self.completed.is_empty()
            || !self.woken.is_empty()
            || !self.events.is_empty()
            || !self.bells.is_empty()
            || self.lapses_due().is_some_and(|due| due <= now)
            || self.gates_due().is_some_and(|due| due <= now)
            || self
                .deadlines
                .peek()
                .is_some_and(|Reverse((when, ..))| *when <= now)
            || self.nodes.iter().any(|n| match n.link {
                Link::Open => n.conn.wants_transmit(),
                Link::Connecting(since) => timers::connect_overdue(since, now),
                Link::Closed => false,
            })
    }

    /// Whether anything is waiting to be written to an open connection.
    pub fn wants_write(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.link == Link::Open && !n.conn.out.is_empty())
    }

    /// Drops every connection (each is reopened by the next round that needs it).
    pub fn reset(&mut self, now: Instant) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].link != Link::Closed {
                self.fail_node(
                    i,
                    &NodeOutcome::Io(io::ErrorKind::ConnectionAborted),
                    now,
                    Socket::Held,
                );
            }
        }
        self.unpark(now);
    }

    /// Drops node `i`'s connection after a failure: every round waiting on it gets `outcome`
    /// as the node's vote. A socket the driver still holds is queued for it to drop.
    fn fail_node(&mut self, i: usize, outcome: &NodeOutcome, now: Instant, socket: Socket) {
        if self.nodes[i].link == Link::Open && !self.watches.is_empty() {
            // What this connection tracked can no longer be pushed: every waiter looks again.
            self.wake_watches(|_| true, Wake::Dropped);
        }
        let node = &mut self.nodes[i];
        if socket == Socket::Held && node.link != Link::Closed {
            self.io.push_back(IoEvent::Close(i));
        }
        if matches!(node.link, Link::Connecting(_)) {
            self.connecting -= 1;
        }
        node.link = Link::Closed;
        if !self.enters.is_empty() {
            // What it owed will never be read: no late refusal to answer with a leave.
            self.enters.retain_mut(|e| e.forget(i));
        }
        let node = &mut self.nodes[i];
        let owed: SmallVec<[Tag; 16]> = node.conn.failed(now).collect();
        for tag in owed {
            if self.op(tag).is_some_and(|op| op.round.is_pending(i)) {
                self.vote(tag, i, outcome.clone());
            }
        }
    }

    fn op(&self, tag: Tag) -> Option<&Op<U>> {
        if tag.gen == 0 {
            return None;
        }
        self.ops
            .get(tag.slot as usize)?
            .as_ref()
            .filter(|op| op.gen == tag.gen)
    }

    fn op_mut(&mut self, tag: Tag) -> Option<&mut Op<U>> {
        if tag.gen == 0 {
            return None;
        }
        self.ops
            .get_mut(tag.slot as usize)?
            .as_mut()
            .filter(|op| op.gen == tag.gen)
    }

    /// Records node `i`'s vote in the operation `tag` (if it still waits for it), and
    /// completes the operation once decided.
    fn vote(&mut self, tag: Tag, i: usize, outcome: NodeOutcome) {
        self.vote_with(tag, i, outcome, Extra::None, None);
    }

    /// [`vote`](Engine::vote), with what the reply said beside its vote, and the reply itself
    /// where the round keeps it (an inspection's read).
    fn vote_with(
        &mut self,
        tag: Tag,
        i: usize,
        outcome: NodeOutcome,
        extra: Extra,
        reply: Option<resp::Frame>,
    ) {
        if let Some(stats) = self.nodes.get_mut(i).map(|n| &mut n.stats) {
            stats.count(&outcome);
        }
        if let (Expect::Pttl, Extra::Number(pttl), false) =
            (tag.expect, extra, self.watch_reads.is_empty())
        {
            self.tracked_read(tag, i, pttl);
        }
        self.tally(tag, i, outcome, extra, reply);
    }

    /// Records node `i`'s vote in the operation `tag` (if it still waits for it), uncounted in
    /// the node's statistics, and completes the operation once decided.
    fn tally(
        &mut self,
        tag: Tag,
        i: usize,
        outcome: NodeOutcome,
        extra: Extra,
        reply: Option<resp::Frame>,
    ) {
        let Some(op) = self.op_mut(tag) else { return };
        op.round.record_reply(i, outcome, extra, reply);
        if op.round.decision() == Decision::Open {
            return;
        }
        self.complete(tag);
    }

    /// Ends operation `tag`'s round: the nodes still owing an outcome are undecided.
    fn complete(&mut self, tag: Tag) {
        if self.op(tag).is_none() {
            return;
        }
        let Some(mut op) = self.ops[tag.slot as usize].take() else {
            return;
        };
        if !self.watch_reads.is_empty() {
            self.watch_reads
                .retain(|(slot, gen, _)| (*slot, *gen) != (tag.slot, tag.gen));
        }
        if !self.enters.is_empty() {
            self.entered(tag, &op.round);
        }
        if !self.fair_rounds.is_empty() {
            if !self.held_wakes.is_empty() && op.round.decision() == Decision::Won {
                // A waiter served: a wake held for it has nobody left to wake.
                if let Some(r) = self
                    .fair_rounds
                    .iter()
                    .find(|r| (r.slot, r.gen) == (tag.slot, tag.gen) && r.serves)
                {
                    let names = &r.names;
                    self.held_wakes
                        .retain(|(h, _)| !names.iter().any(|n| n.as_bytes() == &h[..]));
                }
            }
            self.fair_rounds
                .retain(|r| (r.slot, r.gen) != (tag.slot, tag.gen));
        }
        let won = !self.gates.is_empty() && op.round.decision() == Decision::Won;
        op.round.close(|_| NodeOutcome::Undecided);
        if !self.gates.is_empty() {
            self.claim_ended(tag, won, &op.round);
        }
        self.free.push(tag.slot);
        self.live -= 1;
        self.completed.push_back(Completed {
            round: op.round,
            user: op.user,
        });
    }
}

impl<U> Op<U> {
    fn round_len(&self) -> usize {
        self.round.node_count()
    }
}

mod dispatch;
mod events;
#[cfg(test)]
mod fair_set_tests;
#[cfg(test)]
mod fair_tests;
mod gate;
#[cfg(test)]
mod gate_tests;
mod lapse;
mod queue;
#[cfg(test)]
mod tests;
mod timers;
mod watch;

pub use watch::Wake;
