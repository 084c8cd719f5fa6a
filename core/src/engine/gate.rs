//! Fair mode: a waiter's read of the line never overtakes another waiter's claim of the same
//! client.
//!
//! The waiters of a client share one place in each line. A claim takes that place out of the
//! line on every master where it takes the resource; where the claim as a whole fails, its
//! release (the keeping form, [`OpKind::Unclaim`]) puts the place back at the client's ticket.
//! A wait or enter of another waiter of the client that reaches a master between the two
//! finds the client out of the line there and joins it again at its end: its ticket is then
//! the largest, every master moves the client to it, and clients that joined after it are
//! served first (simulator seed 55956, `--faults none`: two waiters of c2, their timers due
//! together, c2 passed by c3's next waiter).
//!
//! So such a round is parked: queued nowhere, its deadline not running, until no claim of
//! the client on one of its resources is open. A claim is open from its submission until it
//! won, was refused everywhere (it took nothing), or its release went out (matched by its
//! token; the connections' order then puts the release ahead of the parked round on every
//! master). A claim whose release never comes (a driver that dropped it) stops holding rounds
//! back [`GATE_LEASE`] node timeouts after it was sent.

use std::time::Instant;

use super::{Engine, Tag};
use crate::command::{Command, Expect, OpKind, OwnedCommand};
use crate::lock::Names;
use crate::round::{Round, Until};
use crate::{error::NodeOutcome, Token};

/// How many node timeouts after its submission an open claim stops holding rounds back: its
/// round lasts one at most, and its release goes out as soon as it is decided.
const GATE_LEASE: u32 = 3;

/// A claim of this client that may have taken its place out of a line somewhere.
#[derive(Debug)]
pub(super) struct Gate {
    slot: u32,
    gen: u32,
    names: Names,
    token: Token,
    /// When its round was submitted.
    opened: Instant,
}

/// A wait or enter round held back by a [`Gate`]: the command, owned.
#[derive(Debug)]
pub(super) struct Parked {
    tag: Tag,
    until: Until,
    cmd: OwnedCommand,
}

/// Whether two sets of resources share one.
fn overlap(a: &[crate::lock::Name], b: &[crate::lock::Name]) -> bool {
    a.iter().any(|x| b.contains(x))
}

impl<U> Engine<U> {
    /// Fair mode: whether `cmd` must wait for an open claim of this client before it goes out.
    pub(super) fn must_park(&self, cmd: &Command<'_>) -> bool {
        self.fair.is_some()
            && matches!(cmd.kind, OpKind::Wait | OpKind::Enter)
            && self.gates.iter().any(|g| overlap(&g.names, cmd.resources))
    }

    /// Fair mode: the claim `cmd` (operation `slot`, `gen`) was submitted at `t1`.
    pub(super) fn claim_opened(&mut self, slot: u32, gen: u32, cmd: &Command<'_>, t1: Instant) {
        if let Some(token) = cmd.token {
            self.gates.push(Gate {
                slot,
                gen,
                names: cmd.resources.iter().cloned().collect(),
                token: *token,
                opened: t1,
            });
        }
    }

    /// Holds `cmd` (operation `tag`, ending as `until`) back until no gate holds it.
    pub(super) fn park(&mut self, cmd: &Command<'_>, tag: Tag, until: Until) {
        self.parked.push(Parked {
            tag,
            until,
            cmd: OwnedCommand::new(cmd),
        });
    }

    /// The claim round `tag` ended as `round` (closed): its gate opens if it won or took
    /// nothing anywhere; else its release will.
    pub(super) fn claim_ended(&mut self, tag: Tag, won: bool, round: &Round) {
        let Some(k) = self
            .gates
            .iter()
            .position(|g| (g.slot, g.gen) == (tag.slot, tag.gen))
        else {
            return;
        };
        let refused = round
            .reports_iter()
            .all(|o| matches!(o, NodeOutcome::Held | NodeOutcome::Down));
        if won || refused {
            self.gates.swap_remove(k);
        }
    }

