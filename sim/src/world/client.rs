//! A simulated client: a real `redlock_core::engine::Engine` with its own seeded randomness, and
//! tasks that run the core's operations through the `Operation` trait, as a driver does
//! (`redlock-mux`'s `drivers::next_step` and the blocking driver's `run`): each step's round is
//! submitted to the engine at the time read for it, sleeps and waits are timers on the
//! simulated clock, a waiter's watch is registered before its read and taken back when its
//! wait ends. The simulator decides what the tasks do (which operation, when); the core decides
//! everything an operation does.

use std::time::{Duration, Instant};

use redlock_core::command::Expect;
use redlock_core::engine::{Completed, Engine, IoEvent, Wake, MAX_OWED};
use redlock_core::event::Events;
use redlock_core::lock::Names;
use redlock_core::op::{self, Cx, Input, Operation, Retry, Step};
use redlock_core::random::Seeded;
use redlock_core::{Config, Error, Lock, NodeOutcome};

use super::{Sim, NEVER};
use crate::check::{Holder, OpKind, OpRecord, Window, Write};
use crate::rng::Rng;

mod guard;

/// What a task does next when it follows a plan (a scenario) instead of drawing at random.
#[derive(Debug, Clone)]
pub enum Action {
    /// Nothing for this long.
    Wait(Duration),
    /// `lock` of resource `.0` for `.1`.
    Lock(u32, Duration),
    /// Write to the fenced store with the lock held, after a pause of this long.
    Use(Duration),
    /// `unlock`.
    Unlock,
}

/// How a client is set up (drawn by the world).
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub fenced: bool,
    pub ttl_min: u64,
    pub ttl_max: u64,
    pub tasks: u32,
    pub ops: u32,
    /// Whether the liveness check applies to its acquisitions.
    pub live: bool,
    /// Whether the liveness check after expiry applies to its acquisitions.
    pub expiry_live: bool,
    /// Plans for its tasks (a scenario), if any.
    pub plans: Vec<Vec<Action>>,
    /// How it sends scripts (its configuration's, which the core does not show).
    pub scripts: redlock_core::Scripts,
    /// How fast its clock runs, in parts per million (within the drift factor, with the
    /// masters', unless a negative control says otherwise).
    pub ppm: i64,
}

/// An operation in progress.
enum AnyOp {
    Acquire(Box<op::Acquire>),
    Extend(op::Extend<Lock>),
    Release(op::Release<Lock>),
    Inspect(op::Inspect),
}

/// A waiter's policy, as its caller chose it: what the patience check holds it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiter {
    /// `lock`: this many tries, unless one wins.
    Tries(u32),
    /// `lock_within`: tries until this time (on the run's clock), unless one wins.
    Until(u64),
}

/// What a task waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The engine's round of this sequence number.
    Round(u32),
    /// Its timer (a sleep).
    Timer,
    /// Watch `.0` to fire, or its timer.
    Await(u64),
}

struct Run {
    op: AnyOp,
    wait: Wait,
    /// Its record in the history.
    rec: usize,
    watch: Option<u64>,
    /// The time read before the round in flight.
    t1: u64,
    /// Acquisitions: whether the liveness check applies to its first round.
    live: bool,
    first_round: bool,
    /// The resources it touches (for the liveness check's bookkeeping).
    res: Vec<u32>,
    /// When its caller goes away, if it will.
    abandon_at: u64,
    /// An extension's lock: its id, current window and resources.
    meta: Option<(u64, Vec<usize>, Vec<u32>)>,
    /// A guarded acquisition's guard, started once it succeeds.
    guarded: Option<guard::Spec>,
    /// Whether it may set keys (an acquisition or an extension), and with which ttl.
    sets_keys: bool,
    ttl: u64,
    /// A waiter's policy (an acquisition with retries or a deadline).
    waiter: Option<Waiter>,
    /// Tries begun (acquire rounds submitted), and when the last one began.
    tries: u32,
    try_at: u64,
    /// Whether the round in flight is a try's acquire round, and whether nobody else could
    /// set the keys when it began.
    acquire_round: bool,
    alone_at_try: bool,
    /// Whether the last round was a try's acquire round and won it (a fenced try's write-back
    /// comes next; otherwise a script round of an acquisition is its release).
    acquire_won: bool,
}

/// A lock a task holds.
struct Held {
    lock: Lock,
    id: u64,
    /// Its windows in the history.
    wins: Vec<usize>,
    res: Vec<u32>,
}

enum State {
    /// Between operations, until the task's timer.
    Think,
    Run(Box<Run>),
    /// Paused with the lock held, then writes to the store (the fencing debate's GC pause).
    Using,
    Done,
}

struct Task {
    ops_left: u32,
    timer: u64,
    state: State,
    held: Option<Held>,
    plan: Option<std::collections::VecDeque<Action>>,
    role: Role,
    /// The guard of the lock it holds, if guarded.
    guard: Option<Box<guard::Guard>>,
}

/// What a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A caller: it runs operations and works with its locks.
    Worker,
    /// The keeper of task `.0`'s guarded lock.
    Keeper(usize),
}

impl Task {
    /// A keeper task, not yet keeping anything.
    fn keeper() -> Task {
        Task {
            ops_left: 0,
            timer: NEVER,
            state: State::Done,
            held: None,
            plan: None,
            role: Role::Keeper(0),
            guard: None,
        }
    }
}

