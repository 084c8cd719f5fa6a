//! The async client's driver: one task that moves bytes between the engine and the sockets,
//! and waits.
//!
//! Callers hand it rounds through one channel; it submits them to the [`Engine`], opens and
//! drops sockets as the engine asks, writes what the engine has for each node (so the commands
//! of all rounds that are ready together go out in one write per node), feeds it what the
//! sockets read, arms one timer at the engine's next deadline, and answers each round's caller
//! once the engine has decided it. Every rule (deadlines, reply routing, failures, reconnects)
//! is the engine's.
//!
//! Readiness follows tokio's contract: `try_read` / `try_write` clear readiness when they would
//! block, and `poll_read_ready` / `poll_write_ready` then register a waker. Each node's socket
//! registers a waker of its own (`wake.rs`), so a pass polls only the sockets that have news,
//! bytes to write, or no waker registered yet.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;

use super::stream::{Connecting, Stream};
use super::wake::{Node, NodeWakers};
use crate::config::Config;
use crate::core::command::OwnedCommand;
use crate::core::engine::{Engine, IoEvent, Wake};
use crate::core::round::{Round, Until};
use crate::drivers::outcome_of;
use crate::stats::Stats;

/// What callers send the driver.
pub(crate) enum Msg {
    /// Run a round; answer on `reply`. `t1` was read before the message was sent, so it is
    /// before the first write.
    Round {
        cmd: OwnedCommand,
        until: Until,
        t1: Instant,
        reply: oneshot::Sender<Round>,
    },
    /// Send `cmd` in its `EVAL` form to every node and drop the replies: the release of an
    /// acquisition whose caller went away.
    Fire { cmd: OwnedCommand },
    /// Answer with a snapshot of the counters.
    Stats { reply: oneshot::Sender<Stats> },
    /// Watch `key` for waiter `id`: tell `woken` when a push or a dropped connection fires it.
    /// Sent before the waiter's `PTTL` round, so registered before that read goes out.
    Watch {
        id: u64,
        key: Box<[u8]>,
        woken: oneshot::Sender<Wake>,
    },
    /// Waiter `id` no longer waits.
    Unwatch { id: u64 },
}

/// The driver task's state.
pub(crate) struct Driver {
    rx: mpsc::UnboundedReceiver<Msg>,
    closed: bool,
    engine: Engine<oneshot::Sender<Round>>,
    socks: Vec<Option<Stream>>,
    connecting: Vec<Option<Connecting>>,
    /// Per node: whether its socket (or connect) has a waker registered and nothing happened
    /// since, so a pass with nothing to write to it can leave it alone.
    armed: Vec<bool>,
    /// The nodes' wakers (made at the first poll, for the task's waker).
    wakers: Option<NodeWakers>,
    sleep: Pin<Box<Sleep>>,
    scratch: Box<[u8]>,
    /// Whether the last poll yielded to let more rounds arrive before writing.
    deferred: bool,
    /// Rounds submitted since the last write pass.
    batch: usize,
    /// The clock, read once per pass.
    now: Instant,
    /// TLS client settings, for `rediss://` nodes.
    #[cfg(feature = "tls")]
    tls: Option<std::sync::Arc<crate::drivers::tls::TlsSetup>>,
    /// The waiters whose watches are registered, by id.
    waiters: Vec<(u64, oneshot::Sender<Wake>)>,
    /// The process the client was built in: a forked child must leave the sockets alone.
    birth: crate::drivers::Birth,
}

impl Driver {
    pub(crate) fn new(
        config: &Config,
        tls: crate::drivers::TlsSetup,
        rx: mpsc::UnboundedReceiver<Msg>,
        birth: crate::drivers::Birth,
    ) -> Driver {
        #[cfg(not(feature = "tls"))]
        let () = tls;
        Driver {
            rx,
            closed: false,
            engine: Engine::new(config),
            socks: config.nodes().iter().map(|_| None).collect(),
            connecting: config.nodes().iter().map(|_| None).collect(),
            armed: config.nodes().iter().map(|_| false).collect(),
            wakers: None,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
            deferred: false,
            batch: 0,
            now: Instant::now(),
            #[cfg(feature = "tls")]
            tls,
            waiters: Vec::new(),
            birth,
        }
    }

    /// Runs until every handle is gone, no round is left and everything queued is written.
    pub(crate) async fn run(mut self) {
        std::future::poll_fn(|cx| self.poll(cx)).await
    }

