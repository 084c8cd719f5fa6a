//! The checker: a recorded history, judged on the simulation's true clock.
//!
//! A [`History`] holds what happened, in terms any runner can record: each operation (who, what,
//! when it started and ended, by when it had to end), each holder's validity [`Window`]s, each
//! write to a fenced store, and what was seen in flight (a reply matched to another command, a
//! round completed twice, a panic, a free resource not taken in the first round). Times are
//! nanoseconds from the run's start on one clock. [`check`] finds every [`Violation`]:
//!
//! - `overlap`: two locks whose resource sets meet hold windows that overlap;
//! - `token-order`: of two fenced windows of a resource, one ending before the other begins,
//!   the later one's token is not greater;
//! - `store-order`: a fenced store accepted a write of a holder after that of a later holder;
//! - `op-bound`, `op-unfinished`, `op-twice`: an operation ended after its bound, never, or twice;
//! - `guard-late`: a guarded lock's guard neither reported loss nor was let go by its loss
//!   deadline (the end of its validity, as confirmed extensions left it, less its margin);
//! - `guard-write`: a guarded holder wrote after its credited window ended;
//! - whatever the runner noted itself (`misattributed`, `round-twice`, `panic`, `liveness`,
//!   and liveness after expiry: `liveness-expiry`, `waiter-gave-up`, `retry-gap`; with no
//!   fault, a guard that lost its lock for any reason but its policy's limit: `guard-lost`;
//!   replies owed per connection: `owed-bound`, `owed-stale`).
//!
//! A window runs from when the acquisition (or extension) completed to the end of the validity
//! the core reported, cut short by the release being sent (or an extension's cap). A guarded
//! lock's windows are credited only until its guard reported the loss: the overlap, token and
//! store checks judge them so.

/// Who acts: a client and one of its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Holder {
    /// The client.
    pub client: u32,
    /// The task within it.
    pub task: u32,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}.{}", self.client, self.task)
    }
}

/// An operation's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// `lock` / `lock_many` (retries), `lock_within`, `try_lock` (one try).
    Acquire,
    /// `extend`.
    Extend,
    /// `unlock`.
    Release,
    /// `inspect`.
    Inspect,
}

impl OpKind {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Acquire => "acquire",
            OpKind::Extend => "extend",
            OpKind::Release => "release",
            OpKind::Inspect => "inspect",
        }
    }
}

/// One operation.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// Who ran it.
    pub holder: Holder,
    /// What it was.
    pub kind: OpKind,
    /// When it started.
    pub start: u64,
    /// The latest it may end.
    pub bound: u64,
    /// When it ended (the first time), if it did.
    pub end: Option<u64>,
    /// How many times it ended.
    pub ends: u32,
    /// Whether its caller went away before it ended (it then ends when abandoned).
    pub abandoned: bool,
}

/// One interval in which a lock's holder was entitled to its resources. A guarded lock's
/// windows are credited only until its guard reported the loss (see [`Guard`]).
#[derive(Debug, Clone)]
pub struct Window {
    /// The lock (unique in the history); a lock extended has one window per extension.
    pub lock: u64,
    /// Who held it.
    pub holder: Holder,
    /// Its resources, as indices the recorder chose.
    pub resources: Vec<u32>,
    /// From when.
    pub from: u64,
    /// Until when.
    pub until: u64,
    /// The end of the validity the core reported (capped by an extension that began after),
    /// whether or not the window was cut short before it.
    pub valid: u64,
    /// Its fencing token, if fenced.
    pub token: Option<u64>,
}

/// A guarded lock (a lock kept alive in the background, as `LockGuard` and `BlockingGuard`
/// keep it): when its guard reported the loss, and when it was let go.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The lock (its windows are the lock's).
    pub lock: u64,
    /// Who held it.
    pub holder: Holder,
    /// When the guard started (its lock acquired).
    pub started: u64,
    /// How long before the end of its validity the guard must report loss at the latest (the
    /// core's `loss_margin` of its ttl, on the run's clock).
    pub margin: u64,
    /// When the guard first reported the lock lost (or said so by the clock), if it did.
    pub lost_at: Option<u64>,
    /// Why.
    pub loss: String,
    /// When the guard was released (or dropped), if it was.
    pub ended_at: Option<u64>,
}

