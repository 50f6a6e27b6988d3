//! Disconnect sequences (cm-spec §4.5), unanswered disconnects and races with connection setup.

use super::*;

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
