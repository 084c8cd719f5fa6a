//! One try of an acquisition ([`Acquisition`]): its rounds, in order, and what they come to.

use std::time::{Duration, Instant};

use super::verdict::{acquired, granted_mask, refused_everywhere, ttl_ms};
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
    pub(super) names: Names,
    token: Token,
    ttl: Duration,
    ttl_ms: u64,
    phase: Phase,
    /// Fair mode: the try of a waiter in the line, by the claim script (which takes a
    /// reservation of its own, or a free resource once the line's head has been rung).
    pub(super) claim: bool,
    /// Fair mode: the waiter's ticket (its place in the lines), given back to the lines its
    /// claim took it out of if the claim fails overall.
    pub(super) ticket: u64,
    /// Fair mode (the client's): its releases keep the client's place in the lines.
    pub(super) fair: bool,
    /// Fair mode: the first try of an acquisition that may wait, by the enter script (which
    /// joins the line where the resource is held, in the same call).
    pub(super) enter: bool,
    /// Fair mode: an enter round that was lost, and when it ended: its refusals are the
    /// waiter's reads of the line it joined (see [`Acquisition::take_joined`]).
    joined: Option<Box<(Round, Instant)>>,
    /// Fair mode: an enter round won while some nodes refused it (putting the caller in their
    /// lines) or failed: every other node (a bit each, the first 64; see [`leave_except`]).
    /// The leave goes to those nodes, without waiting (`Until::Sent`), before the lock is
    /// handed over. A refusal that comes after the quorum decided the round is the engine's
    /// to answer with a leave (`Engine::late_enter`): an uncontended lock, whose slower
    /// masters say yes after the decision, sends no leave.
    leave_except: Option<u64>,
    /// A permit of a semaphore: the names are its slots, in the order of this try, and the
    /// acquire round asks each master for the first free one ([`OpKind::Permit`]).
    pub(super) permit: bool,
    /// A permit won: every slot (the names keep the one won), for the release of an
    /// acquisition abandoned before the spare ones' release went out; and the other slots,
    /// which masters that did not name the one won may have given the caller, released at
    /// once, not awaited, before the lock is handed over. (Boxed: a lock's tries carry none.)
    won: Option<Box<(Names, Names)>>,
    /// A permit: this try has read the slots once already (see `Phase::Read`).
    reread: bool,
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
    /// A permit's round lost with its yes votes split over slots: the release, then the read
    /// of the slots (`Read`), failing with this error if that finds no slot free on a quorum.
    ReleaseThenRead(Error),
    /// A permit: the slots read on every master after a split (the slots script), so that the try's second
    /// round asks first for the slot free on the most masters. A master gives the first free
    /// slot in the caller's order, and a slot still held on a majority but free on a
    /// minority (its holder's `SET` never reached them, or they lost it) takes the votes of
    /// those masters from the slot free everywhere (a hostile review's finding, session 22:
    /// 7 such slots of 8 failed two tries in three).
    Read(Error),
    /// Fair mode: granted (as in `Done`), by an enter round that some nodes refused, each
    /// putting the caller in its line: the leave runs there before the lock is returned (a
    /// holder left standing in a line would be rung for the resource later, and cost the
    /// waiters behind it a claim lease, once its lock is gone without a release proper).
    Leave((Instant, Option<u64>, u64)),
    /// A permit granted (as in `Done`): the release of the spare slots on the masters of the
    /// mask (those that did not name the slot won) goes out first.
    Spare((Instant, Option<u64>, u64), u64),
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
            permit: false,
            won: None,
            reread: false,
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
            watch: None,
        }
    }

    /// The release of this acquisition's token on every resource when it is abandoned
    /// half-way (an async caller that went away): a release proper, which in fair mode takes
    /// the client out of the lines, unless the engine finds another waiter of the client
    /// waiting for the resource (see `Engine::own_waiter`).
    pub fn abandoned(&self) -> Command<'_> {
        Command {
            kind: OpKind::Release,
            resources: match &self.won {
                Some(won) => &won.0,
                None => &self.names,
            },
            token: Some(&self.token),
            ttl_ms: 0,
            counter: None,
            fence_value: 0,
            watch: None,
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
            watch: None,
        };
        match self.phase {
            Phase::Acquire if self.claim => Some((cmd(OpKind::Claim, 0), self.try_until(cfg))),
            Phase::Acquire if self.enter => Some((cmd(OpKind::Enter, 0), self.try_until(cfg))),
            Phase::Acquire if self.permit => Some((cmd(OpKind::Permit, 0), cfg.until())),
            Phase::Acquire => Some((cmd(OpKind::Acquire, 0), self.try_until(cfg))),
            Phase::Fence { fence, .. } => Some((cmd(OpKind::Fence, fence), cfg.until())),
            Phase::Release(_) | Phase::ReleaseThenRead(_) => Some((self.release(), Until::AllIn)),
            Phase::Read(_) => Some((
                Command {
                    kind: OpKind::Slots,
                    resources: &self.names,
                    token: None,
                    ttl_ms: 0,
                    counter: None,
                    fence_value: 0,
                    watch: None,
                },
                // Every master's answer (or its timeout): a read decided by the first quorum
                // misses a slot free on exactly a quorum whenever one of those is slower.
                Until::AllIn,
            )),
            // (Its outcome changes nothing: over once written. The connections' order puts it
            // after the enter on each node, and before any later command of the lock.)
            Phase::Leave(_) => Some((
                Command::leave(&self.names),
                Until::Sent {
                    except: self.leave_except.unwrap_or(0),
                },
            )),
            // (As the leave: over once written, before any later command of the permit.)
            Phase::Spare(_, to) => Some((
                Command {
                    kind: OpKind::Release,
                    resources: self.won.as_ref().map_or(&[][..], |w| &w.1[..]),
                    token: Some(&self.token),
                    ttl_ms: 0,
                    counter: None,
                    fence_value: 0,
                    watch: None,
                },
                Until::Sent { except: !to },
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
            (Phase::ReleaseThenRead(err), _) => Phase::Read(err),
            (Phase::Read(err), Ok((round, _))) => self.reorder(cfg, &round, err),
            (Phase::Read(err), Err(_)) => Phase::Done(Err(err)),
            (Phase::Done(r), _) => Phase::Done(r),
            (Phase::Leave(granted) | Phase::Spare(granted, _), _) => Phase::Done(Ok(granted)),
            (_, Err(err)) => Phase::Release(err),
            (Phase::Acquire, Ok((round, t1))) => {
                self.leave_except = if self.enter {
                    leave_except(&round)
                } else {
                    None
                };
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
        if self.permit {
            return self.permit_outcome(cfg, &round, t1, now);
        }
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

    /// What a permit's round leads to: the slot a quorum named, its validity counted as a
    /// lock's, and the spare slots released where a master may have given one; or, lost, the
    /// release of every slot (unless every master refused: nothing was set).
    fn permit_outcome(&mut self, cfg: &Config, round: &Round, t1: Instant, now: Instant) -> Phase {
        let validity = match acquired(cfg, round, t1, now, self.ttl) {
            Ok(validity) => validity,
            Err(err) if refused_everywhere(round) => return Phase::Done(Err(err)),
            Err(err) => {
                // Votes split over slots by masters that all answered are contention, not a
                // lack of masters.
                let failed = round.reports_iter().filter(|o| o.is_failure()).count();
                let err = match err {
                    Error::NoQuorum { nodes } if failed <= cfg.nodes.len() - cfg.quorum => {
                        Error::Conflict { nodes, held: None }
                    }
                    err => err,
                };
                // Worth a read when the masters that said yes, with those a round decided
                // early did not wait for, could make a quorum on one slot.
                let yes = round.count(&NodeOutcome::Ok);
                let open = yes + round.count(&NodeOutcome::Undecided);
                return if yes > 0 && open >= cfg.quorum && !self.reread && self.names.len() > 1 {
                    Phase::ReleaseThenRead(err)
                } else {
                    Phase::Release(err)
                };
            }
        };
        let Some(won) = round.best_slot().filter(|&s| s < self.names.len()) else {
            // (A quorum named a slot the call did not have: no master of ours answers so.)
            return Phase::Release(Error::NoQuorum {
                nodes: round.reports_for(cfg),
            });
        };
        let named = (0..round.node_count().min(64))
            .filter(|&i| round.read(i) == Some(Extra::Slot(won as u32)))
            .fold(0u64, |mask, i| mask | 1 << i);
        let slots = std::mem::take(&mut self.names);
        self.names = smallvec::smallvec![slots[won].clone()];
        let spare: Names = (0..slots.len())
            .filter(|&i| i != won)
            .map(|i| slots[i].clone())
            .collect();
        let no_spare = spare.is_empty();
        self.won = Some(Box::new((slots, spare)));
        let until = crate::time::later(now, validity);
        let all = if round.node_count() >= 64 {
            u64::MAX
        } else {
            (1u64 << round.node_count()) - 1
        };
        if no_spare || named == all {
            Phase::Done(Ok((until, None, named)))
        } else {
            Phase::Spare((until, None, named), all & !named)
        }
    }

    /// After a split: the slots ordered by how many masters of the read have them free (most
    /// first; the try's random order among equals), and the try's second round; or its
    /// error, when no slot is free on a quorum.
    fn reorder(&mut self, cfg: &Config, round: &Round, err: Error) -> Phase {
        let k = self.names.len();
        let mut free = vec![0usize; k];
        for i in 0..round.node_count() {
            if let Some(resp::Frame::Array(values)) =
                round.reply(i).map(resp::Frame::without_attributes)
            {
                if values.len() != k {
                    continue;
                }
                for (slot, v) in values.iter().enumerate() {
                    if matches!(v, resp::Frame::Integer(0)) {
                        free[slot] += 1;
                    }
                }
            }
        }
        if free.iter().all(|&n| n < cfg.quorum) {
            return Phase::Done(Err(err));
        }
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(free[i]));
        self.names = order.iter().map(|&i| self.names[i].clone()).collect();
        self.reread = true;
        Phase::Acquire
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
    pub(super) fn is_leaving(&self) -> bool {
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
    pub(super) fn conclude(self, back: &mut Names) -> Result<Lock, Error> {
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

/// Fair mode: the nodes of an enter round that the try's leave skips (a bit each, the first
/// 64), or `None` when it skips them all: those that said yes, and those whose answer was still
/// owed when the round was decided (a refusal they send later is the engine's to answer, see
/// `Engine::late_enter`). Every other node refused, and put the caller in its line, or failed
/// and may have.
fn leave_except(round: &Round) -> Option<u64> {
    let n = round.node_count().min(64);
    let except = round
        .reports_iter()
        .take(n)
        .enumerate()
        .filter(|(_, o)| {
            matches!(
                o,
                NodeOutcome::Ok | NodeOutcome::Undecided | NodeOutcome::Timeout
            )
        })
        .fold(0u64, |mask, (i, _)| mask | 1 << i);
    let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    (except != all).then_some(except)
}

/// How many nodes of a fair try's lost enter round put the caller in the line.
pub(super) fn lined_on(round: &Round) -> usize {
    (0..round.node_count())
        .filter(|&i| matches!(round.read(i), Some(Extra::Waited { .. })))
        .count()
}

/// The largest ticket the nodes of an enter round gave the caller.
pub(super) fn max_ticket(round: &Round) -> Option<u64> {
    (0..round.node_count())
        .filter_map(|i| match round.read(i) {
            Some(Extra::Waited { ticket, .. }) if ticket > 0 => Some(ticket),
            _ => None,
        })
        .max()
}
