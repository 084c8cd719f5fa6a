//! A client's pump: everything due now (the engine's I/O, fired watches handed to their
//! tasks, tasks stepped, rounds completed), pass after pass until nothing is left, then the
//! next wake-up armed.

use std::time::Instant;

use super::*;

impl Client {
    /// Does everything due now, and arms the next wake-up.
    pub(crate) fn pump(&mut self, sim: &mut Sim) {
        self.pump_at(sim, self.local(sim));
    }

    /// [`pump`](Client::pump), with its clock's reading now (`local`): the run's time does
    /// not move during a pump.
    pub(super) fn pump_at(&mut self, sim: &mut Sim, local: Instant) {
        let now = sim.now;
        // The earliest task deadline, as the last pass found the tasks (a pass that changes
        // nothing leaves them as it found them).
        let mut earliest = NEVER;
        let mut settled = false;
        // A pass that would find nothing is not made (mostly a segment that completed no
        // reply): `has_work` errs towards a pass, never away from one.
        let passes = if self.has_work(now, local) {
            MAX_PASSES
        } else {
            0
        };
        for _ in 0..passes {
            let mut progress = false;
            earliest = NEVER;
            self.engine.handle_timeout(local);
            while let Some(ev) = self.engine.poll_io() {
                progress = true;
                match ev {
                    IoEvent::Close(i) => {
                        if let Some(l) = self.links[i].take() {
                            sim.client_close(l);
                        }
                    }
                    IoEvent::Connect(i) => {
                        if let Some(l) = self.links[i].take() {
                            sim.client_close(l);
                        }
                        self.links[i] = Some(sim.connect(self.id, i as u32, self.perm[i]));
                    }
                }
            }
            for i in 0..self.links.len() {
                let Some(l) = self.links[i] else { continue };
                let out = self.engine.transmit(i);
                if !out.is_empty() {
                    let n = out.len();
                    sim.send(l, out);
                    self.engine.handle_written(i, n);
                    progress = true;
                }
            }
            while self.engine.poll_event().is_some() {}
            while let Some(done) = self.engine.poll_completed() {
                progress = true;
                self.round_done(sim, done);
            }
            while let Some(w) = self.engine.poll_woken() {
                progress = true;
                self.fired.push(w);
            }
            if !self.fired.is_empty() {
                progress |= self.hand_fired(sim);
            }
            for k in 0..self.tasks.len() {
                let timer = self.tasks[k].timer;
                if timer <= now {
                    progress = true;
                    self.tasks[k].timer = NEVER;
                    self.on_timer(sim, k);
                } else {
                    earliest = earliest.min(timer);
                }
                if let State::Run(run) = &self.tasks[k].state {
                    if run.abandon_at <= now {
                        progress = true;
                        self.abandon(sim, k);
                    } else {
                        earliest = earliest.min(run.abandon_at);
                    }
                }
            }
            if !progress {
                settled = true;
                break;
            }
            if !self.has_work(now, local) {
                // The pass that would follow finds nothing: its look at the tasks is the
                // fold below.
                break;
            }
        }
        if !settled {
            earliest = self.tasks.iter().fold(NEVER, |e, t| match &t.state {
                State::Run(run) => e.min(t.timer).min(run.abandon_at),
                _ => e.min(t.timer),
            });
        }
        let mut next = match self.engine.poll_timeout() {
            None => NEVER,
            // Mostly the deadline of the last pump: its conversion is kept.
            Some(t) if self.timeout_seen.is_some_and(|(seen, _)| seen == t) => {
                self.timeout_seen.map_or(NEVER, |(_, at)| at.max(now))
            }
            Some(t) => {
                let at = self.true_of(sim, t);
                self.timeout_seen = Some((t, at));
                at.max(now)
            }
        };
        next = next.min(earliest);
        if next < NEVER {
            sim.wake(self, next);
        }
        self.check_owed(sim, local);
    }

    /// Whether another pass of the pump at `now` (its clock reading `local`) would find
    /// anything to do: something in the engine (see `Engine::has_work`), a fired watch not
    /// yet handed over, or a task's timer or abandonment due.
    fn has_work(&self, now: u64, local: Instant) -> bool {
        self.engine.has_work(local)
            || !self.fired.is_empty()
            || self.tasks.iter().any(|t| {
                t.timer <= now || matches!(&t.state, State::Run(run) if run.abandon_at <= now)
            })
    }

    /// Hands fired watches to the tasks that await them; returns whether any was.
    fn hand_fired(&mut self, sim: &mut Sim) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.fired.len() {
            let (id, why) = self.fired[i];
            let task = self
                .tasks
                .iter()
                .position(|t| matches!(&t.state, State::Run(r) if r.wait == Wait::Await(id)));
            match task {
                Some(k) => {
                    self.fired.swap_remove(i);
                    any = true;
                    self.tasks[k].timer = NEVER;
                    self.engine.unwatch(id);
                    if let State::Run(run) = &mut self.tasks[k].state {
                        run.watch = None;
                    }
                    sim.trace.ev(sim.now, 20, u64::from(self.id), id, || {
                        format!("c{} woken: watch {id} ({})", self.id, why.as_str())
                    });
                    self.advance(sim, k, Input::Woken(Some(why)));
                }
                None => i += 1,
            }
        }
        // Firings of watches no task holds any more (taken back) are dropped; those of
        // watches still held wait for their task's wait.
        let tasks = &self.tasks;
        self.fired.retain(|(id, _)| {
            tasks
                .iter()
                .any(|t| matches!(&t.state, State::Run(r) if r.watch == Some(*id)))
        });
        any
    }
}
