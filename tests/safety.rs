//! Safety under faults: the mutual-exclusion checker over contended runs with and without a
//! fault schedule, the negative control that proves the checker can fail, and the delayed
//! restart rule that prevents what the negative control shows.

use std::time::Duration;

use redlock_mux::Redlock;
use redlock_sim::check::{check, History};
use testkit::checker::Checker;
use testkit::soak::{self, SoakConfig};
use testkit::{cluster, wait_until};

/// The invariants the simulator's checker (an implementation of its own) finds broken in the
/// windows `checker` recorded: it must agree with the soak's checker.
fn simulators_verdict(checker: &Checker) -> Vec<&'static str> {
    let windows = checker.windows();
    let Some(origin) = windows.iter().map(|w| w.from).min() else {
        return Vec::new();
    };
    let ns = |t: std::time::Instant| t.saturating_duration_since(origin).as_nanos() as u64;
    let history = History::of_windows(windows.iter().map(|w| {
        (
            w.holder as u32,
            w.resource as u32,
            ns(w.from),
            ns(w.until),
            w.token,
        )
    }));
    check(&history).iter().map(|v| v.invariant).collect()
}

#[test]
fn contended_lock_without_faults_is_exclusive() {
    let report = soak::run(&SoakConfig {
        duration: Duration::from_secs(3),
        faults: Vec::new(),
        ..SoakConfig::default()
    });
    eprintln!("{report}");
    assert_eq!(report.overlaps, 0, "{report}");
    assert!(report.acquisitions >= 100, "{report}");
}

#[test]
fn contended_lock_under_a_seeded_fault_schedule_is_exclusive() {
    let seed = std::env::var("REDLOCK_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261122);
    let report = soak::run(&SoakConfig {
        duration: Duration::from_secs(8),
        seed,
        ..SoakConfig::default()
    });
    eprintln!("seed {seed}\n{report}");
    assert_eq!(report.overlaps, 0, "seed {seed}\n{report}");
    assert!(report.acquisitions >= 100, "seed {seed}\n{report}");
    assert!(report.faults.values().sum::<u64>() >= 10, "{report}");
}

/// Client A holds the lock on exactly three of five masters. One of the three crashes and
/// comes back at once with no keys (no persistence, no delay): client B now finds three free
/// masters and takes the lock while A's validity runs. The checker must report the overlap
/// the algorithm predicts for a restart that breaks the rules.
#[test]
fn negative_control_instant_restart_without_persistence_lets_two_holders_in() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let ttl = Duration::from_secs(10);
    let build = || {
        Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(200))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    c.server(3).stop();
    c.server(4).stop();
    let lock_a = a.lock("control", ttl).unwrap();
    let checker = Checker::new();
    let section_a = checker.enter(0, lock_a.valid_until());
    // 3 and 4 come back empty (they were down when A locked); 2 crashes and restarts at once.
    c.server(3).restart().unwrap();
    c.server(4).restart().unwrap();
    c.server(2).restart().unwrap();
    // B's client reconnects on its own; the first rounds may still see connections closing.
    let mut lock_b = None;
    wait_until(
        Duration::from_secs(5),
        "B to get the lock on 2, 3 and 4",
        || {
            lock_b = b.try_lock("control", ttl).ok();
            lock_b.is_some()
        },
    );
    let lock_b = lock_b.unwrap();
    let section_b = checker.enter(1, lock_b.valid_until());
    checker.leave(section_b);
    checker.leave(section_a);
    let overlaps = checker.overlaps();
    assert_eq!(overlaps.len(), 1, "the checker must see A and B overlap");
    assert!(overlaps[0].by > Duration::ZERO);
    assert_eq!(simulators_verdict(&checker), ["overlap"]);
    assert_eq!(checker.detector_hits(), 1);
}

