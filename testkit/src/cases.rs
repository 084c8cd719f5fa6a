//! Test bodies shared by the blocking and the async client: each is generic over a
//! [`Flavor`], and `tests/blocking.rs` and `tests/async_shared.rs` instantiate every one
//! through [`for_each_case!`], so that a new body runs against every client.

/// Calls `$m!($flavor: case, case, ...)` with the name of every shared body.
#[macro_export]
macro_rules! for_each_case {
    ($m:ident, $flavor:ty) => {
        $m!($flavor:
            acquire_and_release,
            second_client_refused_then_gets_it,
            unlock_by_non_holder_deletes_nothing,
            key_ttl_is_what_was_asked,
            extend_keeps_the_lock_and_fails_once_another_holds_it,
            scripts_survive_script_flush,
            two_of_five_down_still_acquires,
            three_of_five_down_fails_fast_naming_causes,
            paused_node_costs_at_most_its_timeout_and_late_replies_stay_late,
            restarted_node_is_reconnected_and_used,
            lost_rounds_leave_no_key,
            unlock_and_extend_after_expiry,
            one_bad_node_is_one_missing_vote,
            tiny_ttls_never_panic,
            absurd_durations_are_refused_or_survived_never_a_panic,
            a_failed_extension_never_leaves_more_validity_than_the_keys,
            auth_and_select,
            fenced_tokens_increase_from_holder_to_holder,
            fencing_write_back_outlives_the_master_with_the_highest_counter,
            a_counter_out_of_range_is_a_failed_vote_not_the_token,
            a_counter_out_of_range_needs_repair_and_says_so,
            fencing_refuses_masters_whose_policy_may_evict_the_counter,
            lock_many_takes_every_resource_or_none,
            lock_many_extends_and_releases_only_what_it_holds,
            lock_many_refuses_bad_lists_and_the_counter_key,
            large_lock_many_calls_from_several_callers_all_succeed,
            unix_sockets_alone_and_mixed_with_tcp,
            native_commands_where_the_server_has_them,
            acl_users_without_eval_use_functions,
            every_acl_user_releases_in_a_form_it_may_use,
            inspect_shows_each_nodes_holder_and_ttl,
            a_waiter_is_woken_by_the_release_not_by_polling,
            a_lost_push_falls_back_to_the_pttl_timer,
            servers_without_resp3_fall_back_to_polling,
        );
    };
}

use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::{Error, Lock, NodeOutcome, Token};

use crate::local::LocalCluster;
use crate::*;

const TTL: Duration = Duration::from_secs(10);

/// How long commands a fail-fast round left in flight may take to land on a healthy local
/// node (they were written before the round returned; only the server's turn is awaited).
const IN_FLIGHT: Duration = Duration::from_secs(5);

/// Asserts that every node comes to satisfy `check` for `key`, and a quorum at once. While it
/// waits, `client` is left to serve what it still owes (a fail-fast round returns before the
/// last nodes answer, and a late `NOSCRIPT` is answered by the client, not the server): the
/// blocking client through `poll_idle`, the async one by driving its runtime.
fn on_every_node(
    client: &impl LockClient,
    addrs: &[String],
    why: &str,
    check: impl Fn(&str) -> bool,
) {
    let now = addrs.iter().filter(|a| check(a)).count();
    assert!(now > addrs.len() / 2, "{why}: only {now} nodes at once");
    let mut missing = Vec::new();
    let done = crate::serve_until(client, IN_FLIGHT, || {
        missing = addrs.iter().filter(|a| !check(a)).cloned().collect();
        missing.is_empty()
    });
    assert!(done, "{why}: not on {missing:?} after {IN_FLIGHT:?}");
}

/// Asserts every node holds `token` under `key`.
fn held_everywhere(client: &impl LockClient, addrs: &[String], key: &str, token: &Token) {
    on_every_node(client, addrs, &format!("{key} held by {token:?}"), |a| {
        get(a, key).as_deref() == Some(token.as_str())
    });
}

/// Asserts `token` holds `key` on a majority of the nodes and, once the commands in flight
/// have landed, no other token holds it anywhere. For a lock taken just as another holder let
/// go: a master that runs the new holder's `SET NX` before the old holder's release (its two
/// connections are read in no set order) refuses it, and is then left with no key at all.
/// That is Redlock working (a quorum is all it needs), not a lock lost.
fn held_on_a_majority(client: &impl LockClient, addrs: &[String], key: &str, token: &Token) {
    let mut seen = Vec::new();
    let settled = crate::serve_until(client, IN_FLIGHT, || {
        seen = addrs.iter().map(|a| get(a, key)).collect();
        seen.iter().flatten().all(|v| v == token.as_str())
    });
    assert!(settled, "{key}: another token still there: {seen:?}");
    let holding = seen.iter().flatten().count();
    assert!(
        holding > addrs.len() / 2,
        "{key}: {token:?} on {holding} nodes: {seen:?}"
    );
}

