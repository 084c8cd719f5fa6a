//! A hostile review of sessions 14 and 15's changes to fair mode, against real masters: the
//! ring's `redis.pcall` publish (a refused bell reaches nobody), the watch of a waiter in line
//! under the line's key (`Engine::in_line`, which decides the kept leave and release), fair mode
//! through the function library, and the leave after a won enter round that not every master
//! answered with a yes, sent to the others and not waited for (`Until::Sent`). Each test states
//! the claim it holds the code to.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::{Options, Scripts};
use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Redlock};
use testkit::proxy::{latency, Fault, Proxy};
use testkit::review::{client, holding, in_line, line, options, violations, Tenure};
use testkit::{cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(20);

/// Whether no master of `addrs` has `key` or a line for it.
fn all_gone(addrs: &[String], key: &str) -> bool {
    let q = line(key);
    addrs.iter().all(|a| {
        redis(a, &["EXISTS", key]) == Frame::Integer(0)
            && redis(a, &["EXISTS", &q]) == Frame::Integer(0)
    })
}

/// Every connection of `cl` open and its scripts (or library) loaded: a lock and unlock of a
/// resource of its own.
fn warm(cl: &Redlock) {
    let l = cl
        .lock(&resource("s15-warm"), TTL)
        .expect("every master up");
    cl.unlock(&l).expect("every master up");
}

/// The options of a fair client `id` on `nodes` whose replies proxies hold back for seconds:
/// a node timeout of 10 s, so that every round waits for them rather than count them as
/// timed out.
fn slow_options(nodes: &[String], id: &str, lease: Duration) -> Options {
    let mut o = options(nodes, true, id, lease, 10_000);
    o.node_timeout = Duration::from_secs(10);
    o
}

/// Claim (docs "The line": a client's waiters share one place; "What leaves the line": a
/// leave while another waiter of the client waits for the resource is kept, as the place is
/// that waiter's too). Attack on the leave after a won enter (f37e996): whether it is kept is
/// decided when it is submitted, by the watches registered then (`Engine::leave_kept`), but a
/// second waiter of the same client whose first try is still in flight has no watch yet, and
/// its enter, queued before the leave on every connection, has already counted on the shared
/// place.
///
/// The sequence (async client, whose rounds run side by side; three masters; the replies of
/// masters 0 and 2 held back 2 s by proxies; master 1 holds R under another value):
/// 1. T1 (client C) locks R: its enter is taken by masters 0 and 2 and refused by master 1,
///    which puts C in its line; the round waits for 0 and 2's replies.
/// 2. T2 (client C) locks R a second later: its enter reaches every master behind T1's and is
///    refused everywhere (it keeps C's place in master 1's line, and joins 0 and 2's).
/// 3. 0 and 2's yes to T1 come: T1 has the lock; its leave goes to master 1, behind T2's
///    enter there, and takes C out of master 1's line.
/// 4. T2's refusals come: it waits, in the lines of masters 0 and 2 only, until its timer
///    (eight claim leases) runs the wait script, which puts C back at the end of master 1's
///    line. A waiter of another client arriving meanwhile is ahead of C there.
///
/// Held to: while T2 waits, C stands in every master's line. (The blocking client runs the
/// two rounds one after the other, and shows the same only when T1's leave goes out before
/// T2's watch is registered: a race it lost in a first run of this review.)
#[test]
fn a_second_waiter_keeps_its_place_when_the_first_wins_a_split_enter() {
    let c = cluster(3);
    let direct = c.addrs();
    let p0 = Proxy::start(c.servers()[0].addr());
    let p2 = Proxy::start(c.servers()[2].addr());
    let mut nodes = direct.clone();
    nodes[0] = p0.addr();
    nodes[2] = p2.addr();
    // A lease long enough that T2's timer (eight leases, 16 s) does not run its wait script
    // while this test reads the lines.
    let lease = Duration::from_secs(2);
    let key = resource("s15-two-waiters");
    redis(&direct[1], &["SET", &key, "x", "PX", "60000"]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cl = AsyncRedlock::with_config(slow_options(&nodes, "c", lease).validate().unwrap())
            .unwrap();
        let w = cl.lock(&resource("s15-warm-async"), TTL).await.unwrap();
        cl.unlock(&w).await.unwrap();
        p0.set(latency(Duration::from_secs(2)));
        p2.set(latency(Duration::from_secs(2)));
        let t1 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move { cl.lock(&key, TTL).await })
        };
        // T1's enter is out; its round waits for masters 0 and 2 (two seconds at least).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t2 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move { cl.lock_within(&key, TTL, Duration::from_secs(30)).await })
        };
        let l1 = t1.await.unwrap().expect("masters 0 and 2 grant T1");
        assert_eq!(holding(&direct, &key, l1.token().as_bytes()), 2);
        // T2's refusals from 0 and 2 come about two seconds after T1's yes (the proxies hold
        // each chunk of replies two seconds); T2 then waits sixteen. Watched for 4 s.
        let watched = Instant::now();
        let mut least = 3;
        while watched.elapsed() < Duration::from_secs(4) {
            least = least.min(in_line(&direct, &key, "c"));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!t2.is_finished(), "T2 waits for T1");
        p0.set(Fault::Pass);
        p2.set(Fault::Pass);
        let released = Instant::now();
        cl.unlock(&l1).await.unwrap();
        let l2 = t2.await.unwrap().expect("T2 has R after T1's unlock");
        let waited = released.elapsed();
        cl.unlock(&l2).await.unwrap();
        eprintln!(
            "C in {least} lines at least while T2 waited; T2 granted {waited:?} after the unlock"
        );
        assert_eq!(
            least, 3,
            "T1's leave took C's shared place out of a line while T2 waited"
        );
        assert!(waited < 2 * lease, "T2 waited {waited:?} for a free lock");
    });
    redis(&direct[1], &["DEL", &key]);
    wait_until(Duration::from_secs(10), "nothing left", || {
        all_gone(&direct, &key)
    });
}

