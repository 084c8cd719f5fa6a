//! The `redlock` binary, driven as a user drives it: real processes, real masters, real
//! signals. Exit codes, one-line errors, `run` excluding a second `run`, forwarding of
//! SIGINT/SIGTERM, and lock loss.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;
use testkit::local::LocalCluster;
use testkit::{cluster, get, redis, resource, wait_until};

/// `redlock` with the cluster's nodes in REDLOCK_NODES and the test-friendly timing.
fn redlock(nodes: &[String]) -> Command {
    redlock_with(nodes, &["--node-timeout", "200ms", "--retry-delay", "20ms"])
}

fn code(o: &Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {o:?}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The failure contract: the code asked for, and exactly one line on stderr, no panic.
fn assert_fails(o: &Output, expected: i32, mentions: &str) {
    let err = stderr(o);
    assert_eq!(code(o), expected, "exit code; stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line on stderr, got: {err:?}");
    assert!(err.starts_with("redlock: "), "{err:?}");
    assert!(
        err.contains(mentions),
        "{err:?} should mention {mentions:?}"
    );
    assert!(!err.contains("panicked"), "{err:?}");
}

/// A shell command that touches `ready`, then runs `body` until `go` appears.
fn shell_until(scratch: &Scratch, setup: &str, body: &str) -> Vec<String> {
    let script = format!(
        "{setup} touch '{ready}'; while [ ! -e '{go}' ]; do {body} sleep 0.01; done",
        ready = scratch.file("ready").display(),
        go = scratch.file("go").display(),
    );
    vec!["--".into(), "sh".into(), "-c".into(), script]
}

fn wait_for_file(p: &Path, why: &str) {
    wait_until(LIMIT, why, || p.exists());
}

/// How many nodes hold `key` with a value.
fn holders(c: &LocalCluster, key: &str) -> usize {
    c.addrs().iter().filter(|a| get(a, key).is_some()).count()
}

fn send_signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -{sig} {pid}");
}

/// A whole-number field of the one-line JSON object `bench --json` prints.
fn json_number(json: &str, field: &str) -> u64 {
    json.split(&format!("\"{field}\":"))
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{field} in {json}"))
}

fn status_of(o: &Output) -> ExitStatus {
    o.status
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    let nodes = ["127.0.0.1:1".to_string()];
    let cases: [(&[&str], &str); 6] = [
        (&["--ttl", "10", "lock", "--resource", "r"], "time unit"),
        (&["lock"], "--resource"),
        (&["run", "--resource", "r"], "CMD"),
        (&["bogus"], "bogus"),
        (
            &["unlock", "--resource", "r", "--token", "xyz"],
            "invalid token",
        ),
        (
            &[
                "run",
                "--resource",
                "r",
                "--loss-signal",
                "NOPE",
                "--",
                "true",
            ],
            "unknown signal",
        ),
    ];
    for (args, mentions) in cases {
        let mut c = redlock(&nodes);
        c.args(args);
        assert_fails(&output(c, "bad args"), 2, mentions);
    }
    let mut c = redlock(&[]);
    c.env_remove("REDLOCK_NODES")
        .args(["lock", "--resource", "r"]);
    assert_fails(&output(c, "no nodes"), 2, "no nodes");
    let mut c = redlock(&["redis://:secret@".into()]);
    c.args(["lock", "--resource", "r"]);
    let o = output(c, "bad address");
    assert_fails(&o, 2, "invalid node address");
    assert!(
        !stderr(&o).contains("secret"),
        "the password is never printed"
    );
}

#[test]
fn help_lists_the_exit_codes() {
    let o = output(
        {
            let mut c = redlock(&[]);
            c.arg("--help");
            c
        },
        "help",
    );
    assert_eq!(code(&o), 0);
    for needle in ["Exit codes:", "75", "76", "127"] {
        assert!(stdout(&o).contains(needle), "--help mentions {needle}");
    }
}

#[test]
fn unreachable_nodes_exit_69_in_one_line() {
    // Ports that were just free: nothing listens there.
    let nodes: Vec<String> = (0..3)
        .map(|_| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        })
        .collect();
    for args in [
        &["lock", "--resource", "r"][..],
        &["run", "--resource", "r", "--", "true"],
        &["bench", "--duration", "1s"],
    ] {
        let mut c = redlock(&nodes);
        c.args(["--retries", "0"]).args(args);
        assert_fails(&output(c, "unreachable"), 69, "no quorum");
    }
}

#[test]
fn a_missing_redis_server_exits_69() {
    let mut c = redlock(&[]);
    c.env_remove("REDLOCK_NODES")
        .env("REDLOCK_REDIS_SERVER", "/nonexistent/redis-server")
        .args(["demo", "--duration", "1s"]);
    assert_fails(
        &output(c, "demo without redis-server"),
        69,
        "redis-server not found",
    );
}

