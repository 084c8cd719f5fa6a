// Module map (each module, its job):
//   command    the commands of a round, encoded once; the shape each reply must have
//   conn       one connection: the FIFO of replies owed, login, sentinel, pushes, resends
//   engine     every round in flight on every node: routing, deadlines, watches
//   eviction   a fenced client's reading of a master's eviction policy
//   forms      the fallback chain of a script call: native, script, function
//   keepalive  the keep-alive plan of a guard, and when loss must be reported
//   ops        what a round means for each operation: acquisition, extension, retries, waits
//   random     where tokens and jitter come from (given by the caller)
//   round      one round's tally: votes in, a decision out
//   rules      the validity rule
//   script     the Lua scripts and the function library
//   time       instant arithmetic that cannot overflow
//   token      lock tokens

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
