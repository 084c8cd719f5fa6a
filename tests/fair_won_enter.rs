//! A fair client whose first try (the enter script) wins while some master refuses it, against
//! real masters: the refusing master put the client in its line in the same call, and a
//! client that holds the lock must not stay in a line (found in session 13's review; its race
//! with the quorum's decision found in session 14).
//!
//! Claim held to (docs/redlock.md, "What leaves the line"): a client whose try won stands in
//! no line once the masters have read what it sent. After a won enter round, the leave goes,
//! without being waited for, to every master whose refusal the round saw (it joined the
//! caller to its line); a refusal read after the quorum decided the round is answered by the
//! engine with a leave to that master as it is read (`Engine::late_enter`), even while the
//! winner's own watch of the line is still registered. Either way the leave follows the enter
//! on the connection that carried it.

use std::time::Duration;

use redlock_mux::resp::Frame;
use testkit::proxy::{Fault, Proxy};
use testkit::review::{client, holding, in_line, line};
use testkit::{cluster, redis, resource, wait_until};

/// Three masters, master 1 holding the resource under another value: C's lock is granted by
/// masters 0 and 2, master 1 refuses and puts C in its line. C then lets its lock run out (a
/// crashed or forgetful holder; a release kept for another waiter of C does the same). Before
/// the fix C stayed in master 1's line for the line's lease (an hour), where master 1's next
/// hand-off rang C and reserved the resource for it: the next waiter lost a claim lease for a
/// client that never waited.
#[test]
fn a_won_enter_leaves_no_line_behind() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let cl = client(&addrs, true, "c", lease);
    let key = resource("won-enter");
    redis(&addrs[1], &["SET", &key, "x", "PX", "60000"]);
    let ttl = Duration::from_secs(2);
    let l = cl.lock(&key, ttl).expect("masters 0 and 2 grant it");
    assert_eq!(holding(&addrs, &key, l.token().as_bytes()), 2);
    // The leave is not waited for: read once the masters have read it.
    wait_until(Duration::from_secs(10), "C out of every line", || {
        cl.poll_idle(Duration::from_millis(100));
        in_line(&addrs, &key, "c") == 0
    });
    // The lock runs out without an unlock.
    std::thread::sleep(ttl + Duration::from_millis(200));
    let after = in_line(&addrs, &key, "c");
    let lease_left = redis(&addrs[1], &["PTTL", &line(&key)]);
    assert_eq!(
        after, 0,
        "a client that never waited left in a line ({lease_left:?})"
    );
}

/// The race of session 14 made certain: master 1's replies are held back by a proxy (the
/// enter reaches it at once and joins C to its line; its refusal comes long after masters 0
/// and 2 decided the round). Before the fix the leave went only where the decided round had
/// seen a refusal, so C stayed in master 1's line: this test failed ("C out of master 1's
/// line" timed out).
#[test]
fn a_won_enter_leaves_the_line_of_a_master_whose_refusal_came_after_the_decision() {
    let c = cluster(3);
    let proxy = Proxy::start(c.servers()[1].addr());
    let mut nodes = c.addrs();
    nodes[1] = proxy.addr();
    let direct = c.addrs();
    let lease = Duration::from_millis(300);
    let cl = client(&nodes, true, "c", lease);
    // Every connection open and its scripts loaded before the fault.
    let warm = resource("won-enter-warm");
    let l = cl.lock(&warm, Duration::from_secs(5)).expect("all up");
    cl.unlock(&l).expect("all up");
    let key = resource("won-enter-late");
    redis(&direct[1], &["SET", &key, "x", "PX", "60000"]);
    proxy.set(Fault::Latency {
        fixed: Duration::from_secs(3),
        jitter: Duration::ZERO,
    });
    let scripts_before = scripts_run(&direct[1]);
    let asked = std::time::Instant::now();
    let l = cl
        .lock(&key, Duration::from_secs(20))
        .expect("masters 0 and 2 grant it");
    // Granted before master 1's answer could come back: the round was decided without it
    // (the race this test is about).
    assert!(asked.elapsed() < Duration::from_secs(3));
    assert_eq!(holding(&direct, &key, l.token().as_bytes()), 2);
    // Master 1 has run the enter (and joined C to its line) once it has run one more script.
    wait_until(Duration::from_secs(10), "master 1 to run the enter", || {
        scripts_run(&direct[1]) > scripts_before
    });
    // The refusal reaches the client 3 s after the decision; the engine answers it with a
    // leave to master 1 as it reads it (this client reads when it runs: here, serving).
    wait_until(Duration::from_secs(10), "C out of master 1's line", || {
        cl.poll_idle(Duration::from_millis(100));
        in_line(&direct, &key, "c") == 0
    });
    proxy.set(Fault::Pass);
    cl.unlock(&l).expect("released");
    wait_until(Duration::from_secs(10), "nothing left of the line", || {
        let gone = |a: &String| redis(a, &["EXISTS", &line(&key)]) == Frame::Integer(0);
        direct.iter().all(gone)
    });
}

/// How many script calls the master at `addr` has run (`EVALSHA` and `EVAL`, from `INFO
/// commandstats`).
fn scripts_run(addr: &str) -> u64 {
    let Frame::Bulk(info) = redis(addr, &["INFO", "commandstats"]) else {
        panic!("INFO commandstats on {addr}");
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
