//! Floor 2, the engine and its rules: sans I/O. It takes bytes and instants and gives bytes
//! to write, the next timeout, connections to open or drop, and decided rounds; it never
//! touches a socket or reads the clock.

pub(crate) mod command;
pub(crate) mod conn;
pub(crate) mod engine;
pub(crate) mod eviction;
pub(crate) mod forms;
pub(crate) mod keepalive;
pub(crate) mod ops;
pub(crate) mod round;
pub(crate) mod rules;
pub mod script;
pub(crate) mod time;
pub(crate) mod token;
