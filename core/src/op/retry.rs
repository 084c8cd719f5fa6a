//! The retries of `lock`: which errors are worth another try, how long to wait, and the watch
//! of a held resource while waiting ([`Waiting`]).

use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::command::{Command, Extra, OpKind};
use crate::config::Config;
use crate::error::Error;
use crate::event::{Event, Events};
use crate::lock::Name;
use crate::random::Randomness;
use crate::round::{Round, Until};

/// The retry policy of `lock`: which errors are worth another round, how many rounds (or
/// until when), and how long to wait between them.
#[derive(Debug)]
pub struct Retry {
    /// Tries left; `None`: as many as fit before `deadline`.
    left: Option<u32>,
    delay: Duration,
    /// `lock_within`: no try starts after this.
    deadline: Option<Instant>,
    wakeups: bool,
    /// Fair mode (and a single resource): waiters join the resource's line.
    fair: bool,
    /// Fair mode: the longest wait for a bell ([`FAIR_WAIT_LEASES`] claim leases).
    fair_wait: Duration,
}

/// What to do after a failed round.
#[derive(Debug)]
pub enum Next {
    /// Give up with this error.
    Fail(Error),
    /// Wait this long, then try again.
    Wait(Duration),
    /// The resource is held: wait for it to change ([`Waiting`]), then try again.
    Watch(Waiting),
}

/// How many claim leases a waiter in line (fair mode) waits for its bell at most before it
/// tries again, when the masters' `PTTL`s say nothing sooner: the bound on a line that lost
/// its hand-off (a reservation that lapsed with nobody to hand it on).
pub const FAIR_WAIT_LEASES: u32 = 8;

/// The most a woken waiter waits before its next try, at random: waiters woken by the same
/// push do not all send their `SET NX` in the same instant.
pub const WAKE_JITTER: Duration = Duration::from_micros(500);

/// A random pause in `0..=WAKE_JITTER`, taken after a wake-up.
pub fn wake_jitter(rng: &mut dyn Randomness) -> Duration {
    let us = WAKE_JITTER.as_micros() as u64;
    Duration::from_micros(rng.up_to(us))
}

