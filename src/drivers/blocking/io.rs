//! The blocking driver: one mio `Poll`, one non-blocking socket per node (TCP or Unix, see
//! `stream.rs`), and the engine.
//!
//! It only moves bytes and waits: it opens and drops the sockets the engine asks for, writes
//! what the engine has for each node, feeds it what the sockets read, and sleeps in `poll`
//! until readiness or the engine's next deadline. mio is edge-triggered: every read drains the
//! socket until `WouldBlock`, and every write goes on until the engine has nothing left or the
//! socket says `WouldBlock`.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token as MioToken};

use super::stream::Stream;
use crate::config::Config;
use crate::core::command::Command;
use crate::core::engine::{Engine, IoEvent};

/// The poller token of the waker that asks a watching thread to give up the driver.
const WAKE: MioToken = MioToken(usize::MAX);
use crate::core::round::{Round, Until};
use crate::drivers::outcome_of;

/// The poller and every node's socket; everything else is the engine's.
pub(super) struct Driver {
    pub(super) engine: Engine<usize>,
    poll: Poll,
    events: Events,
    socks: Vec<Option<Stream>>,
    scratch: Box<[u8]>,
    /// The clock, read once after each wait (and before a round's first write).
    now: Instant,
    /// Wakes a thread that waits in [`idle`](Driver::idle) from another thread.
    waker: std::sync::Arc<mio::Waker>,
    /// The waker fired since [`idle`](Driver::idle) began.
    woke: bool,
    /// TLS client settings, for `rediss://` nodes.
    #[cfg(feature = "tls")]
    tls: Option<std::sync::Arc<crate::drivers::tls::TlsSetup>>,
}

/// One operation of a batch: its command, and its round once decided.
pub(super) struct Job<'a> {
    cmd: Command<'a>,
    until: Until,
    pub(super) round: Option<Round>,
}

impl<'a> Job<'a> {
    pub(super) fn new(cmd: Command<'a>, until: Until) -> Job<'a> {
        Job {
            cmd,
            until,
            round: None,
        }
    }
}

impl Driver {
    pub(super) fn new(config: &Config, tls: crate::drivers::TlsSetup) -> io::Result<Driver> {
        #[cfg(not(feature = "tls"))]
        let () = tls;
        let poll = Poll::new()?;
        let waker = std::sync::Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
        Ok(Driver {
            engine: Engine::new(config),
            poll,
            waker,
            woke: false,
            events: Events::with_capacity(64),
            socks: config.nodes().iter().map(|_| None).collect(),
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
            now: Instant::now(),
            #[cfg(feature = "tls")]
            tls,
        })
    }

