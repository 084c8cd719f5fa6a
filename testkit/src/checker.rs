//! The mutual-exclusion checker: records, on one monotonic clock, the window in which each
//! holder was entitled to the lock, and finds any two that overlap.
//!
//! A holder's window opens when `lock` returns and closes at the earlier of its validity's end
//! and the moment it starts to release. Two windows of the same resource that overlap are a
//! violation of mutual exclusion. Work a holder does past its own validity (a holder paused
//! too long) is counted apart: the lock promises nothing then, so it is not the lock's fault.
//!
//! Fenced holders also report their fencing token: of two windows of one resource where one
//! ends before the other begins, the later one's token must be strictly greater
//! ([`Checker::token_decreases`]), the guarantee fencing makes.
//!
//! Beside the windows, an independent detector: an occupancy counter entered and left inside
//! each critical section. It sees two holders at once only if they both believed they held
//! the lock at the same moment.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One holder's entitlement.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub holder: usize,
    /// Which resource (an index the caller chooses).
    pub resource: usize,
    pub from: Instant,
    pub until: Instant,
    /// The fencing token, for a fenced lock.
    pub token: Option<u64>,
    /// When the call that acquired it began (`from` when not told).
    pub asked: Instant,
    /// The nodes whose yes won it (`Lock::granted_by`), one bit each; 0 when not told.
    pub granted: u64,
}

/// Two windows of one resource, the second after the first, whose tokens do not increase.
#[derive(Debug, Clone, Copy)]
pub struct Decrease {
    pub earlier: Window,
    pub later: Window,
}

/// Two windows that overlap.
#[derive(Debug, Clone, Copy)]
pub struct Overlap {
    pub first: Window,
    pub second: Window,
    pub by: Duration,
}

#[derive(Default)]
pub struct Checker {
    windows: Mutex<Vec<Window>>,
    occupancy: AtomicUsize,
    detector_hits: AtomicU64,
    past_validity: AtomicU64,
}

/// A critical section in progress; close it with [`Checker::leave`].
pub struct Section {
    holder: usize,
    resource: usize,
    from: Instant,
    valid_until: Instant,
    token: Option<u64>,
    asked: Instant,
    granted: u64,
}

impl Window {
    /// The window in words, instants in milliseconds since `origin`: who held what, from when
    /// it asked to when it stopped relying on it, with which token, granted by which nodes.
    pub fn explain(&self, origin: Instant) -> String {
        let ms = |t: Instant| t.saturating_duration_since(origin).as_secs_f64() * 1e3;
        let nodes: Vec<String> = (0..64)
            .filter(|i| self.granted & (1 << i) != 0)
            .map(|i| i.to_string())
            .collect();
        format!(
            "holder {} on resource {}: asked at {:.1} ms, held from {:.1} to {:.1} ms, token {}, granted by nodes [{}]",
            self.holder,
            self.resource,
            ms(self.asked),
            ms(self.from),
            ms(self.until),
            self.token.map_or("none".into(), |t| t.to_string()),
            nodes.join(", ")
        )
    }
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    /// Call right after `lock` returned, with the lock's `valid_until` (one resource, 0, and
    /// no fencing token).
    pub fn enter(&self, holder: usize, valid_until: Instant) -> Section {
        self.enter_fenced(holder, 0, valid_until, None)
    }

    /// [`enter`](Checker::enter) for a lock on `resource` that carries a fencing token. The
    /// occupancy detector counts resource 0 only.
    pub fn enter_fenced(
        &self,
        holder: usize,
        resource: usize,
        valid_until: Instant,
        token: Option<u64>,
    ) -> Section {
        let from = Instant::now();
        if resource == 0 && self.occupancy.fetch_add(1, Ordering::SeqCst) != 0 {
            self.detector_hits.fetch_add(1, Ordering::SeqCst);
        }
        Section {
            holder,
            resource,
            from,
            valid_until,
            token,
            asked: from,
            granted: 0,
        }
    }

    /// [`enter_fenced`](Checker::enter_fenced) with what explains the window if it overlaps
    /// another: when the acquiring call began, and the lock itself (its validity, token and
    /// the nodes that granted it).
    pub fn enter_lock(
        &self,
        holder: usize,
        resource: usize,
        asked: Instant,
        lock: &redlock_mux::Lock,
    ) -> Section {
        let mut s = self.enter_fenced(holder, resource, lock.valid_until(), lock.fencing_token());
        s.asked = asked;
        s.granted = lock.granted_by().fold(0, |m, i| m | 1 << i);
        s
    }

    /// Call right before releasing.
    pub fn leave(&self, s: Section) {
        let now = Instant::now();
        if s.resource == 0 {
            self.occupancy.fetch_sub(1, Ordering::SeqCst);
        }
        if now > s.valid_until {
            self.past_validity.fetch_add(1, Ordering::SeqCst);
        }
        let until = now.min(s.valid_until);
        if until > s.from {
            self.windows.lock().unwrap().push(Window {
                holder: s.holder,
                resource: s.resource,
                from: s.from,
                until,
                token: s.token,
                asked: s.asked,
                granted: s.granted,
            });
        }
    }

