//! Fuzz target `roundtrip`: see `../checks.rs`, shared with the corpus replay in `cargo test`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_roundtrip(data));
