//! RC data path: SEND, RDMA WRITE/READ and atomics moving bytes exactly, segmentation,
//! PSN wrap and read credits.

use super::*;
use crate::roce::Opcode;

#[test]
fn send_recv_is_byte_exact_across_segmentation() {
    let (mut a, mut b) = pair();
    let data = pattern(1000, 3);
    a.dev.mr_write(a.mr.handle, 100, &data).unwrap();
    // Two receive SGEs to check scattering across them.
    b.dev
        .post_recv(
            b.qp.handle,
            &[RecvWr::new(7, vec![b.mr.sge(0, 300), b.mr.sge(4096, 800)])],
        )
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::send_with_imm(1, vec![a.mr.sge(100, 1000)], 0xabcd)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let wc = poll(&mut b.dev, b.rcq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 1000)
    );
    assert_eq!(
        (wc[0].imm_data, wc[0].wc_flags),
        (0xabcd, WcFlags::WITH_IMM)
    );
    let mut got = vec![0u8; 300];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    let mut rest = vec![0u8; 700];
    b.dev.mr_read(b.mr.handle, 4096, &mut rest).unwrap();
    got.extend(rest);
    assert_eq!(got, data);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        (s[0].status, s[0].opcode, s[0].byte_len),
        (WcStatus::Success, WcOpcode::Send, 1000)
    );
}

#[test]
fn segmentation_uses_first_middle_last_and_only_by_path_mtu() {
    let (mut a, b) = pair();
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 1, 0, 600), send(&a, 2, 0, 256), send(&a, 3, 0, 0)],
        )
        .unwrap();
    let mut ops = Vec::new();
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        assert_eq!(t.dst, b.dev.gid());
        assert!(t.packet.is_consistent());
        ops.push((
            t.packet.bth.opcode,
            t.packet.payload.len(),
            t.packet.bth.psn,
            t.packet.bth.ack_req,
        ));
    }
    use Opcode::*;
    assert_eq!(
        ops,
        vec![
            (RcSendFirst, 256, 0x10, false),
            (RcSendMiddle, 256, 0x11, false),
            (RcSendLast, 88, 0x12, true),
            (RcSendOnly, 256, 0x13, true),
            (RcSendOnly, 0, 0x14, true),
        ]
    );
}

#[test]
fn psn_wraps_at_24_bits() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| {
        at.sq_psn = 0xFF_FFFE;
        at.rq_psn = 0xFF_FFFE;
    });
    let data = pattern(1024, 9);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 1, 0, 2048)])
        .unwrap();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 1024), send(&a, 2, 0, 10)])
        .unwrap();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 2, 4096, 16)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let (q, _) = a.dev.query_qp(a.qp.handle).unwrap();
    assert_eq!(q.sq_psn, 3, "0xfffffe + 5 packets wraps to 3");
    let mut got = vec![0u8; 1024];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn rdma_write_is_byte_exact_and_consumes_no_receive() {
    let (mut a, mut b) = pair();
    let data = pattern(700, 1);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write(
                1,
                vec![a.mr.sge(0, 700)],
                b.mr.addr + 1000,
                b.mr.rkey,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        (s[0].status, s[0].opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut got = vec![0u8; 700];
    b.dev.mr_read(b.mr.handle, 1000, &mut got).unwrap();
    assert_eq!(got, data);
    assert!(poll(&mut b.dev, b.rcq).is_empty(), "no receive consumed");
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    let (mut a, mut b) = pair();
    let data = pattern(300, 2);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 5, 0, 0)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write_with_imm(
                1,
                vec![a.mr.sge(0, 300)],
                b.mr.addr + 64,
                b.mr.rkey,
                77,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let r = poll(&mut b.dev, b.rcq);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm_data),
        (5, WcOpcode::RecvRdmaWithImm, 300, 77)
    );
    let mut got = vec![0u8; 300];
    b.dev.mr_read(b.mr.handle, 64, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn rdma_read_is_byte_exact_across_response_packets() {
    let (mut a, mut b) = pair();
    let data = pattern(900, 5);
    b.dev.mr_write(b.mr.handle, 2000, &data).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                SendWr::rdma_read(
                    1,
                    vec![a.mr.sge(0, 400), a.mr.sge(8192, 500)],
                    b.mr.addr + 2000,
                    b.mr.rkey,
                ),
                send(&a, 2, 0, 4),
            ],
        )
        .unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        statuses(&s),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!((s[0].opcode, s[0].byte_len), (WcOpcode::RdmaRead, 900));
    let mut got = vec![0u8; 400];
    a.dev.mr_read(a.mr.handle, 0, &mut got).unwrap();
    let mut rest = vec![0u8; 500];
    a.dev.mr_read(a.mr.handle, 8192, &mut rest).unwrap();
    got.extend(rest);
    assert_eq!(got, data);
}

#[test]
fn read_credits_limit_outstanding_reads_to_max_rd_atomic() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| at.max_rd_atomic = 1);
    let r = |id| SendWr::rdma_read(id, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey);
    a.dev.post_send(a.qp.handle, &[r(1), r(2), r(3)]).unwrap();
    let mut first = Vec::new();
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        first.push(t);
    }
    assert_eq!(first.len(), 1, "one READ in flight with max_rd_atomic 1");
    for t in first {
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    pump(&mut a, &mut b);
    assert_eq!(poll(&mut a.dev, a.scq).len(), 3);
}

#[test]
fn atomics_compare_swap_and_fetch_add_are_exact() {
    let (mut a, mut b) = pair();
    b.dev
        .mr_write(b.mr.handle, 64, &100u64.to_le_bytes())
        .unwrap();
    let cs_hit = SendWr::atomic_cmp_and_swp(1, a.mr.sge(0, 8), b.mr.addr + 64, b.mr.rkey, 100, 7);
    let cs_miss = SendWr::atomic_cmp_and_swp(2, a.mr.sge(8, 8), b.mr.addr + 64, b.mr.rkey, 100, 9);
    let fa = SendWr::atomic_fetch_and_add(3, a.mr.sge(16, 8), b.mr.addr + 64, b.mr.rkey, 5);
    a.dev
        .post_send(a.qp.handle, &[cs_hit, cs_miss, fa])
        .unwrap();
    pump(&mut a, &mut b);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        s.iter().map(|w| (w.status, w.opcode)).collect::<Vec<_>>(),
        vec![
            (WcStatus::Success, WcOpcode::CompSwap),
            (WcStatus::Success, WcOpcode::CompSwap),
            (WcStatus::Success, WcOpcode::FetchAdd)
        ]
    );
    let mut got = [0u8; 24];
    a.dev.mr_read(a.mr.handle, 0, &mut got).unwrap();
    let v = |i: usize| u64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!((v(0), v(1), v(2)), (100, 7, 7));
    let mut cell = [0u8; 8];
    b.dev.mr_read(b.mr.handle, 64, &mut cell).unwrap();
    assert_eq!(u64::from_le_bytes(cell), 12);
}
