//! Properties of the CM wire codec: encode→decode round trips for every message with field
//! values inside their widths, width masking for out-of-range values, and totality of
//! `decode` on arbitrary input (cm-spec §2; "decoding never panics", ARCHITECTURE.md).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cm_core::wire::*;
use proptest::prelude::*;
use verbs_core::Gid;

const M24: u32 = 0xFF_FFFF;

fn bits(width: u32) -> impl Strategy<Value = u8> {
    0..=((1u16 << width) - 1) as u8
}

fn u24() -> impl Strategy<Value = u32> {
    0..=M24
}

fn pd(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=max)
}

fn gid() -> impl Strategy<Value = Gid> {
    any::<[u8; 16]>().prop_map(Gid)
}

fn msg_response() -> impl Strategy<Value = CmMsgResponse> {
    prop_oneof![
        Just(CmMsgResponse::Req),
        Just(CmMsgResponse::Rep),
        Just(CmMsgResponse::Other)
    ]
}

fn path() -> impl Strategy<Value = ReqPath> {
    (
        (any::<u16>(), any::<u16>(), gid(), gid()),
        (0..=0xF_FFFFu32, bits(6), any::<u8>(), any::<u8>()),
        (bits(4), any::<bool>(), bits(5)),
    )
        .prop_map(
            |(
                (local_port_lid, remote_port_lid, local_port_gid, remote_port_gid),
                (flow_label, packet_rate, traffic_class, hop_limit),
                (sl, subnet_local, local_ack_timeout),
            )| ReqPath {
                local_port_lid,
                remote_port_lid,
                local_port_gid,
                remote_port_gid,
                flow_label,
                packet_rate,
                traffic_class,
                hop_limit,
                sl,
                subnet_local,
                local_ack_timeout,
            },
        )
}

fn req() -> impl Strategy<Value = Req> {
    (
        (
            any::<u32>(),
            u24(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        ),
        (u24(), any::<u8>(), u24(), any::<u8>(), u24()),
        (bits(5), bits(2), any::<bool>(), u24(), bits(5), bits(3)),
        (any::<u16>(), bits(4), any::<bool>(), bits(3), bits(4)),
        (
            any::<bool>(),
            bits(3),
            path(),
            path(),
            any::<bool>(),
            pd(92),
        ),
    )
        .prop_map(
            |(
                (local_comm_id, vendor_id, service_id, local_ca_guid, local_q_key),
                (local_qpn, responder_resources, local_eecn, initiator_depth, remote_eecn),
                (
                    remote_cm_response_timeout,
                    transport_service_type,
                    end_to_end_flow_control,
                    starting_psn,
                    local_cm_response_timeout,
                    retry_count,
                ),
                (
                    partition_key,
                    path_packet_payload_mtu,
                    rdc_exists,
                    rnr_retry_count,
                    max_cm_retries,
                ),
                (
                    srq,
                    extended_transport_type,
                    primary_path,
                    alternate_path,
                    sap_supported,
                    private_data,
                ),
            )| Req {
                local_comm_id,
                vendor_id,
                service_id,
                local_ca_guid,
                local_q_key,
                local_qpn,
                responder_resources,
                local_eecn,
                initiator_depth,
                remote_eecn,
                remote_cm_response_timeout,
                transport_service_type,
                end_to_end_flow_control,
                starting_psn,
                local_cm_response_timeout,
                retry_count,
                partition_key,
                path_packet_payload_mtu,
                rdc_exists,
                rnr_retry_count,
                max_cm_retries,
                srq,
                extended_transport_type,
                primary_path,
                alternate_path,
                sap_supported,
                private_data,
            },
        )
}

fn rep() -> impl Strategy<Value = Rep> {
    (
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            u24(),
            u24(),
            u24(),
            u24(),
        ),
        (any::<u8>(), any::<u8>(), bits(5), bits(2), any::<bool>()),
        (bits(3), any::<bool>(), any::<u64>(), pd(196)),
    )
        .prop_map(
            |(
                (
                    local_comm_id,
                    remote_comm_id,
                    local_q_key,
                    local_qpn,
                    local_eecn,
                    starting_psn,
                    vendor_id,
                ),
                (
                    responder_resources,
                    initiator_depth,
                    target_ack_delay,
                    failover_accepted,
                    end_to_end_flow_control,
                ),
                (rnr_retry_count, srq, local_ca_guid, private_data),
            )| Rep {
                local_comm_id,
                remote_comm_id,
                local_q_key,
                local_qpn,
                local_eecn,
                starting_psn,
                vendor_id,
                responder_resources,
                initiator_depth,
                target_ack_delay,
                failover_accepted,
                end_to_end_flow_control,
                rnr_retry_count,
                srq,
                local_ca_guid,
                private_data,
            },
        )
}

