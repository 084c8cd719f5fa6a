//! A hostile review, against real masters, of session 21's fair-mode changes
//! (docs/redlock.md "Waiting in line", "The line", "What order survives which faults",
//! "Sets and the line"):
//!
//! 1. enter.lua (0f7be89): a first try takes a free resource with `SET NX` only where the
//!    resource's line is empty; behind a line it joins it and rings the head;
//! 2. the gate (b71ae9a, 9268700): a fair client's wait or enter is parked while a claim of
//!    the same client on an overlapping resource is open;
//! 3. the simulator's judge (7fbebf5) notes every wait in line.
//!
//! Found (the tests failed at 9268700; both pass now):
//! - `a_round_parked_behind_a_claim_decided_at_its_deadline_goes_out_async` (change 2): the
//!   engine flushed parked rounds at the *start* of `handle_timeout`, but a claim round that
//!   is decided by its deadline completes later in that same call (`fail_fast(false)`: every
//!   round waits for every master; one master silent), closing the gate with nothing left to
//!   send the parked round and no timer for it. The parked enter then waited for the client's
//!   next event. Measured: T2's `lock_within(R, 400 ms)` (node timeout 400 ms, master 2
//!   blackholed) returned after 4.70 s, *with the lock*, only because T1's unlock at the end of
//!   its 4 s hold was that next event. Fixed: `handle_timeout` (and `reset`) let parked rounds
//!   go after the deadlines too (`engine::gate_tests::a_claim_decided_by_its_deadline_lets_the_wait_go_at_once`);
//!   T2 now returns `Conflict` after 1.50 s, inside T1's hold.
//! - `a_free_resource_behind_live_stale_places_is_taken_within_about_a_lease` (change 1): a
//!   resource nobody holds, whose line holds three stale places of a live client (ids
//!   subscribed to their bells by the test's own connection, standing for a client whose
//!   leave never landed or that stays idle: its bells are delivered, it never claims), was a
//!   held one to a newcomer: its enter no longer `SET NX`ed it, it joined behind them and rang
//!   the head, each stale place held the resource reserved for a claim lease, and the
//!   newcomer, fourth in line, waited its timer (eight leases) before its claim took the
//!   lapsed head out and rang the next. Measured (claim lease 300 ms): `lock_within` got the
//!   free resource after 3.01 s (10 leases); `lock` with three tries failed with `Conflict`
//!   (every master `Held`, by reservations for the stale ids) after 2.73 s. Fixed by taking
//!   change 1 back: a first try takes a free resource at once again, and a lock that runs out
//!   unreleased may go to a newcomer ahead of the head (documented; the simulator's seed 67080
//!   was the judge taking a failed release for a release).
//!
//! Suspected by the reviewer and handled: a dropped async future whose round was held back
//! would have sent it after its leave (back in the line with nobody waiting): the async
//! driver and the simulator now tell the engine (`Engine::forget_gone`;
//! `engine::gate_tests::a_held_back_wait_whose_waiter_went_away_ends_unsent`).
//!
//! Held (tests pass; each asserts an order, a count or a bound that a regression would break):
//! - `a_lapsed_lock_goes_to_a_newcomer_and_the_head_next_*` (both clients): H's lock runs out
//!   unreleased while W1 stands in line with its timer 8 s off; a newcomer N's first try takes
//!   R at once, and N's release rings W1, long before its timer. (Against change 1 the order
//!   was W1 then N.)
//! - `after_contention_an_uncontended_lock_is_one_try`: after 25 turns of three async tasks
//!   and two threads on one resource every line is empty on every master, and a lone `lock`
//!   of either client is 1 try and 0 claims.
//! - `siblings_of_one_client_get_one_turn_per_trip_*` (both clients): A's three waiters (two
//!   joined after B) and B's one: B is served second, and all four within their bounds (no
//!   wait parked for good with the default fail-fast).
//! - Simulator (change 3), with the release binary of this worktree and two switches added
//!   there for the run only (not committed): the gate disabled (`must_park` false), and the
//!   model's enter taking a free resource whatever the line. Seed 55956 (4 clients, 13 ops):
//!   clean 0 fairness violations, gate disabled 2 (`fifo`: c2 joined at 5.3 ms, served at 88.4
//!   ms after c3, who joined at 29.9 ms). Seed 67080 (4, 18): clean 0, old enter 1
//!   (`passed-over`, c3 at 95.3 ms while c2 stood in line): the judge that notes every wait
//!   still sees both faults at their seeds. (Since, seed 67080 is not judged: its lock ran out
//!   after a failed release, a fault the order does not survive, and the judge now knows it.) Over 2000 seeds of the default `--faults none`
//!   mix neither break shows (0 fairness violations each, 397-403 places judged; clean 0 of
//!   401), as expected of faults found at 2 in 80,000; `--negative waiter-gives-up` is caught
//!   (8222 violations in 295 of 300 seeds).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::Options;
use redlock_mux::resp::Frame;
use redlock_mux::script::{BELL_PREFIX, QUEUE_PREFIX};
use redlock_mux::{AsyncRedlock, Lock, Redlock};
use testkit::proxy::{self, Fault};
use testkit::review::{client, in_line, options, Admin};
use testkit::{cluster, redis, resource, wait_until, LockClient};

