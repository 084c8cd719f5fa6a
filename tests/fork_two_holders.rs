//! A blocking client used on both sides of `fork()` must not give two holders.
//!
//! Parent and child inherit one set of sockets, and replies are matched to commands in the
//! order they were sent: were the child to write to the parent's connections, either could
//! read the other's replies, and the parent could take the child's `OK` for the answer to its
//! own `SET` of a resource another client holds. So the child gets [`Error::Forked`] and never
//! touches them; the parent goes on as if it had never forked.
//!
//! Its own test binary, with one test, so that the forks happen with no other test's thread.

mod forking;

use std::time::Duration;

use redlock_mux::{Error, Redlock};

/// Trials: parent and child released together through a pipe, each trying at once. (Before
/// the child was refused, the parent was granted the held resource 9 and 15 times in 300.)
const TRIALS: usize = 300;
const TTL: Duration = Duration::from_secs(10);
/// The child's exit codes.
const REFUSED: i32 = 0;
const GRANTED_HELD: i32 = 1;
const OTHERWISE: i32 = 2;

#[test]
fn a_forked_child_never_shares_the_parents_connections() {
    let c = testkit::cluster(3);
    let addrs = c.addrs();
    // A node timeout far above a loopback round on a busy machine: a trial never times out
    // unless a reply was taken by the other process.
    let build = || {
        testkit::builder(&c)
            .node_timeout(Duration::from_secs(2))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    };
    let holder = build();
    let held = holder
        .lock("fork:held", Duration::from_secs(600))
        .expect("the third client's lock");
    let parent: Redlock = build();
    // Warm: every connection open and in use before the first fork.
    let warm = parent.lock("fork:warm", TTL).expect("warm-up lock");
    parent.unlock(&warm).expect("warm-up release");

    let (mut parent_granted, mut child_granted) = (0, 0);
    let mut parent_other = Vec::new();
    let mut child_other = 0;
    let mut trials = 0;
    // Until the first grant: after one, the connections are out of step for good, and the
    // trials that follow only wait out node timeouts.
    while trials < TRIALS && parent_granted + child_granted == 0 {
        let trial = trials;
        trials += 1;
        let gate = forking::Gate::new();
        let pid = forking::fork(|| {
            gate.pass();
            // A free resource first (its OK is what the parent could mistake for its own),
            // then the held one.
            let free = parent.try_lock(&format!("fork:free:{trial}"), TTL);
            let taken = parent.try_lock("fork:held", TTL);
            match (free, taken) {
                (_, Ok(_)) => GRANTED_HELD,
                (Err(Error::Forked), Err(Error::Forked)) => REFUSED,
                _ => OTHERWISE,
            }
        });
        gate.open();
        match parent.try_lock("fork:held", TTL) {
            Ok(_) => parent_granted += 1,
            Err(Error::Conflict { .. }) => {}
            Err(e) => parent_other.push(e.to_string()),
        }
        match forking::wait(pid, Duration::from_secs(60)) {
            REFUSED => {}
            GRANTED_HELD => child_granted += 1,
            _ => child_other += 1,
        }
    }
    assert_eq!(
        (parent_granted, child_granted),
        (0, 0),
        "granted a resource another client holds on every node, in trial {trials} of \
         {TRIALS}: (parent, child) = ({parent_granted}, {child_granted})"
    );
    assert_eq!(
        child_other, 0,
        "{child_other} of {trials} children were not refused with Error::Forked"
    );
    assert!(
        parent_other.is_empty(),
        "the parent saw other than a conflict in {} of {trials} trials: {:?}",
        parent_other.len(),
        &parent_other[..parent_other.len().min(5)]
    );
    // Nothing the children did reached the servers: the holder's keys are as it set them.
    for a in &addrs {
        assert_eq!(
            testkit::get(a, "fork:held").as_deref(),
            Some(held.token().as_str()),
            "{a}"
        );
    }
    holder.unlock(&held).expect("the holder's release");
}
