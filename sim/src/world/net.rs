//! The simulated network: one link per client connection, behaving as TCP does. Each direction
//! is a queue of segments delivered in order after the link's delay, split at boundaries drawn
//! from the seed; a link can be held (a blackhole, a partition, a paused master's unread input)
//! and then delivers what it held, or ends in a reset. A connection ends with a FIN or an RST
//! that travels behind the bytes sent before it.

use std::collections::VecDeque;
use std::io::ErrorKind;

use bytes::{Bytes, BytesMut};

use super::{Dir, Ev, Fault, Sim, NEVER};
use crate::master::ConnId;

/// What a segment carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg {
    /// The next this many bytes of its direction's [`Flow`] data.
    Data(usize),
    /// The sender closed its side.
    Fin,
    /// The connection failed.
    Rst(ErrorKind),
}

/// One direction of a link: its segments in flight, (when delivered, what), and the bytes
/// of their data, in order, in one buffer (no allocation per segment).
#[derive(Debug, Default)]
struct Flow {
    q: VecDeque<(u64, Seg)>,
    data: Vec<u8>,
    /// Where the data of the first segment starts.
    head: usize,
}

impl Flow {
    /// An empty flow, with room for a few commands or replies (so that it does not grow by
    /// steps from nothing on every new link).
    fn new() -> Flow {
        Flow {
            q: VecDeque::with_capacity(8),
            data: Vec::with_capacity(512),
            head: 0,
        }
    }

    /// Appends `bytes` to the data (which the segments queued next will carry).
    fn push_data(&mut self, bytes: &[u8]) {
        if self.head == self.data.len() {
            self.data.clear();
            self.head = 0;
        } else if self.head >= 4096 && self.head * 2 >= self.data.len() {
            // Mostly delivered: the rest moves to the front, so the buffer stays bounded.
            self.data.drain(..self.head);
            self.head = 0;
        }
        self.data.extend_from_slice(bytes);
    }

    /// Takes the first segment, and the range of its data in `data`.
    fn pop(&mut self) -> Option<(Seg, std::ops::Range<usize>)> {
        let (_, seg) = self.q.pop_front()?;
        let start = self.head;
        if let Seg::Data(n) = seg {
            self.head += n;
        }
        Some((seg, start..self.head))
    }

    /// Drops everything in flight.
    fn clear(&mut self) {
        self.q.clear();
        self.data.clear();
        self.head = 0;
    }
}

/// One connection between a client's node and a master.
#[derive(Debug)]
pub(crate) struct Link {
    pub client: u32,
    pub node: u32,
    pub master: u32,
    /// The master's side, once the connection is accepted.
    pub conn: Option<ConnId>,
    /// Client to server, and server to client.
    q: [Flow; 2],
    /// The earliest delivery event pending per direction.
    armed: [u64; 2],
    /// The base one-way delay.
    lat: u64,
    /// The client has dropped its socket.
    pub client_gone: bool,
    /// The master's side is gone (closed, reset, crashed).
    pub server_gone: bool,
    /// The server has sent its FIN: its later output is not sent.
    s2c_closed: bool,
    /// Held: nothing moves either way.
    pub blackhole: bool,
}

impl Link {
    fn live(&self) -> bool {
        self.conn.is_some() && !self.server_gone && !self.client_gone
    }
}

/// What a delivery to a client brings.
pub(crate) enum ToClient {
    /// Bytes (put where the caller asked).
    Bytes,
    Closed(ErrorKind),
}

impl Sim {
    fn held(&self, l: u32, dir: Dir) -> bool {
        let link = &self.links[l as usize];
        link.blackhole
            || self.cut[link.client as usize] & (1 << link.master) != 0
            || (dir == Dir::C2s && self.masters[link.master as usize].paused)
    }

