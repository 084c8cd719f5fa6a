//! Network faults injected by the project's TCP proxy (`testkit::proxy`) in front of one of
//! five real masters, for both clients: latency, blackhole, dropped and reset connections,
//! half-close, a reply dribbled a byte at a time. The faulty node's vote ends as it must,
//! within the node timeout; the others make the quorum; and once the fault heals the node
//! votes again, its connection in step.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use redlock_mux::NodeOutcome;
use testkit::proxy::{Fault, Proxy};
use testkit::{
    cluster, get, lost_round, measured_slack, redis, resource, wait_until, AsyncMulti, Blocking,
    Flavor, LockClient,
};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// Node 4's answer in a round lost to contention on nodes 0, 1 and 2, and how long the
/// round took.
fn node4_answer<C: LockClient>(client: &C, addrs: &[String]) -> (NodeOutcome, Duration) {
    let (nodes, took) = lost_round(client, addrs, 0..3, "fault");
    assert_eq!(nodes.0[3].outcome, NodeOutcome::Ok, "{nodes}");
    (nodes.0[4].outcome.clone(), took)
}

fn run<F: Flavor>(fault: Fault, expect: impl Fn(&NodeOutcome) -> bool) {
    let c = cluster(5);
    let proxy = Proxy::start(c.servers()[4].addr());
    let mut addrs = c.addrs();
    addrs[4] = proxy.addr();
    let client = F::build(
        redlock_mux::Redlock::builder()
            .nodes(&addrs)
            .node_timeout(NODE_TIMEOUT)
            .fail_fast(false)
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    // Healthy first, through the proxy.
    assert_eq!(node4_answer(&client, &addrs).0, NodeOutcome::Ok);
    let slack = measured_slack(&client, Duration::from_millis(300));

    proxy.set(fault);
    let (outcome, took) = node4_answer(&client, &addrs);
    assert!(expect(&outcome), "{fault:?}: node 4 answered {outcome}");
    // The round and the release after it, each bounded by the node timeout, plus slack
    // measured on this machine now.
    assert!(
        took < NODE_TIMEOUT * 2 + slack,
        "{fault:?}: took {took:?} (slack {slack:?})"
    );
    // The other four keep making the quorum while the fault lasts.
    for _ in 0..3 {
        let lock = client.try_lock(&resource("fault-ok"), TTL).unwrap();
        client.unlock(&lock).unwrap();
    }

    // Healed: within a few rounds (a broken connection waits out its backoff) node 4 answers
    // its own command again; any reply it still owed from the fault is not taken for it.
    proxy.set(Fault::Pass);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (outcome, _) = node4_answer(&client, &addrs);
        if outcome == NodeOutcome::Ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{fault:?}: node 4 still answers {outcome} after healing"
        );
        assert!(
            matches!(
                outcome,
                NodeOutcome::Down | NodeOutcome::Io(_) | NodeOutcome::Timeout
            ),
            "{fault:?}: while healing node 4 answered {outcome}"
        );
    }
}

fn is_io(o: &NodeOutcome) -> bool {
    matches!(o, NodeOutcome::Io(_) | NodeOutcome::Down)
}

macro_rules! fault_cases {
    ($($name:ident => $fault:expr, $expect:expr);* $(;)?) => {
        mod blocking {
            use super::*;
            $( #[test] fn $name() { run::<Blocking>($fault, $expect); } )*
        }
        mod asynchronous {
            use super::*;
            $( #[test] fn $name() { run::<AsyncMulti>($fault, $expect); } )*
        }
    };
}

fault_cases!(
    small_latency_still_votes => Fault::Latency { fixed: Duration::from_millis(20), jitter: Duration::from_millis(20) },
        |o| *o == NodeOutcome::Ok;
    latency_past_the_timeout => Fault::Latency { fixed: Duration::from_millis(400), jitter: Duration::ZERO },
        |o| *o == NodeOutcome::Timeout;
    blackhole => Fault::Blackhole, |o| *o == NodeOutcome::Timeout;
    dropped_connection => Fault::Drop, is_io;
    reset_mid_reply => Fault::ResetMidReply, is_io;
    half_close => Fault::HalfClose, is_io;
    reply_dribbled_a_byte_at_a_time => Fault::Slow { delay: Duration::from_millis(60) },
        |o| *o == NodeOutcome::Timeout;
);

/// A command to node 4 vanishes in the middle of its stream (`Fault::LoseBytes`, which no real
/// network does to TCP), then two rounds go out at once: one for a resource node 4 holds for
/// another client, one for a resource free there. Matched by position alone, node 4's replies
/// would land one command early, and the held resource would be granted node 4's `+OK` for the
/// free one. The client must notice the stream is out of step, drop the connection before it
/// takes any reply for another command, and have node 4 back within a round or two.
fn lost_bytes<F: Flavor>()
where
    F::Client: Sync,
{
    let c = cluster(5);
    let proxy = Proxy::start(c.servers()[4].addr());
    let mut addrs = c.addrs();
    addrs[4] = proxy.addr();
    let client = F::build(
        redlock_mux::Redlock::builder()
            .nodes(&addrs)
            .node_timeout(NODE_TIMEOUT)
            .fail_fast(false)
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    assert_eq!(node4_answer(&client, &addrs).0, NodeOutcome::Ok);

    proxy.set(Fault::LoseBytes);
    let lost = client
        .try_lock(&resource("lost"), TTL)
        .expect("won on the other four while node 4's SET is lost");
    proxy.set(Fault::Pass);
    // The round waited node 4 out; its reply is now owed past the deadline.
    std::thread::sleep(Duration::from_millis(10));

    let (held, free) = (resource("held"), resource("free"));
    for a in &addrs[0..3] {
        redis(a, &["SET", &held, "foreign", "PX", "60000"]);
        redis(a, &["SET", &free, "foreign", "PX", "60000"]);
    }
    redis(&c.addrs()[4], &["SET", &held, "foreign", "PX", "60000"]);
    let node4 = |r: Result<redlock_mux::Lock, redlock_mux::Error>| match r {
        Err(
            redlock_mux::Error::Conflict { nodes, .. } | redlock_mux::Error::NoQuorum { nodes },
        ) => nodes.0[4].outcome.clone(),
        other => panic!("expected a lost round, got {other:?}"),
    };
    let barrier = Barrier::new(2);
    let (on_held, on_free) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            barrier.wait();
            client.try_lock(&held, TTL)
        });
        let b = s.spawn(|| {
            barrier.wait();
            client.try_lock(&free, TTL)
        });
        (node4(a.join().unwrap()), node4(b.join().unwrap()))
    });
    assert_ne!(
        on_held,
        NodeOutcome::Ok,
        "node 4 holds it for another client, yet its vote was yes: a reply taken for another command"
    );
    assert_ne!(
        on_free,
        NodeOutcome::Held,
        "node 4 has no key for it, yet its vote was held: a reply taken for another command"
    );
    assert!(
        client.stats().nodes[4].desyncs >= 1,
        "the stream out of step was noticed: {:?}",
        client.stats().nodes[4]
    );

    // Recovery: the connection was dropped at once, so the next round opens a new one.
    let mut answers = Vec::new();
    for _ in 0..2 {
        let (outcome, _) = node4_answer(&client, &addrs);
        answers.push(outcome);
        if answers.last() == Some(&NodeOutcome::Ok) {
            break;
        }
    }
    assert_eq!(
        answers.last(),
        Some(&NodeOutcome::Ok),
        "node 4 back within two rounds: {answers:?}"
    );
    let _ = client.unlock(&lost);
}

#[test]
fn lost_bytes_are_noticed_and_the_node_recovers_blocking() {
    lost_bytes::<Blocking>();
}

#[test]
fn lost_bytes_are_noticed_and_the_node_recovers_async() {
    lost_bytes::<AsyncMulti>();
}

