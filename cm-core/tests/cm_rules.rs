//! rdma_cm / IB CM rules of cm-spec §3–§4, one test each, two `RdmaCm`s over the harness.

mod harness;

use cm_core::api::{CmEventType as E, RdmaCmState};
use cm_core::engine::IbCmState;
use cm_core::wire::{
    CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ, CM_REJ_ATTR_ID as REJ, CM_REQ_ATTR_ID as REQ,
    CM_RTU_ATTR_ID as RTU,
};
use harness::*;
use std::net::{IpAddr, SocketAddr};
use verbs_core::{Device, Errno, PdHandle, QpState, SimTime};

const TIMEWAIT_MS: u64 = 512;
/// Active DREQ timeout 2·256 + 4096 ms, 16 sends (cm-spec §3.2).
const DREQ_GIVE_UP_MS: u64 = 16 * 4608;

fn ms(t: SimTime) -> u64 {
    t.as_nanos() / 1_000_000
}

fn assert_one_disconnected(w: &World, h: usize) {
    assert_eq!(
        w.events_of(h, E::Disconnected).len(),
        1,
        "host {h}: {:?}",
        w.types(h)
    );
}

#[test]
fn handshake_establishes_both_sides_with_rts_qps_and_crossed_psns() {
    let (w, a, b) = World::established();
    let (qa, qb) = (w.hosts[0].cm.qp(a).unwrap(), w.hosts[1].cm.qp(b).unwrap());
    let (aa, ab) = (w.hosts[0].dev.qp_attr(qa), w.hosts[1].dev.qp_attr(qb));
    assert_eq!((aa.qp_state, ab.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!(aa.dest_qp_num, qb.qp_num);
    assert_eq!(ab.dest_qp_num, qa.qp_num);
    assert_eq!(aa.sq_psn, ab.rq_psn);
    assert_eq!(ab.sq_psn, aa.rq_psn);
    assert_eq!(aa.timeout, 17);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::Established));
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::Established));
    let req = &w.events_of(1, E::ConnectRequest)[0].1;
    assert_eq!(&req.param.private_data[..5], b"hello");
    assert_eq!(req.param.private_data.len(), 56);
    assert_eq!(
        w.types(0),
        [E::AddrResolved, E::RouteResolved, E::Established]
    );
    assert_eq!(w.types(1), [E::ConnectRequest, E::Established]);
}

#[test]
fn normal_disconnect_initiator_gets_disconnected_on_drep_responder_qp_untouched() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    assert_eq!(w.qp_state(0, a), QpState::Err);
    assert!(w.run_until(1, E::Disconnected));
    // responder: DISCONNECTED on DREQ, QP still RTS, initiator still waiting
    assert_eq!(w.qp_state(1, b), QpState::Rts);
    assert!(!w.has(0, E::Disconnected));
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::DreqRcvd));
    w.disconnect(1, b).unwrap();
    assert_eq!(w.qp_state(1, b), QpState::Err);
    w.run();
    assert_eq!(w.events_of(0, E::Disconnected)[0].1.status, 0);
    assert_one_disconnected(&w, 0);
    assert_one_disconnected(&w, 1);
    assert_eq!(w.sent(0, DREQ), 1);
    assert_eq!(w.sent(1, DREP), 1);
    for h in 0..2 {
        assert_eq!(w.events_of(h, E::TimewaitExit).len(), 1);
    }
}

#[test]
fn closing_the_cm_after_a_dreq_sends_the_drep_even_with_unacked_events() {
    // The passive side reads DISCONNECTED, keeps it un-acked, and its process exits: the
    // kernel (ucma_close) destroys the id, which answers the DREQ, so the initiator gets
    // DISCONNECTED at once instead of after its DREQ retries.
    let (mut w, a, b) = World::established();
    w.hosts[1].auto_ack = false;
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    assert_eq!(w.destroy(1, b).unwrap_err().errno, Errno::EBUSY);
    let now = w.now;
    let h = &mut w.hosts[1];
    let live = h.cm.ids().len(); // the listener and the passive id
    assert_eq!(live, 2);
    assert_eq!(h.cm.close(&mut h.dev, now), live);
    assert!(h.cm.ids().is_empty());
    w.collect();
    assert!(w.run_until(0, E::Disconnected));
    assert_eq!(w.events_of(0, E::Disconnected)[0].1.status, 0);
    assert_eq!(w.sent(1, DREP), 1);
}

