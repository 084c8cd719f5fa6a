//! The simulated world: masters, links and clients on one simulated clock, in one thread.
//!
//! Time is a count of nanoseconds from the start of the run; the instants handed to the core
//! are one base `Instant`, taken once, plus that count, so nothing depends on when the run
//! happens, and the trace records the counts only. Events wait in one queue ordered by (time,
//! sequence number): the same seed gives the same run.
//!
//! | module | its job |
//! |---|---|
//! | `mod.rs` | the world: its setup drawn from the seed, the event loop, faults, the store |
//! | `net.rs` | links that behave as TCP does: delay, splits, holds, FIN and RST |
//! | `client.rs` | simulated clients: a real engine each, the core's operations run as a driver does |
//! | `params.rs` | what a run is made of: the seed, faults, negative controls, sizes |
//! | `liveness.rs` | what the liveness checks know: keys that may still live, masters free of trouble |

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use redlock_core::lock::Names;
use redlock_core::{Lock, Options, Scripts};

use crate::check::{self, History, Violation};
use crate::master::Master;
use crate::profile::{Denied, Profile, Server, User};
use crate::rng::Rng;
use crate::trace::Trace;

mod client;
mod liveness;
mod net;
mod params;

pub use client::Action;
use client::{Client, Spec};
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
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    pub masters: Vec<MasterSim>,
    pub links: Vec<Link>,
    pub hist: History,
    pub trace: Trace,
    pub faults: Faults,
    pub resources: u32,
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
            seq: 0,
            queue: BinaryHeap::new(),
            masters: Vec::new(),
            links: Vec::new(),
            hist: History::default(),
            trace: Trace::new(trace),
            faults,
            resources: 1,
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
            out: Vec::new(),
            lost: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, ev)));
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

    /// The key of resource `r` (fenced locks have their own).
    pub(crate) fn resource_name(&self, r: u32, fenced: bool) -> String {
        format!("{}{r}", if fenced { 'f' } else { 'r' })
    }

    /// The history's index of resource `r`.
    pub(crate) fn resource_id(&self, r: u32, fenced: bool) -> u32 {
        if fenced {
            self.resources + r
        } else {
            r
        }
    }

    /// The history's index of the resource named `name`.
    pub(crate) fn resource_id_of(&self, name: &str) -> u32 {
        let r: u32 = name[1..].parse().unwrap_or(0);
        self.resource_id(r, name.starts_with('f'))
    }

    pub(crate) fn names_of(&self, res: &[u32], fenced: bool) -> Names {
        let names: Vec<String> = res.iter().map(|r| self.resource_name(*r, fenced)).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        redlock_core::lock::names(&refs).unwrap_or_default()
    }

    pub(crate) fn names(&self, res: &[u32]) -> Names {
        self.names_of(res, false)
    }

    fn key_of(&self, id: u32) -> String {
        if id >= self.resources {
            self.resource_name(id - self.resources, true)
        } else {
            self.resource_name(id, false)
        }
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
    /// The world of `params`: everything not in them drawn from the seed.
    pub fn new(params: &Params) -> World {
        let seed = params.seed;
        let mut rng = Rng::new(seed, 1);
        let mut sim = Sim::new(seed, params.faults, params.trace);
        let n = rng.pick(&[(10, 1), (10, 2), (30, 3), (5, 4), (30, 5), (5, 6), (10, 7)]) as usize;
        let drift = rng.pick(&[(70, 0.01), (15, 0.001), (15, 0.05)]);
        let ttl_max: u64 = rng.pick(&[(40, 50), (40, 200), (20, 1000)]) * 1_000_000;
        let nt_max: u64 = rng.pick(&[(30, 5), (50, 20), (20, 50)]) * 1_000_000;
        sim.lat_lo = rng.range(10_000, 100_000);
        sim.lat_hi = sim.lat_lo + rng.range(0, 400_000);
        sim.split_all = params.faults.has(Fault::Split) && rng.chance(100);
        sim.resources = rng.pick(&[(50, 1), (30, 2), (20, 3)]);
        sim.db = if rng.chance(200) { 2 } else { 0 };
        let acl = params.faults.has(Fault::Hostile) && rng.chance(150);
        // Clients' clocks drift too in half the worlds with drift (drawn from a stream of
        // their own, so that the other half runs as it did before): then the masters' and the
        // clients' rates share the drift factor, each within 45% of it, so that a client and a
        // master differ by at most 90% of it, as masters alone do in the other worlds.
        let mut clocks = Rng::new(seed, 4);
        let client_drift = params.faults.has(Fault::Drift) && clocks.chance(500);
        let share = if client_drift { 0.45 } else { 0.9 };
        for i in 0..n {
            let server = rng.pick(&[
                (25, Server::Redis62),
                (25, Server::Redis70),
                (25, Server::Redis84),
                (25, Server::Valkey91),
            ]);
            let mut profile =
                Profile::new(server).with_user(User::new("app", "pw", Denied::Nothing));
            if acl {
                let denied = rng.pick(&[
                    (1, Denied::Scripting),
                    (1, Denied::Eval),
                    (1, Denied::Native),
                ]);
                profile = profile.with_user(User::new("limited", "pw", denied));
            }
            let ppm = if params.negative == Some(Negative::SlowMasters) {
                -250_000
            } else if params.faults.has(Fault::Drift) {
                let bound = (drift * share * 1e6) as u64;
                rng.range(0, 2 * bound) as i64 - bound as i64
            } else {
                0
            };
            sim.masters.push(MasterSim {
                m: Master::new(profile),
                up: true,
                paused: false,
                refusing: false,
                hostile: false,
                slow_until: 0,
                slow_extra: 0,
                wall0: 1_700_000_000_000 + rng.range(0, 1_000_000_000),
                ppm,
                jump: 0,
                links: Vec::new(),
                lost_data_at: None,
            });
            let _ = i;
        }
        // Drawn whether given or not, so that giving the drawn value replays the same world.
        let drawn = (
            rng.range(2, 5) as u32,
            rng.range(4, 20) as u32,
            rng.range(1, 12) as u32,
        );
        let clients = params.clients.unwrap_or(drawn.0).max(1);
        let ops = params.ops.unwrap_or(drawn.1);
        let all_functions = sim
            .masters
            .iter()
            .all(|m| m.m.profile().server.has_functions());
        let episode_negative = params.negative.filter(|n| n.is_episode());
        let live_world = params.faults.is_empty() && episode_negative.is_none() && !acl;
        sim.trouble = vec![Vec::new(); n];
        sim.drift = drift;
        sim.delay_max = sim.lat_hi + sim.lat_hi / 2 + 1;
        sim.ttl_max = ttl_max;
        sim.expiry_checks = !params.faults.has(Fault::ByteLoss) && episode_negative.is_none();
        sim.negative = params.negative;
        let all_native = sim
            .masters
            .iter()
            .all(|m| m.m.profile().server.has_set_ifeq());
        let mut cl = Vec::new();
        for id in 0..clients {
            let fenced = rng.chance(350);
            let scripts = rng.pick(&[
                (40, Scripts::Auto),
                (25, Scripts::Eval),
                (15, Scripts::Native),
                (20, Scripts::Function),
            ]);
            let scripts = if scripts == Scripts::Function && !all_functions {
                Scripts::Auto
            } else {
                scripts
            };
            let user = if acl && rng.chance(500) {
                "limited:pw@"
            } else if rng.chance(300) {
                "app:pw@"
            } else {
                ""
            };
            let mut perm: Vec<u32> = (0..n as u32).collect();
            for i in (1..perm.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                perm.swap(i, j);
            }
            let db = if sim.db != 0 {
                format!("/{}", sim.db)
            } else {
                String::new()
            };
            let nodes: Vec<String> = perm
                .iter()
                .map(|m| format!("redis://{user}127.0.0.1:{}{db}", 7000 + m))
                .collect();
            let mut o = Options::with_nodes(&nodes);
            o.node_timeout = Duration::from_nanos(rng.range(2_000_000, nt_max));
            o.tries = rng.range(1, 5) as u32;
            o.retry_delay = Duration::from_nanos(rng.range(0, 200_000_000));
            o.drift_factor = drift;
            o.fail_fast = rng.chance(800);
            o.fencing = fenced;
            o.scripts = scripts;
            o.wakeups = rng.chance(700);
            let cfg = o.validate().expect("the simulator draws valid options");
            let ttl_min = (cfg.min_ttl().as_nanos() as u64).max(10_000_000);
            let ppm = if params.negative == Some(Negative::ClientClockSlow) && id == 0 {
                -200_000
            } else if client_drift {
                let bound = (drift * share * 1e6) as u64;
                clocks.range(0, 2 * bound) as i64 - bound as i64
            } else {
                0
            };
            let spec = Spec {
                fenced,
                ttl_min,
                ttl_max: ttl_max.max(ttl_min),
                tasks: rng.range(1, 3) as u32,
                ops,
                live: live_world,
                // A user denied scripts cannot take every lock, and under `Scripts::Native` a
                // server without native commands is sent no release (a failed try's keys stay
                // until their ttl): neither is held to liveness after expiry.
                expiry_live: !user.starts_with("limited")
                    && (scripts != Scripts::Native || all_native),
                plans: Vec::new(),
                scripts,
                ppm,
            };
            cl.push(Client::new(id, cfg, seed, perm, spec));
        }
        sim.cut = vec![0; cl.len()];
        sim.store = vec![0; 2 * sim.resources as usize];
        sim.res = vec![ResState::default(); 2 * sim.resources as usize];
        // The fault episodes, over about the time the operations take.
        let horizon = u64::from(ops) * ttl_max / 2 + 10_000_000;
        let episodic: Vec<Fault> = params
            .faults
            .kinds()
            .into_iter()
            .filter(|f| {
                !matches!(
                    f,
                    Fault::Drift | Fault::Split | Fault::ClientPause | Fault::ByteLoss
                )
            })
            .collect();
        let count = match params.episodes {
            Some(e) => e,
            None if episodic.is_empty() && episode_negative.is_none() => 0,
            None => drawn.2,
        };
        for _ in 0..count {
            let kind = match episode_negative {
                Some(neg) if episodic.is_empty() || rng.chance(600) => EpisodeKind::Negative(neg),
                _ if episodic.is_empty() => continue,
                _ => EpisodeKind::Fault(episodic[rng.below(episodic.len() as u64) as usize]),
            };
            let len = match kind {
                EpisodeKind::Fault(Fault::Restart) => {
                    // The delayed restart: down for at least the longest ttl, on a clock that
                    // may run slow by the drift factor.
                    (ttl_max as f64 * (1.0 + 2.0 * drift)) as u64 + rng.range(1_000_000, 50_000_000)
                }
                EpisodeKind::Negative(Negative::RestartWithoutDelay) => {
                    rng.range(100_000, 5_000_000)
                }
                EpisodeKind::Negative(Negative::ClockJump) => 0,
                EpisodeKind::Fault(Fault::Delay) => rng.range(1_000_000, 3 * nt_max),
                _ => rng.range(1_000_000, ttl_max.max(2 * nt_max)),
            };
            let jump = ttl_max + rng.range(0, 2 * ttl_max);
            sim.episodes.push(Episode {
                kind,
                start: rng.range(0, horizon),
                len,
                a: rng.below(n as u64) as u32,
                b: jump.min(u64::from(u32::MAX)) as u32,
            });
        }
        sim.ep_trouble = vec![Vec::new(); sim.episodes.len()];
        // A fenced world keeps its masters' data: the counter must outlive every lock.
        for e in 0..sim.episodes.len() {
            let t = sim.episodes[e].start;
            sim.push(t, Ev::FaultStart(e as u32));
        }
        let finished = vec![false; cl.len()];
        World {
            sim,
            clients: cl,
            finished,
            done: 0,
            bytes: Vec::new(),
            sizes: (clients, ops, count),
        }
    }

    /// The fencing debate: a holder paused past its validity, a second holder who writes, and
    /// the first one's late write, on three Redis 7.0 masters with no fault; every lock
    /// fenced or none.
    pub fn fencing_debate(fenced: bool) -> World {
        let mut sim = Sim::new(0, Faults::NONE, true);
        for _ in 0..3 {
            sim.masters.push(MasterSim {
                m: Master::new(Profile::redis_7_0()),
                up: true,
                paused: false,
                refusing: false,
                hostile: false,
                slow_until: 0,
                slow_extra: 0,
                wall0: 1_700_000_000_000,
                ppm: 0,
                jump: 0,
                links: Vec::new(),
                lost_data_at: None,
            });
        }
        let ms = Duration::from_millis;
        let plans = [
            vec![Action::Lock(0, ms(50)), Action::Use(ms(200))],
            vec![
                Action::Wait(ms(100)),
                Action::Lock(0, ms(50)),
                Action::Use(ms(0)),
                Action::Unlock,
            ],
        ];
        let mut clients = Vec::new();
        for (id, plan) in plans.into_iter().enumerate() {
            let nodes: Vec<String> = (0..3).map(|m| format!("127.0.0.1:{}", 7000 + m)).collect();
            let mut o = Options::with_nodes(&nodes);
            o.fencing = fenced;
            o.node_timeout = ms(10);
            let cfg = o.validate().expect("valid options");
            let spec = Spec {
                fenced: false,
                ttl_min: 50_000_000,
                ttl_max: 50_000_000,
                tasks: 1,
                ops: 0,
                live: false,
                expiry_live: false,
                plans: vec![plan],
                scripts: Scripts::Auto,
                ppm: 0,
            };
            clients.push(Client::new(id as u32, cfg, 7, vec![0, 1, 2], spec));
        }
        sim.cut = vec![0; clients.len()];
        sim.store = vec![0; 2];
        sim.res = vec![ResState::default(); 2];
        sim.trouble = vec![Vec::new(); 3];
        let finished = vec![false; clients.len()];
        World {
            sim,
            clients,
            finished,
            done: 0,
            bytes: Vec::new(),
            sizes: (2, 0, 0),
        }
    }

    /// Runs the world to its end and checks its history.
    pub fn run(mut self) -> (Outcome, History) {
        for c in 0..self.clients.len() {
            let client = &mut self.clients[c];
            let cfg = client.cfg();
            let words = || {
                format!(
                    "c{c}: masters {:?}, quorum {}, node timeout {:?}, tries {}, retry delay {:?}, drift {}, fail-fast {}, fenced {}, scripts {:?}, wake-ups {}",
                    client.perm, cfg.quorum(), cfg.node_timeout(), cfg.tries(), cfg.retry_delay(),
                    cfg.drift_factor(), cfg.fail_fast(), cfg.fencing_key().is_some(), client.scripts(), cfg.wakeups()
                )
            };
            self.sim.trace.ev(0, 40, c as u64, 0, words);
            let client = &mut self.clients[c];
            client.pump(&mut self.sim);
            self.note_finished(c);
        }
        let mut stuck = None;
        while let Some(Reverse((t, _, ev))) = self.sim.queue.pop() {
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

    fn fault_start(&mut self, e: u32) {
        let ep = self.sim.episodes[e as usize];
        let sim = &mut self.sim;
        let m = ep.a as usize;
        let mut end = Some(sim.now + ep.len);
        let words = match ep.kind {
            EpisodeKind::Fault(Fault::Delay) => {
                let nt = self
                    .clients
                    .iter()
                    .map(|c| c.cfg().node_timeout().as_nanos() as u64)
                    .max()
                    .unwrap_or(1);
                sim.masters[m].slow_until = sim.now + ep.len;
                sim.masters[m].slow_extra = sim.fault_rng.range(nt / 4, 3 * nt);
                sim.trouble_begin(m, sim.now + ep.len);
                end = None;
                format!(
                    "master {m}'s links slowed by {:.3} ms",
                    sim.masters[m].slow_extra as f64 / 1e6
                )
            }
            EpisodeKind::Fault(Fault::Refuse) => {
                sim.masters[m].refusing = true;
                sim.trouble_for(e, m);
                format!("master {m} refuses connections")
            }
            EpisodeKind::Fault(Fault::Reset) => {
                end = None;
                match sim.some_live_link(None) {
                    Some(l) => {
                        sim.reset(l);
                        let lm = sim.links[l as usize].master as usize;
                        sim.trouble_begin(lm, sim.now);
                        format!("link {l} reset")
                    }
                    None => "no link to reset".into(),
                }
            }
            EpisodeKind::Fault(Fault::HalfClose) => {
                end = None;
                match sim.some_live_link(None) {
                    Some(l) => {
                        sim.half_close(l);
                        let lm = sim.links[l as usize].master as usize;
                        sim.trouble_begin(lm, sim.now);
                        format!("link {l} half-closed by the master")
                    }
                    None => "no link to half-close".into(),
                }
            }
            EpisodeKind::Fault(Fault::Blackhole) => match sim.some_live_link(None) {
                Some(l) => {
                    sim.links[l as usize].blackhole = true;
                    sim.episodes[e as usize].b = l;
                    let lm = sim.links[l as usize].master as usize;
                    sim.trouble_for(e, lm);
                    format!("link {l} blackholed")
                }
                None => {
                    end = None;
                    "no link to blackhole".into()
                }
            },
            EpisodeKind::Fault(Fault::Partition) => {
                let c = sim.fault_rng.below(sim.cut.len() as u64) as usize;
                let n = sim.masters.len() as u64;
                let mask = (sim.fault_rng.below((1u64 << n) - 1) + 1) & ((1u64 << n) - 1);
                sim.cut[c] |= mask;
                for cut in 0..n as usize {
                    if mask & (1 << cut) != 0 {
                        sim.trouble_for(e, cut);
                    }
                }
                sim.episodes[e as usize].a = c as u32;
                sim.episodes[e as usize].b = mask as u32;
                format!("client {c} cut off from masters {mask:#b}")
            }
            EpisodeKind::Fault(Fault::Pause) => {
                sim.masters[m].paused = true;
                sim.trouble_for(e, m);
                format!("master {m} paused")
            }
            EpisodeKind::Fault(Fault::Crash) => {
                if !sim.masters[m].up {
                    end = None;
                    format!("master {m} already down")
                } else {
                    sim.crash_master(m, true);
                    sim.trouble_for(e, m);
                    format!("master {m} crashed (data kept)")
                }
            }
            EpisodeKind::Fault(Fault::Restart)
            | EpisodeKind::Negative(Negative::RestartWithoutDelay) => {
                let fenced = self.clients.iter().any(|c| c.cfg().fencing_key().is_some());
                let negative = matches!(ep.kind, EpisodeKind::Negative(_));
                if !sim.masters[m].up {
                    end = None;
                    format!("master {m} already down")
                } else if fenced && !negative {
                    // The counter must outlive every lock: fenced masters keep their data.
                    sim.crash_master(m, true);
                    sim.trouble_for(e, m);
                    format!("master {m} crashed (data kept: fenced clients)")
                } else {
                    sim.crash_master(m, false);
                    sim.trouble_for(e, m);
                    sim.masters[m].lost_data_at = Some(sim.now);
                    if negative {
                        sim.keys_void = true;
                    }
                    format!(
                        "master {m} crashed, data lost, back in {:.3} ms",
                        ep.len as f64 / 1e6
                    )
                }
            }
            EpisodeKind::Fault(Fault::Hostile) => {
                sim.masters[m].hostile = true;
                sim.trouble_for(e, m);
                format!("master {m} sends hostile replies")
            }
            EpisodeKind::Negative(Negative::ClockJump) => {
                end = None;
                sim.masters[m].jump += u64::from(ep.b) * 1_000;
                sim.trouble_begin(m, NEVER);
                sim.keys_void = true;
                format!(
                    "master {m}'s clock jumps {:.3} ms ahead",
                    f64::from(ep.b) / 1e3
                )
            }
            EpisodeKind::Fault(_) | EpisodeKind::Negative(_) => {
                end = None;
                String::new()
            }
        };
        sim.trace
            .ev(sim.now, 30, u64::from(e), 0, || format!("fault: {words}"));
        if let Some(t) = end {
            sim.push(t, Ev::FaultEnd(e));
        }
    }

    fn fault_end(&mut self, e: u32) {
        let ep = self.sim.episodes[e as usize];
        let sim = &mut self.sim;
        for (m, i) in std::mem::take(&mut sim.ep_trouble[e as usize]) {
            sim.trouble_end(m as usize, i);
        }
        let m = ep.a as usize;
        let words = match ep.kind {
            EpisodeKind::Fault(Fault::Refuse) => {
                sim.masters[m].refusing = false;
                format!("master {m} accepts connections")
            }
            EpisodeKind::Fault(Fault::Blackhole) => {
                let l = ep.b;
                sim.links[l as usize].blackhole = false;
                if sim.fault_rng.chance(300) {
                    sim.reset(l);
                    format!("link {l} blackhole ends in a reset")
                } else {
                    sim.rearm(l);
                    format!("link {l} delivers what it held")
                }
            }
            EpisodeKind::Fault(Fault::Partition) => {
                let c = ep.a as usize;
                sim.cut[c] &= !u64::from(ep.b);
                for l in 0..sim.links.len() as u32 {
                    if sim.links[l as usize].client as usize == c {
                        sim.rearm(l);
                    }
                }
                format!("client {c}'s partition healed")
            }
            EpisodeKind::Fault(Fault::Pause) => {
                sim.masters[m].paused = false;
                for l in sim.masters[m].links.clone() {
                    sim.rearm(l);
                }
                format!("master {m} resumed")
            }
            EpisodeKind::Fault(Fault::Crash | Fault::Restart)
            | EpisodeKind::Negative(Negative::RestartWithoutDelay) => {
                sim.masters[m].up = true;
                format!("master {m} restarted")
            }
            EpisodeKind::Fault(Fault::Hostile) => {
                sim.masters[m].hostile = false;
                format!("master {m} honest again")
            }
            _ => String::new(),
        };
        sim.trace.ev(sim.now, 31, u64::from(e), 0, || {
            format!("fault ends: {words}")
        });
    }
}
