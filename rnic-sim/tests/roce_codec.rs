//! Properties of the RoCEv2 codec: round trip, totality of decode, ICRC error detection,
//! truncation, and the rules in docs/roce-wire.md.

use std::net::SocketAddr;

use bytes::Bytes;
use proptest::prelude::*;
use rnic_sim::roce::codec::{decode_verbose, encoded_len, ext_headers_len, pad_cnt_for};
use rnic_sim::roce::{
    decode, decode_bytes, encode, Aeth, AethKind, AtomicAckEth, AtomicEth, Bth, CodecError, Deth,
    Flow, NakCode, Opcode, Packet, Reth,
};

fn arb_flow() -> impl Strategy<Value = Flow> {
    let v4 = (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p)));
    let v6 = (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p)));
    prop_oneof![
        (v4.clone(), v4).prop_map(|(s, d)| Flow::new(s, d)),
        (v6.clone(), v6).prop_map(|(s, d)| Flow::new(s, d)),
    ]
}

fn arb_aeth() -> impl Strategy<Value = Aeth> {
    let kind = prop_oneof![
        (0u8..32).prop_map(AethKind::Ack),
        (0u8..32).prop_map(AethKind::RnrNak),
        prop::sample::select(vec![
            NakCode::PsnSeqError,
            NakCode::InvalidRequest,
            NakCode::RemoteAccessError,
            NakCode::RemoteOperationalError,
            NakCode::InvalidRdRequest,
        ])
        .prop_map(AethKind::Nak),
    ];
    (kind, 0u32..1 << 24).prop_map(|(syndrome, msn)| Aeth { syndrome, msn })
}

/// Any packet that is consistent with its opcode (`Packet::is_consistent`) and has a correct
/// PadCnt and TVer 0: exactly the packets `encode` accepts and `decode` reproduces.
fn arb_packet() -> impl Strategy<Value = Packet> {
    let bth = (
        prop::sample::select(Opcode::ALL.to_vec()),
        any::<[bool; 6]>(),
        any::<u16>(),
        0u32..1 << 24,
        0u32..1 << 24,
    );
    let headers = (
        any::<(u64, u32, u32)>(),
        (any::<u32>(), 0u32..1 << 24),
        any::<(u64, u32, u64, u64)>(),
        arb_aeth(),
        any::<u64>(),
        any::<u32>(),
    );
    let payload = prop::collection::vec(any::<u8>(), 0..300);
    (bth, headers, payload).prop_map(
        |((opcode, f, pkey, dest_qp, psn), (reth, deth, atomic, aeth, orig, imm), payload)| {
            let h = opcode.headers();
            let payload = if opcode.has_payload() {
                payload
            } else {
                Vec::new()
            };
            Packet {
                bth: Bth {
                    opcode,
                    se: f[0],
                    mig_req: f[1],
                    pad_cnt: pad_cnt_for(payload.len()),
                    tver: 0,
                    pkey,
                    fecn: f[2],
                    becn: f[3],
                    dest_qp,
                    ack_req: f[4],
                    psn,
                },
                reth: h.reth.then_some(Reth {
                    va: reth.0,
                    rkey: reth.1,
                    dma_len: reth.2,
                }),
                deth: h.deth.then_some(Deth {
                    qkey: deth.0,
                    src_qp: deth.1,
                }),
                atomic_eth: h.atomic_eth.then_some(AtomicEth {
                    va: atomic.0,
                    rkey: atomic.1,
                    swap_add: atomic.2,
                    compare: atomic.3,
                }),
                aeth: h.aeth.then_some(aeth),
                atomic_ack_eth: h.atomic_ack_eth.then_some(AtomicAckEth { orig }),
                imm: h.imm.then_some(imm),
                payload: Bytes::from(payload),
            }
        },
    )
}

fn flow() -> Flow {
    Flow::new(
        SocketAddr::from(([192, 168, 1, 10], 49152)),
        SocketAddr::from(([192, 168, 1, 20], 4791)),
    )
}

