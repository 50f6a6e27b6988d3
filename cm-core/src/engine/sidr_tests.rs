//! SIDR in the engine (IBTA vol. 1 §12.11; Linux cm.c), two engines back to back.

use super::*;

const SERVICE: u64 = 0x0000_0000_0111_1C16; // RDMA_PS_UDP, port 7190

fn gid(n: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, n))
}

fn pair() -> (CmEngine, CmEngine) {
    let a = CmEngine::new(CmConfig {
        ca_guid: 0xA,
        seed: 1,
        ..CmConfig::default()
    });
    let b = CmEngine::new(CmConfig {
        ca_guid: 0xB,
        seed: 2,
        ..CmConfig::default()
    });
    (a, b)
}

/// Every queued MAD of `from` (at `from_gid`), decoded, handed to `to`.
fn pump(now: SimTime, from: &mut CmEngine, from_gid: Gid, to: &mut CmEngine) -> Vec<CmMessage> {
    let mut seen = Vec::new();
    while let Some((_, mad)) = from.poll_transmit() {
        if let Ok((_, m)) = wire::decode(&mad) {
            seen.push(m);
        }
        to.handle_datagram(now, from_gid, &mad);
    }
    seen
}

fn req(pd: &[u8]) -> SidrReqParams {
    SidrReqParams {
        service_id: SERVICE,
        local_gid: gid(1),
        remote_gid: gid(2),
        pkey: 0xFFFF,
        private_data: pd.to_vec(),
    }
}

/// A (host 1) resolves the service B (host 2) listens on: B sees the request, answers with its
/// QPN and Q_Key, A gets them; both ids end in IDLE and the SIDR_REP echoes Request ID, service
/// ID and transaction ID.
#[test]
fn sidr_resolves_qpn_and_qkey_and_both_ids_end_idle() {
    let (mut a, mut b) = pair();
    let now = SimTime::ZERO;
    let l = b.create_id();
    b.listen(l, SERVICE, 4).unwrap();
    let ia = a.create_id();
    a.send_sidr_req(now, ia, &req(b"who")).unwrap();
    assert_eq!(a.state(ia), Some(IbCmState::SidrReqSent));
    let (_, req_mad) = a.transmit.front().cloned().unwrap();
    let (req_hdr, _) = wire::decode(&req_mad).unwrap();
    pump(now, &mut a, gid(1), &mut b);
    let ev = b.poll_event().unwrap();
    let IbCmEventKind::SidrReqReceived(info) = &ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (info.listen_id, info.service_id, info.pkey, info.remote_gid),
        (l, SERVICE, 0xFFFF, gid(1))
    );
    assert_eq!(&info.private_data[..3], b"who");
    assert_eq!(
        info.private_data.len(),
        wire::IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE
    );
    let ib = ev.id;
    assert_eq!(b.state(ib), Some(IbCmState::SidrReqRcvd));
    let rep = SidrRepParams {
        status: SidrStatus::Success,
        qpn: 0x1234,
        qkey: 0x0123_4567,
        info: vec![],
        private_data: b"ok".to_vec(),
    };
    b.send_sidr_rep(ib, &rep).unwrap();
    assert_eq!(b.state(ib), Some(IbCmState::Idle));
    let (_, rep_mad) = b.transmit.front().cloned().unwrap();
    let (rep_hdr, m) = wire::decode(&rep_mad).unwrap();
    let CmMessage::SidrRep(r) = m else {
        panic!("{m:?}")
    };
    assert_eq!(rep_hdr.transaction_id, req_hdr.transaction_id);
    assert_eq!(r.request_id, a.local_comm_id(ia).unwrap());
    assert_eq!(r.service_id, SERVICE);
    pump(now, &mut b, gid(2), &mut a);
    let ev = a.poll_event().unwrap();
    assert_eq!(ev.id, ia);
    let IbCmEventKind::SidrRepReceived(got) = ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!((got.status, got.qpn, got.qkey), (0, 0x1234, 0x0123_4567));
    assert_eq!(&got.private_data[..2], b"ok");
    assert_eq!(a.state(ia), Some(IbCmState::Idle));
    assert_eq!(a.poll_timeout(), None, "the retransmission is cancelled");
}

/// No listener on the service ID: status 1 (unsupported), counted, no id made.
#[test]
fn a_sidr_req_without_listener_is_answered_unsupported() {
    let (mut a, mut b) = pair();
    let now = SimTime::ZERO;
    let ia = a.create_id();
    a.send_sidr_req(now, ia, &req(b"")).unwrap();
    pump(now, &mut a, gid(1), &mut b);
    assert!(b.poll_event().is_none());
    assert_eq!(b.counters().rx_no_listener, 1);
    assert_eq!(b.conns.len(), 0);
    pump(now, &mut b, gid(2), &mut a);
    match a.poll_event().map(|e| e.kind) {
        Some(IbCmEventKind::SidrRepReceived(r)) => assert_eq!(r.status, 1),
        other => panic!("{other:?}"),
    }
}

