//! The command line: global options, subcommands, and the parsers for durations and signals.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use redlock_mux::{AsyncRedlock, Builder, Redlock};
use testkit::local::{redis_server_path, LocalCluster};

use crate::exit::{self, Failure};

/// The variable `--nodes` is read from. Its addresses may hold passwords: `run` keeps it from
/// its command.
pub const NODES_ENV: &str = "REDLOCK_NODES";

/// A distributed lock over N independent Redis masters (Redlock).
#[derive(Debug, Parser)]
#[command(name = "redlock", version, after_help = exit::TABLE)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The options every subcommand takes.
#[derive(Debug, Args)]
pub struct Global {
    /// The masters: comma-separated `host:port` or `redis://[:password@]host:port[/db]`.
    // `--help` shows the variable's name, never its value: it may hold passwords.
    #[arg(
        long,
        env = NODES_ENV,
        hide_env_values = true,
        value_delimiter = ',',
        global = true
    )]
    pub nodes: Vec<String>,
    /// How long a lock lives on the nodes unless extended (`10s`, `250ms`, `1m`).
    #[arg(long, default_value = "10s", value_parser = positive_duration, global = true)]
    pub ttl: Duration,
    /// How long each node has to answer one command: above zero, at most 24h.
    #[arg(long, default_value = "50ms", value_parser = positive_duration, global = true)]
    pub node_timeout: Duration,
    /// How many more rounds an acquisition tries after the first.
    #[arg(long, default_value_t = 2, global = true)]
    pub retries: u32,
    /// The upper bound of the random delay between rounds (drawn from [delay/2, delay]): above
    /// zero, at most 24h.
    #[arg(long, default_value = "200ms", value_parser = positive_duration, global = true)]
    pub retry_delay: Duration,
    /// Fenced locks: each lock gets a fencing token, a number greater than every earlier
    /// holder's (printed by `lock`, given to `run`'s command as REDLOCK_FENCING_TOKEN). Every
    /// client of a resource must agree on this and on --fencing-key.
    #[arg(long, env = "REDLOCK_FENCING", global = true)]
    pub fencing: bool,
    /// The key of the fencing counter on every master.
    #[arg(long, default_value = redlock_mux::DEFAULT_FENCING_KEY, global = true)]
    pub fencing_key: String,
    /// Wait for a held lock by polling (sleeping the retry delay between rounds) instead of
    /// being woken by the masters when the holder lets go (RESP3 client-side tracking).
    #[arg(long, env = "REDLOCK_NO_WAKEUPS", global = true)]
    pub no_wakeups: bool,
    /// Fair mode, the default: waiters line up on the masters and each release hands the
    /// lock to the first of them, waking no other (`Builder::fair`). Every client of a
    /// resource should use the same mode; it needs wake-ups and is off with --scripts
    /// native. (Accepted for scripts written when it was off by default.)
    #[arg(long, env = "REDLOCK_FAIR", global = true, overrides_with = "no_fair")]
    pub fair: bool,
    /// Fair mode off: every release wakes every waiter of the resource, which races for it
    /// (`Builder::fair(false)`).
    #[arg(long, env = "REDLOCK_NO_FAIR", global = true, overrides_with = "fair")]
    pub no_fair: bool,
    /// Check every reply against the stream: each write pass to a master ends with a `PING`
    /// whose nonce must come back in its place before the replies before it count. For a
    /// path that may lose bytes (a broken proxy); costs one command per master per pass.
    #[arg(long, env = "REDLOCK_VERIFY_STREAM", global = true)]
    pub verify_stream: bool,
    /// Print the library's spans and events on stderr as they happen: one line per operation
    /// (resource, outcome, elapsed, every node's answer on failure, a token's first 8
    /// characters), reconnects, script fallbacks, wake-ups, extensions and losses.
    #[cfg(feature = "trace")]
    #[arg(long, env = "REDLOCK_TRACE", global = true)]
    pub trace: bool,
    /// When the command ends, write the library's metrics to FILE in Prometheus' text format
    /// (`-` for stdout): operations by outcome and their latency, reconnects, script
    /// fallbacks, extensions, losses, waits by what ended them. The file is replaced whole
    /// (written beside it, then renamed), as node_exporter's textfile collector wants.
    #[cfg(feature = "metrics")]
    #[arg(long, value_name = "FILE", env = "REDLOCK_METRICS", global = true)]
    pub metrics: Option<std::path::PathBuf>,
    /// How releases and extensions are sent: `auto` (native commands where the server has
    /// them, Lua scripts elsewhere), `eval` (scripts everywhere), `function` (the scripts as a
    /// function library, FUNCTION LOAD + FCALL: for users whose ACL denies EVAL), `native`
    /// (native commands only).
    #[arg(long, value_enum, default_value_t = ScriptsArg::Auto, global = true)]
    pub scripts: ScriptsArg,
    /// For `rediss://` nodes: trust the CA certificates in this PEM file (instead of the
    /// system's roots).
    #[cfg(feature = "tls")]
    #[arg(long, value_name = "FILE", global = true)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// For `rediss://` nodes that want a client certificate: this certificate chain (PEM),
    /// with --tls-key.
    #[cfg(feature = "tls")]
    #[arg(long, value_name = "FILE", global = true, requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM), with --tls-cert.
    #[cfg(feature = "tls")]
    #[arg(long, value_name = "FILE", global = true, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
}