#[test]
fn lock_prints_a_token_that_unlock_takes() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-lock");

    let mut cmd = redlock(&nodes);
    cmd.args(["lock", "--resource", &key]);
    let o = output(cmd, "lock");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let token = out
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .expect("token= line")
        .to_string();
    let validity: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("validity_ms="))
        .expect("validity_ms= line")
        .parse()
        .expect("a number");
    assert_eq!(token.len(), 40);
    assert!(
        validity > 9_000 && validity <= 10_000,
        "validity {validity}"
    );
    assert_eq!(holders(&c, &key), 3);
    assert!(nodes
        .iter()
        .all(|a| get(a, &key).as_deref() == Some(token.as_str())));

    // Held: a second lock is refused with the conflict code.
    let mut cmd = redlock(&nodes);
    cmd.args(["--retries", "0", "lock", "--resource", &key, "--json"]);
    assert_fails(&output(cmd, "second lock"), 75, "held by another client");

    // The wrong token releases nothing.
    let mut cmd = redlock(&nodes);
    cmd.args(["unlock", "--resource", &key, "--token", &"0".repeat(40)]);
    assert_fails(&output(cmd, "foreign unlock"), 1, "not held");
    assert_eq!(holders(&c, &key), 3);

    let mut cmd = redlock(&nodes);
    cmd.args(["unlock", "--resource", &key, "--token", &token]);
    let o = output(cmd, "unlock");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(holders(&c, &key), 0);

    // Released: unlocking again says so.
    let mut cmd = redlock(&nodes);
    cmd.args(["unlock", "--resource", &key, "--token", &token]);
    assert_fails(&output(cmd, "second unlock"), 1, "expired");

    // --json, with a name that needs escaping.
    let odd = format!("{key}:\"quoted\"");
    let mut cmd = redlock(&nodes);
    cmd.args(["lock", "--json", "--resource", &odd]);
    let o = output(cmd, "lock --json");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let json = stdout(&o);
    assert!(
        json.trim_end().starts_with('{') && json.trim_end().ends_with('}'),
        "{json}"
    );
    assert!(json.contains(r#":\"quoted\""#), "{json}");
    assert!(
        json.contains("\"validity_ms\":") && json.contains("\"token\":\""),
        "{json}"
    );
}

#[test]
fn fencing_and_several_resources_from_the_command_line() {
    let c = cluster(3);
    let nodes = c.addrs();
    let (a, b) = (resource("cli-set-a"), resource("cli-set-b"));
    // `lock --fencing --json` over two resources: one token for both, and a fencing token.
    let mut cmd = redlock(&nodes);
    cmd.args([
        "--fencing",
        "lock",
        "--json",
        "--resource",
        &a,
        "--resource",
        &b,
    ]);
    let o = output(cmd, "fenced lock of a set");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let json = stdout(&o);
    let field = |name: &str| -> String {
        let start = json
            .find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("{name} in {json}"));
        json[start + name.len() + 3..]
            .split([',', '}'])
            .next()
            .unwrap()
            .trim_matches('"')
            .to_string()
    };
    let token = field("token");
    let first: u64 = field("fencing_token").parse().expect("a number");
    assert!(
        json.contains(&format!("\"resources\":[\"{a}\",\"{b}\"]")),
        "{json}"
    );
    for key in [&a, &b] {
        assert_eq!(holders(&c, key), 3, "{key}");
        assert!(nodes
            .iter()
            .all(|n| get(n, key).as_deref() == Some(token.as_str())));
    }
    // Either resource alone is refused while the set is held.
    let mut cmd = redlock(&nodes);
    cmd.args(["--retries", "0", "lock", "--resource", &b]);
    assert_fails(
        &output(cmd, "lock of a member"),
        75,
        "held by another client",
    );
    // `unlock` takes the set.
    let mut cmd = redlock(&nodes);
    cmd.args([
        "unlock",
        "--resource",
        &a,
        "--resource",
        &b,
        "--token",
        &token,
    ]);
    let o = output(cmd, "unlock of the set");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(holders(&c, &a) + holders(&c, &b), 0);
    // A duplicate is a bad argument, and nothing is locked.
    let mut cmd = redlock(&nodes);
    cmd.args(["lock", "--resource", &a, "--resource", &a]);
    assert_fails(&output(cmd, "duplicate"), 2, "given twice");
    // `run --fencing` over the set: the command sees the next token, above the first, and
    // every resource.
    let mut cmd = redlock(&nodes);
    cmd.args(["--fencing", "run", "--resource", &a, "--resource", &b, "--"])
        .args([
            "sh",
            "-c",
            "echo \"$REDLOCK_FENCING_TOKEN\"; echo \"$REDLOCK_RESOURCES\"",
        ]);
    let o = output(cmd, "fenced run of a set");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    let second: u64 = lines
        .next()
        .unwrap()
        .parse()
        .expect("REDLOCK_FENCING_TOKEN");
    assert!(second > first, "token {second} after {first}");
    assert_eq!(lines.collect::<Vec<_>>(), [a.as_str(), b.as_str()]);
    assert_eq!(holders(&c, &a) + holders(&c, &b), 0, "released");
    // Unfenced, the variable is not set.
    let mut cmd = redlock(&nodes);
    cmd.args([
        "run",
        "--resource",
        &a,
        "--",
        "sh",
        "-c",
        "echo \"[${REDLOCK_FENCING_TOKEN-unset}]\"",
    ]);
    let o = output(cmd, "unfenced run");
    assert_eq!(stdout(&o).trim(), "[unset]", "{}", stderr(&o));
}

#[test]
fn unix_socket_nodes_from_the_command_line() {
    let c = cluster(3);
    let key = resource("cli-unix");
    let mut cmd = redlock(&c.unix_addrs());
    cmd.args(["run", "--resource", &key, "--", "true"]);
    let o = output(cmd, "run over unix sockets");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut cmd = redlock(&c.unix_addrs());
    cmd.args(["lock", "--resource", &key]);
    let o = output(cmd, "lock over unix sockets");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(holders(&c, &key), 3);
    // `--scripts eval` works on every server.
    let key = resource("cli-eval");
    let mut cmd = redlock(&c.unix_addrs());
    cmd.args(["--scripts", "eval", "run", "--resource", &key, "--", "true"]);
    let o = output(cmd, "run with --scripts eval");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut cmd = redlock(&c.addrs());
    cmd.args(["--scripts", "lua", "lock", "--resource", &key]);
    assert_fails(&output(cmd, "bad --scripts"), 2, "lua");
}

#[test]
fn tls_nodes_from_the_command_line() {
    let dir = std::env::temp_dir().join(format!("redlock-cli-tls-{}", std::process::id()));
    let files = testkit::tls::TlsFiles::generate(&dir).unwrap();
    let c = match testkit::local::LocalCluster::start_tls(3, &files, true) {
        Ok(c) => c,
        // Only a server given in REDLOCK_REDIS_SERVER may lack TLS; Debian's has it.
        Err(e) if std::env::var_os("REDLOCK_REDIS_SERVER").is_some() => {
            eprintln!("TLS skipped: the server does not start with --tls-port ({e})");
            return;
        }
        Err(e) => panic!("Debian's redis-server should serve TLS: {e}"),
    };
    let key = resource("cli-tls");
    let ca = files.ca.display().to_string();
    let (cert, pkey) = (
        files.client_cert.display().to_string(),
        files.client_key.display().to_string(),
    );
    let mut cmd = redlock(&c.tls_addrs());
    cmd.args(["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &pkey])
        .args(["run", "--resource", &key, "--", "true"]);
    let o = output(cmd, "run over mutual TLS");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Without the client certificate every node refuses: unavailable, saying TLS.
    let mut cmd = redlock(&c.tls_addrs());
    cmd.args([
        "--retries",
        "0",
        "--tls-ca",
        &ca,
        "lock",
        "--resource",
        &key,
    ]);
    assert_fails(&output(cmd, "lock without a client certificate"), 69, "TLS");
    // A CA file that does not exist is a bad argument.
    let mut cmd = redlock(&c.tls_addrs());
    cmd.args([
        "--tls-ca",
        "/nonexistent/ca.pem",
        "lock",
        "--resource",
        &key,
    ]);
    assert_fails(&output(cmd, "missing CA file"), 2, "CA file");
}

#[test]
fn status_shows_the_holder_on_each_node() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-status-cmd");
    let mut cmd = redlock(&nodes);
    cmd.args(["status", "--resource", &key]);
    let o = output(cmd, "status of a free resource");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("not held by a quorum"),
        "{}",
        stdout(&o)
    );
    let mut cmd = redlock(&nodes);
    cmd.args(["lock", "--resource", &key]);
    let o = output(cmd, "lock");
    let token = stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .expect("token=")
        .to_string();
    let mut cmd = redlock(&nodes);
    cmd.args(["status", "--json", "--resource", &key]);
    let o = output(cmd, "status --json");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let json = stdout(&o);
    let shown = format!("{}…", &token[..8]);
    assert!(
        json.contains(&format!("\"held_by_quorum\":\"{shown}\"")),
        "{json}"
    );
    assert!(json.contains("\"state\":\"held\""), "{json}");
    assert_eq!(json.matches("\"ttl_ms\":").count(), 3, "{json}");
    assert!(
        !json.contains(&token),
        "the whole token is never shown: {json}"
    );
}

