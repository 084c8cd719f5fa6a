//! The engine against simulated nodes: bytes in, bytes out, a clock advanced by hand. No
//! sockets, no sleeping; every test runs in microseconds.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::command::{Form, OpKind};
use crate::conn::CONNECT_TIMEOUT;
use crate::lock::Name;
use crate::round::Until;
use crate::Token;

const TIMEOUT: Duration = Duration::from_millis(100);
const OK: &[u8] = b"+OK\r\n";
const NULL: &[u8] = b"$-1\r\n";
/// A Redis 7.0 `HELLO` reply (RESP2), which has no native compare-and-delete.
const HELLO_REDIS7: &[u8] =
    b"*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n";
/// The `SCRIPT LOAD`s a new connection sends first (after `HELLO`).
const PRELOADS: usize = crate::script::ALL.len();

/// An engine over `n` nodes, its clock, and what each node has been sent.
struct Sim {
    e: Engine<u32>,
    now: Instant,
    token: Token,
    res: [Name; 1],
    /// What every node answers to `HELLO` (nothing is sent under `Scripts::Eval`).
    hello: &'static [u8],
    /// Wake-ups on: connections answer `HELLO 3` (`CLIENT TRACKING ON` then follows the
    /// commands queued before that reply came, and is answered by the test).
    tracking: bool,
}

/// A Redis 7.0 `HELLO 3` reply (RESP3).
const HELLO3_REDIS7: &[u8] = b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n";

impl Sim {
    fn new(n: usize, fail_fast: bool) -> Sim {
        Sim::with(n, fail_fast, crate::Scripts::Auto, HELLO_REDIS7)
    }

    /// Wake-ups on: connections ask for RESP3 and tracking, and the nodes agree.
    fn tracking(n: usize) -> Sim {
        let mut sim = Sim::build(n, true, crate::Scripts::Auto, HELLO3_REDIS7, true);
        sim.tracking = true;
        sim
    }

    fn with(n: usize, fail_fast: bool, scripts: crate::Scripts, hello: &'static [u8]) -> Sim {
        Sim::build(n, fail_fast, scripts, hello, false)
    }

    fn build(
        n: usize,
        fail_fast: bool,
        scripts: crate::Scripts,
        hello: &'static [u8],
        wakeups: bool,
    ) -> Sim {
        let cfg = crate::Options {
            node_timeout: TIMEOUT,
            fail_fast,
            scripts,
            wakeups,
            ..crate::Options::with_nodes((1..=n).map(|p| format!("127.0.0.1:{p}")))
        }
        .validate()
        .unwrap();
        Sim {
            e: Engine::new(&cfg),
            now: Instant::now(),
            token: Token::from_random(&mut crate::random::Seeded::new(105)),
            res: [Name::new("res")],
            hello: if scripts == crate::Scripts::Eval {
                b""
            } else {
                hello
            },
            tracking: false,
        }
    }

    fn cmd(&self, kind: OpKind) -> Command<'_> {
        Command {
            kind,
            resources: &self.res,
            token: Some(&self.token),
            ttl_ms: 10_000,
            counter: None,
            fence_value: 0,
            watch: None,
        }
    }

    fn submit(&mut self, kind: OpKind, fail_fast: bool, user: u32) -> OpId {
        let (token, res) = (self.token, self.res.clone());
        let cmd = Command {
            kind,
            resources: &res,
            token: Some(&token),
            ttl_ms: 10_000,
            counter: None,
            fence_value: 0,
            watch: None,
        };
        let until = if fail_fast {
            Until::Decided
        } else {
            Until::AllIn
        };
        self.e.submit(&cmd, until, self.now, user)
    }

    /// Takes the socket events; connects every socket asked for (the node answers the two
    /// script preloads a new connection sends) and returns the events.
    fn io(&mut self) -> Vec<IoEvent> {
        let mut events = Vec::new();
        while let Some(ev) = self.e.poll_io() {
            if let IoEvent::Connect(i) = ev {
                self.e.handle_connected(i);
                // HELLO (a server without native commands), then the script preloads.
                let mut loaded = self.hello.to_vec();
                loaded.extend(b"$1\r\nx\r\n".repeat(PRELOADS));
                self.e.handle_input(i, &loaded, self.now);
            }
            events.push(ev);
        }
        events
    }

    /// What node `i` has been sent since last asked, as written.
    fn sent(&mut self, i: usize) -> Vec<u8> {
        let out = self.e.transmit(i).to_vec();
        self.e.handle_written(i, out.len());
        out
    }

    fn reply(&mut self, i: usize, bytes: &[u8]) {
        self.e.handle_input(i, bytes, self.now);
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.e.handle_timeout(self.now);
    }

    fn completed(&mut self) -> Vec<Completed<u32>> {
        std::iter::from_fn(|| self.e.poll_completed()).collect()
    }
}

