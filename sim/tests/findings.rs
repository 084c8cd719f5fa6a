//! What the simulator found in the core, each replayed from its seed. A finding whose fix is
//! not the simulator's to make is `#[ignore]`d with the reason, and fails until it is fixed.

use redlock_sim::run::run_one;
use redlock_sim::world::{Faults, Params};

/// Liveness, no fault: under `Scripts::Native` no script is loaded ahead, and a scripted
/// acquisition (fenced, or over several resources) on a fresh connection gets `NOSCRIPT`.
/// The connection sends an acquisition again as `EVAL` only if nothing was queued behind it;
/// with another caller's acquisition already queued behind (two tasks of one client), it is
/// not, and the `NOSCRIPT` becomes that node's vote. Seed 35 (`--faults none`): client 1
/// (fenced, `Native`, 5 masters) loses the first round of an acquisition of a free resource
/// with 3 of 5 nodes voting `NOSCRIPT`. Safety is not affected (a lost vote). Fixed: under
/// `Scripts::Native` a command with no native form goes out as `EVAL` with the script's text
/// (`forms.rs`; against a real server: `tests/native_scripted.rs`).
#[test]
fn native_mode_scripted_acquisitions_on_fresh_connections_win_their_first_round() {
    for seed in [35, 148] {
        let mut p = Params::new(seed);
        p.faults = Faults::NONE;
        let r = run_one(&p);
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

/// Safety, the normal mix: an unfenced acquisition of several resources (`lock_many`) runs
/// the acquire script, which answers 0 (every key set) or `-i` (key `i` held). The core took
/// any integer of 0 or more as a yes (`Expect::Acquired` in `core/src/command.rs`: `fits`
/// accepted every integer, `judge` every non-negative one as granted), so a master sending a
/// hostile `:9223372036854775807` (or a stream out of step bringing another command's `:1`)
/// was counted as holding the keys. Seeds 805 and 1603 of the default mix: a second client
/// holds the resources while the first one's lock is valid (`overlap`), granted by a node
/// that holds the other token (`misattributed`). Fixed: such a reply is out of step
/// (`Expect::fits`), the connection is dropped and the node's vote is a failure.
#[test]
fn a_hostile_integer_is_never_a_grant_for_a_set_of_resources() {
    // 839 and 1141: the same, found again once fair clients joined the mix (seed 805's world
    // draws fair clients now and no longer meets a hostile integer there); each fails with
    // the fix undone.
    for seed in [805, 1603, 839, 1141] {
        let r = run_one(&Params::new(seed));
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

/// Byte loss (bytes dropped from a live stream, which TCP, TLS and Unix sockets never do; off
/// in the safety counts): the gap `docs/redlock.md` states under "Transports". Seed 1840 of
/// `--faults byte-loss`: a `CLIENT CACHING YES` + `PTTL` pair's `+OK` arrived in place of a
/// `SET NX`'s reply after bytes were lost at a reply boundary, every reply still within its
/// deadline, and the `SET NX` counted as granted by a master holding another token; seeds 150
/// and 176: a counter read from another command's reply, fencing tokens out of order (9 of
/// the first 2000 byte-loss seeds failed). Fixed for a path that may lose bytes by
/// `Builder::verify_stream`: every write pass ends with a sentinel and no reply counts before
/// it is back in its place. Every client runs with it under byte loss.
#[test]
fn with_verify_stream_byte_loss_never_shifts_a_reply_onto_another_command() {
    for seed in [150, 176, 1840] {
        let mut p = Params::new(seed);
        p.faults = Faults::NONE.with(redlock_sim::world::Fault::ByteLoss);
        let r = run_one(&p);
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

/// The fairness of fair mode (`redlock_sim::fairness`), with no fault: waiters passed over by
/// clients that were not trying when they joined the line. Not fixed here (the lead is
/// changing the protocol): `#[ignore]`d until it is. What the traces show:
///
/// - seeds 267 and 1504 (`--faults none`): the ring's record of whom it rang last
///   (`redlock-mux:rung:<resource>`, 16 claim leases) outlives the claim that served that
///   client. The client releases, joins the line again and heads it; the next release finds
///   the head equal to the record, takes it out as a lapsed head, finds the line empty and
///   deletes the key: nobody is rung, the resource lies free, and the releasing client (or
///   any arrival) takes it with `SET NX` while the waiter sleeps until its timer.
/// - seed 899: two tasks of one client wait on one resource (one place). One task's first try
///   fails and its release (a release proper: the hand-off script with `1`) takes the client
///   out of the line and deletes the reservation the other task's wait had just made for the
///   client; an arrival takes the free resource.
/// - seeds 872, 1070, 1648, 1706: passed over the same way (not traced one by one).
///
/// In every one of them the wait script's reply is also lost on the client: `Command::judge`
/// has no arm for its array (`[pttl, ticket]`, `Expect::Wait`), so every node's answer is a
/// server error, no `Extra::Waited` is made, the timer is the whole fair wait (eight claim
/// leases) and no ticket is ever moved; a waiter reserved at once (`-3`) waits for a bell.
#[test]
#[ignore = "fair mode's fairness: the lead's protocol change; see the doc comment"]
fn fair_waiters_are_not_passed_over_by_later_arrivals() {
    for seed in [267, 1504, 899, 872, 1070, 1648, 1706] {
        let mut p = Params::new(seed);
        p.faults = Faults::NONE;
        let r = run_one(&p);
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        assert!(r.fairness.is_empty(), "seed {seed}: {:?}", r.fairness);
    }
}
