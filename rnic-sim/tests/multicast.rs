//! UD multicast between SimNics on the deterministic fabric (IBTA vol. 1 §10.5.2,
//! `ibv_attach_mcast(3)`): a datagram sent to a group's GID (QPN 0xFFFFFF) reaches every QP
//! attached to the group on every RNIC that is a member — the sender's own RNIC included, and
//! the sending QP itself when attached unless it blocks its own loopback — and nobody else.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use rnic_sim::fabric::{FaultPlan, PathFaults, RunOutcome, SimFabric, Simulation};
use rnic_sim::multicast::{SharedGroups, MULTICAST_QPN};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig, GRH_BYTES};
use std::net::Ipv4Addr;
use verbs_core::{
    AccessFlags, AhAttr, CqHandle, Device, Errno, Gid, GlobalRoute, Mr, Qp, QpAttr, QpAttrMask,
    QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, SimTime, UdWr, WcFlags, WcStatus,
    WorkCompletion,
};

const QKEY: u32 = 0x0123_4567;
const LEN: u32 = 64;

fn mgid() -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(239, 1, 2, 3))
}

struct Host {
    qp: Qp,
    cq: CqHandle,
    mr: Mr,
}

fn nic(last: u8, groups: &SharedGroups) -> SimNic {
    let gid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last));
    let mut n = SimNic::at_gid(SimDevice::new(SimDeviceConfig::new(
        format!("sim{last}"),
        gid,
    )));
    n.set_group_directory(Box::new(groups.clone()));
    n
}

/// A UD QP in RTS with Q_Key `QKEY` and 8 receives of `GRH + LEN` bytes posted.
fn ud_qp(n: &mut SimNic) -> Host {
    let d = n.device_mut();
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(64, None).unwrap();
    let mr = d.reg_mr(pd, 16 * 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = d
        .create_qp(
            pd,
            &QpInitAttr {
                qp_type: QpType::Ud,
                ..QpInitAttr::rc(cq, cq, QpCap::uniform(16, 1, 0), true)
            },
        )
        .unwrap();
    use QpAttrMask as M;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: QKEY,
        ..QpAttr::default()
    };
    d.modify_qp(qp.handle, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY)
        .unwrap();
    a.qp_state = QpState::Rtr;
    d.modify_qp(qp.handle, &a, M::STATE).unwrap();
    a.qp_state = QpState::Rts;
    d.modify_qp(qp.handle, &a, M::STATE | M::SQ_PSN).unwrap();
    let wrs: Vec<RecvWr> = (0..8)
        .map(|i| {
            RecvWr::new(
                100 + i,
                vec![mr.sge(4096 * (i + 1), GRH_BYTES as u32 + LEN)],
            )
        })
        .collect();
    d.post_recv(qp.handle, &wrs).unwrap();
    Host { qp, cq, mr }
}

