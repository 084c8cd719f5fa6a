//! A world set up: everything a seed does not fix drawn from it (masters and their profiles,
//! links' latencies, clients and their configurations, fault episodes), and the fencing
//! debate's scenario.

use std::time::Duration;

use redlock_core::{Options, Scripts};

use super::client::{Action, Client, Spec};
use super::{
    Episode, EpisodeKind, Ev, Fault, Faults, MasterSim, Negative, Params, ResState, Sim, World,
};
use crate::master::Master;
use crate::profile::{Denied, Profile, Server, User};
use crate::rng::Rng;

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
        // Fair mode (waiters in line on the masters) in two worlds of five, for three clients
        // of four of those that may run it, drawn from streams of their own, so that the other
        // worlds keep their schedules.
        let fair_world = Rng::new(seed, 0x4ff).chance(400);
        sim.fair.fault_free = params.faults.is_empty() && params.negative.is_none();
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
            // Drawn apart from the world's stream, so that worlds without it keep their
            // schedules: every client under byte loss (where it is what holds replies to their
            // commands), a fifth of them elsewhere (the mode under every other fault).
            o.verify_stream = params.faults.has(Fault::ByteLoss)
                || Rng::new(seed, 0x300 + u64::from(id)).chance(200);
            // Fair mode needs wake-ups (RESP3: every simulated server has it) and scripts by
            // `EVALSHA`/`EVAL` (the core turns it off under `Scripts::Function`); the user
            // denied scripting on some masters does not run it. Its id, from the seed.
            let mut fairs = Rng::new(seed, 0x500 + u64::from(id));
            if fair_world
                && o.wakeups
                && scripts != Scripts::Function
                && !user.starts_with("limited")
                && fairs.chance(750)
            {
                o.fair = true;
                o.client_id = format!("{:012x}-{id}", fairs.next_u64() >> 16);
                let nt = o.node_timeout.as_nanos() as u64;
                o.claim_lease = if fairs.chance(500) {
                    redlock_core::DEFAULT_CLAIM_LEASE
                } else {
                    Duration::from_millis(fairs.range((4 * nt / 1_000_000).max(10), 200))
                };
            }
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
            sim.fair.clients.push(cfg.fair().is_some());
            cl.push(Client::new(id, cfg, seed, perm, spec));
        }
        sim.cut = vec![0; cl.len()];
        // Half the worlds have a semaphore of 1 to 4 permits (drawn from a stream of its own:
        // see `Params::semaphores`).
        let mut sems = Rng::new(seed, 7);
        if params.semaphores && sems.chance(500) {
            let permits = sems.range(1, 4) as usize;
            sim.semaphore = redlock_core::Semaphore::new("s0", permits).ok();
        }
        let slots = sim.semaphore.as_ref().map_or(0, |s| s.permits());
        sim.store = vec![0; 2 * sim.resources as usize + slots];
        sim.res = vec![ResState::default(); 2 * sim.resources as usize + slots];
        sim.name_resources();
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
            sim.fair.clients.push(false);
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
}