fn commands_in(bytes: &[u8]) -> usize {
    // Every command this client sends is an array: count the top-level `*` after CRLF.
    let mut d = resp::Decoder::default();
    let mut buf = bytes::BytesMut::from(bytes);
    let mut n = 0;
    while let Ok(Some(_)) = d.decode(&mut buf) {
        n += 1;
    }
    n
}

#[test]
fn a_round_opens_every_connection_and_writes_once_per_node() {
    let mut s = Sim::new(5, true);
    s.submit(OpKind::Acquire, true, 7);
    let events = s.io();
    assert_eq!(events, (0..5).map(IoEvent::Connect).collect::<Vec<_>>());
    for i in 0..5 {
        let out = s.sent(i);
        // HELLO, the script preloads, then the SET.
        assert_eq!(commands_in(&out), PRELOADS + 2, "node {i}");
        assert!(out.ends_with(b"$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n"));
        assert!(s.sent(i).is_empty(), "written once");
    }
}

#[test]
fn has_work_says_whether_a_pass_would_find_anything() {
    let mut s = Sim::new(3, false);
    assert!(!s.e.has_work(s.now), "a new engine");
    s.submit(OpKind::Acquire, false, 1);
    assert!(s.e.has_work(s.now), "sockets to open");
    s.io();
    assert!(s.e.has_work(s.now), "commands to write");
    for i in 0..3 {
        s.sent(i);
    }
    while s.e.poll_event().is_some() {}
    assert!(!s.e.has_work(s.now), "everything taken");
    assert!(
        s.e.has_work(s.now + TIMEOUT),
        "the round's deadline is due then"
    );
    for i in 0..3 {
        s.reply(i, OK);
    }
    assert!(s.e.has_work(s.now), "a decided round");
    assert_eq!(s.completed().len(), 1);
    assert!(!s.e.has_work(s.now), "nothing left");
}

#[test]
fn fail_fast_decides_at_the_quorum_either_way() {
    let mut s = Sim::new(5, true);
    let won = s.submit(OpKind::Acquire, true, 1);
    s.io();
    for i in 0..5 {
        s.sent(i);
    }
    s.reply(0, OK);
    s.reply(1, OK);
    assert!(s.completed().is_empty());
    s.reply(2, OK);
    let done = s.completed();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].user, 1);
    let _ = won;
    assert_eq!(done[0].round.decision(), Decision::Won);
    assert_eq!(done[0].round.count(&NodeOutcome::Undecided), 2);

    let lost = s.submit(OpKind::Acquire, true, 2);
    for i in 0..5 {
        s.sent(i);
    }
    // Nodes 3 and 4 still owe the first round's replies: they come first.
    s.reply(3, OK);
    s.reply(4, OK);
    s.reply(0, NULL);
    s.reply(1, NULL);
    assert!(s.completed().is_empty());
    s.reply(2, NULL);
    let done = s.completed();
    assert_eq!(
        (done[0].user, done[0].round.decision()),
        (2, Decision::Lost)
    );
    let _ = lost;
    assert_eq!(s.e.stats().nodes[3].late_replies, 1);
    assert_eq!(s.e.in_flight(), 0);
}

