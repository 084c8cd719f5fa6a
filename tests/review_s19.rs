//! A hostile review, against real masters, of b950a49 and 205ffb8 (fair mode, docs/redlock.md
//! "Waiting in line", "What leaves the line", the table of what order survives which faults).
//!
//! b950a49: a client's engine that is told it stands second behind a reservation (`+ <r>`)
//! in a line where none of its waiters stood when the notice came nor stands when it is due
//! (a claim lease and the drift margin later) sends the leave script for that resource by
//! itself (core/src/engine/lapse.rs `fire_due_lapses`); the async driver writes what
//! `handle_timeout` queued in the same pass. Attacked: whether that leave takes a place a live
//! waiter needs (an idle process sharing the id; a waiter whose claim waits for a blackholed
//! master, so that it stands in no watch at either instant), whether it helps two holders or
//! a failing release (shared ids, pauses, a reset path, sets), and whether the same-pass write
//! reaches a master whose idle connection was reset meanwhile.
//!
//! Found (each failing every run on b950a49 and on 04f88a2, and passing every run on
//! 205ffb8): an idle async process sharing a live waiter's id takes that waiter's place at a
//! hand-off where it stands second (`an_idle_twin_does_not_take_a_live_waiters_place`, kept
//! ignored as a documented limit of shared ids); a live waiter whose claim is out, waiting for
//! a blackholed master, when a notice comes and when it is due loses its place to its own
//! engine's leave (`a_waiter_in_a_slow_claim_keeps_its_place`: fixed, a waiter with a round
//! in flight on the resource now stands in the line for the engine). Both cost order (a later
//! waiter served first), never safety: the leave deletes nothing but the client's place and a
//! reservation of its own.
//!
//! Found, older than both changes (it fails on 205ffb8 too): the cause of session 18's
//! intermittent "release finds its token gone from 2 of 3 masters": a release rings the next
//! waiter with its token's tag also from masters where its token was not (absent, or a
//! reservation for its own id), that waiter's claim counts those bells as a quorum's and takes
//! the key the release has not reached yet, and the release, overtaken there, reports `NotHeld`
//! for a lock held until the call (`a_release_overtaken_by_its_own_hand_off_succeeds`). Found
//! by the maintainers at the same time and fixed on main by 04f88a2 (the test passes there).
//!
//! Held: the controls of the first two; no overlap and increasing fencing tokens with shared
//! ids, pauses, a reset path and a set; an idle async client's stale place leaves every line
//! about a lease after the notice (scripts and functions, and across a reset connection); a
//! client of four threads served once per trip while one-threaded clients wait.
//!
//! 205ffb8: a client's waiters share one place, the place is served once, so a client gets
//! one turn per trip through the line whatever its number of threads. Attacked: a client with
//! many threads against clients with one, counting the many-threaded client's grants while
//! each one-threaded waiter waits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::{Options, Scripts};
use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Error, Lock, Redlock};
use testkit::proxy::{Fault, Proxy};
use testkit::review::{in_line, options, violations, Tenure};
use testkit::{cluster, redis, resource, wait_until, AsyncClient, LockClient};

/// A client under review, either kind.
enum Client {
    Blocking(Redlock),
    Async(AsyncClient),
}

impl Client {
    fn lc(&self) -> &(dyn LockClient + Send + Sync) {
        match self {
            Client::Blocking(c) => c,
            Client::Async(c) => c,
        }
    }

    fn lock_within(&self, r: &str, ttl: Duration, max: Duration) -> Result<Lock, Error> {
        self.lc().lock_within(r, ttl, max)
    }
}

/// Fenced fair options of client `id` on `nodes`, claim lease `lease`, node timeout `nt`.
fn opts(nodes: &[String], id: &str, lease: Duration, nt: Duration) -> Options {
    let mut o = options(nodes, true, id, lease, 10_000);
    o.fencing = true;
    o.node_timeout = nt;
    o
}

/// A client of `o`: blocking, or (`asy`) async on its own two-thread runtime (whose driver
/// runs while the test thread does something else); connected, and subscribed to its bell on
/// every master of `direct` (read without proxies).
fn client_of(o: Options, asy: bool, direct: &[String]) -> Client {
    let id = o.client_id.clone();
    let cfg = o.validate().expect("valid options");
    let c = if asy {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt
            .block_on(async { AsyncRedlock::with_config(cfg) })
            .expect("a client");
        Client::Async(AsyncClient { rt, client })
    } else {
        Client::Blocking(Redlock::with_config(cfg).expect("a client"))
    };
    let l = c.lc().lock(&resource("s19-warm"), TTL).expect("up");
    c.lc().unlock(&l).expect("up");
    let bell = format!("{}{id}", redlock_mux::script::BELL_PREFIX);
    let subscribed = |a: &String| match redis(a, &["PUBSUB", "NUMSUB", &bell]) {
        Frame::Array(v) => matches!(v.get(1), Some(Frame::Integer(n)) if *n >= 1),
        _ => false,
    };
    wait_until(
        Duration::from_secs(10),
        "the bell subscribed everywhere",
        || {
            c.lc().idle(Duration::from_millis(5));
            direct.iter().all(subscribed)
        },
    );
    c
}

fn fair(nodes: &[String], id: &str, lease: Duration, asy: bool) -> Client {
    client_of(opts(nodes, id, lease, Duration::from_secs(2)), asy, nodes)
}

