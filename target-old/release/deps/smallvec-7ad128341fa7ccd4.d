/work/main/target-old/release/deps/smallvec-7ad128341fa7ccd4.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.5/src/lib.rs

/work/main/target-old/release/deps/libsmallvec-7ad128341fa7ccd4.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.5/src/lib.rs

/work/main/target-old/release/deps/libsmallvec-7ad128341fa7ccd4.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.5/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.5/src/lib.rs:
