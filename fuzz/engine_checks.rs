//! The engine fuzz target's harness and checks: arbitrary bytes read as a script of events
//! into the deterministic core, and the properties every script must keep.
//!
//! This file is compiled twice: into the cargo-fuzz target `fuzz_targets/engine.rs`, and into
//! `core/tests/engine_corpus.rs`, which replays every committed input (`fuzz/corpus/engine`,
//! `fuzz/regressions/engine`) under `cargo test`. A property fails by panicking, which is what
//! libFuzzer reports as a crash; nothing else here panics on any input.
//!
//! # The harness
//! One [`Engine`] over 1 to 7 nodes and no sockets: the harness is its driver. Operations
//! (`Acquire`, `Extend`, `Release`, `Inspect`) run as the clients run them, through
//! [`Operation::step`], each in a future of its own (as in the async client) so that many are
//! in flight at once, pipelined on the same connections; their rounds, sleeps, watches and
//! waits are served as `redlock-mux`'s drivers serve them (`drivers::next_step`, the blocking
//! client's `run`). Time is a base `Instant` plus offsets the input gives; randomness is
//! [`Seeded`] with a seed from the input. The servers are the input: canned replies from a
//! plausible server (right or wrong answers, `NOSCRIPT`, refusals, odd shapes) or raw bytes,
//! to any node, delivered in pieces split anywhere, invalidation pushes, connects refused,
//! left pending or completed, connections closed, writes blocked or trickled, time jumps.
//!
//! # The input
//! Header (missing bytes read as 0): nodes `1 + b0 % 7`; flags `b1` (bit 0 fail-fast off,
//! 1 fencing, 2 wake-ups, 3-4 scripts mode Auto/Eval/Native/Function, 5 quorum one above the
//! majority, 6 `AUTH` and `SELECT` on login); node timeout `1 + b2` ms; tries `1 + b3 % 4` and
//! retry delay `1 + (b3 >> 2) * 10` ms; drift factor `[0.01, 0, 0.1, 0.5][b4 % 4]`; server
//! kinds `b5` (two bits a node: Redis 7.0, Valkey 9.1, Redis 8.4, a server without `HELLO`);
//! seed `b6..b10`. Then events, each an opcode byte (`% 17`, see [`Op`]) and its arguments.
//! [`Script`] writes inputs by name (the seed corpus is made with it).
//!
//! # The checks
//! The model below reads what the engine writes and what the servers send, with its own
//! decoder, and pairs the replies of each connection with its commands in order (RESP's one
//! rule); it knows nothing of the engine's bookkeeping. Against it:
//! 1. every node counted `Ok` (or held, gone, not ours) in a decided round was sent a reply of
//!    that meaning to that round's very command (a `+OK` to its `SET NX`, `:1` to its release
//!    script, ...): no reply is taken for another command's, and no won round lacks a quorum
//!    of OK replies to its command;
//! 2. a lock, extension or release that succeeds rests on a quorum of OK replies to its
//!    command; a lock is valid no later than its round's start plus its ttl, the nodes it says
//!    granted it did, its fencing token is a counter a node answered and its write-back won;
//!    a failed extension never lengthens the lock;
//! 3. every round submitted completes exactly once, and by its deadline (the node timeout
//!    after its start); the engine never asks to be woken in the past; every operation
//!    finishes exactly once, at the latest when the servers fall silent and time runs on;
//! 4. a reply with nothing owed, or bytes that are not RESP, drop the connection; bytes the
//!    engine handed out are never changed, are valid RESP, and vanish only with their
//!    connection; a watch taken back never fires;
//! 5. commands owed per connection stay bounded by what was submitted, buffers by what was
//!    sent and read, events by what the driver takes; nothing panics.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use redlock_core::command::{Form, OwnedCommand};
use redlock_core::conn::reply_limits;
use redlock_core::engine::{Engine, IoEvent, Wake};
use redlock_core::event::Events;
use redlock_core::lock::names;
use redlock_core::op::{Acquire, Cx, Extend, Input, Inspect, Operation, Release, Retry, Step};
use redlock_core::random::Seeded;
use redlock_core::resp::{Decoder, Frame};
use redlock_core::round::{Decision, Round, Until};
use redlock_core::script;
use redlock_core::{Config, Error, Inspection, Lock, NodeOutcome, Options, Scripts};

/// The event opcodes, in the order of their byte (`byte % 17`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// `resources ttl retry`: start a lock (see [`Harness::start_acquire`]).
    Acquire = 0,
    /// `lock ttl`: extend a held lock.
    Extend = 1,
    /// `lock`: release a held lock.
    Release = 2,
    /// `resource`: inspect a resource.
    Inspect = 3,
    /// `job`: drop an operation half-way (the async client's dropped future).
    Abandon = 4,
    /// `node verdict`: the node answers every command written to it, and the bytes arrive.
    Answer = 5,
    /// `node verdict`: the node answers its next command written, and the bytes arrive.
    AnswerOne = 6,
    /// `node len bytes..`: raw bytes from the node (up to 63).
    Raw = 7,
    /// `node verdict`: the node answers every command written, the bytes held back.
    Hold = 8,
    /// `node n`: `n` bytes held back arrive (0: all of them).
    Deliver = 9,
    /// `node resource`: an invalidation push (resource 4: of every key).
    Push = 10,
    /// `node kind`: the peer closes the connection.
    Close = 11,
    /// `amount`: time passes (see [`Harness::advance_by`]).
    Advance = 12,
    /// `node mode`: how the node's connects go: at once, left pending, refused.
    ConnectMode = 13,
    /// `node`: a pending connect completes.
    Connected = 14,
    /// `node mode`: how the node's socket takes bytes: all, none, 1 or 7 a pass.
    WriteMode = 15,
    /// `verdict`: every node answers every command written to it.
    AnswerAll = 16,
}

/// How many opcodes there are.
pub const OPS: u8 = 17;

/// What a canned reply says (`verdict % 8`; `verdict >> 3` is a parameter: a fencing counter,
/// a ttl, which key is held).
pub mod verdict {
    /// Success: `+OK`, `:1`, the counter, the script's digest, `HELLO`'s map.
    pub const YES: u8 = 0;
    /// Refused: held by another (`$-1`, `:0`, `:-i`).
    pub const NO: u8 = 1;
    /// The key is gone (`:-1`, null).
    pub const GONE: u8 = 2;
    /// The form is refused: `NOPERM`, unknown command.
    pub const REFUSE: u8 = 3;
    /// `NOSCRIPT` to `EVALSHA`, a missing function to `FCALL`.
    pub const NOSCRIPT: u8 = 4;
    /// Another error reply.
    pub const ERROR: u8 = 5;
    /// A reply of a shape that cannot answer the command.
    pub const ODD: u8 = 6;
    /// Success, with a RESP3 attribute in front.
    pub const YES_ATTR: u8 = 7;
}

/// Resource sets an acquisition can take (`byte % 8`).
const RESOURCE_SETS: [&[&str]; 8] = [
    &["a"],
    &["b"],
    &["c"],
    &["d"],
    &["a", "b"],
    &["b", "c", "d"],
    &["a", "a"],
    &[redlock_core::DEFAULT_FENCING_KEY],
];

/// Ttls in milliseconds (`byte % 8`, plus `byte >> 3` ms).
const TTLS: [u64; 8] = [1, 10, 30, 100, 300, 1_000, 10_000, 600_000];

/// Nodes' addresses (never connected to: the harness is the network).
const ADDRS: [&str; 7] = [
    "127.0.0.1:7001",
    "127.0.0.1:7002",
    "127.0.0.1:7003",
    "127.0.0.1:7004",
    "127.0.0.1:7005",
    "127.0.0.1:7006",
    "127.0.0.1:7007",
];

/// How many steps the harness takes, once the input is read, to let every operation end.
const SETTLE_STEPS: usize = 100_000;
/// How many turns one pass may take before the operations count as looping with no time
/// passing.
const PASS_TURNS: usize = 100_000;

// ---------------------------------------------------------------------------------------------
// Reading the input.

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let start = self.pos.min(self.data.len());
        let end = (self.pos + n).min(self.data.len());
        self.pos += n;
        &self.data[start..end]
    }

    fn more(&self) -> bool {
        self.pos < self.data.len()
    }
}

/// The configuration an input's header gives, and the other settings it reads.
#[derive(Debug, Clone)]
pub struct Header {
    /// Nodes, 1 to 7.
    pub nodes: usize,
    /// Fail-fast on.
    pub fail_fast: bool,
    /// Fenced locks.
    pub fencing: bool,
    /// Wake-ups (RESP3, tracking).
    pub wakeups: bool,
    /// 0 Auto, 1 Eval, 2 Native, 3 Function.
    pub scripts: u8,
    /// Quorum one above the majority (where there is room).
    pub big_quorum: bool,
    /// Addresses with a user, password and database: `AUTH` and `SELECT` on login.
    pub login: bool,
    /// `verify_stream`: a sentinel ends every write pass and replies wait for it.
    pub verify: bool,
    /// Node timeout, ms (1 to 256).
    pub timeout_ms: u64,
    /// Tries of `lock`, 1 to 4.
    pub tries: u32,
    /// The retry delay in tens of milliseconds (plus one millisecond), 0 to 63.
    pub delay: u8,
    /// Drift factor, by index: 0.01, 0, 0.1, 0.5.
    pub drift: u8,
    /// Two bits a node: 0 Redis 7.0, 1 Valkey 9.1, 2 Redis 8.4, 3 no `HELLO`.
    pub kinds: u8,
    /// The randomness' seed.
    pub seed: u32,
}

