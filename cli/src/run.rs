//! `redlock run`: a distributed `flock(1)`.
//!
//! Acquire, spawn the command, keep the lock alive with a [`LockGuard`] while it runs, release
//! when it and everything it started have exited. `redlock` is a subreaper
//! (`PR_SET_CHILD_SUBREAPER`): a descendant of the command whose parent exits becomes our
//! child, not init's, so "no child left" (waitpid(2) says ECHILD) means no descendant left,
//! whatever process group or session the descendants moved to. One loop waits for all that
//! can happen: a child exits (reap it; once none is left, release and exit with the command's
//! own status); the lock is lost (signal every descendant, give them `--kill-after` but never
//! past the lock's validity, then SIGKILL what is left; exit [`LOST`](exit::LOST)); a
//! terminating signal reaches us (pass it to every descendant and keep waiting).
//!
//! What remains possible, and is documented in `--help`: if `redlock` itself is killed with
//! SIGKILL, the command gets SIGKILL from the kernel (`PR_SET_PDEATHSIG`), but processes it
//! started are not signalled and keep running without the lock once its ttl runs out; a
//! `redlock` stopped with SIGSTOP cannot extend, so the lock may run out while the command
//! runs on; work the command hands to a process that is not its descendant (a service
//! manager, `at`, a daemon already running) is not watched at all; and a descendant we may
//! not signal (a setuid program, unless we run as root) is waited for, but runs on after a
//! loss.

// Process groups, signals, waitpid, pidfds and the prctls are only reachable through libc:
// each block below states why it is sound.
#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::fs;
use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::task::Poll;
use std::time::Duration;

use redlock_mux::{loss_margin, AsyncRedlock, Error, KeepAlive, Lock, LockGuard, OsRandom, Token};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::{sleep, sleep_until, Instant};

use crate::args::{describe, names, Global, RunArgs, NODES_ENV};
use crate::exit::{self, Failure};
use crate::out::errln;

/// Runs `redlock run`; returns the exit code.
pub fn run(global: &Global, a: &RunArgs) -> Result<u8, Failure> {
    let nodes = global.node_list();
    // Refuse bad options before starting anything.
    global.builder(&nodes)?;
    if let (Some(n), false) = (a.permits, a.resources.len() == 1) {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--permits {n} takes a permit of one semaphore: give --resource once, not {} times",
                a.resources.len()
            ),
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::os("starting the runtime", e))?;
    let code = rt.block_on(async {
        let mut signals =
            Signals::new().map_err(|e| Failure::os("installing signal handlers", e))?;
        become_subreaper().map_err(|e| Failure::os("becoming a subreaper", e))?;
        let redlock = global.async_client(&nodes)?;
        let resources = names(&a.resources);
        let acquired = tokio::select! {
            r = acquire(&redlock, &resources, global.ttl, a.wait, a.permits) => r,
            sig = signals.recv() => {
                // Dropping the acquisition queued a release of whatever it had taken; the
                // driver writes in order, so once one more round on the same nodes has been
                // answered, that release has gone out too.
                let nobody = Lock::from_token(&a.resources[0], Token::from_random(&mut OsRandom));
                let _ = redlock.unlock(&nobody).await;
                errln!("redlock: signal {sig} while acquiring {}; giving up", describe(&a.resources));
                return Ok(128 + sig as u8);
            }
        };
        let guard = acquired
            .map_err(|e| Failure::lock(&format!("lock {}", describe(&a.resources)), &e))?;
        supervise(guard, &mut signals, a).await
    });
    // Everything that matters has been answered (the release included); what is left (idle
    // connections, the driver task) goes with the process, without waiting for an orderly
    // shutdown.
    rt.shutdown_background();
    code
}

/// Acquires with the configured retries, or, given `wait`, with as many rounds as fit in it
/// (woken by the masters when the holder lets go, unless `--no-wakeups`). The lock is kept
/// alive without limit: a command may run for hours.
async fn acquire(
    redlock: &AsyncRedlock,
    resources: &[&str],
    ttl: Duration,
    wait: Option<Duration>,
    permits: Option<u32>,
) -> Result<LockGuard, Error> {
    let policy = KeepAlive::default().unlimited();
    if let Some(n) = permits {
        // A permit of the semaphore named by the one resource: a lock on one of its slots.
        // (`run` checked that it names one.)
        let name = resources.first().copied().unwrap_or_default();
        let semaphore = redlock_mux::Semaphore::new(name, n as usize)?;
        return match wait {
            None => {
                redlock
                    .acquire_permit_guarded_with(&semaphore, ttl, policy)
                    .await
            }
            Some(wait) => {
                redlock
                    .acquire_permit_guarded_within(&semaphore, ttl, wait, policy)
                    .await
            }
        };
    }
    // Both refuse, before acquiring anything, a ttl too short to be kept alive.
    match wait {
        None => redlock.lock_many_guarded_with(resources, ttl, policy).await,
        Some(wait) => {
            redlock
                .lock_many_guarded_within(resources, ttl, wait, policy)
                .await
        }
    }
}

