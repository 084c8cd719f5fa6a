//! What the liveness checks need to know of the world: which operations may set a resource's
//! keys and until when those keys can live, and which masters have been free of trouble (no
//! fault touching them or any link to them) for long enough that nothing left over from a
//! fault is still in the way.
//!
//! The claim checked: with a quorum of a waiter's masters up and reachable, once every key an
//! earlier operation may have set on a resource has run out (its holder's ttl after that
//! operation ended, on the slowest master clock the drift factor allows, plus delivery), a try
//! of the waiter's that begins then, with nobody else trying, wins its acquire round. With
//! the waiter's patience (its tries, or its deadline, all used: `waiter-gave-up`) and the
//! spacing of its tries (`retry-gap`, checked in `client.rs`), it follows that a waiter whose
//! policy lasts that long acquires within the holder's ttl, the drift, and one retry gap after
//! the holder's validity ends.

use super::{Sim, NEVER};

/// How long a master must have been free of trouble before a waiter's try on it is judged:
/// long enough for a connection left owing a reply to be replaced (half a second), for its
/// reconnect backoff (at most a second) and a connect to run out (a second), and for a
/// command held during the trouble and delivered at its end to have set a key that has since
/// expired (the longest ttl, added where it is used).
const SETTLE: u64 = 2_600_000_000;

impl Sim {
    /// The latest a key set by an operation that ended now with a ttl of `ttl` nanoseconds can
    /// live: its ttl on a master clock running slow by the whole drift factor, Redis' expiry
    /// precision and a millisecond more, and four one-way delays (a command still in flight,
    /// behind a connect).
    pub(crate) fn keys_bound(&self, ttl: u64) -> u64 {
        let slow = (ttl as f64 * self.drift).ceil() as u64;
        self.now + ttl + slow + 2_000_000 + 4 * self.delay_max
    }

    /// An operation that may set the keys of `ids` starts (`ttl` unused) or ends (its keys
    /// live at most [`keys_bound`](Sim::keys_bound) of `ttl` from now).
    pub(crate) fn setting(&mut self, ids: &[u32], start: bool, ttl: u64) {
        let bound = self.keys_bound(ttl);
        for &id in ids {
            let r = &mut self.res[id as usize];
            if start {
                r.setters += 1;
            } else {
                r.setters -= 1;
                r.keys_gone = r.keys_gone.max(bound);
            }
        }
    }

    /// Whether the one operation that may set the keys of `ids` is the caller's, and every key
    /// set by an operation that ended is gone by `t`.
    pub(crate) fn alone_and_expired(&self, ids: &[u32], t: u64) -> bool {
        ids.iter().all(|&id| {
            let r = &self.res[id as usize];
            r.setters == 1 && r.keys_gone <= t
        })
    }

    /// Whether only the caller's operation may set the keys of `ids` now.
    pub(crate) fn sole_setter(&self, ids: &[u32]) -> bool {
        ids.iter().all(|&id| self.res[id as usize].setters == 1)
    }

    /// Trouble begins on master `m` now, until `end` (`NEVER`: until [`trouble_end`]); returns
    /// its index.
    pub(crate) fn trouble_begin(&mut self, m: usize, end: u64) -> u32 {
        self.trouble[m].push((self.now, end));
        (self.trouble[m].len() - 1) as u32
    }

    /// Trouble begins on master `m` now, until fault episode `e` ends.
    pub(crate) fn trouble_for(&mut self, e: u32, m: usize) {
        let i = self.trouble_begin(m, NEVER);
        self.ep_trouble[e as usize].push((m as u32, i));
    }

    /// Trouble `i` of master `m` ends now.
    pub(crate) fn trouble_end(&mut self, m: usize, i: u32) {
        if let Some(t) = self.trouble[m].get_mut(i as usize) {
            t.1 = t.1.min(self.now);
        }
    }

    /// Whether master `m` is up and has had no trouble from long enough before `from` (see
    /// [`SETTLE`]) until now.
    pub(crate) fn clean(&self, m: usize, from: u64) -> bool {
        let since = from.saturating_sub(SETTLE + self.ttl_max + self.ttl_max / 10);
        self.masters[m].up
            && !self.trouble[m]
                .iter()
                .any(|&(s, e)| s <= self.now && (e >= since || e == NEVER))
    }

    /// How many of the masters `perm` (a client's nodes) are [`clean`](Sim::clean) since
    /// `from`.
    pub(crate) fn clean_nodes(&self, perm: &[u32], from: u64) -> usize {
        perm.iter()
            .filter(|&&m| self.clean(m as usize, from))
            .count()
    }
}
