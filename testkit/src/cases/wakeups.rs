//! Waiters woken by the masters' pushes, and the fall-backs when pushes are lost or absent.

use super::*;

/// A server that knows no `HELLO` (as before Redis 6): no RESP3, so no pushes.
const NO_HELLO: &[&str] = &["--rename-command", "HELLO", ""];

/// With wake-ups (the default), a waiter whose retry delay is far longer than the test allows
/// gets the lock moments after the holder releases it: woken by the masters' invalidation
/// pushes, not by its timer. One master knows no RESP3 and takes no part in the pushes; the
/// others wake the waiter. (With polling, the first retry comes after half the retry delay.)
pub fn a_waiter_is_woken_by_the_release_not_by_polling<F: Flavor>()
where
    F::Client: Sync,
{
    let mut servers: Vec<_> = (0..4)
        .map(|_| crate::local::LocalServer::start().expect("redis-server"))
        .collect();
    servers.push(crate::local::LocalServer::start_with(NO_HELLO).expect("redis-server"));
    let c = LocalCluster::from_servers(servers);
    // Without fair mode (the default): the tracking servers' invalidation pushes wake the
    // waiter (fair mode's bells are `fair_waiters_get_the_lock_in_the_order_they_started_waiting`'s).
    let holder = F::build(builder(&c).fair(false)).unwrap();
    let delay = Duration::from_secs(30);
    let waiter = F::build(builder(&c).fair(false).retry(1000, delay)).unwrap();
    let key = resource("wake");
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let r = waiter.lock_within(&key, TTL, Duration::from_secs(120));
            (r, Instant::now())
        });
        // The waiter has read the key on the masters that track (after its refused try).
        wait_until(Duration::from_secs(20), "the waiter's read tracked", || {
            tracking_nodes(&c.addrs()[..4]) >= 3
        });
        let released = Instant::now();
        holder.unlock(&held).unwrap();
        let (lock, got) = waiting.join().unwrap();
        let lock = lock.expect("the waiter gets the lock");
        let handoff = got - released;
        // Polling would wait at least delay / 2 = 15 s for its first retry.
        assert!(handoff < delay / 4, "hand-off took {handoff:?}");
        held_on_a_majority(&waiter, &c.addrs(), &key, lock.token());
        waiter.unlock(&lock).unwrap();
    });
    let stats = waiter.stats();
    let pushing = stats.nodes[..4]
        .iter()
        .filter(|n| n.invalidations > 0)
        .count();
    assert!(pushing >= 3, "{stats:?}");
    assert_eq!(stats.nodes[4].invalidations, 0, "{stats:?}");
    assert!(
        stats.nodes.iter().all(|n| n.protocol_errors == 0),
        "{stats:?}"
    );
}

/// A push that never comes (the masters' active expiry is off, so the holder's key expires
/// silently) costs the waiter no more than the timer its `PTTL` read set: it gets the lock
/// just after the key's ttl, far sooner than its retry delay.
pub fn a_lost_push_falls_back_to_the_pttl_timer<F: Flavor>()
where
    F::Client: Sync,
{
    let debug = crate::local::debug_command_args().expect("redis-server --version");
    let c = LocalCluster::start_with(5, debug).expect("redis-server");
    for a in c.addrs() {
        assert_eq!(
            redis(&a, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]),
            Frame::Simple("OK".into())
        );
    }
    let holder = F::build(builder(&c)).unwrap();
    let delay = Duration::from_secs(30);
    let waiter = F::build(builder(&c).retry(1000, delay)).unwrap();
    let key = resource("lostpush");
    let ttl = Duration::from_millis(1500);
    let taken = Instant::now();
    // Never released: its keys expire with no push.
    let held = holder.lock(&key, ttl).unwrap();
    let (lock, got) = {
        let r = waiter.lock_within(&key, TTL, Duration::from_secs(120));
        (r.expect("the waiter gets the lock"), Instant::now())
    };
    let waited = got - taken;
    // Not before the holder's keys expired (safety), and long before the retry delay.
    assert!(waited >= held.validity().min(ttl) / 2, "{waited:?}");
    assert!(waited < delay / 4, "the waiter took {waited:?}");
    // A quorum holds the waiter's token. Not necessarily every node: the timer fires when a
    // quorum of the old keys has expired, and a node whose key was set a moment later may
    // still refuse the waiter's SET NX (its old key then expires unread).
    let holding = c
        .addrs()
        .iter()
        .filter(|a| get(a, &key).as_deref() == Some(lock.token().as_str()))
        .count();
    assert!(holding >= 3, "{holding} of 5 nodes hold the waiter's token");
}

/// Masters that know no RESP3 (no `HELLO`, as before Redis 6): connections stay on RESP2, no
/// push ever arrives, nothing is taken for a reply, and a waiter still gets the lock after the
/// release, by its timer and retry delay as a polling client would. (CI, session 22: failed
/// 3 runs in 24 here, a connection spent by the bell's early `SUBSCRIBE`, which this test
/// counted as an error; it is the documented cost.)
pub fn servers_without_resp3_fall_back_to_polling<F: Flavor>()
where
    F::Client: Sync,
{
    let c = LocalCluster::start_with(5, NO_HELLO).expect("redis-server");
    let holder = F::build(builder(&c)).unwrap();
    let delay = Duration::from_millis(400);
    let waiter = F::build(builder(&c).retry(1000, delay)).unwrap();
    let slack = measured_slack(&waiter, Duration::from_secs(2));
    let key = resource("resp2");
    let held = holder.lock(&key, Duration::from_secs(120)).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let r = waiter.lock_within(&key, TTL, Duration::from_secs(120));
            (r, Instant::now())
        });
        // Let the waiter be refused a few times.
        std::thread::sleep(delay * 2);
        let released = Instant::now();
        holder.unlock(&held).unwrap();
        let (lock, got) = waiting.join().unwrap();
        let lock = lock.expect("the waiter gets the lock");
        let handoff = got - released;
        assert!(handoff < delay + slack, "hand-off took {handoff:?}");
        held_on_a_majority(&waiter, &c.addrs(), &key, lock.token());
    });
    let stats = waiter.stats();
    let errors: Vec<String> = c
        .addrs()
        .iter()
        .map(|a| match redis(a, &["INFO", "errorstats"]) {
            Frame::Bulk(b) => String::from_utf8_lossy(&b).replace("\r\n", " "),
            other => format!("{other:?}"),
        })
        .collect();
    // A fair waiter's first line command may find a connection whose `HELLO 3` refusal is not
    // read yet (the try before it was decided by a quorum without that master; an async
    // current-thread client reads it only once the next call runs the runtime): the bell's
    // `SUBSCRIBE` goes out ahead of it, and the refusal spends that connection, one failed
    // vote on that master (docs/redlock.md, "a fair client's first try on a fresh
    // connection"). Once per master at most; any other server error is a failure.
    assert!(
        stats.nodes.iter().all(|n| n.invalidations == 0
            && n.protocol_errors == 0
            && n.server_errors <= 1
            && n.server_errors + 1 == n.connects),
        "{stats:?}\nthe servers' error counts: {errors:?}"
    );
    for a in c.addrs() {
        match redis(&a, &["CLIENT", "LIST"]) {
            Frame::Bulk(list) => {
                let list = String::from_utf8_lossy(&list);
                assert!(!list.contains("resp=3"), "{list}");
            }
            other => panic!("CLIENT LIST: {other:?}"),
        }
    }
}
