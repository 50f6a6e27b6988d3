//! UD and the GSI endpoint.

use super::*;
use crate::roce::Opcode;

fn ud_node(last: u8, qkey: u32) -> Node {
    let mut n = node(last);
    n.dev.destroy_qp(n.qp.handle).unwrap();
    n.qp = n
        .dev
        .create_qp(
            n.pd,
            &QpInitAttr {
                send_cq: n.scq,
                recv_cq: n.rcq,
                cap: caps(8),
                qp_type: QpType::Ud,
                sq_sig_all: false,
                srq: None,
            },
        )
        .unwrap();
    use QpAttrMask as M;
    let mut at = QpAttr {
        qp_state: QpState::Init,
        qkey,
        path_mtu: Mtu::Mtu1024,
        ..QpAttr::default()
    };
    n.dev
        .modify_qp(
            n.qp.handle,
            &at,
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
        )
        .unwrap();
    at.qp_state = QpState::Rtr;
    n.dev.modify_qp(n.qp.handle, &at, M::STATE).unwrap();
    at.qp_state = QpState::Rts;
    n.dev
        .modify_qp(n.qp.handle, &at, M::STATE | M::SQ_PSN)
        .unwrap();
    n
}

fn ud_send(n: &Node, id: u64, len: u32, to: &Node, qkey: u32) -> SendWr {
    let mut wr = send(n, id, 0, len);
    wr.ud = UdWr {
        ah: AhAttr {
            grh: GlobalRoute {
                dgid: to.dev.gid(),
                ..GlobalRoute::default()
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        },
        remote_qpn: to.qp.qp_num,
        remote_qkey: qkey,
    };
    wr
}

#[test]
fn ud_send_delivers_a_datagram_behind_a_grh_with_src_qp() {
    let mut a = ud_node(1, 0x1111);
    let mut b = ud_node(2, 0x2222);
    let data = pattern(100, 4);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 7, 0, 40 + 100)])
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[ud_send(&a, 1, 100, &b, 0x2222)
                .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    let r = poll(&mut b.dev, b.rcq);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (
            r[0].status,
            r[0].opcode,
            r[0].byte_len,
            r[0].src_qp,
            r[0].wc_flags
        ),
        (
            WcStatus::Success,
            WcOpcode::Recv,
            140,
            a.qp.qp_num,
            WcFlags::GRH
        )
    );
    let mut buf = vec![0u8; 140];
    b.dev.mr_read(b.mr.handle, 0, &mut buf).unwrap();
    // RoCEv2 over IPv4 (rxe_resp.c): 20 zero bytes, then the datagram's IPv4 header — version
    // 4, IHL 5, total length 20 + 8 + BTH 12 + DETH 8 + 100 + ICRC 4, TTL 64, UDP, a valid
    // checksum, the sender's and the receiver's addresses.
    assert_eq!(&buf[..20], &[0; 20]);
    let ip = &buf[20..40];
    assert_eq!(ip[0], 0x45);
    assert_eq!(
        u16::from_be_bytes([ip[2], ip[3]]),
        20 + 8 + 12 + 8 + 100 + 4
    );
    assert_eq!((ip[8], ip[9]), (64, 17));
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    assert_eq!((sum & 0xFFFF) + (sum >> 16), 0xFFFF, "IPv4 header checksum");
    assert_eq!(&ip[12..16], &a.dev.gid().0[12..], "source address");
    assert_eq!(&ip[16..20], &b.dev.gid().0[12..], "destination address");
    assert_eq!(&buf[40..], &data[..]);
}

