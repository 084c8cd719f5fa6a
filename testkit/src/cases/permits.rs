//! Semaphores (`acquire_permit`): at most `permits` holders, each on a slot of its own taken by
//! a quorum of masters; what a try leaves on the masters; masters down.

use super::*;

use std::sync::atomic::{AtomicUsize, Ordering};

use redlock_mux::Semaphore;

/// The key of slot `i` of `sem`.
fn slot(sem: &Semaphore, i: usize) -> String {
    sem.slot_key(i).expect("a slot").to_string()
}

/// Three permits go to three clients, each on a slot of its own held by a majority; a fourth
/// client is refused with a conflict and sets nothing; once one permit is released, the
/// fourth gets its slot.
pub fn permits_admit_at_most_their_number<F: Flavor>() {
    let c = cluster(5);
    let addrs = c.addrs();
    let sem = Semaphore::new(&resource("sem-admit"), 3).unwrap();
    let clients: Vec<F::Client> = (0..4)
        .map(|_| F::build(builder(&c).retry(1, Duration::ZERO)).unwrap())
        .collect();
    let mut held = Vec::new();
    for client in &clients[..3] {
        let permit = client.try_acquire_permit(&sem, TTL).unwrap();
        assert!(permit.validity() > Duration::ZERO);
        assert_eq!(permit.fencing_token(), None);
        held.push(permit);
    }
    let mut slots: Vec<usize> = held
        .iter()
        .map(|p| sem.slot_of(p.resource()).expect("a slot of the semaphore"))
        .collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1, 2], "one slot each");
    for (client, p) in clients.iter().zip(&held) {
        held_on_a_majority(client, &addrs, p.resource(), p.token());
    }
    match clients[3].try_acquire_permit(&sem, TTL) {
        Err(Error::Conflict { nodes, .. }) => {
            assert_eq!(nodes.0.len(), 5, "{nodes}");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Nothing of the refused client's on any slot.
    for (client, p) in clients.iter().zip(&held) {
        held_on_a_majority(client, &addrs, p.resource(), p.token());
    }
    let freed = held.remove(1);
    clients[1].unlock(&freed).unwrap();
    let fourth = clients[3].try_acquire_permit(&sem, TTL).unwrap();
    assert_eq!(fourth.resource(), freed.resource(), "the freed slot");
    held_on_a_majority(&clients[3], &addrs, fourth.resource(), fourth.token());
    // A permit is extended and released as any lock.
    let mut fourth = fourth;
    clients[3].extend(&mut fourth, TTL).unwrap();
    clients[3].unlock(&fourth).unwrap();
    gone_everywhere(&clients[3], &addrs, fourth.resource());
}

/// Masters that gave the caller different slots: a quorum naming one slot wins it, and the
/// slot the others gave is released at once; with no slot named by a quorum the try is
/// lost and every slot it may have set is released before the error.
pub fn a_permit_needs_a_quorum_on_one_slot<F: Flavor>() {
    let c = cluster(5);
    let addrs = c.addrs();
    let client = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    let foreign = |a: &str, key: &str| {
        redis(a, &["SET", key, "foreign", "PX", "60000"]);
    };
    // Slot 0 taken on masters 0 and 1, slot 1 on masters 2 and 3, both on master 4: masters
    // 0 and 1 give slot 1, masters 2 and 3 slot 0, whatever the try's order. Two and two:
    // no quorum.
    let sem = Semaphore::new(&resource("sem-split"), 2).unwrap();
    let (s0, s1) = (slot(&sem, 0), slot(&sem, 1));
    for a in &addrs[0..2] {
        foreign(a, &s0);
    }
    for a in &addrs[2..4] {
        foreign(a, &s1);
    }
    foreign(&addrs[4], &s0);
    foreign(&addrs[4], &s1);
    match client.try_acquire_permit(&sem, TTL) {
        Err(Error::Conflict { .. } | Error::NoQuorum { .. }) => {}
        other => panic!("two slots two votes each: expected a refusal, got {other:?}"),
    }
    // The release ran before the error: only the foreign values are left.
    for (i, a) in addrs.iter().enumerate() {
        let want = |taken: bool| taken.then(|| "foreign".to_string());
        assert_eq!(get(a, &s0), want(i < 2 || i == 4), "slot 0 on master {i}");
        assert_eq!(
            get(a, &s1),
            want((2..5).contains(&i)),
            "slot 1 on master {i}"
        );
    }
    // Slot 0 taken on masters 0 and 1, slot 1 on masters 2, 3 and 4: those three give
    // slot 0, a quorum, whatever the try's order; masters 0 and 1 give slot 1, which is
    // released there at once.
    let sem = Semaphore::new(&resource("sem-spare"), 2).unwrap();
    let (s0, s1) = (slot(&sem, 0), slot(&sem, 1));
    for a in &addrs[0..2] {
        foreign(a, &s0);
    }
    for a in &addrs[2..5] {
        foreign(a, &s1);
    }
    let permit = client.try_acquire_permit(&sem, TTL).unwrap();
    assert_eq!(permit.resource(), s0);
    for a in &addrs[2..5] {
        assert_eq!(get(a, &s0).as_deref(), Some(permit.token().as_str()));
    }
    let spare_gone = crate::serve_until(&client, IN_FLIGHT, || {
        addrs[0..2].iter().all(|a| get(a, &s1).is_none())
    });
    assert!(spare_gone, "the spare slot released on masters 0 and 1");
    for a in &addrs[2..5] {
        assert_eq!(get(a, &s1).as_deref(), Some("foreign"));
    }
    client.unlock(&permit).unwrap();
}

/// Permits stay available while a majority of masters is up, and are refused, naming the
/// masters down, once it is not.
pub fn permits_with_masters_down<F: Flavor>() {
    let mut c = cluster(5);
    let sem = Semaphore::new(&resource("sem-down"), 2).unwrap();
    c.server(0).stop();
    c.server(3).stop();
    let client = F::build(builder(&c).retry(1, Duration::ZERO)).unwrap();
    let a = client.try_acquire_permit(&sem, TTL).unwrap();
    let b = client.try_acquire_permit(&sem, TTL).unwrap();
    assert_ne!(a.resource(), b.resource());
    assert!(matches!(
        client.try_acquire_permit(&sem, TTL),
        Err(Error::Conflict { .. })
    ));
    client.unlock(&a).unwrap();
    c.server(1).stop();
    match client.try_acquire_permit(&sem, TTL) {
        Err(Error::NoQuorum { nodes }) => {
            let down = nodes.0.iter().filter(|r| r.outcome.is_failure()).count();
            assert_eq!(down, 3, "{nodes}");
        }
        other => panic!("expected no quorum with three of five down, got {other:?}"),
    }
}

/// Threads of two clients take permits of a two-permit semaphore in a loop, each holding it a
/// little: at no moment do more than two hold one (counted between each grant and its
/// release, which lie within the permit's validity).
pub fn permits_under_contention_never_exceed_their_number<F: Flavor>()
where
    F::Client: Sync,
{
    let c = cluster(5);
    let sem = Semaphore::new(&resource("sem-load"), 2).unwrap();
    let clients: Vec<F::Client> = (0..2)
        .map(|_| F::build(builder(&c).retry(1, Duration::from_millis(5))).unwrap())
        .collect();
    let holders = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let granted = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..6 {
            let (client, sem, holders, most, granted) =
                (&clients[t % 2], &sem, &holders, &most, &granted);
            s.spawn(move || {
                for _ in 0..12 {
                    let permit = match client.acquire_permit_within(
                        sem,
                        Duration::from_secs(20),
                        Duration::from_secs(30),
                    ) {
                        Ok(p) => p,
                        Err(e) => panic!("a permit within 30 s: {e}"),
                    };
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    granted.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    assert!(permit.validity() > Duration::ZERO, "held past its validity");
                    holders.fetch_sub(1, Ordering::SeqCst);
                    client.unlock(&permit).unwrap();
                }
            });
        }
    });
    assert_eq!(granted.load(Ordering::SeqCst), 72);
    let most = most.load(Ordering::SeqCst);
    assert!((1..=2).contains(&most), "{most} holders at once");
}
