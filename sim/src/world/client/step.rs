//! An operation run as a driver runs it: stepped until it waits, its rounds submitted to the
//! engine, and its end (a result, or its caller gone) recorded for the checker.

use redlock_core::command::Expect;
use redlock_core::op::{Cx, Input, Operation, Step};
use redlock_core::Error;

use super::{AnyOp, Client, Held, Role, Sim, State, Wait, Waiter};
use crate::check::{Holder, Window, Write};
use crate::fairness::What;

impl Client {
    /// Steps task `k`'s operation with `input` until it waits for something or is done.
    pub(super) fn advance(&mut self, sim: &mut Sim, k: usize, mut input: Input) {
        loop {
            let State::Run(run) = &mut self.tasks[k].state else {
                return;
            };
            let clock = self.clock;
            let now = clock.local(sim);
            let mut cx = Cx {
                now,
                rng: &mut self.rng,
                events: &mut self.events,
            };
            let cfg = &self.cfg;
            let acquisition = matches!(run.op, AnyOp::Acquire(_));
            let step = match &mut run.op {
                AnyOp::Acquire(o) => o.step(input, cfg, &mut cx),
                AnyOp::Extend(o) => o.step(input, cfg, &mut cx),
                AnyOp::Release(o) => o.step(input, cfg, &mut cx),
                AnyOp::Inspect(o) => o.step(input, cfg, &mut cx),
            };
            let next = match step {
                Step::Round(cmd, until) => {
                    let acquiring = matches!(
                        cmd.expect(),
                        Expect::Set
                            | Expect::Acquired
                            | Expect::Fenced
                            | Expect::Entered
                            | Expect::EnteredFenced
                            | Expect::Permit
                    );
                    if acquiring {
                        if run.tries > 0 && sim.now > run.try_at + self.gap {
                            sim.hist.note(
                                "retry-gap",
                                sim.now,
                                format!(
                                    "c{}.{k}: a try began {:.3} ms after the one before (at {:.3} ms); the most is {:.3} ms",
                                    self.id,
                                    (sim.now - run.try_at) as f64 / 1e6,
                                    run.try_at as f64 / 1e6,
                                    self.gap as f64 / 1e6
                                ),
                            );
                        }
                        run.tries += 1;
                        run.try_at = sim.now;
                        run.alone_at_try = sim.sole_setter(&run.res);
                    }
                    // The negative control `no-release`: a failed try's release is never sent
                    // (what a native-mode unlock that did nothing on some servers did): its
                    // round is taken as failed at once.
                    let release = acquisition
                        && cmd.expect() == Expect::Script
                        && !(run.acquire_won && self.cfg.fencing_key().is_some());
                    run.acquire_round = acquiring;
                    run.acquire_won = false;
                    if self.cfg.fair().is_some() {
                        // Fair mode: what the round does to the client's place in line. (A
                        // failed try's release takes the client out of the lines before it
                        // waits in one; after, it is a failed claim's, which keeps its place.)
                        let what = match cmd.expect() {
                            // (The enter script joins the line where it is refused; a try
                            // that wins leaves no wait to be noted.)
                            Expect::Wait | Expect::Entered | Expect::EnteredFenced => {
                                run.in_line = true;
                                None
                            }
                            Expect::Leave if cmd.is_script() => Some(What::Left),
                            _ if release && !run.in_line => Some(What::Released),
                            _ => None,
                        };
                        if let Some(what) = what {
                            let res = leaving(sim, &self.engine, self.spec.fenced, &run.res);
                            sim.fair.note(sim.now, self.id, &res, what);
                        }
                    }
                    if release && sim.negative == Some(crate::world::Negative::NoRelease) {
                        self.events.clear();
                        input = Input::Round(Err(Error::Aborted));
                        continue;
                    }
                    let seq = self.seq;
                    self.seq = self.seq.wrapping_add(1);
                    let t1 = if sim.negative == Some(crate::world::Negative::StaleTime) {
                        // The negative control: the time the operation started, not now.
                        clock.local_at(sim, sim.hist.ops[run.rec].start)
                    } else {
                        now
                    };
                    self.engine
                        .submit(&cmd.watched_by(run.watch), until, t1, seq);
                    self.submitted = true;
                    self.engine.note_batch(1);
                    self.outstanding.push((seq, k as u32));
                    run.t1 = sim.now;
                    run.wait = Wait::Round(seq);
                    None
                }
                Step::Sleep(d) | Step::Jitter(d) => {
                    run.wait = Wait::Timer;
                    self.tasks[k].timer = clock.after(sim, stretch(sim, d.as_nanos() as u64));
                    None
                }
                Step::Watch(key) => {
                    let id = self.next_watch;
                    self.next_watch += 1;
                    self.engine.watch(id, key.into());
                    run.watch = Some(id);
                    Some(Input::Watching)
                }
                Step::Await(deadline) => {
                    if run.in_line && deadline.is_some() {
                        // A wait in line begins: its read has reached every master, so the
                        // waiter stands in the line. The first time, it has joined it; later,
                        // its client's place goes on (the judge merges the notes), or begins
                        // again where a grant to another waiter of the client ended it (the
                        // client's turn is spent, and the masters put it back at the end of
                        // the line at this read). (An await with no deadline only takes a
                        // watch back: a won try's early one.)
                        if !run.joined {
                            run.joined = true;
                            if let Some(a) = sim.fair.acq_mut(run.rec) {
                                a.joined = Some(sim.now);
                            }
                        }
                        sim.fair
                            .note(sim.now, self.id, &run.res, What::Joined(run.rec));
                    }
                    match (run.watch, deadline) {
                        (Some(id), Some(deadline)) => {
                            if let Some(i) = self.fired.iter().position(|(w, _)| *w == id) {
                                let (_, why) = self.fired.swap_remove(i);
                                self.engine.unwatch(id);
                                run.watch = None;
                                Some(Input::Woken(Some(why)))
                            } else {
                                run.wait = Wait::Await(id);
                                let wait = deadline.saturating_duration_since(now);
                                let wait = stretch(sim, wait.as_nanos() as u64);
                                self.tasks[k].timer = clock.after(sim, wait);
                                None
                            }
                        }
                        (id, _) => {
                            if let Some(id) = id {
                                self.engine.unwatch(id);
                            }
                            run.watch = None;
                            Some(Input::Woken(None))
                        }
                    }
                }
                Step::Done => {
                    self.events.clear();
                    self.finish(sim, k);
                    return;
                }
            };
            self.events.clear();
            match next {
                Some(i) => input = i,
                None => return,
            }
        }
    }

