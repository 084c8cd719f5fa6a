// Module map (each module, its job):
//   cases          test bodies shared by both clients (for_each_case!), by theme
//   checker        the mutual-exclusion and fencing checker
//   clock          masters under libfaketime, their wall clocks stepped
//   counting_alloc an allocator that counts, for the allocation tests
//   hostile        a fake node that answers in one bad way
//   local          throwaway local masters on free loopback ports
//   proxy          the fault-injecting TCP proxy
//   soak           the soak: contended locking under a seeded fault schedule
//   tls            certificates made for the TLS tests

//! The test machinery of redlock-mux, a crate of its own so that none of it is compiled into
//! the library: throwaway local `redis-server` masters ([`local`]), masters whose wall clock
//! can be stepped ([`clock`]), the fault-injecting proxy
//! ([`proxy`]), the hostile node ([`hostile`]), the mutual-exclusion checker ([`checker`]), the
//! soak ([`soak`]), a counting allocator ([`counting_alloc`]), a plain admin client to look at
//! what the nodes hold, and the client-agnostic interface the shared test bodies in [`cases`]
//! are written against. Used by the integration tests, the examples, the benches and the
//! command's `demo` and `bench` through a normal dependency.
//!
//! Everything it starts listens on loopback only, and every loop in it is bounded.

pub mod cases;
pub mod checker;
pub mod clock;
pub mod counting_alloc;
pub mod hostile;
pub mod local;
pub mod proxy;
pub mod review;
pub mod soak;
pub mod tls;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::local::LocalCluster;
use bytes::BytesMut;
use redlock_mux::resp::{self, Decoder, Frame};
use redlock_mux::{Builder, Error, Lock};

/// The operations every client offers, so one test body serves both.
pub trait LockClient {
    fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error>;
    fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error>;
    fn lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error>;
    fn try_lock_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error>;
    fn inspect(&self, resource: &str) -> Result<redlock_mux::Inspection, Error>;
    fn inspect_line(&self, resource: &str) -> Result<redlock_mux::Inspection, Error>;
    fn unlock(&self, lock: &Lock) -> Result<(), Error>;
    fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error>;
    fn lock_within(&self, resource: &str, ttl: Duration, max_wait: Duration)
        -> Result<Lock, Error>;
    fn stats(&self) -> redlock_mux::Stats;
    fn acquire_permit(&self, s: &redlock_mux::Semaphore, ttl: Duration) -> Result<Lock, Error>;
    fn try_acquire_permit(&self, s: &redlock_mux::Semaphore, ttl: Duration) -> Result<Lock, Error>;
    fn acquire_permit_within(
        &self,
        s: &redlock_mux::Semaphore,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error>;
    /// Lets the client serve what it still owes (late replies, a late `NOSCRIPT`'s `EVAL`)
    /// for about `d`, as an idle program would.
    fn idle(&self, d: Duration);
}

/// How to build a client of one kind.
pub trait Flavor {
    type Client: LockClient;
    fn build(builder: Builder) -> Result<Self::Client, Error>;
}

impl LockClient for redlock_mux::Redlock {
    fn lock(&self, r: &str, ttl: Duration) -> Result<Lock, Error> {
        redlock_mux::Redlock::lock(self, r, ttl)
    }
    fn try_lock(&self, r: &str, ttl: Duration) -> Result<Lock, Error> {
        redlock_mux::Redlock::try_lock(self, r, ttl)
    }
    fn lock_many(&self, r: &[&str], ttl: Duration) -> Result<Lock, Error> {
        redlock_mux::Redlock::lock_many(self, r, ttl)
    }
    fn try_lock_many(&self, r: &[&str], ttl: Duration) -> Result<Lock, Error> {
        redlock_mux::Redlock::try_lock_many(self, r, ttl)
    }
    fn inspect(&self, r: &str) -> Result<redlock_mux::Inspection, Error> {
        redlock_mux::Redlock::inspect(self, r)
    }
    fn inspect_line(&self, r: &str) -> Result<redlock_mux::Inspection, Error> {
        redlock_mux::Redlock::inspect_line(self, r)
    }
    fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        redlock_mux::Redlock::unlock(self, lock)
    }
    fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        redlock_mux::Redlock::extend(self, lock, ttl)
    }
    fn acquire_permit(&self, s: &redlock_mux::Semaphore, ttl: Duration) -> Result<Lock, Error> {
        redlock_mux::Redlock::acquire_permit(self, s, ttl)
    }
    fn try_acquire_permit(&self, s: &redlock_mux::Semaphore, ttl: Duration) -> Result<Lock, Error> {
        redlock_mux::Redlock::try_acquire_permit(self, s, ttl)
    }
    fn acquire_permit_within(
        &self,
        s: &redlock_mux::Semaphore,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        redlock_mux::Redlock::acquire_permit_within(self, s, ttl, max_wait)
    }
    fn lock_within(&self, r: &str, ttl: Duration, max_wait: Duration) -> Result<Lock, Error> {
        redlock_mux::Redlock::lock_within(self, r, ttl, max_wait)
    }
    fn stats(&self) -> redlock_mux::Stats {
        redlock_mux::Redlock::stats(self)
    }
    fn idle(&self, d: Duration) {
        let start = Instant::now();
        self.poll_idle(d);
        // Nothing owed returns at once: wait out the rest.
        std::thread::sleep(d.saturating_sub(start.elapsed()));
    }
}

