//! Seeds run and reported: each seed's world run under `catch_unwind` (a panic is a
//! violation), the figures summed, the first failing seed shrunk and its replay printed, all
//! as one JSON object written here by hand.

use crate::check::Violation;
use crate::trace::Fnv;
use crate::world::{Fault, Params, World};

/// What one seed came to.
#[derive(Debug)]
pub struct SeedResult {
    /// The parameters it ran with, its sizes as drawn.
    pub params: Params,
    /// Operations started.
    pub operations: u64,
    /// Locks acquired.
    pub acquisitions: u64,
    /// What the checker found.
    pub violations: Vec<Violation>,
    /// The trace's hash.
    pub trace_hash: u64,
    /// The trace, when asked for.
    pub trace: Vec<String>,
    /// Events handled.
    pub events: u64,
    /// Fault episodes, bytes lost, hostile replies.
    pub faults: (u64, u64, u64),
    /// Tries the liveness check after expiry judged.
    pub expiry_judged: u64,
    /// Guarded locks, and those whose guard reported loss.
    pub guards: (u64, u64),
    /// The most replies one connection owed.
    pub owed_max: u64,
    /// Connections dropped out of step, and stale.
    pub replaced: (u64, u64),
    /// Locks granted to clients in fair mode.
    pub fair_acquisitions: u64,
    /// Places in line judged by the fairness checks, and what they found (apart from
    /// `violations`).
    pub fair_places: u64,
    /// Fair mode's broken promises.
    pub fairness: Vec<Violation>,
}

/// Runs one world (a panic is a violation).
pub fn run_one(params: &Params) -> SeedResult {
    let p = params.clone();
    let result = std::panic::catch_unwind(move || World::new(&p).run());
    match result {
        Ok((o, _)) => {
            let mut params = params.clone();
            params.clients = Some(o.sizes.0);
            params.ops = Some(o.sizes.1);
            params.episodes = Some(o.sizes.2);
            SeedResult {
                params,
                operations: o.operations,
                acquisitions: o.acquisitions,
                violations: o.violations,
                trace_hash: o.trace_hash,
                trace: o.trace,
                events: o.events,
                faults: (o.episodes, o.byte_losses, o.hostile_replies),
                expiry_judged: o.expiry_judged,
                guards: o.guards,
                owed_max: o.owed_max,
                replaced: o.replaced,
                fair_acquisitions: o.fair_acquisitions,
                fair_places: o.fairness.places,
                fairness: o.fairness.violations,
            }
        }
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            SeedResult {
                params: params.clone(),
                operations: 0,
                acquisitions: 0,
                violations: vec![Violation {
                    invariant: "panic",
                    at: 0,
                    detail: msg,
                }],
                trace_hash: 0,
                trace: Vec::new(),
                events: 0,
                faults: (0, 0, 0),
                expiry_judged: 0,
                guards: (0, 0),
                owed_max: 0,
                replaced: (0, 0),
                fair_acquisitions: 0,
                fair_places: 0,
                fairness: Vec::new(),
            }
        }
    }
}

/// The most runs one shrink makes.
pub const MAX_SHRINK_RUNS: usize = 300;

/// A smaller failing run of `failing` (fewer clients, operations, fault episodes and fault
/// kinds), failing the same invariant; the parameters as they are if none is.
pub fn shrink(failing: &SeedResult) -> Params {
    let Some(first) = failing.violations.first() else {
        return failing.params.clone();
    };
    let invariant = first.invariant;
    let mut best = failing.params.clone();
    let mut runs = 0;
    let fails = |p: &Params, runs: &mut usize| -> Option<Params> {
        *runs += 1;
        let r = run_one(p);
        r.violations
            .iter()
            .any(|v| v.invariant == invariant)
            .then_some(r.params)
    };
    loop {
        let mut better = None;
        let mut candidates: Vec<Params> = Vec::new();
        let (c, o, e) = (
            best.clients.unwrap_or(1),
            best.ops.unwrap_or(1),
            best.episodes.unwrap_or(0),
        );
        for (cc, oo, ee) in [
            (c.saturating_sub(1).max(1), o, e),
            (c, o / 2, e),
            (c, o.saturating_sub(1), e),
            (c, o, e / 2),
            (c, o, e.saturating_sub(1)),
        ] {
            if (cc, oo, ee) != (c, o, e) {
                let mut p = best.clone();
                p.clients = Some(cc);
                p.ops = Some(oo);
                p.episodes = Some(ee);
                candidates.push(p);
            }
        }
        for f in best.faults.kinds() {
            let mut p = best.clone();
            p.faults = p.faults.without(f);
            candidates.push(p);
        }
        for p in candidates {
            if runs >= MAX_SHRINK_RUNS {
                return best;
            }
            if let Some(found) = fails(&p, &mut runs) {
                better = Some(found);
                break;
            }
        }
        match better {
            Some(p) => best = p,
            None => return best,
        }
    }
}

