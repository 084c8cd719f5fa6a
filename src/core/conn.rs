//! One node's connection state, sans I/O: its buffers, the FIFO of replies still owed, the
//! login handshake, and the reconnect backoff.
//!
//! Redis answers the commands of one connection in order. Every command written is pushed on
//! the `owed` queue with the id of the operation it belongs to; every reply read pops the
//! queue's head. So a reply that arrives after its operation gave up on it (a timeout, or a
//! round decided early) is matched to that old operation and dropped: it can never be taken
//! for the answer to a later command. A reply with nothing owed, a protocol error, a failed
//! login, or a queue grown past [`MAX_OWED`] means the connection can no longer be trusted:
//! the driver drops it and reconnects after a backoff.
//!
//! That matching rests on the transport: an ordered byte stream that loses nothing (TCP, TLS,
//! a Unix socket). A middlebox that drops bytes from the middle of a live stream would shift
//! every later reply onto the command before it. Two checks catch such a stream and drop the
//! connection before more of it is read: a reply whose shape cannot answer the command it is
//! matched to (see `Expect::fits`), and a sentinel, `PING <nonce>`, queued ahead of new
//! commands whenever a reply is owed past its deadline (a lost command or reply shows as a
//! missing or misplaced nonce). See docs/redlock.md, "The transport".

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use resp::{encode_command, Decoder, Frame, Limits};

use crate::config::{NodeAddr, Scripts};
use crate::core::eviction::Eviction;
use crate::core::forms::{self, Forms, Sent, MAX_RESENDS};
use crate::error::NodeOutcome;

/// Bytes that may wait to be written to a node whose socket has taken nothing for a node
/// timeout before the connection is considered stuck. Below it, or while the socket takes
/// bytes, a large buffer is back-pressure, not a failure: the commands go out as the node
/// reads them, and a round that cannot finish in time ends at its deadline as any other.
pub(crate) const MAX_PENDING_WRITE: usize = 1 << 20;
/// The first reconnect delay after a failure; doubles with each failure in a row.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(5);
/// The longest reconnect delay.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long a connect may stay in progress before it counts as failed.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long past its queueing a reply may still be owed before its connection is replaced:
/// four node timeouts, and never under half a second (a reply that late has missed its round
/// long ago either way).
pub(crate) fn stale_after(node_timeout: Duration) -> Duration {
    node_timeout
        .saturating_mul(4)
        .max(Duration::from_millis(500))
}

/// The start of every sentinel's nonce (`PING redlock-sync:<n>`); a `GET` reply that starts
/// with it is a sentinel's answer out of place.
const SYNC_PREFIX: &[u8] = b"redlock-sync:";

/// Whether a bulk reply is a sentinel's answer (see [`Conn`]).
pub(crate) fn is_sync_reply(b: &[u8]) -> bool {
    b.starts_with(SYNC_PREFIX)
}

/// The decoder limits for replies to lock commands: far above anything a real reply needs,
/// low enough that a hostile node cannot make a connection hold more than about a megabyte.
pub(crate) fn reply_limits() -> Limits {
    Limits::new()
        .with_max_bulk_len(1 << 20)
        .with_max_elements(1024)
        .with_max_depth(16)
        .with_max_line_len(64 * 1024)
}

/// How a command is queued ([`Conn::queue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How<'a> {
    /// Not a script call: written as it is, its reply handed over as it is.
    Plain,
    /// An `EVALSHA` of one of our scripts: the connection writes it in the form it uses
    /// (see [`crate::core::forms`]), keeps the copy, and sends it again in the next form when
    /// the server refuses one. With its native forms (Valkey's, Redis') when it has them.
    Script(Option<(&'a [u8], &'a [u8])>),
}

/// A reply to a driver's command.
#[derive(Debug, PartialEq)]
pub(crate) struct Reply<T> {
    pub(crate) tag: T,
    pub(crate) frame: Frame,
    /// It answers the server's native command (its shape is the native one).
    pub(crate) native: bool,
    /// An acquisition the server refused in the form it was sent in (or found no script
    /// for), which could go again in another form: only if its round still waits for this
    /// node ([`Conn::send_again`]). Once the round is decided the client may already have
    /// queued the release behind it, and an acquisition sent again now would land after that
    /// release and take a key nobody releases.
    pub(crate) again: Option<Again>,
}

/// An acquisition that may be sent again (see [`Reply::again`]).
#[derive(Debug, PartialEq)]
pub(crate) struct Again {
    form: Sent,
    copy: BytesMut,
    at: Instant,
    resends: u8,
}

/// Who a reply in the FIFO belongs to; `T` is what the driver keeps for its own commands.
#[derive(Debug)]
enum Owner<T> {
    /// A login command (`AUTH`, `SELECT`) sent when the connection opened: an error reply
    /// fails the connection.
    Handshake,
    /// `HELLO` (without a protocol version, or `HELLO 3` when wake-ups are on): the server
    /// says what it is (name and version), which tells whether it has native
    /// compare-and-delete commands. An error (a server older than `HELLO`, or one where it was
    /// renamed away) leaves it unknown, and the connection on RESP2.
    Hello {
        /// It asked for RESP3: a reply that is not an error switches the connection to it,
        /// and `CLIENT TRACKING ON OPTIN` follows.
        resp3: bool,
    },
    /// `CLIENT TRACKING ON OPTIN`, sent once the server has agreed to RESP3: `+OK` means
    /// its invalidation pushes will come on this connection, for the keys read right after a
    /// `CLIENT CACHING YES`.
    Tracking,
    /// `CLIENT CACHING YES` before a waiter's read: the reply (an error too, on a server
    /// that refused tracking) says nothing the read does not.
    Caching,
    /// `CONFIG GET maxmemory-policy`, sent by a fenced client's connections to the node
    /// (its address, for the warning when the policy cannot be read): whether the server may
    /// evict the fencing counter ([`Eviction`]).
    Eviction(Box<str>),
    /// A `SCRIPT LOAD` sent so that `EVALSHA` finds the scripts: an error reply is ignored
    /// (the `EVAL` fallback covers a script that is missing).
    Preload,
    /// A sentinel, `PING redlock-sync:<n>`, queued ahead of new commands while an older
    /// reply is overdue: anything but the same nonce back means replies and commands are out
    /// of step.
    Sync(u32),
    /// A driver's command, when it was queued, the length of its canonical copy (its
    /// `EVALSHA` form) at the head of [`Conn::scripted`] if it is a script call (0: it is
    /// not), the form it went out in, and how many times it was sent again.
    Op(T, Instant, usize, Sent, u8),
}

/// Why a connection must be dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnError {
    /// The peer sent bytes that are not RESP, or that break the limits.
    Protocol(resp::ErrorKind),
    /// A reply arrived with nothing owed: the stream is not in step with our commands.
    Unsolicited,
    /// The login failed (`AUTH` or `SELECT` answered with an error).
    Handshake(String),
    /// Too many replies owed, or too many bytes waiting to be written.
    Stuck,
    /// A reply that cannot answer the command it is matched to, or a sentinel answered
    /// wrongly: the stream lost or gained bytes, and no later reply can be trusted.
    Desync,
}

