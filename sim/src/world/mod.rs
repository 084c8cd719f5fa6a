//! The simulated world: masters, links and clients on one simulated clock, in one thread.
//!
//! Time is a count of nanoseconds from the start of the run; the instants handed to the core
//! are one base `Instant`, taken once, plus that count, so nothing depends on when the run
//! happens, and the trace records the counts only. Events wait in one queue ordered by (time,
//! sequence number): the same seed gives the same run.
//!
//! | module | its job |
//! |---|---|
//! | `mod.rs` | the world: the event loop, the store, what the checks ask of the world |
//! | `queue.rs` | the event queue, by time and sequence number |
//! | `setup.rs` | a world's setup drawn from the seed, and the fencing debate's scenario |
//! | `faults.rs` | fault episodes: how each begins and ends |
//! | `net.rs` | links that behave as TCP does: delay, splits, holds, FIN and RST |
//! | `client.rs` | simulated clients: a real engine each, the core's operations run as a driver does |
//! | `client/` | a client's clock, the operations a task starts, an operation stepped and ended, guarded locks |
//! | `params.rs` | what a run is made of: the seed, faults, negative controls, sizes |
//! | `liveness.rs` | what the liveness checks know: keys that may still live, masters free of trouble |
//! | `names.rs` | the resources' keys, written once, and their indexes in the history |

use std::time::{Duration, Instant};

use redlock_core::Lock;

use crate::check::{self, History, Violation};
use crate::master::Master;
use crate::rng::Rng;
use crate::trace::Trace;

mod client;
mod faults;
mod liveness;
mod names;
mod net;
mod params;
mod queue;
mod setup;

pub use client::Action;
use client::Client;
use net::{Link, ToClient};
pub use params::{Fault, Faults, Negative, Params};

/// No time at all: a timer not set.
pub(crate) const NEVER: u64 = u64::MAX;

/// The most events one run handles before it counts as stuck.
const MAX_EVENTS: u64 = 50_000_000;

/// The longest a run may last on the simulated clock before it counts as stuck: an hour.
const MAX_TIME: u64 = 3_600 * 1_000_000_000;

/// A direction on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Dir {
    C2s = 0,
    S2c = 1,
}

/// Something that happens at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ev {
    Wake(u32),
    Deliver(u32, Dir),
    Syn(u32),
    Established(u32),
    FaultStart(u32),
    FaultEnd(u32),
}

/// A master with what the simulation adds: up or down, paused, its clock, its faults.
pub(crate) struct MasterSim {
    pub m: Master,
    pub up: bool,
    pub paused: bool,
    pub refusing: bool,
    pub hostile: bool,
    pub slow_until: u64,
    pub slow_extra: u64,
    /// Its wall clock at the start, in milliseconds.
    wall0: u64,
    /// How fast its clock runs, in parts per million (within the drift factor).
    ppm: i64,
    /// How far its clock has jumped ahead (negative control only).
    jump: u64,
    /// Its live links.
    pub links: Vec<u32>,
    /// When it last lost its data (a restart without it), if it did.
    pub lost_data_at: Option<u64>,
}

impl MasterSim {
    /// Its clock at `t`, in milliseconds.
    pub fn ms(&self, t: u64) -> u64 {
        // In 64 bits when nothing overflows (always, within a run's hour), else in 128: the
        // same quotients either way.
        let narrow = i64::try_from(t).ok().and_then(|t| {
            let x = t
                .checked_add(t.checked_mul(self.ppm)? / 1_000_000)?
                .checked_add(i64::try_from(self.jump).ok()?)?;
            Some(self.wall0 + (x.max(0) / 1_000_000) as u64)
        });
        if let Some(ms) = narrow {
            return ms;
        }
        let t = i128::from(t);
        let x = t + t * i128::from(self.ppm) / 1_000_000 + i128::from(self.jump);
        self.wall0 + (x.max(0) / 1_000_000) as u64
    }
}

