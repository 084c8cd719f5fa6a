//! [`Lock`]: a held lock, and how long it may still be relied on.

use std::fmt;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::error::ConfigError;
use crate::Token;

/// A resource name, stored inline up to 64 bytes (no heap allocation for the names locks
/// usually have) and on the heap beyond.
#[derive(PartialEq, Eq)]
pub struct Name(SmallVec<[u8; 64]>);

impl Clone for Name {
    /// One copy of the bytes (`SmallVec`'s own `clone` goes byte by byte).
    fn clone(&self) -> Name {
        Name(SmallVec::from_slice(&self.0))
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Name {
    /// The name `s`.
    #[inline]
    pub fn new(s: &str) -> Name {
        Name(SmallVec::from_slice(s.as_bytes()))
    }

    /// The name as the key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only ever built from a `&str`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The resources of one lock: one, inline, for the usual lock; several for a lock over a set
/// (`lock_many`).
pub type Names = SmallVec<[Name; 1]>;

/// The most resources one lock may cover: every node runs one script over all of them, and a
/// script over thousands of keys holds the server for as long.
pub const MAX_RESOURCES: usize = 1024;

/// The resource list of a lock, checked: at least one, at most [`MAX_RESOURCES`], no
/// duplicates (a set given twice the same key would lock it against itself).
pub fn names(resources: &[&str]) -> Result<Names, ConfigError> {
    if resources.is_empty() || resources.len() > MAX_RESOURCES {
        return Err(ConfigError::Resources {
            count: resources.len(),
            max: MAX_RESOURCES,
        });
    }
    let mut out = Names::with_capacity(resources.len());
    for r in resources {
        if out.iter().any(|n: &Name| n.as_bytes() == r.as_bytes()) {
            return Err(ConfigError::DuplicateResource((*r).to_string()));
        }
        out.push(Name::new(r));
    }
    Ok(out)
}

/// A lock acquired on a quorum of nodes: the core's record of it, which reads no clock
/// (`redlock-mux`'s `Lock` wraps it, with `validity()` from the monotonic clock).
///
/// It is valid until [`valid_until`](Lock::valid_until): the instant the first command was
/// sent, plus the ttl, minus the clock-drift allowance, minus nothing else. That is the
/// earliest moment any node may expire the key. Work that relies on the lock must finish
/// before then; [`validity_at`](Lock::validity_at) tells how much time is left. Past it, the lock
/// protects nothing, whatever the nodes still hold.
///
/// A holder paused (GC, swap, SIGSTOP) past its validity can still act afterwards. Where that
/// matters, build the client with `fencing(true)`: every lock then
/// carries a [`fencing_token`](Lock::fencing_token) that increases from one holder to the
/// next, for the resource to check.
///
/// A lock over several resources (`lock_many`) holds all of them with one token; `unlock`
/// and `extend` act on the whole set.
///
/// Dropping a `Lock` does not release it (the keys expire with their ttl); call
/// `unlock` for that.
#[derive(Clone)]
pub struct Lock {
    pub(crate) resources: Names,
    pub(crate) token: Token,
    pub(crate) valid_until: Instant,
    pub(crate) ttl: Duration,
    pub(crate) fencing: Option<u64>,
    /// The nodes (of the first 64) that granted the acquisition, one bit each.
    pub(crate) granted: u64,
}

impl Lock {
    /// A lock handle for a token obtained elsewhere (say, printed by `redlock lock` in another
    /// process), so that it can be released or inspected. It claims no validity: it is
    /// already expired, so `extend` refuses it, while `unlock` releases it if the token still
    /// holds the key.
    /// `now` is the instant it is made: its validity ends there.
    pub fn from_token(resource: &str, token: Token, now: Instant) -> Lock {
        Lock {
            resources: smallvec::smallvec![Name::new(resource)],
            token,
            valid_until: now,
            ttl: Duration::ZERO,
            fencing: None,
            granted: 0,
        }
    }

    /// [`from_token`](Lock::from_token) for a lock over several resources, taken with
    /// `lock_many`. Errors as `lock_many` does for an empty or repeating list.
    pub fn from_token_many(
        resources: &[&str],
        token: Token,
        now: Instant,
    ) -> Result<Lock, crate::Error> {
        Ok(Lock {
            resources: names(resources)?,
            token,
            valid_until: now,
            ttl: Duration::ZERO,
            fencing: None,
            granted: 0,
        })
    }

    /// The resource (the Redis key) this lock is held on; for a lock over several resources,
    /// the first one given (see [`resources`](Lock::resources)).
    #[inline]
    pub fn resource(&self) -> &str {
        self.resources.first().map_or("", Name::as_str)
    }

    /// Every resource this lock holds, in the order given.
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.resources.iter().map(Name::as_str)
    }

    /// The fencing token, when the client was built with
    /// `fencing(true)`: a number that is strictly greater than the
    /// token of every holder whose validity ended before this lock was acquired (gaps
    /// allowed). Hand it to the resource with every write, and have the resource refuse a
    /// write carrying a token lower than the highest it has seen: a holder that was paused
    /// past its validity is then refused. `None` for an unfenced lock. The guarantee and its
    /// assumptions are in `docs/redlock.md`.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing
    }

    /// The token stored under the key: proof of ownership for release and extension.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The time left at `now` before the lock may expire on some node; zero once it has.
    pub fn validity_at(&self, now: Instant) -> Duration {
        self.valid_until.saturating_duration_since(now)
    }

    /// Whether the validity has run out at `now`.
    pub fn is_expired_at(&self, now: Instant) -> bool {
        now >= self.valid_until
    }

    /// The monotonic instant at which the validity runs out.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The nodes whose yes won this lock when it was acquired, by their index in the client's
    /// node list (the first 64 nodes only), in order: at least a quorum. A node that answered
    /// after the round was decided (fail-fast) may hold the key too and is not listed. Empty
    /// for a lock made by [`from_token`](Lock::from_token). For diagnosis: which masters were
    /// counted.
    pub fn granted_by(&self) -> impl Iterator<Item = usize> + '_ {
        (0..64).filter(move |i| self.granted & (1 << i) != 0)
    }

    /// The ttl the lock was last acquired or extended with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

impl Lock {
    /// The release of this lock's token on all of its resources.
    pub fn release(&self) -> crate::command::Command<'_> {
        self.extension(0).with_kind(crate::command::OpKind::Release)
    }

    /// The extension of all of its resources to `ttl_ms`.
    pub fn extension(&self, ttl_ms: u64) -> crate::command::Command<'_> {
        crate::command::Command {
            kind: crate::command::OpKind::Extend,
            resources: &self.resources,
            token: Some(&self.token),
            ttl_ms,
            counter: None,
            fence_value: 0,
            watch: None,
        }
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("resources", &self.resources)
            .field("token", &self.token)
            .field("fencing_token", &self.fencing)
            .field("valid_until", &self.valid_until)
            .finish()
    }
}
