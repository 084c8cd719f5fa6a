//! [`Inspection`]: who holds a resource on each node, and for how long (`inspect` on both
//! clients, `redlock status`), and, read on request, fair mode's line of waiters there
//! (`inspect_line`).
//!
//! The line's layout on the masters is read here and nowhere else outside the scripts: the
//! line is the sorted set [`script::QUEUE_PREFIX`]`<resource>` (member: a client's id,
//! score: its ticket), a reservation is the resource's value
//! [`script::RESERVED_PREFIX`]`<id>`.

use std::time::Duration;

use resp::Frame;

use crate::command::{self, Command, Extra, OpKind, LINE_READ_MAX};
use crate::error::NodeOutcome;
use crate::lock::Name;
use crate::round::Round;
use crate::script;
use crate::{Config, Token};

/// What one node holds under a resource's key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// No key.
    Free,
    /// A lock's token.
    Token(Token),
    /// A value that is not a token (not a lock of this library's kind).
    Other,
    /// Fair mode: a hand-off reserved the resource for the waiter with this client id, which
    /// may claim it for the rest of the key's ttl (the claim lease). Nobody holds the lock.
    Reserved(String),
    /// The node did not answer: why.
    Unknown(NodeOutcome),
}

/// One node's view of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeState {
    /// The node's address, as configured (without any password).
    pub addr: String,
    /// Who holds the key there.
    pub holder: Holder,
    /// The key's remaining ttl there, when it has one (for a reservation: what is left of
    /// the claim lease).
    pub ttl: Option<Duration>,
    /// Fair mode's line of waiters for the resource there, when it was read (`inspect_line`)
    /// and the node answered.
    pub line: Option<Line>,
}

/// One node's line of waiters for a resource (fair mode), as `ZRANGE ... WITHSCORES` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Line {
    /// The waiters, first first: by ticket, equal tickets by client id. At most
    /// [`LINE_READ_MAX`] of them.
    pub waiters: Vec<Waiter>,
    /// Whether the line holds more than [`LINE_READ_MAX`] waiters (those after are not read).
    pub more: bool,
    /// The line key's remaining ttl: the line's lease, renewed whenever a waiter joins (one
    /// hour). A waiter's own place lasts as long as its client's subscription to its bell: a
    /// hand-off that finds nobody on the bell takes the waiter out and rings the next.
    pub ttl: Option<Duration>,
}

/// A place in a line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The client's id (`Builder::fair` draws one per client; its waiters share the place).
    pub id: String,
    /// The ticket the node gave it (its score in the line), as a whole number.
    pub ticket: u64,
}

/// The line as a quorum of nodes have it ([`Inspection::agreed_line`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgreedLine {
    /// The waiters in the lines of at least a quorum of nodes, each with the largest ticket
    /// a node gave it (the one its client moves its place to everywhere), ordered as the
    /// nodes order them: by ticket, equal tickets by id.
    pub waiters: Vec<Waiter>,
    /// How many nodes' lines list these waiters in this order (waiters on fewer than a
    /// quorum of nodes left out).
    pub in_order: usize,
    /// How many nodes' lines were read.
    pub read: usize,
    /// The quorum.
    pub quorum: usize,
}

impl AgreedLine {
    /// Whether a quorum of nodes order the waiters this way.
    pub fn agreed(&self) -> bool {
        self.in_order >= self.quorum
    }
}

/// Every node's view of a resource, read with `GET` and `PTTL` (two rounds that wait for
/// every node). A snapshot: the key may change between the two reads and right after.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// Per node, in the configured order.
    pub nodes: Vec<NodeState>,
    /// The quorum the client counts with.
    pub quorum: usize,
}

impl Inspection {
    /// The token a quorum of nodes hold, if one does: the resource is locked (as long as that
    /// lock's validity runs).
    pub fn quorum_holder(&self) -> Option<Token> {
        let tokens = self.nodes.iter().filter_map(|n| match n.holder {
            Holder::Token(t) => Some(t),
            _ => None,
        });
        tokens
            .clone()
            .find(|t| tokens.clone().filter(|u| u == t).count() >= self.quorum)
    }

