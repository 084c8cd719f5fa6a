//! [`Redlock`]: the blocking client, on one mio `Poll` and no runtime.
//!
//! An operation is one round: read the monotonic clock, encode the command once per node into
//! that node's write buffer, write every node's buffer in one pass over non-blocking sockets,
//! then wait on the `Poll` and read replies as they arrive, each node under its own deadline,
//! until the round is decided. Connections persist between operations; a node that fails is
//! reconnected with a non-blocking connect after a backoff, so a dead node costs a round
//! nothing but its vote.
//!
//! mio is edge-triggered: a readiness event is reported once, so every read drains the socket
//! until `WouldBlock`, and every write goes on until the buffer is empty or `WouldBlock`.

use std::io::{self, Read, Write};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token as MioToken};

use crate::config::{Builder, Config, NodeAddr};
use crate::conn::{stale_after, Conn, ConnError, Tag, CONNECT_TIMEOUT, MAX_OWED};
use crate::error::{Error, NodeOutcome};
use crate::lock::Lock;
use crate::op::{self, Command, Next, OpKind, Retry, Verdict};
use crate::quorum::{Decision, Round};
use crate::script::is_noscript_reply;
use crate::Token;

/// A Redlock client that blocks the calling thread: the lowest-latency way to take a lock
/// from synchronous code.
///
/// `Redlock` is `Send + Sync`. It owns one connection per node and one poller; an operation
/// needs them all for its round, so concurrent callers take turns (a mutex guards the
/// connections; it is not held while `lock` sleeps between tries). A thread that needs locks
/// in parallel with others should have a `Redlock` of its own, or use the async client, which
/// pipelines concurrent callers over shared connections.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use redlock_mux::Redlock;
///
/// let redlock = Redlock::builder()
///     .nodes(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"])
///     .build()?;
/// let lock = redlock.lock("orders:42", Duration::from_secs(10))?;
/// // ... work that must be done before lock.validity() runs out ...
/// redlock.unlock(&lock)?;
/// # Ok::<(), redlock_mux::Error>(())
/// ```
pub struct Redlock {
    config: Config,
    driver: Mutex<Driver>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Validates the options and builds the blocking client. No connection is opened yet:
    /// each node is connected on first use, without blocking.
    pub fn build(self) -> Result<Redlock, Error> {
        Redlock::with_config(self.config()?)
    }
}