/// Claim (docs "What leaves the line": a waiter that gives up while another waiter of the
/// same client waits for the resource leaves nothing; `Engine::leave_kept`, whose watches
/// session 14 moved under the line's key). The same blind spot as the test above, older
/// (session 13's kept leave): a waiter of the client whose first try is in flight has no
/// watch, so a give-up then is sent, behind that try's enter, and takes the client's place out
/// of every line. The waiter still waiting stands in no line: no release rings it, and a
/// client that arrives after it is served first.
///
/// The sequence (async client C; three masters, each behind a proxy; H holds R):
/// 1. W1 (C) waits for R with a 3 s deadline: C is in every line.
/// 2. The proxies hold every reply 2 s. At 3 s W1's deadline sends its last try; at 3.5 s W2
///    (C) locks R: its enter reaches every master (refused, C's place kept) and its round waits
///    for the replies.
/// 3. At about 5 s W1's last try is refused and it gives up: its leave goes to every master
///    behind W2's enter, and takes C out of every line.
/// 4. W2's refusals come: it waits in no line. D (another client) arrives: first in line.
/// 5. H unlocks: the hand-off rings D, which has R; W2 has it only after D (woken by its timer,
///    eight claim leases after it started waiting, or D's release).
///
/// Held to: C is in every line while W2 waits, and W2 is granted R before D.
#[test]
fn a_give_up_keeps_the_place_of_a_waiter_whose_enter_is_in_flight() {
    let c = cluster(3);
    let direct = c.addrs();
    let (proxies, nodes) = testkit::proxy::in_front(&c, 0..3);
    let lease = Duration::from_secs(1);
    let h = client(&direct, true, "h", lease);
    let key = resource("s15-give-up");
    let held = h.lock(&key, TTL).unwrap();
    // Worker threads: W2's task goes on while this thread waits for D below.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (w2_at, dt, least) = rt.block_on(async {
        let cl = AsyncRedlock::with_config(
            slow_options(&nodes, "c", lease).validate().unwrap(),
        )
        .unwrap();
        let w = cl.lock(&resource("s15-warm-async"), TTL).await.unwrap();
        cl.unlock(&w).await.unwrap();
        let started = Instant::now();
        let w1 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move {
                cl.lock_within(&key, TTL, Duration::from_secs(3)).await
            })
        };
        while in_line(&direct, &key, "c") < 3 {
            assert!(started.elapsed() < Duration::from_secs(2), "W1 never in line");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        testkit::proxy::set_all(&proxies, latency(Duration::from_secs(2)));
        // W1's last try goes out at its deadline (3 s) and is answered at 5 s at the earliest;
        // W2's enter goes out between the two, behind that try.
        tokio::time::sleep_until((started + Duration::from_millis(3500)).into()).await;
        let w2 = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move {
                let l = cl.lock_within(&key, TTL, Duration::from_secs(60)).await;
                let at = Instant::now();
                cl.unlock(&l.expect("W2 has R in the end")).await.unwrap();
                at
            })
        };
        // W1's leave at about 5 s, W2's refusals at about 7 s (each chunk of replies held 2 s):
        // watched until 9 s (W2 then waits eight leases).
        let mut least = 3;
        while started.elapsed() < Duration::from_secs(9) {
            least = least.min(in_line(&direct, &key, "c"));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let w1 = w1.await.unwrap();
        assert!(w1.is_err(), "W1 gives up: {w1:?}");
        assert!(!w2.is_finished(), "W2 waits for H");
        testkit::proxy::set_all(&proxies, Fault::Pass);
        // D arrives (directly, not through the proxies) while W2 waits.
        let dt = {
            let (direct, key) = (direct.clone(), key.clone());
            tokio::task::spawn_blocking(move || {
                let d = client(&direct, true, "d", lease);
                let l = d.lock_within(&key, TTL, Duration::from_secs(60)).unwrap();
                let at = Instant::now();
                d.unlock(&l).unwrap();
                at
            })
        };
        while in_line(&direct, &key, "d") < 3 {
            assert!(started.elapsed() < Duration::from_secs(20), "D never in line");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A chunk of replies read before the switch is still held its 2 s (C's bells among
        // them would come after its claim lease).
        tokio::time::sleep(Duration::from_secs(3)).await;
        h.unlock(&held).unwrap();
        let (dt, w2_at) = (dt.await.unwrap(), w2.await.unwrap());
        eprintln!(
            "C in {least} lines at least while W2 waited; W2 granted {:?} after D ({:?} after the start)",
            w2_at.saturating_duration_since(dt),
            w2_at.saturating_duration_since(started),
        );
        (w2_at, dt, least)
    });
    assert_eq!(
        least, 3,
        "W1's give-up took C out of a line while W2 waited"
    );
    assert!(w2_at < dt, "W2, in line first, was passed over by D");
}

