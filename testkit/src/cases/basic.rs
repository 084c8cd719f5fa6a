//! Acquire, release, extend, inspect: the lock's plain behaviour, and bad arguments.

use super::*;

pub fn acquire_and_release<F: Flavor>() {
    let c = cluster(5);
    let client = F::build(builder(&c)).unwrap();
    let key = resource("basic");
    let lock = client.lock(&key, TTL).unwrap();
    assert_eq!(lock.resource(), key);
    assert!(lock.validity() > TTL - Duration::from_secs(1));
    assert!(lock.validity() <= TTL);
    assert!(!lock.is_expired());
    held_everywhere(&client, &c.addrs(), &key, lock.token());
    client.unlock(&lock).unwrap();
    // Fail-fast returns at the third confirmation; the last two deletes are already on the
    // wire and the servers answer in order, so a round trip to each shows them done.
    gone_everywhere(&client, &c.addrs(), &key);
}

pub fn second_client_refused_then_gets_it<F: Flavor>() {
    let c = cluster(5);
    let a = F::build(builder(&c)).unwrap();
    let b = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    let key = resource("contend");
    let held = a.lock(&key, TTL).unwrap();
    match b.try_lock(&key, TTL) {
        Err(Error::Conflict { nodes, .. }) => {
            assert!(nodes.held().count() >= 3, "{nodes}");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // The refused attempt released only its own token: a's lock is intact.
    held_everywhere(&b, &c.addrs(), &key, held.token());
    a.unlock(&held).unwrap();
    let taken = b.lock(&key, TTL).unwrap();
    held_on_a_majority(&b, &c.addrs(), &key, taken.token());
}

pub fn unlock_by_non_holder_deletes_nothing<F: Flavor>() {
    let c = cluster(5);
    let client = F::build(builder(&c)).unwrap();
    let key = resource("nonholder");
    let held = client.lock(&key, TTL).unwrap();
    let impostor = Lock::from_token(&key, Token::from_random(&mut redlock_mux::OsRandom));
    match client.unlock(&impostor) {
        Err(Error::NotHeld { nodes }) => assert!(nodes.held().count() >= 3, "{nodes}"),
        // A server's native compare-and-delete cannot tell "held by another" from "gone";
        // for a lock with no validity left (as `from_token` makes) that reads as expired.
        Err(Error::Expired) if has_native(&c.addrs()[0]) => {}
        other => panic!("expected NotHeld, got {other:?}"),
    }
    held_everywhere(&client, &c.addrs(), &key, held.token());
}

pub fn key_ttl_is_what_was_asked<F: Flavor>() {
    let c = cluster(5);
    let client = F::build(builder(&c)).unwrap();
    let key = resource("ttl");
    let ttl = Duration::from_millis(7_777);
    let _lock = client.lock(&key, ttl).unwrap();
    // The nodes that have the key now (a quorum at least) have the ttl asked, less at most
    // the time since; the others get it once a fail-fast round's last SETs have landed.
    let now: Vec<i64> = c.addrs().iter().map(|a| pttl(a, &key)).collect();
    let set: Vec<i64> = now.iter().copied().filter(|&l| l != -2).collect();
    assert!(set.len() >= 3, "PTTLs {now:?}");
    assert!(
        set.iter().all(|l| (7_000..=7_777).contains(l)),
        "PTTLs {now:?}"
    );
    on_every_node(&client, &c.addrs(), "the key on every node", |a| {
        let left = pttl(a, &key);
        assert!(
            left == -2 || (1..=7_777).contains(&left),
            "PTTL {left} on {a}"
        );
        left > 0
    });
}

pub fn extend_keeps_the_lock_and_fails_once_another_holds_it<F: Flavor>() {
    let c = cluster(5);
    let client = F::build(builder(&c)).unwrap();
    let key = resource("extend");
    let mut lock = client.lock(&key, Duration::from_millis(2_000)).unwrap();
    let before = lock.valid_until();
    client.extend(&mut lock, Duration::from_secs(60)).unwrap();
    assert!(lock.valid_until() > before + Duration::from_secs(50));
    assert_eq!(lock.ttl(), Duration::from_secs(60));
    on_every_node(&client, &c.addrs(), "extended", |a| pttl(a, &key) > 55_000);
    // Another client's token takes the key on every node (as after an expiry and a new
    // acquisition).
    for a in c.addrs() {
        assert_eq!(
            redis(&a, &["SET", &key, "someone-else"]),
            Frame::Simple("OK".into())
        );
    }
    let kept = lock.valid_until();
    match client.extend(&mut lock, Duration::from_secs(60)) {
        Err(Error::NotHeld { nodes }) => assert!(nodes.held().count() >= 3, "{nodes}"),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert_eq!(
        lock.valid_until(),
        kept,
        "a failed extension leaves the lock as it was"
    );
    for a in c.addrs() {
        assert_eq!(get(&a, &key).as_deref(), Some("someone-else"));
        assert_eq!(pttl(&a, &key), -1, "the other holder's key is untouched");
    }
}

pub fn unlock_and_extend_after_expiry<F: Flavor>() {
    let c = cluster(5);
    let addrs = c.addrs();
    let client = F::build(builder(&c)).unwrap();
    let key = resource("expiry");
    let mut lock = client.lock(&key, Duration::from_millis(60)).unwrap();
    wait_until(Duration::from_secs(5), "the keys to expire", || {
        addrs.iter().all(|a| pttl(a, &key) == -2)
    });
    assert!(lock.is_expired());
    assert_eq!(lock.validity(), Duration::ZERO);
    assert_eq!(client.unlock(&lock), Err(Error::Expired));
    assert_eq!(client.extend(&mut lock, TTL), Err(Error::Expired));
    gone_everywhere(&client, &addrs, &key);

    // A lock still valid by our clock whose keys vanished (say, deleted by an operator):
    // extension finds them gone and does not bring them back.
    let key = resource("vanished");
    let mut lock = client.lock(&key, TTL).unwrap();
    for a in &addrs {
        redis(a, &["DEL", &key]);
    }
    match client.extend(&mut lock, TTL) {
        Err(Error::Expired) => {}
        // Native compare-and-set cannot tell gone from held by another: for a lock still valid
        // by our clock that reads as held.
        Err(Error::NotHeld { .. }) if has_native(&addrs[0]) => {}
        other => panic!("expected Expired, got {other:?}"),
    }
    gone_everywhere(&client, &addrs, &key);
}

pub fn tiny_ttls_never_panic<F: Flavor>() {
    let c = cluster(5);
    let client = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    // At or below the drift allowance (2 ms + 1%), no round could ever win: refused up
    // front, not retried as if another client held it.
    for ms in [1u64, 2] {
        let ttl = Duration::from_millis(ms);
        match client.try_lock(&resource("tiny"), ttl) {
            Err(Error::Config(redlock_mux::ConfigError::Ttl { ttl: t, min, .. })) => {
                assert_eq!((t, min), (ttl, Duration::from_millis(3)))
            }
            other => panic!("ttl {ms} ms: {other:?}"),
        }
        assert!(matches!(client.lock("tiny", ttl), Err(Error::Config(_))));
    }
    for ms in [3u64, 5] {
        match client.try_lock(&resource("tiny"), Duration::from_millis(ms)) {
            Ok(lock) => assert!(lock.validity() < Duration::from_millis(ms)),
            Err(Error::ValiditySpent { .. }) => {}
            Err(e) => panic!("ttl {ms} ms: {e}"),
        }
    }
    // Past the documented maximum: refused, not sent for the server to refuse.
    assert!(matches!(
        client.try_lock("x", redlock_mux::MAX_TTL + Duration::from_millis(1)),
        Err(Error::Config(redlock_mux::ConfigError::Ttl { .. }))
    ));
    let mut lock = client.lock(&resource("tiny"), TTL).unwrap();
    for bad in [Duration::from_millis(2), Duration::from_secs(u64::MAX)] {
        assert!(matches!(
            client.extend(&mut lock, bad),
            Err(Error::Config(redlock_mux::ConfigError::Ttl { .. }))
        ));
    }
    assert!(
        lock.validity() > TTL / 2,
        "a refused extension sends nothing"
    );
    client.unlock(&lock).unwrap();
    assert!(matches!(
        client.try_lock("x", Duration::from_micros(999)),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        client.try_lock("x", Duration::MAX),
        Err(Error::Config(_))
    ));
}

/// Every duration option at its extremes (0, 1 ns, 1 ms, u64::MAX seconds), and every ttl at
/// those extremes on each client that builds: a typed error or a round, never a panic, and the
/// client still works afterwards (an overflowing deadline used to panic the blocking client
/// and kill the async driver task).
pub fn absurd_durations_are_refused_or_survived_never_a_panic<F: Flavor>() {
    let c = cluster(3);
    let extremes = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_millis(1),
        Duration::from_secs(u64::MAX),
    ];
    let mut built = 0;
    for node_timeout in extremes {
        for delay in extremes {
            let b = redlock_mux::Redlock::builder()
                .nodes(c.addrs())
                .node_timeout(node_timeout)
                .retry(2, delay);
            let client = match F::build(b) {
                Ok(client) => client,
                Err(Error::Config(_)) => {
                    assert!(
                        node_timeout.is_zero()
                            || node_timeout > redlock_mux::MAX_OPTION_DURATION
                            || delay > redlock_mux::MAX_OPTION_DURATION,
                        "refused {node_timeout:?} / {delay:?}"
                    );
                    continue;
                }
                Err(e) => panic!("{node_timeout:?} / {delay:?}: {e}"),
            };
            built += 1;
            for ttl in extremes.iter().copied().chain([TTL]) {
                let key = resource("absurd");
                let _ = client.try_lock(&key, ttl);
                if let Ok(mut lock) = client.lock(&key, ttl) {
                    for ext in extremes {
                        let _ = client.extend(&mut lock, ext);
                    }
                    let _ = client.unlock(&lock);
                }
            }
            // Still answering: a round on the same client ends with a lock or a round's error.
            match client.try_lock(&resource("absurd-after"), TTL) {
                Ok(lock) => {
                    let _ = client.unlock(&lock);
                }
                Err(Error::NoQuorum { .. } | Error::ValiditySpent { .. }) => {}
                Err(e) => panic!("{node_timeout:?} / {delay:?}: after the extremes: {e}"),
            }
        }
    }
    assert_eq!(
        built, 6,
        "node timeouts 1 ns and 1 ms with delays 0, 1 ns, 1 ms"
    );
}

/// An extension that reached the wire may have run its `PEXPIRE` on some nodes whatever its
/// outcome, so the lock may claim no more than the new ttl gives (safety review, item 1).
/// Before the fix the lock kept its old validity on every error, and a second client could
/// take the resource while the first still believed it held it.
pub fn a_failed_extension_never_leaves_more_validity_than_the_keys<F: Flavor>() {
    use crate::proxy::{in_front, latency, set_all};
    let c = cluster(3);
    let (proxies, addrs) = in_front(&c, 1..3);
    let b = redlock_mux::Redlock::builder()
        .nodes(&addrs)
        .node_timeout(Duration::from_millis(100))
        .retry(1, Duration::ZERO);
    let client = F::build(b.clone()).unwrap();
    let slow = |d: Duration| set_all(&proxies, latency(d));

    // 1. A quorum confirms, but later than the new ttl allows (ValiditySpent): the keys live
    //    40 ms, and so may the lock, not the 10 s it had.
    let key = resource("spent-ext");
    let mut lock = client.lock(&key, TTL).unwrap();
    slow(Duration::from_millis(60));
    let tiny = Duration::from_millis(40);
    let result = client.extend(&mut lock, tiny);
    assert!(
        lock.validity() <= tiny,
        "extend -> {result:?}, yet the lock claims {:?}",
        lock.validity()
    );
    // The danger itself: another client takes the resource once the keys expire; by then
    // the first lock must have said it is no longer valid.
    slow(Duration::ZERO);
    let other = F::build(b.retry(1, Duration::ZERO)).unwrap();
    let mut theirs = None;
    wait_until(
        IN_FLIGHT,
        "the short keys expired for another client",
        || {
            theirs = other.try_lock(&key, TTL).ok();
            theirs.is_some()
        },
    );
    assert!(
        lock.is_expired(),
        "two holders: another client has the lock while this one claims {:?}",
        lock.validity()
    );
    other.unlock(&theirs.unwrap()).unwrap();

    // 2. Two of three nodes answer after the node timeout: no quorum, yet every node ran the
    //    PEXPIRE (the proxy holds back only the replies). The lock may claim at most 1 s.
    let key = resource("short-ext");
    let mut lock = client.lock(&key, TTL).unwrap();
    slow(Duration::from_millis(300));
    let short = Duration::from_secs(1);
    let result = client.extend(&mut lock, short);
    assert!(
        lock.validity() <= short,
        "extend -> {result:?}, yet the lock claims {:?}",
        lock.validity()
    );
    assert!(
        matches!(result, Err(Error::NoQuorum { .. })),
        "two nodes past the timeout: {result:?}"
    );
    wait_until(IN_FLIGHT, "the late PEXPIREs landed", || {
        c.addrs()
            .iter()
            .all(|a| (0..=1_000).contains(&pttl(a, &key)))
    });
}

pub fn auth_and_select<F: Flavor>() {
    let c = crate::local::LocalCluster::start_with(
        3,
        &[
            "--requirepass",
            "s3cret",
            "--user",
            "app",
            "on",
            ">apppw",
            "~*",
            "&*",
            "+@all",
        ],
    )
    .unwrap();
    let ports: Vec<u16> = c.servers().iter().map(|s| s.port()).collect();
    let urls = [
        format!("redis://:s3cret@127.0.0.1:{}/2", ports[0]),
        format!("redis://app:apppw@127.0.0.1:{}/2", ports[1]),
        format!("redis://s3cret@127.0.0.1:{}/2", ports[2]),
    ];
    let client = F::build(
        redlock_mux::Redlock::builder()
            .nodes(&urls)
            .node_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let key = resource("auth");
    let lock = client.lock(&key, TTL).unwrap();
    let token = std::str::from_utf8(lock.token().as_bytes())
        .unwrap()
        .to_string();
    for p in &ports {
        let addr = format!("127.0.0.1:{p}");
        let look = || {
            let cmds = [
                vec!["AUTH", "s3cret"],
                vec!["SELECT", "2"],
                vec!["GET", key.as_str()],
                vec!["SELECT", "0"],
                vec!["EXISTS", key.as_str()],
            ];
            crate::redis_pipeline(&addr, &cmds)
        };
        // The lock is decided at a quorum: the last node's `SET` may still be on its way.
        crate::wait_until(
            Duration::from_secs(10),
            "the token in db 2 on every node",
            || matches!(&look()[2], Frame::Bulk(b) if b.as_ref() == token.as_bytes()),
        );
        let ok = Frame::Simple("OK".into());
        let got = look();
        assert_eq!(got[0], ok, "AUTH on {addr}");
        assert_eq!(got[1], ok, "SELECT 2 on {addr}");
        assert_eq!(got[3], ok, "SELECT 0 on {addr}");
        assert_eq!(got[4], Frame::Integer(0), "the key in db 0 on {addr}");
    }
    client.unlock(&lock).unwrap();
}

pub fn unix_sockets_alone_and_mixed_with_tcp<F: Flavor>() {
    let mut c = cluster(3);
    let unix = c.unix_addrs();
    let tcp = c.addrs();
    let client = F::build(builder(&c).nodes(&unix)).unwrap();
    let key = resource("unix");
    let mut lock = client.lock(&key, TTL).unwrap();
    // The keys are on the same servers, whichever way they are reached.
    held_everywhere(&client, &tcp, &key, lock.token());
    client.extend(&mut lock, TTL).unwrap();
    client.unlock(&lock).unwrap();
    gone_everywhere(&client, &tcp, &key);
    // A restarted server is reconnected through its socket.
    c.server(1).restart().unwrap();
    wait_until(
        Duration::from_secs(10),
        "a lock through the restarted socket",
        || {
            client
                .try_lock(&key, TTL)
                .map(|l| client.unlock(&l).is_ok())
                .unwrap_or(false)
        },
    );
    // Mixed: node 0 over TCP, node 1 over its socket, node 2 a socket that does not exist.
    let missing = "unix:///nonexistent/redlock-mux/redis.sock".to_string();
    let mixed = [tcp[0].clone(), unix[1].clone(), missing];
    let client = F::build(builder(&c).nodes(&mixed).fail_fast(false)).unwrap();
    let lock = client.lock(&key, TTL).unwrap();
    assert_eq!(get(&tcp[0], &key).as_deref(), Some(lock.token().as_str()));
    assert_eq!(get(&tcp[1], &key).as_deref(), Some(lock.token().as_str()));
    client.unlock(&lock).unwrap();
    // The missing socket is a node failure, named: with only node 1 left, no quorum.
    c.server(0).stop();
    match client.try_lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => {
            assert!(
                matches!(nodes.0[2].outcome, NodeOutcome::Io(_) | NodeOutcome::Down),
                "{nodes}"
            );
            assert!(
                nodes.0[2].addr.starts_with("unix:///nonexistent"),
                "{nodes}"
            );
        }
        other => panic!("expected no quorum, got {other:?}"),
    }
}

pub fn inspect_shows_each_nodes_holder_and_ttl<F: Flavor>() {
    use redlock_mux::Holder;
    let mut c = cluster(5);
    let addrs = c.addrs();
    let client = F::build(builder(&c)).unwrap();
    let key = resource("inspect");
    // Free everywhere.
    let view = client.inspect(&key).unwrap();
    assert!(view
        .nodes
        .iter()
        .all(|n| n.holder == Holder::Free && n.ttl.is_none()));
    assert_eq!(view.quorum_holder(), None);
    let lock = client.lock(&key, TTL).unwrap();
    held_everywhere(&client, &addrs, &key, lock.token());
    // Something else on node 4, node 3 down.
    redis(&addrs[4], &["SET", &key, "not-a-token", "PX", "5000"]);
    c.server(3).stop();
    let view = client.inspect(&key).unwrap();
    assert_eq!(view.quorum_holder(), Some(*lock.token()));
    for n in &view.nodes[..3] {
        assert_eq!(n.holder, Holder::Token(*lock.token()), "{n:?}");
        let ttl = n.ttl.expect("a ttl");
        assert!(ttl <= TTL && ttl > TTL - Duration::from_secs(5), "{ttl:?}");
    }
    assert!(
        matches!(view.nodes[3].holder, Holder::Unknown(_)),
        "{:?}",
        view.nodes[3]
    );
    assert_eq!(view.nodes[4].holder, Holder::Other);
    // Released: no quorum holds it any more (node 4's value is not ours to release).
    client.unlock(&lock).unwrap();
    wait_serving(&client, IN_FLIGHT, "the release", || {
        client
            .inspect(&key)
            .map(|v| v.quorum_holder().is_none())
            .unwrap_or(false)
    });
}
