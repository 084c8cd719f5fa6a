//! A hostile review, against real masters, of ac8aadf: a hand-off tells the second in line
//! (`+ <resource>` on its bell), whose engine wakes its waiter a claim lease (and the drift
//! allowance) later to read the line again (`Wake::Lapse`), so that a head that never claims
//! costs the line about one claim lease, not eight. Each test states the claim it holds the
//! code to: safety first (a head slow rather than dead, its claim landing around the lapse on
//! some masters before and others after; shared client ids, unfair clients, a paused master),
//! then the docs' promises of cost ("What leaves the line, and what it costs the others").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::Options;
use redlock_mux::resp::Frame;

use testkit::proxy::{Fault, Proxy};
use testkit::review::{in_line, line, options, violations, Tenure};
use testkit::{calls, cluster, line_lengths, redis, resource, wait_until, LockClient};

const TTL: Duration = Duration::from_secs(60);

/// A client under review: either kind, behind one interface.
type Client = Box<dyn LockClient + Send + Sync>;

/// The options of a fenced fair client `id` (`fair`) on `nodes`, claim lease `lease`, with a
/// node timeout of 20 s: a round waits for a master held back by a proxy rather than count it
/// as timed out.
fn opts(nodes: &[String], fair: bool, id: &str, lease: Duration) -> Options {
    let mut o = options(nodes, fair, id, lease, 10_000);
    o.node_timeout = Duration::from_secs(20);
    o.fencing = true;
    o
}

/// A client of `o`: the blocking one, or (`asy`) the async one on its own two-thread runtime.
fn client_with(o: Options, asy: bool) -> Client {
    testkit::review::either_client(o, asy)
}

/// A fair client `id` on `nodes` (see [`opts`]), connected and subscribed to its bell on
/// every master (a lock returns at a quorum, before a slower master's connection may have
/// subscribed: a stale place made by hand there would be skipped as a client gone).
fn fair_client(nodes: &[String], id: &str, lease: Duration, asy: bool) -> Client {
    let c = client_with(opts(nodes, true, id, lease), asy);
    warm(&*c);
    let bell = format!("{}{id}", redlock_mux::script::BELL_PREFIX);
    let subscribed = |a: &String| match redis(a, &["PUBSUB", "NUMSUB", &bell]) {
        Frame::Array(v) => matches!(v.get(1), Some(Frame::Integer(n)) if *n >= 1),
        _ => false,
    };
    // (The blocking client connects its slower masters only while it is driven.)
    wait_until(
        Duration::from_secs(10),
        "the bell subscribed everywhere",
        || {
            c.idle(Duration::from_millis(5));
            nodes.iter().all(subscribed)
        },
    );
    c
}

/// Connects `c` (and, fair, subscribes its bell on every master) with a lock of its own.
fn warm(c: &(dyn LockClient + Send + Sync)) {
    let l = c.lock(&resource("s17-warm"), TTL).expect("up");
    c.unlock(&l).expect("up");
}

/// Puts the ids `ids` at the head of `key`'s line on every master, in that order, as a place
/// left behind (a late refusal never answered, a give-up whose leave did not land) leaves it.
fn stale_places(addrs: &[String], key: &str, ids: &[&str]) {
    for a in addrs {
        for (i, id) in ids.iter().enumerate() {
            redis(a, &["ZADD", &line(key), &(i + 1).to_string(), id]);
        }
        redis(a, &["PEXPIRE", &line(key), "600000"]);
    }
}

/// The value of `key` on each master.
fn values(addrs: &[String], key: &str) -> Vec<Option<String>> {
    addrs.iter().map(|a| testkit::get(a, key)).collect()
}

/// Every script call a master has run so far (`EVALSHA`, `EVAL`, `FCALL`).
fn script_calls(addr: &str) -> u64 {
    calls(addr, "evalsha") + calls(addr, "eval") + calls(addr, "fcall")
}

/// Claim (docs, "What leaves the line": a waiter "paused or cut off when it is rung (or a live
/// client rung for a resource it no longer waits for ...) holds the reservation until it
/// lapses, and delays the others by one claim lease and a round trip"): the others include a
/// waiter that arrives while that reservation stands.
///
/// Three masters, claim lease 300 ms, TTL 60 s. C (live, idle) has a stale place at the head
/// of every line; H holds; H unlocks: the resource is reserved for C, and there is nobody
/// second to tell. Y asks for the lock at once: it must be granted within three leases.
///
/// Was a defect (4 runs of 4, Redis 7.0): Y was granted 8 claim leases after the unlock
/// (2.403 s to 2.405 s with a 300 ms lease), by its own timer. Y's enter is refused by the
/// reservation, and the wait script counts a reservation for another as its `PTTL` plus the
/// caller's ttl (60 s), capped at `FAIR_WAIT_LEASES`; the notice went to nobody (the line had
/// no second when the hand-off rang), and a waiter that became second later was never told.
/// Now the wait script tells the caller itself (`+ <resource>` on its own bell) when it
/// stands second behind a reservation for another. (The async client, checked the same way
/// against ac8aadf's scripts: 2.403 s.)
fn an_arrival_during_a_stale_heads_reservation_waits_about_one_claim_lease(asy: bool) {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let [cc, h, y] = ["c", "h", "y"].map(|id| fair_client(&addrs, id, lease, asy));
    let key = resource("s17-arrival");
    let held = h.lock(&key, TTL).expect("free");
    stale_places(&addrs, &key, &["c"]);
    let unlocked = Instant::now();
    h.unlock(&held).expect("released");
    let reserved = Some("redlock-mux:reserved:c".to_string());
    let now = values(&addrs, &key);
    // (Read within half a lease of the unlock; a machine too loaded for that has let the
    // reservation lapse, and the case is not made: said, not failed.)
    if unlocked.elapsed() < lease / 2 {
        assert_eq!(now, vec![reserved; 3], "reserved for C");
    } else {
        eprintln!("read {:?} after the unlock: {now:?}", unlocked.elapsed());
    }
    let l = y.lock_within(&key, TTL, Duration::from_secs(30));
    let waited = unlocked.elapsed();
    let l = l.expect("Y granted");
    y.unlock(&l).expect("released");
    assert!(
        waited < lease * 3,
        "Y granted {waited:?} after the unlock (claim lease {lease:?}, timer {:?})",
        lease * 8
    );
    drop(cc);
}

