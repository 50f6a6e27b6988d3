//! Shared receive queues: QPs taking receives from an SRQ, the limit event, a QP on an SRQ
//! entering ERR, and the SRQ verbs' checks (docs/semantics-verbs.md, "Shared receive queues").

use super::*;
use crate::pump::pump_pair;
use crate::{SimDevice, SimDeviceConfig};
use verbs_core::manual::{connect_rc, RcParams, RcPeerInfo};

/// A sender with two RC QPs, each connected to one of two receiver QPs that share one SRQ.
struct Srqs {
    tx: SimDevice,
    rx: SimDevice,
    tx_mr: Mr,
    rx_mr: Mr,
    tx_cq: CqHandle,
    rx_cq: CqHandle,
    tx_qps: [Qp; 2],
    rx_qps: [Qp; 2],
    rx_pd: PdHandle,
    srq: SrqHandle,
}

fn params() -> RcParams {
    RcParams {
        mtu: Mtu::Mtu256,
        min_rnr_timer: 1,
        ..RcParams::default()
    }
}

fn srqs(max_wr: u32) -> Srqs {
    let mut tx = SimDevice::new(SimDeviceConfig::new("tx", gid(1)));
    let mut rx = SimDevice::new(SimDeviceConfig::new("rx", gid(2)));
    let tx_pd = tx.alloc_pd().unwrap();
    let rx_pd = rx.alloc_pd().unwrap();
    let tx_mr = tx.reg_mr(tx_pd, 64 * 1024, ALL_ACCESS).unwrap();
    let rx_mr = rx.reg_mr(rx_pd, 64 * 1024, ALL_ACCESS).unwrap();
    let tx_cq = tx.create_cq(256, None).unwrap();
    let rx_cq = rx.create_cq(256, None).unwrap();
    let srq = rx.create_srq(rx_pd, &SrqInitAttr::new(max_wr, 2)).unwrap();
    let mk = |d: &mut SimDevice, pd, cq, srq: Option<SrqHandle>| {
        let mut init = QpInitAttr::rc(cq, cq, caps(16), false);
        init.srq = srq;
        d.create_qp(pd, &init).unwrap()
    };
    let tx_qps = [
        mk(&mut tx, tx_pd, tx_cq, None),
        mk(&mut tx, tx_pd, tx_cq, None),
    ];
    let rx_qps = [
        mk(&mut rx, rx_pd, rx_cq, Some(srq)),
        mk(&mut rx, rx_pd, rx_cq, Some(srq)),
    ];
    for i in 0..2 {
        let t = RcPeerInfo {
            gid: gid(1),
            qpn: tx_qps[i].qp_num,
            psn: 0x100,
        };
        let r = RcPeerInfo {
            gid: gid(2),
            qpn: rx_qps[i].qp_num,
            psn: 0x200,
        };
        connect_rc(&mut tx, tx_qps[i].handle, &t, &r, &params()).unwrap();
        connect_rc(&mut rx, rx_qps[i].handle, &r, &t, &params()).unwrap();
    }
    Srqs {
        tx,
        rx,
        tx_mr,
        rx_mr,
        tx_cq,
        rx_cq,
        tx_qps,
        rx_qps,
        rx_pd,
        srq,
    }
}

impl Srqs {
    /// Posts receive `id` (1 KiB at `id` KiB into the receiver's region) to the SRQ.
    fn post_srq(&mut self, id: u64) {
        let wr = RecvWr::new(id, vec![self.rx_mr.sge(id * 1024, 1024)]);
        self.rx.post_srq_recv(self.srq, &[wr]).unwrap();
    }

    /// Sends `len` bytes of `pattern(len, seed)` on sender QP `i`.
    fn send(&mut self, i: usize, id: u64, len: u32, seed: u8) {
        self.tx
            .mr_write(self.tx_mr.handle, 0, &pattern(len as usize, seed))
            .unwrap();
        let wr = SendWr::send(id, vec![self.tx_mr.sge(0, len)]);
        self.tx.post_send(self.tx_qps[i].handle, &[wr]).unwrap();
    }

