//! The blocking client against real redis-server masters. The bodies are shared with the
//! async client's suite (`testkit::cases`).

use std::time::Duration;

use testkit::{calls, redis, Blocking};

macro_rules! shared_cases {
    ($flavor:ty: $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                testkit::cases::$name::<$flavor>();
            }
        )*
    };
}

testkit::for_each_case!(shared_cases, Blocking);

#[test]
fn script_digests_match_what_redis_computes() {
    let server = testkit::local::LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    for (sha, text) in redlock_mux::script::ALL
        .iter()
        .chain(&redlock_mux::script::FAIR)
    {
        match redis(&addr, &["SCRIPT", "LOAD", text]) {
            redlock_mux::resp::Frame::Bulk(b) => assert_eq!(&b[..], sha.as_bytes()),
            other => panic!("SCRIPT LOAD: {other:?}"),
        }
    }
}

/// Redis before 7.2 passes the C library's spelling of NaN through: Lua's `0/0` as a RESP3
/// double is `,-nan` (or `,nan`) on the wire. The codec takes it as a NaN instead of failing
/// the connection.
#[test]
fn the_codec_takes_the_nan_a_real_server_sends() {
    use std::io::{Read, Write};
    let server = testkit::local::LocalServer::start().unwrap();
    let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut out = bytes::BytesMut::new();
    redlock_mux::resp::encode_command(&mut out, &[b"HELLO", b"3"]);
    redlock_mux::resp::encode_command(&mut out, &[b"EVAL", b"return {double=0/0}", b"0"]);
    s.write_all(&out).unwrap();
    let mut dec = redlock_mux::resp::Decoder::default();
    let mut buf = bytes::BytesMut::new();
    let mut frames = Vec::new();
    let mut chunk = [0u8; 4096];
    while frames.len() < 2 {
        match dec.decode(&mut buf) {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => {
                let n = s.read(&mut chunk).expect("replies within 5 s");
                assert!(n > 0, "server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e) => panic!("the server's NaN was refused: {e}"),
        }
    }
    match &frames[1] {
        redlock_mux::resp::Frame::Double(d) => assert!(d.is_nan(), "{d}"),
        other => panic!("expected a double, got {other:?}"),
    }
}

#[test]
fn clients_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<redlock_mux::Redlock>();
    assert_send_sync::<redlock_mux::AsyncRedlock>();
    assert_send_sync::<redlock_mux::Lock>();
    assert_send_sync::<redlock_mux::Error>();
    // A Redlock shared by threads: each caller's round is whole and correct.
    let c = testkit::cluster(5);
    let client = std::sync::Arc::new(testkit::builder(&c).build().unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let key = format!("shared:{t}:{i}");
                    let lock = client
                        .lock(&key, std::time::Duration::from_secs(10))
                        .unwrap();
                    client.unlock(&lock).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn threads_sharing_a_client_are_pipelined_in_one_round() {
    use std::sync::Barrier;
    use std::time::Duration;
    let c = testkit::cluster(5);
    let client = testkit::builder(&c).build().unwrap();
    let threads = 16;
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (client, start) = (&client, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..50 {
                    let key = testkit::resource(&format!("piped:{t}:{i}"));
                    let lock = client.lock(&key, Duration::from_secs(10)).unwrap();
                    assert!(lock.validity() > Duration::from_secs(9));
                    client.unlock(&lock).unwrap();
                }
            });
        }
    });
    let stats = client.stats();
    assert!(
        stats.largest_batch > 1,
        "16 threads on one client: some rounds must carry several callers' commands"
    );
    // Every operation was counted in a write pass: at least 800 acquisitions and 800 releases
    // (more only if a round had to be retried).
    assert!(stats.batched_ops >= 2 * 16 * 50, "{stats:?}");
    assert!(stats.batches < stats.batched_ops, "{stats:?}");
    assert!(stats.mean_batch() > 1.0, "{stats:?}");
    // Every key was released: nothing of the 800 pairs is left on any node. (The last
    // fail-fast releases may still be on their way to the two slowest nodes.)
    testkit::all_empty_serving(&client, &c.addrs());
}

