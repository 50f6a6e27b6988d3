//! Payloads read from the MR when each packet leaves (crate `gather`; docs/semantics-verbs.md,
//! "Payload read at transmit time"): per packet across SGE boundaries, again on a
//! retransmission, LOC_PROT_ERR when the region went before it, and the same bytes whether
//! the device hands out packets or a `SimNic` encodes them straight from the region.

use super::*;
use crate::fabric::Endpoint;
use crate::nic::SimNic;

/// A WRITE from three SGEs of odd sizes (100 + 300 + 57 bytes at MTU 256): packets that start
/// and end inside SGEs.
fn three_sge_write(a: &Node, b: &Node) -> SendWr {
    let sges = vec![a.mr.sge(10, 100), a.mr.sge(1000, 300), a.mr.sge(5003, 57)];
    SendWr::rdma_write(1, sges, b.mr.addr + 7, b.mr.rkey)
}

fn three_sge_bytes(a: &Node) -> Vec<u8> {
    let mut want = Vec::new();
    for (off, len) in [(10, 100), (1000, 300), (5003, 57)] {
        let mut part = vec![0u8; len];
        a.dev.mr_read(a.mr.handle, off, &mut part).unwrap();
        want.extend(part);
    }
    want
}

fn landed(b: &Node, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    b.dev.mr_read(b.mr.handle, 7, &mut got).unwrap();
    got
}

#[test]
fn a_multi_sge_write_is_read_per_packet_across_sge_boundaries() {
    let (mut a, mut b) = pair();
    a.dev.mr_write(a.mr.handle, 0, &pattern(8192, 5)).unwrap();
    a.dev
        .post_send(a.qp.handle, &[three_sge_write(&a, &b)])
        .unwrap();
    let mut lens = Vec::new();
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        let n = t.packet.payload.len();
        assert_eq!(usize::from(t.packet.bth.pad_cnt), (4 - n % 4) % 4, "PadCnt");
        lens.push(n);
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    assert_eq!(lens, vec![256, 201]);
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(landed(&b, 457), three_sge_bytes(&a));
}

/// The same WRITE and a READ between two `SimNic`s: encoded straight from the regions,
/// decoded, ICRC checked.
#[test]
fn a_nic_encodes_the_payload_straight_from_the_region() {
    let (mut a, mut b) = pair();
    a.dev.mr_write(a.mr.handle, 0, &pattern(8192, 9)).unwrap();
    b.dev.mr_write(b.mr.handle, 9000, &pattern(700, 1)).unwrap();
    let want = three_sge_bytes(&a);
    let wrs = [
        three_sge_write(&a, &b),
        SendWr::rdma_read(2, vec![a.mr.sge(20_000, 700)], b.mr.addr + 9000, b.mr.rkey),
    ];
    a.dev.post_send(a.qp.handle, &wrs).unwrap();
    let (a_scq, a_mr, b_mr) = (a.scq, a.mr.handle, b.mr.handle);
    let (mut na, mut nb) = (SimNic::at_gid(a.dev), SimNic::at_gid(b.dev));
    loop {
        let mut moved = 0;
        while let Some((_, d)) = na.poll_transmit(SimTime::ZERO) {
            nb.handle_datagram(SimTime::ZERO, na.addr(), d);
            moved += 1;
        }
        while let Some((_, d)) = nb.poll_transmit(SimTime::ZERO) {
            na.handle_datagram(SimTime::ZERO, nb.addr(), d);
            moved += 1;
        }
        if moved == 0 {
            break;
        }
    }
    assert_eq!(
        statuses(&poll(&mut na, a_scq)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let mut got = vec![0u8; 457];
    nb.mr_read(b_mr, 7, &mut got).unwrap();
    assert_eq!(got, want);
    let mut read = vec![0u8; 700];
    na.mr_read(a_mr, 20_000, &mut read).unwrap();
    assert_eq!(read, pattern(700, 1));
    let (ca, cb) = (na.datagram_counters(), nb.datagram_counters());
    assert_eq!((ca.rx_decode_errors, cb.rx_decode_errors), (0, 0));
}

/// a (timeout 1, so the retransmit timer fires at once in virtual time) sends a WRITE whose
/// packets are lost; returns the pair with the WRITE outstanding.
fn lost_write() -> (Node, Node) {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| at.timeout = 1);
    a.dev.mr_write(a.mr.handle, 0, &[1; 600]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write(
                1,
                vec![a.mr.sge(0, 600)],
                b.mr.addr,
                b.mr.rkey,
            )],
        )
        .unwrap();
    let mut lost = 0;
    while a.dev.poll_transmit(SimTime::ZERO).is_some() {
        lost += 1;
    }
    assert_eq!(lost, 3);
    (a, b)
}

/// Not a thing an application may do (`man:ibv_post_send.3`: a WR's buffers belong to the
/// device until it completes), but it pins the rule down: the retransmission carries the
/// bytes the region holds when it is sent, as a DMA read would.
#[test]
fn a_retransmission_reads_the_region_again() {
    let (mut a, mut b) = lost_write();
    a.dev.mr_write(a.mr.handle, 0, &[2; 600]).unwrap();
    run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    let mut got = vec![0u8; 600];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, vec![2; 600]);
}

/// The source region deregistered while its WRITE is outstanding: the retransmission finds
/// no region, the WR completes with LOC_PROT_ERR and the QP enters ERR [rxe_req.c
/// `finish_packet` → `copy_data` failure].
#[test]
fn a_source_region_deregistered_before_a_retransmission_is_loc_prot_err() {
    let (mut a, mut b) = lost_write();
    a.dev.dereg_mr(a.mr.handle).unwrap();
    run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::LocProtErr)]
    );
    assert_eq!(state(&a), QpState::Err);
    assert_eq!(b.dev.counters().duplicate_requests, 0, "nothing reached b");
}

/// A caller that keeps queued packets across a verbs call: a packet whose region was
/// deregistered in between is not sent, and counted.
#[test]
fn a_queued_packet_whose_region_went_is_dropped_and_counted() {
    let (mut a, b) = pair();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write(
                1,
                vec![a.mr.sge(0, 600)],
                b.mr.addr,
                b.mr.rkey,
            )],
        )
        .unwrap();
    assert!(
        a.dev.poll_transmit(SimTime::ZERO).is_some(),
        "packet 1 of 3"
    );
    a.dev.dereg_mr(a.mr.handle).unwrap();
    assert!(a.dev.poll_transmit(SimTime::ZERO).is_none());
    assert_eq!(a.dev.counters().tx_region_gone, 2);
}
