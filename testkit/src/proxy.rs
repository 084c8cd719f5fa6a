//! A fault-injecting TCP proxy in front of one node, switchable while a test runs.
//!
//! Each accepted connection gets its own upstream connection and two pump threads. Faults
//! apply to the node's replies (server to client), which is where a client's deadlines and
//! FIFO are put to the test; `Blackhole`, `LoseBytes` and `Drop` cut both ways. Loopback only.
//!
//! Every fault but one is something a real network does to a TCP connection: it delays bytes,
//! holds them back, resets or closes the connection. None of those loses bytes from the middle
//! of a stream that goes on. [`Fault::LoseBytes`] does, and is named so: it exists to check
//! that the client notices a stream out of step with its commands, and stays out of the
//! faults behind the safety counts.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rand::Rng;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    Pass,
    /// Hold every reply chunk for `fixed` plus a uniform random part of `jitter`.
    Latency { fixed: Duration, jitter: Duration },
    /// Forward nothing either way while it lasts, and read nothing either (the bytes wait in
    /// the kernel's buffers): what a path that drops every packet does to TCP, whose
    /// retransmissions deliver everything, in order, once the path heals.
    Blackhole,
    /// Read and discard every byte, both ways, while the connection stays open. No real
    /// network does this to a TCP stream (it would break the ordered, lossless stream the
    /// client relies on); it checks that the client notices and replaces such a connection.
    LoseBytes,
    /// Close every connection, existing and new.
    Drop,
    /// Forward half of the next reply chunk, then reset the client's connection (RST).
    ResetMidReply,
    /// Close the client's read side (FIN toward the client), keep reading from it.
    HalfClose,
    /// Forward replies one byte at a time, `delay` apart.
    Slow { delay: Duration },
}

struct Shared {
    fault: Mutex<Fault>,
    stop: AtomicBool,
    accepts: AtomicUsize,
    /// Bytes from the client that `Fault::LoseBytes` discarded.
    lost: AtomicUsize,
}

