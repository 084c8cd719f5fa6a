//! A hostile review of session 13's changes to fair mode, against real masters: the enter
//! script (a fair waiter's first try joins the line in the same call, `script::ENTER`), the
//! kept leave (a waiter that gives up while another waiter of its client waits for the
//! resource sends nothing, `Engine::leave_kept`), and the fenced enter's eviction guard. Each
//! test states the claim it holds the code to.

use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Error, Redlock};
use testkit::proxy::Fault;
use testkit::{cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(20);

/// How many of `addrs` hold `value` in `key` (read directly, not through any proxy).
fn holding(addrs: &[String], key: &str, value: &[u8]) -> usize {
    addrs
        .iter()
        .filter(|a| matches!(redis(a, &["GET", key]), Frame::Bulk(b) if b.as_ref() == value))
        .count()
}

/// The line key of `key`.
fn line(key: &str) -> String {
    format!("{}{key}", redlock_mux::script::QUEUE_PREFIX)
}

/// How many of `addrs` have `id` in the line of `key`.
fn in_line(addrs: &[String], key: &str, id: &str) -> usize {
    let q = line(key);
    addrs
        .iter()
        .filter(|a| matches!(redis(a, &["ZSCORE", &q, id]), Frame::Bulk(_)))
        .count()
}

/// Whether no master of `addrs` has `key` or a line for it.
fn all_gone(addrs: &[String], key: &str) -> bool {
    let q = line(key);
    addrs.iter().all(|a| {
        redis(a, &["EXISTS", key]) == Frame::Integer(0)
            && redis(a, &["EXISTS", &q]) == Frame::Integer(0)
    })
}

/// The options of a client on `nodes` (fair mode with client id `id` when `fair`).
fn options(
    nodes: &[String],
    fair: bool,
    id: &str,
    lease: Duration,
) -> redlock_mux::redlock_core::config::Options {
    redlock_mux::redlock_core::config::Options {
        nodes: nodes.to_vec(),
        // Generous: a busy machine's slow connect must not lose a master's vote.
        node_timeout: Duration::from_secs(2),
        tries: 10_000,
        retry_delay: Duration::from_millis(50),
        fair,
        client_id: if fair { id.to_string() } else { String::new() },
        claim_lease: lease,
        ..Default::default()
    }
}

/// A blocking client of [`options`].
fn client(nodes: &[String], fair: bool, id: &str, lease: Duration) -> Redlock {
    Redlock::with_config(options(nodes, fair, id, lease).validate().unwrap()).unwrap()
}

/// Claim (7b3f672, docs "What leaves the line"): a fair waiter that gives up while another
/// waiter of its client waits for the same resource leaves nothing: the client keeps its place
/// in every line, and the waiter still waiting is rung by the holder's release and has the
/// lock within two claim leases of it (not its timer's eight). Once it unlocks, nothing of
/// the line is left.
#[test]
fn a_waiter_that_gives_up_keeps_its_clients_place_for_the_other_waiter() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(500);
    let h = client(&addrs, true, "h", lease);
    let cl = client(&addrs, true, "c", lease);
    let key = resource("kept-leave");
    let held = h.lock(&key, TTL).unwrap();
    std::thread::scope(|s| {
        let a = s.spawn(|| {
            let l = cl
                .lock_within(&key, TTL, Duration::from_secs(30))
                .expect("A gets the lock");
            (l, Instant::now())
        });
        wait_until(Duration::from_secs(10), "A in line everywhere", || {
            in_line(&addrs, &key, "c") == 3
        });
        // B's first try is the enter script (it finds the client's place and keeps it), then
        // it waits and gives up.
        let b = cl.lock_within(&key, TTL, Duration::from_secs(1));
        assert!(matches!(b, Err(Error::Conflict { .. })), "{b:?}");
        assert_eq!(
            in_line(&addrs, &key, "c"),
            3,
            "B's give-up took A's shared place out of a line"
        );
        let released = Instant::now();
        h.unlock(&held).unwrap();
        let (l, at) = a.join().unwrap();
        let waited = at.saturating_duration_since(released);
        eprintln!("A granted {waited:?} after the release");
        assert!(waited < 2 * lease, "A waited {waited:?} for a free lock");
        cl.unlock(&l).unwrap();
    });
    wait_until(Duration::from_secs(10), "nothing left of the line", || {
        all_gone(&addrs, &key)
    });
}

