//! A client's connections held to the engine's bounds on the replies they owe.

use std::time::Duration;

use super::{Client, Sim, MAX_OWED};

impl Client {
    /// Replies owed per connection stay bounded: never more than the engine's limit
    /// (`owed-bound`), and no command queued on a connection that owes a reply past
    /// [`stale_after`](redlock_core::conn::stale_after), where the engine must replace it first
    /// (`owed-stale`): a connection that lost a command or a reply (byte loss, a blackhole) is
    /// dropped, or its rounds end at their deadlines, rather than owing more and more.
    ///
    /// `local` is its clock's reading now.
    pub(super) fn check_owed(&mut self, sim: &mut Sim, local: std::time::Instant) {
        let submitted = std::mem::replace(&mut self.submitted, false);
        for i in 0..self.owed.len() {
            let (n, oldest) = self.engine.owed(i);
            let last = std::mem::replace(&mut self.owed[i], n);
            sim.owed_max = sim.owed_max.max(n as u64);
            // The sentinel may be queued ahead of the command that reached the limit.
            if n > MAX_OWED + 1 {
                sim.hist.note(
                    "owed-bound",
                    sim.now,
                    format!("c{}: node {i}'s connection owes {n} replies", self.id),
                );
            }
            // The rule is the engine's for the rounds it queues (it replaces a stale connection
            // first). A command a connection sends again in another form after a refusal (a
            // master that was paused answering its backlog) goes behind replies that are old
            // but on their way, keeps its first command's time, and rightly stays.
            // Owed past `stale`: queued before the clock's reading less `stale` (no such
            // instant when the clock has not run that long), one comparison rather than an
            // age computed.
            let stale_owed = || {
                oldest
                    .zip(local.checked_sub(self.stale))
                    .is_some_and(|(t, before)| t < before)
            };
            if submitted && n > last && stale_owed() {
                let age = oldest.map_or(Duration::ZERO, |t| local.saturating_duration_since(t));
                sim.hist.note(
                    "owed-stale",
                    sim.now,
                    format!(
                        "c{}: node {i}'s connection took commands ({last} -> {n} replies owed) while owing one queued {:.3} ms ago (stale after {:.3} ms)",
                        self.id,
                        age.as_secs_f64() * 1e3,
                        self.stale.as_secs_f64() * 1e3
                    ),
                );
            }
        }
    }
}
