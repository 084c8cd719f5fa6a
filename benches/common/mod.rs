//! Shared by the throughput bench binaries: the minimal reference clients, latency
//! statistics, and the report table.
#![allow(dead_code)]

pub mod plot;
pub mod reference;

use std::time::Duration;

/// Latency samples in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples(pub Vec<u64>);

impl Samples {
    pub fn with_capacity(n: usize) -> Samples {
        Samples(Vec::with_capacity(n))
    }

    pub fn push(&mut self, d: Duration) {
        self.0.push(d.as_nanos() as u64);
    }

    pub fn extend(&mut self, other: &Samples) {
        self.0.extend_from_slice(&other.0);
    }

    /// The `q` quantile (0..=1), nearest rank.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Duration::from_nanos(v[rank - 1])
    }
}

/// Formats a duration in microseconds with one decimal.
pub fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// Reads `--name value` from the command line.
pub fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `--name` is on the command line.
pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// A 40-hex-character token from the thread CSPRNG, as every client here uses.
pub fn token() -> String {
    use rand::RngCore;
    let mut raw = [0u8; 20];
    rand::rng().fill_bytes(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tokio runtime of either flavour, with every driver enabled.
pub fn runtime(multi: bool) -> tokio::runtime::Runtime {
    let mut b = if multi {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    b.enable_all().build().expect("tokio runtime")
}