/// A round sent without waiting (`Until::Sent`) is complete once queued, written only to the
/// nodes it is meant for, after what each connection already owes; its replies are read and
/// dropped, and no deadline is set for it.
#[test]
fn a_round_sent_without_waiting_is_over_once_written() {
    let mut s = Sim::new(5, true);
    s.submit(OpKind::Acquire, true, 1);
    s.io();
    for i in 0..5 {
        s.sent(i);
    }
    for i in [0, 2, 4] {
        s.reply(i, OK);
    }
    assert_eq!(s.completed().len(), 1);
    // Nodes 1 and 3 still owe the acquire's reply: the next command goes to them only.
    let (token, res) = (s.token, s.res.clone());
    let release = Command {
        kind: OpKind::Release,
        resources: &res,
        token: Some(&token),
        ttl_ms: 0,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    s.e.submit(&release, Until::Sent { except: 0b10101 }, s.now, 2);
    let done = s.completed();
    assert_eq!(done.len(), 1, "complete at once");
    assert_eq!(done[0].user, 2);
    assert_eq!(done[0].round.decision(), Decision::Open);
    assert_eq!(done[0].round.count(&NodeOutcome::Undecided), 5);
    assert_eq!(s.e.in_flight(), 0);
    assert_eq!(s.e.poll_timeout(), None, "no deadline for it");
    for i in 0..5 {
        let out = s.sent(i);
        assert_eq!(commands_in(&out), usize::from(i % 2 == 1), "node {i}");
    }
    // The acquire's late refusals, then the release's replies: read and dropped, and the
    // connections stay in step.
    for i in [1, 3] {
        s.reply(i, NULL);
        s.reply(i, b":0\r\n");
        assert_eq!(s.e.stats().nodes[i].late_replies, 2, "node {i}");
        assert_eq!(s.e.owed(i).0, 0, "node {i}");
    }
    assert!(s.completed().is_empty());
}

#[test]
fn without_fail_fast_every_node_is_awaited_or_times_out_at_the_deadline() {
    let mut s = Sim::new(3, false);
    s.submit(OpKind::Acquire, false, 1);
    s.io();
    s.reply(0, OK);
    s.reply(1, OK);
    assert!(s.completed().is_empty());
    assert_eq!(s.e.poll_timeout(), Some(s.now + TIMEOUT));
    s.advance(TIMEOUT - Duration::from_millis(1));
    assert!(s.completed().is_empty(), "not before the deadline");
    s.advance(Duration::from_millis(1));
    let done = s.completed();
    assert_eq!(done[0].round.decision(), Decision::Won);
    assert_eq!(done[0].round.count(&NodeOutcome::Timeout), 1);
    assert_eq!(s.e.stats().nodes[2].timeouts, 1);
}

#[test]
fn a_late_reply_goes_to_its_own_round_and_is_dropped() {
    let mut s = Sim::new(3, false);
    s.submit(OpKind::Acquire, false, 1);
    s.io();
    s.reply(0, OK);
    s.reply(1, OK);
    s.advance(TIMEOUT);
    assert_eq!(s.completed().len(), 1);
    // Node 2's reply to the first round comes now, then its reply to the second: the second
    // round must get `held`, not the late `OK`.
    let second = s.submit(OpKind::Acquire, false, 2);
    s.reply(2, OK);
    s.reply(0, NULL);
    s.reply(1, NULL);
    assert!(s.completed().is_empty());
    s.reply(2, NULL);
    let done = s.completed();
    assert_eq!(done[0].user, 2);
    let _ = second;
    assert_eq!(done[0].round.count(&NodeOutcome::Held), 3);
}

#[test]
fn a_failed_connection_votes_in_every_round_waiting_on_it_and_backs_off() {
    let mut s = Sim::new(3, false);
    s.submit(OpKind::Acquire, false, 1);
    s.submit(OpKind::Acquire, false, 2);
    s.io();
    s.e.handle_closed(2, NodeOutcome::Io(io::ErrorKind::ConnectionReset), s.now);
    s.reply(0, b"+OK\r\n+OK\r\n");
    s.reply(1, b"+OK\r\n+OK\r\n");
    let done = s.completed();
    assert_eq!(done.len(), 2);
    for d in &done {
        assert_eq!(
            d.round.reports_iter().nth(2),
            Some(&NodeOutcome::Io(io::ErrorKind::ConnectionReset))
        );
    }
    // The first reconnect is at once; a second failure in a row waits out the backoff.
    s.submit(OpKind::Acquire, true, 3);
    assert_eq!(s.io(), vec![IoEvent::Connect(2)]);
    s.e.handle_closed(2, NodeOutcome::Io(io::ErrorKind::ConnectionRefused), s.now);
    s.reply(0, OK);
    s.reply(1, OK);
    s.completed();
    s.submit(OpKind::Acquire, true, 4);
    assert!(s.io().is_empty(), "in its backoff: not asked");
    s.reply(0, OK);
    s.reply(1, OK);
    let done = s.completed();
    assert_eq!(
        done[0].round.reports_iter().nth(2),
        Some(&NodeOutcome::Down)
    );
    s.now += crate::conn::BACKOFF_MIN;
    s.submit(OpKind::Acquire, true, 5);
    assert_eq!(s.io(), vec![IoEvent::Connect(2)]);
}

#[test]
fn a_reply_owed_past_the_stale_limit_replaces_the_connection() {
    let mut s = Sim::new(3, true);
    s.submit(OpKind::Acquire, true, 1);
    s.io();
    s.reply(0, OK);
    s.reply(1, OK);
    s.completed();
    // Node 2 never answers. Within the limit its connection is kept...
    s.now += stale_after(TIMEOUT);
    s.submit(OpKind::Acquire, true, 2);
    assert!(s.io().is_empty());
    s.reply(0, OK);
    s.reply(1, OK);
    s.completed();
    // ...past it, it is dropped and opened again before the next command is queued.
    s.now += Duration::from_millis(1);
    s.submit(OpKind::Acquire, true, 3);
    assert_eq!(s.io(), vec![IoEvent::Close(2), IoEvent::Connect(2)]);
    assert_eq!(s.e.stats().nodes[2].stale_replaced, 1);
    let out = s.sent(2);
    assert_eq!(
        commands_in(&out),
        PRELOADS + 2,
        "HELLO, preloads and the new SET only"
    );
}

#[test]
fn a_connect_that_takes_too_long_fails() {
    let mut s = Sim::new(3, false);
    s.submit(OpKind::Acquire, false, 1);
    // Nodes 0 and 1 connect; node 2's connect hangs.
    let mut connects = Vec::new();
    while let Some(ev) = s.e.poll_io() {
        connects.push(ev);
    }
    for i in 0..2 {
        s.e.handle_connected(i);
    }
    assert!(
        s.e.transmit(2).is_empty(),
        "nothing written before the connect ends"
    );
    // HELLO, the script preloads, then the SET.
    let mut answer = HELLO_REDIS7.to_vec();
    answer.extend(b"$1\r\nx\r\n".repeat(PRELOADS));
    answer.extend(OK);
    s.reply(0, &answer);
    s.reply(1, &answer);
    s.advance(TIMEOUT);
    assert_eq!(s.completed().len(), 1);
    assert_eq!(s.e.poll_timeout(), Some(s.now - TIMEOUT + CONNECT_TIMEOUT));
    s.advance(CONNECT_TIMEOUT);
    assert_eq!(s.io(), vec![IoEvent::Close(2)]);
}

#[test]
fn noscript_is_answered_with_the_eval_form_after_the_round_is_decided() {
    let mut s = Sim::new(3, true);
    s.submit(OpKind::Release, true, 1);
    s.io();
    for i in 0..3 {
        s.sent(i);
    }
    s.reply(0, b":1\r\n");
    s.reply(1, b":1\r\n");
    assert_eq!(s.completed()[0].round.decision(), Decision::Won);
    assert!(s.e.owes_scripted());
    // Node 2's script cache was flushed: it gets the EVAL form, and every script again.
    s.reply(2, b"-NOSCRIPT No matching script.\r\n");
    let out = s.sent(2);
    let mut eval = Vec::new();
    s.cmd(OpKind::Release).encode(&mut eval, Form::Eval);
    assert!(
        out.starts_with(&eval),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(commands_in(&out), 1 + PRELOADS);
    assert_eq!(s.e.stats().nodes[2].noscript_fallbacks, 1);
    let mut replies = b":1\r\n".to_vec();
    replies.extend(b"$1\r\nx\r\n".repeat(PRELOADS));
    s.reply(2, &replies);
    assert!(!s.e.owes_scripted());
    assert_eq!(s.e.stats().nodes[2].late_replies, 1);
}

#[test]
fn many_rounds_submitted_together_go_out_in_one_write_per_node() {
    let mut s = Sim::new(5, true);
    for k in 0..50 {
        s.submit(OpKind::Acquire, true, k);
    }
    s.io();
    for i in 0..5 {
        assert_eq!(
            commands_in(&s.sent(i)),
            PRELOADS + 51,
            "node {i}: preloads and 50 SETs"
        );
    }
    for i in 0..3 {
        s.reply(i, &OK.repeat(50));
    }
    let done = s.completed();
    assert_eq!(done.len(), 50);
    let users: Vec<u32> = done.iter().map(|d| d.user).collect();
    assert_eq!(users, (0..50).collect::<Vec<_>>(), "completed in order");
}

#[test]
fn a_protocol_error_drops_the_connection_and_fails_its_rounds() {
    let mut s = Sim::new(3, false);
    s.submit(OpKind::Acquire, false, 1);
    s.io();
    s.reply(0, OK);
    s.reply(1, OK);
    s.reply(2, b"!!not resp\r\n");
    assert_eq!(s.io(), vec![IoEvent::Close(2)]);
    let done = s.completed();
    assert!(matches!(
        done[0].round.reports_iter().nth(2),
        Some(NodeOutcome::Protocol(_))
    ));
    assert_eq!(s.e.stats().nodes[2].protocol_errors, 1);
}

/// Every operation completes exactly once, whatever order replies, failures and timeouts come
/// in: a seeded random schedule over many rounds.
#[test]
fn every_operation_completes_exactly_once_whatever_the_order_of_events() {
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut s = Sim::new(5, rng.random_bool(0.5));
        let mut submitted: HashMap<u32, OpId> = HashMap::new();
        let mut seen: HashMap<u32, usize> = HashMap::new();
        // What each node still owes, in order (one reply per command).
        let mut owed: Vec<usize> = vec![0; 5];
        let mut next = 0u32;
        for _ in 0..300 {
            match rng.random_range(0..10) {
                0..=2 => {
                    let kind =
                        [OpKind::Acquire, OpKind::Release, OpKind::Extend][rng.random_range(0..3)];
                    let id = s.submit(kind, rng.random_bool(0.5), next);
                    submitted.insert(next, id);
                    next += 1;
                }
                3..=6 => {
                    let i = rng.random_range(0..5);
                    let reply: &[u8] =
                        [OK, NULL, b":1\r\n", b":0\r\n", b":-1\r\n"][rng.random_range(0..5)];
                    if owed[i] > 0 {
                        owed[i] -= 1;
                        s.reply(i, reply);
                    }
                }
                7 => {
                    let i = rng.random_range(0..5);
                    s.e.handle_closed(i, NodeOutcome::Io(io::ErrorKind::ConnectionReset), s.now);
                    owed[i] = 0;
                }
                _ => s.advance(Duration::from_millis(rng.random_range(0..60))),
            }
            let mut fresh = [false; 5];
            for ev in s.io() {
                let i = match ev {
                    IoEvent::Connect(i) | IoEvent::Close(i) => i,
                };
                owed[i] = 0;
                fresh[i] = matches!(ev, IoEvent::Connect(_));
            }
            for (i, owes) in owed.iter_mut().enumerate() {
                // The two preloads of a fresh connection were answered by `io`.
                let preloads = if fresh[i] { PRELOADS + 1 } else { 0 };
                *owes += commands_in(&s.sent(i)).saturating_sub(preloads);
            }
            for d in s.completed() {
                *seen.entry(d.user).or_default() += 1;
                assert!(submitted.contains_key(&d.user), "seed {seed}");
                assert_ne!(d.round.decision(), Decision::Open, "seed {seed}");
            }
        }
        // Past every deadline, nothing is left in flight.
        s.advance(TIMEOUT * 2);
        for d in s.completed() {
            *seen.entry(d.user).or_default() += 1;
        }
        assert_eq!(s.e.in_flight(), 0, "seed {seed}");
        for u in 0..next {
            assert_eq!(seen.get(&u), Some(&1), "seed {seed}: op {u} completed once");
        }
    }
}

const HELLO_VALKEY9: &[u8] =
    b"*4\r\n$6\r\nserver\r\n$6\r\nvalkey\r\n$7\r\nversion\r\n$5\r\n9.1.2\r\n";

#[test]
fn servers_with_native_commands_get_them_and_others_get_scripts() {
    use crate::conn::Native;
    // Detection from HELLO, RESP2 and RESP3, and the versions that have the commands.
    let hello = |bytes: &[u8]| {
        let mut d = resp::Decoder::default();
        Native::of_hello(
            &d.decode(&mut bytes::BytesMut::from(bytes))
                .unwrap()
                .unwrap(),
        )
    };
    assert_eq!(hello(HELLO_VALKEY9), Some(Native::Valkey));
    assert_eq!(hello(HELLO_REDIS7), None);
    assert_eq!(
        hello(b"%2\r\n+server\r\n+redis\r\n+version\r\n+8.4.0\r\n"),
        Some(Native::Redis)
    );
    assert_eq!(
        hello(b"*4\r\n$6\r\nserver\r\n$6\r\nvalkey\r\n$7\r\nversion\r\n$5\r\n8.1.0\r\n"),
        None
    );
    assert_eq!(hello(b"-ERR unknown command 'HELLO'\r\n"), None);

    let mut s = Sim::with(3, true, crate::Scripts::Auto, HELLO_VALKEY9);
    s.submit(OpKind::Acquire, true, 1);
    s.io();
    for i in 0..3 {
        assert!(String::from_utf8_lossy(&s.sent(i)).contains("HELLO"));
        s.reply(i, OK);
    }
    s.completed();
    s.submit(OpKind::Release, true, 2);
    let out = String::from_utf8_lossy(&s.sent(0)).into_owned();
    assert!(out.contains("DELIFEQ") && !out.contains("EVALSHA"), "{out}");
    // `:0` from a native release: not ours, neither held nor gone for sure.
    s.reply(0, b":0\r\n");
    s.reply(1, b":1\r\n");
    s.reply(2, b":1\r\n");
    let round = s.completed().remove(0).round;
    assert_eq!(round.count(&NodeOutcome::NotOurs), 1);
    assert_eq!(round.decision(), Decision::Won);
    s.submit(OpKind::Extend, true, 3);
    let out = String::from_utf8_lossy(&s.sent(1)).into_owned();
    assert!(out.contains("IFEQ") && out.contains("$5\r\n10000"), "{out}");
    for i in 0..3 {
        s.sent(i);
        s.reply(i, if i == 0 { b"$-1\r\n" } else { OK });
    }
    let round = s.completed().remove(0).round;
    assert_eq!(
        (
            round.count(&NodeOutcome::Ok),
            round.count(&NodeOutcome::NotOurs)
        ),
        (2, 1)
    );
    assert_eq!(s.e.stats().nodes[0].native_commands, 2);

    // Eval: no HELLO, scripts everywhere.
    let mut s = Sim::with(3, true, crate::Scripts::Eval, HELLO_VALKEY9);
    s.submit(OpKind::Release, true, 1);
    s.io();
    let out = String::from_utf8_lossy(&s.sent(0)).into_owned();
    assert!(!out.contains("HELLO") && out.contains("EVALSHA"), "{out}");

    // Native, on a server that said it has none: that node votes an error at once.
    let mut s = Sim::with(3, true, crate::Scripts::Native, HELLO_REDIS7);
    s.submit(OpKind::Acquire, true, 1);
    s.io();
    for i in 0..3 {
        s.sent(i);
        s.reply(i, OK);
    }
    s.completed();
    s.submit(OpKind::Release, true, 2);
    assert!(
        s.sent(0).is_empty(),
        "nothing sent to a server without the commands"
    );
    s.reply(1, b":1\r\n");
    s.reply(2, b":1\r\n");
    let round = s.completed().remove(0).round;
    assert!(
        matches!(round.reports_iter().next(), Some(NodeOutcome::Server(m)) if m.contains("native"))
    );
}

/// An invalidation push of `key`.
fn invalidate(key: &str) -> Vec<u8> {
    format!(
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n",
        key.len()
    )
    .into_bytes()
}

#[test]
fn a_pushed_invalidation_wakes_the_watches_of_its_key_once_and_never_votes() {
    let mut sim = Sim::tracking(3);
    // A round opens the connections; they agree to RESP3 and tracking.
    sim.submit(OpKind::Pttl, false, 1);
    sim.io();
    for i in 0..3 {
        let sent = sim.sent(i);
        // Tracking is asked for after the server agreed to RESP3, so after the round's
        // command, which was queued before that reply came.
        let at = |what: &[u8]| sent.windows(what.len()).position(|w| w == what);
        assert!(at(b"TRACKING") > at(b"PTTL"), "node {i}");
    }
    assert_eq!(sim.e.tracking(), 0);
    sim.e.watch(7, b"res"[..].into());
    sim.e.watch(8, b"other"[..].into());
    // Pushes before, between and after the replies (to the round, then to the tracking
    // request), on every node: the round takes its reply, the pushes go to the watches.
    for i in 0..3 {
        let mut bytes = invalidate("unrelated");
        bytes.extend(b":1500\r\n");
        bytes.extend(invalidate("unrelated"));
        bytes.extend(OK);
        bytes.extend(invalidate("unrelated"));
        sim.reply(i, &bytes);
    }
    assert_eq!(sim.e.tracking(), 3);
    let done = sim.completed();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].round.decision(), crate::round::Decision::Won);
    assert_eq!(sim.e.poll_woken(), None);
    sim.reply(1, &invalidate("res"));
    assert_eq!(sim.e.poll_woken(), Some((7, Wake::Pushed)));
    // One-shot: the same key pushed by another node wakes nobody again.
    sim.reply(2, &invalidate("res"));
    assert_eq!(sim.e.poll_woken(), None);
    assert!(sim.e.watching());
    // A flush wakes every watch left.
    sim.reply(0, b">2\r\n$10\r\ninvalidate\r\n_\r\n");
    assert_eq!(sim.e.poll_woken(), Some((8, Wake::Pushed)));
    assert!(!sim.e.watching());
    assert_eq!(sim.e.stats().nodes[1].invalidations, 4);
}

