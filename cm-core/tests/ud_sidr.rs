//! UD ids on rdma_cm (`RDMA_PS_UDP`): SIDR instead of a connection (Linux cma.c
//! `cma_resolve_ib_udp`, `cma_sidr_rep_handler`, `cma_ib_req_handler`, `cma_send_sidr_rep`),
//! the UD QP of `rdma_create_qp` (librdmacm `ucma_init_ud_qp`), and multicast joins
//! (`rdma_join_multicast`, `ucma_process_join`), two `RdmaCm`s over the harness.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod harness;

use cm_core::api::{CmEventType as E, RdmaCmState, MULTICAST_QPN, RDMA_UDP_QKEY};
use cm_core::engine::{IbCmId, IbCmState};
use cm_core::wire::{
    CmMessage, RdmaPortSpace, SidrRep, CM_SIDR_REP_ATTR_ID as SIDR_REP,
    CM_SIDR_REQ_ATTR_ID as SIDR_REQ, RDMA_UDP_SIDR_REQ_USER_PRIVATE_DATA_MAX,
};
use harness::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use verbs_core::{CqHandle, Errno, Gid, PdHandle, QpCap, QpInitAttr, QpState, QpType, SimTime};

fn ud_init() -> QpInitAttr {
    QpInitAttr {
        qp_type: QpType::Ud,
        ..QpInitAttr::rc(CqHandle(1), CqHandle(1), QpCap::uniform(16, 1, 0), false)
    }
}

fn server() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip(1)), PORT)
}

/// Host 1 listens on PORT in the UDP port space.
fn ud_listen(w: &mut World) -> cm_core::api::CmIdHandle {
    let h = &mut w.hosts[1];
    let l = h.cm.create_id(h.ch, RdmaPortSpace::Udp).unwrap();
    h.cm.bind_addr(l, server()).unwrap();
    h.cm.listen(l, 8).unwrap();
    l
}

/// Host 0: a UD id with a route to host 1 and its UD QP.
fn ud_active(w: &mut World) -> cm_core::api::CmIdHandle {
    let h = &mut w.hosts[0];
    let id = h.cm.create_id(h.ch, RdmaPortSpace::Udp).unwrap();
    h.cm.resolve_addr(id, None, server()).unwrap();
    h.cm.resolve_route(id).unwrap();
    h.cm.create_qp(&mut h.dev, id, PdHandle(1), &ud_init())
        .unwrap();
    w.collect();
    id
}

fn ud_connect(w: &mut World, id: cm_core::api::CmIdHandle, pd: &[u8]) {
    let now = w.now;
    let h = &mut w.hosts[0];
    let p = cm_core::api::ConnParam {
        private_data: pd.to_vec(),
        ..Default::default()
    };
    h.cm.connect(&mut h.dev, now, id, &p).unwrap();
}

fn last_request(w: &World) -> cm_core::api::CmEvent {
    w.events_of(1, E::ConnectRequest).last().unwrap().1.clone()
}

/// `rdma_create_qp` on a UD id: INIT with the id's Q_Key (RDMA_UDP_QKEY), RTR, RTS with SQ
/// PSN 0, at once (`ucma_init_ud_qp`).
#[test]
fn a_ud_ids_qp_is_in_rts_with_rdma_udp_qkey() {
    let mut w = World::new();
    let id = ud_active(&mut w);
    let qp = w.hosts[0].cm.qp(id).unwrap();
    let a = w.hosts[0].dev.qp_attr(qp);
    assert_eq!(
        (a.qp_state, a.qkey, a.sq_psn),
        (QpState::Rts, RDMA_UDP_QKEY, 0)
    );
    let log: Vec<QpState> = w.hosts[0]
        .dev
        .modify_log
        .iter()
        .filter(|(q, _)| *q == qp.qp_num)
        .map(|(_, s)| *s)
        .collect();
    assert_eq!(log, [QpState::Init, QpState::Rtr, QpState::Rts]);
}

