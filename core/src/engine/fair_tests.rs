//! Fair mode's bells in the engine, without sockets: when a waiter is woken, and which bells
//! count together.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;

const LEASE: Duration = Duration::from_millis(100);

/// An engine over five nodes (quorum three) in fair mode.
pub(super) fn engine() -> Engine<u32> {
    let cfg = crate::Options {
        fair: true,
        client_id: "me".into(),
        claim_lease: LEASE,
        ..crate::Options::with_nodes((1..=5).map(|p| format!("127.0.0.1:{p}")))
    }
    .validate()
    .unwrap();
    Engine::new(&cfg)
}

fn key() -> Bytes {
    Bytes::from_static(b"res")
}

fn bell(e: &mut Engine<u32>, node: usize, handoff: &'static [u8], now: Instant) {
    e.rung(node, key(), Bytes::from_static(handoff), now);
}

/// The key a waiter in `resource`'s line watches.
pub(super) fn line(resource: &[u8]) -> Box<[u8]> {
    let mut key = Vec::new();
    crate::command::queue_key(resource, &mut key);
    key.into()
}

pub(super) fn woken(e: &mut Engine<u32>) -> Vec<u64> {
    std::iter::from_fn(|| e.poll_woken())
        .map(|(id, _)| id)
        .collect()
}

/// Woken by the first bell, the waiter's claim could reach a slower master before the
/// release that rang it there: it waits for a quorum of the masters' bells.
#[test]
fn a_waiter_is_woken_by_a_quorum_of_bells_not_the_first() {
    let mut e = engine();
    let t = Instant::now();
    e.watch(1, line(b"res"));
    bell(&mut e, 0, b"h1", t);
    bell(&mut e, 1, b"h1", t);
    assert!(woken(&mut e).is_empty(), "two of five");
    bell(&mut e, 3, b"h1", t);
    assert_eq!(woken(&mut e), vec![1]);
}

/// Bells of different hand-offs (a lapse handed on by one master, a release by another)
/// never add up to a quorum.
#[test]
fn bells_of_different_hand_offs_do_not_add_up() {
    let mut e = engine();
    let t = Instant::now();
    e.watch(1, line(b"res"));
    bell(&mut e, 0, b"h1", t);
    bell(&mut e, 1, b"h2", t);
    bell(&mut e, 2, b"h3", t);
    assert!(woken(&mut e).is_empty(), "three masters, three hand-offs");
    bell(&mut e, 3, b"h1", t);
    bell(&mut e, 4, b"h1", t);
    assert_eq!(woken(&mut e), vec![1], "h1 on three masters");
}

/// Rung by a minority only (the others' lines had another head), the waiter still tries,
/// half a claim lease after the first bell: the engine's timer says when.
#[test]
fn a_minority_of_bells_wakes_the_waiter_after_half_a_claim_lease() {
    let mut e = engine();
    let t = Instant::now();
    e.watch(1, line(b"res"));
    bell(&mut e, 2, b"h1", t);
    assert_eq!(e.poll_timeout(), Some(t + LEASE / 2));
    e.handle_timeout(t + LEASE / 2 - Duration::from_millis(1));
    assert!(woken(&mut e).is_empty());
    e.handle_timeout(t + LEASE / 2);
    assert_eq!(woken(&mut e), vec![1]);
    assert_eq!(e.poll_timeout(), None, "nothing left to wait for");
}

/// Bells that come before the wait starts (between a failed claim and the next watch) count
/// for it within a claim lease, and are forgotten after.
#[test]
fn bells_before_the_watch_count_for_it_within_a_claim_lease() {
    let mut e = engine();
    let t = Instant::now();
    for node in 0..3 {
        bell(&mut e, node, b"h1", t);
    }
    assert!(woken(&mut e).is_empty(), "nobody waits yet");
    e.watch(1, line(b"res"));
    assert_eq!(woken(&mut e), vec![1], "a quorum had rung");
    // Older than a claim lease: their reservations have lapsed; they count for nothing.
    let mut e = engine();
    bell(&mut e, 0, b"h2", t);
    bell(&mut e, 1, b"h2", t);
    let later = t + LEASE + Duration::from_millis(1);
    e.watch(2, line(b"res"));
    bell(&mut e, 2, b"h2", later);
    assert!(woken(&mut e).is_empty(), "two bells lapsed, one new");
}

