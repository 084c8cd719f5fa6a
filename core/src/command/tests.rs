//! The commands on the wire, and how replies are judged.
use super::*;
use bytes::Bytes;

fn wire(c: &Command, eval: bool) -> String {
    let mut v = Vec::new();
    c.encode(&mut v, if eval { Form::Eval } else { Form::Evalsha });
    String::from_utf8(v).unwrap()
}

fn names(v: &[&str]) -> Vec<Name> {
    v.iter().map(|s| Name::new(s)).collect()
}

#[test]
fn commands_on_the_wire() {
    let token = Token::parse(&"ab".repeat(20)).unwrap();
    let res = names(&["res"]);
    let mut c = Command {
        kind: OpKind::Acquire,
        resources: &res,
        token: Some(&token),
        ttl_ms: 30_000,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    let t = token.as_str();
    assert_eq!(
        wire(&c, false),
        format!(
            "*6\r\n$3\r\nSET\r\n$3\r\nres\r\n$40\r\n{t}\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n"
        )
    );
    assert_eq!(c.expect(), Expect::Set);
    c.kind = OpKind::Release;
    assert_eq!(
        wire(&c, false),
        format!(
            "*5\r\n$7\r\nEVALSHA\r\n$40\r\n{}\r\n$1\r\n1\r\n$3\r\nres\r\n$40\r\n{t}\r\n",
            script::RELEASE_SHA1
        )
    );
    assert!(wire(&c, true).contains("redis.call(\"DEL\""));
    c.kind = OpKind::Extend;
    assert!(wire(&c, false).ends_with(&format!("$40\r\n{t}\r\n$5\r\n30000\r\n")));
    assert!(wire(&c, true).starts_with("*6\r\n$4\r\nEVAL\r\n"));
}

#[test]
fn sets_and_fenced_commands_on_the_wire() {
    let token = Token::parse(&"cd".repeat(20)).unwrap();
    let t = token.as_str();
    let set = names(&["a", "bb"]);
    let mut c = Command {
        kind: OpKind::Acquire,
        resources: &set,
        token: Some(&token),
        ttl_ms: 500,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    // Two keys, no counter: token, ttl, n.
    assert_eq!(
        wire(&c, false),
        format!(
            "*8\r\n$7\r\nEVALSHA\r\n$40\r\n{}\r\n$1\r\n2\r\n$1\r\na\r\n$2\r\nbb\r\n$40\r\n{t}\r\n$3\r\n500\r\n$1\r\n2\r\n",
            script::ACQUIRE_SHA1
        )
    );
    assert_eq!(c.expect(), Expect::Acquired);
    // Fenced: the counter is the last key.
    c.counter = Some(b"fence");
    assert!(wire(&c, false).contains(&format!(
        "$1\r\n3\r\n$1\r\na\r\n$2\r\nbb\r\n$5\r\nfence\r\n$40\r\n{t}\r\n"
    )));
    c.kind = OpKind::Fence;
    c.fence_value = 1234;
    assert!(wire(&c, false).ends_with(&format!("$5\r\nfence\r\n$40\r\n{t}\r\n$4\r\n1234\r\n")));
    assert_eq!(c.expect(), Expect::Script);
    // Release and extend leave the counter alone.
    c.kind = OpKind::Release;
    assert!(!wire(&c, false).contains("fence"));
    c.kind = OpKind::Extend;
    assert!(!wire(&c, false).contains("fence"));
    assert!(wire(&c, true).contains("PEXPIRE"));
}

#[test]
fn replies_are_judged() {
    use NodeOutcome::{Gone, Held, Ok as Y};
    let s = |t: &'static str| Bytes::from_static(t.as_bytes());
    let j = Command::judge;
    assert_eq!(j(Expect::Set, &Frame::Simple(s("OK"))), (Y, Extra::None));
    assert_eq!(j(Expect::Set, &Frame::NullBulk), (Held, Extra::HeldKey(0)));
    assert_eq!(j(Expect::Set, &Frame::Null), (Held, Extra::HeldKey(0)));
    // A reply of the wrong shape is a server error, never a vote.
    assert!(matches!(
        j(Expect::Set, &Frame::Integer(1)).0,
        NodeOutcome::Server(_)
    ));
    assert!(matches!(
        j(Expect::Acquired, &Frame::Simple(s("OK"))).0,
        NodeOutcome::Server(_)
    ));
    assert!(matches!(
        j(Expect::Script, &Frame::Simple(s("OK"))).0,
        NodeOutcome::Server(_)
    ));
    assert_eq!(
        j(Expect::Set, &Frame::Error(s("OOM command not allowed"))).0,
        NodeOutcome::Server("OOM command not allowed".into())
    );
    assert_eq!(
        j(Expect::Acquired, &Frame::Integer(0)),
        (Y, Extra::Counter(0))
    );
    assert_eq!(
        j(Expect::Acquired, &Frame::Integer(-3)),
        (Held, Extra::HeldKey(2))
    );
    // Unfenced, the script answers 0 or a held key: any other number (a release's 1, a
    // fenced client's counter) is not a yes, and cannot answer the command at all.
    for n in [1, 77, i64::MAX, -1025, i64::MIN] {
        assert!(
            matches!(
                j(Expect::Acquired, &Frame::Integer(n)).0,
                NodeOutcome::Server(_)
            ),
            "{n}"
        );
        assert!(!Expect::Acquired.fits(&Frame::Integer(n)), "{n}");
    }
    assert!(Expect::Acquired.fits(&Frame::Integer(-1024)));
    assert_eq!(j(Expect::Script, &Frame::Integer(1)), (Y, Extra::None));
    assert_eq!(j(Expect::Script, &Frame::Integer(0)), (Held, Extra::None));
    // Fenced: a counter in 1..=2^53, a held key's index, or the node's failure.
    let max = crate::MAX_FENCING_TOKEN as i64;
    assert_eq!(
        j(Expect::Fenced, &Frame::Integer(1)),
        (Y, Extra::Counter(1))
    );
    assert_eq!(
        j(Expect::Fenced, &Frame::Integer(max)),
        (Y, Extra::Counter(1 << 53))
    );
    assert_eq!(
        j(Expect::Fenced, &Frame::Integer(-1024)),
        (Held, Extra::HeldKey(1023))
    );
    for n in [0, max + 1, i64::MAX, -1025, i64::MIN] {
        assert_eq!(
            j(Expect::Fenced, &Frame::Integer(n)),
            (
                NodeOutcome::Fencing(FencingFault::CounterOutOfRange(n)),
                Extra::None
            ),
            "{n}"
        );
    }
    let overflow = Frame::Error(s(
        "ERR increment or decrement would overflow script: fc1f70ab, on @user_script:8.",
    ));
    assert_eq!(
        j(Expect::Fenced, &overflow).0,
        NodeOutcome::Fencing(FencingFault::CounterOverflow)
    );
    let not_int = Frame::Error(s("ERR value is not an integer or out of range script: x"));
    assert_eq!(
        j(Expect::Fenced, &not_int).0,
        NodeOutcome::Fencing(FencingFault::CounterNotAnInteger)
    );
    // Other errors stay server errors; unfenced, the same message is one too.
    assert_eq!(
        j(Expect::Fenced, &Frame::Error(s("OOM command not allowed"))).0,
        NodeOutcome::Server("OOM command not allowed".into())
    );
    assert!(matches!(
        j(Expect::Acquired, &overflow).0,
        NodeOutcome::Server(_)
    ));
    assert_eq!(j(Expect::Script, &Frame::Integer(-1)), (Gone, Extra::None));
    assert!(matches!(
        j(Expect::Script, &Frame::Integer(2)).0,
        NodeOutcome::Server(_)
    ));
    // The connection answers a NOSCRIPT with the EVAL form; one that reaches the judge
    // is a plain server error: no loop.
    let noscript = Frame::Error(s("NOSCRIPT No matching script."));
    assert!(matches!(
        j(Expect::Script, &noscript).0,
        NodeOutcome::Server(_)
    ));
    assert!(matches!(
        j(Expect::Set, &Frame::Bulk(Bytes::from(vec![b'x'; 10_000]))).0,
        NodeOutcome::Server(m) if m.len() < 100
    ));
}

/// Every reply shape `fits` lets through is read by `judge`: one that fits but is judged
/// "unexpected" is a reply the engine keeps the connection for and then throws away (the
/// wait script's `[pttl, ticket]` was, so no waiter ever read its timer or its tickets).
#[test]
fn every_reply_that_fits_is_read() {
    let int = Frame::Integer;
    let s = |v: &'static str| Bytes::from_static(v.as_bytes());
    let token = "ab".repeat(20);
    let samples = [
        Frame::Simple(s("OK")),
        Frame::Null,
        Frame::NullBulk,
        int(-3),
        int(-2),
        int(-1),
        int(0),
        int(1),
        int(7),
        Frame::Bulk(Bytes::from(token)),
        Frame::Bulk(s("something")),
        Frame::Array(vec![int(-3), int(2)]),
        Frame::Array(vec![int(150), int(0)]),
        Frame::Array(vec![int(-2), int(9)]),
    ];
    let kinds = [
        Expect::Set,
        Expect::Acquired,
        Expect::Fenced,
        Expect::Script,
        Expect::NativeRelease,
        Expect::NativeExtend,
        Expect::Get,
        Expect::Pttl,
        Expect::Wait,
        Expect::Entered,
        Expect::EnteredFenced,
        Expect::Leave,
    ];
    for e in kinds {
        for f in samples.iter().filter(|f| e.fits(f)) {
            let (outcome, _) = Command::judge(e, f);
            assert!(
                !matches!(&outcome, NodeOutcome::Server(m) if m.starts_with("unexpected")),
                "{e:?} lets {f:?} through and then cannot read it"
            );
        }
    }
    // The enter script: took the resource (`0`, or the counter), or refused and joined the
    // line (a vote `no`, with what the wait reads); an unfenced one never answers a counter.
    assert_eq!(
        Command::judge(Expect::Entered, &int(0)),
        (NodeOutcome::Ok, Extra::Counter(0))
    );
    assert_eq!(
        Command::judge(Expect::EnteredFenced, &int(7)),
        (NodeOutcome::Ok, Extra::Counter(7))
    );
    assert!(!Expect::Entered.fits(&int(7)) && !Expect::EnteredFenced.fits(&int(0)));
    assert_eq!(
        Command::judge(Expect::Entered, &Frame::Array(vec![int(150), int(4)])),
        (
            NodeOutcome::Held,
            Extra::Waited {
                pttl: 150,
                ticket: 4
            }
        )
    );
    assert_eq!(
        Command::judge(Expect::Wait, &Frame::Array(vec![int(-3), int(2)])),
        (
            NodeOutcome::Ok,
            Extra::Waited {
                pttl: -3,
                ticket: 2
            }
        )
    );
}

#[test]
fn each_native_command_has_its_own_yes() {
    use NodeOutcome::{NotOurs, Ok as Y};
    let ok = Frame::Simple(Bytes::from_static(b"OK"));
    let (rel, ext) = (Expect::NativeRelease, Expect::NativeExtend);
    assert_eq!(Command::judge(rel, &Frame::Integer(1)).0, Y);
    assert_eq!(Command::judge(rel, &Frame::Integer(0)).0, NotOurs);
    assert_eq!(Command::judge(ext, &ok).0, Y);
    assert_eq!(Command::judge(ext, &Frame::NullBulk).0, NotOurs);
    // The other command's yes cannot answer it: the stream is out of step (the engine
    // drops the connection), and the judge would not read it as a yes either.
    assert!(!rel.fits(&ok));
    assert!(!ext.fits(&Frame::Integer(1)));
    assert!(!ext.fits(&Frame::Integer(0)));
    assert!(matches!(Command::judge(rel, &ok).0, NodeOutcome::Server(_)));
    assert!(matches!(
        Command::judge(ext, &Frame::Integer(1)).0,
        NodeOutcome::Server(_)
    ));
}
