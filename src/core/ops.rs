//! The order of an operation, and what its rounds mean: the ttl an operation may be asked
//! with, when an acquire round gives a lock and what error it is otherwise (and that a lost
//! acquisition is released everywhere, which the clients do with the round this says), when a
//! release or extension is confirmed, how an extension changes the lock's validity whatever
//! its outcome, and the retries of `lock`. Both clients call these; neither decides any of it.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::config::Config;
use crate::core::round::{Decision, Round};
use crate::core::rules::{drift, validity_after};
use crate::error::{Error, NodeOutcome};
use crate::lock::Lock;
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
    confirmed(cfg, round)?;
    let validity = validity_after(cfg, t1, now, ttl)?;
    lock.valid_until = crate::core::time::later(t1, validity);
    lock.ttl = ttl;
    Ok(())
}

/// What an acquisition comes to, given its round (or why the round could not be run): the
/// lock, or the error. After an error the token must be released on every node before the
/// caller hears of it ([`release_after`]): a node may have set the key and lost the reply, or
/// answered after the round was decided.
pub(crate) fn acquisition(
    cfg: &Config,
    round: Result<(Round, Instant), Error>,
    now: Instant,
    resource: &str,
    token: Token,
    ttl: Duration,
) -> Result<Lock, Error> {
    let (round, t1) = round?;
    let validity = acquired(cfg, &round, t1, now, ttl)?;
    Ok(granted(resource, token, t1, validity, ttl))
}

/// Whether an acquisition that ended this way must release its token on every node (with a
/// round that waits for every node: [`Until::AllIn`](crate::core::round::Until::AllIn)).
/// Its outcome changes nothing for the caller: what it leaves expires with the ttl.
pub(crate) fn release_after(acquisition: &Result<Lock, Error>) -> bool {
    acquisition.is_err()
}

/// The lock an acquisition round that started at `t1` won.
pub(crate) fn granted(
    resource: &str,
    token: Token,
    t1: Instant,
    validity: Duration,
    ttl: Duration,
) -> Lock {
    Lock {
        resource: crate::lock::Name::new(resource),
        token,
        valid_until: crate::core::time::later(t1, validity),
        ttl,
    }
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
            })
        }
        _ => Err(Error::NoQuorum {
            nodes: round.reports(&cfg.nodes),
        }),
    }
}

/// The rule for a release or extend round: confirmed by a quorum, or whose fault it was not.
pub(crate) fn confirmed(cfg: &Config, round: &Round) -> Result<(), Error> {
    if round.decision() == Decision::Won {
        Ok(())
    } else {
        Err(not_confirmed(cfg, round))
    }
}

/// Why a release or extend round was not won.
fn not_confirmed(cfg: &Config, round: &Round) -> Error {
    let nodes = || round.reports(&cfg.nodes);
    if round.count(&NodeOutcome::Held) > 0 {
        Error::NotHeld { nodes: nodes() }
    } else if round.count(&NodeOutcome::Gone) > 0 && contention(cfg, round) {
        Error::Expired
    } else {
        Error::NoQuorum { nodes: nodes() }
    }
}

/// The retry policy of `lock`: which errors are worth another round, how many rounds, and the
/// random delay between them.
#[derive(Debug)]
pub(crate) struct Retry {
    left: u32,
    delay: Duration,
}

/// What to do after a failed round.
#[derive(Debug)]
pub(crate) enum Next {
    /// Give up with this error.
    Fail(Error),
    /// Wait this long, then try again.
    Wait(Duration),
}

impl Retry {
    pub(crate) fn new(cfg: &Config) -> Retry {
        Retry {
            left: cfg.tries,
            delay: cfg.retry_delay,
        }
    }

    /// After a round that ended with `err`: retry (after a delay uniform in
    /// [delay/2, delay], which keeps competing clients from retrying in step), or give up.
    pub(crate) fn after(&mut self, err: Error) -> Next {
        self.left = self.left.saturating_sub(1);
        let retriable = matches!(
            err,
            Error::Conflict { .. } | Error::NoQuorum { .. } | Error::ValiditySpent { .. }
        );
        if !retriable || self.left == 0 {
            return Next::Fail(err);
        }
        let hi = self.delay;
        let lo = hi / 2;
        let wait = if hi > lo {
            rand::rng().random_range(lo..=hi)
        } else {
            hi
        };
        Next::Wait(wait)
    }
}
