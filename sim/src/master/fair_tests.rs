//! Unit tests of fair mode's side of the simulated master: subscriptions that go with their
//! connection and with a crash, and a hand-off that rings the line's head. (The commands and
//! scripts are held to a real server by `tests/model_vs_real.rs`.)

use bytes::{Bytes, BytesMut};
use redlock_mux::script;
use resp::{Decoder, Frame};

use super::{ConnId, Master};
use crate::profile::Profile;

fn call(m: &mut Master, conn: ConnId, args: &[&[u8]]) -> Vec<Frame> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, args);
    assert!(m.feed(conn, &out, 0));
    let mut buf = BytesMut::from(&m.take_output(conn)[..]);
    let mut dec = Decoder::default();
    let mut v = Vec::new();
    while let Some(f) = dec.decode(&mut buf).expect("valid RESP") {
        v.push(f);
    }
    v
}

fn subscribed(m: &mut Master, id: &str) -> ConnId {
    let c = m.connect();
    call(m, c, &[b"HELLO", b"3"]);
    let bell = format!("{}{id}", script::BELL_PREFIX);
    let confirmed = call(m, c, &[b"SUBSCRIBE", bell.as_bytes()]);
    let push = Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(b"subscribe")),
        Frame::Bulk(Bytes::from(bell)),
        Frame::Integer(1),
    ]);
    assert_eq!(confirmed, [push]);
    c
}

#[test]
fn subscriptions_go_with_their_connection_and_with_a_crash() {
    let mut m = Master::new(Profile::redis_7_0());
    let (a, b) = (subscribed(&mut m, "a"), subscribed(&mut m, "a"));
    let p = m.connect();
    let publish = |m: &mut Master| call(m, p, &[b"PUBLISH", b"redlock-mux:bell:a", b"t r"]);
    assert_eq!(publish(&mut m), [Frame::Integer(2)]);
    assert_eq!(
        call(&mut m, a, &[b"PING"]).len(),
        2,
        "the message, then PONG"
    );
    m.close(a);
    assert_eq!(publish(&mut m), [Frame::Integer(1)]);
    assert_eq!(
        call(&mut m, b, &[b"PING"]).len(),
        3,
        "two messages, then PONG"
    );
    m.crash(true);
    let p2 = m.connect();
    assert_eq!(
        call(&mut m, p2, &[b"PUBLISH", b"redlock-mux:bell:a", b"t r"]),
        [Frame::Integer(0)]
    );
}

#[test]
fn a_release_rings_the_head_of_the_line_and_reserves_the_resource_for_it() {
    let mut m = Master::new(Profile::redis_7_0());
    let w = subscribed(&mut m, "w");
    let h = m.connect();
    assert_eq!(
        call(&mut m, h, &[b"SET", b"r", b"tok", b"NX", b"PX", b"10000"]).len(),
        1
    );
    let wait = |m: &mut Master| {
        let (_, text) = script::FAIR[0];
        let args: [&[u8]; 10] = [
            b"EVAL",
            text.as_bytes(),
            b"2",
            b"r",
            b"redlock-mux:queue:r",
            b"w",
            b"100",
            b"1",
            b"3600000",
            b"10000",
        ];
        call(m, w, &args)
    };
    let joined = wait(&mut m);
    assert!(
        matches!(&joined[..], [Frame::Array(v)] if v[1] == Frame::Integer(1)),
        "{joined:?}"
    );
    let (_, text) = script::FAIR[2];
    let release: [&[u8]; 10] = [
        b"EVAL",
        text.as_bytes(),
        b"2",
        b"r",
        b"redlock-mux:queue:r",
        b"tok",
        b"100",
        b"h",
        b"1",
        b"0",
    ];
    assert_eq!(call(&mut m, h, &release), [Frame::Integer(1)]);
    let bell = call(&mut m, w, &[b"GET", b"r"]);
    let message = Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(b"message")),
        Frame::Bulk(Bytes::from_static(b"redlock-mux:bell:w")),
        Frame::Bulk(Bytes::from_static(b"tok r")),
    ]);
    let reserved = Frame::Bulk(Bytes::from_static(b"redlock-mux:reserved:w"));
    assert_eq!(bell, [message, reserved]);
    // Reserved for it: claim at once, and (rung before this wait) it does not join again.
    assert_eq!(
        wait(&mut m),
        [Frame::Array(vec![Frame::Integer(-3), Frame::Integer(0)])]
    );
}
