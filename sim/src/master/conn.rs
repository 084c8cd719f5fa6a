//! One client connection to a simulated master: its buffers, its protocol, who it is logged in
//! as, and its client-side tracking.

use bytes::BytesMut;
use resp::{Decoder, Limits};

/// The longest argument the master takes (the function library is a few kilobytes; tokens and
/// keys far less). Larger is a protocol error that closes the connection.
pub const MAX_ARG_LEN: usize = 1 << 20;
/// The most arguments in one command (a lock over the most resources the core allows, 1024,
/// plus the script's own arguments, fits many times).
pub const MAX_ARGS: usize = 16 * 1024;
/// Bytes of a command not yet complete that a connection may hold: past it, the connection
/// is closed (Redis' `client-query-buffer-limit`, far lower).
pub const MAX_QUERY: usize = 8 << 20;
/// Bytes of output a connection may hold unread: past it, the connection is closed and its
/// output dropped (Redis' `client-output-buffer-limit`).
pub const MAX_OUTPUT: usize = 16 << 20;

/// The decoder limits for commands: flat arrays of bounded bulk strings.
pub(crate) fn request_limits() -> Limits {
    Limits::new()
        .with_max_bulk_len(MAX_ARG_LEN)
        .with_max_elements(MAX_ARGS)
        .with_max_depth(1)
        .with_max_line_len(64 * 1024)
}

/// Who a connection is logged in as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Login {
    /// The default user.
    Default,
    /// The profile's `users[i]`.
    User(usize),
}

/// A connection's client-side tracking mode (`CLIENT TRACKING ON ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Tracking {
    /// `OPTIN`: only keys read right after `CLIENT CACHING YES` are tracked.
    pub(crate) optin: bool,
    /// `OPTOUT`: keys read right after `CLIENT CACHING NO` are not tracked.
    pub(crate) optout: bool,
    /// `NOLOOP`: no invalidation for keys this connection writes itself.
    pub(crate) noloop: bool,
}

/// One connection's state.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Bytes received and not yet decoded into a whole command.
    pub(crate) inb: BytesMut,
    pub(crate) decoder: Decoder,
    /// Whether the decoder holds the start of a frame (then it reads on, not the fast path).
    pub(crate) decoding: bool,
    /// The fast path found a command short of its end: it reads it again once `inb` is this
    /// long (0: at once).
    pub(crate) need: usize,
    /// Bytes to send, in order.
    pub(crate) out: Vec<u8>,
    /// The connection speaks RESP3 (`HELLO 3`).
    pub(crate) resp3: bool,
    /// The selected database.
    pub(crate) db: u32,
    /// Who it is logged in as; `None` until `AUTH` where the default user has a password.
    pub(crate) login: Option<Login>,
    /// Client-side tracking, when on.
    pub(crate) tracking: Option<Tracking>,
    /// `CLIENT CACHING` was the previous command: it applies to this one.
    pub(crate) caching: bool,
    /// The pub/sub channels it is subscribed to (`pubsub.rs`).
    pub(crate) channels: Vec<bytes::Bytes>,
    /// The master closed the connection (a protocol error, a limit): what `out` holds is the
    /// last it sends, and nothing more is read.
    pub(crate) closed: bool,
}

impl Conn {
    pub(crate) fn new(login: Option<Login>) -> Conn {
        Conn {
            inb: BytesMut::new(),
            decoder: Decoder::new(request_limits()),
            decoding: false,
            need: 0,
            // Room for a few replies, so that it does not grow by steps from nothing.
            out: Vec::with_capacity(512),
            resp3: false,
            db: 0,
            login,
            tracking: None,
            caching: false,
            channels: Vec::new(),
            closed: false,
        }
    }

    /// Whether the keys the next command reads are remembered for invalidation.
    pub(crate) fn remembers(&self) -> bool {
        match self.tracking {
            None => false,
            Some(t) if t.optin => self.caching,
            Some(t) if t.optout => !self.caching,
            Some(_) => true,
        }
    }

    /// Closes the connection: `out` keeps what was written before, and `last` after it.
    pub(crate) fn close_with(&mut self, last: Option<&super::reply::Reply>) {
        if let Some(r) = last {
            r.encode(self.resp3, &mut self.out);
        }
        self.closed = true;
        self.inb.clear();
    }

    /// Closes the connection if its unread output is past [`MAX_OUTPUT`], dropping it.
    pub(crate) fn check_output(&mut self) {
        if self.out.len() > MAX_OUTPUT {
            self.out.clear();
            self.closed = true;
            self.inb.clear();
        }
    }
}

/// A master's connections by id: a slot per id ever given (ids grow from 1 and are never
/// reused), so that finding one is an index, not a search.
#[derive(Debug, Default)]
pub(crate) struct Conns {
    slots: Vec<Option<Box<Conn>>>,
    /// The first id whose slot is still kept (the slots before it went with a crash).
    base: u64,
    open: usize,
}

impl Conns {
    fn slot(&self, id: super::ConnId) -> Option<usize> {
        id.0.checked_sub(self.base).map(|i| i as usize)
    }

    pub(crate) fn get(&self, id: &super::ConnId) -> Option<&Conn> {
        self.slots.get(self.slot(*id)?)?.as_deref()
    }

    pub(crate) fn get_mut(&mut self, id: &super::ConnId) -> Option<&mut Conn> {
        let i = self.slot(*id)?;
        self.slots.get_mut(i)?.as_deref_mut()
    }

    /// Adds connection `id`, the highest yet.
    pub(crate) fn insert(&mut self, id: super::ConnId, conn: Conn) {
        if self.slots.is_empty() {
            self.base = id.0;
        }
        let i = (id.0 - self.base) as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.open += usize::from(self.slots[i].is_none());
        self.slots[i] = Some(Box::new(conn));
    }

    pub(crate) fn remove(&mut self, id: &super::ConnId) {
        if let Some(slot) = self.slot(*id).and_then(|i| self.slots.get_mut(i)) {
            self.open -= usize::from(slot.take().is_some());
        }
        // Slots before the first open one are dropped, so the table stays as long as the
        // span of open connections.
        let gone = self.slots.iter().take_while(|s| s.is_none()).count();
        if gone >= 64 && gone * 2 >= self.slots.len() {
            self.slots.drain(..gone);
            self.base += gone as u64;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.open = 0;
    }

    pub(crate) fn len(&self) -> usize {
        self.open
    }

    /// The open connections with their ids, in the order of their ids.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (super::ConnId, &mut Conn)> {
        let base = self.base;
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, s)| Some((super::ConnId(base + i as u64), s.as_deref_mut()?)))
    }
}
