//! TLS (`rediss://`, feature `tls`) against real servers started with `--tls-port` and
//! certificates made in the test: both clients lock and release over TLS; a CA that did not
//! sign the servers' certificates is refused with a TLS error naming why; mutual TLS works
//! with a client certificate and is refused without one; a TLS session cut mid-round costs
//! that node its vote and is replaced. Skipped, with the reason printed, on a server binary
//! built without TLS (the Redis 6.2 of the compatibility matrix).
#![cfg(feature = "tls")]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use redlock_mux::{Error, NodeOutcome};
use testkit::local::LocalCluster;
use testkit::proxy::{Fault, Proxy};
use testkit::tls::TlsFiles;
use testkit::{get, resource, wait_serving, wait_until, Flavor, LockClient};

const TTL: Duration = Duration::from_secs(10);

fn scratch(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("redlock-mux-tls-{tag}-{}", std::process::id()))
}

/// Three TLS masters with certificates from a fresh CA, or `None` (the reason printed) if the
/// server binary has no TLS.
fn tls_cluster(tag: &str, auth_clients: bool) -> Option<(LocalCluster, TlsFiles)> {
    let files = TlsFiles::generate(&scratch(tag)).unwrap();
    match LocalCluster::start_tls(3, &files, auth_clients) {
        Ok(c) => Some((c, files)),
        // The project's own server (Debian's, built with TLS) must run these; only another
        // binary given in REDLOCK_REDIS_SERVER may lack TLS.
        Err(e) if std::env::var_os("REDLOCK_REDIS_SERVER").is_none() => {
            panic!("Debian's redis-server should serve TLS: {e}")
        }
        Err(e) => {
            eprintln!("TLS skipped: the server does not start with --tls-port ({e})");
            None
        }
    }
}

fn builder(nodes: &[String], files: &TlsFiles) -> redlock_mux::Builder {
    redlock_mux::Redlock::builder()
        .nodes(nodes)
        .node_timeout(Duration::from_millis(500))
        .retry(2, Duration::from_millis(20))
        .tls_ca_file(&files.ca)
}

fn lock_unlock_and_a_wrong_ca<F: Flavor>() {
    let Some((c, files)) = tls_cluster("basic", false) else {
        return;
    };
    let client = F::build(builder(&c.tls_addrs(), &files)).unwrap();
    let key = resource("tls");
    let mut lock = client.lock(&key, TTL).unwrap();
    // The key is there, seen over the plain port: on a quorum at once, and on every node
    // once the fail-fast round's last SET has landed.
    let holding = |c: &LocalCluster| {
        c.addrs()
            .iter()
            .filter(|a| get(a, &key).as_deref() == Some(lock.token().as_str()))
            .count()
    };
    assert!(holding(&c) >= 2);
    wait_serving(
        &client,
        Duration::from_secs(10),
        "the key on every node",
        || holding(&c) == 3,
    );
    client.extend(&mut lock, TTL).unwrap();
    client.unlock(&lock).unwrap();
    wait_serving(
        &client,
        Duration::from_secs(10),
        "the release over TLS",
        || c.addrs().iter().all(|a| get(a, &key).is_none()),
    );
    // A CA that did not sign the servers' certificates: every node refuses, saying why.
    let other = TlsFiles::generate(&scratch("other-ca")).unwrap();
    // (Fail-fast off, so that every node's answer is in the report.)
    let wrong = F::build(
        builder(&c.tls_addrs(), &other)
            .retry(1, Duration::ZERO)
            .fail_fast(false),
    )
    .unwrap();
    match wrong.try_lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => {
            for r in &nodes.0 {
                match &r.outcome {
                    NodeOutcome::Tls(msg) => assert!(
                        msg.contains("certificate") || msg.contains("Unknown"),
                        "{msg}"
                    ),
                    other => panic!("{}: expected a TLS error, got {other}", r.addr),
                }
            }
        }
        other => panic!("expected every node to refuse the certificate, got {other:?}"),
    }
    // A server name the certificate does not carry is refused too.
    let misnamed = F::build(
        builder(&c.tls_addrs(), &files)
            .tls_server_name("redis.example.invalid")
            .retry(1, Duration::ZERO)
            .fail_fast(false),
    )
    .unwrap();
    match misnamed.try_lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => assert!(
            nodes.0.iter().all(
                |r| matches!(&r.outcome, NodeOutcome::Tls(m) if m.contains("not valid for name"))
            ),
            "{nodes}"
        ),
        other => panic!("expected a name mismatch, got {other:?}"),
    }
}

