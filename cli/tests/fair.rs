//! `redlock --fair`: fair waiters from the command line, against real masters. `status` shows
//! each master's line of waiters in order and the order a quorum agrees on; 32 `run --wait`
//! processes started at once each run their command once, one at a time, handed the lock by
//! the masters' bells.

use std::collections::HashMap;
use std::fs;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::script::QUEUE_PREFIX;
mod common;
use common::*;
use testkit::{calls, cluster, line_lengths, redis, resource, wait_until};

/// `redlock --fair` with the cluster's nodes in REDLOCK_NODES and the test-friendly node
/// timeout. The retry delay is 30 s: a wait that slept it would show in the time taken.
fn redlock(nodes: &[String]) -> Command {
    redlock_with(
        nodes,
        &["--fair", "--node-timeout", "200ms", "--retry-delay", "30s"],
    )
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The client ids of the resource's line on a master, first first, read with a plain
/// `ZRANGE`.
fn line_ids(addr: &str, key: &str) -> Vec<String> {
    let q = format!("{QUEUE_PREFIX}{key}");
    match redis(addr, &["ZRANGE", &q, "0", "-1"]) {
        Frame::Array(v) => v
            .iter()
            .map(|f| match f {
                Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("a member: {other:?}"),
            })
            .collect(),
        other => panic!("ZRANGE: {other:?}"),
    }
}

/// Takes the lock with `redlock --fair lock` for a minute; its token.
fn hold(nodes: &[String], key: &str) -> String {
    let mut cmd = redlock(nodes);
    cmd.args(["--ttl", "60s", "lock", "--resource", key]);
    let out = ok(&output(cmd, "lock"), "lock");
    out.lines()
        .find_map(|l| l.strip_prefix("token="))
        .expect("token=")
        .to_string()
}

fn unlock(nodes: &[String], key: &str, token: &str) {
    let mut cmd = redlock(nodes);
    cmd.args(["unlock", "--resource", key, "--token", token]);
    ok(&output(cmd, "unlock"), "unlock");
}

/// A holder and two fair waiters (`run --wait` processes that joined one after the other):
/// `status` shows both waiters in that order under every master, and as the agreed line;
/// `--json` has the same as fields. Once the holder lets go both run, and the line is empty.
#[test]
fn status_shows_the_line_of_fair_waiters_in_order() {
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-fair-status");
    let token = hold(&nodes, &key);
    let mut waiters = Vec::new();
    for i in 0..2 {
        let mut cmd = redlock(&nodes);
        cmd.args(["run", "--wait", "120s", "--resource", &key, "--", "true"]);
        waiters.push(cmd.spawn().expect("spawn a waiter"));
        // In every line before the next one starts: the order is theirs to keep.
        wait_until(LIMIT, "the waiter is in every line", || {
            line_lengths(&nodes, &key).iter().all(|&n| n == i + 1)
        });
    }
    let ids = line_ids(&nodes[0], &key);
    assert_eq!(ids.len(), 2);
    for a in &nodes {
        assert_eq!(line_ids(a, &key), ids, "the masters order the line alike");
    }

    let mut cmd = redlock(&nodes);
    cmd.args(["status", "--resource", &key]);
    let text = ok(&output(cmd, "status"), "status");
    let under_each = format!("  line: {} #1, {} #2  lease ", ids[0], ids[1]);
    assert_eq!(text.matches(&under_each).count(), 3, "{text}");
    let agreed = format!(
        "line: {}, {} (2 waiters, in this order on 3 of 3 nodes)",
        ids[0], ids[1]
    );
    assert!(text.lines().any(|l| l == agreed), "{agreed:?} in:\n{text}");
    assert!(text.contains("held by a quorum"), "{text}");

    let mut cmd = redlock(&nodes);
    cmd.args(["status", "--json", "--resource", &key]);
    let json = ok(&output(cmd, "status --json"), "status --json");
    let line = format!(
        "\"line\":{{\"waiters\":[{{\"id\":\"{}\",\"ticket\":1}},{{\"id\":\"{}\",\"ticket\":2}}],\"more\":false,\"lease_ms\":",
        ids[0], ids[1]
    );
    assert_eq!(json.matches(&line).count(), 3, "{json}");
    assert!(
        json.contains(&format!(
            "\"agreed_line\":{{\"waiters\":[\"{}\",\"{}\"],\"count\":2,\"in_order\":3,\"read\":3,\"agreed\":true}}",
            ids[0], ids[1]
        )),
        "{json}"
    );
    // The fields there before are unchanged: one ttl and one error per node.
    assert_eq!(json.matches("\"ttl_ms\":").count(), 3, "{json}");
    assert_eq!(json.matches("\"error\":null").count(), 3, "{json}");
    assert!(json.contains("\"state\":\"held\""), "{json}");

    unlock(&nodes, &key, &token);
    for (i, w) in waiters.into_iter().enumerate() {
        ok(&finish(w, "a waiter"), &format!("waiter {i}"));
    }
    let mut cmd = redlock(&nodes);
    cmd.args(["status", "--resource", &key]);
    let text = ok(&output(cmd, "status after"), "status after");
    assert!(
        text.lines().any(|l| l == "line: empty (3 of 3 nodes)"),
        "{text}"
    );
    assert!(!text.contains("  line:"), "{text}");
    let mut cmd = redlock(&nodes);
    cmd.args(["status", "--json", "--resource", &key]);
    let json = ok(&output(cmd, "status --json after"), "status --json after");
    assert!(json.contains("\"count\":0"), "{json}");
    assert!(line_lengths(&nodes, &key).iter().all(|&n| n == 0));
}

/// One entry of the shared log: `start` or `end`, the run's index, and the time in ns.
fn parse_log(text: &str) -> Vec<(bool, usize, u128)> {
    text.lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let what = f.next().expect("start or end");
            let i = f.next().and_then(|s| s.parse().ok()).expect("an index");
            let t = f.next().and_then(|s| s.parse().ok()).expect("a time");
            assert!(what == "start" || what == "end", "{l:?}");
            (what == "start", i, t)
        })
        .collect()
}

