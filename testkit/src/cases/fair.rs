//! Fair mode (`Builder::fair`): waiters line up on the masters, and each release hands the
//! lock to the first of them, waking no other.

use super::scripts::server_version;
use super::*;
use redlock_mux::Scripts;

/// Waiters that started waiting one after another (each in the line on every master before
/// the next starts) get the lock in that order, each woken by its bell: their retry delay is
/// far longer than the test, so no timer explains a hand-off. Every release rings one
/// client per master: the bells counted over all clients are one per master per hand-off,
/// where the unfair wake-ups push to every waiter.
pub fn fair_waiters_get_the_lock_in_the_order_they_started_waiting<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(5).expect("redis-server");
    four_in_order::<F>(&c, c.addrs(), redlock_mux::Scripts::Auto, "fair-order");
}

/// Fair mode through the function library: under `Scripts::Function`, and under
/// `Scripts::Auto` for a user whose ACL denies `EVAL`/`EVALSHA` (each connection's first
/// script is refused and it goes on with `FCALL`), waiters line up and are handed the lock
/// in the order they started waiting, each by its bell, as with scripts. (Before the fair
/// functions, the first was silently unfair and the second failed every acquisition that
/// found the resource held.) Skipped, saying so, on a server without functions.
pub fn fair_waiters_line_up_through_functions<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(3).expect("redis-server");
    let (name, version) = server_version(&c.addrs()[0]);
    if name == "redis" && version < (7, 0) {
        eprintln!("skipped: {name} {version:?} has no FUNCTION/FCALL (Redis 7+)");
        return;
    }
    four_in_order::<F>(
        &c,
        c.addrs(),
        redlock_mux::Scripts::Function,
        "fair-fn-order",
    );
    for a in c.addrs() {
        let args = [
            "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha",
        ];
        assert_eq!(redis(&a, &args), Frame::Simple("OK".into()), "ACL on {a}");
    }
    let as_user: Vec<String> = c
        .servers()
        .iter()
        .map(|s| format!("redis://noeval:pw@127.0.0.1:{}", s.port()))
        .collect();
    four_in_order::<F>(&c, as_user, redlock_mux::Scripts::Auto, "fair-noeval-order");
}

/// Four fair waiters on `nodes` (the masters of `c`) under `scripts` start waiting one after
/// another while a fifth client holds `name`; the holder's release hands the lock on in that
/// order, one bell per master per hand-off, and the lines are left empty.
fn four_in_order<F: Flavor>(c: &LocalCluster, nodes: Vec<String>, scripts: Scripts, name: &str)
where
    F::Client: Sync + Send,
{
    let addrs = c.addrs();
    let key = resource(name);
    // A claim lease far beyond any pause of a loaded machine: a waiter slower than its lease
    // would lose its place (as documented), and the order would say nothing.
    let fair = || {
        builder(c)
            .nodes(&nodes)
            .scripts(scripts)
            .fair(true)
            .retry(1000, Duration::from_secs(60))
            .claim_lease(Duration::from_secs(30))
    };
    let holder = F::build(fair()).unwrap();
    let waiters: Vec<F::Client> = (0..4).map(|_| F::build(fair()).unwrap()).collect();
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    let order = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (i, w) in waiters.iter().enumerate() {
            let (key, order) = (&key, &order);
            s.spawn(move || {
                let lock = w
                    .lock_within(key, TTL, Duration::from_secs(120))
                    .expect("the waiter gets the lock");
                order.lock().unwrap().push(i);
                // Held a moment, so that the next one is woken by this release.
                std::thread::sleep(Duration::from_millis(5));
                w.unlock(&lock).unwrap();
            });
            // In the line everywhere before the next one starts.
            wait_until(
                Duration::from_secs(20),
                "the waiter is in every line",
                || line_lengths(&addrs, key).iter().all(|&n| n == i as i64 + 1),
            );
        }
        holder.unlock(&held).unwrap();
    });
    assert_eq!(
        *order.lock().unwrap(),
        vec![0, 1, 2, 3],
        "first come, first served"
    );
    // One bell per master per hand-off, to the waiter whose turn it was: four hand-offs.
    let bells: u64 = waiters
        .iter()
        .flat_map(|w| w.stats().nodes.into_iter().map(|n| n.invalidations))
        .sum();
    assert!(
        bells <= 4 * addrs.len() as u64,
        "{bells} bells for 4 hand-offs on {} masters",
        addrs.len()
    );
    // And one notice per master to the second in line (`NodeStats::lapse_notices`), for the
    // three hand-offs that had one: counted apart, never a wake-up unless a head lapses.
    let notices: u64 = waiters
        .iter()
        .flat_map(|w| w.stats().nodes.into_iter().map(|n| n.lapse_notices))
        .sum();
    assert!(
        notices <= 3 * addrs.len() as u64,
        "{notices} notices for 3 hand-offs with a second waiter on {} masters",
        addrs.len()
    );
    let q = format!("{}{key}", redlock_mux::script::QUEUE_PREFIX);
    assert!(
        line_lengths(&addrs, &key).iter().all(|&n| n == 0),
        "the lines are empty: {:?}",
        addrs
            .iter()
            .map(|a| redis(a, &["ZRANGE", &q, "0", "-1", "WITHSCORES"]))
            .collect::<Vec<_>>()
    );
}

