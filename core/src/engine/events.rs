//! Events and statistics: what the engine counts and reports for the driver to observe, in one
//! place, so that the statistics and the events never disagree.

use super::{Engine, MAX_EVENTS};
use crate::conn::Note;
use crate::event::Event;
use crate::stats::{NodeStats, Stats};

impl<U> Engine<U> {
    /// Counts `event` in its node's statistics and queues it for the driver
    /// ([`poll_event`](Engine::poll_event)): the one place where either happens, so that the
    /// statistics and whatever observes the events never disagree. Beyond
    /// [`MAX_EVENTS`] not taken, the oldest are dropped (and counted in
    /// [`Stats::events_dropped`]); the statistics still count them.
    pub fn record(&mut self, event: Event) {
        let node = match &event {
            Event::Connect { node, .. }
            | Event::ScriptFallback { node }
            | Event::EvictionUnchecked { node, .. } => self.nodes.get_mut(*node),
            Event::Waited { .. } => None,
        };
        if let Some(stats) = node.map(|n| &mut n.stats) {
            match &event {
                Event::Connect { connects, .. } => stats.connects = *connects,
                Event::ScriptFallback { .. } => stats.noscript_fallbacks += 1,
                Event::EvictionUnchecked { .. } => stats.eviction_unchecked += 1,
                Event::Waited { .. } => {}
            }
        }
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
            self.events_dropped += 1;
        }
        self.events.push_back(event);
    }

    /// The next event to report, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether an event waits to be taken (a test cheaper than `poll_event` per pass).
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Takes what node `i`'s connection noted while reading, as events.
    #[inline]
    pub(crate) fn take_notes(&mut self, i: usize) {
        if self.nodes.get(i).is_some_and(|n| !n.conn.notes.is_empty()) {
            self.record_notes(i);
        }
    }

    /// [`take_notes`](Engine::take_notes) when there are some (rarely: kept out of line).
    #[cold]
    fn record_notes(&mut self, i: usize) {
        let Some(node) = self.nodes.get_mut(i) else {
            return;
        };
        for note in std::mem::take(&mut node.conn.notes) {
            self.record(match note {
                Note::ScriptFallback => Event::ScriptFallback { node: i },
                Note::EvictionUnchecked(why) => Event::EvictionUnchecked { node: i, why },
            });
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        Stats {
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeStats {
                    buffered_bytes: n.conn.buffered_capacity(),
                    replies: n.conn.replies(),
                    ..n.stats.clone()
                })
                .collect(),
            largest_batch: self.largest_batch,
            events_dropped: self.events_dropped,
            batches: self.batches,
            batched_ops: self.batched_ops,
            tries: self.tries,
            claims: self.claims,
        }
    }
}
