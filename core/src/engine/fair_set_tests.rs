//! Fair mode's sets of resources in the engine, without sockets: one watch names every line
//! of a set; a set's leave and release spare the lines another waiter of its client stands
//! in.

use std::time::Instant;

use bytes::Bytes;

use super::fair_tests::{engine, line, woken};
use super::*;

/// The key a set's waiter watches (it stands in the line of each of its resources).
fn lines(names: &[&str]) -> Box<[u8]> {
    let names: crate::lock::Names = names.iter().map(|n| crate::lock::Name::new(n)).collect();
    let mut key = Vec::new();
    crate::command::lines_key(&names, &mut key);
    key.into()
}

/// A set's waiter watches one key that names every line of its set: the bells of any of its
/// resources wake it, and no other resource's (a name that begins like one of its own, or
/// holds the bytes of one, included).
#[test]
fn a_sets_waiter_is_woken_by_the_bells_of_any_of_its_resources() {
    let t = Instant::now();
    for rung in [&b"a"[..], b"res"] {
        let mut e = engine();
        e.watch(1, lines(&["a", "res"]));
        for node in 0..3 {
            e.rung(
                node,
                Bytes::copy_from_slice(rung),
                Bytes::from_static(b"h1"),
                t,
            );
        }
        assert_eq!(woken(&mut e), vec![1], "rung for {rung:?}");
    }
    for other in [&b"ab"[..], b"re", b"ares", b""] {
        let mut e = engine();
        e.watch(1, lines(&["a", "res"]));
        for node in 0..3 {
            e.rung(
                node,
                Bytes::copy_from_slice(other),
                Bytes::from_static(b"h1"),
                t,
            );
        }
        assert!(woken(&mut e).is_empty(), "rung for {other:?}");
    }
    // A name holding what looks like a length and another name is still one name.
    let tricky = "\0\0\0\x01a";
    let key = lines(&[tricky]);
    assert!(crate::command::lines_of(&key, tricky.as_bytes()));
    assert!(!crate::command::lines_of(&key, b"a"));
}

/// A set's waiter that gives up while a single waiter of its client stands in the line of
/// one of its resources leaves the other lines only; with every line taken by another
/// waiter of the client, nothing. A waiter of one resource that gives up while the client's
/// set stands in its line leaves nothing.
#[test]
fn a_sets_leave_leaves_only_the_lines_no_other_waiter_of_its_client_stands_in() {
    let set: crate::lock::Names = ["a", "b"]
        .iter()
        .map(|n| crate::lock::Name::new(n))
        .collect();
    let leave = crate::command::Command::leave(&set);
    let names = |n: Option<crate::lock::Names>| {
        n.map(|n| n.iter().map(|x| x.as_str().to_string()).collect::<Vec<_>>())
    };
    let mut e = engine();
    assert_eq!(names(e.leave_kept(&leave)), None, "nobody else: all of it");
    e.watch(1, line(b"a"));
    assert_eq!(names(e.leave_kept(&leave)), Some(vec!["b".to_string()]));
    e.watch(2, line(b"b"));
    assert_eq!(names(e.leave_kept(&leave)), Some(vec![]));
    let one: crate::lock::Names = [crate::lock::Name::new("a")].into_iter().collect();
    let mut e = engine();
    e.watch(1, lines(&["a", "b"]));
    assert_eq!(
        names(e.leave_kept(&crate::command::Command::leave(&one))),
        Some(vec![])
    );
}

/// A set's release while a waiter of its client stands in the line of one of its resources
/// keeps the client's place (the unclaiming form) and wakes that waiter, whether it waits
/// for that resource alone or in a set.
#[test]
fn a_sets_release_keeps_the_place_of_a_waiter_of_its_client_and_wakes_it() {
    let set: crate::lock::Names = ["a", "b"]
        .iter()
        .map(|n| crate::lock::Name::new(n))
        .collect();
    let token = crate::token::Token::from_random(&mut crate::random::Seeded::new(7));
    let release = crate::command::Command {
        kind: crate::command::OpKind::Release,
        resources: &set,
        token: Some(&token),
        ttl_ms: 0,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    let t = Instant::now();
    for (waiter, wakes) in [
        (line(b"b"), true),
        (lines(&["b", "c"]), true),
        (line(b"c"), false),
    ] {
        let mut e = engine();
        e.watch(1, waiter);
        assert_eq!(e.own_waiter(&release), wakes);
        e.submit(&release, Until::AllIn, t, 7);
        assert_eq!(woken(&mut e), if wakes { vec![1] } else { vec![] });
    }
}
