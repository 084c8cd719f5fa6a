//! A hostile review of f2bce3f against real masters: a fair acquisition registers its watch of
//! the line before its first try (the enter) goes out, and takes it back once the try wins.
//! From then on a release by another acquisition of the same client is the keeping hand-off
//! (`Engine::own_waiter`) and a leave of it is kept (`Engine::leave_kept`) while that
//! acquisition is merely starting. The attacks: a release while the other's enter is in
//! flight, with a waiter of another client first in line (is it served first?) and with
//! nobody else (is the reservation for the client used?); the starting acquisition then
//! dropped, or giving up, with the resource reserved for its client (is the reservation passed
//! on, or left to lapse at another client's cost?); and many threads and tasks of one client
//! on one resource with another client competing (no two holders, everyone served, nobody left
//! in a line, no reservation left to lapse, order across clients). Each test states the claim
//! it holds the code to.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::Options;
use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Redlock};
use testkit::proxy::{latency, set_all, Fault};
use testkit::review::{client, in_line, line, options, violations, Tenure};
use testkit::{cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(20);

/// The options of a fair client `id` on `nodes` whose replies proxies hold back for seconds:
/// a node timeout of 10 s, so that every round waits for them rather than count them as timed
/// out.
fn slow_options(nodes: &[String], id: &str, lease: Duration) -> Options {
    let mut o = options(nodes, true, id, lease, 10_000);
    o.node_timeout = Duration::from_secs(10);
    o
}

/// An async fair client `id` on `nodes` (see [`slow_options`]), its connections open and its
/// scripts loaded (a lock and unlock of a resource of its own).
async fn warm_async(nodes: &[String], id: &str, lease: Duration) -> AsyncRedlock {
    let cl = AsyncRedlock::with_config(slow_options(nodes, id, lease).validate().unwrap()).unwrap();
    let w = cl
        .lock(&resource("s15b-warm"), TTL)
        .await
        .expect("every master up");
    cl.unlock(&w).await.expect("every master up");
    cl
}

/// Whether no master of `addrs` has `key` or a line for it.
fn all_gone(addrs: &[String], key: &str) -> bool {
    let q = line(key);
    addrs.iter().all(|a| {
        redis(a, &["EXISTS", key]) == Frame::Integer(0)
            && redis(a, &["EXISTS", &q]) == Frame::Integer(0)
    })
}

/// Two tenures of unfenced locks that overlap (see [`violations`]; the fencing tokens are
/// not checked: each tenure is numbered in the order of grants).
fn overlapping(mut tenures: Vec<Tenure>) -> Vec<String> {
    tenures.sort_by_key(|t| t.from);
    for (i, t) in tenures.iter_mut().enumerate() {
        t.fence = i as u64 + 1;
    }
    violations(tenures)
}

/// A blocking fair client `id` on `nodes` with fencing tokens, its connections open and its
/// scripts loaded.
fn fenced_client(nodes: &[String], id: &str, lease: Duration) -> Redlock {
    let mut o = options(nodes, true, id, lease, 10_000);
    o.fencing = true;
    let cl = Redlock::with_config(o.validate().unwrap()).unwrap();
    let w = cl
        .lock(&resource("s15b-warm"), TTL)
        .expect("every master up");
    cl.unlock(&w).expect("every master up");
    cl
}

/// How many of `addrs` hold `key` reserved for client `id`.
fn reserved_for(addrs: &[String], key: &str, id: &str) -> usize {
    let mine = format!("redlock-mux:reserved:{id}");
    addrs
        .iter()
        .filter(
            |a| matches!(redis(a, &["GET", key]), Frame::Bulk(b) if b.as_ref() == mine.as_bytes()),
        )
        .count()
}

/// A multi-threaded runtime: the test's own thread polls the masters while the client's tasks
/// go on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Claim (docs "The line", "What leaves the line"): the keeping hand-off a release becomes
/// while another acquisition of the same client is starting keeps that client's place, never
/// a place it does not have: the line's head is rung, and a waiter of another client that was
/// first in line is served before the starting acquisition.
///
/// The sequence (async client C through proxies; D a blocking client on the masters
/// directly; three masters):
/// 1. T1 (C) holds R. D waits for R: first in every line.
/// 2. The proxies hold C's replies 2 s. T2 (C) locks R: its watch is registered, its enter
///    reaches every master and is refused (T1 holds): C stands behind D.
/// 3. T1 unlocks while T2's refusals are held back: T2's watch makes the release the keeping
///    hand-off, which rings the head, D.
/// 4. D is granted, holds R for 4 s and unlocks; T2 is granted after D.
///
/// Held to: D before T2, never two holders, T2 granted within three claim leases of D's unlock
/// (its place was kept: before f2bce3f T1's release took it out of every line, and T2 waited
/// for its timer, eight leases), and nobody left in a line.
#[test]
fn a_release_while_anothers_enter_is_in_flight_serves_the_earlier_client_first() {
    let c = cluster(3);
    let direct = c.addrs();
    let (proxies, nodes) = testkit::proxy::in_front(&c, 0..3);
    let lease = Duration::from_secs(1);
    let key = resource("s15b-first-in-line");
    let rt = runtime();
    let (tenures, d_unlocked, t2_at) = rt.block_on(async {
        let cl = warm_async(&nodes, "c", lease).await;
        let l1 = cl.lock(&key, TTL).await.expect("R is free");
        let t1 = Tenure::of("c/T1", &l1, Instant::now());
        let d = {
            let (direct, key) = (direct.clone(), key.clone());
            tokio::task::spawn_blocking(move || {
                let d = client(&direct, true, "d", lease);
                let l = d
                    .lock_within(&key, TTL, Duration::from_secs(60))
                    .expect("D has R after T1");
                let t = Tenure::of("d", &l, Instant::now());
                std::thread::sleep(Duration::from_secs(4));
                let unlocking = Instant::now();
                d.unlock(&l).expect("released");
                (t.end(unlocking, &l), unlocking)
            })
        };
        // Bounded by the test's own pace: D's enter is one round trip on idle masters.
        let started = Instant::now();
        while in_line(&direct, &key, "d") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "D never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        set_all(&proxies, latency(Duration::from_secs(2)));
        let t2 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move {
                let l = cl
                    .lock_within(&key, TTL, Duration::from_secs(60))
                    .await
                    .expect("T2 has R in the end");
                let t = Tenure::of("c/T2", &l, Instant::now());
                let unlocking = Instant::now();
                cl.unlock(&l).await.expect("released");
                t.end(unlocking, &l)
            })
        };
        // T2's enter has run on every master once C stands in every line (its replies are
        // held 2 s: it is still in flight).
        while in_line(&direct, &key, "c") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "T2 never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let t1 = t1.end(Instant::now(), &l1);
        let t1_done = {
            let cl = cl.clone();
            tokio::spawn(async move { cl.unlock(&l1).await })
        };
        // D's claim takes D out of the lines: then the proxies pass again (a chunk of
        // replies read before is still held its 2 s).
        while in_line(&direct, &key, "d") > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "D never rung after T1's release"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        set_all(&proxies, Fault::Pass);
        t1_done.await.unwrap().expect("T1 released");
        let (d, d_unlocked) = d.await.unwrap();
        let t2 = t2.await.unwrap();
        let t2_at = t2.from;
        (vec![t1, d, t2], d_unlocked, t2_at)
    });
    let d_from = tenures[1].from;
    eprintln!(
        "D granted {:?} before T2; T2 granted {:?} after D's unlock",
        t2_at.saturating_duration_since(d_from),
        t2_at.saturating_duration_since(d_unlocked)
    );
    let v = overlapping(tenures);
    assert!(v.is_empty(), "{v:?}");
    assert!(
        d_from < t2_at,
        "T2, behind D in every line, was served first"
    );
    assert!(
        t2_at.saturating_duration_since(d_unlocked) < 3 * lease,
        "T2 was not rung at D's unlock: C's place was taken out"
    );
    wait_until(Duration::from_secs(10), "nothing of R left", || {
        all_gone(&direct, &key)
    });
}

