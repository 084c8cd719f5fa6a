//! Fair sequences (`fair.rs`) run on a [`Master`] and a real server, and compared.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use redlock_sim::Master;
use resp::{Decoder, Frame};
use testkit::local::LocalServer;

use super::fair::{fair_sequence, FairSequence};
use super::sequences::{Kind, Step};
use super::{describe, label, normalize_hello, sequences, server_kind, Answers, Real};

/// Runs every fair sequence against `server` (started) and the sim.
pub(crate) fn fair_model_matches(server: &LocalServer) {
    let addr = server.addr().to_string();
    let kind = match server_kind(&addr) {
        Ok(k) => k,
        Err(why) => return eprintln!("fair model vs real skipped: {why}"),
    };
    let mut master = Master::new(redlock_sim::Profile::new(kind));
    let clock = Instant::now();
    let mut tally: std::collections::BTreeMap<String, usize> = Default::default();
    let (mut commands, mut pushes) = (0, 0);
    let all = sequences();
    for &i in &all {
        let seq = fair_sequence(i);
        let (sim, real) = run_fair(&seq, &mut master, &addr, clock);
        if let Err(why) = compare_fair(&seq, &sim, &real) {
            let listing: Vec<String> = seq
                .steps
                .iter()
                .map(|s| format!("c{}: {}", s.conn, describe(&s.step.args)))
                .collect();
            panic!(
                "{kind:?}, fair sequence {i} (REDLOCK_SIM_SEQUENCE={i}): {why}\nsequence:\n  {}",
                listing.join("\n  ")
            );
        }
        for (c, answers) in real.iter().enumerate() {
            commands += answers.replies.len();
            pushes += answers.pushes.len();
            let steps = seq.steps.iter().filter(|s| s.conn == c && seq.replied(s));
            for (s, r) in steps.zip(&answers.replies) {
                *tally.entry(label(&s.step, r)).or_default() += 1;
            }
            for (_, p) in &answers.pushes {
                let Frame::Push(items) = p else { continue };
                let what = items
                    .first()
                    .and_then(|f| f.as_bytes().cloned())
                    .unwrap_or_default();
                *tally
                    .entry(format!("push {}", String::from_utf8_lossy(&what)))
                    .or_default() += 1;
            }
        }
    }
    eprintln!("fair model vs real, {kind:?}: {commands} commands agree, {pushes} pushes; reached:");
    for (l, n) in &tally {
        eprintln!("  {n:6}  {l}");
    }
    if all.len() >= 300 {
        let missed: Vec<&&str> = FAIR_MUST_REACH
            .iter()
            .filter(|m| !tally.keys().any(|l| l.contains(**m)))
            .collect();
        assert!(
            missed.is_empty(),
            "{kind:?}: fair paths not reached: {missed:?}"
        );
    }
}

/// Fair paths every full run must reach.
const FAIR_MUST_REACH: &[&str] = &[
    "wait: array",
    "wait: error WRONGTYPE",
    "enter: array",
    "enter: 0",
    "enter: 1",
    "enter: error WRONGTYPE",
    "claim: 0",
    "claim: -1",
    "claim: >1",
    "handoff: 1",
    "handoff: 0",
    "handoff: -1",
    "leave: 1",
    "leave: 0",
    "EVALSHA wait: error NOSCRIPT",
    // The function library's fair functions (a failed call names the library's line).
    "FCALL wait: array",
    "FCALL claim: error WRONGTYPE",
    // (The hand-off passes keys of another type by since session 23: it has no error path.)
    "FCALL handoff: 1",
    "FCALL handoff: 0",
    "claim: error WRONGTYPE",
    "ZADD: error WRONGTYPE",
    "ZADD: error ERR GT, LT",
    "ZRANGE: array",
    "ZSCORE: bulk",
    "ZSCORE: null",
    "PUBLISH: 1",
    "PUBLISH: 0",
    "GET: error WRONGTYPE",
    "push message",
    "push subscribe",
    "push invalidate",
];

