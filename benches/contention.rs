//! Contention: N clients, each with its own connections (as separate processes would have),
//! loop lock - hold for a fixed short time - unlock - work outside the lock for a fixed short
//! time, on one resource, on five local masters. Reports acquisitions per second, the hand-off
//! latency (from one holder starting its release to another client's lock returning; p50 and
//! p99), the acquisition rounds per acquisition (redlock-mux's clients: the tries and claims
//! they sent, `Stats::tries` and `Stats::claims`), the masters' `SET` count per acquisition
//! (where the client acquires with `SET`; a script's `SET` calls included), the commands the masters ran per acquisition (every call, a script's
//! calls inside the server included), the calls the clients sent per master and acquisition
//! (redlock-mux's clients: the replies they read, one per top-level command, from
//! `NodeStats::replies`; the masters' statistics cannot tell a script's calls from a client's),
//! the waiters a release woke (redlock-mux's clients: the invalidations pushed to them over the
//! nodes, per acquisition), and the busiest client's share.
//!
//! `--plot DIR` also draws two pictures there, one line per client: the commands per master
//! and acquisition against contenders (`contention-commands.svg`), and the hand-off p99
//! against contenders (`contention-handoff-p99.svg`).
//!
//! The time outside the lock (`--think-ms`, as long as the hold by default) is what makes the
//! lock change hands: a client that looped straight back would take the lock it just released
//! before any waiter could, polling or not, and the table would measure nothing about waiting.
//!
//! Clients: redlock-mux's blocking and async clients in fair mode (`Builder::fair`: a line on
//! the masters, one waiter rung per release), its blocking client with wake-ups on (the
//! default) and off (polling: the retry delay between tries), its async client with wake-ups, rslock and node-redlock
//! (each with its own retries; both poll).
//!
//! Run: `cargo run --release --manifest-path benches/Cargo.toml --bin contention --
//! [--seconds 3] [--levels 2,8,32] [--hold-ms 1] [--think-ms 1] [--only NAME] [--plot DIR]`

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::arg;
use redlock_mux::resp::Frame;
use testkit::local::LocalCluster;

const TTL: Duration = Duration::from_secs(10);

/// Invalidations the masters pushed to the cell's redlock-mux clients (each client's
/// `NodeStats::invalidations`, summed over nodes and clients): divided by the node count, the
/// waiters a release woke, counted over the cell.
static PUSHES: AtomicU64 = AtomicU64::new(0);

/// Replies the cell's redlock-mux clients read (each client's `NodeStats::replies`, summed
/// over nodes and clients): one per top-level command a master ran for them.
static REPLIES: AtomicU64 = AtomicU64::new(0);

/// Tries the cell's redlock-mux clients sent (`Stats::tries`: `SET NX`, the acquire script, or
/// in fair mode the enter script, which joins the line where it is refused).
static TRIES: AtomicU64 = AtomicU64::new(0);

/// Claims the cell's redlock-mux clients sent (`Stats::claims`: fair waiters woken in line).
static CLAIMS: AtomicU64 = AtomicU64::new(0);

/// Adds a client's pushes to [`PUSHES`], its replies to [`REPLIES`], its tries and claims to
/// [`TRIES`] and [`CLAIMS`].
fn count_pushes(stats: &redlock_mux::Stats) {
    let n: u64 = stats.nodes.iter().map(|n| n.invalidations).sum();
    PUSHES.fetch_add(n, Ordering::Relaxed);
    let r: u64 = stats.nodes.iter().map(|n| n.replies).sum();
    REPLIES.fetch_add(r, Ordering::Relaxed);
    TRIES.fetch_add(stats.tries, Ordering::Relaxed);
    CLAIMS.fetch_add(stats.claims, Ordering::Relaxed);
}

/// One holder's tenure: when its lock returned, and when it started to release (ns since the
/// cell's start).
#[derive(Debug, Clone, Copy)]
struct Tenure {
    holder: usize,
    acquired: u64,
    released: u64,
}

