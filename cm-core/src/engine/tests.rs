//! Engine-level unit tests: two engines wired back to back.

use super::*;

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

/// Moves every queued MAD from `from` (at `from_gid`) into `to`.
fn pump(now: SimTime, from: &mut CmEngine, from_gid: Gid, to: &mut CmEngine) -> usize {
    let mut n = 0;
    while let Some((_, mad)) = from.poll_transmit() {
        to.handle_datagram(now, from_gid, &mad);
        n += 1;
    }
    n
}

fn connect(a: &mut CmEngine, b: &mut CmEngine) -> (IbCmId, IbCmId) {
    let now = SimTime::ZERO;
    let (ia, ib) = request(a, b, now);
    let rep = RepParams {
        local_qpn: 0x22,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: vec![],
    };
    b.send_rep(now, ib, &rep).unwrap();
    pump(now, b, gid(2), a);
    assert!(matches!(
        a.poll_event().unwrap().kind,
        IbCmEventKind::RepReceived(_)
    ));
    a.send_rtu(ia, &[]).unwrap();
    pump(now, a, gid(1), b);
    assert!(matches!(
        b.poll_event().unwrap().kind,
        IbCmEventKind::RtuReceived(_)
    ));
    (ia, ib)
}

/// Both ends must run one path MTU and the REP carries none back: the passive side takes the
/// REQ's, even above its own configured one (Linux cm_req_handler; a smaller one made the
/// active side's first full-MTU packet a REM_INV_REQ_ERR at the passive responder).
#[test]
fn passive_side_takes_the_path_mtu_of_the_req() {
    let mut a = CmEngine::new(CmConfig {
        ca_guid: 0xA,
        seed: 1,
        path_mtu: Mtu::Mtu4096,
        ..CmConfig::default()
    });
    let mut b = CmEngine::new(CmConfig {
        ca_guid: 0xB,
        seed: 2,
        path_mtu: Mtu::Mtu1024,
        ..CmConfig::default()
    });
    let (ia, ib) = connect(&mut a, &mut b);
    assert_eq!(a.qp_params(ia).unwrap().path_mtu, Mtu::Mtu4096);
    assert_eq!(b.qp_params(ib).unwrap().path_mtu, Mtu::Mtu4096);
}

#[test]
fn handshake_reaches_established_with_crossed_psns() {
    let (mut a, mut b) = pair();
    let (ia, ib) = connect(&mut a, &mut b);
    assert_eq!(a.state(ia), Some(IbCmState::Established));
    assert_eq!(b.state(ib), Some(IbCmState::Established));
    let (pa, pb) = (a.qp_params(ia).unwrap(), b.qp_params(ib).unwrap());
    assert_eq!(pa.sq_psn, pb.rq_psn);
    assert_eq!(pb.sq_psn, pa.rq_psn);
    assert_eq!((pa.dest_qp_num, pb.dest_qp_num), (0x22, 0x11));
    assert_eq!(a.timewait_ms(ia), Some(512));
    assert_eq!(b.timewait_ms(ib), Some(512));
}

#[test]
fn dreq_drep_then_timewait_exit_after_512_ms() {
    let (mut a, mut b) = pair();
    let (ia, ib) = connect(&mut a, &mut b);
    let t0 = SimTime::from_millis(1);
    a.send_dreq(t0, ia, &[]).unwrap();
    pump(t0, &mut a, gid(1), &mut b);
    assert_eq!(b.state(ib), Some(IbCmState::DreqRcvd));
    b.send_drep(t0, ib, &[]).unwrap();
    pump(t0, &mut b, gid(2), &mut a);
    assert_eq!(a.state(ia), Some(IbCmState::Timewait));
    assert!(matches!(
        a.poll_event().unwrap().kind,
        IbCmEventKind::DrepReceived(_)
    ));
    assert_eq!(a.poll_timeout(), Some(SimTime::from_millis(513)));
    a.handle_timeout(SimTime::from_millis(512));
    assert_eq!(a.state(ia), Some(IbCmState::Timewait));
    a.handle_timeout(SimTime::from_millis(513));
    assert_eq!(a.state(ia), Some(IbCmState::Idle));
    assert_eq!(a.poll_event().unwrap().kind, IbCmEventKind::TimewaitExit);
}

#[test]
fn req_retries_run_out_after_16_sends_of_4608_ms() {
    let (mut a, _) = pair();
    let ia = a.create_id();
    let req = ReqParams {
        service_id: 1,
        local_gid: gid(1),
        remote_gid: gid(2),
        local_qpn: 0x11,
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        private_data: vec![],
    };
    a.send_req(SimTime::ZERO, ia, &req).unwrap();
    let mut sends = 0;
    while let Some(t) = a.poll_timeout() {
        while a.poll_transmit().is_some() {
            sends += 1;
        }
        a.handle_timeout(t);
    }
    assert_eq!(sends, 16);
    assert_eq!(a.state(ia), Some(IbCmState::Idle));
    assert_eq!(a.poll_event().unwrap().kind, IbCmEventKind::ReqError);
    assert_eq!(a.counters().tx_timeouts, 1);
}

#[test]
fn malformed_mads_are_counted_and_dropped() {
    let (mut a, _) = pair();
    a.handle_datagram(SimTime::ZERO, gid(9), &[0u8; 10]);
    a.handle_datagram(SimTime::ZERO, gid(9), &[0xffu8; 256]);
    assert_eq!(a.counters().rx_malformed, 2);
    assert!(a.poll_transmit().is_none());
}

#[test]
fn dreq_with_wrong_remote_qpn_is_dropped() {
    let (mut a, mut b) = pair();
    let (ia, ib) = connect(&mut a, &mut b);
    let dreq = CmMessage::Dreq(Dreq {
        local_comm_id: a.local_comm_id(ia).unwrap(),
        remote_comm_id: b.local_comm_id(ib).unwrap(),
        remote_qpn_eecn: 0x999,
        private_data: vec![],
    });
    b.handle_datagram(SimTime::ZERO, gid(1), &dreq.encode(1, 0).unwrap());
    assert_eq!(b.counters().rx_wrong_qpn, 1);
    assert_eq!(b.state(ib), Some(IbCmState::Established));
    assert!(b.poll_transmit().is_none());
    assert!(b.poll_event().is_none());
}

#[test]
fn dreq_for_unknown_connection_gets_drep_with_ids_swapped_and_tid_copied() {
    let (_, mut b) = pair();
    let dreq = CmMessage::Dreq(Dreq {
        local_comm_id: 0x1234,
        remote_comm_id: 0x5678,
        remote_qpn_eecn: 0x22,
        private_data: vec![],
    });
    b.handle_datagram(SimTime::ZERO, gid(1), &dreq.encode(0xABCD, 0).unwrap());
    let (dst, mad) = b.poll_transmit().unwrap();
    assert_eq!(dst, gid(1));
    let (hdr, msg) = wire::decode(&mad).unwrap();
    assert_eq!(hdr.transaction_id, 0xABCD);
    let CmMessage::Drep(d) = msg else {
        panic!("not a DREP: {msg:?}")
    };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (0x5678, 0x1234));
}

/// `a` sends a REQ to `b`'s listener; returns the active id and the passive id `b` created.
fn request(a: &mut CmEngine, b: &mut CmEngine, now: SimTime) -> (IbCmId, IbCmId) {
    let l = b.create_id();
    b.listen(l, 0x1060000 | 7471, 4).unwrap();
    let ia = a.create_id();
    let req = ReqParams {
        service_id: 0x1060000 | 7471,
        local_gid: gid(1),
        remote_gid: gid(2),
        local_qpn: 0x11,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        private_data: vec![],
    };
    a.send_req(now, ia, &req).unwrap();
    pump(now, a, gid(1), b);
    let ev = b.poll_event().unwrap();
    assert!(matches!(ev.kind, IbCmEventKind::ReqReceived(_)));
    (ia, ev.id)
}

/// Runs `e`'s timers, dropping what it sends, until it raises an event; returns the time.
fn run_until_event(e: &mut CmEngine) -> (SimTime, IbCmEventKind) {
    loop {
        let t = e.poll_timeout().unwrap();
        e.handle_timeout(t);
        while e.poll_transmit().is_some() {}
        if let Some(ev) = e.poll_event() {
            return (t, ev.kind);
        }
    }
}

/// A request the consumer never answers expires, but never before its active side gave up
/// (whose later REQs were lost here): then IDLE, out of the lookup tables, and the event of
/// the REJ 4 (Timeout) a Linux active side sends when it abandons its id.
#[test]
fn an_unanswered_request_expires_once_its_active_side_has_given_up() {
    let (mut a, mut b) = pair();
    let (_, ib) = request(&mut a, &mut b, SimTime::ZERO);
    let (gave_up, kind) = run_until_event(&mut a);
    assert_eq!(kind, IbCmEventKind::ReqError);
    let expires = b.poll_timeout().unwrap();
    assert!(expires >= gave_up, "{expires:?} before {gave_up:?}");
    b.handle_timeout(SimTime::from_nanos(expires.as_nanos() - 1));
    assert_eq!(b.state(ib), Some(IbCmState::MraReqSent));
    b.handle_timeout(expires);
    assert_eq!(b.state(ib), Some(IbCmState::Idle));
    assert_eq!(b.counters().requests_expired, 1);
    assert_eq!(
        b.poll_event().map(|e| (e.id, e.kind)),
        Some((
            ib,
            IbCmEventKind::RejReceived {
                reason: RejectReason::Timeout.into(),
                ari: 0xAu64.to_be_bytes().to_vec(),
                private_data: vec![],
            }
        ))
    );
    assert_eq!(b.poll_timeout(), None);
    assert!(b.remote_ids.is_empty() && b.remote_qpns.is_empty());
}

/// A duplicate REQ from the request's peer is answered with an MRA, which pushes the active
/// side's wait back by `ms(MRA service timeout) + ms(av.timeout)`: the expiry moves out to
/// the whole budget again, from the duplicate, plus that wait. The same duplicate from another address draws the MRA but moves nothing.
#[test]
fn an_mra_pushes_the_expiry_out_only_for_the_requests_peer() {
    let (mut a, mut b) = pair();
    let (_, ib) = request(&mut a, &mut b, SimTime::ZERO);
    let first = b.poll_timeout().unwrap();
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t); // the REQ's first retransmission
    let (_, dup) = a.poll_transmit().unwrap();
    b.handle_datagram(t, gid(9), &dup);
    assert!(matches!(
        wire::decode(&b.poll_transmit().unwrap().1),
        Ok((_, CmMessage::Mra(_)))
    ));
    assert_eq!(b.poll_timeout(), Some(first));
    b.handle_datagram(t, gid(1), &dup);
    assert!(b.poll_transmit().is_some());
    let after_mra = b.poll_timeout().unwrap();
    let cfg = b.config();
    let mra_wait =
        cm_convert_to_ms(cfg.mra_service_timeout) + cm_convert_to_ms(cfg.packet_life_time + 1);
    // `first` is the whole budget from time zero: from the duplicate, plus the MRA's wait.
    assert_eq!(
        after_mra,
        t.plus_nanos(first.as_nanos() + mra_wait * 1_000_000)
    );
    assert!(after_mra > first);
    b.handle_timeout(after_mra);
    assert_eq!(b.state(ib), Some(IbCmState::Idle));
}

/// A REQ asking for the longest timeouts (exponent 31: 2.3 h per try, 15 retries) buys no
/// more than this node's own settings: the request expires, and an accepted one's REP is
/// retried, on this node's schedule.
#[test]
fn a_req_cannot_buy_longer_timeouts_than_the_nodes_own() {
    let mut b = pair().1;
    let l = b.create_id();
    b.listen(l, 7, 4).unwrap();
    let mut req = Req {
        local_comm_id: 0x1234,
        local_ca_guid: 0xA,
        service_id: 7,
        local_qpn: 0x11,
        remote_cm_response_timeout: 31,
        local_cm_response_timeout: 31,
        max_cm_retries: 15,
        ..Req::default()
    };
    req.primary_path.local_ack_timeout = 31;
    let mad = CmMessage::Req(req).encode(1, 0).unwrap();
    b.handle_datagram(SimTime::ZERO, gid(1), &mad);
    let ib = b.poll_event().unwrap().id;
    let cfg = *b.config();
    let per_try =
        2 * cm_convert_to_ms(cfg.packet_life_time) + cm_convert_to_ms(cfg.cm_response_timeout);
    let bound = per_try * (u64::from(cfg.max_cm_retries) + 1);
    assert_eq!(
        b.poll_timeout(),
        Some(SimTime::from_nanos(bound * 1_000_000))
    );
    let rep = RepParams {
        local_qpn: 0x22,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: vec![],
    };
    b.send_rep(SimTime::ZERO, ib, &rep).unwrap();
    let (gave_up, kind) = run_until_event(&mut b);
    assert_eq!(kind, IbCmEventKind::RepError);
    let rep_try = cm_convert_to_ms(cfg.cm_response_timeout);
    assert_eq!(
        gave_up,
        SimTime::from_nanos(rep_try * 1_000_000 * (u64::from(cfg.max_cm_retries) + 1))
    );
}
