//! Concurrent lock+unlock pairs on distinct resources against five local masters, every
//! client in the same run: the minimal pipelined reference (one thread, batches of C pairs),
//! redlock-mux's async client and rslock, each on tokio's multi-thread and current-thread
//! runtimes, with C concurrent tasks.
//!
//! Run: `cargo run --release --manifest-path benches/Cargo.toml --bin concurrent -- --seconds 10 --tasks 64,256`

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::reference::Pipelined;
use common::{arg, token, us, Samples};
use redlock_mux::local::LocalCluster;

const TTL: Duration = Duration::from_secs(10);

struct Outcome {
    name: String,
    pairs: u64,
    elapsed: Duration,
    latency: Samples,
}

impl Outcome {
    fn pps(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn reference(addrs: &[String], tasks: usize, run: Duration) -> Outcome {
    let mut p = Pipelined::connect(addrs).unwrap();
    let mut latency = Samples::with_capacity(1 << 16);
    let mut pairs = 0u64;
    let mut batch = 0u64;
    let start = Instant::now();
    while start.elapsed() < run {
        let keys: Vec<String> = (0..tasks)
            .map(|i| format!("conc:ref:{batch}:{i}"))
            .collect();
        let tokens: Vec<String> = (0..tasks).map(|_| token()).collect();
        let t = Instant::now();
        let won = p.pairs(&keys, &tokens, TTL.as_millis() as u64).unwrap();
        let took = t.elapsed();
        assert_eq!(won, tasks);
        // Every pair of the batch waited the whole batch.
        for _ in 0..tasks {
            latency.push(took);
        }
        pairs += tasks as u64;
        batch += 1;
    }
    Outcome {
        name: format!("reference pipelined (1 thread, batches of {tasks})"),
        pairs,
        elapsed: start.elapsed(),
        latency,
    }
}

fn runtime(multi: bool) -> tokio::runtime::Runtime {
    if multi {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }
}

/// Runs `tasks` copies of `pair` (lock+unlock on the given key) for `run`, on `rt`.
fn drive<F, Fut>(
    rt: &tokio::runtime::Runtime,
    tasks: usize,
    run: Duration,
    tag: &str,
    pair: F,
) -> (u64, Duration, Samples)
where
    F: Fn(String) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let tag = tag.to_string();
    rt.block_on(async move {
        let start = Instant::now();
        let mut handles = Vec::new();
        for t in 0..tasks {
            let pair = pair.clone();
            let stop = stop.clone();
            let tag = tag.clone();
            handles.push(tokio::spawn(async move {
                let mut lat = Samples::with_capacity(4096);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    pair(format!("conc:{tag}:{t}:{i}")).await;
                    lat.push(t0.elapsed());
                    i += 1;
                }
                (i, lat)
            }));
        }
        tokio::time::sleep(run).await;
        stop.store(true, Ordering::Relaxed);
        let mut pairs = 0;
        let mut all = Samples::with_capacity(1 << 16);
        for h in handles {
            let (n, lat) = h.await.unwrap();
            pairs += n;
            all.extend(&lat);
        }
        (pairs, start.elapsed(), all)
    })
}

fn mux(addrs: &[String], tasks: usize, run: Duration, multi: bool) -> Outcome {
    let rt = runtime(multi);
    let client = rt.block_on(async {
        redlock_mux::AsyncRedlock::builder()
            .nodes(addrs)
            .node_timeout(Duration::from_millis(500))
            .build_async()
            .unwrap()
    });
    let tag = if multi { "mux-mt" } else { "mux-ct" };
    let pair = move |key: String| {
        let client = client.clone();
        async move {
            let lock = client.lock(&key, TTL).await.unwrap();
            client.unlock(&lock).await.unwrap();
        }
    };
    // Warm-up.
    drive(&rt, tasks, Duration::from_millis(300), "warm", pair.clone());
    let (pairs, elapsed, latency) = drive(&rt, tasks, run, tag, pair);
    Outcome {
        name: format!(
            "redlock-mux async ({})",
            if multi {
                "multi-thread"
            } else {
                "current-thread"
            }
        ),
        pairs,
        elapsed,
        latency,
    }
}

fn rslock(addrs: &[String], tasks: usize, run: Duration, multi: bool) -> Outcome {
    let rt = runtime(multi);
    let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}")).collect();
    let mgr = rslock::LockManager::new(urls);
    let tag = if multi { "rs-mt" } else { "rs-ct" };
    let pair = move |key: String| {
        let mgr = mgr.clone();
        async move {
            let lock = mgr.lock(key.as_bytes(), TTL).await.unwrap();
            mgr.unlock(&lock).await;
        }
    };
    drive(
        &rt,
        tasks,
        Duration::from_millis(300),
        "warm-rs",
        pair.clone(),
    );
    let (pairs, elapsed, latency) = drive(&rt, tasks, run, tag, pair);
    Outcome {
        name: format!(
            "rslock ({})",
            if multi {
                "multi-thread"
            } else {
                "current-thread"
            }
        ),
        pairs,
        elapsed,
        latency,
    }
}

fn main() {
    let seconds: f64 = arg("--seconds", 10.0);
    let tasks_list: String = arg("--tasks", "64,256".to_string());
    let cluster = LocalCluster::start(5).expect("start 5 redis-server (scripts/install-deps)");
    let addrs = cluster.addrs();
    let run = Duration::from_secs_f64(seconds);
    for tasks in tasks_list
        .split(',')
        .filter_map(|t| t.trim().parse::<usize>().ok())
    {
        let results = vec![
            reference(&addrs, tasks, run),
            mux(&addrs, tasks, run, true),
            mux(&addrs, tasks, run, false),
            rslock(&addrs, tasks, run, true),
            rslock(&addrs, tasks, run, false),
        ];
        let base = results[0].pps();
        let rs_mt = results[3].pps();
        println!("\n{tasks}-way concurrent lock+unlock pairs on distinct resources, 5 local masters, {seconds} s each\n");
        println!(
            "{:<48} {:>10} {:>8} {:>9} {:>10} {:>10}",
            "client", "pairs/s", "x ref", "x rslock", "pair p50", "pair p99"
        );
        for r in &results {
            println!(
                "{:<48} {:>10.0} {:>7.2}x {:>8.2}x {:>10} {:>10}",
                r.name,
                r.pps(),
                r.pps() / base,
                r.pps() / rs_mt,
                us(r.latency.quantile(0.5)),
                us(r.latency.quantile(0.99)),
            );
        }
        println!("\npair latency in microseconds; x rslock = against rslock on its default multi-thread runtime");
    }
}
