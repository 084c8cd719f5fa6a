//! The builder: every option with its default, checked into a [`Config`] when a client is
//! built.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use redlock_core::config::redact;

use crate::drivers::{TlsOptions, TlsSetup};
use crate::{Config, ConfigError, Options, Scripts};

/// The options of a client, and the builder of the client `C`:
/// [`Redlock::builder`](crate::Redlock::builder) gives a `Builder<Redlock>` whose `build` makes
/// the blocking client, `AsyncRedlock::builder` a `Builder<AsyncRedlock>` whose `build` makes the
/// async one. The options are the same for both ([`for_client`](Builder::for_client) switches).
///
/// Defaults follow the reference implementations: node timeout 50 ms, 3 tries with a random
/// delay in [100 ms, 200 ms] between them, drift factor 0.01, fail-fast on, quorum N/2 + 1.
///
/// Every duration is bounded: the node timeout must be in (0, [`MAX_OPTION_DURATION`](crate::MAX_OPTION_DURATION)], the
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
    tls: TlsOptions,
    client: PhantomData<fn() -> C>,
}

impl<C> Clone for Builder<C> {
    fn clone(&self) -> Self {
        Builder {
            opts: self.opts.clone(),
            tls: self.tls.clone(),
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
            // Fair mode on (see `fair`): the builder draws the client id it needs, which
            // `Options` (the core's deterministic configuration) cannot.
            opts: Options {
                fair: true,
                ..Options::default()
            },
            tls: Default::default(),
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
            tls: self.tls,
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
    /// (drawn uniformly from [delay/2, delay]): at most [`MAX_OPTION_DURATION`](crate::MAX_OPTION_DURATION), and zero for
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

    /// Whether locks carry a fencing token ([`Lock::fencing_token`](redlock_core::Lock::fencing_token)),
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
    /// [`DEFAULT_FENCING_KEY`](crate::DEFAULT_FENCING_KEY)). Pick a name no application data uses: the counter must only
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

    /// Whether waiters line up on the masters and a release hands the lock to the first of
    /// them (default on). At 2 to 128 contenders it hands the lock over in about half a
    /// millisecond, wakes one waiter per release and serves them in order; off, every
    /// release wakes every waiter of the resource (a herd, whose cost grows with the
    /// waiters). What it costs an uncontended lock, and what still limits it, are in
    /// docs/redlock.md, "Waiting in line".
    ///
    /// On: a `lock` that finds a single resource held joins the resource's line on every
    /// master (a sorted set by arrival, one place per client however many of its threads or
    /// tasks wait) and waits for its bell; every release hands the resource to the head of the
    /// line, skipping waiters whose process is gone, and reserves it for that waiter for the
    /// claim lease ([`claim_lease`](Builder::claim_lease)), so that one waiter is woken per
    /// release, and no plain `SET NX` passes it. The waiter still takes the lock only with a
    /// quorum of masters within its validity: the line decides who tries, never who holds.
    /// Needs wake-ups (RESP3) and scripts or functions: under
    /// [`Scripts::Function`](crate::Scripts), or `Auto` for a user denied `EVAL`, the line's
    /// scripts run as functions of the library; under `Scripts::Native` it is off. Waiters
    /// are rung only where the user may `SUBSCRIBE` to the `redlock-mux:bell:*` channels (a
    /// user who may not waits for its timer, at most eight claim leases).
    /// A user who may run neither scripts nor functions (under `Scripts::Auto`) still locks:
    /// on such a connection the first try goes out as a plain `SET NX`, the release as the
    /// server's native command where it has one, and a waiter refused by masters that keep
    /// no line waits as without fair mode. Locks over several resources wait as without it.
    /// Every client of a resource should use
    /// the same setting: a release by a client without it rings nobody, and the line then
    /// waits for its timers. Off (`fair(false)`): waiters are woken by the servers'
    /// invalidation pushes, as before fair mode existed.
    pub fn fair(mut self, on: bool) -> Self {
        self.opts.fair = on;
        self
    }

    /// Fair mode: how long a hand-off reserves the resource for the waiter it rang (default
    /// 100 ms). A waiter claims it within a round trip; one that is paused or cut off at that
    /// moment delays the others by this (and a round trip), then loses its place: the waiter
    /// second in line is told, and reads the line again once the lease (and the drift
    /// allowance) has run out. (Two such waiters in a row delay the one behind them about
    /// nine leases: the second, stale too, looks at nothing, and the third waits its timer.)
    pub fn claim_lease(mut self, lease: Duration) -> Self {
        self.opts.claim_lease = lease;
        self
    }

    /// Whether every reply is checked against the byte stream before it counts (default
    /// off).
    ///
    /// Replies are matched to commands by their order on each connection, which rests on a
    /// stream that loses no byte: TCP, TLS (whose records are authenticated) and Unix sockets
    /// guarantee that. A middlebox that drops bytes from a live stream breaks it, and a reply
    /// whose shape fits could then be taken for the command before it (two pipelined
    /// commands fused into one by a lost run of bytes answer once). On: each write pass to a
    /// node ends with a `PING` carrying a nonce, and the replies to the commands before it
    /// count only once that nonce comes back in its place; anything else drops the
    /// connection and every reply it held (the nodes vote as failed). It costs one `PING`
    /// per node per write pass (about one command more per command when rounds do not
    /// overlap) and no round trip. Where `PING` is denied (an ACL), the connection keeps
    /// only the checks it has without this. See docs/redlock.md, "The transport".
    pub fn verify_stream(mut self, on: bool) -> Self {
        self.opts.verify_stream = on;
        self
    }

    /// TLS (feature `tls`): trust the CA certificates in this PEM file for `rediss://` nodes,
    /// instead of the system's roots.
    #[cfg(feature = "tls")]
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.ca_file = Some(path.into());
        self
    }

    /// TLS (feature `tls`): trust the system's root certificates too (they are used by default
    /// only when no CA file is given).
    #[cfg(feature = "tls")]
    pub fn tls_system_roots(mut self, on: bool) -> Self {
        self.tls.system_roots = on;
        self
    }

    /// TLS (feature `tls`): the name to check the servers' certificates against, in place of
    /// each node's host (for servers reached by an address their certificate does not name).
    #[cfg(feature = "tls")]
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls.server_name = Some(name.into());
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
        self.tls.client_auth = Some((cert_file.into(), key_file.into()));
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

    /// Validates everything and resolves the addresses (see [`Options::validate`]). A
    /// `rediss://` node needs the crate's `tls` feature.
    pub fn config(&self) -> Result<Config, ConfigError> {
        self.parts().map(|(config, _)| config)
    }

    /// The validated configuration and the TLS settings its nodes need.
    pub(crate) fn parts(&self) -> Result<(Config, TlsSetup), ConfigError> {
        let config = if self.opts.fair && self.opts.client_id.is_empty() {
            // Each client its own place in the lines, and its own bell.
            let mut opts = self.opts.clone();
            let mut id = [0u8; 8];
            redlock_core::random::Randomness::fill(&mut crate::drivers::OsRandom, &mut id);
            opts.client_id = id.iter().map(|b| format!("{b:02x}")).collect();
            opts.validate()?
        } else {
            self.opts.validate()?
        };
        let tls = crate::drivers::tls_setup(&config, &self.tls)?;
        Ok((config, tls))
    }
}

#[cfg(test)]
#[path = "builder_tests.rs"]
mod tests;