/// A waiter that gives up leaves the line; one whose process is gone (here an entry whose
/// bell nobody listens to, as after a crash: the server dropped its subscription with its
/// connections) is skipped by the next release at once: the waiter behind it is rung, not
/// left to its timer.
pub fn a_fair_waiter_that_gives_up_or_is_gone_costs_the_others_nothing<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(3).expect("redis-server");
    let addrs = c.addrs();
    let key = resource("fair-gone");
    let fair = || builder(&c).fair(true).retry(1000, Duration::from_secs(60));
    let holder = F::build(fair()).unwrap();
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    let quitter = F::build(fair()).unwrap();
    let r = quitter.lock_within(&key, TTL, Duration::from_millis(1500));
    assert!(r.is_err(), "held throughout its wait: {r:?}");
    assert!(
        line_lengths(&addrs, &key).iter().all(|&n| n == 0),
        "a waiter that gave up left the line: {:?}",
        line_lengths(&addrs, &key)
    );
    // A crashed waiter at the head of the line.
    let q = format!("{}{key}", redlock_mux::script::QUEUE_PREFIX);
    for a in &addrs {
        redis(a, &["ZADD", &q, "1", "crashed-client"]);
    }
    let next = F::build(fair()).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| next.lock_within(&key, TTL, Duration::from_secs(120)));
        wait_until(Duration::from_secs(20), "the waiter is in line", || {
            line_lengths(&addrs, &key).iter().all(|&n| n == 2)
        });
        let released = Instant::now();
        holder.unlock(&held).unwrap();
        let lock = waiting.join().unwrap().expect("the next waiter gets it");
        // Its retry delay is 60 s: only its bell explains a hand-off well before that.
        assert!(
            released.elapsed() < Duration::from_secs(15),
            "hand-off took {:?}",
            released.elapsed()
        );
        next.unlock(&lock).unwrap();
    });
}

/// Nobody passes the waiter a release rang: a plain `try_lock` from another client finds the
/// resource reserved (held) until the waiter has claimed it.
pub fn a_reserved_resource_is_not_taken_by_a_newcomer<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(3).expect("redis-server");
    let addrs = c.addrs();
    let key = resource("fair-reserved");
    let fair = || builder(&c).fair(true).retry(1000, Duration::from_secs(60));
    let holder = F::build(fair()).unwrap();
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    let waiter = F::build(fair()).unwrap();
    let newcomer = F::build(fair()).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.lock_within(&key, TTL, Duration::from_secs(120)));
        wait_until(Duration::from_secs(20), "the waiter is in line", || {
            line_lengths(&addrs, &key).iter().all(|&n| n == 1)
        });
        holder.unlock(&held).unwrap();
        // Right after the release, the key is either reserved for the waiter or its lock:
        // never free for the newcomer.
        let r = newcomer.try_lock(&key, TTL);
        assert!(
            matches!(r, Err(Error::Conflict { .. })),
            "the newcomer passed the line: {r:?}"
        );
        let lock = waiting.join().unwrap().expect("the waiter gets it");
        waiter.unlock(&lock).unwrap();
    });
}

