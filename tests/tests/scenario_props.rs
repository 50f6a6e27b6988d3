//! Shrinkable scenario tests (TESTING.md, "proptest (state-machine style)").
//!
//! 1. [`ApiMachine`]: a `proptest-state-machine` test. The transitions are the applications'
//!    API calls on two hosts (listen, connect, accept, reject, post RECV/SEND/WRITE/READ,
//!    disconnect, disconnect again, disconnect of the listening id, destroy instead of
//!    disconnect), virtual time advances, crashes (with or without restart) and network faults
//!    (drop the next datagram(s) on a path, a partition for a window, heal). A reference model
//!    ([`RefState`]) predicts the errno of each call (cm-spec §4.4, §4.6, §5.4) for the state it
//!    can know, and — while the network stayed clean — which events follow. The system under
//!    test is the deterministic [`World`]: every call's errno is compared with the prediction,
//!    the oracle's safety checks (`check_now`) run after every transition, and at the end the
//!    network is healed, the World runs to quiescence and the full oracle (S1–S7, L1–L3) runs.
//! 2. [`scenario_strategy`]: a plain proptest over [`Scenario`] values (per-host scripts of
//!    [`Step`]s after a fixed connect/listen/accept-or-reject skeleton, and [`Faults`]) run
//!    through [`scenario::run`] and the oracle, so that the seed swarm's scenario space shrinks
//!    too (fewer steps, lower fault rates).
//! 3. A coverage test: the reference makes every kind of prediction in 1024 fixed-seed cases.
//!
//! Failures persist to the committed `tests/proptest-regressions/scenario_props.txt` (see its
//! header and docs/explore.md, "Shrinking with proptest"). Cases: 256 state-machine cases and
//! 256 scenarios by default; `PROPTEST_CASES=N` runs N of each.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use cm_core::api::{CmEventType as E, CmIdHandle};
use cm_core::engine::IbCmState;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use rnic_sim::fabric::{Partition, PathFaults, DEFAULT_LATENCY_NS};
use rnic_testbed::scenario::{
    self, Action, Faults, PartitionSpec, Scenario, Script, Step, Trigger,
};
use rnic_testbed::world::{host_ip, End, EventMode, Op, Record, World, WorldConfig};
use verbs_core::{QpState, SimTime};

/// 1 µs in ns.
const US: u64 = 1_000;
/// 1 ms in ns.
const MS: u64 = 1_000_000;
/// How long after a message is sent on a clean network the reference takes its effect as
/// done: 100 one-way latencies (10 µs each), far below the fast CM timers (REQ/DREQ ~12 ms).
const SETTLE_NS: u64 = MS;
/// The REQ (sent at connect) has arrived and been read this long after (latency 10 µs).
const ARRIVE_NS: u64 = 15 * US;
/// How long after `connect` the passive side's answer is certain to find the REQ still
/// valid (below the first REQ timeout of the fast timers).
const FRESH_NS: u64 = 5 * MS;
/// Invalid argument (rdma-core's errno value).
const EINVAL: i32 = 22;

