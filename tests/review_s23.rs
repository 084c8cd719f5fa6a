//! A hostile review, against real masters, of session 23's changes (docs/redlock.md, "The
//! line", "What leaves the line"):
//!
//! 1. `Engine::waits_for`: a waiter of the client with a fair round in flight (claim, wait,
//!    enter) stands in the line: a sibling's leave is kept, a release becomes the keeping
//!    form (Unclaim), and the wake for the sibling is held (`hold_wake`) until its next watch
//!    of the line;
//! 2. `Engine::forget_gone` (async driver, dropped futures);
//! 3. `claim.lua`'s `redlock-mux:served:<r>` record, read by `handoff.lua`'s keeping form;
//! 4. `extend.lua`, `fence.lua`, `leave.lua` read keys with `redis.pcall`.
//!
//! Each test states the sequence, what is held and what was measured; a test that proved a
//! defect is marked `DEFECT (fixed):` in its doc comment, with the runs that failed before the
//! fix. All pass since the fixes of the same session.
//!
//! Found (each failed before its fix): a stale held wake makes a later waiter of the client claim at
//! once and spend a try (async; `lock` with two tries fails with `Conflict`); a set's release
//! stops at a line key of another type and leaves the set's other resources held until the
//! ttl; the leave stops at a ring marker of another type and the release at a taken record of
//! another type; (older) a ring marker left from the head's earlier, served turn lets a later
//! waiter take the head out as lapsed when a lock runs out unreleased.
//!
//! Held (pass): safety throughout (a release turned into the keeping form deleted its token,
//! never two holders); dropped async siblings beside another client's waiter cost nobody a
//! lease; a served record of another type or forged stops nothing.

use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::Options;
use redlock_mux::resp::Frame;
use redlock_mux::Lock;
use testkit::proxy::{latency, set_all, Fault};
use testkit::review::{either_client, holding, in_line, line, options};
use testkit::{cluster, get, redis, resource, wait_until, LockClient};

#[path = "fair_scripts/client.rs"]
mod client;

const TTL: Duration = Duration::from_secs(20);

type Client = Box<dyn LockClient + Send + Sync>;

/// A fair client `id` of either kind on `nodes`: claim lease `lease`, `tries` tries, a node
/// timeout of 10 s (proxies may hold replies back for a second).
fn fair(nodes: &[String], id: &str, lease: Duration, tries: u32, asy: bool) -> Client {
    let mut o: Options = options(nodes, true, id, lease, tries);
    o.node_timeout = Duration::from_secs(10);
    either_client(o, asy)
}

