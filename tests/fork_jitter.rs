//! Retry jitter stays random across `fork()`: workers of a pre-forking server, each with a
//! client of its own, contending for one held resource, must not retry in step. The jitter
//! comes from the kernel's generator (`OsRandom`); a thread's generator, copied by the fork,
//! would hand every worker the same delays once the parent had drawn from it.
//!
//! Four children build a fresh client each and `lock` a resource another client holds (six
//! tries, delay 1 s: five waits uniform in 0.5..1 s), and exit with the time that took in
//! 20 ms units. Independent draws spread by hundreds of milliseconds; identical ones by the
//! scheduling noise alone. Its own test binary: it forks.

mod forking;

use std::time::{Duration, Instant};

use redlock_mux::Redlock;

#[test]
fn forked_workers_draw_different_retry_delays() {
    let c = testkit::cluster(1);
    let holder = testkit::builder(&c).build().unwrap();
    let held = holder
        .lock("jitter:held", Duration::from_secs(600))
        .unwrap();
    let config = Redlock::builder()
        .nodes(c.addrs())
        .node_timeout(Duration::from_secs(2))
        .retry(6, Duration::from_secs(1))
        .wakeups(false)
        .config()
        .unwrap();
    // The parent retries once before it forks, as a server that locked something would: the
    // test thread's generator is initialised now, and copied by each fork.
    let parent = Redlock::builder()
        .nodes(c.addrs())
        .retry(2, Duration::from_millis(10))
        .build()
        .unwrap();
    assert!(parent.lock("jitter:held", Duration::from_secs(1)).is_err());
    let gate = forking::Gate::new();
    let pids: Vec<_> = (0..4)
        .map(|_| {
            let config = config.clone();
            forking::fork(|| {
                gate.pass();
                let client = Redlock::with_config(config).unwrap();
                let t = Instant::now();
                let r = client.lock("jitter:held", Duration::from_secs(1));
                assert!(r.is_err());
                (t.elapsed().as_millis() / 20).min(250) as i32
            })
        })
        .collect();
    for _ in 0..4 {
        gate.open();
    }
    let codes: Vec<i32> = pids
        .into_iter()
        .map(|p| forking::wait(p, Duration::from_secs(60)))
        .collect();
    eprintln!("children's lock() time, 20 ms units: {codes:?}");
    let spread = codes.iter().max().unwrap() - codes.iter().min().unwrap();
    assert!(
        spread > 2,
        "forked workers waited the same random delays: {codes:?} (x20 ms)"
    );
    holder.unlock(&held).unwrap();
}
