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
//! (`scenario/hostile.rs`; docs/explore.md "The hostile host"). The replay's output is
//! `scenario/replay.rs`.

pub use crate::oracle::Sometimes;
use crate::oracle::{self, Violation};
use crate::world::{End, EventMode, Op, Record, World, WorldConfig};
use cm_core::api::{CmEventType, CmIdHandle};
use cm_core::engine::IbCmId;
use rnic_sim::fabric::{Delay, FaultPlan, Jitter, Partition, PathFaults, DEFAULT_LATENCY_NS};
use rnic_sim::rng::Rng;
use std::fmt::Write as _;
use verbs_core::{Gid, SimTime};

mod hostile;
mod replay;
pub use hostile::{Attack, CmKind, Forgery, Hostile};
pub use replay::{replay_seed, Replay};

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
    /// Short CM timers (see [`WorldConfig::fast_timers`]).
    pub fast_timers: bool,
    /// RNR retry count (see [`WorldConfig::rnr_retry`]).
    pub rnr_retry: u8,
    /// A hostile host after the scripted ones (host `hosts.len()`), if any.
    pub hostile: Option<Hostile>,
}

fn pick<T: Copy>(rng: &mut Rng, choices: &[(u32, T)]) -> T {
    let total: u32 = choices.iter().map(|c| c.0).sum();
    let mut x = rng.below(u64::from(total)) as u32;
    for &(w, v) in choices {
        if x < w {
            return v;
        }
        x -= w;
    }
    choices[0].1
}

fn step(when: Trigger, action: Action) -> Step {
    Step { when, action }
}

