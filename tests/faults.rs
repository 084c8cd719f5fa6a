//! Network faults injected by the project's TCP proxy (`testkit::proxy`) in front of one of
//! five real masters, for both clients: latency, blackhole, dropped and reset connections,
//! half-close, a reply dribbled a byte at a time. The faulty node's vote ends as it must,
//! within the node timeout; the others make the quorum; and once the fault heals the node
//! votes again, its connection in step.

use std::time::{Duration, Instant};

use redlock_mux::NodeOutcome;
use testkit::proxy::{Fault, Proxy};
use testkit::{
    cluster, lost_round, measured_slack, resource, AsyncMulti, Blocking, Flavor, LockClient,
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
