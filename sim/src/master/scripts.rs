//! `EVAL`, `EVALSHA`, `FCALL`, `SCRIPT LOAD|FLUSH` and `FUNCTION LOAD|FLUSH`, and the
//! project's scripts run natively: each does the `redis.call`s its Lua does, in the same
//! order, through the same commands (so expiry, invalidations and errors are the commands'
//! own), and returns what the Lua returns.
//!
//! As in Redis, a script's writes before an error stay; a failed `redis.call` becomes the
//! script's error, named as the server names it (digest or function, and the line).

use super::keyspace::Ex;
use super::reply::Reply;
use super::strings::{self, parse_i64, NOT_AN_INTEGER};
use super::Master;
use crate::profile::ScriptName;
use crate::scripts::{by_digest, digest_of, parse_library, Function, Script};

/// A loaded function library: its functions, by name, with the script each runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    /// The functions, in the order the code registers them.
    pub functions: Vec<Function>,
}

/// Why a script stopped: a `redis.call` failed (its error, at a line of the script), or it
/// was called with arguments the project never sends, which this simulation does not run.
pub(super) enum Stop {
    Call(String, u32),
    Unsimulated,
}

/// A command's arguments, each a slice of its bytes.
type Args<'a> = &'a [&'a [u8]];

/// The keys and arguments of `EVAL`/`EVALSHA`/`FCALL` (`args[2]` is the key count).
fn keys_and_args<'a>(args: Args<'a>, bad_count: &str) -> Result<(Args<'a>, Args<'a>), Reply> {
    let n = parse_i64(args[2]).ok_or_else(|| Reply::err(bad_count))?;
    let rest = &args[3..];
    if n > i64::try_from(rest.len()).unwrap_or(i64::MAX) {
        return Err(Reply::err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let n = usize::try_from(n).map_err(|_| Reply::err("ERR Number of keys can't be negative"))?;
    Ok(rest.split_at(n))
}

pub(crate) fn eval<'a>(m: &mut Master, ex: &mut Ex<'a>, args: &'a [&'a [u8]]) -> Reply {
    let (keys, argv) = match keys_and_args(args, NOT_AN_INTEGER) {
        Ok(ka) => ka,
        Err(r) => return r,
    };
    let sha = digest_of(args[1]);
    let script = cache(m, &sha);
    run(m, ex, script, ScriptName::Eval(sha.as_bytes()), keys, argv)
}

pub(crate) fn evalsha<'a>(m: &mut Master, ex: &mut Ex<'a>, args: &'a [&'a [u8]]) -> Reply {
    let (keys, argv) = match keys_and_args(args, NOT_AN_INTEGER) {
        Ok(ka) => ka,
        Err(r) => return r,
    };
    // A digest is looked up as written in lowercase, without a copy when it has a digest's
    // length (the usual case), and as bytes (the cache's keys are).
    let mut buf: [u8; 40];
    let lowered;
    let sha: &[u8] = match <[u8; 40]>::try_from(args[1]) {
        Ok(raw) => {
            buf = raw;
            buf.make_ascii_lowercase();
            &buf
        }
        Err(_) => {
            lowered = String::from_utf8_lossy(args[1]).to_ascii_lowercase();
            lowered.as_bytes()
        }
    };
    match m.scripts.get(sha) {
        Some(script) => {
            let script = *script;
            run(m, ex, script, ScriptName::Eval(sha), keys, argv)
        }
        None => Reply::err(m.profile.server.noscript()),
    }
}

pub(crate) fn fcall<'a>(m: &mut Master, ex: &mut Ex<'a>, args: &'a [&'a [u8]]) -> Reply {
    let found = m.libraries.values().find_map(|lib| {
        lib.functions
            .iter()
            .find(|f| f.name.as_bytes().eq_ignore_ascii_case(args[1]))
    });
    let Some(&Function {
        ref name,
        script,
        lines,
    }) = found
    else {
        return Reply::err("ERR Function not found");
    };
    // The function's name as registered, for its errors: the one called, mostly.
    let fname: std::borrow::Cow<'_, str> = match std::str::from_utf8(args[1]) {
        Ok(called) if called == name => std::borrow::Cow::Borrowed(called),
        _ => std::borrow::Cow::Owned(name.clone()),
    };
    let (keys, argv) = match keys_and_args(args, "ERR Bad number of keys provided") {
        Ok(ka) => ka,
        Err(r) => return r,
    };
    run(
        m,
        ex,
        Some(script),
        ScriptName::Function(&fname, lines),
        keys,
        argv,
    )
}

/// `SCRIPT LOAD text` (its digest; cached whatever the text) and `SCRIPT FLUSH [ASYNC|SYNC]`.
pub(crate) fn script(m: &mut Master, sub: &str, args: &[&[u8]]) -> Reply {
    match sub {
        "load" => {
            let sha = digest_of(args[2]);
            cache(m, &sha);
            match sha {
                std::borrow::Cow::Borrowed(sha) => Reply::text(sha),
                std::borrow::Cow::Owned(sha) => Reply::bulk(sha),
            }
        }
        _ => {
            if !flush_mode_ok(args) {
                return Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
            }
            m.scripts.clear();
            Reply::OK
        }
    }
}

