//! The order of an operation, and what its rounds mean: the ttl an operation may be asked
//! with, when an acquire round gives a lock and what error it is otherwise (and that a lost
//! acquisition is released everywhere, which the clients do with the round this says), when a
//! release or extension is confirmed, how an extension changes the lock's validity whatever
//! its outcome, and the retries of `lock`. Both clients call these; neither decides any of it.

use std::time::{Duration, Instant};

use crate::config::Config;
use smallvec::SmallVec;

use crate::core::command::{Command, Extra, OpKind};
use crate::core::random::Randomness;
use crate::core::round::{Decision, Round, Until};
use crate::core::rules::{drift, validity_after};
use crate::error::{ConfigError, Error, NodeOutcome};
use crate::lock::{Lock, Name, Names};
use crate::Token;

/// Checks a ttl given to an acquisition or an extension: its whole milliseconds (rounded
/// down, as sent), and the ttl those stand for.
pub(crate) fn ttl_ms(cfg: &Config, ttl: Duration) -> Result<(u64, Duration), Error> {
    let ms = cfg.check_ttl(ttl)?;
    Ok((ms, Duration::from_millis(ms)))
}

/// The latest a lock can still be relied on once an extension to `ttl`, started at `t1`,
/// may have reached some node: a node that ran the `PEXPIRE` lets the key go `ttl` after it
/// ran it, which is no earlier than `t1 + ttl`, less the drift allowance. Saturates at `t1`
/// (a ttl within the drift allowance promises nothing).
fn extension_cap(cfg: &Config, t1: Instant, ttl: Duration) -> Instant {
    let left = ttl
        .checked_sub(drift(ttl, cfg.drift_factor))
        .unwrap_or(Duration::ZERO);
    crate::core::time::later(t1, left)
}

/// Before an extension round of `lock` to `ttl`: checks the ttl, refuses a lock whose validity
/// has run out ([`Error::Expired`], nothing to send: extending it would hide a gap in which it
/// was not held), and caps the lock's validity at what it will be worth if the round fails.
///
/// The cap is applied before anything is sent, so that it holds however the round ends:
/// with success, with an error, or never (an async caller that drops the future). Some nodes
/// may run the `PEXPIRE` whatever the outcome, and after it their key lives `ttl`, not what
/// the lock had left: a shortened extension that failed still shortened the keys.
pub(crate) fn begin_extend(
    cfg: &Config,
    lock: &mut Lock,
    ttl: Duration,
    now: Instant,
) -> Result<(u64, Duration), Error> {
    let (ms, ttl) = ttl_ms(cfg, ttl)?;
    if now >= lock.valid_until {
        return Err(Error::Expired);
    }
    lock.valid_until = lock.valid_until.min(extension_cap(cfg, now, ttl));
    Ok((ms, ttl))
}

/// After an extension round that started at `t1` (at or after the `now` given to
/// [`begin_extend`]): on success the lock is valid for the new ttl as acquisition computes it;
/// on failure it keeps the capped validity `begin_extend` left it.
pub(crate) fn finish_extend(
    cfg: &Config,
    lock: &mut Lock,
    round: &Round,
    t1: Instant,
    now: Instant,
    ttl: Duration,
) -> Result<(), Error> {
    lock.valid_until = lock.valid_until.min(extension_cap(cfg, t1, ttl));
    confirmed(cfg, round, false)?;
    let validity = validity_after(cfg, t1, now, ttl)?;
    // The validity is what is left at `now`: `t1 + ttl - drift` (the elapsed time is in it once).
    lock.valid_until = crate::core::time::later(now, validity);
    lock.ttl = ttl;
    Ok(())
}

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
pub(crate) struct Acquisition {
    names: Names,
    token: Token,
    ttl: Duration,
    ttl_ms: u64,
    phase: Phase,
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
    /// Granted: valid until then, with this fencing token, by the nodes of the mask (the lock
    /// is built by `finish`, which moves the names into it).
    Done(Result<(Instant, Option<u64>, u64), Error>),
}