#[test]
fn threads_sharing_a_client_exclude_each_other() {
    use std::time::Duration;
    let c = testkit::cluster(5);
    let client = testkit::builder(&c).build().unwrap();
    let checker = testkit::checker::Checker::new();
    let key = testkit::resource("shared-contended");
    let acquired = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..8 {
            let (client, checker, key, acquired) = (&client, &checker, &key, &acquired);
            s.spawn(move || {
                for _ in 0..100 {
                    match client.try_lock(key, Duration::from_secs(10)) {
                        Ok(lock) => {
                            let section = checker.enter(t, lock.valid_until());
                            std::thread::sleep(Duration::from_micros(200));
                            checker.leave(section);
                            client.unlock(&lock).unwrap();
                            acquired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(redlock_mux::Error::Conflict { .. }) => {}
                        Err(e) => panic!("thread {t}: {e}"),
                    }
                }
            });
        }
    });
    assert!(acquired.into_inner() > 0, "someone got the lock");
    assert!(checker.overlaps().is_empty(), "{:?}", checker.overlaps());
    assert_eq!(checker.detector_hits(), 0);
    assert!(
        client.stats().largest_batch > 1,
        "contenders were pipelined together"
    );
}

#[test]
fn pipelined_callers_fall_back_to_eval_after_a_script_flush() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    let c = testkit::cluster(5);
    let client = testkit::builder(&c).build().unwrap();
    let pairs = AtomicUsize::new(0);
    let threads = 8;
    let per_thread = 150;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (client, pairs) = (&client, &pairs);
            s.spawn(move || {
                for i in 0..per_thread {
                    let key = testkit::resource(&format!("flush:{t}:{i}"));
                    let lock = client.lock(&key, Duration::from_secs(10)).unwrap();
                    // Every release must succeed, NOSCRIPT or not.
                    client.unlock(&lock).unwrap();
                    pairs.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        // Flush the script caches of every node four times while the pairs run.
        for step in 1..=4 {
            let target = step * threads * per_thread / 5;
            testkit::wait_until(
                Duration::from_secs(30),
                "the pairs to make progress",
                || pairs.load(Ordering::SeqCst) >= target,
            );
            for addr in c.addrs() {
                redis(&addr, &["SCRIPT", "FLUSH"]);
            }
        }
    });
    assert_eq!(pairs.into_inner(), threads * per_thread);
    assert!(client.stats().largest_batch > 1);
    // A NOSCRIPT that came after its release was decided is answered by the client, which has
    // no thread of its own: it serves them while this waits.
    testkit::all_empty_serving(&client, &c.addrs());
}

/// A fail-fast release returns once a quorum answered; a node whose script cache was flushed
/// answers `NOSCRIPT` later, and only the client can send the `EVAL` that releases the key
/// there. The blocking client has no thread: `poll_idle` does it, and so does dropping the
/// client (safety review, item 5; before, the key stayed with its full ttl until an unrelated
/// operation ran).
#[test]
fn a_late_noscript_is_answered_by_poll_idle_and_by_drop() {
    use redlock_mux::resp::Frame;
    use std::time::Duration;
    use testkit::proxy::{Fault, Proxy};
    let c = testkit::cluster(5);
    let proxies: Vec<Proxy> = (3..5)
        .map(|i| Proxy::start(c.servers()[i].addr()))
        .collect();
    let mut addrs = c.addrs();
    addrs[3] = proxies[0].addr();
    addrs[4] = proxies[1].addr();
    let ttl = Duration::from_secs(30);
    for how in ["poll_idle", "drop"] {
        let client = redlock_mux::Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let key = testkit::resource("late-noscript");
        let lock = client.lock(&key, ttl).unwrap();
        for a in c.addrs() {
            assert_eq!(redis(&a, &["SCRIPT", "FLUSH"]), Frame::Simple("OK".into()));
        }
        // Nodes 3 and 4 answer 100 ms late: the release is decided by nodes 0-2 first.
        for p in &proxies {
            p.set(Fault::Latency {
                fixed: Duration::from_millis(100),
                jitter: Duration::ZERO,
            });
        }
        client.unlock(&lock).unwrap();
        match how {
            "poll_idle" => {
                assert!(client.poll_idle(Duration::from_secs(10)), "still owed");
            }
            _ => drop(client),
        }
        testkit::wait_until(
            Duration::from_secs(10),
            &format!("the EVAL sent by {how} released the key on nodes 3 and 4"),
            || c.addrs().iter().all(|a| testkit::get(a, &key).is_none()),
        );
        for p in &proxies {
            p.set(Fault::Pass);
        }
    }
}

