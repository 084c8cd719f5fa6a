//! The async client's driver: one task that owns every node's socket and connection state,
//! and every round in progress.
//!
//! It is the blocking driver's loop on tokio's reactor: callers hand it rounds through one
//! channel; it writes each round's command into every node's buffer, writes every buffer in one
//! pass (so the commands of all rounds that are ready together go out in one write per node),
//! reads replies as sockets become readable, hands each to the round that owns it (FIFO per
//! connection: a reply whose round has ended is read and dropped), and answers a round's caller
//! once it is decided or its deadline passed. One task, no channel per node, one wake-up of a
//! caller per round: the least work per round a pipelining client can do.
//!
//! Readiness follows tokio's contract: `poll_read_ready` / `poll_write_ready` register the
//! task's waker, `try_read` / `try_write` clear readiness when they would block.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use smallvec::SmallVec;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;

use crate::config::{Config, NodeAddr};
use crate::conn::{stale_after, Conn, CONNECT_TIMEOUT};
use crate::error::NodeOutcome;
use crate::op::{Command, OpKind};
use crate::quorum::{Decision, Round};
use crate::Token;

/// Replies one connection may owe before its node counts as stuck and is reconnected: room
/// for thousands of concurrent callers on a healthy node.
const MAX_OWED: usize = 16 * 1024;

/// A command with owned arguments, as a round carries it.
#[derive(Debug, Clone)]
pub(crate) struct OwnedCommand {
    pub(crate) kind: OpKind,
    pub(crate) resource: Bytes,
    pub(crate) token: Token,
    pub(crate) ttl_ms: u64,
}

impl OwnedCommand {
    fn borrow(&self) -> Command<'_> {
        Command {
            kind: self.kind,
            resource: &self.resource,
            token: &self.token,
            ttl_ms: self.ttl_ms,
        }
    }
}

/// What callers send the driver.
pub(crate) enum Msg {
    /// Run a round; answer on `reply`. `t1` was read before the message was sent, so it is
    /// before the first write.
    Round {
        cmd: OwnedCommand,
        fail_fast: bool,
        t1: Instant,
        reply: oneshot::Sender<Round>,
    },
    /// Send `cmd` in its `EVAL` form to every node and drop the replies: the release of an
    /// acquisition whose caller went away (nobody would be there for a `NOSCRIPT` fallback).
    Fire { cmd: OwnedCommand },
}

/// Which round (and which attempt on that node) a reply belongs to.
#[derive(Debug, Clone, Copy)]
struct Tag {
    slot: u32,
    gen: u64,
}

/// Tags of fire-and-forget commands: no round.
const NO_SLOT: u32 = u32::MAX;

struct Active {
    gen: u64,
    cmd: OwnedCommand,
    round: Round,
    reply: oneshot::Sender<Round>,
}

struct NodeIo {
    addr: NodeAddr,
    sock: Option<TcpStream>,
    connecting: Option<Pin<Box<dyn Future<Output = std::io::Result<TcpStream>> + Send>>>,
    conn: Conn<Tag>,
}

/// The driver task's state.
pub(crate) struct Driver {
    rx: mpsc::UnboundedReceiver<Msg>,
    closed: bool,
    nodes: Vec<NodeIo>,
    quorum: usize,
    node_timeout: Duration,
    rounds: Vec<Option<Active>>,
    free: Vec<u32>,
    next_gen: u64,
    timers: BinaryHeap<Reverse<(Instant, u32, u64)>>,
    sleep: Pin<Box<Sleep>>,
    /// Rounds that got an outcome since they were last checked for a decision.
    touched: Vec<u32>,
    scratch: Box<[u8]>,
    /// Whether the last poll yielded to let more rounds arrive before writing.
    deferred: bool,
}

impl Driver {
    pub(crate) fn new(config: &Config, rx: mpsc::UnboundedReceiver<Msg>) -> Driver {
        Driver {
            rx,
            closed: false,
            nodes: config
                .nodes
                .iter()
                .map(|addr| NodeIo {
                    addr: addr.clone(),
                    sock: None,
                    connecting: None,
                    conn: Conn::new(MAX_OWED),
                })
                .collect(),
            quorum: config.quorum,
            node_timeout: config.node_timeout,
            rounds: Vec::new(),
            free: Vec::new(),
            next_gen: 1,
            timers: BinaryHeap::new(),
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            touched: Vec::new(),
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
            deferred: false,
        }
    }

