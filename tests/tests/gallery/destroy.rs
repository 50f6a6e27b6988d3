//! `rdma_destroy_id` in every IB CM state (cm-spec §3.3).

use super::*;

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