    /// The one-way delay of a segment sent now on `l`.
    fn delay(&mut self, l: u32) -> u64 {
        let link = &self.links[l as usize];
        let m = &self.masters[link.master as usize];
        let extra = if m.slow_until > self.now {
            m.slow_extra
        } else {
            0
        };
        let lat = link.lat;
        lat + extra + self.net_rng.below(lat / 2 + 1)
    }

    fn arm(&mut self, l: u32, dir: Dir, t: u64) {
        let armed = &mut self.links[l as usize].armed[dir as usize];
        if t < *armed {
            *armed = t;
            self.push(t, Ev::Deliver(l, dir));
        }
    }

    /// Arms the delivery of what `l` holds, if anything.
    pub(crate) fn rearm(&mut self, l: u32) {
        for dir in [Dir::C2s, Dir::S2c] {
            if let Some(&(at, _)) = self.links[l as usize].q[dir as usize].q.front() {
                let t = at.max(self.now);
                self.arm(l, dir, t);
            }
        }
    }

    /// Queues `seg` on `l` in direction `dir`, after what is queued already.
    #[inline]
    fn enqueue(&mut self, l: u32, dir: Dir, seg: Seg) {
        let d = self.delay(l);
        let q = &mut self.links[l as usize].q[dir as usize].q;
        let at = q.back().map_or(0, |(t, _)| *t).max(self.now + d);
        q.push_back((at, seg));
        self.arm(l, dir, at);
    }

    /// Queues bytes, split at boundaries drawn from the seed (each piece a segment).
    fn enqueue_bytes(&mut self, l: u32, dir: Dir, bytes: &[u8]) {
        self.links[l as usize].q[dir as usize].push_data(bytes);
        self.enqueue_pushed(l, dir, bytes.len());
    }

    /// Queues the last `len` bytes pushed to `l`'s flow in direction `dir` as
    /// [`enqueue_bytes`](Sim::enqueue_bytes) queues its bytes.
    fn enqueue_pushed(&mut self, l: u32, dir: Dir, len: usize) {
        let mut rest = len;
        while rest > 0 {
            let n = if self.split_all {
                self.net_rng.range(1, (rest as u64).min(16)) as usize
            } else if rest > 1 && self.net_rng.chance(100) {
                self.net_rng.range(1, rest as u64 - 1) as usize
            } else {
                rest
            };
            rest -= n;
            self.enqueue(l, dir, Seg::Data(n));
        }
    }

    /// Opens a link from `client`'s node `node` to master `master`: its SYN goes out.
    pub(crate) fn connect(&mut self, client: u32, node: u32, master: u32) -> u32 {
        let lat = self.net_rng.range(self.lat_lo, self.lat_hi);
        self.links.push(Link {
            client,
            node,
            master,
            conn: None,
            q: [Flow::new(), Flow::new()],
            armed: [NEVER; 2],
            lat,
            client_gone: false,
            server_gone: false,
            s2c_closed: false,
            blackhole: false,
        });
        let l = (self.links.len() - 1) as u32;
        let d = self.delay(l);
        self.push(self.now + d, Ev::Syn(l));
        l
    }

    /// A SYN arrives: accepted, refused, or lost (held).
    pub(crate) fn on_syn(&mut self, l: u32) {
        if self.links[l as usize].client_gone || self.held(l, Dir::C2s) {
            return;
        }
        let m = self.links[l as usize].master as usize;
        let master = &mut self.masters[m];
        if !master.up || master.refusing {
            self.links[l as usize].server_gone = true;
            self.enqueue(l, Dir::S2c, Seg::Rst(ErrorKind::ConnectionRefused));
            return;
        }
        let conn = master.m.connect();
        master.links.push(l);
        self.links[l as usize].conn = Some(conn);
        let d = self.delay(l);
        self.push(self.now + d, Ev::Established(l));
    }

    /// The client writes `bytes` on `l`.
    pub(crate) fn send(&mut self, l: u32, bytes: &[u8]) {
        if self.links[l as usize].server_gone {
            // Written into a socket the peer has reset: the bytes go nowhere (the reset is
            // on its way to the client).
            return;
        }
        self.enqueue_bytes(l, Dir::C2s, bytes);
    }

