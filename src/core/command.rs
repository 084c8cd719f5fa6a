//! The three operations as commands on the wire and as replies read back, sans I/O.
//!
//! | operation | command                                         | yes       | no                 |
//! |-----------|-------------------------------------------------|-----------|--------------------|
//! | acquire   | `SET key token NX PX ttl`                       | `+OK`     | null: held         |
//! | release   | `EVALSHA <release> 1 key token`                 | `:1`      | `:0` held, `:-1` gone |
//! | extend    | `EVALSHA <extend> 1 key token ttl`              | `:1`      | `:0` held, `:-1` gone |
//!
//! The engine encodes with [`Command::encode`] and judges replies with
//! [`Command::judge_kind`]; nothing here knows about sockets.

use bytes::BufMut;
use resp::{encode_command, Frame, IntBuf};

use crate::core::script;
use crate::error::NodeOutcome;
use crate::Token;

/// How a script command is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// `EVALSHA <digest>`, as first sent.
    Evalsha,
    /// `EVAL <script>`: the fallback after `NOSCRIPT`, and what a command nobody waits for is
    /// sent as (nobody would be there to send the fallback).
    Eval,
}

/// Which operation a command belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Acquire,
    Release,
    Extend,
}

/// One operation's command, the same for every node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command<'a> {
    pub(crate) kind: OpKind,
    pub(crate) resource: &'a [u8],
    pub(crate) token: &'a Token,
    /// The ttl in milliseconds, for acquire and extend.
    pub(crate) ttl_ms: u64,
}

impl Command<'_> {
    /// Writes the command: `SET`, or a script call in the given form (`EVALSHA` as first
    /// sent, `EVAL` as the fallback after a `NOSCRIPT`). No allocation.
    pub(crate) fn encode(&self, dst: &mut impl BufMut, form: Form) {
        let mut ttl = IntBuf::new();
        let ttl = ttl.format(i64::try_from(self.ttl_ms).unwrap_or(i64::MAX));
        let (script, sha) = match self.kind {
            OpKind::Acquire => {
                encode_command(
                    dst,
                    &[
                        b"SET",
                        self.resource,
                        self.token.as_bytes(),
                        b"NX",
                        b"PX",
                        ttl,
                    ],
                );
                return;
            }
            OpKind::Release => (script::RELEASE, script::RELEASE_SHA1),
            OpKind::Extend => (script::EXTEND, script::EXTEND_SHA1),
        };
        let (verb, body): (&[u8], &[u8]) = if form == Form::Eval {
            (b"EVAL", script.as_bytes())
        } else {
            (b"EVALSHA", sha.as_bytes())
        };
        let token = self.token.as_bytes();
        if self.kind == OpKind::Extend {
            encode_command(dst, &[verb, body, b"1", self.resource, token, ttl]);
        } else {
            encode_command(dst, &[verb, body, b"1", self.resource, token]);
        }
    }

    /// Judges a node's reply to a command of `kind` (nothing else decides the verdict). A
    /// `NOSCRIPT` never gets here from a scripted command (its connection sends the `EVAL`
    /// form instead): one that does is a server error like any other.
    pub(crate) fn judge_kind(kind: OpKind, reply: &Frame) -> NodeOutcome {
        let reply = reply.without_attributes();
        match (kind, reply) {
            (OpKind::Acquire, Frame::Simple(s)) if s.as_ref() == b"OK" => NodeOutcome::Ok,
            (OpKind::Acquire, f) if f.is_null() => NodeOutcome::Held,
            (OpKind::Release | OpKind::Extend, Frame::Integer(1)) => NodeOutcome::Ok,
            (OpKind::Release | OpKind::Extend, Frame::Integer(0)) => NodeOutcome::Held,
            (OpKind::Release | OpKind::Extend, Frame::Integer(-1)) => NodeOutcome::Gone,
            (_, Frame::Error(msg) | Frame::BulkError(msg)) => {
                NodeOutcome::Server(String::from_utf8_lossy(msg).into_owned())
            }
            (_, other) => NodeOutcome::Server(format!("unexpected reply {}", describe(other))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn wire(c: &Command, eval: bool) -> String {
        let mut v = Vec::new();
        c.encode(&mut v, if eval { Form::Eval } else { Form::Evalsha });
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn commands_on_the_wire() {
        let token = Token::parse(&"ab".repeat(20)).unwrap();
        let mut c = Command {
            kind: OpKind::Acquire,
            resource: b"res",
            token: &token,
            ttl_ms: 30_000,
        };
        let t = token.as_str();
        assert_eq!(
            wire(&c, false),
            format!("*6\r\n$3\r\nSET\r\n$3\r\nres\r\n$40\r\n{t}\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n")
        );
        c.kind = OpKind::Release;
        assert_eq!(
            wire(&c, false),
            format!(
                "*5\r\n$7\r\nEVALSHA\r\n$40\r\n{}\r\n$1\r\n1\r\n$3\r\nres\r\n$40\r\n{t}\r\n",
                script::RELEASE_SHA1
            )
        );
        assert!(wire(&c, true).contains("redis.call(\"DEL\""));
        c.kind = OpKind::Extend;
        assert!(wire(&c, false).ends_with(&format!("$40\r\n{t}\r\n$5\r\n30000\r\n")));
        assert!(wire(&c, true).starts_with("*6\r\n$4\r\nEVAL\r\n"));
    }

    #[test]
    fn replies_are_judged() {
        let token = Token::generate();
        let acq = Command {
            kind: OpKind::Acquire,
            resource: b"r",
            token: &token,
            ttl_ms: 1,
        };
        let rel = Command {
            kind: OpKind::Release,
            ..acq
        };
        let ok = |o| o;
        let s = |t: &'static str| Bytes::from_static(t.as_bytes());
        assert_eq!(
            Command::judge_kind(acq.kind, &Frame::Simple(s("OK"))),
            ok(NodeOutcome::Ok)
        );
        assert_eq!(
            Command::judge_kind(acq.kind, &Frame::NullBulk),
            ok(NodeOutcome::Held)
        );
        assert_eq!(
            Command::judge_kind(acq.kind, &Frame::Null),
            ok(NodeOutcome::Held)
        );
        assert!(matches!(
            Command::judge_kind(acq.kind, &Frame::Integer(1)),
            NodeOutcome::Server(_)
        ));
        assert_eq!(
            Command::judge_kind(acq.kind, &Frame::Error(s("OOM command not allowed"))),
            ok(NodeOutcome::Server("OOM command not allowed".into()))
        );
        assert_eq!(
            Command::judge_kind(rel.kind, &Frame::Integer(1)),
            ok(NodeOutcome::Ok)
        );
        assert_eq!(
            Command::judge_kind(rel.kind, &Frame::Integer(0)),
            ok(NodeOutcome::Held)
        );
        assert_eq!(
            Command::judge_kind(rel.kind, &Frame::Integer(-1)),
            ok(NodeOutcome::Gone)
        );
        assert!(matches!(
            Command::judge_kind(rel.kind, &Frame::Integer(2)),
            NodeOutcome::Server(_)
        ));
        // The connection answers a NOSCRIPT with the EVAL form; one that reaches the judge
        // is a plain server error: no loop.
        let noscript = Frame::Error(s("NOSCRIPT No matching script."));
        assert!(matches!(
            Command::judge_kind(rel.kind, &noscript),
            NodeOutcome::Server(_)
        ));
        assert!(matches!(
            Command::judge_kind(acq.kind, &Frame::Bulk(Bytes::from(vec![b'x'; 10_000]))),
            NodeOutcome::Server(m) if m.len() < 100
        ));
    }
}
