//! Node addresses and the client configuration: the options, checked into a [`Config`].
//!
//! | module | its job |
//! |---|---|
//! | `mod.rs` | the validated [`Config`] and its rules (quorum, ttl bounds), [`Scripts`] |
//! | `addr.rs` | [`NodeAddr`]: parsing, resolving, printing with the password redacted |
//! | `options.rs` | [`Options`]: every option with its default, checked into a `Config` |
//!
//! TLS settings are not here: they belong to the drivers (`redlock-mux`'s `Builder`).

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

/// How releases and extensions are sent (`Builder::scripts`).
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
    /// acquisitions still need scripts: they go out as `EVAL`, with the script's text
    /// (nothing is loaded ahead in this mode).
    Native,
    /// The same scripts as a function library (Redis 7+, Valkey), loaded with `FUNCTION LOAD`
    /// where missing and called with `FCALL`: for users whose ACL denies `EVAL`/`EVALSHA`
    /// but allows `FCALL` (and `FUNCTION LOAD`, or an operator who loaded
    /// [`script::LIBRARY`](crate::script::LIBRARY) for them). Everything works in this mode,
    /// sets of resources and fencing included.
    Function,
}

/// A validated configuration, shared by both clients.
#[derive(Debug, Clone)]
pub struct Config {
    /// The masters, in the order given.
    pub(crate) nodes: Vec<NodeAddr>,
    /// Each master's address as errors name it (its `Display`, without the password), written
    /// once here rather than for every failed round.
    pub(crate) labels: Vec<String>,
    /// How long each node has to answer, from when the command was written.
    pub(crate) node_timeout: Duration,
    /// Rounds `lock` tries before giving up.
    pub(crate) tries: u32,
    /// The upper bound of the random delay between tries.
    pub(crate) retry_delay: Duration,
    /// The clock-drift factor applied to the ttl.
    pub(crate) drift_factor: f64,
    /// Whether a round ends as soon as its outcome is certain.
    pub(crate) fail_fast: bool,
    /// How many nodes must agree.
    pub(crate) quorum: usize,
    /// The fencing counter's key, when locks are fenced.
    pub(crate) fencing: Option<Box<[u8]>>,
    /// How releases and extensions are sent.
    pub(crate) scripts: Scripts,
    /// Whether waiters are woken by the servers' invalidation pushes (RESP3 tracking).
    pub(crate) wakeups: bool,
    /// Whether every write pass ends with a sentinel that the replies before it wait for.
    pub(crate) verify_stream: bool,
    /// Fair mode's arguments, when it is on.
    pub(crate) fair: Option<crate::command::Fair>,
    /// Test only: acquire fenced locks without the second phase (the negative control).
    #[cfg(feature = "fault-injection")]
    pub(crate) skip_fence_writeback: bool,
}

impl Config {
    /// The fencing counter's key, when locks are fenced (see `Builder::fencing`).
    pub fn fencing_key(&self) -> Option<&str> {
        self.fencing
            .as_deref()
            .map(|k| std::str::from_utf8(k).unwrap_or_default())
    }

    /// Whether fenced acquisitions run their second phase (always, outside the test-only
    /// switch).
    pub fn fence_writeback(&self) -> bool {
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
    /// `Builder::wakeups`).
    pub fn wakeups(&self) -> bool {
        self.wakeups
    }

    /// Whether every reply is checked against the stream before it counts (see
    /// `Builder::verify_stream`).
    pub fn verify_stream(&self) -> bool {
        self.verify_stream
    }

    /// Fair mode's arguments (client id, claim lease), when it is on: waiters queue on the
    /// masters and a release hands the lock to the first of them (see `Builder::fair`).
    pub fn fair(&self) -> Option<&crate::command::Fair> {
        self.fair.as_ref()
    }

    /// When the rounds of lock, unlock and extend end, by the fail-fast option.
    pub fn until(&self) -> crate::round::Until {
        if self.fail_fast {
            crate::round::Until::Decided
        } else {
            crate::round::Until::AllIn
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
        while crate::rules::validity(Duration::from_millis(ms), Duration::ZERO, self.drift_factor)
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

/// The fencing counter's key unless `Builder::fencing_key` sets another.
pub const DEFAULT_FENCING_KEY: &str = "redlock-mux:fencing-counter";

/// Fair mode's default claim lease: how long a hand-off reserves a resource for the waiter it
/// rang. A waiter rings within a round trip; one paused or cut off at that moment delays the
/// others by at most this.
pub const DEFAULT_CLAIM_LEASE: Duration = Duration::from_millis(100);

/// How long a line's key outlives its last visit (a waiter joining it, or waiting again), in
/// ms: an hour. Lines are deleted by the server when their last waiter leaves; this only
/// bounds one left behind by clients that all died while waiting.
pub const QUEUE_TTL_MS: u64 = 3_600_000;

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

mod addr;
mod options;

pub use addr::redact;
pub use addr::{Endpoint, NodeAddr};
pub use options::Options;
