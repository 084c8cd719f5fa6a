//! Where a master listens and how to log in: `redis://`, `rediss://`, `unix://` addresses,
//! parsed, resolved and printed with the password redacted.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use super::DEFAULT_PORT;
use crate::error::ConfigError;

/// Where a master listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A TCP address, resolved when the configuration was built.
    Tcp(SocketAddr),
    /// A Unix domain socket's path.
    Unix(PathBuf),
}

/// One master: where it listens and how to log in.
///
/// Parsed from `redis://[user[:password]@]host[:port][/db]` or plain `host[:port]`; IPv6 hosts
/// go in brackets (`[::1]:7000`). User and password may be percent-encoded, and need not be:
/// the userinfo ends at the last `@`, so a password may hold `@`, `/`, `?`, `#` or `:`. A Unix
/// domain socket is `unix:///path/to/redis.sock` (or `redis+unix:///path`), with the database,
/// user and password as query parameters, `unix:///run/redis.sock?db=2&user=app&password=pw`,
/// or the login before the path, `unix://app:pw@/run/redis.sock`, where the userinfo ends at
/// the last `@/` (so a `@/` in the path or query must then be written `%40/`). Neither
/// `Display` nor `Debug` nor an error shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddr {
    /// The host as written (name or IP literal, without brackets); for a Unix socket, its path.
    pub host: String,
    /// The port (0 for a Unix socket).
    pub port: u16,
    /// The ACL user, if any.
    pub user: Option<String>,
    /// The password, if any (`AUTH password` alone, or `AUTH user password` with a user).
    pub password: Option<String>,
    /// The database to `SELECT`, if not 0.
    pub db: u32,
    /// Whether connections use TLS (`rediss://`; feature `tls`).
    pub tls: bool,
    /// Where connections go.
    pub(crate) endpoint: Endpoint,
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeAddr({self})")
    }
}

impl fmt::Display for NodeAddr {
    /// The address without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Endpoint::Unix(path) = &self.endpoint {
            write!(f, "unix://{}", path.display())?;
            if self.db != 0 {
                write!(f, "?db={}", self.db)?;
            }
            return Ok(());
        }
        if self.tls {
            f.write_str("rediss://")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "{}:{}", self.host, self.port)?;
        }
        if self.db != 0 {
            write!(f, "/{}", self.db)?;
        }
        Ok(())
    }
}

impl NodeAddr {
    /// Parses and resolves an address.
    ///
    /// # Examples
    /// ```
    /// use redlock_core::NodeAddr;
    /// let a = NodeAddr::parse("redis://app:s%40cret@127.0.0.1:7001/2").unwrap();
    /// assert_eq!((a.port, a.db), (7001, 2));
    /// assert_eq!(a.user.as_deref(), Some("app"));
    /// assert_eq!(a.password.as_deref(), Some("s@cret"));
    /// assert_eq!(a.to_string(), "127.0.0.1:7001/2");
    /// assert_eq!(NodeAddr::parse("[::1]:7002").unwrap().port, 7002);
    /// ```
    pub fn parse(input: &str) -> Result<NodeAddr, ConfigError> {
        let bad = |reason| ConfigError::InvalidAddress {
            addr: redact(input),
            reason,
        };
        let input = input.trim();
        let parts = Parts::of(input);
        let tls = match parts.scheme {
            "unix://" | "redis+unix://" => return NodeAddr::parse_unix(input, &parts),
            "" | "redis://" => false,
            // (A client without TLS refuses such a node when it is built.)
            "rediss://" => true,
            _ => {
                return Err(bad(
                    "only redis://, rediss://, unix:// and redis+unix:// URLs are supported",
                ))
            }
        };
        let (userinfo, hostpart) = (parts.userinfo, parts.rest);
        let (hostport, db) = match hostpart.split_once('/') {
            Some((hp, "")) => (hp, 0),
            Some((hp, db)) => (
                hp,
                db.parse::<u32>()
                    .map_err(|_| bad("database is not a number"))?,
            ),
            None => (hostpart, 0),
        };
        let (host, port) = host_and_port(hostport, &bad)?;
        let (user, password) = credentials(userinfo, &bad)?;
        let socket = (host, port)
            .to_socket_addrs()
            .map_err(|e| ConfigError::Resolve {
                addr: redact(input),
                kind: e.kind(),
            })?
            .next()
            .ok_or(ConfigError::Resolve {
                addr: redact(input),
                kind: std::io::ErrorKind::NotFound,
            })?;
        Ok(NodeAddr {
            host: host.to_string(),
            port,
            user,
            password,
            db,
            tls,
            endpoint: Endpoint::Tcp(socket),
        })
    }

