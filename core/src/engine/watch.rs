//! Waiters' watches: one-shot, fired by a tracking master's invalidation push or by a dropped
//! connection, and handed to the driver to wake its waiters.

use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::{Engine, Link};
use crate::command::Extra;
use crate::conn::Invalidated;
use crate::error::NodeOutcome;

/// Resources with bells pending at once, at most (past it, the oldest is forgotten: its
/// reservations lapse after the claim lease).
const MAX_PENDING_BELLS: usize = 256;

/// Fair mode: the bells one hand-off rang for a resource, one per master, as they come.
#[derive(Debug)]
pub(crate) struct Bells {
    key: bytes::Bytes,
    /// Which hand-off rang (bells of different hand-offs never add up to a quorum).
    handoff: bytes::Bytes,
    /// The nodes that rang.
    mask: u64,
    /// When the first rang.
    first: Instant,
}

/// Fair mode: the hand-off whose bells woke a resource's waiter.
#[derive(Debug)]
pub(crate) struct Handed {
    key: bytes::Bytes,
    handoff: bytes::Bytes,
    /// The nodes whose bells of it have come (a master rings one hand-off once).
    mask: u64,
    first: Instant,
}

/// Why a watch fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A master pushed an invalidation of the key (or of every key).
    Pushed,
    /// A connection closed: whatever it tracked can no longer be pushed.
    Dropped,
    /// Fair mode: the reservation of the waiter just ahead in the line may have lapsed
    /// unclaimed (see [`crate::conn::Invalidated::Next`]): worth a look at the line.
    Lapse,
}

impl Wake {
    /// The cause's name, for events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Wake::Pushed => "push",
            Wake::Dropped => "dropped",
            Wake::Lapse => "lapse",
        }
    }
}

/// Whether the watched key `key` is the line of `resource` (fair mode: a waiter in a line
/// watches [`crate::script::QUEUE_PREFIX`]`<resource>`, and its bells fire it), or a set's
/// waiter's key that names that line among its own ([`crate::command::lines_key`]).
pub(super) fn is_line_of(key: &[u8], resource: &[u8]) -> bool {
    key.strip_prefix(crate::script::QUEUE_PREFIX.as_bytes()) == Some(resource)
        || crate::command::lines_of(key, resource)
}

/// Fair mode: an enter round of one resource, from its submission until no node owes it an
/// answer that could matter. A won enter is decided at a quorum; a slower node's refusal,
/// which joined the caller to that node's line, comes after the decision, and the engine
/// answers it with a leave on that node (the try's own leave covers the refusals it saw).
#[derive(Debug)]
pub(super) struct Enter {
    slot: u32,
    gen: u32,
    name: crate::lock::Name,
    /// The id of the watch the enter's operation registered on the line before the enter
    /// went out (its own, not another waiter of the client), if any.
    watch: Option<u64>,
    /// Decided won: the nodes that still owed their answer then (a bit each, the first 64).
    owed: u64,
}

/// Fair mode: a waiter's round in flight (a claim, a read of the line, an enter): its
/// operation's slot and generation, its resources, and the id of the watch its operation
/// holds while it runs, if any (`Command::watched_by`).
#[derive(Debug)]
pub(super) struct FairRound {
    pub(super) slot: u32,
    pub(super) gen: u32,
    pub(super) names: crate::lock::Names,
    pub(super) watch: Option<u64>,
    /// A claim or an enter: won, it served its waiter (a read of the line serves nobody).
    pub(super) serves: bool,
}

/// The most wakes held for waiters between two watches (see `Engine::hold_wake`).
pub(super) const MAX_HELD_WAKES: usize = 64;

/// The most won enter rounds followed at once beyond those in flight (a bound on what a flood
/// of tries can hold; past it, the oldest is answered at once: see `Engine::entering`).
pub(super) const MAX_ENTERS: usize = 4096;

impl Enter {
    /// Node `i`'s connection failed: its answer will never be read. Whether anything is left.
    pub(super) fn forget(&mut self, i: usize) -> bool {
        if i < 64 {
            self.owed &= !(1 << i);
        }
        self.owed != 0 || self.is_open()
    }

    /// Still in flight (not yet decided).
    fn is_open(&self) -> bool {
        self.owed == u64::MAX
    }
}

