//! `redlock run`: a distributed `flock(1)`.
//!
//! Acquire, spawn the command, keep the lock alive with a [`LockGuard`] while it runs, release
//! when it exits. The command runs in a process group of its own, and everything that reaches
//! it reaches the whole group, so that processes it starts are covered too. One loop waits for
//! all that can happen: the command exits (then for the rest of its group, which also runs
//! under the lock; then release, exit with its status); the lock is lost (signal the group,
//! give it `--kill-after` but never past the lock's validity, then SIGKILL; exit
//! [`LOST`](exit::LOST)); a terminating signal reaches us (forward it to the group and keep
//! waiting).
//!
//! What remains possible, and is documented in `--help`: if `redlock` itself is killed with
//! SIGKILL, the command gets SIGKILL from the kernel (`PR_SET_PDEATHSIG`), but processes it
//! started are not signalled and keep running without the lock once its ttl runs out; and a
//! `redlock` stopped with SIGSTOP cannot extend, so the lock may run out while the command
//! runs on.

// Process groups, signals and PR_SET_PDEATHSIG are only reachable through libc: each block
// below states why it is sound.
#![allow(unsafe_code)]

use std::future::poll_fn;
use std::io;
use std::process::ExitStatus;
use std::task::Poll;
use std::time::Duration;

use redlock_mux::{loss_margin, AsyncRedlock, Error, KeepAlive, Lock, LockGuard, Token};
use tokio::process::Command;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::{sleep, sleep_until, Instant};

use crate::args::{describe, names, Global, RunArgs};
use crate::exit::{self, Failure};

/// Runs `redlock run`; returns the exit code.
pub fn run(global: &Global, a: &RunArgs) -> Result<u8, Failure> {
    let nodes = global.node_list();
    // Refuse bad options before starting anything.
    global.builder(&nodes)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::os("starting the runtime", e))?;
    let code = rt.block_on(async {
        let mut signals =
            Signals::new().map_err(|e| Failure::os("installing signal handlers", e))?;
        become_subreaper();
        let redlock = global.async_client(&nodes)?;
        let resources = names(&a.resources);
        let acquired = tokio::select! {
            r = acquire(&redlock, &resources, global.ttl, a.wait) => r,
            sig = signals.recv() => {
                eprintln!("redlock: signal {sig} while acquiring {}; giving up", describe(&a.resources));
                // Dropping the acquisition queued a release of whatever it had taken; the
                // driver writes in order, so once one more round on the same nodes has been
                // answered, that release has gone out too.
                let nobody = Lock::from_token(&a.resources[0], Token::generate());
                let _ = redlock.unlock(&nobody).await;
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
) -> Result<LockGuard, Error> {
    let policy = KeepAlive::default().unlimited();
    let Some(wait) = wait else {
        return redlock.lock_many_guarded_with(resources, ttl, policy).await;
    };
    let lock = redlock.lock_many_within(resources, ttl, wait).await?;
    Ok(redlock.keep_alive(lock, policy))
}

/// How often the rest of the command's group is looked at once the command itself has exited.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Runs the command under the lock until it and every process of its group have exited;
/// returns the exit code.
async fn supervise(guard: LockGuard, signals: &mut Signals, a: &RunArgs) -> Result<u8, Failure> {
    let Some((program, args)) = a.command.split_first() else {
        return Err(Failure::new(exit::USAGE, "no command given after --"));
    };
    let lock = guard.lock();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("REDLOCK_RESOURCE", lock.resource())
        .env(
            "REDLOCK_RESOURCES",
            lock.resources().collect::<Vec<_>>().join("\n"),
        )
        .env("REDLOCK_TOKEN", lock.token().as_str())
        // Its own process group: a signal for the command reaches what it starts, too.
        .process_group(0);
    if let Some(t) = lock.fencing_token() {
        cmd.env("REDLOCK_FENCING_TOKEN", t.to_string());
    }
    die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
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
    // The group's id is the command's pid. It names this group and no other until every
    // member is reaped: the command by the wait below, the rest by `reap_group` (orphans of
    // the group come to us, the subreaper, rather than to init).
    let group = child.id().and_then(|p| libc::pid_t::try_from(p).ok());
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let mut status: Option<ExitStatus> = None;
    loop {
        if status.is_some() && !group.is_some_and(group_alive) {
            break;
        }
        tokio::select! {
            s = child.wait(), if status.is_none() => {
                status = Some(s.map_err(|e| Failure::os("waiting for the command", e))?);
            }
            _ = sleep(GROUP_POLL), if status.is_some() => {}
            loss = guard.lost(), if !lost => {
                lost = true;
                eprintln!(
                    "redlock: lock {} lost ({loss}); sending signal {} to {program:?}",
                    describe(&a.resources), a.loss_signal
                );
                signal_group(group, a.loss_signal);
                kill_at = Some(kill_deadline(&guard, a.kill_after));
            }
            sig = signals.recv() => signal_group(group, sig),
            _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                eprintln!(
                    "redlock: {program:?} still running after the loss signal; killing it \
                     (--kill-after {:?}, bounded by the lock's validity)",
                    a.kill_after
                );
                signal_group(group, libc::SIGKILL);
                kill_at = None;
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
        eprintln!(
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

/// Sends `sig` to every process of the command's group.
fn signal_group(group: Option<libc::pid_t>, sig: i32) {
    let Some(pgid) = group else { return };
    // SAFETY: kill(2) with a negative pid signals a process group; it takes two integers and
    // touches no memory of ours. The group is the command's, still named by its id: its
    // leader or an orphaned member is unreaped (see `supervise`), so the id has not been
    // reused.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Reaps the group's members that have exited (orphans reparented to us), then tells whether
/// any member is left. Only called once the command itself has been reaped.
fn group_alive(pgid: libc::pid_t) -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) with a negative pid waits for a child in that group, writing its
        // status into a live integer; WNOHANG makes it return at once.
        let reaped = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if reaped <= 0 {
            break;
        }
    }
    // SAFETY: kill(2) with signal 0 only checks that the group has a member.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

/// Makes orphaned descendants of the command our children rather than init's, so that the
/// group's id stays ours until we reap them (see `group_alive`).
pub fn become_subreaper() {
    // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER takes integers and reads no memory.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
}

/// Every signal whose default action ends a process and that a handler can catch: caught so
/// that it reaches the command's group instead of ending us and orphaning it. (SIGKILL and
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
