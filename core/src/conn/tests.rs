//! The connection's FIFO, handshake, pushes, sentinel and resends, without sockets.

use super::*;
use crate::command::{Command, Form, OpKind};
use crate::config::NodeAddr;
use crate::lock::Name;

/// A small limit, for the tests.
const MAX_OWED: usize = 64;
/// The node timeout the tests' connections are built with.
const OVERDUE: Duration = Duration::from_millis(50);
use crate::Token;

fn addr(s: &str) -> NodeAddr {
    NodeAddr::parse(s).unwrap()
}

fn feed(c: &mut Conn<u64>, bytes: &[u8]) {
    c.received(bytes);
}

/// A connection opened with no login, its script preloads already answered.
fn open(c: &mut Conn<u64>) {
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, false);
    feed(c, &b"$3\r\nsha\r\n".repeat(crate::script::ALL.len()));
}

#[test]
fn late_replies_are_matched_to_their_own_operation() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    open(&mut c);
    c.queue(1, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
        .unwrap();
    c.queue(2, Instant::now(), |b| b.put_slice(b"y"), How::Plain)
        .unwrap();
    feed(&mut c, b":0\r\n:1\r\n");
    assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(0))));
    assert_eq!(c.next_reply().unwrap(), Some((2, Frame::Integer(1))));
    assert_eq!(c.next_reply().unwrap(), None);
    feed(&mut c, b"+OK\r\n");
    assert_eq!(c.next_reply(), Err(ConnError::Unsolicited));
}

/// RESP3 pushes between replies, fed split at every byte: every reply goes to its own
/// operation in order, no push is ever taken for a reply, and every invalidation is kept.
#[test]
fn pushes_interleaved_between_replies_are_never_taken_for_replies_at_any_split() {
    let push_a = &b">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\nres1\r\n"[..];
    let push_flush = &b">2\r\n$10\r\ninvalidate\r\n_\r\n"[..];
    let push_other = &b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"[..];
    let push_two = &b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\nb\r\n+c\r\n"[..];
    let key = |k: &str| Invalidated::Key(bytes::Bytes::copy_from_slice(k.as_bytes()));
    let stream = |flush: &[u8]| -> Vec<u8> {
        [
            push_a,
            b"+OK\r\n",
            push_other,
            push_two,
            b"_\r\n",
            b":-2\r\n",
            flush,
            b"%1\r\n+k\r\n:1\r\n",
            push_a,
        ]
        .concat()
    };
    for flush in [&b""[..], push_flush] {
        let stream = stream(flush);
        for split in 0..=stream.len() {
            let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
            open(&mut c);
            for tag in 1..=4 {
                c.queue(tag, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
                    .unwrap();
            }
            let mut replies = Vec::new();
            let mut pushed = Vec::new();
            for part in [&stream[..split], &stream[split..]] {
                feed(&mut c, part);
                while let Some((tag, frame)) = c.next_reply().unwrap() {
                    replies.push((tag, frame));
                }
                pushed.extend(c.take_invalidated().unwrap_or_default());
            }
            let tags: Vec<u64> = replies.iter().map(|(t, _)| *t).collect();
            assert_eq!(tags, [1, 2, 3, 4], "split at {split}");
            assert_eq!(replies[0].1, Frame::Simple("OK".into()), "split at {split}");
            assert_eq!(replies[1].1, Frame::Null, "split at {split}");
            assert_eq!(replies[2].1, Frame::Integer(-2), "split at {split}");
            assert!(matches!(replies[3].1, Frame::Map(_)), "split at {split}");
            if flush.is_empty() {
                assert_eq!(
                    pushed,
                    [key("res1"), key("b"), key("c"), key("res1")],
                    "split at {split}"
                );
            } else {
                // A flush says everything changed: what comes beside it in the same look
                // is folded into it; nothing is lost.
                assert!(pushed.contains(&Invalidated::All), "split at {split}");
            }
            assert!(c.next_reply().unwrap().is_none());
        }
    }
}

/// A flood of invalidations costs a bounded list: it collapses into `All`.
#[test]
fn a_flood_of_pushes_collapses_into_one_invalidation_of_everything() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    open(&mut c);
    let one = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";
    feed(&mut c, &one.repeat(10_000));
    assert!(c.next_reply().unwrap().is_none());
    assert_eq!(c.take_invalidated(), Some(vec![Invalidated::All]));
    assert_eq!(c.take_invalidated(), None);
}

