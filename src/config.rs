//! Node addresses and the client configuration, as built by [`Builder`].

use std::fmt;
use std::marker::PhantomData;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::ConfigError;

/// Redis' default port, used when an address names none.
pub const DEFAULT_PORT: u16 = 6379;

/// The longest ttl a lock may be taken or extended with: ten years. Redis and Valkey refuse
/// expiries past `i64::MAX` milliseconds from their own clock; this bound sits far below
/// that, and keeps every deadline computed from a ttl inside what the monotonic clock can
/// represent. A longer ttl is refused with [`ConfigError::Ttl`].
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The longest node timeout or retry delay the builder accepts: one day. Anything longer is
/// a mistake (a dead node would hold every round for that long), and is refused with a
/// [`ConfigError`] rather than left to overflow a deadline.
pub const MAX_OPTION_DURATION: Duration = Duration::from_secs(86_400);

/// How releases and extensions are sent ([`Builder::scripts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Scripts {
    /// The server's native compare-and-delete and compare-and-set commands where it has them
    /// (Valkey 9+: `DELIFEQ`; Redis 8.4+: `DELEX ... IFEQ`; both `SET ... IFEQ ... PX`), Lua
    /// scripts by `EVALSHA` elsewhere. Decided per connection from the server's `HELLO`
    /// reply, so a mixed set of masters works. A connection whose `EVALSHA` the server's ACL
    /// refuses (`NOPERM`) switches to the function library (as [`Scripts::Function`]),
    /// starting with the refused call. The default.
    #[default]
    Auto,
    /// Lua scripts by `EVALSHA`, with the `EVAL` fallback after `NOSCRIPT`, on every server.
    Eval,
    /// The native commands only: a node whose server has none answers with an error vote. For
    /// users whose ACL denies `EVAL`/`EVALSHA`. Locks over several resources and fenced
    /// acquisitions still need scripts.
    Native,
    /// The same scripts as a function library (Redis 7+, Valkey), loaded with `FUNCTION LOAD`
    /// where missing and called with `FCALL`: for users whose ACL denies `EVAL`/`EVALSHA`
    /// but allows `FCALL` (and `FUNCTION LOAD`, or an operator who loaded
    /// [`script::LIBRARY`](crate::script::LIBRARY) for them). Everything works in this mode,
    /// sets of resources and fencing included.
    Function,
}

/// Where a master listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A TCP address, resolved when the configuration was built.
    Tcp(SocketAddr),
    /// A Unix domain socket's path.
    Unix(PathBuf),
}

/// One master: where it listens and how to log in.
///
/// Parsed from `redis://[user[:password]@]host[:port][/db]` or plain `host[:port]`; IPv6 hosts
/// go in brackets (`[::1]:7000`). User and password may be percent-encoded, and need not be:
/// the userinfo ends at the last `@`, so a password may hold `@`, `/`, `?`, `#` or `:`. A Unix
/// domain socket is `unix:///path/to/redis.sock` (or `redis+unix:///path`), with the database,
/// user and password as query parameters, `unix:///run/redis.sock?db=2&user=app&password=pw`,
/// or the login before the path, `unix://app:pw@/run/redis.sock`, where the userinfo ends at
/// the last `@/` (so a `@/` in the path or query must then be written `%40/`). Neither
/// `Display` nor `Debug` nor an error shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddr {
    /// The host as written (name or IP literal, without brackets); for a Unix socket, its path.
    pub host: String,
    /// The port (0 for a Unix socket).
    pub port: u16,
    /// The ACL user, if any.
    pub user: Option<String>,
    /// The password, if any (`AUTH password` alone, or `AUTH user password` with a user).
    pub password: Option<String>,
    /// The database to `SELECT`, if not 0.
    pub db: u32,
    /// Whether connections use TLS (`rediss://`; feature `tls`).
    pub tls: bool,
    /// Where connections go.
    pub(crate) endpoint: Endpoint,
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeAddr({self})")
    }
}

impl fmt::Display for NodeAddr {
    /// The address without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Endpoint::Unix(path) = &self.endpoint {
            write!(f, "unix://{}", path.display())?;
            if self.db != 0 {
                write!(f, "?db={}", self.db)?;
            }
            return Ok(());
        }
        if self.tls {
            f.write_str("rediss://")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "{}:{}", self.host, self.port)?;
        }
        if self.db != 0 {
            write!(f, "/{}", self.db)?;
        }
        Ok(())
    }
}

