//! The Lua scripts, and their SHA-1 digests.
//!
//! Each script takes the lock's resources as its keys (one for a plain lock, several for a lock
//! over a set), and compares every key's value with the caller's token before it acts, atomically
//! on the server. Their integer replies:
//!
//! | reply | [`ACQUIRE`]                      | [`RELEASE`]       | [`EXTEND`]          | [`FENCE`]              |
//! |-------|----------------------------------|-------------------|---------------------|------------------------|
//! | `n>0` | set; `n` is the fencing counter  |                   |                     |                        |
//! | `1`   |                                  | all ours, deleted | all ours, ttl set   | all ours, counter >= t |
//! | `0`   | set (unfenced)                   | one held by another (ours deleted) | one held by another | one held by another |
//! | `-1`  |                                  | one gone (ours deleted) | one gone      | one gone               |
//! | `-i`  | key `i` is held: nothing set     |                   |                     |                        |
//!
//! A plain single-resource lock is acquired with `SET key token NX PX ttl`, no script; the
//! acquire script serves a lock over several resources, and fenced locks (it then also `INCR`s
//! the fencing counter, given as the last key). The fence script is the second phase of a
//! fenced acquisition: it raises the counter to the token the client chose, only while every
//! resource still holds the caller's token. The argument for the two phases is in
//! `docs/redlock.md`.
//!
//! They run as `EVALSHA <sha> <numkeys> <keys> <args>`. A server that answers `-NOSCRIPT`
//! (restarted, or `SCRIPT FLUSH`ed) gets the same call as `EVAL <script> ...`, which runs it
//! and caches it again: its connection sends it in place of the `EVALSHA` (`conn.rs`), whether
//! or not the operation's round is still waiting for that node. The digests are constants; a
//! test checks them against what `SCRIPT LOAD` returns from a real server.

/// Acquire several keys, or acquire fenced: `SET` each of `KEYS[1..=n]` to `ARGV[1]` with `NX PX
/// ARGV[2]`; at the first key `i` that exists, delete the ones this call set and return `-i`
/// (all or nothing, atomically); else return `INCR` of `KEYS[n+1]` when it is given (fenced),
/// `0` when not. `ARGV[3]` is `n`. (One `SET NX` per key, rather than checking every key
/// first and then setting it: half the calls on the path that succeeds.)
pub const ACQUIRE: &str = include_str!("scripts/acquire.lua");

/// SHA-1 of [`ACQUIRE`], in lowercase hex, as `EVALSHA` takes it.
pub const ACQUIRE_SHA1: &str = "fc1f70ab657ed9339b8f3a9f2484c8bf19d328ae";

/// Compare-and-delete: `DEL` every key that holds `ARGV[1]`.
pub const RELEASE: &str = include_str!("scripts/release.lua");

/// SHA-1 of [`RELEASE`], in lowercase hex, as `EVALSHA` takes it.
pub const RELEASE_SHA1: &str = "2685a2a012ded70395ffcfd030cef0910dd01b3d";

/// Compare-and-pexpire: if every key holds `ARGV[1]`, set each one's ttl to `ARGV[2]`
/// milliseconds; otherwise change nothing.
pub const EXTEND: &str = include_str!("scripts/extend.lua");

/// SHA-1 of [`EXTEND`], in lowercase hex, as `EVALSHA` takes it.
pub const EXTEND_SHA1: &str = "cfba9b3380ab0e554f01a90003950e9371d1e5f9";

/// The fencing write-back: if every key but the last holds `ARGV[1]`, raise the counter in the
/// last key to `ARGV[2]` (never lower it), compared as the canonical decimal strings `INCR`
/// writes, so that no precision is lost to Lua's numbers.
pub const FENCE: &str = include_str!("scripts/fence.lua");

/// SHA-1 of [`FENCE`], in lowercase hex, as `EVALSHA` takes it.
pub const FENCE_SHA1: &str = "b3c3434d34a507cffe46e90f5480f2804dc5906f";

/// A permit of a semaphore ([`Semaphore`](crate::Semaphore)): `SET` the first of `KEYS` (the
/// semaphore's slots, in the caller's order) that is free to `ARGV[1]` with `NX PX ARGV[2]`,
/// and return its index in `KEYS` (from 1); `0` when every slot is held. One slot at most per
/// call, so that a master's yes names the one slot it gave the caller; masters in the same
/// state give the same slot, as the caller's order is the same on each of them.
pub const PERMIT: &str = include_str!("scripts/permit.lua");

