//! Runs `examples/fenced_write.rs`, the demonstration of what a fencing token is for: with
//! fencing, a holder frozen past its validity has its late write refused by the resource;
//! without, the same events corrupt it. The example checks both outcomes and exits 1 if
//! either is not what it claims.

use std::path::PathBuf;
use std::process::Command;

/// The example's binary, which `cargo test` builds beside this test's.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<this test> -> target/<profile>/examples/fenced_write
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    profile_dir.join("examples").join("fenced_write")
}

#[test]
fn a_frozen_holders_late_write_is_refused_with_fencing_and_corrupts_without() {
    let path = example();
    assert!(
        path.exists(),
        "{} not built (cargo test builds the examples)",
        path.display()
    );
    let out = Command::new(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the example failed: {stdout}");
    assert!(
        stdout.contains("fenced: A's late write was refused"),
        "{stdout}"
    );
    assert!(
        stdout.contains("unfenced: A's late write overwrote B's"),
        "{stdout}"
    );
}
