//! [`LockGuard`]: a lock kept alive in the background by a task, following the [`KeepAlive`]
//! policy (whose rules are the core's, shared with the blocking client's guard).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{fire_release, AsyncRedlock};
use crate::core::keepalive::{self, KeepAlive, Loss, Step};
use crate::error::Error;
use crate::lock::Lock;

/// A lock kept alive in the background: a task extends it whenever its validity falls below
/// the [`KeepAlive`] threshold.
///
/// # When loss is reported
/// The guard reports loss ([`is_lost`](LockGuard::is_lost) turns true and
/// [`lost`](LockGuard::lost) resolves) as soon as an extension fails, and in any case no later
/// than the lock's validity end less [`loss_margin`](crate::loss_margin) of the ttl, whatever the extension round
/// is doing then: an extension still waiting for slow nodes at that moment counts as lost
/// ([`Loss::ExtendTooSlow`]), and so does a limit reached ([`Loss::Expired`], reported at that
/// same deadline, not at the end). So work that stops when loss is reported stops while the
/// lock still holds, as long as it stops within the margin. Extensions start early enough
/// (the threshold, or the node timeout plus the margin if that is more) for a round that
/// takes the whole node timeout to end before the deadline. Loss is derived from the clock as
/// well as reported by the task, so [`is_lost`](LockGuard::is_lost),
/// [`loss`](LockGuard::loss) and [`lost`](LockGuard::lost) see it by the deadline even when
/// the task cannot run (a current-thread runtime whose thread is busy with synchronous work,
/// say); [`loss_watch`](LockGuard::loss_watch) is the task's report alone, and comes only
/// when the task runs. Only a process paused past the deadline (SIGSTOP, swap) misses it:
/// nothing in the process runs then.
///
/// When an extension fails, or the validity is about to run out, the guard signals loss: await
/// [`lost`](LockGuard::lost) in a `select!` beside the work, or watch
/// [`loss_watch`](LockGuard::loss_watch), and stop the work when it fires. Dropping the guard
/// stops the extensions and releases the lock (fire and forget); [`release`](LockGuard::release)
/// does it and waits for the answer.
///
/// # In a forked child
/// A guard inherited through `fork()` holds nothing in the child: the lock is the parent's
/// (same token, same connections). There it is lost from the start
/// ([`Loss::ExtendFailed`] with [`Error::Forked`]), its validity is zero, `release` answers
/// `Error::Forked`, and dropping it neither releases the lock nor touches the inherited
/// runtime; the parent's guard goes on as before.
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
    /// What the loss deadline means when it passes unreported (`keepalive::overdue`).
    policy: KeepAlive,
    started: Instant,
    node_timeout: Duration,
    /// The keep-alive task (none in a forked child).
    task: Option<tokio::task::JoinHandle<()>>,
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
        let started = Instant::now();
        // In a forked child nothing is started on the inherited runtime: the guard reports
        // the loss at once.
        let task = (!redlock.forked()).then(|| {
            redlock.inner.runtime.spawn(keep_alive(
                redlock.clone(),
                shared.clone(),
                policy,
                started,
                extensions.clone(),
                tx,
            ))
        });
        LockGuard {
            node_timeout: redlock.inner.config.node_timeout(),
            redlock,
            lock: shared,
            loss: rx,
            extensions,
            policy,
            started,
            task,
            released: false,
        }
    }

    /// A snapshot of the lock, with its current validity.
    pub fn lock(&self) -> Lock {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The validity left, from the monotonic clock (zero in a forked child).
    pub fn validity(&self) -> Duration {
        if self.redlock.forked() {
            return Duration::ZERO;
        }
        self.lock().validity()
    }

    /// How many extensions have succeeded.
    pub fn extensions(&self) -> u32 {
        self.extensions.load(Ordering::Relaxed)
    }

    /// Whether the lock has been lost (see the type's docs for when).
    pub fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    /// Why the lock was lost, if it was: the task's report, or, once the loss deadline has
    /// passed without one, what the deadline means.
    pub fn loss(&self) -> Option<Loss> {
        if self.redlock.forked() {
            return Some(Loss::ExtendFailed(Error::Forked));
        }
        // The lock and the clock are read together, under the lock's mutex, and the report
        // after them: the task reports a late extension before it stores the extended lock,
        // under the same mutex, so a loss once seen stays seen.
        let now = Instant::now();
        let overdue = {
            let lock = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            (now >= keepalive::loss_deadline(&lock)).then(|| lock.clone())
        };
        if let Some(loss) = self.loss.borrow().clone() {
            return Some(loss);
        }
        overdue.map(|lock| {
            let done = self.extensions();
            keepalive::overdue(
                &lock,
                &self.policy,
                self.started,
                done,
                self.node_timeout,
                now,
            )
        })
    }

    /// Resolves when the lock is lost, with why: when the task reports it, or at the loss
    /// deadline by the clock, whichever comes first. Cancellation-safe: use it in `select!`.
    pub async fn lost(&self) -> Loss {
        let mut rx = self.loss.clone();
        loop {
            if let Some(loss) = self.loss() {
                return loss;
            }
            let deadline = keepalive::loss_deadline(&self.lock());
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The keep-alive task is gone without a word: it can no longer
                        // extend.
                        return self.loss().unwrap_or(Loss::Expired);
                    }
                }
                // (The lock may have been extended meanwhile: the loop reads it again.)
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {}
            }
        }
    }

    /// A watch channel that turns `Some` when the keep-alive task reports the loss (it does
    /// not see the loss derived from the clock while the task cannot run; see the type's
    /// docs).
    pub fn loss_watch(&self) -> watch::Receiver<Option<Loss>> {
        self.loss.clone()
    }

    /// Stops the extensions and releases the lock, waiting for the nodes' answer
    /// ([`Error::Forked`] in a forked child, which releases nothing).
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        if self.redlock.forked() {
            return Err(Error::Forked);
        }
        if let Some(task) = &self.task {
            task.abort();
        }
        let lock = self.lock();
        self.redlock.unlock(&lock).await
    }
}

