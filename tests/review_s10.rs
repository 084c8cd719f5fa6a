//! Review of today's changes (s10): a try takes the operation's names and gives them back
//! when it fails, so every later use of the names (the next try, its abandon, a watch) must
//! find them; commands with no native form go out as `EVAL` under `Scripts::Native`.
//! Against real masters (`REDLOCK_REDIS_SERVER` picks the binary).

use std::time::Duration;

use redlock_mux::resp::Frame;
use redlock_mux::{AsyncRedlock, Scripts};
use testkit::{cluster, get, redis, resource, wait_until};

const TTL: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A set of resources retried after lost rounds and after tries refused everywhere is
/// granted on its own keys: every master holds both of them with the winner's token.
fn a_retried_set_locks_its_own_keys(mode: Scripts, wakeups: bool) {
    let c = cluster(3);
    let addrs = c.addrs();
    let rt = runtime();
    let client: AsyncRedlock = rt.block_on(async {
        testkit::builder(&c)
            .scripts(mode)
            .wakeups(wakeups)
            .retry(400, Duration::from_millis(20))
            .build_async()
            .unwrap()
    });
    for held in [1, 2, 3] {
        let (a, b) = (resource("retried-a"), resource("retried-b"));
        // A foreign holder of the second key on `held` masters, which lets go after a few
        // tries: the first tries lose (2 of 3: a lost round, then its release) or are
        // refused everywhere (3 of 3: a wait or a watch), then one wins.
        for addr in &addrs[..held] {
            redis(addr, &["SET", &b, "foreign", "PX", "300"]);
        }
        let lock = rt
            .block_on(client.lock_many(&[&a, &b], TTL))
            .unwrap_or_else(|e| panic!("{mode:?} held on {held}: {e}"));
        let got: Vec<&str> = lock.resources().collect();
        assert_eq!(got, [a.as_str(), b.as_str()], "{mode:?} held on {held}");
        // Every master that granted it holds both keys with the token (a quorum at least;
        // a master whose vote was not counted may still be running the try).
        let token = lock.token().to_string();
        let granted: Vec<usize> = lock.granted_by().collect();
        assert!(granted.len() >= 2, "{granted:?}");
        for i in granted {
            for k in [&a, &b] {
                let v = get(&addrs[i], k);
                assert_eq!(v.as_deref(), Some(token.as_str()), "{k} on master {i}");
            }
        }
        rt.block_on(client.unlock(&lock)).unwrap();
        for addr in &addrs {
            assert_eq!(get(addr, &a), None, "{a} on {addr}");
            assert!(
                get(addr, &b).is_none_or(|v| v == "foreign"),
                "{b} on {addr}"
            );
        }
    }
}

#[test]
fn a_retried_set_locks_its_own_keys_auto() {
    a_retried_set_locks_its_own_keys(Scripts::Auto, true);
    a_retried_set_locks_its_own_keys(Scripts::Auto, false);
}

#[test]
fn a_retried_set_locks_its_own_keys_native() {
    a_retried_set_locks_its_own_keys(Scripts::Native, true);
}

