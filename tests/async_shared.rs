//! The shared integration bodies (`testkit::cases`) against the async client, on both
//! runtime flavours.

use testkit::{AsyncCurrent, AsyncMulti};

macro_rules! shared_cases {
    ($flavor:ty: $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                testkit::cases::$name::<$flavor>();
            }
        )*
    };
}

mod multi_thread {
    use super::*;
    testkit::for_each_case!(shared_cases, AsyncMulti);
}

mod current_thread {
    use super::*;
    testkit::for_each_case!(shared_cases, AsyncCurrent);
}