/// The nodes (of the first 64) that said yes in `round`, one bit each.
fn granted_mask(round: &Round) -> u64 {
    round
        .reports_iter()
        .take(64)
        .enumerate()
        .filter(|(_, o)| **o == NodeOutcome::Ok)
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// The token of a command that carries none.
static NO_TOKEN: Token = Token::none();

impl Acquisition {
    /// An acquisition of `names` for `ttl` with a fresh token, its arguments checked: the ttl,
    /// and that no resource is the fencing counter.
    pub(crate) fn new(
        cfg: &Config,
        names: Names,
        ttl: Duration,
        rng: &mut dyn Randomness,
    ) -> Result<Acquisition, Error> {
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
        })
    }

    /// The release of this acquisition's token on every resource: what a client sends when
    /// the acquisition is abandoned half-way (an async caller that went away).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn release(&self) -> Command<'_> {
        Command {
            kind: OpKind::Release,
            resources: &self.names,
            token: &self.token,
            ttl_ms: 0,
            counter: None,
            fence_value: 0,
        }
    }

    /// The next round to run, and when it ends; `None` once the outcome is known.
    pub(crate) fn round<'a>(&'a self, cfg: &'a Config) -> Option<(Command<'a>, Until)> {
        let counter = cfg.fencing.as_deref();
        let cmd = |kind, fence_value| Command {
            kind,
            resources: &self.names,
            token: &self.token,
            ttl_ms: self.ttl_ms,
            counter,
            fence_value,
        };
        match self.phase {
            Phase::Acquire => Some((cmd(OpKind::Acquire, 0), cfg.until())),
            Phase::Fence { fence, .. } => Some((cmd(OpKind::Fence, fence), cfg.until())),
            Phase::Release(_) => Some((cmd(OpKind::Release, 0), Until::AllIn)),
            Phase::Done(_) => None,
        }
    }

    /// The outcome of the round [`round`](Acquisition::round) gave (or why it could not be
    /// run), read at `now`.
    pub(crate) fn advance(
        &mut self,
        cfg: &Config,
        round: Result<(Round, Instant), Error>,
        now: Instant,
    ) {
        let phase = std::mem::replace(&mut self.phase, Phase::Acquire);
        self.phase = match (phase, round) {
            (Phase::Release(err), _) => Phase::Done(Err(err)),
            (Phase::Done(r), _) => Phase::Done(r),
            (_, Err(err)) => Phase::Release(err),
            (Phase::Acquire, Ok((round, t1))) => match acquired(cfg, &round, t1, now, self.ttl) {
                Err(Error::Conflict { nodes, .. }) => {
                    let err = Error::Conflict {
                        nodes,
                        held: round
                            .held_key()
                            .and_then(|k| self.names.get(k))
                            .map(|n| n.as_str().to_string()),
                    };
                    if refused_everywhere(&round) {
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
                    let until = crate::core::time::later(now, validity);
                    Phase::Done(Ok((until, fence, granted_mask(&round))))
                }
            },
            (Phase::Fence { t1, fence, granted }, Ok((round, _))) => {
                if round.decision() != Decision::Won {
                    Phase::Release(Error::NoQuorum {
                        nodes: round.reports(&cfg.nodes),
                    })
                } else {
                    match validity_after(cfg, t1, now, self.ttl) {
                        Ok(validity) => {
                            let until = crate::core::time::later(now, validity);
                            Phase::Done(Ok((until, Some(fence), granted)))
                        }
                        Err(err) => Phase::Release(err),
                    }
                }
            }
        };
    }

    /// The lock, or why there is none; [`Error::Aborted`] if called before the last round.
    pub(crate) fn finish(self) -> Result<Lock, Error> {
        match self.phase {
            Phase::Done(Ok((valid_until, fencing, granted))) => Ok(Lock {
                resources: self.names,
                token: self.token,
                valid_until,
                ttl: self.ttl,
                fencing,
                granted,
            }),
            Phase::Done(Err(e)) => Err(e),
            _ => Err(Error::Aborted),
        }
    }
}

/// Whether no node of a lost acquire round can hold any of its keys: every node answered that
/// another token holds one (`SET NX` refused; the acquire script rolled back what it had set)
/// or was not asked (down). Then there is nothing to release and the release round is
/// skipped. A node that timed out, failed or was still to answer may have set a key, so any
/// other outcome releases; with fail-fast on, a lost round usually ends before every node has
/// answered, so the saving is mostly for fail-fast off, where every answer is awaited.
fn refused_everywhere(round: &Round) -> bool {
    round
        .reports_iter()
        .all(|o| matches!(o, NodeOutcome::Held | NodeOutcome::Down))
}

/// Whether the refusals alone decided a lost round: the nodes that failed (rather than
/// answered) were too few to prevent a quorum by themselves.
fn contention(cfg: &Config, round: &Round) -> bool {
    let failed = round.reports_iter().filter(|o| o.is_failure()).count();
    failed <= cfg.nodes.len() - cfg.quorum
}

