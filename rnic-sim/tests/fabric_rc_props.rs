//! Property tests of the RC transport on the deterministic fabric: two [`SimNic`]s exchanging
//! RoCEv2 datagrams through a [`Simulation`] with a seeded [`FaultPlan`].
//!
//! * Faults that heal (loss, duplication, reordering jitter, a partition): every message of a
//!   random SEND/WRITE/READ sequence arrives exactly once, in order, byte-exact, and every WR
//!   completes once, in post order, with SUCCESS (TESTING.md S2, S3, S6).
//! * A permanent partition: the head WR completes with RETRY_EXC_ERR, the rest flush (S4), no
//!   later than the retry bound the QP attributes give.
//!
//! proptest prints the failing case (seed, faults, workload) for replay; the runs are
//! deterministic, so the printed case reproduces the failure exactly.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use proptest::prelude::*;
use rnic_sim::fabric::{
    Delay, FaultPlan, Jitter, Partition, PathFaults, RunOutcome, SimFabric, Simulation,
    DEFAULT_LATENCY_NS,
};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::net::Ipv4Addr;
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::{
    CqHandle, Device, Gid, Mr, Qp, RecvWr, SendWr, SimTime, WcOpcode, WcStatus, WorkCompletion,
};

/// Largest message, bytes (4 packets at the 1024-byte MTU of `RcParams::default`).
const MAX_LEN: u32 = 4096;
/// Most operations per case; each gets its own `MAX_LEN` slot in every MR.
const MAX_OPS: usize = 12;
const MR_LEN: usize = MAX_OPS * MAX_LEN as usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
}

struct Side {
    mr: Mr,
    scq: CqHandle,
    rcq: CqHandle,
    qp: Qp,
}

fn side(nic: &mut SimNic) -> Side {
    let spec = RcEndpointSpec {
        mr_len: MR_LEN,
        mr_access: RcParams::default().access,
        cqe: 256,
        sq_sig_all: true,
        ..RcEndpointSpec::default()
    }
    .queues(64, 1, 0);
    let ep = RcEndpoint::create(nic.device_mut(), &spec).unwrap();
    Side {
        mr: ep.mr,
        scq: ep.send_cq,
        rcq: ep.recv_cq,
        qp: ep.qp,
    }
}

fn gid(last: u8) -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last))
}

/// Two NICs connected with `params` on a fabric with `plan` and `seed`.
fn world(seed: u64, plan: FaultPlan, params: &RcParams) -> (Simulation<SimNic>, Side, Side) {
    let mut a = SimNic::at_gid(SimDevice::new(SimDeviceConfig::new("sim1", gid(1))));
    let mut b = SimNic::at_gid(SimDevice::new(SimDeviceConfig::new("sim2", gid(2))));
    let sa = side(&mut a);
    let sb = side(&mut b);
    let ia = RcPeerInfo {
        gid: a.gid(),
        qpn: sa.qp.qp_num,
        psn: 0xFF_FFFA, // wraps within the first messages
    };
    let ib = RcPeerInfo {
        gid: b.gid(),
        qpn: sb.qp.qp_num,
        psn: 0x00_0100,
    };
    connect_rc(a.device_mut(), sa.qp.handle, &ia, &ib, params).unwrap();
    connect_rc(b.device_mut(), sb.qp.handle, &ib, &ia, params).unwrap();
    let mut sim = Simulation::new(SimFabric::with_seed(seed, plan));
    sim.add_endpoint(a).unwrap();
    sim.add_endpoint(b).unwrap();
    (sim, sa, sb)
}

fn drain(nic: &mut SimNic, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    while nic.poll_cq(cq, 64, &mut out).unwrap() > 0 {}
    out
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// The local ACK timeout of exponent `t`, ns (4.096 µs × 2^t, IBTA 9.7.6.1.3).
fn ack_timeout_ns(t: u8) -> u64 {
    4096 << t
}

/// Faults that heal at `heal_ns`: path faults until then, one symmetric partition inside.
#[derive(Debug, Clone)]
struct Healing {
    seed: u64,
    loss: f64,
    duplicate: f64,
    jitter_ns: u64,
    cut_start_ns: u64,
    cut_len_ns: u64,
    heal_ns: u64,
}

/// ACK timeout exponent of property (a): 4.096 µs × 2^10 ≈ 4.19 ms.
const HEAL_TIMEOUT: u8 = 10;

fn healing() -> impl Strategy<Value = Healing> {
    let t_o = ack_timeout_ns(HEAL_TIMEOUT);
    // A stall (no progress) spends at most one retry on a NAK plus one per timeout, and the
    // first timeout after the heal gets through; with retry_cnt 7 the faults may last up to
    // 5 timeouts without exhausting the budget. Use 4 for margin.
    let max_heal = 4 * t_o;
    (
        any::<u64>(),
        0.0..=0.3f64,
        0.0..=0.3f64,
        0u64..=100_000,
        0..max_heal,
        0..max_heal,
    )
        .prop_map(
            move |(seed, loss, duplicate, jitter_ns, cut_start_ns, cut_len_ns)| {
                let cut_len_ns = cut_len_ns.min(max_heal - cut_start_ns);
                Healing {
                    seed,
                    loss,
                    duplicate,
                    jitter_ns,
                    cut_start_ns,
                    cut_len_ns,
                    heal_ns: max_heal,
                }
            },
        )
}

fn ops() -> impl Strategy<Value = Vec<(Kind, u32)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(Kind::Send), Just(Kind::Write), Just(Kind::Read)],
            1..=MAX_LEN,
        ),
        1..=MAX_OPS,
    )
}

