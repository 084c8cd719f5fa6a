//! The incremental decoder.
//!
//! # How it works
//! [`Decoder::decode`] walks the buffer from where it stopped last time. It never recurses: open
//! aggregates live on an explicit stack, and a frame being decoded is recorded as a flat list of
//! tokens (offsets into the buffer, and parsed numbers) in wire order. Only when the last byte of
//! the frame has arrived does it split the frame's bytes off the buffer, freeze them into one
//! [`Bytes`], and build the [`Frame`] tree from the tokens, slicing payloads out of that `Bytes`.
//! So the caller's buffer is untouched until a frame is whole, no byte is looked at twice, and
//! no payload is copied. A top-level scalar (the common reply) skips the token list altogether.
//!
//! # The contract between calls
//! After `Ok(None)` the decoder remembers offsets into the buffer. Until the next frame comes
//! out, the caller may only *append* to the buffer (as a socket read does). To start over on
//! another stream, call [`Decoder::reset`].

use bytes::{Bytes, BytesMut};

use crate::{Error, ErrorKind, Frame, Limits};

mod line;
mod number;

pub(crate) use number::parse_int;
use number::{is_big_number, parse_double};

/// The kinds of aggregate the decoder can have open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agg {
    Array,
    Set,
    Map,
    Push,
    Attribute,
    StreamedString,
}

/// One decoded item of a frame under construction. Offsets count from the frame's first byte.
#[derive(Debug, Clone, Copy)]
enum Tok {
    Simple(usize, usize),
    Error(usize, usize),
    Integer(i64),
    Bulk(usize, usize),
    NullBulk,
    NullArray,
    Null,
    Boolean(bool),
    Double(f64),
    BigNumber(usize, usize),
    BulkError(usize, usize),
    /// The whole payload, `fmt:text`.
    Verbatim(usize, usize),
    /// One chunk of a streamed string.
    Chunk(usize, usize),
    /// An aggregate header and how many items follow it (for maps and attributes, keys and
    /// values count one each; an attribute's annotated value counts one more).
    Agg(Agg, usize),
}

/// What a bulk-like header announced, while its payload is being awaited.
#[derive(Debug, Clone, Copy)]
struct Pending {
    ty: u8,
    start: usize,
    len: usize,
}

/// An aggregate that has been opened and is not complete yet.
#[derive(Debug, Clone, Copy)]
struct Open {
    kind: Agg,
    /// Items still owed; `None` for a streamed aggregate, which ends with `.` (or `;0`).
    remaining: Option<u64>,
    /// Items (or chunks) seen so far.
    count: usize,
    /// Where its `Tok::Agg` sits in the token list.
    tok: usize,
    /// Bytes so far, for a streamed string.
    total: u64,
}

/// What one pass over the buffer ended with.
enum Step {
    Incomplete,
    /// A whole top-level scalar (or empty aggregate): no token list needed.
    Single(Tok),
    /// A whole aggregate, recorded in the token list.
    Tree,
}

/// An incremental, zero-copy RESP2/RESP3 decoder bounded by [`Limits`].
///
/// Keep one per connection: it remembers how far it got into a partial frame, so bytes that
/// arrive in small pieces are looked at once each. After an error, the byte stream is
/// desynchronised (there is no way to tell where the next frame starts): the caller must drop
/// the connection, and the decoder refuses further input (with [`ErrorKind::Poisoned`]) until
/// [`reset`](Decoder::reset).
///
/// # Examples
/// ```
/// use bytes::BytesMut;
/// use redlock_resp::{Decoder, Frame};
///
/// let mut dec = Decoder::default();
/// let mut buf = BytesMut::from(&b"+OK\r\n$5\r\nhel"[..]);
/// assert_eq!(dec.decode(&mut buf).unwrap(), Some(Frame::Simple("OK".into())));
/// assert_eq!(dec.decode(&mut buf).unwrap(), None); // the bulk is not all here yet
/// assert_eq!(&buf[..], b"$5\r\nhel"); // and the buffer is as it was
/// buf.extend_from_slice(b"lo\r\n");
/// assert_eq!(dec.decode(&mut buf).unwrap(), Some(Frame::Bulk("hello".into())));
/// assert!(buf.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct Decoder {
    limits: Limits,
    /// The first byte of the current frame not yet decoded.
    pos: usize,
    /// Where the search for the current line's CRLF resumes (bytes before it hold none).
    scan: usize,
    pending: Option<Pending>,
    stack: Vec<Open>,
    tokens: Vec<Tok>,
    /// The aggregates of a frame being built from `tokens` (kept for its capacity).
    building: Vec<Building>,
    poisoned: Option<Error>,
}

