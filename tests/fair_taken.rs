//! A release overtaken by the claim it rang for, against real masters.
//!
//! Claim held to (docs/redlock.md, "The claim"): a waiter rung by a quorum of masters for one
//! hand-off names it (the releasing token) in its claim, and takes the resource from a master
//! that still holds that token (the release is on its way there, later than the bells). That
//! master then runs the release and finds the key held by the claimer's token. The release
//! itself is whole: the holder let go, and the claim came after. Before the fix the release
//! counted that master as held by another, and `unlock` failed with `NotHeld` where a quorum
//! of masters had the release run against the holder's own lock or the claim it rang for.
//!
//! The race needs the bells of a quorum before the release reaches the last master: a master
//! where the key had gone (a restart without its data, an expiry) rings as one where the
//! token was deleted. Under CPU load it came on its own: session 18's review saw releases
//! "find their token gone" about once in twelve full parallel runs of `tests/review_s18.rs`
//! (a master that answered "gone" and one "held by another"); here it is set up with a
//! proxy that holds the holder's bytes to one master back.

use std::time::{Duration, Instant};

use redlock_mux::Redlock;
use testkit::proxy::{Fault, Proxy};
use testkit::review::{holding, in_line, options};
use testkit::{cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(20);

/// Three masters A, B, C. H (fair) holds R on all three; W (fair) waits in every line; R's key
/// is then deleted on B (the master lost it). H reaches C through a proxy that holds H's bytes
/// back while H unlocks: the release runs on A (deleted) and B (gone), each of which reserves
/// R for W and rings it under H's token; W, rung by a quorum, claims on all three and takes C
/// from H's token there. The proxy lets H's bytes through: the release runs on C and finds
/// W's token.
///
/// Held to: W granted while H's release is held back; H's `unlock` returns `Ok` (A deleted
/// its token, and C's was taken by the claim its release rang for: a quorum of the three).
#[test]
fn a_release_overtaken_by_the_claim_it_rang_for_is_whole() {
    for asy in [false, true] {
        let c = cluster(3);
        let direct = c.addrs();
        let proxy = Proxy::start(c.servers()[2].addr());
        let via = vec![direct[0].clone(), direct[1].clone(), proxy.addr()];
        let lease = Duration::from_millis(500);
        let mut o = options(&via, true, "h", lease, 10_000);
        o.node_timeout = Duration::from_secs(5);
        let h = Redlock::with_config(o.validate().unwrap()).unwrap();
        let w = testkit::review::either_client(options(&direct, true, "w", lease, 10_000), asy);
        let key = resource("taken");
        let held = h.lock(&key, TTL).expect("R free");
        // (The lock is decided at a quorum: the third master's yes may still be on its way.)
        wait_until(Duration::from_secs(5), "H's token on every master", || {
            holding(&direct, &key, held.token().as_bytes()) == 3
        });
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let l = w.lock_within(&key, TTL, Duration::from_secs(15));
                (Instant::now(), l)
            });
            wait_until(Duration::from_secs(10), "W in every line", || {
                in_line(&direct, &key, "w") == 3
            });
            redis(&direct[1], &["DEL", &key]);
            proxy.set(Fault::Blackhole);
            // (A read of the proxy's already waiting when the hold began, 20 ms at most,
            // passes what comes during it.)
            std::thread::sleep(Duration::from_millis(100));
            let released = s.spawn(|| h.unlock(&held));
            let (at, l) = waiter.join().unwrap();
            let l = l.expect("W granted while H's release to C is held back");
            assert!(
                !released.is_finished(),
                "H's release was not held back at C"
            );
            assert_eq!(
                holding(&direct, &key, l.token().as_bytes()),
                3,
                "W holds R on every master"
            );
            proxy.set(Fault::Pass);
            let r = released.join().unwrap();
            eprintln!(
                "async {asy}: W granted {:?} before H's release came back: {r:?}",
                at.elapsed()
            );
            assert!(
                r.is_ok(),
                "async {asy}: H's release, overtaken at C by the claim it rang for: {r:?}"
            );
            assert_eq!(
                holding(&direct, &key, l.token().as_bytes()),
                3,
                "H's late release took nothing from W"
            );
            w.unlock(&l).expect("W's release");
        });
    }
}
