/work/main/target-old/release/deps/redlock_resp-89cd429c0cde93ce.d: resp/src/lib.rs resp/src/decode/mod.rs resp/src/decode/line.rs resp/src/encode.rs resp/src/error.rs resp/src/frame.rs resp/src/limits.rs

/work/main/target-old/release/deps/libredlock_resp-89cd429c0cde93ce.rlib: resp/src/lib.rs resp/src/decode/mod.rs resp/src/decode/line.rs resp/src/encode.rs resp/src/error.rs resp/src/frame.rs resp/src/limits.rs

/work/main/target-old/release/deps/libredlock_resp-89cd429c0cde93ce.rmeta: resp/src/lib.rs resp/src/decode/mod.rs resp/src/decode/line.rs resp/src/encode.rs resp/src/error.rs resp/src/frame.rs resp/src/limits.rs

resp/src/lib.rs:
resp/src/decode/mod.rs:
resp/src/decode/line.rs:
resp/src/encode.rs:
resp/src/error.rs:
resp/src/frame.rs:
resp/src/limits.rs:
