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
    cluster, lost_round, measured_slack, redis, resource, AsyncMulti, Blocking, Flavor, LockClient,
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
