//! Client-side tracking: `CLIENT CACHING YES` ahead of a waiter's read, and the invalidation
//! pushes a tracking server sends, kept (bounded) until the engine takes them.

use std::time::Instant;

use resp::{encode_command, Frame};

use super::{Conn, Owner};

/// What an invalidation push from a tracking server says changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidated {
    /// This key was written, deleted or expired.
    Key(bytes::Bytes),
    /// Every key may have changed (the server flushed its data, or more was pushed than the
    /// connection keeps).
    All,
    /// Fair mode: the client's bell rang for `key` (a hand-off reserved it for this client);
    /// `handoff` names the hand-off (the releasing token, or the id of the client whose try
    /// handed a free resource on), the same on every master it rang.
    Bell {
        /// The resource.
        key: bytes::Bytes,
        /// Which hand-off rang.
        handoff: bytes::Bytes,
    },
    /// Fair mode: a hand-off reserved `key` for the waiter just ahead of this client in its
    /// line (message `+ <resource>`): the reservation lapses within the claim lease unless
    /// that waiter claims, and nothing rings this client then.
    Next {
        /// The resource.
        key: bytes::Bytes,
    },
}

/// Whether `push` confirms the subscription to `bell`: `>3 subscribe <bell> <count>`.
pub(super) fn is_subscribed(push: &[Frame], bell: Option<&[u8]>) -> bool {
    match (push, bell) {
        ([kind, chan, _], Some(bell)) => {
            kind.as_bytes()
                .is_some_and(|k| k.eq_ignore_ascii_case(b"subscribe"))
                && chan.as_bytes().is_some_and(|c| c.as_ref() == bell)
        }
        _ => false,
    }
}

/// What a bell push says: `>3 message <bell> "<hand-off> <resource>"`, as (resource,
/// hand-off). (A hand-off is a token or a client id, neither with a space; `+` is no hand-off
/// but the notice to the second in line, [`Invalidated::Next`].)
fn rung(push: &[Frame], bell: Option<&[u8]>) -> Option<(bytes::Bytes, bytes::Bytes)> {
    match (push, bell) {
        ([kind, chan, payload], Some(bell))
            if kind
                .as_bytes()
                .is_some_and(|k| k.eq_ignore_ascii_case(b"message"))
                && chan.as_bytes().is_some_and(|c| c.as_ref() == bell) =>
        {
            let payload = payload.as_bytes()?;
            let space = payload.iter().position(|&b| b == b' ')?;
            Some((payload.slice(space + 1..), payload.slice(..space)))
        }
        _ => None,
    }
}

/// Invalidations a connection keeps between two looks by the engine; past this they collapse
/// into [`Invalidated::All`], so a server that pushes without end costs a bounded buffer.
const MAX_INVALIDATED: usize = 64;

/// The keys an invalidation push names: `Some(keys)` for `>2 invalidate [keys]`, `Some(None)`
/// for the flush form (`>2 invalidate _`), `None` for any other push.
fn invalidation(push: &[Frame]) -> Option<Option<&[Frame]>> {
    let (kind, keys) = match push {
        [kind, keys] => (kind, keys),
        _ => return None,
    };
    let is_invalidate = match kind {
        Frame::Bulk(b) | Frame::Simple(b) => b.eq_ignore_ascii_case(b"invalidate"),
        _ => false,
    };
    if !is_invalidate {
        return None;
    }
    match keys {
        Frame::Array(keys) | Frame::Set(keys) => Some(Some(keys)),
        _ => Some(None),
    }
}

impl<T> Conn<T> {
    /// Queues `CLIENT CACHING YES`, which makes the server track the key of the next command
    /// (a waiter's read), where the connection speaks RESP3. Nothing otherwise.
    pub fn queue_caching(&mut self, now: Instant) {
        if self.resp3 {
            // A sentinel, if one is due, goes first: `CACHING YES` applies to the very next
            // command, which must be the read.
            if self.needs_sync(now) {
                self.queue_sync();
            }
            encode_command(&mut self.out, &[b"CLIENT", b"CACHING", b"YES"]);
            self.owed.push_back(Owner::Caching);
        }
    }

    /// Whether the server pushes invalidations of the keys read on this connection.
    pub fn tracking(&self) -> bool {
        self.tracking
    }

    /// Invalidations pushed since the last call (none, usually: no allocation then).
    pub fn take_invalidated(&mut self) -> Option<Vec<Invalidated>> {
        if self.invalidated.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.invalidated))
        }
    }

    /// Keeps what an invalidation push says, within [`MAX_INVALIDATED`].
    pub(super) fn note_push(&mut self, push: &[Frame]) {
        let full = |v: &Vec<Invalidated>| {
            v.len() >= MAX_INVALIDATED || v.last() == Some(&Invalidated::All)
        };
        if let Some((key, handoff)) = rung(push, self.bell.as_deref()) {
            if full(&self.invalidated) {
                // Past the bound, every waiter wakes (and tries): no bell is lost.
                self.invalidated.clear();
                self.invalidated.push(Invalidated::All);
            } else if handoff.as_ref() == b"+" {
                self.invalidated.push(Invalidated::Next { key });
            } else {
                self.invalidated.push(Invalidated::Bell { key, handoff });
            }
            return;
        }
        let Some(keys) = invalidation(push) else {
            // Not an invalidation nor our bell (nothing else is subscribed to): ignored.
            return;
        };
        match keys {
            Some(keys) => {
                for key in keys {
                    if full(&self.invalidated) {
                        self.invalidated.clear();
                        self.invalidated.push(Invalidated::All);
                        return;
                    }
                    if let Frame::Bulk(k) | Frame::Simple(k) = key {
                        self.invalidated.push(Invalidated::Key(k.clone()));
                    }
                }
            }
            None => {
                self.invalidated.clear();
                self.invalidated.push(Invalidated::All);
            }
        }
    }
}
