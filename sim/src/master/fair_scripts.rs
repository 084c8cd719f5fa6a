//! Fair mode's scripts run natively: `wait.lua`, `claim.lua`, `handoff.lua` and `leave.lua`,
//! each with `ring.lua`'s hand-off at its head (`redlock_core::script::{WAIT, CLAIM, HANDOFF,
//! LEAVE}`). Each function below follows its Lua line by line: the same `redis.call`s in the
//! same order through the same commands (so expiry, invalidations, pushes and errors are the
//! commands' own), the same values returned. A failed call stops the script with its error at
//! the line of the concatenated text (`ring.lua` is its first [`RING_LINES`] lines).
//!
//! Numbers cross as Lua passes them: a Lua number given to `redis.call` is written with
//! `%.17g` ([`fmt_g17`]), a number returned is truncated to an integer. Arguments the core
//! never sends (a count that is not a number, too few keys) stop the script as not simulated.

use bytes::Bytes;

use super::keyspace::{Ex, Value, WRONGTYPE};
use super::reply::Reply;
use super::scripts::Stop;
use super::zset::{self, fmt_g17};
use super::{pttl_of, pubsub, strings, Master};
use crate::scripts::Script;

/// The lines of `ring.lua`, ahead of each script's own.
const RING_LINES: u32 = 54;

const RESERVED: &[u8] = b"redlock-mux:reserved:";

/// The head of the hand-off marker's value once every waiter in the line passed the resource
/// on, the last of them last (its id follows): no client id (ids have no `:`).
const PASSED: &[u8] = b"redlock-mux:passed:";

/// The hand-off marker's value once the caller reserved the resource for itself: no client id.
const SELF: &[u8] = b"redlock-mux:self";

/// The record a claim leaves where it took the key from the release that rang it.
const TAKEN: &[u8] = b"redlock-mux:taken:";
/// The record a claim leaves of whom it served: `<client id> <token>`, for the claim's ttl
/// (see `handoff`).
const SERVED: &[u8] = b"redlock-mux:served:";

/// A script's keys or arguments, each a slice of its command's bytes.
type Args<'a> = &'a [&'a [u8]];

/// Runs fair script `script` (one of the four) with `keys` and `argv`.
pub(super) fn run(
    m: &mut Master,
    ex: &mut Ex,
    script: Script,
    keys: Args<'_>,
    argv: Args<'_>,
) -> Result<Reply, Stop> {
    match script {
        Script::Wait => wait(m, ex, keys, argv, 0),
        Script::Enter => enter(m, ex, keys, argv),
        Script::Claim => claim(m, ex, keys, argv).map(Reply::Int),
        Script::Handoff => handoff(m, ex, keys, argv).map(Reply::Int),
        Script::Leave => leave(m, ex, keys, argv).map(Reply::Int),
        _ => Err(Stop::Unsimulated),
    }
}

/// The lines of `enter.lua`, between `ring.lua` and `wait.lua` in the enter script.
const ENTER_LINES: u32 = 4;

/// A line of the script's own body, in the concatenated text.
fn body(line: u32) -> u32 {
    RING_LINES + line
}

/// Lua's `tonumber` of an argument the core writes as a decimal integer.
fn number(b: &[u8]) -> Result<f64, Stop> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or(Stop::Unsimulated)
}

/// A Lua number returned to Redis: truncated to an integer.
fn int(v: f64) -> i64 {
    if v >= 9_223_372_036_854_775_808.0 || v.is_nan() {
        i64::MIN
    } else {
        v as i64
    }
}

/// `n` from an argument, with at least `2n` keys.
fn count(b: &[u8], keys: Args<'_>) -> Result<usize, Stop> {
    let n = strings::parse_i64(b)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(Stop::Unsimulated)?;
    if keys.len() < 2 * n {
        return Err(Stop::Unsimulated);
    }
    Ok(n)
}

/// `n` as `#KEYS / 2`, for an even number of keys.
fn half(keys: Args<'_>) -> Result<usize, Stop> {
    if keys.len() % 2 != 0 {
        return Err(Stop::Unsimulated);
    }
    Ok(keys.len() / 2)
}

