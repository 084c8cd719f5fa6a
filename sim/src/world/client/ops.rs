//! What a task does next: its next action (drawn, or from its plan), and the operations it
//! starts, with what the checker records of them.

use std::time::Duration;

use redlock_core::lock::Names;
use redlock_core::op::{self, Input, Retry};

use super::{Action, AnyOp, Client, Held, Role, Run, Sim, State, Wait, Waiter, NEVER};
use crate::check::{Holder, OpKind, OpRecord};

impl Client {
    pub(super) fn on_timer(&mut self, sim: &mut Sim, k: usize) {
        let task = &mut self.tasks[k];
        if matches!(task.role, Role::Keeper(_)) {
            return self.keeper_timer(sim, k);
        }
        match &mut task.state {
            State::Think if task.guard.is_some() => self.guard_work(sim, k),
            State::Think => self.next_action(sim, k),
            State::Using => {
                self.use_lock(sim, k);
                self.tasks[k].state = State::Think;
                self.end_of_op(sim, k);
            }
            State::Run(run) => match run.wait {
                Wait::Timer => self.advance(sim, k, Input::Slept),
                Wait::Await(id) => {
                    self.engine.unwatch(id);
                    run.watch = None;
                    self.advance(sim, k, Input::Woken(None));
                }
                Wait::Round(_) => {}
            },
            State::Done => {}
        }
    }

    /// The task's next operation (or the end).
    pub(super) fn next_action(&mut self, sim: &mut Sim, k: usize) {
        if let Some(plan) = self.tasks[k].plan.as_mut() {
            match plan.pop_front() {
                None => {
                    self.tasks[k].state = State::Done;
                }
                Some(Action::Wait(d)) => {
                    self.tasks[k].timer = sim.now + d.as_nanos() as u64;
                }
                Some(Action::Lock(r, ttl)) => {
                    let names = sim.names(&[r]);
                    let retry = self.retry(sim, Retry::new(&self.cfg));
                    let tries = self.cfg.tries();
                    self.start_acquire(sim, k, names, vec![r], ttl, retry, tries);
                }
                Some(Action::Use(pause)) => {
                    self.tasks[k].state = State::Using;
                    self.tasks[k].timer = sim.now + pause.as_nanos() as u64;
                }
                Some(Action::Unlock) => self.start_release(sim, k),
            }
            return;
        }
        if self.tasks[k].ops_left == 0 {
            self.tasks[k].state = State::Done;
            return;
        }
        self.tasks[k].ops_left -= 1;
        let holding = self.tasks[k].held.is_some();
        let choice = if holding {
            self.beh
                .pick(&[(30, 'u'), (20, 'e'), (40, 'r'), (5, 'x'), (5, 'i')])
        } else {
            self.beh.pick(&[(92, 'a'), (8, 'i')])
        };
        match choice {
            'u' => {
                let pause =
                    if sim.faults.has(crate::world::Fault::ClientPause) && self.beh.chance(300) {
                        let ttl = self.tasks[k]
                            .held
                            .as_ref()
                            .map_or(0, |h| h.lock.ttl().as_nanos() as u64);
                        self.beh.range(0, 2 * ttl)
                    } else {
                        0
                    };
                self.tasks[k].state = State::Using;
                self.tasks[k].timer = sim.now + pause;
            }
            'e' => self.start_extend(sim, k),
            'r' => self.start_release(sim, k),
            'x' => {
                // Forgotten: the lock runs out with its ttl.
                self.tasks[k].held = None;
                self.end_of_op(sim, k);
            }
            'i' => {
                let r = self.beh.below(u64::from(sim.resources)) as u32;
                let name = sim.resource_name(r, self.spec.fenced);
                let op = op::Inspect::new(&name);
                let bound = 2 * self.nt();
                self.start(
                    sim,
                    k,
                    AnyOp::Inspect(op),
                    OpKind::Inspect,
                    bound,
                    Vec::new(),
                    false,
                    (0, None),
                );
            }
            _ => self.random_acquire(sim, k),
        }
    }

