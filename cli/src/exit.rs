//! The exit codes, in one place, and the one-line failure every subcommand ends with.
//!
//! The numbers follow sysexits(3) where one fits, and the shell's conventions for a command
//! that cannot be run (126, 127) or that died of a signal (128 + the signal's number).

use redlock_mux::Error;

/// The operation did not do what was asked: `unlock` of a lock not held (expired, or another
/// token's), or `demo` found two holders at once.
pub const FAILED: u8 = 1;
/// Bad arguments: an unknown option, a duration or address that does not parse, no nodes.
pub const USAGE: u8 = 2;
/// The nodes cannot be reached (no quorum answered; for `status`, too few to tell whether the
/// lock is held), or `redis-server` is missing. EX_UNAVAILABLE.
pub const UNAVAILABLE: u8 = 69;
/// An error of the operating system (a runtime or a thread could not be started, stdout could
/// not be written). EX_OSERR.
pub const OS: u8 = 71;
/// The lock is held by another client (after the retries, or `--wait`). EX_TEMPFAIL.
pub const CONFLICT: u8 = 75;
/// `run`: the lock was lost while the command ran; the command was signalled.
pub const LOST: u8 = 76;
/// `run`: the command was found but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit codes as `--help` shows them.
pub const TABLE: &str = "\
Exit codes:
  0    success (for `run`: the command's own status, 128+N if it died of signal N)
  1    unlock: the lock was not held (expired, or another token's); demo: exclusion violated
  2    bad arguments (unknown option, bad duration or address, no nodes)
  69   nodes unreachable (no quorum answered; status: too few to tell), or redis-server
       missing
  71   operating system error (also: stdout could not be written)
  75   the lock is held by another client
  76   run: the lock was lost while the command ran (the command was signalled)
  126  run: the command could not be executed
  127  run: the command was not found
  130  run: SIGINT (143: SIGTERM) while waiting for the lock; the command was not run";

/// A failure: the line printed on stderr (after `redlock: `) and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// One line, no trailing newline.
    pub message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A failure of the operating system, with what was being done.
    pub fn os(doing: &str, e: std::io::Error) -> Failure {
        Failure::new(OS, format!("{doing}: {e}"))
    }

    /// The failure of a lock operation, with what was being done and the code its kind maps to.
    pub fn lock(doing: &str, e: &Error) -> Failure {
        Failure::new(code_of(e), format!("{doing}: {e}"))
    }
}

/// The exit code for a lock error.
pub fn code_of(e: &Error) -> u8 {
    match e {
        Error::Conflict { .. } | Error::ValiditySpent { .. } => CONFLICT,
        Error::NoQuorum { .. } => UNAVAILABLE,
        Error::NotHeld { .. } | Error::Expired => FAILED,
        Error::Config(_) => USAGE,
        // Error is non-exhaustive: a kind added later is at least a failure.
        _ => FAILED,
    }
}

/// The exit status of a child as a shell reports it: its code, or 128 + the signal.
pub fn status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        (None, None) => FAILED,
    }
}
