//! Encoding commands and frames into any [`BufMut`], with no heap allocation.
//!
//! Integers are formatted on the stack by [`IntBuf`]; doubles through `core::fmt` into the
//! destination directly. Nothing here checks that a simple string or error is free of CR and LF:
//! the encoder writes what it is given (fake servers in tests rely on that to send bad frames),
//! and a frame that came out of the [`Decoder`](crate::Decoder) always encodes back to valid RESP.

use bytes::BufMut;

use crate::Frame;

/// A stack buffer that formats an `i64` as canonical decimal without allocating.
///
/// # Examples
/// ```
/// let mut b = redlock_resp::IntBuf::new();
/// assert_eq!(b.format(-30_000), b"-30000");
/// assert_eq!(b.format(i64::MIN), b"-9223372036854775808");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct IntBuf {
    buf: [u8; 20],
}

impl Default for IntBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl IntBuf {
    /// An empty buffer.
    pub const fn new() -> Self {
        IntBuf { buf: [0; 20] }
    }

    /// Formats `n` and returns its digits (with a leading `-` when negative).
    pub fn format(&mut self, n: i64) -> &[u8] {
        let mut v = n.unsigned_abs();
        let mut i = self.buf.len();
        loop {
            i -= 1;
            self.buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        if n < 0 {
            i -= 1;
            self.buf[i] = b'-';
        }
        &self.buf[i..]
    }
}

/// Writes `len` (under 1000, as the short path of [`encode_command`] guarantees, or any other
/// length) in decimal at the start of `dst`; returns how many digits that took.
#[inline]
fn put_len(dst: &mut [u8], len: usize) -> usize {
    // Digits by value: `len % 10` and `len / 10` are exact for every `usize`.
    if len < 10 {
        dst[0] = b'0' + len as u8;
        1
    } else if len < 100 {
        dst[0] = b'0' + (len / 10) as u8;
        dst[1] = b'0' + (len % 10) as u8;
        2
    } else if len < 1000 {
        dst[0] = b'0' + (len / 100) as u8;
        dst[1] = b'0' + (len / 10 % 10) as u8;
        dst[2] = b'0' + (len % 10) as u8;
        3
    } else {
        let mut ib = IntBuf::new();
        let digits = ib.format(count(len));
        dst[..digits.len()].copy_from_slice(digits);
        digits.len()
    }
}

/// Writes a type byte, a decimal number and CRLF: the header of a counted frame.
#[inline]
fn put_header(dst: &mut impl BufMut, ty: u8, n: i64) {
    let mut ib = IntBuf::new();
    dst.put_u8(ty);
    dst.put_slice(ib.format(n));
    dst.put_slice(b"\r\n");
}

/// A count as the `i64` the wire carries. Counts past `i64::MAX` cannot exist in memory.
#[inline]
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[inline]
fn put_line(dst: &mut impl BufMut, ty: u8, payload: &[u8]) {
    dst.put_u8(ty);
    dst.put_slice(payload);
    dst.put_slice(b"\r\n");
}

#[inline]
fn put_bulk(dst: &mut impl BufMut, ty: u8, payload: &[u8]) {
    put_header(dst, ty, count(payload.len()));
    dst.put_slice(payload);
    dst.put_slice(b"\r\n");
}

/// Writes a command, an array of bulk strings, as a client sends it to a server.
///
/// No allocation: lengths are formatted on the stack. Numbers among the arguments can be
/// formatted with [`IntBuf`].
///
/// # Examples
/// ```
/// let mut out = Vec::new();
/// let mut ttl = redlock_resp::IntBuf::new();
/// redlock_resp::encode_command(&mut out, &[b"SET", b"k", b"tok", b"NX", b"PX", ttl.format(30_000)]);
/// assert_eq!(out, b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\ntok\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n");
/// ```
pub fn encode_command(dst: &mut impl BufMut, args: &[&[u8]]) {
    // A short command (the lock commands are about 100 bytes) is assembled on the stack and
    // written in one piece.
    const SMALL: usize = 256;
    let payload: usize = args.iter().map(|a| a.len()).sum();
    // Each argument shorter than 1000 bytes costs at most 8 header bytes (`\r\n$999\r\n`), the
    // array header and the last CRLF 5 more for up to 99 arguments: the stack buffer holds it.
    if args.len() <= 16 && payload + 8 * args.len() + 8 <= SMALL {
        let mut buf = [0u8; SMALL];
        buf[0] = b'*';
        let mut n = 1 + put_len(&mut buf[1..], args.len());
        // Byte stores rather than slice copies for the headers: a copy of a few bytes whose
        // length is not known at compile time is a call; only the arguments are copied.
        for arg in args {
            buf[n..n + 3].copy_from_slice(b"\r\n$");
            n += 3;
            n += put_len(&mut buf[n..], arg.len());
            buf[n..n + 2].copy_from_slice(b"\r\n");
            n += 2;
            buf[n..n + arg.len()].copy_from_slice(arg);
            n += arg.len();
        }
        buf[n..n + 2].copy_from_slice(b"\r\n");
        n += 2;
        dst.put_slice(&buf[..n]);
        return;
    }
    // Few, larger writes: each argument costs one write of its header (with the CRLF that
    // ends the argument before it) and one of its bytes. Tiny writes are what makes encoding
    // slow on a `BytesMut`, whose every `put` checks capacity.
    let mut head = [0u8; 48];
    let mut ib = IntBuf::new();
    head[0] = b'*';
    let digits = ib.format(count(args.len()));
    let mut n = 1 + digits.len();
    head[1..n].copy_from_slice(digits);
    for arg in args {
        head[n..n + 3].copy_from_slice(b"\r\n$");
        n += 3;
        let digits = ib.format(count(arg.len()));
        head[n..n + digits.len()].copy_from_slice(digits);
        n += digits.len();
        head[n..n + 2].copy_from_slice(b"\r\n");
        n += 2;
        dst.put_slice(&head[..n]);
        dst.put_slice(arg);
        n = 0;
    }
    if args.is_empty() {
        head[n..n + 2].copy_from_slice(b"\r\n");
        n += 2;
        dst.put_slice(&head[..n]);
    } else {
        dst.put_slice(b"\r\n");
    }
}

/// Adapts a `BufMut` to `core::fmt::Write`, so that `write!` formats straight into it.
struct FmtSink<'a, B: BufMut>(&'a mut B);

