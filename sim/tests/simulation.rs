//! The deterministic simulation (issue 25): the real core against simulated masters, links
//! and clocks. Every test is bounded by a number of seeds, not by wall time.

use redlock_sim::check;
use redlock_sim::run::{run_one, run_seeds};
use redlock_sim::world::{Fault, Faults, Negative, Params, World};

/// The normal mix: every fault a real network or host produces, a few hundred seeds, and the
/// checker finds nothing (no two holders, tokens in order, every operation ended once and in
/// time, no reply taken for another command's, no panic).
#[test]
fn the_normal_mix_breaks_no_invariant() {
    let r = run_seeds(&Params::new(1), 150, false);
    assert!(r.operations > 5_000 && r.acquisitions > 1_000, "{r:?}");
    assert!(r.faults.0 > 500, "fault episodes drawn: {r:?}");
    assert!(r.guards.0 > 100 && r.guards.1 > 20, "guarded locks: {r:?}");
    assert!(r.owed_max > 10, "replies owed: {r:?}");
    // Fair mode is in the mix, and every safety invariant holds with it.
    assert!(r.fair_acquisitions > 300, "fair acquisitions: {r:?}");
    assert_eq!(r.violations, 0, "{}", r.text(&Params::new(1)));
}

/// Without faults, a free resource is taken in the first round (liveness), besides safety.
#[test]
fn without_faults_every_free_resource_is_taken_in_the_first_round() {
    let mut p = Params::new(10_000);
    p.faults = Faults::NONE;
    let r = run_seeds(&p, 150, false);
    assert!(r.acquisitions > 1_000, "{r:?}");
    assert!(r.expiry_judged > 200, "tries judged after expiry: {r:?}");
    assert!(r.guards.0 > 100, "guarded locks: {r:?}");
    // Fair waiters in line, judged by the fairness checks (whose findings are counted apart:
    // `findings.rs` replays them).
    assert!(
        r.fair_acquisitions > 300 && r.fair_places > 20,
        "fair mode: {r:?}"
    );
    assert_eq!(r.violations, 0, "{}", r.text(&p));
}

