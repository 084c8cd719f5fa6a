//! Fencing tokens across N masters: increasing, written back, guarded against counters out of range or evictable.

use super::*;

/// The fencing counter's value on a node (0 when it has none).
fn counter(addr: &str) -> u64 {
    get(addr, redlock_mux::DEFAULT_FENCING_KEY).map_or(0, |v| v.parse().expect("a number"))
}

pub fn fenced_tokens_increase_from_holder_to_holder<F: Flavor>() {
    let c = cluster(5);
    let addrs = c.addrs();
    let fenced = F::build(builder(&c).fencing(true)).unwrap();
    let other = F::build(builder(&c).fencing(true)).unwrap();
    let plain = F::build(builder(&c)).unwrap();
    let key = resource("fenced");
    let mut last = 0;
    for (i, client) in [&fenced, &other, &fenced, &other].into_iter().enumerate() {
        let mut lock = client.lock(&key, TTL).unwrap();
        let token = lock.fencing_token().expect("a fenced lock has a token");
        assert!(token > last, "holder {i}: token {token} after {last}");
        last = token;
        // The write-back reached a quorum before the lock was returned.
        let raised = addrs.iter().filter(|a| counter(a) >= token).count();
        assert!(raised >= 3, "counter >= {token} on {raised} of 5 nodes");
        // Extension and release leave the counter alone.
        let before: Vec<u64> = addrs.iter().map(|a| counter(a)).collect();
        client.extend(&mut lock, TTL).unwrap();
        assert_eq!(
            lock.fencing_token(),
            Some(token),
            "extension keeps the token"
        );
        client.unlock(&lock).unwrap();
        gone_everywhere(client, &addrs, &key);
        let after: Vec<u64> = addrs.iter().map(|a| counter(a)).collect();
        assert_eq!(before, after, "extend and unlock touched the counter");
    }
    // One counter for every resource: another resource's token is greater still.
    let lock = fenced.lock(&resource("fenced-other"), TTL).unwrap();
    assert!(lock.fencing_token().unwrap() > last);
    fenced.unlock(&lock).unwrap();
    // An unfenced client hands out no token and leaves the counter alone.
    let before: Vec<u64> = addrs.iter().map(|a| counter(a)).collect();
    let lock = plain.lock(&key, TTL).unwrap();
    assert_eq!(lock.fencing_token(), None);
    plain.unlock(&lock).unwrap();
    let after: Vec<u64> = addrs.iter().map(|a| counter(a)).collect();
    assert_eq!(before, after);
}

/// The second phase is what makes tokens increase: node 0's counter is far ahead of the
/// others' (it saw acquisitions they did not), the first holder's token comes from it, and
/// node 0 then fails. The next holder's quorum is nodes 1-4, whose counters the first holder's
/// write-back raised: its token is greater. (`tests/safety.rs` runs the same events with the
/// write-back switched off, and the token goes down.)
pub fn fencing_write_back_outlives_the_master_with_the_highest_counter<F: Flavor>() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let client = F::build(builder(&c).fencing(true)).unwrap();
    let key = resource("fence-back");
    redis(
        &addrs[0],
        &["SET", redlock_mux::DEFAULT_FENCING_KEY, "1000"],
    );
    let first = client.lock(&key, TTL).unwrap();
    let t1 = first.fencing_token().unwrap();
    client.unlock(&first).unwrap();
    gone_everywhere(&client, &addrs, &key);
    c.server(0).stop();
    let second = client.lock(&key, TTL).unwrap();
    let t2 = second.fencing_token().unwrap();
    assert!(
        t2 > t1,
        "token {t2} after {t1}: the write-back did not reach the other nodes"
    );
    client.unlock(&second).unwrap();
}

/// A node (or a proxy in front of it) that answers a fenced acquisition with the counter
/// 2^63 - 1: its vote is a failure, not the highest counter. Without that, its number became
/// the token, the second phase wrote it to every honest master's counter, and every later
/// fenced acquisition failed (`INCR` overflows there). Here four honest masters and the
/// hostile node: tokens stay small and keep increasing, the honest counters never leave the
/// range, and the hostile node's votes are counted as fencing faults.
pub fn a_counter_out_of_range_is_a_failed_vote_not_the_token<F: Flavor>() {
    let c = cluster(4);
    let hostile = crate::hostile::HostileServer::start(crate::hostile::Behavior::HugeCounter);
    let mut addrs = c.addrs();
    addrs.push(hostile.addr());
    // Every node's reply counted (no fail-fast), the hostile one's included.
    let client = F::build(
        redlock_mux::Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(500))
            .fail_fast(false)
            .fencing(true)
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    let key = resource("huge-counter");
    let mut last = 0;
    for i in 0..3 {
        let lock = client
            .lock(&key, TTL)
            .unwrap_or_else(|e| panic!("holder {i}: {e}"));
        let token = lock.fencing_token().unwrap();
        assert!(
            token > last && token < 100,
            "holder {i}: token {token} after {last}: the hostile counter made the token"
        );
        last = token;
        client.unlock(&lock).unwrap();
        for a in &addrs[..4] {
            let counter = counter(a);
            assert!(
                counter <= redlock_mux::MAX_FENCING_TOKEN,
                "{a}: counter {counter} written back"
            );
        }
    }
    let stats = client.stats();
    assert!(
        stats.nodes[4].fencing_faults >= 3,
        "the hostile node's votes: {:?}",
        stats.nodes[4]
    );
    assert!(stats.nodes[..4].iter().all(|n| n.fencing_faults == 0));
}

