//! Unit tests of the simulated master: byte boundaries, expiry, the script cache, crashes,
//! invalidation pushes, profiles, and hostile input.

use bytes::{Bytes, BytesMut};
use redlock_mux::script;
use resp::{Decoder, Frame};

use super::{ConnId, Master};
use crate::profile::{Denied, Profile, User};

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, args);
    out
}

fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut buf = BytesMut::from(bytes);
    let mut dec = Decoder::default();
    let mut v = Vec::new();
    while let Some(f) = dec.decode(&mut buf).expect("the sim writes valid RESP") {
        v.push(f);
    }
    assert!(buf.is_empty(), "a partial frame: {buf:?}");
    v
}

/// Sends one command and returns every frame written on `conn` since the last look.
fn call(m: &mut Master, conn: ConnId, args: &[&[u8]], now: u64) -> Vec<Frame> {
    assert!(m.feed(conn, &encode(args), now));
    frames(&m.take_output(conn))
}

/// Sends one command and returns its only frame.
fn one(m: &mut Master, conn: ConnId, args: &[&[u8]], now: u64) -> Frame {
    let mut f = call(m, conn, args, now);
    assert_eq!(f.len(), 1, "{f:?}");
    f.remove(0)
}

fn bulk(s: &str) -> Frame {
    Frame::Bulk(Bytes::from(s.to_string()))
}

fn err(s: &str) -> Frame {
    Frame::Error(Bytes::from(s.to_string()))
}

fn ok() -> Frame {
    Frame::Simple(Bytes::from_static(b"OK"))
}

/// A pipeline touching every kind of command: login, tracking, keys, scripts in their three
/// forms, the library, a push, errors.
fn pipeline() -> Vec<u8> {
    let (acquire, release) = (script::ALL[0], script::ALL[1]);
    let cmds: Vec<Vec<&[u8]>> = vec![
        vec![b"HELLO", b"3"],
        vec![b"CLIENT", b"TRACKING", b"ON", b"OPTIN"],
        vec![b"CLIENT", b"CACHING", b"YES"],
        vec![b"PTTL", b"k"],
        vec![b"SET", b"k", b"t", b"NX", b"PX", b"5000"],
        vec![
            b"EVALSHA",
            acquire.0.as_bytes(),
            b"2",
            b"a",
            b"c",
            b"t",
            b"900",
            b"1",
        ],
        vec![
            b"EVAL",
            acquire.1.as_bytes(),
            b"2",
            b"a",
            b"c",
            b"t",
            b"900",
            b"1",
        ],
        vec![b"FUNCTION", b"LOAD", script::LIBRARY.as_bytes()],
        vec![b"FCALL", script::FUNCTIONS[1].as_bytes(), b"1", b"a", b"t"],
        vec![b"EVALSHA", release.0.as_bytes(), b"1", b"k", b"t"],
        vec![b"GET", b"c"],
        vec![b"NOSUCH", b"x"],
        vec![b"PING", b"redlock-sync:7"],
    ];
    let mut out = Vec::new();
    for c in &cmds {
        out.extend(encode(c));
    }
    out
}

#[test]
fn input_split_at_any_byte_gives_the_same_output() {
    let input = pipeline();
    let whole = {
        let mut m = Master::new(Profile::redis_7_0());
        let c = m.connect();
        assert!(m.feed(c, &input, 10));
        m.take_output(c)
    };
    let replies = frames(&whole);
    // 13 replies and a push (the SET invalidates `k`, read after CACHING YES).
    assert_eq!(replies.len(), 14, "{replies:?}");
    assert!(replies.contains(&err(
        "ERR unknown command 'NOSUCH', with args beginning with: 'x' "
    )));
    for cut in 0..=input.len() {
        let mut m = Master::new(Profile::redis_7_0());
        let c = m.connect();
        assert!(m.feed(c, &input[..cut], 10));
        let mut out = m.take_output(c).to_vec();
        assert!(m.feed(c, &input[cut..], 10));
        out.extend_from_slice(&m.take_output(c));
        assert_eq!(out, whole, "cut at {cut}");
    }
    // One byte at a time.
    let mut m = Master::new(Profile::redis_7_0());
    let c = m.connect();
    let mut out = Vec::new();
    for b in &input {
        assert!(m.feed(c, std::slice::from_ref(b), 10));
        out.extend_from_slice(&m.take_output(c));
    }
    assert_eq!(out, whole);
}

