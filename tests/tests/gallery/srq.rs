//! # Gallery: shared receive queues
//!
//! One test per rule of `docs/semantics-verbs.md`, "Shared receive queues", written as an
//! application would: two simulated RNICs ([`SimDevice`]) driven only through the
//! [`verbs_core::Device`] trait, connected by the lossless in-process wire
//! ([`rnic_sim::pump::pump_pair`]). Host A sends on two RC QPs; host B's two QPs share one SRQ.
//!
//! To copy a test: `let mut h = Hosts::new(max_wr)`, post receives with `h.post_srq(id)`,
//! send with `h.send(qp, wr_id, len)`, move the wire with `h.run()`, and look at
//! `h.recv_completions()` and `h.b_events()`.

use rnic_sim::pump::pump_pair;
use rnic_sim::{SimDevice, SimDeviceConfig};
use verbs_core::manual::{connect_rc, RcParams, RcPeerInfo};
use verbs_core::{
    AccessFlags, AsyncElement, AsyncEvent, AsyncEventType, CqHandle, Device, Errno, Gid, Mr, Mtu,
    PdHandle, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, RecvWr, SendWr, SimTime, SrqAttr,
    SrqAttrMask, SrqHandle, SrqInitAttr, WcStatus, WorkCompletion,
};

const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

fn gid(last: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(192, 168, 0, last))
}

/// Host A (two plain RC QPs) connected to host B (two RC QPs on one SRQ).
struct Hosts {
    a: SimDevice,
    b: SimDevice,
    a_mr: Mr,
    b_mr: Mr,
    a_cq: CqHandle,
    b_cq: CqHandle,
    a_qps: [Qp; 2],
    b_qps: [Qp; 2],
    b_pd: PdHandle,
    srq: SrqHandle,
}

impl Hosts {
    fn new(max_wr: u32) -> Hosts {
        let mut a = SimDevice::new(SimDeviceConfig::new("a", gid(1)));
        let mut b = SimDevice::new(SimDeviceConfig::new("b", gid(2)));
        let (a_pd, b_pd) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let a_mr = a.reg_mr(a_pd, 1 << 16, ALL).unwrap();
        let b_mr = b.reg_mr(b_pd, 1 << 16, ALL).unwrap();
        let (a_cq, b_cq) = (
            a.create_cq(64, None).unwrap(),
            b.create_cq(64, None).unwrap(),
        );
        // The SRQ first; then QPs created with `init.srq` set take their receives from it.
        let srq = b.create_srq(b_pd, &SrqInitAttr::new(max_wr, 1)).unwrap();
        let cap = QpCap::uniform(16, 1, 0);
        let a_init = QpInitAttr::rc(a_cq, a_cq, cap, false);
        let b_init = QpInitAttr::rc(b_cq, b_cq, cap, false).with_srq(srq);
        let a_qps = [
            a.create_qp(a_pd, &a_init).unwrap(),
            a.create_qp(a_pd, &a_init).unwrap(),
        ];
        let b_qps = [
            b.create_qp(b_pd, &b_init).unwrap(),
            b.create_qp(b_pd, &b_init).unwrap(),
        ];
        let p = RcParams {
            mtu: Mtu::Mtu256,
            min_rnr_timer: 1,
            ..RcParams::default()
        };
        for i in 0..2 {
            let ai = RcPeerInfo {
                gid: gid(1),
                qpn: a_qps[i].qp_num,
                psn: 1,
            };
            let bi = RcPeerInfo {
                gid: gid(2),
                qpn: b_qps[i].qp_num,
                psn: 2,
            };
            connect_rc(&mut a, a_qps[i].handle, &ai, &bi, &p).unwrap();
            connect_rc(&mut b, b_qps[i].handle, &bi, &ai, &p).unwrap();
        }
        Hosts {
            a,
            b,
            a_mr,
            b_mr,
            a_cq,
            b_cq,
            a_qps,
            b_qps,
            b_pd,
            srq,
        }
    }

    /// Posts receive `id`: 1 KiB at `id` KiB into B's region.
    fn post_srq(&mut self, id: u64) {
        let wr = RecvWr::new(id, vec![self.b_mr.sge(id * 1024, 1024)]);
        self.b.post_srq_recv(self.srq, &[wr]).unwrap();
    }