impl Redlock {
    /// A builder with the default options.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Builds a client from a validated configuration.
    pub fn with_config(config: Config) -> Result<Redlock, Error> {
        let driver = Driver::new(&config).map_err(|e| Error::NoQuorum {
            nodes: crate::error::NodeReports(
                config
                    .nodes
                    .iter()
                    .enumerate()
                    .map(|(node, a)| crate::error::NodeReport {
                        node,
                        addr: a.to_string(),
                        outcome: NodeOutcome::Io(e.kind()),
                    })
                    .collect(),
            ),
        })?;
        Ok(Redlock {
            config,
            driver: Mutex::new(driver),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Bytes of buffer capacity the connections hold (read and write buffers of every node).
    /// For tests that bound what a hostile node can make the client hold.
    #[doc(hidden)]
    pub fn buffered_capacity(&self) -> usize {
        self.driver()
            .nodes
            .iter()
            .map(|n| n.conn.inb.capacity() + n.conn.out.capacity())
            .sum()
    }

    fn driver(&self) -> MutexGuard<'_, Driver> {
        // The driver's state is consistent between operations whatever happened in another
        // caller's, so a poisoned mutex is safe to use.
        self.driver.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Acquires `resource` for `ttl`, retrying up to the configured number of tries with a
    /// random delay between them.
    ///
    /// Errors: the last round's error ([`Error::Conflict`], [`Error::NoQuorum`],
    /// [`Error::ValiditySpent`]), or [`Error::Config`] for a ttl outside 1 ms ..= `i64::MAX` ms.
    pub fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let mut retry = Retry::new(&self.config);
        loop {
            match self.try_lock(resource, ttl) {
                Ok(lock) => return Ok(lock),
                Err(e) => match retry.after(e) {
                    Next::Fail(e) => return Err(e),
                    Next::Wait(d) => std::thread::sleep(d),
                },
            }
        }
    }

    /// One round of acquisition, no retries. On failure the lock is released on every node
    /// (those that seemed to refuse or time out included: a reply may have been lost after
    /// the key was set) before this returns.
    ///
    /// The ttl is taken in whole milliseconds (rounded down).
    pub fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let ttl_ms = op::ttl_ms(ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let token = Token::generate();
        let cmd = Command {
            kind: OpKind::Acquire,
            resource: resource.as_bytes(),
            token: &token,
            ttl_ms,
        };
        let cfg = &self.config;
        let mut driver = self.driver();
        let (round, t1) = driver.round(cfg, &cmd, cfg.fail_fast);
        match op::acquired(cfg, &round, t1, Instant::now(), ttl) {
            Ok(validity) => Ok(Lock {
                resource: resource.to_owned(),
                token,
                valid_until: t1 + validity,
                ttl,
            }),
            Err(e) => {
                let release = Command {
                    kind: OpKind::Release,
                    ..cmd
                };
                driver.round(cfg, &release, false);
                Err(e)
            }
        }
    }

    /// Releases the lock on every node, with the compare-and-delete script.
    ///
    /// `Ok` once a quorum deleted the key. Otherwise [`Error::NotHeld`] if another token holds
    /// it somewhere, [`Error::Expired`] if the keys were already gone, [`Error::NoQuorum`] if
    /// too few nodes answered.
    pub fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        let cmd = Command {
            kind: OpKind::Release,
            resource: lock.resource.as_bytes(),
            token: &lock.token,
            ttl_ms: 0,
        };
        let cfg = &self.config;
        let (round, _) = self.driver().round(cfg, &cmd, cfg.fail_fast);
        op::confirmed(cfg, &round)
    }

    /// Extends the lock to `ttl` from now, with the compare-and-pexpire script, and updates its
    /// validity the way acquisition computes it.
    ///
    /// A lock whose validity has run out is not extended ([`Error::Expired`], nothing sent):
    /// the lock was not held in between, so extending it would hide a gap. On any error the
    /// lock is left as it was.
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = op::ttl_ms(ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        if lock.is_expired() {
            return Err(Error::Expired);
        }
        let cmd = Command {
            kind: OpKind::Extend,
            resource: lock.resource.as_bytes(),
            token: &lock.token,
            ttl_ms,
        };
        let cfg = &self.config;
        let (round, t1) = self.driver().round(cfg, &cmd, cfg.fail_fast);
        op::confirmed(cfg, &round)?;
        let validity = op::validity_after(cfg, t1, Instant::now(), ttl)?;
        lock.valid_until = t1 + validity;
        lock.ttl = ttl;
        Ok(())
    }
}

/// The poller and every node's socket and connection state.
struct Driver {
    poll: Poll,
    events: Events,
    nodes: Vec<Node>,
    next_op: u64,
    scratch: Box<[u8]>,
}

struct Node {
    addr: NodeAddr,
    sock: Option<TcpStream>,
    /// When the connect in progress started.
    connecting: Option<Instant>,
    conn: Conn<Tag>,
    deadline: Instant,
}

/// The round in progress, for the event handler.
struct Current<'a, 'b> {
    id: u64,
    cmd: &'a Command<'b>,
    round: &'a mut Round,
}

impl Driver {
    fn new(config: &Config) -> io::Result<Driver> {
        let now = Instant::now();
        Ok(Driver {
            poll: Poll::new()?,
            events: Events::with_capacity(64),
            nodes: config
                .nodes
                .iter()
                .map(|addr| Node {
                    addr: addr.clone(),
                    sock: None,
                    connecting: None,
                    conn: Conn::new(MAX_OWED),
                    deadline: now,
                })
                .collect(),
            next_op: 1,
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
        })
    }