/// The committed regressions file (absolute, so it works whatever the working directory).
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/proptest-regressions/scenario_props.txt"
);

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn config(default_cases: u32) -> Config {
    Config {
        cases: cases(default_cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

/// One transition: an application call on `host`, time passing, or a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum T {
    /// `rdma_listen` (the World returns the same id on a repeat).
    Listen(usize),
    /// Host connects to the other host.
    Connect(usize),
    /// Accept the pending CONNECT_REQUEST (nothing if none arrived).
    Accept(usize),
    /// Reject it (REJ 28).
    Reject(usize),
    /// `ibv_post_recv` of `n` WRs on the host's connection.
    PostRecv(usize, u32),
    /// `ibv_post_send` of `n` signaled WRs.
    Post(usize, Op, u32),
    /// `rdma_disconnect` (again, if already called).
    Disconnect(usize),
    /// `rdma_disconnect` of the listening id. A listener bound to an address has an IB CM id
    /// (cma.c `cma_ib_listen`): DREQ and DREP are refused and ignored, the call returns 0
    /// (§4.4; EINVAL is only for an id without a CM id or device, which the World never hands
    /// out).
    DisconnectListener(usize),
    /// `rdma_destroy_id` instead of a disconnect, then the QP to ERR.
    Destroy(usize),
    /// Run the World for this many ns.
    Advance(u64),
    /// Crash; restart with amnesia that much later, or never.
    Crash(usize, Option<u64>),
    /// Drop the next datagram(s) (those sent at one instant) from the host to the other.
    DropNext(usize),
    /// Cut the hosts for `window` ns (`one_way`: only the host's sends).
    Partition {
        from: usize,
        one_way: bool,
        window: u64,
    },
    /// End every partition and armed drop now.
    Heal,
}

/// What the reference knows about one end of a connection.
#[derive(Debug, Clone, PartialEq)]
struct RefEnd {
    host: usize,
    /// Made by connect (else by accept).
    active: bool,
    /// The SUT surely has it (an accept the reference could not predict may have done nothing).
    certain: bool,
    /// The QP is in RTS for sure (passive after a successful accept, active once the REP
    /// surely arrived).
    rts: bool,
    /// The QP is surely still in INIT (active, before any answer could have arrived).
    init: bool,
    /// The QP is in ERR for sure (own disconnect or destroy; REJ).
    err: bool,
    /// Whether rdma_destroy_id succeeded: `Some(false)` never called or refused for sure.
    destroyed: Option<bool>,
    /// When disconnect (or destroy, which answers with a DREP too) was first called.
    answered_at: Option<u64>,
    /// Disconnect was first called while the connection was surely ESTABLISHED.
    disc_while_est: bool,
    /// The host crashed after this end was made.
    dead: bool,
    /// The other end's index in [`RefState::ends`].
    peer: Option<usize>,
    /// WRs posted to the send / receive queue so far (predictions stop near the 64-WR
    /// capacity: completions are not tracked).
    posted: [u32; 2],
}

/// One host.
#[derive(Debug, Clone, PartialEq)]
struct RefHost {
    mode: EventMode,
    /// Up from this time on (`None`: down for good).
    up_from: Option<u64>,
    listening: bool,
    /// The host's current connection (index into [`RefState::ends`]).
    cur: Option<usize>,
    /// A CONNECT_REQUEST may be pending: the peer's connect time and active end.
    request_from: Option<(u64, usize)>,
    /// A REQ of an earlier connect may be pending or still reach this host's listener (it
    /// listened after that connect, or never answered it): which request is pending is no
    /// longer sure.
    stray_request: bool,
    /// The last connect to this host while it did not listen.
    unheard_req_at: Option<u64>,
}

/// The link of the latest connect, for the ESTABLISHED prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Link {
    active: usize,
    passive: Option<usize>,
    connect_at: u64,
    /// The passive side listened before the connect.
    listened: bool,
    /// A certain successful accept, at this time.
    accepted_at: Option<u64>,
    /// Disconnect/destroy/reject on either side before the setup surely completed.
    touched: bool,
    established: bool,
}

/// The reference state: time, hosts, ends, what it predicts for the last call.
#[derive(Debug, Clone, PartialEq)]
struct RefState {
    seed: u64,
    rnr_retry: u8,
    now: u64,
    /// This run may inject faults and crashes (half of the runs stay clean).
    faulty: bool,
    /// No fault, drop, partition or crash so far: the network does exactly what the reference
    /// expects.
    clean: bool,
    hosts: [RefHost; 2],
    ends: Vec<RefEnd>,
    link: Option<Link>,
    /// Prediction for the last transition: the call's errno (`None`: not predicted).
    expect: Option<i32>,
    /// Prediction for the last accept/reject: whether a request was there to answer.
    expect_applied: Option<bool>,
}

impl RefState {
    fn up(&self, h: usize) -> bool {
        self.hosts[h].up_from.is_some_and(|t| self.now >= t)
    }

    fn cur(&self, h: usize) -> Option<&RefEnd> {
        self.hosts[h].cur.map(|i| &self.ends[i])
    }

    /// The host has a connection end it may call on.
    fn has_end(&self, h: usize) -> bool {
        self.up(h) && self.cur(h).is_some()
    }

    /// The host's slot is free for a new connection.
    fn free(&self, h: usize) -> bool {
        self.cur(h).is_none_or(|e| e.destroyed == Some(true))
    }

    /// Learns what time passing made certain (only on a clean network).
    fn settle(&mut self) {
        if !self.clean {
            return;
        }
        let Some(mut l) = self.link else { return };
        // The setup completes only if the active application fetches its CONNECT_RESPONSE:
        // librdmacm moves its QP to RTS and sends the RTU then (cm-spec §4.3). A deaf active
        // host leaves its QP in INIT and the passive side waiting for the RTU.
        let fetches = self.hosts[self.ends[l.active].host].mode != EventMode::NeverRead;
        if let (Some(ta), false, false, true) = (l.accepted_at, l.touched, l.established, fetches) {
            if self.now >= ta + SETTLE_NS {
                l.established = true;
                if let Some(p) = l.passive {
                    self.ends[p].rts = true;
                }
                self.ends[l.active].rts = true;
                self.ends[l.active].init = false;
            }
        }
        // Without a listener a REJ 8 comes (and moves the QP to ERR); after FRESH_NS the REQ
        // may time out: the active QP's state is no longer sure.
        if self.now >= l.connect_at + FRESH_NS || !l.listened {
            self.ends[l.active].init = false;
        }
        self.link = Some(l);
    }

    /// A fault or crash: from now on only robust predictions.
    fn dirty(&mut self) {
        self.settle();
        self.clean = false;
        for e in &mut self.ends {
            e.init = false;
        }
    }

    fn touch(&mut self) {
        if let Some(l) = &mut self.link {
            if !l.established {
                l.touched = true;
            }
        }
    }

    /// The request the passive host would answer: certain or not.
    fn request_certain(&self, h: usize) -> Option<bool> {
        let (from, a) = self.hosts[h].request_from?;
        let l = self.link.filter(|l| l.active == a);
        let readable = self.hosts[h].mode != EventMode::NeverRead;
        if !readable {
            return Some(false);
        }
        let l = l?;
        if self.clean && l.listened && !l.touched && !self.hosts[h].stray_request {
            // The REQ arrives after the 10 µs latency and stays pending until answered.
            if self.now >= from + ARRIVE_NS {
                return Some(true);
            }
            if self.now < from + DEFAULT_LATENCY_NS {
                return Some(false);
            }
        }
        None
    }

    fn apply(mut self, t: &T) -> Self {
        self.settle();
        self.expect = None;
        self.expect_applied = None;
        match *t {
            T::Listen(h) => {
                // A REQ sent while this host did not listen may still be in flight.
                let in_flight = self.hosts[h]
                    .unheard_req_at
                    .is_some_and(|t| self.now < t + ARRIVE_NS);
                self.hosts[h].stray_request |= in_flight;
                self.hosts[h].listening = true;
                self.expect = Some(0);
            }
            T::Connect(h) => {
                let p = 1 - h;
                let i = self.ends.len();
                self.ends.push(RefEnd {
                    host: h,
                    active: true,
                    certain: true,
                    rts: false,
                    init: self.clean,
                    err: false,
                    destroyed: Some(false),
                    answered_at: None,
                    disc_while_est: false,
                    dead: false,
                    peer: None,
                    posted: [0; 2],
                });
                self.hosts[h].cur = Some(i);
                let listened = self.hosts[p].listening && self.up(p);
                if !listened {
                    self.hosts[p].unheard_req_at = Some(self.now);
                }
                // An unanswered earlier request may still be pending.
                self.hosts[p].stray_request |= self.hosts[p].request_from.is_some();
                self.hosts[p].request_from = listened.then_some((self.now, i));
                self.link = Some(Link {
                    active: i,
                    passive: None,
                    connect_at: self.now,
                    listened,
                    accepted_at: None,
                    touched: false,
                    established: false,
                });
                self.expect = Some(0);
            }
            T::Accept(h) | T::Reject(h) => {
                let applied = self.request_certain(h);
                self.expect_applied = applied;
                // The answer surely finds the active side waiting for it (before its first
                // REQ timeout): accept/reject return 0 and the setup completes.
                let (at, a) = self.hosts[h].request_from.unwrap();
                let fresh = self.now < at + FRESH_NS;
                let certain = applied.filter(|&a| a && fresh);
                self.expect = certain.map(|_| 0);
                self.hosts[h].request_from = None;
                // Nothing answered for sure: the request may still come and stay pending.
                self.hosts[h].stray_request |= applied != Some(true);
                // `applied` is only known for the current link's request.
                let mut l = self.link.filter(|l| l.active == a);
                if matches!(t, T::Reject(_)) {
                    let Some(mut l) = l else { return self };
                    l.touched = true;
                    self.ends[l.active].init = false;
                    self.link = Some(l);
                    return self;
                }
                let i = self.ends.len();
                self.ends.push(RefEnd {
                    host: h,
                    active: false,
                    certain: certain == Some(true),
                    rts: certain == Some(true),
                    init: false,
                    err: false,
                    destroyed: Some(false),
                    answered_at: None,
                    disc_while_est: false,
                    dead: false,
                    peer: Some(a),
                    posted: [0; 2],
                });
                self.ends[a].peer = Some(i);
                self.ends[a].init = false;
                self.hosts[h].cur = Some(i);
                if let Some(l) = &mut l {
                    l.passive = Some(i);
                    if certain == Some(true) {
                        l.accepted_at = Some(self.now);
                    }
                    self.link = Some(*l);
                }
            }
            T::PostRecv(h, n) => {
                let e = &mut self.ends[self.hosts[h].cur.unwrap()];
                e.posted[1] += n;
                // Receives are accepted from INIT on (§5.4); the QP is never in RESET here.
                self.expect = (e.certain && e.posted[1] <= 60).then_some(0);
            }
            T::Post(h, _, n) => {
                let e = &mut self.ends[self.hosts[h].cur.unwrap()];
                e.posted[0] += n;
                self.expect = if !e.certain || e.posted[0] > 60 {
                    None
                } else if e.err || e.rts {
                    Some(0) // RTS, or ERR: accepted and flushed (§5.4)
                } else if e.init {
                    Some(EINVAL) // sends before RTS (§5.4)
                } else {
                    None
                };
            }
            T::Disconnect(h) => {
                let i = self.hosts[h].cur.unwrap();
                let est = self
                    .link
                    .is_some_and(|l| l.established && (l.active == i || l.passive == Some(i)));
                let e = &mut self.ends[i];
                // §4.4: 0 on any id that connected or accepted, whatever the CM state;
                // EINVAL once destroyed (unknown id).
                self.expect = match (e.certain, e.destroyed) {
                    (true, Some(true)) => Some(EINVAL),
                    (true, Some(false)) => Some(0),
                    _ => None,
                };
                if e.destroyed != Some(true) {
                    e.err = e.certain;
                    if e.answered_at.is_none() {
                        e.answered_at = Some(self.now);
                        e.disc_while_est = est;
                    }
                }
                self.touch();
            }
            T::DisconnectListener(_) => self.expect = Some(0),
            T::Destroy(h) => {
                let i = self.hosts[h].cur.unwrap();
                let mode = self.hosts[h].mode;
                let e = &mut self.ends[i];
                let expect = match (e.certain, e.destroyed, mode) {
                    (true, Some(true), _) => Some(EINVAL),
                    (true, Some(false), EventMode::AckAtOnce | EventMode::NeverRead) => Some(0),
                    // Never acking: a passive id's CONNECT_REQUEST is the listener's event
                    // (ucma.c), so the id is busy only if it read an event of its own since,
                    // which the reference does not track; the oracle checks the exact count.
                    _ => None,
                };
                self.expect = expect;
                e.destroyed = match (e.destroyed, expect) {
                    (Some(true), _) => Some(true),
                    (_, Some(0)) => Some(true),
                    _ => None,
                };
                // The QP goes to ERR anyway (the call that follows).
                e.err = e.certain;
                if e.answered_at.is_none() && expect == Some(0) {
                    e.answered_at = Some(self.now);
                }
                self.touch();
            }
            T::Advance(d) => {
                self.now += d;
                self.settle();
            }
            T::Crash(h, restart) => {
                self.dirty();
                let host = &mut self.hosts[h];
                host.listening = false;
                host.request_from = None;
                host.cur = None;
                host.up_from = restart.map(|d| self.now + d.max(1));
                for e in self.ends.iter_mut().filter(|e| e.host == h) {
                    e.dead = true;
                }
            }
            T::DropNext(_) | T::Partition { .. } => self.dirty(),
            T::Heal => {}
        }
        self
    }

    fn preconditions(&self, t: &T) -> bool {
        match *t {
            T::Listen(h) => self.up(h),
            T::Connect(h) => self.up(h) && self.free(h) && self.free(1 - h),
            T::Accept(h) | T::Reject(h) => {
                self.up(h) && self.hosts[h].request_from.is_some() && self.free(h)
            }
            T::PostRecv(h, _) | T::Post(h, _, _) | T::Disconnect(h) | T::Destroy(h) => {
                self.has_end(h)
            }
            T::DisconnectListener(h) => self.up(h) && self.hosts[h].listening,
            T::Crash(h, _) => self.faulty && self.up(h),
            T::DropNext(_) | T::Partition { .. } | T::Heal => self.faulty,
            T::Advance(_) => true,
        }
    }
}

fn mode_strategy() -> impl Strategy<Value = EventMode> {
    prop_oneof![
        8 => Just(EventMode::AckAtOnce),
        1 => (1..=100u64).prop_map(|us| EventMode::AckAfter(us * US)),
        1 => Just(EventMode::NeverAck),
        1 => Just(EventMode::NeverRead),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![2 => Just(Op::Send), 1 => Just(Op::Write), 1 => Just(Op::Read)]
}

/// Virtual time steps: a few latencies, past the settle time, past DREQ retries, past TimeWait.
fn advance_strategy() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![3 * US, 15 * US, 120 * US, 2 * MS, 25 * MS, 400 * MS])
}

