//! Counting semaphores over the same masters as the locks: `permits` holders at most, each
//! holding one slot, a lock of its own.
//!
//! A semaphore named `n` with `k` permits is the `k` slots `n:permit:0` ..
//! `n:permit:{k-1}`, each a lock's key. A permit is a lock on one slot: acquired by a
//! quorum of masters as any lock is, released and extended as any lock is (its
//! [`Lock`](crate::Lock)).
//! At most one holder per slot holds it within its validity (the lock's argument), and there
//! are `k` slots, so at most `k` holders hold permits at once, with no counting on the masters
//! and the lock's quorum (a majority) whatever `k` is.
//!
//! (Counting holders in one key per master, a sorted set of tokens that admits `k`, needs a
//! larger quorum to be safe: `k + 1` holders, each admitted by `q` masters of `N` that admit
//! `k` each, are possible as long as `(k + 1) q <= k N`, so `q` must exceed `k N / (k + 1)`,
//! which is every master as `k` grows. Five masters and `k = 2`: three holders admitted by
//! three masters each fit in ten places. Slots keep the majority, and so the tolerance of
//! `N - quorum` masters down.)
//!
//! A try asks every master, in one call ([`script::PERMIT`](crate::script::PERMIT)), for
//! the first free slot in an order the caller draws at random for the try: masters in the
//! same state give the same slot, and callers trying at once seldom race for the same one.
//! The try wins when a quorum gave it one slot; the slots other masters gave it are released
//! at once.

use crate::error::ConfigError;
use crate::lock::{Name, Names};

/// The most permits one semaphore may have: a try's call names every slot.
pub const MAX_PERMITS: usize = 256;

/// The infix between a semaphore's name and a slot's number in the slot's key.
const SLOT_INFIX: &str = ":permit:";

/// A counting semaphore: its name and how many holders it admits at once (see the module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semaphore {
    name: String,
    slots: Names,
}

impl Semaphore {
    /// The semaphore `name` with `permits` permits (slots `name:permit:0` ..).
    ///
    /// Errors: [`ConfigError::Permits`] for no permits, more than [`MAX_PERMITS`], or an
    /// empty name. Every client of a semaphore must use the same number of permits: a client
    /// that uses more admits holders on slots the others never try.
    pub fn new(name: &str, permits: usize) -> Result<Semaphore, ConfigError> {
        if name.is_empty() || permits == 0 || permits > MAX_PERMITS {
            return Err(ConfigError::Permits {
                name: name.to_string(),
                permits,
                max: MAX_PERMITS,
            });
        }
        let slots = (0..permits)
            .map(|i| Name::new(&format!("{name}{SLOT_INFIX}{i}")))
            .collect();
        Ok(Semaphore {
            name: name.to_string(),
            slots,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> usize {
        self.slots.len()
    }

    /// The key of slot `i` (`name:permit:i`), if there is one.
    pub fn slot_key(&self, i: usize) -> Option<&str> {
        self.slots.get(i).map(Name::as_str)
    }

    /// The slots, in order.
    pub(crate) fn slots(&self) -> &[Name] {
        &self.slots
    }

    /// Which slot the key `resource` is, if it is one of this semaphore's: a permit's
    /// `lock.resource()` names its slot.
    pub fn slot_of(&self, resource: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.as_str() == resource)
    }
}
