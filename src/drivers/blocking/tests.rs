//! The blocking client without servers where it can: batches, panics inside them, waiters.

use super::*;
use crate::drivers::OsRandom;
use crate::Token;
use std::sync::mpsc;
use std::sync::Arc;

/// A watch that fires after its waiter timed out, before the waiter's `unwatch` reached
/// the engine (another caller ran the driver meanwhile), left its firing in `woken` for
/// good: one entry per such race, never collected. Now it is dropped; a live waiter's is
/// kept.
#[test]
fn a_watch_firing_after_its_waiter_gave_up_leaves_nothing_behind() {
    let mut q = Queue::default();
    // Waiter 7 gave up: the clean-up the waiter runs, under the queue's lock.
    q.unwatch.push(7);
    q.woken.retain(|(w, _)| *w != 7);
    // The driver, run by another caller, then publishes what the engine fired.
    q.publish(7, Wake::Pushed);
    q.publish(8, Wake::Pushed);
    assert_eq!(q.woken, vec![(8, Wake::Pushed)]);
}

/// A panic inside a batch (a bug in the round, say) must not leave the other callers of
/// that batch parked forever: each gets `Error::Aborted`, and the client goes on working.
#[test]
fn a_panic_inside_a_batch_wakes_every_caller_with_an_error() {
    // A node that accepts connections (the kernel's backlog does) and never answers: each
    // round runs its full node timeout, long enough for callers to queue behind it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let timeout = Duration::from_millis(300);
    let client = Arc::new(
        Redlock::builder()
            .nodes([addr])
            .node_timeout(timeout)
            .retry(1, Duration::ZERO)
            .build()
            .unwrap(),
    );
    let (tx, rx) = mpsc::channel();
    // The first caller runs a round alone (one round: an unlock).
    let first = {
        let client = client.clone();
        std::thread::spawn(move || {
            let _ = client.unlock(&Lock::from_token(
                "batch",
                Token::from_random(&mut OsRandom),
            ));
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !client.queue().busy {
        assert!(Instant::now() < deadline, "the first round never started");
        std::thread::yield_now();
    }
    // Three more queue behind it; they form the next batch, which panics.
    let queued: Vec<_> = (0..3)
        .map(|i| {
            let (client, tx) = (client.clone(), tx.clone());
            std::thread::spawn(move || {
                let lock =
                    Lock::from_token(&format!("batch{i}"), Token::from_random(&mut OsRandom));
                let r = client.unlock(&lock);
                let _ = tx.send(r);
            })
        })
        .collect();
    while client.queue().waiting.len() < 3 {
        assert!(Instant::now() < deadline, "callers never queued");
        std::thread::yield_now();
    }
    client.shared.panic_next_batch.store(true, Ordering::SeqCst);
    first.join().unwrap();
    // One caller ran the batch and panicked; the two others are answered, not parked.
    // (Without the fix they stay parked and this times out.)
    let mut aborted = 0;
    for _ in 0..2 {
        match rx.recv_timeout(timeout * 20) {
            Ok(Err(Error::Aborted)) => aborted += 1,
            Ok(other) => panic!("expected Aborted, got {other:?}"),
            Err(e) => panic!("a caller of the panicked batch was left parked: {e}"),
        }
    }
    assert_eq!(aborted, 2);
    let panicked = queued
        .into_iter()
        .map(|t| t.join())
        .filter(Result::is_err)
        .count();
    assert_eq!(panicked, 1, "the caller that ran the batch unwinds");
    // The client still works: the next round runs (and times out on the mute node).
    match client.try_lock("after", Duration::from_secs(10)) {
        Err(Error::NoQuorum { nodes }) => {
            assert_eq!(nodes.0[0].outcome, NodeOutcome::Timeout, "{nodes}")
        }
        other => panic!("after the panic: {other:?}"),
    }
    drop(listener);
}