/// A jitter as a number of yields to a runtime whose timer cannot sleep less than a
/// millisecond (tokio's): 0 to 4, in proportion to the jitter drawn.
pub fn jitter_yields(jitter: Duration) -> u32 {
    let us = jitter.as_micros().min(WAKE_JITTER.as_micros()) as u32;
    us * 4 / (WAKE_JITTER.as_micros() as u32).max(1)
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
pub struct Waiting {
    /// The resource watched: the one found held; in fair mode every resource of the lock
    /// (a set stands in the line of each).
    key: crate::lock::Names,
    pub(super) wait: Duration,
    started: Instant,
    /// Fair mode: the read is the wait script, which joins the line, and the watch fires on
    /// the client's bell for the resource.
    fair: bool,
    /// Fair mode: the line's key ([`crate::command::queue_key`]; a set's,
    /// [`crate::command::lines_key`], names each of its lines), which the watch is registered
    /// under: the engine tells a waiter in a line from one that is not (a waiter without fair
    /// mode) by it.
    line: Option<Box<[u8]>>,
    /// Fair mode: the waiter's own ttl in ms (see [`crate::script::WAIT`]).
    pub(super) ttl_ms: u64,
    /// When the wait ends at the latest, set by its first read: a second read (after a
    /// lapse, [`crate::engine::Wake::Lapse`]) never makes it longer.
    pub(super) until: Option<Instant>,
    /// Whether the line was read again after a lapse (once per wait: a later wake-up is the
    /// next try).
    pub(super) relooked: bool,
    /// Whether that second read found the resource free or reserved for the caller on a
    /// quorum (its timer then ends the wait at once, and the wait is recorded as ended by
    /// the lapse, not by a timer).
    pub(super) lapsed: bool,
    /// Whether the latest read found the resources free or reserved for the caller on a
    /// quorum (see [`free_at_once`](Waiting::free_at_once)).
    pub(super) free: bool,
}

impl Waiting {
    /// A wait for `key` of at most `wait` (what [`Retry::after`] allowed), starting at `now`.
    pub fn new(key: Name, wait: Duration, now: Instant) -> Waiting {
        Waiting {
            key: smallvec::smallvec![key],
            wait,
            started: now,
            fair: false,
            line: None,
            ttl_ms: 0,
            until: None,
            relooked: false,
            lapsed: false,
            free: false,
        }
    }

    /// Makes the wait one in the lines of `names` (fair mode: the resource's, or every
    /// resource's of a set): its read joins them, and its watch is registered under the
    /// line's key (a set's names every line).
    pub(super) fn join_line(&mut self, names: &[Name]) {
        if names.len() > 1 {
            self.key = names.iter().cloned().collect();
        }
        let mut line = Vec::new();
        match &self.key[..] {
            [one] => crate::command::queue_key(one.as_bytes(), &mut line),
            set => crate::command::lines_key(set, &mut line),
        }
        self.line = Some(line.into());
        self.fair = true;
    }

    /// Whether the wait is in a line (fair mode).
    pub fn is_fair(&self) -> bool {
        self.fair
    }

    /// Fair mode: whether the wait is a set's, in the line of each of its resources. Its
    /// timer may end before the wait does: a set that keeps reservations while it waits for
    /// the rest of its resources is told to read again within half a claim lease (the read
    /// renews them), and reads again rather than try (see [`crate::script::WAIT`]).
    pub fn is_set(&self) -> bool {
        self.fair && self.key.len() > 1
    }

    /// When a set's wait ends at the latest: what [`Retry::after`] allowed from its start.
    pub(super) fn set_until(&self) -> Instant {
        crate::time::later(self.started, self.wait)
    }

    /// The key to watch: the resource's, or in fair mode its line's (bells for the resource
    /// fire the watches of its line).
    pub fn key_bytes(&self) -> &[u8] {
        match &self.line {
            Some(line) => line,
            None => self.key.first().map_or(&b""[..], Name::as_bytes),
        }
    }

    /// The key to watch, owned.
    pub fn key(&self) -> Box<[u8]> {
        self.key_bytes().into()
    }

    /// The read that makes the tracking servers note the key, in a round that waits for every
    /// node; a set's (fair mode) is over once a quorum has answered: its reads renew the
    /// reservations it keeps, every half lease from the read's start, and a master slow to
    /// answer must not hold the next renewal back past the lease on the others.
    pub fn round(&self) -> (Command<'_>, Until) {
        let cmd = Command {
            kind: if self.fair {
                OpKind::Wait
            } else {
                OpKind::Watch
            },
            resources: &self.key,
            token: None,
            ttl_ms: self.ttl_ms,
            counter: None,
            fence_value: 0,
            watch: None,
        };
        let until = if self.is_set() {
            Until::WonOrAllIn
        } else {
            Until::AllIn
        };
        (cmd, until)
    }

    /// Fair mode: after the wait round `read`, the ticket to move this client's place to on
    /// every master (the largest any of them gave it), if they gave it different ones: the
    /// masters then order the line alike (equal tickets by client id).
    pub fn retick(&self, read: &Result<(Round, Instant), Error>) -> Option<u64> {
        // (A set's place is not moved: the move is one line's `ZADD`. Its lines may order it
        // differently on different masters when it joins within microseconds of another.)
        if !self.fair || self.key.len() > 1 {
            return None;
        }
        let (round, _) = read.as_ref().ok()?;
        let tickets: SmallVec<[u64; 8]> = (0..round.node_count())
            .filter_map(|i| match round.read(i) {
                Some(Extra::Waited { ticket, .. }) if ticket > 0 => Some(ticket),
                _ => None,
            })
            .collect();
        let max = tickets.iter().copied().max()?;
        (!tickets.iter().all(|&t| t == max)).then_some(max)
    }

    /// Fair mode: the largest ticket the masters answered the wait round `read` with.
    pub fn ticket(&self, read: &Result<(Round, Instant), Error>) -> Option<u64> {
        let (round, _) = read.as_ref().ok()?;
        (0..round.node_count())
            .filter_map(|i| match round.read(i) {
                Some(Extra::Waited { ticket, .. }) if ticket > 0 => Some(ticket),
                _ => None,
            })
            .max()
    }

    /// The command that moves this client's place to `ticket` (see [`retick`](Waiting::retick)).
    pub fn retick_to(&self, ticket: u64) -> Command<'_> {
        Command {
            kind: OpKind::Retick,
            resources: &self.key,
            token: None,
            ttl_ms: 0,
            counter: None,
            fence_value: ticket,
            watch: None,
        }
    }

    /// Until when to wait, read at `now` after the round: the [`Retry::timer`] its `PTTL`s
    /// give. `None`: no wait (the round could not run: the client is going away, and the next
    /// try says so).
    pub fn deadline(
        &self,
        cfg: &Config,
        read: &Result<(Round, Instant), Error>,
        now: Instant,
    ) -> Option<Instant> {
        let (round, _) = read.as_ref().ok()?;
        let at = crate::time::later(now, Retry::timer(cfg, round, self.wait));
        Some(self.until.map_or(at, |until| at.min(until)))
    }

    /// Whether the round `read` found the resource free, or reserved for the caller, on a
    /// quorum of nodes (its timer is then zero).
    pub fn free_at_once(&self, cfg: &Config, read: &Result<(Round, Instant), Error>) -> bool {
        read.as_ref()
            .is_ok_and(|(round, _)| Retry::timer(cfg, round, self.wait).is_zero())
    }

    /// The wait is over: woken by the watch (`Some(cause)`) or by the timer. Records it; `true`
    /// when the waiter should pause for the jitter before its next try (it was woken, as
    /// other waiters of the same push may have been).
    pub fn end(
        self,
        woken: Option<crate::engine::Wake>,
        now: Instant,
        events: &mut Events,
    ) -> bool {
        let timer = if self.lapsed { "lapse" } else { "timer" };
        let cause = woken.map_or(timer, |w| w.as_str());
        let waited = now.saturating_duration_since(self.started);
        let resource = self.key.into_iter().next().unwrap_or_else(|| Name::new(""));
        events.push(Event::Waited {
            resource,
            cause,
            waited,
        });
        woken.is_some()
    }
}

