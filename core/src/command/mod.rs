//! The operations as commands on the wire and as replies read back, sans I/O.
//!
//! | operation | command                                              | yes      | no                    |
//! |-----------|------------------------------------------------------|----------|-----------------------|
//! | acquire, one resource, unfenced | `SET key token NX PX ttl`      | `+OK`    | null: held            |
//! | acquire, a set or fenced | `EVALSHA <acquire> n+f keys.. [counter] token ttl n` | `:0`; fenced `:1..=2^53` (the counter) | `:-i`: key `i` held |
//! | fence (a fenced acquisition's second phase) | `EVALSHA <fence> n+1 keys.. counter token t` | `:1` | `:0` held, `:-1` gone |
//! | release   | `EVALSHA <release> n keys.. token`                   | `:1`     | `:0` held, `:-1` gone |
//! | extend    | `EVALSHA <extend> n keys.. token ttl`                | `:1`     | `:0` held, `:-1` gone |
//! | permit    | `EVALSHA <permit> k slots.. token ttl`               | `:i`: slot `i` (from 1) | `:0`: every slot held |
//!
//! The engine encodes with [`Command::encode`] and judges replies with
//! `Command::judge_kind`; nothing here knows about sockets.

use bytes::BufMut;
use resp::{Frame, IntBuf};

use crate::conn::Native;
use crate::error::{FencingFault, NodeOutcome};
use crate::lock::{Name, Names};
use crate::script;
use crate::Token;

/// How a script command is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `EVALSHA <digest>`, as first sent.
    Evalsha,
    /// `EVAL <script>`: the fallback after `NOSCRIPT`. (Connections write it, and `FCALL`,
    /// by rewriting the `EVALSHA` form: see `forms.rs`; only tests encode them directly.)
    #[cfg_attr(not(test), allow(dead_code))]
    Eval,
}

/// Which operation a command belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// `SET NX PX`, or the acquire script for a set of resources or a fenced lock.
    Acquire,
    /// A fenced acquisition's second phase: raise the counter to `Command::fence_value`.
    Fence,
    /// The compare-and-delete of a lock's keys.
    Release,
    /// The compare-and-pexpire of a lock's keys.
    Extend,
    /// `GET key`: who holds it (an inspection, `Redlock::inspect`).
    Get,
    /// `PTTL key`: how long it has left (an inspection).
    Pttl,
    /// `ZRANGE key 0 LINE_READ_MAX WITHSCORES`: the waiters of a fair-mode line, by ticket
    /// (an inspection of the line; the key is the line's own, [`queue_key`]).
    Line,
    /// `PTTL key` read by a waiter: the same command, preceded where the connection tracks
    /// keys by `CLIENT CACHING YES`, so that the server notes the key for this connection
    /// (tracking is opt-in: no other read, a script's included, makes the server push).
    Watch,
    /// Fair mode: join the line of each resource ([`script::WAIT`]); the reply says whether
    /// the resource is now reserved for this client (`-3`) or its `PTTL`.
    Wait,
    /// Fair mode: a waiter's try ([`script::CLAIM`]), answered as the acquire script.
    Claim,
    /// Fair mode: the first try of an acquisition that may wait ([`script::ENTER`]): `SET NX
    /// PX` (and the counter's `INCR` when fenced), and, refused, the wait of
    /// [`OpKind::Wait`] in the same call.
    Enter,
    /// Fair mode: leave the line of each resource and pass a reservation on
    /// ([`script::LEAVE`]).
    Leave,
    /// Fair mode: the release of a claim that failed overall: the hand-off script that keeps
    /// the client's place in the lines (a release proper takes it out; where the claim took it
    /// out, it goes back at its ticket, `fence_value`) and hands what it took to the line's
    /// head, which is the client itself where it still heads it.
    Unclaim,
    /// A permit of a semaphore ([`script::PERMIT`]): the first free slot of the command's
    /// resources (the semaphore's slots, in the caller's order), `SET NX PX` with the token.
    /// A yes names its slot ([`Extra::Slot`]); the round is won by a quorum naming one slot.
    Permit,
    /// The slots script ([`script::SLOTS`]) over a semaphore's slots (the command's
    /// resources): which are free on each master, read when a permit's votes split over
    /// slots (the reply is kept whole).
    Slots,
    /// Fair mode: move the client's place in each resource's line to the ticket
    /// `fence_value` where it is lower (`ZADD <line> XX GT <ticket> <id>`): the largest of the
    /// tickets the masters gave it, so that every master orders the line alike (equal
    /// tickets are ordered by client id).
    Retick,
}

