//! Heap allocations on the blocking hot path, counted by a global allocator: a steady-state
//! lock + unlock pair allocates nothing, for resource names up to 64 bytes (the `Lock` keeps
//! its name inline).

use std::time::Duration;

use redlock_mux::Redlock;
use testkit::local::LocalCluster;

use testkit::counting_alloc;

#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

use counting_alloc::allocs;

#[test]
fn steady_state_pair_allocates_nothing() {
    let cluster = LocalCluster::start(5).expect("start redis-server");
    let redlock = Redlock::builder()
        .nodes(cluster.addrs())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // Names of every length up to 64 bytes.
    let names: Vec<String> = (0..300)
        .map(|i| format!("alloc:{i}:{}", "x".repeat(i % 54)))
        .collect();
    assert!(names.iter().all(|n| n.len() <= 64));
    // Warm-up: connections opened, scripts loaded, buffers grown to their working size.
    for name in &names[..100] {
        let lock = redlock.lock(name, Duration::from_secs(10)).unwrap();
        redlock.unlock(&lock).unwrap();
    }
    let mut per_pair = Vec::new();
    for name in &names[100..] {
        let before = allocs();
        // A round that fails (a node descheduled past its timeout on a loaded machine) builds
        // an error report, which allocates: only whole successful pairs are the hot path.
        let Ok(lock) = redlock.try_lock(name, Duration::from_secs(10)) else {
            continue;
        };
        let released = redlock.unlock(&lock).is_ok();
        drop(lock);
        if released {
            per_pair.push(allocs() - before);
        }
    }
    assert!(
        per_pair.len() >= 150,
        "{} of 200 pairs succeeded",
        per_pair.len()
    );
    // A node that falls behind on a loaded machine makes its connection's buffers grow (one
    // reallocation, kept afterwards): that is the only allocation a pair may show, and only
    // now and then. Every other pair allocates nothing.
    let worst = per_pair.iter().max().copied().unwrap_or(0);
    let allocating = per_pair.iter().filter(|&&n| n > 0).count();
    assert!(
        worst <= 1 && allocating * 20 <= per_pair.len(),
        "allocations per lock+unlock pair: {per_pair:?}"
    );
}
