//! The fair hand-off's scripts on a real server, driven by hand over raw RESP3 connections:
//! the line is first come, first served; a release rings only the head; a waiter whose
//! process is gone is skipped at once (`PUBLISH` reaches nobody); a reservation keeps a
//! plain `SET NX` and every other waiter out for the claim lease, and once it lapses the
//! next try hands the resource on; leaving passes a reservation on; a client's waiters share
//! one place. (What the client does with them is tested through the library elsewhere.)

use std::time::Duration;

use redlock_mux::resp::Frame;
use redlock_mux::script::{self, BELL_PREFIX, QUEUE_PREFIX, RESERVED_PREFIX};
use testkit::local::LocalServer;
use testkit::{redis, resource, wait_until};

#[path = "fair_scripts/client.rs"]
mod client;
use client::{get, queue, Client, TOKEN_A, TOKEN_H, TOKEN_X};

#[test]
fn the_line_is_first_come_first_served_and_a_release_rings_only_its_head() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-line");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    assert_eq!(holder.reply(), Frame::Simple("OK".into()));
    let mut w: Vec<Client> = ["a", "b", "c"]
        .iter()
        .map(|id| Client::new(&addr, id))
        .collect();
    for c in &mut w {
        let pttl = c.wait(&r, 60_000);
        assert!(pttl > 0, "held: its ttl ({pttl})");
    }
    assert_eq!(queue(&addr, &r), ["a", "b", "c"]);
    // A client's waiters share its place: waiting again changes nothing.
    assert!(w[1].wait(&r, 60_000) > 0);
    assert_eq!(queue(&addr, &r), ["a", "b", "c"]);

    assert_eq!(holder.handoff(&r, TOKEN_H, 60_000), 1);
    assert_eq!(
        w[0].tagged_bells(),
        vec![(TOKEN_H.to_string(), r.clone())],
        "the head is rung, by the releasing token's hand-off"
    );
    assert_eq!(
        w[1].tagged_bells(),
        vec![("+".to_string(), r.clone())],
        "the second in line is told the resource is reserved ahead of it, not rung"
    );
    assert!(w[2].tagged_bells().is_empty(), "no one else");
    assert_eq!(get(&addr, &r).unwrap(), format!("{RESERVED_PREFIX}a"));
    // Nobody passes the head: not a plain SET NX, not the next in line.
    holder.send(&["SET", &r, TOKEN_X, "NX", "PX", "30000"]);
    assert!(holder.reply().is_null());
    assert_eq!(w[1].claim(&r, TOKEN_X), -1);
    // The head claims it and leaves the line.
    assert_eq!(w[0].claim(&r, TOKEN_A), 0);
    assert_eq!(get(&addr, &r).unwrap(), TOKEN_A);
    assert_eq!(queue(&addr, &r), ["b", "c"]);
    // The next release rings the next.
    assert_eq!(w[0].handoff(&r, TOKEN_A, 60_000), 1);
    assert_eq!(w[1].bells(), vec![r.as_str()]);
    assert!(w[2].bells().is_empty());
}

#[test]
fn a_waiter_whose_process_is_gone_is_skipped_at_once() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-gone");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    holder.reply();
    let mut a = Client::new(&addr, "a");
    let mut b = Client::new(&addr, "b");
    a.wait(&r, 60_000);
    b.wait(&r, 60_000);
    drop(a);
    // The server notices the closed connection: its bell then reaches nobody.
    wait_until(
        Duration::from_secs(10),
        "the server drops the closed subscriber",
        || {
            matches!(redis(&addr, &["PUBSUB", "NUMSUB", &format!("{BELL_PREFIX}a")]),
            Frame::Array(ref v) if v.get(1) == Some(&Frame::Integer(0)))
        },
    );
    assert_eq!(holder.handoff(&r, TOKEN_H, 60_000), 1);
    assert_eq!(b.bells(), vec![r.as_str()], "the dead head is skipped");
    assert_eq!(get(&addr, &r).unwrap(), format!("{RESERVED_PREFIX}b"));
    // Rung, and in the line until its claim.
    assert_eq!(queue(&addr, &r), ["b"]);
}

