//! # The regression gallery
//!
//! Every rule of RDMA connection teardown the testbed implements, as a short named test on the
//! deterministic [`World`]: the rows of cm-spec §4.4 (`rdma_disconnect` in every state), the
//! disconnect sequences of §4.5 (normal, simultaneous, unanswered), the races of connection
//! setup, `rdma_destroy_id` in every IB CM state (§3.3), lost DREPs, the setup rejections
//! (REJ 10, REJ 8), and the "behaviour choices where real stacks differ" of TESTING.md.
//!
//! ## How to copy a test
//!
//! Each test is self-contained apart from the few helpers in the first section:
//!
//! 1. build a World: `World::new(WorldConfig::two_hosts(seed))` (Linux's timers) or
//!    `WorldConfig::two_hosts(seed).fast()` (12 ms DREQ timeout, 128 ms TimeWait), or start
//!    from [`established`] (host 0 connected to host 1, some traffic done);
//! 2. act as the applications: `w.disconnect(end)`, `w.destroy(end)`, `w.post(end, Op::Send,
//!    n)`, `w.qp_to_err(end)`; inject faults: `w.partition_one_way(from, to, Some(ns))`,
//!    `w.crash(host, restart)`; let time pass: `w.run_for(ns)`, `w.wait_event(host, id,
//!    kind)`;
//! 3. assert what the rule says, on what the applications saw ([`World::events_of`],
//!    [`World::wc_status`]), the states ([`World::qp_state`], [`World::ib_cm_state`]) and the
//!    wire ([`World::sent_mads`], [`World::dropped`]);
//! 4. end with `w.check()`: the World tears the applications down (every QP to ERR), runs to
//!    quiescence and checks the whole history with the oracle (S1–S7 of TESTING.md; L1–L3 too
//!    after `w.heal()`). A failing check prints the violated invariant and the records.
//!
//! A copied test has this shape:
//!
//! ```text
//! #[test]
//! fn lost_dreq_is_retransmitted_after_the_dreq_timeout() {
//!     let (mut w, c) = established();              // host 0 ⇄ host 1, ESTABLISHED
//!     w.partition_one_way(0, 1, Some(MS));         // drop what host 0 sends in the next 1 ms
//!     w.disconnect(c.active).unwrap();             // its DREQ is lost ...
//!     answer(&mut w, c.active, c.passive);         // ... resent 4608 ms later: host 1 answers
//!     assert_eq!(sent(&mut w, 0, DREQ), 2);
//!     w.check().unwrap();                          // S1–S7 over the whole history
//! }
//! ```
//!
//! Everything runs in virtual time: a 74 s DREQ give-up costs a few events, and a test that
//! fails fails the same way every run. `w.history()` renders as a readable trace
//! (`for e in &w.history().entries { println!("{e}") }`) when a test needs debugging.
//!
//! ## Sections
//!
//! Helpers · Handshake · `rdma_disconnect` row by row (§4.4) · disconnect sequences (§4.5) ·
//! unanswered disconnect · races with connection setup · `rdma_destroy_id` per IB CM state
//! (§3.3) · lost DREP · setup rejections · behaviour choices (TESTING.md) · regressions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use cm_core::api::{CmEventType as E, CmIdHandle};
use cm_core::engine::IbCmState;
use cm_core::wire::{
    CmMessage, CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ, CM_MRA_ATTR_ID as MRA,
    CM_REJ_ATTR_ID as REJ, CM_REP_ATTR_ID as REP, CM_REQ_ATTR_ID as REQ, CM_RTU_ATTR_ID as RTU,
};
use rnic_sim::fabric::{DropReason, FabricEventKind};
use rnic_testbed::world::{host_ip, Conn, End, EventMode, Op, Queue, Record, World, WorldConfig};
use verbs_core::{Device, Errno, QpCap, QpInitAttr, QpState, SimTime, WcStatus};

/// 1 ms of virtual time, in ns.
const MS: u64 = 1_000_000;
/// Linux's active DREQ retransmission timeout on RoCE: 2·ms(PLT 16) + ms(20) = 4608 ms
/// (cm-spec §3.2).
const DREQ_TIMEOUT_NS: u64 = 4608 * MS;
/// The same with [`WorldConfig::fast`]: 2·ms(10) + ms(10) = 12 ms.
const FAST_DREQ_TIMEOUT_NS: u64 = 12 * MS;
/// DREQ sends before DREQ_ERROR: 1 + CMA_MAX_CM_RETRIES (15) (cm-spec §3.2).
const DREQ_SENDS: u64 = 16;

// =============================================================================================
// Helpers: a connected World, and short names for what the tests look at
// =============================================================================================

/// Two hosts, Linux's default timers, a perfect network; host 0 connected to host 1, and
/// [`traffic`] done on the connection.
fn established() -> (World, Conn) {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let c = w.establish(0, 1).unwrap();
    traffic(&mut w, c);
    (w, c)
}

/// Each end posts 3 receives and one SEND: both SENDs and one receive per end succeed, the
/// other receives stay posted (for the teardown to flush). Returns those, (active, passive).
fn traffic(w: &mut World, c: Conn) -> (Vec<u64>, Vec<u64>) {
    let ra = w.post_recvs(c.active, 3);
    let rp = w.post_recvs(c.passive, 3);
    let sa = w.post(c.active, Op::Send, 1);
    let sp = w.post(c.passive, Op::Send, 1);
    w.run_for(MS);
    for wr in [sa[0], sp[0], ra[0], rp[0]] {
        assert_eq!(w.wc_status(wr), Some(WcStatus::Success), "WR {wr}");
    }
    for wr in [&ra[1..], &rp[1..]].concat() {
        assert_eq!(w.wc_status(wr), None, "WR {wr} still posted");
    }
    (ra[1..].to_vec(), rp[1..].to_vec())
}

/// The peer's part of a disconnect `init` started: `peer` reads DISCONNECTED(0) with its QP
/// untouched (cm-spec §4.2), while `init` still waits for the DREP; `peer` answers with
/// `rdma_disconnect` (DREP, its QP → ERR).
fn answer(w: &mut World, init: End, peer: End) {
    w.wait_event(peer.host, Some(peer.id), E::Disconnected)
        .unwrap();
    assert_eq!(statuses(w, peer, E::Disconnected), [0]);
    assert_eq!(w.qp_state(peer), Some(QpState::Rts), "DREQ leaves the QP");
    assert!(
        statuses(w, init, E::Disconnected).is_empty(),
        "the initiator waits for the DREP"
    );
    assert_eq!(w.disconnect(peer), Ok(()));
    assert_eq!(w.qp_state(peer), Some(QpState::Err));
}

/// The orderly end of a connection: one DISCONNECTED(0) on each end, one DREQ from the
/// initiator, one DREP from the responder, and TIMEWAIT_EXIT last on both ends.
fn assert_orderly(w: &mut World, init: End, resp: End) {
    for e in [init, resp] {
        assert_eq!(statuses(w, e, E::Disconnected), [0], "{e:?}");
        assert_eq!(statuses(w, e, E::TimewaitExit), [0], "{e:?}");
        assert_eq!(kinds(w, e).last(), Some(&E::TimewaitExit), "{e:?}");
    }
    assert_eq!(sent(w, init.host, DREQ), 1);
    assert_eq!(sent(w, resp.host, DREP), 1);
}

