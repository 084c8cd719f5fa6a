//! [`Redlock`]: the blocking client, on one mio `Poll` and no runtime.
//!
//! An operation is one round of the engine (`core::engine`): the clock is read, the command is
//! encoded once and queued on every node, every node's bytes go out in one pass over
//! non-blocking sockets, and the engine tallies the replies as they arrive, each node under its
//! own deadline, until the round is decided. Connections persist between operations; a node
//! that fails is reconnected after a backoff, so a dead node costs a round nothing but its vote.
//!
//! This module is the client's API and the batching of the threads that share it (whoever
//! finds no round running runs the next one, carrying every queued request); `io.rs` moves the
//! bytes on mio.

mod guard;
mod io;
mod permits;
mod stream;

pub use self::guard::BlockingGuard;

#[cfg(test)]
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use self::io::{Driver, Job};
use crate::core::command::{Command, OwnedCommand};
use crate::core::engine::Wake;
use crate::core::event::Events;
use crate::core::op::{self, Input, Operation, Retry, Step};
use crate::core::round::{Round, Until};
use crate::error::{Error, NodeOutcome};
use crate::lock::{Lock, Name, Names};
use crate::observe::OpSpan;
use crate::stats::Stats;
use crate::{Builder, Config};

/// The most operations one round carries: callers beyond wait for the next round.
const MAX_BATCH: usize = 128;

/// A Redlock client that blocks the calling thread: the lowest-latency way to take a lock
/// from synchronous code.
///
/// `Redlock` is `Send + Sync`. It owns one connection per node and one poller, and threads can
/// share it: an operation that finds another caller's round in progress queues its command,
/// and whichever caller runs the next round takes every queued command along, written in the
/// same pass down the same connections and tallied side by side. Callers sharing a client
/// are thus pipelined, as the async client pipelines its tasks; nothing is held while `lock`
/// sleeps between tries.
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
#[derive(Clone)]
pub struct Redlock {
    shared: Arc<Shared>,
}

/// What the handles of one client share.
pub(crate) struct Shared {
    config: Config,
    /// The process the client was built in: its connections, poller and waker are that
    /// process's, and a forked child must leave them alone (see [`Redlock::forked`]).
    birth: crate::drivers::Birth,
    driver: Mutex<Driver>,
    /// Operations of callers that found the driver busy, for the next holder to run in its
    /// batch, and the results of those run by another caller.
    queue: Mutex<Queue>,
    /// The guards' keep-alive thread, started by the first guard.
    keeper: Mutex<Option<Arc<guard::Keeper>>>,
    /// Makes a thread that waits for pushes in the driver give it up (see `Queue::watching`).
    waker: Arc<mio::Waker>,
    /// Ids for waiters' watches.
    next_watch: std::sync::atomic::AtomicU64,
    /// Unit tests only: panic inside the next batch, as a bug there would.
    #[cfg(test)]
    panic_next_batch: std::sync::atomic::AtomicBool,
}

/// Who runs the driver, and what waits for it.
#[derive(Default)]
struct Queue {
    /// A caller is running a round; the others queue their operations for the next one.
    busy: bool,
    next_ticket: u64,
    waiting: Vec<Request>,
    /// Rounds run for a caller by another, until their caller collects them; `None` when the
    /// round that carried it was abandoned by a panic.
    done: Vec<(u64, Option<(Round, Instant)>)>,
    /// The caller running the driver is a waiter reading pushes (`Driver::idle`), not a
    /// round: a caller that queues an operation wakes it to give the driver up.
    watching: bool,
    /// Watches to register, and to take back, with the engine by the next caller that runs it.
    watch: Vec<(u64, Box<[u8]>)>,
    unwatch: Vec<u64>,
    /// Watches that fired, until their waiter collects them.
    woken: Vec<(u64, Wake)>,
    /// Waiters parked while another caller runs the driver: (watch, thread).
    sleepers: Vec<(u64, std::thread::Thread)>,
    /// Callers of [`Redlock::stats`] waiting for the driver: a waiter does not start reading
    /// pushes in it meanwhile (it would hold the driver until its timer).
    readers: usize,
}

