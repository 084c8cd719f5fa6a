//! Counts heap allocations with a global allocator: decoding a non-aggregate reply and
//! encoding a command allocate nothing once the read buffer is in its steady state.

use bytes::BytesMut;
use redlock_resp::{encode_command, Decoder, Frame, IntBuf};

use testkit::counting_alloc;

#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

use counting_alloc::allocations;

const SCALARS: &[&[u8]] = &[
    b"+OK\r\n",
    b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
    b":1\r\n",
    b":-1\r\n",
    b"$-1\r\n",
    b"*-1\r\n",
    b"_\r\n",
    b"#t\r\n",
    b",3.25\r\n",
    b"(12345678901234567890\r\n",
    b"$40\r\n0123456789012345678901234567890123456789\r\n",
    b"!10\r\nERR denied\r\n",
    b"=7\r\ntxt:abc\r\n",
    b"*0\r\n",
    b"%0\r\n",
];

#[test]
fn decoding_a_non_aggregate_reply_allocates_nothing() {
    let mut dec = Decoder::default();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    // Warm-up: the first split of a fresh BytesMut turns its storage into a shared one. (`+OK`
    // is not split off: it decodes to a static string.)
    buf.extend_from_slice(b"$2\r\nhi\r\n");
    dec.decode(&mut buf).unwrap().unwrap();
    for &reply in SCALARS {
        for split in [reply.len(), reply.len() / 2, 1] {
            let (frame, n) = allocations(|| {
                buf.extend_from_slice(&reply[..split]);
                let first = dec.decode(&mut buf).unwrap();
                buf.extend_from_slice(&reply[split..]);
                first.or_else(|| dec.decode(&mut buf).unwrap())
            });
            assert!(frame.is_some(), "{:?}", String::from_utf8_lossy(reply));
            assert_eq!(
                n,
                0,
                "decoding {:?} (split at {split}) allocated",
                String::from_utf8_lossy(reply)
            );
            let (_, n) = allocations(|| drop(frame));
            assert_eq!(n, 0);
        }
    }
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the two tests above against a counter that never counts.
    let mut buf = BytesMut::from(&b"*1\r\n:1\r\n"[..]);
    let (frame, n) = allocations(|| Decoder::default().decode(&mut buf).unwrap());
    assert!(frame.is_some());
    assert!(n > 0, "an array's Vec must be counted");
}

#[test]
fn encoding_a_command_allocates_nothing() {
    let mut out = BytesMut::with_capacity(4096);
    let sha = b"cf0e94b2e9ffc7e04395cf88f7583fc309985910";
    let (_, n) = allocations(|| {
        let mut ttl = IntBuf::new();
        encode_command(
            &mut out,
            &[
                b"SET",
                b"lock:orders",
                b"0123456789abcdef0123456789abcdef01234567",
                b"NX",
                b"PX",
                ttl.format(30_000),
            ],
        );
        encode_command(
            &mut out,
            &[b"EVALSHA", sha, b"1", b"lock:orders", b"0123456789abcdef"],
        );
        Frame::Integer(42).encode(&mut out);
        Frame::Double(0.5).encode(&mut out);
    });
    assert_eq!(n, 0, "encoding allocated");
    assert!(out.starts_with(b"*6\r\n$3\r\nSET\r\n"));
}
