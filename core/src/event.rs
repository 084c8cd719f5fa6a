//! [`Event`]: what happened inside the core that a program may want to see.
//!
//! The core keeps no facade of its own (no `tracing`, no `metrics`): it reports events, and
//! the drivers hand each one, once, to whatever observes them (`redlock-mux` feeds its
//! `tracing` and `metrics` features from here). The statistics ([`Stats`](crate::Stats)) are
//! counted from the same events, in the same place ([`Engine::record`](crate::engine::Engine)),
//! so that no event is counted twice or in two ways.

use std::time::Duration;

use crate::lock::Name;

/// Something the core did or saw.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// Node `node`'s connection is opened (`connects` counts every opening, the first
    /// included: above 1 it is a reconnection).
    Connect {
        /// The node's index in the configuration.
        node: usize,
        /// How many times its connection has been opened.
        connects: u64,
    },
    /// A `NOSCRIPT` (or a missing function) from node `node`, answered by sending the command
    /// again with its body.
    ScriptFallback {
        /// The node's index in the configuration.
        node: usize,
    },
    /// A fenced client could not read node `node`'s eviction policy (`CONFIG GET` denied or
    /// renamed away, or an answer of another shape): its fenced acquisitions count the node
    /// as one whose policy keeps the counter, which the operator must then make sure of.
    EvictionUnchecked {
        /// The node's index in the configuration.
        node: usize,
        /// Why the policy is unknown.
        why: String,
    },
    /// A waiter for a held resource waited `waited` before its next try, ended by `cause`:
    /// `push` (an invalidation pushed by a master, or in fair mode the bell of a hand-off),
    /// `dropped` (a connection closed), `lapse` (fair mode: told that the reservation ahead
    /// may lapse, the waiter read the line again and found the resource handed to it),
    /// `timer` (the `PTTL`s' expiry, or the retry delay, with wake-ups on) or `delay` (the
    /// retry delay alone: wake-ups off, or nodes failing rather than refusing).
    Waited {
        /// The resource waited for (the first of a set).
        resource: Name,
        /// What ended the wait.
        cause: &'static str,
        /// How long it lasted.
        waited: Duration,
    },
}

/// The events an operation reports while it runs, for its driver to hand on.
pub type Events = Vec<Event>;
