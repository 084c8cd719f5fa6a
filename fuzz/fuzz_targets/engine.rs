//! Fuzz target `engine`: arbitrary bytes as a script of events into the core's engine and
//! operations; see `../engine_checks.rs`, shared with the corpus replay in `cargo test`
//! (`core/tests/engine_corpus.rs`).
#![no_main]

#[path = "../engine_checks.rs"]
mod engine_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| engine_checks::check_engine(data));