/// Puts the script of digest `sha` in the cache (once: the digest always names the same
/// script) and returns it.
fn cache(m: &mut Master, sha: &str) -> Option<Script> {
    match m.scripts.get(sha.as_bytes()) {
        Some(script) => *script,
        None => {
            let script = by_digest(sha);
            m.scripts.insert(sha.as_bytes().into(), script);
            script
        }
    }
}

fn flush_mode_ok(args: &[&[u8]]) -> bool {
    match args {
        [_, _] => true,
        [_, _, mode] => mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync"),
        _ => false,
    }
}

/// `FUNCTION LOAD [REPLACE] code` and `FUNCTION FLUSH [ASYNC|SYNC]`.
pub(crate) fn function(m: &mut Master, sub: &str, args: &[&[u8]]) -> Reply {
    if sub == "flush" {
        if !flush_mode_ok(args) {
            return Reply::err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
        }
        m.libraries.clear();
        return Reply::OK;
    }
    let mut replace = false;
    for opt in &args[2..args.len() - 1] {
        if !opt.eq_ignore_ascii_case(b"replace") {
            let opt = String::from_utf8_lossy(opt);
            return Reply::err(format!("ERR Unknown option given: {opt}"));
        }
        replace = true;
    }
    let code = args[args.len() - 1];
    let (name, functions) = match parsed(code) {
        Ok(lib) => lib,
        Err(why) => return Reply::err(format!("ERR {why}")),
    };
    if m.libraries.contains_key(&name) && !replace {
        return Reply::err(format!("ERR Library '{name}' already exists"));
    }
    for (other, lib) in &m.libraries {
        if *other == name {
            continue;
        }
        if let Some(f) = lib.functions.iter().find(|f| {
            functions
                .iter()
                .any(|g| g.name.eq_ignore_ascii_case(&f.name))
        }) {
            return Reply::err(format!("ERR Function {} already exists", f.name));
        }
    }
    m.libraries.insert(name.clone(), Library { functions });
    Reply::bulk(name)
}

/// [`parse_library`] of `code`, remembered per thread for the last few texts: every client
/// connection loads the same library, and parsing it cost 8% of a simulated run.
fn parsed(code: &[u8]) -> Result<(String, Vec<Function>), String> {
    type Parsed = (Box<[u8]>, Result<(String, Vec<Function>), String>);
    thread_local! {
        static SEEN: std::cell::RefCell<Vec<Parsed>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if let Some((_, lib)) = seen.iter().find(|(c, _)| **c == *code) {
            return lib.clone();
        }
        let lib = parse_library(code);
        if seen.len() >= 4 {
            drop(seen.remove(0));
        }
        seen.push((code.into(), lib.clone()));
        lib
    })
}

/// Runs `script` (`None`: a text not simulated) named `by`, and returns its reply.
fn run<'a>(
    m: &mut Master,
    ex: &mut Ex<'a>,
    script: Option<Script>,
    by: ScriptName<'_>,
    keys: &'a [&'a [u8]],
    argv: &[&[u8]],
) -> Reply {
    ex.script_keys = Some(keys);
    let int = |n| Reply::Int(lua_number(n));
    let result = match script {
        Some(Script::Acquire) => acquire(m, ex, keys, argv).map(int),
        Some(Script::Release) => release(m, ex, keys, argv).map(int),
        Some(Script::Extend) => extend(m, ex, keys, argv).map(int),
        Some(Script::Fence) => fence(m, ex, keys, argv).map(int),
        Some(Script::Permit) => permit(m, ex, keys, argv).map(int),
        Some(Script::Slots) => Ok(slots(m, ex, keys)),
        Some(fair) => super::fair_scripts::run(m, ex, fair, keys, argv),
        None => Err(Stop::Unsimulated),
    };
    ex.script_keys = None;
    match result {
        Ok(reply) => reply,
        Err(Stop::Call(msg, line)) => Reply::Error(m.profile.server.script_error(&msg, &by, line)),
        Err(Stop::Unsimulated) => Reply::err("ERR sim: a script or arguments not simulated"),
    }
}

/// What an integer becomes on its way through Lua and back: a double (exact to 2^53), then
/// converted as x86-64 does (`cvttsd2si`: out of range gives `i64::MIN`).
fn lua_number(n: i64) -> i64 {
    let f = n as f64;
    if f >= 9_223_372_036_854_775_808.0 {
        i64::MIN
    } else {
        f as i64
    }
}

/// What a script's `GET` of `key` found, compared with `want`.
enum Got {
    /// `false`: no key (or not a string).
    Nothing,
    /// The value is `want`.
    Same,
    /// Another value.
    Other,
}