#[test]
fn run_exits_with_the_commands_status_and_releases() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-status");
    let cases: [(&[&str], i32); 4] = [
        (&["true"], 0),
        (&["sh", "-c", "exit 7"], 7),
        (&["sh", "-c", "kill -KILL $$"], 128 + 9),
        (&["/nonexistent/command"], 127),
    ];
    for (cmd_args, expected) in cases {
        let mut cmd = redlock(&nodes);
        cmd.args(["run", "--resource", &key, "--"]).args(cmd_args);
        let o = output(cmd, "run");
        assert_eq!(code(&o), expected, "{cmd_args:?}: {}", stderr(&o));
        assert_eq!(holders(&c, &key), 0, "{cmd_args:?}: released");
    }
    // The command really runs under the lock: it sees its own key on the nodes.
    let probe = format!("redis-cli -p {} GET {key}", c.servers()[0].port());
    let mut cmd = redlock(&nodes);
    cmd.args(["run", "--resource", &key, "--", "sh", "-c", &probe]);
    let o = output(cmd, "run redis-cli");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim().len(), 40, "a token: {:?}", stdout(&o));
}

#[test]
fn run_excludes_a_second_run_of_the_same_resource() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-exclude");
    let scratch = Scratch::new("exclude");

    let mut first = redlock(&nodes);
    first
        .args(["run", "--resource", &key])
        .args(shell_until(&scratch, "", ""));
    let first = first.spawn().expect("spawn first run");
    wait_for_file(&scratch.file("ready"), "the first run's command to start");
    assert_eq!(holders(&c, &key), 3, "held while the command runs");

    let second_ran = scratch.file("second-ran");
    let mut second = redlock(&nodes);
    second.args(["run", "--resource", &key, "--wait", "300ms", "--", "touch"]);
    second.arg(&second_ran);
    let started = Instant::now();
    let o = output(second, "second run");
    assert_fails(&o, 75, "held by another client");
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "it kept trying for --wait"
    );
    assert!(!second_ran.exists(), "the second command must not run");

    // A run still waiting for the lock gives up on SIGTERM, without running its command.
    // How many SETs node 0 has run: the waiting run's attempts are the only ones now.
    let sets = || testkit::calls(&nodes[0], "set");
    let before = sets();
    let mut waiting = redlock(&nodes);
    waiting
        .args(["run", "--resource", &key, "--wait", "60s", "--", "touch"])
        .arg(&second_ran);
    let waiting = waiting.spawn().expect("spawn waiting run");
    // Its first SET comes after its signal handlers are in.
    wait_until(LIMIT, "the waiting run's first attempt", || sets() > before);
    send_signal(waiting.id(), "TERM");
    let o = finish(waiting, "waiting run");
    assert_eq!(code(&o), 128 + 15, "{}", stderr(&o));
    assert!(!second_ran.exists(), "the waiting command must not run");
    assert_eq!(holders(&c, &key), 3, "the first run's lock is untouched");

    fs::write(scratch.file("go"), b"").unwrap();
    let o = finish(first, "first run");
    assert!(status_of(&o).success(), "{}", stderr(&o));
    assert_eq!(holders(&c, &key), 0);

    let mut third = redlock(&nodes);
    third
        .args(["run", "--resource", &key, "--", "touch"])
        .arg(&second_ran);
    assert_eq!(code(&output(third, "third run")), 0);
    assert!(second_ran.exists(), "runs once the lock is free");
}

/// `run --wait` waits for a held lock by being woken by the masters when the holder lets go:
/// with a retry delay of 30 s (polling would first try again after 15 s), the waiting run
/// starts its command moments after the first run ends. (Without fair mode, whose waiters
/// are rung instead: `cli/tests/fair.rs`.)
#[test]
fn run_wait_is_woken_when_the_holder_lets_go() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-wake");
    let scratch = Scratch::new("wake");
    let mut first = redlock(&nodes);
    first
        .arg("--no-fair")
        .args(["run", "--resource", &key])
        .args(shell_until(&scratch, "", ""));
    let first = first.spawn().expect("spawn first run");
    wait_for_file(&scratch.file("ready"), "the first run's command to start");

    let second_ran = scratch.file("second-ran");
    let mut second = Command::new(env!("CARGO_BIN_EXE_redlock"));
    second
        .env("REDLOCK_NODES", nodes.join(","))
        .args([
            "--node-timeout",
            "200ms",
            "--retry-delay",
            "30s",
            "--no-fair",
        ])
        .args(["run", "--resource", &key, "--wait", "120s", "--", "touch"])
        .arg(&second_ran)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut second = second.spawn().expect("spawn the waiting run");
    // Its refused try is followed by the read that the masters track.
    let tracked = |a: &String| {
        let info = redis(a, &["INFO", "stats"]);
        let text = String::from_utf8_lossy(info.as_bytes().expect("INFO is a string")).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("tracking_total_keys:"))
            .is_some_and(|n| n.trim() != "0")
    };
    wait_until(LIMIT, "the waiting run's read tracked", || {
        assert!(
            second.try_wait().expect("try_wait").is_none(),
            "the waiting run ended early"
        );
        nodes.iter().filter(|a| tracked(a)).count() >= 2
    });
    assert!(!second_ran.exists(), "the second command must wait");
    fs::write(scratch.file("go"), b"").unwrap();
    let o = finish(first, "first run");
    assert!(status_of(&o).success(), "{}", stderr(&o));
    let released = Instant::now();
    let o = finish(second, "waiting run");
    assert!(status_of(&o).success(), "{}", stderr(&o));
    assert!(second_ran.exists(), "the waiting command ran");
    let waited = released.elapsed();
    assert!(waited < Duration::from_secs(15), "woken after {waited:?}");
}

