//! What a run is made of: the seed, the faults switched on, and the few numbers shrinking
//! lowers (clients, operations, fault episodes). Everything else is drawn from the seed.

/// A kind of fault, each a named switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A link's delay raised for a while, within and beyond the node timeout.
    Delay,
    /// A master refusing connections for a while.
    Refuse,
    /// A connection reset.
    Reset,
    /// A link holding every byte for a while, then delivering them or ending in a reset.
    Blackhole,
    /// A master's side of a connection closed (FIN), the client's left open.
    HalfClose,
    /// Bytes split at every boundary, each piece on its own.
    Split,
    /// A client cut off from a subset of masters, healed later.
    Partition,
    /// A master paused (SIGSTOP) and resumed.
    Pause,
    /// A master crashed and restarted with its data (append-only file, fsync always).
    Crash,
    /// A master crashed and restarted without its data, down for at least the longest ttl.
    Restart,
    /// Masters' clocks running fast or slow, within the drift factor.
    Drift,
    /// A holder paused between acquiring a lock and using it (the fencing debate's GC pause).
    ClientPause,
    /// Replies replaced by hostile ones: wrong types, errors, integers out of range.
    Hostile,
    /// Bytes dropped from the middle of a live stream: no real network does it. Never in the
    /// default mix nor in the safety counts.
    ByteLoss,
}

impl Fault {
    /// Every kind.
    pub const ALL: [Fault; 14] = [
        Fault::Delay,
        Fault::Refuse,
        Fault::Reset,
        Fault::Blackhole,
        Fault::HalfClose,
        Fault::Split,
        Fault::Partition,
        Fault::Pause,
        Fault::Crash,
        Fault::Restart,
        Fault::Drift,
        Fault::ClientPause,
        Fault::Hostile,
        Fault::ByteLoss,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Delay => "delay",
            Fault::Refuse => "refuse",
            Fault::Reset => "reset",
            Fault::Blackhole => "blackhole",
            Fault::HalfClose => "half-close",
            Fault::Split => "split",
            Fault::Partition => "partition",
            Fault::Pause => "pause",
            Fault::Crash => "crash",
            Fault::Restart => "restart",
            Fault::Drift => "drift",
            Fault::ClientPause => "client-pause",
            Fault::Hostile => "hostile",
            Fault::ByteLoss => "byte-loss",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of fault kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Faults(u32);

impl Faults {
    /// No fault.
    pub const NONE: Faults = Faults(0);

    /// The default mix: every kind a real network or host produces (all but byte loss).
    pub fn real() -> Faults {
        Fault::ALL
            .into_iter()
            .filter(|f| *f != Fault::ByteLoss)
            .fold(Faults::NONE, Faults::with)
    }

    /// The set with `f` too.
    pub fn with(self, f: Fault) -> Faults {
        Faults(self.0 | f.bit())
    }

    /// The set without `f`.
    pub fn without(self, f: Fault) -> Faults {
        Faults(self.0 & !f.bit())
    }

    /// Whether `f` is in.
    pub fn has(self, f: Fault) -> bool {
        self.0 & f.bit() != 0
    }

    /// Whether none is in.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds in, in order.
    pub fn kinds(self) -> Vec<Fault> {
        Fault::ALL.into_iter().filter(|f| self.has(*f)).collect()
    }

    /// A comma-separated list of names; `real` is [`Faults::real`], `none` nothing, `all`
    /// every kind.
    pub fn parse(list: &str) -> Result<Faults, String> {
        let mut out = Faults::NONE;
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            out = match word {
                "none" => out,
                "real" => Faults(out.0 | Faults::real().0),
                "all" => Fault::ALL.into_iter().fold(out, Faults::with),
                _ => out.with(
                    Fault::ALL
                        .into_iter()
                        .find(|f| f.name() == word)
                        .ok_or_else(|| {
                            let names: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
                            format!(
                                "unknown fault {word:?} (known: real, all, none, {})",
                                names.join(", ")
                            )
                        })?,
                ),
            };
        }
        Ok(out)
    }

    /// The names, comma-separated (`none` for none).
    pub fn names(self) -> String {
        let v: Vec<&str> = self.kinds().iter().map(|f| f.name()).collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }
}

/// A rule broken on purpose, for the checker to catch (a negative control). The first two
/// break the masters (drawn as fault episodes); the others break a client's driver or a
/// clock, in every world of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negative {
    /// Masters restart without their data at once, not after the longest ttl.
    RestartWithoutDelay,
    /// A master's clock jumps ahead by more than the drift factor allows.
    ClockJump,
    /// Waiters never try again: the driver runs `lock` and `lock_within` with a policy of one
    /// try (`waiter-gave-up`).
    WaiterGivesUp,
    /// Waiters sleep four times what the operation asks between tries (`retry-gap`).
    SlowRetry,
    /// Every master's clock runs a quarter slow, beyond any drift factor: keys outlive their
    /// ttl and the drift allowance, and a waiter's try after them still finds the resource
    /// held (`liveness-expiry`).
    SlowMasters,
    /// Guards report loss at the end of the validity rather than by their loss deadline (a
    /// loss margin of zero) (`guard-late`).
    GuardLateLoss,
    /// The driver hands the engine the time its operation started with every round, not the
    /// time of the round: the engine's stale check reads an old clock, and commands are
    /// queued on connections owing replies long past it (`owed-stale`).
    StaleTime,
    /// Client 0's clock runs a fifth slow, far beyond the drift factor: its validity outlasts
    /// its keys on the run's clock, where the checker judges (`overlap`).
    ClientClockSlow,
    /// The driver never sends a failed try's release (as a native-mode unlock that did nothing
    /// on some servers once did): a waiter's own keys from its failed tries stay until their
    /// ttl, and its try after the holder's keys expired still loses (`liveness-expiry`).
    NoRelease,
    /// A permit's round is tallied as if every master's yes named the same slot: yes votes
    /// for different slots add up to a quorum (`overlap`: two holders of one slot).
    PermitSum,
}