/// The CM event types `e`'s application read for its id, in order.
fn kinds(w: &World, e: End) -> Vec<E> {
    w.events_of(e.host, e.id).iter().map(|x| x.1).collect()
}

/// The statuses of `e`'s events of type `kind`, in order.
fn statuses(w: &World, e: End, kind: E) -> Vec<i32> {
    w.events_of(e.host, e.id)
        .iter()
        .filter(|x| x.1 == kind)
        .map(|x| x.2)
        .collect()
}

/// When `e` read its first event of type `kind`.
fn time_of(w: &World, e: End, kind: E) -> SimTime {
    w.events_of(e.host, e.id)
        .iter()
        .find(|x| x.1 == kind)
        .unwrap()
        .0
}

/// How many CM MADs of attribute `attr` host `h` sent (current life).
fn sent(w: &mut World, h: usize, attr: u16) -> usize {
    w.sent_mads(h).iter().filter(|m| m.1.attr == attr).count()
}

/// The attributes of every CM MAD host `h` sent (current life), in order.
fn sent_attrs(w: &mut World, h: usize) -> Vec<u16> {
    w.sent_mads(h).iter().map(|m| m.1.attr).collect()
}

/// The reasons of the REJs host `h` sent.
fn rej_reasons(w: &mut World, h: usize) -> Vec<u16> {
    w.sent_mads(h)
        .iter()
        .filter(|m| m.1.attr == REJ)
        .map(|m| m.1.reason)
        .collect()
}

/// CM MADs sent by both hosts.
fn mads_on_wire(w: &mut World) -> usize {
    w.sent_mads(0).len() + w.sent_mads(1).len()
}

/// The initiator `init` disconnected at `t0` and nothing answers: 16 DREQs `timeout_ns`
/// apart, then DISCONNECTED(-110) exactly 16 × `timeout_ns` after `t0` (cm-spec §3.2, §4.2),
/// and the IB CM id in TimeWait.
fn assert_dreq_timeout(w: &mut World, init: End, t0: SimTime, timeout_ns: u64) {
    w.wait_event(init.host, Some(init.id), E::Disconnected)
        .unwrap();
    assert_eq!(statuses(w, init, E::Disconnected), [-110]);
    assert_eq!(
        time_of(w, init, E::Disconnected),
        t0.plus_nanos(DREQ_SENDS * timeout_ns)
    );
    let times: Vec<SimTime> = w
        .sent_mads(init.host)
        .iter()
        .filter(|m| m.1.attr == DREQ)
        .map(|m| m.0)
        .collect();
    let want: Vec<SimTime> = (0..DREQ_SENDS)
        .map(|i| t0.plus_nanos(i * timeout_ns))
        .collect();
    assert_eq!(times, want, "DREQ send times");
    assert_eq!(w.ib_cm_state(init.host, init.id), Some(IbCmState::Timewait));
}

/// Like [`World::establish`], with the RTU dropped: a one-way partition 0 → 1 from the accept
/// until 1 ms later (the RTU is the only datagram host 0 sends in that window). Host 0 is
/// ESTABLISHED, host 1 stays in REP_SENT.
fn establish_without_rtu(w: &mut World) -> Conn {
    w.listen(1).unwrap();
    let active = w.connect(0, 1).unwrap();
    let pid = w.wait_event(1, None, E::ConnectRequest).unwrap();
    w.partition_one_way(0, 1, Some(MS));
    let passive = w.accept(1, pid).unwrap();
    w.wait_event(0, Some(active.id), E::Established).unwrap();
    w.run_for(MS);
    let dropped: Vec<_> = w.dropped().iter().map(|d| (d.0, d.1.attr, d.2)).collect();
    assert_eq!(dropped, [(0, RTU, DropReason::Partitioned)]);
    assert_eq!(w.ib_cm_state(1, passive.id), Some(IbCmState::RepSent));
    Conn { active, passive }
}

// =============================================================================================
// Handshake
// =============================================================================================

#[test]
fn handshake_establishes_both_qps_in_rts_with_crossed_qpns_and_psns_and_carries_sends() {
    let (mut w, c) = established();
    let attr = |w: &World, e: End| {
        let nic = w.host(e.host).unwrap().nic();
        nic.query_qp(e.qp.handle).unwrap().0
    };
    let (qa, qp) = (attr(&w, c.active), attr(&w, c.passive));
    assert_eq!(
        (qa.dest_qp_num, qp.dest_qp_num),
        (c.passive.qp.qp_num, c.active.qp.qp_num)
    );
    assert_eq!((qa.sq_psn, qp.sq_psn), (qp.rq_psn, qa.rq_psn));
    assert_eq!(
        (qa.timeout, qp.timeout),
        (17, 17),
        "av.timeout: TimeWait 512 ms"
    );
    assert_eq!(
        kinds(&w, c.active),
        [E::AddrResolved, E::RouteResolved, E::Established]
    );
    assert_eq!(kinds(&w, c.passive), [E::ConnectRequest, E::Established]);
    assert_eq!(sent_attrs(&mut w, 0), [REQ, RTU]);
    assert_eq!(sent_attrs(&mut w, 1), [REP]);
    w.disconnect(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
}

// =============================================================================================
// rdma_disconnect: cm-spec §4.4, one row each
// =============================================================================================

#[test]
fn disconnect_row_first_call_established_active_sends_dreq_returns_0() {
    let (mut w, c) = established();
    assert_eq!(w.disconnect(c.active), Ok(()));
    assert_eq!(w.qp_state(c.active), Some(QpState::Err));
    assert_eq!(w.ib_cm_state(0, c.active.id), Some(IbCmState::DreqSent));
    assert_eq!(
        sent(&mut w, 0, DREQ),
        1,
        "the DREQ leaves in the same instant"
    );
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
}

#[test]
fn disconnect_row_first_call_established_passive_sends_dreq_returns_0() {
    let (mut w, c) = established();
    assert_eq!(w.disconnect(c.passive), Ok(()));
    assert_eq!(w.qp_state(c.passive), Some(QpState::Err));
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::DreqSent));
    assert_eq!(sent(&mut w, 1, DREQ), 1);
    answer(&mut w, c.passive, c.active);
    w.check().unwrap();
    assert_orderly(&mut w, c.passive, c.active);
}

#[test]
fn disconnect_row_after_disconnected_from_peer_dreq_sends_drep_returns_0() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::DreqRcvd));
    assert_eq!(sent(&mut w, 1, DREP), 0);
    assert_eq!(w.disconnect(c.passive), Ok(()));
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::Timewait));
    assert_eq!(w.qp_state(c.passive), Some(QpState::Err));
    assert_eq!(sent(&mut w, 1, DREP), 1);
    w.wait_event(0, Some(c.active.id), E::Disconnected).unwrap();
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
}

