//! What a fencing token is for, shown with real processes and real servers.
//!
//! Five throwaway masters hold the lock; a sixth server holds the resource the lock protects:
//! a record that takes a write only with a fencing token greater than the last one it
//! accepted (a compare-and-set script, checked on the storage server itself).
//!
//! Holder A, a child process, takes the lock and is frozen with `SIGSTOP` before it writes, as a
//! GC pause or a swapped-out process would be. Its validity runs out; holder B takes the lock
//! and writes. A is thawed and writes what it prepared under a lock it no longer has.
//!
//! - Fenced, A's late write carries a token lower than B's, and the storage refuses it: the
//!   record keeps B's data.
//! - Unfenced, the same events, with a storage that cannot check anything, end with A's stale
//!   write over B's: the record is corrupted.
//!
//! Run: `cargo run --example fenced_write` (exits 1 if either outcome is not the one above).
//! `tests/fenced_write.rs` runs it as part of the test suite.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::Redlock;
use testkit::local::{LocalCluster, LocalServer};
use testkit::redis;

/// The storage's write rule: the record and the highest token accepted so far change only
/// for a greater token. `KEYS[1]` the record, `KEYS[2]` the last token; `ARGV[1]` the token,
/// `ARGV[2]` the data.
const FENCED_WRITE: &str = "
local last = redis.call('GET', KEYS[2])
if last and #last >= #ARGV[1] and (#last > #ARGV[1] or last >= ARGV[1]) then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1";

const RESOURCE: &str = "orders:ledger";
const RECORD: &str = "ledger";
const LAST_TOKEN: &str = "ledger:last-token";
const TTL: Duration = Duration::from_millis(800);

/// Writes `data` to the record: through the fencing check with a token, plainly without.
fn write(storage: &str, token: Option<u64>, data: &str) -> bool {
    match token {
        Some(t) => {
            let t = t.to_string();
            let args = ["EVAL", FENCED_WRITE, "2", RECORD, LAST_TOKEN, &t, data];
            matches!(redis(storage, &args), Frame::Integer(1))
        }
        None => matches!(redis(storage, &["SET", RECORD, data]), Frame::Simple(_)),
    }
}

fn client(nodes: &[String], fencing: bool) -> Redlock {
    Redlock::builder()
        .nodes(nodes)
        .node_timeout(Duration::from_millis(200))
        .retry(5, Duration::from_millis(100))
        .fencing(fencing)
        .build()
        .expect("client")
}

/// Holder A, in its own process: takes the lock, says so, waits for the word, then writes
/// (whether or not the lock is still valid: that is the point).
fn holder(nodes: &str, storage: &str, fencing: bool) {
    let nodes: Vec<String> = nodes.split(',').map(String::from).collect();
    let redlock = client(&nodes, fencing);
    let lock = redlock.lock(RESOURCE, TTL).expect("A locks");
    println!(
        "locked {}",
        lock.fencing_token()
            .map_or("-".to_string(), |t| t.to_string())
    );
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let expired = lock.is_expired();
    let accepted = write(storage, lock.fencing_token(), "A's stale data");
    println!("wrote accepted={accepted} expired={expired}");
}

/// One run of the story; returns what the record holds at the end.
fn story(fencing: bool) -> String {
    let cluster = LocalCluster::start_with(5, &["--appendonly", "yes", "--appendfsync", "always"])
        .expect("five masters (scripts/install-deps installs redis-server)");
    let storage_server = LocalServer::start().expect("the storage server");
    let storage = storage_server.addr().to_string();
    let nodes = cluster.addrs();
    let label = if fencing { "fenced" } else { "unfenced" };
    println!("--- {label} ---");

    let mut a: Child = Command::new(std::env::current_exe().unwrap())
        .args(["--holder", &nodes.join(","), &storage])
        .arg(if fencing { "--fencing" } else { "--plain" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("holder A");
    let mut from_a = BufReader::new(a.stdout.take().unwrap());
    let mut line = String::new();
    from_a.read_line(&mut line).unwrap();
    let locked_at = Instant::now();
    println!("A: {}", line.trim());

    // A freezes before it writes.
    let pid = a.id().to_string();
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    println!("A: stopped (SIGSTOP)");

    // B waits for the lock (A's keys expire with their ttl), then writes.
    let b = client(&nodes, fencing);
    let give_up = Instant::now() + Duration::from_secs(30);
    let lock_b = loop {
        match b.lock(RESOURCE, TTL * 10) {
            Ok(lock) => break lock,
            Err(redlock_mux::Error::Conflict { .. }) if Instant::now() < give_up => {
                println!("B: refused, A's keys are still there")
            }
            Err(e) => panic!("B never got the lock: {e}"),
        }
    };
    println!(
        "B: locked {:?} after {:?}, token {:?}",
        RESOURCE,
        locked_at.elapsed(),
        lock_b.fencing_token()
    );
    let ok = write(&storage, lock_b.fencing_token(), "B's data");
    println!("B: wrote, accepted={ok}");

    // A thaws and writes what it prepared.
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    writeln!(a.stdin.as_mut().unwrap(), "go").unwrap();
    line.clear();
    from_a.read_line(&mut line).unwrap();
    println!("A: thawed, {}", line.trim());
    a.wait().unwrap();
    b.unlock(&lock_b).ok();

    let record = match redis(&storage, &["GET", RECORD]) {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => format!("{other:?}"),
    };
    println!("record: {record:?}");
    record
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--holder") {
        holder(&args[2], &args[3], args[4] == "--fencing");
        return;
    }
    let fenced = story(true);
    let unfenced = story(false);
    let mut ok = true;
    if fenced == "B's data" {
        println!("fenced: A's late write was refused; the record is B's.");
    } else {
        println!("FAIL: with fencing the record is {fenced:?}");
        ok = false;
    }
    if unfenced == "A's stale data" {
        println!("unfenced: A's late write overwrote B's; the record is corrupted.");
    } else {
        println!("FAIL: without fencing the record is {unfenced:?} (expected the corruption)");
        ok = false;
    }
    std::process::exit(if ok { 0 } else { 1 });
}
