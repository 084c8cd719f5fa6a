//! Guarded locks, kept alive the way the drivers' guards keep them (`src/drivers/tokio/guard.rs`,
//! `src/drivers/blocking/guard.rs`), with the core's sans-I/O plan
//! (`redlock_core::keepalive::{plan, overdue, loss_deadline}`) and its extensions run through
//! `op::Extend`, as the drivers run them.
//!
//! A guarded lock has two tasks: its owner, which works (writes to the store, asking the guard
//! before each write whether the lock is lost) and then releases the guard; and a keeper (the
//! async client's keep-alive task, the blocking client's keeper thread), which sleeps until the
//! plan says, extends, and reports loss. As both guards do, loss is known by the loss deadline
//! whatever the keeper is doing: the async keeper races its extension against the deadline and
//! gives it up there; the blocking keeper lets its extension run, and the guard says the lock
//! is lost from the deadline on by the clock.
//!
//! What the checker gets: the lock's windows (the acquisition's, then one per extension
//! confirmed in time, each ending at the validity the core reported) and a [`check::Guard`]
//! with the loss margin, when loss was first reported, and when the guard was let go.

use std::time::{Duration, Instant};

use redlock_core::keepalive::{self, KeepAlive, Loss, Step};
use redlock_core::op;
use redlock_core::Lock;

use super::{AnyOp, Client, Role, Sim, State, Window, NEVER};
use crate::check::{self, Holder, OpKind};
use crate::world::Negative;

/// Which driver's guard is modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `LockGuard`: the extension raced against the loss deadline, given up there.
    Async,
    /// `BlockingGuard`: the extension run to its end; a late one is not stored.
    Blocking,
}

/// How a guarded lock is kept: drawn when its acquisition starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    policy: KeepAlive,
    style: Style,
    writes: u32,
}

/// A guard, held by its owner task.
#[derive(Debug)]
pub(crate) struct Guard {
    spec: Spec,
    /// When it started, on the holder's clock.
    started: Instant,
    extensions: u32,
    /// Its keeper task.
    keeper: usize,
    /// Its record in the history.
    record: usize,
    /// Whether loss has been reported.
    lost: bool,
    /// The deadline the extension in flight races, on the holder's clock.
    racing: Option<Instant>,
    writes_left: u32,
}

impl Client {
    /// Whether the acquisition about to start is guarded, and how: only guard clients take
    /// guarded locks, on one resource with retries (`lock_guarded`), with a ttl keep-alive can
    /// work with (the ttl raised until `check_ttl` takes it, as a caller would).
    pub(super) fn draw_guard(&mut self, ttl: &mut Duration) -> Option<Spec> {
        if !self.guards || !self.gbeh.chance(400) {
            return None;
        }
        for _ in 0..16 {
            if keepalive::check_ttl(&self.cfg, *ttl).is_ok() {
                break;
            }
            *ttl = ttl.saturating_mul(2);
        }
        keepalive::check_ttl(&self.cfg, *ttl).ok()?;
        let threshold = self
            .gbeh
            .pick(&[(40, 0.5), (20, 0.25), (20, 0.8), (20, 0.1)]);
        let policy = KeepAlive::default().extend_when_left(threshold);
        let policy = match self.gbeh.pick(&[(70, 'd'), (15, 'n'), (15, 'h')]) {
            'n' => policy.max_extensions(self.gbeh.range(0, 3) as u32),
            'h' => policy.max_hold(Duration::from_nanos(
                self.gbeh.range(0, 2 * ttl.as_nanos() as u64),
            )),
            _ => policy,
        };
        Some(Spec {
            policy,
            style: if self.gbeh.chance(500) {
                Style::Async
            } else {
                Style::Blocking
            },
            writes: self.gbeh.range(1, 6) as u32,
        })
    }

