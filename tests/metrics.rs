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