/// Every catchable terminating signal reaches the command, and redlock waits for it, so the
/// command never runs on after redlock released the lock (safety review, item 4: before,
/// SIGHUP and SIGQUIT ended redlock at once, exit 129/131, the key was released, and the
/// command ran on).
#[test]
fn terminating_signals_are_forwarded_and_the_lock_released() {
    let c = cluster(3);
    let nodes = c.addrs();
    for (sig, status) in [
        ("TERM", 42),
        ("INT", 43),
        ("HUP", 44),
        ("QUIT", 45),
        ("USR2", 46),
        ("ALRM", 47),
    ] {
        let key = resource(&format!("cli-signal-{sig}"));
        let scratch = Scratch::new(&format!("signal-{sig}"));
        let got = scratch.file("got");
        // The command lets go of redlock's output, so that if it outlived redlock, redlock's
        // output would still end (and the test fail rather than hang).
        let trap = format!(
            "exec >/dev/null 2>&1; trap \"touch '{}'; exit {status}\" {sig};",
            got.display()
        );
        let mut cmd = redlock(&nodes);
        cmd.args(["run", "--resource", &key])
            .args(shell_until(&scratch, &trap, ""));
        let child = cmd.spawn().expect("spawn run");
        wait_for_file(&scratch.file("ready"), "the command to start");
        send_signal(child.id(), sig);
        let o = finish(child, "signalled run");
        assert_eq!(
            code(&o),
            status,
            "SIG{sig}: exit with the command's status; {}",
            stderr(&o)
        );
        assert!(got.exists(), "SIG{sig} reached the command");
        assert_eq!(holders(&c, &key), 0, "released after SIG{sig}");
    }
}

/// Runs `redlock --ttl 1s run` with `run_args` and a command that starts with `setup`; once
/// it runs, another client takes the resource over on every node, so the next extension
/// fails. Returns redlock's output.
fn run_and_take_over(
    nodes: &[String],
    key: &str,
    scratch: &Scratch,
    run_args: &[&str],
    setup: &str,
) -> Output {
    let mut cmd = redlock(nodes);
    cmd.args(["--ttl", "1s", "run", "--resource", key])
        .args(run_args)
        .args(shell_until(scratch, setup, ""));
    let child = cmd.spawn().expect("spawn run");
    wait_for_file(&scratch.file("ready"), "the command to start");
    for a in nodes {
        redis(a, &["SET", key, "someone-else", "PX", "60000"]);
    }
    finish(child, "run losing its lock")
}

#[test]
fn a_lost_lock_signals_the_command_and_exits_76() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-lost");
    let scratch = Scratch::new("lost");
    let got = scratch.file("got");
    let trap = format!("trap \"touch '{}'; exit 0\" USR1;", got.display());
    let o = run_and_take_over(&nodes, &key, &scratch, &["--loss-signal", "USR1"], &trap);
    assert_eq!(code(&o), 76, "{}", stderr(&o));
    assert!(got.exists(), "the loss signal reached the command");
    assert!(stderr(&o).contains("lost"), "{}", stderr(&o));
    for a in &nodes {
        assert_eq!(
            get(a, &key).as_deref(),
            Some("someone-else"),
            "the other holder's key is left alone"
        );
    }

    // A command that ignores the loss signal is killed, and never later than the lock's
    // validity, whatever --kill-after says (safety review, item 4): with a 1 s ttl and
    // `--kill-after 1h` it is killed within the second, not an hour later.
    let key = resource("cli-lost-kill");
    let scratch = Scratch::new("lost-kill");
    let o = run_and_take_over(
        &nodes,
        &key,
        &scratch,
        &["--kill-after", "1h"],
        "exec >/dev/null 2>&1; trap '' TERM;",
    );
    assert_eq!(code(&o), 76, "{}", stderr(&o));
    assert!(stderr(&o).contains("killing"), "{}", stderr(&o));
}

#[test]
fn bench_reports_pairs_and_percentiles_as_json() {
    let c = cluster(3);
    for (client, depth) in [("blocking", "4"), ("async", "4")] {
        let mut cmd = redlock(&c.addrs());
        cmd.args([
            "bench",
            "--json",
            "--duration",
            "500ms",
            "--warmup",
            "100ms",
        ])
        .args(["--client", client, "--clients", "2", "--depth", depth]);
        let o = output(cmd, "bench");
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let json = stdout(&o);
        let pairs = json_number(&json, "pairs");
        assert!(pairs > 0, "{json}");
        assert!(json.contains("\"errors\":0,"), "{json}");
        assert!(
            json.contains("\"conflicts\":0,"),
            "distinct resources never conflict: {json}"
        );
        for field in ["p50_us", "p90_us", "p99_us", "p999_us", "max_us"] {
            assert!(json.contains(field), "{field} in {json}");
        }
    }
    let mut cmd = redlock(&c.addrs());
    cmd.args(["bench", "--client", "blocking", "--depth", "0"]);
    assert_fails(&output(cmd, "bench blocking depth 0"), 2, "--depth");
}

#[test]
fn demo_starts_its_own_masters_and_finds_no_overlap() {
    let mut cmd = redlock(&[]);
    cmd.env_remove("REDLOCK_NODES")
        .args(["demo", "--duration", "1500ms", "--clients", "4"]);
    let o = output(cmd, "demo");
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("5 local redis-server processes"), "{out}");
    assert!(out.contains("frozen (SIGSTOP)"), "{out}");
    assert!(out.contains("safety    OK"), "{out}");
}

/// Whether process `pid` is alive (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn read_pid(p: &Path) -> u32 {
    wait_for_file(p, "the pid file");
    let mut text = String::new();
    wait_until(LIMIT, "the pid written", || {
        text = fs::read_to_string(p).unwrap_or_default();
        text.trim().parse::<u32>().is_ok()
    });
    text.trim().parse().unwrap()
}

/// On loss the whole process group of the command is signalled, so that what it started stops
/// too (safety review, item 4). Before, only the shell got the signal and its `sleep 30` ran on
/// without the lock.
#[test]
fn a_lost_lock_stops_what_the_command_started_too() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-lost-group");
    let scratch = Scratch::new("lost-group");
    let pidfile = scratch.file("bg.pid");
    let setup = format!(
        "exec >/dev/null 2>&1; sleep 30 & echo $! > '{}';",
        pidfile.display()
    );
    let o = run_and_take_over(&nodes, &key, &scratch, &["--kill-after", "200ms"], &setup);
    assert_eq!(code(&o), 76, "{}", stderr(&o));
    let bg = read_pid(&pidfile);
    assert!(
        !alive(bg),
        "the command's background child {bg} outlived the lost lock"
    );
}