/// The rule for an acquire round: the validity left, or why there is no lock.
pub(crate) fn acquired(
    cfg: &Config,
    round: &Round,
    t1: Instant,
    now: Instant,
    ttl: Duration,
) -> Result<Duration, Error> {
    match round.decision() {
        Decision::Won => validity_after(cfg, t1, now, ttl),
        _ if round.count(&NodeOutcome::Held) > 0 && contention(cfg, round) => {
            Err(Error::Conflict {
                nodes: round.reports(&cfg.nodes),
                held: None,
            })
        }
        _ => Err(Error::NoQuorum {
            nodes: round.reports(&cfg.nodes),
        }),
    }
}

/// The rule for a release or extend round: confirmed by a quorum, or whose fault it was not.
/// `expired` says whether the lock's validity had run out when the round ended: a native
/// command's "not ours" (held by another, or gone: it cannot say) then reads as gone, and as
/// held by another while the lock was still valid.
pub(crate) fn confirmed(cfg: &Config, round: &Round, expired: bool) -> Result<(), Error> {
    if round.decision() == Decision::Won {
        Ok(())
    } else {
        Err(not_confirmed(cfg, round, expired))
    }
}

/// Why a release or extend round was not won.
fn not_confirmed(cfg: &Config, round: &Round, expired: bool) -> Error {
    let nodes = || round.reports(&cfg.nodes);
    let not_ours = round.count(&NodeOutcome::NotOurs);
    if round.count(&NodeOutcome::Held) > 0 || (not_ours > 0 && !expired) {
        Error::NotHeld { nodes: nodes() }
    } else if round.count(&NodeOutcome::Gone) + not_ours > 0 && contention(cfg, round) {
        Error::Expired
    } else {
        Error::NoQuorum { nodes: nodes() }
    }
}

/// The retry policy of `lock`: which errors are worth another round, how many rounds (or
/// until when), and how long to wait between them.
#[derive(Debug)]
pub(crate) struct Retry {
    /// Tries left; `None`: as many as fit before `deadline`.
    left: Option<u32>,
    delay: Duration,
    /// `lock_within`: no try starts after this.
    deadline: Option<Instant>,
    wakeups: bool,
}

/// What to do after a failed round.
#[derive(Debug)]
pub(crate) enum Next {
    /// Give up with this error.
    Fail(Error),
    /// Wait this long, then try again.
    Wait(Duration),
    /// The resource is held: wait for it to change ([`Waiting`]), then try again.
    Watch(Waiting),
}

/// The most a woken waiter waits before its next try, at random: waiters woken by the same
/// push do not all send their `SET NX` in the same instant.
pub(crate) const WAKE_JITTER: Duration = Duration::from_micros(500);

/// A random pause in `0..=WAKE_JITTER`, taken after a wake-up.
pub(crate) fn wake_jitter(rng: &mut dyn Randomness) -> Duration {
    let us = WAKE_JITTER.as_micros() as u64;
    Duration::from_micros(rng.up_to(us))
}

/// The async client's jitter: a random number of yields to the runtime (its timer cannot
/// sleep less than a millisecond).
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) fn wake_yields(rng: &mut dyn Randomness) -> u32 {
    rng.up_to(4) as u32
}

/// A waiter's watch of a held resource, in the order both clients follow:
/// 1. register a watch of [`key`](Waiting::key) with the engine (before anything is sent, so
///    that no push is missed);
/// 2. run [`round`](Waiting::round): `CLIENT CACHING YES` + `PTTL key` on every node, which
///    makes the tracking servers note the key and tells when it expires;
/// 3. wait until [`deadline`](Waiting::deadline) unless the watch fires first;
/// 4. take the watch back, and [`end`](Waiting::end) the wait (pausing for the jitter if it
///    says so).
#[derive(Debug)]
pub(crate) struct Waiting {
    key: [Name; 1],
    wait: Duration,
    started: Instant,
}

impl Waiting {
    /// A wait for `key` of at most `wait` (what [`Retry::after`] allowed), starting at `now`.
    pub(crate) fn new(key: Name, wait: Duration, now: Instant) -> Waiting {
        Waiting {
            key: [key],
            wait,
            started: now,
        }
    }

    /// The key to watch.
    pub(crate) fn key(&self) -> Box<[u8]> {
        self.key[0].as_bytes().into()
    }

    /// The read that makes the tracking servers note the key, in a round that waits for every
    /// node.
    pub(crate) fn round(&self) -> (Command<'_>, Until) {
        let cmd = Command {
            kind: OpKind::Watch,
            resources: &self.key,
            // A read carries no token.
            token: &NO_TOKEN,
            ttl_ms: 0,
            counter: None,
            fence_value: 0,
        };
        (cmd, Until::AllIn)
    }