/// How many `SET`s node `addr` has run, and how many commands of any kind but `INFO` (the
/// bench's own reads of these counts).
fn calls(addr: &str) -> (u64, u64) {
    let Frame::Bulk(b) = testkit::redis(addr, &["INFO", "commandstats"]) else {
        return (0, 0);
    };
    let mut sets = 0;
    let mut all = 0;
    for line in String::from_utf8_lossy(&b).lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(":calls="))
        else {
            continue;
        };
        let n: u64 = rest
            .split(',')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if name == "set" {
            sets = n;
        }
        if name != "info" {
            all += n;
        }
    }
    (sets, all)
}

/// What a cell measured, beside its row: for the pictures.
struct Figures {
    /// Commands the masters ran, per master and acquisition.
    commands: f64,
    /// The hand-off p99, ms (NaN without hand-offs).
    p99: f64,
}

/// What a cell's clients and masters counted.
struct Counts {
    /// The masters' `SET` calls, per master (where the client acquires with `SET`).
    set_rounds: Option<u64>,
    /// Every command the masters ran, per master.
    commands: u64,
    /// The invalidations pushed to redlock-mux's clients, over nodes.
    pushes: Option<u64>,
    /// The replies redlock-mux's clients read, over nodes: the calls they sent.
    replies: Option<u64>,
    /// The tries and claims redlock-mux's clients sent.
    tries: Option<(u64, u64)>,
}

fn report(
    name: &str,
    clients: usize,
    mut t: Vec<Tenure>,
    elapsed: Duration,
    counts: Counts,
    nodes: usize,
) -> (String, Figures) {
    let Counts {
        set_rounds,
        commands,
        pushes,
        replies,
        tries,
    } = counts;
    t.sort_by_key(|t| t.acquired);
    // A hand-off is to another client.
    let mut handoffs: Vec<u64> = t
        .windows(2)
        .filter(|w| w[1].acquired >= w[0].released && w[1].holder != w[0].holder)
        .map(|w| w[1].acquired - w[0].released)
        .collect();
    let mut per_holder = vec![0usize; clients.max(1)];
    for x in &t {
        per_holder[x.holder.min(clients.max(1) - 1)] += 1;
    }
    let top = per_holder.iter().max().copied().unwrap_or(0);
    handoffs.sort_unstable();
    let q = |p: f64| {
        if handoffs.is_empty() {
            return f64::NAN;
        }
        let rank = ((p * handoffs.len() as f64).ceil() as usize).clamp(1, handoffs.len());
        handoffs[rank - 1] as f64 / 1e6
    };
    let rounds = match set_rounds {
        Some(n) if !t.is_empty() => format!("{:.1}", n as f64 / t.len() as f64),
        _ => "–".to_string(),
    };
    let woken = match pushes {
        Some(p) if !t.is_empty() => format!("{:.1}", p as f64 / nodes as f64 / t.len() as f64),
        _ => "–".to_string(),
    };
    let acq = t.len() as f64;
    let tried = match tries {
        Some((tr, cl)) if !t.is_empty() => format!(
            "{:.2} ({:.2} + {:.2})",
            (tr + cl) as f64 / acq,
            tr as f64 / acq,
            cl as f64 / acq
        ),
        _ => "–".to_string(),
    };
    let sent = match replies {
        Some(r) if !t.is_empty() => format!("{:.1}", r as f64 / nodes as f64 / t.len() as f64),
        _ => "–".to_string(),
    };
    let per_acquisition = commands as f64 / t.len().max(1) as f64;
    // The workload's ceiling, 1 / (hold + hand-off): the lock never idle, each hold as long
    // as this cell's holds were on average (a sleep of the hold lasts a little longer, and
    // the async client's rounds up to the timer's millisecond), each hand-off the p50.
    let mean_hold = t
        .iter()
        .map(|x| x.released.saturating_sub(x.acquired) as f64)
        .sum::<f64>()
        / t.len().max(1) as f64
        / 1e6;
    let rate = t.len() as f64 / elapsed.as_secs_f64();
    let of_ceiling = if handoffs.is_empty() {
        "–".to_string()
    } else {
        format!("{:.2}", rate * (mean_hold + q(0.5)) / 1e3)
    };
    let row = format!(
        "| {clients} | {name} | {rate:.0} | {of_ceiling} | {} | {:.2} | {:.2} | {tried} | {rounds} | {per_acquisition:.1} | {sent} | {woken} | {:.0}% |",
        handoffs.len(),
        q(0.5),
        q(0.99),
        100.0 * top as f64 / t.len().max(1) as f64
    );
    let figures = Figures {
        commands: if t.is_empty() {
            f64::NAN
        } else {
            per_acquisition
        },
        p99: q(0.99),
    };
    (row, figures)
}