    /// Pumps and fires timers until both devices are quiet.
    fn run(&mut self) {
        let mut now = SimTime::ZERO;
        for _ in 0..10_000 {
            pump_pair(&mut self.tx, &mut self.rx, now);
            let next = [self.tx.poll_timeout(), self.rx.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else {
                return;
            };
            now = now.max(t);
            self.tx.handle_timeout(now);
            self.rx.handle_timeout(now);
        }
        panic!("no quiescence");
    }

    /// The receiver's async events but COMM_EST (each QP raises it once on its first
    /// request; `tests/async_events.rs` covers it).
    fn events(&mut self) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| self.rx.get_async_event())
            .filter(|e| e.event_type != AsyncEventType::CommEst)
            .collect()
    }
}

fn limit_attr(srq_limit: u32) -> SrqAttr {
    SrqAttr {
        srq_limit,
        ..SrqAttr::default()
    }
}

#[test]
fn post_recv_on_a_qp_created_with_an_srq_is_einval() {
    let mut s = srqs(8);
    let wr = RecvWr::new(1, vec![s.rx_mr.sge(0, 8)]);
    let e = s.rx.post_recv(s.rx_qps[0].handle, &[wr]).unwrap_err();
    assert_eq!((e.error.errno, e.bad_wr), (Errno::EINVAL, 0));
}

#[test]
fn qp_on_an_srq_reports_no_receive_queue_and_an_unknown_srq_is_einval() {
    let mut s = srqs(8);
    let (_, init) = s.rx.query_qp(s.rx_qps[0].handle).unwrap();
    assert_eq!(init.srq, Some(s.srq));
    assert_eq!((init.cap.max_recv_wr, init.cap.max_recv_sge), (0, 0));
    let bad = QpInitAttr::rc(s.rx_cq, s.rx_cq, caps(4), false).with_srq(SrqHandle(999));
    let e = s.rx.create_qp(s.rx_pd, &bad).unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
}

#[test]
fn sends_on_two_qps_consume_the_srq_in_arrival_order() {
    let mut s = srqs(8);
    for id in 1..=3 {
        s.post_srq(id);
    }
    s.send(0, 100, 10, 1);
    s.run();
    s.send(1, 101, 20, 2);
    s.run();
    s.send(0, 102, 30, 3);
    s.run();
    let wcs = poll(&mut s.rx, s.rx_cq);
    let got: Vec<(u64, u32, u32)> = wcs
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.byte_len))
        .collect();
    let q = [s.rx_qps[0].qp_num, s.rx_qps[1].qp_num];
    assert_eq!(got, vec![(1, q[0], 10), (2, q[1], 20), (3, q[0], 30)]);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let mut buf = vec![0; 20];
    s.rx.mr_read(s.rx_mr.handle, 2 * 1024, &mut buf).unwrap();
    assert_eq!(buf, pattern(20, 2), "receive 2 holds QP 1's message");
}

#[test]
fn empty_srq_answers_rnr_and_a_later_post_lets_the_send_complete() {
    let mut s = srqs(8);
    s.send(0, 100, 10, 1);
    pump_pair(&mut s.tx, &mut s.rx, SimTime::ZERO);
    assert!(s.rx.counters().rnr_naks_sent >= 1);
    assert!(poll(&mut s.rx, s.rx_cq).is_empty());
    s.post_srq(7);
    s.run();
    assert_eq!(
        statuses(&poll(&mut s.rx, s.rx_cq)),
        vec![(7, WcStatus::Success)]
    );
    assert_eq!(
        statuses(&poll(&mut s.tx, s.tx_cq)),
        vec![(100, WcStatus::Success)]
    );
}

