//! What a server says it is, in its `HELLO` reply: whether it has native compare-and-delete.

use resp::Frame;

/// A server's own commands for a lock's release and extension, without a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Native {
    /// Valkey 9.0 and later: `DELIFEQ key token`, `SET key token IFEQ token PX ttl`.
    Valkey,
    /// Redis 8.4 and later: `DELEX key IFEQ token`, `SET key token IFEQ token PX ttl`.
    Redis,
}

impl Native {
    /// What a `HELLO` reply (a RESP2 array of names and values, or a RESP3 map) says the
    /// server has.
    pub fn of_hello(reply: &Frame) -> Option<Native> {
        fn text(f: &Frame) -> Option<&[u8]> {
            match f {
                Frame::Bulk(b) | Frame::Simple(b) => Some(b.as_ref()),
                _ => None,
            }
        }
        let field = |name: &[u8]| -> Option<&[u8]> {
            match reply.without_attributes() {
                Frame::Map(pairs) => pairs
                    .iter()
                    .find(|(k, _)| text(k) == Some(name))
                    .and_then(|(_, v)| text(v)),
                Frame::Array(items) => items
                    .chunks(2)
                    .find(|kv| kv.first().and_then(text) == Some(name))
                    .and_then(|kv| kv.get(1).and_then(text)),
                _ => None,
            }
        };
        let server = field(b"server")?;
        let version = std::str::from_utf8(field(b"version")?).ok()?;
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next()?, parts.next().unwrap_or(0));
        match server {
            b"valkey" if major >= 9 => Some(Native::Valkey),
            b"redis" if (major, minor) >= (8, 4) => Some(Native::Redis),
            _ => None,
        }
    }
}