/// With wake-ups on, the connection asks for RESP3, and turns tracking on only once the
/// server has agreed (a RESP2 connection could not tell a push from a reply); a server
/// that refuses `HELLO 3` leaves the connection without tracking, and working.
#[test]
fn tracking_is_asked_for_only_after_the_server_agrees_to_resp3() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    assert!(c.out.starts_with(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"));
    assert!(!contains(&c.out, b"TRACKING"));
    c.out.clear();
    feed(
        &mut c,
        b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n",
    );
    assert!(c.next_reply().unwrap().is_none());
    assert!(contains(
        &c.out,
        b"$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n"
    ));
    assert!(!c.tracking());
    c.queue(5, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
        .unwrap();
    let mut replies = b"$3\r\nsha\r\n".repeat(crate::script::ALL.len());
    replies.extend(b"+OK\r\n:7\r\n");
    feed(&mut c, &replies);
    assert_eq!(c.next_reply().unwrap(), Some((5, Frame::Integer(7))));
    assert!(c.tracking());

    // A server (or ACL) without HELLO: no tracking asked, replies still in step.
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    c.out.clear();
    c.queue(6, Instant::now(), |b| b.put_slice(b"x"), How::Plain)
        .unwrap();
    let mut replies =
        b"-NOPERM this user has no permissions to run the 'hello' command\r\n".to_vec();
    replies.extend(b"$3\r\nsha\r\n".repeat(crate::script::ALL.len()));
    replies.extend(b":1\r\n");
    feed(&mut c, &replies);
    assert_eq!(c.next_reply().unwrap(), Some((6, Frame::Integer(1))));
    assert!(!c.tracking());
    assert!(!contains(&c.out, b"TRACKING"));
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn handshake_is_sent_first_and_its_errors_fail_the_connection() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.opened(&addr("redis://u:p@127.0.0.1:1/2"), Scripts::Eval, false);
    assert!(c.out.starts_with(
        b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n"
    ));
    c.queue(9, Instant::now(), |b| b.put_slice(b"z"), How::Plain)
        .unwrap();
    // A failed preload is ignored; the EVAL fallback covers it.
    let mut replies = b"+OK\r\n+OK\r\n-ERR no scripts\r\n".to_vec();
    replies.extend(b"$3\r\nsha\r\n".repeat(crate::script::ALL.len() - 1));
    replies.extend(b":1\r\n");
    feed(&mut c, &replies);
    assert_eq!(c.next_reply().unwrap(), Some((9, Frame::Integer(1))));
    c.opened(&addr("redis://:bad@127.0.0.1:1"), Scripts::Eval, false);
    feed(&mut c, b"-WRONGPASS invalid password\r\n");
    assert_eq!(
        c.next_reply(),
        Err(ConnError::Handshake("WRONGPASS invalid password".into()))
    );
}

#[test]
fn protocol_errors_and_pushes() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    open(&mut c);
    c.queue(1, Instant::now(), |_| {}, How::Plain).unwrap();
    feed(&mut c, b">2\r\n+invalidate\r\n_\r\n:1\r\n");
    assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
    c.queue(2, Instant::now(), |_| {}, How::Plain).unwrap();
    feed(&mut c, b"$1099511627776\r\n");
    assert!(matches!(
        c.next_reply(),
        Err(ConnError::Protocol(resp::ErrorKind::BulkTooLong { .. }))
    ));
}

#[test]
fn too_many_owed_is_stuck() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    open(&mut c);
    let mut queued = 0;
    while c.queue(queued, Instant::now(), |_| {}, How::Plain).is_ok() {
        queued += 1;
        assert!(queued <= MAX_OWED as u64);
    }
    // Some of the places are the preloads'.
    assert_eq!(queued, (MAX_OWED - crate::script::ALL.len()) as u64);
    assert_eq!(
        c.queue(99, Instant::now(), |_| {}, How::Plain),
        Err((ConnError::Stuck, 99))
    );
}

#[test]
fn backoff_doubles_and_resets_after_a_healthy_reply() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    let t = Instant::now();
    assert!(c.may_connect(t));
    let _ = c.failed(t);
    assert!(c.may_connect(t), "first retry is immediate");
    let _ = c.failed(t);
    assert!(!c.may_connect(t));
    assert!(c.may_connect(t + BACKOFF_MIN));
    for _ in 0..20 {
        let _ = c.failed(t);
    }
    assert!(c.may_connect(t + BACKOFF_MAX));
    open(&mut c);
    c.queue(1, Instant::now(), |_| {}, How::Plain).unwrap();
    feed(&mut c, b":1\r\n");
    c.next_reply().unwrap();
    let _ = c.failed(t);
    assert!(c.may_connect(t));
}