impl Scenario {
    /// Draws one two-host scenario from `rng` (a [hostile](Hostile) third host with probability
    /// [`HOSTILE_SHARE`]), fault rates included, biased so that every
    /// "sometimes" situation of TESTING.md comes up (see [`Sometimes`]).
    pub fn generate(rng: &mut Rng) -> Scenario {
        use CmEventType as E;
        let seed = rng.next_u64();
        let fast_timers = rng.chance(0.85);
        let lossy = rng.chance(0.5);
        let loss = if lossy { rng.next_f64() * 0.3 } else { 0.0 };
        let duplicate = if rng.chance(0.4) {
            rng.next_f64() * 0.5
        } else {
            0.0
        };
        let corrupt = if rng.chance(0.1) {
            rng.next_f64() * 0.05
        } else {
            0.0
        };
        let jitter_ns = if rng.chance(0.4) {
            rng.range_u64(1..=40) * US
        } else {
            0
        };
        // Timer scale: DREQ timeout 12 ms (fast) or 4608 ms (default).
        let unit = if fast_timers { 12 * MS } else { 4608 * MS };
        let mut partitions = Vec::new();
        let cuts = pick(rng, &[(80, 0), (15, 1), (5, 2)]);
        for _ in 0..cuts {
            let start = rng.range_u64(0..=200) * US + rng.range_u64(0..=4) * unit / 2;
            partitions.push(PartitionSpec {
                start_ns: start,
                heal_ns: start + rng.range_u64(1..=40) * unit / 4,
                one_way: rng.chance(0.5),
            });
        }
        let heal_at_ns = unit * rng.range_u64(20..=40);
        // Finite RNR retries: a SEND without a receive ends in RNR_RETRY_EXC_ERR instead of
        // an RNR NAK loop until the heal (thousands of events, no new situation).
        let rnr_retry = rng.range_u64(1..=6) as u8;
        let events = |rng: &mut Rng| {
            let late = rng.range_u64(1..=100) * US;
            pick(
                rng,
                &[
                    (88, EventMode::AckAtOnce),
                    (6, EventMode::AckAfter(late)),
                    (3, EventMode::NeverAck),
                    (3, EventMode::NeverRead),
                ],
            )
        };
        let ops = |rng: &mut Rng| pick(rng, &[(3, Op::Send), (1, Op::Write), (1, Op::Read)]);
        let early = |rng: &mut Rng| Trigger::At(rng.range_u64(0..=60) * US);

        // Host 0: the active side.
        let mut a = Vec::new();
        a.push(step(Trigger::Now, Action::Connect { to: 1 }));
        a.push(step(
            Trigger::Now,
            Action::PostRecv {
                n: rng.below(4) as u32,
            },
        ));
        let stale = rng.chance(0.08);
        let (k, t_early, t_mid) = (
            rng.range_u64(1..=3) as u32,
            early(rng),
            Trigger::At(rng.range_u64(20..=300) * US),
        );
        let disconnect = pick(
            rng,
            &[
                (40, Trigger::OnEvent(E::Established)),
                (20, Trigger::AfterCompletions(k)),
                (12, t_early),
                (10, t_mid),
                (8, Trigger::OnEvent(E::Disconnected)),
                (10, Trigger::OnEvent(E::TimewaitExit)), // i.e. never, unless the peer starts
            ],
        );
        a.push(step(
            Trigger::OnEvent(E::Established),
            Action::Post {
                op: ops(rng),
                n: rng.below(4) as u32,
            },
        ));
        if stale {
            a.push(step(
                Trigger::OnEvent(E::Established),
                Action::Crash {
                    restart_after_ns: Some(rng.range_u64(1..=100) * US),
                },
            ));
            a.push(step(Trigger::Now, Action::Connect { to: 1 }));
            a.push(step(Trigger::Now, Action::PostRecv { n: 1 }));
        } else {
            let action = pick(
                rng,
                &[
                    (85, Action::Disconnect),
                    (8, Action::DisconnectTwice),
                    (7, Action::DestroyInsteadOfDisconnect),
                ],
            );
            a.push(step(disconnect, action));
            if rng.chance(0.2) {
                a.push(step(Trigger::Now, Action::PostRecv { n: 1 }));
            }
            if rng.chance(0.03) {
                a.push(step(
                    Trigger::At(rng.range_u64(0..=10) * unit),
                    Action::Crash {
                        restart_after_ns: None,
                    },
                ));
            }
        }

        // Host 1: the passive side.
        let mut p = Vec::new();
        p.push(step(Trigger::Now, Action::Listen));
        let reject = rng.chance(0.05);
        p.push(step(
            Trigger::OnEvent(E::ConnectRequest),
            if reject {
                Action::Reject
            } else {
                Action::Accept
            },
        ));
        p.push(step(
            Trigger::Now,
            Action::PostRecv {
                n: rng.below(5) as u32,
            },
        ));
        if rng.chance(0.05) {
            p.push(step(Trigger::Now, Action::Disconnect));
        }
        if rng.chance(0.3) {
            p.push(step(
                Trigger::OnEvent(E::Established),
                Action::Post {
                    op: ops(rng),
                    n: rng.range_u64(1..=3) as u32,
                },
            ));
        }
        let t_p = Trigger::At(rng.range_u64(20..=200) * US);
        let answer = pick(
            rng,
            &[
                (62, Some(Trigger::OnEvent(E::Disconnected))),
                (14, None),
                (14, Some(Trigger::OnEvent(E::Established))),
                (10, Some(t_p)),
            ],
        );
        if let Some(t) = answer {
            let action = pick(
                rng,
                &[
                    (90, Action::Disconnect),
                    (5, Action::DisconnectTwice),
                    (5, Action::DestroyInsteadOfDisconnect),
                ],
            );
            p.push(step(t, action));
            if rng.chance(0.5) {
                // Answer a crossing DREQ: disconnect again once DISCONNECTED.
                p.push(step(Trigger::OnEvent(E::Disconnected), Action::Disconnect));
            }
            if rng.chance(0.2) {
                p.push(step(Trigger::Now, Action::PostRecv { n: 1 }));
            }
        }
        if rng.chance(0.04) {
            // The server dies (and maybe comes back with amnesia, without a listener).
            let at = rng.range_u64(0..=8) * unit / 4 + rng.range_u64(0..=100) * US;
            let restart = rng.chance(0.5).then(|| rng.range_u64(1..=4) * unit);
            p.push(step(
                Trigger::At(at),
                Action::Crash {
                    restart_after_ns: restart,
                },
            ));
        }
        if stale {
            // The old connection gets a DREQ from the stale-connection handling: answer it.
            p.push(step(Trigger::OnEvent(E::Disconnected), Action::Disconnect));
        }
        let a_events = events(rng);
        let p_events = events(rng);
        // Drawn last, so that a scenario without one is the one this seed drew before.
        let hostile = rng
            .chance(HOSTILE_SHARE)
            .then(|| Hostile::generate(rng, unit));
        Scenario {
            seed,
            hosts: vec![
                Script {
                    events: a_events,
                    steps: a,
                },
                Script {
                    events: p_events,
                    steps: p,
                },
            ],
            faults: Faults {
                loss,
                duplicate,
                corrupt,
                jitter_ns,
                partitions,
                heal_at_ns,
            },
            fast_timers,
            rnr_retry,
            hostile,
        }
    }

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
        if let Some(x) = &self.hostile {
            let _ = write!(s, " | h{} hostile:{}", self.hosts.len(), x.describe());
        }
        s
    }
}