/// The blocking client.
pub struct Blocking;

impl Flavor for Blocking {
    type Client = redlock_mux::Redlock;
    fn build(builder: Builder) -> Result<Self::Client, Error> {
        builder.build()
    }
}

/// Five fresh masters.
pub fn cluster(n: usize) -> LocalCluster {
    LocalCluster::start(n).expect("start redis-server (run scripts/install-deps)")
}

/// A builder for `cluster` with test-friendly timing: a node timeout generous enough for a
/// loaded 2-core CI machine, and fast retries.
pub fn builder(cluster: &LocalCluster) -> Builder {
    redlock_mux::Redlock::builder()
        .nodes(cluster.addrs())
        .node_timeout(Duration::from_millis(200))
        .retry(3, Duration::from_millis(20))
}

/// How many times the server at `addr` ran `command` (`INFO commandstats`, which counts the
/// calls scripts make inside the server too; `0` for a command it never ran).
pub fn calls(addr: &str, command: &str) -> u64 {
    let info = match redis(addr, &["INFO", "commandstats"]) {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => {
            String::from_utf8_lossy(&b).into_owned()
        }
        other => panic!("INFO commandstats: {other:?}"),
    };
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// How many waiters the fair line of resource `key` has on each of `addrs`.
pub fn line_lengths(addrs: &[String], key: &str) -> Vec<i64> {
    let q = format!("{}{key}", redlock_mux::script::QUEUE_PREFIX);
    addrs
        .iter()
        .map(|a| match redis(a, &["ZCARD", &q]) {
            Frame::Integer(n) => n,
            other => panic!("ZCARD: {other:?}"),
        })
        .collect()
}

/// How many of `addrs` track at least one key for some client (`INFO`'s
/// `tracking_total_keys`): a waiter's read is tracked there, so a release there will push.
pub fn tracking_nodes(addrs: &[String]) -> usize {
    addrs
        .iter()
        .filter(|a| match redis(a, &["INFO", "stats"]) {
            Frame::Bulk(b) => String::from_utf8_lossy(&b)
                .lines()
                .find_map(|l| l.strip_prefix("tracking_total_keys:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 0),
            _ => false,
        })
        .count()
}

/// Takes `key` for a minute with a client of its own and releases it, from a thread, once a
/// quorum of the cluster's masters tracks a key for some client: a waiter's read is in, so the
/// release will push an invalidation to it. Join the handle after the waiter is done.
pub fn release_once_a_waiter_is_tracked(
    c: &LocalCluster,
    key: &str,
) -> std::thread::JoinHandle<()> {
    // Without fair mode (the default): these helpers are about the tracking servers'
    // invalidation pushes; fair mode's bells ring a waiter in line instead.
    let holder = builder(c).fair(false).build().expect("holder client");
    let lock = holder
        .lock(key, Duration::from_secs(60))
        .expect("the holder's lock");
    let addrs = c.addrs();
    let quorum = addrs.len() / 2 + 1;
    std::thread::spawn(move || {
        wait_until(Duration::from_secs(20), "the waiter's read tracked", || {
            tracking_nodes(&addrs) >= quorum
        });
        holder.unlock(&lock).expect("the holder's release");
    })
}

/// A waiter (without fair mode) with a retry delay of 30 s (far past any test's patience, so
/// that only a push ends its wait in time) takes `key` within a minute and releases it; with
/// [`release_once_a_waiter_is_tracked`], the wait is ended by the holder's release.
pub fn wait_for_a_push_and_take(c: &LocalCluster, key: &str) {
    let waiter = builder(c)
        .fair(false)
        .retry(1000, Duration::from_secs(30))
        .build()
        .expect("waiter client");
    let got = waiter
        .lock_within(key, Duration::from_secs(10), Duration::from_secs(60))
        .expect("the waiter's lock");
    waiter.unlock(&got).expect("the waiter's release");
}

/// Sends one command to a server over a fresh plain connection and returns the reply.
pub fn redis(addr: &str, args: &[&str]) -> Frame {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = BytesMut::new();
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    resp::encode_command(&mut out, &args);
    s.write_all(&out).unwrap();
    let mut dec = Decoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(f) = dec.decode(&mut buf).expect("valid reply") {
            return f;
        }
        let n = s.read(&mut chunk).expect("reply within 5 s");
        assert!(n > 0, "{addr} closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends several commands to a server in one write over a fresh plain connection and returns
/// their replies, in order.
pub fn redis_pipeline(addr: &str, cmds: &[Vec<&str>]) -> Vec<Frame> {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = BytesMut::new();
    for cmd in cmds {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        resp::encode_command(&mut out, &args);
    }
    s.write_all(&out).unwrap();
    let mut dec = Decoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    let mut replies = Vec::with_capacity(cmds.len());
    while replies.len() < cmds.len() {
        if let Some(f) = dec.decode(&mut buf).expect("valid reply") {
            replies.push(f);
            continue;
        }
        let n = s.read(&mut chunk).expect("replies within 5 s");
        assert!(n > 0, "{addr} closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
    replies
}

/// Puts a server under memory pressure: writes 64 KiB values with a ten-minute ttl (so that
/// a `volatile-*` policy may evict them too), sixteen at a time, until `done` holds, and
/// returns how many it wrote. Bounded: panics after 128 MiB, far past any `maxmemory` a test
/// sets.
pub fn fill_until(addr: &str, done: impl Fn() -> bool) -> usize {
    let value = "x".repeat(64 * 1024);
    let mut written = 0;
    while !done() {
        assert!(
            written < 2048,
            "{addr}: {written} values written and the condition still does not hold"
        );
        let keys: Vec<String> = (written..written + 16)
            .map(|i| format!("fill:{i}"))
            .collect();
        let cmds: Vec<Vec<&str>> = keys
            .iter()
            .map(|k| vec!["SET", k.as_str(), value.as_str(), "PX", "600000"])
            .collect();
        for reply in redis_pipeline(addr, &cmds) {
            assert!(
                !matches!(reply, Frame::Error(_)),
                "{addr}: a write under memory pressure failed: {reply:?}"
            );
        }
        written += 16;
    }
    written
}

/// The value of `key` on a server, if any.
pub fn get(addr: &str, key: &str) -> Option<String> {
    match redis(addr, &["GET", key]) {
        Frame::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Frame::NullBulk | Frame::Null => None,
        other => panic!("GET {key} on {addr}: {other:?}"),
    }
}

/// The remaining ttl of `key` in ms (-2: no key, -1: no ttl).
pub fn pttl(addr: &str, key: &str) -> i64 {
    match redis(addr, &["PTTL", key]) {
        Frame::Integer(n) => n,
        other => panic!("PTTL {key} on {addr}: {other:?}"),
    }
}

/// Waits, up to `limit`, for `cond` to hold; panics with `why` if it never does. For waiting
/// on the servers' own clocks (key expiry), never as a substitute for synchronisation.
pub fn wait_until(limit: Duration, why: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {why}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// [`wait_until`], with `client` serving what it owes between the checks: for waiting on work
/// the client itself must still do (a fail-fast round's last writes, a late `NOSCRIPT`).
pub fn wait_serving<C: LockClient>(
    client: &C,
    limit: Duration,
    why: &str,
    cond: impl FnMut() -> bool,
) {
    assert!(
        serve_until(client, limit, cond),
        "timed out after {limit:?} waiting for {why}"
    );
}

/// [`wait_serving`] that says whether `cond` came to hold within `limit` instead of panicking,
/// for a caller whose message needs what the last check saw.
pub fn serve_until<C: LockClient>(
    client: &C,
    limit: Duration,
    mut cond: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        client.idle(Duration::from_millis(2));
    }
    true
}

/// Waits until every node holds no key at all, `client` serving what it owes meanwhile (the
/// last commands of fail-fast rounds, late `NOSCRIPT`s).
pub fn all_empty_serving<C: LockClient>(client: &C, addrs: &[String]) {
    let dbsize = |addr: &str| match redis(addr, &["DBSIZE"]) {
        Frame::Integer(n) => n,
        other => panic!("DBSIZE on {addr}: {other:?}"),
    };
    wait_serving(client, Duration::from_secs(10), "every node empty", || {
        addrs.iter().all(|a| dbsize(a) == 0)
    });
}

/// Slack for a time bound, measured on this machine now rather than fixed: twenty times the
/// slowest of three lock + unlock pairs of `client` (whose nodes must all be healthy), and never
/// less than `floor`. A loaded machine makes every round slower alike, and so the slack with
/// it; a bound is then `what the client may wait by design + slack`.
pub fn measured_slack<C: LockClient + ?Sized>(client: &C, floor: Duration) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        let start = Instant::now();
        let lock = client
            .try_lock(&resource("slack"), Duration::from_secs(10))
            .expect("a healthy round to measure");
        client.unlock(&lock).expect("a healthy release to measure");
        slowest = slowest.max(start.elapsed());
    }
    (slowest * 20).max(floor)
}

/// Runs one acquisition that is lost to contention: a foreign token is set on the nodes
/// numbered in `foreign` first. With fail-fast off, the error then reports every node's
/// answer. Returns that report and how long the attempt (with its release round) took.
pub fn lost_round<C: LockClient>(
    client: &C,
    addrs: &[String],
    foreign: std::ops::Range<usize>,
    tag: &str,
) -> (redlock_mux::NodeReports, Duration) {
    let key = resource(tag);
    for a in &addrs[foreign] {
        redis(a, &["SET", &key, "foreign", "PX", "60000"]);
    }
    let start = Instant::now();
    let err = client
        .try_lock(&key, Duration::from_secs(10))
        .expect_err("a round lost to contention");
    let took = start.elapsed();
    match err {
        Error::Conflict { nodes, .. } | Error::NoQuorum { nodes } => (nodes, took),
        other => panic!("expected a lost round, got {other:?}"),
    }
}

/// A unique resource name per test and call.
pub fn resource(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("test:{tag}:{}", N.fetch_add(1, Ordering::Relaxed))
}

/// The async client, driven from a synchronous test through a runtime of either flavour.
pub struct AsyncClient {
    pub rt: tokio::runtime::Runtime,
    pub client: redlock_mux::AsyncRedlock,
}

impl LockClient for AsyncClient {
    fn lock(&self, r: &str, ttl: Duration) -> Result<Lock, Error> {
        self.rt.block_on(self.client.lock(r, ttl))
    }
    fn try_lock(&self, r: &str, ttl: Duration) -> Result<Lock, Error> {
        self.rt.block_on(self.client.try_lock(r, ttl))
    }
    fn lock_many(&self, r: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.rt.block_on(self.client.lock_many(r, ttl))
    }
    fn try_lock_many(&self, r: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.rt.block_on(self.client.try_lock_many(r, ttl))
    }
    fn inspect(&self, r: &str) -> Result<redlock_mux::Inspection, Error> {
        self.rt.block_on(self.client.inspect(r))
    }
    fn inspect_line(&self, r: &str) -> Result<redlock_mux::Inspection, Error> {
        self.rt.block_on(self.client.inspect_line(r))
    }
    fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        self.rt.block_on(self.client.unlock(lock))
    }
    fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        self.rt.block_on(self.client.extend(lock, ttl))
    }
    fn acquire_permit(&self, s: &redlock_mux::Semaphore, ttl: Duration) -> Result<Lock, Error> {
        self.rt.block_on(self.client.acquire_permit(s, ttl))
    }
    fn try_acquire_permit(&self, s: &redlock_mux::Semaphore, ttl: Duration) -> Result<Lock, Error> {
        self.rt.block_on(self.client.try_acquire_permit(s, ttl))
    }
    fn acquire_permit_within(
        &self,
        s: &redlock_mux::Semaphore,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        self.rt
            .block_on(self.client.acquire_permit_within(s, ttl, max_wait))
    }
    fn lock_within(&self, r: &str, ttl: Duration, max_wait: Duration) -> Result<Lock, Error> {
        self.rt.block_on(self.client.lock_within(r, ttl, max_wait))
    }
    fn stats(&self) -> redlock_mux::Stats {
        self.rt
            .block_on(self.client.stats())
            .expect("the driver runs")
    }
    fn idle(&self, d: Duration) {
        // The driver task runs while the runtime is driven; a current-thread runtime is
        // driven only inside block_on.
        self.rt.block_on(async { tokio::time::sleep(d).await });
    }
}

/// The async client on a multi-thread runtime.
pub struct AsyncMulti;

impl Flavor for AsyncMulti {
    type Client = AsyncClient;
    fn build(builder: Builder) -> Result<Self::Client, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(async { builder.build_async() })?;
        Ok(AsyncClient { rt, client })
    }
}

/// The async client on a current-thread runtime.
pub struct AsyncCurrent;

impl Flavor for AsyncCurrent {
    type Client = AsyncClient;
    fn build(builder: Builder) -> Result<Self::Client, Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(async { builder.build_async() })?;
        Ok(AsyncClient { rt, client })
    }
}
