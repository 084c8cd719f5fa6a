//! Fault episodes: each begins (a master slowed, refusing, paused, crashed or hostile, a link
//! reset, half-closed or blackholed, a client cut off) and, where it lasts, ends.

use super::{EpisodeKind, Ev, Fault, Negative, World, NEVER};

impl World {
    pub(super) fn fault_start(&mut self, e: u32) {
        let ep = self.sim.episodes[e as usize];
        let sim = &mut self.sim;
        let m = ep.a as usize;
        let mut end = Some(sim.now + ep.len);
        let words = match ep.kind {
            EpisodeKind::Fault(Fault::Delay) => {
                let nt = self
                    .clients
                    .iter()
                    .map(|c| c.cfg().node_timeout().as_nanos() as u64)
                    .max()
                    .unwrap_or(1);
                sim.masters[m].slow_until = sim.now + ep.len;
                sim.masters[m].slow_extra = sim.fault_rng.range(nt / 4, 3 * nt);
                sim.trouble_begin(m, sim.now + ep.len);
                end = None;
                format!(
                    "master {m}'s links slowed by {:.3} ms",
                    sim.masters[m].slow_extra as f64 / 1e6
                )
            }
            EpisodeKind::Fault(Fault::Refuse) => {
                sim.masters[m].refusing = true;
                sim.trouble_for(e, m);
                format!("master {m} refuses connections")
            }
            EpisodeKind::Fault(Fault::Reset) => {
                end = None;
                match sim.some_live_link(None) {
                    Some(l) => {
                        sim.reset(l);
                        let lm = sim.links[l as usize].master as usize;
                        sim.trouble_begin(lm, sim.now);
                        format!("link {l} reset")
                    }
                    None => "no link to reset".into(),
                }
            }
            EpisodeKind::Fault(Fault::HalfClose) => {
                end = None;
                match sim.some_live_link(None) {
                    Some(l) => {
                        sim.half_close(l);
                        let lm = sim.links[l as usize].master as usize;
                        sim.trouble_begin(lm, sim.now);
                        format!("link {l} half-closed by the master")
                    }
                    None => "no link to half-close".into(),
                }
            }
            EpisodeKind::Fault(Fault::Blackhole) => match sim.some_live_link(None) {
                Some(l) => {
                    sim.links[l as usize].blackhole = true;
                    sim.episodes[e as usize].b = l;
                    let lm = sim.links[l as usize].master as usize;
                    sim.trouble_for(e, lm);
                    format!("link {l} blackholed")
                }
                None => {
                    end = None;
                    "no link to blackhole".into()
                }
            },
            EpisodeKind::Fault(Fault::Partition) => {
                let c = sim.fault_rng.below(sim.cut.len() as u64) as usize;
                let n = sim.masters.len() as u64;
                let mask = (sim.fault_rng.below((1u64 << n) - 1) + 1) & ((1u64 << n) - 1);
                sim.cut[c] |= mask;
                for cut in 0..n as usize {
                    if mask & (1 << cut) != 0 {
                        sim.trouble_for(e, cut);
                    }
                }
                sim.episodes[e as usize].a = c as u32;
                sim.episodes[e as usize].b = mask as u32;
                format!("client {c} cut off from masters {mask:#b}")
            }
            EpisodeKind::Fault(Fault::Pause) => {
                sim.masters[m].paused = true;
                sim.trouble_for(e, m);
                format!("master {m} paused")
            }
            EpisodeKind::Fault(Fault::Crash) => {
                if !sim.masters[m].up {
                    end = None;
                    format!("master {m} already down")
                } else {
                    sim.crash_master(m, true);
                    sim.trouble_for(e, m);
                    format!("master {m} crashed (data kept)")
                }
            }
            EpisodeKind::Fault(Fault::Restart)
            | EpisodeKind::Negative(Negative::RestartWithoutDelay) => {
                let fenced = self.clients.iter().any(|c| c.cfg().fencing_key().is_some());
                let negative = matches!(ep.kind, EpisodeKind::Negative(_));
                if !sim.masters[m].up {
                    end = None;
                    format!("master {m} already down")
                } else if fenced && !negative {
                    // The counter must outlive every lock: fenced masters keep their data.
                    sim.crash_master(m, true);
                    sim.trouble_for(e, m);
                    format!("master {m} crashed (data kept: fenced clients)")
                } else {
                    sim.crash_master(m, false);
                    sim.trouble_for(e, m);
                    sim.masters[m].lost_data_at = Some(sim.now);
                    if negative {
                        sim.keys_void = true;
                    }
                    format!(
                        "master {m} crashed, data lost, back in {:.3} ms",
                        ep.len as f64 / 1e6
                    )
                }
            }
            EpisodeKind::Fault(Fault::Hostile) => {
                sim.masters[m].hostile = true;
                sim.trouble_for(e, m);
                format!("master {m} sends hostile replies")
            }
            EpisodeKind::Negative(Negative::ClockJump) => {
                end = None;
                sim.masters[m].jump += u64::from(ep.b) * 1_000;
                sim.trouble_begin(m, NEVER);
                sim.keys_void = true;
                format!(
                    "master {m}'s clock jumps {:.3} ms ahead",
                    f64::from(ep.b) / 1e3
                )
            }
            EpisodeKind::Fault(_) | EpisodeKind::Negative(_) => {
                end = None;
                String::new()
            }
        };
        sim.trace
            .ev(sim.now, 30, u64::from(e), 0, || format!("fault: {words}"));
        if let Some(t) = end {
            sim.push(t, Ev::FaultEnd(e));
        }
    }

    pub(super) fn fault_end(&mut self, e: u32) {
        let ep = self.sim.episodes[e as usize];
        let sim = &mut self.sim;
        for (m, i) in std::mem::take(&mut sim.ep_trouble[e as usize]) {
            sim.trouble_end(m as usize, i);
        }
        let m = ep.a as usize;
        let words = match ep.kind {
            EpisodeKind::Fault(Fault::Refuse) => {
                sim.masters[m].refusing = false;
                format!("master {m} accepts connections")
            }
            EpisodeKind::Fault(Fault::Blackhole) => {
                let l = ep.b;
                sim.links[l as usize].blackhole = false;
                if sim.fault_rng.chance(300) {
                    sim.reset(l);
                    format!("link {l} blackhole ends in a reset")
                } else {
                    sim.rearm(l);
                    format!("link {l} delivers what it held")
                }
            }
            EpisodeKind::Fault(Fault::Partition) => {
                let c = ep.a as usize;
                sim.cut[c] &= !u64::from(ep.b);
                for l in 0..sim.links.len() as u32 {
                    if sim.links[l as usize].client as usize == c {
                        sim.rearm(l);
                    }
                }
                format!("client {c}'s partition healed")
            }
            EpisodeKind::Fault(Fault::Pause) => {
                sim.masters[m].paused = false;
                for l in sim.masters[m].links.clone() {
                    sim.rearm(l);
                }
                format!("master {m} resumed")
            }
            EpisodeKind::Fault(Fault::Crash | Fault::Restart)
            | EpisodeKind::Negative(Negative::RestartWithoutDelay) => {
                sim.masters[m].up = true;
                format!("master {m} restarted")
            }
            EpisodeKind::Fault(Fault::Hostile) => {
                sim.masters[m].hostile = false;
                format!("master {m} honest again")
            }
            _ => String::new(),
        };
        sim.trace.ev(sim.now, 31, u64::from(e), 0, || {
            format!("fault ends: {words}")
        });
    }
}
