//! Fair mode's scripts over a set of resources (a lock over several), on a real server, driven
//! by hand: a set waits in the line of each of its resources; rung for one while another is
//! still held, it keeps its reservation only where it heads every line of its set (renewed a
//! claim lease at a time by its own reads), and elsewhere passes it on to the next behind it
//! while keeping its place. So no two sets wait for each other's reservations, and a set
//! heading all its lines is served as soon as the holders let go. (docs/redlock.md, "Sets and
//! the line".)

use redlock_mux::resp::Frame;
use redlock_mux::script::RESERVED_PREFIX;
use testkit::local::LocalServer;
use testkit::{redis, resource};

#[path = "fair_scripts/client.rs"]
mod client;
use client::{get, queue, Client, TOKEN_A, TOKEN_H, TOKEN_X};

const TOKEN_S: &str = "5555555555555555555555555555555555555555";

fn set_nx(c: &mut Client, key: &str, token: &str) {
    c.send(&["SET", key, token, "NX", "PX", "30000"]);
    assert_eq!(c.reply(), Frame::Simple("OK".into()), "SET NX {key}");
}

fn pttl(addr: &str, key: &str) -> i64 {
    match redis(addr, &["PTTL", key]) {
        Frame::Integer(n) => n,
        other => panic!("PTTL: {other:?}"),
    }
}

/// A set heading both its lines, rung for one resource while the other is held, keeps the
/// reservation (its failed claim renews it for a claim lease, and so does each of its reads),
/// keeps a plain `SET NX` out, and takes both once the other holder's release rings it.
#[test]
fn a_set_heading_every_line_keeps_its_reservation_until_it_has_them_all() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let (a, b) = (resource("set-hold-a"), resource("set-hold-b"));
    let mut x = Client::new(&addr, "x");
    let mut h = Client::new(&addr, "h");
    let mut s = Client::new(&addr, "s");
    set_nx(&mut x, &a, TOKEN_X);
    set_nx(&mut h, &b, TOKEN_H);
    let set = [a.as_str(), b.as_str()];
    assert!(
        s.wait_set(&set, 2_000) > 20_000,
        "both held, nothing kept: b's ttl"
    );
    assert_eq!(queue(&addr, &a), ["s"]);
    assert_eq!(queue(&addr, &b), ["s"]);
    // x lets a go: s is rung for it.
    assert_eq!(x.handoff(&a, TOKEN_X, 2_000), 1);
    assert_eq!(s.bells(), vec![a.as_str()]);
    assert_eq!(get(&addr, &a).unwrap(), format!("{RESERVED_PREFIX}s"));
    // Its claim is refused for b (held), but a stays reserved for it, for a full lease.
    redis(&addr, &["PEXPIRE", &a, "500"]);
    assert_eq!(s.claim_set(&set, TOKEN_S, 2_000), -2);
    assert_eq!(get(&addr, &a).unwrap(), format!("{RESERVED_PREFIX}s"));
    assert!(pttl(&addr, &a) > 1_000, "renewed: {}", pttl(&addr, &a));
    // Its next read renews it again, and tells it to look again within half a claim lease
    // (b's holder has 30 s left).
    redis(&addr, &["PEXPIRE", &a, "500"]);
    assert_eq!(s.wait_set(&set, 2_000), 1_000, "half a lease");
    assert!(pttl(&addr, &a) > 1_000, "renewed: {}", pttl(&addr, &a));
    // Nobody else takes a meanwhile.
    x.send(&["SET", &a, TOKEN_A, "NX", "PX", "30000"]);
    assert_eq!(x.reply(), Frame::Null);
    // h lets b go: s is rung, and its claim takes both.
    assert_eq!(h.handoff(&b, TOKEN_H, 2_000), 1);
    assert_eq!(s.bells(), vec![b.as_str()]);
    assert_eq!(s.claim_set(&set, TOKEN_S, 2_000), 0);
    assert_eq!(get(&addr, &a).unwrap(), TOKEN_S);
    assert_eq!(get(&addr, &b).unwrap(), TOKEN_S);
    assert!(queue(&addr, &a).is_empty() && queue(&addr, &b).is_empty());
}

/// A set that does not head every line of its set passes a reservation it is rung for on to
/// the next waiter behind it (at once: no claim lease lost), keeping its place at the head;
/// the next release of that resource rings it again.
#[test]
fn a_set_behind_another_waiter_passes_its_reservation_on_and_keeps_its_place() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let (a, b) = (resource("set-pass-a"), resource("set-pass-b"));
    let mut x = Client::new(&addr, "x");
    let mut h = Client::new(&addr, "h");
    let mut y = Client::new(&addr, "y");
    let mut s = Client::new(&addr, "s");
    let mut z = Client::new(&addr, "z");
    set_nx(&mut x, &a, TOKEN_X);
    set_nx(&mut h, &b, TOKEN_H);
    // y waits for b before the set comes; z waits for a after it.
    assert!(y.wait(&b, 2_000) > 0);
    let set = [a.as_str(), b.as_str()];
    assert!(s.wait_set(&set, 2_000) > 0);
    assert!(z.wait(&a, 2_000) > 0);
    assert_eq!(queue(&addr, &a), ["s", "z"]);
    assert_eq!(queue(&addr, &b), ["y", "s"]);
    // x lets a go: s, heading a's line, is rung; its claim is refused (b held) and, second in
    // b's line, it passes a on to z.
    assert_eq!(x.handoff(&a, TOKEN_X, 2_000), 1);
    assert_eq!(s.bells(), vec![a.as_str()]);
    assert_eq!(s.claim_set(&set, TOKEN_S, 2_000), -2);
    assert_eq!(get(&addr, &a).unwrap(), format!("{RESERVED_PREFIX}z"));
    assert_eq!(z.bells(), vec![a.as_str()]);
    assert_eq!(queue(&addr, &a), ["s", "z"], "s keeps its place");
    // z takes a and lets it go: s is rung again.
    assert_eq!(z.claim(&a, TOKEN_A), 0);
    assert_eq!(z.handoff(&a, TOKEN_A, 2_000), 1);
    assert_eq!(s.bells(), vec![a.as_str()]);
    assert_eq!(get(&addr, &a).unwrap(), format!("{RESERVED_PREFIX}s"));
}