/// A node whose tracked read found the watched key absent cannot see the holder release it:
/// its invalidations of the key (another waiter's try, taken there and given back) wake
/// nobody, until a later read finds the key there. (Without this, each woken waiter tried,
/// took the key on that node, lost, gave it back and woke every other waiter: the simulator's
/// seed 25 ran 229 events per operation.)
#[test]
fn a_push_from_a_node_that_read_the_key_absent_wakes_nobody() {
    let mut sim = Sim::tracking(3);
    sim.submit(OpKind::Pttl, false, 1);
    sim.io();
    for i in 0..3 {
        sim.sent(i);
        sim.reply(i, b":1500\r\n+OK\r\n");
    }
    assert_eq!(sim.e.tracking(), 3);
    sim.completed();
    let read = |sim: &mut Sim, user: u32, pttls: [&[u8]; 3]| {
        sim.e.watch(u64::from(user), b"res"[..].into());
        sim.submit(OpKind::Watch, false, user);
        for (i, pttl) in pttls.iter().enumerate() {
            let sent = sim.sent(i);
            assert!(sent.windows(7).any(|w| w == b"CACHING"), "node {i}");
            // `CLIENT CACHING YES`'s reply, then the read's.
            let mut bytes = OK.to_vec();
            bytes.extend_from_slice(pttl);
            sim.reply(i, &bytes);
        }
        assert_eq!(sim.completed().len(), 1);
    };
    read(&mut sim, 7, [b":-2\r\n", b":900\r\n", b":900\r\n"]);
    sim.reply(0, &invalidate("res"));
    assert_eq!(sim.e.poll_woken(), None, "node 0 read it absent");
    sim.reply(1, &invalidate("res"));
    assert_eq!(sim.e.poll_woken(), Some((7, Wake::Pushed)));
    // A later read that finds it on node 0: node 0's pushes wake again.
    read(&mut sim, 8, [b":700\r\n", b":-2\r\n", b":700\r\n"]);
    sim.reply(1, &invalidate("res"));
    assert_eq!(sim.e.poll_woken(), None, "node 1 read it absent now");
    sim.reply(0, &invalidate("res"));
    assert_eq!(sim.e.poll_woken(), Some((8, Wake::Pushed)));
    // A dropped connection still wakes every watch.
    read(&mut sim, 9, [b":-2\r\n", b":-2\r\n", b":700\r\n"]);
    sim.e.handle_closed(0, NodeOutcome::Down, sim.now);
    assert_eq!(sim.e.poll_woken(), Some((9, Wake::Dropped)));
}

