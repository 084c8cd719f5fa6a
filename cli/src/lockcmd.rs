//! `redlock lock` and `redlock unlock`: a lock taken by one shell command and released by
//! another, on the blocking client (no runtime to start for one round).

use redlock_mux::{Lock, Token};

use crate::args::{describe, names, Global, LockArgs, StatusArgs, UnlockArgs};
use crate::exit::{self, Failure};
use crate::out;

/// Takes the lock (with the configured retries) and prints its token and validity.
pub fn lock(global: &Global, a: &LockArgs) -> Result<u8, Failure> {
    let redlock = global.blocking(&global.node_list())?;
    let lock = redlock
        .lock_many(&names(&a.resources), global.ttl)
        .map_err(|e| Failure::lock(&format!("lock {}", describe(&a.resources)), &e))?;
    let validity_ms = lock.validity().as_millis();
    let fencing = lock
        .fencing_token()
        .map_or_else(|| "null".to_string(), |t| t.to_string());
    let text = if a.json {
        let all: Vec<String> = a.resources.iter().map(|r| json_string(r)).collect();
        format!(
            "{{\"resource\":{},\"resources\":[{}],\"token\":\"{}\",\"fencing_token\":{fencing},\"validity_ms\":{validity_ms},\"ttl_ms\":{}}}\n",
            json_string(lock.resource()),
            all.join(","),
            lock.token(),
            lock.ttl().as_millis()
        )
    } else {
        let mut text = format!("token={}\nvalidity_ms={validity_ms}\n", lock.token());
        if let Some(t) = lock.fencing_token() {
            text.push_str(&format!("fencing_token={t}\n"));
        }
        text
    };
    if let Err(f) = out::print(&text, "the token") {
        // Nobody has the token: the lock could only wait out its ttl. Released instead.
        let _ = redlock.unlock(&lock);
        return Err(Failure::new(
            f.code,
            format!("{}; the lock was released", f.message),
        ));
    }
    Ok(0)
}

/// Releases the lock held by `--token`.
pub fn unlock(global: &Global, a: &UnlockArgs) -> Result<u8, Failure> {
    let token = Token::parse(a.token.trim()).ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!(
                "invalid token {:?}: expected the 40 hex digits `redlock lock` printed",
                a.token
            ),
        )
    })?;
    let what = || format!("unlock {}", describe(&a.resources));
    let lock = Lock::from_token_many(&names(&a.resources), token)
        .map_err(|e| Failure::lock(&what(), &e))?;
    let redlock = global.blocking(&global.node_list())?;
    redlock
        .unlock(&lock)
        .map_err(|e| Failure::lock(&what(), &e))?;
    Ok(0)
}

/// A token as `redlock status` shows it: its first 8 characters (enough to tell holders
/// apart, not enough to release someone else's lock).
fn prefix(t: &Token) -> String {
    format!("{}…", &t.as_str()[..8])
}

/// What `status` can say about a resource from the nodes' answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A quorum holds this token.
    Held(Token),
    /// No token can be on a quorum, even counting every node that did not answer as holding it.
    NotHeld,
    /// Too few nodes answered to tell: fewer than a quorum, or so few that the silent ones and
    /// the holders of one token could make a quorum.
    Unknown,
}

impl Verdict {
    /// The verdict on `view`.
    fn of(view: &redlock_mux::Inspection) -> Verdict {
        use redlock_mux::Holder;
        if let Some(t) = view.quorum_holder() {
            return Verdict::Held(t);
        }
        let silent = view
            .nodes
            .iter()
            .filter(|n| matches!(n.holder, Holder::Unknown(_)))
            .count();
        let answered = view.nodes.len() - silent;
        let tokens: Vec<Token> = view
            .nodes
            .iter()
            .filter_map(|n| match n.holder {
                Holder::Token(t) => Some(t),
                _ => None,
            })
            .collect();
        let most = tokens
            .iter()
            .map(|t| tokens.iter().filter(|u| *u == t).count())
            .max()
            .unwrap_or(0);
        if answered < view.quorum || most + silent >= view.quorum {
            Verdict::Unknown
        } else {
            Verdict::NotHeld
        }
    }

    /// Its name in `--json`'s `state`.
    fn name(self) -> &'static str {
        match self {
            Verdict::Held(_) => "held",
            Verdict::NotHeld => "not held",
            Verdict::Unknown => "unknown",
        }
    }
}

