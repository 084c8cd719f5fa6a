//! Sorted sets, as fair mode's lines use them: `ZADD` (`NX`, `XX`, `GT`, `LT`, `CH`; not
//! `INCR`), `ZRANGE` by index (`WITHSCORES`), `ZREM`, `ZSCORE`, `ZCARD`, as Redis 7.0 answers
//! them. The fair scripts (`fair_scripts.rs`) call the same functions for their `redis.call`s,
//! with their arguments written as Lua writes them (`%.17g` for a number).
//!
//! A write that changes nothing (a `ZADD NX` of a member already there, a `ZREM` of one that is
//! not) invalidates nothing, as Redis signals a key modified only when it changed; a set left
//! empty is deleted.

use bytes::Bytes;

use super::keyspace::{Entry, Ex, Value, WRONGTYPE};
use super::reply::Reply;
use super::strings::{parse_i64, NOT_AN_INTEGER, SYNTAX};
use super::Master;

/// A sorted set: members with their scores, ordered by score, then by member (bytewise), as
/// Redis orders them. Small (a line of waiters), so a sorted vector.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Zset {
    items: Vec<(f64, Bytes)>,
}

impl Zset {
    fn find(&self, member: &[u8]) -> Option<usize> {
        self.items.iter().position(|(_, m)| m.as_ref() == member)
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        self.find(member).map(|i| self.items[i].0)
    }

    fn insert(&mut self, score: f64, member: Bytes) {
        if let Some(i) = self.find(&member) {
            self.items.remove(i);
        }
        let at = self.items.partition_point(|(s, m)| {
            s.total_cmp(&score).then_with(|| m[..].cmp(&member[..])) == std::cmp::Ordering::Less
        });
        self.items.insert(at, (score, member));
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.find(member) {
            Some(i) => {
                self.items.remove(i);
                true
            }
            None => false,
        }
    }

    /// The members from rank `start` to `stop` (negative: from the end), as `ZRANGE` takes them.
    fn range(&self, start: i64, stop: i64) -> &[(f64, Bytes)] {
        let len = i64::try_from(self.items.len()).unwrap_or(i64::MAX);
        let start = if start < 0 { len + start } else { start }.max(0);
        let stop = if stop < 0 { len + stop } else { stop };
        if start > stop || start >= len {
            return &[];
        }
        let stop = stop.min(len - 1);
        &self.items[start as usize..=stop as usize]
    }
}

/// A number as Lua's `%.17g` and Redis' RESP2 double write it.
pub(crate) fn fmt_g17(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.into();
    }
    if d == d.trunc() && d.abs() < 1e17 {
        return if d == 0.0 && d.is_sign_negative() {
            "-0".into()
        } else {
            format!("{}", d as i64)
        };
    }
    let sci = format!("{d:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..17).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{:.*}", (16 - exp) as usize, d))
    }
}

/// A score as Redis reads one (`strtod`, the whole text, no leading space, no NaN, no overflow).
fn parse_score(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    let named_inf = s
        .as_bytes()
        .windows(3)
        .any(|w| w.eq_ignore_ascii_case(b"inf"));
    (!v.is_nan() && (v.is_finite() || named_inf)).then_some(v)
}

const NOT_A_FLOAT: &str = "ERR value is not a valid float";

/// What `f` makes of the sorted set at `key` (expired first), read by a command (remembered
/// for tracking), without a copy of the set: `f(None)` no key, or `WRONGTYPE`.
fn with_zset<R>(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
    f: impl FnOnce(Option<&Zset>) -> R,
) -> Result<R, String> {
    m.read_with(ex, key, |e| match e.map(|e| &e.value) {
        None => Ok(f(None)),
        Some(Value::Zset(z)) => Ok(f(Some(z))),
        Some(Value::Str(_)) => Err(WRONGTYPE.into()),
    })
}

/// The sorted set at `key` (expired first), for a command that may write it, with its deadline.
fn write_zset(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
) -> Result<Option<(Zset, Option<u64>)>, String> {
    match m.lookup(ex, key) {
        None => Ok(None),
        Some(Entry {
            value: Value::Zset(z),
            expire_at,
        }) => Ok(Some((z, expire_at))),
        Some(_) => Err(WRONGTYPE.into()),
    }
}

