//! One round of an operation, sans I/O: per-node outcomes in, a decision out.
//!
//! A round starts when the first command is written and ends when its outcome is certain:
//! with fail-fast, as soon as `quorum` nodes said yes (won) or `N - quorum + 1` nodes cannot
//! say yes (lost); without it, when every node has answered or timed out. The driver feeds
//! outcomes in as replies arrive and asks for the decision after each.

use smallvec::SmallVec;

use crate::command::Extra;
use crate::error::{NodeOutcome, NodeReport, NodeReports};
use crate::NodeAddr;

/// Whether a round is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Not yet: outcomes still owed could change it.
    Open,
    /// At least `quorum` nodes said yes.
    Won,
    /// A quorum of yeses is no longer possible (or every node is in and it was not reached).
    Lost,
}

/// When a round ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// As soon as its outcome is certain (fail-fast): a quorum of yeses, or too many noes.
    Decided,
    /// When every node has voted or timed out: every node's answer is awaited (the release
    /// after a lost acquisition, and every round when fail-fast is off).
    AllIn,
    /// Won as soon as a quorum says yes; lost only once every node has voted or timed out (a
    /// fair client's try: a loss costs it nothing, as it joins the line next, and a loss
    /// refused by every node needs no release after it).
    WonOrAllIn,
    /// Over as soon as it is written, its replies read and dropped: a command whose outcome
    /// changes nothing but which must reach the masters, in order, before the next command
    /// (fair mode's leave after a won try). It is not written to the nodes of `except` (a bit
    /// per node, for the first 64). Its round is given back with every node undecided.
    Sent {
        /// The nodes it is not written to.
        except: u64,
    },
}

impl Until {
    /// Whether the round is written to node `i`.
    #[inline]
    pub fn writes_to(self, i: usize) -> bool {
        match self {
            Until::Sent { except } => i >= 64 || except & (1 << i) == 0,
            _ => true,
        }
    }
}

/// The tally of one round.
///
/// Small, because rounds travel by value (from the engine to the driver to the caller): a
/// byte per node for the common outcomes, and the rare ones that carry data (an I/O error's
/// kind, a protocol error, a server's message) in a side list, which only a failing node fills.
#[derive(Debug, Clone)]
pub struct Round {
    quorum: u32,
    until: Until,
    yes: u32,
    no: u32,
    codes: SmallVec<[u8; 16]>,
    details: Vec<(u32, NodeOutcome)>,
    /// The highest fencing counter among the yes votes (0 when none carried one).
    counter: u64,
    /// A resource (its index in the lock's list) that a refusing node named as held.
    held_key: Option<u32>,
    /// What the nodes of an inspection read (a holder, a ttl): empty, and unallocated, for
    /// every other round.
    read: Vec<(u32, Extra)>,
    /// Replies an inspection keeps whole (see [`Expect::keeps`](crate::command::Expect::keeps)):
    /// empty, and unallocated, for every other round.
    kept: Vec<(u32, resp::Frame)>,
    /// A permit's round: the yes votes per slot they named ([`Extra::Slot`]), and the most
    /// any slot has. Such a round is won by a quorum naming one slot: a yes for another slot
    /// counts as a no for it. Empty, and unallocated, for every other round.
    slots: Vec<(u32, u32)>,
    best: u32,
}

/// A node's entry in [`Round::codes`].
const PENDING: u8 = 0;
const DETAIL: u8 = 255;

fn code(outcome: &NodeOutcome) -> u8 {
    match outcome {
        NodeOutcome::Ok => 1,
        NodeOutcome::Held => 2,
        NodeOutcome::Gone => 3,
        NodeOutcome::Timeout => 4,
        NodeOutcome::Down => 5,
        NodeOutcome::Undecided => 6,
        NodeOutcome::NotOurs => 7,
        _ => DETAIL,
    }
}

const UNIT: [NodeOutcome; 8] = [
    NodeOutcome::Undecided,
    NodeOutcome::Ok,
    NodeOutcome::Held,
    NodeOutcome::Gone,
    NodeOutcome::Timeout,
    NodeOutcome::Down,
    NodeOutcome::Undecided,
    NodeOutcome::NotOurs,
];

impl Round {
    /// A round over `nodes` nodes that `quorum` of them must win, ending as `until` says.
    #[inline]
    pub fn new(nodes: usize, quorum: usize, until: Until) -> Round {
        Round {
            quorum: u32::try_from(quorum).unwrap_or(u32::MAX),
            until,
            yes: 0,
            no: 0,
            codes: SmallVec::from_elem(PENDING, nodes),
            details: Vec::new(),
            counter: 0,
            held_key: None,
            read: Vec::new(),
            kept: Vec::new(),
            slots: Vec::new(),
            best: 0,
        }
    }