    /// Posts a SEND of `len` bytes on A's QP `qp`.
    fn send(&mut self, qp: usize, wr_id: u64, len: u32) {
        let wr = SendWr::send(wr_id, vec![self.a_mr.sge(0, len)]);
        self.a.post_send(self.a_qps[qp].handle, &[wr]).unwrap();
    }

    /// Moves packets and fires timers until both hosts are idle.
    fn run(&mut self) {
        let mut now = SimTime::ZERO;
        loop {
            pump_pair(&mut self.a, &mut self.b, now);
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else { return };
            now = now.max(t);
            self.a.handle_timeout(now);
            self.b.handle_timeout(now);
        }
    }

    fn recv_completions(&mut self) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        self.b.poll_cq(self.b_cq, 64, &mut v).unwrap();
        v
    }

    fn send_completions(&mut self) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        self.a.poll_cq(self.a_cq, 64, &mut v).unwrap();
        v
    }

    /// Host B's async events but COMM_EST, which each QP raises once on its first request
    /// (docs/semantics-verbs.md, "Async events") and is not what these tests are about.
    fn b_events(&mut self) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| self.b.get_async_event())
            .filter(|e| e.event_type != AsyncEventType::CommEst)
            .collect()
    }

    fn b_qp_to_err(&mut self, qp: usize) {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        self.b
            .modify_qp(self.b_qps[qp].handle, &attr, QpAttrMask::STATE)
            .unwrap();
    }
}

fn ids(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus, u32)> {
    wcs.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect()
}

#[test]
fn srq_receives_are_consumed_in_arrival_order_by_whichever_qp_receives() {
    let mut h = Hosts::new(8);
    for id in 1..=3 {
        h.post_srq(id);
    }
    h.send(1, 10, 100);
    h.run();
    h.send(0, 11, 200);
    h.run();
    h.send(1, 12, 300);
    h.run();
    let (q0, q1) = (h.b_qps[0].qp_num, h.b_qps[1].qp_num);
    let wcs = h.recv_completions();
    assert_eq!(
        ids(&wcs),
        vec![
            (1, WcStatus::Success, q1),
            (2, WcStatus::Success, q0),
            (3, WcStatus::Success, q1)
        ],
        "oldest receive first; the completion names the QP that received"
    );
    assert_eq!(
        wcs.iter().map(|w| w.byte_len).collect::<Vec<_>>(),
        [100, 200, 300]
    );
}

#[test]
fn post_recv_on_a_qp_with_an_srq_is_einval() {
    let mut h = Hosts::new(8);
    let wr = RecvWr::new(1, vec![h.b_mr.sge(0, 64)]);
    let e = h.b.post_recv(h.b_qps[0].handle, &[wr]).unwrap_err();
    assert_eq!((e.error.errno, e.bad_wr), (Errno::EINVAL, 0));
}

#[test]
fn empty_srq_means_rnr_nak_and_the_send_completes_once_a_receive_is_posted() {
    let mut h = Hosts::new(8);
    h.send(0, 10, 64);
    pump_pair(&mut h.a, &mut h.b, SimTime::ZERO);
    assert!(h.b.counters().rnr_naks_sent > 0);
    h.post_srq(1);
    h.run();
    assert_eq!(
        ids(&h.recv_completions()),
        [(1, WcStatus::Success, h.b_qps[0].qp_num)]
    );
    assert_eq!(ids(&h.send_completions())[0].1, WcStatus::Success);
}

#[test]
fn srq_limit_event_fires_once_below_the_limit_and_query_then_reads_zero() {
    let mut h = Hosts::new(8);
    for id in 1..=3 {
        h.post_srq(id);
    }
    let arm = SrqAttr {
        srq_limit: 2,
        ..SrqAttr::default()
    };
    h.b.modify_srq(h.srq, &arm, SrqAttrMask::LIMIT).unwrap();
    h.send(0, 10, 8); // 2 left: not below 2
    h.run();
    assert_eq!(h.b_events(), []);
    h.send(1, 11, 8); // 1 left: below
    h.run();
    assert_eq!(
        h.b_events(),
        [AsyncEvent {
            event_type: AsyncEventType::SrqLimitReached,
            element: AsyncElement::Srq(h.srq),
        }]
    );
    assert_eq!(h.b.query_srq(h.srq).unwrap().srq_limit, 0);
    h.send(0, 12, 8);
    h.run();
    assert_eq!(h.b_events(), [], "disarmed until modify_srq arms it again");
}

