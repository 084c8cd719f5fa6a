//! A hostile review of session 12's changes to fair mode, against real masters: the claim that
//! takes a master from the token of the hand-off that woke it (`script::CLAIM`'s `ARGV[6]`),
//! spent bells, and the keeping release of a failed or abandoned try. Each test states the
//! claim it holds the code to.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Redlock};
use testkit::proxy::{set_all, Fault};
use testkit::review::{holding, in_line, options, violations, Tenure};
use testkit::{cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(20);

/// A blocking client on `nodes`, its client id given (fair mode only).
fn client(nodes: &[String], fair: bool, id: &str, lease: Duration, tries: u32) -> Redlock {
    Redlock::with_config(options(nodes, fair, id, lease, tries).validate().unwrap()).unwrap()
}

/// The sequence of `a_failed_unlock_then_an_extension_*`: holder H (its paths to masters
/// 2, 3, 4 through proxies) holds the resource, waiter W (direct paths) waits for it. H's
/// paths to 2, 3, 4 are cut (the proxies close every connection) and H unlocks: the release
/// lands on masters 0 and 1 only (and, in fair mode, rings W there with H's token as the tag),
/// and `unlock` answers `NoQuorum`. The paths heal and H extends its lock, which masters 2, 3
/// and 4 still hold with its token: a quorum, so the extension is confirmed. Returns the
/// violations: W granted the lock while H's extended lock is valid.
fn failed_unlock_then_extend(fair: bool) -> Vec<String> {
    let c = cluster(5);
    let direct = c.addrs();
    let (proxies, h_addrs) = testkit::proxy::in_front(&c, 2..5);
    // A long claim lease: W's bells (two of five masters) wake it only half a lease after
    // the first, which leaves H time to extend before W claims.
    let lease = Duration::from_secs(2);
    let h = client(&h_addrs, fair, "holder", lease, 1);
    let w = client(&direct, fair, "waiter", lease, 10_000);
    let key = resource(if fair { "cut-fair" } else { "cut-unfair" });
    let mut held = h.lock(&key, TTL).expect("H takes the free resource");
    let token = held.token().as_bytes().to_vec();
    // The sequence needs H's token on all five (a round decided at three may leave the last
    // two landing later; on a busy machine a path may even be slower than the node timeout).
    wait_until(Duration::from_secs(10), "H's token on every master", || {
        holding(&direct, &key, &token) == 5
    });
    let mut violations = Vec::new();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let r = w.lock_within(&key, TTL, Duration::from_secs(3) + lease);
            (r, Instant::now())
        });
        if fair {
            wait_until(
                Duration::from_secs(10),
                "W waits in line everywhere",
                || in_line(&direct, &key, "waiter") == 5,
            );
        } else {
            // W polls every 50 ms; a few polls refused.
            std::thread::sleep(Duration::from_millis(200));
        }
        set_all(&proxies, Fault::Drop);
        // The proxies close their connections within one poll (20 ms); until H's client has
        // seen them closed its release could still be written to them: either way it is lost.
        std::thread::sleep(Duration::from_millis(100));
        let unlocked = h.unlock(&held);
        assert!(unlocked.is_err(), "the release reached only two masters");
        assert_eq!(
            holding(&direct, &key, &token),
            3,
            "2, 3, 4 still hold H's token"
        );
        set_all(&proxies, Fault::Pass);
        // H keeps its lock: it still holds a quorum. Tries until its connections are back.
        let start = Instant::now();
        let mut extended = None;
        while start.elapsed() < lease / 2 {
            match h.extend(&mut held, TTL) {
                Ok(()) => {
                    extended = Some(Instant::now());
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let (got, at) = waiter.join().unwrap();
        if let (Some(ext), Ok(l)) = (extended, &got) {
            if !held.is_expired_at(at) {
                violations.push(format!(
                    "W granted {:?} after H's extension confirmed at +{:?} (H valid {:?} more); \
                     masters holding W's token: {}, H's: {}",
                    at.saturating_duration_since(start),
                    ext.saturating_duration_since(start),
                    held.validity_at(at),
                    holding(&direct, &key, l.token().as_bytes()),
                    holding(&direct, &key, &token),
                ));
            }
        }
        if extended.is_none() {
            eprintln!("(H's extension did not get in before W's claim: nothing shown)");
        }
        if let Ok(l) = got {
            let _ = w.unlock(&l);
        }
    });
    violations
}