fn gone_everywhere(client: &impl LockClient, addrs: &[String], key: &str) {
    on_every_node(client, addrs, &format!("{key} gone"), |a| {
        get(a, key).is_none()
    });
}

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
    let impostor = Lock::from_token(&key, Token::generate());
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

pub fn scripts_survive_script_flush<F: Flavor>() {
    let c = cluster(5);
    let client = F::build(builder(&c)).unwrap();
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
    on_every_node(&client, &c.addrs(), "extended after a flush", |a| {
        pttl(a, &key) > 25_000
    });
    client.unlock(&lock).unwrap();
    gone_everywhere(&client, &c.addrs(), &key);
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
    for p in &ports {
        let addr = format!("127.0.0.1:{p}");
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        use std::io::{Read, Write};
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let cmd = format!("AUTH s3cret\r\nSELECT 2\r\nGET {key}\r\nSELECT 0\r\nEXISTS {key}\r\n");
        s.write_all(cmd.as_bytes()).unwrap();
        let want = format!("+OK\r\n+OK\r\n$40\r\n{}\r\n+OK\r\n:0\r\n", lock.token());
        let mut got = vec![0u8; want.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want, "on {addr}");
    }
    client.unlock(&lock).unwrap();
}

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
    assert!(
        client
            .stats()
            .nodes
            .iter()
            .all(|n| n.eviction_unchecked == 1),
        "{:?}",
        client.stats()
    );
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

/// The server's name and version, from `INFO server`.
pub fn server_version(addr: &str) -> (String, (u32, u32)) {
    let info = match redis(addr, &["INFO", "server"]) {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO server: {other:?}"),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(str::trim)
            .map(String::from)
    };
    // Valkey reports `valkey_version` (and a `redis_version` kept for compatibility).
    let (name, version) = match field("valkey_version") {
        Some(v) => ("valkey", v),
        None => ("redis", field("redis_version").unwrap_or_default()),
    };
    let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
    (
        name.to_string(),
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)),
    )
}

/// Whether the server has native compare-and-delete commands.
pub fn has_native(addr: &str) -> bool {
    match server_version(addr) {
        (n, v) if n == "valkey" => v >= (9, 0),
        (_, v) => v >= (8, 4),
    }
}