impl<U> Engine<U> {
    /// An enter round of `name` is submitted as operation (`slot`, `gen`), whose own watch
    /// is `watch`, at `now`.
    ///
    /// The enters in flight are as many as the operations, and are all followed. Of the won
    /// ones still owed an answer, past [`MAX_ENTERS`] the oldest found is no longer followed
    /// but answered now, with a leave to every node that still owes its answer, unless
    /// another waiter of the client stands in the line (the rule of `late_enter`): that
    /// leave runs on each node after the enter, on the connection that carried it, and takes
    /// the caller out of the line the enter may have joined there (where the enter was a
    /// yes, it leaves the caller's token alone). Forgotten, a late refusal left the client
    /// in that line, where the next hand-off rang it for nothing.
    pub(super) fn entering(
        &mut self,
        slot: u32,
        gen: u32,
        name: &crate::lock::Name,
        watch: Option<u64>,
        now: Instant,
    ) {
        // (Pushed first: a failure while the leave below is queued may decide this round.)
        self.enters.push(Enter {
            slot,
            gen,
            name: name.clone(),
            watch,
            owed: u64::MAX,
        });
        if self.enters.len() <= MAX_ENTERS
            || self.enters.iter().filter(|e| !e.is_open()).count() < MAX_ENTERS
        {
            return;
        }
        let Some(k) = self.enters.iter().position(|e| !e.is_open()) else {
            return;
        };
        let e = self.enters.remove(k);
        self.leave_owed(e.name, e.watch, e.owed, now);
    }

    /// Operation `tag`'s round is decided: an enter won with some nodes still to answer is
    /// followed until they have; any other is forgotten.
    pub(super) fn entered(&mut self, tag: super::Tag, round: &crate::round::Round) {
        let Some(k) = self
            .enters
            .iter()
            .position(|e| (e.slot, e.gen) == (tag.slot, tag.gen))
        else {
            return;
        };
        // Still owed, or past the deadline (a late answer may yet come).
        let owed = round
            .reports_iter()
            .take(64)
            .enumerate()
            .filter(|(_, o)| matches!(o, NodeOutcome::Undecided | NodeOutcome::Timeout))
            .fold(0u64, |m, (i, _)| m | 1 << i);
        if round.decision() == crate::round::Decision::Won && owed != 0 {
            self.enters[k].owed = owed;
        } else {
            self.enters.swap_remove(k);
        }
    }

    /// Node `i` answered operation `tag`'s enter after its round was decided, with `extra`:
    /// if the round was won and this answer joined the caller to node `i`'s line, a leave
    /// goes to that node only, behind the enter on the connection that carried it, unless a
    /// waiter of the client other than the enter's own operation stands in the resource's
    /// line (the client's place is that waiter's too: kept, as any leave then is).
    pub(super) fn late_enter(&mut self, tag: super::Tag, i: usize, extra: &Extra, now: Instant) {
        let Some(k) = self
            .enters
            .iter()
            .position(|e| (e.slot, e.gen) == (tag.slot, tag.gen) && !e.is_open())
        else {
            return;
        };
        let bit = if i < 64 { 1u64 << i } else { 0 };
        if self.enters[k].owed & bit == 0 {
            return;
        }
        self.enters[k].owed &= !bit;
        let (name, own) = (self.enters[k].name.clone(), self.enters[k].watch);
        if self.enters[k].owed == 0 {
            self.enters.swap_remove(k);
        }
        if !matches!(extra, Extra::Waited { .. }) {
            return;
        }
        self.leave_owed(name, own, bit, now);
    }

    /// A won enter of `name` (its operation's own watch `own`) may have joined the caller to
    /// the lines of the nodes in `nodes`: a leave to those nodes only, unless a waiter of the
    /// client other than that operation stands in the resource's line, or has a round in
    /// flight there (the enter's own round is decided by now: not among them).
    fn leave_owed(&mut self, name: crate::lock::Name, own: Option<u64>, nodes: u64, now: Instant) {
        let other_waiter = self
            .watches
            .iter()
            .any(|(id, key)| Some(*id) != own && is_line_of(key, name.as_bytes()))
            || self.in_round(name.as_bytes());
        if other_waiter || nodes == 0 {
            return;
        }
        let names = [name];
        let leave = crate::command::Command::leave(&names);
        let to = super::Until::Sent { except: !nodes };
        self.queue_written(&leave, super::Tag::of(0, 0, leave.expect()), to, now);
    }

