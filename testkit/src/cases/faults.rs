//! Masters down, paused, restarted or misbehaving: votes lost, never safety.

use super::*;

pub fn scripts_survive_script_flush<F: Flavor>() {
    // Without fair mode the first try is a plain `SET NX`, which reaches every node; a fair
    // lock's first try is the enter script, and a node whose `NOSCRIPT` comes back after the
    // round was won is not sent the acquisition again (docs: an acquisition is resent only
    // while its round waits for that node), so it holds a quorum at least.
    for fair in [false, true] {
        let c = cluster(5);
        let client = F::build(builder(&c).fair(fair)).unwrap();
        let key = resource("flush");
        // Load the scripts once, then flush them everywhere.
        let mut warm = client.lock(&key, TTL).unwrap();
        client.extend(&mut warm, TTL).unwrap();
        client.unlock(&warm).unwrap();
        for a in c.addrs() {
            assert_eq!(redis(&a, &["SCRIPT", "FLUSH"]), Frame::Simple("OK".into()));
            assert_eq!(
                redis(&a, &["SCRIPT", "EXISTS", redlock_mux::script::RELEASE_SHA1]),
                Frame::Array(vec![Frame::Integer(0)])
            );
        }
        let mut lock = client.lock(&key, TTL).unwrap();
        client.extend(&mut lock, Duration::from_secs(30)).unwrap();
        if fair {
            let token = lock.token().as_str();
            let holders: Vec<String> = c
                .addrs()
                .into_iter()
                .filter(|a| get(a, &key).as_deref() == Some(token))
                .collect();
            assert!(holders.len() >= 3, "held on {holders:?} only");
            on_every_node(&client, &holders, "extended after a flush", |a| {
                pttl(a, &key) > 25_000
            });
        } else {
            on_every_node(&client, &c.addrs(), "extended after a flush", |a| {
                pttl(a, &key) > 25_000
            });
        }
        client.unlock(&lock).unwrap();
        gone_everywhere(&client, &c.addrs(), &key);
    }
}

pub fn two_of_five_down_still_acquires<F: Flavor>() {
    let mut c = cluster(5);
    let client = F::build(builder(&c)).unwrap();
    c.server(1).stop();
    c.server(3).stop();
    for i in 0..20 {
        let key = resource("twodown");
        let lock = client
            .lock(&key, TTL)
            .unwrap_or_else(|e| panic!("attempt {i}: {e}"));
        client.unlock(&lock).unwrap();
    }
}

pub fn three_of_five_down_fails_fast_naming_causes<F: Flavor>() {
    let mut c = cluster(5);
    let timeout = Duration::from_millis(200);
    let client = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    let slack = measured_slack(&client, Duration::from_millis(100));
    c.server(0).stop();
    c.server(2).stop();
    c.server(4).stop();
    for i in 0..10 {
        let start = Instant::now();
        let err = client.try_lock(&resource("threedown"), TTL).unwrap_err();
        let took = start.elapsed();
        // Within the node timeout, plus slack measured on this machine now; in practice
        // refused connections answer in microseconds.
        assert!(
            took < timeout + slack,
            "attempt {i} took {took:?} (slack {slack:?})"
        );
        match err {
            Error::NoQuorum { nodes } => {
                assert_eq!(nodes.0.len(), 5);
                for down in [0, 2, 4] {
                    let o = &nodes.0[down].outcome;
                    assert!(
                        matches!(o, NodeOutcome::Io(_) | NodeOutcome::Down),
                        "node {down}: {o}"
                    );
                }
                let text = Error::NoQuorum { nodes }.to_string();
                assert!(text.contains(&c.addrs()[0]), "{text}");
            }
            other => panic!("expected NoQuorum, got {other:?}"),
        }
    }
}