struct ApiMachine;

impl ReferenceStateMachine for ApiMachine {
    type State = RefState;
    type Transition = T;

    fn init_state() -> BoxedStrategy<RefState> {
        (
            any::<u64>(),
            1..=6u8,
            mode_strategy(),
            mode_strategy(),
            any::<bool>(),
        )
            .prop_map(|(seed, rnr_retry, m0, m1, faulty)| {
                let host = |mode| RefHost {
                    mode,
                    up_from: Some(0),
                    listening: false,
                    cur: None,
                    request_from: None,
                    stray_request: false,
                    unheard_req_at: None,
                };
                RefState {
                    seed,
                    rnr_retry,
                    now: 0,
                    faulty,
                    clean: true,
                    hosts: [host(m0), host(m1)],
                    ends: Vec::new(),
                    link: None,
                    expect: None,
                    expect_applied: None,
                }
            })
            .boxed()
    }

    fn transitions(s: &RefState) -> BoxedStrategy<T> {
        // Weights follow the story (listen, connect, accept, post, disconnect) so that clean
        // runs get far enough for the strong predictions; faults only in `faulty` runs.
        let mut choices: Vec<(u32, BoxedStrategy<T>)> =
            vec![(6, advance_strategy().prop_map(T::Advance).boxed())];
        if s.faulty {
            choices.push((1, (0..2usize).prop_map(T::DropNext).boxed()));
            choices.push((
                1,
                (0..2usize, any::<bool>(), advance_strategy())
                    .prop_map(|(from, one_way, window)| T::Partition {
                        from,
                        one_way,
                        window,
                    })
                    .boxed(),
            ));
            choices.push((1, Just(T::Heal).boxed()));
        }
        for h in 0..2 {
            let disconnected = s.cur(h).is_some_and(|e| e.answered_at.is_some());
            let peer_listens = s.hosts[1 - h].listening;
            let arrived = s.hosts[h]
                .request_from
                .is_some_and(|(t, _)| s.now >= t + ARRIVE_NS);
            let all = [
                (T::Listen(h), if s.hosts[h].listening { 0 } else { 4 }),
                (T::Connect(h), if peer_listens { 4 } else { 1 }),
                (T::Accept(h), if arrived { 10 } else { 1 }),
                (T::Reject(h), if arrived { 2 } else { 1 }),
                (T::Disconnect(h), if disconnected { 1 } else { 4 }),
                (T::DisconnectListener(h), 1),
                (T::Destroy(h), 1),
            ];
            for (t, w) in all {
                if w > 0 && s.preconditions(&t) {
                    choices.push((w, Just(t).boxed()));
                }
            }
            if s.has_end(h) {
                choices.push((2, (1..=3u32).prop_map(move |n| T::PostRecv(h, n)).boxed()));
                choices.push((
                    3,
                    (op_strategy(), 1..=3u32)
                        .prop_map(move |(op, n)| T::Post(h, op, n))
                        .boxed(),
                ));
            }
            if s.faulty && s.up(h) {
                choices.push((
                    1,
                    prop::option::of(prop::sample::select(vec![50 * US, 5 * MS]))
                        .prop_map(move |r| T::Crash(h, r))
                        .boxed(),
                ));
            }
        }
        prop::strategy::Union::new_weighted(choices).boxed()
    }

