//! The Lua scripts for release and extension, and their SHA-1 digests.
//!
//! Both compare the key's value with the caller's token and act only on a match, atomically on
//! the server. Both tell "not ours" from "already gone" in their integer reply:
//!
//! | reply | release            | extend                     |
//! |-------|--------------------|----------------------------|
//! | `1`   | deleted            | new ttl set                |
//! | `0`   | held by another    | held by another            |
//! | `-1`  | no such key        | no such key                |
//!
//! They run as `EVALSHA <sha> 1 <key> <token> [<ttl ms>]`. A server that answers `-NOSCRIPT`
//! (restarted, or `SCRIPT FLUSH`ed) gets the same call as `EVAL <script> ...`, which runs it
//! and caches it again: its connection sends it in place of the `EVALSHA` (`conn.rs`), whether
//! or not the operation's round is still waiting for that node. The digests are constants; a test checks them
//! against what `SCRIPT LOAD` returns from a real server.

/// Compare-and-delete: `DEL` the key if it holds `ARGV[1]`.
pub const RELEASE: &str = "local v = redis.call(\"GET\", KEYS[1])\n\
if v == ARGV[1] then return redis.call(\"DEL\", KEYS[1]) end\n\
if v == false then return -1 end\n\
return 0\n";

/// SHA-1 of [`RELEASE`], in lowercase hex, as `EVALSHA` takes it.
pub const RELEASE_SHA1: &str = "29edaebfc3885585cba9b7d39a98e8d77028ce00";

/// Compare-and-pexpire: set the key's ttl to `ARGV[2]` milliseconds if it holds `ARGV[1]`.
pub const EXTEND: &str = "local v = redis.call(\"GET\", KEYS[1])\n\
if v == ARGV[1] then return redis.call(\"PEXPIRE\", KEYS[1], ARGV[2]) end\n\
if v == false then return -1 end\n\
return 0\n";

/// SHA-1 of [`EXTEND`], in lowercase hex, as `EVALSHA` takes it.
pub const EXTEND_SHA1: &str = "7641508f68a68f49b729a5de6f828f7de7934941";

/// Whether an error reply is the server saying it does not have the script cached.
pub(crate) fn is_noscript(msg: &[u8]) -> bool {
    msg.starts_with(b"NOSCRIPT")
}

/// Whether a reply is a `NOSCRIPT` error.
pub(crate) fn is_noscript_reply(reply: &resp::Frame) -> bool {
    matches!(reply.without_attributes(), resp::Frame::Error(m) if is_noscript(m))
}
