//! A fair client's bells against real masters: every hand-off that reserves a resource for the
//! client wakes its waiter, two hand-offs under one tag included.
//!
//! Claim held to (docs/redlock.md, "The claim"): the rung client's engine wakes its waiter
//! once a quorum of masters has rung, and only a slower master's bell of a hand-off that has
//! already woken the waiter is spent. A hand-off's tag is the releasing token for a release,
//! but the ringing client's id for a leave (and for a claim that rings the next waiter on): two
//! leaves of one client that pass a reservation on to this one within a claim lease share a
//! tag. Before the fix the engine took the second's bells for late bells of the first and
//! spent them all: the waiter slept with the resource reserved for it on every master, until
//! the reservation lapsed (found by `review_s15b`'s dropped async waiters, where a blocking
//! client's two waiters missed such a hand-off).

use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use redlock_mux::resp::{encode_command, Frame};
use redlock_mux::script::{self, BELL_PREFIX, RESERVED_PREFIX};
use testkit::review::{client, holding, in_line, line};
use testkit::{cluster, redis, resource};

const TTL: Duration = Duration::from_secs(20);
const TOKEN_X: &str = "9999999999999999999999999999999999999999";

/// Runs `body` with `keys` and `args` on the server at `addr`; its reply.
fn eval(addr: &str, body: &str, keys: &[&str], args: &[&str]) -> Frame {
    let n = keys.len().to_string();
    let mut all = vec!["EVAL", body, &n];
    all.extend_from_slice(keys);
    all.extend_from_slice(args);
    redis(addr, &all)
}

/// A connection subscribed to client `id`'s bell on the server at `addr`, for as long as it is
/// kept: a `PUBLISH` to it reaches a subscriber, so a hand-off rings `id` rather than skip it.
fn subscribed(addr: &str, id: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut out = BytesMut::new();
    let bell = format!("{BELL_PREFIX}{id}");
    encode_command(&mut out, &[b"SUBSCRIBE", bell.as_bytes()]);
    s.write_all(&out).unwrap();
    s
}

/// Three masters; D, a blocking fair client, waits for R in line behind client A (its scripts
/// run by hand, its bell subscribed), while X holds R. X's release rings A and reserves R for
/// A; A gives up without claiming, and its leave passes the reservation on to D: on every
/// master, a bell tagged `a` (A's id). D claims and releases. The same again at once, well
/// within the claim lease: a second hand-off to D tagged `a`, from the same masters.
///
/// Held to: D granted both times before the reservation for it lapses (the claim lease, 10
/// s; a claim is a round trip). Before the fix the second time's bells were all spent as late
/// bells of the first: D waited out the lease with R reserved for it on every master.
#[test]
fn a_second_leave_of_one_client_within_a_claim_lease_wakes_the_waiter() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_secs(10);
    let claim_ms = lease.as_millis().to_string();
    let r = resource("fair-bells-same-tag");
    let q = line(&r);
    let _a_bells: Vec<TcpStream> = addrs.iter().map(|a| subscribed(a, "a")).collect();
    let d = client(&addrs, true, "d", lease);
    // Connections open, bells subscribed, scripts loaded.
    let w = d.lock(&resource("fair-bells-warm"), TTL).expect("all up");
    d.unlock(&w).expect("all up");
    let first = Instant::now();
    for turn in 1..=2 {
        for a in &addrs {
            redis(a, &["SET", &r, TOKEN_X, "PX", "60000"]);
            // A waits: first in line.
            let waited = eval(
                a,
                script::WAIT,
                &[&r, &q],
                &["a", &claim_ms, "1", "600000", "0"],
            );
            assert!(matches!(waited, Frame::Array(_)), "{waited:?}");
        }
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let d = d.clone();
            let r = r.clone();
            std::thread::spawn(move || {
                let l = d.lock_within(&r, TTL, Duration::from_secs(60));
                let _ = tx.send(Instant::now());
                l
            })
        };
        // D's enter is one round trip on idle masters.
        testkit::wait_until(Duration::from_secs(10), "D in every line", || {
            in_line(&addrs, &r, "d") == 3
        });
        for a in &addrs {
            // X's release rings A, the head: R reserved for A.
            let released = eval(
                a,
                script::HANDOFF,
                &[&r, &q],
                &[TOKEN_X, &claim_ms, "x", "1", "0"],
            );
            assert_eq!(released, Frame::Integer(1));
        }
        let reserved_a = format!("{RESERVED_PREFIX}a");
        assert_eq!(holding(&addrs, &r, reserved_a.as_bytes()), 3);
        let left = Instant::now();
        for a in &addrs {
            // A gives up: its leave passes the reservation on to D (the line's only other
            // waiter), ringing D with tag `a`.
            let passed = eval(a, script::LEAVE, &[&r, &q], &["a", &claim_ms]);
            assert_eq!(passed, Frame::Integer(1));
        }
        assert!(
            left.duration_since(first) < lease / 2,
            "turn {turn}: too late to prove anything (the first turn's bells are forgotten a \
             claim lease after they came)"
        );
        let granted = rx.recv_timeout(lease).unwrap_or_else(|_| {
            panic!("turn {turn}: D not woken by the leaves that passed R on to it")
        });
        let l = waiter.join().unwrap().expect("D granted");
        eprintln!(
            "turn {turn}: D granted {:?} after A's leave",
            granted.saturating_duration_since(left)
        );
        d.unlock(&l).expect("released");
        // D's claim may have reached the last master before A's leave did there (a quorum of
        // bells woke it): whatever that left there goes before the next turn.
        for a in &addrs {
            redis(a, &["DEL", &r, &q]);
        }
    }
}

/// A fair client subscribes its bell ahead of the `HELLO 3` reply, right before its first
/// command that stands in a line (so that a first try's join is never rung before the
/// subscription exists). A server without `HELLO`
/// (renamed away, or older than Redis 6) would run that `SUBSCRIBE` on a RESP2 connection,
/// where it then refuses everything else: the refused `HELLO` spends the connection, and the
/// next one asks first. Held to: a fair client of such servers locks (one connection spent
/// per master, no more), waits behind another holder, unlocks, and leaves nothing.
#[test]
fn a_fair_client_of_servers_without_hello_locks_waits_and_unlocks() {
    let c = testkit::local::LocalCluster::start_with(3, &["--rename-command", "HELLO", ""])
        .expect("redis-server");
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let h = client(&addrs, true, "h", lease);
    let w = client(&addrs, true, "w", lease);
    let key = resource("fair-no-hello");
    let held = h
        .lock(&key, TTL)
        .expect("granted after the spent connections");
    let token = held.token().as_bytes().to_vec();
    assert_eq!(holding(&addrs, &key, &token), 3);
    for node in &h.stats().nodes {
        // The first connection spent by the refusal, the second working.
        assert_eq!(node.connects, 2, "{node:?}");
    }
    std::thread::scope(|s| {
        let t = s.spawn(|| w.lock_within(&key, TTL, Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(200));
        h.unlock(&held).expect("released");
        let l = t.join().unwrap().expect("the waiter's turn");
        w.unlock(&l).expect("released");
        assert_eq!(holding(&addrs, &key, l.token().as_bytes()), 0);
    });
    assert_eq!(holding(&addrs, &key, &token), 0);
    for node in h.stats().nodes.iter().chain(&w.stats().nodes) {
        assert_eq!(node.connects, 2, "{node:?}");
    }
}