/// 32 `redlock --fair run --wait` processes started at once, while a holder holds the
/// resource, each running a command that appends its start and end to a shared log (O_APPEND)
/// around a 50 ms sleep. Checked: every command ran exactly once, and the log alternates
/// start/end of the same run (no two commands' windows overlap); no run slept its retry delay
/// (30 s, and no wait ended by `delay` in their traces); every release rang the next waiter on
/// a quorum of masters (at least a quorum's `PUBLISH`es per hand-off); and the hand-offs took, all
/// together, less time than 31 uncontended runs of the same command measured in this test (a
/// hand-off by a waiter's timer, up to eight claim leases, would take several times that).
#[test]
fn thirty_two_fair_runs_take_turns_handed_on_by_bells() {
    const RUNS: usize = 32;
    let c = cluster(3);
    let nodes = c.addrs();
    let key = resource("cli-fair-32");
    let scratch = Scratch::new("32");
    let log = scratch.0.join("log");
    let body = |i: usize| {
        let log = log.display();
        format!(
            "echo start {i} $(date +%s%N) >> '{log}'; sleep 0.05; echo end {i} $(date +%s%N) >> '{log}'"
        )
    };
    let run = |i: usize| {
        let mut cmd = redlock(&nodes);
        cmd.args(["--trace", "run", "--wait", "120s", "--resource", &key])
            .args(["--", "sh", "-c", &body(i)]);
        cmd
    };

    // One run alone, for the scale of everything else on this machine now.
    let alone = Instant::now();
    ok(&output(run(RUNS), "a run alone"), "a run alone");
    let single = alone.elapsed();
    fs::remove_file(&log).expect("the lone run's log");

    let token = hold(&nodes, &key);
    let children: Vec<Child> = (0..RUNS)
        .map(|i| run(i).spawn().expect("spawn a run"))
        .collect();
    wait_until(LIMIT, "every run in every line", || {
        line_lengths(&nodes, &key).iter().all(|&n| n == RUNS as i64)
    });
    for a in &nodes {
        redis(a, &["CONFIG", "RESETSTAT"]);
    }
    unlock(&nodes, &key, &token);
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|ch| finish(ch, "a fair run"))
        .collect();
    let mut delays = 0;
    for (i, o) in outputs.iter().enumerate() {
        ok(o, &format!("run {i}"));
        let err = String::from_utf8_lossy(&o.stderr);
        delays += err.matches("cause=\"delay\"").count();
    }
    assert_eq!(delays, 0, "a run slept its retry delay");

    // Each command once, one at a time: start i, end i, start j, end j...
    let entries = parse_log(&fs::read_to_string(&log).expect("the log"));
    assert_eq!(entries.len(), 2 * RUNS, "{entries:?}");
    let mut seen = HashMap::new();
    for pair in entries.chunks(2) {
        let [(true, i, _), (false, j, _)] = pair else {
            panic!("two commands ran at once: {entries:?}");
        };
        assert_eq!(i, j, "two commands ran at once: {entries:?}");
        assert!(seen.insert(*i, ()).is_none(), "run {i} ran twice");
    }
    assert_eq!(seen.len(), RUNS);

    // Every release rang the next waiter on a quorum of masters at least (the holder's and 31
    // runs'): a waiter wakes at a quorum of bells, and its claim may take a slower master
    // from the releasing token before that release lands there, which then rings nobody.
    let quorum = nodes.len() / 2 + 1;
    let published: u64 = nodes.iter().map(|a| calls(a, "publish")).sum();
    assert!(
        published >= (RUNS * quorum) as u64,
        "{published} bells over {} masters for {RUNS} hand-offs",
        nodes.len()
    );
    // The hand-offs: from one command's end to the next one's start.
    let handoffs: u128 = entries
        .chunks(2)
        .zip(entries.chunks(2).skip(1))
        .map(|(a, b)| b[0].2.saturating_sub(a[1].2))
        .sum();
    let handoffs = Duration::from_nanos(u64::try_from(handoffs).unwrap_or(u64::MAX));
    assert!(
        handoffs < single * (RUNS as u32 - 1),
        "31 hand-offs took {handoffs:?}; one run alone took {single:?}"
    );
    eprintln!("31 hand-offs: {handoffs:?} in all; one run alone: {single:?}");
}
