// Module map (each module, its job):
//   master            the simulated Redis master, sans I/O: bytes in, replies and pushes out
//   master/conn       one client connection's buffers, protocol, login and tracking state
//   master/keyspace   keys, values and expiry on the master's own clock; invalidations
//   master/commands   the command table: lookup, arity, authentication, ACL, dispatch
//   master/session    HELLO, AUTH, SELECT, PING, CLIENT, CONFIG
//   master/strings    GET, SET (NX, XX, PX, EX, KEEPTTL, IFEQ), PTTL, DEL, INCR, PEXPIRE,
//                     DELIFEQ, DELEX
//   master/scripts    EVAL, EVALSHA, FCALL, SCRIPT, FUNCTION: the project's scripts, run
//                     natively, keyed by their SHA-1
//   master/reply      replies, encoded in RESP2 or RESP3 as the connection negotiated
//   scripts           the project's scripts by digest; the function library's shape
//   profile           server kinds and versions, ACL users, and each version's error texts
//   sha1              SHA-1, for script digests
//   world             the simulated world: clock, event queue, links, faults, clients
//   check             the history of a run and the checker of every safety claim
//   fairness          fair mode's promises (order in line, bounded passing), judged apart
//   run               seeds run, shrunk and reported (the binary's engine)
//   rng, trace        the simulation's randomness; the trace and its hash

//! Deterministic simulation of redlock-mux (issue 25).
//!
//! This crate holds the simulated Redis master: [`Master`] takes a connection's bytes and the
//! master's own clock (a millisecond count passed with every call) and gives back the bytes
//! the server would write, RESP2 or RESP3 as the connection negotiated, invalidation pushes
//! included. It implements what the core sends (the commands, the project's Lua scripts run
//! natively by their SHA-1, the function library), with the error texts of the server kind
//! and version its [`Profile`] names; `tests/model_vs_real.rs` holds it to real servers.
//!
//! Nothing here reads a clock, draws randomness or iterates a hash map: the same inputs give
//! the same outputs.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod check;
pub mod fairness;
pub mod master;
pub mod profile;
pub mod rng;
pub mod run;
pub mod scripts;
pub mod sha1;
pub mod trace;
pub mod world;

pub use master::{ConnId, Master};
pub use profile::{Denied, Profile, Server, User};
