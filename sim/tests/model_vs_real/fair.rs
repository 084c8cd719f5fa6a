//! Fair mode held to reality: random sequences of the commands and scripts a fair client sends
//! (the wait, enter, claim, hand-off and leave scripts by `EVALSHA` and `EVAL`, the line's `ZADD XX
//! GT`), with the reads and writes around them (`SET NX`, `GET`, `PTTL`, `ZRANGE`, `ZSCORE`,
//! `ZCARD`, `DEL`, `PUBLISH`, probes of the wrong type), over several connections of several
//! client ids, each (mostly) RESP3 and subscribed to its id's bell, some tracking keys: the
//! replies and every connection's pushes (bells, subscription confirmations, invalidations)
//! compared between a [`Master`] and a real server.
//!
//! A sequence's claim lease is a minute, or 5 ms: then each script that may ring is followed
//! by a pause of 20 ms (the reservation has lapsed on both sides; the ring's record, 16 leases,
//! still lives), at most three more commands (which meet the lapsed reservation), and a pause
//! of 70 ms (the record gone), so that no command reads a key at its deadline.

use redlock_mux::script;

use super::sequences::{Kind, Rng, Step};

/// One step: on connection `conn`.
pub(crate) struct FairStep {
    pub(crate) conn: usize,
    pub(crate) step: Step,
}

/// A sequence over several connections.
pub(crate) struct FairSequence {
    pub(crate) conns: usize,
    /// Per connection, whether it speaks RESP3.
    pub(crate) resp3: Vec<bool>,
    pub(crate) steps: Vec<FairStep>,
    /// The claim lease is short (pushes of expiries then compared as a multiset).
    pub(crate) short: bool,
}

struct Gen {
    rng: Rng,
    ids: Vec<String>,
    /// Per connection: its id, and whether it speaks RESP3 and tracks.
    conn_id: Vec<usize>,
    resp3: Vec<bool>,
    tracking: Vec<bool>,
    keys: Vec<Vec<u8>>,
    counter: Vec<u8>,
    tokens: Vec<Vec<u8>>,
    claim: &'static str,
    loaded: bool,
    steps: Vec<FairStep>,
    /// Short lease: commands left before the pause that outlasts the ring's record.
    after_ring: Option<u32>,
}

fn queue(key: &[u8]) -> Vec<u8> {
    [script::QUEUE_PREFIX.as_bytes(), key].concat()
}

impl Gen {
    fn push(&mut self, conn: usize, kind: Kind, args: &[&[u8]]) {
        self.steps.push(FairStep {
            conn,
            step: Step::new(kind, args),
        });
        if let (Kind::Sleep(_), _) | (_, None) = (kind, self.after_ring) {
            return;
        }
        match self.after_ring {
            Some(0) => {
                self.after_ring = None;
                self.sleep(70);
                self.expire(true);
            }
            Some(k) => self.after_ring = Some(k - 1),
            None => {}
        }
    }
    fn sleep(&mut self, ms: u64) {
        self.steps.push(FairStep {
            conn: 0,
            step: Step::new(Kind::Sleep(ms), &[]),
        });
    }
    /// After a script that may ring, with a short lease.
    fn rang(&mut self) {
        if self.claim != "60000" {
            self.after_ring = None;
            self.sleep(20);
            self.expire(false);
            self.after_ring = Some(2);
        }
    }
    /// After a pause: reads (untracked) of the keys whose ttl may have run out, the resources
    /// (a reservation) or the ring's records, so that both sides expire them now (the server
    /// may have done so by itself): a lazy expiry later, once a connection tracks the key,
    /// would push an invalidation that the server's active expiry sent to nobody.
    fn expire(&mut self, records: bool) {
        for k in self.keys.clone() {
            let key = match records {
                true => [b"redlock-mux:rung:".as_slice(), &k].concat(),
                false => k,
            };
            self.steps.push(FairStep {
                conn: 0,
                step: Step::new(Kind::Pttl, &[b"PTTL", &key]),
            });
        }
    }
    fn conn(&mut self) -> usize {
        self.rng.below(self.conn_id.len())
    }
    /// The id a connection's client sends: its own, now and then another's.
    fn id_of(&mut self, c: usize) -> Vec<u8> {
        let i = if self.rng.chance(10) {
            self.rng.below(self.ids.len())
        } else {
            self.conn_id[c]
        };
        self.ids[i].as_bytes().to_vec()
    }
    fn resources(&mut self) -> Vec<Vec<u8>> {
        let n = if self.keys.len() > 1 && self.rng.chance(20) {
            2
        } else {
            1
        };
        let first = self.rng.below(self.keys.len());
        (0..n)
            .map(|k| self.keys[(first + k) % self.keys.len()].clone())
            .collect()
    }
    fn token(&mut self) -> Vec<u8> {
        self.rng.pick(&self.tokens).clone()
    }

