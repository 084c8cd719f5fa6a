//! A hostile review, against real masters, of d966a32 and 3c5de25: in fair mode a set of
//! resources (`lock_many`, `lock_many_within`) waits in the line of every one of its
//! resources, keeps a reservation only where it heads every line of its set (renewed a claim
//! lease at a time) and passes it on elsewhere; the engine watches one key naming every line
//! of the set (docs/redlock.md, "Sets and the line"). Each test states the claim it holds the
//! code to: safety first (sets and singles of several clients on overlapping resources, a
//! paused master, a blackholed, reset and half-closed client path, shared ids, an unfair
//! client), then liveness (crossed and cyclic sets beside busy singles, sets ordered
//! differently on each master), then the cost of a set that gives up, is cut off or is
//! dropped, a set and a single of one client sharing a place, and odd inputs.
//!
//! Found and fixed (the tests failed before the fix, every run): a set of `lock`'s default 3
//! tries spent a try on every hand-off of a line it heads but cannot take (it failed in
//! ~43 ms beside a busy line, where a single waits; now a claim a bell woke and another held
//! resource refused costs no try, and the wait it interrupted still ends where it would
//! have); a set's kept reservation lapsed behind a paused or slow minority master, and the
//! single behind it overtook it (now a set's reads are over at a quorum and its renewal timer
//! runs from the read's start). A lock's token found gone from 2 of 3 masters at its release
//! (intermittent, under load; no overlap was recorded) was ignored until session 19 found
//! it (`no_release_finds_its_lock_gone_among_busy_sets`). Session 19 turned the shared place's three ignored tests (which asked for both
//! waiters of a client to be served before a later client) into tests of what the docs now
//! promise: a place is served once, and a client gets one turn per trip through the line.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::Options;
use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Error, Lock, Redlock};
use testkit::proxy::Fault;
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

    fn lock_many_within(&self, r: &[&str], ttl: Duration, max: Duration) -> Result<Lock, Error> {
        match self {
            Client::Blocking(c) => c.lock_many_within(r, ttl, max),
            Client::Async(c) => c.rt.block_on(c.client.lock_many_within(r, ttl, max)),
        }
    }

    fn lock_within(&self, r: &str, ttl: Duration, max: Duration) -> Result<Lock, Error> {
        self.lc().lock_within(r, ttl, max)
    }

    fn unlock(&self, l: &Lock) -> Result<(), Error> {
        self.lc().unlock(l)
    }

    /// Releases `l`; a release that finds the lock gone within its validity is logged as a
    /// finding (see `no_release_finds_its_lock_gone_among_busy_sets`), not a failure of the
    /// test at hand: it was seen in about one full run of this file in twelve.
    fn release_logged(&self, l: &Lock, what: &str) {
        if let Err(e) = self.unlock(l) {
            eprintln!(
                "FINDING: {what}: release of token {} failed {:?} before its validity ended: {e}",
                l.token().as_str(),
                l.valid_until().saturating_duration_since(Instant::now())
            );
        }
    }
}

/// Releases `l` of `c`; a release that finds its lock gone within validity is logged as a
/// finding, with what each master of `nodes` holds under its resources and in their lines.
fn release(c: &Client, l: &Lock, nodes: &[String], what: &str) {
    if let Err(e) = c.unlock(l) {
        let seen: Vec<String> = l
            .resources()
            .map(|r| {
                let per: Vec<String> = nodes
                    .iter()
                    .map(|m| format!("{:?} line {:?}", testkit::get(m, r), line_on(m, r)))
                    .collect();
                format!("{r}: {per:?}")
            })
            .collect();
        eprintln!(
            "FINDING: {what}: release of token {} failed {:?} before its validity ended: {e:?}; the masters now: {seen:?}",
            l.token().as_str(),
            l.valid_until().saturating_duration_since(Instant::now())
        );
    }
}

/// Fenced options of client `id` (fair if `fair`) on `nodes`, claim lease `lease`.
fn opts(nodes: &[String], fair: bool, id: &str, lease: Duration) -> Options {
    let mut o = options(nodes, fair, id, lease, 10_000);
    o.fencing = true;
    o
}

/// A client of `o`: blocking, or (`asy`) async on its own two-thread runtime; connected
/// and, fair, subscribed to its bell on every master of `direct` (read without proxies).
fn client_of(o: Options, asy: bool, direct: &[String]) -> Client {
    let fair = o.fair;
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
    let l = c.lc().lock(&resource("s18-warm"), TTL).expect("up");
    c.release_logged(&l, "up");
    if fair {
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
    }
    c
}

fn fair(nodes: &[String], id: &str, lease: Duration, asy: bool) -> Client {
    client_of(opts(nodes, true, id, lease), asy, nodes)
}

const TTL: Duration = Duration::from_secs(10);

/// Slack for a time bound measured in the run: twenty times the slowest of three
/// uncontended lock + unlock pairs of `c` (`testkit::measured_slack`), at least 50 ms.
fn slack(c: &Client) -> Duration {
    let floor = Duration::from_millis(50);
    match c {
        Client::Blocking(b) => testkit::measured_slack(b, floor),
        Client::Async(a) => testkit::measured_slack(a, floor),
    }
}

/// Every tenure of every resource of a run.
#[derive(Default)]
struct Book(Mutex<HashMap<String, Vec<Tenure>>>);

impl Book {
    fn add(&self, who: &str, names: &[&str], l: &Lock, from: Instant, unlocking: Instant) {
        let t = Tenure::of(who, l, from).end(unlocking, l);
        let mut m = self.0.lock().unwrap();
        for n in names {
            m.entry((*n).to_string()).or_default().push(t.clone());
        }
    }

