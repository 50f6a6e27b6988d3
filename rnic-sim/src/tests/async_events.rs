//! Affiliated async events of QPs (QP_FATAL on CQ overrun, QP_ACCESS_ERR and QP_REQ_ERR on
//! responder errors no receive can report, COMM_EST on the first request), the undefined
//! fields of error completions, and the completions of a destroyed QP
//! (docs/semantics-verbs.md: "Async events", "CQ overrun", "Entering ERR and flushing",
//! "CQEs of a destroyed QP").

use super::*;
use crate::SimDevice;

fn qp_event(event_type: AsyncEventType, qpn: u32) -> AsyncEvent {
    AsyncEvent {
        event_type,
        element: AsyncElement::Qp(qpn),
    }
}

fn events(dev: &mut SimDevice) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| dev.get_async_event()).collect()
}

/// Events other than COMM_EST (which every first request raises).
fn error_events(dev: &mut SimDevice) -> Vec<AsyncEvent> {
    events(dev)
        .into_iter()
        .filter(|e| e.event_type != AsyncEventType::CommEst)
        .collect()
}

#[test]
fn cq_overrun_raises_cq_err_then_qp_fatal_once_on_the_qp_that_lost_the_completion() {
    let mut a = node_with(1, caps(8), 2, false);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    let rs: Vec<_> = (0..4).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    let ss: Vec<_> = (0..4).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    pump(&mut a, &mut b);
    // Four completions for a CQ of two: the third overruns it, the fourth and the flushes are
    // dropped; one QP_FATAL, after the CQ_ERR.
    assert_eq!(
        events(&mut a.dev),
        [
            AsyncEvent {
                event_type: AsyncEventType::CqErr,
                element: AsyncElement::Cq(a.scq)
            },
            qp_event(AsyncEventType::QpFatal, a.qp.qp_num)
        ]
    );
    assert_eq!(state(&a), QpState::Err);
    // Posting more into the dead QP loses more completions, but raises nothing again.
    a.dev.post_send(a.qp.handle, &[send(&a, 9, 0, 8)]).unwrap();
    assert_eq!(events(&mut a.dev), []);
    assert_eq!(error_events(&mut b.dev), []);
}

#[test]
fn qp_fatal_is_raised_again_after_the_qp_went_through_reset() {
    let mut a = node_with(1, caps(8), 1, false);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    a.dev
        .post_recv(a.qp.handle, &[recv(&a, 1, 0, 8), recv(&a, 2, 0, 8)])
        .unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    let fatal = |d: &mut SimDevice| {
        events(d)
            .into_iter()
            .filter(|e| e.event_type == AsyncEventType::QpFatal)
            .count()
    };
    assert_eq!(fatal(&mut a.dev), 1, "the second flush overran the CQ");
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    a.dev
        .modify_qp(a.qp.handle, &reset, QpAttrMask::STATE)
        .unwrap();
    to_init(&mut a);
    a.dev.post_recv(a.qp.handle, &[recv(&a, 3, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(fatal(&mut a.dev), 1, "the CQ is still overrun: lost again");
}

#[test]
fn bad_rkey_on_an_rdma_write_raises_qp_access_err_on_the_responder_only() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 40, 0, 8)]).unwrap();
    let wr = SendWr::rdma_write(1, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey ^ 0x1);
    a.dev.post_send(a.qp.handle, &[wr]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        [(1, WcStatus::RemAccessErr)]
    );
    // No receive carries the error (IBTA C9-222.1.1): an affiliated event on b's QP.
    assert_eq!(
        error_events(&mut b.dev),
        [qp_event(AsyncEventType::QpAccessErr, b.qp.qp_num)]
    );
    assert_eq!(state(&b), QpState::Err);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        [(40, WcStatus::WrFlushErr)]
    );
    // The requester learns it from its completion; no event there.
    assert_eq!(error_events(&mut a.dev), []);
}

#[test]
fn bad_rkey_on_an_atomic_or_read_raises_qp_access_err() {
    for read in [false, true] {
        let (mut a, mut b) = pair();
        let ro = b.dev.reg_mr(
            b.pd,
            64,
            AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        );
        let ro = ro.unwrap();
        let wr = if read {
            SendWr::rdma_read(1, vec![a.mr.sge(0, 8)], ro.addr, ro.rkey)
        } else {
            SendWr::atomic_fetch_and_add(1, a.mr.sge(0, 8), ro.addr, ro.rkey, 1)
        };
        a.dev.post_send(a.qp.handle, &[wr]).unwrap();
        pump(&mut a, &mut b);
        assert_eq!(
            statuses(&poll(&mut a.dev, a.scq)),
            [(1, WcStatus::RemAccessErr)]
        );
        assert_eq!(
            error_events(&mut b.dev),
            [qp_event(AsyncEventType::QpAccessErr, b.qp.qp_num)],
            "read {read}"
        );
    }
}