const TTL: Duration = Duration::from_secs(10);

/// Who was granted, in order, and when.
#[derive(Default)]
struct Order(Mutex<Vec<(String, Instant)>>);

impl Order {
    fn push(&self, who: &str) {
        self.0
            .lock()
            .unwrap()
            .push((who.to_string(), Instant::now()));
    }

    /// The grants, in order.
    fn who(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|o| !o.0.ends_with("-out"))
            .map(|o| o.0.clone())
            .collect()
    }

    /// Whether `what` was recorded.
    fn has(&self, what: &str) -> bool {
        self.0.lock().unwrap().iter().any(|o| o.0 == what)
    }
}

/// The waiter `who` of client `c`: waits for `r` (at most `max`), records its grant, holds
/// `hold`, releases (a release that fails within validity is a failure of the test).
fn waiter(c: &Client, who: &str, r: &str, hold: Duration, max: Duration, order: &Order) {
    let l = c
        .lock_within(r, TTL, max)
        .unwrap_or_else(|e| panic!("{who}: {e}"));
    order.push(who);
    thread::sleep(hold);
    // (Marked before the release goes out: a watcher stops judging the line then.)
    order.push(&format!("{who}-out"));
    if let Err(e) = c.lc().unlock(&l) {
        panic!(
            "{who}: release failed {:?} before validity ended: {e}",
            l.valid_until().saturating_duration_since(Instant::now())
        );
    }
}

/// The schedule of the shared-id tests: `g` holds `r`; `h`, then `p` (id `dup`), then `x`
/// wait in its line on every master; with `twin`, an async client with `p`'s id stays idle
/// (it never locks: a process sharing the id, say a second replica of one service). `g`
/// releases: `h` is rung, and `dup` (second) told. `h` holds six claim leases. Answers the
/// order of the grants, the fewest masters that had `dup` in the line while `p` waited behind
/// `h`, and how long after `x`'s release `p` was granted, if it came after it.
fn shared_id_schedule(twin: bool) -> (Vec<String>, usize, Option<Duration>) {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let r = resource("twin");
    let r = r.as_str();
    let g = fair(&nodes, "g", lease, false);
    let h = fair(&nodes, "h", lease, false);
    let p = fair(&nodes, "dup", lease, false);
    let x = fair(&nodes, "x", lease, false);
    let q = twin.then(|| fair(&nodes, "dup", lease, true));
    let lg = g.lc().lock(r, TTL).expect("g");
    let order = Order::default();
    let max = Duration::from_secs(20);
    let mut fewest = 3;
    thread::scope(|s| {
        let order = &order;
        let (h, p, x) = (&h, &p, &x);
        let hold = lease * 6;
        s.spawn(move || waiter(h, "h", r, hold, max, order));
        wait_until(Duration::from_secs(5), "h in line", || {
            in_line(&nodes, r, "h") == 3
        });
        s.spawn(move || waiter(p, "p", r, Duration::ZERO, max, order));
        wait_until(Duration::from_secs(5), "dup in line", || {
            in_line(&nodes, r, "dup") == 3
        });
        s.spawn(move || waiter(x, "x", r, Duration::ZERO, max, order));
        wait_until(Duration::from_secs(5), "x in line", || {
            in_line(&nodes, r, "x") == 3
        });
        g.lc().unlock(&lg).expect("g's release");
        wait_until(Duration::from_secs(5), "h granted", || {
            !order.who().is_empty()
        });
        // While h holds (six leases), p stands second and waits: its place must stay.
        let until = Instant::now() + lease * 4;
        while Instant::now() < until && !order.has("h-out") {
            fewest = fewest.min(in_line(&nodes, r, "dup"));
            thread::sleep(Duration::from_millis(10));
        }
    });
    drop(q);
    let rec = order.0.lock().unwrap().clone();
    let at = |w: &str| rec.iter().find(|o| o.0 == w).map(|o| o.1);
    let p_after_x = match (at("x-out"), at("p")) {
        (Some(x), Some(p)) if p > x => Some(p - x),
        _ => None,
    };
    (order.who(), fewest, p_after_x)
}

/// Claim (docs, "Waiting in line": a client's waiters share one place; "What leaves the
/// line": the engine's leave answers a notice for a line "in which none of its waiters
/// stood"; the table: a process sharing an id loses the place to "either one's release or
/// leave"). A process that shares `p`'s id but never locks anything runs no release and no
/// leave of its own: `p`, second behind `h`, must keep its place and be served right after
/// `h`, before `x`, which joined after it.
///
/// Measured: on b950a49, 8 of 8 runs fail, and on 04f88a2 (main after 939ba83) 3 of 3 (`p`
/// granted 396-401 ms after `x`'s release): the idle twin, an async client, reads the `+ r`
/// notice meant for `p` (the bell channel is the id's), finds none of its own waiters in the
/// line, and a claim lease later sends the leave: `dup` is gone from all 3 masters' lines
/// while `p` waits, and `x` is served before `p` (order h, x, p). On 205ffb8 (before the
/// change) the same file passes 3 of 3 runs (order h, p, x, `dup` in 3 lines throughout): an
/// idle client did nothing with a notice. `p`, out of the line with nobody to ring it, is
/// granted 394-396 ms (two leases) after `x`'s release (3 runs; 391-399 ms in 3 more with the
/// twin's paths 100 ms slower). Every hand-off where `p` stands second costs it its place, so
/// under steady contention a live waiter whose id a second replica shares is sent to the back
/// at every trip. Compare `the_same_schedule_without_a_twin_keeps_the_order`.
#[test]
#[ignore = "limit (documented: two processes sharing a client id are each other's strangers): an idle process sharing the id takes the live waiter's place when told it stands second (b950a49 and later: dup in 0 of 3 lines while p waits, order h, x, p, 8 of 8 runs; 205ffb8 passes)"]
fn an_idle_twin_does_not_take_a_live_waiters_place() {
    let (who, fewest, late) = shared_id_schedule(true);
    eprintln!("with an idle twin: order {who:?}, fewest lines holding dup {fewest}, p granted {late:?} after x's release");
    assert_eq!(
        who,
        ["h", "p", "x"],
        "p lost its place to its idle twin (fewest lines holding it while it waited: {fewest})"
    );
    assert!(fewest >= 2, "dup left the line of {} masters", 3 - fewest);
}