#[test]
fn keys_expire_on_the_masters_clock() {
    let mut m = Master::new(Profile::redis_7_0());
    let c = m.connect();
    assert_eq!(
        one(&mut m, c, &[b"SET", b"k", b"t", b"NX", b"PX", b"100"], 1000),
        ok()
    );
    assert_eq!(one(&mut m, c, &[b"PTTL", b"k"], 1040), Frame::Integer(60));
    // At its deadline the key is still there (Redis expires when now > deadline).
    assert_eq!(one(&mut m, c, &[b"PTTL", b"k"], 1100), Frame::Integer(0));
    assert_eq!(m.peek(0, b"k", 1100), Some(&Bytes::from_static(b"t")));
    assert_eq!(m.peek_pttl(0, b"k", 1101), -2);
    assert_eq!(one(&mut m, c, &[b"GET", b"k"], 1101), Frame::NullBulk);
    assert_eq!(one(&mut m, c, &[b"PTTL", b"k"], 1101), Frame::Integer(-2));
    // Free again: SET NX takes it.
    assert_eq!(
        one(&mut m, c, &[b"SET", b"k", b"u", b"NX", b"PX", b"100"], 1102),
        ok()
    );
    // The extend script's PEXPIRE moves the deadline; the counter has none.
    let (sha, text) = script::ALL[2];
    assert_eq!(
        one(
            &mut m,
            c,
            &[b"EVAL", text.as_bytes(), b"1", b"k", b"u", b"5000"],
            1150
        ),
        Frame::Integer(1)
    );
    assert_eq!(one(&mut m, c, &[b"PTTL", b"k"], 1200), Frame::Integer(4950));
    assert_eq!(
        one(
            &mut m,
            c,
            &[b"EVALSHA", sha.as_bytes(), b"1", b"k", b"x", b"5000"],
            1200
        ),
        Frame::Integer(0)
    );
    assert_eq!(one(&mut m, c, &[b"INCR", b"ctr"], 1200), Frame::Integer(1));
    assert_eq!(
        one(&mut m, c, &[b"PTTL", b"ctr"], 9_999_999),
        Frame::Integer(-1)
    );
    assert_eq!(
        one(&mut m, c, &[b"SET", b"k", b"t", b"PX", b"0"], 1200),
        err("ERR invalid expire time in 'set' command")
    );
    let huge = i64::MAX.to_string();
    assert_eq!(
        one(
            &mut m,
            c,
            &[b"SET", b"k", b"t", b"PX", huge.as_bytes()],
            1200
        ),
        err("ERR invalid expire time in 'set' command")
    );
}

#[test]
fn noscript_after_a_flush_until_eval_or_load_caches_it_again() {
    for (profile, noscript) in [
        (
            Profile::redis_7_0(),
            "NOSCRIPT No matching script. Please use EVAL.",
        ),
        (Profile::valkey_9_1(), "NOSCRIPT No matching script."),
    ] {
        let mut m = Master::new(profile);
        let c = m.connect();
        let (sha, text) = script::ALL[1];
        let evalsha: &[&[u8]] = &[b"EVALSHA", sha.as_bytes(), b"1", b"k", b"t"];
        assert_eq!(one(&mut m, c, evalsha, 0), err(noscript));
        assert_eq!(
            one(&mut m, c, &[b"SCRIPT", b"LOAD", text.as_bytes()], 0),
            bulk(sha)
        );
        assert_eq!(one(&mut m, c, evalsha, 0), Frame::Integer(-1));
        assert_eq!(one(&mut m, c, &[b"SCRIPT", b"FLUSH"], 0), ok());
        assert_eq!(one(&mut m, c, evalsha, 0), err(noscript));
        let eval: &[&[u8]] = &[b"EVAL", text.as_bytes(), b"1", b"k", b"t"];
        assert_eq!(one(&mut m, c, eval, 0), Frame::Integer(-1));
        assert_eq!(one(&mut m, c, evalsha, 0), Frame::Integer(-1));
        // Digests are taken in either case.
        let upper = sha.to_ascii_uppercase();
        assert_eq!(
            one(
                &mut m,
                c,
                &[b"EVALSHA", upper.as_bytes(), b"1", b"k", b"t"],
                0
            ),
            Frame::Integer(-1)
        );
    }
}