/// One simulated client.
pub(crate) struct Client {
    pub id: u32,
    cfg: Config,
    engine: Engine<u32>,
    rng: Seeded,
    beh: Rng,
    /// Its node `i` is master `perm[i]`.
    pub perm: Vec<u32>,
    /// Its node `i`'s link, while it has one.
    pub links: Vec<Option<u32>>,
    tasks: Vec<Task>,
    /// The earliest wake-up event pending for it.
    pub armed: u64,
    next_watch: u64,
    seq: u32,
    /// Rounds submitted and not yet completed: (sequence number, task).
    outstanding: Vec<(u32, u32)>,
    /// Watches that fired before their task reached its wait.
    fired: Vec<(u64, Wake)>,
    events: Events,
    spec: Spec,
    /// An extension's lock, handed to the operation being started.
    meta: Option<(u64, Vec<usize>, Vec<u32>)>,
    /// The most two tries of one acquisition may be apart, start to start: the try's rounds
    /// (acquire, the fenced write-back, the release), a waiter's read, the longest retry delay
    /// and the wake-up jitter, on a clock that may run slow by the drift factor.
    gap: u64,
    /// Whether it takes guarded locks, and the draws that guard them (a stream of their own,
    /// so that a client without guards behaves as it did before they were modelled).
    guards: bool,
    gbeh: Rng,
    /// A guarded acquisition's guard, handed to the operation being started.
    pending_guard: Option<guard::Spec>,
    /// Per node, the replies its connection owed after the last pump.
    owed: Vec<usize>,
    /// Whether a round was submitted since the last look at the owed replies (the engine's
    /// rule applies to what it queues for a round: it replaces a stale connection first).
    submitted: bool,
    /// Its clock.
    clock: Clock,
    /// How long a reply may be owed before the connection is replaced.
    stale: Duration,
}

/// A client's clock: it runs `ppm` parts per million fast (or slow) from the start of the run.
/// The core is handed its readings; the checker judges on the run's time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    ppm: i64,
}

impl Clock {
    /// What it reads at the run's time `t`, in nanoseconds from the base.
    fn local_ns(self, t: u64) -> u64 {
        if self.ppm == 0 {
            return t;
        }
        // In 64 bits when nothing overflows, else in 128: the same quotient either way.
        if let Some(x) = i64::try_from(t).ok().and_then(|t| {
            t.checked_mul(self.ppm)
                .and_then(|p| t.checked_add(p / 1_000_000))
        }) {
            // Below `NEVER - 1` already.
            return x.max(0) as u64;
        }
        let t = i128::from(t);
        let x = t + t * i128::from(self.ppm) / 1_000_000;
        x.clamp(0, i128::from(NEVER - 1)) as u64
    }

    /// What it reads at the run's time `t` (the core's `Instant`).
    fn local_at(self, sim: &Sim, t: u64) -> Instant {
        sim.instant_of(self.local_ns(t))
    }

    /// What it reads now.
    fn local(self, sim: &Sim) -> Instant {
        self.local_at(sim, sim.now)
    }

    /// The run's time (nanoseconds) at which it first reads `t` or later: a window ends where
    /// the holder's clock says its validity ends.
    fn true_of(self, sim: &Sim, t: Instant) -> u64 {
        let l = sim.ns(t);
        if self.ppm == 0 || l >= NEVER - 1 {
            return l;
        }
        let rate = 1_000_000 + i128::from(self.ppm);
        // In 64 bits when the product fits (the rate is positive), else in 128.
        let narrow = i64::try_from(l)
            .ok()
            .and_then(|l| l.checked_mul(1_000_000))
            .zip(i64::try_from(rate).ok().filter(|r| *r > 0))
            .map(|(x, r)| (x / r) as u64);
        let mut g = narrow.map_or_else(
            || (i128::from(l) * 1_000_000 / rate).clamp(0, i128::from(NEVER - 2)) as u64,
            |g| g.min(NEVER - 2),
        );
        // The division's rounding, corrected (a step or two).
        for _ in 0..8 {
            if self.local_ns(g) < l {
                g += 1;
            } else if g > 0 && self.local_ns(g - 1) >= l {
                g -= 1;
            } else {
                break;
            }
        }
        g
    }

    /// A duration of `d` nanoseconds on it, in the run's time (rounded down).
    fn true_duration(self, d: u64) -> u64 {
        let rate = 1_000_000 + i128::from(self.ppm);
        (i128::from(d) * 1_000_000 / rate).clamp(0, i128::from(NEVER - 1)) as u64
    }

    /// The run's time at which a wait of `d` nanoseconds on it, begun now, ends.
    fn after(self, sim: &Sim, d: u64) -> u64 {
        self.true_of(sim, self.local(sim) + Duration::from_nanos(d))
    }
}

/// The most passes one pump makes (each pass takes every input; a pass that changes nothing
/// ends it).
const MAX_PASSES: usize = 10_000;

impl Client {
    pub(crate) fn new(id: u32, cfg: Config, seed: u64, perm: Vec<u32>, spec: Spec) -> Client {
        let n = cfg.nodes().len();
        let mut beh = Rng::new(seed, 0x100 + u64::from(id));
        let tasks = (0..spec.tasks)
            .map(|idx| Task {
                ops_left: spec.ops,
                timer: beh.range(0, 5_000_000),
                state: State::Think,
                held: None,
                plan: spec
                    .plans
                    .get(idx as usize)
                    .map(|p| p.iter().cloned().collect()),
                role: Role::Worker,
                guard: None,
            })
            .collect();
        let mut gbeh = Rng::new(seed, 0x200 + u64::from(id));
        let guards = spec.plans.is_empty() && gbeh.chance(400);
        let nt = cfg.node_timeout().as_nanos() as u64;
        let rounds = 3 + u64::from(cfg.fencing_key().is_some());
        let gap =
            rounds * nt + cfg.retry_delay().as_nanos() as u64 + op::WAKE_JITTER.as_nanos() as u64;
        let gap = gap + (gap as f64 * cfg.drift_factor()).ceil() as u64 + 1_000;
        let stale = redlock_core::conn::stale_after(cfg.node_timeout());
        let clock = Clock { ppm: spec.ppm };
        Client {
            id,
            gap,
            engine: Engine::new(&cfg),
            cfg,
            rng: Seeded::new(seed ^ (0x5eed_0000 + u64::from(id)).wrapping_mul(0x9e37_79b9)),
            beh,
            perm,
            links: vec![None; n],
            tasks,
            armed: NEVER,
            next_watch: 1,
            seq: 0,
            outstanding: Vec::new(),
            fired: Vec::new(),
            events: Events::new(),
            spec,
            meta: None,
            guards,
            gbeh,
            pending_guard: None,
            owed: vec![0; n],
            submitted: false,
            stale,
            clock,
        }
    }

