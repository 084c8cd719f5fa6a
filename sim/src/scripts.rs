//! The project's Lua scripts as the simulated master knows them: by the SHA-1 of their text.
//!
//! The master runs no Lua. A script sent by `EVAL` (or loaded by `SCRIPT LOAD`, or found in a
//! function library's body) is recognised by its digest and its effect is computed natively
//! (`master/scripts.rs`), with the same keys read and written in the same order as the Lua
//! does. The digests below are those of the core's texts (`redlock_mux::script`); a test
//! checks them against the core's constants and against `SCRIPT LOAD` on a real server, so a
//! change to a script that the simulation does not follow fails there.

use crate::sha1::sha1_hex;

/// One of the project's scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Script {
    /// `acquire.lua`: `SET NX PX` each key, all or nothing; `INCR` the counter when fenced.
    Acquire,
    /// `release.lua`: delete every key that holds the token.
    Release,
    /// `extend.lua`: `PEXPIRE` every key, if all hold the token.
    Extend,
    /// `fence.lua`: raise the counter to a value, if every key holds the token.
    Fence,
    /// `permit.lua`: `SET NX PX` the first free key, and say which.
    Permit,
    /// `slots.lua`: `EXISTS` of each key.
    Slots,
    /// Fair mode's `ring.lua` + `wait.lua`: join the lines, read the `PTTL`s.
    Wait,
    /// Fair mode's `ring.lua` + `claim.lua`: a waiter's try.
    Claim,
    /// Fair mode's `ring.lua` + `handoff.lua`: a release that rings the line's head.
    Handoff,
    /// Fair mode's `ring.lua` + `leave.lua`: leave the lines, pass a reservation on.
    Leave,
    /// Fair mode's `ring.lua` + `enter.lua` + `wait.lua`: a first try that joins the line
    /// when refused.
    Enter,
}

impl Script {
    /// Whether it is one of fair mode's scripts (whose text starts with `ring.lua`).
    pub fn is_fair(self) -> bool {
        !matches!(
            self,
            Script::Acquire
                | Script::Release
                | Script::Extend
                | Script::Fence
                | Script::Permit
                | Script::Slots
        )
    }
}

/// The digests of the scripts the simulation runs, as the core's `script::ALL` lists them:
/// acquire, release, extend, fence, permit, slots.
pub const KNOWN: [(&str, Script); 6] = [
    ("fc1f70ab657ed9339b8f3a9f2484c8bf19d328ae", Script::Acquire),
    ("2685a2a012ded70395ffcfd030cef0910dd01b3d", Script::Release),
    ("cfba9b3380ab0e554f01a90003950e9371d1e5f9", Script::Extend),
    ("b3c3434d34a507cffe46e90f5480f2804dc5906f", Script::Fence),
    ("62a68ac92e5bdac6e42c927f9ed24ebcd46a4cbf", Script::Permit),
    ("a0f7c91681e37b3be6cb08afb20a616932f5957b", Script::Slots),
];

/// The digests of fair mode's scripts, as the core's `script::FAIR` lists them: wait, claim,
/// hand-off, leave, enter.
pub const FAIR: [(&str, Script); 5] = [
    ("0ffb0a0cfd4fb9c7e3aaf5140dc19dccc7437cff", Script::Wait),
    ("580edb34a32203496cefbfd714ba14aedaf57e93", Script::Claim),
    ("fd79924912bafdb90c3b4889dfce20244ed9134c", Script::Handoff),
    ("74481e5dbfa725e748c5816bdd915b8f7af438cc", Script::Leave),
    ("4fe9bfcc45e84fbbc4e631baa4f3e7b506f1565b", Script::Enter),
];

/// The script a digest (lowercase hex) names, if the simulation knows it.
pub fn by_digest(sha: &str) -> Option<Script> {
    KNOWN
        .iter()
        .chain(FAIR.iter())
        .find(|(d, _)| *d == sha)
        .map(|(_, s)| *s)
}

/// The script `text` is, if the simulation knows it.
pub fn by_text(text: &[u8]) -> Option<Script> {
    by_digest(&digest(text))
}

/// The SHA-1 of `text` in lowercase hex. The core's own script texts, which clients send on
/// every new connection, are recognised by comparing bytes and given the digest the core
/// states for them (its tests hold each to the text); any other text is hashed.
pub fn digest(text: &[u8]) -> String {
    digest_of(text).into_owned()
}