    /// Runs until every handle is gone and no round is left.
    pub(crate) async fn run(mut self) {
        std::future::poll_fn(|cx| self.poll(cx)).await
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let now = Instant::now();
            let mut progress = self.take_messages(cx, now);
            // Under load, rounds arrive from callers running beside the driver (on other
            // workers of a multi-thread runtime, or queued behind it): yield once before
            // writing, so that one write per node carries them all instead of one each.
            let busy = self.rounds.len() - self.free.len() > 1;
            if progress && busy && !self.deferred {
                self.deferred = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.deferred = false;
            for i in 0..self.nodes.len() {
                progress |= self.poll_node(i, cx, now);
            }
            self.expire(now);
            self.finish_decided();
            if self.closed && self.timers.is_empty() {
                return Poll::Ready(());
            }
            // Arm the timer for the earliest deadline; if it is already due, go round again.
            if let Some(Reverse((deadline, _, _))) = self.timers.peek() {
                let deadline = tokio::time::Instant::from_std(*deadline);
                if self.sleep.deadline() != deadline {
                    self.sleep.as_mut().reset(deadline);
                }
                if self.sleep.as_mut().poll(cx).is_ready() {
                    progress = true;
                }
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Starts every round waiting in the channel. Returns whether there was any.
    fn take_messages(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut any = false;
        while !self.closed {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Msg::Round {
                    cmd,
                    fail_fast,
                    t1,
                    reply,
                })) => {
                    any = true;
                    self.start(cmd, fail_fast, t1, reply, now);
                }
                Poll::Ready(Some(Msg::Fire { cmd })) => {
                    any = true;
                    let cmd = cmd.borrow();
                    for i in 0..self.nodes.len() {
                        let tag = Tag {
                            slot: NO_SLOT,
                            gen: 0,
                        };
                        // Best effort: a node that cannot take it has lost the key's
                        // connection anyway; the key expires with its ttl.
                        let _ = self.queue(i, tag, &cmd, true, now);
                    }
                }
                Poll::Ready(None) => self.closed = true,
                Poll::Pending => break,
            }
        }
        any
    }

