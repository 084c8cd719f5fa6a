//! Fair mode's promises, judged apart from safety: waiters in line are served in order, and a
//! waiter is passed over no more times than there were clients ahead of it. Reported as their
//! own counters (`fairness_violations`), so that a fairness failure neither hides nor is
//! hidden by a safety one.
//!
//! The unit of the line is a client (its engine), not a task: a client's waiters share one
//! place (`docs/redlock.md`, "Waiting in line"). A **place** of client `X` on resource `r`
//! begins when a waiter of `X` on `r` (an acquisition by a fair client, that may retry, of
//! `r` alone or of a set that holds `r`: a set stands in the line of each of its resources)
//! begins its first wait, after its wait script's round (and the move of its ticket)
//! completed, while `X` has no place on `r`; it ends at the first of: a lock on `r` granted to
//! `X` (the place is *served*, at the moment the winning try took `r` on the masters), a release of `r` by `X` (the hand-off takes `X` out of the
//! line first: a release proper, a failed first try's release, an abandoned try's), a leave
//! by `X` (a waiter of `X` that gave up, or was abandoned; of the lines no other waiter of `X`
//! stands in, which are all the engine's leave sends: `Engine::stands_in_line`). `try_lock` never waits in line;
//! clients without fair mode never do. A place that a set's waiter stood in is not judged
//! as the one overtaken: a set that does not head every line of its set passes a
//! reservation on to the waiter behind it (`docs/redlock.md`, "Sets and the line"), so its
//! promise is the bound on its wait, not the order on each line. It is judged as the one
//! that may overtake (a set never takes a reservation from a waiter ahead of it).
//!
//! Judged only in a world with no fault and no negative control, and only over a **clean**
//! interval of `r`: every lock on `r` that meets it (a lock that ran out, until its keys are
//! surely gone: 20 ms and a tenth of its length past its validity) was held by a fair client
//! and let go by a release sent within its validity (no lock ran out, forgotten or lost: a resource that goes
//! free without a hand-off rings nobody, and the next arrival takes it, as the design
//! allows); no acquisition by a client without fair mode met it (it may barge); no operation
//! on `r` was abandoned in it; and no round of the place's own waiters met a timeout or a
//! connection down (the retries and timeouts the promise leaves out).
//!
//! - **`fifo`**: of two places on `r` of different clients, `P` (of `X`, begun at `J`) and
//!   `Q` (of `Y`), `P` clean until served: if every waiter of `Y` on `r` running when `Q`
//!   began started after `J` (so none could have joined before `X`), `P` is served before
//!   `Q`.
//! - **`passed-over`** (the bounded wait, in hand-offs): a clean place `P` of `X`, begun at
//!   `J`, sees no more locks on `r` granted to other clients before it ends than the number
//!   of other clients' acquisitions of `r` running at `J` (those that may be ahead of it: each
//!   is served at most once before `X`; any other grant is one that overtook it). Counted by
//!   acquisition, not by client: a client's waiters share one place, and two of them that
//!   were both waiting or trying before `X` joined may both be served first (one whose try
//!   had won before `J` and was still writing its fencing token back, and one in the place;
//!   seed 16994 of `--faults none`, judged a violation when clients were counted). A waiter
//!   of such a client that starts after `J` and is served before `X` still counts against it.
//!   The design promises no time: a waiter waits for the holds of those ahead.

use crate::check::{History, Violation};

/// What the clients did that fairness is judged on (recorded by the world as it runs).
#[derive(Debug, Default)]
pub struct FairLog {
    /// Per client, whether it runs fair mode.
    pub clients: Vec<bool>,
    /// Whether the world has no fault and no negative control.
    pub fault_free: bool,
    /// Every acquisition (`History::ops` index, client, resources, when it began to wait in
    /// line, whether a round met a timeout or a connection down).
    pub acquisitions: Vec<Acq>,
    /// Changes of the lines, in order of time.
    pub events: Vec<Event>,
    /// Locks whose release was sent, and when.
    pub released: Vec<(u64, u64)>,
    /// Locks whose release succeeded, and when its round ended: by then it has reached the
    /// masters that decided it.
    pub landed: Vec<(u64, u64)>,
    /// Locks granted, and when the try that won them took their resources on the masters
    /// (its acquire or claim round decided; a fenced lock's write-back of its token comes
    /// after, and the lock is granted only then). The line is served at that moment.
    pub taken: Vec<(u64, u64)>,
}

