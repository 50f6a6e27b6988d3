//! Exact byte placement of every CM message, checked against hand-written MAD offsets taken
//! from cm-spec §1.4 and §2.2–§2.6 (MAD offset = msg offset + 24). The expected offsets are
//! literals here, not computed by the codec.

// Binary literals are grouped by wire field (e.g. `0b0011_1_111` = MTU | RDC | RNR retry).
#![allow(clippy::unusual_byte_groupings)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cm_core::wire::*;
use verbs_core::Gid;

const TID: u64 = 0x0000_0ABC_1122_3344;

/// Asserts `mad[off..off + want.len()] == want`.
#[track_caller]
fn at(mad: &[u8; 256], off: usize, want: &[u8]) {
    assert_eq!(
        &mad[off..off + want.len()],
        want,
        "bytes at MAD offset {off}"
    );
}

fn counting(len: usize, start: u8) -> Vec<u8> {
    (0..len).map(|i| start.wrapping_add(i as u8)).collect()
}

fn gid4(a: u8, b: u8, c: u8, d: u8) -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(a, b, c, d))
}

#[track_caller]
fn common_header(mad: &[u8; 256], attr: [u8; 2], attr_mod: [u8; 4]) {
    at(mad, 0, &[0x01, 0x07, 0x02, 0x03]); // base version, class CM, class version 2, Send
    at(mad, 4, &[0, 0, 0, 0]); // status, class specific
    at(mad, 8, &[0x00, 0x00, 0x0A, 0xBC, 0x11, 0x22, 0x33, 0x44]); // TID
    at(mad, 16, &attr);
    at(mad, 18, &[0, 0]); // reserved
    at(mad, 20, &attr_mod);
}

fn sample_req() -> Req {
    Req {
        local_comm_id: 0x1122_3344,
        vendor_id: 0x00A1_B2C3,
        service_id: 0x0000_0000_0106_12B7,
        local_ca_guid: 0x0102_0304_0506_0708,
        local_q_key: 0xDEAD_BEEF,
        local_qpn: 0x12_3456,
        responder_resources: 0x9A,
        local_eecn: 0x65_4321,
        initiator_depth: 0x7B,
        remote_eecn: 0xAB_CDEF,
        remote_cm_response_timeout: 0x15,
        transport_service_type: 1,
        end_to_end_flow_control: true,
        starting_psn: 0xFE_DCBA,
        local_cm_response_timeout: 0x0E,
        retry_count: 5,
        partition_key: 0xFFFF,
        path_packet_payload_mtu: 3,
        rdc_exists: true,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 1,
        primary_path: ReqPath {
            local_port_lid: 0xFFFF,
            remote_port_lid: 0xFFFE,
            local_port_gid: gid4(10, 0, 0, 1),
            remote_port_gid: gid4(10, 0, 0, 2),
            flow_label: 0xA_BCDE,
            packet_rate: 0x2A,
            traffic_class: 0xB8,
            hop_limit: 0x40,
            sl: 0xC,
            subnet_local: true,
            local_ack_timeout: 0x13,
        },
        alternate_path: ReqPath {
            local_port_lid: 0x0102,
            remote_port_lid: 0x0304,
            local_port_gid: Gid([0x11; 16]),
            remote_port_gid: Gid([0x22; 16]),
            flow_label: 0x1_2345,
            packet_rate: 0x07,
            traffic_class: 0x11,
            hop_limit: 0x22,
            sl: 3,
            subnet_local: false,
            local_ack_timeout: 0x1F,
        },
        sap_supported: true,
        private_data: counting(92, 0x80),
    }
}

#[test]
fn mad_header_is_the_linux_cm_send_header() {
    let mad = CmMessage::Rtu(Rtu::default())
        .encode(TID, 0xCAFE_F00D)
        .unwrap();
    common_header(&mad, [0x00, 0x14], [0xCA, 0xFE, 0xF0, 0x0D]);
    let (hdr, _) = decode(&mad).unwrap();
    assert_eq!(hdr, MadHeader::cm(0x0014, TID, 0xCAFE_F00D));
}

