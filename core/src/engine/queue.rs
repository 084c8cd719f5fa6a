//! Writing a command to every node: encoded once, in each connection's form (script, native,
//! function), with fair mode's rewriting of a release and naming of a claim's hand-off; a node
//! that cannot take it votes at once.

use std::time::Instant;

use super::*;

impl<U> Engine<U> {
    /// Queues `cmd` on every node for `tag` (an operation's, or [`FIRE`]'s): encoded once, as
    /// `EVALSHA` for a script call (each connection writes it in the form it uses, see
    /// [`crate::forms`]), with its native forms where the mode and the command allow
    /// them. A node that cannot take it votes at once.
    pub(super) fn queue_everywhere(
        &mut self,
        cmd: &Command<'_>,
        tag: Tag,
        until: Until,
        now: Instant,
    ) {
        if !self.gates.is_empty() {
            self.claim_answered(cmd);
        }
        if let Some(left) = self.leave_kept(cmd) {
            // Fair mode: a waiter that gives up while another waiter of this client waits for
            // the resource leaves nothing there: the client's place in the line is the
            // other's too (a leave would take it out, and nobody would ring the one still
            // waiting; a reservation for the client has woken every waiter of it, see
            // `fire_bells`). A set leaves the lines of its other resources only; where none
            // is left, the engine answers for every node: nothing is sent.
            if left.is_empty() {
                for i in 0..self.nodes.len() {
                    self.tally(tag, i, NodeOutcome::Ok, Extra::None, None);
                }
                return;
            }
            let leave = Command::leave(&left);
            self.queue_written(&leave, tag, until, now);
            return;
        }
        self.queue_written(cmd, tag, until, now);
    }

    /// Queues `cmd` on every node `until` writes to, as [`queue_everywhere`] does, but a
    /// leave whether or not another waiter of the client waits (its caller decided).
    ///
    /// [`queue_everywhere`]: Engine::queue_everywhere
    pub(super) fn queue_written(
        &mut self,
        cmd: &Command<'_>,
        tag: Tag,
        until: Until,
        now: Instant,
    ) {
        // Fair mode: a release while another waiter of this client waits for one of the
        // resources keeps the client's place (the waiters of a client share one), and wakes
        // those waiters for their claim, queued behind the release on every connection (a
        // release proper would take the client out of the lines, and ring nobody for them).
        let kept;
        let own_waiter = self.own_waiter(cmd);
        let cmd = if own_waiter {
            kept = Command {
                kind: crate::command::OpKind::Unclaim,
                fence_value: 0,
                ..*cmd
            };
            &kept
        } else {
            cmd
        };
        let mut wire = std::mem::take(&mut self.wire);
        wire.clear();
        let handoff = self.handoff_of(cmd);
        cmd.encode_handed(&mut wire, Form::Evalsha, self.fair.as_ref(), handoff);
        let scripted = cmd.is_script();
        // Native forms are encoded only where some connection may use one: under Native
        // mode, or under Auto once a server said it has them (not on every release to
        // servers that have none). A fair release is the hand-off script: it has none.
        let fair_release = self.fair.is_some() && cmd.kind == crate::command::OpKind::Release;
        let native_able = cmd.has_native_form()
            && !fair_release
            && match self.scripts {
                Scripts::Native => true,
                Scripts::Auto => self.nodes.iter().any(|n| n.conn.native().is_some()),
                _ => false,
            };
        let mut natives = std::mem::take(&mut self.native_wire);
        natives.clear();
        if native_able {
            cmd.encode_native(&mut natives, Native::Valkey);
        }
        let split = natives.len();
        if native_able {
            cmd.encode_native(&mut natives, Native::Redis);
        }
        let watch = cmd.kind == crate::command::OpKind::Watch;
        // Fair mode: a command that stands in a line has the bell subscribed before it on a
        // connection still waiting for its `HELLO 3` reply (`Conn::subscribe_before_line`).
        let line = self.fair.is_some()
            && matches!(
                cmd.kind,
                OpKind::Enter | OpKind::Wait | OpKind::Claim | OpKind::Unclaim | OpKind::Retick
            );
        for i in 0..self.nodes.len() {
            if !until.writes_to(i) {
                continue;
            }
            if watch && self.nodes[i].link != Link::Closed {
                // Right before the read: the server tracks the key of the next command only.
                self.nodes[i].conn.queue_caching(now);
            }
            let how = match (scripted, native_able) {
                (false, _) => How::Plain,
                (true, false) => How::Script(None),
                (true, true) => How::Script(Some((&natives[..split], &natives[split..]))),
            };
            let queued = match self.no_native_here(i, native_able) {
                Some(outcome) => Err(outcome),
                None => self.queue_on(i, tag, &wire, how, line, now),
            };
            if let Err(outcome) = queued {
                self.vote(tag, i, outcome);
            }
        }
        self.wire = wire;
        self.native_wire = natives;
        if own_waiter {
            let resources = cmd.resources;
            // A waiter of the client between two watches (a round of it in flight, ahead of
            // this release on every connection, and no watch registered) is not reached by
            // the wake: it waits for its next watch of the line. (One whose operation holds
            // its watch through the round, a first try's enter, is woken by it: nothing is
            // held for it, session 23's review.)
            let unwatched: SmallVec<[bool; 4]> = resources
                .iter()
                .map(|r| self.in_round_unwatched(r.as_bytes()))
                .collect();
            self.wake_watches(
                |k| resources.iter().any(|r| watch::is_line_of(k, r.as_bytes())),
                watch::Wake::Pushed,
            );
            for (r, unwatched) in resources.iter().zip(unwatched) {
                if unwatched {
                    self.hold_wake(r.as_bytes(), now);
                }
            }
        }
    }

