//! RC responder-side errors: bad rkeys and access, receive errors, and the NAKs and
//! completions each produces on both sides.

use super::*;

#[test]
fn bad_rkey_is_rem_access_err_and_both_qps_go_to_err() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 40, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                send(&a, 1, 0, 8),
                SendWr::rdma_write(2, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey ^ 0x1),
                send(&a, 3, 0, 8),
            ],
        )
        .unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 41, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::RemAccessErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(state(&a), QpState::Err);
    // rxe: class C error moves the responder to ERR too; its remaining receives flush.
    assert_eq!(state(&b), QpState::Err);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(40, WcStatus::Success), (41, WcStatus::WrFlushErr)]
    );
}

#[test]
fn out_of_bounds_or_missing_mr_access_is_rem_access_err() {
    for case in 0..3 {
        let (mut a, mut b) = pair();
        let ro = b.dev.reg_mr(b.pd, 64, AccessFlags::REMOTE_READ).unwrap();
        let wr = match case {
            0 => SendWr::rdma_write(
                1,
                vec![a.mr.sge(0, 16)],
                b.mr.addr + b.mr.length - 8,
                b.mr.rkey,
            ),
            1 => SendWr::rdma_write(1, vec![a.mr.sge(0, 16)], ro.addr, ro.rkey),
            _ => SendWr::atomic_fetch_and_add(1, a.mr.sge(0, 8), ro.addr, ro.rkey, 1),
        };
        a.dev.post_send(a.qp.handle, &[wr]).unwrap();
        pump(&mut a, &mut b);
        assert_eq!(
            statuses(&poll(&mut a.dev, a.scq)),
            vec![(1, WcStatus::RemAccessErr)],
            "case {case}"
        );
    }
}

#[test]
fn qp_without_remote_access_flag_naks_invalid_request() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    let attr = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    b.dev
        .modify_qp(b.qp.handle, &attr, QpAttrMask::ACCESS_FLAGS)
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_read(
                1,
                vec![a.mr.sge(0, 8)],
                b.mr.addr,
                b.mr.rkey,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RemInvReqErr)]
    );
    assert_eq!(state(&b), QpState::Err);
}

#[test]
fn receive_too_small_is_loc_len_err_and_requester_gets_rem_inv_req_err() {
    let (mut a, mut b) = pair();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 1, 0, 100), recv(&b, 2, 0, 100)])
        .unwrap();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 600), send(&a, 2, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn bad_receive_lkey_is_loc_prot_err_and_requester_gets_rem_op_err() {
    let (mut a, mut b) = pair();
    let mut r = recv(&b, 1, 0, 100);
    r.sg_list[0].lkey ^= 0x55;
    b.dev.post_recv(b.qp.handle, &[r]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 10)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(1, WcStatus::LocProtErr)]
    );
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RemOpErr)]
    );
}

#[test]
fn responder_in_err_drops_requests_without_ack() {
    let (mut a, mut b) = pair();
    b.dev
        .modify_qp(b.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    let moved = pump(&mut a, &mut b);
    assert_eq!(moved, 1, "the request went, nothing came back");
    assert_eq!(b.dev.counters().qp_not_ready, 1);
    assert!(poll(&mut a.dev, a.scq).is_empty());
}