    /// Task `k`'s guarded acquisition succeeded (its lock is held): the guard starts, and its
    /// keeper with it.
    pub(super) fn start_guard(&mut self, sim: &mut Sim, k: usize, spec: Spec) {
        let Some(held) = &self.tasks[k].held else {
            return;
        };
        let margin = keepalive::loss_margin(held.lock.ttl());
        sim.hist.guards.push(check::Guard {
            lock: held.id,
            holder: Holder {
                client: self.id,
                task: k as u32,
            },
            started: sim.now,
            margin: self.true_duration(margin.as_nanos() as u64),
            lost_at: None,
            loss: String::new(),
            ended_at: None,
        });
        let record = sim.hist.guards.len() - 1;
        // A keeper that is done and whose guard is gone is free to keep another.
        let free = |kk: usize, t: &super::Task| match t.role {
            Role::Keeper(o) => {
                matches!(t.state, State::Done)
                    && self.tasks[o].guard.as_ref().is_none_or(|g| g.keeper != kk)
            }
            Role::Worker => false,
        };
        let keeper = match (0..self.tasks.len()).find(|&kk| free(kk, &self.tasks[kk])) {
            Some(kk) => kk,
            None => {
                self.tasks.push(super::Task::keeper());
                self.tasks.len() - 1
            }
        };
        self.tasks[keeper].role = Role::Keeper(k);
        self.tasks[keeper].state = State::Think;
        self.tasks[keeper].timer = sim.now;
        self.tasks[k].guard = Some(Box::new(Guard {
            spec,
            started: self.local(sim),
            extensions: 0,
            keeper,
            record,
            lost: false,
            racing: None,
            writes_left: spec.writes,
        }));
        self.tasks[k].state = State::Think;
        self.tasks[k].timer = sim.now;
        sim.trace
            .ev(sim.now, 6, u64::from(self.id) << 8 | k as u64, 0, || {
                format!(
                    "c{}.{k} guards its lock ({:?}, {:?}), keeper task {keeper}",
                    self.id, spec.style, spec.policy
                )
            });
    }

    /// The latest moment loss of `lock` may be reported: the core's, or (the negative control
    /// `guard-late-loss`) the end of the validity itself.
    fn loss_deadline(&self, sim: &Sim, lock: &Lock) -> Instant {
        if sim.negative == Some(Negative::GuardLateLoss) {
            lock.valid_until()
        } else {
            keepalive::loss_deadline(lock)
        }
    }

    /// Whether task `k`'s guard says the lock is lost now: reported, or its deadline passed
    /// (the guards' `loss()`, which reads the clock too).
    fn guard_lost(&self, sim: &Sim, k: usize) -> bool {
        let (Some(g), Some(held)) = (&self.tasks[k].guard, &self.tasks[k].held) else {
            return true;
        };
        g.lost || self.local(sim) >= self.loss_deadline(sim, &held.lock)
    }

    /// Task `k`'s guard reports loss (the first report counts).
    fn report(&mut self, sim: &mut Sim, k: usize, loss: &Loss) {
        let Some(g) = self.tasks[k].guard.as_mut() else {
            return;
        };
        g.lost = true;
        let rec = &mut sim.hist.guards[g.record];
        if rec.lost_at.is_none() {
            rec.lost_at = Some(sim.now);
            rec.loss = format!("{loss}");
            // With no fault, a guard whose policy has no limit left keeps its lock.
            let unexpected = !matches!(loss, Loss::Expired);
            if unexpected && self.spec.live && self.spec.expiry_live {
                sim.hist.note(
                    "guard-lost",
                    sim.now,
                    format!(
                        "c{}.{k}: a guard lost its lock with no fault: {loss}",
                        self.id
                    ),
                );
            }
        }
        sim.trace
            .ev(sim.now, 7, u64::from(self.id) << 8 | k as u64, 0, || {
                format!("c{}.{k}'s guard reports loss: {loss}", self.id)
            });
    }

    /// Owner task `k`'s timer: the next step of its work, asking the guard first.
    pub(super) fn guard_work(&mut self, sim: &mut Sim, k: usize) {
        if self.guard_lost(sim, k) {
            if let (Some(g), Some(held)) = (&self.tasks[k].guard, &self.tasks[k].held) {
                if !g.lost {
                    // Lost by the clock: what the deadline passing means.
                    let loss = keepalive::overdue(
                        &held.lock,
                        &g.spec.policy,
                        g.started,
                        g.extensions,
                        self.cfg.node_timeout(),
                        self.local(sim),
                    );
                    self.report(sim, k, &loss);
                }
            }
            return self.release_guard(sim, k);
        }
        let Some(g) = self.tasks[k].guard.as_mut() else {
            return;
        };
        if g.writes_left == 0 {
            return self.release_guard(sim, k);
        }
        g.writes_left -= 1;
        self.use_lock(sim, k);
        let ttl = self.tasks[k]
            .held
            .as_ref()
            .map_or(0, |h| h.lock.ttl().as_nanos() as u64);
        self.tasks[k].timer = sim.now + self.gbeh.range(0, ttl);
    }

