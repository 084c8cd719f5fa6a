//! Fair mode: a lapsed reservation. A hand-off reserves the resource for the head of the line
//! and rings it; if that waiter never claims (paused, cut off, or rung for a resource it no
//! longer waits for), nothing rings anyone when the reservation lapses. So the hand-off also
//! tells the second in line (`+ <resource>` on its bell, [`Invalidated::Next`]), and the
//! second's engine wakes its waiter once the reservation may have lapsed: the waiter reads the
//! line again (the wait script), which finds the resource free and, the lapsed head being the
//! one rung last, takes that head out and hands the resource to the caller. The cost to the
//! others of a head that does not claim is then one claim lease (and a round trip), not the
//! waiters' timer of `FAIR_WAIT_LEASES` claim leases.
//!
//! [`Invalidated::Next`]: crate::conn::Invalidated::Next

use std::time::Instant;

use super::watch::{is_line_of, Wake};
use super::Engine;

/// Resources whose lapse this client waits for at once, at most (past it, the oldest is
/// forgotten: its waiter wakes on its own timer).
const MAX_LAPSES: usize = 256;

/// A hand-off reserved `key` for the waiter ahead of this client: when to look again.
#[derive(Debug)]
pub(crate) struct Lapse {
    key: bytes::Bytes,
    /// When the first master told (the masters of one hand-off tell within a claim lease).
    first: Instant,
    /// When the last reservation told of may have lapsed: a claim lease and the drift
    /// allowance after the latest notice.
    due: Instant,
    /// Whether a waiter of this client stood in the line when a notice came, or has started
    /// to watch it since.
    waited: bool,
    /// Found stale once at its due time, and looked at again half a lease later.
    rechecked: bool,
}

impl<U> Engine<U> {
    /// A master told this client, at `now`, that it stands second in `key`'s line behind a
    /// waiter a hand-off reserved the resource for.
    pub(super) fn next_in_line(&mut self, key: bytes::Bytes, now: Instant) {
        let lease = self.claim_lease();
        if lease.is_zero() {
            return;
        }
        let due = crate::time::later(now, lease.saturating_add(self.lapse_margin));
        let waited = self.in_line(&key);
        match self.lapses.iter_mut().find(|l| l.key == key) {
            // Another master's notice of the same hand-off: the latest reservation counts.
            Some(l) if now.saturating_duration_since(l.first) < lease => {
                l.due = l.due.max(due);
                l.waited |= waited;
            }
            Some(l) => {
                l.first = now;
                l.due = due;
                l.waited = waited;
                l.rechecked = false;
            }
            None => {
                if self.lapses.len() >= MAX_LAPSES {
                    self.lapses.remove(0);
                }
                self.lapses.push(Lapse {
                    key,
                    first: now,
                    due,
                    waited,
                    rechecked: false,
                });
            }
        }
    }

    /// A waiter of this client starts to watch `watch_key` (a line's, or a set's naming
    /// several): the lapses of those lines have a waiter to wake.
    pub(super) fn waiting_for_lapse(&mut self, watch_key: &[u8]) {
        for l in &mut self.lapses {
            if is_line_of(watch_key, &l.key) {
                l.waited = true;
            }
        }
    }

    /// Whether a waiter of this client has a round in flight on `resource` (a claim, a read of
    /// its line, an enter): it stands in the line, its watch taken back for that round.
    pub(super) fn in_round(&self, resource: &[u8]) -> bool {
        self.fair_rounds
            .iter()
            .any(|r| r.names.iter().any(|n| n.as_bytes() == resource))
    }

    /// A bell rang this client for `key`: it heads the line now, and its claim follows.
    pub(super) fn rung_first(&mut self, key: &[u8]) {
        if !self.lapses.is_empty() {
            self.lapses.retain(|l| l.key.as_ref() != key);
        }
    }

    /// When the next lapse is due, if any.
    pub(super) fn lapses_due(&self) -> Option<Instant> {
        self.lapses.iter().map(|l| l.due).min()
    }

    /// Wakes the waiters in the lines whose lapse is due at `now` ([`Wake::Lapse`]), and
    /// forgets those lapses.
    ///
    /// Where no waiter of this client has watched the line since the notice came (nor did
    /// then), and none does half a lease after the lapse was due, the client's place in it
    /// is stale (a leave that never reached the master, a late refusal of a won enter, a
    /// process that shares the id): nobody here would do what the notice asks, and the
    /// waiter behind would wait its timer, eight claim leases (two stale places in a row cost
    /// the third nine). The engine sends the leave script for that resource, not waited for:
    /// it takes the place out, and from the second place it hands a lapsed reservation on
    /// (the ring passes the lapsed head by) or tells the one now second. A waiter of the
    /// client with a round in flight on the resource (a claim held up by a slow master: a
    /// fair claim that loses waits for every master) stands in the line as well (session 19's
    /// review: such a waiter lost its place to the leave).
    pub(super) fn fire_due_lapses(&mut self, now: Instant) {
        while let Some(i) = self.lapses.iter().position(|l| l.due <= now) {
            let mut lapse = self.lapses.swap_remove(i);
            if lapse.waited || self.in_line(&lapse.key) || self.in_round(&lapse.key) {
                self.wake_watches(|k| is_line_of(k, &lapse.key), Wake::Lapse);
                continue;
            }
            if !lapse.rechecked {
                // A waiter between two of its rounds now is back within a round trip.
                lapse.rechecked = true;
                lapse.due = crate::time::later(now, self.claim_lease() / 2);
                self.lapses.push(lapse);
                continue;
            }
            let Ok(name) = std::str::from_utf8(&lapse.key) else {
                continue;
            };
            let names = [crate::lock::Name::new(name)];
            let leave = crate::command::Command::leave(&names);
            let tag = super::Tag::of(0, 0, leave.expect());
            self.queue_written(&leave, tag, super::Until::Sent { except: 0 }, now);
        }
    }
}