fn arg<'a>(argv: Args<'a>, i: usize) -> Result<&'a [u8], Stop> {
    argv.get(i - 1).copied().ok_or(Stop::Unsimulated)
}

fn cat(a: &[u8], b: &[u8]) -> Cat {
    let n = a.len() + b.len();
    if n <= SHORT_KEY {
        let mut k = [0; SHORT_KEY];
        k[..a.len()].copy_from_slice(a);
        k[a.len()..n].copy_from_slice(b);
        return Cat::Short(k, n);
    }
    let mut v = Vec::with_capacity(n);
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    Cat::Long(v)
}

/// The longest key [`cat`] makes on the stack.
const SHORT_KEY: usize = 64;

/// Two byte strings end to end ([`cat`]): on the stack when short (the keys and messages the
/// scripts make mostly are), else on the heap.
enum Cat {
    Short([u8; SHORT_KEY], usize),
    Long(Vec<u8>),
}

impl std::ops::Deref for Cat {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Cat::Short(k, n) => &k[..*n],
            Cat::Long(v) => v,
        }
    }
}

fn call<T>(r: Result<T, String>, line: u32) -> Result<T, Stop> {
    r.map_err(|msg| Stop::Call(msg, line))
}

/// `redis.call("GET", key)`: the string or `false` (`None`).
/// `redis.pcall("GET", key)`, an error read as `""` (`handoff.lua`: a key of another type is
/// held by another, and the release goes on to the next key).
fn pget(m: &mut Master, ex: &mut Ex, key: &[u8]) -> Option<Bytes> {
    match m.read(ex, key).map(|e| e.value) {
        None => None,
        Some(Value::Str(b)) => Some(b),
        Some(Value::Zset(_)) => Some(Bytes::new()),
    }
}

/// `redis.pcall("GET", key)` where an error is read as `false` (`None`): the ring's marker.
fn pget_or_none(m: &mut Master, ex: &mut Ex, key: &[u8]) -> Option<Bytes> {
    match m.read(ex, key).map(|e| e.value) {
        Some(Value::Str(b)) => Some(b),
        None | Some(Value::Zset(_)) => None,
    }
}

/// `redis.call("TYPE", q)` is neither `zset` nor `none`: a line key of another type, which the
/// release and the leave pass by.
fn bad_line(m: &mut Master, ex: &mut Ex, q: &[u8]) -> bool {
    matches!(m.read(ex, q).map(|e| e.value), Some(Value::Str(_)))
}

fn get(m: &mut Master, ex: &mut Ex, key: &[u8], line: u32) -> Result<Option<Bytes>, Stop> {
    match m.read(ex, key).map(|e| e.value) {
        None => Ok(None),
        Some(Value::Str(b)) => Ok(Some(b)),
        Some(Value::Zset(_)) => Err(Stop::Call(WRONGTYPE.into(), line)),
    }
}

/// `redis.call("PTTL", key)`.
fn pttl(m: &mut Master, ex: &mut Ex, key: &[u8]) -> i64 {
    let now = ex.now;
    m.read_with(ex, key, |e| e.map_or(-2, |e| pttl_of(e, now)))
}

/// `redis.call("SET", key, value, "PX", ms)`.
fn set_px(
    m: &mut Master,
    ex: &mut Ex,
    key: &[u8],
    value: &[u8],
    ms: &[u8],
    line: u32,
) -> Result<(), Stop> {
    let args: [&[u8]; 5] = [b"SET", key, value, b"PX", ms];
    call(strings::set(m, ex, &args), line).map(drop)
}

/// `redis.call("ZREM", q, member)`.
fn zrem(m: &mut Master, ex: &mut Ex, q: &[u8], member: &[u8], line: u32) -> Result<i64, Stop> {
    call(zset::zrem(m, ex, q, &[member]), line)
}

/// `redis.call("ZADD", q, "NX", score, member)`: 1 added, 0 not.
fn zadd_nx(
    m: &mut Master,
    ex: &mut Ex,
    q: &[u8],
    score: &[u8],
    member: &[u8],
    line: u32,
) -> Result<i64, Stop> {
    let args: [&[u8]; 5] = [b"ZADD", q, b"NX", score, member];
    match call(zset::zadd(m, ex, &args), line)? {
        Reply::Int(n) => Ok(n),
        _ => Err(Stop::Unsimulated),
    }
}

