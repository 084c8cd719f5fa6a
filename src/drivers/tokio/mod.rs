//! [`AsyncRedlock`]: the async client on tokio, many callers pipelined over one connection
//! per node.
//!
//! Callers hand their rounds to one driver task (`driver.rs`) that runs the engine and owns
//! every node's socket; a round's caller is woken once, when its round is decided. `guard.rs`
//! is the [`LockGuard`] that keeps a lock alive. (This folder sits under `drivers/`, so it does
//! not shadow the crate of that name.)

mod driver;
mod guard;
mod permits;
mod stream;
mod wake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use self::driver::{Driver, Msg};
pub use self::guard::LockGuard;
use crate::core::command::OwnedCommand;
use crate::core::engine::Wake;
use crate::core::event::Events;
use crate::core::keepalive::{self, KeepAlive};
use crate::core::op::{self, Input, Operation, Retry, Step};
use crate::core::round::{Round, Until};
use crate::error::{ConfigError, Error};
use crate::lock::{Lock, Name, Names};
use crate::observe::OpSpan;
use crate::stats::Stats;
use crate::{Builder, Config};

/// A Redlock client for async code on tokio.
///
/// Cheap to clone: clones share one driver task, which owns one connection per node.
/// Concurrent callers are pipelined: the commands of every round that is ready go out in one
/// write per node, and replies are matched to rounds in order. One slow or dead node delays no
/// caller beyond its node timeout.
///
/// Every operation is cancellation-safe: dropping its future at any await point leaves the
/// connections in step (owed replies are read and dropped), and dropping an acquisition whose
/// `SET`s may have been sent releases that token on every node, best effort.
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
///     .build()?;
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
    /// The process the client was built in (see [`AsyncRedlock::forked`]).
    birth: crate::drivers::Birth,
    /// The runtime the client was built in, where its driver runs: keep-alive tasks are
    /// started there, from whichever thread asks.
    runtime: tokio::runtime::Handle,
    tx: mpsc::UnboundedSender<Msg>,
    /// Ids for waiters' watches.
    next_watch: std::sync::atomic::AtomicU64,
}

impl Inner {
    fn forked(&self) -> bool {
        self.birth.forked()
    }
}

impl Drop for Inner {
    /// In a forked child, keeps the channel to the driver open rather than close it: closing
    /// wakes the driver task, which schedules it on the inherited runtime (and wakes that
    /// runtime's poller, an event file descriptor shared with the parent's).
    fn drop(&mut self) {
        if self.forked() {
            let (orphan, _) = mpsc::unbounded_channel();
            std::mem::forget(std::mem::replace(&mut self.tx, orphan));
        }
    }
}

impl std::fmt::Debug for AsyncRedlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRedlock")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Builder<AsyncRedlock> {
    /// Validates the options and builds the async client. Must be called inside a tokio
    /// runtime, which the driver task is spawned on; connections open on first use.
    pub fn build(self) -> Result<AsyncRedlock, Error> {
        let (config, tls) = self.parts()?;
        AsyncRedlock::with_parts(config, tls)
    }
}

impl<C> Builder<C> {
    /// Builds the async client from these options, whichever client the builder was made
    /// for (`Redlock::builder().build_async()`); as [`build`](Builder::build) on
    /// `AsyncRedlock::builder()`.
    pub fn build_async(self) -> Result<AsyncRedlock, Error> {
        let (config, tls) = self.parts()?;
        AsyncRedlock::with_parts(config, tls)
    }
}

impl AsyncRedlock {
    /// A builder with the default options, whose `build` makes this client.
    pub fn builder() -> Builder<AsyncRedlock> {
        Builder::default()
    }

    /// Builds a client from a validated configuration, spawning its driver task on the
    /// current tokio runtime. The task ends when the last clone is dropped.
    ///
    /// Its `rediss://` nodes, if any, get the default TLS settings (the system's root
    /// certificates); other settings need the [`Builder`].
    pub fn with_config(config: Config) -> Result<AsyncRedlock, Error> {
        let tls = crate::drivers::tls_setup(&config, &Default::default())?;
        AsyncRedlock::with_parts(config, tls)
    }

