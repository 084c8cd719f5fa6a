//! A hostile review of 70a3b82 against real masters: fair mode for an ACL user who may run
//! neither scripts nor functions (`-@scripting`, `Scripts::Auto`), whose enter and claim of one
//! resource go out as `SET NX PX` and whose hand-off goes out as the native release. The
//! attacks: masters that differ (the user denied scripts on some only), a waiter rung while a
//! newcomer tries on the masters that keep no line, the permission revoked while the user
//! waits in line, and a fenced lock (no scriptless form). The scriptless release needs native
//! commands: these tests skip, saying why, on a server without them (Redis 7.0); run them
//! with `REDLOCK_REDIS_SERVER` set to Valkey 9's `valkey-server`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::Redlock;
use testkit::cases::has_native;
use testkit::proxy::{latency, Proxy};
use testkit::review::{holding, in_line, options};
use testkit::{cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(30);

/// Creates ACL user `name` (password `pw`) on every master of `addrs`, with every command,
/// key and channel, denied `@scripting` on the masters `denied[i]` says; returns the nodes'
/// addresses for it (in front of `at`, the addresses a client dials).
fn user(addrs: &[String], at: &[String], name: &str, denied: &[bool]) -> Vec<String> {
    for (a, deny) in addrs.iter().zip(denied) {
        let mut args = vec!["ACL", "SETUSER", name, "on", ">pw", "~*", "&*", "+@all"];
        if *deny {
            args.push("-@scripting");
        }
        assert_eq!(redis(a, &args), Frame::Simple("OK".into()), "ACL on {a}");
    }
    at.iter()
        .map(|a| format!("redis://{name}:pw@{a}"))
        .collect()
}

/// A blocking fair client `id` on `nodes`, claim lease `lease`.
fn fair(nodes: &[String], id: &str, lease: Duration) -> Redlock {
    let mut o = options(nodes, true, id, lease, 10_000);
    o.node_timeout = Duration::from_secs(10);
    Redlock::with_config(o.validate().expect("valid")).expect("a client")
}

/// Whether the servers have native commands; if not, says so (the test then skips).
fn native_or_skip(addrs: &[String]) -> bool {
    let native = has_native(&addrs[0]);
    if !native {
        eprintln!("skipped: no native release on this server (run on Valkey 9 or Redis 8.4)");
    }
    native
}

/// The overlaps among tenures `(who, from, to)`.
fn overlaps(mut t: Vec<(String, Instant, Instant)>) -> Vec<String> {
    t.sort_by_key(|x| x.1);
    let mut v = Vec::new();
    for (i, a) in t.iter().enumerate() {
        for b in &t[i + 1..] {
            if b.1 < a.2 {
                v.push(format!("{} granted while {} held", b.0, a.0));
            }
        }
    }
    v
}

/// Claim (docs "Safety does not change", "A user who may run no script"): the line decides
/// who tries, never who holds, whatever the masters keep lines for whom: never two holders.
/// And every waiter is served (no lock call fails or hangs).
///
/// The attack: five masters; user `few` denied scripts on masters 3 and 4, user `most` on
/// masters 2, 3 and 4 (the masters that keep no line for it are a quorum: a reservation on the
/// others does not stop a newcomer there). Two fair clients of each user and two of the
/// default user (scripts everywhere) lock one resource 25 times each, hold it 2 ms, unlock.
#[test]
fn masters_that_differ_in_scripts_never_give_two_holders() {
    let c = cluster(5);
    let addrs = c.addrs();
    if !native_or_skip(&addrs) {
        return;
    }
    let few = user(&addrs, &addrs, "few", &[false, false, false, true, true]);
    let most = user(&addrs, &addrs, "most", &[false, false, true, true, true]);
    let lease = Duration::from_millis(200);
    let clients: Vec<(String, Redlock)> = [("few", &few), ("most", &most), ("dflt", &addrs)]
        .iter()
        .flat_map(|(n, nodes)| {
            (0..2).map(move |i| (format!("{n}{i}"), fair(nodes, &format!("{n}{i}"), lease)))
        })
        .collect();
    let key = resource("s16-mixed");
    let tenures = Mutex::new(Vec::new());
    let began = Instant::now();
    std::thread::scope(|s| {
        for (id, cl) in &clients {
            let (key, tenures) = (&key, &tenures);
            s.spawn(move || {
                for turn in 0..25 {
                    let l = cl
                        .lock_within(key, TTL, Duration::from_secs(60))
                        .unwrap_or_else(|e| panic!("{id} turn {turn}: {e}"));
                    let from = Instant::now();
                    std::thread::sleep(Duration::from_millis(2));
                    let to = Instant::now().min(l.valid_until());
                    tenures.lock().unwrap().push((id.clone(), from, to));
                    cl.unlock(&l).unwrap_or_else(|e| panic!("{id} unlock: {e}"));
                }
            });
        }
    });
    let took = began.elapsed();
    let v = overlaps(tenures.into_inner().unwrap());
    assert!(v.is_empty(), "{v:?}");
    eprintln!("150 locks in {took:?}");
    for (id, cl) in &clients {
        cl.poll_idle(Duration::from_millis(100));
        assert_eq!(in_line(&addrs, &key, id), 0, "{id} left in a line");
    }
}

/// Claim (docs "The bell": "a plain `SET NX` from anyone else finds it taken"; "A user who may
/// run no script": "Where only some masters refuse scripts, the others keep their lines and
/// ring"): where the masters that keep lines are a quorum, a waiter rung there is not passed
/// by a newcomer trying on every master, though the master that keeps no line leaves the
/// resource free.
///
/// Three masters; user `one` denied scripts on master 2 only. H (user `one`) holds; W (user
/// `one`, its replies held back 1 s by proxies, so that its claim comes late) waits in the
/// lines of masters 0 and 1. H unlocks: masters 0 and 1 reserve the resource for W, master 2
/// deletes the key. A newcomer N (user `one`) tries while W's bells are on their way: refused
/// (one master of three). W is then granted.
#[test]
fn a_newcomer_does_not_pass_a_rung_waiter_where_a_quorum_keeps_lines() {
    let c = cluster(3);
    let addrs = c.addrs();
    if !native_or_skip(&addrs) {
        return;
    }
    let proxies: Vec<Proxy> = c.servers().iter().map(|s| Proxy::start(s.addr())).collect();
    let via: Vec<String> = proxies.iter().map(Proxy::addr).collect();
    let denied = [false, false, true];
    let direct = user(&addrs, &addrs, "one", &denied);
    let slow = user(&addrs, &via, "one", &denied);
    let lease = Duration::from_secs(5);
    let (h, n, w) = (
        fair(&direct, "h", lease),
        fair(&direct, "n", lease),
        fair(&slow, "w", lease),
    );
    let key = resource("s16-one");
    // Every connection open, and master 2's refusals learnt, before the fault.
    for cl in [&h, &n, &w] {
        let l = cl.lock(&resource("s16-one-warm"), TTL).expect("up");
        cl.unlock(&l).expect("up");
    }
    let held = h.lock(&key, TTL).expect("free");
    for p in &proxies {
        p.set(latency(Duration::from_secs(1)));
    }
    std::thread::scope(|s| {
        let waiter = s.spawn(|| w.lock_within(&key, TTL, Duration::from_secs(60)));
        wait_until(Duration::from_secs(20), "W in lines 0 and 1", || {
            in_line(&addrs, &key, "w") == 2
        });
        h.unlock(&held).expect("released");
        // (The unlock returns at a quorum: the third master may run it a moment later.)
        wait_until(
            Duration::from_secs(5),
            "reserved for W on masters 0 and 1",
            || holding(&addrs[..2], &key, b"redlock-mux:reserved:w") == 2,
        );
        let passed = n.try_lock(&key, TTL);
        let lock = waiter.join().unwrap().expect("W granted");
        assert!(
            passed.is_err(),
            "a newcomer passed the rung waiter: {passed:?}"
        );
        w.unlock(&lock).expect("released");
    });
}

/// Claim (docs "What leaves the line": "A waiter in line waits for its bell at most eight
/// claim leases before it tries again"; safety): a user whose scripting permission is
/// revoked while it waits in line is still served, never beside another holder, and what it
/// leaves behind in the lines costs the next waiter no more than that bound.
///
/// Three masters. H (default user) holds; U (user `u`, scripts allowed) waits in every line;
/// the operator then denies `u` every script (`-@scripting`). H unlocks: the resource is
/// reserved for U and U is rung, but its claim, refused as a script and as a function, goes
/// out as `SET NX`, which a reservation refuses. U must still be granted; then X (default
/// user) waits behind U, U unlocks (natively), and X must be granted.
///
/// Found: U is granted by its timer (eight claim leases after the release), and stays in
/// every line once granted (its claim and its enter went out as `SET NX`, which take no one
/// out of a line; its native release neither). X, behind U's stale place, is granted two of
/// its timers (sixteen claim leases) after U's unlock: its first try finds the ring's record
/// of whom it rang last (sixteen leases) gone, rings U (alive, subscribed) and reserves the
/// resource for it, and only its next timer passes U's lapsed reservation by. The bound held
/// here is those two timers; the docs promise nothing for a permission revoked mid-run.
#[test]
fn a_waiter_whose_scripts_are_revoked_in_line_is_served_and_costs_the_next_little() {
    let c = cluster(3);
    let addrs = c.addrs();
    if !native_or_skip(&addrs) {
        return;
    }
    let nodes_u = user(&addrs, &addrs, "u", &[false; 3]);
    let lease = Duration::from_millis(500);
    let (h, u, x) = (
        fair(&addrs, "h", lease),
        fair(&nodes_u, "u", lease),
        fair(&addrs, "x", lease),
    );
    let key = resource("s16-revoked");
    let held = h.lock(&key, TTL).expect("free");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let l = u.lock_within(&key, TTL, Duration::from_secs(60));
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(20), "U in every line", || {
            in_line(&addrs, &key, "u") == 3
        });
        user(&addrs, &addrs, "u", &[true; 3]);
        let released = Instant::now();
        h.unlock(&held).expect("released");
        let (granted, lock) = waiter.join().unwrap();
        let lock = lock.expect("U granted after its scripts were revoked");
        eprintln!("U granted {:?} after the release", granted - released);
        assert!(holding(&addrs, &key, lock.token().as_bytes()) >= 2);
        let lines_after = in_line(&addrs, &key, "u");
        let next = s.spawn(|| {
            let l = x.lock_within(&key, TTL, Duration::from_secs(60));
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(20), "X in every line", || {
            in_line(&addrs, &key, "x") == 3
        });
        let unlocked = Instant::now();
        u.unlock(&lock).expect("released natively");
        let (granted, lock) = next.join().unwrap();
        let lock = lock.expect("X granted");
        let waited = granted - unlocked;
        eprintln!(
            "U stood in {lines_after} lines once granted; X granted {waited:?} after U's unlock"
        );
        assert!(
            waited < lease * 16 + Duration::from_secs(2),
            "X waited {waited:?} (U in {lines_after} lines)"
        );
        x.unlock(&lock).expect("released");
    });
}