#[test]
fn a_dropped_connection_wakes_every_watch_and_unwatch_forgets() {
    let mut sim = Sim::tracking(3);
    sim.submit(OpKind::Pttl, false, 1);
    sim.io();
    for i in 0..3 {
        sim.sent(i);
        sim.reply(i, b":-2\r\n+OK\r\n");
    }
    sim.e.watch(1, b"res"[..].into());
    sim.e.watch(2, b"res"[..].into());
    sim.e.unwatch(2);
    sim.e
        .handle_closed(0, NodeOutcome::Io(io::ErrorKind::ConnectionReset), sim.now);
    assert_eq!(sim.e.poll_woken(), Some((1, Wake::Dropped)));
    assert_eq!(sim.e.poll_woken(), None);
    // A fired watch not yet polled is forgotten by unwatch too.
    sim.e.watch(3, b"res"[..].into());
    sim.reply(1, &invalidate("res"));
    sim.e.unwatch(3);
    assert_eq!(sim.e.poll_woken(), None);
}

/// What a node that executed the commands in `sent` answers: each `PING <nonce>` with its
/// nonce, each `SET` of a key in `held` with null, any other `SET` with `+OK`.
fn answers(sent: &[u8], held: &[&[u8]]) -> Vec<u8> {
    let mut d = resp::Decoder::default();
    let mut buf = bytes::BytesMut::from(sent);
    let mut out = Vec::new();
    while let Ok(Some(resp::Frame::Array(args))) = d.decode(&mut buf) {
        let arg = |k: usize| match args.get(k) {
            Some(resp::Frame::Bulk(b)) => b.to_vec(),
            _ => Vec::new(),
        };
        match arg(0).as_slice() {
            b"PING" => {
                let nonce = arg(1);
                out.extend(format!("${}\r\n", nonce.len()).as_bytes());
                out.extend(&nonce);
                out.extend(b"\r\n");
            }
            b"SET" if held.contains(&arg(1).as_slice()) => out.extend(NULL),
            _ => out.extend(OK),
        }
    }
    out
}