#[test]
fn a_reply_owed_past_the_limit_makes_the_connection_stale() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    open(&mut c);
    let t = Instant::now();
    assert!(!c.is_stale(t, Duration::from_millis(10)), "nothing owed");
    c.queue(1, t, |_| {}, How::Plain).unwrap();
    assert!(!c.is_stale(t + Duration::from_millis(10), Duration::from_millis(10)));
    assert!(c.is_stale(t + Duration::from_millis(11), Duration::from_millis(10)));
    feed(&mut c, b":1\r\n");
    assert!(c.next_reply().unwrap().is_some());
    assert!(!c.is_stale(t + Duration::from_secs(9), Duration::from_millis(10)));
}

fn command<'a>(kind: OpKind, token: &'a Token, res: &'a [Name]) -> Command<'a> {
    Command {
        kind,
        resources: res,
        token: Some(token),
        ttl_ms: 30_000,
        counter: None,
        fence_value: 0,
        watch: None,
    }
}

fn wire(c: &Command<'_>, eval: bool) -> Vec<u8> {
    let mut v = Vec::new();
    c.encode(&mut v, if eval { Form::Eval } else { Form::Evalsha });
    v
}

#[test]
fn the_eval_form_is_the_evalsha_with_the_script_in_place_of_the_digest() {
    let token = Token::from_random(&mut crate::random::Seeded::new(102));
    let one = [Name::new("res")];
    let set = [Name::new("a"), Name::new("b"), Name::new("c")];
    for res in [&one[..], &set[..]] {
        for kind in [
            OpKind::Release,
            OpKind::Extend,
            OpKind::Fence,
            OpKind::Acquire,
        ] {
            let mut cmd = command(kind, &token, res);
            cmd.counter = (kind == OpKind::Fence).then_some(&b"counter"[..]);
            if kind == OpKind::Acquire && res.len() == 1 {
                continue; // a plain SET
            }
            let mut out = BytesMut::new();
            assert!(crate::forms::write_as_eval(&wire(&cmd, false), &mut out));
            assert_eq!(&out[..], &wire(&cmd, true)[..], "{kind:?}");
        }
    }
    // Anything else is left alone.
    let mut out = BytesMut::new();
    assert!(!crate::forms::write_as_eval(
        &wire(&command(OpKind::Acquire, &token, &one), false),
        &mut out
    ));
    assert!(!crate::forms::write_as_eval(
        b"*2\r\n$7\r\nEVALSHA\r\n$40\r\n",
        &mut out
    ));
    assert!(!crate::forms::write_as_eval(b"", &mut out));
    let other =
        b"*3\r\n$7\r\nEVALSHA\r\n$40\r\n0000000000000000000000000000000000000000\r\n$1\r\n0\r\n";
    assert!(!crate::forms::write_as_eval(other, &mut out));
    assert!(out.is_empty());
}

#[test]
fn a_refused_evalsha_switches_an_auto_connection_to_functions() {
    let token = Token::from_random(&mut crate::random::Seeded::new(103));
    let res = [Name::new("res")];
    let release = command(OpKind::Release, &token, &res);
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.opened(&addr("127.0.0.1:1"), Scripts::Auto, false);
    // HELLO and the script preloads answered (the preloads refused by the ACL).
    let mut replies = b"*0\r\n".to_vec();
    for _ in 0..crate::script::ALL.len() {
        replies
            .extend(b"-NOPERM this user has no permissions to run the 'script|load' command\r\n");
    }
    feed(&mut c, &replies);
    c.out.clear();
    let now = Instant::now();
    c.queue(
        1,
        now,
        |b| release.encode(b, Form::Evalsha),
        How::Script(None),
    )
    .unwrap();
    c.out.clear();
    feed(
        &mut c,
        b"-NOPERM this user has no permissions to run the 'evalsha' command\r\n",
    );
    // Not handed over: FUNCTION LOAD, then the same call as FCALL.
    assert!(c.next_reply().unwrap().is_none());
    let out = String::from_utf8_lossy(&c.out).into_owned();
    let load = out.find("FUNCTION").expect("FUNCTION LOAD");
    let fcall = out.find("FCALL").expect("FCALL");
    assert!(
        load < fcall && out.contains("redlock_mux_v13_release"),
        "{out}"
    );
    // Its reply goes to 1; later scripted commands go out as FCALL at once.
    feed(&mut c, b"$15\r\nredlock_mux_v13\r\n:1\r\n");
    assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
    c.out.clear();
    c.queue(
        2,
        now,
        |b| release.encode(b, Form::Evalsha),
        How::Script(None),
    )
    .unwrap();
    assert!(c.out.windows(5).any(|w| w == b"FCALL"), "{:?}", c.out);
    assert!(!c.out.windows(7).any(|w| w == b"EVALSHA"));
    // Under Eval the refusal is handed over as it is.
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, false);
    feed(&mut c, &b"$3\r\nsha\r\n".repeat(crate::script::ALL.len()));
    c.queue(
        3,
        now,
        |b| release.encode(b, Form::Evalsha),
        How::Script(None),
    )
    .unwrap();
    feed(&mut c, b"-NOPERM no\r\n");
    assert!(matches!(
        c.next_reply().unwrap(),
        Some((3, Frame::Error(_)))
    ));
}