    /// One pass does everything that is ready: the channel and every socket are polled until
    /// they register the waker (`Pending`), so the task is woken again by whatever comes next.
    /// Only a deadline already due sends it round once more.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.birth.forked() {
            self.abandon();
            return Poll::Ready(());
        }
        let nodes = match &self.wakers {
            Some(w) if w.wakes(cx.waker()) => w.nodes(),
            _ => {
                // The first poll, or a new task waker: every node registers (again).
                let w = NodeWakers::new(self.socks.len(), cx.waker());
                let nodes = w.nodes();
                self.wakers = Some(w);
                nodes
            }
        };
        loop {
            self.now = Instant::now();
            let arrived = self.take_messages(cx, self.now);
            // Under load, rounds arrive from callers running beside the driver (on other
            // workers of a multi-thread runtime, or queued behind it): yield once before
            // writing, so that one write per node carries them all instead of one each.
            if arrived && self.engine.in_flight() > 1 && !self.deferred {
                self.deferred = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.deferred = false;
            self.apply_io();
            if self.batch > 0 {
                self.engine.note_batch(self.batch);
                self.batch = 0;
            }
            for (i, node) in nodes.iter().enumerate() {
                self.poll_node(i, node);
            }
            self.engine.handle_timeout(self.now);
            self.apply_io();
            // What the deadlines queued goes out in this pass (fair mode: the leave the
            // engine sends by itself for a stale place, see `Engine::handle_timeout`);
            // nothing else would wake the task for it.
            for (i, node) in nodes.iter().enumerate() {
                if self.has_output(i) {
                    self.poll_node(i, node);
                }
            }
            crate::observe::engine_events(&mut self.engine);
            while let Some(done) = self.engine.poll_completed() {
                // The caller may be gone (its future dropped): nothing to do then.
                let _ = done.user.send(done.round);
            }
            while let Some((id, why)) = self.engine.poll_woken() {
                if let Some(k) = self.waiters.iter().position(|(w, _)| *w == id) {
                    let _ = self.waiters.swap_remove(k).1.send(why);
                }
            }
            if self.closed && self.engine.in_flight() == 0 && !self.engine.wants_write() {
                return Poll::Ready(());
            }
            if !self.arm_timer(cx) {
                return Poll::Pending;
            }
        }
    }

    /// Ends the task in a forked child that runs the inherited runtime, without reading or
    /// writing a byte: the sockets are the parent's, and either process could read the
    /// other's replies. They are leaked, not dropped: dropping a tokio socket deregisters it
    /// from the runtime's epoll set, which the child shares with the parent, and would take
    /// the parent's registration away. The rounds still waiting are dropped with the engine,
    /// so their callers get `Error::Forked`.
    fn abandon(&mut self) {
        for sock in self.socks.iter_mut() {
            std::mem::forget(sock.take());
        }
        for conn in self.connecting.iter_mut() {
            std::mem::forget(conn.take());
        }
    }

    /// Arms the timer for the engine's next deadline; returns whether it is already due (then
    /// the pass goes round again).
    ///
    /// The timer is moved to each new deadline and polled on every pass. (Leaving an early
    /// timer in place and polling it only after a move saved ~300 instructions per pair, but
    /// lost a wake-up under load: `many_concurrent_tasks_with_a_node_paused_are_all_correct`
    /// hung 2 runs in 5 with every worker parked and no timer in tokio's wheel.)
    fn arm_timer(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.engine.poll_timeout() else {
            return false;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        if self.sleep.deadline() != deadline {
            self.sleep.as_mut().reset(deadline);
        }
        self.sleep.as_mut().poll(cx).is_ready()
    }

    /// Hands the engine every message waiting in the channel. Returns whether there was any.
    fn take_messages(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut any = false;
        while !self.closed {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Msg::Round {
                    cmd,
                    until,
                    t1,
                    reply,
                })) => {
                    any = true;
                    self.engine.submit(&cmd.borrow(), until, t1, reply);
                    self.batch += 1;
                }
                Poll::Ready(Some(Msg::Fire { cmd })) => {
                    any = true;
                    // A caller that went away fires what its operation leaves behind: a
                    // round of its held back by an open claim of the client must not go out
                    // after that (fair mode, see `Engine::forget_gone`).
                    self.engine.forget_gone(oneshot::Sender::is_closed);
                    self.engine.fire(&cmd.borrow(), now);
                }
                Poll::Ready(Some(Msg::Stats { reply })) => {
                    let _ = reply.send(self.engine.stats());
                }
                Poll::Ready(Some(Msg::Watch { id, key, woken })) => {
                    self.engine.watch(id, key);
                    self.waiters.push((id, woken));
                }
                Poll::Ready(Some(Msg::Unwatch { id })) => {
                    self.engine.unwatch(id);
                    self.waiters.retain(|(w, _)| *w != id);
                }
                Poll::Ready(None) => self.closed = true,
                Poll::Pending => break,
            }
        }
        any
    }

    /// Opens and drops the sockets the engine asks for.
    fn apply_io(&mut self) {
        while let Some(ev) = self.engine.poll_io() {
            match ev {
                IoEvent::Close(i) => {
                    self.socks[i] = None;
                    self.connecting[i] = None;
                    self.armed[i] = false;
                }
                IoEvent::Connect(i) => {
                    self.socks[i] = None;
                    self.armed[i] = false;
                    #[cfg(feature = "tls")]
                    let tls = match crate::drivers::tls_for(&self.tls, self.engine.addr(i)) {
                        Ok(tls) => tls,
                        Err(e) => {
                            self.engine.handle_closed(i, outcome_of(&e), self.now);
                            continue;
                        }
                    };
                    #[cfg(not(feature = "tls"))]
                    let tls = None;
                    let endpoint = self.engine.addr(i).endpoint();
                    self.connecting[i] = Some(Stream::connect(endpoint, tls));
                }
            }
        }
    }

    /// Drives node `i`'s connect, writes and reads, as far as there is anything to do: its
    /// socket is read (or its connect polled) only when its waker was woken or none is
    /// registered, written only when the engine has bytes for it.
    fn poll_node(&mut self, i: usize, node: &Node) {
        let news = node.take() || !self.armed[i];
        let mut cx = Context::from_waker(node.waker());
        if let Some(fut) = self.connecting[i].as_mut() {
            if !news {
                return;
            }
            match fut.as_mut().poll(&mut cx) {
                Poll::Pending => {
                    self.armed[i] = true;
                    return;
                }
                Poll::Ready(Ok(sock)) => {
                    self.socks[i] = Some(sock);
                    self.connecting[i] = None;
                    self.armed[i] = false;
                    self.engine.handle_connected(i);
                }
                Poll::Ready(Err(e)) => {
                    self.connecting[i] = None;
                    self.armed[i] = false;
                    self.engine.handle_closed(i, outcome_of(&e), self.now);
                    return;
                }
            }
        }
        if self.has_output(i) {
            if let Err(e) = self.write_node(i, &mut cx) {
                return self.closed_node(i, e);
            }
        }
        if !news && self.armed[i] {
            return;
        }
        if let Err(e) = self.read_node(i, &mut cx) {
            self.closed_node(i, e);
        }
    }

    /// Node `i`'s socket failed: dropped, and the engine told.
    fn closed_node(&mut self, i: usize, e: std::io::Error) {
        self.socks[i] = None;
        self.armed[i] = false;
        self.engine.handle_closed(i, outcome_of(&e), self.now);
    }

    /// Whether node `i` has anything to write: the engine's bytes, or a TLS session's.
    fn has_output(&self, i: usize) -> bool {
        self.engine.has_output(i) || self.socks[i].as_ref().is_some_and(Stream::wants_write)
    }

    /// Writes what the engine has for node `i` until it is all written or the socket would
    /// block (then the node's waker is registered for writing).
    fn write_node(&mut self, i: usize, cx: &mut Context<'_>) -> std::io::Result<()> {
        loop {
            let out = self.engine.transmit(i);
            let Some(sock) = self.socks[i].as_mut() else {
                return Ok(());
            };
            if out.is_empty() {
                if !sock.wants_write() {
                    return Ok(());
                }
                // Only a TLS session's ciphertext is left.
                match sock.poll_write_ready(cx) {
                    Poll::Pending => return Ok(()),
                    Poll::Ready(Err(e)) => return Err(e),
                    Poll::Ready(Ok(())) => {}
                }
                match sock.try_flush() {
                    Ok(()) if sock.wants_write() => continue,
                    Ok(()) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
            // The write is tried first: a socket that is known not to be writable answers
            // `WouldBlock` without a system call, and only then is a waker registered.
            match sock.try_write(out) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => self.engine.handle_written(i, n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    match sock.poll_write_ready(cx) {
                        Poll::Pending => return Ok(()),
                        Poll::Ready(Err(e)) => return Err(e),
                        Poll::Ready(Ok(())) => {}
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads everything available on node `i` and hands it to the engine, until the socket
    /// would block and the node's waker is registered for reading.
    fn read_node(&mut self, i: usize, cx: &mut Context<'_>) -> std::io::Result<()> {
        loop {
            let Some(sock) = self.socks[i].as_mut() else {
                return Ok(());
            };
            // Read first, as written first: the readiness check comes only when it would block.
            match sock.try_read(&mut self.scratch) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.engine.handle_input(i, &self.scratch[..n], self.now);
                    // The input may have asked for the socket to go (a protocol error), or
                    // for bytes to go out (the EVAL form after a NOSCRIPT).
                    self.apply_io();
                    if self.has_output(i) {
                        self.write_node(i, cx)?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    match sock.poll_read_ready(cx) {
                        Poll::Pending => {
                            self.armed[i] = true;
                            return Ok(());
                        }
                        Poll::Ready(Err(e)) => return Err(e),
                        Poll::Ready(Ok(())) => {}
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}