/// `--scripts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScriptsArg {
    /// Native commands where the server has them, scripts elsewhere.
    Auto,
    /// Lua scripts by EVALSHA everywhere.
    Eval,
    /// Native commands only.
    Native,
    /// The function library, by FCALL.
    Function,
}

impl From<ScriptsArg> for redlock_mux::Scripts {
    fn from(a: ScriptsArg) -> Self {
        match a {
            ScriptsArg::Auto => redlock_mux::Scripts::Auto,
            ScriptsArg::Eval => redlock_mux::Scripts::Eval,
            ScriptsArg::Native => redlock_mux::Scripts::Native,
            ScriptsArg::Function => redlock_mux::Scripts::Function,
        }
    }
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lock: a distributed flock(1).
    ///
    /// Acquires the lock, runs CMD while keeping the lock alive (with no limit on how long),
    /// releases it once CMD and every process descended from it have exited, and exits with
    /// CMD's status. CMD is not run if the lock cannot be had (exit 75). redlock is a
    /// subreaper: what CMD starts stays in its care even in another process group or session
    /// (setsid, daemonising tools) and after CMD exits, and the lock is held until the last of
    /// them exits. If the lock is lost, every descendant is sent --loss-signal and, after
    /// --kill-after but never later than the lock's validity, SIGKILL, and redlock exits 76.
    /// Every catchable terminating signal sent to redlock (INT, TERM, HUP, QUIT, USR1, ...) is
    /// passed to every descendant. Not covered: work CMD hands to a process that is not its
    /// descendant (systemd-run, at, a daemon already running) runs on without the lock; a
    /// descendant redlock may not signal (setuid, unless redlock is root) is waited for but
    /// runs on after a loss; if redlock is killed with SIGKILL, CMD gets SIGKILL too, but
    /// processes CMD started do not, and once the ttl runs out they run without the lock; a
    /// redlock stopped with SIGSTOP cannot keep the lock alive. CMD sees REDLOCK_RESOURCE (the first --resource),
    /// REDLOCK_RESOURCES (all of them, one per line), REDLOCK_TOKEN and, with --fencing,
    /// REDLOCK_FENCING_TOKEN in its environment, and not REDLOCK_NODES, whose addresses may
    /// hold passwords. Several --resource lock them all, as one lock. CMD runs in a process group of its own; as it is not in the terminal's foreground
    /// group, a CMD that reads the terminal is stopped (SIGTTIN): give it input another way.
    Run(RunArgs),
    /// Take a lock and print its token and validity; it lives until its ttl runs out or
    /// `redlock unlock` releases it.
    Lock(LockArgs),
    /// Show who holds a resource on each node (a token's first 8 characters, or why the node
    /// did not answer), the key's remaining ttl there, and whether a quorum holds it: held,
    /// not held, or unknown when too few nodes answered to tell (exit 69). Changes nothing.
    ///
    /// Also the line of fair waiters (--fair) on each node: the waiters in order (client id,
    /// ticket) and the line's lease (its key's ttl, an hour from the last waiter's arrival),
    /// a resource a release reserved for the first waiter (`reserved for <id>`, for the rest
    /// of the claim lease), and the order a quorum of nodes agree on. A waiter keeps its
    /// place while its client is connected to the master: a release skips a waiter whose
    /// process is gone at no cost (its bell has no listener); one that is alive but paused or
    /// cut off when its turn comes holds the reservation for the claim lease (100 ms), then
    /// loses its place to the next waiter, who was told it stands second and reads the line
    /// again once the lease has run out.
    Status(StatusArgs),
    /// Release a lock taken by `redlock lock`, given its token.
    Unlock(UnlockArgs),
    /// Measure lock + unlock pairs: throughput and a latency histogram.
    ///
    /// With no nodes configured, starts five local redis-server masters for the run.
    Bench(BenchArgs),
    /// Start five local masters, run a contended workload through a mutual-exclusion checker
    /// (pausing one master midway), print what happened, and stop the masters.
    Demo(DemoArgs),
}

