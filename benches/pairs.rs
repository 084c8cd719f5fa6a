//! Sequential lock+unlock pairs against five local masters, every client in the same run.
//!
//! Clients: the minimal std-only fan-out reference (`common/reference.rs`), redlock-mux's
//! blocking client, and rslock on tokio's multi-thread and current-thread runtimes. Each pair
//! takes a fresh resource. The clients take turns in short slices over several rounds, so
//! that a change in machine load falls on all of them alike.
//!
//! Run: `cargo run --release --manifest-path benches/Cargo.toml --bin pairs -- --seconds 2 --rounds 5`

mod common;

use std::time::{Duration, Instant};

use common::reference::FanOut;
use common::{arg, flag, token, us, Samples};
use redlock_mux::local::LocalCluster;

const TTL: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Stats {
    lock: Samples,
    unlock: Samples,
    pairs: u64,
    busy: Duration,
}

impl Stats {
    fn pairs_per_sec(&self) -> f64 {
        self.pairs as f64 / self.busy.as_secs_f64().max(1e-9)
    }
}

trait Client {
    fn name(&self) -> &'static str;
    /// Runs pairs for `slice`, recording into `stats`.
    fn run(&mut self, slice: Duration, round: usize, stats: &mut Stats);
}

struct Reference(FanOut);

impl Client for Reference {
    fn name(&self) -> &'static str {
        "reference fan-out (std)"
    }
    fn run(&mut self, slice: Duration, round: usize, stats: &mut Stats) {
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed() < slice {
            let key = format!("bench:ref:{round}:{i}");
            let tok = token();
            let t = Instant::now();
            assert!(self.0.lock(&key, &tok, TTL.as_millis() as u64).unwrap());
            let t2 = Instant::now();
            self.0.unlock(&key, &tok).unwrap();
            let t3 = Instant::now();
            stats.lock.push(t2 - t);
            stats.unlock.push(t3 - t2);
            i += 1;
        }
        stats.pairs += i;
        stats.busy += start.elapsed();
    }
}

struct Mux(redlock_mux::Redlock);

impl Client for Mux {
    fn name(&self) -> &'static str {
        "redlock-mux blocking"
    }
    fn run(&mut self, slice: Duration, round: usize, stats: &mut Stats) {
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed() < slice {
            let key = format!("bench:mux:{round}:{i}");
            let t = Instant::now();
            let lock = self.0.lock(&key, TTL).unwrap();
            let t2 = Instant::now();
            self.0.unlock(&lock).unwrap();
            let t3 = Instant::now();
            stats.lock.push(t2 - t);
            stats.unlock.push(t3 - t2);
            i += 1;
        }
        stats.pairs += i;
        stats.busy += start.elapsed();
    }
}

struct MuxAsync {
    rt: tokio::runtime::Runtime,
    client: redlock_mux::AsyncRedlock,
    label: &'static str,
}

impl Client for MuxAsync {
    fn name(&self) -> &'static str {
        self.label
    }
    fn run(&mut self, slice: Duration, round: usize, stats: &mut Stats) {
        let client = &self.client;
        self.rt.block_on(async {
            let start = Instant::now();
            let mut i = 0u64;
            while start.elapsed() < slice {
                let key = format!("bench:mux-async:{}:{round}:{i}", self.label.len());
                let t = Instant::now();
                let lock = client.lock(&key, TTL).await.unwrap();
                let t2 = Instant::now();
                client.unlock(&lock).await.unwrap();
                let t3 = Instant::now();
                stats.lock.push(t2 - t);
                stats.unlock.push(t3 - t2);
                i += 1;
            }
            stats.pairs += i;
            stats.busy += start.elapsed();
        });
    }
}

struct Rslock {
    rt: tokio::runtime::Runtime,
    mgr: rslock::LockManager,
    label: &'static str,
}

impl Client for Rslock {
    fn name(&self) -> &'static str {
        self.label
    }
    fn run(&mut self, slice: Duration, round: usize, stats: &mut Stats) {
        let mgr = &self.mgr;
        self.rt.block_on(async {
            let start = Instant::now();
            let mut i = 0u64;
            while start.elapsed() < slice {
                let key = format!("bench:rs:{}:{round}:{i}", self.label.len());
                let t = Instant::now();
                let lock = mgr.lock(key.as_bytes(), TTL).await.unwrap();
                let t2 = Instant::now();
                mgr.unlock(&lock).await;
                let t3 = Instant::now();
                stats.lock.push(t2 - t);
                stats.unlock.push(t3 - t2);
                i += 1;
            }
            stats.pairs += i;
            stats.busy += start.elapsed();
        });
    }
}