    /// A fair script call: `which` of `script::FAIR`, with its keys and arguments.
    fn script(&mut self, c: usize, which: usize, keys: &[Vec<u8>], argv: &[Vec<u8>], kind: Kind) {
        if self.tracking[c] && self.rng.chance(20) {
            self.push(c, Kind::Exact, &[b"CLIENT", b"CACHING", b"YES"]);
        }
        let (sha, text) = script::FAIR[which];
        // The function library's fair functions now and then (errors in them name the
        // library's lines; on Redis 6.2 `FCALL` is an unknown command on both sides).
        let fcall = self.rng.chance(15);
        let evalsha = self.loaded && self.rng.chance(70) || self.rng.chance(10);
        let numkeys = keys.len().to_string().into_bytes();
        let mut args: Vec<&[u8]> = if fcall {
            vec![
                b"FCALL",
                script::FUNCTIONS[script::ALL.len() + which].as_bytes(),
            ]
        } else if evalsha {
            vec![b"EVALSHA", sha.as_bytes()]
        } else {
            vec![b"EVAL", text.as_bytes()]
        };
        args.push(&numkeys);
        args.extend(keys.iter().map(|k| &k[..]));
        args.extend(argv.iter().map(|a| &a[..]));
        self.push(c, kind, &args);
        self.rang();
    }

    /// The resources and then their lines; now and then (a probe of `WRONGTYPE` inside a
    /// script) a line where a resource goes, or a resource where a line goes.
    fn keys_of(&mut self, res: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = res.to_vec();
        keys.extend(res.iter().map(|k| queue(k)));
        if self.rng.chance(3) {
            keys.swap(0, res.len());
        }
        keys
    }

