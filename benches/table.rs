//! The benchmark table: every client, every concurrency, in one run against the same five
//! local masters, plus client-side instructions per pair under callgrind.
//!
//! Clients: the minimal references (std fan-out for one caller, one-thread pipelining for C
//! callers), redlock-mux blocking (one client per caller thread) and async (C tasks sharing one
//! client, on tokio's multi-thread and current-thread runtimes), rslock (C tasks sharing one
//! `LockManager`, both runtimes), and the `redlock` crate (C threads sharing one `RedLock`).
//! Every pair (lock + unlock) takes a fresh resource, so nothing contends: the table measures
//! the clients, not the lock's queueing. redlock-mux runs with fair mode off (its default since
//! session 16 is on), as the classic algorithm its peers implement: what fair mode adds to an
//! uncontended lock is measured by `features` (1.16x the pair p50).
//!
//! Fairness on a noisy machine: at each concurrency the clients take turns in short slices,
//! over several rounds, so that a change in load falls on all of them alike; ratios are taken
//! against the reference measured in the same turns.
//!
//! Run: `bash benches/table` (builds, runs this with `--callgrind`, writes benches/TABLE.md).
//! `--plot DIR` also draws `DIR/throughput.svg` (pairs/s against callers, every client) and
//! `DIR/latency-64.svg` (the pair latency distribution at 64 callers; `--latency-at N`).

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::plot;
use common::reference::{FanOut, Pipelined};
use common::{arg, flag, runtime, token, us, Samples};
use testkit::local::LocalCluster;

const TTL: Duration = Duration::from_secs(10);

/// What one client did at one concurrency, summed over its turns.
#[derive(Default)]
struct Cell {
    pairs: u64,
    busy: Duration,
    /// Lock + unlock, per pair.
    pair: Samples,
    /// The acquisition alone.
    lock: Samples,
}

impl Cell {
    fn pps(&self) -> f64 {
        self.pairs as f64 / self.busy.as_secs_f64().max(1e-9)
    }
    fn add(&mut self, pairs: u64, busy: Duration, pair: Samples, lock: Samples) {
        self.pairs += pairs;
        self.busy += busy;
        self.pair.extend(&pair);
        self.lock.extend(&lock);
    }
}

/// One pair of a thread-driven client: takes the key, returns the acquisition's latency.
type PairFn<'a> = dyn Fn(usize, &str) -> Duration + Sync + 'a;

/// Runs `callers` threads of `pair` for `slice`; each pair gets a fresh key.
fn threads(
    callers: usize,
    slice: Duration,
    tag: &str,
    pair: &PairFn<'_>,
) -> (u64, Duration, Samples, Samples) {
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let per_thread: Vec<(u64, Samples, Samples)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || {
                    let (mut pairs, mut lat, mut lock) = (
                        0u64,
                        Samples::with_capacity(4096),
                        Samples::with_capacity(4096),
                    );
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("table:{tag}:{t}:{pairs}");
                        let t0 = Instant::now();
                        lock.push(pair(t, &key));
                        lat.push(t0.elapsed());
                        pairs += 1;
                    }
                    (pairs, lat, lock)
                })
            })
            .collect();
        std::thread::sleep(slice);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let busy = start.elapsed();
    let (mut pairs, mut lat, mut lock) = (0, Samples::default(), Samples::default());
    for (n, l, k) in per_thread {
        pairs += n;
        lat.extend(&l);
        lock.extend(&k);
    }
    (pairs, busy, lat, lock)
}

/// Runs `callers` tasks of `pair` on `rt` for `slice`; `pair` returns the acquisition's latency.
fn tasks<F, Fut>(
    rt: &tokio::runtime::Runtime,
    callers: usize,
    slice: Duration,
    tag: &str,
    pair: F,
) -> (u64, Duration, Samples, Samples)
where
    F: Fn(String) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Duration> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let tag = tag.to_string();
    rt.block_on(async move {
        let start = Instant::now();
        let handles: Vec<_> = (0..callers)
            .map(|t| {
                let (pair, stop, tag) = (pair.clone(), stop.clone(), tag.clone());
                tokio::spawn(async move {
                    let (mut pairs, mut lat, mut lock) = (
                        0u64,
                        Samples::with_capacity(4096),
                        Samples::with_capacity(4096),
                    );
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = Instant::now();
                        lock.push(pair(format!("table:{tag}:{t}:{pairs}")).await);
                        lat.push(t0.elapsed());
                        pairs += 1;
                    }
                    (pairs, lat, lock)
                })
            })
            .collect();
        tokio::time::sleep(slice).await;
        stop.store(true, Ordering::Relaxed);
        let (mut pairs, mut lat, mut lock) = (0, Samples::default(), Samples::default());
        for h in handles {
            let (n, l, k) = h.await.expect("bench task");
            pairs += n;
            lat.extend(&l);
            lock.extend(&k);
        }
        (pairs, start.elapsed(), lat, lock)
    })
}