/// `redlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The name of the lock; give it several times to lock a set of resources at once.
    #[arg(long = "resource", required = true)]
    pub resources: Vec<String>,
    /// Keep trying to acquire for this long (instead of --retries rounds).
    #[arg(long, value_parser = duration)]
    pub wait: Option<Duration>,
    /// Take a permit of the semaphore named by --resource (given once) that admits this many
    /// holders at once, rather than its lock: at most N commands run at once. Every run of
    /// the semaphore must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=redlock_mux::MAX_PERMITS as i64))]
    pub permits: Option<u32>,
    /// The signal sent to CMD when the lock is lost (a name like TERM or a number).
    #[arg(long, default_value = "TERM", value_parser = signal)]
    pub loss_signal: i32,
    /// After the loss signal, how long CMD has to exit before it is sent SIGKILL; never past
    /// the lock's validity (less half the loss margin), whatever is given here.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub kill_after: Duration,
    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `redlock lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The name of the lock; give it several times to lock a set of resources at once.
    #[arg(long = "resource", required = true)]
    pub resources: Vec<String>,
    /// Print one JSON object instead of `key=value` lines.
    #[arg(long)]
    pub json: bool,
}

/// `redlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The name of the lock.
    #[arg(long)]
    pub resource: String,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
    /// The resource names a semaphore of N permits (`redlock run --permits N`): show each of
    /// its slots, and how many permits a quorum holds.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=redlock_mux::MAX_PERMITS as i64))]
    pub permits: Option<u32>,
}

/// `redlock unlock`.
#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// The name of the lock; every --resource that `redlock lock` was given.
    #[arg(long = "resource", required = true)]
    pub resources: Vec<String>,
    /// The token `redlock lock` printed.
    #[arg(long)]
    pub token: String,
}

/// Which client `bench` drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// `Redlock`: `--depth` threads per client, sharing it.
    Blocking,
    /// `AsyncRedlock` on a multi-thread tokio runtime: `--depth` operations in flight per client.
    Async,
}

impl Client {
    /// The name as `--client` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Client::Blocking => "blocking",
            Client::Async => "async",
        }
    }
}

/// Which resources `bench` locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Resources {
    /// Every worker its own resource: every acquisition should succeed.
    Distinct,
    /// One resource for all: measures contention (refusals are counted, not retried).
    One,
}

impl Resources {
    /// The name as `--resources` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Resources::Distinct => "distinct",
            Resources::One => "one",
        }
    }
}

/// `redlock bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Independent clients, each with its own connections to every node.
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// How long to measure.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    pub duration: Duration,
    /// How long to run before measuring (connections, caches).
    #[arg(long, default_value = "1s", value_parser = duration)]
    pub warmup: Duration,
    /// Which client to drive.
    #[arg(long, value_enum, default_value_t = Client::Async)]
    pub client: Client,
    /// Distinct resources per worker, or one contended resource.
    #[arg(long, value_enum, default_value_t = Resources::Distinct)]
    pub resources: Resources,
    /// Operations in flight per client, pipelined on its connections (tasks for the async
    /// client, threads for the blocking one).
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also draw the run's latency histogram (lock rounds and whole pairs, with p50, p99 and
    /// p999 marked) as an SVG picture in FILE.
    #[cfg(feature = "plot")]
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
}

/// `redlock demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long the workload runs.
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    pub duration: Duration,
    /// Clients contending for the one resource, each with its own connections.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Do not pause a master midway.
    #[arg(long)]
    pub no_faults: bool,
}

/// The longest duration any option takes: ten years (the library's longest ttl). Longer ones
/// are refused as bad arguments rather than left to overflow a deadline.
const MAX_DURATION: Duration = redlock_mux::MAX_TTL;

/// Parses a human duration: `10s`, `250ms`, `1m30s`, `1.5s`; at most ten years.
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match decimal(s) {
        Some(d) => d,
        None => humantime::parse_duration(s).map_err(|e| format!("{e} (try 10s, 250ms, 1m30s)"))?,
    };
    if d > MAX_DURATION {
        return Err(format!(
            "{s} is longer than the 10 years any duration may be"
        ));
    }
    Ok(d)
}

/// A [`duration`] above zero: for the ttl, the node timeout and the retry delay (whose range
/// is (0, 24 h], checked by the library past ten years' bound here), and the lengths of a
/// `bench` or `demo` run.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err(format!("{} must be longer than 0", s.trim()));
    }
    Ok(d)
}