    /// Fires the watches of the keys node `i` pushed invalidations of.
    pub(super) fn take_invalidated(&mut self, i: usize, now: Instant) {
        let Some(pushed) = self.nodes[i].conn.take_invalidated() else {
            return;
        };
        let notices = pushed
            .iter()
            .filter(|p| matches!(p, Invalidated::Next { .. }))
            .count() as u64;
        let stats = &mut self.nodes[i].stats;
        stats.invalidations += pushed.len() as u64 - notices;
        stats.lapse_notices += notices;
        for what in pushed {
            match what {
                Invalidated::All => self.wake_watches(|_| true, Wake::Pushed),
                Invalidated::Key(k) if self.is_deaf(&k, i) => {}
                Invalidated::Key(k) => self.wake_watches(|key| key == k.as_ref(), Wake::Pushed),
                Invalidated::Bell { key, handoff } => self.rung(i, key, handoff, now),
                Invalidated::Next { key } => self.next_in_line(key, now),
            }
        }
    }

    /// The claim lease (fair mode), zero otherwise.
    pub(super) fn claim_lease(&self) -> Duration {
        self.fair
            .as_ref()
            .map_or(Duration::ZERO, |f| Duration::from_millis(f.claim_ms))
    }

    /// Node `i` rang this client's bell for `key` (fair mode): a hand-off reserved it for this
    /// client there. The waiter is woken once a quorum of masters has rung (its claim then
    /// finds the reservations in place rather than overtaking a hand-off still on its way to
    /// a slower master), or half a claim lease after the first bell (see
    /// [`bells_due`](Engine::bells_due)). Bells that find no waiter are kept for one that
    /// starts to wait within the claim lease (a waiter between a failed claim and its next
    /// wait), then forgotten: their reservations lapse.
    pub(super) fn rung(
        &mut self,
        i: usize,
        key: bytes::Bytes,
        handoff: bytes::Bytes,
        now: Instant,
    ) {
        let lease = self.claim_lease();
        self.bells
            .retain(|b| now.saturating_duration_since(b.first) < lease);
        self.handed
            .retain(|h| now.saturating_duration_since(h.first) < lease);
        self.rung_first(&key);
        let bit = 1u64 << (i.min(63));
        if let Some(h) = self
            .handed
            .iter_mut()
            .find(|h| h.key == key && h.handoff == handoff && h.mask & bit == 0)
        {
            // A slower master's bell of a hand-off that already woke the waiter: spent (kept,
            // it would wake the client's next wait half a lease later for a claim that fails).
            // A master that has rung that hand-off already rings another one: only a release
            // names its hand-off uniquely (its token); a leave, and a claim that rings the
            // next waiter on, name the ringing client, so two hand-offs of one client to this
            // one within a claim lease share a tag. That bell counts as a new hand-off's.
            h.mask |= bit;
            return;
        }
        match self
            .bells
            .iter_mut()
            .find(|b| b.key == key && b.handoff == handoff)
        {
            Some(b) => b.mask |= bit,
            None => {
                if self.bells.len() >= MAX_PENDING_BELLS {
                    self.bells.remove(0);
                }
                self.bells.push(Bells {
                    key: key.clone(),
                    handoff,
                    mask: bit,
                    first: now,
                });
            }
        }
        self.fire_bells(&key, false);
    }

    /// Wakes the waiters of `key` if its bells reached a quorum (or `anyway`), and forgets the
    /// bells once they woke someone.
    fn fire_bells(&mut self, key: &[u8], anyway: bool) {
        if !self.in_line(key) {
            return;
        }
        let quorum = self.quorum;
        // The hand-off that wakes the waiter: the one rung by the most masters.
        let Some(best) = self
            .bells
            .iter()
            .filter(|b| b.key.as_ref() == key)
            .max_by_key(|b| b.mask.count_ones())
        else {
            return;
        };
        let rung = best.mask.count_ones() as usize >= quorum;
        if !anyway && !rung {
            return;
        }
        self.handed.retain(|h| h.key.as_ref() != key);
        // Only a hand-off rung by a quorum is named by the claim (and its late bells spent):
        // its releasing token is then gone from a quorum of masters, so that its holder can
        // never again confirm it on a quorum (an extension after a release that failed), and
        // taking it from the others takes nothing anyone holds. Rung by a minority, the
        // release may have failed, and its holder kept the lock: the claim takes only what is
        // reserved for it or free.
        if rung {
            if self.handed.len() >= MAX_PENDING_BELLS {
                self.handed.remove(0);
            }
            self.handed.push(Handed {
                key: best.key.clone(),
                handoff: best.handoff.clone(),
                mask: best.mask,
                first: best.first,
            });
        }
        // Every hand-off's bells for the key are spent on this wake.
        self.bells.retain(|b| b.key.as_ref() != key);
        self.wake_watches(|k| is_line_of(k, key), Wake::Pushed);
    }

