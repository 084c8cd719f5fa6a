//! What only the async client has: pipelining under concurrency, cancellation, and the
//! keep-alive guard. Against real redis-server masters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Error, KeepAlive, Loss, NodeOutcome};
use testkit::{cluster, get, pttl, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(10);

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn keys(addr: &str, pattern: &str) -> Vec<String> {
    match redis(addr, &["KEYS", pattern]) {
        Frame::Array(items) => items
            .iter()
            .map(|f| String::from_utf8_lossy(f.as_bytes().unwrap()).into_owned())
            .collect(),
        other => panic!("KEYS: {other:?}"),
    }
}

/// Checks that every connection of `client` answers its own commands: for each node in turn,
/// the key is free there and foreign everywhere else, so a round without fail-fast must show
/// exactly that node saying OK. A connection out of step would hand the round some earlier
/// command's reply instead.
async fn assert_connections_in_step(client: &AsyncRedlock, addrs: &[String]) {
    for i in 0..addrs.len() {
        let key = resource("probe");
        for (j, a) in addrs.iter().enumerate() {
            if j != i {
                redis(a, &["SET", &key, "foreign", "PX", "60000"]);
            }
        }
        match client.try_lock(&key, TTL).await {
            Err(Error::Conflict { nodes, .. }) => {
                for (j, r) in nodes.0.iter().enumerate() {
                    let want = if j == i {
                        NodeOutcome::Ok
                    } else {
                        NodeOutcome::Held
                    };
                    assert_eq!(r.outcome, want, "node {j} while probing node {i}: {nodes}");
                }
            }
            other => panic!("probe of node {i}: expected a conflict, got {other:?}"),
        }
    }
}

#[test]
fn futures_dropped_at_random_points_leave_connections_in_step_and_every_key_with_a_ttl() {
    let c = cluster(5);
    let addrs = c.addrs();
    let rt = multi_thread();
    rt.block_on(async {
        let client = redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(500))
            .fail_fast(false)
            .retry(1, Duration::ZERO)
            .build_async()
            .unwrap();
        let mut tasks = Vec::new();
        for t in 0..64 {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut completed = 0u32;
                for i in 0..40 {
                    let key = format!("cancel:{t}:{i}");
                    let budget = Duration::from_micros(rand::rng().random_range(0..400));
                    let acquired = tokio::time::timeout(budget, client.try_lock(&key, TTL)).await;
                    if let Ok(Ok(lock)) = acquired {
                        completed += 1;
                        let budget = Duration::from_micros(rand::rng().random_range(0..400));
                        let _ = tokio::time::timeout(budget, client.unlock(&lock)).await;
                    }
                }
                completed
            }));
        }
        let mut completed = 0;
        for t in tasks {
            completed += t.await.unwrap();
        }
        // Some rounds finish, some are cut short at every possible point.
        assert!(completed < 64 * 40, "no future was ever dropped");
        assert_connections_in_step(&client, &addrs).await;
    });
    // Every lock key on every node carries its ttl; none was left without one.
    let mut seen = 0;
    for a in &addrs {
        for k in keys(a, "cancel:*") {
            let left = pttl(a, &k);
            assert!(left > 0 || left == -2, "{k} on {a} has PTTL {left}");
            seen += 1;
        }
    }
    // Dropped acquisitions release their token; only cancelled unlocks may leave keys (which
    // expire). The count is informative, the ttl check above is the assertion.
    eprintln!("keys left behind with a ttl: {seen}");
}

