//! The simulated Redis master, sans I/O.
//!
//! A connection is opened with [`Master::connect`]; its bytes go in with [`Master::feed`],
//! split anywhere (a partial command waits for the rest), each call with the master's clock
//! `now_ms`; what the server writes back comes out of [`Master::take_output`]: the replies,
//! in RESP2 or RESP3 as the connection negotiated with `HELLO`, and the invalidation pushes
//! of client-side tracking, on the connections that asked for them. A connection the master
//! closes (bytes that are not RESP, a limit passed) says so by [`Master::is_closed`] after its
//! last bytes are taken. [`Master::crash`] restarts the server, with or without its data.
//!
//! Everything is deterministic: the same calls give the same bytes.

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};
use resp::Frame;

use crate::profile::Profile;

mod commands;
mod conn;
mod fair_scripts;
#[cfg(test)]
mod fair_tests;
mod keyspace;
mod pubsub;
mod reply;
mod scripts;
mod session;
mod strings;
#[cfg(test)]
mod tests;
mod zset;

use conn::{Conn, Conns, Login};
use keyspace::{Ex, Keyspace, Tracked};
use reply::Reply;

pub use conn::{MAX_ARGS, MAX_ARG_LEN, MAX_OUTPUT, MAX_QUERY};
pub use scripts::Library;

/// A connection to a [`Master`]; never reused, also across a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// A simulated Redis (or Valkey) master.
#[derive(Debug)]
pub struct Master {
    profile: Profile,
    conns: Conns,
    keys: Keyspace,
    /// The script cache: digest to the script it runs (`None`: a text this simulation does
    /// not model, cached all the same).
    scripts: BTreeMap<Box<[u8]>, Option<crate::scripts::Script>>,
    /// Function libraries by name.
    libraries: BTreeMap<String, Library>,
    tracked: Tracked,
    next_id: u64,
    /// The bytes of the command being run, and where its arguments lie in them (kept between
    /// commands, so that reading one allocates nothing).
    frame: Vec<u8>,
    ranges: Vec<(usize, usize)>,
}

impl Master {
    /// A master with `profile`, empty, no connection.
    pub fn new(profile: Profile) -> Master {
        Master {
            profile,
            conns: Conns::default(),
            keys: Keyspace::default(),
            scripts: BTreeMap::new(),
            libraries: BTreeMap::new(),
            tracked: Tracked::new(),
            next_id: 1,
            frame: Vec::new(),
            ranges: Vec::new(),
        }
    }