/// Claims (f37e996, docs "What leaves the line" and "Safety does not change"): the leave after
/// a won enter, not waited for, runs on each master after that enter and before the lock's
/// later commands, whatever follows at once. Three fair clients take turns on R for a few
/// seconds, each unlocking at once or after a short hold; master 1 holds R under another value
/// throughout, behind a proxy that holds its replies 300 ms, so that every grant is a split
/// enter (masters 0 and 2 say yes, master 1's refusal comes long after the decision) whose
/// leave, and often the release behind it, are still unanswered on master 1 when the lock
/// is released. Never two holders within validity, fencing tokens increasing; every client
/// served; once all have returned, no client in any line and nothing of R on masters 0 and 2.
#[test]
fn split_enters_released_at_once_leave_no_line_and_no_two_holders() {
    let c = cluster(3);
    let direct = c.addrs();
    let proxy = Proxy::start(c.servers()[1].addr());
    let mut nodes = direct.clone();
    nodes[1] = proxy.addr();
    let lease = Duration::from_millis(300);
    let key = resource("s15-split-churn");
    redis(&direct[1], &["SET", &key, "x", "PX", "120000"]);
    let ids = ["a", "b", "d"];
    let clients: Vec<Redlock> = ids
        .iter()
        .map(|id| {
            let mut o = options(&nodes, true, id, lease, 10_000);
            o.fencing = true;
            Redlock::with_config(o.validate().unwrap()).unwrap()
        })
        .collect();
    for cl in &clients {
        warm(cl);
    }
    proxy.set(latency(Duration::from_millis(300)));
    let run = Duration::from_secs(4);
    let tenures: Vec<Vec<Tenure>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .zip(ids)
            .enumerate()
            .map(|(n, (cl, id))| {
                let key = &key;
                s.spawn(move || {
                    let start = Instant::now();
                    let mut mine = Vec::new();
                    let mut turn = 0u32;
                    while start.elapsed() < run {
                        let asked = Instant::now();
                        let l = cl
                            .lock_within(key, TTL, Duration::from_secs(20))
                            .expect("R comes round");
                        let t = Tenure::of(id, &l, asked.max(Instant::now()));
                        // Every other turn released at once, the leave still on its way.
                        if (turn + n as u32) % 2 == 1 {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        let unlocking = Instant::now();
                        cl.unlock(&l).expect("released");
                        mine.push(t.end(unlocking, &l));
                        turn += 1;
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    proxy.set(Fault::Pass);
    let served: Vec<usize> = tenures.iter().map(Vec::len).collect();
    eprintln!("tenures per client: {served:?}");
    assert!(served.iter().all(|&n| n > 0), "a client never served");
    let v = violations(tenures.into_iter().flatten().collect());
    assert!(v.is_empty(), "{v:?}");
    wait_until(Duration::from_secs(10), "no client in any line", || {
        ids.iter().all(|id| in_line(&direct, &key, id) == 0)
    });
    let q = line(&key);
    for a in [&direct[0], &direct[2]] {
        assert_eq!(redis(a, &["EXISTS", &key]), Frame::Integer(0));
        assert_eq!(redis(a, &["EXISTS", &q]), Frame::Integer(0));
    }
}

/// An ACL user `user` on every master of `c` with `rules` (after `on >pw ~* +@all`), and the
/// masters' addresses as that user.
fn acl_nodes(c: &testkit::local::LocalCluster, user: &str, rules: &[&str]) -> Vec<String> {
    for a in c.addrs() {
        let mut args = vec!["ACL", "SETUSER", user, "on", ">pw", "~*", "+@all"];
        args.extend_from_slice(rules);
        assert_eq!(redis(&a, &args), Frame::Simple("OK".into()), "{args:?}");
    }
    c.servers()
        .iter()
        .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
        .collect()
}

/// Claims (f46458f and fc6da3e together, docs "The bell" and "Users without `EVAL`"): fair
/// mode through the function library works for a user without channel access, both under
/// `Scripts::Function` and for an `Auto` user denied `EVAL`/`EVALSHA` (whose connections
/// switch to the library at the first refused call): the refused `PUBLISH` inside the
/// library's ring is a bell that reached nobody, so a holder's `unlock` with a waiter in line
/// succeeds and deletes its key on every master, and the waiter (its `SUBSCRIBE` refused too)
/// has the lock on its timer, well within the holder's ttl. Once it unlocks nothing is left.
#[test]
fn a_channel_less_user_hands_off_through_the_function_library() {
    let c = cluster(3);
    let direct = c.addrs();
    let cases: [(&str, &[&str], Scripts); 2] = [
        ("fnonly", &["resetchannels"], Scripts::Function),
        (
            "noeval",
            &["resetchannels", "-eval", "-evalsha"],
            Scripts::Auto,
        ),
    ];
    let lease = Duration::from_millis(300);
    let h_ttl = Duration::from_secs(8);
    for (user, rules, scripts) in cases {
        let nodes = acl_nodes(&c, user, rules);
        let make = |id: &str| {
            let mut o = options(&nodes, true, id, lease, 10_000);
            o.scripts = scripts;
            Redlock::with_config(o.validate().unwrap()).unwrap()
        };
        let (h, w) = (make("h"), make("w"));
        let key = resource(&format!("s15-nochan-{user}"));
        let held = h.lock(&key, h_ttl).expect("H locks");
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let l = w.lock_within(&key, TTL, Duration::from_secs(30));
                (l, Instant::now())
            });
            wait_until(Duration::from_secs(10), "W in line everywhere", || {
                in_line(&direct, &key, "w") == 3
            });
            let released = Instant::now();
            let unlocked = h.unlock(&held);
            let still = holding(&direct, &key, held.token().as_bytes());
            let (l, at) = t.join().unwrap();
            let l = l.expect("W has the lock");
            let waited = at.saturating_duration_since(released);
            eprintln!("{user}: unlock {unlocked:?}, H's token on {still}; W after {waited:?}");
            assert!(unlocked.is_ok(), "{user}: unlock refused: {unlocked:?}");
            assert_eq!(still, 0, "{user}: H's token left by its unlock");
            assert!(waited < h_ttl / 2, "{user}: W waited {waited:?}");
            assert!(holding(&direct, &key, l.token().as_bytes()) >= 2);
            w.unlock(&l).unwrap();
        });
        wait_until(Duration::from_secs(10), "nothing left", || {
            all_gone(&direct, &key)
        });
    }
}

/// Claims (fc6da3e, docs "Users without `EVAL`"; f37e996): under `Scripts::Function`, a
/// `FUNCTION FLUSH` on every master mid-run costs nothing. (1) With a waiter in line, the
/// holder's `unlock` (its hand-off `FCALL` answered that the function is gone) loads the
/// library again and succeeds, and the waiter has the lock well within the holder's ttl. (2) A
/// split enter (master 1 refusing, its replies held back 1 s, so that its answer comes after
/// the decision) just after a flush: its leave to master 1, not waited for, still runs there,
/// and the client stands in no line.
#[test]
fn a_function_flush_mid_run_costs_nothing_in_fair_mode() {
    let c = cluster(3);
    let direct = c.addrs();
    let proxy = Proxy::start(c.servers()[1].addr());
    let mut nodes = direct.clone();
    nodes[1] = proxy.addr();
    let lease = Duration::from_millis(300);
    let make = |id: &str| {
        let mut o = options(&nodes, true, id, lease, 10_000);
        o.scripts = Scripts::Function;
        Redlock::with_config(o.validate().unwrap()).unwrap()
    };
    let (h, w) = (make("h"), make("w"));
    warm(&h);
    warm(&w);
    let flush = || {
        for a in &direct {
            assert_eq!(redis(a, &["FUNCTION", "FLUSH"]), Frame::Simple("OK".into()));
        }
    };
    let key = resource("s15-fflush");
    let h_ttl = Duration::from_secs(8);
    let held = h.lock(&key, h_ttl).unwrap();
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let l = w.lock_within(&key, TTL, Duration::from_secs(30));
            (l, Instant::now())
        });
        wait_until(Duration::from_secs(10), "W in line everywhere", || {
            in_line(&direct, &key, "w") == 3
        });
        flush();
        let released = Instant::now();
        h.unlock(&held).expect("the library is loaded again");
        // The unlock is decided by a quorum: a master whose refusal (the function gone) comes
        // after that has its release sent again once the client reads that refusal.
        wait_until(Duration::from_secs(10), "H's key gone everywhere", || {
            h.poll_idle(Duration::from_millis(100));
            holding(&direct, &key, held.token().as_bytes()) == 0
        });
        let (l, at) = t.join().unwrap();
        let l = l.expect("W has the lock");
        let waited = at.saturating_duration_since(released);
        eprintln!("W granted {waited:?} after the unlock");
        assert!(waited < h_ttl / 2, "W waited {waited:?}");
        w.unlock(&l).unwrap();
    });
    wait_until(Duration::from_secs(10), "nothing left", || {
        all_gone(&direct, &key)
    });
    // (2) The split enter after a flush.
    let split = resource("s15-fflush-split");
    redis(&direct[1], &["SET", &split, "x", "PX", "60000"]);
    flush();
    proxy.set(latency(Duration::from_secs(1)));
    let l = h.lock(&split, TTL).expect("masters 0 and 2 grant it");
    assert_eq!(holding(&direct, &split, l.token().as_bytes()), 2);
    proxy.set(Fault::Pass);
    // The leave is not waited for: read once master 1 has answered it and what came before.
    wait_until(Duration::from_secs(10), "H out of master 1's line", || {
        in_line(&direct, &split, "h") == 0 && h.poll_idle(Duration::from_millis(100))
    });
    h.unlock(&l).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(in_line(&direct, &split, "h"), 0, "H left in a line");
}