#[test]
fn noscript_is_answered_with_the_eval_form_on_the_same_connection() {
    let token = Token::from_random(&mut crate::random::Seeded::new(104));
    let res = [Name::new("res")];
    let (release, extend) = (
        command(OpKind::Release, &token, &res),
        command(OpKind::Extend, &token, &res),
    );
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    let now = Instant::now();
    c.queue(
        1,
        now,
        |b| release.encode(b, Form::Evalsha),
        How::Script(None),
    )
    .unwrap();
    c.queue(
        2,
        now,
        |b| extend.encode(b, Form::Evalsha),
        How::Script(None),
    )
    .unwrap();
    c.queue(3, now, |b| b.put_slice(b"SET3;"), How::Plain)
        .unwrap();
    c.out.clear();
    // 1 ran; 2 found no script; 3 answered.
    feed(&mut c, b":1\r\n-NOSCRIPT No matching script.\r\n+OK\r\n");
    assert_eq!(c.next_reply().unwrap().map(|(t, _)| t), Some(1));
    // The NOSCRIPT is not handed over: 2 goes out again as EVAL, every script is loaded
    // again, and 3's reply comes next.
    assert_eq!(c.next_reply().unwrap().map(|(t, _)| t), Some(3));
    let eval = wire(&extend, true);
    assert!(c.out.starts_with(&eval), "{:?}", c.out);
    let preloads = crate::script::ALL.len();
    assert_eq!(
        c.out.windows(6).filter(|w| w == b"SCRIPT").count(),
        preloads
    );
    assert!(c.next_reply().unwrap().is_none());
    // The EVAL's reply goes to 2; the SCRIPT LOAD replies are consumed.
    let sha = format!("$40\r\n{}\r\n", "x".repeat(40));
    feed(&mut c, format!(":1\r\n{}", sha.repeat(preloads)).as_bytes());
    let (tag, frame) = c.next_reply().unwrap().unwrap();
    assert_eq!((tag, frame), (2, Frame::Integer(1)));
    assert!(c.next_reply().unwrap().is_none());
    assert!(c.scripted.is_empty(), "every copy consumed");
    // A NOSCRIPT to the EVAL form itself (not scripted) is handed over: no loop.
    c.queue(4, now, |b| release.encode(b, Form::Eval), How::Plain)
        .unwrap();
    feed(&mut c, b"-NOSCRIPT No matching script.\r\n");
    assert_eq!(c.next_reply().unwrap().map(|(t, _)| t), Some(4));
}

#[test]
fn a_full_write_buffer_is_back_pressure_until_the_socket_stops_taking_bytes() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    let t = Instant::now();
    let big = vec![b'x'; MAX_PENDING_WRITE / 2 + 1];
    c.queue(1, t, |b| b.put_slice(&big), How::Plain).unwrap();
    c.queue(2, t, |b| b.put_slice(&big), How::Plain).unwrap();
    // Over the limit, but the socket took bytes a moment ago: queued all the same.
    c.wrote(1000);
    let later = t + OVERDUE * 3;
    c.queue(3, later, |b| b.put_slice(&big), How::Plain)
        .unwrap();
    assert!(c.out.len() > MAX_PENDING_WRITE);
    // Still taking bytes a node timeout on: still queued.
    c.wrote(1000);
    let later = later + OVERDUE * 2;
    c.queue(4, later, |b| b.put_slice(b"y"), How::Plain)
        .unwrap();
    // Nothing taken for a node timeout with more than the limit waiting: stuck.
    assert_eq!(
        c.queue(
            5,
            later + OVERDUE + Duration::from_millis(1),
            |_| {},
            How::Plain
        ),
        Err((ConnError::Stuck, 5))
    );
    // Under the limit a stalled socket is only slow: its replies go stale instead.
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.queue(1, t, |b| b.put_slice(b"x"), How::Plain).unwrap();
    assert!(c.queue(2, t + OVERDUE * 10, |_| {}, How::Plain).is_ok());
}