/// A command that ignores a forwarded signal keeps running, and redlock keeps holding the
/// lock for it until it exits.
#[test]
fn a_command_that_ignores_a_forwarded_signal_keeps_the_lock() {
    let c = cluster(3);
    let nodes = c.addrs();
    // A command that ignores SIGHUP keeps running, and redlock keeps holding the lock for it.
    let key = resource("cli-fwd-ignored");
    let scratch = Scratch::new("fwd-ignored");
    let mut cmd = redlock(&nodes);
    cmd.args(["run", "--resource", &key]).args(shell_until(
        &scratch,
        "exec >/dev/null 2>&1; trap '' HUP;",
        "",
    ));
    let child = cmd.spawn().expect("spawn run");
    wait_for_file(&scratch.file("ready"), "the command to start");
    send_signal(child.id(), "HUP");
    // A round trip to each node after the signal: the lock is still held on all of them.
    assert_eq!(
        holders(&c, &key),
        3,
        "the lock is kept while the command runs"
    );
    fs::write(scratch.file("go"), b"").unwrap();
    let o = finish(child, "run after an ignored SIGHUP");
    assert_eq!(
        code(&o),
        0,
        "redlock ended with its command: {}",
        stderr(&o)
    );
    assert_eq!(holders(&c, &key), 0);
}

/// SIGKILL of redlock cannot be caught; the kernel then sends the command SIGKILL
/// (PR_SET_PDEATHSIG), so it does not run on without anyone keeping its lock (safety review,
/// item 4).
#[test]
fn the_command_dies_with_a_sigkilled_redlock() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-pdeathsig");
    let scratch = Scratch::new("pdeathsig");
    let pidfile = scratch.file("cmd.pid");
    let setup = format!("exec >/dev/null 2>&1; echo $$ > '{}';", pidfile.display());
    let mut cmd = redlock(&nodes);
    cmd.args(["run", "--resource", &key])
        .args(shell_until(&scratch, &setup, ""));
    let child = cmd.spawn().expect("spawn run");
    wait_for_file(&scratch.file("ready"), "the command to start");
    let pid = read_pid(&pidfile);
    assert!(alive(pid));
    send_signal(child.id(), "KILL");
    let o = finish(child, "SIGKILLed run");
    assert!(o.status.code().is_none(), "redlock was killed: {o:?}");
    wait_until(LIMIT, "the command to get SIGKILL with its parent", || {
        !alive(pid)
    });
    // In case it did not: let it end.
    let _ = fs::write(scratch.file("go"), b"");
}

/// Durations past ten years are bad arguments (exit 2), not a panic from an overflowing
/// deadline (safety review, item 6; `--node-timeout 500000000000y` used to exit 101).
#[test]
fn absurd_durations_are_bad_arguments() {
    let c = cluster(3);
    let nodes = c.addrs();
    for args in [
        &["--node-timeout", "500000000000y", "lock", "--resource", "x"][..],
        &["--node-timeout", "2days", "lock", "--resource", "x"],
        &["--ttl", "500000000000y", "lock", "--resource", "x"],
        &["--ttl", "1ms", "lock", "--resource", "x"],
        &["--retry-delay", "500000000000y", "lock", "--resource", "x"],
        &[
            "run",
            "--resource",
            "x",
            "--wait",
            "500000000000y",
            "--",
            "true",
        ],
        &[
            "run",
            "--resource",
            "x",
            "--kill-after",
            "500000000000y",
            "--",
            "true",
        ],
    ] {
        let mut cmd = redlock(&nodes);
        cmd.args(args);
        let o = output(cmd, &format!("{args:?}"));
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{args:?}: {}", stderr(&o));
    }
}

#[cfg(feature = "trace")]
#[test]
fn run_trace_shows_each_operation_without_the_whole_token() {
    let c = cluster(3);
    let key = resource("cli-trace");
    let mut cmd = redlock(&c.addrs());
    cmd.args(["--trace", "run", "--resource", &key, "--"])
        .args(["sh", "-c", "echo $REDLOCK_TOKEN"]);
    let o = output(cmd, "run --trace");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let token = stdout(&o).trim().to_string();
    assert_eq!(token.len(), 40, "{token:?}");
    let err = stderr(&o);
    let closed = |op: &str| {
        err.lines().any(|l| {
            l.contains("close")
                && l.contains(&format!("op=\"{op}\""))
                && l.contains("outcome=\"ok\"")
                && l.contains(&key)
        })
    };
    assert!(closed("acquire"), "{err}");
    assert!(closed("release"), "{err}");
    assert!(err.contains(&format!("token=\"{}\"", &token[..8])), "{err}");
    assert!(!err.contains(&token), "the whole token on stderr:\n{err}");
}

