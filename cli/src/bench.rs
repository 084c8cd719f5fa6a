//! `redlock bench`: lock + unlock pairs for a fixed time, then throughput and latency
//! histograms.
//!
//! Every worker runs single acquisition rounds (`try_lock`, no retries: a retry would measure
//! the retry delay, not the lock) followed by a release. Rounds that start during the warm-up
//! are not recorded; rounds that start before the end are recorded whole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use redlock_mux::{Error, Lock, OsRandom, Redlock, Token};

use crate::args::{nodes_or_local, BenchArgs, Client, Global, Resources};
use crate::exit::{self, Failure};
use crate::lockcmd::json_string;
use crate::out::{self, errln};
use crate::stats::{self, Recorder};

/// When the run measures, shared by every worker.
#[derive(Debug, Clone, Copy)]
struct Clock {
    from: Instant,
    end: Instant,
}

/// Runs `redlock bench`; returns the exit code.
pub fn bench(global: &Global, a: &BenchArgs) -> Result<u8, Failure> {
    if a.clients == 0 || a.depth == 0 {
        return Err(Failure::new(
            exit::USAGE,
            "--clients and --depth must be at least 1",
        ));
    }
    let (nodes, cluster) = nodes_or_local(global)?;
    if cluster.is_some() && !a.json {
        errln!(
            "redlock: no --nodes given; started 5 local masters: {}",
            nodes.join(",")
        );
    }
    let probe = global.blocking(&nodes)?;
    // Fail in one line, before any thread starts, when the nodes cannot be reached.
    let lock = probe
        .try_lock(
            &format!("redlock-bench:probe:{}", Token::from_random(&mut OsRandom)),
            global.ttl,
        )
        .map_err(|e| Failure::lock("probing the nodes", &e))?;
    let _ = probe.unlock(&lock);
    drop(probe);

    // A prefix of this run's own, so that runs side by side do not contend.
    let token = Token::from_random(&mut OsRandom);
    let run = &token.as_str()[..8];
    let resource = |client: usize, slot: usize| match a.resources {
        Resources::Distinct => format!("redlock-bench:{run}:{client}:{slot}"),
        Resources::One => format!("redlock-bench:{run}"),
    };
    let from = Instant::now() + a.warmup;
    let clock = Clock {
        from,
        end: from + a.duration,
    };
    let done = Arc::new(AtomicU64::new(0));
    let progress = Progress::start(a, done.clone());
    let rec = match a.client {
        Client::Blocking => run_blocking(global, &nodes, a, &clock, &done, &resource)?,
        Client::Async => run_async(global, &nodes, a, &clock, &done, &resource)?,
    };
    progress.finish();
    drop(cluster);

    let report = Report {
        global,
        nodes: &nodes,
        a,
        rec: &rec,
        secs: a.duration.as_secs_f64(),
    };
    if a.json {
        out::print(&format!("{}\n", report.json()), "the report")?;
    } else {
        out::print(&report.text(), "the report")?;
    }
    #[cfg(feature = "plot")]
    if let Some(path) = &a.plot {
        crate::plot::histogram(
            path,
            &format!(
                "redlock bench: {} pairs in {:.1}s; {}",
                stats::thousands(rec.pairs),
                a.duration.as_secs_f64(),
                report.header()
            ),
            &[("pair", &rec.pair), ("lock", &rec.lock)],
        )?;
    }
    if rec.pairs == 0 && rec.errors > 0 {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "no pair completed: {}",
                rec.first_error.as_deref().unwrap_or("errors")
            ),
        ));
    }
    Ok(0)
}