/// Claims (f37e996, against a master frozen with `SIGSTOP`): a split enter decided while one
/// master is paused (its enter, the leave behind it and the unlock behind that wait in the
/// kernel's buffers) is granted by the two others, released at once, and the resource goes to
/// the next client; when the master thaws it runs them in order (the enter joins the caller
/// to its line, the leave takes it out, the unlock finds the other value), so that no client
/// is left in its line. Never two holders. Master 1 holds R under another value, so that the
/// enter there is a refusal that joins the line.
#[test]
fn a_split_enter_on_a_paused_master_leaves_no_line_when_it_thaws() {
    let mut c = cluster(3);
    let direct = c.addrs();
    let lease = Duration::from_millis(300);
    let fenced = |id: &str| {
        let mut o = options(&direct, true, id, lease, 10_000);
        o.fencing = true;
        Redlock::with_config(o.validate().unwrap()).unwrap()
    };
    let (a, b) = (fenced("a"), fenced("b"));
    warm(&a);
    warm(&b);
    let key = resource("s15-paused");
    redis(&direct[1], &["SET", &key, "x", "PX", "60000"]);
    c.server(1).pause().unwrap();
    let mut tenures = Vec::new();
    for (id, cl) in [("a", &a), ("b", &b), ("a", &a)] {
        let asked = Instant::now();
        let l = cl.lock(&key, TTL).expect("masters 0 and 2 grant it");
        let t = Tenure::of(id, &l, asked.max(Instant::now()));
        let unlocking = Instant::now();
        cl.unlock(&l).expect("masters 0 and 2 release it");
        tenures.push(t.end(unlocking, &l));
    }
    // Paused a while longer (still short of the connections' stale limit, four node
    // timeouts): the commands wait in master 1's buffers.
    std::thread::sleep(Duration::from_secs(2));
    c.server(1).resume().unwrap();
    let v = violations(tenures);
    assert!(v.is_empty(), "{v:?}");
    wait_until(
        Duration::from_secs(10),
        "A and B out of master 1's line",
        || {
            a.poll_idle(Duration::from_millis(50));
            b.poll_idle(Duration::from_millis(50));
            in_line(&direct, &key, "a") == 0 && in_line(&direct, &key, "b") == 0
        },
    );
    assert_eq!(
        redis(&direct[1], &["GET", &key]),
        Frame::Bulk("x".into()),
        "master 1 still holds its own value"
    );
    for a in [&direct[0], &direct[2]] {
        assert_eq!(redis(a, &["EXISTS", &key]), Frame::Integer(0));
        assert_eq!(redis(a, &["EXISTS", &line(&key)]), Frame::Integer(0));
    }
}

