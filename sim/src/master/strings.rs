//! The string commands: `GET`, `SET` (`NX`, `XX`, `PX`, `EX`, `KEEPTTL`, and `IFEQ` where the
//! server has it), `PTTL`, `DEL`, `INCR`, `PEXPIRE`, Valkey's `DELIFEQ` and Redis' `DELEX`.
//! The scripts call the same functions for their `redis.call`s.

use bytes::Bytes;

use super::keyspace::{Entry, Ex, Value, WRONGTYPE};
use super::reply::Reply;
use super::{pttl_of, Master};

pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
pub(crate) const SYNTAX: &str = "ERR syntax error";

/// An integer as Redis' `string2ll` reads it: canonical decimal only (no sign but a leading
/// `-`, no leading zero, no space), within `i64`.
pub(crate) fn parse_i64(b: &[u8]) -> Option<i64> {
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b.strip_prefix(b"-") {
        Some(d) => (true, d),
        None => (false, b),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) || digits.len() > 19 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if neg {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some(v)
}

pub(crate) fn get(m: &mut Master, ex: &mut Ex, key: &[u8]) -> Reply {
    match m.read(ex, key) {
        Some(Entry {
            value: Value::Str(b),
            ..
        }) => Reply::Bulk(b),
        Some(_) => Reply::err(WRONGTYPE),
        None => Reply::Null,
    }
}

/// `MGET`: each key's string value, null for no key or a key of another type.
pub(crate) fn mget(m: &mut Master, ex: &mut Ex, keys: &[&[u8]]) -> Reply {
    Reply::Array(
        keys.iter()
            .map(|k| match get(m, ex, k) {
                Reply::Bulk(b) => Reply::Bulk(b),
                _ => Reply::Null,
            })
            .collect(),
    )
}

pub(crate) fn pttl(m: &mut Master, ex: &mut Ex, key: &[u8]) -> Reply {
    let now = ex.now;
    Reply::Int(m.read_with(ex, key, |e| e.map_or(-2, |e| pttl_of(e, now))))
}

pub(crate) fn del(m: &mut Master, ex: &mut Ex, keys: &[&[u8]]) -> Reply {
    let mut n = 0;
    for key in keys {
        if m.look(ex, key, |e| e.is_some()) && m.remove(ex, key) {
            n += 1;
        }
    }
    Reply::Int(n)
}

/// `INCR key`: the new value, or the error.
pub(crate) fn incr(m: &mut Master, ex: &mut Ex, key: &[u8]) -> Result<i64, String> {
    let old = m.lookup(ex, key);
    let (value, expire_at) = match &old {
        Some(e) => {
            let v = e.value.clone().string()?;
            (parse_i64(&v).ok_or(NOT_AN_INTEGER)?, e.expire_at)
        }
        None => (0, None),
    };
    let new = value
        .checked_add(1)
        .ok_or("ERR increment or decrement would overflow")?;
    let value = Bytes::from(new.to_string());
    m.store(ex, key, Entry::string(value, expire_at));
    Ok(new)
}

/// A relative expiry of `ms` (already multiplied for seconds) from `now`, for `command`.
fn deadline(ms: i64, now: u64, command: &str) -> Result<u64, String> {
    let invalid = || format!("ERR invalid expire time in '{command}' command");
    let now = i64::try_from(now).map_err(|_| invalid())?;
    let at = ms.checked_add(now).ok_or_else(invalid)?;
    u64::try_from(at).map_err(|_| invalid())
}

/// `PEXPIRE key ms`: 1 set (or deleted, for a deadline already past), 0 no key.
pub(crate) fn pexpire(m: &mut Master, ex: &mut Ex, args: &[&[u8]]) -> Result<i64, String> {
    if let Some(opt) = args.get(3) {
        let opt = String::from_utf8_lossy(opt);
        return Err(format!("ERR Unsupported option {opt}"));
    }
    let ms = parse_i64(args[2]).ok_or(NOT_AN_INTEGER)?;
    let at = if ms > 0 {
        Some(deadline(ms, ex.now, "pexpire")?)
    } else {
        None
    };
    let key = args[1];
    let Some(mut e) = m.lookup(ex, key) else {
        return Ok(0);
    };
    match at {
        // A deadline at or before now deletes the key.
        Some(at) if at > ex.now => {
            e.expire_at = Some(at);
            m.store(ex, key, e);
        }
        _ => {
            m.remove(ex, key);
        }
    }
    Ok(1)
}

/// The options of a `SET`.
#[derive(Debug, Default)]
struct SetOpts<'a> {
    nx: bool,
    xx: bool,
    keepttl: bool,
    /// `PX` or `EX` (milliseconds per unit) and its argument.
    expire: Option<(i64, &'a [u8])>,
    ifeq: Option<&'a [u8]>,
}

fn set_opts<'a>(m: &Master, args: &[&'a [u8]]) -> Result<SetOpts<'a>, String> {
    let mut o = SetOpts::default();
    let ifeq_ok = m.profile.server.has_set_ifeq();
    let mut j = 3;
    while j < args.len() {
        // The option in lowercase, on the stack (no option is longer; a longer word is none).
        let mut buf = [0u8; 8];
        let opt: &[u8] = match buf.get_mut(..args[j].len()) {
            Some(low) => {
                low.copy_from_slice(args[j]);
                low.make_ascii_lowercase();
                low
            }
            None => b"?",
        };
        let next = args.get(j + 1);
        let conditional = o.nx || o.xx || o.ifeq.is_some();
        match (opt, next) {
            (b"nx", _) if !conditional => o.nx = true,
            (b"xx", _) if !conditional => o.xx = true,
            (b"keepttl", _) if o.expire.is_none() => o.keepttl = true,
            (b"px" | b"ex", Some(v)) if o.expire.is_none() && !o.keepttl => {
                let unit = if opt == b"px" { 1 } else { 1000 };
                o.expire = Some((unit, *v));
                j += 1;
            }
            (b"ifeq", Some(v)) if ifeq_ok && !conditional => {
                o.ifeq = Some(*v);
                j += 1;
            }
            _ => return Err(SYNTAX.into()),
        }
        j += 1;
    }
    Ok(o)
}