/// `rdma_connect` on a UD id sends a SIDR_REQ; the listener's CONNECT_REQUEST carries the 180
/// bytes after the IP-CM header; `rdma_accept` answers with the passive QP's number and the
/// Q_Key, and the active side's ESTABLISHED has them with the address vector of the route. No
/// REQ, REP or RTU, no ESTABLISHED on the passive side, both IB CM ids IDLE.
#[test]
fn connect_is_sidr_and_established_carries_qpn_qkey_and_address_vector() {
    let mut w = World::new();
    ud_listen(&mut w);
    let a = ud_active(&mut w);
    ud_connect(&mut w, a, b"hello");
    assert!(w.run_until(1, E::ConnectRequest));
    let req = last_request(&w);
    assert_eq!(
        req.param.private_data.len(),
        RDMA_UDP_SIDR_REQ_USER_PRIVATE_DATA_MAX
    );
    assert_eq!(&req.param.private_data[..5], b"hello");
    assert_eq!(req.ud.as_ref().map(|u| u.qp_num), Some(0));
    let child = req.id;
    let now = w.now;
    let h = &mut w.hosts[1];
    h.cm.create_qp(&mut h.dev, child, PdHandle(1), &ud_init())
        .unwrap();
    let child_qpn = h.cm.qp(child).unwrap().qp_num;
    let accept = cm_core::api::ConnParam {
        private_data: b"welcome".to_vec(),
        ..Default::default()
    };
    h.cm.accept(&mut h.dev, now, child, &accept).unwrap();
    assert!(w.run_until(0, E::Established));
    w.run();
    let est = &w.events_of(0, E::Established)[0].1;
    assert_eq!(est.status, 0);
    let ud = *est.ud.clone().unwrap();
    assert_eq!((ud.qp_num, ud.qkey), (child_qpn, RDMA_UDP_QKEY));
    assert_eq!(ud.ah_attr.grh.dgid, Gid::from_ipv4(ip(1)));
    assert!(ud.ah_attr.is_global);
    assert_eq!((ud.ah_attr.grh.hop_limit, ud.ah_attr.port_num), (64, 1));
    let (src, _) = w.hosts[0].cm.addrs(a).unwrap();
    let flow_label = (u32::from(src.unwrap().port()) * 31 + u32::from(PORT)) & 0xF_FFFF;
    assert_eq!(ud.ah_attr.grh.flow_label, flow_label);
    assert_eq!(&est.param.private_data[..7], b"welcome");
    assert_eq!((w.sent(0, SIDR_REQ), w.sent(1, SIDR_REP)), (1, 1));
    assert_eq!(w.wire.len(), 2, "nothing but the SIDR_REQ and its SIDR_REP");
    assert_eq!(w.types(1), [E::ConnectRequest]);
    assert_eq!(w.hosts[0].cm.ib_cm_state(a), Some(IbCmState::Idle));
    assert_eq!(w.hosts[1].cm.ib_cm_state(child), Some(IbCmState::Idle));
    assert_eq!(w.hosts[0].cm.state(a), Some(RdmaCmState::Connect));
}

/// `rdma_reject` on a UD request: SIDR_REP status 2; the active side's event is UNREACHABLE
/// with status 2 (`cma_sidr_rep_handler`: `event.status = rep->status`) and the private data.
#[test]
fn reject_is_unreachable_with_the_sidr_status() {
    let mut w = World::new();
    ud_listen(&mut w);
    let a = ud_active(&mut w);
    ud_connect(&mut w, a, b"");
    assert!(w.run_until(1, E::ConnectRequest));
    let child = last_request(&w).id;
    let now = w.now;
    let h = &mut w.hosts[1];
    h.cm.reject(&mut h.dev, now, child, b"busy").unwrap();
    assert!(w.run_until(0, E::Unreachable));
    let ev = &w.events_of(0, E::Unreachable)[0].1;
    assert_eq!(ev.status, 2);
    assert_eq!(&ev.param.private_data[..4], b"busy");
    assert!(!w.has(0, E::Rejected));
}

/// No listener on the port: the SIDR_REP says "unsupported", UNREACHABLE status 1.
#[test]
fn no_listener_is_unreachable_status_1() {
    let mut w = World::new();
    let a = ud_active(&mut w);
    ud_connect(&mut w, a, b"");
    assert!(w.run_until(0, E::Unreachable));
    assert_eq!(w.events_of(0, E::Unreachable)[0].1.status, 1);
}

