//! Acquisition: the rounds of one try ([`Acquisition`]), and the [`Acquire`] operation that
//! runs tries until one wins or the retry policy gives up.

use std::time::{Duration, Instant};

use super::retry::{wake_jitter, Next, Retry, Waiting};
use super::verdict::{acquired, granted_mask, refused_everywhere, ttl_ms};
use super::{Cx, Input, Operation, Step};
use crate::command::{Command, Extra, OpKind};
use crate::config::Config;
use crate::error::{ConfigError, Error, NodeOutcome};
use crate::lock::{Lock, Names};
use crate::random::Randomness;
use crate::round::{Decision, Round, Until};
use crate::rules::validity_after;
use crate::Token;

/// An acquisition in progress: the rounds it runs, in order, and what they come to.
///
/// A client asks [`round`](Acquisition::round) for the next round to run, runs it on every
/// node, hands the outcome to [`advance`](Acquisition::advance), and repeats until there is no
/// round left; [`finish`](Acquisition::finish) then gives the lock or the error. The rounds:
/// 1. acquire (`SET NX PX`, or the acquire script for a set of resources or a fenced lock);
/// 2. fenced only: the write-back that raises the fencing counter on the nodes still holding
///    the keys to the highest value phase 1 returned;
/// 3. after any failure: the release on every node, awaited on all of them (a node may have
///    set the keys and lost the reply, or answered after the round was decided), before the
///    caller hears of the error.
#[derive(Debug)]
pub struct Acquisition {
    names: Names,
    token: Token,
    ttl: Duration,
    ttl_ms: u64,
    phase: Phase,
    /// Fair mode: the try of a waiter in the line, by the claim script (which takes a
    /// reservation of its own, or a free resource once the line's head has been rung).
    claim: bool,
    /// Fair mode: the waiter's ticket (its place in the lines), given back to the lines its
    /// claim took it out of if the claim fails overall.
    ticket: u64,
    /// Fair mode (the client's): its releases keep the client's place in the lines.
    fair: bool,
    /// Fair mode: the first try of an acquisition that may wait, by the enter script (which
    /// joins the line where the resource is held, in the same call).
    enter: bool,
    /// Fair mode: an enter round that was lost, and when it ended: its refusals are the
    /// waiter's reads of the line it joined (see [`Acquisition::take_joined`]).
    joined: Option<Box<(Round, Instant)>>,
    /// Fair mode: an enter round won without every node's yes: the nodes that said yes (a
    /// bit each, the first 64). Each of the others may have put the caller in its line: one
    /// that refused did, and one still owed its answer when the quorum decided the round may
    /// yet (its refusal comes after the decision). The leave goes to those nodes, without
    /// waiting (`Until::Sent`), before the lock is handed over.
    leave_except: Option<u64>,
}

#[derive(Debug)]
enum Phase {
    Acquire,
    /// Phase 1 won at `t1` (its start) with the highest counter `fence`, on the nodes of
    /// `granted`.
    Fence {
        t1: Instant,
        fence: u64,
        granted: u64,
    },
    /// Failed with this error; the release runs before it is returned.
    Release(Error),
    /// Fair mode: granted (as in `Done`), by an enter round that some nodes refused, each
    /// putting the caller in its line: the leave runs there before the lock is returned (a
    /// holder left standing in a line would be rung for the resource later, and cost the
    /// waiters behind it a claim lease, once its lock is gone without a release proper).
    Leave((Instant, Option<u64>, u64)),
    /// Granted: valid until then, with this fencing token, by the nodes of the mask (the lock
    /// is built by `finish`, which moves the names into it).
    Done(Result<(Instant, Option<u64>, u64), Error>),
}

impl Acquisition {
    /// An acquisition of `names` for `ttl` with a fresh token, its arguments checked: at
    /// least one resource and at most [`MAX_RESOURCES`](crate::MAX_RESOURCES), the ttl, and
    /// that no resource is the fencing counter.
    ///
    /// (An empty list would be granted: every node answers the acquire script over no key
    /// with 0. The client's own checks refuse one before any try; this one makes a try that
    /// somehow got none, its names lost between tries, fail rather than report a lock over
    /// nothing.)
    pub fn new(
        cfg: &Config,
        names: Names,
        ttl: Duration,
        rng: &mut dyn Randomness,
    ) -> Result<Acquisition, Error> {
        if names.is_empty() || names.len() > crate::MAX_RESOURCES {
            return Err(ConfigError::Resources {
                count: names.len(),
                max: crate::MAX_RESOURCES,
            }
            .into());
        }
        let (ttl_ms, ttl) = ttl_ms(cfg, ttl)?;
        if let Some(key) = cfg.fencing.as_deref() {
            if names.iter().any(|n| n.as_bytes() == key) {
                return Err(
                    ConfigError::FencingKey(String::from_utf8_lossy(key).into_owned()).into(),
                );
            }
        }
        Ok(Acquisition {
            names,
            token: Token::from_random(rng),
            ttl,
            ttl_ms,
            phase: Phase::Acquire,
            claim: false,
            ticket: 0,
            fair: cfg.fair.is_some(),
            enter: false,
            joined: None,
            leave_except: None,
        })
    }

