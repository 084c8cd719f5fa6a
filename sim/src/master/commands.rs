//! The command table, and the checks every command passes before it runs, in Redis' order:
//! the command exists (on this server kind), the subcommand exists, the number of arguments,
//! the connection is logged in, the user's ACL allows it.

use super::conn::Login;
use super::keyspace::Ex;
use super::reply::Reply;
use super::{pubsub, scripts, session, strings, zset, Master};
use crate::profile::{Server, User};

/// Which command a [`Spec`] is: what [`run`] runs, without comparing names again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Get,
    Set,
    Pttl,
    Del,
    Incr,
    Pexpire,
    Ping,
    Select,
    Zadd,
    Zrange,
    Zrem,
    Zscore,
    Zcard,
    Publish,
    Subscribe,
    Eval,
    Evalsha,
    Fcall,
    Delifeq,
    Delex,
    Auth,
    Hello,
    Script,
    Function,
    Client,
    Config,
    Mget,
}

/// One command: its name, arity (Redis' convention: `n` exactly, `-n` at least), its
/// subcommands with theirs, whether it runs before login, and the servers that have it.
struct Spec {
    id: Cmd,
    name: &'static str,
    arity: i32,
    subs: &'static [(&'static str, i32)],
    no_auth: bool,
    has: fn(Server) -> bool,
}

fn everywhere(_: Server) -> bool {
    true
}

const fn cmd(id: Cmd, name: &'static str, arity: i32) -> Spec {
    Spec {
        id,
        name,
        arity,
        subs: &[],
        no_auth: false,
        has: everywhere,
    }
}

const TABLE: &[Spec] = &[
    cmd(Cmd::Get, "get", 2),
    cmd(Cmd::Set, "set", -3),
    cmd(Cmd::Pttl, "pttl", 2),
    cmd(Cmd::Del, "del", -2),
    cmd(Cmd::Incr, "incr", 2),
    cmd(Cmd::Pexpire, "pexpire", -3),
    cmd(Cmd::Ping, "ping", -1),
    cmd(Cmd::Select, "select", 2),
    cmd(Cmd::Zadd, "zadd", -4),
    cmd(Cmd::Zrange, "zrange", -4),
    cmd(Cmd::Zrem, "zrem", -3),
    cmd(Cmd::Zscore, "zscore", 3),
    cmd(Cmd::Zcard, "zcard", 2),
    cmd(Cmd::Publish, "publish", 3),
    cmd(Cmd::Subscribe, "subscribe", -2),
    cmd(Cmd::Eval, "eval", -3),
    cmd(Cmd::Evalsha, "evalsha", -3),
    Spec {
        has: Server::has_functions,
        ..cmd(Cmd::Fcall, "fcall", -3)
    },
    Spec {
        has: Server::has_delifeq,
        ..cmd(Cmd::Delifeq, "delifeq", 3)
    },
    Spec {
        has: Server::has_delex,
        ..cmd(Cmd::Delex, "delex", -2)
    },
    Spec {
        no_auth: true,
        ..cmd(Cmd::Auth, "auth", -2)
    },
    Spec {
        no_auth: true,
        ..cmd(Cmd::Hello, "hello", -1)
    },
    Spec {
        subs: &[("load", 3), ("flush", -2)],
        ..cmd(Cmd::Script, "script", -2)
    },
    Spec {
        subs: &[("load", -3), ("flush", -2)],
        has: Server::has_functions,
        ..cmd(Cmd::Function, "function", -2)
    },
    Spec {
        subs: &[("tracking", -3), ("caching", 3), ("id", 2)],
        ..cmd(Cmd::Client, "client", -2)
    },
    Spec {
        subs: &[("get", -3)],
        ..cmd(Cmd::Config, "config", -2)
    },
    cmd(Cmd::Mget, "mget", -2),
];

/// The table's entry for the command named `name` (in any case): a `match` on the name in
/// lowercase, not a walk of the table (every command is looked up here).
fn spec_of(name: &[u8]) -> Option<&'static Spec> {
    // No command's name is longer; a longer word is none.
    let mut buf = [0u8; 16];
    let low = buf.get_mut(..name.len())?;
    low.copy_from_slice(name);
    low.make_ascii_lowercase();
    let i = match &*low {
        b"get" => 0,
        b"set" => 1,
        b"pttl" => 2,
        b"del" => 3,
        b"incr" => 4,
        b"pexpire" => 5,
        b"ping" => 6,
        b"select" => 7,
        b"zadd" => 8,
        b"zrange" => 9,
        b"zrem" => 10,
        b"zscore" => 11,
        b"zcard" => 12,
        b"publish" => 13,
        b"subscribe" => 14,
        b"eval" => 15,
        b"evalsha" => 16,
        b"fcall" => 17,
        b"delifeq" => 18,
        b"delex" => 19,
        b"auth" => 20,
        b"hello" => 21,
        b"script" => 22,
        b"function" => 23,
        b"client" => 24,
        b"config" => 25,
        b"mget" => 26,
        _ => return None,
    };
    TABLE.get(i)
}

fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = i64::try_from(argc).unwrap_or(i64::MAX);
    let arity = i64::from(arity);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// Runs one command (`args` is never empty) and returns its reply. (Its one caller,