    /// Fair mode: when the waiter of a resource rung by fewer than a quorum of masters is
    /// woken anyway (half a claim lease after the first bell), if any is.
    pub(super) fn bells_due(&self) -> Option<Instant> {
        let half = self.claim_lease() / 2;
        self.bells
            .iter()
            .filter(|b| self.in_line(&b.key))
            .map(|b| crate::time::later(b.first, half))
            .min()
    }

    /// Wakes the waiters whose bells are due (see [`bells_due`](Engine::bells_due)).
    pub(super) fn fire_due_bells(&mut self, now: Instant) {
        let half = self.claim_lease() / 2;
        let due: SmallVec<[bytes::Bytes; 4]> = self
            .bells
            .iter()
            .filter(|b| now.saturating_duration_since(b.first) >= half)
            .map(|b| b.key.clone())
            .collect();
        for key in due {
            self.fire_bells(&key, true);
        }
    }

    /// The tag of the hand-off whose bells woke the waiter `cmd` claims for (fair mode; a
    /// claim of one resource), or nothing.
    pub(super) fn handoff_of(&self, cmd: &crate::command::Command<'_>) -> &[u8] {
        if cmd.kind != crate::command::OpKind::Claim {
            return b"";
        }
        let [name] = cmd.resources else {
            return b"";
        };
        self.handed
            .iter()
            .find(|h| h.key.as_ref() == name.as_bytes())
            .map_or(&b""[..], |h| h.handoff.as_ref())
    }

    /// Fair mode: whether `cmd` is a release of resources one of which another waiter of
    /// this client waits for (in its line, alone or in a set).
    pub(super) fn own_waiter(&self, cmd: &crate::command::Command<'_>) -> bool {
        self.fair.is_some()
            && cmd.kind == crate::command::OpKind::Release
            && cmd.resources.iter().any(|n| self.waits_for(n.as_bytes()))
    }

    /// Fair mode: for a leave, which of its resources it may leave: those no other waiter of
    /// this client waits for (the leaving waiter's own watch is gone by then: taken back when
    /// its wait ended, or before its drop fires the leave). `None`: all of them (or not a
    /// leave).
    pub(super) fn leave_kept(
        &self,
        cmd: &crate::command::Command<'_>,
    ) -> Option<crate::lock::Names> {
        if self.fair.is_none() || cmd.kind != crate::command::OpKind::Leave {
            return None;
        }
        if !cmd.resources.iter().any(|n| self.waits_for(n.as_bytes())) {
            return None;
        }
        Some(
            cmd.resources
                .iter()
                .filter(|n| !self.waits_for(n.as_bytes()))
                .cloned()
                .collect(),
        )
    }

    /// Fair mode: whether a waiter of this client stands in `resource`'s line, so that a leave
    /// sent now spares that line (the client's waiters share one place: see `leave_kept`).
    pub fn stands_in_line(&self, resource: &[u8]) -> bool {
        self.fair.is_some() && self.waits_for(resource)
    }

    /// Fair mode: a release of `resource` kept the client's place for a waiter of it that has
    /// a round in flight there, and no watch to wake: the next watch of the line fires at
    /// once. Kept until then, or until that waiter is served (its round won), or for two node
    /// timeouts and a claim lease (by then its round has ended and its next watch has come,
    /// or it has gone); the oldest forgotten past [`MAX_HELD_WAKES`]. A wake that finds
    /// nobody costs a waiter of the client one claim.
    pub(super) fn hold_wake(&mut self, resource: &[u8], now: Instant) {
        self.forget_held_wakes(now);
        if let Some(h) = self
            .held_wakes
            .iter_mut()
            .find(|(r, _)| r.as_ref() == resource)
        {
            h.1 = now;
            return;
        }
        if self.held_wakes.len() >= MAX_HELD_WAKES {
            self.held_wakes.remove(0);
        }
        self.held_wakes.push((resource.into(), now));
    }

