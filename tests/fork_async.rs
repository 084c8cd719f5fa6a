//! An `AsyncRedlock` inherited by a forked child never touches the parent's connections: its
//! operations there end with `Error::Forked`, a round that was in flight at the fork ends so
//! too (the driver task, should the child run the inherited runtime, goes quiet without
//! reading a reply), and an inherited `LockGuard` reports itself lost and releases nothing
//! when dropped.
//!
//! Its own test binary, with one test, so that the fork happens with no other test's thread;
//! the runtime is a current-thread one, so it has no thread of its own either.

mod forking;

use std::future::Future;
use std::time::Duration;

use redlock_mux::{AsyncRedlock, Error};

const TTL: Duration = Duration::from_secs(10);

/// The child's findings, as bits of its exit code.
const NOT_LOST: i32 = 1;
const NOT_REFUSED: i32 = 2;
const INFLIGHT_ANSWERED: i32 = 4;
const INFLIGHT_STUCK: i32 = 8;

#[test]
fn a_forked_child_never_uses_the_parents_async_client() {
    let mut c = testkit::cluster(3);
    let addrs = c.addrs();
    let holder = testkit::builder(&c).build().unwrap();
    let held = holder
        .lock("afork:held", Duration::from_secs(600))
        .expect("the third client's lock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        AsyncRedlock::builder()
            .nodes(addrs.clone())
            .node_timeout(Duration::from_secs(2))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    });
    let guard = rt
        .block_on(client.lock_guarded("afork:guarded", Duration::from_secs(30)))
        .expect("the parent's lock");
    let token = guard.lock().token().to_string();

    // A round in flight across the fork: its commands written to masters that are paused,
    // their replies still to come.
    for i in 0..c.len() {
        c.server(i).pause().unwrap();
    }
    let mut inflight = Box::pin(client.try_lock("afork:held", TTL));
    rt.block_on(async {
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(inflight.as_mut().poll(cx)));
        assert!(first.await.is_pending(), "paused masters answered");
        // The driver takes messages in order and writes in the pass that takes them: once it
        // has answered this, the round above is written.
        client.stats().await.unwrap();
    });

    let gate = forking::Gate::new();
    // (Taken and dropped in the child only: the parent's stays.)
    let mut guard = Some(guard);
    let pid = forking::fork(|| {
        let mut found = 0;
        if guard.as_ref().is_some_and(|g| !g.is_lost()) {
            found |= NOT_LOST;
        }
        drop(guard.take());
        // The masters are running again: the in-flight round's replies are on their way.
        gate.pass();
        // The child runs the inherited runtime, driver task included, as a child that forked
        // inside a current-thread runtime would.
        rt.block_on(async {
            if !matches!(
                client.try_lock("afork:other", TTL).await,
                Err(Error::Forked)
            ) {
                found |= NOT_REFUSED;
            }
            match tokio::time::timeout(Duration::from_secs(10), inflight.as_mut()).await {
                Ok(Err(Error::Forked)) => {}
                Ok(_) => found |= INFLIGHT_ANSWERED,
                Err(_) => found |= INFLIGHT_STUCK,
            }
        });
        found
    });
    for i in 0..c.len() {
        c.server(i).resume().unwrap();
    }
    gate.open();
    let found = forking::wait(pid, Duration::from_secs(60));
    let guard = guard.expect("the parent's guard");

    // Whatever the child did is over: the parent's lock is as the parent left it.
    for a in &addrs {
        assert_eq!(
            testkit::get(a, "afork:guarded").as_deref(),
            Some(token.as_str()),
            "{a}: the child released the parent's lock"
        );
        assert_eq!(
            testkit::get(a, "afork:held").as_deref(),
            Some(held.token().as_str()),
            "{a}"
        );
    }
    assert_eq!(
        found,
        0,
        "in the child: guard not lost {}, not refused {}, in-flight round answered {}, \
         in-flight round stuck {}",
        found & NOT_LOST != 0,
        found & NOT_REFUSED != 0,
        found & INFLIGHT_ANSWERED != 0,
        found & INFLIGHT_STUCK != 0
    );
    rt.block_on(async {
        // (Its replies' readiness may have been taken by the child's poller, which shares the
        // parent's: then it waits out the node timeout. Never a grant: the resource is held.)
        assert!(inflight.await.is_err(), "the parent's in-flight round");
        assert!(!guard.is_lost(), "the parent's guard");
        let other = AsyncRedlock::builder()
            .nodes(addrs.clone())
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        assert!(
            matches!(
                other.try_lock("afork:guarded", TTL).await,
                Err(Error::Conflict { .. })
            ),
            "another client took the parent's lock"
        );
        guard.release().await.expect("the parent's release");
    });
    holder.unlock(&held).expect("the holder's release");
}