/// A write to a fenced store.
#[derive(Debug, Clone)]
pub struct Write {
    /// When.
    pub at: u64,
    /// By which lock.
    pub lock: u64,
    /// To which resource.
    pub resource: u32,
    /// With which token (none: unfenced).
    pub token: Option<u64>,
    /// Whether the store took it.
    pub accepted: bool,
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant (`overlap`, `token-order`, ...).
    pub invariant: &'static str,
    /// When (on the run's clock).
    pub at: u64,
    /// What, in words.
    pub detail: String,
}

/// Everything recorded of a run.
#[derive(Debug, Default)]
pub struct History {
    /// Every operation.
    pub ops: Vec<OpRecord>,
    /// Every holder's windows.
    pub windows: Vec<Window>,
    /// Every write to the fenced store.
    pub writes: Vec<Write>,
    /// Every guarded lock.
    pub guards: Vec<Guard>,
    /// What the runner saw break as it happened.
    pub noted: Vec<Violation>,
}

impl History {
    /// Notes a violation seen in flight.
    pub fn note(&mut self, invariant: &'static str, at: u64, detail: String) {
        self.noted.push(Violation {
            invariant,
            at,
            detail,
        });
    }

    /// A history of windows alone, as a runner outside the simulator records them (the
    /// real-server soak of `testkit`, judged in `examples/soak.rs` and `tests/safety.rs`):
    /// each `(holder, resource, from, until, token)` a lock of its own, its times in
    /// nanoseconds from one origin.
    pub fn of_windows(
        windows: impl IntoIterator<Item = (u32, u32, u64, u64, Option<u64>)>,
    ) -> History {
        let windows = windows
            .into_iter()
            .enumerate()
            .map(|(k, (client, resource, from, until, token))| Window {
                lock: k as u64,
                holder: Holder { client, task: 0 },
                resources: vec![resource],
                from,
                until,
                // (Only guards read it, and such a history has none.)
                valid: until,
                token,
            })
            .collect();
        History {
            windows,
            ..History::default()
        }
    }

    /// Acquisitions recorded (locks with a window).
    pub fn acquisitions(&self) -> usize {
        let mut n = 0;
        let mut last = None;
        for w in &self.windows {
            if last != Some(w.lock) {
                n += 1;
                last = Some(w.lock);
            }
        }
        n
    }
}

fn ms(t: u64) -> f64 {
    t as f64 / 1e6
}

/// Every violation in `h`, in order of time.
pub fn check(h: &History) -> Vec<Violation> {
    let mut out = h.noted.clone();
    let credited = credited(h);
    let windows = credited.as_deref().unwrap_or(&h.windows);
    overlaps(windows, &mut out);
    token_order(windows, &mut out);
    store_order(windows, &h.writes, &mut out);
    guards(h, &mut out);
    ops(h, &mut out);
    out.sort_by_key(|v| v.at);
    out
}

/// The windows as credited, when some lock was guarded: a guarded lock's windows end at the
/// earliest of their own end and the loss its guard reported. `None`: as recorded.
fn credited(h: &History) -> Option<Vec<Window>> {
    if h.guards.iter().all(|g| g.lost_at.is_none()) {
        return None;
    }
    let mut lost: Vec<(u64, u64)> = h
        .guards
        .iter()
        .filter_map(|g| g.lost_at.map(|t| (g.lock, t)))
        .collect();
    lost.sort_unstable();
    let mut out = h.windows.clone();
    for w in &mut out {
        if let Ok(i) = lost.binary_search_by_key(&w.lock, |(l, _)| *l) {
            w.until = w.until.min(lost[i].1);
        }
    }
    Some(out)
}