#[test]
fn timewait_exit_follows_disconnected_after_the_512_ms_delay() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    w.disconnect(1, b).unwrap();
    w.run();
    for h in 0..2 {
        let d = w.events_of(h, E::Disconnected)[0].0;
        let x = w.events_of(h, E::TimewaitExit)[0].0;
        assert!(x > d);
        assert!(ms(x) - ms(d) >= TIMEWAIT_MS, "host {h}: {d} → {x}");
        assert_eq!(*w.types(h).last().unwrap(), E::TimewaitExit);
    }
    assert_eq!(w.hosts[0].cm.state(a), Some(RdmaCmState::Disconnect));
}

#[test]
fn simultaneous_disconnect_each_side_gets_one_disconnected_and_answers_with_drep() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    w.disconnect(1, b).unwrap();
    w.run_for_ms(1);
    for (h, id) in [(0, a), (1, b)] {
        assert_one_disconnected(&w, h);
        assert_eq!(w.hosts[h].cm.ib_cm_state(id), Some(IbCmState::DreqRcvd));
    }
    // no DREP until the apps call disconnect again; then both TimeWait
    assert_eq!(w.sent(0, DREP) + w.sent(1, DREP), 0);
    w.disconnect(0, a).unwrap();
    w.disconnect(1, b).unwrap();
    w.run();
    for h in 0..2 {
        assert_one_disconnected(&w, h);
        assert_eq!(w.events_of(h, E::TimewaitExit).len(), 1);
    }
    // each side's DREQ was cancelled: sent once
    assert_eq!((w.sent(0, DREQ), w.sent(1, DREQ)), (1, 1));
}

#[test]
fn unanswered_disconnect_to_crashed_peer_gives_minus_110_after_retry_budget() {
    let (mut w, a, _b) = World::established();
    w.hosts[1].crashed = true;
    let t0 = w.now;
    w.disconnect(0, a).unwrap();
    w.run();
    let d = w.events_of(0, E::Disconnected);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].1.status, -110);
    assert_eq!(ms(d[0].0) - ms(t0), DREQ_GIVE_UP_MS);
    assert_eq!(w.sent(0, DREQ), 16);
    assert_eq!(w.events_of(0, E::TimewaitExit).len(), 1);
}

#[test]
fn peer_alive_but_never_disconnecting_gives_minus_110_and_peer_one_disconnected() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    w.run();
    assert_eq!(w.events_of(0, E::Disconnected)[0].1.status, -110);
    assert_one_disconnected(&w, 0);
    assert_one_disconnected(&w, 1);
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::DreqRcvd));
    assert_eq!(w.qp_state(1, b), QpState::Rts);
    assert!(w.hosts[1].cm.engine().counters().rx_duplicates >= 15);
    assert!(!w.has(1, E::TimewaitExit));
}

/// Short timers so the DREQ retransmission (12 ms) lands inside the peer's TimeWait (128 ms).
fn fast_world() -> World {
    let c0 = cm_core::engine::CmConfig {
        packet_life_time: 10,
        cm_response_timeout: 10,
        ..cfg(0, 7)
    };
    let mut w = World::with_cfgs(c0, cfg(1, 8));
    w.listen();
    let a = w.active_id();
    w.connect(a);
    assert!(w.run_until(1, E::ConnectRequest));
    w.accept_last();
    assert!(w.run_until(1, E::Established));
    w
}