    /// Its profile.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Opens a connection: RESP2, database 0, logged in as the default user unless it has a
    /// password.
    pub fn connect(&mut self) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        let login = self
            .profile
            .default_user
            .password
            .is_none()
            .then_some(Login::Default);
        self.conns.insert(id, Conn::new(login));
        id
    }

    /// Bytes from the client on `conn`, at `now_ms` on the master's clock: every whole
    /// command among what has arrived is run, in order. `false` if the connection is closed
    /// or unknown (the bytes are dropped, as a closed socket's would be).
    pub fn feed(&mut self, conn: ConnId, bytes: &[u8], now_ms: u64) -> bool {
        match self.conns.get(&conn) {
            Some(c) if !c.closed => {}
            _ => return false,
        }
        let mut ranges = std::mem::take(&mut self.ranges);
        // Mostly nothing waits in the connection's input and the bytes begin with whole
        // commands: those are run where they lie, as `next_command` would read them there,
        // and only what follows them goes to the input.
        let mut at = 0;
        let mut need = None;
        while at < bytes.len() {
            match self.conns.get(&conn) {
                Some(c) if !c.closed && !c.decoding && c.inb.is_empty() => {}
                _ => break,
            }
            match multibulk(&bytes[at..], &mut ranges) {
                Multibulk::Whole { end, count } => {
                    if count > 0 {
                        self.execute(conn, &bytes[at..at + end], &ranges, now_ms);
                    }
                    at += end;
                }
                Multibulk::Partial(n) if bytes.len() - at <= MAX_QUERY => {
                    need = Some(n);
                    break;
                }
                Multibulk::Partial(_) | Multibulk::Other => break,
            }
        }
        match self.conns.get_mut(&conn) {
            // (A command closed it: the rest is dropped, as a closed connection's input is.)
            Some(c) if !c.closed => {
                if at == bytes.len() {
                    self.ranges = ranges;
                    return true;
                }
                c.inb.extend_from_slice(&bytes[at..]);
                if let Some(n) = need {
                    // A command short of its end, read as `next_command` reads it.
                    c.need = n;
                    self.ranges = ranges;
                    return true;
                }
            }
            _ => {
                self.ranges = ranges;
                return true;
            }
        }
        // One buffer for every command's bytes, kept between calls.
        let mut frame = std::mem::take(&mut self.frame);
        while self.next_command(conn, &mut frame, &mut ranges) {
            self.execute(conn, &frame, &ranges, now_ms);
        }
        self.frame = frame;
        self.ranges = ranges;
        true
    }

    /// The bytes the master has written on `conn` since the last call (empty for an unknown
    /// connection).
    pub fn take_output(&mut self, conn: ConnId) -> Bytes {
        self.conns
            .get_mut(&conn)
            .map(|c| {
                // Copied out, so that the buffer keeps its capacity for the next replies
                // (nothing when there is no output: the common case on an idle connection).
                if c.out.is_empty() {
                    return Bytes::new();
                }
                let out = Bytes::copy_from_slice(&c.out);
                c.out.clear();
                out
            })
            .unwrap_or_default()
    }

    /// Appends the bytes the master has written on `conn` since the last look to `out` (as
    /// [`take_output`](Master::take_output) does, into a buffer the caller keeps); returns
    /// whether the master has closed `conn` (as [`is_closed`](Master::is_closed)).
    #[inline]
    pub fn drain_output(&mut self, conn: ConnId, out: &mut Vec<u8>) -> bool {
        match self.conns.get_mut(&conn) {
            Some(c) => {
                out.extend_from_slice(&c.out);
                c.out.clear();
                c.closed
            }
            None => true,
        }
    }

    /// The bytes the master has written on `conn` since the last look, lent, and whether it
    /// has closed `conn` (as [`is_closed`](Master::is_closed)); [`clear_output`] then
    /// forgets them (the two do what [`drain_output`](Master::drain_output) does, without a
    /// copy for the caller).
    ///
    /// [`clear_output`]: Master::clear_output
    #[inline]
    pub fn output(&self, conn: ConnId) -> (&[u8], bool) {
        match self.conns.get(&conn) {
            Some(c) => (&c.out, c.closed),
            None => (&[], true),
        }
    }

    /// Forgets what `conn` has written (see [`output`](Master::output)).
    #[inline]
    pub fn clear_output(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.out.clear();
        }
    }

    /// Whether the master has closed `conn` (or never had it, or crashed since): once its
    /// output is taken, the client sees the connection end.
    pub fn is_closed(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_none_or(|c| c.closed)
    }

    /// The client closed `conn`: its state goes, its unsent output with it.
    pub fn close(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
    }

    /// The server crashes and restarts: every connection is dropped (unsent output lost), the
    /// script cache is empty, no key is tracked. With `keep_data` the keys (with their
    /// deadlines, which are absolute on the master's clock) and the function libraries
    /// survive, as with an append-only file synced on every write; without, the server starts
    /// empty.
    pub fn crash(&mut self, keep_data: bool) {
        self.conns.clear();
        self.tracked.clear();
        self.scripts.clear();
        if !keep_data {
            self.keys = Keyspace::default();
            self.libraries.clear();
        }
    }

    /// The value of `key` in database `db` at `now_ms`, without any effect (no expiry, no
    /// tracking): for checkers.
    pub fn peek(&self, db: u32, key: &[u8], now_ms: u64) -> Option<&Bytes> {
        let e = self.keys.dbs.get(&db)?.get(key)?;
        (!e.expired(now_ms)).then_some(e.value.as_str()).flatten()
    }

    /// What `PTTL key` would answer in database `db` at `now_ms`, without any effect: -2 no
    /// key, -1 no deadline, else the milliseconds left.
    pub fn peek_pttl(&self, db: u32, key: &[u8], now_ms: u64) -> i64 {
        match self.keys.dbs.get(&db).and_then(|d| d.get(key)) {
            Some(e) if !e.expired(now_ms) => pttl_of(e, now_ms),
            _ => -2,
        }
    }

    /// How many connections are open.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The next whole command on `conn`, if one has arrived: its bytes put in `frame`, where
    /// each argument lies in them in `ranges`; closes the connection on bytes that are not a
    /// command.
    fn next_command(
        &mut self,
        id: ConnId,
        frame: &mut Vec<u8>,
        ranges: &mut Vec<(usize, usize)>,
    ) -> bool {
        let Some(conn) = self.conns.get_mut(&id) else {
            return false;
        };
        loop {
            if conn.closed {
                return false;
            }
            // The shape clients send (an array of bulk strings), read in one pass; anything
            // else, or a frame the decoder has begun, goes through the decoder (and its errors).
            if !conn.decoding {
                // A frame known to be short of its end is not read again until more is here.
                if conn.inb.len() < conn.need && conn.inb.len() <= MAX_QUERY {
                    return false;
                }
                match multibulk(&conn.inb, ranges) {
                    Multibulk::Whole { end, count } => {
                        conn.need = 0;
                        frame.clear();
                        frame.extend_from_slice(&conn.inb[..end]);
                        // Mostly the input was that one command: emptied, not advanced.
                        if end == conn.inb.len() {
                            conn.inb.clear();
                        } else {
                            conn.inb.advance(end);
                        }
                        if count == 0 {
                            continue;
                        }
                        return true;
                    }
                    Multibulk::Partial(need) if conn.inb.len() <= MAX_QUERY => {
                        conn.need = need;
                        return false;
                    }
                    Multibulk::Partial(_) | Multibulk::Other => conn.need = 0,
                }
            }
            let decoded = match conn.decoder.decode(&mut conn.inb) {
                Ok(Some(f)) => {
                    conn.decoding = false;
                    f
                }
                Ok(None) => {
                    conn.decoding = !conn.inb.is_empty();
                    if conn.inb.len() > MAX_QUERY {
                        conn.close_with(None);
                    }
                    return false;
                }
                Err(e) => {
                    let msg = format!("ERR Protocol error: {}", e.kind());
                    conn.close_with(Some(&Reply::Error(msg)));
                    return false;
                }
            };
            match decoded {
                // Redis skips an empty or null multibulk.
                Frame::NullArray => continue,
                Frame::Array(items) if items.is_empty() => continue,
                Frame::Array(items) => match bulk_args(items, frame, ranges) {
                    Ok(()) => return true,
                    Err(got) => {
                        let msg = format!("ERR Protocol error: expected '$', got '{got}'");
                        conn.close_with(Some(&Reply::Error(msg)));
                        return false;
                    }
                },
                _ => {
                    let msg = "ERR Protocol error: inline commands are not simulated";
                    conn.close_with(Some(&Reply::err(msg)));
                    return false;
                }
            }
        }
    }

    /// Runs one command on `id` (its arguments `ranges` of `frame`) and writes its reply, then
    /// the invalidations it owes its own connection.
    fn execute(&mut self, id: ConnId, frame: &[u8], ranges: &[(usize, usize)], now: u64) {
        // The arguments as slices: on the stack for a command of a few (all but the largest
        // locks').
        let mut few: [&[u8]; 16] = [&[]; 16];
        let many: Vec<&[u8]>;
        let args: &[&[u8]] = if ranges.len() <= few.len() {
            for (a, &(s, e)) in few.iter_mut().zip(ranges) {
                *a = &frame[s..e];
            }
            &few[..ranges.len()]
        } else {
            many = ranges.iter().map(|&(s, e)| &frame[s..e]).collect();
            &many
        };
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let mut ex = Ex {
            conn: id,
            db: conn.db,
            now,
            remember: conn.remembers(),
            pending: Vec::new(),
            messages: Vec::new(),
            script_keys: None,
        };
        let reply = commands::dispatch(self, &mut ex, args);
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        // `CLIENT CACHING` applies to the one command after it.
        if !args[0].eq_ignore_ascii_case(b"client") {
            conn.caching = false;
        }
        reply.encode(conn.resp3, &mut conn.out);
        // (Valkey pushes a command's messages to its own connection before the invalidations
        // it owes that connection.)
        for (channel, message) in &ex.messages {
            reply::encode_push3(b"message", channel, message, &mut conn.out);
        }
        if conn.resp3 && conn.tracking.is_some() {
            for key in &ex.pending {
                reply::encode_invalidation(key, &mut conn.out);
            }
        }
        conn.check_output();
    }
}

