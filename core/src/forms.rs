//! The forms a scripted command can take on one connection, and the one fallback chain
//! between them.
//!
//! A release, an extension, a fenced or multi-resource acquisition and the fence write-back
//! are each encoded once, as `EVALSHA` of one of our scripts: the canonical copy. From it a
//! connection writes the form its server and its user's ACL take:
//!
//! - the server's native command (`DELIFEQ` or `DELEX ... IFEQ`, `SET ... IFEQ ... PX`), for a
//!   single-resource release or extension, where the server has them;
//! - `EVALSHA`, and `EVAL` after a `NOSCRIPT` (the script cache was flushed);
//! - `FCALL` of the function library, loaded again after `ERR Function not found`.
//!
//! Which form a connection uses is decided here, from the mode ([`Scripts`]), what the
//! server said it is (`HELLO`), and the forms the server has refused on this connection. A
//! refusal is an ACL's `NOPERM` or an unknown command (an older server, a renamed command):
//! the form is then never tried again on that connection, and the refused command is sent
//! again at once in the next form of the chain, whether or not anyone still waits for its
//! reply (a release must reach every node that holds the key). The one exception is an
//! acquisition, sent again only while its round still waits for that node and nothing was
//! queued behind it on that connection: otherwise the client may have queued its release
//! (the round was decided, or the caller went away), and the acquisition would land after
//! it. The chain under
//! [`Scripts::Auto`] is native (where the server has it), script, function, in that order of
//! preference, skipping what was refused; [`Scripts::Native`] uses native commands only (the
//! dialect the server named, or, before it has, Valkey's, corrected once it has);
//! [`Scripts::Eval`] and [`Scripts::Function`] use their one form.
//!
//! Fair mode's commands prefer their scripts to anything native (the line lives in the
//! scripts), but under [`Scripts::Auto`] a connection whose user may run neither scripts nor
//! functions still serves them in a scriptless form ([`Alt::Release`], [`Alt::Set`]): the
//! enter and the claim of one resource as the `SET NX PX` they start with, the hand-off as the
//! native release. That master keeps no line: its waiters are woken as without fair mode.

use bytes::{BufMut, BytesMut};
use resp::Frame;

use crate::config::Scripts;
use crate::conn::Native;
use crate::script;

/// How a queued command went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Not a script call (`SET NX`, `GET`, `PTTL`): its reply is reported as it is.
    Plain,
    /// `EVALSHA` of one of our scripts.
    Evalsha,
    /// `EVAL` of one of our scripts.
    Eval,
    /// `FCALL` of one of our functions.
    Fcall,
    /// The server's native command.
    Native(Native),
}

/// The family of forms a refusal rules out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Native,
    Script,
    Function,
}

impl Sent {
    fn family(self) -> Option<Family> {
        match self {
            Sent::Plain => None,
            Sent::Evalsha | Sent::Eval => Some(Family::Script),
            Sent::Fcall => Some(Family::Function),
            Sent::Native(_) => Some(Family::Native),
        }
    }
}

/// What a scripted command has instead of its script, besides the script's other forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alt {
    /// Nothing: the script's forms only.
    None,
    /// A native form, preferred under [`Scripts::Auto`] where the server has it (a release
    /// or extension of one resource).
    Native,
    /// Fair mode's hand-off of one resource: the native release, only where neither scripts
    /// nor functions may run (and the server has it).
    Release,
    /// Fair mode's enter or claim of one resource, unfenced: `SET key token NX PX ttl`, only
    /// where neither scripts nor functions may run.
    Set,
}

/// How many times one command may be sent again in another form: the chain has three
/// families, plus one `EVAL` after `NOSCRIPT` and one reload after a missing function.
pub const MAX_RESENDS: u8 = 5;

/// One connection's choice of form: the mode, what the server is, and what it refused.
#[derive(Debug, Clone, Copy)]
pub struct Forms {
    mode: Scripts,
    /// What the server has instead of scripts, once it has said (`HELLO`).
    native: Option<Native>,
    /// Whether the server has answered `HELLO`.
    identified: bool,
    refused_native: bool,
    refused_script: bool,
    refused_function: bool,
}

impl Forms {
    /// A new connection's forms under `mode`: nothing said, nothing refused.
    pub fn new(mode: Scripts) -> Forms {
        Forms {
            mode,
            native: None,
            identified: false,
            refused_native: false,
            refused_script: false,
            refused_function: false,
        }
    }