/// Nobody answers: 16 SIDR_REQs 4096 ms apart, then UNREACHABLE −ETIMEDOUT.
#[test]
fn no_answer_is_unreachable_etimedout_after_the_retries() {
    let mut w = World::new();
    w.fault = Box::new(|s| {
        if s.from == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    ud_listen(&mut w);
    let a = ud_active(&mut w);
    ud_connect(&mut w, a, b"");
    assert!(w.run_until(0, E::Unreachable));
    let (at, ev) = w.events_of(0, E::Unreachable)[0].clone();
    assert_eq!(ev.status, -Errno::ETIMEDOUT.code());
    assert_eq!(w.sent(0, SIDR_REQ), 16);
    assert_eq!(at.as_nanos() / 1_000_000, 16 * 4096);
}

/// A SIDR_REP whose Q_Key is not the id's (its UD QP took RDMA_UDP_QKEY) is ADDR_ERROR −EINVAL
/// (`cma_sidr_rep_handler` → `cma_set_qkey`).
#[test]
fn a_sidr_rep_with_another_qkey_is_addr_error() {
    let mut w = World::new();
    let a = ud_active(&mut w);
    ud_connect(&mut w, a, b"");
    w.collect();
    let request_id = w.hosts[0].cm.engine().local_comm_id(IbCmId(a.0)).unwrap();
    let mad = CmMessage::SidrRep(SidrRep {
        request_id,
        qpn: 0x42,
        q_key: 0x1111,
        ..SidrRep::default()
    })
    .encode(9, 0)
    .unwrap();
    let now = w.now;
    let h = &mut w.hosts[0];
    h.cm.handle_datagram(&mut h.dev, now, Gid::from_ipv4(ip(1)), &mad);
    w.collect();
    let ev = &w.events_of(0, E::AddrError)[0].1;
    assert_eq!(ev.status, -Errno::EINVAL.code());
    assert!(!w.has(0, E::Established));
}

/// A SIDR_REQ naming a connected (TCP) listener's service is refused with status 2
/// (`cma_ib_check_req_qp_type`), and the listener sees nothing.
#[test]
fn a_sidr_req_for_a_connected_listener_is_rejected() {
    let mut w = World::new();
    w.listen(); // TCP, PORT
    let h = &mut w.hosts[0];
    let id = h.cm.create_id(h.ch, RdmaPortSpace::Udp).unwrap();
    h.cm.resolve_addr(id, None, server()).unwrap();
    h.cm.resolve_route(id).unwrap();
    w.collect();
    let hdr = cm_core::wire::IpCmHeader {
        src_port: 5000,
        src_addr: IpAddr::V4(ip(0)),
        dst_addr: IpAddr::V4(ip(1)),
    };
    let mad = CmMessage::SidrReq(cm_core::wire::SidrReq {
        request_id: 77,
        partition_key: 0xFFFF,
        service_id: cm_core::wire::ip_service_id(RdmaPortSpace::Tcp, PORT),
        private_data: hdr.sidr_req_private_data(b"").unwrap(),
    })
    .encode(3, 0)
    .unwrap();
    let now = w.now;
    let h = &mut w.hosts[1];
    h.cm.handle_datagram(&mut h.dev, now, Gid::from_ipv4(ip(0)), &mad);
    w.collect();
    assert!(!w.has(1, E::ConnectRequest));
    assert_eq!(w.sent(1, SIDR_REP), 1);
}

// ---------------------------------------------------------------------------------------------
// Multicast

fn group() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 1, 2, 3)), 0)
}

/// Host 0: a UD id resolved "to" the group (as mckey does) with its QP.
fn mc_id(w: &mut World) -> cm_core::api::CmIdHandle {
    let h = &mut w.hosts[0];
    let id = h.cm.create_id(h.ch, RdmaPortSpace::Udp).unwrap();
    let src = SocketAddr::new(IpAddr::V4(ip(0)), 0);
    h.cm.resolve_addr(id, Some(src), group()).unwrap();
    w.collect();
    assert!(w.has(0, E::AddrResolved));
    let h = &mut w.hosts[0];
    h.cm.create_qp(&mut h.dev, id, PdHandle(1), &ud_init())
        .unwrap();
    id
}

