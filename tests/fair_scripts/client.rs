//! A raw RESP3 connection to a real server that runs fair mode's scripts by hand, and what
//! the tests read of the server beside it (shared by `tests/fair_scripts.rs` and
//! `tests/fair_set_scripts.rs`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use redlock_mux::resp::{encode_command, Decoder, Frame};
use redlock_mux::script::{self, BELL_PREFIX, QUEUE_PREFIX};
use testkit::redis;

/// A raw RESP3 connection subscribed to a client's bell.
pub struct Client {
    pub id: String,
    s: TcpStream,
    dec: Decoder,
    buf: BytesMut,
}

impl Client {
    pub fn new(addr: &str, id: &str) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Client {
            id: id.to_string(),
            s,
            dec: Decoder::default(),
            buf: BytesMut::new(),
        };
        c.send(&["HELLO", "3"]);
        assert!(matches!(c.reply(), Frame::Map(_)));
        let bell = format!("{BELL_PREFIX}{id}");
        c.send(&["SUBSCRIBE", &bell]);
        // RESP3: the confirmation is a push.
        let (pushes, _) = c.until_ping();
        assert_eq!(pushes.len(), 1, "{pushes:?}");
        c
    }

    pub fn send(&mut self, args: &[&str]) {
        let mut out = BytesMut::new();
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        encode_command(&mut out, &args);
        self.s.write_all(&out).unwrap();
    }

    pub fn frame(&mut self) -> Frame {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(f) = self.dec.decode(&mut self.buf).expect("RESP") {
                return f;
            }
            let n = self.s.read(&mut chunk).expect("a frame within 10 s");
            assert!(n > 0, "closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next reply that is not a push.
    pub fn reply(&mut self) -> Frame {
        loop {
            match self.frame() {
                Frame::Push(_) => continue,
                f => return f,
            }
        }
    }

    /// Sends `PING` and reads up to its answer: the pushes that came before it (the server
    /// writes in order, so a bell published before the `PING` ran is among them).
    pub fn until_ping(&mut self) -> (Vec<Frame>, Frame) {
        self.send(&["PING", "mark"]);
        let mut pushes = Vec::new();
        loop {
            match self.frame() {
                p @ Frame::Push(_) => pushes.push(p),
                Frame::Bulk(b) if &b[..] == b"mark" => return (pushes, Frame::Bulk(b)),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// The resources this client was rung for since the last look (a notice to the second
    /// in line, `+ <resource>`, is no bell: read past).
    pub fn bells(&mut self) -> Vec<String> {
        self.tagged_bells()
            .into_iter()
            .filter(|(tag, _)| tag != "+")
            .map(|(_, r)| r)
            .collect()
    }

    /// The bells since the last look, as (hand-off, resource): each says
    /// `<hand-off> <resource>`.
    pub fn tagged_bells(&mut self) -> Vec<(String, String)> {
        self.until_ping()
            .0
            .into_iter()
            .filter_map(|p| match p {
                Frame::Push(items) if items.len() == 3 => items[2].as_bytes().map(|b| {
                    let s = String::from_utf8_lossy(b).into_owned();
                    let (tag, r) = s.split_once(' ').expect("<hand-off> <resource>");
                    (tag.to_string(), r.to_string())
                }),
                _ => None,
            })
            .collect()
    }

    pub fn eval(&mut self, body: &str, keys: &[&str], args: &[&str]) -> Frame {
        let n = keys.len().to_string();
        let mut all = vec!["EVAL", body, &n];
        all.extend_from_slice(keys);
        all.extend_from_slice(args);
        self.send(&all);
        self.reply()
    }

    pub fn wait(&mut self, r: &str, claim_ms: u64) -> i64 {
        let q = format!("{QUEUE_PREFIX}{r}");
        let id = self.id.clone();
        match self.eval(
            script::WAIT,
            &[r, &q],
            &[&id, &claim_ms.to_string(), "1", "600000", "30000"],
        ) {
            // `[-3 or the PTTL, the caller's ticket]`.
            Frame::Array(v) => match v.as_slice() {
                [Frame::Integer(n), Frame::Integer(ticket)] => {
                    assert!(
                        *n == -3 || *ticket > 0,
                        "in the line unless reserved: {v:?}"
                    );
                    *n
                }
                other => panic!("wait: {other:?}"),
            },
            other => panic!("wait: {other:?}"),
        }
    }

    /// The wait script, and the bells that came ahead of its reply (a `PUBLISH` on the
    /// caller's own bell, from the script, is pushed before the reply), as (hand-off,
    /// resource).
    pub fn wait_told(&mut self, r: &str, claim_ms: u64) -> (i64, Vec<(String, String)>) {
        let q = format!("{QUEUE_PREFIX}{r}");
        let claim = claim_ms.to_string();
        let id = self.id.clone();
        let args: [&str; 10] = [
            "EVAL",
            script::WAIT,
            "2",
            r,
            &q,
            &id,
            &claim,
            "1",
            "600000",
            "30000",
        ];
        self.send(&args);
        let mut told = Vec::new();
        loop {
            match self.frame() {
                Frame::Push(items) if items.len() == 3 => {
                    let s = String::from_utf8_lossy(items[2].as_bytes().unwrap()).into_owned();
                    let (tag, r) = s.split_once(' ').expect("<hand-off> <resource>");
                    told.push((tag.to_string(), r.to_string()));
                }
                Frame::Array(v) => match v.as_slice() {
                    [Frame::Integer(n), Frame::Integer(_)] => {
                        // A message the script published to the caller's own channel comes
                        // ahead of the reply from Redis 7.0, after it from Valkey 9.1: both
                        // are read (up to a PING's answer).
                        told.extend(self.tagged_bells());
                        return (*n, told);
                    }
                    other => panic!("wait: {other:?}"),
                },
                other => panic!("wait: {other:?}"),
            }
        }
    }

    /// The enter script (a first try that joins the line if it is refused): `Ok(())` when it
    /// took the resource, else the wait's `[-3 or the PTTL, the caller's ticket]`.
    pub fn enter(&mut self, r: &str, token: &str, claim_ms: u64) -> Result<(), (i64, i64)> {
        let q = format!("{QUEUE_PREFIX}{r}");
        let id = self.id.clone();
        match self.eval(
            script::ENTER,
            &[r, &q],
            &[&id, &claim_ms.to_string(), "1", "600000", "30000", token],
        ) {
            Frame::Integer(0) => Ok(()),
            Frame::Array(v) => match v.as_slice() {
                [Frame::Integer(n), Frame::Integer(ticket)] => Err((*n, *ticket)),
                other => panic!("enter: {other:?}"),
            },
            other => panic!("enter: {other:?}"),
        }
    }

    pub fn claim(&mut self, r: &str, token: &str) -> i64 {
        self.claim_handed(r, token, "")
    }

    /// A claim woken by the bells of the hand-off tagged `handoff`.
    pub fn claim_handed(&mut self, r: &str, token: &str, handoff: &str) -> i64 {
        let q = format!("{QUEUE_PREFIX}{r}");
        let id = self.id.clone();
        match self.eval(
            script::CLAIM,
            &[r, &q],
            &[token, "30000", "1", &id, "60000", handoff],
        ) {
            Frame::Integer(n) => n,
            other => panic!("claim: {other:?}"),
        }
    }

    /// The wait script over the set `rs` (a lock over several resources): `-3` when every
    /// one is reserved for the caller or free with it at the head, else the longest `PTTL`.
    pub fn wait_set(&mut self, rs: &[&str], claim_ms: u64) -> i64 {
        let keys = set_keys(rs);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let id = self.id.clone();
        let n = rs.len().to_string();
        match self.eval(
            script::WAIT,
            &keys,
            &[&id, &claim_ms.to_string(), &n, "600000", "30000"],
        ) {
            Frame::Array(v) => match v.as_slice() {
                [Frame::Integer(n), Frame::Integer(_)] => *n,
                other => panic!("wait: {other:?}"),
            },
            other => panic!("wait: {other:?}"),
        }
    }

    /// The claim script over the set `rs`: `0` taken, `-i` resource `i` held by another.
    pub fn claim_set(&mut self, rs: &[&str], token: &str, claim_ms: u64) -> i64 {
        let keys = set_keys(rs);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let id = self.id.clone();
        let n = rs.len().to_string();
        match self.eval(
            script::CLAIM,
            &keys,
            &[token, "30000", &n, &id, &claim_ms.to_string(), ""],
        ) {
            Frame::Integer(n) => n,
            other => panic!("claim: {other:?}"),
        }
    }

    pub fn handoff(&mut self, r: &str, token: &str, claim_ms: u64) -> i64 {
        let q = format!("{QUEUE_PREFIX}{r}");
        let id = self.id.clone();
        match self.eval(
            script::HANDOFF,
            &[r, &q],
            &[token, &claim_ms.to_string(), &id, "1", "0"],
        ) {
            Frame::Integer(n) => n,
            other => panic!("handoff: {other:?}"),
        }
    }
}

pub fn get(addr: &str, key: &str) -> Option<String> {
    redis(addr, &["GET", key])
        .as_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

pub fn queue(addr: &str, r: &str) -> Vec<String> {
    match redis(addr, &["ZRANGE", &format!("{QUEUE_PREFIX}{r}"), "0", "-1"]) {
        Frame::Array(items) => items
            .iter()
            .map(|f| String::from_utf8_lossy(f.as_bytes().unwrap()).into_owned())
            .collect(),
        other => panic!("ZRANGE: {other:?}"),
    }
}

pub const TOKEN_H: &str = "1111111111111111111111111111111111111111";
pub const TOKEN_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
pub const TOKEN_X: &str = "9999999999999999999999999999999999999999";

/// A set's script keys: its resources, then their lines.
fn set_keys(rs: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
    keys.extend(rs.iter().map(|r| format!("{QUEUE_PREFIX}{r}")));
    keys
}
