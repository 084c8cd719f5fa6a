//! A hostile review of session 13's changes to fair mode, against real masters: the enter
//! script (a fair waiter's first try joins the line in the same call, `script::ENTER`), the
//! kept leave (a waiter that gives up while another waiter of its client waits for the
//! resource sends nothing, `Engine::leave_kept`), and the fenced enter's eviction guard. Each
//! test states the claim it holds the code to.

use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Error, Redlock};
use testkit::proxy::{Fault, Proxy};
use testkit::review::{client, holding, in_line, line, options, violations, Tenure};
use testkit::{cluster, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(20);

/// Whether no master of `addrs` has `key` or a line for it.
fn all_gone(addrs: &[String], key: &str) -> bool {
    let q = line(key);
    addrs.iter().all(|a| {
        redis(a, &["EXISTS", key]) == Frame::Integer(0)
            && redis(a, &["EXISTS", &q]) == Frame::Integer(0)
    })
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
        let cl = AsyncRedlock::with_config(
            options(&addrs, true, "c", lease, 10_000)
                .validate()
                .unwrap(),
        )
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

/// The sequence of `a_set_in_the_line_keeps_its_clients_place_and_is_served_from_it` (with
/// `set`: M waits for R and S) and its control (without). S is held by a plain key for 3 s.
/// Returns, right after H's unlock, how many masters reserve R for client C; how long D took
/// to be granted R after the unlock; and (with `set`) how long M took after the unlock, and
/// how long D took after M let go.
fn single_leave_beside(set: bool) -> (usize, Duration, Option<(Duration, Duration)>) {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_secs(1);
    let h = client(&addrs, true, "h", lease);
    let cl = client(&addrs, true, "c", lease);
    let d = client(&addrs, true, "d", lease);
    let (r, s_key) = (resource("set-watch-r"), resource("set-watch-s"));
    let planted = Instant::now();
    for a in &addrs {
        redis(a, &["SET", &s_key, "x", "PX", "3000"]);
    }
    let held = h.lock(&r, TTL).unwrap();
    let reserved_c = format!("{}c", redlock_mux::script::RESERVED_PREFIX);
    std::thread::scope(|s| {
        let b = s.spawn(|| cl.lock_within(&r, TTL, Duration::from_secs(1)));
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
        let m = set.then(|| {
            s.spawn(|| {
                let l = cl.lock_many_within(&[&r, &s_key], TTL, Duration::from_secs(15));
                (l, Instant::now())
            })
        });
        if set {
            wait_until(Duration::from_secs(10), "M in S's line everywhere", || {
                in_line(&addrs, &s_key, "c") == 3
            });
        }
        let gave_up = b.join().unwrap();
        assert!(
            matches!(gave_up, Err(Error::Conflict { .. })),
            "{gave_up:?}"
        );
        assert!(
            planted.elapsed() < Duration::from_millis(2900),
            "the machine was too slow for the sequence: S's key expired before H's unlock"
        );
        let kept = in_line(&addrs, &r, "c");
        let released = Instant::now();
        h.unlock(&held).unwrap();
        let rung_c = holding(&addrs, &r, reserved_c.as_bytes());
        let m = m.map(|m| {
            let (l, at) = m.join().unwrap();
            let l = l.expect("M once S's key expires");
            let let_go = Instant::now();
            cl.unlock(&l).unwrap();
            (at.saturating_duration_since(released), let_go)
        });
        let (l, at) = dt.join().unwrap();
        let waited = at.saturating_duration_since(released);
        eprintln!(
            "set={set}: C left in {kept} lines by B's give-up, R reserved for C on {rung_c} \
             masters after the release; D granted {waited:?} after it; M: {m:?}"
        );
        d.unlock(&l).unwrap();
        (
            rung_c,
            waited,
            m.map(|(m_waited, let_go)| (m_waited, at.saturating_duration_since(let_go))),
        )
    })
}

/// Control of the sequence below: without the set's waiter, B's give-up takes client C out of
/// R's line, and H's unlock rings D, which has R at once (within a claim lease).
#[test]
fn a_single_waiters_leave_lets_the_next_in_line_be_rung() {
    let (rung_c, waited, _) = single_leave_beside(false);
    assert_eq!(rung_c, 0, "R reserved for C, which no longer waits");
    assert!(waited < Duration::from_secs(1), "D waited {waited:?}");
}

/// Found in review of session 13 (fair mode, 7b3f672, liveness), when a set stood in no line:
/// a single waiter's leave was kept for a set's waiter of the same client, whose watch was on
/// the resource, so that the client kept the head of R's line with no waiter that could claim
/// it, and D waited two claim leases. Since session 18 a set stands in the lines of its
/// resources (docs "Sets and the line"), and the sequence (three masters, claim lease 1 s)
/// goes:
/// 1. H holds R; S is held by a plain key for 3 s.
/// 2. B (client C) waits for R: C is first in R's line. D (another client) waits behind it.
/// 3. M (client C) waits for R and S: it joins S's line, and R's, where it shares C's place.
/// 4. B gives up: `Engine::leave_kept` finds M in R's line and sends nothing: C keeps the
///    head of R's line, for M.
/// 5. H unlocks R: the hand-off rings C (R reserved for C on every master), M is woken, its
///    claim is refused at S, and heading both lines it keeps R, renewed, until S's key
///    expires; then it has both.
/// 6. M lets go: D, next in R's line, has R within a claim lease.
///
/// Claims held to: a waiter that gives up keeps its client's place for another waiter of the
/// client in that line, a set's included, and the set is served from it (never starved) while
/// the waiter behind it waits its turn, not its timer.
#[test]
fn a_set_in_the_line_keeps_its_clients_place_and_is_served_from_it() {
    let (rung_c, waited, m) = single_leave_beside(true);
    let (m_waited, d_after_m) = m.expect("the set's timings");
    assert_eq!(rung_c, 3, "R reserved for C, whose set waits for it");
    assert!(
        m_waited < Duration::from_secs(6),
        "M waited {m_waited:?} after the unlock (S's key expires within 3 s)"
    );
    assert!(
        d_after_m < Duration::from_secs(1) && waited > m_waited,
        "D granted {waited:?} after the unlock, {d_after_m:?} after M let go"
    );
}

/// The fencing counter `key` on each of `addrs` (`None` where it does not exist).
fn counters(addrs: &[String], key: &str) -> Vec<Option<u64>> {
    addrs
        .iter()
        .map(|a| match redis(a, &["GET", key]) {
            Frame::Bulk(b) => std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok()),
            _ => None,
        })
        .collect()
}

/// Claims (session 13, the enter script; docs "Fencing"): a fenced fair waiter's first try
/// whose vote splits (the resource free on one master, held on the two others) takes nothing
/// for good: the master that took it gives it back (nothing but the holder's keys, or a
/// reservation, is left there), the counter is incremented only where the `SET` took (a
/// refused enter joins the line and leaves the counter alone), the waiter is in line on every
/// master, and it is granted the lock once the holder's keys expire, by a quorum of masters
/// that hold its own token, with a fencing token larger than a quorum's counters before it.
#[test]
fn a_split_fenced_enter_gives_back_what_it_took_and_counts_only_what_it_set() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let fence_key = "review13:fence";
    let mut o = options(&addrs, true, "c", lease, 10_000);
    o.fencing = true;
    o.fencing_key = fence_key.to_string();
    let cl = Redlock::with_config(o.validate().unwrap()).unwrap();
    let key = resource("split-enter");
    let x_ttl = Duration::from_millis(2500);
    let planted = Instant::now();
    for a in &addrs[1..] {
        redis(a, &["SET", &key, "x", "PX", &x_ttl.as_millis().to_string()]);
    }
    let reserved_c = format!("{}c", redlock_mux::script::RESERVED_PREFIX);
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let l = cl.lock_within(&key, TTL, Duration::from_secs(30)).unwrap();
            (l, Instant::now())
        });
        wait_until(Duration::from_secs(10), "C in line everywhere", || {
            in_line(&addrs, &key, "c") == 3
        });
        // Master 0's enter took the key, the vote was lost: given back (deleted, or reserved
        // for the line's head, C itself).
        wait_until(
            Duration::from_secs(10),
            "the lost try's token given back on master 0",
            || match redis(&addrs[0], &["GET", &key]) {
                Frame::Null => true,
                Frame::Bulk(b) => b.as_ref() == reserved_c.as_bytes(),
                _ => false,
            },
        );
        let before = counters(&addrs, fence_key);
        if Instant::now() < planted + x_ttl {
            assert_eq!(
                before,
                vec![Some(1), None, None],
                "the enter counts only where its SET took"
            );
        }
        let (l, at) = t.join().unwrap();
        assert!(at >= planted + x_ttl, "granted while X held two of three");
        assert!(
            holding(&addrs, &key, l.token().as_bytes()) >= 2,
            "granted without a quorum of its own token"
        );
        let fence = l.fencing_token().expect("fenced");
        // Above what a quorum of masters counted before: the claim is decided by a quorum, so
        // master 0 (whose count the lost try raised, a value no lock was granted with) may not
        // be among its yeses (1 run in 5 on a busy machine).
        let mut counted: Vec<u64> = before.iter().map(|c| c.unwrap_or(0)).collect();
        counted.sort_unstable();
        assert!(
            counted[counted.len() / 2] < fence,
            "fence {fence} not above a quorum's counters {before:?}"
        );
        cl.unlock(&l).unwrap();
        let again = cl.lock(&key, TTL).unwrap();
        assert!(again.fencing_token().unwrap() > fence, "tokens increase");
        cl.unlock(&again).unwrap();
    });
    wait_until(Duration::from_secs(10), "nothing left of the line", || {
        all_gone(&addrs, &key)
    });
}