    /// Task `k`'s operation said it is done: its result, recorded.
    pub(super) fn finish(&mut self, sim: &mut Sim, k: usize) {
        let State::Run(run) = std::mem::replace(&mut self.tasks[k].state, State::Think) else {
            return;
        };
        let run = *run;
        if let Some(id) = run.watch {
            self.engine.unwatch(id);
        }
        sim.touch(&run.res, self.id, k as u32, -1);
        if run.sets_keys {
            sim.setting(&run.res, false, run.ttl);
        }
        let holder = Holder {
            client: self.id,
            task: k as u32,
        };
        let keeper = matches!(self.tasks[k].role, Role::Keeper(_));
        let mut guarded = None;
        let outcome: Outcome = match run.op {
            AnyOp::Extend(o) if keeper => Outcome::Words(self.keeper_extended(sim, k, o)),
            AnyOp::Acquire(o) => match o.finish() {
                Ok(lock) => {
                    let id = sim.next_lock();
                    let until = self.true_of(sim, lock.valid_until());
                    let res: Vec<u32> = lock
                        .resources()
                        .map(|name| sim.resource_id_of(name))
                        .collect();
                    sim.check_granted(self, &lock, sim.hist.ops[run.rec].start);
                    sim.hist.windows.push(Window {
                        lock: id,
                        holder,
                        resources: res.clone(),
                        from: sim.now,
                        until,
                        valid: until,
                        token: lock.fencing_token(),
                    });
                    let wins = vec![sim.hist.windows.len() - 1];
                    if run.won_at > 0 {
                        sim.fair.taken.push((id, run.won_at));
                    }
                    sim.trace.ev(sim.now, 2, id, until, || {
                        format!(
                            "c{}.{k} holds lock {id} on {:?} until {:.3} ms, token {:?}, granted by {:?}",
                            self.id,
                            lock.resources().collect::<Vec<_>>(),
                            until as f64 / 1e6,
                            lock.fencing_token(),
                            lock.granted_by().collect::<Vec<_>>()
                        )
                    });
                    self.tasks[k].held = Some(Held {
                        lock,
                        id,
                        wins,
                        res,
                    });
                    guarded = run.guarded;
                    Outcome::Ok
                }
                Err(e) => {
                    self.patience(sim, k, run.waiter, run.tries, &e);
                    Outcome::Failed(e)
                }
            },
            AnyOp::Extend(o) => {
                let (result, lock) = o.into_parts();
                if let Some((id, mut wins, res)) = run.meta {
                    let until = self.true_of(sim, lock.valid_until());
                    match &result {
                        Ok(()) => {
                            sim.hist.windows.push(Window {
                                lock: id,
                                holder,
                                resources: res.clone(),
                                from: sim.now,
                                until,
                                valid: until,
                                token: lock.fencing_token(),
                            });
                            wins.push(sim.hist.windows.len() - 1);
                        }
                        Err(_) => {
                            for &i in &wins {
                                let w = &mut sim.hist.windows[i];
                                w.until = w.until.min(until);
                            }
                        }
                    }
                    self.tasks[k].held = Some(Held {
                        lock,
                        id,
                        wins,
                        res,
                    });
                }
                match result {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::Failed(e),
                }
            }
            AnyOp::Release(o) => match o.finish() {
                Ok(()) => {
                    if let Some(id) = run.releasing {
                        sim.fair.landed.push((id, sim.now));
                    }
                    Outcome::Ok
                }
                Err(e) => {
                    // The lock was not released: for the fairness judge it runs out.
                    if let Some(id) = run.releasing {
                        sim.fair.released.retain(|(lock, _)| *lock != id);
                    }
                    Outcome::Failed(e)
                }
            },
            AnyOp::Inspect(o) => match o.finish() {
                Ok(_) => Outcome::Ok,
                Err(e) => Outcome::Failed(e),
            },
        };
        let rec = &mut sim.hist.ops[run.rec];
        rec.ends += 1;
        if rec.end.is_none() {
            rec.end = Some(sim.now);
        }
        let code = outcome.code();
        sim.trace.ev(sim.now, 3, run.rec as u64, code, || {
            format!("c{}.{k} ends #{}: {outcome}", self.id, run.rec)
        });
        if keeper {
            return;
        }
        match guarded {
            Some(spec) => self.start_guard(sim, k, spec),
            None => self.end_of_op(sim, k),
        }
    }

