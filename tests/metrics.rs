//! The `metrics` feature: operations counted by kind and outcome, their time recorded, against
//! real servers, read back from a recorder.
#![cfg(feature = "metrics")]

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use redlock_mux::Error;

#[test]
fn operations_are_counted_by_kind_and_outcome() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let c = testkit::cluster(3);
    let key = testkit::resource("metered");
    metrics::with_local_recorder(&recorder, || {
        let client = testkit::builder(&c)
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        let mut lock = client.lock(&key, Duration::from_secs(10)).unwrap();
        client.extend(&mut lock, Duration::from_secs(10)).unwrap();
        assert!(matches!(
            client.try_lock(&key, Duration::from_secs(10)),
            Err(Error::Conflict { .. })
        ));
        client.unlock(&lock).unwrap();
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |op: &str, outcome: &str| {
        snapshot.iter().find_map(|(key, _, _, value)| {
            let k = key.key();
            let labels: Vec<(String, String)> = k
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            let wanted = k.name() == "redlock_operations_total"
                && key.kind() == MetricKind::Counter
                && labels.contains(&("op".into(), op.into()))
                && labels.contains(&("outcome".into(), outcome.into()));
            match (wanted, value) {
                (true, DebugValue::Counter(n)) => Some(*n),
                _ => None,
            }
        })
    };
    assert_eq!(counter("acquire", "ok"), Some(1), "{snapshot:?}");
    assert_eq!(counter("acquire", "conflict"), Some(1), "{snapshot:?}");
    assert_eq!(counter("extend", "ok"), Some(1), "{snapshot:?}");
    assert_eq!(counter("release", "ok"), Some(1), "{snapshot:?}");
    let timed = snapshot.iter().any(|(key, _, _, value)| {
        key.key().name() == "redlock_operation_seconds"
            && matches!(value, DebugValue::Histogram(v) if !v.is_empty())
    });
    assert!(timed, "{snapshot:?}");
}

/// Every metric the docs list is described, with its unit, for exporters to print.
#[test]
fn every_metric_is_described_with_its_unit() {
    use metrics_util::debugging::Snapshotter;
    const COUNTERS: [&str; 6] = [
        "redlock_operations_total",
        "redlock_reconnects_total",
        "redlock_script_fallbacks_total",
        "redlock_guard_extensions_total",
        "redlock_guard_losses_total",
        "redlock_waits_total",
    ];
    const HISTOGRAMS: [&str; 2] = ["redlock_operation_seconds", "redlock_wait_seconds"];
    let recorder = DebuggingRecorder::new();
    let snapshotter: Snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        redlock_mux::describe_metrics();
        // The debugging recorder lists registered metrics only.
        for name in COUNTERS {
            metrics::counter!(name).increment(0);
        }
        for name in HISTOGRAMS {
            metrics::histogram!(name).record(0.0);
        }
    });
    let snapshot = snapshotter.snapshot().into_vec();
    for name in COUNTERS.iter().chain(&HISTOGRAMS) {
        let (_, unit, help, _) = snapshot
            .iter()
            .find(|(key, ..)| key.key().name() == *name)
            .unwrap_or_else(|| panic!("{name} registered: {snapshot:?}"));
        let want = if name.ends_with("_seconds") {
            metrics::Unit::Seconds
        } else {
            metrics::Unit::Count
        };
        assert_eq!(*unit, Some(want), "{name}");
        assert!(
            help.as_ref().is_some_and(|h| h.len() > 20),
            "{name}: {help:?}"
        );
    }
}

/// A waiter woken by the masters' push is counted under its cause, and its wait timed.
#[test]
fn a_wait_is_counted_by_what_woke_it() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let c = testkit::cluster(3);
    let key = testkit::resource("metered-wait");
    let releaser = testkit::release_once_a_waiter_is_tracked(&c, &key);
    metrics::with_local_recorder(&recorder, || {
        testkit::wait_for_a_push_and_take(&c, &key);
    });
    releaser.join().unwrap();
    let snapshot = snapshotter.snapshot().into_vec();
    let pushed = snapshot.iter().find_map(|(key, _, _, value)| {
        let k = key.key();
        let push = k
            .labels()
            .any(|l| l.key() == "cause" && l.value() == "push");
        match (k.name() == "redlock_waits_total" && push, value) {
            (true, DebugValue::Counter(n)) => Some(*n),
            _ => None,
        }
    });
    assert_eq!(pushed, Some(1), "{snapshot:?}");
    let timed = snapshot.iter().any(|(key, _, _, value)| {
        key.key().name() == "redlock_wait_seconds"
            && matches!(value, DebugValue::Histogram(v) if v.len() == 1)
    });
    assert!(timed, "{snapshot:?}");
}
