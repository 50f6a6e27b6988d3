//! Handshake and `rdma_disconnect` row by row (cm-spec §4.4).

use super::*;

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