/// The claim of a waiter woken by a hand-off's bells names that hand-off (its tag), so that
/// a master the release has not reached yet hands the resource over from the releasing
/// token (see `script::CLAIM`); a claim nobody rang names none.
#[test]
fn a_claim_names_the_hand_off_that_woke_it() {
    use crate::command::{Command, OpKind};
    let mut e = engine();
    let t = Instant::now();
    let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
    let claim = Command {
        kind: OpKind::Claim,
        resources: &names,
        token: None,
        ttl_ms: 1000,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    assert_eq!(e.handoff_of(&claim), b"");
    e.watch(1, line(b"res"));
    bell(&mut e, 0, b"h0", t);
    for node in 1..4 {
        bell(&mut e, node, b"h1", t);
    }
    assert_eq!(woken(&mut e), vec![1]);
    assert_eq!(e.handoff_of(&claim), b"h1", "the hand-off with a quorum");
    let release = claim.with_kind(OpKind::Release);
    assert_eq!(e.handoff_of(&release), b"", "only claims name it");
    // Forgotten after a claim lease.
    bell(&mut e, 4, b"h2", t + LEASE);
    assert_eq!(e.handoff_of(&claim), b"");
}

/// The bells of a hand-off that come after it woke the waiter (slower masters) are spent:
/// they never wake the client's next wait (half a lease later, for a claim that would find
/// the resource held by the client's own successor).
#[test]
fn bells_after_their_hand_off_woke_a_waiter_are_spent() {
    let mut e = engine();
    let t = Instant::now();
    e.watch(1, line(b"res"));
    for node in 0..3 {
        bell(&mut e, node, b"h1", t);
    }
    assert_eq!(woken(&mut e), vec![1]);
    bell(&mut e, 3, b"h1", t);
    bell(&mut e, 4, b"h1", t);
    // The client's next wait: nothing pending, no timer.
    e.watch(2, line(b"res"));
    assert_eq!(e.bells_due(), None);
    e.handle_timeout(t + LEASE / 2);
    assert!(woken(&mut e).is_empty());
    // The next hand-off's bells wake it.
    for node in 0..3 {
        bell(&mut e, node, b"h2", t + LEASE / 2);
    }
    assert_eq!(woken(&mut e), vec![2]);
}

/// Two hand-offs to this client under one tag within a claim lease (a leave, and a claim that
/// rings the next waiter on, are tagged with the ringing client's id, not the hand-off): the
/// second's bells wake the client's next wait. Only a bell from a master that has not rung the
/// first yet is taken for that one's late bell, and spent.
#[test]
fn a_second_hand_off_under_the_same_tag_wakes_the_next_wait() {
    let mut e = engine();
    let t = Instant::now();
    e.watch(1, line(b"res"));
    for node in 0..3 {
        bell(&mut e, node, b"a", t);
    }
    assert_eq!(woken(&mut e), vec![1]);
    bell(&mut e, 3, b"a", t);
    // The client's next wait; the same client rings it again, from the same masters.
    e.watch(2, line(b"res"));
    let later = t + LEASE / 4;
    bell(&mut e, 4, b"a", later);
    assert!(
        woken(&mut e).is_empty(),
        "master 4's late bell of the first"
    );
    assert_eq!(e.bells_due(), None, "spent");
    for node in 0..3 {
        bell(&mut e, node, b"a", later);
    }
    assert_eq!(woken(&mut e), vec![2], "a quorum of the second's bells");
    // The second's bell from a master that had rung the first late is its late bell.
    bell(&mut e, 3, b"a", later);
    e.watch(3, line(b"res"));
    assert_eq!(e.bells_due(), None, "spent");
}

/// Woken by a minority of a hand-off's bells (half a lease after the first), the claim names
/// no hand-off: that release may have failed, and its holder, still holding a quorum, may
/// extend its lock; the claim must not take the masters that still hold its token.
#[test]
fn a_claim_woken_by_a_minority_names_no_hand_off() {
    use crate::command::{Command, OpKind};
    let mut e = engine();
    let t = Instant::now();
    let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
    let claim = Command {
        kind: OpKind::Claim,
        resources: &names,
        token: None,
        ttl_ms: 1000,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    e.watch(1, line(b"res"));
    bell(&mut e, 0, b"h1", t);
    bell(&mut e, 1, b"h1", t);
    e.handle_timeout(t + LEASE / 2);
    assert_eq!(woken(&mut e), vec![1], "woken anyway");
    assert_eq!(
        e.handoff_of(&claim),
        b"",
        "a minority's hand-off is not named"
    );
    // Its remaining bells are not spent: they still count for the next wait.
    e.watch(2, line(b"res"));
    bell(&mut e, 2, b"h1", t + LEASE / 2);
    bell(&mut e, 3, b"h1", t + LEASE / 2);
    bell(&mut e, 4, b"h1", t + LEASE / 2);
    assert_eq!(woken(&mut e), vec![2]);
    assert_eq!(e.handoff_of(&claim), b"h1");
}

/// A waiter that gives up while another waiter of the client waits for the same resource
/// leaves nothing: the engine answers its leave itself, with nothing sent (a leave would take
/// the client's shared place out of every line, and nobody would ring the other waiter). A
/// leave with no other waiter goes out.
#[test]
fn a_leave_is_kept_while_another_waiter_of_the_client_waits() {
    let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
    let leave = crate::command::Command::leave(&names);
    let t = Instant::now();
    let mut e = engine();
    e.watch(1, line(b"res"));
    e.submit(&leave, Until::AllIn, t, 7);
    let done = e.poll_completed().expect("answered at once");
    assert_eq!(done.user, 7);
    assert_eq!(done.round.decision(), Decision::Won);
    assert!(
        e.poll_io().is_none(),
        "no connection opened, nothing to send"
    );
    assert_eq!(e.stats().nodes.iter().map(|n| n.ok).sum::<u64>(), 0);
    // Another resource's waiter keeps nothing; nor does a waiter outside the line (one
    // without fair mode watches the resource's own key); nor a client with no other waiter.
    for other in [line(b"other"), b"res"[..].into()] {
        let mut e = engine();
        e.watch(1, other);
        e.submit(&leave, Until::AllIn, t, 8);
        assert!(e.poll_completed().is_none(), "sent, awaiting the nodes");
        assert!(matches!(e.poll_io(), Some(IoEvent::Connect(_))));
    }
}

/// A release while a waiter of the same client watches the resource outside its line (no
/// fair mode) is a release proper: the engine neither keeps the client's place for it nor
/// wakes it in the line's stead; a waiter in the line is.
#[test]
fn a_release_wakes_only_a_waiter_in_the_line() {
    let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
    let token = crate::token::Token::from_random(&mut crate::random::Seeded::new(7));
    let release = crate::command::Command {
        kind: crate::command::OpKind::Release,
        resources: &names,
        token: Some(&token),
        ttl_ms: 0,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    assert!(!engine().own_waiter(&release));
    let mut e = engine();
    e.watch(1, b"res"[..].into());
    assert!(!e.own_waiter(&release), "a watch outside the line");
    e.watch(2, line(b"res"));
    assert!(e.own_waiter(&release));
}

/// The commands node `i` has been sent since last asked, each as its arguments.
pub(super) fn sent_commands(e: &mut Engine<u32>, i: usize) -> Vec<Vec<Vec<u8>>> {
    let out = e.transmit(i).to_vec();
    e.handle_written(i, out.len());
    let mut d = resp::Decoder::default();
    let mut buf = bytes::BytesMut::from(&out[..]);
    let mut cmds = Vec::new();
    while let Ok(Some(resp::Frame::Array(args))) = d.decode(&mut buf) {
        let args = args
            .into_iter()
            .map(|a| match a {
                resp::Frame::Bulk(b) => b.to_vec(),
                other => format!("{other:?}").into_bytes(),
            })
            .collect();
        cmds.push(args);
    }
    cmds
}

/// What a node answers to the commands `sent` (a new connection's `HELLO 3`, script loads,
/// `CLIENT` and the bell's `SUBSCRIBE`), with `scripted` for each script call.
pub(super) fn serve(sent: &[Vec<Vec<u8>>], scripted: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for cmd in sent {
        match cmd[0].as_slice() {
            b"HELLO" => out.extend(&b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n"[..]),
            b"SCRIPT" => out.extend(b"$1\r\nx\r\n"),
            b"CLIENT" => out.extend(b"+OK\r\n"),
            b"SUBSCRIBE" => {
                let ch = &cmd[1];
                out.extend(format!(">3\r\n$9\r\nsubscribe\r\n${}\r\n", ch.len()).bytes());
                out.extend(ch);
                out.extend(b"\r\n:1\r\n");
            }
            _ => out.extend(scripted),
        }
    }
    out
}

/// Five connections opened (by a read, answered with everything the handshakes asked), then
/// an enter round of `res` submitted as operation 1, whose own watch is `own`.
fn entering(own: Option<u64>, t: Instant) -> Engine<u32> {
    use crate::command::{Command, OpKind};
    let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
    let mut e = connected(t);
    let enter = Command::leave(&names)
        .with_kind(OpKind::Enter)
        .watched_by(own);
    e.submit(&enter, Until::WonOrAllIn, t, 1);
    for i in 0..5 {
        assert_eq!(sent_commands(&mut e, i).len(), 1, "node {i}: the enter");
    }
    e
}

/// An engine whose five connections are open (by a read, operation 0, answered with
/// everything the handshakes asked).
pub(super) fn connected(t: Instant) -> Engine<u32> {
    use crate::command::{Command, OpKind};
    let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
    let mut e = engine();
    e.submit(
        &Command::leave(&names).with_kind(OpKind::Get),
        Until::AllIn,
        t,
        0,
    );
    while let Some(ev) = e.poll_io() {
        if let IoEvent::Connect(i) = ev {
            e.handle_connected(i);
        }
    }
    for i in 0..5 {
        let sent = sent_commands(&mut e, i);
        e.handle_input(i, &serve(&sent, b"$-1\r\n"), t);
        // Tracking and the bell, asked for once the server agreed to RESP3.
        let more = sent_commands(&mut e, i);
        assert!(!more.is_empty(), "node {i}");
        e.handle_input(i, &serve(&more, b""), t);
    }
    assert_eq!(e.poll_completed().map(|d| d.user), Some(0));
    e
}

/// A fair enter round won by a quorum, one slower master refusing (which joined the client to
/// its line there) after the decision: the engine sends that master a leave, not waited for,
/// even while the winning operation's own early watch of the line is still registered (read
/// in the same pass as the decision, before the operation takes it back: session 15 counted
/// it as another waiter of the client, kept the leave, and left the client in the line). A
/// late yes gets nothing; another waiter of the client keeps the place (no leave).
#[test]
fn a_refusal_after_a_won_enter_gets_a_leave_unless_another_waiter_of_the_client_waits() {
    const GRANTED: &[u8] = b":0\r\n";
    const REFUSED: &[u8] = b"*2\r\n:500\r\n:1\r\n";
    let t = Instant::now();
    for other in [false, true] {
        let mut e = entering(Some(1), t);
        e.watch(1, line(b"res"));
        if other {
            e.watch(2, line(b"res"));
        }
        for i in 0..3 {
            e.handle_input(i, GRANTED, t);
        }
        let done = e.poll_completed().expect("decided at the quorum");
        assert_eq!(done.round.decision(), Decision::Won);
        // Node 3's refusal, in the same pass: the winner's watch is still there.
        e.handle_input(3, REFUSED, t);
        e.handle_input(4, GRANTED, t);
        let leaves: Vec<usize> = (0..5)
            .filter(|&i| !sent_commands(&mut e, i).is_empty())
            .collect();
        if other {
            assert!(leaves.is_empty(), "the place is the other waiter's too");
        } else {
            assert_eq!(leaves, vec![3], "a leave to the refusing master only");
        }
        assert!(e.poll_completed().is_none(), "nobody waits for it");
    }
}

/// Past the bound of won enters followed at once (`MAX_ENTERS`), the oldest is answered at
/// the next enter's submission with a leave to the nodes that still owe their answer, not
/// forgotten: forgotten, its late refusals were never answered, and the client stood in those
/// lines until a hand-off rang it for nothing (`tests/review_s16.rs`: 904 of 5000 places).
/// An enter in flight is never dropped.
#[test]
fn a_won_enter_past_the_bound_of_those_followed_gets_its_leave_at_once() {
    use crate::command::{Command, OpKind};
    const GRANTED: &[u8] = b":0\r\n";
    let t = Instant::now();
    let mut e = entering(None, t);
    let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
    let enter = Command::leave(&names).with_kind(OpKind::Enter);
    for n in 0..super::watch::MAX_ENTERS {
        if n > 0 {
            e.submit(&enter, Until::WonOrAllIn, t, 1);
        }
        for i in 0..5 {
            let sent = sent_commands(&mut e, i);
            assert_eq!(sent.len(), usize::from(n > 0), "enter {n}, node {i}");
        }
        for i in 0..3 {
            e.handle_input(i, GRANTED, t);
        }
        let done = e.poll_completed().expect("decided at the quorum");
        assert_eq!(done.round.decision(), Decision::Won);
    }
    // Nodes 3 and 4 owe all of them: the next enter's submission answers the oldest.
    e.submit(&enter, Until::WonOrAllIn, t, 1);
    for i in 0..5 {
        let sent = sent_commands(&mut e, i);
        let leaves = sent
            .iter()
            .filter(|c| c.get(1).map(Vec::as_slice) == Some(crate::script::LEAVE_SHA1.as_bytes()))
            .count();
        assert_eq!(
            leaves,
            usize::from(i >= 3),
            "node {i}: {} commands",
            sent.len()
        );
    }
}

/// Told by a hand-off that it stands second behind a reservation (`+ <resource>`), the waiter
/// is woken once the latest reservation told of may have lapsed (a claim lease and the drift
/// allowance after the notice), with [`Wake::Lapse`]: a head that never claims costs the line
/// one claim lease, not the waiters' timer of eight.
#[test]
fn the_second_in_line_looks_again_when_the_reservation_ahead_may_lapse() {
    let mut e = engine();
    let t = Instant::now();
    e.watch(1, line(b"res"));
    e.next_in_line(key(), t);
    let later = t + Duration::from_millis(10);
    e.next_in_line(key(), later);
    // drift(100 ms, 0.01) = 1 ms + 2 ms.
    let due = later + LEASE + Duration::from_millis(3);
    assert_eq!(
        e.poll_timeout(),
        Some(due),
        "the latest master's reservation"
    );
    // A driver that asks whether a pass would find anything is told so once it is due (the
    // simulator's pump skips a pass otherwise: its waiters never woke).
    assert!(!e.has_work(due - Duration::from_millis(1)));
    assert!(e.has_work(due));
    e.handle_timeout(due - Duration::from_millis(1));
    assert!(e.poll_woken().is_none(), "not yet");
    e.handle_timeout(due);
    assert_eq!(e.poll_woken(), Some((1, Wake::Lapse)));
    assert_eq!(e.poll_timeout(), None, "looked at once");
    // A notice a claim lease after the first is another hand-off's: its own due time.
    let mut e = engine();
    e.watch(2, line(b"res"));
    e.next_in_line(key(), t);
    let next = t + LEASE;
    e.next_in_line(key(), next);
    assert_eq!(
        e.poll_timeout(),
        Some(next + LEASE + Duration::from_millis(3))
    );
}

/// A notice for a line in which no waiter of this client stood when it came, nor since, nor
/// half a lease after the lapse was due, tells of a stale place: the engine sends the leave
/// script for that resource to every master, not waited for, so that the leave does what the
/// notice asked (two stale places in a row cost the waiter behind them nine claim leases
/// before, `tests/review_s17.rs`). A waiter in the line then is woken instead, and so is one
/// that watched the line in between (a waiter between two of its rounds at the due time), or
/// that is back within the half lease: nothing is sent for them.
#[test]
fn a_notice_to_a_stale_place_is_answered_with_a_leave() {
    let t = Instant::now();
    // 0: nobody; 1: a waiter all along; 2: a waiter that watched in between and is in a
    // round at the due time; 3: one back within the half lease; 4: one whose claim is out
    // from before the notice until after the due time (held up by a slow master).
    for case in 0..5 {
        let mut e = connected(t);
        if case == 1 {
            e.watch(7, line(b"res"));
        }
        if case == 4 {
            use crate::command::{Command, OpKind};
            let names: crate::lock::Names = [crate::lock::Name::new("res")].into_iter().collect();
            let claim = Command::leave(&names).with_kind(OpKind::Claim);
            e.submit(&claim, Until::WonOrAllIn, t, 9);
            for i in 0..5 {
                assert_eq!(sent_commands(&mut e, i).len(), 1, "node {i}: the claim");
            }
        }
        e.next_in_line(key(), t);
        if case == 2 {
            e.watch(7, line(b"res"));
            e.unwatch(7);
        }
        let due = e.lapses_due().expect("the lapse's time");
        e.handle_timeout(due);
        if case == 0 || case == 3 {
            let again = e.lapses_due().expect("looked at again");
            assert_eq!(again, due + LEASE / 2, "case {case}");
            assert!(
                (0..5).all(|i| sent_commands(&mut e, i).is_empty()),
                "case {case}"
            );
            if case == 3 {
                e.watch(8, line(b"res"));
            }
            e.handle_timeout(again);
        }
        let sent: Vec<Vec<Vec<Vec<u8>>>> = (0..5).map(|i| sent_commands(&mut e, i)).collect();
        if case == 4 {
            assert_eq!(e.lapses_due(), None, "case 4: forgotten");
        }
        if case > 0 {
            let expect: Vec<u64> = match case {
                1 => vec![7],
                3 => vec![8],
                _ => vec![],
            };
            assert_eq!(woken(&mut e), expect, "case {case}");
            assert!(sent.iter().all(Vec::is_empty), "case {case}: {sent:?}");
        } else {
            assert!(woken(&mut e).is_empty());
            for cmds in &sent {
                assert_eq!(cmds.len(), 1, "{cmds:?}");
                let c = &cmds[0];
                assert_eq!(c[0], b"EVALSHA");
                assert_eq!(c[1], crate::script::LEAVE_SHA1.as_bytes());
                assert_eq!(
                    &c[3..5],
                    &[b"res".to_vec(), b"redlock-mux:queue:res".to_vec()]
                );
                assert_eq!(c[5], b"me");
            }
            // Not waited for: nothing completes, and the replies are dropped.
            for i in 0..5 {
                e.handle_input(i, b":0\r\n", t);
            }
            assert!(e.poll_completed().is_none());
        }
        if case != 4 {
            assert_eq!(e.poll_timeout(), None, "case {case}");
        }
    }
}

/// Rung for the resource itself (the head did claim and has released, or lapsed and was
/// passed over), the waiter heads the line: the notice is spent, and only the bells wake it.
#[test]
fn a_bell_for_the_resource_spends_the_notice_of_a_lapse() {
    let mut e = engine();
    let t = Instant::now();
    e.watch(1, line(b"res"));
    e.next_in_line(key(), t);
    bell(&mut e, 0, b"h1", t + Duration::from_millis(5));
    assert_eq!(
        e.poll_timeout(),
        Some(t + Duration::from_millis(5) + LEASE / 2),
        "the bell's half lease, no lapse"
    );
    e.handle_timeout(t + LEASE * 2);
    assert_eq!(woken(&mut e), vec![1], "once, by the bell");
    assert_eq!(e.poll_timeout(), None);
}