#[test]
fn a_lapsed_reservation_is_handed_on_by_the_next_try_and_leaving_passes_one_on() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-lapse");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    holder.reply();
    let mut a = Client::new(&addr, "a");
    let mut b = Client::new(&addr, "b");
    let mut c = Client::new(&addr, "c");
    for w in [&mut a, &mut b, &mut c] {
        w.wait(&r, 60_000);
    }
    // `a` is rung with a short claim lease and never claims (a paused process).
    assert_eq!(holder.handoff(&r, TOKEN_H, 50), 1);
    assert_eq!(a.bells(), vec![r.as_str()]);
    // `b`, second in line, is told (nothing rings anyone when a reservation lapses); the
    // third is not.
    assert_eq!(b.tagged_bells(), vec![("+".to_string(), r.clone())]);
    assert!(c.tagged_bells().is_empty(), "only the second is told");
    wait_until(Duration::from_secs(10), "the reservation lapses", || {
        get(&addr, &r).is_none()
    });
    // Told, `b` reads the line again once the lease has run out (the wait script): the
    // resource is free with `a`, rung last, still first: `a` loses its place, and the
    // resource is reserved for `b` (`-3`: claim at once), whose claim takes it.
    assert_eq!(b.wait(&r, 60_000), -3);
    assert_eq!(queue(&addr, &r), ["b", "c"]);
    assert!(
        c.tagged_bells().is_empty(),
        "b reserved it for itself: nobody told"
    );
    assert_eq!(b.claim(&r, TOKEN_X), 0);
    assert_eq!(queue(&addr, &r), ["c"]);
    assert_eq!(b.handoff(&r, TOKEN_X, 60_000), 1);
    assert_eq!(c.bells(), vec![r.as_str()]);
    // `c` gives up: leaving passes its reservation on (nobody is left: the key is free).
    let q = format!("{QUEUE_PREFIX}{r}");
    assert_eq!(
        c.eval(script::LEAVE, &[&r, &q], &["c", "60000"]),
        Frame::Integer(1)
    );
    assert_eq!(get(&addr, &r), None);
    // With the line empty, a waiter finds a free resource reserved for itself at once.
    assert_eq!(a.wait(&r, 60_000), -3);
    assert_eq!(a.claim(&r, TOKEN_A), 0);
}

/// The second in line is told of a reservation ahead of it however it came to stand second
/// (review_s17): by arriving while the reservation stands (its own wait tells it), or by the
/// second's leave (the leave tells the new second). Nobody else is told.
#[test]
fn whoever_stands_second_behind_a_reservation_is_told() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-second-told");
    let q = format!("{QUEUE_PREFIX}{r}");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    holder.reply();
    let mut a = Client::new(&addr, "a");
    let mut b = Client::new(&addr, "b");
    let mut c = Client::new(&addr, "c");
    let mut d = Client::new(&addr, "d");
    a.wait(&r, 60_000);
    // Nobody second: the hand-off tells nobody.
    assert_eq!(holder.handoff(&r, TOKEN_H, 60_000), 1);
    assert_eq!(a.bells(), vec![r.as_str()]);
    // `b` arrives while the resource is reserved for `a`: its wait tells it (it counts the
    // reservation and its own ttl, and looks again when the reservation may lapse).
    let (n, told) = b.wait_told(&r, 60_000);
    assert!(n > 30_000, "{n}");
    assert_eq!(told, vec![("+".to_string(), r.clone())]);
    assert!(a.tagged_bells().is_empty(), "the head is not told");
    // Third and fourth: not told.
    assert!(c.wait_told(&r, 60_000).1.is_empty());
    assert!(d.wait_told(&r, 60_000).1.is_empty());
    assert!(b.tagged_bells().is_empty(), "a waiter told once per read");
    // A leave from behind the second tells nobody.
    assert_eq!(
        d.eval(script::LEAVE, &[&r, &q], &["d", "60000"]),
        Frame::Integer(0)
    );
    assert!(b.tagged_bells().is_empty() && c.tagged_bells().is_empty());
    // `b`, second, gives up: `c` stands second now, and is told.
    assert_eq!(
        b.eval(script::LEAVE, &[&r, &q], &["b", "60000"]),
        Frame::Integer(0)
    );
    assert_eq!(c.tagged_bells(), vec![("+".to_string(), r.clone())]);
    assert!(a.tagged_bells().is_empty());
    assert_eq!(queue(&addr, &r), ["a", "c"]);
    // Once `a` has claimed, nothing is reserved: a read of the line tells nobody.
    assert_eq!(a.claim(&r, TOKEN_A), 0);
    let (n, told) = c.wait_told(&r, 60_000);
    assert!(n > 0 && told.is_empty(), "{n} {told:?}");
}