fn check_healing(f: &Healing, ops: &[(Kind, u32)]) -> Result<(), TestCaseError> {
    let ip = |g: Gid| g.to_ip();
    let faults = PathFaults {
        loss: f.loss,
        duplicate: f.duplicate,
        corrupt: 0.0,
        delay: Delay {
            base_ns: DEFAULT_LATENCY_NS,
            jitter: Jitter::Uniform {
                max_ns: f.jitter_ns,
            },
        },
    };
    let start = SimTime::from_nanos(f.cut_start_ns);
    let plan = FaultPlan::new(faults).with_partition(Partition::symmetric(
        ip(gid(1)),
        ip(gid(2)),
        start,
        Some(start.plus_nanos(f.cut_len_ns)),
    ));
    let params = RcParams {
        timeout: HEAL_TIMEOUT,
        retry_cnt: 7,
        ..RcParams::default()
    };
    let (mut sim, sa, sb) = world(f.seed, plan, &params);
    let slot = |i: usize| (i as u64) * u64::from(MAX_LEN);
    // Sources: a's slot i for SEND/WRITE, b's slot i for READ. Targets: the other side's slot.
    let data: Vec<Vec<u8>> = ops
        .iter()
        .enumerate()
        .map(|(i, &(_, len))| pattern(i as u8 + 1, len as usize))
        .collect();
    let mut wrs = Vec::new();
    let mut recvs = Vec::new();
    for (i, &(kind, len)) in ops.iter().enumerate() {
        let (src, dst) = match kind {
            Kind::Read => (sim.endpoint_mut(1).unwrap(), &sb),
            _ => (sim.endpoint_mut(0).unwrap(), &sa),
        };
        src.mr_write(dst.mr.handle, slot(i), &data[i]).unwrap();
        let local = sa.mr.sge(slot(i), len);
        let remote = sb.mr.addr + slot(i);
        let id = i as u64;
        wrs.push(match kind {
            Kind::Send => {
                recvs.push(RecvWr::new(id, vec![sb.mr.sge(slot(i), MAX_LEN)]));
                SendWr::send(id, vec![local])
            }
            Kind::Write => SendWr::rdma_write(id, vec![local], remote, sb.mr.rkey),
            Kind::Read => SendWr::rdma_read(id, vec![local], remote, sb.mr.rkey),
        });
    }
    sim.endpoint_mut(1)
        .unwrap()
        .post_recv(sb.qp.handle, &recvs)
        .unwrap();
    sim.endpoint_mut(0)
        .unwrap()
        .post_send(sa.qp.handle, &wrs)
        .unwrap();
    sim.run_until(SimTime::from_nanos(f.heal_ns));
    *sim.fabric.plan_mut() = FaultPlan::new(PathFaults::perfect());
    prop_assert_eq!(
        sim.run_until_idle(SimTime::from_millis(60_000)),
        RunOutcome::Idle
    );

    // S2/S3: each send WR once, in post order, SUCCESS with its opcode and length.
    let swc = drain(sim.endpoint_mut(0).unwrap(), sa.scq);
    let got: Vec<(u64, WcStatus)> = swc.iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<(u64, WcStatus)> = (0..ops.len() as u64)
        .map(|i| (i, WcStatus::Success))
        .collect();
    prop_assert_eq!(got, want);
    for (w, &(kind, len)) in swc.iter().zip(ops) {
        let op = match kind {
            Kind::Send => WcOpcode::Send,
            Kind::Write => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
        };
        prop_assert_eq!((w.opcode, w.byte_len), (op, len));
    }
    // Exactly one receive completion per SEND, in order, with the message's length.
    let rwc = drain(sim.endpoint_mut(1).unwrap(), sb.rcq);
    let got: Vec<(u64, WcStatus, u32)> = rwc
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect();
    let want: Vec<(u64, WcStatus, u32)> = ops
        .iter()
        .enumerate()
        .filter(|(_, (k, _))| *k == Kind::Send)
        .map(|(i, &(_, len))| (i as u64, WcStatus::Success, len))
        .collect();
    prop_assert_eq!(got, want);
    // S6: byte-exact, and nothing written past a message's end.
    for (i, &(kind, len)) in ops.iter().enumerate() {
        let (nic, dst) = match kind {
            Kind::Read => (sim.endpoint(0).unwrap(), &sa),
            _ => (sim.endpoint(1).unwrap(), &sb),
        };
        let mut got = vec![0u8; MAX_LEN as usize];
        nic.mr_read(dst.mr.handle, slot(i), &mut got).unwrap();
        prop_assert_eq!(&got[..len as usize], &data[i][..], "op {} {:?}", i, kind);
        prop_assert!(
            got[len as usize..].iter().all(|&b| b == 0),
            "op {} {:?} wrote past its end",
            i,
            kind
        );
    }
    Ok(())
}

