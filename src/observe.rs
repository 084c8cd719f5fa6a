//! Tracing (feature `tracing`) and metrics (feature `metrics`): a span per operation and
//! events for what happens between them, through the `tracing` facade; counters and a
//! histogram through the `metrics` facade. Without the features every call here is empty and
//! compiles to nothing.
//!
//! Metrics: `redlock_operations_total{op, outcome}` (op: acquire, release, extend, inspect;
//! outcome: ok or the error's kind), `redlock_operation_seconds{op}` (a histogram),
//! `redlock_reconnects_total`, `redlock_script_fallbacks_total`,
//! `redlock_guard_extensions_total`, `redlock_guard_losses_total{cause}`,
//! `redlock_waits_total{cause}` (a waiter of `lock` woken: push, dropped, lapse, timer,
//! delay) and `redlock_wait_seconds` (how long it waited).
//!
//! Spans: `redlock.acquire` (one per acquisition round set: plain, fenced or a set), and
//! `redlock.release`, `redlock.extend`, `redlock.inspect`, each with `resource`, `outcome`
//! (`ok` or the error's kind), `elapsed_us`, and, when there is one, `token` (its first 8
//! characters, never the whole token) and `fencing_token`; on failure `nodes` (every node's
//! outcome). Events: a connection opened again (`reconnect`), a `NOSCRIPT` answered with `EVAL`,
//! a guard's extension and its loss, a waiter woken (with the cause and how long it waited).

#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::time::Instant;

use crate::core::event::Event;
#[cfg(any(feature = "tracing", feature = "metrics"))]
use crate::error::Error;
#[cfg(feature = "tracing")]
use crate::Token;

/// An operation's span, open until [`finish`](OpSpan::finish).
#[derive(Debug)]
pub(crate) struct OpSpan {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    started: Instant,
    #[cfg(feature = "metrics")]
    op: &'static str,
}

/// The first 8 characters of a token: enough to follow one holder through the logs, not
/// enough to release its lock.
#[cfg(feature = "tracing")]
fn prefix(t: &Token) -> &str {
    &t.as_str()[..8]
}

impl OpSpan {
    /// Opens the span of operation `op` on `resource`.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    #[inline]
    pub(crate) fn new(op: &'static str, resource: &str) -> OpSpan {
        OpSpan {
            #[cfg(feature = "tracing")]
            span: tracing::info_span!(
                "redlock",
                op,
                resource,
                outcome = tracing::field::Empty,
                elapsed_us = tracing::field::Empty,
                token = tracing::field::Empty,
                fencing_token = tracing::field::Empty,
                nodes = tracing::field::Empty,
            ),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            started: Instant::now(),
            #[cfg(feature = "metrics")]
            op,
        }
    }

    /// Records how an acquisition ended (with the lock's token and fencing token when it
    /// won) and closes the span.
    #[inline]
    pub(crate) fn finish_acquire(self, result: &Result<crate::Lock, crate::error::Error>) {
        let lock = result.as_ref().ok();
        self.finish(
            result,
            lock.map(|l| l.token()),
            lock.and_then(|l| l.fencing_token()),
        );
    }

    /// Records how the operation ended (the lock's token for an acquisition) and closes the
    /// span.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    #[inline]
    pub(crate) fn finish<T>(
        self,
        result: &Result<T, crate::error::Error>,
        token: Option<&crate::Token>,
        fencing: Option<u64>,
    ) {
        #[cfg(feature = "metrics")]
        {
            let outcome = match result {
                Ok(_) => "ok",
                Err(e) => kind(e),
            };
            meter::operation(self.op, outcome, self.started.elapsed().as_secs_f64());
        }
        #[cfg(feature = "tracing")]
        {
            let s = &self.span;
            s.record("elapsed_us", self.started.elapsed().as_micros() as u64);
            if let Some(t) = token {
                s.record("token", prefix(t));
            }
            if let Some(f) = fencing {
                s.record("fencing_token", f);
            }
            match result {
                Ok(_) => {
                    s.record("outcome", "ok");
                }
                Err(e) => {
                    s.record("outcome", kind(e));
                    if let Some(nodes) = nodes(e) {
                        s.record("nodes", tracing::field::display(nodes));
                    }
                }
            }
        }
    }
}

#[cfg(any(feature = "tracing", feature = "metrics"))]
fn kind(e: &Error) -> &'static str {
    match e {
        Error::Conflict { .. } => "conflict",
        Error::NoQuorum { .. } => "no_quorum",
        Error::ValiditySpent { .. } => "validity_spent",
        Error::NotHeld { .. } => "not_held",
        Error::Expired => "expired",
        Error::Config(_) => "config",
        Error::Aborted => "aborted",
        Error::Forked => "forked",
        _ => "other",
    }
}