impl Queue {
    /// The watches registered and taken back since the engine last ran, taken out (for the
    /// caller that takes the driver to hand them over after letting the queue go).
    fn take_watches(&mut self) -> Queue {
        Queue {
            watch: std::mem::take(&mut self.watch),
            unwatch: std::mem::take(&mut self.unwatch),
            ..Queue::default()
        }
    }

    /// Hands the engine the watches registered and taken back since it last ran.
    fn sync_watches(&mut self, driver: &mut Driver) {
        for (id, key) in self.watch.drain(..) {
            driver.engine.watch(id, key);
        }
        for id in self.unwatch.drain(..) {
            driver.engine.unwatch(id);
        }
    }

    /// Hands watch `id`'s firing to its waiter, waking it if it is parked; dropped when the
    /// waiter has already given up (its `unwatch` has not reached the engine yet, so the
    /// engine could still fire it): nobody would ever collect it.
    fn publish(&mut self, id: u64, why: Wake) {
        if self.unwatch.contains(&id) {
            return;
        }
        self.woken.push((id, why));
        if let Some((_, t)) = self.sleepers.iter().find(|(w, _)| *w == id) {
            t.unpark();
        }
    }
}

/// Ends a caller's turn at the driver when dropped: `busy` off, and the caller of the first
/// operation still waiting woken to run the next round.
struct EndTurn<'a>(&'a Redlock);

impl Drop for EndTurn<'_> {
    fn drop(&mut self) {
        let mut q = self.0.queue();
        q.busy = false;
        q.watching = false;
        // Operations still waiting: the first one's caller runs the next round. Else a waiter
        // parked meanwhile takes the driver to read pushes again.
        if let Some(next) = q.waiting.first() {
            next.caller.unpark();
        } else if let Some((_, sleeper)) = q.sleepers.first() {
            sleeper.unpark();
        }
    }
}

/// Answers the callers whose requests a batch took, when the batch unwinds before their
/// results are in: each gets [`Error::Aborted`] and is woken, rather than left parked for a
/// result that will never come.
struct Orphans<'a> {
    redlock: &'a Redlock,
    requests: &'a [Request],
    answered: bool,
}

impl Drop for Orphans<'_> {
    fn drop(&mut self) {
        if self.answered || self.requests.is_empty() {
            return;
        }
        let mut q = self.redlock.queue();
        q.done
            .extend(self.requests.iter().map(|r| (r.ticket, None)));
        drop(q);
        for r in self.requests {
            r.caller.unpark();
        }
    }
}

/// A queued operation, owning what its command borrows.
struct Request {
    ticket: u64,
    /// Its caller, parked until the result is in or its turn to run a round comes.
    caller: std::thread::Thread,
    cmd: OwnedCommand,
    until: Until,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Builder<Redlock> {
    /// Validates the options and builds the blocking client. No connection is opened yet:
    /// each node is connected on first use, without blocking.
    pub fn build(self) -> Result<Redlock, Error> {
        let (config, tls) = self.parts()?;
        Redlock::with_parts(config, tls)
    }
}

impl Redlock {
    /// A builder with the default options, whose [`build`](Builder::build) makes this client.
    pub fn builder() -> Builder<Redlock> {
        Builder::default()
    }

    /// Builds a client from a validated configuration. Its `rediss://` nodes, if any, get
    /// the default TLS settings (the system's root certificates); other settings need the
    /// [`Builder`].
    pub fn with_config(config: Config) -> Result<Redlock, Error> {
        let tls = crate::drivers::tls_setup(&config, &Default::default())?;
        Redlock::with_parts(config, tls)
    }