#[test]
fn ud_qkey_mismatch_and_missing_receive_drop_silently() {
    let mut a = ud_node(1, 0x1111);
    let mut b = ud_node(2, 0x2222);
    a.dev
        .post_send(a.qp.handle, &[ud_send(&a, 1, 8, &b, 0x3333)])
        .unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 7, 0, 64)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.dev.counters().qkey_mismatch, 1);
    // High-bit Q_Key: the sender's own Q_Key is used (0x1111 != 0x2222): dropped too.
    a.dev
        .post_send(a.qp.handle, &[ud_send(&a, 2, 8, &b, 0x8000_0000)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.dev.counters().qkey_mismatch, 2);
    a.dev
        .post_send(
            a.qp.handle,
            &[ud_send(&a, 3, 8, &b, 0x2222), ud_send(&a, 4, 8, &b, 0x2222)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(7, WcStatus::Success)]
    );
    assert_eq!(b.dev.counters().ud_no_recv, 1);
    assert_eq!(
        b.dev.query_qp(b.qp.handle).unwrap().0.qp_state,
        QpState::Rts
    );
    assert_eq!(
        poll(&mut a.dev, a.scq).len(),
        4,
        "UD sends complete once sent"
    );
}

#[test]
fn ud_message_longer_than_the_mtu_is_einval_at_post() {
    let a = ud_node(1, 1);
    let b = ud_node(2, 1);
    let mut a = a;
    let e = a
        .dev
        .post_send(a.qp.handle, &[ud_send(&a, 1, 1025, &b, 1)])
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    let rdma = SendWr::rdma_write(2, vec![a.mr.sge(0, 8)], 0, 0);
    assert_eq!(
        a.dev.post_send(a.qp.handle, &[rdma]).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn gsi_endpoint_exchanges_datagrams_on_qp1() {
    use crate::{GSI_QKEY, GSI_QPN};
    let mut a = node(1);
    let mut b = node(2);
    let mad = bytes::Bytes::from(pattern(256, 1));
    a.dev.gsi_send(b.dev.gid(), GSI_QPN, mad.clone()).unwrap();
    let t = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    assert_eq!(t.packet.bth.opcode, Opcode::UdSendOnly);
    assert_eq!((t.packet.bth.dest_qp, t.packet.bth.pkey), (1, 0xFFFF));
    let deth = t.packet.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, 1));
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    let d = b.dev.gsi_recv().unwrap();
    assert_eq!((d.src, d.src_qp, d.payload), (a.dev.gid(), 1, mad));
    assert!(b.dev.gsi_recv().is_none());
    // QP1 is not reachable as a verbs QP.
    assert_eq!(
        b.dev.query_qp(QpHandle(1)).unwrap_err().errno,
        Errno::EINVAL
    );
    // Wrong Q_Key is dropped.
    let mut p = crate::roce::Packet::bare(Opcode::UdSendOnly, 1, 0, bytes::Bytes::new());
    p.deth = Some(crate::roce::Deth { qkey: 5, src_qp: 1 });
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), p);
    assert_eq!(b.dev.counters().qkey_mismatch, 1);
    assert!(b.dev.gsi_recv().is_none());
    let big = bytes::Bytes::from(vec![0u8; 2048]);
    assert_eq!(
        a.dev.gsi_send(b.dev.gid(), 1, big).unwrap_err().errno,
        Errno::EINVAL
    );
}

#[test]
fn gsi_endpoint_trait_sends_256_byte_mads_to_qp1_and_refuses_other_sizes() {
    let mut a = node(1);
    let mut b = node(2);
    let mad = pattern(crate::MAD_SIZE, 3);
    GsiEndpoint::gsi_send(&mut a.dev, b.dev.gid(), &mad).unwrap();
    let t = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    assert_eq!(t.packet.bth.dest_qp, crate::GSI_QPN);
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    let d = GsiEndpoint::gsi_recv(&mut b.dev).unwrap();
    assert_eq!(
        d,
        GsiDatagram {
            peer: a.dev.gid(),
            mad
        }
    );
    assert!(GsiEndpoint::gsi_recv(&mut b.dev).is_none());
    for len in [0, 255, 257] {
        let e = GsiEndpoint::gsi_send(&mut a.dev, b.dev.gid(), &vec![0; len]).unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL, "{len} bytes");
    }
    assert!(a.dev.poll_transmit(SimTime::ZERO).is_none());
}