fn main() {
    let seconds: f64 = arg("--seconds", 2.0);
    let rounds: usize = arg("--rounds", 5);
    let json = flag("--json");
    let cluster = LocalCluster::start(5).expect("start 5 redis-server (scripts/install-deps)");
    let addrs = cluster.addrs();
    let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}")).collect();

    let rs = |rt: tokio::runtime::Runtime, label| Rslock {
        mgr: rslock::LockManager::new(urls.clone()),
        rt,
        label,
    };
    let mux_async = |rt: tokio::runtime::Runtime, label| {
        let client = rt.block_on(async {
            redlock_mux::AsyncRedlock::builder()
                .nodes(&addrs)
                .node_timeout(Duration::from_millis(200))
                .build_async()
                .unwrap()
        });
        MuxAsync { rt, client, label }
    };
    let mut clients: Vec<Box<dyn Client>> = vec![
        Box::new(Reference(FanOut::connect(&addrs).unwrap())),
        Box::new(Mux(redlock_mux::Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(200))
            .build()
            .unwrap())),
        Box::new(mux_async(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            "redlock-mux async (current-thread)",
        )),
        Box::new(mux_async(
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
            "redlock-mux async (multi-thread)",
        )),
        Box::new(rs(
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap(),
            "rslock (tokio multi-thread)",
        )),
        Box::new(rs(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            "rslock (tokio current-thread)",
        )),
    ];
    // Warm-up: connections, scripts, caches.
    let mut scratch = Stats::default();
    for c in clients.iter_mut() {
        c.run(Duration::from_millis(300), 999, &mut scratch);
    }
    let slice = Duration::from_secs_f64(seconds);
    let mut stats: Vec<Stats> = clients.iter().map(|_| Stats::default()).collect();
    for round in 0..rounds {
        for (c, s) in clients.iter_mut().zip(stats.iter_mut()) {
            c.run(slice, round, s);
        }
    }

    let base = &stats[0];
    let (ref_pps, ref_lock_p50) = (base.pairs_per_sec(), base.lock.quantile(0.5));
    if json {
        print!("[");
    } else {
        println!(
            "sequential lock+unlock pairs, 5 local masters, {rounds} rounds x {seconds} s per client\n"
        );
        println!(
            "{:<32} {:>10} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9}",
            "client",
            "pairs/s",
            "x ref",
            "lock p50",
            "lock p99",
            "lock p999",
            "x ref p50",
            "unl p50",
            "unl p99"
        );
    }
    for (i, (c, s)) in clients.iter().zip(&stats).enumerate() {
        let (p50, p99, p999) = (
            s.lock.quantile(0.5),
            s.lock.quantile(0.99),
            s.lock.quantile(0.999),
        );
        if json {
            print!(
                "{}{{\"client\":\"{}\",\"pairs\":{},\"pairs_per_sec\":{:.1},\"ratio_pairs\":{:.3},\"lock_p50_us\":{},\"lock_p99_us\":{},\"lock_p999_us\":{},\"ratio_lock_p50\":{:.3},\"unlock_p50_us\":{},\"unlock_p99_us\":{}}}",
                if i > 0 { "," } else { "" },
                c.name(),
                s.pairs,
                s.pairs_per_sec(),
                s.pairs_per_sec() / ref_pps,
                us(p50),
                us(p99),
                us(p999),
                p50.as_secs_f64() / ref_lock_p50.as_secs_f64(),
                us(s.unlock.quantile(0.5)),
                us(s.unlock.quantile(0.99)),
            );
        } else {
            println!(
                "{:<32} {:>10.0} {:>8.2}x {:>9} {:>10} {:>10} {:>8.2}x {:>9} {:>9}",
                c.name(),
                s.pairs_per_sec(),
                s.pairs_per_sec() / ref_pps,
                us(p50),
                us(p99),
                us(p999),
                p50.as_secs_f64() / ref_lock_p50.as_secs_f64(),
                us(s.unlock.quantile(0.5)),
                us(s.unlock.quantile(0.99)),
            );
        }
    }
    if json {
        println!("]");
    } else {
        println!(
            "\nlatencies in microseconds; ratios against the reference fan-out client in this run"
        );
    }
}
