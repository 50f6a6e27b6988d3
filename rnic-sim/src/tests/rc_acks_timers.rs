//! RC ACKs, retries and timers: ACK coalescing, ACKs before entry to ERR, RNR retry and
//! back-off, the transport-timer index, and ERR-entry reporting.

use super::*;

#[test]
fn acks_are_coalesced() {
    let (mut a, mut b) = pair();
    let rs: Vec<_> = (0..5).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    let ss: Vec<_> = (0..5).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        b.dev.counters().acks_sent,
        1,
        "one ACK covers five messages"
    );
    assert_eq!(poll(&mut a.dev, a.scq).len(), 5);
}

/// b's receive CQ holds 2; a (timeout 1, retry_cnt 2) sends 3 messages in one burst.
fn overrun_pair() -> (Node, Node) {
    let mut a = node(1);
    let mut b = node_with(2, caps(8), 2, false);
    connect_with(&mut a, &mut b, |at| {
        at.timeout = 1;
        at.retry_cnt = 2;
    });
    let rs: Vec<_> = (0..5).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    (a, b)
}

#[test]
fn entry_to_err_by_cq_overrun_acks_what_was_completed_first() {
    let (mut a, mut b) = overrun_pair();
    let ss: Vec<_> = (0..3).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(state(&b), QpState::Err, "the third receive overran");
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    assert_eq!(
        b.dev.counters().acks_sent,
        1,
        "one ACK covers messages 0 and 1"
    );
    // The message whose completion was lost is not acknowledged.
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::RetryExcErr)
        ]
    );
}

#[test]
fn entry_to_err_by_modify_qp_acks_what_was_completed_first() {
    let (mut a, mut b) = overrun_pair();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 0, 0, 8), send(&a, 1, 0, 8)])
        .unwrap();
    // Deliver a's requests without letting b transmit.
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    b.dev
        .modify_qp(b.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(b.dev.counters().acks_sent, 1);
    run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    assert_eq!(state(&a), QpState::Rts);
}

#[test]
fn rnr_retry_zero_with_no_receive_is_rnr_retry_exc_err() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| at.rnr_retry = 0);
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 8), send(&a, 2, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        state(&b),
        QpState::Rts,
        "RNR is not an error at the responder"
    );
}

#[test]
fn rnr_nak_backs_off_by_min_rnr_timer_then_retries() {
    let (mut a, mut b) = pair();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.dev.counters().rnr_naks_sent, 1);
    // min_rnr_timer 1 = 10 µs.
    assert_eq!(a.dev.poll_timeout(), Some(SimTime::from_micros(10)));
    b.dev.post_recv(b.qp.handle, &[recv(&b, 9, 0, 8)]).unwrap();
    let end = run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(end, SimTime::from_micros(10));
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(9, WcStatus::Success)]
    );
}

/// The deadline index follows every QP's timers: armed by a send, re-armed by the ACK's
/// arrival, gone with the QP. (`poll_timeout` also cross-checks against a scan in unit tests.)
#[test]
fn transport_timers_are_indexed_per_qp_and_leave_with_the_qp() {
    let (mut a, mut b) = pair();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    assert_eq!(a.dev.poll_timeout(), None, "nothing sent yet");
    let out = a.dev.poll_transmit(SimTime::ZERO);
    assert!(out.is_some());
    assert!(a.dev.poll_timeout().is_some(), "retransmit timer armed");
    a.dev.destroy_qp(a.qp.handle).unwrap();
    assert_eq!(a.dev.poll_timeout(), None);
    assert!(a.dev.poll_transmit(SimTime::ZERO).is_none());
    let _ = &mut b;
}

