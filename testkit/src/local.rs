//! Throwaway local `redis-server` processes, for the demo, the examples, the tests and the
//! benchmarks.
//!
//! Each server listens on 127.0.0.1 on a free port and on a Unix socket in its own directory,
//! keeps nothing on disk (`save ""`, `appendonly no`, unless told otherwise), and is killed when its [`LocalServer`] is dropped, also when a test
//! panics. Servers can be stopped, paused (`SIGSTOP`), resumed and restarted on the same port,
//! for fault injection. Nothing here ever touches port 6379 or a server it did not start.
//!
//! Needs `redis-server` on the `PATH` (or in `REDLOCK_REDIS_SERVER`); the project's
//! `scripts/install-deps` installs Debian's package.
//!
//! # Examples
//! ```no_run
//! use testkit::local::LocalCluster;
//! let cluster = LocalCluster::start(5)?;
//! assert_eq!(cluster.addrs().len(), 5);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to start answering `PING`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Finds the `redis-server` binary: `$REDLOCK_REDIS_SERVER`, the `PATH`, or the usual places.
pub fn redis_server_path() -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("REDLOCK_REDIS_SERVER") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("REDLOCK_REDIS_SERVER={} is not a file", p.display()),
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "redis-server not found: run `bash scripts/install-deps` (Debian's redis-server), \
                 or set REDLOCK_REDIS_SERVER",
            )
        })
}

/// The major version of the server binary ([`redis_server_path`]), from `--version`
/// (`Redis server v=7.0.15 ...`, `Valkey server v=9.1.2 ...`).
pub fn server_major_version() -> io::Result<u32> {
    let out = Command::new(redis_server_path()?)
        .arg("--version")
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no version in {text:?}")))
}

/// The arguments that let a test send `DEBUG` to a server it started over loopback (Redis 7
/// and Valkey refuse it by default; older servers allow it and know no such option).
pub fn debug_command_args() -> io::Result<&'static [&'static str]> {
    Ok(if server_major_version()? >= 7 {
        &["--enable-debug-command", "local"]
    } else {
        &[]
    })
}

/// One `redis-server` process on a loopback port.
#[derive(Debug)]
pub struct LocalServer {
    port: u16,
    child: Option<Child>,
    paused: bool,
    dir: PathBuf,
    extra: Vec<String>,
    /// Environment variables the process starts with (beside the test's own).
    env: Vec<(String, String)>,
    /// TLS: the certificates, whether clients must present one, and the TLS port.
    tls: Option<(crate::tls::TlsFiles, bool)>,
    tls_port: u16,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A port that was free a moment ago (the kernel's pick for an ephemeral bind).
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

impl LocalServer {
    /// Starts a server on a free port with no persistence.
    pub fn start() -> io::Result<LocalServer> {
        Self::start_with(&[])
    }

    /// Starts a server that also serves TLS (on [`tls_port`](LocalServer::tls_port)) with
    /// `files`; clients must present a certificate when `auth_clients`. Fails if the binary
    /// was built without TLS.
    pub fn start_tls(files: &crate::tls::TlsFiles, auth_clients: bool) -> io::Result<LocalServer> {
        Self::start_inner(&[], Some((files.clone(), auth_clients)), &[])
    }

    /// Starts a server with extra `redis-server` arguments (such as `["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> io::Result<LocalServer> {
        Self::start_inner(extra, None, &[])
    }

    /// Starts a server whose process also gets the environment variables `env` (kept for
    /// restarts), such as an `LD_PRELOAD`.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> io::Result<LocalServer> {
        Self::start_inner(extra, None, env)
    }