/// A guard reports loss no later than its loss deadline: the end of its lock's validity (as
/// confirmed extensions left it) less its margin, unless it was let go before; a guard whose
/// acquisition left less validity than the margin is lost from its start (`guard-late`).
/// Its holder's writes come no later than its credited window's end (`guard-write`).
fn guards(h: &History, out: &mut Vec<Violation>) {
    if h.guards.is_empty() {
        return;
    }
    for g in &h.guards {
        let valid = h
            .windows
            .iter()
            .filter(|w| w.lock == g.lock)
            .map(|w| w.valid)
            .max();
        let Some(valid) = valid else { continue };
        let deadline = valid.saturating_sub(g.margin).max(g.started);
        let end = match (g.lost_at, g.ended_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Two nanoseconds of rounding between the holder's clock and the run's.
        if end.is_none_or(|t| t > deadline + 2) {
            out.push(Violation {
                invariant: "guard-late",
                at: deadline,
                detail: format!(
                    "{}'s guarded lock {}, valid until {:.3} ms, loss deadline {:.3} ms: {}",
                    g.holder,
                    g.lock,
                    ms(valid),
                    ms(deadline),
                    match (g.lost_at, g.ended_at) {
                        (Some(t), _) if Some(t) == end =>
                            format!("loss reported at {:.3} ms ({})", ms(t), g.loss),
                        (_, Some(t)) => format!("released at {:.3} ms, no loss reported", ms(t)),
                        _ => "neither lost nor released".into(),
                    }
                ),
            });
        }
        let credit = g.lost_at.unwrap_or(u64::MAX).min(valid);
        for w in h
            .writes
            .iter()
            .filter(|w| w.lock == g.lock && w.at > credit)
        {
            out.push(Violation {
                invariant: "guard-write",
                at: w.at,
                detail: format!(
                    "{}'s guarded lock {} wrote at {:.3} ms, its credit ending at {:.3} ms",
                    g.holder,
                    g.lock,
                    ms(w.at),
                    ms(credit)
                ),
            });
        }
    }
}

/// The windows of each resource, in order of their start.
fn by_resource(windows: &[Window]) -> Vec<(u32, Vec<&Window>)> {
    let mut pairs: Vec<(u32, &Window)> = windows
        .iter()
        .filter(|w| w.until > w.from)
        .flat_map(|w| w.resources.iter().map(move |r| (*r, w)))
        .collect();
    pairs.sort_by_key(|(r, w)| (*r, w.from, w.lock));
    let mut out: Vec<(u32, Vec<&Window>)> = Vec::new();
    for (r, w) in pairs {
        match out.last_mut() {
            Some((last, group)) if *last == r => group.push(w),
            _ => out.push((r, vec![w])),
        }
    }
    out
}

fn overlaps(windows: &[Window], out: &mut Vec<Violation>) {
    for (r, group) in by_resource(windows) {
        // Sweep: the window reaching furthest so far; a later one starting before its end
        // overlaps it, unless it is the same lock's.
        let mut reach: Option<&Window> = None;
        for cur in group {
            if let Some(w) = reach {
                if cur.from < w.until && cur.lock != w.lock {
                    out.push(Violation {
                        invariant: "overlap",
                        at: cur.from,
                        detail: format!(
                            "resource {r}: lock {} of {} valid {:.3}..{:.3} ms (token {:?}) and lock {} of {} valid {:.3}..{:.3} ms (token {:?})",
                            w.lock, w.holder, ms(w.from), ms(w.until), w.token,
                            cur.lock, cur.holder, ms(cur.from), ms(cur.until), cur.token
                        ),
                    });
                }
            }
            if reach.is_none_or(|w| cur.until > w.until) {
                reach = Some(cur);
            }
        }
    }
}

/// A lock's whole span on a resource: its first window's start, its last window's end.
struct Span {
    lock: u64,
    holder: Holder,
    from: u64,
    until: u64,
    token: u64,
}

fn token_order(windows: &[Window], out: &mut Vec<Violation>) {
    for (r, group) in by_resource(windows) {
        let mut spans: Vec<Span> = Vec::new();
        for w in group {
            let Some(token) = w.token else { continue };
            match spans.iter_mut().find(|s| s.lock == w.lock) {
                Some(s) => {
                    s.from = s.from.min(w.from);
                    s.until = s.until.max(w.until);
                }
                None => spans.push(Span {
                    lock: w.lock,
                    holder: w.holder,
                    from: w.from,
                    until: w.until,
                    token,
                }),
            }
        }
        spans.sort_by_key(|s| s.from);
        let mut by_end: Vec<&Span> = spans.iter().collect();
        by_end.sort_by_key(|s| s.until);
        let mut k = 0;
        let mut best: Option<&Span> = None;
        for s in &spans {
            while k < by_end.len() && by_end[k].until <= s.from {
                if best.is_none_or(|b| by_end[k].token > b.token) {
                    best = Some(by_end[k]);
                }
                k += 1;
            }
            if let Some(b) = best {
                if s.token <= b.token {
                    out.push(Violation {
                        invariant: "token-order",
                        at: s.from,
                        detail: format!(
                            "resource {r}: lock {} of {} held from {:.3} ms with token {}, after lock {} of {} whose window ended at {:.3} ms with token {}",
                            s.lock, s.holder, ms(s.from), s.token, b.lock, b.holder, ms(b.until), b.token
                        ),
                    });
                }
            }
        }
    }
}

fn store_order(windows: &[Window], writes: &[Write], out: &mut Vec<Violation>) {
    // Each fenced lock's span per resource: a write accepted from a lock whose span ended
    // before the span of a lock whose write the store had already accepted is a stale write
    // taken after a newer one.
    let span = |lock: u64| -> Option<(u64, u64)> {
        let mut it = windows.iter().filter(|w| w.lock == lock);
        let first = it.next()?;
        let (mut from, mut until) = (first.from, first.until);
        for w in it {
            from = from.min(w.from);
            until = until.max(w.until);
        }
        Some((from, until))
    };
    let mut writes: Vec<&Write> = writes
        .iter()
        .filter(|w| w.accepted && w.token.is_some())
        .collect();
    writes.sort_by_key(|w| (w.resource, w.at));
    let mut i = 0;
    while i < writes.len() {
        let r = writes[i].resource;
        // The latest start among the locks whose writes were taken so far.
        let mut newest: Option<(u64, u64)> = None;
        while i < writes.len() && writes[i].resource == r {
            let w = writes[i];
            if let Some((from, until)) = span(w.lock) {
                if let Some((lock, nfrom)) = newest {
                    if lock != w.lock && until <= nfrom {
                        out.push(Violation {
                            invariant: "store-order",
                            at: w.at,
                            detail: format!(
                                "resource {r}: the store took lock {}'s write (token {:?}, window ended {:.3} ms) after lock {lock}'s, whose window began at {:.3} ms",
                                w.lock, w.token, ms(until), ms(nfrom)
                            ),
                        });
                    }
                }
                if newest.is_none_or(|(_, nf)| from > nf) {
                    newest = Some((w.lock, from));
                }
            }
            i += 1;
        }
    }
}

/// Writes a store took from a lock after the write of a lock whose window began after the
/// first one's ended, fenced or not: what fencing exists to prevent (the fencing debate).
pub fn stale_writes_taken(h: &History) -> usize {
    let copy = History {
        windows: h.windows.clone(),
        writes: h
            .writes
            .iter()
            .map(|w| Write {
                token: Some(w.token.unwrap_or(0)),
                ..w.clone()
            })
            .collect(),
        ..History::default()
    };
    let mut out = Vec::new();
    store_order(&copy.windows, &copy.writes, &mut out);
    out.len()
}

fn ops(h: &History, out: &mut Vec<Violation>) {
    for (i, op) in h.ops.iter().enumerate() {
        let what = || {
            format!(
                "operation {i} ({} by {}, started {:.3} ms, bound {:.3} ms)",
                op.kind.name(),
                op.holder,
                ms(op.start),
                ms(op.bound)
            )
        };
        match op.end {
            None => out.push(Violation {
                invariant: "op-unfinished",
                at: op.start,
                detail: format!("{} never ended", what()),
            }),
            Some(end) if end > op.bound && !op.abandoned => out.push(Violation {
                invariant: "op-bound",
                at: end,
                detail: format!("{} ended at {:.3} ms", what(), ms(end)),
            }),
            _ => {}
        }
        if op.ends > 1 {
            out.push(Violation {
                invariant: "op-twice",
                at: op.start,
                detail: format!("{} ended {} times", what(), op.ends),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(
        lock: u64,
        client: u32,
        res: &[u32],
        from: u64,
        until: u64,
        token: Option<u64>,
    ) -> Window {
        Window {
            lock,
            holder: Holder { client, task: 0 },
            resources: res.to_vec(),
            from,
            until,
            valid: until,
            token,
        }
    }

    #[test]
    fn overlapping_windows_of_different_locks_on_shared_resources_are_found() {
        let mut h = History::default();
        h.windows.push(win(1, 0, &[0], 0, 100, None));
        h.windows.push(win(1, 0, &[0], 90, 200, None)); // its own extension: fine
        h.windows.push(win(2, 1, &[1, 2], 50, 150, None)); // other resources: fine
        h.windows.push(win(3, 2, &[2, 0], 199, 300, None)); // meets lock 1 on 0
        let v = check(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].invariant, "overlap");
        h.windows[3].from = 200;
        assert!(check(&h).is_empty());
    }

    #[test]
    fn a_token_not_above_an_earlier_windows_is_found() {
        let mut h = History::default();
        h.windows.push(win(1, 0, &[0], 0, 10, Some(5)));
        h.windows.push(win(2, 1, &[0], 20, 30, Some(9)));
        h.windows.push(win(3, 2, &[0], 40, 50, Some(7)));
        let v = check(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].invariant, "token-order");
    }

    #[test]
    fn a_stale_write_taken_after_a_newer_one_is_found() {
        let mut h = History::default();
        h.windows.push(win(1, 0, &[0], 0, 10, Some(5)));
        h.windows.push(win(2, 1, &[0], 20, 30, Some(6)));
        let w = |at, lock, token| Write {
            at,
            lock,
            resource: 0,
            token,
            accepted: true,
        };
        h.writes.push(w(25, 2, Some(6)));
        h.writes.push(w(40, 1, Some(5)));
        assert_eq!(check(&h)[0].invariant, "store-order");
        assert_eq!(stale_writes_taken(&h), 1);
        h.writes[1].accepted = false;
        assert!(check(&h).is_empty());
    }

    fn guard(lock: u64, margin: u64, lost_at: Option<u64>, ended_at: Option<u64>) -> Guard {
        Guard {
            lock,
            holder: Holder { client: 0, task: 0 },
            started: 0,
            margin,
            lost_at,
            loss: "test".into(),
            ended_at,
        }
    }

    #[test]
    fn a_guard_reports_loss_by_its_deadline_and_is_credited_until_then() {
        let mut h = History::default();
        // Lock 1, guarded, valid until 100 and extended to 200; its deadline is 190.
        h.windows.push(win(1, 0, &[0], 0, 100, None));
        h.windows.push(win(1, 0, &[0], 80, 200, None));
        h.guards.push(guard(1, 10, Some(190), Some(195)));
        assert!(check(&h).is_empty(), "{:?}", check(&h));
        // Reported late (past the two nanoseconds of rounding), and released late.
        h.guards[0].lost_at = Some(195);
        h.guards[0].ended_at = Some(199);
        let v = check(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].invariant, "guard-late");
        // Released in time with no loss: fine.
        h.guards[0].lost_at = None;
        h.guards[0].ended_at = Some(150);
        assert!(check(&h).is_empty());
        // Neither lost nor released.
        h.guards[0].ended_at = None;
        assert_eq!(check(&h)[0].invariant, "guard-late");
        // A guard that starts past its deadline (its acquisition left less validity than the
        // margin) reports loss from its start.
        h.guards[0].started = 197;
        h.guards[0].lost_at = Some(197);
        assert!(check(&h).is_empty());
        h.guards[0].lost_at = Some(200);
        assert_eq!(check(&h)[0].invariant, "guard-late");
        h.guards[0].started = 0;
        // Lost at 150: credited until then, so a lock from 160 is no second holder, and a
        // write of the guarded holder at 170 is past its credit.
        h.guards[0].lost_at = Some(150);
        h.windows.push(win(2, 1, &[0], 160, 300, None));
        h.writes.push(Write {
            at: 170,
            lock: 1,
            resource: 0,
            token: None,
            accepted: true,
        });
        let names: Vec<_> = check(&h).iter().map(|v| v.invariant).collect();
        assert_eq!(names, ["guard-write"]);
        // Without the loss, the windows meet.
        h.guards.clear();
        assert_eq!(check(&h)[0].invariant, "overlap");
    }

    #[test]
    fn operations_end_once_by_their_bound() {
        let mut h = History::default();
        let op = |end, ends| OpRecord {
            holder: Holder { client: 0, task: 0 },
            kind: OpKind::Extend,
            start: 0,
            bound: 10,
            end,
            ends,
            abandoned: false,
        };
        h.ops.push(op(Some(10), 1));
        h.ops.push(op(Some(11), 1));
        h.ops.push(op(None, 0));
        h.ops.push(op(Some(1), 2));
        let names: Vec<_> = check(&h).iter().map(|v| v.invariant).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            names.contains(&"op-bound")
                && names.contains(&"op-unfinished")
                && names.contains(&"op-twice")
        );
    }
}