    /// `unix://[user[:password]@]/path?db=N&user=U&password=P`, cut into `parts`.
    fn parse_unix(input: &str, parts: &Parts<'_>) -> Result<NodeAddr, ConfigError> {
        let bad = |reason| ConfigError::InvalidAddress {
            addr: redact(input),
            reason,
        };
        let (userinfo, rest) = (parts.userinfo, parts.rest);
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        if !path.starts_with('/') {
            return Err(bad(
                "a Unix socket path must be absolute: unix:///path/to/redis.sock",
            ));
        }
        let path = percent_decode(path).ok_or(bad("bad percent-encoding"))?;
        let (mut user, mut password) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (
                    Some(percent_decode(user).ok_or(bad("bad percent-encoding"))?)
                        .filter(|u| !u.is_empty()),
                    Some(percent_decode(pass).ok_or(bad("bad percent-encoding"))?),
                ),
                None => (
                    None,
                    Some(percent_decode(u).ok_or(bad("bad percent-encoding"))?),
                ),
            },
        };
        let mut db = 0;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or(bad("query parameters are key=value"))?;
            let v = percent_decode(v).ok_or(bad("bad percent-encoding"))?;
            match k {
                "db" => db = v.parse().map_err(|_| bad("database is not a number"))?,
                "user" => user = Some(v),
                "password" | "pass" => password = Some(v),
                _ => return Err(bad("unknown query parameter (db, user, password)")),
            }
        }
        Ok(NodeAddr {
            host: path.clone(),
            port: 0,
            user,
            password,
            db,
            tls: false,
            endpoint: Endpoint::Unix(PathBuf::from(path)),
        })
    }

    /// Where connections go: a resolved TCP address, or a Unix socket's path.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// The host and port of `hostport` (`host`, `host:port`, `[v6]`, `[v6]:port`), the port 6379
/// when none is given; `bad` makes the error.
fn host_and_port<'a>(
    hostport: &'a str,
    bad: &dyn Fn(&'static str) -> ConfigError,
) -> Result<(&'a str, u16), ConfigError> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or(bad("unclosed '[' in host"))?;
        match after {
            "" => (h, DEFAULT_PORT),
            p => (
                h,
                p.strip_prefix(':')
                    .ok_or(bad("expected ':' after ']'"))?
                    .parse()
                    .map_err(|_| bad("port is not a number in 1..=65535"))?,
            ),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse()
                    .map_err(|_| bad("port is not a number in 1..=65535"))?,
            ),
            None => (hostport, DEFAULT_PORT),
        }
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    if port == 0 {
        return Err(bad("port is not a number in 1..=65535"));
    }
    Ok((host, port))
}

/// The user and password of a URL's userinfo, percent-decoded: `user:password`, `:password`,
/// or a lone word, taken as a password as redis-cli and most clients do.
fn credentials(
    userinfo: Option<&str>,
    bad: &dyn Fn(&'static str) -> ConfigError,
) -> Result<(Option<String>, Option<String>), ConfigError> {
    let Some(u) = userinfo else {
        return Ok((None, None));
    };
    let (user, pass) = match u.split_once(':') {
        Some((user, pass)) => (user, Some(pass)),
        None => (u, None),
    };
    let user = percent_decode(user).ok_or(bad("bad percent-encoding"))?;
    let pass = pass
        .map(|p| percent_decode(p).ok_or(bad("bad percent-encoding")))
        .transpose()?;
    Ok(match (user.is_empty(), pass) {
        // `redis://:password@host`: password only.
        (true, p) => (None, p),
        // `redis://password@host` (no colon) is taken as a password.
        (false, None) => (None, Some(user)),
        (false, Some(p)) => (Some(user), Some(p)),
    })
}

/// An address cut where [`NodeAddr::parse`] cuts it: the scheme with its `://` (empty when
/// there is none), the userinfo (`user:password`, or a password alone) and what follows the
/// `@` that ends it. [`redact`] cuts in the same place, so that whatever the parser takes for
/// a password is what redaction blanks, whatever characters it holds.
struct Parts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    rest: &'a str,
}

impl<'a> Parts<'a> {
    fn of(input: &'a str) -> Parts<'a> {
        // A scheme is a letter, then letters, digits, `+`, `-` or `.` (RFC 3986); a `://`
        // after anything else is part of a password in a plain `user:password@host:port`.
        let is_scheme = |s: &str| {
            let mut c = s.chars();
            c.next().is_some_and(|f| f.is_ascii_alphabetic())
                && c.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        };
        let (scheme, after) = match input.find("://") {
            Some(i) if is_scheme(&input[..i]) => input.split_at(i + 3),
            _ => ("", input),
        };
        let at = if matches!(scheme, "unix://" | "redis+unix://") {
            // The path is absolute: right after the scheme when there is no userinfo, else
            // after the last `@/` (the last `@` when there is none, and the path is refused).
            // A `@` followed by `/` in the path or the query must then be written `%40`.
            if after.starts_with('/') {
                None
            } else {
                after.rfind("@/").or_else(|| after.rfind('@'))
            }
        } else {
            // Host, port and database hold no `@`: the last one ends the userinfo, and the
            // password may hold any character, `@`, `/`, `?` and `#` included.
            after.rfind('@')
        };
        match at {
            Some(at) => Parts {
                scheme,
                userinfo: Some(&after[..at]),
                rest: &after[at + 1..],
            },
            None => Parts {
                scheme,
                userinfo: None,
                rest: after,
            },
        }
    }
}

/// The address with its password blanked (the user, if any, kept), for error messages and
/// `Debug`: `redis://app:***@host:port`, `unix:///path?password=***`.
pub fn redact(input: &str) -> String {
    let parts = Parts::of(input.trim());
    let mut out = parts.scheme.to_string();
    if let Some(userinfo) = parts.userinfo {
        // `redis://secret@host`: a lone word before the `@` is the password.
        if let Some((user, _)) = userinfo.split_once(':') {
            out.push_str(user);
            out.push(':');
        }
        out.push_str("***@");
    }
    match parts.rest.split_once('?') {
        Some((before, query)) => {
            // `unix:///path?password=secret`: the password's value blanked.
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key @ ("password" | "pass"), _)) => format!("{key}=***"),
                    _ => pair.to_string(),
                })
                .collect();
            out.push_str(before);
            out.push('?');
            out.push_str(&query.join("&"));
        }
        None => out.push_str(parts.rest),
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