#[test]
fn a_reply_that_cannot_answer_its_command_replaces_the_connection() {
    let mut s = Sim::new(3, false);
    s.submit(OpKind::Acquire, false, 1);
    s.io();
    s.reply(0, OK);
    s.reply(1, OK);
    // An integer cannot answer SET NX: the stream is out of step.
    s.reply(2, b":5\r\n");
    let done = s.completed();
    assert!(matches!(
        done[0].round.reports_iter().nth(2),
        Some(NodeOutcome::Server(m)) if m.contains("out of step")
    ));
    assert_eq!(s.io(), vec![IoEvent::Close(2)]);
    assert_eq!(s.e.stats().nodes[2].desyncs, 1);

    // A late reply is checked too: a round that timed out, then a reply no SET can have.
    s.submit(OpKind::Acquire, false, 2);
    s.io();
    s.reply(0, OK);
    s.reply(1, OK);
    s.advance(TIMEOUT);
    assert_eq!(s.completed().len(), 1);
    s.reply(2, b"*0\r\n");
    assert_eq!(s.io(), vec![IoEvent::Close(2)]);
    assert_eq!(s.e.stats().nodes[2].desyncs, 2);
}

#[test]
fn a_command_lost_in_the_stream_is_caught_before_a_shifted_reply_is_taken() {
    // Node 2 never receives the first round's SET (a middlebox dropped its bytes). Then two
    // rounds share a write pass: resource "y" is held everywhere, "z" is free. Were replies
    // matched by position alone, the first round's late slot would swallow the reply to "y"
    // and "y" would be granted node 2's `+OK` for "z".
    let mut s = Sim::new(3, false);
    s.submit(OpKind::Acquire, false, 1);
    s.io();
    for i in 0..3 {
        s.sent(i);
    }
    s.reply(0, OK);
    s.reply(1, OK);
    s.advance(TIMEOUT + Duration::from_millis(1));
    assert_eq!(s.completed().len(), 1);

    let token = s.token;
    let (y, z) = ([Name::new("y")], [Name::new("z")]);
    for (res, user) in [(&y, 2), (&z, 3)] {
        let cmd = Command {
            kind: OpKind::Acquire,
            resources: res,
            token: Some(&token),
            ttl_ms: 10_000,
            counter: None,
            fence_value: 0,
            watch: None,
        };
        s.e.submit(&cmd, Until::AllIn, s.now, user);
    }
    let mut to_node_2 = Vec::new();
    for i in 0..3 {
        let sent = s.sent(i);
        let reply = answers(&sent, &[b"y"]);
        s.reply(i, &reply);
        to_node_2 = sent;
    }
    let done = s.completed();
    assert_eq!(done.len(), 2);
    for d in &done {
        assert!(
            !matches!(d.round.reports_iter().nth(2), Some(NodeOutcome::Ok)),
            "round {} took a reply meant for another command: {:?}",
            d.user,
            d.round.reports_iter().nth(2)
        );
        let want = if d.user == 2 {
            Decision::Lost
        } else {
            Decision::Won
        };
        assert_eq!(d.round.decision(), want, "round {}", d.user);
    }
    assert!(
        to_node_2.starts_with(b"*2\r\n$4\r\nPING\r\n$14\r\nredlock-sync:1\r\n"),
        "a sentinel goes ahead of the new commands: {:?}",
        String::from_utf8_lossy(&to_node_2)
    );
    assert_eq!(s.io(), vec![IoEvent::Close(2)]);
    assert_eq!(s.e.stats().nodes[2].desyncs, 1);
}

