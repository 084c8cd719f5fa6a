//! Addresses, redaction, ttl rules and the builder's checks.

use super::*;
use crate::{Endpoint, NodeAddr, DEFAULT_PORT, MAX_OPTION_DURATION, MAX_TTL};

fn builder() -> Builder {
    Builder::default()
}

#[test]
fn unix_socket_addresses_parse_and_print_without_the_password() {
    let a = NodeAddr::parse("unix:///run/redis/redis.sock").unwrap();
    assert_eq!(
        a.endpoint(),
        &Endpoint::Unix("/run/redis/redis.sock".into())
    );
    assert_eq!((a.port, a.db, a.user.as_deref()), (0, 0, None));
    assert_eq!(a.to_string(), "unix:///run/redis/redis.sock");
    let a = NodeAddr::parse("redis+unix:///tmp/r.sock?db=3&user=app&password=s%40c").unwrap();
    assert_eq!(a.endpoint(), &Endpoint::Unix("/tmp/r.sock".into()));
    assert_eq!(
        (a.db, a.user.as_deref(), a.password.as_deref()),
        (3, Some("app"), Some("s@c"))
    );
    assert_eq!(a.to_string(), "unix:///tmp/r.sock?db=3");
    let a = NodeAddr::parse("unix://app:pw@/tmp/r.sock").unwrap();
    assert_eq!(
        (a.user.as_deref(), a.password.as_deref()),
        (Some("app"), Some("pw"))
    );
    assert_eq!(
        redact("unix:///tmp/r.sock?db=1&password=secret"),
        "unix:///tmp/r.sock?db=1&password=***"
    );
    assert_eq!(
        redact("unix://app:pw@/tmp/r.sock"),
        "unix://app:***@/tmp/r.sock"
    );
    for bad in [
        "unix://relative.sock",
        "unix:///x?db=no",
        "unix:///x?color=red",
        "unix:///x?db",
    ] {
        assert!(
            matches!(
                NodeAddr::parse(bad),
                Err(ConfigError::InvalidAddress { .. })
            ),
            "{bad}"
        );
    }
    // The same socket twice is the same node.
    assert!(matches!(
        builder()
            .nodes(["unix:///tmp/a.sock", "unix:///tmp/a.sock"])
            .config(),
        Err(ConfigError::DuplicateNode(_))
    ));
}

#[test]
fn addresses_parse() {
    let a = NodeAddr::parse("127.0.0.1:7000").unwrap();
    assert_eq!((a.host.as_str(), a.port, a.db), ("127.0.0.1", 7000, 0));
    assert_eq!(a.user, None);
    let a = NodeAddr::parse("redis://127.0.0.1").unwrap();
    assert_eq!(a.port, DEFAULT_PORT);
    let a = NodeAddr::parse("redis://:pw@127.0.0.1:7000/3").unwrap();
    assert_eq!((a.user, a.password.as_deref(), a.db), (None, Some("pw"), 3));
    let a = NodeAddr::parse("redis://pw@127.0.0.1:7000").unwrap();
    assert_eq!((a.user, a.password.as_deref()), (None, Some("pw")));
    let a = NodeAddr::parse("redis://u:p%3Aw@[::1]:7000/").unwrap();
    assert_eq!(a.user.as_deref(), Some("u"));
    assert_eq!(a.password.as_deref(), Some("p:w"));
    assert_eq!(a.host, "::1");
    assert_eq!(a.to_string(), "[::1]:7000");
}

#[test]
fn bad_addresses_are_refused_without_leaking_passwords() {
    for bad in [
        "http://127.0.0.1:1",
        "127.0.0.1:0",
        "127.0.0.1:99999",
        "127.0.0.1:x",
        ":7000",
        "redis://u:secret@127.0.0.1:1/x",
        "[::1",
        "redis://u:%zz@127.0.0.1:1",
    ] {
        let e = NodeAddr::parse(bad).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(
            matches!(e, ConfigError::InvalidAddress { .. }),
            "{bad}: {e}"
        );
    }
}

