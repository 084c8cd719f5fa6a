//! The core is deterministic: time and randomness come in as arguments, so two engines fed
//! the same inputs with sources of the same seed give byte-identical outputs: every write,
//! every timeout asked for, every completed operation, every token and retry wait.

use std::time::{Duration, Instant};

use crate::engine::{Engine, IoEvent};
use crate::lock::Name;
use crate::op::{Acquisition, Next, Retry};
use crate::random::Seeded;

const HELLO: &[u8] = b"*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n";

/// What a node answers to the commands in `sent`: a Redis 7.0 that holds the keys in `held`.
fn answer(sent: &[u8], held: &[String]) -> Vec<u8> {
    let mut d = resp::Decoder::default();
    let mut buf = bytes::BytesMut::from(sent);
    let mut out = Vec::new();
    while let Ok(Some(resp::Frame::Array(args))) = d.decode(&mut buf) {
        let arg = |k: usize| {
            args.get(k)
                .and_then(|f| f.as_bytes())
                .map_or_else(Vec::new, |b| b.to_vec())
        };
        match arg(0).as_slice() {
            b"HELLO" => out.extend(HELLO),
            b"SCRIPT" => out.extend(b"$40\r\n0000000000000000000000000000000000000000\r\n"),
            b"PING" => {
                let n = arg(1);
                out.extend(format!("${}\r\n", n.len()).as_bytes());
                out.extend(&n);
                out.extend(b"\r\n");
            }
            b"SET" if held.iter().any(|h| h.as_bytes() == arg(1)) => out.extend(b"$-1\r\n"),
            b"SET" => out.extend(b"+OK\r\n"),
            _ => out.extend(b":1\r\n"),
        }
    }
    out
}

/// Five acquisitions (every other one of a resource node 2 holds for someone else) and a
/// retry decision after each, on an engine over three nodes, with randomness from `seed`.
/// Everything observable, as text, with instants as offsets from the start.
fn transcript(seed: u64) -> Vec<String> {
    let cfg = crate::Options {
        node_timeout: Duration::from_millis(50),
        ..crate::Options::with_nodes(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
    }
    .validate()
    .unwrap();
    let mut e: Engine<u32> = Engine::new(&cfg);
    let mut rng = Seeded::new(seed);
    let start = Instant::now();
    let mut now = start;
    let at = |t: Instant| format!("{:?}", t.saturating_duration_since(start));
    let mut log = Vec::new();
    let held: Vec<String> = vec!["r1".into(), "r3".into()];
    for k in 0..5u32 {
        let name = format!("r{k}");
        let mut acq = Acquisition::new(
            &cfg,
            [Name::new(&name)].into_iter().collect(),
            Duration::from_secs(10),
            &mut rng,
        )
        .unwrap();
        while let Some((cmd, until)) = acq.round(&cfg) {
            let t1 = now;
            e.submit(&cmd, until, t1, k);
            while let Some(ev) = e.poll_io() {
                log.push(format!("io {ev:?}"));
                if let IoEvent::Connect(i) = ev {
                    e.handle_connected(i);
                }
            }
            for i in 0..3 {
                let sent = e.transmit(i).to_vec();
                e.handle_written(i, sent.len());
                log.push(format!("node {i} sent {}", String::from_utf8_lossy(&sent)));
                // Node 2 holds the odd resources for another client.
                let holding: &[String] = if i == 2 { &held } else { &[] };
                now += Duration::from_micros(100 + 10 * u64::from(k));
                e.handle_input(i, &answer(&sent, holding), now);
            }
            log.push(format!("timeout {:?}", e.poll_timeout().map(at)));
            let done = e.poll_completed().expect("decided");
            log.push(format!(
                "completed {} {:?}",
                done.user,
                done.round.decision()
            ));
            acq.advance(&cfg, Ok((done.round, t1)), now);
        }
        match acq.finish() {
            Ok(lock) => log.push(format!(
                "lock {} token {} until {}",
                lock.resource(),
                lock.token().as_str(),
                at(lock.valid_until())
            )),
            Err(err) => {
                let next = Retry::new(&cfg).after(
                    err,
                    &[Name::new(&name)],
                    now,
                    &mut rng,
                    &mut Vec::new(),
                );
                log.push(match next {
                    Next::Wait(d) => format!("retry after {d:?}"),
                    Next::Watch(_) => "watch".into(),
                    Next::Fail(e) => format!("fail {e}"),
                });
            }
        }
    }
    log
}

#[test]
fn the_same_seed_and_inputs_give_byte_identical_outputs() {
    let (a, b) = (transcript(42), transcript(42));
    assert!(a.len() > 20, "{a:#?}");
    assert_eq!(a, b);
    assert!(a.iter().any(|l| l.starts_with("lock ")));
    // Another seed: other tokens, the same shape.
    let c = transcript(43);
    assert_ne!(a, c);
    assert_eq!(a.len(), c.len());
}