/// An acquisition, as fairness sees it.
#[derive(Debug, Clone)]
pub struct Acq {
    /// Its operation (`History::ops`).
    pub op: usize,
    /// Its client.
    pub client: u32,
    /// Its resources.
    pub resources: Vec<u32>,
    /// When its first wait in line began.
    pub joined: Option<u64>,
    /// Whether one of its rounds met a timeout or a connection down.
    pub troubled: bool,
}

/// A change of a client's place on a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// A waiter of the client began its wait in line (acquisition `.0`).
    Joined(usize),
    /// The client sent a release of the resource (the hand-off takes it out of the line).
    Released,
    /// A waiter of the client left the line (gave up, or was abandoned).
    Left,
}

/// One change.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    /// When.
    pub at: u64,
    /// Whose.
    pub client: u32,
    /// Which resource.
    pub resource: u32,
    /// What.
    pub what: What,
}

impl FairLog {
    /// Notes `what` of `client` on each of `resources`, now.
    pub fn note(&mut self, at: u64, client: u32, resources: &[u32], what: What) {
        for &resource in resources {
            self.events.push(Event {
                at,
                client,
                resource,
                what,
            });
        }
    }

    /// The acquisition of operation `op`, if recorded.
    pub fn acq_mut(&mut self, op: usize) -> Option<&mut Acq> {
        self.acquisitions.iter_mut().rev().find(|a| a.op == op)
    }

    fn is_fair(&self, client: u32) -> bool {
        self.clients.get(client as usize).copied().unwrap_or(false)
    }
}

/// A place in a line, reconstructed.
#[derive(Debug, Clone)]
struct Place {
    client: u32,
    resource: u32,
    begun: u64,
    /// When it ended, and whether it was served then.
    end: Option<(u64, bool)>,
    /// Whether a set's waiter stood in it.
    set: bool,
}

/// A grant: a lock's first window.
struct Grant {
    lock: u64,
    client: u32,
    at: u64,
}

/// What the fairness checks came to: the violations, and how many places they judged.
#[derive(Debug, Default)]
pub struct Judged {
    /// Broken promises (`fifo`, `passed-over`), in order of time.
    pub violations: Vec<Violation>,
    /// Places judged (clean in a world without faults).
    pub places: u64,
}

/// How long after its validity a lock that ran out is taken to hold its keys, beside a tenth
/// of its length: past the drift, Redis' precision and its round's delivery.
const EXPIRY_MARGIN: u64 = 20_000_000;

fn ms(t: u64) -> f64 {
    t as f64 / 1e6
}

/// Locks granted on `r`, in order of the moment their try took `r` on the masters (see
/// [`FairLog::taken`]; a fenced lock's grant comes a round later: seed 177536 of `--faults
/// none`, where a fenced claim of c2 took the resource from c2's place, another waiter of c2
/// joined the line at the end while the claim wrote its token back, and the judge, counting
/// the grant from its end, took it for that new place served before an older one).
fn grants(log: &FairLog, h: &History, r: u32) -> Vec<Grant> {
    let mut out: Vec<Grant> = Vec::new();
    for w in h.windows.iter().filter(|w| w.resources.contains(&r)) {
        if !out.iter().any(|g| g.lock == w.lock) {
            let taken = log.taken.iter().find(|(l, _)| *l == w.lock);
            out.push(Grant {
                lock: w.lock,
                client: w.holder.client,
                at: taken.map_or(w.from, |(_, t)| (*t).min(w.from)),
            });
        }
    }
    out.sort_by_key(|g| g.at);
    out
}