#[test]
fn ttls_at_or_below_the_drift_allowance_or_past_the_maximum_are_refused() {
    let ms = Duration::from_millis;
    let cfg = builder().nodes(["127.0.0.1:1"]).config().unwrap();
    // 2 ms of fixed drift plus 1% of the ttl: 3 ms is the first that leaves anything.
    assert_eq!(cfg.min_ttl(), ms(3));
    assert_eq!(cfg.check_ttl(ms(3)), Ok(3));
    assert_eq!(cfg.check_ttl(Duration::from_micros(3_999)), Ok(3));
    assert_eq!(cfg.check_ttl(MAX_TTL), Ok(MAX_TTL.as_millis() as u64));
    for bad in [
        Duration::ZERO,
        Duration::from_nanos(1),
        ms(1),
        ms(2),
        Duration::from_micros(2_999),
        MAX_TTL + Duration::from_nanos(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        match cfg.check_ttl(bad) {
            Err(ConfigError::Ttl { ttl, min, max }) => {
                assert_eq!((ttl, min, max), (bad, ms(3), MAX_TTL))
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // A larger drift factor raises the minimum: 2 ms / (1 - 0.5) = 4 ms is still zero.
    let half = builder()
        .nodes(["127.0.0.1:1"])
        .drift_factor(0.5)
        .config()
        .unwrap();
    assert_eq!(half.min_ttl(), ms(5));
    for f in [0.0, 0.01, 0.1, 0.3, 0.9, 0.999] {
        let c = builder()
            .nodes(["127.0.0.1:1"])
            .drift_factor(f)
            .config()
            .unwrap();
        let min = c.min_ttl();
        assert!(
            crate::core::rules::validity(min, Duration::ZERO, f).is_some(),
            "{f}"
        );
        assert!(
            crate::core::rules::validity(min - ms(1), Duration::ZERO, f).is_none(),
            "{f}"
        );
    }
}

/// Every character a password may hold is blanked, in errors and in `Debug`: `?`, `#`,
/// `@`, `/`, `:`, `://` and percent-encodings, in the userinfo of TCP and Unix socket
/// addresses (issue 23.6: `redis://app:s3cr?t@host` was printed in clear, the `?` taken
/// for the start of a query). Parsing cuts where redaction does: the password parsed is
/// the one written.
#[test]
fn passwords_with_any_character_are_parsed_whole_and_never_printed() {
    let secrets = [
        ("S3CR?T", "S3CR?T"),
        ("S3CR#T", "S3CR#T"),
        ("S3CR@T", "S3CR@T"),
        ("S3CR/T", "S3CR/T"),
        ("S3CR@/T", "S3CR@/T"),
        ("S3CR://T", "S3CR://T"),
        ("S3CR?T@X#Y/Z", "S3CR?T@X#Y/Z"),
        ("S3CR%3FT%40%2F%23", "S3CR?T@/#"),
        ("S3CR:T", "S3CR:T"),
    ];
    for (written, password) in secrets {
        let cases = [
            (
                format!("redis://app:{written}@127.0.0.1:1/2"),
                Some("app"),
                "redis://app:***@127.0.0.1:1/2",
            ),
            (
                format!("redis://:{written}@127.0.0.1:1"),
                None,
                "redis://:***@127.0.0.1:1",
            ),
            (
                format!("app:{written}@127.0.0.1:1"),
                Some("app"),
                "app:***@127.0.0.1:1",
            ),
            (
                format!("unix://app:{written}@/tmp/r.sock?db=2"),
                Some("app"),
                "unix://app:***@/tmp/r.sock?db=2",
            ),
            (
                format!("redis+unix://:{written}@/tmp/r.sock"),
                None,
                "redis+unix://:***@/tmp/r.sock",
            ),
        ];
        for (input, user, redacted) in cases {
            let a = NodeAddr::parse(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(a.password.as_deref(), Some(password), "{input}");
            assert_eq!(a.user.as_deref(), user, "{input}");
            assert!(!a.to_string().contains("S3CR"), "{input}: {a}");
            assert!(!format!("{a:?}").contains("S3CR"), "{input}: {a:?}");
            assert_eq!(redact(&input), redacted, "{input}");
            let d = format!("{:?}", builder().nodes([input.as_str()]));
            assert!(!d.contains("S3CR"), "{input}: {d}");
            // The same address made invalid after the password: the error blanks it.
            let bad = if input.contains("unix") {
                input.replace("/tmp/r.sock", "/tmp/r.sock?color=red")
            } else {
                input.replace("127.0.0.1:1", "127.0.0.1:0")
            };
            let e = NodeAddr::parse(&bad).expect_err(&bad).to_string();
            assert!(!e.contains("S3CR"), "{bad}: {e}");
            assert!(e.contains("***"), "{bad}: {e}");
        }
        // A password alone, without a user, and in a Unix socket's query.
        if !written.contains(':') {
            let lone = format!("redis://{written}@127.0.0.1:1");
            assert_eq!(redact(&lone), "redis://***@127.0.0.1:1");
            let a = NodeAddr::parse(&lone).unwrap();
            assert_eq!((a.user, a.password.as_deref()), (None, Some(password)));
        }
        let query = format!("unix:///tmp/r.sock?password={written}&db=1");
        {
            assert_eq!(
                NodeAddr::parse(&query).unwrap().password.as_deref(),
                Some(password),
                "{query}"
            );
        }
        assert!(!redact(&query).contains("S3CR"), "{query}");
    }
}

#[test]
fn debug_of_a_builder_blanks_passwords() {
    let b = builder().nodes([
        "redis://app:s3cret@127.0.0.1:1",
        "redis://:s3cret@127.0.0.1:2",
        "redis://s3cret@127.0.0.1:3",
        "127.0.0.1:4",
    ]);
    let d = format!("{b:?}");
    assert!(!d.contains("s3cret"), "{d}");
    assert!(d.contains("redis://app:***@127.0.0.1:1"), "{d}");
    assert!(d.contains("redis://:***@127.0.0.1:2"), "{d}");
    assert!(d.contains("redis://***@127.0.0.1:3"), "{d}");
    assert!(d.contains("127.0.0.1:4"), "{d}");
}

#[test]
fn builder_validates() {
    let five = [
        "127.0.0.1:1",
        "127.0.0.1:2",
        "127.0.0.1:3",
        "127.0.0.1:4",
        "127.0.0.1:5",
    ];
    let b = builder().nodes(five);
    assert_eq!(b.config().unwrap().quorum(), 3);
    assert_eq!(b.clone().quorum(5).config().unwrap().quorum(), 5);
    assert_eq!(
        b.clone().quorum(2).config().unwrap_err(),
        ConfigError::Quorum {
            quorum: 2,
            nodes: 5,
            min: 3
        }
    );
    assert!(b.clone().quorum(6).config().is_err());
    assert_eq!(
        b.clone()
            .drift_factor(f64::NAN)
            .config()
            .unwrap_err()
            .to_string(),
        "drift factor NaN is not in [0, 1)"
    );
    assert_eq!(
        b.clone().node_timeout(Duration::ZERO).config().unwrap_err(),
        ConfigError::NodeTimeout(Duration::ZERO)
    );
    let years = Duration::from_secs(500_000_000_000 * 31_557_600 / 1_000_000);
    for huge in [years, Duration::from_secs(u64::MAX), Duration::MAX] {
        assert_eq!(
            b.clone().node_timeout(huge).config().unwrap_err(),
            ConfigError::NodeTimeout(huge)
        );
        assert_eq!(
            b.clone().retry(3, huge).config().unwrap_err(),
            ConfigError::RetryDelay(huge)
        );
    }
    assert!(b
        .clone()
        .node_timeout(MAX_OPTION_DURATION)
        .retry(3, MAX_OPTION_DURATION)
        .config()
        .is_ok());
    assert_eq!(
        b.clone().retry(0, Duration::ZERO).config().unwrap_err(),
        ConfigError::Tries
    );
    assert_eq!(builder().config().unwrap_err(), ConfigError::NoNodes);
    assert_eq!(
        builder()
            .nodes(["127.0.0.1:1", "redis://127.0.0.1:1"])
            .config()
            .unwrap_err(),
        ConfigError::DuplicateNode("127.0.0.1:1".into())
    );
    // Same server, other database: two independent keyspaces, though not independent
    // failures; allowed, as the user asked for it.
    assert!(builder()
        .nodes(["127.0.0.1:1", "127.0.0.1:1/1"])
        .config()
        .is_ok());
    // Four nodes need three.
    assert_eq!(builder().nodes(&five[..4]).config().unwrap().quorum(), 3);
}
