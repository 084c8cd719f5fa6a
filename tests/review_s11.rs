//! A hostile review of session 11's safety-relevant changes (`Builder::verify_stream` and fair
//! mode), against real masters. Each test states the claim it holds the code to.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::Options;
use redlock_mux::resp::Frame;
use redlock_mux::Redlock;
use testkit::proxy::Fault;
use testkit::{builder, cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(10);

/// `INFO commandstats` of one server: (command, calls).
fn commandstats(addr: &str) -> Vec<(String, u64)> {
    let text = match redis(addr, &["INFO", "commandstats"]) {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO: {other:?}"),
    };
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .collect()
}

fn calls(addr: &str, cmd: &str) -> u64 {
    commandstats(addr)
        .into_iter()
        .find(|(n, _)| n == cmd)
        .map_or(0, |(_, c)| c)
}

/// How many of `addrs` hold `token` in `key` (read directly, not through any proxy).
fn holding(addrs: &[String], key: &str, token: &[u8]) -> usize {
    addrs
        .iter()
        .filter(|a| matches!(redis(a, &["GET", key]), Frame::Bulk(b) if b.as_ref() == token))
        .count()
}

/// Claim (Builder::verify_stream): "one PING per node per write pass". Sequential lock and
/// unlock are one write pass each: two sentinels per node per pair, and none without the
/// option.
#[test]
fn verify_stream_costs_one_ping_per_node_per_write_pass() {
    const PAIRS: u64 = 20;
    let c = cluster(3);
    let addrs = c.addrs();
    for verify in [false, true] {
        let client = builder(&c).verify_stream(verify).build().unwrap();
        let warm = client.lock(&resource("warm"), TTL).unwrap();
        client.unlock(&warm).unwrap();
        // Every node's reply to the warm-up in (a round decided early leaves some on the way).
        std::thread::sleep(Duration::from_millis(300));
        let before: Vec<u64> = addrs.iter().map(|a| calls(a, "ping")).collect();
        for i in 0..PAIRS {
            let l = client.lock(&resource(&format!("ping-{i}")), TTL).unwrap();
            client.unlock(&l).unwrap();
        }
        std::thread::sleep(Duration::from_millis(300));
        let pings: Vec<u64> = addrs
            .iter()
            .zip(&before)
            .map(|(a, b)| calls(a, "ping") - b)
            .collect();
        let expected = if verify { 2 * PAIRS } else { 0 };
        assert!(
            pings.iter().all(|&p| p == expected),
            "verify_stream({verify}): PINGs per node {pings:?}, expected {expected} each"
        );
    }
}

/// Attack on verify_stream: a client whose paths lose bytes both ways in bursts (the proxy's
/// `LoseBytes`, on one master at a time) contends with a client on clean paths. Every lock
/// either of them is granted must be held with its token by a quorum of the masters, read
/// directly; and no two grants overlap.
#[test]
fn verify_stream_never_grants_without_a_quorum_under_byte_loss() {
    let c = cluster(3);
    let direct = c.addrs();
    let (proxies, lossy) = testkit::proxy::in_front(&c, 0..3);
    let verifying = Redlock::builder()
        .nodes(&lossy)
        .node_timeout(Duration::from_millis(300))
        .retry(1, Duration::ZERO)
        .verify_stream(true)
        .build()
        .unwrap();
    let clean = Redlock::builder()
        .nodes(&direct)
        .node_timeout(Duration::from_millis(300))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let key = resource("lossy");
    let inside = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let grants = AtomicU64::new(0);
    let violations = Mutex::new(Vec::<String>::new());
    std::thread::scope(|s| {
        // Three threads on the lossy client: commands pipelined on each connection.
        let contenders = [
            ("verifying", &verifying),
            ("verifying", &verifying),
            ("verifying", &verifying),
            ("clean", &clean),
        ];
        for (who, client) in contenders {
            let (key, inside, stop, grants, violations, direct) =
                (&key, &inside, &stop, &grants, &violations, &direct);
            s.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok(l) = client.try_lock(key, TTL) else {
                        continue;
                    };
                    grants.fetch_add(1, Ordering::SeqCst);
                    if inside.swap(true, Ordering::SeqCst) {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("{who}: two holders"));
                    }
                    let n = holding(direct, key, l.token().as_bytes());
                    if n < 2 {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("{who}: granted, but {n} masters hold its token"));
                    }
                    inside.store(false, Ordering::SeqCst);
                    if client.unlock(&l).is_err() {
                        // A release lost on the way: the key stays until its ttl; clear it
                        // (as its holder) so that the test goes on.
                        for a in direct {
                            let v = redis(a, &["GET", key]);
                            if matches!(&v, Frame::Bulk(b) if b.as_ref() == l.token().as_bytes()) {
                                redis(a, &["DEL", key]);
                            }
                        }
                    }
                }
            });
        }
        // Bursts of loss, on one master at a time, for a bounded number of rounds.
        let start = Instant::now();
        let mut i = 0usize;
        while start.elapsed() < Duration::from_secs(8) {
            let p = &proxies[i % 3];
            p.set(Fault::LoseBytes);
            std::thread::sleep(Duration::from_millis(1 + (i as u64 * 7) % 5));
            p.set(Fault::Pass);
            std::thread::sleep(Duration::from_millis(20 + (i as u64 * 13) % 40));
            i += 1;
        }
        stop.store(true, Ordering::SeqCst);
    });
    let v = violations.into_inner().unwrap();
    assert!(
        v.is_empty(),
        "{} violations: {:?}",
        v.len(),
        &v[..v.len().min(10)]
    );
    assert!(
        grants.load(Ordering::SeqCst) > 10,
        "the clients took the lock"
    );
    let desyncs: u64 = verifying.stats().nodes.iter().map(|n| n.desyncs).sum();
    eprintln!(
        "grants {}, desyncs seen by the verifying client {desyncs}",
        grants.load(Ordering::SeqCst)
    );
}