/// A retransmitted SIDR_REQ while the first is unanswered is a duplicate (no second request);
/// once answered, the passive id is gone and a late copy is a new request (Linux).
#[test]
fn a_retransmitted_sidr_req_is_a_duplicate_until_answered() {
    let (mut a, mut b) = pair();
    let l = b.create_id();
    b.listen(l, SERVICE, 4).unwrap();
    let ia = a.create_id();
    let now = SimTime::ZERO;
    a.send_sidr_req(now, ia, &req(b"")).unwrap();
    let (_, mad) = a.poll_transmit().unwrap();
    b.handle_datagram(now, gid(1), &mad);
    b.handle_datagram(now, gid(1), &mad);
    assert_eq!(b.counters().rx_duplicates, 1);
    let ev = b.poll_event().unwrap();
    assert!(b.poll_event().is_none(), "one request");
    // The same Request ID from another address is another request.
    b.handle_datagram(now, gid(3), &mad);
    assert!(matches!(
        b.poll_event().map(|e| e.kind),
        Some(IbCmEventKind::SidrReqReceived(_))
    ));
    b.send_sidr_rep(ev.id, &SidrRepParams::status(SidrStatus::Reject))
        .unwrap();
    b.handle_datagram(now, gid(1), &mad);
    assert!(matches!(
        b.poll_event().map(|e| e.kind),
        Some(IbCmEventKind::SidrReqReceived(_))
    ));
}

/// Unanswered, the SIDR_REQ goes out 1 + max_cm_retries times, every ms(cm_response_timeout)
/// (4096 ms with rdma_cm's values), then SIDR_REQ_ERROR and IDLE.
#[test]
fn an_unanswered_sidr_req_is_retried_then_fails() {
    let (mut a, _) = pair();
    let ia = a.create_id();
    a.send_sidr_req(SimTime::ZERO, ia, &req(b"")).unwrap();
    let mut sends = vec![0u64];
    while a.poll_transmit().is_some() {}
    while let Some(t) = a.poll_timeout() {
        a.handle_timeout(t);
        while a.poll_transmit().is_some() {
            sends.push(t.as_nanos() / 1_000_000);
        }
        if a.state(ia) == Some(IbCmState::Idle) {
            break;
        }
    }
    let want: Vec<u64> = (0..16).map(|k| k * 4096).collect();
    assert_eq!(sends, want);
    assert_eq!(
        a.poll_event().map(|e| e.kind),
        Some(IbCmEventKind::SidrReqError)
    );
    assert_eq!(a.state(ia), Some(IbCmState::Idle));
    assert_eq!(a.counters().tx_timeouts, 1);
}

/// Destroying a passive id that has not answered sends status 2 (reject), as `cm_destroy_id`;
/// destroying an active one sends nothing and stops its retries.
#[test]
fn destroy_rejects_a_pending_request_and_silences_an_active_one() {
    let (mut a, mut b) = pair();
    let l = b.create_id();
    b.listen(l, SERVICE, 4).unwrap();
    let now = SimTime::ZERO;
    let ia = a.create_id();
    a.send_sidr_req(now, ia, &req(b"")).unwrap();
    pump(now, &mut a, gid(1), &mut b);
    let ib = b.poll_event().unwrap().id;
    b.destroy_id(now, ib);
    let sent = pump(now, &mut b, gid(2), &mut a);
    assert!(matches!(&sent[..], [CmMessage::SidrRep(r)] if r.status == 2));
    assert!(matches!(
        a.poll_event().map(|e| e.kind),
        Some(IbCmEventKind::SidrRepReceived(SidrRepInfo {
            status: 2,
            ..
        }))
    ));
    let ia2 = a.create_id();
    a.send_sidr_req(now, ia2, &req(b"")).unwrap();
    while a.poll_transmit().is_some() {}
    a.destroy_id(now, ia2);
    assert!(a.poll_transmit().is_none());
    assert_eq!(a.poll_timeout(), None);
}

/// A full backlog answers with status 2 (ucma's handler fails, the new id is destroyed).
#[test]
fn a_full_backlog_rejects_the_sidr_req() {
    let (mut a, mut b) = pair();
    let l = b.create_id();
    b.listen(l, SERVICE, 1).unwrap();
    let now = SimTime::ZERO;
    for _ in 0..2 {
        let ia = a.create_id();
        a.send_sidr_req(now, ia, &req(b"")).unwrap();
    }
    let sent_back = {
        pump(now, &mut a, gid(1), &mut b);
        pump(now, &mut b, gid(2), &mut a)
    };
    assert_eq!(b.counters().rx_backlog_full, 1);
    assert!(matches!(&sent_back[..], [CmMessage::SidrRep(r)] if r.status == 2));
}