/// A loopback proxy in front of one master that can hold back what one connection (by accept
/// order) sends, while later connections pass: what a path that drops one flow's packets does
/// to it (TCP delivers the held bytes, in order, once the path heals, even after the client
/// closed its end). The testkit proxy holds every connection at once.
struct FlowProxy {
    addr: String,
    held: Arc<Mutex<Option<usize>>>,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl FlowProxy {
    fn start(upstream: std::net::SocketAddr) -> FlowProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = Arc::new(Mutex::new(None));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, a, st) = (held.clone(), accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let n = a.fetch_add(1, Ordering::SeqCst);
                let poll = Some(Duration::from_millis(20));
                let _ = client.set_read_timeout(poll);
                let _ = server.set_read_timeout(poll);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (h, st2, st3) = (h.clone(), st.clone(), st.clone());
                std::thread::spawn(move || {
                    pump(client, server, st2, move || *h.lock().unwrap() == Some(n))
                });
                std::thread::spawn(move || pump(s2, c2, st3, || false));
            }
        });
        FlowProxy {
            addr,
            held,
            accepted,
            stop,
        }
    }
}

impl Drop for FlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
    }
}

/// Copies `from` to `to` until either ends or `stop`; reads nothing while `hold()`.
fn pump(mut from: TcpStream, mut to: TcpStream, stop: Arc<AtomicBool>, hold: impl Fn() -> bool) {
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        if hold() {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// Claim (f37e996, docs "What leaves the line": "each connection's order runs it after the
/// enter there"): the leave after a won enter runs after that enter on every master, so a
/// client whose try won stands in no line. Attack: the order holds on one connection only. A
/// connection that owes a reply past its stale limit (four node timeouts) is replaced when the
/// next command is queued on it, and the leave, queued after the decision, can be that
/// command: it goes out on a new connection while the enter is still in the old one's path.
///
/// The sequence (three masters, node timeout 3 s, stale limit 12 s; the replies of masters 0
/// and 2 held 1.2 s by proxies; master 1 holds R under another value, behind a proxy that
/// holds one connection's bytes):
/// 1. Master 1's connection A is held (its path drops every packet).
/// 2. At 0 s C's `try_lock` of another resource is written to A (granted by 0 and 2).
/// 3. At 11.4 s C's `lock` of R: the enter goes to A, and to 0 and 2, whose yes comes at
///    12.6 s.
/// 4. The leave to master 1 finds A stale (owed since 0 s, past 12 s): A is dropped, B opened, and the
///    leave runs on master 1 at once (C is in no line there yet).
/// 5. A's path heals: master 1 runs the `SET NX` and the enter, which is refused and puts C
///    in its line, after the leave. C holds R, unlocks it, and stays in master 1's line.
///
/// Held to: once the connections are quiet, C is in no line.
#[test]
#[ignore = "defect (or limit): a won enter's leave sent on a new connection, after the \
            enter's connection went stale, can run before that enter, whose late refusal \
            leaves the client in the line"]
fn a_leave_on_a_replaced_connection_does_not_overtake_the_enter() {
    let c = cluster(3);
    let direct = c.addrs();
    let p0 = Proxy::start(c.servers()[0].addr());
    let p2 = Proxy::start(c.servers()[2].addr());
    let flow = FlowProxy::start(c.servers()[1].addr());
    let nodes = vec![p0.addr(), flow.addr.clone(), p2.addr()];
    let mut o = options(&nodes, true, "c", Duration::from_millis(300), 10_000);
    o.node_timeout = Duration::from_secs(3);
    let cl = Redlock::with_config(o.validate().unwrap()).unwrap();
    warm(&cl);
    assert_eq!(flow.accepted.load(Ordering::SeqCst), 1, "one connection");
    let key = resource("s15-stale-leave");
    redis(&direct[1], &["SET", &key, "x", "PX", "60000"]);
    // (Two chunks of replies held one after the other still come within a node timeout.)
    p0.set(latency(Duration::from_millis(1200)));
    p2.set(latency(Duration::from_millis(1200)));
    *flow.held.lock().unwrap() = Some(0);
    // A read already waiting when the hold began (its timeout is 20 ms) passes what comes
    // during it.
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let other = cl
        .try_lock(&resource("s15-stale-other"), TTL)
        .expect("masters 0 and 2 grant it");
    drop(other);
    // Queued on A 0.6 s before its stale limit (12 s), decided 0.6 s after it.
    let enter_at = start + Duration::from_millis(11_400);
    std::thread::sleep(enter_at.saturating_duration_since(Instant::now()));
    let l = cl.lock(&key, TTL).expect("masters 0 and 2 grant it");
    assert_eq!(
        cl.stats().nodes[1].stale_replaced,
        1,
        "the leave went out on a new connection"
    );
    p0.set(Fault::Pass);
    p2.set(Fault::Pass);
    // The leave has run on master 1 once nothing is owed any more (A is forgotten).
    wait_until(Duration::from_secs(10), "the leave answered", || {
        cl.poll_idle(Duration::from_millis(100))
    });
    let before = in_line(&direct[1..2], &key, "c");
    // A's path heals: its bytes go through within a poll of the proxy (20 ms), and run at
    // once.
    *flow.held.lock().unwrap() = None;
    cl.unlock(&l).expect("released");
    // (Read 2 s later: a hundred of the proxy's polls.)
    std::thread::sleep(Duration::from_secs(2));
    let after = in_line(&direct, &key, "c");
    eprintln!("C in master 1's line before A healed: {before}; after: {after}");
    assert_eq!(
        after, 0,
        "C left in master 1's line by an enter that overtook its leave"
    );
}