/// Shows each node's holder (or why it did not answer) and ttl for the resource, and whether a
/// quorum holds it, does not, or cannot be known to (fewer than a quorum answered, or the
/// silent nodes could complete one: then it exits [`UNAVAILABLE`](exit::UNAVAILABLE)).
pub fn status(global: &Global, a: &StatusArgs) -> Result<u8, Failure> {
    if let Some(n) = a.permits {
        return permits_status(global, a, n);
    }
    let redlock = global.blocking(&global.node_list())?;
    let what = || format!("status {:?}", a.resource);
    let view = redlock
        .inspect_line(&a.resource)
        .map_err(|e| Failure::lock(&what(), &e))?;
    let verdict = Verdict::of(&view);
    let total = view.nodes.len();
    let answered = view
        .nodes
        .iter()
        .filter(|n| !matches!(n.holder, redlock_mux::Holder::Unknown(_)))
        .count();
    let text = if a.json {
        status_json(&a.resource, &view, &verdict, answered)
    } else {
        status_text(&view, &verdict, answered)
    };
    out::print(&text, "the status")?;
    if verdict == Verdict::Unknown {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{}: whether it is held is unknown: {answered} of {total} nodes answered",
                what()
            ),
        ));
    }
    Ok(0)
}

/// `status --permits N`: each slot of the semaphore as `status` shows a lock (a line per slot
/// with its verdict; with `--json`, one object holding each slot's), then how many permits a
/// quorum holds. Exits [`UNAVAILABLE`](exit::UNAVAILABLE) when some slot's state is unknown.
fn permits_status(global: &Global, a: &StatusArgs, n: u32) -> Result<u8, Failure> {
    let what = || format!("status {:?} --permits {n}", a.resource);
    let semaphore = redlock_mux::Semaphore::new(&a.resource, n as usize)
        .map_err(|e| Failure::new(exit::USAGE, format!("{}: {e}", what())))?;
    let redlock = global.blocking(&global.node_list())?;
    let (mut held, mut unknown) = (0usize, 0usize);
    let (mut lines, mut objects) = (String::new(), Vec::new());
    for i in 0..semaphore.permits() {
        let Some(slot) = semaphore.slot_key(i) else {
            continue;
        };
        let view = redlock
            .inspect(slot)
            .map_err(|e| Failure::lock(&what(), &e))?;
        let verdict = Verdict::of(&view);
        let answered = view
            .nodes
            .iter()
            .filter(|n| !matches!(n.holder, redlock_mux::Holder::Unknown(_)))
            .count();
        match verdict {
            Verdict::Held(_) => held += 1,
            Verdict::Unknown => unknown += 1,
            Verdict::NotHeld => {}
        }
        if a.json {
            objects.push(
                status_json(slot, &view, &verdict, answered)
                    .trim_end()
                    .to_string(),
            );
        } else {
            let shown = match &verdict {
                Verdict::Held(t) => format!("held: {}", prefix(t)),
                v => v.name().to_string(),
            };
            lines.push_str(&format!("{slot}  {shown}\n"));
        }
    }
    let text = if a.json {
        format!(
            "{{\"resource\":{},\"permits\":{n},\"held\":{held},\"unknown\":{unknown},\"slots\":[{}]}}\n",
            json_string(&a.resource),
            objects.join(",")
        )
    } else {
        format!("{lines}{held} of {n} permits held by a quorum, {unknown} unknown\n")
    };
    out::print(&text, "the status")?;
    if unknown > 0 {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!("{}: {unknown} of {n} slots' state is unknown", what()),
        ));
    }
    Ok(0)
}

/// A node's holder, as `status` shows it.
fn holder_name(h: &redlock_mux::Holder) -> String {
    use redlock_mux::Holder;
    match h {
        Holder::Free => "free".to_string(),
        Holder::Token(t) => prefix(t),
        Holder::Other => "not a lock token".to_string(),
        Holder::Reserved(id) => format!("reserved for {id}"),
        Holder::Unknown(why) => format!("unknown ({why})"),
        _ => "unknown".to_string(),
    }
}

/// `status --json`: one object, each node's holder, ttl and error.
fn status_json(
    resource: &str,
    view: &redlock_mux::Inspection,
    verdict: &Verdict,
    answered: usize,
) -> String {
    use redlock_mux::Holder;
    let nodes: Vec<String> = view
        .nodes
        .iter()
        .map(|n| {
            let ttl = n
                .ttl
                .map_or_else(|| "null".to_string(), |d| d.as_millis().to_string());
            let (shown, error) = match &n.holder {
                Holder::Unknown(why) => ("unknown".to_string(), json_string(&why.to_string())),
                h => (holder_name(h), "null".to_string()),
            };
            let reserved = match &n.holder {
                Holder::Reserved(id) => json_string(id),
                _ => "null".to_string(),
            };
            format!(
                "{{\"node\":{},\"holder\":{},\"ttl_ms\":{ttl},\"error\":{error},\"reserved_for\":{reserved},\"line\":{}}}",
                json_string(&n.addr),
                json_string(&shown),
                line_json(n.line.as_ref())
            )
        })
        .collect();
    let agreed = view.agreed_line().map_or_else(
        || "null".to_string(),
        |l| {
            let ids: Vec<String> = l.waiters.iter().map(|w| json_string(&w.id)).collect();
            format!(
                "{{\"waiters\":[{}],\"count\":{},\"in_order\":{},\"read\":{},\"agreed\":{}}}",
                ids.join(","),
                l.waiters.len(),
                l.in_order,
                l.read,
                l.agreed()
            )
        },
    );
    let held = match verdict {
        Verdict::Held(t) => json_string(&prefix(t)),
        _ => "null".to_string(),
    };
    format!(
        "{{\"resource\":{},\"nodes\":[{}],\"quorum\":{},\"answered\":{answered},\"state\":{},\"held_by_quorum\":{held},\"agreed_line\":{agreed}}}\n",
        json_string(resource),
        nodes.join(","),
        view.quorum,
        json_string(verdict.name())
    )
}