    fn wait(&mut self) {
        let c = self.conn();
        let res = self.resources();
        let id = self.id_of(c);
        let keys = self.keys_of(&res);
        let qttl: &[u8] = if self.rng.chance(80) {
            b"3600000"
        } else {
            b"60000"
        };
        let argv = [
            id,
            self.claim.into(),
            res.len().to_string().into(),
            qttl.into(),
            b"30000".to_vec(),
        ];
        self.script(c, 0, &keys, &argv, Kind::Wait);
    }
    /// A first try that joins the line when refused (the enter script), now and then fenced.
    fn enter(&mut self) {
        let c = self.conn();
        let res = vec![self.resources()[0].clone()];
        let id = self.id_of(c);
        let mut keys = self.keys_of(&res);
        if self.rng.chance(30) {
            keys.push(self.counter.clone());
        }
        let argv = [
            id,
            self.claim.into(),
            b"1".to_vec(),
            b"3600000".to_vec(),
            b"30000".to_vec(),
            self.token(),
        ];
        self.script(c, 4, &keys, &argv, Kind::Wait);
    }
    fn claim(&mut self) {
        let c = self.conn();
        let res = self.resources();
        let id = self.id_of(c);
        let mut keys = self.keys_of(&res);
        if self.rng.chance(30) {
            keys.push(self.counter.clone());
        }
        let mut argv = vec![
            self.token(),
            b"30000".to_vec(),
            res.len().to_string().into(),
            id,
            self.claim.into(),
        ];
        // The hand-off that woke the claim: none (no sixth argument, or an empty one), or a
        // token of the sequence's few, often the holder's.
        match self.rng.below(4) {
            0 => {}
            1 => argv.push(Vec::new()),
            _ => argv.push(self.token()),
        }
        self.script(c, 1, &keys, &argv, Kind::Exact);
    }
    /// Turns of two clients on one resource: A waits (rung at once if the resource is free:
    /// the ring's record names A), claims and releases to an empty line (the record stays);
    /// B claims the free resource, A waits behind it, and B releases: the release rings a
    /// head that is the ring's record.
    fn turn(&mut self) {
        let a = self.conn();
        let Some(b) = (0..self.conn_id.len()).find(|&d| self.conn_id[d] != self.conn_id[a]) else {
            return;
        };
        let res = vec![self.resources()[0].clone()];
        let (ida, idb) = (
            self.ids[self.conn_id[a]].clone(),
            self.ids[self.conn_id[b]].clone(),
        );
        let keys = self.keys_of(&res);
        let first = self.rng.below(2);
        let (ta, tb) = (self.tokens[first].clone(), self.tokens[1 - first].clone());
        let claim = self.claim.as_bytes().to_vec();
        let wait = [ida.as_bytes(), &claim, b"1", b"3600000", b"30000"].map(<[u8]>::to_vec);
        self.script(a, 0, &keys, &wait, Kind::Wait);
        let claim_a = [&ta, b"30000".as_slice(), b"1", ida.as_bytes(), &claim];
        self.script(a, 1, &keys, &claim_a.map(<[u8]>::to_vec), Kind::Exact);
        let release_a = [&ta, &claim, ida.as_bytes(), b"1", b"0"];
        self.script(a, 2, &keys, &release_a.map(<[u8]>::to_vec), Kind::Exact);
        let mut claim_b = [&tb, b"30000".as_slice(), b"1", idb.as_bytes(), &claim]
            .map(<[u8]>::to_vec)
            .to_vec();
        if self.rng.chance(50) {
            claim_b.push(self.token());
        }
        self.script(b, 1, &keys, &claim_b, Kind::Exact);
        self.script(a, 0, &keys, &wait, Kind::Wait);
        let keep: &[u8] = if self.rng.chance(30) { b"0" } else { b"1" };
        let release_b = [&tb, &claim, idb.as_bytes(), keep, b"0"];
        self.script(b, 2, &keys, &release_b.map(<[u8]>::to_vec), Kind::Exact);
    }
    fn handoff(&mut self) {
        let c = self.conn();
        let res = self.resources();
        let id = self.id_of(c);
        let keys = self.keys_of(&res);
        let (keep, ticket) = if self.rng.chance(25) {
            (b"0".to_vec(), self.rng.range(0, 6).to_string().into_bytes())
        } else {
            (b"1".to_vec(), b"0".to_vec())
        };
        let argv = [self.token(), self.claim.into(), id, keep, ticket];
        self.script(c, 2, &keys, &argv, Kind::Exact);
    }
    fn leave(&mut self) {
        let c = self.conn();
        let res = self.resources();
        let id = self.id_of(c);
        let keys = self.keys_of(&res);
        let argv = [id, self.claim.as_bytes().to_vec()];
        self.script(c, 3, &keys, &argv, Kind::Exact);
    }
    fn retick(&mut self) {
        let c = self.conn();
        let q = queue(&self.resources()[0]);
        let id = self.id_of(c);
        let ticket = self.rng.range(1, 8).to_string();
        self.push(
            c,
            Kind::Exact,
            &[b"ZADD", &q, b"XX", b"GT", ticket.as_bytes(), &id],
        );
    }
    fn plain(&mut self) {
        let c = self.conn();
        let k = self.resources()[0].clone();
        let q = queue(&k);
        let marker = [b"redlock-mux:rung:".as_slice(), &k].concat();
        let id = self.id_of(c);
        let t = self.token();
        match self.rng.below(14) {
            0 | 1 => {
                // Now and then an empty value, which a claim's empty tag does not match.
                let t = if self.rng.chance(15) { Vec::new() } else { t };
                self.push(c, Kind::Exact, &[b"SET", &k, &t, b"NX", b"PX", b"30000"]);
            }
            2 => self.push(c, Kind::Exact, &[b"GET", &k]),
            3 => self.push(c, Kind::Pttl, &[b"PTTL", &k]),
            4 => self.push(c, Kind::Exact, &[b"ZRANGE", &q, b"0", b"-1", b"WITHSCORES"]),
            5 => self.push(c, Kind::Exact, &[b"ZRANGE", &q, b"0", b"0"]),
            6 => self.push(c, Kind::Exact, &[b"ZSCORE", &q, &id]),
            7 => self.push(c, Kind::Exact, &[b"ZCARD", &q]),
            8 => self.push(c, Kind::Pttl, &[b"PTTL", &q]),
            9 => self.push(c, Kind::Exact, &[b"GET", &marker]),
            10 => self.push(c, Kind::Exact, &[b"DEL", &k]),
            11 => {
                let bell = format!("{}{}", script::BELL_PREFIX, String::from_utf8_lossy(&id));
                self.push(c, Kind::Exact, &[b"PUBLISH", bell.as_bytes(), b"x r"]);
            }
            12 => {
                // The wrong type, and a score that is not an integer.
                match self.rng.below(4) {
                    0 => self.push(c, Kind::Exact, &[b"GET", &q]),
                    1 => self.push(c, Kind::Exact, &[b"ZADD", &k, b"NX", b"1", &id]),
                    2 => self.push(c, Kind::Exact, &[b"ZADD", &q, b"NX", b"2.5", &id]),
                    _ => self.push(c, Kind::Exact, &[b"ZADD", &q, b"NX", b"GT", b"1", &id]),
                }
            }
            _ if self.resp3[c] => {
                let bell = format!("{}{}", script::BELL_PREFIX, String::from_utf8_lossy(&id));
                self.push(c, Kind::Exact, &[b"SUBSCRIBE", bell.as_bytes()]);
            }
            _ => self.push(c, Kind::Exact, &[b"PING"]),
        }
    }
}

