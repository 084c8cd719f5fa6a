//! Keys, values and expiry on the master's own clock, and the invalidations that writes and
//! expiries send to tracking connections.
//!
//! Expiry is lazy, at access, as Redis' own (its active expiry only deletes earlier what no
//! command could read anyway): a key whose deadline `now` has passed (`now > expire_at`) is
//! deleted by the first command that looks it up, which invalidates it as a write would.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::reply::encode_invalidation;
use super::{ConnId, Master};

/// A value (a string, or a sorted set: `zset.rs`) and its deadline on the master's clock, in
/// milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    pub(crate) expire_at: Option<u64>,
}

/// What a key holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// A string.
    Str(Bytes),
    /// A sorted set (fair mode's lines).
    Zset(super::zset::Zset),
}

/// The error of a command run on a key of the other type, as Redis words it.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Value {
    /// The string, if the value is one.
    pub(crate) fn as_str(&self) -> Option<&Bytes> {
        match self {
            Value::Str(b) => Some(b),
            Value::Zset(_) => None,
        }
    }

    /// The string, or the error of a string command run on another type.
    pub(crate) fn string(self) -> Result<Bytes, String> {
        match self {
            Value::Str(b) => Ok(b),
            Value::Zset(_) => Err(WRONGTYPE.into()),
        }
    }
}

impl Entry {
    /// A string entry.
    pub(crate) fn string(value: Bytes, expire_at: Option<u64>) -> Entry {
        Entry {
            value: Value::Str(value),
            expire_at,
        }
    }

    pub(crate) fn expired(&self, now: u64) -> bool {
        self.expire_at.is_some_and(|at| now > at)
    }
}

/// Every database's keys.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keyspace {
    pub(crate) dbs: BTreeMap<u32, BTreeMap<Bytes, Entry>>,
}

/// Which connections remembered which keys (one table for every database, as Redis keeps).
pub(crate) type Tracked = BTreeMap<Bytes, BTreeSet<ConnId>>;

/// The command being run: its connection, database and time, and the invalidations owed to
/// its own connection after its reply.
#[derive(Debug)]
pub(crate) struct Ex<'a> {
    pub(crate) conn: ConnId,
    pub(crate) db: u32,
    pub(crate) now: u64,
    /// Keys read by this command are remembered for its connection's tracking.
    pub(crate) remember: bool,
    /// Keys this command invalidated for its own connection, pushed after its reply.
    pub(crate) pending: Vec<Bytes>,
    /// Messages this command published to its own connection on a server that pushes them
    /// after the reply (channel, message).
    pub(crate) messages: Vec<(Bytes, Bytes)>,
    /// While a script runs: the keys its command declared (`EVAL sha n keys...`).
    pub(crate) script_keys: Option<&'a [&'a [u8]]>,
}

impl Master {
    /// The live entry of `key`, for a command that reads it: expires it first, and remembers
    /// the key for tracking (whether or not it exists). A read inside a script remembers, on
    /// servers that do so, every key the script's command declared instead.
    pub(crate) fn read(&mut self, ex: &mut Ex, key: &[u8]) -> Option<Entry> {
        self.read_with(ex, key, |e| e.cloned())
    }

    /// What `f` makes of the live entry of `key`, read as [`read`](Master::read) reads it
    /// (expired first, remembered for tracking), without a copy of the entry.
    pub(crate) fn read_with<R>(
        &mut self,
        ex: &mut Ex,
        key: &[u8],
        f: impl FnOnce(Option<&Entry>) -> R,
    ) -> R {
        let e = self.look(ex, key, f);
        if ex.remember {
            let declared = ex
                .script_keys
                .filter(|_| self.profile.server.tracks_declared_script_keys());
            let keys = declared.unwrap_or(std::slice::from_ref(&key));
            for k in keys {
                match self.tracked.get_mut(&k[..]) {
                    Some(conns) => {
                        conns.insert(ex.conn);
                    }
                    None => {
                        let conns = BTreeSet::from([ex.conn]);
                        self.tracked.insert(Bytes::copy_from_slice(k), conns);
                    }
                }
            }
        }
        e
    }

    /// The live entry of `key`, for a command that may write it: expires it first.
    pub(crate) fn lookup(&mut self, ex: &mut Ex, key: &[u8]) -> Option<Entry> {
        self.look(ex, key, |e| e.cloned())
    }

    /// What `f` makes of the live entry of `key`, looked up as [`lookup`](Master::lookup)
    /// does (expired first), without a copy of the entry.
    pub(crate) fn look<R>(
        &mut self,
        ex: &mut Ex,
        key: &[u8],
        f: impl FnOnce(Option<&Entry>) -> R,
    ) -> R {
        let Some(db) = self.keys.dbs.get_mut(&ex.db) else {
            return f(None);
        };
        match db.get(key) {
            Some(e) if e.expired(ex.now) => {
                db.remove(key);
                self.invalidate(ex, key);
                f(None)
            }
            other => f(other),
        }
    }

    /// Stores `entry` under `key`, a write.
    pub(crate) fn store(&mut self, ex: &mut Ex, key: &[u8], entry: Entry) {
        let db = self.keys.dbs.entry(ex.db).or_default();
        match db.get_mut(key) {
            Some(e) => *e = entry,
            None => {
                db.insert(Bytes::copy_from_slice(key), entry);
            }
        }
        self.invalidate(ex, key);
    }

    /// Deletes `key` (after [`lookup`](Master::lookup)); whether it was there.
    pub(crate) fn remove(&mut self, ex: &mut Ex, key: &[u8]) -> bool {
        let gone = self
            .keys
            .dbs
            .get_mut(&ex.db)
            .and_then(|db| db.remove(key))
            .is_some();
        if gone {
            self.invalidate(ex, key);
        }
        gone
    }

    /// Tells every connection that remembered `key` that it changed, and forgets them: at
    /// once, or, for the connection running the command, after its reply where the server
    /// does so.
    pub(crate) fn invalidate(&mut self, ex: &mut Ex, key: &[u8]) {
        let Some(targets) = self.tracked.remove(key) else {
            return;
        };
        let defer = self.profile.server.defers_own_invalidations();
        for id in targets {
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            let Some(t) = conn.tracking else {
                continue;
            };
            if id == ex.conn && t.noloop {
                continue;
            }
            if id == ex.conn && defer {
                ex.pending.push(Bytes::copy_from_slice(key));
            } else if conn.resp3 && !conn.closed {
                // RESP2 without a redirection has nowhere to send it: Redis sends nothing.
                encode_invalidation(key, &mut conn.out);
                conn.check_output();
            }
        }
    }
}
