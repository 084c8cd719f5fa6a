//! `redlock demo`: five throwaway masters, clients fighting over one resource, a master paused
//! midway, and the mutual-exclusion checker's verdict.

use std::time::{Duration, Instant};

use rand::Rng;
use redlock_mux::{Error, Redlock};

use crate::args::{nodes_or_local, DemoArgs, Global};
use crate::exit::{self, Failure};
use crate::out;
use crate::stats::{self, Recorder};

use testkit::checker::Checker;

/// Appends one line to the report (a `String`, which a write cannot fail on).
macro_rules! say {
    ($text:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($text, $($arg)*);
    }};
}

/// Runs `redlock demo`; returns the exit code.
pub fn demo(global: &Global, a: &DemoArgs) -> Result<u8, Failure> {
    if a.clients == 0 {
        return Err(Failure::new(exit::USAGE, "--clients must be at least 1"));
    }
    let (nodes, mut cluster) = nodes_or_local(global)?;
    let clients = (0..a.clients)
        .map(|_| global.blocking(&nodes))
        .collect::<Result<Vec<_>, _>>()?;
    // The nodes must answer before the clock starts.
    let probe = &clients[0];
    let resource = format!(
        "redlock-demo:{}",
        &redlock_mux::Token::from_random(&mut redlock_mux::OsRandom).as_str()[..8]
    );
    let lock = probe
        .try_lock(&resource, global.ttl)
        .map_err(|e| Failure::lock("probing the nodes", &e))?;
    let _ = probe.unlock(&lock);

    let checker = Checker::new();
    let start = Instant::now();
    let end = start + a.duration;
    let pause = (!a.no_faults && cluster.is_some())
        .then(|| (start + a.duration * 7 / 20, start + a.duration * 13 / 20));
    let mut paused_for = None;
    let ttl = global.ttl;

    let rec = std::thread::scope(|s| -> Result<Recorder, Failure> {
        let workers: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, redlock)| {
                let (checker, resource) = (&checker, resource.as_str());
                std::thread::Builder::new()
                    .name(format!("demo-{i}"))
                    .spawn_scoped(s, move || contend(i, redlock, resource, ttl, end, checker))
                    .map_err(|e| Failure::os("starting a demo thread", e))
            })
            .collect::<Result<_, _>>()?;
        // The fault schedule, on this thread: one master stopped (SIGSTOP) for the middle
        // 30% of the run, then resumed.
        if let (Some((from, until)), Some(cluster)) = (pause, cluster.as_mut()) {
            std::thread::sleep(from.saturating_duration_since(Instant::now()));
            let paused_at = Instant::now();
            if cluster.server(2).pause().is_ok() {
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                let _ = cluster.server(2).resume();
                paused_for = Some((paused_at - start, paused_at.elapsed()));
            }
        }
        stats::join(workers, "demo")
    })?;
    let elapsed = start.elapsed();

    let run = Run {
        masters: masters_line(cluster.as_ref(), &clients[0]),
        clients: a.clients,
        elapsed,
        paused_for,
    };
    let (text, ok) = report(&run, &rec, &checker);
    drop(cluster);
    out::print(&text, "the report")?;
    if ok {
        Ok(0)
    } else {
        Err(Failure::new(exit::FAILED, "mutual exclusion violated"))
    }
}

/// What a demo run was, for its report.
struct Run {
    /// The masters line of the report.
    masters: String,
    clients: usize,
    elapsed: Duration,
    /// When a master was paused, and for how long.
    paused_for: Option<(Duration, Duration)>,
}

/// The masters line: local ones with their ports, or the given ones without their passwords.
fn masters_line(cluster: Option<&testkit::local::LocalCluster>, client: &Redlock) -> String {
    let mut text = String::new();
    match cluster {
        Some(c) => say!(
            text,
            "  masters   {} local redis-server processes on 127.0.0.1 (ports {}), quorum {}",
            c.len(),
            c.servers()
                .iter()
                .map(|s| s.port().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            c.len() / 2 + 1
        ),
        // As the client prints them: without their passwords.
        None => say!(
            text,
            "  masters   {} (quorum {})",
            client
                .config()
                .nodes()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            client.config().quorum()
        ),
    }
    text.trim_end().to_string()
}

/// The report of a run, and whether it was safe.
fn report(run: &Run, rec: &Recorder, checker: &Checker) -> (String, bool) {
    let overlaps = checker.overlaps();
    let hits = checker.detector_hits();
    let ok = overlaps.is_empty() && hits == 0;
    let mut text = String::new();
    say!(text, "redlock demo");
    say!(text, "{}", run.masters);
    say!(
            text,
        "  workload  {} clients, each with its own connections, fighting over one resource for {:.1}s",
        run.clients,
        run.elapsed.as_secs_f64()
    );
    match run.paused_for {
        Some((at, len)) => say!(
            text,
            "  fault     master 3 frozen (SIGSTOP) from {:.1}s for {:.1}s, then resumed",
            at.as_secs_f64(),
            len.as_secs_f64()
        ),
        None => say!(text, "  fault     none"),
    }
    say!(
        text,
        "  outcome   {} acquisitions, {} refusals (held by another client), {} failed rounds",
        stats::thousands(rec.pairs),
        stats::thousands(rec.conflicts),
        stats::thousands(rec.errors)
    );
    if let Some(e) = &rec.first_error {
        say!(text, "            first failure: {e}");
    }
    if !rec.lock.is_empty() {
        say!(
            text,
            "  latency   lock p50 {}, p99 {}, max {}",
            stats::human_us(rec.lock.value_at_quantile(0.5)),
            stats::human_us(rec.lock.value_at_quantile(0.99)),
            stats::human_us(rec.lock.max())
        );
    }
    if ok {
        say!(
            text,
            "  safety    OK: never two holders at once ({} holder windows checked, 0 overlaps)",
            stats::thousands(checker.acquisitions() as u64)
        );
    } else {
        say!(
            text,
            "  safety    VIOLATED: {} overlapping windows, occupancy detector hit {hits} times",
            overlaps.len()
        );
        for o in overlaps.iter().take(5) {
            say!(
                text,
                "            client {} and client {} overlapped by {:?}",
                o.first.holder,
                o.second.holder,
                o.by
            );
        }
    }
    (text, ok)
}

/// One client: take the lock, hold it for a moment inside the checker, release; back off a
/// little after a refusal.
fn contend(
    holder: usize,
    redlock: &Redlock,
    resource: &str,
    ttl: Duration,
    end: Instant,
    checker: &Checker,
) -> Recorder {
    let mut rec = Recorder::default();
    let mut rng = rand::rng();
    while Instant::now() < end {
        let t0 = Instant::now();
        let locked = redlock.try_lock(resource, ttl);
        rec.lock(t0.elapsed());
        match locked {
            Ok(lock) => {
                let section = checker.enter(holder, lock.valid_until());
                // The work under the lock.
                std::thread::sleep(Duration::from_micros(rng.random_range(100..1_000)));
                checker.leave(section);
                let t1 = Instant::now();
                match redlock.unlock(&lock) {
                    Ok(()) => rec.pair(t1.elapsed(), t0.elapsed()),
                    Err(e) => rec.error(&e),
                }
            }
            Err(Error::Conflict { .. }) => {
                rec.conflicts += 1;
                std::thread::sleep(Duration::from_micros(rng.random_range(0..500)));
            }
            Err(e) => {
                rec.error(&e);
                std::thread::sleep(Duration::from_micros(rng.random_range(0..500)));
            }
        }
    }
    rec
}
