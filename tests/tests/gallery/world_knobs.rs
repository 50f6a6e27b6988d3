//! Gallery of the World's knobs of issue 14, one test per capability, written as a test writer
//! uses the World: per-host CM timers, targeted drops and delays of one chosen message (CM or
//! RC), a late accept that draws an MRA, and deep posts beyond the base 32 WR slots.

use cm_core::api::CmEventType;
use cm_core::wire::{
    CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ, CM_MRA_ATTR_ID as MRA, CM_REQ_ATTR_ID as REQ,
    CM_RTU_ATTR_ID as RTU,
};
use rnic_testbed::world::{
    Fault, HostCm, MsgFault, Occurrence, Op, Record, World, WorldConfig, WorldError,
};
use verbs_core::{SimTime, WcStatus};

type R = Result<(), Box<dyn std::error::Error>>;

const MS: u64 = 1_000_000;

/// Times at which host `h` sent a CM message of attribute `attr`.
fn sent(w: &World, h: usize, attr: u16) -> Vec<SimTime> {
    w.history()
        .of_host(h)
        .filter_map(|e| match e.rec {
            Record::Wire { tx: true, msg, .. } if msg.attr == attr => Some(e.at),
            _ => None,
        })
        .collect()
}

/// Whether host `h` received a CM message of attribute `attr`.
fn received(w: &World, h: usize, attr: u16) -> bool {
    w.history()
        .of_host(h)
        .any(|e| matches!(e.rec, Record::Wire { tx: false, msg, .. } if msg.attr == attr))
}

/// The targeted faults recorded on host `h`.
fn targeted(w: &World, h: usize) -> Vec<Fault> {
    w.history()
        .of_host(h)
        .filter_map(|e| match e.rec {
            Record::Fault(f @ (Fault::TargetedDrop { .. } | Fault::Delayed { .. })) => Some(f),
            _ => None,
        })
        .collect()
}

/// Host 0 with 2 CM retries and response timeout 12 (fast timers: packet life time 10): its
/// DREQ goes out 1 + 2 times, 2·ms(10) + ms(12) = 24 ms apart, then DISCONNECTED −110
/// (cm-spec §3.2). The peer answers every DREQ, but every DREP it sends is dropped.
#[test]
fn per_host_cm_retries_and_response_timeout_shape_the_dreq_retries() -> R {
    let cm = HostCm {
        max_cm_retries: Some(2),
        cm_response_timeout: Some(12),
        packet_life_time: None,
    };
    let cfg = WorldConfig::two_hosts(3)
        .fast()
        .with_host_cm(0, cm)
        .with_msg_fault(MsgFault::drop(1, DREP, Occurrence::Every));
    assert_eq!(cfg.cm_config(0, 0).max_cm_retries, 2);
    assert_eq!(
        cfg.cm_config(1, 0).max_cm_retries,
        15,
        "host 1 keeps the default"
    );
    let mut w = World::new(cfg)?;
    let c = w.establish(0, 1)?;
    w.disconnect(c.active)?;
    w.wait_event(0, Some(c.active.id), CmEventType::Disconnected)?;
    let dreqs = sent(&w, 0, DREQ);
    assert_eq!(dreqs.len(), 3, "1 + max_cm_retries DREQs");
    for pair in dreqs.windows(2) {
        assert_eq!(pair[1].as_nanos() - pair[0].as_nanos(), 24 * MS);
    }
    let ev = w.events_of(0, c.active.id);
    assert!(
        ev.iter()
            .any(|&(_, e, s)| e == CmEventType::Disconnected && s == -110),
        "{ev:?}"
    );
    assert!(!received(&w, 0, DREP), "every DREP was dropped");
    w.disconnect(c.passive)?;
    w.check()?;
    Ok(())
}