struct Cell<'a> {
    nodes: &'a [String],
    resource: String,
    clients: usize,
    slice: Duration,
    hold: Duration,
    think: Duration,
}

fn ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// redlock-mux's blocking client, one `Redlock` per client thread, `lock_within` (wake-ups on
/// or off) until the cell's end.
fn mux_blocking(cell: &Cell<'_>, wakeups: bool, fair: bool) -> Vec<Tenure> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    std::thread::scope(|s| {
        for holder in 0..cell.clients {
            let out = out.clone();
            let client = redlock_mux::Redlock::builder()
                .nodes(cell.nodes)
                .node_timeout(Duration::from_millis(200))
                .wakeups(wakeups)
                .fair(fair)
                .build()
                .unwrap();
            s.spawn(move || {
                while let Some(left) = cell.slice.checked_sub(start.elapsed()) {
                    let Ok(lock) = client.lock_within(&cell.resource, TTL, left) else {
                        continue;
                    };
                    let acquired = ns(start);
                    std::thread::sleep(cell.hold);
                    let released = ns(start);
                    let _ = client.unlock(&lock);
                    out.lock().unwrap().push(Tenure {
                        holder,
                        acquired,
                        released,
                    });
                    std::thread::sleep(cell.think);
                }
                count_pushes(&client.stats());
            });
        }
    });
    let t = out.lock().unwrap().clone();
    t
}

