//! Test bodies shared by the blocking and the async client: each is generic over a
//! [`Flavor`], and `tests/blocking.rs` and `tests/async_shared.rs` instantiate every one
//! through [`for_each_case!`], so that a new body runs against every client.

/// Calls `$m!($flavor: case, case, ...)` with the name of every shared body.
#[macro_export]
macro_rules! for_each_case {
    ($m:ident, $flavor:ty) => {
        $m!($flavor:
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
            absurd_durations_are_refused_or_survived_never_a_panic,
            a_failed_extension_never_leaves_more_validity_than_the_keys,
            auth_and_select,
            fenced_tokens_increase_from_holder_to_holder,
            fencing_write_back_outlives_the_master_with_the_highest_counter,
            a_counter_out_of_range_is_a_failed_vote_not_the_token,
            a_counter_out_of_range_needs_repair_and_says_so,
            fencing_refuses_masters_whose_policy_may_evict_the_counter,
            lock_many_takes_every_resource_or_none,
            lock_many_extends_and_releases_only_what_it_holds,
            lock_many_refuses_bad_lists_and_the_counter_key,
            large_lock_many_calls_from_several_callers_all_succeed,
            unix_sockets_alone_and_mixed_with_tcp,
            native_commands_where_the_server_has_them,
            acl_users_without_eval_use_functions,
            every_acl_user_releases_in_a_form_it_may_use,
            inspect_shows_each_nodes_holder_and_ttl,
            a_waiter_is_woken_by_the_release_not_by_polling,
            a_lost_push_falls_back_to_the_pttl_timer,
            servers_without_resp3_fall_back_to_polling,
            fair_waiters_get_the_lock_in_the_order_they_started_waiting,
            a_fair_waiter_that_gives_up_or_is_gone_costs_the_others_nothing,
            a_reserved_resource_is_not_taken_by_a_newcomer,
            a_fair_waiter_whose_holder_vanished_takes_the_lock_when_its_ttl_runs_out,
            a_failed_try_keeps_its_clients_place_in_line,
            a_rung_waiter_cut_off_costs_the_next_one_claim_lease,
            inspect_line_shows_each_masters_line_in_order,
            fair_waiters_line_up_through_functions,
            a_fair_client_whose_user_may_run_no_script_locks_as_without_fair_mode,
            permits_admit_at_most_their_number,
            a_permit_needs_a_quorum_on_one_slot,
            permits_with_masters_down,
            permits_under_contention_never_exceed_their_number,
        );
    };
}

use std::time::{Duration, Instant};

use redlock_mux::resp::Frame;
use redlock_mux::{Error, Holder, Lock, NodeOutcome, Token};

use crate::local::LocalCluster;
use crate::*;

const TTL: Duration = Duration::from_secs(10);

/// How long commands a fail-fast round left in flight may take to land on a healthy local
/// node (they were written before the round returned; only the server's turn is awaited).
const IN_FLIGHT: Duration = Duration::from_secs(5);

/// Asserts that every node comes to satisfy `check` for `key`, and a quorum at once. While it
/// waits, `client` is left to serve what it still owes (a fail-fast round returns before the
/// last nodes answer, and a late `NOSCRIPT` is answered by the client, not the server): the
/// blocking client through `poll_idle`, the async one by driving its runtime.
fn on_every_node(
    client: &impl LockClient,
    addrs: &[String],
    why: &str,
    check: impl Fn(&str) -> bool,
) {
    let now = addrs.iter().filter(|a| check(a)).count();
    assert!(now > addrs.len() / 2, "{why}: only {now} nodes at once");
    let mut missing = Vec::new();
    let done = crate::serve_until(client, IN_FLIGHT, || {
        missing = addrs.iter().filter(|a| !check(a)).cloned().collect();
        missing.is_empty()
    });
    assert!(done, "{why}: not on {missing:?} after {IN_FLIGHT:?}");
}

/// Asserts every node holds `token` under `key`.
fn held_everywhere(client: &impl LockClient, addrs: &[String], key: &str, token: &Token) {
    on_every_node(client, addrs, &format!("{key} held by {token:?}"), |a| {
        get(a, key).as_deref() == Some(token.as_str())
    });
}

/// Asserts `token` holds `key` on a majority of the nodes and, once the commands in flight
/// have landed, no other token holds it anywhere. For a lock taken just as another holder let
/// go: a master that runs the new holder's `SET NX` before the old holder's release (its two
/// connections are read in no set order) refuses it, and is then left with no key at all.
/// That is Redlock working (a quorum is all it needs), not a lock lost.
fn held_on_a_majority(client: &impl LockClient, addrs: &[String], key: &str, token: &Token) {
    let mut seen = Vec::new();
    let settled = crate::serve_until(client, IN_FLIGHT, || {
        seen = addrs.iter().map(|a| get(a, key)).collect();
        seen.iter().flatten().all(|v| v == token.as_str())
    });
    assert!(settled, "{key}: another token still there: {seen:?}");
    let holding = seen.iter().flatten().count();
    assert!(
        holding > addrs.len() / 2,
        "{key}: {token:?} on {holding} nodes: {seen:?}"
    );
}

fn gone_everywhere(client: &impl LockClient, addrs: &[String], key: &str) {
    on_every_node(client, addrs, &format!("{key} gone"), |a| {
        get(a, key).is_none()
    });
}

mod basic;
mod fair;
mod faults;
mod fencing;
mod many;
mod permits;
mod scripts;
mod wakeups;

pub use basic::*;
pub use fair::*;
pub use faults::*;
pub use fencing::*;
pub use many::*;
pub use permits::*;
pub use scripts::*;
pub use wakeups::*;