/// Claim (Builder::fair): off by default, and then nothing of the line runs: no
/// `SUBSCRIBE`, none of the line's commands inside any script, no fair script loaded.
/// Contention included (a waiter woken by the release). The same with fair on, as a control.
#[test]
fn with_fair_off_nothing_of_the_line_runs() {
    for fair in [false, true] {
        let c = cluster(3);
        let addrs = c.addrs();
        let make = || {
            builder(&c)
                .fair(fair)
                .retry(50, Duration::from_millis(200))
                .build()
                .unwrap()
        };
        let (holder, waiter) = (make(), make());
        let key = resource("fair-off");
        for _ in 0..3 {
            let held = holder.lock(&key, TTL).unwrap();
            std::thread::scope(|s| {
                let w = s.spawn(|| waiter.lock(&key, TTL).unwrap());
                std::thread::sleep(Duration::from_millis(100));
                holder.unlock(&held).unwrap();
                let l = w.join().unwrap();
                waiter.unlock(&l).unwrap();
            });
        }
        let line_cmds = ["subscribe", "zadd", "zpopmin", "publish", "zrem", "zrange"];
        let ran: Vec<(String, u64)> = addrs
            .iter()
            .flat_map(|a| commandstats(a))
            .filter(|(n, _)| line_cmds.contains(&n.as_str()))
            .collect();
        let shas: Vec<&str> = redlock_mux::script::FAIR
            .iter()
            .map(|(sha, _)| *sha)
            .collect();
        let cached: Vec<Frame> = addrs
            .iter()
            .map(|a| {
                let mut args = vec!["SCRIPT", "EXISTS"];
                args.extend(&shas);
                redis(a, &args)
            })
            .collect();
        let none_cached = cached.iter().all(|f| match f {
            Frame::Array(items) => items.iter().all(|i| *i == Frame::Integer(0)),
            _ => false,
        });
        if fair {
            assert!(
                ran.iter().any(|(n, _)| n == "subscribe") && !none_cached,
                "the control: fair mode subscribes and loads its scripts: {ran:?} {cached:?}"
            );
        } else {
            assert!(ran.is_empty(), "fair off, yet the masters ran {ran:?}");
            assert!(none_cached, "fair off, yet fair scripts loaded: {cached:?}");
        }
    }
}

