//! [`AsyncRedlock`]: the async client on tokio, many callers pipelined over one connection
//! per node.
//!
//! Each node has a connection task that owns its socket and its [`Conn`] (the same sans-I/O
//! connection state as the blocking client: reply FIFO, login, script preload, backoff).
//! A round encodes its command once, hands it to every node's task, and tallies the replies
//! that come back on the round's own channel, under the node deadline. A task writes every
//! request that is ready in one write, and hands each reply to the round that owns it, in
//! FIFO order; a reply whose round has ended (timed out, decided early, or dropped) is read
//! and discarded, so the connection stays in step whatever the callers do.
//!
//! The module is not called `tokio` so that it does not shadow the crate of that name.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use resp::Frame;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use crate::config::{Builder, Config, NodeAddr};
use crate::conn::{Conn, CONNECT_TIMEOUT};
use crate::error::{ConfigError, Error, NodeOutcome};
use crate::lock::Lock;
use crate::op::{self, Command, Next, OpKind, Retry, Verdict};
use crate::quorum::{Decision, Round};
use crate::script::is_noscript_reply;
use crate::Token;

/// Replies a connection task may owe before its node counts as stuck and is reconnected:
/// room for thousands of concurrent callers on a healthy node.
const MAX_OWED: usize = 16 * 1024;
/// Requests a task takes from its queue before it writes them.
const BATCH: usize = 512;

/// What a node's task hands back to a round: the node, whether it answers the `EVAL`
/// fallback, and the reply or why there is none.
type Reply = (usize, bool, Result<Frame, NodeOutcome>);

/// A command for a node's task, and where its reply goes.
struct Request {
    cmd: Bytes,
    waiter: Waiter,
}

/// Where one reply goes.
struct Waiter {
    node: usize,
    eval: bool,
    /// `None` for fire-and-forget commands (the release of a dropped acquisition).
    tx: Option<mpsc::UnboundedSender<Reply>>,
}

impl Waiter {
    /// Delivers the reply; false if nobody is listening any more.
    fn answer(self, reply: Result<Frame, NodeOutcome>) -> bool {
        match self.tx {
            Some(tx) => tx.send((self.node, self.eval, reply)).is_ok(),
            None => false,
        }
    }
}

/// A Redlock client for async code on tokio.
///
/// Cheap to clone: clones share the connection tasks. Concurrent callers are pipelined: each
/// node has one connection, requests that are ready together go out in one write, and replies
/// are matched to callers in order. One slow or dead node delays no caller beyond its node
/// timeout.
///
/// Every operation is cancellation-safe: dropping its future at any await point leaves the
/// connections in step (owed replies are read and dropped), and dropping an acquisition whose
/// `SET`s were already sent releases that token on every node, best effort.
///
/// Works on the current-thread and the multi-thread runtime; nothing in it blocks.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use redlock_mux::AsyncRedlock;
///
/// # async fn f() -> Result<(), redlock_mux::Error> {
/// let redlock = AsyncRedlock::builder()
///     .nodes(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"])
///     .build_async()?;
/// let lock = redlock.lock("orders:42", Duration::from_secs(10)).await?;
/// // ... work that must be done before lock.validity() runs out ...
/// redlock.unlock(&lock).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncRedlock {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    nodes: Vec<mpsc::UnboundedSender<Request>>,
}

impl std::fmt::Debug for AsyncRedlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRedlock")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Validates the options and builds the async client. Must be called inside a tokio
    /// runtime, which the connection tasks are spawned on; connections open on first use.
    pub fn build_async(self) -> Result<AsyncRedlock, Error> {
        AsyncRedlock::with_config(self.config()?)
    }
}

