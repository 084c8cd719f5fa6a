//! The [`Acquire`] operation: tries ([`Acquisition`], `attempt.rs`) until one wins or the
//! retry policy gives up, and the waits between them.

use std::time::{Duration, Instant};

use super::attempt::{lined_on, max_ticket, Acquisition};
use super::retry::{wake_jitter, Next, Retry, Waiting};
use super::{Cx, Input, Operation, Step};
use crate::command::Command;
use crate::config::Config;
use crate::error::Error;
use crate::lock::{Lock, Names};
use crate::round::Round;

/// The acquisition of a lock: tries ([`Acquisition`]) until one wins or the [`Retry`] policy
/// gives up, with between tries a sleep, or (wake-ups on, the resource held) a watch of the
/// resource, its read, a wait for the watch or the timer, and a jitter after a wake-up.
#[derive(Debug)]
pub struct Acquire {
    names: Names,
    ttl: Duration,
    retry: Retry,
    state: State,
    result: Option<Result<Lock, Error>>,
    /// Fair mode: this acquisition has joined the line of its resource (its tries are
    /// claims from then on, and giving up leaves the line).
    queued: bool,
    /// Fair mode: its ticket, the largest the masters gave it.
    ticket: u64,
    /// Fair mode: the key of the watch registered before the first try's enter (the
    /// resource's line), while the driver holds it: from before the enter goes out, the
    /// engine counts this acquisition among the client's waiters for the resource, so that
    /// another waiter's leave or release keeps the client's place for it (it shares that
    /// place) while its enter is in flight.
    watching: Option<Box<[u8]>>,
    /// Fair mode: the try in flight is a set's claim woken by a bell (see `next_round`).
    rung: bool,
    /// Fair mode: the end of the wait a set's claim woken by a bell interrupted: a refused
    /// claim costs no try, and the wait after it ends there still (so that `lock`'s tries
    /// still bound its time).
    carried: Option<Instant>,
    /// A permit of a semaphore: the names are its slots, each try asks for the first free
    /// one in an order drawn for it (see [`Acquire::permit`]).
    permit: bool,
}

/// What follows once the early watch is taken back ([`State::TakingBack`]).
#[derive(Debug)]
enum Then {
    /// The won try's leave round: the leave must not count the winner's own watch as
    /// another waiter of the client.
    Try(Acquisition),
    /// Giving up: the leave, then this error.
    Leave(Error),
    /// A wait under another key than the early watch's: its registration.
    Watch(Waiting, Option<Box<(Round, Instant)>>),
}

#[derive(Debug)]
enum State {
    /// Before the first try, or over.
    Idle,
    /// A try's rounds are running.
    Trying(Acquisition),
    /// Sleeping before the next try (the retry delay, or the jitter after a wake-up).
    Sleeping,
    /// The watch is being registered; then its read goes out, unless the try's enter round
    /// (fair mode) already joined the line on every node and read it: then that is the read.
    Watching(Waiting, Option<Box<(Round, Instant)>>),
    /// The watch's read is out; then the wait.
    Reading(Waiting),
    /// Fair mode: the client's place moved to one ticket on every master; then the wait
    /// until then.
    Reticking(Waiting, Option<Instant>),
    /// Waiting for the watch or the timer; whether there is a wait at all.
    Awaiting(Waiting, bool),
    /// Fair mode: giving up with this error, after leaving the line.
    Leaving(Error),
    /// Fair mode: the early watch is being registered; then the try's enter.
    Entering(Acquisition),
    /// Fair mode: the early watch is being taken back; then what follows.
    TakingBack(Then),
}

impl Acquire {
    /// The acquisition of `names` for `ttl` (checked when it starts), retried as `retry` says
    /// ([`Retry::once`] for a single try).
    pub fn new(names: Names, ttl: Duration, retry: Retry) -> Acquire {
        Acquire {
            names,
            ttl,
            retry,
            state: State::Idle,
            result: None,
            queued: false,
            ticket: 0,
            watching: None,
            rung: false,
            carried: None,
            permit: false,
        }
    }

    /// The acquisition of a permit of `semaphore` for `ttl`: a lock on one of its slots,
    /// retried as `retry` says, sleeping the retry delay between tries (no wake-ups, no line:
    /// a release of any slot would have to wake every waiter). Each try draws a new order of
    /// the slots, so that callers trying at once seldom race for the same one.
    pub fn permit(semaphore: &crate::Semaphore, ttl: Duration, retry: Retry) -> Acquire {
        let mut op = Acquire::new(
            semaphore.slots().iter().cloned().collect(),
            ttl,
            retry.polling(),
        );
        op.permit = true;
        op
    }