impl Default for Header {
    fn default() -> Header {
        Header {
            nodes: 3,
            fail_fast: true,
            fencing: false,
            wakeups: false,
            scripts: 0,
            big_quorum: false,
            login: false,
            verify: false,
            timeout_ms: 50,
            tries: 1,
            delay: 2,
            drift: 0,
            kinds: 0,
            seed: 1,
        }
    }
}

impl Header {
    fn read(r: &mut Reader<'_>) -> Header {
        let nodes = 1 + usize::from(r.byte() % 7);
        let flags = r.byte();
        let timeout_ms = 1 + u64::from(r.byte());
        let t = r.byte();
        let drift = r.byte() % 4;
        let kinds = r.byte();
        let seed = u32::from_le_bytes([r.byte(), r.byte(), r.byte(), r.byte()]);
        Header {
            nodes,
            fail_fast: flags & 1 == 0,
            fencing: flags & 2 != 0,
            wakeups: flags & 4 != 0,
            scripts: (flags >> 3) & 3,
            big_quorum: flags & 32 != 0,
            login: flags & 64 != 0,
            verify: flags & 128 != 0,
            timeout_ms,
            tries: 1 + u32::from(t % 4),
            delay: t >> 2,
            drift,
            kinds,
            seed,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let flags = u8::from(!self.fail_fast)
            | u8::from(self.fencing) << 1
            | u8::from(self.wakeups) << 2
            | (self.scripts & 3) << 3
            | u8::from(self.big_quorum) << 5
            | u8::from(self.login) << 6
            | u8::from(self.verify) << 7;
        out.push((self.nodes.clamp(1, 7) - 1) as u8);
        out.push(flags);
        out.push((self.timeout_ms.clamp(1, 256) - 1) as u8);
        out.push(((self.tries.clamp(1, 4) - 1) as u8) | (self.delay.min(63) << 2));
        out.push(self.drift & 3);
        out.push(self.kinds);
        out.extend_from_slice(&self.seed.to_le_bytes());
    }

    fn config(&self) -> Config {
        let nodes: Vec<String> = ADDRS[..self.nodes]
            .iter()
            .map(|a| {
                if self.login {
                    format!("redis://user:pass@{a}/2")
                } else {
                    (*a).to_string()
                }
            })
            .collect();
        let majority = self.nodes / 2 + 1;
        let quorum = (self.big_quorum && majority < self.nodes).then_some(majority + 1);
        Options {
            node_timeout: Duration::from_millis(self.timeout_ms),
            tries: self.tries,
            retry_delay: Duration::from_millis(1 + u64::from(self.delay) * 10),
            drift_factor: [0.01, 0.0, 0.1, 0.5][usize::from(self.drift % 4)],
            fail_fast: self.fail_fast,
            quorum,
            fencing: self.fencing,
            scripts: [
                Scripts::Auto,
                Scripts::Eval,
                Scripts::Native,
                Scripts::Function,
            ][usize::from(self.scripts % 4)],
            wakeups: self.wakeups,
            verify_stream: self.verify,
            ..Options::with_nodes(nodes)
        }
        .validate()
        .expect("the harness's options are valid")
    }
}

/// Writes fuzz inputs event by event: the seed corpus' generator.
#[derive(Debug, Clone)]
pub struct Script(Vec<u8>);

impl Script {
    /// An input with this header and no event yet.
    pub fn new(h: &Header) -> Script {
        let mut out = Vec::new();
        h.write(&mut out);
        Script(out)
    }

    /// One event: its opcode and argument bytes.
    pub fn op(mut self, op: Op, args: &[u8]) -> Script {
        self.0.push(op as u8);
        self.0.extend_from_slice(args);
        self
    }

    /// A lock of resource set `res` ([`RESOURCE_SETS`]) for ttl index `ttl` ([`TTLS`]);
    /// `retry` 0 once, 1 `lock`'s tries, 2 within `(retry >> 2) * 20` ms.
    pub fn acquire(self, res: u8, ttl: u8, retry: u8) -> Script {
        self.op(Op::Acquire, &[res, ttl, retry])
    }

    /// Every node answers every command written to it with `v`.
    pub fn answer_all(self, v: u8) -> Script {
        self.op(Op::AnswerAll, &[v])
    }

    /// Node `node` answers every command written to it with `v`.
    pub fn answer(self, node: u8, v: u8) -> Script {
        self.op(Op::Answer, &[node, v])
    }

    /// Node `node` answers its next command with `v`.
    pub fn answer_one(self, node: u8, v: u8) -> Script {
        self.op(Op::AnswerOne, &[node, v])
    }

    /// Node `node` answers every command written with `v`, held back.
    pub fn hold(self, node: u8, v: u8) -> Script {
        self.op(Op::Hold, &[node, v])
    }

    /// `n` held-back bytes of node `node` arrive (0: all).
    pub fn deliver(self, node: u8, n: u8) -> Script {
        self.op(Op::Deliver, &[node, n])
    }

    /// Raw bytes from node `node` (up to 63).
    pub fn raw(self, node: u8, bytes: &[u8]) -> Script {
        let n = bytes.len().min(63);
        self.op(Op::Raw, &[node, n as u8]).bytes(&bytes[..n])
    }

    fn bytes(mut self, b: &[u8]) -> Script {
        self.0.extend_from_slice(b);
        self
    }

    /// Time passes (see [`Harness::advance_by`]).
    pub fn advance(self, amount: u8) -> Script {
        self.op(Op::Advance, &[amount])
    }

    /// The input's bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

// ---------------------------------------------------------------------------------------------
// The model: commands and replies as the wire shows them.

/// What a lock command is about: a round's command, recognised in any of its forms
/// (`SET NX`, `EVALSHA`, `EVAL`, `FCALL`, native).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    op: KeyOp,
    keys: Vec<Bytes>,
    counter: Option<Bytes>,
    token: Bytes,
    /// The ttl (acquire, extend) or the fence value, as sent.
    arg: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum KeyOp {
    Acquire,
    Fence,
    Release,
    Extend,
    Get,
    Pttl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScriptKind {
    Acquire,
    Release,
    Extend,
    Fence,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Evalsha,
    Eval,
    Fcall,
}

/// A command as the wire shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Hello {
        resp3: bool,
    },
    Login,
    Client,
    Config,
    ScriptLoad {
        digest: Option<&'static str>,
    },
    FunctionLoad,
    Ping,
    SetNx,
    SetIfeq,
    Script {
        kind: ScriptKind,
        via: Via,
        fenced: bool,
        keys: usize,
    },
    DelIfEq,
    DelEx,
    Get,
    Pttl,
    Other,
}

#[derive(Debug, Clone)]
struct Cmd {
    shape: Shape,
    key: Option<Key>,
    /// `PING`'s nonce.
    nonce: Bytes,
    /// Where it ends in its connection's stream.
    end: usize,
}

/// What a reply means for the command it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meaning {
    Yes,
    Held,
    Gone,
    NotOurs,
}

/// The replies of each meaning that the nodes sent to one command (any of its forms).
#[derive(Debug, Clone, Default)]
struct Votes {
    yes: u8,
    held: u8,
    gone: u8,
    not_ours: u8,
    /// The counters in fenced acquisitions' OK replies.
    counters: Vec<u64>,
}

impl Votes {
    fn has(&self, node: usize, m: Meaning) -> bool {
        let mask = match m {
            Meaning::Yes => self.yes,
            Meaning::Held => self.held,
            Meaning::Gone => self.gone,
            Meaning::NotOurs => self.not_ours,
        };
        mask & (1 << node) != 0
    }

    fn add(&mut self, node: usize, m: Meaning) {
        let mask = match m {
            Meaning::Yes => &mut self.yes,
            Meaning::Held => &mut self.held,
            Meaning::Gone => &mut self.gone,
            Meaning::NotOurs => &mut self.not_ours,
        };
        *mask |= 1 << node;
    }

    fn yes_count(&self) -> usize {
        self.yes.count_ones() as usize
    }
}

fn eq_ic(a: &[u8], b: &[u8]) -> bool {
    a.eq_ignore_ascii_case(b)
}