/// `ring.lua`'s `rang`: publishes `<tag> <r>` on client `id`'s bell; whether anyone got it
/// (`redis.pcall`: a refused `PUBLISH`, an ACL user without channels, which the simulator
/// does not model, would count as none received).
fn rang(m: &mut Master, ex: &mut Ex, id: &[u8], tag: &[u8], r: &[u8]) -> bool {
    let channel = cat(b"redlock-mux:bell:", id);
    let mut message = tag.to_vec();
    message.push(b' ');
    message.extend_from_slice(r);
    pubsub::publish(m, ex, &channel, &message) > 0
}

/// `ring.lua`: rings the head of line `q` for resource `r` and reserves `r` for it; the id
/// rung (`false`: none). The head rung last (`redlock-mux:rung:<r>`) leaves the line as a
/// lapsed reservation only when the holder did not release (`released`). A head rung by
/// bell (not the caller) has the second in line told, `+ <r>`, that the reservation lapses
/// within the claim lease unless claimed. Given `after` (a set passing its reservation on,
/// see [`settle`]), the head is the first ranked after that id, which keeps its place.
#[allow(clippy::too_many_arguments)]
fn ring(
    m: &mut Master,
    ex: &mut Ex,
    r: &[u8],
    q: &[u8],
    claim: &[u8],
    me: Option<&[u8]>,
    tag: &[u8],
    released: bool,
    after: Option<&[u8]>,
) -> Result<Option<Bytes>, Stop> {
    let marker = cat(b"redlock-mux:rung:", r);
    let mut last = pget_or_none(m, ex, &marker);
    for _ in 0..1024 {
        let from = match after {
            Some(after) => call(zset::rank(m, ex, q, after), 11)?.map_or(0, |k| k + 1),
            None => 0,
        };
        let mut two = if from == 0 {
            call(zset::range(m, ex, q, b"0", b"1"), 14)?
        } else {
            let (a, b) = (from.to_string(), (from + 1).to_string());
            call(zset::range(m, ex, q, a.as_bytes(), b.as_bytes()), 14)?
        }
        .into_iter();
        let Some((id, _)) = two.next() else {
            return Ok(None);
        };
        // Every waiter in the line passed this resource on, the last of them last (see
        // `settle`), and nobody has joined behind it since: it stays free for whoever claims
        // it, and nobody is rung for it.
        if me != Some(&id[..]) && after.is_none() && !released {
            if let Some(passer) = last.as_deref().and_then(|l| l.strip_prefix(PASSED)) {
                let tail = call(zset::range(m, ex, q, b"-1", b"-1"), 17)?;
                if tail.first().is_some_and(|(t, _)| t[..] == passer[..]) {
                    return Ok(None);
                }
            }
        }
        if me != Some(&id[..]) && last.as_ref() == Some(&id) && !released {
            zrem(m, ex, q, &id, 21)?;
            last = None;
        } else if me == Some(&id[..]) || rang(m, ex, &id, tag, r) {
            set_px(m, ex, r, &cat(RESERVED, &id), claim, 24)?;
            let marker_ms = fmt_g17(number(claim)? * 16.0);
            // A reservation the caller made for itself names nobody rung: no read takes the
            // caller for a lapsed head when it lapses (it heads the line and waits for the rest
            // of a quorum; a real bell comes next, and that one's lapse takes it out).
            let rung: &[u8] = if me == Some(&id[..]) { SELF } else { &id };
            set_px(m, ex, &marker, rung, marker_ms.as_bytes(), 25)?;
            // The second in line is told when the reservation may lapse (`+ <resource>`).
            if me != Some(&id[..]) {
                if let Some((next, _)) = two.next().filter(|(n, _)| me != Some(&n[..])) {
                    rang(m, ex, &next, b"+", r);
                }
            }
            return Ok(Some(id));
        } else {
            zrem(m, ex, q, &id, 29)?;
        }
    }
    Ok(None)
}