/// What the fair scripts need beside a command's own arguments: the client's id (its place
/// in the lines, and its bell), the claim lease, and how long a line outlives its last
/// visit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fair {
    /// The client's id (a few hex digits).
    pub id: Box<[u8]>,
    /// How long a hand-off reserves a resource for the waiter it rang, in ms.
    pub claim_ms: u64,
    /// The ttl a line's key gets on every visit, in ms.
    pub queue_ttl_ms: u64,
}

/// The index of the last entry an inspection reads of a line ([`OpKind::Line`]): it reads
/// at most `LINE_READ_MAX + 1` waiters, and says when there are more than `LINE_READ_MAX`.
pub const LINE_READ_MAX: usize = 1000;

/// The queue key of a resource: [`script::QUEUE_PREFIX`] + its name, appended to `dst`.
pub fn queue_key(name: &[u8], dst: &mut Vec<u8>) {
    dst.extend_from_slice(script::QUEUE_PREFIX.as_bytes());
    dst.extend_from_slice(name);
}

/// The prefix of the key a set's waiter watches in fair mode: it stands in the line of each
/// of its resources at once. No server holds such a key; the engine reads the resources
/// from it ([`lines_of`]).
pub const LINES_PREFIX: &str = "redlock-mux:lines:";

/// The watch key of a set's waiter in fair mode, appended to `dst`: [`LINES_PREFIX`], then
/// each resource's length (4 bytes, big-endian) and name.
pub fn lines_key(names: &[crate::lock::Name], dst: &mut Vec<u8>) {
    dst.extend_from_slice(LINES_PREFIX.as_bytes());
    for name in names {
        let b = name.as_bytes();
        dst.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
        dst.extend_from_slice(b);
    }
}

/// Whether the watch key `key` is a set's ([`lines_key`]) that stands in `resource`'s line.
pub fn lines_of(key: &[u8], resource: &[u8]) -> bool {
    let Some(mut rest) = key.strip_prefix(LINES_PREFIX.as_bytes()) else {
        return false;
    };
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = u32::from_be_bytes(*len) as usize;
        let Some((name, tail)) = tail.split_at_checked(len) else {
            return false;
        };
        if name == resource {
            return true;
        }
        rest = tail;
    }
    false
}

/// One operation's command, the same for every node.
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    pub(crate) kind: OpKind,
    /// The lock's resources: one, or a set.
    pub(crate) resources: &'a [Name],
    /// The lock's token; `None` for a read (`GET`, `PTTL`), which carries none.
    pub(crate) token: Option<&'a Token>,
    /// The ttl in milliseconds, for acquire and extend.
    pub(crate) ttl_ms: u64,
    /// The fencing counter's key: acquire increments it, fence raises it. `None` unfenced.
    pub(crate) counter: Option<&'a [u8]>,
    /// For [`OpKind::Fence`]: the token the client chose, which the counter is raised to.
    pub(crate) fence_value: u64,
    /// The driver's id of the watch its operation holds while the command runs, if any (see
    /// [`Command::watched_by`]).
    pub(crate) watch: Option<u64>,
}

