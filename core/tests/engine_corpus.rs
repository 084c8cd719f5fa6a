//! Replays every committed input of the engine fuzz target (`fuzz/corpus/engine`,
//! `fuzz/regressions/engine`) through the same harness and checks the target runs
//! (`fuzz/engine_checks.rs`), and holds the seed corpus to what each seed is there to reach.
//!
//! The seed corpus is written by [`seeds`]: to regenerate it after changing the input format,
//! `cargo test -p redlock-core --test engine_corpus -- --ignored write_seed_corpus`. To read
//! what an input does, `ENGINE_INPUT=path ENGINE_TRACE=1 cargo test -p redlock-core --test
//! engine_corpus -- --ignored --nocapture trace_input` (`ENGINE_TRACE` prints each event as it
//! happens, up to a check that fails).

use std::fs;
use std::path::{Path, PathBuf};

#[path = "../../fuzz/engine_checks.rs"]
mod engine_checks;

use engine_checks::verdict::*;
use engine_checks::{run, Header, Op, Report, Script};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn inputs() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = fs::read_dir(root().join(dir).join("engine")) else {
            continue;
        };
        files.extend(entries.map(|e| e.expect("readable corpus entry").path()));
    }
    files.sort();
    files
}

/// A header: `n` nodes, the rest as given by `f`.
fn h(n: usize, f: impl FnOnce(&mut Header)) -> Header {
    let mut h = Header {
        nodes: n,
        ..Header::default()
    };
    f(&mut h);
    h
}

type Claim = fn(&Report) -> bool;