#[test]
fn srq_limit_above_max_wr_is_einval() {
    let mut h = Hosts::new(4);
    let arm = SrqAttr {
        srq_limit: 5,
        ..SrqAttr::default()
    };
    let e = h.b.modify_srq(h.srq, &arm, SrqAttrMask::LIMIT).unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
}

#[test]
fn qp_on_an_srq_entering_err_flushes_only_the_receive_it_took_then_last_wqe_reached() {
    let mut h = Hosts::new(8);
    for id in 1..=3 {
        h.post_srq(id);
    }
    // A 3-packet SEND (MTU 256) of which B sees the first packet: QP 0 holds receive 1.
    h.send(0, 10, 600);
    let first = h.a.poll_transmit(SimTime::ZERO).unwrap();
    h.b.handle_packet(SimTime::ZERO, gid(1), first.packet);
    h.b_qp_to_err(0);
    let q0 = h.b_qps[0].qp_num;
    assert_eq!(ids(&h.recv_completions()), [(1, WcStatus::WrFlushErr, q0)]);
    assert_eq!(
        h.b_events(),
        [AsyncEvent {
            event_type: AsyncEventType::QpLastWqeReached,
            element: AsyncElement::Qp(q0),
        }]
    );
    // Receives 2 and 3 are still the SRQ's: QP 1 gets them.
    h.send(1, 11, 8);
    h.send(1, 12, 8);
    h.run();
    let q1 = h.b_qps[1].qp_num;
    assert_eq!(
        ids(&h.recv_completions()),
        [(2, WcStatus::Success, q1), (3, WcStatus::Success, q1)]
    );
}

#[test]
fn destroy_srq_is_ebusy_while_a_qp_uses_it() {
    let mut h = Hosts::new(8);
    assert_eq!(h.b.destroy_srq(h.srq).unwrap_err().errno, Errno::EBUSY);
    assert_eq!(h.b.dealloc_pd(h.b_pd).unwrap_err().errno, Errno::EBUSY);
    h.b.destroy_qp(h.b_qps[0].handle).unwrap();
    h.b.destroy_qp(h.b_qps[1].handle).unwrap();
    h.b.destroy_srq(h.srq).unwrap();
}

#[test]
fn srq_receives_outlive_a_destroyed_qp() {
    let mut h = Hosts::new(8);
    h.post_srq(1);
    h.b.destroy_qp(h.b_qps[0].handle).unwrap();
    assert_eq!(h.recv_completions(), [], "destroy_qp flushes nothing");
    h.send(1, 10, 8);
    h.run();
    assert_eq!(
        ids(&h.recv_completions()),
        [(1, WcStatus::Success, h.b_qps[1].qp_num)]
    );
}

#[test]
fn post_srq_recv_names_the_first_wr_it_refused() {
    let mut h = Hosts::new(2);
    let wr = |id| RecvWr::new(id, vec![h.b_mr.sge(0, 8)]);
    let e =
        h.b.post_srq_recv(h.srq, &[wr(1), wr(2), wr(3)])
            .unwrap_err();
    assert_eq!(
        (e.error.errno, e.bad_wr),
        (Errno::ENOMEM, 2),
        "full after two"
    );
    let two_sges = RecvWr::new(4, vec![h.b_mr.sge(0, 8); 2]);
    h.b.destroy_qp(h.b_qps[0].handle).unwrap();
    let other = h.b.create_srq(h.b_pd, &SrqInitAttr::new(4, 1)).unwrap();
    let e = h.b.post_srq_recv(other, &[two_sges]).unwrap_err();
    assert_eq!((e.error.errno, e.bad_wr), (Errno::EINVAL, 0), "max_sge 1");
}