#[test]
fn lost_drep_with_default_timers_dup_dreq_after_timewait_is_dropped_initiator_times_out() {
    // Linux: after TimeWait the id is IDLE with the same IDs, so the DREQ retransmission
    // (4608 ms) matches it and is dropped; the initiator ends with -110 (docs/cm-semantics.md).
    let (mut w, a, b) = World::established();
    w.fault = Box::new(|s| {
        if s.attr_id == DREP {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    w.disconnect(1, b).unwrap();
    w.run();
    assert_eq!(w.events_of(0, E::Disconnected)[0].1.status, -110);
    assert_one_disconnected(&w, 0);
    assert_one_disconnected(&w, 1);
}

#[test]
fn lost_drep_duplicate_dreq_is_answered_from_timewait() {
    let mut w = fast_world();
    let a = w.hosts[0].cm.ids()[0];
    let b = w.events_of(1, E::ConnectRequest)[0].1.id;
    let mut dropped = false;
    w.fault = Box::new(move |s| {
        if s.attr_id == DREP && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    w.disconnect(1, b).unwrap();
    assert!(w.run_until(0, E::Disconnected));
    assert_eq!(w.events_of(0, E::Disconnected)[0].1.status, 0);
    assert_eq!(w.sent(0, DREQ), 2);
    assert_eq!(w.sent(1, DREP), 2);
    w.run();
    assert_one_disconnected(&w, 0);
    assert_one_disconnected(&w, 1);
}

#[test]
fn dreq_before_rtu_gives_passive_disconnected_without_established() {
    let mut w = World::new();
    w.listen();
    w.fault = Box::new(|s| {
        if s.attr_id == RTU {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let a = w.active_id();
    w.connect(a);
    assert!(w.run_until(1, E::ConnectRequest));
    let b = w.accept_last();
    assert!(w.run_until(0, E::Established));
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    assert!(!w.has(1, E::Established));
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::DreqRcvd));
    w.disconnect(1, b).unwrap();
    w.run();
    assert_one_disconnected(&w, 0);
    assert_one_disconnected(&w, 1);
}

// ---- §4.4 table, one row each ----

#[test]
fn disconnect_row_established_sends_dreq_returns_0() {
    let (mut w, _a, b) = World::established();
    assert_eq!(w.disconnect(1, b), Ok(()));
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::DreqSent));
    assert_eq!(w.sent(1, DREQ), 1);
}

#[test]
fn disconnect_row_after_peer_dreq_sends_drep_enters_timewait() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    assert_eq!(w.disconnect(1, b), Ok(()));
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::Timewait));
    assert_eq!(w.sent(1, DREP), 1);
}

#[test]
fn disconnect_row_second_call_while_dreq_outstanding_returns_0_sends_nothing() {
    let (mut w, a, _b) = World::established();
    w.disconnect(0, a).unwrap();
    assert_eq!(w.disconnect(0, a), Ok(()));
    assert_eq!(w.sent(0, DREQ), 1);
    assert_eq!(w.qp_state(0, a), QpState::Err);
}

#[test]
fn disconnect_row_after_disconnected_in_timewait_returns_0_sends_nothing() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    w.disconnect(1, b).unwrap();
    assert!(w.run_until(0, E::Disconnected));
    let before = w.wire.len();
    assert_eq!(w.disconnect(0, a), Ok(()));
    assert_eq!(w.disconnect(1, b), Ok(()));
    w.run();
    assert_eq!(w.wire.len(), before);
    // and after TIMEWAIT_EXIT too
    assert_eq!(w.disconnect(0, a), Ok(()));
    assert_one_disconnected(&w, 0);
}

#[test]
fn disconnect_row_never_connected_is_einval_after_qp_to_err() {
    let mut w = World::new();
    let a = w.active_id();
    assert_eq!(w.disconnect(0, a).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(w.qp_state(0, a), QpState::Err);
    assert!(w.wire.is_empty());
}

#[test]
fn disconnect_row_unbound_id_is_einval() {
    let mut w = World::new();
    let h = &mut w.hosts[0];
    let id =
        h.cm.create_id(h.ch, cm_core::wire::RdmaPortSpace::Tcp)
            .unwrap();
    assert_eq!(w.disconnect(0, id).unwrap_err().errno, Errno::EINVAL);
    assert!(w.wire.is_empty());
}

#[test]
fn disconnect_row_while_connecting_returns_0_moves_qp_to_err_sends_nothing() {
    let mut w = World::new();
    w.listen();
    let a = w.active_id();
    w.connect(a);
    assert_eq!(w.disconnect(0, a), Ok(()));
    assert_eq!(w.qp_state(0, a), QpState::Err);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::ReqSent));
    // passive in REP_SENT
    assert!(w.run_until(1, E::ConnectRequest));
    w.fault = Box::new(|s| {
        if s.from == 1 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let b = w.accept_last();
    assert_eq!(w.disconnect(1, b), Ok(()));
    assert_eq!(w.qp_state(1, b), QpState::Err);
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::RepSent));
    assert_eq!(w.sent(0, DREQ) + w.sent(1, DREQ) + w.sent(1, DREP), 0);
}

#[test]
fn disconnect_row_qp_in_reset_is_einval_and_sends_nothing() {
    let (mut w, a, _b) = World::established();
    let h = &mut w.hosts[0];
    let qp = h.cm.detach_qp(a).unwrap().unwrap();
    h.dev
        .modify_qp(
            qp.handle,
            &verbs_core::QpAttr::default(),
            verbs_core::QpAttrMask::STATE,
        )
        .unwrap();
    h.cm.attach_qp(a, qp).unwrap();
    assert_eq!(w.qp_state(0, a), QpState::Reset);
    assert_eq!(w.disconnect(0, a).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(w.sent(0, DREQ), 0);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::Established));
}

// ---- destroy per state (cm-spec §3.3) ----