#[test]
fn disconnect_row_second_call_while_own_dreq_outstanding_returns_0_sends_nothing() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    let more = w.post_recvs(c.active, 2); // posted in ERR: flushed
    assert_eq!(w.disconnect(c.active), Ok(()));
    assert_eq!(w.ib_cm_state(0, c.active.id), Some(IbCmState::DreqSent));
    assert_eq!(w.qp_state(c.active), Some(QpState::Err));
    assert_eq!(sent(&mut w, 0, DREQ), 1);
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
    for wr in more {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn disconnect_row_after_disconnected_in_timewait_returns_0_sends_nothing() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.wait_event(0, Some(c.active.id), E::Disconnected).unwrap();
    let before = mads_on_wire(&mut w);
    for e in [c.active, c.passive] {
        assert_eq!(w.ib_cm_state(e.host, e.id), Some(IbCmState::Timewait));
        assert_eq!(w.disconnect(e), Ok(()));
    }
    w.run_to_quiescence();
    // ... and again after TIMEWAIT_EXIT (IB CM id IDLE).
    for e in [c.active, c.passive] {
        assert_eq!(kinds(&w, e).last(), Some(&E::TimewaitExit));
        assert_eq!(w.disconnect(e), Ok(()));
    }
    w.check().unwrap();
    assert_eq!(mads_on_wire(&mut w), before, "nothing sent");
    assert_orderly(&mut w, c.active, c.passive);
}

#[test]
fn disconnect_row_never_connected_id_is_einval_after_moving_its_qp_to_err() {
    let (mut w, c) = established();
    let idle = w.resolve(0, 1).unwrap(); // id with a QP in INIT, never connected
    let wrs = w.post_recvs(idle, 2);
    let before = mads_on_wire(&mut w);
    assert_eq!(w.disconnect(idle).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(w.qp_state(idle), Some(QpState::Err));
    w.run_for(MS);
    assert_eq!(mads_on_wire(&mut w), before, "nothing sent");
    assert_eq!(kinds(&w, idle), [E::AddrResolved, E::RouteResolved]);
    for wr in wrs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
    // The live connection is not disturbed.
    assert_eq!(w.qp_state(c.active), Some(QpState::Rts));
    w.disconnect(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
}

#[test]
fn disconnect_row_unbound_id_is_einval_and_sends_nothing() {
    let (mut w, c) = established();
    // A bare rdma_create_id on its own channel (an unrecorded call through the host).
    let cm = w.host_mut(0).unwrap().split().0;
    let ch = cm.create_event_channel();
    let id = cm.create_id(ch, cm_core::wire::RdmaPortSpace::Tcp).unwrap();
    let unbound = End { id, ..c.active }; // the QP is not looked at: the id has none
    let before = mads_on_wire(&mut w);
    assert_eq!(w.disconnect(unbound).unwrap_err().errno, Errno::EINVAL);
    w.run_for(MS);
    assert_eq!(mads_on_wire(&mut w), before, "nothing sent");
    assert_eq!(w.qp_state(c.active), Some(QpState::Rts));
    w.disconnect(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
}

#[test]
fn disconnect_row_while_connecting_returns_0_moves_qp_to_err_sends_no_dreq_or_drep() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    w.listen(1).unwrap();
    let a = w.resolve(0, 1).unwrap();
    let ra = w.post_recvs(a, 3);
    w.connect_resolved(a).unwrap();
    assert_eq!(w.disconnect(a), Ok(()));
    assert_eq!(w.ib_cm_state(0, a.id), Some(IbCmState::ReqSent));
    assert_eq!(w.qp_state(a), Some(QpState::Err));
    // The REQ is answered. When the active application fetches the CONNECT_RESPONSE, librdmacm
    // cannot move its QP (ERR) to RTR: it reports CONNECT_ERROR and sends nothing
    // (ucma_process_conn_resp never reaches the kernel's accept), so the IB CM id stays in
    // REP_RCVD and the passive side keeps waiting for an RTU.
    let pid = w.wait_event(1, None, E::ConnectRequest).unwrap();
    let p = w.accept(1, pid).unwrap();
    let rp = w.post_recvs(p, 3);
    w.wait_event(0, Some(a.id), E::ConnectError).unwrap();
    w.run_for(MS);
    assert_eq!(statuses(&w, a, E::ConnectError), [-(Errno::EINVAL as i32)]);
    assert_eq!(w.ib_cm_state(0, a.id), Some(IbCmState::RepRcvd));
    assert!(
        rej_reasons(&mut w, 0).is_empty(),
        "nothing sent at the fetch"
    );
    // The application gives up on the id: rdma_destroy_id rejects from REP_RCVD with 28
    // (cm-spec §3.3) and the passive side gets REJECTED(28).
    w.destroy(a).unwrap();
    w.check().unwrap();
    assert_eq!(statuses(&w, p, E::Rejected), [28]);
    assert_eq!(rej_reasons(&mut w, 0), [28]);
    for e in [a, p] {
        assert!(!kinds(&w, e).contains(&E::Established), "{e:?}");
        assert!(!kinds(&w, e).contains(&E::Disconnected), "{e:?}");
        assert_eq!(sent(&mut w, e.host, DREQ) + sent(&mut w, e.host, DREP), 0);
    }
    for wr in [ra, rp].concat() {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn disconnect_row_qp_in_reset_is_einval_and_sends_nothing() {
    let (mut w, c) = established();
    let now = w.now();
    // Swap in a QP that never left RESET (ibv_create_qp + attach) and disconnect. These calls
    // go through the host, unrecorded: the oracle cannot see the swap.
    let (cm, dev) = w.host_mut(0).unwrap().split();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16, None).unwrap();
    let init = QpInitAttr::rc(cq, cq, QpCap::uniform(4, 1, 0), true);
    let fresh = dev.create_qp(pd, &init).unwrap();
    assert_eq!(cm.detach_qp(c.active.id).unwrap(), Some(c.active.qp));
    cm.attach_qp(c.active.id, fresh).unwrap();
    let r = cm.disconnect(dev, now, c.active.id);
    assert_eq!(r.unwrap_err().errno, Errno::EINVAL);
    w.run_for(MS);
    assert_eq!(sent(&mut w, 0, DREQ), 0);
    assert_eq!(w.ib_cm_state(0, c.active.id), Some(IbCmState::Established));
    assert!(!kinds(&w, c.passive).contains(&E::Disconnected));
    // Put the real QP back: the same call now disconnects normally.
    let (cm, dev) = w.host_mut(0).unwrap().split();
    cm.detach_qp(c.active.id).unwrap();
    dev.destroy_qp(fresh.handle).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();
    cm.attach_qp(c.active.id, c.active.qp).unwrap();
    assert_eq!(w.qp_state(c.active), Some(QpState::Rts));
    w.disconnect(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
}

// =============================================================================================
// Disconnect sequences: cm-spec §4.5
// =============================================================================================

#[test]
fn normal_disconnect_flushes_caller_qp_only_responder_disconnected_on_dreq_initiator_on_drep() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let c = w.establish(0, 1).unwrap();
    let (_, posted_p) = traffic(&mut w, c);
    let extra_p = w.post_recvs(c.passive, 2);
    // Two SENDs posted 1 ns before the disconnect are flushed on the initiator at once,
    // although their packets are already on the wire: the responder (RTS) receives them. A
    // flush says nothing about delivery.
    let sends = w.post(c.active, Op::Send, 2);
    w.run_for(1); // the SENDs leave
    w.disconnect(c.active).unwrap();
    for wr in sends {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
    let t_dreq = w.now();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    // Responder: QP untouched; the two SENDs consumed the receives posted first.
    assert_eq!(w.qp_state(c.passive), Some(QpState::Rts));
    for wr in posted_p {
        assert_eq!(w.wc_status(wr), Some(WcStatus::Success));
    }
    w.run_for(10 * MS);
    assert!(
        kinds(&w, c.active).last() == Some(&E::Established),
        "no DREP yet"
    );
    assert_eq!(
        sent(&mut w, 0, DREQ),
        1,
        "no DREQ retransmission within 10 ms"
    );
    for &wr in &extra_p {
        assert_eq!(w.wc_status(wr), None, "still posted on the responder");
    }
    w.disconnect(c.passive).unwrap();
    let t_drep = w.now();
    w.check().unwrap();
    for wr in extra_p {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
    assert_orderly(&mut w, c.active, c.passive);
    assert!(time_of(&w, c.passive, E::Disconnected) < t_dreq.plus_nanos(MS));
    assert!(time_of(&w, c.active, E::Disconnected) >= t_drep);
    for e in [c.active, c.passive] {
        let d = time_of(&w, e, E::Disconnected);
        assert!(time_of(&w, e, E::TimewaitExit) >= d.plus_nanos(512 * MS));
    }
}

#[test]
fn simultaneous_disconnect_each_side_gets_one_disconnected_and_timewait_after_second_call() {
    let (mut w, c) = established();
    // Both call at the same virtual instant: the DREQs cross.
    assert_eq!(w.disconnect(c.active), Ok(()));
    assert_eq!(w.disconnect(c.passive), Ok(()));
    w.run_for(MS);
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::Disconnected), [0]);
        let own_dreq_cancelled = Some(IbCmState::DreqRcvd);
        assert_eq!(w.ib_cm_state(e.host, e.id), own_dreq_cancelled);
        assert_eq!(w.qp_state(e), Some(QpState::Err));
    }
    // No DREP and no TIMEWAIT_EXIT until each side calls again (cm-spec §4.5).
    w.run_for(60_000 * MS);
    assert_eq!(sent(&mut w, 0, DREP) + sent(&mut w, 1, DREP), 0);
    assert_eq!(
        (sent(&mut w, 0, DREQ), sent(&mut w, 1, DREQ)),
        (1, 1),
        "no retries"
    );
    for e in [c.active, c.passive] {
        assert_eq!(kinds(&w, e).last(), Some(&E::Disconnected));
    }
    assert_eq!(w.disconnect(c.active), Ok(()));
    assert_eq!(w.disconnect(c.passive), Ok(()));
    w.check().unwrap();
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::Disconnected), [0]);
        assert_eq!(sent(&mut w, e.host, DREP), 1);
        assert_eq!(statuses(&w, e, E::TimewaitExit), [0]);
    }
}