/// The second in line that gives up once the reservation ahead of it has lapsed, before it
/// looked again, hands the free resource on past the lapsed head (review_s17): the third is
/// rung, not left to its timer.
#[test]
fn a_second_leaving_after_the_lapse_hands_the_resource_on() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-second-leaves-late");
    let q = format!("{QUEUE_PREFIX}{r}");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    holder.reply();
    let mut a = Client::new(&addr, "a");
    let mut b = Client::new(&addr, "b");
    let mut c = Client::new(&addr, "c");
    for w in [&mut a, &mut b, &mut c] {
        w.wait(&r, 60_000);
    }
    // `a` is rung with a short lease and never claims; `b` is told.
    assert_eq!(holder.handoff(&r, TOKEN_H, 50), 1);
    assert_eq!(a.bells(), vec![r.as_str()]);
    assert_eq!(b.tagged_bells(), vec![("+".to_string(), r.clone())]);
    wait_until(Duration::from_secs(10), "the reservation lapses", || {
        get(&addr, &r).is_none()
    });
    // `b` gives up instead of looking again: `a` (rung last) is passed by, `c` rung.
    assert_eq!(
        b.eval(script::LEAVE, &[&r, &q], &["b", "60000"]),
        Frame::Integer(0)
    );
    assert_eq!(c.tagged_bells(), vec![("b".to_string(), r.clone())]);
    assert_eq!(get(&addr, &r).unwrap(), format!("{RESERVED_PREFIX}c"));
    assert_eq!(queue(&addr, &r), ["c"]);
    assert!(a.tagged_bells().is_empty());
    assert_eq!(c.claim(&r, TOKEN_X), 0);
    // A leaver that was not second (nobody is), or had nobody behind it, rings nobody.
    assert_eq!(
        a.eval(script::LEAVE, &[&r, &q], &["a", "60000"]),
        Frame::Integer(0)
    );
    assert_eq!(get(&addr, &r).unwrap(), TOKEN_X);
}

#[test]
fn a_fenced_claim_counts_and_a_claim_over_a_set_is_all_or_nothing() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let (r1, r2) = (resource("fair-set-1"), resource("fair-set-2"));
    let (q1, q2) = (format!("{QUEUE_PREFIX}{r1}"), format!("{QUEUE_PREFIX}{r2}"));
    let counter = resource("fair-counter");
    let mut a = Client::new(&addr, "a");
    redis(&addr, &["SET", &r2, TOKEN_X, "PX", "30000"]);
    // r2 is held: nothing is taken.
    assert_eq!(
        a.eval(
            script::CLAIM,
            &[&r1, &r2, &q1, &q2],
            &[TOKEN_A, "30000", "2", "a", "60000"]
        ),
        Frame::Integer(-2)
    );
    assert_eq!(get(&addr, &r1), None);
    redis(&addr, &["DEL", &r2]);
    assert_eq!(
        a.eval(
            script::CLAIM,
            &[&r1, &r2, &q1, &q2, &counter],
            &[TOKEN_A, "30000", "2", "a", "60000"]
        ),
        Frame::Integer(1)
    );
    assert_eq!(get(&addr, &r1).unwrap(), TOKEN_A);
    assert_eq!(get(&addr, &r2).unwrap(), TOKEN_A);
}