/// Two sets each heading the line the other stands second in (an order that arrival alone
/// never makes, set here by hand: a client's place kept from an earlier wait does): neither
/// keeps a reservation, and a set passing one on passes it to the waiter behind itself, never
/// back to the set ahead that passed it (which would ring the two in turn for as long as the
/// other resource is held).
#[test]
fn two_sets_in_crossed_lines_pass_on_to_the_waiter_behind_not_back() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    let (a, b) = (resource("set-cross-a"), resource("set-cross-b"));
    let mut x = Client::new(&addr, "x");
    let mut h = Client::new(&addr, "h");
    let mut s1 = Client::new(&addr, "s1");
    let mut s2 = Client::new(&addr, "s2");
    let mut w = Client::new(&addr, "w");
    set_nx(&mut x, &a, TOKEN_X);
    set_nx(&mut h, &b, TOKEN_H);
    let (qa, qb) = (
        format!("{}{a}", redlock_mux::script::QUEUE_PREFIX),
        format!("{}{b}", redlock_mux::script::QUEUE_PREFIX),
    );
    redis(&addr, &["ZADD", &qa, "1", "s1", "2", "s2", "3", "w"]);
    redis(&addr, &["ZADD", &qb, "1", "s2", "2", "s1"]);
    let (set1, set2) = ([a.as_str(), b.as_str()], [b.as_str(), a.as_str()]);
    // x lets a go: s1 is rung, is refused for b, and does not head b's line: a goes to s2.
    assert_eq!(x.handoff(&a, TOKEN_X, 2_000), 1);
    assert_eq!(s1.bells(), vec![a.as_str()]);
    assert_eq!(s1.claim_set(&set1, TOKEN_S, 2_000), -2);
    assert_eq!(get(&addr, &a).unwrap(), format!("{RESERVED_PREFIX}s2"));
    assert_eq!(s2.bells(), vec![a.as_str()]);
    // s2 is refused for b too and does not head a's line: a goes to w, behind s2, not back
    // to s1.
    assert_eq!(s2.claim_set(&set2, TOKEN_A, 2_000), -1);
    assert_eq!(get(&addr, &a).unwrap(), format!("{RESERVED_PREFIX}w"));
    assert_eq!(w.bells(), vec![a.as_str()]);
    assert!(s1.bells().is_empty(), "s1 not rung back");
    assert_eq!(queue(&addr, &a), ["s1", "s2", "w"], "every place kept");
}

/// A set's leave goes on past a resource whose key, or whose line's key, is of another type
/// (a hostile or mistaken writer): it used to stop there with `WRONGTYPE`, and the client stayed
/// in the lines of the set's later resources, a stale place that costs whoever waits behind it
/// a claim lease at each hand-off.
#[test]
fn a_sets_leave_goes_on_past_keys_of_another_type() {
    let server = LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    for bad_line in [false, true] {
        let (a, b) = (resource("fair-leave-wt-a"), resource("fair-leave-wt-b"));
        let mut h = Client::new(&addr, "h");
        set_nx(&mut h, &a, TOKEN_H);
        set_nx(&mut h, &b, TOKEN_H);
        let mut w = Client::new(&addr, "w");
        w.wait_set(&[&a, &b], 60_000);
        assert_eq!(queue(&addr, &b), ["w"]);
        let qa = format!("{}{a}", redlock_mux::script::QUEUE_PREFIX);
        let qb = format!("{}{b}", redlock_mux::script::QUEUE_PREFIX);
        if bad_line {
            redis(&addr, &["DEL", &qa]);
            redis(&addr, &["LPUSH", &qa, "x"]);
        } else {
            redis(&addr, &["DEL", &a]);
            redis(&addr, &["LPUSH", &a, "x"]);
        }
        let left = w.eval(
            redlock_mux::script::LEAVE,
            &[&a, &b, &qa, &qb],
            &["w", "60000"],
        );
        assert_eq!(left, Frame::Integer(0), "bad line {bad_line}");
        assert!(
            queue(&addr, &b).is_empty(),
            "bad line {bad_line}: out of b's line"
        );
        assert_eq!(get(&addr, &b).as_deref(), Some(TOKEN_H), "b untouched");
        redis(&addr, &["DEL", &a, &b, &qa, &qb]);
    }
}