/// Claim (the eviction guard, docs "Fencing"; session 13: the fenced enter goes through it):
/// a master whose `maxmemory-policy` may evict the counter gives no fenced vote, the enter's
/// included. All three masters `allkeys-lru`: a fair fenced client's `lock` of a free
/// resource (the enter takes it everywhere) is refused with the fencing fault, and leaves no
/// key and no line behind; one master `allkeys-lru`: granted by the two others.
#[test]
fn a_fenced_enter_on_an_evicting_master_is_not_a_vote() {
    let c = cluster(3);
    let addrs = c.addrs();
    for a in &addrs {
        redis(a, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    }
    let lease = Duration::from_millis(300);
    let mut o = options(&addrs, true, "c", lease, 10_000);
    o.fencing = true;
    o.tries = 3;
    let cl = Redlock::with_config(o.clone().validate().unwrap()).unwrap();
    let key = resource("evicting-enter");
    let r = cl.lock(&key, TTL);
    match &r {
        Err(Error::NoQuorum { nodes }) => {
            assert!(nodes.to_string().contains("maxmemory"), "{nodes}")
        }
        other => panic!("granted or refused otherwise: {other:?}"),
    }
    wait_until(Duration::from_secs(10), "no key or line left", || {
        all_gone(&addrs, &key)
    });
    // One evicting master of three: the two others grant it.
    for a in &addrs[1..] {
        redis(a, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    }
    let cl = Redlock::with_config(o.validate().unwrap()).unwrap();
    let l = cl.lock(&key, TTL).expect("two masters keep the counter");
    assert!(l.fencing_token().is_some());
    cl.unlock(&l).unwrap();
}

/// Claim (session 13: `forms::takes_keys` includes the enter): a `SCRIPT FLUSH` on every
/// master between two acquisitions costs nothing: the enter answered `NOSCRIPT` goes again as
/// `EVAL` while its round waits, on a free resource (granted at once, its token on a quorum
/// of masters) and on a held one (the waiter joins the line on every master, and has the lock
/// once the holder's keys expire).
#[test]
fn a_script_flush_before_the_enter_is_resent_as_eval() {
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(300);
    let cl = client(&addrs, true, "c", lease);
    // Scripts loaded on every connection first.
    let warm = resource("flush-warm");
    let l = cl.lock(&warm, TTL).unwrap();
    cl.unlock(&l).unwrap();
    let flush = |addrs: &[String]| {
        for a in addrs {
            assert_eq!(redis(a, &["SCRIPT", "FLUSH"]), Frame::Simple("OK".into()));
        }
    };
    let free = resource("flush-free");
    flush(&addrs);
    let l = cl.lock(&free, TTL).expect("the free resource");
    // A quorum: the round is decided by the first two yeses, and a master whose `NOSCRIPT`
    // is read after that is not asked again (its vote no longer counts; 3 of 6 runs).
    assert!(holding(&addrs, &free, l.token().as_bytes()) >= 2);
    cl.unlock(&l).unwrap();
    let held = resource("flush-held");
    let x_ttl = Duration::from_millis(2000);
    for a in &addrs {
        redis(
            a,
            &["SET", &held, "x", "PX", &x_ttl.as_millis().to_string()],
        );
    }
    let planted = Instant::now();
    flush(&addrs);
    std::thread::scope(|s| {
        let t = s.spawn(|| cl.lock_within(&held, TTL, Duration::from_secs(30)));
        wait_until(Duration::from_secs(10), "C in line everywhere", || {
            in_line(&addrs, &held, "c") == 3 || t.is_finished()
        });
        let l = t.join().unwrap().expect("granted once X's keys expire");
        assert!(Instant::now() >= planted + x_ttl);
        assert!(holding(&addrs, &held, l.token().as_bytes()) >= 2);
        cl.unlock(&l).unwrap();
    });
    let fallbacks: u64 = cl.stats().nodes.iter().map(|n| n.noscript_fallbacks).sum();
    eprintln!("script fallbacks: {fallbacks}");
    assert!(fallbacks >= 3, "the flushes were seen");
    wait_until(Duration::from_secs(10), "nothing left", || {
        all_gone(&addrs, &held) && all_gone(&addrs, &free)
    });
}

/// What happens in fair mode to an ACL user without channel access (Redis 7's default for a
/// new user, `acl-pubsub-default resetchannels`): every holder's `unlock` and the waiter's
/// grant, against a holder's ttl of `h_ttl`. Returns H's unlock result, what the masters hold
/// right after it (H's token on how many), and when W was granted after the unlock.
fn channel_less_hand_off(h_ttl: Duration) -> (Result<(), Error>, usize, Duration) {
    let c = cluster(3);
    let addrs = c.addrs();
    for a in &addrs {
        let args = [
            "ACL",
            "SETUSER",
            "nochan",
            "on",
            ">pw",
            "~*",
            "+@all",
            "resetchannels",
        ];
        assert_eq!(redis(a, &args), Frame::Simple("OK".into()));
    }
    let nodes: Vec<String> = c
        .servers()
        .iter()
        .map(|s| format!("redis://nochan:pw@127.0.0.1:{}", s.port()))
        .collect();
    let lease = Duration::from_millis(300);
    let h = client(&nodes, true, "h", lease);
    let w = client(&nodes, true, "w", lease);
    let key = resource("nochan");
    let held = h.lock(&key, h_ttl).unwrap();
    let token = held.token().as_bytes().to_vec();
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let l = w.lock_within(&key, TTL, Duration::from_secs(30)).unwrap();
            (l, Instant::now())
        });
        wait_until(Duration::from_secs(10), "W in line everywhere", || {
            in_line(&addrs, &key, "w") == 3
        });
        let released = Instant::now();
        let unlocked = h.unlock(&held);
        let still = holding(&addrs, &key, &token);
        let (l, at) = t.join().unwrap();
        let waited = at.saturating_duration_since(released);
        eprintln!(
            "unlock: {unlocked:?}; H's token still on {still} masters; W granted {waited:?} \
             after the unlock (H's ttl {h_ttl:?}); H's stats: {:?}",
            h.stats()
                .nodes
                .iter()
                .map(|n| (n.ok, n.server_errors))
                .collect::<Vec<_>>()
        );
        w.unlock(&l).unwrap();
        (unlocked, still, waited)
    })
}

