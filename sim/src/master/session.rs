//! The connection's own commands: `HELLO` (with `AUTH` and `SETNAME`), `AUTH`, `SELECT`,
//! `PING`, `CLIENT TRACKING` / `CACHING` / `ID`, `CONFIG GET`.

use super::conn::{Login, Tracking};
use super::keyspace::Ex;
use super::reply::Reply;
use super::strings::{parse_i64, NOT_AN_INTEGER, SYNTAX};
use super::Master;
use crate::profile::Server;

/// The databases a master has (`databases 16`).
pub(crate) const DATABASES: i64 = 16;

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

pub(crate) fn ping(args: &[&[u8]]) -> Reply {
    match args {
        [_] => Reply::Simple("PONG"),
        [_, msg] => Reply::bulk(msg),
        _ => Reply::err("ERR wrong number of arguments for 'ping' command"),
    }
}

pub(crate) fn select(m: &mut Master, ex: &mut Ex, db: &[u8]) -> Reply {
    let Some(db) = parse_i64(db) else {
        return Reply::err(NOT_AN_INTEGER);
    };
    let Some(db) = u32::try_from(db).ok().filter(|d| i64::from(*d) < DATABASES) else {
        return Reply::err("ERR DB index is out of range");
    };
    if let Some(c) = m.conns.get_mut(&ex.conn) {
        c.db = db;
    }
    ex.db = db;
    Reply::OK
}

impl Master {
    /// The login `user`/`password` gives, if any.
    fn login(&self, user: &[u8], password: &[u8]) -> Option<Login> {
        let p = &self.profile;
        if user == p.default_user.name.as_bytes() {
            return p.default_user.accepts(password).then_some(Login::Default);
        }
        let i = p.users.iter().position(|u| u.name.as_bytes() == user)?;
        p.users[i].accepts(password).then_some(Login::User(i))
    }

    /// Logs the command's connection in, or says why not.
    fn log_in(&mut self, ex: &Ex, user: &[u8], password: &[u8]) -> Result<(), Reply> {
        let login = self.login(user, password).ok_or(Reply::err(WRONGPASS))?;
        if let Some(c) = self.conns.get_mut(&ex.conn) {
            c.login = Some(login);
        }
        Ok(())
    }
}

pub(crate) fn auth(m: &mut Master, ex: &mut Ex, args: &[&[u8]]) -> Reply {
    let (user, password) = match args {
        [_, password] => {
            if m.profile.default_user.password.is_none() {
                return Reply::err(
                    "ERR AUTH <password> called without any password configured for the \
                     default user. Are you sure your configuration is correct?",
                );
            }
            let name = m.profile.default_user.name.clone().into_bytes();
            (name, password)
        }
        [_, user, password] => (user.to_vec(), password),
        _ => return Reply::err(SYNTAX),
    };
    match m.log_in(ex, &user, password) {
        Ok(()) => Reply::OK,
        Err(r) => r,
    }
}

/// `HELLO [protover [AUTH user password] [SETNAME name]]`.
pub(crate) fn hello(m: &mut Master, ex: &mut Ex, args: &[&[u8]]) -> Reply {
    let mut version = None;
    if let Some(v) = args.get(1) {
        let Some(v) = parse_i64(v) else {
            return Reply::err("ERR Protocol version is not an integer or out of range");
        };
        if !(2..=3).contains(&v) {
            return Reply::err("NOPROTO unsupported protocol version");
        }
        version = Some(v);
    }
    let mut auth = None;
    let mut j = 2;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = &args[j];
        if opt.eq_ignore_ascii_case(b"auth") && more >= 2 {
            auth = Some((args[j + 1], args[j + 2]));
            j += 3;
        } else if opt.eq_ignore_ascii_case(b"setname") && more >= 1 {
            j += 2;
        } else {
            let opt = String::from_utf8_lossy(opt);
            return Reply::err(format!("ERR Syntax error in HELLO option '{opt}'"));
        }
    }
    if let Some((user, password)) = auth {
        if let Err(r) = m.log_in(ex, user, password) {
            return r;
        }
    }
    let Some(conn) = m.conns.get_mut(&ex.conn) else {
        return Reply::err("ERR sim: no connection");
    };
    if conn.login.is_none() {
        return Reply::err(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
        );
    }
    if let Some(v) = version {
        conn.resp3 = v == 3;
    }
    let proto = if conn.resp3 { 3 } else { 2 };
    hello_reply(m.profile.server, proto, ex.conn.0)
}