/// `--depth` threads per client sharing its `Redlock`, whose rounds carry their operations
/// together.
fn run_blocking(
    global: &Global,
    nodes: &[String],
    a: &BenchArgs,
    clock: &Clock,
    done: &AtomicU64,
    resource: &(dyn Fn(usize, usize) -> String + Sync),
) -> Result<Recorder, Failure> {
    let clients = (0..a.clients)
        .map(|_| global.blocking(nodes))
        .collect::<Result<Vec<_>, _>>()?;
    let ttl = global.ttl;
    let clients = &clients;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..a.clients)
            .flat_map(|c| (0..a.depth).map(move |slot| (c, slot)))
            .map(|(c, slot)| {
                let name = resource(c, slot);
                std::thread::Builder::new()
                    .name(format!("bench-{c}-{slot}"))
                    .spawn_scoped(s, move || {
                        blocking_worker(&clients[c], &name, ttl, clock, done)
                    })
                    .map_err(|e| Failure::os("starting a bench thread", e))
            })
            .collect::<Result<_, _>>()?;
        stats::join(workers, "bench")
    })
}

fn blocking_worker(
    redlock: &Redlock,
    resource: &str,
    ttl: Duration,
    clock: &Clock,
    done: &AtomicU64,
) -> Recorder {
    let mut rec = Recorder::default();
    loop {
        let t0 = Instant::now();
        if t0 >= clock.end {
            return rec;
        }
        let locked = redlock.try_lock(resource, ttl);
        let t1 = Instant::now();
        let unlocked = locked.as_ref().ok().map(|lock| redlock.unlock(lock));
        record(&mut rec, clock, done, t0, t1, &locked, unlocked);
    }
}

/// `--clients` async clients (each its own driver and connections), `--depth` tasks each, on a
/// multi-thread runtime with a worker per core.
fn run_async(
    global: &Global,
    nodes: &[String],
    a: &BenchArgs,
    clock: &Clock,
    done: &Arc<AtomicU64>,
    resource: &(dyn Fn(usize, usize) -> String + Sync),
) -> Result<Recorder, Failure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::os("starting the runtime", e))?;
    let ttl = global.ttl;
    rt.block_on(async {
        let mut tasks = Vec::new();
        let mut recorders = Vec::new();
        for c in 0..a.clients {
            let redlock = global.async_client(nodes)?;
            let rec = Arc::new(Mutex::new(Recorder::default()));
            recorders.push(rec.clone());
            for slot in 0..a.depth {
                let (redlock, rec, name, clock, done) = (
                    redlock.clone(),
                    rec.clone(),
                    resource(c, slot),
                    *clock,
                    done.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    loop {
                        let t0 = Instant::now();
                        if t0 >= clock.end {
                            return;
                        }
                        let locked = redlock.try_lock(&name, ttl).await;
                        let t1 = Instant::now();
                        let unlocked = match &locked {
                            Ok(lock) => Some(redlock.unlock(lock).await),
                            Err(_) => None,
                        };
                        let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
                        record(&mut rec, &clock, &done, t0, t1, &locked, unlocked);
                    }
                }));
            }
        }
        for t in tasks {
            // A task that panicked lost its last round's figures only; the rest are kept.
            let _ = t.await;
        }
        let mut total = Recorder::default();
        for rec in recorders {
            total.merge(&rec.lock().unwrap_or_else(|p| p.into_inner()));
        }
        Ok(total)
    })
}

/// Records one attempt, if it started inside the measured window.
fn record(
    rec: &mut Recorder,
    clock: &Clock,
    done: &AtomicU64,
    t0: Instant,
    t1: Instant,
    locked: &Result<Lock, Error>,
    unlocked: Option<Result<(), Error>>,
) {
    if t0 < clock.from {
        return;
    }
    rec.lock(t1 - t0);
    match (locked, unlocked) {
        (Ok(_), Some(Ok(()))) => {
            let t2 = Instant::now();
            rec.pair(t2 - t1, t2 - t0);
            done.fetch_add(1, Ordering::Relaxed);
        }
        (Ok(_), Some(Err(e))) => rec.error(&e),
        (Err(Error::Conflict { .. }), _) => rec.conflicts += 1,
        (Err(e), _) => rec.error(e),
        (Ok(_), None) => {}
    }
}