#[test]
fn an_arrival_during_a_stale_heads_reservation_waits_about_one_claim_lease_blocking() {
    an_arrival_during_a_stale_heads_reservation_waits_about_one_claim_lease(false);
}

#[test]
fn an_arrival_during_a_stale_heads_reservation_waits_about_one_claim_lease_async() {
    an_arrival_during_a_stale_heads_reservation_waits_about_one_claim_lease(true);
}

/// Claim (docs, as above: each waiter that holds a reservation it will never claim "delays the
/// others by one claim lease and a round trip"): two such waiters one behind the other cost
/// the third about two claim leases.
///
/// Three masters, claim lease 300 ms. C1 and C2 (live, idle) have stale places at the head of
/// every line, in that order; Y waits behind them; H unlocks. Y must be granted within four
/// leases.
///
/// Found (4 runs of 4, Redis 7.0): Y was granted 16 claim leases after the unlock (4.80 s to
/// 4.96 s with a 300 ms lease). The hand-off reserves for C1 and tells C2 (second), whose engine
/// has no waiter to wake; Y waits its timer (8 leases), then its claim's ring passes C1 by and
/// rings C2, reserving for it, and tells nobody (the ring tells no caller, `two[2] ~= me`); Y's
/// next wait counted that reservation plus its ttl: 8 leases more. Since the wait script tells
/// a caller second behind a reservation, that second part costs one lease: 9 leases in all
/// (6 runs of 6: 2.71 s to 2.86 s). The first 8 remained until session 19: the notice went
/// to whoever stood second, and a live client with a stale place woke nobody with it. Now
/// such a client's engine answers a notice for a line none of its waiters stands in (half a
/// lease after the lapse was due) with the leave script, which from the second place hands
/// the lapsed reservation on past C1: 0.47 s in session 19, both clients.
///
/// The stale clients are async (their driver reads the notice when it comes) or blocking and
/// busy with other work (a blocking client reads its sockets only while it is driven: one
/// idle for good reads no notice, and then the waiter behind waits its timer as before).
fn two_stale_heads_cost_the_waiter_behind_about_two_claim_leases(asy: bool) {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let [c1, c2] = ["c1", "c2"].map(|id| fair_client(&addrs, id, lease, asy));
    let [h, y] = ["h", "y"].map(|id| fair_client(&addrs, id, lease, false));
    let key = resource("s17-two-stale");
    let held = h.lock(&key, TTL).expect("free");
    stale_places(&addrs, &key, &["c1", "c2"]);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        if !asy {
            for (c, other) in [(&c1, "s17-busy-1"), (&c2, "s17-busy-2")] {
                let done = &done;
                s.spawn(move || {
                    let other = resource(other);
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let l = c.lock(&other, TTL).expect("its own work");
                        c.unlock(&l).expect("its own work");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                });
            }
        }
        let waiter = s.spawn(|| {
            let l = y.lock_within(&key, TTL, Duration::from_secs(30));
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(10), "Y third in every line", || {
            in_line(&addrs, &key, "y") == 3
        });
        let unlocked = Instant::now();
        h.unlock(&held).expect("released");
        let (at, l) = waiter.join().unwrap();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let l = l.expect("Y granted");
        y.unlock(&l).expect("released");
        let waited = at - unlocked;
        eprintln!("async {asy}: Y granted {waited:?} after the unlock");
        assert!(
            waited < lease * 4,
            "Y granted {waited:?} after the unlock (claim lease {lease:?})"
        );
    });
    drop((c1, c2));
}

#[test]
fn two_stale_heads_cost_the_waiter_behind_about_two_claim_leases_blocking() {
    two_stale_heads_cost_the_waiter_behind_about_two_claim_leases(false);
}

#[test]
fn two_stale_heads_cost_the_waiter_behind_about_two_claim_leases_async() {
    two_stale_heads_cost_the_waiter_behind_about_two_claim_leases(true);
}

