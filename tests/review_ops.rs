//! Review of the operations as state machines (issue 24): the async client's futures dropped
//! after each number of polls, in every state an acquisition passes through, against real
//! redis-server masters; and the waits counted when a caller goes away.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use redlock_mux::{AsyncRedlock, Error, Lock};
use testkit::{cluster, get, redis, resource};

const TTL: Duration = Duration::from_secs(60);

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `fut` at most `k` times (each poll after a real wake-up), then drops it where it
/// stands. `Some` if it ended first.
async fn poll_at_most<F: Future>(k: usize, fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut n = 0;
    std::future::poll_fn(|cx| {
        if n == k {
            return Poll::Ready(None);
        }
        n += 1;
        match fut.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending => {
                if n == k {
                    // Dropped at the next turn, in the state this poll left it in.
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    })
    .await
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Lock,
    LockWithin,
    TryLock,
    LockMany,
}

async fn start(client: &AsyncRedlock, op: Op, key: &str) -> Result<Lock, Error> {
    match op {
        Op::Lock => client.lock(key, TTL).await,
        Op::LockWithin => client.lock_within(key, TTL, Duration::from_secs(5)).await,
        Op::TryLock => client.try_lock(key, TTL).await,
        Op::LockMany => client.lock_many(&[key, &format!("{key}:b")], TTL).await,
    }
}

/// Foreign holders on `held` nodes: none (the first round wins), some (a lost round with a
/// release after it), or all (refused everywhere: a wait, or a watch, between tries).
fn sweep(held: usize, fencing: bool, wakeups: bool) {
    let c = cluster(3);
    let addrs = c.addrs();
    let rt = current_thread();
    let client = rt.block_on(async {
        testkit::builder(&c)
            .retry(20, Duration::from_millis(30))
            .fencing(fencing)
            .wakeups(wakeups)
            .build_async()
            .unwrap()
    });
    for op in [Op::Lock, Op::LockWithin, Op::TryLock, Op::LockMany] {
        for k in 1..=10 {
            let key = resource("swept");
            let keys = [key.clone(), format!("{key}:b")];
            for a in &addrs[..held] {
                for k in &keys {
                    redis(a, &["SET", k, "foreign", "PX", "60000"]);
                }
            }
            let out = rt.block_on(poll_at_most(k, start(&client, op, &key)));
            if let Some(Ok(lock)) = &out {
                rt.block_on(client.unlock(lock)).unwrap();
            }
            for a in &addrs[..held] {
                for k in &keys {
                    redis(a, &["DEL", k]);
                }
            }
            // The driver writes the abandoned release: let it run while the nodes are read.
            let why = format!("{op:?} dropped after {k} polls ({out:?}): no key left");
            rt.block_on(async {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                loop {
                    let left: Vec<_> = addrs
                        .iter()
                        .flat_map(|a| keys.iter().filter_map(move |k| get(a, k)))
                        .collect();
                    if left.is_empty() {
                        break;
                    }
                    assert!(tokio::time::Instant::now() < deadline, "{why}: {left:?}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
            // Another client gets the resource at once.
            let other = rt.block_on(async {
                testkit::builder(&c)
                    .retry(1, Duration::ZERO)
                    .fencing(fencing)
                    .build_async()
                    .unwrap()
            });
            let l = rt
                .block_on(other.try_lock(&key, TTL))
                .unwrap_or_else(|e| panic!("{why}; then {e}"));
            rt.block_on(other.unlock(&l)).unwrap();
        }
    }
    // The connections are still in step.
    let key = resource("after");
    let l = rt.block_on(client.try_lock(&key, TTL)).unwrap();
    rt.block_on(client.unlock(&l)).unwrap();
}

#[test]
fn dropped_with_the_resource_free_leaves_no_key() {
    sweep(0, false, true);
}

#[test]
fn dropped_fenced_leaves_no_key() {
    sweep(0, true, true);
}

#[test]
fn dropped_after_a_lost_round_leaves_no_key() {
    sweep(2, false, true);
}

#[test]
fn dropped_while_waiting_on_a_watch_leaves_no_key() {
    sweep(3, false, true);
}

#[test]
fn dropped_while_sleeping_between_tries_leaves_no_key() {
    sweep(3, true, false);
}

/// A `lock` dropped while it sleeps between tries has still decided (and so counted) that
/// wait: before the change, `Retry::after` recorded it as it decided it; the one loop now
/// hands the events of a step on only after the step's await, so a future dropped there
/// loses them.
#[cfg(feature = "metrics")]
#[test]
fn a_wait_is_counted_even_if_the_caller_goes_away_during_it() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let c = cluster(3);
    let addrs = c.addrs();
    let key = resource("counted");
    for a in &addrs {
        redis(a, &["SET", &key, "foreign", "PX", "60000"]);
    }
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = current_thread();
        rt.block_on(async {
            let client = testkit::builder(&c)
                .retry(3, Duration::from_secs(60))
                .wakeups(false)
                .build_async()
                .unwrap();
            // The first try is refused at once; then a sleep of 30 s at least, dropped.
            let r = tokio::time::timeout(Duration::from_secs(5), client.lock(&key, TTL)).await;
            assert!(r.is_err(), "{r:?}");
        });
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let waits: u64 = snapshot
        .iter()
        .filter(|(k, _, _, _)| k.key().name() == "redlock_waits_total")
        .map(|(_, _, _, v)| match v {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum();
    assert_eq!(waits, 1, "{snapshot:?}");
}