/// The progress bar, on stderr when it is a terminal (and not with `--json`), ticked by a
/// thread of its own ten times a second.
struct Progress {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(a: &BenchArgs, done: Arc<AtomicU64>) -> Progress {
        let total = a.warmup + a.duration;
        let target = if a.json {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(total.as_millis() as u64), target);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed:>4} {wide_bar} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let (tx, rx) = mpsc::channel::<()>();
        let start = Instant::now();
        let warmup = a.warmup;
        let thread = std::thread::Builder::new()
            .name("bench-progress".into())
            .spawn(move || loop {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return bar.finish_and_clear(),
                }
                let elapsed = start.elapsed();
                bar.set_position(elapsed.as_millis() as u64);
                let n = done.load(Ordering::Relaxed);
                bar.set_message(if elapsed < warmup {
                    "warming up".to_string()
                } else {
                    format!("{} pairs", stats::thousands(n))
                });
            })
            .ok();
        Progress {
            stop: Some(tx),
            thread,
        }
    }

    fn finish(mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a run measured, and how it was set up: printed for people or as JSON.
struct Report<'a> {
    global: &'a Global,
    nodes: &'a [String],
    a: &'a BenchArgs,
    rec: &'a Recorder,
    secs: f64,
}

impl Report<'_> {
    fn header(&self) -> String {
        let Report {
            global, nodes, a, ..
        } = self;
        format!(
            "{} client, {} client{} x depth {}, {} resource{}, {} nodes (quorum {}), ttl {}",
            a.client.name(),
            a.clients,
            if a.clients == 1 { "" } else { "s" },
            a.depth,
            match a.resources {
                Resources::Distinct => "distinct",
                Resources::One => "one contended",
            },
            if a.resources == Resources::Distinct {
                "s"
            } else {
                ""
            },
            nodes.len(),
            nodes.len() / 2 + 1,
            humantime::format_duration(global.ttl),
        )
    }

    fn text(&self) -> String {
        let Report { a, rec, secs, .. } = *self;
        let mut out = format!(
            "redlock bench: {}\nmeasured {:.2}s after a {:.2}s warm-up\n",
            self.header(),
            secs,
            a.warmup.as_secs_f64()
        );
        out += &format!(
        "  pairs    {:>12}  {:.1}/s\n  refused  {:>12}  (held by another client)\n  errors   {:>12}\n",
        stats::thousands(rec.pairs),
        rec.pairs as f64 / secs,
        stats::thousands(rec.conflicts),
        stats::thousands(rec.errors),
    );
        if let Some(e) = &rec.first_error {
            out += &format!("  first error: {e}\n");
        }
        out += &format!(
            "  latency {:>10}{:>10}{:>10}{:>10}{:>10}\n",
            "p50", "p90", "p99", "p999", "max"
        );
        for (name, h) in [
            ("lock", &rec.lock),
            ("unlock", &rec.unlock),
            ("pair", &rec.pair),
        ] {
            if !h.is_empty() {
                out += &format!("  {name:<8}{}\n", stats::row(h));
            }
        }
        out
    }

    fn json(&self) -> String {
        let Report {
            global,
            nodes,
            a,
            rec,
            secs,
        } = *self;
        format!(
        "{{\"client\":\"{}\",\"clients\":{},\"depth\":{},\"resources\":\"{}\",\"nodes\":{},\"ttl_ms\":{},\
         \"warmup_s\":{:.3},\"duration_s\":{secs:.3},\"pairs\":{},\"pairs_per_sec\":{:.1},\
         \"conflicts\":{},\"errors\":{},\"first_error\":{},\"lock\":{},\"unlock\":{},\"pair\":{}}}",
        a.client.name(),
        a.clients,
        a.depth,
        a.resources.name(),
        nodes.len(),
        global.ttl.as_millis(),
        a.warmup.as_secs_f64(),
        rec.pairs,
        rec.pairs as f64 / secs,
        rec.conflicts,
        rec.errors,
        rec.first_error.as_deref().map_or("null".to_string(), json_string),
        stats::json(&rec.lock),
        stats::json(&rec.unlock),
        stats::json(&rec.pair),
    )
    }
}