/// What `HELLO` says of the server.
fn hello_reply(server: Server, proto: i64, id: u64) -> Reply {
    let modules = match server {
        Server::Valkey91 => vec![Reply::Map(vec![
            (Reply::text("name"), Reply::text("lua")),
            (Reply::text("ver"), Reply::Int(1)),
            (Reply::text("path"), Reply::text("lua")),
            (Reply::text("args"), Reply::Array(Vec::new())),
        ])],
        _ => Vec::new(),
    };
    Reply::Map(vec![
        (Reply::text("server"), Reply::text(server.name())),
        (Reply::text("version"), Reply::text(server.version())),
        (Reply::text("proto"), Reply::Int(proto)),
        (
            Reply::text("id"),
            Reply::Int(i64::try_from(id).unwrap_or(i64::MAX)),
        ),
        (Reply::text("mode"), Reply::text("standalone")),
        (Reply::text("role"), Reply::text("master")),
        (Reply::text("modules"), Reply::Array(modules)),
    ])
}

pub(crate) fn client(m: &mut Master, ex: &mut Ex, sub: &str, args: &[&[u8]]) -> Reply {
    let id = ex.conn;
    let Some(conn) = m.conns.get_mut(&id) else {
        return Reply::err("ERR sim: no connection");
    };
    match sub {
        "id" => Reply::Int(i64::try_from(id.0).unwrap_or(i64::MAX)),
        "caching" => {
            let Some(t) = conn.tracking else {
                return Reply::err(
                    "ERR CLIENT CACHING can be called only when the client is in tracking mode \
                     with OPTIN or OPTOUT mode enabled",
                );
            };
            let yes = args[2].eq_ignore_ascii_case(b"yes");
            match (yes, args[2].eq_ignore_ascii_case(b"no")) {
                (true, _) if t.optin => conn.caching = true,
                (true, _) => return Reply::err(
                    "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
                ),
                (_, true) if t.optout => conn.caching = true,
                (_, true) => return Reply::err(
                    "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
                ),
                _ => return Reply::err(SYNTAX),
            }
            Reply::OK
        }
        _ => tracking(conn, args),
    }
}

/// `CLIENT TRACKING ON|OFF [OPTIN|OPTOUT] [NOLOOP]`. `REDIRECT`, `BCAST` and `PREFIX` are
/// not simulated (the core uses none).
fn tracking(conn: &mut super::conn::Conn, args: &[&[u8]]) -> Reply {
    let mut t = Tracking::default();
    for opt in &args[3..] {
        let opt = opt.to_ascii_lowercase();
        match &opt[..] {
            b"optin" => t.optin = true,
            b"optout" => t.optout = true,
            b"noloop" => t.noloop = true,
            b"redirect" | b"bcast" | b"prefix" => {
                return Reply::err("ERR sim: REDIRECT, BCAST and PREFIX are not simulated")
            }
            _ => return Reply::err(SYNTAX),
        }
    }
    if args[2].eq_ignore_ascii_case(b"on") {
        if t.optin && t.optout {
            return Reply::err("ERR You can't use both OPTIN and OPTOUT");
        }
        if let Some(old) = conn.tracking {
            if (t.optin && old.optout) || (t.optout && old.optin) {
                return Reply::err(
                    "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this \
                     client, and then re-enabling it with a different mode.",
                );
            }
        }
        conn.tracking = Some(t);
    } else if args[2].eq_ignore_ascii_case(b"off") {
        conn.tracking = None;
        conn.caching = false;
    } else {
        return Reply::err(SYNTAX);
    }
    Reply::OK
}

/// `CONFIG GET parameter...`: `maxmemory-policy` (by its name, or `*`); any other parameter
/// is not simulated and left out, as Redis leaves out those it does not have.
pub(crate) fn config_get(m: &mut Master, _ex: &mut Ex, params: &[&[u8]]) -> Reply {
    let asked = params
        .iter()
        .any(|p| p.eq_ignore_ascii_case(b"maxmemory-policy") || *p == b"*");
    let mut pairs = Vec::new();
    if asked {
        pairs.push((
            Reply::text("maxmemory-policy"),
            Reply::bulk(&m.profile.maxmemory_policy),
        ));
    }
    Reply::Map(pairs)
}
