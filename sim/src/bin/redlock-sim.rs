//! `redlock-sim`: runs seeds of the deterministic simulation and prints what they came to.
//!
//! ```text
//! redlock-sim --seeds N [--seed S] [--negative NAME] [--faults LIST] [--clients K]
//!             [--ops N] [--episodes E] [--no-semaphores] [--json] [--trace] [--no-shrink]
//! ```
//! Seeds S, S+1, ..., S+N-1 are run (S is 1 unless given). The first failing seed is shrunk to
//! fewer clients, operations, fault episodes and fault kinds while it still fails the same
//! invariant, and printed with the command that replays it and its trace. The exit status is
//! 1 when a violation was found, 2 for bad arguments.

use redlock_sim::run::run_seeds;
use redlock_sim::world::{Faults, Negative, Params};

fn usage() -> ! {
    eprintln!(
        "usage: redlock-sim --seeds N [--seed S] [--negative NAME] \
         [--faults LIST] [--clients K] [--ops N] [--episodes E] [--no-semaphores] [--json] [--trace] [--no-shrink]"
    );
    let names: Vec<&str> = Negative::ALL.iter().map(|n| n.name()).collect();
    eprintln!("negative controls: {}", names.join(", "));
    std::process::exit(2)
}

fn number<T: std::str::FromStr>(v: Option<String>, what: &str) -> T {
    match v.as_deref().map(str::parse) {
        Some(Ok(n)) => n,
        _ => {
            eprintln!("redlock-sim: {what} needs a number");
            usage()
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut p = Params::new(1);
    let mut seeds = 1u64;
    let mut json = false;
    let mut shrinking = true;
    let mut trace = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seeds" => seeds = number(args.next(), "--seeds"),
            "--seed" => p.seed = number(args.next(), "--seed"),
            "--clients" => p.clients = Some(number(args.next(), "--clients")),
            "--ops" => p.ops = Some(number(args.next(), "--ops")),
            "--episodes" => p.episodes = Some(number(args.next(), "--episodes")),
            "--no-semaphores" => p.semaphores = false,
            "--negative" => match Negative::parse(&args.next().unwrap_or_default()) {
                Ok(n) => p.negative = Some(n),
                Err(e) => {
                    eprintln!("redlock-sim: {e}");
                    usage()
                }
            },
            "--faults" => match Faults::parse(&args.next().unwrap_or_default()) {
                Ok(f) => p.faults = f,
                Err(e) => {
                    eprintln!("redlock-sim: {e}");
                    usage()
                }
            },
            "--json" => json = true,
            "--trace" => trace = true,
            "--no-shrink" => shrinking = false,
            "-h" | "--help" => usage(),
            other => {
                eprintln!("redlock-sim: unknown argument {other:?}");
                usage()
            }
        }
    }
    if trace {
        // One seed with its whole trace.
        let mut one = p.clone();
        one.trace = true;
        let r = redlock_sim::run::run_one(&one);
        for l in &r.trace {
            println!("{l}");
        }
        for v in &r.violations {
            println!(
                "VIOLATION {} at {:.3} ms: {}",
                v.invariant,
                v.at as f64 / 1e6,
                v.detail
            );
        }
        println!("trace hash {:016x}", r.trace_hash);
        std::process::exit(i32::from(!r.violations.is_empty()));
    }
    let report = run_seeds(&p, seeds, shrinking);
    if json {
        println!("{}", report.json(&p));
    } else {
        print!("{}", report.text(&p));
    }
    std::process::exit(i32::from(report.violations > 0));
}