fn flavour(multi: bool) -> &'static str {
    if multi {
        "multi-thread"
    } else {
        "current-thread"
    }
}

/// The clients of the table, each able to run a turn at any concurrency.
enum Client {
    Reference {
        addrs: Vec<String>,
    },
    /// One `Redlock` shared by every caller thread.
    MuxBlocking {
        client: redlock_mux::Redlock,
    },
    MuxAsync {
        rt: tokio::runtime::Runtime,
        client: redlock_mux::AsyncRedlock,
        multi: bool,
    },
    Rslock {
        rt: tokio::runtime::Runtime,
        mgr: rslock::LockManager,
        multi: bool,
    },
    RedlockCrate {
        rl: redlock::RedLock,
    },
    /// node-redlock 4.2 on ioredis, a process per turn (`benches/node/bench.js`).
    Node {
        addrs: Vec<String>,
    },
}

impl Client {
    fn all(addrs: &[String]) -> Vec<Client> {
        let addrs = addrs.to_vec();
        let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}")).collect();
        let mut clients = vec![
            Client::Reference {
                addrs: addrs.clone(),
            },
            Client::MuxBlocking {
                client: redlock_mux::Redlock::builder()
                    .fair(false)
                    .nodes(&addrs)
                    .node_timeout(Duration::from_millis(500))
                    .build()
                    .expect("blocking client"),
            },
        ];
        for multi in [true, false] {
            let rt = runtime(multi);
            let client = rt.block_on(async {
                redlock_mux::AsyncRedlock::builder()
                    .fair(false)
                    .nodes(&addrs)
                    .node_timeout(Duration::from_millis(500))
                    .build_async()
                    .expect("async client")
            });
            clients.push(Client::MuxAsync { rt, client, multi });
        }
        for multi in [true, false] {
            clients.push(Client::Rslock {
                rt: runtime(multi),
                mgr: rslock::LockManager::new(urls.clone()),
                multi,
            });
        }
        clients.push(Client::RedlockCrate {
            rl: redlock::RedLock::new(urls),
        });
        if node_dir().join("node_modules").is_dir() {
            clients.push(Client::Node { addrs });
        } else {
            eprintln!(
                "node-redlock: skipped (run `npm ci` in benches/node, as benches/table does)"
            );
        }
        clients
    }

    fn name(&self, callers: usize) -> String {
        match self {
            Client::Reference { .. } if callers == 1 => "reference: fan-out (std, blocking)".into(),
            Client::Reference { .. } => {
                format!("reference: pipelined (1 thread, batches of {callers})")
            }
            Client::MuxBlocking { .. } => {
                "**redlock-mux blocking** (threads sharing one Redlock)".into()
            }
            Client::MuxAsync { multi, .. } => {
                format!("**redlock-mux async** ({})", flavour(*multi))
            }
            Client::Rslock { multi, .. } => format!("rslock 0.10 ({})", flavour(*multi)),
            Client::RedlockCrate { .. } => "redlock 2.0 (threads sharing one RedLock)".into(),
            Client::Node { .. } => "node-redlock 4.2 (ioredis, one event loop)".into(),
        }
    }

    /// The label of this client's line in the plots.
    fn short(&self) -> String {
        match self {
            Client::Reference { .. } => "reference (fan-out at 1, then pipelined)".into(),
            Client::MuxBlocking { .. } => "redlock-mux blocking".into(),
            Client::MuxAsync { multi, .. } => format!("redlock-mux async ({})", flavour(*multi)),
            Client::Rslock { multi, .. } => format!("rslock 0.10 ({})", flavour(*multi)),
            Client::RedlockCrate { .. } => "redlock 2.0".into(),
            Client::Node { .. } => "node-redlock 4.2".into(),
        }
    }

    fn ours(&self) -> bool {
        matches!(self, Client::MuxBlocking { .. } | Client::MuxAsync { .. })
    }

    fn is_rslock_mt(&self) -> bool {
        matches!(self, Client::Rslock { multi: true, .. })
    }

    /// One turn of `slice` with `callers` concurrent callers.
    fn turn(
        &mut self,
        callers: usize,
        slice: Duration,
        tag: &str,
    ) -> (u64, Duration, Samples, Samples) {
        let ttl_ms = TTL.as_millis() as u64;
        match self {
            Client::Reference { addrs } if callers == 1 => {
                let mut f = FanOut::connect(addrs).expect("reference connects");
                let f = std::sync::Mutex::new(&mut f);
                threads(1, slice, tag, &|_, key| {
                    let mut f = f.lock().expect("one caller");
                    let tok = token();
                    let t = Instant::now();
                    assert!(f.lock(key, &tok, ttl_ms).expect("reference lock"));
                    let took = t.elapsed();
                    f.unlock(key, &tok).expect("reference unlock");
                    took
                })
            }
            Client::Reference { addrs } => {
                let mut p = Pipelined::connect(addrs).expect("reference connects");
                let (mut pairs, mut lat) = (0u64, Samples::with_capacity(1 << 16));
                let start = Instant::now();
                let mut batch = 0u64;
                while start.elapsed() < slice {
                    let keys: Vec<String> = (0..callers)
                        .map(|i| format!("table:{tag}:{batch}:{i}"))
                        .collect();
                    let tokens: Vec<String> = (0..callers).map(|_| token()).collect();
                    let t = Instant::now();
                    assert_eq!(
                        p.pairs(&keys, &tokens, ttl_ms).expect("reference pipeline"),
                        callers
                    );
                    let took = t.elapsed();
                    // Every pair of a batch waited for the whole batch.
                    for _ in 0..callers {
                        lat.push(took);
                    }
                    pairs += callers as u64;
                    batch += 1;
                }
                // The pipeline has no separate acquisition latency: its lock column is blank.
                (pairs, start.elapsed(), lat, Samples::default())
            }
            Client::MuxBlocking { client } => {
                let c = &*client;
                let before = c.stats();
                let r = threads(callers, slice, tag, &|_, key| {
                    let t0 = Instant::now();
                    let lock = c.lock(key, TTL).expect("mux lock");
                    let took = t0.elapsed();
                    c.unlock(&lock).expect("mux unlock");
                    took
                });
                mean_batch("blocking", callers, &before, &c.stats());
                r
            }
            Client::MuxAsync { rt, client, multi } => {
                let stats = |c: &redlock_mux::AsyncRedlock| {
                    rt.block_on(c.stats()).expect("the driver runs")
                };
                let before = stats(client);
                let name = format!("async ({})", flavour(*multi));
                let c = client.clone();
                let client = client.clone();
                let r = tasks(rt, callers, slice, tag, move |key| {
                    let client = client.clone();
                    async move {
                        let t0 = Instant::now();
                        let lock = client.lock(&key, TTL).await.expect("mux lock");
                        let took = t0.elapsed();
                        client.unlock(&lock).await.expect("mux unlock");
                        took
                    }
                });
                mean_batch(&name, callers, &before, &stats(&c));
                r
            }
            Client::Rslock { rt, mgr, .. } => {
                let mgr = mgr.clone();
                tasks(rt, callers, slice, tag, move |key| {
                    let mgr = mgr.clone();
                    async move {
                        let t0 = Instant::now();
                        let lock = mgr.lock(key.as_bytes(), TTL).await.expect("rslock lock");
                        let took = t0.elapsed();
                        mgr.unlock(&lock).await;
                        took
                    }
                })
            }
            Client::RedlockCrate { rl } => {
                let rl = &*rl;
                threads(callers, slice, tag, &|_, key| {
                    let t0 = Instant::now();
                    let lock = rl
                        .lock(key.as_bytes(), ttl_ms as usize)
                        .expect("redlock lock")
                        .expect("a fresh resource is free");
                    let took = t0.elapsed();
                    rl.unlock(&lock);
                    took
                })
            }
            Client::Node { addrs } => node_turn(addrs, callers, slice),
        }
    }
}