#[test]
fn limit_event_fires_once_when_the_count_drops_below_and_disarms() {
    let mut s = srqs(8);
    for id in 1..=4 {
        s.post_srq(id);
    }
    s.rx.modify_srq(s.srq, &limit_attr(3), SrqAttrMask::LIMIT)
        .unwrap();
    assert_eq!(s.rx.query_srq(s.srq).unwrap().srq_limit, 3);
    s.send(0, 100, 8, 1);
    s.run();
    assert!(s.events().is_empty(), "3 left is not below 3");
    s.send(1, 101, 8, 1);
    s.run();
    assert_eq!(
        s.events(),
        vec![AsyncEvent {
            event_type: AsyncEventType::SrqLimitReached,
            element: AsyncElement::Srq(s.srq),
        }]
    );
    assert_eq!(s.rx.query_srq(s.srq).unwrap().srq_limit, 0, "disarmed");
    s.send(0, 102, 8, 1);
    s.run();
    assert!(s.events().is_empty(), "once per arming");
}

#[test]
fn err_on_an_srq_qp_flushes_only_its_taken_receive_then_last_wqe_reached() {
    let mut s = srqs(8);
    for id in 1..=3 {
        s.post_srq(id);
    }
    // A 3-packet SEND (MTU 256): deliver its first packet only, so QP 0 holds receive 1.
    s.send(0, 100, 600, 1);
    let first = s.tx.poll_transmit(SimTime::ZERO).unwrap();
    assert_eq!(first.dst, gid(2));
    s.rx.handle_packet(SimTime::ZERO, gid(1), first.packet);
    s.rx.modify_qp(s.rx_qps[0].handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    let wcs = poll(&mut s.rx, s.rx_cq);
    assert_eq!(statuses(&wcs), vec![(1, WcStatus::WrFlushErr)]);
    assert_eq!(wcs[0].qp_num, s.rx_qps[0].qp_num);
    assert_eq!(
        s.events(),
        vec![AsyncEvent {
            event_type: AsyncEventType::QpLastWqeReached,
            element: AsyncElement::Qp(s.rx_qps[0].qp_num),
        }]
    );
    s.rx.modify_qp(s.rx_qps[0].handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert!(s.events().is_empty(), "ERR -> ERR raises nothing again");
    // The SRQ kept receives 2 and 3 for QP 1.
    s.send(1, 101, 8, 2);
    s.send(1, 102, 8, 3);
    s.run();
    let wcs = poll(&mut s.rx, s.rx_cq);
    assert_eq!(
        statuses(&wcs),
        vec![(2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert!(wcs.iter().all(|w| w.qp_num == s.rx_qps[1].qp_num));
}

/// A removed device flushes its QPs but reports only DEVICE_FATAL: a disassociated context
/// gets no LAST_WQE_REACHED (docs/cm-semantics.md, "Device removal and address change").
#[test]
fn a_removed_device_reports_device_fatal_and_no_last_wqe_reached() {
    let mut s = srqs(8);
    s.post_srq(1);
    s.send(0, 100, 600, 1);
    let first = s.tx.poll_transmit(SimTime::ZERO).unwrap();
    s.rx.handle_packet(SimTime::ZERO, gid(1), first.packet);
    s.rx.remove();
    let wcs = poll(&mut s.rx, s.rx_cq);
    assert_eq!(statuses(&wcs), vec![(1, WcStatus::WrFlushErr)]);
    assert_eq!(
        s.events(),
        vec![AsyncEvent {
            event_type: AsyncEventType::DeviceFatal,
            element: AsyncElement::Device,
        }]
    );
}

#[test]
fn err_on_an_idle_srq_qp_flushes_nothing_of_the_srq() {
    let mut s = srqs(8);
    s.post_srq(1);
    s.rx.modify_qp(s.rx_qps[0].handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert!(poll(&mut s.rx, s.rx_cq).is_empty());
    assert_eq!(s.events().len(), 1);
    s.send(1, 100, 8, 1);
    s.run();
    assert_eq!(
        statuses(&poll(&mut s.rx, s.rx_cq)),
        vec![(1, WcStatus::Success)]
    );
}

#[test]
fn srq_wqes_survive_a_destroyed_qp() {
    let mut s = srqs(8);
    s.post_srq(1);
    s.post_srq(2);
    s.rx.destroy_qp(s.rx_qps[0].handle).unwrap();
    s.send(1, 100, 8, 1);
    s.send(1, 101, 8, 1);
    s.run();
    assert_eq!(
        statuses(&poll(&mut s.rx, s.rx_cq)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

#[test]
fn destroy_srq_is_ebusy_while_a_qp_uses_it() {
    let mut s = srqs(8);
    assert_eq!(s.rx.destroy_srq(s.srq).unwrap_err().errno, Errno::EBUSY);
    s.rx.destroy_qp(s.rx_qps[0].handle).unwrap();
    assert_eq!(s.rx.destroy_srq(s.srq).unwrap_err().errno, Errno::EBUSY);
    s.rx.destroy_qp(s.rx_qps[1].handle).unwrap();
    s.post_srq(1);
    assert_eq!(
        s.rx.dealloc_pd(s.rx_pd).unwrap_err().errno,
        Errno::EBUSY,
        "the SRQ holds its PD"
    );
    s.rx.destroy_srq(s.srq).unwrap();
    assert_eq!(s.rx.destroy_srq(s.srq).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(s.rx.object_counts().srqs, 0);
}

#[test]
fn post_srq_recv_full_is_enomem_and_too_many_sges_einval_naming_the_bad_wr() {
    let mut s = srqs(2);
    let one = |id| RecvWr::new(id, vec![s.rx_mr.sge(0, 8)]);
    let three = RecvWr::new(9, vec![s.rx_mr.sge(0, 8); 3]);
    let e = s.rx.post_srq_recv(s.srq, &[one(1), three]).unwrap_err();
    assert_eq!((e.error.errno, e.bad_wr), (Errno::EINVAL, 1));
    let e = s.rx.post_srq_recv(s.srq, &[one(2), one(3)]).unwrap_err();
    assert_eq!(
        (e.error.errno, e.bad_wr),
        (Errno::ENOMEM, 1),
        "1 and 2 fill it"
    );
    let e = s.rx.post_srq_recv(SrqHandle(77), &[one(4)]).unwrap_err();
    assert_eq!(e.error.errno, Errno::EINVAL);
}

#[test]
fn create_and_modify_srq_check_their_attributes_and_change_nothing_on_error() {
    let mut s = srqs(4);
    let max = s.rx.query_device();
    assert_eq!(
        (max.max_srq, max.max_srq_wr, max.max_srq_sge),
        (0x1_0000, 0x4000, 27)
    );
    let pd = s.rx_pd;
    for bad in [
        SrqInitAttr::new(0, 1),
        SrqInitAttr::new(max.max_srq_wr + 1, 1),
        SrqInitAttr::new(4, max.max_srq_sge + 1),
    ] {
        assert_eq!(s.rx.create_srq(pd, &bad).unwrap_err().errno, Errno::EINVAL);
    }
    let before = SrqAttr {
        max_wr: 4,
        max_sge: 2,
        srq_limit: 0,
    };
    assert_eq!(s.rx.query_srq(s.srq).unwrap(), before);
    let h = s.srq;
    let m = |d: &mut SimDevice, max_wr, srq_limit, mask| {
        let a = SrqAttr {
            max_wr,
            max_sge: 0,
            srq_limit,
        };
        d.modify_srq(h, &a, mask)
    };
    let both = SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT;
    assert_eq!(
        m(&mut s.rx, 8, 5, both).unwrap_err().errno,
        Errno::EINVAL,
        "limit > max_wr"
    );
    assert_eq!(m(&mut s.rx, 0, 0, both).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(s.rx.query_srq(s.srq).unwrap(), before, "nothing changed");
    s.post_srq(1);
    s.post_srq(2);
    assert_eq!(
        m(&mut s.rx, 1, 0, SrqAttrMask::MAX_WR).unwrap_err().errno,
        Errno::EINVAL,
        "smaller than what it holds"
    );
    m(&mut s.rx, 8, 3, both).unwrap();
    assert_eq!(
        m(&mut s.rx, 2, 0, SrqAttrMask::MAX_WR).unwrap_err().errno,
        Errno::EINVAL,
        "below the armed limit"
    );
    assert_eq!(
        s.rx.query_srq(s.srq).unwrap(),
        SrqAttr {
            max_wr: 8,
            max_sge: 2,
            srq_limit: 3
        }
    );
}
