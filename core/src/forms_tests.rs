//! The fallback chain: which form comes next after which refusal, under each mode.

use super::*;
use crate::command::{Command, Form, OpKind};
use crate::lock::Name;
use crate::Token;

fn err(msg: &str) -> Frame {
    Frame::Error(bytes::Bytes::copy_from_slice(msg.as_bytes()))
}

const NOPERM: &str = "NOPERM User app has no permissions to run the 'evalsha' command";
const UNKNOWN: &str = "ERR unknown command 'DELIFEQ', with args beginning with: 'k' 't'";

fn encoded(kind: OpKind, resources: &[Name]) -> BytesMut {
    let token = Token::from_random(&mut crate::random::Seeded::new(107));
    let cmd = Command {
        kind,
        resources,
        token: Some(&token),
        ttl_ms: 5_000,
        counter: None,
        fence_value: 0,
        watch: None,
    };
    let mut b = BytesMut::new();
    cmd.encode(&mut b, Form::Evalsha);
    b
}

#[test]
fn refusals_are_noperm_and_unknown_commands_only() {
    assert!(is_refusal(&err(NOPERM)));
    assert!(is_refusal(&err(UNKNOWN)));
    assert!(is_refusal(&err("ERR Unknown command 'EVALSHA'")));
    assert!(!is_refusal(&err("NOSCRIPT No matching script.")));
    assert!(!is_refusal(&err("OOM command not allowed")));
    assert!(!is_refusal(&Frame::Integer(1)));
}

#[test]
fn auto_walks_native_script_function_skipping_what_was_refused() {
    let mut f = Forms::new(Scripts::Auto);
    // Before HELLO: the script.
    assert_eq!(f.choose(true), Sent::Evalsha);
    f.identified(Some(Native::Valkey));
    assert_eq!(f.choose(true), Sent::Native(Native::Valkey));
    assert_eq!(f.choose(false), Sent::Evalsha, "no native form: the script");
    // The ACL denies DELIFEQ: the same command as a script, and scripts from now on.
    assert_eq!(
        f.after(Sent::Native(Native::Valkey), &err(NOPERM), true),
        Some(Sent::Evalsha)
    );
    assert_eq!(f.choose(true), Sent::Evalsha);
    // It denies scripting too: functions.
    assert_eq!(
        f.after(Sent::Evalsha, &err(NOPERM), true),
        Some(Sent::Fcall)
    );
    assert!(f.functions());
    assert_eq!(f.choose(true), Sent::Fcall);
    // And functions: nothing is left; the refusal is handed over.
    assert_eq!(f.after(Sent::Fcall, &err(NOPERM), true), None);
    // A NOSCRIPT is no refusal: the EVAL form, the chain unchanged.
    let mut f = Forms::new(Scripts::Auto);
    assert_eq!(
        f.after(Sent::Evalsha, &err("NOSCRIPT No matching script."), false),
        Some(Sent::Eval)
    );
    assert_eq!(f.choose(false), Sent::Evalsha);
    // Any other error is the command's own answer.
    assert_eq!(f.after(Sent::Evalsha, &err("OOM no"), false), None);
}

#[test]
fn a_user_denied_scripting_reaches_the_native_commands() {
    // Valkey with `-@scripting`: EVALSHA and FCALL both refused, DELIFEQ allowed. A fresh
    // connection's first release goes out before HELLO has answered.
    let mut f = Forms::new(Scripts::Auto);
    let first = f.choose(true);
    assert_eq!(first, Sent::Evalsha);
    f.identified(Some(Native::Valkey));
    assert_eq!(
        f.after(first, &err(NOPERM), true),
        Some(Sent::Native(Native::Valkey))
    );
    // A command with no native form has nowhere to go after scripts: functions.
    let mut f = Forms::new(Scripts::Auto);
    f.identified(Some(Native::Valkey));
    assert_eq!(
        f.after(Sent::Evalsha, &err(NOPERM), false),
        Some(Sent::Fcall)
    );
    assert_eq!(f.after(Sent::Fcall, &err(NOPERM), false), None);
}

#[test]
fn native_mode_uses_native_commands_from_the_first_and_corrects_the_dialect() {
    let mut f = Forms::new(Scripts::Native);
    assert_eq!(f.choose(true), Sent::Native(Native::Valkey), "before HELLO");
    f.identified(Some(Native::Redis));
    assert_eq!(
        f.after(Sent::Native(Native::Valkey), &err(UNKNOWN), true),
        Some(Sent::Native(Native::Redis))
    );
    assert_eq!(f.choose(true), Sent::Native(Native::Redis));
    // A refusal of the right dialect is handed over: no script in native mode.
    assert_eq!(
        f.after(Sent::Native(Native::Redis), &err(NOPERM), true),
        None
    );
    // Commands with no native form are scripts, sent with their text: nothing is loaded
    // ahead in native mode, and a fresh connection's `NOSCRIPT` would cost an acquisition
    // its vote when another command is queued behind it.
    assert_eq!(f.choose(false), Sent::Eval);
    assert!(!f.functions());
}

#[test]
fn eval_and_function_modes_keep_their_one_form() {
    let mut f = Forms::new(Scripts::Eval);
    f.identified(Some(Native::Valkey));
    assert_eq!(f.choose(true), Sent::Evalsha);
    assert_eq!(f.after(Sent::Evalsha, &err(NOPERM), true), None);
    let mut f = Forms::new(Scripts::Function);
    assert_eq!(f.choose(true), Sent::Fcall);
    assert_eq!(f.after(Sent::Fcall, &err(NOPERM), true), None);
    assert_eq!(
        f.after(Sent::Fcall, &err("ERR Function not found"), true),
        Some(Sent::Fcall),
        "a missing library is loaded and the call sent again"
    );
}