/// Fair mode's longest wait for a bell (see [`FAIR_WAIT_LEASES`]).
fn fair_wait(cfg: &Config) -> Duration {
    cfg.fair.as_ref().map_or(Duration::ZERO, |f| {
        Duration::from_millis(f.claim_ms.saturating_mul(u64::from(FAIR_WAIT_LEASES)))
    })
}

impl Retry {
    /// `lock`'s policy: the configured tries, each wait the random retry delay at most.
    pub fn new(cfg: &Config) -> Retry {
        Retry {
            left: Some(cfg.tries),
            delay: cfg.retry_delay,
            deadline: None,
            wakeups: cfg.wakeups,
            fair: cfg.fair.is_some(),
            fair_wait: fair_wait(cfg),
        }
    }

    /// Whether a try of `names` that finds the resource held would wait in its line (fair
    /// mode, wake-ups on, one resource, and a policy that may try again): its first try then
    /// joins the line in the same call ([`crate::command::OpKind::Enter`]).
    pub fn lines(&self, names: &[Name]) -> bool {
        self.fair && self.wakeups && names.len() == 1 && self.left != Some(1)
    }

    /// Gives back the try the last failure took (a set's claim refused at a bell, which kept
    /// its place).
    pub(super) fn refund(&mut self) {
        if let Some(left) = self.left.as_mut() {
            *left = left.saturating_add(1);
        }
    }

