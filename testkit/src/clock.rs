//! Masters whose wall clock a test can step: `redis-server` under libfaketime (Debian's
//! `faketime` package, which `scripts/install-deps` installs).
//!
//! Each server reads its offset from a file of its own (`FAKETIME_TIMESTAMP_FILE`) on every
//! call for the time (`FAKETIME_NO_CACHE=1`), so [`SteppedServer::step`] moves its wall clock
//! while it runs, as an NTP step or an operator's `date -s` would. Its monotonic clock is left
//! alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`): Redis times its own timers and cron on it, and a
//! real step does not touch it either.
//!
//! Debian builds `redis-server` against the system's jemalloc, which libfaketime cannot start
//! under: libfaketime's initialization allocates, jemalloc's initialization reads the clock,
//! and the two recurse into each other (libfaketime's issue #130; the server then never
//! answers). glibc's `libc_malloc_debug.so.0`, preloaded first, routes `malloc` and its kin
//! to glibc's own allocator, which reads no clock; it is preloaded whenever it exists.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::local::LocalServer;

/// The libfaketime library: `$REDLOCK_LIBFAKETIME`, or where Debian's `faketime` package puts
/// it for any architecture (`/usr/lib/<triplet>/faketime/libfaketime.so.1`). `None` if it is
/// not installed.
/// Panics if `$REDLOCK_LIBFAKETIME` names no file: a setting that is wrong is not a library
/// that is missing.
pub fn libfaketime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDLOCK_LIBFAKETIME") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "REDLOCK_LIBFAKETIME={} is not a file",
            p.display()
        );
        return Some(p);
    }
    in_lib_dirs("faketime/libfaketime.so.1")
}

/// `name` under `/usr/lib/<triplet>/` or `/lib/<triplet>/`, the first found.
fn in_lib_dirs(name: &str) -> Option<PathBuf> {
    ["/usr/lib", "/lib"]
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flat_map(|dir| dir.filter_map(Result::ok))
        .map(|entry| entry.path().join(name))
        .find(|p| p.is_file())
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A local server whose wall clock can be stepped.
#[derive(Debug)]
pub struct SteppedServer {
    server: LocalServer,
    offset_file: PathBuf,
}

impl SteppedServer {
    /// Starts a server under `libfaketime` (see [`libfaketime`]), its wall clock in step with
    /// the machine's.
    pub fn start(libfaketime: &Path) -> io::Result<SteppedServer> {
        let offset_file = std::env::temp_dir().join(format!(
            "redlock-mux-clock-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&offset_file, "+0\n")?;
        let preload = match in_lib_dirs("libc_malloc_debug.so.0") {
            Some(malloc) => format!("{}:{}", malloc.display(), libfaketime.display()),
            None => libfaketime.display().to_string(),
        };
        let file = offset_file.display().to_string();
        let server = LocalServer::start_with_env(
            &[],
            &[
                ("LD_PRELOAD", &preload),
                ("FAKETIME_TIMESTAMP_FILE", &file),
                ("FAKETIME_NO_CACHE", "1"),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        );
        match server {
            Ok(server) => Ok(SteppedServer {
                server,
                offset_file,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&offset_file);
                Err(e)
            }
        }
    }

    /// Steps the server's wall clock to `ahead` (whole seconds) past the machine's, from
    /// wherever it was: every time the server reads from then on is that much later.
    pub fn step(&self, ahead: Duration) -> io::Result<()> {
        // Written whole and renamed over the old file, so that the server never reads half
        // of it.
        let tmp = self.offset_file.with_extension("new");
        std::fs::write(&tmp, format!("+{}\n", ahead.as_secs()))?;
        std::fs::rename(&tmp, &self.offset_file)
    }

    /// The server.
    pub fn server(&self) -> &LocalServer {
        &self.server
    }
}

impl Drop for SteppedServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.offset_file);
    }
}
