//! Table tests for every frame type and every strictness rule, and properties (proptest) for
//! round trips and split-anywhere equivalence.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use crate::decode::{decode_all, parse_int};
use crate::{Decoder, ErrorKind, Frame, Limits};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Decodes exactly one frame that uses up the whole input.
fn one(input: &[u8]) -> Frame {
    let mut frames = decode_all(input, Limits::default())
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(input)));
    assert_eq!(frames.len(), 1, "{:?}", String::from_utf8_lossy(input));
    frames.pop().unwrap()
}

/// The error kind and offset decoding `input` ends with.
fn err(input: &[u8]) -> (ErrorKind, usize) {
    err_with(input, Limits::default())
}

fn err_with(input: &[u8], limits: Limits) -> (ErrorKind, usize) {
    match decode_all(input, limits) {
        Ok(f) => panic!(
            "{:?} decoded to {f:?}, expected an error",
            String::from_utf8_lossy(input)
        ),
        Err(e) => (e.kind(), e.offset()),
    }
}

/// Asserts the input is a valid prefix: no error, no frame.
fn incomplete(input: &[u8]) {
    let mut dec = Decoder::default();
    let mut buf = BytesMut::from(input);
    assert_eq!(
        dec.decode(&mut buf),
        Ok(None),
        "{:?}",
        String::from_utf8_lossy(input)
    );
    assert_eq!(&buf[..], input, "buffer untouched");
}

