//! Takes, extends and releases a lock on five Redis masters, and says what happened.
//!
//! With `REDLOCK_NODES` set (comma-separated addresses or `redis://` URLs) it uses those
//! masters. Without it, it starts five throwaway local `redis-server` processes on free
//! loopback ports (installing Debian's `redis-server` first if it is missing) and stops them
//! at the end.
//!
//! Run: `cargo run --example quickstart`

use std::time::{Duration, Instant};

use redlock_mux::{Error, Redlock};
use testkit::local::{redis_server_path, LocalCluster};

fn main() {
    if let Err(e) = run() {
        eprintln!("quickstart: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (nodes, _cluster) = match std::env::var("REDLOCK_NODES") {
        Ok(list) if !list.trim().is_empty() => {
            let nodes: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
            println!("using the {} masters in REDLOCK_NODES", nodes.len());
            (nodes, None)
        }
        _ => {
            ensure_redis_server()?;
            let cluster = LocalCluster::start(5)?;
            println!(
                "started 5 throwaway masters on 127.0.0.1, ports {}",
                cluster
                    .servers()
                    .iter()
                    .map(|s| s.port().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            (cluster.addrs(), Some(cluster))
        }
    };

    let redlock = Redlock::builder().nodes(&nodes).build()?;
    let resource = "quickstart:report";
    let ttl = Duration::from_secs(10);

    let start = Instant::now();
    let mut lock = redlock.lock(resource, ttl)?;
    println!(
        "locked {resource:?} in {:?}: token {}, valid for {:?} (ttl {ttl:?} minus time taken and clock drift)",
        start.elapsed(),
        lock.token(),
        lock.validity()
    );

    let other = Redlock::builder()
        .nodes(&nodes)
        .retry(1, Duration::ZERO)
        .build()?;
    match other.try_lock(resource, ttl) {
        Err(Error::Conflict { nodes, .. }) => println!(
            "a second client is refused while it is held: {} of {} masters said it is taken",
            nodes.held().count(),
            nodes.0.len()
        ),
        Ok(_) => return Err("a second client got the lock while it was held".into()),
        Err(e) => return Err(e.into()),
    }

    let start = Instant::now();
    redlock.extend(&mut lock, Duration::from_secs(30))?;
    println!(
        "extended to 30 s in {:?}: valid for {:?} more",
        start.elapsed(),
        lock.validity()
    );

    let start = Instant::now();
    redlock.unlock(&lock)?;
    println!("released in {:?}", start.elapsed());

    let again = other.try_lock(resource, ttl)?;
    println!("the second client takes it now: token {}", again.token());
    other.unlock(&again)?;
    println!("done; the throwaway masters (if any) stop now");
    Ok(())
}

/// Installs `redis-server` with the project's script when it is missing.
fn ensure_redis_server() -> Result<(), Box<dyn std::error::Error>> {
    if redis_server_path().is_ok() {
        return Ok(());
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install-deps");
    println!("redis-server is missing; running {script}");
    let status = std::process::Command::new("bash").arg(script).status()?;
    if !status.success() {
        return Err(format!("{script} failed: {status}").into());
    }
    redis_server_path()?;
    Ok(())
}
