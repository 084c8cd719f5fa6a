//! Floor 2, the engine and its rules: sans I/O. It takes bytes and instants and gives bytes
//! to write, the next timeout, connections to open or drop, and decided rounds; it never
//! touches a socket, reads the clock or draws randomness of its own: every `now` is an
//! argument, and tokens and jitter come from the caller's [`random::Randomness`], so the same
//! inputs give the same outputs (`determinism_tests.rs`).

pub(crate) mod command;
pub(crate) mod conn;
pub(crate) mod engine;
pub(crate) mod eviction;
pub(crate) mod forms;
pub(crate) mod keepalive;
pub(crate) mod ops;
pub(crate) mod random;
pub(crate) mod round;
pub(crate) mod rules;
pub mod script;
pub(crate) mod time;
pub(crate) mod token;

#[cfg(test)]
mod determinism_tests;
