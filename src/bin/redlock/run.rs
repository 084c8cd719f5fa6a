//! `redlock run`: a distributed `flock(1)`.
//!
//! Acquire, spawn the command, keep the lock alive with a [`LockGuard`] while it runs, release
//! when it exits. Three things can happen while it runs, and one loop waits for all of them:
//! the command exits (release, exit with its status); the lock is lost (signal the command,
//! give it `--kill-after` to exit, then SIGKILL; exit [`LOST`](exit::LOST)); SIGINT or SIGTERM
//! reaches us (forward it to the command and keep waiting for it).

use std::io;
use std::time::Duration;

use rand::Rng;
use redlock_mux::{AsyncRedlock, Error, KeepAlive, Lock, LockGuard, Token};
use tokio::process::Command;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::{sleep, sleep_until, Instant};

use crate::args::{Global, RunArgs};
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
        let redlock = global.async_client(&nodes)?;
        let acquired = tokio::select! {
            r = acquire(&redlock, &a.resource, global.ttl, a.wait) => r,
            sig = signals.recv() => {
                eprintln!("redlock: signal {sig} while acquiring {:?}; giving up", a.resource);
                // Dropping the acquisition queued a release of whatever it had taken; the
                // driver writes in order, so once one more round on the same nodes has been
                // answered, that release has gone out too.
                let nobody = Lock::from_token(&a.resource, Token::generate());
                let _ = redlock.unlock(&nobody).await;
                return Ok(128 + sig as u8);
            }
        };
        let guard = acquired.map_err(|e| Failure::lock(&format!("lock {:?}", a.resource), &e))?;
        supervise(guard, &mut signals, a).await
    });
    // Everything that matters has been answered (the release included); what is left (idle
    // connections, the driver task) goes with the process, without waiting for an orderly
    // shutdown.
    rt.shutdown_background();
    code
}

/// Acquires with the configured retries, or, given `wait`, with as many rounds as fit in it.
async fn acquire(
    redlock: &AsyncRedlock,
    resource: &str,
    ttl: Duration,
    wait: Option<Duration>,
) -> Result<LockGuard, Error> {
    let Some(wait) = wait else {
        return redlock.lock_guarded(resource, ttl).await;
    };
    let deadline = Instant::now() + wait;
    let delay = redlock.config().retry_delay();
    loop {
        match redlock.try_lock(resource, ttl).await {
            Ok(lock) => return Ok(redlock.keep_alive(lock, KeepAlive::default())),
            Err(
                e @ (Error::Conflict { .. } | Error::NoQuorum { .. } | Error::ValiditySpent { .. }),
            ) => {
                // The same spread as the client's own retries: [delay/2, delay].
                let pause = rand::rng().random_range(delay / 2..=delay);
                if Instant::now() + pause >= deadline {
                    return Err(e);
                }
                sleep(pause).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Runs the command under the lock until it exits; returns the exit code.
async fn supervise(guard: LockGuard, signals: &mut Signals, a: &RunArgs) -> Result<u8, Failure> {
    let Some((program, args)) = a.command.split_first() else {
        return Err(Failure::new(exit::USAGE, "no command given after --"));
    };
    let mut child = match Command::new(program).args(args).spawn() {
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
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            loss = guard.lost(), if !lost => {
                lost = true;
                eprintln!(
                    "redlock: lock {:?} lost ({loss}); sending signal {} to {program:?}",
                    a.resource, a.loss_signal
                );
                send(&child, a.loss_signal);
                kill_at = Some(Instant::now() + a.kill_after);
            }
            sig = signals.recv() => send(&child, sig),
            _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                eprintln!("redlock: {program:?} still running {:?} after the loss signal; killing it", a.kill_after);
                send(&child, libc::SIGKILL);
                kill_at = None;
            }
        }
    };
    let status = status.map_err(|e| Failure::os("waiting for the command", e))?;
    if lost {
        // Whatever of it is still ours on some nodes is freed now rather than at its ttl.
        let _ = guard.release().await;
        return Ok(exit::LOST);
    }
    if let Err(e) = guard.release().await {
        // The command has finished its work under the lock; the lock runs out by itself.
        eprintln!(
            "redlock: warning: release of {:?} failed ({e}); it expires with its ttl",
            a.resource
        );
    }
    Ok(exit::status_code(status))
}

/// Sends `sig` to the child, if it has not been reaped.
fn send(child: &tokio::process::Child, sig: i32) {
    // `id` is None once the child has been waited for: its pid may then be reused.
    let Some(pid) = child.id() else { return };
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes two integers and reads or writes no memory of this process. The
    // pid is our own child's, not yet reaped (checked just above, on this thread, which is the
    // only one that waits for it), so it still names that child and no other process.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// SIGINT and SIGTERM, caught so that they reach the command instead of killing us.
struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    fn new() -> io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next signal's number. Cancellation-safe.
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
        }
    }
}