#[test]
fn req_fields_sit_at_table_106_offsets() {
    let mad = CmMessage::Req(sample_req()).encode(TID, 0).unwrap();
    common_header(&mad, [0x00, 0x10], [0, 0, 0, 0]);
    at(&mad, 24, &[0x11, 0x22, 0x33, 0x44]); // local comm id
    at(&mad, 28, &[0x00, 0xA1, 0xB2, 0xC3]); // reserved, vendor id
    at(&mad, 32, &[0, 0, 0, 0, 0x01, 0x06, 0x12, 0xB7]); // service id (TCP port 4791)
    at(&mad, 40, &[1, 2, 3, 4, 5, 6, 7, 8]); // local CA GUID
    at(&mad, 48, &[0, 0, 0, 0]); // reserved
    at(&mad, 52, &[0xDE, 0xAD, 0xBE, 0xEF]); // local Q_Key
    at(&mad, 56, &[0x12, 0x34, 0x56, 0x9A]); // local QPN, responder resources
    at(&mad, 60, &[0x65, 0x43, 0x21, 0x7B]); // local EECN, initiator depth
                                             // remote EECN; byte 67 = timeout 10101 | transport 01 | e2e 1
    at(&mad, 64, &[0xAB, 0xCD, 0xEF, 0b1010_1011]);
    // starting PSN; byte 71 = local CM response timeout 01110 | retry 101
    at(&mad, 68, &[0xFE, 0xDC, 0xBA, 0b0111_0101]);
    at(&mad, 72, &[0xFF, 0xFF]); // P_Key
    at(&mad, 74, &[0b0011_1_111]); // MTU 3 | RDC 1 | RNR retry 7
    at(&mad, 75, &[0b1111_0_001]); // max CM retries 15 | SRQ 0 | ext transport 1
                                   // primary path
    at(&mad, 76, &[0xFF, 0xFF, 0xFF, 0xFE]);
    at(
        &mad,
        80,
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1],
    );
    at(
        &mad,
        96,
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2],
    );
    at(&mad, 112, &[0xAB, 0xCD, 0xE0, 0x2A]); // flow label 20 bits | rsvd | packet rate
    at(&mad, 116, &[0xB8, 0x40]); // traffic class, hop limit
    at(&mad, 118, &[0b1100_1_000]); // SL 12 | subnet local 1
    at(&mad, 119, &[0b10011_000]); // local ACK timeout 0x13
                                   // alternate path
    at(&mad, 120, &[0x01, 0x02, 0x03, 0x04]);
    at(&mad, 124, &[0x11; 16]);
    at(&mad, 140, &[0x22; 16]);
    at(&mad, 156, &[0x12, 0x34, 0x50, 0x07]);
    at(&mad, 160, &[0x11, 0x22, 0b0011_0_000]);
    at(&mad, 163, &[0b11111_1_00]); // ACK timeout 0x1F | SAP supported
    at(&mad, 164, &counting(92, 0x80)); // private data to the last byte
    assert_eq!(mad[255], 0x80u8.wrapping_add(91));
}