    pub(super) fn nt(&self) -> u64 {
        self.cfg.node_timeout().as_nanos() as u64
    }

    pub(super) fn random_acquire(&mut self, sim: &mut Sim, k: usize) {
        // (Drawn only in a world with a semaphore, so that the others run as before.)
        if sim.semaphore.is_some() && self.beh.chance(250) {
            return self.random_permit(sim, k);
        }
        let count = if self.beh.chance(200) && sim.resources > 1 {
            self.beh.range(2, u64::from(sim.resources.min(3))) as u32
        } else {
            1
        };
        let mut res: Vec<u32> = Vec::new();
        while res.len() < count as usize {
            let r = self.beh.below(u64::from(sim.resources)) as u32;
            if !res.contains(&r) {
                res.push(r);
            }
        }
        let ids: Vec<u32> = res
            .iter()
            .map(|r| sim.resource_id(*r, self.spec.fenced))
            .collect();
        let names = sim.names_of(&res, self.spec.fenced);
        let ttl = Duration::from_nanos(self.beh.range(self.spec.ttl_min, self.spec.ttl_max));
        let mut ttl = Duration::from_millis(ttl.as_millis() as u64);
        let kind = self.beh.pick(&[(50, 'l'), (25, 't'), (25, 'w')]);
        if kind == 'l' && count == 1 {
            self.pending_guard = self.draw_guard(&mut ttl);
        }
        let tries = self.cfg.tries();
        let (retry, tries) = match kind {
            't' => (Retry::once(), 1),
            'w' => {
                let max_wait = Duration::from_nanos(self.beh.range(0, self.spec.ttl_max * 2));
                let now = self.local(sim);
                let retry = self.retry(sim, Retry::within(&self.cfg, max_wait, now));
                self.start_acquire_within(sim, k, names, ids, ttl, retry, max_wait);
                return;
            }
            _ => (self.retry(sim, Retry::new(&self.cfg)), tries),
        };
        self.start_acquire(sim, k, names, ids, ttl, retry, tries);
    }

    /// A permit of the world's semaphore: taken with `lock`'s, `try_lock`'s or
    /// `lock_within`'s policy, sometimes kept alive by a guard, as a lock is.
    fn random_permit(&mut self, sim: &mut Sim, k: usize) {
        let ids = sim.slot_ids();
        let ttl = Duration::from_nanos(self.beh.range(self.spec.ttl_min, self.spec.ttl_max));
        let mut ttl = Duration::from_millis(ttl.as_millis() as u64);
        let kind = self.beh.pick(&[(50, 'l'), (25, 't'), (25, 'w')]);
        if kind == 'l' {
            self.pending_guard = self.draw_guard(&mut ttl);
        }
        self.pending_permit = true;
        let names = redlock_core::lock::Names::new();
        match kind {
            't' => self.start_acquire(sim, k, names, ids, ttl, Retry::once(), 1),
            'w' => {
                let max_wait = Duration::from_nanos(self.beh.range(0, self.spec.ttl_max * 2));
                let now = self.local(sim);
                let retry = self.retry(sim, Retry::within(&self.cfg, max_wait, now));
                self.start_acquire_within(sim, k, names, ids, ttl, retry, max_wait);
            }
            _ => {
                let retry = self.retry(sim, Retry::new(&self.cfg));
                let tries = self.cfg.tries();
                self.start_acquire(sim, k, names, ids, ttl, retry, tries);
            }
        }
    }

