// Module map (each module, its job):
//   command    the commands of a round, encoded once; the shape each reply must have
//   config     node addresses, script modes and the validated parameters (no TLS: drivers' own)
//   conn       one connection: the FIFO of replies owed, login, sentinel, pushes, resends
//   engine     every round in flight on every node: routing, deadlines, watches
//   error      Error, ConfigError, NodeOutcome and the per-node reports
//   event      what happened, for the drivers to hand to tracing and metrics (counted once)
//   eviction   a fenced client's reading of a master's eviction policy
//   forms      the fallback chain of a script call: native, script, function
//   inspect    a resource's holder and ttl on every node (status)
//   keepalive  the keep-alive plan of a guard, and when loss must be reported
//   lock       a held lock: resources, token, validity, fencing token
//   op         every operation as one state machine (acquire, extend, release, inspect) and what its rounds mean
//   random     where tokens and jitter come from (given by the caller)
//   round      one round's tally: votes in, a decision out
//   rules      the validity rule
//   script     the Lua scripts and the function library
//   stats      what each node's connections have seen
//   time       instant arithmetic that cannot overflow
//   token      lock tokens

//! The deterministic core of `redlock-mux`: the Redlock engine, its rules and its operations,
//! sans I/O.
//!
//! It takes bytes and instants and gives bytes to write, the next timeout, connections to
//! open or drop, decided rounds and events; it never touches a socket, reads the clock or draws
//! randomness of its own: every `now` is an argument, and tokens and jitter come from the
//! caller's [`random::Randomness`], so the same inputs give the same outputs
//! (`determinism_tests.rs`). The drivers of `redlock-mux` (blocking on mio, async on tokio)
//! only move bytes and wait; a simulator can run this crate against simulated masters.
//!
//! Users of the lock want `redlock-mux`, which re-exports the public types of this crate.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod command;
pub mod config;
pub mod conn;
pub mod engine;
pub mod error;
pub mod event;
pub mod eviction;
pub mod forms;
pub mod inspect;
pub mod keepalive;
pub mod lock;
pub mod op;
pub mod random;
pub mod round;
pub mod rules;
pub mod script;
pub mod semaphore;
pub mod stats;
pub mod time;
pub mod token;

pub use crate::config::{
    Config, Endpoint, NodeAddr, Options, Scripts, DEFAULT_CLAIM_LEASE, DEFAULT_FENCING_KEY,
    DEFAULT_PORT, MAX_FENCING_TOKEN, MAX_OPTION_DURATION, MAX_TTL,
};
pub use crate::error::{ConfigError, Error, FencingFault, NodeOutcome, NodeReport, NodeReports};
pub use crate::event::Event;
pub use crate::inspect::{AgreedLine, Holder, Inspection, Line, NodeState, Waiter};
pub use crate::keepalive::{loss_margin, KeepAlive, Loss, DEFAULT_MAX_HOLD};
pub use crate::lock::{Lock, MAX_RESOURCES};
pub use crate::semaphore::{Semaphore, MAX_PERMITS};
pub use crate::stats::{NodeStats, Stats};
pub use crate::token::Token;

/// Re-exported: the RESP codec the core speaks.
pub use resp;

#[cfg(test)]
mod determinism_tests;