/// SHA-1 of [`PERMIT`], in lowercase hex, as `EVALSHA` takes it.
pub const PERMIT_SHA1: &str = "62a68ac92e5bdac6e42c927f9ed24ebcd46a4cbf";

/// A semaphore's slots read after a permit's votes split: `EXISTS` of each of `KEYS`, as an
/// array of `0` (free) and `1` (taken). (`MGET` reads a key of another type as null, which
/// the permit script's `SET NX` finds taken: a hostile review's finding, session 22.)
pub const SLOTS: &str = include_str!("scripts/slots.lua");

/// SHA-1 of [`SLOTS`], in lowercase hex, as `EVALSHA` takes it.
pub const SLOTS_SHA1: &str = "a0f7c91681e37b3be6cb08afb20a616932f5957b";

/// The scripts as a function library (`FUNCTION LOAD`, Redis 7+ and Valkey), for
/// `Scripts::Function` and for a connection under `Scripts::Auto` whose user's ACL denies
/// `EVAL`/`EVALSHA`: acquire, release, extend, fence, permit and slots, then fair mode's hand-off
/// ([`RING`], a local function of the library that the fair functions share) and its five
/// scripts. Each function's parameters are named `KEYS` and `ARGV`, so that the bodies are
/// the scripts' own. The version in the names changes whenever a script does, so that
/// clients of different versions never call each other's functions.
pub const LIBRARY: &str = concat!(
    "#!lua name=redlock_mux_v13\n",
    "redis.register_function('redlock_mux_v13_acquire', function(KEYS, ARGV)\n",
    include_str!("scripts/acquire.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_release', function(KEYS, ARGV)\n",
    include_str!("scripts/release.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_extend', function(KEYS, ARGV)\n",
    include_str!("scripts/extend.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_fence', function(KEYS, ARGV)\n",
    include_str!("scripts/fence.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_permit', function(KEYS, ARGV)\n",
    include_str!("scripts/permit.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_slots', function(KEYS, ARGV)\n",
    include_str!("scripts/slots.lua"),
    "end)\n",
    include_str!("scripts/ring.lua"),
    "redis.register_function('redlock_mux_v13_wait', function(KEYS, ARGV)\n",
    include_str!("scripts/wait.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_claim', function(KEYS, ARGV)\n",
    include_str!("scripts/claim.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_handoff', function(KEYS, ARGV)\n",
    include_str!("scripts/handoff.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_leave', function(KEYS, ARGV)\n",
    include_str!("scripts/leave.lua"),
    "end)\n",
    "redis.register_function('redlock_mux_v13_enter', function(KEYS, ARGV)\n",
    include_str!("scripts/enter.lua"),
    include_str!("scripts/wait.lua"),
    "end)\n",
);

/// The names of [`LIBRARY`]'s functions, in the order of [`ALL`] then [`FAIR`]: acquire,
/// release, extend, fence, permit, slots; wait, claim, hand-off, leave, enter.
pub const FUNCTIONS: [&str; 11] = [
    "redlock_mux_v13_acquire",
    "redlock_mux_v13_release",
    "redlock_mux_v13_extend",
    "redlock_mux_v13_fence",
    "redlock_mux_v13_permit",
    "redlock_mux_v13_slots",
    "redlock_mux_v13_wait",
    "redlock_mux_v13_claim",
    "redlock_mux_v13_handoff",
    "redlock_mux_v13_leave",
    "redlock_mux_v13_enter",
];

/// Every script with its digest.
pub const ALL: [(&str, &str); 6] = [
    (ACQUIRE_SHA1, ACQUIRE),
    (RELEASE_SHA1, RELEASE),
    (EXTEND_SHA1, EXTEND),
    (FENCE_SHA1, FENCE),
    (PERMIT_SHA1, PERMIT),
    (SLOTS_SHA1, SLOTS),
];

/// The name of the [`LIBRARY`] function that runs the script a digest names, if it is one of
/// ours.
pub fn function_by_digest(sha: &[u8]) -> Option<&'static str> {
    ALL.iter()
        .chain(FAIR.iter())
        .position(|(digest, _)| digest.as_bytes() == sha)
        .and_then(|i| FUNCTIONS.get(i).copied())
}

/// The key prefix of the queue of waiters for a resource (a sorted set of client ids by
/// ticket), in fair mode: `redlock-mux:queue:<resource>`.
pub const QUEUE_PREFIX: &str = "redlock-mux:queue:";

/// The value a hand-off leaves in a resource's key for the waiter it rang, for the claim
/// lease: `redlock-mux:reserved:<client id>`. No token has this form (tokens are 40 hex
/// digits), so no release or extension ever matches it, and a plain `SET NX` finds the key
/// taken: nobody passes the waiter it was rung for.
pub const RESERVED_PREFIX: &str = "redlock-mux:reserved:";

/// The channel a client's door bell rings on: `redlock-mux:bell:<client id>`, one per
/// client, subscribed on every connection of a client in fair mode; the message is
/// `<hand-off> <resource>`, where the hand-off is the releasing token (or the id of the
/// client whose try handed a free resource on): the same on every master one release rang,
/// so that bells of different hand-offs never add up to a quorum. `+ <resource>` (`+` is no
/// token nor client id) tells the second in line that the resource was just reserved for
/// the waiter ahead of it: it reads the line again once that reservation may have lapsed.
pub const BELL_PREFIX: &str = "redlock-mux:bell:";

/// The hand-off every fair script shares: rings the line's head (the caller itself needs no
/// bell) and reserves the resource for it for the claim lease, leaving it in the line until
/// its claim takes it out (so that a head rung by some masters only is still the head of
/// every line). A head whose bell reaches nobody (`PUBLISH` counts the receivers, and a
/// client whose process is gone has none; a `PUBLISH` the server refuses, to an ACL user
/// without access to the bell channels, counts as none, so that the release it is part of
/// still deletes the key) leaves the line, and so does one this resource was
/// rung for last (`redlock-mux:rung:<resource>`) and that never claimed it: its reservation
/// lapsed (not on a release by the holder, the sixth argument: the head rung last may have
/// claimed, held and come back to the line since). A head rung by bell (not the caller) has
/// the second in line told (`+ <resource>` on its bell, no reservation): nothing rings
/// anyone when a reservation lapses, and that waiter then looks at the line itself, so a
/// head that never claims costs the line one claim lease. Written at the head of each fair
/// script.
pub const RING: &str = include_str!("scripts/ring.lua");

/// Fair mode, a waiter joins the queues of its resources (`KEYS[1..=n]` the resources,
/// `KEYS[n+1..=2n]` their queues; `ARGV`: client id, claim lease in ms, `n`, the queues'
/// ttl in ms, the waiter's own ttl in ms). A client already queued keeps its ticket (all its waiters share one place); one
/// for which the resource is reserved (rung before it started this wait) does not join again.
/// A free resource is handed to the head of its line at once. Returns `-3` when every
/// resource is now reserved for the caller (claim at once), else the longest `PTTL` of the
/// others, and beside it the caller's ticket (the largest over its resources), as a
/// two-element array (`-2` none, `-1` one without a ttl); a resource reserved for another waiter counts
/// its reservation plus the caller's own ttl (what that waiter's lock will likely last), so
/// that the waiters behind it wait for their bells rather than wake when the reservation
/// would lapse; the caller second behind it is told instead (`+ <resource>` on its own bell,
/// with the reply: ahead of it from Redis 7.0, after it from Valkey 9.1; as [`RING`] tells
/// the second), and reads the line again once the reservation may have lapsed.
pub const WAIT: &str = concat!(
    include_str!("scripts/ring.lua"),
    include_str!("scripts/wait.lua")
);

/// SHA-1 of [`WAIT`].
pub const WAIT_SHA1: &str = "0ffb0a0cfd4fb9c7e3aaf5140dc19dccc7437cff";

/// Fair mode, the first try of a waiter that may wait (`lock`, `lock_within`): `SET NX PX`
/// as a plain try, and, refused, the wait of [`WAIT`] in the same call, so that a waiter
/// that finds the resource held is in its line after one round trip rather than two (a
/// refused `SET NX`, then the wait). Fenced, `INCR`s the counter (`KEYS[3]`) after a `SET`
/// that took. `KEYS`: the resource, its line (then the counter); `ARGV`: [`WAIT`]'s (client
/// id, claim lease in ms, `1`, the line's ttl in ms, the caller's ttl in ms), then the
/// token. Answers as the acquire script when it took the resource (`0`, or the counter),
/// and as [`WAIT`] when it did not.
pub const ENTER: &str = concat!(
    include_str!("scripts/ring.lua"),
    include_str!("scripts/enter.lua"),
    include_str!("scripts/wait.lua")
);

/// SHA-1 of [`ENTER`].
pub const ENTER_SHA1: &str = "4fe9bfcc45e84fbbc4e631baa4f3e7b506f1565b";

/// Fair mode, a waiter's try: takes every resource that is reserved for the caller, or free
/// once the head of its line has been rung (which may be the caller), or still held by the
/// token of the release whose bells woke the caller (that release rang it from a quorum of
/// masters, and is on its way to this one: waiting for it would cost a failed claim and a
/// wait), all or nothing, and takes the caller out of the line; fenced, `INCR`s the counter
/// (`KEYS[2n+1]`). `KEYS` as [`WAIT`]'s; `ARGV`: token, ttl in ms, `n`, client id, claim
/// lease in ms, the hand-off that rang the caller (its tag: the releasing token; empty when
/// no bell woke it). Answers as [`ACQUIRE`]: `0` or the counter, `-i` when resource `i` is
/// held or reserved for another.
pub const CLAIM: &str = concat!(
    include_str!("scripts/ring.lua"),
    include_str!("scripts/claim.lua")
);

/// SHA-1 of [`CLAIM`].
pub const CLAIM_SHA1: &str = "580edb34a32203496cefbfd714ba14aedaf57e93";

/// Fair mode's release: [`RELEASE`], and each resource deleted (or found gone) is handed
/// to the head of its line. A resource reserved for the caller itself counts as gone and is
/// handed on too: a hand-off that landed on a master after the caller's claim there (the
/// claim overtook it on another connection) rang the caller, which meanwhile held the lock
/// on the others. `KEYS`: the resources, then their queues; `ARGV`: token, claim lease in
/// ms, client id, and `1` for a release proper (the caller leaves the lines first) or `0` for
/// the release of a claim that failed overall (the caller keeps its place, and heading a line
/// still, gets the resource reserved again), then the caller's ticket (with `0`: it is put
/// back at that ticket, its old place, unless another lock holds the resource there: a
/// waiter of the client served from the shared place meanwhile, whose place is spent).
/// Answers as [`RELEASE`].
pub const HANDOFF: &str = concat!(
    include_str!("scripts/ring.lua"),
    include_str!("scripts/handoff.lua")
);

/// SHA-1 of [`HANDOFF`].
pub const HANDOFF_SHA1: &str = "fd79924912bafdb90c3b4889dfce20244ed9134c";

/// Fair mode, a client leaves the queues of its resources (it gave up, or was rung for a
/// resource it no longer waits for), and passes on a reservation it holds. A client that
/// stood second, with a waiter behind it, does what that notice asked of it: behind a
/// reservation for another it has the one now second told (`+ <resource>`, as [`RING`]
/// tells the second), and a free resource (a reservation that lapsed before the leaver
/// looked again) it hands on with [`RING`], which passes a lapsed head by. `KEYS`: the
/// resources, then their queues; `ARGV`: client id, claim lease in ms. Answers how many
/// reservations it passed on.
pub const LEAVE: &str = concat!(
    include_str!("scripts/ring.lua"),
    include_str!("scripts/leave.lua")
);

/// SHA-1 of [`LEAVE`].
pub const LEAVE_SHA1: &str = "74481e5dbfa725e748c5816bdd915b8f7af438cc";

/// The fair scripts with their digests: wait, claim, hand-off, leave, enter.
pub const FAIR: [(&str, &str); 5] = [
    (WAIT_SHA1, WAIT),
    (CLAIM_SHA1, CLAIM),
    (HANDOFF_SHA1, HANDOFF),
    (LEAVE_SHA1, LEAVE),
    (ENTER_SHA1, ENTER),
];

/// The script a digest names, if it is one of ours.
pub fn by_digest(sha: &[u8]) -> Option<&'static str> {
    ALL.iter()
        .chain(FAIR.iter())
        .find(|(digest, _)| digest.as_bytes() == sha)
        .map(|(_, body)| *body)
}

/// Whether an error reply is the server saying it does not have the script cached.
pub fn is_noscript(msg: &[u8]) -> bool {
    msg.starts_with(b"NOSCRIPT")
}

/// Whether a reply is the error of an `FCALL` whose function is not loaded.
pub fn is_no_function(reply: &resp::Frame) -> bool {
    matches!(reply.without_attributes(), resp::Frame::Error(m) if m.starts_with(b"ERR Function not found"))
}

/// Whether a reply is a `NOSCRIPT` error.
pub fn is_noscript_reply(reply: &resp::Frame) -> bool {
    matches!(reply.without_attributes(), resp::Frame::Error(m) if is_noscript(m))
}