#[test]
fn a_sentinel_goes_before_client_caching_never_between_it_and_the_read() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.resp3 = true;
    let t = Instant::now();
    c.queue(1, t, |b| b.put_slice(b"*1\r\n$3\r\nSET\r\n"), How::Plain)
        .unwrap();
    let later = t + OVERDUE * 2;
    c.queue_caching(later);
    c.queue(
        2,
        later,
        |b| b.put_slice(b"*1\r\n$4\r\nPTTL\r\n"),
        How::Plain,
    )
    .unwrap();
    let out = String::from_utf8_lossy(&c.out).into_owned();
    let (ping, caching, pttl) = (
        out.find("PING").expect("a sentinel"),
        out.find("CACHING").expect("CLIENT CACHING"),
        out.find("PTTL").expect("the read"),
    );
    assert!(ping < caching && caching < pttl, "{out}");
    assert_eq!(out.matches("PING").count(), 1, "{out}");
}

#[test]
fn a_sentinel_refused_in_its_place_keeps_the_connection_and_is_not_sent_again() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    let t = Instant::now();
    c.queue(1, t, |_| {}, How::Plain).unwrap();
    c.queue(2, t + OVERDUE * 2, |_| {}, How::Plain).unwrap();
    feed(
        &mut c,
        b":1\r\n-NOPERM User app has no permissions to run the 'ping' command\r\n:2\r\n",
    );
    assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
    assert_eq!(c.next_reply().unwrap(), Some((2, Frame::Integer(2))));
    c.out.clear();
    c.queue(3, t, |_| {}, How::Plain).unwrap();
    c.queue(4, t + OVERDUE * 10, |_| {}, How::Plain).unwrap();
    assert!(c.out.is_empty(), "no sentinel after a refusal");
    // Another command's refusal in a sentinel's place is no proof of step.
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.queue(1, t, |_| {}, How::Plain).unwrap();
    c.queue(2, t + OVERDUE * 2, |_| {}, How::Plain).unwrap();
    feed(
        &mut c,
        b":1\r\n-NOPERM User app has no permissions to run the 'evalsha' command\r\n",
    );
    assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
    assert_eq!(c.next_reply(), Err(ConnError::Desync));
}

#[test]
fn partial_writes_advance() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    c.queue(1, Instant::now(), |b| b.put_slice(b"abcdef"), How::Plain)
        .unwrap();
    c.wrote(2);
    assert_eq!(&c.out[..], b"cdef");
    c.wrote(100);
    assert!(c.out.is_empty());
}

#[test]
fn owed_counts_every_reply_and_dates_the_oldest_commands() {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    let t = Instant::now();
    assert_eq!(c.owed(), (0, None));
    c.queue(1, t, |b| b.put_slice(b"+a\r\n"), How::Plain)
        .unwrap();
    c.queue(2, t + OVERDUE, |b| b.put_slice(b"+b\r\n"), How::Plain)
        .unwrap();
    assert_eq!(c.owed(), (2, Some(t)));
    c.received(b"+OK\r\n");
    assert_eq!(
        c.next_reply().unwrap(),
        Some((1, Frame::Simple("OK".into())))
    );
    assert_eq!(c.owed(), (1, Some(t + OVERDUE)));
}

/// A verifying connection: opened with no login, its preloads answered.
fn verifying() -> Conn<u64> {
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE).verifying(true);
    open(&mut c);
    c.out.clear();
    c
}

