//! The event queue: events by (time, sequence number), the earliest first, so that events at
//! the same time run in the order they were scheduled.
//!
//! A run has a few dozen events pending at a time (a few hundred at most in the default
//! worlds): they are kept in a vector sorted latest first, where the next is taken off the end
//! and a new one is put in its place by a binary search. Past [`SORTED_MAX`] pending, new
//! events go to a binary heap instead (so that a world of many clients costs a heap's
//! logarithm, not a vector's shift), and each take looks at both.

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

/// How many of the next events a new one is compared with, one by one, before a binary
/// search.
const NEAR: usize = 4;

/// The most events the sorted vector holds.
const SORTED_MAX: usize = 256;

/// Events waiting for their time.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// Sorted by key, the latest first (the next event last).
    sorted: Vec<Entry>,
    /// The events scheduled while the vector was full.
    heap: BinaryHeap<Entry>,
    seq: u64,
}

impl Queue {
    /// Schedules `ev` at `t`, after every event scheduled at `t` before it.
    #[inline]
    pub(crate) fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        let key = (u128::from(t) << 64) | u128::from(self.seq);
        if self.sorted.len() < SORTED_MAX {
            // Mostly among the next few (a segment's delivery, a reply's): looked for from
            // the end first, then by a binary search of the rest. The same place either way
            // (keys are unique).
            let n = self.sorted.len();
            let mut at = n;
            while at > 0 && n - at < NEAR && self.sorted[at - 1].key < key {
                at -= 1;
            }
            if at > 0 && n - at == NEAR && self.sorted[at - 1].key < key {
                at = self.sorted[..at].partition_point(|e| e.key > key);
            }
            self.sorted.insert(at, Entry { key, ev });
        } else {
            self.heap.push(Entry { key, ev });
        }
    }

    /// The earliest event, and its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, Ev)> {
        // Keys are unique: the earlier of the two candidates is the earliest of all.
        let from_heap = match (self.sorted.last(), self.heap.peek()) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(s), Some(h)) => h.key < s.key,
        };
        let e = if from_heap {
            self.heap.pop()
        } else {
            self.sorted.pop()
        }?;
        Some(((e.key >> 64) as u64, e.ev))
    }
}

#[cfg(test)]
mod tests {
    use super::{Queue, SORTED_MAX};
    use crate::world::Ev;

    /// Events come out by time, and in the order they were scheduled at equal times, however
    /// many are pending (the vector alone, and the vector and the heap together).
    #[test]
    fn events_come_out_by_time_then_order() {
        for n in [1usize, 7, SORTED_MAX, SORTED_MAX + 1, 3 * SORTED_MAX + 5] {
            let mut q = Queue::default();
            let mut want = Vec::new();
            let mut x: u64 = 12345;
            for i in 0..n as u32 {
                // A few distinct times, so that many share one.
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let t = (x >> 33) % 17;
                q.push(t, Ev::Wake(i));
                want.push((t, i));
            }
            // Interleaved: takes between pushes, then the rest.
            let mut got = Vec::new();
            for i in 0..(n / 3) as u32 {
                let (t, ev) = q.pop().expect("an event");
                got.push((t, ev));
                q.push(t + 5, Ev::Wake(1_000_000 + i));
            }
            while let Some(e) = q.pop() {
                got.push(e);
            }
            assert_eq!(got.len(), n + n / 3);
            // Nondecreasing in time; at one time, in the order scheduled.
            for w in got.windows(2) {
                assert!(w[0].0 <= w[1].0, "{w:?}");
            }
            let mut firsts: Vec<(u64, u32)> = want.clone();
            firsts.sort_by_key(|&(t, _)| t);
            let got_first: Vec<(u64, u32)> = got
                .iter()
                .filter_map(|&(t, ev)| match ev {
                    Ev::Wake(i) if i < 1_000_000 => Some((t, i)),
                    _ => None,
                })
                .collect();
            assert_eq!(got_first, firsts, "n = {n}");
        }
    }
}