/// `GET` from a script, the value compared with `want` (without a copy of it; no `want`: no
/// value is the same).
fn script_get(m: &mut Master, ex: &mut Ex, key: &[u8], want: Option<&[u8]>) -> Got {
    // A key of another type is another's (`release.lua` reads it with `pcall`).
    m.read_with(ex, key, |e| match e.map(|e| e.value.as_str()) {
        None => Got::Nothing,
        Some(Some(v)) if Some(&v[..]) == want => Got::Same,
        Some(_) => Got::Other,
    })
}

/// `acquire.lua`.
fn acquire(m: &mut Master, ex: &mut Ex, keys: &[&[u8]], argv: &[&[u8]]) -> Result<i64, Stop> {
    let [token, ttl, n, ..] = argv else {
        return Err(Stop::Unsimulated);
    };
    let n = parse_i64(n)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n <= keys.len())
        .ok_or(Stop::Unsimulated)?;
    for (i, key) in keys[..n].iter().enumerate() {
        let set: [&[u8]; 6] = [b"SET", key, token, b"NX", b"PX", ttl];
        match strings::set(m, ex, &set) {
            Ok(Reply::Null) => {
                for k in &keys[..i] {
                    strings::del(m, ex, std::slice::from_ref(k));
                }
                return Ok(-i64::try_from(i).unwrap_or(i64::MAX) - 1);
            }
            Ok(_) => {}
            Err(msg) => return Err(Stop::Call(msg, 3)),
        }
    }
    match keys.get(n) {
        Some(counter) => strings::incr(m, ex, counter).map_err(|msg| Stop::Call(msg, 8)),
        None => Ok(0),
    }
}

/// `permit.lua`: the first key that a `SET NX PX` takes, by its index from 1; `0` when
/// every key is held.
fn permit(m: &mut Master, ex: &mut Ex, keys: &[&[u8]], argv: &[&[u8]]) -> Result<i64, Stop> {
    let [token, ttl, ..] = argv else {
        return Err(Stop::Unsimulated);
    };
    for (i, key) in keys.iter().enumerate() {
        let set: [&[u8]; 6] = [b"SET", key, token, b"NX", b"PX", ttl];
        match strings::set(m, ex, &set) {
            Ok(Reply::Null) => {}
            Ok(_) => return Ok(i64::try_from(i).unwrap_or(i64::MAX) + 1),
            Err(msg) => return Err(Stop::Call(msg, 2)),
        }
    }
    Ok(0)
}

/// `slots.lua`: `EXISTS` of each key, `0` or `1`.
fn slots(m: &mut Master, ex: &mut Ex, keys: &[&[u8]]) -> Reply {
    Reply::Array(
        keys.iter()
            .map(|k| Reply::Int(i64::from(m.read(ex, k).is_some())))
            .collect(),
    )
}

/// `release.lua`.
fn release(m: &mut Master, ex: &mut Ex, keys: &[&[u8]], argv: &[&[u8]]) -> Result<i64, Stop> {
    let token = argv.first().copied();
    let (mut held, mut gone) = (false, false);
    for key in keys {
        match script_get(m, ex, key, token) {
            Got::Same => {
                strings::del(m, ex, std::slice::from_ref(key));
            }
            Got::Nothing => gone = true,
            Got::Other => held = true,
        }
    }
    Ok(if held {
        0
    } else if gone {
        -1
    } else {
        1
    })
}

/// `extend.lua`.
fn extend(m: &mut Master, ex: &mut Ex, keys: &[&[u8]], argv: &[&[u8]]) -> Result<i64, Stop> {
    let [token, ttl, ..] = argv else {
        return Err(Stop::Unsimulated);
    };
    let mut gone = false;
    for key in keys {
        match script_get(m, ex, key, Some(token)) {
            Got::Nothing => gone = true,
            Got::Other => return Ok(0),
            Got::Same => {}
        }
    }
    if gone {
        return Ok(-1);
    }
    for key in keys {
        let call: [&[u8]; 3] = [b"PEXPIRE", key, ttl];
        strings::pexpire(m, ex, &call).map_err(|msg| Stop::Call(msg, 7))?;
    }
    Ok(1)
}

/// `fence.lua`.
fn fence(m: &mut Master, ex: &mut Ex, keys: &[&[u8]], argv: &[&[u8]]) -> Result<i64, Stop> {
    let ([token, t, ..], Some((counter, resources))) = (argv, keys.split_last()) else {
        return Err(Stop::Unsimulated);
    };
    let mut gone = false;
    for key in resources {
        match script_get(m, ex, key, Some(token)) {
            Got::Nothing => gone = true,
            Got::Other => return Ok(0),
            Got::Same => {}
        }
    }
    if gone {
        return Ok(-1);
    }
    let raise = m.read_with(ex, counter, |e| match e.and_then(|e| e.value.as_str()) {
        None => true,
        Some(c) => c.len() < t.len() || (c.len() == t.len() && c[..] < **t),
    });
    if raise {
        let call: [&[u8]; 3] = [b"SET", counter, t];
        strings::set(m, ex, &call).map_err(|msg| Stop::Call(msg, 9))?;
    }
    Ok(1)
}