#[test]
fn bad_rkey_on_a_write_with_immediate_is_reported_by_the_receive_completion_not_an_event() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 40, 0, 8)]).unwrap();
    let mut wr = SendWr::rdma_write(1, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey ^ 0x1);
    wr.opcode = WrOpcode::RdmaWriteWithImm;
    a.dev.post_send(a.qp.handle, &[wr]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        [(40, WcStatus::LocAccessErr)]
    );
    assert_eq!(error_events(&mut b.dev), []);
}

#[test]
fn a_read_at_a_responder_without_read_resources_raises_qp_req_err() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| at.max_dest_rd_atomic = 0);
    let wr = SendWr::rdma_read(1, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey);
    a.dev.post_send(a.qp.handle, &[wr]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        [(1, WcStatus::RemInvReqErr)]
    );
    assert_eq!(
        error_events(&mut b.dev),
        [qp_event(AsyncEventType::QpReqErr, b.qp.qp_num)]
    );
    assert_eq!(state(&b), QpState::Err);
}

#[test]
fn a_send_into_a_too_small_receive_is_reported_by_its_completion_not_an_event() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 40, 0, 4)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        [(40, WcStatus::LocLenErr)]
    );
    assert_eq!(error_events(&mut b.dev), []);
}

#[test]
fn comm_est_is_raised_once_on_the_first_request_to_a_qp_already_in_rts() {
    // As after rdma_accept: the passive QP is in RTS before anything arrives.
    let (mut a, mut b) = pair();
    let rs: Vec<_> = (0..2).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        events(&mut b.dev),
        [qp_event(AsyncEventType::CommEst, b.qp.qp_num)]
    );
    assert_eq!(events(&mut a.dev), [], "ACKs are responses: no COMM_EST");
    a.dev.post_send(a.qp.handle, &[send(&a, 2, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(events(&mut b.dev), [], "once per entry to RTR");
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        [(0, WcStatus::Success), (1, WcStatus::Success)]
    );
}

#[test]
fn destroying_a_qp_drops_its_unread_events() {
    // As ib_uverbs_release_uevent: an application that never reads its async events (an
    // rsocket server: a COMM_EST per accepted QP) holds none past the QP's life.
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 0, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.dev.pending_async_events(), 1, "COMM_EST queued, unread");
    b.dev.destroy_qp(b.qp.handle).unwrap();
    assert_eq!(b.dev.pending_async_events(), 0);
    assert_eq!(events(&mut b.dev), []);
}

#[test]
fn error_completions_are_zero_filled_by_default() {
    let (mut a, _b) = pair();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 7, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 8, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    let mut wcs = poll(&mut a.dev, a.scq);
    wcs.extend(poll(&mut a.dev, a.rcq));
    for wc in wcs {
        assert_eq!(
            wc,
            WorkCompletion::error(wc.wr_id, WcStatus::WrFlushErr, a.qp.qp_num)
        );
    }
}

/// `node` with [`SimDeviceConfig::poison_undefined_wc_fields`] and `seed`, connected to a
/// plain peer.
fn poisoned_pair(seed: u64) -> (Node, Node) {
    let mut a = node_seeded(1, caps(16), 256, false, seed);
    let mut cfg = a.dev.config().clone();
    cfg.poison_undefined_wc_fields = true;
    a.dev = SimDevice::new(cfg);
    let spec = verbs_core::manual::RcEndpointSpec {
        mr_len: 64 * 1024,
        mr_access: ALL_ACCESS,
        cqe: 256,
        cap: caps(16),
        ..Default::default()
    };
    let ep = verbs_core::manual::RcEndpoint::create(&mut a.dev, &spec).unwrap();
    (a.pd, a.scq, a.rcq, a.qp, a.mr) = (ep.pd, ep.send_cq, ep.recv_cq, ep.qp, ep.mr);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    (a, b)
}

