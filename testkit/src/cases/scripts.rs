//! Scripts, functions and native commands, and ACL users denied some of them.

use super::*;

/// The server's name and version, from `INFO server`.
pub fn server_version(addr: &str) -> (String, (u32, u32)) {
    let info = match redis(addr, &["INFO", "server"]) {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO server: {other:?}"),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(str::trim)
            .map(String::from)
    };
    // Valkey reports `valkey_version` (and a `redis_version` kept for compatibility).
    let (name, version) = match field("valkey_version") {
        Some(v) => ("valkey", v),
        None => ("redis", field("redis_version").unwrap_or_default()),
    };
    let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
    (
        name.to_string(),
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)),
    )
}

/// Whether the server has native compare-and-delete commands.
pub fn has_native(addr: &str) -> bool {
    match server_version(addr) {
        (n, v) if n == "valkey" => v >= (9, 0),
        (_, v) => v >= (8, 4),
    }
}

pub fn native_commands_where_the_server_has_them<F: Flavor>() {
    use redlock_mux::Scripts;
    let c = cluster(3);
    let addrs = c.addrs();
    let native = has_native(&addrs[0]);
    let (name, version) = server_version(&addrs[0]);
    let key = resource("native");
    // Auto: native where the server has it, scripts elsewhere; the lock works the same.
    // (Without fail-fast every node's reply to the first round is read, and its HELLO reply,
    // which comes before it, with it: every later release knows the server. With fail-fast,
    // a release may go out on a connection whose server has not said yet, as a script.)
    // Fair mode off: a fair release is the hand-off script, which has no native form (it
    // rings the line).
    let client = F::build(builder(&c).fail_fast(false).fair(false)).unwrap();
    let mut lock = client.lock(&key, TTL).unwrap();
    client.extend(&mut lock, Duration::from_secs(30)).unwrap();
    assert!(pttl(&addrs[0], &key) > 20_000, "extended");
    client.unlock(&lock).unwrap();
    gone_everywhere(&client, &addrs, &key);
    let release = if name == "valkey" { "delifeq" } else { "delex" };
    for a in &addrs {
        if native {
            assert!(
                calls(a, release) >= 1,
                "{name} {version:?}: no {release} on {a}"
            );
            assert_eq!(
                calls(a, "evalsha"),
                0,
                "{name} {version:?}: scripts were used on {a}"
            );
        } else {
            assert!(
                calls(a, "evalsha") >= 2,
                "{name} {version:?}: no EVALSHA on {a}"
            );
        }
    }
    // A release of a key that is not ours: refused either way (native cannot say which).
    let mut lock = client.lock(&key, TTL).unwrap();
    for a in &addrs {
        redis(a, &["SET", &key, "foreign"]);
    }
    assert!(matches!(client.unlock(&lock), Err(Error::NotHeld { .. })));
    assert!(matches!(
        client.extend(&mut lock, TTL),
        Err(Error::NotHeld { .. })
    ));
    for a in &addrs {
        assert_eq!(
            get(a, &key).as_deref(),
            Some("foreign"),
            "left alone on {a}"
        );
        redis(a, &["DEL", &key]);
    }
    // Native only: works where the server has the commands; elsewhere every node says why.
    let client = F::build(builder(&c).fail_fast(false).scripts(Scripts::Native)).unwrap();
    let lock = client.lock(&key, TTL).unwrap();
    match client.unlock(&lock) {
        Ok(()) => assert!(native, "{name} {version:?} has no native commands"),
        Err(Error::NoQuorum { nodes }) => {
            assert!(!native, "{name} {version:?}: {nodes}");
            assert!(nodes.to_string().contains("native"), "{nodes}");
            eprintln!("native commands skipped: {name} {version:?} has none ({nodes})");
        }
        Err(e) => panic!("{e}"),
    }
}

