//! Opening a connection: its state cleared, the login and identification commands queued
//! (`AUTH`, `SELECT`, `HELLO`, the eviction-policy read, the scripts' preload).

use resp::encode_command;

use super::{Conn, Native, Owner};
use crate::config::{NodeAddr, Scripts};
use crate::forms::Forms;

impl<T> Conn<T> {
    /// Starts a fresh connection: clears all state and queues the login commands (and, with
    /// `wakeups`, the request for RESP3 and tracking).
    pub fn opened(&mut self, addr: &NodeAddr, scripts: Scripts, wakeups: bool) {
        let hello = wakeups || matches!(scripts, Scripts::Auto | Scripts::Native);
        self.resp3 = false;
        self.tracking = false;
        self.subscribed = false;
        self.invalidated.clear();
        self.forms = Forms::new(scripts);
        self.load_error = None;
        self.progress_at = None;
        self.wrote_since = false;
        self.sync_refused = false;
        self.unsealed = false;
        self.held.clear();
        self.confirmed = 0;
        self.out.clear();
        self.inb.clear();
        self.owed.clear();
        self.scripted.clear();
        self.decoder.reset();
        match (&addr.user, &addr.password) {
            (Some(user), Some(pass)) => {
                self.queue_handshake(&[b"AUTH", user.as_bytes(), pass.as_bytes()])
            }
            (None, Some(pass)) => self.queue_handshake(&[b"AUTH", pass.as_bytes()]),
            _ => {}
        }
        if addr.db != 0 {
            let mut db = resp::IntBuf::new();
            self.queue_handshake(&[b"SELECT", db.format(i64::from(addr.db))]);
        }
        self.subscribe_early = false;
        self.subscribe_pending = false;
        if wakeups {
            encode_command(&mut self.out, &[b"HELLO", b"3"]);
            self.owed.push_back(Owner::Hello { resp3: true });
            // The bell may be subscribed ahead of the `HELLO` reply, right before the first
            // command that stands in a line (see `subscribe_before_line`), where the server has
            // not refused `HELLO 3` before.
            self.subscribe_pending = self.bell.is_some() && !self.hello3_refused;
        } else if hello {
            encode_command(&mut self.out, &[b"HELLO"]);
            self.owed.push_back(Owner::Hello { resp3: false });
        }
        self.eviction = None;
        if self.check_eviction {
            encode_command(&mut self.out, &[b"CONFIG", b"GET", b"maxmemory-policy"]);
            self.owed.push_back(Owner::Eviction);
        }
        // Native mode calls no script unless a command has no native form (a set of
        // resources, fencing): nothing is loaded ahead (an `EVALSHA` that finds nothing is
        // sent again as `EVAL`, which caches it).
        if scripts != Scripts::Native {
            self.reload_scripts();
        }
    }

    /// The native compare-and-delete commands of this connection's server, once it has said
    /// what it is (`None` before, and for servers without them).
    pub fn native(&self) -> Option<Native> {
        self.forms.native()
    }

    /// Whether the server has answered `HELLO` on this connection.
    pub fn identified(&self) -> bool {
        self.forms.is_identified()
    }

    /// Fair mode: call before queueing a command that stands in a line (joins it, claims
    /// from it, or moves or restores a place in it) on a connection whose server has not
    /// answered `HELLO 3` yet: the bell's `SUBSCRIBE` goes out first, so that the server has
    /// the subscription before the command puts the client in a line (a release that rang the
    /// line in between would otherwise reach nobody and take the client for a gone process).
    /// Commands queued before it do not depend on the `HELLO` reply; those after it do: a
    /// server that refuses `HELLO 3` would run the `SUBSCRIBE` on a RESP2 connection, which
    /// then refuses every other command, so the refusal spends the connection.
    pub fn subscribe_before_line(&mut self) {
        if !std::mem::take(&mut self.subscribe_pending) {
            return;
        }
        if let Some(bell) = self.bell.as_deref() {
            encode_command(&mut self.out, &[b"SUBSCRIBE", bell]);
            self.owed.push_back(Owner::Subscribe);
            self.subscribe_early = true;
        }
    }

    pub(super) fn queue_handshake(&mut self, args: &[&[u8]]) {
        encode_command(&mut self.out, args);
        self.owed.push_back(Owner::Handshake);
    }
}