/// `rdma_join_multicast`: MULTICAST_JOIN with QPN 0xFFFFFF, the id's Q_Key and an address
/// vector to `::ffff:239.1.2.3` (hop limit 64); fetching it attaches the id's QP to the group;
/// `rdma_leave_multicast` detaches it, and a second leave is EADDRNOTAVAIL.
#[test]
fn join_reports_the_group_and_attaches_the_qp_leave_detaches() {
    let mut w = World::new();
    let id = mc_id(&mut w);
    w.hosts[0].cm.join_multicast(id, group(), false).unwrap();
    w.collect();
    let ev = &w.events_of(0, E::MulticastJoin)[0].1;
    assert_eq!(ev.status, 0);
    assert_eq!(ev.multicast, Some(group()));
    let ud = *ev.ud.clone().unwrap();
    let mgid = Gid::from_ipv4(Ipv4Addr::new(239, 1, 2, 3));
    assert_eq!((ud.qp_num, ud.qkey), (MULTICAST_QPN, RDMA_UDP_QKEY));
    assert_eq!(ud.ah_attr.grh.dgid, mgid);
    assert_eq!((ud.ah_attr.grh.hop_limit, ud.ah_attr.dlid), (64, 0));
    let qpn = w.hosts[0].cm.qp(id).unwrap().qp_num;
    assert!(w.hosts[0].dev.mcast.contains(&(qpn, mgid)));
    assert_eq!(w.hosts[0].cm.multicast_unacked(id, group()), 0);
    let h = &mut w.hosts[0];
    h.cm.leave_multicast(&mut h.dev, id, group()).unwrap();
    assert!(h.dev.mcast.is_empty());
    assert_eq!(
        h.cm.leave_multicast(&mut h.dev, id, group())
            .map_err(|e| e.errno),
        Err(Errno::EADDRNOTAVAIL)
    );
    assert!(w.wire.is_empty(), "no MAD: RoCE has no SA to ask");
}

/// A send-only join does not attach the QP (`RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`).
#[test]
fn a_send_only_join_does_not_attach() {
    let mut w = World::new();
    let id = mc_id(&mut w);
    w.hosts[0].cm.join_multicast(id, group(), true).unwrap();
    w.collect();
    assert!(w.has(0, E::MulticastJoin));
    assert!(w.hosts[0].dev.mcast.is_empty());
}

/// Leaving before the MULTICAST_JOIN was read drops it; a held one is counted until acked.
#[test]
fn leave_drops_unread_join_events_and_counts_held_ones() {
    let mut w = World::new();
    let id = mc_id(&mut w);
    w.hosts[0].read_events = false;
    w.hosts[0].cm.join_multicast(id, group(), false).unwrap();
    let h = &mut w.hosts[0];
    h.cm.leave_multicast(&mut h.dev, id, group()).unwrap();
    assert_eq!(h.cm.pending_events(h.ch), 0);
    h.cm.join_multicast(id, group(), false).unwrap();
    let ev = h.cm.get_cm_event(&mut h.dev, SimTime::ZERO, h.ch).unwrap();
    assert_eq!(ev.event, E::MulticastJoin);
    assert_eq!(h.cm.multicast_unacked(id, group()), 1);
    h.cm.ack_cm_event(ev).unwrap();
    assert_eq!(h.cm.multicast_unacked(id, group()), 0);
}

/// Joins Linux refuses: an id not bound to the device (EINVAL), the zero address (EINVAL), an
/// IPv6 group on a RoCEv2 port (Linux −ENOTSUPP; here EOPNOTSUPP).
#[test]
fn joins_linux_refuses_are_refused() {
    let mut w = World::new();
    let h = &mut w.hosts[0];
    let idle = h.cm.create_id(h.ch, RdmaPortSpace::Udp).unwrap();
    assert_eq!(
        h.cm.join_multicast(idle, group(), false)
            .map_err(|e| e.errno),
        Err(Errno::EINVAL)
    );
    let id = mc_id(&mut w);
    let h = &mut w.hosts[0];
    let zero = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
    assert_eq!(
        h.cm.join_multicast(id, zero, false).map_err(|e| e.errno),
        Err(Errno::EINVAL)
    );
    let v6 = SocketAddr::new(IpAddr::V6("ff0e::1".parse::<Ipv6Addr>().unwrap()), 0);
    assert_eq!(
        h.cm.join_multicast(id, v6, false).map_err(|e| e.errno),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(h.cm.pending_events(h.ch), 0);
}