    /// The retry policy the driver runs a waiter with: the caller's, or (the negative control
    /// `waiter-gives-up`) a single try.
    pub(super) fn retry(&self, sim: &Sim, retry: Retry) -> Retry {
        if sim.negative == Some(crate::world::Negative::WaiterGivesUp) {
            Retry::once()
        } else {
            retry
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_acquire(
        &mut self,
        sim: &mut Sim,
        k: usize,
        names: Names,
        ids: Vec<u32>,
        ttl: Duration,
        retry: Retry,
        tries: u32,
    ) {
        let nt = self.nt();
        let jitter = op::WAKE_JITTER.as_nanos() as u64;
        let delay = self.cfg.retry_delay().as_nanos() as u64;
        // Fair mode: between tries the wait script's round, the ticket's move and a wait of up
        // to `FAIR_WAIT_LEASES` claim leases, within which a lapse may read the line again (a
        // wait round and a ticket's move, once per wait); at the end, the leave script's round.
        let (gap, leave) = match self.cfg.fair() {
            Some(f) => (4 * nt + super::fair_wait(f).max(delay) + jitter, nt),
            None => (nt + delay + jitter, 0),
        };
        // A try's rounds: acquire, write-back or release; a permit's whose votes split, its
        // release, its read of the slots, its second round and that one's release.
        let per_try = if self.pending_permit { 5 } else { 3 };
        let bound =
            u64::from(tries) * per_try * nt + u64::from(tries.saturating_sub(1)) * gap + leave;
        let waiter = (tries > 1).then_some(Waiter::Tries(tries));
        self.begin_acquire(sim, k, names, ids, ttl, retry, bound, waiter);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_acquire_within(
        &mut self,
        sim: &mut Sim,
        k: usize,
        names: Names,
        ids: Vec<u32>,
        ttl: Duration,
        retry: Retry,
        max_wait: Duration,
    ) {
        // Fair mode: the ticket's move after the last wait, a lapse's second read of the line
        // and its ticket's move, and the leave script's round.
        let rounds = if self.cfg.fair().is_some() { 8 } else { 4 };
        // (A permit's last try may read the slots and ask again: three rounds more.)
        let rounds = rounds + if self.pending_permit { 3 } else { 0 };
        let bound =
            max_wait.as_nanos() as u64 + rounds * self.nt() + op::WAKE_JITTER.as_nanos() as u64;
        let waiter = Waiter::Until(self.after(sim, max_wait.as_nanos() as u64));
        self.begin_acquire(sim, k, names, ids, ttl, retry, bound, Some(waiter));
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin_acquire(
        &mut self,
        sim: &mut Sim,
        k: usize,
        names: Names,
        ids: Vec<u32>,
        ttl: Duration,
        retry: Retry,
        bound: u64,
        waiter: Option<Waiter>,
    ) {
        let live =
            self.spec.live && sim.is_free(&ids) && sim.connects_within(self.cfg().node_timeout());
        let ttl_ns = ttl.as_nanos() as u64;
        let op = match (std::mem::take(&mut self.pending_permit), &sim.semaphore) {
            (true, Some(sem)) => op::Acquire::permit(sem, ttl, retry),
            _ => op::Acquire::new(names, ttl, retry),
        };
        self.start(
            sim,
            k,
            AnyOp::Acquire(Box::new(op)),
            OpKind::Acquire,
            bound,
            ids,
            live,
            (ttl_ns, waiter),
        );
    }

    pub(super) fn start_extend(&mut self, sim: &mut Sim, k: usize) {
        let Some(held) = self.tasks[k].held.take() else {
            return self.end_of_op(sim, k);
        };
        let ttl =
            Duration::from_millis(self.beh.range(self.spec.ttl_min, self.spec.ttl_max) / 1_000_000);
        // The cap the extension puts on the validity before its round goes out, read from the
        // core's own rule on a copy: the window ends there unless the extension succeeds.
        let mut copy = held.lock.clone();
        if op::begin_extend(&self.cfg, &mut copy, ttl, self.local(sim)).is_ok() {
            let cap = self.true_of(sim, copy.valid_until());
            for &i in &held.wins {
                let w = &mut sim.hist.windows[i];
                w.until = w.until.min(cap);
                w.valid = w.valid.min(cap);
            }
        }
        let Held {
            lock,
            id,
            wins,
            res,
        } = held;
        let op = op::Extend::new(lock, ttl);
        let bound = self.nt();
        self.meta = Some((id, wins, res.clone()));
        let ttl_ns = ttl.as_nanos() as u64;
        self.start(
            sim,
            k,
            AnyOp::Extend(op),
            OpKind::Extend,
            bound,
            res,
            false,
            (ttl_ns, None),
        );
    }

    pub(super) fn start_release(&mut self, sim: &mut Sim, k: usize) {
        let Some(held) = self.tasks[k].held.take() else {
            return self.end_of_op(sim, k);
        };
        // The window ends as the release is sent.
        for &i in &held.wins {
            let w = &mut sim.hist.windows[i];
            w.until = w.until.min(sim.now);
        }
        let (id, sent) = (held.id, sim.now);
        if self.cfg.fair().is_some() {
            let what = crate::fairness::What::Released;
            let res = super::step::leaving(sim, &self.engine, self.spec.fenced, &held.res);
            sim.fair.note(sim.now, self.id, &res, what);
        }
        let op = op::Release::new(held.lock);
        let bound = self.nt();
        self.start(
            sim,
            k,
            AnyOp::Release(op),
            OpKind::Release,
            bound,
            held.res,
            false,
            (0, None),
        );
        // For the fairness judge the lock ends as its release is sent, if the release
        // succeeds; one that fails leaves its keys to run out (a release refused everywhere,
        // say, under `Scripts::Native` against servers without native commands).
        sim.fair.released.push((id, sent));
        if let State::Run(run) = &mut self.tasks[k].state {
            run.releasing = Some(id);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &mut self,
        sim: &mut Sim,
        k: usize,
        op: AnyOp,
        kind: OpKind,
        bound: u64,
        res: Vec<u32>,
        live: bool,
        (ttl, waiter): (u64, Option<Waiter>),
    ) {
        let holder = Holder {
            client: self.id,
            task: k as u32,
        };
        sim.hist.ops.push(OpRecord {
            holder,
            kind,
            start: sim.now,
            // On its clock; a microsecond more for the rounding of its readings, a nanosecond
            // per round, to the run's time.
            bound: self.after(sim, bound) + 1_000,
            end: None,
            ends: 0,
            abandoned: false,
        });
        let rec = sim.hist.ops.len() - 1;
        sim.trace.ev(
            sim.now,
            1,
            u64::from(self.id) << 8 | k as u64,
            kind as u64,
            || {
                format!(
                    "c{}.{k} starts {} #{rec} (bound {:.3} ms)",
                    self.id,
                    kind.name(),
                    bound as f64 / 1e6
                )
            },
        );
        sim.touch(&res, self.id, k as u32, 1);
        if kind == OpKind::Acquire {
            sim.fair.acquisitions.push(crate::fairness::Acq {
                op: rec,
                client: self.id,
                resources: res.clone(),
                joined: None,
                troubled: false,
            });
        }
        // Fair mode: a release may reserve the resource for the line's head, and any
        // acquisition's scripts (the wait, a failed try's release, the leave) too, for the
        // claim lease.
        let claim = self.cfg.fair().map_or(0, |f| f.claim_ms * 1_000_000);
        let sets_keys = matches!(kind, OpKind::Acquire | OpKind::Extend)
            || (claim > 0 && kind == OpKind::Release);
        let ttl = if kind == OpKind::Extend {
            ttl
        } else {
            ttl.max(claim)
        };
        if sets_keys {
            sim.setting(&res, true, ttl);
        }
        let abandon_at = if kind == OpKind::Acquire && self.beh.chance(20) {
            sim.now + self.beh.range(0, 3 * self.nt())
        } else {
            NEVER
        };
        self.tasks[k].state = State::Run(Box::new(Run {
            op,
            wait: Wait::Timer,
            rec,
            watch: None,
            t1: sim.now,
            live,
            first_round: true,
            res,
            abandon_at,
            meta: self.meta.take(),
            guarded: self.pending_guard.take(),
            sets_keys,
            ttl,
            waiter,
            tries: 0,
            try_at: 0,
            acquire_round: false,
            alone_at_try: false,
            acquire_won: false,
            won_at: 0,
            in_line: false,
            joined: false,
            releasing: None,
        }));
        self.advance(sim, k, Input::Start);
    }
}