    /// The same policy with no watch and no line: the retry delay between tries (a
    /// semaphore's permits).
    pub fn polling(self) -> Retry {
        Retry {
            wakeups: false,
            fair: false,
            ..self
        }
    }

    /// A single try (`try_lock`): no retry, whatever the error.
    pub fn once() -> Retry {
        Retry {
            left: Some(1),
            delay: Duration::ZERO,
            deadline: None,
            wakeups: false,
            fair: false,
            fair_wait: Duration::ZERO,
        }
    }

    /// `lock_within`'s policy: tries until `max_wait` after `now`, the last at that deadline
    /// at the latest, each wait as `lock`'s but never past the deadline.
    pub fn within(cfg: &Config, max_wait: Duration, now: Instant) -> Retry {
        Retry {
            left: None,
            delay: cfg.retry_delay,
            deadline: Some(crate::time::later(now, max_wait)),
            wakeups: cfg.wakeups,
            fair: cfg.fair.is_some(),
            fair_wait: fair_wait(cfg),
        }
    }

    /// After a try of `names` that ended with `err` at `now`: give up, or wait (watching the
    /// held resource when wake-ups are on), then try again. Waits are uniform in
    /// [delay/2, delay] (which keeps competing clients from retrying in step), cut short at
    /// the deadline of `lock_within`. A plain wait is recorded (observability) as it is
    /// decided. `lined`: whether a fair waiter may wait in the resource's line (`false` after
    /// a first try refused by masters that keep no line, which a user who may run neither
    /// scripts nor functions meets: it then waits as without fair mode).
    pub fn after(
        &mut self,
        err: Error,
        names: &[Name],
        lined: bool,
        now: Instant,
        rng: &mut dyn Randomness,
        events: &mut Events,
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
        let fair = self.fair && lined && self.wakeups;
        if fair && matches!(err, Error::Conflict { .. }) {
            // In line, a waiter waits for its bell; its timer is what the masters' `PTTL`s
            // say (the holder's key, or a reservation and the lock it will become), not the
            // retry delay: every waiter polling at that delay would cost the masters more
            // than the line saves.
            wait = self.fair_wait;
        }
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
                    Some(key) => {
                        let mut waiting = Waiting::new(key, wait, now);
                        // In the line of each resource (a set in all of them at once).
                        if fair {
                            waiting.join_line(names);
                        }
                        Next::Watch(waiting)
                    }
                    None => Next::Wait(wait),
                }
            }
            _ => {
                let resource = names.first().cloned().unwrap_or_else(|| Name::new(""));
                events.push(Event::Waited {
                    resource,
                    cause: "delay",
                    waited: wait,
                });
                Next::Wait(wait)
            }
        }
    }

    /// How long a watcher waits at most, from the end of its `PTTL` round: `wait` (what
    /// [`after`](Retry::after) allowed), or less if the nodes' `PTTL`s say a quorum of them
    /// will have let the key go sooner (by expiry, whose push may come late or never; a key
    /// already gone on a quorum means at once).
    pub fn timer(cfg: &Config, pttl: &Round, wait: Duration) -> Duration {
        // When each node's key will be gone: known for a node that answered with a ttl or
        // that it has no key; unknown for a key without expiry or a node that did not answer.
        let mut free_in: SmallVec<[Duration; 8]> = (0..pttl.node_count())
            .filter_map(|i| match pttl.read(i) {
                // No key, or (fair mode's wait) reserved for this client: at once.
                Some(Extra::Number(-2 | -3) | Extra::Waited { pttl: -2 | -3, .. }) => {
                    Some(Duration::ZERO)
                }
                // Expiry is checked to the millisecond: a millisecond more is past it.
                Some(Extra::Number(ms) | Extra::Waited { pttl: ms, .. }) if ms >= 0 => {
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
