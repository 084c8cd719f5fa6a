//! The mutual-exclusion checker: records, on one monotonic clock, the window in which each
//! holder was entitled to the lock, and finds any two that overlap.
//!
//! A holder's window opens when `lock` returns and closes at the earlier of its validity's end
//! and the moment it starts to release. Two windows of the same resource that overlap are a
//! violation of mutual exclusion. Work a holder does past its own validity (a holder paused
//! too long) is counted apart: the lock promises nothing then, so it is not the lock's fault.
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
    pub from: Instant,
    pub until: Instant,
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
    from: Instant,
    valid_until: Instant,
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    /// Call right after `lock` returned, with the lock's `valid_until`.
    pub fn enter(&self, holder: usize, valid_until: Instant) -> Section {
        let from = Instant::now();
        if self.occupancy.fetch_add(1, Ordering::SeqCst) != 0 {
            self.detector_hits.fetch_add(1, Ordering::SeqCst);
        }
        Section {
            holder,
            from,
            valid_until,
        }
    }

    /// Call right before releasing.
    pub fn leave(&self, s: Section) {
        let now = Instant::now();
        self.occupancy.fetch_sub(1, Ordering::SeqCst);
        if now > s.valid_until {
            self.past_validity.fetch_add(1, Ordering::SeqCst);
        }
        let until = now.min(s.valid_until);
        if until > s.from {
            self.windows.lock().unwrap().push(Window {
                holder: s.holder,
                from: s.from,
                until,
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

    /// Windows recorded.
    pub fn acquisitions(&self) -> usize {
        self.windows.lock().unwrap().len()
    }

    /// Every pair of windows of different holders that overlap.
    pub fn overlaps(&self) -> Vec<Overlap> {
        let mut w = self.windows.lock().unwrap().clone();
        w.sort_by_key(|w| w.from);
        let mut out = Vec::new();
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
        out
    }
}