/// What the front of a connection's input holds.
enum Multibulk {
    /// A whole array of `count` bulk strings, `end` bytes long (none: an empty array, which
    /// Redis skips).
    Whole { end: usize, count: usize },
    /// The start of one, so far well formed, which reads the same until the input is `.0`
    /// bytes long (the next byte the reading looks at, past an argument's bytes).
    Partial(usize),
    /// Anything else (another type, a malformed or over-limit frame): for the decoder.
    Other,
}

/// Reads an array of bulk strings (`*n`, then `n` times `$len`, the bytes, CRLF) from the
/// front of `b`, within the request limits, in one pass: where each argument lies goes to
/// `ranges` (cleared first; nothing is allocated once it has grown to a command's size).
fn multibulk(b: &[u8], ranges: &mut Vec<(usize, usize)>) -> Multibulk {
    // A decimal count of at most ten digits ending in CRLF at `at`: the number and where the
    // next line starts.
    #[inline(always)]
    fn number(b: &[u8], at: usize) -> Result<(usize, usize), Multibulk> {
        // Mostly one or two digits with the CRLF after them: read at once (as the loop below
        // reads them).
        if let Some(&[d0, d1, d2, d3]) = b.get(at..at + 4) {
            if d0.is_ascii_digit() {
                let n = usize::from(d0 - b'0');
                if d1 == b'\r' && d2 == b'\n' {
                    return Ok((n, at + 3));
                }
                if d1.is_ascii_digit() && d2 == b'\r' && d3 == b'\n' {
                    return Ok((n * 10 + usize::from(d1 - b'0'), at + 4));
                }
            }
        }
        let mut n: usize = 0;
        let mut i = at;
        loop {
            match b.get(i) {
                Some(&d @ b'0'..=b'9') if i - at < 10 => {
                    n = n * 10 + usize::from(d - b'0');
                    i += 1;
                }
                Some(b'\r') if i > at => {
                    return match b.get(i + 1) {
                        None => Err(Multibulk::Partial(b.len() + 1)),
                        Some(b'\n') => Ok((n, i + 2)),
                        Some(_) => Err(Multibulk::Other),
                    };
                }
                None => return Err(Multibulk::Partial(b.len() + 1)),
                Some(_) => return Err(Multibulk::Other),
            }
        }
    }
    ranges.clear();
    let mut parse = || -> Result<Multibulk, Multibulk> {
        match b.first() {
            None => return Err(Multibulk::Partial(b.len() + 1)),
            Some(b'*') => {}
            Some(_) => return Err(Multibulk::Other),
        }
        let (n, mut at) = number(b, 1)?;
        if n > conn::MAX_ARGS {
            return Err(Multibulk::Other);
        }
        ranges.reserve(n);
        for _ in 0..n {
            match b.get(at) {
                None => return Err(Multibulk::Partial(b.len() + 1)),
                Some(b'$') => {}
                Some(_) => return Err(Multibulk::Other),
            }
            let (len, start) = number(b, at + 1)?;
            if len > conn::MAX_ARG_LEN {
                return Err(Multibulk::Other);
            }
            let end = start + len;
            match b.get(end..end + 2) {
                Some(b"\r\n") => {}
                // The argument's own bytes are not looked at: its end decides.
                None if b.len() <= end => return Err(Multibulk::Partial(end + 1)),
                None if b[end] == b'\r' => return Err(Multibulk::Partial(b.len() + 1)),
                _ => return Err(Multibulk::Other),
            }
            ranges.push((start, end));
            at = end + 2;
        }
        Ok(Multibulk::Whole { end: at, count: n })
    };
    parse().unwrap_or_else(|m| m)
}

