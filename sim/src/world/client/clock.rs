//! A simulated client's clock, and the conversions between its readings and the run's time.

use std::time::{Duration, Instant};

use super::{Sim, NEVER};

/// A client's clock: it runs `ppm` parts per million fast (or slow) from the start of the run.
/// The core is handed its readings; the checker judges on the run's time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub(super) ppm: i64,
}

impl Clock {
    /// What it reads at the run's time `t`, in nanoseconds from the base.
    pub(super) fn local_ns(self, t: u64) -> u64 {
        if self.ppm == 0 {
            return t;
        }
        // In 64 bits when nothing overflows, else in 128: the same quotient either way.
        if let Some(x) = i64::try_from(t).ok().and_then(|t| {
            t.checked_mul(self.ppm)
                .and_then(|p| t.checked_add(p / 1_000_000))
        }) {
            // Below `NEVER - 1` already.
            return x.max(0) as u64;
        }
        let t = i128::from(t);
        let x = t + t * i128::from(self.ppm) / 1_000_000;
        x.clamp(0, i128::from(NEVER - 1)) as u64
    }

    /// What it reads at the run's time `t` (the core's `Instant`).
    pub(super) fn local_at(self, sim: &Sim, t: u64) -> Instant {
        sim.instant_of(self.local_ns(t))
    }

    /// What it reads now.
    pub(super) fn local(self, sim: &Sim) -> Instant {
        self.local_at(sim, sim.now)
    }

    /// The run's time (nanoseconds) at which it first reads `t` or later: a window ends where
    /// the holder's clock says its validity ends.
    pub(super) fn true_of(self, sim: &Sim, t: Instant) -> u64 {
        let l = sim.ns(t);
        if self.ppm == 0 || l >= NEVER - 1 {
            return l;
        }
        let rate = 1_000_000 + i128::from(self.ppm);
        // In 64 bits when the product fits (the rate is positive), else in 128.
        let narrow = i64::try_from(l)
            .ok()
            .and_then(|l| l.checked_mul(1_000_000))
            .zip(i64::try_from(rate).ok().filter(|r| *r > 0))
            .map(|(x, r)| (x / r) as u64);
        let mut g = narrow.map_or_else(
            || (i128::from(l) * 1_000_000 / rate).clamp(0, i128::from(NEVER - 2)) as u64,
            |g| g.min(NEVER - 2),
        );
        // The division's rounding, corrected (a step or two).
        for _ in 0..8 {
            if self.local_ns(g) < l {
                g += 1;
            } else if g > 0 && self.local_ns(g - 1) >= l {
                g -= 1;
            } else {
                break;
            }
        }
        g
    }

    /// A duration of `d` nanoseconds on it, in the run's time (rounded down).
    pub(super) fn true_duration(self, d: u64) -> u64 {
        let rate = 1_000_000 + i128::from(self.ppm);
        (i128::from(d) * 1_000_000 / rate).clamp(0, i128::from(NEVER - 1)) as u64
    }

    /// The run's time at which a wait of `d` nanoseconds on it, begun now, ends.
    pub(super) fn after(self, sim: &Sim, d: u64) -> u64 {
        self.true_of(sim, self.local(sim) + Duration::from_nanos(d))
    }
}