/// Tickets: each master gives a joining client the next ticket of its own line, so two
/// clients that join at once can be ordered differently on two masters; the wait answers the
/// ticket, and a client moves its place to the largest any master gave it
/// (`ZADD <line> XX GT`). Equal tickets are ordered by client id, so every master then orders
/// the line alike.
#[test]
fn tickets_moved_to_the_largest_order_every_master_alike() {
    let a_server = LocalServer::start().unwrap();
    let b_server = LocalServer::start().unwrap();
    let (a, b) = (a_server.addr().to_string(), b_server.addr().to_string());
    let r = resource("fair-tickets");
    let q = format!("{QUEUE_PREFIX}{r}");
    for addr in [&a, &b] {
        redis(addr, &["SET", &r, TOKEN_H, "PX", "30000"]);
    }
    let ticket = |c: &mut Client| -> u64 {
        let id = c.id.clone();
        match c.eval(
            script::WAIT,
            &[&r, &q],
            &[&id, "60000", "1", "600000", "30000"],
        ) {
            Frame::Array(v) => match v.as_slice() {
                [Frame::Integer(_), Frame::Integer(t)] => t.unsigned_abs(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    };
    // x then y on master a, y then x on master b.
    let (mut xa, mut ya) = (Client::new(&a, "x"), Client::new(&a, "y"));
    let (mut xb, mut yb) = (Client::new(&b, "x"), Client::new(&b, "y"));
    let (tx_a, ty_a) = (ticket(&mut xa), ticket(&mut ya));
    let (ty_b, tx_b) = (ticket(&mut yb), ticket(&mut xb));
    assert_eq!((tx_a, ty_a, ty_b, tx_b), (1, 2, 1, 2));
    assert_eq!(queue(&a, &r), ["x", "y"]);
    assert_eq!(queue(&b, &r), ["y", "x"]);
    // Each moves to the largest it was given (2): the same order everywhere.
    for (addr, id) in [(&a, "x"), (&b, "x"), (&a, "y"), (&b, "y")] {
        redis(addr, &["ZADD", &q, "XX", "GT", "2", id]);
    }
    assert_eq!(queue(&a, &r), ["x", "y"]);
    assert_eq!(queue(&b, &r), ["x", "y"]);
    // Waiting again keeps the place and answers it.
    assert_eq!(ticket(&mut yb), 2);
}

/// The release of a claim that failed overall (the hand-off with `0` and the client's ticket)
/// keeps the client's place: where its claim took it out of the line, it goes back at its
/// ticket, and where it heads the line the resource is reserved for it again, not handed to
/// the next. (Without the ticket it would be missing from that line and the next waiter rung:
/// the lines of different masters would then have different heads.)
#[test]
fn a_failed_claim_keeps_its_place_at_its_ticket() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-unclaim");
    let q = format!("{QUEUE_PREFIX}{r}");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    holder.reply();
    let mut a = Client::new(&addr, "a");
    let mut b = Client::new(&addr, "b");
    a.wait(&r, 60_000);
    b.wait(&r, 60_000);
    assert_eq!(holder.handoff(&r, TOKEN_H, 60_000), 1);
    assert_eq!(a.bells(), vec![r.as_str()]);
    // a's claim succeeds here (and, say, fails on the other masters).
    assert_eq!(a.claim(&r, TOKEN_A), 0);
    assert_eq!(queue(&addr, &r), ["b"]);
    // Its failed claim's release: back at ticket 1, and the resource reserved for it again.
    assert_eq!(
        a.eval(
            script::HANDOFF,
            &[&r, &q],
            &[TOKEN_A, "60000", "a", "0", "1"]
        ),
        Frame::Integer(1)
    );
    assert_eq!(queue(&addr, &r), ["a", "b"]);
    assert_eq!(get(&addr, &r).unwrap(), format!("{RESERVED_PREFIX}a"));
    assert!(b.bells().is_empty(), "the next one is not rung");
}

/// A failed claim's release that finds another client's lock on the resource (its own
/// claim's lock ran out there while its round waited for a slow master, and the next waiter
/// took the resource) still puts the client back at its ticket; one that finds a lock of its
/// own client's other waiter, served from the shared place meanwhile (the claim's record,
/// `redlock-mux:served:<r>`, names the client and that token), does not: that place is spent
/// (simulator seed 3938). Before session 23 both were left out, and the first lost its place
/// for good (`tests/review_s19b.rs::a_failed_claim_whose_token_ran_out_keeps_its_place`,
/// under load: X's release landed just after Y's claim).
#[test]
fn a_failed_claim_is_put_back_unless_its_own_client_was_served_there() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    for sibling in [false, true] {
        let r = resource(if sibling {
            "fair-served-own"
        } else {
            "fair-served-other"
        });
        let q = format!("{QUEUE_PREFIX}{r}");
        let mut holder = Client::new(&addr, "h");
        holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
        holder.reply();
        let mut a = Client::new(&addr, "a");
        let mut b = Client::new(&addr, if sibling { "a" } else { "b" });
        let mut c = Client::new(&addr, "c");
        a.wait(&r, 60_000);
        c.wait(&r, 60_000);
        assert_eq!(holder.handoff(&r, TOKEN_H, 60_000), 1);
        assert_eq!(a.bells(), vec![r.as_str()]);
        if sibling {
            // a's two waiters share a place: one claims and is served; the other's claim is
            // refused here (it fails overall) and its release comes after.
            assert_eq!(b.claim(&r, TOKEN_X), 0, "a's other waiter served");
            assert_eq!(queue(&addr, &r), ["c"]);
            assert_eq!(
                a.claim(&r, TOKEN_A),
                -1,
                "refused: a's other waiter holds it"
            );
        } else {
            // a's claim takes the resource here; its lock runs out, and b, which came next,
            // takes it.
            assert_eq!(a.claim(&r, TOKEN_A), 0);
            redis(&addr, &["DEL", &r]);
            redis(&addr, &["ZREM", &q, "c"]);
            b.wait(&r, 60_000);
            assert_eq!(b.claim(&r, TOKEN_X), 0, "b heads the line: served");
            assert!(queue(&addr, &r).is_empty());
        }
        a.eval(
            script::HANDOFF,
            &[&r, &q],
            &[TOKEN_A, "60000", "a", "0", "1"],
        );
        if sibling {
            assert_eq!(queue(&addr, &r), ["c"], "the served place is spent");
        } else {
            assert_eq!(queue(&addr, &r), ["a"], "back at its ticket");
            assert_eq!(
                get(&addr, &r).as_deref(),
                Some(TOKEN_X),
                "b's lock untouched"
            );
        }
    }
}

/// A claim woken by a release's bells from other masters may reach a master before that
/// release does: it takes the resource from the releasing token there (and only from that
/// token), rather than fail and cost a wait, and records that it did (`redlock-mux:taken:<r>`,
/// the releasing token, sixteen claim leases); the release landing after it finds the new
/// holder's token and leaves it, ringing nobody, and counts that master as released (before
/// session 19 it counted it held by another, and an `unlock` whose release was whole on a
/// quorum only that way failed: `tests/fair_taken.rs`). Another token's release there is
/// still refused.
#[test]
fn a_claim_takes_a_master_its_release_has_not_reached_yet() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-overtaken");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    assert_eq!(holder.reply(), Frame::Simple("OK".into()));
    let mut a = Client::new(&addr, "a");
    let mut b = Client::new(&addr, "b");
    assert!(a.wait(&r, 60_000) > 0);
    assert!(b.wait(&r, 60_000) > 0);
    // Woken by another hand-off, or by none: the holder's token stays.
    assert_eq!(a.claim_handed(&r, TOKEN_A, TOKEN_X), -1);
    assert_eq!(a.claim(&r, TOKEN_A), -1);
    assert_eq!(get(&addr, &r).unwrap(), TOKEN_H);
    // Woken by the holder's release: taken, and out of the line.
    assert_eq!(a.claim_handed(&r, TOKEN_A, TOKEN_H), 0);
    assert_eq!(get(&addr, &r).unwrap(), TOKEN_A);
    assert_eq!(queue(&addr, &r), ["b"]);
    let taken = format!("redlock-mux:taken:{r}");
    assert_eq!(get(&addr, &taken).as_deref(), Some(TOKEN_H));
    let ms = match redis(&addr, &["PTTL", &taken]) {
        Frame::Integer(ms) => ms,
        other => panic!("{other:?}"),
    };
    assert!(
        (60_000 * 15..=60_000 * 16).contains(&ms),
        "sixteen claim leases: {ms}"
    );
    // Another token's release: held by another.
    assert_eq!(holder.handoff(&r, TOKEN_X, 60_000), 0);
    // The release lands after: taken from it, nobody rung, nothing changed.
    assert_eq!(holder.handoff(&r, TOKEN_H, 60_000), 1);
    assert_eq!(get(&addr, &r).unwrap(), TOKEN_A);
    assert!(b.bells().is_empty(), "b is not rung while a holds it");
    assert_eq!(queue(&addr, &r), ["b"]);
}

