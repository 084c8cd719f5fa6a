//! The random sequences: seeded, of the commands the core sends, over a few keys, with
//! what the comparison must know of each step.

use redlock_mux::script;
use redlock_sim::scripts::Script;
use redlock_sim::{Denied, Profile, Server, User};
use resp::Frame;

pub(crate) const BASE_SEED: u64 = 0x5eed_0025;

/// A small deterministic generator (SplitMix64): the sequences depend on the seed alone.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// What a step is, beside the command itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    /// Compared exactly.
    Exact,
    /// `PTTL`: compared within the round trips measured.
    Pttl,
    /// `HELLO`: its `id` (and `version` beyond major.minor) set aside.
    Hello,
    /// No command: a pause (milliseconds) that lets short ttls run out on both sides.
    Sleep(u64),
    /// Fair mode's wait script: `[-3 or a PTTL, the ticket]`, the `PTTL` compared as `Pttl`.
    Wait,
}

/// One step of a sequence.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub(crate) args: Vec<Vec<u8>>,
    pub(crate) kind: Kind,
}

impl Step {
    /// A step of `kind` with these arguments.
    pub(crate) fn new(kind: Kind, args: &[&[u8]]) -> Step {
        step(kind, args)
    }
}

fn step(kind: Kind, args: &[&[u8]]) -> Step {
    Step {
        args: args.iter().map(|a| a.to_vec()).collect(),
        kind,
    }
}

/// A sequence and what it needs of the comparison.
pub(crate) struct Sequence {
    pub(crate) steps: Vec<Step>,
    /// Some key got a ttl of a few milliseconds (pushes then compared as a multiset).
    pub(crate) short_ttls: bool,
}

/// The servers' users: the sim's profile and the real server's ACL rules.
pub(crate) struct Users {
    pub(crate) list: Vec<(&'static str, Denied, Vec<&'static str>)>,
}

impl Users {
    pub(crate) fn for_server(server: Server) -> Users {
        let mut list = vec![
            ("app", Denied::Eval, vec!["-eval", "-evalsha", "-script"]),
            ("noscript", Denied::Scripting, vec!["-@scripting"]),
        ];
        if server.has_delifeq() {
            list.push(("nonative", Denied::Native, vec!["-delifeq"]));
        }
        if server.has_delex() {
            list.push(("nonative", Denied::Native, vec!["-delex"]));
        }
        Users { list }
    }

    pub(crate) fn profile(&self, server: Server) -> Profile {
        self.list
            .iter()
            .fold(Profile::new(server), |p, (name, denied, _)| {
                p.with_user(User::new(name, "pw", *denied))
            })
    }

    pub(crate) fn create_on(&self, addr: &str) {
        for (name, _, rules) in &self.list {
            let mut args = vec!["ACL", "SETUSER", name, "on", ">pw", "~*", "+@all"];
            args.extend(rules.iter().copied());
            assert_eq!(
                testkit::redis(addr, &args),
                Frame::Simple("OK".into()),
                "ACL SETUSER {name}"
            );
        }
    }
}

/// The generator of one sequence's commands.
struct Gen<'a> {
    rng: Rng,
    keys: Vec<Vec<u8>>,
    counter: Vec<u8>,
    tokens: Vec<Vec<u8>>,
    users: &'a Users,
    steps: Vec<Step>,
    short_ttls: bool,
}

const FENCE_VALUES: [&str; 8] = [
    "1",
    "2",
    "7",
    "10",
    "123456",
    "9007199254740993",
    "9223372036854775806",
    "9223372036854775807",
];

