//! [`BlockingGuard`]: the blocking client's lock kept alive in the background, by one helper
//! thread per client (the keeper) that starts with the first guard, sleeps until the next
//! guard needs something, and ends when no guard is left. No runtime.
//!
//! The rules (when to extend, when loss must be reported at the latest, the policy's limits)
//! are the core's (`core::keepalive`), the same as the async [`LockGuard`](crate::LockGuard)'s.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::{Redlock, Shared};
use crate::core::keepalive::{self, KeepAlive, Loss, Step};
use crate::error::Error;
use crate::lock::Lock;

/// One guard's state, shared by the guard and the keeper.
#[derive(Debug)]
struct Kept {
    lock: Mutex<Lock>,
    policy: KeepAlive,
    started: Instant,
    extensions: AtomicU32,
    loss: Mutex<Option<Loss>>,
    /// Signalled when loss is reported.
    lost: Condvar,
    /// The guard was released or dropped: the keeper forgets it.
    stopped: AtomicBool,
    node_timeout: Duration,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Kept {
    fn snapshot(&self) -> Lock {
        locked(&self.lock).clone()
    }

    /// The latest moment loss may be reported for the lock as it is now.
    fn deadline(&self) -> Instant {
        keepalive::loss_deadline(&self.snapshot())
    }

    fn report(&self, loss: Loss) {
        // The lock's mutex is never held while the loss's is taken, nor the other way round.
        let lock = self.snapshot();
        let mut slot = locked(&self.loss);
        if slot.is_none() {
            crate::observe::lost(lock.resource(), &loss);
            *slot = Some(loss);
        }
        self.lost.notify_all();
    }

    /// The loss reported, or, once the deadline has passed with none, the loss the deadline
    /// means: loss is known by the deadline whatever the keeper is doing.
    fn loss_now(&self) -> Option<Loss> {
        // The lock and the clock are read together, under the lock's mutex (where the keeper
        // judges lateness and stores an extension), and the report after them.
        let overdue = {
            let lock = locked(&self.lock);
            (Instant::now() >= keepalive::loss_deadline(&lock)).then(|| lock.clone())
        };
        if let Some(loss) = locked(&self.loss).clone() {
            return Some(loss);
        }
        overdue.map(|lock| self.overdue_for(&lock))
    }

    /// What the deadline passing without a report means: a limit reached (the policy's plan
    /// says so), or an extension that did not come in time.
    fn overdue(&self) -> Loss {
        self.overdue_for(&self.snapshot())
    }

    fn overdue_for(&self, lock: &Lock) -> Loss {
        let done = self.extensions.load(Ordering::Relaxed);
        keepalive::overdue(
            lock,
            &self.policy,
            self.started,
            done,
            self.node_timeout,
            Instant::now(),
        )
    }
}

/// The keeper: the guards of one client, and the thread that serves them.
#[derive(Debug, Default)]
pub(crate) struct Keeper {
    guards: Mutex<Vec<Arc<Kept>>>,
    /// Signalled when a guard is added or stopped.
    changed: Condvar,
    /// Set (under the `guards` lock, or before signalling) when a guard is added or stopped,
    /// so that the thread never sleeps through a change it has not planned for.
    dirty: AtomicBool,
}

impl Keeper {
    /// The thread: plans every guard, does what is due, sleeps until the next thing is.
    /// Holds the client only while it works, so that dropping the last handle ends it.
    fn run(self: Arc<Self>, client: Weak<Shared>) {
        loop {
            let next = {
                let Some(shared) = client.upgrade() else {
                    return;
                };
                let redlock = Redlock { shared };
                match self.serve(&redlock) {
                    Some(next) => next,
                    None => return,
                }
            };
            let guards = locked(&self.guards);
            if guards.is_empty() {
                return;
            }
            if self.dirty.swap(false, Ordering::AcqRel) {
                continue;
            }
            let wait = next.saturating_duration_since(Instant::now());
            let _ = self
                .changed
                .wait_timeout(guards, wait)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Does what is due for every guard; returns when something is next due, or `None` when
    /// no guard is left (the thread ends; the next guard starts another).
    fn serve(&self, redlock: &Redlock) -> Option<Instant> {
        let node_timeout = redlock.config().node_timeout();
        let guards: Vec<Arc<Kept>> = {
            let mut g = locked(&self.guards);
            g.retain(|k| !k.stopped.load(Ordering::Acquire) && locked(&k.loss).is_none());
            if g.is_empty() {
                return None;
            }
            g.clone()
        };
        let mut next: Option<Instant> = None;
        let mut soon = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for kept in guards {
            let lock = kept.snapshot();
            let done = kept.extensions.load(Ordering::Relaxed);
            let plan = keepalive::plan(
                &lock,
                &kept.policy,
                kept.started,
                done,
                node_timeout,
                Instant::now(),
            );
            let now = Instant::now();
            match plan.step {
                Step::Expire if now >= plan.deadline => kept.report(Loss::Expired),
                Step::Expire => soon(plan.deadline),
                Step::Wait(t) => soon(t),
                Step::Extend(t) if now < t => soon(t),
                Step::Extend(_) => {
                    let mut attempt = lock.clone();
                    let result = redlock.extend(&mut attempt, lock.ttl());
                    // The lateness is judged, and the attempt stored, under the lock's mutex,
                    // where a guard reads the lock and the clock together: a guard that saw the
                    // deadline pass can never see the lock extended after it.
                    let late = {
                        let mut held = locked(&kept.lock);
                        let late = result.is_ok() && Instant::now() >= plan.deadline;
                        if !late {
                            // Success or not, the attempt's validity is what the lock is
                            // worth now.
                            *held = attempt;
                        }
                        late
                    };
                    match result {
                        // Confirmed too late to count on: the work was told to stop already.
                        Ok(()) if late => kept.report(Loss::ExtendTooSlow),
                        Ok(()) => {
                            let n = kept.extensions.fetch_add(1, Ordering::Relaxed) + 1;
                            crate::observe::extended(lock.resource(), n);
                            soon(Instant::now());
                        }
                        Err(e) => kept.report(Loss::ExtendFailed(e)),
                    }
                }
            }
        }
        Some(next.unwrap_or_else(Instant::now))
    }
}

/// A lock kept alive in the background by the blocking client: the keeper thread extends it
/// whenever its validity falls below the [`KeepAlive`] threshold.
///
/// # When loss is reported
/// [`is_lost`](BlockingGuard::is_lost) turns true, and [`wait_lost`](BlockingGuard::wait_lost)
/// returns, as soon as an extension fails, and in any case no later than the lock's validity
/// end less [`loss_margin`](crate::loss_margin) of the ttl: an extension not confirmed by then counts as lost
/// ([`Loss::ExtendTooSlow`]), and so does a limit reached ([`Loss::Expired`], at that same
/// deadline). Loss is derived from the clock as well as reported by the keeper, so it is
/// known by the deadline even while the keeper thread is busy with another guard's round.
/// Work that checks `is_lost` (or waits in `wait_lost`) and stops within the margin stops
/// while the lock still holds. Only a process paused past the deadline misses it.
///
/// Dropping the guard stops the extensions and releases the lock (waiting for the nodes, at
/// most a node timeout); [`release`](BlockingGuard::release) does the same and returns the
/// outcome.
///
/// # In a forked child
/// A guard inherited through `fork()` holds nothing in the child: the lock is the parent's
/// (same token, same connections). There it is lost from the start
/// ([`Loss::ExtendFailed`] with [`Error::Forked`]), its validity is zero, `release` answers
/// `Error::Forked`, and dropping it does nothing at all; the parent's guard goes on as before.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use redlock_mux::Redlock;
///
/// # fn step() -> bool { true }
/// # fn main() -> Result<(), redlock_mux::Error> {
/// let redlock = Redlock::builder().nodes(["127.0.0.1:7001"]).build()?;
/// let guard = redlock.lock_guarded("reports:daily", Duration::from_secs(10))?;
/// while step() {
///     if guard.is_lost() {
///         eprintln!("lock lost ({:?}); work abandoned", guard.loss());
///         return Ok(());
///     }
/// }
/// guard.release()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct BlockingGuard {
    redlock: Redlock,
    kept: Arc<Kept>,
    released: bool,
}

impl BlockingGuard {
    /// A snapshot of the lock, with its current validity.
    pub fn lock(&self) -> Lock {
        self.kept.snapshot()
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
        self.kept.extensions.load(Ordering::Relaxed)
    }