fn nonce(n: u32) -> Vec<u8> {
    let text = format!("redlock-sync:{n}");
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

#[test]
fn a_verifying_connection_ends_each_write_pass_with_one_sentinel() {
    let mut c = verifying();
    let t = Instant::now();
    c.queue(1, t, |b| b.put_slice(b"A;"), How::Plain).unwrap();
    c.queue(2, t, |b| b.put_slice(b"B;"), How::Plain).unwrap();
    c.seal();
    c.seal();
    let out = String::from_utf8_lossy(&c.out).into_owned();
    assert!(out.starts_with("A;B;*2\r\n$4\r\nPING\r\n"), "{out}");
    assert_eq!(out.matches("PING").count(), 1, "{out}");
    // Nothing queued since: no sentinel.
    c.out.clear();
    c.seal();
    assert!(c.out.is_empty());
    // Off: a pass ends with nothing.
    let mut plain: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    open(&mut plain);
    plain.out.clear();
    plain
        .queue(1, t, |b| b.put_slice(b"A;"), How::Plain)
        .unwrap();
    plain.seal();
    assert_eq!(&plain.out[..], b"A;");
}

#[test]
fn a_verifying_connection_hands_replies_over_only_once_their_sentinel_is_back() {
    let mut c = verifying();
    let t = Instant::now();
    c.queue(1, t, |b| b.put_slice(b"A;"), How::Plain).unwrap();
    c.queue(2, t, |b| b.put_slice(b"B;"), How::Plain).unwrap();
    c.seal();
    feed(&mut c, b"+OK\r\n:1\r\n");
    assert_eq!(c.next_reply().unwrap(), None, "held until the nonce");
    feed(&mut c, &nonce(1));
    assert_eq!(
        c.next_reply().unwrap(),
        Some((1, Frame::Simple("OK".into())))
    );
    assert_eq!(c.next_reply().unwrap(), Some((2, Frame::Integer(1))));
    assert_eq!(c.next_reply().unwrap(), None);
}

/// Two pipelined `SET NX`, fused into one by a run of bytes lost from the middle of the
/// stream (the first one's tail and the second one's head): the server answers once. That
/// `+OK` is the second command's, and without the sentinel it would be taken for the
/// first's. With it, the nonce arrives in the second command's place: the connection is
/// dropped, and neither command is answered.
#[test]
fn commands_fused_by_lost_bytes_are_never_answered_by_each_other() {
    let t = Instant::now();
    let fused = |c: &mut Conn<u64>| {
        c.queue(1, t, |b| b.put_slice(b"SET r0 ..."), How::Plain)
            .unwrap();
        c.queue(2, t, |b| b.put_slice(b"SET f0 ..."), How::Plain)
            .unwrap();
        c.seal();
        feed(c, b"+OK\r\n");
    };
    // Without the check, the fused command's `+OK` goes to command 1.
    let mut plain: Conn<u64> = Conn::new(MAX_OWED, OVERDUE);
    open(&mut plain);
    fused(&mut plain);
    assert_eq!(plain.next_reply().unwrap().map(|(t, _)| t), Some(1));
    // With it: held, then the nonce in 2's place.
    let mut c = verifying();
    fused(&mut c);
    assert_eq!(c.next_reply().unwrap(), None);
    feed(&mut c, &nonce(1));
    assert_eq!(c.next_reply(), Err(ConnError::Desync));
    let lost: Vec<u64> = c.failed(t).collect();
    assert_eq!(lost, vec![1, 2], "the held reply's command failed too");
}

/// A command mangled into lines the server reads one by one (its head lost): several
/// errors for one command. The second lands in the sentinel's place.
#[test]
fn extra_replies_from_a_mangled_command_land_on_the_sentinel() {
    let mut c = verifying();
    let t = Instant::now();
    c.queue(1, t, |b| b.put_slice(b"SET r0 ..."), How::Plain)
        .unwrap();
    c.seal();
    feed(
        &mut c,
        b"-ERR unknown command\r\n-ERR unknown command\r\n+OK\r\n",
    );
    assert_eq!(c.next_reply(), Err(ConnError::Desync));
    assert_eq!(c.failed(t).collect::<Vec<_>>(), vec![1]);
}

/// A whole reply lost: every later reply moves up one place, and the sentinel's nonce
/// arrives in the last command's place.
#[test]
fn a_lost_reply_moves_the_nonce_into_a_commands_place() {
    let mut c = verifying();
    let t = Instant::now();
    for tag in 1..=3 {
        c.queue(tag, t, |b| b.put_slice(b"SET ..."), How::Plain)
            .unwrap();
    }
    c.seal();
    // The reply to 1 lost; 2's and 3's arrive, then the nonce.
    feed(&mut c, b"+OK\r\n$-1\r\n");
    feed(&mut c, &nonce(1));
    assert_eq!(c.next_reply(), Err(ConnError::Desync));
}

/// An acquisition the server refused in the form it was sent in is offered to be sent
/// again only if nothing was queued behind it, and that is judged when its reply is handed
/// over: a command queued while the reply was held for its sentinel withdraws the offer.
#[test]
fn a_held_refusal_is_not_offered_again_once_a_command_is_queued_behind_it() {
    let token = Token::from_random(&mut crate::random::Seeded::new(105));
    let set = [Name::new("a"), Name::new("b")];
    let acquire = command(OpKind::Acquire, &token, &set);
    let t = Instant::now();
    for queue_behind in [false, true] {
        let mut c = verifying();
        c.queue(
            1,
            t,
            |b| acquire.encode(b, Form::Evalsha),
            How::Script(None),
        )
        .unwrap();
        c.seal();
        feed(&mut c, b"-NOSCRIPT No matching script.\r\n");
        assert!(c.take_reply().unwrap().is_none());
        if queue_behind {
            c.queue(2, t, |b| b.put_slice(b"DEL ..."), How::Plain)
                .unwrap();
        }
        feed(&mut c, &nonce(1));
        let reply = c.take_reply().unwrap().expect("handed over");
        assert_eq!(reply.tag, 1);
        assert_eq!(reply.again.is_some(), !queue_behind);
    }
}

#[test]
fn a_refused_sentinel_lets_held_replies_go_and_stops_holding() {
    let mut c = verifying();
    let t = Instant::now();
    c.queue(1, t, |b| b.put_slice(b"A;"), How::Plain).unwrap();
    c.seal();
    feed(
        &mut c,
        b":1\r\n-NOPERM User app has no permissions to run the 'ping' command\r\n",
    );
    assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(1))));
    c.out.clear();
    c.queue(2, t, |b| b.put_slice(b"B;"), How::Plain).unwrap();
    c.seal();
    assert_eq!(&c.out[..], b"B;", "no sentinel where PING is refused");
    feed(&mut c, b":0\r\n");
    assert_eq!(c.next_reply().unwrap(), Some((2, Frame::Integer(0))));
}