impl Negative {
    /// Every negative control.
    pub const ALL: [Negative; 10] = [
        Negative::RestartWithoutDelay,
        Negative::ClockJump,
        Negative::WaiterGivesUp,
        Negative::SlowRetry,
        Negative::SlowMasters,
        Negative::GuardLateLoss,
        Negative::StaleTime,
        Negative::ClientClockSlow,
        Negative::NoRelease,
        Negative::PermitSum,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Negative::RestartWithoutDelay => "restart-without-delay",
            Negative::ClockJump => "clock-jump",
            Negative::WaiterGivesUp => "waiter-gives-up",
            Negative::SlowRetry => "slow-retry",
            Negative::SlowMasters => "slow-masters",
            Negative::GuardLateLoss => "guard-late-loss",
            Negative::StaleTime => "stale-time",
            Negative::ClientClockSlow => "client-clock-slow",
            Negative::NoRelease => "no-release",
            Negative::PermitSum => "permit-sum",
        }
    }

    /// Whether it is drawn as fault episodes on the masters (and voids what their keys
    /// promise), rather than applied to every world of the run.
    pub fn is_episode(self) -> bool {
        matches!(self, Negative::RestartWithoutDelay | Negative::ClockJump)
    }

    /// The negative control called `name`.
    pub fn parse(name: &str) -> Result<Negative, String> {
        Negative::ALL
            .into_iter()
            .find(|n| n.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Negative::ALL.iter().map(|n| n.name()).collect();
                format!(
                    "unknown negative control {name:?} (known: {})",
                    names.join(", ")
                )
            })
    }
}

/// What a run is made of.
#[derive(Debug, Clone)]
pub struct Params {
    /// The seed everything else is drawn from.
    pub seed: u64,
    /// The fault kinds in the random mix.
    pub faults: Faults,
    /// A rule broken on purpose.
    pub negative: Option<Negative>,
    /// Clients (drawn from the seed when `None`).
    pub clients: Option<u32>,
    /// Operations each task starts (drawn when `None`).
    pub ops: Option<u32>,
    /// Fault episodes (drawn when `None`).
    pub episodes: Option<u32>,
    /// Whether the trace keeps its lines.
    pub trace: bool,
    /// Whether worlds may have a semaphore whose permits the clients take (half of them, drawn
    /// from a stream of its own: off, every world runs as before semaphores existed, so that
    /// the seeds found before them replay what they found).
    pub semaphores: bool,
}

impl Params {
    /// Seed `seed` with the default mix.
    pub fn new(seed: u64) -> Params {
        Params {
            seed,
            faults: Faults::real(),
            negative: None,
            clients: None,
            ops: None,
            episodes: None,
            trace: false,
            semaphores: true,
        }
    }

    /// The command line that runs these parameters again.
    pub fn replay_command(&self) -> String {
        let mut s = format!(
            "cargo run --release -p redlock-sim -- --seed {} --seeds 1 --faults {}",
            self.seed,
            self.faults.names()
        );
        if let Some(n) = self.negative {
            s.push_str(&format!(" --negative {}", n.name()));
        }
        if let Some(c) = self.clients {
            s.push_str(&format!(" --clients {c}"));
        }
        if let Some(o) = self.ops {
            s.push_str(&format!(" --ops {o}"));
        }
        if let Some(e) = self.episodes {
            s.push_str(&format!(" --episodes {e}"));
        }
        if !self.semaphores {
            s.push_str(" --no-semaphores");
        }
        s.push_str(" --trace");
        s
    }
}
