//! One node's connection state, sans I/O: its buffers, the FIFO of replies still owed, the
//! login handshake, and the reconnect backoff.
//!
//! Redis answers the commands of one connection in order. Every command written is pushed on
//! the `owed` queue with the id of the operation it belongs to; every reply read pops the
//! queue's head. So a reply that arrives after its operation gave up on it (a timeout, or a
//! round decided early) is matched to that old operation and dropped: it can never be taken
//! for the answer to a later command. A reply with nothing owed, a protocol error, a failed
//! login, or a queue grown past [`MAX_OWED`](crate::engine::MAX_OWED) means the connection can no longer be trusted:
//! the driver drops it and reconnects after a backoff.
//!
//! That matching rests on the transport: an ordered byte stream that loses nothing (TCP, TLS,
//! a Unix socket). A middlebox that drops bytes from the middle of a live stream would shift
//! every later reply onto the command before it. Two checks catch such a stream and drop the
//! connection before more of it is read: a reply whose shape cannot answer the command it is
//! matched to (see `Expect::fits`), and a sentinel, `PING <nonce>`, queued ahead of new
//! commands whenever a reply is owed past its deadline (a lost command or reply shows as a
//! missing or misplaced nonce). See docs/redlock.md, "The transport".
//!
//! | module | its job |
//! |---|---|
//! | `mod.rs` | the buffers, the FIFO of replies owed, login, queueing, matching replies, failure |
//! | `scripts.rs` | loading scripts and functions; a refused script call sent again in its next form |
//! | `sync.rs` | the sentinel that checks the stream is in step |
//! | `push.rs` | client-side tracking: `CLIENT CACHING YES` and invalidation pushes |
//! | `session.rs` | what a server's `HELLO` says it has (native commands) |

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use resp::{encode_command, Decoder, Frame, Limits};

use crate::command::Expect;
use crate::config::Scripts;
use crate::error::NodeOutcome;
use crate::eviction::Eviction;
use crate::forms::{self, Forms, Sent, MAX_RESENDS};

mod open;
mod push;
mod scripts;
mod session;
mod sync;
#[cfg(test)]
mod tests;

pub use push::Invalidated;
pub use session::Native;
pub use sync::is_sync_reply;
use sync::{is_ping_refusal, sync_answered};

/// Bytes that may wait to be written to a node whose socket has taken nothing for a node
/// timeout before the connection is considered stuck. Below it, or while the socket takes
/// bytes, a large buffer is back-pressure, not a failure: the commands go out as the node
/// reads them, and a round that cannot finish in time ends at its deadline as any other.
pub const MAX_PENDING_WRITE: usize = 1 << 20;
/// The first reconnect delay after a failure; doubles with each failure in a row.
pub const BACKOFF_MIN: Duration = Duration::from_millis(5);
/// The longest reconnect delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long a connect may stay in progress before it counts as failed.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long past its queueing a reply may still be owed before its connection is replaced:
/// four node timeouts, and never under half a second (a reply that late has missed its round
/// long ago either way).
pub fn stale_after(node_timeout: Duration) -> Duration {
    node_timeout
        .saturating_mul(4)
        .max(Duration::from_millis(500))
}

/// The decoder limits for replies to lock commands: far above anything a real reply needs,
/// low enough that a hostile node cannot make a connection hold more than about a megabyte.
pub fn reply_limits() -> Limits {
    Limits::new()
        .with_max_bulk_len(1 << 20)
        .with_max_elements(1024)
        .with_max_depth(16)
        .with_max_line_len(64 * 1024)
}

/// How a command is queued ([`Conn::queue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How<'a> {
    /// Not a script call: written as it is, its reply handed over as it is.
    Plain,
    /// An `EVALSHA` of one of our scripts: the connection writes it in the form it uses
    /// (see [`crate::forms`]), keeps the copy, and sends it again in the next form when
    /// the server refuses one. With its native forms (Valkey's, Redis') when it has them.
    Script(Option<(&'a [u8], &'a [u8])>),
}

/// A reply to a driver's command.
#[derive(Debug, PartialEq)]
pub struct Reply<T> {
    pub(crate) tag: T,
    pub(crate) frame: Frame,
    /// The shape of the reply when it answers the server's native command (a release's or
    /// an extension's), in place of the shape the command was queued with.
    pub(crate) native: Option<Expect>,
    /// An acquisition the server refused in the form it was sent in (or found no script
    /// for), which could go again in another form: only if nothing has been queued on the
    /// connection behind it and its round still waits for this node ([`Conn::send_again`]).
    /// Otherwise the client may already have queued the release behind it (the round was
    /// decided, or the caller went away), and an acquisition sent again would land after
    /// that release and take a key nobody releases.
    pub(crate) again: Option<Box<Again>>,
}

