//! What the fork tests share: a child that runs a closure and exits with its code, a pipe to
//! release it, and a bounded wait for its exit status.
//!
//! The child ends with `_exit(2)` whatever happens (a panic included), so that it never runs
//! the test harness's code or the destructors of what it inherited.

// fork(2), pipe(2), waitpid(2) and their kin are only reachable through libc.
#![allow(unsafe_code, dead_code)]

use std::time::{Duration, Instant};

/// The exit code of a child whose closure panicked.
pub const PANICKED: i32 = 101;

/// A pipe: the parent writes one byte to the write end to release a child blocked reading.
pub struct Gate {
    rd: libc::c_int,
    wr: libc::c_int,
}

impl Gate {
    pub fn new() -> Gate {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe(2) writes two descriptors into the array it is given, which has room
        // for exactly two.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
        Gate {
            rd: fds[0],
            wr: fds[1],
        }
    }

    /// In the child: closes its copy of the write end (so that a parent that fails and closes
    /// its own lets the child go on to exit), then blocks until the parent opens the gate;
    /// returns whether it did.
    pub fn pass(&self) -> bool {
        // SAFETY: closes the child's copy of the write end, which the child never uses.
        unsafe { libc::close(self.wr) };
        let mut b = [0u8; 1];
        loop {
            // SAFETY: reads at most one byte into a live stack array.
            let n = unsafe { libc::read(self.rd, b.as_mut_ptr().cast(), 1) };
            if n >= 0 {
                return n == 1;
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return false;
            }
        }
    }

    /// In the parent: releases the child blocked in `pass`.
    pub fn open(&self) {
        // SAFETY: writes one byte from a live stack array to our own pipe.
        let n = unsafe { libc::write(self.wr, [1u8].as_ptr().cast(), 1) };
        assert_eq!(n, 1, "write to the gate");
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // SAFETY: closes the two descriptors this gate owns, used by nothing after this.
        unsafe {
            libc::close(self.rd);
            libc::close(self.wr);
        }
    }
}

/// Forks: the child runs `child` and exits with the code it returns ([`PANICKED`] if it
/// panics), never returning from this call; the parent gets the child's pid.
pub fn fork(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the callers fork from a test binary of one test, whose only other thread (the
    // harness's main thread) is blocked waiting for the test to end, and threads the test
    // itself started (a keeper) that hold no lock across their waits; the child uses what it
    // inherited only through the client under test and ends with _exit(2).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(PANICKED);
        // SAFETY: ends the child at once, without unwinding into the harness or running the
        // destructors of what it inherited.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits up to `limit` for child `pid` to exit and returns its exit code; a child still
/// running then is killed and the test fails.
pub fn wait(pid: libc::pid_t, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    let mut status = 0;
    loop {
        // SAFETY: polls our own child, writing its status into a live integer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if r == pid {
            assert!(
                libc::WIFEXITED(status),
                "child {pid} did not exit: {status}"
            );
            return libc::WEXITSTATUS(status);
        }
        if Instant::now() >= deadline {
            // SAFETY: kills and reaps our own child, which is still running.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("child {pid} still running after {limit:?} (killed)");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