// =============================================================================================
// Unanswered disconnect: DISCONNECTED(-110) after the retry budget
// =============================================================================================

#[test]
fn unanswered_disconnect_peer_crashed_gives_disconnected_minus_110_after_retry_budget() {
    let (mut w, c) = established();
    let t0 = w.now();
    w.crash(1, None).unwrap();
    w.disconnect(c.active).unwrap();
    assert_dreq_timeout(&mut w, c.active, t0, DREQ_TIMEOUT_NS);
    w.check().unwrap();
    assert_eq!(statuses(&w, c.active, E::Disconnected), [-110]);
    assert_eq!(statuses(&w, c.active, E::TimewaitExit), [0]);
    let drops = w.dropped();
    assert_eq!(drops.len(), 16);
    assert!(drops
        .iter()
        .all(|d| (d.0, d.1.attr, d.2) == (0, DREQ, DropReason::DestinationCrashed)));
}

#[test]
fn unanswered_disconnect_peer_partitioned_gives_minus_110_then_peer_dreq_answered_from_timewait() {
    let (mut w, c) = established();
    let t0 = w.now();
    w.partition_one_way(0, 1, None);
    w.partition_one_way(1, 0, None);
    w.disconnect(c.active).unwrap();
    assert_dreq_timeout(&mut w, c.active, t0, DREQ_TIMEOUT_NS);
    assert!(!kinds(&w, c.passive).contains(&E::Disconnected));
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::Established));
    // Heal; the peer (which heard nothing) disconnects while the initiator is in TimeWait:
    // its DREQ is answered with a DREP from TIMEWAIT (cm-spec §3.3).
    w.heal();
    assert_eq!(w.disconnect(c.passive), Ok(()));
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    w.check().unwrap(); // healed: L1–L3 checked too
    assert_eq!(statuses(&w, c.active, E::Disconnected), [-110]);
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert_eq!(sent(&mut w, 0, DREP), 1);
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::TimewaitExit), [0]);
    }
}

#[test]
fn unanswered_disconnect_peer_alive_but_never_disconnecting_gives_minus_110_peer_one_disconnected()
{
    let (mut w, c) = established();
    let t0 = w.now();
    w.disconnect(c.active).unwrap();
    assert_dreq_timeout(&mut w, c.active, t0, DREQ_TIMEOUT_NS);
    w.run_to_quiescence();
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::DreqRcvd));
    assert_eq!(
        w.qp_state(c.passive),
        Some(QpState::Rts),
        "the lazy peer's QP"
    );
    let dups = w.host(1).unwrap().cm().engine().counters().rx_duplicates;
    assert_eq!(
        dups, 15,
        "the 15 DREQ retransmissions are dropped in DREQ_RCVD"
    );
    assert_eq!(sent(&mut w, 1, DREP), 0);
    assert!(!kinds(&w, c.passive).contains(&E::TimewaitExit));
    // The lazy application finally tears its verbs down (no CM call): the flush is checked.
    w.qp_to_err(c.passive).unwrap();
    w.check().unwrap();
    assert_eq!(statuses(&w, c.active, E::Disconnected), [-110]);
    assert_eq!(statuses(&w, c.active, E::TimewaitExit), [0]);
}

// =============================================================================================
// Races with connection setup
// =============================================================================================

