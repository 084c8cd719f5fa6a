//! Runs N sequential lock+unlock pairs with one client against the masters in
//! `REDLOCK_NODES`, and nothing else: the program `table --callgrind` runs under
//! `valgrind --tool=callgrind` to count client-side instructions per pair.
//!
//! Run: `REDLOCK_NODES=... instr --client mux-blocking --pairs 1000`

mod common;

use std::time::Duration;

use common::reference::FanOut;
use common::{arg, runtime, token};

const TTL: Duration = Duration::from_secs(10);

/// Generous: under valgrind the client runs tens of times slower than the servers.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

fn main() {
    let client: String = arg("--client", String::new());
    let pairs: u64 = arg("--pairs", 1000);
    let addrs: Vec<String> = std::env::var("REDLOCK_NODES")
        .expect("REDLOCK_NODES")
        .split(',')
        .map(str::to_string)
        .collect();
    let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}")).collect();
    let ttl_ms = TTL.as_millis() as u64;
    let key = |i: u64| format!("instr:{client}:{}:{i}", std::process::id());
    // REDLOCK_WAKEUPS=0: redlock-mux's clients without wake-ups (RESP2, no tracking), to
    // measure what wake-ups cost an uncontended pair.
    let wakeups = std::env::var("REDLOCK_WAKEUPS").map_or(true, |v| v != "0");
    match client.as_str() {
        "reference" => {
            let mut f = FanOut::connect(&addrs).expect("connect");
            for i in 0..pairs {
                let tok = token();
                assert!(f.lock(&key(i), &tok, ttl_ms).expect("lock"));
                f.unlock(&key(i), &tok).expect("unlock");
            }
        }
        "mux-blocking" => {
            let c = redlock_mux::Redlock::builder()
                .fair(false)
                .nodes(&addrs)
                .node_timeout(NODE_TIMEOUT)
                .wakeups(wakeups)
                .build()
                .expect("client");
            for i in 0..pairs {
                let lock = c.lock(&key(i), TTL).expect("lock");
                c.unlock(&lock).expect("unlock");
            }
        }
        "mux-async-ct" | "mux-async-mt" => {
            let rt = runtime(client.ends_with("mt"));
            rt.block_on(async {
                let c = redlock_mux::AsyncRedlock::builder()
                    .fair(false)
                    .nodes(&addrs)
                    .node_timeout(NODE_TIMEOUT)
                    .wakeups(wakeups)
                    .build_async()
                    .expect("client");
                for i in 0..pairs {
                    let lock = c.lock(&key(i), TTL).await.expect("lock");
                    c.unlock(&lock).await.expect("unlock");
                }
            });
        }
        "rslock-ct" | "rslock-mt" => {
            let rt = runtime(client.ends_with("mt"));
            let mgr = rslock::LockManager::new(urls);
            rt.block_on(async {
                for i in 0..pairs {
                    let lock = mgr.lock(key(i).as_bytes(), TTL).await.expect("lock");
                    mgr.unlock(&lock).await;
                }
            });
        }
        "redlock" => {
            let rl = redlock::RedLock::new(urls);
            for i in 0..pairs {
                let lock = rl
                    .lock(key(i).as_bytes(), ttl_ms as usize)
                    .expect("lock")
                    .expect("free");
                rl.unlock(&lock);
            }
        }
        other => {
            eprintln!("instr: unknown --client {other:?}");
            std::process::exit(2);
        }
    }
}