/// Counters an operator (or an older client) left where fenced acquisitions never put them:
/// above 2^53 (`INCR` still works, its reply is out of range), at 2^63 - 1 (`INCR` overflows)
/// and not a number. Each node's vote is a typed fencing fault that names what to do; one
/// such node costs one vote, three of three cost the lock; repaired as the docs say, fencing
/// works again.
pub fn a_counter_out_of_range_needs_repair_and_says_so<F: Flavor>() {
    let c = cluster(3);
    let addrs = c.addrs();
    // Every node's answer awaited, so that the report shows all three.
    let client = F::build(
        builder(&c)
            .fencing(true)
            .fail_fast(false)
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    let key = resource("bad-counter");
    let set = |a: &str, v: &str| {
        redis(a, &["SET", redlock_mux::DEFAULT_FENCING_KEY, v]);
    };
    // One node out of range: its vote is lost, the lock is taken on the other two.
    set(&addrs[1], &i64::MAX.to_string());
    let lock = client.lock(&key, TTL).unwrap();
    assert_eq!(lock.fencing_token(), Some(1));
    client.unlock(&lock).unwrap();
    // All three: no lock, and every node says why.
    let above = (redlock_mux::MAX_FENCING_TOKEN + 1).to_string();
    set(&addrs[0], &above);
    set(&addrs[2], "not-a-number");
    let nodes = match client.lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => nodes,
        other => panic!("expected no quorum, got {other:?}"),
    };
    use redlock_mux::FencingFault;
    let faults: Vec<_> = nodes.0.iter().map(|r| r.outcome.clone()).collect();
    assert_eq!(
        faults,
        [
            NodeOutcome::Fencing(FencingFault::CounterOutOfRange(
                redlock_mux::MAX_FENCING_TOKEN as i64 + 2
            )),
            NodeOutcome::Fencing(FencingFault::CounterOverflow),
            NodeOutcome::Fencing(FencingFault::CounterNotAnInteger),
        ],
        "{nodes}"
    );
    let text = Error::NoQuorum {
        nodes: nodes.clone(),
    }
    .to_string();
    assert!(
        text.contains(&addrs[1]) && text.contains("A counter out of range"),
        "{text}"
    );
    // The keys the script set before its INCR failed were released.
    gone_everywhere(&client, &addrs, &key);
    // The repair: every counter set to at least the highest token handed out (1).
    for a in &addrs {
        set(a, "1");
    }
    let lock = client.lock(&key, TTL).unwrap();
    assert_eq!(lock.fencing_token(), Some(2));
    client.unlock(&lock).unwrap();
}