impl ConnError {
    /// The outcome to record for a node whose connection failed this way.
    pub(crate) fn outcome(&self) -> NodeOutcome {
        match self {
            ConnError::Protocol(k) => NodeOutcome::Protocol(*k),
            ConnError::Unsolicited => NodeOutcome::Server("reply to a command never sent".into()),
            ConnError::Handshake(msg) => NodeOutcome::Server(msg.clone()),
            ConnError::Stuck => NodeOutcome::Timeout,
            ConnError::Desync => NodeOutcome::Server(
                "a reply out of step with its command (the connection was replaced)".into(),
            ),
        }
    }
}

/// A server's own commands for a lock's release and extension, without a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Native {
    /// Valkey 9.0 and later: `DELIFEQ key token`, `SET key token IFEQ token PX ttl`.
    Valkey,
    /// Redis 8.4 and later: `DELEX key IFEQ token`, `SET key token IFEQ token PX ttl`.
    Redis,
}

impl Native {
    /// What a `HELLO` reply (a RESP2 array of names and values, or a RESP3 map) says the
    /// server has.
    pub(crate) fn of_hello(reply: &Frame) -> Option<Native> {
        fn text(f: &Frame) -> Option<&[u8]> {
            match f {
                Frame::Bulk(b) | Frame::Simple(b) => Some(b.as_ref()),
                _ => None,
            }
        }
        let field = |name: &[u8]| -> Option<&[u8]> {
            match reply.without_attributes() {
                Frame::Map(pairs) => pairs
                    .iter()
                    .find(|(k, _)| text(k) == Some(name))
                    .and_then(|(_, v)| text(v)),
                Frame::Array(items) => items
                    .chunks(2)
                    .find(|kv| kv.first().and_then(text) == Some(name))
                    .and_then(|kv| kv.get(1).and_then(text)),
                _ => None,
            }
        };
        let server = field(b"server")?;
        let version = std::str::from_utf8(field(b"version")?).ok()?;
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next()?, parts.next().unwrap_or(0));
        match server {
            b"valkey" if major >= 9 => Some(Native::Valkey),
            b"redis" if (major, minor) >= (8, 4) => Some(Native::Redis),
            _ => None,
        }
    }
}

/// One connection's buffers and bookkeeping.
#[derive(Debug)]
pub(crate) struct Conn<T> {
    /// Bytes waiting to be written, in order.
    pub(crate) out: BytesMut,
    /// Bytes read and not yet decoded.
    pub(crate) inb: BytesMut,
    decoder: Decoder,
    owed: VecDeque<Owner<T>>,
    /// The canonical copies (`EVALSHA` forms) of the script calls still owed a reply, in
    /// order: sent again in another form when the server refuses the one sent, dropped
    /// otherwise.
    scripted: BytesMut,
    max_owed: usize,
    backoff: Duration,
    retry_at: Option<Instant>,
    /// The forms this connection's script calls take, and what its server has refused.
    forms: Forms,
    /// Why the last `SCRIPT LOAD` / `FUNCTION LOAD` failed, if one did.
    load_error: Option<String>,
    /// `NOSCRIPT`s answered with the `EVAL` form, over the connection's whole life.
    noscript_fallbacks: u64,
    /// The server agreed to RESP3 on this connection (`HELLO 3`).
    resp3: bool,
    /// The server pushes invalidations of the keys read after `CLIENT CACHING YES` on this
    /// connection (client-side tracking is on, opt-in).
    tracking: bool,
    /// Invalidations pushed since the engine last took them.
    invalidated: Vec<Invalidated>,
    /// How long a command may wait for its reply before it is overdue (the node timeout): a
    /// command queued while an older reply is overdue gets a sentinel ahead of it.
    overdue_after: Duration,
    /// The last sentinel's nonce.
    syncs: u32,
    /// The server refused the sentinel (`PING` denied by an ACL, or renamed away): none is
    /// sent on this connection again; the shape checks and the stale limit remain.
    sync_refused: bool,
    /// When the socket last took bytes (or `out` last went from empty to not), as far as
    /// the last `queue` knows: with `wrote_since`, what tells a slow node from a stuck one.
    progress_at: Option<Instant>,
    /// Bytes were written since `progress_at` was last set.
    wrote_since: bool,
    /// Whether a new connection asks the server's eviction policy (fenced clients).
    check_eviction: bool,
    /// What the server said of it on this connection, once it has.
    eviction: Option<Eviction>,
    /// Connections on which the policy could not be read, over the node's whole life.
    eviction_unchecked: u64,
}

/// What an invalidation push from a tracking server says changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invalidated {
    /// This key was written, deleted or expired.
    Key(bytes::Bytes),
    /// Every key may have changed (the server flushed its data, or more was pushed than the
    /// connection keeps).
    All,
}

/// Invalidations a connection keeps between two looks by the engine; past this they collapse
/// into [`Invalidated::All`], so a server that pushes without end costs a bounded buffer.
const MAX_INVALIDATED: usize = 64;

/// The keys an invalidation push names: `Some(keys)` for `>2 invalidate [keys]`, `Some(None)`
/// for the flush form (`>2 invalidate _`), `None` for any other push.
fn invalidation(push: &[Frame]) -> Option<Option<&[Frame]>> {
    let (kind, keys) = match push {
        [kind, keys] => (kind, keys),
        _ => return None,
    };
    let is_invalidate = match kind {
        Frame::Bulk(b) | Frame::Simple(b) => b.eq_ignore_ascii_case(b"invalidate"),
        _ => false,
    };
    if !is_invalidate {
        return None;
    }
    match keys {
        Frame::Array(keys) | Frame::Set(keys) => Some(Some(keys)),
        _ => Some(None),
    }
}

/// Writes sentinel `n`'s nonce into `out`; returns its length.
fn sync_nonce(n: u32, digits: &mut resp::IntBuf, out: &mut [u8; 32]) -> usize {
    let d = digits.format(i64::from(n));
    let len = SYNC_PREFIX.len() + d.len();
    out[..SYNC_PREFIX.len()].copy_from_slice(SYNC_PREFIX);
    out[SYNC_PREFIX.len()..len].copy_from_slice(d);
    len
}

/// Whether `reply` is sentinel `n`'s own nonce.
fn sync_answered(n: u32, reply: &Frame) -> bool {
    let mut digits = resp::IntBuf::new();
    let mut nonce = [0u8; 32];
    let len = sync_nonce(n, &mut digits, &mut nonce);
    matches!(reply.without_attributes(), Frame::Bulk(b) if b.as_ref() == &nonce[..len])
}

/// Whether `reply` is the server refusing `PING` itself (an ACL's `NOPERM` naming it, or the
/// command renamed away): an answer in the sentinel's place, and no other command's.
fn is_ping_refusal(reply: &Frame) -> bool {
    match reply.without_attributes() {
        Frame::Error(m) | Frame::BulkError(m) => {
            forms::is_refusal(reply) && m.windows(6).any(|w| w.eq_ignore_ascii_case(b"'ping'"))
        }
        _ => false,
    }
}

