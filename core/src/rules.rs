//! The validity rule: how long a lock granted by a round can be relied on.
//!
//! `validity = ttl - elapsed - drift`, with `elapsed` measured on the monotonic clock from the
//! instant read before the round's first write, and `drift = ttl * drift_factor + 2 ms` (1 ms
//! for Redis' expiry precision, 1 ms of minimum drift). Nothing here reads a clock.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::Error;

/// The clock-drift allowance: `ttl * drift_factor + 2 ms` (1 ms for Redis' expiry precision,
/// 1 ms of minimum drift).
pub fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    Duration::try_from_secs_f64(ttl.as_secs_f64() * drift_factor)
        .unwrap_or(Duration::MAX)
        .saturating_add(Duration::from_millis(2))
}

/// `ttl - elapsed - drift`, or `None` when that is not above zero. Never underflows.
pub fn validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl, drift_factor))
        .filter(|v| !v.is_zero())
}

/// The validity rule: `ttl - (now - t1) - drift`, or why nothing is left.
/// `t1` is the instant read before the first command was written.
pub fn validity_after(
    cfg: &Config,
    t1: Instant,
    now: Instant,
    ttl: Duration,
) -> Result<Duration, Error> {
    let elapsed = now.saturating_duration_since(t1);
    validity(ttl, elapsed, cfg.drift_factor).ok_or(Error::ValiditySpent { elapsed, ttl })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_subtracts_elapsed_and_drift_without_underflow() {
        let ms = Duration::from_millis;
        assert_eq!(drift(ms(10_000), 0.01), ms(102));
        assert_eq!(validity(ms(10_000), ms(5), 0.01), Some(ms(9_893)));
        assert_eq!(validity(ms(1), ms(0), 0.01), None);
        assert_eq!(validity(ms(5), ms(0), 0.0), Some(ms(3)));
        assert_eq!(validity(ms(5), ms(3), 0.0), None);
        assert_eq!(validity(ms(5), ms(60_000), 0.01), None);
        assert_eq!(validity(Duration::ZERO, Duration::ZERO, 0.0), None);
        assert_eq!(
            validity(Duration::MAX, Duration::ZERO, 0.5).map(|v| v > ms(1)),
            Some(true)
        );
    }
}
