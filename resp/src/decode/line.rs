//! One line at a time: a scalar, or the header of a bulk string, a streamed string's chunk, or
//! an aggregate, checked against the limits as it is read.

use super::*;

impl Decoder {
    /// Opens an aggregate of `items` items (`None`: streamed) at `at`, or, when it has none,
    /// returns it as a finished value.
    #[inline]
    pub(super) fn open(&mut self, kind: Agg, items: Option<u64>, at: usize) -> Result<Line, Error> {
        let max = self.limits.max_depth();
        if self.stack.len() >= max {
            return Err(Error::new(ErrorKind::TooDeep { max }, at));
        }
        if items == Some(0) {
            return Ok(Line::Value(Tok::Agg(kind, 0)));
        }
        self.stack.push(Open {
            kind,
            remaining: items,
            count: 0,
            tok: self.tokens.len(),
            total: 0,
        });
        // The item count is patched in when a streamed aggregate closes.
        self.tokens
            .push(Tok::Agg(kind, items.unwrap_or(0) as usize));
        Ok(Line::Continue)
    }

    /// Decodes one line (a scalar, or the header of a bulk or aggregate) at `self.pos`.
    #[inline]
    pub(super) fn line(&mut self, buf: &[u8]) -> Result<Line, Error> {
        let pos = self.pos;
        let Some(&ty) = buf.get(pos) else {
            return Ok(Line::Incomplete);
        };
        self.check_type(ty, pos)?;
        let Some(end) = self.find_line_end(buf)? else {
            return Ok(Line::Incomplete);
        };
        let s = pos + 1;
        let body = &buf[s..end];
        self.pos = end + 2;
        self.scan = self.pos;
        match ty {
            b'$' if body == b"?" => self.open(Agg::StreamedString, None, pos),
            b'$' | b'!' | b'=' => self.bulk_header(ty, body, s),
            b';' => self.chunk_header(body, s, pos),
            b'*' | b'~' | b'%' | b'>' | b'|' => self.aggregate_header(ty, body, s, pos),
            b'.' => self.stream_end(body, s, pos),
            _ => Ok(Line::Value(scalar_line(ty, body, s, end)?)),
        }
    }

    /// Whether a line of type `ty` may stand at `pos`: any type but a chunk outside a
    /// streamed string, only a chunk inside one.
    #[inline]
    pub(super) fn check_type(&self, ty: u8, pos: usize) -> Result<(), Error> {
        let in_string = matches!(
            self.stack.last(),
            Some(Open {
                kind: Agg::StreamedString,
                ..
            })
        );
        match ty {
            b'+' | b'-' | b':' | b'$' | b'*' | b'_' | b'#' | b',' | b'(' | b'!' | b'=' | b'%'
            | b'~' | b'>' | b'|' | b'.'
                if !in_string =>
            {
                Ok(())
            }
            b';' if in_string => Ok(()),
            b'+' | b'-' | b':' | b'$' | b'*' | b'_' | b'#' | b',' | b'(' | b'!' | b'=' | b'%'
            | b'~' | b'>' | b'|' | b'.' | b';' => Err(Error::new(ErrorKind::MisplacedChunk, pos)),
            other => Err(Error::new(ErrorKind::InvalidType(other), pos)),
        }
    }

    /// The header of a bulk string, bulk error or verbatim string (`ty`), whose length is
    /// `body`: its payload is awaited next.
    #[inline]
    pub(super) fn bulk_header(&mut self, ty: u8, body: &[u8], s: usize) -> Result<Line, Error> {
        let n = parse_int(body).ok_or(Error::new(ErrorKind::InvalidInteger, s))?;
        if n == -1 && ty == b'$' {
            return Ok(Line::Value(Tok::NullBulk));
        }
        let len = self.bulk_len(n, s)?;
        if ty == b'=' && len < 4 {
            return Err(Error::new(ErrorKind::InvalidVerbatim, s));
        }
        self.pending = Some(Pending {
            ty,
            start: self.pos,
            len,
        });
        Ok(Line::Continue)
    }

    /// A streamed string's chunk header: a chunk of that length is awaited next, or, of
    /// length 0, the string ends.
    #[inline]
    pub(super) fn chunk_header(
        &mut self,
        body: &[u8],
        s: usize,
        pos: usize,
    ) -> Result<Line, Error> {
        let n = parse_int(body).ok_or(Error::new(ErrorKind::InvalidInteger, s))?;
        let len = self.bulk_len(n, s)?;
        let max_total = self.limits.max_bulk_len();
        let max_chunks = self.limits.max_elements();
        let Some(top) = self.stack.last_mut() else {
            return Err(Error::new(ErrorKind::MisplacedChunk, pos));
        };
        if len == 0 {
            let top = *top;
            self.stack.pop();
            self.tokens[top.tok] = Tok::Agg(Agg::StreamedString, top.count);
            return Ok(Line::Closed);
        }
        top.total = top.total.saturating_add(len as u64);
        if top.total > max_total as u64 {
            let len = top.total;
            return Err(Error::new(
                ErrorKind::BulkTooLong {
                    len,
                    max: max_total,
                },
                s,
            ));
        }
        if top.count >= max_chunks {
            let count = top.count as u64 + 1;
            return Err(Error::new(
                ErrorKind::TooManyElements {
                    count,
                    max: max_chunks,
                },
                s,
            ));
        }
        self.pending = Some(Pending {
            ty: b';',
            start: self.pos,
            len,
        });
        Ok(Line::Continue)
    }

