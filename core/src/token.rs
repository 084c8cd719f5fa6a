//! Lock tokens: 20 bytes from a CSPRNG, as 40 lowercase hex characters.

use std::fmt;

/// A lock's token: the value stored under the resource's key on every node. Unique per
/// acquisition attempt, unguessable, and stored inline (no heap allocation).
///
/// Its `Debug` shows only a prefix, so that logs do not leak what would let another process
/// release the lock.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; Token::LEN]);

impl Token {
    /// Length of the text form: 20 random bytes as hex.
    pub const LEN: usize = 40;

    /// A fresh token from `rng`: 20 bytes, as hex. The drivers' source is the operating
    /// system's generator (`redlock_mux::OsRandom`).
    pub fn from_random(rng: &mut dyn crate::random::Randomness) -> Token {
        let mut raw = [0u8; 20];
        rng.fill(&mut raw);
        Token::from_raw(&raw)
    }

    fn from_raw(raw: &[u8; 20]) -> Token {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; Token::LEN];
        for (i, b) in raw.iter().enumerate() {
            out[2 * i] = HEX[(b >> 4) as usize];
            out[2 * i + 1] = HEX[(b & 0xf) as usize];
        }
        Token(out)
    }

    /// Parses a token from its text form (as printed by `redlock lock`): 40 hex characters.
    pub fn parse(s: &str) -> Option<Token> {
        let bytes = s.as_bytes();
        if bytes.len() != Token::LEN || !bytes.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let mut out = [0u8; Token::LEN];
        for (o, c) in out.iter_mut().zip(bytes) {
            *o = c.to_ascii_lowercase();
        }
        Some(Token(out))
    }

    /// The token as the bytes sent to the server.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The token as text.
    pub fn as_str(&self) -> &str {
        // Only ever filled with ASCII hex digits.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", &self.as_str()[..6])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_of_known_bytes() {
        let mut raw = [0u8; 20];
        raw[0] = 0xab;
        raw[19] = 0x0f;
        let t = Token::from_raw(&raw);
        assert_eq!(t.as_str(), "ab0000000000000000000000000000000000000f");
        assert_eq!(Token::parse(t.as_str()), Some(t));
    }

    #[test]
    fn tokens_are_distinct_and_hex() {
        let mut seen = std::collections::HashSet::new();
        let mut rng = crate::random::Seeded::new(1);
        for _ in 0..10_000 {
            let t = Token::from_random(&mut rng);
            assert!(t.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
            assert!(seen.insert(t), "duplicate token");
        }
    }

    #[test]
    fn debug_hides_most_of_it() {
        let t = Token::from_random(&mut crate::random::Seeded::new(101));
        let d = format!("{t:?}");
        assert!(!d.contains(t.as_str()));
        assert!(d.contains(&t.as_str()[..6]));
    }

    #[test]
    fn parse_rejects_bad_text() {
        assert_eq!(Token::parse("abc"), None);
        assert_eq!(Token::parse(&"g".repeat(40)), None);
        assert!(Token::parse(&"A".repeat(40)).is_some());
    }
}