/// The places on `r`, from the events and the grants.
fn places(log: &FairLog, h: &History, r: u32) -> Vec<Place> {
    let mut evs: Vec<(u64, u32, Option<What>)> = log
        .events
        .iter()
        .filter(|e| e.resource == r)
        .map(|e| (e.at, e.client, Some(e.what)))
        .collect();
    evs.extend(grants(log, h, r).iter().map(|g| (g.at, g.client, None)));
    evs.sort_by_key(|e| e.0);
    let mut open: Vec<Place> = Vec::new();
    let mut out = Vec::new();
    for (at, client, what) in evs {
        let i = open.iter().position(|p| p.client == client);
        let set = |op: usize| {
            log.acquisitions
                .iter()
                .any(|a| a.op == op && a.resources.len() > 1)
        };
        match (what, i) {
            (Some(What::Joined(op)), None) => open.push(Place {
                client,
                resource: r,
                begun: at,
                end: None,
                set: set(op),
            }),
            (Some(What::Joined(op)), Some(i)) => open[i].set |= set(op),
            (_, Some(i)) => {
                let mut p = open.swap_remove(i);
                p.end = Some((at, what.is_none()));
                out.push(p);
            }
            (_, None) => {}
        }
    }
    out.extend(open);
    out
}

/// Whether `[from, to]` of resource `r` is clean for a place of `client` (see the module).
fn clean(log: &FairLog, h: &History, r: u32, client: u32, from: u64, to: u64) -> bool {
    let meets = |a: u64, b: u64| a <= to && b >= from;
    for a in log.acquisitions.iter().filter(|a| a.resources.contains(&r)) {
        let op = &h.ops[a.op];
        let end = op.end.unwrap_or(u64::MAX);
        if !meets(op.start, end) {
            continue;
        }
        if !log.is_fair(a.client) || op.abandoned || (a.client == client && a.troubled) {
            return false;
        }
    }
    for g in grants(log, h, r) {
        let wins = h.windows.iter().filter(|w| w.lock == g.lock);
        let valid = wins.map(|w| w.valid).max().unwrap_or(0);
        let released = log
            .released
            .iter()
            .find(|(l, _)| *l == g.lock)
            .map(|(_, t)| *t);
        // A lock that ran out lets its keys live a little past its validity (the drift, the
        // expiry's precision, its round): the line is not judged until they are surely gone.
        // A lock of a client without fair mode holds its keys until its release has landed
        // on every master: sent before a waiter joined, it may still be refusing it, and its
        // release rings nobody (seed 229933 of `--faults none`). Its round ends with a
        // quorum; the masters it did not wait for get it a delivery later (seed 232485): the
        // same margin as a lock that ran out.
        let landed = log
            .landed
            .iter()
            .find(|(l, _)| *l == g.lock)
            .map(|(_, t)| *t);
        let end = match released {
            Some(t) if t <= valid && !log.is_fair(g.client) => {
                landed.unwrap_or(t).max(t) + EXPIRY_MARGIN
            }
            Some(t) if t <= valid => t,
            _ => valid + EXPIRY_MARGIN + (valid.saturating_sub(g.at)) / 10,
        };
        if !meets(g.at, end) {
            continue;
        }
        if !log.is_fair(g.client) || released.is_none_or(|t| t > valid) {
            return false;
        }
    }
    true
}

/// The clients of the other clients' acquisitions of `r` running at `t`, one per acquisition.
fn running_at(log: &FairLog, h: &History, r: u32, client: u32, t: u64) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    // (One entry per acquisition: a client's name is repeated for each of its own.)
    for a in log
        .acquisitions
        .iter()
        .filter(|a| a.resources.contains(&r) && a.client != client)
    {
        let op = &h.ops[a.op];
        if op.start <= t && op.end.is_none_or(|e| e >= t) {
            out.push(a.client);
        }
    }
    out
}

/// The earliest start of a waiter of `client` on `r` (alone or in a set) running at `t`.
fn first_start(log: &FairLog, h: &History, r: u32, client: u32, t: u64) -> u64 {
    log.acquisitions
        .iter()
        .filter(|a| a.client == client && a.resources.contains(&r))
        .map(|a| &h.ops[a.op])
        .filter(|op| op.start <= t && op.end.is_none_or(|e| e >= t))
        .map(|op| op.start)
        .min()
        .unwrap_or(t)
}

