//! Heap allocations on the async hot path, counted by a global allocator on a current-thread
//! runtime (the caller and the driver task on one thread, so every allocation of a pair is
//! counted). The rounds' channels allocate (a oneshot per round, the unbounded channel's
//! blocks); the command, the token and the lock's name do not.

use std::time::Duration;

use redlock_mux::AsyncRedlock;
use testkit::local::LocalCluster;

use testkit::counting_alloc;

#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

use counting_alloc::allocs;

/// Allocations a steady-state pair makes: one oneshot channel per round (lock, unlock). The
/// unbounded channel's blocks of 32 messages are reused; a share of one may show in the mean.
const PER_PAIR: f64 = 2.0;

#[test]
fn steady_state_async_pair_allocates_only_its_channels() {
    let cluster = LocalCluster::start(5).expect("start redis-server");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let redlock = AsyncRedlock::builder()
            .nodes(cluster.addrs())
            .node_timeout(Duration::from_millis(500))
            .build_async()
            .unwrap();
        let names: Vec<String> = (0..600).map(|i| format!("alloc-async:{i}")).collect();
        for name in &names[..200] {
            let lock = redlock.lock(name, Duration::from_secs(10)).await.unwrap();
            redlock.unlock(&lock).await.unwrap();
        }
        let mut per_pair = Vec::new();
        for name in &names[200..] {
            let before = allocs();
            let Ok(lock) = redlock.try_lock(name, Duration::from_secs(10)).await else {
                continue;
            };
            let released = redlock.unlock(&lock).await.is_ok();
            drop(lock);
            if released {
                per_pair.push(allocs() - before);
            }
        }
        assert!(
            per_pair.len() >= 300,
            "{} of 400 pairs succeeded",
            per_pair.len()
        );
        let total: u64 = per_pair.iter().sum();
        let mean = total as f64 / per_pair.len() as f64;
        let worst = per_pair.iter().max().copied().unwrap_or(0);
        eprintln!("async pair allocations: mean {mean:.2}, worst {worst}");
        assert!(
            mean <= PER_PAIR + 0.1,
            "mean {mean:.2} allocations per pair"
        );
    });
}