/// The control of the test above: the same schedule without the twin keeps the order (h,
/// p, x) and `p`'s place on every master while it waits.
#[test]
fn the_same_schedule_without_a_twin_keeps_the_order() {
    let (who, fewest, _) = shared_id_schedule(false);
    eprintln!("without a twin: order {who:?}, fewest lines holding dup {fewest}");
    assert_eq!(who, ["h", "p", "x"]);
    assert_eq!(fewest, 3);
}

/// The schedule of the cut-path tests: `g` holds `r`; `h`, `p` and `x` wait in that order,
/// `p` reaching masters 0 and 2 through proxies. Then `p`'s path to master 0 is reset (every
/// connection a client loses wakes all its waiters: they look again, `p` with a claim) and,
/// with `blackhole`, its path to master 2 drops every packet from then on (a fair claim that
/// is lost waits for every master: `p`'s waits the node timeout, 2 s), and `g` releases: `h`
/// is rung and `p`, second, is told, over its direct path to master 1. The reset path heals
/// at once, the blackholed one two and a half claim leases after the release (after `h`'s
/// release, within a lease of it: bells that find no waiter are kept that long); `h` holds two
/// leases.
/// Answers the order of the grants, and whether and when `p` was gone from master 1's line
/// while it waited.
fn cut_path_schedule(blackhole: bool, lease: Duration) -> (Vec<String>, Option<Duration>) {
    let c = cluster(3);
    let nodes = c.addrs();
    let r = resource("cut");
    let r = r.as_str();
    let (p0, p2) = (
        Proxy::start(c.servers()[0].addr()),
        Proxy::start(c.servers()[2].addr()),
    );
    let mut p_nodes = nodes.clone();
    p_nodes[0] = p0.addr();
    p_nodes[2] = p2.addr();
    let g = fair(&nodes, "g", lease, false);
    let h = fair(&nodes, "h", lease, false);
    let x = fair(&nodes, "x", lease, false);
    let p = client_of(
        opts(&p_nodes, "p", lease, Duration::from_secs(2)),
        false,
        &nodes,
    );
    let lg = g.lc().lock(r, TTL).expect("g");
    let order = Order::default();
    let max = Duration::from_secs(20);
    let mut gone_at = None;
    let m1 = std::slice::from_ref(&nodes[1]);
    thread::scope(|s| {
        let order = &order;
        let (h, p, x) = (&h, &p, &x);
        s.spawn(move || waiter(h, "h", r, lease * 2, max, order));
        wait_until(Duration::from_secs(5), "h in line", || {
            in_line(&nodes, r, "h") == 3
        });
        s.spawn(move || waiter(p, "p", r, Duration::ZERO, max, order));
        wait_until(Duration::from_secs(5), "p in line", || {
            in_line(&nodes, r, "p") == 3
        });
        s.spawn(move || waiter(x, "x", r, Duration::ZERO, max, order));
        wait_until(Duration::from_secs(5), "x in line", || {
            in_line(&nodes, r, "x") == 3
        });
        // (p's read of the line is over: its watch waits.)
        thread::sleep(Duration::from_millis(100));
        if blackhole {
            p2.set(Fault::Blackhole);
        }
        p0.set(Fault::Drop);
        // (The proxy closes within its 20 ms poll; p's driver reads the close at once.)
        thread::sleep(Duration::from_millis(60));
        p0.set(Fault::Pass);
        g.lc().unlock(&lg).expect("g's release");
        let released = Instant::now();
        let mut healed = false;
        while released.elapsed() < Duration::from_secs(8) && !order.who().iter().any(|w| w == "p") {
            if !healed && released.elapsed() > lease * 5 / 2 {
                p2.set(Fault::Pass);
                healed = true;
            }
            // (Judged until h's release: p's own claim takes it out of the line then.)
            if gone_at.is_none() && !order.has("h-out") && in_line(m1, r, "p") == 0 {
                gone_at = Some(released.elapsed());
            }
            thread::sleep(Duration::from_millis(10));
        }
        p2.set(Fault::Pass);
    });
    let st = p.lc().stats();
    eprintln!(
        "p: claims {} tries {} connects {:?} lapse notices {:?}",
        st.claims,
        st.tries,
        st.nodes.iter().map(|n| n.connects).collect::<Vec<_>>(),
        st.nodes.iter().map(|n| n.lapse_notices).collect::<Vec<_>>()
    );
    (order.who(), gone_at)
}