#[test]
fn disconnect_during_connection_setup_passive_rep_sent_returns_0_then_established_and_torn_down() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    w.listen(1).unwrap();
    let a = w.connect(0, 1).unwrap();
    let ra = w.post_recvs(a, 2);
    let pid = w.wait_event(1, None, E::ConnectRequest).unwrap();
    let p = w.accept(1, pid).unwrap();
    let rp = w.post_recvs(p, 2);
    // The passive side gives up right after accepting (REP_SENT): QP → ERR, nothing sent.
    assert_eq!(w.ib_cm_state(1, p.id), Some(IbCmState::RepSent));
    assert_eq!(w.disconnect(p), Ok(()));
    assert_eq!(w.qp_state(p), Some(QpState::Err));
    // The REP already left: the active side completes the handshake, and the RTU makes the
    // passive IB CM ESTABLISHED (its QP stays in ERR).
    w.wait_event(0, Some(a.id), E::Established).unwrap();
    w.wait_event(1, Some(p.id), E::Established).unwrap();
    assert_eq!(w.qp_state(p), Some(QpState::Err));
    assert_eq!(sent(&mut w, 1, DREQ) + sent(&mut w, 1, DREP), 0);
    // The passive side's disconnect now starts the ordinary teardown.
    assert_eq!(w.disconnect(p), Ok(()));
    answer(&mut w, p, a);
    w.check().unwrap();
    assert_orderly(&mut w, p, a);
    for wr in [ra, rp].concat() {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn dreq_before_rtu_gives_passive_disconnected_without_established() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let c = establish_without_rtu(&mut w);
    let ra = w.post_recvs(c.active, 2);
    let rp = w.post_recvs(c.passive, 2);
    w.disconnect(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_orderly(&mut w, c.active, c.passive);
    assert_eq!(
        kinds(&w, c.passive),
        [E::ConnectRequest, E::Disconnected, E::TimewaitExit]
    );
    assert_eq!(
        sent(&mut w, 1, REP),
        1,
        "the DREQ cancelled the REP retransmission"
    );
    for wr in [ra, rp].concat() {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

// =============================================================================================
// rdma_destroy_id in every state the IB CM distinguishes: cm-spec §3.3
// =============================================================================================

#[test]
fn destroy_idle_and_listen_ids_sends_nothing() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let l = w.listen(1).unwrap();
    let a = w.resolve(0, 1).unwrap();
    let wrs = w.post_recvs(a, 2);
    w.destroy_id(1, l).unwrap();
    w.destroy(a).unwrap();
    assert_eq!(w.qp_state(a), Some(QpState::Init), "destroy leaves the QP");
    w.qp_to_err(a).unwrap();
    w.check().unwrap();
    assert_eq!(mads_on_wire(&mut w), 0);
    assert!(w.host(1).unwrap().cm().ids().is_empty());
    for wr in wrs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

/// Host 1 listens, host 0 connects; runs until host 1 has read the CONNECT_REQUEST (not
/// accepted). Returns the active end and the passive id.
fn requested(w: &mut World) -> (End, CmIdHandle) {
    w.listen(1).unwrap();
    let a = w.connect(0, 1).unwrap();
    w.post_recvs(a, 2);
    let pid = w.wait_event(1, None, E::ConnectRequest).unwrap();
    (a, pid)
}

/// The active id destroyed in `state` (REQ_SENT or MRA_REQ_RCVD) sends REJ 4 (TIMEOUT) whose
/// ARI is its own CA GUID; the passive id gets REJECTED(4).
fn assert_destroy_active_rejects_4(w: &mut World, a: End, pid: CmIdHandle) {
    w.destroy(a).unwrap();
    w.qp_to_err(a).unwrap();
    w.wait_event(1, Some(pid), E::Rejected).unwrap();
    w.destroy_id(1, pid).unwrap();
    w.check().unwrap();
    assert_eq!(rej_reasons(w, 0), [4]);
    let passive_events: Vec<_> = w.events_of(1, pid).iter().map(|e| (e.1, e.2)).collect();
    assert_eq!(passive_events, [(E::ConnectRequest, 0), (E::Rejected, 4)]);
    assert!(
        !kinds(w, a).contains(&E::Rejected),
        "a destroyed id gets no events"
    );
    // The ARI is not in the history's summary of a MAD: decode the captured REJ.
    let guid = w.config().cm_config(0, 0).ca_guid;
    let rejs: Vec<CmMessage> = w
        .captures()
        .iter()
        .filter(|c| c.flow.src.ip() == host_ip(0))
        .filter_map(|c| {
            let p = rnic_sim::roce::decode_bytes(&c.bytes, &c.flow, false).ok()?;
            let (_, msg) = cm_core::wire::decode(&p.payload).ok()?;
            matches!(msg, CmMessage::Rej(_)).then_some(msg)
        })
        .collect();
    let [CmMessage::Rej(r)] = &rejs[..] else {
        panic!("one REJ expected: {rejs:?}")
    };
    assert_eq!(r.ari, guid.to_be_bytes());
}

#[test]
fn destroy_req_sent_sends_rej_4_with_guid_and_passive_is_rejected() {
    let mut w = World::new(WorldConfig {
        capture: true,
        ..WorldConfig::two_hosts(1)
    })
    .unwrap();
    let (a, pid) = requested(&mut w);
    assert_eq!(w.ib_cm_state(0, a.id), Some(IbCmState::ReqSent));
    assert_destroy_active_rejects_4(&mut w, a, pid);
}

#[test]
fn destroy_mra_req_rcvd_sends_rej_4_and_passive_is_rejected() {
    let mut w = World::new(WorldConfig {
        capture: true,
        ..WorldConfig::two_hosts(1)
    })
    .unwrap();
    let (a, pid) = requested(&mut w);
    // The passive application sits on the request: the REQ retransmission (4608 ms) meets
    // MRA_REQ_SENT and is answered with an MRA.
    w.run_for(4700 * MS);
    assert_eq!(sent(&mut w, 0, REQ), 2);
    assert_eq!(sent(&mut w, 1, MRA), 1);
    assert_eq!(w.ib_cm_state(0, a.id), Some(IbCmState::MraReqRcvd));
    assert_destroy_active_rejects_4(&mut w, a, pid);
}

#[test]
fn destroy_passive_before_accept_mra_req_sent_sends_rej_28_active_rejected() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let (a, pid) = requested(&mut w);
    assert_eq!(w.ib_cm_state(1, pid), Some(IbCmState::MraReqSent));
    w.destroy_id(1, pid).unwrap();
    w.wait_event(0, Some(a.id), E::Rejected).unwrap();
    assert_eq!(statuses(&w, a, E::Rejected), [28]);
    assert_eq!(w.qp_state(a), Some(QpState::Err), "REJ moves the QP to ERR");
    assert_eq!(w.ib_cm_state(0, a.id), Some(IbCmState::Idle));
    w.check().unwrap();
    assert_eq!(rej_reasons(&mut w, 1), [28]);
    assert!(!kinds(&w, a).contains(&E::Disconnected));
}

#[test]
fn destroy_rep_sent_sends_rej_28_established_active_gets_rejected_not_disconnected() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let c = establish_without_rtu(&mut w);
    let ra = w.post_recvs(c.active, 2);
    let rp = w.post_recvs(c.passive, 2);
    w.destroy(c.passive).unwrap();
    assert_eq!(
        w.qp_state(c.passive),
        Some(QpState::Rts),
        "destroy leaves the QP"
    );
    w.qp_to_err(c.passive).unwrap();
    w.wait_event(0, Some(c.active.id), E::Rejected).unwrap();
    assert_eq!(statuses(&w, c.active, E::Rejected), [28]);
    assert_eq!(
        w.qp_state(c.active),
        Some(QpState::Err),
        "REJ moves the QP to ERR"
    );
    assert_eq!(w.ib_cm_state(0, c.active.id), Some(IbCmState::Timewait));
    w.check().unwrap();
    assert_eq!(rej_reasons(&mut w, 1), [28]);
    assert_eq!(sent(&mut w, 1, REP), 1, "REP retransmission cancelled");
    // REJECTED while ESTABLISHED: the rdma_cm id stays in CONNECT, so no DISCONNECTED and no
    // TIMEWAIT_EXIT (cm-spec §4.5).
    assert_eq!(kinds(&w, c.active).last(), Some(&E::Rejected));
    assert!(!kinds(&w, c.active).contains(&E::Disconnected));
    for wr in [ra, rp].concat() {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn destroy_established_sends_one_dreq_without_retries_peer_disconnected() {
    let (mut w, c) = established();
    w.destroy(c.active).unwrap();
    assert_eq!(
        w.qp_state(c.active),
        Some(QpState::Rts),
        "destroy leaves the QP"
    );
    w.qp_to_err(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_eq!(sent(&mut w, 0, DREQ), 1, "one DREQ, no retransmission");
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert_eq!(sent(&mut w, 1, DREP), 1);
    assert_eq!(statuses(&w, c.passive, E::TimewaitExit), [0]);
    assert_eq!(
        kinds(&w, c.active),
        [E::AddrResolved, E::RouteResolved, E::Established]
    );
}

#[test]
fn destroy_dreq_sent_sends_nothing_more_peer_disconnected() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    w.destroy(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
    assert_eq!(sent_attrs(&mut w, 0), [REQ, RTU, DREQ]);
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert!(!kinds(&w, c.active).contains(&E::Disconnected));
    assert_eq!(statuses(&w, c.passive, E::TimewaitExit), [0]);
}

#[test]
fn destroy_dreq_rcvd_answers_with_drep_initiator_gets_status_0() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::DreqRcvd));
    w.destroy(c.passive).unwrap();
    assert_eq!(
        w.qp_state(c.passive),
        Some(QpState::Rts),
        "destroy leaves the QP"
    );
    w.qp_to_err(c.passive).unwrap();
    w.check().unwrap();
    assert_eq!(sent(&mut w, 1, DREP), 1);
    assert_eq!(statuses(&w, c.active, E::Disconnected), [0]);
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert_eq!(statuses(&w, c.active, E::TimewaitExit), [0]);
    assert!(!kinds(&w, c.passive).contains(&E::TimewaitExit));
}

#[test]
fn destroy_timewait_sends_nothing_and_suppresses_timewait_exit() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    answer(&mut w, c.active, c.passive);
    assert_eq!(w.ib_cm_state(1, c.passive.id), Some(IbCmState::Timewait));
    let before = sent_attrs(&mut w, 1);
    w.destroy(c.passive).unwrap();
    w.check().unwrap();
    assert_eq!(sent_attrs(&mut w, 1), before);
    assert_eq!(statuses(&w, c.active, E::Disconnected), [0]);
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert_eq!(statuses(&w, c.active, E::TimewaitExit), [0]);
    assert!(!kinds(&w, c.passive).contains(&E::TimewaitExit));
}