/// Runs `seq` on both sides: each connection's answers.
pub(crate) fn run_fair(
    seq: &FairSequence,
    master: &mut Master,
    addr: &str,
    clock: Instant,
) -> (Vec<Answers>, Vec<Answers>) {
    let mut sim: Vec<Answers> = (0..seq.conns).map(|_| Answers::default()).collect();
    let mut real: Vec<Answers> = (0..seq.conns).map(|_| Answers::default()).collect();
    let ids: Vec<_> = (0..seq.conns).map(|_| master.connect()).collect();
    let mut servers: Vec<Real> = (0..seq.conns).map(|_| Real::connect(addr)).collect();
    let mut decoders: Vec<Decoder> = (0..seq.conns).map(|_| Decoder::default()).collect();
    let mut worst_rtt = 0u64;
    for s in &seq.steps {
        if let Kind::Sleep(ms) = s.step.kind {
            std::thread::sleep(Duration::from_millis(ms));
            continue;
        }
        let mut bytes = BytesMut::new();
        let args: Vec<&[u8]> = s.step.args.iter().map(|a| &a[..]).collect();
        resp::encode_command(&mut bytes, &args);
        let now = clock.elapsed().as_millis() as u64;
        assert!(
            master.feed(ids[s.conn], &bytes, now),
            "the sim closed the connection"
        );
        // Every connection's output: the reply here, and pushes anywhere.
        for (c, &id) in ids.iter().enumerate() {
            let mut out = BytesMut::from(&master.take_output(id)[..]);
            while let Some(f) = decoders[c]
                .decode(&mut out)
                .expect("the sim writes valid RESP")
            {
                sim[c].take(f);
            }
            assert!(out.is_empty(), "the sim wrote part of a frame");
        }
        let sent = Instant::now();
        if seq.replied(s) {
            servers[s.conn].exchange(&bytes, &mut real[s.conn]);
            worst_rtt = worst_rtt.max(sent.elapsed().as_millis() as u64 + 1);
            real[s.conn].slack_ms.push(worst_rtt);
        } else {
            subscribe(&mut servers[s.conn], &bytes, &mut real[s.conn]);
        }
    }
    for id in ids {
        master.close(id);
    }
    (sim, real)
}

/// Sends a `SUBSCRIBE` on a RESP3 connection, and reads until its confirmation (a push, in
/// place of a reply).
fn subscribe(real: &mut Real, bytes: &[u8], answers: &mut Answers) {
    use std::io::{Read, Write};
    real.stream.write_all(bytes).expect("write to the server");
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while let Some(f) = real.decoder.decode(&mut real.buf).expect("valid RESP") {
            let confirmed = matches!(&f, Frame::Push(items)
                if items.first().and_then(|k| k.as_bytes()).is_some_and(|k| k.as_ref() == b"subscribe"));
            answers.take(f);
            if confirmed {
                // (No reply follows: the slack of the next reply is measured then.)
                return;
            }
        }
        let n = real.stream.read(&mut chunk).expect("a push within 10 s");
        assert!(n > 0, "the server closed the connection");
        real.buf.extend_from_slice(&chunk[..n]);
    }
}

/// A `PTTL` read on both sides: equal, or both a ttl within the slack.
fn close(a: &Frame, b: &Frame, slack: u64) -> bool {
    match (a, b) {
        (Frame::Integer(x), Frame::Integer(y)) if *x >= 0 && *y >= 0 => {
            x.abs_diff(*y) <= 2 * slack + 3
        }
        _ => a == b,
    }
}

/// Where the two sides' answers to `seq` differ, if they do.
pub(crate) fn compare_fair(
    seq: &FairSequence,
    sim: &[Answers],
    real: &[Answers],
) -> Result<(), String> {
    for c in 0..seq.conns {
        let steps: Vec<&Step> = seq
            .steps
            .iter()
            .filter(|s| s.conn == c && seq.replied(s))
            .map(|s| &s.step)
            .collect();
        let (s, r) = (&sim[c], &real[c]);
        if s.replies.len() != r.replies.len() {
            return Err(format!(
                "connection {c}: {} replies from the sim, {} from the server",
                s.replies.len(),
                r.replies.len()
            ));
        }
        for (i, (a, b)) in s.replies.iter().zip(&r.replies).enumerate() {
            let slack = r.slack_ms[i];
            let ok = match (steps[i].kind, a, b) {
                (Kind::Pttl, a, b) => close(a, b, slack),
                (Kind::Wait, Frame::Array(x), Frame::Array(y)) if x.len() == 2 && y.len() == 2 => {
                    close(&x[0], &y[0], slack) && x[1] == y[1]
                }
                (Kind::Hello, a, b) => normalize_hello(a, "v") == normalize_hello(b, "v"),
                _ => a == b,
            };
            if !ok {
                return Err(format!(
                    "connection {c}, reply {i} to {}: sim {a:?}, server {b:?}",
                    describe(&steps[i].args)
                ));
            }
        }
        let same = if seq.short {
            let sorted = |p: &[(usize, Frame)]| {
                let mut v: Vec<String> = p.iter().map(|(_, f)| format!("{f:?}")).collect();
                v.sort();
                v
            };
            sorted(&s.pushes) == sorted(&r.pushes)
        } else {
            s.pushes == r.pushes
        };
        if !same {
            return Err(format!(
                "connection {c}: pushes differ (in place: {}): sim {:?}, server {:?}",
                !seq.short, s.pushes, r.pushes
            ));
        }
    }
    Ok(())
}