/// An acquisition that may be sent again (see `Reply::again`).
#[derive(Debug, PartialEq)]
pub struct Again {
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
    /// `SUBSCRIBE` to the client's bell (fair mode), sent once the server agreed to RESP3, or
    /// ahead of that reply right before the first command that stands in a line
    /// ([`Conn::subscribe_before_line`]): confirmed by a push (RESP3 sends no reply in the FIFO
    /// for it), refused by an error in its place.
    Subscribe,
    /// `CONFIG GET maxmemory-policy`, sent by a fenced client's connections to the node:
    /// whether the server may evict the fencing counter ([`Eviction`]).
    Eviction,
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
pub enum ConnError {
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
    pub fn outcome(&self) -> NodeOutcome {
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

/// What happened on a connection that its engine counts in the node's statistics and reports
/// as an [`Event`](crate::Event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A `NOSCRIPT` answered by sending the command again with its body.
    ScriptFallback,
    /// A fenced client's `CONFIG GET maxmemory-policy` got no usable answer: why.
    EvictionUnchecked(String),
}

/// One connection's buffers and bookkeeping.
#[derive(Debug)]
pub struct Conn<T> {
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

    /// The server agreed to RESP3 on this connection (`HELLO 3`).
    resp3: bool,
    /// The server pushes invalidations of the keys read after `CLIENT CACHING YES` on this
    /// connection (client-side tracking is on, opt-in).
    tracking: bool,
    /// Invalidations pushed since the engine last took them (and, in fair mode, the bells
    /// rung).
    invalidated: Vec<Invalidated>,
    /// Fair mode: the channel of the client's bell, subscribed on every connection that
    /// speaks RESP3.
    bell: Option<Box<[u8]>>,
    /// The server confirmed the subscription to the bell on this connection.
    subscribed: bool,
    /// The bell's `SUBSCRIBE` went out ahead of the `HELLO 3` reply on this connection
    /// (see [`subscribe_before_line`](Conn::subscribe_before_line)).
    subscribe_early: bool,
    /// The bell's `SUBSCRIBE` may still go out ahead of the `HELLO 3` reply, before the first
    /// command that stands in a line.
    subscribe_pending: bool,
    /// A server at this address said it has no `HELLO 3` (an unknown command, no RESP3, or
    /// no permission) while the bell's `SUBSCRIBE` went out ahead of its reply: later connections
    /// subscribe only once `HELLO 3` is answered, until one is.
    hello3_refused: bool,
    /// How long a command may wait for its reply before it is overdue (the node timeout): a
    /// command queued while an older reply is overdue gets a sentinel ahead of it.
    overdue_after: Duration,
    /// The last sentinel's nonce.
    syncs: u32,
    /// The server refused the sentinel (`PING` denied by an ACL, or renamed away): none is
    /// sent on this connection again; the shape checks and the stale limit remain.
    sync_refused: bool,
    /// Whether every write pass ends with a sentinel and replies wait for it (see
    /// [`verifying`](Conn::verifying)).
    verify: bool,
    /// A command was queued since the last sentinel that closed a pass.
    unsealed: bool,
    /// Replies to the driver's commands decoded but not yet handed over: with `verify`, a
    /// reply counts only once the sentinel behind it has come back in its place.
    held: VecDeque<Reply<T>>,
    /// How many of `held`, from the front, the sentinel behind them has confirmed.
    confirmed: usize,
    /// When the socket last took bytes (or `out` last went from empty to not), as far as
    /// the last `queue` knows: with `wrote_since`, what tells a slow node from a stuck one.
    progress_at: Option<Instant>,
    /// Bytes were written since `progress_at` was last set.
    wrote_since: bool,
    /// Whether a new connection asks the server's eviction policy (fenced clients).
    check_eviction: bool,
    /// What the server said of it on this connection, once it has.
    eviction: Option<Eviction>,
    /// What happened on this connection that the engine counts and reports, until it takes
    /// them (after each read).
    pub(crate) notes: Vec<Note>,
    /// Replies read to commands this client sent (every connection to the node so far).
    replies: u64,
}

/// Whether a refusal of `HELLO 3` says the server has none at all (an older server, `HELLO`
/// renamed away, no RESP3, an ACL without it), not that this one connection was turned away.
fn hello_unsupported(msg: &[u8]) -> bool {
    let msg = String::from_utf8_lossy(msg).to_ascii_lowercase();
    msg.starts_with("noproto") || msg.starts_with("noperm") || msg.contains("unknown command")
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
        // Confirmed by a push; only a refusal comes in its place.
        Owner::Subscribe => error,
        Owner::Hello { .. } | Owner::Eviction => {
            error || matches!(reply, Frame::Map(_) | Frame::Array(_))
        }
        Owner::Preload => error || matches!(reply, Frame::Bulk(_) | Frame::Simple(_)),
        Owner::Op(..) => true,
    }
}

impl<T> Conn<T> {
    /// A connection that may owe up to `max_owed` replies, whose replies are overdue
    /// `overdue_after` (the node timeout) after their command was queued.
    pub fn new(max_owed: usize, overdue_after: Duration) -> Self {
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
            resp3: false,
            tracking: false,
            invalidated: Vec::new(),
            bell: None,
            subscribed: false,
            subscribe_early: false,
            subscribe_pending: false,
            hello3_refused: false,
            overdue_after,
            syncs: 0,
            sync_refused: false,
            verify: false,
            unsealed: false,
            held: VecDeque::new(),
            confirmed: 0,
            progress_at: None,
            wrote_since: false,
            check_eviction: false,
            eviction: None,
            notes: Vec::new(),
            replies: 0,
        }
    }

