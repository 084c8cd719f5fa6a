//! `redlock lock` and `redlock unlock`: a lock taken by one shell command and released by
//! another, on the blocking client (no runtime to start for one round).

use redlock_mux::{Lock, Token};

use crate::args::{describe, names, Global, LockArgs, UnlockArgs};
use crate::exit::{self, Failure};

/// Takes the lock (with the configured retries) and prints its token and validity.
pub fn lock(global: &Global, a: &LockArgs) -> Result<u8, Failure> {
    let redlock = global.blocking(&global.node_list())?;
    let lock = redlock
        .lock_many(&names(&a.resources), global.ttl)
        .map_err(|e| Failure::lock(&format!("lock {}", describe(&a.resources)), &e))?;
    let validity_ms = lock.validity().as_millis();
    let fencing = lock
        .fencing_token()
        .map_or_else(|| "null".to_string(), |t| t.to_string());
    if a.json {
        let all: Vec<String> = a.resources.iter().map(|r| json_string(r)).collect();
        println!(
            "{{\"resource\":{},\"resources\":[{}],\"token\":\"{}\",\"fencing_token\":{fencing},\"validity_ms\":{validity_ms},\"ttl_ms\":{}}}",
            json_string(lock.resource()),
            all.join(","),
            lock.token(),
            lock.ttl().as_millis()
        );
    } else {
        println!("token={}\nvalidity_ms={validity_ms}", lock.token());
        if let Some(t) = lock.fencing_token() {
            println!("fencing_token={t}");
        }
    }
    Ok(0)
}

/// Releases the lock held by `--token`.
pub fn unlock(global: &Global, a: &UnlockArgs) -> Result<u8, Failure> {
    let token = Token::parse(a.token.trim()).ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!(
                "invalid token {:?}: expected the 40 hex digits `redlock lock` printed",
                a.token
            ),
        )
    })?;
    let what = || format!("unlock {}", describe(&a.resources));
    let lock = Lock::from_token_many(&names(&a.resources), token)
        .map_err(|e| Failure::lock(&what(), &e))?;
    let redlock = global.blocking(&global.node_list())?;
    redlock
        .unlock(&lock)
        .map_err(|e| Failure::lock(&what(), &e))?;
    Ok(0)
}

/// `s` as a JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a"), "\"a\"");
        assert_eq!(json_string("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"");
    }
}
