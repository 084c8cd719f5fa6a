//! The soak: contended locking through fault-injecting proxies, with a fault schedule drawn
//! from a seed, watched by the mutual-exclusion checker. Prints acquisitions, faults injected
//! by kind, overlaps (must be 0), fenced acquisitions and token decreases (must be 0), work
//! past validity, and acquire latency; exits 1 on any overlap or decrease.
//!
//! Run: `cargo run --release --example soak -- --seconds 60 --seed 7 [--threads 4] [--tasks 4]
//! [--ttl-ms 500] [--node-timeout-ms 50] [--stall-chance 0.01] [--no-faults] [--fencing]
//! [--resources 1] [--faults LIST]`
//!
//! `--faults` takes a comma-separated list of fault kinds: pause, kill, latency, blackhole,
//! reset, half-close, slow, drop, lose-bytes; `real` (the default) is every kind a real
//! network or host produces, that is all but lose-bytes, which discards bytes from live
//! streams (no real network does) and is never part of the safety counts. Each overlap or
//! token decrease is printed with both windows (when the call began, the window, the token,
//! the nodes that granted it) and the faults injected around them. The same history is then
//! judged by the deterministic simulator's checker (`redlock_sim::check`), which must agree.

use testkit::soak;

use std::time::{Duration, Instant};

use redlock_sim::check::History;

/// The soak's windows as the simulator's checker reads them: times in nanoseconds from the
/// run's start, each acquisition a lock of its own, each thread or task a holder.
fn history(report: &soak::Report) -> History {
    let origin = report.origin.unwrap_or_else(Instant::now);
    let ns = |t: Instant| t.saturating_duration_since(origin).as_nanos() as u64;
    History::of_windows(report.windows.iter().map(|w| {
        (
            w.holder as u32,
            w.resource as u32,
            ns(w.from),
            ns(w.until),
            w.token,
        )
    }))
}

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => default,
        Some(i) => match args.get(i + 1).map(|v| v.parse()) {
            Some(Ok(v)) => v,
            _ => {
                eprintln!("soak: {name} needs a value");
                std::process::exit(2);
            }
        },
    }
}

fn main() {
    let cfg = soak::SoakConfig {
        duration: Duration::from_secs_f64(arg("--seconds", 10.0)),
        seed: arg("--seed", 1),
        threads: arg("--threads", 4),
        tasks: arg("--tasks", 4),
        ttl: Duration::from_millis(arg("--ttl-ms", 500)),
        node_timeout: Duration::from_millis(arg("--node-timeout-ms", 50)),
        faults: if std::env::args().any(|a| a == "--no-faults") {
            Vec::new()
        } else {
            soak::FaultKind::parse_list(&arg("--faults", "real".to_string())).unwrap_or_else(|e| {
                eprintln!("soak: --faults: {e}");
                std::process::exit(2);
            })
        },
        stall_chance: arg("--stall-chance", 0.01),
        fencing: std::env::args().any(|a| a == "--fencing"),
        resources: arg("--resources", 1usize).max(1),
    };
    println!(
        "soak: {:?}, seed {}, {} threads + {} tasks on {} resource(s), ttl {:?}, node timeout {:?}, fencing {}, faults [{}]",
        cfg.duration, cfg.seed, cfg.threads, cfg.tasks, cfg.resources, cfg.ttl, cfg.node_timeout, cfg.fencing,
        cfg.faults.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    );
    let report = soak::run(&cfg);
    println!("{report}");
    // The same history judged by the deterministic simulator's checker (sim/src/check.rs),
    // an implementation of its own: both must find nothing, and agree.
    let history = history(&report);
    let found = redlock_sim::check::check(&history);
    println!(
        "simulator's checker   {} windows, {} violations",
        history.windows.len(),
        found.len()
    );
    for v in found.iter().take(5) {
        eprintln!(
            "soak: {} at {:.3} ms: {}",
            v.invariant,
            v.at as f64 / 1e6,
            v.detail
        );
    }
    if !found.is_empty() {
        eprintln!(
            "soak: the simulator's checker found {} violations",
            found.len()
        );
        std::process::exit(1);
    }
    if report.overlaps > 0 {
        eprintln!(
            "soak: MUTUAL EXCLUSION VIOLATED ({} overlaps)",
            report.overlaps
        );
        std::process::exit(1);
    }
    if report.token_decreases > 0 {
        eprintln!(
            "soak: FENCING VIOLATED ({} token decreases)",
            report.token_decreases
        );
        std::process::exit(1);
    }
}