/// "The first DREP" is lost: the active side's DREQ retry draws a second DREP (the passive
/// side answers a duplicate DREQ in TimeWait, cm-spec §3.3) and both ends disconnect cleanly.
#[test]
fn drop_the_first_drep_and_the_dreq_retry_recovers() -> R {
    let mut w = World::new(WorldConfig::two_hosts(5).fast())?;
    let c = w.establish(0, 1)?;
    w.add_msg_fault(MsgFault::drop(1, DREP, Occurrence::Nth(1)))?;
    w.disconnect(c.active)?;
    w.wait_event(1, Some(c.passive.id), CmEventType::Disconnected)?;
    w.disconnect(c.passive)?;
    w.wait_event(0, Some(c.active.id), CmEventType::Disconnected)?;
    assert_eq!(sent(&w, 0, DREQ).len(), 2, "the DREQ was sent again");
    assert_eq!(sent(&w, 1, DREP).len(), 2);
    match targeted(&w, 1)[..] {
        [Fault::TargetedDrop { msg, nth: 1 }] => assert_eq!(msg.attr, DREP),
        ref f => panic!("{f:?}"),
    }
    let ev = w.events_of(0, c.active.id);
    assert!(
        ev.iter()
            .any(|&(_, e, s)| e == CmEventType::Disconnected && s == 0),
        "{ev:?}"
    );
    w.check()?;
    Ok(())
}

/// Every RTU is held 5 ms: the passive side's REP times out after 4 ms (fast timers:
/// ms(response timeout 10)) and is sent again, the active side answers the duplicate REP with
/// another RTU (held too), and the passive side is ESTABLISHED only when the first RTU
/// arrives, 5 ms after the active side.
#[test]
fn delay_every_rtu_and_the_passive_side_establishes_late() -> R {
    use cm_core::wire::CM_REP_ATTR_ID as REP;
    let cfg = WorldConfig::two_hosts(8)
        .fast()
        .with_msg_fault(MsgFault::delay(0, RTU, Occurrence::Every, 5 * MS));
    let mut w = World::new(cfg)?;
    let c = w.establish(0, 1)?;
    let at = |w: &World, h, id| {
        w.events_of(h, id)
            .iter()
            .find(|e| e.1 == CmEventType::Established)
            .map(|e| e.0.as_nanos())
            .unwrap()
    };
    let (active, passive) = (at(&w, 0, c.active.id), at(&w, 1, c.passive.id));
    assert!(passive >= active + 5 * MS, "{active} {passive}");
    assert!(sent(&w, 1, REP).len() >= 2, "the REP was sent again");
    w.run_for(20 * MS);
    let rtus = sent(&w, 0, RTU);
    assert!(rtus.len() >= 2, "a second RTU for the duplicate REP");
    // Recorded when the host sent them: the first at once, when the active side fetched
    // the CONNECT_RESPONSE; the network carried each 5 ms later.
    assert!(rtus[0].as_nanos() <= active, "{rtus:?} {active}");
    let held = targeted(&w, 0);
    assert_eq!(held.len(), rtus.len());
    for (k, f) in held.iter().enumerate() {
        assert!(
            matches!(*f, Fault::Delayed { msg, nth, by_ns }
                if msg.attr == RTU && nth == k as u32 + 1 && by_ns == 5 * MS),
            "{f:?}"
        );
    }
    w.disconnect(c.active)?;
    w.check()?;
    Ok(())
}

/// The first RC packet host 0 sends (its SEND) is lost: the RC transport retransmits it after
/// the ACK timeout and the SEND completes with its data intact.
#[test]
fn drop_the_first_rc_packet_and_the_send_is_retransmitted() -> R {
    let mut w = World::new(WorldConfig::two_hosts(11).fast())?;
    let c = w.establish(0, 1)?;
    w.post_recvs(c.passive, 1);
    w.add_msg_fault(MsgFault::drop(0, MsgFault::RC, Occurrence::Nth(1)))?;
    let ids = w.post(c.active, Op::Send, 1);
    w.run_for(500 * MS);
    assert_eq!(w.wc_status(ids[0]), Some(WcStatus::Success));
    match targeted(&w, 0)[..] {
        [Fault::TargetedDrop { msg, nth: 1 }] => assert_eq!(msg.attr, MsgFault::RC),
        ref f => panic!("{f:?}"),
    }
    assert!(w.history().rc_packets[0] >= 2, "sent again");
    w.disconnect(c.active)?;
    w.check()?;
    Ok(())
}