/// Whether `reply` has a shape that can answer `owner`'s command (see `Expect::fits` for the
/// driver's commands, which the engine checks): a login command's `+OK`, `HELLO`'s map, a
/// script's digest, a sentinel's own nonce. An error reply answers any but a sentinel.
fn owner_fits<T>(owner: &Owner<T>, reply: &Frame) -> bool {
    let reply = reply.without_attributes();
    let error = matches!(reply, Frame::Error(_) | Frame::BulkError(_));
    match owner {
        // Checked where it is answered (`Conn::next`).
        Owner::Sync(_) => true,
        Owner::Handshake | Owner::Tracking | Owner::Caching => {
            error || matches!(reply, Frame::Simple(_))
        }
        Owner::Hello { .. } | Owner::Eviction(_) => {
            error || matches!(reply, Frame::Map(_) | Frame::Array(_))
        }
        Owner::Preload => error || matches!(reply, Frame::Bulk(_) | Frame::Simple(_)),
        Owner::Op(..) => true,
    }
}

impl<T> Conn<T> {
    /// A connection that may owe up to `max_owed` replies, whose replies are overdue
    /// `overdue_after` (the node timeout) after their command was queued.
    pub(crate) fn new(max_owed: usize, overdue_after: Duration) -> Self {
        Conn {
            out: BytesMut::with_capacity(4096),
            inb: BytesMut::with_capacity(16 * 1024),
            decoder: Decoder::new(reply_limits()),
            owed: VecDeque::with_capacity(max_owed.min(1024)),
            scripted: BytesMut::with_capacity(4096),
            max_owed,
            backoff: Duration::ZERO,
            retry_at: None,
            forms: Forms::new(Scripts::Auto),
            load_error: None,
            noscript_fallbacks: 0,
            resp3: false,
            tracking: false,
            invalidated: Vec::new(),
            overdue_after,
            syncs: 0,
            sync_refused: false,
            progress_at: None,
            wrote_since: false,
            check_eviction: false,
            eviction: None,
            eviction_unchecked: 0,
        }
    }

    /// The same connection, asking the server's eviction policy on every connect when
    /// `check` (a fenced client: see [`evicting`](Conn::evicting)).
    pub(crate) fn checking_eviction(mut self, check: bool) -> Self {
        self.check_eviction = check;
        self
    }

    /// The server's eviction policy, if it said on this connection that it may evict the
    /// fencing counter. A reply to a command queued after the connection opened comes after
    /// the policy's, so it is known by the time such a reply is judged.
    pub(crate) fn evicting(&self) -> Option<&str> {
        match &self.eviction {
            Some(Eviction::Evicts(policy)) => Some(policy),
            _ => None,
        }
    }

    /// Connections on which the server's eviction policy could not be read.
    pub(crate) fn eviction_unchecked(&self) -> u64 {
        self.eviction_unchecked
    }

    /// Queues `CLIENT CACHING YES`, which makes the server track the key of the next command
    /// (a waiter's read), where the connection speaks RESP3. Nothing otherwise.
    pub(crate) fn queue_caching(&mut self, now: Instant) {
        if self.resp3 {
            // A sentinel, if one is due, goes first: `CACHING YES` applies to the very next
            // command, which must be the read.
            if self.needs_sync(now) {
                self.queue_sync();
            }
            encode_command(&mut self.out, &[b"CLIENT", b"CACHING", b"YES"]);
            self.owed.push_back(Owner::Caching);
        }
    }

    /// Whether the server pushes invalidations of the keys read on this connection.
    pub(crate) fn tracking(&self) -> bool {
        self.tracking
    }