/// A command's arguments put in `frame` (emptied first), where each lies in `ranges`, or the
/// type byte of the first that is not a bulk string.
fn bulk_args(
    items: Vec<Frame>,
    frame: &mut Vec<u8>,
    ranges: &mut Vec<(usize, usize)>,
) -> Result<(), char> {
    frame.clear();
    ranges.clear();
    for f in items {
        match f {
            Frame::Bulk(b) => {
                ranges.push((frame.len(), frame.len() + b.len()));
                frame.extend_from_slice(&b);
            }
            other => return Err(type_byte(&other)),
        }
    }
    Ok(())
}

/// The RESP type byte a frame starts with.
fn type_byte(f: &Frame) -> char {
    match f {
        Frame::Simple(_) => '+',
        Frame::Error(_) => '-',
        Frame::Integer(_) => ':',
        Frame::Bulk(_) | Frame::NullBulk | Frame::StreamedString(_) => '$',
        Frame::NullArray | Frame::Array(_) => '*',
        Frame::Null => '_',
        Frame::Boolean(_) => '#',
        Frame::Double(_) => ',',
        Frame::BigNumber(_) => '(',
        Frame::BulkError(_) => '!',
        Frame::Verbatim { .. } => '=',
        Frame::Set(_) => '~',
        Frame::Map(_) => '%',
        Frame::Push(_) => '>',
        Frame::Attribute { .. } => '|',
    }
}

/// `PTTL` of a live entry at `now`.
fn pttl_of(e: &keyspace::Entry, now: u64) -> i64 {
    match e.expire_at {
        None => -1,
        Some(at) => i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX),
    }
}
