//! `PUBLISH` and `SUBSCRIBE`, as fair mode's bells use them: a client subscribes each of its
//! connections (RESP3) to its own channel, and the hand-off scripts publish on the channel of
//! the waiter they ring.
//!
//! On a RESP3 connection, `SUBSCRIBE` is answered by a push per channel (`>3 subscribe
//! <channel> <count>`, the count of channels the connection is subscribed to), and the
//! connection goes on running any command. `PUBLISH` answers how many connections are
//! subscribed to the channel and writes `>3 message <channel> <payload>` on each at once: on
//! the publishing connection itself (a script's `PUBLISH` to its caller's channel) before the
//! command's reply, as Redis 7.0 does. Subscriptions go with their connection, and with every
//! connection at a crash. `SUBSCRIBE` on a RESP2 connection (which then runs nothing but the
//! pub/sub commands) is not simulated: the core subscribes only once the server agreed to
//! RESP3. Channel ACLs are not simulated (every user may use every channel, as the default
//! user may).

use bytes::Bytes;

use super::keyspace::Ex;
use super::reply::{encode_push3, Reply};
use super::Master;

/// `PUBLISH channel message`: how many connections got it.
pub(crate) fn publish(m: &mut Master, ex: &mut Ex, channel: &[u8], message: &[u8]) -> i64 {
    let defer = m.profile.server.defers_own_messages();
    let mut n = 0;
    for (id, conn) in m.conns.iter_mut() {
        if conn.closed || !conn.channels.iter().any(|c| c.as_ref() == channel) {
            continue;
        }
        n += 1;
        if conn.resp3 {
            if defer && id == ex.conn {
                ex.messages.push((
                    Bytes::copy_from_slice(channel),
                    Bytes::copy_from_slice(message),
                ));
            } else {
                encode_push3(b"message", channel, message, &mut conn.out);
                conn.check_output();
            }
        }
    }
    n
}

/// `SUBSCRIBE channel...` on the command's connection: a push per channel.
pub(crate) fn subscribe(m: &mut Master, ex: &mut Ex, channels: &[&[u8]]) -> Reply {
    let Some(conn) = m.conns.get_mut(&ex.conn) else {
        return Reply::err("ERR sim: no connection");
    };
    if !conn.resp3 {
        return Reply::err("ERR sim: SUBSCRIBE on a RESP2 connection is not simulated");
    }
    let mut last = None;
    for ch in channels {
        if !conn.channels.iter().any(|c| c[..] == **ch) {
            conn.channels.push(Bytes::copy_from_slice(ch));
        }
        let count = Reply::Int(i64::try_from(conn.channels.len()).unwrap_or(i64::MAX));
        let push = Reply::Push(vec![Reply::text("subscribe"), Reply::bulk(*ch), count]);
        // Every confirmation but the last is written here; the last is the command's reply.
        if let Some(earlier) = last.replace(push) {
            earlier.encode(true, &mut conn.out);
        }
    }
    last.unwrap_or(Reply::Null)
}
