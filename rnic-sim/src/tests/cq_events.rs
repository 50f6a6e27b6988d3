//! CQs, channels, events: CQ overrun, notification arming, COMM_EST.

use super::*;

#[test]
fn cq_overrun_raises_cq_err_and_moves_the_qp_to_err() {
    let mut a = node_with(1, caps(8), 2, false);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    let rs: Vec<_> = (0..4).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 99, 0, 8)]).unwrap();
    let ss: Vec<_> = (0..4).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        a.dev.get_async_event(),
        Some(AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: AsyncElement::Cq(a.scq)
        })
    );
    assert_eq!(state(&a), QpState::Err);
    // Stored entries come out first, then the CQ reports EIO.
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    let mut v = Vec::new();
    assert_eq!(
        a.dev.poll_cq(a.scq, 4, &mut v).unwrap_err().errno,
        Errno::EIO
    );
    // The receive queue's flush goes to its own (healthy) CQ.
    assert_eq!(
        statuses(&poll(&mut a.dev, a.rcq)),
        vec![(99, WcStatus::WrFlushErr)]
    );
    assert!(a.dev.counters().completions_lost >= 2);
}

#[test]
fn req_notify_cq_notifies_once_then_disarms() {
    let ch = CompChannel::new();
    let mut a = node(1);
    let mut b = node(2);
    let cq = b.dev.create_cq(16, Some(&ch)).unwrap();
    // Give b a QP that reports receives to the channel CQ.
    b.dev.destroy_qp(b.qp.handle).unwrap();
    b.qp = b
        .dev
        .create_qp(
            b.pd,
            &QpInitAttr {
                send_cq: b.scq,
                recv_cq: cq,
                cap: caps(8),
                qp_type: QpType::Rc,
                sq_sig_all: false,
                srq: None,
            },
        )
        .unwrap();
    b.rcq = cq;
    connect_with(&mut a, &mut b, |_| {});
    assert_eq!(
        b.dev.req_notify_cq(b.scq, false).unwrap_err().errno,
        Errno::EINVAL
    );
    b.dev.req_notify_cq(cq, false).unwrap();
    let rs: Vec<_> = (0..3).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 8), send(&a, 2, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(ch.try_get_cq_event().unwrap(), cq);
    assert_eq!(
        ch.try_get_cq_event().unwrap_err().errno,
        Errno::EAGAIN,
        "disarmed"
    );
    // Solicited-only ignores an unsolicited receive, fires on a solicited one.
    b.dev.req_notify_cq(cq, true).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 3, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert!(ch.try_get_cq_event().is_err());
    b.dev.post_recv(b.qp.handle, &[recv(&b, 5, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 4, 0, 8).with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(ch.try_get_cq_event().unwrap(), cq);
}

#[test]
fn comm_est_is_raised_when_a_packet_arrives_in_rtr() {
    let mut a = node(1);
    let mut b = node(2);
    let ab = conn_attr(b.dev.gid(), b.qp.qp_num, 0);
    let ba = conn_attr(a.dev.gid(), a.qp.qp_num, 0);
    to_init(&mut a);
    to_rtr(&mut a, &ab);
    to_rts(&mut a, &ab);
    to_init(&mut b);
    to_rtr(&mut b, &ba);
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        b.dev.get_async_event(),
        Some(AsyncEvent {
            event_type: AsyncEventType::CommEst,
            element: AsyncElement::Qp(b.qp.qp_num)
        })
    );
    assert_eq!(b.dev.get_async_event(), None);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(1, WcStatus::Success)]
    );
}