/// Judges fairness over the history (nothing outside a world with no fault).
pub fn check(log: &FairLog, h: &History) -> Judged {
    let mut out = Judged::default();
    if !log.fault_free || !log.clients.iter().any(|f| *f) {
        return out;
    }
    let mut resources: Vec<u32> = log.events.iter().map(|e| e.resource).collect();
    resources.sort_unstable();
    resources.dedup();
    for r in resources {
        let all = places(log, h, r);
        for p in &all {
            let Some((end, served)) = p.end else { continue };
            if p.set || !clean(log, h, r, p.client, p.begun, end) {
                continue;
            }
            out.places += 1;
            let ahead = running_at(log, h, r, p.client, p.begun);
            let overtook: Vec<Grant> = grants(log, h, r)
                .into_iter()
                .filter(|g| g.client != p.client && g.at > p.begun && g.at < end)
                .collect();
            if overtook.len() > ahead.len() {
                let who: Vec<String> = overtook
                    .iter()
                    .map(|g| format!("c{} (lock {}) at {:.3} ms", g.client, g.lock, ms(g.at)))
                    .collect();
                out.violations.push(Violation {
                    invariant: "passed-over",
                    at: end,
                    detail: format!(
                        "resource {r}: c{} in line from {:.3} ms until {:.3} ms ({}) saw {} locks granted to others ({}), with {} acquisitions of other clients running when it joined (by {:?})",
                        p.client,
                        ms(p.begun),
                        ms(end),
                        if served { "served" } else { "left" },
                        overtook.len(),
                        who.join(", "),
                        ahead.len(),
                        ahead
                    ),
                });
            }
            if !served {
                continue;
            }
            for q in all
                .iter()
                .filter(|q| q.client != p.client && q.resource == r)
            {
                let Some((q_end, true)) = q.end else { continue };
                let start = first_start(log, h, r, q.client, q.begun);
                if start > p.begun && q_end < end {
                    out.violations.push(Violation {
                        invariant: "fifo",
                        at: q_end,
                        detail: format!(
                            "resource {r}: c{} joined the line at {:.3} ms and was served at {:.3} ms; c{}, whose waiter started at {:.3} ms (joined at {:.3} ms), was served before it, at {:.3} ms",
                            p.client,
                            ms(p.begun),
                            ms(end),
                            q.client,
                            ms(start),
                            ms(q.begun),
                            ms(q_end)
                        ),
                    });
                }
            }
        }
    }
    out.violations.sort_by_key(|v| v.at);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Holder, OpKind, OpRecord, Window};

    /// Client 0 joins the line of resource 0 at 10 while client 2 holds it; client 1 starts
    /// later (20) and is served (30) before client 0 (50): both promises broken. With client 1
    /// served after client 0, nothing.
    #[test]
    fn a_later_arrival_served_first_breaks_both_promises() {
        let op = |client, start, end| OpRecord {
            holder: Holder { client, task: 0 },
            kind: OpKind::Acquire,
            start,
            bound: u64::MAX,
            end: Some(end),
            ends: 1,
            abandoned: false,
        };
        let win = |lock, client, from, until| Window {
            lock,
            holder: Holder { client, task: 0 },
            resources: vec![0],
            from,
            until,
            valid: 1_000,
            token: None,
        };
        let judge = |served1: u64| {
            let h = History {
                ops: vec![op(2, 0, 1), op(0, 5, 50), op(1, 20, served1)],
                windows: vec![
                    win(1, 2, 1, 12),
                    win(2, 1, served1, served1 + 5),
                    win(3, 0, 50, 55),
                ],
                ..History::default()
            };
            let acq = |op, client, joined| Acq {
                op,
                client,
                resources: vec![0],
                joined,
                troubled: false,
            };
            let mut log = FairLog {
                clients: vec![true; 3],
                fault_free: true,
                acquisitions: vec![acq(0, 2, None), acq(1, 0, Some(10)), acq(2, 1, Some(22))],
                released: vec![(1, 12), (2, served1 + 5), (3, 55)],
                ..FairLog::default()
            };
            log.note(10, 0, &[0], What::Joined(1));
            log.note(22, 1, &[0], What::Joined(2));
            log.note(12, 2, &[0], What::Released);
            log.note(served1 + 5, 1, &[0], What::Released);
            log.note(55, 0, &[0], What::Released);
            check(&log, &h)
        };
        let names: Vec<&str> = judge(30).violations.iter().map(|v| v.invariant).collect();
        assert_eq!(names, ["fifo", "passed-over"], "{:?}", judge(30).violations);
        let fine = judge(60);
        assert!(fine.violations.is_empty() && fine.places == 2, "{fine:?}");
    }
}