#[test]
fn dropped_acquisition_releases_its_token() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let rt = multi_thread();
    let client = rt.block_on(async {
        redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_secs(30))
            .build_async()
            .unwrap()
    });
    // Warm the connections so the paused nodes already have one open.
    rt.block_on(async {
        let l = client.lock(&resource("warm"), TTL).await.unwrap();
        client.unlock(&l).await.unwrap();
    });
    for i in 0..3 {
        c.server(i).pause().unwrap();
    }
    let key = resource("dropped");
    let task = {
        let client = client.clone();
        let key = key.clone();
        rt.spawn(async move { client.try_lock(&key, TTL).await })
    };
    wait_until(
        Duration::from_secs(10),
        "the SETs to reach the live nodes",
        || addrs[3..].iter().all(|a| get(a, &key).is_some()),
    );
    task.abort();
    assert!(rt.block_on(task).unwrap_err().is_cancelled());
    wait_until(
        Duration::from_secs(10),
        "the release on the live nodes",
        || addrs[3..].iter().all(|a| get(a, &key).is_none()),
    );
    for i in 0..3 {
        c.server(i).resume().unwrap();
    }
    // The paused nodes run the queued SET, then the release queued behind it.
    wait_until(
        Duration::from_secs(10),
        "the release on the resumed nodes",
        || addrs.iter().all(|a| get(a, &key).is_none()),
    );
}

#[test]
fn many_concurrent_tasks_with_a_node_paused_are_all_correct() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let rt = multi_thread();
    let timeout = Duration::from_millis(300);
    let client = rt.block_on(async {
        redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .node_timeout(timeout)
            // Every round waits out the paused node, so every one of its replies is late.
            .fail_fast(false)
            .retry(3, Duration::from_millis(10))
            .build_async()
            .unwrap()
    });
    c.server(0).pause().unwrap();
    let addrs = Arc::new(addrs);
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..256 {
            let client = client.clone();
            let addrs = addrs.clone();
            tasks.push(tokio::spawn(async move {
                let key = format!("many:{t}");
                let start = Instant::now();
                let lock = client.lock(&key, TTL).await?;
                let took = start.elapsed();
                let holders = tokio::task::spawn_blocking({
                    let addrs = addrs.clone();
                    let key = key.clone();
                    let token = lock.token().to_string();
                    move || {
                        addrs[1..]
                            .iter()
                            .filter(|a| get(a, &key).as_deref() == Some(token.as_str()))
                            .count()
                    }
                })
                .await
                .unwrap();
                client.unlock(&lock).await?;
                Ok::<_, Error>((took, holders))
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for (t, r) in results.iter().enumerate() {
        let (took, holders) = r.as_ref().unwrap_or_else(|e| panic!("task {t}: {e}"));
        assert!(*holders >= 3, "task {t}: token on {holders} live nodes");
        // The paused node never holds anyone up for longer than its timeout (plus slack for
        // 256 tasks on two cores).
        assert!(
            *took < timeout + Duration::from_secs(1),
            "task {t} took {took:?}"
        );
    }
    c.server(0).resume().unwrap();
    // Node 0 now answers a backlog of 512 commands whose rounds are long over; the same
    // client's connection to it must still hand each later reply to its own round.
    rt.block_on(assert_connections_in_step(&client, &addrs));
}

#[test]
fn keep_alive_holds_the_lock_for_several_ttls_then_signals_loss_within_validity() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let rt = multi_thread();
    // A node timeout generous enough that a loaded 2-core machine does not fail an extension
    // round by itself.
    let ttl = Duration::from_secs(1);
    rt.block_on(async {
        let client = redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(300))
            .build_async()
            .unwrap();
        let key = resource("keepalive");
        let guard = client.lock_guarded(&key, ttl).await.unwrap();
        let token = guard.lock().token().to_string();
        let start = Instant::now();
        // Hold it for four ttls: the keys never expire and the guard never reports loss.
        while start.elapsed() < ttl * 4 {
            assert!(!guard.is_lost(), "lost after {:?}", start.elapsed());
            assert!(guard.validity() > Duration::ZERO);
            let held = addrs
                .iter()
                .filter(|a| get(a, &key).as_deref() == Some(token.as_str()))
                .count();
            assert!(
                held >= 3,
                "held on {held} nodes after {:?}",
                start.elapsed()
            );
            tokio::time::sleep(ttl / 8).await;
        }
        assert!(guard.extensions() >= 4, "{} extensions", guard.extensions());
        // The majority goes away: the next extension fails, and the guard says so while the
        // lock is still valid.
        for i in 0..3 {
            c.server(i).stop();
        }
        let valid_until = guard.lock().valid_until();
        let loss = tokio::time::timeout(ttl * 2, guard.lost())
            .await
            .expect("loss signalled");
        assert!(
            matches!(loss, Loss::ExtendFailed(Error::NoQuorum { .. })),
            "{loss}"
        );
        assert!(
            Instant::now() < valid_until,
            "loss signalled {:?} after the validity ended",
            Instant::now() - valid_until
        );
        assert!(guard.is_lost());
    });
}

#[test]
fn guard_release_and_drop_both_release() {
    let c = cluster(5);
    let addrs = c.addrs();
    let rt = multi_thread();
    rt.block_on(async {
        let client = redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .build_async()
            .unwrap();
        let key = resource("guard-release");
        let guard = client.lock_guarded(&key, TTL).await.unwrap();
        guard.release().await.unwrap();
        // The next holder gets it at once.
        let again = client.try_lock(&key, TTL).await.unwrap();
        client.unlock(&again).await.unwrap();

        let key = resource("guard-drop");
        let guard = client.lock_guarded(&key, TTL).await.unwrap();
        drop(guard);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match client.try_lock(&key, TTL).await {
                Ok(lock) => {
                    client.unlock(&lock).await.unwrap();
                    break;
                }
                Err(Error::Conflict { .. }) if Instant::now() < deadline => {
                    tokio::task::yield_now().await
                }
                Err(e) => panic!("dropped guard's lock not released: {e}"),
            }
        }
    });
}

