//! The masters' wall clocks. The client measures only durations, on its monotonic clock; the
//! masters do not: Redis keeps a key's expiry as a wall-clock time (`PX` is stored as "now +
//! ttl" in Unix milliseconds) and compares it with the wall clock it reads for each command.
//! A master whose clock is stepped forward lets its keys go that much early. This is the
//! documented failure (`docs/redlock.md`, "Why two clients cannot both hold the lock"), shown
//! on real servers whose clocks libfaketime steps (`testkit::clock`).

use std::time::{Duration, Instant};

use redlock_mux::{Error, Redlock};
use testkit::checker::Checker;
use testkit::clock::{libfaketime, SteppedServer};
use testkit::get;

/// Negative control for the clock assumption: three masters, a fenced holder A with 30 s of
/// ttl; the wall clocks of two masters are stepped 60 s forward, and A's keys there expire at
/// once. Client B takes the lock while A's validity still has most of its 30 s to run: two
/// holders within validity, which the checker must report. Fencing still orders them (B's
/// token is greater), and before the step B is refused, so the step is what let it in.
#[test]
fn negative_control_a_step_of_two_masters_wall_clocks_lets_a_second_holder_in() {
    let Some(lib) = libfaketime() else {
        eprintln!(
            "\n!!! NOT RUN: the wall-clock negative control is skipped: libfaketime.so.1 is\n\
             !!! not installed (run `bash scripts/install-deps`, which installs Debian's\n\
             !!! faketime package, or set REDLOCK_LIBFAKETIME to the library).\n"
        );
        return;
    };
    let servers: Vec<SteppedServer> = (0..3)
        .map(|_| SteppedServer::start(&lib).expect("redis-server under libfaketime"))
        .collect();
    let addrs: Vec<String> = servers
        .iter()
        .map(|s| s.server().addr().to_string())
        .collect();
    let client = || {
        Redlock::builder()
            .nodes(&addrs)
            .node_timeout(Duration::from_millis(500))
            .fencing(true)
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    };
    let (a, b) = (client(), client());
    let ttl = Duration::from_secs(30);
    let resource = "clock-step";
    let checker = Checker::new();

    let lock_a = a.lock(resource, ttl).unwrap();
    let section_a = checker.enter_fenced(0, 0, lock_a.valid_until(), lock_a.fencing_token());
    // Clocks in step: B is refused.
    match b.try_lock(resource, ttl) {
        Err(Error::Conflict { .. }) => {}
        other => panic!("before the step B must be refused, got {other:?}"),
    }

    // Two of three masters' wall clocks jump 60 s ahead: A's keys there are past their
    // expiry, and the next command that looks at them (B's SET NX) finds them gone.
    for s in &servers[..2] {
        s.step(Duration::from_secs(60)).unwrap();
    }
    // A server reads its clock into a cache as its event loop turns (Valkey may answer one
    // command from the time read before the step): the keys go within moments, long before
    // their 30 s ttl.
    for a in &addrs[..2] {
        testkit::wait_until(
            Duration::from_secs(5),
            "A's key to expire on a stepped master",
            || get(a, resource).is_none(),
        );
    }
    assert!(
        get(&addrs[2], resource).is_some(),
        "the third master was not stepped"
    );

    let lock_b = b
        .try_lock(resource, ttl)
        .expect("after the step, B takes the lock A still holds");
    let now = Instant::now();
    let a_left = lock_a.valid_until().saturating_duration_since(now);
    eprintln!(
        "B holds the lock while A's validity has {a_left:?} left; tokens: A {:?}, B {:?}",
        lock_a.fencing_token(),
        lock_b.fencing_token()
    );
    // The documented failure: both hold the lock within their validity.
    assert!(
        lock_a.valid_until() > now,
        "A's validity ended before B got the lock: nothing shown"
    );
    let section_b = checker.enter_fenced(1, 0, lock_b.valid_until(), lock_b.fencing_token());
    checker.leave(section_b);
    checker.leave(section_a);
    assert_eq!(
        checker.overlaps().len(),
        1,
        "the checker must see two holders"
    );
    // Fencing still orders them: a resource that checks tokens refuses A from now on.
    assert!(
        lock_b.fencing_token() > lock_a.fencing_token(),
        "tokens: A {:?}, B {:?}",
        lock_a.fencing_token(),
        lock_b.fencing_token()
    );
    b.unlock(&lock_b).unwrap();
}