    /// The release of this acquisition's token on every resource after a failed try. In fair
    /// mode it keeps the client's place in the lines (a claim's back at its ticket; a first
    /// try's, that of the client's other waiters): the acquisition goes on waiting, and a
    /// release proper would take the client out of them.
    pub fn release(&self) -> Command<'_> {
        let (kind, ticket) = if self.claim || self.fair {
            (OpKind::Unclaim, self.ticket)
        } else {
            (OpKind::Release, 0)
        };
        Command {
            kind,
            resources: &self.names,
            token: Some(&self.token),
            ttl_ms: 0,
            counter: None,
            fence_value: ticket,
        }
    }

    /// The release of this acquisition's token on every resource when it is abandoned
    /// half-way (an async caller that went away): a release proper, which in fair mode takes
    /// the client out of the lines, unless the engine finds another waiter of the client
    /// waiting for the resource (see `Engine::own_waiter`).
    pub fn abandoned(&self) -> Command<'_> {
        Command {
            kind: OpKind::Release,
            resources: &self.names,
            token: Some(&self.token),
            ttl_ms: 0,
            counter: None,
            fence_value: 0,
        }
    }

    /// The next round to run, and when it ends; `None` once the outcome is known.
    pub fn round<'a>(&'a self, cfg: &'a Config) -> Option<(Command<'a>, Until)> {
        let counter = cfg.fencing.as_deref();
        let cmd = |kind, fence_value: u64| Command {
            kind,
            resources: &self.names,
            token: Some(&self.token),
            ttl_ms: self.ttl_ms,
            counter,
            fence_value,
        };
        match self.phase {
            Phase::Acquire if self.claim => Some((cmd(OpKind::Claim, 0), self.try_until(cfg))),
            Phase::Acquire if self.enter => Some((cmd(OpKind::Enter, 0), self.try_until(cfg))),
            Phase::Acquire => Some((cmd(OpKind::Acquire, 0), self.try_until(cfg))),
            Phase::Fence { fence, .. } => Some((cmd(OpKind::Fence, fence), cfg.until())),
            Phase::Release(_) => Some((self.release(), Until::AllIn)),
            // (Its outcome changes nothing: over once written. The connections' order puts it
            // after the enter on each node, and before any later command of the lock.)
            Phase::Leave(_) => Some((
                Command::leave(&self.names),
                Until::Sent {
                    except: self.leave_except.unwrap_or(0),
                },
            )),
            Phase::Done(_) => None,
        }
    }

    /// When a try's round ends: as configured, but in fair mode a loss waits for every node
    /// (fail-fast or not): the waiter joins the line next, where a few hundred microseconds
    /// are nothing, and a try refused by every node needs no release of what it may have
    /// taken (a round trip and two calls per master per contended acquisition).
    fn try_until(&self, cfg: &Config) -> Until {
        match cfg.until() {
            Until::Decided if self.fair => Until::WonOrAllIn,
            until => until,
        }
    }

    /// The outcome of the round [`round`](Acquisition::round) gave (or why it could not be
    /// run), read at `now`.
    pub fn advance(&mut self, cfg: &Config, round: Result<(Round, Instant), Error>, now: Instant) {
        let phase = std::mem::replace(&mut self.phase, Phase::Acquire);
        self.phase = match (phase, round) {
            (Phase::Release(err), _) => Phase::Done(Err(err)),
            (Phase::Done(r), _) => Phase::Done(r),
            (Phase::Leave(granted), _) => Phase::Done(Ok(granted)),
            (_, Err(err)) => Phase::Release(err),
            (Phase::Acquire, Ok((round, t1))) => {
                self.leave_except =
                    (self.enter && !unanimous(&round)).then(|| granted_mask(&round));
                self.acquire_outcome(cfg, round, t1, now)
            }
            (Phase::Fence { t1, fence, granted }, Ok((round, _))) => {
                if round.decision() != Decision::Won {
                    Phase::Release(Error::NoQuorum {
                        nodes: round.reports_for(cfg),
                    })
                } else {
                    match validity_after(cfg, t1, now, self.ttl) {
                        Ok(validity) => {
                            let until = crate::time::later(now, validity);
                            self.granted((until, Some(fence), granted))
                        }
                        Err(err) => Phase::Release(err),
                    }
                }
            }
        };
    }

    /// What a won or lost acquire round (started at `t1`, read at `now`) leads to.
    fn acquire_outcome(&mut self, cfg: &Config, round: Round, t1: Instant, now: Instant) -> Phase {
        match acquired(cfg, &round, t1, now, self.ttl) {
            Err(Error::Conflict { nodes, .. }) => {
                let err = Error::Conflict {
                    nodes,
                    held: round
                        .held_key()
                        .and_then(|k| self.names.get(k))
                        .map(|n| n.as_str().to_string()),
                };
                let everywhere = refused_everywhere(&round);
                if self.enter {
                    self.joined = Some(Box::new((round, now)));
                }
                if everywhere {
                    Phase::Done(Err(err))
                } else {
                    Phase::Release(err)
                }
            }
            Err(err) => Phase::Release(err),
            Ok(_) if cfg.fencing.is_some() && cfg.fence_writeback() => Phase::Fence {
                t1,
                fence: round.counter(),
                granted: granted_mask(&round),
            },
            Ok(validity) => {
                let fence = cfg.fencing.is_some().then(|| round.counter());
                // Left at `now`: the lock holds until `t1 + ttl - drift`.
                let until = crate::time::later(now, validity);
                self.granted((until, fence, granted_mask(&round)))
            }
        }
    }

    /// Granted: done, unless a won enter round may have joined the caller to some lines (it
    /// leaves them first).
    fn granted(&self, granted: (Instant, Option<u64>, u64)) -> Phase {
        if self.leave_except.is_some() {
            Phase::Leave(granted)
        } else {
            Phase::Done(Ok(granted))
        }
    }

    /// Fair mode: the lost enter round of this try, and when it ended, if it was one (taken
    /// once). Each node that refused put the caller in the resource's line and answered what
    /// the wait round would have (its `PTTL`, the caller's ticket there).
    pub fn take_joined(&mut self) -> Option<Box<(Round, Instant)>> {
        self.joined.take()
    }

    /// Whether the try is won and its next round is the leave of the lines a won enter may
    /// have joined.
    fn is_leaving(&self) -> bool {
        matches!(self.phase, Phase::Leave(_))
    }

    /// Whether the outcome is known: no round is left.
    #[inline]
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done(_))
    }

    /// The lock, or why there is none; [`Error::Aborted`] if called before the last round.
    pub fn finish(self) -> Result<Lock, Error> {
        self.conclude(&mut Names::new())
    }

    /// [`finish`](Acquisition::finish), with the names given back into `back` on failure (the
    /// next try takes them, so a try does not copy them).
    fn conclude(self, back: &mut Names) -> Result<Lock, Error> {
        match self.phase {
            Phase::Done(Ok((valid_until, fencing, granted))) => Ok(Lock {
                resources: self.names,
                token: self.token,
                valid_until,
                ttl: self.ttl,
                fencing,
                granted,
            }),
            Phase::Done(Err(e)) => {
                *back = self.names;
                Err(e)
            }
            _ => {
                *back = self.names;
                Err(Error::Aborted)
            }
        }
    }
}