/// Claim (docs "What leaves the line": a dropped future leaves the lines and passes on a
/// reservation it holds; "a waiter paused or cut off when it is rung delays the others by its
/// claim lease", never one that went away). Attack on the new window: T1's release, while T2's
/// enter is in flight, is the keeping hand-off, which reserves R for C (T2's enter put C at the
/// head) and wakes T2's watch at once. T2's future is then dropped before its enter's refusal
/// comes back. Its abandon command must take C out of the lines and hand the reservation to
/// the next waiter, D, rather than leave it for C, which no longer waits.
///
/// The sequence (async client C through proxies holding its replies 3 s; D a blocking client
/// on the masters directly; a claim lease of 6 s):
/// 1. T1 (C) holds R. T2 (C) locks R: its enter is refused everywhere, C heads every line.
/// 2. T1 unlocks: R is reserved for C on every master.
/// 3. D locks R: refused (reserved), behind C in every line.
/// 4. T2's task is aborted (its future dropped), its enter's replies still held.
///
/// Held to: D granted within half a claim lease of the drop; C in no line after; nothing of R
/// left once D unlocks.
#[test]
fn a_starting_acquisition_dropped_with_its_client_rung_passes_the_reservation_on() {
    let c = cluster(3);
    let direct = c.addrs();
    let (proxies, nodes) = testkit::proxy::in_front(&c, 0..3);
    let lease = Duration::from_secs(6);
    let key = resource("s15b-dropped");
    let rt = runtime();
    let waited = rt.block_on(async {
        let cl = warm_async(&nodes, "c", lease).await;
        let l1 = cl.lock(&key, TTL).await.expect("R is free");
        set_all(&proxies, latency(Duration::from_secs(3)));
        let t2 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move { cl.lock_within(&key, TTL, Duration::from_secs(60)).await })
        };
        let started = Instant::now();
        while in_line(&direct, &key, "c") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "T2 never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let t1_done = {
            let cl = cl.clone();
            tokio::spawn(async move { cl.unlock(&l1).await })
        };
        while reserved_for(&direct, &key, "c") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "T1's release did not reserve R for C"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let d = {
            let (direct, key) = (direct.clone(), key.clone());
            tokio::task::spawn_blocking(move || {
                let d = client(&direct, true, "d", lease);
                let l = d
                    .lock_within(&key, TTL, Duration::from_secs(60))
                    .expect("D has R");
                let at = Instant::now();
                d.unlock(&l).expect("released");
                at
            })
        };
        while in_line(&direct, &key, "d") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "D never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // T2's enter was sent about the start; its replies come 3 s after: still held.
        assert!(!t2.is_finished(), "T2's enter still in flight");
        let dropped = Instant::now();
        t2.abort();
        assert!(t2.await.unwrap_err().is_cancelled());
        let d_at = d.await.unwrap();
        set_all(&proxies, Fault::Pass);
        t1_done.await.unwrap().expect("T1 released");
        d_at.saturating_duration_since(dropped)
    });
    eprintln!("D granted {waited:?} after T2 was dropped");
    assert!(
        waited < lease / 2,
        "the reservation for C was left to lapse ({waited:?})"
    );
    wait_until(
        Duration::from_secs(10),
        "C in no line, nothing of R left",
        || in_line(&direct, &key, "c") == 0 && all_gone(&direct, &key),
    );
}