/// Found in review (fair mode, an existing weakness, not session 13's: the hand-off script
/// predates it; the enter script never publishes): under an ACL user without channel access
/// (`ACL SETUSER u on >pw ~* +@all resetchannels`, which is what Redis 7 gives a new user
/// unless `acl-pubsub-default` says otherwise), the subscription to the bell is refused (the
/// waiters' timers run instead, as the connection code says), but the release of a fair
/// client is the hand-off script, whose `PUBLISH` to the line's head is refused by the ACL
/// inside the script (Redis 7.0: `ERR The user executing the script can't publish to the
/// channel mentioned in the command`): the script fails before it deletes the key. So
/// every `unlock` with a waiter in line fails (`NoQuorum`, each master's report that error),
/// the holder's token stays on every master, and the waiter gets the lock only once the
/// holder's ttl runs out (measured: 6.0 s after the unlock, H's ttl 6 s).
/// Without waiters nothing is published, and `unlock` succeeds.
///
/// Claims held to: `unlock` releases (docs: "A release runs the hand-off script: it deletes
/// the key as the plain release does"), and the waiter in line has the lock soon after (well
/// within the holder's ttl). Fixed (session 14): the ring publishes with `redis.pcall` and
/// takes a refusal as a bell that reached nobody (the head leaves the line, the key is
/// deleted, and the waiter, whose own `SUBSCRIBE` was refused, wakes on its timer: at most
/// eight claim leases, 2.4 s here, after it started waiting).
#[test]
fn a_channel_less_acl_user_unlocks_in_fair_mode() {
    let h_ttl = Duration::from_secs(6);
    let (unlocked, still, waited) = channel_less_hand_off(h_ttl);
    assert!(unlocked.is_ok(), "unlock refused: {unlocked:?}");
    assert_eq!(still, 0, "H's token left on {still} masters by its unlock");
    assert!(
        waited < h_ttl / 2,
        "W waited {waited:?}: H's ttl, not the hand-off"
    );
}

