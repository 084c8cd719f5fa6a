//! The trace of a run: every event hashed (FNV-1a, 64 bits) as it happens, on the simulated
//! clock's offsets only, so that the same seed gives the same hash on every run and machine;
//! the readable lines are kept only when asked for (a replay).

use std::fmt::Write as _;

/// FNV-1a, 64 bits.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Hashes `bytes` in.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Hashes a number in, as one unit (FNV-1a over 64-bit words: a step per number rather
    /// than per byte, for the trace's millions of events).
    pub fn u64(&mut self, n: u64) {
        self.0 ^= n;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }

    /// The hash so far.
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// The trace: a hash of every event, and the events in words when `lines` is on.
#[derive(Debug, Default)]
pub struct Trace {
    hash: Fnv,
    lines: Option<Vec<String>>,
    /// How many events were hashed.
    pub events: u64,
}

/// The most lines a trace keeps (the rest are hashed, not kept).
pub const MAX_LINES: usize = 200_000;

impl Trace {
    /// A trace that keeps its lines when `lines` is true.
    pub fn new(lines: bool) -> Trace {
        Trace {
            hash: Fnv::default(),
            lines: lines.then(Vec::new),
            events: 0,
        }
    }

    /// An event at `t` (nanoseconds of simulated time): a code and two numbers hashed, and
    /// its words (made only when lines are kept).
    #[inline]
    pub fn ev(&mut self, t: u64, code: u8, a: u64, b: u64, words: impl FnOnce() -> String) {
        self.events += 1;
        self.hash.u64(t);
        self.hash.u64(u64::from(code));
        self.hash.u64(a);
        self.hash.u64(b);
        if self.lines.is_some() {
            self.keep(t, words);
        }
    }

    /// Keeps the words of an event at `t` (a replay's: out of the hashing's way).
    #[cold]
    #[inline(never)]
    fn keep(&mut self, t: u64, words: impl FnOnce() -> String) {
        if let Some(lines) = self.lines.as_mut() {
            if lines.len() < MAX_LINES {
                let mut s = String::new();
                let _ = write!(s, "{:>12.3} ms  ", t as f64 / 1e6);
                s.push_str(&words());
                lines.push(s);
            }
        }
    }

    /// Whether lines are kept.
    pub fn verbose(&self) -> bool {
        self.lines.is_some()
    }

    /// The hash of every event so far.
    pub fn hash(&self) -> u64 {
        self.hash.finish()
    }

    /// The lines kept.
    pub fn lines(&self) -> &[String] {
        self.lines.as_deref().unwrap_or_default()
    }
}