/// The error completions of a flushed SEND, RDMA READ and receive, and a failed RDMA WRITE.
fn error_wcs(seed: u64) -> (Vec<WorkCompletion>, Vec<WorkCompletion>, u32) {
    let (mut a, mut b) = poisoned_pair(seed);
    let bad = SendWr::rdma_write(1, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey ^ 1);
    let read = SendWr::rdma_read(3, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey);
    a.dev
        .post_send(a.qp.handle, &[bad, send(&a, 2, 0, 8), read])
        .unwrap();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 4, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    let s = poll(&mut a.dev, a.scq);
    let r = poll(&mut a.dev, a.rcq);
    (s, r, a.qp.qp_num)
}

#[test]
fn poisoned_error_completions_carry_junk_in_every_undefined_field_and_keep_the_defined_ones() {
    let (s, r, qpn) = error_wcs(5);
    assert_eq!(
        statuses(&s),
        [
            (1, WcStatus::RemAccessErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(statuses(&r), [(4, WcStatus::WrFlushErr)]);
    for (wc, recv_queue) in s
        .iter()
        .map(|w| (w, false))
        .chain(r.iter().map(|w| (w, true)))
    {
        // Defined: wr_id, status (above), qp_num, vendor_err.
        assert_eq!((wc.qp_num, wc.vendor_err), (qpn, 0));
        // Undefined: an opcode the queue never completes, a non-zero length, WITH_IMM set.
        let is_recv_opcode = matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
        assert_eq!(is_recv_opcode, !recv_queue, "{wc:?}");
        assert_ne!(wc.byte_len, 0);
        assert!(wc.wc_flags.contains(WcFlags::WITH_IMM));
        assert!(wc.src_qp <= 0x00FF_FFFF);
    }
    // Junk differs between completions.
    assert_ne!(s[1].byte_len, s[2].byte_len);
}

#[test]
fn poison_is_deterministic_per_seed() {
    let (s1, r1, _) = error_wcs(5);
    let (s2, r2, _) = error_wcs(5);
    let (s3, _, _) = error_wcs(6);
    assert_eq!((&s1, &r1), (&s2, &r2));
    assert_ne!(s1[1].byte_len, s3[1].byte_len);
}

#[test]
fn completions_of_a_destroyed_qp_stay_in_the_cq_and_name_its_qpn() {
    let (mut a, _b) = pair();
    let old = a.qp.qp_num;
    a.dev.post_recv(a.qp.handle, &[recv(&a, 7, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    a.dev.destroy_qp(a.qp.handle).unwrap();
    assert_eq!(
        poll(&mut a.dev, a.rcq),
        [WorkCompletion::error(7, WcStatus::WrFlushErr, old)]
    );
}

#[test]
fn a_qpn_is_not_handed_out_again_while_completions_of_its_destroyed_qp_remain() {
    let (mut a, _b) = pair();
    let old = a.qp.qp_num;
    a.dev
        .post_recv(a.qp.handle, &[recv(&a, 7, 0, 8), recv(&a, 8, 0, 8)])
        .unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    a.dev.destroy_qp(a.qp.handle).unwrap();
    let init = QpInitAttr {
        send_cq: a.scq,
        recv_cq: a.rcq,
        cap: caps(4),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        srq: None,
    };
    // The counter wraps back to the old QPN: it is skipped while its CQEs remain.
    a.dev.set_qpn_counter(old);
    let q = a.dev.create_qp(a.pd, &init).unwrap();
    assert_ne!(q.qp_num, old);
    let mut one = Vec::new();
    a.dev.poll_cq(a.rcq, 1, &mut one).unwrap();
    a.dev.set_qpn_counter(old);
    let q2 = a.dev.create_qp(a.pd, &init).unwrap();
    assert_ne!(q2.qp_num, old, "one completion of it is still in the CQ");
    assert_eq!(poll(&mut a.dev, a.rcq).len(), 1);
    a.dev.set_qpn_counter(old);
    let q3 = a.dev.create_qp(a.pd, &init).unwrap();
    assert_eq!(q3.qp_num, old, "all polled: the QPN is free again");
}

#[test]
fn destroying_the_cq_frees_the_qpns_of_the_completions_it_held() {
    let mut a = node(1);
    let old = a.qp.qp_num;
    to_init(&mut a);
    a.dev.post_recv(a.qp.handle, &[recv(&a, 7, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    a.dev.destroy_qp(a.qp.handle).unwrap();
    a.dev.destroy_cq(a.rcq).unwrap();
    let init = QpInitAttr {
        send_cq: a.scq,
        recv_cq: a.scq,
        cap: caps(4),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        srq: None,
    };
    a.dev.set_qpn_counter(old);
    assert_eq!(a.dev.create_qp(a.pd, &init).unwrap().qp_num, old);
}