/// The same crash, with the restart delayed past the ttl as the algorithm requires: B cannot
/// get a quorum while A's validity runs, and the checker sees no overlap.
#[test]
fn delayed_restart_keeps_the_lock_exclusive() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let ttl = Duration::from_millis(600);
    let build = || {
        Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(100))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    c.server(3).stop();
    c.server(4).stop();
    let lock_a = a.lock("delayed", ttl).unwrap();
    let checker = Checker::new();
    let section_a = checker.enter(0, lock_a.valid_until());
    c.server(3).restart().unwrap();
    c.server(4).restart().unwrap();
    c.server(2).stop();
    let crashed = std::time::Instant::now();
    // While node 2 is down, B can reach only 3 and 4: never a quorum.
    let mut refused = 0;
    while !lock_a.is_expired() {
        assert!(
            b.try_lock("delayed", ttl).is_err(),
            "B got in while A's validity ran"
        );
        refused += 1;
    }
    assert!(refused > 0);
    checker.leave(section_a);
    // Node 2 may come back (empty) once the largest ttl has passed since its crash.
    wait_until(
        ttl * 2,
        "the restart delay rule: a ttl since the crash",
        || crashed.elapsed() > ttl,
    );
    c.server(2).restart().unwrap();
    let mut lock_b = None;
    wait_until(Duration::from_secs(5), "B to get the lock", || {
        lock_b = b.try_lock("delayed", ttl).ok();
        lock_b.is_some()
    });
    let section_b = checker.enter(1, lock_b.unwrap().valid_until());
    checker.leave(section_b);
    assert!(checker.overlaps().is_empty());
    assert!(simulators_verdict(&checker).is_empty());
    assert_eq!(checker.detector_hits(), 0);
}

/// Liveness: with two of five masters down, locks keep being granted; once they are back,
/// the rate returns to what it was (compared within this run, as a ratio).
#[test]
fn throughput_returns_after_faults_heal() {
    let mut c = cluster(5);
    let client = testkit::builder(&c)
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let window = Duration::from_millis(700);
    let rate = |tag: &str| {
        let start = std::time::Instant::now();
        let mut n = 0u32;
        while start.elapsed() < window {
            let lock = client
                .lock(&format!("heal:{tag}:{n}"), Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("{tag}: {e}"));
            client.unlock(&lock).unwrap();
            n += 1;
        }
        f64::from(n) / start.elapsed().as_secs_f64()
    };
    // The machine's own load swings the rate between windows (other tests, other builds):
    // the rate before is the median of three windows, and the healed rate gets up to five
    // windows to come back to half of it.
    let mut before: Vec<f64> = (0..3).map(|i| rate(&format!("before{i}"))).collect();
    before.sort_by(f64::total_cmp);
    let before = before[1];
    c.server(1).stop();
    c.server(3).stop();
    let degraded = rate("two-down");
    c.server(1).restart().unwrap();
    c.server(3).restart().unwrap();
    let mut healed = Vec::new();
    for i in 0..5 {
        healed.push(rate(&format!("healed{i}")));
        if healed[i] >= before * 0.5 {
            break;
        }
    }
    eprintln!("pairs/s: before {before:.0}, two down {degraded:.0}, healed {healed:.0?}");
    assert!(degraded > 0.0);
    assert!(
        healed.iter().any(|&h| h >= before * 0.5),
        "healed rates {healed:.0?}/s stay under half the rate before {before:.0}/s"
    );
}

