//! The fair scripts' commands on the wire (see [`script::WAIT`] and the others).

use bytes::BufMut;

use resp::IntBuf;

use super::{Command, Fair, Form, OpKind, MAX_PARTS};
use crate::lock::Name;
use crate::script;
use crate::token::Token;

impl<'a> Command<'a> {
    /// Fair mode: the leave script for `resources` (see [`script::LEAVE`]).
    pub(crate) fn leave(resources: &'a [Name]) -> Command<'a> {
        Command {
            kind: OpKind::Leave,
            resources,
            token: None,
            ttl_ms: 0,
            counter: None,
            fence_value: 0,
            watch: None,
        }
    }

    /// The fair scripts: `KEYS` the resources, then their lines (then the counter, for a
    /// fenced claim); `ARGV` as each script says (see [`script::WAIT`] and the others).
    pub(super) fn encode_fair(
        &self,
        dst: &mut impl BufMut,
        form: Form,
        fair: Option<&Fair>,
        handoff: &[u8],
    ) {
        if self.kind == OpKind::Retick {
            let name = self.resources.first().map_or(&b""[..], Name::as_bytes);
            let mut line: smallvec::SmallVec<[u8; 128]> = smallvec::SmallVec::new();
            line.extend_from_slice(script::QUEUE_PREFIX.as_bytes());
            line.extend_from_slice(name);
            let mut ticket = IntBuf::new();
            let ticket = ticket.format(i64::try_from(self.fence_value).unwrap_or(i64::MAX));
            let id = fair.map_or(&b""[..], |f| &f.id[..]);
            resp::encode_command(dst, &[b"ZADD", &line, b"XX", b"GT", ticket, id]);
            return;
        }
        let (script, sha) = match self.kind {
            OpKind::Wait => (script::WAIT, script::WAIT_SHA1),
            OpKind::Claim => (script::CLAIM, script::CLAIM_SHA1),
            OpKind::Enter => (script::ENTER, script::ENTER_SHA1),
            OpKind::Leave => (script::LEAVE, script::LEAVE_SHA1),
            _ => (script::HANDOFF, script::HANDOFF_SHA1),
        };
        let (verb, body): (&[u8], &[u8]) = match form {
            Form::Eval => (b"EVAL", script.as_bytes()),
            Form::Evalsha => (b"EVALSHA", sha.as_bytes()),
        };
        let mut queues: smallvec::SmallVec<[u8; 256]> = smallvec::SmallVec::new();
        let mut ends: smallvec::SmallVec<[usize; 8]> = smallvec::SmallVec::new();
        for name in self.resources {
            queues.extend_from_slice(script::QUEUE_PREFIX.as_bytes());
            queues.extend_from_slice(name.as_bytes());
            ends.push(queues.len());
        }
        let counter = if matches!(self.kind, OpKind::Claim | OpKind::Enter) {
            self.counter
        } else {
            None
        };
        let n = self.resources.len();
        let mut nkeys = IntBuf::new();
        let nkeys = nkeys.format((2 * n + usize::from(counter.is_some())) as i64);
        let mut n_buf = IntBuf::new();
        let n_s = n_buf.format(n as i64);
        let (id, claim_ms, queue_ttl_ms) = fair.map_or((&b""[..], 0, 0), |f| {
            (&f.id[..], f.claim_ms, f.queue_ttl_ms)
        });
        let mut claim = IntBuf::new();
        let claim = claim.format(i64::try_from(claim_ms).unwrap_or(i64::MAX));
        let mut qttl = IntBuf::new();
        let qttl = qttl.format(i64::try_from(queue_ttl_ms).unwrap_or(i64::MAX));
        let mut ttl = IntBuf::new();
        let ttl = ttl.format(i64::try_from(self.ttl_ms).unwrap_or(i64::MAX));
        let token = self.token.map_or(&b""[..], Token::as_bytes);
        let mut ticket_buf = IntBuf::new();
        let ticket_s = ticket_buf.format(i64::try_from(self.fence_value).unwrap_or(i64::MAX));
        let mut parts: smallvec::SmallVec<[&[u8]; MAX_PARTS]> = smallvec::SmallVec::new();
        parts.extend_from_slice(&[verb, body, nkeys]);
        parts.extend(self.resources.iter().map(Name::as_bytes));
        let mut start = 0;
        for &end in &ends {
            parts.push(&queues[start..end]);
            start = end;
        }
        parts.extend(counter);
        match self.kind {
            OpKind::Wait => parts.extend_from_slice(&[id, claim, n_s, qttl, ttl]),
            OpKind::Enter => parts.extend_from_slice(&[id, claim, n_s, qttl, ttl, token]),
            OpKind::Claim => parts.extend_from_slice(&[token, ttl, n_s, id, claim, handoff]),
            OpKind::Leave => parts.extend_from_slice(&[id, claim]),
            OpKind::Unclaim => parts.extend_from_slice(&[token, claim, id, b"0", ticket_s]),
            _ => parts.extend_from_slice(&[token, claim, id, b"1", b"0"]),
        }
        resp::encode_command(dst, &parts);
    }
}