/// The shape of the replies to a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `SET NX`: `+OK`, or null when held.
    Set,
    /// The acquire script, unfenced: `0`, or `-i` when key `i` is held.
    Acquired,
    /// The acquire script, fenced: the counter (`1 ..= MAX_FENCING_TOKEN`), or `-i` when key
    /// `i` is held; any other number is not a counter fenced acquisitions made, and an error
    /// naming the counter is one `INCR` could not make.
    Fenced,
    /// Release, extend and fence: `1`, `0` (held) or `-1` (gone).
    Script,
    /// A native release (`DELIFEQ`, `DELEX ... IFEQ`): `:1` deleted, `:0` (or null) not
    /// ours.
    NativeRelease,
    /// A native extension (`SET ... IFEQ ... PX`): `+OK`, or null: not ours. Each native
    /// command's yes is its own: a `+OK` out of step never confirms a release, nor a `:1` an
    /// extension.
    NativeExtend,
    /// `GET`: the value (a token, or something else), or null (no key).
    Get,
    /// `PTTL`: an integer.
    Pttl,
    /// `ZRANGE ... WITHSCORES`: an array (RESP2: members and scores in turn; RESP3: a pair
    /// per member). What it holds is kept with the round and read by the inspection.
    Line,
    /// The wait script: `[-3 or a PTTL (-2 or more), the caller's ticket (0 or more)]`.
    Wait,
    /// The enter script, unfenced: `0` when it took the resource, else the wait script's
    /// reply (a refusal that joined the line).
    Entered,
    /// The enter script, fenced: the counter when it took the resource, else the wait
    /// script's reply.
    EnteredFenced,
    /// The leave script: how many reservations it passed on.
    Leave,
    /// The slots script: an array of `0` (free) and `1` (taken), one per slot.
    Slots,
    /// The permit script: the slot it set (`1 ..=` [`MAX_PERMITS`](crate::MAX_PERMITS)), or
    /// `0` when every slot is held.
    Permit,
}

impl Expect {
    /// Whether the round keeps a reply of this shape whole, beside its vote, for the
    /// inspection to read: a line's waiters, and a value that is not a token (a reservation
    /// names the waiter it is for). No other reply is kept.
    pub fn keeps(self, extra: &Extra) -> bool {
        match self {
            Expect::Line | Expect::Slots => true,
            Expect::Get => *extra == Extra::Foreign,
            _ => false,
        }
    }

    /// Whether `reply` is of a shape that can answer a command of this kind: an error reply
    /// answers anything; otherwise only the shapes [`Command::judge`] reads as a vote.
    ///
    /// A reply that cannot answer its command means the connection is out of step with its
    /// commands (bytes lost or added in the middle of the stream, which TCP, TLS and Unix
    /// sockets never do but a broken middlebox may): the engine then drops the connection
    /// rather than read any more of it.
    pub fn fits(self, reply: &Frame) -> bool {
        let reply = reply.without_attributes();
        match (self, reply) {
            (_, Frame::Error(_) | Frame::BulkError(_)) => true,
            (Expect::Set, Frame::Simple(s)) => s.as_ref() == b"OK",
            (Expect::Set | Expect::NativeRelease | Expect::NativeExtend | Expect::Get, f)
                if f.is_null() =>
            {
                true
            }
            // The unfenced script answers `0` or a held key's `-i`: a number of another
            // command (a release's `1`) is out of step.
            (Expect::Acquired, Frame::Integer(n)) => *n == 0 || held_index(*n).is_some(),
            (Expect::Fenced | Expect::Pttl, Frame::Integer(_)) => true,
            (Expect::Script, Frame::Integer(n)) => (-1..=1).contains(n),
            (Expect::Wait | Expect::Entered | Expect::EnteredFenced, Frame::Array(v)) => {
                matches!(v.as_slice(), [Frame::Integer(t), Frame::Integer(k)] if *t >= -3 && *k >= 0)
            }
            (Expect::Entered, Frame::Integer(n)) => *n == 0,
            (Expect::EnteredFenced, Frame::Integer(n)) => *n >= 1,
            (Expect::Leave, Frame::Integer(n)) => *n >= 0,
            (Expect::Permit, Frame::Integer(n)) => (0..=crate::MAX_PERMITS as i64).contains(n),
            (Expect::Line | Expect::Slots, Frame::Array(_)) => true,
            (Expect::NativeRelease, Frame::Integer(n)) => (0..=1).contains(n),
            (Expect::NativeExtend, Frame::Simple(s)) => s.as_ref() == b"OK",
            // A sentinel's answer (see `Conn`) is never a value a lock command reads.
            (Expect::Get, Frame::Bulk(b)) => !crate::conn::is_sync_reply(b),
            _ => false,
        }
    }
}