/// Control (fair off): a holder whose release reached two masters of five keeps a quorum, and
/// its extension after the failed `unlock` keeps the lock; nobody else takes it meanwhile.
#[test]
fn a_failed_unlock_then_an_extension_keeps_the_lock_without_fair_mode() {
    let v = failed_unlock_then_extend(false);
    assert!(v.is_empty(), "{v:?}");
}

/// Found in review (fair mode, 32008eb; fixed): a release that landed on a minority of
/// masters handed the lock over, whatever the holder did next. The sequence (five masters):
/// 1. H holds the resource with token T on all five; W waits in line.
/// 2. H unlocks; its paths to masters 2, 3, 4 are cut. The hand-off lands on 0 and 1 (T
///    deleted, the resource reserved for W, W rung with tag T there); `unlock` answers
///    `NoQuorum`. Masters 2, 3, 4 still hold T: H's lock still has a quorum, and
///    `Lock::is_expired` says it is valid.
/// 3. The paths heal; H extends its lock: 2, 3, 4 run the `PEXPIRE` (T is theirs), a quorum,
///    and `extend` answers `Ok`: H holds the lock for another ttl.
/// 4. Half a claim lease after its first bell, W (two bells, fewer than a quorum) is woken
///    anyway and claims naming tag T: 0 and 1 are reserved for it, and 2, 3, 4 hold T, the
///    tag, so the claim takes all five. W is granted the lock: two holders within validity.
///
/// Without fair mode the same sequence keeps H the only holder (the control above): W can
/// take 0 and 1 only. The safety argument of 32008eb ("that token's holder is releasing")
/// holds only while a failed release is the end of the lock; the API gives the lock back
/// after a failed `unlock`, valid and extendable. The fix: a claim names a hand-off only when
/// a quorum of masters rang it (its token then gone from a quorum, so that no extension of
/// it can succeed again); W, woken by two bells, now takes 0 and 1 only and fails.
#[test]
fn a_failed_unlock_then_an_extension_keeps_the_lock_in_fair_mode() {
    let v = failed_unlock_then_extend(true);
    assert!(v.is_empty(), "two holders: {v:?}");
}

/// How long a fair waiter of `waiter` takes to get the lock once `holder` unlocks it (the
/// waiter in line everywhere first, its client id `id`).
fn hand_off_time(
    addrs: &[String],
    holder: &Redlock,
    waiter: &Redlock,
    id: &str,
    key: &str,
) -> Duration {
    let held = holder.lock(key, TTL).unwrap();
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let l = waiter
                .lock_within(key, TTL, Duration::from_secs(30))
                .expect("the waiter gets the lock");
            (l, Instant::now())
        });
        wait_until(
            Duration::from_secs(10),
            "the waiter is in line everywhere",
            || in_line(addrs, key, id) == addrs.len(),
        );
        let released = Instant::now();
        holder.unlock(&held).unwrap();
        let (l, at) = w.join().unwrap();
        waiter.unlock(&l).unwrap();
        at.saturating_duration_since(released)
    })
}

/// Found in review (fair mode, liveness; fixed): a client's waiters share one place, and a
/// release proper takes its client out of the lines. A thread that unlocked while another
/// thread of the same client waited in line took that waiter's place too: nobody was rung,
/// the resource was free, and the waiter sat until its timer (eight claim leases: 4 s here)
/// instead of taking the lock at once as a waiter of another client does. Now the release
/// keeps the client's place and wakes its waiter. Measured against a waiter of
/// another client in the same run; the waiter must get the lock within two claim leases.
#[test]
fn a_waiter_of_the_releasing_client_is_not_left_waiting() {
    let c = cluster(3);
    let lease = Duration::from_millis(500);
    let one = client(&c.addrs(), true, "one", lease, 10_000);
    let other = client(&c.addrs(), true, "other", lease, 10_000);
    let key = resource("own-client");
    let across = hand_off_time(&c.addrs(), &one, &other, "other", &key);
    let within = hand_off_time(&c.addrs(), &one, &one, "one", &key);
    eprintln!("hand-off to another client {across:?}, to the same client {within:?}");
    assert!(
        within < 2 * lease,
        "the same client's waiter waited {within:?} for a free lock (another client's: {across:?})"
    );
}

