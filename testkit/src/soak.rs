//! The soak: blocking threads and async tasks contend for one resource through the proxies
//! while a fault schedule drawn from a seed pauses, kills, delays, blackholes and resets the
//! nodes, and the checker watches every critical section. Used by `tests/safety.rs` (short)
//! and `examples/soak.rs` (as long as asked).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::local::LocalCluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::checker::{Checker, Window};
use crate::proxy::{Fault, Proxy};

/// A kind of fault the soak's schedule can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// A master stopped with SIGSTOP, then resumed.
    Pause,
    /// A master killed, and restarted after the largest ttl (the delayed-restart rule).
    Kill,
    /// Replies delayed, some past the node timeout.
    Latency,
    /// Nothing forwarded either way for a while; the bytes are delivered when it ends.
    Blackhole,
    /// A connection reset halfway through a reply.
    Reset,
    /// The client's side of its connection closed (FIN), the server's left open.
    HalfClose,
    /// Replies dribbled a byte at a time.
    Slow,
    /// Every connection closed, new ones refused, for a while.
    Drop,
    /// Bytes discarded from live streams: no real network does this to TCP. Off unless
    /// named; never part of the safety counts.
    LoseBytes,
}

impl FaultKind {
    /// Every kind, in the order the names are listed.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Pause,
        FaultKind::Kill,
        FaultKind::Latency,
        FaultKind::Blackhole,
        FaultKind::Reset,
        FaultKind::HalfClose,
        FaultKind::Slow,
        FaultKind::Drop,
        FaultKind::LoseBytes,
    ];

    /// The kinds a real network or host produces: the default mix, and the one behind the
    /// safety counts.
    pub fn real() -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|k| *k != FaultKind::LoseBytes)
            .collect()
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Kill => "kill",
            FaultKind::Latency => "latency",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Reset => "reset",
            FaultKind::HalfClose => "half-close",
            FaultKind::Slow => "slow",
            FaultKind::Drop => "drop",
            FaultKind::LoseBytes => "lose-bytes",
        }
    }

    /// A comma-separated list of names; `real` stands for [`FaultKind::real`], `none` for no
    /// kind at all.
    pub fn parse_list(list: &str) -> Result<Vec<FaultKind>, String> {
        let mut out = Vec::new();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "none" => {}
                "real" => out.extend(FaultKind::real()),
                _ => out.push(
                    FaultKind::ALL
                        .into_iter()
                        .find(|k| k.name() == word)
                        .ok_or_else(|| {
                            let names: Vec<&str> =
                                FaultKind::ALL.iter().map(|k| k.name()).collect();
                            format!(
                                "unknown fault kind {word:?} (known: real, none, {})",
                                names.join(", ")
                            )
                        })?,
                ),
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// One fault the schedule injected: on which node, what, and when (on the soak's clock).
#[derive(Debug, Clone, Copy)]
pub struct Injected {
    pub node: usize,
    pub kind: FaultKind,
    pub from: Instant,
    pub until: Instant,
}

#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub duration: Duration,
    pub seed: u64,
    /// Blocking clients, one thread and one `Redlock` each.
    pub threads: usize,
    /// Async clients, tasks sharing one `AsyncRedlock` on a multi-thread runtime.
    pub tasks: usize,
    pub ttl: Duration,
    pub node_timeout: Duration,
    /// The kinds of fault the schedule draws from (none: no faults).
    pub faults: Vec<FaultKind>,
    /// Chance that a holder stalls past its validity inside its critical section.
    pub stall_chance: f64,
    /// Whether every client is fenced: the checker then also asserts that tokens strictly
    /// increase, and the masters keep their data (`appendfsync always`) as the fencing
    /// guarantee requires.
    pub fencing: bool,
    /// How many resources the holders spread over (holder `k` contends for resource
    /// `k % resources`): more acquisitions per second for a long fenced soak.
    pub resources: usize,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            duration: Duration::from_secs(10),
            seed: 1,
            threads: 4,
            tasks: 4,
            ttl: Duration::from_millis(500),
            node_timeout: Duration::from_millis(50),
            faults: FaultKind::real(),
            stall_chance: 0.01,
            fencing: false,
            resources: 1,
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub acquisitions: usize,
    pub failed_attempts: u64,
    pub faults: BTreeMap<&'static str, u64>,
    pub overlaps: usize,
    /// Fenced acquisitions checked, and the fenced windows whose token did not increase.
    pub fenced: usize,
    pub token_decreases: usize,
    pub detector_hits: u64,
    pub past_validity: u64,
    pub acquire_p50: Duration,
    pub acquire_p99: Duration,
    /// Each overlap and token decrease in words, with the faults in force around it (the
    /// first few of each).
    pub explanations: Vec<String>,
    /// Every holder's window, for other checkers to judge (the simulator's, in
    /// `examples/soak.rs`), and the instant the run's clock counts from.
    pub windows: Vec<Window>,
    pub origin: Option<Instant>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "acquisitions          {}", self.acquisitions)?;
        writeln!(f, "failed attempts       {}", self.failed_attempts)?;
        writeln!(f, "overlaps              {}", self.overlaps)?;
        writeln!(
            f,
            "fenced acquisitions   {} ({} token decreases)",
            self.fenced, self.token_decreases
        )?;
        writeln!(f, "work past validity    {}", self.past_validity)?;
        writeln!(
            f,
            "detector hits         {} (all past validity when overlaps is 0)",
            self.detector_hits
        )?;
        writeln!(
            f,
            "acquire p50 / p99     {:.0} us / {:.0} us",
            self.acquire_p50.as_secs_f64() * 1e6,
            self.acquire_p99.as_secs_f64() * 1e6
        )?;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        write!(f, "faults injected       {}", faults.join(", "))?;
        for e in &self.explanations {
            write!(f, "\n{e}")?;
        }
        Ok(())
    }
}

