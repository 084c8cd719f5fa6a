//! The event queue: events by (time, sequence number), the earliest first, so that events at
//! the same time run in the order they were scheduled.

use std::collections::BinaryHeap;

use super::Ev;

/// An event with its place: time and sequence number in one key (one comparison, not a
/// tuple's two or three).
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u128,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.key == other.key
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    // Reversed: the heap's greatest is the earliest.
    fn cmp(&self, other: &Entry) -> std::cmp::Ordering {
        other.key.cmp(&self.key)
    }
}

/// Events waiting for their time.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

impl Queue {
    /// Schedules `ev` at `t`, after every event scheduled at `t` before it.
    pub(crate) fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        let key = (u128::from(t) << 64) | u128::from(self.seq);
        self.heap.push(Entry { key, ev });
    }

    /// The earliest event, and its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, Ev)> {
        self.heap.pop().map(|e| ((e.key >> 64) as u64, e.ev))
    }
}