#[test]
fn rep_fields_sit_at_table_110_offsets() {
    let rep = Rep {
        local_comm_id: 0x1122_3344,
        remote_comm_id: 0x5566_7788,
        local_q_key: 0x0102_0304,
        local_qpn: 0xAB_CDEF,
        local_eecn: 0x0A_0B0C,
        starting_psn: 0x0F_EDCB,
        vendor_id: 0x12_3456,
        responder_resources: 0x10,
        initiator_depth: 0x20,
        target_ack_delay: 15,
        failover_accepted: 2,
        end_to_end_flow_control: true,
        rnr_retry_count: 6,
        srq: true,
        local_ca_guid: 0x8877_6655_4433_2211,
        private_data: counting(196, 1),
    };
    let mad = CmMessage::Rep(rep).encode(TID, 0).unwrap();
    common_header(&mad, [0x00, 0x13], [0, 0, 0, 0]);
    at(&mad, 24, &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    at(&mad, 32, &[1, 2, 3, 4]);
    at(&mad, 36, &[0xAB, 0xCD, 0xEF, 0x12]); // QPN, vendor id high
    at(&mad, 40, &[0x0A, 0x0B, 0x0C, 0x34]); // EECN, vendor id middle
    at(&mad, 44, &[0x0F, 0xED, 0xCB, 0x56]); // PSN, vendor id low
    at(&mad, 48, &[0x10, 0x20]);
    at(&mad, 50, &[0b01111_10_1]); // target ACK delay | failover | e2e
    at(&mad, 51, &[0b110_1_0000]); // RNR retry | SRQ
    at(&mad, 52, &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
    at(&mad, 60, &counting(196, 1));
}

#[test]
fn mra_fields_sit_at_table_107_offsets() {
    let mra = Mra {
        local_comm_id: 0xA1A2_A3A4,
        remote_comm_id: 0xB1B2_B3B4,
        message_mraed: CmMsgResponse::Rep,
        service_timeout: 0x17,
        private_data: counting(222, 7),
    };
    let mad = CmMessage::Mra(mra).encode(TID, 0).unwrap();
    common_header(&mad, [0x00, 0x11], [0, 0, 0, 0]);
    at(&mad, 24, &[0xA1, 0xA2, 0xA3, 0xA4, 0xB1, 0xB2, 0xB3, 0xB4]);
    at(&mad, 32, &[0b01_000000, 0b10111_000]);
    at(&mad, 34, &counting(222, 7));
}

#[test]
fn rej_fields_sit_at_table_108_offsets() {
    let rej = Rej {
        local_comm_id: 0,
        remote_comm_id: 0xB1B2_B3B4,
        message_rejected: CmMsgResponse::Other,
        reason: RejectReason::ConsumerDefined.into(),
        ari: counting(8, 0xE0),
        private_data: counting(148, 3),
    };
    let mad = CmMessage::Rej(rej).encode(TID, 0).unwrap();
    common_header(&mad, [0x00, 0x12], [0, 0, 0, 0]);
    at(&mad, 24, &[0, 0, 0, 0, 0xB1, 0xB2, 0xB3, 0xB4]);
    at(&mad, 32, &[0b10_000000, 0b0001000_0, 0x00, 0x1C]); // msg rejected, ARI len 8, reason 28
    at(&mad, 36, &counting(8, 0xE0));
    at(&mad, 44, &[0; 64]); // rest of the 72-byte ARI
    at(&mad, 108, &counting(148, 3));
}

#[test]
fn rtu_and_drep_fields_sit_at_tables_111_113_offsets() {
    for (msg, attr) in [
        (
            CmMessage::Rtu(Rtu {
                local_comm_id: 0x0102_0304,
                remote_comm_id: 0x0506_0708,
                private_data: counting(224, 9),
            }),
            0x14,
        ),
        (
            CmMessage::Drep(Drep {
                local_comm_id: 0x0102_0304,
                remote_comm_id: 0x0506_0708,
                private_data: counting(224, 9),
            }),
            0x16,
        ),
    ] {
        let mad = msg.encode(TID, 0).unwrap();
        common_header(&mad, [0x00, attr], [0, 0, 0, 0]);
        at(&mad, 24, &[1, 2, 3, 4, 5, 6, 7, 8]);
        at(&mad, 32, &counting(224, 9));
    }
}

#[test]
fn dreq_fields_sit_at_table_112_offsets() {
    let dreq = Dreq {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        remote_qpn_eecn: 0xC0_FFEE,
        private_data: counting(220, 0x40),
    };
    let mad = CmMessage::Dreq(dreq).encode(TID, 0).unwrap();
    common_header(&mad, [0x00, 0x15], [0, 0, 0, 0]);
    at(&mad, 24, &[1, 2, 3, 4, 5, 6, 7, 8]);
    at(&mad, 32, &[0xC0, 0xFF, 0xEE, 0x00]);
    at(&mad, 36, &counting(220, 0x40));
}

#[test]
fn sidr_fields_sit_at_tables_119_120_offsets() {
    let req = SidrReq {
        request_id: 0x0102_0304,
        partition_key: 0xFFFF,
        service_id: 0x0000_0000_0111_0457,
        private_data: counting(216, 2),
    };
    let mad = CmMessage::SidrReq(req).encode(TID, 0).unwrap();
    common_header(&mad, [0x00, 0x17], [0, 0, 0, 0]);
    at(&mad, 24, &[1, 2, 3, 4, 0xFF, 0xFF, 0, 0]);
    at(&mad, 32, &[0, 0, 0, 0, 0x01, 0x11, 0x04, 0x57]);
    at(&mad, 40, &counting(216, 2));

    let rep = SidrRep {
        request_id: 0x0102_0304,
        status: 3,
        vendor_id: 0xAB_CDEF,
        qpn: 0x12_3456,
        service_id: 0x0000_0000_0111_0457,
        q_key: 0x0123_4567,
        additional_information: counting(5, 0x90),
        private_data: counting(136, 4),
    };
    let mad = CmMessage::SidrRep(rep).encode(TID, 0).unwrap();
    common_header(&mad, [0x00, 0x18], [0, 0, 0, 0]);
    at(&mad, 24, &[1, 2, 3, 4, 3, 5, 0xAB, 0xCD]); // id, status, info len, vendor high
    at(&mad, 32, &[0x12, 0x34, 0x56, 0xEF]); // QPN, vendor low
    at(
        &mad,
        36,
        &[0, 0, 0, 0, 0x01, 0x11, 0x04, 0x57, 0x01, 0x23, 0x45, 0x67],
    );
    at(&mad, 48, &counting(5, 0x90));
    at(&mad, 120, &counting(136, 4));
}

#[test]
fn twenty_four_bit_fields_are_masked_and_do_not_spill() {
    let req = Req {
        local_qpn: 0xFF12_3456,
        responder_resources: 0x9A,
        starting_psn: 0xEEAB_CDEF,
        local_cm_response_timeout: 0xFF, // 5 bits: 0x1F
        retry_count: 0,
        ..Req::default()
    };
    let mad = CmMessage::Req(req).encode(TID, 0).unwrap();
    at(&mad, 56, &[0x12, 0x34, 0x56, 0x9A]);
    at(&mad, 68, &[0xAB, 0xCD, 0xEF, 0b11111_000]);
    let Ok((_, CmMessage::Req(back))) = decode(&mad) else {
        panic!("REQ did not decode")
    };
    assert_eq!(back.local_qpn, 0x12_3456);
    assert_eq!(back.starting_psn, 0xAB_CDEF);
    assert_eq!(back.local_cm_response_timeout, 0x1F);
    assert_eq!(back.retry_count, 0);
}

#[test]
fn flow_label_keeps_the_packet_rate_byte() {
    let mut req = sample_req();
    req.primary_path.flow_label = 0xFFFF_FFFF; // 20 bits: 0xFFFFF
    req.primary_path.packet_rate = 0;
    let mad = CmMessage::Req(req).encode(TID, 0).unwrap();
    at(&mad, 112, &[0xFF, 0xFF, 0xF0, 0x00]);
}

#[test]
fn private_data_at_capacity_fits_and_one_more_byte_is_rejected() {
    let cases: [(CmMessage, usize, u16); 9] = [
        (Req::default().into(), 92, 0x10),
        (Mra::default().into(), 222, 0x11),
        (Rej::default().into(), 148, 0x12),
        (Rep::default().into(), 196, 0x13),
        (Rtu::default().into(), 224, 0x14),
        (Dreq::default().into(), 220, 0x15),
        (Drep::default().into(), 224, 0x16),
        (SidrReq::default().into(), 216, 0x17),
        (SidrRep::default().into(), 136, 0x18),
    ];
    for (msg, cap, attr) in cases {
        let with = |len: usize| {
            let mut m = msg.clone();
            let pd = vec![0x5A; len];
            match &mut m {
                CmMessage::Req(x) => x.private_data = pd,
                CmMessage::Mra(x) => x.private_data = pd,
                CmMessage::Rej(x) => x.private_data = pd,
                CmMessage::Rep(x) => x.private_data = pd,
                CmMessage::Rtu(x) => x.private_data = pd,
                CmMessage::Dreq(x) => x.private_data = pd,
                CmMessage::Drep(x) => x.private_data = pd,
                CmMessage::SidrReq(x) => x.private_data = pd,
                CmMessage::SidrRep(x) => x.private_data = pd,
            }
            m.encode(TID, 0)
        };
        let mad = with(cap).unwrap();
        at(&mad, 256 - cap, &vec![0x5A; cap]);
        assert_eq!(
            with(cap + 1),
            Err(WireError::PrivateDataTooLong {
                attribute_id: attr,
                len: cap + 1,
                max: cap
            })
        );
    }
}

#[test]
fn ari_longer_than_72_bytes_is_rejected_both_ways() {
    let rej = Rej {
        ari: vec![1; 73],
        ..Rej::default()
    };
    assert_eq!(
        CmMessage::Rej(rej).encode(TID, 0),
        Err(WireError::InfoTooLong {
            attribute_id: 0x12,
            len: 73,
            max: 72
        })
    );
    let mut mad = CmMessage::Rej(Rej::default()).encode(TID, 0).unwrap();
    mad[33] = 73 << 1;
    assert_eq!(
        decode(&mad),
        Err(WireError::InfoTooLong {
            attribute_id: 0x12,
            len: 73,
            max: 72
        })
    );
}

#[test]
fn decode_rejects_each_bad_header_field_with_its_own_error() {
    let good = CmMessage::Dreq(Dreq::default()).encode(TID, 0).unwrap();
    let patched = |off: usize, v: u8| {
        let mut m = good;
        m[off] = v;
        decode(&m)
    };
    assert_eq!(decode(&good[..255]), Err(WireError::BadLength { len: 255 }));
    assert_eq!(decode(&[0; 257]), Err(WireError::BadLength { len: 257 }));
    assert_eq!(decode(&[]), Err(WireError::BadLength { len: 0 }));
    assert_eq!(patched(0, 2), Err(WireError::BadBaseVersion(2)));
    assert_eq!(patched(1, 0x81), Err(WireError::BadMgmtClass(0x81)));
    assert_eq!(patched(2, 1), Err(WireError::BadClassVersion(1)));
    assert_eq!(patched(3, 0x81), Err(WireError::BadMethod(0x81)));
    assert_eq!(patched(17, 0x19), Err(WireError::UnknownAttributeId(0x19))); // LAP
    assert_eq!(patched(17, 0x01), Err(WireError::UnknownAttributeId(0x01))); // ClassPortInfo
    assert!(decode(&good).is_ok());
}

#[test]
fn reserved_message_response_value_is_rejected() {
    let mut mad = CmMessage::Mra(Mra::default()).encode(TID, 0).unwrap();
    mad[32] = 0b11_000000;
    assert_eq!(decode(&mad), Err(WireError::BadMsgResponse(3)));
    let mut mad = CmMessage::Rej(Rej::default()).encode(TID, 0).unwrap();
    mad[32] = 0b11_000000;
    assert_eq!(decode(&mad), Err(WireError::BadMsgResponse(3)));
}

#[test]
fn reject_reasons_have_linux_numbers() {
    let pairs = [
        (RejectReason::NoQp, 1),
        (RejectReason::Timeout, 4),
        (RejectReason::InvalidCommId, 6),
        (RejectReason::InvalidServiceId, 8),
        (RejectReason::StaleConn, 10),
        (RejectReason::InvalidGid, 12),
        (RejectReason::InvalidAltGid, 18),
        (RejectReason::ConsumerDefined, 28),
        (RejectReason::InvalidClassVersion, 31),
        (RejectReason::InvalidAltFlowLabel, 33),
        (RejectReason::VendorOptionNotSupported, 35),
    ];
    for (r, n) in pairs {
        assert_eq!(u16::from(r), n);
        assert_eq!(RejectReason::try_from(n), Ok(r));
    }
    for (i, r) in RejectReason::ALL.iter().enumerate() {
        assert_eq!(RejectReason::try_from(u16::from(*r)), Ok(*r), "index {i}");
    }
    assert_eq!(RejectReason::try_from(0), Err(0));
    assert_eq!(RejectReason::try_from(34), Err(34));
    assert_eq!(RejectReason::try_from(36), Err(36));
}

#[test]
fn private_data_capacities_match_ib_cm_h() {
    assert_eq!(IB_CM_REQ_PRIVATE_DATA_SIZE, 92);
    assert_eq!(IB_CM_MRA_PRIVATE_DATA_SIZE, 222);
    assert_eq!(IB_CM_REJ_PRIVATE_DATA_SIZE, 148);
    assert_eq!(IB_CM_REP_PRIVATE_DATA_SIZE, 196);
    assert_eq!(IB_CM_RTU_PRIVATE_DATA_SIZE, 224);
    assert_eq!(IB_CM_DREQ_PRIVATE_DATA_SIZE, 220);
    assert_eq!(IB_CM_DREP_PRIVATE_DATA_SIZE, 224);
    assert_eq!(IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE, 216);
    assert_eq!(IB_CM_SIDR_REP_PRIVATE_DATA_SIZE, 136);
    assert_eq!(RDMA_TCP_REQ_USER_PRIVATE_DATA_MAX, 56);
    assert_eq!(RDMA_UDP_SIDR_REQ_USER_PRIVATE_DATA_MAX, 180);
}

#[test]
fn ip_service_id_is_port_space_shifted_16_or_port() {
    let sid = ip_service_id(RdmaPortSpace::Tcp, 4791);
    assert_eq!(sid.to_be_bytes(), [0, 0, 0, 0, 0x01, 0x06, 0x12, 0xB7]);
    assert_eq!(sid, RDMA_IB_IP_PS_TCP | 4791);
    assert_eq!(sid & RDMA_IB_IP_PS_MASK, RDMA_IB_IP_PS_TCP);
    assert_eq!(ip_service_id(RdmaPortSpace::Udp, 1), RDMA_IB_IP_PS_UDP | 1);
    assert_eq!(ip_service_id(RdmaPortSpace::Ib, 0), RDMA_IB_IP_PS_IB);
    assert_eq!(ip_service_id(RdmaPortSpace::Ipoib, 7), 0x0002_0007);
    assert_eq!(parse_ip_service_id(sid), Some((RdmaPortSpace::Tcp, 4791)));
    assert_eq!(parse_ip_service_id(0x0000_0001_0106_0001), None);
    assert_eq!(parse_ip_service_id(0x0000_0000_0107_0001), None);
}

#[test]
fn ip_cm_header_ipv4_is_zero_padded_per_cma_ip_addr() {
    let hdr = IpCmHeader {
        src_port: 0xC001,
        src_addr: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)),
        dst_addr: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20)),
    };
    assert_eq!(hdr.ip_version(), 4);
    let b = hdr.encode();
    assert_eq!(&b[0..4], &[0x00, 0x40, 0xC0, 0x01]);
    assert_eq!(&b[4..16], &[0; 12]);
    assert_eq!(&b[16..20], &[192, 168, 1, 10]);
    assert_eq!(&b[20..32], &[0; 12]);
    assert_eq!(&b[32..36], &[192, 168, 1, 20]);
    assert_eq!(IpCmHeader::decode(&b), Ok(hdr));
}

