//! A simulated client: a real `redlock_core::engine::Engine` with its own seeded randomness, and
//! tasks that run the core's operations through the `Operation` trait, as a driver does
//! (`redlock-mux`'s `drivers::next_step` and the blocking driver's `run`): each step's round is
//! submitted to the engine at the time read for it, sleeps and waits are timers on the
//! simulated clock, a waiter's watch is registered before its read and taken back when its
//! wait ends. The simulator decides what the tasks do (which operation, when); the core decides
//! everything an operation does.

use std::time::{Duration, Instant};

use redlock_core::engine::{Completed, Engine, IoEvent, Wake, MAX_OWED};
use redlock_core::event::Events;
use redlock_core::op::{self, Input};
use redlock_core::random::Seeded;
use redlock_core::{Config, Lock, NodeOutcome};

use super::{Sim, NEVER};
use crate::check::Window;
use crate::rng::Rng;

mod clock;
mod guard;
mod ops;
mod owed;
mod pump;
mod step;

use clock::Clock;

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
    /// When a try's acquire round was last won (the fairness judge's moment of the grant).
    won_at: u64,
    /// Fair mode: a wait script's round went out (the waiter is in line from its wait on, and
    /// its tries are claims), and whether its first wait in line has begun.
    in_line: bool,
    joined: bool,
    /// A release: the lock's id in the history (noted released for the fairness judge once
    /// the release succeeds; one that fails leaves the lock to run out).
    releasing: Option<u64>,
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
    /// The acquisition being started is a permit of the world's semaphore.
    pending_permit: bool,
    /// Per node, the replies its connection owed after the last pump.
    owed: Vec<usize>,
    /// Whether a round was submitted since the last look at the owed replies (the engine's
    /// rule applies to what it queues for a round: it replaces a stale connection first).
    submitted: bool,
    /// Its clock.
    clock: Clock,
    /// How long a reply may be owed before the connection is replaced.
    stale: Duration,
    /// The engine's last deadline the pump saw, and its time on the run's clock.
    timeout_seen: Option<(Instant, u64)>,
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
        // Fair mode: the wait script's round and the ticket's move, and a wait for the bell
        // of up to `FAIR_WAIT_LEASES` claim leases in place of the retry delay.
        let (rounds, delay) = match cfg.fair() {
            Some(f) => (
                rounds + 2,
                fair_wait(f).max(cfg.retry_delay().as_nanos() as u64),
            ),
            None => (rounds, cfg.retry_delay().as_nanos() as u64),
        };
        let gap = rounds * nt + delay + op::WAKE_JITTER.as_nanos() as u64;
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
            pending_permit: false,
            owed: vec![0; n],
            submitted: false,
            stale,
            clock,
            timeout_seen: None,
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
        let local = self.local(sim);
        self.engine.handle_input(node, bytes, local);
        self.pump_at(sim, local);
    }

    /// Node `node`'s socket failed (`kind`) or reached its end; it is gone.
    pub(crate) fn closed(&mut self, sim: &mut Sim, node: usize, kind: std::io::ErrorKind) {
        if let Some(l) = self.links[node].take() {
            sim.client_close(l);
        }
        let local = self.local(sim);
        self.engine
            .handle_closed(node, NodeOutcome::Io(kind), local);
        self.pump_at(sim, local);
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
        if sim.fair.fault_free {
            // A timeout, a connection down or failing: the retries and timeouts fairness
            // leaves out.
            let troubled = round.reports_iter().any(|o| {
                matches!(
                    o,
                    NodeOutcome::Timeout | NodeOutcome::Down | NodeOutcome::Io(_)
                )
            });
            if let (true, State::Run(r)) = (troubled, &self.tasks[k].state) {
                if let Some(a) = sim.fair.acq_mut(r.rec) {
                    a.troubled = true;
                }
            }
        }
        let (t1, first_live) = match &mut self.tasks[k].state {
            State::Run(r) => {
                let first = r.first_round && r.live;
                r.first_round = false;
                r.acquire_won =
                    r.acquire_round && round.decision() == redlock_core::round::Decision::Won;
                if r.acquire_won {
                    r.won_at = sim.now;
                }
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
        let round = if sim.negative == Some(crate::world::Negative::PermitSum) {
            summed(round, self.cfg.quorum())
        } else {
            round
        };
        let t1 = self.clock.local_at(sim, t1);
        self.advance(sim, k, Input::Round(Ok((round, t1))));
    }
}

/// The negative control `permit-sum`: a permit's round tallied as if every yes were for the
/// same slot (the first one named), as a semaphore that counts its holders' yes votes
/// whatever slot each master gave would: a quorum of yeses for different slots then grants
/// a slot that only some masters gave.
fn summed(round: redlock_core::round::Round, quorum: usize) -> redlock_core::round::Round {
    use redlock_core::command::Extra;
    let n = round.node_count();
    let Some(first) = (0..n).find_map(|i| match round.read(i) {
        Some(Extra::Slot(s)) => Some(s),
        _ => None,
    }) else {
        return round;
    };
    let mut out = redlock_core::round::Round::new(n, quorum, redlock_core::round::Until::AllIn);
    for (i, o) in round.reports_iter().enumerate() {
        let extra = match round.read(i) {
            Some(Extra::Slot(_)) => Extra::Slot(first),
            _ => Extra::None,
        };
        out.record_with(i, o.clone(), extra);
    }
    out
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

/// How many claim leases a waiter in line waits for its bell at most: the core's
/// `op::retry::FAIR_WAIT_LEASES` (not exported), as `docs/redlock.md` states it.
const FAIR_WAIT_LEASES: u64 = 8;

/// Fair mode's longest wait for a bell, in nanoseconds.
pub(crate) fn fair_wait(f: &redlock_core::command::Fair) -> u64 {
    f.claim_ms * FAIR_WAIT_LEASES * 1_000_000
}

/// The instant `base + t` nanoseconds.
pub(crate) fn at(base: Instant, t: u64) -> Instant {
    base + Duration::from_nanos(t)
}