#[test]
fn extension_limit_lets_the_lock_run_out() {
    let c = cluster(5);
    let addrs = c.addrs();
    let rt = multi_thread();
    rt.block_on(async {
        let client = redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .build_async()
            .unwrap();
        // 2 s: a loss margin of 100 ms, room for a loaded machine to wake this task after the
        // guard reported the loss and before the validity ends.
        let ttl = Duration::from_secs(2);
        let guard = client
            .lock_guarded_with(
                &resource("limit"),
                ttl,
                KeepAlive::default().max_extensions(2),
            )
            .await
            .unwrap();
        let loss = tokio::time::timeout(ttl * 10, guard.lost())
            .await
            .expect("the lock runs out");
        assert_eq!(loss, Loss::Expired);
        assert_eq!(guard.extensions(), 2);
        // Reported before the validity ends, not at it: the work still has the margin.
        assert!(
            !guard.lock().is_expired(),
            "the limit's loss came after the validity ended"
        );
    });
}

#[test]
fn building_outside_a_runtime_is_a_typed_error() {
    let err = redlock_mux::AsyncRedlock::builder()
        .nodes(["127.0.0.1:1"])
        .build_async()
        .unwrap_err();
    assert_eq!(
        err,
        Error::Config(redlock_mux::ConfigError::NoRuntime),
        "{err}"
    );
}

#[test]
fn pipelined_tasks_release_everywhere_across_a_script_flush() {
    let c = cluster(5);
    let addrs = c.addrs();
    let rt = multi_thread();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (tasks, per_task) = (16, 60);
    rt.block_on(async {
        let client = AsyncRedlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(200))
            .build_async()
            .unwrap();
        let prefix = resource("flush-async");
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let (client, done, prefix) = (client.clone(), done.clone(), prefix.clone());
                tokio::spawn(async move {
                    for i in 0..per_task {
                        let lock = client
                            .lock(&format!("{prefix}:{t}:{i}"), TTL)
                            .await
                            .unwrap();
                        // Every release must succeed, NOSCRIPT or not.
                        client.unlock(&lock).await.unwrap();
                        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                })
            })
            .collect();
        // Flush every node's script cache four times while the pairs run.
        let flusher = {
            let (addrs, done) = (addrs.clone(), done.clone());
            tokio::task::spawn_blocking(move || {
                for step in 1..=4 {
                    let target = step * tasks * per_task / 5;
                    wait_until(
                        Duration::from_secs(30),
                        "the pairs to make progress",
                        || done.load(std::sync::atomic::Ordering::SeqCst) >= target,
                    );
                    for a in &addrs {
                        redis(a, &["SCRIPT", "FLUSH"]);
                    }
                }
            })
        };
        for h in handles {
            h.await.unwrap();
        }
        flusher.await.unwrap();
    });
    // Nothing was left behind on any node: every release reached every node.
    for a in &addrs {
        assert!(keys(a, "*").is_empty(), "{a}: {:?}", keys(a, "*"));
    }
}

