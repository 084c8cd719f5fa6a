//! [`Inspection`]: who holds a resource on each node, and for how long (`inspect` on both
//! clients, `redlock status`).

use std::time::Duration;

use crate::command::{Command, Extra, OpKind};
use crate::error::NodeOutcome;
use crate::lock::Name;
use crate::round::Round;
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
    /// The key's remaining ttl there, when it has one.
    pub ttl: Option<Duration>,
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
                    (NodeOutcome::Ok, _) => Holder::Other,
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
    };
    [get, get.with_kind(OpKind::Pttl)]
}
