//! Bad input from the network is counted and dropped, never a panic: arbitrary packets (any
//! opcode, any combination of extension headers, PSNs near and far, payloads of any size)
//! thrown at a device with a live RC connection.

// Test code: a failed setup call is a test failure.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use proptest::prelude::*;
use rnic_sim::roce::*;
use rnic_sim::{pump::pump_pair, SimDevice, SimDeviceConfig};
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::*;

fn gid(i: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(172, 16, 0, i))
}

struct Pair {
    a: SimDevice,
    b: SimDevice,
    aq: Qp,
    bq: Qp,
}

fn pair() -> Pair {
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mut devs = [1u8, 2].map(|i| SimDevice::new(SimDeviceConfig::new("j", gid(i))));
    let spec = RcEndpointSpec {
        mr_len: 1 << 16,
        mr_access: access,
        cqe: 4096,
        shared_cq: true,
        sq_sig_all: true,
        ..RcEndpointSpec::default()
    }
    .queues(64, 1, 0);
    let qps = devs
        .each_mut()
        .map(|d| RcEndpoint::create(d, &spec).unwrap().qp);
    let p = RcParams {
        mtu: Mtu::Mtu256,
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 0,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        access,
    };
    let info = |i: usize| RcPeerInfo {
        gid: gid(i as u8 + 1),
        qpn: qps[i].qp_num,
        psn: 0,
    };
    for (i, d) in devs.iter_mut().enumerate() {
        connect_rc(d, qps[i].handle, &info(i), &info(1 - i), &p).unwrap();
    }
    let [a, b] = devs;
    Pair {
        a,
        b,
        aq: qps[0],
        bq: qps[1],
    }
}

fn packet() -> impl Strategy<Value = (Packet, bool)> {
    (
        proptest::sample::select(Opcode::ALL.to_vec()),
        any::<[bool; 6]>(),
        any::<bool>(),
        prop_oneof![0u32..8, any::<u32>()],
        prop_oneof![Just(0u32), 1u32..4, any::<u32>()],
        0usize..1200,
        any::<(u64, u32, u32, u64, u64, u8)>(),
        any::<bool>(),
    )
        .prop_map(
            |(opcode, hs, consistent, psn, dq, len, (va, rkey, dma_len, x, y, syn), to_a)| {
                let want = opcode.headers();
                let pick = |w: bool, i: usize| if consistent { w } else { hs[i] };
                let syndrome = match syn % 3 {
                    0 => AethKind::Ack(syn & 0x1F),
                    1 => AethKind::RnrNak(syn & 0x1F),
                    _ => AethKind::Nak(match syn % 5 {
                        0 => NakCode::PsnSeqError,
                        1 => NakCode::InvalidRequest,
                        2 => NakCode::RemoteAccessError,
                        3 => NakCode::RemoteOperationalError,
                        _ => NakCode::InvalidRdRequest,
                    }),
                };
                let p = Packet {
                    bth: Bth {
                        opcode,
                        se: hs[0],
                        mig_req: false,
                        pad_cnt: (len % 4) as u8,
                        tver: 0,
                        pkey: 0xFFFF,
                        fecn: false,
                        becn: false,
                        dest_qp: dq,
                        ack_req: hs[1],
                        psn: psn & PSN_MASK,
                    },
                    reth: pick(want.reth, 0).then_some(Reth { va, rkey, dma_len }),
                    deth: pick(want.deth, 1).then_some(Deth {
                        qkey: rkey,
                        src_qp: dq,
                    }),
                    atomic_eth: pick(want.atomic_eth, 2).then_some(AtomicEth {
                        va,
                        rkey,
                        swap_add: x,
                        compare: y,
                    }),
                    aeth: pick(want.aeth, 3).then_some(Aeth { syndrome, msn: psn }),
                    atomic_ack_eth: pick(want.atomic_ack_eth, 4)
                        .then_some(AtomicAckEth { orig: x }),
                    imm: pick(want.imm, 5).then_some(rkey),
                    payload: Bytes::from(vec![
                        0xA5;
                        if opcode.has_payload() || !consistent {
                            len
                        } else {
                            0
                        }
                    ]),
                };
                (p, to_a)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn arbitrary_packets_never_panic(pkts in proptest::collection::vec(packet(), 1..40)) {
        let mut p = pair();
        // Some real traffic in flight while the junk arrives.
        let wr = SendWr::rdma_read(1, vec![Sge { addr: 0x1000_0000, length: 600, lkey: 0x100 }], 0x1000_0000, 0x100);
        p.a.post_send(p.aq.handle, &[wr]).unwrap();
        let mut now = SimTime::ZERO;
        for (i, (mut pkt, to_a)) in pkts.into_iter().enumerate() {
            // Aim most packets at the live QPs.
            if pkt.bth.dest_qp < 4 && i % 2 == 0 {
                pkt.bth.dest_qp = if to_a { p.aq.qp_num } else { p.bq.qp_num };
            }
            if to_a {
                p.a.handle_packet(now, gid(2), pkt);
            } else {
                p.b.handle_packet(now, gid(1), pkt);
            }
            pump_pair(&mut p.a, &mut p.b, now);
            if let Some(t) = p.a.poll_timeout() {
                now = t;
                p.a.handle_timeout(now);
            }
        }
        let mut v = Vec::new();
        let _ = p.a.poll_cq(CqHandle(1), 100, &mut v);
    }
}