/// The seed corpus: each input by name, and what it is there to reach.
fn seeds() -> Vec<(&'static str, Vec<u8>, Claim)> {
    let plain = h(3, |_| {});
    let mut s: Vec<(&'static str, Vec<u8>, Claim)> = vec![
        (
            "win",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1 && r.won == 1,
        ),
        (
            "win-one-node",
            Script::new(&h(1, |_| {}))
                .acquire(0, 6, 0)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "win-seven-nodes-big-quorum",
            Script::new(&h(7, |h| h.big_quorum = true))
                .acquire(0, 6, 0)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "lose-held",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer_all(NO)
                .into_bytes(),
            |r| r.acquire_failed == 1 && r.locks == 0,
        ),
        (
            "lose-to-a-minority-of-oks",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer(0, YES)
                .answer(1, NO)
                .answer(2, NO)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 0 && r.lost >= 1,
        ),
        (
            "win-two-of-three-one-late",
            Script::new(&plain)
                .acquire(1, 6, 0)
                .answer(0, YES)
                .answer(2, YES)
                .answer(1, YES)
                .into_bytes(),
            |r| r.locks == 1 && r.late_replies >= 1,
        ),
        (
            "timeout-then-late-ok",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer(0, YES)
                .advance(0x80)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 0 && r.timeouts >= 1,
        ),
        (
            "split-replies",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .hold(0, YES)
                .deliver(0, 1)
                .deliver(0, 3)
                .deliver(0, 7)
                .deliver(0, 0)
                .hold(1, YES)
                .deliver(1, 2)
                .deliver(1, 0)
                .answer(2, YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "close-mid-round",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer(0, YES)
                .op(Op::Close, &[1, 0])
                .op(Op::Close, &[2, 1])
                .into_bytes(),
            |r| r.locks == 0 && r.io_errors >= 2,
        ),
        (
            "refused-connects",
            Script::new(&plain)
                .op(Op::ConnectMode, &[0, 2])
                .op(Op::ConnectMode, &[1, 2])
                .acquire(0, 6, 0)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 0 && r.io_errors >= 2,
        ),
        (
            "pending-connect",
            Script::new(&plain)
                .op(Op::ConnectMode, &[1, 1])
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::Connected, &[1])
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "connect-timeout",
            Script::new(&plain)
                .op(Op::ConnectMode, &[0, 1])
                .op(Op::ConnectMode, &[1, 1])
                .acquire(0, 6, 0)
                // To the round's deadline, the release's, then the connects' (each the
                // engine's next timeout, to the nanosecond).
                .advance(0x80)
                .advance(0x80)
                .advance(0x80)
                .into_bytes(),
            |r| r.locks == 0 && r.timeouts >= 2,
        ),
        (
            "blocked-writes",
            Script::new(&plain)
                .op(Op::WriteMode, &[0, 1])
                .op(Op::WriteMode, &[1, 2])
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::WriteMode, &[1, 0])
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "noscript-fallback",
            Script::new(&plain)
                .acquire(4, 6, 0)
                .answer_all(NOSCRIPT)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1 && r.noscript_fallbacks >= 3,
        ),
        (
            "noscript-on-release",
            Script::new(&plain)
                .acquire(4, 6, 0)
                .answer_all(YES)
                .op(Op::Release, &[0])
                .answer_all(NOSCRIPT)
                .answer_all(YES)
                .into_bytes(),
            |r| r.released == 1 && r.noscript_fallbacks >= 3,
        ),
        (
            "refused-script-to-function",
            Script::new(&plain)
                .acquire(4, 6, 0)
                .answer_all(REFUSE)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "function-mode-not-found",
            Script::new(&h(3, |h| h.scripts = 3))
                .acquire(4, 6, 0)
                .answer_all(NOSCRIPT)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "eval-mode",
            Script::new(&h(3, |h| h.scripts = 1))
                .acquire(5, 6, 0)
                .answer_all(YES)
                .op(Op::Release, &[0])
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1 && r.released == 1,
        ),
        (
            "fenced-win",
            Script::new(&h(3, |h| h.fencing = true))
                .acquire(0, 6, 0)
                .answer_all(YES | 5 << 3)
                .answer_all(YES)
                .into_bytes(),
            |r| r.fenced == 1,
        ),
        (
            "fenced-counter-out-of-range",
            Script::new(&h(3, |h| h.fencing = true))
                .acquire(0, 6, 0)
                .answer_all(ODD)
                .into_bytes(),
            |r| r.locks == 0,
        ),
        (
            "fenced-evicting-node",
            Script::new(&h(3, |h| h.fencing = true))
                .acquire(0, 6, 0)
                .answer(0, NO)
                .answer(1, YES)
                .answer(2, YES)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "fenced-writeback-lost",
            Script::new(&h(3, |h| h.fencing = true))
                .acquire(0, 6, 0)
                .answer_all(YES | 3 << 3)
                .answer_all(NO)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 0 && r.won >= 1,
        ),
        (
            "extend-and-release",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::Extend, &[0, 6])
                .answer_all(YES)
                .op(Op::Extend, &[0, 6])
                .answer_all(GONE)
                .op(Op::Release, &[0])
                .answer_all(YES)
                .into_bytes(),
            |r| r.extended == 1 && r.extend_failed == 1 && r.released == 1,
        ),
        (
            "native-valkey",
            Script::new(&h(3, |h| h.kinds = 0b01_01_01))
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::Extend, &[0, 5])
                .answer_all(YES)
                .op(Op::Release, &[0])
                .answer_all(YES)
                .into_bytes(),
            |r| r.released == 1 && r.extended == 1 && r.native_commands >= 6,
        ),
        (
            "native-redis-refused",
            Script::new(&h(3, |h| h.kinds = 0b10_10_10))
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::Release, &[0])
                .answer_all(REFUSE)
                .answer_all(YES)
                .into_bytes(),
            |r| r.released == 1,
        ),
        (
            "native-mode-on-old-servers",
            Script::new(&h(3, |h| h.scripts = 2))
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::Release, &[0])
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1 && r.release_failed == 1,
        ),
        (
            "wakeups-push",
            Script::new(&h(3, |h| {
                h.wakeups = true;
                h.tries = 3;
                h.delay = 20;
            }))
            .acquire(0, 6, 1)
            .answer_all(NO)
            .answer_all(YES)
            .op(Op::Push, &[0, 0])
            .op(Op::Push, &[1, 0])
            .advance(0x01)
            .answer_all(YES)
            .into_bytes(),
            |r| r.wakes >= 1 && r.invalidations >= 1,
        ),
        (
            "wakeups-flush-push",
            Script::new(&h(3, |h| {
                h.wakeups = true;
                h.tries = 2;
            }))
            .acquire(0, 6, 1)
            .answer_all(NO)
            .answer_all(YES)
            .op(Op::Push, &[2, 4])
            .advance(0x01)
            .answer_all(YES)
            .into_bytes(),
            |r| r.wakes >= 1,
        ),
        (
            "wakeups-dropped",
            Script::new(&h(3, |h| {
                h.wakeups = true;
                h.tries = 2;
            }))
            .acquire(0, 6, 1)
            .answer_all(NO)
            .answer_all(YES)
            .op(Op::Close, &[0, 0])
            .advance(0x01)
            .answer_all(YES)
            .into_bytes(),
            |r| r.wakes >= 1,
        ),
        (
            "retry-after-delay",
            Script::new(&h(3, |h| {
                h.tries = 3;
                h.delay = 3;
            }))
            .acquire(0, 6, 1)
            .answer_all(NO)
            .answer_all(YES)
            .advance(0x68)
            .answer_all(YES)
            .into_bytes(),
            |r| r.locks == 1 && r.sleeps >= 1,
        ),
        (
            "lock-within",
            Script::new(&plain)
                .acquire(0, 6, 2 | 10 << 2)
                .answer_all(NO)
                .advance(0x60)
                .answer_all(NO)
                .advance(0x60)
                .answer_all(YES)
                .into_bytes(),
            |r| r.rounds >= 2,
        ),
        (
            "abandon-mid-acquire",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer(0, YES)
                .op(Op::Abandon, &[0])
                .answer_all(YES)
                .into_bytes(),
            |r| r.abandoned == 1 && r.locks == 0,
        ),
        (
            "pipelined-operations",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .acquire(1, 6, 0)
                .acquire(0, 5, 0)
                .op(Op::Inspect, &[0])
                .answer_all(YES)
                .answer_all(NO)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks >= 2 && r.inspected == 1,
        ),
        (
            "login-auth-select",
            Script::new(&h(3, |h| h.login = true))
                .acquire(0, 6, 0)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1,
        ),
        (
            "login-refused",
            Script::new(&h(3, |h| h.login = true))
                .acquire(0, 6, 0)
                .answer_all(ERROR)
                .into_bytes(),
            |r| r.locks == 0 && r.engine_closes >= 3,
        ),
        (
            "out-of-step-reply",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer_all(YES)
                .acquire(1, 6, 0)
                .answer(0, ODD)
                .answer(1, YES)
                .answer(2, YES)
                .into_bytes(),
            |r| r.desyncs >= 1,
        ),
        (
            "unsolicited-reply",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer_all(YES)
                .raw(0, b"+OK\r\n")
                .into_bytes(),
            |r| r.locks == 1 && r.engine_closes >= 1,
        ),
        (
            "not-resp",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .raw(0, b"?what\r\n")
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1 && r.engine_closes >= 1,
        ),
        (
            "sentinel-ping",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .advance(0x80 | 40)
                .acquire(1, 6, 0)
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks >= 1,
        ),
        (
            "short-ttl-refused",
            Script::new(&plain).acquire(0, 0, 0).into_bytes(),
            |r| r.acquire_failed == 1 && r.rounds == 0,
        ),
        (
            "duplicate-resources",
            Script::new(&plain).acquire(6, 6, 0).into_bytes(),
            |r| r.rounds == 0,
        ),
        (
            "validity-spent",
            Script::new(&h(3, |h| h.drift = 3))
                .acquire(0, 3, 0)
                .hold(0, YES)
                .hold(1, YES)
                .advance(0x40 | 60)
                .deliver(0, 0)
                .deliver(1, 0)
                .answer_all(YES)
                .into_bytes(),
            |r| r.won >= 1 && r.locks == 0,
        ),
        (
            "late-reply-not-taken-for-the-next-round",
            // Node 2's OK to the first SET arrives once that round is won, while the second
            // round still waits for node 2: it must be dropped, not counted there. (The
            // handshake's replies first: `HELLO`, `CONFIG GET`, a `SCRIPT LOAD` per script.)
            (0..2 + redlock_core::script::ALL.len())
                .fold(
                    Script::new(&plain)
                        .acquire(0, 6, 0)
                        .acquire(1, 6, 0)
                        .answer(0, YES),
                    |s, _| s.answer_one(1, YES).answer_one(2, YES),
                )
                .advance(0x80)
                .into_bytes(),
            |r| r.locks == 1 && r.late_replies >= 1,
        ),
        (
            "watch-times-out-then-connection-drops",
            Script::new(&h(3, |h| {
                h.wakeups = true;
                h.tries = 3;
            }))
            .acquire(0, 6, 1)
            .answer_all(NO)
            .answer_all(YES)
            .answer_all(YES)
            .advance(0x42)
            .op(Op::Close, &[0, 0])
            .answer_all(YES)
            .into_bytes(),
            |r| r.rounds >= 4 && r.wakes == 0,
        ),
        (
            "attributes-and-resp3",
            Script::new(&h(3, |h| h.wakeups = true))
                .acquire(0, 6, 0)
                .answer_all(YES_ATTR)
                .answer_all(YES_ATTR)
                .into_bytes(),
            |r| r.locks == 1,
        ),
    ];
    // The same winning script under every fail-fast, scripts and server setting, with a set
    // of resources (a script) and fenced.
    for (name, f) in [
        (
            "many-fail-fast-off",
            (|h: &mut Header| h.fail_fast = false) as fn(&mut Header),
        ),
        ("many-fenced-function", |h: &mut Header| {
            h.fencing = true;
            h.scripts = 3;
        }),
        ("many-five-mixed-servers", |h: &mut Header| {
            h.nodes = 5;
            h.kinds = 0b11_10_01_00;
        }),
    ] {
        s.push((
            name,
            Script::new(&h(3, f))
                .acquire(5, 7, 0)
                .answer_all(YES)
                .answer_all(YES)
                .op(Op::Extend, &[0, 5])
                .answer_all(YES)
                .op(Op::Release, &[0])
                .answer_all(YES)
                .into_bytes(),
            |r| r.locks == 1 && r.released == 1,
        ));
    }
    s
}