impl AsyncRedlock {
    /// A builder with the default options; finish it with [`Builder::build_async`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Builds a client from a validated configuration, spawning one connection task per node
    /// on the current tokio runtime. The tasks end when the last clone is dropped.
    pub fn with_config(config: Config) -> Result<AsyncRedlock, Error> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        let nodes = config
            .nodes
            .iter()
            .map(|addr| {
                let (tx, rx) = mpsc::unbounded_channel();
                handle.spawn(run_node(addr.clone(), rx));
                tx
            })
            .collect();
        Ok(AsyncRedlock {
            inner: Arc::new(Inner { config, nodes }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Acquires `resource` for `ttl`, retrying up to the configured number of tries with a
    /// random delay between them. Errors as [`Redlock::lock`](crate::Redlock::lock).
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let mut retry = Retry::new(&self.inner.config);
        loop {
            match self.try_lock(resource, ttl).await {
                Ok(lock) => return Ok(lock),
                Err(e) => match retry.after(e) {
                    Next::Fail(e) => return Err(e),
                    Next::Wait(d) => tokio::time::sleep(d).await,
                },
            }
        }
    }

    /// One round of acquisition, no retries; on failure the token is released on every node
    /// before this returns. Errors as [`Redlock::try_lock`](crate::Redlock::try_lock).
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let ttl_ms = op::ttl_ms(ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let token = Token::generate();
        let cmd = Command {
            kind: OpKind::Acquire,
            resource: resource.as_bytes(),
            token: &token,
            ttl_ms,
        };
        let cfg = &self.inner.config;
        // From here until the outcome is known, dropping this future releases the token.
        let mut guard = ReleaseOnDrop {
            inner: &self.inner,
            resource: resource.as_bytes(),
            token: &token,
            armed: true,
        };
        let (round, t1) = self.round(&cmd, cfg.fail_fast).await;
        match op::acquired(cfg, &round, t1, Instant::now(), ttl) {
            Ok(validity) => {
                guard.armed = false;
                Ok(Lock {
                    resource: resource.to_owned(),
                    token,
                    valid_until: t1 + validity,
                    ttl,
                })
            }
            Err(e) => {
                let release = Command {
                    kind: OpKind::Release,
                    ..cmd
                };
                self.round(&release, false).await;
                guard.armed = false;
                Err(e)
            }
        }
    }

    /// Releases the lock on every node. Errors as [`Redlock::unlock`](crate::Redlock::unlock).
    pub async fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        let cmd = Command {
            kind: OpKind::Release,
            resource: lock.resource.as_bytes(),
            token: &lock.token,
            ttl_ms: 0,
        };
        let cfg = &self.inner.config;
        let (round, _) = self.round(&cmd, cfg.fail_fast).await;
        op::confirmed(cfg, &round)
    }

    /// Extends the lock to `ttl` from now. Errors as
    /// [`Redlock::extend`](crate::Redlock::extend); on any error the lock is left as it was.
    pub async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
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
        let cfg = &self.inner.config;
        let (round, t1) = self.round(&cmd, cfg.fail_fast).await;
        op::confirmed(cfg, &round)?;
        let validity = op::validity_after(cfg, t1, Instant::now(), ttl)?;
        lock.valid_until = t1 + validity;
        lock.ttl = ttl;
        Ok(())
    }

    /// Acquires `resource` (with retries, as [`lock`](Self::lock)) and keeps it alive in the
    /// background with the default [`KeepAlive`] policy until the guard is released or dropped.
    pub async fn lock_guarded(&self, resource: &str, ttl: Duration) -> Result<LockGuard, Error> {
        self.lock_guarded_with(resource, ttl, KeepAlive::default())
            .await
    }

    /// Acquires `resource` and keeps it alive with the given policy. See [`LockGuard`].
    pub async fn lock_guarded_with(
        &self,
        resource: &str,
        ttl: Duration,
        keep_alive: KeepAlive,
    ) -> Result<LockGuard, Error> {
        let lock = self.lock(resource, ttl).await?;
        Ok(LockGuard::start(self.clone(), lock, keep_alive))
    }