/// Per host: where its script is and what its application knows.
#[derive(Debug, Default, Clone)]
struct Runner {
    next: usize,
    epoch: u8,
    conn: Option<End>,
    request: Option<CmIdHandle>,
    /// Bit `t` set: the connection had an event of type `t`.
    seen: u32,
    completions: u32,
}

/// Runs `scenario`; returns the World after the teardown (history complete, quiescent or not).
///
/// # Errors
/// Creating the World failed (not expected).
pub fn run(scenario: &Scenario, capture: bool) -> Result<World, verbs_core::Error> {
    let scripted = scenario.hosts.len();
    let cfg = WorldConfig {
        hosts: scripted + usize::from(scenario.hostile.is_some()),
        seed: scenario.seed,
        faults: scenario.faults.plan(),
        fast_timers: scenario.fast_timers,
        capture,
        rnr_retry: scenario.rnr_retry,
        cq_entries: 1024,
    };
    let mut w = World::new(cfg)?;
    for (h, s) in scenario.hosts.iter().enumerate() {
        w.set_event_mode(h, s.events);
    }
    let attacker = scenario.hostile.as_ref().map(|_| {
        w.set_hostile(scripted);
        scripted
    });
    let mut fired = vec![false; scenario.hostile.as_ref().map_or(0, |x| x.attacks.len())];
    let mut rs = vec![Runner::default(); scenario.hosts.len()];
    let mut cursor = 0;
    let heal_at = SimTime(scenario.faults.heal_at_ns);
    let mut healed = false;
    let limit = heal_at.plus_nanos(crate::world::QUIESCE_LIMIT_NS);
    loop {
        cursor = learn(&w, &mut rs, cursor, attacker);
        let mut acted = false;
        for h in 0..rs.len() {
            acted |= drive(&mut w, scenario, &mut rs, h);
        }
        if let (Some(x), Some(a)) = (&scenario.hostile, attacker) {
            acted |= x.strike(&mut w, a, &rs, &mut fired);
        }
        if acted {
            continue;
        }
        if !healed && w.now() >= heal_at {
            w.heal();
            healed = true;
        }
        let mut wake = w.next_wake();
        let timed = rs
            .iter()
            .zip(&scenario.hosts)
            .filter_map(|(r, s)| match s.steps.get(r.next)?.when {
                Trigger::At(t) => Some(SimTime(t)),
                _ => None,
            })
            .chain((!healed).then_some(heal_at))
            .chain(
                scenario
                    .hostile
                    .as_ref()
                    .and_then(|x| x.next_at(&fired, w.now())),
            )
            .filter(|&t| t > w.now())
            .min();
        if let Some(t) = timed {
            wake = Some(wake.map_or(t, |x| x.min(t)));
        }
        match wake {
            Some(t) if t <= limit => w.advance_to(t),
            _ => break,
        }
    }
    w.teardown();
    Ok(w)
}