fn any_message() -> impl Strategy<Value = CmMessage> {
    prop_oneof![
        req().prop_map(CmMessage::Req),
        (any::<u32>(), any::<u32>(), msg_response(), bits(5), pd(222)).prop_map(
            |(local_comm_id, remote_comm_id, message_mraed, service_timeout, private_data)| {
                CmMessage::Mra(Mra {
                    local_comm_id,
                    remote_comm_id,
                    message_mraed,
                    service_timeout,
                    private_data,
                })
            }
        ),
        (
            any::<u32>(),
            any::<u32>(),
            msg_response(),
            any::<u16>(),
            pd(72),
            pd(148)
        )
            .prop_map(
                |(local_comm_id, remote_comm_id, message_rejected, reason, ari, private_data)| {
                    CmMessage::Rej(Rej {
                        local_comm_id,
                        remote_comm_id,
                        message_rejected,
                        reason,
                        ari,
                        private_data,
                    })
                }
            ),
        rep().prop_map(CmMessage::Rep),
        (any::<u32>(), any::<u32>(), pd(224)).prop_map(|(l, r, p)| CmMessage::Rtu(Rtu {
            local_comm_id: l,
            remote_comm_id: r,
            private_data: p
        })),
        (any::<u32>(), any::<u32>(), u24(), pd(220)).prop_map(|(l, r, q, p)| CmMessage::Dreq(
            Dreq {
                local_comm_id: l,
                remote_comm_id: r,
                remote_qpn_eecn: q,
                private_data: p
            }
        )),
        (any::<u32>(), any::<u32>(), pd(224)).prop_map(|(l, r, p)| CmMessage::Drep(Drep {
            local_comm_id: l,
            remote_comm_id: r,
            private_data: p
        })),
        (any::<u32>(), any::<u16>(), any::<u64>(), pd(216)).prop_map(|(i, k, s, p)| {
            CmMessage::SidrReq(SidrReq {
                request_id: i,
                partition_key: k,
                service_id: s,
                private_data: p,
            })
        }),
        (
            (any::<u32>(), any::<u8>(), u24(), u24()),
            (any::<u64>(), any::<u32>(), pd(72), pd(136))
        )
            .prop_map(|((i, st, v, q), (s, k, info, p))| {
                CmMessage::SidrRep(SidrRep {
                    request_id: i,
                    status: st,
                    vendor_id: v,
                    qpn: q,
                    service_id: s,
                    q_key: k,
                    additional_information: info,
                    private_data: p,
                })
            }),
    ]
}

/// What decode gives back for `m`: private data zero-padded to capacity.
fn padded(m: &CmMessage) -> CmMessage {
    fn pad(v: &mut Vec<u8>, cap: usize) {
        v.resize(cap, 0);
    }
    let mut m = m.clone();
    match &mut m {
        CmMessage::Req(x) => pad(&mut x.private_data, 92),
        CmMessage::Mra(x) => pad(&mut x.private_data, 222),
        CmMessage::Rej(x) => pad(&mut x.private_data, 148),
        CmMessage::Rep(x) => pad(&mut x.private_data, 196),
        CmMessage::Rtu(x) => pad(&mut x.private_data, 224),
        CmMessage::Dreq(x) => pad(&mut x.private_data, 220),
        CmMessage::Drep(x) => pad(&mut x.private_data, 224),
        CmMessage::SidrReq(x) => pad(&mut x.private_data, 216),
        CmMessage::SidrRep(x) => pad(&mut x.private_data, 136),
    }
    m
}

/// `r` with every field cut to its wire width (widths from cm-spec §2.2, written by hand).
fn req_masked(mut r: Req) -> Req {
    fn path(p: &mut ReqPath) {
        p.flow_label &= 0xF_FFFF;
        p.packet_rate &= 0x3F;
        p.sl &= 0xF;
        p.local_ack_timeout &= 0x1F;
    }
    r.vendor_id &= M24;
    r.local_qpn &= M24;
    r.local_eecn &= M24;
    r.remote_eecn &= M24;
    r.remote_cm_response_timeout &= 0x1F;
    r.transport_service_type &= 0x3;
    r.starting_psn &= M24;
    r.local_cm_response_timeout &= 0x1F;
    r.retry_count &= 0x7;
    r.path_packet_payload_mtu &= 0xF;
    r.rnr_retry_count &= 0x7;
    r.max_cm_retries &= 0xF;
    r.extended_transport_type &= 0x7;
    path(&mut r.primary_path);
    path(&mut r.alternate_path);
    r.private_data.resize(92, 0);
    r
}

