//! Instant arithmetic that cannot overflow.
//!
//! `Instant + Duration` panics when the sum leaves what the platform's clock can represent.
//! The builder bounds every duration it accepts, so sums of those stay far inside the range;
//! every deadline is still computed here, so that no input, however it reaches the crate, can
//! turn into a panic.

use std::time::{Duration, Instant};

/// `t + d`, or the latest instant within about a century of `t` the clock can represent when
/// the sum overflows: a deadline that far away is never reached by a process.
pub fn later(t: Instant, d: Duration) -> Instant {
    if let Some(sum) = t.checked_add(d) {
        return sum;
    }
    let mut span = Duration::from_secs(100 * 365 * 86_400).min(d);
    while !span.is_zero() {
        if let Some(sum) = t.checked_add(span) {
            return sum;
        }
        span /= 2;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_that_fit_are_exact_and_the_rest_saturate() {
        let t = Instant::now();
        assert_eq!(later(t, Duration::from_secs(5)), t + Duration::from_secs(5));
        assert_eq!(later(t, Duration::ZERO), t);
        let far = later(t, Duration::MAX);
        assert!(far > t + Duration::from_secs(365 * 86_400));
        assert_eq!(later(t, Duration::from_secs(u64::MAX)), far);
    }
}