#[test]
fn destroy_idle_and_listen_send_nothing() {
    let mut w = World::new();
    let l = w.listen();
    let a = w.active_id();
    w.destroy(1, l).unwrap();
    w.destroy(0, a).unwrap();
    assert!(w.wire.is_empty());
    assert!(w.hosts[1].cm.ids().is_empty());
}

#[test]
fn destroy_req_sent_sends_rej_timeout_with_guid_and_passive_is_rejected() {
    let mut w = World::new();
    w.listen();
    let a = w.active_id();
    w.connect(a);
    assert!(w.run_until(1, E::ConnectRequest));
    w.destroy(0, a).unwrap();
    w.run();
    assert_eq!(w.sent(0, REJ), 1);
    let rej = w.events_of(1, E::Rejected);
    assert_eq!(rej.len(), 1);
    assert_eq!(rej[0].1.status, 4);
}

#[test]
fn destroy_passive_before_accept_sends_rej_28_active_rejected() {
    let mut w = World::new();
    w.listen();
    let a = w.active_id();
    w.connect(a);
    assert!(w.run_until(1, E::ConnectRequest));
    let b = w.events_of(1, E::ConnectRequest)[0].1.id;
    w.destroy(1, b).unwrap();
    w.run();
    assert_eq!(w.events_of(0, E::Rejected)[0].1.status, 28);
    assert_eq!(w.qp_state(0, a), QpState::Err);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::Idle));
}