/// Claim (docs "What leaves the line"): a client whose every waiter gives up leaves every
/// line, however close together they give up (the kept leave must not keep the last one's).
/// Several rounds: two, then three threads of one client, deadlines equal or a little apart;
/// after all have returned, the client is in no line (within a bound far below the line's
/// lease, which would otherwise be what takes it out).
#[test]
fn a_client_whose_every_waiter_gives_up_leaves_every_line() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(200);
    let h = client(&addrs, true, "h", lease);
    let cl = client(&addrs, true, "c", lease);
    let key = resource("all-give-up");
    let held = h.lock(&key, TTL).unwrap();
    let cases: [&[u64]; 5] = [
        &[600, 600],
        &[600, 700],
        &[700, 600, 600],
        &[600, 900, 1200],
        &[800, 800, 800],
    ];
    for deadlines in cases {
        std::thread::scope(|s| {
            let waiters: Vec<_> = deadlines
                .iter()
                .map(|&ms| {
                    let (cl, key) = (&cl, &key);
                    s.spawn(move || cl.lock_within(key, TTL, Duration::from_millis(ms)))
                })
                .collect();
            for w in waiters {
                let r = w.join().unwrap();
                assert!(matches!(r, Err(Error::Conflict { .. })), "{r:?}");
            }
        });
        wait_until(
            Duration::from_secs(5),
            &format!("client c out of every line after {deadlines:?}"),
            || in_line(&addrs, &key, "c") == 0,
        );
    }
    h.unlock(&held).unwrap();
    wait_until(Duration::from_secs(10), "nothing left of the line", || {
        all_gone(&addrs, &key)
    });
}

/// Claim (async client, docs "What leaves the line"): a dropped `lock_within` future leaves
/// the line, unless another task of the client waits for the resource: then the client keeps
/// its place, and that task is rung by the release (within two claim leases). With no other
/// task, the drop takes the client out of every line.
#[test]
fn a_dropped_async_waiter_keeps_the_place_only_for_another_task() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(500);
    let h = client(&addrs, true, "h", lease);
    let key = resource("async-drop");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cl = AsyncRedlock::with_config(options(&addrs, true, "c", lease).validate().unwrap())
            .unwrap();
        let held = h.lock(&key, TTL).unwrap();
        let a = {
            let (cl, key) = (cl.clone(), key.clone());
            tokio::spawn(async move {
                let l = cl
                    .lock_within(&key, TTL, Duration::from_secs(30))
                    .await
                    .expect("A gets the lock");
                (l, Instant::now())
            })
        };
        let start = Instant::now();
        while in_line(&addrs, &key, "c") < 3 {
            assert!(start.elapsed() < Duration::from_secs(10), "A never in line");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // B waits (its enter joined the client's place), then its future is dropped.
        let b = tokio::time::timeout(
            Duration::from_secs(1),
            cl.lock_within(&key, TTL, Duration::from_secs(30)),
        )
        .await;
        assert!(b.is_err(), "B's future timed out: {b:?}");
        // The drop's command is fire and forget: give it time to land (it should be none).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            in_line(&addrs, &key, "c"),
            3,
            "B's dropped future took A's shared place out of a line"
        );
        let released = Instant::now();
        h.unlock(&held).unwrap();
        let (l, at) = a.await.unwrap();
        let waited = at.saturating_duration_since(released);
        eprintln!("A granted {waited:?} after the release");
        assert!(waited < 2 * lease, "A waited {waited:?} for a free lock");
        cl.unlock(&l).await.unwrap();
        // Alone now: the drop leaves.
        let held = h.lock(&key, TTL).unwrap();
        let b = tokio::time::timeout(
            Duration::from_secs(1),
            cl.lock_within(&key, TTL, Duration::from_secs(30)),
        )
        .await;
        assert!(b.is_err(), "B's future timed out: {b:?}");
        let start = Instant::now();
        while in_line(&addrs, &key, "c") > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "a dropped lone waiter left its client in {} lines",
                in_line(&addrs, &key, "c")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        h.unlock(&held).unwrap();
    });
    wait_until(Duration::from_secs(10), "nothing left of the line", || {
        all_gone(&addrs, &key)
    });
}