/// Claims (session 13, the enter script, against a blackholed master): a fair waiter's first
/// try whose round is lost while one master's path holds its enter (the bytes wait in the
/// kernel, as over a path that drops every packet) counts only the masters that took the
/// resource as votes, gives back what it took, and when the path heals, the late enter (which
/// may `SET` the key with the lost try's token) is given back too: the waiter is granted the
/// lock only by a quorum of its own token, and once it unlocks nothing is left on any master
/// well before the lost try's ttl would have cleared it. The sequence: three masters, master 2
/// behind a proxy; X holds master 1 for 3 s; the proxy blackholes; C enters (master 0 takes
/// it, master 1 joins, master 2 holds the bytes: the round is lost at the node timeout); the
/// path heals 1.5 s later; C has the lock after that (from masters 0 and 2, or all three once
/// X's key expires), never before (master 0 alone is no quorum).
#[test]
fn a_late_enter_from_a_healed_path_is_given_back() {
    let c = cluster(3);
    let addrs = c.addrs();
    let proxy = Proxy::start(c.servers()[2].addr());
    let mut nodes = addrs.clone();
    nodes[2] = proxy.addr();
    let lease = Duration::from_millis(300);
    let mut o = options(&nodes, true, "c", lease, 10_000);
    o.node_timeout = Duration::from_secs(1);
    let cl = Redlock::with_config(o.validate().unwrap()).unwrap();
    // Connections open first (a blackholed connect would only fail the node).
    let warm = resource("late-warm");
    let l = cl.lock(&warm, TTL).unwrap();
    cl.unlock(&l).unwrap();
    let key = resource("late-enter");
    let x_ttl = Duration::from_millis(3000);
    redis(
        &addrs[1],
        &["SET", &key, "x", "PX", &x_ttl.as_millis().to_string()],
    );
    let planted = Instant::now();
    proxy.set(Fault::Blackhole);
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let l = cl.lock_within(&key, TTL, Duration::from_secs(30));
            (l, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(1500));
        let healed = Instant::now();
        proxy.set(Fault::Pass);
        let (l, at) = t.join().unwrap();
        let l = l.expect("granted once the path heals");
        assert!(at >= healed, "granted by master 0 alone");
        let own = holding(&addrs, &key, l.token().as_bytes());
        eprintln!(
            "granted {:?} after X's key was planted; its token on {own} masters",
            at.saturating_duration_since(planted)
        );
        assert!(own >= 2, "granted without a quorum of its own token");
        cl.unlock(&l).unwrap();
    });
    let start = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "nothing left on any master",
        || all_gone(&addrs, &key),
    );
    eprintln!("all gone {:?} after the unlock", start.elapsed());
}