    /// Runs one round of `cmd` on every node. Returns the tally and the instant read before
    /// the first write.
    fn round(&mut self, cfg: &Config, cmd: &Command<'_>, fail_fast: bool) -> (Round, Instant) {
        // Take in whatever happened since the last round (late replies, closed connections),
        // so that a node that went away is reconnected now rather than failing this round.
        self.pump(Some(Duration::ZERO), None);

        let id = self.next_op;
        self.next_op += 1;
        let mut round = Round::new(self.nodes.len(), cfg.quorum, fail_fast);
        let t1 = Instant::now();
        let deadline = t1 + cfg.node_timeout;
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let sent = node
                .ensure_connected(&self.poll, i, t1, stale_after(cfg.node_timeout))
                .and_then(|()| {
                    node.conn
                        .queue(Tag { id, eval: false }, t1, |b| cmd.encode(b, false))
                        .map_err(|(e, _)| node.fail(t1, &e.outcome()))
                })
                .and_then(|()| node.flush(t1));
            node.deadline = deadline;
            if let Err(outcome) = sent {
                round.record(i, outcome);
            }
        }
        loop {
            if round.decision() != Decision::Open {
                break;
            }
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            for (i, node) in self.nodes.iter().enumerate() {
                if round.is_pending(i) {
                    if now >= node.deadline {
                        round.record(i, NodeOutcome::Timeout);
                    } else {
                        next = Some(next.map_or(node.deadline, |n| n.min(node.deadline)));
                    }
                }
            }
            let Some(next) = next else { break };
            if round.decision() != Decision::Open {
                break;
            }
            let current = Current {
                id,
                cmd,
                round: &mut round,
            };
            self.pump(Some(next - now), Some(current));
        }
        round.close(|_| NodeOutcome::Undecided);
        (round, t1)
    }

    /// Waits up to `timeout` for readiness and handles every event.
    fn pump(&mut self, timeout: Option<Duration>, mut current: Option<Current<'_, '_>>) {
        let Driver {
            poll,
            events,
            nodes,
            scratch,
            ..
        } = self;
        match poll.poll(events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(e) => {
                // The poller itself failed: nothing can be waited on. Fail every node still
                // owing an answer rather than spin.
                if let Some(cur) = current.as_mut() {
                    for i in 0..nodes.len() {
                        if cur.round.is_pending(i) {
                            cur.round.record(i, NodeOutcome::Io(e.kind()));
                        }
                    }
                }
                return;
            }
        }
        let now = Instant::now();
        let mut noscript = false;
        for event in events.iter() {
            let i = event.token().0;
            let Some(node) = nodes.get_mut(i) else {
                continue;
            };
            let result = node.on_event(event, now, scratch, current.as_mut(), i);
            match result {
                Ok(seen) => noscript |= seen,
                Err(outcome) => {
                    if let Some(cur) = current.as_mut() {
                        cur.round.record(i, outcome);
                    }
                }
            }
        }
        if let (true, Some(cur)) = (noscript, current) {
            for j in cur.round.fallback_targets() {
                let node = &mut nodes[j];
                let cmd = cur.cmd;
                let sent = node
                    .conn
                    .queue(
                        Tag {
                            id: cur.id,
                            eval: true,
                        },
                        now,
                        |b| cmd.encode(b, true),
                    )
                    .map_err(|(e, _): (ConnError, Tag)| node.fail(now, &e.outcome()))
                    .and_then(|()| node.flush(now));
                if let Err(outcome) = sent {
                    cur.round.record(j, outcome);
                }
            }
        }
    }
}

impl Node {
    /// Makes sure a connection exists or is being made; `Err` with the outcome to record when
    /// the node cannot be asked this round.
    fn ensure_connected(
        &mut self,
        poll: &Poll,
        i: usize,
        now: Instant,
        stale: Duration,
    ) -> Result<(), NodeOutcome> {
        if self.sock.is_some() && self.conn.is_stale(now, stale) {
            // Replaced, and reconnected below at once if the backoff allows.
            self.fail(now, &NodeOutcome::Timeout);
        }
        if self.sock.is_some() {
            match self.connecting {
                Some(start) if now.saturating_duration_since(start) > CONNECT_TIMEOUT => {
                    return Err(self.fail(now, &NodeOutcome::Timeout));
                }
                _ => return Ok(()),
            }
        }
        if !self.conn.may_connect(now) {
            return Err(NodeOutcome::Down);
        }
        let mut sock = match TcpStream::connect(self.addr.socket) {
            Ok(s) => s,
            Err(e) => return Err(self.fail(now, &NodeOutcome::Io(e.kind()))),
        };
        if let Err(e) = poll.registry().register(
            &mut sock,
            MioToken(i),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            return Err(self.fail(now, &NodeOutcome::Io(e.kind())));
        }
        // Best effort: a socket that refuses NODELAY still works, only slower.
        let _ = sock.set_nodelay(true);
        self.conn.opened(&self.addr);
        self.sock = Some(sock);
        self.connecting = Some(now);
        Ok(())
    }