/// Claim (docs "What leaves the line": a waiter that gives up runs the leave script before its
/// error is returned, which passes on a reservation it holds). The same window as above, the
/// starting acquisition giving up instead: T2's deadline passes while its enter's refusals are
/// held back, and R was reserved for C by T1's keeping hand-off meanwhile. T2's leave (after
/// it takes its early watch back, `State::TakingBack`) must not be kept (no other waiter of C)
/// and must hand R to D.
///
/// The sequence as in the test above, but T2 is `lock_within` with a 1 s deadline and is not
/// dropped: its refusals come after 3 s and it gives up.
///
/// Held to: T2 fails; D waits less than half a claim lease (20 s: T2's leave lands about 3 s
/// after D starts to wait, behind T2's enter); C in no line.
#[test]
fn a_starting_acquisition_giving_up_with_its_client_rung_passes_the_reservation_on() {
    let c = cluster(3);
    let direct = c.addrs();
    let (proxies, nodes) = testkit::proxy::in_front(&c, 0..3);
    // Long: T2's leave lands about 3 s in (its refusals held that long), a lapse would be 20 s.
    let lease = Duration::from_secs(20);
    let key = resource("s15b-give-up");
    let rt = runtime();
    let waited = rt.block_on(async {
        let cl = warm_async(&nodes, "c", lease).await;
        let l1 = cl.lock(&key, TTL).await.expect("R is free");
        set_all(&proxies, latency(Duration::from_secs(3)));
        let t2 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move {
                let r = cl.lock_within(&key, TTL, Duration::from_secs(1)).await;
                (r, Instant::now())
            })
        };
        let started = Instant::now();
        while in_line(&direct, &key, "c") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "T2 never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let t1_done = {
            let cl = cl.clone();
            tokio::spawn(async move { cl.unlock(&l1).await })
        };
        while reserved_for(&direct, &key, "c") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "T1's release did not reserve R for C"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let d_asked = Instant::now();
        let d = {
            let (direct, key) = (direct.clone(), key.clone());
            tokio::task::spawn_blocking(move || {
                let d = client(&direct, true, "d", lease);
                let l = d
                    .lock_within(&key, TTL, Duration::from_secs(60))
                    .expect("D has R");
                let at = Instant::now();
                d.unlock(&l).expect("released");
                at
            })
        };
        while in_line(&direct, &key, "d") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "D never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (r, _) = t2.await.unwrap();
        let d_at = d.await.unwrap();
        set_all(&proxies, Fault::Pass);
        t1_done.await.unwrap().expect("T1 released");
        eprintln!("T2: {r:?}");
        match r {
            // A claim woken by T1's keeping hand-off may have won before the deadline was
            // judged: then T2 held R, and D came after it.
            Ok(l) => {
                cl.unlock(&l).await.expect("released");
                None
            }
            Err(_) => Some(d_at.saturating_duration_since(d_asked)),
        }
    });
    let waited = waited.expect("T2 gives up: its refusals come after its deadline");
    eprintln!("D waited {waited:?}");
    assert!(
        waited < lease / 2,
        "the reservation for C was left to lapse ({waited:?})"
    );
    wait_until(
        Duration::from_secs(10),
        "C in no line, nothing of R left",
        || in_line(&direct, &key, "c") == 0 && all_gone(&direct, &key),
    );
}