/// `ring.lua`'s `settle`, for a set (`n > 1`) that cannot have all its resources yet: where
/// the caller `me` heads every one of its lines it keeps what is reserved for it, for another
/// claim lease; elsewhere it passes each reservation on to the next in that line behind it,
/// keeping its place. Whether it kept any.
fn settle(
    m: &mut Master,
    ex: &mut Ex,
    keys: Args<'_>,
    n: usize,
    me: &[u8],
    claim: &[u8],
) -> Result<bool, Stop> {
    let mine = cat(RESERVED, me);
    let (mut head, mut kept) = (true, false);
    for i in 0..n {
        let first = call(zset::range(m, ex, keys[n + i], b"0", b"0"), 38)?;
        if first.first().is_none_or(|(id, _)| id[..] != me[..]) {
            head = false;
        }
    }
    for i in 0..n {
        if get(m, ex, keys[i], 41)?.as_deref() == Some(&mine[..]) {
            if head {
                let args: [&[u8]; 3] = [b"PEXPIRE", keys[i], claim];
                call(strings::pexpire(m, ex, &args), 43)?;
                kept = true;
            } else {
                strings::del(m, ex, &[keys[i]]);
                let next = ring(
                    m,
                    ex,
                    keys[i],
                    keys[n + i],
                    claim,
                    None,
                    me,
                    false,
                    Some(me),
                )?;
                if next.is_none() {
                    let marker = cat(b"redlock-mux:rung:", keys[i]);
                    let marker_ms = fmt_g17(number(claim)? * 16.0);
                    set_px(m, ex, &marker, &cat(PASSED, me), marker_ms.as_bytes(), 48)?;
                }
            }
        }
    }
    Ok(kept)
}
/// `enter.lua`, then `wait.lua`: `SET NX PX` the resource (`KEYS[1]`) with the token
/// (`ARGV[6]`) for the caller's ttl (`ARGV[5]`), and `INCR` the counter (`KEYS[3]`) if there
/// is one; refused, the wait.
fn enter(m: &mut Master, ex: &mut Ex, keys: Args<'_>, argv: Args<'_>) -> Result<Reply, Stop> {
    let (Some(key), token, ttl) = (keys.first(), arg(argv, 6)?, arg(argv, 5)?) else {
        return Err(Stop::Unsimulated);
    };
    let set: [&[u8]; 6] = [b"SET", key, token, b"NX", b"PX", ttl];
    if call(strings::set(m, ex, &set), body(1))? != Reply::Null {
        return match keys.get(2) {
            Some(counter) => call(strings::incr(m, ex, counter), body(2)).map(Reply::Int),
            None => Ok(Reply::Int(0)),
        };
    }
    wait(m, ex, keys, argv, ENTER_LINES)
}

/// `wait.lua`: `ARGV` client id, claim lease, `n`, the lines' ttl, the waiter's ttl; its
/// lines `after` more lines than `ring.lua`'s (the enter script's own).
fn wait(
    m: &mut Master,
    ex: &mut Ex,
    keys: Args<'_>,
    argv: Args<'_>,
    after: u32,
) -> Result<Reply, Stop> {
    let body = |line| body(line) + after;
    let n = count(arg(argv, 3)?, keys)?;
    let id = arg(argv, 1)?;
    let mine = cat(RESERVED, id);
    let claim = number(arg(argv, 2)?)?;
    let (mut yours, mut longest, mut ticket) = (true, -2.0f64, 0.0f64);
    for i in 0..n {
        let (key, q) = (keys[i], keys[n + i]);
        let mut t = pttl(m, ex, key) as f64;
        let mut v = None;
        if t >= 0.0 && t <= claim {
            v = get(m, ex, key, body(9))?;
        }
        if v.as_deref() == Some(&mine[..]) {
            t = -3.0;
        } else {
            if v.as_ref().is_some_and(|v| v.starts_with(RESERVED)) {
                t += number(arg(argv, 5)?)?;
            }
            let last = call(zset::range(m, ex, q, b"-1", b"-1"), body(16))?;
            let next = last.first().map_or(1.0, |(_, score)| score + 1.0);
            let mut own = next;
            if zadd_nx(m, ex, q, fmt_g17(next).as_bytes(), id, body(20))? == 1 {
                let args: [&[u8]; 3] = [b"PEXPIRE", q, arg(argv, 4)?];
                call(strings::pexpire(m, ex, &args), body(21))?;
            } else {
                own = call(zset::score(m, ex, q, id), body(23))?.ok_or(Stop::Unsimulated)?;
            }
            if own > ticket {
                ticket = own;
            }
            if t == -2.0 {
                let claim = arg(argv, 2)?;
                if ring(m, ex, key, q, claim, Some(id), id, false, None)?.as_deref() == Some(id) {
                    t = -3.0;
                } else {
                    t = pttl(m, ex, key) as f64;
                }
            } else if v.as_ref().is_some_and(|v| v.starts_with(RESERVED))
                && call(zset::range(m, ex, q, b"1", b"1"), body(33))?
                    .first()
                    .is_some_and(|(second, _)| second[..] == id[..])
            {
                // Second behind a reservation for another: told, as a hand-off would tell it.
                rang(m, ex, id, b"+", key);
            }
        }
        if t != -3.0 {
            yours = false;
            if longest != -1.0 && (t == -1.0 || t > longest) {
                longest = t;
            }
        }
    }
    // A set that keeps reservations looks again within half a claim lease (its read renews
    // them): `math.floor(claim / 2)`.
    if !yours && n > 1 && settle(m, ex, keys, n, id, arg(argv, 2)?)? {
        let half = (claim / 2.0).floor();
        if longest == -1.0 || longest > half {
            longest = half;
        }
    }
    let first = if yours { -3 } else { int(longest) };
    Ok(Reply::Array(vec![
        Reply::Int(first),
        Reply::Int(int(ticket)),
    ]))
}

