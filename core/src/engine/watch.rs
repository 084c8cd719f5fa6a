//! Waiters' watches: one-shot, fired by a tracking master's invalidation push or by a dropped
//! connection, and handed to the driver to wake its waiters.

use std::time::Duration;

use super::{Engine, Link};
use crate::conn::Invalidated;

/// The resources whose bell woke a waiter of this client within the claim lease, at most
/// this many: a bell for one of them that wakes nobody is that hand-off's, from another
/// master, and is not passed on.
const MAX_RECENT_BELLS: usize = 64;

/// Why a watch fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A master pushed an invalidation of the key (or of every key).
    Pushed,
    /// A connection closed: whatever it tracked can no longer be pushed.
    Dropped,
}

impl Wake {
    /// The cause's name, for events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Wake::Pushed => "push",
            Wake::Dropped => "dropped",
        }
    }
}

impl<U> Engine<U> {
    /// Fires the watches of the keys node `i` pushed invalidations of.
    pub(super) fn take_invalidated(&mut self, i: usize, now: std::time::Instant) {
        let Some(pushed) = self.nodes[i].conn.take_invalidated() else {
            return;
        };
        self.nodes[i].stats.invalidations += pushed.len() as u64;
        for what in pushed {
            match what {
                Invalidated::All => self.wake_watches(|_| true, Wake::Pushed),
                Invalidated::Key(k) => self.wake_watches(|key| key == k.as_ref(), Wake::Pushed),
                Invalidated::Bell(r) => {
                    let before = self.woken.len();
                    self.wake_watches(|key| key == r.as_ref(), Wake::Pushed);
                    let lease = self
                        .fair
                        .as_ref()
                        .map_or(Duration::ZERO, |f| Duration::from_millis(f.claim_ms));
                    self.recent_bells
                        .retain(|(_, at)| now.saturating_duration_since(*at) < lease);
                    if self.woken.len() > before {
                        // A waiter claims it now; the same hand-off's bells from the other
                        // masters follow within a round trip, and are its, not stale.
                        if self.recent_bells.len() >= MAX_RECENT_BELLS {
                            self.recent_bells.remove(0);
                        }
                        self.recent_bells.push((r, now));
                    } else if !self.recent_bells.iter().any(|(k, _)| *k == r) {
                        // Rung for a resource nobody here waits for any more (a waiter that
                        // gave up, whose leave has not landed): pass it on at once rather than
                        // leave the others to the claim lease.
                        self.pass_on(i, &r, now);
                    }
                }
            }
        }
    }

    /// Fires (and forgets) every watch whose key `matches`.
    pub(super) fn wake_watches(&mut self, matches: impl Fn(&[u8]) -> bool, why: Wake) {
        let woken = &mut self.woken;
        self.watches.retain(|(id, key)| {
            if matches(key) {
                woken.push_back((*id, why));
                false
            } else {
                true
            }
        });
    }

    /// Watches `key` for waiter `id` (chosen by the driver, unique among its watches): the
    /// watch fires once, when a tracking master pushes an invalidation of the key or any
    /// connection closes, and [`poll_woken`](Engine::poll_woken) then yields `id`. Register it
    /// before the read that makes the servers track the key, so that no push is missed.
    pub fn watch(&mut self, id: u64, key: Box<[u8]>) {
        self.watches.push((id, key));
    }

    /// Forgets waiter `id`'s watch, if it has not fired (and a firing not yet polled).
    pub fn unwatch(&mut self, id: u64) {
        self.watches.retain(|(w, _)| *w != id);
        self.woken.retain(|(w, _)| *w != id);
    }

    /// Whether any watch waits.
    #[cfg(test)]
    pub fn watching(&self) -> bool {
        !self.watches.is_empty()
    }

    /// Whether some watch has fired and not been polled.
    pub fn has_woken(&self) -> bool {
        !self.woken.is_empty()
    }

    /// The next watch that fired, and why.
    pub fn poll_woken(&mut self) -> Option<(u64, Wake)> {
        self.woken.pop_front()
    }

    /// How many nodes' connections push invalidations now.
    #[allow(dead_code)]
    pub fn tracking(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.link == Link::Open && n.conn.tracking())
            .count()
    }
}
