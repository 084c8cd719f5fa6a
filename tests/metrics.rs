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