/// Claim (docs, "What leaves the line": the engine's own leave answers a notice "for a line
/// in which none of its waiters stood when the notice came, nor stands when it is due"; the
/// table: a waiter moves back only where a master "answers a waiter's join late"). `p` waits
/// in the line the whole time (its `lock_within` never returns between): it must keep its
/// place on the master that has it in the line and reaches it without fault, and be served
/// right after `h`, before `x`, which joined after it.
///
/// Measured: on b950a49, every run fails (13 of 13 over two timings of this schedule): the
/// reset wakes `p`, whose claim (refused on master 1, reserved for `h` there) waits for the
/// blackholed master; the hand-off's notice comes while that claim is out, and the lapse is
/// due a lease and the margin after the release while it still is: `p`'s own engine sends the
/// leave, `p` is gone from master 1's line 205-212 ms after the release, and `h`'s release
/// rings `x`, which is served before `p` (order h, x, p). On 205ffb8 (before the change) the
/// schedule passes (order h, p, x, `p` never gone). On 04f88a2 (main after 939ba83, which
/// delays the leave by half a lease and skips it where a waiter watched the line since the
/// notice) it still fails, 3 of 3: `p` gone at 310-314 ms, order h, x, p (`p` never watched:
/// its claim was out the whole time). lapse.rs admits it ("a waiter of the client between two
/// of its rounds at both instants ... would lose its place"); the docs do not, and a claim that
/// waits for a slow master is no rare "between rounds": any fair claim that loses waits for
/// every master, up to the node timeout. A fix: count a waiter whose claim (or any round) is
/// in flight as standing in the line (the engine knows its operations' resources). Compare
/// `a_waiter_whose_claim_is_quick_keeps_its_place`.
#[test]
fn a_waiter_in_a_slow_claim_keeps_its_place() {
    let (who, gone_at) = cut_path_schedule(true, Duration::from_millis(200));
    eprintln!(
        "blackholed: order {who:?}, p gone from master 1's line {gone_at:?} after the release"
    );
    assert_eq!(
        who,
        ["h", "p", "x"],
        "p lost its place ({gone_at:?} after the release)"
    );
}

/// The control of the test above: the same reset without the blackhole (and a claim lease of
/// 1 s, so that a busy machine's slow claim is still over before a lapse would be due); `p`'s
/// claim is over at once, its place stays and the order is kept.
#[test]
fn a_waiter_whose_claim_is_quick_keeps_its_place() {
    let (who, gone_at) = cut_path_schedule(false, Duration::from_secs(1));
    eprintln!("reset only: order {who:?}, p gone from master 1's line {gone_at:?}");
    assert_eq!(who, ["h", "p", "x"]);
    assert_eq!(gone_at, None);
}

/// Every tenure of every resource of a run.
#[derive(Default)]
struct Book(Mutex<Vec<(String, Tenure)>>);

impl Book {
    fn add(&self, names: &[&str], t: &Tenure) {
        let mut m = self.0.lock().unwrap();
        for n in names {
            m.push(((*n).to_string(), t.clone()));
        }
    }

    fn violations(&self) -> Vec<String> {
        let m = self.0.lock().unwrap();
        let mut names: Vec<&String> = m.iter().map(|(n, _)| n).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .flat_map(|n| {
                let ts = m
                    .iter()
                    .filter(|(k, _)| k == n)
                    .map(|(_, t)| t.clone())
                    .collect();
                violations(ts).into_iter().map(move |v| format!("{n}: {v}"))
            })
            .collect()
    }
}