/// Prints (to stderr, beside the table) how many operations shared each write pass in a turn.
fn mean_batch(
    client: &str,
    callers: usize,
    before: &redlock_mux::Stats,
    after: &redlock_mux::Stats,
) {
    let (b, o) = (
        after.batches - before.batches,
        after.batched_ops - before.batched_ops,
    );
    if b > 0 {
        eprintln!(
            "{client} at {callers}: mean batch {:.1}",
            o as f64 / b as f64
        );
    }
}

fn node_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("node")
}

/// One turn of node-redlock: `bench.js` warms up, measures `slice`, and prints its pairs, the
/// nanoseconds measured, and the latencies.
fn node_turn(
    addrs: &[String],
    callers: usize,
    slice: Duration,
) -> (u64, Duration, Samples, Samples) {
    let o = Command::new("node")
        .arg(node_dir().join("bench.js"))
        .args([
            "--callers",
            &callers.to_string(),
            "--seconds",
            &slice.as_secs_f64().to_string(),
        ])
        .args(["--nodes", &addrs.join(",")])
        .output()
        .expect("run node");
    assert!(
        o.status.success(),
        "node-redlock: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines();
    let mut head = lines
        .next()
        .unwrap_or_default()
        .split(' ')
        .map(|n| n.parse::<u64>().unwrap_or(0));
    let (pairs, busy) = (head.next().unwrap_or(0), head.next().unwrap_or(0));
    let mut samples = || {
        Samples(
            lines
                .next()
                .unwrap_or_default()
                .split(' ')
                .filter_map(|n| n.parse().ok())
                .collect(),
        )
    };
    let pair = samples();
    let lock = samples();
    (pairs, Duration::from_nanos(busy), pair, lock)
}

/// Instructions per pair under callgrind, for the clients `instr` knows.
fn callgrind(addrs: &[String], small: u64, large: u64) -> Vec<(String, f64)> {
    let instr = std::env::current_exe()
        .expect("own path")
        .with_file_name("instr");
    let clients = [
        ("reference: fan-out (std)", "reference"),
        ("**redlock-mux blocking**", "mux-blocking"),
        ("**redlock-mux async** (current-thread)", "mux-async-ct"),
        ("**redlock-mux async** (multi-thread)", "mux-async-mt"),
        ("rslock 0.10 (current-thread)", "rslock-ct"),
        ("rslock 0.10 (multi-thread)", "rslock-mt"),
        ("redlock 2.0", "redlock"),
    ];
    let mut out = Vec::new();
    for (label, name) in clients {
        let ir = |pairs: u64| -> Option<u64> {
            let o = Command::new("valgrind")
                .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
                .arg(&instr)
                .args(["--client", name, "--pairs", &pairs.to_string()])
                .env("REDLOCK_NODES", addrs.join(","))
                .output()
                .ok()?;
            if !o.status.success() {
                eprintln!("callgrind {name}: {}", String::from_utf8_lossy(&o.stderr));
                return None;
            }
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .find_map(|l| l.split("Collected :").nth(1))
                .and_then(|n| n.trim().parse().ok())
        };
        match (ir(small), ir(large)) {
            (Some(a), Some(b)) if b > a => {
                let per = (b - a) as f64 / (large - small) as f64;
                eprintln!("callgrind {name}: {per:.0} instructions per pair");
                out.push((label.to_string(), per));
            }
            other => eprintln!("callgrind {name}: no figure ({other:?})"),
        }
    }
    out
}

fn main() {
    let seconds: f64 = arg("--seconds", 2.0);
    let rounds: usize = arg("--rounds", 2);
    let levels: String = arg("--levels", "1,16,64,256".to_string());
    let cluster = LocalCluster::start(5).expect("start 5 redis-server (scripts/install-deps)");
    let addrs = cluster.addrs();
    let slice = Duration::from_secs_f64(seconds);
    let mut clients = Client::all(&addrs);
    // `--only mux`: the reference and the clients whose short name contains any of the given
    // words (comma-separated), for a quick look at a few columns.
    let only: String = arg("--only", String::new());
    if !only.is_empty() {
        clients.retain(|c| {
            matches!(c, Client::Reference { .. })
                || only.split(',').any(|w| c.short().contains(w.trim()))
        });
    }
    let turns = AtomicU64::new(0);
    // For the plots: each client's pairs/s at each level, and the pair latencies at the level
    // the latency picture shows.
    let plot_dir: Option<std::path::PathBuf> = std::env::args()
        .position(|a| a == "--plot")
        .and_then(|i| std::env::args().nth(i + 1))
        .map(Into::into);
    let latency_at: usize = arg("--latency-at", 64);
    let mut lines: Vec<plot::Line> = clients
        .iter()
        .map(|c| plot::Line {
            label: c.short(),
            ours: c.ours(),
            points: Vec::new(),
        })
        .collect();
    let mut latencies: Vec<Samples> = Vec::new();

    println!("| callers | client | pairs/s | x ref | x rslock (mt) | pair p50 | pair p99 | pair p999 | lock p50 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for callers in levels
        .split(',')
        .filter_map(|l| l.trim().parse::<usize>().ok())
    {
        // Warm every client at this concurrency (connections, pools, caches).
        for c in clients.iter_mut() {
            let tag = format!("w{}", turns.fetch_add(1, Ordering::Relaxed));
            c.turn(callers, Duration::from_millis(200), &tag);
        }
        let mut cells: Vec<Cell> = clients.iter().map(|_| Cell::default()).collect();
        for _ in 0..rounds {
            for (c, cell) in clients.iter_mut().zip(cells.iter_mut()) {
                let tag = format!("t{}", turns.fetch_add(1, Ordering::Relaxed));
                let (pairs, busy, pair, lock) = c.turn(callers, slice, &tag);
                cell.add(pairs, busy, pair, lock);
            }
        }
        let base = cells[0].pps();
        let rs = clients
            .iter()
            .zip(&cells)
            .find(|(c, _)| c.is_rslock_mt())
            .map_or(f64::NAN, |(_, cell)| cell.pps());
        for (c, cell) in clients.iter().zip(&cells) {
            let level = if callers == 1 {
                "1 (sequential)".to_string()
            } else {
                callers.to_string()
            };
            let lock = if cell.lock.0.is_empty() {
                "–".to_string()
            } else {
                us(cell.lock.quantile(0.5))
            };
            println!(
                "| {level} | {} | {:.0} | {:.2}x | {:.2}x | {} | {} | {} | {lock} |",
                c.name(callers),
                cell.pps(),
                cell.pps() / base,
                cell.pps() / rs,
                us(cell.pair.quantile(0.5)),
                us(cell.pair.quantile(0.99)),
                us(cell.pair.quantile(0.999)),
            );
        }
        for (line, cell) in lines.iter_mut().zip(&cells) {
            line.points.push((callers as f64, cell.pps()));
        }
        if callers == latency_at {
            latencies = cells.into_iter().map(|c| c.pair).collect();
        }
        eprintln!("{callers}-way done");
    }
    println!(
        "\nLatencies in µs. x ref: pairs/s against the reference at the same concurrency, same turns; \
         x rslock (mt): against rslock on its default multi-thread runtime. {rounds} turns of {seconds} s per cell."
    );

    if let Some(dir) = plot_dir {
        let machine = format!(
            "{} vCPU, 5 local masters",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let tput = dir.join("throughput.svg");
        plot::throughput(
            &tput,
            &format!("Uncontended lock + unlock pairs per second ({machine})"),
            &lines,
        )
        .unwrap_or_else(|e| panic!("drawing {}: {e}", tput.display()));
        eprintln!("drew {}", tput.display());
        if latencies.is_empty() {
            eprintln!("no latency picture: --levels does not include {latency_at}");
        } else {
            let lat = dir.join(format!("latency-{latency_at}.svg"));
            let clients: Vec<(String, bool, &Samples)> = clients
                .iter()
                .zip(&latencies)
                .map(|(c, s)| (c.short(), c.ours(), s))
                .collect();
            plot::latency(
                &lat,
                &format!("Pair latency at {latency_at} callers ({machine})"),
                &clients,
            )
            .unwrap_or_else(|e| panic!("drawing {}: {e}", lat.display()));
            eprintln!("drew {}", lat.display());
        }
    }

    if flag("--callgrind") {
        let (small, large) = (arg("--small", 200u64), arg("--large", 1200u64));
        let figures = callgrind(&addrs, small, large);
        let rs = figures
            .iter()
            .find(|(l, _)| l.contains("rslock") && l.contains("multi"))
            .map_or(f64::NAN, |(_, v)| *v);
        println!(
            "\n| client (one caller, sequential pairs) | instructions per pair | x rslock (mt) |"
        );
        println!("|---|---|---|");
        for (label, per) in &figures {
            println!("| {label} | {per:.0} | {:.2}x |", per / rs);
        }
        println!(
            "\nClient-side instructions (valgrind --tool=callgrind, Ir) per lock+unlock pair: the difference \
             between runs of {large} and {small} pairs, so start-up and connection set-up cancel out. \
             Lower is better; the servers run outside valgrind."
        );
    }
    drop(cluster);
}
