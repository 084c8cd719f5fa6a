//! What the hostile reviews' tests read on real masters and check of their holders: the
//! masters holding a value, a client's places in the fair lines, and the tenures of a run
//! (no two overlapping, fencing tokens increasing).

use std::time::{Duration, Instant};

use redlock_mux::redlock_core::config::Options;
use redlock_mux::resp::Frame;
use redlock_mux::{Lock, Redlock};

use crate::redis;

/// The line key of resource `key` (fair mode): `redlock-mux:queue:<key>`.
pub fn line(key: &str) -> String {
    format!("{}{key}", redlock_mux::script::QUEUE_PREFIX)
}

/// How many of `addrs` hold `value` in `key` (read directly, not through any proxy).
pub fn holding(addrs: &[String], key: &str, value: &[u8]) -> usize {
    addrs
        .iter()
        .filter(|a| matches!(redis(a, &["GET", key]), Frame::Bulk(b) if b.as_ref() == value))
        .count()
}

/// How many of `addrs` have client `id` in the line of `key`.
pub fn in_line(addrs: &[String], key: &str, id: &str) -> usize {
    let q = line(key);
    addrs
        .iter()
        .filter(|a| matches!(redis(a, &["ZSCORE", &q, id]), Frame::Bulk(_)))
        .count()
}

/// One holder's tenure: from when its lock was granted (as its call returned) to when it
/// called `unlock`, or its validity's end if that came first; its fencing token (0 unfenced).
#[derive(Debug, Clone)]
pub struct Tenure {
    /// Who held it.
    pub who: String,
    /// From when.
    pub from: Instant,
    /// Until when.
    pub to: Instant,
    /// Its fencing token.
    pub fence: u64,
}

impl Tenure {
    /// A tenure of lock `l` by `who`, from `from`, until the lock's validity ends.
    pub fn of(who: &str, l: &Lock, from: Instant) -> Tenure {
        Tenure {
            who: who.to_string(),
            from,
            to: l.valid_until(),
            fence: l.fencing_token().unwrap_or(0),
        }
    }

    /// Ends where its holder called `unlock` (or its validity ended).
    pub fn end(mut self, unlocking: Instant, l: &Lock) -> Tenure {
        self.to = unlocking.min(l.valid_until());
        self
    }
}

/// The violations among `tenures`: two that overlap, fencing tokens that do not increase in
/// the order of the tenures.
pub fn violations(mut tenures: Vec<Tenure>) -> Vec<String> {
    tenures.sort_by_key(|t| t.from);
    let mut v = Vec::new();
    for (i, a) in tenures.iter().enumerate() {
        for b in &tenures[i + 1..] {
            if b.from < a.to {
                v.push(format!(
                    "{} granted {:?} before {}'s tenure ended",
                    b.who,
                    a.to.saturating_duration_since(b.from),
                    a.who
                ));
            }
        }
    }
    for w in tenures.windows(2) {
        if w[1].fence <= w[0].fence {
            v.push(format!(
                "{} fenced {} after {}'s {}",
                w[1].who, w[1].fence, w[0].who, w[0].fence
            ));
        }
    }
    v
}

/// The options of a reviewed client on `nodes`: fair mode with client id `id` when `fair`,
/// `lease` its claim lease, `tries` tries 50 ms apart, and a generous node timeout (a busy
/// machine's slow connect must not lose a master's vote).
pub fn options(nodes: &[String], fair: bool, id: &str, lease: Duration, tries: u32) -> Options {
    Options {
        nodes: nodes.to_vec(),
        node_timeout: Duration::from_secs(2),
        tries,
        retry_delay: Duration::from_millis(50),
        fair,
        client_id: if fair { id.to_string() } else { String::new() },
        claim_lease: lease,
        ..Default::default()
    }
}

/// A blocking client of [`options`] with 10,000 tries.
pub fn client(nodes: &[String], fair: bool, id: &str, lease: Duration) -> Redlock {
    let cfg = options(nodes, fair, id, lease, 10_000).validate();
    Redlock::with_config(cfg.expect("valid options")).expect("a client")
}

/// A client of `o`, either kind behind one interface: the blocking one, or (`asy`) the async
/// one on its own two-thread runtime.
pub fn either_client(o: Options, asy: bool) -> Box<dyn crate::LockClient + Send + Sync> {
    let cfg = o.validate().expect("valid options");
    if asy {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt
            .block_on(async { redlock_mux::AsyncRedlock::with_config(cfg) })
            .expect("a client");
        Box::new(crate::AsyncClient { rt, client })
    } else {
        Box::new(Redlock::with_config(cfg).expect("a client"))
    }
}

/// A connection of the test's own to a master, kept open (it counts toward `maxclients`, and
/// what it subscribes to stays subscribed), on which commands are sent one at a time.
pub struct Admin(std::net::TcpStream);

impl Admin {
    /// Connects to `addr`, with a 5 s read timeout.
    pub fn open(addr: &str) -> Admin {
        let s = std::net::TcpStream::connect(addr).expect("the master accepts");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("a read timeout");
        Admin(s)
    }

    /// Sends `args` and reads one reply (a push counts as one).
    pub fn cmd(&mut self, args: &[&str]) -> Frame {
        use std::io::{Read, Write};
        let mut out = bytes::BytesMut::new();
        let a: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
        redlock_mux::resp::encode_command(&mut out, &a);
        self.0.write_all(&out).expect("the command is written");
        let mut dec = redlock_mux::resp::Decoder::default();
        let (mut buf, mut chunk) = (bytes::BytesMut::new(), [0u8; 4096]);
        for _ in 0..10_000 {
            if let Some(f) = dec.decode(&mut buf).expect("a valid reply") {
                return f;
            }
            let n = self.0.read(&mut chunk).expect("a reply within 5 s");
            assert!(n > 0, "closed");
            buf.extend_from_slice(&chunk[..n]);
        }
        panic!("no reply");
    }
}
