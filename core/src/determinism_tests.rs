//! The core is deterministic: time and randomness come in as arguments, so two engines fed
//! the same inputs with sources of the same seed give byte-identical outputs: every write,
//! every timeout asked for, every completed operation, every token and retry wait. The
//! operations run as the drivers run them: through [`Operation::step`], one loop for all.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::engine::{Engine, IoEvent};
use crate::error::Error;
use crate::lock::Name;
use crate::op::{Acquire, Cx, Extend, Input, Operation, Release, Retry, Step};
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
            b"CLIENT" => out.extend(b"+OK\r\n"),
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

/// A driver's loop, as the library's drivers run it, over `e` and nodes that answer as
/// [`answer`] says (node `i` holds the keys in `held(i)`): rounds written to every node and
/// answered 100 µs apart, sleeps and waits as simulated time. Everything observable goes into
/// `log`, with instants as offsets from `start`.
struct Sim<'c> {
    cfg: &'c Config,
    e: Engine<u32>,
    rng: Seeded,
    start: Instant,
    now: Instant,
    log: Vec<String>,
    held: Vec<Vec<String>>,
}

impl Sim<'_> {
    fn at(&self, t: Instant) -> String {
        format!("{:?}", t.saturating_duration_since(self.start))
    }

    fn run<O: Operation>(&mut self, mut op: O, user: u32) -> Result<O::Output, Error> {
        let mut input = Input::Start;
        let mut events = Vec::new();
        loop {
            let mut cx = Cx {
                now: self.now,
                rng: &mut self.rng,
                events: &mut events,
            };
            let step = op.step(input, self.cfg, &mut cx);
            input = match step {
                Step::Round(cmd, until) => {
                    let t1 = self.now;
                    self.e.submit(&cmd, until, t1, user);
                    while let Some(ev) = self.e.poll_io() {
                        self.log.push(format!("io {ev:?}"));
                        if let IoEvent::Connect(i) = ev {
                            self.e.handle_connected(i);
                        }
                    }
                    for i in 0..self.cfg.nodes.len() {
                        let sent = self.e.transmit(i).to_vec();
                        self.e.handle_written(i, sent.len());
                        self.log
                            .push(format!("node {i} sent {}", String::from_utf8_lossy(&sent)));
                        self.now += Duration::from_micros(100);
                        let reply = answer(&sent, &self.held[i]);
                        self.e.handle_input(i, &reply, self.now);
                    }
                    let timeout = self.e.poll_timeout().map(|t| self.at(t));
                    self.log.push(format!("timeout {timeout:?}"));
                    let done = self.e.poll_completed().expect("every node answered");
                    self.log.push(format!(
                        "completed {} {:?}",
                        done.user,
                        done.round.decision()
                    ));
                    Input::Round(Ok((done.round, t1)))
                }
                Step::Sleep(d) | Step::Jitter(d) => {
                    self.log.push(format!("sleep {d:?}"));
                    self.now += d;
                    Input::Slept
                }
                Step::Watch(key) => {
                    self.log
                        .push(format!("watch {}", String::from_utf8_lossy(key)));
                    Input::Watching
                }
                Step::Await(deadline) => {
                    // No node pushes an invalidation: the wait runs to its deadline.
                    self.log
                        .push(format!("await {:?}", deadline.map(|t| self.at(t))));
                    if let Some(t) = deadline {
                        self.now = self.now.max(t);
                    }
                    Input::Woken(None)
                }
                Step::Done => break,
            };
        }
        self.log
            .extend(events.iter().map(|ev| format!("event {ev:?}")));
        op.finish()
    }
}

/// Five resources on three nodes, with randomness from `seed`: each is acquired with
/// retries for at most 300 ms (nodes 1 and 2 hold the odd ones for someone else, so those
/// tries fail and wait between tries), then extended and released. Everything observable, as
/// text.
fn transcript(seed: u64, wakeups: bool) -> Vec<String> {
    let cfg = crate::Options {
        node_timeout: Duration::from_millis(50),
        retry_delay: Duration::from_millis(40),
        wakeups,
        ..crate::Options::with_nodes(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"])
    }
    .validate()
    .unwrap();
    let start = Instant::now();
    let odd: Vec<String> = vec!["r1".into(), "r3".into()];
    let mut sim = Sim {
        cfg: &cfg,
        e: Engine::new(&cfg),
        rng: Seeded::new(seed),
        start,
        now: start,
        log: Vec::new(),
        held: vec![Vec::new(), odd.clone(), odd],
    };
    for k in 0..5u32 {
        let name = format!("r{k}");
        let names = [Name::new(&name)].into_iter().collect();
        let retry = Retry::within(&cfg, Duration::from_millis(300), sim.now);
        match sim.run(Acquire::new(names, Duration::from_secs(10), retry), k) {
            Ok(mut lock) => {
                let line = format!(
                    "lock {} token {} until {}",
                    lock.resource(),
                    lock.token().as_str(),
                    sim.at(lock.valid_until())
                );
                sim.log.push(line);
                let extended = sim.run(Extend::new(&mut lock, Duration::from_secs(20)), k);
                let line = format!("extend {extended:?} until {}", sim.at(lock.valid_until()));
                sim.log.push(line);
                let released = sim.run(Release::new(&lock), k);
                sim.log.push(format!("release {released:?}"));
            }
            Err(err) => sim.log.push(format!("fail {err}")),
        }
    }
    sim.log
}

#[test]
fn the_same_seed_and_inputs_give_byte_identical_outputs() {
    for wakeups in [false, true] {
        let (a, b) = (transcript(42, wakeups), transcript(42, wakeups));
        assert!(a.len() > 50, "{a:#?}");
        assert_eq!(a, b);
        // Every kind of step was taken: won and lost tries, waits (watches with wake-ups on),
        // extensions, releases.
        let wait = if wakeups { "watch " } else { "sleep " };
        for kind in ["lock ", "fail ", wait, "extend Ok", "release Ok"] {
            assert!(
                a.iter().any(|l| l.starts_with(kind)),
                "no {kind:?} in {a:#?}"
            );
        }
        // Another seed: other tokens and waits.
        let c = transcript(43, wakeups);
        assert_ne!(a, c);
    }
}