/// What a reply says beside its vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// Nothing more.
    None,
    /// A fenced acquisition's counter value on this node.
    Counter(u64),
    /// The index, among the lock's resources, of one a node found held by another token.
    HeldKey(u32),
    /// `GET`: the key holds this token.
    Holder(Token),
    /// `GET`: the key holds something that is not a token.
    Foreign,
    /// `PTTL`: the reply.
    Number(i64),
    /// A permit's yes: the slot the node set (its index among the command's resources).
    Slot(u32),
    /// Fair mode's wait: `-3` (reserved for the caller) or the `PTTL` its timer reads, and the
    /// caller's ticket in the line there (0: not in it).
    Waited {
        /// `-3`, or the `PTTL`.
        pttl: i64,
        /// The caller's ticket in that master's line.
        ticket: u64,
    },
}

/// The parts of a script command kept on the stack: verb, script, key count, up to 12
/// resources and the counter, token and two arguments.
const MAX_PARTS: usize = 20;

impl Command<'_> {
    /// Writes the command: `SET`, or a script call in the given form (`EVALSHA` as first
    /// sent, `EVAL` as the fallback after a `NOSCRIPT`). No allocation.
    pub fn encode(&self, dst: &mut impl BufMut, form: Form) {
        self.encode_in(dst, form, None);
    }

    /// [`encode`](Command::encode), for a client in fair mode when `fair` is given: a release
    /// is then the hand-off script, and the fair commands ([`OpKind::Wait`], `Claim`, `Leave`)
    /// carry the lines' keys and the client's id. (A fair command without `fair` is written
    /// with an empty id, which no line holds.)
    pub fn encode_in(&self, dst: &mut impl BufMut, form: Form, fair: Option<&Fair>) {
        self.encode_handed(dst, form, fair, b"");
    }

    /// [`encode_in`](Command::encode_in), with for a claim ([`OpKind::Claim`]) the tag of the
    /// hand-off whose bells woke the waiter (see [`script::CLAIM`]; empty: none).
    pub fn encode_handed(
        &self,
        dst: &mut impl BufMut,
        form: Form,
        fair: Option<&Fair>,
        handoff: &[u8],
    ) {
        let fair_kind = matches!(
            self.kind,
            OpKind::Wait
                | OpKind::Claim
                | OpKind::Enter
                | OpKind::Leave
                | OpKind::Retick
                | OpKind::Unclaim
        ) || (self.kind == OpKind::Release && fair.is_some());
        if fair_kind {
            return self.encode_fair(dst, form, fair, handoff);
        }
        let mut ttl_buf = IntBuf::new();
        let ttl = match self.kind {
            OpKind::Acquire | OpKind::Extend | OpKind::Permit => {
                ttl_buf.format(i64::try_from(self.ttl_ms).unwrap_or(i64::MAX))
            }
            _ => &b""[..],
        };
        let token = self.token.map_or(&b""[..], Token::as_bytes);
        let plain_set =
            self.kind == OpKind::Acquire && self.counter.is_none() && self.resources.len() == 1;
        if plain_set {
            let key = self.resources[0].as_bytes();
            resp::encode_command(dst, &[b"SET", key, token, b"NX", b"PX", ttl]);
            return;
        }
        let (script, sha) = match self.kind {
            OpKind::Acquire => (script::ACQUIRE, script::ACQUIRE_SHA1),
            OpKind::Release => (script::RELEASE, script::RELEASE_SHA1),
            OpKind::Extend => (script::EXTEND, script::EXTEND_SHA1),
            OpKind::Fence => (script::FENCE, script::FENCE_SHA1),
            OpKind::Permit => (script::PERMIT, script::PERMIT_SHA1),
            OpKind::Slots => (script::SLOTS, script::SLOTS_SHA1),
            OpKind::Line => {
                let key = self.resources.first().map_or(&b""[..], Name::as_bytes);
                let mut last = IntBuf::new();
                let last = last.format(LINE_READ_MAX as i64);
                resp::encode_command(dst, &[b"ZRANGE", key, b"0", last, b"WITHSCORES"]);
                return;
            }
            // Reads: plain commands, no script. (The fair kinds went to `encode_fair`.)
            OpKind::Get
            | OpKind::Pttl
            | OpKind::Watch
            | OpKind::Wait
            | OpKind::Claim
            | OpKind::Enter
            | OpKind::Leave
            | OpKind::Retick
            | OpKind::Unclaim => {
                let verb: &[u8] = if self.kind == OpKind::Get {
                    b"GET"
                } else {
                    b"PTTL"
                };
                let key = self.resources.first().map_or(&b""[..], Name::as_bytes);
                resp::encode_command(dst, &[verb, key]);
                return;
            }
        };
        let (verb, body): (&[u8], &[u8]) = match form {
            Form::Eval => (b"EVAL", script.as_bytes()),
            Form::Evalsha => (b"EVALSHA", sha.as_bytes()),
        };
        // The counter is a key of the scripts that touch it, after the resources.
        let counter = match self.kind {
            OpKind::Acquire | OpKind::Fence => self.counter,
            _ => None,
        };
        let nkeys = self.resources.len() + usize::from(counter.is_some());
        // Small numbers (the key counts of every lock of up to nine resources) need no
        // formatting; the others are formatted only where the command carries them.
        const DIGITS: [&[u8]; 10] = [b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"];
        let mut nkeys_buf = IntBuf::new();
        let nkeys_s = match DIGITS.get(nkeys) {
            Some(d) => d,
            None => nkeys_buf.format(nkeys as i64),
        };
        let mut n_buf = IntBuf::new();
        let n = match (self.kind, DIGITS.get(self.resources.len())) {
            (OpKind::Acquire, Some(d)) => d,
            (OpKind::Acquire, None) => n_buf.format(self.resources.len() as i64),
            _ => &b""[..],
        };
        let mut value_buf = IntBuf::new();
        let value = if self.kind == OpKind::Fence {
            value_buf.format(i64::try_from(self.fence_value).unwrap_or(i64::MAX))
        } else {
            &b""[..]
        };
        // Verb, script, key count, the keys, then the arguments: on the stack up to a few
        // keys (every single-resource command), on the heap for large sets.
        let mut parts: smallvec::SmallVec<[&[u8]; MAX_PARTS]> = smallvec::SmallVec::new();
        parts.extend_from_slice(&[verb, body, nkeys_s]);
        parts.extend(self.resources.iter().map(Name::as_bytes));
        parts.extend(counter);
        parts.push(token);
        match self.kind {
            OpKind::Acquire => parts.extend_from_slice(&[ttl, n]),
            OpKind::Extend | OpKind::Permit => parts.push(ttl),
            OpKind::Fence => parts.push(value),
            _ => {}
        }
        resp::encode_command(dst, &parts);
    }

    /// Whether the command is a call of one of our scripts (written as `EVALSHA`, sent again
    /// in another form when the server refuses that one): all but a plain `SET NX`, the reads
    /// and the line's `ZADD` (`OpKind::Retick`).
    pub fn is_script(&self) -> bool {
        match self.kind {
            OpKind::Acquire => !(self.counter.is_none() && self.resources.len() == 1),
            OpKind::Get | OpKind::Pttl | OpKind::Line | OpKind::Watch | OpKind::Retick => false,
            _ => true,
        }
    }

    /// The same arguments for another operation.
    pub fn with_kind(self, kind: OpKind) -> Self {
        Command { kind, ..self }
    }

    /// The same command, run by an operation that holds watch `watch` (the id its driver
    /// gave [`Engine::watch`](crate::engine::Engine::watch)), or none. Drivers set it on every
    /// round; the engine reads it for a fair enter round, whose operation registered the
    /// watch of the resource's line before the enter went out: a refusal that comes after
    /// the round was won is answered with a leave unless a waiter of the client other than
    /// that operation stands in the line (see `Engine::late_enter`).
    pub fn watched_by(self, watch: Option<u64>) -> Self {
        Command { watch, ..self }
    }

    /// Whether the command has a native form (`Scripts::Auto`/`Native`): a release or an
    /// extension of a single resource.
    pub fn has_native_form(&self) -> bool {
        matches!(self.kind, OpKind::Release | OpKind::Extend) && self.resources.len() == 1
    }

    /// Writes the native form for a server of kind `native` (only for a command that
    /// [`has_native_form`](Command::has_native_form)): `DELIFEQ key token` (Valkey) or `DELEX
    /// key IFEQ token` (Redis) for a release, `SET key token IFEQ token PX ttl` for an
    /// extension.
    pub fn encode_native(&self, dst: &mut impl BufMut, native: Native) {
        let key = self.resources.first().map_or(&b""[..], Name::as_bytes);
        let token = self.token.map_or(&b""[..], Token::as_bytes);
        match (self.kind, native) {
            (OpKind::Extend, _) => {
                let mut ttl = IntBuf::new();
                let ttl = ttl.format(i64::try_from(self.ttl_ms).unwrap_or(i64::MAX));
                resp::encode_command(dst, &[b"SET", key, token, b"IFEQ", token, b"PX", ttl]);
            }
            (_, Native::Valkey) => resp::encode_command(dst, &[b"DELIFEQ", key, token]),
            (_, Native::Redis) => resp::encode_command(dst, &[b"DELEX", key, b"IFEQ", token]),
        }
    }

    /// What a reply to this command looks like.
    pub fn expect(&self) -> Expect {
        match self.kind {
            OpKind::Acquire if self.counter.is_none() && self.resources.len() == 1 => Expect::Set,
            OpKind::Acquire if self.counter.is_some() => Expect::Fenced,
            OpKind::Acquire => Expect::Acquired,
            OpKind::Fence | OpKind::Release | OpKind::Extend | OpKind::Unclaim => Expect::Script,
            OpKind::Get => Expect::Get,
            OpKind::Pttl | OpKind::Watch => Expect::Pttl,
            OpKind::Line => Expect::Line,
            OpKind::Claim if self.counter.is_some() => Expect::Fenced,
            OpKind::Claim => Expect::Acquired,
            OpKind::Enter if self.counter.is_some() => Expect::EnteredFenced,
            OpKind::Enter => Expect::Entered,
            OpKind::Wait => Expect::Wait,
            OpKind::Leave | OpKind::Retick => Expect::Leave,
            OpKind::Permit => Expect::Permit,
            OpKind::Slots => Expect::Slots,
        }
    }

    /// Judges a node's reply to a command whose replies look like `expect` (nothing else
    /// decides the verdict). A `NOSCRIPT` never gets here from a scripted command (its
    /// connection sends the `EVAL` form instead): one that does is a server error like any
    /// other.
    pub fn judge(expect: Expect, reply: &Frame) -> (NodeOutcome, Extra) {
        let reply = reply.without_attributes();
        let plain = |o| (o, Extra::None);
        match (expect, reply) {
            (Expect::Set, Frame::Simple(s)) if s.as_ref() == b"OK" => plain(NodeOutcome::Ok),
            (Expect::Set, f) if f.is_null() => (NodeOutcome::Held, Extra::HeldKey(0)),
            (Expect::Acquired, Frame::Integer(0)) => (NodeOutcome::Ok, Extra::Counter(0)),
            (Expect::Acquired, Frame::Integer(n)) if held_index(*n).is_some() => (
                NodeOutcome::Held,
                held_index(*n).map_or(Extra::None, Extra::HeldKey),
            ),
            (Expect::Fenced, Frame::Integer(n)) => fenced(*n),
            // The enter script took the resource (a refusal answers as the wait, below).
            (Expect::Entered, Frame::Integer(0)) => (NodeOutcome::Ok, Extra::Counter(0)),
            (Expect::EnteredFenced, Frame::Integer(n)) if *n >= 1 => fenced(*n),
            (Expect::Fenced | Expect::EnteredFenced, Frame::Error(msg) | Frame::BulkError(msg)) => {
                plain(counter_fault(msg).map_or_else(|| server_error(msg), NodeOutcome::Fencing))
            }
            (Expect::Script, Frame::Integer(1)) => plain(NodeOutcome::Ok),
            (Expect::Script, Frame::Integer(0)) => plain(NodeOutcome::Held),
            (Expect::Script, Frame::Integer(-1)) => plain(NodeOutcome::Gone),
            (Expect::NativeRelease, Frame::Integer(1)) => plain(NodeOutcome::Ok),
            (Expect::NativeExtend, Frame::Simple(s)) if s.as_ref() == b"OK" => {
                plain(NodeOutcome::Ok)
            }
            (Expect::NativeRelease, Frame::Integer(0)) => plain(NodeOutcome::NotOurs),
            (Expect::NativeRelease | Expect::NativeExtend, f) if f.is_null() => {
                plain(NodeOutcome::NotOurs)
            }
            (Expect::Get, Frame::Bulk(b)) => {
                let token = std::str::from_utf8(b).ok().and_then(Token::parse);
                (NodeOutcome::Ok, token.map_or(Extra::Foreign, Extra::Holder))
            }
            (Expect::Get, f) if f.is_null() => plain(NodeOutcome::Gone),
            (Expect::Pttl | Expect::Wait, Frame::Integer(n)) => {
                (NodeOutcome::Ok, Extra::Number(*n))
            }
            // The wait script: the `PTTL` its timer reads (or `-3`, reserved for the caller)
            // and the caller's ticket there.
            // The enter script refused: the resource is held (or reserved), and the caller
            // joined its line there, as the wait script's reply says.
            (Expect::Wait | Expect::Entered | Expect::EnteredFenced, Frame::Array(v)) => {
                match v.as_slice() {
                    [Frame::Integer(t), Frame::Integer(k)] if *t >= -3 && *k >= 0 => (
                        if expect == Expect::Wait {
                            NodeOutcome::Ok
                        } else {
                            NodeOutcome::Held
                        },
                        Extra::Waited {
                            pttl: *t,
                            ticket: k.unsigned_abs(),
                        },
                    ),
                    _ => plain(NodeOutcome::Server(format!(
                        "unexpected reply {}",
                        describe(reply)
                    ))),
                }
            }
            (Expect::Leave, Frame::Integer(_)) => plain(NodeOutcome::Ok),
            (Expect::Permit, Frame::Integer(0)) => plain(NodeOutcome::Held),
            (Expect::Permit, Frame::Integer(n)) if (1..=crate::MAX_PERMITS as i64).contains(n) => (
                NodeOutcome::Ok,
                Extra::Slot(u32::try_from(*n - 1).unwrap_or(u32::MAX)),
            ),
            (Expect::Line | Expect::Slots, Frame::Array(_)) => plain(NodeOutcome::Ok),
            (_, Frame::Error(msg) | Frame::BulkError(msg)) => plain(server_error(msg)),
            (_, other) => plain(NodeOutcome::Server(format!(
                "unexpected reply {}",
                describe(other)
            ))),
        }
    }
}

