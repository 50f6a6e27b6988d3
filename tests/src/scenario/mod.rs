//! Scenarios: per-host scripted applications and network faults as data, a generator that
//! draws one from a seed (a swarm: each seed draws its own fault rates), the runner, and the
//! per-seed entry points the `rnic explore`/`replay` commands use ([`run_seed`],
//! [`replay_seed`]).
//!
//! A run has three phases: the **scenario** (faults on) until [`Faults::heal_at_ns`]; the
//! **liveness** phase (the World [heals](World::heal) the network, the scripts go on) until
//! quiescence; the **teardown** (every live host moves its QPs to ERR, as destroying them
//! would, so every posted WR must complete) until quiescence again. Then the
//! [`oracle`] checks the history.
//!
//! One scenario in ten ([`HOSTILE_SHARE`]) also has a [hostile host](Hostile) after the
//! scripted ones, which forges CM messages and RC packets at the scripted hosts' connection
//! (`scenario/hostile.rs`; docs/explore.md "The hostile host"). The generator is
//! `scenario/generate.rs`, the runner `scenario/runner.rs`, the replay's output
//! `scenario/replay.rs`.

pub use crate::oracle::Sometimes;
use crate::oracle::{self, Violation};
use crate::world::{
    attr_name, EventMode, HostApp, HostCm, MsgAction, MsgFault, Occurrence, Op, World,
};
use cm_core::api::CmEventType;
use rnic_sim::fabric::{Delay, FaultPlan, Jitter, Partition, PathFaults, DEFAULT_LATENCY_NS};
use rnic_sim::rng::Rng;
use std::fmt::Write as _;
use verbs_core::SimTime;

mod event_knobs;
mod generate;
mod hostile;
mod knobs;
mod replay;
mod runner;
pub use event_knobs::{
    ADDR_CHANGE_SHARE, CQ_OVERRUN_SHARE, NOTIFY_SHARE, REMOVE_DEVICE_SHARE, SRQ_SHARE,
};
use generate::pick;
pub use hostile::{Attack, CmKind, Foreign, Forgery, Hostile};
pub use knobs::{DEEP_POST_SHARE, HOST_CM_SHARE, LATE_ACCEPT_SHARE, MSG_FAULT_SHARE};
pub use replay::{replay_seed, Replay};
pub use runner::run;
use runner::Runner;

/// 1 µs in ns.
const US: u64 = 1_000;
/// 1 ms in ns.
const MS: u64 = 1_000_000;

/// The share of generated scenarios with a [hostile host](Hostile).
pub const HOSTILE_SHARE: f64 = 0.1;

/// When a [`Step`] runs (after the previous step of its script ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// At once.
    Now,
    /// At virtual time `ns` (or at once if later).
    At(u64),
    /// Once the host's connection (or, for CONNECT_REQUEST, any id of the host) had this event.
    OnEvent(CmEventType),
    /// Once the host's application polled this many completions (this life).
    AfterCompletions(u32),
    /// `ns` after [`OnEvent`](Self::OnEvent) would have held (e.g. an application that
    /// accepts a CONNECT_REQUEST late, which draws an MRA if the active side resends its REQ
    /// meanwhile: cm-spec §4.2).
    OnEventAfter(CmEventType, u64),
}

/// What a step does. Steps that need a connection do nothing without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Listen on [`CM_PORT`](crate::world::CM_PORT).
    Listen,
    /// Connect to host `to`.
    Connect {
        /// The passive host.
        to: usize,
    },
    /// Accept the pending CONNECT_REQUEST.
    Accept,
    /// Reject the pending CONNECT_REQUEST (REJ 28).
    Reject,
    /// Post `n` receives.
    PostRecv {
        /// WRs.
        n: u32,
    },
    /// Post `n` signaled WRs of `op`.
    Post {
        /// SEND, WRITE or READ.
        op: Op,
        /// WRs.
        n: u32,
    },
    /// `rdma_disconnect`.
    Disconnect,
    /// `rdma_disconnect` twice in a row (IB CM semantics: both return 0).
    DisconnectTwice,
    /// `rdma_destroy_id` instead of a disconnect, then the QP to ERR.
    DestroyInsteadOfDisconnect,
    /// Crash now; restart with amnesia `restart_after_ns` later, or never.
    Crash {
        /// Down time, ns.
        restart_after_ns: Option<u64>,
    },
    /// The host's device is removed now ([`World::remove_device`]).
    RemoveDevice,
    /// The hardware address under the host's CM changes now ([`World::address_change`]).
    AddressChange,
}

