//! What `redlock run -- true` costs beyond the lock's own round trips.
//!
//! Four measurements, interleaved one of each per iteration so that load changes fall on all
//! alike, against five local masters:
//! - `true`: spawning and reaping `true` directly (what any wrapper pays to run a command);
//! - a process: spawning and reaping this Rust program with `--noop`, which returns at once
//!   (what being a separate program costs any command-line tool: exec, loader, std start-up);
//! - rounds: in this process, a fresh `AsyncRedlock` (connections to the five masters, script
//!   preload), one acquisition and one release: the round trips `redlock run` cannot avoid;
//! - cli: the whole `redlock run --resource R -- true`, as a shell runs it.
//!
//! overhead = cli - true - process - rounds, per quantile: what the tool itself adds (argument
//! parsing, the runtime, signal handlers, the supervision loop, exit). The table also shows
//! cli - true - rounds, the cost including the tool's own process start.
//!
//! Run: `cargo build --release -p redlock-cli --bin redlock && cargo run --release
//! --manifest-path benches/Cargo.toml --bin cli_overhead -- --iterations 300`

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{arg, us, Samples};
use testkit::local::LocalCluster;

fn main() {
    if std::env::args().any(|a| a == "--noop") {
        return;
    }
    let iterations: usize = arg("--iterations", 300);
    let default_bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/redlock");
    let bin: PathBuf = arg("--redlock", default_bin);
    assert!(
        bin.is_file(),
        "{} missing: cargo build --release -p redlock-cli --bin redlock",
        bin.display()
    );
    let cluster = LocalCluster::start(5).expect("start 5 redis-server (scripts/install-deps)");
    let addrs = cluster.addrs();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let me = std::env::current_exe().expect("own path");
    let (mut direct, mut process, mut rounds, mut cli) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    let ttl = Duration::from_secs(10);
    for i in 0..iterations + 10 {
        let resource = format!("overhead:{}:{i}", std::process::id());

        let t = Instant::now();
        let st = Command::new("true").status().expect("run true");
        let d_direct = t.elapsed();
        assert!(st.success());

        let t = Instant::now();
        let st = Command::new(&me).arg("--noop").status().expect("run self");
        let d_process = t.elapsed();
        assert!(st.success());

        let t = Instant::now();
        rt.block_on(async {
            let c = redlock_mux::AsyncRedlock::builder()
                .fair(false)
                .nodes(&addrs)
                .build_async()
                .expect("client");
            let lock = c.lock(&resource, ttl).await.expect("lock");
            c.unlock(&lock).await.expect("unlock");
        });
        let d_rounds = t.elapsed();

        let t = Instant::now();
        let st = Command::new(&bin)
            .args([
                "--nodes",
                &addrs.join(","),
                "run",
                "--resource",
                &resource,
                "--",
                "true",
            ])
            .stdin(Stdio::null())
            .status()
            .expect("run redlock");
        let d_cli = t.elapsed();
        assert!(st.success(), "redlock run failed");

        // The first few warm the page cache and the servers.
        if i >= 10 {
            direct.push(d_direct);
            process.push(d_process);
            rounds.push(d_rounds);
            cli.push(d_cli);
        }
    }
    println!("| {iterations} iterations, µs | p50 | p90 | p99 |");
    println!("|---|---|---|---|");
    let qs = [0.5, 0.9, 0.99];
    for (name, s) in [
        ("`true` spawned directly", &direct),
        ("an empty Rust process (`cli_overhead --noop`)", &process),
        ("fresh client + lock + unlock (the round trips)", &rounds),
        ("`redlock run --resource R -- true`", &cli),
    ] {
        let cells: Vec<String> = qs.iter().map(|&q| us(s.quantile(q))).collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    let q = |s: &Samples, q: f64| s.quantile(q).as_secs_f64() * 1e6;
    let row = |f: &dyn Fn(f64) -> f64| {
        qs.iter()
            .map(|&x| format!("{:.1}", f(x)))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    println!(
        "| cli - true - round trips (with the tool's own process start) | {} |",
        row(&|x| q(&cli, x) - q(&direct, x) - q(&rounds, x))
    );
    println!(
        "| **overhead**: cli - true - empty process - round trips | {} |",
        row(&|x| q(&cli, x) - q(&direct, x) - q(&process, x) - q(&rounds, x))
    );
}
