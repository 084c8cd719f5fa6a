//! The keep-alive rules of both clients' guards, sans I/O: when to extend, when loss must be
//! reported at the latest, and what the policy's limits mean. A guard asks [`plan`] what to do
//! next, sleeps until then, and does it.

use std::time::{Duration, Instant};

use crate::error::{ConfigError, Error};
use crate::lock::Lock;

/// How a guard (the async `redlock_mux::LockGuard`, the blocking
/// `redlock_mux::BlockingGuard`) keeps its lock alive.
///
/// By default: extend when less than half the ttl is left, and stop extending one hour after
/// the guard started (the lock then runs out within one more ttl, and the guard reports
/// [`Loss::Expired`]). Redlock asks for a bound on how long one holder may keep a lock by
/// extending it, so that a holder stuck in a loop cannot starve everyone else; set your own
/// with [`max_hold`](KeepAlive::max_hold) or [`max_extensions`](KeepAlive::max_extensions),
/// or lift it with [`unlimited`](KeepAlive::unlimited) where a job may legitimately run for
/// longer (`redlock run` does, and says so).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use redlock_core::KeepAlive;
/// let policy = KeepAlive::default().extend_when_left(0.25).max_extensions(10);
/// assert_eq!(policy.threshold(), 0.25);
/// assert_eq!(KeepAlive::default().hold_limit(), Some(Duration::from_secs(3600)));
/// assert_eq!(KeepAlive::default().unlimited().hold_limit(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeepAlive {
    threshold: f64,
    max_extensions: Option<u32>,
    max_hold: Option<Duration>,
}

/// How long, by default, a guard goes on extending its lock: one hour.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(3600);

impl Default for KeepAlive {
    /// Extend when less than half the ttl is left; no extension starts more than
    /// [`DEFAULT_MAX_HOLD`] after the guard started.
    fn default() -> Self {
        KeepAlive {
            threshold: 0.5,
            max_extensions: None,
            max_hold: Some(DEFAULT_MAX_HOLD),
        }
    }
}

impl KeepAlive {
    /// Extend once the validity left falls below `fraction` of the ttl (clamped to
    /// [0.05, 0.95]). Lower leaves less slack for a slow extension. Whatever the fraction, an
    /// extension starts early enough for a round that takes the whole node timeout to end
    /// before the loss deadline (see `redlock_mux::LockGuard` and
    /// `redlock_mux::BlockingGuard`).
    pub fn extend_when_left(mut self, fraction: f64) -> Self {
        self.threshold = if fraction.is_finite() {
            fraction.clamp(0.05, 0.95)
        } else {
            0.5
        };
        self
    }

    /// Stop extending after `n` extensions: the lock then runs out at the end of its
    /// validity, and the guard reports [`Loss::Expired`] before it does.
    pub fn max_extensions(mut self, n: u32) -> Self {
        self.max_extensions = Some(n);
        self
    }

    /// Start no extension later than `d` after the guard started (so the lock is held at
    /// most `d` plus one ttl), then report [`Loss::Expired`] before the validity ends.
    pub fn max_hold(mut self, d: Duration) -> Self {
        self.max_hold = Some(d);
        self
    }

    /// No limit on extensions or on the time held: the lock is kept as long as the guard
    /// lives and the nodes answer.
    pub fn unlimited(mut self) -> Self {
        self.max_extensions = None;
        self.max_hold = None;
        self
    }

    /// The fraction of the ttl below which an extension is started.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// The limit on the time held by extending, if any.
    pub fn hold_limit(&self) -> Option<Duration> {
        self.max_hold
    }
}

/// How long before the end of a guarded lock's validity the guard reports loss at the
/// latest: a twentieth of the ttl, at least 2 ms and at most one second. That is the time the
/// work has to notice and stop while the lock still holds.
pub fn loss_margin(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(2), Duration::from_secs(1))
}