#[cfg(feature = "tracing")]
fn nodes(e: &Error) -> Option<&crate::error::NodeReports> {
    match e {
        Error::Conflict { nodes, .. } | Error::NoQuorum { nodes } | Error::NotHeld { nodes } => {
            Some(nodes)
        }
        _ => None,
    }
}

/// Hands the core's events to the facades, each once, and empties `events`.
#[inline]
pub(crate) fn events(cfg: &crate::Config, events: &mut Vec<Event>) {
    if events.is_empty() {
        return;
    }
    for e in events.drain(..) {
        event(
            |i| {
                cfg.nodes()
                    .get(i)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            },
            &e,
        );
    }
}

/// Hands the engine's queued events to the facades, each once.
#[inline]
pub(crate) fn engine_events<U>(engine: &mut crate::core::engine::Engine<U>) {
    if !engine.has_events() {
        return;
    }
    while let Some(e) = engine.poll_event() {
        event(|i| engine.addr(i).to_string(), &e);
    }
}

/// One event of the core, to the facades. (Without the `tracing` and `metrics` features,
/// nothing.)
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
fn event(addr: impl Fn(usize) -> String, e: &Event) {
    match e {
        Event::Connect { node, connects } => {
            #[cfg(feature = "tracing")]
            if *connects > 1 {
                tracing::debug!(node = %addr(*node), connects, "redlock: reconnecting");
            }
            #[cfg(feature = "metrics")]
            if *connects > 1 {
                meter::count(&meter::RECONNECTS);
            }
        }
        Event::EvictionUnchecked { node, why } => {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                node = %addr(*node),
                why,
                "redlock: cannot read the master's maxmemory-policy; fencing assumes it never evicts the counter"
            );
        }
        Event::ScriptFallback { .. } => {
            #[cfg(feature = "tracing")]
            tracing::debug!("redlock: script missing on the server; sent again with its body");
            #[cfg(feature = "metrics")]
            meter::count(&meter::FALLBACKS);
        }
        Event::Waited {
            resource,
            cause,
            waited,
        } => {
            #[cfg(feature = "tracing")]
            tracing::debug!(
                resource = resource.as_str(),
                cause,
                waited_us = waited.as_micros() as u64,
                "redlock: waiter woken"
            );
            #[cfg(feature = "metrics")]
            meter::wait(cause, waited.as_secs_f64());
        }
        _ => {}
    }
}

/// A guard extended its lock.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
#[inline]
pub(crate) fn extended(resource: &str, extensions: u32) {
    #[cfg(feature = "tracing")]
    tracing::debug!(resource, extensions, "redlock: guard extended its lock");
    #[cfg(feature = "metrics")]
    meter::count(&meter::EXTENSIONS);
}

/// A guard's lock was lost.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
#[inline]
pub(crate) fn lost(resource: &str, loss: &crate::Loss) {
    #[cfg(feature = "tracing")]
    tracing::warn!(resource, %loss, "redlock: guard lost its lock");
    #[cfg(feature = "metrics")]
    {
        let cause = match loss {
            crate::Loss::ExtendFailed(_) => "extend_failed",
            crate::Loss::ExtendTooSlow => "extend_too_slow",
            crate::Loss::Expired => "expired",
            _ => "other",
        };
        meter::loss(cause);
    }
}

/// Describes every metric this library records (its unit and what it counts) to the recorder
/// installed now, so that exporters can print them (Prometheus's `# HELP` lines). Call it once,
/// after installing the recorder; recording works without it.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(
        "redlock_operations_total",
        Unit::Count,
        "Lock operations by op (acquire, release, extend, inspect) and outcome (ok, or the error's kind)."
    );
    describe_histogram!(
        "redlock_operation_seconds",
        Unit::Seconds,
        "Time each lock operation took, by op, retries of an acquisition included."
    );
    describe_counter!(
        "redlock_reconnects_total",
        Unit::Count,
        "Connections to a master opened again after one failed."
    );
    describe_counter!(
        "redlock_script_fallbacks_total",
        Unit::Count,
        "EVALSHA commands answered NOSCRIPT and sent again as EVAL."
    );
    describe_counter!(
        "redlock_guard_extensions_total",
        Unit::Count,
        "Extensions a lock guard made to keep its lock alive."
    );
    describe_counter!(
        "redlock_guard_losses_total",
        Unit::Count,
        "Locks a guard lost, by cause (extend_failed, extend_too_slow, expired)."
    );
    describe_counter!(
        "redlock_waits_total",
        Unit::Count,
        "Waits for a held lock that ended, by what ended them (push, dropped, lapse, timer, delay)."
    );
    describe_histogram!(
        "redlock_wait_seconds",
        Unit::Seconds,
        "How long a caller waited for a held lock before trying again."
    );
}

/// The metrics, with keys built at compile time: recording one allocates nothing, whether a
/// recorder is installed or not.
#[cfg(feature = "metrics")]
mod meter {
    use metrics::{Key, Label, Level, Metadata};

    static METADATA: Metadata<'static> =
        Metadata::new("redlock_mux", Level::INFO, Some(module_path!()));

