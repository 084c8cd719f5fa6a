//! The decoded value: [`Frame`].
//!
//! Every payload is a [`Bytes`] slice of the buffer the frame was read from: decoding copies no
//! payload byte, and a `Frame` keeps that buffer's allocation alive for as long as it lives.

use bytes::Bytes;

/// One RESP2 or RESP3 value, as decoded by [`Decoder`](crate::Decoder) or to be written by
/// [`Frame::encode`].
///
/// Streamed aggregates (`*?`, `~?`, `%?`) decode to the same variants as their counted forms:
/// streaming is a transport detail. Streamed strings (`$?`) keep their chunks, so that decoding
/// them copies nothing; [`Frame::encode_streamed`] writes the streamed forms.
///
/// Equality treats every NaN double as equal to every other, so that a decoded frame compares
/// equal to the frame it was encoded from.
///
/// # Examples
/// ```
/// use bytes::BytesMut;
/// use redlock_resp::{Decoder, Frame};
///
/// let mut buf = BytesMut::from(&b"%1\r\n+role\r\n$6\r\nmaster\r\n"[..]);
/// let frame = Decoder::default().decode(&mut buf).unwrap().unwrap();
/// assert_eq!(
///     frame,
///     Frame::Map(vec![(Frame::Simple("role".into()), Frame::Bulk("master".into()))])
/// );
/// ```
#[derive(Debug, Clone)]
pub enum Frame {
    /// `+`: a simple string (never contains CR or LF).
    Simple(Bytes),
    /// `-`: a simple error; by convention its first word is the error code (`ERR`, `NOSCRIPT`).
    Error(Bytes),
    /// `:`: a signed 64-bit integer.
    Integer(i64),
    /// `$`: a binary-safe bulk string.
    Bulk(Bytes),
    /// `$-1`: the RESP2 null bulk string.
    NullBulk,
    /// `*-1`: the RESP2 null array.
    NullArray,
    /// `_`: the RESP3 null.
    Null,
    /// `#t` / `#f`: a RESP3 boolean.
    Boolean(bool),
    /// `,`: a RESP3 double, `inf`, `-inf` and `nan` included.
    Double(f64),
    /// `(`: a RESP3 big number, as its decimal digits (an optional `-`, then digits).
    BigNumber(Bytes),
    /// `!`: a RESP3 bulk error.
    BulkError(Bytes),
    /// `=`: a RESP3 verbatim string: a three-byte format (`txt`, `mkd`) and the text.
    Verbatim {
        /// The format, such as `*b"txt"`.
        format: [u8; 3],
        /// The text after `fmt:`.
        text: Bytes,
    },
    /// `*`: an array.
    Array(Vec<Frame>),
    /// `~`: a RESP3 set.
    Set(Vec<Frame>),
    /// `%`: a RESP3 map, as its pairs in wire order (keys may be of any type).
    Map(Vec<(Frame, Frame)>),
    /// `>`: a RESP3 push (out-of-band data); only ever at the top level.
    Push(Vec<Frame>),
    /// `|`: a RESP3 attribute and the value it is attached to.
    Attribute {
        /// The attribute's pairs.
        attributes: Vec<(Frame, Frame)>,
        /// The value the attribute annotates.
        value: Box<Frame>,
    },
    /// `$?`: a RESP3 streamed string, as its chunks (each non-empty).
    StreamedString(Vec<Bytes>),
}

impl Frame {
    /// The payload of a string-like frame (simple, bulk, verbatim text, simple or bulk error,
    /// big number); `None` for any other frame.
    pub fn as_bytes(&self) -> Option<&Bytes> {
        match self {
            Frame::Simple(b)
            | Frame::Error(b)
            | Frame::Bulk(b)
            | Frame::BigNumber(b)
            | Frame::BulkError(b)
            | Frame::Verbatim { text: b, .. } => Some(b),
            _ => None,
        }
    }

    /// Whether this is any of the three null forms (`$-1`, `*-1`, `_`).
    pub fn is_null(&self) -> bool {
        matches!(self, Frame::Null | Frame::NullBulk | Frame::NullArray)
    }

    /// Whether this is an error reply (simple `-` or bulk `!`).
    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_) | Frame::BulkError(_))
    }

    /// The value, seen through any attributes attached to it.
    pub fn without_attributes(&self) -> &Frame {
        let mut f = self;
        while let Frame::Attribute { value, .. } = f {
            f = value;
        }
        f
    }
}

impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        use Frame::*;
        match (self, other) {
            (Simple(a), Simple(b))
            | (Error(a), Error(b))
            | (Bulk(a), Bulk(b))
            | (BigNumber(a), BigNumber(b))
            | (BulkError(a), BulkError(b)) => a == b,
            (Integer(a), Integer(b)) => a == b,
            (NullBulk, NullBulk) | (NullArray, NullArray) | (Null, Null) => true,
            (Boolean(a), Boolean(b)) => a == b,
            (Double(a), Double(b)) => a == b || (a.is_nan() && b.is_nan()),
            (
                Verbatim {
                    format: f1,
                    text: t1,
                },
                Verbatim {
                    format: f2,
                    text: t2,
                },
            ) => f1 == f2 && t1 == t2,
            (Array(a), Array(b)) | (Set(a), Set(b)) | (Push(a), Push(b)) => a == b,
            (Map(a), Map(b)) => a == b,
            (
                Attribute {
                    attributes: a1,
                    value: v1,
                },
                Attribute {
                    attributes: a2,
                    value: v2,
                },
            ) => a1 == a2 && v1 == v2,
            (StreamedString(a), StreamedString(b)) => a == b,
            _ => false,
        }
    }
}