/// How many times the server ran `command` (`INFO commandstats`).
pub fn calls(addr: &str, command: &str) -> u64 {
    let info = match redis(addr, &["INFO", "commandstats"]) {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO commandstats: {other:?}"),
    };
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub fn native_commands_where_the_server_has_them<F: Flavor>() {
    use redlock_mux::Scripts;
    let c = cluster(3);
    let addrs = c.addrs();
    let native = has_native(&addrs[0]);
    let (name, version) = server_version(&addrs[0]);
    let key = resource("native");
    // Auto: native where the server has it, scripts elsewhere; the lock works the same.
    // (Without fail-fast every node's reply to the first round is read, and its HELLO reply,
    // which comes before it, with it: every later release knows the server. With fail-fast,
    // a release may go out on a connection whose server has not said yet, as a script.)
    let client = F::build(builder(&c).fail_fast(false)).unwrap();
    let mut lock = client.lock(&key, TTL).unwrap();
    client.extend(&mut lock, Duration::from_secs(30)).unwrap();
    assert!(pttl(&addrs[0], &key) > 20_000, "extended");
    client.unlock(&lock).unwrap();
    gone_everywhere(&client, &addrs, &key);
    let release = if name == "valkey" { "delifeq" } else { "delex" };
    for a in &addrs {
        if native {
            assert!(
                calls(a, release) >= 1,
                "{name} {version:?}: no {release} on {a}"
            );
            assert_eq!(
                calls(a, "evalsha"),
                0,
                "{name} {version:?}: scripts were used on {a}"
            );
        } else {
            assert!(
                calls(a, "evalsha") >= 2,
                "{name} {version:?}: no EVALSHA on {a}"
            );
        }
    }
    // A release of a key that is not ours: refused either way (native cannot say which).
    let mut lock = client.lock(&key, TTL).unwrap();
    for a in &addrs {
        redis(a, &["SET", &key, "foreign"]);
    }
    assert!(matches!(client.unlock(&lock), Err(Error::NotHeld { .. })));
    assert!(matches!(
        client.extend(&mut lock, TTL),
        Err(Error::NotHeld { .. })
    ));
    for a in &addrs {
        assert_eq!(
            get(a, &key).as_deref(),
            Some("foreign"),
            "left alone on {a}"
        );
        redis(a, &["DEL", &key]);
    }
    // Native only: works where the server has the commands; elsewhere every node says why.
    let client = F::build(builder(&c).fail_fast(false).scripts(Scripts::Native)).unwrap();
    let lock = client.lock(&key, TTL).unwrap();
    match client.unlock(&lock) {
        Ok(()) => assert!(native, "{name} {version:?} has no native commands"),
        Err(Error::NoQuorum { nodes }) => {
            assert!(!native, "{name} {version:?}: {nodes}");
            assert!(nodes.to_string().contains("native"), "{nodes}");
            eprintln!("native commands skipped: {name} {version:?} has none ({nodes})");
        }
        Err(e) => panic!("{e}"),
    }
}

/// An ACL user that may not run `EVAL`, `EVALSHA` or `SCRIPT` (and, `no_functions`, not
/// `FUNCTION` either), but anything else, on every server of `c`.
fn user_without_eval(c: &LocalCluster, name: &str, no_functions: bool) {
    for a in c.addrs() {
        let mut rules = vec![
            "SETUSER", name, "on", ">pw", "~*", "+@all", "-eval", "-evalsha", "-script",
        ];
        if no_functions {
            rules.push("-function");
        }
        let mut args = vec!["ACL"];
        args.extend(rules);
        assert_eq!(redis(&a, &args), Frame::Simple("OK".into()), "ACL on {a}");
    }
}

pub fn acl_users_without_eval_use_functions<F: Flavor>() {
    use redlock_mux::Scripts;
    let c = cluster(3);
    let addrs = c.addrs();
    let (name, version) = server_version(&addrs[0]);
    if name == "redis" && version < (7, 0) {
        eprintln!("functions skipped: {name} {version:?} has no FUNCTION/FCALL (Redis 7+)");
        return;
    }
    user_without_eval(&c, "app", false);
    user_without_eval(&c, "nofn", true);
    let as_user = |user: &str| -> Vec<String> {
        c.servers()
            .iter()
            .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
            .collect()
    };
    let key = resource("acl");
    // Scripts denied: a release by EVALSHA is refused on every node, naming the command.
    let eval = F::build(builder(&c).nodes(as_user("app")).scripts(Scripts::Eval)).unwrap();
    let lock = eval.lock(&key, TTL).unwrap();
    match eval.unlock(&lock) {
        Err(Error::NoQuorum { nodes }) => {
            assert!(nodes.to_string().contains("NOPERM"), "{nodes}")
        }
        other => panic!("expected NOPERM from every node, got {other:?}"),
    }
    for a in &addrs {
        redis(a, &["DEL", &key]);
    }
    // Functions: everything works, sets and fencing included, and a FUNCTION FLUSH in the
    // middle is survived.
    let fcall = F::build(
        builder(&c)
            .nodes(as_user("app"))
            .scripts(Scripts::Function)
            .fencing(true),
    )
    .unwrap();
    let mut lock = fcall.lock(&key, TTL).unwrap();
    assert!(lock.fencing_token().is_some());
    fcall.extend(&mut lock, Duration::from_secs(30)).unwrap();
    for a in &addrs {
        assert_eq!(redis(a, &["FUNCTION", "FLUSH"]), Frame::Simple("OK".into()));
    }
    fcall.unlock(&lock).unwrap();
    gone_everywhere(&fcall, &addrs, &key);
    let set = fcall.lock_many(&[&key, &resource("acl-b")], TTL).unwrap();
    fcall.unlock(&set).unwrap();
    for a in &addrs {
        assert!(calls(a, "fcall") >= 4, "FCALL on {a}");
        assert_eq!(
            calls(a, "evalsha") + calls(a, "eval"),
            0,
            "a script ran on {a}"
        );
    }
    // Auto finds out by itself: the first refused EVALSHA switches its connection to the
    // function library (or the server's native commands serve the single-resource calls).
    for a in &addrs {
        redis(a, &["FUNCTION", "FLUSH"]);
    }
    let auto = F::build(builder(&c).nodes(as_user("app")).fencing(true)).unwrap();
    let mut lock = auto.lock(&key, TTL).unwrap();
    auto.extend(&mut lock, TTL).unwrap();
    auto.unlock(&lock).unwrap();
    let set = auto.lock_many(&[&key, &resource("acl-c")], TTL).unwrap();
    auto.unlock(&set).unwrap();
    gone_everywhere(&auto, &addrs, &key);
    // A user who may not load functions either, on servers without the library: the error
    // says what is missing and which permission.
    for a in &addrs {
        redis(a, &["FUNCTION", "FLUSH"]);
    }
    let nofn = F::build(
        builder(&c)
            .nodes(as_user("nofn"))
            .scripts(Scripts::Function)
            .fencing(true)
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    match nofn.try_lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => {
            let text = nodes.to_string();
            assert!(text.contains("Function not found"), "{text}");
            assert!(
                text.contains("NOPERM") && text.contains("function|load"),
                "{text}"
            );
        }
        other => panic!("expected the missing permission named, got {other:?}"),
    }
    // An operator loads the library for them: then they lock.
    for a in &addrs {
        redis(a, &["FUNCTION", "LOAD", redlock_mux::script::LIBRARY]);
    }
    let lock = nofn.lock(&key, TTL).unwrap();
    nofn.unlock(&lock).unwrap();
}

/// Creates ACL user `name` (password `pw`) with `rules` after `+@all` on every server of `c`;
/// `false` when a server refuses the rules (a command it does not have).
fn acl_user(c: &LocalCluster, name: &str, rules: &[&str]) -> bool {
    c.addrs().iter().all(|a| {
        let mut args = vec!["ACL", "SETUSER", name, "on", ">pw", "~*", "+@all"];
        args.extend(rules);
        redis(a, &args) == Frame::Simple("OK".into())
    })
}

/// Every release and extension reaches a form the user may run, from a connection's first
/// command on: a user denied all scripting releases with the server's native commands (under
/// `Scripts::Native` and `Scripts::Auto`, from a fresh client whose first command is the
/// release, as `redlock unlock` is), and a user denied only the native commands falls back
/// to scripts within the same call. On servers without native commands there is nothing to
/// fall back to for a user denied scripting, and the case says so.
pub fn every_acl_user_releases_in_a_form_it_may_use<F: Flavor>() {
    use redlock_mux::Scripts;
    let c = cluster(3);
    let addrs = c.addrs();
    let (name, version) = server_version(&addrs[0]);
    let native_verb = match (name.as_str(), version) {
        ("valkey", v) if v >= (9, 0) => "delifeq",
        ("redis", v) if v >= (8, 4) => "delex",
        _ => {
            eprintln!("native fallbacks skipped: {name} {version:?} has no native commands");
            return;
        }
    };
    assert!(acl_user(&c, "noscript", &["-@scripting"]), "ACL noscript");
    let minus_native = format!("-{native_verb}");
    assert!(acl_user(&c, "nonative", &[&minus_native]), "ACL nonative");
    let as_user = |user: &str| -> Vec<String> {
        c.servers()
            .iter()
            .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
            .collect()
    };
    let held = |key: &str| addrs.iter().filter(|a| get(a, key).is_some()).count();
    let evals = || -> u64 {
        addrs
            .iter()
            .map(|a| calls(a, "evalsha") + calls(a, "eval") + calls(a, "script|load"))
            .sum()
    };

    for mode in [Scripts::Native, Scripts::Auto] {
        // Taken by one client; released by a fresh one whose first command is the release.
        let key = resource("acl-native");
        let taker = F::build(builder(&c).nodes(as_user("noscript")).scripts(mode)).unwrap();
        let mut lock = taker.lock(&key, TTL).unwrap();
        taker.extend(&mut lock, TTL).unwrap();
        let fresh = F::build(
            builder(&c)
                .nodes(as_user("noscript"))
                .scripts(mode)
                .retry(1, Duration::ZERO),
        )
        .unwrap();
        let before = evals();
        fresh
            .unlock(&Lock::from_token(&key, *lock.token()))
            .unwrap_or_else(|e| panic!("{mode:?}: a fresh client's first release: {e}"));
        gone_everywhere(&fresh, &addrs, &key);
        if mode == Scripts::Native {
            assert_eq!(evals(), before, "{mode:?}: no script loaded or run");
        }
        assert_eq!(held(&key), 0);
    }

    // Native commands refused, scripts allowed: Auto learns the server has DELIFEQ (from the
    // acquisition's HELLO), is refused, and sends the same release as a script at once.
    let key = resource("acl-nonative");
    let auto = F::build(
        builder(&c)
            .nodes(as_user("nonative"))
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    let mut lock = auto.lock(&key, TTL).unwrap();
    auto.extend(&mut lock, TTL).unwrap();
    auto.unlock(&lock)
        .unwrap_or_else(|e| panic!("native refused, scripts allowed: {e}"));
    gone_everywhere(&auto, &addrs, &key);
    let key = resource("acl-nonative-2");
    let lock = auto.lock(&key, TTL).unwrap();
    auto.unlock(&lock).unwrap();
    gone_everywhere(&auto, &addrs, &key);
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
    let holder = F::build(builder(&c)).unwrap();
    let delay = Duration::from_secs(30);
    let waiter = F::build(builder(&c).retry(1000, delay)).unwrap();
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
/// release, by its timer and retry delay as a polling client would.
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
    assert!(
        stats
            .nodes
            .iter()
            .all(|n| n.invalidations == 0 && n.protocol_errors == 0 && n.server_errors == 0),
        "{stats:?}"
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