/// A waiter in line reads its timer from the wait script's reply: when its holder never
/// releases (a crashed holder rings nobody), the waiter takes the lock once the holder's ttl
/// has run out, not after the longest wait for a bell (eight claim leases: 40 s here).
pub fn a_fair_waiter_whose_holder_vanished_takes_the_lock_when_its_ttl_runs_out<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(3).expect("redis-server");
    let key = resource("fair-vanished");
    let lease = Duration::from_secs(5);
    let fair = || {
        builder(&c)
            .fair(true)
            .retry(1000, Duration::from_secs(60))
            .claim_lease(lease)
    };
    let holder = F::build(fair()).unwrap();
    let ttl = Duration::from_millis(1500);
    // Held, and never released: as a holder that crashed.
    let _held = holder.lock(&key, ttl).unwrap();
    let waiter = F::build(fair()).unwrap();
    let started = Instant::now();
    let lock = waiter
        .lock_within(&key, TTL, Duration::from_secs(120))
        .expect("the waiter gets the lock");
    let waited = started.elapsed();
    // Eight claim leases are 40 s; the ttl 1.5 s. Half the former leaves room for a loaded
    // machine and still tells the two apart.
    assert!(
        waited < lease * 4,
        "waited {waited:?}: the longest wait for a bell, not the holder's ttl"
    );
    waiter.unlock(&lock).unwrap();
}

/// A failed try of a client that already waits in line (another of its threads or tasks)
/// keeps the client's place: the release of what the try may have taken, sent when a master
/// did not answer it, is not a release proper (which takes its client out of the lines).
pub fn a_failed_try_keeps_its_clients_place_in_line<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(3).expect("redis-server");
    let (proxies, addrs) = crate::proxy::in_front(&c, 2..3);
    let key = resource("fair-shared-place");
    let fair = || {
        redlock_mux::Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(500))
            .fair(true)
            .retry(1000, Duration::from_secs(60))
    };
    let holder = F::build(fair()).unwrap();
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    let client = F::build(fair()).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| client.lock_within(&key, TTL, Duration::from_secs(120)));
        wait_until(Duration::from_secs(20), "the waiter is in line", || {
            line_lengths(&c.addrs(), &key).iter().all(|&n| n == 1)
        });
        // The third master does not answer: the try is refused by the first two, and its
        // release goes to all three.
        proxies[0].set(crate::proxy::Fault::Blackhole);
        let r = client.try_lock(&key, TTL);
        assert!(
            matches!(r, Err(Error::NoQuorum { .. } | Error::Conflict { .. })),
            "{r:?}"
        );
        assert_eq!(
            line_lengths(&c.addrs()[..2], &key),
            vec![1, 1],
            "the client keeps its place"
        );
        proxies[0].set(crate::proxy::Fault::Pass);
        holder.unlock(&held).unwrap();
        let lock = waiting.join().unwrap().expect("the waiter gets it");
        client.unlock(&lock).unwrap();
    });
}

/// A waiter rung while its path to the masters is silent (a partition, or a paused process:
/// the server keeps its subscription, so the bell counts as received) never claims, and its
/// reservation lapses. The waiter behind it was told by the hand-off that it stands second,
/// and takes the lock about one claim lease after the release: not at its own timer, eight
/// claim leases (4 s here). At least one lease: the reservation for the cut-off waiter held
/// it that long (else the test did not make the case it names).
pub fn a_rung_waiter_cut_off_costs_the_next_one_claim_lease<F: Flavor>()
where
    F::Client: Sync + Send,
{
    use crate::proxy::{in_front, set_all, Fault};
    let c = LocalCluster::start(3).expect("redis-server");
    let addrs = c.addrs();
    let (proxies, via) = in_front(&c, 0..3);
    let key = resource("fair-cut-off-head");
    let lease = Duration::from_millis(500);
    let fair = |nodes: &[String]| {
        builder(&c)
            .nodes(nodes)
            .fair(true)
            .retry(1000, Duration::from_secs(60))
            .claim_lease(lease)
    };
    let holder = F::build(fair(&addrs)).unwrap();
    let cut = F::build(fair(&via)).unwrap();
    let next = F::build(fair(&addrs)).unwrap();
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    std::thread::scope(|s| {
        let first = s.spawn(|| cut.lock_within(&key, TTL, Duration::from_secs(30)));
        wait_until(
            Duration::from_secs(20),
            "the first waiter is in line",
            || line_lengths(&addrs, &key).iter().all(|&n| n == 1),
        );
        let second = s.spawn(|| {
            let l = next.lock_within(&key, TTL, Duration::from_secs(60));
            (Instant::now(), l)
        });
        wait_until(
            Duration::from_secs(20),
            "the second waiter is in line",
            || line_lengths(&addrs, &key).iter().all(|&n| n == 2),
        );
        set_all(&proxies, Fault::Blackhole);
        let released = Instant::now();
        holder.unlock(&held).unwrap();
        let (at, lock) = second.join().unwrap();
        let lock = lock.expect("the second waiter gets it");
        let waited = at - released;
        assert!(
            waited >= lease,
            "granted {waited:?} after the release: the first waiter was not rung"
        );
        assert!(
            waited < lease * 3,
            "granted {waited:?} after the release (claim lease {lease:?}, timer {:?})",
            lease * 8
        );
        next.unlock(&lock).unwrap();
        set_all(&proxies, Fault::Pass);
        if let Ok(l) = first.join().unwrap() {
            cut.unlock(&l).unwrap();
        }
    });
}