// =============================================================================================
// Lost DREQ, lost DREP
// =============================================================================================

/// The module docs' example: the first DREQ is lost, its retransmission one DREQ timeout
/// (4608 ms) later is answered normally.
#[test]
fn lost_dreq_is_retransmitted_after_the_dreq_timeout() {
    let (mut w, c) = established();
    let t0 = w.now();
    w.partition_one_way(0, 1, Some(MS)); // drop what host 0 sends in the next 1 ms
    w.disconnect(c.active).unwrap(); // its DREQ is lost ...
    answer(&mut w, c.active, c.passive); // ... resent 4608 ms later: host 1 answers
    assert_eq!(sent(&mut w, 0, DREQ), 2);
    let one_way = 10_000; // the fabric's default delay, 10 µs
    let t = time_of(&w, c.passive, E::Disconnected);
    assert_eq!(t, t0.plus_nanos(DREQ_TIMEOUT_NS + one_way));
    w.check().unwrap();
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::Disconnected), [0]);
        assert_eq!(statuses(&w, e, E::TimewaitExit), [0]);
    }
}

/// `init` disconnects; the peer answers, and its DREP is dropped by a one-way partition
/// peer → init from the instant it is sent until 1 ms later.
fn disconnect_losing_the_drep(w: &mut World, init: End, peer: End) {
    w.disconnect(init).unwrap();
    w.wait_event(peer.host, Some(peer.id), E::Disconnected)
        .unwrap();
    w.partition_one_way(peer.host, init.host, Some(MS));
    answer(w, init, peer);
    w.run_for(MS);
    let dropped: Vec<_> = w.dropped().iter().map(|d| (d.0, d.1.attr, d.2)).collect();
    assert_eq!(dropped, [(peer.host, DREP, DropReason::Partitioned)]);
}

#[test]
fn lost_drep_duplicate_dreq_is_answered_from_timewait_initiator_gets_status_0() {
    let mut w = World::new(WorldConfig::two_hosts(1).fast()).unwrap();
    let c = w.establish(0, 1).unwrap();
    traffic(&mut w, c);
    let t0 = w.now();
    disconnect_losing_the_drep(&mut w, c.active, c.passive);
    // The DREQ retransmission (12 ms) lands in the peer's TimeWait (128 ms): DREP again.
    w.wait_event(0, Some(c.active.id), E::Disconnected).unwrap();
    assert_eq!(statuses(&w, c.active, E::Disconnected), [0]);
    let one_way = 10_000; // the fabric's default delay, 10 µs
    assert_eq!(w.now(), t0.plus_nanos(FAST_DREQ_TIMEOUT_NS + 2 * one_way));
    w.check().unwrap();
    assert_eq!(sent(&mut w, 0, DREQ), 2);
    assert_eq!(sent(&mut w, 1, DREP), 2);
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::Disconnected), [0]);
        assert_eq!(statuses(&w, e, E::TimewaitExit), [0]);
    }
}

/// Linux (docs/cm-semantics.md, "Finding"): the DREQ retransmission (4608 ms) comes after the
/// peer's TimeWait (512 ms); the peer's IDLE id still matches it and drops it.
#[test]
fn lost_drep_with_default_timers_dreq_retransmission_after_timewait_is_dropped_initiator_times_out()
{
    let (mut w, c) = established();
    let t0 = w.now();
    disconnect_losing_the_drep(&mut w, c.active, c.passive);
    assert_dreq_timeout(&mut w, c.active, t0, DREQ_TIMEOUT_NS);
    w.check().unwrap();
    assert_eq!(statuses(&w, c.active, E::Disconnected), [-110]);
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert_eq!(sent(&mut w, 1, DREP), 1);
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::TimewaitExit), [0]);
    }
}

// =============================================================================================
// Connection setup rejections
// =============================================================================================