/// An error reply as a node's outcome: its text.
fn server_error(msg: &[u8]) -> NodeOutcome {
    NodeOutcome::Server(String::from_utf8_lossy(msg).into_owned())
}

/// The index (from 0) of the held key an acquire script's `-i` names, for `i` in `1 ..=`
/// [`MAX_RESOURCES`](crate::MAX_RESOURCES); `None` for any other number.
fn held_index(n: i64) -> Option<u32> {
    let max_held = -(crate::MAX_RESOURCES as i64);
    (max_held..=-1)
        .contains(&n)
        .then(|| u32::try_from(-n - 1).ok())
        .flatten()
}

/// A fenced acquisition's integer reply: a counter in `1 ..= MAX_FENCING_TOKEN`, or `-i` for
/// a held key `i` of at most [`MAX_RESOURCES`](crate::MAX_RESOURCES). Anything else cannot
/// come from a counter only fenced acquisitions wrote (nor from a key index): it is the
/// node's failure, and never becomes the token (which the second phase would then write to
/// every master's counter).
fn fenced(n: i64) -> (NodeOutcome, Extra) {
    let max_held = -(crate::MAX_RESOURCES as i64);
    match u64::try_from(n) {
        Ok(c @ 1..=crate::MAX_FENCING_TOKEN) => (NodeOutcome::Ok, Extra::Counter(c)),
        // `-i`: the i-th key (from 1) is held.
        Err(_) if n >= max_held => (
            NodeOutcome::Held,
            u32::try_from(-n - 1).map_or(Extra::None, Extra::HeldKey),
        ),
        _ => (
            NodeOutcome::Fencing(FencingFault::CounterOutOfRange(n)),
            Extra::None,
        ),
    }
}