    /// A waiter that failed with an error worth another try (the resource held, no quorum, the
    /// validity spent) must have used its whole policy: all its tries, or its time.
    pub(super) fn patience(
        &self,
        sim: &mut Sim,
        k: usize,
        waiter: Option<Waiter>,
        tries: u32,
        e: &Error,
    ) {
        let retriable = matches!(
            e,
            Error::Conflict { .. } | Error::NoQuorum { .. } | Error::ValiditySpent { .. }
        );
        let gave_up = match waiter {
            _ if !retriable => None,
            Some(Waiter::Tries(n)) if tries < n => Some(format!("after {tries} of its {n} tries")),
            Some(Waiter::Until(t)) if sim.now < t => Some(format!(
                "{:.3} ms before its deadline, after {} tries",
                (t - sim.now) as f64 / 1e6,
                tries
            )),
            _ => None,
        };
        if let Some(when) = gave_up {
            sim.hist.note(
                "waiter-gave-up",
                sim.now,
                format!("c{}.{k}: a waiter failed {when}: {e}", self.id),
            );
        }
    }

    /// After an operation (or a step that is not one): think, then the next.
    pub(super) fn end_of_op(&mut self, sim: &mut Sim, k: usize) {
        let think = if self.tasks[k].plan.is_some() || self.beh.chance(300) {
            0
        } else {
            self.beh.range(0, self.spec.ttl_max / 2)
        };
        self.tasks[k].state = State::Think;
        self.tasks[k].timer = sim.now + think;
    }