/// [`digest`], lent where it is one of the core's own (no string made for it).
pub fn digest_of(text: &[u8]) -> std::borrow::Cow<'static, str> {
    use redlock_core::script as core;
    let known = [
        (core::ACQUIRE, core::ACQUIRE_SHA1),
        (core::RELEASE, core::RELEASE_SHA1),
        (core::EXTEND, core::EXTEND_SHA1),
        (core::FENCE, core::FENCE_SHA1),
        (core::PERMIT, core::PERMIT_SHA1),
        (core::SLOTS, core::SLOTS_SHA1),
        (core::WAIT, core::WAIT_SHA1),
        (core::CLAIM, core::CLAIM_SHA1),
        (core::HANDOFF, core::HANDOFF_SHA1),
        (core::LEAVE, core::LEAVE_SHA1),
        (core::ENTER, core::ENTER_SHA1),
    ];
    match known.iter().find(|(t, _)| t.as_bytes() == text) {
        Some((_, sha)) => std::borrow::Cow::Borrowed(sha),
        None => std::borrow::Cow::Owned(sha1_hex(text)),
    }
}

/// A function of a loaded library: its name, the script its body is, and where its lines
/// sit in the library's text (a failed `redis.call` is reported at its line there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The function's name, as registered.
    pub name: String,
    /// The script its body runs.
    pub script: Script,
    /// Where its lines are in the library's text.
    pub lines: Lines,
}

/// Where a function's lines are in its library's text: line `l` of its body is the library's
/// line `body + l`, and, for a fair script (whose lines count `ring.lua`'s first), line `l`
/// of `ring.lua` (shared by the library's fair functions) is the library's line `ring + l`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lines {
    /// The library line of the function's registration (its body starts on the next).
    pub body: u32,
    /// For a fair function: the library line before `ring.lua`'s first.
    pub ring: Option<u32>,
}

/// How many lines `ring.lua` has, ahead of each fair script's own.
pub fn ring_lines() -> u32 {
    redlock_core::script::RING.lines().count() as u32
}

impl Lines {
    /// The library line of line `line` of the script (counted as in its `EVAL` text).
    pub fn of(self, line: u32) -> u32 {
        match self.ring {
            Some(ring) if line <= ring_lines() => ring + line,
            Some(_) => self.body + line - ring_lines(),
            None => self.body + line,
        }
    }
}

/// A function library's name and its functions, from its code (`FUNCTION LOAD`), in the
/// shape the core writes: a `#!lua name=<name>` line, then for each function
/// `redis.register_function('<fname>', function(KEYS, ARGV)\n<body>end)\n`, each body one of
/// the known scripts, or, after `ring.lua`'s text at the library's top level, the body of a
/// fair script without it. `Err` says what is not of that shape.
pub fn parse_library(code: &[u8]) -> Result<(String, Vec<Function>), String> {
    const REGISTER: &str = "redis.register_function('";
    const OPEN: &str = "', function(KEYS, ARGV)\n";
    const CLOSE: &str = "end)\n";
    let ring_text = redlock_core::script::RING;
    let code = std::str::from_utf8(code).map_err(|_| "library code is not UTF-8".to_string())?;
    let (first, mut rest) = code.split_once('\n').unwrap_or((code, ""));
    let name = first
        .strip_prefix("#!lua name=")
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .ok_or("Missing library metadata")?
        .to_string();
    let mut functions = Vec::new();
    // The library line `rest` starts on, less one.
    let mut line = 1u32;
    let mut ring = None;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix(ring_text) {
            ring = Some(line);
            line += ring_lines();
            rest = after;
            continue;
        }
        let after = rest
            .strip_prefix(REGISTER)
            .ok_or("library code of a shape the simulation does not run")?;
        let (fname, after) = after
            .split_once(OPEN)
            .ok_or("a function of a shape the simulation does not run")?;
        // The body ends at the next registration, or `ring.lua`'s text, or the end.
        let end = [after.find(REGISTER), after.find(ring_text)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(after.len());
        let body = after[..end]
            .strip_suffix(CLOSE)
            .ok_or("a function body the simulation does not run")?;
        let own = by_text(body.as_bytes()).filter(|s| !s.is_fair());
        let (script, ring) = match (own, ring) {
            (Some(s), _) => (s, None),
            (None, Some(r)) => {
                let whole = format!("{ring_text}{body}");
                let s = by_text(whole.as_bytes()).filter(|s| s.is_fair());
                (
                    s.ok_or_else(|| {
                        format!("function {fname}: a body the simulation does not run")
                    })?,
                    Some(r),
                )
            }
            (None, None) => {
                return Err(format!(
                    "function {fname}: a body the simulation does not run"
                ))
            }
        };
        functions.push(Function {
            name: fname.to_string(),
            script,
            lines: Lines {
                body: line + 1,
                ring,
            },
        });
        line += 1 + body.lines().count() as u32 + 1;
        rest = &after[end..];
    }
    Ok((name, functions))
}
