//! A reply, written in the protocol of the connection it goes to.

use bytes::Bytes;
#[cfg(test)]
use resp::Frame;
use resp::IntBuf;

/// The longest bulk string a [`Reply::Short`] holds.
pub(crate) const SHORT: usize = 30;

/// One reply, before it is written in RESP2 or RESP3.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// `+...`.
    Simple(&'static str),
    /// `-...`: an error; line breaks in it are written as spaces, as Redis does.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n ...`.
    Bulk(Bytes),
    /// `$n ...` of at most [`SHORT`] bytes, held in place (a `PING`'s message: no
    /// allocation); the first `.1` bytes of `.0`.
    Short([u8; SHORT], u8),
    /// RESP2 `$-1`, RESP3 `_`.
    Null,
    /// A RESP3 double (`,1`); in RESP2 the bulk string of `%.17g` (a sorted set's score).
    Double(f64),
    /// `*n ...`.
    Array(Vec<Reply>),
    /// A RESP3 map; in RESP2 the flat array of its names and values.
    Map(Vec<(Reply, Reply)>),
    /// A RESP3 push in place of a reply (`SUBSCRIBE`'s confirmation); an array in RESP2.
    Push(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub(crate) const OK: Reply = Reply::Simple("OK");

    /// An error reply.
    pub(crate) fn err(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// A bulk string of `s` (held in place when short).
    pub(crate) fn bulk(s: impl AsRef<[u8]>) -> Reply {
        let s = s.as_ref();
        if s.len() <= SHORT {
            let mut b = [0; SHORT];
            b[..s.len()].copy_from_slice(s);
            return Reply::Short(b, s.len() as u8);
        }
        Reply::Bulk(Bytes::copy_from_slice(s))
    }

    /// A bulk string of static text (lent, not copied).
    pub(crate) fn text(s: &'static str) -> Reply {
        Reply::Bulk(Bytes::from_static(s.as_bytes()))
    }

    /// The frame this reply is in the protocol `resp3` or RESP2 (what [`encode`](Reply::encode)
    /// writes, held to it by a test).
    #[cfg(test)]
    pub(crate) fn to_frame(&self, resp3: bool) -> Frame {
        match self {
            Reply::Simple(s) => Frame::Simple(Bytes::from_static(s.as_bytes())),
            Reply::Error(m) => Frame::Error(Bytes::from(m.replace(['\r', '\n'], " "))),
            Reply::Int(n) => Frame::Integer(*n),
            Reply::Bulk(b) => Frame::Bulk(b.clone()),
            Reply::Short(b, n) => Frame::Bulk(Bytes::copy_from_slice(&b[..usize::from(*n)])),
            Reply::Null if resp3 => Frame::Null,
            Reply::Null => Frame::NullBulk,
            Reply::Double(d) if resp3 => Frame::Double(*d),
            Reply::Double(d) => Frame::Bulk(Bytes::from(super::zset::fmt_g17(*d))),
            Reply::Array(items) => Frame::Array(items.iter().map(|r| r.to_frame(resp3)).collect()),
            Reply::Push(items) if resp3 => {
                Frame::Push(items.iter().map(|r| r.to_frame(resp3)).collect())
            }
            Reply::Push(items) => Frame::Array(items.iter().map(|r| r.to_frame(resp3)).collect()),
            Reply::Map(pairs) if resp3 => Frame::Map(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_frame(resp3), v.to_frame(resp3)))
                    .collect(),
            ),
            Reply::Map(pairs) => Frame::Array(
                pairs
                    .iter()
                    .flat_map(|(k, v)| [k.to_frame(resp3), v.to_frame(resp3)])
                    .collect(),
            ),
        }
    }

    /// Writes the reply in the protocol `resp3` or RESP2: the bytes
    /// [`to_frame`](Reply::to_frame)'s frame encodes to, written straight into `out`.
    pub(crate) fn encode(&self, resp3: bool, out: &mut Vec<u8>) {
        match self {
            // The commonest reply, in one piece.
            Reply::Simple("OK") => out.extend_from_slice(b"+OK\r\n"),
            Reply::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(m) => {
                out.push(b'-');
                let m = m.as_bytes();
                if m.iter().any(|c| matches!(c, b'\r' | b'\n')) {
                    for &c in m {
                        out.push(if matches!(c, b'\r' | b'\n') { b' ' } else { c });
                    }
                } else {
                    out.extend_from_slice(m);
                }
                out.extend_from_slice(b"\r\n");
            }
            Reply::Int(n) => header(out, b':', *n),
            Reply::Bulk(b) => bulk(out, b),
            Reply::Short(b, n) => bulk(out, &b[..usize::from(*n)]),
            Reply::Null if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Null => out.extend_from_slice(b"$-1\r\n"),
            Reply::Double(d) if resp3 => {
                out.push(b',');
                out.extend_from_slice(super::zset::fmt_g17(*d).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Double(d) => bulk(out, super::zset::fmt_g17(*d).as_bytes()),
            Reply::Array(items) | Reply::Push(items) => {
                let ty = if resp3 && matches!(self, Reply::Push(_)) {
                    b'>'
                } else {
                    b'*'
                };
                header(out, ty, count(items.len()));
                for r in items {
                    r.encode(resp3, out);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    header(out, b'%', count(pairs.len()));
                } else {
                    header(out, b'*', count(pairs.len()).saturating_mul(2));
                }
                for (k, v) in pairs {
                    k.encode(resp3, out);
                    v.encode(resp3, out);
                }
            }
        }
    }
}

/// A count as the wire's `i64`.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A type byte, a number and CRLF.
fn header(out: &mut Vec<u8>, ty: u8, n: i64) {
    // The usual numbers (a script's answer, a short string's length) written at once.
    if let Ok(d @ 0..=9) = u8::try_from(n) {
        out.extend_from_slice(&[ty, b'0' + d, b'\r', b'\n']);
        return;
    }
    if let Ok(d @ 10..=99) = u8::try_from(n) {
        out.extend_from_slice(&[ty, b'0' + d / 10, b'0' + d % 10, b'\r', b'\n']);
        return;
    }
    let mut ib = IntBuf::new();
    out.push(ty);
    out.extend_from_slice(ib.format(n));
    out.extend_from_slice(b"\r\n");
}

/// A bulk string.
fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    header(out, b'$', count(b.len()));
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Writes the invalidation push for `key` (`>2 invalidate [key]`), RESP3 only.
pub(crate) fn encode_invalidation(key: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b">2\r\n$10\r\ninvalidate\r\n*1\r\n");
    bulk(out, key);
}

/// Writes a push of three bulk strings (`>3 message <channel> <payload>`), RESP3 only.
pub(crate) fn encode_push3(kind: &[u8], channel: &[u8], payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b">3\r\n");
    bulk(out, kind);
    bulk(out, channel);
    bulk(out, payload);
}