#[test]
fn ip_cm_header_ipv6_and_mixed_families() {
    let v6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 1, 2, 3, 4);
    let hdr = IpCmHeader {
        src_port: 1,
        src_addr: IpAddr::V6(v6),
        dst_addr: IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)),
    };
    let b = hdr.encode();
    assert_eq!(b[1], 0x60);
    assert_eq!(&b[4..20], &v6.octets());
    assert_eq!(
        &b[20..36],
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 1, 2, 3, 4]
    );
    let back = IpCmHeader::decode(&b).unwrap();
    assert_eq!(back.src_addr, IpAddr::V6(v6));
    assert_eq!(
        back.dst_addr,
        IpAddr::V6(Ipv4Addr::new(1, 2, 3, 4).to_ipv6_mapped())
    );
}

#[test]
fn ip_cm_header_validation_follows_cma_save_ip_info() {
    let mut b = IpCmHeader {
        src_port: 1,
        src_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        dst_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
    .encode();
    assert_eq!(
        IpCmHeader::decode(&b[..35]),
        Err(WireError::IpCmTooShort { len: 35 })
    );
    b[1] = 0x50;
    assert_eq!(IpCmHeader::decode(&b), Err(WireError::BadIpVersion(5)));
    b[0] = 0x10;
    assert_eq!(IpCmHeader::decode(&b), Err(WireError::BadCmaVersion(0x10)));
    assert_eq!(
        WireError::BadCmaVersion(0x10).errno(),
        verbs_core::Errno::EINVAL
    );
}

#[test]
fn tcp_req_user_private_data_is_limited_to_56_bytes() {
    let hdr = IpCmHeader {
        src_port: 0xC000,
        src_addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst_addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    };
    let pd = hdr.req_private_data(&[7; 56]).unwrap();
    assert_eq!(pd.len(), 92);
    assert_eq!(
        hdr.req_private_data(&[7; 57]),
        Err(WireError::PrivateDataTooLong {
            attribute_id: 0x10,
            len: 57,
            max: 56
        })
    );
    // Through a REQ and back: the user part comes back zero-padded to 56 bytes.
    let req = Req {
        private_data: hdr.req_private_data(b"hello").unwrap(),
        ..Req::default()
    };
    let mad = CmMessage::Req(req).encode(TID, 0).unwrap();
    at(&mad, 164, &[0x00, 0x40, 0xC0, 0x00]);
    at(&mad, 200, b"hello");
    let Ok((_, CmMessage::Req(back))) = decode(&mad) else {
        panic!("REQ did not decode")
    };
    let (h, user) = IpCmHeader::split(&back.private_data).unwrap();
    assert_eq!(h, hdr);
    assert_eq!(user.len(), 56);
    assert_eq!(&user[..5], b"hello");
    assert!(user[5..].iter().all(|b| *b == 0));
    assert_eq!(
        hdr.sidr_req_private_data(&[0; 181]).unwrap_err().errno(),
        verbs_core::Errno::EINVAL
    );
}
