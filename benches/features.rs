//! What fencing, locks over several resources and `verify_stream` cost, against the plain lock, in one run on
//! five local masters: sequential lock + unlock pairs on the blocking client, each variant in
//! turns interleaved with the others so that the machine's swings fall on all of them alike.
//!
//! Targets (issue 12): a fenced lock's p50 at most the plain lock's p50 plus 1.2 single-node
//! round trips; a lock over 10 resources at most 1.5x the single-resource lock, p50 and
//! pairs/s. The single-node round trip is the lock p50 of the same client on one master (the
//! same code path, one node); a plain socket's `SET` round trip is printed beside it.
//!
//! Run: `cargo run --release --manifest-path benches/Cargo.toml --bin features -- [--seconds 2]
//! [--turns 3]`; with `--scripts-compare` (and `REDLOCK_REDIS_SERVER` pointing at Valkey 9+),
//! native commands against scripts instead.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redlock_mux::Redlock;
use testkit::local::LocalCluster;

mod common;
use common::arg;

#[derive(Default)]
struct Samples {
    lock: Vec<u64>,
    pair: Vec<u64>,
    pairs: u64,
    busy: Duration,
    /// CPU time the five servers spent during this variant's turns, in clock ticks.
    server_ticks: u64,
}

/// User + system CPU time of the processes, in clock ticks (`/proc/<pid>/stat`).
fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name (which ends with the last ')'): utime is the 12th
            // of them, stime the 13th.
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

impl Samples {
    fn q(v: &mut [u64], q: f64) -> f64 {
        v.sort_unstable();
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1] as f64 / 1000.0
    }
    fn pps(&self) -> f64 {
        self.pairs as f64 / self.busy.as_secs_f64()
    }
}

/// One variant: how it locks.
struct Variant {
    name: &'static str,
    client: Redlock,
    resources: Vec<String>,
    /// `lock` (an acquisition that may wait: in fair mode its first try is the enter script)
    /// rather than `try_lock` (always the plain try).
    wait: bool,
}

impl Variant {
    fn turn(&self, slice: Duration, s: &mut Samples) {
        let names: Vec<&str> = self.resources.iter().map(String::as_str).collect();
        let start = Instant::now();
        while start.elapsed() < slice {
            let t0 = Instant::now();
            let lock = if self.wait {
                self.client.lock(names[0], Duration::from_secs(10))
            } else if names.len() == 1 {
                self.client.try_lock(names[0], Duration::from_secs(10))
            } else {
                self.client.try_lock_many(&names, Duration::from_secs(10))
            }
            .expect("uncontended lock");
            let t1 = Instant::now();
            self.client.unlock(&lock).expect("unlock");
            s.lock.push((t1 - t0).as_nanos() as u64);
            s.pair.push(t0.elapsed().as_nanos() as u64);
            s.pairs += 1;
        }
        s.busy += start.elapsed();
    }
}

/// Round trips of `SET` on one node over a plain blocking socket: the unit the fencing target
/// is stated in.
fn single_node_rtt(addr: &str, slice: Duration, out: &mut Vec<u64>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let cmd = b"*3\r\n$3\r\nSET\r\n$9\r\nbench:rtt\r\n$1\r\nx\r\n";
    let mut buf = [0u8; 64];
    let start = Instant::now();
    while start.elapsed() < slice {
        let t0 = Instant::now();
        s.write_all(cmd).unwrap();
        let mut got = 0;
        while got < 5 {
            got += s.read(&mut buf[got..]).unwrap();
        }
        out.push(t0.elapsed().as_nanos() as u64);
    }
}

/// Pairs per second of `callers` tasks sharing one async client on a multi-thread runtime.
fn concurrent_pps(
    nodes: &[String],
    callers: usize,
    slice: Duration,
    ca: Option<&std::path::Path>,
) -> f64 {
    concurrent_pps_with(nodes, callers, slice, redlock_mux::Scripts::Auto, ca)
}

