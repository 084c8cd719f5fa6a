//! Replays every committed fuzz input (seed corpus and regressions) through the same checks
//! the fuzz targets run, so that `cargo test` exercises them on every run.

// The shared checks name the codec `resp`, as the fuzz crate (and the library) depend on it.
extern crate redlock_resp as resp;

use std::fs;
use std::path::{Path, PathBuf};

#[path = "../../fuzz/checks.rs"]
mod checks;

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        files.extend(entries.map(|e| e.expect("readable corpus entry").path()));
    }
    files.sort();
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    let files = inputs(target);
    assert!(
        !files.is_empty(),
        "no committed corpus for fuzz target {target}"
    );
    for path in files {
        let data = fs::read(&path).expect("readable corpus file");
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "fuzz input {} fails", path.display());
    }
}

#[test]
fn decode_corpus() {
    replay("decode", checks::check_decode);
}

#[test]
fn split_corpus() {
    replay("split", checks::check_split);
}

#[test]
fn roundtrip_corpus() {
    replay("roundtrip", checks::check_roundtrip);
}
