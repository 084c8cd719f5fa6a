//! [`AsyncRedlock`]: the async client on tokio, many callers pipelined over one connection
//! per node.
//!
//! Callers hand their rounds to one driver task ([`tokio_driver`](crate::tokio_driver)) that
//! owns every node's connection; a round's caller is woken once, when its round is decided.
//! The module is not called `tokio` so that it does not shadow the crate of that name.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::lock::Name;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::{Builder, Config};
use crate::error::{ConfigError, Error};
use crate::lock::Lock;
use crate::op::{self, Next, OpKind, Retry};
use crate::quorum::Round;
use crate::stats::Stats;
use crate::tokio_driver::{Driver, Msg, OwnedCommand};
use crate::Token;

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
    tx: mpsc::UnboundedSender<Msg>,
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
    /// runtime, which the driver task is spawned on; connections open on first use.
    pub fn build_async(self) -> Result<AsyncRedlock, Error> {
        AsyncRedlock::with_config(self.config()?)
    }
}

impl AsyncRedlock {
    /// A builder with the default options; finish it with [`Builder::build_async`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Builds a client from a validated configuration, spawning its driver task on the
    /// current tokio runtime. The task ends when the last clone is dropped.
    pub fn with_config(config: Config) -> Result<AsyncRedlock, Error> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        let (tx, rx) = mpsc::unbounded_channel();
        handle.spawn(Driver::new(&config, rx).run());
        Ok(AsyncRedlock {
            inner: Arc::new(Inner { config, tx }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A snapshot of the per-node counters (votes by outcome, timeouts, reconnects, `NOSCRIPT`
    /// fallbacks, buffered bytes) and the largest batch, from the driver task.
    /// [`Error::Aborted`] if the driver is gone.
    pub async fn stats(&self) -> Result<Stats, Error> {
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
        let (ttl_ms, ttl) = op::ttl_ms(&self.inner.config, ttl)?;
        let cmd = OwnedCommand {
            kind: OpKind::Acquire,
            resource: Name::new(resource),
            token: Token::generate(),
            ttl_ms,
        };
        let release = OwnedCommand {
            kind: OpKind::Release,
            ..cmd.clone()
        };
        let cfg = &self.inner.config;
        // From here until the outcome is known, dropping this future releases the token.
        let mut guard = ReleaseOnDrop {
            inner: &self.inner,
            cmd: Some(release.clone()),
        };
        let token = cmd.token;
        // A driver that is gone leaves nothing to release with: the keys expire.
        let (round, t1) = self.round(cmd, cfg.fail_fast).await?;
        match op::acquired(cfg, &round, t1, Instant::now(), ttl) {
            Ok(validity) => {
                guard.cmd = None;
                Ok(op::granted(resource, token, t1, validity, ttl))
            }
            Err(e) => {
                // Its outcome changes nothing for the caller: what it leaves expires.
                let _ = self.round(release, false).await;
                guard.cmd = None;
                Err(e)
            }
        }
    }

    /// Releases the lock on every node. Errors as [`Redlock::unlock`](crate::Redlock::unlock).
    pub async fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        let cmd = OwnedCommand {
            kind: OpKind::Release,
            resource: lock.resource.clone(),
            token: lock.token,
            ttl_ms: 0,
        };
        let cfg = &self.inner.config;
        let (round, _) = self.round(cmd, cfg.fail_fast).await?;
        op::confirmed(cfg, &round)
    }

    /// Extends the lock to `ttl` from now. Errors as
    /// [`Redlock::extend`](crate::Redlock::extend), and so is what happens to the lock's
    /// validity: once the future has been polled, the validity is at most what the new ttl
    /// gives, whether the round succeeds, fails, or is abandoned by dropping the future.
    pub async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        let (ttl_ms, ttl) = op::begin_extend(&self.inner.config, lock, ttl, Instant::now())?;
        let cmd = OwnedCommand {
            kind: OpKind::Extend,
            resource: lock.resource.clone(),
            token: lock.token,
            ttl_ms,
        };
        let cfg = &self.inner.config;
        let (round, t1) = self.round(cmd, cfg.fail_fast).await?;
        op::finish_extend(cfg, lock, &round, t1, Instant::now(), ttl)
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
        let cfg = &self.inner.config;
        let (_, ttl) = op::ttl_ms(cfg, ttl)?;
        let best_validity = ttl.saturating_sub(crate::quorum::drift(ttl, cfg.drift_factor));
        if best_validity <= cfg.node_timeout.saturating_add(loss_margin(ttl)) {
            return Err(ConfigError::KeepAlive {
                ttl,
                node_timeout: cfg.node_timeout,
            }
            .into());
        }
        let lock = self.lock(resource, ttl).await?;
        Ok(self.keep_alive(lock, keep_alive))
    }

    /// Keeps a lock taken earlier (by [`try_lock`](Self::try_lock), say, in a retry loop of the
    /// caller's own) alive with the given policy. The lock must come from this client's nodes.
    /// A lock with too little validity left for an extension round is not refused: the guard
    /// starts extending at once and reports loss at its deadline if that does not succeed.
    pub fn keep_alive(&self, lock: Lock, policy: KeepAlive) -> LockGuard {
        LockGuard::start(self.clone(), lock, policy)
    }

    /// Runs one round of `cmd` on every node through the driver: returns the tally and the
    /// instant read before the round was handed over (so before its first write), or
    /// [`Error::Aborted`] if the driver task is gone (its runtime is shutting down).
    async fn round(&self, cmd: OwnedCommand, fail_fast: bool) -> Result<(Round, Instant), Error> {
        let (reply, answer) = oneshot::channel();
        let t1 = Instant::now();
        let msg = Msg::Round {
            cmd,
            fail_fast,
            t1,
            reply,
        };
        self.inner.tx.send(msg).map_err(|_| Error::Aborted)?;
        let round = answer.await.map_err(|_| Error::Aborted)?;
        Ok((round, t1))
    }
}

/// Releases a token on every node, fire and forget, when an acquisition is dropped after its
/// `SET`s may have gone out. The driver writes it after anything queued before it (the `SET`s
/// of the same token included), so it cannot overtake them.
struct ReleaseOnDrop<'a> {
    inner: &'a Inner,
    cmd: Option<OwnedCommand>,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(cmd) = self.cmd.take() {
            let _ = self.inner.tx.send(Msg::Fire { cmd });
        }
    }
}

