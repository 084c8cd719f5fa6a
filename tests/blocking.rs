//! The blocking client against real redis-server masters. The bodies are shared with the
//! async client's suite (`support/cases.rs`).

#[macro_use]
mod support;

use support::{cases, redis, Blocking};

macro_rules! shared_cases {
    ($flavor:ty: $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                cases::$name::<$flavor>();
            }
        )*
    };
}

for_each_case!(shared_cases, Blocking);

#[test]
fn script_digests_match_what_redis_computes() {
    let server = redlock_mux::local::LocalServer::start().unwrap();
    let addr = server.addr().to_string();
    for (text, sha) in [
        (
            redlock_mux::script::RELEASE,
            redlock_mux::script::RELEASE_SHA1,
        ),
        (
            redlock_mux::script::EXTEND,
            redlock_mux::script::EXTEND_SHA1,
        ),
    ] {
        match redis(&addr, &["SCRIPT", "LOAD", text]) {
            redlock_mux::resp::Frame::Bulk(b) => assert_eq!(&b[..], sha.as_bytes()),
            other => panic!("SCRIPT LOAD: {other:?}"),
        }
    }
}

#[test]
fn clients_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<redlock_mux::Redlock>();
    assert_send_sync::<redlock_mux::AsyncRedlock>();
    assert_send_sync::<redlock_mux::Lock>();
    assert_send_sync::<redlock_mux::Error>();
    // A Redlock shared by threads: each caller's round is whole and correct.
    let c = support::cluster(5);
    let client = std::sync::Arc::new(support::builder(&c).build().unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let key = format!("shared:{t}:{i}");
                    let lock = client
                        .lock(&key, std::time::Duration::from_secs(10))
                        .unwrap();
                    client.unlock(&lock).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
