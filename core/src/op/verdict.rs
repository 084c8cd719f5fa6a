//! What a round means: the ttl an operation may be asked with, when an acquire round gives a
//! lock and what error it is otherwise, when a release or extension is confirmed.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::{Error, NodeOutcome};
use crate::round::{Decision, Round};
use crate::rules::validity_after;

/// Checks a ttl given to an acquisition or an extension: its whole milliseconds (rounded
/// down, as sent), and the ttl those stand for.
pub fn ttl_ms(cfg: &Config, ttl: Duration) -> Result<(u64, Duration), Error> {
    let ms = cfg.check_ttl(ttl)?;
    Ok((ms, Duration::from_millis(ms)))
}

/// The nodes (of the first 64) that said yes in `round`, one bit each.
pub(crate) fn granted_mask(round: &Round) -> u64 {
    round
        .reports_iter()
        .take(64)
        .enumerate()
        .filter(|(_, o)| matches!(o, NodeOutcome::Ok))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// Whether no node of a lost acquire round can hold any of its keys: every node answered that
/// another token holds one (`SET NX` refused; the acquire script rolled back what it had set)
/// or was not asked (down). Then there is nothing to release and the release round is
/// skipped. A node that timed out, failed or was still to answer may have set a key, so any
/// other outcome releases; with fail-fast on, a lost round usually ends before every node has
/// answered, so the saving is mostly for fail-fast off, where every answer is awaited.
pub(crate) fn refused_everywhere(round: &Round) -> bool {
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
pub fn acquired(
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
                nodes: round.reports_for(cfg),
                held: None,
            })
        }
        _ => Err(Error::NoQuorum {
            nodes: round.reports_for(cfg),
        }),
    }
}

/// The rule for a release or extend round: confirmed by a quorum, or whose fault it was not.
/// `expired` says whether the lock's validity had run out when the round ended: a native
/// command's "not ours" (held by another, or gone: it cannot say) then reads as gone, and as
/// held by another while the lock was still valid.
pub fn confirmed(cfg: &Config, round: &Round, expired: bool) -> Result<(), Error> {
    if round.decision() == Decision::Won {
        Ok(())
    } else {
        Err(not_confirmed(cfg, round, expired))
    }
}

/// Why a release or extend round was not won.
fn not_confirmed(cfg: &Config, round: &Round, expired: bool) -> Error {
    let nodes = || round.reports_for(cfg);
    let not_ours = round.count(&NodeOutcome::NotOurs);
    if round.count(&NodeOutcome::Held) > 0 || (not_ours > 0 && !expired) {
        Error::NotHeld { nodes: nodes() }
    } else if round.count(&NodeOutcome::Gone) + not_ours > 0 && contention(cfg, round) {
        Error::Expired
    } else {
        Error::NoQuorum { nodes: nodes() }
    }
}