    /// Its clock now.
    fn local(&self, sim: &Sim) -> Instant {
        self.clock.local(sim)
    }

    /// The run's time at which its clock first reads `t` or later.
    fn true_of(&self, sim: &Sim, t: Instant) -> u64 {
        self.clock.true_of(sim, t)
    }

    /// A duration of `d` nanoseconds on its clock, in the run's time (rounded down).
    fn true_duration(&self, d: u64) -> u64 {
        self.clock.true_duration(d)
    }

    /// The run's time at which a wait of `d` nanoseconds on its clock, begun now, ends.
    fn after(&self, sim: &Sim, d: u64) -> u64 {
        self.clock.after(sim, d)
    }

    /// Whether every task is done and no round is in flight.
    pub(crate) fn finished(&self) -> bool {
        self.outstanding.is_empty() && self.tasks.iter().all(|t| matches!(t.state, State::Done))
    }

    /// Connections its engine dropped because a reply did not fit its command or a sentinel
    /// came back wrong (a stream out of step), and because a reply was owed past every
    /// deadline.
    pub(crate) fn replaced(&self) -> (u64, u64) {
        let stats = self.engine.stats();
        stats
            .nodes
            .iter()
            .fold((0, 0), |(d, s), n| (d + n.desyncs, s + n.stale_replaced))
    }

    /// The configuration.
    pub(crate) fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// How it sends scripts.
    pub(crate) fn scripts(&self) -> redlock_core::Scripts {
        self.spec.scripts
    }

    /// Node `node`'s socket connected.
    pub(crate) fn connected(&mut self, sim: &mut Sim, node: usize) {
        self.engine.handle_connected(node);
        self.pump(sim);
    }

    /// Bytes read from node `node`.
    pub(crate) fn input(&mut self, sim: &mut Sim, node: usize, bytes: &[u8]) {
        self.engine.handle_input(node, bytes, self.local(sim));
        self.pump(sim);
    }

    /// Node `node`'s socket failed (`kind`) or reached its end; it is gone.
    pub(crate) fn closed(&mut self, sim: &mut Sim, node: usize, kind: std::io::ErrorKind) {
        if let Some(l) = self.links[node].take() {
            sim.client_close(l);
        }
        self.engine
            .handle_closed(node, NodeOutcome::Io(kind), self.local(sim));
        self.pump(sim);
    }

    /// Does everything due now, and arms the next wake-up.
    pub(crate) fn pump(&mut self, sim: &mut Sim) {
        let now = sim.now;
        for _ in 0..MAX_PASSES {
            let mut progress = false;
            self.engine.handle_timeout(self.local(sim));
            while let Some(ev) = self.engine.poll_io() {
                progress = true;
                match ev {
                    IoEvent::Close(i) => {
                        if let Some(l) = self.links[i].take() {
                            sim.client_close(l);
                        }
                    }
                    IoEvent::Connect(i) => {
                        if let Some(l) = self.links[i].take() {
                            sim.client_close(l);
                        }
                        self.links[i] = Some(sim.connect(self.id, i as u32, self.perm[i]));
                    }
                }
            }
            for i in 0..self.links.len() {
                let Some(l) = self.links[i] else { continue };
                let out = self.engine.transmit(i);
                if !out.is_empty() {
                    let n = out.len();
                    sim.send(l, out);
                    self.engine.handle_written(i, n);
                    progress = true;
                }
            }
            while self.engine.poll_event().is_some() {}
            while let Some(done) = self.engine.poll_completed() {
                progress = true;
                self.round_done(sim, done);
            }
            while let Some(w) = self.engine.poll_woken() {
                progress = true;
                self.fired.push(w);
            }
            if !self.fired.is_empty() {
                progress |= self.hand_fired(sim);
            }
            for k in 0..self.tasks.len() {
                if self.tasks[k].timer <= now {
                    progress = true;
                    self.tasks[k].timer = NEVER;
                    self.on_timer(sim, k);
                }
                if let State::Run(run) = &self.tasks[k].state {
                    if run.abandon_at <= now {
                        progress = true;
                        self.abandon(sim, k);
                    }
                }
            }
            if !progress {
                break;
            }
        }
        let mut next = self
            .engine
            .poll_timeout()
            .map_or(NEVER, |t| self.true_of(sim, t).max(now));
        for t in &self.tasks {
            next = next.min(t.timer);
            if let State::Run(run) = &t.state {
                next = next.min(run.abandon_at);
            }
        }
        if next < NEVER {
            sim.wake(self, next);
        }
        self.check_owed(sim);
    }

    /// Replies owed per connection stay bounded: never more than the engine's limit
    /// (`owed-bound`), and no command queued on a connection that owes a reply past
    /// [`stale_after`](redlock_core::conn::stale_after), where the engine must replace it first
    /// (`owed-stale`): a connection that lost a command or a reply (byte loss, a blackhole) is
    /// dropped, or its rounds end at their deadlines, rather than owing more and more.
    fn check_owed(&mut self, sim: &mut Sim) {
        let clock = self.clock;
        let submitted = std::mem::replace(&mut self.submitted, false);
        for i in 0..self.owed.len() {
            let (n, oldest) = self.engine.owed(i);
            let last = std::mem::replace(&mut self.owed[i], n);
            sim.owed_max = sim.owed_max.max(n as u64);
            // The sentinel may be queued ahead of the command that reached the limit.
            if n > MAX_OWED + 1 {
                sim.hist.note(
                    "owed-bound",
                    sim.now,
                    format!("c{}: node {i}'s connection owes {n} replies", self.id),
                );
            }
            // The rule is the engine's for the rounds it queues (it replaces a stale connection
            // first). A command a connection sends again in another form after a refusal (a
            // master that was paused answering its backlog) goes behind replies that are old
            // but on their way, keeps its first command's time, and rightly stays.
            let age = || {
                oldest.map_or(Duration::ZERO, |t| {
                    clock.local(sim).saturating_duration_since(t)
                })
            };
            if submitted && n > last && age() > self.stale {
                let age = age();
                sim.hist.note(
                    "owed-stale",
                    sim.now,
                    format!(
                        "c{}: node {i}'s connection took commands ({last} -> {n} replies owed) while owing one queued {:.3} ms ago (stale after {:.3} ms)",
                        self.id,
                        age.as_secs_f64() * 1e3,
                        self.stale.as_secs_f64() * 1e3
                    ),
                );
            }
        }
    }