    /// The same connection, asking the server's eviction policy on every connect when
    /// `check` (a fenced client: see [`evicting`](Conn::evicting)).
    pub fn checking_eviction(mut self, check: bool) -> Self {
        self.check_eviction = check;
        self
    }

    /// The same connection, subscribing to the client's bell `channel` (fair mode) once its
    /// server agrees to RESP3: a hand-off to this client is pushed on it.
    pub fn ringing(mut self, channel: Option<Box<[u8]>>) -> Self {
        self.bell = channel;
        self
    }

    /// Whether the server confirmed the subscription to the client's bell.
    pub fn subscribed(&self) -> bool {
        self.subscribed
    }

    /// The server's eviction policy, if it said on this connection that it may evict the
    /// fencing counter. A reply to a command queued after the connection opened comes after
    /// the policy's, so it is known by the time such a reply is judged.
    pub fn evicting(&self) -> Option<&str> {
        match &self.eviction {
            Some(Eviction::Evicts(policy)) => Some(policy),
            _ => None,
        }
    }

    /// Bytes of buffer capacity held (read and write buffers).
    pub fn buffered_capacity(&self) -> usize {
        self.inb.capacity() + self.out.capacity() + self.scripted.capacity()
    }

    /// Queues a command, written by `write`, whose reply goes to `tag`, and returns the form
    /// it went out in. A script call ([`How::Script`], written as `EVALSHA`) goes out in the
    /// form this connection uses, and when the server refuses that form (or lost the script,
    /// or the function library) it is sent again in the next one, behind what was queued
    /// since, whether or not the operation's round is still open (a release or an extension
    /// must reach every node that holds the key, not only a quorum of them); its reply goes
    /// to `tag` either way. An acquisition is the exception (`Reply::again`). A
    /// connection that is stuck takes nothing and hands the tag back.
    pub fn queue(
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
        self.unsealed = true;
        let How::Script(native) = how else {
            self.owed.push_back(Owner::Op(tag, now, 0, Sent::Plain, 0));
            return Ok(Sent::Plain);
        };
        let len = self.out.len() - before;
        let copy_at = self.scripted.len();
        self.scripted.extend_from_slice(&self.out[before..]);
        let alt = match native {
            Some(_) => forms::Alt::Native,
            // (A native form the engine did not encode is not wanted here.)
            None => match forms::alt_of(&self.scripted[copy_at..]) {
                forms::Alt::Native => forms::Alt::None,
                alt => alt,
            },
        };
        let mut sent = self.forms.choose_alt(alt);
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

    /// Appends bytes read from the socket.
    pub fn received(&mut self, bytes: &[u8]) {
        self.inb.put_slice(bytes);
    }

    /// Marks `n` bytes of `out` as written.
    pub fn wrote(&mut self, n: usize) {
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
    pub fn take_reply(&mut self) -> Result<Option<Reply<T>>, ConnError> {
        loop {
            if self.confirmed > 0 {
                return Ok(self.release_held());
            }
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
                // one (but the confirmation of the bell's `SUBSCRIBE`, which RESP3 sends in
                // its place). An invalidation or a bell is kept for the engine.
                if matches!(self.owed.front(), Some(Owner::Subscribe))
                    && push::is_subscribed(items, self.bell.as_deref())
                {
                    self.owed.pop_front();
                    self.replies += 1;
                    self.subscribed = true;
                    continue;
                }
                self.note_push(items);
                continue;
            }
            let owner = self.owed.pop_front().ok_or(ConnError::Unsolicited)?;
            self.replies += 1;
            if !owner_fits(&owner, &frame) {
                return Err(ConnError::Desync);
            }
            match owner {
                Owner::Sync(n) => {
                    if sync_answered(n, &frame) {
                        self.confirmed = self.held.len();
                        continue;
                    }
                    if is_ping_refusal(&frame) {
                        // In its place, but refused: the stream is in step, and the server
                        // will refuse every sentinel.
                        self.sync_refused = true;
                        self.confirmed = self.held.len();
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
                    self.subscribe_pending = false;
                    if let (true, Frame::Error(msg) | Frame::BulkError(msg)) =
                        (resp3 && self.subscribe_early, frame.without_attributes())
                    {
                        // The `SUBSCRIBE` behind it would put a RESP2 connection in
                        // subscriber mode, where the server refuses every other command:
                        // this connection is spent. Where the server has no `HELLO 3`, the
                        // next ones ask first; any other refusal (a full server, one still
                        // loading) is the connection's alone.
                        self.hello3_refused = hello_unsupported(msg);
                        return Err(ConnError::Handshake(format!(
                            "the server refused HELLO 3 ({}); connecting again without the \
                             bell's SUBSCRIBE ahead of its reply",
                            String::from_utf8_lossy(msg)
                        )));
                    }
                    if resp3 && !refused {
                        self.resp3 = true;
                        self.hello3_refused = false;
                        // Only now: on a connection still in RESP2, the server would send
                        // invalidations as ordinary arrays, which no FIFO could tell from
                        // replies. Queued after the commands already written, so a read sent
                        // before the reply to this counts as untracked (it costs a wake-up,
                        // never a wrong reply).
                        encode_command(&mut self.out, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]);
                        self.owed.push_back(Owner::Tracking);
                        if let Some(bell) = self.bell.as_deref().filter(|_| !self.subscribe_early) {
                            encode_command(&mut self.out, &[b"SUBSCRIBE", bell]);
                            self.owed.push_back(Owner::Subscribe);
                        }
                    }
                    continue;
                }
                Owner::Caching => continue,
                // Refused (an ACL without the channel): no bell on this connection; the
                // waiters' timers still run.
                Owner::Subscribe => continue,
                Owner::Eviction => {
                    let eviction = Eviction::of_reply(&frame);
                    if let Eviction::Unknown(why) = &eviction {
                        self.notes.push(Note::EvictionUnchecked(why.to_string()));
                    }
                    self.eviction = Some(eviction);
                    continue;
                }
                Owner::Tracking => {
                    self.tracking = matches!(frame.without_attributes(), Frame::Simple(s) if s.as_ref() == b"OK");
                    continue;
                }
                Owner::Op(tag, at, len, sent, resends) => {
                    // A sentinel's nonce answers no command of ours (`GET` of a lock key
                    // reads a token): it arrived in a command's place, so a reply or a
                    // command was lost before it.
                    if matches!(frame.without_attributes(), Frame::Bulk(b) if sync::is_sync_reply(b))
                    {
                        // Still owed: the failure hands its tag back with the others.
                        self.owed.push_front(Owner::Op(tag, at, len, sent, resends));
                        return Err(ConnError::Desync);
                    }
                    // A healthy exchange: the next failure starts the backoff from the bottom.
                    self.backoff = Duration::ZERO;
                    let len = len.min(self.scripted.len());
                    let native = matches!(sent, Sent::Native(_)).then(|| {
                        let copy = &self.scripted[..len];
                        if forms::extends(copy) {
                            Expect::NativeExtend
                        } else if forms::takes_keys(copy) {
                            // Fair mode's enter or claim on a scriptless connection.
                            Expect::Set
                        } else {
                            Expect::NativeRelease
                        }
                    });
                    let refused = len > 0 && resends < MAX_RESENDS;
                    let next = (refused && frame.without_attributes().is_error())
                        .then(|| self.resend_form(len, sent, &frame))
                        .flatten();
                    if let Some(next) = next {
                        if next == Sent::Fcall {
                            self.load_functions();
                        }
                        let acquisition = forms::takes_keys(&self.scripted[..len]);
                        // The copy moves to the back, behind the copies of the commands
                        // already owed.
                        let copy = self.scripted.split_to(len);
                        let again = Again {
                            form: next,
                            copy,
                            at,
                            resends,
                        };
                        if !acquisition {
                            self.write_again(tag, again);
                            self.after_noscript(sent, next);
                            continue;
                        }
                        self.after_noscript(sent, next);
                        // An acquisition is offered to the engine (see `Reply::again`), and
                        // only if nothing was queued behind it (another caller's command, or
                        // the release of this very acquisition when its caller went away).
                        let behind = self.owed.iter().any(|o| matches!(o, Owner::Op(..)));
                        let again = (!behind).then(|| Box::new(again));
                        let reply = Reply {
                            tag,
                            frame,
                            native,
                            again,
                        };
                        match self.hold(reply) {
                            Some(reply) => return Ok(Some(reply)),
                            None => continue,
                        }
                    }
                    bytes::Buf::advance(&mut self.scripted, len);
                    let again = None;
                    let reply = Reply {
                        tag,
                        frame,
                        native,
                        again,
                    };
                    match self.hold(reply) {
                        Some(reply) => return Ok(Some(reply)),
                        None => continue,
                    }
                }
            }
        }
    }

    /// The next reply to an operation's command, without its form (tests).
    #[cfg(test)]
    pub fn next_reply(&mut self) -> Result<Option<(T, Frame)>, ConnError> {
        Ok(self.take_reply()?.map(|r| (r.tag, r.frame)))
    }

    /// Records that the connection failed at `now`: clears it, and sets when the next connect
    /// may be tried (immediately after the first failure following a healthy exchange, then
    /// after a delay that doubles up to [`BACKOFF_MAX`]).
    ///
    /// Returns the tags of the commands whose replies will never come, for the driver to
    /// tell their owners.
    pub fn failed(&mut self, now: Instant) -> impl Iterator<Item = T> + '_ {
        self.out.clear();
        self.inb.clear();
        self.scripted.clear();
        self.decoder.reset();
        self.resp3 = false;
        self.tracking = false;
        self.subscribed = false;
        self.invalidated.clear();
        self.retry_at = Some(crate::time::later(now, self.backoff));
        self.backoff = (self.backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
        self.unsealed = false;
        self.confirmed = 0;
        // Replies held for a sentinel that will not come are as lost as those never read.
        let held = self.held.drain(..).map(|r| r.tag);
        held.chain(self.owed.drain(..).filter_map(|o| match o {
            Owner::Op(tag, ..) => Some(tag),
            _ => None,
        }))
    }

    /// How many replies to this client's commands the node has sent on this connection and
    /// the ones before it: one per command it ran for the client (top-level: the calls a
    /// script makes inside the server are not among them), the connection's own commands
    /// (`HELLO`, `CLIENT CACHING`, sentinels, `SCRIPT LOAD`, `SUBSCRIBE`) included.
    pub fn replies(&self) -> u64 {
        self.replies
    }

    /// Whether the oldest reply still owed to a command is older than `limit` at `now`.
    ///
    /// A connection that owes a reply long past every deadline is replaced: the node may have
    /// lost the command (a proxy that swallowed bytes, a server that never answered), and
    /// then every reply that follows would be taken for the one before it. Dropping the
    /// connection puts the stream back in step.
    pub fn is_stale(&self, now: Instant, limit: Duration) -> bool {
        self.owed
            .iter()
            .find_map(|o| match o {
                Owner::Op(_, at, ..) => Some(*at),
                _ => None,
            })
            .is_some_and(|at| now.saturating_duration_since(at) > limit)
    }

    /// How many replies the connection owes (to commands queued, written or not, login and
    /// sentinels included), and when the oldest still owed to a command was queued.
    pub fn owed(&self) -> (usize, Option<Instant>) {
        let oldest = self.owed.iter().find_map(|o| match o {
            Owner::Op(_, at, ..) => Some(*at),
            _ => None,
        });
        (self.owed.len(), oldest)
    }

    /// Whether work is still owed on this connection that matters beyond its round: bytes not
    /// yet written, or an `EVALSHA` whose reply has not come (a `NOSCRIPT` still to be
    /// answered with the `EVAL` form, so that a release or extension reaches this node).
    pub fn owes_scripted(&self) -> bool {
        !self.scripted.is_empty() || !self.out.is_empty()
    }

    /// Whether a connect may be tried at `now`.
    pub fn may_connect(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|t| now >= t)
    }
}