const TTL: Duration = Duration::from_secs(60);

/// A two-worker runtime and an async client of `o` on it.
fn async_client(o: Options) -> (tokio::runtime::Runtime, Arc<AsyncRedlock>) {
    let cfg = o.validate().expect("valid options");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let c = rt
        .block_on(async { AsyncRedlock::with_config(cfg) })
        .expect("a client");
    (rt, Arc::new(c))
}

/// The line of `key` on `addr`, head first.
fn line_on(addr: &str, key: &str) -> Vec<String> {
    match redis(
        addr,
        &["ZRANGE", &format!("{QUEUE_PREFIX}{key}"), "0", "-1"],
    ) {
        Frame::Array(v) => v
            .into_iter()
            .map(|f| match f {
                Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("ZRANGE: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Change 2 (the gate): a round parked behind a claim that is decided by its deadline.
// ---------------------------------------------------------------------------------------------

/// What [`parked_behind_a_claim_decided_at_its_deadline`] measured.
#[derive(Debug)]
struct Parked {
    /// T2's `lock_within` bound.
    bound: Duration,
    /// How long T1 held the lock it claimed.
    hold: Duration,
    /// Whether T2's `lock_within` had returned by the end of the hold.
    returned_during_hold: bool,
    /// How long T2's `lock_within` took, and its outcome.
    took: Duration,
    outcome: Result<(), String>,
}

/// Client A (async, fair, `fail_fast(false)`, node timeout `nt`) reaches master 2 through a
/// proxy. Its task T1 stands in R's line behind H's lock; master 2's path is then blackholed
/// and H releases: T1 is rung by the two other masters (a quorum of bells) and claims, and
/// its claim round, which waits for every master without fail-fast, is decided Won at its
/// deadline (master 2 times out). A quarter of a node timeout into that claim, A's task T2
/// calls `lock_within(R, nt)`: its enter is parked behind T1's open claim. T1 holds the lock
/// for `hold`, then unlocks.
fn parked_behind_a_claim_decided_at_its_deadline() -> Parked {
    let c = cluster(3);
    let direct = c.addrs();
    let (proxies, via) = proxy::in_front(&c, 2..3);
    let nt = Duration::from_millis(400);
    let lease = Duration::from_millis(300);
    let h = client(&direct, true, "s21gh", lease);
    let mut o = options(&via, true, "s21ga", lease, 10_000);
    o.node_timeout = nt;
    o.fail_fast = false;
    let (rt, a) = async_client(o);
    let r = resource("s21-gate");
    let held = h.lock(&r, TTL).expect("H takes R");
    let t1 = {
        let (a, r) = (a.clone(), r.clone());
        rt.spawn(async move { a.lock_within(&r, TTL, Duration::from_secs(30)).await })
    };
    wait_until(Duration::from_secs(10), "T1 in every line", || {
        in_line(&direct, &r, "s21ga") == 3
    });
    // Its enter's replies are in (loopback; the proxy forwards at once).
    std::thread::sleep(Duration::from_millis(100));
    proxies[0].set(Fault::Blackhole);
    h.unlock(&held).expect("H releases");
    std::thread::sleep(nt / 4);
    let bound = nt;
    let started = Instant::now();
    let t2 = {
        let (a, r) = (a.clone(), r.clone());
        rt.spawn(async move {
            let got = a.lock_within(&r, TTL, bound).await;
            (got, Instant::now())
        })
    };
    let l1: Lock = rt
        .block_on(t1)
        .expect("T1 runs")
        .expect("T1 claims R (two masters of three)");
    let hold = nt * 10;
    let until = Instant::now() + hold;
    while Instant::now() < until && !t2.is_finished() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let returned_during_hold = t2.is_finished();
    let _ = rt.block_on(a.unlock(&l1));
    let (got, at) = rt.block_on(t2).expect("T2 runs");
    let outcome = match got {
        Ok(l) => {
            let _ = rt.block_on(a.unlock(&l));
            Ok(())
        }
        Err(e) => Err(format!("{e:?}")),
    };
    proxies[0].set(Fault::Pass);
    Parked {
        bound,
        hold,
        returned_during_hold,
        took: at.saturating_duration_since(started),
        outcome,
    }
}

/// A wait or enter parked behind a claim of its client goes out once the claim is decided,
/// however the claim's round ends. The engine flushes parked rounds at the start of
/// `handle_timeout`, but a claim round decided by its deadline (fail-fast off: every round
/// waits for every master; one master silent) completes later in that same call, closing the
/// gate with nothing to send the parked round and no timer left for it: it stays parked until
/// the next event of the client (here T1's unlock, `hold` later), and `lock_within`'s bound
/// is overrun by the whole hold.
#[test]
fn a_round_parked_behind_a_claim_decided_at_its_deadline_goes_out_async() {
    let p = parked_behind_a_claim_decided_at_its_deadline();
    eprintln!("T2 took {:?}: {:?}", p.took, p.outcome);
    assert!(
        p.returned_during_hold,
        "T2's lock_within({:?}) was still running {:?} later, at the end of T1's {:?} hold: \
         its enter stayed parked after T1's claim was decided ({p:?})",
        p.bound,
        p.hold + p.bound,
        p.hold
    );
    assert!(p.took < p.hold / 2, "{p:?}");
}

// ---------------------------------------------------------------------------------------------
// Change 1 (enter.lua): a first try behind a line.
// ---------------------------------------------------------------------------------------------

/// R is free (nobody holds it), and each master's line of R holds `ghosts` client ids that
/// wait for nothing: `live` ones are subscribed to their bells by the test's own connection
/// (a live client whose place is stale: a leave that never landed, a process sharing an id),
/// the others have no subscriber (a crashed client). A fair newcomer N (blocking, claim lease
/// `lease`) then locks R, with `lock_within` when `within`, else with `lock` and three tries.
/// Returns how long N took and what it got.
fn free_behind_stale_places(
    ghosts: usize,
    live: bool,
    within: bool,
    lease: Duration,
) -> (Duration, Result<(), String>) {
    let c = cluster(3);
    let direct = c.addrs();
    let r = resource("s21-ghost");
    let q = format!("{QUEUE_PREFIX}{r}");
    let ids: Vec<String> = (0..ghosts).map(|g| format!("s21ghost{g}")).collect();
    let mut subs = Vec::new();
    for a in &direct {
        for (k, id) in ids.iter().enumerate() {
            redis(a, &["ZADD", &q, &(k + 1).to_string(), id]);
        }
        redis(a, &["PEXPIRE", &q, "3600000"]);
        if live {
            let mut s = Admin::open(a);
            let chans: Vec<String> = ids.iter().map(|i| format!("{BELL_PREFIX}{i}")).collect();
            let mut args = vec!["SUBSCRIBE"];
            args.extend(chans.iter().map(String::as_str));
            let _ = s.cmd(&args);
            subs.push(s);
        }
    }
    let mut o = options(&direct, true, "s21n", lease, 3);
    o.retry_delay = Duration::from_millis(50);
    let n = Redlock::with_config(o.validate().unwrap()).unwrap();
    // Warm N's connections on another resource (the measure is the line, not the connects).
    let warm = n.try_lock(&resource("s21-warm"), TTL).unwrap();
    n.unlock(&warm).unwrap();
    let start = Instant::now();
    let got = if within {
        n.lock_within(&r, TTL, lease * 40)
    } else {
        n.lock(&r, TTL)
    };
    let took = start.elapsed();
    let out = match got {
        Ok(l) => {
            n.unlock(&l).unwrap();
            Ok(())
        }
        Err(e) => Err(format!("{e:?}")),
    };
    drop(subs);
    (took, out)
}

/// A free resource whose line holds only stale places. Before session 21 the enter's `SET
/// NX` took it at once; now the newcomer joins behind them and rings the head, and each live
/// stale place then holds the resource reserved for a claim lease before the next read takes
/// it out and rings the next: `ghosts` stale places cost a free resource `ghosts` leases, and
/// `lock` (three tries) fails on a resource nobody holds. Crashed clients' places cost nothing
/// (their bells reach nobody: the ring skips them), measured beside.
#[test]
fn a_free_resource_behind_live_stale_places_is_taken_within_about_a_lease() {
    let lease = Duration::from_millis(300);
    let (dead, dead_out) = free_behind_stale_places(3, false, true, lease);
    eprintln!("3 crashed places: lock_within took {dead:?}: {dead_out:?}");
    assert!(dead_out.is_ok() && dead < lease, "{dead:?} {dead_out:?}");
    let (tries, tries_out) = free_behind_stale_places(3, true, false, lease);
    eprintln!("3 live stale places: lock (3 tries) took {tries:?}: {tries_out:?}");
    let (live, live_out) = free_behind_stale_places(3, true, true, lease);
    eprintln!("3 live stale places: lock_within took {live:?}: {live_out:?}");
    assert!(live_out.is_ok(), "{live_out:?}");
    assert!(
        tries_out.is_ok(),
        "lock with three tries failed on a resource nobody holds, after {tries:?}: {tries_out:?}"
    );
    assert!(
        live < lease * 2 + dead,
        "a free resource behind 3 live stale places took {live:?} ({} leases of {lease:?})",
        live.as_secs_f64() / lease.as_secs_f64()
    );
}

/// A lock that runs out unreleased while W1 stands in its line (W1's timer still far off: a
/// claim lease of 1 s, eight of them): a newcomer N's first try finds R free and takes it at
/// once, as a try takes any free resource (docs: "a holder's lock runs out unreleased"), and
/// W1 keeps its place: N's release rings it, long before its timer. Both clients. (With
/// session 21's enter that joined the line instead, the order was W1 then N; taken back for
/// `a_free_resource_behind_live_stale_places_is_taken_within_about_a_lease`.)
fn a_lapsed_lock_goes_to_a_newcomer_and_the_head_next(asy: bool) {
    let c = cluster(3);
    let direct = c.addrs();
    let lease = Duration::from_secs(1);
    let r = resource("s21-lapsed");
    let h = client(&direct, false, "", lease);
    let held = h.lock(&r, TTL).expect("H takes R");
    let w1 = Arc::new(testkit::review::either_client(
        options(&direct, true, "s21w1", lease, 10_000),
        asy,
    ));
    let nn = Arc::new(testkit::review::either_client(
        options(&direct, true, "s21nn", lease, 10_000),
        asy,
    ));
    let order = Arc::new(Mutex::new(Vec::<(&'static str, Instant, Instant)>::new()));
    let hold = Duration::from_millis(300);
    let waiter = |who: &'static str, c: Arc<Box<dyn LockClient + Send + Sync>>| {
        let (r, order) = (r.clone(), order.clone());
        std::thread::spawn(move || {
            let l = c
                .lock_within(&r, TTL, Duration::from_secs(20))
                .expect("served");
            let got = Instant::now();
            std::thread::sleep(hold);
            let out = Instant::now();
            c.unlock(&l).expect("releases");
            order.lock().unwrap().push((who, got, out));
        })
    };
    let tw1 = waiter("W1", w1.clone());
    wait_until(Duration::from_secs(10), "W1 in every line", || {
        in_line(&direct, &r, "s21w1") == 3
    });
    std::thread::sleep(Duration::from_millis(50));
    // H's lock runs out (no release, no ring).
    for a in &direct {
        redis(a, &["PEXPIRE", &r, "1"]);
    }
    wait_until(Duration::from_secs(5), "R gone", || {
        direct
            .iter()
            .all(|a| matches!(redis(a, &["EXISTS", &r]), Frame::Integer(0)))
    });
    let arrived = Instant::now();
    let tn = waiter("N", nn.clone());
    tw1.join().unwrap();
    tn.join().unwrap();
    let _ = h.unlock(&held);
    let order = order.lock().unwrap().clone();
    eprintln!(
        "{:?}",
        order
            .iter()
            .map(|(w, g, o)| (
                *w,
                g.saturating_duration_since(arrived),
                o.saturating_duration_since(arrived)
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        order.iter().map(|o| o.0).collect::<Vec<_>>(),
        ["N", "W1"],
        "the newcomer takes the free resource, the head is served next"
    );
    let (n_got, n_out) = (order[0].1, order[0].2);
    let w1_got = order[1].1;
    assert!(
        n_got.saturating_duration_since(arrived) < lease,
        "N at once: {:?}",
        n_got.saturating_duration_since(arrived)
    );
    assert!(w1_got >= n_out, "W1 granted while N held R");
    assert!(
        w1_got.saturating_duration_since(n_out) < lease * 2,
        "W1 rung by N's release, not at its timer (8 leases): {:?}",
        w1_got.saturating_duration_since(n_out)
    );
    assert!(line_on(&direct[0], &r).is_empty());
}

#[test]
fn a_lapsed_lock_goes_to_a_newcomer_and_the_head_next_blocking() {
    a_lapsed_lock_goes_to_a_newcomer_and_the_head_next(false);
}

#[test]
fn a_lapsed_lock_goes_to_a_newcomer_and_the_head_next_async() {
    a_lapsed_lock_goes_to_a_newcomer_and_the_head_next(true);
}

/// After a burst of contention (three async tasks of A, two threads of B, on one resource)
/// every line is empty again, and a lock nobody else wants takes one try and no claim: the
/// enter's `SET NX` is not held back by a line left over.
#[test]
fn after_contention_an_uncontended_lock_is_one_try() {
    let c = cluster(3);
    let direct = c.addrs();
    let lease = Duration::from_millis(300);
    let r = resource("s21-after");
    let (rt, a) = async_client(options(&direct, true, "s21aa", lease, 10_000));
    let b = Arc::new(client(&direct, true, "s21bb", lease));
    let count = Arc::new(Mutex::new(0u32));
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let (a, r, count) = (a.clone(), r.clone(), count.clone());
            rt.spawn(async move {
                for _ in 0..5 {
                    let l = a
                        .lock_within(&r, TTL, Duration::from_secs(20))
                        .await
                        .expect("A served");
                    *count.lock().unwrap() += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    a.unlock(&l).await.expect("A releases");
                }
            })
        })
        .collect();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (b, r, count) = (b.clone(), r.clone(), count.clone());
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let l = b
                        .lock_within(&r, TTL, Duration::from_secs(20))
                        .expect("B served");
                    *count.lock().unwrap() += 1;
                    std::thread::sleep(Duration::from_millis(2));
                    b.unlock(&l).expect("B releases");
                }
            })
        })
        .collect();
    for t in tasks {
        rt.block_on(t).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*count.lock().unwrap(), 25);
    for addr in &direct {
        assert!(line_on(addr, &r).is_empty(), "a line left on {addr}");
    }
    // A alone: one try (the enter's `SET NX`), no claim.
    let s0 = rt.block_on(a.stats()).unwrap();
    let l = rt.block_on(a.lock(&r, TTL)).expect("A alone");
    let s1 = rt.block_on(a.stats()).unwrap();
    rt.block_on(a.unlock(&l)).unwrap();
    assert_eq!((s1.tries - s0.tries, s1.claims - s0.claims), (1, 0), "A");
    // B alone, likewise.
    let s0 = b.stats();
    let l = b.lock(&r, TTL).expect("B alone");
    let s1 = b.stats();
    b.unlock(&l).unwrap();
    assert_eq!((s1.tries - s0.tries, s1.claims - s0.claims), (1, 0), "B");
}

// ---------------------------------------------------------------------------------------------
// Change 2 (the gate): several waiters of one client, FIFO across clients.
// ---------------------------------------------------------------------------------------------

/// H holds R. A's waiters A1 (first), then B's waiter, then A2 and A3 join R's line (three
/// async tasks of one client, or three threads). H releases; each holder keeps R 100 ms. A's
/// place is served once: B is served second, before A's other waiters, and every waiter is
/// served within its bound (no wait parked for good behind a sibling's claim).
fn one_turn_per_trip_with_siblings(asy: bool) -> Vec<&'static str> {
    let c = cluster(3);
    let direct = c.addrs();
    let lease = Duration::from_millis(300);
    let r = resource("s21-fifo");
    let h = client(&direct, true, "s21fh", lease);
    let held = h.lock(&r, TTL).expect("H takes R");
    let a = Arc::new(testkit::review::either_client(
        options(&direct, true, "s21fa", lease, 10_000),
        asy,
    ));
    let b = Arc::new(testkit::review::either_client(
        options(&direct, true, "s21fb", lease, 10_000),
        asy,
    ));
    let order = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let waiter = |who: &'static str, c: Arc<Box<dyn LockClient + Send + Sync>>| {
        let (r, order) = (r.clone(), order.clone());
        std::thread::spawn(move || {
            let got = c.lock_within(&r, TTL, Duration::from_secs(20));
            let l: Lock = match got {
                Ok(l) => l,
                Err(e) => panic!("{who}: {e:?}"),
            };
            order.lock().unwrap().push(who);
            std::thread::sleep(Duration::from_millis(100));
            c.unlock(&l).expect("releases");
        })
    };
    let mut ts = vec![waiter("A", a.clone())];
    wait_until(Duration::from_secs(10), "A in line", || {
        in_line(&direct, &r, "s21fa") == 3
    });
    ts.push(waiter("B", b.clone()));
    wait_until(Duration::from_secs(10), "B in line", || {
        in_line(&direct, &r, "s21fb") == 3
    });
    ts.push(waiter("A", a.clone()));
    ts.push(waiter("A", a.clone()));
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    h.unlock(&held).expect("H releases");
    for t in ts {
        t.join().unwrap();
    }
    let took = start.elapsed();
    let order = order.lock().unwrap().clone();
    eprintln!("served {order:?} in {took:?}");
    order
}

#[test]
fn siblings_of_one_client_get_one_turn_per_trip_blocking() {
    let order = one_turn_per_trip_with_siblings(false);
    assert_eq!(order[..2], ["A", "B"], "{order:?}");
}

#[test]
fn siblings_of_one_client_get_one_turn_per_trip_async() {
    let order = one_turn_per_trip_with_siblings(true);
    assert_eq!(order[..2], ["A", "B"], "{order:?}");
}