/// Claim 1 (safety, with the engine's own leave in play). Two processes share id `dup` (one
/// blocking, one async: every notice to either is read by both, and each sends the leave for a
/// line its own waiters are not in), an async client runs two tasks' worth of threads, a
/// blocking one runs a set {r, s} beside singles of `r` and `s`; a master is paused
/// (SIGSTOP) for 400 ms twice, a different one each time, and client `a`'s path to the third
/// is reset once. No two tenures of one resource overlap, fencing tokens increase per
/// resource, and every worker is served. (A release that fails within its lock's validity is
/// printed as a finding: see `a_release_overtaken_by_its_own_hand_off_succeeds`, which found
/// why; with `REVIEW_S19_MONITOR=1` the masters' `MONITOR` lines of its keys are printed too.)
#[test]
fn shared_ids_pauses_and_resets_never_make_two_holders() {
    let mut c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(100);
    let (r, s2) = (resource("safe-r"), resource("safe-s"));
    let (r, s2) = (r.as_str(), s2.as_str());
    let proxy = Proxy::start(c.servers()[1].addr());
    let mut via = nodes.clone();
    via[1] = proxy.addr();
    let clients = [
        fair(&nodes, "dup", lease, false),
        fair(&nodes, "dup", lease, true),
        client_of(opts(&via, "a", lease, Duration::from_secs(2)), true, &nodes),
        fair(&nodes, "b", lease, false),
    ];
    // (worker name, client index, resources)
    let workers: [(&str, usize, &[&str]); 7] = [
        ("dup-blocking", 0, &[r]),
        ("dup-async", 1, &[r]),
        ("a-1", 2, &[r]),
        ("a-2", 2, &[r]),
        ("b-set", 3, &[r, s2]),
        ("b-single", 3, &[s2]),
        ("dup-async-s", 1, &[s2]),
    ];
    let book = Book::default();
    let stop = AtomicBool::new(false);
    // (`REVIEW_S19_MONITOR=1`: the masters' `MONITOR` is read, and printed for a release
    // that fails.)
    let monitors: Vec<Monitor> = if std::env::var_os("REVIEW_S19_MONITOR").is_some() {
        nodes.iter().map(|m| Monitor::start(m)).collect()
    } else {
        Vec::new()
    };
    let failures = Mutex::new(Vec::<String>::new());
    let lost = Mutex::new(Vec::<(String, Vec<&str>)>::new());
    let tokens = Mutex::new(Vec::<(String, &str, Instant)>::new());
    let served = Mutex::new(std::collections::HashMap::<&str, u64>::new());
    let ttl = Duration::from_secs(3);
    thread::scope(|s| {
        for (who, ci, names) in workers {
            let (clients, book, stop, failures, served, tokens, nodes, lost) = (
                &clients, &book, &stop, &failures, &served, &tokens, &nodes, &lost,
            );
            s.spawn(move || {
                let cl = &clients[ci];
                for _ in 0..10_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let got = match (cl, names) {
                        (_, [one]) => cl.lock_within(one, ttl, Duration::from_secs(8)),
                        (Client::Blocking(b), _) => {
                            b.lock_many_within(names, ttl, Duration::from_secs(8))
                        }
                        (Client::Async(a), _) => a.rt.block_on(a.client.lock_many_within(
                            names,
                            ttl,
                            Duration::from_secs(8),
                        )),
                    };
                    let Ok(l) = got else { continue };
                    let from = Instant::now();
                    thread::sleep(Duration::from_millis(3));
                    let unlocking = Instant::now();
                    book.add(names, &Tenure::of(who, &l, from).end(unlocking, &l));
                    tokens
                        .lock()
                        .unwrap()
                        .push((l.token().as_str().to_string(), who, Instant::now()));
                    if let Err(e) = cl.lc().unlock(&l) {
                        let left = l.valid_until().saturating_duration_since(Instant::now());
                        if !left.is_zero() {
                            let seen: Vec<String> = names
                                .iter()
                                .map(|n| {
                                    let per: Vec<String> = nodes
                                        .iter()
                                        .map(|m| {
                                            let v = testkit::get(m, n).unwrap_or_default();
                                            let by = tokens
                                                .lock()
                                                .unwrap()
                                                .iter()
                                                .find(|t| t.0 == v)
                                                .map(|t| t.1);
                                            format!("{v} ({by:?}) line {:?}", line_on(m, n))
                                        })
                                        .collect();
                                    format!("{n}: {per:?}")
                                })
                                .collect();
                            lost
                                .lock()
                                .unwrap()
                                .push((l.token().as_str().to_string(), names.to_vec()));
                            failures.lock().unwrap().push(format!(
                                "{who}: release of {} failed {left:?} early: {e}; masters now {seen:?}",
                                l.token().as_str()
                            ));
                        }
                    }
                    *served.lock().unwrap().entry(who).or_default() += 1;
                }
            });
        }
        thread::sleep(Duration::from_millis(500));
        c.server(2).pause().expect("pause 2");
        thread::sleep(Duration::from_millis(400));
        c.server(2).resume().expect("resume 2");
        thread::sleep(Duration::from_millis(300));
        proxy.set(Fault::Drop);
        thread::sleep(Duration::from_millis(60));
        proxy.set(Fault::Pass);
        thread::sleep(Duration::from_millis(300));
        c.server(0).pause().expect("pause 0");
        thread::sleep(Duration::from_millis(400));
        c.server(0).resume().expect("resume 0");
        thread::sleep(Duration::from_millis(800));
        stop.store(true, Ordering::Relaxed);
    });
    let served = served.into_inner().unwrap();
    let failures = failures.into_inner().unwrap();
    let v = book.violations();
    eprintln!("served {served:?}; release failures {failures:?}");
    for (token, names) in lost.into_inner().unwrap() {
        // What each master's MONITOR saw of the failed token's keys, from its first mention.
        for (i, m) in monitors.iter().enumerate() {
            let mut what: Vec<&str> = names.clone();
            what.push(&token);
            let seen = m.mentioning(&what);
            let from = seen.iter().position(|l| l.contains(&token)).unwrap_or(0);
            for l in seen.iter().skip(from.saturating_sub(6)).take(60) {
                eprintln!("MONITOR {i}: {}", l.trim_end());
            }
        }
    }
    assert!(v.is_empty(), "{v:?}");
    // (A release that fails within validity is the defect of
    // `a_release_overtaken_by_its_own_hand_off_succeeds`, seen here in 4 of ~37 full runs of
    // this file: reported, not failed on.)
    for f in &failures {
        eprintln!("FINDING: {f}");
    }
    for (who, _, _) in workers {
        assert!(
            served.get(who).copied().unwrap_or(0) >= 1,
            "{who} never served: {served:?}"
        );
    }
}