/// Claim (docs: a head that never claims costs the others one claim lease; "A waiter that
/// gives up ... leaves the lines and passes on a reservation it holds"): the second in line
/// giving up before the lapse (its `lock_within` deadline) does not leave the third to its
/// timer.
///
/// Three masters, claim lease 300 ms. C (live, idle) has a stale place at the head; Y waits
/// second with a `lock_within` whose deadline falls 0.9 lease after the unlock; Z waits third
/// (60 s). H unlocks: the resource is reserved for C and Y is told; Y's deadline passes before
/// the lapse, and it leaves. Z must be granted within three leases of the unlock.
///
/// Was a defect (8 runs of 9, Redis 7.0; the ninth, run with the whole file, passed, probably
/// with Y gone before the unlock, which the test now checks): Z was granted at its own timer,
/// eight claim leases after it started to wait (2.07 s to 2.08 s after the unlock, 300 ms
/// lease): the notice went to Y only, and Y's leave passed on nothing (nothing was reserved
/// for it). Now a leave by the second in line behind a reservation tells the new second.
/// (The async client, checked against ac8aadf's scripts: 2.076 s.)
fn the_second_giving_up_before_the_lapse_does_not_leave_the_third_to_its_timer(asy: bool) {
    // A machine too busy to line Y and Z up before the planned unlock makes a run that shows
    // nothing: it is made again.
    let made = (0..5).any(|_| second_gives_up_before_the_lapse(asy));
    assert!(
        made,
        "Y and Z in line before the planned unlock in one of five runs"
    );
}