impl FairSequence {
    /// Whether step `s` is a command answered by a reply (not a pause, not a RESP3
    /// `SUBSCRIBE`, answered by a push).
    pub(crate) fn replied(&self, s: &FairStep) -> bool {
        let sleep = matches!(s.step.kind, Kind::Sleep(_));
        !(sleep || s.step.args[0] == b"SUBSCRIBE" && self.resp3[s.conn])
    }
}

/// Fair sequence `index`.
pub(crate) fn fair_sequence(index: u64) -> FairSequence {
    let mut rng = Rng(super::sequences::BASE_SEED ^ 0xfa1e ^ index.wrapping_mul(0x0100_0000_01b3));
    let nids = rng.range(2, 4) as usize;
    let ids: Vec<String> = (0..nids)
        .map(|k| format!("q{index}-{k}{:x}", rng.next() % 4096))
        .collect();
    let conns = rng.range(2, 4) as usize;
    let conn_id: Vec<usize> = (0..conns).map(|c| c % nids).collect();
    let resp3: Vec<bool> = (0..conns).map(|_| rng.chance(85)).collect();
    let tracking: Vec<bool> = resp3.iter().map(|&r| r && rng.chance(40)).collect();
    let short = rng.chance(12);
    let tokens = (0..rng.range(2, 3))
        .map(|i| format!("{:016x}{:016x}{:08x}", rng.next(), rng.next(), i).into_bytes())
        .collect();
    let keys = (0..rng.range(1, 2))
        .map(|i| format!("f{index}:r{i}").into_bytes())
        .collect();
    let mut g = Gen {
        rng,
        ids,
        conn_id,
        resp3,
        tracking,
        keys,
        counter: format!("f{index}:fence").into_bytes(),
        tokens,
        claim: if short { "5" } else { "60000" },
        loaded: false,
        steps: Vec::new(),
        after_ring: None,
    };
    for c in 0..conns {
        if g.resp3[c] {
            g.push(c, Kind::Hello, &[b"HELLO", b"3"]);
        }
        if g.tracking[c] {
            g.push(c, Kind::Exact, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]);
        }
        // Most connections ring; one now and then does not (a client whose process is gone).
        if g.resp3[c] && g.rng.chance(85) {
            let bell = format!("{}{}", script::BELL_PREFIX, g.ids[g.conn_id[c]]);
            g.push(c, Kind::Exact, &[b"SUBSCRIBE", bell.as_bytes()]);
        }
    }
    if g.rng.chance(70) {
        g.loaded = true;
    } else {
        // Nothing cached: an `EVALSHA` is answered `NOSCRIPT`, an `EVAL` caches its script.
        g.push(0, Kind::Exact, &[b"SCRIPT", b"FLUSH"]);
    }
    if g.loaded {
        for (_, text) in script::FAIR {
            g.push(0, Kind::Exact, &[b"SCRIPT", b"LOAD", text.as_bytes()]);
        }
    }
    if g.rng.chance(80) {
        // Otherwise an `FCALL` is answered "function not found".
        g.push(
            0,
            Kind::Exact,
            &[b"FUNCTION", b"LOAD", b"REPLACE", script::LIBRARY.as_bytes()],
        );
    }
    let len = g.rng.range(25, 60) as usize;
    while g.steps.len() < len {
        match g.rng.below(20) {
            0..=2 => g.wait(),
            3 | 4 => g.enter(),
            5..=7 => g.claim(),
            8..=10 => g.handoff(),
            11 => g.leave(),
            12 => g.retick(),
            13 => g.turn(),
            _ => g.plain(),
        }
    }
    // The last pass: every key deleted, then a reply on every connection behind its pushes.
    let mut del: Vec<Vec<u8>> = vec![b"DEL".to_vec(), g.counter.clone()];
    for k in g.keys.clone() {
        del.push(queue(&k));
        del.push([b"redlock-mux:rung:".as_slice(), &k].concat());
        del.push(k);
    }
    let del: Vec<&[u8]> = del.iter().map(|a| &a[..]).collect();
    g.after_ring = None;
    if short {
        g.sleep(90);
    }
    g.push(0, Kind::Exact, &del);
    for c in 0..conns {
        g.push(c, Kind::Exact, &[b"PING", b"end of sequence"]);
    }
    FairSequence {
        conns,
        resp3: g.resp3,
        steps: g.steps,
        short,
    }
}