    /// Drops the connection after a failure and starts the backoff; returns the outcome given,
    /// for recording.
    fn fail(&mut self, now: Instant, outcome: &NodeOutcome) -> NodeOutcome {
        // Dropping the socket closes it, which also removes it from the poller.
        self.sock = None;
        self.connecting = None;
        // The replies owed will never come; their rounds time out or are already over.
        let _ = self.conn.failed(now);
        outcome.clone()
    }

    /// Writes as much of the pending output as the socket takes.
    fn flush(&mut self, now: Instant) -> Result<(), NodeOutcome> {
        if self.connecting.is_some() {
            return Ok(());
        }
        let Some(sock) = self.sock.as_mut() else {
            return Err(NodeOutcome::Down);
        };
        while !self.conn.out.is_empty() {
            match sock.write(&self.conn.out) {
                Ok(0) => return Err(self.fail(now, &NodeOutcome::Io(io::ErrorKind::WriteZero))),
                Ok(n) => self.conn.wrote(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(now, &NodeOutcome::Io(e.kind()))),
            }
        }
        Ok(())
    }

    /// Handles one readiness event. `Ok(true)` when a reply of the current round was
    /// `NOSCRIPT`, so that the caller sends the fallback.
    fn on_event(
        &mut self,
        event: &mio::event::Event,
        now: Instant,
        scratch: &mut [u8],
        mut current: Option<&mut Current<'_, '_>>,
        i: usize,
    ) -> Result<bool, NodeOutcome> {
        let writable = event.is_writable();
        let closing = event.is_read_closed() || event.is_error();
        let readable = event.is_readable() || closing;
        let Some(sock) = self.sock.as_mut() else {
            return Ok(false);
        };
        if self.connecting.is_some() {
            if !(writable || readable) {
                return Ok(false);
            }
            match sock.take_error() {
                Ok(Some(e)) | Err(e) => return Err(self.fail(now, &NodeOutcome::Io(e.kind()))),
                Ok(None) => {}
            }
            match sock.peer_addr() {
                Ok(_) => self.connecting = None,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(false),
                Err(e) => return Err(self.fail(now, &NodeOutcome::Io(e.kind()))),
            }
            self.flush(now)?;
        } else if writable {
            self.flush(now)?;
        }
        if !readable {
            return Ok(false);
        }
        let mut noscript = false;
        loop {
            let Some(sock) = self.sock.as_mut() else {
                return Ok(noscript);
            };
            match sock.read(scratch) {
                Ok(0) => {
                    // Replies that arrived before the close still count.
                    self.take_replies(now, current.as_deref_mut(), i)?;
                    return Err(self.fail(now, &NodeOutcome::Io(io::ErrorKind::UnexpectedEof)));
                }
                Ok(n) => {
                    self.conn.received(&scratch[..n]);
                    noscript |= self.take_replies(now, current.as_deref_mut(), i)?;
                    // A short read emptied the socket's receive queue: bytes that arrive
                    // later raise a new edge, so the read that would only say WouldBlock is
                    // skipped. Not when the peer is closing: the end of stream is read now.
                    if n < scratch.len() && !closing {
                        return Ok(noscript);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(noscript),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(now, &NodeOutcome::Io(e.kind()))),
            }
        }
    }

    /// Decodes every whole reply received, gives those of the current round their verdict, and
    /// drops the late ones. `Ok(true)` when one of the current round's was `NOSCRIPT`.
    fn take_replies(
        &mut self,
        now: Instant,
        mut current: Option<&mut Current<'_, '_>>,
        i: usize,
    ) -> Result<bool, NodeOutcome> {
        let mut noscript = false;
        loop {
            let (owner, frame) = match self.conn.next_reply() {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(noscript),
                Err(e) => return Err(self.fail(now, &e.outcome())),
            };
            let Tag { id, eval } = owner;
            match current.as_deref_mut() {
                Some(cur) if id == cur.id && cur.round.is_pending(i) => {
                    match cur.cmd.judge(&frame, eval) {
                        Verdict::Outcome(o) => cur.round.record(i, o),
                        Verdict::NoScript => noscript = true,
                    }
                }
                _ => {
                    // A late reply: dropped. If it says the scripts are gone, load them again
                    // so that the next operation's EVALSHA finds them.
                    if is_noscript_reply(&frame) {
                        self.conn.reload_scripts();
                        self.flush(now)?;
                    }
                }
            }
        }
    }
}