    fn with_parts(config: Config, tls: crate::drivers::TlsSetup) -> Result<AsyncRedlock, Error> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let birth = crate::drivers::Birth::here();
        handle.spawn(Driver::new(&config, tls, rx, birth.clone()).run());
        Ok(AsyncRedlock {
            inner: Arc::new(Inner {
                config,
                birth,
                runtime: handle,
                tx,
                next_watch: std::sync::atomic::AtomicU64::new(1),
            }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Whether this is a forked child of the process the client was built in: then the
    /// client sends its driver nothing (see [`Error::Forked`]). The driver task, should the
    /// child run the inherited runtime, goes quiet by itself (`driver.rs`).
    pub(crate) fn forked(&self) -> bool {
        self.inner.forked()
    }

    /// A snapshot of the per-node counters (votes by outcome, timeouts, reconnects, `NOSCRIPT`
    /// fallbacks, buffered bytes) and the largest batch, from the driver task.
    /// [`Error::Aborted`] if the driver is gone, [`Error::Forked`] in a forked child.
    pub async fn stats(&self) -> Result<Stats, Error> {
        if self.forked() {
            return Err(Error::Forked);
        }
        let (reply, answer) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Stats { reply })
            .map_err(|_| Error::Aborted)?;
        answer.await.map_err(|_| Error::Aborted)
    }

    /// Acquires `resource` for `ttl`, retrying up to the configured number of tries with a
    /// random delay between them. Errors as [`Redlock::lock`](crate::Redlock::lock).
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let names: Names = smallvec::smallvec![Name::new(resource)];
        let retry = Retry::new(&self.inner.config);
        self.acquire(names, ttl, retry).await
    }

    /// Acquires `resource` for `ttl`, trying for up to `max_wait` (however many tries that
    /// takes; the last at the deadline). As [`Redlock::lock_within`](crate::Redlock::lock_within).
    pub async fn lock_within(
        &self,
        resource: &str,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        let names: Names = smallvec::smallvec![Name::new(resource)];
        let retry = Retry::within(&self.inner.config, max_wait, Instant::now());
        self.acquire(names, ttl, retry).await
    }

    /// One round of acquisition, no retries; on failure the token is released on every node
    /// before this returns. Errors as [`Redlock::try_lock`](crate::Redlock::try_lock).
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let names: Names = smallvec::smallvec![Name::new(resource)];
        self.acquire(names, ttl, Retry::once()).await
    }