impl<B: BufMut> core::fmt::Write for FmtSink<'_, B> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.put_slice(s.as_bytes());
        Ok(())
    }
}

fn put_double(dst: &mut impl BufMut, v: f64) {
    use core::fmt::Write;
    dst.put_u8(b',');
    if v.is_nan() {
        dst.put_slice(b"nan");
    } else if v.is_infinite() {
        dst.put_slice(if v > 0.0 { &b"inf"[..] } else { &b"-inf"[..] });
    } else {
        let a = v.abs();
        // Shortest round-trip form either way; the exponent form keeps very large and very
        // small magnitudes short (plain `{}` would spell out hundreds of zeros).
        let _ = if a == 0.0 || (1e-6..1e16).contains(&a) {
            write!(FmtSink(dst), "{v}")
        } else {
            write!(FmtSink(dst), "{v:e}")
        };
    }
    dst.put_slice(b"\r\n");
}

impl Frame {
    /// Writes this frame in its wire form.
    ///
    /// Aggregates are written in their counted forms, a [`Frame::StreamedString`] as `$?` with
    /// one `;` chunk per non-empty chunk. This recurses once per level of nesting, which for a
    /// decoded frame is bounded by [`Limits::max_depth`](crate::Limits::max_depth).
    ///
    /// # Examples
    /// ```
    /// use redlock_resp::Frame;
    /// let mut out = Vec::new();
    /// Frame::Array(vec![Frame::Integer(1), Frame::Null]).encode(&mut out);
    /// assert_eq!(out, b"*2\r\n:1\r\n_\r\n");
    /// ```
    pub fn encode(&self, dst: &mut impl BufMut) {
        self.encode_with(dst, false);
    }

    /// Writes this frame with every array, set and map, at every level, in its streamed form
    /// (`*?`, `~?`, `%?`, ended by `.`). Other frames are written as by [`Frame::encode`].
    ///
    /// # Examples
    /// ```
    /// use redlock_resp::Frame;
    /// let mut out = Vec::new();
    /// Frame::Set(vec![Frame::Boolean(true)]).encode_streamed(&mut out);
    /// assert_eq!(out, b"~?\r\n#t\r\n.\r\n");
    /// ```
    pub fn encode_streamed(&self, dst: &mut impl BufMut) {
        self.encode_with(dst, true);
    }