impl NodeAddr {
    /// Parses and resolves an address.
    ///
    /// # Examples
    /// ```
    /// use redlock_mux::NodeAddr;
    /// let a = NodeAddr::parse("redis://app:s%40cret@127.0.0.1:7001/2").unwrap();
    /// assert_eq!((a.port, a.db), (7001, 2));
    /// assert_eq!(a.user.as_deref(), Some("app"));
    /// assert_eq!(a.password.as_deref(), Some("s@cret"));
    /// assert_eq!(a.to_string(), "127.0.0.1:7001/2");
    /// assert_eq!(NodeAddr::parse("[::1]:7002").unwrap().port, 7002);
    /// ```
    pub fn parse(input: &str) -> Result<NodeAddr, ConfigError> {
        let bad = |reason| ConfigError::InvalidAddress {
            addr: redact(input),
            reason,
        };
        let input = input.trim();
        let parts = Parts::of(input);
        let tls = match parts.scheme {
            "unix://" | "redis+unix://" => return NodeAddr::parse_unix(input, &parts),
            "" | "redis://" => false,
            "rediss://" if cfg!(feature = "tls") => true,
            "rediss://" => return Err(bad("rediss:// needs the crate's `tls` feature")),
            _ => {
                return Err(bad(
                    "only redis://, rediss://, unix:// and redis+unix:// URLs are supported",
                ))
            }
        };
        let (userinfo, hostpart) = (parts.userinfo, parts.rest);
        let (hostport, db) = match hostpart.split_once('/') {
            Some((hp, "")) => (hp, 0),
            Some((hp, db)) => (
                hp,
                db.parse::<u32>()
                    .map_err(|_| bad("database is not a number"))?,
            ),
            None => (hostpart, 0),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or(bad("unclosed '[' in host"))?;
            match after {
                "" => (h, DEFAULT_PORT),
                p => (
                    h,
                    p.strip_prefix(':')
                        .ok_or(bad("expected ':' after ']'"))?
                        .parse()
                        .map_err(|_| bad("port is not a number in 1..=65535"))?,
                ),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (
                    h,
                    p.parse()
                        .map_err(|_| bad("port is not a number in 1..=65535"))?,
                ),
                None => (hostport, DEFAULT_PORT),
            }
        };
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        if port == 0 {
            return Err(bad("port is not a number in 1..=65535"));
        }
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = match u.split_once(':') {
                    Some((user, pass)) => (user, Some(pass)),
                    None => (u, None),
                };
                let user = percent_decode(user).ok_or(bad("bad percent-encoding"))?;
                let pass = pass
                    .map(|p| percent_decode(p).ok_or(bad("bad percent-encoding")))
                    .transpose()?;
                match (user.is_empty(), pass) {
                    // `redis://:password@host`: password only.
                    (true, p) => (None, p),
                    // `redis://password@host` (no colon) is taken as a password, as redis-cli
                    // and most clients do.
                    (false, None) => (None, Some(user)),
                    (false, Some(p)) => (Some(user), Some(p)),
                }
            }
        };
        let socket = (host, port)
            .to_socket_addrs()
            .map_err(|e| ConfigError::Resolve {
                addr: redact(input),
                kind: e.kind(),
            })?
            .next()
            .ok_or(ConfigError::Resolve {
                addr: redact(input),
                kind: std::io::ErrorKind::NotFound,
            })?;
        Ok(NodeAddr {
            host: host.to_string(),
            port,
            user,
            password,
            db,
            tls,
            endpoint: Endpoint::Tcp(socket),
        })
    }

    /// `unix://[user[:password]@]/path?db=N&user=U&password=P`, cut into `parts`.
    fn parse_unix(input: &str, parts: &Parts<'_>) -> Result<NodeAddr, ConfigError> {
        let bad = |reason| ConfigError::InvalidAddress {
            addr: redact(input),
            reason,
        };
        let (userinfo, rest) = (parts.userinfo, parts.rest);
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        if !path.starts_with('/') {
            return Err(bad(
                "a Unix socket path must be absolute: unix:///path/to/redis.sock",
            ));
        }
        let path = percent_decode(path).ok_or(bad("bad percent-encoding"))?;
        let (mut user, mut password) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (
                    Some(percent_decode(user).ok_or(bad("bad percent-encoding"))?)
                        .filter(|u| !u.is_empty()),
                    Some(percent_decode(pass).ok_or(bad("bad percent-encoding"))?),
                ),
                None => (
                    None,
                    Some(percent_decode(u).ok_or(bad("bad percent-encoding"))?),
                ),
            },
        };
        let mut db = 0;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or(bad("query parameters are key=value"))?;
            let v = percent_decode(v).ok_or(bad("bad percent-encoding"))?;
            match k {
                "db" => db = v.parse().map_err(|_| bad("database is not a number"))?,
                "user" => user = Some(v),
                "password" | "pass" => password = Some(v),
                _ => return Err(bad("unknown query parameter (db, user, password)")),
            }
        }
        Ok(NodeAddr {
            host: path.clone(),
            port: 0,
            user,
            password,
            db,
            tls: false,
            endpoint: Endpoint::Unix(PathBuf::from(path)),
        })
    }

    /// Where connections go: a resolved TCP address, or a Unix socket's path.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// An address cut where [`NodeAddr::parse`] cuts it: the scheme with its `://` (empty when
/// there is none), the userinfo (`user:password`, or a password alone) and what follows the
/// `@` that ends it. [`redact`] cuts in the same place, so that whatever the parser takes for
/// a password is what redaction blanks, whatever characters it holds.
struct Parts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    rest: &'a str,
}