/// How often exited children are looked for besides on SIGCHLD: a backstop only (every exit
/// of a child sends SIGCHLD, and one pass of `reap` takes every child that has exited).
const REAP_POLL: Duration = Duration::from_secs(1);

/// After the kill deadline, how often what is left of the command's processes is sent SIGKILL
/// again (one forked in the instant of the previous round, one not yet seen in `/proc`).
const KILL_REPEAT: Duration = Duration::from_millis(20);

/// How many times one signal walks `/proc` for descendants that have not had it yet (a walk
/// after the first finds only processes forked while the previous ones were being signalled).
const SIGNAL_ROUNDS: usize = 64;

/// The command to run under `lock`: `program` with `args`, told the lock in its environment
/// (`REDLOCK_RESOURCE(S)`, `REDLOCK_TOKEN`, `REDLOCK_FENCING_TOKEN`), without the nodes'
/// addresses, in a process group of its own.
fn command_for(
    lock: &redlock_mux::Lock,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("REDLOCK_RESOURCE", lock.resource())
        .env(
            "REDLOCK_RESOURCES",
            lock.resources().collect::<Vec<_>>().join("\n"),
        )
        .env("REDLOCK_TOKEN", lock.token().as_str())
        // The nodes' addresses may hold passwords: they are redlock's, not the command's. No
        // other variable redlock reads carries a secret (the TLS options name files, and are
        // taken from the command line only).
        .env_remove(NODES_ENV)
        // Its own process group, out of the terminal's foreground: a Ctrl-C reaches redlock,
        // which passes it on.
        .process_group(0);
    if let Some(t) = lock.fencing_token() {
        cmd.env("REDLOCK_FENCING_TOKEN", t.to_string());
    }
    cmd
}

/// Runs the command under the lock until it and every process descended from it have exited;
/// returns the exit code: the command's own status, or [`exit::LOST`].
async fn supervise(guard: LockGuard, signals: &mut Signals, a: &RunArgs) -> Result<u8, Failure> {
    let Some((program, args)) = a.command.split_first() else {
        return Err(Failure::new(exit::USAGE, "no command given after --"));
    };
    // Installed before the command starts, so that no exit goes unnoticed.
    let mut exits =
        signal(SignalKind::child()).map_err(|e| Failure::os("installing signal handlers", e))?;
    let mut cmd = command_for(&guard.lock(), program, args);
    die_with_parent(&mut cmd);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            let code = match e.kind() {
                io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            return Err(Failure::new(code, format!("cannot run {program:?}: {e}")));
        }
    };
    // std's `Child` is never waited on (dropping it does not wait either): every child of
    // ours, the command and the orphans of its descendants alike, is reaped by `reap`.
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return Err(Failure::new(exit::OS, "the command's pid is out of range"));
    };
    drop(child);
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let mut killing = false;
    let mut status: Option<ExitStatus> = None;
    // Until no child of ours is left. We are the subreaper: a descendant of the command whose
    // parent exits becomes our child, so every descendant is a child of ours or a descendant
    // of one, and no child means no descendant.
    while reap(pid, &mut status) {
        tokio::select! {
            _ = exits.recv() => {}
            _ = sleep(REAP_POLL) => {}
            loss = guard.lost(), if !lost => {
                // The command first: nothing that can fail or wait comes before the signal.
                signal_descendants(pid, status.is_none(), a.loss_signal);
                kill_at = Some(kill_deadline(&guard, a.kill_after));
                lost = true;
                errln!(
                    "redlock: lock {} lost ({loss}); sent signal {} to {program:?}",
                    describe(&a.resources), a.loss_signal
                );
            }
            sig = signals.recv() => signal_descendants(pid, status.is_none(), sig),
            _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                signal_descendants(pid, status.is_none(), libc::SIGKILL);
                kill_at = Instant::now().checked_add(KILL_REPEAT);
                if !killing {
                    killing = true;
                    errln!(
                        "redlock: {program:?} still running after the loss signal; killing it \
                         (--kill-after {:?}, bounded by the lock's validity)",
                        a.kill_after
                    );
                }
            }
        }
    }
    let status = status.ok_or_else(|| Failure::new(exit::OS, "the command's status was lost"))?;
    if lost {
        // Whatever of it is still ours on some nodes is freed now rather than at its ttl.
        let _ = guard.release().await;
        return Ok(exit::LOST);
    }
    if let Err(e) = guard.release().await {
        // The command has finished its work under the lock; the lock runs out by itself.
        errln!(
            "redlock: warning: release of {} failed ({e}); it expires with its ttl",
            describe(&a.resources)
        );
    }
    Ok(exit::status_code(status))
}

