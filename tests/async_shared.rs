//! The shared integration bodies (`support/cases.rs`) against the async client, on both
//! runtime flavours.

mod support;

use support::{cases, AsyncCurrent, AsyncMulti};

macro_rules! shared_cases {
    ($module:ident, $flavor:ty: $($name:ident),* $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[test]
                fn $name() {
                    cases::$name::<$flavor>();
                }
            )*
        }
    };
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        shared_cases!(multi_thread, AsyncMulti: $($name),*);
        shared_cases!(current_thread, AsyncCurrent: $($name),*);
    };
}

both!(
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