/// What an error reply to the fenced acquire script says of the counter: the server's
/// messages for an `INCR` it could not make (raised inside the script, so wrapped in the
/// script's error text).
fn counter_fault(msg: &[u8]) -> Option<FencingFault> {
    let has = |needle: &[u8]| msg.windows(needle.len()).any(|w| w == needle);
    if has(b"increment or decrement would overflow") {
        Some(FencingFault::CounterOverflow)
    } else if has(b"value is not an integer or out of range") {
        Some(FencingFault::CounterNotAnInteger)
    } else {
        None
    }
}

/// A command with owned arguments: what a queued request (blocking) or a message to the
/// driver task (async) carries.
#[derive(Debug, Clone)]
pub struct OwnedCommand {
    kind: OpKind,
    resources: Names,
    token: Option<Token>,
    ttl_ms: u64,
    counter: Option<Box<[u8]>>,
    fence_value: u64,
    watch: Option<u64>,
}

impl OwnedCommand {
    /// A copy of `cmd` that owns its arguments.
    pub fn new(cmd: &Command<'_>) -> OwnedCommand {
        OwnedCommand {
            kind: cmd.kind,
            resources: cmd.resources.iter().cloned().collect(),
            token: cmd.token.copied(),
            ttl_ms: cmd.ttl_ms,
            counter: cmd.counter.map(Into::into),
            fence_value: cmd.fence_value,
            watch: cmd.watch,
        }
    }

    /// The command, borrowing from this copy.
    pub fn borrow(&self) -> Command<'_> {
        Command {
            kind: self.kind,
            resources: &self.resources,
            token: self.token.as_ref(),
            ttl_ms: self.ttl_ms,
            counter: self.counter.as_deref(),
            fence_value: self.fence_value,
            watch: self.watch,
        }
    }
}

/// A short description of a reply, for error messages (never the whole payload).
fn describe(f: &Frame) -> String {
    let s = format!("{f:?}");
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

mod fair;
#[cfg(test)]
mod tests;
