//! The three operations as commands on the wire and as replies read back, sans I/O.
//!
//! | operation | command                                         | yes       | no                 |
//! |-----------|-------------------------------------------------|-----------|--------------------|
//! | acquire   | `SET key token NX PX ttl`                       | `+OK`     | null: held         |
//! | release   | `EVALSHA <release> 1 key token`                 | `:1`      | `:0` held, `:-1` gone |
//! | extend    | `EVALSHA <extend> 1 key token ttl`              | `:1`      | `:0` held, `:-1` gone |
//!
//! Both drivers encode with [`Command::encode`] and judge replies with [`Command::judge_kind`];
//! nothing here knows about sockets.

use std::time::{Duration, Instant};

use bytes::BufMut;
use rand::Rng;
use resp::{encode_command, Frame, IntBuf};

use crate::config::Config;
use crate::error::{Error, NodeOutcome};
use crate::lock::Lock;
use crate::quorum::{validity, Decision, Round};
use crate::script;
use crate::Token;

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
    /// Writes the command as first sent: `SET`, or `EVALSHA` (`eval` false), or the `EVAL`
    /// fallback after a `NOSCRIPT` (`eval` true). No allocation.
    pub(crate) fn encode(&self, dst: &mut impl BufMut, eval: bool) {
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
        let (verb, body): (&[u8], &[u8]) = if eval {
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

/// Checks a ttl given to an acquisition or an extension: its whole milliseconds (rounded
/// down, as sent), and the ttl those stand for.
pub(crate) fn ttl_ms(cfg: &Config, ttl: Duration) -> Result<(u64, Duration), Error> {
    let ms = cfg.check_ttl(ttl)?;
    Ok((ms, Duration::from_millis(ms)))
}

/// The latest a lock can still be relied on once an extension to `ttl`, started at `t1`,
/// may have reached some node: a node that ran the `PEXPIRE` lets the key go `ttl` after it
/// ran it, which is no earlier than `t1 + ttl`, less the drift allowance. Saturates at `t1`
/// (a ttl within the drift allowance promises nothing).
fn extension_cap(cfg: &Config, t1: Instant, ttl: Duration) -> Instant {
    let left = ttl
        .checked_sub(crate::quorum::drift(ttl, cfg.drift_factor))
        .unwrap_or(Duration::ZERO);
    crate::time::later(t1, left)
}

/// Before an extension round of `lock` to `ttl`: checks the ttl, refuses a lock whose validity
/// has run out ([`Error::Expired`], nothing to send: extending it would hide a gap in which it
/// was not held), and caps the lock's validity at what it will be worth if the round fails.
///
/// The cap is applied before anything is sent, so that it holds however the round ends:
/// with success, with an error, or never (an async caller that drops the future). Some nodes
/// may run the `PEXPIRE` whatever the outcome, and after it their key lives `ttl`, not what
/// the lock had left: a shortened extension that failed still shortened the keys.
pub(crate) fn begin_extend(
    cfg: &Config,
    lock: &mut Lock,
    ttl: Duration,
    now: Instant,
) -> Result<(u64, Duration), Error> {
    let (ms, ttl) = ttl_ms(cfg, ttl)?;
    if now >= lock.valid_until {
        return Err(Error::Expired);
    }
    lock.valid_until = lock.valid_until.min(extension_cap(cfg, now, ttl));
    Ok((ms, ttl))
}

/// After an extension round that started at `t1` (at or after the `now` given to
/// [`begin_extend`]): on success the lock is valid for the new ttl as acquisition computes it;
/// on failure it keeps the capped validity `begin_extend` left it.
pub(crate) fn finish_extend(
    cfg: &Config,
    lock: &mut Lock,
    round: &Round,
    t1: Instant,
    now: Instant,
    ttl: Duration,
) -> Result<(), Error> {
    lock.valid_until = lock.valid_until.min(extension_cap(cfg, t1, ttl));
    confirmed(cfg, round)?;
    let validity = validity_after(cfg, t1, now, ttl)?;
    lock.valid_until = crate::time::later(t1, validity);
    lock.ttl = ttl;
    Ok(())
}

/// The lock an acquisition round that started at `t1` won.
pub(crate) fn granted(
    resource: &str,
    token: Token,
    t1: Instant,
    validity: Duration,
    ttl: Duration,
) -> Lock {
    Lock {
        resource: crate::lock::Name::new(resource),
        token,
        valid_until: crate::time::later(t1, validity),
        ttl,
    }
}

/// Whether the refusals alone decided a lost round: the nodes that failed (rather than
/// answered) were too few to prevent a quorum by themselves.
fn contention(cfg: &Config, round: &Round) -> bool {
    let failed = round.reports_iter().filter(|o| o.is_failure()).count();
    failed <= cfg.nodes.len() - cfg.quorum
}

/// The validity rule: `ttl - (now - t1) - drift`, or why nothing is left.
/// `t1` is the instant read before the first command was written.
pub(crate) fn validity_after(
    cfg: &Config,
    t1: Instant,
    now: Instant,
    ttl: Duration,
) -> Result<Duration, Error> {
    let elapsed = now.saturating_duration_since(t1);
    validity(ttl, elapsed, cfg.drift_factor).ok_or(Error::ValiditySpent { elapsed, ttl })
}

/// The rule for an acquire round: the validity left, or why there is no lock.
pub(crate) fn acquired(
    cfg: &Config,
    round: &Round,
    t1: Instant,
    now: Instant,
    ttl: Duration,
) -> Result<Duration, Error> {
    match round.decision() {
        Decision::Won => validity_after(cfg, t1, now, ttl),
        _ if round.count(&NodeOutcome::Held) > 0 && contention(cfg, round) => {
            Err(Error::Conflict {
                nodes: round.reports(&cfg.nodes),
            })
        }
        _ => Err(Error::NoQuorum {
            nodes: round.reports(&cfg.nodes),
        }),
    }
}

/// The rule for a release or extend round: confirmed by a quorum, or whose fault it was not.
pub(crate) fn confirmed(cfg: &Config, round: &Round) -> Result<(), Error> {
    if round.decision() == Decision::Won {
        Ok(())
    } else {
        Err(not_confirmed(cfg, round))
    }
}

/// Why a release or extend round was not won.
fn not_confirmed(cfg: &Config, round: &Round) -> Error {
    let nodes = || round.reports(&cfg.nodes);
    if round.count(&NodeOutcome::Held) > 0 {
        Error::NotHeld { nodes: nodes() }
    } else if round.count(&NodeOutcome::Gone) > 0 && contention(cfg, round) {
        Error::Expired
    } else {
        Error::NoQuorum { nodes: nodes() }
    }
}

/// The retry policy of `lock`: which errors are worth another round, how many rounds, and the
/// random delay between them.
#[derive(Debug)]
pub(crate) struct Retry {
    left: u32,
    delay: Duration,
}

/// What to do after a failed round.
#[derive(Debug)]
pub(crate) enum Next {
    /// Give up with this error.
    Fail(Error),
    /// Wait this long, then try again.
    Wait(Duration),
}

impl Retry {
    pub(crate) fn new(cfg: &Config) -> Retry {
        Retry {
            left: cfg.tries,
            delay: cfg.retry_delay,
        }
    }

    /// After a round that ended with `err`: retry (after a delay uniform in
    /// [delay/2, delay], which keeps competing clients from retrying in step), or give up.
    pub(crate) fn after(&mut self, err: Error) -> Next {
        self.left = self.left.saturating_sub(1);
        let retriable = matches!(
            err,
            Error::Conflict { .. } | Error::NoQuorum { .. } | Error::ValiditySpent { .. }
        );
        if !retriable || self.left == 0 {
            return Next::Fail(err);
        }
        let hi = self.delay;
        let lo = hi / 2;
        let wait = if hi > lo {
            rand::rng().random_range(lo..=hi)
        } else {
            hi
        };
        Next::Wait(wait)
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
        c.encode(&mut v, eval);
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