/// One acquisition's record: its client, when it asked, when it was granted.
#[derive(Debug, Clone)]
struct Served {
    who: &'static str,
    asked: Instant,
    granted: Instant,
}

/// Pairs served out of the order they asked across clients: a waiter of one client that asked
/// after a waiter of another (by more than `margin`) and was granted first. `unexplained`
/// counts those where the later waiter's client had no other waiter that asked before the
/// earlier one and was still waiting when it asked (the shared place that lets a client's
/// later waiter go first).
fn overtakes(served: &[Served], margin: Duration) -> (usize, usize) {
    let (mut all, mut unexplained) = (0, 0);
    for x in served {
        for y in served {
            if x.who == y.who || y.asked <= x.asked + margin || y.granted >= x.granted {
                continue;
            }
            all += 1;
            let place = served
                .iter()
                .any(|z| z.who == y.who && z.asked <= x.asked && z.granted > x.asked);
            if !place {
                unexplained += 1;
            }
        }
    }
    (all, unexplained)
}

/// Claims (docs "The line", "Safety does not change", "What leaves the line"): many waiters of
/// one client on one resource at once, each registering its watch before its enter, so that
/// every release among them is the keeping hand-off and every leave is kept while another is
/// starting: never two holders within validity; every acquisition served, none waiting as long
/// as a claim lease (a reservation left for a client with nobody of it waiting, or a place
/// taken out of the lines, costs a waiter a lease or its timer); once all have unlocked, no
/// client in any line and nothing of the resource left on any master (no reservation left to
/// lapse).
///
/// Blocking client C with four threads, async client A with four tasks, blocking client D with
/// two threads, all fenced (the fence round runs with the early watch still registered), for
/// 4 s; fencing tokens increase with the grants; each acquisition holds R a few milliseconds. The order across clients
/// is measured (a later waiter of one client granted before an earlier waiter of another) and
/// printed, with the overtakes the shared place does not explain.
#[test]
fn many_waiters_of_one_client_and_another_client_on_one_resource() {
    let c = cluster(3);
    let direct = c.addrs();
    let lease = Duration::from_secs(5);
    let key = resource("s15b-many");
    let run = Duration::from_secs(4);
    let records: Arc<Mutex<Vec<(Served, Tenure)>>> = Arc::default();
    let cl_c = fenced_client(&direct, "c", lease);
    let cl_d = fenced_client(&direct, "d", lease);
    let rt = runtime();
    let cl_a = rt.block_on(async {
        let mut o = options(&direct, true, "a", lease, 10_000);
        o.fencing = true;
        let cl = AsyncRedlock::with_config(o.validate().unwrap()).unwrap();
        let w = cl.lock(&resource("s15b-warm"), TTL).await.expect("all up");
        cl.unlock(&w).await.expect("all up");
        cl
    });
    let start = Instant::now();
    // Each waiter's deadline: far above any wait this run should see.
    let within = Duration::from_secs(30);
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (who, cl, n) in [("c", &cl_c, 4usize), ("d", &cl_d, 2)] {
            for i in 0..n {
                let (key, records) = (&key, &records);
                handles.push(s.spawn(move || {
                    let mut turn = 0u64;
                    while start.elapsed() < run {
                        let asked = Instant::now();
                        let l = cl.lock_within(key, TTL, within).expect("served");
                        let granted = Instant::now();
                        let t = Tenure::of(who, &l, granted);
                        std::thread::sleep(Duration::from_millis(1 + (turn + i as u64) % 4));
                        let unlocking = Instant::now();
                        cl.unlock(&l).expect("released");
                        let rec = Served {
                            who,
                            asked,
                            granted,
                        };
                        records.lock().unwrap().push((rec, t.end(unlocking, &l)));
                        turn += 1;
                    }
                }));
            }
        }
        let tasks: Vec<_> = (0..4u64)
            .map(|i| {
                let (cl, key, records) = (cl_a.clone(), key.clone(), records.clone());
                rt.spawn(async move {
                    let mut turn = 0u64;
                    while start.elapsed() < run {
                        let asked = Instant::now();
                        let l = cl.lock_within(&key, TTL, within).await.expect("served");
                        let granted = Instant::now();
                        let t = Tenure::of("a", &l, granted);
                        tokio::time::sleep(Duration::from_millis(1 + (turn + i) % 4)).await;
                        let unlocking = Instant::now();
                        cl.unlock(&l).await.expect("released");
                        let rec = Served {
                            who: "a",
                            asked,
                            granted,
                        };
                        records.lock().unwrap().push((rec, t.end(unlocking, &l)));
                        turn += 1;
                    }
                })
            })
            .collect();
        for t in tasks {
            rt.block_on(t).unwrap();
        }
        for h in handles {
            h.join().unwrap();
        }
    });
    let records = std::mem::take(&mut *records.lock().unwrap());
    let served: Vec<Served> = records.iter().map(|(s, _)| s.clone()).collect();
    let count = |who: &str| served.iter().filter(|s| s.who == who).count();
    let longest = served
        .iter()
        .map(|s| s.granted.saturating_duration_since(s.asked))
        .max()
        .unwrap_or_default();
    let (all, unexplained) = overtakes(&served, Duration::from_millis(5));
    eprintln!(
        "served: c {}, a {}, d {}; longest wait {longest:?}; across clients, later waiters \
         granted first: {all} pairs, {unexplained} not explained by a shared place",
        count("c"),
        count("a"),
        count("d"),
    );
    let v = violations(records.into_iter().map(|(_, t)| t).collect());
    assert!(v.is_empty(), "{v:?}");
    assert!(
        ["c", "a", "d"].iter().all(|w| count(w) > 0),
        "a client never served"
    );
    assert!(
        longest < lease,
        "a waiter waited {longest:?}: a lapse or a lost place"
    );
    // Every unlock has returned: a release's last master is a round trip behind at most, and a
    // reservation left for nobody would stand for the lease (5 s).
    wait_until(lease / 2, "nobody in a line, nothing of R left", || {
        ["c", "a", "d"]
            .iter()
            .all(|id| in_line(&direct, &key, id) == 0)
            && all_gone(&direct, &key)
    });
}