    /// The client drops its socket of `l`: a FIN goes to the master behind the bytes sent.
    pub(crate) fn client_close(&mut self, l: u32) {
        let link = &mut self.links[l as usize];
        if link.client_gone {
            return;
        }
        link.client_gone = true;
        link.q[Dir::S2c as usize].clear();
        if link.conn.is_some() && !link.server_gone {
            self.enqueue(l, Dir::C2s, Seg::Fin);
        }
    }

    /// Delivers what is due on `l` toward the master.
    ///
    /// The data of segments due at this instant reach the master in one piece (they lie one
    /// after the other in the flow's buffer): fed piece by piece at one time, the master runs
    /// the same commands in the same order and writes the same replies, which are collected
    /// once, after the last. With byte loss, each segment is fed alone (a piece of it may be
    /// lost). Every segment is traced as before.
    pub(crate) fn deliver_c2s(&mut self, l: u32) {
        let dir = Dir::C2s as usize;
        if self.links[l as usize].armed[dir] != self.now {
            return;
        }
        self.links[l as usize].armed[dir] = NEVER;
        if self.held(l, Dir::C2s) {
            return;
        }
        let m = self.links[l as usize].master as usize;
        let ms = self.masters[m].ms(self.now);
        let per_segment = self.faults.has(Fault::ByteLoss);
        let mut fed = false;
        // Data due now and not yet fed: its range in the flow's buffer.
        let mut pending: Option<std::ops::Range<usize>> = None;
        while let Some(&(at, _)) = self.links[l as usize].q[dir].q.front() {
            if at > self.now {
                self.arm(l, Dir::C2s, at);
                break;
            }
            let Some((seg, range)) = self.links[l as usize].q[dir].pop() else {
                break;
            };
            let link = &mut self.links[l as usize];
            let Some(conn) = link.conn else { continue };
            if link.server_gone {
                continue;
            }
            let data = &link.q[dir].data[range.clone()];
            self.trace
                .ev(self.now, 10, u64::from(l), seg_len(&seg), || {
                    format!("link {l} -> m{m}: {}", seg_words(&seg, data))
                });
            match seg {
                Seg::Data(_) if per_segment => {
                    let bytes = match maybe_lose(&self.faults, &mut self.net_rng, data) {
                        Some((from, to)) => {
                            self.byte_losses += 1;
                            self.lost.clear();
                            self.lost.extend_from_slice(&data[..from]);
                            self.lost.extend_from_slice(&data[to..]);
                            &self.lost[..]
                        }
                        None => data,
                    };
                    self.masters[m].m.feed(conn, bytes, ms);
                    fed = true;
                }
                Seg::Data(_) => {
                    pending = Some(match pending {
                        Some(p) if p.end == range.start => p.start..range.end,
                        Some(p) => {
                            self.feed_range(l, conn, p, ms);
                            range
                        }
                        None => range,
                    });
                    fed = true;
                }
                Seg::Fin | Seg::Rst(_) => {
                    if let Some(p) = pending.take() {
                        self.feed_range(l, conn, p, ms);
                    }
                    self.masters[m].m.close(conn);
                    self.links[l as usize].server_gone = true;
                }
            }
        }
        if let Some(p) = pending {
            if let Some(conn) = self.links[l as usize].conn {
                self.feed_range(l, conn, p, ms);
            }
        }
        if fed {
            self.collect_output(m);
        }
    }

    /// Feeds the bytes `range` of `l`'s flow toward the master to its connection `conn`.
    #[inline]
    fn feed_range(&mut self, l: u32, conn: ConnId, range: std::ops::Range<usize>, ms: u64) {
        let link = &self.links[l as usize];
        let m = link.master as usize;
        self.masters[m]
            .m
            .feed(conn, &link.q[Dir::C2s as usize].data[range], ms);
    }