/// The gap the transport assumption leaves, closed by `Builder::verify_stream`: node 4's
/// `SET` for one round vanishes (`Fault::LoseBytes`) and the round is decided without it;
/// well within the node timeout (so no reply is overdue and no sentinel is due), two more
/// rounds go out, the first for a resource node 4 holds for another client, the second for a
/// free one. By position alone node 4's `nil` for the first lands on the vanished command and
/// its `+OK` for the second on the first, which nodes 0 and 1 also grant: three yes of five,
/// and a lock granted by a node that holds another client's token. With every write pass
/// ending in a sentinel, the sentinel behind the vanished command went with it: the next one
/// arrives in its place, and node 4's replies never count.
fn lost_command_within_its_deadline<F: Flavor>(
    verify: bool,
) -> Result<redlock_mux::Lock, redlock_mux::Error>
where
    F::Client: Sync,
{
    let c = cluster(5);
    let proxy = Proxy::start(c.servers()[4].addr());
    let mut addrs = c.addrs();
    addrs[4] = proxy.addr();
    // A node timeout far beyond every step below: no reply is ever overdue.
    let client = F::build(
        redlock_mux::Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_secs(5))
            .retry(1, Duration::ZERO)
            .verify_stream(verify),
    )
    .unwrap();
    let warm = client.try_lock(&resource("warm"), TTL).unwrap();
    client.unlock(&warm).unwrap();
    // Every node's reply to the release in (a round decided early leaves some on the way).
    std::thread::sleep(Duration::from_millis(200));
    let (held, free) = (resource("held"), resource("free"));
    for a in &c.addrs()[2..5] {
        redis(a, &["SET", &held, "foreign", "PX", "60000"]);
    }
    proxy.set(Fault::LoseBytes);
    let lost = client
        .try_lock(&resource("lost"), TTL)
        .expect("won on nodes 0-3 while node 4's SET is lost");
    // The proxy has read and dropped the SET (on a busy machine its thread may not have
    // read it yet when the round is decided: passed on then, nothing would be lost).
    wait_until(
        Duration::from_secs(10),
        "the proxy dropped node 4's SET",
        || proxy.lost_bytes() > 0,
    );
    proxy.set(Fault::Pass);
    let first = std::thread::scope(|s| {
        let a = s.spawn(|| client.try_lock(&held, TTL));
        // The held resource's command goes first on node 4's connection: its round waits
        // for node 4 (two yes, two no), so the free one's is written while it waits.
        std::thread::sleep(Duration::from_millis(100));
        let b = s.spawn(|| client.try_lock(&free, TTL));
        if let Ok(l) = b.join().unwrap() {
            let _ = client.unlock(&l);
        }
        a.join().unwrap()
    });
    let _ = client.unlock(&lost);
    if verify {
        assert!(
            client.stats().nodes[4].desyncs >= 1,
            "the stream out of step was noticed: {:?}",
            client.stats().nodes[4]
        );
    }
    first
}

/// On the async client, whose tasks' rounds overlap on the connections (the blocking client
/// carries the second caller in the next round, after the first one's, so the sequence
/// cannot arise there in this form; both run the same connection code, and the simulator
/// runs it under byte loss).
#[test]
fn verify_stream_closes_the_lost_command_gap() {
    let r = lost_command_within_its_deadline::<AsyncMulti>(true);
    assert!(
        r.is_err(),
        "granted with node 4's vote taken from another command's reply: {r:?}"
    );
}

/// The same sequence without the check: the gap is real (the reason for the option). Run by
/// hand (`--ignored`), as it demonstrates a failure mode rather than a promise.
#[test]
#[ignore]
fn without_verify_stream_a_lost_command_shifts_a_reply_onto_another() {
    let r = lost_command_within_its_deadline::<AsyncMulti>(false);
    assert!(
        r.is_ok(),
        "expected the shifted grant the option prevents: {r:?}"
    );
}

