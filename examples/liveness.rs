//! Liveness figures: sequential lock+unlock pairs with all five masters up, with two of them
//! down, and after they come back; then how fast an attempt fails with three of five down,
//! and what it says.
//!
//! Run: `cargo run --release --example liveness -- [--seconds 2]`

use std::time::{Duration, Instant};

use redlock_mux::Redlock;
use testkit::local::LocalCluster;

fn pairs(client: &Redlock, tag: &str, run: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run {
        let lock = client
            .lock(&format!("liveness:{tag}:{n}"), Duration::from_secs(10))
            .expect("a majority is up");
        client.unlock(&lock).expect("a majority is up");
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let seconds: f64 = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    let run = Duration::from_secs_f64(seconds);
    let mut cluster = LocalCluster::start(5).expect("start redis-server (scripts/install-deps)");
    let node_timeout = Duration::from_millis(50);
    let client = Redlock::builder()
        .nodes(cluster.addrs())
        .node_timeout(node_timeout)
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let healthy = pairs(&client, "healthy", run);
    cluster.server(1).stop();
    cluster.server(3).stop();
    let degraded = pairs(&client, "two-down", run);
    cluster.server(1).restart().unwrap();
    cluster.server(3).restart().unwrap();
    let healed = pairs(&client, "healed", run);
    let later = pairs(&client, "later", run);
    println!("pairs/s, 5 of 5 up        {healthy:.0}");
    println!(
        "pairs/s, 3 of 5 up        {degraded:.0} ({:.2}x healthy)",
        degraded / healthy
    );
    println!(
        "pairs/s, healed           {healed:.0} ({:.2}x healthy)",
        healed / healthy
    );
    println!(
        "pairs/s, a window later   {later:.0} ({:.2}x healthy)",
        later / healthy
    );

    cluster.server(0).stop();
    cluster.server(2).stop();
    cluster.server(4).stop();
    let mut took = Vec::new();
    let mut last = None;
    for i in 0..200 {
        let start = Instant::now();
        let err = client
            .try_lock(&format!("liveness:three-down:{i}"), Duration::from_secs(10))
            .expect_err("no majority");
        took.push(start.elapsed());
        last = Some(err);
    }
    took.sort();
    println!(
        "3 of 5 down: every attempt failed; p50 {:?}, p99 {:?}, max {:?} (node timeout {node_timeout:?})",
        took[took.len() / 2],
        took[took.len() * 99 / 100],
        took[took.len() - 1]
    );
    if let Some(e) = last {
        println!("  the error: {e}");
    }
}