/// Whether every node of a round said yes.
fn unanimous(round: &Round) -> bool {
    round.count(&NodeOutcome::Ok) == round.node_count()
}

/// How many nodes of a fair try's lost enter round put the caller in the line.
fn lined_on(round: &Round) -> usize {
    (0..round.node_count())
        .filter(|&i| matches!(round.read(i), Some(Extra::Waited { .. })))
        .count()
}

/// The largest ticket the nodes of an enter round gave the caller.
fn max_ticket(round: &Round) -> Option<u64> {
    (0..round.node_count())
        .filter_map(|i| match round.read(i) {
            Some(Extra::Waited { ticket, .. }) if ticket > 0 => Some(ticket),
            _ => None,
        })
        .max()
}

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
        }
    }

    /// Starts a try: its first round, or the end if its arguments are refused.
    fn try_once<'a>(&'a mut self, cfg: &'a Config, cx: &mut Cx<'_>) -> Step<'a> {
        // The try holds the names while it runs (and gives them back if it fails).
        let names = std::mem::take(&mut self.names);
        match Acquisition::new(cfg, names, self.ttl, &mut *cx.rng) {
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
        let next = match acq.conclude(&mut self.names) {
            Ok(lock) => return self.done(Ok(lock)),
            Err(e) => self
                .retry
                .after(e, &self.names, cx.now, &mut *cx.rng, cx.events),
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
        let deadline = w.deadline(cfg, &read, now);
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