/// A verifying connection whose oldest reply is overdue owes at most one sentinel beyond its
/// bound: the pass's (`seal`), not also the one a late reply calls for ahead of a command
/// (which a verifying connection does not need: no reply counts before the pass's sentinel).
#[test]
fn a_verifying_connection_owes_at_most_one_sentinel_beyond_its_bound() {
    let max = 8;
    let mut c: Conn<u64> = Conn::new(max, OVERDUE).verifying(true);
    open(&mut c);
    c.out.clear();
    // Drain the preloads' replies (owed since the connection opened).
    assert_eq!(c.next_reply().unwrap(), None);
    let t0 = Instant::now();
    // Queued up to one short of the bound, not yet written (the socket took nothing: the
    // pass is not closed yet).
    for tag in 0..(max as u64 - 1) {
        c.queue(tag, t0, |b| b.put_slice(b"A;"), How::Plain)
            .unwrap();
    }
    // The oldest is overdue when one more is queued; then the pass closes.
    let late = t0 + OVERDUE * 2;
    let _ = c.queue(99, late, |b| b.put_slice(b"B;"), How::Plain);
    c.seal();
    assert!(
        c.owed().0 <= max + 1,
        "owes {} with a bound of {max}",
        c.owed().0
    );
}

/// Fair mode: the bell's messages, a hand-off's (`<hand-off> <resource>`, the resource may
/// hold spaces) and the notice to the second in line (`+ <resource>`), told apart.
#[test]
fn a_bell_names_its_hand_off_and_a_plus_tells_the_second_in_line() {
    let bell: Box<[u8]> = b"redlock-mux:bell:me"[..].into();
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE).ringing(Some(bell));
    open(&mut c);
    feed(
        &mut c,
        b">3\r\n$7\r\nmessage\r\n$19\r\nredlock-mux:bell:me\r\n$6\r\nh1 r s\r\n",
    );
    feed(
        &mut c,
        b">3\r\n$7\r\nmessage\r\n$19\r\nredlock-mux:bell:me\r\n$5\r\n+ r s\r\n",
    );
    assert_eq!(c.next_reply().unwrap(), None, "pushes, no reply");
    let key = bytes::Bytes::from_static(b"r s");
    assert_eq!(
        c.take_invalidated(),
        Some(vec![
            Invalidated::Bell {
                key: key.clone(),
                handoff: bytes::Bytes::from_static(b"h1"),
            },
            Invalidated::Next { key },
        ])
    );
}