    fn violations(&self) -> Vec<String> {
        let m = self.0.lock().unwrap();
        m.iter()
            .flat_map(|(r, ts)| {
                violations(ts.clone())
                    .into_iter()
                    .map(move |v| format!("{r}: {v}"))
            })
            .collect()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// Claim 1 (safety). Sets and singles of eight clients on three overlapping resources:
/// crossed orders, a set of all three from a client without fair mode, two processes
/// sharing one id (a set and a set, a set and a single), one client behind proxies whose
/// path is blackholed for a second and healed, then reset mid-reply and half-closed, and a
/// master SIGSTOPped for a second. Never
/// two tenures of one resource overlap, fencing tokens increase per resource, and every
/// worker is served at least once.
#[test]
fn sets_and_singles_of_many_clients_never_overlap_under_faults() {
    let mut c = cluster(3);
    let nodes = c.addrs();
    let (proxies, behind) = testkit::proxy::in_front(&c, 0..3);
    let lease = Duration::from_millis(100);
    let r: Vec<String> = (0..3).map(|i| resource(&format!("mix{i}"))).collect();
    let (r0, r1, r2) = (r[0].as_str(), r[1].as_str(), r[2].as_str());
    type Work<'a> = (&'a str, Client, Vec<&'a str>);
    let workers: Vec<Work> = vec![
        ("set-a", fair(&nodes, "s18-a", lease, false), vec![r0, r1]),
        ("set-a2", fair(&nodes, "s18-a", lease, true), vec![r1, r2]),
        ("set-b", fair(&nodes, "s18-b", lease, true), vec![r2, r0]),
        ("single-b", fair(&nodes, "s18-b", lease, false), vec![r0]),
        ("single-c", fair(&nodes, "s18-c", lease, false), vec![r1]),
        ("single-d", fair(&nodes, "s18-d", lease, true), vec![r2]),
        (
            "unfair-set",
            client_of(opts(&nodes, false, "", lease), false, &nodes),
            vec![r0, r1, r2],
        ),
        (
            "proxied-set",
            client_of(opts(&behind, true, "s18-p", lease), false, &nodes),
            vec![r1, r0],
        ),
    ];
    let book = Book::default();
    let stop = AtomicBool::new(false);
    let served: Vec<AtomicU64> = workers.iter().map(|_| AtomicU64::new(0)).collect();
    let failed = AtomicU64::new(0);
    thread::scope(|s| {
        for (i, (who, cl, names)) in workers.iter().enumerate() {
            let (book, stop, served, failed) = (&book, &stop, &served, &failed);
            s.spawn(move || {
                // Bounded: each call waits 3 s at most, and the main thread stops the run.
                while !stop.load(Ordering::Relaxed) {
                    let got = if names.len() == 1 {
                        cl.lock_within(names[0], Duration::from_secs(2), Duration::from_secs(3))
                    } else {
                        cl.lock_many_within(names, Duration::from_secs(2), Duration::from_secs(3))
                    };
                    let from = Instant::now();
                    match got {
                        Ok(l) => {
                            thread::sleep(Duration::from_millis(2));
                            let unlocking = Instant::now();
                            book.add(who, names, &l, from, unlocking);
                            let _ = cl.unlock(&l);
                            served[i].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        thread::sleep(Duration::from_millis(800));
        c.server(2).pause().expect("SIGSTOP");
        thread::sleep(Duration::from_millis(1000));
        c.server(2).resume().expect("SIGCONT");
        thread::sleep(Duration::from_millis(500));
        testkit::proxy::set_all(&proxies, Fault::Blackhole);
        thread::sleep(Duration::from_millis(1000));
        testkit::proxy::set_all(&proxies, Fault::Pass);
        thread::sleep(Duration::from_millis(500));
        testkit::proxy::set_all(&proxies, Fault::ResetMidReply);
        thread::sleep(Duration::from_millis(300));
        testkit::proxy::set_all(&proxies, Fault::Pass);
        thread::sleep(Duration::from_millis(300));
        testkit::proxy::set_all(&proxies, Fault::HalfClose);
        thread::sleep(Duration::from_millis(300));
        testkit::proxy::set_all(&proxies, Fault::Pass);
        thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
    });
    let v = book.violations();
    let counts: Vec<(&str, u64)> = workers
        .iter()
        .zip(&served)
        .map(|((w, _, _), n)| (*w, n.load(Ordering::Relaxed)))
        .collect();
    eprintln!(
        "{} tenures, {} failed calls, served {counts:?}",
        book.count(),
        failed.load(Ordering::Relaxed)
    );
    assert!(
        v.is_empty(),
        "{} violations: {:?}",
        v.len(),
        &v[..v.len().min(10)]
    );
    for (w, n) in &counts {
        assert!(*n >= 1, "{w} was never served: {counts:?}");
    }
}

/// Runs `sets` (each a client's set of resource indices) and one fair single per resource,
/// every client taking turns (lock, hold 2 ms, unlock), for `run`. Answers each set's grants
/// and its longest wait, and the mean time between grants of the singles on one resource.
fn sets_beside_singles(
    sets: &[&[usize]],
    resources: usize,
    run: Duration,
    lease: Duration,
) -> (Vec<(u64, Duration)>, Duration, Book, Vec<String>) {
    let c = cluster(3);
    let nodes = c.addrs();
    let r: Vec<String> = (0..resources).map(|i| resource(&format!("x{i}"))).collect();
    let set_clients: Vec<(Client, Vec<&str>)> = sets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                fair(&nodes, &format!("set{i}"), lease, i % 2 == 1),
                s.iter().map(|&k| r[k].as_str()).collect(),
            )
        })
        .collect();
    let singles: Vec<Client> = (0..resources)
        .map(|i| fair(&nodes, &format!("single{i}"), lease, false))
        .collect();
    let stop = AtomicBool::new(false);
    let single_turns = AtomicU64::new(0);
    let book = Book::default();
    let unheld = Mutex::new(Vec::<String>::new());
    let out: Vec<Mutex<(u64, Duration)>> = sets
        .iter()
        .map(|_| Mutex::new((0, Duration::ZERO)))
        .collect();
    let start = Instant::now();
    thread::scope(|s| {
        for (i, cl) in singles.iter().enumerate() {
            let (stop, turns, book, name) = (&stop, &single_turns, &book, r[i].as_str());
            let unheld = &unheld;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let l = cl
                        .lock_within(name, TTL, Duration::from_secs(20))
                        .expect("a single's turn");
                    let from = Instant::now();
                    thread::sleep(Duration::from_millis(2));
                    book.add("single", &[name], &l, from, Instant::now());
                    if let Err(e) = cl.unlock(&l) {
                        eprintln!(
                            "single {name}: release failed {:?} after the grant: {e:?}",
                            from.elapsed()
                        );
                        unheld.lock().unwrap().push(format!("single {name}: {e}"));
                    }
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for (i, (cl, names)) in set_clients.iter().enumerate() {
            let (stop, book, out, unheld, nodes) = (&stop, &book, &out[i], &unheld, &nodes);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let l = cl
                        .lock_many_within(names, TTL, Duration::from_secs(20))
                        .expect("a set's turn");
                    let from = Instant::now();
                    let waited = from - asked;
                    thread::sleep(Duration::from_millis(2));
                    book.add(&format!("set{i}"), names, &l, from, Instant::now());
                    if let Err(e) = cl.unlock(&l) {
                        let seen: Vec<Vec<Option<String>>> = names
                            .iter()
                            .map(|n| nodes.iter().map(|m| testkit::get(m, n)).collect())
                            .collect();
                        eprintln!(
                            "set{i} {names:?} token {}: release failed {:?} after the grant: {e:?}; the keys now: {seen:?}",
                            l.token().as_str(),
                            from.elapsed()
                        );
                        unheld.lock().unwrap().push(format!("set{i} {names:?}: {e}"));
                    }
                    let mut o = out.lock().unwrap();
                    o.0 += 1;
                    o.1 = o.1.max(waited);
                }
            });
        }
        thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = start.elapsed();
    let turns = single_turns.load(Ordering::Relaxed).max(1);
    let per_turn = elapsed * resources as u32 / u32::try_from(turns).unwrap_or(u32::MAX);
    let out = out.into_iter().map(|m| m.into_inner().unwrap()).collect();
    (out, per_turn, book, unheld.into_inner().unwrap())
}

/// Claim 2 (no deadlock between sets). Sets in crossed orders ({a,b} and {b,a}) and three
/// in a cycle ({a,b}, {b,c}, {c,a}) beside a fair single on each resource, all taking turns
/// for 3 s: every set is served again and again, and no set waits longer than 40 turns of a
/// line (measured in the run) plus four claim leases. Every tenure is checked as well.
#[test]
fn crossed_and_cyclic_sets_beside_busy_singles_are_all_served() {
    let lease = Duration::from_millis(100);
    let sets: [&[usize]; 5] = [&[0, 1], &[1, 0], &[0, 1], &[1, 2], &[2, 0]];
    let (out, per_turn, book, unheld) =
        sets_beside_singles(&sets, 3, Duration::from_secs(3), lease);
    let bound = per_turn * 40 + lease * 4;
    eprintln!("sets (grants, longest wait): {out:?}; a line's turn {per_turn:?}; bound {bound:?}");
    let v = book.violations();
    assert!(v.is_empty(), "{v:?}");
    if !unheld.is_empty() {
        eprintln!("FINDING: releases found their lock gone: {unheld:?}");
    }
    for (i, (n, longest)) in out.iter().enumerate() {
        assert!(
            *n >= 3,
            "set {i} {:?} was served {n} times in 3 s: {out:?}",
            sets[i]
        );
        assert!(
            *longest <= bound,
            "set {i} {:?} waited {longest:?} (a line's turn {per_turn:?}); bound {bound:?}: {out:?}",
            sets[i]
        );
    }
}

/// Claim 3 (starvation). A set of three resources whose lines all stay busy (a fair single
/// on each, and two other sets overlapping it) is served within 60 turns of a line plus six
/// claim leases, every time, over 3 s.
#[test]
fn a_set_of_three_among_busy_lines_is_served_within_a_measured_bound() {
    let lease = Duration::from_millis(100);
    let sets: [&[usize]; 3] = [&[0, 1, 2], &[2, 1], &[0, 2]];
    let (out, per_turn, book, unheld) =
        sets_beside_singles(&sets, 3, Duration::from_secs(3), lease);
    let bound = per_turn * 60 + lease * 6;
    eprintln!("sets (grants, longest wait): {out:?}; a line's turn {per_turn:?}; bound {bound:?}");
    let v = book.violations();
    assert!(v.is_empty(), "{v:?}");
    if !unheld.is_empty() {
        eprintln!("FINDING: releases found their lock gone: {unheld:?}");
    }
    let (n, longest) = out[0];
    assert!(
        n >= 3,
        "the set of three was served {n} times in 3 s: {out:?}"
    );
    assert!(
        longest <= bound,
        "the set of three waited {longest:?} (a line's turn {per_turn:?}); bound {bound:?}"
    );
}

/// What a fault of a set that keeps a reservation costs the single behind it.
#[derive(Clone, Copy, Debug)]
enum SetFault {
    /// `lock_many_within`'s deadline passes while it keeps the reservation.
    GivesUp,
    /// Its path to every master is blackholed while it keeps the reservation.
    CutOff,
    /// The async future is dropped while it keeps the reservation.
    Dropped,
}

/// Claim 4 (cost of faults). A holder holds `b` for 6 s; a set {a, b} waits, heading both
/// lines; the holder of `a` releases, so `a` is reserved for the set, which keeps it
/// (renewed) while a single waits behind it in `a`'s line. Then the set fails by `fault`.
/// Answers how long after the fault the single was granted `a`.
fn cost_of_a_set_fault(fault: SetFault, asy: bool) -> (Duration, Duration) {
    let c = cluster(3);
    let nodes = c.addrs();
    let (proxies, behind) = testkit::proxy::in_front(&c, 0..3);
    let lease = Duration::from_millis(200);
    let (a, b) = (resource("cost-a"), resource("cost-b"));
    let holder = fair(&nodes, "holder", lease, false);
    let set = match fault {
        SetFault::CutOff => client_of(opts(&behind, true, "set", lease), asy, &nodes),
        SetFault::Dropped => fair(&nodes, "set", lease, true),
        SetFault::GivesUp => fair(&nodes, "set", lease, asy),
    };
    let single = fair(&nodes, "single", lease, !asy);
    let slack = slack(&holder);
    let la = holder.lc().lock(&a, TTL).expect("a");
    let lb = holder.lc().lock(&b, Duration::from_secs(6)).expect("b");
    let set_max = Duration::from_millis(1500);
    thread::scope(|s| {
        let (set, a, b) = (&set, a.as_str(), b.as_str());
        let mut set_thread = Some(s.spawn(move || match (fault, set) {
            (SetFault::Dropped, Client::Async(ac)) => {
                let r = ac.rt.block_on(async {
                    tokio::time::timeout(set_max, ac.client.lock_many(&[a, b], TTL)).await
                });
                let at = Instant::now();
                assert!(r.is_err(), "the set's future ran to its end: {r:?}");
                at
            }
            _ => {
                let r = set.lock_many_within(
                    &[a, b],
                    TTL,
                    if matches!(fault, SetFault::GivesUp) {
                        set_max
                    } else {
                        Duration::from_secs(8)
                    },
                );
                let at = Instant::now();
                if let Ok(l) = &r {
                    let _ = set.unlock(l);
                }
                at
            }
        }));
        wait_until(Duration::from_secs(5), "the set in both lines", || {
            in_line(&nodes, a, "set") == 3 && in_line(&nodes, b, "set") == 3
        });
        let single_thread = s.spawn(|| {
            let l = single.lc().lock(a, TTL).expect("the single's lock");
            let at = Instant::now();
            single.release_logged(&l, "the single's release");
            at
        });
        wait_until(Duration::from_secs(5), "the single in a's line", || {
            in_line(&nodes, a, "single") == 3
        });
        holder.release_logged(&la, "a released");
        let reserved = "redlock-mux:reserved:set".to_string();
        wait_until(Duration::from_secs(5), "a reserved for the set", || {
            testkit::review::holding(&nodes, a, reserved.as_bytes()) >= 2
        });
        let fault_at = match fault {
            SetFault::CutOff => {
                // Kept for two leases (renewed), then cut off.
                thread::sleep(lease * 2);
                let kept = testkit::review::holding(&nodes, a, reserved.as_bytes());
                assert!(kept >= 2, "the set kept a's reservation on {kept} masters");
                testkit::proxy::set_all(&proxies, Fault::Blackhole);
                Instant::now()
            }
            _ => {
                let at = set_thread.take().unwrap().join().expect("the set's thread");
                let kept = testkit::review::holding(&nodes, a, reserved.as_bytes());
                eprintln!("{kept} masters still reserve a for the set after it gave up");
                at
            }
        };
        let granted = single_thread.join().expect("the single's thread");
        let cost = granted.saturating_duration_since(fault_at);
        eprintln!("{fault:?} (async {asy}): the single was granted a {cost:?} after the fault");
        if matches!(fault, SetFault::CutOff) {
            testkit::proxy::set_all(&proxies, Fault::Pass);
            holder.release_logged(&lb, "b released");
            let _ = set_thread.take().unwrap().join();
        } else {
            holder.release_logged(&lb, "b released");
        }
        (cost, slack)
    })
}

/// Claim 4: a set that keeps a reservation and gives up, is cut off, or is dropped costs the
/// single behind it about a claim lease (200 ms): bound two leases and the slack measured in
/// the run, against the 6 s the holder of the set's other resource holds.
fn a_faulty_set_costs_the_waiter_behind_about_a_lease(fault: SetFault, asy: bool) {
    let (cost, slack) = cost_of_a_set_fault(fault, asy);
    let bound = Duration::from_millis(200) * 2 + slack;
    assert!(
        cost <= bound,
        "{fault:?}: the single waited {cost:?} after the fault; bound {bound:?}"
    );
}

#[test]
fn a_set_that_gives_up_costs_the_waiter_behind_about_a_lease_blocking() {
    a_faulty_set_costs_the_waiter_behind_about_a_lease(SetFault::GivesUp, false);
}

#[test]
fn a_set_that_gives_up_costs_the_waiter_behind_about_a_lease_async() {
    a_faulty_set_costs_the_waiter_behind_about_a_lease(SetFault::GivesUp, true);
}

#[test]
fn a_set_cut_off_costs_the_waiter_behind_about_a_lease_blocking() {
    a_faulty_set_costs_the_waiter_behind_about_a_lease(SetFault::CutOff, false);
}

#[test]
fn a_set_whose_future_is_dropped_costs_the_waiter_behind_about_a_lease() {
    a_faulty_set_costs_the_waiter_behind_about_a_lease(SetFault::Dropped, true);
}

/// Claim 4 (shared place). One client waits with a set {a, b} and a single on `a` (both
/// behind holders). The set gives up: the client keeps its place in `a`'s line, and the
/// single is granted `a` within four leases of `a`'s release (its timer is the holder's
/// 10 s ttl). Then again with the single served first: the set keeps its place in `b`'s
/// line and is granted the set within four leases of the last release.
fn a_set_and_a_single_of_one_client_keep_their_shared_place(asy: bool) {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let (a, b) = (resource("share-a"), resource("share-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = fair(&nodes, "holder", lease, false);
    let bound = lease * 2 + slack(&holder);
    let x = fair(&nodes, "x", lease, asy);
    // Round 1: the set gives up; the single keeps the place.
    let la = holder.lc().lock(a, TTL).expect("a");
    let lb = holder.lc().lock(b, TTL).expect("b");
    thread::scope(|s| {
        let set = s.spawn(|| x.lock_many_within(&[a, b], TTL, Duration::from_millis(1200)));
        wait_until(Duration::from_secs(5), "the set in both lines", || {
            in_line(&nodes, a, "x") == 3 && in_line(&nodes, b, "x") == 3
        });
        let single = s.spawn(|| {
            let l = x.lc().lock(a, TTL).expect("the single");
            let at = Instant::now();
            x.release_logged(&l, "released");
            at
        });
        let r = set.join().expect("the set's thread");
        assert!(
            r.is_err(),
            "the set was granted while both were held: {r:?}"
        );
        // The single still waits: its place in a's line stays; b's line is left.
        wait_until(Duration::from_secs(2), "b's line left by the set", || {
            in_line(&nodes, b, "x") == 0
        });
        let kept = in_line(&nodes, a, "x");
        assert_eq!(
            kept,
            3,
            "the set's give-up took the single's place out of a's line on {} masters",
            3 - kept
        );
        let released = Instant::now();
        release(&holder, &la, &nodes, "round 1: a");
        let granted = single.join().expect("the single's thread");
        let cost = granted.saturating_duration_since(released);
        eprintln!("round 1 (async {asy}): the single was granted a {cost:?} after its release");
        assert!(
            cost <= bound,
            "the single waited {cost:?} after a's release; bound {bound:?}"
        );
    });
    // Round 2: the single is served while the set waits; the set keeps its place in b's line
    // (and is served when b goes).
    let la = holder.lc().lock(a, TTL).expect("a again");
    thread::scope(|s| {
        let set = s.spawn(|| {
            let l = x.lock_many_within(&[a, b], TTL, Duration::from_secs(8));
            let at = Instant::now();
            if let Ok(l) = &l {
                x.release_logged(l, "the set's release");
            }
            (l.map(|_| ()), at)
        });
        wait_until(Duration::from_secs(5), "the set in both lines", || {
            in_line(&nodes, a, "x") == 3 && in_line(&nodes, b, "x") == 3
        });
        let single = s.spawn(|| {
            let l = x
                .lock_within(a, TTL, Duration::from_secs(8))
                .expect("the single");
            x.release_logged(&l, "released");
        });
        thread::sleep(lease);
        release(&holder, &la, &nodes, "round 2: a");
        single.join().expect("the single's thread");
        wait_until(
            Duration::from_secs(2),
            "the set back in a's line, still in b's",
            || in_line(&nodes, b, "x") == 3,
        );
        let released = Instant::now();
        release(&holder, &lb, &nodes, "round 2: b");
        let (r, at) = set.join().expect("the set's thread");
        r.expect("the set once both were free");
        let cost = at.saturating_duration_since(released);
        eprintln!("round 2 (async {asy}): the set was granted {cost:?} after b's release");
        assert!(
            cost <= bound,
            "the set waited {cost:?} after b's release; bound {bound:?}"
        );
    });
}

#[test]
fn a_set_and_a_single_of_one_client_keep_their_shared_place_blocking() {
    a_set_and_a_single_of_one_client_keep_their_shared_place(false);
}

#[test]
fn a_set_and_a_single_of_one_client_keep_their_shared_place_async() {
    a_set_and_a_single_of_one_client_keep_their_shared_place(true);
}

/// Claim 5 (the lines key). A set of resources with odd names (a space, a leading `+ `, a
/// name that spells the lines key's prefix and a length, an empty-looking name with NULs,
/// a long one) waits in line behind a holder of 10 s and is woken by the release's bell:
/// granted within four leases of the release. A set of one resource waits as a single. A
/// set naming one resource twice is refused.
#[test]
fn sets_of_odd_names_are_woken_by_their_bells() {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let holder = fair(&nodes, "holder", lease, false);
    let set = fair(&nodes, "set", lease, false);
    let bound = lease * 2 + slack(&holder);
    let long = format!("long-{}", "y".repeat(3000));
    let lines_like = format!(
        "{}\u{0}\u{0}\u{0}\u{1}z",
        redlock_mux::redlock_core::command::LINES_PREFIX
    );
    let odd: Vec<Vec<String>> = vec![
        vec!["odd a b".into(), "+ odd".into()],
        vec![lines_like.clone(), "z".into()],
        vec!["\u{0}\u{0}".into(), "\u{0}".into(), long.clone()],
        vec![resource("one")],
    ];
    for names in &odd {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        // The holder holds the last of them, the longest to read.
        let held = *refs.last().unwrap();
        let l = holder.lc().lock(held, TTL).expect("held");
        thread::scope(|s| {
            let t = s.spawn(|| {
                let r = set.lock_many_within(&refs, TTL, Duration::from_secs(8));
                let at = Instant::now();
                if let Ok(l) = &r {
                    set.release_logged(l, "released");
                }
                (r.map(|_| ()), at)
            });
            wait_until(Duration::from_secs(5), "the set in line", || {
                in_line(&nodes, held, "set") == 3
            });
            let released = Instant::now();
            holder.release_logged(&l, "released");
            let (r, at) = t.join().expect("the set's thread");
            r.unwrap_or_else(|e| panic!("the set {names:?}: {e}"));
            let cost = at.saturating_duration_since(released);
            eprintln!(
                "set of {} odd names granted {cost:?} after the release",
                refs.len()
            );
            assert!(
                cost <= bound,
                "the set {:?} waited {cost:?} after the release; bound {bound:?}",
                &refs
            );
        });
    }
    let r = resource("dup");
    let e = set.lock_many_within(&[&r, &r], TTL, Duration::from_secs(1));
    assert!(
        matches!(e, Err(Error::Config(_))),
        "a set naming one resource twice: {e:?}"
    );
}

/// Claim 5 (near the limit). A set of 1024 resources (`MAX_RESOURCES`), one held by a fair
/// holder for 10 s, waits in all 1024 lines and is granted within a bound after the release
/// (ten leases plus what the first try took, measured); 1025 is refused.
#[test]
fn a_set_of_max_resources_waits_in_every_line_and_is_served() {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let holder = fair(&nodes, "holder", lease, false);
    let set = fair(&nodes, "big", lease, false);
    let names: Vec<String> = (0..redlock_mux::MAX_RESOURCES)
        .map(|i| format!("big:{i}"))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // Measure a free try of the whole set.
    let t0 = Instant::now();
    let l = set
        .lock_many_within(&refs, TTL, Duration::from_secs(5))
        .expect("free set");
    let round = t0.elapsed();
    set.release_logged(&l, "released");
    let held = refs[700];
    let hl = holder.lc().lock(held, TTL).expect("held");
    thread::scope(|s| {
        let t = s.spawn(|| {
            let r = set.lock_many_within(&refs, TTL, Duration::from_secs(9));
            let at = Instant::now();
            if let Ok(l) = &r {
                set.release_logged(l, "released");
            }
            (r.map(|_| ()), at)
        });
        wait_until(Duration::from_secs(8), "the set in every line", || {
            in_line(&nodes, refs[0], "big") == 3 && in_line(&nodes, held, "big") == 3
        });
        let released = Instant::now();
        holder.release_logged(&hl, "released");
        let (r, at) = t.join().expect("the set's thread");
        r.expect("the big set");
        let cost = at.saturating_duration_since(released);
        let bound = lease * 10 + round * 4;
        eprintln!("1024 resources: free try {round:?}; granted {cost:?} after the release; bound {bound:?}");
        assert!(
            cost <= bound,
            "the big set waited {cost:?} after the release; bound {bound:?}"
        );
    });
    for n in &refs[..4] {
        assert_eq!(
            in_line(&nodes, n, "big"),
            0,
            "the served set left in {n}'s line"
        );
    }
    let mut over = refs.clone();
    let extra = "big:extra".to_string();
    over.push(&extra);
    let e = set.lock_many_within(&over, TTL, Duration::from_secs(1));
    assert!(matches!(e, Err(Error::Config(_))), "1025 resources: {e:?}");
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

/// Sets {a, b} of `n` clients that stand in their lines in a different order on each live
/// master: set `i` heads both lines on master `i`, as two sets that join within microseconds
/// of each other can stand (docs: "two waiters that join within microseconds may then stand
/// in different orders on different masters"; a set's place is never moved to one ticket).
/// The places are made by hand before the sets wait (their waits keep a place they have);
/// with `dead`, master 2 is stopped and two sets split masters 0 and 1. A holder of both
/// resources releases them once every set waits. Answers, per set, whether and how long after
/// the release it was granted (each gives up 4 s after it asked), and the reservations seen
/// 1 s after the release.
fn sets_ordered_differently(n: usize, dead: bool) -> (Vec<Option<Duration>>, Duration) {
    let mut c = cluster(3);
    let nodes = c.addrs();
    if dead {
        c.server(2).stop();
    }
    let live: Vec<String> = if dead {
        nodes[..2].to_vec()
    } else {
        nodes.clone()
    };
    let lease = Duration::from_millis(200);
    let (a, b) = (resource("split-a"), resource("split-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = client_of(opts(&nodes, true, "holder", lease), false, &live);
    let bound = lease * 5 + slack(&holder);
    let sets: Vec<Client> = (0..n)
        .map(|i| {
            client_of(
                opts(&nodes, true, &format!("split{i}"), lease),
                i % 2 == 1,
                &live,
            )
        })
        .collect();
    let la = holder.lc().lock(a, TTL).expect("a");
    let lb = holder.lc().lock(b, TTL).expect("b");
    for (m, addr) in live.iter().enumerate() {
        for key in [a, b] {
            let q = testkit::review::line(key);
            for k in 0..n {
                let score = ((k + n - m) % n + 1).to_string();
                redis(addr, &["ZADD", &q, &score, &format!("split{k}")]);
            }
            redis(addr, &["PEXPIRE", &q, "60000"]);
        }
    }
    let released = Mutex::new(None::<Instant>);
    let mut reserved = Vec::new();
    let out = thread::scope(|s| {
        let handles: Vec<_> = sets
            .iter()
            .map(|set| {
                let released = &released;
                s.spawn(move || {
                    let r = set.lock_many_within(&[a, b], TTL, Duration::from_secs(4));
                    let at = Instant::now();
                    if let Ok(l) = &r {
                        thread::sleep(Duration::from_millis(2));
                        set.release_logged(l, "the set's release");
                    }
                    let rel = released.lock().unwrap().expect("released before any grant");
                    r.ok().map(|_| at.saturating_duration_since(rel))
                })
            })
            .collect();
        // Every set has read its lines once (its first try and wait went out).
        thread::sleep(Duration::from_millis(300));
        for m in &live {
            eprintln!(
                "{m}: a's line {:?}, b's line {:?}",
                line_on(m, a),
                line_on(m, b)
            );
        }
        *released.lock().unwrap() = Some(Instant::now());
        holder.release_logged(&la, "a released");
        holder.release_logged(&lb, "b released");
        thread::sleep(Duration::from_secs(1));
        for m in &live {
            reserved.push(format!(
                "{m}: a {:?} b {:?}",
                testkit::get(m, a),
                testkit::get(m, b)
            ));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a set's thread"))
            .collect::<Vec<_>>()
    });
    eprintln!("1 s after the release: {reserved:?}");
    eprintln!("sets granted after the release: {out:?}; bound {bound:?}");
    (out, bound)
}

/// Claim 2 (no deadlock between sets) where the masters order the sets differently: set `i`
/// heads both lines on master `i` alone, so that each keeps its reservations on one master
/// of three and none has a quorum. Expected: one of them is served within a few leases of
/// the release (bound five leases and the slack measured in the run), the others after it.
#[test]
fn three_sets_ordered_differently_on_each_master_are_served() {
    let (out, bound) = sets_ordered_differently(3, false);
    assert!(
        out.iter().flatten().any(|d| *d <= bound),
        "no set was granted within {bound:?} of the release: {out:?}"
    );
    assert!(
        out.iter().all(Option::is_some),
        "a set gave up after 4 s: {out:?}"
    );
}

/// The same with one master of three stopped: two sets, each heading both lines on one of
/// the two live masters.
#[test]
fn two_sets_ordered_differently_with_a_master_down_are_served() {
    let (out, bound) = sets_ordered_differently(2, true);
    assert!(
        out.iter().flatten().any(|d| *d <= bound),
        "no set was granted within {bound:?} of the release: {out:?}"
    );
    assert!(
        out.iter().all(Option::is_some),
        "a set gave up after 4 s: {out:?}"
    );
}

/// Claim (passes on). A set {a, b} heads `a`'s line but stands behind a fair single in `b`'s
/// line (both resources held for 10 s); a single of a third client waits behind the set in
/// `a`'s line. When `a` is released the set, rung for it, passes it on at once: the single
/// behind it is granted `a` within four leases of the release, not when `b` goes; the set
/// keeps its place in `a`'s line. Both clients.
fn a_set_not_heading_every_line_passes_a_reservation_on(asy: bool) {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let (a, b) = (resource("pass-a"), resource("pass-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = fair(&nodes, "holder", lease, false);
    let first = fair(&nodes, "first", lease, !asy);
    let set = fair(&nodes, "set", lease, asy);
    let behind = fair(&nodes, "behind", lease, !asy);
    let bound = lease * 2 + slack(&holder);
    let la = holder.lc().lock(a, TTL).expect("a");
    let lb = holder.lc().lock(b, TTL).expect("b");
    thread::scope(|s| {
        let f = s.spawn(|| {
            let l = first
                .lock_within(b, TTL, Duration::from_secs(9))
                .expect("first's b");
            first.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "first in b's line", || {
            in_line(&nodes, b, "first") == 3
        });
        let st = s.spawn(|| {
            let r = set.lock_many_within(&[a, b], TTL, Duration::from_secs(9));
            if let Ok(l) = &r {
                set.release_logged(l, "released");
            }
            r.map(|_| ())
        });
        wait_until(Duration::from_secs(5), "the set in both lines", || {
            in_line(&nodes, a, "set") == 3 && in_line(&nodes, b, "set") == 3
        });
        let w = s.spawn(|| {
            let l = behind
                .lock_within(a, TTL, Duration::from_secs(9))
                .expect("behind's a");
            let at = Instant::now();
            behind.release_logged(&l, "released");
            at
        });
        wait_until(Duration::from_secs(5), "behind in a's line", || {
            in_line(&nodes, a, "behind") == 3
        });
        let released = Instant::now();
        holder.release_logged(&la, "a released");
        let granted = w.join().expect("behind's thread");
        let cost = granted.saturating_duration_since(released);
        eprintln!(
            "async {asy}: the single behind the set was granted a {cost:?} after its release"
        );
        let kept = in_line(&nodes, a, "set");
        holder.release_logged(&lb, "b released");
        f.join().expect("first's thread");
        st.join()
            .expect("the set's thread")
            .expect("the set once b went");
        assert!(
            cost <= bound,
            "the single behind the set waited {cost:?} after a's release; bound {bound:?}"
        );
        assert_eq!(
            kept, 3,
            "the set kept its place in a's line on {kept} masters of 3"
        );
    });
}

#[test]
fn a_set_not_heading_every_line_passes_a_reservation_on_blocking() {
    a_set_not_heading_every_line_passes_a_reservation_on(false);
}

#[test]
fn a_set_not_heading_every_line_passes_a_reservation_on_async() {
    a_set_not_heading_every_line_passes_a_reservation_on(true);
}

/// Claim (a set keeps its place while it waits; "rung anywhere else, it passes the
/// reservation on at once ... and keeps its place", and "such reads are no tries"). A set
/// {a, b} of a client with the default 3 tries heads `a`'s line, whose three fair singles
/// keep taking turns, while a holder holds `b` for 1.5 s. Every release of `a` rings the set
/// (it heads the line), which claims, fails on `b`, and passes `a` on: a claim is a try. A
/// single of 3 tries waiting for `b` alone would be rung once. Expected: the set is granted
/// once `b` goes (within five leases and the measured slack of its release), as the single
/// would be.
fn a_set_with_default_tries_survives_a_busy_line_it_heads(
    asy: bool,
    single: bool,
    first_on_b: bool,
) -> Result<Duration, String> {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(100);
    let (a, b) = (resource("tries-a"), resource("tries-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = fair(&nodes, "holder", lease, false);
    let singles: Vec<Client> = (0..3)
        .map(|i| fair(&nodes, &format!("w{i}"), lease, false))
        .collect();
    let set = client_of(options(&nodes, true, "set", lease, 3), asy, &nodes);
    let bound = lease * 5 + slack(&holder);
    let lb = holder.lc().lock(b, TTL).expect("b");
    let first = fair(&nodes, "first", lease, false);
    let stop = AtomicBool::new(false);
    let turns = AtomicU64::new(0);
    thread::scope(|s| {
        for w in &singles {
            let (stop, turns) = (&stop, &turns);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let l = w
                        .lock_within(a, TTL, Duration::from_secs(5))
                        .expect("a single's turn");
                    thread::sleep(Duration::from_millis(10));
                    w.release_logged(&l, "a single's release");
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        wait_until(Duration::from_secs(5), "the singles taking turns", || {
            turns.load(Ordering::Relaxed) >= 10
        });
        let first = &first;
        let ft = first_on_b.then(|| {
            s.spawn(move || {
                let l = first
                    .lock_within(b, TTL, Duration::from_secs(9))
                    .expect("first's b");
                first.release_logged(&l, "released");
            })
        });
        if first_on_b {
            wait_until(Duration::from_secs(5), "first in b's line", || {
                in_line(&nodes, b, "first") == 3
            });
        }
        let started = Instant::now();
        let t = s.spawn(|| {
            let r = if single {
                set.lc().lock(b, TTL)
            } else {
                set.lc().lock_many(&[a, b], TTL)
            };
            let at = Instant::now();
            if let Ok(l) = &r {
                set.release_logged(l, "the set's release");
            }
            (r.map(|_| ()), at)
        });
        let before = turns.load(Ordering::Relaxed);
        // Bounded: the set's call returns, or 1.5 s pass.
        while !t.is_finished() && started.elapsed() < Duration::from_millis(1500) {
            thread::sleep(Duration::from_millis(5));
        }
        let during = turns.load(Ordering::Relaxed) - before;
        let released = Instant::now();
        holder.release_logged(&lb, "b released");
        let (r, at) = t.join().expect("the set's thread");
        stop.store(true, Ordering::Relaxed);
        if let Some(ft) = ft {
            ft.join().expect("first's thread");
        }
        let stats = set.lc().stats();
        let msg = format!(
            "async {asy}, single {single}: the set {} after {:?} ({during} turns of a's singles before b's release at {:?}; stats tries {} claims {})",
            match &r { Ok(()) => "was granted".to_string(), Err(e) => format!("failed ({e})") },
            at - started,
            released - started,
            stats.tries,
            stats.claims,
        );
        eprintln!("{msg}");
        match r {
            Ok(()) if at >= released && at - released <= bound => Ok(at - released),
            _ => Err(msg),
        }
    })
}

#[test]
fn a_set_with_default_tries_survives_a_busy_line_it_heads_blocking() {
    if let Err(m) = a_set_with_default_tries_survives_a_busy_line_it_heads(false, false, false) {
        panic!("{m}");
    }
}

#[test]
fn a_set_with_default_tries_survives_a_busy_line_it_heads_async() {
    if let Err(m) = a_set_with_default_tries_survives_a_busy_line_it_heads(true, false, false) {
        panic!("{m}");
    }
}

/// The control of the test above: a single of the same client (3 tries) waiting for `b`
/// alone, beside the same busy line of `a`, is granted once `b` goes.
#[test]
fn a_single_with_default_tries_waits_for_a_held_resource() {
    if let Err(m) = a_set_with_default_tries_survives_a_busy_line_it_heads(false, true, false) {
        panic!("{m}");
    }
}

/// As above, with a fair single standing ahead of the set in `b`'s line: the set heads `a`'s
/// line but not `b`'s, so every release of `a` rings it, and it passes `a` on.
#[test]
fn a_set_behind_one_waiter_survives_a_busy_line_it_heads_blocking() {
    if let Err(m) = a_set_with_default_tries_survives_a_busy_line_it_heads(false, false, true) {
        panic!("{m}");
    }
}

#[test]
fn a_set_behind_one_waiter_survives_a_busy_line_it_heads_async() {
    if let Err(m) = a_set_with_default_tries_survives_a_busy_line_it_heads(true, false, true) {
        panic!("{m}");
    }
}

/// The control: a single of 3 tries standing where the set stood (behind one waiter in `b`'s
/// line) is granted once `b` goes.
#[test]
fn a_single_behind_one_waiter_with_default_tries_is_served() {
    if let Err(m) = a_set_with_default_tries_survives_a_busy_line_it_heads(false, true, true) {
        panic!("{m}");
    }
}

/// Claim (a dropped future leaves the lines). An async set {a, b} whose `lock_many` future is
/// dropped again and again at times spread over its first try, its wait and its claims (1 to
/// 13 ms), while fair singles keep both lines busy: once it stops, its client stands in no
/// line on any master (a place left behind would cost a waiter one claim lease at every
/// hand-off that rang it), and the singles' turns go on.
#[test]
fn a_set_dropped_at_any_point_leaves_no_place_behind() {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(100);
    let (a, b) = (resource("drop-a"), resource("drop-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let singles: Vec<(Client, &str)> = (0..4)
        .map(|i| {
            (
                fair(&nodes, &format!("busy{i}"), lease, false),
                if i < 2 { a } else { b },
            )
        })
        .collect();
    let dropper = fair(&nodes, "dropper", lease, true);
    let stop = AtomicBool::new(false);
    let turns = AtomicU64::new(0);
    let (mut dropped, mut won) = (0, 0);
    thread::scope(|s| {
        for (w, r) in &singles {
            let (stop, turns) = (&stop, &turns);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let l = w
                        .lock_within(r, TTL, Duration::from_secs(5))
                        .expect("a single's turn");
                    thread::sleep(Duration::from_millis(3));
                    w.release_logged(&l, "a single's release");
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        wait_until(Duration::from_secs(5), "the singles taking turns", || {
            turns.load(Ordering::Relaxed) >= 10
        });
        let Client::Async(ac) = &dropper else {
            unreachable!()
        };
        for i in 0..60u64 {
            let cut = Duration::from_millis(1 + (i * 7) % 13);
            let r = ac.rt.block_on(async {
                tokio::time::timeout(cut, ac.client.lock_many(&[a, b], TTL)).await
            });
            match r {
                Ok(Ok(l)) => {
                    won += 1;
                    ac.rt.block_on(ac.client.unlock(&l)).expect("released");
                }
                Ok(Err(e)) => panic!("the set failed: {e}"),
                Err(_) => dropped += 1,
            }
        }
        // Let the client send what its drops owe.
        dropper.lc().idle(Duration::from_millis(50));
        let before = turns.load(Ordering::Relaxed);
        let t0 = Instant::now();
        wait_until(
            Duration::from_secs(3),
            "the dropped set out of every line",
            || {
                dropper.lc().idle(Duration::from_millis(2));
                in_line(&nodes, a, "dropper") == 0 && in_line(&nodes, b, "dropper") == 0
            },
        );
        let settled = t0.elapsed();
        thread::sleep(lease * 3);
        let after = turns.load(Ordering::Relaxed) - before;
        stop.store(true, Ordering::Relaxed);
        eprintln!(
            "{dropped} dropped, {won} won; out of the lines {settled:?} after; {after} turns after"
        );
        assert!(
            after >= 3,
            "the singles' turns stalled after the drops: {after}"
        );
    });
}

/// Claim 4 (the shared place is served once). One client `x` waits with a set {a, b} (or,
/// `two_singles`, a single) and a single on `a`, ahead of a waiter of another client `y` on
/// `a` (`a` held, `b` free). The docs: a client's waiters share one place in a line, and a
/// place is served once, like one waiter's: the first of `x`'s waiters to claim it takes it,
/// the others join again at the back (behind `y`), so that a client gets one turn per trip
/// through the line whatever its number of threads (a place kept through its own turns would
/// let a client with a steady stream of waiters hold the head for ever: see
/// `a_client_with_many_waiters_gets_one_turn_per_trip`). Expected: one of `x`'s waiters, `y`,
/// then `x`'s other (before session 19 three ignored tests asked for both of `x`'s first).
fn the_shared_place_is_served_once(asy: bool, two_singles: bool) {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let (a, b) = (resource("both-a"), resource("both-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = fair(&nodes, "holder", lease, false);
    let x = fair(&nodes, "x", lease, asy);
    let y = fair(&nodes, "y", lease, !asy);
    let la = holder.lc().lock(a, TTL).expect("a");
    let order = Mutex::new(Vec::<(&str, Instant)>::new());
    thread::scope(|s| {
        let order = &order;
        let (x, y) = (&x, &y);
        let set = s.spawn(move || {
            let l = if two_singles {
                x.lock_within(a, TTL, Duration::from_secs(5))
            } else {
                x.lock_many_within(&[a, b], TTL, Duration::from_secs(5))
            };
            let l = l.expect("x's set");
            order.lock().unwrap().push(("x-set", Instant::now()));
            thread::sleep(Duration::from_millis(50));
            x.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "x's set in a's line", || {
            in_line(&nodes, a, "x") == 3
        });
        let single = s.spawn(move || {
            let l = x
                .lock_within(a, TTL, Duration::from_secs(5))
                .expect("x's single");
            order.lock().unwrap().push(("x-single", Instant::now()));
            thread::sleep(Duration::from_millis(50));
            x.release_logged(&l, "released");
        });
        // (x's single has joined: its first try is refused everywhere, a is held.)
        thread::sleep(Duration::from_millis(100));
        let other = s.spawn(move || {
            let l = y.lock_within(a, TTL, Duration::from_secs(5)).expect("y");
            order.lock().unwrap().push(("y", Instant::now()));
            y.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "y in a's line", || {
            in_line(&nodes, a, "y") == 3
        });
        holder.release_logged(&la, "a released");
        set.join().expect("x's set");
        single.join().expect("x's single");
        other.join().expect("y");
    });
    let order = order.into_inner().unwrap();
    let t0 = order[0].1;
    let seen: Vec<(&str, Duration)> = order.iter().map(|(w, t)| (*w, *t - t0)).collect();
    eprintln!("async {asy}, two singles {two_singles}: served in order {seen:?}");
    let who: Vec<&str> = order.iter().map(|o| o.0).collect();
    assert_eq!(who.len(), 3, "{seen:?}");
    assert!(
        who[0] != "y" && who[1] == "y" && who[2] != "y",
        "async {asy}: the shared place was not served once (x's first waiter, then y, which stood behind it, then x's other): {seen:?}"
    );
}

#[test]
fn the_shared_place_is_served_once_blocking() {
    the_shared_place_is_served_once(false, false);
}

#[test]
fn the_shared_place_is_served_once_async() {
    the_shared_place_is_served_once(true, false);
}

/// As above, with two singles of one client in place of the set and the single.
#[test]
fn the_shared_place_of_two_singles_is_served_once() {
    the_shared_place_is_served_once(false, true);
}

/// Claim 4' (no client holds a line with its number of threads). Client `x` runs four
/// threads and `y` one, each looping lock `a` - hold 2 ms - unlock, for 1.5 s: with one turn
/// per trip through the line per client, `y` is served about as often as `x`. Bound: `y` gets
/// at least a third of `x`'s turns (a place kept through its own turns would leave `y` next
/// to none). Measured (session 19, four runs, one beside a CPU-bound test loop): `y` got
/// 0.57-0.82 of `x`'s turns (`x` 71-207): `x`'s refused waiters join again at once, and
/// sometimes before `y` does after its release.
#[test]
fn a_client_with_many_waiters_gets_one_turn_per_trip() {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let a = resource("trip-a");
    let a = a.as_str();
    let x = fair(&nodes, "x", lease, false);
    let y = fair(&nodes, "y", lease, true);
    let stop = AtomicBool::new(false);
    let (xs, ys) = (AtomicU64::new(0), AtomicU64::new(0));
    let book = Book::default();
    let turn = |cl: &Client, n: &AtomicU64, who: &str| {
        while !stop.load(Ordering::Relaxed) {
            let l = cl
                .lock_within(a, TTL, Duration::from_secs(10))
                .expect("a turn");
            let from = Instant::now();
            thread::sleep(Duration::from_millis(2));
            book.add(who, &[a], &l, from, Instant::now());
            cl.release_logged(&l, "a turn");
            n.fetch_add(1, Ordering::Relaxed);
        }
    };
    let turn = &turn;
    thread::scope(|s| {
        for _ in 0..4 {
            let (x, xs) = (&x, &xs);
            s.spawn(move || turn(x, xs, "x"));
        }
        let (y, ys) = (&y, &ys);
        s.spawn(move || turn(y, ys, "y"));
        thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
    });
    let (xs, ys) = (xs.into_inner(), ys.into_inner());
    eprintln!("turns: x (4 threads) {xs}, y (1 thread) {ys}");
    let v = book.violations();
    assert!(v.is_empty(), "{v:?}");
    assert!(
        xs >= 10 && ys >= 10,
        "too few turns to judge: x {xs}, y {ys}"
    );
    assert!(
        ys * 3 >= xs,
        "x's four threads held the line: x {xs} turns, y {ys}"
    );
}

/// Claim (what a set costs a line it passes on in). Three fair singles take turns on `a`
/// (lock, unlock, no hold) for 1 s alone, then 1 s with a set {a, b} (lock_many_within, so
/// that it keeps waiting) standing at the head of `a`'s line and behind a waiter in `b`'s
/// line (`b` held throughout): every release of `a` rings the set, whose claim passes `a`
/// on to the next single. The docs count the cost as a `ZRANK` when a set passes on; the
/// hop through the set's client is a bell, a wake and a claim round more per hand-off.
/// Measured: 910 and 927 turns alone against 632 and 588 beside the set (0.64-0.69x); 761
/// against 296 (0.39x) with two CPU hogs running. Bound: the line keeps a fifth of its turns.
#[test]
fn a_set_passing_on_at_every_hand_off_costs_the_line_a_bounded_share() {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(100);
    let (a, b) = (resource("hop-a"), resource("hop-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = fair(&nodes, "holder", lease, false);
    let first = fair(&nodes, "first", lease, false);
    let set = fair(&nodes, "set", lease, false);
    let singles: Vec<Client> = (0..3)
        .map(|i| fair(&nodes, &format!("h{i}"), lease, i == 1))
        .collect();
    let lb = holder.lc().lock(b, TTL).expect("b");
    let stop = AtomicBool::new(false);
    let turns = AtomicU64::new(0);
    let (alone, beside) = thread::scope(|s| {
        for w in &singles {
            let (stop, turns) = (&stop, &turns);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let l = w
                        .lock_within(a, TTL, Duration::from_secs(5))
                        .expect("a single's turn");
                    w.release_logged(&l, "a single's release");
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        wait_until(Duration::from_secs(5), "the singles taking turns", || {
            turns.load(Ordering::Relaxed) >= 10
        });
        let t0 = turns.load(Ordering::Relaxed);
        thread::sleep(Duration::from_secs(1));
        let alone = turns.load(Ordering::Relaxed) - t0;
        let first = &first;
        let f = s.spawn(move || {
            let l = first
                .lock_within(b, TTL, Duration::from_secs(6))
                .expect("first's b");
            first.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "first in b's line", || {
            in_line(&nodes, b, "first") == 3
        });
        let set = &set;
        let st = s.spawn(move || {
            let l = set
                .lock_many_within(&[a, b], TTL, Duration::from_secs(6))
                .expect("the set");
            set.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "the set heading a's line", || {
            nodes
                .iter()
                .all(|m| line_on(m, a).first().map(String::as_str) == Some("set"))
        });
        let t1 = turns.load(Ordering::Relaxed);
        thread::sleep(Duration::from_secs(1));
        let beside = turns.load(Ordering::Relaxed) - t1;
        let still = nodes
            .iter()
            .filter(|m| line_on(m, a).first().map(String::as_str) == Some("set"))
            .count();
        stop.store(true, Ordering::Relaxed);
        holder.release_logged(&lb, "b released");
        f.join().expect("first's thread");
        st.join().expect("the set's thread");
        eprintln!("a's turns in 1 s: {alone} alone, {beside} with the set at its head (still at the head on {still} masters)");
        (alone, beside)
    });
    assert!(
        beside * 5 >= alone,
        "a's line took {beside} turns beside the set against {alone} alone"
    );
}

/// Claim (a set keeps what it heads, renewed every half lease, while it waits). A set {a, b}
/// heads both lines and keeps `a`'s reservation (200 ms lease) while a holder holds `b` for
/// 1.4 s; a single waits behind it on `a`. Master 2 is SIGSTOPped for 1 s meanwhile
/// (`pause`), or answers the set 400 ms late (`slow`; a quorum of fast masters stays). The
/// set's reads, which renew the reservation, should go on at the two live masters. Expected:
/// the set is served first when `b` goes (within five leases and the measured slack), then
/// the single. Measured (2 runs each): paused, the single was granted `a` 1.004-1.005 s after
/// the pause began (as master 2 resumed), ~200 ms before `b` went; slow, 212 ms after the
/// slowness began (one lease): the set's renewals wait for its read round, which waits for
/// the slowest master, so its reservations on the fast masters lapse, and the lapse takes it
/// out of the head of `a`'s line. The control (no fault) serves the set first.
fn a_set_keeps_its_reservation_through_a_paused_master(
    pause: bool,
    slow: bool,
) -> Result<(), String> {
    let mut c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let (a, b) = (resource("pause-a"), resource("pause-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = fair(&nodes, "holder", lease, false);
    // With `slow`, the set reaches master 2 through a proxy that delays its replies 400 ms
    // (two leases) while the holder holds b.
    let (proxies, behind) = testkit::proxy::in_front(&c, 2..3);
    let set = client_of(opts(&behind, true, "set", lease), false, &nodes);
    let single = fair(&nodes, "single", lease, true);
    let bound = lease * 5 + slack(&holder);
    let la = holder.lc().lock(a, TTL).expect("a");
    let lb = holder.lc().lock(b, TTL).expect("b");
    let order = Mutex::new(Vec::<(&str, Instant)>::new());
    let mut released = Instant::now();
    let mut paused = Instant::now();
    thread::scope(|s| {
        let order = &order;
        let (set, single) = (&set, &single);
        let st = s.spawn(move || {
            let l = set
                .lock_many_within(&[a, b], TTL, Duration::from_secs(6))
                .expect("the set");
            order.lock().unwrap().push(("set", Instant::now()));
            set.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "the set in both lines", || {
            in_line(&nodes, a, "set") == 3 && in_line(&nodes, b, "set") == 3
        });
        let si = s.spawn(move || {
            let l = single
                .lock_within(a, TTL, Duration::from_secs(6))
                .expect("the single");
            order.lock().unwrap().push(("single", Instant::now()));
            single.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "the single in a's line", || {
            in_line(&nodes, a, "single") == 3
        });
        holder.release_logged(&la, "a released");
        thread::sleep(lease);
        paused = Instant::now();
        if pause {
            c.server(2).pause().expect("SIGSTOP");
        }
        if slow {
            proxies[0].set(Fault::Latency {
                fixed: lease * 2,
                jitter: Duration::ZERO,
            });
        }
        thread::sleep(Duration::from_secs(1));
        if pause {
            c.server(2).resume().expect("SIGCONT");
        }
        if slow {
            proxies[0].set(Fault::Pass);
        }
        thread::sleep(lease);
        released = Instant::now();
        holder.release_logged(&lb, "b released");
        st.join().expect("the set's thread");
        si.join().expect("the single's thread");
    });
    let order = order.into_inner().unwrap();
    let seen: Vec<(&str, Duration, Duration)> = order
        .iter()
        .map(|(w, t)| {
            (
                *w,
                t.saturating_duration_since(paused),
                t.saturating_duration_since(released),
            )
        })
        .collect();
    let msg = format!(
        "pause {pause}, slow {slow}: (who, after the pause began, after b's release): {seen:?}; b released {:?} after the pause began; bound {bound:?}",
        released - paused
    );
    eprintln!("{msg}");
    if order[0].0 != "set" || seen[0].2 > bound {
        return Err(msg);
    }
    Ok(())
}

#[test]
fn a_set_keeps_its_reservation_through_a_paused_master_paused() {
    a_set_keeps_its_reservation_through_a_paused_master(true, false).unwrap();
}

/// The same with master 2 slow (400 ms replies, two leases) for the set rather than paused.
#[test]
fn a_set_keeps_its_reservation_through_a_slow_master() {
    a_set_keeps_its_reservation_through_a_paused_master(false, true).unwrap();
}

/// The control: the same without the pause.
#[test]
fn a_set_keeps_its_reservation_through_a_paused_master_control() {
    a_set_keeps_its_reservation_through_a_paused_master(false, false).unwrap();
}

/// Claim 4 (shared place, the single gives up). One client waits with a set {a, b} and a
/// single on `a`, both held; the single gives up (`lock_within`'s deadline): the client keeps
/// its place in both lines for the set, and a waiter of another client that joined after it
/// is served after the set. Both clients.
fn a_single_giving_up_keeps_the_sets_place(asy: bool) {
    let c = cluster(3);
    let nodes = c.addrs();
    let lease = Duration::from_millis(200);
    let (a, b) = (resource("giveup-a"), resource("giveup-b"));
    let (a, b) = (a.as_str(), b.as_str());
    let holder = fair(&nodes, "holder", lease, false);
    let x = fair(&nodes, "x", lease, asy);
    let y = fair(&nodes, "y", lease, !asy);
    let bound = lease * 2 + slack(&holder);
    let la = holder.lc().lock(a, TTL).expect("a");
    let lb = holder.lc().lock(b, TTL).expect("b");
    let order = Mutex::new(Vec::<(&str, Instant)>::new());
    let mut released = Instant::now();
    thread::scope(|s| {
        let (x, y, order) = (&x, &y, &order);
        let set = s.spawn(move || {
            let l = x
                .lock_many_within(&[a, b], TTL, Duration::from_secs(5))
                .expect("x's set");
            order.lock().unwrap().push(("x-set", Instant::now()));
            x.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "x's set in both lines", || {
            in_line(&nodes, a, "x") == 3 && in_line(&nodes, b, "x") == 3
        });
        let r = x.lock_within(a, TTL, Duration::from_millis(600));
        assert!(r.is_err(), "x's single was granted a held resource: {r:?}");
        let other = s.spawn(move || {
            let l = y.lock_within(a, TTL, Duration::from_secs(5)).expect("y");
            order.lock().unwrap().push(("y", Instant::now()));
            y.release_logged(&l, "released");
        });
        wait_until(Duration::from_secs(5), "y in a's line", || {
            in_line(&nodes, a, "y") == 3
        });
        let kept = (in_line(&nodes, a, "x"), in_line(&nodes, b, "x"));
        assert_eq!(
            kept,
            (3, 3),
            "x's places in a's and b's lines after its single gave up"
        );
        released = Instant::now();
        holder.release_logged(&la, "a released");
        holder.release_logged(&lb, "b released");
        set.join().expect("x's set");
        other.join().expect("y");
    });
    let order = order.into_inner().unwrap();
    let seen: Vec<(&str, Duration)> = order
        .iter()
        .map(|(w, t)| (*w, t.saturating_duration_since(released)))
        .collect();
    eprintln!("async {asy}: after the releases {seen:?}; bound {bound:?}");
    assert_eq!(order[0].0, "x-set", "y overtook x's set: {seen:?}");
    assert!(
        seen[0].1 <= bound,
        "x's set was served {:?} after the releases; bound {bound:?}",
        seen[0].1
    );
}

#[test]
fn a_single_giving_up_keeps_the_sets_place_blocking() {
    a_single_giving_up_keeps_the_sets_place(false);
}

#[test]
fn a_single_giving_up_keeps_the_sets_place_async() {
    a_single_giving_up_keeps_the_sets_place(true);
}

/// Claim 1 (a lock is held until its release or its validity's end). In about one full
/// (parallel) run of this file in twelve, a release 7 ms to 300 ms after its grant found its
/// lock's token gone from two masters of three, one "key gone" and one "held by another
/// token", and only the third released: a set of
/// `a_set_of_three_among_busy_lines_is_served_within_a_measured_bound` (twice), the fair
/// holder of round 2 of `a_set_and_a_single_of_one_client_keep_their_shared_place_async`
/// (twice), a single of `a_set_passing_on_at_every_hand_off_costs_the_line_a_bounded_share`.
/// No tenure overlap was recorded. Found in session 19 (`tests/fair_taken.rs` sets it up): the
/// release ran on a master where the key had gone (the lock was granted without it) and one
/// where it deleted the token; both rang the waiter under the releasing token, whose claim
/// then took the third master from that token before the release got there, and the release
/// counted that master as held by another. The claim now records what it took, and the
/// release counts it as released. Runs the busy scenario three times and fails on any such
/// release.
#[test]
fn no_release_finds_its_lock_gone_among_busy_sets() {
    let lease = Duration::from_millis(100);
    let sets: [&[usize]; 3] = [&[0, 1, 2], &[2, 1], &[0, 2]];
    let mut all = Vec::new();
    for _ in 0..3 {
        let (_, _, book, unheld) = sets_beside_singles(&sets, 3, Duration::from_secs(3), lease);
        let v = book.violations();
        assert!(v.is_empty(), "{v:?}");
        all.extend(unheld);
    }
    assert!(all.is_empty(), "releases found their lock gone: {all:?}");
}
