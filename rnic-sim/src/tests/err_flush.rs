//! ERR and flushes: entry to ERR, flush order, signaling, and leaving ERR through RESET.

use super::*;

#[test]
fn entry_to_err_flushes_sq_then_rq_in_post_order() {
    let (mut a, _b) = pair();
    a.dev
        .post_recv(
            a.qp.handle,
            &[recv(&a, 10, 0, 8), recv(&a, 11, 0, 8), recv(&a, 12, 0, 8)],
        )
        .unwrap();
    let unsignaled = send(&a, 2, 0, 8).with_flags(SendFlags::empty());
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 1, 0, 8), unsignaled, send(&a, 3, 0, 8)],
        )
        .unwrap();
    // Nothing pumped: all outstanding. The flush happens inside modify_qp.
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        statuses(&s),
        vec![
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ],
        "unsignaled WRs are flushed too"
    );
    assert!(s
        .iter()
        .all(|w| *w == WorkCompletion::error(w.wr_id, w.status, a.qp.qp_num)));
    let r = poll(&mut a.dev, a.rcq);
    assert_eq!(
        statuses(&r),
        vec![
            (10, WcStatus::WrFlushErr),
            (11, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr)
        ]
    );
    // ERR -> ERR flushes nothing again.
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert!(poll(&mut a.dev, a.scq).is_empty());
}

#[test]
fn entry_to_err_from_init_and_rtr_flushes_receives() {
    let mut a = node(1);
    to_init(&mut a);
    a.dev.post_recv(a.qp.handle, &[recv(&a, 1, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(
        statuses(&poll(&mut a.dev, a.rcq)),
        vec![(1, WcStatus::WrFlushErr)]
    );
}

#[test]
fn unsignaled_successful_send_makes_no_completion() {
    let (mut a, mut b) = pair();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 1, 0, 8), recv(&b, 2, 0, 8)])
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                send(&a, 1, 0, 8).with_flags(SendFlags::empty()),
                send(&a, 2, 0, 8),
            ],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(2, WcStatus::Success)]
    );
    assert_eq!(poll(&mut b.dev, b.rcq).len(), 2);
}

#[test]
fn sq_sig_all_signals_every_send() {
    let mut a = node_with(1, caps(8), 64, true);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 1, 0, 8).with_flags(SendFlags::empty())],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
}

#[test]
fn post_in_err_is_accepted_and_flushed_immediately() {
    let (mut a, _b) = pair();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                send(&a, 1, 0, 8).with_flags(SendFlags::empty()),
                send(&a, 2, 0, 8),
            ],
        )
        .unwrap();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 3, 0, 8)]).unwrap();
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        statuses(&poll(&mut a.dev, a.rcq)),
        vec![(3, WcStatus::WrFlushErr)]
    );
    // Malformed WRs are still refused in ERR.
    let five = SendWr::send(4, vec![a.mr.sge(0, 1); 5]);
    assert_eq!(
        a.dev.post_send(a.qp.handle, &[five]).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn posts_in_err_never_fill_the_queue_because_the_flush_is_synchronous() {
    let mut a = node_with(1, caps(2), 256, false);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    let ss: Vec<_> = (0..5).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    let rs: Vec<_> = (10..15).map(|i| recv(&a, i, 0, 8)).collect();
    a.dev.post_recv(a.qp.handle, &rs).unwrap();
    let flushed =
        |ids: std::ops::Range<u64>| -> Vec<_> { ids.map(|i| (i, WcStatus::WrFlushErr)).collect() };
    assert_eq!(statuses(&poll(&mut a.dev, a.scq)), flushed(0..5));
    assert_eq!(statuses(&poll(&mut a.dev, a.rcq)), flushed(10..15));
}

#[test]
fn err_to_reset_and_rts_to_reset_empty_queues_without_completions() {
    let (mut a, _b) = pair();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 2, 0, 8)]).unwrap();
    let reset = QpAttr::default();
    a.dev
        .modify_qp(a.qp.handle, &reset, QpAttrMask::STATE)
        .unwrap();
    assert!(poll(&mut a.dev, a.scq).is_empty() && poll(&mut a.dev, a.rcq).is_empty());
    to_init(&mut a);
    a.dev.post_recv(a.qp.handle, &[recv(&a, 3, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(poll(&mut a.dev, a.rcq).len(), 1);
    a.dev
        .modify_qp(a.qp.handle, &reset, QpAttrMask::STATE)
        .unwrap();
    assert!(poll(&mut a.dev, a.rcq).is_empty());
    assert_eq!(state(&a), QpState::Reset);
}

#[test]
fn qp_can_be_reconnected_after_err_and_reset() {
    let (mut a, mut b) = pair();
    for n in [&mut a, &mut b] {
        n.dev
            .modify_qp(n.qp.handle, &err_attr(), QpAttrMask::STATE)
            .unwrap();
        n.dev
            .modify_qp(n.qp.handle, &QpAttr::default(), QpAttrMask::STATE)
            .unwrap();
    }
    connect_with(&mut a, &mut b, |at| {
        at.sq_psn = 0x500;
        at.rq_psn = 0x500;
    });
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
}
