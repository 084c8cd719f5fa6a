//! Where the core's randomness comes from: it draws none of its own.
//!
//! Lock tokens and retry jitter come from a [`Randomness`] the caller hands in. The drivers
//! hand in `redlock_mux::OsRandom` (tokens from the operating system's
//! generator, unique across `fork()`); tests and a simulation hand in [`Seeded`], with which
//! the same inputs give the same outputs, tokens included.

/// A source of randomness for the core.
pub trait Randomness {
    /// Fills `buf` with bytes for a token: unguessable, and never drawn by another client.
    fn fill(&mut self, buf: &mut [u8]);
    /// A number drawn uniformly from `0..=max`.
    fn up_to(&mut self, max: u64) -> u64;
}

/// A deterministic source from a seed (SplitMix64): for tests and simulation only. Its
/// tokens are as predictable as its seed.
#[derive(Debug, Clone)]
pub struct Seeded(u64);

impl Seeded {
    /// A source that draws the same sequence for the same seed.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn new(seed: u64) -> Seeded {
        Seeded(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Randomness for Seeded {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let n = self.next().to_le_bytes();
            chunk.copy_from_slice(&n[..chunk.len()]);
        }
    }

    fn up_to(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            // Modulo bias is below 2^-32 for the small ranges the core draws from.
            Some(span) => self.next() % span,
            None => self.next(),
        }
    }
}