/// A SIDR_REP is taken only in SIDR_REQ_SENT, from the peer asked, for a Request ID in use.
#[test]
fn stray_sidr_reps_are_counted_and_dropped() {
    let (mut a, _) = pair();
    let now = SimTime::ZERO;
    let ia = a.create_id();
    a.send_sidr_req(now, ia, &req(b"")).unwrap();
    while a.poll_transmit().is_some() {}
    let rep = |request_id| {
        CmMessage::SidrRep(SidrRep {
            request_id,
            qpn: 5,
            q_key: 7,
            ..SidrRep::default()
        })
        .encode(1, 0)
        .unwrap()
    };
    let mine = a.local_comm_id(ia).unwrap();
    a.handle_datagram(now, gid(2), &rep(mine ^ 1));
    assert_eq!(a.counters().rx_unmatched, 1);
    a.handle_datagram(now, gid(9), &rep(mine));
    assert_eq!(a.counters().rx_wrong_source, 1);
    assert_eq!(a.state(ia), Some(IbCmState::SidrReqSent));
    a.handle_datagram(now, gid(2), &rep(mine));
    assert!(matches!(
        a.poll_event().map(|e| e.kind),
        Some(IbCmEventKind::SidrRepReceived(_))
    ));
    a.handle_datagram(now, gid(2), &rep(mine));
    assert_eq!(a.counters().rx_wrong_state, 1, "a second SIDR_REP");
    assert!(a.poll_event().is_none());
}

/// `send_sidr_rep` only answers a SIDR_REQ_RCVD id, and refuses private data over 136 bytes
/// without sending.
#[test]
fn send_sidr_rep_checks_state_and_lengths() {
    let (mut a, mut b) = pair();
    let l = b.create_id();
    b.listen(l, SERVICE, 4).unwrap();
    let now = SimTime::ZERO;
    let ia = a.create_id();
    a.send_sidr_req(now, ia, &req(b"")).unwrap();
    assert_eq!(
        a.send_sidr_req(now, ia, &req(b"")).map_err(|e| e.errno),
        Err(Errno::EINVAL),
        "not IDLE"
    );
    pump(now, &mut a, gid(1), &mut b);
    let ib = b.poll_event().unwrap().id;
    let long = SidrRepParams {
        private_data: vec![0; 137],
        ..SidrRepParams::status(SidrStatus::Success)
    };
    assert_eq!(
        b.send_sidr_rep(ib, &long).map_err(|e| e.errno),
        Err(Errno::EINVAL)
    );
    assert!(b.poll_transmit().is_none());
    assert_eq!(b.state(ib), Some(IbCmState::SidrReqRcvd));
    assert_eq!(
        b.send_sidr_rep(l, &SidrRepParams::status(SidrStatus::Success))
            .map_err(|e| e.errno),
        Err(Errno::EINVAL),
        "a listener"
    );
}

/// A dying program's SIDR_REQ_RCVD id, handed to another engine (`rnic exec`'s supervisor),
/// is answered with status 2 when destroyed, as `cm_destroy_id` answers it; an active
/// SIDR_REQ_SENT id needs no teardown (nothing is sent for it).
#[test]
fn an_adopted_pending_sidr_request_is_rejected_on_destroy() {
    let (mut a, mut b) = pair();
    let l = b.create_id();
    b.listen(l, SERVICE, 4).unwrap();
    let now = SimTime::ZERO;
    let ia = a.create_id();
    a.send_sidr_req(now, ia, &req(b"")).unwrap();
    assert!(!a.snapshot(ia).unwrap().needs_teardown());
    pump(now, &mut a, gid(1), &mut b);
    let ib = b.poll_event().unwrap().id;
    let s = b.snapshot(ib).unwrap();
    assert!(s.needs_teardown());
    let mut heir = CmEngine::new(CmConfig::default());
    let id = heir
        .adopt(&ConnSnapshot::decode(&s.encode()).unwrap())
        .unwrap();
    heir.destroy_id(now, id);
    let (dst, mad) = heir.poll_transmit().unwrap();
    assert_eq!(dst, gid(1));
    let (hdr, m) = wire::decode(&mad).unwrap();
    let CmMessage::SidrRep(r) = m else {
        panic!("{m:?}")
    };
    assert_eq!((r.status, r.request_id), (2, a.local_comm_id(ia).unwrap()));
    assert_eq!(hdr.transaction_id, s.tid);
    a.handle_datagram(now, gid(2), &mad);
    assert!(matches!(
        a.poll_event().map(|e| e.kind),
        Some(IbCmEventKind::SidrRepReceived(SidrRepInfo {
            status: 2,
            ..
        }))
    ));
}