    /// Runs one round of every job's command on every node, the commands written in one pass
    /// and tallied by the engine as their replies arrive, until every round is decided.
    /// Returns the instant read before the first write.
    pub(super) fn run(&mut self, jobs: &mut [Job<'_>]) -> Instant {
        // Take in whatever happened since the last round (late replies, closed connections),
        // so that a node that went away is reconnected now rather than failing this round.
        self.pump(Some(Duration::ZERO));
        let t1 = Instant::now();
        self.now = t1;
        for (k, job) in jobs.iter().enumerate() {
            self.engine.submit(&job.cmd, job.until, t1, k);
        }
        self.engine.note_batch(jobs.len());
        let mut left = jobs.len();
        loop {
            self.sync();
            while let Some(done) = self.engine.poll_completed() {
                if let Some(job) = jobs.get_mut(done.user) {
                    job.round = Some(done.round);
                    left -= 1;
                }
            }
            if left == 0 {
                return t1;
            }
            if left == self.engine.parked() {
                // Fair mode: what is left is held back by a claim of this client whose
                // release its caller sends only once this batch returns (batches run one at
                // a time): it goes out now rather than at the claim's lease.
                self.engine.send_parked(self.now);
                continue;
            }
            let wait = self
                .engine
                .poll_timeout()
                .map(|t| t.saturating_duration_since(self.now));
            self.pump(wait);
            self.engine.handle_timeout(self.now);
        }
    }

    /// Reads and writes, with no round open, until no connection owes a scripted reply or
    /// unwritten bytes (a TLS session's handshake and ciphertext included: this client has
    /// no thread to drive them otherwise), or `deadline` passes. Returns whether nothing is
    /// left owed.
    pub(super) fn service(&mut self, deadline: Instant) -> bool {
        self.pump_until(deadline, |d| {
            let tls_busy = d.socks.iter().flatten().any(Stream::busy);
            !d.engine.owes_scripted() && !tls_busy
        })
    }

    /// Writes, reads and waits, with no round open, until `done` holds (checked after each
    /// pass) or `deadline` passes; returns whether `done` held.
    fn pump_until(&mut self, deadline: Instant, done: impl Fn(&Self) -> bool) -> bool {
        loop {
            self.sync();
            if done(self) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let wait = self
                .engine
                .poll_timeout()
                .map_or(deadline, |t| t.min(deadline));
            self.pump(Some(wait.saturating_duration_since(now)));
            self.engine.handle_timeout(self.now);
        }
    }

    /// The waker that makes [`idle`](Driver::idle) return, for other threads to hold.
    pub(super) fn waker(&self) -> std::sync::Arc<mio::Waker> {
        self.waker.clone()
    }

    /// Reads (for pushes) and writes, with no round open, until a watch fires, the waker is
    /// woken (another thread needs the driver), or `deadline` passes.
    pub(super) fn idle(&mut self, deadline: Instant) {
        self.woke = false;
        self.pump_until(deadline, |d| d.woke || d.engine.has_woken());
    }

    /// Drops every connection (reopened on next use): after a round that panicked, what they
    /// owe no longer matches any round.
    pub(super) fn reset(&mut self, now: Instant) {
        self.engine.reset(now);
        self.sync();
    }

    /// Opens and drops the sockets the engine asks for, then writes what it has for each node.
    fn sync(&mut self) {
        self.apply_io();
        crate::observe::engine_events(&mut self.engine);
        for i in 0..self.socks.len() {
            if self.engine.has_output(i) {
                self.flush(i);
            }
        }
    }

    /// Opens and drops the sockets the engine asks for.
    fn apply_io(&mut self) {
        while let Some(ev) = self.engine.poll_io() {
            match ev {
                // Dropping the socket closes it, which also removes it from the poller.
                IoEvent::Close(i) => self.socks[i] = None,
                IoEvent::Connect(i) => {
                    self.socks[i] = None;
                    match self.open(i) {
                        Ok(sock) => self.socks[i] = Some(sock),
                        Err(e) => self.engine.handle_closed(i, outcome_of(&e), self.now),
                    }
                }
            }
        }
    }

    /// A non-blocking connect to node `i`, registered with the poller.
    fn open(&self, i: usize) -> io::Result<Stream> {
        #[cfg(feature = "tls")]
        let tls = crate::drivers::tls_for(&self.tls, self.engine.addr(i))?;
        #[cfg(not(feature = "tls"))]
        let tls = None;
        let mut sock = Stream::connect(self.engine.addr(i).endpoint(), tls)?;
        self.poll.registry().register(
            &mut sock,
            MioToken(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        Ok(sock)
    }

    /// Writes as much of node `i`'s pending output as its socket takes (first what a TLS
    /// session still holds).
    fn flush(&mut self, i: usize) {
        if let Some(sock) = self.socks[i].as_mut() {
            if let Err(e) = sock.flush() {
                return self.closed(i, e);
            }
        }
        loop {
            let out = self.engine.transmit(i);
            if out.is_empty() {
                return;
            }
            let Some(sock) = self.socks[i].as_mut() else {
                return;
            };
            match sock.write(out) {
                Ok(0) => return self.closed(i, io::ErrorKind::WriteZero.into()),
                Ok(n) => self.engine.handle_written(i, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.closed(i, e),
            }
        }
    }

    /// Node `i`'s socket failed: dropped, and the engine told.
    fn closed(&mut self, i: usize, e: io::Error) {
        self.socks[i] = None;
        self.engine.handle_closed(i, outcome_of(&e), self.now);
    }

    /// Waits up to `timeout` for readiness and hands the engine what it brings.
    fn pump(&mut self, timeout: Option<Duration>) {
        let polled = self.poll.poll(&mut self.events, timeout);
        self.now = Instant::now();
        match polled {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(e) => {
                // The poller itself failed: nothing can be waited on. Fail every connection
                // rather than spin; their rounds get the error as those nodes' votes.
                for i in 0..self.socks.len() {
                    if self.socks[i].is_some() {
                        self.closed(i, io::Error::new(e.kind(), e.to_string()));
                    }
                }
                return;
            }
        }
        // Taken out while handled (an empty `Events` allocates nothing), put back after.
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        for ev in events.iter() {
            if ev.token() == WAKE {
                self.woke = true;
                continue;
            }
            let i = ev.token().0;
            let closing = ev.is_read_closed() || ev.is_error();
            if i < self.socks.len() {
                self.on_ready(i, ev.is_writable(), ev.is_readable() || closing, closing);
            }
        }
        self.events = events;
    }

    /// Handles one readiness event of node `i`.
    fn on_ready(&mut self, i: usize, writable: bool, readable: bool, closing: bool) {
        let Some(sock) = self.socks[i].as_mut() else {
            return;
        };
        if self.engine.is_connecting(i) {
            if !(writable || readable) {
                return;
            }
            match sock.take_error() {
                Ok(Some(e)) | Err(e) => return self.closed(i, e),
                Ok(None) => {}
            }
            match sock.connected() {
                Ok(()) => self.engine.handle_connected(i),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => return self.closed(i, e),
            }
            self.flush(i);
        } else if writable {
            self.flush(i);
        }
        if !readable {
            return;
        }
        loop {
            let Some(sock) = self.socks[i].as_mut() else {
                return;
            };
            match sock.read(&mut self.scratch) {
                Ok(0) => return self.closed(i, io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.engine.handle_input(i, &self.scratch[..n], self.now);
                    // The input may have asked for the socket to go (a protocol error), or for
                    // bytes to go out on it (the EVAL form after a NOSCRIPT).
                    self.apply_io();
                    if self.engine.has_output(i) {
                        self.flush(i);
                    }
                    // A short read emptied the socket's receive queue: bytes that arrive
                    // later raise a new edge, so the read that would only say WouldBlock is
                    // skipped. Not when the peer is closing: the end of stream is read now.
                    let drained = self.socks[i]
                        .as_ref()
                        .is_some_and(Stream::short_read_drains);
                    if n < self.scratch.len() && !closing && drained {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.closed(i, e),
            }
        }
    }
}