/// The passive application accepts 30 ms after its CONNECT_REQUEST; the active side's REQ
/// times out after 12 ms and comes again: the passive CM answers the duplicate REQ with an
/// MRA (rdma_cm's delayed MRA, cm-spec §4.2), the active side waits longer, and the
/// connection establishes when the application accepts.
#[test]
fn a_late_accept_draws_an_mra_and_the_connection_still_establishes() -> R {
    let mut w = World::new(WorldConfig::two_hosts(13).fast())?;
    w.listen(1)?;
    let active = w.connect(0, 1)?;
    let id = w.wait_event(1, None, CmEventType::ConnectRequest)?;
    w.run_for(30 * MS);
    assert!(!sent(&w, 1, MRA).is_empty(), "an MRA went out");
    assert!(received(&w, 0, MRA));
    assert!(sent(&w, 0, REQ).len() >= 2, "the REQ came again");
    let passive = w.accept(1, id)?;
    w.wait_event(0, Some(active.id), CmEventType::Established)?;
    w.wait_event(1, Some(passive.id), CmEventType::Established)?;
    w.disconnect(active)?;
    w.check()?;
    Ok(())
}

/// Every MRA is lost: the active side (2 CM retries) never learns that its peer needs more
/// time, sends its REQ 3 times and gives up: UNREACHABLE −110 (Linux `cm_process_send_error`
/// → IB_CM_REQ_ERROR, which `cma_ib_handler` reports as RDMA_CM_EVENT_UNREACHABLE, −ETIMEDOUT).
/// The passive request the application never answered expires: REJECTED, status 4.
#[test]
fn dropping_every_mra_makes_the_req_retries_run_out() -> R {
    let cm = HostCm {
        max_cm_retries: Some(2),
        ..HostCm::default()
    };
    let cfg = WorldConfig::two_hosts(17)
        .fast()
        .with_host_cm(0, cm)
        .with_msg_fault(MsgFault::drop(1, MRA, Occurrence::Every));
    let mut w = World::new(cfg)?;
    w.listen(1)?;
    let active = w.connect(0, 1)?;
    let id = w.wait_event(1, None, CmEventType::ConnectRequest)?;
    w.wait_event(0, Some(active.id), CmEventType::Unreachable)?;
    let ev = w.events_of(0, active.id);
    assert!(
        ev.iter()
            .any(|&(_, e, s)| e == CmEventType::Unreachable && s == -110),
        "{ev:?}"
    );
    assert_eq!(sent(&w, 0, REQ).len(), 3, "1 + max_cm_retries REQs");
    let mras = sent(&w, 1, MRA).len();
    assert_eq!(mras, 2, "one MRA per duplicate REQ");
    assert_eq!(targeted(&w, 1).len(), mras, "every one dropped");
    assert!(!received(&w, 0, MRA));
    w.wait_event(1, Some(id), CmEventType::Rejected)?;
    let ev = w.events_of(1, id);
    assert!(ev
        .iter()
        .any(|&(_, e, s)| e == CmEventType::Rejected && s == 4));
    w.check()?;
    Ok(())
}

/// 100 SENDs, then 100 WRITEs, then 100 READs outstanding at once on a QP of depth 128: every
/// one completes with its data verified (S6), no false DATA MISMATCH.
#[test]
fn a_hundred_outstanding_sends_writes_and_reads_verify() -> R {
    let mut w = World::new(WorldConfig::two_hosts(19).fast().with_qp_depth(128))?;
    let c = w.establish(0, 1)?;
    assert_eq!(w.post_recvs(c.passive, 100).len(), 100);
    for op in [Op::Send, Op::Write, Op::Read] {
        let ids = w.try_post(c.active, op, 100)?;
        assert_eq!(ids.len(), 100, "{op:?}");
        w.run_for(50 * MS);
        for id in ids {
            assert_eq!(w.wc_status(id), Some(WcStatus::Success), "{op:?} wr {id}");
        }
    }
    let ok = w.history().entries.iter().all(|e| match e.rec {
        Record::Completion { data_ok, .. } => data_ok,
        _ => true,
    });
    assert!(ok, "a DATA MISMATCH");
    w.disconnect(c.active)?;
    w.check()?;
    Ok(())
}

