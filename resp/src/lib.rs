// Module map (each module, its job):
//   decode   the incremental decoder (decode/line.rs: one line at a time)
//   encode   commands and frames to bytes
//   error    the typed error, with its byte offset
//   frame    Frame, the RESP2/RESP3 value
//   limits   the bounds a decoder enforces

//! A strict, incremental, zero-copy codec for RESP2 and RESP3, the Redis protocol.
//!
//! - [`Decoder`] turns bytes into [`Frame`]s. It takes a `BytesMut` that a socket reads into,
//!   answers "incomplete" (`Ok(None)`) without touching it until a whole frame has arrived,
//!   remembers its progress so no byte is scanned twice, and hands out payloads as `Bytes`
//!   slices of that buffer: nothing is copied.
//! - It is bounded by explicit [`Limits`] (bulk length, elements per aggregate, nesting depth,
//!   line length), never recurses on untrusted input, never reserves memory from a declared
//!   length, and never panics: any input yields a frame, "incomplete", or a typed [`Error`]
//!   naming the problem and its byte offset.
//! - It is as strict as Redis itself: integers and lengths parse the way Redis' `string2ll`
//!   does, and every CRLF is checked.
//! - [`encode_command`] and [`Frame::encode`] write into any `BufMut` without allocating.
//!
//! An error means the byte stream is desynchronised: drop the connection (and
//! [`reset`](Decoder::reset) the decoder before reusing it on a new one).
//!
//! # Examples
//! ```
//! use bytes::BytesMut;
//! use redlock_resp::{encode_command, Decoder, Frame};
//!
//! // What a client writes...
//! let mut out = BytesMut::new();
//! encode_command(&mut out, &[b"GET", b"lock:a"]);
//! assert_eq!(&out[..], b"*2\r\n$3\r\nGET\r\n$6\r\nlock:a\r\n");
//!
//! // ...and how it reads the reply, whichever way it is split.
//! let mut dec = Decoder::default();
//! let mut inbuf = BytesMut::from(&b"$5\r\nto"[..]);
//! assert_eq!(dec.decode(&mut inbuf)?, None);
//! inbuf.extend_from_slice(b"ken\r\n");
//! assert_eq!(dec.decode(&mut inbuf)?, Some(Frame::Bulk("token".into())));
//! # Ok::<(), redlock_resp::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod decode;
mod encode;
mod error;
mod frame;
mod limits;

pub use decode::Decoder;
pub use encode::{encode_command, IntBuf};
pub use error::{Error, ErrorKind};
pub use frame::Frame;
pub use limits::Limits;

#[cfg(test)]
mod tests;

/// The README's example, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