    /// The line of waiters a quorum of nodes agree on (fair mode), when the lines were read
    /// (`inspect_line`); `None` otherwise. Only the first [`LINE_READ_MAX`] waiters of each
    /// node count.
    pub fn agreed_line(&self) -> Option<AgreedLine> {
        let lines: Vec<&Line> = self.nodes.iter().filter_map(|n| n.line.as_ref()).collect();
        if lines.is_empty() {
            return None;
        }
        let mut waiters: Vec<Waiter> = Vec::new();
        for w in lines.iter().flat_map(|l| &l.waiters) {
            if waiters.iter().any(|x| x.id == w.id) {
                continue;
            }
            let on: Vec<u64> = lines
                .iter()
                .filter_map(|l| l.waiters.iter().find(|x| x.id == w.id).map(|x| x.ticket))
                .collect();
            if on.len() >= self.quorum {
                waiters.push(Waiter {
                    id: w.id.clone(),
                    ticket: on.iter().copied().max().unwrap_or(0),
                });
            }
        }
        waiters.sort_by(|a, b| (a.ticket, &a.id).cmp(&(b.ticket, &b.id)));
        let in_order = lines
            .iter()
            .filter(|l| {
                let order = l
                    .waiters
                    .iter()
                    .filter(|x| waiters.iter().any(|w| w.id == x.id));
                order.map(|x| &x.id).eq(waiters.iter().map(|w| &w.id))
            })
            .count();
        Some(AgreedLine {
            waiters,
            in_order,
            read: lines.len(),
            quorum: self.quorum,
        })
    }

    /// Adds each node's line to an inspection, from the rounds of [`line_commands`]: the
    /// line's `ZRANGE` and its `PTTL`.
    pub fn with_lines(mut self, zrange: &Round, pttl: &Round) -> Inspection {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.line = zrange.reply(i).and_then(parse_line).map(|(waiters, more)| {
                let ttl = match pttl.read(i) {
                    Some(Extra::Number(ms)) if ms >= 0 => {
                        Some(Duration::from_millis(ms.unsigned_abs()))
                    }
                    _ => None,
                };
                Line { waiters, more, ttl }
            });
        }
        self
    }

    /// From the two rounds' tallies.
    pub fn from_rounds(cfg: &Config, get: &Round, pttl: &Round) -> Inspection {
        let get_reports = get.reports_for(cfg);
        let nodes = get_reports
            .0
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let holder = match (r.outcome, get.read(i)) {
                    (NodeOutcome::Gone, _) => Holder::Free,
                    (NodeOutcome::Ok, Some(Extra::Holder(t))) => Holder::Token(t),
                    (NodeOutcome::Ok, _) => get
                        .reply(i)
                        .and_then(reserved_for)
                        .map_or(Holder::Other, Holder::Reserved),
                    (other, _) => Holder::Unknown(other),
                };
                let ttl = match pttl.read(i) {
                    Some(Extra::Number(ms)) if ms >= 0 => {
                        Some(Duration::from_millis(ms.unsigned_abs()))
                    }
                    _ => None,
                };
                NodeState {
                    addr: r.addr,
                    holder,
                    ttl,
                    line: None,
                }
            })
            .collect();
        Inspection {
            nodes,
            quorum: cfg.quorum,
        }
    }
}