    fn start_inner(
        extra: &[&str],
        tls: Option<(crate::tls::TlsFiles, bool)>,
        env: &[(&str, &str)],
    ) -> io::Result<LocalServer> {
        let dir = std::env::temp_dir().join(format!(
            "redlock-mux-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut server = LocalServer {
            port: 0,
            child: None,
            paused: false,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            tls,
            tls_port: 0,
        };
        // A port found free can be taken by someone else before the server binds it: retry
        // with another.
        let mut last = None;
        for _ in 0..8 {
            server.port = free_port()?;
            if server.tls.is_some() {
                server.tls_port = free_port()?;
            }
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let mut cmd = Command::new(redis_server_path()?);
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(self.unix_path())
            .args(["--unixsocketperm", "700"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--protected-mode", "yes"])
            .args(["--loglevel", "warning"])
            .args(["--logfile", ""])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .args(
                self.tls
                    .as_ref()
                    .map(|(files, auth)| files.server_args(self.tls_port, *auth))
                    .unwrap_or_default(),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server on port {} exited at start: {status}",
                    self.port
                )));
            }
            // Asked through this server's own Unix socket, not its port: a port found free a
            // moment ago may since have been taken by another test's server, which would
            // answer a PING on the port while this one exits for want of it.
            if ping_unix(&self.unix_path()) {
                self.child = Some(child);
                self.paused = false;
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis-server on port {} did not answer PING", self.port),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its address, `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The Unix domain socket it also listens on (in its own directory).
    pub fn unix_path(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// Its Unix socket as a node address, `unix:///…/redis.sock`.
    pub fn unix_addr(&self) -> String {
        format!("unix://{}", self.unix_path().display())
    }

    /// The TLS port (0 unless started with [`start_tls`](LocalServer::start_tls)).
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// Its TLS port as a node address, `rediss://127.0.0.1:port`.
    pub fn tls_addr(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (`SIGKILL`): it loses every key, as a crash would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Stops the server if running and starts a fresh one on the same port, with no keys.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.spawn()
    }

    /// Freezes the process (`SIGSTOP`): connections stay open, nothing is answered.
    pub fn pause(&mut self) -> io::Result<()> {
        self.signal("STOP")?;
        self.paused = true;
        Ok(())
    }

    /// Thaws a paused process (`SIGCONT`).
    pub fn resume(&mut self) -> io::Result<()> {
        self.signal("CONT")?;
        self.paused = false;
        Ok(())
    }

    fn signal(&self, sig: &str) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "server not running"))?;
        let status = Command::new("sh")
            .args(["-c", &format!("kill -s {sig} {pid}")])
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("kill -s {sig} {pid}: {status}")))
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if self.paused {
            let _ = self.resume();
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a server answers `PING` on `addr` within a short time (`-NOAUTH` counts: the
/// server is up, it only wants a password).
fn ping_unix(path: &std::path::Path) -> bool {
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(path) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && (&buf == b"+PONG\r\n" || buf.starts_with(b"-NOAUTH"))
}

/// Several independent local masters, as a Redlock deployment has.
#[derive(Debug)]
pub struct LocalCluster {
    servers: Vec<LocalServer>,
}

impl LocalCluster {
    /// Starts `n` servers.
    pub fn start(n: usize) -> io::Result<LocalCluster> {
        Self::start_with(n, &[])
    }

    /// Starts `n` servers with extra `redis-server` arguments.
    pub fn start_with(n: usize, extra: &[&str]) -> io::Result<LocalCluster> {
        let servers = (0..n)
            .map(|_| LocalServer::start_with(extra))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(LocalCluster { servers })
    }

    /// A cluster of servers started one by one (with different arguments, say).
    pub fn from_servers(servers: Vec<LocalServer>) -> LocalCluster {
        LocalCluster { servers }
    }

    /// Starts `n` servers that also serve TLS (see [`LocalServer::start_tls`]).
    pub fn start_tls(
        n: usize,
        files: &crate::tls::TlsFiles,
        auth_clients: bool,
    ) -> io::Result<LocalCluster> {
        let servers = (0..n)
            .map(|_| LocalServer::start_tls(files, auth_clients))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(LocalCluster { servers })
    }

    /// Every server's TLS address, in order.
    pub fn tls_addrs(&self) -> Vec<String> {
        self.servers.iter().map(LocalServer::tls_addr).collect()
    }

    /// Every server's Unix socket as a node address, in order.
    pub fn unix_addrs(&self) -> Vec<String> {
        self.servers.iter().map(LocalServer::unix_addr).collect()
    }

    /// The servers' addresses, `127.0.0.1:port`, in order.
    pub fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.addr().to_string()).collect()
    }

    /// How many servers there are.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Server `i`.
    pub fn server(&mut self, i: usize) -> &mut LocalServer {
        &mut self.servers[i]
    }

    /// Every server.
    pub fn servers(&self) -> &[LocalServer] {
        &self.servers
    }
}
