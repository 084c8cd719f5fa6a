//! Reply routing: each reply read goes to the operation its connection's FIFO names, is checked
//! for a shape that can answer its command, and is judged as that node's vote; a late one is
//! dropped.

use std::time::Instant;

use super::{Engine, Link, Socket};
use crate::command::{Command, Expect};
use crate::conn::ConnError;
use crate::error::{FencingFault, NodeOutcome};

impl<U> Engine<U> {
    /// Bytes read from node `i`. Every whole reply goes to its operation; a reply that breaks
    /// the protocol drops the connection (see [`poll_io`](Engine::poll_io)).
    pub fn handle_input(&mut self, i: usize, bytes: &[u8], now: Instant) {
        self.route_input(i, bytes, now);
        self.take_notes(i);
        self.unpark(now);
    }

    fn route_input(&mut self, i: usize, bytes: &[u8], now: Instant) {
        let Some(node) = self.nodes.get_mut(i) else {
            return;
        };
        if node.link == Link::Closed {
            return;
        }
        node.conn.received(bytes);
        loop {
            match self.nodes[i].conn.take_reply() {
                Ok(Some(reply)) => {
                    let (tag, frame) = (reply.tag, reply.frame);
                    if let Some(again) = reply.again {
                        // An acquisition to send again in another form: only while its round
                        // waits for this node (see `Reply::again`); else its refusal is a
                        // late reply like any other.
                        if self.op(tag).is_some_and(|op| op.round.is_pending(i)) {
                            self.nodes[i].conn.send_again(tag, *again);
                            continue;
                        }
                    }
                    let expect = reply.native.unwrap_or(tag.expect);
                    if !expect.fits(&frame) {
                        // Out of step: no later reply on this connection can be trusted.
                        // The command this reply was matched to fails with the rest.
                        let outcome = ConnError::Desync.outcome();
                        if self.op(tag).is_some_and(|op| op.round.is_pending(i)) {
                            self.vote(tag, i, outcome.clone());
                        }
                        self.take_invalidated(i, now);
                        self.nodes[i].stats.desyncs += 1;
                        self.fail_node(i, &outcome, now, Socket::Held);
                        return;
                    }
                    if !self.op(tag).is_some_and(|op| op.round.is_pending(i)) {
                        // Late, or a reply to a fired command: read and dropped (a won enter's
                        // late refusal is answered with a leave: see `late_enter`).
                        self.nodes[i].stats.late_replies += 1;
                        if matches!(expect, Expect::Entered | Expect::EnteredFenced)
                            && !self.enters.is_empty()
                        {
                            let (_, extra) = Command::judge(expect, &frame);
                            self.late_enter(tag, i, &extra, now);
                        }
                        continue;
                    }
                    let (mut outcome, extra) = Command::judge(expect, &frame);
                    if let (NodeOutcome::Server(msg), Some(why)) =
                        (&mut outcome, self.nodes[i].conn.load_error())
                    {
                        // A missing function or script whose loading failed: say why (an
                        // ACL's NOPERM names the command it denies).
                        if msg.starts_with("ERR Function not found") || msg.starts_with("NOSCRIPT")
                        {
                            msg.push_str("; loading it failed: ");
                            msg.push_str(why);
                        }
                    }
                    if let (Expect::Fenced | Expect::EnteredFenced, NodeOutcome::Ok, Some(policy)) =
                        (expect, &outcome, self.nodes[i].conn.evicting())
                    {
                        // The counter may be evicted there: not a vote a token can rest on.
                        outcome = NodeOutcome::Fencing(FencingFault::EvictionPolicy(policy.into()));
                    }
                    let keep = outcome == NodeOutcome::Ok && expect.keeps(&extra);
                    self.vote_with(tag, i, outcome, extra, keep.then_some(frame));
                }
                Ok(None) => return self.take_invalidated(i, now),
                Err(e) => {
                    self.take_invalidated(i, now);
                    if e == ConnError::Desync {
                        self.nodes[i].stats.desyncs += 1;
                    }
                    self.fail_node(i, &e.outcome(), now, Socket::Held);
                    return;
                }
            }
        }
    }
}