/// An async `lock_many` dropped while its second try is out releases that try's keys: the
/// abandon's release is built from the names the failed first try gave back. Two of the
/// three masters hold writes back throughout (`CLIENT PAUSE WRITE`), so the first try loses
/// its round by their timeouts, its release round waits them out too, and the second try,
/// granted by the third master, waits for them when the future is dropped. No timing but
/// the client's own: the test follows the tries by the tokens the free master holds.
fn dropped_in_a_retry_releases_the_retrys_keys(mode: Scripts) {
    let c = cluster(3);
    let addrs = c.addrs();
    let rt = runtime();
    let client: AsyncRedlock = rt.block_on(async {
        testkit::builder(&c)
            .scripts(mode)
            .wakeups(false)
            .fail_fast(false)
            // Long enough that a connection is not replaced as stale (four node timeouts
            // after its oldest owed reply) before the drop.
            .node_timeout(Duration::from_secs(2))
            .retry(5, Duration::from_millis(50))
            .build_async()
            .unwrap()
    });
    let (a, b) = (resource("abandon-a"), resource("abandon-b"));
    for addr in &addrs[1..] {
        redis(addr, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    }
    let task = {
        let client = client.clone();
        let (a, b) = (a.clone(), b.clone());
        rt.spawn(async move { client.lock_many(&[&a, &b], TTL).await })
    };
    let token_on_0 = || get(&addrs[0], &a).filter(|v| v.len() == 40);
    let mut first = None;
    wait_until(Duration::from_secs(30), "the first try on master 0", || {
        first = token_on_0();
        first.is_some()
    });
    let mut second = None;
    wait_until(
        Duration::from_secs(30),
        "the second try on master 0",
        || {
            second = token_on_0().filter(|t| Some(t) != first.as_ref());
            second.is_some()
        },
    );
    task.abort();
    let out = rt.block_on(task);
    assert!(out.is_err(), "dropped mid-round, not finished: {out:?}");
    for addr in &addrs[1..] {
        redis(addr, &["CLIENT", "UNPAUSE"]);
    }
    // The abandon's release follows the try on every master: no key is left.
    wait_until(
        Duration::from_secs(30),
        "no key of the dropped try left",
        || {
            addrs
                .iter()
                .all(|addr| get(addr, &a).is_none() && get(addr, &b).is_none())
        },
    );
}

#[test]
fn dropped_in_a_retry_releases_the_retrys_keys_auto() {
    dropped_in_a_retry_releases_the_retrys_keys(Scripts::Auto);
}

#[test]
fn dropped_in_a_retry_releases_the_retrys_keys_native() {
    dropped_in_a_retry_releases_the_retrys_keys(Scripts::Native);
}

/// Under `Scripts::Native` a set of resources (fenced or not) is taken, extended and released
/// with `EVAL` alone, a `SCRIPT FLUSH` before the release included, by every user who may run
/// `EVAL` (`EVALSHA` or `SCRIPT` denied or not: before 83cff7d a user denied `EVALSHA` was
/// refused); a user denied `EVAL` is refused with the server's `NOPERM`, even with the
/// scripts loaded by an operator (nothing but `EVAL` is tried in this mode since 83cff7d; such
/// a user takes sets under `Scripts::Auto`). Whatever the outcome, no key is left behind, and
/// no connection is dropped as out of step. Needs no native command: runs on every server.
#[test]
fn native_mode_sets_by_acl_user() {
    use redlock_mux::{Error, Redlock};
    let c = cluster(3);
    let addrs = c.addrs();
    let users: [(&str, &[&str], bool); 5] = [
        ("all", &[], true),
        ("noevalsha", &["-evalsha"], true),
        ("noscriptcmd", &["-script"], true),
        ("noeval", &["-eval"], false),
        ("noscripting", &["-@scripting"], false),
    ];
    for (user, rules, allowed) in users {
        for a in &addrs {
            let mut args = vec!["ACL", "SETUSER", user, "on", ">pw", "~*", "+@all"];
            args.extend(rules);
            assert_eq!(
                redis(a, &args),
                Frame::Simple("OK".into()),
                "ACL {user} on {a}"
            );
        }
        let nodes: Vec<String> = c
            .servers()
            .iter()
            .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
            .collect();
        for fenced in [false, true] {
            for preload in [false, true] {
                let why = format!("{user} fenced={fenced} preload={preload}");
                for a in &addrs {
                    redis(a, &["SCRIPT", "FLUSH"]);
                    if preload {
                        for (_, s) in redlock_mux::script::ALL {
                            redis(a, &["SCRIPT", "LOAD", s]);
                        }
                    }
                }
                let client: Redlock = testkit::builder(&c)
                    .nodes(nodes.clone())
                    .scripts(Scripts::Native)
                    .fencing(fenced)
                    .retry(1, Duration::ZERO)
                    .build()
                    .unwrap();
                let (ka, kb) = (resource("nat-acl-a"), resource("nat-acl-b"));
                match client.lock_many(&[&ka, &kb], TTL) {
                    Ok(mut lock) => {
                        assert!(allowed, "{why}: granted");
                        client.extend(&mut lock, TTL).unwrap();
                        for a in &addrs {
                            redis(a, &["SCRIPT", "FLUSH"]);
                        }
                        client
                            .unlock(&lock)
                            .unwrap_or_else(|e| panic!("{why}: unlock: {e}"));
                    }
                    Err(Error::NoQuorum { nodes }) => {
                        assert!(!allowed, "{why}: {nodes}");
                        assert!(nodes.to_string().contains("NOPERM"), "{why}: {nodes}");
                    }
                    Err(e) => panic!("{why}: {e}"),
                }
                client.poll_idle(Duration::from_millis(100));
                for a in &addrs {
                    for k in [&ka, &kb] {
                        assert_eq!(get(a, k), None, "{why}: {k} left on {a}");
                    }
                }
                let desyncs: u64 = client.stats().nodes.iter().map(|n| n.desyncs).sum();
                assert_eq!(desyncs, 0, "{why}");
            }
        }
    }
    // A user denied `EVAL` alone takes sets under `Auto`, which loads the scripts itself.
    let nodes: Vec<String> = c
        .servers()
        .iter()
        .map(|s| format!("redis://noeval:pw@127.0.0.1:{}", s.port()))
        .collect();
    for fenced in [false, true] {
        let auto: Redlock = testkit::builder(&c)
            .nodes(nodes.clone())
            .fencing(fenced)
            .build()
            .unwrap();
        let (ka, kb) = (resource("auto-acl-a"), resource("auto-acl-b"));
        let mut lock = auto
            .lock_many(&[&ka, &kb], TTL)
            .unwrap_or_else(|e| panic!("noeval under Auto, fenced={fenced}: {e}"));
        auto.extend(&mut lock, TTL).unwrap();
        auto.unlock(&lock).unwrap();
        for a in &addrs {
            assert_eq!(get(a, &ka), None);
            assert_eq!(get(a, &kb), None);
        }
    }
}

/// The acquire script's replies at the ends of its range: a set of `MAX_RESOURCES` whose
/// last key is held (`-1024`), whose first key is held (`-1`), and granted (`0`, or the
/// counter), unfenced and fenced, in every script form a connection may use; each is read as
/// the vote it is, and no connection is dropped as out of step.
#[test]
fn the_acquire_scripts_replies_at_the_ends_of_its_range_are_in_step() {
    use redlock_mux::{Error, Redlock};
    let c = cluster(3);
    let addrs = c.addrs();
    for (mode, fenced) in [
        (Scripts::Auto, false),
        (Scripts::Auto, true),
        (Scripts::Native, false),
        (Scripts::Native, true),
        (Scripts::Eval, false),
    ] {
        let client: Redlock = testkit::builder(&c)
            .scripts(mode)
            .fencing(fenced)
            .fail_fast(false)
            .node_timeout(Duration::from_secs(5))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        let names: Vec<String> = (0..redlock_mux::MAX_RESOURCES)
            .map(|i| format!("{}:{i}", resource("edge")))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for held in [names.len() - 1, 0] {
            for a in &addrs {
                redis(a, &["SET", &names[held], "foreign", "PX", "60000"]);
            }
            match client.try_lock_many(&refs, TTL) {
                Err(Error::Conflict { held: Some(h), .. }) => {
                    assert_eq!(h, names[held], "{mode:?} fenced={fenced}")
                }
                other => panic!("{mode:?} fenced={fenced} held {held}: {other:?}"),
            }
            for a in &addrs {
                redis(a, &["DEL", &names[held]]);
                for n in &names {
                    assert!(get(a, n).is_none(), "{n} left on {a}");
                }
            }
        }
        let lock = client
            .try_lock_many(&refs, TTL)
            .unwrap_or_else(|e| panic!("{mode:?} fenced={fenced}: {e}"));
        assert_eq!(lock.granted_by().count(), 3);
        client.unlock(&lock).unwrap();
        let desyncs: u64 = client.stats().nodes.iter().map(|n| n.desyncs).sum();
        assert_eq!(desyncs, 0, "{mode:?} fenced={fenced}");
    }
}