/// `claim.lua`: `ARGV` token, ttl, `n`, client id, claim lease, the tag of the hand-off that
/// woke the claim (empty or absent: none; a resource still holding that token is taken from
/// it); `KEYS[2n+1]` the counter when fenced.
fn claim(m: &mut Master, ex: &mut Ex, keys: Args<'_>, argv: Args<'_>) -> Result<i64, Stop> {
    let n = count(arg(argv, 3)?, keys)?;
    let id = arg(argv, 4)?;
    let mine = cat(RESERVED, id);
    // `ARGV[6]`, `nil` when not given: `nil ~= ""`, and no value equals `nil`.
    let handed = argv.get(5).copied().filter(|h| !h.is_empty());
    // `took`: the keys held by the hand-off's token (taken from the release on its way).
    // (A bit per key: the core sends at most `MAX_RESOURCES`, and a hand-off only for one.)
    let mut took = 0u64;
    for i in 0..n {
        let mut v = get(m, ex, keys[i], body(6))?;
        if v.is_none()
            && ring(
                m,
                ex,
                keys[i],
                keys[n + i],
                arg(argv, 5)?,
                Some(id),
                id,
                false,
                None,
            )?
            .is_some()
        {
            v = get(m, ex, keys[i], body(9))?;
        }
        if v.as_ref()
            .is_some_and(|v| v[..] != mine[..] && Some(&v[..]) != handed)
        {
            if n > 1 {
                settle(m, ex, keys, n, id, arg(argv, 5)?)?;
            }
            return Ok(-(i as i64) - 1);
        }
        if i < 64 && handed.is_some() && v.as_deref() == handed {
            took |= 1 << i;
        }
    }
    for i in 0..n {
        set_px(m, ex, keys[i], arg(argv, 1)?, arg(argv, 2)?, body(19))?;
        if let (true, Some(handed)) = (i < 64 && took & (1 << i) != 0, handed) {
            // `ARGV[5] * 16`: Lua turns the argument into a number.
            let ms = fmt_g17(number(arg(argv, 5)?)? * 16.0);
            let taken = cat(TAKEN, keys[i]);
            set_px(m, ex, &taken, handed, ms.as_bytes(), body(21))?;
        }
        zrem(m, ex, keys[n + i], id, body(23))?;
        // Who the place served: the client and the token (see `handoff`).
        let served = [id, b" ", arg(argv, 1)?].concat();
        set_px(
            m,
            ex,
            &cat(SERVED, keys[i]),
            &served,
            arg(argv, 2)?,
            body(24),
        )?;
        // The ring's marker naming the claimant is spent: it was served (a marker left would
        // take it out as a lapsed head when it heads the line again and a lock runs out).
        let marker = cat(b"redlock-mux:rung:", keys[i]);
        if pget(m, ex, &marker).as_deref() == Some(id) {
            strings::del(m, ex, &[&marker[..]]);
        }
    }
    match keys.get(2 * n) {
        Some(counter) => call(strings::incr(m, ex, counter), body(26)),
        None => Ok(0),
    }
}