/// Releases `lock` on every node without waiting (for a dropped guard).
fn fire_release(inner: &Inner, lock: &Lock) {
    let cmd = OwnedCommand {
        kind: OpKind::Release,
        resource: lock.resource.clone(),
        token: lock.token,
        ttl_ms: 0,
    };
    let _ = inner.tx.send(Msg::Fire { cmd });
}

/// How a [`LockGuard`] keeps its lock alive.
///
/// By default: extend when less than half the ttl is left, and stop extending one hour after
/// the guard started (the lock then runs out within one more ttl, and the guard reports
/// [`Loss::Expired`]). Redlock asks for a bound on how long one holder may keep a lock by
/// extending it, so that a holder stuck in a loop cannot starve everyone else; set your own
/// with [`max_hold`](KeepAlive::max_hold) or [`max_extensions`](KeepAlive::max_extensions),
/// or lift it with [`unlimited`](KeepAlive::unlimited) where a job may legitimately run for
/// longer (`redlock run` does, and says so).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use redlock_mux::KeepAlive;
/// let policy = KeepAlive::default().extend_when_left(0.25).max_extensions(10);
/// assert_eq!(policy.threshold(), 0.25);
/// assert_eq!(KeepAlive::default().hold_limit(), Some(Duration::from_secs(3600)));
/// assert_eq!(KeepAlive::default().unlimited().hold_limit(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeepAlive {
    threshold: f64,
    max_extensions: Option<u32>,
    max_hold: Option<Duration>,
}

/// How long, by default, a guard goes on extending its lock: one hour.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(3600);

impl Default for KeepAlive {
    /// Extend when less than half the ttl is left; no extension starts more than
    /// [`DEFAULT_MAX_HOLD`] after the guard started.
    fn default() -> Self {
        KeepAlive {
            threshold: 0.5,
            max_extensions: None,
            max_hold: Some(DEFAULT_MAX_HOLD),
        }
    }
}

impl KeepAlive {
    /// Extend once the validity left falls below `fraction` of the ttl (clamped to
    /// [0.05, 0.95]). Lower leaves less slack for a slow extension. Whatever the fraction, an
    /// extension starts early enough for a round that takes the whole node timeout to end
    /// before the loss deadline (see [`LockGuard`]).
    pub fn extend_when_left(mut self, fraction: f64) -> Self {
        self.threshold = if fraction.is_finite() {
            fraction.clamp(0.05, 0.95)
        } else {
            0.5
        };
        self
    }

    /// Stop extending after `n` extensions: the lock then runs out at the end of its
    /// validity, and the guard reports [`Loss::Expired`] before it does.
    pub fn max_extensions(mut self, n: u32) -> Self {
        self.max_extensions = Some(n);
        self
    }

    /// Start no extension later than `d` after the guard started (so the lock is held at
    /// most `d` plus one ttl), then report [`Loss::Expired`] before the validity ends.
    pub fn max_hold(mut self, d: Duration) -> Self {
        self.max_hold = Some(d);
        self
    }

    /// No limit on extensions or on the time held: the lock is kept as long as the guard
    /// lives and the nodes answer.
    pub fn unlimited(mut self) -> Self {
        self.max_extensions = None;
        self.max_hold = None;
        self
    }

    /// The fraction of the ttl below which an extension is started.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// The limit on the time held by extending, if any.
    pub fn hold_limit(&self) -> Option<Duration> {
        self.max_hold
    }
}