/// An ACL user that may not run `EVAL`, `EVALSHA` or `SCRIPT` (and, `no_functions`, not
/// `FUNCTION` either), but anything else, on every server of `c`.
fn user_without_eval(c: &LocalCluster, name: &str, no_functions: bool) {
    for a in c.addrs() {
        let mut rules = vec![
            "SETUSER", name, "on", ">pw", "~*", "+@all", "-eval", "-evalsha", "-script",
        ];
        if no_functions {
            rules.push("-function");
        }
        let mut args = vec!["ACL"];
        args.extend(rules);
        assert_eq!(redis(&a, &args), Frame::Simple("OK".into()), "ACL on {a}");
    }
}

pub fn acl_users_without_eval_use_functions<F: Flavor>() {
    use redlock_mux::Scripts;
    let c = cluster(3);
    let addrs = c.addrs();
    let (name, version) = server_version(&addrs[0]);
    if name == "redis" && version < (7, 0) {
        eprintln!("functions skipped: {name} {version:?} has no FUNCTION/FCALL (Redis 7+)");
        return;
    }
    user_without_eval(&c, "app", false);
    user_without_eval(&c, "nofn", true);
    let as_user = |user: &str| -> Vec<String> {
        c.servers()
            .iter()
            .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
            .collect()
    };
    let key = resource("acl");
    // Scripts denied: a release by EVALSHA is refused on every node, naming the command.
    let eval = F::build(builder(&c).nodes(as_user("app")).scripts(Scripts::Eval)).unwrap();
    let lock = eval.lock(&key, TTL).unwrap();
    match eval.unlock(&lock) {
        Err(Error::NoQuorum { nodes }) => {
            assert!(nodes.to_string().contains("NOPERM"), "{nodes}")
        }
        other => panic!("expected NOPERM from every node, got {other:?}"),
    }
    for a in &addrs {
        redis(a, &["DEL", &key]);
    }
    // Functions: everything works, sets and fencing included, and a FUNCTION FLUSH in the
    // middle is survived.
    let fcall = F::build(
        builder(&c)
            .nodes(as_user("app"))
            .scripts(Scripts::Function)
            .fencing(true),
    )
    .unwrap();
    let mut lock = fcall.lock(&key, TTL).unwrap();
    assert!(lock.fencing_token().is_some());
    fcall.extend(&mut lock, Duration::from_secs(30)).unwrap();
    for a in &addrs {
        assert_eq!(redis(a, &["FUNCTION", "FLUSH"]), Frame::Simple("OK".into()));
    }
    fcall.unlock(&lock).unwrap();
    gone_everywhere(&fcall, &addrs, &key);
    let set = fcall.lock_many(&[&key, &resource("acl-b")], TTL).unwrap();
    fcall.unlock(&set).unwrap();
    for a in &addrs {
        assert!(calls(a, "fcall") >= 4, "FCALL on {a}");
        assert_eq!(
            calls(a, "evalsha") + calls(a, "eval"),
            0,
            "a script ran on {a}"
        );
    }
    // Auto finds out by itself: the first refused EVALSHA switches its connection to the
    // function library (or the server's native commands serve the single-resource calls).
    for a in &addrs {
        redis(a, &["FUNCTION", "FLUSH"]);
    }
    let auto = F::build(builder(&c).nodes(as_user("app")).fencing(true)).unwrap();
    let mut lock = auto.lock(&key, TTL).unwrap();
    auto.extend(&mut lock, TTL).unwrap();
    auto.unlock(&lock).unwrap();
    let set = auto.lock_many(&[&key, &resource("acl-c")], TTL).unwrap();
    auto.unlock(&set).unwrap();
    gone_everywhere(&auto, &addrs, &key);
    // A user who may not load functions either, on servers without the library: the error
    // says what is missing and which permission.
    for a in &addrs {
        redis(a, &["FUNCTION", "FLUSH"]);
    }
    let nofn = F::build(
        builder(&c)
            .nodes(as_user("nofn"))
            .scripts(Scripts::Function)
            .fencing(true)
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    match nofn.try_lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => {
            let text = nodes.to_string();
            assert!(text.contains("Function not found"), "{text}");
            assert!(
                text.contains("NOPERM") && text.contains("function|load"),
                "{text}"
            );
        }
        other => panic!("expected the missing permission named, got {other:?}"),
    }
    // An operator loads the library for them: then they lock.
    for a in &addrs {
        redis(a, &["FUNCTION", "LOAD", redlock_mux::script::LIBRARY]);
    }
    let lock = nofn.lock(&key, TTL).unwrap();
    nofn.unlock(&lock).unwrap();
}