    /// Runs one round of `cmd` on every node: returns the tally and the instant read before
    /// the first command was handed to a node.
    async fn round(&self, cmd: &Command<'_>, fail_fast: bool) -> (Round, Instant) {
        let cfg = &self.inner.config;
        let mut wire = BytesMut::with_capacity(160);
        cmd.encode(&mut wire, false);
        let wire = wire.freeze();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut round = Round::new(cfg.nodes.len(), cfg.quorum, fail_fast);
        let t1 = Instant::now();
        for node in 0..cfg.nodes.len() {
            self.send(node, wire.clone(), false, Some(tx.clone()), &mut round);
        }
        let deadline = tokio::time::Instant::from_std(t1 + cfg.node_timeout);
        while round.decision() == Decision::Open {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((node, eval, Ok(frame)))) if round.is_pending(node) => {
                    match cmd.judge(&frame, eval) {
                        Verdict::Outcome(o) => round.record(node, o),
                        Verdict::NoScript => {
                            let targets = round.fallback_targets();
                            let mut eval_wire = BytesMut::with_capacity(256);
                            cmd.encode(&mut eval_wire, true);
                            let eval_wire = eval_wire.freeze();
                            for j in targets {
                                self.send(j, eval_wire.clone(), true, Some(tx.clone()), &mut round);
                            }
                        }
                    }
                }
                Ok(Some((node, _, Err(outcome)))) => round.record(node, outcome),
                // A second reply from a node that already voted (its EVALSHA worked and the
                // fallback EVAL ran too): nothing to count.
                Ok(Some(_)) => {}
                // Unreachable while `tx` lives; ends the round all the same.
                Ok(None) => break,
                Err(_elapsed) => round.close(|_| NodeOutcome::Timeout),
            }
        }
        round.close(|_| NodeOutcome::Undecided);
        (round, t1)
    }

    /// Hands a command to a node's task.
    fn send(
        &self,
        node: usize,
        cmd: Bytes,
        eval: bool,
        tx: Option<mpsc::UnboundedSender<Reply>>,
        round: &mut Round,
    ) {
        let request = Request {
            cmd,
            waiter: Waiter { node, eval, tx },
        };
        if self.inner.nodes[node].send(request).is_err() {
            // The task is gone (its runtime shut down).
            round.record(node, NodeOutcome::Io(std::io::ErrorKind::BrokenPipe));
        }
    }
}

/// Releases a token on every node, fire and forget, when an acquisition is dropped after its
/// `SET`s may have gone out.
struct ReleaseOnDrop<'a> {
    inner: &'a Inner,
    resource: &'a [u8],
    token: &'a Token,
    armed: bool,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            fire_release(self.inner, self.resource, self.token);
        }
    }
}

/// Sends the release script to every node without waiting for the replies. It goes as
/// `EVAL`, not `EVALSHA`: nobody would be there to run the fallback after a `NOSCRIPT`. Each
/// node's task writes it after anything queued before it (the `SET`s of the same token
/// included), so it cannot overtake them.
fn fire_release(inner: &Inner, resource: &[u8], token: &Token) {
    let cmd = Command {
        kind: OpKind::Release,
        resource,
        token,
        ttl_ms: 0,
    };
    let mut wire = BytesMut::with_capacity(256);
    cmd.encode(&mut wire, true);
    let wire = wire.freeze();
    for (node, tx) in inner.nodes.iter().enumerate() {
        let _ = tx.send(Request {
            cmd: wire.clone(),
            waiter: Waiter {
                node,
                eval: true,
                tx: None,
            },
        });
    }
}