    /// Starts a try: its first round, or the end if its arguments are refused.
    fn try_once<'a>(&'a mut self, cfg: &'a Config, cx: &mut Cx<'_>) -> Step<'a> {
        // The try holds the names while it runs (and gives them back if it fails).
        let mut names = std::mem::take(&mut self.names);
        if self.permit {
            // A permit's slots, in a new random order (Fisher-Yates).
            for i in (1..names.len()).rev() {
                let j = usize::try_from(cx.rng.up_to(i as u64)).unwrap_or(i);
                names.swap(i, j.min(i));
            }
        }
        match Acquisition::new(cfg, names, self.ttl, &mut *cx.rng) {
            Ok(mut acq) if self.permit => {
                acq.permit = true;
                // (No line: its releases are releases proper.)
                acq.fair = false;
                self.state = State::Trying(acq);
                self.next_round(cfg, cx)
            }
            Ok(mut acq) => {
                acq.claim = self.queued;
                acq.enter = !self.queued && cfg.fair.is_some() && self.retry.lines(&acq.names);
                acq.ticket = self.ticket;
                if acq.enter && self.watching.is_none() {
                    // The line's watch first (see `watching`).
                    let mut line = Vec::new();
                    crate::command::queue_key(acq.names[0].as_bytes(), &mut line);
                    self.watching = Some(line.into());
                    self.state = State::Entering(acq);
                    return match &self.watching {
                        Some(key) => Step::Watch(key),
                        None => Step::Done,
                    };
                }
                self.state = State::Trying(acq);
                self.next_round(cfg, cx)
            }
            Err(e) => self.done(Err(e)),
        }
    }

    /// The try's next round; once it has none, its outcome: the lock, or the retry policy's
    /// answer to the error.
    fn next_round<'a>(&'a mut self, cfg: &'a Config, cx: &mut Cx<'_>) -> Step<'a> {
        let State::Trying(acq) = &self.state else {
            return Step::Done;
        };
        if acq.is_leaving() && self.watching.is_some() {
            let State::Trying(acq) = std::mem::replace(&mut self.state, State::Idle) else {
                return Step::Done;
            };
            self.state = State::TakingBack(Then::Try(acq));
            return Step::Await(None);
        }
        if !acq.is_done() {
            // (Borrowed again for the step it returns: the borrow checker does not let a
            // conditionally returned borrow end on the other branch.)
            let State::Trying(acq) = &self.state else {
                return Step::Done;
            };
            return acq
                .round(cfg)
                .map_or(Step::Done, |(c, u)| Step::Round(c, u));
        }
        let State::Trying(mut acq) = std::mem::replace(&mut self.state, State::Idle) else {
            return Step::Done;
        };
        // Fair mode: a lost enter round put the caller in the line where it was refused.
        let joined = acq.take_joined();
        let lined = joined.as_deref().map_or(0, |(round, _)| lined_on(round));
        if lined > 0 {
            self.queued = true;
            if let Some(t) = joined.as_deref().and_then(|(round, _)| max_ticket(round)) {
                self.ticket = t;
            }
        }
        // A first try refused without joining any line met masters that keep none (a user
        // who may run no script: the enter went out as `SET NX`): it waits as without fair
        // mode, woken by the servers' invalidations.
        let lines = !acq.enter || lined > 0;
        let rung = std::mem::take(&mut self.rung);
        let next = match acq.conclude(&mut self.names) {
            Ok(lock) => return self.done(Ok(lock)),
            Err(e) => {
                if rung && matches!(e, Error::Conflict { .. }) {
                    // A set rung for one resource while another is still held or has waiters
                    // ahead of it: its refused claim kept or passed on what it was rung for
                    // and kept its place. That is no try of `lock`'s (a set heading a busy
                    // line is rung at every hand-off of it), and the wait it interrupted goes
                    // on to its end.
                    self.retry.refund();
                } else {
                    self.carried = None;
                }
                self.retry
                    .after(e, &self.names, lines, cx.now, &mut *cx.rng, cx.events)
            }
        };
        match next {
            Next::Fail(e) if self.queued && self.watching.is_some() => {
                self.state = State::TakingBack(Then::Leave(e));
                Step::Await(None)
            }
            Next::Fail(e) if self.queued => {
                // Out of the line before the error is returned, so that no hand-off waits a
                // claim lease for a waiter that has gone.
                self.state = State::Leaving(e);
                Step::Round(self.leave(), cfg.until())
            }
            Next::Fail(e) => self.done(Err(e)),
            Next::Wait(d) => {
                self.state = State::Sleeping;
                Step::Sleep(d)
            }
            Next::Watch(mut waiting) => {
                waiting.ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
                // The enter round is the wait's read only if every node joined: otherwise
                // the wait round joins the others (and reads them all again).
                let read = joined.filter(|j| waiting.is_fair() && lined == j.0.node_count());
                match self.watching.as_deref() {
                    // Registered before the enter, under this key: the wait goes on as if
                    // just registered.
                    Some(key) if key == waiting.key_bytes() => self.watched(waiting, read, cfg),
                    Some(_) => {
                        self.state = State::TakingBack(Then::Watch(waiting, read));
                        Step::Await(None)
                    }
                    None => self.watch(waiting, read),
                }
            }
        }
    }

    /// Registers the watch of `waiting` (its read, or the enter round that read every node).
    fn watch<'a>(&'a mut self, waiting: Waiting, read: Option<Box<(Round, Instant)>>) -> Step<'a> {
        self.state = State::Watching(waiting, read);
        match &self.state {
            State::Watching(w, _) => Step::Watch(w.key_bytes()),
            _ => Step::Done,
        }
    }

    /// The watch of `w` is registered: its read goes out, unless the enter round that joined
    /// the line on every node is that read.
    fn watched<'a>(
        &'a mut self,
        w: Waiting,
        read: Option<Box<(Round, Instant)>>,
        cfg: &'a Config,
    ) -> Step<'a> {
        if let Some(joined) = read {
            let (round, at) = *joined;
            return self.read_in(w, Ok((round, at)), at, cfg);
        }
        self.state = State::Reading(w);
        match &self.state {
            State::Reading(w) => {
                let (cmd, until) = w.round();
                Step::Round(cmd, until)
            }
            _ => Step::Done,
        }
    }

    /// The wait's read is in (at `now`): the wait until its timer, after (fair mode) the move
    /// of the client's place to one ticket on every master if they gave it different ones.
    fn read_in<'a>(
        &'a mut self,
        w: Waiting,
        read: Result<(Round, Instant), Error>,
        now: Instant,
        cfg: &'a Config,
    ) -> Step<'a> {
        self.queued |= w.is_fair() && read.is_ok();
        let mut w = w;
        if w.is_set() {
            // A set's reads may come every half lease (see `Waiting::is_set`): its wait ends
            // when `Retry::after` said, not at its first read's timer, or where the wait that
            // a bell interrupted would have (see `carried`).
            let until = self
                .carried
                .map_or_else(|| w.set_until(), |c| c.min(w.set_until()));
            w.until = w.until.or(Some(until));
        }
        // A set's timer runs from its read's start: the read renewed its reservations as it
        // reached each master, and a master slow to answer must not push the next renewal
        // past the claim lease on the others.
        let from = match &read {
            Ok((_, t1)) if w.is_set() => *t1,
            _ => now,
        };
        let deadline = w.deadline(cfg, &read, from);
        w.free = w.free_at_once(cfg, &read);
        // The read after a lapse that hands the resource to the caller ends the wait (the
        // `Waited` event's cause is the lapse).
        w.lapsed = w.relooked && w.free;
        w.until = w.until.or(deadline);
        let ticket = w.retick(&read);
        if let Some(t) = w.ticket(&read) {
            self.ticket = t;
        }
        match ticket {
            Some(ticket) => {
                self.state = State::Reticking(w, deadline);
                match &self.state {
                    State::Reticking(w, _) => Step::Round(w.retick_to(ticket), cfg.until()),
                    _ => Step::Done,
                }
            }
            None => {
                self.state = State::Awaiting(w, deadline.is_some());
                Step::Await(deadline)
            }
        }
    }

    /// The leave script for this acquisition's resources (fair mode).
    fn leave(&self) -> Command<'_> {
        Command::leave(&self.names)
    }

    fn done<'a>(&mut self, result: Result<Lock, Error>) -> Step<'a> {
        self.state = State::Idle;
        self.result = Some(result);
        Step::Done
    }
}

