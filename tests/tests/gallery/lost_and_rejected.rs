//! Lost DREQ and DREP; connection setup rejections (REJ 10, REJ 8).

use super::*;

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