pub fn paused_node_costs_at_most_its_timeout_and_late_replies_stay_late<F: Flavor>() {
    let mut c = cluster(5);
    let timeout = Duration::from_millis(200);
    // Without fail-fast every round waits for the paused node, so the timing bound is tight
    // and every late reply really is late.
    let client = F::build(builder(&c).fail_fast(false).retry(1, Duration::ZERO)).unwrap();
    let addrs = c.addrs();
    let p = resource("paused");
    assert_eq!(
        redis(&addrs[0], &["SET", &p, "foreign"]),
        Frame::Simple("OK".into())
    );
    let slack = measured_slack(&client, Duration::from_millis(100));
    c.server(0).pause().unwrap();
    for _ in 0..3 {
        let start = Instant::now();
        let lock = client.try_lock(&p, TTL).unwrap();
        let took = start.elapsed();
        assert!(took < timeout + slack, "took {took:?} (slack {slack:?})");
        client.unlock(&lock).unwrap();
    }
    c.server(0).resume().unwrap();
    // Node 0 now sends its late replies: `$-1` (held) for the three SETs, `:0` for the
    // releases. A key free on node 0 and foreign elsewhere: node 0's true answer is OK.
    let q = resource("after-pause");
    for a in &addrs[1..] {
        assert_eq!(
            redis(a, &["SET", &q, "foreign"]),
            Frame::Simple("OK".into())
        );
    }
    match client.try_lock(&q, TTL) {
        Err(Error::Conflict { nodes, .. }) => {
            assert_eq!(
                nodes.0[0].outcome,
                NodeOutcome::Ok,
                "node 0 answered: {nodes}"
            );
            for n in &nodes.0[1..] {
                assert_eq!(n.outcome, NodeOutcome::Held, "{nodes}");
            }
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // And the release that followed the lost round reached node 0 in order.
    assert_eq!(get(&addrs[0], &q), None);
    for a in &addrs[1..] {
        assert_eq!(get(a, &q).as_deref(), Some("foreign"));
    }
}

pub fn restarted_node_is_reconnected_and_used<F: Flavor>() {
    let mut c = cluster(5);
    let client = F::build(builder(&c)).unwrap();
    let warm = client.lock(&resource("warm"), TTL).unwrap();
    client.unlock(&warm).unwrap();
    c.server(2).restart().unwrap();
    let addr = c.addrs()[2].clone();
    let mut used = None;
    for attempt in 0..5 {
        let key = resource("restart");
        let lock = client.lock(&key, TTL).unwrap();
        if get(&addr, &key).as_deref() == Some(lock.token().as_str()) {
            used = Some(attempt);
            break;
        }
    }
    assert!(used.is_some(), "the restarted node never got a key back");
}

pub fn lost_rounds_leave_no_key<F: Flavor>() {
    let c = cluster(5);
    let addrs = c.addrs();
    let client = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    // Lost to contention: three nodes hold a foreign token.
    let key = resource("lost");
    for a in &addrs[..3] {
        redis(a, &["SET", &key, "foreign"]);
    }
    assert!(matches!(
        client.try_lock(&key, TTL),
        Err(Error::Conflict { .. })
    ));
    for a in &addrs[3..] {
        assert_eq!(get(a, &key), None, "our SET was released on {a}");
    }
    // Lost because the drift allowance leaves no validity: the keys were set everywhere,
    // and must all be released. (10 s less 99.9799% and 2 ms leaves 10 µs, less than any
    // round over five sockets takes.)
    let spent = F::build(builder(&c).drift_factor(0.999799).retry(1, Duration::ZERO)).unwrap();
    let key = resource("spent");
    match spent.try_lock(&key, TTL) {
        Err(Error::ValiditySpent { ttl, .. }) => assert_eq!(ttl, TTL),
        other => panic!("expected ValiditySpent, got {other:?}"),
    }
    gone_everywhere(&spent, &addrs, &key);
}

pub fn one_bad_node_is_one_missing_vote<F: Flavor>() {
    let mut c = cluster(4);
    // A fifth master that wants a password we do not give: every command gets NOAUTH.
    let guarded = crate::local::LocalServer::start_with(&["--requirepass", "pw"]).unwrap();
    let mut addrs = c.addrs();
    addrs.push(guarded.addr().to_string());
    let b = builder(&c)
        .nodes(&addrs)
        .fail_fast(false)
        .retry(1, Duration::ZERO);
    let client = F::build(b).unwrap();
    c.server(0).stop();
    // Node 0 dead, node 4 erroring: three votes left, exactly a quorum.
    let key = resource("badnode");
    let lock = client.try_lock(&key, TTL).unwrap();
    client.unlock(&lock).unwrap();
    // The per-node report of a lost round shows each cause.
    for a in &addrs[1..4] {
        redis(a, &["SET", &key, "foreign"]);
    }
    match client.try_lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) | Err(Error::Conflict { nodes, .. }) => {
            assert!(nodes.0[0].outcome.is_failure(), "{nodes}");
            match &nodes.0[4].outcome {
                NodeOutcome::Server(msg) => assert!(msg.starts_with("NOAUTH"), "{msg}"),
                other => panic!("node 4: {other}"),
            }
            assert_eq!(nodes.held().count(), 3, "{nodes}");
        }
        other => panic!("expected a lost round, got {other:?}"),
    }
}
