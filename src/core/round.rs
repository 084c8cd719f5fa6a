//! One round of an operation, sans I/O: per-node outcomes in, a decision out.
//!
//! A round starts when the first command is written and ends when its outcome is certain:
//! with fail-fast, as soon as `quorum` nodes said yes (won) or `N - quorum + 1` nodes cannot
//! say yes (lost); without it, when every node has answered or timed out. The driver feeds
//! outcomes in as replies arrive and asks for the decision after each.

use smallvec::SmallVec;

use crate::error::{NodeOutcome, NodeReport, NodeReports};
use crate::NodeAddr;

/// Whether a round is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not yet: outcomes still owed could change it.
    Open,
    /// At least `quorum` nodes said yes.
    Won,
    /// A quorum of yeses is no longer possible (or every node is in and it was not reached).
    Lost,
}

/// The tally of one round.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    quorum: usize,
    fail_fast: bool,
    outcomes: SmallVec<[Option<NodeOutcome>; 8]>,
    yes: usize,
    no: usize,
}

impl Round {
    pub(crate) fn new(nodes: usize, quorum: usize, fail_fast: bool) -> Round {
        Round {
            quorum,
            fail_fast,
            outcomes: SmallVec::from_elem(None, nodes),
            yes: 0,
            no: 0,
        }
    }

    /// Records a node's outcome; the first one recorded for a node counts, later ones are
    /// ignored (a node votes once per round).
    pub(crate) fn record(&mut self, node: usize, outcome: NodeOutcome) {
        let Some(slot) = self.outcomes.get_mut(node) else {
            return;
        };
        if slot.is_some() {
            return;
        }
        if outcome == NodeOutcome::Ok {
            self.yes += 1;
        } else {
            self.no += 1;
        }
        *slot = Some(outcome);
    }

    /// How many nodes the round counts.
    pub(crate) fn len(&self) -> usize {
        self.outcomes.len()
    }

    /// Whether `node` still owes its outcome.
    pub(crate) fn is_pending(&self, node: usize) -> bool {
        matches!(self.outcomes.get(node), Some(None))
    }

    /// The decision on what has been recorded so far.
    pub(crate) fn decision(&self) -> Decision {
        let n = self.outcomes.len();
        let all_in = self.yes + self.no == n;
        if self.yes >= self.quorum && (self.fail_fast || all_in) {
            Decision::Won
        } else if (self.no > n - self.quorum && self.fail_fast) || all_in {
            Decision::Lost
        } else {
            Decision::Open
        }
    }

    /// Ends the round: every node still owing an outcome gets `missing` (a timeout when the
    /// deadline passed, [`NodeOutcome::Undecided`] when the round was decided early).
    pub(crate) fn close(&mut self, missing: impl Fn(usize) -> NodeOutcome) {
        for i in 0..self.outcomes.len() {
            if self.outcomes[i].is_none() {
                self.record(i, missing(i));
            }
        }
    }

    /// How many nodes ended with `outcome`.
    pub(crate) fn count(&self, outcome: &NodeOutcome) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.as_ref() == Some(outcome))
            .count()
    }

    /// Every node's outcome so far (`Undecided` for those still owed).
    pub(crate) fn reports_iter(&self) -> impl Iterator<Item = &NodeOutcome> {
        self.outcomes
            .iter()
            .map(|o| o.as_ref().unwrap_or(&NodeOutcome::Undecided))
    }

    /// The per-node report, for errors.
    pub(crate) fn reports(&self, nodes: &[NodeAddr]) -> NodeReports {
        NodeReports(
            self.outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| NodeReport {
                    node: i,
                    addr: nodes.get(i).map(|a| a.to_string()).unwrap_or_default(),
                    outcome: o.clone().unwrap_or(NodeOutcome::Undecided),
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(outcomes: &[NodeOutcome], quorum: usize, fail_fast: bool) -> Decision {
        let mut r = Round::new(5, quorum, fail_fast);
        for (i, o) in outcomes.iter().enumerate() {
            r.record(i, o.clone());
        }
        r.decision()
    }

    use NodeOutcome::{Held, Ok as Y, Timeout};

    #[test]
    fn fail_fast_decides_at_the_third_vote_either_way() {
        assert_eq!(round(&[Y, Y], 3, true), Decision::Open);
        assert_eq!(round(&[Y, Y, Y], 3, true), Decision::Won);
        assert_eq!(round(&[Held, Held], 3, true), Decision::Open);
        assert_eq!(round(&[Held, Timeout, Held], 3, true), Decision::Lost);
        assert_eq!(round(&[Y, Held, Y, Held], 3, true), Decision::Open);
        assert_eq!(round(&[Y, Held, Y, Held, Y], 3, true), Decision::Won);
        assert_eq!(round(&[Y, Held, Y, Held, Held], 3, true), Decision::Lost);
    }

    #[test]
    fn without_fail_fast_every_vote_is_awaited() {
        assert_eq!(round(&[Y, Y, Y], 3, false), Decision::Open);
        assert_eq!(round(&[Held, Held, Held, Held], 3, false), Decision::Open);
        assert_eq!(round(&[Y, Y, Y, Held, Y], 3, false), Decision::Won);
        assert_eq!(round(&[Y, Y, Held, Held, Y], 3, false), Decision::Won);
        assert_eq!(
            round(&[Y, Y, Held, Held, Timeout], 3, false),
            Decision::Lost
        );
    }

    #[test]
    fn a_node_votes_once_and_unknown_nodes_are_ignored() {
        let mut r = Round::new(3, 2, true);
        r.record(0, Y);
        r.record(0, Y);
        r.record(7, Y);
        assert_eq!(r.count(&Y), 1);
        assert_eq!(r.decision(), Decision::Open);
        assert!(!r.is_pending(0));
        assert!(r.is_pending(1));
        r.close(|_| NodeOutcome::Timeout);
        assert_eq!(r.decision(), Decision::Lost);
        assert_eq!(r.count(&NodeOutcome::Timeout), 2);
    }

    #[test]
    fn quorum_of_all_nodes() {
        let mut r = Round::new(3, 3, true);
        r.record(0, Y);
        r.record(1, Y);
        assert_eq!(r.decision(), Decision::Open);
        r.record(2, Held);
        assert_eq!(r.decision(), Decision::Lost);
    }
}
