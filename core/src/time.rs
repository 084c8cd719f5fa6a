//! Instant arithmetic that cannot overflow.
//!
//! `Instant + Duration` panics when the sum leaves what the platform's clock can represent.
//! The builder bounds every duration it accepts, so sums of those stay far inside the range;
//! every deadline is still computed here, so that no input, however it reaches the crate, can
//! turn into a panic.

use std::time::{Duration, Instant};

/// `t + d`, or the latest instant within about a century of `t` the clock can represent when
/// the sum overflows: a deadline that far away is never reached by a process.
#[inline]
pub fn later(t: Instant, d: Duration) -> Instant {
    match t.checked_add(d) {
        Some(sum) => sum,
        None => saturated(t, d),
    }
}

/// The overflow case of [`later`], out of line (every deadline takes the path above).
#[cold]
fn saturated(t: Instant, d: Duration) -> Instant {
    let mut span = Duration::from_secs(100 * 365 * 86_400).min(d);
    while !span.is_zero() {
        if let Some(sum) = t.checked_add(span) {
            return sum;
        }
        span /= 2;
    }
    t
}