#[test]
fn stale_connection_req_reusing_a_live_qpn_after_restart_gets_rej_10_and_old_connection_dreq() {
    let (mut w, c) = established();
    // Host 0 crashes and comes back 1 ms later with amnesia: same CA GUID and first QPN, new
    // comm IDs. Host 1's connection is still ESTABLISHED.
    w.crash(0, Some(MS)).unwrap();
    w.run_for(MS);
    let a2 = w.connect(0, 1).unwrap();
    assert_eq!(a2.qp.qp_num, c.active.qp.qp_num, "QPN reused");
    let ra2 = w.post_recvs(a2, 2);
    w.wait_event(0, Some(a2.id), E::Rejected).unwrap();
    assert_eq!(statuses(&w, a2, E::Rejected), [10]);
    assert_eq!(w.qp_state(a2), Some(QpState::Err));
    // Host 1 rejected the REQ (10) and sent a DREQ on the old connection, which the rebooted
    // host answers as unknown: the old id gets DISCONNECTED(0); its app disconnects.
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    assert_eq!(w.disconnect(c.passive), Ok(()));
    w.check().unwrap();
    assert_eq!(rej_reasons(&mut w, 1), [10]);
    assert_eq!(sent(&mut w, 1, DREQ), 1);
    assert_eq!(sent_attrs(&mut w, 0), [REQ, DREP]);
    let counters = |h: usize| *w.host(h).unwrap().cm().engine().counters();
    assert_eq!(counters(0).rx_dreq_unknown, 1);
    assert_eq!(counters(1).rx_stale, 1);
    assert_eq!(statuses(&w, c.passive, E::Disconnected), [0]);
    assert_eq!(statuses(&w, c.passive, E::TimewaitExit), [0]);
    assert!(!kinds(&w, a2).contains(&E::Disconnected));
    assert!(!kinds(&w, a2).contains(&E::Established));
    for wr in ra2 {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn rej_8_when_nobody_listens_on_the_service_id() {
    let mut w = World::new(WorldConfig::two_hosts(1)).unwrap();
    let a = w.connect(0, 1).unwrap();
    let wrs = w.post_recvs(a, 3);
    w.wait_event(0, Some(a.id), E::Rejected).unwrap();
    w.check().unwrap();
    assert_eq!(statuses(&w, a, E::Rejected), [8]);
    assert_eq!(rej_reasons(&mut w, 1), [8]);
    assert_eq!(sent_attrs(&mut w, 0), [REQ]);
    assert_eq!(w.qp_state(a), Some(QpState::Err));
    assert_eq!(w.ib_cm_state(0, a.id), Some(IbCmState::Idle));
    assert_eq!(
        kinds(&w, a),
        [E::AddrResolved, E::RouteResolved, E::Rejected]
    );
    for wr in wrs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

// =============================================================================================
// Behaviour choices where real stacks differ (TESTING.md)
// =============================================================================================

/// **Choice: IB CM semantics, not iWARP.** A second, a late and a simultaneous
/// `rdma_disconnect` all return 0: on IB/RoCE, Linux's `rdma_disconnect` tries
/// `ib_send_cm_dreq`, then `ib_send_cm_drep`, and ignores both failures (cm-spec §4.4 [cma.c]).
/// Where stacks differ: on iWARP it returns what `iw_cm_disconnect` returns, so the same calls
/// can fail there.
#[test]
fn choice_ib_cm_second_late_or_simultaneous_disconnect_returns_0() {
    let (mut w, c) = established();
    // Simultaneous: both ends in the same virtual instant (the DREQs cross) ...
    assert_eq!(w.disconnect(c.active), Ok(()));
    assert_eq!(w.disconnect(c.passive), Ok(()));
    // ... second: the own DREQ is still outstanding.
    assert_eq!(w.disconnect(c.active), Ok(()));
    w.run_for(MS);
    // Late: after DISCONNECTED (this call answers the peer's DREQ with a DREP) ...
    for e in [c.active, c.passive] {
        assert_eq!(statuses(&w, e, E::Disconnected), [0]);
        assert_eq!(w.disconnect(e), Ok(()));
    }
    // ... and after TIMEWAIT_EXIT.
    w.run_to_quiescence();
    for e in [c.active, c.passive] {
        assert_eq!(kinds(&w, e).last(), Some(&E::TimewaitExit));
        assert_eq!(w.disconnect(e), Ok(()));
    }
    w.check().unwrap();
    assert_eq!((sent(&mut w, 0, DREQ), sent(&mut w, 1, DREQ)), (1, 1));
}

/// **Choice: a received DREQ raises DISCONNECTED but does not touch the QP** (as librdmacm and
/// the kernel's cma, cm-spec §4.2): the QP stays in RTS, receives posted to it stay posted, until
/// that side calls `rdma_disconnect`, which moves it to ERR (flushing them) and answers with the
/// DREP. Where stacks differ: an application that waits for its receives to flush to learn of
/// the peer's disconnect waits forever on IB; on iWARP the connection is the QP's and the peer's
/// close moves the QP by itself.
#[test]
fn choice_dreq_raises_disconnected_qp_untouched_until_disconnect() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    assert_eq!(w.qp_state(c.passive), Some(QpState::Rts));
    let recvs = w.post_recvs(c.passive, 2);
    w.run_for(100 * MS);
    assert_eq!(w.qp_state(c.passive), Some(QpState::Rts));
    assert_eq!(
        w.wc_status(recvs[0]),
        None,
        "not flushed: the QP is untouched"
    );
    assert_eq!(sent(&mut w, 1, DREP), 0);
    w.disconnect(c.passive).unwrap();
    assert_eq!(w.qp_state(c.passive), Some(QpState::Err));
    assert_eq!(sent(&mut w, 1, DREP), 1);
    w.check().unwrap();
    for wr in recvs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

/// The same choice, the other way out: the side that got DISCONNECTED destroys its id (which
/// answers with the DREP, cm-spec §4.5, and still leaves the QP alone) and then its QP
/// (`ibv_destroy_qp`: the QP goes to ERR, what is posted is flushed).
#[test]
fn choice_dreq_raises_disconnected_qp_untouched_until_the_qp_is_destroyed() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    let recvs = w.post_recvs(c.passive, 2);
    w.destroy(c.passive).unwrap();
    assert_eq!(sent(&mut w, 1, DREP), 1);
    assert_eq!(
        w.qp_state(c.passive),
        Some(QpState::Rts),
        "destroy_id leaves the QP"
    );
    w.qp_to_err(c.passive).unwrap(); // what ibv_destroy_qp does to what is posted
    w.check().unwrap();
    assert_eq!(statuses(&w, c.active, E::Disconnected), [0]);
    for wr in recvs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr));
    }
}

/// **Choice: posts to a QP in ERR are accepted and flushed** (as rxe; the IBTA has a QP in the
/// Error state complete new work requests with WR_FLUSH_ERR, docs/semantics-verbs.md). Every
/// operation is accepted by the post and completes with WR_FLUSH_ERR. Where stacks differ:
/// providers are not uniform here, and some fail such a post with an errno; portable code
/// handles both.
#[test]
fn choice_posts_to_a_qp_in_err_are_accepted_and_flushed() {
    let (mut w, c) = established();
    w.disconnect(c.active).unwrap();
    assert_eq!(w.qp_state(c.active), Some(QpState::Err));
    let mut wrs = Vec::new();
    for op in [Op::Send, Op::Write, Op::Read, Op::Recv] {
        let posted = w.post(c.active, op, 2);
        assert_eq!(posted.len(), 2, "{op:?} accepted in ERR");
        wrs.extend(posted);
    }
    w.run_for(MS);
    for &wr in &wrs {
        assert_eq!(w.wc_status(wr), Some(WcStatus::WrFlushErr), "WR {wr}");
    }
    answer(&mut w, c.active, c.passive);
    w.check().unwrap();
}

/// **Choice: a CQ overrun raises CQ_ERR and moves the overflowing QP to ERR** (as rdmavt;
/// docs/semantics-verbs.md "CQ overrun"). Host 1's receive CQ holds 4 completions; 8 SENDs
/// arrive in one instant: 4 receives complete, the 5th completion does not fit, the async event
/// CQ_ERR is raised and host 1's QP enters ERR. The message whose completion was lost is not
/// acknowledged, so the sender's 5th SEND ends in RETRY_EXC_ERR and the rest are flushed. Where
/// stacks differ: rxe only fails the completion and leaves the QP alone; the IBTA leaves the QP
/// state unspecified.
#[test]
fn choice_cq_overrun_raises_cq_err_and_moves_the_overflowing_qp_to_err() {
    let mut w = World::new(WorldConfig {
        cq_entries: 4,
        ..WorldConfig::two_hosts(1)
    })
    .unwrap();
    let c = w.establish(0, 1).unwrap();
    let recvs = w.post_recvs(c.passive, 8);
    let sends = w.post(c.active, Op::Send, 8);
    w.run_for(MS);
    let cq_errs: Vec<_> = w
        .history()
        .of_host(1)
        .filter(|e| matches!(e.rec, Record::CqErr { .. }))
        .map(|e| e.rec)
        .collect();
    assert_eq!(cq_errs, [Record::CqErr { queue: Queue::Recv }]);
    assert_eq!(w.qp_state(c.passive), Some(QpState::Err));
    for &wr in &recvs[..4] {
        assert_eq!(w.wc_status(wr), Some(WcStatus::Success));
    }
    w.check().unwrap(); // the completions lost to the overrun are exempt from S2
    for &wr in &recvs[4..] {
        assert_eq!(w.wc_status(wr), None, "lost with the overrun CQ");
    }
    let status: Vec<_> = sends.iter().map(|&wr| w.wc_status(wr).unwrap()).collect();
    assert_eq!(status[..4], [WcStatus::Success; 4]);
    assert_eq!(status[4], WcStatus::RetryExcErr);
    assert_eq!(status[5..], [WcStatus::WrFlushErr; 3]);
}