    /// Sends what master `m` has written on each of its connections (replies, and pushes to
    /// other connections), and the FIN of a connection it closed.
    pub(crate) fn collect_output(&mut self, m: usize) {
        // One buffer, kept between calls (for output made hostile).
        let mut out = std::mem::take(&mut self.out);
        let mut i = 0;
        while i < self.masters[m].links.len() {
            let l = self.masters[m].links[i];
            let link = &self.links[l as usize];
            let Some(conn) = link.conn else {
                i += 1;
                continue;
            };
            if link.server_gone {
                self.masters[m].links.swap_remove(i);
                continue;
            }
            let (written, closed) = self.masters[m].m.output(conn);
            let n = written.len();
            if n > 0 && !self.links[l as usize].s2c_closed {
                if self.masters[m].hostile {
                    out.clear();
                    out.extend_from_slice(written);
                    let bad = self.hostile(&out);
                    self.enqueue_bytes(l, Dir::S2c, &bad);
                } else {
                    // Straight from the master's buffer to the link's.
                    self.links[l as usize].q[Dir::S2c as usize].push_data(written);
                    self.enqueue_pushed(l, Dir::S2c, n);
                }
            }
            if n > 0 {
                self.masters[m].m.clear_output(conn);
            }
            if closed {
                self.masters[m].m.close(conn);
                self.links[l as usize].server_gone = true;
                self.enqueue(l, Dir::S2c, Seg::Fin);
                self.masters[m].links.swap_remove(i);
                continue;
            }
            i += 1;
        }
        self.out = out;
    }

    /// The next segment due on `l` toward the client, if any (and not held); the bytes it
    /// brings are put in `into` (emptied first).
    pub(crate) fn pop_s2c(&mut self, l: u32, first: bool, into: &mut Vec<u8>) -> Option<ToClient> {
        let dir = Dir::S2c as usize;
        if first {
            if self.links[l as usize].armed[dir] != self.now {
                return None;
            }
            self.links[l as usize].armed[dir] = NEVER;
        }
        if self.held(l, Dir::S2c) {
            return None;
        }
        loop {
            let &(at, _) = self.links[l as usize].q[dir].q.front()?;
            if at > self.now {
                self.arm(l, Dir::S2c, at);
                return None;
            }
            let (seg, range) = self.links[l as usize].q[dir].pop()?;
            let link = &self.links[l as usize];
            if link.client_gone {
                continue;
            }
            let m = link.master;
            let data = &link.q[dir].data[range];
            self.trace
                .ev(self.now, 11, u64::from(l), seg_len(&seg), || {
                    format!("link {l} <- m{m}: {}", seg_words(&seg, data))
                });
            into.clear();
            return Some(match seg {
                Seg::Data(_) => {
                    match maybe_lose(&self.faults, &mut self.net_rng, data) {
                        Some((from, to)) => {
                            self.byte_losses += 1;
                            into.extend_from_slice(&data[..from]);
                            into.extend_from_slice(&data[to..]);
                        }
                        None => into.extend_from_slice(data),
                    }
                    ToClient::Bytes
                }
                Seg::Fin => ToClient::Closed(ErrorKind::UnexpectedEof),
                Seg::Rst(kind) => ToClient::Closed(kind),
            });
        }
    }

    /// Ends `l` with a reset: the master's side goes now, the client learns behind what is
    /// in flight to it.
    pub(crate) fn reset(&mut self, l: u32) {
        let link = &mut self.links[l as usize];
        if link.server_gone || link.client_gone {
            return;
        }
        link.server_gone = true;
        link.q[Dir::C2s as usize].clear();
        if let Some(conn) = link.conn {
            let m = link.master as usize;
            self.masters[m].m.close(conn);
        }
        self.enqueue(l, Dir::S2c, Seg::Rst(ErrorKind::ConnectionReset));
    }