/// What a batch of seeds came to.
#[derive(Debug, Default)]
pub struct Report {
    /// Seeds run.
    pub seeds: u64,
    /// Operations started.
    pub operations: u64,
    /// Locks acquired.
    pub acquisitions: u64,
    /// Violations found.
    pub violations: u64,
    /// Seeds with a violation.
    pub failing_seeds: u64,
    /// The first: its seed, invariant, words, the shrunk parameters and their trace.
    pub first: Option<First>,
    /// The hash of every seed's trace hash, in order.
    pub trace_hash: u64,
    /// Events handled.
    pub events: u64,
    /// Fault episodes, bytes lost, hostile replies.
    pub faults: (u64, u64, u64),
    /// Tries the liveness check after expiry judged.
    pub expiry_judged: u64,
    /// Guarded locks, and those whose guard reported loss.
    pub guards: (u64, u64),
    /// The most replies one connection owed, in any seed.
    pub owed_max: u64,
    /// Connections dropped out of step, and stale.
    pub replaced: (u64, u64),
    /// Seconds of wall time the seeds took (not the shrinking).
    pub seconds: f64,
    /// Locks granted to clients in fair mode.
    pub fair_acquisitions: u64,
    /// Places in line the fairness checks judged.
    pub fair_places: u64,
    /// Fair mode's broken promises (`fifo`, `passed-over`): counted apart from `violations`.
    pub fairness_violations: u64,
    /// Seeds with one.
    pub fairness_failing_seeds: u64,
    /// The first: its seed, invariant, words and replay (not shrunk).
    pub first_fairness: Option<(u64, &'static str, String, String)>,
}

/// The first violation of a batch.
#[derive(Debug)]
pub struct First {
    /// Its seed.
    pub seed: u64,
    /// Which invariant.
    pub invariant: &'static str,
    /// In words.
    pub detail: String,
    /// The shrunk parameters that still fail.
    pub shrunk: Params,
    /// The shrunk run's trace (its last lines).
    pub trace: Vec<String>,
}

/// The most trace lines a report carries.
pub const REPORT_LINES: usize = 400;

/// Runs `seeds` seeds from `base.seed` on, with `base`'s other parameters; shrinks the first
/// failure when `shrinking`.
pub fn run_seeds(base: &Params, seeds: u64, shrinking: bool) -> Report {
    let mut report = Report::default();
    let mut hash = Fnv::default();
    let started = std::time::Instant::now();
    let mut first_failing: Option<SeedResult> = None;
    for k in 0..seeds {
        let mut p = base.clone();
        p.seed = base.seed.wrapping_add(k);
        let r = run_one(&p);
        report.seeds += 1;
        report.operations += r.operations;
        report.acquisitions += r.acquisitions;
        report.violations += r.violations.len() as u64;
        report.events += r.events;
        report.faults.0 += r.faults.0;
        report.faults.1 += r.faults.1;
        report.faults.2 += r.faults.2;
        report.expiry_judged += r.expiry_judged;
        report.guards.0 += r.guards.0;
        report.guards.1 += r.guards.1;
        report.owed_max = report.owed_max.max(r.owed_max);
        report.replaced.0 += r.replaced.0;
        report.replaced.1 += r.replaced.1;
        hash.u64(r.trace_hash);
        report.fair_acquisitions += r.fair_acquisitions;
        report.fair_places += r.fair_places;
        report.fairness_violations += r.fairness.len() as u64;
        if let Some(v) = r.fairness.first() {
            report.fairness_failing_seeds += 1;
            if report.first_fairness.is_none() {
                let replay = r.params.replay_command();
                report.first_fairness =
                    Some((r.params.seed, v.invariant, v.detail.clone(), replay));
            }
        }
        if !r.violations.is_empty() {
            report.failing_seeds += 1;
            if first_failing.is_none() {
                first_failing = Some(r);
            }
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.trace_hash = hash.finish();
    if let Some(f) = first_failing {
        let v = &f.violations[0];
        let shrunk = if shrinking {
            shrink(&f)
        } else {
            f.params.clone()
        };
        let mut traced = shrunk.clone();
        traced.trace = true;
        let t = run_one(&traced);
        let (invariant, detail) = t
            .violations
            .iter()
            .find(|w| w.invariant == v.invariant)
            .map_or((v.invariant, v.detail.clone()), |w| {
                (w.invariant, w.detail.clone())
            });
        let lines = t.trace;
        let skip = lines.len().saturating_sub(REPORT_LINES);
        report.first = Some(First {
            seed: f.params.seed,
            invariant,
            detail,
            shrunk,
            trace: lines[skip..].to_vec(),
        });
    }
    report
}

/// `s` as a JSON string.
pub fn json_str(s: &str) -> String {
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

impl Report {
    /// The report as one JSON object.
    pub fn json(&self, base: &Params) -> String {
        let first = match &self.first {
            None => "null".to_string(),
            Some(f) => {
                let lines: Vec<String> = f.trace.iter().map(|l| json_str(l)).collect();
                format!(
                    "{{\"seed\":{},\"invariant\":{},\"detail\":{},\"replay\":{},\"trace\":[{}]}}",
                    f.seed,
                    json_str(f.invariant),
                    json_str(&f.detail),
                    json_str(&f.shrunk.replay_command()),
                    lines.join(",")
                )
            }
        };
        let first_fair = match &self.first_fairness {
            None => "null".to_string(),
            Some((seed, invariant, detail, replay)) => format!(
                "{{\"seed\":{seed},\"invariant\":{},\"detail\":{},\"replay\":{}}}",
                json_str(invariant),
                json_str(detail),
                json_str(replay)
            ),
        };
        let ops_per_s = if self.seconds > 0.0 {
            self.operations as f64 / self.seconds
        } else {
            0.0
        };
        format!(
            "{{\"seeds\":{},\"first_seed\":{},\"faults\":{},\"negative\":{},\"operations\":{},\"acquisitions\":{},\"violations\":{},\"failing_seeds\":{},\"first_violation\":{},\"trace_hash\":\"{:016x}\",\"events\":{},\"fault_episodes\":{},\"bytes_lost\":{},\"hostile_replies\":{},\"expiry_tries_judged\":{},\"guards\":{},\"guards_lost\":{},\"owed_max\":{},\"desynced_connections\":{},\"stale_connections\":{},\"fair_acquisitions\":{},\"fair_places_judged\":{},\"fairness_violations\":{},\"fairness_failing_seeds\":{},\"first_fairness_violation\":{},\"seconds\":{:.3},\"operations_per_second\":{:.0}}}",
            self.seeds,
            base.seed,
            json_str(&base.faults.names()),
            base.negative.map_or("null".into(), |n| json_str(n.name())),
            self.operations,
            self.acquisitions,
            self.violations,
            self.failing_seeds,
            first,
            self.trace_hash,
            self.events,
            self.faults.0,
            self.faults.1,
            self.faults.2,
            self.expiry_judged,
            self.guards.0,
            self.guards.1,
            self.owed_max,
            self.replaced.0,
            self.replaced.1,
            self.fair_acquisitions,
            self.fair_places,
            self.fairness_violations,
            self.fairness_failing_seeds,
            first_fair,
            self.seconds,
            ops_per_s
        )
    }

    /// The report in words.
    pub fn text(&self, base: &Params) -> String {
        let mut s = format!(
            "seeds {} from {} (faults {}{})\noperations {}, acquisitions {}, events {}, fault episodes {}, tries judged after expiry {}, guarded locks {} ({} lost), most replies owed {}, connections dropped out of step {} and stale {}\nviolations {} in {} seeds\ntrace hash {:016x}\n{:.2} s, {:.0} operations/s\n",
            self.seeds,
            base.seed,
            base.faults.names(),
            base.negative.map_or(String::new(), |n| format!(", negative {}", n.name())),
            self.operations,
            self.acquisitions,
            self.events,
            self.faults.0,
            self.expiry_judged,
            self.guards.0,
            self.guards.1,
            self.owed_max,
            self.replaced.0,
            self.replaced.1,
            self.violations,
            self.failing_seeds,
            self.trace_hash,
            self.seconds,
            if self.seconds > 0.0 { self.operations as f64 / self.seconds } else { 0.0 }
        );
        s.push_str(&format!(
            "fair mode: {} acquisitions, {} places in line judged, fairness violations {} in {} seeds\n",
            self.fair_acquisitions,
            self.fair_places,
            self.fairness_violations,
            self.fairness_failing_seeds
        ));
        if let Some((seed, invariant, detail, replay)) = &self.first_fairness {
            s.push_str(&format!(
                "first fairness violation: seed {seed}, {invariant}: {detail}\nreplay: {replay}\n"
            ));
        }
        if let Some(f) = &self.first {
            s.push_str(&format!(
                "first violation: seed {}, {}: {}\nreplay: {}\n",
                f.seed,
                f.invariant,
                f.detail,
                f.shrunk.replay_command()
            ));
            for l in &f.trace {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}

/// Whether `faults` may count toward safety: byte loss is not something a real network does.
pub fn counts_for_safety(p: &Params) -> bool {
    !p.faults.has(Fault::ByteLoss)
}