    /// Critical sections that saw another holder inside at the same time. Includes those
    /// where one of the two had run past its validity: see [`Checker::overlaps`] for the ones
    /// the lock is answerable for.
    pub fn detector_hits(&self) -> u64 {
        self.detector_hits.load(Ordering::SeqCst)
    }

    /// Critical sections that ended after their validity.
    pub fn past_validity(&self) -> u64 {
        self.past_validity.load(Ordering::SeqCst)
    }

    /// Every window recorded, in the order they closed.
    pub fn windows(&self) -> Vec<Window> {
        self.windows.lock().unwrap().clone()
    }

    /// Windows recorded.
    pub fn acquisitions(&self) -> usize {
        self.windows.lock().unwrap().len()
    }

    /// Windows recorded with a fencing token.
    pub fn fenced(&self) -> usize {
        self.windows
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.token.is_some())
            .count()
    }

    /// The windows of each resource, in order of their start.
    fn by_resource(&self) -> Vec<Vec<Window>> {
        let mut all = self.windows.lock().unwrap().clone();
        all.sort_by_key(|w| (w.resource, w.from));
        let mut out: Vec<Vec<Window>> = Vec::new();
        for w in all {
            match out.last_mut() {
                Some(group) if group[0].resource == w.resource => group.push(w),
                _ => out.push(vec![w]),
            }
        }
        out
    }

    /// Every pair of fenced windows of one resource where the first ends before the second
    /// starts and the second's token is not greater. (Overlapping windows are
    /// [`overlaps`](Checker::overlaps): fencing promises nothing between them.)
    ///
    /// Each window is compared with the highest token among all windows of its resource that
    /// ended before it began, so a decrease is found whatever lies between the two.
    pub fn token_decreases(&self) -> Vec<Decrease> {
        let mut out = Vec::new();
        for mut group in self.by_resource() {
            group.retain(|w| w.token.is_some());
            let mut ended = group.clone();
            ended.sort_by_key(|w| w.until);
            // Sweep in order of start; `ended[..k]` are the windows that ended before it.
            let mut k = 0;
            let mut best: Option<Window> = None;
            for w in &group {
                while k < ended.len() && ended[k].until <= w.from {
                    if best.is_none_or(|b| ended[k].token > b.token) {
                        best = Some(ended[k]);
                    }
                    k += 1;
                }
                if let Some(b) = best {
                    if w.token <= b.token {
                        out.push(Decrease {
                            earlier: b,
                            later: *w,
                        });
                    }
                }
            }
        }
        out
    }

    /// Every pair of windows of different holders that overlap, on the same resource.
    pub fn overlaps(&self) -> Vec<Overlap> {
        let mut out = Vec::new();
        for w in self.by_resource() {
            self.overlaps_in(w, &mut out);
        }
        out
    }

    fn overlaps_in(&self, w: Vec<Window>, out: &mut Vec<Overlap>) {
        // Sweep: the window reaching furthest so far; any later window starting before its
        // end overlaps it.
        let mut reach: Option<Window> = None;
        for cur in w {
            if let Some(r) = reach {
                if cur.from < r.until && cur.holder != r.holder {
                    out.push(Overlap {
                        first: r,
                        second: cur,
                        by: r.until.min(cur.until) - cur.from,
                    });
                }
            }
            if reach.is_none_or(|r| cur.until > r.until) {
                reach = Some(cur);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(checker: &Checker, holder: usize, resource: usize, token: u64, at: Instant) {
        let ms = Duration::from_millis;
        checker.windows.lock().unwrap().push(Window {
            holder,
            resource,
            from: at + ms(10 * holder as u64),
            until: at + ms(10 * holder as u64 + 5),
            token: Some(token),
            asked: at,
            granted: 0,
        });
    }

    #[test]
    fn a_token_lower_than_an_earlier_holders_is_caught_whatever_lies_between() {
        let c = Checker::new();
        let t = Instant::now();
        window(&c, 0, 0, 10, t);
        window(&c, 1, 0, 20, t);
        window(&c, 2, 0, 15, t); // below 20: caught
        window(&c, 3, 0, 21, t);
        window(&c, 4, 1, 1, t); // another resource: its own order
        let d = c.token_decreases();
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!((d[0].earlier.token, d[0].later.token), (Some(20), Some(15)));
        assert!(c.overlaps().is_empty());
        assert_eq!(c.fenced(), 5);
    }

    #[test]
    fn equal_tokens_are_a_decrease_and_overlaps_are_per_resource() {
        let c = Checker::new();
        let t = Instant::now();
        window(&c, 0, 0, 7, t);
        window(&c, 1, 0, 7, t);
        assert_eq!(c.token_decreases().len(), 1);
        let s = c.enter_fenced(5, 2, t + Duration::from_secs(60), Some(1));
        let s2 = c.enter_fenced(6, 3, t + Duration::from_secs(60), Some(1));
        c.leave(s);
        c.leave(s2);
        assert!(c.overlaps().is_empty(), "different resources never overlap");
    }
}