#[cfg(feature = "metrics")]
#[test]
fn metrics_are_written_when_the_command_ends() {
    let c = cluster(3);
    let key = resource("cli-metrics");
    let scratch = Scratch::new("metrics");
    let file = scratch.file("run.prom");
    // run: the lock and its release are counted and timed, whatever the command's status.
    let mut cmd = redlock(&c.addrs());
    cmd.args([
        "--metrics",
        file.to_str().unwrap(),
        "run",
        "--resource",
        &key,
    ])
    .args(["--", "sh", "-c", "exit 3"]);
    let o = output(cmd, "run --metrics");
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let text = fs::read_to_string(&file).expect("the metrics file");
    for line in [
        "redlock_operations_total{op=\"acquire\",outcome=\"ok\"} 1",
        "redlock_operations_total{op=\"release\",outcome=\"ok\"} 1",
        "redlock_operation_seconds_count{op=\"acquire\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    assert!(text.contains("redlock_operation_seconds_bucket{op=\"acquire\",le=\"+Inf\"} 1"));
    // Described: exporters print what each metric counts.
    assert!(
        text.lines()
            .any(|l| l.starts_with("# HELP redlock_operations_total ")),
        "{text}"
    );
    let left: Vec<_> = fs::read_dir(&scratch.0).unwrap().collect();
    assert_eq!(left.len(), 1, "no temporary file left beside it: {left:?}");

    // bench: every pair it reports is an acquisition counted.
    let mut cmd = redlock(&c.addrs());
    cmd.args(["--metrics", file.to_str().unwrap(), "bench", "--json"])
        .args([
            "--duration",
            "300ms",
            "--warmup",
            "50ms",
            "--client",
            "blocking",
        ]);
    let o = output(cmd, "bench --metrics");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let json = stdout(&o);
    let pairs = json_number(&json, "pairs");
    let text = fs::read_to_string(&file).unwrap();
    let acquired: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("redlock_operations_total{op=\"acquire\",outcome=\"ok\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("acquisitions in:\n{text}"));
    assert!(
        pairs > 0 && acquired >= pairs,
        "{acquired} < {pairs}:\n{text}"
    );

    // A directory that does not exist is refused before anything runs.
    let marker = scratch.file("ran");
    let mut cmd = redlock(&c.addrs());
    cmd.args([
        "--metrics",
        "/nonexistent/dir/x.prom",
        "run",
        "--resource",
        &key,
    ])
    .args(["--", "touch", marker.to_str().unwrap()]);
    let o = output(cmd, "run --metrics into nowhere");
    assert_fails(&o, 2, "/nonexistent/dir");
    assert!(!marker.exists(), "the command ran");
}

#[cfg(feature = "plot")]
#[test]
fn bench_plot_draws_the_latency_histogram() {
    let c = cluster(3);
    let scratch = Scratch::new("plot");
    let svg = scratch.file("bench.svg");
    let mut cmd = redlock(&c.addrs());
    cmd.args(["bench", "--duration", "300ms", "--warmup", "50ms"])
        .args(["--plot", svg.to_str().unwrap()]);
    let o = output(cmd, "bench --plot");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = fs::read_to_string(&svg).expect("the picture");
    assert!(text.starts_with("<svg"), "{}", &text[..text.len().min(200)]);
    for label in ["pair p50", "pair p99", "share of rounds", "redlock bench: "] {
        assert!(text.contains(label), "{label} in the picture");
    }
    assert!(text.matches("<rect").count() > 3, "bars drawn");
}

/// A command that starts a helper in a session of its own with `setsid`, as daemonising tools
/// do, and exits 3 at once: the helper is in neither the command's process group nor its
/// session. The command writes its pid to `cmd.pid`, the helper (`helper` in `sh`) its own to
/// `helper.pid`; the helper's output goes to /dev/null, so that redlock's output ends with
/// redlock even if the helper outlives it.
fn daemonising(scratch: &Scratch, helper: &str) -> Vec<String> {
    let script = scratch.file("helper.sh");
    fs::write(
        &script,
        format!(
            "echo $$ > '{}'; {helper}",
            scratch.file("helper.pid").display()
        ),
    )
    .unwrap();
    let command = format!(
        "echo $$ > '{}'; setsid sh '{}' </dev/null >/dev/null 2>&1 & exit 3",
        scratch.file("cmd.pid").display(),
        script.display()
    );
    vec!["--".into(), "sh".into(), "-c".into(), command]
}

/// The helper's loop: until `go` appears, then `last`.
fn helper_until_go(scratch: &Scratch, setup: &str, last: &str) -> String {
    format!(
        "{setup} while [ ! -e '{go}' ]; do sleep 0.01; done; {last}",
        go = scratch.file("go").display()
    )
}

/// Starts `redlock --ttl 1s run` with `run_args` and a [`daemonising`] command; returns it
/// once the command has exited and only the helper is left, with the helper's pid.
fn run_with_a_daemon(
    nodes: &[String],
    key: &str,
    scratch: &Scratch,
    run_args: &[&str],
    helper: &str,
) -> (Child, u32) {
    let mut cmd = redlock(nodes);
    cmd.args(["--ttl", "1s", "run", "--resource", key])
        .args(run_args)
        .args(daemonising(scratch, helper));
    let child = cmd.spawn().expect("spawn run");
    let helper = read_pid(&scratch.file("helper.pid"));
    let command = read_pid(&scratch.file("cmd.pid"));
    wait_until(LIMIT, "the command to exit, leaving its helper", || {
        !alive(command)
    });
    (child, helper)
}

/// The lock is held until every descendant of the command has exited, not only its process
/// group (issue 22.2: a helper started with `setsid` kept running for 1.7 s after `run`
/// released, and another client took the lock 4 ms after the release).
#[test]
fn run_holds_the_lock_until_descendants_outside_its_group_exit() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-daemon");
    let scratch = Scratch::new("daemon");
    let done = scratch.file("done");
    let helper = helper_until_go(&scratch, "", &format!("touch '{}'", done.display()));
    let (mut child, helper) = run_with_a_daemon(&nodes, &key, &scratch, &[], &helper);
    // `run` keeps the lock for the helper alone: it is still there, and extended (at half the
    // 1 s ttl, so the key's ttl rises again) while the helper runs.
    let mut last = testkit::pttl(&nodes[0], &key);
    wait_until(LIMIT, "an extension while the helper runs", || {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "run ended (and released) while the command's helper {helper} still ran"
        );
        let now = testkit::pttl(&nodes[0], &key);
        let extended = now > last;
        last = now;
        extended
    });
    assert!(alive(helper), "the helper runs until told to stop");
    let mut other = redlock(&nodes);
    other.args(["--retries", "0", "lock", "--resource", &key]);
    assert_fails(
        &output(other, "lock while the helper runs"),
        75,
        "held by another client",
    );
    fs::write(scratch.file("go"), b"").unwrap();
    let o = finish(child, "run with a helper");
    assert_eq!(code(&o), 3, "the command's own status: {}", stderr(&o));
    assert!(done.exists(), "the helper finished before run ended");
    assert!(!alive(helper));
    assert_eq!(holders(&c, &key), 0, "released once the helper exited");
}