/// The two commands of an inspection of `name`.
pub fn commands(name: &[Name]) -> [Command<'_>; 2] {
    let get = Command {
        kind: OpKind::Get,
        resources: name,
        token: None,
        ttl_ms: 0,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    [get, get.with_kind(OpKind::Pttl)]
}

/// The line key of `resource` (fair mode): [`script::QUEUE_PREFIX`]`<resource>`.
pub fn line_key(resource: &str) -> Name {
    let mut key = Vec::with_capacity(script::QUEUE_PREFIX.len() + resource.len());
    command::queue_key(resource.as_bytes(), &mut key);
    Name::new(&String::from_utf8_lossy(&key))
}

/// The two commands that read a line, given its key ([`line_key`]): `ZRANGE ... WITHSCORES`,
/// then `PTTL`.
pub fn line_commands(line: &[Name]) -> [Command<'_>; 2] {
    let [get, pttl] = commands(line);
    [get.with_kind(OpKind::Line), pttl]
}

/// The client id a reservation names: `GET`'s value [`script::RESERVED_PREFIX`]`<id>`.
fn reserved_for(reply: &Frame) -> Option<String> {
    match reply.without_attributes() {
        Frame::Bulk(b) => b
            .strip_prefix(script::RESERVED_PREFIX.as_bytes())
            .map(|id| String::from_utf8_lossy(id).into_owned()),
        _ => None,
    }
}

/// A line's waiters from `ZRANGE ... WITHSCORES` (RESP2: member, score, member, score...;
/// RESP3: a `[member, score]` pair each), and whether there were more than
/// [`LINE_READ_MAX`]. `None` for a reply of another shape.
fn parse_line(reply: &Frame) -> Option<(Vec<Waiter>, bool)> {
    let Frame::Array(items) = reply.without_attributes() else {
        return None;
    };
    let mut waiters = Vec::with_capacity(items.len().min(LINE_READ_MAX + 1));
    let mut pairs = items.iter().peekable();
    while let Some(first) = pairs.next() {
        let (id, score) = match first.without_attributes() {
            Frame::Array(pair) | Frame::Set(pair) => match pair.as_slice() {
                [id, score] => (id, score),
                _ => return None,
            },
            id => (id, pairs.next()?),
        };
        waiters.push(Waiter {
            id: text(id)?,
            ticket: ticket(score)?,
        });
    }
    let more = waiters.len() > LINE_READ_MAX;
    waiters.truncate(LINE_READ_MAX);
    Some((waiters, more))
}

/// A bulk or simple string as text.
fn text(f: &Frame) -> Option<String> {
    match f.without_attributes() {
        Frame::Bulk(b) | Frame::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// A score (a RESP3 double, or its decimal text in RESP2) as a whole ticket; `None` for a
/// negative or non-finite one.
fn ticket(f: &Frame) -> Option<u64> {
    let v = match f.without_attributes() {
        Frame::Double(v) => *v,
        Frame::Integer(n) => *n as f64,
        other => text(other)?.parse::<f64>().ok()?,
    };
    (v.is_finite() && v >= 0.0).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn w(id: &str, ticket: u64) -> Waiter {
        Waiter {
            id: id.into(),
            ticket,
        }
    }

    #[test]
    fn lines_are_read_in_both_protocols() {
        let resp2 = Frame::Array(vec![bulk("a"), bulk("3"), bulk("b"), bulk("4")]);
        let resp3 = Frame::Array(vec![
            Frame::Array(vec![bulk("a"), Frame::Double(3.0)]),
            Frame::Array(vec![bulk("b"), Frame::Double(4.0)]),
        ]);
        for reply in [resp2, resp3] {
            assert_eq!(
                parse_line(&reply),
                Some((vec![w("a", 3), w("b", 4)], false))
            );
        }
        assert_eq!(parse_line(&Frame::Array(vec![])), Some((vec![], false)));
        // A member without its score, a score that is no number: not a line.
        assert_eq!(parse_line(&Frame::Array(vec![bulk("a")])), None);
        assert_eq!(parse_line(&Frame::Array(vec![bulk("a"), bulk("x")])), None);
        assert_eq!(parse_line(&Frame::Integer(1)), None);
        let long = Frame::Array(
            (0..=LINE_READ_MAX)
                .flat_map(|i| [bulk(&format!("c{i}")), bulk(&i.to_string())])
                .collect(),
        );
        let (waiters, more) = parse_line(&long).unwrap();
        assert!(more);
        assert_eq!(waiters.len(), LINE_READ_MAX);
    }

    #[test]
    fn reservations_name_their_waiter() {
        let v = bulk(&format!("{}c0ffee", script::RESERVED_PREFIX));
        assert_eq!(reserved_for(&v), Some("c0ffee".into()));
        assert_eq!(reserved_for(&bulk("something else")), None);
    }

    fn node(line: Option<Vec<Waiter>>) -> NodeState {
        NodeState {
            addr: String::new(),
            holder: Holder::Free,
            ttl: None,
            line: line.map(|waiters| Line {
                waiters,
                more: false,
                ttl: None,
            }),
        }
    }

    #[test]
    fn the_agreed_line_is_a_quorums() {
        let view = |lines: Vec<Option<Vec<Waiter>>>| Inspection {
            nodes: lines.into_iter().map(node).collect(),
            quorum: 2,
        };
        assert_eq!(view(vec![None, None, None]).agreed_line(), None);
        // `x` is on one node only: left out, and the others' order still agreed.
        let a = view(vec![
            Some(vec![w("a", 1), w("x", 2), w("b", 3)]),
            Some(vec![w("a", 1), w("b", 2)]),
            None,
        ])
        .agreed_line()
        .unwrap();
        assert_eq!(a.waiters, vec![w("a", 1), w("b", 3)]);
        assert_eq!((a.in_order, a.read), (2, 2));
        assert!(a.agreed());
        // Two nodes in one order, the third in another: still a quorum's order.
        let b = view(vec![
            Some(vec![w("a", 1), w("b", 2)]),
            Some(vec![w("b", 1), w("a", 2)]),
            Some(vec![w("a", 5), w("b", 6)]),
        ])
        .agreed_line()
        .unwrap();
        assert_eq!(b.waiters, vec![w("a", 5), w("b", 6)]);
        assert_eq!(b.in_order, 2);
        // Each node its own order: none agreed.
        let c = view(vec![
            Some(vec![w("a", 1), w("b", 2)]),
            Some(vec![w("b", 1), w("a", 3)]),
            None,
        ])
        .agreed_line()
        .unwrap();
        assert_eq!(c.in_order, 1);
        assert!(!c.agreed());
        // Empty everywhere: an empty line, agreed.
        let d = view(vec![Some(vec![]), Some(vec![]), None])
            .agreed_line()
            .unwrap();
        assert!(d.waiters.is_empty() && d.agreed());
    }
}