/// `handoff.lua`: `ARGV` token, claim lease, client id, `1` a release proper (`0` the keeping
/// form), the client's ticket.
fn handoff(m: &mut Master, ex: &mut Ex, keys: Args<'_>, argv: Args<'_>) -> Result<i64, Stop> {
    let n = half(keys)?;
    let (token, id) = (arg(argv, 1)?, arg(argv, 3)?);
    let mine = cat(RESERVED, id);
    let keep = arg(argv, 4)? == b"0";
    let me = keep.then_some(id);
    let (mut held, mut gone) = (false, false);
    for i in 0..n {
        let (key, q) = (keys[i], keys[n + i]);
        let v = pget(m, ex, key);
        let bad = bad_line(m, ex, q);
        let released = v.as_deref() == Some(token);
        if bad {
            // (A line key of another type: no line to leave or keep, and nobody to ring.)
        } else if !keep {
            zrem(m, ex, q, id, body(10))?;
        } else if !(v
            .as_deref()
            .is_some_and(|v| v != token && !v.starts_with(RESERVED))
            && pget(m, ex, &cat(SERVED, key)).as_deref()
                == Some(&[id, b" ", v.as_deref().unwrap_or_default()].concat()[..]))
            && number(arg(argv, 5)?)? > 0.0
        {
            // Back at its ticket unless a waiter of the same client was served from the
            // place meanwhile and holds the resource (its claim's record names the client
            // and the token there): its own token there, the key gone (its claim's lock ran
            // out), a reservation, or another client's lock.
            zadd_nx(m, ex, q, arg(argv, 5)?, id, body(12))?;
        }
        if released || v.is_none() || v.as_deref() == Some(&mine[..]) {
            if !released {
                gone = true;
            }
            let rung = if bad {
                None
            } else {
                ring(m, ex, key, q, arg(argv, 2)?, me, token, released, None)?
            };
            if rung.is_none() && v.is_some() {
                strings::del(m, ex, &[key]);
            }
        } else if pget(m, ex, &cat(TAKEN, key)).as_deref() != Some(token) {
            // Not taken from this release by the claim it rang for (see `claim`).
            held = true;
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

/// `leave.lua`: `ARGV` client id, claim lease. A leaver that stood second (with someone
/// behind it) hands a free resource on, and has the new second told (`+ <r>`) of a
/// reservation for another.
fn leave(m: &mut Master, ex: &mut Ex, keys: Args<'_>, argv: Args<'_>) -> Result<i64, Stop> {
    let n = half(keys)?;
    let id = arg(argv, 1)?;
    let mine = cat(RESERVED, id);
    let mut passed = 0;
    for i in 0..n {
        let (key, q) = (keys[i], keys[n + i]);
        // (`pcall`: a line key of another type has no line to leave, and a resource's key of
        // another type is another's; the leave goes on to the set's next resource.)
        let (three, bad) = match zset::range(m, ex, q, b"0", b"2") {
            Ok(three) => (three, false),
            Err(_) => (Vec::new(), true),
        };
        if !bad {
            zrem(m, ex, q, id, body(6))?;
        }
        let v = pget(m, ex, key);
        if v.as_deref() == Some(&mine[..]) {
            strings::del(m, ex, &[key]);
            if !bad {
                ring(m, ex, key, q, arg(argv, 2)?, None, id, false, None)?;
            }
            passed += 1;
        } else if three.get(1).is_some_and(|(second, _)| second[..] == id[..]) {
            // The leaver stood second: a free resource is handed on (past a lapsed head), and
            // behind a reservation for another the new second is told.
            if let Some((next, _)) = three.get(2) {
                match &v {
                    None => {
                        ring(m, ex, key, q, arg(argv, 2)?, None, id, false, None)?;
                    }
                    Some(v) if v.starts_with(RESERVED) => {
                        rang(m, ex, next, b"+", key);
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(passed)
}