/// `SET key value [NX|XX|IFEQ v] [PX ms|EX s|KEEPTTL]`: `+OK`, or null when the condition
/// does not hold.
pub(crate) fn set(m: &mut Master, ex: &mut Ex, args: &[&[u8]]) -> Result<Reply, String> {
    let o = set_opts(m, args)?;
    let expire_at = match &o.expire {
        None => None,
        Some((unit, v)) => {
            let n = parse_i64(v).ok_or(NOT_AN_INTEGER)?;
            let invalid = || "ERR invalid expire time in 'set' command".to_string();
            if n <= 0 {
                return Err(invalid());
            }
            let ms = n.checked_mul(*unit).ok_or_else(invalid)?;
            Some(deadline(ms, ex.now, "set")?)
        }
    };
    let key = args[1];
    // Whether the condition holds, and the old deadline (for `KEEPTTL`).
    let (holds, old_expire) = m.look(ex, key, |old| {
        let holds = match (&o.ifeq, old) {
            // (A sorted set is never compared: no lock's key holds one.)
            (Some(want), Some(e)) => e.value.as_str().map(|b| &b[..]) == Some(*want),
            (Some(_), None) => false,
            (None, _) => !(o.nx && old.is_some() || o.xx && old.is_none()),
        };
        (holds, old.and_then(|e| e.expire_at))
    });
    if !holds {
        return Ok(Reply::Null);
    }
    let expire_at = match (expire_at, o.keepttl) {
        (None, true) => old_expire,
        (at, _) => at,
    };
    let value = Bytes::copy_from_slice(args[2]);
    m.store(ex, key, Entry::string(value, expire_at));
    Ok(Reply::OK)
}

/// Valkey's `DELIFEQ key value`: 1 deleted, 0 not (no key, or another value).
pub(crate) fn delifeq(m: &mut Master, ex: &mut Ex, key: &[u8], value: &[u8]) -> Reply {
    if m.look(ex, key, |e| {
        e.is_some_and(|e| e.value.as_str().map(|b| &b[..]) == Some(value))
    }) {
        Reply::Int(i64::from(m.remove(ex, key)))
    } else {
        Reply::Int(0)
    }
}

/// Redis' `DELEX key [IFEQ value]`: 1 deleted, 0 not. Its other conditions (`IFNE`,
/// `IFDEQ`, `IFDNE`) are not simulated.
pub(crate) fn delex(m: &mut Master, ex: &mut Ex, args: &[&[u8]]) -> Result<Reply, String> {
    let want = match args {
        [_, _] => None,
        [_, _, cond, v] if cond.eq_ignore_ascii_case(b"ifeq") => Some(v),
        _ => return Err(SYNTAX.into()),
    };
    let key = args[1];
    Ok(match (m.lookup(ex, key), want) {
        (Some(e), Some(v)) if e.value.as_str().map(|b| &b[..]) != Some(*v) => Reply::Int(0),
        (Some(_), _) => Reply::Int(i64::from(m.remove(ex, key))),
        (None, _) => Reply::Int(0),
    })
}