/// One node's connection task: connects on demand, writes requests in batches, hands replies
/// back in order, and reconnects after a backoff when the connection fails.
async fn run_node(addr: NodeAddr, mut rx: mpsc::UnboundedReceiver<Request>) {
    let mut conn: Conn<Waiter> = Conn::new(MAX_OWED);
    let mut scratch = vec![0u8; 16 * 1024];
    let mut stream: Option<TcpStream> = None;
    loop {
        let Some(sock) = stream.as_ref() else {
            // Not connected: wait for work, then connect (callers waiting meanwhile are
            // bounded by their own node timeout).
            let Some(first) = rx.recv().await else {
                return;
            };
            let now = Instant::now();
            if !conn.may_connect(now) {
                refuse(first, &mut rx, &NodeOutcome::Down);
                continue;
            }
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr.socket)).await {
                Ok(Ok(sock)) => {
                    // Best effort: a socket that refuses NODELAY still works, only slower.
                    let _ = sock.set_nodelay(true);
                    conn.opened(&addr);
                    stream = Some(sock);
                    if let Err((e, w)) = enqueue(&mut conn, first) {
                        w.answer(Err(e.outcome()));
                    }
                }
                Ok(Err(e)) => {
                    fail(&mut conn, now, &NodeOutcome::Io(e.kind()));
                    refuse(first, &mut rx, &NodeOutcome::Io(e.kind()));
                }
                Err(_) => {
                    fail(&mut conn, now, &NodeOutcome::Timeout);
                    refuse(first, &mut rx, &NodeOutcome::Timeout);
                }
            }
            continue;
        };
        let interest = if conn.out.is_empty() {
            Interest::READABLE
        } else {
            Interest::READABLE | Interest::WRITABLE
        };
        let result = tokio::select! {
            biased;
            ready = sock.ready(interest) => match ready {
                Ok(ready) => service(sock, &mut conn, &mut scratch, ready),
                Err(e) => Err(NodeOutcome::Io(e.kind())),
            },
            request = rx.recv() => match request {
                // Every handle is gone: close the connection and end.
                None => return,
                Some(first) => take_batch(&mut conn, first, &mut rx)
                    .and_then(|()| write_some(sock, &mut conn)),
            },
        };
        if let Err(outcome) = result {
            stream = None;
            fail(&mut conn, Instant::now(), &outcome);
        }
    }
}

/// Fails the connection and tells every caller still owed a reply.
fn fail(conn: &mut Conn<Waiter>, now: Instant, outcome: &NodeOutcome) {
    for waiter in conn.failed(now) {
        waiter.answer(Err(outcome.clone()));
    }
}

/// Answers `first` and everything already queued with `outcome` (the node cannot be asked).
fn refuse(first: Request, rx: &mut mpsc::UnboundedReceiver<Request>, outcome: &NodeOutcome) {
    first.waiter.answer(Err(outcome.clone()));
    while let Ok(r) = rx.try_recv() {
        r.waiter.answer(Err(outcome.clone()));
    }
}

/// Queues one request's command.
fn enqueue(conn: &mut Conn<Waiter>, r: Request) -> Result<(), (crate::conn::ConnError, Waiter)> {
    let cmd = r.cmd;
    conn.queue(r.waiter, |out| out.put_slice(&cmd))
}

/// Queues `first` and whatever else is ready, up to a batch. A stuck connection fails.
fn take_batch(
    conn: &mut Conn<Waiter>,
    first: Request,
    rx: &mut mpsc::UnboundedReceiver<Request>,
) -> Result<(), NodeOutcome> {
    let mut next = Some(first);
    let mut taken = 0;
    while let Some(r) = next.take() {
        if let Err((e, w)) = enqueue(conn, r) {
            let outcome = e.outcome();
            w.answer(Err(outcome.clone()));
            return Err(outcome);
        }
        taken += 1;
        if taken < BATCH {
            next = rx.try_recv().ok();
        }
    }
    Ok(())
}

/// Handles readiness: reads and dispatches every reply, writes what is pending.
fn service(
    sock: &TcpStream,
    conn: &mut Conn<Waiter>,
    scratch: &mut [u8],
    ready: tokio::io::Ready,
) -> Result<(), NodeOutcome> {
    if ready.is_readable() || ready.is_read_closed() {
        loop {
            match sock.try_read(scratch) {
                Ok(0) => {
                    dispatch(conn)?;
                    return Err(NodeOutcome::Io(std::io::ErrorKind::UnexpectedEof));
                }
                Ok(n) => {
                    conn.received(&scratch[..n]);
                    dispatch(conn)?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NodeOutcome::Io(e.kind())),
            }
        }
    }
    if ready.is_writable() || !conn.out.is_empty() {
        write_some(sock, conn)?;
    }
    Ok(())
}

