//! `redlock run --permits N`: a permit of a semaphore rather than a lock, from separate
//! processes against real masters: at most N commands run at once.

use std::fs;

mod common;
use common::*;
use testkit::{cluster, resource};

/// Six `run --permits 2 --wait` processes started at once each run their command once; each
/// command notes its start and end in a file of its own, and at no moment did more than two
/// run (counted from those notes, which lie between each permit's grant and release). Each
/// command is told its slot's key.
#[test]
fn at_most_n_commands_run_at_once_under_permits() {
    let c = cluster(5);
    let nodes = c.addrs();
    let name = resource("cli-permits");
    let scratch = Scratch::new("permits");
    let children: Vec<_> = (0..6)
        .map(|i| {
            let log = scratch.file(&format!("run-{i}"));
            let script = format!(
                "echo \"S $(date +%s%N) $REDLOCK_RESOURCE\" >> {p}; sleep 0.3; echo \"E $(date +%s%N)\" >> {p}",
                p = log.display()
            );
            let mut cmd = redlock_with(&nodes, &["--node-timeout", "200ms", "--retry-delay", "50ms"]);
            cmd.args(["run", "--permits", "2", "--wait", "60s", "--resource", &name, "--"])
                .args(["sh", "-c", &script]);
            cmd.spawn().expect("spawn redlock")
        })
        .collect();
    let mut events: Vec<(u128, i32)> = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = finish(child, "run --permits");
        assert!(
            out.status.success(),
            "run {i}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let log =
            fs::read_to_string(scratch.file(&format!("run-{i}"))).expect("the command's notes");
        let mut lines = log.lines();
        let start: Vec<&str> = lines.next().expect("a start").split(' ').collect();
        let end: Vec<&str> = lines.next().expect("an end").split(' ').collect();
        assert_eq!((start[0], end[0]), ("S", "E"), "{log}");
        let slot = start[2];
        assert!(
            slot == format!("{name}:permit:0") || slot == format!("{name}:permit:1"),
            "told a slot of the semaphore: {slot}"
        );
        events.push((start[1].parse().unwrap(), 1));
        events.push((end[1].parse().unwrap(), -1));
    }
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    assert!((1..=2).contains(&most), "{most} commands ran at once");
}

/// `--permits` names one semaphore: a second `--resource` is a usage error (exit 2) before
/// anything is acquired.
#[test]
fn permits_take_one_resource() {
    let c = cluster(3);
    let nodes = c.addrs();
    let mut cmd = redlock_with(&nodes, &[]);
    cmd.args([
        "run",
        "--permits",
        "2",
        "--resource",
        "a",
        "--resource",
        "b",
        "--",
        "true",
    ]);
    let out = output(cmd, "run --permits with two resources");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--permits 2") && err.contains("--resource once"),
        "{err}"
    );
    for n in ["0", "257"] {
        let mut cmd = redlock_with(&nodes, &[]);
        cmd.args(["run", "--permits", n, "--resource", "a", "--", "true"]);
        let out = output(cmd, "run --permits out of range");
        assert_eq!(out.status.code(), Some(2), "--permits {n}: {out:?}");
    }
}

/// `status --permits N` shows each slot of the semaphore and how many permits a quorum holds:
/// with two of three permits taken (through the library), two slots read held by their
/// tokens and one not held, in text and in `--json`; an out-of-range N is a usage error.
#[test]
fn status_shows_the_permits_a_quorum_holds() {
    let c = cluster(3);
    let nodes = c.addrs();
    let name = resource("cli-permits-status");
    let client = redlock_mux::Redlock::builder()
        .nodes(nodes.clone())
        .build()
        .unwrap();
    let sem = redlock_mux::Semaphore::new(&name, 3).unwrap();
    let ttl = std::time::Duration::from_secs(60);
    let held: Vec<_> = (0..2)
        .map(|_| client.try_acquire_permit(&sem, ttl).expect("a free permit"))
        .collect();
    let mut cmd = redlock_with(&nodes, &[]);
    cmd.args(["status", "--resource", &name, "--permits", "3"]);
    let out = output(cmd, "status --permits");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text.contains("2 of 3 permits held by a quorum, 0 unknown"),
        "{text}"
    );
    for p in &held {
        let slot = sem
            .slot_of(p.resources().next().expect("one resource"))
            .expect("a slot");
        let key = sem.slot_key(slot).unwrap();
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{key}  held: "))),
            "{key}: {text}"
        );
    }
    assert_eq!(
        text.lines().filter(|l| l.ends_with("not held")).count(),
        1,
        "{text}"
    );
    let mut cmd = redlock_with(&nodes, &[]);
    cmd.args(["status", "--resource", &name, "--permits", "3", "--json"]);
    let out = output(cmd, "status --permits --json");
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        json.contains("\"permits\":3,\"held\":2,\"unknown\":0,\"slots\":[{"),
        "{json}"
    );
    assert_eq!(json.matches("\"state\":\"held\"").count(), 2, "{json}");
    for p in &held {
        client.unlock(p).unwrap();
    }
    for n in ["0", "257"] {
        let mut cmd = redlock_with(&nodes, &[]);
        cmd.args(["status", "--resource", &name, "--permits", n]);
        let out = output(cmd, "status --permits out of range");
        assert_eq!(out.status.code(), Some(2), "--permits {n}: {out:?}");
    }
}
