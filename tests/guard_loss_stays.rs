//! A blocking guard's loss, once seen, stays seen: `is_lost()` never goes from true back to
//! false. The keeper judges an extension late, and stores it when it is not, under the lock's
//! mutex, where the guard reads the lock and the clock together.
//!
//! The extension is made to land past the loss deadline: one master, node timeout 1 s, ttl
//! 3 s, threshold 0.05 (the keeper extends 1.15 s before the validity's end; the deadline is
//! 0.15 s before it). Just before the keeper wakes, the master is paused while another
//! thread's `inspect` round waits its whole node timeout; the keeper's extension queues
//! behind it, and the master is resumed 50 ms past the loss deadline, so the extension is
//! confirmed after the deadline. Reader threads spin on `is_lost()` meanwhile.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_mux::{KeepAlive, Redlock};

const TRIALS: usize = 5;
const READERS: usize = 2;

#[test]
fn a_blocking_guards_loss_once_seen_stays_seen() {
    let mut c = testkit::cluster(1);
    let client: Redlock = Redlock::builder()
        .nodes(c.addrs())
        .node_timeout(Duration::from_secs(1))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let policy = KeepAlive::default().extend_when_left(0.05);
    let ttl = Duration::from_secs(3);
    let mut flips = 0;
    let mut late_ok = 0;
    for trial in 0..TRIALS {
        let guard = Arc::new(
            client
                .lock_guarded_with(&format!("flip:{trial}"), ttl, policy)
                .expect("lock"),
        );
        let valid_until = Instant::now() + guard.lock().validity();
        let wake = valid_until - Duration::from_millis(1150);
        let deadline = valid_until - Duration::from_millis(150);
        // Readers: spin on is_lost() from just before the deadline; count true -> false.
        let stop = Arc::new(AtomicBool::new(false));
        let flipped = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let (guard, stop, flipped) = (guard.clone(), stop.clone(), flipped.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(
                        deadline.saturating_duration_since(Instant::now())
                            - Duration::from_millis(20)
                                .min(deadline.saturating_duration_since(Instant::now())),
                    );
                    let mut seen = false;
                    while !stop.load(Ordering::Relaxed) {
                        let lost = guard.is_lost();
                        if seen && !lost {
                            flipped.fetch_add(1, Ordering::Relaxed);
                        }
                        seen |= lost;
                    }
                })
            })
            .collect();
        std::thread::sleep(
            wake.saturating_duration_since(Instant::now()) - Duration::from_millis(60),
        );
        c.server(0).pause().unwrap();
        let busy = {
            let client = client.clone();
            std::thread::spawn(move || {
                let _ = client.inspect("flip:other");
            })
        };
        std::thread::sleep(
            (deadline + Duration::from_millis(50)).saturating_duration_since(Instant::now()),
        );
        c.server(0).resume().unwrap();
        busy.join().unwrap();
        // Until the keeper's report is in, then a little longer.
        let _ = guard.wait_lost(Duration::from_secs(2));
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        let n = flipped.load(Ordering::Relaxed);
        let loss = guard.loss();
        let ext = guard.extensions();
        eprintln!("trial {trial}: loss {loss:?}, extensions {ext}, true->false flips {n}");
        if ext == 0 && matches!(loss, Some(redlock_mux::Loss::ExtendTooSlow)) {
            late_ok += 1;
        }
        if n > 0 {
            flips += 1;
            break;
        }
        drop(guard);
    }
    eprintln!("trials with a flip: {flips}; late extensions: {late_ok}");
    assert_eq!(
        flips, 0,
        "is_lost() went from true back to false (a loss once seen did not stay seen)"
    );
}
