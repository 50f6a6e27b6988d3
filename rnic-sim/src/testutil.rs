//! Test fixtures: two devices with one RC QP each, connected through the lossless pump.

use crate::{pump::pump_pair, SimDevice, SimDeviceConfig};
use verbs_core::manual::{modify_to_init, RcEndpoint, RcEndpointSpec, RcParams};
pub(crate) use verbs_core::manual::{RTR_MASK, RTS_MASK};
use verbs_core::*;

pub(crate) const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

pub(crate) struct Node {
    pub dev: SimDevice,
    pub pd: PdHandle,
    pub scq: CqHandle,
    pub rcq: CqHandle,
    pub qp: Qp,
    pub mr: Mr,
}

pub(crate) fn gid(last: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, last))
}

pub(crate) fn caps(wr: u32) -> QpCap {
    RcEndpointSpec::default().queues(wr, 4, 64).cap
}

pub(crate) fn node_with(last: u8, cap: QpCap, cqe: u32, sq_sig_all: bool) -> Node {
    node_seeded(last, cap, cqe, sq_sig_all, 0)
}

/// [`node_with`] on a device with [`SimDeviceConfig::seed`] `seed`.
pub(crate) fn node_seeded(last: u8, cap: QpCap, cqe: u32, sq_sig_all: bool, seed: u64) -> Node {
    let mut cfg = SimDeviceConfig::new(format!("sim{last}"), gid(last));
    cfg.seed = seed;
    let mut dev = SimDevice::new(cfg);
    let spec = RcEndpointSpec {
        mr_len: 64 * 1024,
        mr_access: ALL_ACCESS,
        cqe,
        cap,
        sq_sig_all,
        ..RcEndpointSpec::default()
    };
    let ep = RcEndpoint::create(&mut dev, &spec).unwrap();
    Node {
        dev,
        pd: ep.pd,
        scq: ep.send_cq,
        rcq: ep.recv_cq,
        qp: ep.qp,
        mr: ep.mr,
    }
}

pub(crate) fn node(last: u8) -> Node {
    node_with(last, caps(16), 256, false)
}

pub(crate) fn to_init(n: &mut Node) {
    let p = RcParams {
        access: ALL_ACCESS,
        ..RcParams::default()
    };
    modify_to_init(&mut n.dev, n.qp.handle, &p).unwrap();
}

/// Attributes for INIT→RTR→RTS towards `peer` (QPN), PSNs `psn`, MTU 256.
pub(crate) fn conn_attr(peer_gid: Gid, peer_qpn: u32, psn: u32) -> QpAttr {
    QpAttr {
        path_mtu: Mtu::Mtu256,
        dest_qp_num: peer_qpn,
        rq_psn: psn,
        sq_psn: psn,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid: peer_gid,
                ..GlobalRoute::default()
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    }
}

pub(crate) fn to_rtr(n: &mut Node, a: &QpAttr) {
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        ..*a
    };
    n.dev.modify_qp(n.qp.handle, &attr, RTR_MASK).unwrap();
}

pub(crate) fn to_rts(n: &mut Node, a: &QpAttr) {
    let attr = QpAttr {
        qp_state: QpState::Rts,
        ..*a
    };
    n.dev.modify_qp(n.qp.handle, &attr, RTS_MASK).unwrap();
}

/// Brings both QPs to RTS, connected to each other, with the given attribute tweak.
pub(crate) fn connect_with(a: &mut Node, b: &mut Node, tweak: impl Fn(&mut QpAttr)) {
    let mut aa = conn_attr(b.dev.gid(), b.qp.qp_num, 0x10);
    let mut ba = conn_attr(a.dev.gid(), a.qp.qp_num, 0x10);
    tweak(&mut aa);
    tweak(&mut ba);
    for (n, at) in [(&mut *a, &aa), (&mut *b, &ba)] {
        to_init(n);
        to_rtr(n, at);
        to_rts(n, at);
    }
}

pub(crate) fn pair() -> (Node, Node) {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    (a, b)
}

pub(crate) fn poll(dev: &mut SimDevice, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    dev.poll_cq(cq, usize::MAX, &mut v).unwrap();
    v
}

pub(crate) fn pump(a: &mut Node, b: &mut Node) -> usize {
    pump_pair(&mut a.dev, &mut b.dev, SimTime::ZERO)
}

/// Pumps and fires timers until nothing is left to do, advancing time; returns the end time.
pub(crate) fn run(a: &mut Node, b: &mut Node, mut now: SimTime) -> SimTime {
    for _ in 0..10_000 {
        pump_pair(&mut a.dev, &mut b.dev, now);
        let next = [a.dev.poll_timeout(), b.dev.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else {
            return now;
        };
        now = now.max(t);
        a.dev.handle_timeout(now);
        b.dev.handle_timeout(now);
    }
    panic!("no quiescence");
}

pub(crate) fn statuses(v: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    v.iter().map(|w| (w.wr_id, w.status)).collect()
}

pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