/// The default World has 32 WR slots per region: a post that would keep more outstanding is
/// refused with an error naming the limit, and nothing is posted.
#[test]
fn a_post_beyond_the_wr_slots_is_refused_with_an_error() -> R {
    let mut w = World::new(WorldConfig::two_hosts(23).fast())?;
    let c = w.establish(0, 1)?;
    let before = w.history().entries.len();
    match w.try_post(c.active, Op::Write, 40) {
        Err(WorldError::OutOfSlots { slots: 32, .. }) => {}
        r => panic!("{r:?}"),
    }
    assert_eq!(
        w.history().entries.len(),
        before,
        "nothing posted or recorded"
    );
    assert_eq!(w.try_post(c.active, Op::Write, 32)?.len(), 32);
    w.disconnect(c.active)?;
    w.check()?;
    Ok(())
}

/// Settings the World cannot honour are refused with EINVAL instead of never firing: a fault
/// from a host that does not exist, an attribute the World never sends, `Nth(0)`, per-host
/// timers for a host past the end, a QP depth of 0.
#[test]
fn settings_the_world_cannot_honour_are_refused() {
    let einval = |cfg: WorldConfig| match World::new(cfg) {
        Err(e) => assert_eq!(e.errno, verbs_core::Errno::EINVAL, "{e}"),
        Ok(_) => panic!("accepted"),
    };
    let two = || WorldConfig::two_hosts(1);
    einval(two().with_msg_fault(MsgFault::drop(5, DREP, Occurrence::Every)));
    einval(two().with_msg_fault(MsgFault::drop(0, 0xdead, Occurrence::Every)));
    einval(two().with_msg_fault(MsgFault::drop(0, DREP, Occurrence::Nth(0))));
    einval(two().with_host_cm(5, HostCm::default()));
    einval(two().with_qp_depth(0));
    let mut w = World::new(two()).unwrap();
    assert!(w
        .add_msg_fault(MsgFault::drop(0, DREP, Occurrence::Nth(0)))
        .is_err());
}

/// A passive host tuned faster than its peer (1 CM retry, response timeout 10) still waits for
/// the peer's whole REQ budget (15 retries at timeout 16, within Linux's defaults) before its
/// unanswered request expires: one connect is one CONNECT_REQUEST, and the active side gives up
/// first (UNREACHABLE −110). The expiry bound is the REQ's fields no larger than this node's own
/// or Linux's defaults, whichever is larger (docs/cm-semantics.md).
#[test]
fn a_slower_peer_is_waited_for_one_connect_one_connect_request() -> R {
    let slow = HostCm {
        max_cm_retries: Some(15),
        cm_response_timeout: Some(16),
        ..HostCm::default()
    };
    let fast = HostCm {
        max_cm_retries: Some(1),
        cm_response_timeout: Some(10),
        ..HostCm::default()
    };
    let cfg = WorldConfig::two_hosts(3)
        .fast()
        .with_host_cm(0, slow)
        .with_host_cm(1, fast);
    let mut w = World::new(cfg)?;
    w.listen(1)?;
    let active = w.connect(0, 1)?;
    w.wait_event(1, None, CmEventType::ConnectRequest)?;
    w.wait_event(0, Some(active.id), CmEventType::Unreachable)?;
    let requests = w
        .history()
        .entries
        .iter()
        .filter(|e| {
            e.host == 1
                && matches!(
                    e.rec,
                    Record::Event {
                        event: CmEventType::ConnectRequest,
                        ..
                    }
                )
        })
        .count();
    assert_eq!(requests, 1, "one connect, one CONNECT_REQUEST");
    assert_eq!(sent(&w, 0, REQ).len(), 16, "1 + 15 REQs");
    w.check()?;
    Ok(())
}