fn num(b: &[u8]) -> Option<usize> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Reads a command the engine wrote.
fn parse_cmd(frame: &Frame, end: usize) -> Cmd {
    let args: Vec<Bytes> = match frame {
        Frame::Array(items) => items
            .iter()
            .map(|f| match f {
                Frame::Bulk(b) => b.clone(),
                _ => Bytes::new(),
            })
            .collect(),
        _ => Vec::new(),
    };
    let a = |k: usize| args.get(k).cloned().unwrap_or_default();
    let verb = a(0);
    let key = |op, keys: Vec<Bytes>, counter, token, arg| {
        Some(Key {
            op,
            keys,
            counter,
            token,
            arg,
        })
    };
    let mut cmd = Cmd {
        shape: Shape::Other,
        key: None,
        nonce: Bytes::new(),
        end,
    };
    if eq_ic(&verb, b"HELLO") {
        cmd.shape = Shape::Hello {
            resp3: a(1).as_ref() == b"3",
        };
    } else if eq_ic(&verb, b"AUTH") || eq_ic(&verb, b"SELECT") {
        cmd.shape = Shape::Login;
    } else if eq_ic(&verb, b"CLIENT") {
        cmd.shape = Shape::Client;
    } else if eq_ic(&verb, b"CONFIG") {
        cmd.shape = Shape::Config;
    } else if eq_ic(&verb, b"SCRIPT") {
        let body = a(2);
        cmd.shape = Shape::ScriptLoad {
            digest: script::ALL
                .iter()
                .find(|(_, b)| b.as_bytes() == body.as_ref())
                .map(|(d, _)| *d),
        };
    } else if eq_ic(&verb, b"FUNCTION") {
        cmd.shape = Shape::FunctionLoad;
    } else if eq_ic(&verb, b"PING") {
        cmd.shape = Shape::Ping;
        cmd.nonce = a(1);
    } else if eq_ic(&verb, b"SET") && args.len() == 6 && eq_ic(&a(3), b"NX") {
        cmd.shape = Shape::SetNx;
        cmd.key = key(KeyOp::Acquire, vec![a(1)], None, a(2), a(5));
    } else if eq_ic(&verb, b"SET") && args.len() == 7 && eq_ic(&a(3), b"IFEQ") {
        cmd.shape = Shape::SetIfeq;
        cmd.key = key(KeyOp::Extend, vec![a(1)], None, a(2), a(6));
    } else if eq_ic(&verb, b"DELIFEQ") && args.len() == 3 {
        cmd.shape = Shape::DelIfEq;
        cmd.key = key(KeyOp::Release, vec![a(1)], None, a(2), Bytes::new());
    } else if eq_ic(&verb, b"DELEX") && args.len() == 4 {
        cmd.shape = Shape::DelEx;
        cmd.key = key(KeyOp::Release, vec![a(1)], None, a(3), Bytes::new());
    } else if eq_ic(&verb, b"GET") {
        cmd.shape = Shape::Get;
        cmd.key = key(KeyOp::Get, vec![a(1)], None, Bytes::new(), Bytes::new());
    } else if eq_ic(&verb, b"PTTL") {
        cmd.shape = Shape::Pttl;
        cmd.key = key(KeyOp::Pttl, vec![a(1)], None, Bytes::new(), Bytes::new());
    } else {
        let which = a(1);
        let (via, index) = if eq_ic(&verb, b"EVALSHA") {
            (
                Via::Evalsha,
                script::ALL
                    .iter()
                    .position(|(d, _)| d.as_bytes() == which.as_ref()),
            )
        } else if eq_ic(&verb, b"EVAL") {
            (
                Via::Eval,
                script::ALL
                    .iter()
                    .position(|(_, b)| b.as_bytes() == which.as_ref()),
            )
        } else if eq_ic(&verb, b"FCALL") {
            (
                Via::Fcall,
                script::FUNCTIONS
                    .iter()
                    .position(|f| f.as_bytes() == which.as_ref()),
            )
        } else {
            (Via::Eval, None)
        };
        // ALL and FUNCTIONS: acquire, release, extend, fence.
        let kind = match index {
            Some(0) => ScriptKind::Acquire,
            Some(1) => ScriptKind::Release,
            Some(2) => ScriptKind::Extend,
            Some(3) => ScriptKind::Fence,
            _ => return cmd,
        };
        let nk = num(&a(2)).unwrap_or(0).min(args.len().saturating_sub(3));
        let keys = &args[3..3 + nk];
        let argv = |k: usize| args.get(3 + nk + k).cloned().unwrap_or_default();
        let (k, fenced) = match kind {
            ScriptKind::Acquire => {
                let n = num(&argv(2)).unwrap_or(nk).min(nk);
                let counter = keys.get(n).filter(|_| nk > n).cloned();
                let fenced = counter.is_some();
                (
                    key(
                        KeyOp::Acquire,
                        keys[..n].to_vec(),
                        counter,
                        argv(0),
                        argv(1),
                    ),
                    fenced,
                )
            }
            ScriptKind::Release => (
                key(KeyOp::Release, keys.to_vec(), None, argv(0), Bytes::new()),
                false,
            ),
            ScriptKind::Extend => (
                key(KeyOp::Extend, keys.to_vec(), None, argv(0), argv(1)),
                false,
            ),
            ScriptKind::Fence => {
                let split = nk.saturating_sub(1);
                (
                    key(
                        KeyOp::Fence,
                        keys[..split].to_vec(),
                        keys.get(split).cloned(),
                        argv(0),
                        argv(1),
                    ),
                    false,
                )
            }
        };
        cmd.shape = Shape::Script {
            kind,
            via,
            fenced,
            keys: nk,
        };
        cmd.key = k;
    }
    cmd
}

/// The key of a command as the engine was given it (encoded as it first goes out).
fn key_of(cmd: &redlock_core::command::Command<'_>) -> Option<Key> {
    let mut wire = Vec::new();
    cmd.encode(&mut wire, Form::Evalsha);
    let mut buf = BytesMut::from(&wire[..]);
    match Decoder::default().decode(&mut buf) {
        Ok(Some(f)) => parse_cmd(&f, 0).key,
        _ => None,
    }
}

/// What `reply` means as the answer to a command of `shape`, as the servers define it (the
/// table in `core/src/command.rs`): `None` for anything else.
fn meaning(shape: Shape, reply: &Frame) -> Option<(Meaning, Option<u64>)> {
    let f = reply.without_attributes();
    let m = |m| Some((m, None));
    match (shape, f) {
        (Shape::SetNx, Frame::Simple(s)) if s.as_ref() == b"OK" => m(Meaning::Yes),
        (Shape::SetNx, f) if f.is_null() => m(Meaning::Held),
        (
            Shape::Script {
                kind: ScriptKind::Acquire,
                fenced,
                ..
            },
            Frame::Integer(n),
        ) => {
            let n = *n;
            if !fenced && n == 0 {
                m(Meaning::Yes)
            } else if fenced && (1..=redlock_core::MAX_FENCING_TOKEN as i64).contains(&n) {
                Some((Meaning::Yes, Some(n as u64)))
            } else if (-1024..=-1).contains(&n) {
                m(Meaning::Held)
            } else {
                None
            }
        }
        (Shape::Script { .. }, Frame::Integer(1)) => m(Meaning::Yes),
        (Shape::Script { .. }, Frame::Integer(0)) => m(Meaning::Held),
        (Shape::Script { .. }, Frame::Integer(-1)) => m(Meaning::Gone),
        (Shape::DelIfEq | Shape::DelEx, Frame::Integer(1)) => m(Meaning::Yes),
        (Shape::DelIfEq | Shape::DelEx, Frame::Integer(0)) => m(Meaning::NotOurs),
        (Shape::DelIfEq | Shape::DelEx | Shape::SetIfeq, f) if f.is_null() => m(Meaning::NotOurs),
        (Shape::SetIfeq, Frame::Simple(s)) if s.as_ref() == b"OK" => m(Meaning::Yes),
        (Shape::Get, Frame::Bulk(_)) => m(Meaning::Yes),
        (Shape::Get, f) if f.is_null() => m(Meaning::Gone),
        (Shape::Pttl, Frame::Integer(_)) => m(Meaning::Yes),
        _ => None,
    }
}

/// Whether a reply can make the engine queue commands while it reads (a refused or missing
/// script sent again, `CLIENT TRACKING` after `HELLO`): input is handed over in pieces that
/// end after such a reply, so that the model sees those commands before the next reply.
fn may_queue(frame: &Frame) -> bool {
    matches!(
        frame.without_attributes(),
        Frame::Error(_) | Frame::BulkError(_) | Frame::Map(_) | Frame::Array(_) | Frame::Set(_)
    )
}

/// One connection, as the wire shows it.
#[derive(Debug, Default)]
struct Wire {
    /// Every byte the engine handed out (written, then what waits to be).
    stream: Vec<u8>,
    written: usize,
    parsed: usize,
    cmds: Vec<Cmd>,
    /// Replies read, and not yet whole.
    replies: BytesMut,
    paired: usize,
    /// Commands the canned server has answered.
    answered: usize,
    /// The canned server speaks RESP3 here.
    resp3: bool,
    /// The connection must be dropped: a reply with nothing owed, bytes that are not RESP.
    doomed: Option<&'static str>,
    /// Bytes handed out vanished before they were written.
    vanished: bool,
}

/// How a node's connects go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectMode {
    Now,
    Pending,
    Refused,
}

/// How a node's socket takes bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteMode {
    All,
    Blocked,
    Trickle(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sock {
    None,
    Connecting,
    Open,
}

#[derive(Debug)]
struct Node {
    sock: Sock,
    connect: ConnectMode,
    write: WriteMode,
    /// Bytes the node has sent that have not arrived.
    outbox: Vec<u8>,
    wire: Option<Wire>,
    kind: u8,
    /// Commands queued on the node since the start (rounds and fires).
    queued: usize,
    fed: usize,
    handed: usize,
}

// ---------------------------------------------------------------------------------------------
// Operations as futures.

/// What an operation asks of its driver.
enum Want {
    Round(OwnedCommand, Until),
    Sleep(Duration),
    Watch(Box<[u8]>),
    Await(Option<Instant>),
}

/// Between an operation's future and the harness.
struct Port {
    now: Instant,
    want: Option<Want>,
    input: Option<Input>,
    /// What to send if the operation is dropped now.
    abandon: Option<OwnedCommand>,
}

struct Resume<'a>(&'a RefCell<Port>);