#[test]
fn every_form_is_written_from_the_evalsha_copy() {
    let one = [Name::new("k")];
    let release = encoded(OpKind::Release, &one);
    let extend = encoded(OpKind::Extend, &one);
    assert!(has_native_form(&release) && has_native_form(&extend));
    let two = [Name::new("a"), Name::new("b")];
    assert!(!has_native_form(&encoded(OpKind::Release, &two)));
    assert!(!has_native_form(&encoded(OpKind::Acquire, &two)));

    let text = |to: Sent, from: &[u8]| {
        let mut out = BytesMut::new();
        assert!(write_as(from, to, &mut out), "{to:?}");
        String::from_utf8_lossy(&out).into_owned()
    };
    assert!(text(Sent::Native(Native::Valkey), &release).contains("DELIFEQ\r\n$1\r\nk\r\n"));
    let redis = text(Sent::Native(Native::Redis), &release);
    assert!(
        redis.starts_with("*4\r\n$5\r\nDELEX\r\n$1\r\nk\r\n$4\r\nIFEQ"),
        "{redis}"
    );
    let ext = text(Sent::Native(Native::Valkey), &extend);
    assert!(
        ext.starts_with("*7\r\n$3\r\nSET\r\n$1\r\nk\r\n")
            && ext.ends_with("$2\r\nPX\r\n$4\r\n5000\r\n"),
        "{ext}"
    );
    assert!(text(Sent::Fcall, &release).contains("redlock_mux_v13_release"));
    assert!(text(Sent::Eval, &release).contains("redis.call"));
    let mut out = BytesMut::new();
    assert!(!write_as(
        &encoded(OpKind::Release, &two),
        Sent::Native(Native::Valkey),
        &mut out
    ));
    assert!(out.is_empty());
}

/// Fair mode's scriptless forms (see [`Alt`]): a connection whose user may run neither
/// scripts nor functions sends the enter and the claim of one resource as `SET NX PX`, the
/// hand-off as the native release; before those refusals, and for a fenced or multi-resource
/// command, the script.
#[test]
fn fair_commands_go_scriptless_only_where_no_script_or_function_may_run() {
    let one = [Name::new("k")];
    let enter = encoded(OpKind::Enter, &one);
    let claim = encoded(OpKind::Claim, &one);
    let token = Token::from_random(&mut crate::random::Seeded::new(107));
    let mut handoff = BytesMut::new();
    let line = format!("{}k", script::QUEUE_PREFIX);
    resp::encode_command(
        &mut handoff,
        &[
            b"EVALSHA",
            script::HANDOFF_SHA1.as_bytes(),
            b"2",
            b"k",
            line.as_bytes(),
            token.as_bytes(),
            b"100",
            b"me",
            b"1",
            b"0",
        ],
    );
    assert_eq!(alt_of(&enter), Alt::Set);
    assert_eq!(alt_of(&claim), Alt::Set);
    assert_eq!(alt_of(&handoff), Alt::Release);
    assert_eq!(alt_of(&encoded(OpKind::Release, &one)), Alt::Native);
    let two = [Name::new("a"), Name::new("b")];
    assert_eq!(alt_of(&encoded(OpKind::Enter, &two)), Alt::None);
    assert_eq!(alt_of(&encoded(OpKind::Wait, &one)), Alt::None);

    let text = |from: &[u8], n: Native| {
        let mut out = BytesMut::new();
        assert!(write_as(from, Sent::Native(n), &mut out));
        String::from_utf8_lossy(&out).into_owned()
    };
    let set = format!(
        "*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$40\r\n{}\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n5000\r\n",
        token.as_str()
    );
    assert_eq!(text(&enter, Native::Valkey), set);
    assert_eq!(text(&claim, Native::Redis), set);
    assert_eq!(
        text(&handoff, Native::Valkey),
        format!(
            "*3\r\n$7\r\nDELIFEQ\r\n$1\r\nk\r\n$40\r\n{}\r\n",
            token.as_str()
        )
    );

    // The chain: script, function, then the scriptless form.
    let mut f = Forms::new(Scripts::Auto);
    f.identified(Some(Native::Valkey));
    for alt in [Alt::Set, Alt::Release] {
        assert_eq!(
            f.choose_alt(alt),
            Sent::Evalsha,
            "{alt:?}: the script first"
        );
    }
    assert_eq!(
        f.after_alt(Sent::Evalsha, &err(NOPERM), Alt::Set),
        Some(Sent::Fcall)
    );
    assert_eq!(
        f.after_alt(Sent::Fcall, &err(NOPERM), Alt::Set),
        Some(Sent::Native(Native::Valkey))
    );
    assert_eq!(f.choose_alt(Alt::Release), Sent::Native(Native::Valkey));
    assert_eq!(f.choose_alt(Alt::None), Sent::Evalsha, "a wait has none");
    // A server without native commands: the enter still goes as `SET NX`, the hand-off as
    // the script, whose refusal says why.
    let mut f = Forms::new(Scripts::Auto);
    f.identified(None);
    f.after_alt(Sent::Evalsha, &err(NOPERM), Alt::Release);
    assert_eq!(f.after_alt(Sent::Fcall, &err(NOPERM), Alt::Release), None);
    assert_eq!(f.choose_alt(Alt::Set), Sent::Native(Native::Valkey));
    // Refused native releases do not stop the `SET NX`.
    assert_eq!(
        f.after_alt(Sent::Native(Native::Valkey), &err(UNKNOWN), Alt::Release),
        None
    );
    assert_eq!(f.choose_alt(Alt::Set), Sent::Native(Native::Valkey));
}