impl<'a> Parts<'a> {
    fn of(input: &'a str) -> Parts<'a> {
        // A scheme is a letter, then letters, digits, `+`, `-` or `.` (RFC 3986); a `://`
        // after anything else is part of a password in a plain `user:password@host:port`.
        let is_scheme = |s: &str| {
            let mut c = s.chars();
            c.next().is_some_and(|f| f.is_ascii_alphabetic())
                && c.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        };
        let (scheme, after) = match input.find("://") {
            Some(i) if is_scheme(&input[..i]) => input.split_at(i + 3),
            _ => ("", input),
        };
        let at = if matches!(scheme, "unix://" | "redis+unix://") {
            // The path is absolute: right after the scheme when there is no userinfo, else
            // after the last `@/` (the last `@` when there is none, and the path is refused).
            // A `@` followed by `/` in the path or the query must then be written `%40`.
            if after.starts_with('/') {
                None
            } else {
                after.rfind("@/").or_else(|| after.rfind('@'))
            }
        } else {
            // Host, port and database hold no `@`: the last one ends the userinfo, and the
            // password may hold any character, `@`, `/`, `?` and `#` included.
            after.rfind('@')
        };
        match at {
            Some(at) => Parts {
                scheme,
                userinfo: Some(&after[..at]),
                rest: &after[at + 1..],
            },
            None => Parts {
                scheme,
                userinfo: None,
                rest: after,
            },
        }
    }
}

/// The address with its password blanked (the user, if any, kept), for error messages and
/// `Debug`: `redis://app:***@host:port`, `unix:///path?password=***`.
pub(crate) fn redact(input: &str) -> String {
    let parts = Parts::of(input.trim());
    let mut out = parts.scheme.to_string();
    if let Some(userinfo) = parts.userinfo {
        // `redis://secret@host`: a lone word before the `@` is the password.
        if let Some((user, _)) = userinfo.split_once(':') {
            out.push_str(user);
            out.push(':');
        }
        out.push_str("***@");
    }
    match parts.rest.split_once('?') {
        Some((before, query)) => {
            // `unix:///path?password=secret`: the password's value blanked.
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key @ ("password" | "pass"), _)) => format!("{key}=***"),
                    _ => pair.to_string(),
                })
                .collect();
            out.push_str(before);
            out.push('?');
            out.push_str(&query.join("&"));
        }
        None => out.push_str(parts.rest),
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A validated configuration, shared by both clients.
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) nodes: Vec<NodeAddr>,
    pub(crate) node_timeout: Duration,
    pub(crate) tries: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) fail_fast: bool,
    pub(crate) quorum: usize,
    /// The fencing counter's key, when locks are fenced.
    pub(crate) fencing: Option<Box<[u8]>>,
    /// How releases and extensions are sent.
    pub(crate) scripts: Scripts,
    /// Whether waiters are woken by the servers' invalidation pushes (RESP3 tracking).
    pub(crate) wakeups: bool,
    /// The TLS client settings, when some node is `rediss://`.
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<std::sync::Arc<crate::drivers::tls::TlsSetup>>,
    /// Test only: acquire fenced locks without the second phase (the negative control).
    #[cfg(feature = "fault-injection")]
    pub(crate) skip_fence_writeback: bool,
}

impl Config {
    /// The fencing counter's key, when locks are fenced (see [`Builder::fencing`]).
    pub fn fencing_key(&self) -> Option<&str> {
        self.fencing
            .as_deref()
            .map(|k| std::str::from_utf8(k).unwrap_or_default())
    }

    /// Whether fenced acquisitions run their second phase (always, outside the test-only
    /// switch).
    pub(crate) fn fence_writeback(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        if self.skip_fence_writeback {
            return false;
        }
        true
    }

    /// The nodes, in the order given.
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }

    /// How many nodes must agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How long each node gets to answer, from the moment the command is written.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// Rounds `lock` tries before giving up.
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// The upper bound of the random delay between tries (the lower is half of it).
    pub fn retry_delay(&self) -> Duration {
        self.retry_delay
    }

    /// The clock-drift factor applied to the ttl.
    pub fn drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// Whether a round ends as soon as its outcome is certain.
    pub fn fail_fast(&self) -> bool {
        self.fail_fast
    }

    /// Whether waiting for a held resource is woken by the servers (see
    /// [`Builder::wakeups`]).
    pub fn wakeups(&self) -> bool {
        self.wakeups
    }

    /// When the rounds of lock, unlock and extend end, by the fail-fast option.
    pub(crate) fn until(&self) -> crate::core::round::Until {
        if self.fail_fast {
            crate::core::round::Until::Decided
        } else {
            crate::core::round::Until::AllIn
        }
    }

    /// The shortest ttl a lock can be taken with: the least whole number of milliseconds
    /// above the clock-drift allowance (`ttl * drift_factor + 2 ms`). At or below it the lock
    /// would be expired the moment it was granted, so no round could ever win it.
    pub fn min_ttl(&self) -> Duration {
        // ttl > 2 ms / (1 - factor); start just below and step up to the first that works.
        let estimate = (2.0 / (1.0 - self.drift_factor)).floor();
        let mut ms = if estimate.is_finite() && estimate >= 1.0 {
            estimate as u64
        } else {
            1
        };
        while crate::core::rules::validity(
            Duration::from_millis(ms),
            Duration::ZERO,
            self.drift_factor,
        )
        .is_none()
        {
            ms += 1;
        }
        Duration::from_millis(ms)
    }

    /// Checks a ttl given to an acquisition or an extension and returns it in whole
    /// milliseconds (rounded down, as the command sends it): it must lie in
    /// [`min_ttl`](Config::min_ttl) ..= [`MAX_TTL`], else [`ConfigError::Ttl`].
    pub fn check_ttl(&self, ttl: Duration) -> Result<u64, ConfigError> {
        let min = self.min_ttl();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ttl > MAX_TTL || Duration::from_millis(ms) < min {
            return Err(ConfigError::Ttl {
                ttl,
                min,
                max: MAX_TTL,
            });
        }
        Ok(ms)
    }
}

