//! The operations of one or two rounds that hold no state between tries: [`Release`] and
//! [`Inspect`].

use std::borrow::Borrow;

use super::verdict::confirmed;
use super::{Cx, Input, Operation, Step};
use crate::config::Config;
use crate::error::Error;
use crate::inspect::{self, Inspection};
use crate::lock::{Lock, Name};
use crate::round::{Round, Until};

/// The release of a lock on every node, by compare-and-delete: `Ok` once a quorum deleted
/// the key (see [`confirmed`] for the errors).
///
/// `L` is how it has the lock: borrowed (`&Lock`) or owned (`Lock`, for a driver that keeps
/// the operation across its waits, as the simulator does).
#[derive(Debug)]
pub struct Release<L> {
    lock: L,
    result: Option<Result<(), Error>>,
}

impl<L: Borrow<Lock>> Release<L> {
    /// The release of `lock`.
    pub fn new(lock: L) -> Release<L> {
        Release { lock, result: None }
    }
}

impl<L: Borrow<Lock>> Operation for Release<L> {
    type Output = ();

    fn step<'a>(&'a mut self, input: Input, cfg: &'a Config, cx: &mut Cx<'_>) -> Step<'a> {
        match input {
            Input::Start => Step::Round(self.lock.borrow().release(), cfg.until()),
            Input::Round(round) => {
                let expired = self.lock.borrow().is_expired_at(cx.now);
                self.result = Some(round.and_then(|(round, _)| confirmed(cfg, &round, expired)));
                Step::Done
            }
            _ => Step::Done,
        }
    }

    fn finish(self) -> Result<(), Error> {
        self.result.unwrap_or(Err(Error::Aborted))
    }

    fn name(&self) -> &'static str {
        "release"
    }
}

/// Who holds a resource on every node, and for how long: `GET`, then `PTTL`, each a round
/// that waits for every node; [`with_line`](Inspect::with_line), then the line of fair
/// waiters too: `ZRANGE ... WITHSCORES` and `PTTL` of the line's key, two more such rounds.
/// Nothing is changed.
#[derive(Debug)]
pub struct Inspect {
    name: [Name; 1],
    /// The line's key, when the line is read.
    line: Option<[Name; 1]>,
    /// The rounds read so far.
    rounds: Vec<Round>,
    result: Option<Result<Inspection, Error>>,
}

impl Inspect {
    /// The inspection of `resource`.
    pub fn new(resource: &str) -> Inspect {
        Inspect {
            name: [Name::new(resource)],
            line: None,
            rounds: Vec::new(),
            result: None,
        }
    }

    /// The inspection of `resource` and of its line of fair waiters on every node.
    pub fn with_line(resource: &str) -> Inspect {
        Inspect {
            line: Some([inspect::line_key(resource)]),
            ..Inspect::new(resource)
        }
    }
}

impl Operation for Inspect {
    type Output = Inspection;

    fn step<'a>(&'a mut self, input: Input, cfg: &'a Config, _: &mut Cx<'_>) -> Step<'a> {
        let [get, pttl] = inspect::commands(&self.name);
        let mut all = vec![get, pttl];
        if let Some(line) = &self.line {
            all.extend(inspect::line_commands(line));
        }
        match input {
            Input::Start => Step::Round(all[0], Until::AllIn),
            Input::Round(Ok((round, _))) => {
                self.rounds.push(round);
                if let Some(next) = all.get(self.rounds.len()) {
                    return Step::Round(*next, Until::AllIn);
                }
                self.result = match self.rounds.as_slice() {
                    [get, pttl] => Some(Ok(Inspection::from_rounds(cfg, get, pttl))),
                    [get, pttl, line, line_pttl] => Some(Ok(Inspection::from_rounds(
                        cfg, get, pttl,
                    )
                    .with_lines(line, line_pttl))),
                    _ => None,
                };
                Step::Done
            }
            Input::Round(Err(e)) => {
                self.result = Some(Err(e));
                Step::Done
            }
            _ => Step::Done,
        }
    }

    fn finish(self) -> Result<Inspection, Error> {
        self.result.unwrap_or(Err(Error::Aborted))
    }

    fn name(&self) -> &'static str {
        "inspect"
    }
}