    /// Owner task `k` lets its guard go (released, or dropped once lost): the keeper stops
    /// (an extension in flight is given up), and the lock is released.
    fn release_guard(&mut self, sim: &mut Sim, k: usize) {
        let Some(g) = self.tasks[k].guard.take() else {
            return;
        };
        let rec = &mut sim.hist.guards[g.record];
        rec.ended_at = Some(sim.now);
        if self.tasks[g.keeper].role == Role::Keeper(k) {
            self.stop_keeper(sim, g.keeper);
        }
        self.start_release(sim, k);
    }

    /// The keeper task `kk` stops; an extension it has in flight is given up.
    fn stop_keeper(&mut self, sim: &mut Sim, kk: usize) {
        self.tasks[kk].timer = NEVER;
        let state = std::mem::replace(&mut self.tasks[kk].state, State::Done);
        if let State::Run(run) = state {
            self.give_up(sim, kk, *run);
        }
    }

    /// An extension the keeper `kk` gives up (the async guard's race lost, or the guard
    /// released): recorded as abandoned; returns the lock as the extension left it.
    fn give_up(&mut self, sim: &mut Sim, kk: usize, run: super::Run) -> Option<Lock> {
        sim.touch(&run.res, self.id, kk as u32, -1);
        if run.sets_keys {
            sim.setting(&run.res, false, run.ttl);
        }
        let rec = &mut sim.hist.ops[run.rec];
        rec.ends += 1;
        rec.abandoned = true;
        if rec.end.is_none() {
            rec.end = Some(sim.now);
        }
        sim.trace.ev(sim.now, 4, run.rec as u64, 0, || {
            format!("c{}.{kk} gives up extension #{}", self.id, run.rec)
        });
        match run.op {
            AnyOp::Extend(o) => Some(o.into_parts().1),
            _ => None,
        }
    }

    /// Keeper task `kk`'s timer: the next step of the plan, or, with an extension in flight,
    /// the loss deadline.
    pub(super) fn keeper_timer(&mut self, sim: &mut Sim, kk: usize) {
        let Role::Keeper(k) = self.tasks[kk].role else {
            return;
        };
        let live = self.tasks[k].guard.as_ref().is_some_and(|g| !g.lost);
        if !live || self.tasks[k].held.is_none() {
            return self.stop_keeper(sim, kk);
        }
        if matches!(self.tasks[kk].state, State::Run(_)) {
            return self.keeper_deadline(sim, kk, k);
        }
        let (Some(g), Some(held)) = (&self.tasks[k].guard, &self.tasks[k].held) else {
            return;
        };
        let now = self.local(sim);
        let plan = keepalive::plan(
            &held.lock,
            &g.spec.policy,
            g.started,
            g.extensions,
            self.cfg.node_timeout(),
            now,
        );
        let deadline = self.loss_deadline(sim, &held.lock);
        sim.trace
            .ev(sim.now, 8, u64::from(self.id) << 8 | kk as u64, 0, || {
                format!(
                    "c{}.{kk} keeps c{}.{k}'s lock: {:?}",
                    self.id, self.id, plan.step
                )
            });
        match plan.step {
            Step::Expire if now >= deadline => {
                self.report(sim, k, &Loss::Expired);
                self.stop_keeper(sim, kk);
            }
            Step::Expire => self.tasks[kk].timer = self.true_of(sim, deadline),
            Step::Wait(t) => self.tasks[kk].timer = self.true_of(sim, t),
            Step::Extend(t) if now < t => self.tasks[kk].timer = self.true_of(sim, t),
            Step::Extend(_) => self.extend_guarded(sim, kk, k, deadline),
        }
    }

    /// The keeper `kk` extends owner `k`'s lock to its ttl, racing `deadline`.
    fn extend_guarded(&mut self, sim: &mut Sim, kk: usize, k: usize, deadline: Instant) {
        let Some(held) = &self.tasks[k].held else {
            return;
        };
        let lock = held.lock.clone();
        let ttl = lock.ttl();
        // The cap the extension puts on the validity, as `start_extend` reads it.
        let mut copy = lock.clone();
        if op::begin_extend(&self.cfg, &mut copy, ttl, self.local(sim)).is_ok() {
            let cap = self.true_of(sim, copy.valid_until());
            for &i in &held.wins {
                let w: &mut Window = &mut sim.hist.windows[i];
                w.until = w.until.min(cap);
                w.valid = w.valid.min(cap);
            }
        }
        let res = held.res.clone();
        if let Some(g) = self.tasks[k].guard.as_mut() {
            g.racing = Some(deadline);
        }
        self.tasks[kk].timer = self.true_of(sim, deadline);
        let bound = self.cfg.node_timeout().as_nanos() as u64;
        let ttl_ns = ttl.as_nanos() as u64;
        self.start(
            sim,
            kk,
            AnyOp::Extend(op::Extend::new(lock, ttl)),
            OpKind::Extend,
            bound,
            res,
            false,
            (ttl_ns, None),
        );
    }

