//! Latency histograms and outcome counts for `bench` and `demo`.
//!
//! HDR histograms (3 significant digits, 1 µs to 1 min) keep memory fixed however long a run
//! is; each worker (a thread, or one client's tasks) records into its own and they are merged
//! at the end.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::exit::{self, Failure};

/// The largest latency recorded as itself; anything slower is recorded as this.
const MAX_US: u64 = 60_000_000;

/// What one worker saw.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Acquisition rounds, won or not.
    pub lock: Histogram<u64>,
    /// Release rounds.
    pub unlock: Histogram<u64>,
    /// Lock and unlock of the same acquisition, back to back.
    pub pair: Histogram<u64>,
    /// Acquisitions won and released: the pairs.
    pub pairs: u64,
    /// Acquisitions refused because another client held the lock.
    pub conflicts: u64,
    /// Anything else that failed (no quorum, a release that failed).
    pub errors: u64,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("constant bounds are valid")
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            lock: histogram(),
            unlock: histogram(),
            pair: histogram(),
            pairs: 0,
            conflicts: 0,
            errors: 0,
            first_error: None,
        }
    }
}

fn micros(d: Duration) -> u64 {
    (d.as_micros().min(MAX_US as u128) as u64).max(1)
}

impl Recorder {
    /// Records an acquisition round that took `d`.
    pub fn lock(&mut self, d: Duration) {
        self.lock.saturating_record(micros(d));
    }

    /// Records a completed pair: its release round and the whole pair.
    pub fn pair(&mut self, unlock: Duration, pair: Duration) {
        self.unlock.saturating_record(micros(unlock));
        self.pair.saturating_record(micros(pair));
        self.pairs += 1;
    }

    /// Counts a failure.
    pub fn error(&mut self, e: &dyn std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }

    /// Adds another worker's figures to these.
    pub fn merge(&mut self, other: &Recorder) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.lock.add(&other.lock);
        let _ = self.unlock.add(&other.unlock);
        let _ = self.pair.add(&other.pair);
        self.pairs += other.pairs;
        self.conflicts += other.conflicts;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }
}

/// Waits for every worker thread and adds up what they saw.
pub fn join(
    workers: Vec<std::thread::ScopedJoinHandle<'_, Recorder>>,
    what: &str,
) -> Result<Recorder, Failure> {
    let mut total = Recorder::default();
    for w in workers {
        let rec = w
            .join()
            .map_err(|_| Failure::new(exit::OS, format!("a {what} thread failed")))?;
        total.merge(&rec);
    }
    Ok(total)
}

/// The quantiles reported, with their labels.
pub const QUANTILES: [(&str, f64); 4] =
    [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)];

/// A histogram's row: p50, p90, p99, p999 and max, formatted for people (`95µs`, `1.20ms`).
pub fn row(h: &Histogram<u64>) -> String {
    let mut s = String::new();
    for (_, q) in QUANTILES {
        let _ = write!(s, "{:>10}", human_us(h.value_at_quantile(q)));
    }
    let _ = write!(s, "{:>10}", human_us(h.max()));
    s
}

/// A histogram as a JSON object of microseconds.
pub fn json(h: &Histogram<u64>) -> String {
    let mut s = String::from("{");
    for (label, q) in QUANTILES {
        let _ = write!(s, "\"{label}_us\":{},", h.value_at_quantile(q));
    }
    let _ = write!(
        s,
        "\"max_us\":{},\"mean_us\":{:.1},\"count\":{}}}",
        h.max(),
        h.mean(),
        h.len()
    );
    s
}

/// Microseconds as people read them.
pub fn human_us(us: u64) -> String {
    match us {
        0..=999 => format!("{us}µs"),
        1_000..=999_999 => format!("{:.2}ms", us as f64 / 1e3),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

/// A count with thousands separators.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(human_us(95), "95µs");
        assert_eq!(human_us(1_200), "1.20ms");
        assert_eq!(human_us(2_500_000), "2.50s");
    }

    #[test]
    fn merged_recorders_add_up() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        a.lock(Duration::from_micros(100));
        a.pair(Duration::from_micros(80), Duration::from_micros(180));
        b.lock(Duration::from_secs(3600));
        b.error(&"boom");
        a.merge(&b);
        assert_eq!(a.pairs, 1);
        assert_eq!(a.errors, 1);
        assert_eq!(a.first_error.as_deref(), Some("boom"));
        assert_eq!(a.lock.len(), 2);
        assert!(
            a.lock.max() >= MAX_US - MAX_US / 1000,
            "slow rounds are kept at the cap"
        );
        assert!(json(&a.lock).starts_with("{\"p50_us\":"));
    }
}