/// Attack on the hand-off tag (fair mode, 32008eb) and the keeping release (8de994d,
/// c8d4d0b) for two holders: fair blocking clients (two sharing one client id), a fair async
/// client and an unfair client, fenced, contend for one resource on five masters. Each client
/// reaches masters 2, 3 and 4 through its own proxies, which close its connections in short
/// bursts (releases, claims and tries that land on some masters only: hand-offs rung from a
/// minority, claims taking masters from the tag's token, failed tries cleaned up by the
/// keeping release), and master 2 is paused for a while (a release and a claim queued there
/// together run in either order). Holders extend now and then, and stop using a lock whose
/// `unlock` failed. No two tenures overlap, fencing tokens increase in their order, and every
/// client gets the lock every round.
#[test]
fn fair_hand_offs_under_cut_paths_never_give_two_holders() {
    const ROUNDS: usize = 25;
    const TTL: Duration = Duration::from_secs(2);
    let mut c = cluster(5);
    let lease = Duration::from_millis(100);
    let named: [(&'static str, bool, &str); 4] = [
        ("fair-a", true, "same"),
        ("fair-b", true, "same"),
        ("fair-c", true, "c"),
        ("unfair-e", false, ""),
    ];
    let mut all_proxies = Vec::new();
    let mut clients = Vec::new();
    for (who, fair, id) in named {
        let (proxies, addrs) = testkit::proxy::in_front(&c, 2..5);
        let mut o = options(&addrs, fair, id, lease, 10_000);
        o.fencing = true;
        clients.push((who, Redlock::with_config(o.validate().unwrap()).unwrap()));
        all_proxies.push(proxies);
    }
    let (async_proxies, async_addrs) = testkit::proxy::in_front(&c, 2..5);
    all_proxies.push(async_proxies);
    let key = resource("cut-paths");
    let tenures = Mutex::new(Vec::<Tenure>::new());
    let failures = Mutex::new(Vec::<String>::new());
    let stop = AtomicBool::new(false);
    let cut = std::sync::atomic::AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for (who, client) in &clients {
            let (key, tenures, failures, cut) = (&key, &tenures, &failures, &cut);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let mut l = match client.lock_within(key, TTL, Duration::from_secs(30)) {
                        Ok(l) => l,
                        Err(e) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("{who}: gave up: {e}"));
                            return;
                        }
                    };
                    let t = Tenure::of(who, &l, Instant::now());
                    std::thread::sleep(Duration::from_millis(3));
                    if round % 3 == 0 {
                        let _ = client.extend(&mut l, TTL);
                    }
                    let t = t.end(Instant::now(), &l);
                    tenures.lock().unwrap().push(t);
                    if client.unlock(&l).is_err() {
                        cut.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        {
            let (key, tenures, failures, addrs, cut) =
                (&key, &tenures, &failures, &async_addrs, &cut);
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let mut o = options(addrs, true, "d", lease, 10_000);
                    o.fencing = true;
                    let client = AsyncRedlock::with_config(o.validate().unwrap()).unwrap();
                    for round in 0..ROUNDS {
                        let lw = client.lock_within(key, TTL, Duration::from_secs(30));
                        let mut l = match lw.await {
                            Ok(l) => l,
                            Err(e) => {
                                failures
                                    .lock()
                                    .unwrap()
                                    .push(format!("async-d: gave up: {e}"));
                                return;
                            }
                        };
                        let t = Tenure::of("async-d", &l, Instant::now());
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        if round % 3 == 0 {
                            let _ = client.extend(&mut l, TTL).await;
                        }
                        let t = t.end(Instant::now(), &l);
                        tenures.lock().unwrap().push(t);
                        if client.unlock(&l).await.is_err() {
                            cut.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            });
        }
        // Cuts: one client's paths to 2, 3, 4 closed for a moment, client after client, until
        // every client is done (bounded by the clients' own deadlines).
        let cutter = s.spawn(|| {
            let mut i = 0usize;
            while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(120) {
                let p = &all_proxies[i % all_proxies.len()];
                set_all(p, Fault::Drop);
                std::thread::sleep(Duration::from_millis(20 + (i as u64 * 7) % 40));
                set_all(p, Fault::Pass);
                std::thread::sleep(Duration::from_millis(5 + (i as u64 * 13) % 20));
                i += 1;
            }
        });
        std::thread::sleep(Duration::from_millis(400));
        c.server(2).pause().unwrap();
        std::thread::sleep(Duration::from_millis(600));
        c.server(2).resume().unwrap();
        // The clients' threads end on their own; the cutter once they have.
        wait_until(Duration::from_secs(150), "every client's rounds", || {
            tenures.lock().unwrap().len() + failures.lock().unwrap().len() >= 5 * ROUNDS
                || !failures.lock().unwrap().is_empty()
        });
        stop.store(true, Ordering::SeqCst);
        cutter.join().unwrap();
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    let tenures = tenures.into_inner().unwrap();
    assert_eq!(tenures.len(), 5 * ROUNDS);
    let v = violations(tenures);
    assert!(
        v.is_empty(),
        "{} violations: {:?}",
        v.len(),
        &v[..v.len().min(10)]
    );
    eprintln!(
        "done in {:?}, {} unlocks failed",
        started.elapsed(),
        cut.load(Ordering::SeqCst)
    );
}

/// Attack on the keeping release of a failed first try (fair mode, 8de994d): a holder X has
/// the resource on masters 2, 3, 4 only (its keys on 0 and 1 lost), W waits in line, and a
/// second thread of client N waits behind it. N's first try wins 0 and 1 and is refused by
/// the others; its cleanup hands 0 and 1 to the line's head (W) without taking N out of the
/// line. Then: N holds nothing anywhere and keeps its place (its waiter is still in line on
/// every master); W's claims fail while X holds 2, 3, 4 and W gets the lock once X's keys
/// expire; N's waiter gets it once W unlocks, within two claim leases; nothing of the line
/// is left after.
#[test]
fn a_failed_fair_try_leaves_no_holder_and_strands_no_waiter() {
    let c = cluster(5);
    let addrs = c.addrs();
    let lease = Duration::from_millis(500);
    let w = client(&addrs, true, "w", lease, 10_000);
    let n = client(&addrs, true, "n", lease, 10_000);
    let key = resource("failed-try");
    let x_ttl = Duration::from_millis(2500);
    // X's keys go no earlier than this.
    let planted = Instant::now();
    for a in &addrs[2..] {
        redis(a, &["SET", &key, "x", "PX", &x_ttl.as_millis().to_string()]);
    }
    std::thread::scope(|s| {
        let wt = s.spawn(|| {
            let l = w.lock_within(&key, TTL, Duration::from_secs(30)).unwrap();
            (l, Instant::now())
        });
        wait_until(Duration::from_secs(10), "W in line everywhere", || {
            in_line(&addrs, &key, "w") == 5
        });
        let nt = s.spawn(|| {
            let l = n.lock_within(&key, TTL, Duration::from_secs(30)).unwrap();
            (l, Instant::now())
        });
        wait_until(
            Duration::from_secs(10),
            "N's waiter in line everywhere",
            || in_line(&addrs, &key, "n") == 5,
        );
        let tried = n.try_lock(&key, TTL);
        assert!(tried.is_err(), "X holds three masters: {tried:?}");
        assert_eq!(
            in_line(&addrs, &key, "n"),
            5,
            "N's failed try took its waiter out"
        );
        // N's token is nowhere (a claim of W's may hold 0 and 1 for a moment, its own
        // cleanup then puts the reservation back).
        let reserved_w = format!("{}w", redlock_mux::script::RESERVED_PREFIX);
        wait_until(
            Duration::from_secs(10),
            "no master holds N's try's token",
            || {
                addrs.iter().all(|a| match redis(a, &["GET", &key]) {
                    Frame::Null => true,
                    Frame::Bulk(b) => b.as_ref() == b"x" || b.as_ref() == reserved_w.as_bytes(),
                    _ => false,
                })
            },
        );
        let (wl, w_at) = wt.join().unwrap();
        let x_gone = planted + x_ttl;
        assert!(w_at >= x_gone, "W granted while X held three masters");
        eprintln!("W granted {:?} after X's keys expired", w_at - x_gone);
        assert!(
            w_at - x_gone < 8 * lease + 2 * lease,
            "W waited {:?} past X's expiry",
            w_at - x_gone
        );
        let released = Instant::now();
        w.unlock(&wl).unwrap();
        let (nl, n_at) = nt.join().unwrap();
        let waited = n_at.saturating_duration_since(released);
        eprintln!("N's waiter granted {waited:?} after W's unlock");
        assert!(
            waited < 2 * lease,
            "N's waiter waited {waited:?} for the lock"
        );
        n.unlock(&nl).unwrap();
    });
    let q = format!("{}{key}", redlock_mux::script::QUEUE_PREFIX);
    wait_until(
        Duration::from_secs(10),
        "the resource and its line are gone",
        || {
            addrs.iter().all(|a| {
                redis(a, &["EXISTS", &key]) == Frame::Integer(0)
                    && redis(a, &["ZCARD", &q]) == Frame::Integer(0)
            })
        },
    );
}