    fn start(
        &mut self,
        cmd: OwnedCommand,
        fail_fast: bool,
        t1: Instant,
        reply: oneshot::Sender<Round>,
        now: Instant,
    ) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.rounds.push(None);
                (self.rounds.len() - 1) as u32
            }
        };
        let gen = self.next_gen;
        self.next_gen += 1;
        let mut round = Round::new(self.nodes.len(), self.quorum, fail_fast);
        {
            let borrowed = cmd.borrow();
            for i in 0..self.nodes.len() {
                let tag = Tag { slot, gen };
                if let Err(outcome) = self.queue(i, tag, &borrowed, false, now) {
                    round.record(i, outcome);
                }
            }
        }
        let deadline = crate::time::later(t1, self.node_timeout);
        self.rounds[slot as usize] = Some(Active {
            gen,
            cmd,
            round,
            reply,
        });
        self.timers.push(Reverse((deadline, slot, gen)));
        self.touched.push(slot);
    }

    /// Queues a command on node `i` (in its `EVAL` form if `eval`; else a scripted command
    /// goes as `EVALSHA`, with the `EVAL` form for its connection to send on `NOSCRIPT`),
    /// connecting first if needed. `Err` with the outcome to record when the node cannot
    /// take it.
    fn queue(
        &mut self,
        i: usize,
        tag: Tag,
        cmd: &Command<'_>,
        eval: bool,
        now: Instant,
    ) -> Result<(), NodeOutcome> {
        if self.nodes[i].sock.is_some()
            && self.nodes[i]
                .conn
                .is_stale(now, stale_after(self.node_timeout))
        {
            // Replaced, and reconnected below at once if the backoff allows.
            self.fail_node(i, &NodeOutcome::Timeout, now);
        }
        let node = &mut self.nodes[i];
        if node.sock.is_none() && node.connecting.is_none() {
            if !node.conn.may_connect(now) {
                return Err(NodeOutcome::Down);
            }
            let addr = node.addr.socket;
            node.connecting = Some(Box::pin(async move {
                match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                    Ok(r) => r,
                    Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
                }
            }));
            node.conn.opened(&node.addr);
        }
        let scripted = !eval && cmd.kind != OpKind::Acquire;
        match node.conn.queue(tag, now, |b| cmd.encode(b, eval), scripted) {
            Ok(()) => Ok(()),
            Err((e, _)) => {
                let outcome = e.outcome();
                self.fail_node(i, &outcome, now);
                Err(outcome)
            }
        }
    }

    /// Drives node `i`'s connect, writes and reads. Returns whether anything happened.
    fn poll_node(&mut self, i: usize, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        let node = &mut self.nodes[i];
        if let Some(fut) = node.connecting.as_mut() {
            match fut.as_mut().poll(cx) {
                Poll::Pending => return false,
                Poll::Ready(Ok(sock)) => {
                    // Best effort: a socket that refuses NODELAY still works, only slower.
                    let _ = sock.set_nodelay(true);
                    node.sock = Some(sock);
                    node.connecting = None;
                    progress = true;
                }
                Poll::Ready(Err(e)) => {
                    self.fail_node(i, &NodeOutcome::Io(e.kind()), now);
                    return true;
                }
            }
        }
        if let Err(outcome) = self.write_node(i, cx) {
            self.fail_node(i, &outcome, now);
            return true;
        }
        match self.read_node(i, cx) {
            Ok(read) => progress | read,
            Err(outcome) => {
                self.fail_node(i, &outcome, now);
                true
            }
        }
    }

    fn write_node(&mut self, i: usize, cx: &mut Context<'_>) -> Result<(), NodeOutcome> {
        let node = &mut self.nodes[i];
        let Some(sock) = node.sock.as_ref() else {
            return Ok(());
        };
        while !node.conn.out.is_empty() {
            match sock.poll_write_ready(cx) {
                Poll::Pending => break,
                Poll::Ready(Err(e)) => return Err(NodeOutcome::Io(e.kind())),
                Poll::Ready(Ok(())) => {}
            }
            match sock.try_write(&node.conn.out) {
                Ok(0) => return Err(NodeOutcome::Io(std::io::ErrorKind::WriteZero)),
                Ok(n) => node.conn.wrote(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NodeOutcome::Io(e.kind())),
            }
        }
        Ok(())
    }

    /// Reads everything available on node `i` and hands out the replies.
    fn read_node(&mut self, i: usize, cx: &mut Context<'_>) -> Result<bool, NodeOutcome> {
        let mut progress = false;
        loop {
            let node = &mut self.nodes[i];
            let Some(sock) = node.sock.as_ref() else {
                return Ok(progress);
            };
            match sock.poll_read_ready(cx) {
                Poll::Pending => return Ok(progress),
                Poll::Ready(Err(e)) => return Err(NodeOutcome::Io(e.kind())),
                Poll::Ready(Ok(())) => {}
            }
            match sock.try_read(&mut self.scratch) {
                Ok(0) => {
                    self.dispatch(i)?;
                    return Err(NodeOutcome::Io(std::io::ErrorKind::UnexpectedEof));
                }
                Ok(n) => {
                    node.conn.received(&self.scratch[..n]);
                    self.dispatch(i)?;
                    progress = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NodeOutcome::Io(e.kind())),
            }
        }
    }

    /// Hands every whole reply received from node `i` to its round.
    fn dispatch(&mut self, i: usize) -> Result<(), NodeOutcome> {
        loop {
            let (tag, frame) = match self.nodes[i].conn.next_reply() {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err(e) => return Err(e.outcome()),
            };
            let active = self
                .rounds
                .get_mut(tag.slot as usize)
                .and_then(Option::as_mut)
                .filter(|a| a.gen == tag.gen);
            // A late reply, or one to a fire-and-forget command, is dropped. (A `NOSCRIPT`
            // never gets here: the connection answers it with the `EVAL` form.)
            if let Some(a) = active.filter(|a| a.round.is_pending(i)) {
                let outcome = a.cmd.borrow().judge(&frame);
                a.round.record(i, outcome);
                self.touched.push(tag.slot);
            }
        }
    }

    /// Fails node `i`'s connection: every round waiting on it records `outcome` for it.
    fn fail_node(&mut self, i: usize, outcome: &NodeOutcome, now: Instant) {
        let node = &mut self.nodes[i];
        node.sock = None;
        node.connecting = None;
        let owed: SmallVec<[Tag; 16]> = node.conn.failed(now).collect();
        for tag in owed {
            if let Some(a) = self
                .rounds
                .get_mut(tag.slot as usize)
                .and_then(Option::as_mut)
                .filter(|a| a.gen == tag.gen)
            {
                a.round.record(i, outcome.clone());
                self.touched.push(tag.slot);
            }
        }
    }

    /// Closes every round whose deadline has passed: nodes still owing count as timed out.
    fn expire(&mut self, now: Instant) {
        while let Some(Reverse((deadline, slot, gen))) = self.timers.peek().copied() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            if let Some(a) = self.rounds[slot as usize].as_mut().filter(|a| a.gen == gen) {
                a.round.close(|_| NodeOutcome::Timeout);
                self.touched.push(slot);
            }
        }
    }

    /// Answers the callers of every decided round and frees their slots.
    fn finish_decided(&mut self) {
        while let Some(slot) = self.touched.pop() {
            let decided = matches!(
                &self.rounds[slot as usize],
                Some(a) if a.round.decision() != Decision::Open
            );
            if !decided {
                continue;
            }
            if let Some(mut a) = self.rounds[slot as usize].take() {
                a.round.close(|_| NodeOutcome::Undecided);
                // The caller may be gone (its future dropped): nothing to do then.
                let _ = a.reply.send(a.round);
                self.free.push(slot);
                // Its timer entry stays in the heap and is skipped by generation when due;
                // drop the ones already at the top to keep the heap small.
                while let Some(Reverse((_, s, g))) = self.timers.peek().copied() {
                    let live = self.rounds[s as usize].as_ref().is_some_and(|a| a.gen == g);
                    if live {
                        break;
                    }
                    self.timers.pop();
                }
            }
        }
    }
}
