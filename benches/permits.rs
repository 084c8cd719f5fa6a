//! What a semaphore's permit costs against a plain lock, and how that cost grows with the
//! number of permits, in one run on five local masters: sequential acquire + release pairs on
//! the blocking client, each variant in turns interleaved with the others so that the
//! machine's swings fall on all of them alike.
//!
//! Variants: the lock (`try_lock` + `unlock` on one resource), the reference; permits of
//! semaphores of 1, 4, 16, 64 and 256 permits (`try_acquire_permit` + `unlock`), with every
//! slot free, and with all but one slot held by another client (each master's script then
//! tries slots in the caller's random order until it finds the free one: half of them on
//! average). Printed: acquire p50 and p99, pairs/s, and each variant's p50 over the lock's.
//!
//! Run: `cargo run --release --manifest-path benches/Cargo.toml --bin permits -- [--seconds 2]
//! [--turns 3] [--no-fail-fast]` (without fail-fast every round waits for every master).

use std::time::{Duration, Instant};

use redlock_mux::{Lock, Redlock, Semaphore};
use testkit::local::LocalCluster;

mod common;
use common::arg;

struct Variant {
    name: String,
    sem: Option<Semaphore>,
    lock: Vec<u64>,
    pairs: u64,
    busy: Duration,
}

fn q(v: &[u64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1] as f64 / 1000.0
}

fn main() {
    let seconds: f64 = arg("--seconds", 2.0);
    let turns: u32 = arg("--turns", 3);
    let cluster = LocalCluster::start(5).expect("redis-server (scripts/install-deps)");
    let nodes = cluster.addrs();
    let build = || {
        Redlock::builder()
            .nodes(&nodes)
            .node_timeout(Duration::from_millis(500))
            .fair(false)
            .fail_fast(!common::flag("--no-fail-fast"))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    };
    let client = build();
    let other = build();
    let ttl = Duration::from_secs(30);
    let mut variants = vec![Variant {
        name: "lock".into(),
        sem: None,
        lock: Vec::new(),
        pairs: 0,
        busy: Duration::ZERO,
    }];
    // The other client's permits that keep all but one slot of a "full" semaphore held.
    let mut kept: Vec<Lock> = Vec::new();
    for k in [1usize, 4, 16, 64, 256] {
        for full in [false, true] {
            if full && k == 1 {
                continue;
            }
            let sem = Semaphore::new(&format!("bench:sem:{k}:{full}"), k).unwrap();
            if full {
                for _ in 0..k - 1 {
                    kept.push(
                        other
                            .try_acquire_permit(&sem, Duration::from_secs(3600))
                            .unwrap(),
                    );
                }
            }
            variants.push(Variant {
                name: format!(
                    "permit of {k}{}",
                    if full { ", all but one held" } else { "" }
                ),
                sem: Some(sem),
                lock: Vec::new(),
                pairs: 0,
                busy: Duration::ZERO,
            });
        }
    }
    // Every connection open and every script loaded before the clock starts.
    let warm = client.try_lock("bench:warm", ttl).unwrap();
    client.unlock(&warm).unwrap();
    let slice = Duration::from_secs_f64(seconds / f64::from(turns));
    for _ in 0..turns {
        for v in variants.iter_mut() {
            let start = Instant::now();
            while start.elapsed() < slice {
                let t0 = Instant::now();
                let lock = match &v.sem {
                    None => client.try_lock("bench:lock", ttl),
                    Some(sem) => client.try_acquire_permit(sem, ttl),
                }
                .expect("an uncontended acquisition");
                v.lock.push(t0.elapsed().as_nanos() as u64);
                client.unlock(&lock).expect("unlock");
                v.pairs += 1;
            }
            v.busy += start.elapsed();
        }
    }
    for l in &kept {
        let _ = other.unlock(l);
    }
    let base = q(&variants[0].lock, 0.5);
    println!("| variant | acquire p50 µs | p99 µs | pairs/s | p50 / lock's |");
    println!("|---|---|---|---|---|");
    for v in &variants {
        println!(
            "| {} | {:.1} | {:.1} | {:.0} | {:.2} |",
            v.name,
            q(&v.lock, 0.5),
            q(&v.lock, 0.99),
            v.pairs as f64 / v.busy.as_secs_f64(),
            q(&v.lock, 0.5) / base
        );
    }
}