/// Claim (Builder::fair), since session 18: a lock over several resources waits in the line
/// of each of them (docs/redlock.md, "Sets and the line"), gets the set once it is free, and
/// leaves no line behind once served. (Until session 18 a set joined no line, and this test
/// held it to that.)
#[test]
fn lock_many_under_fair_waits_in_every_line_and_leaves_them_once_served() {
    let c = cluster(3);
    let addrs = c.addrs();
    let make = || {
        builder(&c)
            .fair(true)
            .retry(100, Duration::from_millis(100))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (make(), make());
    let (a, b) = (resource("many-a"), resource("many-b"));
    let held = holder.lock(&a, TTL).unwrap();
    let queues = |r: &str| {
        let q = format!("{}{r}", redlock_mux::script::QUEUE_PREFIX);
        addrs
            .iter()
            .filter(|addr| redis(addr, &["EXISTS", &q]) == Frame::Integer(1))
            .count()
    };
    std::thread::scope(|s| {
        let w = s.spawn(|| waiter.lock_many(&[&a, &b], TTL));
        wait_until(
            Duration::from_secs(10),
            "the set in both lines on every master",
            || (queues(&a), queues(&b)) == (3, 3),
        );
        holder.unlock(&held).unwrap();
        let l = w.join().unwrap().expect("the set once it is free");
        waiter.unlock(&l).unwrap();
    });
    assert_eq!((queues(&a), queues(&b)), (0, 0), "a line left behind");
}

/// A fair client built from `Options`, its client id given.
fn fair_client(nodes: &[String], id: &str, fencing: bool) -> Redlock {
    let opts = Options {
        nodes: nodes.to_vec(),
        node_timeout: Duration::from_millis(300),
        tries: 10_000,
        retry_delay: Duration::from_millis(50),
        fencing,
        fair: true,
        client_id: id.to_string(),
        claim_lease: Duration::from_millis(100),
        ..Options::default()
    };
    Redlock::with_config(opts.validate().unwrap()).unwrap()
}

/// Attack on fair mode for two holders: fair clients (two of them sharing one client id)
/// and unfair clients contend for one resource on five masters, two behind slow paths, one
/// of them paused for a while, some holders extending their lock. No two grants overlap
/// (each holder checks its lock is still valid before it leaves), and the fencing tokens of
/// successive holders increase.
#[test]
fn mixed_fair_and_unfair_clients_never_hold_together() {
    let mut c = cluster(5);
    let (proxies, addrs) = testkit::proxy::in_front(&c, 3..5);
    proxies[0].set(testkit::proxy::latency(Duration::from_millis(15)));
    proxies[1].set(Fault::Latency {
        fixed: Duration::from_millis(5),
        jitter: Duration::from_millis(30),
    });
    let clients = vec![
        ("fair-a", fair_client(&addrs, "same", true)),
        ("fair-b", fair_client(&addrs, "same", true)),
        ("fair-c", fair_client(&addrs, "other", true)),
        (
            "unfair-d",
            Redlock::builder()
                .nodes(&addrs)
                .node_timeout(Duration::from_millis(300))
                .retry(10_000, Duration::from_millis(50))
                .fencing(true)
                .build()
                .unwrap(),
        ),
        (
            "unfair-e",
            Redlock::builder()
                .nodes(&addrs)
                .node_timeout(Duration::from_millis(300))
                .retry(10_000, Duration::from_millis(50))
                .fencing(true)
                .build()
                .unwrap(),
        ),
    ];
    let key = resource("mixed");
    let inside = AtomicBool::new(false);
    let last_token = Mutex::new(0u64);
    let violations = Mutex::new(Vec::<String>::new());
    let grants = AtomicU64::new(0);
    const ROUNDS: usize = 12;
    std::thread::scope(|s| {
        for (who, client) in &clients {
            let (key, inside, last_token, violations, grants) =
                (&key, &inside, &last_token, &violations, &grants);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let mut l = match client.lock_within(key, TTL, Duration::from_secs(60)) {
                        Ok(l) => l,
                        Err(e) => {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("{who}: gave up: {e}"));
                            return;
                        }
                    };
                    grants.fetch_add(1, Ordering::SeqCst);
                    if inside.swap(true, Ordering::SeqCst) {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("{who}: two holders"));
                    }
                    let token = l.fencing_token().unwrap_or(0);
                    {
                        let mut last = last_token.lock().unwrap();
                        if token <= *last {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("{who}: token {token} after {}", *last));
                        }
                        *last = token;
                    }
                    std::thread::sleep(Duration::from_millis(3));
                    if round % 3 == 0 {
                        let _ = client.extend(&mut l, TTL);
                    }
                    if l.is_expired() {
                        violations
                            .lock()
                            .unwrap()
                            .push(format!("{who}: expired inside"));
                    }
                    inside.store(false, Ordering::SeqCst);
                    let _ = client.unlock(&l);
                }
            });
        }
        // One master paused for a while mid-run (SIGSTOP), then resumed.
        std::thread::sleep(Duration::from_millis(500));
        c.server(2).pause().unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        c.server(2).resume().unwrap();
    });
    let v = violations.into_inner().unwrap();
    assert!(
        v.is_empty(),
        "{} violations: {:?}",
        v.len(),
        &v[..v.len().min(10)]
    );
    assert_eq!(
        grants.load(Ordering::SeqCst),
        (ROUNDS * clients.len()) as u64
    );
    // Reservations and lines lapse: nothing of the line outlives the run for long.
    let direct = c.addrs();
    wait_until(
        Duration::from_secs(10),
        "the resource is free on every master",
        || {
            direct
                .iter()
                .all(|a| redis(a, &["EXISTS", &key]) == Frame::Integer(0))
        },
    );
}

