//! The sentinel that checks a connection's stream is in step with its commands: `PING
//! redlock-sync:<n>`, queued ahead of the next command once a reply is overdue; its nonce must
//! come back in its place (or the server's refusal of `PING` itself).

use std::time::Instant;

use resp::{encode_command, Frame};

use super::{Conn, Owner, Reply};
use crate::forms;

/// The start of every sentinel's nonce (`PING redlock-sync:<n>`); a `GET` reply that starts
/// with it is a sentinel's answer out of place.
pub(super) const SYNC_PREFIX: &[u8] = b"redlock-sync:";

/// Whether a bulk reply is a sentinel's answer (see [`Conn`]).
pub fn is_sync_reply(b: &[u8]) -> bool {
    b.starts_with(SYNC_PREFIX)
}

/// Writes sentinel `n`'s nonce into `out`; returns its length.
pub(super) fn sync_nonce(n: u32, digits: &mut resp::IntBuf, out: &mut [u8; 32]) -> usize {
    let d = digits.format(i64::from(n));
    let len = SYNC_PREFIX.len() + d.len();
    out[..SYNC_PREFIX.len()].copy_from_slice(SYNC_PREFIX);
    out[SYNC_PREFIX.len()..len].copy_from_slice(d);
    len
}

/// Whether `reply` is sentinel `n`'s own nonce.
pub(super) fn sync_answered(n: u32, reply: &Frame) -> bool {
    let mut digits = resp::IntBuf::new();
    let mut nonce = [0u8; 32];
    let len = sync_nonce(n, &mut digits, &mut nonce);
    matches!(reply.without_attributes(), Frame::Bulk(b) if b.as_ref() == &nonce[..len])
}

/// Whether `reply` is the server refusing `PING` itself (an ACL's `NOPERM` naming it, or the
/// command renamed away): an answer in the sentinel's place, and no other command's.
pub(super) fn is_ping_refusal(reply: &Frame) -> bool {
    match reply.without_attributes() {
        Frame::Error(m) | Frame::BulkError(m) => {
            forms::is_refusal(reply) && m.windows(6).any(|w| w.eq_ignore_ascii_case(b"'ping'"))
        }
        _ => false,
    }
}

impl<T> Conn<T> {
    /// The same connection, checking every reply against the stream when `on`: each write
    /// pass ([`seal`](Conn::seal)) ends with a sentinel, and the replies to the commands
    /// before it are handed over only once its nonce has come back in its place. A stream
    /// that lost or gained bytes (a broken middlebox; TCP and TLS never do this) then
    /// cannot give a command another command's reply: whatever shifted the replies also
    /// moves the nonce, and the connection is dropped with the replies it held. Costs one
    /// `PING` per connection per write pass. A server that refuses `PING` leaves the
    /// connection with the checks it has without this.
    pub fn verifying(mut self, on: bool) -> Self {
        self.verify = on;
        self
    }

    /// Ends a write pass: with [`verifying`](Conn::verifying) on and a command queued since
    /// the last sentinel, queues one behind it.
    pub fn seal(&mut self) {
        if self.unsealed {
            self.unsealed = false;
            if self.verify && !self.sync_refused {
                self.queue_sync();
            }
        }
    }

    /// Whether [`seal`](Conn::seal) and a write would do anything: bytes wait to be written,
    /// or a command was queued since the last pass ended.
    pub(crate) fn wants_transmit(&self) -> bool {
        self.unsealed || !self.out.is_empty()
    }

    /// With [`verifying`](Conn::verifying) on (and sentinels answered), keeps `reply` until
    /// the sentinel behind it comes back; otherwise hands it back to be returned now.
    pub(super) fn hold(&mut self, reply: Reply<T>) -> Option<Reply<T>> {
        if !self.verify || self.sync_refused {
            return Some(reply);
        }
        self.held.push_back(reply);
        None
    }

    /// The oldest confirmed reply. An acquisition offered to be sent again (`Reply::again`)
    /// is offered only if nothing has been queued behind it since it was decoded: no
    /// command owed, and no other reply held after it.
    pub(super) fn release_held(&mut self) -> Option<Reply<T>> {
        let mut reply = self.held.pop_front()?;
        self.confirmed -= 1;
        if reply.again.is_some()
            && (!self.held.is_empty() || self.owed.iter().any(|o| matches!(o, Owner::Op(..))))
        {
            reply.again = None;
        }
        Some(reply)
    }

    /// Whether a command queued at `now` needs a sentinel ahead of it: some reply is overdue
    /// (owed past the node timeout) and no sentinel has been queued since that command.
    ///
    /// Replies are owed in the order commands were queued, so the oldest command tells whether
    /// any is overdue: one look at the queue's head on the hot path.
    pub(super) fn needs_sync(&self, now: Instant) -> bool {
        // Nothing owed (the common case on the hot path), or no sentinel ever: nothing to do.
        // A verifying connection ends every pass with a sentinel and counts no reply before
        // it (`Conn::seal`): one ahead as well would only let the queue owe one more than its
        // bound.
        if self.owed.is_empty() || self.sync_refused || self.verify {
            return false;
        }
        let oldest = self.owed.iter().find_map(|o| match o {
            Owner::Op(_, at, ..) => Some(*at),
            _ => None,
        });
        let overdue = |at: Instant| now.saturating_duration_since(at) > self.overdue_after;
        if !oldest.is_some_and(overdue) {
            return false;
        }
        // From the newest back: a sentinel before any overdue command covers them all.
        for o in self.owed.iter().rev() {
            match o {
                Owner::Sync(_) => return false,
                Owner::Op(_, at, ..) if overdue(*at) => return true,
                _ => {}
            }
        }
        false
    }

    /// Queues a sentinel: `PING` with a nonce of this connection's.
    pub(super) fn queue_sync(&mut self) {
        self.syncs = self.syncs.wrapping_add(1);
        let mut n = resp::IntBuf::new();
        let mut nonce = [0u8; 32];
        let len = sync_nonce(self.syncs, &mut n, &mut nonce);
        encode_command(&mut self.out, &[b"PING", &nonce[..len]]);
        self.owed.push_back(Owner::Sync(self.syncs));
    }
}