/// Creates ACL user `name` (password `pw`) with `rules` after `+@all` on every server of `c`;
/// `false` when a server refuses the rules (a command it does not have).
fn acl_user(c: &LocalCluster, name: &str, rules: &[&str]) -> bool {
    c.addrs().iter().all(|a| {
        let mut args = vec!["ACL", "SETUSER", name, "on", ">pw", "~*", "+@all"];
        args.extend(rules);
        redis(a, &args) == Frame::Simple("OK".into())
    })
}

/// Every release and extension reaches a form the user may run, from a connection's first
/// command on: a user denied all scripting releases with the server's native commands (under
/// `Scripts::Native` and `Scripts::Auto`, from a fresh client whose first command is the
/// release, as `redlock unlock` is), and a user denied only the native commands falls back
/// to scripts within the same call. On servers without native commands there is nothing to
/// fall back to for a user denied scripting, and the case says so.
pub fn every_acl_user_releases_in_a_form_it_may_use<F: Flavor>() {
    use redlock_mux::Scripts;
    let c = cluster(3);
    let addrs = c.addrs();
    let (name, version) = server_version(&addrs[0]);
    let native_verb = match (name.as_str(), version) {
        ("valkey", v) if v >= (9, 0) => "delifeq",
        ("redis", v) if v >= (8, 4) => "delex",
        _ => {
            eprintln!("native fallbacks skipped: {name} {version:?} has no native commands");
            return;
        }
    };
    assert!(acl_user(&c, "noscript", &["-@scripting"]), "ACL noscript");
    let minus_native = format!("-{native_verb}");
    assert!(acl_user(&c, "nonative", &[&minus_native]), "ACL nonative");
    let as_user = |user: &str| -> Vec<String> {
        c.servers()
            .iter()
            .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
            .collect()
    };
    let held = |key: &str| addrs.iter().filter(|a| get(a, key).is_some()).count();
    let evals = || -> u64 {
        addrs
            .iter()
            .map(|a| calls(a, "evalsha") + calls(a, "eval") + calls(a, "script|load"))
            .sum()
    };

    for mode in [Scripts::Native, Scripts::Auto] {
        // Taken by one client; released by a fresh one whose first command is the release.
        let key = resource("acl-native");
        let taker = F::build(builder(&c).nodes(as_user("noscript")).scripts(mode)).unwrap();
        let mut lock = taker.lock(&key, TTL).unwrap();
        taker.extend(&mut lock, TTL).unwrap();
        let fresh = F::build(
            builder(&c)
                .nodes(as_user("noscript"))
                .scripts(mode)
                .retry(1, Duration::ZERO),
        )
        .unwrap();
        let before = evals();
        fresh
            .unlock(&Lock::from_token(&key, *lock.token()))
            .unwrap_or_else(|e| panic!("{mode:?}: a fresh client's first release: {e}"));
        gone_everywhere(&fresh, &addrs, &key);
        if mode == Scripts::Native {
            assert_eq!(evals(), before, "{mode:?}: no script loaded or run");
        }
        assert_eq!(held(&key), 0);
    }

    // Native commands refused, scripts allowed: Auto learns the server has DELIFEQ (from the
    // acquisition's HELLO), is refused, and sends the same release as a script at once.
    let key = resource("acl-nonative");
    let auto = F::build(
        builder(&c)
            .nodes(as_user("nonative"))
            .retry(1, Duration::ZERO),
    )
    .unwrap();
    let mut lock = auto.lock(&key, TTL).unwrap();
    auto.extend(&mut lock, TTL).unwrap();
    auto.unlock(&lock)
        .unwrap_or_else(|e| panic!("native refused, scripts allowed: {e}"));
    gone_everywhere(&auto, &addrs, &key);
    let key = resource("acl-nonative-2");
    let lock = auto.lock(&key, TTL).unwrap();
    auto.unlock(&lock).unwrap();
    gone_everywhere(&auto, &addrs, &key);
}