    pub(super) static RECONNECTS: Key = Key::from_static_name("redlock_reconnects_total");
    pub(super) static FALLBACKS: Key = Key::from_static_name("redlock_script_fallbacks_total");
    pub(super) static EXTENSIONS: Key = Key::from_static_name("redlock_guard_extensions_total");

    const OPS: [&str; 4] = ["acquire", "release", "extend", "inspect"];
    const OUTCOMES: [&str; 8] = [
        "ok",
        "conflict",
        "no_quorum",
        "validity_spent",
        "not_held",
        "expired",
        "config",
        "aborted",
    ];

    const fn pair(op: usize, outcome: usize) -> [Label; 2] {
        [
            Label::from_static_parts("op", OPS[op]),
            Label::from_static_parts("outcome", OUTCOMES[outcome]),
        ]
    }

    const fn row(op: usize) -> [[Label; 2]; 8] {
        [
            pair(op, 0),
            pair(op, 1),
            pair(op, 2),
            pair(op, 3),
            pair(op, 4),
            pair(op, 5),
            pair(op, 6),
            pair(op, 7),
        ]
    }

    static OP_OUTCOME: [[[Label; 2]; 8]; 4] = [row(0), row(1), row(2), row(3)];
    static OP_ONLY: [[Label; 1]; 4] = [
        [Label::from_static_parts("op", OPS[0])],
        [Label::from_static_parts("op", OPS[1])],
        [Label::from_static_parts("op", OPS[2])],
        [Label::from_static_parts("op", OPS[3])],
    ];
    static CAUSES: [[Label; 1]; 3] = [
        [Label::from_static_parts("cause", "extend_failed")],
        [Label::from_static_parts("cause", "extend_too_slow")],
        [Label::from_static_parts("cause", "expired")],
    ];

    pub(super) fn count(key: &Key) {
        metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
    }

    pub(super) fn operation(op: &str, outcome: &str, seconds: f64) {
        let (Some(o), Some(r)) = (
            OPS.iter().position(|x| *x == op),
            OUTCOMES.iter().position(|x| *x == outcome),
        ) else {
            return;
        };
        let counter = Key::from_static_parts("redlock_operations_total", &OP_OUTCOME[o][r]);
        let timer = Key::from_static_parts("redlock_operation_seconds", &OP_ONLY[o]);
        metrics::with_recorder(|rec| {
            rec.register_counter(&counter, &METADATA).increment(1);
            rec.register_histogram(&timer, &METADATA).record(seconds);
        });
    }

    const WAKES: [&str; 5] = ["push", "dropped", "timer", "delay", "lapse"];
    static WAKE_CAUSES: [[Label; 1]; 5] = [
        [Label::from_static_parts("cause", WAKES[0])],
        [Label::from_static_parts("cause", WAKES[1])],
        [Label::from_static_parts("cause", WAKES[2])],
        [Label::from_static_parts("cause", WAKES[3])],
        [Label::from_static_parts("cause", WAKES[4])],
    ];
    static WAIT_SECONDS: Key = Key::from_static_name("redlock_wait_seconds");

    pub(super) fn wait(cause: &str, seconds: f64) {
        let Some(i) = WAKES.iter().position(|x| *x == cause) else {
            return;
        };
        let key = Key::from_static_parts("redlock_waits_total", &WAKE_CAUSES[i]);
        metrics::with_recorder(|r| {
            r.register_counter(&key, &METADATA).increment(1);
            r.register_histogram(&WAIT_SECONDS, &METADATA)
                .record(seconds);
        });
    }

    pub(super) fn loss(cause: &str) {
        let Some(i) = ["extend_failed", "extend_too_slow", "expired"]
            .iter()
            .position(|x| *x == cause)
        else {
            return;
        };
        let key = Key::from_static_parts("redlock_guard_losses_total", &CAUSES[i]);
        metrics::with_recorder(|r| r.register_counter(&key, &METADATA).increment(1));
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    /// Every cause a wait can end by (`Event::Waited`) is counted under its own label: a
    /// cause the table does not know would be dropped without a word.
    #[test]
    fn every_cause_of_a_wait_is_counted() {
        use redlock_core::engine::Wake;
        let causes = [
            Wake::Pushed.as_str(),
            Wake::Dropped.as_str(),
            Wake::Lapse.as_str(),
            "timer",
            "delay",
        ];
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            for cause in causes {
                super::meter::wait(cause, 0.001);
            }
        });
        let snapshot = snapshotter.snapshot().into_vec();
        for cause in causes {
            let counted = snapshot.iter().any(|(key, _, _, value)| {
                let k = key.key();
                k.name() == "redlock_waits_total"
                    && k.labels().any(|l| l.key() == "cause" && l.value() == cause)
                    && matches!(value, DebugValue::Counter(1))
            });
            assert!(counted, "{cause}: {snapshot:?}");
        }
    }
}
