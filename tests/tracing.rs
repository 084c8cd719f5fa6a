//! The `tracing` feature: one span per operation with its outcome, and never a whole token.
#![cfg(feature = "tracing")]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redlock_mux::Error;
use tracing_subscriber::fmt::format::FmtSpan;

/// A writer into a shared buffer, for the subscriber.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The tests of this file one at a time, each reading the shared buffer from empty.
static SERIAL: Mutex<()> = Mutex::new(());

/// The buffer of the process's one subscriber.
static BUFFER: OnceLock<Buffer> = OnceLock::new();

/// The buffer, emptied, of one subscriber of everything at debug level and above (spans on
/// close), installed once as the process's global default. A global subscriber, never a scoped
/// one (`with_default`): `tracing` caches each callsite's interest for the whole process, and
/// scoped subscribers set and dropped by tests on several threads can leave that cache saying
/// "never" for a callsite (two CI runs on a busy machine captured nothing at all that way,
/// once even with the tests serialized). With one global subscriber there is one answer.
fn capture() -> Buffer {
    let buf = BUFFER.get_or_init(|| {
        let buf = Buffer::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_span_events(FmtSpan::CLOSE)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other subscriber is installed in this test binary");
        buf
    });
    buf.0.lock().unwrap().clear();
    buf.clone()
}

#[test]
fn every_operation_is_a_span_with_its_outcome_and_no_whole_token() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = testkit::cluster(3);
    let key = testkit::resource("traced");
    let buf = capture();
    let token = {
        let client = testkit::builder(&c)
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        let mut lock = client.lock(&key, Duration::from_secs(10)).unwrap();
        client.extend(&mut lock, Duration::from_secs(10)).unwrap();
        let other = testkit::builder(&c)
            .retry(1, Duration::ZERO)
            .build()
            .unwrap();
        assert!(matches!(
            other.try_lock(&key, Duration::from_secs(10)),
            Err(Error::Conflict { .. })
        ));
        client.unlock(&lock).unwrap();
        let view = client.inspect(&key).unwrap();
        assert_eq!(view.quorum_holder(), None);
        lock.token().as_str().to_string()
    };
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let closes: Vec<&str> = out.lines().filter(|l| l.contains("close")).collect();
    let find = |op: &str, outcome: &str| {
        closes.iter().any(|l| {
            l.contains(&format!("op=\"{op}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
                && l.contains(&key)
        })
    };
    assert!(find("acquire", "ok"), "{out}");
    assert!(find("extend", "ok"), "{out}");
    assert!(find("acquire", "conflict"), "{out}");
    assert!(find("release", "ok"), "{out}");
    assert!(find("inspect", "ok"), "{out}");
    // The conflict names every node's answer; the token appears by its first 8 characters.
    assert!(out.contains("held by another token"), "{out}");
    assert!(out.contains(&format!("token=\"{}\"", &token[..8])), "{out}");
    assert!(!out.contains(&token), "the whole token was logged:\n{out}");
}

#[test]
fn a_waiter_woken_by_a_push_is_an_event_with_its_cause() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = testkit::cluster(3);
    let key = testkit::resource("traced-wait");
    let buf = capture();
    let releaser = testkit::release_once_a_waiter_is_tracked(&c, &key);
    testkit::wait_for_a_push_and_take(&c, &key);
    releaser.join().unwrap();
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let woken: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("redlock: waiter woken"))
        .collect();
    // A push from the first master to delete the key wakes the waiter; if its try reaches the
    // others before the release did, it loses and waits for the next push (a busy machine did
    // that, and then woke on its short retry timer): the first wake-up is the push's, and each
    // names its cause, the resource and the time waited.
    assert!(!woken.is_empty(), "{out}");
    assert!(woken[0].contains("cause=\"push\""), "{out}");
    for line in &woken {
        assert!(line.contains("cause=\""), "{out}");
        assert!(line.contains(&key), "{out}");
        assert!(line.contains("waited_us="), "{out}");
    }
}
