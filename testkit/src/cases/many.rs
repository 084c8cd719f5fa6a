//! Locks over several resources (`lock_many`): all or nothing, large sets.

use super::*;

pub fn lock_many_takes_every_resource_or_none<F: Flavor>() {
    let c = cluster(5);
    let addrs = c.addrs();
    let client = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    let other = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    let (a, b, cc, d) = (
        resource("many-a"),
        resource("many-b"),
        resource("many-c"),
        resource("many-d"),
    );
    // Given in any order; the lock keeps the order given.
    let lock = client.lock_many(&[&cc, &a, &b], TTL).unwrap();
    assert_eq!(lock.resources().collect::<Vec<_>>(), [&cc, &a, &b]);
    assert_eq!(lock.resource(), cc);
    for key in [&a, &b, &cc] {
        held_everywhere(&client, &addrs, key, lock.token());
    }
    // A set that overlaps it in one resource is refused, names it, and sets nothing.
    match other.try_lock_many(&[&d, &b], TTL) {
        Err(Error::Conflict { held, nodes }) => {
            assert_eq!(held.as_deref(), Some(b.as_str()), "{nodes}");
        }
        other => panic!("expected a conflict on {b}, got {other:?}"),
    }
    gone_everywhere(&other, &addrs, &d);
    // A single lock on one of them too.
    match other.try_lock(&a, TTL) {
        Err(Error::Conflict { held, .. }) => assert_eq!(held.as_deref(), Some(a.as_str())),
        other => panic!("expected a conflict on {a}, got {other:?}"),
    }
    client.unlock(&lock).unwrap();
    for key in [&a, &b, &cc] {
        gone_everywhere(&client, &addrs, key);
    }
    // Free again: the other client takes the overlapping set.
    let lock = other.try_lock_many(&[&d, &b], TTL).unwrap();
    other.unlock(&lock).unwrap();
    // Fenced sets have one token for the set, above the counter's earlier values.
    let fenced = F::build(builder(&c).fencing(true)).unwrap();
    let set = fenced.lock_many(&[&a, &b], TTL).unwrap();
    let t1 = set.fencing_token().unwrap();
    fenced.unlock(&set).unwrap();
    let single = fenced.lock(&a, TTL).unwrap();
    assert!(single.fencing_token().unwrap() > t1);
    fenced.unlock(&single).unwrap();
}

pub fn lock_many_extends_and_releases_only_what_it_holds<F: Flavor>() {
    let c = cluster(5);
    let addrs = c.addrs();
    let client = F::build(builder(&c)).unwrap();
    let (a, b) = (resource("own-a"), resource("own-b"));
    let mut lock = client.lock_many(&[&a, &b], Duration::from_secs(5)).unwrap();
    for key in [&a, &b] {
        held_everywhere(&client, &addrs, key, lock.token());
    }
    // On node 0, `b` now belongs to someone else.
    redis(&addrs[0], &["SET", &b, "foreign", "PX", "60000"]);
    client.extend(&mut lock, Duration::from_secs(60)).unwrap();
    // Extended where both keys are ours (once the fail-fast round's last extensions have
    // landed); node 0 changed nothing, `a` included.
    wait_serving(&client, IN_FLIGHT, "the extension on nodes 1-4", || {
        addrs[1..]
            .iter()
            .all(|n| pttl(n, &a) > 10_000 && pttl(n, &b) > 10_000)
    });
    assert!(
        pttl(&addrs[0], &a) <= 5_000,
        "node 0 extended a key of a set it does not hold whole"
    );
    client.unlock(&lock).unwrap();
    // Released everywhere it was ours; the foreign `b` on node 0 stays.
    gone_everywhere(&client, &addrs, &a);
    wait_serving(&client, IN_FLIGHT, "b released on 1-4", || {
        addrs[1..].iter().all(|n| get(n, &b).is_none())
    });
    assert_eq!(get(&addrs[0], &b).as_deref(), Some("foreign"));
}

pub fn lock_many_refuses_bad_lists_and_the_counter_key<F: Flavor>() {
    use redlock_mux::ConfigError;
    let c = cluster(3);
    let client = F::build(builder(&c).fencing(true).fencing_key("my:fence")).unwrap();
    let a = resource("bad");
    for (list, why) in [
        (vec![], "empty"),
        (vec![a.as_str(), "x", a.as_str()], "duplicate"),
        (vec!["my:fence"], "the counter"),
        (vec!["x", "my:fence"], "the counter in a set"),
    ] {
        match client.try_lock_many(&list, TTL) {
            Err(Error::Config(
                ConfigError::Resources { .. }
                | ConfigError::DuplicateResource(_)
                | ConfigError::FencingKey(_),
            )) => {}
            other => panic!("{why}: {other:?}"),
        }
    }
    assert!(matches!(
        client.try_lock("my:fence", TTL),
        Err(Error::Config(ConfigError::FencingKey(_)))
    ));
    let too_many: Vec<String> = (0..=redlock_mux::MAX_RESOURCES)
        .map(|i| format!("k{i}"))
        .collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
    assert!(matches!(
        client.try_lock_many(&too_many, TTL),
        Err(Error::Config(ConfigError::Resources { count, .. })) if count == too_many.len()
    ));
    // Nothing was sent for any of them.
    for addr in c.addrs() {
        assert!(get(&addr, "my:fence").is_none());
    }
    // The configured key is the one counted.
    let lock = client.lock(&a, TTL).unwrap();
    let token = lock.fencing_token().unwrap();
    let on_nodes = c
        .addrs()
        .iter()
        .filter(|n| get(n, "my:fence") == Some(token.to_string()))
        .count();
    assert!(on_nodes >= 2, "token {token} on {on_nodes} nodes");
    assert!(matches!(
        redlock_mux::Redlock::builder()
            .nodes(c.addrs())
            .fencing(true)
            .fencing_key("")
            .build(),
        Err(Error::Config(ConfigError::FencingKey(_)))
    ));
}

/// Three callers sharing one client, each taking 1,024 resources with names of about 1.1 KB:
/// some 3.4 MB for every node in one write pass of the blocking client. A write buffer that
/// large is back-pressure (the node reads it as fast as it can), never a node failure.
pub fn large_lock_many_calls_from_several_callers_all_succeed<F: Flavor>()
where
    F::Client: Sync,
{
    let c = cluster(3);
    let client = F::build(builder(&c).node_timeout(Duration::from_secs(5))).unwrap();
    let pad = "p".repeat(1100);
    let sets: Vec<Vec<String>> = (0..3)
        .map(|t| {
            (0..redlock_mux::MAX_RESOURCES)
                .map(|i| format!("{}:{t}:{i}:{pad}", resource("big")))
                .collect()
        })
        .collect();
    let barrier = std::sync::Barrier::new(3);
    std::thread::scope(|s| {
        let handles: Vec<_> = sets
            .iter()
            .map(|set| {
                let (client, barrier) = (&client, &barrier);
                s.spawn(move || {
                    let names: Vec<&str> = set.iter().map(String::as_str).collect();
                    barrier.wait();
                    let lock = client.try_lock_many(&names, TTL)?;
                    client.unlock(&lock)
                })
            })
            .collect();
        for (t, h) in handles.into_iter().enumerate() {
            if let Err(e) = h.join().unwrap() {
                panic!("caller {t}: {e}");
            }
        }
    });
}