/// The same seed gives the same trace, event for event (the hash of the trace), and a batch
/// the same combined hash; another seed another.
/// The liveness claims hold a round to its node timeout only where that timeout leaves time
/// for a fresh connection on the slowest link (SYN, its answer, the command, its reply): seed
/// 100768 of `--faults none` draws a client with a 2.3 ms node timeout on links of up to
/// 0.5 ms, whose first round timed out while its connections were still opening, and was
/// once reported as a liveness failure (by both checks) where nothing was wrong.
#[test]
fn a_node_timeout_shorter_than_a_fresh_connection_is_not_held_to_liveness() {
    let mut p = Params::new(100_768);
    p.faults = Faults::NONE;
    let r = run_one(&p);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

/// `owed-stale` holds the engine to its rule for the rounds it queues: seeds 308786, 664264
/// and 339175 of the default mix (found in a 500,000-seed run) have a master answer a backlog
/// after a pause and a refused form sent again (keeping its first command's time) behind
/// replies that were old but on their way, and were once reported though the engine rightly
/// kept the connection.
#[test]
fn a_connection_draining_a_backlog_may_send_a_command_again() {
    for seed in [308_786, 664_264, 339_175] {
        let r = run_one(&Params::new(seed));
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

#[test]
fn the_same_seed_gives_the_same_trace_hash() {
    let p = Params::new(77);
    let (a, b) = (run_one(&p), run_one(&p));
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!((a.operations, a.events), (b.operations, b.events));
    let mut other = p.clone();
    other.seed = 78;
    assert_ne!(run_one(&other).trace_hash, a.trace_hash);
    // Giving the sizes the seed drew replays the same world.
    let replay = run_one(&a.params);
    assert_eq!(replay.trace_hash, a.trace_hash);
    let x = run_seeds(&p, 5, false);
    let y = run_seeds(&p, 5, false);
    assert_eq!(x.trace_hash, y.trace_hash);
}

/// The first seed from 1 on whose run finds `invariant`, up to `max` seeds.
fn first_finding(p: &Params, invariant: &str, max: u64) -> Option<(u64, check::Violation)> {
    (0..max).find_map(|k| {
        let mut q = p.clone();
        q.seed = p.seed + k;
        run_one(&q)
            .violations
            .into_iter()
            .find(|v| v.invariant == invariant)
            .map(|v| (q.seed, v))
    })
}

/// Negative control: masters that restart without their data and without the delayed
/// restart let two clients hold a lock at once, and the checker sees it within a few thousand
/// seeds (the first such seed is reported).
#[test]
fn negative_restart_without_delay_gives_two_holders() {
    let mut p = Params::new(1);
    p.negative = Some(Negative::RestartWithoutDelay);
    let (seed, v) = first_finding(&p, "overlap", 3_000).expect("two holders within 3000 seeds");
    println!("restart-without-delay: seed {seed}: {}", v.detail);
}

/// Negative control: a master's clock jumping ahead by more than the drift allows lets two
/// clients hold a lock at once.
#[test]
fn negative_clock_jump_gives_two_holders() {
    let mut p = Params::new(1);
    p.negative = Some(Negative::ClockJump);
    let (seed, v) = first_finding(&p, "overlap", 3_000).expect("two holders within 3000 seeds");
    println!("clock-jump: seed {seed}: {}", v.detail);
}

/// The fencing debate: a holder paused past its validity, a second holder who writes, then
/// the first one's late write. Unfenced, the store takes it after the newer holder's write
/// (corrupted); fenced, the store refuses it. Neither run has two holders within validity.
#[test]
fn the_fencing_debate_corrupts_an_unfenced_store_and_not_a_fenced_one() {
    let (o, h) = World::fencing_debate(false).run();
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    assert_eq!(h.acquisitions(), 2, "{}", o.trace.join("\n"));
    assert_eq!(h.writes.len(), 2, "{}", o.trace.join("\n"));
    assert!(h.writes.iter().all(|w| w.accepted));
    assert_eq!(
        check::stale_writes_taken(&h),
        1,
        "the late write corrupted the store"
    );

    let (o, h) = World::fencing_debate(true).run();
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    assert_eq!(h.acquisitions(), 2, "{}", o.trace.join("\n"));
    let late = h.writes.iter().max_by_key(|w| w.at).expect("two writes");
    assert!(
        !late.accepted,
        "the fenced store refuses the late write: {h:?}"
    );
    assert_eq!(check::stale_writes_taken(&h), 0);
    let tokens: Vec<Option<u64>> = h.windows.iter().map(|w| w.token).collect();
    assert!(tokens[0] < tokens[1], "{tokens:?}");
}

/// Byte loss (not a real network's fault, off in the safety counts): bytes dropped from live
/// streams. The clients must notice and never take a reply for another command's: every
/// node that granted a lock holds its token (`misattributed` otherwise); connections that lost
/// bytes are dropped (out of step) or their rounds end at their deadlines, and none takes a
/// command while it owes a reply past the stale limit (`owed-stale`). Over these seeds
/// they do; the documented gap (a shifted reply that fits its new command) shows in about
/// one seed in 400, replayed by `tests/findings.rs`.
#[test]
fn byte_loss_never_gets_a_reply_taken_for_another_commands() {
    let mut p = Params::new(5_000);
    p.faults = Faults::NONE.with(Fault::ByteLoss);
    let r = run_seeds(&p, 60, false);
    assert!(r.faults.1 > 100, "bytes were lost: {r:?}");
    // Connections out of step were dropped, and none owed more than a few replies.
    assert!(r.replaced.0 > 20 && r.owed_max < 100, "{r:?}");
    assert_eq!(r.violations, 0, "{}", r.text(&p));
}

/// A violation is shrunk to a smaller run that still fails, and the report carries the
/// command that replays it.
#[test]
fn a_failing_seed_is_shrunk_and_replayable() {
    let mut p = Params::new(1);
    p.negative = Some(Negative::RestartWithoutDelay);
    let (seed, _) = first_finding(&p, "overlap", 3_000).expect("a failing seed");
    p.seed = seed;
    let r = run_seeds(&p, 1, true);
    let first = r.first.as_ref().expect("a violation");
    let full = run_one(&p).params;
    let s = &first.shrunk;
    assert!(
        s.clients <= full.clients && s.ops <= full.ops && s.episodes <= full.episodes,
        "{s:?} vs {full:?}"
    );
    assert!(run_one(s)
        .violations
        .iter()
        .any(|v| v.invariant == first.invariant));
    assert!(first
        .shrunk
        .replay_command()
        .contains(&format!("--seed {seed}")));
    assert!(r.json(&p).contains("\"first_violation\":{\"seed\":"));
}

/// The first seed from `p.seed` on whose run finds `invariant`, with that violation.
fn caught(p: &Params, invariant: &str, max: u64) -> (u64, check::Violation) {
    let found = first_finding(p, invariant, max);
    found.unwrap_or_else(|| panic!("{invariant} not found in {max} seeds of {p:?}"))
}

/// Liveness after expiry, the waiter's patience: a driver that runs `lock` and `lock_within`
/// with a single try (a waiter that never tries again) is caught failing with tries or time
/// left (`waiter-gave-up`).
#[test]
fn a_waiter_that_never_tries_again_is_caught() {
    let mut p = Params::new(1);
    p.faults = Faults::NONE;
    p.negative = Some(Negative::WaiterGivesUp);
    let (seed, v) = caught(&p, "waiter-gave-up", 20);
    println!("waiter-gives-up: seed {seed}: {}", v.detail);
}

/// Liveness after expiry, the spacing of tries: a driver that sleeps four times what the
/// operation asks between tries is caught (`retry-gap`).
#[test]
fn a_waiter_that_sleeps_too_long_between_tries_is_caught() {
    let mut p = Params::new(1);
    p.faults = Faults::NONE;
    p.negative = Some(Negative::SlowRetry);
    let (seed, v) = caught(&p, "retry-gap", 20);
    println!("slow-retry: seed {seed}: {}", v.detail);
}

/// Liveness after expiry, a try once the keys are gone: masters whose clocks run a quarter
/// slow keep keys past their ttl and the drift allowance, and a waiter's try after that
/// still finds the resource held (`liveness-expiry`). The check judges only what it can tell:
/// it is quiet in the normal mix (the tests above) and speaks here.
#[test]
fn keys_that_outlive_their_ttl_and_the_drift_are_caught_by_a_waiter() {
    let mut p = Params::new(1);
    p.faults = Faults::NONE;
    p.negative = Some(Negative::SlowMasters);
    let (seed, v) = caught(&p, "liveness-expiry", 50);
    println!("slow-masters: seed {seed}: {}", v.detail);
}

/// The keep-alive: a guard that reports loss at the end of the validity rather than by its
/// loss deadline (a margin of zero) leaves the work no time to stop while the lock holds, and
/// is caught (`guard-late`).
#[test]
fn a_guard_that_reports_loss_late_is_caught() {
    let mut p = Params::new(1);
    p.faults = Faults::NONE;
    p.negative = Some(Negative::GuardLateLoss);
    let (seed, v) = caught(&p, "guard-late", 60);
    println!("guard-late-loss: seed {seed}: {}", v.detail);
}

/// Owed replies stay bounded: a driver that hands the engine the time its operation started
/// with every round (not the time of the round) defeats the engine's stale check, and commands
/// are queued on connections owing replies long past it; the check reads the holder's own
/// clock and catches it (`owed-stale`).
#[test]
fn commands_queued_on_a_connection_owing_a_stale_reply_are_caught() {
    let mut p = Params::new(1);
    p.negative = Some(Negative::StaleTime);
    let (seed, v) = caught(&p, "owed-stale", 20);
    println!("stale-time: seed {seed}: {}", v.detail);
}

/// Clients' clocks drift too, within the drift factor (shared with the masters'), and the
/// checker judges on the run's clock: over seeds of drift alone nothing breaks; a client whose
/// clock runs a fifth slow, far beyond the factor, holds its lock past its keys on the run's
/// clock, and a second holder shows (`overlap`), where its own clock would show none.
#[test]
fn clients_clocks_drift_and_one_far_too_slow_is_caught_holding_past_its_keys() {
    let mut p = Params::new(20_000);
    p.faults = Faults::NONE.with(Fault::Drift);
    let r = run_seeds(&p, 60, false);
    assert_eq!(r.violations, 0, "{}", r.text(&p));
    let mut p = Params::new(1);
    p.faults = Faults::NONE;
    p.negative = Some(Negative::ClientClockSlow);
    let (seed, v) = caught(&p, "overlap", 40);
    println!("client-clock-slow: seed {seed}: {}", v.detail);
}

/// Liveness after expiry, the bug class it exists for: a driver that never sends a failed
/// try's release (as a native-mode unlock that did nothing on some servers once did) leaves the
/// waiter's own keys until their ttl, and its try once the holder's keys expired still loses
/// (`liveness-expiry`).
#[test]
fn a_waiter_whose_failed_tries_are_not_released_is_caught() {
    let mut p = Params::new(1);
    p.faults = Faults::NONE;
    p.negative = Some(Negative::NoRelease);
    // (In the worlds as drawn before semaphores: with them, the first seeds that break this
    // way moved past the forty searched. Seed 43 with them found a defect of the engine's
    // `has_work`, which did not count a claim's gate past its lease: the pump skipped its
    // pass and was woken at the same instant for ever; see `engine::gate_tests`.)
    p.semaphores = false;
    let (seed, v) = caught(&p, "liveness-expiry", 40);
    println!("no-release: seed {seed}: {}", v.detail);
}

/// Semaphores: a permit's round tallied as if every master's yes named the same slot (yes
/// votes for different slots added up, as a semaphore that counts its holders would) grants
/// slots that only a minority gave: the checker finds a grant whose masters do not hold the
/// token (`misattributed`) and two holders of one slot (`overlap`).
#[test]
fn a_permit_won_by_votes_for_different_slots_is_caught() {
    let mut p = Params::new(1);
    p.negative = Some(Negative::PermitSum);
    let (seed, v) = caught(&p, "misattributed", 200);
    println!("permit-sum: seed {seed}: {}", v.detail);
    let (seed, v) = caught(&p, "overlap", 2000);
    println!("permit-sum: seed {seed}: {}", v.detail);
}