fn mutual_tls<F: Flavor>() {
    let Some((c, files)) = tls_cluster("mutual", true) else {
        return;
    };
    let key = resource("mtls");
    let with = F::build(
        builder(&c.tls_addrs(), &files).tls_client_auth(&files.client_cert, &files.client_key),
    )
    .unwrap();
    let lock = with.lock(&key, TTL).unwrap();
    with.unlock(&lock).unwrap();
    let without = F::build(
        builder(&c.tls_addrs(), &files)
            .retry(1, Duration::ZERO)
            .fail_fast(false),
    )
    .unwrap();
    // Each node ends the session: with the alert (`CertificateRequired`), or, where the
    // client's next write met the closed connection before the alert could be read (TLS 1.3
    // lets the client finish its side first, and a reset may drop what was on its way),
    // with the connection closed under it.
    let refused = |o: &NodeOutcome| match o {
        NodeOutcome::Tls(_) => true,
        NodeOutcome::Io(kind) => matches!(
            kind,
            std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
        ),
        _ => false,
    };
    match without.try_lock(&key, TTL) {
        Err(Error::NoQuorum { nodes }) => assert!(
            nodes.0.iter().all(|r| refused(&r.outcome)),
            "a server that wants a client certificate let us in: {nodes}"
        ),
        other => panic!("expected no quorum without a client certificate, got {other:?}"),
    }
}

fn a_session_cut_mid_round_costs_one_vote<F: Flavor>() {
    let Some((c, files)) = tls_cluster("cut", false) else {
        return;
    };
    // Node 0 behind the fault proxy; the certificate names 127.0.0.1, as the proxy is.
    let tls_port = c.servers()[0].tls_port();
    let proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], tls_port)));
    let mut nodes = c.tls_addrs();
    nodes[0] = format!("rediss://{}", proxy.addr());
    // Every node's reply awaited (no fail-fast): node 0, behind the proxy, is always the
    // slowest, and the check below needs its vote counted.
    let client = F::build(builder(&nodes, &files).fail_fast(false)).unwrap();
    let key = resource("tls-cut");
    let lock = client.lock(&key, TTL).unwrap();
    client.unlock(&lock).unwrap();
    // The session is cut in the middle of a reply: node 0 fails, the others carry the round.
    // (Node 0 may have run the SET before its reply was cut: the key stays there until it is
    // released over a new session below, or its ttl ends.)
    proxy.set(Fault::ResetMidReply);
    let lock = client.lock(&key, TTL).unwrap();
    // Healed: node 0 gets a new session, through which the release reaches it too.
    proxy.set(Fault::Pass);
    client.unlock(&lock).unwrap();
    let plain0 = c.addrs()[0].clone();
    wait_until(
        Duration::from_secs(30),
        "node 0 back over a new TLS session",
        || {
            let Ok(lock) = client.try_lock(&key, TTL) else {
                return false;
            };
            let on0 = get(&plain0, &key).as_deref() == Some(lock.token().as_str());
            let _ = client.unlock(&lock);
            on0
        },
    );
}

macro_rules! flavors {
    ($($module:ident = $flavor:ident: $($case:ident),*;)*) => {
        $(
            mod $module {
                $(
                    #[test]
                    fn $case() {
                        super::$case::<testkit::$flavor>();
                    }
                )*
            }
        )*
    };
}

flavors! {
    blocking = Blocking: lock_unlock_and_a_wrong_ca, mutual_tls, a_session_cut_mid_round_costs_one_vote;
    async_multi = AsyncMulti: lock_unlock_and_a_wrong_ca, mutual_tls, a_session_cut_mid_round_costs_one_vote;
    async_current = AsyncCurrent: lock_unlock_and_a_wrong_ca, mutual_tls, a_session_cut_mid_round_costs_one_vote;
}