/// One run of the test above; `false` when Y and Z were not both in line by the planned
/// unlock.
fn second_gives_up_before_the_lapse(asy: bool) -> bool {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let [cc, h, y, z] = ["c", "h", "y", "z"].map(|id| fair_client(&addrs, id, lease, asy));
    let key = resource("s17-second-gives-up");
    let held = h.lock(&key, TTL).expect("free");
    stale_places(&addrs, &key, &["c"]);
    let made = std::thread::scope(|s| {
        let y_started = Instant::now();
        let yw = s.spawn(|| {
            let l = y.lock_within(&key, TTL, lease * 2);
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(10), "Y second in every line", || {
            in_line(&addrs, &key, "y") == 3
        });
        let zw = s.spawn(|| {
            let l = z.lock_within(&key, TTL, Duration::from_secs(30));
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(10), "Z third in every line", || {
            in_line(&addrs, &key, "z") == 3
        });
        let on_time = y_started.elapsed() < lease * 11 / 10;
        // Y's deadline 0.9 lease after the unlock, before the lapse (a lease and more).
        std::thread::sleep((lease * 11 / 10).saturating_sub(y_started.elapsed()));
        let unlocked = Instant::now();
        h.unlock(&held).expect("released");
        if !on_time {
            let _ = yw.join();
            if let (_, Ok(l)) = zw.join().unwrap() {
                let _ = z.unlock(&l);
            }
            return false;
        }
        let (y_at, y_got) = yw.join().unwrap();
        assert!(y_got.is_err(), "Y gave up: {y_got:?}");
        // Else Z stood second when the hand-off rang, and the case is not made.
        assert!(y_at > unlocked, "Y gave up before the unlock");
        let y_gave_up = y_at - unlocked;
        let (at, l) = zw.join().unwrap();
        let l = l.expect("Z granted");
        z.unlock(&l).expect("released");
        let waited = at - unlocked;
        eprintln!("Z granted {waited:?} after the unlock; Y gave up {y_gave_up:?} after it");
        assert!(
            waited < lease * 3,
            "Z granted {waited:?} after the unlock (claim lease {lease:?}, Z's timer {:?})",
            lease * 8
        );
        true
    });
    drop(cc);
    made
}

#[test]
fn the_second_giving_up_before_the_lapse_does_not_leave_the_third_to_its_timer_blocking() {
    the_second_giving_up_before_the_lapse_does_not_leave_the_third_to_its_timer(false);
}

#[test]
fn the_second_giving_up_before_the_lapse_does_not_leave_the_third_to_its_timer_async() {
    the_second_giving_up_before_the_lapse_does_not_leave_the_third_to_its_timer(true);
}

/// One run of the second's deadline around the lapse: C (live, idle) stale at the head, Y
/// second with a `lock_within` ending `deadline` claim leases after H's unlock, Z third (30 s).
/// Y, if granted, holds half a lease. Returns (Y's outcome, how long after Y was done Z was
/// granted, the tenures' violations); `None` when Y and Z were not both in line by the planned
/// unlock (a busy machine), a run to make again.
fn deadline_around_the_lapse(asy: bool, deadline: f64) -> Option<(bool, Duration, Vec<String>)> {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let [cc, h, y, z] = ["c", "h", "y", "z"].map(|id| fair_client(&addrs, id, lease, asy));
    let key = resource("s17-deadline");
    let held = h.lock(&key, TTL).expect("free");
    stale_places(&addrs, &key, &["c"]);
    let tenures = Mutex::new(Vec::new());
    let out = std::thread::scope(|s| {
        let y_started = Instant::now();
        // Y's deadline counted from the unlock, which comes at 2 leases after Y started.
        let yw = s.spawn(|| {
            let l = y.lock_within(&key, TTL, lease.mul_f64(2.0 + deadline));
            let at = Instant::now();
            let got = l.is_ok();
            if let Ok(l) = l {
                std::thread::sleep(lease / 2);
                let unlocking = Instant::now();
                y.unlock(&l).expect("released");
                tenures
                    .lock()
                    .unwrap()
                    .push(Tenure::of("y", &l, at).end(unlocking, &l));
            }
            (Instant::now(), got)
        });
        wait_until(Duration::from_secs(10), "Y second in every line", || {
            in_line(&addrs, &key, "y") == 3
        });
        let zw = s.spawn(|| {
            let l = z.lock_within(&key, TTL, Duration::from_secs(30));
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(10), "Z third in every line", || {
            in_line(&addrs, &key, "z") == 3
        });
        // The unlock is planned two leases after Y started: a machine too busy to line Y and
        // Z up by then makes a run that sweeps nothing (the caller runs it again).
        let on_time = y_started.elapsed() < lease * 2;
        std::thread::sleep((lease * 2).saturating_sub(y_started.elapsed()));
        h.unlock(&held).expect("released");
        let (y_done, y_got) = yw.join().unwrap();
        let (at, l) = zw.join().unwrap();
        let l = l.expect("Z granted");
        let unlocking = Instant::now();
        z.unlock(&l).expect("released");
        tenures
            .lock()
            .unwrap()
            .push(Tenure::of("z", &l, at).end(unlocking, &l));
        (y_got, at.saturating_duration_since(y_done), on_time)
    });
    let emptied = Instant::now();
    while !line_lengths(&addrs, &key).iter().all(|&n| n == 0) {
        let lines: Vec<Frame> = addrs
            .iter()
            .map(|a| redis(a, &["ZRANGE", &line(&key), "0", "-1", "WITHSCORES"]))
            .collect();
        assert!(
            emptied.elapsed() < Duration::from_secs(5),
            "timed out after 5s waiting for the lines empty: {lines:?}, values {:?}",
            values(&addrs, &key)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let free = values(&addrs, &key);
    assert!(free.iter().all(Option::is_none), "{free:?}");
    drop(cc);
    let v = violations(tenures.into_inner().unwrap());
    out.2.then_some((out.0, out.1, v))
}

/// Claim (docs: "A wait reads the line again once at most, and never past the deadline its
/// first read set"; "A waiter that gives up ... passes on a reservation it holds"): a
/// `lock_within` of the second in line whose deadline falls around the lapse either gets the
/// lock (its look at the line reserved it) or gives up leaving nothing reserved for itself;
/// either way the third is granted within about a claim lease of the second being done (told
/// by the second's leave, or rung by its release), never while the second holds, and the
/// lines end empty. Deadlines swept from before the lapse to after; both clients.
///
/// Found (with e7c97c2's leave, which told the new second only behind a standing
/// reservation; 1 run of 2 of the file, then 1 of 8 runs of the async test alone): with Y's
/// deadline right at the lapse, Y's claim was refused by the reservation, and by the time its
/// leave ran the reservation had lapsed on every master: the leave told nobody, the lines
/// stood `[c, z]` on every master with the resource free, and Z was granted at its timer,
/// 1.50 s (5 leases) after Y gave up. Now a leaver that stood second hands a free resource on
/// with the ring (past the lapsed head): 20 runs since, Z granted within 1.3 ms whenever Y
/// gave up at the lapse.
fn the_seconds_deadline_around_the_lapse_costs_the_third_one_lease(asy: bool) {
    let lease = Duration::from_millis(300);
    let mut outcomes = Vec::new();
    for deadline in [0.9, 1.0, 1.01, 1.02, 1.05, 1.2, 1.5] {
        let (y_got, after, v) = (0..5)
            .find_map(|_| deadline_around_the_lapse(asy, deadline))
            .expect("Y and Z in line within two leases of Y's start in one of five runs");
        eprintln!("deadline {deadline}: Y granted {y_got}, Z {after:?} after Y was done");
        assert!(v.is_empty(), "deadline {deadline}: {v:?}");
        assert!(
            after < lease * 2,
            "deadline {deadline}: Z granted {after:?} after Y was done (Y granted: {y_got})"
        );
        outcomes.push(y_got);
    }
    // Both cases made: Y gave up before the lapse, and Y got it at the lapse.
    assert!(
        outcomes.contains(&true) && outcomes.contains(&false),
        "{outcomes:?}"
    );
}

#[test]
fn the_seconds_deadline_around_the_lapse_costs_the_third_one_lease_blocking() {
    the_seconds_deadline_around_the_lapse_costs_the_third_one_lease(false);
}

#[test]
fn the_seconds_deadline_around_the_lapse_costs_the_third_one_lease_async() {
    the_seconds_deadline_around_the_lapse_costs_the_third_one_lease(true);
}

/// Claim (docs, "What leaves the line": the ring "tells the second in line"; and "a release
/// while another waiter of the same client waits keeps the client's place"): a release by one
/// thread of a client whose other thread waits second behind a stale head costs that waiter
/// about one claim lease. The release's own ring rings the stale head and tells nobody (the
/// second is the releasing client itself, which the ring never tells).
///
/// Three masters, claim lease 300 ms. Client Y: T1 holds; C (live, idle) has a stale place at
/// the head of every line; T2 (Y's other thread) waits behind C. T1 unlocks: its hand-off keeps
/// Y's place, rings C and reserves for it. T2 must be granted within three leases.
///
/// Was a defect at ac8aadf (its scripts put back in this tree, both clients, 1 run each):
/// T2 was granted 8 leases after the unlock (2.404 s), at its timer: woken by its own
/// client's release, its claim found the resource reserved for C, and its next wait counted
/// that reservation plus its ttl. With the wait script telling a caller second behind a
/// reservation, 0.31 s (one lease).
fn a_release_behind_a_stale_head_costs_the_clients_other_waiter_one_lease(asy: bool) {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let [cc, y] = ["c", "y"].map(|id| fair_client(&addrs, id, lease, asy));
    let key = resource("s17-own-release");
    let held = y.lock(&key, TTL).expect("free");
    stale_places(&addrs, &key, &["c"]);
    std::thread::scope(|s| {
        let t2 = s.spawn(|| {
            let l = y.lock_within(&key, TTL, Duration::from_secs(30));
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(10), "Y behind C in every line", || {
            in_line(&addrs, &key, "y") == 3
        });
        // T2's first read is in (it stands in every line): its timer is T1's ttl, capped.
        std::thread::sleep(lease / 3);
        let unlocked = Instant::now();
        y.unlock(&held).expect("released");
        let (at, l) = t2.join().unwrap();
        let l = l.expect("T2 granted");
        y.unlock(&l).expect("released");
        let waited = at - unlocked;
        eprintln!("T2 granted {waited:?} after T1's unlock");
        assert!(
            waited < lease * 3,
            "T2 granted {waited:?} after T1's unlock (claim lease {lease:?}, timer {:?})",
            lease * 8
        );
    });
    wait_until(Duration::from_secs(5), "the lines empty", || {
        line_lengths(&addrs, &key).iter().all(|&n| n == 0)
    });
    drop(cc);
}

#[test]
fn a_release_behind_a_stale_head_costs_the_clients_other_waiter_one_lease_blocking() {
    a_release_behind_a_stale_head_costs_the_clients_other_waiter_one_lease(false);
}

#[test]
fn a_release_behind_a_stale_head_costs_the_clients_other_waiter_one_lease_async() {
    a_release_behind_a_stale_head_costs_the_clients_other_waiter_one_lease(true);
}

/// Claim (docs: "when the head holds the lock longer than the claim lease, one wait round of
/// the second waiter per hand-off"; safety: "The line decides who tries, never who holds"): a
/// head that claims and holds for several claim leases keeps its lock (it extends and unlocks
/// it), the second in line reads the line once during that tenure and never more, is granted
/// about a round trip after the head's unlock (its bell), and the lines end empty. Both
/// clients.
fn a_head_holding_past_the_lease_keeps_it_and_the_second_looks_once(asy: bool) {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let [h, x, y] = ["h", "x", "y"].map(|id| fair_client(&addrs, id, lease, asy));
    let key = resource("s17-long-head");
    let held = h.lock(&key, TTL).expect("free");
    let x_granted = Mutex::new(None);
    let x_unlocking = Mutex::new(None);
    let in_tenure = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let xw = s.spawn(|| {
            let mut l = x
                .lock_within(&key, TTL, Duration::from_secs(30))
                .expect("X");
            let at = Instant::now();
            *x_granted.lock().unwrap() = Some(at);
            let before: Vec<u64> = addrs.iter().map(|a| script_calls(a)).collect();
            // Six leases, one extension half way: the lapse the second was told of comes
            // and goes meanwhile.
            std::thread::sleep(lease * 3);
            x.extend(&mut l, TTL).expect("X still holds it");
            std::thread::sleep(lease * 3);
            let after: Vec<u64> = addrs.iter().map(|a| script_calls(a)).collect();
            // X's own extension is one script call per master.
            *in_tenure.lock().unwrap() =
                before.iter().zip(&after).map(|(b, a)| a - b - 1).collect();
            let unlocking = Instant::now();
            *x_unlocking.lock().unwrap() = Some(unlocking);
            x.unlock(&l).expect("X released it");
            Tenure::of("x", &l, at).end(unlocking, &l)
        });
        wait_until(Duration::from_secs(10), "X in every line", || {
            in_line(&addrs, &key, "x") == 3
        });
        let yw = s.spawn(|| {
            let l = y.lock_within(&key, TTL, Duration::from_secs(30));
            (Instant::now(), l)
        });
        wait_until(Duration::from_secs(10), "Y in every line", || {
            in_line(&addrs, &key, "y") == 3
        });
        h.unlock(&held).expect("released");
        let tx = xw.join().unwrap();
        let (at, l) = yw.join().unwrap();
        let l = l.expect("Y granted");
        let ty = Tenure::of("y", &l, at);
        y.unlock(&l).expect("released");
        let unlocking = x_unlocking.lock().unwrap().expect("X unlocked");
        let granted = x_granted.lock().unwrap().expect("X granted");
        assert!(at > unlocking, "Y granted before X's unlock");
        assert!(
            at - unlocking < lease,
            "Y granted {:?} after X's unlock (claim lease {lease:?})",
            at - unlocking
        );
        assert!(granted < unlocking);
        let ex = in_tenure.lock().unwrap().clone();
        assert!(
            ex.iter().all(|&n| n <= 1),
            "Y's script calls per master during X's six-lease tenure: {ex:?}"
        );
        let v = violations(vec![tx, ty]);
        assert!(v.is_empty(), "{v:?}");
    });
    wait_until(Duration::from_secs(5), "the lines empty", || {
        line_lengths(&addrs, &key).iter().all(|&n| n == 0)
    });
}

#[test]
fn a_head_holding_past_the_lease_keeps_it_and_the_second_looks_once_blocking() {
    a_head_holding_past_the_lease_keeps_it_and_the_second_looks_once(false);
}

#[test]
fn a_head_holding_past_the_lease_keeps_it_and_the_second_looks_once_async() {
    a_head_holding_past_the_lease_keeps_it_and_the_second_looks_once(true);
}

/// One run of the slow head's race. Three masters; X, the head, reaches masters 1 and 2
/// through proxies, Y (second) and H (the holder) reach every master directly. The proxies
/// go silent (blackhole) just before H unlocks: X is rung by master 0 only, wakes half a
/// claim lease later, and its claim lands on master 0 at once but on masters 1 and 2 only
/// when their proxies heal, at `heal[0]` and `heal[1]` claim leases after the unlock: around
/// the lapse Y was told of (a lease and the drift allowance after the unlock), one before and
/// one after, or both on the same side. Y's look at the line at the lapse passes X by on
/// whichever master its claim has not reached yet. Each holder holds its lock 1.5 leases
/// (past the claim lease). Returns the tenures' violations, and who was granted.
fn slow_head_race(asy: bool, heal: [f64; 2]) -> (Vec<String>, Vec<String>) {
    let c = cluster(3);
    let addrs = c.addrs();
    let proxies: Vec<Proxy> = (1..3)
        .map(|i| Proxy::start(c.servers()[i].addr()))
        .collect();
    let via = vec![addrs[0].clone(), proxies[0].addr(), proxies[1].addr()];
    let lease = Duration::from_millis(300);
    let h = fair_client(&addrs, "h", lease, asy);
    let x = fair_client(&via, "x", lease, asy);
    let y = fair_client(&addrs, "y", lease, asy);
    let key = resource("s17-slow-head");
    let ttl = Duration::from_secs(5);
    let held = h.lock(&key, ttl).expect("free");
    let held_from = Instant::now();
    let tenures = Mutex::new(Vec::new());
    let granted = Mutex::new(Vec::new());
    let run =
        |who: &'static str, cl: &Client| match cl.lock_within(&key, ttl, Duration::from_secs(20)) {
            Ok(l) => {
                let at = Instant::now();
                std::thread::sleep(lease * 3 / 2);
                let unlocking = Instant::now();
                let _ = cl.unlock(&l);
                tenures
                    .lock()
                    .unwrap()
                    .push(Tenure::of(who, &l, at).end(unlocking, &l));
                granted.lock().unwrap().push(who.to_string());
            }
            Err(e) => granted.lock().unwrap().push(format!("{who}: {e}")),
        };
    std::thread::scope(|s| {
        let xw = s.spawn(|| run("x", &x));
        wait_until(Duration::from_secs(10), "X in every line", || {
            in_line(&addrs, &key, "x") == 3
        });
        let yw = s.spawn(|| run("y", &y));
        wait_until(Duration::from_secs(10), "Y in every line", || {
            in_line(&addrs, &key, "y") == 3
        });
        for p in &proxies {
            p.set(Fault::Blackhole);
        }
        let unlocking = Instant::now();
        h.unlock(&held).expect("released");
        tenures
            .lock()
            .unwrap()
            .push(Tenure::of("h", &held, held_from).end(unlocking, &held));
        let mut order: Vec<(f64, usize)> = heal.iter().copied().zip(0..2).collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (at, i) in order {
            let when = lease.mul_f64(at);
            std::thread::sleep(when.saturating_sub(unlocking.elapsed()));
            proxies[i].set(Fault::Pass);
        }
        xw.join().unwrap();
        yw.join().unwrap();
    });
    let v = violations(tenures.into_inner().unwrap());
    wait_until(Duration::from_secs(10), "the lines empty", || {
        line_lengths(&addrs, &key).iter().all(|&n| n == 0)
    });
    (v, granted.into_inner().unwrap())
}

/// Claim (docs, "Safety does not change": "a waiter holds the lock only when a quorum of
/// masters hold its own token, set by its own claim, within validity"): a head slow rather
/// than dead, whose claim lands around the lapse (on some masters before the second's look at
/// the line, on others after), and the second, who passes it by where it has not claimed yet,
/// are never both holders, their fencing tokens increase, both are granted in the end (30 s),
/// and the lines end empty. Heal times swept around the lapse; both clients.
fn a_slow_heads_claim_around_the_lapse_never_makes_two_holders(asy: bool) {
    let sweeps = [
        [0.8, 1.3],
        [0.95, 1.1],
        [1.0, 1.04],
        [1.04, 1.0],
        [1.02, 1.02],
        [1.1, 1.6],
        [1.3, 2.5],
    ];
    let mut firsts = Vec::new();
    for heal in sweeps {
        let (v, granted) = slow_head_race(asy, heal);
        eprintln!("heal {heal:?}: granted in order {granted:?}");
        assert!(v.is_empty(), "heal {heal:?}: {v:?} (granted {granted:?})");
        assert!(
            granted.iter().all(|g| g == "x" || g == "y") && granted.len() == 2,
            "heal {heal:?}: {granted:?}"
        );
        firsts.push(granted[0].clone());
    }
    // The sweep made both cases: the slow head's claim in time, and passed by at the lapse.
    assert!(
        firsts.iter().any(|f| f == "x") && firsts.iter().any(|f| f == "y"),
        "first granted, by heal time: {firsts:?}"
    );
}

#[test]
fn a_slow_heads_claim_around_the_lapse_never_makes_two_holders_blocking() {
    a_slow_heads_claim_around_the_lapse_never_makes_two_holders(false);
}

#[test]
fn a_slow_heads_claim_around_the_lapse_never_makes_two_holders_async() {
    a_slow_heads_claim_around_the_lapse_never_makes_two_holders(true);
}

/// Claim (docs, "Safety does not change"; review s11's mix, now with the notices): fair
/// clients, two of which share one client id (two processes configured alike: each is told
/// the other's notices and reservations), an unfair client, and a fair client whose path to
/// one master blackholes and heals at random (its bells and notices late or lost), with
/// master 2 paused by `SIGSTOP` for a second in the middle, never hold together, and their
/// fencing tokens increase. Holds of up to two claim leases (past the lease: the lapse comes
/// during a tenure), short lock waits (deadlines that expire around the lapse). Both clients.
fn a_mix_with_notices_never_makes_two_holders(asy: bool) {
    let mut c = cluster(3);
    let addrs = c.addrs();
    let proxy = Proxy::start(c.servers()[1].addr());
    let mut via = addrs.clone();
    via[1] = proxy.addr();
    let lease = Duration::from_millis(100);
    let clients: Vec<(&str, Client)> = vec![
        ("a", fair_client(&addrs, "a", lease, asy)),
        ("b1", fair_client(&addrs, "b", lease, asy)),
        ("b2", fair_client(&addrs, "b", lease, asy)),
        ("u", {
            let mut o = opts(&addrs, false, "u", lease);
            o.node_timeout = Duration::from_secs(2);
            client_with(o, asy)
        }),
        ("p", fair_client(&via, "p", lease, asy)),
        ("a2", fair_client(&addrs, "a", lease, !asy)),
    ];
    let key = resource("s17-mix");
    let ttl = Duration::from_millis(800);
    let tenures = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let grants = Mutex::new(Vec::new());
    let started = Instant::now();
    let run_for = Duration::from_secs(6);
    std::thread::scope(|s| {
        for (k, (who, cl)) in clients.iter().enumerate() {
            let (tenures, stop, grants, key) = (&tenures, &stop, &grants, &key);
            s.spawn(move || {
                let mut n = 0u32;
                for round in 0..500u32 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let max_wait = lease.mul_f64(0.5 + f64::from((round * 7 + k as u32) % 5));
                    if let Ok(l) = cl.lock_within(key, ttl, max_wait) {
                        let at = Instant::now();
                        let hold = lease.mul_f64(f64::from((round * 3 + k as u32) % 5) / 2.0);
                        std::thread::sleep(hold);
                        let unlocking = Instant::now();
                        let _ = cl.unlock(&l);
                        tenures
                            .lock()
                            .unwrap()
                            .push(Tenure::of(who, &l, at).end(unlocking, &l));
                        n += 1;
                    }
                }
                grants.lock().unwrap().push((who.to_string(), n));
            });
        }
        // The proxied client's path to master 1: silent and back, at random-ish intervals.
        let mut faulted = false;
        let mut paused = false;
        for i in 0..400u32 {
            if started.elapsed() >= run_for {
                break;
            }
            if started.elapsed() >= run_for / 3 && !paused {
                paused = true;
                c.server(2).pause().expect("SIGSTOP");
                std::thread::sleep(Duration::from_secs(1));
                c.server(2).resume().expect("SIGCONT");
            }
            faulted = !faulted && i % 3 != 0;
            proxy.set(if faulted {
                Fault::Blackhole
            } else {
                Fault::Pass
            });
            std::thread::sleep(lease.mul_f64(0.3 + f64::from(i % 7) * 0.2));
        }
        proxy.set(Fault::Pass);
        stop.store(true, Ordering::SeqCst);
    });
    let notices: u64 = clients
        .iter()
        .flat_map(|(_, cl)| cl.stats().nodes.into_iter().map(|n| n.lapse_notices))
        .sum();
    let t = tenures.into_inner().unwrap();
    let total = t.len();
    eprintln!("{total} tenures, {notices} lapse notices");
    let v = violations(t);
    assert!(v.is_empty(), "{} violations: {v:?}", v.len());
    let g = grants.into_inner().unwrap();
    assert!(total >= 20, "only {total} tenures: {g:?}");
    assert!(notices > 0, "no hand-off told a second in line");
}

#[test]
fn a_mix_with_notices_never_makes_two_holders_blocking() {
    a_mix_with_notices_never_makes_two_holders(false);
}

#[test]
fn a_mix_with_notices_never_makes_two_holders_async() {
    a_mix_with_notices_never_makes_two_holders(true);
}

/// Claim (docs, fair mode: waiters are served in the order they joined; the notice only ever
/// makes the second look at the line): without faults, no waiter is passed by a later
/// arrival, even when holders hold past the claim lease (so that every hand-off's notice
/// comes due during a tenure), and the lines end empty. Five clients (blocking and async
/// alternately), each joining the line only once the one before stands in it.
#[test]
fn without_faults_nobody_is_passed_when_holders_hold_past_the_lease() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(200);
    let h = fair_client(&addrs, "h", lease, false);
    let ids = ["w1", "w2", "w3", "w4", "w5"];
    let ws: Vec<Client> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| fair_client(&addrs, id, lease, i % 2 == 1))
        .collect();
    let key = resource("s17-order");
    let held = h.lock(&key, TTL).expect("free");
    let order = Mutex::new(Vec::new());
    let tenures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (i, w) in ws.iter().enumerate() {
            let (order, tenures, key) = (&order, &tenures, &key);
            s.spawn(move || {
                let l = w
                    .lock_within(key, TTL, Duration::from_secs(30))
                    .expect("granted");
                let at = Instant::now();
                order.lock().unwrap().push(ids[i]);
                // Past the lease for all but one.
                std::thread::sleep(lease.mul_f64(if i == 2 { 0.2 } else { 1.5 }));
                let unlocking = Instant::now();
                w.unlock(&l).expect("released");
                tenures
                    .lock()
                    .unwrap()
                    .push(Tenure::of(ids[i], &l, at).end(unlocking, &l));
            });
            wait_until(Duration::from_secs(10), "the waiter in every line", || {
                in_line(&addrs, key, ids[i]) == 3
            });
        }
        h.unlock(&held).expect("released");
    });
    assert_eq!(*order.lock().unwrap(), ids.to_vec());
    let v = violations(tenures.into_inner().unwrap());
    assert!(v.is_empty(), "{v:?}");
    wait_until(Duration::from_secs(5), "the lines empty", || {
        line_lengths(&addrs, &key).iter().all(|&n| n == 0)
    });
    let free: Vec<Option<String>> = values(&addrs, &key);
    assert!(free.iter().all(Option::is_none), "{free:?}");
}