    /// The caller of task `k`'s acquisition goes away (an async caller dropping its future):
    /// what the operation says to send is fired, nobody waits for its round.
    pub(super) fn abandon(&mut self, sim: &mut Sim, k: usize) {
        let State::Run(run) = std::mem::replace(&mut self.tasks[k].state, State::Think) else {
            return;
        };
        let run = *run;
        // The watch first, as the async client's drop does: a waiter's leave is kept when
        // another waiter of the client still watches the resource, never for its own watch.
        if let Some(id) = run.watch {
            self.engine.unwatch(id);
        }
        let fired = match &run.op {
            AnyOp::Acquire(o) => match o.abandon() {
                Some(cmd) => {
                    // As the async driver does: a round of the operation held back by an
                    // open claim of the client never goes out after what it fires, and its
                    // round in flight is no waiter of the client (first: the judge asks the
                    // engine below where the client still stands).
                    if let Wait::Round(seq) = run.wait {
                        self.engine.forget_gone(|s| *s == seq);
                    }
                    if self.cfg.fair().is_some() {
                        // A try's release takes the client out of the lines; a waiter's leave too.
                        let what = match cmd.expect() {
                            Expect::Leave => What::Left,
                            _ => What::Released,
                        };
                        let res = leaving(sim, &self.engine, self.spec.fenced, &run.res);
                        sim.fair.note(sim.now, self.id, &res, what);
                    }
                    self.engine.fire(&cmd, self.local(sim));
                    true
                }
                None => false,
            },
            _ => false,
        };
        sim.touch(&run.res, self.id, k as u32, -1);
        if run.sets_keys {
            sim.setting(&run.res, false, run.ttl);
        }
        sim.taint(&run.res);
        let rec = &mut sim.hist.ops[run.rec];
        rec.ends += 1;
        rec.abandoned = true;
        if rec.end.is_none() {
            rec.end = Some(sim.now);
        }
        sim.trace
            .ev(sim.now, 4, run.rec as u64, u64::from(fired), || {
                format!(
                    "c{}.{k} abandons #{} (release fired: {fired})",
                    self.id, run.rec
                )
            });
        self.end_of_op(sim, k);
    }

    /// Writes to the fenced store with the lock task `k` holds.
    pub(super) fn use_lock(&mut self, sim: &mut Sim, k: usize) {
        let Some(held) = &self.tasks[k].held else {
            return;
        };
        for r in &held.res {
            let token = held.lock.fencing_token();
            let accepted = sim.store_write(*r, token);
            sim.hist.writes.push(Write {
                at: sim.now,
                lock: held.id,
                resource: *r,
                token,
                accepted,
            });
            sim.trace.ev(sim.now, 5, held.id, u64::from(accepted), || {
                format!(
                    "c{}.{k} writes resource {r} with lock {} (token {token:?}): {}",
                    self.id,
                    held.id,
                    if accepted { "taken" } else { "refused" }
                )
            });
        }
    }
}

/// A wait of `d` as the driver sleeps it: as asked, or (the negative control `slow-retry`) four
/// times longer.
fn stretch(sim: &Sim, d: u64) -> u64 {
    if sim.negative == Some(crate::world::Negative::SlowRetry) {
        d.saturating_mul(4)
    } else {
        d
    }
}

/// How an operation ended, in the words the trace hashes (and shows in a replay).
enum Outcome {
    Ok,
    Failed(Error),
    Words(String),
}

/// Of resources `res`, those whose line a leave or a release takes the client (its `engine`)
/// out of: those no other waiter of the client stands in. The engine spares the
/// others (the client's waiters share one place): a leave leaves only those lines, and a
/// release while another waiter of the client stands in one of its lines goes out in the
/// keeping form (`OpKind::Unclaim`).
pub(super) fn leaving<U>(
    sim: &Sim,
    engine: &redlock_core::engine::Engine<U>,
    fenced: bool,
    res: &[u32],
) -> Vec<u32> {
    // (`res` holds the history's ids: a fenced resource's comes after every plain one.)
    res.iter()
        .copied()
        .filter(|&id| {
            let r = if fenced {
                id.saturating_sub(sim.resources)
            } else {
                id
            };
            !engine.stands_in_line(sim.resource_name(r, fenced).as_bytes())
        })
        .collect()
}

impl Outcome {
    /// Its words' length and hash: the length in bytes, in 32 bits, xor the FNV-1a hash of
    /// the bytes (an error's text hashed as it is written, not put in a string first).
    fn code(&self) -> u64 {
        let mut w = Hashing {
            hash: crate::trace::Fnv::default(),
            len: 0,
        };
        let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{self}"));
        u64::from(w.len as u32) ^ w.hash.finish()
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Failed(e) => write!(f, "{e}"),
            Outcome::Words(s) => f.write_str(s),
        }
    }
}

/// A sink for text that keeps only its length and hash.
struct Hashing {
    hash: crate::trace::Fnv,
    len: usize,
}

impl std::fmt::Write for Hashing {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.hash.bytes(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}
