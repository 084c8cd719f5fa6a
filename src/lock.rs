//! [`Lock`]: a held lock, and how long it may still be relied on.

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, Instant};

pub(crate) use redlock_core::lock::{names, Name, Names};

use crate::{Error, Token};

/// A lock acquired on a quorum of nodes.
///
/// It is valid until [`valid_until`](redlock_core::Lock::valid_until): the instant the first
/// command was sent, plus the ttl, minus the clock-drift allowance, minus nothing else. That is
/// the earliest moment any node may expire the key. Work that relies on the lock must finish
/// before then; [`validity`](Lock::validity) tells how much time is left. Past it, the lock
/// protects nothing, whatever the nodes still hold.
///
/// A holder paused (GC, swap, SIGSTOP) past its validity can still act afterwards. Where that
/// matters, build the client with [`fencing(true)`](crate::Builder::fencing): every lock then
/// carries a [`fencing_token`](redlock_core::Lock::fencing_token) that increases from one
/// holder to the next, for the resource to check.
///
/// A lock over several resources (`lock_many`) holds all of them with one token; `unlock`
/// and `extend` act on the whole set.
///
/// Dropping a `Lock` does not release it (the keys expire with their ttl); call
/// `unlock` for that.
///
/// It wraps the core's record of the lock ([`redlock_core::Lock`], whose methods it has
/// through `Deref`: `resource`, `resources`, `token`, `fencing_token`, `valid_until`,
/// `granted_by`, `ttl`) and adds what needs the clock.
#[derive(Clone)]
pub struct Lock(pub(crate) redlock_core::Lock);

impl Lock {
    /// A lock handle for a token obtained elsewhere (say, printed by `redlock lock` in another
    /// process), so that it can be released or inspected. It claims no validity: it is
    /// already expired, so `extend` refuses it, while `unlock` releases it if the token still
    /// holds the key.
    pub fn from_token(resource: &str, token: Token) -> Lock {
        Lock(redlock_core::Lock::from_token(
            resource,
            token,
            Instant::now(),
        ))
    }

    /// [`from_token`](Lock::from_token) for a lock over several resources, taken with
    /// `lock_many`. Errors as `lock_many` does for an empty or repeating list.
    pub fn from_token_many(resources: &[&str], token: Token) -> Result<Lock, Error> {
        redlock_core::Lock::from_token_many(resources, token, Instant::now()).map(Lock)
    }

    /// The time left before the lock may expire on some node, from the monotonic clock; zero
    /// once it has.
    pub fn validity(&self) -> Duration {
        self.0.validity_at(Instant::now())
    }

    /// Whether the validity has run out.
    pub fn is_expired(&self) -> bool {
        self.0.is_expired_at(Instant::now())
    }
}

impl Deref for Lock {
    type Target = redlock_core::Lock;

    fn deref(&self) -> &redlock_core::Lock {
        &self.0
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("resources", &self.0.resources().collect::<Vec<_>>())
            .field("token", self.0.token())
            .field("fencing_token", &self.0.fencing_token())
            .field("validity", &self.validity())
            .finish()
    }
}