    /// The server has answered `HELLO`: with what it has instead of scripts, if anything.
    pub fn identified(&mut self, native: Option<Native>) {
        self.native = native;
        self.identified = true;
    }

    /// What the server said it has, once it has.
    pub fn native(&self) -> Option<Native> {
        self.native
    }

    /// Whether the server has answered `HELLO`.
    pub fn is_identified(&self) -> bool {
        self.identified
    }

    /// Whether scripts are called through the function library on this connection (so the
    /// library, not the scripts, is what a new connection loads).
    pub fn functions(&self) -> bool {
        self.mode == Scripts::Function || (self.mode == Scripts::Auto && self.refused_script)
    }

    fn refused(&self, f: Family) -> bool {
        match f {
            Family::Native => self.refused_native,
            Family::Script => self.refused_script,
            Family::Function => self.refused_function,
        }
    }

    /// The form for a scripted command; `native_able` says whether it has a native form.
    pub fn choose(&self, native_able: bool) -> Sent {
        self.choose_alt(if native_able { Alt::Native } else { Alt::None })
    }

    /// The form for a scripted command that has `alt` besides its script.
    pub fn choose_alt(&self, alt: Alt) -> Sent {
        let native_able = alt == Alt::Native;
        let script = if self.functions() {
            Sent::Fcall
        } else {
            Sent::Evalsha
        };
        match self.mode {
            Scripts::Native if native_able => Sent::Native(self.native.unwrap_or(Native::Valkey)),
            // Native mode loads no script ahead: a command without a native form (a set of
            // resources, fencing) goes out with its script's text, which the server caches,
            // rather than as an `EVALSHA` that a fresh connection answers `NOSCRIPT` (and an
            // acquisition's `NOSCRIPT` with another command queued behind it is that node's
            // vote: the round would be lost for nothing).
            Scripts::Native => Sent::Eval,
            Scripts::Auto => {
                let native = self.native.filter(|_| native_able && !self.refused_native);
                if let Some(n) = native {
                    return Sent::Native(n);
                }
                if !self.refused_script {
                    return Sent::Evalsha;
                }
                if !self.refused_function {
                    return Sent::Fcall;
                }
                match alt {
                    // Fair mode's scriptless forms (see the module's docs).
                    Alt::Release => match self.native.filter(|_| !self.refused_native) {
                        Some(n) => Sent::Native(n),
                        None => Sent::Evalsha,
                    },
                    Alt::Set => Sent::Native(self.native.unwrap_or(Native::Valkey)),
                    // Everything refused: the script, whose error then says why.
                    _ => Sent::Evalsha,
                }
            }
            _ => script,
        }
    }

    /// A command sent as `sent` was answered `reply`: the form to send it again in, if any.
    /// Records a refusal, so that later commands skip the refused form.
    pub fn after(&mut self, sent: Sent, reply: &Frame, native_able: bool) -> Option<Sent> {
        let alt = if native_able { Alt::Native } else { Alt::None };
        self.after_alt(sent, reply, alt)
    }

    /// [`after`](Forms::after), for a command that has `alt` besides its script.
    pub fn after_alt(&mut self, sent: Sent, reply: &Frame, alt: Alt) -> Option<Sent> {
        match sent {
            Sent::Evalsha if script::is_noscript_reply(reply) => return Some(Sent::Eval),
            Sent::Fcall if script::is_no_function(reply) => return Some(Sent::Fcall),
            _ => {}
        }
        if !is_refusal(reply) {
            return None;
        }
        match (self.mode, sent) {
            // The user asserted native commands; before `HELLO` answered, the dialect was a
            // guess, corrected here.
            (Scripts::Native, Sent::Native(d)) => self.native.filter(|n| *n != d).map(Sent::Native),
            (Scripts::Auto, sent) => {
                match sent.family()? {
                    Family::Native => self.refused_native = true,
                    Family::Script => self.refused_script = true,
                    Family::Function => self.refused_function = true,
                }
                let next = self.choose_alt(alt);
                // (`SET NX` is not what a refused native release or extension was.)
                let set = alt == Alt::Set && matches!(next, Sent::Native(_));
                next.family()
                    .filter(|f| set || !self.refused(*f))
                    .map(|_| next)
            }
            _ => None,
        }
    }
}