fn to_group(h: &Host, id: u64) -> SendWr {
    let mut wr = SendWr::send_with_imm(id, vec![h.mr.sge(0, LEN)], h.qp.qp_num);
    wr.ud = UdWr {
        ah: AhAttr {
            grh: GlobalRoute {
                dgid: mgid(),
                hop_limit: 64,
                ..GlobalRoute::default()
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        },
        remote_qpn: MULTICAST_QPN,
        remote_qkey: QKEY,
    };
    wr
}

fn drain(n: &mut SimNic, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    while n.poll_cq(cq, 64, &mut out).unwrap() > 0 {}
    out
}

fn recvs(n: &mut SimNic, cq: CqHandle) -> Vec<WorkCompletion> {
    drain(n, cq)
        .into_iter()
        .filter(|w| w.opcode == verbs_core::WcOpcode::Recv)
        .collect()
}

/// Four RNICs on one fabric: 1 sends; 1, 2 and 3 have a QP attached to the group (1's is the
/// sender itself, plus a second one); 4 is not a member.
#[test]
fn a_group_send_reaches_every_attached_qp_of_every_member_and_nobody_else() {
    let groups = SharedGroups::new();
    let mut nics: Vec<SimNic> = (1..=4).map(|i| nic(i, &groups)).collect();
    let hosts: Vec<Host> = nics.iter_mut().map(ud_qp).collect();
    let second = ud_qp(&mut nics[0]);
    for (n, h) in nics.iter_mut().zip(&hosts).take(3) {
        n.attach_mcast(h.qp.handle, mgid(), 0).unwrap();
    }
    nics[0].attach_mcast(second.qp.handle, mgid(), 0).unwrap();
    // Attaching a unicast GID, or an RC QP, is EINVAL (ib_attach_mcast).
    let unicast = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 9));
    assert_eq!(
        nics[3]
            .attach_mcast(hosts[3].qp.handle, unicast, 0)
            .map_err(|e| e.errno),
        Err(Errno::EINVAL)
    );
    let payload: Vec<u8> = (0..LEN as u8).collect();
    nics[0].mr_write(hosts[0].mr.handle, 0, &payload).unwrap();
    let mut sim = Simulation::new(SimFabric::with_seed(
        7,
        FaultPlan::new(PathFaults::perfect()),
    ));
    for n in nics {
        sim.add_endpoint(n).unwrap();
    }
    // A NIC tells the group directory of its joins when it next runs (as an IGMP report
    // follows a join), which this first run lets each one do.
    sim.run_until_idle(SimTime::from_millis(1));
    sim.endpoint_mut(0)
        .unwrap()
        .post_send(hosts[0].qp.handle, &[to_group(&hosts[0], 1)])
        .unwrap();
    assert_eq!(
        sim.run_until_idle(SimTime::from_millis(100)),
        RunOutcome::Idle
    );
    let sender = hosts[0].qp.qp_num;
    let mut got = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        got.push(recvs(sim.endpoint_mut(i).unwrap(), h.cq));
    }
    let own_second = recvs(sim.endpoint_mut(0).unwrap(), second.cq);
    assert_eq!(
        got.iter().map(Vec::len).collect::<Vec<_>>(),
        [1, 1, 1, 0],
        "the sender's own QP (attached), two other members, not the non-member"
    );
    assert_eq!(own_second.len(), 1, "another QP of the sending RNIC");
    for w in got.iter().flatten().chain(&own_second) {
        assert_eq!(w.status, WcStatus::Success);
        assert_eq!((w.src_qp, w.imm_data), (sender, sender));
        assert!(w.wc_flags.contains(WcFlags::GRH | WcFlags::WITH_IMM));
        assert_eq!(w.byte_len, GRH_BYTES as u32 + LEN);
    }
    // Member 2's buffer: the RoCEv2 GRH (IPv4: 20 zero bytes, then the IP header from 10.0.0.1
    // to the group), then the payload.
    let mut buf = vec![0u8; GRH_BYTES + LEN as usize];
    let wr = got[1][0].wr_id;
    sim.endpoint_mut(1)
        .unwrap()
        .mr_read(hosts[1].mr.handle, 4096 * (wr - 100 + 1), &mut buf)
        .unwrap();
    assert_eq!(&buf[..20], &[0; 20]);
    assert_eq!(
        (buf[20], buf[28], buf[29]),
        (0x45, 64, 17),
        "IPv4, TTL 64, UDP"
    );
    assert_eq!(&buf[32..36], &[10, 0, 0, 1]);
    assert_eq!(&buf[36..40], &[239, 1, 2, 3]);
    assert_eq!(&buf[40..], &payload[..]);
    let copies = sim
        .endpoint(0)
        .unwrap()
        .datagram_counters()
        .tx_multicast_copies;
    assert_eq!(copies, 2, "one datagram per other member");
    assert_eq!(sim.endpoint(3).unwrap().datagram_counters().rx_multicast, 0);
}

/// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: the sending QP gets no copy of its own send, other
/// attached QPs of its RNIC still do; a detached QP gets nothing, and an RNIC whose last QP
/// left the group is no longer sent copies.
#[test]
fn self_loopback_can_be_blocked_and_detach_leaves_the_group() {
    let groups = SharedGroups::new();
    let mut a = nic(1, &groups);
    let mut b = nic(2, &groups);
    let ha = ud_qp(&mut a);
    let ha2 = ud_qp(&mut a);
    let hb = ud_qp(&mut b);
    for h in [&ha, &ha2] {
        a.attach_mcast(h.qp.handle, mgid(), 0).unwrap();
    }
    b.attach_mcast(hb.qp.handle, mgid(), 0).unwrap();
    a.set_block_self_multicast(ha.qp.handle, true).unwrap();
    let mut sim = Simulation::new(SimFabric::with_seed(
        1,
        FaultPlan::new(PathFaults::perfect()),
    ));
    sim.add_endpoint(a).unwrap();
    sim.add_endpoint(b).unwrap();
    sim.run_until_idle(SimTime::from_millis(1));
    let send = |sim: &mut Simulation<SimNic>, id| {
        sim.endpoint_mut(0)
            .unwrap()
            .post_send(ha.qp.handle, &[to_group(&ha, id)])
            .unwrap();
        assert_eq!(
            sim.run_until_idle(SimTime::from_millis(100)),
            RunOutcome::Idle
        );
    };
    send(&mut sim, 1);
    assert_eq!(
        recvs(sim.endpoint_mut(0).unwrap(), ha.cq).len(),
        0,
        "blocked"
    );
    assert_eq!(recvs(sim.endpoint_mut(0).unwrap(), ha2.cq).len(), 1);
    assert_eq!(recvs(sim.endpoint_mut(1).unwrap(), hb.cq).len(), 1);
    // B's only QP leaves: B is no member any more and is sent nothing.
    sim.endpoint_mut(1)
        .unwrap()
        .detach_mcast(hb.qp.handle, mgid(), 0)
        .unwrap();
    assert_eq!(
        sim.endpoint_mut(1)
            .unwrap()
            .detach_mcast(hb.qp.handle, mgid(), 0)
            .map_err(|e| e.errno),
        Err(Errno::EINVAL),
        "not attached"
    );
    let copies_before = sim
        .endpoint(0)
        .unwrap()
        .datagram_counters()
        .tx_multicast_copies;
    sim.run_until_idle(SimTime::from_millis(200)); // B's NIC tells the directory
    send(&mut sim, 2);
    assert_eq!(recvs(sim.endpoint_mut(1).unwrap(), hb.cq).len(), 0);
    assert_eq!(recvs(sim.endpoint_mut(0).unwrap(), ha2.cq).len(), 1);
    let a_counters = sim.endpoint(0).unwrap().datagram_counters();
    assert_eq!(a_counters.tx_multicast_copies, copies_before);
    assert_eq!(a_counters.tx_multicast_no_members, 1);
}

/// A datagram whose ICRC was computed over a group this RNIC is not in is a corrupt datagram
/// to it (counted as a decode error), not a delivery.
#[test]
fn a_multicast_datagram_for_a_group_not_joined_is_dropped() {
    let groups = SharedGroups::new();
    let mut a = nic(1, &groups);
    let mut b = nic(2, &groups);
    let ha = ud_qp(&mut a);
    let hb = ud_qp(&mut b);
    let other = Gid::from_ipv4(Ipv4Addr::new(239, 9, 9, 9));
    b.attach_mcast(hb.qp.handle, other, 0).unwrap();
    // B is listed as a member of mgid() without being one (a stale directory entry).
    let mut stale = groups.clone();
    rnic_sim::multicast::GroupDirectory::join(&mut stale, mgid(), b.addr_of_nic());
    let mut sim = Simulation::new(SimFabric::with_seed(
        1,
        FaultPlan::new(PathFaults::perfect()),
    ));
    sim.add_endpoint(a).unwrap();
    sim.add_endpoint(b).unwrap();
    sim.endpoint_mut(0)
        .unwrap()
        .post_send(ha.qp.handle, &[to_group(&ha, 1)])
        .unwrap();
    sim.run_until_idle(SimTime::from_millis(100));
    let b = sim.endpoint_mut(1).unwrap();
    assert_eq!(recvs(b, hb.cq).len(), 0);
    assert_eq!(b.datagram_counters().rx_decode_errors, 1);
    assert_eq!(b.datagram_counters().rx_multicast, 0);
}

trait NicAddr {
    fn addr_of_nic(&self) -> std::net::SocketAddr;
}

impl NicAddr for SimNic {
    fn addr_of_nic(&self) -> std::net::SocketAddr {
        rnic_sim::fabric::Endpoint::addr(self)
    }
}
