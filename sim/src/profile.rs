//! What a simulated master is: the server kind and version (which commands it has, what its
//! `HELLO` says, the texts of its errors), its ACL users, and its eviction policy.
//!
//! The error texts are those the servers send, as `tests/model_vs_real.rs` checks against the
//! servers installed here (Redis 7.0 and Valkey 9.1). Redis 6.2's and 8.4's are written from
//! their sources and not checked against a binary: the core reads only their prefixes
//! (`NOPERM`, `ERR unknown command`, `NOSCRIPT`, `ERR Function not found`) and the `INCR`
//! messages inside a script's error, which every version carries.

/// A server kind and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Server {
    /// Redis 6.2: scripts, no functions, no native compare-and-delete.
    Redis62,
    /// Redis 7.0: scripts and functions, no native compare-and-delete.
    Redis70,
    /// Redis 8.4: `DELEX key IFEQ value` and `SET ... IFEQ`.
    Redis84,
    /// Valkey 9.1: `DELIFEQ key value` and `SET ... IFEQ`.
    Valkey91,
}

impl Server {
    /// The `server` field of `HELLO`.
    pub fn name(self) -> &'static str {
        match self {
            Server::Valkey91 => "valkey",
            _ => "redis",
        }
    }

    /// The `version` field of `HELLO`.
    pub fn version(self) -> &'static str {
        match self {
            Server::Redis62 => "6.2.14",
            Server::Redis70 => "7.0.15",
            Server::Redis84 => "8.4.0",
            Server::Valkey91 => "9.1.2",
        }
    }

    /// Whether it has `FUNCTION` and `FCALL` (Redis 7+, Valkey).
    pub fn has_functions(self) -> bool {
        self != Server::Redis62
    }

    /// Whether it has Valkey's `DELIFEQ`.
    pub fn has_delifeq(self) -> bool {
        self == Server::Valkey91
    }

    /// Whether it has Redis' `DELEX`.
    pub fn has_delex(self) -> bool {
        self == Server::Redis84
    }

    /// Whether `SET` takes `IFEQ`.
    pub fn has_set_ifeq(self) -> bool {
        matches!(self, Server::Redis84 | Server::Valkey91)
    }

    /// Whether an invalidation of a key written by the tracking connection itself comes after
    /// the reply to the write (Redis 7.0 and later, Valkey), rather than before it (6.2).
    pub(crate) fn defers_own_invalidations(self) -> bool {
        self != Server::Redis62
    }

    /// Whether a message a command publishes to a channel its own connection subscribes to
    /// is pushed after the command's reply (Valkey 9.1) rather than before it (Redis 7.0, as
    /// held to the binary; 6.2 and 8.4 assumed so).
    pub(crate) fn defers_own_messages(self) -> bool {
        self == Server::Valkey91
    }

    /// Whether a read inside a script, on a connection whose reads are tracked, remembers
    /// every key the script's command declared (Redis 6.2 and 7.0 take the keys of the
    /// caller's command) rather than the key read (Valkey 9.1; Redis 8.4 assumed so, not
    /// checked against a binary).
    pub(crate) fn tracks_declared_script_keys(self) -> bool {
        matches!(self, Server::Redis62 | Server::Redis70)
    }

    /// `EVALSHA` of a digest the server does not have.
    pub(crate) fn noscript(self) -> &'static str {
        match self {
            Server::Valkey91 => "NOSCRIPT No matching script.",
            _ => "NOSCRIPT No matching script. Please use EVAL.",
        }
    }

    /// A command the server does not have (or one renamed away), with its arguments quoted
    /// up to 128 bytes, as `processCommand` writes it.
    pub(crate) fn unknown_command(self, name: &[u8], args: &[&[u8]]) -> String {
        let (open, close) = if self == Server::Redis62 {
            ("`", "`, ")
        } else {
            ("'", "' ")
        };
        let mut quoted = String::new();
        for a in args {
            if quoted.len() >= 128 {
                break;
            }
            let room = 128 - quoted.len();
            let a = String::from_utf8_lossy(&a[..a.len().min(room)]);
            quoted.push_str(open);
            quoted.push_str(&a);
            quoted.push_str(close);
        }
        let name = String::from_utf8_lossy(&name[..name.len().min(128)]);
        format!("ERR unknown command {open}{name}{open}, with args beginning with: {quoted}")
    }

    /// A subcommand the container command `cmd` does not have.
    pub(crate) fn unknown_subcommand(self, cmd: &str, sub: &[u8]) -> String {
        let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]);
        let cmd = cmd.to_ascii_uppercase();
        match self {
            Server::Redis62 => format!(
                "ERR Unknown subcommand or wrong number of arguments for '{sub}'. Try {cmd} HELP."
            ),
            _ => format!("ERR unknown subcommand '{sub}'. Try {cmd} HELP."),
        }
    }

    /// The wrong number of arguments for `fullname` (`get`, `script|load`).
    pub(crate) fn arity(self, fullname: &str, sub: Option<&[u8]>) -> String {
        match (self, sub) {
            (Server::Redis62, Some(sub)) => {
                let cmd = fullname.split('|').next().unwrap_or(fullname);
                self.unknown_subcommand(cmd, sub)
            }
            _ => format!("ERR wrong number of arguments for '{fullname}' command"),
        }
    }

    /// An ACL's refusal of `fullname` (`evalsha`, `script|load`) to `user`.
    pub(crate) fn noperm(self, user: &str, fullname: &str) -> String {
        match self {
            Server::Redis62 => {
                let top = fullname.split('|').next().unwrap_or(fullname);
                format!(
                    "NOPERM this user has no permissions to run the '{top}' command or its subcommand"
                )
            }
            Server::Redis70 => {
                format!("NOPERM this user has no permissions to run the '{fullname}' command")
            }
            Server::Redis84 | Server::Valkey91 => {
                format!("NOPERM User {user} has no permissions to run the '{fullname}' command")
            }
        }
    }

    /// The error a script (`EVAL`/`EVALSHA` of digest `sha`, or `FCALL` of function `fname`)
    /// returns when a `redis.call` at `line` of its body failed with `msg` (`ERR ...`).
    pub(crate) fn script_error(self, msg: &str, by: &ScriptName<'_>, line: u32) -> String {
        match (self, by) {
            (Server::Redis62, ScriptName::Eval(sha)) => {
                let sha = String::from_utf8_lossy(sha);
                format!(
                    "ERR Error running script (call to f_{sha}): @user_script:{line}: @user_script: {line}: {msg}"
                )
            }
            (Server::Valkey91, ScriptName::Eval(_)) => {
                format!("{msg} script: on @user_script:{line}.")
            }
            (Server::Valkey91, ScriptName::Function(_, lines)) => {
                format!("{msg} script: on @user_function:{}.", lines.of(line))
            }
            (_, ScriptName::Eval(sha)) => {
                let sha = String::from_utf8_lossy(sha);
                format!("{msg} script: {sha}, on @user_script:{line}.")
            }
            (_, ScriptName::Function(f, lines)) => {
                format!("{msg} script: {f}, on @user_function:{}.", lines.of(line))
            }
        }
    }
}