/// A partition that never heals, cutting one or both directions from time 0.
#[derive(Debug, Clone)]
struct Cut {
    seed: u64,
    /// Which datagrams are lost: 0 both ways, 1 requests (a → b), 2 responses (b → a).
    direction: u8,
    timeout: u8,
    retry_cnt: u8,
    kinds: Vec<Kind>,
}

fn cut() -> impl Strategy<Value = Cut> {
    (
        any::<u64>(),
        0u8..3,
        1u8..=14,
        0u8..=7,
        prop::collection::vec(
            prop_oneof![Just(Kind::Send), Just(Kind::Write), Just(Kind::Read)],
            1..=6,
        ),
    )
        .prop_map(|(seed, direction, timeout, retry_cnt, kinds)| Cut {
            seed,
            direction,
            timeout,
            retry_cnt,
            kinds,
        })
}

fn check_cut(c: &Cut) -> Result<(), TestCaseError> {
    let (ia, ib) = (gid(1).to_ip(), gid(2).to_ip());
    let part = match c.direction {
        0 => Partition::symmetric(ia, ib, SimTime::ZERO, None),
        1 => Partition::one_way(ia, ib, SimTime::ZERO, None),
        _ => Partition::one_way(ib, ia, SimTime::ZERO, None),
    };
    let plan = FaultPlan::new(PathFaults::perfect()).with_partition(part);
    let params = RcParams {
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        ..RcParams::default()
    };
    let (mut sim, sa, sb) = world(c.seed, plan, &params);
    let recvs: Vec<RecvWr> = (0..c.kinds.len() as u64)
        .map(|i| RecvWr::new(i, vec![sb.mr.sge(0, MAX_LEN)]))
        .collect();
    sim.endpoint_mut(1)
        .unwrap()
        .post_recv(sb.qp.handle, &recvs)
        .unwrap();
    let wrs: Vec<SendWr> = c
        .kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            let id = i as u64;
            let local = vec![sa.mr.sge(0, 64)];
            match kind {
                Kind::Send => SendWr::send(id, local),
                Kind::Write => SendWr::rdma_write(id, local, sb.mr.addr, sb.mr.rkey),
                Kind::Read => SendWr::rdma_read(id, local, sb.mr.addr, sb.mr.rkey),
            }
        })
        .collect();
    let posted = sim.now();
    sim.endpoint_mut(0)
        .unwrap()
        .post_send(sa.qp.handle, &wrs)
        .unwrap();
    // The head WR leaves at `posted` and arms the retransmit timer; each of the retry_cnt
    // expiries retransmits and re-arms it, and the (retry_cnt+1)-th completes the head with
    // RETRY_EXC_ERR. No ACK or NAK crosses the cut to reset or re-arm anything, and the timer is
    // armed in the same step as the post, so the moment is exact: slack 0. (Simulation::now()
    // after idling is the last event, which may be a retransmission reaching b after a gave
    // up, so the bound is checked by running to it.)
    let bound = posted.plus_nanos((u64::from(c.retry_cnt) + 1) * ack_timeout_ns(c.timeout));
    let slack = 0;
    sim.run_until(SimTime::from_nanos(bound.as_nanos() - 1));
    prop_assert!(
        drain(sim.endpoint_mut(0).unwrap(), sa.scq).is_empty(),
        "gave up before {:?}",
        bound
    );
    sim.run_until(bound.plus_nanos(slack));
    prop_assert_eq!(sim.now(), bound);
    let mut wcs = drain(sim.endpoint_mut(0).unwrap(), sa.scq);
    prop_assert!(!wcs.is_empty(), "still retrying at {:?}", bound);
    prop_assert_eq!(
        sim.run_until_idle(SimTime::from_millis(3_600_000)),
        RunOutcome::Idle
    );
    wcs.extend(drain(sim.endpoint_mut(0).unwrap(), sa.scq));
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<(u64, WcStatus)> = (0..c.kinds.len() as u64)
        .map(|i| {
            let s = if i == 0 {
                WcStatus::RetryExcErr
            } else {
                WcStatus::WrFlushErr
            };
            (i, s)
        })
        .collect();
    prop_assert_eq!(got, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn rc_delivers_exactly_once_in_order_byte_exact_under_faults_that_heal(
        f in healing(),
        ops in ops(),
    ) {
        check_healing(&f, &ops)?;
    }

    #[test]
    fn rc_under_a_permanent_partition_fails_the_head_with_retry_exc_err_within_the_bound(
        c in cut(),
    ) {
        check_cut(&c)?;
    }
}
