//! A hostile review, against real masters, of the split read of permits (ac5e98d, c86dcbb):
//! a permit try whose round is lost while a quorum said yes (votes split over slots) releases,
//! reads the slots with `MGET`, orders them by how many masters have them free, and asks once
//! more (`Acquisition::reorder`, `core/src/op/attempt.rs`).
//!
//! Found (the DEFECT tests failed at 5ee4de6's base; all pass since the fixes that followed:
//! the read waits for every master, a split decided early is read, the read is the slots
//! script's `EXISTS` (a key of another type is taken), and the release scripts read keys with
//! `pcall`, so a key of another type is another's and the release goes on):
//! - `a_read_at_a_quorum_misses_the_slot_free_on_a_quorum`: with fail-fast on (the default)
//!   the read is decided at three replies of five, so a slot free on exactly a quorum is
//!   seldom read free on a quorum: 12-14/40 won where `fail_fast(false)` wins 40/40.
//! - `with_two_masters_down_a_split_decided_early_is_not_read`: the yes count of a round
//!   decided lost early is below a quorum, and no read happens: 2/20 won (0 `MGET`) where
//!   `fail_fast(false)` wins 20/20.
//! - `a_slot_key_of_another_type_reads_free_and_loses_the_free_slot`: `MGET` reads a set as
//!   nil (free): 12/45 won where the same occupancy with strings wins 45/45.
//! - `a_slot_key_of_another_type_makes_lost_tries_leave_their_tokens`: `release.lua` aborts
//!   at `WRONGTYPE`, leaving the caller's token on later slots for the ttl: 10/10 tries.
//!
//! Held (pass): no more than k holders and no key left under heavy contention (k = 2..4, 12
//! threads, all masters jittered), no stray key after futures dropped during reads and
//! second rounds, `Conflict`/`NoQuorum` as the masters said, a semaphore of sets refused
//! as `Conflict` as a lock is.
//!
//! Each test says what it proves; the tests marked `DEFECT:` proved a defect, now fixed (the
//! slots are read with the slots script, which counts `EXISTS` calls where these tests said
//! `MGET`).
//!
//! Slot keys are set directly (`SET ... PX`) on chosen masters to build an occupancy exactly:
//! a key on three masters is what a permit taken while the other two were cut off leaves; a
//! key on one or two masters is what a client killed in the middle of its permit round
//! leaves (its round reached those masters only), or a lost try whose release did not reach
//! them. The newcomer's algorithm sees only the keys, whoever set them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use redlock_mux::resp::Frame;
use redlock_mux::{Error, Redlock, Semaphore};
use testkit::proxy::{self, Fault};
use testkit::{cluster, get, redis, resource};

const TTL: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Every slot key of `sem` set on any of `addrs`: (master, slot, value), `<type>` for a key
/// that is no string.
fn slots_set(addrs: &[String], sem: &Semaphore) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (m, a) in addrs.iter().enumerate() {
        for i in 0..sem.permits() {
            let key = sem.slot_key(i).unwrap();
            match redis(a, &["TYPE", key]) {
                Frame::Simple(t) if t.as_ref() == b"none" => {}
                Frame::Simple(t) if t.as_ref() == b"string" => {
                    out.push((m, i, get(a, key).unwrap_or_default()))
                }
                other => out.push((m, i, format!("<{other:?}>"))),
            }
        }
    }
    out
}

/// `SET key value PX 120000` on the masters `on` of `addrs`.
fn set_on(addrs: &[String], on: &[usize], key: &str, value: &str) {
    for &m in on {
        assert!(matches!(
            redis(&addrs[m], &["SET", key, value, "PX", "120000"]),
            Frame::Simple(_)
        ));
    }
}

/// `SADD key x` (and a long expiry) on the masters `on` of `addrs`.
fn sadd_on(addrs: &[String], on: &[usize], key: &str) {
    for &m in on {
        assert_eq!(redis(&addrs[m], &["SADD", key, "x"]), Frame::Integer(1));
        assert_eq!(
            redis(&addrs[m], &["PEXPIRE", key, "120000"]),
            Frame::Integer(1)
        );
    }
}