/// A fault episode drawn for the run.
#[derive(Debug, Clone, Copy)]
struct Episode {
    kind: EpisodeKind,
    start: u64,
    len: u64,
    /// Its target: a master, a client, a link (chosen when it starts).
    a: u32,
    b: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EpisodeKind {
    Fault(Fault),
    Negative(Negative),
}

/// Per resource: who is working on it (for the liveness check).
#[derive(Debug, Clone, Copy, Default)]
struct ResState {
    busy: i32,
    last_start: (u64, u32, u32),
    tainted_until: u64,
    /// Operations in flight that may set its keys (acquisitions and extensions).
    setters: i32,
    /// When every key of it that an operation which ended may have set is gone, at the latest
    /// ([`Sim::keys_bound`]).
    keys_gone: u64,
}

/// Everything but the clients.
pub(crate) struct Sim {
    base: Instant,
    pub now: u64,
    queue: queue::Queue,
    pub masters: Vec<MasterSim>,
    pub links: Vec<Link>,
    pub hist: History,
    pub trace: Trace,
    pub faults: Faults,
    pub resources: u32,
    /// The world's semaphore, if it has one: its slots are resources of the history too,
    /// after the locks' (`2 * resources + i` for slot `i`).
    pub semaphore: Option<redlock_core::Semaphore>,
    /// The resources' keys by their history's index (see
    /// [`resource_name`](Sim::resource_name)), written once.
    names: Vec<String>,
    db: u32,
    net_rng: Rng,
    fault_rng: Rng,
    lat_lo: u64,
    lat_hi: u64,
    split_all: bool,
    cut: Vec<u64>,
    /// The highest token the fenced store took, per resource.
    store: Vec<u64>,
    res: Vec<ResState>,
    next_lock: u64,
    /// Whether some master lost data or its clock jumped (the keys' promise is void).
    keys_void: bool,
    episodes: Vec<Episode>,
    pub byte_losses: u64,
    pub hostile_replies: u64,
    events: u64,
    /// Per master, its troubles: (from, until) of every fault that touched it or a link to it
    /// (`NEVER`: not over yet).
    trouble: Vec<Vec<(u64, u64)>>,
    /// Per fault episode, the troubles it began: (master, index).
    ep_trouble: Vec<Vec<(u32, u32)>>,
    /// The drift factor the world's clients are configured with.
    drift: f64,
    /// The longest one-way delay of a link with no fault.
    delay_max: u64,
    /// The longest ttl any client asks for.
    ttl_max: u64,
    /// Whether the liveness checks after expiry apply (no byte loss, no negative control that
    /// breaks the masters).
    pub expiry_checks: bool,
    /// Tries the liveness check after expiry judged (a quorum clean, the keys expired, nobody
    /// else trying).
    pub expiry_judged: u64,
    /// The negative control of the run, if any.
    pub negative: Option<Negative>,
    /// The most replies one connection owed.
    pub owed_max: u64,
    /// What fairness is judged on.
    pub fair: crate::fairness::FairLog,
    /// Buffers kept between uses: a master's output on its way to a link, and a segment
    /// with a piece lost.
    out: Vec<u8>,
    lost: Vec<u8>,
}

/// What a run came to.
#[derive(Debug)]
pub struct Outcome {
    /// Operations started.
    pub operations: u64,
    /// Locks acquired.
    pub acquisitions: u64,
    /// What the checker found.
    pub violations: Vec<Violation>,
    /// The hash of the trace.
    pub trace_hash: u64,
    /// The trace, when asked for.
    pub trace: Vec<String>,
    /// Events handled.
    pub events: u64,
    /// Simulated time the run took, in nanoseconds.
    pub sim_ns: u64,
    /// Fault episodes drawn.
    pub episodes: u64,
    /// Clients, operations per task and fault episodes, as drawn or given (for shrinking).
    pub sizes: (u32, u32, u32),
    /// Bytes dropped mid-stream (byte loss) and hostile replies sent.
    pub byte_losses: u64,
    /// Hostile replies sent.
    pub hostile_replies: u64,
    /// Tries the liveness check after expiry judged.
    pub expiry_judged: u64,
    /// Guarded locks, and those whose guard reported loss.
    pub guards: (u64, u64),
    /// The most replies one connection owed.
    pub owed_max: u64,
    /// Connections the clients' engines dropped: out of step (a reply that did not fit, a
    /// wrong sentinel), and owing a reply past every deadline.
    pub replaced: (u64, u64),
    /// Locks granted to clients in fair mode.
    pub fair_acquisitions: u64,
    /// Fair mode's broken promises (`fairness.rs`), apart from `violations`, and the places
    /// in line they judged.
    pub fairness: crate::fairness::Judged,
}

/// A world: masters, links and clients, ready to run.
pub struct World {
    sim: Sim,
    clients: Vec<Client>,
    finished: Vec<bool>,
    /// How many clients have finished.
    done: usize,
    /// Clients, operations per task and fault episodes, as drawn or given.
    sizes: (u32, u32, u32),
    /// The bytes of the segment being handed to a client (kept between deliveries).
    bytes: Vec<u8>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.sim.now)
            .field("clients", &self.clients.len())
            .finish_non_exhaustive()
    }
}