/// One scripted step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// When.
    pub when: Trigger,
    /// What.
    pub action: Action,
}

/// One host's application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// How it treats CM events (`NeverRead` = never responds; `AckAfter`/`NeverAck` = acks
    /// late or never).
    pub events: EventMode,
    /// The steps, run in order.
    pub steps: Vec<Step>,
}

/// A partition of hosts 0 and 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSpec {
    /// Start, ns.
    pub start_ns: u64,
    /// Heal, ns.
    pub heal_ns: u64,
    /// Only 1 → 0 (else both ways).
    pub one_way: bool,
}

/// The network's faults.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Loss probability per datagram (0–0.3).
    pub loss: f64,
    /// Duplication probability (0–0.5).
    pub duplicate: f64,
    /// Probability that a datagram arrives with one bit flipped (0–0.05): the NIC's ICRC check
    /// must drop it (counted, never a panic).
    pub corrupt: f64,
    /// Uniform jitter on top of the 10 µs latency, ns (reorders datagrams closer than this).
    pub jitter_ns: u64,
    /// Partitions.
    pub partitions: Vec<PartitionSpec>,
    /// When the network is healed and the liveness phase starts, ns.
    pub heal_at_ns: u64,
}

impl Faults {
    /// A perfect network, healed at 0.
    pub fn none() -> Self {
        Faults {
            loss: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            jitter_ns: 0,
            partitions: Vec::new(),
            heal_at_ns: 0,
        }
    }

    fn plan(&self) -> FaultPlan {
        let path = PathFaults {
            loss: self.loss,
            duplicate: self.duplicate,
            corrupt: self.corrupt,
            delay: Delay {
                base_ns: DEFAULT_LATENCY_NS,
                jitter: if self.jitter_ns == 0 {
                    Jitter::None
                } else {
                    Jitter::Uniform {
                        max_ns: self.jitter_ns,
                    }
                },
            },
        };
        let mut plan = FaultPlan::new(path);
        let (a, b) = (crate::world::host_ip(0), crate::world::host_ip(1));
        for p in &self.partitions {
            let (s, h) = (SimTime(p.start_ns), Some(SimTime(p.heal_ns)));
            plan.partitions.push(if p.one_way {
                Partition::one_way(b, a, s, h)
            } else {
                Partition::symmetric(a, b, s, h)
            });
        }
        plan
    }
}

/// A whole scenario: hosts' scripts and the network.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The seed of the World (fabric faults, CM seeds, data pattern).
    pub seed: u64,
    /// One script per host.
    pub hosts: Vec<Script>,
    /// Network faults.
    pub faults: Faults,
    /// Short CM timers (see [`WorldConfig::fast_timers`](crate::world::WorldConfig::fast_timers)).
    pub fast_timers: bool,
    /// RNR retry count (see [`WorldConfig::rnr_retry`](crate::world::WorldConfig::rnr_retry)).
    pub rnr_retry: u8,
    /// A hostile host after the scripted ones (host `hosts.len()`), if any.
    pub hostile: Option<Hostile>,
    /// Per-host CM timer overrides (see [`WorldConfig::host_cm`](crate::world::WorldConfig)).
    pub host_cm: Vec<HostCm>,
    /// Targeted message faults (see [`MsgFault`]); removed at the heal.
    pub msg_faults: Vec<MsgFault>,
    /// Per-host application behaviours (see [`HostApp`]: an SRQ, `rdma_notify` on COMM_EST).
    pub host_app: Vec<HostApp>,
    /// CQEs of each host's CQs (see [`WorldConfig::cq_entries`](crate::world::WorldConfig));
    /// 1024 unless drawn small to overrun them.
    pub cq_entries: u32,
}