/// `take_entered_err` reports each QP that entered ERR once, whatever moved it there, and
/// forgets destroyed QPs.
#[test]
fn entered_err_reports_each_qp_once_and_forgets_destroyed_ones() {
    let (mut a, mut b) = pair();
    assert!(a.dev.take_entered_err().is_empty());
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    a.dev
        .modify_qp(a.qp.handle, &err, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(
        a.dev.take_entered_err().into_iter().collect::<Vec<_>>(),
        [a.qp.qp_num]
    );
    assert!(a.dev.take_entered_err().is_empty(), "taken");
    b.dev
        .modify_qp(b.qp.handle, &err, QpAttrMask::STATE)
        .unwrap();
    b.dev.destroy_qp(b.qp.handle).unwrap();
    assert!(
        b.dev.take_entered_err().is_empty(),
        "destroyed QPs are left out"
    );
}

#[test]
fn requester_window_holds_for_every_packet_of_a_long_message() {
    let (mut a, mut b) = pair();
    // 60 000 bytes at path MTU 256: 235 packets, against a window of 128 PSNs.
    let data = pattern(60_000, 3);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    let wr = SendWr::rdma_write(1, vec![a.mr.sge(0, 60_000)], b.mr.addr, b.mr.rkey);
    a.dev.post_send(a.qp.handle, &[wr]).unwrap();
    let mut first = Vec::new();
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        first.push(t);
    }
    assert_eq!(first.len(), 128, "no more than the window before an ACK");
    for t in first {
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    assert_eq!(
        pump(&mut a, &mut b),
        107 + 2,
        "the rest, after the ACK, and its ACK"
    );
    assert_eq!(a.dev.counters().retries, 0);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    let mut got = vec![0; 60_000];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn a_reply_goes_out_before_the_ack_of_the_message_it_answers() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 0, 0, 8)]).unwrap();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 0, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    assert_eq!(poll(&mut b.dev, b.rcq).len(), 1, "the request arrived");
    // The application answers before the device's next transmit turn.
    b.dev.post_send(b.qp.handle, &[send(&b, 2, 0, 8)]).unwrap();
    let ops: Vec<_> = std::iter::from_fn(|| b.dev.poll_transmit(SimTime::ZERO))
        .map(|t| t.packet.bth.opcode)
        .collect();
    assert_eq!(
        ops,
        vec![
            crate::roce::Opcode::RcSendOnly,
            crate::roce::Opcode::RcAcknowledge
        ]
    );
}

#[test]
fn a_byte_window_below_the_ack_interval_still_asks_for_acks() {
    let (mut a, mut b) = pair();
    // Path MTU 256: a 1 KiB window is 4 packets, far below the 64 between AckReqs.
    a.dev.set_max_unacked_bytes(1024);
    let data = pattern(20_000, 9);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    let wr = SendWr::rdma_write(1, vec![a.mr.sge(0, 20_000)], b.mr.addr, b.mr.rkey);
    a.dev.post_send(a.qp.handle, &[wr]).unwrap();
    let mut burst = 0;
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        burst += 1;
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    assert_eq!(burst, 4, "the window in packets");
    // Time stands still: only ACKs the window asked for can finish the message.
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(a.dev.counters().timeouts, 0);
    let mut got = vec![0; 20_000];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn with_a_byte_window_a_long_read_is_asked_for_in_pieces_that_fit_it() {
    let (mut a, mut b) = pair();
    // Path MTU 256: a 2 KiB window is 8 packets; the READ is 60 000 bytes, 235 packets.
    a.dev.set_max_unacked_bytes(2048);
    let data = pattern(60_000, 5);
    b.dev.mr_write(b.mr.handle, 0, &data).unwrap();
    let wr = SendWr::rdma_read(1, vec![a.mr.sge(0, 60_000)], b.mr.addr, b.mr.rkey);
    a.dev.post_send(a.qp.handle, &[wr]).unwrap();
    let mut most_in_flight = 0;
    let mut moved = 0;
    loop {
        let reqs: Vec<_> = std::iter::from_fn(|| a.dev.poll_transmit(SimTime::ZERO)).collect();
        let mut responses = Vec::new();
        for t in reqs {
            b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
            responses.extend(std::iter::from_fn(|| b.dev.poll_transmit(SimTime::ZERO)));
        }
        if responses.is_empty() {
            break;
        }
        most_in_flight = most_in_flight.max(responses.len());
        for t in responses {
            moved += 1;
            a.dev.handle_packet(SimTime::ZERO, b.dev.gid(), t.packet);
        }
    }
    assert!(most_in_flight <= 8, "a burst of {most_in_flight} responses");
    assert_eq!(moved, 235, "every response once, none retransmitted");
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    let mut got = vec![0; 60_000];
    a.dev.mr_read(a.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, data);
}
