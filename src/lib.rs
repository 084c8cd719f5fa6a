// Module map (each module, its job):
//   builder   Builder: every option (the core's Options) and the TLS settings, for either client
//   drivers   floor 3: the blocking client on mio, the async client on tokio, TLS; they move bytes
//   lock      Lock: the core's lock record, with its validity from the monotonic clock
//   observe   spans, and the core's events through the tracing / metrics facades (features)
// Floor 2, the sans-I/O core (engine, connections, commands, rounds, rules, operations, the
// configuration, errors and statistics), is the crate `redlock-core` (folder core/); its public
// types are re-exported here.

//! Redlock, the distributed lock over N independent Redis masters, with one write pass to all
//! of them.
//!
//! [`Redlock::try_lock`] reads the monotonic clock, writes `SET resource token NX PX ttl` to
//! every master over non-blocking sockets in one pass, and tallies the replies as they arrive,
//! each node under its own deadline. The lock is held when a quorum (N/2 + 1) said `OK` and
//! time is left: validity = ttl - elapsed - (ttl * drift_factor + 2 ms). Release and
//! extension run compare-and-delete and compare-and-pexpire Lua scripts by cached `EVALSHA`.
//!
//! Two clients, one engine:
//! - [`Redlock`] blocks the calling thread, on mio and no runtime; threads share one and are
//!   pipelined, and [`BlockingGuard`] keeps a lock alive from a helper thread.
//! - `AsyncRedlock` (feature `tokio`, on by default) is for async code; its tasks are
//!   pipelined through one driver task, and `LockGuard` keeps a lock alive in the background.
//!
//! Both are built the same way (`Redlock::builder()...build()`, `AsyncRedlock::builder()...
//! build()`, the same options) and behave the same way, because neither decides anything: the
//! crate is three floors, [`resp`] (the wire), a sans-I/O core (the engine that runs every
//! round on every node, the tally, the validity rule, the scripts, the per-connection reply
//! FIFOs) and the drivers, which only move bytes and wait. The algorithm, its safety argument
//! and every promise this crate makes are in `docs/redlock.md`.
//!
//! # What the lock guarantees, and what it does not
//! - While a majority of masters is up, locks can be taken and released; a lock is never held
//!   by two clients at once within its validity, provided clocks drift less than the drift
//!   allowance, no master's wall clock is stepped forward (Redis expires keys by its wall
//!   clock: the masters' NTP must slew, not step), and masters keep their keys.
//! - A master that restarts without its keys can grant a held lock again. Run masters with
//!   `appendfsync always`, or keep a restarted master out for longer than the largest ttl.
//! - A holder paused past its validity may act after another client took the lock. Check
//!   [`Lock::validity`] before acting; where that is not enough, build the client with
//!   [`Builder::fencing`]: each lock then carries a [`Lock::fencing_token`](redlock_core::Lock::fencing_token) that is strictly
//!   greater than every earlier holder's, for the resource to check (masters must keep their
//!   data across restarts for this).
//! - [`Redlock::lock_many`] takes several resources as one lock: all of them or none.
//! - A lock's validity never claims more than its keys have: an extension caps it at the new
//!   ttl before it is sent, whatever its outcome.
//!
//! # Examples
//! ```no_run
//! use std::time::Duration;
//! use redlock_mux::{Error, Redlock};
//!
//! let redlock = Redlock::builder()
//!     .nodes(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"])
//!     .build()?;
//! match redlock.try_lock("jobs:nightly", Duration::from_secs(30)) {
//!     Ok(mut lock) => {
//!         // ... work, checking lock.validity() ...
//!         redlock.extend(&mut lock, Duration::from_secs(30))?;
//!         redlock.unlock(&lock)?;
//!     }
//!     Err(Error::Conflict { nodes, .. }) => eprintln!("someone else runs it: {nodes}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]
// Without the `tls` feature the TLS settings are `()`, and passing them on (`let tls = ...`,
// `tls.clone()`) is what clippy calls unit values; the code is the same for both builds.
#![cfg_attr(
    not(feature = "tls"),
    allow(clippy::let_unit_value, clippy::unit_arg, clippy::clone_on_copy)
)]

mod builder;
mod drivers;
mod lock;
mod observe;

// The core's modules, under the names the drivers use.
use redlock_core as core;
use redlock_core::{config, error, stats};

pub use crate::builder::Builder;
pub use crate::drivers::blocking::{BlockingGuard, Redlock};
#[cfg(feature = "tokio")]
pub use crate::drivers::tokio::{AsyncRedlock, LockGuard};
pub use crate::drivers::OsRandom;
pub use crate::lock::Lock;
pub use redlock_core::script;
pub use redlock_core::{
    loss_margin, AgreedLine, Config, ConfigError, Endpoint, Error, Event, FencingFault, Holder,
    Inspection, KeepAlive, Line, Loss, NodeAddr, NodeOutcome, NodeReport, NodeReports, NodeState,
    NodeStats, Options, Scripts, Semaphore, Stats, Token, Waiter, DEFAULT_FENCING_KEY,
    DEFAULT_MAX_HOLD, DEFAULT_PORT, MAX_FENCING_TOKEN, MAX_OPTION_DURATION, MAX_PERMITS,
    MAX_RESOURCES, MAX_TTL,
};

/// Re-exported: the deterministic core these clients drive.
pub use redlock_core;

#[cfg(feature = "metrics")]
pub use crate::observe::describe_metrics;

/// Re-exported: the RESP codec this crate speaks.
pub use resp;

/// The README's examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
