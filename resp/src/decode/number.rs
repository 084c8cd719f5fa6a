//! The numbers of RESP's scalar types, parsed as the servers write them: integers as Redis'
//! `string2ll` accepts them, big numbers, and RESP3's doubles (every spelling of NaN a C
//! library prints included).

/// Parses a canonical signed 64-bit decimal exactly as Redis' `string2ll` accepts it: an
/// optional `-`, then `0` alone or digits with no leading zero; no `+`, no `-0`, no
/// whitespace, no overflow.
pub(crate) fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] if !neg => return Some(0),
        [b'0', ..] => return None,
        _ if digits.len() > 19 => return None,
        _ => {}
    }
    let mut v: u64 = 0;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        // 19 digits always fit in a u64.
        v = v * 10 + d as u64;
    }
    if neg {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

/// A big number: an optional `-`, then `0` alone or digits with no leading zero (not `-0`).
pub(super) fn is_big_number(s: &[u8]) -> bool {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    let neg = digits.len() != s.len();
    match digits {
        [] => false,
        [b'0'] => !neg,
        [b'0', ..] => false,
        _ => digits.iter().all(u8::is_ascii_digit),
    }
}

/// A RESP3 double: `inf`, `-inf`, a NaN (see [`is_nan`]), or
/// `[-]digits[.digits][(e|E)[+|-]digits]`.
pub(super) fn parse_double(s: &[u8]) -> Option<f64> {
    match s {
        b"inf" => return Some(f64::INFINITY),
        b"-inf" => return Some(f64::NEG_INFINITY),
        _ if is_nan(s) => return Some(f64::NAN),
        _ => {}
    }
    let digits = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
    let mut i = usize::from(s.first() == Some(&b'-'));
    let int = digits(&s[i..]);
    if int == 0 {
        return None;
    }
    i += int;
    if s.get(i) == Some(&b'.') {
        let frac = digits(&s[i + 1..]);
        if frac == 0 {
            return None;
        }
        i += 1 + frac;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = digits(&s[i..]);
        if exp == 0 {
            return None;
        }
        i += exp;
    }
    if i != s.len() {
        return None;
    }
    // The grammar above is a subset of what `f64::from_str` accepts, and pure ASCII.
    core::str::from_utf8(s).ok()?.parse().ok()
}

/// Whether `s` is one of the spellings of NaN that a C library prints and servers before
/// Redis 7.2 pass on unchanged (`return {double=0/0}` from Lua answers `,-nan`): an optional
/// `-`, then `nan` in any case, then optionally a parenthesised run of ASCII letters, digits
/// and underscores (`nan(0x7ff8)`, `NAN(ind)`). RESP3 asks clients to take them all as NaN.
fn is_nan(s: &[u8]) -> bool {
    let s = s.strip_prefix(b"-").unwrap_or(s);
    let Some((word, rest)) = s.split_at_checked(3) else {
        return false;
    };
    if !word.eq_ignore_ascii_case(b"nan") {
        return false;
    }
    match rest {
        [] => true,
        [b'(', inner @ .., b')'] => inner
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_'),
        _ => false,
    }
}