impl Operation for Acquire {
    type Output = Lock;

    fn step<'a>(&'a mut self, input: Input, cfg: &'a Config, cx: &mut Cx<'_>) -> Step<'a> {
        if self.result.is_some() {
            return Step::Done;
        }
        // The hot path first, in place: a try's round answered (the try is not moved).
        let input = match (&mut self.state, input) {
            (State::Trying(acq), Input::Round(round)) => {
                acq.advance(cfg, round, cx.now);
                return self.next_round(cfg, cx);
            }
            (_, input) => input,
        };
        let state = std::mem::replace(&mut self.state, State::Idle);
        match (state, input) {
            (State::Idle, Input::Start) | (State::Sleeping, Input::Slept) => self.try_once(cfg, cx),
            (State::Watching(w, read), Input::Watching) => self.watched(w, read, cfg),
            (State::Entering(acq), Input::Watching) => {
                self.state = State::Trying(acq);
                self.next_round(cfg, cx)
            }
            (State::TakingBack(then), Input::Woken(_)) => {
                self.watching = None;
                match then {
                    Then::Try(acq) => {
                        self.state = State::Trying(acq);
                        self.next_round(cfg, cx)
                    }
                    Then::Leave(e) => {
                        self.state = State::Leaving(e);
                        Step::Round(self.leave(), cfg.until())
                    }
                    Then::Watch(w, read) => self.watch(w, read),
                }
            }
            (State::Reading(w), Input::Round(read)) => self.read_in(w, read, cx.now, cfg),
            (State::Reticking(w, deadline), Input::Round(_)) => {
                self.state = State::Awaiting(w, deadline.is_some());
                Step::Await(deadline)
            }
            (State::Awaiting(w, waited), Input::Woken(woken)) => {
                // The driver took the watch back (the early one too, if it was that).
                self.watching = None;
                if waited && woken == Some(crate::engine::Wake::Lapse) && w.is_fair() && !w.relooked
                {
                    // The reservation of the waiter ahead may have lapsed: the line is read
                    // again (the wait script hands a lapsed resource to the caller, then its
                    // timer says claim at once), rather than a claim that a waiter ahead
                    // holding the lock by now would refuse (a claim and a wait, two rounds).
                    // Once per wait, and never past the wait's first deadline.
                    let mut w = w;
                    w.relooked = true;
                    return self.watch(w, None);
                }
                if waited
                    && w.is_set()
                    && !w.free
                    && woken.is_none()
                    && w.until.is_some_and(|u| cx.now < u)
                {
                    // A set's timer before the end of its wait, with nothing handed to it by
                    // its last read: the renewal of what is reserved for it. It reads its
                    // lines again (the read keeps what it holds, and says when every resource
                    // is reserved for it or free: then the timer is at once and the claim
                    // follows), without a try.
                    return self.watch(w, None);
                }
                // A set woken by a bell claims at once (the claim keeps or passes on what it
                // was rung for where it cannot have them all, and that refusal costs no try),
                // but not once its wait is over: then the claim is a try like any, so that
                // bells that keep coming cannot carry the acquisition past its tries' bound.
                self.rung = w.is_set()
                    && woken == Some(crate::engine::Wake::Pushed)
                    && w.until.is_some_and(|u| cx.now < u);
                if self.rung {
                    self.carried = w.until;
                }
                // (No wait, no record of one, when the read could not run.) A bell wakes one
                // waiter: no jitter after it.
                let fair = w.is_fair();
                if waited && w.end(woken, cx.now, cx.events) && !fair {
                    self.state = State::Sleeping;
                    Step::Jitter(wake_jitter(&mut *cx.rng))
                } else {
                    self.try_once(cfg, cx)
                }
            }
            (State::Leaving(e), Input::Round(_)) => self.done(Err(e)),
            // An input the state does not expect: a driver's bug, ended rather than guessed.
            (_, _) => self.done(Err(Error::Aborted)),
        }
    }

    fn finish(self) -> Result<Lock, Error> {
        self.result.unwrap_or(Err(Error::Aborted))
    }

    fn abandon(&self) -> Option<Command<'_>> {
        match &self.state {
            State::Trying(acq) | State::TakingBack(Then::Try(acq)) => Some(acq.abandoned()),
            State::TakingBack(Then::Leave(_)) => Some(self.leave()),
            State::TakingBack(Then::Watch(..)) if self.queued => Some(self.leave()),
            // A fair wait's read is out: it joins the line on every master it reaches (a
            // set's first try, and a try that joined no line, join there). Abandoned without
            // a leave, the client's place stayed in the lines with nobody here to claim it,
            // and a release or a claim finding the resource free rang it: the reservation
            // kept the resource from everyone for a claim lease (simulator, seed 141160).
            // The leave goes out after the read on each connection, so it runs after it.
            State::Reading(w) if w.is_fair() => Some(self.leave()),
            // Fair mode: out of the line (a bell that still comes finds no waiter: its
            // reservation lapses after the claim lease).
            State::Sleeping
            | State::Watching(..)
            | State::Reading(_)
            | State::Reticking(..)
            | State::Awaiting(..)
                if self.queued =>
            {
                Some(self.leave())
            }
            _ => None,
        }
    }

    fn name(&self) -> &'static str {
        "acquire"
    }
}
