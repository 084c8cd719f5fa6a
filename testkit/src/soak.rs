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

use crate::checker::Checker;
use crate::proxy::{Fault, Proxy};

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
    /// Whether to inject faults at all.
    pub faults: bool,
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
            faults: true,
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
        write!(f, "faults injected       {}", faults.join(", "))
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
                        let section = checker.enter_fenced(
                            t,
                            which,
                            lock.valid_until(),
                            lock.fencing_token(),
                        );
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
                                    let section = checker.enter_fenced(
                                        holder,
                                        which,
                                        lock.valid_until(),
                                        lock.fencing_token(),
                                    );
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
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let end = Instant::now() + cfg.duration;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(rng.random_range(20..120)));
        if !cfg.faults {
            continue;
        }
        let node = rng.random_range(0..5);
        let hold = Duration::from_millis(rng.random_range(20..300));
        let kind = rng.random_range(0..8);
        let name = match kind {
            0 => {
                cluster.server(node).pause().unwrap();
                std::thread::sleep(hold);
                cluster.server(node).resume().unwrap();
                "sigstop pause"
            }
            1 => {
                // A crash, and a restart delayed past the largest ttl: the rule that keeps a
                // master that lost its keys from granting a held lock again.
                cluster.server(node).stop();
                std::thread::sleep(cfg.ttl + Duration::from_millis(50));
                cluster.server(node).restart().unwrap();
                "kill + delayed restart"
            }
            kind => {
                // A network fault on the node's proxy, for `hold`, then healed.
                let (fault, name) = match kind {
                    2 => (
                        Fault::Latency {
                            fixed: Duration::from_millis(rng.random_range(20..100)),
                            jitter: Duration::from_millis(50),
                        },
                        "latency spike",
                    ),
                    3 => (Fault::Blackhole, "blackhole"),
                    4 => (Fault::ResetMidReply, "reset mid-reply"),
                    6 => (Fault::HalfClose, "half-close"),
                    7 => (
                        Fault::Slow {
                            delay: Duration::from_millis(rng.random_range(1..30)),
                        },
                        "slow replies",
                    ),
                    _ => (Fault::Drop, "dropped connections"),
                };
                proxies[node].set(fault);
                std::thread::sleep(hold);
                proxies[node].set(Fault::Pass);
                name
            }
        };
        *faults.entry(name).or_default() += 1;
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
    for o in overlaps.iter().take(5) {
        eprintln!("OVERLAP: {o:?}");
    }
    let decreases = checker.token_decreases();
    for d in decreases.iter().take(5) {
        eprintln!("TOKEN DECREASE: {d:?}");
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
    }
}