/// How a running script is named in its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScriptName<'a> {
    /// Run by `EVAL` or `EVALSHA`: its digest (lowercase hex, as cached).
    Eval(&'a [u8]),
    /// Run by `FCALL`: the function's name, and where its lines are in its library (errors
    /// name the library's line).
    Function(&'a str, crate::scripts::Lines),
}

/// What an ACL denies a user, beyond which every command and key is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Denied {
    /// Nothing (`+@all`).
    #[default]
    Nothing,
    /// All scripting (`+@all -@scripting`): `EVAL`, `EVALSHA`, `FCALL`, `SCRIPT`, `FUNCTION`.
    Scripting,
    /// Scripts but not functions (`+@all -eval -evalsha -script`).
    Eval,
    /// The native commands (`+@all -delifeq` on Valkey, `-delex` on Redis).
    Native,
}

impl Denied {
    /// Whether the command `top` (lowercase) is denied.
    pub(crate) fn denies(self, top: &str) -> bool {
        match self {
            Denied::Nothing => false,
            Denied::Scripting => {
                matches!(top, "eval" | "evalsha" | "fcall" | "script" | "function")
            }
            Denied::Eval => matches!(top, "eval" | "evalsha" | "script"),
            Denied::Native => matches!(top, "delifeq" | "delex"),
        }
    }
}

/// An ACL user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its name (`default` for the default user).
    pub name: String,
    /// Its password; `None` accepts any (`nopass`).
    pub password: Option<Vec<u8>>,
    /// What it may not run.
    pub denied: Denied,
}

impl User {
    /// A user `name` with password `password`, denied `denied`.
    pub fn new(name: &str, password: &str, denied: Denied) -> User {
        User {
            name: name.into(),
            password: Some(password.as_bytes().to_vec()),
            denied,
        }
    }

    /// Whether `password` logs this user in.
    pub(crate) fn accepts(&self, password: &[u8]) -> bool {
        self.password.as_deref().is_none_or(|p| p == password)
    }
}

/// A simulated master's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The server kind and version.
    pub server: Server,
    /// The default user: without a password (`nopass`) a new connection is logged in as it;
    /// with one (`requirepass`), a connection must `AUTH` first.
    pub default_user: User,
    /// Other ACL users, each reached by `AUTH name password` (or `HELLO ... AUTH`).
    pub users: Vec<User>,
    /// What `CONFIG GET maxmemory-policy` answers.
    pub maxmemory_policy: String,
}

impl Profile {
    /// A server of kind `server`, everything allowed to the default user, no password,
    /// `noeviction`.
    pub fn new(server: Server) -> Profile {
        Profile {
            server,
            default_user: User {
                name: "default".into(),
                password: None,
                denied: Denied::Nothing,
            },
            users: Vec::new(),
            maxmemory_policy: "noeviction".into(),
        }
    }

    /// Redis 6.2.
    pub fn redis_6_2() -> Profile {
        Profile::new(Server::Redis62)
    }

    /// Redis 7.0.
    pub fn redis_7_0() -> Profile {
        Profile::new(Server::Redis70)
    }

    /// Redis 8.4.
    pub fn redis_8_4() -> Profile {
        Profile::new(Server::Redis84)
    }

    /// Valkey 9.1.
    pub fn valkey_9_1() -> Profile {
        Profile::new(Server::Valkey91)
    }

    /// The same, with the default user denied `denied`: every connection that does not log in
    /// as another user is refused those commands (the simulator's "ACL user denied scripting"
    /// and "denied EVAL" profiles).
    pub fn denying(mut self, denied: Denied) -> Profile {
        self.default_user.denied = denied;
        self
    }

    /// The same, with another ACL user.
    pub fn with_user(mut self, user: User) -> Profile {
        self.users.push(user);
        self
    }

    /// The same, with a password for the default user (`requirepass`).
    pub fn with_password(mut self, password: &str) -> Profile {
        self.default_user.password = Some(password.as_bytes().to_vec());
        self
    }

    /// The same, with another eviction policy.
    pub fn with_maxmemory_policy(mut self, policy: &str) -> Profile {
        self.maxmemory_policy = policy.into();
        self
    }
}