impl Gen<'_> {
    fn token(&mut self) -> Vec<u8> {
        self.rng.pick(&self.tokens).clone()
    }
    fn key(&mut self) -> Vec<u8> {
        self.rng.pick(&self.keys).clone()
    }
    /// A ttl: mostly long (never reached in a sequence), sometimes a few milliseconds, after
    /// which the step gets a pause.
    fn ttl(&mut self) -> (Vec<u8>, bool) {
        if self.rng.chance(6) {
            self.short_ttls = true;
            (self.rng.range(1, 5).to_string().into_bytes(), true)
        } else {
            (
                self.rng.range(10_000, 600_000).to_string().into_bytes(),
                false,
            )
        }
    }
    fn push(&mut self, kind: Kind, args: &[&[u8]]) {
        self.steps.push(step(kind, args));
    }
    fn pause_if(&mut self, short: bool) {
        if short {
            self.steps.push(Step {
                args: Vec::new(),
                kind: Kind::Sleep(20),
            });
        }
    }

    fn set_nx(&mut self) {
        let (k, t, (ttl, short)) = (self.key(), self.token(), self.ttl());
        self.push(Kind::Exact, &[b"SET", &k, &t, b"NX", b"PX", &ttl]);
        self.pause_if(short);
    }
    fn set_ifeq(&mut self) {
        let (k, t, cmp, (ttl, short)) = (self.key(), self.token(), self.token(), self.ttl());
        self.push(Kind::Exact, &[b"SET", &k, &t, b"IFEQ", &cmp, b"PX", &ttl]);
        self.pause_if(short);
    }
    fn read(&mut self) {
        if self.rng.chance(50) {
            self.push(Kind::Exact, &[b"CLIENT", b"CACHING", b"YES"]);
        }
        let k = self.key();
        if self.rng.chance(5) {
            // A multi-key read (`MGET`, which the simulated master serves too).
            let (k2, k3) = (self.key(), self.key());
            return self.push(Kind::Exact, &[b"MGET", &k, &k2, &k3]);
        }
        match self.rng.chance(50) {
            true => self.push(Kind::Exact, &[b"GET", &k]),
            false => self.push(Kind::Pttl, &[b"PTTL", &k]),
        }
    }
    fn native_release(&mut self) {
        let (k, t) = (self.key(), self.token());
        match self.rng.chance(50) {
            true => self.push(Kind::Exact, &[b"DELIFEQ", &k, &t]),
            false => self.push(Kind::Exact, &[b"DELEX", &k, b"IFEQ", &t]),
        }
    }

    /// A call of one of the scripts, by `EVALSHA`, `EVAL` or `FCALL`.
    fn script_call(&mut self) {
        // (A semaphore's two scripts one call in ten, so that the lock scripts' paths are
        // reached as often as before them.)
        let which = if self.rng.chance(10) {
            *self.rng.pick(&[Script::Permit, Script::Slots])
        } else {
            *self.rng.pick(&[
                Script::Acquire,
                Script::Release,
                Script::Extend,
                Script::Fence,
            ])
        };
        let n = self.rng.range(1, 3) as usize;
        let mut keys: Vec<Vec<u8>> = (0..n).map(|_| self.key()).collect();
        let token = self.token();
        let mut argv = vec![token];
        let mut short = false;
        match which {
            Script::Acquire => {
                let (ttl, s) = self.ttl();
                short = s;
                argv.push(ttl);
                argv.push(n.to_string().into_bytes());
                if self.rng.chance(50) {
                    // Fenced: the counter, or now and then a lock's key (not a number).
                    let counter = if self.rng.chance(85) {
                        self.counter.clone()
                    } else {
                        self.key()
                    };
                    keys.push(counter);
                }
            }
            Script::Release => {}
            Script::Slots => argv.clear(),
            Script::Extend | Script::Permit => {
                let (ttl, s) = self.ttl();
                short = s;
                argv.push(ttl);
            }
            Script::Fence => {
                keys.truncate(2);
                keys.push(self.counter.clone());
                argv.push(self.rng.pick(&FENCE_VALUES).as_bytes().to_vec());
            }
            // Fair mode's scripts have sequences of their own (`fair.rs`).
            _ => unreachable!("only the lock scripts are drawn here"),
        }
        let i = which as usize;
        let (sha, text) = script::ALL[i];
        if self.rng.chance(15) {
            // The keys a script reads are tracked too, after CACHING YES.
            self.push(Kind::Exact, &[b"CLIENT", b"CACHING", b"YES"]);
        }
        let numkeys = keys.len().to_string().into_bytes();
        let mut args: Vec<&[u8]> = match self.rng.below(3) {
            0 => vec![b"EVALSHA", sha.as_bytes()],
            1 => vec![b"EVAL", text.as_bytes()],
            _ => vec![b"FCALL", script::FUNCTIONS[i].as_bytes()],
        };
        args.push(&numkeys);
        args.extend(keys.iter().map(|k| &k[..]));
        args.extend(argv.iter().map(|a| &a[..]));
        self.push(Kind::Exact, &args);
        self.pause_if(short);
    }

    fn admin(&mut self) {
        match self.rng.below(6) {
            0 => {
                let (_, text) = *self.rng.pick(&script::ALL);
                self.push(Kind::Exact, &[b"SCRIPT", b"LOAD", text.as_bytes()]);
            }
            1 => self.push(Kind::Exact, &[b"SCRIPT", b"FLUSH"]),
            2 | 3 => match self.rng.chance(30) {
                true => self.push(
                    Kind::Exact,
                    &[b"FUNCTION", b"LOAD", b"REPLACE", script::LIBRARY.as_bytes()],
                ),
                false => self.push(
                    Kind::Exact,
                    &[b"FUNCTION", b"LOAD", script::LIBRARY.as_bytes()],
                ),
            },
            4 => self.push(Kind::Exact, &[b"FUNCTION", b"FLUSH"]),
            _ => self.push(Kind::Exact, &[b"CONFIG", b"GET", b"maxmemory-policy"]),
        }
    }

    fn session(&mut self) {
        match self.rng.below(6) {
            0 => self.push(Kind::Exact, &[b"PING"]),
            1 => {
                let nonce = format!("redlock-sync:{}", self.rng.range(1, 1 << 20));
                self.push(Kind::Exact, &[b"PING", nonce.as_bytes()]);
            }
            2 => {
                const FORMS: [&[&[u8]]; 3] = [&[b"HELLO"], &[b"HELLO", b"2"], &[b"HELLO", b"3"]];
                let v = *self.rng.pick(&FORMS);
                self.push(Kind::Hello, v);
            }
            3 => self.login(),
            4 => {
                let db = self.rng.range(0, 1).to_string();
                self.push(Kind::Exact, &[b"SELECT", db.as_bytes()]);
            }
            _ => self.push(Kind::Exact, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]),
        }
    }

    /// `AUTH` as one of the users (or the default user), now and then with a wrong password.
    fn login(&mut self) {
        let pass: &[u8] = if self.rng.chance(15) { b"wrong" } else { b"pw" };
        let i = self.rng.below(self.users.list.len() + 1);
        let name = self.users.list.get(i).map_or("default", |u| u.0).as_bytes();
        match self.rng.below(4) {
            0 => self.push(Kind::Hello, &[b"HELLO", b"3", b"AUTH", name, pass]),
            1 => self.push(Kind::Hello, &[b"HELLO", b"2", b"AUTH", name, pass]),
            _ => self.push(Kind::Exact, &[b"AUTH", name, pass]),
        }
    }
}