/// Why a guarded lock was lost.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Loss {
    /// An extension failed: the lock is held at most until its current validity ends, and
    /// maybe not even that (another client may hold it).
    ExtendFailed(Error),
    /// An extension was still unconfirmed when the loss deadline came (the validity's end
    /// less [`loss_margin`]): the lock can no longer be counted on.
    ExtendTooSlow,
    /// The validity is about to run out without an extension (the extension limit or the
    /// hold limit was reached).
    Expired,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::ExtendFailed(e) => write!(f, "extension failed: {e}"),
            Loss::ExtendTooSlow => f.write_str("extension not confirmed before the validity's end"),
            Loss::Expired => f.write_str("validity about to run out (keep-alive limit reached)"),
        }
    }
}

/// What a guard does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A limit is reached: report [`Loss::Expired`] at the deadline.
    Expire,
    /// Nothing until then (the hold limit falls before the next extension): plan again.
    Wait(Instant),
    /// Extend at this instant, racing the extension against the deadline.
    Extend(Instant),
}

/// The next step for `lock`, and the deadline: the latest moment loss may be reported (the
/// validity's end less [`loss_margin`], which the work needs to stop in).
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// The latest moment loss may be reported.
    pub deadline: Instant,
    /// What to do next.
    pub step: Step,
}

/// The latest moment loss of `lock` may be reported: its validity's end less [`loss_margin`].
pub fn loss_deadline(lock: &Lock) -> Instant {
    lock.valid_until
        .checked_sub(loss_margin(lock.ttl))
        .unwrap_or(lock.valid_until)
}

/// What the loss deadline passing without a report means, for a guard in the state `plan`
/// takes: a limit reached ([`Loss::Expired`], as the plan says), or an extension that did not
/// come in time ([`Loss::ExtendTooSlow`]). Both guards derive loss from the clock with it, so
/// that loss is known by the deadline whatever their keep-alive is doing.
pub fn overdue(
    lock: &Lock,
    policy: &KeepAlive,
    started: Instant,
    extensions: u32,
    node_timeout: Duration,
    now: Instant,
) -> Loss {
    match plan(lock, policy, started, extensions, node_timeout, now).step {
        Step::Expire => Loss::Expired,
        _ => Loss::ExtendTooSlow,
    }
}

/// The plan for `lock` under `policy`, at `now`, for a guard started at `started` that has
/// extended `extensions` times. An extension starts early enough (the policy's threshold, or the node
/// timeout plus the margin if that is more) for a round of the whole node timeout to end by
/// the deadline.
pub fn plan(
    lock: &Lock,
    policy: &KeepAlive,
    started: Instant,
    extensions: u32,
    node_timeout: Duration,
    now: Instant,
) -> Plan {
    let margin = loss_margin(lock.ttl);
    let deadline = loss_deadline(lock);
    let limit_reached = policy.max_extensions.is_some_and(|max| extensions >= max)
        || policy
            .max_hold
            .is_some_and(|max| now.saturating_duration_since(started) >= max);
    if limit_reached {
        return Plan {
            deadline,
            step: Step::Expire,
        };
    }
    let slack = Duration::try_from_secs_f64(lock.ttl.as_secs_f64() * policy.threshold)
        .unwrap_or(Duration::ZERO)
        .max(node_timeout.saturating_add(margin));
    let wake = lock.valid_until.checked_sub(slack).unwrap_or(deadline);
    if let Some(max) = policy.max_hold {
        // Past the hold limit no extension starts: plan again then, to report at the deadline.
        let end = crate::time::later(started, max);
        if end < wake {
            return Plan {
                deadline,
                step: Step::Wait(end),
            };
        }
    }
    Plan {
        deadline,
        step: Step::Extend(wake.min(deadline)),
    }
}

/// Refuses a ttl too short for keep-alive to work: one whose best validity could not hold an
/// extension round (up to the node timeout) and the loss margin.
pub fn check_ttl(cfg: &crate::Config, ttl: Duration) -> Result<(), Error> {
    let (_, ttl) = crate::op::ttl_ms(cfg, ttl)?;
    let best_validity = ttl.saturating_sub(crate::rules::drift(ttl, cfg.drift_factor));
    if best_validity <= cfg.node_timeout.saturating_add(loss_margin(ttl)) {
        return Err(ConfigError::KeepAlive {
            ttl,
            node_timeout: cfg.node_timeout,
        }
        .into());
    }
    Ok(())
}
