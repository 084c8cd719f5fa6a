//! A set of resources (`lock_many`) waiting beside fair waiters of one of its resources, on
//! real masters. Fair mode hands a released resource to the head of its line by reserving it
//! (`redlock-mux:reserved:<id>`); a set stands in no line (docs/redlock.md, "What order
//! survives which faults"), so while the line of one of its resources never empties, every
//! try of the set finds that resource held or reserved. These tests measure how long a set
//! waits for a resource that keeps changing hands.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_mux::Redlock;
use testkit::review::client;
use testkit::{cluster, resource};

const TTL: Duration = Duration::from_secs(10);
const LEASE: Duration = Duration::from_millis(100);
const HOLD: Duration = Duration::from_millis(2);

/// Three clients (fair ones if `fair`) take turns on `a` (lock, hold 2 ms, unlock) until `stop`; a fourth,
/// of the same mode, asks for `{a, b}` once the turns run, by `lock_many` with tries 50 ms apart.
/// Answers how long the set waited, the mean time between turns on `a` meanwhile, and how
/// many turns the singles took while the set waited.
fn set_beside_a_busy_line(fair: bool) -> (Duration, Duration, u64) {
    let c = cluster(3);
    let nodes = c.addrs();
    let a = resource("set-a");
    let b = resource("set-b");
    let stop = AtomicBool::new(false);
    let turns = AtomicU64::new(0);
    let singles: Vec<Redlock> = (0..3)
        .map(|i| client(&nodes, fair, &format!("single-{i}"), LEASE))
        .collect();
    let set = client(&nodes, fair, "set", LEASE);
    thread::scope(|s| {
        for single in &singles {
            let (a, stop, turns) = (&a, &stop, &turns);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let l = single.lock(a, TTL).expect("a single's turn");
                    thread::sleep(HOLD);
                    single.unlock(&l).expect("a single's release");
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // The singles' line is running once each has had a few turns.
        while turns.load(Ordering::Relaxed) < 30 {
            thread::sleep(Duration::from_millis(5));
        }
        let before = turns.load(Ordering::Relaxed);
        let start = Instant::now();
        // Bounded: the set's tries run out (10,000 tries 50 ms apart) or the singles stop
        // after 5 s (the assertion then reports the wait), whichever comes first.
        let (set, a_, b_, stop_) = (&set, &a, &b, &stop);
        let waiter = s.spawn(move || {
            let l = set.lock_many(&[a_.as_str(), b_.as_str()], TTL);
            let waited = start.elapsed();
            stop_.store(true, Ordering::Relaxed);
            (l, waited)
        });
        while !waiter.is_finished() && start.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(5));
        }
        let during = turns.load(Ordering::Relaxed) - before;
        let per_turn = start.elapsed() / u32::try_from(during.max(1)).unwrap_or(u32::MAX);
        stop.store(true, Ordering::Relaxed);
        let (l, waited) = waiter.join().expect("the set's thread");
        let l = l.expect("the set's lock once the singles stopped");
        set.unlock(&l).expect("the set's release");
        (waited, per_turn, during)
    })
}

/// A fair set must not wait for the line of one of its resources to empty: once it asks,
/// it is due after the waiters ahead of it (three here), give or take a claim lease. Bound:
/// 20 turns of the singles (a turn measured in this run) plus two claim leases.
#[test]
#[ignore = "defect (issue 26, left open): a set stands in no line, so fair singles that keep a line going starve it (it waited until the singles stopped, 5 s, every run)"]
fn a_set_is_not_starved_by_a_busy_line_of_one_of_its_resources() {
    let (waited, per_turn, turns) = set_beside_a_busy_line(true);
    let bound = per_turn * 20 + LEASE * 2;
    eprintln!("the set waited {waited:?} ({turns} turns of the singles, {per_turn:?} a turn)");
    assert!(
        waited <= bound,
        "the set waited {waited:?} while the singles took {turns} turns ({per_turn:?} a turn); bound {bound:?}"
    );
}

/// The README's advice where sets share resources with busy single waiters: fair mode off for
/// all of them. Every waiter is then woken by the release and the set's try races the
/// singles' (no reservation shuts it out), though not on equal terms: the releasing single
/// tries again at once, the set once a push has woken it. It won after 2 to 218 of the
/// singles' turns in 14 runs on a busy 2-core machine; the bound is 800 turns (measured in
/// the run) plus two claim leases.
#[test]
fn without_fair_mode_a_set_beside_a_busy_resource_gets_its_turn() {
    let (waited, per_turn, turns) = set_beside_a_busy_line(false);
    let bound = per_turn * 800 + LEASE * 2;
    eprintln!("the set waited {waited:?} ({turns} turns of the singles, {per_turn:?} a turn)");
    assert!(
        waited <= bound,
        "the set waited {waited:?} while the singles took {turns} turns ({per_turn:?} a turn); bound {bound:?}"
    );
}