/// Claims (session 13 as a whole): with fenced fair clients whose first tries are enters,
/// threads and tasks of one client of which some keep giving up (`lock_within` with short
/// deadlines, async futures dropped by a timeout) beside others that wait, another fair
/// client and an unfair one, on one resource: no two tenures overlap, fencing tokens increase
/// in their order, every waiter that waits (30 s each) gets the lock every round (the kept
/// leaves starve nobody), and once all are done no client is left in any line.
#[test]
fn givers_up_beside_waiters_starve_nobody_and_leave_no_line() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    const ROUNDS: usize = 12;
    const TTL: Duration = Duration::from_secs(2);
    let c = cluster(3);
    let addrs = c.addrs();
    let lease = Duration::from_millis(100);
    let fenced = |fair: bool, id: &str| {
        let mut o = options(&addrs, fair, id, lease, 10_000);
        o.fencing = true;
        o
    };
    let same = Redlock::with_config(fenced(true, "same").validate().unwrap()).unwrap();
    let other = Redlock::with_config(fenced(true, "other").validate().unwrap()).unwrap();
    let unfair = Redlock::with_config(fenced(false, "").validate().unwrap()).unwrap();
    let key = resource("givers-up");
    let tenures = Mutex::new(Vec::<Tenure>::new());
    let failures = Mutex::new(Vec::<String>::new());
    let done = AtomicBool::new(false);
    let gave_up = std::sync::atomic::AtomicU64::new(0);
    let record = |who: &str, l: &redlock_mux::Lock, from: Instant| {
        tenures
            .lock()
            .unwrap()
            .push(Tenure::of(who, l, from).end(Instant::now(), l));
    };
    std::thread::scope(|s| {
        let waiters = [
            ("same-a", &same),
            ("same-b", &same),
            ("other", &other),
            ("unfair", &unfair),
        ];
        let mut handles = Vec::new();
        for (who, cl) in waiters {
            let (key, failures, record) = (&key, &failures, &record);
            handles.push(s.spawn(move || {
                for _ in 0..ROUNDS {
                    match cl.lock_within(key, TTL, Duration::from_secs(30)) {
                        Ok(l) => {
                            let from = Instant::now();
                            std::thread::sleep(Duration::from_millis(30));
                            record(who, &l, from);
                            let _ = cl.unlock(&l);
                        }
                        Err(e) => {
                            failures.lock().unwrap().push(format!("{who}: {e}"));
                            return;
                        }
                    }
                }
            }));
        }
        // A thread of `same` that gives up again and again.
        {
            let (key, record, done, same, gave_up) = (&key, &record, &done, &same, &gave_up);
            s.spawn(move || {
                let mut i = 0u64;
                while !done.load(Ordering::SeqCst) {
                    let within = Duration::from_millis(20 + (i * 37) % 120);
                    match same.lock_within(key, TTL, within) {
                        Ok(l) => {
                            let from = Instant::now();
                            record("same-giver", &l, from);
                            let _ = same.unlock(&l);
                        }
                        Err(_) => {
                            gave_up.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    i += 1;
                }
            });
        }
        // An async client of its own id ("same" too: a second process sharing it is each
        // other's stranger) with a waiting task and a task whose futures are dropped.
        {
            let (key, record, done, failures, gave_up, o) =
                (&key, &record, &done, &failures, &gave_up, fenced(true, "d"));
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let cl = AsyncRedlock::with_config(o.validate().unwrap()).unwrap();
                    let dropper = {
                        let (cl, key) = (cl.clone(), key.clone());
                        async move {
                            let mut i = 0u64;
                            while !done.load(Ordering::SeqCst) {
                                let within = Duration::from_millis(20 + (i * 53) % 150);
                                let f = cl.lock_within(&key, TTL, Duration::from_secs(30));
                                match tokio::time::timeout(within, f).await {
                                    Ok(Ok(l)) => {
                                        let from = Instant::now();
                                        record("d-dropper", &l, from);
                                        let _ = cl.unlock(&l).await;
                                    }
                                    _ => {
                                        gave_up.fetch_add(1, Ordering::SeqCst);
                                    }
                                }
                                i += 1;
                            }
                        }
                    };
                    let waiter = async {
                        let mut slowest = Duration::ZERO;
                        for _ in 0..ROUNDS {
                            let f = cl.lock_within(key, TTL, Duration::from_secs(30));
                            let asked = Instant::now();
                            let r = f.await;
                            slowest = slowest.max(asked.elapsed());
                            match r {
                                Ok(l) => {
                                    let from = Instant::now();
                                    tokio::time::sleep(Duration::from_millis(30)).await;
                                    record("d-waiter", &l, from);
                                    let _ = cl.unlock(&l).await;
                                }
                                Err(e) => {
                                    failures.lock().unwrap().push(format!("d-waiter: {e}"));
                                    return;
                                }
                            }
                        }
                        eprintln!("the async waiter's slowest round: {slowest:?}");
                    };
                    tokio::join!(dropper, waiter);
                    // A dropped future's leave is queued for the client's driver task, which
                    // runs on this runtime: one more round, written behind it on every
                    // connection, and its replies read, before the runtime ends (else the
                    // leave may never be written, and `d` stays in every line: 1 full CI run
                    // in 4 in session 16).
                    let _ = cl.inspect(key).await;
                });
            });
        }
        for h in handles {
            h.join().unwrap();
        }
        // The async waiter's rounds too, then the givers-up stop.
        wait_until(
            Duration::from_secs(120),
            "the async waiter's rounds",
            || {
                tenures
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|t| t.who == "d-waiter")
                    .count()
                    >= ROUNDS
                    || !failures.lock().unwrap().is_empty()
            },
        );
        done.store(true, Ordering::SeqCst);
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "waiters starved: {failures:?}");
    let tenures = tenures.into_inner().unwrap();
    let given_up = tenures
        .iter()
        .filter(|t| t.who == "same-giver" || t.who == "d-dropper")
        .count();
    let gave_up = gave_up.load(Ordering::SeqCst);
    eprintln!(
        "{} tenures, {given_up} of the givers-up, who gave up {gave_up} times",
        tenures.len()
    );
    assert!(gave_up >= 10, "the givers-up hardly ever gave up");
    // Between two tenures of `other`, how many went to others (fairness, printed only).
    let mut sorted: Vec<&Tenure> = tenures.iter().collect();
    sorted.sort_by_key(|t| t.from);
    let mut between = Vec::new();
    let mut n = 0usize;
    for t in &sorted {
        if t.who == "other" {
            between.push(n);
            n = 0;
        } else {
            n += 1;
        }
    }
    eprintln!("tenures of others before each of `other`'s: {between:?}");
    let v = violations(tenures);
    assert!(
        v.is_empty(),
        "{} violations: {:?}",
        v.len(),
        &v[..v.len().min(10)]
    );
    let start = Instant::now();
    loop {
        // A won try's refusal read after its round was decided is answered with a leave when
        // the client reads it: these blocking clients read when they run, here serving.
        for cl in [&same, &other] {
            cl.poll_idle(Duration::from_millis(20));
        }
        if all_gone(&addrs, &key) {
            break;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let q = line(&key);
            let lines: Vec<_> = addrs
                .iter()
                .map(|a| {
                    (
                        redis(a, &["GET", &key]),
                        redis(a, &["ZRANGE", &q, "0", "-1", "WITHSCORES"]),
                        redis(a, &["PTTL", &q]),
                    )
                })
                .collect();
            // (A won enter round left its client in the line of a master that refused it, 1
            // run in 8, before the won round's leave: `a_won_enter_leaves_no_line_behind`.)
            panic!("left behind 10 s after the last round: {lines:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