    /// Forgets the held wakes past their time (see [`hold_wake`](Engine::hold_wake)).
    pub(super) fn forget_held_wakes(&mut self, now: Instant) {
        if self.held_wakes.is_empty() {
            return;
        }
        let keep = self
            .node_timeout
            .saturating_mul(2)
            .saturating_add(self.claim_lease());
        self.held_wakes
            .retain(|(_, at)| now.saturating_duration_since(*at) <= keep);
    }

    /// Fair mode: whether a waiter of this client with a round in flight on `resource` has no
    /// watch registered (its operation holds none, or took it back for the round): a wake
    /// now would not reach it.
    pub(super) fn in_round_unwatched(&self, resource: &[u8]) -> bool {
        self.fair_rounds.iter().any(|r| {
            r.names.iter().any(|n| n.as_bytes() == resource)
                && r.watch
                    .is_none_or(|id| !self.watches.iter().any(|(w, _)| *w == id))
        })
    }

    /// Fair mode: whether a waiter of this client waits for `resource`: its watch stands in
    /// the line, or it has a round in flight there (an enter, a read of the line, a claim: its
    /// watch taken back for that round). A waiter between two watches is no less in the line
    /// (CI at c8f1f76: a second waiter's enter still unanswered when the first waiter's
    /// kept leave went out; the leave took the client's place out of the line the second
    /// waiter had just entered, and the second waiter then passed another client).
    fn waits_for(&self, resource: &[u8]) -> bool {
        self.in_line(resource) || self.in_round(resource)
    }

    /// Fair mode: whether a waiter of this client stands in `resource`'s line (its watch is
    /// registered under the line's key, or a set's key that names it; a waiter without fair
    /// mode watches the resource's own key).
    pub(super) fn in_line(&self, resource: &[u8]) -> bool {
        self.watches.iter().any(|(_, k)| is_line_of(k, resource))
    }

    /// Node `i` answered a waiter's tracked read (operation `tag`) with `pttl`: its
    /// invalidations of the key wake nobody while the key is absent there (`-2`), and do again
    /// once a read finds it there.
    pub(super) fn tracked_read(&mut self, tag: super::Tag, i: usize, pttl: i64) {
        let Some((_, _, key)) = self
            .watch_reads
            .iter()
            .find(|(slot, gen, _)| (*slot, *gen) == (tag.slot, tag.gen))
        else {
            return;
        };
        let bit = if i < 64 { 1u64 << i } else { 0 };
        let watches = &self.watches;
        // Forgotten once nobody watches the key.
        self.deaf
            .retain(|(k, mask)| *mask != 0 && watches.iter().any(|(_, w)| w == k));
        match self.deaf.iter_mut().find(|(k, _)| k == key) {
            Some((_, mask)) if pttl == -2 => *mask |= bit,
            Some((_, mask)) => *mask &= !bit,
            None if pttl == -2 && bit != 0 => self.deaf.push((key.clone(), bit)),
            None => {}
        }
    }

    /// Whether node `i`'s invalidations of `key` wake nobody (see `Engine::deaf`).
    fn is_deaf(&self, key: &[u8], i: usize) -> bool {
        i < 64
            && self
                .deaf
                .iter()
                .any(|(k, mask)| k.as_ref() == key && mask & (1 << i) != 0)
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
    /// before the read that makes the servers track the key, so that no push is missed. A
    /// waiter in a resource's line (fair mode) watches the line's key
    /// ([`crate::command::queue_key`]): the bells rung for the resource fire it.
    pub fn watch(&mut self, id: u64, key: Box<[u8]>) {
        let pending = self
            .bells
            .iter()
            .find(|b| is_line_of(&key, &b.key))
            .map(|b| b.key.clone());
        if !self.lapses.is_empty() {
            self.waiting_for_lapse(&key);
        }
        let held = self
            .held_wakes
            .iter()
            .position(|(r, _)| is_line_of(&key, r));
        if let Some(k) = held {
            // A release that kept the client's place woke the waiters of the line while
            // this one was between two watches (see `hold_wake`).
            self.held_wakes.swap_remove(k);
            self.woken.push_back((id, Wake::Pushed));
            return;
        }
        self.watches.push((id, key));
        if let Some(resource) = pending {
            // Bells that came before the wait started (between a failed claim and this
            // watch): counted for it.
            self.fire_bells(&resource, false);
        }
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