    /// Under [`Scripts::Native`], the vote of node `i` for a command with a native form when
    /// its server said it has none (Valkey 9+ and Redis 8.4+ have them): the command is not
    /// sent there.
    fn no_native_here(&self, i: usize, native_able: bool) -> Option<NodeOutcome> {
        let conn = &self.nodes[i].conn;
        (native_able
            && self.scripts == Scripts::Native
            && conn.identified()
            && conn.native().is_none())
        .then(|| {
            NodeOutcome::Server(
                "the server has no native compare-and-delete (Scripts::Native needs Valkey 9+ or Redis 8.4+)"
                    .into(),
            )
        })
    }

    /// Sends `cmd` to every node that can take it, for nobody: the release of an acquisition
    /// whose caller went away. It goes out in each connection's form, with the same fallbacks
    /// as a release somebody waits for; replies are read and dropped.
    pub fn fire(&mut self, cmd: &Command<'_>, now: Instant) {
        // Best effort: a node that cannot take it has lost the key's connection anyway; the
        // key expires with its ttl.
        self.queue_everywhere(cmd, Tag::of(0, 0, cmd.expect()), Until::AllIn, now);
        self.unpark(now);
    }

    /// Records how many operations one write pass carried (for [`Stats::largest_batch`](crate::stats::Stats::largest_batch)).
    pub fn note_batch(&mut self, n: usize) {
        self.largest_batch = self.largest_batch.max(n);
        self.batches += 1;
        self.batched_ops += n as u64;
    }

    /// Queues the command encoded in `wire` on node `i`, opening the connection first if
    /// needed (a command that stands in a `line` has the bell subscribed ahead of it there).
    /// `Err` with the node's vote when it cannot take it.
    fn queue_on(
        &mut self,
        i: usize,
        tag: Tag,
        wire: &[u8],
        how: How<'_>,
        line: bool,
        now: Instant,
    ) -> Result<(), NodeOutcome> {
        if self.nodes[i].link != Link::Closed && self.nodes[i].conn.is_stale(now, self.stale) {
            // Replaced, and reopened below at once if the backoff allows.
            self.nodes[i].stats.stale_replaced += 1;
            self.fail_node(i, &NodeOutcome::Timeout, now, Socket::Held);
        }
        let node = &mut self.nodes[i];
        if node.link == Link::Closed {
            if !node.conn.may_connect(now) {
                return Err(NodeOutcome::Down);
            }
            node.link = Link::Connecting(now);
            self.connecting += 1;
            node.conn.opened(&node.addr, self.scripts, self.wakeups);
            let connects = node.stats.connects + 1;
            self.io.push_back(IoEvent::Connect(i));
            self.record(Event::Connect { node: i, connects });
        }
        let node = &mut self.nodes[i];
        if line {
            node.conn.subscribe_before_line();
        }
        match node.conn.queue(tag, now, |b| b.put_slice(wire), how) {
            Ok(sent) => {
                if matches!(sent, Sent::Native(_)) {
                    node.stats.native_commands += 1;
                }
                Ok(())
            }
            Err((e, _)) => {
                let outcome = e.outcome();
                self.fail_node(i, &outcome, now, Socket::Held);
                Err(outcome)
            }
        }
    }
}