/// The base instant of every run in this process: taken once.
fn base() -> Instant {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

impl Sim {
    fn new(seed: u64, faults: Faults, trace: bool) -> Sim {
        Sim {
            base: base(),
            now: 0,
            queue: queue::Queue::default(),
            masters: Vec::new(),
            links: Vec::new(),
            hist: History::default(),
            trace: Trace::new(trace),
            faults,
            resources: 1,
            semaphore: None,
            names: Vec::new(),
            db: 0,
            net_rng: Rng::new(seed, 2),
            fault_rng: Rng::new(seed, 3),
            lat_lo: 20_000,
            lat_hi: 500_000,
            split_all: false,
            cut: Vec::new(),
            store: Vec::new(),
            res: Vec::new(),
            next_lock: 1,
            keys_void: false,
            episodes: Vec::new(),
            byte_losses: 0,
            hostile_replies: 0,
            events: 0,
            trouble: Vec::new(),
            ep_trouble: Vec::new(),
            drift: 0.01,
            delay_max: 750_000,
            ttl_max: 1_000_000_000,
            expiry_checks: false,
            expiry_judged: 0,
            negative: None,
            owed_max: 0,
            fair: crate::fairness::FairLog::default(),
            out: Vec::new(),
            lost: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, t: u64, ev: Ev) {
        self.queue.push(t, ev);
    }

    /// The instant `t` nanoseconds into the run.
    pub(crate) fn instant_of(&self, t: u64) -> Instant {
        client::at(self.base, t)
    }

    /// An instant as nanoseconds into the run.
    pub(crate) fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base)
            .as_nanos()
            .min(u128::from(NEVER - 1)) as u64
    }

    /// Arms client `c`'s wake-up at `t` (unless an earlier one is armed).
    pub(crate) fn wake(&mut self, c: &mut Client, t: u64) {
        if t < c.armed {
            c.armed = t;
            self.push(t, Ev::Wake(c.id));
        }
    }

    pub(crate) fn next_lock(&mut self) -> u64 {
        self.next_lock += 1;
        self.next_lock - 1
    }

    /// Whether every resource of `ids` is free: no key on any master, nobody working on it.
    /// Whether a node timeout of `t` leaves time for a fresh connection's first round on the
    /// slowest link with no fault: the SYN, its answer, the command and its reply, four
    /// one-way delays of at most one and a half times the highest latency. (With a shorter
    /// one, a first round may time out on a link that is merely slow: no claim is made.)
    pub(crate) fn connects_within(&self, t: Duration) -> bool {
        let one_way = self.lat_hi + self.lat_hi / 2 + 1;
        t.as_nanos() > u128::from(4 * one_way + 100_000)
    }

    pub(crate) fn is_free(&self, ids: &[u32]) -> bool {
        ids.iter().all(|&id| {
            let r = &self.res[id as usize];
            let key = self.key_of(id);
            r.busy == 0
                && r.tainted_until <= self.now
                && self
                    .masters
                    .iter()
                    .all(|m| m.m.peek(self.db, key.as_bytes(), m.ms(self.now)).is_none())
        })
    }

    /// An operation of `client`'s task `task` on `ids` starts (`delta` 1) or ends (-1).
    pub(crate) fn touch(&mut self, ids: &[u32], client: u32, task: u32, delta: i32) {
        for &id in ids {
            let r = &mut self.res[id as usize];
            r.busy += delta;
            if delta > 0 {
                r.last_start = (self.now, client, task);
            }
        }
    }

    /// Commands to `ids` may still be in flight from an operation nobody waits for.
    pub(crate) fn taint(&mut self, ids: &[u32]) {
        for &id in ids {
            self.res[id as usize].tainted_until = self.now + 1_000_000_000;
        }
    }

    /// Whether the operation of `client`'s `task` that started at `t` has been alone on
    /// `ids` since.
    pub(crate) fn still_alone(&self, ids: &[u32], client: u32, task: u32, t: u64) -> bool {
        ids.iter().all(|&id| {
            let r = &self.res[id as usize];
            r.busy == 1 && r.last_start == (t, client, task) && r.tainted_until <= self.now
        })
    }

    /// A write to the fenced store: taken unless it carries a token below the highest taken.
    pub(crate) fn store_write(&mut self, r: u32, token: Option<u64>) -> bool {
        match token {
            None => true,
            Some(t) => {
                let high = &mut self.store[r as usize];
                if t >= *high {
                    *high = t;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// A lock just granted: every node whose yes won it must hold its token in every key (a
    /// yes taken from another command's reply would show here).
    /// `since` is when the operation started: a master that lost its data since then (a
    /// delayed restart) is not asked.
    pub(crate) fn check_granted(&mut self, c: &Client, lock: &Lock, since: u64) {
        if self.keys_void {
            return;
        }
        for node in lock.granted_by() {
            let m = &self.masters[c.perm[node] as usize];
            if m.lost_data_at.is_some_and(|t| t >= since) {
                continue;
            }
            let ms = m.ms(self.now);
            for name in lock.resources() {
                let held = m.m.peek(self.db, name.as_bytes(), ms);
                if held.map(|v| &v[..]) != Some(lock.token().as_bytes()) {
                    let detail = format!(
                        "c{}: lock on {name} granted by node {node} (master {}), which holds {:?}, not the token {}",
                        c.id,
                        c.perm[node],
                        held.map(|v| String::from_utf8_lossy(v).into_owned()),
                        lock.token().as_str()
                    );
                    self.hist.note("misattributed", self.now, detail);
                }
            }
        }
    }
}

impl World {
    /// Runs the world to its end and checks its history.
    pub fn run(mut self) -> (Outcome, History) {
        for c in 0..self.clients.len() {
            let client = &mut self.clients[c];
            let cfg = client.cfg();
            let words = || {
                format!(
                    "c{c}: masters {:?}, quorum {}, node timeout {:?}, tries {}, retry delay {:?}, drift {}, fail-fast {}, fenced {}, scripts {:?}, wake-ups {}, verify {}, fair {:?}",
                    client.perm, cfg.quorum(), cfg.node_timeout(), cfg.tries(), cfg.retry_delay(),
                    cfg.drift_factor(), cfg.fail_fast(), cfg.fencing_key().is_some(), client.scripts(), cfg.wakeups(), cfg.verify_stream(),
                    cfg.fair().map(|f| (String::from_utf8_lossy(&f.id).into_owned(), f.claim_ms))
                )
            };
            self.sim.trace.ev(0, 40, c as u64, 0, words);
            let client = &mut self.clients[c];
            client.pump(&mut self.sim);
            self.note_finished(c);
        }
        let mut stuck = None;
        while let Some((t, ev)) = self.sim.queue.pop() {
            if self.done == self.clients.len() {
                break;
            }
            self.sim.events += 1;
            if self.sim.events > MAX_EVENTS || t > MAX_TIME {
                stuck = Some(t);
                break;
            }
            self.sim.now = t;
            self.handle(ev);
        }
        let sim = &mut self.sim;
        if let Some(t) = stuck.or_else(|| (!self.finished.iter().all(|f| *f)).then_some(sim.now)) {
            sim.hist.note(
                "stuck",
                t,
                format!(
                    "the run did not end: {} events, {:.3} ms simulated",
                    sim.events,
                    t as f64 / 1e6
                ),
            );
        }
        let violations = check::check(&sim.hist);
        let fairness = crate::fairness::check(&sim.fair, &sim.hist);
        let mut fair_acquisitions = 0;
        let mut last = None;
        for w in &sim.hist.windows {
            if last != Some(w.lock) && sim.fair.clients.get(w.holder.client as usize) == Some(&true)
            {
                fair_acquisitions += 1;
            }
            last = Some(w.lock);
        }
        let replaced = self.clients.iter().fold((0, 0), |(d, s), c| {
            let (cd, cs) = c.replaced();
            (d + cd, s + cs)
        });
        let outcome = Outcome {
            operations: sim.hist.ops.len() as u64,
            acquisitions: sim.hist.acquisitions() as u64,
            violations,
            trace_hash: sim.trace.hash(),
            trace: sim.trace.lines().to_vec(),
            events: sim.events,
            sim_ns: sim.now,
            episodes: sim.episodes.len() as u64,
            sizes: self.sizes,
            byte_losses: sim.byte_losses,
            hostile_replies: sim.hostile_replies,
            expiry_judged: sim.expiry_judged,
            guards: (
                sim.hist.guards.len() as u64,
                sim.hist
                    .guards
                    .iter()
                    .filter(|g| g.lost_at.is_some())
                    .count() as u64,
            ),
            owed_max: sim.owed_max,
            replaced,
            fair_acquisitions,
            fairness,
        };
        (outcome, std::mem::take(&mut sim.hist))
    }

    fn note_finished(&mut self, c: usize) {
        if !self.finished[c] && self.clients[c].finished() {
            self.finished[c] = true;
            self.done += 1;
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Wake(c) => {
                let client = &mut self.clients[c as usize];
                if client.armed != self.sim.now {
                    return;
                }
                client.armed = NEVER;
                client.pump(&mut self.sim);
                self.note_finished(c as usize);
            }
            Ev::Deliver(l, Dir::C2s) => self.sim.deliver_c2s(l),
            Ev::Deliver(l, Dir::S2c) => {
                let mut first = true;
                let mut bytes = std::mem::take(&mut self.bytes);
                while let Some(what) = self.sim.pop_s2c(l, first, &mut bytes) {
                    first = false;
                    self.hand_to_client(l, what, &bytes);
                }
                self.bytes = bytes;
            }
            Ev::Syn(l) => self.sim.on_syn(l),
            Ev::Established(l) => {
                let link = &self.sim.links[l as usize];
                let (c, node) = (link.client as usize, link.node as usize);
                if link.client_gone || link.server_gone || self.clients[c].links[node] != Some(l) {
                    return;
                }
                self.clients[c].connected(&mut self.sim, node);
                self.note_finished(c);
            }
            Ev::FaultStart(e) => self.fault_start(e),
            Ev::FaultEnd(e) => self.fault_end(e),
        }
    }

    fn hand_to_client(&mut self, l: u32, what: ToClient, bytes: &[u8]) {
        let link = &self.sim.links[l as usize];
        let (c, node) = (link.client as usize, link.node as usize);
        if self.clients[c].links[node] != Some(l) {
            return;
        }
        match what {
            ToClient::Bytes => self.clients[c].input(&mut self.sim, node, bytes),
            ToClient::Closed(kind) => self.clients[c].closed(&mut self.sim, node, kind),
        }
        self.note_finished(c);
    }
}
