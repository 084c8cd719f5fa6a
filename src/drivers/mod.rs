//! Floor 3, the drivers: they only move bytes between the engine and the sockets, and wait.
//! The blocking one waits on mio and hands the engine between the threads that share a
//! client; the async one is a tokio task. (The folder is not called `tokio` at the crate root,
//! where it would shadow the crate of that name.)

pub(crate) mod blocking;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;