    /// Until when to wait, read at `now` after the round: the [`Retry::timer`] its `PTTL`s
    /// give. `None`: no wait (the round could not run: the client is going away, and the next
    /// try says so).
    pub(crate) fn deadline(
        &self,
        cfg: &Config,
        read: &Result<(Round, Instant), Error>,
        now: Instant,
    ) -> Option<Instant> {
        let (round, _) = read.as_ref().ok()?;
        Some(crate::core::time::later(
            now,
            Retry::timer(cfg, round, self.wait),
        ))
    }

    /// The wait is over: woken by the watch (`Some(cause)`) or by the timer. Records it; `true`
    /// when the waiter should pause for the jitter before its next try (it was woken, as
    /// other waiters of the same push may have been).
    pub(crate) fn end(self, woken: Option<crate::core::engine::Wake>, now: Instant) -> bool {
        let cause = woken.map_or("timer", |w| w.as_str());
        let waited = now.saturating_duration_since(self.started);
        crate::observe::waited(self.key[0].as_str(), cause, waited);
        woken.is_some()
    }
}

impl Retry {
    /// `lock`'s policy: the configured tries, each wait the random retry delay at most.
    pub(crate) fn new(cfg: &Config) -> Retry {
        Retry {
            left: Some(cfg.tries),
            delay: cfg.retry_delay,
            deadline: None,
            wakeups: cfg.wakeups,
        }
    }

    /// `lock_within`'s policy: tries until `max_wait` after `now`, the last at that deadline
    /// at the latest, each wait as `lock`'s but never past the deadline.
    pub(crate) fn within(cfg: &Config, max_wait: Duration, now: Instant) -> Retry {
        Retry {
            left: None,
            delay: cfg.retry_delay,
            deadline: Some(crate::core::time::later(now, max_wait)),
            wakeups: cfg.wakeups,
        }
    }

    /// After a try of `names` that ended with `err` at `now`: give up, or wait (watching the
    /// held resource when wake-ups are on), then try again. Waits are uniform in
    /// [delay/2, delay] (which keeps competing clients from retrying in step), cut short at
    /// the deadline of `lock_within`. A plain wait is recorded (observability) as it is
    /// decided.
    pub(crate) fn after(
        &mut self,
        err: Error,
        names: &[Name],
        now: Instant,
        rng: &mut dyn Randomness,
    ) -> Next {
        let retriable = matches!(
            err,
            Error::Conflict { .. } | Error::NoQuorum { .. } | Error::ValiditySpent { .. }
        );
        if let Some(left) = self.left.as_mut() {
            *left = left.saturating_sub(1);
        }
        let out_of_time = self.deadline.is_some_and(|d| now >= d);
        if !retriable || self.left == Some(0) || out_of_time {
            return Next::Fail(err);
        }
        let hi = self.delay;
        let lo = hi / 2;
        let mut wait = if hi > lo {
            let span = (hi - lo).as_nanos().min(u128::from(u64::MAX)) as u64;
            lo + Duration::from_nanos(rng.up_to(span))
        } else {
            hi
        };
        if let Some(deadline) = self.deadline {
            wait = wait.min(deadline.saturating_duration_since(now));
        }
        match err {
            Error::Conflict { held, .. } if self.wakeups => {
                let key = held
                    .as_deref()
                    .map(Name::new)
                    .or_else(|| names.first().cloned());
                match key {
                    Some(key) => Next::Watch(Waiting::new(key, wait, now)),
                    None => Next::Wait(wait),
                }
            }
            _ => {
                let resource = names.first().map_or("", Name::as_str);
                crate::observe::waited(resource, "delay", wait);
                Next::Wait(wait)
            }
        }
    }

    /// How long a watcher waits at most, from the end of its `PTTL` round: `wait` (what
    /// [`after`](Retry::after) allowed), or less if the nodes' `PTTL`s say a quorum of them
    /// will have let the key go sooner (by expiry, whose push may come late or never; a key
    /// already gone on a quorum means at once).
    pub(crate) fn timer(cfg: &Config, pttl: &Round, wait: Duration) -> Duration {
        // When each node's key will be gone: known for a node that answered with a ttl or
        // that it has no key; unknown for a key without expiry or a node that did not answer.
        let mut free_in: SmallVec<[Duration; 8]> = (0..pttl.len())
            .filter_map(|i| match pttl.read(i) {
                Some(Extra::Number(-2)) => Some(Duration::ZERO),
                // Expiry is checked to the millisecond: a millisecond more is past it.
                Some(Extra::Number(ms)) if ms >= 0 => {
                    Some(Duration::from_millis(ms.unsigned_abs().saturating_add(1)))
                }
                _ => None,
            })
            .collect();
        if free_in.len() < cfg.quorum {
            return wait;
        }
        free_in.sort_unstable();
        free_in[cfg.quorum - 1].min(wait)
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