/// Claim (docs: fair mode serves waiters in the order they joined; a waiter told of a
/// reservation ahead of it only reads the line again): without faults, waiters that arrive
/// while each hand-off's reservation stands (so that each is told by its own wait, and looks
/// again a lease later while the head holds past the lease) are served in arrival order, and
/// the lines end empty. Both clients, alternately.
#[test]
fn arrivals_during_each_reservation_are_served_in_order() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(200);
    let ids = ["v1", "v2", "v3", "v4", "v5"];
    let ws: Vec<Client> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| fair_client(&addrs, id, lease, i % 2 == 0))
        .collect();
    let h = fair_client(&addrs, "h", lease, false);
    let key = resource("s17-arrivals");
    let held = h.lock(&key, TTL).expect("free");
    let order = Mutex::new(Vec::new());
    let arrived = Mutex::new(Vec::new());
    let tenures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        // The first waits in line before the unlock; each next one arrives just after the
        // one before it is rung (the resource reserved for it), before it claims or while
        // it holds.
        for (i, w) in ws.iter().enumerate() {
            let (order, tenures, arrived, key) = (&order, &tenures, &arrived, &key);
            if i == 1 {
                h.unlock(&held).expect("released");
            }
            s.spawn(move || {
                let l = w
                    .lock_within(key, TTL, Duration::from_secs(30))
                    .expect("granted");
                let at = Instant::now();
                order.lock().unwrap().push(ids[i]);
                std::thread::sleep(lease * 3 / 2);
                let unlocking = Instant::now();
                w.unlock(&l).expect("released");
                tenures
                    .lock()
                    .unwrap()
                    .push(Tenure::of(ids[i], &l, at).end(unlocking, &l));
            });
            wait_until(Duration::from_secs(10), "the waiter in every line", || {
                in_line(&addrs, key, ids[i]) == 3 || order.lock().unwrap().contains(&ids[i])
            });
            arrived.lock().unwrap().push(ids[i]);
            if i >= 1 {
                // The next arrives once this one is rung or granted (a hand-off reserved for
                // it, or it holds).
                wait_until(Duration::from_secs(10), "the waiter rung", || {
                    let rung = format!("{}{}", redlock_mux::script::RESERVED_PREFIX, ids[i]);
                    values(&addrs, key)
                        .iter()
                        .any(|v| v.as_deref() == Some(rung.as_str()))
                        || order.lock().unwrap().contains(&ids[i])
                });
            }
        }
    });
    assert_eq!(*order.lock().unwrap(), *arrived.lock().unwrap());
    let v = violations(tenures.into_inner().unwrap());
    assert!(v.is_empty(), "{v:?}");
    wait_until(Duration::from_secs(5), "the lines empty", || {
        line_lengths(&addrs, &key).iter().all(|&n| n == 0)
    });
}
