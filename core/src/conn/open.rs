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
        if wakeups {
            encode_command(&mut self.out, &[b"HELLO", b"3"]);
            self.owed.push_back(Owner::Hello { resp3: true });
            // The bell is subscribed before any command of the driver's runs: a fair
            // waiter's first try joins the line, and a release that rang the line before the
            // server had the subscription would take the waiter for a gone process. Sent
            // ahead of the `HELLO` reply where the server has not refused `HELLO 3` before
            // (a refusal then spends the connection: see `take_reply`).
            if let Some(bell) = self.bell.as_deref().filter(|_| !self.hello3_refused) {
                encode_command(&mut self.out, &[b"SUBSCRIBE", bell]);
                self.owed.push_back(Owner::Subscribe);
                self.subscribe_early = true;
            }
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

    pub(super) fn queue_handshake(&mut self, args: &[&[u8]]) {
        encode_command(&mut self.out, args);
        self.owed.push_back(Owner::Handshake);
    }
}