/// `inspect_line` reads each master's line of fair waiters: a holder and two waiters that
/// joined one after the other show as those two, in that order, on every master and agreed
/// by the quorum, with the line's lease; the holder's token is not a waiter. Once everyone
/// has been served the lines are empty. A reservation shows as the waiter it is for.
pub fn inspect_line_shows_each_masters_line_in_order<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(3).expect("redis-server");
    let addrs = c.addrs();
    let key = resource("fair-inspect-line");
    let fair = || {
        builder(&c)
            .fair(true)
            .retry(1000, Duration::from_secs(60))
            .claim_lease(Duration::from_secs(30))
    };
    let holder = F::build(fair()).unwrap();
    let waiters: Vec<F::Client> = (0..2).map(|_| F::build(fair()).unwrap()).collect();
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    // A plain inspection reads no line.
    let plain = holder.inspect(&key).unwrap();
    assert!(plain.nodes.iter().all(|n| n.line.is_none()), "{plain:?}");
    assert_eq!(plain.agreed_line(), None);
    let ids = |view: &redlock_mux::Inspection| -> Vec<Vec<String>> {
        view.nodes
            .iter()
            .map(|n| {
                let line = n.line.as_ref().expect("every master's line read");
                line.waiters.iter().map(|w| w.id.clone()).collect()
            })
            .collect()
    };
    // Read while the holder holds, checked once it has let go (a failed check then leaves no
    // waiter waiting out its deadline).
    let mut views = Vec::new();
    std::thread::scope(|s| {
        for (i, w) in waiters.iter().enumerate() {
            let key = &key;
            s.spawn(move || {
                let lock = w
                    .lock_within(key, TTL, Duration::from_secs(120))
                    .expect("the waiter gets the lock");
                w.unlock(&lock).unwrap();
            });
            let joined = std::panic::catch_unwind(|| {
                wait_until(
                    Duration::from_secs(20),
                    "the waiter is in every line",
                    || line_lengths(&addrs, key).iter().all(|&n| n == i as i64 + 1),
                )
            });
            views.push(joined.map(|()| holder.inspect_line(key)));
        }
        holder.unlock(&held).unwrap();
    });
    let mut seen: Vec<String> = Vec::new();
    for view in views {
        let view = view.expect("the waiter joined").unwrap();
        let lines = ids(&view);
        // The one that joined last is last everywhere, behind the ones before.
        let new = lines[0].last().cloned().expect("a waiter");
        assert!(!seen.contains(&new), "{lines:?}");
        seen.push(new);
        assert!(lines.iter().all(|l| *l == seen), "{lines:?} != {seen:?}");
        let agreed = view.agreed_line().expect("lines read");
        let order: Vec<&str> = agreed.waiters.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(order, seen.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(agreed.agreed() && agreed.in_order == 3, "{agreed:?}");
        for n in &view.nodes {
            assert_eq!(n.holder, Holder::Token(*held.token()), "{n:?}");
            let line = n.line.as_ref().unwrap();
            let ttl = line.ttl.expect("the line's lease");
            assert!(ttl > Duration::from_secs(60), "{ttl:?}");
            assert!(!line.more);
            let tickets: Vec<u64> = line.waiters.iter().map(|w| w.ticket).collect();
            assert!(tickets.windows(2).all(|t| t[0] < t[1]), "{tickets:?}");
        }
    }
    let view = holder.inspect_line(&key).unwrap();
    assert!(
        ids(&view).iter().all(Vec::is_empty),
        "the lines are empty: {view:?}"
    );
    assert!(view.agreed_line().unwrap().waiters.is_empty());
    // A reservation names its waiter.
    let reserved = format!("{}{}", redlock_mux::script::RESERVED_PREFIX, seen[0]);
    for a in &addrs {
        redis(a, &["SET", &key, &reserved, "PX", "60000"]);
    }
    let view = holder.inspect_line(&key).unwrap();
    for n in &view.nodes {
        assert_eq!(n.holder, Holder::Reserved(seen[0].clone()), "{n:?}");
        assert!(n.ttl.is_some_and(|t| t > Duration::from_secs(30)), "{n:?}");
    }
    assert_eq!(view.quorum_holder(), None);
}