    fn encode_with(&self, dst: &mut impl BufMut, streamed: bool) {
        match self {
            Frame::Simple(s) => put_line(dst, b'+', s),
            Frame::Error(s) => put_line(dst, b'-', s),
            Frame::Integer(n) => put_header(dst, b':', *n),
            Frame::Bulk(b) => put_bulk(dst, b'$', b),
            Frame::NullBulk => dst.put_slice(b"$-1\r\n"),
            Frame::NullArray => dst.put_slice(b"*-1\r\n"),
            Frame::Null => dst.put_slice(b"_\r\n"),
            Frame::Boolean(b) => dst.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Frame::Double(v) => put_double(dst, *v),
            Frame::BigNumber(b) => put_line(dst, b'(', b),
            Frame::BulkError(b) => put_bulk(dst, b'!', b),
            Frame::Verbatim { format, text } => {
                put_header(dst, b'=', count(text.len()).saturating_add(4));
                dst.put_slice(format);
                dst.put_u8(b':');
                dst.put_slice(text);
                dst.put_slice(b"\r\n");
            }
            Frame::Array(items) => put_items(dst, b'*', items, streamed),
            Frame::Set(items) => put_items(dst, b'~', items, streamed),
            Frame::Push(items) => put_items(dst, b'>', items, false),
            Frame::Map(pairs) => {
                if streamed {
                    dst.put_slice(b"%?\r\n");
                } else {
                    put_header(dst, b'%', count(pairs.len()));
                }
                put_pairs(dst, pairs, streamed);
                if streamed {
                    dst.put_slice(b".\r\n");
                }
            }
            Frame::Attribute { attributes, value } => {
                put_header(dst, b'|', count(attributes.len()));
                put_pairs(dst, attributes, streamed);
                value.encode_with(dst, streamed);
            }
            Frame::StreamedString(chunks) => {
                dst.put_slice(b"$?\r\n");
                for c in chunks.iter().filter(|c| !c.is_empty()) {
                    put_bulk(dst, b';', c);
                }
                dst.put_slice(b";0\r\n");
            }
        }
    }
}

fn put_items(dst: &mut impl BufMut, ty: u8, items: &[Frame], streamed: bool) {
    if streamed {
        dst.put_u8(ty);
        dst.put_slice(b"?\r\n");
    } else {
        put_header(dst, ty, count(items.len()));
    }
    for f in items {
        f.encode_with(dst, streamed);
    }
    if streamed {
        dst.put_slice(b".\r\n");
    }
}

fn put_pairs(dst: &mut impl BufMut, pairs: &[(Frame, Frame)], streamed: bool) {
    for (k, v) in pairs {
        k.encode_with(dst, streamed);
        v.encode_with(dst, streamed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: Frame) -> Vec<u8> {
        let mut v = Vec::new();
        f.encode(&mut v);
        v
    }

    #[test]
    fn intbuf_formats_edges() {
        let mut b = IntBuf::new();
        for n in [0i64, 1, -1, 9, 10, 99, 100, i64::MAX, i64::MIN, -30000] {
            assert_eq!(b.format(n), n.to_string().as_bytes(), "{n}");
        }
    }

    #[test]
    fn every_frame_type_encodes() {
        let cases: Vec<(Frame, &[u8])> = vec![
            (Frame::Simple("OK".into()), b"+OK\r\n"),
            (Frame::Error("ERR x".into()), b"-ERR x\r\n"),
            (Frame::Integer(-7), b":-7\r\n"),
            (Frame::Bulk("".into()), b"$0\r\n\r\n"),
            (Frame::NullBulk, b"$-1\r\n"),
            (Frame::NullArray, b"*-1\r\n"),
            (Frame::Null, b"_\r\n"),
            (Frame::Boolean(false), b"#f\r\n"),
            (Frame::Double(1.5), b",1.5\r\n"),
            (Frame::Double(f64::INFINITY), b",inf\r\n"),
            (Frame::Double(f64::NEG_INFINITY), b",-inf\r\n"),
            (Frame::Double(f64::NAN), b",nan\r\n"),
            (Frame::Double(1e300), b",1e300\r\n"),
            (Frame::Double(-0.0), b",-0\r\n"),
            (Frame::BigNumber("-123".into()), b"(-123\r\n"),
            (Frame::BulkError("SYNTAX x".into()), b"!8\r\nSYNTAX x\r\n"),
            (
                Frame::Verbatim {
                    format: *b"txt",
                    text: "hi".into(),
                },
                b"=6\r\ntxt:hi\r\n",
            ),
            (Frame::Set(vec![]), b"~0\r\n"),
            (Frame::Push(vec![Frame::Integer(1)]), b">1\r\n:1\r\n"),
            (
                Frame::Attribute {
                    attributes: vec![(Frame::Simple("a".into()), Frame::Integer(1))],
                    value: Box::new(Frame::Null),
                },
                b"|1\r\n+a\r\n:1\r\n_\r\n",
            ),
            (
                Frame::StreamedString(vec!["ab".into(), "".into(), "c".into()]),
                b"$?\r\n;2\r\nab\r\n;1\r\nc\r\n;0\r\n",
            ),
        ];
        for (f, want) in cases {
            assert_eq!(enc(f.clone()), want, "{f:?}");
        }
    }

    #[test]
    fn streamed_forms() {
        let f = Frame::Map(vec![(Frame::Integer(1), Frame::Array(vec![Frame::Null]))]);
        let mut out = Vec::new();
        f.encode_streamed(&mut out);
        assert_eq!(out, b"%?\r\n:1\r\n*?\r\n_\r\n.\r\n.\r\n");
    }
}
