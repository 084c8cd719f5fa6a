//! Whether a master's eviction policy can drop the fencing counter, read from its answer to
//! `CONFIG GET maxmemory-policy` (which a fenced client's connections send when they open).
//!
//! The counter is a key without expiry (`INCR` creates it without one, the fence script's
//! `SET` clears any), so only the `allkeys-*` policies can evict it under memory pressure;
//! `noeviction` refuses writes instead, and the `volatile-*` policies only evict keys that
//! have an expiry. A policy this code does not know is taken as one that may evict: a fenced
//! acquisition refuses too often rather than hand out a token that can go down.

use resp::Frame;

/// What a master said of its eviction policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// A policy that never evicts a key without expiry: `noeviction`, `volatile-*`.
    Keeps,
    /// A policy that may evict the counter (its name): `allkeys-*`, or one not known here.
    Evicts(Box<str>),
    /// The policy could not be read (why): `CONFIG` denied by an ACL or renamed away, or an
    /// answer of another shape.
    Unknown(Box<str>),
}

impl Eviction {
    /// What a reply to `CONFIG GET maxmemory-policy` says: a RESP2 array of names and values,
    /// or a RESP3 map.
    pub fn of_reply(reply: &Frame) -> Eviction {
        fn text(f: &Frame) -> Option<&[u8]> {
            match f {
                Frame::Bulk(b) | Frame::Simple(b) => Some(b.as_ref()),
                _ => None,
            }
        }
        let reply = reply.without_attributes();
        let value = match reply {
            Frame::Error(msg) | Frame::BulkError(msg) => {
                return Eviction::Unknown(String::from_utf8_lossy(msg).into());
            }
            Frame::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| text(k).is_some_and(is_name))
                .and_then(|(_, v)| text(v)),
            Frame::Array(items) => items
                .chunks(2)
                .find(|kv| kv.first().and_then(text).is_some_and(is_name))
                .and_then(|kv| kv.get(1).and_then(text)),
            _ => None,
        };
        let Some(policy) = value else {
            return Eviction::Unknown("no maxmemory-policy in the reply to CONFIG GET".into());
        };
        let policy = String::from_utf8_lossy(policy).to_ascii_lowercase();
        if policy == "noeviction" || policy.starts_with("volatile-") {
            Eviction::Keeps
        } else {
            Eviction::Evicts(policy.into())
        }
    }
}

fn is_name(k: &[u8]) -> bool {
    k.eq_ignore_ascii_case(b"maxmemory-policy")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn bulk(s: &'static str) -> Frame {
        Frame::Bulk(Bytes::from_static(s.as_bytes()))
    }

    #[test]
    fn policies_that_can_evict_a_key_without_expiry_are_told_apart() {
        let resp2 = |p| Frame::Array(vec![bulk("maxmemory-policy"), bulk(p)]);
        let resp3 = |p| Frame::Map(vec![(bulk("maxmemory-policy"), bulk(p))]);
        for reply in [resp2 as fn(&'static str) -> Frame, resp3] {
            for keeps in [
                "noeviction",
                "volatile-lru",
                "volatile-lfu",
                "volatile-random",
                "volatile-ttl",
            ] {
                assert_eq!(
                    Eviction::of_reply(&reply(keeps)),
                    Eviction::Keeps,
                    "{keeps}"
                );
            }
            for evicts in [
                "allkeys-lru",
                "allkeys-lfu",
                "allkeys-random",
                "ALLKEYS-LRU",
                "some-new-policy",
            ] {
                assert_eq!(
                    Eviction::of_reply(&reply(evicts)),
                    Eviction::Evicts(evicts.to_ascii_lowercase().into()),
                    "{evicts}"
                );
            }
        }
        // Denied, renamed away, or not what CONFIG GET answers: unknown.
        let noperm = Frame::Error(Bytes::from_static(
            b"NOPERM User fenced has no permissions to run the 'config|get' command",
        ));
        assert!(
            matches!(Eviction::of_reply(&noperm), Eviction::Unknown(m) if m.starts_with("NOPERM"))
        );
        for other in [
            Frame::Array(vec![]),
            Frame::Simple(Bytes::from_static(b"OK")),
            Frame::Integer(1),
            Frame::Array(vec![bulk("maxmemory-policy")]),
        ] {
            assert!(
                matches!(Eviction::of_reply(&other), Eviction::Unknown(_)),
                "{other:?}"
            );
        }
    }
}