/// Reads the history since `cursor` into the runners' knowledge. A CONNECT_REQUEST from host
/// `attacker` is not one the application answers (it serves its script's peer).
fn learn(w: &World, rs: &mut [Runner], cursor: usize, attacker: Option<usize>) -> usize {
    let entries = &w.history().entries;
    for e in &entries[cursor..] {
        let Some(r) = rs.get_mut(usize::from(e.host)) else {
            continue;
        };
        if e.epoch != r.epoch {
            continue;
        }
        match e.rec {
            Record::Event { id, event, .. } => {
                if event == CmEventType::ConnectRequest {
                    if attacker.is_some_and(|a| sent_by(w, usize::from(e.host), id) == Some(a)) {
                        continue;
                    }
                    r.request = Some(CmIdHandle(id));
                    r.seen |= 1 << event as u32;
                } else if r.conn.is_some_and(|c| c.id.0 == id) {
                    r.seen |= 1 << event as u32;
                }
            }
            Record::Completion { .. } => r.completions += 1,
            _ => {}
        }
    }
    entries.len()
}

/// The host whose REQ made passive id `id` of host `h`: the REQ's source address, as the CM
/// took it (not the IP-CM header's claim).
fn sent_by(w: &World, h: usize, id: u32) -> Option<usize> {
    let p = w.host(h)?.cm().engine().qp_params(IbCmId(id)).ok()?;
    (0..w.config().hosts).find(|&i| p.remote_gid == Gid::from_ip(crate::world::host_ip(i)))
}

/// Runs host `h`'s next step if its trigger holds; returns whether it did.
fn drive(w: &mut World, scenario: &Scenario, rs: &mut [Runner], h: usize) -> bool {
    let Some(st) = scenario
        .hosts
        .get(h)
        .and_then(|s| s.steps.get(rs[h].next))
        .copied()
    else {
        return false;
    };
    if !w.is_up(h) {
        return false;
    }
    let r = &rs[h];
    let ready = match st.when {
        Trigger::Now => true,
        Trigger::At(t) => w.now() >= SimTime(t),
        Trigger::OnEvent(ev) => r.seen & (1 << ev as u32) != 0,
        Trigger::AfterCompletions(n) => r.completions >= n,
    };
    if !ready {
        return false;
    }
    rs[h].next += 1;
    let conn = rs[h].conn;
    match st.action {
        Action::Listen => {
            let _ = w.listen(h);
        }
        Action::Connect { to } => {
            if let Ok(e) = w.connect(h, to) {
                rs[h].conn = Some(e);
                rs[h].seen = 0;
            }
        }
        Action::Accept => {
            if let Some(id) = rs[h].request.take() {
                if let Ok(e) = w.accept(h, id) {
                    rs[h].conn = Some(e);
                    rs[h].seen = 0;
                }
            }
        }
        Action::Reject => {
            if let Some(id) = rs[h].request.take() {
                let _ = w.reject(h, id);
            }
        }
        Action::PostRecv { n } => {
            if let Some(c) = conn {
                w.post(c, Op::Recv, n as usize);
            }
        }
        Action::Post { op, n } => {
            if let Some(c) = conn {
                w.post(c, op, n as usize);
            }
        }
        Action::Disconnect => {
            if let Some(c) = conn {
                let _ = w.disconnect(c);
            }
        }
        Action::DisconnectTwice => {
            if let Some(c) = conn {
                let _ = w.disconnect(c);
                let _ = w.disconnect(c);
            }
        }
        Action::DestroyInsteadOfDisconnect => {
            if let Some(c) = conn {
                let _ = w.destroy(c);
                let _ = w.qp_to_err(c);
            }
        }
        Action::Crash { restart_after_ns } => {
            if w.crash(h, restart_after_ns).is_ok() {
                rs[h] = Runner {
                    next: rs[h].next,
                    epoch: w.epoch(h),
                    ..Runner::default()
                };
            }
        }
    }
    true
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
