//! Contention: N clients, each with its own connections, loop lock (with retries) - hold for a
//! fixed short time - unlock on one resource, on five local masters. Reports acquisitions per
//! second, the hand-off latency (from one holder starting its release to the next holder's
//! lock returning; p50 and p99) and, where the client lets us count them, rounds per
//! acquisition. This is the polling baseline that server-pushed wake-ups (issue 14) are to
//! beat: every client here waits for a held lock by sleeping its retry delay.
//!
//! Run: `cargo run --release --manifest-path benches/Cargo.toml --bin contention --
//! [--seconds 3] [--levels 2,8,32] [--hold-ms 1]`

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::arg;
use testkit::local::LocalCluster;

const TTL: Duration = Duration::from_secs(10);
const RESOURCE: &str = "bench:contended";

/// One holder's tenure: when its lock returned, and when it started to release.
#[derive(Debug, Clone, Copy)]
struct Tenure {
    holder: usize,
    acquired: Instant,
    released: Instant,
}

#[derive(Default)]
struct Outcome {
    tenures: Mutex<Vec<Tenure>>,
    rounds: AtomicU64,
    counted: AtomicBool,
}

impl Outcome {
    fn report(&self, name: &str, clients: usize, elapsed: Duration) -> String {
        let mut t = self.tenures.lock().unwrap().clone();
        t.sort_by_key(|t| t.acquired);
        // A hand-off is to another client: a holder that takes the lock again at once is not
        // one (it did not wait).
        let mut handoffs: Vec<u64> = t
            .windows(2)
            .filter(|w| w[1].acquired >= w[0].released && w[1].holder != w[0].holder)
            .map(|w| (w[1].acquired - w[0].released).as_nanos() as u64)
            .collect();
        let mut per_holder = vec![0usize; clients.max(1)];
        for x in &t {
            per_holder[x.holder.min(clients.max(1) - 1)] += 1;
        }
        let top = per_holder.iter().max().copied().unwrap_or(0);
        handoffs.sort_unstable();
        let q = |p: f64| {
            if handoffs.is_empty() {
                return f64::NAN;
            }
            let rank = ((p * handoffs.len() as f64).ceil() as usize).clamp(1, handoffs.len());
            handoffs[rank - 1] as f64 / 1e6
        };
        let rounds = if self.counted.load(Ordering::Relaxed) && !t.is_empty() {
            format!(
                "{:.1}",
                self.rounds.load(Ordering::Relaxed) as f64 / t.len() as f64
            )
        } else {
            "–".to_string()
        };
        format!(
            "| {clients} | {name} | {:.0} | {} | {:.2} | {:.2} | {rounds} | {:.0}% |",
            t.len() as f64 / elapsed.as_secs_f64(),
            handoffs.len(),
            q(0.5),
            q(0.99),
            100.0 * top as f64 / t.len().max(1) as f64
        )
    }
}

/// redlock-mux's blocking client: one `Redlock` per client thread, `try_lock` rounds with the
/// same randomized delay `lock` uses, counted.
fn mux_blocking(nodes: &[String], clients: usize, slice: Duration, hold: Duration) -> String {
    let out = Arc::new(Outcome::default());
    out.counted.store(true, Ordering::Relaxed);
    let start = Instant::now();
    std::thread::scope(|s| {
        for holder in 0..clients {
            let out = out.clone();
            let client = redlock_mux::Redlock::builder()
                .nodes(nodes)
                .node_timeout(Duration::from_millis(200))
                .build()
                .unwrap();
            s.spawn(move || {
                let delay = client.config().retry_delay();
                while start.elapsed() < slice {
                    out.rounds.fetch_add(1, Ordering::Relaxed);
                    match client.try_lock(RESOURCE, TTL) {
                        Ok(lock) => {
                            let acquired = Instant::now();
                            std::thread::sleep(hold);
                            let released = Instant::now();
                            let _ = client.unlock(&lock);
                            out.tenures.lock().unwrap().push(Tenure {
                                holder,
                                acquired,
                                released,
                            });
                        }
                        Err(_) => {
                            let ms = rand::random_range(delay.as_millis() / 2..=delay.as_millis());
                            std::thread::sleep(Duration::from_millis(ms as u64));
                        }
                    }
                }
            });
        }
    });
    out.report(
        "redlock-mux blocking (polling: try_lock + retry delay)",
        clients,
        start.elapsed(),
    )
}

/// rslock: one `LockManager` per client task, its `lock` (which retries on its own) until it
/// returns a lock.
fn rslock(nodes: &[String], clients: usize, slice: Duration, hold: Duration) -> String {
    let urls: Vec<String> = nodes.iter().map(|n| format!("redis://{n}")).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = Arc::new(Outcome::default());
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for holder in 0..clients {
            let mgr = rslock::LockManager::new(urls.clone());
            let out = out.clone();
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < slice {
                    if let Ok(lock) = mgr.lock(RESOURCE.as_bytes(), TTL).await {
                        let acquired = Instant::now();
                        tokio::time::sleep(hold).await;
                        let released = Instant::now();
                        mgr.unlock(&lock).await;
                        out.tenures.lock().unwrap().push(Tenure {
                            holder,
                            acquired,
                            released,
                        });
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    out.report("rslock 0.10 (its own retries)", clients, start.elapsed())
}

fn main() {
    let seconds: f64 = arg("--seconds", 3.0);
    let levels: String = arg("--levels", "2,8,32".to_string());
    let hold = Duration::from_millis(arg("--hold-ms", 1));
    let slice = Duration::from_secs_f64(seconds);
    let cluster = LocalCluster::start(5).expect("five redis-server (scripts/install-deps)");
    let nodes = cluster.addrs();
    println!(
        "N clients, each with its own connections, loop lock - hold {hold:?} - unlock on one resource, five local masters, {seconds} s per cell. Hand-off: from a holder starting its release to another client's lock returning, in ms (a holder taking the lock straight back is not a hand-off; the busiest client's share shows how often that happens)."
    );
    println!();
    println!("| clients | client | acquisitions/s | hand-offs | hand-off p50 | hand-off p99 | rounds per acquisition | busiest client's share |");
    println!("|---|---|---|---|---|---|---|---|");
    for n in levels
        .split(',')
        .filter_map(|l| l.trim().parse::<usize>().ok())
    {
        println!("{}", mux_blocking(&nodes, n, slice, hold));
        println!("{}", rslock(&nodes, n, slice, hold));
    }
}