#[test]
fn no_sentinel_while_every_reply_is_within_its_deadline() {
    let mut s = Sim::new(3, true);
    s.submit(OpKind::Acquire, true, 1);
    s.io();
    for i in 0..3 {
        s.sent(i);
    }
    s.reply(0, OK);
    s.reply(1, OK);
    s.completed();
    // Node 2 still owes the first reply, within its deadline: the next command goes alone.
    s.now += TIMEOUT;
    s.submit(OpKind::Acquire, true, 2);
    assert_eq!(commands_in(&s.sent(2)), 1);
    // Past it: one sentinel ahead of the next command, and none again for the one after.
    s.now += Duration::from_millis(1);
    s.submit(OpKind::Acquire, true, 3);
    s.submit(OpKind::Acquire, true, 4);
    let out = s.sent(2);
    assert_eq!(commands_in(&out), 3);
    assert_eq!(out.windows(4).filter(|w| w == b"PING").count(), 1);
    // The node answers everything in order, the sentinel's nonce in its place: no
    // desynchronisation, the connection stays.
    s.reply(2, b"+OK\r\n+OK\r\n$14\r\nredlock-sync:1\r\n+OK\r\n+OK\r\n");
    assert!(s.io().is_empty());
    assert_eq!(s.e.stats().nodes[2].desyncs, 0);
}

