//! The shared integration bodies (`support/cases.rs`) against the async client, on both
//! runtime flavours.

#[macro_use]
mod support;

use support::{cases, AsyncCurrent, AsyncMulti};

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

mod multi_thread {
    use super::*;
    for_each_case!(shared_cases, AsyncMulti);
}

mod current_thread {
    use super::*;
    for_each_case!(shared_cases, AsyncCurrent);
}
