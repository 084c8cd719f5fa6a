//! A fake Redis node that answers every command in one hostile way, built on `resp`'s
//! decoder and encoder. For the robustness tests: whatever it sends, a client must come away
//! with a typed error for that node, within the node timeout, without panicking or growing
//! memory, and count the other nodes' votes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::BytesMut;
use redlock_mux::resp::{Decoder, Frame};

/// How the node answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// An integer where a status is expected (and a status where an integer is).
    WrongType,
    /// An error reply to everything.
    ErrorReply,
    /// Half a bulk string, then the connection is closed.
    TruncatedThenClose,
    /// A bulk string declared 2^40 bytes long.
    HugeBulk,
    /// A million nested one-element arrays.
    DeepNesting,
    /// A simple string that never ends (until the client hangs up, or 16 MiB).
    EndlessSimple,
    /// Bytes that are not RESP.
    Garbage,
    /// A correct reply followed by one to a command that was never sent.
    Unsolicited,
    /// A correct reply, one byte every 100 ms.
    VerySlow,
    /// Honest, except that every script call is answered `:9223372036854775807` (2^63 - 1):
    /// to a fenced acquisition, a counter no fenced acquisition makes (a proxy rewriting
    /// replies, a counter someone set by hand).
    HugeCounter,
}

/// The running fake node.
pub struct HostileServer {
    addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HostileServer {
    pub fn start(behavior: Behavior) -> HostileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let accepts = accepts.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    accepts.fetch_add(1, Ordering::SeqCst);
                    let stop = stop.clone();
                    std::thread::spawn(move || serve(conn, behavior, &stop));
                }
            })
        };
        HostileServer {
            addr,
            accepts,
            stop,
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Connections accepted so far.
    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a well-behaved server would answer, by command name.
fn honest(cmd: &Frame) -> &'static [u8] {
    let name = match cmd {
        Frame::Array(items) => items
            .first()
            .and_then(|f| f.as_bytes())
            .map(|b| b.to_ascii_uppercase())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    match &name[..] {
        b"SET" => b"+OK\r\n",
        b"EVALSHA" | b"EVAL" => b":1\r\n",
        b"SCRIPT" => b"$40\r\n0000000000000000000000000000000000000000\r\n",
        // What a Redis 7.0 says it is (RESP2), and a policy that keeps the counter.
        b"HELLO" => b"*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n",
        b"CONFIG" => b"*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n",
        _ => b"+OK\r\n",
    }
}

fn serve(mut conn: TcpStream, behavior: Behavior, stop: &AtomicBool) {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let mut dec = Decoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        let cmd = match dec.decode(&mut buf) {
            Ok(Some(f)) => f,
            Ok(None) => match conn.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    continue;
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    continue
                }
                Err(_) => return,
            },
            Err(_) => return,
        };
        let ok = match behavior {
            Behavior::WrongType => conn.write_all(if honest(&cmd) == b"+OK\r\n" {
                b":42\r\n"
            } else {
                b"+OK\r\n"
            }),
            Behavior::ErrorReply => conn.write_all(b"-ERR hostile node\r\n"),
            Behavior::TruncatedThenClose => {
                let _ = conn.write_all(b"$10\r\nabc");
                return;
            }
            Behavior::HugeBulk => conn.write_all(b"$1099511627776\r\n"),
            Behavior::DeepNesting => {
                let deep = b"*1\r\n".repeat(1_000_000);
                conn.write_all(&deep)
            }
            Behavior::EndlessSimple => {
                let _ = conn.write_all(b"+");
                let filler = [b'a'; 4096];
                for _ in 0..4096 {
                    if stop.load(Ordering::SeqCst) || conn.write_all(&filler).is_err() {
                        return;
                    }
                }
                return;
            }
            Behavior::Garbage => conn.write_all(b"\x00\xffHTTP/1.1 400 Bad Request\r\n\r\n"),
            Behavior::Unsolicited => conn
                .write_all(honest(&cmd))
                .and_then(|()| conn.write_all(b":7\r\n")),
            Behavior::HugeCounter => conn.write_all(match honest(&cmd) {
                b":1\r\n" => b":9223372036854775807\r\n",
                other => other,
            }),
            Behavior::VerySlow => {
                for &b in honest(&cmd) {
                    if conn.write_all(&[b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                }
                Ok(())
            }
        };
        if ok.is_err() {
            return;
        }
    }
}