/// Claim (docs "The line": a client's waiters share one place, and a client given different
/// tickets moves its place to the largest; "What leaves the line": the leave of a won split
/// enter is kept while another waiter of the client waits). Attack: the kept leave leaves the
/// client where the winner's enter put it on the refusing master, ahead of a waiter of another
/// client that arrived before the second acquisition started. The second acquisition must not
/// use that earlier place to pass the other client.
///
/// The sequence (async client C, masters 0 and 2 behind proxies; master 1 holds R under
/// another value; D a blocking client on the masters directly; a claim lease of 1 s):
/// 1. The proxies hold C's replies 2 s. T1 (C) locks R: masters 0 and 2 take its enter (their
///    yes held back), master 1 refuses it and puts C in its line.
/// 2. D locks R: refused everywhere, first in 0 and 2's lines, behind C in master 1's.
/// 3. T2 (C) locks R: refused everywhere, behind D in 0 and 2's lines.
/// 4. T1's yes come: T1 holds R on 0 and 2; its leave of master 1's line is kept (T2 waits).
///    T1 unlocks.
///
/// Held to: D granted before T2; never two holders; T2 granted within three claim leases of
/// D's unlock; once all have unlocked and master 1's value is gone, nothing of R left.
#[test]
fn a_kept_leave_of_a_split_enter_does_not_let_the_next_waiter_pass_another_client() {
    let c = cluster(3);
    let direct = c.addrs();
    let p0 = testkit::proxy::Proxy::start(c.servers()[0].addr());
    let p2 = testkit::proxy::Proxy::start(c.servers()[2].addr());
    let mut nodes = direct.clone();
    nodes[0] = p0.addr();
    nodes[2] = p2.addr();
    let lease = Duration::from_secs(1);
    let key = resource("s15b-kept-split");
    redis(&direct[1], &["SET", &key, "x", "PX", "60000"]);
    let rt = runtime();
    let (tenures, d_unlocked, kept) = rt.block_on(async {
        let cl = warm_async(&nodes, "c", lease).await;
        p0.set(latency(Duration::from_secs(2)));
        p2.set(latency(Duration::from_secs(2)));
        let t1 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move {
                let l = cl.lock(&key, TTL).await.expect("masters 0 and 2 grant T1");
                (Tenure::of("c/T1", &l, Instant::now()), l)
            })
        };
        let started = Instant::now();
        while in_line(&direct[1..2], &key, "c") < 1 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "T1 never refused"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let d = {
            let (direct, key) = (direct.clone(), key.clone());
            tokio::task::spawn_blocking(move || {
                let d = client(&direct, true, "d", lease);
                let l = d
                    .lock_within(&key, TTL, Duration::from_secs(60))
                    .expect("D has R after T1");
                let t = Tenure::of("d", &l, Instant::now());
                std::thread::sleep(Duration::from_secs(1));
                let unlocking = Instant::now();
                d.unlock(&l).expect("released");
                (t.end(unlocking, &l), unlocking)
            })
        };
        while in_line(&direct, &key, "d") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "D never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let t2 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move {
                let l = cl
                    .lock_within(&key, TTL, Duration::from_secs(60))
                    .await
                    .expect("T2 has R in the end");
                let t = Tenure::of("c/T2", &l, Instant::now());
                let unlocking = Instant::now();
                cl.unlock(&l).await.expect("released");
                t.end(unlocking, &l)
            })
        };
        while in_line(&direct, &key, "c") < 3 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "T2 never in line"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (t1, l1) = t1.await.unwrap();
        p0.set(Fault::Pass);
        p2.set(Fault::Pass);
        // The leave is not waited for: a leave sent would have reached master 1 (direct) by
        // the time T1's unlock round returns.
        let t1 = t1.end(Instant::now(), &l1);
        cl.unlock(&l1).await.expect("T1 released");
        let kept = in_line(&direct[1..2], &key, "c");
        let (d, d_unlocked) = d.await.unwrap();
        let t2 = t2.await.unwrap();
        (vec![t1, d, t2], d_unlocked, kept)
    });
    let (d_from, t2_from) = (tenures[1].from, tenures[2].from);
    eprintln!(
        "C in master 1's line after T1's unlock: {kept}; D granted {:?} before T2; T2 {:?} \
         after D's unlock",
        t2_from.saturating_duration_since(d_from),
        t2_from.saturating_duration_since(d_unlocked)
    );
    let v = overlapping(tenures);
    assert!(v.is_empty(), "{v:?}");
    assert!(d_from < t2_from, "T2 passed D on the place T1's enter took");
    assert!(
        t2_from.saturating_duration_since(d_unlocked) < 3 * lease,
        "T2 was not rung at D's unlock"
    );
    redis(&direct[1], &["DEL", &key]);
    wait_until(Duration::from_secs(10), "nothing of R left", || {
        all_gone(&direct, &key)
    });
}