/// `INFO commandstats` calls of `cmd` on each of `addrs`, summed.
fn calls(addrs: &[String], cmd: &str) -> u64 {
    addrs.iter().map(|a| testkit::calls(a, cmd)).sum()
}

#[derive(Default, Debug)]
struct Tally {
    won: usize,
    conflict: usize,
    noquorum: usize,
    other: usize,
}

/// `tries` single tries (`try_acquire_permit`) by `client`; each won permit is checked to be
/// `expect` and unlocked.
fn tally(client: &Redlock, sem: &Semaphore, tries: usize, expect: &str) -> Tally {
    let mut t = Tally::default();
    for _ in 0..tries {
        match client.try_acquire_permit(sem, TTL) {
            Ok(p) => {
                t.won += 1;
                assert_eq!(p.resource(), expect, "granted a slot that is not free");
                client.unlock(&p).unwrap();
            }
            Err(Error::Conflict { .. }) => t.conflict += 1,
            Err(Error::NoQuorum { .. }) => t.noquorum += 1,
            Err(e) => {
                t.other += 1;
                eprintln!("other: {e}");
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------------------------
// 1. The read is taken at a quorum (fail-fast, the default).
// ---------------------------------------------------------------------------------------------

/// DEFECT: with fail-fast on (the default), the split fix mostly does not happen. The read
/// is a fail-fast round like any other, decided as soon as a quorum of masters replied, so
/// it sees three masters of five, and a slot free on exactly a quorum reads free on fewer
/// than a quorum unless those three are exactly the fast ones: the try gives up (`free <
/// quorum` for every slot). And a first round decided lost early (before every master
/// answered) counts fewer than a quorum of yes and does not read at all.
///
/// Occupancy (five masters, five permits; `F` is the one to win):
/// - `F`: free on 0, 1, 2; left on 3, 4 by a client killed mid-round;
/// - `G`: held on 0, 1, 2 (a permit taken while 3 and 4 were cut off);
/// - `J2..J4`: held on 0, 3, 4 (permits taken while 1 and 2 were cut off).
///
/// Masters 1 and 2 have `F` and every `J` free, masters 3 and 4 only `G`, master 0 only `F`.
/// A try wins its first round only when `F` comes before the three `J`s (one order in four);
/// otherwise the votes split (`F` 1, a `J` 2, `G` 2) and the try reads. Read on all five, `F`
/// is free on 3 and comes first: the second round wins, every time.
///
/// Control: the same client with `fail_fast(false)`: 40/40 won.
/// Measured: default (fail-fast) client, no delays anywhere: 12/40 and 14/40 won in two runs
/// (the rest `Conflict`), with masters 0 and 1 delayed 25 ms 8/40; `fail_fast(false)` 40/40.
#[test]
fn a_read_at_a_quorum_misses_the_slot_free_on_a_quorum() {
    let c = cluster(5);
    let direct = c.addrs();
    let (proxies, addrs) = proxy::in_front(&c, 0..5);
    let sem = Semaphore::new(&resource("quorum-read"), 5).unwrap();
    let key = |i| sem.slot_key(i).unwrap().to_string();
    // F = slot 0, G = slot 1, J = slots 2..5.
    set_on(&direct, &[3, 4], &key(0), "killed-mid-round");
    set_on(&direct, &[0, 1, 2], &key(1), "holder-g");
    for j in 2..5 {
        set_on(&direct, &[0, 3, 4], &key(j), &format!("holder-j{j}"));
    }
    let client = |fail_fast| {
        Redlock::builder()
            .nodes(addrs.clone())
            .node_timeout(Duration::from_millis(500))
            .fail_fast(fail_fast)
            .build()
            .unwrap()
    };
    let tries = 40;
    let m0 = calls(&direct, "exists");
    let all_in = tally(&client(false), &sem, tries, &key(0));
    let m1 = calls(&direct, "exists");
    let fast = tally(&client(true), &sem, tries, &key(0));
    let m2 = calls(&direct, "exists");
    proxies[0].set(proxy::latency(Duration::from_millis(25)));
    proxies[1].set(proxy::latency(Duration::from_millis(25)));
    let slow = tally(&client(true), &sem, tries, &key(0));
    proxy::set_all(&proxies, Fault::Pass);
    std::thread::sleep(Duration::from_millis(100));
    let left: Vec<_> = slots_set(&direct, &sem)
        .into_iter()
        .filter(|(_, _, v)| !v.starts_with("holder") && v != "killed-mid-round")
        .collect();
    eprintln!(
        "F free on masters 0,1,2: fail_fast(false) {all_in:?} ({} EXISTS calls); default \
         {fast:?} ({} EXISTS calls); default, masters 0,1 delayed 25 ms {slow:?}; newcomer \
         keys left: {left:?}",
        m1 - m0,
        m2 - m1
    );
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(all_in.won, tries, "control: fail_fast(false)");
    assert_eq!(
        fast.won, tries,
        "a slot free on a quorum refused: the read (or the first round) was decided early"
    );
}

/// DEFECT: with two masters of five down (a failure Redlock is built to bear), a split
/// whose loss the fail-fast round decides before the last master answers counts two yes,
/// not three, and the try does not read: it fails though the slot is free on all three
/// masters up.
///
/// Masters 3 and 4 stopped. `F` free on 0, 1, 2; `G` held on 0, 1, 2; `J2..J4` held on 0
/// only. Masters 1 and 2 give `F` or the first `J`, master 0 gives `F`. When a `J` comes
/// first and master 0 and one of 1, 2 answer first (`F` 1, `J` 1, two failures), no slot
/// can reach three and the round is decided lost with two yes: no read.
///
/// Measured: `fail_fast(false)` 20/20 won (51 `MGET` calls); default 2/20 won, 18
/// `Conflict`, and not one `MGET` (3/10 in an earlier run).
#[test]
fn with_two_masters_down_a_split_decided_early_is_not_read() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let sem = Semaphore::new(&resource("two-down"), 5).unwrap();
    let key = |i| sem.slot_key(i).unwrap().to_string();
    set_on(&addrs, &[0, 1, 2], &key(1), "holder-g");
    for j in 2..5 {
        set_on(&addrs, &[0], &key(j), &format!("holder-j{j}"));
    }
    c.server(3).stop();
    c.server(4).stop();
    let client = |fail_fast| {
        Redlock::builder()
            .nodes(addrs.clone())
            .node_timeout(Duration::from_millis(200))
            .fail_fast(fail_fast)
            .build()
            .unwrap()
    };
    let up = addrs[..3].to_vec();
    let m0 = calls(&up, "exists");
    let all_in = tally(&client(false), &sem, 20, &key(0));
    let m1 = calls(&up, "exists");
    let fast = tally(&client(true), &sem, 20, &key(0));
    let m2 = calls(&up, "exists");
    eprintln!(
        "two masters down, F free on the three up: fail_fast(false) {all_in:?} ({} EXISTS \
         calls); default {fast:?} ({} EXISTS calls)",
        m1 - m0,
        m2 - m1
    );
    assert_eq!(all_in.won, 20, "control");
    assert_eq!(fast.won, 20, "a permit free on every master up refused");
}

// ---------------------------------------------------------------------------------------------
// 2. MGET reads a key of another type as free.
// ---------------------------------------------------------------------------------------------

/// The wrong-type scenario of `a_slot_key_of_another_type_reads_free_and_loses_the_free_slot`
/// with `W1, W2` written as sets (`sets`) or as strings: 45 tries of a `fail_fast(false)`
/// client, the caller's keys deleted after each (so that a try's leftovers, see
/// `a_slot_key_of_another_type_makes_lost_tries_leave_their_tokens`, do not decide the
/// next); the tally, the `MGET` calls, and how many tries left keys.
fn wrong_type_run(sets: bool) -> (Tally, u64, usize) {
    let c = cluster(5);
    let addrs = c.addrs();
    let sem = Semaphore::new(&resource("wrongtype"), 3).unwrap();
    let key = |i| sem.slot_key(i).unwrap().to_string();
    // F = slot 0: left on master 0 by a killed client; W1, W2 = slots 1, 2 on 0, 1, 2.
    set_on(&addrs, &[0], &key(0), "killed-mid-round");
    for w in 1..3 {
        if sets {
            sadd_on(&addrs, &[0, 1, 2], &key(w));
        } else {
            set_on(&addrs, &[0, 1, 2], &key(w), "holder-w");
        }
    }
    let newcomer = Redlock::builder()
        .nodes(addrs.clone())
        .node_timeout(Duration::from_millis(500))
        .fail_fast(false)
        .build()
        .unwrap();
    let m0 = calls(&addrs, "exists");
    let mut t = Tally::default();
    let mut leaky = 0;
    for _ in 0..45 {
        let one = tally(&newcomer, &sem, 1, &key(0));
        t.won += one.won;
        t.conflict += one.conflict;
        t.noquorum += one.noquorum;
        t.other += one.other;
        let left: Vec<_> = slots_set(&addrs, &sem)
            .into_iter()
            .filter(|(_, _, v)| !v.starts_with('<') && v != "holder-w" && v != "killed-mid-round")
            .collect();
        if !left.is_empty() {
            leaky += 1;
        }
        for (m, i, _) in left {
            redis(&addrs[m], &["DEL", &key(i)]);
        }
    }
    (t, calls(&addrs, "exists") - m0, leaky)
}

/// DEFECT: `MGET` answers nil for a key that holds another type, so the read counts such a
/// slot free on every master, while the permit script's `SET NX` finds it taken. The read
/// then puts that slot first, and the second round gives it the votes of the masters where
/// it is really free, taking them from the slot that is free on a quorum.
///
/// Occupancy (five masters, three permits): `F` free on 1..4 (left on master 0 by a killed
/// client); `W1`, `W2` hold a set (`SADD`, someone's stray write) on masters 0, 1, 2 and are
/// absent on 3, 4. Masters 1, 2 can give only `F`; masters 3, 4 give whichever of `W1`, `W2`,
/// `F` comes first. So a try wins its first round one time in three; otherwise `F` gets 2,
/// a `W` 2, and the try reads: `W1`, `W2` read free on 5, `F` on 4, the `W`s go first, and the
/// second round splits the same way. A correct read (the `W`s free on two masters) puts `F`
/// first and wins.
///
/// Control: the same run with `W1`, `W2` holding *strings* on 0, 1, 2 (the same occupancy
/// for `SET NX`): every try wins.
///
/// Measured: strings 45/45 won; sets 12/45 won, 33 `Conflict`, and each of the 33 lost
/// tries left its token on `F` (the release defect below). Both runs `fail_fast(false)` (see
/// `a_read_at_a_quorum_misses_the_slot_free_on_a_quorum` for the default).
#[test]
fn a_slot_key_of_another_type_reads_free_and_loses_the_free_slot() {
    let (strings, m_strings, leaky_s) = wrong_type_run(false);
    let (sets, m_sets, leaky_w) = wrong_type_run(true);
    eprintln!(
        "W1, W2 on masters 0,1,2 as strings: {strings:?} ({m_strings} EXISTS calls, {leaky_s} \
         tries left keys); as sets: {sets:?} ({m_sets} EXISTS calls, {leaky_w} tries left keys)"
    );
    assert_eq!(strings.won, 45, "control");
    assert_eq!(
        sets.won, 45,
        "a permit free on four masters refused: MGET read sets as free slots"
    );
}

/// DEFECT: the release script (`release.lua`) runs `GET` on each key in turn; on a key that
/// holds another type `GET` raises `WRONGTYPE` and the script stops there, so the caller's
/// token on every key after it in the try's order stays for the whole ttl. A lost permit
/// try (and a won one's spare release) on a semaphore with one such slot key leaves its
/// token on other slots, which then count as held by nobody for `ttl`.
///
/// Occupancy (five masters, two permits): `W` holds a set on 0, 1, 2 and is absent on 3, 4;
/// `S` is free on 0, 1 and held by another client on 2, 3, 4. Masters 0, 1 give `S`, 3, 4
/// give `W`; the round is lost (2 and 2), the read (which counts `W` free everywhere) puts
/// `W` first, the second round is lost the same way, and its release on masters 0 and 1
/// stops at `W` before it reaches `S`.
///
/// Measured: 10/10 tries left the caller's token on `S` on masters 0 and 1, with a `PTTL`
/// of about the 30 s ttl (and no error reported to the caller beyond the try's `Conflict`).
#[test]
fn a_slot_key_of_another_type_makes_lost_tries_leave_their_tokens() {
    let c = cluster(5);
    let addrs = c.addrs();
    let sem = Semaphore::new(&resource("wrongtype-release"), 2).unwrap();
    let (w, s) = (
        sem.slot_key(0).unwrap().to_string(),
        sem.slot_key(1).unwrap().to_string(),
    );
    sadd_on(&addrs, &[0, 1, 2], &w);
    set_on(&addrs, &[2, 3, 4], &s, "other");
    let client = Redlock::builder()
        .nodes(addrs.clone())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let (mut leaky, mut results, mut pttls) = (0, Vec::new(), Vec::new());
    for _ in 0..10 {
        let r = client.try_acquire_permit(&sem, TTL);
        results.push(match &r {
            Ok(_) => "Ok".to_string(),
            Err(e) => format!("{e:?}")
                .split([' ', '{'])
                .next()
                .unwrap()
                .to_string(),
        });
        if let Ok(p) = &r {
            client.unlock(p).unwrap();
        }
        let left: Vec<_> = slots_set(&addrs, &sem)
            .into_iter()
            .filter(|(_, _, v)| !v.starts_with('<') && v != "other")
            .collect();
        if !left.is_empty() {
            leaky += 1;
            for (m, i, _) in &left {
                let k = sem.slot_key(*i).unwrap();
                pttls.push(testkit::pttl(&addrs[*m], k));
                redis(&addrs[*m], &["DEL", k]);
            }
        }
    }
    eprintln!(
        "a set on slot W (masters 0,1,2): tries {results:?}; {leaky}/10 tries left their token; \
         PTTLs of the keys left {pttls:?}"
    );
    assert_eq!(
        leaky, 0,
        "lost tries left their token on slots: PTTL {pttls:?}"
    );
}

/// Proves (records): what a semaphore whose only slot holds a set on every master answers,
/// next to a lock of the same key: both are refused as `Conflict` for as long as the set
/// stays (no typed error, no `held` name), and nothing of the caller is left. Passes when the
/// semaphore answers as the lock does (no panic, no hang, no stray key).
#[test]
fn a_slot_key_of_another_type_on_every_master_is_refused_as_the_lock_is() {
    let c = cluster(5);
    let addrs = c.addrs();
    let sem = Semaphore::new(&resource("settype"), 2).unwrap();
    let (k0, k1) = (
        sem.slot_key(0).unwrap().to_string(),
        sem.slot_key(1).unwrap().to_string(),
    );
    sadd_on(&addrs, &[0, 1, 2, 3, 4], &k0);
    sadd_on(&addrs, &[0, 1, 2, 3, 4], &k1);
    let client = Redlock::builder()
        .nodes(addrs.clone())
        .retry(3, Duration::from_millis(5))
        .build()
        .unwrap();
    let start = Instant::now();
    let permit = client.acquire_permit(&sem, TTL);
    let took = start.elapsed();
    let lock = client.try_lock(&k0, TTL);
    let left: Vec<_> = slots_set(&addrs, &sem)
        .into_iter()
        .filter(|(_, _, v)| !v.starts_with('<'))
        .collect();
    eprintln!(
        "every slot a set on every master: permit {:?} in {took:?}; lock of a slot key {:?}; \
         left {left:?}",
        permit.as_ref().map(|p| p.resource().to_string()),
        lock.as_ref().map(|l| l.resources().len()),
    );
    assert!(left.is_empty());
    assert!(took < Duration::from_secs(2));
    let (p, l) = (permit.unwrap_err(), lock.unwrap_err());
    assert_eq!(
        std::mem::discriminant(&p),
        std::mem::discriminant(&l),
        "permit {p:?} vs lock {l:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Heavy contention.
// ---------------------------------------------------------------------------------------------

/// Proves (or not): many clients racing for k = 2, 3, 4 permits, every master behind a proxy
/// that delays replies 0..8 ms (votes split often, so tries read and ask again): never more
/// than k holders, never two holders of a slot within their validity, and once every holder
/// has unlocked no slot key is left anywhere. Counts the error kinds: with every master up
/// and answering, a lost try is `Conflict`, never `NoQuorum`.
#[test]
fn permits_under_heavy_contention_never_exceed_k_and_leave_nothing() {
    let c = cluster(5);
    let direct = c.addrs();
    let (proxies, addrs) = proxy::in_front(&c, 0..5);
    proxy::set_all(
        &proxies,
        Fault::Latency {
            fixed: Duration::ZERO,
            jitter: Duration::from_millis(8),
        },
    );
    let clients: Vec<Redlock> = (0..4)
        .map(|_| {
            Redlock::builder()
                .nodes(addrs.clone())
                .node_timeout(Duration::from_millis(500))
                .retry(4, Duration::from_millis(3))
                .build()
                .unwrap()
        })
        .collect();
    let mut report = Vec::new();
    let mut bad = Vec::new();
    for k in 2..=4usize {
        let sem = Semaphore::new(&resource(&format!("heavy{k}")), k).unwrap();
        let live: Mutex<HashMap<usize, (usize, Instant)>> = Mutex::new(HashMap::new());
        let violations: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let (granted, holders, most) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let errs: Mutex<HashMap<String, usize>> = Mutex::new(HashMap::new());
        let m0 = calls(&direct, "exists");
        let end = Instant::now() + Duration::from_secs(5);
        std::thread::scope(|s| {
            for t in 0..12 {
                let client = &clients[t % clients.len()];
                let (sem, live, violations, granted, holders, most, errs) =
                    (&sem, &live, &violations, &granted, &holders, &most, &errs);
                s.spawn(move || {
                    let mut rng = rand::rng();
                    for _ in 0..200 {
                        if Instant::now() > end {
                            break;
                        }
                        let p = match client.acquire_permit(sem, Duration::from_secs(5)) {
                            Ok(p) => p,
                            Err(e) => {
                                let kind = format!("{e:?}");
                                let kind = kind.split([' ', '{', '(']).next().unwrap().to_string();
                                *errs.lock().unwrap().entry(kind).or_default() += 1;
                                continue;
                            }
                        };
                        let n = holders.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        granted.fetch_add(1, Ordering::SeqCst);
                        let slot = sem.slot_of(p.resource()).unwrap();
                        {
                            let mut l = live.lock().unwrap();
                            let at = Instant::now();
                            if let Some((other, until)) = l.get(&slot) {
                                if *until > at {
                                    violations
                                        .lock()
                                        .unwrap()
                                        .push(format!("k={k} slot {slot}: {t} and {other}"));
                                }
                            }
                            l.insert(slot, (t, p.valid_until()));
                        }
                        std::thread::sleep(Duration::from_millis(rng.random_range(0..3)));
                        live.lock().unwrap().remove(&slot);
                        holders.fetch_sub(1, Ordering::SeqCst);
                        let _ = client.unlock(&p);
                    }
                });
            }
        });
        let mgets = calls(&direct, "exists") - m0;
        std::thread::sleep(Duration::from_millis(200));
        let left = slots_set(&direct, &sem);
        let most = most.load(Ordering::SeqCst);
        let errs = errs.into_inner().unwrap();
        report.push(format!(
            "k={k}: {} granted, at most {most} holders, errors {errs:?}, {mgets} EXISTS calls, \
             {} keys left",
            granted.load(Ordering::SeqCst),
            left.len()
        ));
        let v = violations.into_inner().unwrap();
        if !v.is_empty() || most > k || !left.is_empty() || errs.contains_key("NoQuorum") {
            bad.push(format!(
                "k={k}: {v:?} most {most} left {left:?} errs {errs:?}"
            ));
        }
    }
    proxy::set_all(&proxies, Fault::Pass);
    eprintln!("{}", report.join("\n"));
    assert!(bad.is_empty(), "{bad:?}");
}

// ---------------------------------------------------------------------------------------------
// 4. Futures dropped during the read and the second round.
// ---------------------------------------------------------------------------------------------

/// Proves (or not): with the occupancy of `a_read_at_a_quorum_misses_the_slot_free_on_a_quorum`
/// (three tries in four split and read), every master delayed 2..10 ms, async
/// `try_acquire_permit` futures dropped after 0..60 ms (in the first round, its release, the
/// `MGET`, the second round, or the spare release) leave none of the caller's tokens on any
/// slot once they are all gone.
#[test]
fn futures_dropped_during_the_read_or_second_round_leave_no_slot_keys() {
    let c = cluster(5);
    let direct = c.addrs();
    let (proxies, addrs) = proxy::in_front(&c, 0..5);
    let sem = Semaphore::new(&resource("drop-read"), 5).unwrap();
    let key = |i| sem.slot_key(i).unwrap().to_string();
    set_on(&direct, &[3, 4], &key(0), "killed-mid-round");
    set_on(&direct, &[0, 1, 2], &key(1), "holder-g");
    for j in 2..5 {
        set_on(&direct, &[0, 3, 4], &key(j), &format!("holder-j{j}"));
    }
    proxy::set_all(
        &proxies,
        Fault::Latency {
            fixed: Duration::from_millis(2),
            jitter: Duration::from_millis(8),
        },
    );
    let rt = runtime();
    let client = Arc::new(
        rt.block_on(async {
            Redlock::builder()
                .nodes(addrs.clone())
                .node_timeout(Duration::from_millis(500))
                .fail_fast(false)
                .build_async()
        })
        .unwrap(),
    );
    let (won, dropped, failed) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let m0 = calls(&direct, "exists");
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (client, sem, won, dropped, failed) = (
                client.clone(),
                sem.clone(),
                won.clone(),
                dropped.clone(),
                failed.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..40 {
                    let d = Duration::from_micros(rand::rng().random_range(0..60_000));
                    match tokio::time::timeout(d, client.try_acquire_permit(&sem, TTL)).await {
                        Ok(Ok(p)) => {
                            won.fetch_add(1, Ordering::SeqCst);
                            client.unlock(&p).await.unwrap();
                        }
                        Ok(Err(_)) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) => {
                            dropped.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    });
    proxy::set_all(&proxies, Fault::Pass);
    std::thread::sleep(Duration::from_millis(200));
    let preset: HashSet<String> = [
        "killed-mid-round",
        "holder-g",
        "holder-j2",
        "holder-j3",
        "holder-j4",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let left: Vec<_> = slots_set(&direct, &sem)
        .into_iter()
        .filter(|(_, _, v)| !preset.contains(v))
        .collect();
    eprintln!(
        "dropped during reads: {} won, {} failed, {} dropped, {} EXISTS calls, stray keys {left:?}",
        won.load(Ordering::SeqCst),
        failed.load(Ordering::SeqCst),
        dropped.load(Ordering::SeqCst),
        calls(&direct, "exists") - m0
    );
    assert!(dropped.load(Ordering::SeqCst) > 0);
    assert!(left.is_empty(), "stray slot keys: {left:?}");
}

// ---------------------------------------------------------------------------------------------
// 5. Error classification in realistic mixes.
// ---------------------------------------------------------------------------------------------

/// Proves (or not): the error of a lost permit try says what happened. Three permits, each
/// held by another client on every master (the semaphore is full): `Conflict`, with every
/// master up; with two masters stopped, still `Conflict` (the three up refuse); with three
/// stopped, `NoQuorum`.
#[test]
fn lost_permit_errors_are_classified_by_what_the_masters_said() {
    let mut c = cluster(5);
    let addrs = c.addrs();
    let sem = Semaphore::new(&resource("classify"), 3).unwrap();
    let client = Redlock::builder()
        .nodes(addrs.clone())
        .node_timeout(Duration::from_millis(200))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    for i in 0..3 {
        set_on(&addrs, &[0, 1, 2, 3, 4], sem.slot_key(i).unwrap(), "other");
    }
    let name = |r: &Result<redlock_mux::Lock, Error>| match r {
        Ok(_) => "Ok".to_string(),
        Err(e) => format!("{e:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap()
            .to_string(),
    };
    let full_up = name(&client.try_acquire_permit(&sem, TTL));
    c.server(3).stop();
    c.server(4).stop();
    let full_two_down = name(&client.try_acquire_permit(&sem, TTL));
    c.server(2).stop();
    let full_three_down = name(&client.try_acquire_permit(&sem, TTL));
    eprintln!(
        "full, all up: {full_up}; full, 2 down: {full_two_down}; full, 3 down: \
         {full_three_down}"
    );
    assert_eq!(full_up, "Conflict");
    assert_eq!(full_two_down, "Conflict");
    assert_eq!(full_three_down, "NoQuorum");
}