/// Claim (docs, "The line": a client's waiters share one place and the place is served once,
/// "one turn per client per trip through the line"; the table: "a client gets one turn per
/// trip through the line whatever its number of threads"). Client `x` runs four threads,
/// `y` and `z` one each (`z` async), all looping lock `a` - hold 2 ms - unlock for 1.5 s.
/// While one of `y`'s or `z`'s waits lasts (from its call to its grant), the others are
/// served in the order of the line, each client once per trip: `x` is granted at most twice
/// in one such wait (once for a place it may have had ahead of the waiter when it joined,
/// once more where its refused waiters joined again in the instant before the waiter did),
/// and so is the other one-threaded client. Measured on b950a49: `x` 117 grants, `y` 113,
/// `z` 112; in 224 of 225 waits of `y` or `z` exactly one grant of `x`, in one two (strict
/// turns); beside two CPU hogs, 247 of 261, 280 of 286 and 252 of 257 waits saw one, the rest
/// two, never more. Bound: nine waits in ten see at most two grants of `x`.
#[test]
fn a_client_with_many_threads_is_served_once_per_trip_while_another_waits() {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let a = resource("trip");
    let a = a.as_str();
    let x = fair(&nodes, "x", lease, false);
    let y = fair(&nodes, "y", lease, false);
    let z = fair(&nodes, "z", lease, true);
    let stop = AtomicBool::new(false);
    let grants = Mutex::new(Vec::<(&str, Instant)>::new());
    let waits = Mutex::new(Vec::<(&str, Instant, Instant)>::new());
    let book = Book::default();
    thread::scope(|s| {
        for (cl, client) in [
            ("x", &x),
            ("x", &x),
            ("x", &x),
            ("x", &x),
            ("y", &y),
            ("z", &z),
        ] {
            let (stop, grants, waits, book) = (&stop, &grants, &waits, &book);
            s.spawn(move || {
                for _ in 0..100_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let asked = Instant::now();
                    let l = client
                        .lock_within(a, TTL, Duration::from_secs(10))
                        .expect("a turn");
                    let from = Instant::now();
                    grants.lock().unwrap().push((cl, from));
                    waits.lock().unwrap().push((cl, asked, from));
                    thread::sleep(Duration::from_millis(2));
                    book.add(&[a], &Tenure::of(cl, &l, from).end(Instant::now(), &l));
                    client.lc().unlock(&l).expect("a release");
                }
            });
        }
        thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
    });
    let v = book.violations();
    assert!(v.is_empty(), "{v:?}");
    let grants = grants.into_inner().unwrap();
    let waits = waits.into_inner().unwrap();
    let count = |who: &str| grants.iter().filter(|g| g.0 == who).count();
    let (xs, ys, zs) = (count("x"), count("y"), count("z"));
    // Per wait of y or z: how many grants of x, and of the other one-threaded client, fell
    // inside it.
    let mut worst_x = (0usize, Duration::ZERO);
    let mut hist = [0usize; 8];
    let mut worst_other = 0usize;
    for (who, asked, got) in waits.iter().filter(|w| w.0 != "x") {
        let inside = |c: &str| {
            grants
                .iter()
                .filter(|g| g.0 == c && g.1 > *asked && g.1 < *got)
                .count()
        };
        let nx = inside("x");
        hist[nx.min(7)] += 1;
        if nx > worst_x.0 {
            worst_x = (nx, *got - *asked);
        }
        let other = if *who == "y" { "z" } else { "y" };
        worst_other = worst_other.max(inside(other));
    }
    eprintln!(
        "grants: x (4 threads) {xs}, y {ys}, z {zs}; x's grants per wait of y or z: {hist:?} \
         (worst {} in a wait of {:?}); the other single's worst {worst_other}",
        worst_x.0, worst_x.1
    );
    assert!(ys >= 5 && zs >= 5, "too few turns to judge: y {ys}, z {zs}");
    // (A waiter's thread descheduled between its call and its join lets `x` be served more:
    // the bound is on nine waits in ten, with a place kept through its own turns `x` would
    // be served about four times in every wait.)
    let waits_judged: usize = hist.iter().sum();
    let within: usize = hist[..3].iter().sum();
    assert!(
        within * 10 >= waits_judged * 9,
        "x was served more than twice in {} of {waits_judged} waits of another client (worst {} in {:?}): {hist:?}",
        waits_judged - within,
        worst_x.0,
        worst_x.1
    );
    assert!(worst_other <= 3, "the other single: {worst_other}");
}

