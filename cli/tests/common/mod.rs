//! What the command's test files share: running `redlock` with a cluster's nodes, waiting for
//! a child with a bound, and scratch directories.

#![allow(dead_code)] // each test file uses its own part

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Long enough for a loaded 2-core machine; a run that takes longer has hung.
pub const LIMIT: Duration = Duration::from_secs(60);

/// `redlock` with `nodes` in REDLOCK_NODES, the given options first, stdin closed and the
/// output captured.
pub fn redlock_with(nodes: &[String], options: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_redlock"));
    c.env("REDLOCK_NODES", nodes.join(","))
        .args(options)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Waits for a child, up to [`LIMIT`]; kills it and fails the test if it does not end.
pub fn finish(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + LIMIT;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("{what}: still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `cmd` to its end (see [`finish`]).
pub fn output(mut cmd: Command, what: &str) -> Output {
    finish(cmd.spawn().expect("spawn redlock"), what)
}

/// A scratch directory of the test's own, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("redlock-cli-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
