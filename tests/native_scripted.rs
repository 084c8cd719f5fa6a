//! `Scripts::Native` loads no script ahead, so the commands with no native form (a set of
//! resources, a fenced acquisition) must not go out as an `EVALSHA` a fresh connection
//! answers `NOSCRIPT`: with another caller's acquisition queued behind, that `NOSCRIPT` would
//! be the node's vote, and the round lost with every node free (found by the simulator, seeds
//! 35 and 148 of `--faults none`).

use std::time::Duration;

use redlock_mux::{AsyncRedlock, Scripts};
use testkit::{cluster, resource};

const TTL: Duration = Duration::from_secs(30);

#[test]
fn scripted_acquisitions_pipelined_on_fresh_native_connections_win_their_first_try() {
    let c = cluster(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Fresh clients each time, so that every acquisition meets a fresh connection, with
        // two acquisitions of several resources written in the same pass.
        for k in 0..5 {
            let client: AsyncRedlock = testkit::builder(&c)
                .scripts(Scripts::Native)
                .fail_fast(false)
                .build_async()
                .unwrap();
            let (a1, a2, b1, b2) = (
                resource(&format!("nat-a1-{k}")),
                resource(&format!("nat-a2-{k}")),
                resource(&format!("nat-b1-{k}")),
                resource(&format!("nat-b2-{k}")),
            );
            let (first, second) = ([a1.as_str(), a2.as_str()], [b1.as_str(), b2.as_str()]);
            let (a, b) = tokio::join!(
                client.try_lock_many(&first, TTL),
                client.try_lock_many(&second, TTL),
            );
            let (a, b) = (a.expect("first, free"), b.expect("second, free"));
            client.unlock(&a).await.unwrap();
            client.unlock(&b).await.unwrap();
        }
    });
}
