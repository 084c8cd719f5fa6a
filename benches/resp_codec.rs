//! The `resp` codec against the `redis-protocol` crate, on the same inputs in the same run.
//!
//! Decode: a realistic reply mix (with and without one 64 KiB bulk, which otherwise dominates
//! the byte count), decoded frame by frame out of one `BytesMut` as a client reads it. Encode:
//! the two commands redlock-mux sends on its hot path.
//!
//! Run: `cargo bench --manifest-path benches/Cargo.toml --bench resp_codec`.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use redis_protocol::{resp2, resp3};

const TOKEN: &[u8] = b"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b";
const SHA: &[u8] = b"cf0e94b2e9ffc7e04395cf88f7583fc309985910";

/// Replies a lock client sees, plus a few RESP3 shapes; `big` adds one 64 KiB bulk. RESP3
/// only: a RESP3 server sends its null as `_` (redis-protocol's RESP3 decoder refuses the
/// RESP2 `$-1`, which the RESP2 group below covers).
fn mix(big: bool) -> Vec<u8> {
    let bulk40 = |out: &mut Vec<u8>| {
        out.extend_from_slice(b"$40\r\n");
        out.extend_from_slice(TOKEN);
        out.extend_from_slice(b"\r\n");
    };
    let mut out = Vec::new();
    for _ in 0..8 {
        out.extend_from_slice(b"+OK\r\n:1\r\n_\r\n#t\r\n:0\r\n");
        bulk40(&mut out);
        out.extend_from_slice(b"*3\r\n");
        bulk40(&mut out);
        out.extend_from_slice(b":5\r\n+OK\r\n");
        out.extend_from_slice(b"%2\r\n+server\r\n$5\r\nredis\r\n+proto\r\n:3\r\n");
        out.extend_from_slice(b"-NOSCRIPT No matching script. Please use EVAL.\r\n");
    }
    if big {
        out.extend_from_slice(b"$65536\r\n");
        out.extend(std::iter::repeat_n(b'x', 65536));
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// How many top-level frames `input` holds.
fn count_frames(input: &[u8]) -> usize {
    let mut dec = resp::Decoder::default();
    let mut buf = BytesMut::from(input);
    let mut n = 0;
    while dec.decode(&mut buf).unwrap().is_some() {
        n += 1;
    }
    assert!(buf.is_empty());
    n
}

fn decode_ours(input: &[u8]) -> BytesMut {
    BytesMut::from(input)
}

fn bench_decode(c: &mut Criterion) {
    for (name, input) in [("mix", mix(true)), ("small_replies", mix(false))] {
        let mut g = c.benchmark_group(format!("decode_{name}"));
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_function("resp", |b| {
            let mut dec = resp::Decoder::default();
            b.iter_batched_ref(
                || decode_ours(&input),
                |buf| {
                    let mut n = 0;
                    while let Some(f) = dec.decode(buf).unwrap() {
                        black_box(&f);
                        n += 1;
                    }
                    n
                },
                BatchSize::SmallInput,
            )
        });
        g.bench_function("redis_protocol_resp3", |b| {
            b.iter_batched_ref(
                || decode_ours(&input),
                |buf| {
                    let mut n = 0;
                    while let Some(f) = resp3::decode::complete::decode_bytes_mut(buf).unwrap() {
                        black_box(&f);
                        n += 1;
                    }
                    n
                },
                BatchSize::SmallInput,
            )
        });
        let frames = count_frames(&input);
        g.bench_function("redis_rs", |b| {
            b.iter(|| {
                // redis-rs reads from any `Read` (buffering ahead of the value it returns)
                // and copies into owned values by design.
                let mut parser = redis::Parser::new();
                let mut rest: &[u8] = &input;
                for _ in 0..frames {
                    black_box(parser.parse_value(&mut rest).unwrap());
                }
            })
        });
        g.finish();
    }
    // RESP2 only (no `_`, no map), so redis-protocol's faster RESP2 decoder can run too.
    let resp2_input: Vec<u8> = {
        let mut out = Vec::new();
        for _ in 0..8 {
            out.extend_from_slice(b"+OK\r\n:1\r\n$-1\r\n:0\r\n$40\r\n");
            out.extend_from_slice(TOKEN);
            out.extend_from_slice(b"\r\n*2\r\n:5\r\n+OK\r\n-NOSCRIPT No matching script.\r\n");
        }
        out
    };
    let mut g = c.benchmark_group("decode_resp2_replies");
    g.throughput(Throughput::Bytes(resp2_input.len() as u64));
    g.bench_function("resp", |b| {
        let mut dec = resp::Decoder::default();
        b.iter_batched_ref(
            || decode_ours(&resp2_input),
            |buf| {
                while let Some(f) = dec.decode(buf).unwrap() {
                    black_box(&f);
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("redis_protocol_resp2", |b| {
        b.iter_batched_ref(
            || decode_ours(&resp2_input),
            |buf| {
                while let Some(f) = resp2::decode::decode_bytes_mut(buf).unwrap() {
                    black_box(&f);
                }
            },
            BatchSize::SmallInput,
        )
    });
    let frames = count_frames(&resp2_input);
    g.bench_function("redis_rs", |b| {
        b.iter(|| {
            let mut parser = redis::Parser::new();
            let mut rest: &[u8] = &resp2_input;
            for _ in 0..frames {
                black_box(parser.parse_value(&mut rest).unwrap());
            }
        })
    });
    g.finish();
}

fn bench_encode(c: &mut Criterion) {
    let set: [&[u8]; 6] = [b"SET", b"lock:orders", TOKEN, b"NX", b"PX", b"30000"];
    let evalsha: [&[u8]; 5] = [b"EVALSHA", SHA, b"1", b"lock:orders", TOKEN];
    for (name, args) in [("set_nx_px", &set[..]), ("evalsha", &evalsha[..])] {
        let mut g = c.benchmark_group(format!("encode_{name}"));
        let mut probe = Vec::new();
        resp::encode_command(&mut probe, args);
        g.throughput(Throughput::Bytes(probe.len() as u64));
        let mut buf = BytesMut::with_capacity(4096);
        g.bench_function("resp", |b| {
            b.iter(|| {
                buf.clear();
                if name == "set_nx_px" {
                    // As the lock client does it: the ttl formatted on the stack.
                    let mut ttl = resp::IntBuf::new();
                    let ttl = ttl.format(black_box(30_000));
                    resp::encode_command(
                        &mut buf,
                        &[args[0], args[1], args[2], args[3], args[4], ttl],
                    );
                } else {
                    resp::encode_command(&mut buf, black_box(args));
                }
                black_box(&buf);
            })
        });
        g.bench_function("redis_protocol", |b| {
            b.iter(|| {
                buf.clear();
                let ttl;
                let mut items: Vec<resp2::types::BorrowedFrame> = black_box(args)
                    .iter()
                    .map(|a| resp2::types::BorrowedFrame::BulkString(a))
                    .collect();
                if name == "set_nx_px" {
                    ttl = black_box(30_000u64).to_string();
                    items[5] = resp2::types::BorrowedFrame::BulkString(ttl.as_bytes());
                }
                let frame = resp2::types::BorrowedFrame::Array(&items);
                resp2::encode::extend_encode_borrowed(&mut buf, &frame, false).unwrap();
                black_box(&buf);
            })
        });
        assert_eq!(&buf[..], &probe[..], "both encoders write the same bytes");
        g.finish();
    }
}

criterion_group!(benches, bench_decode, bench_encode);
criterion_main!(benches);
