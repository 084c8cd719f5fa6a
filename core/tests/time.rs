//! Instant arithmetic that cannot overflow (`redlock_core::time::later`): an integration test,
//! so that the core's own sources never read the clock (a test needs one base instant).

use std::time::{Duration, Instant};

use redlock_core::time::later;

#[test]
fn sums_that_fit_are_exact_and_the_rest_saturate() {
    let t = Instant::now();
    assert_eq!(later(t, Duration::from_secs(5)), t + Duration::from_secs(5));
    assert_eq!(later(t, Duration::ZERO), t);
    let far = later(t, Duration::MAX);
    assert!(far > t + Duration::from_secs(365 * 86_400));
    assert_eq!(later(t, Duration::from_secs(u64::MAX)), far);
}