    /// Invalidations pushed since the last call (none, usually: no allocation then).
    pub(crate) fn take_invalidated(&mut self) -> Option<Vec<Invalidated>> {
        if self.invalidated.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.invalidated))
        }
    }

    /// Keeps what an invalidation push says, within [`MAX_INVALIDATED`].
    fn note_push(&mut self, push: &[Frame]) {
        let Some(keys) = invalidation(push) else {
            // Not an invalidation (no other push is subscribed to): ignored.
            return;
        };
        let full = |v: &Vec<Invalidated>| {
            v.len() >= MAX_INVALIDATED || v.last() == Some(&Invalidated::All)
        };
        match keys {
            Some(keys) => {
                for key in keys {
                    if full(&self.invalidated) {
                        self.invalidated.clear();
                        self.invalidated.push(Invalidated::All);
                        return;
                    }
                    if let Frame::Bulk(k) | Frame::Simple(k) = key {
                        self.invalidated.push(Invalidated::Key(k.clone()));
                    }
                }
            }
            None => {
                self.invalidated.clear();
                self.invalidated.push(Invalidated::All);
            }
        }
    }

    /// `NOSCRIPT`s answered with the `EVAL` form so far.
    pub(crate) fn noscript_fallbacks(&self) -> u64 {
        self.noscript_fallbacks
    }

    /// Bytes of buffer capacity held (read and write buffers).
    pub(crate) fn buffered_capacity(&self) -> usize {
        self.inb.capacity() + self.out.capacity() + self.scripted.capacity()
    }

    /// Starts a fresh connection: clears all state and queues the login commands (and, with
    /// `wakeups`, the request for RESP3 and tracking).
    pub(crate) fn opened(&mut self, addr: &NodeAddr, scripts: Scripts, wakeups: bool) {
        let hello = wakeups || matches!(scripts, Scripts::Auto | Scripts::Native);
        self.resp3 = false;
        self.tracking = false;
        self.invalidated.clear();
        self.forms = Forms::new(scripts);
        self.load_error = None;
        self.progress_at = None;
        self.wrote_since = false;
        self.sync_refused = false;
        self.out.clear();
        self.inb.clear();
        self.owed.clear();
        self.scripted.clear();
        self.decoder.reset();
        match (&addr.user, &addr.password) {
            (Some(user), Some(pass)) => {
                self.queue_handshake(&[b"AUTH", user.as_bytes(), pass.as_bytes()])
            }
            (None, Some(pass)) => self.queue_handshake(&[b"AUTH", pass.as_bytes()]),
            _ => {}
        }
        if addr.db != 0 {
            let mut db = resp::IntBuf::new();
            self.queue_handshake(&[b"SELECT", db.format(i64::from(addr.db))]);
        }
        if wakeups {
            encode_command(&mut self.out, &[b"HELLO", b"3"]);
            self.owed.push_back(Owner::Hello { resp3: true });
        } else if hello {
            encode_command(&mut self.out, &[b"HELLO"]);
            self.owed.push_back(Owner::Hello { resp3: false });
        }
        self.eviction = None;
        if self.check_eviction {
            encode_command(&mut self.out, &[b"CONFIG", b"GET", b"maxmemory-policy"]);
            self.owed
                .push_back(Owner::Eviction(addr.to_string().into_boxed_str()));
        }
        // Native mode calls no script unless a command has no native form (a set of
        // resources, fencing): nothing is loaded ahead (an `EVALSHA` that finds nothing is
        // sent again as `EVAL`, which caches it).
        if scripts != Scripts::Native {
            self.reload_scripts();
        }
    }

    /// The native compare-and-delete commands of this connection's server, once it has said
    /// what it is (`None` before, and for servers without them).
    pub(crate) fn native(&self) -> Option<Native> {
        self.forms.native()
    }

    /// Whether the server has answered `HELLO` on this connection.
    pub(crate) fn identified(&self) -> bool {
        self.forms.is_identified()
    }

    fn queue_handshake(&mut self, args: &[&[u8]]) {
        encode_command(&mut self.out, args);
        self.owed.push_back(Owner::Handshake);
    }

    /// Queues `FUNCTION LOAD` of the function library (an error reply, "already exists"
    /// among them, is kept for explanations and otherwise ignored).
    fn load_functions(&mut self) {
        encode_command(
            &mut self.out,
            &[
                b"FUNCTION",
                b"LOAD",
                crate::core::script::LIBRARY.as_bytes(),
            ],
        );
        self.owed.push_back(Owner::Preload);
    }

    /// Why loading our scripts or functions last failed on this connection, if it did (a
    /// server error, such as an ACL's `NOPERM`).
    pub(crate) fn load_error(&self) -> Option<&str> {
        self.load_error.as_deref()
    }

    /// Queues `SCRIPT LOAD` of every script (or, in function mode, `FUNCTION LOAD` of the
    /// library): on every new connection (a restarted server has lost them), and when a late
    /// `NOSCRIPT` shows a server's cache was flushed.
    pub(crate) fn reload_scripts(&mut self) {
        if self.forms.functions() {
            return self.load_functions();
        }
        for (_, script) in crate::core::script::ALL {
            encode_command(&mut self.out, &[b"SCRIPT", b"LOAD", script.as_bytes()]);
            self.owed.push_back(Owner::Preload);
        }
    }

    /// Queues a command, written by `write`, whose reply goes to `tag`, and returns the form
    /// it went out in. A script call ([`How::Script`], written as `EVALSHA`) goes out in the
    /// form this connection uses, and when the server refuses that form (or lost the script,
    /// or the function library) it is sent again in the next one, behind what was queued
    /// since, whether or not the operation's round is still open (a release or an extension
    /// must reach every node that holds the key, not only a quorum of them); its reply goes
    /// to `tag` either way. An acquisition is the exception ([`Reply::again`]). A
    /// connection that is stuck takes nothing and hands the tag back.
    pub(crate) fn queue(
        &mut self,
        tag: T,
        now: Instant,
        write: impl FnOnce(&mut BytesMut),
        how: How<'_>,
    ) -> Result<Sent, (ConnError, T)> {
        if self.owed.len() >= self.max_owed || self.write_stalled(now) {
            return Err((ConnError::Stuck, tag));
        }
        if self.needs_sync(now) {
            self.queue_sync();
        }
        let before = self.out.len();
        write(&mut self.out);
        let How::Script(native) = how else {
            self.owed.push_back(Owner::Op(tag, now, 0, Sent::Plain, 0));
            return Ok(Sent::Plain);
        };
        let len = self.out.len() - before;
        let copy_at = self.scripted.len();
        self.scripted.extend_from_slice(&self.out[before..]);
        let mut sent = self.forms.choose(native.is_some());
        if sent != Sent::Evalsha {
            self.out.truncate(before);
            let written = match (sent, native) {
                (Sent::Native(Native::Valkey), Some((valkey, _))) => {
                    self.out.put_slice(valkey);
                    true
                }
                (Sent::Native(Native::Redis), Some((_, redis))) => {
                    self.out.put_slice(redis);
                    true
                }
                (to, _) => forms::write_as(&self.scripted[copy_at..], to, &mut self.out),
            };
            if !written {
                self.out.put_slice(&self.scripted[copy_at..]);
                sent = Sent::Evalsha;
            }
        }
        self.owed.push_back(Owner::Op(tag, now, len, sent, 0));
        Ok(sent)
    }

    /// Whether a command queued at `now` needs a sentinel ahead of it: some reply is overdue
    /// (owed past the node timeout) and no sentinel has been queued since that command.
    ///
    /// Replies are owed in the order commands were queued, so the oldest command tells whether
    /// any is overdue: one look at the queue's head on the hot path.
    fn needs_sync(&self, now: Instant) -> bool {
        if self.sync_refused {
            return false;
        }
        let oldest = self.owed.iter().find_map(|o| match o {
            Owner::Op(_, at, ..) => Some(*at),
            _ => None,
        });
        let overdue = |at: Instant| now.saturating_duration_since(at) > self.overdue_after;
        if !oldest.is_some_and(overdue) {
            return false;
        }
        // From the newest back: a sentinel before any overdue command covers them all.
        for o in self.owed.iter().rev() {
            match o {
                Owner::Sync(_) => return false,
                Owner::Op(_, at, ..) if overdue(*at) => return true,
                _ => {}
            }
        }
        false
    }

    /// Queues a sentinel: `PING` with a nonce of this connection's.
    fn queue_sync(&mut self) {
        self.syncs = self.syncs.wrapping_add(1);
        let mut n = resp::IntBuf::new();
        let mut nonce = [0u8; 32];
        let len = sync_nonce(self.syncs, &mut n, &mut nonce);
        encode_command(&mut self.out, &[b"PING", &nonce[..len]]);
        self.owed.push_back(Owner::Sync(self.syncs));
    }

    /// Appends bytes read from the socket.
    pub(crate) fn received(&mut self, bytes: &[u8]) {
        self.inb.put_slice(bytes);
    }

    /// Marks `n` bytes of `out` as written.
    pub(crate) fn wrote(&mut self, n: usize) {
        let n = n.min(self.out.len());
        bytes::Buf::advance(&mut self.out, n);
        self.wrote_since |= n > 0;
    }

    /// Whether more than [`MAX_PENDING_WRITE`] bytes wait for a socket that has taken nothing
    /// for longer than a node timeout, at `now`. Notes the progress made since it was last
    /// asked.
    fn write_stalled(&mut self, now: Instant) -> bool {
        if self.out.is_empty() || self.wrote_since || self.progress_at.is_none() {
            self.progress_at = Some(now);
            self.wrote_since = false;
            return false;
        }
        self.out.len() >= MAX_PENDING_WRITE
            && self
                .progress_at
                .is_some_and(|t| now.saturating_duration_since(t) > self.overdue_after)
    }

    /// The next reply to an operation's command, with its owner. Handshake replies are
    /// consumed here. `Ok(None)` when no whole reply has arrived.
    pub(crate) fn next(&mut self) -> Result<Option<Reply<T>>, ConnError> {
        loop {
            // Every read ends by asking once more; with nothing buffered there is nothing to
            // decode (a decoder keeps no bytes of its own, and one that failed has had its
            // connection failed, which resets it).
            if self.inb.is_empty() {
                return Ok(None);
            }
            let frame = match self.decoder.decode(&mut self.inb) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(None),
                Err(e) => return Err(ConnError::Protocol(e.kind())),
            };
            if let Frame::Push(items) = &frame {
                // Out-of-band (RESP3 push): not an answer to anything, and never taken for
                // one. An invalidation is kept for the engine.
                self.note_push(items);
                continue;
            }
            let owner = self.owed.pop_front().ok_or(ConnError::Unsolicited)?;
            if !owner_fits(&owner, &frame) {
                return Err(ConnError::Desync);
            }
            match owner {
                Owner::Sync(n) => {
                    if sync_answered(n, &frame) {
                        continue;
                    }
                    if is_ping_refusal(&frame) {
                        // In its place, but refused: the stream is in step, and the server
                        // will refuse every sentinel.
                        self.sync_refused = true;
                        continue;
                    }
                    return Err(ConnError::Desync);
                }
                Owner::Handshake => {
                    if let Frame::Error(msg) | Frame::BulkError(msg) = frame.without_attributes() {
                        return Err(ConnError::Handshake(
                            String::from_utf8_lossy(msg).into_owned(),
                        ));
                    }
                    continue;
                }
                Owner::Preload => {
                    if let Frame::Error(msg) | Frame::BulkError(msg) = frame.without_attributes() {
                        let msg = String::from_utf8_lossy(msg);
                        // Kept to explain a missing script or function later ("already
                        // exists" is the library being there: no failure).
                        if !msg.contains("already exists") {
                            self.load_error = Some(msg.into_owned());
                        }
                    }
                    continue;
                }
                Owner::Hello { resp3 } => {
                    self.forms.identified(Native::of_hello(&frame));
                    let refused = matches!(
                        frame.without_attributes(),
                        Frame::Error(_) | Frame::BulkError(_)
                    );
                    if resp3 && !refused {
                        self.resp3 = true;
                        // Only now: on a connection still in RESP2, the server would send
                        // invalidations as ordinary arrays, which no FIFO could tell from
                        // replies. Queued after the commands already written, so a read sent
                        // before the reply to this counts as untracked (it costs a wake-up,
                        // never a wrong reply).
                        encode_command(&mut self.out, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]);
                        self.owed.push_back(Owner::Tracking);
                    }
                    continue;
                }
                Owner::Caching => continue,
                Owner::Eviction(node) => {
                    let eviction = Eviction::of_reply(&frame);
                    if let Eviction::Unknown(why) = &eviction {
                        self.eviction_unchecked += 1;
                        crate::observe::eviction_unchecked(&node, why);
                    }
                    self.eviction = Some(eviction);
                    continue;
                }
                Owner::Tracking => {
                    self.tracking = matches!(frame.without_attributes(), Frame::Simple(s) if s.as_ref() == b"OK");
                    continue;
                }
                Owner::Op(tag, at, len, sent, resends) => {
                    // A healthy exchange: the next failure starts the backoff from the bottom.
                    self.backoff = Duration::ZERO;
                    let len = len.min(self.scripted.len());
                    let native = matches!(sent, Sent::Native(_));
                    if len > 0 && resends < MAX_RESENDS && frame.without_attributes().is_error() {
                        if let Some(next) = self.resend_form(len, sent, &frame) {
                            if next == Sent::Fcall {
                                self.load_functions();
                            }
                            if forms::takes_keys(&self.scripted[..len]) {
                                self.after_noscript(sent, next);
                                let copy = self.scripted.split_to(len);
                                let again = Some(Again {
                                    form: next,
                                    copy,
                                    at,
                                    resends,
                                });
                                return Ok(Some(Reply {
                                    tag,
                                    frame,
                                    native,
                                    again,
                                }));
                            }
                            // The copy moves to the back, behind the copies of the commands
                            // already owed.
                            let copy = self.scripted.split_to(len);
                            self.write_again(
                                tag,
                                Again {
                                    form: next,
                                    copy,
                                    at,
                                    resends,
                                },
                            );
                            self.after_noscript(sent, next);
                            continue;
                        }
                    }
                    bytes::Buf::advance(&mut self.scripted, len);
                    let again = None;
                    return Ok(Some(Reply {
                        tag,
                        frame,
                        native,
                        again,
                    }));
                }
            }
        }
    }

    /// The next reply to an operation's command, without its form (tests).
    #[cfg(test)]
    pub(crate) fn next_reply(&mut self) -> Result<Option<(T, Frame)>, ConnError> {
        Ok(self.next()?.map(|r| (r.tag, r.frame)))
    }

    /// The form to send the script call whose copy heads [`Conn::scripted`] (`len` bytes)
    /// again in, after the server answered `reply` to it in the form `sent`; `None` to hand
    /// the reply over.
    fn resend_form(&mut self, len: usize, sent: Sent, reply: &Frame) -> Option<Sent> {
        let native_able = forms::has_native_form(&self.scripted[..len]);
        self.forms.after(sent, reply, native_able)
    }

    /// After a `NOSCRIPT` (the script cache was flushed) answered by the `EVAL` form: counted,
    /// and every script loaded again, whether or not the command itself goes again.
    fn after_noscript(&mut self, sent: Sent, next: Sent) {
        if sent == Sent::Evalsha && next == Sent::Eval {
            self.noscript_fallbacks += 1;
            crate::observe::script_fallback();
            if !self.forms.functions() {
                self.reload_scripts();
            }
        }
    }

    /// Sends a script call again in the form `again` says, its reply owed to `tag` as before.
    fn write_again(&mut self, tag: T, again: Again) {
        let Again {
            form,
            copy,
            at,
            resends,
        } = again;
        let written = forms::write_as(&copy, form, &mut self.out);
        debug_assert!(written, "a form chosen for a command it has");
        self.scripted.extend_from_slice(&copy);
        self.owed.push_back(Owner::Op(
            tag,
            at,
            copy.len(),
            form,
            resends.saturating_add(1),
        ));
    }

    /// Sends an acquisition again (see [`Reply::again`]): the engine calls this only while
    /// its round still waits for this node, when nothing of the same operation can be queued
    /// behind it yet.
    pub(crate) fn send_again(&mut self, tag: T, again: Again) {
        self.write_again(tag, again);
    }

    /// Records that the connection failed at `now`: clears it, and sets when the next connect
    /// may be tried (immediately after the first failure following a healthy exchange, then
    /// after a delay that doubles up to [`BACKOFF_MAX`]).
    ///
    /// Returns the tags of the commands whose replies will never come, for the driver to
    /// tell their owners.
    pub(crate) fn failed(&mut self, now: Instant) -> impl Iterator<Item = T> + '_ {
        self.out.clear();
        self.inb.clear();
        self.scripted.clear();
        self.decoder.reset();
        self.resp3 = false;
        self.tracking = false;
        self.invalidated.clear();
        self.retry_at = Some(crate::core::time::later(now, self.backoff));
        self.backoff = (self.backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
        self.owed.drain(..).filter_map(|o| match o {
            Owner::Op(tag, ..) => Some(tag),
            _ => None,
        })
    }

    /// Whether the oldest reply still owed to a command is older than `limit` at `now`.
    ///
    /// A connection that owes a reply long past every deadline is replaced: the node may have
    /// lost the command (a proxy that swallowed bytes, a server that never answered), and
    /// then every reply that follows would be taken for the one before it. Dropping the
    /// connection puts the stream back in step.
    pub(crate) fn is_stale(&self, now: Instant, limit: Duration) -> bool {
        self.owed
            .iter()
            .find_map(|o| match o {
                Owner::Op(_, at, ..) => Some(*at),
                _ => None,
            })
            .is_some_and(|at| now.saturating_duration_since(at) > limit)
    }

    /// Whether work is still owed on this connection that matters beyond its round: bytes not
    /// yet written, or an `EVALSHA` whose reply has not come (a `NOSCRIPT` still to be
    /// answered with the `EVAL` form, so that a release or extension reaches this node).
    pub(crate) fn owes_scripted(&self) -> bool {
        !self.scripted.is_empty() || !self.out.is_empty()
    }

    /// Whether a connect may be tried at `now`.
    pub(crate) fn may_connect(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|t| now >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::command::{Command, Form, OpKind};
    use crate::lock::Name;

    /// A small limit, for the tests.
    const MAX_OWED: usize = 64;
    /// The node timeout the tests' connections are built with.
    const OVERDUE: Duration = Duration::from_millis(50);
    use crate::Token;

    fn addr(s: &str) -> NodeAddr {
        NodeAddr::parse(s).unwrap()
    }

    fn feed(c: &mut Conn<u64>, bytes: &[u8]) {
        c.received(bytes);
    }

    /// A connection opened with no login, its script preloads already answered.
    fn open(c: &mut Conn<u64>) {
        c.opened(&addr("127.0.0.1:1"), Scripts::Eval, false);
        feed(c, &b"$3\r\nsha\r\n".repeat(crate::core::script::ALL.len()));
    }

    #[test]
    fn late_replies_are_matched_to_their_own_operation() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        open(&mut c);
        c.queue(1, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
            .unwrap();
        c.queue(2, Instant::now(), |b| b.put_slice(b"y"), How::Plain)
            .unwrap();
        feed(&mut c, b":0\r\n:1\r\n");
        assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(0))));
        assert_eq!(c.next_reply().unwrap(), Some((2, Frame::Integer(1))));
        assert_eq!(c.next_reply().unwrap(), None);
        feed(&mut c, b"+OK\r\n");
        assert_eq!(c.next_reply(), Err(ConnError::Unsolicited));
    }

    /// RESP3 pushes between replies, fed split at every byte: every reply goes to its own
    /// operation in order, no push is ever taken for a reply, and every invalidation is kept.
    #[test]
    fn pushes_interleaved_between_replies_are_never_taken_for_replies_at_any_split() {
        let push_a = &b">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\nres1\r\n"[..];
        let push_flush = &b">2\r\n$10\r\ninvalidate\r\n_\r\n"[..];
        let push_other = &b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"[..];
        let push_two = &b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\nb\r\n+c\r\n"[..];
        let key = |k: &str| Invalidated::Key(bytes::Bytes::copy_from_slice(k.as_bytes()));
        let stream = |flush: &[u8]| -> Vec<u8> {
            [
                push_a,
                b"+OK\r\n",
                push_other,
                push_two,
                b"_\r\n",
                b":-2\r\n",
                flush,
                b"%1\r\n+k\r\n:1\r\n",
                push_a,
            ]
            .concat()
        };
        for flush in [&b""[..], push_flush] {
            let stream = stream(flush);
            for split in 0..=stream.len() {
                let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
                open(&mut c);
                for tag in 1..=4 {
                    c.queue(tag, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
                        .unwrap();
                }
                let mut replies = Vec::new();
                let mut pushed = Vec::new();
                for part in [&stream[..split], &stream[split..]] {
                    feed(&mut c, part);
                    while let Some((tag, frame)) = c.next_reply().unwrap() {
                        replies.push((tag, frame));
                    }
                    pushed.extend(c.take_invalidated().unwrap_or_default());
                }
                let tags: Vec<u64> = replies.iter().map(|(t, _)| *t).collect();
                assert_eq!(tags, [1, 2, 3, 4], "split at {split}");
                assert_eq!(replies[0].1, Frame::Simple("OK".into()), "split at {split}");
                assert_eq!(replies[1].1, Frame::Null, "split at {split}");
                assert_eq!(replies[2].1, Frame::Integer(-2), "split at {split}");
                assert!(matches!(replies[3].1, Frame::Map(_)), "split at {split}");
                if flush.is_empty() {
                    assert_eq!(
                        pushed,
                        [key("res1"), key("b"), key("c"), key("res1")],
                        "split at {split}"
                    );
                } else {
                    // A flush says everything changed: what comes beside it in the same look
                    // is folded into it; nothing is lost.
                    assert!(pushed.contains(&Invalidated::All), "split at {split}");
                }
                assert!(c.next_reply().unwrap().is_none());
            }
        }
    }

    /// A flood of invalidations costs a bounded list: it collapses into `All`.
    #[test]
    fn a_flood_of_pushes_collapses_into_one_invalidation_of_everything() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        open(&mut c);
        let one = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";
        feed(&mut c, &one.repeat(10_000));
        assert!(c.next_reply().unwrap().is_none());
        assert_eq!(c.take_invalidated(), Some(vec![Invalidated::All]));
        assert_eq!(c.take_invalidated(), None);
    }

    /// With wake-ups on, the connection asks for RESP3, and turns tracking on only once the
    /// server has agreed (a RESP2 connection could not tell a push from a reply); a server
    /// that refuses `HELLO 3` leaves the connection without tracking, and working.
    #[test]
    fn tracking_is_asked_for_only_after_the_server_agrees_to_resp3() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
        assert!(c.out.starts_with(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"));
        assert!(!contains(&c.out, b"TRACKING"));
        c.out.clear();
        feed(
            &mut c,
            b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n",
        );
        assert!(c.next_reply().unwrap().is_none());
        assert!(contains(
            &c.out,
            b"$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n"
        ));
        assert!(!c.tracking());
        c.queue(5, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
            .unwrap();
        let mut replies = b"$3\r\nsha\r\n".repeat(crate::core::script::ALL.len());
        replies.extend(b"+OK\r\n:7\r\n");
        feed(&mut c, &replies);
        assert_eq!(c.next_reply().unwrap(), Some((5, Frame::Integer(7))));
        assert!(c.tracking());

        // A server (or ACL) without HELLO: no tracking asked, replies still in step.
        c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
        c.out.clear();
        c.queue(6, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
            .unwrap();
        let mut replies =
            b"-NOPERM this user has no permissions to run the 'hello' command\r\n".to_vec();
        replies.extend(b"$3\r\nsha\r\n".repeat(crate::core::script::ALL.len()));
        replies.extend(b":1\r\n");
        feed(&mut c, &replies);
        assert_eq!(c.next_reply().unwrap(), Some((6, Frame::Integer(1))));
        assert!(!c.tracking());
        assert!(!contains(&c.out, b"TRACKING"));
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn handshake_is_sent_first_and_its_errors_fail_the_connection() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.opened(&addr("redis://u:p@127.0.0.1:1/2"), Scripts::Eval, false);
        assert!(c.out.starts_with(
            b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n"
        ));
        c.queue(9, Instant::now(), |b| b.put_slice(b"z"), How::Plain)
            .unwrap();
        // A failed preload is ignored; the EVAL fallback covers it.
        let mut replies = b"+OK\r\n+OK\r\n-ERR no scripts\r\n".to_vec();
        replies.extend(b"$3\r\nsha\r\n".repeat(crate::core::script::ALL.len() - 1));
        replies.extend(b":1\r\n");
        feed(&mut c, &replies);
        assert_eq!(c.next_reply().unwrap(), Some((9, Frame::Integer(1))));
        c.opened(&addr("redis://:bad@127.0.0.1:1"), Scripts::Eval, false);
        feed(&mut c, b"-WRONGPASS invalid password\r\n");
        assert_eq!(
            c.next_reply(),
            Err(ConnError::Handshake("WRONGPASS invalid password".into()))
        );
    }

    #[test]
    fn protocol_errors_and_pushes() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        open(&mut c);
        c.queue(1, Instant::now(), |_| {}, How::Plain).unwrap();
        feed(&mut c, b">2\r\n+invalidate\r\n_\r\n:1\r\n");
        assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
        c.queue(2, Instant::now(), |_| {}, How::Plain).unwrap();
        feed(&mut c, b"$1099511627776\r\n");
        assert!(matches!(
            c.next_reply(),
            Err(ConnError::Protocol(resp::ErrorKind::BulkTooLong { .. }))
        ));
    }

    #[test]
    fn too_many_owed_is_stuck() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        open(&mut c);
        let mut queued = 0;
        while c.queue(queued, Instant::now(), |_| {}, How::Plain).is_ok() {
            queued += 1;
            assert!(queued <= MAX_OWED as u64);
        }
        // Some of the places are the preloads'.
        assert_eq!(queued, (MAX_OWED - crate::core::script::ALL.len()) as u64);
        assert_eq!(
            c.queue(99, Instant::now(), |_| {}, How::Plain),
            Err((ConnError::Stuck, 99))
        );
    }

    #[test]
    fn backoff_doubles_and_resets_after_a_healthy_reply() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        let t = Instant::now();
        assert!(c.may_connect(t));
        let _ = c.failed(t);
        assert!(c.may_connect(t), "first retry is immediate");
        let _ = c.failed(t);
        assert!(!c.may_connect(t));
        assert!(c.may_connect(t + BACKOFF_MIN));
        for _ in 0..20 {
            let _ = c.failed(t);
        }
        assert!(c.may_connect(t + BACKOFF_MAX));
        open(&mut c);
        c.queue(1, Instant::now(), |_| {}, How::Plain).unwrap();
        feed(&mut c, b":1\r\n");
        c.next_reply().unwrap();
        let _ = c.failed(t);
        assert!(c.may_connect(t));
    }

    #[test]
    fn a_reply_owed_past_the_limit_makes_the_connection_stale() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        open(&mut c);
        let t = Instant::now();
        assert!(!c.is_stale(t, Duration::from_millis(10)), "nothing owed");
        c.queue(1, t, |_| {}, How::Plain).unwrap();
        assert!(!c.is_stale(t + Duration::from_millis(10), Duration::from_millis(10)));
        assert!(c.is_stale(t + Duration::from_millis(11), Duration::from_millis(10)));
        feed(&mut c, b":1\r\n");
        assert!(c.next_reply().unwrap().is_some());
        assert!(!c.is_stale(t + Duration::from_secs(9), Duration::from_millis(10)));
    }

    fn command<'a>(kind: OpKind, token: &'a Token, res: &'a [Name]) -> Command<'a> {
        Command {
            kind,
            resources: res,
            token,
            ttl_ms: 30_000,
            counter: None,
            fence_value: 0,
        }
    }

    fn wire(c: &Command<'_>, eval: bool) -> Vec<u8> {
        let mut v = Vec::new();
        c.encode(&mut v, if eval { Form::Eval } else { Form::Evalsha });
        v
    }

    #[test]
    fn the_eval_form_is_the_evalsha_with_the_script_in_place_of_the_digest() {
        let token = Token::generate();
        let one = [Name::new("res")];
        let set = [Name::new("a"), Name::new("b"), Name::new("c")];
        for res in [&one[..], &set[..]] {
            for kind in [
                OpKind::Release,
                OpKind::Extend,
                OpKind::Fence,
                OpKind::Acquire,
            ] {
                let mut cmd = command(kind, &token, res);
                cmd.counter = (kind == OpKind::Fence).then_some(&b"counter"[..]);
                if kind == OpKind::Acquire && res.len() == 1 {
                    continue; // a plain SET
                }
                let mut out = BytesMut::new();
                assert!(crate::core::forms::write_as_eval(
                    &wire(&cmd, false),
                    &mut out
                ));
                assert_eq!(&out[..], &wire(&cmd, true)[..], "{kind:?}");
            }
        }
        // Anything else is left alone.
        let mut out = BytesMut::new();
        assert!(!crate::core::forms::write_as_eval(
            &wire(&command(OpKind::Acquire, &token, &one), false),
            &mut out
        ));
        assert!(!crate::core::forms::write_as_eval(
            b"*2\r\n$7\r\nEVALSHA\r\n$40\r\n",
            &mut out
        ));
        assert!(!crate::core::forms::write_as_eval(b"", &mut out));
        let other = b"*3\r\n$7\r\nEVALSHA\r\n$40\r\n0000000000000000000000000000000000000000\r\n$1\r\n0\r\n";
        assert!(!crate::core::forms::write_as_eval(other, &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn a_refused_evalsha_switches_an_auto_connection_to_functions() {
        let token = Token::generate();
        let res = [Name::new("res")];
        let release = command(OpKind::Release, &token, &res);
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.opened(&addr("127.0.0.1:1"), Scripts::Auto, false);
        // HELLO and the script preloads answered (the preloads refused by the ACL).
        let mut replies = b"*0\r\n".to_vec();
        for _ in 0..crate::core::script::ALL.len() {
            replies.extend(
                b"-NOPERM this user has no permissions to run the 'script|load' command\r\n",
            );
        }
        feed(&mut c, &replies);
        c.out.clear();
        let now = Instant::now();
        c.queue(
            1,
            now,
            |b| release.encode(b, Form::Evalsha),
            How::Script(None),
        )
        .unwrap();
        c.out.clear();
        feed(
            &mut c,
            b"-NOPERM this user has no permissions to run the 'evalsha' command\r\n",
        );
        // Not handed over: FUNCTION LOAD, then the same call as FCALL.
        assert!(c.next_reply().unwrap().is_none());
        let out = String::from_utf8_lossy(&c.out).into_owned();
        let load = out.find("FUNCTION").expect("FUNCTION LOAD");
        let fcall = out.find("FCALL").expect("FCALL");
        assert!(
            load < fcall && out.contains("redlock_mux_v1_release"),
            "{out}"
        );
        // Its reply goes to 1; later scripted commands go out as FCALL at once.
        feed(&mut c, b"$14\r\nredlock_mux_v1\r\n:1\r\n");
        assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
        c.out.clear();
        c.queue(
            2,
            now,
            |b| release.encode(b, Form::Evalsha),
            How::Script(None),
        )
        .unwrap();
        assert!(c.out.windows(5).any(|w| w == b"FCALL"), "{:?}", c.out);
        assert!(!c.out.windows(7).any(|w| w == b"EVALSHA"));
        // Under Eval the refusal is handed over as it is.
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.opened(&addr("127.0.0.1:1"), Scripts::Eval, false);
        feed(
            &mut c,
            &b"$3\r\nsha\r\n".repeat(crate::core::script::ALL.len()),
        );
        c.queue(
            3,
            now,
            |b| release.encode(b, Form::Evalsha),
            How::Script(None),
        )
        .unwrap();
        feed(&mut c, b"-NOPERM no\r\n");
        assert!(matches!(
            c.next_reply().unwrap(),
            Some((3, Frame::Error(_)))
        ));
    }

    #[test]
    fn noscript_is_answered_with_the_eval_form_on_the_same_connection() {
        let token = Token::generate();
        let res = [Name::new("res")];
        let (release, extend) = (
            command(OpKind::Release, &token, &res),
            command(OpKind::Extend, &token, &res),
        );
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        let now = Instant::now();
        c.queue(
            1,
            now,
            |b| release.encode(b, Form::Evalsha),
            How::Script(None),
        )
        .unwrap();
        c.queue(
            2,
            now,
            |b| extend.encode(b, Form::Evalsha),
            How::Script(None),
        )
        .unwrap();
        c.queue(3, now, |b| b.put_slice(b"SET3;"), How::Plain)
            .unwrap();
        c.out.clear();
        // 1 ran; 2 found no script; 3 answered.
        feed(&mut c, b":1\r\n-NOSCRIPT No matching script.\r\n+OK\r\n");
        assert_eq!(c.next_reply().unwrap().map(|(t, _)| t), Some(1));
        // The NOSCRIPT is not handed over: 2 goes out again as EVAL, every script is loaded
        // again, and 3's reply comes next.
        assert_eq!(c.next_reply().unwrap().map(|(t, _)| t), Some(3));
        let eval = wire(&extend, true);
        assert!(c.out.starts_with(&eval), "{:?}", c.out);
        let preloads = crate::core::script::ALL.len();
        assert_eq!(
            c.out.windows(6).filter(|w| w == b"SCRIPT").count(),
            preloads
        );
        assert!(c.next_reply().unwrap().is_none());
        // The EVAL's reply goes to 2; the SCRIPT LOAD replies are consumed.
        let sha = format!("$40\r\n{}\r\n", "x".repeat(40));
        feed(&mut c, format!(":1\r\n{}", sha.repeat(preloads)).as_bytes());
        let (tag, frame) = c.next_reply().unwrap().unwrap();
        assert_eq!((tag, frame), (2, Frame::Integer(1)));
        assert!(c.next_reply().unwrap().is_none());
        assert!(c.scripted.is_empty(), "every copy consumed");
        // A NOSCRIPT to the EVAL form itself (not scripted) is handed over: no loop.
        c.queue(4, now, |b| release.encode(b, Form::Eval), How::Plain)
            .unwrap();
        feed(&mut c, b"-NOSCRIPT No matching script.\r\n");
        assert_eq!(c.next_reply().unwrap().map(|(t, _)| t), Some(4));
    }

    #[test]
    fn a_full_write_buffer_is_back_pressure_until_the_socket_stops_taking_bytes() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        let t = Instant::now();
        let big = vec![b'x'; MAX_PENDING_WRITE / 2 + 1];
        c.queue(1, t, |b| b.put_slice(&big), How::Plain).unwrap();
        c.queue(2, t, |b| b.put_slice(&big), How::Plain).unwrap();
        // Over the limit, but the socket took bytes a moment ago: queued all the same.
        c.wrote(1000);
        let later = t + OVERDUE * 3;
        c.queue(3, later, |b| b.put_slice(&big), How::Plain)
            .unwrap();
        assert!(c.out.len() > MAX_PENDING_WRITE);
        // Still taking bytes a node timeout on: still queued.
        c.wrote(1000);
        let later = later + OVERDUE * 2;
        c.queue(4, later, |b| b.put_slice(b"y"), How::Plain)
            .unwrap();
        // Nothing taken for a node timeout with more than the limit waiting: stuck.
        assert_eq!(
            c.queue(
                5,
                later + OVERDUE + Duration::from_millis(1),
                |_| {},
                How::Plain
            ),
            Err((ConnError::Stuck, 5))
        );
        // Under the limit a stalled socket is only slow: its replies go stale instead.
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.queue(1, t, |b| b.put_slice(b"x"), How::Plain).unwrap();
        assert!(c.queue(2, t + OVERDUE * 10, |_| {}, How::Plain).is_ok());
    }

    #[test]
    fn a_sentinel_goes_before_client_caching_never_between_it_and_the_read() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.resp3 = true;
        let t = Instant::now();
        c.queue(1, t, |b| b.put_slice(b"*1\r\n$3\r\nSET\r\n"), How::Plain)
            .unwrap();
        let later = t + OVERDUE * 2;
        c.queue_caching(later);
        c.queue(
            2,
            later,
            |b| b.put_slice(b"*1\r\n$4\r\nPTTL\r\n"),
            How::Plain,
        )
        .unwrap();
        let out = String::from_utf8_lossy(&c.out).into_owned();
        let (ping, caching, pttl) = (
            out.find("PING").expect("a sentinel"),
            out.find("CACHING").expect("CLIENT CACHING"),
            out.find("PTTL").expect("the read"),
        );
        assert!(ping < caching && caching < pttl, "{out}");
        assert_eq!(out.matches("PING").count(), 1, "{out}");
    }

    #[test]
    fn a_sentinel_refused_in_its_place_keeps_the_connection_and_is_not_sent_again() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        let t = Instant::now();
        c.queue(1, t, |_| {}, How::Plain).unwrap();
        c.queue(2, t + OVERDUE * 2, |_| {}, How::Plain).unwrap();
        feed(
            &mut c,
            b":1\r\n-NOPERM User app has no permissions to run the 'ping' command\r\n:2\r\n",
        );
        assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
        assert_eq!(c.next_reply().unwrap(), Some((2, Frame::Integer(2))));
        c.out.clear();
        c.queue(3, t, |_| {}, How::Plain).unwrap();
        c.queue(4, t + OVERDUE * 10, |_| {}, How::Plain).unwrap();
        assert!(c.out.is_empty(), "no sentinel after a refusal");
        // Another command's refusal in a sentinel's place is no proof of step.
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.queue(1, t, |_| {}, How::Plain).unwrap();
        c.queue(2, t + OVERDUE * 2, |_| {}, How::Plain).unwrap();
        feed(
            &mut c,
            b":1\r\n-NOPERM User app has no permissions to run the 'evalsha' command\r\n",
        );
        assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
        assert_eq!(c.next_reply(), Err(ConnError::Desync));
    }

    #[test]
    fn partial_writes_advance() {
        let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
        c.queue(1, Instant::now(), |b| b.put_slice(b"abcdef"), How::Plain)
            .unwrap();
        c.wrote(2);
        assert_eq!(&c.out[..], b"cdef");
        c.wrote(100);
        assert!(c.out.is_empty());
    }
}