/// The counter is a key without expiry: an `allkeys-*` eviction policy can drop it under
/// memory pressure, and the next token starts again from 1 (shown first, on the servers
/// alone). A fenced client reads every master's policy when it connects and does not count
/// the vote of one whose policy may evict the counter, naming the node and the policy; the
/// `volatile-*` policies cannot evict it (it has no ttl), so a quorum of such masters keeps
/// fencing working, under the same pressure. Where `CONFIG` is denied, the client cannot
/// tell: it goes on, and counts it.
pub fn fencing_refuses_masters_whose_policy_may_evict_the_counter<F: Flavor>() {
    use crate::local::LocalServer;
    use redlock_mux::FencingFault;
    let key_of = redlock_mux::DEFAULT_FENCING_KEY;
    let policy =
        |p: &'static str| -> [&'static str; 4] { ["--maxmemory", "4mb", "--maxmemory-policy", p] };
    // The hazard, on the servers alone: the counter at 5, memory pressure, the counter gone.
    let lru = LocalCluster::start_with(3, &policy("allkeys-lru")).unwrap();
    let addrs = lru.addrs();
    for a in &addrs {
        redis(a, &["SET", key_of, "5"]);
        let written = fill_until(a, || get(a, key_of).is_none());
        eprintln!("{a}: counter evicted after {written} writes of 64 KiB");
    }
    // So a fenced client refuses them all, each vote a fault naming the node and its policy.
    let client = F::build(
        builder(&lru)
            .fencing(true)
            .fail_fast(false)
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    let key = resource("evict");
    match client.lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => {
            for r in &nodes.0 {
                assert_eq!(
                    r.outcome,
                    NodeOutcome::Fencing(FencingFault::EvictionPolicy("allkeys-lru".into())),
                    "{nodes}"
                );
            }
            let text = nodes.to_string();
            assert!(
                addrs.iter().all(|a| text.contains(a.as_str()))
                    && text.contains("maxmemory-policy allkeys-lru may evict"),
                "{text}"
            );
        }
        other => panic!("expected no quorum of counters that stay, got {other:?}"),
    }
    gone_everywhere(&client, &addrs, &key);
    // Unfenced locks do not care: the same masters grant them.
    let plain = F::build(builder(&lru)).unwrap();
    let lock = plain.lock(&key, TTL).unwrap();
    plain.unlock(&lock).unwrap();
    assert!(plain.stats().nodes.iter().all(|n| n.fencing_faults == 0));

    // Two masters that may evict it beside three whose volatile-lru cannot: the three carry
    // fencing, and their counters outlive the same pressure.
    let mut servers = Vec::new();
    for p in [
        "allkeys-lru",
        "allkeys-random",
        "volatile-lru",
        "volatile-lru",
        "volatile-ttl",
    ] {
        servers.push(LocalServer::start_with(&policy(p)).unwrap());
    }
    let mixed = LocalCluster::from_servers(servers);
    let addrs = mixed.addrs();
    let client = F::build(builder(&mixed).fencing(true).fail_fast(false)).unwrap();
    let mut last = 0;
    for round in 0..6 {
        let lock = client.lock(&key, TTL).unwrap();
        let token = lock.fencing_token().unwrap();
        assert!(token > last, "round {round}: token {token} after {last}");
        last = token;
        client.unlock(&lock).unwrap();
        if round == 4 {
            for a in &addrs {
                // The counter has no ttl, so no volatile-* policy can evict it.
                assert_eq!(pttl(a, key_of), -1, "{a}: the counter has a ttl");
                let before = get(a, key_of);
                fill_until(a, || {
                    matches!(
                        redis(a, &["INFO", "stats"]),
                        Frame::Bulk(b) if String::from_utf8_lossy(&b)
                            .lines()
                            .find_map(|l| l.strip_prefix("evicted_keys:"))
                            .and_then(|n| n.trim().parse::<u64>().ok())
                            .is_some_and(|n| n >= 32)
                    )
                });
                eprintln!("{a}: counter {before:?} -> {:?}", get(a, key_of));
            }
            for a in &addrs[2..] {
                assert!(
                    get(a, key_of).is_some(),
                    "{a}: volatile-* evicted the counter"
                );
            }
        }
    }
    let stats = client.stats();
    for (i, n) in stats.nodes.iter().enumerate() {
        // Every acquisition's vote of the first two, none of the others'.
        assert_eq!(n.fencing_faults >= 6, i < 2, "node {i}: {n:?}");
        assert!(i < 2 || n.fencing_faults == 0, "node {i}: {n:?}");
        assert_eq!(n.eviction_unchecked, 0, "node {i}: {n:?}");
    }

    // CONFIG denied by the ACL: the policy cannot be read; fencing goes on, and says so.
    let denied = LocalCluster::start_with(
        3,
        &[
            "--user", "fenced", "on", ">pw", "~*", "&*", "+@all", "-config",
        ],
    )
    .unwrap();
    let as_user: Vec<String> = denied
        .servers()
        .iter()
        .map(|s| format!("redis://fenced:pw@127.0.0.1:{}", s.port()))
        .collect();
    let client = F::build(builder(&denied).nodes(&as_user).fencing(true)).unwrap();
    let lock = client.lock(&key, TTL).unwrap();
    assert!(lock.fencing_token().is_some());
    client.unlock(&lock).unwrap();
    // A fail-fast round ends at a quorum: the last node's replies (its CONFIG GET's among
    // them) are read while the client is served.
    let every_node = crate::serve_until(&client, IN_FLIGHT, || {
        client
            .stats()
            .nodes
            .iter()
            .all(|n| n.eviction_unchecked == 1)
    });
    assert!(every_node, "{:?}", client.stats());
    // An unfenced client does not ask.
    let plain = F::build(builder(&denied).nodes(&as_user)).unwrap();
    let lock = plain.lock(&key, TTL).unwrap();
    plain.unlock(&lock).unwrap();
    assert!(plain
        .stats()
        .nodes
        .iter()
        .all(|n| n.eviction_unchecked == 0));
}