/// Fencing under the same fault schedule: every client fenced, masters keeping their data
/// (`appendfsync always`) as fencing requires. No two holders at once, and every holder's
/// token above every token of a holder whose window ended before its own began.
#[test]
fn fenced_tokens_increase_under_a_seeded_fault_schedule() {
    let seed = std::env::var("REDLOCK_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261123);
    let report = soak::run(&SoakConfig {
        duration: Duration::from_secs(8),
        seed,
        fencing: true,
        ..SoakConfig::default()
    });
    eprintln!("seed {seed}\n{report}");
    assert_eq!(report.overlaps, 0, "seed {seed}\n{report}");
    assert_eq!(report.token_decreases, 0, "seed {seed}\n{report}");
    assert!(report.fenced >= 100, "seed {seed}\n{report}");
    assert_eq!(report.fenced, report.acquisitions, "every holder fenced");
    assert!(report.faults.values().sum::<u64>() >= 10, "{report}");
}

/// Two holders of one resource, one after the other, recorded by the checker with their
/// tokens: returns the checker's token decreases.
fn two_fenced_holders(first: &Redlock, second: &Redlock, between: impl FnOnce()) -> usize {
    let ttl = Duration::from_secs(10);
    let checker = Checker::new();
    let a = first.lock("fenced-control", ttl).unwrap();
    let s = checker.enter_fenced(0, 0, a.valid_until(), a.fencing_token());
    checker.leave(s);
    first.unlock(&a).unwrap();
    // A fail-fast unlock returns once a quorum released; the others' releases are still in
    // flight. Served until every node has run its release, so that a master restarted in
    // `between` with its data (appendfsync always) does not bring the first key back.
    let released = first.poll_idle(Duration::from_secs(5));
    assert!(released, "the first holder's releases still owed after 5 s");
    between();
    let mut b = None;
    wait_until(Duration::from_secs(5), "the second holder", || {
        b = second.try_lock("fenced-control", ttl).ok();
        b.is_some()
    });
    let b = b.unwrap();
    let s = checker.enter_fenced(1, 0, b.valid_until(), b.fencing_token());
    checker.leave(s);
    eprintln!(
        "tokens: first {:?}, second {:?}",
        a.fencing_token(),
        b.fencing_token()
    );
    assert!(checker.overlaps().is_empty());
    // The simulator's checker reads the same windows and must agree.
    let decreases = checker.token_decreases().len();
    let verdict = simulators_verdict(&checker);
    assert_eq!(verdict, vec!["token-order"; decreases], "{verdict:?}");
    decreases
}

/// Negative control for the second phase: node 0's counter is far ahead of the others', the
/// first holder's token comes from it, and node 0 then stops. Skipping the write-back (the
/// test-only switch), the second holder's token, drawn from nodes 1-4, is lower: the checker
/// must fire. The same events with the write-back are the positive control.
#[cfg(feature = "fault-injection")]
#[test]
fn negative_control_fencing_without_the_write_back_lets_the_token_go_down() {
    for write_back in [false, true] {
        let mut c = cluster(5);
        let addrs = c.addrs();
        testkit::redis(
            &addrs[0],
            &["SET", redlock_mux::DEFAULT_FENCING_KEY, "1000"],
        );
        // Every node's reply counted (no fail-fast), so that node 0's counter is the token.
        let client = testkit::builder(&c)
            .fail_fast(false)
            .fencing(true)
            .skip_fence_writeback_for_tests(!write_back)
            .build()
            .unwrap();
        let node0 = std::cell::RefCell::new(&mut c);
        let decreases =
            two_fenced_holders(&client, &client, || node0.borrow_mut().server(0).stop());
        if write_back {
            assert_eq!(decreases, 0, "with the write-back the token must increase");
        } else {
            assert_eq!(decreases, 1, "the checker must catch the lower token");
        }
    }
}

/// Negative control for the persistence assumption: two of three masters restart at once
/// without their data between two holders, and the third is paused. The second holder's
/// quorum is the two fresh masters, whose counters start again from 1: the token goes down,
/// and the checker must fire. The same run with `appendfsync always` keeps the counters.
#[test]
fn negative_control_instant_restart_without_persistence_lowers_the_token() {
    for persistent in [false, true] {
        let extra: &[&str] = if persistent {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &[]
        };
        let mut c = testkit::local::LocalCluster::start_with(3, extra).unwrap();
        let addrs = c.addrs();
        for a in &addrs {
            testkit::redis(a, &["SET", redlock_mux::DEFAULT_FENCING_KEY, "100"]);
        }
        let client = testkit::builder(&c).fencing(true).build().unwrap();
        let cluster = std::cell::RefCell::new(&mut c);
        let decreases = two_fenced_holders(&client, &client, || {
            let mut c = cluster.borrow_mut();
            c.server(0).restart().unwrap();
            c.server(1).restart().unwrap();
            c.server(2).pause().unwrap();
        });
        c.server(2).resume().unwrap();
        if persistent {
            assert_eq!(decreases, 0, "with persistence the token must increase");
        } else {
            assert_eq!(decreases, 1, "the checker must catch the lower token");
        }
    }
}