/// The sequence of `a_sets_watch_does_not_keep_a_single_waiters_leave` (with `set`: M waits
/// for R and S) and its control (without). Returns, right after H's unlock, how many masters
/// reserve R for client C, and how long D took to be granted R after the unlock.
fn single_leave_beside(set: bool) -> (usize, Duration) {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_secs(1);
    let h = client(&addrs, true, "h", lease);
    let cl = client(&addrs, true, "c", lease);
    let d = client(&addrs, true, "d", lease);
    let (r, s_key) = (resource("set-watch-r"), resource("set-watch-s"));
    for a in &addrs {
        redis(a, &["SET", &s_key, "x", "PX", "60000"]);
    }
    let held = h.lock(&r, TTL).unwrap();
    let reserved_c = format!("{}c", redlock_mux::script::RESERVED_PREFIX);
    std::thread::scope(|s| {
        let b = s.spawn(|| cl.lock_within(&r, TTL, Duration::from_secs(3)));
        wait_until(Duration::from_secs(10), "B in line everywhere", || {
            in_line(&addrs, &r, "c") == 3
        });
        let dt = s.spawn(|| {
            let l = d.lock_within(&r, TTL, Duration::from_secs(30)).unwrap();
            (l, Instant::now())
        });
        wait_until(Duration::from_secs(10), "D in line everywhere", || {
            in_line(&addrs, &r, "d") == 3
        });
        let m = set
            .then(|| s.spawn(|| cl.lock_many_within(&[&r, &s_key], TTL, Duration::from_secs(15))));
        // M is refused at R and watches it (no line to see it by: give its try a moment).
        std::thread::sleep(Duration::from_millis(300));
        let gave_up = b.join().unwrap();
        assert!(
            matches!(gave_up, Err(Error::Conflict { .. })),
            "{gave_up:?}"
        );
        let kept = in_line(&addrs, &r, "c");
        let released = Instant::now();
        h.unlock(&held).unwrap();
        let rung_c = holding(&addrs, &r, reserved_c.as_bytes());
        let (l, at) = dt.join().unwrap();
        let waited = at.saturating_duration_since(released);
        eprintln!(
            "set={set}: C left in {kept} lines by B's give-up, R reserved for C on {rung_c} \
             masters after the release; D granted {waited:?} after it"
        );
        d.unlock(&l).unwrap();
        if let Some(m) = m {
            let _ = m.join().unwrap();
        }
        (rung_c, waited)
    })
}

/// Control of the attack below: without the set's waiter, B's give-up takes client C out of
/// R's line, and H's unlock rings D, which has R at once (within a claim lease).
#[test]
fn a_single_waiters_leave_lets_the_next_in_line_be_rung() {
    let (rung_c, waited) = single_leave_beside(false);
    assert_eq!(rung_c, 0, "R reserved for C, which no longer waits");
    assert!(waited < Duration::from_secs(1), "D waited {waited:?}");
}

/// Found in review (fair mode, 7b3f672, liveness): the engine keeps a single waiter's leave
/// whenever another watch of the client is on the resource, but a waiter for a set of
/// resources (`lock_many_within`) watches the key that refused it without standing in its
/// line (a set waits as before: docs "Waiting in line"). The sequence (three masters, claim
/// lease 1 s):
/// 1. H holds R; S is held by X (a plain key), so that R and S together are never free.
/// 2. B (client C) waits for R: C is first in R's line. D (another client) waits behind it.
/// 3. M (client C) waits for R and S: refused at R, it watches R (in no line).
/// 4. B gives up: `Engine::leave_kept` finds M's watch on R and sends nothing; C keeps the
///    head of R's line with no waiter in it.
/// 5. H unlocks R: the hand-off rings C (R reserved for C on every master), whose only waiter
///    of R, M, cannot claim (a set's try is `SET NX`, which the reservation refuses); the
///    reservation lapses a claim lease later, and D, the only waiter in line, has R only
///    after that (measured: about two claim leases; the control: milliseconds).
///
/// Claim held to: a waiter that gives up keeps its client's place only for another waiter of
/// the client in that line. The fix: count only fair watches (a waiter in the resource's
/// line: `Waiting::is_fair`) in `leave_kept` (and in `own_waiter`, which has the same test
/// for a release); e.g. register a set's watch with a mark the engine can see.
#[test]
#[ignore = "defect: a set's watch keeps a single waiter's leave (Engine::leave_kept); the next in line waits a claim lease or more"]
fn a_sets_watch_does_not_keep_a_single_waiters_leave() {
    let (rung_c, waited) = single_leave_beside(true);
    assert_eq!(
        rung_c, 0,
        "R reserved for C, whose only waiter cannot claim it"
    );
    assert!(waited < Duration::from_secs(1), "D waited {waited:?}");
}