/// An extension future dropped mid-round may already have run its `PEXPIRE` on some nodes:
/// the lock it was given claims no more than the new ttl (safety review, item 1). Before the
/// fix the lock kept its 10 s while its keys had 1 s.
#[test]
fn a_dropped_extension_still_caps_the_validity() {
    use testkit::proxy::{in_front, latency, set_all};
    let c = cluster(3);
    let (proxies, addrs) = in_front(&c, 1..3);
    let rt = multi_thread();
    rt.block_on(async {
        let client = redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_secs(2))
            .build_async()
            .unwrap();
        let key = resource("dropped-ext");
        let mut lock = client.lock(&key, TTL).await.unwrap();
        set_all(&proxies, latency(Duration::from_millis(500)));
        let short = Duration::from_secs(1);
        // Node 0 answers at once, the other two only after 500 ms: the round is still open
        // when its future is dropped.
        let dropped =
            tokio::time::timeout(Duration::from_millis(50), client.extend(&mut lock, short)).await;
        assert!(
            dropped.is_err(),
            "the round should still be open: {dropped:?}"
        );
        assert!(
            lock.validity() <= short,
            "dropped extension, yet the lock claims {:?}",
            lock.validity()
        );
        // The PEXPIREs did land: every key now has at most the short ttl.
        wait_until(Duration::from_secs(5), "the PEXPIREs landed", || {
            c.addrs()
                .iter()
                .all(|a| (0..=1_000).contains(&pttl(a, &key)))
        });
    });
}

