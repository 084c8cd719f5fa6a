//! Output that cannot panic. `println!` and `eprintln!` panic when the write fails: a closed
//! stdout or stderr, or a pipe whose reader has gone (Rust programs ignore SIGPIPE, so the
//! write returns EPIPE). A panic there would skip whatever came next, for `run` the signal to
//! its command on loss. Here a failed write to stderr is ignored, as there is nowhere left to
//! report it, and a failed write to stdout is returned as a failure of its own.

use std::fmt;
use std::io::{self, Write};

use crate::exit::Failure;

/// Writes one line on stderr, as `eprintln!` does, ignoring a failed write.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::err_line(format_args!($($arg)*))
    };
}
pub(crate) use errln;

/// The body of [`errln!`].
pub fn err_line(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// Writes `text` on stdout and flushes it; a failed write is a failure of the operating
/// system's kind, naming `what` was being written.
pub fn print(text: &str, what: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::os(&format!("writing {what} to stdout"), e))
}