    /// The loss deadline passed with keeper `kk`'s extension of owner `k`'s lock in flight.
    fn keeper_deadline(&mut self, sim: &mut Sim, kk: usize, k: usize) {
        let Some(style) = self.tasks[k].guard.as_ref().map(|g| g.spec.style) else {
            return;
        };
        match style {
            Style::Async => {
                // The race is lost: the extension is given up, the attempt's validity is what
                // the lock is worth, and the loss is reported.
                let state = std::mem::replace(&mut self.tasks[kk].state, State::Done);
                self.tasks[kk].timer = NEVER;
                if let State::Run(run) = state {
                    if let Some(attempt) = self.give_up(sim, kk, *run) {
                        self.store(sim, k, attempt, false);
                    }
                }
                self.report(sim, k, &Loss::ExtendTooSlow);
            }
            Style::Blocking => {
                // The keeper waits for its extension; the guard says lost by the clock.
                self.tasks[kk].timer = NEVER;
                let (Some(g), Some(held)) = (&self.tasks[k].guard, &self.tasks[k].held) else {
                    return;
                };
                if self.local(sim) >= self.loss_deadline(sim, &held.lock) {
                    let loss = keepalive::overdue(
                        &held.lock,
                        &g.spec.policy,
                        g.started,
                        g.extensions,
                        self.cfg.node_timeout(),
                        self.local(sim),
                    );
                    self.report(sim, k, &loss);
                }
            }
        }
    }

    /// Stores `lock` as owner `k`'s (what the guard's lock is worth now); `confirmed`: an
    /// extension confirmed in time, which opens a window to its new validity. Otherwise the
    /// windows are capped at its validity.
    fn store(&mut self, sim: &mut Sim, k: usize, lock: Lock, confirmed: bool) {
        let until = self.true_of(sim, lock.valid_until());
        let Some(held) = self.tasks[k].held.as_mut() else {
            return;
        };
        if confirmed {
            sim.hist.windows.push(Window {
                lock: held.id,
                holder: Holder {
                    client: self.id,
                    task: k as u32,
                },
                resources: held.res.clone(),
                from: sim.now,
                until,
                valid: until,
                token: lock.fencing_token(),
            });
            held.wins.push(sim.hist.windows.len() - 1);
        } else {
            for &i in &held.wins {
                let w = &mut sim.hist.windows[i];
                w.until = w.until.min(until);
                w.valid = w.valid.min(until);
            }
        }
        held.lock = lock;
    }

    /// Keeper `kk`'s extension ended (`result`, the lock as it left it): stored as the guard
    /// it models stores it, loss reported if it failed or came too late; the keeper plans
    /// again, or stops. Returns the outcome in words.
    pub(super) fn keeper_extended(
        &mut self,
        sim: &mut Sim,
        kk: usize,
        o: op::Extend<Lock>,
    ) -> String {
        let (result, attempt) = o.into_parts();
        let outcome = match &result {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("{e}"),
        };
        let Role::Keeper(k) = self.tasks[kk].role else {
            return outcome;
        };
        let now = self.local(sim);
        let Some(g) = self.tasks[k].guard.as_mut() else {
            self.tasks[kk].state = State::Done;
            return outcome;
        };
        let deadline = g.racing.take().unwrap_or(now);
        let late = result.is_ok() && now >= deadline;
        let style = g.spec.style;
        if result.is_ok() && !late {
            g.extensions += 1;
        }
        if style == Style::Async || !late {
            self.store(sim, k, attempt, result.is_ok() && !late);
        }
        match result {
            Ok(()) if !late => {
                self.tasks[kk].state = State::Think;
                self.tasks[kk].timer = sim.now;
            }
            Ok(()) => {
                self.report(sim, k, &Loss::ExtendTooSlow);
                self.tasks[kk].state = State::Done;
                self.tasks[kk].timer = NEVER;
            }
            Err(e) => {
                self.report(sim, k, &Loss::ExtendFailed(e));
                self.tasks[kk].state = State::Done;
                self.tasks[kk].timer = NEVER;
            }
        }
        outcome
    }
}