/// **Choice: destroying a CM id with un-acked events returns EBUSY and logs a warning naming
/// the event.** Real librdmacm's `rdma_destroy_id` blocks until every event it handed out for
/// the id is acked, and deadlocks when the same thread holds the event (cm-spec §4.6); the
/// testbed returns EBUSY and warns through `tracing`, so the bug is found in a test. Once the
/// event is acked, the same call succeeds.
#[test]
fn choice_destroy_with_an_unacked_event_returns_ebusy_and_warns_naming_the_event() {
    let (mut w, c) = established();
    w.set_event_mode(1, EventMode::AckAfter(MS)); // host 1 acks each event 1 ms after reading it
    w.disconnect(c.active).unwrap();
    w.wait_event(1, Some(c.passive.id), E::Disconnected)
        .unwrap();
    let (r, warnings) = with_warnings(|| w.destroy(c.passive));
    let err = r.unwrap_err();
    assert_eq!(err.errno, Errno::EBUSY);
    assert!(err.to_string().contains("Disconnected"), "{err}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("rdma_destroy_id"), "{warnings:?}");
    assert!(warnings[0].contains("Disconnected"), "{warnings:?}");
    w.run_for(MS); // the ack
    assert_eq!(w.destroy(c.passive), Ok(()));
    w.qp_to_err(c.passive).unwrap();
    w.check().unwrap();
    assert_eq!(sent(&mut w, 1, DREP), 1, "the destroy answered the DREQ");
    assert_eq!(statuses(&w, c.active, E::Disconnected), [0]);
}

/// Runs `f` with a `tracing` subscriber on this thread that keeps the WARN and ERROR events;
/// returns `f`'s result and those events' fields, one string each.
fn with_warnings<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record as SpanRecord};
    use tracing::{Event, Level, Metadata};

    struct Warnings(Arc<Mutex<Vec<String>>>);
    struct Fields(String);
    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0 += &format!("{}={value:?} ", field.name());
        }
    }
    impl tracing::Subscriber for Warnings {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            *m.level() <= Level::WARN
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &SpanRecord<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            let mut fields = Fields(String::new());
            e.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    let seen = Arc::new(Mutex::new(Vec::new()));
    let r = tracing::subscriber::with_default(Warnings(seen.clone()), f);
    let seen = seen.lock().unwrap().clone();
    (r, seen)
}

/// The TimeWait the World recorded with `e`'s DISCONNECTED (`ms(av.timeout)`, cm-spec §3.2).
fn timewait_ns(w: &World, e: End) -> u64 {
    w.history()
        .of_host(e.host)
        .find_map(|x| match x.rec {
            Record::Event {
                id,
                event: E::Disconnected,
                timewait_ns,
                ..
            } if id == e.id.0 => Some(timewait_ns),
            _ => None,
        })
        .unwrap()
}

/// An initiator whose peer never answers (the peer's application reads DISCONNECTED and does
/// nothing): the DREQ schedule of [`assert_dreq_timeout`] with `timeout_ns`, then TimeWait of
/// `timewait_ns`, then TIMEWAIT_EXIT.
fn assert_unanswered_dreq_schedule(mut w: World, timeout_ns: u64, timewait: u64) {
    let c = w.establish(0, 1).unwrap();
    let t0 = w.now();
    w.disconnect(c.active).unwrap();
    assert_dreq_timeout(&mut w, c.active, t0, timeout_ns);
    w.run_to_quiescence();
    assert_eq!(timewait_ns(&w, c.active), timewait);
    let exit = time_of(&w, c.active, E::TimewaitExit);
    assert!(exit >= time_of(&w, c.active, E::Disconnected).plus_nanos(timewait));
    w.qp_to_err(c.passive).unwrap(); // the lazy peer's application exits
    w.check().unwrap();
}

/// **Choice: the default timers are Linux's** (cm-spec §3.2, docs/cm-semantics.md "Timers"):
/// with the default configuration an unanswered DREQ is sent 16 times (1 + 15 retries),
/// 4608 ms apart (2·ms(PLT 16) + ms(20)), and the initiator reads DISCONNECTED(-110) exactly
/// 16 × 4608 ms = 73.728 s after its `rdma_disconnect`; TimeWait is ms(17) = 512 ms. Virtual
/// time makes the 74 s cost a few events. Where stacks differ: the constants change between
/// kernels (PLT 18 in older ones; response timeout 18 and exponential backoff in newer series).
#[test]
fn choice_default_timers_are_linux_unanswered_dreq_gives_minus_110_after_16_dreqs_4608_ms_apart() {
    let w = World::new(WorldConfig::two_hosts(1)).unwrap();
    assert_unanswered_dreq_schedule(w, DREQ_TIMEOUT_NS, 512 * MS);
}

/// **Choice: every timer is configurable** (`cm_core::engine::CmConfig`: packet lifetime,
/// response timeout, retries, backoff). [`WorldConfig::fast`] sets PLT 10 and response timeout
/// 10: the same unanswered DREQ now gives up after 16 × 12 ms and TimeWait is ms(15) = 128 ms.
#[test]
fn choice_every_timer_is_configurable_short_timers_give_the_same_schedule_in_12_ms_steps() {
    let w = World::new(WorldConfig::two_hosts(1).fast()).unwrap();
    assert_unanswered_dreq_schedule(w, FAST_DREQ_TIMEOUT_NS, 128 * MS);
}

// =============================================================================================
// Regressions found while writing these tests
// =============================================================================================

/// Regression: the fabric trace's payload digest used to be a CRC-32 of the RoCEv2 UDP payload,
/// which ends with its own ICRC; CRC-32 being affine, that digest depended only on the flow, the
/// length and the masked fields, so the REQ and the RTU (both 280 bytes, 10.0.0.1 → 10.0.0.2)
/// got the same digest and trace hashes could not see payload divergence.
#[test]
fn fabric_trace_digest_tells_different_payloads_apart() {
    let (mut w, _) = established();
    let mads: Vec<u64> = w
        .sim()
        .fabric
        .trace()
        .iter()
        .filter(|ev| ev.src.ip() == host_ip(0))
        .filter_map(|ev| match ev.kind {
            FabricEventKind::Sent { len: 280, digest } => Some(digest),
            _ => None,
        })
        .collect();
    assert_eq!(sent_attrs(&mut w, 0), [REQ, RTU]);
    assert_eq!(mads.len(), 2);
    assert_ne!(mads[0], mads[1], "REQ and RTU have the same digest");
    w.check().unwrap();
}