#[test]
fn a_crash_keeps_the_data_or_not_and_never_the_script_cache() {
    for keep in [true, false] {
        let mut m = Master::new(Profile::redis_7_0());
        let c = m.connect();
        let (sha, text) = script::ALL[1];
        one(&mut m, c, &[b"SET", b"k", b"t", b"PX", b"1000"], 0);
        one(&mut m, c, &[b"SET", b"forever", b"v"], 0);
        one(&mut m, c, &[b"SCRIPT", b"LOAD", text.as_bytes()], 0);
        one(
            &mut m,
            c,
            &[b"FUNCTION", b"LOAD", script::LIBRARY.as_bytes()],
            0,
        );
        m.crash(keep);
        assert!(m.is_closed(c));
        assert!(!m.feed(c, &encode(&[b"PING"]), 10));
        assert_eq!(m.connections(), 0);
        let d = m.connect();
        assert_ne!(c, d, "connection ids are never reused");
        let value = |s: &str| if keep { bulk(s) } else { Frame::NullBulk };
        assert_eq!(one(&mut m, d, &[b"GET", b"forever"], 10), value("v"));
        assert_eq!(one(&mut m, d, &[b"GET", b"k"], 10), value("t"));
        // Deadlines are absolute: the key still expires at 1000.
        assert_eq!(one(&mut m, d, &[b"GET", b"k"], 1001), Frame::NullBulk);
        assert_eq!(
            one(
                &mut m,
                d,
                &[b"EVALSHA", sha.as_bytes(), b"1", b"k", b"t"],
                10
            ),
            err("NOSCRIPT No matching script. Please use EVAL.")
        );
        // Functions are data (kept in the append-only file).
        let fcall = one(
            &mut m,
            d,
            &[
                b"FCALL",
                script::FUNCTIONS[1].as_bytes(),
                b"1",
                b"forever",
                b"v",
            ],
            10,
        );
        let want = if keep {
            Frame::Integer(1)
        } else {
            err("ERR Function not found")
        };
        assert_eq!(fcall, want);
    }
}