/// Claim (Builder::verify_stream): "where `PING` is denied (an ACL), the connection keeps
/// only the checks it has without this": a verifying client of a user denied `PING` locks
/// and unlocks as any other, without a reconnect or a desync, and sends one refused sentinel
/// per connection at most.
#[test]
fn verify_stream_with_ping_denied_still_locks() {
    let c = cluster(3);
    for a in c.addrs() {
        let args = [
            "ACL", "SETUSER", "noping", "on", ">pw", "~*", "&*", "+@all", "-ping",
        ];
        assert_eq!(redis(&a, &args), Frame::Simple("OK".into()));
    }
    let nodes: Vec<String> = c
        .addrs()
        .iter()
        .map(|a| format!("redis://noping:pw@{a}"))
        .collect();
    let client = Redlock::builder()
        .nodes(nodes)
        .node_timeout(Duration::from_millis(300))
        .retry(1, Duration::ZERO)
        .verify_stream(true)
        // Every round reads every node: the first pass's refusal is read before the next
        // pass goes out (with fail-fast, a pass can go out while a slow node's refusal is
        // still on its way, and carry a second sentinel: a CI run on a busy machine saw 2).
        .fail_fast(false)
        .build()
        .unwrap();
    for i in 0..10 {
        let l = client.lock(&resource(&format!("noping-{i}")), TTL).unwrap();
        client.unlock(&l).unwrap();
    }
    for n in client.stats().nodes {
        assert_eq!((n.desyncs, n.connects), (0, 1), "{n:?}");
    }
    // One sentinel per connection refused, then none sent on it.
    for a in c.addrs() {
        let text = match redis(&a, &["INFO", "commandstats"]) {
            Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("INFO: {other:?}"),
        };
        let rejected: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_ping:"))
            .and_then(|s| {
                s.split(',')
                    .find_map(|kv| kv.strip_prefix("rejected_calls="))
            })
            .map_or(0, |n| n.parse().unwrap());
        assert!(
            rejected <= 1,
            "{a}: {rejected} sentinels refused on one connection"
        );
    }
}

/// `inspect` of a resource reserved by a hand-off (fair mode) does not call it free, nor
/// anyone's lock.
#[test]
fn inspect_of_a_reserved_resource_is_neither_free_nor_locked() {
    let c = cluster(3);
    let key = resource("reserved");
    let reserved = format!("{}someone", redlock_mux::script::RESERVED_PREFIX);
    for a in c.addrs() {
        redis(&a, &["SET", &key, &reserved, "PX", "60000"]);
    }
    let client = builder(&c).fair(true).build().unwrap();
    let seen = client.inspect(&key).unwrap();
    assert!(seen.quorum_holder().is_none(), "{seen:?}");
    assert!(
        seen.nodes
            .iter()
            .all(|n| n.holder == redlock_mux::Holder::Reserved("someone".into())),
        "{seen:?}"
    );
    assert!(
        client.try_lock(&key, TTL).is_err(),
        "a reservation is taken by a newcomer"
    );
}