/// Hands every whole reply to its waiter. A late `NOSCRIPT` (its round is over, so nobody
/// sends the fallback) reloads the scripts for the rounds to come.
fn dispatch(conn: &mut Conn<Waiter>) -> Result<(), NodeOutcome> {
    loop {
        match conn.next_reply() {
            Ok(Some((waiter, frame))) => {
                let noscript = is_noscript_reply(&frame);
                if !waiter.answer(Ok(frame)) && noscript {
                    conn.reload_scripts();
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => return Err(e.outcome()),
        }
    }
}

/// Writes as much pending output as the socket takes.
fn write_some(sock: &TcpStream, conn: &mut Conn<Waiter>) -> Result<(), NodeOutcome> {
    while !conn.out.is_empty() {
        match sock.try_write(&conn.out) {
            Ok(0) => return Err(NodeOutcome::Io(std::io::ErrorKind::WriteZero)),
            Ok(n) => conn.wrote(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(NodeOutcome::Io(e.kind())),
        }
    }
    Ok(())
}

/// How a [`LockGuard`] keeps its lock alive.
///
/// # Examples
/// ```
/// use redlock_mux::KeepAlive;
/// let policy = KeepAlive::default().extend_when_left(0.25).max_extensions(10);
/// assert_eq!(policy.threshold(), 0.25);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeepAlive {
    threshold: f64,
    max_extensions: Option<u32>,
}

impl Default for KeepAlive {
    /// Extend when less than half the ttl is left; no limit on the number of extensions.
    fn default() -> Self {
        KeepAlive {
            threshold: 0.5,
            max_extensions: None,
        }
    }
}

impl KeepAlive {
    /// Extend once the validity left falls below `fraction` of the ttl (clamped to
    /// [0.05, 0.95]). Lower leaves less slack for a slow extension.
    pub fn extend_when_left(mut self, fraction: f64) -> Self {
        self.threshold = if fraction.is_finite() {
            fraction.clamp(0.05, 0.95)
        } else {
            0.5
        };
        self
    }

    /// Stop extending after `n` extensions: the lock then runs out at the end of its
    /// validity, and the guard reports [`Loss::Expired`]. Bounds how long one holder can keep
    /// a lock (liveness for the others).
    pub fn max_extensions(mut self, n: u32) -> Self {
        self.max_extensions = Some(n);
        self
    }

    /// The fraction of the ttl below which an extension is started.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }
}

/// Why a guarded lock was lost.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Loss {
    /// An extension failed: the lock is held at most until its current validity ends, and
    /// maybe not even that (another client may hold it).
    ExtendFailed(Error),
    /// The validity ran out without an extension (the extension limit was reached).
    Expired,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::ExtendFailed(e) => write!(f, "extension failed: {e}"),
            Loss::Expired => f.write_str("validity ran out"),
        }
    }
}