/// Claim (docs "A user who may run no script": the scriptless forms are those of one
/// resource, unfenced; bad input gets a typed error, never a hang): a fenced fair lock by a
/// user who may run no script fails at once with the servers' refusal named, and leaves no
/// key behind.
#[test]
fn a_fenced_fair_lock_of_a_scriptless_user_fails_with_the_refusal_named() {
    let c = cluster(3);
    let addrs = c.addrs();
    let nodes = user(&addrs, &addrs, "nofence", &[true; 3]);
    let mut o = options(&nodes, true, "f", Duration::from_millis(200), 3);
    o.fencing = true;
    let cl = Redlock::with_config(o.validate().expect("valid")).expect("a client");
    let key = resource("s16-fenced");
    // (`lock`: `lock_within` retries a refusal until its deadline, as without fair mode.)
    let asked = Instant::now();
    let err = cl
        .lock(&key, TTL)
        .expect_err("no fenced lock without scripts");
    assert!(err.to_string().contains("NOPERM"), "{err}");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "{:?}",
        asked.elapsed()
    );
    for a in &addrs {
        assert_eq!(redis(a, &["EXISTS", &key]), Frame::Integer(0), "{a}");
    }
}

/// Claim (docs "The claim": a second hand-off under the same tag wakes its waiter, and a
/// slower master's bell of a hand-off that already woke it is spent; safety: never two
/// holders): many waiters of three clients that give up at random moments (each give-up's
/// leave passes a reservation on under the client's id, so one client's hand-offs to another
/// share a tag) never give two holders, every lock is granted, and nobody is left in a line
/// nor a reservation behind.
#[test]
fn give_ups_that_hand_off_under_one_tag_never_give_two_holders() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(200);
    let clients: Vec<(String, Redlock)> = (0..3)
        .map(|i| (format!("g{i}"), fair(&addrs, &format!("g{i}"), lease)))
        .collect();
    let key = resource("s16-give-ups");
    let tenures = Mutex::new(Vec::new());
    let (granted, gave_up) = (Mutex::new(0usize), Mutex::new(0usize));
    std::thread::scope(|s| {
        for (id, cl) in &clients {
            for t in 0..3u64 {
                let (key, tenures, granted, gave_up) = (&key, &tenures, &granted, &gave_up);
                s.spawn(move || {
                    for turn in 0..30u64 {
                        // Deadlines of 1 to 7 ms: most waiters give up while in line.
                        let within = Duration::from_millis(1 + (turn * 7 + t * 3) % 7);
                        let Ok(l) = cl.lock_within(key, TTL, within) else {
                            *gave_up.lock().unwrap() += 1;
                            continue;
                        };
                        let from = Instant::now();
                        std::thread::sleep(Duration::from_millis(1));
                        let to = Instant::now().min(l.valid_until());
                        tenures
                            .lock()
                            .unwrap()
                            .push((format!("{id}/{t}"), from, to));
                        *granted.lock().unwrap() += 1;
                        cl.unlock(&l).expect("released");
                    }
                });
            }
        }
    });
    let v = overlaps(tenures.into_inner().unwrap());
    assert!(v.is_empty(), "{v:?}");
    let (granted, gave_up) = (granted.into_inner().unwrap(), gave_up.into_inner().unwrap());
    eprintln!("{granted} granted, {gave_up} gave up");
    assert!(granted > 0);
    for (id, cl) in &clients {
        cl.poll_idle(Duration::from_millis(100));
        wait_until(Duration::from_secs(10), "nobody in a line", || {
            in_line(&addrs, &key, id) == 0
        });
    }
    wait_until(lease * 4, "no reservation left", || {
        addrs
            .iter()
            .all(|a| redis(a, &["EXISTS", &key]) == Frame::Integer(0))
    });
}