impl Future for Resume<'_> {
    type Output = Input;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Input> {
        match self.0.borrow_mut().input.take() {
            Some(input) => Poll::Ready(input),
            None => Poll::Pending,
        }
    }
}

/// Runs `op` to its end, the way the clients' loops do.
async fn drive<O: Operation>(
    mut op: O,
    cfg: Rc<Config>,
    rng: Rc<RefCell<Seeded>>,
    port: Rc<RefCell<Port>>,
) -> Result<O::Output, Error> {
    let mut input = Input::Start;
    let mut events = Events::new();
    loop {
        let want = {
            let now = port.borrow().now;
            let mut rng = rng.borrow_mut();
            let mut cx = Cx {
                now,
                rng: &mut *rng,
                events: &mut events,
            };
            match op.step(input, &cfg, &mut cx) {
                Step::Round(cmd, until) => Want::Round(OwnedCommand::new(&cmd), until),
                Step::Sleep(d) | Step::Jitter(d) => Want::Sleep(d),
                Step::Watch(key) => Want::Watch(key.into()),
                Step::Await(deadline) => Want::Await(deadline),
                Step::Done => break,
            }
        };
        events.clear();
        {
            let mut p = port.borrow_mut();
            p.abandon = op.abandon().map(|c| OwnedCommand::new(&c));
            p.want = Some(want);
        }
        input = Resume(&port).await;
    }
    port.borrow_mut().abandon = None;
    op.finish()
}

enum Out {
    Acquired(Result<Lock, Error>),
    Extended(Result<(), Error>, Lock, Instant, u64),
    Released(Result<(), Error>, Lock),
    Inspected(Result<Inspection, Error>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Its input is there: poll it.
    Ready,
    Round(u64),
    Sleep(Instant),
    /// Until the watch fires or the deadline.
    Await(Instant),
}

struct Job {
    fut: Pin<Box<dyn Future<Output = Out>>>,
    port: Rc<RefCell<Port>>,
    wait: Wait,
    watch: Option<u64>,
    /// The held lock it extends, whose slot it gives back.
    slot: Option<usize>,
}

struct RoundInfo {
    job: Option<usize>,
    key: Option<Key>,
    t1: Instant,
    deadline: Instant,
}

struct Held {
    lock: Lock,
    /// Ttls (ms) its extensions were sent with, so that no two send the same command.
    ttls: Vec<u64>,
    /// An extension of it is running.
    busy: bool,
}

/// What a run reached, for the tests that check the seed corpus reaches what it claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Rounds completed, won, lost.
    pub rounds: usize,
    /// Rounds won.
    pub won: usize,
    /// Rounds lost.
    pub lost: usize,
    /// Locks acquired (and fenced ones among them).
    pub locks: usize,
    /// Fenced locks acquired.
    pub fenced: usize,
    /// Acquisitions that failed.
    pub acquire_failed: usize,
    /// Extensions that succeeded, failed.
    pub extended: usize,
    /// Extensions that failed.
    pub extend_failed: usize,
    /// Releases that succeeded.
    pub released: usize,
    /// Releases that failed.
    pub release_failed: usize,
    /// Inspections finished.
    pub inspected: usize,
    /// Operations dropped half-way.
    pub abandoned: usize,
    /// Node votes that were timeouts.
    pub timeouts: usize,
    /// Node votes that were connection failures.
    pub io_errors: usize,
    /// `NOSCRIPT`s answered with `EVAL` (from the engine's counters).
    pub noscript_fallbacks: u64,
    /// Commands sent in a server's native form.
    pub native_commands: u64,
    /// Connections dropped out of step.
    pub desyncs: u64,
    /// Late replies read and dropped.
    pub late_replies: u64,
    /// Invalidations the nodes pushed and the engine took.
    pub invalidations: u64,
    /// Watches fired.
    pub wakes: usize,
    /// Sleeps between tries.
    pub sleeps: usize,
    /// Connections opened.
    pub connects: usize,
    /// Connections closed by the engine.
    pub engine_closes: usize,
    /// Events read.
    pub events: usize,
}

// ---------------------------------------------------------------------------------------------
// The harness.

/// The engine, its driver, the model and the operations in flight.
pub struct Harness {
    cfg: Rc<Config>,
    engine: Engine<u64>,
    rng: Rc<RefCell<Seeded>>,
    start: Instant,
    now: Instant,
    nodes: Vec<Node>,
    jobs: Vec<Option<Job>>,
    rounds: BTreeMap<u64, RoundInfo>,
    next_round: u64,
    next_watch: u64,
    /// Watches that fired before their operation began to wait.
    fired: BTreeMap<u64, Wake>,
    locks: Vec<Option<Held>>,
    votes: BTreeMap<Key, Votes>,
    /// When the last round of each command started.
    started: BTreeMap<Key, Instant>,
    /// Trace of the events, when asked for.
    trace: Option<Vec<String>>,
    /// The trace printed as it goes (`ENGINE_TRACE` set), to read up to a failed check.
    live: bool,
    /// The report.
    pub report: Report,
}

/// Runs an input through the harness and every check; panics on a violation.
pub fn check_engine(data: &[u8]) {
    run(data, false);
}

/// Runs an input; returns what it reached (and, with `trace`, a readable trace of it).
pub fn run(data: &[u8], trace: bool) -> (Report, Vec<String>) {
    let mut r = Reader { data, pos: 0 };
    let header = Header::read(&mut r);
    let mut h = Harness::new(&header, trace);
    while r.more() {
        h.event(&mut r);
        h.pass();
        h.check_steady();
    }
    h.settle();
    let trace = h.trace.take().unwrap_or_default();
    (h.report, trace)
}

impl Harness {
    fn new(header: &Header, trace: bool) -> Harness {
        let cfg = header.config();
        let start = Instant::now();
        Harness {
            engine: Engine::new(&cfg),
            nodes: (0..header.nodes)
                .map(|i| Node {
                    sock: Sock::None,
                    connect: ConnectMode::Now,
                    write: WriteMode::All,
                    outbox: Vec::new(),
                    wire: None,
                    kind: (header.kinds >> (2 * (i % 4))) & 3,
                    queued: 0,
                    fed: 0,
                    handed: 0,
                })
                .collect(),
            cfg: Rc::new(cfg),
            rng: Rc::new(RefCell::new(Seeded::new(u64::from(header.seed)))),
            start,
            now: start,
            jobs: Vec::new(),
            rounds: BTreeMap::new(),
            next_round: 1,
            next_watch: 1,
            fired: BTreeMap::new(),
            locks: Vec::new(),
            votes: BTreeMap::new(),
            started: BTreeMap::new(),
            trace: trace.then(Vec::new),
            live: trace && std::env::var_os("ENGINE_TRACE").is_some(),
            report: Report::default(),
        }
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if self.trace.is_some() {
            let at = self.now.saturating_duration_since(self.start);
            let line = format!("{at:?} {}", line());
            if self.live {
                eprintln!("{line}");
            }
            if let Some(t) = self.trace.as_mut() {
                t.push(line);
            }
        }
    }

    fn quorum(&self) -> usize {
        self.cfg.quorum()
    }

    fn node(&self, b: u8) -> usize {
        usize::from(b) % self.nodes.len()
    }

    // -- events ---------------------------------------------------------------------------

    fn event(&mut self, r: &mut Reader<'_>) {
        self.report.events += 1;
        let op = r.byte() % OPS;
        match op {
            0 => {
                let (res, ttl, retry) = (r.byte(), r.byte(), r.byte());
                self.start_acquire(res, ttl, retry);
            }
            1 => {
                let (l, ttl) = (r.byte(), r.byte());
                self.start_extend(l, ttl);
            }
            2 => {
                let l = r.byte();
                self.start_release(l);
            }
            3 => {
                let res = r.byte();
                let name = RESOURCE_SETS[usize::from(res % 4)][0];
                self.log(|| format!("inspect {name}"));
                let op = Inspect::new(name);
                self.spawn(None, |cfg, rng, port| {
                    Box::pin(async move { Out::Inspected(drive(op, cfg, rng, port).await) })
                });
            }
            4 => {
                let j = r.byte();
                self.abandon(j);
            }
            5 | 6 | 8 => {
                let (i, v) = (self.node(r.byte()), r.byte());
                self.answer(i, v, op == 6);
                if op != 8 {
                    self.deliver(i, usize::MAX);
                }
            }
            7 => {
                let i = self.node(r.byte());
                let n = usize::from(r.byte() % 64);
                let bytes = r.bytes(n).to_vec();
                self.log(|| format!("node {i} sends {:?}", String::from_utf8_lossy(&bytes)));
                self.nodes[i].outbox.extend_from_slice(&bytes);
                self.deliver(i, usize::MAX);
            }
            9 => {
                let (i, n) = (self.node(r.byte()), r.byte());
                self.deliver(i, if n == 0 { usize::MAX } else { usize::from(n) });
            }
            10 => {
                let (i, k) = (self.node(r.byte()), r.byte() % 5);
                let push: Vec<u8> = if k == 4 {
                    b">2\r\n$10\r\ninvalidate\r\n_\r\n".to_vec()
                } else {
                    let key = RESOURCE_SETS[usize::from(k)][0];
                    format!(
                        ">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n",
                        key.len()
                    )
                    .into_bytes()
                };
                self.log(|| format!("node {i} pushes an invalidation"));
                self.nodes[i].outbox.extend_from_slice(&push);
                self.deliver(i, usize::MAX);
            }
            11 => {
                let (i, k) = (self.node(r.byte()), r.byte());
                self.peer_closes(i, k);
            }
            12 => {
                let b = r.byte();
                self.advance_by(b);
            }
            13 => {
                let (i, m) = (self.node(r.byte()), r.byte());
                self.nodes[i].connect =
                    [ConnectMode::Now, ConnectMode::Pending, ConnectMode::Refused]
                        [usize::from(m % 3)];
            }
            14 => {
                let i = self.node(r.byte());
                self.connected(i);
            }
            15 => {
                let (i, m) = (self.node(r.byte()), r.byte());
                self.nodes[i].write = [
                    WriteMode::All,
                    WriteMode::Blocked,
                    WriteMode::Trickle(1),
                    WriteMode::Trickle(7),
                ][usize::from(m % 4)];
            }
            _ => {
                let v = r.byte();
                for i in 0..self.nodes.len() {
                    self.answer(i, v, false);
                    self.deliver(i, usize::MAX);
                }
            }
        }
    }