fn rep_masked(mut r: Rep) -> Rep {
    r.local_qpn &= M24;
    r.local_eecn &= M24;
    r.starting_psn &= M24;
    r.vendor_id &= M24;
    r.target_ack_delay &= 0x1F;
    r.failover_accepted &= 0x3;
    r.rnr_retry_count &= 0x7;
    r.private_data.resize(196, 0);
    r
}

fn wide_path() -> impl Strategy<Value = ReqPath> {
    (path(), any::<u32>(), any::<[u8; 3]>()).prop_map(|(mut p, fl, [a, b, c])| {
        p.flow_label = fl;
        p.packet_rate = a;
        p.sl = b;
        p.local_ack_timeout = c;
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_message_round_trips(msg in any_message(), tid in any::<u64>(), attr_mod in any::<u32>()) {
        let mad = msg.encode(tid, attr_mod).unwrap();
        let (hdr, back) = decode(&mad).unwrap();
        prop_assert_eq!(hdr, MadHeader::cm(msg.attribute_id(), tid, attr_mod));
        prop_assert_eq!(back, padded(&msg));
    }

    #[test]
    fn req_fields_wider_than_their_width_are_masked(
        mut r in req(),
        wide24 in any::<[u32; 5]>(),
        wide8 in any::<[u8; 9]>(),
        p1 in wide_path(),
        p2 in wide_path(),
    ) {
        [r.vendor_id, r.local_qpn, r.local_eecn, r.remote_eecn, r.starting_psn] = wide24;
        [
            r.remote_cm_response_timeout,
            r.transport_service_type,
            r.local_cm_response_timeout,
            r.retry_count,
            r.path_packet_payload_mtu,
            r.rnr_retry_count,
            r.max_cm_retries,
            r.extended_transport_type,
            _,
        ] = wide8;
        r.primary_path = p1;
        r.alternate_path = p2;
        let mad = CmMessage::Req(r.clone()).encode(1, 0).unwrap();
        prop_assert_eq!(decode(&mad).unwrap().1, CmMessage::Req(req_masked(r)));
    }

    #[test]
    fn rep_fields_wider_than_their_width_are_masked(
        mut r in rep(),
        wide24 in any::<[u32; 4]>(),
        wide8 in any::<[u8; 3]>(),
    ) {
        [r.local_qpn, r.local_eecn, r.starting_psn, r.vendor_id] = wide24;
        [r.target_ack_delay, r.failover_accepted, r.rnr_retry_count] = wide8;
        let mad = CmMessage::Rep(r.clone()).encode(1, 0).unwrap();
        prop_assert_eq!(decode(&mad).unwrap().1, CmMessage::Rep(rep_masked(r)));
    }

    #[test]
    fn dreq_remote_qpn_is_masked_to_24_bits(qpn in any::<u32>()) {
        let m = CmMessage::Dreq(Dreq { remote_qpn_eecn: qpn, ..Dreq::default() });
        let mad = m.encode(1, 0).unwrap();
        prop_assert_eq!(mad[35], 0);
        let Ok((_, CmMessage::Dreq(d))) = decode(&mad) else { panic!("DREQ") };
        prop_assert_eq!(d.remote_qpn_eecn, qpn & M24);
    }

    #[test]
    fn decode_never_panics_on_any_length(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode(&bytes);
        let _ = IpCmHeader::decode(&bytes);
        let _ = IpCmHeader::split(&bytes);
    }

    /// Random 256-byte MADs behind a valid CM header reach every message decoder; whatever
    /// decodes re-encodes to a MAD that decodes to the same message.
    #[test]
    fn decode_of_any_256_bytes_is_total_and_stable(
        body in proptest::collection::vec(any::<u8>(), 256),
        attr in 0x000Eu16..0x001C,
        valid_header in any::<bool>(),
    ) {
        let mut mad = [0u8; 256];
        mad.copy_from_slice(&body);
        if valid_header {
            mad[..4].copy_from_slice(&[1, 7, 2, 3]);
            mad[16..18].copy_from_slice(&attr.to_be_bytes());
        }
        if let Ok((hdr, msg)) = decode(&mad) {
            let again = msg.encode(hdr.transaction_id, hdr.attribute_modifier).unwrap();
            prop_assert_eq!(decode(&again).unwrap().1, msg);
        }
    }

    #[test]
    fn ip_cm_header_round_trips(
        v6 in any::<bool>(),
        src_port in any::<u16>(),
        a in any::<[u8; 16]>(),
        b in any::<[u8; 16]>(),
        user in pd(56),
    ) {
        let (src_addr, dst_addr) = if v6 {
            (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))
        } else {
            (
                IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
            )
        };
        let hdr = IpCmHeader { src_port, src_addr, dst_addr };
        let pd = hdr.req_private_data(&user).unwrap();
        let (back, rest) = IpCmHeader::split(&pd).unwrap();
        prop_assert_eq!(back, hdr);
        prop_assert_eq!(rest, &user[..]);
    }

    /// A UDP-port-space SIDR_REQ carries the same 36-byte IP-CM header in front of at most 180
    /// bytes of user data (`cma_resolve_ib_udp`); one byte more is EINVAL.
    #[test]
    fn sidr_req_ip_cm_header_round_trips_through_the_mad(
        src_port in any::<u16>(),
        a in any::<[u8; 4]>(),
        b in any::<[u8; 4]>(),
        user in pd(180),
        request_id in any::<u32>(),
        tid in any::<u64>(),
    ) {
        let hdr = IpCmHeader {
            src_port,
            src_addr: IpAddr::V4(Ipv4Addr::from(a)),
            dst_addr: IpAddr::V4(Ipv4Addr::from(b)),
        };
        let pd = hdr.sidr_req_private_data(&user).unwrap();
        let mad = CmMessage::SidrReq(SidrReq {
            request_id,
            partition_key: 0xFFFF,
            service_id: ip_service_id(RdmaPortSpace::Udp, src_port),
            private_data: pd,
        })
        .encode(tid, 0)
        .unwrap();
        let Ok((h, CmMessage::SidrReq(back))) = decode(&mad) else {
            return Err(TestCaseError::fail("not a SIDR_REQ"));
        };
        prop_assert_eq!(h.transaction_id, tid);
        prop_assert_eq!(back.request_id, request_id);
        let (got, rest) = IpCmHeader::split(&back.private_data).unwrap();
        prop_assert_eq!(got, hdr);
        prop_assert_eq!(rest.len(), 180);
        prop_assert_eq!(&rest[..user.len()], &user[..]);
        prop_assert!(hdr.sidr_req_private_data(&[0; 181]).is_err());
    }

    /// A SIDR_REP whose "additional information length" (msg byte 5) claims more than the
    /// 72-byte field is refused, whatever else it holds; any other one decodes and re-encodes to
    /// itself, its QPN within 24 bits.
    #[test]
    fn sidr_rep_info_length_is_checked_and_the_rest_round_trips(
        data in proptest::collection::vec(any::<u8>(), 232),
        tid in any::<u64>(),
    ) {
        let mut mad = CmMessage::SidrRep(SidrRep::default()).encode(tid, 0).unwrap();
        mad[24..].copy_from_slice(&data);
        let claimed = usize::from(data[5]);
        match decode(&mad) {
            Err(e) => {
                prop_assert!(claimed > 72, "refused with a {claimed}-byte claim: {e}");
            }
            Ok((_, CmMessage::SidrRep(r))) => {
                prop_assert!(claimed <= 72);
                prop_assert_eq!(r.additional_information.len(), claimed);
                prop_assert!(r.qpn <= 0xFF_FFFF);
                let again = CmMessage::SidrRep(r.clone()).encode(tid, 0).unwrap();
                prop_assert_eq!(decode(&again).unwrap().1, CmMessage::SidrRep(r));
            }
            Ok((_, other)) => {
                return Err(TestCaseError::fail(format!("decoded as {other:?}")));
            }
        }
    }

    #[test]
    fn ip_service_id_round_trips(ps in prop_oneof![
        Just(RdmaPortSpace::Ipoib), Just(RdmaPortSpace::Tcp),
        Just(RdmaPortSpace::Udp), Just(RdmaPortSpace::Ib)
    ], port in any::<u16>()) {
        prop_assert_eq!(parse_ip_service_id(ip_service_id(ps, port)), Some((ps, port)));
    }
}