/// Regressions: inputs that once failed a check, each with what it caught (fixed since).
/// Those the fuzzer found are committed as it found them beside these, which say the same
/// thing readably.
fn regressions() -> Vec<(&'static str, Vec<u8>)> {
    let valkey = h(3, |h| h.kinds = 0b01_01_01);
    let plain = h(3, |_| {});
    vec![
        (
            // A `+OK` (the native extension's yes) read as the yes of a native release: the
            // engine took any native yes for any native command, so a reply out of step
            // could confirm a release, or an extension whose key a `DELIFEQ` had deleted
            // (found by the fuzzer in its first seconds: crash-8f9fcdbf...).
            "native-release-answered-ok",
            Script::new(&valkey)
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::Release, &[0])
                .answer_all(ODD)
                .into_bytes(),
        ),
        (
            // The other way: `:1` (the native release's yes) read as an extension's yes.
            "native-extension-answered-one",
            Script::new(&valkey)
                .acquire(0, 6, 0)
                .answer_all(YES)
                .op(Op::Extend, &[0, 5])
                .answer_all(ODD)
                .into_bytes(),
        ),
        (
            // A positive integer (no reply the unfenced acquire script gives: it answers `:0`
            // or `:-i`) read as the acquisition's yes; out of step, a release's or an
            // extension's `:1` could have granted a lock (found by the fuzzer:
            // crash-53d0df21...).
            "unfenced-acquisition-answered-seven",
            Script::new(&plain)
                .acquire(0, 6, 0)
                .answer_all(YES)
                .acquire(5, 6, 0)
                .answer_all(ODD)
                .into_bytes(),
        ),
    ]
}