    /// Hands fired watches to the tasks that await them; returns whether any was.
    fn hand_fired(&mut self, sim: &mut Sim) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.fired.len() {
            let (id, why) = self.fired[i];
            let task = self
                .tasks
                .iter()
                .position(|t| matches!(&t.state, State::Run(r) if r.wait == Wait::Await(id)));
            match task {
                Some(k) => {
                    self.fired.swap_remove(i);
                    any = true;
                    self.tasks[k].timer = NEVER;
                    self.engine.unwatch(id);
                    if let State::Run(run) = &mut self.tasks[k].state {
                        run.watch = None;
                    }
                    sim.trace.ev(sim.now, 20, u64::from(self.id), id, || {
                        format!("c{} woken: watch {id} ({})", self.id, why.as_str())
                    });
                    self.advance(sim, k, Input::Woken(Some(why)));
                }
                None => i += 1,
            }
        }
        // Firings of watches no task holds any more (taken back) are dropped; those of
        // watches still held wait for their task's wait.
        let held: Vec<u64> = self
            .tasks
            .iter()
            .filter_map(|t| match &t.state {
                State::Run(r) => r.watch,
                _ => None,
            })
            .collect();
        self.fired.retain(|(id, _)| held.contains(id));
        any
    }

    fn round_done(&mut self, sim: &mut Sim, done: Completed<u32>) {
        let seq = done.user;
        let Some(pos) = self.outstanding.iter().position(|(s, _)| *s == seq) else {
            sim.hist.note(
                "round-twice",
                sim.now,
                format!(
                    "client {}: round {seq} completed again, or never submitted",
                    self.id
                ),
            );
            return;
        };
        let (_, k) = self.outstanding.swap_remove(pos);
        let k = k as usize;
        let waiting = matches!(&self.tasks[k].state, State::Run(r) if r.wait == Wait::Round(seq));
        if !waiting {
            // The round of an abandoned operation: nobody waits for it.
            return;
        }
        let round = done.round;
        let (t1, first_live) = match &mut self.tasks[k].state {
            State::Run(r) => {
                let first = r.first_round && r.live;
                r.first_round = false;
                r.acquire_won =
                    r.acquire_round && round.decision() == redlock_core::round::Decision::Won;
                (r.t1, first)
            }
            _ => return,
        };
        sim.trace
            .ev(sim.now, 21, u64::from(self.id), u64::from(seq), || {
                let votes: Vec<String> = round.reports_iter().map(short).collect();
                format!(
                    "c{}.{k} round {seq} decided {:?}: [{}]",
                    self.id,
                    round.decision(),
                    votes.join(" ")
                )
            });
        if first_live && round.decision() != redlock_core::round::Decision::Won {
            if let State::Run(r) = &self.tasks[k].state {
                if sim.still_alone(&r.res, self.id, k as u32, r.t1) {
                    let votes: Vec<String> = round.reports_iter().map(short).collect();
                    sim.hist.note(
                        "liveness",
                        sim.now,
                        format!(
                            "c{}.{k}: the first round of an acquisition of a free resource with no fault was not won: [{}]",
                            self.id,
                            votes.join(" ")
                        ),
                    );
                }
            }
        }
        if let State::Run(r) = &self.tasks[k].state {
            let judged = round.decision() != redlock_core::round::Decision::Won;
            let eligible = r.acquire_round
                && r.alone_at_try
                && self.spec.expiry_live
                && sim.expiry_checks
                && sim.alone_and_expired(&r.res, r.t1)
                && sim.clean_nodes(&self.perm, r.t1) >= self.cfg.quorum()
                && sim.connects_within(self.cfg.node_timeout());
            sim.expiry_judged += u64::from(eligible);
            if judged && eligible {
                let votes: Vec<String> = round.reports_iter().map(short).collect();
                sim.hist.note(
                    "liveness-expiry",
                    sim.now,
                    format!(
                        "c{}.{k}: a try begun at {:.3} ms, with every key an earlier holder may have set expired and a quorum of masters up and reachable, lost its round: [{}]",
                        self.id,
                        r.t1 as f64 / 1e6,
                        votes.join(" ")
                    ),
                );
            }
        }
        let t1 = self.clock.local_at(sim, t1);
        self.advance(sim, k, Input::Round(Ok((round, t1))));
    }

    fn on_timer(&mut self, sim: &mut Sim, k: usize) {
        let task = &mut self.tasks[k];
        if matches!(task.role, Role::Keeper(_)) {
            return self.keeper_timer(sim, k);
        }
        match &mut task.state {
            State::Think if task.guard.is_some() => self.guard_work(sim, k),
            State::Think => self.next_action(sim, k),
            State::Using => {
                self.use_lock(sim, k);
                self.tasks[k].state = State::Think;
                self.end_of_op(sim, k);
            }
            State::Run(run) => match run.wait {
                Wait::Timer => self.advance(sim, k, Input::Slept),
                Wait::Await(id) => {
                    self.engine.unwatch(id);
                    run.watch = None;
                    self.advance(sim, k, Input::Woken(None));
                }
                Wait::Round(_) => {}
            },
            State::Done => {}
        }
    }

    /// The task's next operation (or the end).
    fn next_action(&mut self, sim: &mut Sim, k: usize) {
        if let Some(plan) = self.tasks[k].plan.as_mut() {
            match plan.pop_front() {
                None => {
                    self.tasks[k].state = State::Done;
                }
                Some(Action::Wait(d)) => {
                    self.tasks[k].timer = sim.now + d.as_nanos() as u64;
                }
                Some(Action::Lock(r, ttl)) => {
                    let names = sim.names(&[r]);
                    let retry = self.retry(sim, Retry::new(&self.cfg));
                    let tries = self.cfg.tries();
                    self.start_acquire(sim, k, names, vec![r], ttl, retry, tries);
                }
                Some(Action::Use(pause)) => {
                    self.tasks[k].state = State::Using;
                    self.tasks[k].timer = sim.now + pause.as_nanos() as u64;
                }
                Some(Action::Unlock) => self.start_release(sim, k),
            }
            return;
        }
        if self.tasks[k].ops_left == 0 {
            self.tasks[k].state = State::Done;
            return;
        }
        self.tasks[k].ops_left -= 1;
        let holding = self.tasks[k].held.is_some();
        let choice = if holding {
            self.beh
                .pick(&[(30, 'u'), (20, 'e'), (40, 'r'), (5, 'x'), (5, 'i')])
        } else {
            self.beh.pick(&[(92, 'a'), (8, 'i')])
        };
        match choice {
            'u' => {
                let pause = if sim.faults.has(super::Fault::ClientPause) && self.beh.chance(300) {
                    let ttl = self.tasks[k]
                        .held
                        .as_ref()
                        .map_or(0, |h| h.lock.ttl().as_nanos() as u64);
                    self.beh.range(0, 2 * ttl)
                } else {
                    0
                };
                self.tasks[k].state = State::Using;
                self.tasks[k].timer = sim.now + pause;
            }
            'e' => self.start_extend(sim, k),
            'r' => self.start_release(sim, k),
            'x' => {
                // Forgotten: the lock runs out with its ttl.
                self.tasks[k].held = None;
                self.end_of_op(sim, k);
            }
            'i' => {
                let r = self.beh.below(u64::from(sim.resources)) as u32;
                let name = sim.resource_name(r, self.spec.fenced);
                let op = op::Inspect::new(&name);
                let bound = 2 * self.nt();
                self.start(
                    sim,
                    k,
                    AnyOp::Inspect(op),
                    OpKind::Inspect,
                    bound,
                    Vec::new(),
                    false,
                    (0, None),
                );
            }
            _ => self.random_acquire(sim, k),
        }
    }

    fn nt(&self) -> u64 {
        self.cfg.node_timeout().as_nanos() as u64
    }

    fn random_acquire(&mut self, sim: &mut Sim, k: usize) {
        let count = if self.beh.chance(200) && sim.resources > 1 {
            self.beh.range(2, u64::from(sim.resources.min(3))) as u32
        } else {
            1
        };
        let mut res: Vec<u32> = Vec::new();
        while res.len() < count as usize {
            let r = self.beh.below(u64::from(sim.resources)) as u32;
            if !res.contains(&r) {
                res.push(r);
            }
        }
        let ids: Vec<u32> = res
            .iter()
            .map(|r| sim.resource_id(*r, self.spec.fenced))
            .collect();
        let names = sim.names_of(&res, self.spec.fenced);
        let ttl = Duration::from_nanos(self.beh.range(self.spec.ttl_min, self.spec.ttl_max));
        let mut ttl = Duration::from_millis(ttl.as_millis() as u64);
        let kind = self.beh.pick(&[(50, 'l'), (25, 't'), (25, 'w')]);
        if kind == 'l' && count == 1 {
            self.pending_guard = self.draw_guard(&mut ttl);
        }
        let tries = self.cfg.tries();
        let (retry, tries) = match kind {
            't' => (Retry::once(), 1),
            'w' => {
                let max_wait = Duration::from_nanos(self.beh.range(0, self.spec.ttl_max * 2));
                let now = self.local(sim);
                let retry = self.retry(sim, Retry::within(&self.cfg, max_wait, now));
                self.start_acquire_within(sim, k, names, ids, ttl, retry, max_wait);
                return;
            }
            _ => (self.retry(sim, Retry::new(&self.cfg)), tries),
        };
        self.start_acquire(sim, k, names, ids, ttl, retry, tries);
    }

    /// The retry policy the driver runs a waiter with: the caller's, or (the negative control
    /// `waiter-gives-up`) a single try.
    fn retry(&self, sim: &Sim, retry: Retry) -> Retry {
        if sim.negative == Some(super::Negative::WaiterGivesUp) {
            Retry::once()
        } else {
            retry
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_acquire(
        &mut self,
        sim: &mut Sim,
        k: usize,
        names: Names,
        ids: Vec<u32>,
        ttl: Duration,
        retry: Retry,
        tries: u32,
    ) {
        let nt = self.nt();
        let gap = nt + self.cfg.retry_delay().as_nanos() as u64 + op::WAKE_JITTER.as_nanos() as u64;
        let bound = u64::from(tries) * 3 * nt + u64::from(tries.saturating_sub(1)) * gap;
        let waiter = (tries > 1).then_some(Waiter::Tries(tries));
        self.begin_acquire(sim, k, names, ids, ttl, retry, bound, waiter);
    }

    #[allow(clippy::too_many_arguments)]
    fn start_acquire_within(
        &mut self,
        sim: &mut Sim,
        k: usize,
        names: Names,
        ids: Vec<u32>,
        ttl: Duration,
        retry: Retry,
        max_wait: Duration,
    ) {
        let bound = max_wait.as_nanos() as u64 + 4 * self.nt() + op::WAKE_JITTER.as_nanos() as u64;
        let waiter = Waiter::Until(self.after(sim, max_wait.as_nanos() as u64));
        self.begin_acquire(sim, k, names, ids, ttl, retry, bound, Some(waiter));
    }

    #[allow(clippy::too_many_arguments)]
    fn begin_acquire(
        &mut self,
        sim: &mut Sim,
        k: usize,
        names: Names,
        ids: Vec<u32>,
        ttl: Duration,
        retry: Retry,
        bound: u64,
        waiter: Option<Waiter>,
    ) {
        let live =
            self.spec.live && sim.is_free(&ids) && sim.connects_within(self.cfg().node_timeout());
        let ttl_ns = ttl.as_nanos() as u64;
        let op = op::Acquire::new(names, ttl, retry);
        self.start(
            sim,
            k,
            AnyOp::Acquire(Box::new(op)),
            OpKind::Acquire,
            bound,
            ids,
            live,
            (ttl_ns, waiter),
        );
    }

    fn start_extend(&mut self, sim: &mut Sim, k: usize) {
        let Some(held) = self.tasks[k].held.take() else {
            return self.end_of_op(sim, k);
        };
        let ttl =
            Duration::from_millis(self.beh.range(self.spec.ttl_min, self.spec.ttl_max) / 1_000_000);
        // The cap the extension puts on the validity before its round goes out, read from the
        // core's own rule on a copy: the window ends there unless the extension succeeds.
        let mut copy = held.lock.clone();
        if op::begin_extend(&self.cfg, &mut copy, ttl, self.local(sim)).is_ok() {
            let cap = self.true_of(sim, copy.valid_until());
            for &i in &held.wins {
                let w = &mut sim.hist.windows[i];
                w.until = w.until.min(cap);
            }
        }
        let Held {
            lock,
            id,
            wins,
            res,
        } = held;
        let op = op::Extend::new(lock, ttl);
        let bound = self.nt();
        self.meta = Some((id, wins, res.clone()));
        let ttl_ns = ttl.as_nanos() as u64;
        self.start(
            sim,
            k,
            AnyOp::Extend(op),
            OpKind::Extend,
            bound,
            res,
            false,
            (ttl_ns, None),
        );
    }

    fn start_release(&mut self, sim: &mut Sim, k: usize) {
        let Some(held) = self.tasks[k].held.take() else {
            return self.end_of_op(sim, k);
        };
        // The window ends as the release is sent.
        for &i in &held.wins {
            let w = &mut sim.hist.windows[i];
            w.until = w.until.min(sim.now);
        }
        let op = op::Release::new(held.lock);
        let bound = self.nt();
        self.start(
            sim,
            k,
            AnyOp::Release(op),
            OpKind::Release,
            bound,
            held.res,
            false,
            (0, None),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        sim: &mut Sim,
        k: usize,
        op: AnyOp,
        kind: OpKind,
        bound: u64,
        res: Vec<u32>,
        live: bool,
        (ttl, waiter): (u64, Option<Waiter>),
    ) {
        let holder = Holder {
            client: self.id,
            task: k as u32,
        };
        sim.hist.ops.push(OpRecord {
            holder,
            kind,
            start: sim.now,
            // On its clock; a microsecond more for the rounding of its readings, a nanosecond
            // per round, to the run's time.
            bound: self.after(sim, bound) + 1_000,
            end: None,
            ends: 0,
            abandoned: false,
        });
        let rec = sim.hist.ops.len() - 1;
        sim.trace.ev(
            sim.now,
            1,
            u64::from(self.id) << 8 | k as u64,
            kind as u64,
            || {
                format!(
                    "c{}.{k} starts {} #{rec} (bound {:.3} ms)",
                    self.id,
                    kind.name(),
                    bound as f64 / 1e6
                )
            },
        );
        sim.touch(&res, self.id, k as u32, 1);
        let sets_keys = matches!(kind, OpKind::Acquire | OpKind::Extend);
        if sets_keys {
            sim.setting(&res, true, ttl);
        }
        let abandon_at = if kind == OpKind::Acquire && self.beh.chance(20) {
            sim.now + self.beh.range(0, 3 * self.nt())
        } else {
            NEVER
        };
        self.tasks[k].state = State::Run(Box::new(Run {
            op,
            wait: Wait::Timer,
            rec,
            watch: None,
            t1: sim.now,
            live,
            first_round: true,
            res,
            abandon_at,
            meta: self.meta.take(),
            guarded: self.pending_guard.take(),
            sets_keys,
            ttl,
            waiter,
            tries: 0,
            try_at: 0,
            acquire_round: false,
            alone_at_try: false,
            acquire_won: false,
        }));
        self.advance(sim, k, Input::Start);
    }

    /// Steps task `k`'s operation with `input` until it waits for something or is done.
    fn advance(&mut self, sim: &mut Sim, k: usize, mut input: Input) {
        loop {
            let State::Run(run) = &mut self.tasks[k].state else {
                return;
            };
            let clock = self.clock;
            let now = clock.local(sim);
            let mut cx = Cx {
                now,
                rng: &mut self.rng,
                events: &mut self.events,
            };
            let cfg = &self.cfg;
            let acquisition = matches!(run.op, AnyOp::Acquire(_));
            let step = match &mut run.op {
                AnyOp::Acquire(o) => o.step(input, cfg, &mut cx),
                AnyOp::Extend(o) => o.step(input, cfg, &mut cx),
                AnyOp::Release(o) => o.step(input, cfg, &mut cx),
                AnyOp::Inspect(o) => o.step(input, cfg, &mut cx),
            };
            let next = match step {
                Step::Round(cmd, until) => {
                    let acquiring = matches!(
                        cmd.expect(),
                        Expect::Set | Expect::Acquired | Expect::Fenced
                    );
                    if acquiring {
                        if run.tries > 0 && sim.now > run.try_at + self.gap {
                            sim.hist.note(
                                "retry-gap",
                                sim.now,
                                format!(
                                    "c{}.{k}: a try began {:.3} ms after the one before (at {:.3} ms); the most is {:.3} ms",
                                    self.id,
                                    (sim.now - run.try_at) as f64 / 1e6,
                                    run.try_at as f64 / 1e6,
                                    self.gap as f64 / 1e6
                                ),
                            );
                        }
                        run.tries += 1;
                        run.try_at = sim.now;
                        run.alone_at_try = sim.sole_setter(&run.res);
                    }
                    // The negative control `no-release`: a failed try's release is never sent
                    // (what a native-mode unlock that did nothing on some servers did): its
                    // round is taken as failed at once.
                    let release = acquisition
                        && cmd.expect() == Expect::Script
                        && !(run.acquire_won && self.cfg.fencing_key().is_some());
                    run.acquire_round = acquiring;
                    run.acquire_won = false;
                    if release && sim.negative == Some(super::Negative::NoRelease) {
                        self.events.clear();
                        input = Input::Round(Err(Error::Aborted));
                        continue;
                    }
                    let seq = self.seq;
                    self.seq = self.seq.wrapping_add(1);
                    let t1 = if sim.negative == Some(super::Negative::StaleTime) {
                        // The negative control: the time the operation started, not now.
                        clock.local_at(sim, sim.hist.ops[run.rec].start)
                    } else {
                        now
                    };
                    self.engine.submit(&cmd, until, t1, seq);
                    self.submitted = true;
                    self.engine.note_batch(1);
                    self.outstanding.push((seq, k as u32));
                    run.t1 = sim.now;
                    run.wait = Wait::Round(seq);
                    None
                }
                Step::Sleep(d) | Step::Jitter(d) => {
                    run.wait = Wait::Timer;
                    self.tasks[k].timer = clock.after(sim, stretch(sim, d.as_nanos() as u64));
                    None
                }
                Step::Watch(key) => {
                    let id = self.next_watch;
                    self.next_watch += 1;
                    self.engine.watch(id, key.into());
                    run.watch = Some(id);
                    Some(Input::Watching)
                }
                Step::Await(deadline) => match (run.watch, deadline) {
                    (Some(id), Some(deadline)) => {
                        if let Some(i) = self.fired.iter().position(|(w, _)| *w == id) {
                            let (_, why) = self.fired.swap_remove(i);
                            self.engine.unwatch(id);
                            run.watch = None;
                            Some(Input::Woken(Some(why)))
                        } else {
                            run.wait = Wait::Await(id);
                            let wait = deadline.saturating_duration_since(now);
                            let wait = stretch(sim, wait.as_nanos() as u64);
                            self.tasks[k].timer = clock.after(sim, wait);
                            None
                        }
                    }
                    (id, _) => {
                        if let Some(id) = id {
                            self.engine.unwatch(id);
                        }
                        run.watch = None;
                        Some(Input::Woken(None))
                    }
                },
                Step::Done => {
                    self.events.clear();
                    self.finish(sim, k);
                    return;
                }
            };
            self.events.clear();
            match next {
                Some(i) => input = i,
                None => return,
            }
        }
    }

    /// Task `k`'s operation said it is done: its result, recorded.
    fn finish(&mut self, sim: &mut Sim, k: usize) {
        let State::Run(run) = std::mem::replace(&mut self.tasks[k].state, State::Think) else {
            return;
        };
        let run = *run;
        if let Some(id) = run.watch {
            self.engine.unwatch(id);
        }
        sim.touch(&run.res, self.id, k as u32, -1);
        if run.sets_keys {
            sim.setting(&run.res, false, run.ttl);
        }
        let holder = Holder {
            client: self.id,
            task: k as u32,
        };
        let keeper = matches!(self.tasks[k].role, Role::Keeper(_));
        let mut guarded = None;
        let outcome: String = match run.op {
            AnyOp::Extend(o) if keeper => self.keeper_extended(sim, k, o),
            AnyOp::Acquire(o) => match o.finish() {
                Ok(lock) => {
                    let id = sim.next_lock();
                    let until = self.true_of(sim, lock.valid_until());
                    let res: Vec<u32> = lock
                        .resources()
                        .map(|name| sim.resource_id_of(name))
                        .collect();
                    sim.check_granted(self, &lock, sim.hist.ops[run.rec].start);
                    sim.hist.windows.push(Window {
                        lock: id,
                        holder,
                        resources: res.clone(),
                        from: sim.now,
                        until,
                        valid: until,
                        token: lock.fencing_token(),
                    });
                    let wins = vec![sim.hist.windows.len() - 1];
                    sim.trace.ev(sim.now, 2, id, until, || {
                        format!(
                            "c{}.{k} holds lock {id} on {:?} until {:.3} ms, token {:?}, granted by {:?}",
                            self.id,
                            lock.resources().collect::<Vec<_>>(),
                            until as f64 / 1e6,
                            lock.fencing_token(),
                            lock.granted_by().collect::<Vec<_>>()
                        )
                    });
                    self.tasks[k].held = Some(Held {
                        lock,
                        id,
                        wins,
                        res,
                    });
                    guarded = run.guarded;
                    "ok".into()
                }
                Err(e) => {
                    self.patience(sim, k, run.waiter, run.tries, &e);
                    format!("{e}")
                }
            },
            AnyOp::Extend(o) => {
                let (result, lock) = o.into_parts();
                if let Some((id, mut wins, res)) = run.meta {
                    let until = self.true_of(sim, lock.valid_until());
                    match &result {
                        Ok(()) => {
                            sim.hist.windows.push(Window {
                                lock: id,
                                holder,
                                resources: res.clone(),
                                from: sim.now,
                                until,
                                valid: until,
                                token: lock.fencing_token(),
                            });
                            wins.push(sim.hist.windows.len() - 1);
                        }
                        Err(_) => {
                            for &i in &wins {
                                let w = &mut sim.hist.windows[i];
                                w.until = w.until.min(until);
                            }
                        }
                    }
                    self.tasks[k].held = Some(Held {
                        lock,
                        id,
                        wins,
                        res,
                    });
                }
                match result {
                    Ok(()) => "ok".into(),
                    Err(e) => format!("{e}"),
                }
            }
            AnyOp::Release(o) => match o.finish() {
                Ok(()) => "ok".into(),
                Err(e) => format!("{e}"),
            },
            AnyOp::Inspect(o) => match o.finish() {
                Ok(_) => "ok".into(),
                Err(e) => format!("{e}"),
            },
        };
        let rec = &mut sim.hist.ops[run.rec];
        rec.ends += 1;
        if rec.end.is_none() {
            rec.end = Some(sim.now);
        }
        let code = u64::from(outcome.len() as u32) ^ fnv_str(&outcome);
        sim.trace.ev(sim.now, 3, run.rec as u64, code, || {
            format!("c{}.{k} ends #{}: {outcome}", self.id, run.rec)
        });
        if keeper {
            return;
        }
        match guarded {
            Some(spec) => self.start_guard(sim, k, spec),
            None => self.end_of_op(sim, k),
        }
    }

    /// A waiter that failed with an error worth another try (the resource held, no quorum, the
    /// validity spent) must have used its whole policy: all its tries, or its time.
    fn patience(&self, sim: &mut Sim, k: usize, waiter: Option<Waiter>, tries: u32, e: &Error) {
        let retriable = matches!(
            e,
            Error::Conflict { .. } | Error::NoQuorum { .. } | Error::ValiditySpent { .. }
        );
        let gave_up = match waiter {
            _ if !retriable => None,
            Some(Waiter::Tries(n)) if tries < n => Some(format!("after {tries} of its {n} tries")),
            Some(Waiter::Until(t)) if sim.now < t => Some(format!(
                "{:.3} ms before its deadline, after {} tries",
                (t - sim.now) as f64 / 1e6,
                tries
            )),
            _ => None,
        };
        if let Some(when) = gave_up {
            sim.hist.note(
                "waiter-gave-up",
                sim.now,
                format!("c{}.{k}: a waiter failed {when}: {e}", self.id),
            );
        }
    }

    /// After an operation (or a step that is not one): think, then the next.
    fn end_of_op(&mut self, sim: &mut Sim, k: usize) {
        let think = if self.tasks[k].plan.is_some() || self.beh.chance(300) {
            0
        } else {
            self.beh.range(0, self.spec.ttl_max / 2)
        };
        self.tasks[k].state = State::Think;
        self.tasks[k].timer = sim.now + think;
    }

    /// The caller of task `k`'s acquisition goes away (an async caller dropping its future):
    /// what the operation says to send is fired, nobody waits for its round.
    fn abandon(&mut self, sim: &mut Sim, k: usize) {
        let State::Run(run) = std::mem::replace(&mut self.tasks[k].state, State::Think) else {
            return;
        };
        let run = *run;
        let fired = match &run.op {
            AnyOp::Acquire(o) => match o.abandon() {
                Some(cmd) => {
                    self.engine.fire(&cmd, self.local(sim));
                    true
                }
                None => false,
            },
            _ => false,
        };
        if let Some(id) = run.watch {
            self.engine.unwatch(id);
        }
        sim.touch(&run.res, self.id, k as u32, -1);
        if run.sets_keys {
            sim.setting(&run.res, false, run.ttl);
        }
        sim.taint(&run.res);
        let rec = &mut sim.hist.ops[run.rec];
        rec.ends += 1;
        rec.abandoned = true;
        if rec.end.is_none() {
            rec.end = Some(sim.now);
        }
        sim.trace
            .ev(sim.now, 4, run.rec as u64, u64::from(fired), || {
                format!(
                    "c{}.{k} abandons #{} (release fired: {fired})",
                    self.id, run.rec
                )
            });
        self.end_of_op(sim, k);
    }

    /// Writes to the fenced store with the lock task `k` holds.
    fn use_lock(&mut self, sim: &mut Sim, k: usize) {
        let Some(held) = &self.tasks[k].held else {
            return;
        };
        for r in &held.res {
            let token = held.lock.fencing_token();
            let accepted = sim.store_write(*r, token);
            sim.hist.writes.push(Write {
                at: sim.now,
                lock: held.id,
                resource: *r,
                token,
                accepted,
            });
            sim.trace.ev(sim.now, 5, held.id, u64::from(accepted), || {
                format!(
                    "c{}.{k} writes resource {r} with lock {} (token {token:?}): {}",
                    self.id,
                    held.id,
                    if accepted { "taken" } else { "refused" }
                )
            });
        }
    }
}

/// A wait of `d` as the driver sleeps it: as asked, or (the negative control `slow-retry`) four
/// times longer.
fn stretch(sim: &Sim, d: u64) -> u64 {
    if sim.negative == Some(super::Negative::SlowRetry) {
        d.saturating_mul(4)
    } else {
        d
    }
}

fn short(o: &NodeOutcome) -> String {
    match o {
        NodeOutcome::Ok => "ok".into(),
        NodeOutcome::Held => "held".into(),
        NodeOutcome::Gone => "gone".into(),
        NodeOutcome::Timeout => "timeout".into(),
        NodeOutcome::Down => "down".into(),
        NodeOutcome::Undecided => "undecided".into(),
        NodeOutcome::NotOurs => "not-ours".into(),
        NodeOutcome::Io(k) => format!("io:{k:?}"),
        other => format!("{other}"),
    }
}

fn fnv_str(s: &str) -> u64 {
    let mut h = crate::trace::Fnv::default();
    h.bytes(s.as_bytes());
    h.finish()
}

/// The instant `base + t` nanoseconds.
pub(crate) fn at(base: Instant, t: u64) -> Instant {
    base + Duration::from_nanos(t)
}