/// A decimal with one unit (`1.5s`, `0.25ms`), which humantime does not take.
fn decimal(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (num, unit) = s.split_at(split);
    if !num.contains('.') {
        return None;
    }
    let value: f64 = num.parse().ok()?;
    let unit_ns = match unit {
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return None,
    };
    let ns = (value * unit_ns).round();
    // Up to about 584 years, what a u64 of nanoseconds holds.
    (ns.is_finite() && ns < u64::MAX as f64).then(|| Duration::from_nanos(ns as u64))
}

/// Parses a signal name (`TERM`, `SIGTERM`, `term`) or number.
pub fn signal(s: &str) -> Result<i32, String> {
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(format!("no signal {n}"))
        };
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    Ok(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        _ => {
            return Err(format!(
                "unknown signal {s:?} (try TERM, INT, HUP, KILL or a number)"
            ))
        }
    })
}

impl Global {
    /// The builder for these options; refuses an empty node list.
    pub fn builder(&self, nodes: &[String]) -> Result<Builder, Failure> {
        if nodes.is_empty() {
            return Err(Failure::new(
                exit::USAGE,
                "no nodes: pass --nodes host:port,... or set REDLOCK_NODES",
            ));
        }
        let builder = Redlock::builder()
            .nodes(nodes)
            .node_timeout(self.node_timeout)
            .retry(self.retries.saturating_add(1), self.retry_delay)
            .fencing(self.fencing)
            .fencing_key(self.fencing_key.clone())
            .wakeups(!self.no_wakeups)
            .fair(!self.no_fair)
            .verify_stream(self.verify_stream)
            .scripts(self.scripts.into());
        #[cfg(feature = "tls")]
        let builder = {
            let mut b = builder;
            if let Some(ca) = &self.tls_ca {
                b = b.tls_ca_file(ca);
            }
            if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
                b = b.tls_client_auth(cert, key);
            }
            b
        };
        Ok(builder)
    }

    /// The configured nodes, with empty entries (a stray comma, an empty variable) dropped.
    pub fn node_list(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// A blocking client on the configured nodes.
    pub fn blocking(&self, nodes: &[String]) -> Result<Redlock, Failure> {
        self.builder(nodes)?
            .build()
            .map_err(|e| Failure::new(exit::code_of(&e), e.to_string()))
    }

    /// An async client on the configured nodes; call inside a runtime.
    pub fn async_client(&self, nodes: &[String]) -> Result<AsyncRedlock, Failure> {
        self.builder(nodes)?
            .build_async()
            .map_err(|e| Failure::new(exit::code_of(&e), e.to_string()))
    }
}

/// The masters a `bench` or `demo` runs on: the configured ones, or five local throwaway
/// servers (kept alive by the returned cluster, stopped when it drops).
pub fn nodes_or_local(global: &Global) -> Result<(Vec<String>, Option<LocalCluster>), Failure> {
    let nodes = global.node_list();
    if !nodes.is_empty() {
        return Ok((nodes, None));
    }
    redis_server_path().map_err(|_| {
        Failure::new(
            exit::UNAVAILABLE,
            "redis-server not found: install it (apt-get install -y redis-server) or pass --nodes",
        )
    })?;
    let cluster = LocalCluster::start(5)
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("starting local masters: {e}")))?;
    Ok((cluster.addrs(), Some(cluster)))
}

/// The `--resource` values as a list of names.
pub fn names(resources: &[String]) -> Vec<&str> {
    resources.iter().map(String::as_str).collect()
}

/// How the resources are named in messages: `"a"`, or `"a", "b"`.
pub fn describe(resources: &[String]) -> String {
    resources
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("0.25ms"), Ok(Duration::from_micros(250)));
        assert!(duration("10").is_err());
        assert!(duration("ten seconds").is_err());
        assert!(duration("1.5parsecs").is_err());
        assert!(duration("").is_err());
        assert!(duration("99999999999999999999.5h").is_err());
        assert!(duration("500000000000y").is_err());
        assert!(duration("11y").is_err());
        assert!(duration("3650days").is_ok());
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        for zero in ["0s", "0ms", "0.0s", "0ns"] {
            assert!(positive_duration(zero).is_err(), "{zero}");
        }
        assert_eq!(positive_duration("1ns"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn signals() {
        assert_eq!(signal("TERM"), Ok(libc::SIGTERM));
        assert_eq!(signal("sigint"), Ok(libc::SIGINT));
        assert_eq!(signal("9"), Ok(9));
        assert!(signal("0").is_err());
        assert!(signal("NOPE").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