#[test]
fn every_scalar_type() {
    let cases: Vec<(&[u8], Frame)> = vec![
        (b"+OK\r\n", Frame::Simple(b("OK"))),
        (b"+\r\n", Frame::Simple(b(""))),
        (b"-ERR bad thing\r\n", Frame::Error(b("ERR bad thing"))),
        (b":0\r\n", Frame::Integer(0)),
        (b":-1\r\n", Frame::Integer(-1)),
        (b":9223372036854775807\r\n", Frame::Integer(i64::MAX)),
        (b":-9223372036854775808\r\n", Frame::Integer(i64::MIN)),
        (b"$0\r\n\r\n", Frame::Bulk(b(""))),
        (b"$6\r\nfoo\r\nb\r\n", Frame::Bulk(b("foo\r\nb"))),
        (b"$-1\r\n", Frame::NullBulk),
        (b"*-1\r\n", Frame::NullArray),
        (b"_\r\n", Frame::Null),
        (b"#t\r\n", Frame::Boolean(true)),
        (b"#f\r\n", Frame::Boolean(false)),
        (b",1.5\r\n", Frame::Double(1.5)),
        (b",-0.25\r\n", Frame::Double(-0.25)),
        (b",10\r\n", Frame::Double(10.0)),
        (b",1e3\r\n", Frame::Double(1000.0)),
        (b",1.5E-2\r\n", Frame::Double(0.015)),
        (b",2e+2\r\n", Frame::Double(200.0)),
        (b",inf\r\n", Frame::Double(f64::INFINITY)),
        (b",-inf\r\n", Frame::Double(f64::NEG_INFINITY)),
        (b",nan\r\n", Frame::Double(f64::NAN)),
        (
            b"(3492890328409238509324850943850943825024385\r\n",
            Frame::BigNumber(b("3492890328409238509324850943850943825024385")),
        ),
        (b"(-12\r\n", Frame::BigNumber(b("-12"))),
        (b"(0\r\n", Frame::BigNumber(b("0"))),
        (
            b"!21\r\nSYNTAX invalid syntax\r\n",
            Frame::BulkError(b("SYNTAX invalid syntax")),
        ),
        (
            b"=15\r\ntxt:Some string\r\n",
            Frame::Verbatim {
                format: *b"txt",
                text: b("Some string"),
            },
        ),
        (
            b"=4\r\nmkd:\r\n",
            Frame::Verbatim {
                format: *b"mkd",
                text: b(""),
            },
        ),
    ];
    for (input, want) in cases {
        assert_eq!(one(input), want, "{:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn every_libc_spelling_of_nan_is_a_nan() {
    for input in [
        &b",nan\r\n"[..],
        b",-nan\r\n",
        b",NAN\r\n",
        b",-NAN\r\n",
        b",NaN\r\n",
        b",nAn\r\n",
        b",nan()\r\n",
        b",nan(0x7ff8)\r\n",
        b",NAN(ind)\r\n",
        b",-nan(snan_1)\r\n",
    ] {
        match one(input) {
            Frame::Double(d) => assert!(d.is_nan(), "{:?}", String::from_utf8_lossy(input)),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }
    // Inside an aggregate, and split anywhere, it is the same.
    let whole = b"*2\r\n,-nan\r\n:1\r\n";
    for cut in 0..whole.len() {
        let mut d = Decoder::default();
        let mut buf = BytesMut::from(&whole[..cut]);
        assert_eq!(d.decode(&mut buf).unwrap(), None, "cut at {cut}");
        buf.extend_from_slice(&whole[cut..]);
        match d.decode(&mut buf).unwrap() {
            Some(Frame::Array(v)) => {
                assert!(
                    matches!(v[0], Frame::Double(x) if x.is_nan()),
                    "cut at {cut}"
                );
                assert_eq!(v[1], Frame::Integer(1));
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn every_aggregate_type() {
    let cases: Vec<(&[u8], Frame)> = vec![
        (b"*0\r\n", Frame::Array(vec![])),
        (
            b"*2\r\n:1\r\n$1\r\nx\r\n",
            Frame::Array(vec![Frame::Integer(1), Frame::Bulk(b("x"))]),
        ),
        (
            b"*2\r\n*1\r\n_\r\n*0\r\n",
            Frame::Array(vec![Frame::Array(vec![Frame::Null]), Frame::Array(vec![])]),
        ),
        (b"~1\r\n#t\r\n", Frame::Set(vec![Frame::Boolean(true)])),
        (
            b"%2\r\n+a\r\n:1\r\n*1\r\n:2\r\n_\r\n",
            Frame::Map(vec![
                (Frame::Simple(b("a")), Frame::Integer(1)),
                (Frame::Array(vec![Frame::Integer(2)]), Frame::Null),
            ]),
        ),
        (b"%0\r\n", Frame::Map(vec![])),
        (
            b">2\r\n+message\r\n$2\r\nhi\r\n",
            Frame::Push(vec![Frame::Simple(b("message")), Frame::Bulk(b("hi"))]),
        ),
        (
            b"|1\r\n+ttl\r\n:3\r\n+OK\r\n",
            Frame::Attribute {
                attributes: vec![(Frame::Simple(b("ttl")), Frame::Integer(3))],
                value: Box::new(Frame::Simple(b("OK"))),
            },
        ),
        (
            // An attribute inside an aggregate is not one of its elements.
            b"*2\r\n:1\r\n|1\r\n+k\r\n+v\r\n:2\r\n",
            Frame::Array(vec![
                Frame::Integer(1),
                Frame::Attribute {
                    attributes: vec![(Frame::Simple(b("k")), Frame::Simple(b("v")))],
                    value: Box::new(Frame::Integer(2)),
                },
            ]),
        ),
        (
            b"|1\r\n+k\r\n+v\r\n>1\r\n:1\r\n",
            Frame::Attribute {
                attributes: vec![(Frame::Simple(b("k")), Frame::Simple(b("v")))],
                value: Box::new(Frame::Push(vec![Frame::Integer(1)])),
            },
        ),
        (
            b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n",
            Frame::StreamedString(vec![b("Hell"), b("o wor"), b("d")]),
        ),
        (b"$?\r\n;0\r\n", Frame::StreamedString(vec![])),
        (
            b"*?\r\n:1\r\n:2\r\n.\r\n",
            Frame::Array(vec![Frame::Integer(1), Frame::Integer(2)]),
        ),
        (b"*?\r\n.\r\n", Frame::Array(vec![])),
        (
            b"~?\r\n*?\r\n.\r\n$?\r\n;1\r\na\r\n;0\r\n.\r\n",
            Frame::Set(vec![
                Frame::Array(vec![]),
                Frame::StreamedString(vec![b("a")]),
            ]),
        ),
        (
            b"%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n",
            Frame::Map(vec![
                (Frame::Simple(b("a")), Frame::Integer(1)),
                (Frame::Simple(b("b")), Frame::Integer(2)),
            ]),
        ),
        (
            b"*?\r\n|1\r\n+k\r\n+v\r\n:1\r\n.\r\n",
            Frame::Array(vec![Frame::Attribute {
                attributes: vec![(Frame::Simple(b("k")), Frame::Simple(b("v")))],
                value: Box::new(Frame::Integer(1)),
            }]),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(one(input), want, "{:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn integers_are_as_strict_as_string2ll() {
    for bad in [
        &b""[..],
        b"+1",
        b"01",
        b"-0",
        b"-01",
        b"-",
        b" 1",
        b"1 ",
        b"1a",
        b"0x10",
        b"9223372036854775808",
        b"-9223372036854775809",
        b"99999999999999999999",
        b"1.0",
    ] {
        assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        let mut frame = b":".to_vec();
        frame.extend_from_slice(bad);
        frame.extend_from_slice(b"\r\n");
        assert_eq!(err(&frame), (ErrorKind::InvalidInteger, 1));
        // The same rules hold for lengths and counts.
        frame[0] = b'*';
        assert_eq!(err(&frame).0, ErrorKind::InvalidInteger);
    }
    for (good, v) in [
        (&b"0"[..], 0),
        (b"10", 10),
        (b"-10", -10),
        (b"1234567890", 1234567890),
    ] {
        assert_eq!(parse_int(good), Some(v));
    }
}

#[test]
fn lengths_and_counts_reject_negatives() {
    assert_eq!(err(b"$-2\r\n"), (ErrorKind::InvalidLength(-2), 1));
    assert_eq!(err(b"*-2\r\n"), (ErrorKind::InvalidLength(-2), 1));
    // Only `$` and `*` have RESP2 null forms.
    for ty in [b'%', b'~', b'>', b'|', b'!', b'='] {
        let frame = [ty, b'-', b'1', b'\r', b'\n'];
        assert_eq!(
            err(&frame),
            (ErrorKind::InvalidLength(-1), 1),
            "{}",
            ty as char
        );
    }
    assert_eq!(err(b"$?\r\n;-1\r\n"), (ErrorKind::InvalidLength(-1), 5));
}

#[test]
fn lines_must_not_hold_cr_or_lf() {
    assert_eq!(err(b"+O\nK\r\n"), (ErrorKind::StrayLineBreak, 2));
    assert_eq!(err(b"-E\rR\r\n"), (ErrorKind::StrayLineBreak, 2));
    assert_eq!(err(b"+OK\n"), (ErrorKind::StrayLineBreak, 3));
    assert_eq!(err(b":1\n"), (ErrorKind::StrayLineBreak, 2));
    // A CR whose successor has not arrived is not an error yet.
    incomplete(b"+OK\r");
}

#[test]
fn bulk_payload_must_end_in_crlf() {
    assert_eq!(err(b"$3\r\nfooXY"), (ErrorKind::MissingCrlf, 7));
    assert_eq!(err(b"$3\r\nfoo\n\r"), (ErrorKind::MissingCrlf, 7));
    assert_eq!(err(b"$3\r\nfoo\rX"), (ErrorKind::MissingCrlf, 7));
    assert_eq!(err(b"!1\r\nxab"), (ErrorKind::MissingCrlf, 5));
    assert_eq!(err(b"$?\r\n;1\r\naXY"), (ErrorKind::MissingCrlf, 9));
    incomplete(b"$3\r\nfoo\r");
}

#[test]
fn null_bulk_is_not_a_streamed_string() {
    assert_eq!(one(b"$-1\r\n"), Frame::NullBulk);
    assert_eq!(one(b"$?\r\n;0\r\n"), Frame::StreamedString(vec![]));
    assert_eq!(err(b"$?1\r\n").0, ErrorKind::InvalidInteger);
    assert_eq!(err(b"$-?\r\n").0, ErrorKind::InvalidInteger);
}

#[test]
fn scalar_payload_rules() {
    assert_eq!(err(b"_x\r\n"), (ErrorKind::UnexpectedPayload, 1));
    for bad in [
        &b"#\r\n"[..],
        b"#T\r\n",
        b"#true\r\n",
        b"#tt\r\n",
        b"#1\r\n",
    ] {
        assert_eq!(err(bad), (ErrorKind::InvalidBoolean, 1));
    }
    for bad in [
        &b",\r\n"[..],
        b",1.\r\n",
        b",.5\r\n",
        b",1e\r\n",
        b",+1\r\n",
        b",inf \r\n",
        b",INF\r\n",
        b",infinity\r\n",
        b",nan \r\n",
        b",+nan\r\n",
        b",--nan\r\n",
        b",na\r\n",
        b",nana\r\n",
        b",nan(\r\n",
        b",nan()x\r\n",
        b",nan(a-b)\r\n",
        b",nan(a)(b)\r\n",
        b",infnan\r\n",
        b",1,5\r\n",
        b",- 1\r\n",
    ] {
        assert_eq!(err(bad), (ErrorKind::InvalidDouble, 1), "{bad:?}");
    }
    for bad in [
        &b"(\r\n"[..],
        b"(-\r\n",
        b"(+1\r\n",
        b"(01\r\n",
        b"(-0\r\n",
        b"(1.5\r\n",
    ] {
        assert_eq!(err(bad), (ErrorKind::InvalidBigNumber, 1), "{bad:?}");
    }
    assert_eq!(err(b"=3\r\ntxt\r\n"), (ErrorKind::InvalidVerbatim, 1));
    assert_eq!(err(b"=5\r\ntxt;x\r\n"), (ErrorKind::InvalidVerbatim, 7));
}

#[test]
fn unknown_type_bytes_are_named() {
    for ty in [b'a', b'0', b' ', b'\r', b'\n', 0u8, 0xff, b'@', b'&'] {
        assert_eq!(err(&[ty, b'\r', b'\n']), (ErrorKind::InvalidType(ty), 0));
    }
    // Reported on the first byte, without waiting for a line end.
    assert_eq!(err(b"GET"), (ErrorKind::InvalidType(b'G'), 0));
    // And inside aggregates, at the element's offset.
    assert_eq!(err(b"*2\r\n:1\r\nx"), (ErrorKind::InvalidType(b'x'), 8));
}

#[test]
fn stream_markers_out_of_place() {
    assert_eq!(err(b";1\r\na\r\n"), (ErrorKind::MisplacedChunk, 0));
    assert_eq!(err(b"*1\r\n;0\r\n"), (ErrorKind::MisplacedChunk, 4));
    assert_eq!(err(b"$?\r\n+a\r\n"), (ErrorKind::MisplacedChunk, 4));
    assert_eq!(err(b".\r\n"), (ErrorKind::MisplacedEnd, 0));
    assert_eq!(err(b"*1\r\n.\r\n"), (ErrorKind::MisplacedEnd, 4));
    assert_eq!(err(b"*?\r\n.x\r\n"), (ErrorKind::UnexpectedPayload, 5));
    // A streamed map carries whole pairs.
    assert_eq!(err(b"%?\r\n+k\r\n.\r\n"), (ErrorKind::MisplacedEnd, 8));
    // An attribute owes its value.
    assert_eq!(
        err(b"*?\r\n|1\r\n+k\r\n+v\r\n.\r\n"),
        (ErrorKind::MisplacedEnd, 16)
    );
    // Only strings, arrays, sets and maps stream.
    assert_eq!(err(b">?\r\n"), (ErrorKind::InvalidStream, 1));
    assert_eq!(err(b"|?\r\n"), (ErrorKind::InvalidStream, 1));
    assert_eq!(err(b"!?\r\n"), (ErrorKind::InvalidInteger, 1));
}

#[test]
fn push_only_at_top_level() {
    assert_eq!(err(b"*1\r\n>1\r\n:1\r\n"), (ErrorKind::NestedPush, 4));
    assert_eq!(err(b"%1\r\n>0\r\n:1\r\n"), (ErrorKind::NestedPush, 4));
    // Not even as an attribute's key.
    assert_eq!(err(b"|1\r\n>0\r\n:1\r\n:1\r\n"), (ErrorKind::NestedPush, 4));
}

#[test]
fn limit_on_bulk_length() {
    let lim = Limits::new().with_max_bulk_len(10);
    assert_eq!(one(b"$10\r\n0123456789\r\n"), Frame::Bulk(b("0123456789")));
    assert_eq!(
        err_with(b"$11\r\n", lim),
        (ErrorKind::BulkTooLong { len: 11, max: 10 }, 1)
    );
    // 2^40 declared with the default limit: refused at once, nothing reserved.
    assert_eq!(
        err(b"$1099511627776\r\n"),
        (
            ErrorKind::BulkTooLong {
                len: 1 << 40,
                max: Limits::DEFAULT_MAX_BULK_LEN
            },
            1
        )
    );
    // Streamed chunks: each, and their total.
    assert_eq!(
        err_with(b"$?\r\n;11\r\n", lim).0,
        ErrorKind::BulkTooLong { len: 11, max: 10 }
    );
    assert_eq!(
        err_with(b"$?\r\n;6\r\nabcdef\r\n;5\r\n", lim).0,
        ErrorKind::BulkTooLong { len: 11, max: 10 }
    );
}

#[test]
fn limit_on_elements() {
    let lim = Limits::new().with_max_elements(4);
    assert!(decode_all(b"*4\r\n_\r\n_\r\n_\r\n_\r\n", lim).is_ok());
    assert_eq!(
        err_with(b"*5\r\n", lim),
        (ErrorKind::TooManyElements { count: 5, max: 4 }, 1)
    );
    // Pairs count two each.
    assert_eq!(
        err_with(b"%3\r\n", lim),
        (ErrorKind::TooManyElements { count: 6, max: 4 }, 1)
    );
    assert_eq!(
        err_with(b"|3\r\n", lim),
        (ErrorKind::TooManyElements { count: 6, max: 4 }, 1)
    );
    // Streamed aggregates are counted as they arrive.
    assert_eq!(
        err_with(b"*?\r\n_\r\n_\r\n_\r\n_\r\n_\r\n", lim).0,
        ErrorKind::TooManyElements { count: 5, max: 4 }
    );
    assert_eq!(
        err_with(
            b"$?\r\n;1\r\na\r\n;1\r\na\r\n;1\r\na\r\n;1\r\na\r\n;1\r\n",
            lim
        )
        .0,
        ErrorKind::TooManyElements { count: 5, max: 4 }
    );
    // A huge declared count under the default limit is refused at once.
    assert_eq!(
        err(b"*9223372036854775807\r\n").0,
        ErrorKind::TooManyElements {
            count: i64::MAX as u64,
            max: Limits::DEFAULT_MAX_ELEMENTS
        }
    );
    assert_eq!(
        err(b"%9223372036854775807\r\n").0,
        ErrorKind::TooManyElements {
            count: (i64::MAX as u64) * 2,
            max: Limits::DEFAULT_MAX_ELEMENTS
        }
    );
}

#[test]
fn limit_on_depth_counts_every_aggregate_kind() {
    let lim = Limits::new().with_max_depth(2);
    assert!(decode_all(b"*1\r\n*1\r\n:1\r\n", lim).is_ok());
    assert!(decode_all(b"*1\r\n*0\r\n", lim).is_ok());
    for deep in [
        &b"*1\r\n*1\r\n*1\r\n:1\r\n"[..],
        b"*1\r\n*1\r\n*0\r\n",
        b"~1\r\n%1\r\n*0\r\n:1\r\n",
        b"|1\r\n+a\r\n+b\r\n*1\r\n*1\r\n:1\r\n",
        b"*?\r\n*1\r\n$?\r\n",
        b"%?\r\n|1\r\n*1\r\n",
    ] {
        assert_eq!(
            err_with(deep, lim).0,
            ErrorKind::TooDeep { max: 2 },
            "{:?}",
            String::from_utf8_lossy(deep)
        );
    }
    assert_eq!(
        err_with(b"*0\r\n", Limits::new().with_max_depth(0)).0,
        ErrorKind::TooDeep { max: 0 }
    );
    assert_eq!(
        Limits::new().with_max_depth(usize::MAX).max_depth(),
        Limits::MAX_DEPTH_CEILING
    );
}

#[test]
fn a_million_levels_fail_fast_without_recursion() {
    let input = b"*1\r\n".repeat(1_000_000);
    let (kind, offset) = err(&input);
    assert_eq!(
        kind,
        ErrorKind::TooDeep {
            max: Limits::DEFAULT_MAX_DEPTH
        }
    );
    assert_eq!(offset, 4 * Limits::DEFAULT_MAX_DEPTH);
    // At the deepest level allowed, the frame decodes (and drops) fine.
    let max = Limits::MAX_DEPTH_CEILING;
    let mut deep = b"*1\r\n".repeat(max - 1);
    deep.extend_from_slice(b"*0\r\n");
    let lim = Limits::new().with_max_depth(max);
    assert_eq!(decode_all(&deep, lim).map(|v| v.len()), Ok(1));
}

#[test]
fn limit_on_line_length() {
    let lim = Limits::new().with_max_line_len(8);
    assert_eq!(
        decode_all(b"+12345678\r\n", lim),
        Ok(vec![Frame::Simple(b("12345678"))])
    );
    assert_eq!(
        err_with(b"+123456789\r\n", lim),
        (ErrorKind::LineTooLong { max: 8 }, 0)
    );
    // An endless line is refused once it passes the limit, without waiting for its end.
    assert_eq!(
        err_with(b"+123456789", lim),
        (ErrorKind::LineTooLong { max: 8 }, 0)
    );
    let endless = vec![b'a'; Limits::DEFAULT_MAX_LINE_LEN + 1];
    let mut input = b"+".to_vec();
    input.extend_from_slice(&endless);
    assert_eq!(
        err(&input).0,
        ErrorKind::LineTooLong {
            max: Limits::DEFAULT_MAX_LINE_LEN
        }
    );
    // Headers are lines too.
    let mut header = b"*".to_vec();
    header.extend_from_slice(&[b'1'; 9]);
    assert_eq!(err_with(&header, lim).0, ErrorKind::LineTooLong { max: 8 });
}

#[test]
fn errors_poison_until_reset() {
    let mut dec = Decoder::default();
    let mut buf = BytesMut::from(&b"?\r\n+OK\r\n"[..]);
    assert_eq!(
        dec.decode(&mut buf).unwrap_err().kind(),
        ErrorKind::InvalidType(b'?')
    );
    assert_eq!(&buf[..], b"?\r\n+OK\r\n", "buffer untouched on error");
    let mut fresh = BytesMut::from(&b"+OK\r\n"[..]);
    assert_eq!(
        dec.decode(&mut fresh).unwrap_err().kind(),
        ErrorKind::Poisoned
    );
    dec.reset();
    assert_eq!(dec.decode(&mut fresh), Ok(Some(Frame::Simple(b("OK")))));
}

#[test]
fn partial_input_leaves_buffer_untouched_and_resumes() {
    let input = b"*3\r\n$5\r\nhello\r\n%1\r\n+k\r\n,2.5\r\n$?\r\n;2\r\nab\r\n;0\r\n";
    let mut dec = Decoder::default();
    let mut buf = BytesMut::new();
    for (i, &byte) in input.iter().enumerate() {
        buf.extend_from_slice(&[byte]);
        let got = dec.decode(&mut buf).unwrap();
        if i + 1 < input.len() {
            assert_eq!(got, None, "at {i}");
            assert_eq!(&buf[..], &input[..=i]);
            assert!(dec.is_mid_frame() || i == 0);
        } else {
            assert_eq!(got, Some(one(input)));
            assert!(buf.is_empty());
            assert!(!dec.is_mid_frame());
        }
    }
}

#[test]
fn pipelined_frames_come_out_in_order() {
    let frames = decode_all(
        b"+OK\r\n:1\r\n$-1\r\n*1\r\n_\r\n-NOSCRIPT x\r\n",
        Limits::default(),
    );
    assert_eq!(
        frames.unwrap(),
        vec![
            Frame::Simple(b("OK")),
            Frame::Integer(1),
            Frame::NullBulk,
            Frame::Array(vec![Frame::Null]),
            Frame::Error(b("NOSCRIPT x")),
        ]
    );
}

#[test]
fn payloads_are_slices_of_the_read_buffer() {
    let mut buf = BytesMut::from(&b"*2\r\n$5\r\nhello\r\n+world\r\n"[..]);
    let base = buf.as_ptr() as usize;
    let frame = Decoder::default().decode(&mut buf).unwrap().unwrap();
    let Frame::Array(items) = frame else {
        panic!("not an array")
    };
    assert_eq!(items[0].as_bytes().unwrap().as_ptr() as usize, base + 8);
    assert_eq!(items[1].as_bytes().unwrap().as_ptr() as usize, base + 16);
}

#[test]
fn big_bulk_in_small_pieces_is_not_rescanned() {
    // A 1 MiB bulk fed 7 bytes at a time: correct, and quick even in a debug build because
    // every call only compares the length that has arrived with the one announced.
    let payload = vec![b'x'; 1 << 20];
    let mut input = b"$1048576\r\n".to_vec();
    input.extend_from_slice(&payload);
    input.extend_from_slice(b"\r\n");
    let mut dec = Decoder::default();
    let mut buf = BytesMut::new();
    let mut out = None;
    for piece in input.chunks(7) {
        buf.extend_from_slice(piece);
        if let Some(f) = dec.decode(&mut buf).unwrap() {
            out = Some(f);
        }
    }
    assert_eq!(out, Some(Frame::Bulk(Bytes::from(payload))));
}

#[test]
fn contract_break_restarts_instead_of_panicking() {
    let mut dec = Decoder::default();
    let mut buf = BytesMut::from(&b"*2\r\n:1\r\n"[..]);
    assert_eq!(dec.decode(&mut buf), Ok(None));
    let mut other = BytesMut::from(&b":7\r\n"[..]);
    assert_eq!(dec.decode(&mut other), Ok(Some(Frame::Integer(7))));
}

// ---- properties -------------------------------------------------------------------------

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn arb_line() -> impl Strategy<Value = Bytes> {
    "[ -~]{0,16}".prop_map(|s| Bytes::from(s.into_bytes()))
}

fn arb_leaf() -> impl Strategy<Value = Frame> {
    prop_oneof![
        arb_line().prop_map(Frame::Simple),
        arb_line().prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        arb_bytes().prop_map(Frame::Bulk),
        Just(Frame::NullBulk),
        Just(Frame::NullArray),
        Just(Frame::Null),
        any::<bool>().prop_map(Frame::Boolean),
        any::<f64>().prop_map(Frame::Double),
        "-?[1-9][0-9]{0,40}|0".prop_map(|s| Frame::BigNumber(Bytes::from(s.into_bytes()))),
        arb_bytes().prop_map(Frame::BulkError),
        ("[a-z]{3}", arb_bytes()).prop_map(|(f, text)| Frame::Verbatim {
            format: f.as_bytes().try_into().unwrap(),
            text
        }),
        proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 1..8).prop_map(Bytes::from),
            0..4
        )
        .prop_map(Frame::StreamedString),
    ]
}

/// Frames of every type, nested a few levels, with pushes only at the top.
fn arb_frame() -> impl Strategy<Value = Frame> {
    let inner = arb_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Array),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Set),
            proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Frame::Map),
            (
                proptest::collection::vec((inner.clone(), inner.clone()), 0..3),
                inner
            )
                .prop_map(|(attributes, value)| Frame::Attribute {
                    attributes,
                    value: Box::new(value)
                }),
        ]
    });
    prop_oneof![
        4 => inner.clone(),
        1 => proptest::collection::vec(inner, 0..6).prop_map(Frame::Push),
    ]
}

#[test]
fn command_lengths_at_every_digit_boundary() {
    // The short path writes lengths digit by digit up to 999; the long path formats them.
    for len in [
        0, 1, 9, 10, 11, 99, 100, 101, 199, 200, 240, 999, 1000, 1001, 65_536,
    ] {
        let arg = vec![b'x'; len];
        let mut got = BytesMut::new();
        crate::encode_command(&mut got, &[b"GET", &arg]);
        let mut want = format!("*2\r\n$3\r\nGET\r\n${len}\r\n").into_bytes();
        want.extend_from_slice(&arg);
        want.extend_from_slice(b"\r\n");
        assert_eq!(&got[..], &want[..], "length {len}");
    }
}

fn encoded(f: &Frame, streamed: bool) -> Vec<u8> {
    let mut v = Vec::new();
    if streamed {
        f.encode_streamed(&mut v);
    } else {
        f.encode(&mut v);
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encode_then_decode_round_trips(f in arb_frame(), streamed in any::<bool>()) {
        let wire = encoded(&f, streamed);
        let back = decode_all(&wire, Limits::default()).unwrap();
        prop_assert_eq!(back, vec![f]);
    }

    #[test]
    fn split_anywhere_decodes_as_whole(
        frames in proptest::collection::vec(arb_frame(), 1..4),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut wire = Vec::new();
        for f in &frames {
            f.encode(&mut wire);
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        cuts.push(wire.len());
        cuts.sort_unstable();
        let mut dec = Decoder::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut at = 0;
        for cut in cuts {
            buf.extend_from_slice(&wire[at..cut]);
            at = cut;
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(out, frames);
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..256)) {
        let lim = Limits::new().with_max_depth(8).with_max_elements(64).with_max_bulk_len(64);
        let _ = decode_all(&input, lim);
    }

    #[test]
    fn encode_command_matches_the_plain_definition(
        args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20)
    ) {
        let mut want = format!("*{}\r\n", args.len()).into_bytes();
        for a in &args {
            want.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            want.extend_from_slice(a);
            want.extend_from_slice(b"\r\n");
        }
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let mut got = BytesMut::new();
        crate::encode_command(&mut got, &refs);
        prop_assert_eq!(&got[..], &want[..]);
    }

    #[test]
    fn whole_scalar_shortcut_agrees_with_the_state_machine(
        head in prop::sample::select(vec![b':', b'+', b'$', b'_', b'-', b'*']),
        first in proptest::collection::vec(prop::sample::select(b"0123456789-?OKx".to_vec()), 0..5),
        crlf in any::<(bool, bool)>(),
        payload in proptest::collection::vec(prop::sample::select(b"0123-OKx\r\n".to_vec()), 0..8),
        line in 0usize..8,
        bulk in 0usize..8,
    ) {
        // A line, mostly ended by CRLF, then a payload, mostly ended by CRLF.
        let mut input = vec![head];
        input.extend_from_slice(&first);
        if crlf.0 {
            input.extend_from_slice(b"\r\n");
        }
        input.extend_from_slice(&payload);
        if crlf.1 {
            input.extend_from_slice(b"\r\n");
        }
        let limits = Limits::new().with_max_line_len(line).with_max_bulk_len(bulk);
        let (shortcut, (stepwise, rest)) = crate::decode::shortcut_and_stepwise(&input, limits);
        // Wherever the shortcut takes a frame, the state machine takes the same one and
        // leaves the same bytes (elsewhere the state machine reads it, as before).
        if let Some((frame, left)) = shortcut {
            prop_assert_eq!(stepwise, Ok(Some(frame)));
            prop_assert_eq!(left, rest);
        }
    }

    #[test]
    fn integers_agree_with_std_on_canonical_forms(n in any::<i64>()) {
        prop_assert_eq!(parse_int(n.to_string().as_bytes()), Some(n));
    }
}