    /// `cmd` is going out: a release of a claim's token (the keeping form after a failed
    /// claim, or the release of one abandoned) opens that claim's gate.
    pub(super) fn claim_answered(&mut self, cmd: &Command<'_>) {
        if !matches!(cmd.kind, OpKind::Unclaim | OpKind::Release) {
            return;
        }
        if let Some(token) = cmd.token {
            self.gates.retain(|g| g.token != *token);
        }
    }

    /// Forgets what the operations whose caller `gone` says went away (an async caller that
    /// dropped its future, whose leave or release the driver fires next) still hold in the
    /// engine, before that command is fired:
    /// - every round of theirs held back by an open claim (see `gate.rs`) ends unsent: sent
    ///   after the leave, it would put the client back in the line with nobody waiting there;
    /// - their rounds in flight stop counting as a waiter of this client in the line (an
    ///   abandoned wait's read would otherwise keep its own leave; see `Engine::waits_for`).
    ///   The rounds themselves run on, so that the connections stay in step.
    pub fn forget_gone(&mut self, gone: impl Fn(&U) -> bool) {
        if !self.fair_rounds.is_empty() {
            let mut rounds = std::mem::take(&mut self.fair_rounds);
            rounds.retain(|r| {
                let tag = Tag::of(r.slot, r.gen, Expect::Script);
                !self.op(tag).is_some_and(|op| gone(&op.user))
            });
            self.fair_rounds = rounds;
        }
        if self.parked.is_empty() {
            return;
        }
        let parked = std::mem::take(&mut self.parked);
        for p in parked {
            if self.op(p.tag).is_some_and(|op| gone(&op.user)) {
                self.complete(p.tag);
            } else {
                self.parked.push(p);
            }
        }
    }

    /// How many rounds are held back by open claims of this client.
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Sends every round held back, whatever holds it: for a driver that cannot send the
    /// claim's release before those rounds end (the blocking client, whose batches run one at
    /// a time, and whose caller of the claim sends its release in a later batch).
    pub fn send_parked(&mut self, now: Instant) {
        let gates = std::mem::take(&mut self.gates);
        self.unpark(now);
        self.gates = gates;
    }

    /// When the oldest open claim stops holding parked rounds back, if any is parked.
    pub(super) fn gates_due(&self) -> Option<Instant> {
        if self.parked.is_empty() {
            return None;
        }
        let lease = self.node_timeout.saturating_mul(GATE_LEASE);
        self.gates
            .iter()
            .map(|g| crate::time::later(g.opened, lease))
            .min()
    }

    /// At `now`: drops the gates past their lease (also with nothing parked: a claim whose
    /// release never came is not kept for ever), and sends every parked round no gate holds
    /// any longer, in the order they were submitted (each round's deadline runs from now).
    pub(super) fn unpark(&mut self, now: Instant) {
        if self.gates.is_empty() && self.parked.is_empty() {
            return;
        }
        let lease = self.node_timeout.saturating_mul(GATE_LEASE);
        self.gates
            .retain(|g| crate::time::later(g.opened, lease) > now);
        if self.parked.is_empty() {
            return;
        }
        let parked = std::mem::take(&mut self.parked);
        let mut still = Vec::new();
        for p in parked {
            if self.op(p.tag).is_none() {
                // Ended meanwhile.
                continue;
            }
            let cmd = p.cmd.borrow();
            if self.gates.iter().any(|g| overlap(&g.names, cmd.resources)) {
                still.push(p);
                continue;
            }
            self.deadlines.push(std::cmp::Reverse((
                crate::time::later(now, self.node_timeout),
                p.tag.slot,
                p.tag.gen,
            )));
            self.queue_everywhere(&cmd, p.tag, p.until, now);
        }
        // Rounds parked while these were sent (none: a wait or enter opens no gate) go last.
        still.append(&mut self.parked);
        self.parked = still;
    }
}