/// Waits (bounded by `limit`, polling) until `cond` holds or `done` says the thread it
/// watches has ended; returns whether `cond` held.
fn until_or_done(limit: Duration, mut cond: impl FnMut() -> bool, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        if done() {
            return cond();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

// ---------------------------------------------------------------------------------------------
// 1. The held wake.
// ---------------------------------------------------------------------------------------------

/// The race that arms a held wake: X's T1 holds R; the proxies hold X's replies 600 ms; X's
/// T2 locks R (its early watch registered, its enter reaches every master and is refused, its
/// replies held back: a round in flight); T1 unlocks while that enter is out. The release is
/// the keeping form (T2's round in flight), wakes T2's early watch, and holds a wake for R
/// (`hold_wake`). T2 then claims at once with its early watch's wake and takes R: it never
/// registers another watch of R's line, so the held wake is left behind. Returns T1's and
/// T2's locks.
fn arm_a_held_wake(
    x: &Client,
    proxies: &[testkit::proxy::Proxy],
    direct: &[String],
    key: &str,
) -> (Lock, Lock) {
    let l1 = x.lock(key, TTL).expect("R free");
    set_all(proxies, latency(Duration::from_millis(600)));
    let l2 = std::thread::scope(|s| {
        let t2 = s.spawn(|| x.lock(key, TTL));
        // T2's enter ran everywhere (refused: T1 holds) once X stands in every line; its
        // replies are held 600 ms, so its round is still in flight.
        assert!(
            until_or_done(
                Duration::from_secs(10),
                || in_line(direct, key, "x") == 3,
                || t2.is_finished()
            ),
            "T2's enter never reached the masters"
        );
        x.unlock(&l1).expect("T1 releases");
        t2.join().unwrap().expect("T2 is served from X's place")
    });
    set_all(proxies, Fault::Pass);
    assert_eq!(
        holding(direct, key, l1.token().as_bytes()),
        0,
        "the keeping release deleted T1's token"
    );
    assert!(
        holding(direct, key, l2.token().as_bytes()) >= 2,
        "T2 holds R on a quorum"
    );
    (l1, l2)
}

/// Claim (docs "What leaves the line": "A release that keeps the place for such a waiter
/// cannot wake it: the wake is held for the line, and the waiter's next watch of it fires at
/// once"): a held wake is for the waiter that was between two watches; it never wakes a later
/// waiter of the client for nothing. `lock` with two tries (an enter, then the claim its bell
/// wakes) must be granted after the holder's release.
///
/// The sequence (X fair, `retry(2, ..)`, through three proxies; Z fair, direct; lease 300 ms):
/// 1. [`arm_a_held_wake`]: T2 is served from X's place with the early watch's wake; the held
///    wake of R is left in X's engine. T2 unlocks.
/// 2. Z locks R (free) and holds it.
/// 3. X's T3 `lock(R)`: its enter is refused (try 1) and it waits for its bell.
/// 4. Z holds four claim leases, then unlocks: X heads the line, is rung, T3 claims (try 2).
///
/// Held to: T3 granted after Z's unlock; safety throughout (T1's token gone before T2 is
/// granted, one holder at a time).
///
/// DEFECT (fixed: a wake is held only for a waiter with no watch registered, and is forgotten
/// once that waiter is served or after two node timeouts and a claim lease; before, async
/// client, 7 of 7 runs; the control without the race passes 4 of 4): T3's
/// early watch consumes the stale held wake at once, so T3 claims right after its enter,
/// against Z's lock: refused (`Conflict`, every master `Held`), its second try spent, and
/// `lock` fails before Z's unlock while R was due to Z's release 1.2 s later. (`hold_wake`
/// is armed though the release also fired T2's early watch, and a held wake is kept until any
/// later watch of the line, however old.) The blocking client passed 4 of 4: its T2 either
/// never counted as a round in flight at the release or consumed the wake itself.
fn a_held_wake_wakes_nobody_later(asy: bool, race: bool) {
    let c = cluster(3);
    let direct = c.addrs();
    let (proxies, via) = testkit::proxy::in_front(&c, 0..3);
    let lease = Duration::from_millis(300);
    let key = resource("s23-held-wake");
    let x = fair(&via, "x", lease, 2, asy);
    let z = fair(&direct, "z", lease, 10_000, false);
    if race {
        let (_l1, l2) = arm_a_held_wake(&x, &proxies, &direct, &key);
        x.unlock(&l2).expect("T2 releases");
    } else {
        // The control: T1 and T2 one after the other, no release while a round is out.
        for _ in 0..2 {
            let l = x.lock(&key, TTL).expect("R free");
            x.unlock(&l).expect("released");
        }
    }
    let lz = z.lock(&key, TTL).expect("R free again");
    let (r, granted_after_unlock) = std::thread::scope(|s| {
        let t3 = s.spawn(|| {
            let r = x.lock(&key, TTL);
            (r, Instant::now())
        });
        let joined = until_or_done(
            Duration::from_secs(10),
            || in_line(&direct, &key, "x") == 3,
            || t3.is_finished(),
        );
        // T3 waits for its bell: Z holds four leases more.
        let until = Instant::now() + 4 * lease;
        while Instant::now() < until && !t3.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let early = t3.is_finished();
        let unlocked = Instant::now();
        z.unlock(&lz).expect("Z releases");
        let (r, at) = t3.join().unwrap();
        eprintln!(
            "T3 joined the lines: {joined}; ended before Z's unlock: {early}; \
             result {:?}",
            r.as_ref().map(|_| "granted")
        );
        (r, at.checked_duration_since(unlocked))
    });
    match r {
        Ok(l) => {
            assert!(granted_after_unlock.is_some(), "T3 granted while Z held R");
            x.unlock(&l).unwrap();
        }
        Err(e) => panic!(
            "T3's lock (two tries) failed while Z held R and would release it: {e:?} \
             (a stale held wake made it claim at once)"
        ),
    }
}

#[test]
fn a_held_wake_wakes_nobody_later_blocking() {
    a_held_wake_wakes_nobody_later(false, true);
}

#[test]
fn a_held_wake_wakes_nobody_later_async() {
    a_held_wake_wakes_nobody_later(true, true);
}

/// The control of [`a_held_wake_wakes_nobody_later_async`]: the same steps without the race
/// (T1 and T2 lock and unlock one after the other): T3's `lock` with two tries is granted at
/// Z's unlock (passes).
#[test]
fn control_without_the_race_two_tries_suffice_async() {
    a_held_wake_wakes_nobody_later(true, false);
}

// ---------------------------------------------------------------------------------------------
// 4. Keys of another type.
// ---------------------------------------------------------------------------------------------

/// Claim (session 23, change 4: "a key of another type counts as another's; a set's leave goes
/// on past it"; hostile.rs: a release over a key of another type reports that master held and
/// still releases the set's other keys): a set's release goes on past a resource whose LINE key
/// is of another type (a mistaken or hostile writer), and releases the set's other resources.
///
/// The sequence (fair blocking client X, three masters): X `lock_many([a, b])`; on every
/// master `DEL` and `LPUSH` a's line key; X unlocks the set.
///
/// Held to: b's key is gone from every master after the unlock (whatever the unlock reports);
/// a waiter of b (fair client W, `lock_within` 2 s) is granted b.
///
/// DEFECT (fixed: `handoff.lua` passes a line key of another type by; before, 6 of 6 runs,
/// deterministic): the unlock answered `NoQuorum`, every master's vote
/// `WRONGTYPE ... @user_script:64`; `handoff.lua` runs `redis.call("ZREM", <a's line>, id)` (and, in the
/// keeping form, `ZADD`) without `pcall`: the script stops at `WRONGTYPE` on a, before it gets
/// to b; X's token stays under b on every master until its ttl (20 s), and W's lock_within
/// fails. `leave.lua` goes on past the same key since session 23; the hand-off does not.
#[test]
fn a_sets_release_goes_on_past_a_line_key_of_another_type() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let x = fair(&addrs, "x", lease, 3, false);
    let w = fair(&addrs, "w", lease, 10_000, false);
    let (a, b) = (resource("s23-wt-line-a"), resource("s23-wt-line-b"));
    let l = x.lock_many(&[&a, &b], TTL).expect("a and b free");
    for addr in &addrs {
        redis(addr, &["DEL", &line(&a)]);
        redis(addr, &["LPUSH", &line(&a), "junk"]);
    }
    let r = x.unlock(&l);
    let left_b = holding(&addrs, &b, l.token().as_bytes());
    let left_a = holding(&addrs, &a, l.token().as_bytes());
    eprintln!("unlock: {r:?}; X's token left under a on {left_a}, under b on {left_b} masters");
    let started = Instant::now();
    let got = w.lock_within(&b, TTL, Duration::from_secs(2));
    eprintln!(
        "W's lock_within(b, 2 s): {:?} after {:?}",
        got.as_ref().map(|_| ()),
        started.elapsed()
    );
    assert_eq!(
        left_b, 0,
        "b still held by the released set on {left_b} masters"
    );
    assert!(got.is_ok(), "W never got b: {got:?}");
}

/// Claim (as above, the rung marker): a set's leave goes on past resources whose keys are of
/// another type, and so must it past a resource whose ring marker
/// (`redlock-mux:rung:<r>`, a key of the library's own namespace) a mistaken or hostile
/// writer replaced by a list; and a release that finds another's token goes on past a
/// `redlock-mux:taken:<r>` record of another type. Script level, one master.
///
/// The sequences:
/// - leave: R reserved for w, w in the lines of a and b, the marker of a is a list; w's
///   leave of {a, b}.
/// - hand-off: h holds a and b (a set), a's key replaced by another's token, a's taken
///   record a list; h's release of {a, b}.
///
/// Held to: the leave takes w out of b's line; the release deletes b.
///
/// DEFECT (fixed: the ring reads its marker, and the release the taken record, with `pcall`;
/// before, every run, deterministic): the leave answered `WRONGTYPE ... @user_script:7` and w
/// stays in b's line; the release answers `WRONGTYPE ... @user_script:73` and b keeps h's
/// token. `ring` reads the marker with `redis.call("GET")`, and
/// `handoff.lua` reads the taken record with `redis.call("GET")`: both stop at `WRONGTYPE`.
#[test]
fn leave_and_release_go_on_past_library_keys_of_another_type() {
    use client::{queue, Client};
    let server = testkit::local::LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    // The leave.
    let (a, b) = (resource("s23-wt-rung-a"), resource("s23-wt-rung-b"));
    let (qa, qb) = (line(&a), line(&b));
    let mut w = Client::new(&addr, "w");
    redis(&addr, &["ZADD", &qa, "1", "w"]);
    redis(&addr, &["ZADD", &qa, "2", "v"]);
    redis(&addr, &["ZADD", &qb, "1", "w"]);
    let reserved = format!("{}w", redlock_mux::script::RESERVED_PREFIX);
    redis(&addr, &["SET", &a, &reserved, "PX", "30000"]);
    redis(&addr, &["LPUSH", &format!("redlock-mux:rung:{a}"), "junk"]);
    let left = w.eval(
        redlock_mux::script::LEAVE,
        &[&a, &b, &qa, &qb],
        &["w", "60000"],
    );
    let leave_ok = queue(&addr, &b).is_empty();
    eprintln!(
        "leave over a list marker: {left:?}; b's line after: {:?}",
        queue(&addr, &b)
    );
    // The hand-off.
    let (c1, c2) = (resource("s23-wt-taken-a"), resource("s23-wt-taken-b"));
    let (q1, q2) = (line(&c1), line(&c2));
    let mut h = Client::new(&addr, "h");
    let tok = "1111111111111111111111111111111111111111";
    let other = "2222222222222222222222222222222222222222";
    redis(&addr, &["SET", &c1, other, "PX", "30000"]);
    redis(&addr, &["SET", &c2, tok, "PX", "30000"]);
    redis(
        &addr,
        &["LPUSH", &format!("redlock-mux:taken:{c1}"), "junk"],
    );
    let released = h.eval(
        redlock_mux::script::HANDOFF,
        &[&c1, &c2, &q1, &q2],
        &[tok, "300", "h", "1", "0"],
    );
    let release_ok = get(&addr, &c2).is_none();
    eprintln!(
        "release over a list taken record: {released:?}; c2 after: {:?}",
        get(&addr, &c2)
    );
    assert!(
        leave_ok,
        "the leave stopped at the list marker: w still in b's line"
    );
    assert!(
        release_ok,
        "the release stopped at the list taken record: b still held"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Dropped async futures among siblings (`forget_gone`).
// ---------------------------------------------------------------------------------------------

/// What happened to R, when: a grant or an unlock, by whom.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ev {
    Grant,
    Unlock,
}

/// Claim (docs "What leaves the line": a dropped future leaves the lines and passes a
/// reservation it holds on at once; a round whose caller went away is no waiter,
/// `forget_gone`; a kept leave or a keeping release spares the place only for a waiter that
/// exists): with async waiters of one client dropped at random moments (before their enter,
/// with an enter, a read, a claim in flight, while awaiting their bell) beside live siblings
/// and another client's waiter, no release is followed by a pause of about a claim lease
/// before the next grant while somebody waits (a reservation for nobody, a stale place rung
/// for nothing, a wake held for nobody), nothing is left in a line or reserved at the end,
/// and never two holders.
///
/// The sequence (three masters, lease 300 ms): X async (2 workers), 48 tasks started 0-40 ms
/// apart, each `lock_within(R, 20 s)` under a timeout drawn in 0-400 ms (dropped if it fires
/// before the grant); a granted task holds 10 ms and unlocks. Y blocking, 8 times
/// `lock_within` + 10 ms + unlock. The gaps are from an unlock to the next grant while a
/// task or Y still waited.
///
/// Measured (6 runs, pass): 21 to 24 drops and 24 to 27 X grants per run (one run with
/// shorter holds: 1 drop), the longest unlock-to-grant gap 1.4 to 2.1 ms (30 ms with 1 drop),
/// no gap over 0.8 lease, R's lines and key gone, a newcomer's `try_lock` in about 1 ms.
#[test]
fn dropped_async_siblings_cost_the_others_no_lease() {
    use rand::Rng;
    use std::sync::{Arc, Mutex};
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let key = resource("s23-drops");
    let log: Arc<Mutex<Vec<(Instant, Ev, String)>>> = Arc::new(Mutex::new(Vec::new()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut o = options(&addrs, true, "x", lease, 10_000);
    o.node_timeout = Duration::from_secs(5);
    let x = rt
        .block_on(async { redlock_mux::AsyncRedlock::with_config(o.validate().unwrap()) })
        .unwrap();
    let y = {
        let (addrs, key, log) = (addrs.clone(), key.clone(), log.clone());
        std::thread::spawn(move || {
            let y = fair(&addrs, "y", lease, 10_000, false);
            for _ in 0..8 {
                let l = y
                    .lock_within(&key, TTL, Duration::from_secs(30))
                    .expect("Y is served");
                log.lock()
                    .unwrap()
                    .push((Instant::now(), Ev::Grant, "y".into()));
                std::thread::sleep(Duration::from_millis(10));
                log.lock()
                    .unwrap()
                    .push((Instant::now(), Ev::Unlock, "y".into()));
                y.unlock(&l).expect("Y releases");
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let (drops, grants) = rt.block_on(async {
        let mut tasks = Vec::new();
        let mut rng = rand::rng();
        for i in 0..48 {
            let (x, key, log) = (x.clone(), key.clone(), log.clone());
            let budget = Duration::from_millis(rng.random_range(0..600));
            tasks.push(tokio::spawn(async move {
                let got =
                    tokio::time::timeout(budget, x.lock_within(&key, TTL, Duration::from_secs(30)))
                        .await;
                match got {
                    Err(_) => (1, 0),
                    Ok(Ok(l)) => {
                        log.lock()
                            .unwrap()
                            .push((Instant::now(), Ev::Grant, format!("x{i}")));
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        log.lock()
                            .unwrap()
                            .push((Instant::now(), Ev::Unlock, format!("x{i}")));
                        x.unlock(&l).await.expect("X releases");
                        (0, 1)
                    }
                    Ok(Err(e)) => panic!("x{i}: {e:?}"),
                }
            }));
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
        }
        let (mut d, mut g) = (0, 0);
        for t in tasks {
            let (a, b) = t.await.unwrap();
            d += a;
            g += b;
        }
        (d, g)
    });
    y.join().unwrap();
    let mut log = log.lock().unwrap().clone();
    log.sort_by_key(|e| e.0);
    // Never two holders (the test's own record: grant, then its unlock, alternate).
    let mut held = 0i32;
    for (_, ev, who) in &log {
        held += if *ev == Ev::Grant { 1 } else { -1 };
        assert!(held <= 1, "two holders at {who}'s grant");
    }
    let mut longest = Duration::ZERO;
    let mut slow = Vec::new();
    for w in log.windows(2) {
        if w[0].1 == Ev::Unlock && w[1].1 == Ev::Grant {
            let gap = w[1].0 - w[0].0;
            if gap > longest {
                longest = gap;
            }
            if gap > lease * 4 / 5 {
                slow.push((w[0].2.clone(), w[1].2.clone(), gap));
            }
        }
    }
    eprintln!(
        "{drops} drops, {grants} X grants + 8 Y grants; longest unlock-to-grant gap {longest:?}; \
         gaps over 0.8 lease: {slow:?}"
    );
    wait_until(
        Duration::from_secs(10),
        "R's lines empty, nothing reserved",
        || {
            addrs
                .iter()
                .all(|a| redis(a, &["EXISTS", &line(&key), &key]) == Frame::Integer(0))
        },
    );
    let n = fair(&addrs, "n", lease, 10_000, false);
    let t = Instant::now();
    let l = n.try_lock(&key, TTL).expect("a newcomer finds R free");
    n.unlock(&l).unwrap();
    eprintln!("newcomer's try_lock took {:?}", t.elapsed());
    assert!(
        slow.is_empty(),
        "a release was followed by about a claim lease of nothing: {slow:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Order: the ring marker of an earlier, served turn.
// ---------------------------------------------------------------------------------------------

/// Claim (docs, the table: "a holder's lock runs out unreleased: the line's: the head's timer
/// claims the resource about a round trip after the expiry ... the head keeps its place"; "first
/// come, first served"): a waiter that joined later never takes the head out of the line as a
/// lapsed head when the head was never rung for this turn.
///
/// The sequence (three masters, lease 300 ms; Y blocking through proxies, X and Z blocking
/// directly):
/// 1. Z holds R; Y waits; Z unlocks: R is rung for Y (`redlock-mux:rung:R` = `y`, kept 16
///    claim leases), Y claims and holds R, then unlocks with nobody in line (the marker stays).
/// 2. Z `try_lock(R)` with a 1.5 s ttl and never releases it.
/// 3. The proxies hold Y's replies 150 ms (a client farther away). Y locks R: refused, Y heads
///    every line. X locks R: refused, behind Y.
/// 4. Z's lock runs out. Both timers fall due; X's read comes first (Y's replies are late).
///
/// Held to: Y granted before X.
///
/// DEFECT (fixed: a claim that takes the resource deletes a ring marker naming its client;
/// before, 10 of 10 runs; the control without step 1 passed 9 of 9, Y first): X granted about
/// 3 ms after the expiry, Y about 300 ms after. Older than session 23 (the marker's rule),
/// not from its changes. X's wait finds R free with Y at the head and the marker naming Y
/// (rung for its previous, served turn): the ring takes Y out as a head whose reservation
/// lapsed and reserves R for X; Y joins again behind X.
#[test]
fn a_marker_from_an_earlier_served_turn_does_not_cost_the_head_its_place() {
    marker_race(true);
}

/// The control of the test above: the same without step 1 (no marker names Y): X's read rings
/// Y, and Y is served first (passes).
#[test]
fn control_without_an_earlier_turn_the_head_is_served_first() {
    marker_race(false);
}

fn marker_race(earlier_turn: bool) {
    let c = cluster(3);
    let direct = c.addrs();
    let (py, via) = testkit::proxy::in_front(&c, 0..3);
    let lease = Duration::from_millis(300);
    let key = resource("s23-old-marker");
    let marker = format!("redlock-mux:rung:{key}");
    let y = fair(&via, "y", lease, 10_000, false);
    let x = fair(&direct, "x", lease, 10_000, false);
    let z = fair(&direct, "z", lease, 10_000, false);
    let lz = z.lock(&key, TTL).expect("R free");
    std::thread::scope(|s| {
        if !earlier_turn {
            z.unlock(&lz).expect("Z releases");
            return;
        }
        let t = s.spawn(|| y.lock(&key, TTL));
        assert!(
            until_or_done(
                Duration::from_secs(10),
                || in_line(&direct, &key, "y") == 3,
                || t.is_finished()
            ),
            "Y never in line"
        );
        z.unlock(&lz).expect("Z releases");
        let ly = t.join().unwrap().expect("Y rung and served");
        y.unlock(&ly).expect("Y releases");
    });
    let markers: Vec<Option<String>> = direct.iter().map(|a| get(a, &marker)).collect();
    eprintln!("markers after Y's served turn: {markers:?}");
    let _lapsing = z
        .try_lock(&key, Duration::from_millis(1500))
        .expect("R free");
    let expires = Instant::now() + Duration::from_millis(1500);
    set_all(&py, latency(Duration::from_millis(150)));
    let (gy, gx) = std::thread::scope(|s| {
        let ty = s.spawn(|| {
            let l = y.lock(&key, TTL).expect("Y served");
            (Instant::now(), l)
        });
        assert!(
            until_or_done(
                Duration::from_secs(10),
                || in_line(&direct, &key, "y") == 3,
                || ty.is_finished()
            ),
            "Y never in line"
        );
        let tx = s.spawn(|| {
            let l = x.lock(&key, TTL).expect("X served");
            (Instant::now(), l)
        });
        assert!(
            until_or_done(
                Duration::from_secs(10),
                || in_line(&direct, &key, "x") == 3,
                || tx.is_finished()
            ),
            "X never in line"
        );
        assert!(
            Instant::now() < expires,
            "the machine was too slow to set the race up"
        );
        let markers: Vec<Option<String>> = direct.iter().map(|a| get(a, &marker)).collect();
        eprintln!("markers before Z's lock runs out: {markers:?}");
        // Whoever holds first releases, so that the other is served too.
        let first = loop {
            if ty.is_finished() {
                break 'y';
            }
            if tx.is_finished() {
                break 'x';
            }
            assert!(
                Instant::now() < expires + Duration::from_secs(10),
                "nobody served"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let (gy, gx) = if first == 'y' {
            let (gy, ly) = ty.join().unwrap();
            y.unlock(&ly).unwrap();
            let (gx, lx) = tx.join().unwrap();
            x.unlock(&lx).unwrap();
            (gy, gx)
        } else {
            let (gx, lx) = tx.join().unwrap();
            x.unlock(&lx).unwrap();
            let (gy, ly) = ty.join().unwrap();
            y.unlock(&ly).unwrap();
            (gy, gx)
        };
        (gy, gx)
    });
    set_all(&py, Fault::Pass);
    eprintln!(
        "Y granted {:?} after the expiry, X {:?}",
        gy.saturating_duration_since(expires),
        gx.saturating_duration_since(expires)
    );
    assert!(gy < gx, "X, behind Y in every line, was served first");
}

// ---------------------------------------------------------------------------------------------
// 3. The served record under hostile writes.
// ---------------------------------------------------------------------------------------------

/// Claim (session 23, change 3; "a key of another type counts as another's"): the served
/// record `redlock-mux:served:<r>` of another type (a hash, a list, a set), or forged to name
/// the waiting client and the holder's token, never stops a hand-off or a claim, and never
/// makes a release leave a lock's key or two holders: the record only decides whether a
/// failed claim's release puts the client back in the line.
///
/// The sequence (three masters, lease 300 ms; H and W fair blocking clients): 12 turns; before
/// each, the record of R on every master is replaced (a hash, a list, a set, then a string
/// "w <H's token>" once H holds); H holds R, W waits, H unlocks, W is served and unlocks.
///
/// Held to: every turn serves W after H's unlock (within two seconds), never while H's token
/// is on a quorum, and nothing of R is left at the end. Passed 4 of 4 runs.
#[test]
fn a_served_record_of_another_type_or_forged_stops_nothing() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let key = resource("s23-served");
    let served = format!("redlock-mux:served:{key}");
    let h = fair(&addrs, "h", lease, 10_000, false);
    let w = fair(&addrs, "w", lease, 10_000, false);
    for turn in 0..12 {
        for a in &addrs {
            redis(a, &["DEL", &served]);
            match turn % 4 {
                0 => redis(a, &["HSET", &served, "f", "v"]),
                1 => redis(a, &["LPUSH", &served, "v"]),
                2 => redis(a, &["SADD", &served, "v"]),
                _ => Frame::Null,
            };
        }
        let lh = h.lock(&key, TTL).expect("H has R");
        if turn % 4 == 3 {
            let forged = format!("w {}", lh.token().as_str());
            for a in &addrs {
                redis(a, &["SET", &served, &forged, "PX", "20000"]);
            }
        }
        std::thread::scope(|s| {
            let t = s.spawn(|| w.lock_within(&key, TTL, Duration::from_secs(10)));
            assert!(
                until_or_done(
                    Duration::from_secs(10),
                    || in_line(&addrs, &key, "w") == 3,
                    || t.is_finished()
                ),
                "turn {turn}: W never in line"
            );
            let unlocked = Instant::now();
            h.unlock(&lh).expect("H releases");
            let lw = t.join().unwrap().expect("W served");
            assert_eq!(
                holding(&addrs, &key, lh.token().as_bytes()),
                0,
                "turn {turn}"
            );
            assert!(
                unlocked.elapsed() < Duration::from_secs(2),
                "turn {turn}: W served {:?} after H's unlock",
                unlocked.elapsed()
            );
            w.unlock(&lw).expect("W releases");
        });
    }
    wait_until(Duration::from_secs(10), "nothing of R left", || {
        addrs
            .iter()
            .all(|a| redis(a, &["EXISTS", &line(&key), &key]) == Frame::Integer(0))
    });
}
