//! The decoder's error type.
//!
//! "Incomplete" is not an error: [`Decoder::decode`](crate::Decoder::decode) says so with
//! `Ok(None)`. Everything here means the byte stream is not RESP, or is RESP that breaks one of
//! the [`Limits`](crate::Limits). After any of these the stream is desynchronised: nothing after
//! the offending byte can be trusted to start a frame, so the connection must be dropped.

use thiserror::Error as ThisError;

/// What was wrong with the input. Carried by [`Error`], together with where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ThisError)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A frame started with a byte that is no RESP2 or RESP3 type. Carries the byte.
    #[error("invalid type byte 0x{0:02x}")]
    InvalidType(u8),
    /// An integer, or a length or count, that is not a canonical signed 64-bit decimal
    /// (leading `+` or zeros, `-0`, whitespace, empty, overflow, or a non-digit).
    #[error("invalid integer")]
    InvalidInteger,
    /// A length or count below -1, or -1 where no null form exists for that type.
    #[error("invalid length {0}")]
    InvalidLength(i64),
    /// A bulk payload (or a streamed string's total) longer than [`Limits::max_bulk_len`](crate::Limits::max_bulk_len).
    #[error("bulk length {len} exceeds the limit {max}")]
    BulkTooLong {
        /// The declared (or accumulated) length.
        len: u64,
        /// The limit in force.
        max: usize,
    },
    /// An aggregate with more elements than [`Limits::max_elements`](crate::Limits::max_elements).
    #[error("aggregate of {count} elements exceeds the limit {max}")]
    TooManyElements {
        /// The declared (or accumulated) number of elements.
        count: u64,
        /// The limit in force.
        max: usize,
    },
    /// Aggregates (of any kind, attributes included) nested deeper than
    /// [`Limits::max_depth`](crate::Limits::max_depth).
    #[error("nesting deeper than the limit {max}")]
    TooDeep {
        /// The limit in force.
        max: usize,
    },
    /// A line (a simple string or error, or a header) with no CRLF within
    /// [`Limits::max_line_len`](crate::Limits::max_line_len) bytes.
    #[error("line longer than the limit {max}")]
    LineTooLong {
        /// The limit in force.
        max: usize,
    },
    /// A CR not followed by LF, or an LF not preceded by CR, inside a line.
    #[error("stray CR or LF inside a line")]
    StrayLineBreak,
    /// The two bytes after a bulk payload (or a streamed chunk) are not CRLF.
    #[error("bulk payload not followed by CRLF")]
    MissingCrlf,
    /// A double (`,`) that is not a decimal or exponent number, `inf`, `-inf` or `nan`.
    #[error("invalid double")]
    InvalidDouble,
    /// A big number (`(`) that is not an optionally negative run of digits.
    #[error("invalid big number")]
    InvalidBigNumber,
    /// A boolean (`#`) other than exactly `t` or `f`.
    #[error("invalid boolean")]
    InvalidBoolean,
    /// A null (`_`), or the end of a streamed aggregate (`.`), with a payload.
    #[error("unexpected payload after a null or an end marker")]
    UnexpectedPayload,
    /// A verbatim string shorter than 4 bytes or whose byte 3 is not `:`.
    #[error("invalid verbatim string")]
    InvalidVerbatim,
    /// A streamed-string chunk (`;`) outside a streamed string, or anything but a chunk inside
    /// one.
    #[error("streamed string chunk out of place")]
    MisplacedChunk,
    /// An end marker (`.`) outside a streamed aggregate, or where a value is owed (after an
    /// attribute, or inside a map between a key and its value).
    #[error("end marker out of place")]
    MisplacedEnd,
    /// A push (`>`) nested inside another aggregate.
    #[error("push frame nested inside an aggregate")]
    NestedPush,
    /// A `?` (streamed) length on a type that cannot be streamed.
    #[error("type cannot be streamed")]
    InvalidStream,
    /// A previous call failed: the stream is desynchronised and the decoder refuses to go on
    /// until it is [`reset`](crate::Decoder::reset) for a new connection.
    #[error("decoder poisoned by an earlier error")]
    Poisoned,
}

/// A decoding error: what was wrong, and at which byte.
///
/// `offset` counts from the start of the buffer passed to
/// [`Decoder::decode`](crate::Decoder::decode), which is the start of the frame being decoded.
///
/// # Examples
/// ```
/// use bytes::BytesMut;
/// use redlock_resp::{Decoder, ErrorKind};
///
/// let mut buf = BytesMut::from(&b"*1\r\n:007\r\n"[..]);
/// let err = Decoder::default().decode(&mut buf).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInteger);
/// assert_eq!(err.offset(), 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, ThisError)]
#[error("{kind} at byte {offset}")]
pub struct Error {
    kind: ErrorKind,
    offset: usize,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, offset: usize) -> Self {
        Error { kind, offset }
    }

    /// What was wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The byte offset, from the start of the frame, at which the problem was found.
    pub fn offset(&self) -> usize {
        self.offset
    }
}