/// The schedule of the stale-place tests: a stale place of an async client `q` that waits for
/// nothing stands second in `r`'s line on every master (put there by hand, between `h`'s and
/// `x`'s), `q` reaching master 1 through a proxy. `g` releases: `h` is rung and `q` told; with
/// `reset`, `q`'s idle connection to master 1 is then reset (and the path healed at once).
/// Answers, per master, how long after the release `q`'s place was gone (`None`: still there
/// twelve leases later), and the bound the tests hold it to.
fn stale_place_schedule(reset: bool, scripts: Scripts) -> (Vec<Option<Duration>>, Duration) {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let r = resource("stale");
    let r = r.as_str();
    let proxy = Proxy::start(c.servers()[1].addr());
    let mut q_nodes = nodes.clone();
    q_nodes[1] = proxy.addr();
    let g = fair(&nodes, "g", lease, false);
    let h = fair(&nodes, "h", lease, false);
    let x = fair(&nodes, "x", lease, false);
    let mut o = opts(&q_nodes, "q", lease, Duration::from_secs(2));
    o.scripts = scripts;
    let q = client_of(o, true, &nodes);
    let bound = lease * 2 + slack(&q);
    let lg = g.lc().lock(r, TTL).expect("g");
    let order = Order::default();
    let max = Duration::from_secs(10);
    let line = testkit::review::line(r);
    let mut gone = vec![None; 3];
    thread::scope(|s| {
        let order = &order;
        let (h, x) = (&h, &x);
        s.spawn(move || waiter(h, "h", r, lease * 10, max, order));
        wait_until(Duration::from_secs(5), "h in line", || {
            in_line(&nodes, r, "h") == 3
        });
        for m in &nodes {
            let score = match redis(m, &["ZSCORE", &line, "h"]) {
                Frame::Bulk(b) => String::from_utf8_lossy(&b)
                    .parse::<f64>()
                    .expect("a ticket"),
                f => panic!("h's ticket: {f:?}"),
            };
            redis(m, &["ZADD", &line, &format!("{}", score + 0.5), "q"]);
        }
        s.spawn(move || waiter(x, "x", r, Duration::ZERO, max, order));
        wait_until(Duration::from_secs(5), "x in line", || {
            in_line(&nodes, r, "x") == 3
        });
        g.lc().unlock(&lg).expect("g's release");
        let released = Instant::now();
        if reset {
            proxy.set(Fault::Drop);
            thread::sleep(Duration::from_millis(60));
            proxy.set(Fault::Pass);
        }
        while released.elapsed() < lease * 12 && gone.iter().any(Option::is_none) {
            for (i, m) in nodes.iter().enumerate() {
                if gone[i].is_none() && in_line(std::slice::from_ref(m), r, "q") == 0 {
                    gone[i] = Some(released.elapsed());
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
    });
    let st = q.lc().stats();
    eprintln!(
        "q: connects {:?}, lapse notices {:?}",
        st.nodes.iter().map(|n| n.connects).collect::<Vec<_>>(),
        st.nodes.iter().map(|n| n.lapse_notices).collect::<Vec<_>>()
    );
    (gone, bound)
}

/// Claim (b950a49: a stale place told of a lapse leaves, and the async driver writes what its
/// deadlines queued in the same pass). The idle async client's stale place leaves every line
/// about a claim lease after the hand-off's notice (measured 207-215 ms with a 200 ms lease).
/// Bound: two leases and the run's measured slack; without the engine's leave it would stay
/// until `h` (holding ten leases) released and the reservation the release made for it
/// lapsed, eleven leases.
#[test]
fn an_idle_async_clients_stale_place_leaves_every_line() {
    let (gone, bound) = stale_place_schedule(false, Scripts::Auto);
    eprintln!("stale place gone after {gone:?}");
    for (i, g) in gone.iter().enumerate() {
        assert!(
            g.is_some_and(|d| d < bound),
            "master {i}: {gone:?}, bound {bound:?}"
        );
    }
}

/// The same, with `q`'s idle connection to master 1 reset between the notice and the lapse:
/// the leave queued by the deadline needs a new connection there, opened in the same pass.
#[test]
fn an_idle_async_clients_stale_place_leaves_a_master_whose_connection_was_reset() {
    let (gone, bound) = stale_place_schedule(true, Scripts::Auto);
    eprintln!("stale place (master 1 reset) gone after {gone:?}");
    for (i, g) in gone.iter().enumerate() {
        assert!(
            g.is_some_and(|d| d < bound),
            "master {i}: {gone:?}, bound {bound:?}"
        );
    }
}

/// The line of `key` on master `addr`, head first.
fn line_on(addr: &str, key: &str) -> Vec<String> {
    match redis(addr, &["ZRANGE", &testkit::review::line(key), "0", "-1"]) {
        Frame::Array(v) => v
            .into_iter()
            .filter_map(|f| match f {
                Frame::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// As `an_idle_async_clients_stale_place_leaves_every_line`, `q` calling the fair scripts as
/// functions (`Scripts::Function`): the leave the engine sends by itself goes out in that
/// form too.
#[test]
fn an_idle_async_clients_stale_place_leaves_every_line_by_function() {
    let (gone, bound) = stale_place_schedule(false, Scripts::Function);
    eprintln!("stale place (functions) gone after {gone:?}");
    for (i, g) in gone.iter().enumerate() {
        assert!(
            g.is_some_and(|d| d < bound),
            "master {i}: {gone:?}, bound {bound:?}"
        );
    }
}

/// What `MONITOR` shows of master `addr` (commands, and what scripts call, with the server's
/// timestamps) until `stop`: read by a thread, for a failure's explanation.
struct Monitor {
    lines: std::sync::Arc<Mutex<Vec<String>>>,
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(addr: &str) -> Monitor {
        use std::io::{BufRead, Write};
        let lines = std::sync::Arc::new(Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut sock = std::net::TcpStream::connect(addr).expect("monitor connects");
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("a timeout");
        sock.write_all(b"MONITOR\r\n").expect("MONITOR");
        let (l, st) = (lines.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let mut r = std::io::BufReader::new(sock);
            let mut line = String::new();
            for _ in 0..10_000_000 {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                match r.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        l.lock().unwrap().push(std::mem::take(&mut line));
                    }
                    Err(_) => {}
                }
            }
        });
        Monitor {
            lines,
            stop,
            thread: Some(thread),
        }
    }

    /// The lines that mention any of `what`.
    fn mentioning(&self, what: &[&str]) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| what.iter().any(|w| l.contains(w)))
            .cloned()
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Claim (docs: a release is confirmed by a quorum; the brief's "a release failing while the
/// lock is held"), the mechanism behind session 18's intermittent finding
/// (`no_release_finds_its_lock_gone_among_busy_sets`). Holder `h` holds `r` on masters 1 and 2
/// only (its key is gone from master 0: deleted by hand, as a master restarted without its
/// data loses it; two of three still hold the lock, which is valid); `w` waits in the line on
/// all three. `h` unlocks while its path to master 1 drops every packet (held in the kernel's
/// buffers, delivered when it heals). The release runs on masters 0 and 2 and rings `w` from
/// both with the releasing token as the hand-off's tag; `w`'s claim names it and takes the key
/// of master 1, still holding `h`'s token (by design: "that release rang it from a quorum of
/// masters, and is on its way to this one"). Then the path heals and the release reaches the
/// last master. Expected: `h`'s unlock succeeds (the lock was held, within its validity, until
/// the call; the release did everything a release does).
///
/// Measured (b950a49, 5 of 5 runs; 205ffb8, 2 of 2: older than today's changes; fixed by
/// 04f88a2 on main, which records what a claim takes from a releasing token: passes 3 of 3
/// there): `unlock` returns `NotHeld` (master 0: gone, master 1:
/// held by another token, master 2: ok) with ~8.8 s of validity left; `w` was granted only
/// after `h`'s call (no overlap). (With `w` releasing at once, before the release lands on
/// master 1: `lock already expired`, 4 of 4.) The same shape, "key gone" on one master (where
/// the lock never was, or a reservation for the holder's own client stood, which a release
/// counts as gone) and "held by another token" on another (the next waiter's claim overtook the
/// release there), is what `shared_ids_pauses_and_resets_never_make_two_holders` printed in 4
/// of ~37 full runs of this file (3 beside a CPU hog), and what session 18 saw: with
/// `REVIEW_S19_MONITOR=1` the masters' `MONITOR` showed the release of token T run on masters
/// 0 and 2, where T was not held on master 0 (a reservation for the releaser's own id, "gone"),
/// both ring the next waiter with tag T, and that waiter's claim naming T take master 1's key
/// 0.2 ms before T's release arrived there. The claim's rule assumes that a quorum of bells
/// tagged T means T was deleted from a quorum ("its releasing token is then gone from a quorum
/// of masters"), but the hand-off script rings with the token's tag where the key was absent or
/// reserved for the releaser too: those bells count for the claim, not for the release. A fix
/// that keeps the claim's shortcut: tag the ring with the token only where the release deleted
/// the token (elsewhere with the client's id, as a leave does); then a quorum of T's bells
/// implies a quorum of the release's "ok". A user told that an unlock failed with "not held"
/// will believe the lock was lost during its critical section.
#[test]
fn a_release_overtaken_by_its_own_hand_off_succeeds() {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let r = resource("overtaken");
    let r = r.as_str();
    let proxy = Proxy::start(c.servers()[1].addr());
    let mut h_nodes = nodes.clone();
    h_nodes[1] = proxy.addr();
    let h = client_of(
        opts(&h_nodes, "h", lease, Duration::from_secs(5)),
        false,
        &nodes,
    );
    let w = fair(&nodes, "w", lease, false);
    let lh = h.lc().lock(r, TTL).expect("h");
    let order = Order::default();
    let outcome = thread::scope(|s| {
        let order = &order;
        let w = &w;
        s.spawn(move || {
            waiter(
                w,
                "w",
                r,
                Duration::from_secs(1),
                Duration::from_secs(10),
                order,
            )
        });
        wait_until(Duration::from_secs(5), "w in line", || {
            in_line(&nodes, r, "w") == 3
        });
        redis(&nodes[0], &["DEL", r]);
        proxy.set(Fault::Blackhole);
        // (The proxy's pumps look at the fault every 20 ms: one already reading would pass
        // the next chunk on.)
        thread::sleep(Duration::from_millis(60));
        let asked = Instant::now();
        let unlock = s.spawn(|| h.lc().unlock(&lh));
        wait_until(Duration::from_secs(5), "w granted", || order.has("w"));
        let w_after = order.0.lock().unwrap()[0].1 > asked;
        proxy.set(Fault::Pass);
        let outcome = unlock.join().expect("h's unlock");
        assert!(w_after, "w was granted before h's unlock was called");
        outcome
    });
    let left = lh.valid_until().saturating_duration_since(Instant::now());
    eprintln!("h's unlock: {outcome:?}, {left:?} of validity left");
    assert!(
        outcome.is_ok(),
        "h's unlock failed with {left:?} of validity left: {outcome:?}"
    );
}

/// Slack for a time bound measured in the run: twenty times the slowest of three
/// uncontended lock + unlock pairs of `c` (`testkit::measured_slack`), at least 50 ms.
fn slack(c: &Client) -> Duration {
    let floor = Duration::from_millis(50);
    match c {
        Client::Blocking(b) => testkit::measured_slack(b, floor),
        Client::Async(a) => testkit::measured_slack(a, floor),
    }
}