/// A running proxy.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        assert!(
            upstream.ip().is_loopback(),
            "the proxy only ever targets loopback"
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::Pass),
            stop: AtomicBool::new(false),
            accepts: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    shared.accepts.fetch_add(1, Ordering::SeqCst);
                    if *shared.fault.lock().unwrap() == Fault::Drop {
                        continue; // dropped at once
                    }
                    let Ok(server) = TcpStream::connect(upstream) else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    spawn_pumps(client, server, shared.clone());
                }
            })
        };
        Proxy {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Switches the fault.
    pub fn set(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap() = fault;
    }

    /// Connections accepted so far.
    pub fn accepts(&self) -> usize {
        self.shared.accepts.load(Ordering::SeqCst)
    }

    /// How many bytes from the client `Fault::LoseBytes` has discarded so far.
    pub fn lost_bytes(&self) -> usize {
        self.shared.lost.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn spawn_pumps(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let poll = Duration::from_millis(20);
    // Set when the reply pump resets the connection: the request pump then drops its handle
    // too, so that the last close sends the RST.
    let killed = Arc::new(AtomicBool::new(false));
    let _ = client.set_read_timeout(Some(poll));
    let _ = server.set_read_timeout(Some(poll));
    // Requests: client -> server.
    {
        let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let shared = shared.clone();
        let killed = killed.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                if shared.stop.load(Ordering::SeqCst) || killed.load(Ordering::SeqCst) {
                    return;
                }
                let fault = *shared.fault.lock().unwrap();
                if fault == Fault::Drop {
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    return;
                }
                if fault == Fault::Blackhole {
                    // Held, not lost: read again once the path heals.
                    std::thread::sleep(poll);
                    continue;
                }
                match from.read(&mut buf) {
                    Ok(0) => {
                        let _ = to.shutdown(Shutdown::Write);
                        return;
                    }
                    Ok(n) => {
                        match *shared.fault.lock().unwrap() {
                            Fault::LoseBytes => {
                                shared.lost.fetch_add(n, Ordering::SeqCst);
                                continue;
                            }
                            // Switched while the read waited: what came after the switch is
                            // not passed on (a busy machine may run this thread late, and a
                            // test that cut the path must find nothing through it).
                            Fault::Drop => {
                                let _ = from.shutdown(Shutdown::Both);
                                let _ = to.shutdown(Shutdown::Both);
                                return;
                            }
                            _ => {}
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                    Err(e) if timed_out(&e) => {}
                    Err(_) => return,
                }
            }
        });
    }
    // Replies: server -> client, where the faults bite.
    std::thread::spawn(move || {
        let (mut from, mut to) = (server, client);
        let mut buf = [0u8; 16 * 1024];
        let mut half_closed = false;
        loop {
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let fault = *shared.fault.lock().unwrap();
            match fault {
                Fault::Drop => {
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    return;
                }
                Fault::HalfClose if !half_closed => {
                    let _ = to.shutdown(Shutdown::Write);
                    half_closed = true;
                }
                Fault::Blackhole => {
                    std::thread::sleep(poll);
                    continue;
                }
                _ => {}
            }
            let n = match from.read(&mut buf) {
                Ok(0) => {
                    let _ = to.shutdown(Shutdown::Write);
                    return;
                }
                Ok(n) => n,
                Err(e) if timed_out(&e) => continue,
                Err(_) => return,
            };
            // The fault in force now, when the bytes are here, is the one that applies.
            let fault = *shared.fault.lock().unwrap();
            let sent = match fault {
                Fault::Pass => to.write_all(&buf[..n]),
                Fault::Latency { fixed, jitter } => {
                    let extra = if jitter.is_zero() {
                        Duration::ZERO
                    } else {
                        rand::rng().random_range(Duration::ZERO..=jitter)
                    };
                    std::thread::sleep(fixed + extra);
                    to.write_all(&buf[..n])
                }
                // Bytes read just as a blackhole began are held until it ends.
                Fault::Blackhole => {
                    while *shared.fault.lock().unwrap() == Fault::Blackhole
                        && !shared.stop.load(Ordering::SeqCst)
                    {
                        std::thread::sleep(poll);
                    }
                    to.write_all(&buf[..n])
                }
                Fault::LoseBytes | Fault::Drop => Ok(()),
                Fault::HalfClose => Ok(()),
                Fault::ResetMidReply => {
                    let _ = to.write_all(&buf[..n.div_ceil(2)]);
                    let _ = socket2::SockRef::from(&to).set_linger(Some(Duration::ZERO));
                    killed.store(true, Ordering::SeqCst);
                    drop(to);
                    let _ = from.shutdown(Shutdown::Both);
                    return;
                }
                Fault::Slow { delay } => {
                    let mut r = Ok(());
                    for &b in &buf[..n] {
                        r = to.write_all(&[b]);
                        if r.is_err() || shared.stop.load(Ordering::SeqCst) {
                            break;
                        }
                        std::thread::sleep(delay);
                    }
                    r
                }
            };
            if sent.is_err() {
                return;
            }
        }
    });
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Proxies in front of the servers of `cluster` numbered in `nodes`: returns them, and the
/// cluster's addresses with those servers' replaced by their proxies'.
pub fn in_front(
    cluster: &crate::local::LocalCluster,
    nodes: std::ops::Range<usize>,
) -> (Vec<Proxy>, Vec<String>) {
    let mut addrs = cluster.addrs();
    let proxies: Vec<Proxy> = nodes
        .clone()
        .map(|i| Proxy::start(cluster.servers()[i].addr()))
        .collect();
    for (i, p) in nodes.zip(&proxies) {
        addrs[i] = p.addr();
    }
    (proxies, addrs)
}

/// Sets `fault` on every proxy of `proxies`.
pub fn set_all(proxies: &[Proxy], fault: Fault) {
    for p in proxies {
        p.set(fault);
    }
}

/// Replies held back by `fixed`, no jitter.
pub fn latency(fixed: Duration) -> Fault {
    Fault::Latency {
        fixed,
        jitter: Duration::ZERO,
    }
}