/// A waiter rung, served and back in the line is rung again by the next release: the ring's
/// record of whom it rang last names it, but a release by the holder is no lapse (taken for
/// one, the waiter was taken out of the line and left to its timer: with two clients taking
/// turns, every other hand-off).
#[test]
fn a_waiter_served_and_back_in_line_is_rung_again() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-again");
    let mut h = Client::new(&addr, "h");
    let mut a = Client::new(&addr, "a");
    h.send(&["SET", &r, TOKEN_H, "NX", "PX", "30000"]);
    assert_eq!(h.reply(), Frame::Simple("OK".into()));
    assert!(a.wait(&r, 60_000) > 0);
    assert_eq!(h.handoff(&r, TOKEN_H, 60_000), 1);
    assert_eq!(a.bells(), vec![r.as_str()]);
    assert_eq!(a.claim(&r, TOKEN_A), 0);
    // a releases with nobody in line; h takes the free resource; a waits again.
    assert_eq!(a.handoff(&r, TOKEN_A, 60_000), 1);
    h.send(&["SET", &r, TOKEN_X, "NX", "PX", "30000"]);
    assert_eq!(h.reply(), Frame::Simple("OK".into()));
    assert!(a.wait(&r, 60_000) > 0);
    assert_eq!(h.handoff(&r, TOKEN_X, 60_000), 1);
    assert_eq!(a.bells(), vec![r.as_str()], "rung again");
    assert_eq!(get(&addr, &r).unwrap(), format!("{RESERVED_PREFIX}a"));
    assert_eq!(queue(&addr, &r), ["a"]);
}

