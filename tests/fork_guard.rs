//! A `BlockingGuard` inherited by a forked child does nothing there: the child never held the
//! lock, so the guard reports itself lost, and dropping it releases nothing (it would release
//! the parent's lock: same token, same sockets). The parent's lock and guard are unaffected.
//!
//! Its own test binary, with one test, so that the fork happens with no other test's thread
//! (the parent's keeper thread is the one other thread, asleep between extensions).

mod forking;

use std::time::Duration;

use redlock_mux::{Error, Lock, Loss, OsRandom, Token};

/// The child's findings, as bits of its exit code.
const NOT_LOST: i32 = 1;
const VALIDITY_LEFT: i32 = 2;
const WRONG_LOSS: i32 = 4;
const NOT_REFUSED: i32 = 8;

#[test]
fn a_forked_child_dropping_an_inherited_guard_leaves_the_parents_lock() {
    let c = testkit::cluster(3);
    let addrs = c.addrs();
    let client = testkit::builder(&c)
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = client
        .lock_guarded("fork:guarded", Duration::from_secs(30))
        .expect("the parent's lock");
    let token = guard.lock().token().to_string();

    // (Taken and dropped in the child only: the parent's stay.)
    let (mut guard, mut client) = (Some(guard), Some(client));
    let pid = forking::fork(|| {
        let (guard, client) = (guard.take().unwrap(), client.take().unwrap());
        let mut found = 0;
        if !guard.is_lost() {
            found |= NOT_LOST;
        }
        if guard.validity() != Duration::ZERO {
            found |= VALIDITY_LEFT;
        }
        if guard.loss() != Some(Loss::ExtendFailed(Error::Forked)) {
            found |= WRONG_LOSS;
        }
        // The client refuses to work, on another resource (so that only the guard's drop
        // below could release the parent's).
        let other = Lock::from_token("fork:other", Token::from_random(&mut OsRandom));
        if !matches!(
            client.try_lock("fork:other", Duration::from_secs(30)),
            Err(Error::Forked)
        ) || client.unlock(&other) != Err(Error::Forked)
        {
            found |= NOT_REFUSED;
        }
        // What a child that has no use for the lock does: lets the guard, and the client,
        // go.
        drop(guard);
        drop(client);
        found
    });
    let found = forking::wait(pid, Duration::from_secs(60));
    let guard = guard.expect("the parent's guard");
    // The child is gone, and so is anything it could have sent: the keys still hold the
    // parent's token.
    for a in &addrs {
        assert_eq!(
            testkit::get(a, "fork:guarded").as_deref(),
            Some(token.as_str()),
            "{a}: the child released the parent's lock"
        );
    }
    let other = testkit::builder(&c)
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    assert!(
        matches!(
            other.try_lock("fork:guarded", Duration::from_secs(10)),
            Err(Error::Conflict { .. })
        ),
        "another client took the parent's lock"
    );
    assert_eq!(
        found,
        0,
        "the child's guard: not lost {}, validity left {}, wrong loss {}, not refused {}",
        found & NOT_LOST != 0,
        found & VALIDITY_LEFT != 0,
        found & WRONG_LOSS != 0,
        found & NOT_REFUSED != 0
    );
    assert!(!guard.is_lost(), "the parent's guard: {:?}", guard.loss());
    guard.release().expect("the parent's release");
}