impl Decoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            ..Decoder::default()
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Forgets any partial frame and any earlier error, for use on a new byte stream (a new
    /// connection). Allocated capacity is kept.
    pub fn reset(&mut self) {
        self.clear();
        self.poisoned = None;
    }

    /// Whether part of a frame has been decoded and the rest is awaited.
    pub fn is_mid_frame(&self) -> bool {
        self.pos != 0 || self.scan != 0
    }

    fn clear(&mut self) {
        self.pos = 0;
        self.scan = 0;
        self.pending = None;
        self.stack.clear();
        self.tokens.clear();
    }

    /// Decodes the next frame from the front of `buf`.
    ///
    /// - `Ok(Some(frame))`: the frame's bytes have been split off the front of `buf`; its
    ///   payloads are slices of them.
    /// - `Ok(None)`: `buf` holds only part of a frame (perhaps none) and is left exactly as it
    ///   was. Append more bytes and call again; the decoder resumes where it stopped.
    /// - `Err(e)`: the bytes are not valid RESP or break a limit. The stream is desynchronised:
    ///   drop the connection. `buf` is left as it was.
    ///
    /// Never panics, whatever `buf` holds.
    ///
    /// # Examples
    /// ```
    /// use bytes::BytesMut;
    /// use redlock_resp::{Decoder, ErrorKind, Limits};
    ///
    /// let mut dec = Decoder::new(Limits::new().with_max_depth(8));
    /// let mut buf = BytesMut::from(&b"*1\r\n".repeat(1000)[..]);
    /// assert_eq!(dec.decode(&mut buf).unwrap_err().kind(), ErrorKind::TooDeep { max: 8 });
    /// ```
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, Error> {
        if let Some(e) = self.poisoned {
            return Err(Error::new(ErrorKind::Poisoned, e.offset()));
        }
        if buf.len() < self.pos {
            // The caller broke the append-only contract; what we remembered is meaningless.
            self.clear();
        }
        if self.pos == 0 && self.scan == 0 && self.pending.is_none() && self.stack.is_empty() {
            if let Some(frame) = whole_scalar(buf, &self.limits) {
                return Ok(Some(frame));
            }
        }
        self.decode_stepwise(buf)
    }

    /// [`decode`](Decoder::decode) by the state machine alone (what the shortcut for whole
    /// scalars must agree with).
    fn decode_stepwise(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, Error> {
        match self.advance(buf) {
            Ok(Step::Incomplete) => Ok(None),
            Ok(Step::Single(tok)) => {
                let frame = take_scalar(tok, buf, self.pos);
                self.clear();
                Ok(Some(frame))
            }
            Ok(Step::Tree) => {
                let bytes = buf.split_to(self.pos).freeze();
                let frame = self.build(&bytes);
                self.clear();
                Ok(Some(frame))
            }
            Err(e) => {
                self.poisoned = Some(e);
                Err(e)
            }
        }
    }

    /// Runs the state machine over `buf` from `self.pos` until a frame is whole, the buffer
    /// runs out, or an error.
    fn advance(&mut self, buf: &[u8]) -> Result<Step, Error> {
        loop {
            let item = if let Some(p) = self.pending {
                let end = p.start.saturating_add(p.len);
                if buf.len() < end.saturating_add(2) {
                    return Ok(Step::Incomplete);
                }
                if &buf[end..end + 2] != b"\r\n" {
                    return Err(Error::new(ErrorKind::MissingCrlf, end));
                }
                self.pending = None;
                self.pos = end + 2;
                self.scan = self.pos;
                match p.ty {
                    b'$' => Some(Tok::Bulk(p.start, end)),
                    b'!' => Some(Tok::BulkError(p.start, end)),
                    b'=' => {
                        if buf[p.start + 3] != b':' {
                            return Err(Error::new(ErrorKind::InvalidVerbatim, p.start + 3));
                        }
                        Some(Tok::Verbatim(p.start, end))
                    }
                    _ => {
                        // A streamed-string chunk: counted on its open string, not a value.
                        self.tokens.push(Tok::Chunk(p.start, end));
                        if let Some(top) = self.stack.last_mut() {
                            top.count += 1;
                        }
                        continue;
                    }
                }
            } else {
                match self.line(buf)? {
                    Line::Incomplete => return Ok(Step::Incomplete),
                    Line::Value(tok) => Some(tok),
                    Line::Closed => None,
                    Line::Continue => continue,
                }
            };
            if let Some(step) = self.complete(item)? {
                return Ok(step);
            }
        }
    }

    /// A value has ended: `Some(tok)` a scalar, `None` the aggregate on top of the stack that
    /// was just closed (already popped). Counts it on its parent and closes every aggregate it
    /// completes. Returns the step when the whole frame is done.
    fn complete(&mut self, item: Option<Tok>) -> Result<Option<Step>, Error> {
        match item {
            Some(tok) if self.stack.is_empty() => return Ok(Some(Step::Single(tok))),
            Some(tok) => self.tokens.push(tok),
            None if self.stack.is_empty() => return Ok(Some(Step::Tree)),
            None => {}
        }
        let max = self.limits.max_elements();
        while let Some(top) = self.stack.last_mut() {
            top.count += 1;
            match &mut top.remaining {
                None => {
                    if top.count > max {
                        let count = top.count as u64;
                        return Err(Error::new(
                            ErrorKind::TooManyElements { count, max },
                            self.pos,
                        ));
                    }
                    return Ok(None);
                }
                Some(rem) => {
                    *rem -= 1;
                    if *rem > 0 {
                        return Ok(None);
                    }
                }
            }
            self.stack.pop();
        }
        Ok(Some(Step::Tree))
    }

    /// Finds the CR of the CRLF ending the line that starts at `self.pos`, resuming the search
    /// where the last call left it. `Ok(None)` when it has not arrived yet.
    fn find_line_end(&mut self, buf: &[u8]) -> Result<Option<usize>, Error> {
        let body_start = self.pos + 1;
        let from = self.scan.max(body_start);
        let max = self.limits.max_line_len();
        let too_long = |len: usize| {
            if len > max {
                Err(Error::new(ErrorKind::LineTooLong { max }, self.pos))
            } else {
                Ok(())
            }
        };
        match find_cr_or_lf(buf.get(from..).unwrap_or_default()) {
            None => {
                too_long(buf.len().saturating_sub(body_start))?;
                self.scan = buf.len().max(from);
                Ok(None)
            }
            Some(i) => {
                let i = from + i;
                too_long(i - body_start)?;
                match (buf[i], buf.get(i + 1)) {
                    (b'\r', Some(b'\n')) => Ok(Some(i)),
                    (b'\r', None) => {
                        self.scan = i;
                        Ok(None)
                    }
                    (b'\r', Some(_)) => Err(Error::new(ErrorKind::StrayLineBreak, i)),
                    _ => Err(Error::new(ErrorKind::StrayLineBreak, i)),
                }
            }
        }
    }

    /// Builds the frame recorded in the token list, whose offsets point into `bytes`.
    fn build(&mut self, bytes: &Bytes) -> Frame {
        // The aggregates open, kept between frames (emptied again by the time a frame is built).
        let mut stack = std::mem::take(&mut self.building);
        stack.clear();
        let frame = self.build_with(bytes, &mut stack);
        self.building = stack;
        frame
    }

    /// [`build`](Decoder::build), with `stack` for the aggregates open.
    fn build_with(&self, bytes: &Bytes, stack: &mut Vec<Building>) -> Frame {
        for &tok in &self.tokens {
            let mut frame = match tok {
                Tok::Agg(kind, n) if n > 0 => {
                    stack.push(Building {
                        kind,
                        left: n,
                        items: Vec::with_capacity(n),
                    });
                    continue;
                }
                Tok::Chunk(s, e) => Frame::Bulk(bytes.slice(s..e)),
                tok => scalar(tok, bytes),
            };
            loop {
                let Some(top) = stack.last_mut() else {
                    return frame;
                };
                top.items.push(frame);
                top.left -= 1;
                if top.left > 0 {
                    break;
                }
                match stack.pop() {
                    Some(done) => frame = finish(done.kind, done.items),
                    None => return Frame::Null,
                }
            }
        }
        // Unreachable for a token list `advance` declared complete; a frame all the same.
        Frame::Null
    }
}

/// An aggregate being built from the token list: its kind, how many items it still takes,
/// the items so far.
#[derive(Debug)]
struct Building {
    kind: Agg,
    left: usize,
    items: Vec<Frame>,
}

/// What decoding one line produced.
enum Line {
    Incomplete,
    Value(Tok),
    /// An aggregate was closed (and popped); it is now a value of its parent.
    Closed,
    /// A header was consumed; more items follow.
    Continue,
}

/// Takes a whole top-level scalar, `end` bytes long, off the front of `buf`. Only the payload
/// is split off as `Bytes` (one reference count taken); the framing bytes are skipped, and a
/// frame without payload takes no reference at all.
fn take_scalar(tok: Tok, buf: &mut BytesMut, end: usize) -> Frame {
    use bytes::Buf;
    fn payload(buf: &mut BytesMut, s: usize, e: usize, end: usize) -> Bytes {
        buf.advance(s);
        let b = buf.split_to(e - s).freeze();
        buf.advance(end - e);
        b
    }
    match tok {
        // The commonest reply of all (`SET` won, `SET ... XX`, `CLIENT ...`): a static string
        // instead of a shared slice of the buffer, which would cost a reference count now and
        // a release later. Still no copy.
        Tok::Simple(s, e) if &buf[s..e] == b"OK" => {
            buf.advance(end);
            Frame::Simple(Bytes::from_static(b"OK"))
        }
        Tok::Simple(s, e) => Frame::Simple(payload(buf, s, e, end)),
        Tok::Error(s, e) => Frame::Error(payload(buf, s, e, end)),
        Tok::Bulk(s, e) | Tok::Chunk(s, e) => Frame::Bulk(payload(buf, s, e, end)),
        Tok::BigNumber(s, e) => Frame::BigNumber(payload(buf, s, e, end)),
        Tok::BulkError(s, e) => Frame::BulkError(payload(buf, s, e, end)),
        Tok::Verbatim(s, e) => {
            let format = [buf[s], buf[s + 1], buf[s + 2]];
            Frame::Verbatim {
                format,
                text: payload(buf, s + 4, e, end),
            }
        }
        other => {
            buf.advance(end);
            scalar(other, &Bytes::new())
        }
    }
}

/// The commonest replies, whole at the front of `buf` with no frame begun: an integer, a
/// simple string, a bulk string (or the null bulk), RESP3's null. Taken off `buf` as the state
/// machine would take them, with the same frame, in one look; `None` (and `buf` untouched)
/// for anything else, which the state machine then reads (and judges) from the start: any
/// other type, a frame not all here, one that breaks a limit or the protocol.
#[inline]
fn whole_scalar(buf: &mut BytesMut, limits: &Limits) -> Option<Frame> {
    use bytes::Buf;
    // The end of the line starting at `buf[0]` (its CR, followed by LF), if it is short, all
    // here, and within the line limit.
    let line_end = |buf: &[u8]| -> Option<usize> {
        // (A byte at a time: these lines are a few bytes long.)
        let i = 1 + buf
            .get(1..buf.len().min(64))?
            .iter()
            .position(|&c| c == b'\r' || c == b'\n')?;
        (buf[i] == b'\r' && buf.get(i + 1) == Some(&b'\n') && i - 1 <= limits.max_line_len())
            .then_some(i)
    };
    match *buf.first()? {
        b':' => {
            let end = line_end(buf)?;
            let n = parse_int(&buf[1..end])?;
            buf.advance(end + 2);
            Some(Frame::Integer(n))
        }
        b'+' => {
            let end = line_end(buf)?;
            if &buf[1..end] == b"OK" {
                buf.advance(end + 2);
                return Some(Frame::Simple(Bytes::from_static(b"OK")));
            }
            buf.advance(1);
            let text = buf.split_to(end - 1).freeze();
            buf.advance(2);
            Some(Frame::Simple(text))
        }
        b'$' => {
            let end = line_end(buf)?;
            let n = parse_int(&buf[1..end])?;
            if n == -1 {
                buf.advance(end + 2);
                return Some(Frame::NullBulk);
            }
            if n < 0 || n as u64 > limits.max_bulk_len() as u64 {
                return None;
            }
            let start = end + 2;
            let stop = start.checked_add(n as usize)?;
            if buf.get(stop..stop.checked_add(2)?)? != b"\r\n" {
                return None;
            }
            buf.advance(start);
            let payload = buf.split_to(stop - start).freeze();
            buf.advance(2);
            Some(Frame::Bulk(payload))
        }
        b'_' if buf.starts_with(b"_\r\n") => {
            buf.advance(3);
            Some(Frame::Null)
        }
        _ => None,
    }
}

/// Turns a scalar token (or an empty aggregate) into its frame.
fn scalar(tok: Tok, bytes: &Bytes) -> Frame {
    match tok {
        Tok::Simple(s, e) => Frame::Simple(bytes.slice(s..e)),
        Tok::Error(s, e) => Frame::Error(bytes.slice(s..e)),
        Tok::Integer(n) => Frame::Integer(n),
        Tok::Bulk(s, e) | Tok::Chunk(s, e) => Frame::Bulk(bytes.slice(s..e)),
        Tok::NullBulk => Frame::NullBulk,
        Tok::NullArray => Frame::NullArray,
        Tok::Null => Frame::Null,
        Tok::Boolean(b) => Frame::Boolean(b),
        Tok::Double(d) => Frame::Double(d),
        Tok::BigNumber(s, e) => Frame::BigNumber(bytes.slice(s..e)),
        Tok::BulkError(s, e) => Frame::BulkError(bytes.slice(s..e)),
        Tok::Verbatim(s, e) => {
            let format = [bytes[s], bytes[s + 1], bytes[s + 2]];
            Frame::Verbatim {
                format,
                text: bytes.slice(s + 4..e),
            }
        }
        Tok::Agg(kind, _) => finish(kind, Vec::new()),
    }
}

/// Turns a finished aggregate's items into its frame.
fn finish(kind: Agg, items: Vec<Frame>) -> Frame {
    fn pairs(items: Vec<Frame>) -> Vec<(Frame, Frame)> {
        let mut out = Vec::with_capacity(items.len() / 2);
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            out.push((k, v));
        }
        out
    }
    match kind {
        Agg::Array => Frame::Array(items),
        Agg::Set => Frame::Set(items),
        Agg::Push => Frame::Push(items),
        Agg::Map => Frame::Map(pairs(items)),
        Agg::Attribute => {
            let mut items = items;
            let value = items.pop().unwrap_or(Frame::Null);
            Frame::Attribute {
                attributes: pairs(items),
                value: Box::new(value),
            }
        }
        Agg::StreamedString => Frame::StreamedString(
            items
                .into_iter()
                .filter_map(|f| match f {
                    Frame::Bulk(b) => Some(b),
                    _ => None,
                })
                .collect(),
        ),
    }
}