/// Sequence `index`, logging in as `users`.
pub(crate) fn sequence(index: u64, users: &Users) -> Sequence {
    let mut rng = Rng(BASE_SEED ^ index.wrapping_mul(0x0100_0000_01b3));
    let nkeys = rng.range(3, 5) as usize;
    let keys = (0..nkeys)
        .map(|i| format!("s{index}:k{i}").into_bytes())
        .collect();
    let tokens = (0..rng.range(2, 3))
        .map(|i| match rng.below(3) {
            0 => format!("{:016x}{:016x}{:08x}", rng.next(), rng.next(), i).into_bytes(),
            1 => format!("t{i}").into_bytes(),
            _ => format!("tok en {i} ~!").into_bytes(),
        })
        .collect();
    let mut g = Gen {
        rng,
        keys,
        counter: format!("s{index}:fence").into_bytes(),
        tokens,
        users,
        steps: Vec::new(),
        short_ttls: false,
    };
    if g.rng.chance(40) {
        g.login();
    }
    match g.rng.below(3) {
        0 => {}
        1 => g.push(Kind::Hello, &[b"HELLO", b"2"]),
        _ => g.push(Kind::Hello, &[b"HELLO", b"3"]),
    }
    if g.rng.chance(50) {
        g.push(Kind::Exact, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]);
    }
    if g.rng.chance(25) {
        // A counter already high (as the fence script leaves it), up to the edge of `INCR`,
        // and a fenced acquisition of a free key that increments it.
        let value = g.rng.pick(&FENCE_VALUES[4..]).as_bytes().to_vec();
        let (counter, key) = (g.counter.clone(), g.keys[0].clone());
        g.push(Kind::Exact, &[b"SET", &counter, &value]);
        let (_, text) = script::ALL[0];
        let acquire: &[&[u8]] = &[
            b"EVAL",
            text.as_bytes(),
            b"2",
            &key,
            &counter,
            b"t",
            b"60000",
            b"1",
        ];
        g.push(Kind::Exact, acquire);
    }
    let len = g.rng.range(20, 50) as usize;
    while g.steps.len() < len {
        match g.rng.below(20) {
            0..=2 => g.set_nx(),
            3 => g.set_ifeq(),
            4..=6 => g.read(),
            7 => g.native_release(),
            8..=14 => g.script_call(),
            15..=16 => g.admin(),
            _ => g.session(),
        }
    }
    // The last pass: every key deleted in both databases, as the default user, so that both
    // sides have expired (and invalidated) what is left.
    g.push(Kind::Exact, &[b"AUTH", b"default", b"pw"]);
    for db in [&b"0"[..], b"1"] {
        g.push(Kind::Exact, &[b"SELECT", db]);
        let mut del: Vec<Vec<u8>> = vec![b"DEL".to_vec()];
        del.extend(g.keys.iter().cloned());
        del.push(g.counter.clone());
        g.steps.push(Step {
            args: del,
            kind: Kind::Exact,
        });
    }
    g.push(Kind::Exact, &[b"PING", b"end of sequence"]);
    Sequence {
        steps: g.steps,
        short_ttls: g.short_ttls,
    }
}
