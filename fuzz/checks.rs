//! The properties the fuzz targets check, one function per target.
//!
//! This file is compiled twice: into the cargo-fuzz targets (`fuzz_targets/*.rs`), and into
//! `resp/tests/corpus.rs`, which replays every committed corpus and regression input under
//! `cargo test`. A property fails by panicking, which is what libFuzzer reports as a crash.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use resp::{Decoder, Error, Frame, Limits};

/// Tight limits, so that the fuzzer reaches every limit with short inputs.
pub fn tight() -> Limits {
    Limits::new()
        .with_max_depth(16)
        .with_max_elements(64)
        .with_max_bulk_len(1024)
        .with_max_line_len(128)
}

/// What decoding a byte stream to its end produced.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub frames: Vec<Frame>,
    pub error: Option<Error>,
    /// Bytes not decoded: a trailing partial frame, or everything from the frame with the
    /// error on (including input not fed yet when the error was found).
    pub left: Vec<u8>,
}

/// Decodes `pieces` fed one after the other into one buffer, draining frames after each.
pub fn decode_pieces<'a>(pieces: impl IntoIterator<Item = &'a [u8]>, limits: Limits) -> Outcome {
    let mut dec = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut pieces = pieces.into_iter();
    while let Some(piece) = pieces.next() {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.clone();
            match dec.decode(&mut buf) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => {
                    assert_eq!(buf, before, "Ok(None) must leave the buffer as it was");
                    break;
                }
                Err(error) => {
                    assert_eq!(buf, before, "an error must leave the buffer as it was");
                    let mut left = buf.to_vec();
                    pieces.for_each(|p| left.extend_from_slice(p));
                    return Outcome {
                        frames,
                        error: Some(error),
                        left,
                    };
                }
            }
        }
    }
    Outcome {
        frames,
        error: None,
        left: buf.to_vec(),
    }
}

fn encode(f: &Frame, streamed: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if streamed {
        f.encode_streamed(&mut out);
    } else {
        f.encode(&mut out);
    }
    out
}

/// Target `decode`: arbitrary bytes under tight limits never panic, and every frame that
/// comes out encodes back into bytes that decode to the same frame.
pub fn check_decode(data: &[u8]) {
    let out = decode_pieces([data], tight());
    for f in &out.frames {
        let wire = encode(f, false);
        let back = decode_pieces([&wire[..]], tight());
        assert_eq!(back.error, None, "re-encoded {f:?}");
        assert!(back.left.is_empty());
        assert_eq!(back.frames.len(), 1);
        assert_eq!(&back.frames[0], f);
    }
}

/// Target `split`: the first two bytes seed the piece sizes (1 to 16 bytes); the rest decoded
/// in those pieces gives exactly what it gives whole: the same frames, the same error at the
/// same offset, the same bytes left over.
pub fn check_split(data: &[u8]) {
    let (seed, input) = match data {
        [a, b, rest @ ..] => (u16::from_le_bytes([*a, *b]), rest),
        _ => return,
    };
    let whole = decode_pieces([input], tight());
    let mut state = u32::from(seed) | 1;
    let mut pieces = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let n = (((state >> 16) % 16) as usize + 1).min(rest.len());
        let (piece, tail) = rest.split_at(n);
        pieces.push(piece);
        rest = tail;
    }
    let split = decode_pieces(pieces, tight());
    assert_eq!(split, whole);
}

/// Target `roundtrip`: a frame built from the bytes encodes (counted and streamed forms) and
/// decodes back to itself, whole and a byte at a time.
pub fn check_roundtrip(data: &[u8]) {
    let mut src = Source(data);
    let frame = src.frame(0);
    for streamed in [false, true] {
        let wire = encode(&frame, streamed);
        let whole = decode_pieces([&wire[..]], Limits::default());
        assert_eq!(whole.error, None, "{frame:?}");
        assert!(whole.left.is_empty());
        assert_eq!(whole.frames, std::slice::from_ref(&frame));
        let bytewise = decode_pieces(wire.chunks(1), Limits::default());
        assert_eq!(bytewise, whole);
    }
}

/// Builds frames from fuzzer bytes; runs out gracefully (zeros) when they do.
struct Source<'a>(&'a [u8]);

impl Source<'_> {
    const MAX_DEPTH: usize = 6;

    fn byte(&mut self) -> u8 {
        match self.0 {
            [b, rest @ ..] => {
                self.0 = rest;
                *b
            }
            [] => 0,
        }
    }

    fn take(&mut self, max: usize) -> &[u8] {
        let n = (self.byte() as usize % (max + 1)).min(self.0.len());
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        head
    }

    fn bytes(&mut self, max: usize) -> Bytes {
        Bytes::copy_from_slice(self.take(max))
    }

    /// A line without CR or LF.
    fn line(&mut self) -> Bytes {
        let v: Vec<u8> = self
            .take(24)
            .iter()
            .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c })
            .collect();
        Bytes::from(v)
    }

    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..8 {
            v = (v << 8) | u64::from(self.byte());
        }
        v
    }

    fn big_number(&mut self) -> Bytes {
        let neg = self.byte() & 1 == 1;
        let digits: Vec<u8> = self.take(40).iter().map(|c| b'0' + c % 10).collect();
        let digits = match digits.iter().position(|&d| d != b'0') {
            Some(i) => &digits[i..],
            None => &b"0"[..],
        };
        let mut v = Vec::new();
        if neg && digits != b"0" {
            v.push(b'-');
        }
        v.extend_from_slice(digits);
        Bytes::from(v)
    }

    fn items(&mut self, depth: usize) -> Vec<Frame> {
        let n = self.byte() % 5;
        (0..n).map(|_| self.frame(depth + 1)).collect()
    }

    fn pairs(&mut self, depth: usize) -> Vec<(Frame, Frame)> {
        let n = self.byte() % 4;
        (0..n)
            .map(|_| (self.frame(depth + 1), self.frame(depth + 1)))
            .collect()
    }

    fn frame(&mut self, depth: usize) -> Frame {
        let kinds = if depth >= Self::MAX_DEPTH { 13 } else { 19 };
        match self.byte() % kinds {
            0 => Frame::Simple(self.line()),
            1 => Frame::Error(self.line()),
            2 => Frame::Integer(self.u64() as i64),
            3 => Frame::Bulk(self.bytes(64)),
            4 => Frame::NullBulk,
            5 => Frame::NullArray,
            6 => Frame::Null,
            7 => Frame::Boolean(self.byte() & 1 == 1),
            8 => Frame::Double(f64::from_bits(self.u64())),
            9 => Frame::BigNumber(self.big_number()),
            10 => Frame::BulkError(self.bytes(64)),
            11 => Frame::Verbatim {
                format: [self.byte(), self.byte(), self.byte()],
                text: self.bytes(64),
            },
            12 => {
                let n = self.byte() % 4;
                Frame::StreamedString(
                    (0..n)
                        .map(|_| self.bytes(16))
                        .filter(|c| !c.is_empty())
                        .collect(),
                )
            }
            13 => Frame::Array(self.items(depth)),
            14 => Frame::Set(self.items(depth)),
            15 => Frame::Map(self.pairs(depth)),
            16 if depth == 0 => Frame::Push(self.items(depth)),
            16 => Frame::Array(self.items(depth)),
            17 => Frame::Attribute {
                attributes: self.pairs(depth),
                value: Box::new(self.frame(depth + 1)),
            },
            _ => Frame::Set(self.items(depth)),
        }
    }
}
