//! A child forked into a new pid namespace (`clone(CLONE_NEWPID)`, as sandboxes do) by a
//! process that is its own namespace's init (pid 1: a container's entrypoint) is pid 1 too:
//! the pid alone does not tell it from its creator. It must still get `Error::Forked` and never
//! touch the parent's connections (`Birth` compares the pid namespace for such a creator).
//!
//! The test re-runs itself as pid 1 of a new namespace (`unshare --pid --fork`, which needs
//! CAP_SYS_ADMIN: root, as CI is) and forks each trial's child into another new namespace;
//! parent and child are released together, the parent tries a resource a third client holds.
//! Its own test binary: it forks.

mod forking;

use std::time::Duration;

use redlock_mux::{Error, Redlock};

const TRIALS: usize = 60;
const TTL: Duration = Duration::from_secs(10);
const REFUSED: i32 = 0;
const GRANTED_HELD: i32 = 1;
const OTHERWISE: i32 = 2;
const INSIDE: &str = "REDLOCK_TEST_PIDNS_INSIDE";

/// fork(2) into a new pid namespace: the child is that namespace's pid 1.
#[allow(unsafe_code)]
fn fork_newpid(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: clone(2) without CLONE_VM and with a null stack behaves as fork(2) (the child
    // gets a copy of the address space and runs on its copy of this stack); the child runs
    // the closure and ends with _exit(2), as forking::fork's does.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWPID | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    } as libc::pid_t;
    assert!(pid >= 0, "clone: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child))
            .unwrap_or(forking::PANICKED);
        // SAFETY: ends the child at once, as forking::fork does.
        unsafe { libc::_exit(code) };
    }
    pid
}

#[test]
fn a_child_in_a_new_pid_namespace_is_told_from_its_creator() {
    if std::env::var_os(INSIDE).is_none() {
        // Re-run this test as pid 1 of a new pid namespace.
        let can = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "true"])
            .status()
            .is_ok_and(|s| s.success());
        if !can {
            eprintln!("SKIPPED: unshare --pid needs CAP_SYS_ADMIN (run as root, as CI does)");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child"])
            .arg(exe)
            .args([
                "--exact",
                "a_child_in_a_new_pid_namespace_is_told_from_its_creator",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(INSIDE, "1")
            .status()
            .expect("unshare(1)");
        assert!(status.success(), "inside the namespace: {status}");
        return;
    }
    assert_eq!(std::process::id(), 1, "not pid 1 of a namespace");
    let c = testkit::cluster(3);
    let build = || {
        testkit::builder(&c)
            .node_timeout(Duration::from_secs(2))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    };
    let holder = build();
    let held = holder
        .lock("pidns:held", Duration::from_secs(600))
        .expect("the third client's lock");
    let parent: Redlock = build();
    let warm = parent.lock("pidns:warm", TTL).expect("warm-up lock");
    parent.unlock(&warm).expect("warm-up release");

    let (mut parent_granted, mut child_granted, mut child_not_refused) = (0, 0, 0);
    let mut trials = 0;
    while trials < TRIALS && parent_granted + child_granted == 0 {
        let trial = trials;
        trials += 1;
        let gate = forking::Gate::new();
        let pid = fork_newpid(|| {
            gate.pass();
            let free = parent.try_lock(&format!("pidns:free:{trial}"), TTL);
            let taken = parent.try_lock("pidns:held", TTL);
            match (free, taken) {
                (_, Ok(_)) => GRANTED_HELD,
                (Err(Error::Forked), Err(Error::Forked)) => REFUSED,
                _ => OTHERWISE,
            }
        });
        gate.open();
        if parent.try_lock("pidns:held", TTL).is_ok() {
            parent_granted += 1;
        }
        match forking::wait(pid, Duration::from_secs(60)) {
            REFUSED => {}
            GRANTED_HELD => child_granted += 1,
            _ => child_not_refused += 1,
        }
    }
    eprintln!(
        "trials {trials}: parent granted {parent_granted}, child granted {child_granted}, \
         child not refused {child_not_refused}"
    );
    assert_eq!(
        child_not_refused + child_granted,
        0,
        "a child (pid 1 of a new pid namespace) used the parent's client: not refused with \
         Error::Forked in {} of {trials} trials",
        child_not_refused + child_granted
    );
    assert_eq!(
        (parent_granted, child_granted),
        (0, 0),
        "granted a resource another client holds on every node, in trial {trials}"
    );
    holder.unlock(&held).expect("the holder's release");
}