/// redlock-mux's async client, one `AsyncRedlock` per client task, wake-ups on (fair or not)
/// or off (polling).
fn mux_async(cell: &Cell<'_>, wakeups: bool, fair: bool) -> Vec<Tenure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for holder in 0..cell.clients {
            let client = redlock_mux::AsyncRedlock::builder()
                .nodes(cell.nodes)
                .node_timeout(Duration::from_millis(200))
                .wakeups(wakeups)
                .fair(fair)
                .build()
                .unwrap();
            let (out, resource) = (out.clone(), cell.resource.clone());
            let (slice, hold, think) = (cell.slice, cell.hold, cell.think);
            tasks.push(tokio::spawn(async move {
                while let Some(left) = slice.checked_sub(start.elapsed()) {
                    let Ok(lock) = client.lock_within(&resource, TTL, left).await else {
                        continue;
                    };
                    let acquired = ns(start);
                    tokio::time::sleep(hold).await;
                    let released = ns(start);
                    let _ = client.unlock(&lock).await;
                    out.lock().unwrap().push(Tenure {
                        holder,
                        acquired,
                        released,
                    });
                    tokio::time::sleep(think).await;
                }
                if let Ok(stats) = client.stats().await {
                    count_pushes(&stats);
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let t = out.lock().unwrap().clone();
    t
}

/// rslock: one `LockManager` per client task, its `lock` (which retries on its own).
fn rslock(cell: &Cell<'_>) -> Vec<Tenure> {
    let urls: Vec<String> = cell.nodes.iter().map(|n| format!("redis://{n}")).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for holder in 0..cell.clients {
            let mgr = rslock::LockManager::new(urls.clone());
            let (out, resource) = (out.clone(), cell.resource.clone());
            let (slice, hold, think) = (cell.slice, cell.hold, cell.think);
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < slice {
                    if let Ok(lock) = mgr.lock(resource.as_bytes(), TTL).await {
                        let acquired = ns(start);
                        tokio::time::sleep(hold).await;
                        let released = ns(start);
                        mgr.unlock(&lock).await;
                        out.lock().unwrap().push(Tenure {
                            holder,
                            acquired,
                            released,
                        });
                        tokio::time::sleep(think).await;
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let t = out.lock().unwrap().clone();
    t
}

/// node-redlock through `benches/node/contend.js`; `None` when its modules are not installed.
fn node(cell: &Cell<'_>) -> Option<Vec<Tenure>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    if !dir.join("node_modules").is_dir() {
        eprintln!("node-redlock: skipped (run `npm ci` in benches/node)");
        return None;
    }
    let o = Command::new("node")
        .arg(dir.join("contend.js"))
        .args(["--clients", &cell.clients.to_string()])
        .args(["--seconds", &cell.slice.as_secs_f64().to_string()])
        .args(["--hold-ms", &cell.hold.as_millis().to_string()])
        .args(["--think-ms", &cell.think.as_millis().to_string()])
        .args(["--nodes", &cell.nodes.join(",")])
        .output()
        .ok()?;
    if !o.status.success() {
        eprintln!("node-redlock: {}", String::from_utf8_lossy(&o.stderr));
        return None;
    }
    Some(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ').map(|x| x.parse::<u64>().ok());
                Some(Tenure {
                    holder: f.next()?? as usize,
                    acquired: f.next()??,
                    released: f.next()??,
                })
            })
            .collect(),
    )
}

fn main() {
    let seconds: f64 = arg("--seconds", 3.0);
    let levels: String = arg("--levels", "2,8,32,128".to_string());
    let hold = Duration::from_millis(arg("--hold-ms", 1));
    let think = Duration::from_millis(arg("--think-ms", 1));
    // Only the clients whose name contains this (all by default).
    let only: String = arg("--only", String::new());
    let slice = Duration::from_secs_f64(seconds);
    let cluster = LocalCluster::start(5).expect("five redis-server (scripts/install-deps)");
    let nodes = cluster.addrs();
    println!(
        "N clients, each with its own connections, loop lock - hold {hold:?} - unlock - {think:?} outside the lock, on one resource, five local masters, {seconds} s per cell. Of the ceiling: acquisitions/s against 1 / (hold + hand-off), the hold this cell's mean, the hand-off its p50 (the lock never idle). Hand-off: from a holder starting its release to another client's lock returning, in ms. Acquisition rounds: the tries and claims redlock-mux's clients sent, per acquisition (a fair client's try joins the line where it is refused; its claim is the try of a waiter woken in line). Masters' SET: the masters' SET count per acquisition, a script's SET calls included (– where the client does not acquire with SET). Commands: every command a master ran (acquire, release, reads, tracking, and every call a script made inside it), per master and acquisition. Calls sent: the top-level commands redlock-mux's clients sent, per master and acquisition (the replies they read; – for the others, whose calls the masters cannot tell from their scripts' calls). Wake-ups per release: the invalidations the masters pushed to redlock-mux's clients, per node and acquisition (the waiters each release woke)."
    );
    println!();
    println!("| clients | client | acquisitions/s | of the ceiling | hand-offs | hand-off p50 | hand-off p99 | acquisition rounds (tries + claims) per acquisition | masters' SET per acquisition | commands per acquisition | calls sent per master per acquisition | wake-ups per release | busiest client's share |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    // For the pictures: per client, (contenders, figure) points.
    let mut commands_lines: Vec<common::plot::Line> = Vec::new();
    let mut p99_lines: Vec<common::plot::Line> = Vec::new();
    let mut cell_no = 0;
    for n in levels
        .split(',')
        .filter_map(|l| l.trim().parse::<usize>().ok())
    {
        type Run<'a> = Box<dyn Fn(&Cell<'_>) -> Option<Vec<Tenure>> + 'a>;
        let runs: Vec<(&str, bool, Run<'_>)> = vec![
            (
                "redlock-mux blocking, fair",
                true,
                Box::new(|c: &Cell<'_>| Some(mux_blocking(c, true, true))),
            ),
            (
                "redlock-mux async (multi-thread), fair",
                true,
                Box::new(|c: &Cell<'_>| Some(mux_async(c, true, true))),
            ),
            (
                "redlock-mux blocking, wake-ups on",
                true,
                Box::new(|c: &Cell<'_>| Some(mux_blocking(c, true, false))),
            ),
            (
                "redlock-mux async (multi-thread), wake-ups on",
                true,
                Box::new(|c: &Cell<'_>| Some(mux_async(c, true, false))),
            ),
            (
                "redlock-mux blocking, wake-ups off (polling)",
                true,
                Box::new(|c: &Cell<'_>| Some(mux_blocking(c, false, false))),
            ),
            (
                "redlock-mux async (multi-thread), wake-ups off (polling)",
                true,
                Box::new(|c: &Cell<'_>| Some(mux_async(c, false, false))),
            ),
            (
                "rslock 0.10 (its own retries)",
                true,
                Box::new(|c: &Cell<'_>| Some(rslock(c))),
            ),
            ("node-redlock 4.2 (its own retries)", false, Box::new(node)),
        ];
        for (name, counts_sets, run) in runs {
            if !name.contains(only.as_str()) {
                continue;
            }
            cell_no += 1;
            let cell = Cell {
                nodes: &nodes,
                resource: format!("bench:contended:{cell_no}"),
                clients: n,
                slice,
                hold,
                think,
            };
            let sum = || {
                nodes
                    .iter()
                    .map(|a| calls(a))
                    .fold((0, 0), |(s, c), (a, b)| (s + a, c + b))
            };
            let before = sum();
            PUSHES.store(0, Ordering::Relaxed);
            REPLIES.store(0, Ordering::Relaxed);
            TRIES.store(0, Ordering::Relaxed);
            CLAIMS.store(0, Ordering::Relaxed);
            let started = Instant::now();
            let Some(tenures) = run(&cell) else { continue };
            let elapsed = started.elapsed().min(slice.mul_f64(1.5)).max(slice);
            let after = sum();
            let per_node = |d: u64| d / nodes.len() as u64;
            let rounds = counts_sets.then(|| per_node(after.0 - before.0));
            let commands = per_node(after.1 - before.1);
            // Only redlock-mux's clients count the pushes they get (wake-ups) and the replies
            // they read (the calls they sent).
            let ours = name.starts_with("redlock-mux");
            let pushes = ours.then(|| PUSHES.load(Ordering::Relaxed));
            let replies = ours.then(|| REPLIES.load(Ordering::Relaxed));
            let tries = ours.then(|| {
                (
                    TRIES.load(Ordering::Relaxed),
                    CLAIMS.load(Ordering::Relaxed),
                )
            });
            let counts = Counts {
                set_rounds: rounds,
                commands,
                pushes,
                replies,
                tries,
            };
            let (row, figures) = report(name, n, tenures, elapsed, counts, nodes.len());
            println!("{row}");
            for (lines, y) in [
                (&mut commands_lines, figures.commands),
                (&mut p99_lines, figures.p99),
            ] {
                let at = match lines.iter().position(|l| l.label == name) {
                    Some(at) => at,
                    None => {
                        lines.push(common::plot::Line {
                            label: name.to_string(),
                            ours,
                            points: Vec::new(),
                        });
                        lines.len() - 1
                    }
                };
                lines[at].points.push((n as f64, y));
            }
        }
    }
    let plot_dir: Option<std::path::PathBuf> = std::env::args()
        .position(|a| a == "--plot")
        .and_then(|i| std::env::args().nth(i + 1))
        .map(Into::into);
    if let Some(dir) = plot_dir {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("--plot {}: {e}", dir.display());
            return;
        }
        let setting = format!(
            "one resource, hold {hold:?}, {think:?} out, 5 local masters, {} vCPU",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let pictures = [
            (
                "contention-commands.svg",
                format!("Commands per master per acquisition ({setting})"),
                "commands per master per acquisition",
                &commands_lines,
            ),
            (
                "contention-handoff-p99.svg",
                format!("Hand-off p99 ({setting})"),
                "hand-off p99, ms",
                &p99_lines,
            ),
        ];
        for (file, caption, y_desc, lines) in pictures {
            let path = dir.join(file);
            common::plot::against_count(&path, &caption, "contenders", y_desc, lines)
                .unwrap_or_else(|e| panic!("drawing {}: {e}", path.display()));
            eprintln!("drew {}", path.display());
        }
    }
}
