//! Deadlines: every round ends by its node timeout, every connect by `CONNECT_TIMEOUT`; the
//! heap of deadlines stays the size of what is in flight.

use std::cmp::Reverse;
use std::time::Instant;

use smallvec::SmallVec;

use super::{Engine, Link, Socket, Tag};
use crate::conn::CONNECT_TIMEOUT;
use crate::error::NodeOutcome;

impl<U> Engine<U> {
    /// Ends every round whose deadline has passed (nodes still owing time out) and drops
    /// connects that take too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.unpark(now);
        if !self.bells.is_empty() {
            self.fire_due_bells(now);
        }
        if !self.lapses.is_empty() {
            self.fire_due_lapses(now);
        }
        self.forget_held_wakes(now);
        let due = |e: &Self| {
            e.deadlines
                .peek()
                .is_some_and(|Reverse((when, ..))| *when <= now)
        };
        if self.connecting == 0 && !due(self) {
            return;
        }
        self.time_out_rounds(now);
        // A claim decided by its deadline above may have let parked rounds go.
        self.unpark(now);
    }

    /// Ends every round whose deadline has passed, and drops connects that take too long.
    fn time_out_rounds(&mut self, now: Instant) {
        while let Some(&Reverse((when, slot, gen))) = self.deadlines.peek() {
            if when > now {
                break;
            }
            self.deadlines.pop();
            let tag = Tag::to_find(slot, gen);
            if let Some(op) = self.op_mut(tag) {
                let mut timed_out: SmallVec<[usize; 8]> = SmallVec::new();
                for i in 0..op.round_len() {
                    if op.round.is_pending(i) {
                        timed_out.push(i);
                    }
                }
                for i in timed_out {
                    self.vote(tag, i, NodeOutcome::Timeout);
                }
            }
        }
        for i in 0..self.nodes.len() {
            if self.connecting == 0 {
                break;
            }
            if let Link::Connecting(since) = self.nodes[i].link {
                if connect_overdue(since, now) {
                    self.fail_node(i, &NodeOutcome::Timeout, now, Socket::Held);
                }
            }
        }
    }

    /// Drops the deadlines of rounds that ended early: those at the top at once, and all of
    /// them once they outnumber the live ones, so that the heap stays the size of what is in
    /// flight (and stops growing, and allocating, in a steady state).
    pub(super) fn prune_deadlines(&mut self) {
        while let Some(&Reverse((_, slot, gen))) = self.deadlines.peek() {
            if self.op(Tag::to_find(slot, gen)).is_some() {
                break;
            }
            self.deadlines.pop();
        }
        if self.deadlines.len() > 2 * self.live + 16 {
            let ops = &self.ops;
            self.deadlines.retain(|Reverse((_, slot, gen))| {
                ops.get(*slot as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|op| op.gen == *gen)
            });
        }
    }

    /// When [`handle_timeout`](Engine::handle_timeout) must next be called, if nothing else
    /// happens first.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.prune_deadlines();
        let mut round = self.deadlines.peek().map(|Reverse((when, ..))| *when);
        if !self.bells.is_empty() {
            if let Some(bell) = self.bells_due() {
                round = Some(round.map_or(bell, |r| r.min(bell)));
            }
        }
        if let Some(lapse) = self.lapses_due() {
            round = Some(round.map_or(lapse, |r| r.min(lapse)));
        }
        if let Some(gate) = self.gates_due() {
            round = Some(round.map_or(gate, |r| r.min(gate)));
        }
        if self.connecting == 0 {
            return round;
        }
        let connect = self
            .nodes
            .iter()
            .filter_map(|n| match n.link {
                Link::Connecting(since) => Some(crate::time::later(since, CONNECT_TIMEOUT)),
                _ => None,
            })
            .min();
        match (round, connect) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Whether a connect started at `since` has run past [`CONNECT_TIMEOUT`] at `now` (its node
/// then fails with a timeout).
pub(super) fn connect_overdue(since: Instant, now: Instant) -> bool {
    now.saturating_duration_since(since) >= CONNECT_TIMEOUT
}