#[test]
fn an_acquisition_is_sent_again_only_while_its_round_waits_for_the_node() {
    let token = Token::from_random(&mut crate::random::Seeded::new(106));
    let two = [Name::new("a"), Name::new("b")];
    let acquire = Command {
        kind: OpKind::Acquire,
        resources: &two,
        token: Some(&token),
        ttl_ms: 10_000,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    const NOSCRIPT: &[u8] = b"-NOSCRIPT No matching script.\r\n";
    // Decided by nodes 0 and 1 first: node 2's NOSCRIPT comes after, and the acquisition
    // does not go again (a release may already be queued behind it).
    let mut s = Sim::new(3, true);
    s.e.submit(&acquire, Until::Decided, s.now, 1);
    s.io();
    for i in 0..3 {
        s.sent(i);
    }
    s.reply(0, b":0\r\n");
    s.reply(1, b":0\r\n");
    assert_eq!(s.completed().len(), 1);
    s.reply(2, NOSCRIPT);
    let out = String::from_utf8_lossy(&s.sent(2)).into_owned();
    assert!(
        !out.contains("EVAL\r\n"),
        "sent again after its round: {out}"
    );
    assert!(
        out.contains("SCRIPT"),
        "the scripts are loaded again: {out}"
    );
    // Still waited for: it goes again as EVAL.
    let mut s = Sim::new(3, true);
    s.e.submit(&acquire, Until::Decided, s.now, 1);
    s.io();
    for i in 0..3 {
        s.sent(i);
    }
    s.reply(2, NOSCRIPT);
    let out = String::from_utf8_lossy(&s.sent(2)).into_owned();
    assert!(out.contains("$4\r\nEVAL\r\n"), "{out}");
    // The scripts are loaded again first (queued as the NOSCRIPT was read), then the EVAL.
    let mut answer = b"$1\r\nx\r\n".repeat(PRELOADS);
    answer.extend(b":0\r\n");
    s.reply(2, &answer);
    s.reply(0, b":0\r\n");
    let done = s.completed();
    assert_eq!(done.len(), 1, "{:?}", s.e.stats().nodes[2]);
    assert_eq!(done[0].round.decision(), Decision::Won);
}