/// Fair mode: the bell's `SUBSCRIBE` goes out ahead of the `HELLO 3` reply, right before the
/// first command that stands in a line, so that the server has the subscription before that
/// command puts the client in a line (a release that rang the line in between would take the
/// waiter for a gone process: the simulator's seed 6682); commands queued before it (an
/// unlock, an extension) do not depend on the `HELLO` reply. A server without `HELLO 3`
/// would run that `SUBSCRIBE` on a RESP2 connection, which then refuses every other command:
/// the connection is failed, and the next ones subscribe only after `HELLO 3` is answered,
/// until one is. A refusal that is not about `HELLO` (a full server) is the connection's alone.
#[test]
fn the_bell_is_subscribed_before_the_first_line_command_and_a_refused_hello_reconnects() {
    let bell: Box<[u8]> = b"redlock-mux:bell:me"[..].into();
    let mut c: Conn<u64> = Conn::new(MAX_OWED, OVERDUE).ringing(Some(bell));
    let find = |out: &[u8], needle: &[u8]| out.windows(needle.len()).position(|w| w == needle);
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    c.queue(1, Instant::now(), |b| b.put_slice(b"UNLOCK"), How::Plain)
        .unwrap();
    c.subscribe_before_line();
    c.queue(2, Instant::now(), |b| b.put_slice(b"TRY"), How::Plain)
        .unwrap();
    // A second line command: one `SUBSCRIBE` only.
    c.subscribe_before_line();
    let out = c.out.to_vec();
    let hello = find(&out, b"HELLO").unwrap();
    let unlock = find(&out, b"UNLOCK").unwrap();
    let subscribe = find(&out, b"SUBSCRIBE").expect("subscribed ahead of the reply");
    let first_try = find(&out, b"TRY").unwrap();
    assert!(
        hello < unlock && unlock < subscribe && subscribe < first_try,
        "{out:?}"
    );
    assert_eq!(out.windows(9).filter(|w| w == b"SUBSCRIBE").count(), 1);
    c.out.clear();
    // Agreed: the confirmation is a push, tracking follows, and nothing subscribes twice.
    feed(
        &mut c,
        b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n",
    );
    assert_eq!(c.next_reply().unwrap(), None);
    assert!(contains(&c.out, b"TRACKING"));
    assert!(!contains(&c.out, b"SUBSCRIBE"));
    let preloads = crate::script::ALL.len() + crate::script::FAIR.len();
    let mut replies = b"$3\r\nsha\r\n".repeat(preloads);
    replies.extend(b":0\r\n>3\r\n$9\r\nsubscribe\r\n$19\r\nredlock-mux:bell:me\r\n:1\r\n:5\r\n");
    feed(&mut c, &replies);
    assert_eq!(c.next_reply().unwrap(), Some((1, Frame::Integer(0))));
    assert_eq!(c.next_reply().unwrap(), Some((2, Frame::Integer(5))));
    assert!(c.subscribed());

    // No line command before the reply: the `SUBSCRIBE` follows it, as without fair mode's
    // hurry.
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    c.queue(3, Instant::now(), |b| b.put_slice(b"UNLOCK"), How::Plain)
        .unwrap();
    assert!(!contains(&c.out, b"SUBSCRIBE"));
    c.out.clear();
    feed(
        &mut c,
        b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n",
    );
    assert_eq!(c.next_reply().unwrap(), None);
    assert!(contains(&c.out, b"SUBSCRIBE"));

    // A full server turns the connection away: spent, and the next one still hurries.
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    c.subscribe_before_line();
    c.queue(4, Instant::now(), |b| b.put_slice(b"TRY"), How::Plain)
        .unwrap();
    feed(&mut c, b"-ERR max number of clients reached\r\n");
    assert!(matches!(c.next_reply(), Err(ConnError::Handshake(_))));
    assert_eq!(c.failed(Instant::now()).collect::<Vec<_>>(), vec![4]);
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    c.subscribe_before_line();
    assert!(contains(&c.out, b"SUBSCRIBE"));

    // A server without `HELLO`: spent, and the next ones ask first.
    feed(&mut c, b"-ERR unknown command 'HELLO'\r\n");
    assert!(matches!(c.next_reply(), Err(ConnError::Handshake(m)) if m.contains("HELLO 3")));
    let _ = c.failed(Instant::now()).count();
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    c.subscribe_before_line();
    assert!(!contains(&c.out, b"SUBSCRIBE"));
    c.out.clear();
    c.queue(5, Instant::now(), |b| b.put_slice(b"TRY"), How::Plain)
        .unwrap();
    let mut replies = b"-ERR unknown command 'HELLO'\r\n".to_vec();
    replies.extend(b"$3\r\nsha\r\n".repeat(preloads));
    replies.extend(b":1\r\n");
    feed(&mut c, &replies);
    assert_eq!(c.next_reply().unwrap(), Some((5, Frame::Integer(1))));
    assert!(!contains(&c.out, b"SUBSCRIBE"));
    // Until a server at the address agrees to `HELLO 3` again: then it hurries again.
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    feed(
        &mut c,
        b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n",
    );
    assert_eq!(c.next_reply().unwrap(), None);
    c.opened(&addr("127.0.0.1:1"), Scripts::Eval, true);
    c.subscribe_before_line();
    assert!(contains(&c.out, b"SUBSCRIBE"));
}