fn concurrent_pps_with(
    nodes: &[String],
    callers: usize,
    slice: Duration,
    scripts: redlock_mux::Scripts,
    ca: Option<&std::path::Path>,
) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut builder = redlock_mux::AsyncRedlock::builder()
            .nodes(nodes)
            .node_timeout(Duration::from_millis(500))
            .fail_fast(false)
            .fair(false)
            .scripts(scripts);
        if let Some(ca) = ca {
            builder = builder.tls_ca_file(ca);
        }
        let client = builder.build().unwrap();
        // Every connection open, and every server identified, before the clock starts.
        let warm = client
            .try_lock("bench:warm", Duration::from_secs(10))
            .await
            .unwrap();
        client.unlock(&warm).await.unwrap();
        let start = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|k| {
                let client = client.clone();
                tokio::spawn(async move {
                    let key = format!("bench:conc:{k}");
                    let mut n = 0u64;
                    while start.elapsed() < slice {
                        let lock = client
                            .try_lock(&key, Duration::from_secs(10))
                            .await
                            .unwrap();
                        client.unlock(&lock).await.unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total as f64 / start.elapsed().as_secs_f64()
    })
}

/// The servers' CPU time in µs, from their own `INFO cpu`.
fn info_cpu_us(nodes: &[String]) -> f64 {
    nodes
        .iter()
        .map(|n| match testkit::redis(n, &["INFO", "cpu"]) {
            redlock_mux::resp::Frame::Bulk(b) => String::from_utf8_lossy(&b)
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    matches!(k, "used_cpu_sys" | "used_cpu_user")
                        .then(|| v.trim().parse::<f64>().ok())
                        .flatten()
                })
                .sum::<f64>(),
            _ => 0.0,
        })
        .sum::<f64>()
        * 1e6
}

/// Native commands against scripts on the same servers (which must have the native
/// commands: run with `REDLOCK_REDIS_SERVER` pointing at Valkey 9+): pairs/s of 64 and 256
/// async callers, and the servers' CPU per pair from `INFO cpu`.
fn scripts_compare(nodes: &[String], slice: Duration, turns: usize) {
    println!("| callers | scripts | pairs/s | servers' CPU per pair (µs) |");
    println!("|---|---|---|---|");
    for callers in [64, 256] {
        let mut rows = Vec::new();
        for mode in [redlock_mux::Scripts::Eval, redlock_mux::Scripts::Native] {
            let (mut pps, mut cpu, mut pairs) = (0.0, 0.0, 0.0);
            for _ in 0..turns {
                let before = info_cpu_us(nodes);
                let p = concurrent_pps_with(nodes, callers, slice, mode, None);
                cpu += info_cpu_us(nodes) - before;
                pairs += p * slice.as_secs_f64();
                pps += p / turns as f64;
            }
            println!("| {callers} | {mode:?} | {pps:.0} | {:.1} |", cpu / pairs);
            rows.push((pps, cpu / pairs));
        }
        println!(
            "| {callers} | Native / Eval | {:.2}x | {:.2}x |",
            rows[1].0 / rows[0].0,
            rows[1].1 / rows[0].1
        );
    }
}