    fn with_parts(config: Config, tls: crate::drivers::TlsSetup) -> Result<Redlock, Error> {
        let driver = Driver::new(&config, tls).map_err(|e| Error::NoQuorum {
            nodes: crate::error::NodeReports(
                config
                    .nodes()
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
        let waker = driver.waker();
        Ok(Redlock {
            shared: Arc::new(Shared {
                config,
                birth: crate::drivers::Birth::here(),
                driver: Mutex::new(driver),
                queue: Mutex::new(Queue::default()),
                keeper: Mutex::new(None),
                waker,
                next_watch: std::sync::atomic::AtomicU64::new(1),
                #[cfg(test)]
                panic_next_batch: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Whether this is a forked child of the process the client was built in.
    ///
    /// Parent and child share the client's sockets (and its mio poller's epoll set): were the
    /// child to write to them, either could read the other's replies, matched to its own
    /// commands in order, and take another's `OK` for a grant. So in a child the client reads
    /// and writes nothing, takes none of its locks (another thread of the parent may have
    /// held one at the fork, and no longer exists to let it go), and never deregisters or
    /// shuts down what it inherited: its operations end with [`Error::Forked`] before they
    /// start, and dropping it only closes the child's copies of the descriptors, which leaves
    /// the parent's connections and registrations as they were. One `getpid(2)` per round (see
    /// `Birth` for a creator that is its pid namespace's init).
    pub(crate) fn forked(&self) -> bool {
        self.shared.birth.forked()
    }

    /// A snapshot of the per-node counters (votes by outcome, timeouts, reconnects,
    /// `NOSCRIPT` fallbacks, buffered bytes) and the largest batch. Waits for a round in
    /// progress to end.
    ///
    /// In a forked child (see [`Error::Forked`]), empty: the counters are the parent's.
    pub fn stats(&self) -> Stats {
        if self.forked() {
            return Stats::default();
        }
        {
            // Said before the driver is taken, under the lock the waiters decide under: a
            // waiter reading pushes now is woken, and none starts until this call is done.
            let mut q = self.queue();
            q.readers += 1;
            if q.watching {
                let _ = self.shared.waker.wake();
            }
        }
        let stats = self.driver().engine.stats();
        let mut q = self.queue();
        q.readers -= 1;
        if q.readers == 0 && !q.busy {
            // A waiter that parked rather than start reading: its turn.
            if let Some((_, sleeper)) = q.sleepers.first() {
                sleeper.unpark();
            }
        }
        stats
    }

    fn driver(&self) -> MutexGuard<'_, Driver> {
        match self.shared.driver.lock() {
            Ok(driver) => driver,
            Err(poisoned) => {
                // A round panicked half-way: what its connections owe no longer matches what
                // any round waits for. Start every connection afresh.
                let mut driver = poisoned.into_inner();
                driver.reset(Instant::now());
                self.shared.driver.clear_poison();
                driver
            }
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // The queue is only pushed to and taken from whole: poison leaves it consistent.
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one round of `cmd`: at once if no round is running, else queued for the caller
    /// that runs the next one (which may be this caller). Returns the tally and the instant
    /// read before the round's first write, or [`Error::Aborted`] if the round that carried
    /// it panicked in another caller's thread.
    ///
    /// In a forked child, [`Error::Forked`] before anything is locked or sent: every
    /// operation's rounds come through here.
    fn submit(&self, cmd: Command<'_>, until: Until) -> Result<(Round, Instant), Error> {
        if self.forked() {
            return Err(Error::Forked);
        }
        let mut q = self.queue();
        if !q.busy && q.waiting.is_empty() {
            // Nobody runs a round and nobody waits: run this one, alone unless others queue
            // up before it starts.
            q.busy = true;
            drop(q);
            let own = self.run_batch(Some((cmd, until)));
            return Ok(own.unwrap_or_else(|| self.unanswered()));
        }
        if q.watching {
            // A waiter reads pushes in the driver: it gives the driver up for this round.
            let _ = self.shared.waker.wake();
        }
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.waiting.push(Request {
            ticket,
            caller: std::thread::current(),
            cmd: OwnedCommand::new(&cmd),
            until,
        });
        loop {
            if let Some(pos) = q.done.iter().position(|(t, _)| *t == ticket) {
                let (_, result) = q.done.swap_remove(pos);
                return result.ok_or(Error::Aborted);
            }
            if !q.busy {
                // The round before has ended and ours is still waiting: run it, with every
                // other waiting request.
                q.busy = true;
                drop(q);
                self.run_batch(None);
                q = self.queue();
                continue;
            }
            // Unparked when the result is in, or when the round ends with ours still
            // waiting (a wake-up that came before the park makes it return at once).
            drop(q);
            std::thread::park();
            q = self.queue();
        }
    }

    /// A job's decided round. The engine completes every operation exactly once, so it is
    /// always there; were it not, the round counts as unanswered rather than panic.
    fn round_of(&self, job: Job<'_>) -> Round {
        job.round.unwrap_or_else(|| self.unanswered().0)
    }

    /// A round in which no node was asked (for a result that cannot be missing).
    fn unanswered(&self) -> (Round, Instant) {
        let cfg = &self.shared.config;
        let mut round = Round::new(cfg.nodes().len(), cfg.quorum(), Until::AllIn);
        round.close(|_| NodeOutcome::Undecided);
        (round, Instant::now())
    }

    /// Runs `own` (the caller's operation, unless it is queued) with the queued requests (up
    /// to [`MAX_BATCH`] in all) in one round, leaves their results in `done` and wakes their
    /// callers, ends the turn, and returns the round of `own`. Called by the caller that set
    /// `busy`.
    fn run_batch(&self, own: Option<(Command<'_>, Until)>) -> Option<(Round, Instant)> {
        // Ends the turn however this returns, so that a waiter is never left asleep.
        let turn = EndTurn(self);
        // Only the caller that set `busy` gets here, so this lock is never contended.
        let mut driver = self.driver();
        let requests: Vec<Request> = {
            let mut q = self.queue();
            // Watches are registered before the rounds go out (a waiter's `PTTL` among them).
            q.sync_watches(&mut driver);
            let room = MAX_BATCH - usize::from(own.is_some());
            if q.waiting.len() <= room {
                std::mem::take(&mut q.waiting)
            } else {
                // The rest wait for the next round, which one of their callers runs.
                q.waiting.drain(..room).collect()
            }
        };
        // Whatever unwinds from here on, the callers of these requests are answered.
        let mut orphans = Orphans {
            redlock: self,
            requests: &requests,
            answered: false,
        };
        #[cfg(test)]
        if self.shared.panic_next_batch.swap(false, Ordering::SeqCst) {
            panic!("injected: a bug inside a batch");
        }
        let (mine, t1, rounds) = if let (Some((cmd, until)), true) = (own, requests.is_empty()) {
            // Alone: a batch of one, on the stack.
            let mut jobs = [Job::new(cmd, until)];
            let t1 = driver.run(&mut jobs);
            let [job] = jobs;
            (Some(self.round_of(job)), t1, Vec::new())
        } else {
            let mut jobs: Vec<Job<'_>> = own
                .iter()
                .map(|&(cmd, until)| Job::new(cmd, until))
                .chain(requests.iter().map(|r| Job::new(r.cmd.borrow(), r.until)))
                .collect();
            let t1 = driver.run(&mut jobs);
            let mut rounds: Vec<Round> = jobs.into_iter().map(|j| self.round_of(j)).collect();
            let mine = if own.is_some() {
                Some(rounds.remove(0))
            } else {
                None
            };
            (mine, t1, rounds)
        };
        self.publish_woken(&mut driver);
        drop(driver);
        if !requests.is_empty() {
            let mut q = self.queue();
            q.done.extend(
                requests
                    .iter()
                    .zip(rounds)
                    .map(|(r, round)| (r.ticket, Some((round, t1)))),
            );
            orphans.answered = true;
            // Who goes first: the next round, or this batch's callers? Woken first, the
            // callers queue their next operations while the turn is still held, and the next
            // round carries them: larger batches, fewer reads for the masters. But when at
            // least half as many requests as this batch carried already wait, the next round
            // starts at once, and the masters work on it while these callers are woken.
            // (Measured with benches/table: at 256 threads, where batches are capped at
            // MAX_BATCH and many wait, 0.67x -> 0.75x the reference; at 64 threads few wait
            // and the callers go first, as before. Starting first always halved the batch at
            // 64 threads and lost 0.06x there.)
            let next_first = q.waiting.len() * 2 >= requests.len();
            drop(q);
            if next_first {
                drop(turn);
            }
            for r in &requests {
                r.caller.unpark();
            }
        }
        mine.map(|round| (round, t1))
    }

    /// Services what the connections still owe while no operation runs, for up to
    /// `max_wait`; returns whether nothing is left owed.
    ///
    /// A fail-fast release or extension returns as soon as a quorum has answered; the other
    /// nodes' replies are read later. If one of them is `NOSCRIPT` (the node restarted, or
    /// its script cache was flushed), the command must be sent again as `EVAL` for the key on
    /// that node to be released or extended. This client has no thread of its own, so it does
    /// that when it next runs: at the start of any operation, here, or when it is dropped
    /// (which waits up to twice the node timeout for it). Until then such a node keeps the key
    /// until its ttl runs out (released) or at its old ttl (extended): never longer than the
    /// lock's keys could have lived anyway, so this costs other clients time, never safety.
    /// A program that leaves a client idle for long after releasing can call this to give
    /// the keys back at once. The same holds for a `rediss://` node whose TLS handshake a
    /// fail-fast round left in progress: what was written to it waits inside the session
    /// until the client drives the socket again (here, at its next operation, or on drop).
    ///
    /// Returns at once if another caller is running a round (which services the same), and
    /// in a forked child (the connections are the parent's), where it returns `false`.
    pub fn poll_idle(&self, max_wait: Duration) -> bool {
        if self.forked() {
            return false;
        }
        let mut pending = {
            let mut q = self.queue();
            if q.busy || !q.waiting.is_empty() {
                return false;
            }
            q.busy = true;
            // The watches registered and taken back since the last round, applied before
            // anything is read.
            q.take_watches()
        };
        let _turn = EndTurn(self);
        let mut driver = self.driver();
        pending.sync_watches(&mut driver);
        driver.service(crate::core::time::later(Instant::now(), max_wait))
    }

    /// Acquires `resource` for `ttl`, retrying up to the configured number of tries with a
    /// random delay between them.
    ///
    /// Errors: the last round's error ([`Error::Conflict`], [`Error::NoQuorum`],
    /// [`Error::ValiditySpent`]), or [`Error::Config`] for a ttl outside
    /// [`Config::min_ttl`] ..= [`MAX_TTL`](crate::MAX_TTL).
    pub fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let names: Names = smallvec::smallvec![Name::new(resource)];
        self.acquire(names, ttl, Retry::new(&self.shared.config))
    }

    /// Acquires `resource` for `ttl`, trying for up to `max_wait`: as many tries as fit (the
    /// configured number of tries does not apply), the last at the deadline at the latest.
    /// With wake-ups on (see [`Builder::wakeups`]) it waits for the holder's release rather
    /// than polling. A `max_wait` of zero is one try.
    ///
    /// Errors: the last try's error, as [`lock`](Redlock::lock) (typically
    /// [`Error::Conflict`] when the resource stayed held).
    pub fn lock_within(
        &self,
        resource: &str,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        let names: Names = smallvec::smallvec![Name::new(resource)];
        let retry = Retry::within(&self.shared.config, max_wait, Instant::now());
        self.acquire(names, ttl, retry)
    }

    /// One round of acquisition, no retries. On failure the lock is released on every node
    /// (those that seemed to refuse or time out included: a reply may have been lost after
    /// the key was set) before this returns.
    ///
    /// The ttl is taken in whole milliseconds (rounded down).
    pub fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let names: Names = smallvec::smallvec![Name::new(resource)];
        self.acquire(names, ttl, Retry::once())
    }

    /// Acquires every resource of `resources` for `ttl` as one lock, with retries as
    /// [`lock`](Redlock::lock): each node sets all of their keys with one token, or none of
    /// them if any is held. The lock is `unlock`ed and `extend`ed as any lock, on all of its
    /// resources at once.
    ///
    /// Errors as `lock`; [`Error::Conflict`] names a resource a node found held. An empty
    /// list, one over [`MAX_RESOURCES`](crate::MAX_RESOURCES), or a resource given twice is
    /// [`Error::Config`].
    pub fn lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        let names = crate::lock::names(resources)?;
        self.acquire(names, ttl, Retry::new(&self.shared.config))
    }

    /// [`lock_many`](Redlock::lock_many), trying for up to `max_wait` as
    /// [`lock_within`](Redlock::lock_within) does.
    pub fn lock_many_within(
        &self,
        resources: &[&str],
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        let names = crate::lock::names(resources)?;
        let retry = Retry::within(&self.shared.config, max_wait, Instant::now());
        self.acquire(names, ttl, retry)
    }

    /// One round of [`lock_many`](Redlock::lock_many), no retries.
    pub fn try_lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.acquire(crate::lock::names(resources)?, ttl, Retry::once())
    }

    fn acquire(&self, names: Names, ttl: Duration, retry: Retry) -> Result<Lock, Error> {
        let resource = names.first().map_or("", Name::as_str);
        let span = OpSpan::new("acquire", resource);
        let result = self.run(op::Acquire::new(names, ttl, retry)).map(Lock);
        span.finish_acquire(&result);
        result
    }

    /// Runs `op` (any operation of the core) to its end: the one loop that does what its
    /// steps say, in the order they say it. A waiter's watch is registered with the engine
    /// before its read goes out, and taken back when its wait ends (or the operation does).
    fn run<O: Operation>(&self, mut op: O) -> Result<O::Output, Error> {
        let cfg = &self.shared.config;
        let mut events = Events::new();
        let mut input = Input::Start;
        let mut watch = None;
        loop {
            input = match crate::drivers::next_step(&mut op, input, cfg, &mut events) {
                Step::Round(cmd, until) => {
                    // (The engine tells this operation's watch from other waiters'.)
                    Input::Round(self.submit(cmd.watched_by(watch), until))
                }
                Step::Sleep(d) | Step::Jitter(d) => {
                    std::thread::sleep(d);
                    Input::Slept
                }
                Step::Watch(key) => {
                    watch = Some(self.register_watch(key));
                    Input::Watching
                }
                Step::Await(deadline) => {
                    let id = watch.take();
                    let woken = match (id, deadline) {
                        (Some(id), Some(deadline)) => self.wait_woken(id, deadline),
                        _ => None,
                    };
                    self.unwatch(id);
                    Input::Woken(woken)
                }
                Step::Done => break,
            };
        }
        self.unwatch(watch);
        op.finish()
    }

    /// Registers a watch of `key` with the engine (by the next caller that runs it, before
    /// any round goes out); returns its id.
    fn register_watch(&self, key: &[u8]) -> u64 {
        let id = self
            .shared
            .next_watch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.queue().watch.push((id, key.into()));
        id
    }

    /// Takes watch `id` back, and any firing of it not collected.
    fn unwatch(&self, id: Option<u64>) {
        if let Some(id) = id {
            let mut q = self.queue();
            q.unwatch.push(id);
            q.woken.retain(|(w, _)| *w != id);
        }
    }

    /// Waits until watch `id` fires (its cause) or `deadline` passes (`None`). While no round
    /// runs, the waiter reads the pushes itself in the driver
    /// ([`Driver::idle`](io::Driver::idle)), and gives the driver up to any caller with a
    /// round to run; the others park until woken.
    fn wait_woken(&self, id: u64, deadline: Instant) -> Option<Wake> {
        loop {
            let mut q = self.queue();
            if let Some(k) = q.woken.iter().position(|(w, _)| *w == id) {
                return Some(q.woken.swap_remove(k).1);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if !q.busy && q.waiting.is_empty() && q.readers == 0 {
                // Nobody runs the driver: read the pushes in it until something happens.
                q.busy = true;
                q.watching = true;
                let mut pending = q.take_watches();
                drop(q);
                // (Declared first, dropped last: the turn ends after the driver is let go.)
                let _turn = EndTurn(self);
                let mut driver = self.driver();
                pending.sync_watches(&mut driver);
                driver.idle(deadline);
                self.publish_woken(&mut driver);
                continue;
            }
            // Another caller runs the driver (and reads the pushes): park until it hands the
            // driver on, or tells this waiter its watch fired.
            q.sleepers.push((id, std::thread::current()));
            drop(q);
            std::thread::park_timeout(deadline.saturating_duration_since(now));
            self.queue().sleepers.retain(|(w, _)| *w != id);
        }
    }

    /// Hands the watches that fired to their waiters, waking those that are parked.
    fn publish_woken(&self, driver: &mut Driver) {
        if !driver.engine.has_woken() {
            return;
        }
        let mut q = self.queue();
        while let Some((id, why)) = driver.engine.poll_woken() {
            q.publish(id, why);
        }
    }

    /// Reads who holds `resource` on every node, and for how long (`GET` and `PTTL`, each a
    /// round that waits for every node). Nothing is changed. See [`Inspection`](crate::Inspection).
    pub fn inspect(&self, resource: &str) -> Result<crate::Inspection, Error> {
        let span = OpSpan::new("inspect", resource);
        let result = self.run(op::Inspect::new(resource));
        span.finish(&result, None, None);
        result
    }

    /// [`inspect`](Redlock::inspect), and each node's line of fair waiters for `resource`
    /// ([`Builder::fair`](crate::Builder::fair)): `ZRANGE` and `PTTL` of the line's key, two
    /// more rounds that wait for every node ([`NodeState::line`](crate::NodeState::line),
    /// [`Inspection::agreed_line`](crate::Inspection::agreed_line)). Any client can read a
    /// line, fair or not. Nothing is changed.
    pub fn inspect_line(&self, resource: &str) -> Result<crate::Inspection, Error> {
        let span = OpSpan::new("inspect", resource);
        let result = self.run(op::Inspect::with_line(resource));
        span.finish(&result, None, None);
        result
    }

    /// Releases the lock on every node, with the compare-and-delete script.
    ///
    /// `Ok` once a quorum deleted the key. Otherwise [`Error::NotHeld`] if another token holds
    /// it somewhere, [`Error::Expired`] if the keys were already gone, [`Error::NoQuorum`] if
    /// too few nodes answered.
    pub fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        let span = OpSpan::new("release", lock.resource());
        let result = self.run(op::Release::new(&lock.0));
        span.finish(&result, Some(lock.token()), lock.fencing_token());
        result
    }

    /// Extends the lock to `ttl` from now, with the compare-and-pexpire script, and updates its
    /// validity the way acquisition computes it.
    ///
    /// A lock whose validity has run out is not extended ([`Error::Expired`], nothing sent):
    /// the lock was not held in between, so extending it would hide a gap.
    ///
    /// Whatever the outcome, once the round has started the lock's validity is at most what
    /// the new ttl gives from the round's start (less the drift allowance): nodes that ran the
    /// `PEXPIRE` before the round failed hold the key only that long. So an extension to a
    /// shorter ttl shortens the lock's validity even when it fails, and the lock never claims
    /// more time than its keys have.
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        let span = OpSpan::new("extend", lock.resource());
        let result = self.run(op::Extend::new(&mut lock.0, ttl));
        span.finish(&result, Some(lock.token()), lock.fencing_token());
        result
    }
}

impl Drop for Shared {
    /// Gives late `NOSCRIPT`s their `EVAL` form before the connections close (see
    /// [`poll_idle`](Redlock::poll_idle)), when the last handle of the client goes: waits up
    /// to twice the node timeout, and only while some node still owes the reply to a release
    /// or extension. Not in a forked child: the connections are the parent's.
    fn drop(&mut self) {
        if self.birth.forked() {
            return;
        }
        let bound = self.config.node_timeout().saturating_mul(2);
        let driver = match self.driver.get_mut() {
            Ok(d) => d,
            // A round panicked: its connections are out of step; nothing is serviced.
            Err(_) => return,
        };
        driver.service(crate::core::time::later(Instant::now(), bound));
    }
}

#[cfg(test)]
mod tests;