/// A node's line in `status --json`: its waiters (id, ticket), whether there are more, and
/// the line's lease; `null` when it was not read.
fn line_json(line: Option<&redlock_mux::Line>) -> String {
    let Some(line) = line else {
        return "null".to_string();
    };
    let waiters: Vec<String> = line
        .waiters
        .iter()
        .map(|w| format!("{{\"id\":{},\"ticket\":{}}}", json_string(&w.id), w.ticket))
        .collect();
    let lease = line
        .ttl
        .map_or_else(|| "null".to_string(), |d| d.as_millis().to_string());
    format!(
        "{{\"waiters\":[{}],\"more\":{},\"lease_ms\":{lease}}}",
        waiters.join(","),
        line.more
    )
}

/// A node's line as `status` shows it, under the node: the waiters in order, each with its
/// ticket, and the line's lease; nothing for an empty line.
fn line_text(n: &redlock_mux::NodeState) -> String {
    use redlock_mux::Holder;
    match &n.line {
        Some(line) if !line.waiters.is_empty() => {
            let waiters: Vec<String> = line
                .waiters
                .iter()
                .map(|w| format!("{} #{}", w.id, w.ticket))
                .collect();
            let more = if line.more { ", and more" } else { "" };
            let lease = line
                .ttl
                .map_or_else(|| "-".to_string(), |d| format!("{}s", d.as_secs()));
            format!("  line: {}{more}  lease {lease}\n", waiters.join(", "))
        }
        Some(_) => String::new(),
        None if matches!(n.holder, Holder::Unknown(_)) => String::new(),
        None => "  line: unknown (not read)\n".to_string(),
    }
}

/// The line a quorum of nodes agree on, as `status`'s last line.
fn agreed_text(view: &redlock_mux::Inspection) -> String {
    let total = view.nodes.len();
    let Some(line) = view.agreed_line() else {
        return format!("line: unknown: no line read of {total} nodes\n");
    };
    let ids: Vec<&str> = line.waiters.iter().map(|w| w.id.as_str()).collect();
    let count = line.waiters.len();
    let waiters = if count == 1 { "waiter" } else { "waiters" };
    if line.agreed() {
        if count == 0 {
            return format!("line: empty ({} of {total} nodes)\n", line.in_order);
        }
        format!(
            "line: {} ({count} {waiters}, in this order on {} of {total} nodes)\n",
            ids.join(", "),
            line.in_order
        )
    } else {
        format!(
            "line: no order agreed by a quorum ({} of {total}): {} ({count} {waiters} on a quorum, in this order on {} of {total} nodes)\n",
            line.quorum,
            ids.join(", "),
            line.in_order
        )
    }
}

/// `status` as text: a line per node (and its line of waiters, if any), then the verdict and
/// the line a quorum agrees on.
fn status_text(view: &redlock_mux::Inspection, verdict: &Verdict, answered: usize) -> String {
    let total = view.nodes.len();
    let mut text = String::new();
    for n in &view.nodes {
        let ttl = n
            .ttl
            .map_or_else(|| "-".to_string(), |d| format!("{}ms", d.as_millis()));
        text.push_str(&format!(
            "{}  {}  ttl {ttl}\n",
            n.addr,
            holder_name(&n.holder)
        ));
        text.push_str(&line_text(n));
    }
    text.push_str(&match verdict {
        Verdict::Held(t) => format!(
            "held by a quorum ({} of {total}): {}\n",
            view.quorum,
            prefix(t)
        ),
        Verdict::NotHeld => format!("not held by a quorum ({} of {total})\n", view.quorum),
        Verdict::Unknown => format!(
            "unknown: {answered} of {total} nodes answered; counting those that did not, \
             a quorum ({} of {total}) may hold it\n",
            view.quorum
        ),
    });
    text.push_str(&agreed_text(view));
    text
}

/// `s` as a JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a"), "\"a\"");
        assert_eq!(json_string("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"");
    }
}