fn main() {
    let seconds: f64 = arg("--seconds", 2.0);
    let turns: usize = arg("--turns", 3);
    let slice = Duration::from_secs_f64(seconds);
    if std::env::args().any(|a| a == "--scripts-compare") {
        let cluster = LocalCluster::start(5).expect("five servers (REDLOCK_REDIS_SERVER)");
        scripts_compare(&cluster.addrs(), slice, turns);
        return;
    }
    let tls_dir = std::env::temp_dir().join(format!("redlock-bench-tls-{}", std::process::id()));
    let tls_files = testkit::tls::TlsFiles::generate(&tls_dir).expect("certificates");
    // Plain TCP, a Unix socket and TLS on the same five servers.
    let cluster = LocalCluster::start_tls(5, &tls_files, false)
        .expect("five redis-server with TLS (scripts/install-deps)");
    let nodes = cluster.addrs();
    let pids: Vec<u32> = cluster.servers().iter().filter_map(|s| s.pid()).collect();
    // Clock ticks per second (USER_HZ): 100 on Linux.
    let tick_us = 10_000.0;
    let build_on = |nodes: &[String], fencing: bool| {
        Redlock::builder()
            .nodes(nodes)
            .node_timeout(Duration::from_millis(200))
            .fencing(fencing)
            .fair(false)
            .build()
            .unwrap()
    };
    let build = |fencing: bool| build_on(&nodes, fencing);
    let tls_nodes = cluster.tls_addrs();
    let tls_client = Redlock::builder()
        .nodes(&tls_nodes)
        .node_timeout(Duration::from_millis(200))
        .tls_ca_file(&tls_files.ca)
        .fair(false)
        .build()
        .unwrap();
    let ten: Vec<String> = (0..10).map(|i| format!("bench:set:{i}")).collect();
    let variants = [
        Variant {
            name: "plain lock",
            client: build(false),
            resources: vec!["bench:one".into()],
            wait: false,
        },
        Variant {
            name: "fenced lock",
            client: build(true),
            resources: vec!["bench:fenced".into()],
            wait: false,
        },
        Variant {
            name: "lock_many, 10 resources",
            client: build(false),
            resources: ten.clone(),
            wait: false,
        },
        Variant {
            name: "lock_many, 10 resources, fenced",
            client: build(true),
            resources: ten.iter().map(|r| format!("{r}:f")).collect(),
            wait: false,
        },
        Variant {
            name: "plain lock over Unix sockets",
            client: build_on(&cluster.unix_addrs(), false),
            resources: vec!["bench:unix".into()],
            wait: false,
        },
        Variant {
            name: "plain lock over TLS",
            client: tls_client,
            resources: vec!["bench:tls".into()],
            wait: false,
        },
        // One node: its lock is one round trip to one master through the same client.
        Variant {
            name: "plain lock on one node (the single-node round trip)",
            client: build_on(&nodes[..1], false),
            resources: vec!["bench:single".into()],
            wait: false,
        },
        // Last, so that the indices above stay.
        Variant {
            name: "plain lock, verify_stream (a sentinel per pass)",
            client: Redlock::builder()
                .nodes(&nodes)
                .node_timeout(Duration::from_millis(200))
                .verify_stream(true)
                .fair(false)
                .build()
                .unwrap(),
            resources: vec!["bench:verified".into()],
            wait: false,
        },
        // What fair mode costs a lock nobody else wants: its first try is the
        // enter script, its release the hand-off script; against the same calls without it.
        Variant {
            name: "lock (may wait), fair(false)",
            client: build(false),
            resources: vec!["bench:wait-plain".into()],
            wait: true,
        },
        Variant {
            name: "lock (may wait), fair(true)",
            client: Redlock::builder()
                .nodes(&nodes)
                .node_timeout(Duration::from_millis(200))
                .fair(true)
                .build()
                .unwrap(),
            resources: vec!["bench:wait-fair".into()],
            wait: true,
        },
    ];
    // Warm-up: connections, script caches.
    for v in &variants {
        v.turn(Duration::from_millis(300), &mut Samples::default());
    }
    let mut samples: Vec<Samples> = variants.iter().map(|_| Samples::default()).collect();
    let mut rtt = Vec::new();
    for _ in 0..turns {
        single_node_rtt(&nodes[0], slice / 2, &mut rtt);
        for (v, s) in variants.iter().zip(samples.iter_mut()) {
            let before = cpu_ticks(&pids);
            v.turn(slice, s);
            s.server_ticks += cpu_ticks(&pids) - before;
        }
    }
    // 64 callers sharing one async client, TCP, Unix sockets and TLS in alternating turns.
    let (mut tcp64, mut unix64, mut tls64) = (0.0, 0.0, 0.0);
    for _ in 0..turns {
        tcp64 += concurrent_pps(&nodes, 64, slice, None) / turns as f64;
        unix64 += concurrent_pps(&cluster.unix_addrs(), 64, slice, None) / turns as f64;
        tls64 += concurrent_pps(&tls_nodes, 64, slice, Some(&tls_files.ca)) / turns as f64;
    }
    // A fresh client's first lock: connects (and, over TLS, handshakes) then locks.
    let first_lock = |nodes: &[String], ca: Option<&std::path::Path>| {
        let mut v = Vec::new();
        for _ in 0..30 {
            let mut b = Redlock::builder()
                .nodes(nodes)
                .node_timeout(Duration::from_secs(1));
            if let Some(ca) = ca {
                b = b.tls_ca_file(ca);
            }
            let client = b.build().unwrap();
            let t0 = Instant::now();
            let lock = client
                .try_lock("bench:first", Duration::from_secs(10))
                .unwrap();
            v.push(t0.elapsed().as_nanos() as u64);
            client.unlock(&lock).unwrap();
        }
        Samples::q(&mut v, 0.5)
    };
    let first_tcp = first_lock(&nodes, None);
    let first_tls = first_lock(&tls_nodes, Some(&tls_files.ca));
    let raw_p50 = Samples::q(&mut rtt, 0.5);
    let rtt_p50 = Samples::q(&mut samples[6].lock.clone(), 0.5);
    println!(
        "Five local masters, blocking client, sequential try_lock + unlock pairs; {turns} turns of {seconds} s per variant, interleaved. Latencies in µs."
    );
    println!();
    println!(
        "| variant | pairs/s | lock p50 | lock p99 | pair p50 | pair p99 | servers' CPU per pair |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut p50 = Vec::new();
    let mut pps = Vec::new();
    for (v, s) in variants.iter().zip(samples.iter_mut()) {
        let (l50, l99) = (Samples::q(&mut s.lock, 0.5), Samples::q(&mut s.lock, 0.99));
        let (p_50, p_99) = (Samples::q(&mut s.pair, 0.5), Samples::q(&mut s.pair, 0.99));
        println!(
            "| {} | {:.0} | {l50:.1} | {l99:.1} | {p_50:.1} | {p_99:.1} | {:.1} |",
            v.name,
            s.pps(),
            s.server_ticks as f64 * tick_us / s.pairs.max(1) as f64
        );
        p50.push((l50, p_50));
        pps.push(s.pps());
    }
    println!(
        "| `SET` on one node, plain blocking socket | – | {raw_p50:.1} | {:.1} | – | – | – |",
        Samples::q(&mut rtt, 0.99)
    );
    println!();
    // The last two variants: `lock` + `unlock` with and without fair mode.
    let (plain, fair) = (p50.len() - 2, p50.len() - 1);
    println!(
        "fair mode, uncontended lock + unlock: pair p50 {:.1} µs vs {:.1} µs without it ({:.2}x), pairs/s {:.2}x",
        p50[fair].1,
        p50[plain].1,
        p50[fair].1 / p50[plain].1,
        pps[fair] / pps[plain]
    );
    let extra = p50[1].0 - p50[0].0;
    let bound = p50[0].0 + 1.2 * rtt_p50;
    println!(
        "fenced lock p50 {:.1} µs vs plain {:.1} µs: +{extra:.1} µs = {:.2} single-node round trips (target <= 1.2: p50 <= {bound:.1} µs) -> {}",
        p50[1].0,
        p50[0].0,
        extra / rtt_p50,
        if p50[1].0 <= bound { "met" } else { "MISSED" }
    );
    println!(
        "Unix sockets vs TCP: sequential pair p50 {:.1} vs {:.1} µs ({:.2}x), 64 async callers {unix64:.0} vs {tcp64:.0} pairs/s ({:.2}x)",
        p50[4].1,
        p50[0].1,
        p50[4].1 / p50[0].1,
        unix64 / tcp64
    );
    println!(
        "TLS vs TCP: sequential pair p50 {:.1} vs {:.1} µs ({:.2}x), 64 async callers {tls64:.0} vs {tcp64:.0} pairs/s ({:.2}x); a fresh client's first lock (connect, handshake, lock) p50 {:.0} vs {:.0} µs: the handshakes cost {:.0} µs",
        p50[5].1,
        p50[0].1,
        p50[5].1 / p50[0].1,
        tls64 / tcp64,
        first_tls,
        first_tcp,
        first_tls - first_tcp
    );
    println!(
        "verify_stream vs plain: sequential pair p50 {:.1} vs {:.1} µs ({:.2}x), pairs/s {:.0} vs {:.0} ({:.2}x), servers' CPU per pair {:.2}x",
        p50[7].1,
        p50[0].1,
        p50[7].1 / p50[0].1,
        pps[7],
        pps[0],
        pps[7] / pps[0],
        (samples[7].server_ticks as f64 / samples[7].pairs.max(1) as f64)
            / (samples[0].server_ticks as f64 / samples[0].pairs.max(1) as f64)
    );
    let lock_ratio = p50[2].0 / p50[0].0;
    let pair_ratio = p50[2].1 / p50[0].1;
    let pps_ratio = pps[0] / pps[2];
    println!(
        "10 resources vs 1: lock p50 {lock_ratio:.2}x, pair p50 {pair_ratio:.2}x, pairs/s {pps_ratio:.2}x fewer (target <= 1.5x each) -> {}",
        if lock_ratio <= 1.5 && pair_ratio <= 1.5 && pps_ratio <= 1.5 {
            "met"
        } else {
            "MISSED"
        }
    );
}