    /// Acquires every resource of `resources` as one lock, with retries. As
    /// [`Redlock::lock_many`](crate::Redlock::lock_many).
    pub async fn lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        let names = crate::lock::names(resources)?;
        let retry = Retry::new(&self.inner.config);
        self.acquire(names, ttl, retry).await
    }

    /// [`lock_many`](Self::lock_many), trying for up to `max_wait` as
    /// [`lock_within`](Self::lock_within) does.
    pub async fn lock_many_within(
        &self,
        resources: &[&str],
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        let names = crate::lock::names(resources)?;
        let retry = Retry::within(&self.inner.config, max_wait, Instant::now());
        self.acquire(names, ttl, retry).await
    }

    /// One round of [`lock_many`](Self::lock_many), no retries.
    pub async fn try_lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.acquire(crate::lock::names(resources)?, ttl, Retry::once())
            .await
    }

    async fn acquire(&self, names: Names, ttl: Duration, retry: Retry) -> Result<Lock, Error> {
        let span = OpSpan::new("acquire", names.first().map_or("", Name::as_str));
        let result = self
            .run(op::Acquire::new(names, ttl, retry))
            .await
            .map(Lock);
        span.finish_acquire(&result);
        result
    }

    /// Runs `op` (any operation of the core) to its end: the one loop that does what its
    /// steps say, in the order they say it (as the blocking client's `run`). Dropped half-way
    /// (the caller's future dropped), it sends what the operation says to send when abandoned
    /// (an acquisition releases its token), and takes back its watch.
    async fn run<O: Operation>(&self, op: O) -> Result<O::Output, Error> {
        let cfg = &self.inner.config;
        let mut run = Abandon {
            inner: &self.inner,
            op: Some(op),
            watch: None,
        };
        let mut events = Events::new();
        let mut input = Input::Start;
        loop {
            let Some(op) = run.op.as_mut() else {
                return Err(Error::Aborted);
            };
            input = match crate::drivers::next_step(op, input, cfg, &mut events) {
                // (A driver that is gone answers at once: the keys then expire.)
                Step::Round(cmd, until) => {
                    // (The engine tells this operation's watch from other waiters'.)
                    let watch = run.watch.as_ref().map(|(id, _)| *id);
                    let cmd = OwnedCommand::new(&cmd.watched_by(watch));
                    Input::Round(self.round(cmd, until).await)
                }
                Step::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    Input::Slept
                }
                Step::Jitter(d) => {
                    // As yields: tokio's timer counts whole milliseconds, so a sleep of a
                    // few hundred microseconds would cost a millisecond or more.
                    for _ in 0..op::jitter_yields(d) {
                        tokio::task::yield_now().await;
                    }
                    Input::Slept
                }
                Step::Watch(key) => {
                    let key: Box<[u8]> = key.into();
                    run.watch = self.register_watch(key);
                    Input::Watching
                }
                Step::Await(deadline) => {
                    let woken = match (run.watch.as_mut(), deadline) {
                        (Some((_, fired)), Some(deadline)) => tokio::select! {
                            why = fired => why.ok(),
                            _ = tokio::time::sleep_until(deadline.into()) => None,
                        },
                        _ => None,
                    };
                    if let Some((id, _)) = run.watch.take() {
                        let _ = self.inner.tx.send(Msg::Unwatch { id });
                    }
                    Input::Woken(woken)
                }
                Step::Done => break,
            };
        }
        run.finish()
    }

    /// Registers a watch of `key` with the driver: its id and the channel it fires on;
    /// `None` when the driver is gone (the next try says so).
    fn register_watch(&self, key: Box<[u8]>) -> Option<(u64, oneshot::Receiver<Wake>)> {
        let id = self
            .inner
            .next_watch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (woken, fired) = oneshot::channel();
        self.inner.tx.send(Msg::Watch { id, key, woken }).ok()?;
        Some((id, fired))
    }

    /// Reads who holds `resource` on every node, and for how long. As
    /// [`Redlock::inspect`](crate::Redlock::inspect).
    pub async fn inspect(&self, resource: &str) -> Result<crate::Inspection, Error> {
        let span = OpSpan::new("inspect", resource);
        let result = self.run(op::Inspect::new(resource)).await;
        span.finish(&result, None, None);
        result
    }

    /// Reads who holds `resource` and each node's line of fair waiters for it. As
    /// [`Redlock::inspect_line`](crate::Redlock::inspect_line).
    pub async fn inspect_line(&self, resource: &str) -> Result<crate::Inspection, Error> {
        let span = OpSpan::new("inspect", resource);
        let result = self.run(op::Inspect::with_line(resource)).await;
        span.finish(&result, None, None);
        result
    }

    /// Releases the lock on every node. Errors as [`Redlock::unlock`](crate::Redlock::unlock).
    pub async fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        let span = OpSpan::new("release", lock.resource());
        let result = self.run(op::Release::new(&lock.0)).await;
        span.finish(&result, Some(lock.token()), lock.fencing_token());
        result
    }

    /// Extends the lock to `ttl` from now. Errors as
    /// [`Redlock::extend`](crate::Redlock::extend), and so is what happens to the lock's
    /// validity: once the future has been polled, the validity is at most what the new ttl
    /// gives, whether the round succeeds, fails, or is abandoned by dropping the future.
    pub async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        let span = OpSpan::new("extend", lock.resource());
        let result = self.run(op::Extend::new(&mut lock.0, ttl)).await;
        span.finish(&result, Some(lock.token()), lock.fencing_token());
        result
    }

    /// Acquires `resource` (with retries, as [`lock`](Self::lock)) and keeps it alive in the
    /// background with the default [`KeepAlive`] policy until the guard is released or dropped.
    pub async fn lock_guarded(&self, resource: &str, ttl: Duration) -> Result<LockGuard, Error> {
        self.lock_guarded_with(resource, ttl, KeepAlive::default())
            .await
    }

    /// Acquires `resource` and keeps it alive with the given policy. See [`LockGuard`].
    ///
    /// Refuses, before acquiring anything, a ttl too short for keep-alive to work
    /// ([`ConfigError::KeepAlive`]): one whose validity could not hold an extension round (up
    /// to the node timeout) and the loss margin.
    pub async fn lock_guarded_with(
        &self,
        resource: &str,
        ttl: Duration,
        keep_alive: KeepAlive,
    ) -> Result<LockGuard, Error> {
        keepalive::check_ttl(&self.inner.config, ttl)?;
        let lock = self.lock(resource, ttl).await?;
        Ok(self.keep_alive(lock, keep_alive))
    }

    /// [`lock_many`](Self::lock_many), kept alive with the given policy as
    /// [`lock_guarded_with`](Self::lock_guarded_with) keeps a single lock.
    pub async fn lock_many_guarded_with(
        &self,
        resources: &[&str],
        ttl: Duration,
        keep_alive: KeepAlive,
    ) -> Result<LockGuard, Error> {
        keepalive::check_ttl(&self.inner.config, ttl)?;
        let lock = self.lock_many(resources, ttl).await?;
        Ok(self.keep_alive(lock, keep_alive))
    }

    /// [`lock_many_within`](Self::lock_many_within), kept alive with the given policy: the
    /// waiting form of [`lock_many_guarded_with`](Self::lock_many_guarded_with), refusing the
    /// same ttls before acquiring anything.
    pub async fn lock_many_guarded_within(
        &self,
        resources: &[&str],
        ttl: Duration,
        max_wait: Duration,
        keep_alive: KeepAlive,
    ) -> Result<LockGuard, Error> {
        keepalive::check_ttl(&self.inner.config, ttl)?;
        let lock = self.lock_many_within(resources, ttl, max_wait).await?;
        Ok(self.keep_alive(lock, keep_alive))
    }

    /// Keeps a lock taken earlier (by [`try_lock`](Self::try_lock), say, in a retry loop of the
    /// caller's own) alive with the given policy. The lock must come from this client's nodes.
    /// A lock with too little validity left for an extension round is not refused: the guard
    /// starts extending at once and reports loss at its deadline if that does not succeed.
    ///
    /// The keep-alive task runs on the runtime the client was built in, so this may be called
    /// from any thread, inside a runtime or not. In a forked child nothing is started, and the
    /// guard reports the loss at once ([`Error::Forked`]).
    pub fn keep_alive(&self, lock: Lock, policy: KeepAlive) -> LockGuard {
        LockGuard::start(self.clone(), lock, policy)
    }

    /// Runs one round of `cmd` on every node through the driver: returns the tally and the
    /// instant read before the round was handed over (so before its first write), or
    /// [`Error::Aborted`] if the driver task is gone (its runtime is shutting down).
    ///
    /// In a forked child, [`Error::Forked`] before anything is sent, and for a round sent
    /// before the fork, whose answer the driver then never gives.
    async fn round(&self, cmd: OwnedCommand, until: Until) -> Result<(Round, Instant), Error> {
        if self.forked() {
            return Err(Error::Forked);
        }
        let (reply, answer) = oneshot::channel();
        let t1 = Instant::now();
        let msg = Msg::Round {
            cmd,
            until,
            t1,
            reply,
        };
        self.inner.tx.send(msg).map_err(|_| Error::Aborted)?;
        let round = answer.await.map_err(|_| {
            if self.forked() {
                Error::Forked
            } else {
                Error::Aborted
            }
        })?;
        Ok((round, t1))
    }
}