    fn apply(state: RefState, t: &T) -> RefState {
        state.apply(t)
    }

    fn preconditions(state: &RefState, t: &T) -> bool {
        state.preconditions(t)
    }
}

// ---------------------------------------------------------------------------------------------
// The system under test: the World
// ---------------------------------------------------------------------------------------------

struct Sut {
    w: World,
    /// Per reference end: the World's end, if the call made one.
    ends: Vec<Option<End>>,
    /// Per host: the CONNECT_REQUEST read and not yet answered.
    request: [Option<CmIdHandle>; 2],
    listen: [Option<CmIdHandle>; 2],
    cursor: usize,
    /// Per host: "drop the next datagram(s) it sends" is armed.
    drop_armed: [bool; 2],
}

impl Sut {
    /// Reads new CONNECT_REQUESTs from the history.
    fn learn(&mut self) {
        let entries = &self.w.history().entries;
        for e in &entries[self.cursor..] {
            let h = usize::from(e.host);
            if let Record::Event {
                id,
                event: E::ConnectRequest,
                ..
            } = e.rec
            {
                if e.epoch == self.w.epoch(h) {
                    self.request[h] = Some(CmIdHandle(id));
                }
            }
        }
        self.cursor = entries.len();
    }

    /// Disarms an armed drop once the fabric dropped something the host sent (since the
    /// last [`learn`](Self::learn)): every datagram it sent at that instant.
    fn check_drops(&mut self) {
        for from in 0..2 {
            let dropped = self.w.history().entries[self.cursor..].iter().any(|e| {
                usize::from(e.host) == from
                    && matches!(
                        e.rec,
                        Record::Fault(rnic_testbed::world::Fault::Dropped { .. })
                    )
            });
            if self.drop_armed[from] && dropped {
                seen("drop fired".into());
                let path = (host_ip(from), host_ip(1 - from));
                self.w.sim_mut().fabric.plan_mut().paths.remove(&path);
                self.drop_armed[from] = false;
            }
        }
    }