/// Whether an error reply says the form itself is not available to this user on this server:
/// an ACL's `NOPERM`, or an unknown command (a server without it, or one that renamed it away).
pub fn is_refusal(reply: &Frame) -> bool {
    match reply.without_attributes() {
        Frame::Error(m) | Frame::BulkError(m) => {
            m.starts_with(b"NOPERM")
                || m.get(..19)
                    .is_some_and(|p| p.eq_ignore_ascii_case(b"ERR unknown command"))
        }
        _ => false,
    }
}

/// The arguments of an encoded command (a RESP array of bulk strings), or `None`.
fn args(encoded: &[u8]) -> Option<Vec<bytes::Bytes>> {
    let mut d = resp::Decoder::default();
    let mut buf = BytesMut::from(encoded);
    match d.decode(&mut buf) {
        Ok(Some(Frame::Array(items))) => items
            .into_iter()
            .map(|f| match f {
                Frame::Bulk(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The digest of an encoded `EVALSHA <sha> ...`, and what follows it, without decoding.
fn digest(evalsha: &[u8]) -> Option<(&[u8], &[u8])> {
    const HEAD: &[u8] = b"$7\r\nEVALSHA\r\n$40\r\n";
    // The end of the count's line: its first CRLF.
    let count_end =
        (1..evalsha.len()).find(|&i| evalsha[i] == b'\n' && evalsha[i - 1] == b'\r')? - 1;
    let rest = evalsha.get(count_end + 2..)?.strip_prefix(HEAD)?;
    Some((rest.get(..40)?, rest.get(42..)?))
}

/// Whether an encoded `EVALSHA` of one of our scripts has a native form: a release or an
/// extension of one key.
pub fn has_native_form(evalsha: &[u8]) -> bool {
    let Some((sha, after)) = digest(evalsha) else {
        return false;
    };
    (sha == script::RELEASE_SHA1.as_bytes() || sha == script::EXTEND_SHA1.as_bytes())
        && after.starts_with(b"$1\r\n1\r\n")
}

/// What an encoded `EVALSHA` of one of our scripts has besides its script: a native form (a
/// release or extension of one key), fair mode's scriptless forms (the hand-off, the enter
/// and the claim of one resource, unfenced), or nothing.
pub fn alt_of(evalsha: &[u8]) -> Alt {
    let Some((sha, after)) = digest(evalsha) else {
        return Alt::None;
    };
    // The key count first (a few bytes of known length), the digest then.
    if after.starts_with(b"$1\r\n1\r\n") {
        return if sha == script::RELEASE_SHA1.as_bytes() || sha == script::EXTEND_SHA1.as_bytes() {
            Alt::Native
        } else {
            Alt::None
        };
    }
    if !after.starts_with(b"$1\r\n2\r\n") {
        return Alt::None;
    }
    if sha == script::HANDOFF_SHA1.as_bytes() {
        Alt::Release
    } else if sha == script::ENTER_SHA1.as_bytes() || sha == script::CLAIM_SHA1.as_bytes() {
        Alt::Set
    } else {
        Alt::None
    }
}

/// Whether an encoded `EVALSHA` of one of our scripts sets keys: the acquire script, and
/// fair mode's claim and enter (the others only change or delete keys that hold the caller's
/// token, or hand a resource on).
pub fn takes_keys(evalsha: &[u8]) -> bool {
    digest(evalsha).is_some_and(|(sha, _)| {
        sha == script::ACQUIRE_SHA1.as_bytes()
            || sha == script::CLAIM_SHA1.as_bytes()
            || sha == script::ENTER_SHA1.as_bytes()
    })
}

/// Whether an encoded `EVALSHA` of one of our scripts is an extension (whose native form is
/// `SET ... IFEQ ... PX`, answered `+OK`; a native release is answered `:1`).
pub fn extends(evalsha: &[u8]) -> bool {
    digest(evalsha).is_some_and(|(sha, _)| sha == script::EXTEND_SHA1.as_bytes())
}

/// Writes `evalsha` (an encoded `EVALSHA` of one of our scripts, the canonical copy) into
/// `out` in the form `to`. `false` (and nothing written) when it has no such form.
pub fn write_as(evalsha: &[u8], to: Sent, out: &mut BytesMut) -> bool {
    match to {
        Sent::Plain | Sent::Evalsha => {
            out.extend_from_slice(evalsha);
            true
        }
        Sent::Eval => rewrite_evalsha(evalsha, b"EVAL", script::by_digest, out),
        Sent::Fcall => rewrite_evalsha(evalsha, b"FCALL", script::function_by_digest, out),
        Sent::Native(n) => native_form(evalsha, n, out),
    }
}

/// [`write_as`] to `EVAL` (tests).
#[cfg(test)]
pub fn write_as_eval(evalsha: &[u8], out: &mut BytesMut) -> bool {
    write_as(evalsha, Sent::Eval, out)
}

/// The native form of a single-key release or extension given as `EVALSHA`.
fn native_form(evalsha: &[u8], native: Native, out: &mut BytesMut) -> bool {
    let Some(a) = args(evalsha) else {
        return false;
    };
    if let [_, sha, n, key, _line, ..] = a.as_slice() {
        if n.as_ref() == b"2" {
            return scriptless_form(&a, sha, key, native, out);
        }
    }
    // EVALSHA sha 1 key token [ttl]
    let (sha, key, token) = match a.as_slice() {
        [_, sha, n, key, token, ..] if n.as_ref() == b"1" => (sha, key, token),
        _ => return false,
    };
    if sha.as_ref() == script::RELEASE_SHA1.as_bytes() && a.len() == 5 {
        match native {
            Native::Valkey => resp::encode_command(out, &[b"DELIFEQ", key, token]),
            Native::Redis => resp::encode_command(out, &[b"DELEX", key, b"IFEQ", token]),
        }
        true
    } else if sha.as_ref() == script::EXTEND_SHA1.as_bytes() && a.len() == 6 {
        resp::encode_command(out, &[b"SET", key, token, b"IFEQ", token, b"PX", &a[5]]);
        true
    } else {
        false
    }
}

/// Fair mode's scriptless form (see [`Alt`]) of `a`, the arguments of an `EVALSHA` of one
/// resource `key` and its line: the enter (`... id claim n line-ttl ttl token`) and the claim
/// (`... token ttl n id claim hand-off`) as the `SET NX PX` they start with, the hand-off
/// (`... token claim id keep ticket`) as the native release.
fn scriptless_form(
    a: &[bytes::Bytes],
    sha: &[u8],
    key: &[u8],
    native: Native,
    out: &mut BytesMut,
) -> bool {
    let (token, ttl) = match a.len() {
        11 if sha == script::ENTER_SHA1.as_bytes() => (&a[10], &a[9]),
        11 if sha == script::CLAIM_SHA1.as_bytes() => (&a[5], &a[6]),
        10 if sha == script::HANDOFF_SHA1.as_bytes() => {
            let token = &a[5];
            match native {
                Native::Valkey => resp::encode_command(out, &[b"DELIFEQ", key, token]),
                Native::Redis => resp::encode_command(out, &[b"DELEX", key, b"IFEQ", token]),
            }
            return true;
        }
        _ => return false,
    };
    resp::encode_command(out, &[b"SET", key, token, b"NX", b"PX", ttl]);
    true
}

/// Writes `evalsha` with `verb` in place of `EVALSHA` and what `lookup` finds for the digest
/// in place of the digest.
fn rewrite_evalsha(
    evalsha: &[u8],
    verb: &[u8],
    lookup: fn(&[u8]) -> Option<&'static str>,
    out: &mut BytesMut,
) -> bool {
    const HEAD: &[u8] = b"$7\r\nEVALSHA\r\n$40\r\n";
    let Some(count_end) = evalsha.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    let (count, rest) = evalsha.split_at(count_end + 2);
    let Some(rest) = rest.strip_prefix(HEAD) else {
        return false;
    };
    let (Some(sha), Some(args)) = (rest.get(..40), rest.get(42..)) else {
        return false;
    };
    let Some(body) = lookup(sha) else {
        return false;
    };
    let mut n = resp::IntBuf::new();
    out.put_slice(count);
    out.put_slice(b"$");
    out.put_slice(n.format(verb.len() as i64));
    out.put_slice(b"\r\n");
    out.put_slice(verb);
    out.put_slice(b"\r\n$");
    out.put_slice(n.format(body.len() as i64));
    out.put_slice(b"\r\n");
    out.put_slice(body.as_bytes());
    out.put_slice(b"\r\n");
    out.put_slice(args);
    true
}

#[cfg(test)]
#[path = "forms_tests.rs"]
mod tests;