/// On loss, and on a signal sent to `run`, every descendant of the command is signalled, also
/// those that left its process group (issue 22.2); one that ignores the loss signal is killed.
#[test]
fn loss_and_signals_reach_descendants_outside_the_group() {
    let c = cluster(3);
    let nodes = c.addrs();
    let take_over = |key: &str| {
        for a in &nodes {
            redis(a, &["SET", key, "someone-else", "PX", "60000"]);
        }
    };

    // Loss, with the command gone and its helper left: the helper gets the loss signal.
    let key = resource("cli-daemon-lost");
    let scratch = Scratch::new("daemon-lost");
    let got = scratch.file("got");
    let trap = format!("trap \"touch '{}'; exit 0\" TERM;", got.display());
    let helper_script = helper_until_go(&scratch, &trap, "");
    let (child, helper) = run_with_a_daemon(&nodes, &key, &scratch, &[], &helper_script);
    take_over(&key);
    let o = finish(child, "run losing its lock with a helper left");
    let _ = fs::write(scratch.file("go"), b"");
    assert_eq!(code(&o), 76, "{}", stderr(&o));
    assert!(got.exists(), "the loss signal reached the helper");
    assert!(!alive(helper), "the helper {helper} outlived the lost lock");

    // A helper that ignores the loss signal is killed.
    let key = resource("cli-daemon-kill");
    let scratch = Scratch::new("daemon-kill");
    let helper_script = helper_until_go(&scratch, "trap '' TERM;", "");
    let (child, helper) = run_with_a_daemon(
        &nodes,
        &key,
        &scratch,
        &["--kill-after", "200ms"],
        &helper_script,
    );
    take_over(&key);
    let o = finish(child, "run losing its lock with a stubborn helper");
    let _ = fs::write(scratch.file("go"), b"");
    assert_eq!(code(&o), 76, "{}", stderr(&o));
    assert!(stderr(&o).contains("killing"), "{}", stderr(&o));
    assert!(!alive(helper), "the helper {helper} outlived the lost lock");

    // A signal sent to run reaches the helper; run then releases and exits with the command's
    // own status.
    let key = resource("cli-daemon-signal");
    let scratch = Scratch::new("daemon-signal");
    let got = scratch.file("got");
    let trap = format!("trap \"touch '{}'; exit 0\" TERM;", got.display());
    let helper_script = helper_until_go(&scratch, &trap, "");
    let (child, helper) = run_with_a_daemon(&nodes, &key, &scratch, &[], &helper_script);
    send_signal(child.id(), "TERM");
    let o = finish(child, "signalled run with a helper left");
    let _ = fs::write(scratch.file("go"), b"");
    assert_eq!(code(&o), 3, "the command's own status: {}", stderr(&o));
    assert!(got.exists(), "SIGTERM reached the helper");
    assert!(!alive(helper));
    assert_eq!(holders(&c, &key), 0);
}

/// With its stderr on a broken pipe, `run` still stops the command on loss and exits 76: the
/// command is signalled before anything is printed, and no failed write panics (issue 22.3:
/// the loss message panicked on EPIPE, exit 101, and the command's processes ran on after
/// another client took the lock). With `--trace` too, whose events go to the same stderr.
#[test]
fn a_lost_lock_stops_the_command_even_with_stderr_broken() {
    let c = cluster(3);
    let nodes = c.addrs();
    for trace in [false, true] {
        let key = resource("cli-lost-epipe");
        let scratch = Scratch::new(&format!("lost-epipe-{trace}"));
        let pidfile = scratch.file("bg.pid");
        let setup = format!(
            "exec >/dev/null 2>&1; sleep 30 & echo $! > '{}';",
            pidfile.display()
        );
        let mut cmd = redlock(&nodes);
        if trace && cfg!(feature = "trace") {
            cmd.arg("--trace");
        }
        cmd.args([
            "--ttl",
            "1s",
            "run",
            "--resource",
            &key,
            "--kill-after",
            "200ms",
        ])
        .args(shell_until(&scratch, &setup, ""));
        let mut child = cmd.spawn().expect("spawn run");
        // The read end of its stderr is closed: every write there fails with EPIPE.
        drop(child.stderr.take());
        wait_for_file(&scratch.file("ready"), "the command to start");
        let bg = read_pid(&pidfile);
        for a in &nodes {
            redis(a, &["SET", &key, "someone-else", "PX", "60000"]);
        }
        let o = finish(child, "run losing its lock, stderr broken");
        let _ = fs::write(scratch.file("go"), b"");
        assert_eq!(code(&o), 76, "trace {trace}: the loss code, not a panic");
        assert!(
            !alive(bg),
            "trace {trace}: the command's background child {bg} outlived the lost lock"
        );
    }
}

/// `lock` with its stdout on a broken pipe cannot hand out the token: it fails in one line
/// (exit 71) and releases the lock rather than leave it to its ttl, and nothing panics
/// (before: exit 101, the lock held and its token lost). `status` fails the same way.
#[test]
fn lock_and_status_with_stdout_broken_fail_in_one_line() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-lock-epipe");
    for args in [&["lock"][..], &["status"]] {
        let mut cmd = redlock(&nodes);
        cmd.args(args).args(["--resource", &key]);
        let mut child = cmd.spawn().expect("spawn");
        drop(child.stdout.take());
        let o = finish(child, "stdout broken");
        assert_fails(&o, 71, "stdout");
    }
    assert_eq!(
        holders(&c, &key),
        0,
        "the lock whose token was lost is released"
    );
}

/// Addresses where nothing listens: ports that were just free.
fn dead_ports(n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        })
        .collect()
}

/// `status` tells "not held" from "unknown": when too few nodes answered to rule out a holder,
/// it says so, shows each node's error and exits 69 (issue 23.5: with every node refusing it
/// exited 0 saying "not held by a quorum", JSON `held_by_quorum: null`).
#[test]
fn status_says_unknown_when_too_few_nodes_answer() {
    let c = cluster(3);
    let key = resource("cli-status-unknown");
    let status = |nodes: &[String], json: bool| {
        let mut cmd = redlock(nodes);
        cmd.args(["status", "--resource", &key]);
        if json {
            cmd.arg("--json");
        }
        output(cmd, "status")
    };

    // No node answers.
    let dead = dead_ports(3);
    let o = status(&dead, false);
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("unknown"), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("not held"), "{out}");
    assert!(out.contains("unknown: 0 of 3 nodes answered"), "{out}");
    assert_eq!(out.matches("connection refused").count(), 3, "{out}");
    let o = status(&dead, true);
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    let json = stdout(&o);
    assert!(json.contains("\"state\":\"unknown\""), "{json}");
    assert!(json.contains("\"answered\":0"), "{json}");
    assert_eq!(
        json.matches("\"error\":\"i/o error: connection refused\"")
            .count(),
        3,
        "{json}"
    );

    // Two of three answer, both free: no quorum can hold it, whatever the third holds.
    let mut two_and_dead = c.addrs()[..2].to_vec();
    two_and_dead.push(dead_ports(1).remove(0));
    let o = status(&two_and_dead, false);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("not held by a quorum"),
        "{}",
        stdout(&o)
    );
    let o = status(&two_and_dead, true);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let json = stdout(&o);
    assert!(json.contains("\"state\":\"not held\""), "{json}");
    assert!(json.contains("\"answered\":2"), "{json}");
    assert_eq!(json.matches("\"error\":null").count(), 2, "{json}");

    // One of the two that answer holds a token: with the silent third, a quorum could.
    redis(
        &c.addrs()[0],
        &["SET", &key, &"a".repeat(40), "PX", "60000"],
    );
    let o = status(&two_and_dead, false);
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    assert!(stdout(&o).contains("unknown"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("not held"), "{}", stdout(&o));
}