/// A RESP3 connection tracking key `k` (read after `CLIENT CACHING YES`).
fn tracker(m: &mut Master, now: u64) -> ConnId {
    let t = m.connect();
    call(m, t, &[b"HELLO", b"3"], now);
    assert_eq!(
        one(m, t, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"], now),
        ok()
    );
    assert_eq!(one(m, t, &[b"CLIENT", b"CACHING", b"YES"], now), ok());
    assert_eq!(one(m, t, &[b"GET", b"k"], now), Frame::Null);
    t
}

fn invalidation(key: &str) -> Frame {
    Frame::Push(vec![bulk("invalidate"), Frame::Array(vec![bulk(key)])])
}

#[test]
fn writes_and_expiries_push_invalidations_to_trackers() {
    let mut m = Master::new(Profile::redis_7_0());
    let t = tracker(&mut m, 0);
    let w = m.connect();
    assert_eq!(
        one(&mut m, w, &[b"SET", b"k", b"v", b"NX", b"PX", b"100"], 0),
        ok()
    );
    assert_eq!(frames(&m.take_output(t)), vec![invalidation("k")]);
    // Forgotten once pushed: the next write pushes nothing.
    one(&mut m, w, &[b"DEL", b"k"], 0);
    assert!(m.take_output(t).is_empty());
    // Read without CACHING YES: not tracked (OPTIN).
    one(&mut m, t, &[b"GET", b"k"], 0);
    one(&mut m, w, &[b"SET", b"k", b"v", b"PX", b"100"], 0);
    assert!(m.take_output(t).is_empty());
    // Tracked again; the key's expiry, found by a read, pushes too.
    one(&mut m, t, &[b"CLIENT", b"CACHING", b"YES"], 0);
    assert_eq!(one(&mut m, t, &[b"PTTL", b"k"], 0), Frame::Integer(100));
    assert_eq!(one(&mut m, w, &[b"GET", b"k"], 101), Frame::NullBulk);
    assert_eq!(frames(&m.take_output(t)), vec![invalidation("k")]);
    // A script's write pushes as any other.
    one(&mut m, t, &[b"CLIENT", b"CACHING", b"YES"], 200);
    one(&mut m, t, &[b"GET", b"k"], 200);
    let (_, acquire) = script::ALL[0];
    let call_acquire: &[&[u8]] = &[b"EVAL", acquire.as_bytes(), b"1", b"k", b"t", b"50", b"1"];
    assert_eq!(one(&mut m, w, call_acquire, 200), Frame::Integer(0));
    assert_eq!(frames(&m.take_output(t)), vec![invalidation("k")]);
    // A RESP2 connection tracking without a redirection gets nothing.
    let r2 = m.connect();
    one(&mut m, r2, &[b"CLIENT", b"TRACKING", b"ON"], 300);
    one(&mut m, r2, &[b"GET", b"k"], 300);
    one(&mut m, w, &[b"SET", b"k", b"v"], 300);
    assert!(m.take_output(r2).is_empty());
}

#[test]
fn a_trackers_own_write_is_pushed_after_its_reply_from_redis_7() {
    for (profile, after) in [(Profile::redis_7_0(), true), (Profile::redis_6_2(), false)] {
        let mut m = Master::new(profile);
        let t = tracker(&mut m, 0);
        let got = call(&mut m, t, &[b"SET", b"k", b"v"], 0);
        let want = if after {
            vec![ok(), invalidation("k")]
        } else {
            vec![invalidation("k"), ok()]
        };
        assert_eq!(got, want);
    }
}

#[test]
fn profiles_differ_as_the_servers_do() {
    let k: &[&[u8]] = &[b"DELIFEQ", b"k", b"t"];
    let mut v = Master::new(Profile::valkey_9_1());
    let c = v.connect();
    assert_eq!(one(&mut v, c, k, 0), Frame::Integer(0));
    one(&mut v, c, &[b"SET", b"k", b"t"], 0);
    let ifeq: &[&[u8]] = &[b"SET", b"k", b"t", b"IFEQ", b"t", b"PX", b"500"];
    assert_eq!(one(&mut v, c, ifeq, 0), ok());
    assert_eq!(one(&mut v, c, &[b"PTTL", b"k"], 100), Frame::Integer(400));
    assert_eq!(
        one(&mut v, c, &[b"SET", b"k", b"x", b"IFEQ", b"no"], 100),
        Frame::NullBulk
    );
    assert_eq!(one(&mut v, c, k, 100), Frame::Integer(1));
    assert_eq!(
        one(&mut v, c, &[b"DELEX", b"k", b"IFEQ", b"t"], 0),
        err("ERR unknown command 'DELEX', with args beginning with: 'k' 'IFEQ' 't' ")
    );
    let mut r = Master::new(Profile::redis_8_4());
    let c = r.connect();
    one(&mut r, c, &[b"SET", b"k", b"t"], 0);
    assert_eq!(
        one(&mut r, c, &[b"DELEX", b"k", b"IFEQ", b"x"], 0),
        Frame::Integer(0)
    );
    assert_eq!(
        one(&mut r, c, &[b"DELEX", b"k", b"IFEQ", b"t"], 0),
        Frame::Integer(1)
    );
    let mut old = Master::new(Profile::redis_6_2());
    let c = old.connect();
    assert_eq!(
        one(&mut old, c, &[b"FCALL", b"f", b"0"], 0),
        err("ERR unknown command `FCALL`, with args beginning with: `f`, `0`, ")
    );
    assert_eq!(one(&mut old, c, ifeq, 0), err("ERR syntax error"));
}

#[test]
fn acl_users_and_passwords() {
    let profile = Profile::valkey_9_1()
        .denying(Denied::Scripting)
        .with_password("secret")
        .with_user(User::new("app", "pw", Denied::Eval));
    let mut m = Master::new(profile);
    let c = m.connect();
    assert_eq!(
        one(&mut m, c, &[b"GET", b"k"], 0),
        err("NOAUTH Authentication required.")
    );
    assert!(
        matches!(one(&mut m, c, &[b"HELLO", b"3"], 0), Frame::Error(e) if e.starts_with(b"NOAUTH HELLO"))
    );
    assert_eq!(
        one(&mut m, c, &[b"AUTH", b"nope"], 0),
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(one(&mut m, c, &[b"AUTH", b"secret"], 0), ok());
    assert_eq!(
        one(&mut m, c, &[b"EVALSHA", b"x", b"0"], 0),
        err("NOPERM User default has no permissions to run the 'evalsha' command")
    );
    assert_eq!(
        one(&mut m, c, &[b"FUNCTION", b"LOAD", b"x"], 0),
        err("NOPERM User default has no permissions to run the 'function|load' command")
    );
    // HELLO logs in and switches protocol at once.
    let hello = one(&mut m, c, &[b"HELLO", b"3", b"AUTH", b"app", b"pw"], 0);
    assert!(matches!(hello, Frame::Map(_)), "{hello:?}");
    assert_eq!(
        one(&mut m, c, &[b"SCRIPT", b"LOAD", b"x"], 0),
        err("NOPERM User app has no permissions to run the 'script|load' command")
    );
    assert_eq!(
        one(&mut m, c, &[b"FCALL", b"f", b"0"], 0),
        err("ERR Function not found")
    );
    assert_eq!(one(&mut m, c, &[b"GET", b"k"], 0), Frame::Null);
    let r70 = Profile::redis_7_0().denying(Denied::Eval);
    let mut m = Master::new(r70);
    let c = m.connect();
    assert_eq!(
        one(&mut m, c, &[b"EVAL", b"x", b"0"], 0),
        err("NOPERM this user has no permissions to run the 'eval' command")
    );
}

#[test]
fn fenced_acquisitions_and_the_counters_edges() {
    let mut m = Master::new(Profile::redis_7_0());
    let c = m.connect();
    let (_, acquire) = script::ALL[0];
    let (_, fence) = script::ALL[3];
    let acq = |n: &'static [u8]| -> Vec<&'static [u8]> {
        vec![
            b"EVAL",
            acquire.as_bytes(),
            b"2",
            b"a",
            b"ctr",
            n,
            b"1000",
            b"1",
        ]
    };
    assert_eq!(one(&mut m, c, &acq(b"t"), 0), Frame::Integer(1));
    // Held: -1, nothing set, the counter untouched.
    assert_eq!(one(&mut m, c, &acq(b"u"), 0), Frame::Integer(-1));
    assert_eq!(m.peek(0, b"ctr", 0), Some(&Bytes::from_static(b"1")));
    // The fence raises the counter, never lowers it (compared as decimal strings).
    let f = |v: &'static [u8]| -> Vec<&'static [u8]> {
        vec![b"EVAL", fence.as_bytes(), b"2", b"a", b"ctr", b"t", v]
    };
    assert_eq!(one(&mut m, c, &f(b"10"), 0), Frame::Integer(1));
    assert_eq!(one(&mut m, c, &f(b"9"), 0), Frame::Integer(1));
    assert_eq!(m.peek(0, b"ctr", 0), Some(&Bytes::from_static(b"10")));
    assert_eq!(
        one(&mut m, c, &f(b"9223372036854775807"), 0),
        Frame::Integer(1)
    );
    one(&mut m, c, &[b"DEL", b"a"], 0);
    let sha = crate::sha1::sha1_hex(acquire.as_bytes());
    assert_eq!(
        one(&mut m, c, &acq(b"t"), 0),
        err(&format!(
            "ERR increment or decrement would overflow script: {sha}, on @user_script:8."
        ))
    );
    // The key set before the failed INCR stays (no rollback).
    assert_eq!(m.peek(0, b"a", 0), Some(&Bytes::from_static(b"t")));
    // A counter beyond 2^53 comes back through Lua's doubles.
    one(&mut m, c, &[b"DEL", b"a"], 0);
    one(&mut m, c, &[b"SET", b"ctr", b"9007199254740992"], 0);
    assert_eq!(
        one(&mut m, c, &acq(b"t"), 0),
        Frame::Integer(9_007_199_254_740_992)
    );
    one(&mut m, c, &[b"DEL", b"a"], 0);
    one(&mut m, c, &[b"SET", b"ctr", b"9223372036854775806"], 0);
    assert_eq!(one(&mut m, c, &acq(b"t"), 0), Frame::Integer(i64::MIN));
}

#[test]
fn hostile_input_closes_the_connection_within_bounds() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a bulk past the limit",
            format!("*1\r\n${}\r\n", super::MAX_ARG_LEN + 1).into_bytes(),
        ),
        (
            "too many arguments",
            format!("*{}\r\n", super::MAX_ARGS + 1).into_bytes(),
        ),
        ("a nested array", b"*1\r\n*1\r\n$1\r\nx\r\n".to_vec()),
        ("an integer argument", b"*2\r\n$3\r\nGET\r\n:1\r\n".to_vec()),
        ("not RESP", b"\x00\xff garbage\r\n".to_vec()),
        ("an inline command", b"+PING\r\n".to_vec()),
        ("a line without end", vec![b'*'; 70 * 1024]),
    ];
    for (what, bytes) in cases {
        let mut m = Master::new(Profile::redis_7_0());
        let c = m.connect();
        assert!(m.feed(c, &encode(&[b"PING"]), 0));
        m.feed(c, &bytes, 0);
        let out = frames(&m.take_output(c));
        assert_eq!(out[0], Frame::Simple(Bytes::from_static(b"PONG")), "{what}");
        assert!(
            matches!(&out[1], Frame::Error(e) if e.starts_with(b"ERR Protocol error")),
            "{what}: {out:?}"
        );
        assert!(m.is_closed(c), "{what}");
        assert!(
            !m.feed(c, &encode(&[b"PING"]), 0),
            "{what}: read after close"
        );
    }
    // A command that never ends: closed once it holds more than the query limit.
    let mut m = Master::new(Profile::redis_7_0());
    let c = m.connect();
    m.feed(c, b"*16000\r\n", 0);
    let chunk = encode(&[&vec![b'x'; 1 << 20]]);
    let arg = &chunk[4..]; // `$1048576\r\n...\r\n`, one argument
    let mut fed = 0;
    while m.feed(c, arg, 0) {
        fed += 1;
        assert!(fed <= 16, "never closed");
    }
    assert!(m.is_closed(c));
    // Output nobody reads: closed at the output limit, its output dropped.
    let mut m = Master::new(Profile::redis_7_0());
    let c = m.connect();
    let value = vec![b'v'; 1 << 20];
    m.feed(c, &encode(&[b"SET", b"big", &value]), 0);
    let get = encode(&[b"GET", b"big"]);
    let mut sent = 0;
    while m.feed(c, &get, 0) {
        sent += 1;
        assert!(sent <= 64, "never closed");
    }
    assert!(m.take_output(c).is_empty());
}