    /// Starts a lock: resource set `res % 8` ([`RESOURCE_SETS`]), ttl `TTLS[ttl % 8] + ttl >> 3`
    /// ms, and a single try (`retry % 3 == 0`), `lock`'s tries (1) or tries for
    /// `(retry >> 2) * 20` ms (2).
    pub fn start_acquire(&mut self, res: u8, ttl: u8, retry: u8) {
        let set = RESOURCE_SETS[usize::from(res % 8)];
        let ttl = Duration::from_millis(TTLS[usize::from(ttl % 8)] + u64::from(ttl >> 3));
        let retry = match retry % 3 {
            0 => Retry::once(),
            1 => Retry::new(&self.cfg),
            _ => Retry::within(
                &self.cfg,
                Duration::from_millis(u64::from(retry >> 2) * 20),
                self.now,
            ),
        };
        self.log(|| format!("acquire {set:?} for {ttl:?} ({retry:?})"));
        let names = match names(set) {
            Ok(names) => names,
            Err(_) => return,
        };
        let op = Acquire::new(names, ttl, retry);
        self.spawn(None, |cfg, rng, port| {
            Box::pin(async move { Out::Acquired(drive(op, cfg, rng, port).await) })
        });
    }

    /// A held lock not in use by an extension, picked by `b`.
    fn held(&self, b: u8) -> Option<usize> {
        let free: Vec<usize> = (0..self.locks.len())
            .filter(|&k| self.locks[k].as_ref().is_some_and(|h| !h.busy))
            .collect();
        (!free.is_empty()).then(|| free[usize::from(b) % free.len()])
    }

    fn start_extend(&mut self, l: u8, ttl: u8) {
        let Some(k) = self.held(l) else { return };
        let Some(held) = self.locks[k].as_mut() else {
            return;
        };
        // A ttl no extension of this lock was sent with, so that each round's command is its
        // own.
        let mut ms = TTLS[usize::from(ttl % 8)] + u64::from(ttl >> 3);
        while held.ttls.contains(&ms) {
            ms += 1;
        }
        held.ttls.push(ms);
        held.busy = true;
        let lock = held.lock.clone();
        self.log(|| format!("extend lock {k} to {ms} ms"));
        let ttl = Duration::from_millis(ms);
        self.spawn(Some(k), move |cfg, rng, port| {
            Box::pin(async move {
                let mut lock = lock;
                let before = lock.valid_until();
                let r = drive(Extend::new(&mut lock, ttl), cfg, rng, port).await;
                Out::Extended(r, lock, before, ms)
            })
        });
    }

    fn start_release(&mut self, l: u8) {
        let Some(k) = self.held(l) else { return };
        let Some(held) = self.locks[k].take() else {
            return;
        };
        self.log(|| format!("release lock {k}"));
        let lock = held.lock;
        self.spawn(None, move |cfg, rng, port| {
            Box::pin(async move {
                let r = drive(Release::new(&lock), cfg, rng, port).await;
                Out::Released(r, lock)
            })
        });
    }

    fn spawn(
        &mut self,
        slot: Option<usize>,
        make: impl FnOnce(
            Rc<Config>,
            Rc<RefCell<Seeded>>,
            Rc<RefCell<Port>>,
        ) -> Pin<Box<dyn Future<Output = Out>>>,
    ) {
        let port = Rc::new(RefCell::new(Port {
            now: self.now,
            want: None,
            input: None,
            abandon: None,
        }));
        let fut = make(self.cfg.clone(), self.rng.clone(), port.clone());
        self.jobs.push(Some(Job {
            fut,
            port,
            wait: Wait::Ready,
            watch: None,
            slot,
        }));
    }

    /// Drops an operation half-way, as a dropped future of the async client does: what it
    /// says to send when abandoned is fired, its watch taken back.
    fn abandon(&mut self, b: u8) {
        let live: Vec<usize> = (0..self.jobs.len())
            .filter(|&k| self.jobs[k].is_some())
            .collect();
        if live.is_empty() {
            return;
        }
        let k = live[usize::from(b) % live.len()];
        let Some(job) = self.jobs[k].take() else {
            return;
        };
        self.log(|| format!("abandon operation {k}"));
        self.report.abandoned += 1;
        if let Wait::Round(rid) = job.wait {
            if let Some(info) = self.rounds.get_mut(&rid) {
                info.job = None;
            }
        }
        if let Some(id) = job.watch {
            self.engine.unwatch(id);
            self.fired.remove(&id);
        }
        let cmd = job.port.borrow_mut().abandon.take();
        if let Some(cmd) = cmd {
            self.engine.fire(&cmd.borrow(), self.now);
            for n in &mut self.nodes {
                n.queued += 1;
            }
        }
        if let Some(h) = job.slot.and_then(|s| self.locks[s].as_mut()) {
            h.busy = false;
        }
    }

    // -- the network ----------------------------------------------------------------------

    /// Node `i`'s canned server answers its commands written and not yet answered (only the
    /// next one, with `one`) as `v` says; the replies wait in its outbox.
    fn answer(&mut self, i: usize, v: u8, one: bool) {
        self.refresh(i);
        let kind = self.nodes[i].kind;
        let node = &mut self.nodes[i];
        let Some(wire) = node.wire.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        while wire.answered < wire.cmds.len() && wire.cmds[wire.answered].end <= wire.written {
            let cmd = &wire.cmds[wire.answered];
            reply_for(cmd, v, kind, &mut wire.resp3, &mut out);
            wire.answered += 1;
            if one {
                break;
            }
        }
        node.outbox.extend_from_slice(&out);
        self.log(|| format!("node {i} answers {:?}", String::from_utf8_lossy(&out)));
    }

    /// Up to `n` bytes of node `i`'s outbox arrive: handed to the engine in pieces that end
    /// after each reply that may make it queue commands (see [`may_queue`]), each followed
    /// by what a driver does after a read.
    fn deliver(&mut self, i: usize, n: usize) {
        let n = n.min(self.nodes[i].outbox.len());
        if n == 0 {
            return;
        }
        let bytes: Vec<u8> = self.nodes[i].outbox.drain(..n).collect();
        if self.nodes[i].sock == Sock::Connecting {
            // Readable: the connect is complete (as the drivers see it).
            self.connected(i);
        }
        if self.nodes[i].sock != Sock::Open {
            return;
        }
        let mut from = 0;
        let mut cuts = self.cuts(i, &bytes);
        cuts.push(bytes.len());
        for to in cuts {
            if to <= from {
                continue;
            }
            let piece = &bytes[from..to];
            from = to;
            self.nodes[i].fed += piece.len();
            self.engine.handle_input(i, piece, self.now);
            self.refresh(i);
            self.read_replies(i, piece);
            self.apply_io();
            if self.nodes[i].sock != Sock::Open {
                break;
            }
            self.write(i);
        }
    }

    /// Where to cut `bytes` arriving from node `i`: after each reply that may make the
    /// engine queue commands.
    fn cuts(&self, i: usize, bytes: &[u8]) -> Vec<usize> {
        let Some(wire) = self.nodes[i].wire.as_ref() else {
            return Vec::new();
        };
        let held = wire.replies.len();
        let mut buf = BytesMut::with_capacity(held + bytes.len());
        buf.extend_from_slice(&wire.replies);
        buf.extend_from_slice(bytes);
        let total = buf.len();
        let mut dec = Decoder::new(reply_limits());
        let mut cuts = Vec::new();
        while let Ok(Some(f)) = dec.decode(&mut buf) {
            let end = total - buf.len();
            if end > held && may_queue(&f) {
                cuts.push(end - held);
            }
        }
        cuts
    }

