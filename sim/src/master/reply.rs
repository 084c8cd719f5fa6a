//! A reply, written in the protocol of the connection it goes to.

use bytes::{Bytes, BytesMut};
use resp::Frame;

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
    /// RESP2 `$-1`, RESP3 `_`.
    Null,
    /// `*n ...`.
    Array(Vec<Reply>),
    /// A RESP3 map; in RESP2 the flat array of its names and values.
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// `+OK`.
    pub(crate) const OK: Reply = Reply::Simple("OK");

    /// An error reply.
    pub(crate) fn err(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// A bulk string of `s`.
    pub(crate) fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(s.as_ref()))
    }

    /// The frame this reply is in the protocol `resp3` or RESP2.
    pub(crate) fn to_frame(&self, resp3: bool) -> Frame {
        match self {
            Reply::Simple(s) => Frame::Simple(Bytes::from_static(s.as_bytes())),
            Reply::Error(m) => Frame::Error(Bytes::from(m.replace(['\r', '\n'], " "))),
            Reply::Int(n) => Frame::Integer(*n),
            Reply::Bulk(b) => Frame::Bulk(b.clone()),
            Reply::Null if resp3 => Frame::Null,
            Reply::Null => Frame::NullBulk,
            Reply::Array(items) => Frame::Array(items.iter().map(|r| r.to_frame(resp3)).collect()),
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

    /// Writes the reply in the protocol `resp3` or RESP2.
    pub(crate) fn encode(&self, resp3: bool, out: &mut BytesMut) {
        self.to_frame(resp3).encode(out);
    }
}

/// Writes the invalidation push for `key` (`>2 invalidate [key]`), RESP3 only.
pub(crate) fn encode_invalidation(key: &Bytes, out: &mut BytesMut) {
    Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(b"invalidate")),
        Frame::Array(vec![Frame::Bulk(key.clone())]),
    ])
    .encode(out);
}
