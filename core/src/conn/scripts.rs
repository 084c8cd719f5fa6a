//! A connection's script calls: loading the scripts or the function library, and sending a
//! refused call again in the next form of its chain (see `crate::forms`).

use resp::{encode_command, Frame};

use super::{Again, Conn, Owner};
use crate::forms::{self, Sent};

impl<T> Conn<T> {
    /// Queues `FUNCTION LOAD` of the function library (an error reply, "already exists"
    /// among them, is kept for explanations and otherwise ignored).
    pub(super) fn load_functions(&mut self) {
        encode_command(
            &mut self.out,
            &[b"FUNCTION", b"LOAD", crate::script::LIBRARY.as_bytes()],
        );
        self.owed.push_back(Owner::Preload);
    }

    /// Why loading our scripts or functions last failed on this connection, if it did (a
    /// server error, such as an ACL's `NOPERM`).
    pub fn load_error(&self) -> Option<&str> {
        self.load_error.as_deref()
    }

    /// Queues `SCRIPT LOAD` of every script (or, in function mode, `FUNCTION LOAD` of the
    /// library): on every new connection (a restarted server has lost them), and when a late
    /// `NOSCRIPT` shows a server's cache was flushed.
    pub fn reload_scripts(&mut self) {
        if self.forms.functions() {
            return self.load_functions();
        }
        for (_, script) in crate::script::ALL {
            encode_command(&mut self.out, &[b"SCRIPT", b"LOAD", script.as_bytes()]);
            self.owed.push_back(Owner::Preload);
        }
        // Fair mode's too: a claim is an acquisition, which a `NOSCRIPT` sends again only
        // while its round waits for the node (a claim decided without this node would leave
        // the waiter in this node's line).
        if self.bell.is_some() {
            for (_, script) in crate::script::FAIR {
                encode_command(&mut self.out, &[b"SCRIPT", b"LOAD", script.as_bytes()]);
                self.owed.push_back(Owner::Preload);
            }
        }
    }

    /// The form to send the script call whose copy heads [`Conn::scripted`] (`len` bytes)
    /// again in, after the server answered `reply` to it in the form `sent`; `None` to hand
    /// the reply over.
    pub(super) fn resend_form(&mut self, len: usize, sent: Sent, reply: &Frame) -> Option<Sent> {
        let alt = forms::alt_of(&self.scripted[..len]);
        self.forms.after_alt(sent, reply, alt)
    }

    /// After a `NOSCRIPT` (the script cache was flushed) answered by the `EVAL` form: counted,
    /// and every script loaded again, whether or not the command itself goes again.
    pub(super) fn after_noscript(&mut self, sent: Sent, next: Sent) {
        if sent == Sent::Evalsha && next == Sent::Eval {
            self.notes.push(super::Note::ScriptFallback);
            if !self.forms.functions() {
                self.reload_scripts();
            }
        }
    }

    /// Sends a script call again in the form `again` says, its reply owed to `tag` as before.
    pub(super) fn write_again(&mut self, tag: T, again: Again) {
        let Again {
            form,
            copy,
            at,
            resends,
        } = again;
        let written = forms::write_as(&copy, form, &mut self.out);
        debug_assert!(written, "a form chosen for a command it has");
        self.scripted.extend_from_slice(&copy);
        self.unsealed = true;
        self.owed.push_back(Owner::Op(
            tag,
            at,
            copy.len(),
            form,
            resends.saturating_add(1),
        ));
    }

    /// Sends an acquisition again (see `Reply::again`): the engine calls this only while
    /// its round still waits for this node, when nothing of the same operation can be queued
    /// behind it yet.
    pub fn send_again(&mut self, tag: T, again: Again) {
        self.write_again(tag, again);
    }
}