/// When the command must be gone after a loss: `--kill-after` from now, but no later than half
/// the loss margin before the validity ends, so that it never outlives the lock.
fn kill_deadline(guard: &LockGuard, kill_after: Duration) -> Instant {
    let lock = guard.lock();
    let latest = lock
        .valid_until()
        .checked_sub(loss_margin(lock.ttl()) / 2)
        .unwrap_or(lock.valid_until());
    let latest = Instant::from_std(latest);
    let now = Instant::now();
    now.checked_add(kill_after).unwrap_or(latest).min(latest)
}

/// Makes the command get SIGKILL when `redlock` dies, even of SIGKILL, which no handler sees.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: getpid(2) has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe functions may be called: prctl(2), getppid(2) and raise(3) are, and
    // it touches no memory but the copied `parent` integer. It allocates nothing and takes no
    // lock.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the prctl took effect: nothing would signal us later.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Reaps every child that has exited, keeping the status of the command (`pid`); tells
/// whether any child is left. An unexpected error of waitpid(2) counts as a child left: the
/// lock is kept rather than released under a process that may still run.
fn reap(pid: libc::pid_t, status: &mut Option<ExitStatus>) -> bool {
    loop {
        let mut raw = 0;
        // SAFETY: waitpid(2) writes the status into a live integer and reads nothing of ours.
        // -1 with __WALL waits for any child, whatever signal it reports its exit with;
        // WNOHANG makes it return at once.
        let reaped = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG | libc::__WALL) };
        match reaped {
            0 => return true,
            p if p == pid => *status = Some(ExitStatus::from_raw(raw)),
            p if p > 0 => {}
            _ => match io::Error::last_os_error().raw_os_error() {
                Some(libc::ECHILD) => return false,
                Some(libc::EINTR) => {}
                _ => return true,
            },
        }
    }
}

/// Sends `sig` to every process descended from us: the command, what it started, and what
/// those left behind, whatever their process group or session.
///
/// As a signal to a process group does, it reaches each process present when it is sent and
/// none started after: a process group made only of our descendants gets it with one kill(2)
/// of the group, which the kernel makes atomic with forks in the group, so what a handler
/// starts in response does not get it too. A descendant in a group shared with other
/// processes gets it on its own. `/proc` is walked again until a walk finds no group or
/// process that has not had it (one that left its group while the signal was being sent).
/// Without a readable `/proc`, and while the command is unreaped (`command_unreaped`), the
/// command's process group gets it instead: the best that is then possible.
fn signal_descendants(command: libc::pid_t, command_unreaped: bool, sig: i32) {
    // SAFETY: getpgrp(2) has no preconditions.
    let own_group = unsafe { libc::getpgrp() };
    let mut groups_done = HashSet::new();
    let mut procs_done = HashSet::new();
    for _ in 0..SIGNAL_ROUNDS {
        let Ok(procs) = processes() else {
            if command_unreaped {
                // SAFETY: kill(2) with a negative pid signals a process group; it takes two
                // integers and touches no memory of ours. The group's id is the command's pid,
                // which names no other process or group while the command is unreaped.
                unsafe {
                    libc::kill(-command, sig);
                }
            }
            return;
        };
        let ours = descendants(&procs);
        let whole = |pgid: libc::pid_t| {
            pgid != own_group
                && procs
                    .values()
                    .all(|q| q.pgid != pgid || ours.contains(&q.pid))
        };
        let mut any = false;
        for p in ours.iter().filter_map(|pid| procs.get(pid)) {
            if groups_done.contains(&p.pgid) || procs_done.contains(&(p.pid, p.start)) {
                continue;
            }
            any = true;
            if whole(p.pgid) {
                groups_done.insert(p.pgid);
                // SAFETY: as above, for a group all of whose members are our descendants.
                // Its id names it while one of them lives; it could name another group only if
                // all of them were reaped and the number taken by a new group leader in the
                // moments since the walk, which needs the kernel's pids to wrap around.
                unsafe {
                    libc::kill(-p.pgid, sig);
                }
            } else {
                procs_done.insert((p.pid, p.start));
                send(*p, sig);
            }
        }
        if !any {
            return;
        }
    }
}