/// The key of resource `k`.
fn resource(k: usize) -> String {
    format!("soak:resource:{k}")
}

fn quantile(v: &mut [u64], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Duration::from_nanos(v[rank - 1])
}

pub fn run(cfg: &SoakConfig) -> Report {
    // Fencing needs masters that keep the counter across a crash; the keys are kept too.
    let persistence: &[&str] = if cfg.fencing {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &[]
    };
    let mut cluster = LocalCluster::start_with(5, persistence)
        .expect("start redis-server (scripts/install-deps)");
    let proxies: Vec<Proxy> = cluster
        .servers()
        .iter()
        .map(|s| Proxy::start(s.addr()))
        .collect();
    let addrs: Vec<String> = proxies.iter().map(Proxy::addr).collect();
    let checker = Arc::new(Checker::new());
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stalls = Arc::new(AtomicU64::new(0));
    let builder = redlock_mux::Redlock::builder()
        .nodes(&addrs)
        .node_timeout(cfg.node_timeout)
        .retry(3, Duration::from_millis(10))
        .fencing(cfg.fencing);

    let mut handles = Vec::new();
    // Threads share clients two by two, so that rounds carrying two callers' commands (the
    // blocking client's pipelining) run under the faults too.
    let shared: Vec<Arc<redlock_mux::Redlock>> = (0..cfg.threads.div_ceil(2))
        .map(|_| Arc::new(builder.clone().build().unwrap()))
        .collect();
    for t in 0..cfg.threads {
        let client = shared[t / 2].clone();
        let (checker, stop, failed, latencies, stalls) = (
            checker.clone(),
            stop.clone(),
            failed.clone(),
            latencies.clone(),
            stalls.clone(),
        );
        let (ttl, stall_chance) = (cfg.ttl, cfg.stall_chance);
        let seed = cfg.seed.wrapping_mul(1000).wrapping_add(t as u64);
        let which = t % cfg.resources.max(1);
        let key = resource(which);
        handles.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut lat = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let start = Instant::now();
                match client.lock(&key, ttl) {
                    Ok(lock) => {
                        lat.push(start.elapsed().as_nanos() as u64);
                        let section = checker.enter_lock(t, which, start, &lock);
                        // The holder's work, and now and then a stall (a GC pause, a swap)
                        // that outlasts the validity.
                        if rng.random_bool(stall_chance) {
                            stalls.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(ttl + Duration::from_millis(20));
                        } else {
                            std::thread::sleep(Duration::from_micros(rng.random_range(0..1500)));
                        }
                        checker.leave(section);
                        let _ = client.unlock(&lock);
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            latencies.lock().unwrap().extend(lat);
        }));
    }
    if cfg.tasks > 0 {
        let (checker, stop, failed, latencies, stalls) = (
            checker.clone(),
            stop.clone(),
            failed.clone(),
            latencies.clone(),
            stalls.clone(),
        );
        let (tasks, ttl, threads, seed) = (cfg.tasks, cfg.ttl, cfg.threads, cfg.seed);
        let stall_chance = cfg.stall_chance;
        let resources = cfg.resources.max(1);
        let builder = builder.clone();
        handles.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = builder.build_async().unwrap();
                let mut joins = Vec::new();
                for k in 0..tasks {
                    let holder = threads + k;
                    let (client, checker, stop, failed, latencies, stalls) = (
                        client.clone(),
                        checker.clone(),
                        stop.clone(),
                        failed.clone(),
                        latencies.clone(),
                        stalls.clone(),
                    );
                    let seed = seed.wrapping_mul(1000).wrapping_add(holder as u64);
                    let which = holder % resources;
                    let key = resource(which);
                    joins.push(tokio::spawn(async move {
                        let mut rng = StdRng::seed_from_u64(seed);
                        let mut lat = Vec::new();
                        while !stop.load(Ordering::SeqCst) {
                            let start = Instant::now();
                            match client.lock(&key, ttl).await {
                                Ok(lock) => {
                                    lat.push(start.elapsed().as_nanos() as u64);
                                    let section = checker.enter_lock(holder, which, start, &lock);
                                    let work = if rng.random_bool(stall_chance) {
                                        stalls.fetch_add(1, Ordering::SeqCst);
                                        ttl + Duration::from_millis(20)
                                    } else {
                                        Duration::from_micros(rng.random_range(0..1500))
                                    };
                                    tokio::time::sleep(work).await;
                                    checker.leave(section);
                                    let _ = client.unlock(&lock).await;
                                }
                                Err(_) => {
                                    failed.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        }
                        latencies.lock().unwrap().extend(lat);
                    }));
                }
                for j in joins {
                    j.await.unwrap();
                }
            });
        }));
    }

    // The fault schedule, from the seed: one fault at a time on one node, healed before the
    // next, so a majority is always up and every window must stay exclusive.
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut log: Vec<Injected> = Vec::new();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let origin = Instant::now();
    let end = origin + cfg.duration;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(rng.random_range(20..120)));
        if cfg.faults.is_empty() {
            continue;
        }
        let node = rng.random_range(0..5);
        let hold = Duration::from_millis(rng.random_range(20..300));
        let kind = cfg.faults[rng.random_range(0..cfg.faults.len())];
        let from = Instant::now();
        match kind {
            FaultKind::Pause => {
                cluster.server(node).pause().unwrap();
                std::thread::sleep(hold);
                cluster.server(node).resume().unwrap();
            }
            FaultKind::Kill => {
                // A crash, and a restart delayed past the largest ttl: the rule that keeps a
                // master that lost its keys from granting a held lock again.
                cluster.server(node).stop();
                std::thread::sleep(cfg.ttl + Duration::from_millis(50));
                cluster.server(node).restart().unwrap();
            }
            kind => {
                // A network fault on the node's proxy, for `hold`, then healed.
                let fault = match kind {
                    FaultKind::Latency => Fault::Latency {
                        fixed: Duration::from_millis(rng.random_range(20..100)),
                        jitter: Duration::from_millis(50),
                    },
                    FaultKind::Blackhole => Fault::Blackhole,
                    FaultKind::Reset => Fault::ResetMidReply,
                    FaultKind::HalfClose => Fault::HalfClose,
                    FaultKind::Slow => Fault::Slow {
                        delay: Duration::from_millis(rng.random_range(1..30)),
                    },
                    FaultKind::LoseBytes => Fault::LoseBytes,
                    _ => Fault::Drop,
                };
                proxies[node].set(fault);
                std::thread::sleep(hold);
                proxies[node].set(Fault::Pass);
            }
        }
        log.push(Injected {
            node,
            kind,
            from,
            until: Instant::now(),
        });
        *faults.entry(kind.name()).or_default() += 1;
    }
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().unwrap();
    }
    let stalls = stalls.load(Ordering::SeqCst);
    if stalls > 0 {
        faults.insert("client stall past validity", stalls);
    }
    let mut lat = std::mem::take(&mut *latencies.lock().unwrap());
    let overlaps = checker.overlaps();
    let decreases = checker.token_decreases();
    let around = |a: &Window, b: &Window| {
        let (from, until) = (a.asked.min(b.asked), a.until.max(b.until));
        let active: Vec<String> = log
            .iter()
            .filter(|f| f.from < until && f.until + cfg.ttl > from)
            .map(|f| {
                let ms = |t: Instant| t.saturating_duration_since(origin).as_secs_f64() * 1e3;
                format!(
                    "{} on node {} from {:.1} to {:.1} ms",
                    f.kind.name(),
                    f.node,
                    ms(f.from),
                    ms(f.until)
                )
            })
            .collect();
        format!(
            "\n  first:  {}\n  second: {}\n  faults within a ttl of them: {}",
            a.explain(origin),
            b.explain(origin),
            if active.is_empty() {
                "none".to_string()
            } else {
                active.join("; ")
            }
        )
    };
    let mut explanations = Vec::new();
    for o in overlaps.iter().take(5) {
        explanations.push(format!(
            "OVERLAP by {:?}:{}",
            o.by,
            around(&o.first, &o.second)
        ));
    }
    for d in decreases.iter().take(5) {
        explanations.push(format!("TOKEN DECREASE:{}", around(&d.earlier, &d.later)));
    }
    Report {
        acquisitions: checker.acquisitions(),
        failed_attempts: failed.load(Ordering::SeqCst),
        faults,
        overlaps: overlaps.len(),
        fenced: checker.fenced(),
        token_decreases: decreases.len(),
        detector_hits: checker.detector_hits(),
        past_validity: checker.past_validity(),
        acquire_p50: quantile(&mut lat, 0.5),
        acquire_p99: quantile(&mut lat, 0.99),
        explanations,
        windows: checker.windows(),
        origin: Some(origin),
    }
}