/// The options of a client, and the builder of the client `C`:
/// [`Redlock::builder`](crate::Redlock::builder) gives a `Builder<Redlock>` whose `build` makes
/// the blocking client, `AsyncRedlock::builder` a `Builder<AsyncRedlock>` whose `build` makes the
/// async one. The options are the same for both ([`for_client`](Builder::for_client) switches).
///
/// Defaults follow the reference implementations: node timeout 50 ms, 3 tries with a random
/// delay in [100 ms, 200 ms] between them, drift factor 0.01, fail-fast on, quorum N/2 + 1.
///
/// Every duration is bounded: the node timeout must be in (0, [`MAX_OPTION_DURATION`]], the
/// retry delay at most that; ttls are checked per call (see [`Config::check_ttl`]). Its
/// `Debug` shows node addresses with their passwords blanked.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use redlock_mux::Redlock;
///
/// let redlock = Redlock::builder()
///     .nodes(["127.0.0.1:7001", "127.0.0.1:7002", "redis://:secret@127.0.0.1:7003/1"])
///     .node_timeout(Duration::from_millis(20))
///     .retry(5, Duration::from_millis(100))
///     .build()?;
/// # Ok::<(), redlock_mux::Error>(())
/// ```
pub struct Builder<C = crate::Redlock> {
    opts: Options,
    client: PhantomData<fn() -> C>,
}

/// The options a [`Builder`] collects, whichever client it builds.
#[derive(Clone)]
struct Options {
    nodes: Vec<String>,
    node_timeout: Duration,
    tries: u32,
    retry_delay: Duration,
    drift_factor: f64,
    fail_fast: bool,
    quorum: Option<usize>,
    fencing: bool,
    fencing_key: String,
    scripts: Scripts,
    wakeups: bool,
    #[cfg(feature = "tls")]
    tls: crate::drivers::tls::TlsOptions,
    #[cfg(feature = "fault-injection")]
    skip_fence_writeback: bool,
}

/// The fencing counter's key unless [`Builder::fencing_key`] sets another.
pub const DEFAULT_FENCING_KEY: &str = "redlock-mux:fencing-counter";

/// The highest fencing counter a node's reply may carry, 2^53: a reply above it (or below 1)
/// cannot come from a counter that only fenced acquisitions wrote, and is that node's failure
/// ([`FencingFault::CounterOutOfRange`](crate::FencingFault::CounterOutOfRange)), never a
/// token.
///
/// Why 2^53: it is the largest bound under which the acquire script's reply is the counter
/// itself. Redis runs scripts in Lua 5.1, whose numbers are doubles; above 2^53 the value
/// `INCR` returned is rounded on its way out of the script (the counter at 2^53 + 3 is
/// answered as 2^53 + 4). And it is unreachable by fenced acquisitions: at a million a second
/// the counter reaches it after 285 years. It sits far below the 2^63 - 1 at which `INCR`
/// overflows, so that a reply that made its way into the tokens could never leave the
/// counters unable to grow, and it is a number every language's integers and JSON's doubles
/// carry exactly, for the resources that compare tokens.
pub const MAX_FENCING_TOKEN: u64 = 1 << 53;

impl<C> Clone for Builder<C> {
    fn clone(&self) -> Self {
        Builder {
            opts: self.opts.clone(),
            client: PhantomData,
        }
    }
}

impl<C> fmt::Debug for Builder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.opts.nodes.iter().map(|n| redact(n)).collect();
        f.debug_struct("Builder")
            .field("nodes", &nodes)
            .field("node_timeout", &self.opts.node_timeout)
            .field("tries", &self.opts.tries)
            .field("retry_delay", &self.opts.retry_delay)
            .field("drift_factor", &self.opts.drift_factor)
            .field("fail_fast", &self.opts.fail_fast)
            .field("quorum", &self.opts.quorum)
            .field("fencing", &self.opts.fencing)
            .field("fencing_key", &self.opts.fencing_key)
            .field("scripts", &self.opts.scripts)
            .field("wakeups", &self.opts.wakeups)
            .finish()
    }
}

impl<C> Default for Builder<C> {
    fn default() -> Self {
        Builder {
            opts: Options {
                nodes: Vec::new(),
                node_timeout: Duration::from_millis(50),
                tries: 3,
                retry_delay: Duration::from_millis(200),
                drift_factor: 0.01,
                fail_fast: true,
                quorum: None,
                fencing: false,
                fencing_key: DEFAULT_FENCING_KEY.to_string(),
                scripts: Scripts::Auto,
                wakeups: true,
                #[cfg(feature = "tls")]
                tls: Default::default(),
                #[cfg(feature = "fault-injection")]
                skip_fence_writeback: false,
            },
            client: PhantomData,
        }
    }
}

impl<C> Builder<C> {
    /// The same options, for building the other client (`Builder<Redlock>` or
    /// `Builder<AsyncRedlock>`).
    pub fn for_client<D>(self) -> Builder<D> {
        Builder {
            opts: self.opts,
            client: PhantomData,
        }
    }