/// How long before the end of a guarded lock's validity the guard reports loss at the
/// latest: a twentieth of the ttl, at least 2 ms and at most one second. That is the time the
/// work has to notice and stop while the lock still holds.
pub fn loss_margin(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(2), Duration::from_secs(1))
}

/// Why a guarded lock was lost.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Loss {
    /// An extension failed: the lock is held at most until its current validity ends, and
    /// maybe not even that (another client may hold it).
    ExtendFailed(Error),
    /// An extension was still unconfirmed when the loss deadline came (the validity's end
    /// less [`loss_margin`]): the lock can no longer be counted on.
    ExtendTooSlow,
    /// The validity is about to run out without an extension (the extension limit or the
    /// hold limit was reached).
    Expired,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::ExtendFailed(e) => write!(f, "extension failed: {e}"),
            Loss::ExtendTooSlow => f.write_str("extension not confirmed before the validity's end"),
            Loss::Expired => f.write_str("validity about to run out (keep-alive limit reached)"),
        }
    }
}

/// A lock kept alive in the background: a task extends it whenever its validity falls below
/// the [`KeepAlive`] threshold.
///
/// # When loss is reported
/// The guard reports loss ([`is_lost`](LockGuard::is_lost) turns true and
/// [`lost`](LockGuard::lost) resolves) as soon as an extension fails, and in any case no later
/// than the lock's validity end less [`loss_margin`] of the ttl, whatever the extension round
/// is doing then: an extension still waiting for slow nodes at that moment counts as lost
/// ([`Loss::ExtendTooSlow`]), and so does a limit reached ([`Loss::Expired`], reported at that
/// same deadline, not at the end). So work that stops when loss is reported stops while the
/// lock still holds, as long as it stops within the margin. Extensions start early enough
/// (the threshold, or the node timeout plus the margin if that is more) for a round that
/// takes the whole node timeout to end before the deadline. Only a process paused past the
/// deadline (SIGSTOP, swap) misses it: nothing in the process runs then.
///
/// When an extension fails, or the validity is about to run out, the guard signals loss: await
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
            fire_release(&self.redlock.inner, &self.lock());
        }
    }
}

/// The keep-alive task: sleeps until the validity falls below the threshold, extends (racing
/// the extension against the loss deadline), and repeats; reports the first failure, the
/// deadline, or the limit, and ends.
async fn keep_alive(
    redlock: AsyncRedlock,
    shared: Arc<Mutex<Lock>>,
    policy: KeepAlive,
    extensions: Arc<AtomicU32>,
    loss: watch::Sender<Option<Loss>>,
) {
    let started = Instant::now();
    let node_timeout = redlock.inner.config.node_timeout;
    let snapshot = || shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let store = |lock: Lock| *shared.lock().unwrap_or_else(|p| p.into_inner()) = lock;
    let at = tokio::time::Instant::from_std;
    loop {
        let lock = snapshot();
        let margin = loss_margin(lock.ttl);
        // The latest moment loss may be reported: the work needs the margin to stop in.
        let deadline = lock
            .valid_until
            .checked_sub(margin)
            .unwrap_or(lock.valid_until);
        let limit_reached = policy
            .max_extensions
            .is_some_and(|max| extensions.load(Ordering::Relaxed) >= max)
            || policy.max_hold.is_some_and(|max| started.elapsed() >= max);
        if limit_reached {
            tokio::time::sleep_until(at(deadline)).await;
            let _ = loss.send(Some(Loss::Expired));
            return;
        }
        // Start early enough for a round of the whole node timeout to end by the deadline.
        let slack = Duration::try_from_secs_f64(lock.ttl.as_secs_f64() * policy.threshold)
            .unwrap_or(Duration::ZERO)
            .max(node_timeout.saturating_add(margin));
        let mut wake = lock.valid_until.checked_sub(slack).unwrap_or(deadline);
        if let Some(max) = policy.max_hold {
            // Past the hold limit, no extension starts: go round to report at the deadline.
            let end = crate::time::later(started, max);
            if end < wake {
                tokio::time::sleep_until(at(end)).await;
                continue;
            }
        }
        wake = wake.min(deadline);
        tokio::time::sleep_until(at(wake)).await;
        let mut attempt = lock.clone();
        let ttl = lock.ttl;
        let outcome = tokio::select! {
            r = redlock.extend(&mut attempt, ttl) => Some(r),
            _ = tokio::time::sleep_until(at(deadline)) => None,
        };
        // Success or not, the attempt's validity is what the lock is worth now: an extension
        // that reached the nodes caps it at the new ttl even when it failed.
        store(attempt);
        match outcome {
            Some(Ok(())) => {
                extensions.fetch_add(1, Ordering::Relaxed);
            }
            Some(Err(e)) => {
                let _ = loss.send(Some(Loss::ExtendFailed(e)));
                return;
            }
            None => {
                let _ = loss.send(Some(Loss::ExtendTooSlow));
                return;
            }
        }
    }
}