/// Fair mode for a user who may run neither scripts nor functions (`-@scripting`, under
/// `Scripts::Auto`): its first try's enter, refused as a script and as a function, goes out as
/// the `SET NX PX` it starts with; a waiter refused by masters that keep no line waits as
/// without fair mode, woken by the servers' invalidation when the holder releases (not by its
/// fair timer: eight claim leases, here four minutes); the release goes out as the server's
/// native command where it has one. On a server without native commands such a user cannot
/// release at all (as without fair mode), and the error says why. (Before, every `lock` of
/// this user failed in fair mode, the enter refused on every master.)
pub fn a_fair_client_whose_user_may_run_no_script_locks_as_without_fair_mode<F: Flavor>()
where
    F::Client: Sync + Send,
{
    let c = LocalCluster::start(3).expect("redis-server");
    let addrs = c.addrs();
    let (name, version) = server_version(&addrs[0]);
    let native = match (name.as_str(), version) {
        ("valkey", v) => v >= (9, 0),
        ("redis", v) => v >= (8, 4),
        _ => false,
    };
    if name == "redis" && version < (7, 0) {
        // `-@scripting` also takes `FUNCTION`, which older servers do not know.
        eprintln!("skipped: {name} {version:?} has no FUNCTION/FCALL to deny");
        return;
    }
    for a in &addrs {
        let args = [
            "ACL",
            "SETUSER",
            "noscript",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ];
        assert_eq!(redis(a, &args), Frame::Simple("OK".into()), "ACL on {a}");
    }
    let nodes: Vec<String> = c
        .servers()
        .iter()
        .map(|s| format!("redis://noscript:pw@127.0.0.1:{}", s.port()))
        .collect();
    let lease = Duration::from_secs(30);
    let fair = || {
        builder(&c)
            .nodes(&nodes)
            .fair(true)
            .retry(1000, Duration::from_secs(60))
            .claim_lease(lease)
    };
    let holder = F::build(fair()).unwrap();
    let waiter = F::build(fair()).unwrap();
    let key = resource("fair-noscript");
    let ttl = Duration::from_secs(60);
    let within = Duration::from_secs(20);
    let held = holder
        .lock_within(&key, ttl, within)
        .expect("the enter as SET NX");
    // Held by a quorum. (The round is decided at a quorum: a master whose script and
    // function refusals came after the decision gets no `SET`, as for any acquisition sent
    // again in another form: it might land after the release.)
    let token = held.token().as_str();
    let holding = addrs
        .iter()
        .filter(|a| get(a, &key).as_deref() == Some(token))
        .count();
    assert!(holding >= 2, "held on {holding} masters");
    let script_calls = |a: &String| calls(a, "evalsha") + calls(a, "eval") + calls(a, "fcall");
    if !native {
        // Nothing to release with: as without fair mode, the error names the refusal.
        match holder.unlock(&held) {
            Err(Error::NoQuorum { nodes }) => {
                let text = nodes.to_string();
                assert!(text.contains("NOPERM"), "{text}");
            }
            other => panic!("expected the refusal named, got {other:?}"),
        }
        eprintln!("release skipped: {name} {version:?} has no native commands");
        return;
    }
    let reads_before: Vec<u64> = addrs.iter().map(|a| calls(a, "pttl")).collect();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let asked = Instant::now();
            // (At most two tries: the wait after the first is all it may take.)
            let lock = waiter
                .lock_within(&key, ttl, within * 2)
                .expect("the waiter gets the lock");
            (asked.elapsed(), lock)
        });
        // Refused, the waiter reads the key's `PTTL` on every master (its tracked read).
        wait_until(
            Duration::from_secs(20),
            "the waiter's tracked read on every master",
            || {
                addrs
                    .iter()
                    .zip(&reads_before)
                    .all(|(a, before)| calls(a, "pttl") > *before)
            },
        );
        let released = Instant::now();
        holder
            .unlock(&held)
            .expect("released by the native command");
        let (_, lock) = waiting.join().unwrap();
        let after_release = released.elapsed();
        // Woken by the invalidation: far sooner than its fair timer (eight leases, 240 s),
        // the holder's ttl (60 s) or its retry delay (30 to 60 s).
        assert!(
            after_release < Duration::from_secs(20),
            "granted {after_release:?} after the release"
        );
        waiter.unlock(&lock).expect("released");
    });
    for a in &addrs {
        assert_eq!(get(a, &key), None, "released on {a}");
        assert_eq!(script_calls(a), 0, "no script ran on {a}");
    }
}
