//! A set of resources (`lock_many`) waiting beside fair waiters of its resources, on real
//! masters, both clients. Fair mode hands a released resource to the head of its line by
//! reserving it; a set stands in the line of each of its resources, keeps a reservation only
//! where it heads every one of them, and passes it on elsewhere (docs/redlock.md, "Sets and
//! the line"). Until session 18 a set stood in no line, and a line that never emptied starved
//! it: every try found the resource held or reserved (5 s, 1789 turns of three fair clients,
//! until they stopped).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use testkit::review::options;
use testkit::{cluster, resource, LockClient};

const TTL: Duration = Duration::from_secs(10);
const LEASE: Duration = Duration::from_millis(100);
const HOLD: Duration = Duration::from_millis(2);

type Client = Box<dyn LockClient + Send + Sync>;

/// A client (fair if `fair`) with id `id` on `nodes`, 10,000 tries 50 ms apart: the blocking
/// one, or (`asy`) the async one on its own two-thread runtime.
fn client(nodes: &[String], fair: bool, id: &str, asy: bool) -> Client {
    testkit::review::either_client(options(nodes, fair, id, LEASE, 10_000), asy)
}

/// Clients of the same mode take turns (lock, hold 2 ms, unlock) until the set is served,
/// `per[i]` of them on resource `i` of `shared` (a set of two); one more asks for the set
/// once the turns run, by `lock_many`. Answers how long the set waited, the mean time between
/// turns meanwhile (over all resources), and how many turns the others took while it waited.
fn set_beside_busy_lines(fair: bool, asy: bool, per: [usize; 2]) -> (Duration, Duration, u64) {
    let c = cluster(3);
    let nodes = c.addrs();
    let shared = [resource("set-a"), resource("set-b")];
    let stop = AtomicBool::new(false);
    let turns = AtomicU64::new(0);
    let singles: Vec<(Client, &str)> = (0..per[0] + per[1])
        .map(|i| {
            let r = if i < per[0] { &shared[0] } else { &shared[1] };
            (
                client(&nodes, fair, &format!("single-{i}"), asy),
                r.as_str(),
            )
        })
        .collect();
    let set = client(&nodes, fair, "set", asy);
    thread::scope(|s| {
        for (single, r) in &singles {
            let (stop, turns) = (&stop, &turns);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let l = single.lock(r, TTL).expect("a single's turn");
                    thread::sleep(HOLD);
                    single.unlock(&l).expect("a single's release");
                    turns.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // The lines are running once the others have had a few turns.
        let ready = 10 * singles.len() as u64;
        while turns.load(Ordering::Relaxed) < ready {
            thread::sleep(Duration::from_millis(5));
        }
        let before = turns.load(Ordering::Relaxed);
        let start = Instant::now();
        // Bounded: the set's tries run out (10,000 tries) or the others stop after 5 s (the
        // assertion then reports the wait), whichever comes first.
        let (set, shared, stop) = (&set, &shared, &stop);
        let waiter = s.spawn(move || {
            let l = set.lock_many(&[shared[0].as_str(), shared[1].as_str()], TTL);
            let waited = start.elapsed();
            stop.store(true, Ordering::Relaxed);
            (l, waited)
        });
        while !waiter.is_finished() && start.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(5));
        }
        let during = turns.load(Ordering::Relaxed) - before;
        let per_turn = start.elapsed() / u32::try_from(during.max(1)).unwrap_or(u32::MAX);
        stop.store(true, Ordering::Relaxed);
        let (l, waited) = waiter.join().expect("the set's thread");
        let l = l.expect("the set's lock once the others stopped");
        set.unlock(&l).expect("the set's release");
        (waited, per_turn, during)
    })
}

/// A fair set beside a line of one of its resources that never empties is due after the
/// waiters ahead of it (three here), give or take a claim lease. Bound: 20 turns of the
/// others (a turn measured in this run) plus two claim leases.
fn a_set_is_not_starved_by_a_busy_line_of_one_of_its_resources(asy: bool) {
    let (waited, per_turn, turns) = set_beside_busy_lines(true, asy, [3, 0]);
    let bound = per_turn * 20 + LEASE * 2;
    eprintln!("the set waited {waited:?} ({turns} turns of the others, {per_turn:?} a turn)");
    assert!(
        waited <= bound,
        "the set waited {waited:?} while the others took {turns} turns ({per_turn:?} a turn); bound {bound:?}"
    );
}

#[test]
fn a_set_is_not_starved_by_a_busy_line_of_one_of_its_resources_blocking() {
    a_set_is_not_starved_by_a_busy_line_of_one_of_its_resources(false);
}

#[test]
fn a_set_is_not_starved_by_a_busy_line_of_one_of_its_resources_async() {
    a_set_is_not_starved_by_a_busy_line_of_one_of_its_resources(true);
}