/// A lock that runs out (its holder never releases it) leaves the resource free, and the head
/// of the line claims it at its timer, about a round trip after the expiry. A first try that
/// comes in between takes it at once, as a try on a free resource always does, and the head
/// keeps its place for the next turn (docs: "What order survives which faults"). Making the
/// try join the line instead (tried in session 21 for simulator seed 67080) cost a free
/// resource behind live stale places their leases, and `lock` failed with `Conflict` on a
/// resource nobody held (`tests/review_s21.rs`).
#[test]
fn a_first_try_takes_a_lapsed_lock_at_once_and_the_head_keeps_its_place() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let r = resource("fair-enter-free");
    let mut holder = Client::new(&addr, "h");
    holder.send(&["SET", &r, TOKEN_H, "NX", "PX", "300"]);
    assert_eq!(holder.reply(), Frame::Simple("OK".into()));
    let mut a = Client::new(&addr, "a");
    assert!(a.wait(&r, 60_000) > 0, "held: a waits");
    wait_until(
        Duration::from_secs(10),
        "the holder's lock runs out",
        || get(&addr, &r).is_none(),
    );
    let mut b = Client::new(&addr, "b");
    assert_eq!(b.enter(&r, TOKEN_X, 60_000), Ok(()), "b takes it at once");
    assert_eq!(get(&addr, &r).unwrap(), TOKEN_X);
    assert_eq!(
        queue(&addr, &r),
        ["a"],
        "a keeps its place, b joined no line"
    );
    assert!(a.tagged_bells().is_empty(), "nobody rang a");
    // b's release rings a.
    assert_eq!(b.handoff(&r, TOKEN_X, 60_000), 1);
    assert_eq!(a.bells(), vec![r.as_str()]);
}
