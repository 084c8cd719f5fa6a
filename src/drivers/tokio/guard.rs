//! [`LockGuard`]: a lock kept alive in the background, and the [`KeepAlive`] policy it follows.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{fire_release, AsyncRedlock};
use crate::error::Error;
use crate::lock::Lock;

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
    pub(super) fn start(redlock: AsyncRedlock, lock: Lock, policy: KeepAlive) -> LockGuard {
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
            let end = crate::core::time::later(started, max);
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