/// `ZADD key [NX|XX] [GT|LT] [CH] score member [score member ...]`: how many were added (or
/// changed, with `CH`). `INCR` is not simulated (the core never sends it).
pub(crate) fn zadd(m: &mut Master, ex: &mut Ex, args: &[&[u8]]) -> Result<Reply, String> {
    let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
    let mut j = 2;
    while j < args.len() {
        // (Compared in any case, without a lowercase copy.)
        let is = |word: &[u8]| args[j].eq_ignore_ascii_case(word);
        if is(b"nx") {
            nx = true;
        } else if is(b"xx") {
            xx = true;
        } else if is(b"gt") {
            gt = true;
        } else if is(b"lt") {
            lt = true;
        } else if is(b"ch") {
            ch = true;
        } else if is(b"incr") {
            return Err("ERR sim: ZADD INCR is not simulated".into());
        } else {
            break;
        }
        j += 1;
    }
    let pairs = &args[j..];
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(SYNTAX.into());
    }
    if nx && xx {
        return Err("ERR XX and NX options at the same time are not compatible".into());
    }
    if ((gt || lt) && nx) || (gt && lt) {
        return Err("ERR GT, LT, and/or NX options at the same time are not compatible".into());
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        scores.push(parse_score(p[0]).ok_or(NOT_A_FLOAT)?);
    }
    let key = args[1];
    let (mut z, expire_at) = match write_zset(m, ex, key)? {
        Some(found) => found,
        None if xx => return Ok(Reply::Int(0)),
        None => (Zset::default(), None),
    };
    let (mut added, mut updated) = (0, 0);
    for (p, &score) in pairs.chunks(2).zip(&scores) {
        let member = p[1];
        match z.score(member) {
            None if xx => {}
            None => {
                z.insert(score, Bytes::copy_from_slice(member));
                added += 1;
            }
            Some(_) if nx => {}
            Some(cur) if (gt && score <= cur) || (lt && score >= cur) => {}
            Some(cur) if cur != score => {
                z.insert(score, Bytes::copy_from_slice(member));
                updated += 1;
            }
            Some(_) => {}
        }
    }
    if added + updated > 0 {
        m.store(
            ex,
            key,
            Entry {
                value: Value::Zset(z),
                expire_at,
            },
        );
    }
    Ok(Reply::Int(if ch { added + updated } else { added }))
}

/// `ZRANK key member`: the member's rank, if it is there (for the scripts).
pub(crate) fn rank(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
    member: &[u8],
) -> Result<Option<usize>, String> {
    with_zset(m, ex, key, |z| z.and_then(|z| z.find(member)))
}

/// `ZRANGE key start stop [WITHSCORES]` by index: `(member, score)` pairs (for the scripts).
pub(crate) fn range(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
    start: &[u8],
    stop: &[u8],
) -> Result<Vec<(Bytes, f64)>, String> {
    let start = parse_i64(start).ok_or(NOT_AN_INTEGER)?;
    let stop = parse_i64(stop).ok_or(NOT_AN_INTEGER)?;
    with_zset(m, ex, key, |z| {
        z.map_or_else(Vec::new, |z| {
            z.range(start, stop)
                .iter()
                .map(|(s, member)| (member.clone(), *s))
                .collect()
        })
    })
}

/// `ZRANGE key start stop [WITHSCORES]`: members, with their scores as doubles (RESP3: one
/// pair per member; RESP2: flat, the scores as strings). Its other forms (`BYSCORE`, `BYLEX`,
/// `REV`, `LIMIT`) are not simulated.
pub(crate) fn zrange(m: &mut Master, ex: &mut Ex, args: &[&[u8]]) -> Result<Reply, String> {
    let mut withscores = false;
    for opt in &args[4..] {
        if opt.eq_ignore_ascii_case(b"withscores") {
            withscores = true;
        } else {
            return Err("ERR sim: ZRANGE options but WITHSCORES are not simulated".into());
        }
    }
    let items = range(m, ex, args[1], args[2], args[3])?;
    let resp3 = m.conns.get(&ex.conn).is_some_and(|c| c.resp3);
    let mut out = Vec::new();
    for (member, score) in items {
        match (withscores, resp3) {
            (false, _) => out.push(Reply::Bulk(member)),
            (true, true) => out.push(Reply::Array(vec![
                Reply::Bulk(member),
                Reply::Double(score),
            ])),
            (true, false) => {
                out.push(Reply::Bulk(member));
                out.push(Reply::Double(score));
            }
        }
    }
    Ok(Reply::Array(out))
}

/// `ZREM key member...`: how many it removed.
pub(crate) fn zrem(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
    members: &[&[u8]],
) -> Result<i64, String> {
    let Some((mut z, expire_at)) = write_zset(m, ex, key)? else {
        return Ok(0);
    };
    let mut removed = 0;
    for member in members {
        if z.remove(member) {
            removed += 1;
        }
        if z.items.is_empty() {
            break;
        }
    }
    if z.items.is_empty() {
        m.remove(ex, key);
    } else if removed > 0 {
        m.store(
            ex,
            key,
            Entry {
                value: Value::Zset(z),
                expire_at,
            },
        );
    }
    Ok(removed)
}

/// `ZSCORE key member`: its score, if it is there.
pub(crate) fn score(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
    member: &[u8],
) -> Result<Option<f64>, String> {
    with_zset(m, ex, key, |z| z.and_then(|z| z.score(member)))
}

/// `ZCARD key`.
pub(crate) fn zcard(m: &mut Master, ex: &mut Ex, key: &[u8]) -> Result<Reply, String> {
    with_zset(m, ex, key, |z| {
        Reply::Int(z.map_or(0, |z| z.items.len() as i64))
    })
}

/// `ZSCORE key member` as a reply.
pub(crate) fn zscore(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
    member: &[u8],
) -> Result<Reply, String> {
    Ok(score(m, ex, key, member)?.map_or(Reply::Null, Reply::Double))
}