impl Scenario {
    /// One line: timers, fault rates, partitions, heal time and each host's behaviour.
    pub fn describe(&self) -> String {
        let f = &self.faults;
        let mut s = format!(
            "timers={} rnr_retry={} loss={:.3} dup={:.3} corrupt={:.3} jitter={}us heal={}ms",
            if self.fast_timers { "fast" } else { "linux" },
            self.rnr_retry,
            f.loss,
            f.duplicate,
            f.corrupt,
            f.jitter_ns / US,
            f.heal_at_ns / MS
        );
        for p in &f.partitions {
            let _ = write!(
                s,
                " partition({}us..{}us{})",
                p.start_ns / US,
                p.heal_ns / US,
                if p.one_way { ",1->0" } else { "" }
            );
        }
        for (h, sc) in self.hosts.iter().enumerate() {
            let _ = write!(s, " | h{h} {:?}:", sc.events);
            for st in &sc.steps {
                let _ = write!(s, " {:?}@{:?}", st.action, st.when);
            }
        }
        for (h, c) in self.host_cm.iter().enumerate() {
            if *c != HostCm::default() {
                let _ = write!(
                    s,
                    " | h{h} cm(retries={:?},resp={:?},plt={:?})",
                    c.max_cm_retries, c.cm_response_timeout, c.packet_life_time
                );
            }
        }
        for f in &self.msg_faults {
            let which = match f.which {
                Occurrence::Nth(n) => format!("#{n}"),
                Occurrence::Every => "every".into(),
            };
            let what = match f.action {
                MsgAction::Drop => "drop".into(),
                MsgAction::Delay { ns } => format!("delay {}us", ns / US),
            };
            let _ = write!(s, " | {what} {which} {} of h{}", attr_name(f.attr), f.from);
        }
        for (h, a) in self.host_app.iter().enumerate() {
            if *a != HostApp::default() {
                let _ = write!(
                    s,
                    " | h{h} app(srq={},limit={},notify={})",
                    a.srq, a.srq_limit, a.notify_on_comm_est
                );
            }
        }
        if self.cq_entries != 1024 {
            let _ = write!(s, " | cq_entries={}", self.cq_entries);
        }
        if let Some(x) = &self.hostile {
            let _ = write!(s, " | h{} hostile:{}", self.hosts.len(), x.describe());
        }
        s
    }
}

/// One seed's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// One line describing the drawn fault options and workload ([`Scenario::describe`]) if
    /// the seed failed; empty if it passed (formatting it for every seed cost ~5 % of a
    /// campaign). `scenario_of(seed).describe()` gives it for any seed.
    pub faults: String,
    /// FNV-1a over the whole history and the fabric trace ([`World::trace_hash`]):
    /// platform-independent and stable between runs.
    pub trace_hash: u64,
    /// What the oracle found (empty = pass).
    pub violations: Vec<Violation>,
    /// The rare situations reached.
    pub sometimes: Sometimes,
    /// The run ended quiescent (no datagram, no timer).
    pub quiescent: bool,
}

impl SeedReport {
    /// No violation and quiescent.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.quiescent
    }
}

/// The scenario of `seed`: drawn from the workload stream of `seed`.
pub fn scenario_of(seed: u64) -> Scenario {
    let mut rng = Rng::new(seed).fork(0x776f_726b);
    let mut s = Scenario::generate(&mut rng);
    s.seed = seed;
    s
}

fn report(seed: u64, scenario: &Scenario, w: &World) -> SeedReport {
    let history = w.history();
    let (mut violations, sometimes) = oracle::check_with_sometimes(history);
    if let Some(x) = &scenario.hostile {
        violations.extend(x.landed(w));
    }
    let passed = violations.is_empty() && history.quiescent;
    SeedReport {
        seed,
        faults: if passed {
            String::new()
        } else {
            scenario.describe()
        },
        trace_hash: w.trace_hash(),
        violations,
        sometimes,
        quiescent: history.quiescent,
    }
}

fn failed_world(seed: u64, scenario: &Scenario, e: &verbs_core::Error) -> SeedReport {
    SeedReport {
        seed,
        faults: scenario.describe(),
        trace_hash: 0,
        violations: vec![Violation {
            invariant: oracle::Invariant::S7,
            host: 0,
            at: SimTime::ZERO,
            message: format!("the World could not be built: {e}"),
            events: Vec::new(),
        }],
        sometimes: Sometimes::default(),
        quiescent: false,
    }
}

/// Generates the scenario of `seed`, runs it and checks it: as fast as possible (no capture).
pub fn run_seed(seed: u64) -> SeedReport {
    let scenario = scenario_of(seed);
    match run(&scenario, false) {
        Ok(w) => report(seed, &scenario, &w),
        Err(e) => failed_world(seed, &scenario, &e),
    }
}