#[test]
fn destroy_rep_sent_sends_rej_28() {
    let mut w = World::new();
    w.listen();
    let a = w.active_id();
    w.connect(a);
    assert!(w.run_until(1, E::ConnectRequest));
    w.fault = Box::new(|s| {
        if s.attr_id == RTU {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let b = w.accept_last();
    assert!(w.run_until(0, E::Established));
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::RepSent));
    w.destroy(1, b).unwrap();
    w.run();
    assert_eq!(w.sent(1, REJ), 1);
    // the active side is ESTABLISHED: REJ → REJECTED(28), QP to ERR, IB CM TimeWait
    assert_eq!(w.events_of(0, E::Rejected)[0].1.status, 28);
    assert_eq!(w.qp_state(0, a), QpState::Err);
    assert!(!w.has(0, E::Disconnected));
}

#[test]
fn destroy_established_sends_one_dreq_without_retries_peer_disconnected() {
    let (mut w, a, _b) = World::established();
    w.hosts[0].cm.detach_qp(a).unwrap();
    w.destroy(0, a).unwrap();
    w.run();
    assert_eq!(w.sent(0, DREQ), 1);
    assert_one_disconnected(&w, 1);
    assert!(w.hosts[0]
        .events
        .iter()
        .all(|(_, e)| e.event != E::Disconnected));
}

#[test]
fn destroy_dreq_sent_and_timewait_send_nothing_more() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    w.destroy(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    w.disconnect(1, b).unwrap();
    w.run_for_ms(1);
    assert_eq!(w.hosts[1].cm.ib_cm_state(b), Some(IbCmState::Timewait));
    w.destroy(1, b).unwrap();
    w.run();
    assert_eq!(w.sent(0, DREQ), 1);
    assert!(!w.has(1, E::TimewaitExit));
}

#[test]
fn destroy_dreq_rcvd_answers_with_drep_initiator_gets_status_0() {
    let (mut w, a, b) = World::established();
    w.disconnect(0, a).unwrap();
    assert!(w.run_until(1, E::Disconnected));
    w.destroy(1, b).unwrap();
    w.run();
    assert_eq!(w.sent(1, DREP), 1);
    assert_eq!(w.events_of(0, E::Disconnected)[0].1.status, 0);
}

#[test]
fn dreq_for_destroyed_connection_is_answered_with_drep() {
    let (mut w, a, b) = World::established();
    w.hosts[1].cm.detach_qp(b).unwrap();
    // passive destroys with its one DREQ lost; the active side's later DREQ meets no id
    w.fault = Box::new(|s| {
        if s.from == 1 && s.attr_id == DREQ {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    w.destroy(1, b).unwrap();
    w.disconnect(0, a).unwrap();
    w.run();
    assert_eq!(w.hosts[1].cm.engine().counters().rx_dreq_unknown, 1);
    assert_eq!(w.events_of(0, E::Disconnected)[0].1.status, 0);
}

// ---- setup rules ----

#[test]
fn rej_8_when_nobody_listens_on_the_service_id() {
    let mut w = World::new();
    let a = w.active_id();
    w.connect(a);
    w.run();
    let r = w.events_of(0, E::Rejected);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1.status, 8);
    assert_eq!(w.sent(0, REQ), 1);
    assert_eq!(w.qp_state(0, a), QpState::Err);
}

#[test]
fn stale_connection_req_reusing_a_live_qpn_gets_rej_10_and_old_connection_dreq() {
    let (mut w, _a, b) = World::established();
    // host 0 reboots: same GUID and QPN, new comm IDs; reconnects
    w.restart(0, 99);
    let a2 = w.active_id();
    w.connect(a2);
    w.run();
    let r = w.events_of(0, E::Rejected);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1.status, 10);
    // the old passive connection got a DREQ out, answered by the rebooted host (unknown id)
    assert!(w.sent(1, DREQ) >= 1);
    assert_eq!(w.hosts[0].cm.engine().counters().rx_dreq_unknown, 1);
    assert_eq!(w.events_of(1, E::Disconnected)[0].1.status, 0);
    assert_eq!(w.hosts[1].cm.engine().counters().rx_stale, 1);
    let _ = b;
}

#[test]
fn duplicate_req_is_not_a_second_connect_request_and_gets_an_mra() {
    let mut w = World::new();
    w.listen();
    w.fault = Box::new(|s| {
        if s.attr_id == REQ {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    });
    let a = w.active_id();
    w.connect(a);
    w.run_for_ms(1);
    assert_eq!(w.events_of(1, E::ConnectRequest).len(), 1);
    assert_eq!(w.sent(1, 0x11), 1);
}

/// A world whose host 1 listens with `backlog` and leaves its events unread.
fn unread_listener(backlog: u32) -> World {
    let mut w = World::new();
    let h = &mut w.hosts[1];
    let l =
        h.cm.create_id(h.ch, cm_core::wire::RdmaPortSpace::Tcp)
            .unwrap_or_else(|e| panic!("{e}"));
    h.cm.bind_addr(l, SocketAddr::new(IpAddr::V4(ip(1)), PORT))
        .unwrap_or_else(|e| panic!("{e}"));
    h.cm.listen(l, backlog).unwrap_or_else(|e| panic!("{e}"));
    h.read_events = false;
    w
}

#[test]
fn listen_backlog_full_drops_req_without_rej_until_the_request_is_read() {
    let mut w = unread_listener(1);
    let a1 = w.active_id();
    let a2 = w.active_id();
    w.connect(a1);
    w.connect(a2);
    w.run_for_ms(1);
    assert_eq!(w.hosts[1].cm.pending_events(w.hosts[1].ch), 1);
    assert_eq!(w.hosts[1].cm.engine().counters().rx_backlog_full, 1);
    assert_eq!(w.sent(1, REJ), 0);
    // reading the request frees the slot; the dropped REQ's retransmission gets in
    w.hosts[1].read_events = true;
    w.collect();
    w.run_for_ms(5000);
    assert_eq!(w.events_of(1, E::ConnectRequest).len(), 2);
}

#[test]
fn listen_backlog_0_is_ucmas_default_and_takes_every_request_at_once() {
    let mut w = unread_listener(0);
    let ids: Vec<_> = (0..10).map(|_| w.active_id()).collect();
    for a in ids {
        w.connect(a);
    }
    w.run_for_ms(1);
    // ucma_listen: backlog 0 means max_backlog (1024), not 1.
    assert_eq!(w.hosts[1].cm.pending_events(w.hosts[1].ch), 10);
    assert_eq!(w.hosts[1].cm.engine().counters().rx_backlog_full, 0);
}

#[test]
fn unacked_event_makes_destroy_fail_with_ebusy_until_acked() {
    let mut w = World::new();
    w.hosts[0].auto_ack = false;
    let a = w.active_id();
    assert_eq!(w.destroy(0, a).unwrap_err().errno, Errno::EBUSY);
    let held: Vec<_> = w.hosts[0].held.drain(..).collect();
    for ev in held {
        w.hosts[0].cm.ack_cm_event(ev).unwrap();
    }
    assert_eq!(w.destroy(0, a), Ok(()));
}

#[test]
fn get_cm_event_on_empty_channel_is_eagain() {
    let mut w = World::new();
    let h = &mut w.hosts[0];
    assert_eq!(
        h.cm.get_cm_event(&mut h.dev, SimTime::ZERO, h.ch)
            .unwrap_err()
            .errno,
        Errno::EAGAIN
    );
}

#[test]
fn rdma_create_qp_requires_a_bound_id() {
    let mut w = World::new();
    let h = &mut w.hosts[0];
    let id =
        h.cm.create_id(h.ch, cm_core::wire::RdmaPortSpace::Tcp)
            .unwrap();
    let e =
        h.cm.create_qp(&mut h.dev, id, PdHandle(1), &qp_init())
            .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
}
