//! [`Lock`]: a held lock, and how long it may still be relied on.

use std::fmt;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::Token;

/// A resource name, stored inline up to 64 bytes (no heap allocation for the names locks
/// usually have) and on the heap beyond.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Name(SmallVec<[u8; 64]>);

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Name {
    pub(crate) fn new(s: &str) -> Name {
        Name(SmallVec::from_slice(s.as_bytes()))
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub(crate) fn as_str(&self) -> &str {
        // Only ever built from a `&str`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// A lock acquired on a quorum of nodes.
///
/// It is valid until [`valid_until`](Lock::valid_until): the instant the first command was
/// sent, plus the ttl, minus the clock-drift allowance, minus nothing else. That is the
/// earliest moment any node may expire the key. Work that relies on the lock must finish
/// before then; [`validity`](Lock::validity) tells how much time is left. Past it, the lock
/// protects nothing, whatever the nodes still hold.
///
/// Redlock gives no fencing token: a holder paused (GC, swap, SIGSTOP) past its validity can
/// still act afterwards. Protect the resource itself (for example with a version check) where
/// that matters.
///
/// Dropping a `Lock` does not release it (the keys expire with their ttl); call
/// `unlock` for that.
#[derive(Clone)]
pub struct Lock {
    pub(crate) resource: Name,
    pub(crate) token: Token,
    pub(crate) valid_until: Instant,
    pub(crate) ttl: Duration,
}

impl Lock {
    /// A lock handle for a token obtained elsewhere (say, printed by `redlock lock` in another
    /// process), so that it can be released or inspected. It claims no validity: it is
    /// already expired, so `extend` refuses it, while `unlock` releases it if the token still
    /// holds the key.
    pub fn from_token(resource: &str, token: Token) -> Lock {
        Lock {
            resource: Name::new(resource),
            token,
            valid_until: Instant::now(),
            ttl: Duration::ZERO,
        }
    }

    /// The resource (the Redis key) this lock is held on.
    pub fn resource(&self) -> &str {
        self.resource.as_str()
    }

    /// The token stored under the key: proof of ownership for release and extension.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The time left before the lock may expire on some node, from the monotonic clock; zero
    /// once it has.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the validity has run out.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.valid_until
    }

    /// The monotonic instant at which the validity runs out.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The ttl the lock was last acquired or extended with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("resource", &self.resource.as_str())
            .field("token", &self.token)
            .field("validity", &self.validity())
            .finish()
    }
}