/// The blocking client's guard keeps the lock past several ttls with no runtime, and releases
/// it when dropped.
#[test]
fn a_blocking_guard_keeps_the_lock_alive_and_releases_on_drop() {
    let c = testkit::cluster(3);
    let client = testkit::builder(&c).build().unwrap();
    let key = testkit::resource("blocking-guard");
    let ttl = Duration::from_millis(600);
    let guard = client.lock_guarded(&key, ttl).unwrap();
    let token = guard.lock().token().as_str().to_string();
    let start = std::time::Instant::now();
    // Three ttls: without extensions the keys would be gone twice over.
    while start.elapsed() < ttl * 3 {
        assert!(!guard.is_lost(), "lost: {:?}", guard.loss());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(guard.extensions() >= 2, "{} extensions", guard.extensions());
    for a in c.addrs() {
        assert_eq!(
            testkit::get(&a, &key).as_deref(),
            Some(token.as_str()),
            "{a}"
        );
    }
    assert!(guard.validity() > Duration::ZERO);
    drop(guard);
    for a in c.addrs() {
        testkit::wait_until(Duration::from_secs(5), "the release on drop", || {
            testkit::get(&a, &key).is_none()
        });
    }
    // Several guards on one client share its keeper thread; release returns the outcome.
    let guards: Vec<_> = (0..4)
        .map(|i| {
            client
                .lock_guarded(&testkit::resource(&format!("many-guards{i}")), ttl)
                .unwrap()
        })
        .collect();
    std::thread::sleep(ttl * 2);
    for g in guards {
        assert!(!g.is_lost() && g.extensions() >= 1, "{:?}", g.loss());
        g.release().unwrap();
    }
}

/// As the async guard: an extension that cannot finish in time is loss, reported (and visible
/// through `is_lost`) before the validity ends; a limit reached too.
#[test]
fn a_blocking_guard_reports_loss_before_the_validity_ends() {
    use redlock_mux::{KeepAlive, Loss};
    use testkit::proxy::{in_front, latency, set_all, Fault};
    let c = testkit::cluster(3);
    let (proxies, addrs) = in_front(&c, 1..3);
    // 4 s: a loss margin of 200 ms, room for a loaded machine to schedule the report.
    let ttl = Duration::from_secs(4);
    let client = redlock_mux::Redlock::builder()
        .nodes(&addrs)
        .node_timeout(Duration::from_millis(150))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let key = testkit::resource("blocking-slow-keepalive");
    let guard = client
        .lock_guarded_with(&key, ttl, KeepAlive::default().extend_when_left(0.05))
        .unwrap();
    let valid_until = guard.lock().valid_until();
    set_all(&proxies, latency(Duration::from_millis(600)));
    let loss = guard.wait_lost(ttl * 3).expect("loss reported");
    let reported = std::time::Instant::now();
    assert!(
        reported < valid_until,
        "loss ({loss}) reported {:?} after the validity ended",
        reported - valid_until
    );
    assert!(guard.is_lost());
    set_all(&proxies, Fault::Pass);
    drop(guard);
    // A limit: one extension, then Expired, reported before the validity ends (a client on the
    // masters directly: the proxied connections still carry the slow replies).
    let client = testkit::builder(&c).build().unwrap();
    let ttl = Duration::from_millis(800);
    let guard = client
        .lock_guarded_with(
            &testkit::resource("blocking-limit"),
            ttl,
            KeepAlive::default().max_extensions(1),
        )
        .unwrap();
    let loss = guard.wait_lost(ttl * 10).expect("the limit reported");
    assert_eq!(loss, Loss::Expired);
    assert!(std::time::Instant::now() < guard.lock().valid_until());
    assert_eq!(guard.extensions(), 1);
    // A ttl an extension round cannot fit in is refused before anything is taken.
    assert!(matches!(
        client.lock_guarded(&key, Duration::from_millis(150)),
        Err(redlock_mux::Error::Config(
            redlock_mux::ConfigError::KeepAlive { .. }
        ))
    ));
}

/// `NodeStats::replies` counts the commands each master ran for the client, one per command
/// it sent, whatever a script does inside the server: a `SET NX`, a release and an
/// acquisition of two resources by script are one reply each, where the master's own
/// statistics count the calls inside the script as well.
#[test]
fn stats_count_one_reply_per_command_a_node_ran() {
    let c = testkit::cluster(3);
    let addrs = c.addrs();
    let client = testkit::builder(&c)
        .wakeups(false)
        .scripts(redlock_mux::Scripts::Eval)
        .build()
        .unwrap();
    let (a, b) = (
        testkit::resource("replies-a"),
        testkit::resource("replies-b"),
    );
    let ttl = Duration::from_secs(10);
    // Connections open, scripts loaded.
    let lock = client.lock_many(&[&a, &b], ttl).unwrap();
    client.unlock(&lock).unwrap();
    let replies = |client: &redlock_mux::Redlock| -> Vec<u64> {
        // A round decided by a quorum leaves the last node's reply to be read.
        assert!(
            client.poll_idle(Duration::from_secs(10)),
            "replies still owed"
        );
        client.stats().nodes.iter().map(|n| n.replies).collect()
    };
    let before = replies(&client);
    assert!(before.iter().all(|&n| n >= 2), "{before:?}");
    for addr in &addrs {
        redis(addr, &["CONFIG", "RESETSTAT"]);
    }
    let lock = client.try_lock(&a, ttl).unwrap();
    client.unlock(&lock).unwrap();
    let lock = client.lock_many(&[&a, &b], ttl).unwrap();
    client.unlock(&lock).unwrap();
    let after = replies(&client);
    for (i, addr) in addrs.iter().enumerate() {
        assert_eq!(after[i] - before[i], 4, "{addr}: {before:?} -> {after:?}");
        let scripts = calls(addr, "evalsha") + calls(addr, "eval");
        let sets = calls(addr, "set");
        assert_eq!(scripts, 3, "{addr}: three commands were scripts");
        assert_eq!(sets, 3, "{addr}: one SET NX, two inside the script");
    }
}

/// `stats()` never waits for a waiter's wait: a waiter that reads pushes in the driver gives it
/// up when asked, and one about to start reading them does not start while `stats()` wants the
/// driver. (helper-23 saw `stats()` blocked 16 s: it checked whether a waiter was reading
/// before taking the driver, and a waiter that started in between held it to its timer.) The
/// waiter here waits up to a minute; each `stats()` call wakes it, and it starts again at once,
/// so that the calls keep meeting it at that start.
#[test]
fn stats_never_waits_for_a_waiters_wait() {
    let c = testkit::cluster(3);
    let key = testkit::resource("stats-waiter");
    for a in c.addrs() {
        redis(&a, &["SET", &key, "x", "PX", "90000"]);
    }
    let client = testkit::builder(&c)
        .retry(1_000, Duration::from_secs(60))
        .build()
        .unwrap();
    std::thread::scope(|s| {
        let waiter =
            s.spawn(|| client.lock_within(&key, Duration::from_secs(5), Duration::from_secs(60)));
        testkit::wait_until(Duration::from_secs(10), "the waiter to read pushes", || {
            client.stats().nodes.iter().all(|n| n.invalidations == 0)
                && c.addrs().iter().all(|a| calls(a, "pttl") >= 1)
        });
        // The slowest of many calls: a call that waits for the waiter's timer takes a minute.
        let mut slowest = Duration::ZERO;
        for _ in 0..3000 {
            let t = std::time::Instant::now();
            let _ = client.stats();
            slowest = slowest.max(t.elapsed());
        }
        assert!(
            slowest < Duration::from_secs(20),
            "a stats() call took {slowest:?}"
        );
        for a in c.addrs() {
            redis(&a, &["DEL", &key]);
        }
        let l = waiter
            .join()
            .unwrap()
            .expect("granted once the key is gone");
        client.unlock(&l).unwrap();
    });
}