/// A process, as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: libc::pid_t,
    ppid: libc::pid_t,
    pgid: libc::pid_t,
    /// When it started, in clock ticks since boot: with the pid, it names one process.
    start: u64,
}

/// `/proc/PID/stat`'s pid, parent, process group and start time; `None` for a process that is
/// gone or a zombie (dead, waiting to be reaped: nothing to signal).
fn read_stat(pid: libc::pid_t) -> Option<Proc> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold any character: the fields come after its
    // last ')'. They are the state (field 3 of stat), the parent (4), the process group (5),
    // ..., the start time (22).
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if matches!(*fields.first()?, "Z" | "X" | "x") {
        return None;
    }
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every live process, from one pass over `/proc`.
fn processes() -> io::Result<HashMap<libc::pid_t, Proc>> {
    let mut procs = HashMap::new();
    for entry in fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Some(p) = read_stat(pid) {
            procs.insert(pid, p);
        }
    }
    Ok(procs)
}

/// The pids in `procs` whose line of parents reaches us. The pass over `/proc` is not atomic:
/// a line longer than the table (a loop through pids reused during the pass) is taken as not
/// ours.
fn descendants(procs: &HashMap<libc::pid_t, Proc>) -> HashSet<libc::pid_t> {
    // SAFETY: getpid(2) has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut verdicts: HashMap<libc::pid_t, bool> = HashMap::new();
    for &pid in procs.keys() {
        let mut line = Vec::new();
        let mut p = pid;
        let verdict = loop {
            if p == me {
                break true;
            }
            if let Some(&v) = verdicts.get(&p) {
                break v;
            }
            let Some(proc) = procs.get(&p) else {
                break false;
            };
            if line.len() > procs.len() {
                break false;
            }
            line.push(p);
            p = proc.ppid;
        };
        for p in line {
            verdicts.insert(p, verdict);
        }
    }
    verdicts
        .into_iter()
        .filter_map(|(pid, ours)| ours.then_some(pid))
        .collect()
}

/// Sends `sig` to `p` if it is still the process `/proc` showed: through a pidfd, opened
/// before its start time is checked again, so that a pid freed and taken by another process
/// since cannot be hit. Where the kernel has no pidfds (Linux before 5.3), by kill(2) right
/// after the check.
fn send(p: Proc, sig: i32) {
    let same = || read_stat(p.pid).is_some_and(|now| now.start == p.start);
    // SAFETY: pidfd_open(2) takes a pid and flags, and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) };
    let Ok(fd) = libc::c_int::try_from(fd) else {
        return;
    };
    if fd < 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) && same() {
            // SAFETY: kill(2) takes two integers and touches no memory of ours.
            unsafe {
                libc::kill(p.pid, sig);
            }
        }
        return;
    }
    // SAFETY: `fd` was just returned by pidfd_open and nothing else owns it; OwnedFd closes it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if same() {
        // SAFETY: pidfd_send_signal(2) takes the descriptor (open for the whole call), the
        // signal, a null siginfo (the kernel fills it in as for kill(2)) and no flags.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}

/// Makes orphaned descendants of the command our children rather than init's, so that we can
/// wait for every one of them (see `reap`). Without it, `run` could not know when the last
/// one has exited, and does not run the command.
fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER takes integers and reads no memory.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Every signal whose default action ends a process and that a handler can catch: caught so
/// that it reaches the command and its descendants instead of ending us and orphaning them.
/// (SIGKILL and
/// SIGSTOP cannot be caught; SIGSEGV, SIGBUS, SIGILL and SIGFPE mean a fault of our own, and
/// SIGPIPE is ignored by Rust programs.)
fn forwarded() -> Vec<i32> {
    let mut sigs = vec![
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGABRT,
        libc::SIGTRAP,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGSYS,
        libc::SIGSTKFLT,
    ];
    sigs.extend(libc::SIGRTMIN()..=libc::SIGRTMAX());
    sigs
}

/// The terminating signals, caught so that they reach the command instead of killing us.
struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    fn new() -> io::Result<Signals> {
        let streams = forwarded()
            .into_iter()
            .map(|sig| Ok((sig, signal(SignalKind::from_raw(sig))?)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal's number. Cancellation-safe.
    async fn recv(&mut self) -> i32 {
        poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*sig);
                }
            }
            Poll::Pending
        })
        .await
    }
}