fn mad_packet() -> Packet {
    Packet {
        bth: Bth {
            opcode: Opcode::UdSendOnly,
            se: false,
            mig_req: false,
            pad_cnt: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: 1,
            ack_req: false,
            psn: 7,
        },
        reth: None,
        deth: Some(Deth {
            qkey: 0x8001_0000,
            src_qp: 1,
        }),
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        imm: None,
        payload: Bytes::from(vec![0xAB; 256]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn roundtrip_encode_decode_is_identity(p in arb_packet(), flow in arb_flow()) {
        prop_assert!(p.is_consistent());
        let wire = encode(&p, &flow).unwrap();
        prop_assert_eq!(wire.len(), encoded_len(&p));
        prop_assert_eq!(wire.len() % 4, 0);
        prop_assert_eq!(&decode(&wire, &flow, true).unwrap(), &p);
        prop_assert_eq!(&decode(&wire, &flow, false).unwrap(), &p);
        prop_assert_eq!(&decode_bytes(&wire.clone().freeze(), &flow, true).unwrap(), &p);
        prop_assert!(!decode_verbose(&wire, &flow, true).unwrap().reserved_bits_set);
    }

    #[test]
    fn decode_of_arbitrary_bytes_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        flow in arb_flow(),
        check in any::<bool>(),
    ) {
        let _ = decode(&bytes, &flow, check);
    }

    /// Arbitrary bytes behind a valid opcode and TVer, so the parser gets past the first checks.
    #[test]
    fn decode_of_plausible_bytes_never_panics(
        op in prop::sample::select(Opcode::ALL.to_vec()),
        b1 in any::<u8>(),
        rest in prop::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut bytes = vec![op as u8, b1 & 0xF0];
        bytes.extend(rest);
        let _ = decode(&bytes, &flow(), false);
    }

    #[test]
    fn single_bit_flip_is_detected(p in arb_packet(), flow in arb_flow(), pick in any::<prop::sample::Index>()) {
        let wire = encode(&p, &flow).unwrap();
        let bit = pick.index(wire.len() * 8);
        let mut bad = wire.to_vec();
        bad[bit / 8] ^= 1 << (bit % 8);
        let got = decode(&bad, &flow, true);
        if bit / 8 == 4 {
            // BTH byte 4 (FECN, BECN, resv6a) is variant: switches may set ECN bits, so the ICRC
            // masks it. A flip there changes FECN/BECN or a reserved bit, nothing else.
            let got = got.unwrap();
            let mut expect = p.clone();
            expect.bth.fecn = got.bth.fecn;
            expect.bth.becn = got.bth.becn;
            prop_assert_eq!(got, expect);
        } else {
            prop_assert!(got.is_err(), "flip of bit {} undetected", bit);
        }
    }

    #[test]
    fn every_truncation_is_an_error(p in arb_packet(), flow in arb_flow()) {
        let wire = encode(&p, &flow).unwrap();
        let headers = 12 + ext_headers_len(p.bth.opcode) + 4;
        for len in 0..wire.len() {
            prop_assert!(decode(&wire[..len], &flow, true).is_err());
            // Without the ICRC check a cut on a 4-byte boundary inside the payload still
            // parses (as a shorter payload); any other cut must be an error.
            if len % 4 != 0 || len < headers {
                prop_assert!(decode(&wire[..len], &flow, false).is_err());
            }
        }
    }

    #[test]
    fn icrc_depends_on_the_flow(p in arb_packet(), a in arb_flow(), b in arb_flow()) {
        prop_assume!(a != b);
        let wire = encode(&p, &a).unwrap();
        let ok = decode(&wire, &b, true).is_ok();
        // Different addressing gives a different pseudo header; only the same header decodes
        // (a 2^-32 collision chance is ignored).
        prop_assert!(!ok || a.ip_udp_header(wire.len()) == b.ip_udp_header(wire.len()));
    }
}

#[test]
fn cm_mad_packet_has_cm_spec_lengths_and_field_offsets() {
    // cm-spec §1.1–1.3: BTH(12) + DETH(8) + MAD(256) + ICRC(4) = 280 = UDP length 288 − 8.
    let wire = encode(&mad_packet(), &flow()).unwrap();
    assert_eq!(wire.len(), 280);
    assert_eq!(&wire[..12], &[0x64, 0, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 7]);
    assert_eq!(&wire[12..20], &[0x80, 0x01, 0, 0, 0, 0, 0, 1]);
}

#[test]
fn pad_cnt_pads_payload_to_four_bytes_with_zeros() {
    let mut p = mad_packet();
    p.payload = Bytes::from_static(&[1, 2, 3, 4, 5]);
    let wire = encode(&p, &flow()).unwrap();
    assert_eq!(wire.len(), 12 + 8 + 8 + 4);
    assert_eq!((wire[1] >> 4) & 3, 3);
    assert_eq!(&wire[20..28], &[1, 2, 3, 4, 5, 0, 0, 0]);
    p.bth.pad_cnt = 3;
    assert_eq!(decode(&wire, &flow(), true).unwrap(), p);
}

#[test]
fn encode_ignores_given_pad_cnt() {
    let mut p = mad_packet();
    p.bth.pad_cnt = 2;
    let wire = encode(&p, &flow()).unwrap();
    assert_eq!((wire[1] >> 4) & 3, 0);
}

#[test]
fn icrc_is_stored_little_endian_and_covers_masked_pseudo_header() {
    let wire = encode(&mad_packet(), &flow()).unwrap();
    let (transport, crc) = wire.split_at(wire.len() - 4);
    let computed = rnic_sim::roce::icrc::icrc(&flow(), transport).unwrap();
    assert_eq!(crc, computed.to_le_bytes());
}

#[test]
fn encode_rejects_headers_not_matching_opcode() {
    let mut p = mad_packet();
    p.deth = None;
    assert_eq!(
        encode(&p, &flow()),
        Err(CodecError::HeaderMismatch(Opcode::UdSendOnly))
    );
    let mut p = mad_packet();
    p.imm = Some(1);
    assert_eq!(
        encode(&p, &flow()),
        Err(CodecError::HeaderMismatch(Opcode::UdSendOnly))
    );
}

#[test]
fn encode_rejects_payload_on_ack() {
    let p = Packet {
        bth: Bth {
            opcode: Opcode::RcAcknowledge,
            ..mad_packet().bth
        },
        deth: None,
        aeth: Some(Aeth {
            syndrome: AethKind::Ack(0x1F),
            msn: 1,
        }),
        payload: Bytes::from_static(b"x"),
        ..mad_packet()
    };
    assert_eq!(encode(&p, &flow()), Err(CodecError::UnexpectedPayload(1)));
}

#[test]
fn encode_rejects_fields_wider_than_wire() {
    let mut p = mad_packet();
    p.bth.psn = 1 << 24;
    assert!(matches!(
        encode(&p, &flow()),
        Err(CodecError::FieldOutOfRange {
            field: "BTH PSN",
            ..
        })
    ));
    let mut p = mad_packet();
    p.bth.tver = 1;
    assert_eq!(encode(&p, &flow()), Err(CodecError::BadTver(1)));
}

#[test]
fn encode_rejects_datagram_too_long_for_ipv4() {
    let mut p = mad_packet();
    p.payload = Bytes::from(vec![0; 65_600]);
    assert!(matches!(encode(&p, &flow()), Err(CodecError::TooLong(_))));
}

#[test]
fn decode_rejects_unknown_opcode_and_tver() {
    let mut wire = encode(&mad_packet(), &flow()).unwrap();
    wire[0] = 0x15;
    assert_eq!(
        decode(&wire, &flow(), false),
        Err(CodecError::UnknownOpcode(0x15))
    );
    let mut wire = encode(&mad_packet(), &flow()).unwrap();
    wire[1] |= 0x01;
    assert_eq!(decode(&wire, &flow(), false), Err(CodecError::BadTver(1)));
}

#[test]
fn decode_rejects_length_not_multiple_of_four() {
    let wire = encode(&mad_packet(), &flow()).unwrap();
    assert_eq!(
        decode(&wire[..wire.len() - 1], &flow(), false),
        Err(CodecError::BadLength(279))
    );
}

#[test]
fn decode_rejects_pad_cnt_longer_than_payload() {
    let mut p = mad_packet();
    p.payload = Bytes::new();
    let mut wire = encode(&p, &flow()).unwrap();
    wire[1] |= 0x20;
    assert_eq!(decode(&wire, &flow(), false), Err(CodecError::BadPadCnt(2)));
}

#[test]
fn decode_rejects_reserved_aeth_syndrome_and_unknown_nak_code() {
    let ack = Packet {
        bth: Bth {
            opcode: Opcode::RcAcknowledge,
            ..mad_packet().bth
        },
        deth: None,
        aeth: Some(Aeth {
            syndrome: AethKind::Ack(0),
            msn: 1,
        }),
        payload: Bytes::new(),
        ..mad_packet()
    };
    let mut wire = encode(&ack, &flow()).unwrap();
    wire[12] = 0x40;
    assert_eq!(
        decode(&wire, &flow(), false),
        Err(CodecError::BadAethSyndrome(0x40))
    );
    wire[12] = 0x65;
    assert_eq!(
        decode(&wire, &flow(), false),
        Err(CodecError::BadAethSyndrome(0x65))
    );
}

#[test]
fn reserved_bits_are_ignored_and_reported() {
    let mut wire = encode(&mad_packet(), &flow()).unwrap();
    wire[8] |= 0x01; // BTH resv7
    wire[16] = 0xEE; // DETH reserved byte
    let d = decode_verbose(&wire, &flow(), false).unwrap();
    assert!(d.reserved_bits_set);
    assert_eq!(d.packet, mad_packet());
}

#[test]
fn ipv6_flow_roundtrips_and_differs_from_ipv4() {
    let v6 = Flow::new(
        "[2001:db8::1]:49152".parse().unwrap(),
        "[2001:db8::2]:4791".parse().unwrap(),
    );
    let wire = encode(&mad_packet(), &v6).unwrap();
    assert_eq!(decode(&wire, &v6, true).unwrap(), mad_packet());
    assert!(matches!(
        decode(&wire, &flow(), true),
        Err(CodecError::BadIcrc { .. })
    ));
}