/// Index of the first CR or LF in `hay`, eight bytes at a time.
fn find_cr_or_lf(hay: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const CR: u64 = LO * b'\r' as u64;
    const LF: u64 = LO * b'\n' as u64;
    let has_zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0;
    for chunk in chunks.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let x = u64::from_le_bytes(w);
        if has_zero(x ^ CR) | has_zero(x ^ LF) != 0 {
            return chunk
                .iter()
                .position(|&c| c == b'\r' || c == b'\n')
                .map(|i| base + i);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == b'\r' || c == b'\n')
        .map(|i| base + i)
}

/// What the shortcut made of an input and what the state machine did, each with the bytes it
/// left (tests).
#[cfg(test)]
pub(crate) type BothWays = (
    Option<(Frame, Vec<u8>)>,
    (Result<Option<Frame>, Error>, Vec<u8>),
);

/// What the shortcut for whole scalars makes of `input` and what the state machine alone
/// does, each with the bytes it leaves (tests).
#[cfg(test)]
pub(crate) fn shortcut_and_stepwise(input: &[u8], limits: Limits) -> BothWays {
    let mut fast = BytesMut::from(input);
    let shortcut = whole_scalar(&mut fast, &limits).map(|f| (f, fast.to_vec()));
    let mut slow = BytesMut::from(input);
    let stepwise = Decoder::new(limits).decode_stepwise(&mut slow);
    (shortcut, (stepwise, slow.to_vec()))
}

/// Frames from `decode`: `BytesMut` helper used by tests.
#[cfg(test)]
pub(crate) fn decode_all(input: &[u8], limits: Limits) -> Result<Vec<Frame>, Error> {
    let mut dec = Decoder::new(limits);
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some(f) = dec.decode(&mut buf)? {
        out.push(f);
    }
    Ok(out)
}