#[test]
fn random_bytes_never_panic() {
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let seeds: Vec<Vec<u8>> = vec![
        pipeline(),
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n".to_vec(),
    ];
    for round in 0..300 {
        let mut m = Master::new(Profile::valkey_9_1());
        let c = m.connect();
        let mut bytes = seeds[round % seeds.len()].clone();
        // Flip, drop or insert a few bytes.
        for _ in 0..(next() % 8) {
            let i = (next() as usize) % bytes.len().max(1);
            match next() % 3 {
                0 if !bytes.is_empty() => bytes[i] = next() as u8,
                1 if !bytes.is_empty() => {
                    bytes.remove(i);
                }
                _ => bytes.insert(i.min(bytes.len()), next() as u8),
            }
        }
        for piece in bytes.chunks(1 + (next() as usize) % 64) {
            m.feed(c, piece, round as u64);
        }
        frames(&m.take_output(c));
    }
}

#[test]
fn a_scripts_read_tracks_its_declared_keys_on_redis_7_0_and_the_read_key_on_valkey() {
    for (profile, pushed) in [
        (Profile::redis_7_0(), vec!["a", "b"]),
        (Profile::valkey_9_1(), vec!["a"]),
    ] {
        let mut m = Master::new(profile);
        let t = m.connect();
        call(&mut m, t, &[b"HELLO", b"3"], 0);
        one(&mut m, t, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"], 0);
        one(&mut m, t, &[b"SET", b"a", b"other"], 0);
        // The extend script reads `a`, finds another token, and stops before `b`.
        one(&mut m, t, &[b"CLIENT", b"CACHING", b"YES"], 0);
        let (_, extend) = script::ALL[2];
        let run: &[&[u8]] = &[b"EVAL", extend.as_bytes(), b"2", b"a", b"b", b"t", b"100"];
        assert_eq!(one(&mut m, t, run, 0), Frame::Integer(0));
        let w = m.connect();
        one(&mut m, w, &[b"SET", b"a", b"x"], 0);
        one(&mut m, w, &[b"SET", b"b", b"x"], 0);
        let want: Vec<Frame> = pushed.into_iter().map(invalidation).collect();
        assert_eq!(frames(&m.take_output(t)), want);
    }
}

/// A reply written straight into the output is the bytes its frame encodes to, in both
/// protocols (errors with their line breaks as spaces, maps flat in RESP2).
#[test]
fn replies_encode_as_their_frames() {
    use super::reply::{encode_invalidation, Reply};
    let replies = [
        Reply::OK,
        Reply::err("ERR two\r\nlines\n"),
        Reply::Int(0),
        Reply::Int(i64::MIN),
        Reply::Int(i64::MAX),
        Reply::bulk(""),
        Reply::bulk("a value"),
        Reply::Null,
        Reply::Array(vec![]),
        Reply::Array(vec![Reply::Int(-7), Reply::Null, Reply::bulk("x")]),
        Reply::Map(vec![
            (Reply::bulk("proto"), Reply::Int(3)),
            (
                Reply::bulk("modules"),
                Reply::Array(vec![Reply::Map(vec![])]),
            ),
        ]),
    ];
    for resp3 in [false, true] {
        for r in &replies {
            let mut direct = Vec::new();
            r.encode(resp3, &mut direct);
            let mut framed = BytesMut::new();
            r.to_frame(resp3).encode(&mut framed);
            assert_eq!(direct, &framed[..], "{r:?} (resp3 {resp3})");
        }
    }
    let mut direct = Vec::new();
    encode_invalidation(&Bytes::from_static(b"r0"), &mut direct);
    let mut framed = BytesMut::new();
    Frame::Push(vec![
        Frame::Bulk(Bytes::from_static(b"invalidate")),
        Frame::Array(vec![Frame::Bulk(Bytes::from_static(b"r0"))]),
    ])
    .encode(&mut framed);
    assert_eq!(direct, &framed[..]);
}