    /// Whether the lock has been lost (see the type's docs for when).
    pub fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    /// Why the lock was lost, if it was.
    pub fn loss(&self) -> Option<Loss> {
        if self.redlock.forked() {
            return Some(Loss::ExtendFailed(Error::Forked));
        }
        self.kept.loss_now()
    }

    /// Waits up to `timeout` for the lock to be lost; returns why, or `None` if it still holds.
    pub fn wait_lost(&self, timeout: Duration) -> Option<Loss> {
        if self.redlock.forked() {
            return Some(Loss::ExtendFailed(Error::Forked));
        }
        let until = crate::core::time::later(Instant::now(), timeout);
        let mut slot = locked(&self.kept.loss);
        loop {
            if let Some(loss) = slot.clone() {
                return Some(loss);
            }
            let now = Instant::now();
            let deadline = self.kept.deadline();
            if now >= deadline {
                return Some(self.kept.overdue());
            }
            if now >= until {
                return None;
            }
            let wait = until.min(deadline).saturating_duration_since(now);
            slot = self
                .kept
                .lost
                .wait_timeout(slot, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Stops the extensions and releases the lock, returning the nodes' answer
    /// ([`Error::Forked`] in a forked child, which releases nothing).
    pub fn release(mut self) -> Result<(), Error> {
        self.released = true;
        if self.redlock.forked() {
            return Err(Error::Forked);
        }
        self.stop();
        self.redlock.unlock(&self.lock())
    }

    fn stop(&self) {
        self.kept.stopped.store(true, Ordering::Release);
        if let Some(keeper) = locked(&self.redlock.shared.keeper).as_ref() {
            let _guards = locked(&keeper.guards);
            keeper.dirty.store(true, Ordering::Release);
            keeper.changed.notify_all();
        }
    }
}

impl Drop for BlockingGuard {
    /// Stops the extensions and releases the lock; nothing in a forked child, where the lock
    /// and the keeper are the parent's (and a lock the keeper's thread held at the fork would
    /// never be let go).
    fn drop(&mut self) {
        if !self.released && !self.redlock.forked() {
            self.stop();
            let _ = self.redlock.unlock(&self.lock());
        }
    }
}

impl Redlock {
    /// Acquires `resource` (with retries, as [`lock`](Redlock::lock)) and keeps it alive in the
    /// background with the default [`KeepAlive`] policy until the guard is released or
    /// dropped. See [`BlockingGuard`].
    pub fn lock_guarded(&self, resource: &str, ttl: Duration) -> Result<BlockingGuard, Error> {
        self.lock_guarded_with(resource, ttl, KeepAlive::default())
    }

    /// Acquires `resource` and keeps it alive with the given policy. Refuses, before acquiring
    /// anything, a ttl too short for keep-alive to work (`ConfigError::KeepAlive`).
    pub fn lock_guarded_with(
        &self,
        resource: &str,
        ttl: Duration,
        policy: KeepAlive,
    ) -> Result<BlockingGuard, Error> {
        keepalive::check_ttl(self.config(), ttl)?;
        let lock = self.lock(resource, ttl)?;
        Ok(self.keep_alive(lock, policy))
    }

    /// Keeps a lock taken earlier alive with the given policy (the lock must come from this
    /// client's nodes). In a forked child the guard is lost from the start, as an inherited
    /// one is (see [`BlockingGuard`]), and nothing is started.
    pub fn keep_alive(&self, lock: Lock, policy: KeepAlive) -> BlockingGuard {
        let kept = Arc::new(Kept {
            lock: Mutex::new(lock),
            policy,
            started: Instant::now(),
            extensions: AtomicU32::new(0),
            loss: Mutex::new(None),
            lost: Condvar::new(),
            stopped: AtomicBool::new(false),
            node_timeout: self.config().node_timeout(),
        });
        if self.forked() {
            return BlockingGuard {
                redlock: self.clone(),
                kept,
                released: false,
            };
        }
        let mut slot = locked(&self.shared.keeper);
        let keeper = slot
            .get_or_insert_with(|| Arc::new(Keeper::default()))
            .clone();
        let mut guards = locked(&keeper.guards);
        let start_thread = guards.is_empty();
        guards.push(kept.clone());
        keeper.dirty.store(true, Ordering::Release);
        keeper.changed.notify_all();
        drop(guards);
        drop(slot);
        if start_thread {
            let client = Arc::downgrade(&self.shared);
            let runner = keeper.clone();
            let spawned = std::thread::Builder::new()
                .name("redlock-keeper".into())
                .spawn(move || runner.run(client));
            if spawned.is_err() {
                // No thread: nothing will extend; loss comes at the deadline by the clock.
                kept.report(Loss::ExtendFailed(Error::Aborted));
            }
        }
        BlockingGuard {
            redlock: self.clone(),
            kept,
            released: false,
        }
    }
}