/// `Master::execute`, runs every command: inlined there, as it was before the code around it
/// grew past the compiler's own limit.)
#[inline(always)]
pub(crate) fn dispatch<'a>(m: &mut Master, ex: &mut Ex<'a>, args: &'a [&'a [u8]]) -> Reply {
    let server = m.profile.server;
    let Some(spec) = spec_of(args[0]).filter(|s| (s.has)(server)) else {
        return Reply::Error(server.unknown_command(args[0], &args[1..]));
    };
    let mut arity = spec.arity;
    let mut sub = None;
    if let (false, Some(given)) = (spec.subs.is_empty(), args.get(1)) {
        match spec
            .subs
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(given))
        {
            Some((n, a)) => {
                arity = *a;
                sub = Some(*n);
            }
            None => return Reply::Error(server.unknown_subcommand(spec.name, given)),
        }
    }
    // The command's full name (`client|caching`), for the errors that say it.
    let fullname = || match sub {
        Some(n) => format!("{}|{n}", spec.name),
        None => spec.name.to_string(),
    };
    if !arity_ok(arity, args.len()) {
        let given = sub.and(args.get(1)).copied();
        return Reply::Error(server.arity(&fullname(), given));
    }
    match m.user(ex) {
        None if !spec.no_auth => return Reply::err("NOAUTH Authentication required."),
        Some(user) if user.denied.denies(spec.name) => {
            return Reply::Error(server.noperm(&user.name, &fullname()));
        }
        _ => {}
    }
    run(m, ex, spec, sub, args)
}

/// Runs a command that passed the checks.
fn run<'a>(
    m: &mut Master,
    ex: &mut Ex<'a>,
    spec: &Spec,
    sub: Option<&str>,
    args: &'a [&'a [u8]],
) -> Reply {
    let done = |r: Result<Reply, String>| r.unwrap_or_else(Reply::Error);
    match (spec.id, sub) {
        (Cmd::Get, _) => strings::get(m, ex, args[1]),
        (Cmd::Mget, _) => strings::mget(m, ex, &args[1..]),
        (Cmd::Set, _) => done(strings::set(m, ex, args)),
        (Cmd::Pttl, _) => strings::pttl(m, ex, args[1]),
        (Cmd::Del, _) => strings::del(m, ex, &args[1..]),
        (Cmd::Incr, _) => done(strings::incr(m, ex, args[1]).map(Reply::Int)),
        (Cmd::Pexpire, _) => done(strings::pexpire(m, ex, args).map(Reply::Int)),
        (Cmd::Delifeq, _) => strings::delifeq(m, ex, args[1], args[2]),
        (Cmd::Delex, _) => done(strings::delex(m, ex, args)),
        (Cmd::Ping, _) => session::ping(args),
        (Cmd::Select, _) => session::select(m, ex, args[1]),
        (Cmd::Zadd, _) => done(zset::zadd(m, ex, args)),
        (Cmd::Zrange, _) => done(zset::zrange(m, ex, args)),
        (Cmd::Zrem, _) => done(zset::zrem(m, ex, args[1], &args[2..]).map(Reply::Int)),
        (Cmd::Zscore, _) => done(zset::zscore(m, ex, args[1], args[2])),
        (Cmd::Zcard, _) => done(zset::zcard(m, ex, args[1])),
        (Cmd::Publish, _) => Reply::Int(pubsub::publish(m, ex, args[1], args[2])),
        (Cmd::Subscribe, _) => pubsub::subscribe(m, ex, &args[1..]),
        (Cmd::Auth, _) => session::auth(m, ex, args),
        (Cmd::Hello, _) => session::hello(m, ex, args),
        (Cmd::Client, Some(sub)) => session::client(m, ex, sub, args),
        (Cmd::Config, _) => session::config_get(m, ex, &args[2..]),
        (Cmd::Eval, _) => scripts::eval(m, ex, args),
        (Cmd::Evalsha, _) => scripts::evalsha(m, ex, args),
        (Cmd::Fcall, _) => scripts::fcall(m, ex, args),
        (Cmd::Script, Some(sub)) => scripts::script(m, sub, args),
        (Cmd::Function, Some(sub)) => scripts::function(m, sub, args),
        _ => Reply::err(format!("ERR sim: {} is not simulated", spec.name)),
    }
}

impl Master {
    /// The user the command's connection is logged in as, if it is.
    pub(crate) fn user(&self, ex: &Ex) -> Option<&User> {
        match self.conns.get(&ex.conn)?.login? {
            Login::Default => Some(&self.profile.default_user),
            Login::User(i) => self.profile.users.get(i),
        }
    }
}

#[cfg(test)]
mod table_tests {
    use super::{spec_of, TABLE};

    /// The lookup finds every command of the table by its name, in any case, and nothing else.
    #[test]
    fn every_command_is_found_by_its_name() {
        for spec in TABLE {
            for name in [
                spec.name.to_string(),
                spec.name.to_ascii_uppercase(),
                format!(
                    "{}{}",
                    &spec.name[..1].to_ascii_uppercase(),
                    &spec.name[1..]
                ),
            ] {
                let found = spec_of(name.as_bytes()).map(|s| s.name);
                assert_eq!(found, Some(spec.name), "{name}");
            }
        }
        for other in [
            "",
            "gets",
            "ge",
            "getx",
            "delifeqx",
            "a-very-long-command-name",
        ] {
            assert!(spec_of(other.as_bytes()).is_none(), "{other}");
        }
    }
}