/// A password holding `?`, `@`, `/` or `#` logs in, and is never printed: not in an address
/// error (issue 23.6: `redis://app:s3cr?t@host` was shown in clear), not in `demo`'s list of
/// masters, which showed the addresses as given.
#[test]
fn passwords_with_any_character_work_and_are_never_printed() {
    let password = "S3CR?T@/#x";
    let c = LocalCluster::start_with(3, &["--requirepass", password]).expect("start");
    let nodes: Vec<String> = c
        .addrs()
        .iter()
        .map(|a| format!("redis://:{password}@{a}"))
        .collect();
    let key = resource("cli-password");
    let mut cmd = redlock(&nodes);
    cmd.args([
        "demo",
        "--duration",
        "300ms",
        "--clients",
        "2",
        "--no-faults",
    ]);
    let o = output(cmd, "demo on password-protected masters");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("masters"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("S3CR"), "{}", stdout(&o));
    let mut cmd = redlock(&nodes);
    cmd.args(["status", "--resource", &key]);
    let o = output(cmd, "status on password-protected masters");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for bad in [
        format!("redis://app:{password}@127.0.0.1:0"),
        format!("unix://app:{password}@/tmp/x.sock?color=red"),
    ] {
        let mut cmd = redlock(&[bad]);
        cmd.args(["lock", "--resource", &key]);
        let o = output(cmd, "bad address");
        assert_fails(&o, 2, "invalid node address");
        assert!(!stderr(&o).contains("S3CR"), "{}", stderr(&o));
    }
}

/// `run --wait` refuses the ttls `run` refuses: one too short to be kept alive (issue 23.7:
/// `run --ttl 20ms` exited 2, but `run --wait 1s --ttl 20ms` ran its command while sending
/// thousands of extensions a second).
#[test]
fn run_wait_refuses_the_ttls_run_refuses() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-wait-ttl");
    let scratch = Scratch::new("wait-ttl");
    let ran = scratch.file("ran");
    for wait in [&[][..], &["--wait", "1s"]] {
        let mut cmd = redlock(&nodes);
        cmd.args(["--ttl", "20ms", "run", "--resource", &key])
            .args(wait)
            .args(["--", "touch"])
            .arg(&ran);
        let o = output(cmd, "run with a ttl too short to keep");
        assert_fails(&o, 2, "ttl");
        assert!(!ran.exists(), "{wait:?}: the command ran");
        assert_eq!(holders(&c, &key), 0, "{wait:?}: nothing was locked");
    }
}

/// Durations documented as positive refuse zero with a usage error (issue 23.8:
/// `--retry-delay 0s` was accepted though the range is (0, 24 h]; a zero bench duration
/// printed `NaN` pairs per second into its JSON).
#[test]
fn zero_durations_are_bad_arguments() {
    let c = cluster(3);
    let nodes = c.addrs();
    for args in [
        &["--retry-delay", "0s", "lock", "--resource", "x"][..],
        &["--node-timeout", "0ms", "lock", "--resource", "x"],
        &["--ttl", "0s", "lock", "--resource", "x"],
        &["bench", "--json", "--duration", "0s", "--warmup", "0s"],
        &["demo", "--duration", "0s"],
    ] {
        // Without the test-friendly options of `redlock()`, which set --retry-delay.
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlock"));
        cmd.env("REDLOCK_NODES", nodes.join(","))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        assert_fails(&output(cmd, &format!("{args:?}")), 2, "0");
    }
    assert_eq!(holders(&c, "x"), 0, "nothing was locked");
}

/// The command's environment carries no node credentials: REDLOCK_NODES, which may hold
/// passwords, is not passed on, while the lock's own variables are (issue 23.9: with
/// passwords in REDLOCK_NODES, as the README suggests, the command saw them).
#[test]
fn run_does_not_hand_node_passwords_to_the_command() {
    let password = "S3CRET-pw";
    let c = LocalCluster::start_with(3, &["--requirepass", password]).expect("start");
    let nodes: Vec<String> = c
        .addrs()
        .iter()
        .map(|a| format!("redis://default:{password}@{a}"))
        .collect();
    let key = resource("cli-env");
    let mut cmd = redlock(&nodes);
    cmd.args(["run", "--resource", &key, "--", "env"]);
    let o = output(cmd, "run env");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let env = stdout(&o);
    assert!(
        !env.contains("S3CRET"),
        "a password in the command's environment:\n{env}"
    );
    assert!(!env.contains("REDLOCK_NODES="), "{env}");
    assert!(env.contains("REDLOCK_TOKEN="), "{env}");
    assert!(env.contains(&format!("REDLOCK_RESOURCE={key}")), "{env}");
    // Nor does `--help` show the variable's value.
    for args in [&["--help"][..], &["run", "--help"]] {
        let mut cmd = redlock(&nodes);
        cmd.args(args);
        let o = output(cmd, "help");
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert!(stdout(&o).contains("REDLOCK_NODES"), "{}", stdout(&o));
        assert!(!stdout(&o).contains("S3CRET"), "{}", stdout(&o));
    }
}

/// `--verify-stream`: every write pass to a master ends with a sentinel `PING`, and `run`
/// still takes the lock, runs the command under it and releases it. Counted on the masters
/// (`INFO commandstats`), against the same run without the flag.
#[test]
fn verify_stream_sends_a_sentinel_behind_each_pass() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-verify");
    let pings = |a: &String| testkit::calls(a, "ping");
    let mut counts = Vec::new();
    for flag in [None, Some("--verify-stream")] {
        let before: Vec<u64> = nodes.iter().map(pings).collect();
        let mut cmd = redlock(&nodes);
        cmd.args(flag);
        let probe = format!("redis-cli -p {} GET {key}", c.servers()[0].port());
        cmd.args(["run", "--resource", &key, "--", "sh", "-c", &probe]);
        let o = output(cmd, "run");
        assert_eq!(code(&o), 0, "{flag:?}: {}", stderr(&o));
        assert_eq!(stdout(&o).trim().len(), 40, "{flag:?}: ran under the lock");
        assert_eq!(holders(&c, &key), 0, "{flag:?}: released");
        let after: Vec<u64> = nodes.iter().map(pings).collect();
        counts.push(
            before
                .iter()
                .zip(&after)
                .map(|(b, a)| a - b)
                .collect::<Vec<_>>(),
        );
    }
    assert!(
        counts[0].iter().all(|&n| n == 0),
        "no sentinel without the flag: {counts:?}"
    );
    // The acquisition's pass and the release's, at least, on every master.
    assert!(
        counts[1].iter().all(|&n| n >= 2),
        "a sentinel per pass: {counts:?}"
    );
}