    /// An aggregate's header (`ty`: array, set, map, push or attribute), its count in `body`
    /// (or `?`, streamed).
    #[inline]
    pub(super) fn aggregate_header(
        &mut self,
        ty: u8,
        body: &[u8],
        s: usize,
        pos: usize,
    ) -> Result<Line, Error> {
        let kind = match ty {
            b'*' => Agg::Array,
            b'~' => Agg::Set,
            b'%' => Agg::Map,
            b'>' => Agg::Push,
            _ => Agg::Attribute,
        };
        if kind == Agg::Push && !self.push_allowed() {
            return Err(Error::new(ErrorKind::NestedPush, pos));
        }
        if body == b"?" {
            if matches!(kind, Agg::Push | Agg::Attribute) {
                return Err(Error::new(ErrorKind::InvalidStream, s));
            }
            return self.open(kind, None, pos);
        }
        let n = parse_int(body).ok_or(Error::new(ErrorKind::InvalidInteger, s))?;
        if n == -1 && kind == Agg::Array {
            return Ok(Line::Value(Tok::NullArray));
        }
        if n < 0 {
            return Err(Error::new(ErrorKind::InvalidLength(n), s));
        }
        let n = n as u64;
        let (elements, items) = match kind {
            Agg::Map => (n * 2, n * 2),
            Agg::Attribute => (n * 2, n * 2 + 1),
            _ => (n, n),
        };
        let max = self.limits.max_elements();
        if elements > max as u64 {
            return Err(Error::new(
                ErrorKind::TooManyElements {
                    count: elements,
                    max,
                },
                s,
            ));
        }
        self.open(kind, Some(items), pos)
    }

    /// `.`: ends the innermost streamed aggregate, if that is where we are.
    #[inline]
    pub(super) fn stream_end(&mut self, body: &[u8], s: usize, pos: usize) -> Result<Line, Error> {
        if !body.is_empty() {
            return Err(Error::new(ErrorKind::UnexpectedPayload, s));
        }
        match self.stack.last() {
            Some(&top)
                if top.remaining.is_none() && !(top.kind == Agg::Map && top.count % 2 == 1) =>
            {
                self.stack.pop();
                self.tokens[top.tok] = Tok::Agg(top.kind, top.count);
                Ok(Line::Closed)
            }
            _ => Err(Error::new(ErrorKind::MisplacedEnd, pos)),
        }
    }

    /// A push may only stand at the top level, or as the value an outermost attribute
    /// annotates.
    #[inline]
    pub(super) fn push_allowed(&self) -> bool {
        self.stack
            .iter()
            .all(|o| o.kind == Agg::Attribute && o.remaining == Some(1))
    }

    /// Checks a declared bulk or chunk length against the limits.
    #[inline]
    pub(super) fn bulk_len(&self, n: i64, at: usize) -> Result<usize, Error> {
        if n < 0 {
            return Err(Error::new(ErrorKind::InvalidLength(n), at));
        }
        let max = self.limits.max_bulk_len();
        if n as u64 > max as u64 {
            return Err(Error::new(
                ErrorKind::BulkTooLong { len: n as u64, max },
                at,
            ));
        }
        Ok(n as usize)
    }
}

/// A scalar line of type `ty` (simple string, error, integer, big number, double, boolean,
/// null), its body `body` at `s..end` of the buffer.
#[inline]
fn scalar_line(ty: u8, body: &[u8], s: usize, end: usize) -> Result<Tok, Error> {
    let int = |body: &[u8]| parse_int(body).ok_or(Error::new(ErrorKind::InvalidInteger, s));
    Ok(match ty {
        b'+' => Tok::Simple(s, end),
        b'-' => Tok::Error(s, end),
        b':' => Tok::Integer(int(body)?),
        b'(' => {
            if !is_big_number(body) {
                return Err(Error::new(ErrorKind::InvalidBigNumber, s));
            }
            Tok::BigNumber(s, end)
        }
        b',' => Tok::Double(parse_double(body).ok_or(Error::new(ErrorKind::InvalidDouble, s))?),
        b'#' => match body {
            b"t" => Tok::Boolean(true),
            b"f" => Tok::Boolean(false),
            _ => return Err(Error::new(ErrorKind::InvalidBoolean, s)),
        },
        // b'_' (every other type was handled by the caller).
        _ => {
            if !body.is_empty() {
                return Err(Error::new(ErrorKind::UnexpectedPayload, s));
            }
            Tok::Null
        }
    })
}