/// Claims (docs "What leaves the line": a dropped future leaves the lines, and passes on a
/// reservation it holds, unless another waiter of the client waits; "Safety does not
/// change"). Async waiters of one client dropped at random moments (a `tokio::time::timeout`
/// of 0 to 20 ms around `lock_within`: before the watch, between it and the enter's answer,
/// while waiting, while claiming), with a blocking client competing: never two holders within
/// validity (fencing tokens increasing); the competing client's every acquisition served in
/// less than a claim lease (a reservation left for a client that no longer waits costs a
/// lease); once all have stopped, no client in any line and nothing of the resource left.
///
/// Found by this test (1 run in 8 at f2bce3f^, 3 in 30 at 7cd1f80, then ignored): now and
/// then both of D's threads waited while R was reserved for D on every master, and neither
/// claimed, until the reservation lapsed (D waited 3.05 s, a lease of 3 s) or, with no arrival
/// left to ring anyone after the lapse, its whole timer (23 s). A's dropped waiters leave the
/// line, and a leave that finds R reserved for A passes it on to D; its bell is tagged with
/// A's id, not with the hand-off. Two such leaves within a claim lease, with no other
/// hand-off waking D between them, rang D under the same tag, and D's engine spent the second's bells as late
/// bells of the first (`Engine::rung`). Fixed in the engine: a bell is spent only from a
/// master that has not rung that hand-off yet; focused tests in `core/src/engine/fair_tests.rs`
/// and `tests/fair_bells.rs`. 0 runs in 30 fail since.
#[test]
fn async_waiters_dropped_at_random_moments_leave_nothing_behind() {
    let c = cluster(3);
    let direct = c.addrs();
    let lease = Duration::from_secs(3);
    let key = resource("s15b-dropped-many");
    let run = Duration::from_secs(4);
    let records: Arc<Mutex<Vec<Tenure>>> = Arc::default();
    let cl_d = fenced_client(&direct, "d", lease);
    let rt = runtime();
    let cl_a = rt.block_on(async {
        let mut o = options(&direct, true, "a", lease, 10_000);
        o.fencing = true;
        let cl = AsyncRedlock::with_config(o.validate().unwrap()).unwrap();
        let w = cl.lock(&resource("s15b-warm"), TTL).await.expect("all up");
        cl.unlock(&w).await.expect("all up");
        cl
    });
    let start = Instant::now();
    let within = Duration::from_secs(30);
    let (dropped, longest_d) = std::thread::scope(|s| {
        let d_threads: Vec<_> = (0..2)
            .map(|_| {
                let (cl, key, records) = (&cl_d, &key, &records);
                s.spawn(move || {
                    let mut longest = Duration::ZERO;
                    while start.elapsed() < run {
                        let asked = Instant::now();
                        let l = cl.lock_within(key, TTL, within).expect("served");
                        let granted = Instant::now();
                        longest = longest.max(granted - asked);
                        let t = Tenure::of("d", &l, granted);
                        std::thread::sleep(Duration::from_millis(2));
                        let unlocking = Instant::now();
                        cl.unlock(&l).expect("released");
                        records.lock().unwrap().push(t.end(unlocking, &l));
                    }
                    longest
                })
            })
            .collect();
        let tasks: Vec<_> = (0..6u64)
            .map(|i| {
                let (cl, key, records) = (cl_a.clone(), key.clone(), records.clone());
                rt.spawn(async move {
                    let mut dropped = 0u32;
                    let mut turn = 0u64;
                    while start.elapsed() < run {
                        // Spread over the first round trips: 0 to 20 ms.
                        let budget = Duration::from_micros((turn * 7919 + i * 104_729) % 20_000);
                        turn += 1;
                        let asked = tokio::time::timeout(budget, cl.lock_within(&key, TTL, within));
                        let Ok(l) = asked.await else {
                            dropped += 1;
                            continue;
                        };
                        let l = l.expect("served");
                        let t = Tenure::of("a", &l, Instant::now());
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let unlocking = Instant::now();
                        cl.unlock(&l).await.expect("released");
                        records.lock().unwrap().push(t.end(unlocking, &l));
                    }
                    dropped
                })
            })
            .collect();
        let dropped: u32 = tasks.into_iter().map(|t| rt.block_on(t).unwrap()).sum();
        let longest = d_threads
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap_or_default();
        (dropped, longest)
    });
    let tenures = std::mem::take(&mut *records.lock().unwrap());
    let count = |who: &str| tenures.iter().filter(|t| t.who == who).count();
    eprintln!(
        "granted: a {}, d {}; a's futures dropped: {dropped}; D's longest wait {longest_d:?}",
        count("a"),
        count("d")
    );
    let v = violations(tenures);
    assert!(v.is_empty(), "{v:?}");
    assert!(dropped > 0, "no future was dropped");
    assert!(
        longest_d < lease,
        "D waited {longest_d:?}: a reservation left to lapse"
    );
    // The dropped futures' releases and leaves are fired, not waited for: a round trip.
    wait_until(lease / 2, "nobody in a line, nothing of R left", || {
        in_line(&direct, &key, "a") == 0
            && in_line(&direct, &key, "d") == 0
            && all_gone(&direct, &key)
    });
}