/// An operation in progress in the async client, which does what the operation says to do
/// when abandoned (fire and forget: an acquisition releases its token on every node) if it is
/// dropped before its end (its `SET`s may have gone out), and takes back its watch. The driver
/// writes that release after anything queued before it (the `SET`s of the same token
/// included), so it cannot overtake them. The command is made only then: an operation that
/// ends costs nothing.
struct Abandon<'a, O: Operation> {
    inner: &'a Inner,
    /// Taken by `finish`.
    op: Option<O>,
    /// The watch registered for the operation, until its wait ends.
    watch: Option<(u64, oneshot::Receiver<Wake>)>,
}

impl<O: Operation> Abandon<'_, O> {
    /// The outcome; nothing is sent after this.
    fn finish(mut self) -> Result<O::Output, Error> {
        self.op.take().map_or(Err(Error::Aborted), O::finish)
    }
}

impl<O: Operation> Drop for Abandon<'_, O> {
    fn drop(&mut self) {
        if self.inner.forked() {
            return;
        }
        if let Some((id, _)) = self.watch.take() {
            let _ = self.inner.tx.send(Msg::Unwatch { id });
        }
        if let Some(cmd) = self.op.as_ref().and_then(|op| op.abandon()) {
            let cmd = OwnedCommand::new(&cmd);
            let _ = self.inner.tx.send(Msg::Fire { cmd });
        }
    }
}

/// Releases `lock` on every node without waiting (for a dropped guard); nothing in a forked
/// child.
fn fire_release(inner: &Inner, lock: &Lock) {
    if inner.forked() {
        return;
    }
    let cmd = OwnedCommand::new(&lock.release());
    let _ = inner.tx.send(Msg::Fire { cmd });
}