/// A user whose ACL denies `PING`: the sentinel a late reply calls for is refused in its
/// place, which shows the stream in step, so the connection is kept (and no sentinel is sent
/// on it again). Counted against a user allowed `PING`, with the same late node.
#[test]
fn a_refused_sentinel_is_in_step_and_costs_no_connection() {
    let c = cluster(3);
    for a in c.addrs() {
        for (user, rule) in [("noping", "-ping"), ("ping", "+ping")] {
            let args = ["ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", rule];
            assert_eq!(
                redis(&a, &args),
                redlock_mux::resp::Frame::Simple("OK".into())
            );
        }
    }
    let (proxies, addrs) = testkit::proxy::in_front(&c, 0..1);
    let episodes = |user: &str| {
        let nodes: Vec<String> = addrs
            .iter()
            .map(|a| format!("redis://{user}:pw@{a}"))
            .collect();
        let client = redlock_mux::Redlock::builder()
            .nodes(nodes)
            .node_timeout(NODE_TIMEOUT)
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        let warm = client.lock(&resource("ping-warm"), TTL).unwrap();
        client.unlock(&warm).unwrap();
        let before = client.stats().nodes[0].clone();
        // Node 0 answers past the node timeout (within the stale limit): each round ends
        // without it, and the next command finds its reply overdue.
        proxies[0].set(testkit::proxy::latency(NODE_TIMEOUT * 7 / 4));
        for _ in 0..4 {
            if let Ok(l) = client.lock(&resource("ping"), TTL) {
                let _ = client.unlock(&l);
            }
            // Past the node timeout, within the latency: the next command finds the last
            // one's reply overdue and still owed.
            std::thread::sleep(NODE_TIMEOUT * 5 / 4);
        }
        proxies[0].set(Fault::Pass);
        let after = client.stats().nodes[0].clone();
        (
            after.desyncs - before.desyncs,
            after.connects - before.connects,
        )
    };
    let allowed = episodes("ping");
    let denied = episodes("noping");
    assert_eq!(allowed, (0, 0), "allowed PING: (desyncs, reconnects)");
    assert_eq!(denied, allowed, "denied PING: (desyncs, reconnects)");
}

/// An acquisition refused in its form (here `NOSCRIPT` on a master whose script cache was
/// flushed) after its round was decided is not sent again: the client has already queued the
/// release behind it, and the acquisition would land after the release and keep its key for
/// the whole ttl. Valkey 9 (the release is native there, so it meets no `NOSCRIPT` of its own);
/// fenced, so the acquisition is a script.
#[test]
fn an_acquisition_is_never_sent_again_behind_its_release() {
    let c = cluster(3);
    let (name, version) = testkit::cases::server_version(&c.addrs()[0]);
    if !(name == "valkey" && version >= (9, 0)) {
        eprintln!("skipped: {name} {version:?} has no native release to overtake the acquisition");
        return;
    }
    let (proxies, addrs) = testkit::proxy::in_front(&c, 2..3);
    let client = redlock_mux::Redlock::builder()
        .nodes(addrs)
        .fencing(true)
        .node_timeout(Duration::from_secs(2))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let warm = client.lock(&resource("overtake-warm"), TTL).unwrap();
    client.unlock(&warm).unwrap();
    assert!(
        client.poll_idle(Duration::from_secs(5)),
        "every node heard from"
    );
    redis(&c.addrs()[2], &["SCRIPT", "FLUSH"]);
    // Node 2 answers late: the acquisition is decided by nodes 0 and 1, and the release
    // follows at once, before node 2's NOSCRIPT is read.
    proxies[0].set(testkit::proxy::latency(Duration::from_millis(300)));
    let key = resource("overtake");
    let lock = client.lock(&key, Duration::from_secs(60)).unwrap();
    client.unlock(&lock).unwrap();
    client.poll_idle(Duration::from_secs(3));
    proxies[0].set(Fault::Pass);
    let left: Vec<String> = c
        .addrs()
        .iter()
        .filter(|a| get(a, &key).is_some())
        .cloned()
        .collect();
    assert!(left.is_empty(), "unlocked, yet {left:?} hold the key");
}