/// Loss is reported before the validity ends whatever the extension round is doing (safety
/// review, item 3): two of three nodes answer later than the node timeout, so every
/// extension fails slowly. Before the fix the guard awaited the extension without racing it
/// against the validity, and a second client held the lock while `is_lost()` was false.
#[test]
fn a_slow_extension_is_reported_lost_before_the_validity_ends() {
    use testkit::proxy::{in_front, latency, set_all, Fault};
    let c = cluster(3);
    let (proxies, addrs) = in_front(&c, 1..3);
    let rt = multi_thread();
    // 4 s: a loss margin of 200 ms, room for a loaded machine to schedule the report.
    let ttl = Duration::from_secs(4);
    rt.block_on(async {
        let builder = redlock_mux::AsyncRedlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(150))
            .retry(1, Duration::ZERO);
        let client = builder.clone().build_async().unwrap();
        let key = resource("slow-keepalive");
        // A threshold (5% of 4 s = 200 ms) shorter than a round and the margin take: the
        // guard starts the extension earlier, at node timeout + margin before the end.
        let guard = client
            .lock_guarded_with(&key, ttl, KeepAlive::default().extend_when_left(0.05))
            .await
            .unwrap();
        let valid_until = guard.lock().valid_until();
        set_all(&proxies, latency(Duration::from_millis(600)));
        let loss = tokio::time::timeout(ttl * 3, guard.lost())
            .await
            .expect("loss reported");
        let reported = Instant::now();
        assert!(
            reported < valid_until,
            "loss ({loss}) reported {:?} after the validity ended",
            reported - valid_until
        );
        assert!(guard.is_lost());
        // Whoever takes the lock next finds the first guard already lost.
        set_all(&proxies, Fault::Pass);
        let other = builder.build_async().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let theirs = loop {
            match other.try_lock(&key, ttl).await {
                Ok(lock) => break lock,
                Err(e) => assert!(Instant::now() < deadline, "never free again: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert!(guard.is_lost(), "two holders, and the first does not know");
        other.unlock(&theirs).await.unwrap();
    });
}

/// A ttl whose validity cannot hold an extension round is refused before anything is taken.
#[test]
fn keep_alive_refuses_a_ttl_an_extension_cannot_fit_in() {
    let c = cluster(3);
    let rt = multi_thread();
    rt.block_on(async {
        let client = redlock_mux::AsyncRedlock::builder()
            .nodes(c.addrs())
            .node_timeout(Duration::from_millis(150))
            .build_async()
            .unwrap();
        let key = resource("keepalive-too-short");
        match client.lock_guarded(&key, Duration::from_millis(150)).await {
            Err(Error::Config(redlock_mux::ConfigError::KeepAlive { .. })) => {}
            other => panic!("expected a KeepAlive config error, got {other:?}"),
        }
        for a in c.addrs() {
            assert_eq!(get(&a, &key), None, "nothing was taken");
        }
    });
}

/// Releases nobody awaits (a dropped guard, a dropped acquisition) go out in the form the
/// connection uses, with its fallbacks, as an awaited release does: under an ACL user denied
/// `EVAL`/`EVALSHA` but allowed functions, they reach the keys through `FCALL` (they were sent
/// as `EVAL`, refused, and the keys stayed for their whole ttl).
#[test]
fn releases_nobody_awaits_use_the_connections_form() {
    let mut c = cluster(3);
    let addrs = c.addrs();
    let (name, version) = testkit::cases::server_version(&addrs[0]);
    if name == "redis" && version < (7, 0) {
        eprintln!("skipped: {name} {version:?} has no functions");
        return;
    }
    for a in &addrs {
        let args = [
            "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-eval", "-evalsha", "-script",
        ];
        assert_eq!(redis(a, &args), Frame::Simple("OK".into()));
    }
    let users: Vec<String> = c
        .servers()
        .iter()
        .map(|s| format!("redis://app:pw@127.0.0.1:{}", s.port()))
        .collect();
    let rt = multi_thread();
    let client = rt.block_on(async {
        AsyncRedlock::builder()
            .nodes(&users)
            .node_timeout(Duration::from_secs(5))
            .build_async()
            .unwrap()
    });
    let gone = |key: &str, why: &str| {
        wait_until(Duration::from_secs(10), why, || {
            addrs.iter().all(|a| get(a, key).is_none())
        })
    };
    // A dropped guard: its plain SET told the connections nothing about the ACL.
    let key = resource("fire-guard");
    let guard = rt
        .block_on(client.lock_guarded(&key, Duration::from_secs(60)))
        .unwrap();
    drop(guard);
    gone(&key, "the dropped guard's release");

    // A dropped acquisition, with two nodes paused so that it cannot complete.
    c.server(1).pause().unwrap();
    c.server(2).pause().unwrap();
    let key = resource("fire-acquisition");
    let task = {
        let client = client.clone();
        let key = key.clone();
        rt.spawn(async move { client.try_lock(&key, TTL).await })
    };
    wait_until(
        Duration::from_secs(10),
        "the SETs to reach the live nodes",
        || get(&addrs[0], &key).is_some(),
    );
    task.abort();
    assert!(rt.block_on(task).unwrap_err().is_cancelled());
    c.server(1).resume().unwrap();
    c.server(2).resume().unwrap();
    gone(&key, "the dropped acquisition's release");
}

/// Loss is read from the clock as well as reported, so it is known when the keep-alive task
/// cannot run (review 22.4): on a current-thread runtime, a task that does synchronous steps
/// and checks `is_lost()` between them gives the keep-alive task no turn. Before the fix
/// `is_lost()` stayed false past the validity's end, with `validity()` at zero (in the
/// review another client took the lock at 2.0 s, and it was still false at 5 s).
#[test]
fn a_guard_whose_task_cannot_run_reports_loss_by_the_clock() {
    let c = cluster(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = AsyncRedlock::builder()
            .nodes(c.addrs())
            .node_timeout(Duration::from_millis(150))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        let key = resource("blocked-guard");
        let guard = client
            .lock_guarded(&key, Duration::from_secs(1))
            .await
            .unwrap();
        let valid_until = guard.lock().valid_until();
        assert!(!guard.is_lost(), "lost at once: {:?}", guard.loss());
        // Synchronous steps, no await between them, until the validity has run out.
        while Instant::now() <= valid_until {
            std::thread::sleep(
                valid_until.saturating_duration_since(Instant::now()) + Duration::from_millis(1),
            );
        }
        assert_eq!(guard.validity(), Duration::ZERO);
        assert!(
            guard.is_lost(),
            "the validity has run out and is_lost() is false"
        );
        assert_eq!(guard.loss(), Some(Loss::ExtendTooSlow));
        // `lost()` says so at once too, whatever the task does when it next runs.
        assert_eq!(guard.lost().await, Loss::ExtendTooSlow);
    });
}

/// An acquisition whose future is dropped (a timeout around it) fires its release at once,
/// while the engine's round for it may still wait for the nodes. A node that then refuses the
/// acquisition in its form (`NOSCRIPT` after a `SCRIPT FLUSH`) must not get it again: it
/// would land behind the fired release and keep its key for the whole ttl. Valkey 9, fenced
/// (the acquisition a script, the release the native `DELIFEQ`, which meets no `NOSCRIPT`).
#[test]
fn a_dropped_acquisition_refused_in_its_form_leaves_no_key() {
    let c = cluster(3);
    let (name, version) = testkit::cases::server_version(&c.addrs()[0]);
    if !(name == "valkey" && version >= (9, 0)) {
        eprintln!("skipped: {name} {version:?} has no native release to overtake the acquisition");
        return;
    }
    let (proxies, addrs) = testkit::proxy::in_front(&c, 0..3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = resource("dropped-refused");
    rt.block_on(async {
        let client = AsyncRedlock::builder()
            .nodes(addrs)
            .fencing(true)
            .node_timeout(Duration::from_secs(2))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        let warm = client.lock(&resource("dropped-warm"), TTL).await.unwrap();
        client.unlock(&warm).await.unwrap();
        for a in c.addrs() {
            redis(&a, &["SCRIPT", "FLUSH"]);
        }
        // Replies come 300 ms late; the caller gives up after 100 ms, before any is read.
        for p in &proxies {
            p.set(testkit::proxy::latency(Duration::from_millis(300)));
        }
        let r = tokio::time::timeout(
            Duration::from_millis(100),
            client.try_lock(&key, Duration::from_secs(60)),
        )
        .await;
        assert!(r.is_err(), "answered before the timeout: {r:?}");
        // Every reply in and the engine's round over (node timeout 2 s), the client served.
        tokio::time::sleep(Duration::from_secs(3)).await;
    });
    for p in &proxies {
        p.set(testkit::proxy::Fault::Pass);
    }
    let left: Vec<String> = c
        .addrs()
        .into_iter()
        .filter(|a| get(a, &key).is_some())
        .collect();
    assert!(
        left.is_empty(),
        "dropped and released, yet {left:?} hold the key"
    );
}

/// `keep_alive` is a plain method on a `Send + Sync` client: called from a thread outside any
/// runtime it starts its task on the client's own runtime (it panicked in `tokio::spawn`), and
/// the lock is kept alive from there.
#[test]
fn keep_alive_from_a_thread_outside_the_runtime_keeps_the_lock() {
    let c = cluster(1);
    let rt = multi_thread();
    let client = rt.block_on(async {
        AsyncRedlock::builder()
            .nodes(c.addrs())
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    });
    let key = resource("outside");
    let lock = rt
        .block_on(client.lock(&key, Duration::from_secs(2)))
        .unwrap();
    let other = client.clone();
    let guard = std::thread::spawn(move || other.keep_alive(lock, KeepAlive::default()))
        .join()
        .expect("keep_alive called outside a runtime");
    // Past the first ttl, still held: the task extended it.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!guard.is_lost(), "{:?}", guard.loss());
    assert!(guard.extensions() >= 1);
    assert!(pttl(&c.addrs()[0], &key) > 0);
    rt.block_on(guard.release()).unwrap();
}