    /// The master's side of `l` sends a FIN and writes nothing more; it still reads.
    pub(crate) fn half_close(&mut self, l: u32) {
        let link = &mut self.links[l as usize];
        if !link.live() || link.s2c_closed {
            return;
        }
        link.s2c_closed = true;
        self.enqueue(l, Dir::S2c, Seg::Fin);
    }

    /// A random live link (of master `m` if given).
    pub(crate) fn some_live_link(&mut self, m: Option<u32>) -> Option<u32> {
        let live: Vec<u32> = (0..self.links.len() as u32)
            .filter(|&l| {
                let link = &self.links[l as usize];
                link.live() && m.is_none_or(|m| link.master == m)
            })
            .collect();
        if live.is_empty() {
            None
        } else {
            Some(live[self.fault_rng.below(live.len() as u64) as usize])
        }
    }

    /// Master `m` crashes: every connection to it ends with a reset behind what it sent.
    pub(crate) fn crash_master(&mut self, m: usize, keep_data: bool) {
        for l in std::mem::take(&mut self.masters[m].links) {
            let link = &mut self.links[l as usize];
            if link.server_gone {
                continue;
            }
            link.server_gone = true;
            link.q[Dir::C2s as usize].clear();
            if !link.client_gone {
                self.enqueue(l, Dir::S2c, Seg::Rst(ErrorKind::ConnectionReset));
            }
        }
        // Connections accepted whose link is not in the list (none) and the rest go with it.
        self.masters[m].m.crash(keep_data);
        self.masters[m].up = false;
    }

    /// Replies replaced, some of them, by hostile ones of the wrong type, errors, or integers
    /// out of any range (pushes are left alone): one frame for one, so the stream stays in
    /// step.
    fn hostile(&mut self, out: &[u8]) -> BytesMut {
        use resp::Frame;
        let mut buf = BytesMut::from(out);
        let mut dec = resp::Decoder::new(resp::Limits::default());
        let mut res = BytesMut::with_capacity(out.len());
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let frame = if matches!(frame, Frame::Push(_)) || !self.fault_rng.chance(300) {
                        frame
                    } else {
                        self.hostile_replies += 1;
                        match self.fault_rng.below(4) {
                            0 => Frame::Error(Bytes::from_static(b"ERR hostile reply")),
                            1 => Frame::Integer(i64::MAX),
                            2 => Frame::Bulk(Bytes::from_static(b"\x00hostile\xff")),
                            _ => Frame::Array(vec![Frame::Integer(-7), Frame::NullBulk]),
                        }
                    };
                    frame.encode(&mut res);
                }
                _ => {
                    res.extend_from_slice(&buf);
                    break;
                }
            }
        }
        res
    }
}

/// With byte loss on, sometimes a piece to drop from the middle of `bytes`: its range.
#[inline]
fn maybe_lose(
    faults: &super::Faults,
    rng: &mut crate::rng::Rng,
    bytes: &[u8],
) -> Option<(usize, usize)> {
    if !faults.has(Fault::ByteLoss) || bytes.len() < 2 || !rng.chance(5) {
        return None;
    }
    let from = rng.below(bytes.len() as u64) as usize;
    let to = rng.range(from as u64 + 1, bytes.len() as u64) as usize;
    Some((from, to))
}

fn seg_len(seg: &Seg) -> u64 {
    match seg {
        Seg::Data(n) => *n as u64,
        Seg::Fin => u64::MAX,
        Seg::Rst(_) => u64::MAX - 1,
    }
}

fn seg_words(seg: &Seg, b: &[u8]) -> String {
    match seg {
        Seg::Data(_) => {
            let s = String::from_utf8_lossy(&b[..b.len().min(120)]);
            format!("{} bytes {:?}", b.len(), s)
        }
        Seg::Fin => "FIN".into(),
        Seg::Rst(k) => format!("RST ({k:?})"),
    }
}