#[test]
fn committed_engine_inputs_pass_the_checks() {
    let files = inputs();
    assert!(
        files.len() >= seeds().len(),
        "the seed corpus is missing: write it with write_seed_corpus"
    );
    for path in files {
        let data = fs::read(&path).expect("readable corpus file");
        let outcome = std::panic::catch_unwind(|| engine_checks::check_engine(&data));
        assert!(
            outcome.is_ok(),
            "engine fuzz input {} fails",
            path.display()
        );
    }
}

#[test]
fn the_seed_corpus_reaches_what_it_claims() {
    let mut failed = Vec::new();
    for (name, data, claim) in seeds() {
        let (report, trace) = run(&data, true);
        if !claim(&report) {
            eprintln!("{name}: {report:#?}\n{}", trace.join("\n"));
            failed.push(name);
        }
    }
    assert!(
        failed.is_empty(),
        "seeds that do not reach what they are there for: {failed:?}"
    );
}

#[test]
fn the_committed_seeds_are_the_generators() {
    let generated = seeds()
        .into_iter()
        .map(|(name, data, _)| (root().join("corpus/engine").join(name), data))
        .chain(
            regressions()
                .into_iter()
                .map(|(name, data)| (root().join("regressions/engine").join(name), data)),
        );
    for (path, data) in generated {
        let committed = fs::read(&path).unwrap_or_default();
        assert!(
            committed == data,
            "{} differs from its generator: run write_seed_corpus",
            path.display()
        );
    }
}

/// Writes the seed corpus and the generated regressions (see the module's docs).
#[test]
#[ignore]
fn write_seed_corpus() {
    let dir = root().join("corpus/engine");
    fs::create_dir_all(&dir).expect("corpus directory");
    for (name, data, _) in seeds() {
        fs::write(dir.join(name), data).expect("seed written");
    }
    let dir = root().join("regressions/engine");
    fs::create_dir_all(&dir).expect("regressions directory");
    for (name, data) in regressions() {
        fs::write(dir.join(name), data).expect("regression written");
    }
}

/// Prints what the input at `$ENGINE_INPUT` does, event by event.
#[test]
#[ignore]
fn trace_input() {
    let path = std::env::var("ENGINE_INPUT").expect("ENGINE_INPUT names an input");
    // As given, or from the repository's root (tests run in `core/`).
    let data = fs::read(&path)
        .or_else(|_| fs::read(root().join("..").join(&path)))
        .expect("readable input");
    let (report, trace) = run(&data, true);
    for line in trace {
        println!("{line}");
    }
    println!("{report:#?}");
}
