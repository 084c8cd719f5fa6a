//! [`Options`]: every option of a client with its default, checked into a [`Config`].

use std::time::Duration;

use super::*;
use crate::error::ConfigError;

/// The options of a client, as given: `redlock-mux`'s `Builder` sets them one by one (and
/// keeps the TLS settings beside them), a simulation or a test fills them in directly.
/// [`validate`](Options::validate) checks them into a [`Config`].
///
/// The defaults follow the reference implementations: node timeout 50 ms, 3 tries with a
/// random delay in [100 ms, 200 ms] between them, drift factor 0.01, fail-fast on, quorum
/// N/2 + 1, unfenced, [`Scripts::Auto`], wake-ups on, replies not checked against a sentinel
/// (the stream is trusted to lose nothing, as TCP and TLS guarantee).
#[derive(Debug, Clone)]
pub struct Options {
    /// The masters: `redis://` URLs or `host:port` strings.
    pub nodes: Vec<String>,
    /// How long each node has to answer a command, from when it was written.
    pub node_timeout: Duration,
    /// How many rounds `lock` tries.
    pub tries: u32,
    /// The upper bound of the random delay between tries (drawn from [delay/2, delay]).
    pub retry_delay: Duration,
    /// The clock-drift factor: validity = ttl - elapsed - (ttl * factor + 2 ms).
    pub drift_factor: f64,
    /// Whether a round stops waiting as soon as its outcome is certain.
    pub fail_fast: bool,
    /// The quorum, when not N/2 + 1; it must be a majority.
    pub quorum: Option<usize>,
    /// Whether locks carry a fencing token.
    pub fencing: bool,
    /// The key of the fencing counter.
    pub fencing_key: String,
    /// How releases and extensions are sent.
    pub scripts: Scripts,
    /// Whether waiters are woken by the servers' invalidation pushes.
    pub wakeups: bool,
    /// Whether waiters queue on the masters and a release hands the lock to the first of them
    /// (fair mode: see `Builder::fair`). Needs wake-ups (RESP3) and scripts or functions
    /// (not [`Scripts::Native`], whose users may run neither); off where either is missing.
    pub fair: bool,
    /// Fair mode: this client's id, its place in the lines and the name of its bell (the
    /// `Builder` draws one at random).
    pub client_id: String,
    /// Fair mode: how long a hand-off reserves the resource for the waiter it rang, which
    /// must claim it within that time (a waiter paused or cut off at that moment delays the
    /// others by this much).
    pub claim_lease: Duration,
    /// Whether each write pass ends with a sentinel `PING` and the replies before it count
    /// only once it has come back in its place (a stream that may lose bytes).
    pub verify_stream: bool,
    /// Test only (feature `fault-injection`): fenced acquisitions skip their second phase.
    #[cfg(feature = "fault-injection")]
    pub skip_fence_writeback: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
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
            verify_stream: false,
            fair: false,
            client_id: String::new(),
            claim_lease: DEFAULT_CLAIM_LEASE,
            #[cfg(feature = "fault-injection")]
            skip_fence_writeback: false,
        }
    }
}

impl Options {
    /// The options with these nodes, the rest at their defaults.
    pub fn with_nodes<I>(nodes: I) -> Options
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Options {
            nodes: nodes.into_iter().map(|n| n.as_ref().to_string()).collect(),
            ..Options::default()
        }
    }

    /// Validates everything and resolves the addresses: at least one node, none given twice,
    /// a majority quorum, a drift factor in [0, 1), a node timeout in (0,
    /// [`MAX_OPTION_DURATION`]], a retry delay at most that, at least one try, a fencing key
    /// when fenced.
    pub fn validate(&self) -> Result<Config, ConfigError> {
        if self.nodes.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        let nodes = self
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
        let quorum = self.quorum.unwrap_or(min);
        if quorum < min || quorum > n {
            return Err(ConfigError::Quorum {
                quorum,
                nodes: n,
                min,
            });
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return Err(ConfigError::DriftFactor(self.drift_factor));
        }
        if self.node_timeout.is_zero() || self.node_timeout > MAX_OPTION_DURATION {
            return Err(ConfigError::NodeTimeout(self.node_timeout));
        }
        if self.retry_delay > MAX_OPTION_DURATION {
            return Err(ConfigError::RetryDelay(self.retry_delay));
        }
        if self.tries == 0 {
            return Err(ConfigError::Tries);
        }
        if self.fencing && self.fencing_key.is_empty() {
            return Err(ConfigError::FencingKey(String::new()));
        }
        let fair = if self.fair && self.wakeups && self.scripts != Scripts::Native {
            if self.claim_lease.is_zero() || self.claim_lease > MAX_OPTION_DURATION {
                return Err(ConfigError::ClaimLease(self.claim_lease));
            }
            let id = &self.client_id;
            let valid = (1..=64).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Err(ConfigError::ClientId(id.clone()));
            }
            Some(crate::command::Fair {
                id: id.as_bytes().into(),
                claim_ms: u64::try_from(self.claim_lease.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
                queue_ttl_ms: QUEUE_TTL_MS,
            })
        } else {
            None
        };
        let labels = nodes.iter().map(NodeAddr::to_string).collect();
        Ok(Config {
            nodes,
            labels,
            node_timeout: self.node_timeout,
            tries: self.tries,
            retry_delay: self.retry_delay,
            drift_factor: self.drift_factor,
            fail_fast: self.fail_fast,
            quorum,
            fencing: self.fencing.then(|| self.fencing_key.as_bytes().into()),
            scripts: self.scripts,
            wakeups: self.wakeups,
            verify_stream: self.verify_stream,
            fair,
            #[cfg(feature = "fault-injection")]
            skip_fence_writeback: self.skip_fence_writeback,
        })
    }
}