/// Both of the set's resources have lines that never empty (two clients taking turns on
/// each): once the set heads one line it keeps that reservation, renewed every half lease,
/// until it heads the other and the holder there lets go; it is served after the waiters
/// ahead of it on both. Bound: 40 turns (measured) plus four claim leases.
fn a_set_whose_resources_both_have_busy_lines_is_served(asy: bool) {
    let (waited, per_turn, turns) = set_beside_busy_lines(true, asy, [2, 2]);
    let bound = per_turn * 40 + LEASE * 4;
    eprintln!("the set waited {waited:?} ({turns} turns of the others, {per_turn:?} a turn)");
    assert!(
        waited <= bound,
        "the set waited {waited:?} while the others took {turns} turns ({per_turn:?} a turn); bound {bound:?}"
    );
}

#[test]
fn a_set_whose_resources_both_have_busy_lines_is_served_blocking() {
    a_set_whose_resources_both_have_busy_lines_is_served(false);
}

#[test]
fn a_set_whose_resources_both_have_busy_lines_is_served_async() {
    a_set_whose_resources_both_have_busy_lines_is_served(true);
}

/// Without fair mode every waiter is woken by the release and the set's try races the
/// others' (no reservation shuts it out), though not on equal terms: the releasing client
/// tries again at once, the set once a push has woken it. It won after 2 to 218 of the
/// others' turns in 14 runs on a busy 2-core machine; the bound is 800 turns (measured in the
/// run) plus two claim leases.
#[test]
fn without_fair_mode_a_set_beside_a_busy_resource_gets_its_turn() {
    let (waited, per_turn, turns) = set_beside_busy_lines(false, false, [3, 0]);
    let bound = per_turn * 800 + LEASE * 2;
    eprintln!("the set waited {waited:?} ({turns} turns of the others, {per_turn:?} a turn)");
    assert!(
        waited <= bound,
        "the set waited {waited:?} while the others took {turns} turns ({per_turn:?} a turn); bound {bound:?}"
    );
}

/// Two sets {a, b} wait in line behind a single waiter of `a`, whose holder keeps it; `b` is
/// released. The first set heads `b`'s line but not `a`'s, so it passes `b` on to the second,
/// which heads neither and passes it on to nobody. Until session 20 `b` then went free, and
/// the next read of either set rang the head of `b`'s line again: the two passed `b` back
/// and forth at every round trip for as long as `a` was held (the simulator's seed 461: a
/// set's acquisition ran 200 ms past its tries' bound on those bells). Now the last of a line
/// to pass a resource on marks it passed by all: it stays free, rung for nobody until a
/// release, for whoever claims it.
///
/// Held to: while `a` is held for a second, the two sets' claims stay a handful (each set's
/// timer, 8 claim leases, is its only clock), not one per round trip; once the holder
/// releases, the single, then the first set, then the second are served, in that order.
fn sets_behind_a_single_do_not_pass_a_free_resource_back_and_forth(asy: bool) {
    let c = cluster(3);
    let nodes = c.addrs();
    let (a, b) = (resource("pass-a"), resource("pass-b"));
    let h = client(&nodes, false, "h", asy);
    let (s, x, y) = (
        client(&nodes, true, "s", asy),
        client(&nodes, true, "x", asy),
        client(&nodes, true, "y", asy),
    );
    let held = h.lock(&a, TTL).expect("free");
    let held_b = h.lock(&b, TTL).expect("free");
    let in_every = |key: &str, id: &str| testkit::review::in_line(&nodes, key, id) == 3;
    let served = |cl: &Client, set: Vec<&str>| {
        let l = cl.lock_many(&set, TTL).expect("served");
        let at = Instant::now();
        cl.unlock(&l).expect("released");
        at
    };
    let served = &served;
    thread::scope(|sc| {
        let ts = sc.spawn(|| served(&s, vec![a.as_str()]));
        testkit::wait_until(Duration::from_secs(10), "S in a's line", || {
            in_every(&a, "s")
        });
        let tx = sc.spawn(|| served(&x, vec![a.as_str(), b.as_str()]));
        testkit::wait_until(Duration::from_secs(10), "X in both lines", || {
            in_every(&a, "x") && in_every(&b, "x")
        });
        let ty = sc.spawn(|| served(&y, vec![a.as_str(), b.as_str()]));
        testkit::wait_until(Duration::from_secs(10), "Y in both lines", || {
            in_every(&a, "y") && in_every(&b, "y")
        });
        // `b` goes free: its release rings the first set, which passes it on.
        h.unlock(&held_b).expect("released");
        let claims = || x.stats().claims + y.stats().claims;
        let before = claims();
        thread::sleep(Duration::from_secs(1));
        let idle = claims() - before;
        h.unlock(&held).expect("released");
        let (s_at, x_at, y_at) = (ts.join().unwrap(), tx.join().unwrap(), ty.join().unwrap());
        eprintln!("claims while a was held for 1 s: {idle}");
        assert!(idle <= 12, "{idle} claims in 1 s with nothing to take");
        assert!(s_at <= x_at && x_at <= y_at, "served out of order");
    });
}

#[test]
fn sets_behind_a_single_do_not_pass_a_free_resource_back_and_forth_blocking() {
    sets_behind_a_single_do_not_pass_a_free_resource_back_and_forth(false);
}

#[test]
fn sets_behind_a_single_do_not_pass_a_free_resource_back_and_forth_async() {
    sets_behind_a_single_do_not_pass_a_free_resource_back_and_forth(true);
}