    /// The model reads what node `i` sent, pairs each reply with the oldest command not yet
    /// answered, and records what it means for that command.
    fn read_replies(&mut self, i: usize, piece: &[u8]) {
        let Some(wire) = self.nodes[i].wire.as_mut() else {
            return;
        };
        if wire.doomed.is_some() {
            return;
        }
        wire.replies.extend_from_slice(piece);
        loop {
            let frame = match Decoder::new(reply_limits()).decode(&mut wire.replies) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => {
                    wire.doomed = Some("bytes that are not RESP");
                    break;
                }
            };
            if matches!(frame, Frame::Push(_)) {
                continue;
            }
            let Some(cmd) = wire.cmds.get(wire.paired) else {
                wire.doomed = Some("a reply with nothing owed");
                break;
            };
            wire.paired += 1;
            if let (Some(key), Some((m, counter))) = (&cmd.key, meaning(cmd.shape, &frame)) {
                let votes = self.votes.entry(key.clone()).or_default();
                votes.add(i, m);
                votes.counters.extend(counter);
            }
        }
    }

    /// The model takes in what the engine has handed out for node `i` since it last looked.
    fn refresh(&mut self, i: usize) {
        if self.nodes[i].sock != Sock::Open {
            return;
        }
        let t = self.engine.transmit(i);
        let node = &mut self.nodes[i];
        let Some(wire) = node.wire.as_mut() else {
            return;
        };
        let pending = wire.stream.len() - wire.written;
        if t.is_empty() && pending > 0 {
            // Gone with the connection, whose drop must be on its way.
            wire.vanished = true;
            return;
        }
        assert!(
            t.len() >= pending && t[..pending] == wire.stream[wire.written..],
            "node {i}: bytes handed to the driver changed before they were written"
        );
        let new = &t[pending..];
        if new.is_empty() {
            return;
        }
        wire.stream.extend_from_slice(new);
        node.handed += new.len();
        let mut buf = BytesMut::from(&wire.stream[wire.parsed..]);
        let mut dec = Decoder::default();
        loop {
            let before = buf.len();
            match dec.decode(&mut buf) {
                Ok(Some(f)) => {
                    let end = wire.parsed + (before - buf.len());
                    wire.cmds.push(parse_cmd(&f, end));
                    wire.parsed = end;
                }
                Ok(None) => break,
                Err(e) => panic!("node {i}: the engine wrote bytes that are not RESP: {e:?}"),
            }
        }
    }

    /// Writes what node `i`'s socket takes now.
    fn write(&mut self, i: usize) {
        if self.nodes[i].sock != Sock::Open {
            return;
        }
        self.refresh(i);
        let len = self.engine.transmit(i).len();
        let n = match self.nodes[i].write {
            WriteMode::All => len,
            WriteMode::Blocked => 0,
            WriteMode::Trickle(k) => k.min(len),
        };
        if n == 0 {
            return;
        }
        self.engine.handle_written(i, n);
        if let Some(w) = self.nodes[i].wire.as_mut() {
            w.written += n;
        }
    }

    fn drop_socket(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.sock = Sock::None;
        node.wire = None;
        node.outbox.clear();
    }

    /// Opens and drops the sockets the engine asks for.
    fn apply_io(&mut self) {
        while let Some(ev) = self.engine.poll_io() {
            match ev {
                IoEvent::Close(i) => {
                    self.log(|| format!("engine drops node {i}'s connection"));
                    self.report.engine_closes += 1;
                    self.drop_socket(i);
                }
                IoEvent::Connect(i) => {
                    self.drop_socket(i);
                    self.report.connects += 1;
                    self.nodes[i].wire = Some(Wire::default());
                    self.nodes[i].sock = Sock::Connecting;
                    match self.nodes[i].connect {
                        ConnectMode::Now => self.connected(i),
                        ConnectMode::Pending => {}
                        ConnectMode::Refused => {
                            self.drop_socket(i);
                            let refused = NodeOutcome::Io(std::io::ErrorKind::ConnectionRefused);
                            self.engine.handle_closed(i, refused, self.now);
                        }
                    }
                }
            }
        }
    }

    /// Node `i`'s pending connect completes.
    fn connected(&mut self, i: usize) {
        if self.nodes[i].sock == Sock::Connecting {
            self.engine.handle_connected(i);
            self.nodes[i].sock = Sock::Open;
            self.write(i);
        }
    }

    fn peer_closes(&mut self, i: usize, k: u8) {
        if self.nodes[i].sock == Sock::None {
            return;
        }
        use std::io::ErrorKind as K;
        let kind = [
            K::ConnectionReset,
            K::UnexpectedEof,
            K::BrokenPipe,
            K::ConnectionAborted,
            K::TimedOut,
        ][usize::from(k % 5)];
        self.log(|| format!("node {i} closes its connection ({kind:?})"));
        self.drop_socket(i);
        self.engine
            .handle_closed(i, NodeOutcome::Io(kind), self.now);
    }

    // -- time -----------------------------------------------------------------------------

    /// Time passes: `b & 63` of a unit `b >> 6` picks: 20 µs, 1 ms, a sixteenth of the node
    /// timeout (none of it: to the engine's next timeout), 250 ms.
    pub fn advance_by(&mut self, b: u8) {
        let n = u64::from(b & 63);
        let d = match b >> 6 {
            0 => Duration::from_micros(20 * n),
            1 => Duration::from_millis(n),
            2 if n == 0 => self
                .engine
                .poll_timeout()
                .map_or(Duration::ZERO, |t| t.saturating_duration_since(self.now)),
            2 => self.cfg.node_timeout() * (n as u32) / 16,
            _ => Duration::from_millis(250 * n),
        };
        self.advance_to(self.now + d);
    }

    /// The clock reads `t` (if later): the engine's timeouts, then the operations' timers.
    fn advance_to(&mut self, t: Instant) {
        if t > self.now {
            self.now = t;
        }
        self.log(|| "time".to_string());
        self.engine.handle_timeout(self.now);
        self.apply_io();
        self.pass();
        for k in 0..self.jobs.len() {
            let Some(job) = self.jobs[k].as_mut() else {
                continue;
            };
            match job.wait {
                Wait::Sleep(until) if until <= self.now => {
                    job.wait = Wait::Ready;
                    job.port.borrow_mut().input = Some(Input::Slept);
                    self.report.sleeps += 1;
                }
                Wait::Await(deadline) if deadline <= self.now => self.resolve(k, None),
                _ => {}
            }
        }
        self.pass();
        let late: Vec<u64> = self
            .rounds
            .iter()
            .filter(|(_, r)| r.deadline <= self.now)
            .map(|(id, _)| *id)
            .collect();
        assert!(
            late.is_empty(),
            "rounds {late:?} still open past their deadlines"
        );
        if let Some(t) = self.engine.poll_timeout() {
            assert!(
                t > self.now,
                "the engine asks to be woken {:?} ago, its timeouts handled",
                self.now.saturating_duration_since(t)
            );
        }
    }

    // -- the operations -------------------------------------------------------------------

    /// Polls every operation whose input is there, and serves what each asks for; hands
    /// out completed rounds and fired watches; until nothing moves.
    fn pass(&mut self) {
        for turn in 0.. {
            assert!(
                turn < PASS_TURNS,
                "operations go round with no time passing"
            );
            let mut moved = false;
            for k in 0..self.jobs.len() {
                if self.jobs[k].as_ref().is_some_and(|j| j.wait == Wait::Ready) {
                    moved = true;
                    self.poll_job(k);
                }
            }
            self.apply_io();
            for i in 0..self.nodes.len() {
                self.write(i);
            }
            while let Some(done) = self.engine.poll_completed() {
                moved = true;
                self.complete(done.user, done.round);
            }
            while let Some((id, why)) = self.engine.poll_woken() {
                moved = true;
                self.woken(id, why);
            }
            while self.engine.poll_event().is_some() {}
            if !moved {
                break;
            }
        }
    }

    fn poll_job(&mut self, k: usize) {
        let Some(job) = self.jobs[k].as_mut() else {
            return;
        };
        job.port.borrow_mut().now = self.now;
        let mut cx = Context::from_waker(Waker::noop());
        let polled = job.fut.as_mut().poll(&mut cx);
        let want = job.port.borrow_mut().want.take();
        match (polled, want) {
            (Poll::Ready(out), _) => {
                let slot = self.jobs[k].take().and_then(|j| j.slot);
                self.finish(slot, out);
            }
            (Poll::Pending, Some(want)) => self.want(k, want),
            (Poll::Pending, None) => panic!("operation {k} waits without asking for anything"),
        }
    }

    /// Serves what operation `k` asks for, as the drivers do.
    fn want(&mut self, k: usize, want: Want) {
        let now = self.now;
        let wait = match want {
            Want::Round(cmd, until) => {
                let rid = self.next_round;
                self.next_round += 1;
                let cmd = cmd.borrow();
                let key = key_of(&cmd);
                self.log(|| format!("round {rid} of operation {k}: {key:?}"));
                self.engine.submit(&cmd, until, now, rid);
                for n in &mut self.nodes {
                    n.queued += 1;
                }
                if let Some(key) = &key {
                    self.started.insert(key.clone(), now);
                }
                let deadline = now.checked_add(self.cfg.node_timeout()).unwrap_or(now);
                self.rounds.insert(
                    rid,
                    RoundInfo {
                        job: Some(k),
                        key,
                        t1: now,
                        deadline,
                    },
                );
                Wait::Round(rid)
            }
            Want::Sleep(d) if d.is_zero() => {
                self.set_input(k, Input::Slept);
                Wait::Ready
            }
            Want::Sleep(d) => Wait::Sleep(now + d),
            Want::Watch(key) => {
                let id = self.next_watch;
                self.next_watch += 1;
                self.engine.watch(id, key);
                if let Some(job) = self.jobs[k].as_mut() {
                    job.watch = Some(id);
                }
                self.set_input(k, Input::Watching);
                Wait::Ready
            }
            Want::Await(deadline) => {
                let watch = self.jobs[k].as_ref().and_then(|j| j.watch);
                match (watch, deadline) {
                    (Some(id), Some(deadline)) => {
                        if let Some(why) = self.fired.remove(&id) {
                            return self.resolve(k, Some(why));
                        }
                        if deadline <= now {
                            return self.resolve(k, None);
                        }
                        Wait::Await(deadline)
                    }
                    _ => return self.resolve(k, None),
                }
            }
        };
        if let Some(job) = self.jobs[k].as_mut() {
            job.wait = wait;
        }
    }

    fn set_input(&mut self, k: usize, input: Input) {
        if let Some(job) = self.jobs[k].as_mut() {
            job.port.borrow_mut().input = Some(input);
        }
    }

    /// Operation `k`'s wait ends (its watch fired, or not): the watch is taken back.
    fn resolve(&mut self, k: usize, woken: Option<Wake>) {
        let Some(job) = self.jobs[k].as_mut() else {
            return;
        };
        if let Some(id) = job.watch.take() {
            self.engine.unwatch(id);
            self.fired.remove(&id);
        }
        if woken.is_some() {
            self.report.wakes += 1;
        }
        job.wait = Wait::Ready;
        job.port.borrow_mut().input = Some(Input::Woken(woken));
    }

    fn woken(&mut self, id: u64, why: Wake) {
        let owner = (0..self.jobs.len())
            .find(|&k| self.jobs[k].as_ref().is_some_and(|j| j.watch == Some(id)));
        let Some(k) = owner else {
            panic!("watch {id} fired after it was taken back");
        };
        if matches!(self.jobs[k].as_ref().map(|j| j.wait), Some(Wait::Await(_))) {
            self.resolve(k, Some(why));
        } else {
            self.fired.insert(id, why);
        }
    }

    // -- the checks -----------------------------------------------------------------------

    fn complete(&mut self, rid: u64, round: Round) {
        let Some(info) = self.rounds.remove(&rid) else {
            panic!("round {rid} completed twice, or was never submitted");
        };
        self.check_round(rid, &info, &round);
        if let Some(k) = info.job {
            let job = self.jobs[k].as_mut().expect("a round's operation is live");
            assert_eq!(job.wait, Wait::Round(rid));
            job.wait = Wait::Ready;
            job.port.borrow_mut().input = Some(Input::Round(Ok((round, info.t1))));
        }
    }

    /// A decided round against the model: every vote that means something rests on a reply
    /// of that meaning to the round's own command, and a won round on a quorum of OKs.
    fn check_round(&mut self, rid: u64, info: &RoundInfo, round: &Round) {
        let quorum = self.quorum();
        let outcomes: Vec<NodeOutcome> = round.reports_iter().cloned().collect();
        assert_eq!(
            outcomes.len(),
            self.nodes.len(),
            "round {rid}: a vote per node"
        );
        self.report.rounds += 1;
        for o in &outcomes {
            match o {
                NodeOutcome::Timeout => self.report.timeouts += 1,
                NodeOutcome::Io(_) => self.report.io_errors += 1,
                _ => {}
            }
        }
        let yes = outcomes.iter().filter(|o| **o == NodeOutcome::Ok).count();
        if let Some(key) = &info.key {
            let votes = self.votes.get(key).cloned().unwrap_or_default();
            for (i, o) in outcomes.iter().enumerate() {
                let need = match o {
                    NodeOutcome::Ok => Meaning::Yes,
                    NodeOutcome::Held => Meaning::Held,
                    NodeOutcome::Gone => Meaning::Gone,
                    NodeOutcome::NotOurs => Meaning::NotOurs,
                    _ => continue,
                };
                assert!(
                    votes.has(i, need),
                    "round {rid} ({key:?}): node {i} counted {o:?}, but sent no reply meaning \
                     {need:?} to that command"
                );
            }
            if round.decision() == Decision::Won {
                assert!(
                    votes.yes_count() >= quorum,
                    "round {rid} ({key:?}) won with OK replies to its command from {} nodes, \
                     under the quorum {quorum}",
                    votes.yes_count()
                );
            }
        }
        match round.decision() {
            Decision::Won => {
                self.report.won += 1;
                assert!(yes >= quorum, "round {rid} won with {yes} yes votes");
            }
            Decision::Lost => {
                self.report.lost += 1;
                assert!(yes < quorum, "round {rid} lost with {yes} yes votes");
            }
            Decision::Open => panic!("round {rid} completed undecided"),
        }
    }

    fn lock_key(&self, op: KeyOp, lock: &Lock, counter: Option<Bytes>, arg: String) -> Key {
        Key {
            op,
            keys: lock
                .resources()
                .map(|r| Bytes::copy_from_slice(r.as_bytes()))
                .collect(),
            counter,
            token: Bytes::copy_from_slice(lock.token().as_bytes()),
            arg: Bytes::from(arg),
        }
    }

    fn assert_quorum(&self, key: &Key, what: &str) {
        let yes = self.votes.get(key).map_or(0, Votes::yes_count);
        assert!(
            yes >= self.quorum(),
            "{what} succeeded with OK replies to its command from {yes} nodes, under the \
             quorum {}: {key:?}",
            self.quorum()
        );
    }

    /// A lock handed to its caller: a quorum of OKs to its acquisition, from the nodes it
    /// names; valid no later than its round's start plus its ttl; its fencing token a
    /// counter a node answered, written back by a quorum.
    fn check_lock(&self, lock: &Lock) {
        let counter = self
            .cfg
            .fencing_key()
            .map(|k| Bytes::copy_from_slice(k.as_bytes()));
        let ttl = lock.ttl().as_millis().to_string();
        let key = self.lock_key(KeyOp::Acquire, lock, counter.clone(), ttl);
        self.assert_quorum(&key, "a lock");
        let votes = self.votes.get(&key).cloned().unwrap_or_default();
        for i in lock.granted_by() {
            assert!(
                votes.has(i, Meaning::Yes),
                "a lock names node {i} as granting it, which sent no OK to its acquisition"
            );
        }
        let t1 = self.started.get(&key).copied().expect("a lock's round ran");
        assert!(
            lock.valid_until() <= t1 + lock.ttl(),
            "a lock valid {:?} past its round's start plus its ttl",
            lock.valid_until()
                .saturating_duration_since(t1 + lock.ttl())
        );
        match (counter, lock.fencing_token()) {
            (Some(counter), Some(token)) => {
                assert!(
                    votes.counters.contains(&token),
                    "fencing token {token} is no counter a node answered"
                );
                let fence = Key {
                    op: KeyOp::Fence,
                    counter: Some(counter),
                    arg: Bytes::from(token.to_string()),
                    ..key
                };
                self.assert_quorum(&fence, "a fenced lock's write-back");
            }
            (None, None) => {}
            (c, t) => panic!("fencing {:?} with fencing token {t:?}", c.is_some()),
        }
    }

    fn finish(&mut self, slot: Option<usize>, out: Out) {
        match out {
            Out::Acquired(Ok(lock)) => {
                self.log(|| format!("locked {:?}", lock.resources().collect::<Vec<_>>()));
                self.check_lock(&lock);
                self.report.locks += 1;
                if lock.fencing_token().is_some() {
                    self.report.fenced += 1;
                }
                self.locks.push(Some(Held {
                    lock,
                    ttls: Vec::new(),
                    busy: false,
                }));
            }
            Out::Acquired(Err(e)) => {
                self.log(|| format!("lock failed: {e}"));
                self.report.acquire_failed += 1;
            }
            Out::Extended(r, lock, before, ms) => {
                self.log(|| format!("extension to {ms} ms: {r:?}"));
                let key = self.lock_key(KeyOp::Extend, &lock, None, ms.to_string());
                let t1 = self.started.get(&key).copied();
                let ttl = Duration::from_millis(ms);
                if let Some(t1) = t1 {
                    assert!(
                        lock.valid_until() <= t1 + ttl,
                        "an extended lock valid past its round's start plus its ttl"
                    );
                }
                match r {
                    Ok(()) => {
                        self.assert_quorum(&key, "an extension");
                        assert!(t1.is_some(), "an extension succeeded without a round");
                        self.report.extended += 1;
                    }
                    Err(_) => {
                        assert!(
                            lock.valid_until() <= before,
                            "a failed extension lengthened the lock"
                        );
                        self.report.extend_failed += 1;
                    }
                }
                if let Some(h) = slot.and_then(|s| self.locks[s].as_mut()) {
                    h.lock = lock;
                    h.busy = false;
                }
            }
            Out::Released(r, lock) => {
                self.log(|| format!("release: {r:?}"));
                if r.is_ok() {
                    let key = self.lock_key(KeyOp::Release, &lock, None, String::new());
                    self.assert_quorum(&key, "a release");
                    self.report.released += 1;
                } else {
                    self.report.release_failed += 1;
                }
            }
            Out::Inspected(_) => self.report.inspected += 1,
        }
    }

    /// After every event: nothing the engine must drop is kept, what it owes and holds is
    /// bounded by what it was given, and its books agree with the harness's.
    fn check_steady(&mut self) {
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(w) = &node.wire else { continue };
            if let Some(why) = w.doomed {
                panic!("node {i}: the engine kept a connection that read {why}");
            }
            assert!(
                !w.vanished,
                "node {i}: bytes handed to the driver vanished, the connection kept"
            );
            let bound = 16 + 32 * node.queued;
            assert!(
                w.cmds.len() <= bound,
                "node {i}: {} commands on one connection for {} queued",
                w.cmds.len(),
                node.queued
            );
        }
        let stats = self.engine.stats();
        for (i, s) in stats.nodes.iter().enumerate() {
            let node = &self.nodes[i];
            let bound = (64 << 10) + 4 * (node.fed + node.handed) + (16 << 10) * node.queued;
            assert!(
                s.buffered_bytes <= bound,
                "node {i}: {} bytes buffered for {} read, {} written, {} queued",
                s.buffered_bytes,
                node.fed,
                node.handed,
                node.queued
            );
        }
        assert_eq!(
            stats.events_dropped, 0,
            "events dropped though taken every pass"
        );
        assert_eq!(
            self.engine.in_flight(),
            self.rounds.len(),
            "rounds in flight in the engine, and submitted but not completed"
        );
        let sum = |f: fn(&redlock_core::NodeStats) -> u64| stats.nodes.iter().map(f).sum();
        self.report.noscript_fallbacks = sum(|s| s.noscript_fallbacks);
        self.report.native_commands = sum(|s| s.native_commands);
        self.report.desyncs = sum(|s| s.desyncs);
        self.report.late_replies = sum(|s| s.late_replies);
        self.report.invalidations = sum(|s| s.invalidations);
    }

    /// Once the input is read, the servers fall silent and time runs on: every operation
    /// ends, every round completes.
    fn settle(&mut self) {
        for _ in 0..SETTLE_STEPS {
            self.pass();
            self.check_steady();
            if self.jobs.iter().all(Option::is_none) && self.rounds.is_empty() {
                return;
            }
            let mut next = self.engine.poll_timeout();
            for job in self.jobs.iter().flatten() {
                if let Wait::Sleep(t) | Wait::Await(t) = job.wait {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            let Some(t) = next else {
                let waits: Vec<Wait> = self.jobs.iter().flatten().map(|j| j.wait).collect();
                panic!("operations wait for what never comes: {waits:?}");
            };
            self.advance_to(t);
        }
        panic!("operations still running after {SETTLE_STEPS} steps of silence");
    }
}

// ---------------------------------------------------------------------------------------------
// The canned server.

fn simple(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(format!("+{s}\r\n").as_bytes());
}

fn error(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(format!("-{s}\r\n").as_bytes());
}

fn int(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(format!(":{n}\r\n").as_bytes());
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn null(out: &mut Vec<u8>, resp3: bool) {
    out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" });
}

fn noperm(out: &mut Vec<u8>, cmd: &str) {
    error(
        out,
        &format!("NOPERM User user has no permissions to run the '{cmd}' command"),
    );
}

/// What a server of `kind` answers to `cmd` under verdict `v` (see [`verdict`]).
fn reply_for(cmd: &Cmd, v: u8, kind: u8, resp3: &mut bool, out: &mut Vec<u8>) {
    use verdict::*;
    let (what, param) = (v % 8, v >> 3);
    if what == YES_ATTR {
        out.extend_from_slice(b"|1\r\n+ttl\r\n:3600\r\n");
    }
    let yes = matches!(what, YES | YES_ATTR);
    match cmd.shape {
        Shape::Hello { resp3: three } => match what {
            REFUSE => error(
                out,
                "ERR unknown command 'HELLO', with args beginning with: ",
            ),
            ERROR => error(out, "NOPROTO unsupported protocol version"),
            ODD => simple(out, "OK"),
            _ if kind == 3 => error(
                out,
                "ERR unknown command 'HELLO', with args beginning with: ",
            ),
            _ => {
                let (server, version) = match kind {
                    1 => ("valkey", "9.1.0"),
                    2 => ("redis", "8.4.0"),
                    _ => ("redis", "7.0.15"),
                };
                if three {
                    *resp3 = true;
                    out.extend_from_slice(
                        format!("%2\r\n+server\r\n+{server}\r\n+version\r\n+{version}\r\n")
                            .as_bytes(),
                    );
                } else {
                    out.extend_from_slice(b"*4\r\n");
                    for s in ["server", server, "version", version] {
                        bulk(out, s.as_bytes());
                    }
                }
            }
        },
        Shape::Login => match what {
            REFUSE | ERROR => error(
                out,
                "WRONGPASS invalid username-password pair or user is disabled.",
            ),
            ODD => int(out, 1),
            _ => simple(out, "OK"),
        },
        Shape::Client => match what {
            REFUSE | ERROR => error(out, "ERR syntax error"),
            ODD => int(out, 0),
            _ => simple(out, "OK"),
        },
        Shape::Config => {
            let policy = match what {
                NO => "allkeys-lru",
                GONE => "volatile-lru",
                REFUSE => return noperm(out, "config|get"),
                ERROR => return out.extend_from_slice(b"*0\r\n"),
                ODD => return simple(out, "OK"),
                _ => "noeviction",
            };
            out.extend_from_slice(if *resp3 { b"%1\r\n" } else { b"*2\r\n" });
            bulk(out, b"maxmemory-policy");
            bulk(out, policy.as_bytes());
        }
        Shape::ScriptLoad { digest } => match what {
            REFUSE => noperm(out, "script|load"),
            ERROR => error(out, "ERR Error compiling script"),
            ODD => int(out, 1),
            _ => bulk(out, digest.unwrap_or("0").as_bytes()),
        },
        Shape::FunctionLoad => match what {
            NO => error(out, "ERR Library 'redlock_mux_v13' already exists"),
            REFUSE => noperm(out, "function|load"),
            ERROR => error(out, "ERR Error registering functions"),
            ODD => int(out, 1),
            _ => bulk(out, b"redlock_mux_v13"),
        },
        Shape::Ping => match what {
            NO | GONE => simple(out, "PONG"),
            REFUSE => noperm(out, "ping"),
            ERROR => error(out, "ERR wrong number of arguments"),
            NOSCRIPT => bulk(out, b"redlock-sync:0"),
            ODD => int(out, 1),
            _ => bulk(out, &cmd.nonce),
        },
        Shape::SetNx => match what {
            NO | GONE => null(out, *resp3),
            REFUSE => noperm(out, "set"),
            NOSCRIPT => error(out, "READONLY You can't write against a read only replica."),
            ERROR => error(
                out,
                "OOM command not allowed when used memory > 'maxmemory'.",
            ),
            ODD => int(out, 1),
            _ => simple(out, "OK"),
        },
        Shape::Script {
            kind: sk,
            via,
            fenced,
            keys,
        } => {
            let acquire = sk == ScriptKind::Acquire;
            match what {
                _ if yes => match (acquire, fenced) {
                    (true, true) => int(
                        out,
                        if param == 31 {
                            redlock_core::MAX_FENCING_TOKEN as i64
                        } else {
                            1 + i64::from(param)
                        },
                    ),
                    (true, false) => int(out, 0),
                    _ => int(out, 1),
                },
                NO if acquire => {
                    let resources = keys.saturating_sub(usize::from(fenced)).max(1);
                    int(out, -1 - (usize::from(param) % resources) as i64)
                }
                NO => int(out, 0),
                GONE => int(out, -1),
                REFUSE => noperm(
                    out,
                    match via {
                        Via::Evalsha => "evalsha",
                        Via::Eval => "eval",
                        Via::Fcall => "fcall",
                    },
                ),
                NOSCRIPT => match via {
                    Via::Evalsha => error(out, "NOSCRIPT No matching script. Please use EVAL."),
                    Via::Fcall => error(out, "ERR Function not found"),
                    Via::Eval => error(
                        out,
                        "ERR user_script:1: Script attempted to access \
                         nonexistent global variable 'x'",
                    ),
                },
                ERROR if acquire && fenced && param % 2 == 0 => error(
                    out,
                    "ERR increment or decrement would overflow script: fc1f70ab",
                ),
                ERROR if acquire && fenced => {
                    error(out, "ERR value is not an integer or out of range script: x")
                }
                ERROR => error(out, "BUSY Redis is busy running a script."),
                _ => match (acquire, fenced) {
                    (true, true) => int(out, redlock_core::MAX_FENCING_TOKEN as i64 + 1),
                    (true, false) => int(out, 7),
                    _ => int(out, 2),
                },
            }
        }
        Shape::DelIfEq | Shape::DelEx => match what {
            NO | GONE => int(out, 0),
            REFUSE => error(
                out,
                "ERR unknown command 'DELIFEQ', with args beginning with: ",
            ),
            NOSCRIPT | ERROR => error(out, "ERR wrong number of arguments"),
            ODD => simple(out, "OK"),
            _ => int(out, 1),
        },
        Shape::SetIfeq => match what {
            NO | GONE => null(out, *resp3),
            REFUSE => noperm(out, "set"),
            NOSCRIPT | ERROR => error(out, "ERR syntax error"),
            ODD => int(out, 1),
            _ => simple(out, "OK"),
        },
        Shape::Get => match what {
            NO => bulk(out, b"someone else"),
            GONE => null(out, *resp3),
            REFUSE => noperm(out, "get"),
            NOSCRIPT | ERROR => error(out, "ERR wrong"),
            ODD => int(out, 1),
            _ => bulk(out, &[b"0123456789abcdef"[usize::from(param % 16)]; 40]),
        },
        Shape::Pttl => match what {
            NO => int(out, -1),
            GONE => int(out, -2),
            REFUSE => noperm(out, "pttl"),
            NOSCRIPT | ERROR => error(out, "ERR wrong"),
            ODD => simple(out, "OK"),
            _ => int(out, i64::from(param) * 50),
        },
        Shape::Other => simple(out, "OK"),
    }
}