impl Drop for LockGuard {
    /// Stops the extensions and releases the lock; nothing in a forked child, where both are
    /// the parent's (aborting the task would schedule it on the inherited runtime).
    fn drop(&mut self) {
        if self.redlock.forked() {
            return;
        }
        if let Some(task) = &self.task {
            task.abort();
        }
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
    started: Instant,
    extensions: Arc<AtomicU32>,
    loss: watch::Sender<Option<Loss>>,
) {
    let node_timeout = redlock.inner.config.node_timeout();
    let snapshot = || shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let at = tokio::time::Instant::from_std;
    loop {
        let lock = snapshot();
        let done = extensions.load(Ordering::Relaxed);
        let plan = keepalive::plan(&lock, &policy, started, done, node_timeout, Instant::now());
        let deadline = plan.deadline;
        match plan.step {
            Step::Expire => {
                tokio::time::sleep_until(at(deadline)).await;
                crate::observe::lost(lock.resource(), &Loss::Expired);
                let _ = loss.send(Some(Loss::Expired));
                return;
            }
            Step::Wait(until) => {
                tokio::time::sleep_until(at(until)).await;
                continue;
            }
            Step::Extend(when) => tokio::time::sleep_until(at(when)).await,
        }
        let mut attempt = lock.clone();
        let ttl = lock.ttl();
        let outcome = tokio::select! {
            r = redlock.extend(&mut attempt, ttl) => Some(r),
            _ = tokio::time::sleep_until(at(deadline)) => None,
        };
        // Success or not, the attempt's validity is what the lock is worth now: an extension
        // that reached the nodes caps it at the new ttl even when it failed. It is stored
        // under the mutex the guard reads the lock and the clock under, any loss reported
        // first; an extension confirmed at or past the deadline counts as lost (the guard's
        // clock has said so already), so a loss once seen stays seen.
        let lost = {
            let mut slot = shared.lock().unwrap_or_else(|p| p.into_inner());
            let lost = match outcome {
                Some(Ok(())) if Instant::now() >= deadline => Some(Loss::ExtendTooSlow),
                Some(Ok(())) => None,
                Some(Err(e)) => Some(Loss::ExtendFailed(e)),
                None => Some(Loss::ExtendTooSlow),
            };
            if let Some(lost) = &lost {
                let _ = loss.send(Some(lost.clone()));
            }
            *slot = attempt;
            lost
        };
        match lost {
            None => {
                let n = extensions.fetch_add(1, Ordering::Relaxed) + 1;
                crate::observe::extended(lock.resource(), n);
            }
            Some(lost) => {
                crate::observe::lost(lock.resource(), &lost);
                return;
            }
        }
    }
}
