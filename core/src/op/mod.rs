//! Every operation as one state machine of one shape ([`Operation`]), and what its rounds mean.
//!
//! A driver runs any operation with one loop: it calls [`Operation::step`] with what the last
//! step came to ([`Input`]), does what the returned [`Step`] says (run a round on every node,
//! sleep, register a watch, wait for it), and repeats until [`Step::Done`]; then
//! [`Operation::finish`] gives the result. The order of the rounds of every operation is
//! written here, once; drivers decide nothing.
//!
//! | operation | its rounds |
//! |---|---|
//! | [`Acquire`] | acquire; fenced: the write-back; on failure: the release; between tries: a wait, or a watch, its read and a wait (`retry.rs`) |
//! | [`Extend`]  | the extension, with the lock's validity capped before it goes out |
//! | [`Release`] | the release |
//! | [`Inspect`] | `GET`, then `PTTL`; with the line: `ZRANGE ... WITHSCORES` and `PTTL` of the line |
//!
//! | module | its job |
//! |---|---|
//! | `acquire.rs` | the [`Acquire`] operation: tries, and the waits and watches between them |
//! | `attempt.rs` | the rounds of one try ([`Acquisition`]) |
//! | `extend.rs` | the validity cap and the [`Extend`] operation |
//! | `release.rs` | the [`Release`] and [`Inspect`] operations |
//! | `retry.rs` | the retry policy, waits and watches ([`Retry`], [`Waiting`]) |
//! | `verdict.rs` | what a round means: granted, conflict, confirmed, expired |

use std::time::{Duration, Instant};

use crate::command::Command;
use crate::config::Config;
use crate::engine::Wake;
use crate::error::Error;
use crate::event::Events;
use crate::random::Randomness;
use crate::round::{Round, Until};

mod acquire;
mod attempt;
mod extend;
mod release;
mod retry;
mod verdict;

pub use acquire::Acquire;
pub use attempt::Acquisition;
pub use extend::{begin_extend, finish_extend, Extend};
pub use release::{Inspect, Release};
pub use retry::{jitter_yields, wake_jitter, Next, Retry, Waiting, WAKE_JITTER};
pub use verdict::{acquired, confirmed, ttl_ms};

/// What the last step came to, handed to the next [`Operation::step`].
#[derive(Debug)]
pub enum Input {
    /// The operation starts.
    Start,
    /// The round of [`Step::Round`]: its tally and the instant read before its first write,
    /// or why it could not run.
    Round(Result<(Round, Instant), Error>),
    /// The sleep of [`Step::Sleep`] or [`Step::Jitter`] is over.
    Slept,
    /// The watch of [`Step::Watch`] is registered.
    Watching,
    /// The wait of [`Step::Await`] is over: the watch fired (why), or the deadline passed
    /// (`None`). The watch is taken back.
    Woken(Option<Wake>),
}

/// What the driver does next for an operation.
#[derive(Debug)]
pub enum Step<'a> {
    /// Run this command as one round on every node, until the round ends as `Until` says;
    /// then [`Input::Round`].
    Round(Command<'a>, Until),
    /// Sleep this long; then [`Input::Slept`].
    Sleep(Duration),
    /// A short random pause after a wake-up (waiters woken by the same push do not all try
    /// at once), at most [`WAKE_JITTER`]: a driver whose timer cannot sleep that little may
    /// yield a few times instead; then [`Input::Slept`].
    Jitter(Duration),
    /// Register a watch of this key with the engine, before the next round goes out (so no
    /// push is missed); then [`Input::Watching`].
    Watch(&'a [u8]),
    /// Wait until the watch fires or the deadline passes, then take the watch back; then
    /// [`Input::Woken`]. `None`: no wait (the watch is only taken back).
    Await(Option<Instant>),
    /// The operation is over: [`Operation::finish`] gives its result.
    Done,
}

/// What a step needs besides the operation's own state: the time, randomness, and where to
/// report events.
pub struct Cx<'a> {
    /// The monotonic time, read by the driver just before the step.
    pub now: Instant,
    /// Tokens and jitter.
    pub rng: &'a mut dyn Randomness,
    /// Events the step reports, for the driver to hand on.
    pub events: &'a mut Events,
}

impl std::fmt::Debug for Cx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cx")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

/// An operation: a state machine that a driver runs step by step (see the module's docs).
pub trait Operation {
    /// What it gives when it succeeds.
    type Output;

    /// The next step, given what the last one came to. `cfg` is the client's configuration
    /// (the step's command may borrow from it); `cx` has the time and randomness.
    fn step<'a>(&'a mut self, input: Input, cfg: &'a Config, cx: &mut Cx<'_>) -> Step<'a>;

    /// The result, once [`step`](Operation::step) said [`Step::Done`]; [`Error::Aborted`]
    /// before.
    fn finish(self) -> Result<Self::Output, Error>;

    /// The command to send, without waiting for it, if the operation is abandoned now (an
    /// async caller dropped its future): an acquisition in progress releases its token.
    fn abandon(&self) -> Option<Command<'_>> {
        None
    }

    /// The operation's name, for spans: `acquire`, `extend`, `release`, `inspect`.
    fn name(&self) -> &'static str;
}

#[cfg(test)]
mod tests;
