//! The minimal reference client: std only, blocking sockets, no quorum logic beyond a count.
//!
//! Lock: write `SET key token NX PX ttl` to every node, then read one reply from each, in
//! order. Unlock: the same with `EVALSHA <release> 1 key token`. This is the floor a Redlock
//! client that talks to every node can reach on this machine: what redlock-mux is measured
//! against.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;

pub const RELEASE_SHA1: &str = redlock_mux::script::RELEASE_SHA1;

/// One blocking connection per node.
pub struct FanOut {
    nodes: Vec<(TcpStream, BufReader<TcpStream>)>,
    cmd: Vec<u8>,
    line: String,
}

fn bulk(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", s.len()).as_bytes());
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

/// Encodes a command as an array of bulk strings.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        bulk(out, a);
    }
}

impl FanOut {
    pub fn connect(addrs: &[String]) -> io::Result<FanOut> {
        let mut nodes = Vec::new();
        for a in addrs {
            let s = TcpStream::connect(a)?;
            s.set_nodelay(true)?;
            let r = BufReader::new(s.try_clone()?);
            nodes.push((s, r));
        }
        let mut me = FanOut {
            nodes,
            cmd: Vec::with_capacity(256),
            line: String::with_capacity(64),
        };
        // Load the release script so EVALSHA finds it.
        let mut load = Vec::new();
        command(
            &mut load,
            &[b"SCRIPT", b"LOAD", redlock_mux::script::RELEASE.as_bytes()],
        );
        me.cmd = load;
        me.fan_out(|_| true)?;
        Ok(me)
    }

    /// Writes `self.cmd` to every node, then reads one reply line from each (a bulk reply's
    /// payload line too), counting those `ok` accepts.
    fn fan_out(&mut self, ok: impl Fn(&str) -> bool) -> io::Result<usize> {
        for (w, _) in &mut self.nodes {
            w.write_all(&self.cmd)?;
        }
        let mut yes = 0;
        for (_, r) in &mut self.nodes {
            self.line.clear();
            r.read_line(&mut self.line)?;
            if self.line.starts_with('$') && !self.line.starts_with("$-1") {
                let mut payload = String::new();
                r.read_line(&mut payload)?;
            }
            if ok(&self.line) {
                yes += 1;
            }
        }
        Ok(yes)
    }

    /// SET NX PX on every node; true when a majority said OK.
    pub fn lock(&mut self, key: &str, token: &str, ttl_ms: u64) -> io::Result<bool> {
        self.cmd.clear();
        let ttl = ttl_ms.to_string();
        command(
            &mut self.cmd,
            &[
                b"SET",
                key.as_bytes(),
                token.as_bytes(),
                b"NX",
                b"PX",
                ttl.as_bytes(),
            ],
        );
        let yes = self.fan_out(|l| l.starts_with("+OK"))?;
        Ok(yes > self.nodes.len() / 2)
    }

    /// The release script on every node.
    pub fn unlock(&mut self, key: &str, token: &str) -> io::Result<usize> {
        self.cmd.clear();
        command(
            &mut self.cmd,
            &[
                b"EVALSHA",
                RELEASE_SHA1.as_bytes(),
                b"1",
                key.as_bytes(),
                token.as_bytes(),
            ],
        );
        self.fan_out(|l| l.starts_with(":1"))
    }
}

/// The minimal pipelined reference: one thread, one blocking connection per node; a batch of
/// `n` acquisitions is written to every node in one write, then every reply is read; then the
/// same for the `n` releases. What a client that pipelines many callers can reach at most.
pub struct Pipelined {
    nodes: Vec<(TcpStream, BufReader<TcpStream>)>,
    cmd: Vec<u8>,
    line: String,
}

impl Pipelined {
    pub fn connect(addrs: &[String]) -> io::Result<Pipelined> {
        let mut fan = FanOut::connect(addrs)?;
        Ok(Pipelined {
            nodes: std::mem::take(&mut fan.nodes),
            cmd: Vec::with_capacity(64 * 1024),
            line: String::with_capacity(64),
        })
    }

    fn exchange(&mut self, n: usize, ok: &str) -> io::Result<Vec<usize>> {
        for (w, _) in &mut self.nodes {
            w.write_all(&self.cmd)?;
        }
        let mut yes = vec![0usize; n];
        for (_, r) in &mut self.nodes {
            for y in yes.iter_mut() {
                self.line.clear();
                r.read_line(&mut self.line)?;
                if self.line.starts_with(ok) {
                    *y += 1;
                }
            }
        }
        Ok(yes)
    }

    /// Locks then unlocks `keys` (with `tokens`) as two pipelined batches; returns how many
    /// of the locks won a majority.
    pub fn pairs(&mut self, keys: &[String], tokens: &[String], ttl_ms: u64) -> io::Result<usize> {
        let ttl = ttl_ms.to_string();
        self.cmd.clear();
        for (k, t) in keys.iter().zip(tokens) {
            command(
                &mut self.cmd,
                &[
                    b"SET",
                    k.as_bytes(),
                    t.as_bytes(),
                    b"NX",
                    b"PX",
                    ttl.as_bytes(),
                ],
            );
        }
        let won = self
            .exchange(keys.len(), "+OK")?
            .iter()
            .filter(|&&y| y > self.nodes.len() / 2)
            .count();
        self.cmd.clear();
        for (k, t) in keys.iter().zip(tokens) {
            command(
                &mut self.cmd,
                &[
                    b"EVALSHA",
                    RELEASE_SHA1.as_bytes(),
                    b"1",
                    k.as_bytes(),
                    t.as_bytes(),
                ],
            );
        }
        self.exchange(keys.len(), ":1")?;
        Ok(won)
    }
}
