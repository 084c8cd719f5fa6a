//! The blocking client against real redis-server masters. The bodies are shared with the
//! async client's suite (`support/cases.rs`).

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

shared_cases!(Blocking:
    acquire_and_release,
    second_client_refused_then_gets_it,
    unlock_by_non_holder_deletes_nothing,
    key_ttl_is_what_was_asked,
    extend_keeps_the_lock_and_fails_once_another_holds_it,
    scripts_survive_script_flush,
    two_of_five_down_still_acquires,
    three_of_five_down_fails_fast_naming_causes,
    paused_node_costs_at_most_its_timeout_and_late_replies_stay_late,
    restarted_node_is_reconnected_and_used,
    lost_rounds_leave_no_key,
    unlock_and_extend_after_expiry,
    one_bad_node_is_one_missing_vote,
    tiny_ttls_never_panic,
    auth_and_select,
);

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
