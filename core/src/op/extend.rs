//! Extension: the cap on the lock's validity before the round, what the round gives after, and
//! the [`Extend`] operation.

use std::borrow::BorrowMut;
use std::time::{Duration, Instant};

use super::verdict::{confirmed, ttl_ms};
use crate::config::Config;
use crate::error::Error;
use crate::lock::Lock;
use crate::round::Round;
use crate::rules::{drift, validity_after};

/// The latest a lock can still be relied on once an extension to `ttl`, started at `t1`,
/// may have reached some node: a node that ran the `PEXPIRE` lets the key go `ttl` after it
/// ran it, which is no earlier than `t1 + ttl`, less the drift allowance. Saturates at `t1`
/// (a ttl within the drift allowance promises nothing).
fn extension_cap(cfg: &Config, t1: Instant, ttl: Duration) -> Instant {
    let left = ttl
        .checked_sub(drift(ttl, cfg.drift_factor))
        .unwrap_or(Duration::ZERO);
    crate::time::later(t1, left)
}

/// Before an extension round of `lock` to `ttl`: checks the ttl, refuses a lock whose validity
/// has run out ([`Error::Expired`], nothing to send: extending it would hide a gap in which it
/// was not held), and caps the lock's validity at what it will be worth if the round fails.
///
/// The cap is applied before anything is sent, so that it holds however the round ends:
/// with success, with an error, or never (an async caller that drops the future). Some nodes
/// may run the `PEXPIRE` whatever the outcome, and after it their key lives `ttl`, not what
/// the lock had left: a shortened extension that failed still shortened the keys.
pub fn begin_extend(
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
pub fn finish_extend(
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
    lock.valid_until = crate::time::later(now, validity);
    lock.ttl = ttl;
    Ok(())
}

/// The extension of a lock to a new ttl: one round, with the lock's validity capped before it
/// goes out (so the cap holds however the round ends, abandoned included) and set from the
/// round after it.
///
/// `L` is how it has the lock: borrowed (`&mut Lock`, as the clients run it within one call)
/// or owned (`Lock`, for a driver that keeps the operation across its waits, as the simulator
/// does; [`into_parts`](Extend::into_parts) gives the lock back).
#[derive(Debug)]
pub struct Extend<L> {
    lock: L,
    ttl: Duration,
    /// The checked ttl, once the round is out.
    sent: Option<Duration>,
    result: Option<Result<(), Error>>,
}

impl<L: BorrowMut<Lock>> Extend<L> {
    /// The extension of `lock` to `ttl` (checked when the operation starts).
    pub fn new(lock: L, ttl: Duration) -> Extend<L> {
        Extend {
            lock,
            ttl,
            sent: None,
            result: None,
        }
    }

    /// The result (as [`finish`](super::Operation::finish)) and the lock, its validity as
    /// the extension left it.
    pub fn into_parts(self) -> (Result<(), Error>, L) {
        (self.result.unwrap_or(Err(Error::Aborted)), self.lock)
    }
}

impl<L: BorrowMut<Lock>> super::Operation for Extend<L> {
    type Output = ();

    fn step<'a>(
        &'a mut self,
        input: super::Input,
        cfg: &'a Config,
        cx: &mut super::Cx<'_>,
    ) -> super::Step<'a> {
        use super::{Input, Step};
        match (input, self.sent) {
            (Input::Start, None) => {
                match begin_extend(cfg, self.lock.borrow_mut(), self.ttl, cx.now) {
                    Ok((ms, ttl)) => {
                        self.sent = Some(ttl);
                        Step::Round(self.lock.borrow().extension(ms), cfg.until())
                    }
                    Err(e) => {
                        self.result = Some(Err(e));
                        Step::Done
                    }
                }
            }
            (Input::Round(round), Some(ttl)) => {
                let lock = self.lock.borrow_mut();
                self.result = Some(
                    round.and_then(|(round, t1)| finish_extend(cfg, lock, &round, t1, cx.now, ttl)),
                );
                Step::Done
            }
            _ => Step::Done,
        }
    }

    fn finish(self) -> Result<(), Error> {
        self.result.unwrap_or(Err(Error::Aborted))
    }

    fn name(&self) -> &'static str {
        "extend"
    }
}
