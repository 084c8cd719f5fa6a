//! Heap allocations on the blocking hot path, counted by a global allocator: a steady-state
//! lock + unlock pair allocates exactly once, for the `Lock`'s own resource name.

use std::time::Duration;

use redlock_mux::local::LocalCluster;
use redlock_mux::Redlock;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

use counting_alloc::allocs;

#[test]
fn steady_state_pair_allocates_only_the_resource_name() {
    let cluster = LocalCluster::start(5).expect("start redis-server");
    let redlock = Redlock::builder()
        .nodes(cluster.addrs())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let names: Vec<String> = (0..300).map(|i| format!("alloc:{i}")).collect();
    // Warm-up: connections opened, scripts loaded, buffers grown to their working size.
    for name in &names[..100] {
        let lock = redlock.lock(name, Duration::from_secs(10)).unwrap();
        redlock.unlock(&lock).unwrap();
    }
    let mut per_pair = Vec::new();
    for name in &names[100..] {
        let before = allocs();
        let lock = redlock.lock(name, Duration::from_secs(10)).unwrap();
        redlock.unlock(&lock).unwrap();
        drop(lock);
        per_pair.push(allocs() - before);
    }
    let worst = per_pair.iter().max().copied().unwrap_or(0);
    assert_eq!(
        worst, 1,
        "allocations per lock+unlock pair (one is the Lock's resource String): {per_pair:?}"
    );
}