/// A lock kept alive in the background: a task extends it whenever its validity falls below
/// the [`KeepAlive`] threshold.
///
/// When an extension fails, or the validity runs out, the guard signals loss: await
/// [`lost`](LockGuard::lost) in a `select!` beside the work, or watch
/// [`loss_watch`](LockGuard::loss_watch), and stop the work when it fires. Dropping the guard
/// stops the extensions and releases the lock (fire and forget); [`release`](LockGuard::release)
/// does it and waits for the answer.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use redlock_mux::AsyncRedlock;
///
/// # async fn work() {}
/// # async fn f(redlock: AsyncRedlock) -> Result<(), redlock_mux::Error> {
/// let guard = redlock.lock_guarded("reports:daily", Duration::from_secs(10)).await?;
/// tokio::select! {
///     _ = work() => guard.release().await?,
///     loss = guard.lost() => eprintln!("lock lost ({loss}); work abandoned"),
/// }
/// # Ok(()) }
/// ```
pub struct LockGuard {
    redlock: AsyncRedlock,
    lock: Arc<Mutex<Lock>>,
    loss: watch::Receiver<Option<Loss>>,
    extensions: Arc<AtomicU32>,
    task: tokio::task::JoinHandle<()>,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.lock())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LockGuard {
    fn start(redlock: AsyncRedlock, lock: Lock, policy: KeepAlive) -> LockGuard {
        let shared = Arc::new(Mutex::new(lock));
        let extensions = Arc::new(AtomicU32::new(0));
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(keep_alive(
            redlock.clone(),
            shared.clone(),
            policy,
            extensions.clone(),
            tx,
        ));
        LockGuard {
            redlock,
            lock: shared,
            loss: rx,
            extensions,
            task,
            released: false,
        }
    }

    /// A snapshot of the lock, with its current validity.
    pub fn lock(&self) -> Lock {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The validity left, from the monotonic clock.
    pub fn validity(&self) -> Duration {
        self.lock().validity()
    }

    /// How many extensions have succeeded.
    pub fn extensions(&self) -> u32 {
        self.extensions.load(Ordering::Relaxed)
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        self.loss.borrow().is_some()
    }

    /// Resolves when the lock is lost, with why. Cancellation-safe: use it in `select!`.
    pub async fn lost(&self) -> Loss {
        let mut rx = self.loss.clone();
        let loss = match rx.wait_for(Option::is_some).await {
            Ok(loss) => loss.clone(),
            // The keep-alive task is gone without a word: it can no longer extend.
            Err(_) => None,
        };
        loss.unwrap_or(Loss::Expired)
    }

    /// A watch channel that turns `Some` when the lock is lost.
    pub fn loss_watch(&self) -> watch::Receiver<Option<Loss>> {
        self.loss.clone()
    }

    /// Stops the extensions and releases the lock, waiting for the nodes' answer.
    pub async fn release(mut self) -> Result<(), Error> {
        self.task.abort();
        self.released = true;
        let lock = self.lock();
        self.redlock.unlock(&lock).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.task.abort();
        if !self.released {
            let lock = self.lock();
            fire_release(&self.redlock.inner, lock.resource.as_bytes(), &lock.token);
        }
    }
}

/// The keep-alive task: sleeps until the validity falls below the threshold, extends, and
/// repeats; reports the first failure (or the end of the validity) and ends.
async fn keep_alive(
    redlock: AsyncRedlock,
    shared: Arc<Mutex<Lock>>,
    policy: KeepAlive,
    extensions: Arc<AtomicU32>,
    loss: watch::Sender<Option<Loss>>,
) {
    let snapshot = || shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
    loop {
        let mut lock = snapshot();
        let limit_reached = policy
            .max_extensions
            .is_some_and(|max| extensions.load(Ordering::Relaxed) >= max);
        if limit_reached {
            tokio::time::sleep_until(tokio::time::Instant::from_std(lock.valid_until)).await;
            let _ = loss.send(Some(Loss::Expired));
            return;
        }
        let slack = Duration::try_from_secs_f64(lock.ttl.as_secs_f64() * policy.threshold)
            .unwrap_or(Duration::ZERO);
        let wake = lock
            .valid_until
            .checked_sub(slack)
            .unwrap_or(lock.valid_until);
        tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
        let ttl = lock.ttl;
        match redlock.extend(&mut lock, ttl).await {
            Ok(()) => {
                extensions.fetch_add(1, Ordering::Relaxed);
                *shared.lock().unwrap_or_else(|p| p.into_inner()) = lock;
            }
            Err(e) => {
                let _ = loss.send(Some(Loss::ExtendFailed(e)));
                return;
            }
        }
    }
}