    /// Records a node's outcome; the first one recorded for a node counts, later ones are
    /// ignored (a node votes once per round).
    pub fn record(&mut self, node: usize, outcome: NodeOutcome) {
        self.record_with(node, outcome, Extra::None);
    }

    /// [`record`](Round::record), with what the reply said beside its vote: a yes vote's
    /// fencing counter counts towards [`counter`](Round::counter), a refusal's held resource
    /// towards [`held_key`](Round::held_key).
    pub fn record_with(&mut self, node: usize, outcome: NodeOutcome, extra: Extra) {
        let Some(slot) = self.codes.get_mut(node) else {
            return;
        };
        if *slot != PENDING {
            return;
        }
        match (&outcome, extra) {
            (NodeOutcome::Ok, Extra::Counter(c)) => self.counter = self.counter.max(c),
            (NodeOutcome::Held, Extra::HeldKey(k)) => {
                self.held_key = Some(self.held_key.map_or(k, |h| h.min(k)));
            }
            // Fair mode's first try, refused: the node put the caller in the line of the one
            // resource, and read what its wait would have.
            (NodeOutcome::Held, e @ Extra::Waited { .. }) => {
                self.held_key = Some(0);
                self.read.push((u32::try_from(node).unwrap_or(u32::MAX), e));
            }
            (NodeOutcome::Ok, e @ Extra::Slot(s)) => {
                self.read.push((u32::try_from(node).unwrap_or(u32::MAX), e));
                let count = match self.slots.iter_mut().find(|(slot, _)| *slot == s) {
                    Some((_, n)) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        self.slots.push((s, 1));
                        1
                    }
                };
                self.best = self.best.max(count);
            }
            (
                NodeOutcome::Ok,
                e @ (Extra::Holder(_) | Extra::Foreign | Extra::Number(_) | Extra::Waited { .. }),
            ) => {
                self.read.push((u32::try_from(node).unwrap_or(u32::MAX), e));
            }
            _ => {}
        }
        if matches!(outcome, NodeOutcome::Ok) {
            self.yes += 1;
        } else {
            self.no += 1;
        }
        *slot = code(&outcome);
        if *slot == DETAIL {
            self.details
                .push((u32::try_from(node).unwrap_or(u32::MAX), outcome));
        }
    }

    /// [`record_with`](Round::record_with), keeping `reply` whole when given (an inspection's
    /// read: see [`reply`](Round::reply)), only when this is the node's first vote.
    pub fn record_reply(
        &mut self,
        node: usize,
        outcome: NodeOutcome,
        extra: Extra,
        reply: Option<resp::Frame>,
    ) {
        if let (true, Some(reply)) = (self.is_pending(node), reply) {
            self.kept
                .push((u32::try_from(node).unwrap_or(u32::MAX), reply));
        }
        self.record_with(node, outcome, extra);
    }

    /// The reply node `i` gave in this round, if the round kept it.
    pub fn reply(&self, i: usize) -> Option<&resp::Frame> {
        self.kept
            .iter()
            .find(|(n, _)| *n as usize == i)
            .map(|(_, f)| f)
    }

    /// A permit's round: the slot named by the most yes votes (the one a won round won), if
    /// any node named one.
    pub fn best_slot(&self) -> Option<usize> {
        self.slots
            .iter()
            .find(|(_, n)| *n == self.best)
            .map(|(s, _)| *s as usize)
    }

    /// The highest fencing counter any yes vote carried (0 if none did): the token of a fenced
    /// acquisition, once the round is won.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// The first of the lock's resources (by index) that a refusing node named as held.
    pub fn held_key(&self) -> Option<usize> {
        self.held_key.map(|k| k as usize)
    }

    /// What node `i` read in an inspection round, a waiter's read, or (fair mode) a refusal of
    /// the enter script, if it answered one.
    pub fn read(&self, i: usize) -> Option<Extra> {
        self.read
            .iter()
            .find(|(n, _)| *n as usize == i)
            .map(|(_, e)| *e)
    }

    /// How many nodes the round counts.
    #[inline]
    pub fn node_count(&self) -> usize {
        self.codes.len()
    }

    /// Whether `node` still owes its outcome.
    #[inline]
    pub fn is_pending(&self, node: usize) -> bool {
        self.codes.get(node) == Some(&PENDING)
    }

    /// The decision on what has been recorded so far.
    #[inline]
    pub fn decision(&self) -> Decision {
        let n = self.codes.len();
        let (mut yes, mut no, quorum) = (self.yes as usize, self.no as usize, self.quorum as usize);
        if !self.slots.is_empty() {
            // A permit's round: the slot named most is the one that may win; the yes votes
            // for the others cannot help it.
            no += yes - self.best as usize;
            yes = self.best as usize;
        }
        let all_in = yes + no == n;
        let early = self.until == Until::Decided;
        if matches!(self.until, Until::Sent { .. }) {
            // Decided by the engine once written, never by votes.
            Decision::Open
        } else if yes >= quorum && (early || all_in || self.until == Until::WonOrAllIn) {
            Decision::Won
        } else if (no > n - quorum && early) || all_in {
            Decision::Lost
        } else {
            Decision::Open
        }
    }

    /// Ends the round: every node still owing an outcome gets `missing` (a timeout when the
    /// deadline passed, [`NodeOutcome::Undecided`] when the round was decided early).
    pub fn close(&mut self, missing: impl Fn(usize) -> NodeOutcome) {
        for i in 0..self.codes.len() {
            if self.codes[i] == PENDING {
                self.record(i, missing(i));
            }
        }
    }

    /// Node `i`'s outcome (`Undecided` while it is owed).
    fn outcome(&self, i: usize) -> &NodeOutcome {
        match self.codes.get(i) {
            Some(&DETAIL) => self
                .details
                .iter()
                .find(|(n, _)| *n as usize == i)
                .map_or(&UNIT[0], |(_, o)| o),
            Some(&c) => &UNIT[usize::from(c).min(UNIT.len() - 1)],
            None => &UNIT[0],
        }
    }

    /// How many nodes ended with `outcome`.
    pub fn count(&self, outcome: &NodeOutcome) -> usize {
        (0..self.codes.len())
            .filter(|&i| self.codes[i] != PENDING && self.outcome(i) == outcome)
            .count()
    }

    /// Every node's outcome so far (`Undecided` for those still owed).
    pub fn reports_iter(&self) -> impl Iterator<Item = &NodeOutcome> {
        (0..self.codes.len()).map(|i| self.outcome(i))
    }

    /// The per-node report, for errors, each node named by `cfg`'s labels (written once, when
    /// the configuration was checked).
    pub fn reports_for(&self, cfg: &crate::Config) -> NodeReports {
        NodeReports(
            (0..self.codes.len())
                .map(|i| NodeReport {
                    node: i,
                    addr: cfg.labels.get(i).cloned().unwrap_or_default(),
                    outcome: self.outcome(i).clone(),
                })
                .collect(),
        )
    }

    /// The per-node report, for errors.
    pub fn reports(&self, nodes: &[NodeAddr]) -> NodeReports {
        NodeReports(
            (0..self.codes.len())
                .map(|i| NodeReport {
                    node: i,
                    addr: nodes.get(i).map(|a| a.to_string()).unwrap_or_default(),
                    outcome: self.outcome(i).clone(),
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(outcomes: &[NodeOutcome], quorum: usize, fail_fast: bool) -> Decision {
        let until = if fail_fast {
            Until::Decided
        } else {
            Until::AllIn
        };
        let mut r = Round::new(5, quorum, until);
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
        let mut r = Round::new(3, 2, Until::Decided);
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
    fn counters_and_held_keys_come_from_counted_votes_only() {
        let mut r = Round::new(5, 3, Until::Decided);
        r.record_with(0, Y, Extra::Counter(7));
        r.record_with(1, Y, Extra::Counter(12));
        // A second vote from node 1 is ignored, its counter too.
        r.record_with(1, Y, Extra::Counter(99));
        r.record_with(2, Held, Extra::HeldKey(3));
        r.record_with(3, Held, Extra::HeldKey(1));
        assert_eq!(r.counter(), 12);
        assert_eq!(r.held_key(), Some(1));
        // A refusal's number is not a counter, a yes vote's key not a held one.
        r.record_with(4, Held, Extra::Counter(1000));
        assert_eq!(r.counter(), 12);
    }

    #[test]
    fn quorum_of_all_nodes() {
        let mut r = Round::new(3, 3, Until::Decided);
        r.record(0, Y);
        r.record(1, Y);
        assert_eq!(r.decision(), Decision::Open);
        r.record(2, Held);
        assert_eq!(r.decision(), Decision::Lost);
    }

    /// A fair try's round: won at a quorum of yeses, as fail-fast; lost only once every node
    /// has voted (so that a try refused everywhere is known to have taken nothing).
    #[test]
    fn won_early_but_lost_only_when_all_are_in() {
        let mut r = Round::new(5, 3, Until::WonOrAllIn);
        r.record(0, Held);
        r.record(1, Held);
        r.record(2, Held);
        assert_eq!(r.decision(), Decision::Open, "three noes of five");
        r.record(3, Held);
        r.record(4, Held);
        assert_eq!(r.decision(), Decision::Lost);
        let mut r = Round::new(5, 3, Until::WonOrAllIn);
        r.record(0, Y);
        r.record(1, Y);
        assert_eq!(r.decision(), Decision::Open);
        r.record(2, Y);
        assert_eq!(r.decision(), Decision::Won, "three yeses of five");
    }
}
