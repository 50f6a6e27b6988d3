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
//!
//! Files: `reference.rs` (the reference model), `swarm.rs` (the seed swarm's scenarios as
//! shrinkable values), this file (the World as system under test, the tests).

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

mod reference;
mod swarm;

use reference::*;

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