    /// The masters: `redis://` URLs or `host:port` strings. Replaces any given before.
    pub fn nodes<I>(mut self, nodes: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.opts.nodes = nodes.into_iter().map(|n| n.as_ref().to_string()).collect();
        self
    }

    /// How long each node has to answer a command, from when it was written. Keep it small
    /// compared with the ttl (a dead node costs at most this much per round).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.opts.node_timeout = timeout;
        self
    }

    /// How many rounds `lock` tries, and the upper bound of the random delay between them
    /// (drawn uniformly from [delay/2, delay]): at most [`MAX_OPTION_DURATION`], and zero for
    /// rounds back to back.
    pub fn retry(mut self, tries: u32, delay: Duration) -> Self {
        self.opts.tries = tries;
        self.opts.retry_delay = delay;
        self
    }

    /// The clock-drift factor: validity = ttl - elapsed - (ttl * factor + 2 ms).
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.opts.drift_factor = factor;
        self
    }

    /// Whether a round stops waiting as soon as its outcome is certain (on by default).
    pub fn fail_fast(mut self, on: bool) -> Self {
        self.opts.fail_fast = on;
        self
    }

    /// Overrides the quorum; it must be a majority, in (N/2, N].
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.opts.quorum = Some(quorum);
        self
    }

    /// Whether locks carry a fencing token ([`Lock::fencing_token`](crate::Lock::fencing_token)),
    /// off by default.
    ///
    /// A fenced acquisition runs two rounds: the first sets the keys and, where a node sets
    /// them, increments that node's fencing counter and returns it; the client takes the
    /// highest value among the nodes that granted; the second round raises the counter to it
    /// on every node that still holds the keys. The lock is granted only if both rounds won a
    /// quorum, and its validity counts from before the first to after the second: one more
    /// round trip than an unfenced lock. Tokens then strictly increase from one holder to the
    /// next, across the resources of one counter, provided masters keep the counter across
    /// restarts (`appendfsync always`) and under memory pressure: see `docs/redlock.md` for
    /// the argument and every way to lose the counter.
    ///
    /// A fenced client's connections also ask each master's `maxmemory-policy` when they open;
    /// a master whose policy may evict the counter (`allkeys-*`) loses its vote in fenced
    /// acquisitions ([`FencingFault::EvictionPolicy`](crate::FencingFault::EvictionPolicy)).
    /// Where `CONFIG` is denied, the client goes on and counts it
    /// ([`NodeStats::eviction_unchecked`](crate::NodeStats::eviction_unchecked)).
    pub fn fencing(mut self, on: bool) -> Self {
        self.opts.fencing = on;
        self
    }

    /// The key of the fencing counter, one per master for every resource (default
    /// [`DEFAULT_FENCING_KEY`]). Pick a name no application data uses: the counter must only
    /// ever be written by fenced acquisitions. Clients that fence the same resources must use
    /// the same key.
    pub fn fencing_key(mut self, key: impl Into<String>) -> Self {
        self.opts.fencing_key = key.into();
        self
    }

    /// How releases and extensions are sent: [`Scripts::Auto`] (the default) uses a server's
    /// native commands where it has them and Lua scripts elsewhere.
    pub fn scripts(mut self, scripts: Scripts) -> Self {
        self.opts.scripts = scripts;
        self
    }

    /// Whether `lock` waits for a held resource by being told (the default) rather than by
    /// sleeping out the retry delay.
    ///
    /// On: every connection asks its server for RESP3 and opt-in client-side tracking (`HELLO
    /// 3`, then `CLIENT TRACKING ON OPTIN`). After a try refused because the resource is held,
    /// the waiter reads the key's `PTTL` on every node right after `CLIENT CACHING YES`, which
    /// makes the servers that track note it (no other read is tracked), and
    /// then waits for the first of: an invalidation pushed by any master (the key was deleted,
    /// changed or expired there), a dropped connection, the moment the `PTTL`s say a quorum of
    /// keys will have expired, and the usual random retry delay. A push is only a hint: the lock
    /// is still granted by a quorum of `SET NX` alone, and a push that is lost or late costs at
    /// most the timer. Nodes whose server has no RESP3 or tracking (Redis before 6, or an ACL
    /// that denies `CLIENT`) take no part in the pushes, and only their `PTTL` counts. An
    /// uncontended `lock` sends nothing more.
    ///
    /// Off: the waiter sleeps the random retry delay between tries, as classic Redlock
    /// clients do, and connections stay on RESP2.
    pub fn wakeups(mut self, on: bool) -> Self {
        self.opts.wakeups = on;
        self
    }

    /// TLS (feature `tls`): trust the CA certificates in this PEM file for `rediss://` nodes,
    /// instead of the system's roots.
    #[cfg(feature = "tls")]
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.opts.tls.ca_file = Some(path.into());
        self
    }

    /// TLS (feature `tls`): trust the system's root certificates too (they are used by default
    /// only when no CA file is given).
    #[cfg(feature = "tls")]
    pub fn tls_system_roots(mut self, on: bool) -> Self {
        self.opts.tls.system_roots = on;
        self
    }

    /// TLS (feature `tls`): the name to check the servers' certificates against, in place of
    /// each node's host (for servers reached by an address their certificate does not name).
    #[cfg(feature = "tls")]
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.opts.tls.server_name = Some(name.into());
        self
    }

    /// TLS (feature `tls`): present this client certificate chain and key (PEM files) to
    /// servers that ask for one (mutual TLS, `tls-auth-clients yes`).
    #[cfg(feature = "tls")]
    pub fn tls_client_auth(
        mut self,
        cert_file: impl Into<std::path::PathBuf>,
        key_file: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.opts.tls.client_auth = Some((cert_file.into(), key_file.into()));
        self
    }

    /// Test only (feature `fault-injection`): fenced acquisitions skip their second phase,
    /// which breaks the fencing guarantee. The safety suite's negative control uses it to
    /// show that the checker catches a decreasing token. Never enable it elsewhere.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn skip_fence_writeback_for_tests(mut self, on: bool) -> Self {
        self.opts.skip_fence_writeback = on;
        self
    }

    /// Validates everything and resolves the addresses.
    pub fn config(&self) -> Result<Config, ConfigError> {
        if self.opts.nodes.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        let nodes = self
            .opts
            .nodes
            .iter()
            .map(|n| NodeAddr::parse(n))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, a) in nodes.iter().enumerate() {
            if nodes[..i]
                .iter()
                .any(|b| b.endpoint == a.endpoint && b.db == a.db)
            {
                return Err(ConfigError::DuplicateNode(a.to_string()));
            }
        }
        let n = nodes.len();
        let min = n / 2 + 1;
        let quorum = self.opts.quorum.unwrap_or(min);
        if quorum < min || quorum > n {
            return Err(ConfigError::Quorum {
                quorum,
                nodes: n,
                min,
            });
        }
        if !(self.opts.drift_factor.is_finite() && (0.0..1.0).contains(&self.opts.drift_factor)) {
            return Err(ConfigError::DriftFactor(self.opts.drift_factor));
        }
        if self.opts.node_timeout.is_zero() || self.opts.node_timeout > MAX_OPTION_DURATION {
            return Err(ConfigError::NodeTimeout(self.opts.node_timeout));
        }
        if self.opts.retry_delay > MAX_OPTION_DURATION {
            return Err(ConfigError::RetryDelay(self.opts.retry_delay));
        }
        if self.opts.tries == 0 {
            return Err(ConfigError::Tries);
        }
        if self.opts.fencing && self.opts.fencing_key.is_empty() {
            return Err(ConfigError::FencingKey(String::new()));
        }
        #[cfg(feature = "tls")]
        let tls = if nodes.iter().any(|n| n.tls) {
            Some(std::sync::Arc::new(crate::drivers::tls::TlsSetup::new(
                &self.opts.tls,
            )?))
        } else {
            None
        };
        Ok(Config {
            nodes,
            node_timeout: self.opts.node_timeout,
            tries: self.opts.tries,
            retry_delay: self.opts.retry_delay,
            drift_factor: self.opts.drift_factor,
            fail_fast: self.opts.fail_fast,
            quorum,
            fencing: self
                .opts
                .fencing
                .then(|| self.opts.fencing_key.as_bytes().into()),
            scripts: self.opts.scripts,
            wakeups: self.opts.wakeups,
            #[cfg(feature = "tls")]
            tls,
            #[cfg(feature = "fault-injection")]
            skip_fence_writeback: self.opts.skip_fence_writeback,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> Builder {
        Builder::default()
    }

    #[test]
    fn unix_socket_addresses_parse_and_print_without_the_password() {
        let a = NodeAddr::parse("unix:///run/redis/redis.sock").unwrap();
        assert_eq!(
            a.endpoint(),
            &Endpoint::Unix("/run/redis/redis.sock".into())
        );
        assert_eq!((a.port, a.db, a.user.as_deref()), (0, 0, None));
        assert_eq!(a.to_string(), "unix:///run/redis/redis.sock");
        let a = NodeAddr::parse("redis+unix:///tmp/r.sock?db=3&user=app&password=s%40c").unwrap();
        assert_eq!(a.endpoint(), &Endpoint::Unix("/tmp/r.sock".into()));
        assert_eq!(
            (a.db, a.user.as_deref(), a.password.as_deref()),
            (3, Some("app"), Some("s@c"))
        );
        assert_eq!(a.to_string(), "unix:///tmp/r.sock?db=3");
        let a = NodeAddr::parse("unix://app:pw@/tmp/r.sock").unwrap();
        assert_eq!(
            (a.user.as_deref(), a.password.as_deref()),
            (Some("app"), Some("pw"))
        );
        assert_eq!(
            redact("unix:///tmp/r.sock?db=1&password=secret"),
            "unix:///tmp/r.sock?db=1&password=***"
        );
        assert_eq!(
            redact("unix://app:pw@/tmp/r.sock"),
            "unix://app:***@/tmp/r.sock"
        );
        for bad in [
            "unix://relative.sock",
            "unix:///x?db=no",
            "unix:///x?color=red",
            "unix:///x?db",
        ] {
            assert!(
                matches!(
                    NodeAddr::parse(bad),
                    Err(ConfigError::InvalidAddress { .. })
                ),
                "{bad}"
            );
        }
        // The same socket twice is the same node.
        assert!(matches!(
            builder()
                .nodes(["unix:///tmp/a.sock", "unix:///tmp/a.sock"])
                .config(),
            Err(ConfigError::DuplicateNode(_))
        ));
    }

    #[test]
    fn addresses_parse() {
        let a = NodeAddr::parse("127.0.0.1:7000").unwrap();
        assert_eq!((a.host.as_str(), a.port, a.db), ("127.0.0.1", 7000, 0));
        assert_eq!(a.user, None);
        let a = NodeAddr::parse("redis://127.0.0.1").unwrap();
        assert_eq!(a.port, DEFAULT_PORT);
        let a = NodeAddr::parse("redis://:pw@127.0.0.1:7000/3").unwrap();
        assert_eq!((a.user, a.password.as_deref(), a.db), (None, Some("pw"), 3));
        let a = NodeAddr::parse("redis://pw@127.0.0.1:7000").unwrap();
        assert_eq!((a.user, a.password.as_deref()), (None, Some("pw")));
        let a = NodeAddr::parse("redis://u:p%3Aw@[::1]:7000/").unwrap();
        assert_eq!(a.user.as_deref(), Some("u"));
        assert_eq!(a.password.as_deref(), Some("p:w"));
        assert_eq!(a.host, "::1");
        assert_eq!(a.to_string(), "[::1]:7000");
    }

    #[test]
    fn bad_addresses_are_refused_without_leaking_passwords() {
        for bad in [
            "http://127.0.0.1:1",
            "127.0.0.1:0",
            "127.0.0.1:99999",
            "127.0.0.1:x",
            ":7000",
            "redis://u:secret@127.0.0.1:1/x",
            "[::1",
            "redis://u:%zz@127.0.0.1:1",
        ] {
            let e = NodeAddr::parse(bad).unwrap_err();
            assert!(!e.to_string().contains("secret"), "{e}");
            assert!(
                matches!(e, ConfigError::InvalidAddress { .. }),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn ttls_at_or_below_the_drift_allowance_or_past_the_maximum_are_refused() {
        let ms = Duration::from_millis;
        let cfg = builder().nodes(["127.0.0.1:1"]).config().unwrap();
        // 2 ms of fixed drift plus 1% of the ttl: 3 ms is the first that leaves anything.
        assert_eq!(cfg.min_ttl(), ms(3));
        assert_eq!(cfg.check_ttl(ms(3)), Ok(3));
        assert_eq!(cfg.check_ttl(Duration::from_micros(3_999)), Ok(3));
        assert_eq!(cfg.check_ttl(MAX_TTL), Ok(MAX_TTL.as_millis() as u64));
        for bad in [
            Duration::ZERO,
            Duration::from_nanos(1),
            ms(1),
            ms(2),
            Duration::from_micros(2_999),
            MAX_TTL + Duration::from_nanos(1),
            Duration::from_secs(u64::MAX),
            Duration::MAX,
        ] {
            match cfg.check_ttl(bad) {
                Err(ConfigError::Ttl { ttl, min, max }) => {
                    assert_eq!((ttl, min, max), (bad, ms(3), MAX_TTL))
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        // A larger drift factor raises the minimum: 2 ms / (1 - 0.5) = 4 ms is still zero.
        let half = builder()
            .nodes(["127.0.0.1:1"])
            .drift_factor(0.5)
            .config()
            .unwrap();
        assert_eq!(half.min_ttl(), ms(5));
        for f in [0.0, 0.01, 0.1, 0.3, 0.9, 0.999] {
            let c = builder()
                .nodes(["127.0.0.1:1"])
                .drift_factor(f)
                .config()
                .unwrap();
            let min = c.min_ttl();
            assert!(
                crate::core::rules::validity(min, Duration::ZERO, f).is_some(),
                "{f}"
            );
            assert!(
                crate::core::rules::validity(min - ms(1), Duration::ZERO, f).is_none(),
                "{f}"
            );
        }
    }

    /// Every character a password may hold is blanked, in errors and in `Debug`: `?`, `#`,
    /// `@`, `/`, `:`, `://` and percent-encodings, in the userinfo of TCP and Unix socket
    /// addresses (issue 23.6: `redis://app:s3cr?t@host` was printed in clear, the `?` taken
    /// for the start of a query). Parsing cuts where redaction does: the password parsed is
    /// the one written.
    #[test]
    fn passwords_with_any_character_are_parsed_whole_and_never_printed() {
        let secrets = [
            ("S3CR?T", "S3CR?T"),
            ("S3CR#T", "S3CR#T"),
            ("S3CR@T", "S3CR@T"),
            ("S3CR/T", "S3CR/T"),
            ("S3CR@/T", "S3CR@/T"),
            ("S3CR://T", "S3CR://T"),
            ("S3CR?T@X#Y/Z", "S3CR?T@X#Y/Z"),
            ("S3CR%3FT%40%2F%23", "S3CR?T@/#"),
            ("S3CR:T", "S3CR:T"),
        ];
        for (written, password) in secrets {
            let cases = [
                (
                    format!("redis://app:{written}@127.0.0.1:1/2"),
                    Some("app"),
                    "redis://app:***@127.0.0.1:1/2",
                ),
                (
                    format!("redis://:{written}@127.0.0.1:1"),
                    None,
                    "redis://:***@127.0.0.1:1",
                ),
                (
                    format!("app:{written}@127.0.0.1:1"),
                    Some("app"),
                    "app:***@127.0.0.1:1",
                ),
                (
                    format!("unix://app:{written}@/tmp/r.sock?db=2"),
                    Some("app"),
                    "unix://app:***@/tmp/r.sock?db=2",
                ),
                (
                    format!("redis+unix://:{written}@/tmp/r.sock"),
                    None,
                    "redis+unix://:***@/tmp/r.sock",
                ),
            ];
            for (input, user, redacted) in cases {
                let a = NodeAddr::parse(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
                assert_eq!(a.password.as_deref(), Some(password), "{input}");
                assert_eq!(a.user.as_deref(), user, "{input}");
                assert!(!a.to_string().contains("S3CR"), "{input}: {a}");
                assert!(!format!("{a:?}").contains("S3CR"), "{input}: {a:?}");
                assert_eq!(redact(&input), redacted, "{input}");
                let d = format!("{:?}", builder().nodes([input.as_str()]));
                assert!(!d.contains("S3CR"), "{input}: {d}");
                // The same address made invalid after the password: the error blanks it.
                let bad = if input.contains("unix") {
                    input.replace("/tmp/r.sock", "/tmp/r.sock?color=red")
                } else {
                    input.replace("127.0.0.1:1", "127.0.0.1:0")
                };
                let e = NodeAddr::parse(&bad).expect_err(&bad).to_string();
                assert!(!e.contains("S3CR"), "{bad}: {e}");
                assert!(e.contains("***"), "{bad}: {e}");
            }
            // A password alone, without a user, and in a Unix socket's query.
            if !written.contains(':') {
                let lone = format!("redis://{written}@127.0.0.1:1");
                assert_eq!(redact(&lone), "redis://***@127.0.0.1:1");
                let a = NodeAddr::parse(&lone).unwrap();
                assert_eq!((a.user, a.password.as_deref()), (None, Some(password)));
            }
            let query = format!("unix:///tmp/r.sock?password={written}&db=1");
            {
                assert_eq!(
                    NodeAddr::parse(&query).unwrap().password.as_deref(),
                    Some(password),
                    "{query}"
                );
            }
            assert!(!redact(&query).contains("S3CR"), "{query}");
        }
    }

    #[test]
    fn debug_of_a_builder_blanks_passwords() {
        let b = builder().nodes([
            "redis://app:s3cret@127.0.0.1:1",
            "redis://:s3cret@127.0.0.1:2",
            "redis://s3cret@127.0.0.1:3",
            "127.0.0.1:4",
        ]);
        let d = format!("{b:?}");
        assert!(!d.contains("s3cret"), "{d}");
        assert!(d.contains("redis://app:***@127.0.0.1:1"), "{d}");
        assert!(d.contains("redis://:***@127.0.0.1:2"), "{d}");
        assert!(d.contains("redis://***@127.0.0.1:3"), "{d}");
        assert!(d.contains("127.0.0.1:4"), "{d}");
    }

    #[test]
    fn builder_validates() {
        let five = [
            "127.0.0.1:1",
            "127.0.0.1:2",
            "127.0.0.1:3",
            "127.0.0.1:4",
            "127.0.0.1:5",
        ];
        let b = builder().nodes(five);
        assert_eq!(b.config().unwrap().quorum(), 3);
        assert_eq!(b.clone().quorum(5).config().unwrap().quorum(), 5);
        assert_eq!(
            b.clone().quorum(2).config().unwrap_err(),
            ConfigError::Quorum {
                quorum: 2,
                nodes: 5,
                min: 3
            }
        );
        assert!(b.clone().quorum(6).config().is_err());
        assert_eq!(
            b.clone()
                .drift_factor(f64::NAN)
                .config()
                .unwrap_err()
                .to_string(),
            "drift factor NaN is not in [0, 1)"
        );
        assert_eq!(
            b.clone().node_timeout(Duration::ZERO).config().unwrap_err(),
            ConfigError::NodeTimeout(Duration::ZERO)
        );
        let years = Duration::from_secs(500_000_000_000 * 31_557_600 / 1_000_000);
        for huge in [years, Duration::from_secs(u64::MAX), Duration::MAX] {
            assert_eq!(
                b.clone().node_timeout(huge).config().unwrap_err(),
                ConfigError::NodeTimeout(huge)
            );
            assert_eq!(
                b.clone().retry(3, huge).config().unwrap_err(),
                ConfigError::RetryDelay(huge)
            );
        }
        assert!(b
            .clone()
            .node_timeout(MAX_OPTION_DURATION)
            .retry(3, MAX_OPTION_DURATION)
            .config()
            .is_ok());
        assert_eq!(
            b.clone().retry(0, Duration::ZERO).config().unwrap_err(),
            ConfigError::Tries
        );
        assert_eq!(builder().config().unwrap_err(), ConfigError::NoNodes);
        assert_eq!(
            builder()
                .nodes(["127.0.0.1:1", "redis://127.0.0.1:1"])
                .config()
                .unwrap_err(),
            ConfigError::DuplicateNode("127.0.0.1:1".into())
        );
        // Same server, other database: two independent keyspaces, though not independent
        // failures; allowed, as the user asked for it.
        assert!(builder()
            .nodes(["127.0.0.1:1", "127.0.0.1:1/1"])
            .config()
            .is_ok());
        // Four nodes need three.
        assert_eq!(builder().nodes(&five[..4]).config().unwrap().quorum(), 3);
    }
}