    fn advance(&mut self, d: u64) {
        let limit = self.w.now().plus_nanos(d);
        loop {
            let stepped = self.w.step(limit);
            self.check_drops();
            self.learn();
            if !stepped {
                break;
            }
        }
        self.w.run_until(limit);
        self.learn();
    }

    fn end(&self, s: &RefState, h: usize) -> Option<End> {
        s.hosts[h].cur.and_then(|i| self.ends[i])
    }
}

thread_local! {
    /// What the reference predicted and the World confirmed, by kind (this thread's runs).
    static SEEN: std::cell::RefCell<std::collections::BTreeMap<String, u64>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

/// Counts one confirmed prediction of kind `k`.
fn seen(k: String) {
    SEEN.with(|m| *m.borrow_mut().entry(k).or_default() += 1);
}

fn assert_errno(what: &str, t: &T, expect: Option<i32>, got: i32) {
    if let Some(e) = expect {
        seen(format!("{what}={e}"));
        assert_eq!(
            got, e,
            "{what}: {t:?} returned {got}, the reference predicts {e}"
        );
    }
}

fn errno<R>(r: &Result<R, verbs_core::Error>) -> i32 {
    r.as_ref().map_or_else(|e| e.errno as i32, |_| 0)
}

/// The errno of the World's last recorded call.
fn last_call_errno(w: &World) -> i32 {
    w.history()
        .entries
        .iter()
        .rev()
        .find_map(|e| match e.rec {
            Record::Call { errno, .. } => Some(errno),
            _ => None,
        })
        .unwrap()
}

/// DISCONNECTED events of `e`'s id: their statuses.
fn disconnected(w: &World, e: End) -> Vec<i32> {
    w.history()
        .of_host(e.host)
        .filter(|x| x.epoch == e.epoch)
        .filter_map(|x| match x.rec {
            Record::Event {
                id,
                event: E::Disconnected,
                status,
                ..
            } if id == e.id.0 => Some(status),
            _ => None,
        })
        .collect()
}

fn has_event(w: &World, e: End, kind: E) -> bool {
    w.history().of_host(e.host).any(|x| {
        x.epoch == e.epoch
            && matches!(x.rec, Record::Event { id, event, .. } if id == e.id.0 && event == kind)
    })
}

impl StateMachineTest for ApiMachine {
    type SystemUnderTest = Sut;
    type Reference = ApiMachine;

    fn init_test(s: &RefState) -> Sut {
        let cfg = WorldConfig {
            fast_timers: true,
            rnr_retry: s.rnr_retry,
            ..WorldConfig::two_hosts(s.seed)
        };
        let mut w = World::new(cfg).unwrap();
        for h in 0..2 {
            w.set_event_mode(h, s.hosts[h].mode);
        }
        Sut {
            w,
            ends: Vec::new(),
            request: [None; 2],
            listen: [None; 2],
            cursor: 0,
            drop_armed: [false; 2],
        }
    }

    fn apply(mut sut: Sut, s: &RefState, t: T) -> Sut {
        sut.learn();
        match t {
            T::Listen(h) => {
                let r = sut.w.listen(h);
                assert_errno("listen", &t, s.expect, errno(&r));
                sut.listen[h] = r.ok();
            }
            T::Connect(h) => {
                let r = sut.w.connect(h, 1 - h);
                assert_errno("connect", &t, s.expect, errno(&r));
                sut.ends.push(r.ok());
            }
            T::Accept(h) | T::Reject(h) => {
                let req = sut.request[h].take();
                if let Some(applied) = s.expect_applied {
                    seen(format!("request pending={applied}"));
                    assert_eq!(
                        req.is_some(),
                        applied,
                        "{t:?}: a CONNECT_REQUEST was pending: {}, the reference predicts {applied}",
                        req.is_some()
                    );
                }
                let made = match (t, req) {
                    (T::Accept(_), Some(id)) => {
                        let r = sut.w.accept(h, id);
                        assert_errno("accept", &t, s.expect, errno(&r));
                        Some(r.ok())
                    }
                    (T::Accept(_), None) => Some(None),
                    (_, Some(id)) => {
                        let r = sut.w.reject(h, id);
                        assert_errno("reject", &t, s.expect, errno(&r));
                        None
                    }
                    (_, None) => None,
                };
                if let Some(e) = made {
                    sut.ends.push(e);
                }
            }
            T::PostRecv(h, n) | T::Post(h, _, n) => {
                if let Some(e) = sut.end(s, h) {
                    let op = if let T::Post(_, op, _) = t {
                        op
                    } else {
                        Op::Recv
                    };
                    sut.w.post(e, op, n as usize);
                    assert_errno("post", &t, s.expect, last_call_errno(&sut.w));
                }
            }
            T::Disconnect(h) => {
                if let Some(e) = sut.end(s, h) {
                    let r = sut.w.disconnect(e);
                    assert_errno("disconnect", &t, s.expect, errno(&r));
                }
            }
            T::DisconnectListener(h) => {
                let id = sut.listen[h].unwrap();
                // Any QP will do: rdma_disconnect uses the id's own (none for a listener).
                let qp = sut.ends.iter().flatten().next().map(|e| e.qp);
                if let Some(qp) = qp {
                    let e = End {
                        host: h,
                        epoch: sut.w.epoch(h),
                        id,
                        qp,
                        peer: h,
                    };
                    let r = sut.w.disconnect(e);
                    assert_errno("disconnect(listener)", &t, s.expect, errno(&r));
                }
            }
            T::Destroy(h) => {
                if let Some(e) = sut.end(s, h) {
                    let r = sut.w.destroy(e);
                    assert_errno("destroy", &t, s.expect, errno(&r));
                    let r = sut.w.qp_to_err(e);
                    assert_errno("qp_to_err after destroy", &t, Some(0), errno(&r));
                }
            }
            T::Advance(d) => sut.advance(d),
            T::Crash(h, restart) => {
                sut.w.crash(h, restart).unwrap();
                sut.request[h] = None;
                sut.listen[h] = None;
            }
            T::DropNext(from) => {
                let lossy = PathFaults {
                    loss: 1.0,
                    ..PathFaults::perfect()
                };
                let (a, b) = (host_ip(from), host_ip(1 - from));
                sut.w
                    .sim_mut()
                    .fabric
                    .plan_mut()
                    .paths
                    .insert((a, b), lossy);
                sut.drop_armed[from] = true;
            }
            T::Partition {
                from,
                one_way,
                window,
            } => {
                let (a, b) = (host_ip(from), host_ip(1 - from));
                let (start, heal) = (sut.w.now(), Some(sut.w.now().plus_nanos(window)));
                let p = if one_way {
                    Partition::one_way(a, b, start, heal)
                } else {
                    Partition::symmetric(a, b, start, heal)
                };
                sut.w.sim_mut().fabric.plan_mut().partitions.push(p);
            }
            T::Heal => {
                let now = sut.w.now();
                let plan = sut.w.sim_mut().fabric.plan_mut();
                plan.paths.clear();
                for p in &mut plan.partitions {
                    if p.heal.is_none_or(|x| x > now) {
                        p.heal = Some(now);
                    }
                }
                sut.drop_armed = [false; 2];
            }
        }
        sut.learn();
        sut
    }

    fn check_invariants(sut: &Sut, s: &RefState) {
        assert_eq!(sut.w.now(), SimTime(s.now), "virtual time");
        if let Err(v) = sut.w.check_now() {
            panic!("the oracle's safety checks failed:\n{v}");
        }
        // ESTABLISHED on both sides once the reference is sure of it.
        if let Some(l) = s.link.filter(|l| l.established) {
            for i in [Some(l.active), l.passive].into_iter().flatten() {
                let e = &s.ends[i];
                let reads = s.hosts[e.host].mode != EventMode::NeverRead;
                if let (Some(end), true, false) = (sut.ends[i], reads, e.dead) {
                    seen("established".into());
                    assert!(
                        has_event(&sut.w, end, E::Established),
                        "end {i} (host {}) has no ESTABLISHED {} µs after a clean accept",
                        e.host,
                        SETTLE_NS / US
                    );
                }
            }
        }
    }

    fn teardown(mut sut: Sut, s: RefState) {
        sut.w.heal();
        if let Err(v) = sut.w.check() {
            panic!("the oracle failed after heal + quiescence:\n{v}");
        }
        // Predicted outcomes. An end that disconnected while surely ESTABLISHED gets exactly
        // one DISCONNECTED (L1, restated by the reference); on a network that stayed clean,
        // its peer gets one too (L2) and the status says whether the peer answered.
        for (i, e) in s.ends.iter().enumerate() {
            let Some(end) = sut.ends[i] else { continue };
            let reads = |h: usize| s.hosts[h].mode != EventMode::NeverRead;
            if !e.disc_while_est || e.dead || e.destroyed != Some(false) || !reads(e.host) {
                continue;
            }
            let got = disconnected(&sut.w, end);
            seen("one DISCONNECTED".into());
            assert_eq!(
                got.len(),
                1,
                "end {i} (host {}): DISCONNECTED {got:?}",
                e.host
            );
            let Some(p) = e.peer.map(|p| &s.ends[p]) else {
                continue;
            };
            let Some(pend) = e.peer.and_then(|p| sut.ends[p]) else {
                continue;
            };
            if !s.clean || p.dead {
                continue;
            }
            if p.destroyed == Some(false) && reads(p.host) {
                let pgot = disconnected(&sut.w, pend);
                seen("peer DISCONNECTED".into());
                assert_eq!(pgot.len(), 1, "peer of end {i}: DISCONNECTED {pgot:?}");
            }
            // The status, when the peer's answer is sure: none at all (the DREQ retries run
            // out, −ETIMEDOUT) or a disconnect/destroy soon after this end's DREQ (0).
            let t = e.answered_at.unwrap();
            match p.answered_at {
                None if p.certain && p.destroyed == Some(false) => {
                    seen("status -110".into());
                    assert_eq!(got, [-110], "end {i}: the peer never answered");
                }
                Some(tp) if p.certain && tp >= t && tp < t + FRESH_NS => {
                    seen("status 0".into());
                    assert_eq!(got, [0], "end {i}: the peer answered within 5 ms");
                }
                _ => {}
            }
        }
    }
}

prop_state_machine! {
    #![proptest_config(config(256))]

    /// Random scripts of API calls, time and faults on two hosts, against the reference model
    /// and the oracle.
    #[test]
    fn api_scripts_match_the_reference_model_and_pass_the_oracle(sequential 1..40 => ApiMachine);
}

/// The generator is not blind: in 1024 cases the reference makes (and the World confirms) every
/// kind of prediction at least once.
#[test]
fn the_reference_predicts_every_kind_of_outcome() {
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    let config = Config {
        cases: 1024,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(config, rng);
    runner
        .run(&ApiMachine::sequential_strategy(1..40), |(s, ts, seen)| {
            ApiMachine::test_sequential(Config::default(), s, ts, seen);
            Ok(())
        })
        .unwrap();
    let seen = SEEN.with(|m| m.borrow().clone());
    eprintln!("{seen:#?}");
    for k in [
        "listen=0",
        "connect=0",
        "accept=0",
        "reject=0",
        "post=0",
        "post=22",
        "disconnect=0",
        "disconnect=22",
        "disconnect(listener)=0",
        "destroy=0",
        "request pending=true",
        "request pending=false",
        "established",
        "one DISCONNECTED",
        "peer DISCONNECTED",
        "status 0",
        "status -110",
        "drop fired",
    ] {
        assert!(seen.contains_key(k), "never predicted: {k}; {seen:?}");
    }
}

/// A deaf active host (it never reads CM events) never fetches its CONNECT_RESPONSE, so
/// librdmacm never moves its QP past INIT nor sends the RTU (cm-spec §4.3): a SEND after the
/// REP arrived is refused with EINVAL, its IB CM id waits in REP_RCVD and the passive one in
/// REP_SENT, and the oracle (which sees no ESTABLISHED) demands exactly that EINVAL. Found by
/// the state machine (shrunk to: host 0 listens, host 1 connects, 15 µs, accept, 15 µs, host 1
/// posts a SEND) while cm-core still did librdmacm's CONNECT_RESPONSE work when the REP
/// arrived: the SEND was accepted then, and the oracle had to allow it.
#[test]
fn a_deaf_active_host_stays_in_init_and_its_send_is_einval_after_the_rep() {
    let mut w = World::new(WorldConfig::two_hosts(0).fast()).unwrap();
    w.set_event_mode(1, EventMode::NeverRead);
    w.listen(0).unwrap();
    let a = w.connect(1, 0).unwrap();
    w.run_for(15 * US);
    let id = w.wait_event(0, None, E::ConnectRequest).unwrap();
    w.accept(0, id).unwrap();
    w.run_for(15 * US);
    assert!(w.post(a, Op::Send, 1).is_empty(), "refused in INIT");
    assert_eq!(w.qp_state(a), Some(QpState::Init));
    assert_eq!(w.ib_cm_state(1, a.id), Some(IbCmState::RepRcvd));
    assert_eq!(w.ib_cm_state(0, id), Some(IbCmState::RepSent));
    w.check_now().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Scenario values: the seed swarm's space, shrinkable
// ---------------------------------------------------------------------------------------------

fn event_type_strategy() -> impl Strategy<Value = E> {
    prop::sample::select(vec![
        E::ConnectRequest,
        E::Established,
        E::Disconnected,
        E::TimewaitExit,
        E::Rejected,
    ])
}

fn trigger_strategy() -> impl Strategy<Value = Trigger> {
    prop_oneof![
        4 => Just(Trigger::Now),
        2 => (0..=300u64).prop_map(|us| Trigger::At(us * US)),
        4 => event_type_strategy().prop_map(Trigger::OnEvent),
        1 => (1..=4u32).prop_map(Trigger::AfterCompletions),
    ]
}

fn action_strategy(h: usize) -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => Just(Action::Listen),
        2 => Just(Action::Connect { to: 1 - h }),
        3 => Just(Action::Accept),
        1 => Just(Action::Reject),
        2 => (0..=4u32).prop_map(|n| Action::PostRecv { n }),
        3 => (op_strategy(), 0..=3u32).prop_map(|(op, n)| Action::Post { op, n }),
        4 => Just(Action::Disconnect),
        1 => Just(Action::DisconnectTwice),
        1 => Just(Action::DestroyInsteadOfDisconnect),
        1 => prop::option::of((1..=100u64).prop_map(|us| us * US))
            .prop_map(|restart_after_ns| Action::Crash { restart_after_ns }),
        1 => Just(Action::RemoveDevice),
        1 => Just(Action::AddressChange),
    ]
}

/// Host `h`'s event mode and up to 7 random steps (they shrink away).
fn script_strategy(h: usize) -> impl Strategy<Value = (EventMode, Vec<Step>)> {
    let step =
        (trigger_strategy(), action_strategy(h)).prop_map(|(when, action)| Step { when, action });
    (mode_strategy(), prop::collection::vec(step, 0..8))
}

fn faults_strategy() -> impl Strategy<Value = Faults> {
    let partition =
        (0..=40u64, 1..=40u64, any::<bool>()).prop_map(|(s, len, one_way)| PartitionSpec {
            start_ns: s * 3 * MS,
            heal_ns: (s + len) * 3 * MS,
            one_way,
        });
    (
        0.0..0.3f64,
        0.0..0.5f64,
        0.0..0.05f64,
        0..=40u64,
        prop::collection::vec(partition, 0..=2),
        20..=40u64,
    )
        .prop_map(
            |(loss, duplicate, corrupt, jitter_us, partitions, heal)| Faults {
                loss,
                duplicate,
                corrupt,
                jitter_ns: jitter_us * US,
                partitions,
                heal_at_ns: heal * 12 * MS,
            },
        )
}

/// Two scripted hosts, a faulty network, fast timers: the shape of [`Scenario::generate`] as a
/// shrinkable strategy. Host 0 connects to host 1, host 1 listens and accepts (or, 1 in 10,
/// rejects) the request; the random steps after that and the fault rates shrink (to fewer
/// steps, towards 0).
fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    let step = |when, action| Step { when, action };
    (
        any::<u64>(),
        script_strategy(0),
        script_strategy(1),
        prop::bool::weighted(0.1),
        faults_strategy(),
        1..=6u8,
    )
        .prop_map(
            move |(seed, (ev0, tail0), (ev1, tail1), reject, faults, rnr_retry)| {
                let mut active = vec![step(Trigger::Now, Action::Connect { to: 1 })];
                active.extend(tail0);
                let answer = if reject {
                    Action::Reject
                } else {
                    Action::Accept
                };
                let mut passive = vec![
                    step(Trigger::Now, Action::Listen),
                    step(Trigger::OnEvent(E::ConnectRequest), answer),
                ];
                passive.extend(tail1);
                Scenario {
                    seed,
                    hosts: vec![
                        Script {
                            events: ev0,
                            steps: active,
                        },
                        Script {
                            events: ev1,
                            steps: passive,
                        },
                    ],
                    faults,
                    fast_timers: true,
                    rnr_retry,
                    hostile: None,
                    host_cm: Vec::new(),
                    msg_faults: Vec::new(),
                    host_app: Vec::new(),
                    cq_entries: 1024,
                }
            },
        )
}

proptest! {
    #![proptest_config(config(256))]

    /// Generated scenarios pass the oracle and end quiescent.
    #[test]
    fn generated_scenarios_pass_the_oracle(sc in scenario_strategy()) {
        let w = scenario::run(&sc, false).unwrap();
        let h = w.history();
        let v = rnic_testbed::oracle::check(h);
        prop_assert!(
            v.is_empty() && h.quiescent,
            "{}\nquiescent {}\n{}",
            sc.describe(),
            h.quiescent,
            v.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
    }
}
