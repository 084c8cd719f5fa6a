//! How fast the deterministic simulator runs: simulated client operations per second on one
//! core (issue 25's target: 100,000), for the default fault mix and with no fault, over
//! batches of consecutive seeds. Prints each mix's median and p99 (slowest batches) and its
//! ratio to the target, and the events per operation, which is what the cost follows.
//!
//!   cargo run --release --manifest-path benches/Cargo.toml --bin sim_speed [-- --batches 20 --seeds 100]

mod common;

use common::arg;
use redlock_sim::run::run_seeds;
use redlock_sim::world::{Faults, Params};

const TARGET: f64 = 100_000.0;

fn main() {
    let batches: u64 = arg("--batches", 20u64).max(1);
    let seeds: u64 = arg("--seeds", 100u64).max(1);
    println!("| mix | seeds | operations | events per operation | ops/s median | ops/s p99 (slow end) | median / target |");
    println!("|---|---|---|---|---|---|---|");
    for (name, faults) in [("default", Faults::real()), ("no fault", Faults::NONE)] {
        let mut rates = Vec::new();
        let (mut ops, mut events) = (0u64, 0u64);
        for b in 0..batches {
            let mut p = Params::new(1 + b * seeds);
            p.faults = faults;
            let r = run_seeds(&p, seeds, false);
            assert_eq!(r.violations, 0, "seeds {}..: a violation", p.seed);
            ops += r.operations;
            events += r.events;
            rates.push(r.operations as f64 / r.seconds.max(1e-9));
        }
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        // The slow end: the batch below which 1% of batches fall (the slowest with few).
        let p99 = rates[(rates.len() - 1) / 100];
        println!(
            "| {name} | {} | {ops} | {:.1} | {median:.0} | {p99:.0} | {:.2}x |",
            batches * seeds,
            events as f64 / ops.max(1) as f64,
            median / TARGET
        );
    }
}
