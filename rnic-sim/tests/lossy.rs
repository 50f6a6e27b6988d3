//! RC reliability over a lossy wire: a deterministic fault injector of the test's own (drop,
//! duplicate, reorder, driven by a splitmix64 seed) between two simulated devices, with virtual
//! time advanced to the next timer when the wire is idle. Checks exactly-once, in-order,
//! byte-exact delivery of SEND, WRITE, READ and atomics, and the retry/RNR limits.

// Test code: a failed setup call is a test failure.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use rnic_sim::{SimDevice, SimDeviceConfig, Transmit};
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::*;

/// splitmix64 (Steele, Lea, Flood 2014): a tiny seeded PRNG with a pinned algorithm.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `per_mille` / 1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// Fault rates in per mille.
#[derive(Debug, Clone, Copy)]
struct Faults {
    drop: u64,
    dup: u64,
    reorder: u64,
}

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

struct Host {
    dev: SimDevice,
    qp: Qp,
    cq: CqHandle,
    mr: Mr,
}

fn gid(i: u8) -> Gid {
    Gid::from_ipv4(std::net::Ipv4Addr::new(192, 168, 0, i))
}

fn host(i: u8) -> Host {
    let mut dev = SimDevice::new(SimDeviceConfig::new(format!("sim{i}"), gid(i)));
    let spec = RcEndpointSpec {
        mr_len: 1 << 20,
        mr_access: ACCESS,
        cqe: 1024,
        shared_cq: true,
        sq_sig_all: true,
        ..RcEndpointSpec::default()
    }
    .queues(128, 1, 0);
    let ep = RcEndpoint::create(&mut dev, &spec).unwrap();
    Host {
        dev,
        qp: ep.qp,
        cq: ep.send_cq,
        mr: ep.mr,
    }
}

fn connect(a: &mut Host, b: &mut Host, retry_cnt: u8, rnr_retry: u8, psn: u32) {
    let p = RcParams {
        mtu: Mtu::Mtu256,
        timeout: 8,
        retry_cnt,
        rnr_retry,
        min_rnr_timer: 3,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        access: ACCESS,
    };
    let info = |h: &Host| RcPeerInfo {
        gid: h.dev.gid(),
        qpn: h.qp.qp_num,
        psn,
    };
    let (ia, ib) = (info(a), info(b));
    connect_rc(&mut a.dev, a.qp.handle, &ia, &ib, &p).unwrap();
    connect_rc(&mut b.dev, b.qp.handle, &ib, &ia, &p).unwrap();
}

/// Runs both devices over the faulty wire until nothing is in flight and no timer is armed
/// (or `max_steps` rounds). Returns the final virtual time.
fn run(
    a: &mut Host,
    b: &mut Host,
    faults: Faults,
    rng: &mut SplitMix64,
    mut now: SimTime,
) -> SimTime {
    for _ in 0..200_000 {
        let mut flight: Vec<(bool, Transmit)> = Vec::new();
        while let Some(t) = a.dev.poll_transmit(now) {
            flight.push((true, t));
        }
        while let Some(t) = b.dev.poll_transmit(now) {
            flight.push((false, t));
        }
        if flight.is_empty() {
            let next = [a.dev.poll_timeout(), b.dev.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else {
                return now;
            };
            now = now.max(t);
            a.dev.handle_timeout(now);
            b.dev.handle_timeout(now);
            continue;
        }
        let mut wire = Vec::new();
        for p in flight {
            if rng.chance(faults.drop) {
                continue;
            }
            if rng.chance(faults.dup) {
                wire.push(p.clone());
            }
            wire.push(p);
        }
        for i in 1..wire.len() {
            if rng.chance(faults.reorder) {
                wire.swap(i - 1, i);
            }
        }
        for (from_a, t) in wire {
            if from_a {
                b.dev.handle_packet(now, a.dev.gid(), t.packet);
            } else {
                a.dev.handle_packet(now, b.dev.gid(), t.packet);
            }
        }
    }
    panic!("no quiescence");
}

fn poll(h: &mut Host) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    h.dev.poll_cq(h.cq, usize::MAX, &mut v).unwrap();
    v
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = SplitMix64(seed);
    (0..len).map(|_| r.next() as u8).collect()
}

/// A mixed workload: SENDs of distinct contents, a WRITE, a READ, and fetch-and-adds on one
/// counter, all over a faulty wire. Always: every WR completes exactly once, in post order, as
/// a run of successes, then at most one error (RETRY_EXC_ERR), then flushes; every successful
/// WR did exactly what one execution does. With `strict` (moderate faults) everything must
/// succeed.
fn workload(seed: u64, faults: Faults, psn: u32, strict: bool) -> Result<(), TestCaseError> {
    let mut rng = SplitMix64(seed);
    let mut a = host(1);
    let mut b = host(2);
    connect(&mut a, &mut b, 7, 7, psn);
    let n_send = 6u64;
    let lens: Vec<u32> = (0..n_send).map(|_| (rng.next() % 900) as u32).collect();
    // Receives for every SEND, at distinct 1 KiB slots of b's region.
    let recvs: Vec<RecvWr> = (0..n_send)
        .map(|i| RecvWr::new(100 + i, vec![b.mr.sge(i * 1024, 1024)]))
        .collect();
    b.dev.post_recv(b.qp.handle, &recvs).unwrap();
    let mut wrs = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let off = 0x10000 + i as u64 * 1024;
        a.dev
            .mr_write(a.mr.handle, off, &pattern(len as usize, seed ^ i as u64))
            .unwrap();
        wrs.push(SendWr::send(i as u64, vec![a.mr.sge(off, len)]));
    }
    // WRITE 3000 bytes into b at 0x20000; READ 2500 bytes of b at 0x30000 into a at 0x40000.
    let wdata = pattern(3000, seed.wrapping_add(77));
    a.dev.mr_write(a.mr.handle, 0x20000, &wdata).unwrap();
    wrs.push(SendWr::rdma_write(
        50,
        vec![a.mr.sge(0x20000, 3000)],
        b.mr.addr + 0x20000,
        b.mr.rkey,
    ));
    let rdata = pattern(2500, seed.wrapping_add(99));
    b.dev.mr_write(b.mr.handle, 0x30000, &rdata).unwrap();
    wrs.push(SendWr::rdma_read(
        51,
        vec![a.mr.sge(0x40000, 2500)],
        b.mr.addr + 0x30000,
        b.mr.rkey,
    ));
    for k in 0..5u64 {
        wrs.push(SendWr::atomic_fetch_and_add(
            60 + k,
            a.mr.sge(0x50000 + 8 * k, 8),
            b.mr.addr + 0x50000,
            b.mr.rkey,
            1,
        ));
    }
    // Interleave: posting everything at once.
    a.dev.post_send(a.qp.handle, &wrs).unwrap();
    run(&mut a, &mut b, faults, &mut rng, SimTime::ZERO);

    let wa = poll(&mut a);
    let ids: Vec<u64> = wa.iter().map(|w| w.wr_id).collect();
    let want: Vec<u64> = wrs.iter().map(|w| w.wr_id).collect();
    prop_assert_eq!(&ids, &want, "every send WR exactly once, in order");
    let ok = wa
        .iter()
        .take_while(|w| w.status == WcStatus::Success)
        .count();
    if ok < wa.len() {
        prop_assert!(!strict, "failure under moderate faults: {:?}", wa[ok]);
        prop_assert_eq!(wa[ok].status, WcStatus::RetryExcErr);
        prop_assert!(wa[ok + 1..]
            .iter()
            .all(|w| w.status == WcStatus::WrFlushErr));
    }
    let succeeded = |id: u64| wa[..ok].iter().any(|w| w.wr_id == id);
    // Receives: the delivered SENDs, in order, byte-exact, never twice.
    let wb = poll(&mut b);
    for (i, w) in wb.iter().enumerate() {
        prop_assert_eq!(w.wr_id, 100 + i as u64);
        if w.status != WcStatus::Success {
            prop_assert!(!strict);
            continue;
        }
        prop_assert_eq!(w.byte_len, lens[i]);
        let mut got = vec![0u8; lens[i] as usize];
        b.dev
            .mr_read(b.mr.handle, i as u64 * 1024, &mut got)
            .unwrap();
        prop_assert_eq!(got, pattern(lens[i] as usize, seed ^ i as u64));
    }
    for i in 0..n_send {
        if succeeded(i) {
            prop_assert!(wb
                .get(i as usize)
                .is_some_and(|w| w.status == WcStatus::Success));
        }
    }
    if succeeded(50) {
        let mut got = vec![0u8; 3000];
        b.dev.mr_read(b.mr.handle, 0x20000, &mut got).unwrap();
        prop_assert_eq!(got, wdata);
    }
    if succeeded(51) {
        let mut got = vec![0u8; 2500];
        a.dev.mr_read(a.mr.handle, 0x40000, &mut got).unwrap();
        prop_assert_eq!(got, rdata);
    }
    // Fetch-and-add executed at most once each: the k-th successful one saw k, and the counter
    // holds the successes plus at most the ones whose answer was lost.
    let mut cell = [0u8; 8];
    let fa_ok = (0..5u64).filter(|k| succeeded(60 + k)).count() as u64;
    for k in 0..fa_ok {
        a.dev
            .mr_read(a.mr.handle, 0x50000 + 8 * k, &mut cell)
            .unwrap();
        prop_assert_eq!(u64::from_le_bytes(cell), k);
    }
    b.dev.mr_read(b.mr.handle, 0x50000, &mut cell).unwrap();
    let counter = u64::from_le_bytes(cell);
    prop_assert!(
        counter >= fa_ok && counter <= 5,
        "counter {} after {} adds",
        counter,
        fa_ok
    );
    if strict {
        prop_assert_eq!(counter, 5);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn lossy_wire_delivers_exactly_once_in_order_and_byte_exact(
        seed in any::<u64>(),
        drop in 0u64..60,
        dup in 0u64..100,
        reorder in 0u64..100,
        psn in prop_oneof![Just(0xFF_FFF0u32), 0u32..0x100_0000],
    ) {
        workload(seed, Faults { drop, dup, reorder }, psn, true)?;
    }

    #[test]
    fn heavy_faults_never_break_exactly_once_order_or_flush_rules(
        seed in any::<u64>(),
        drop in 0u64..500,
        dup in 0u64..300,
        reorder in 0u64..300,
        psn in prop_oneof![Just(0xFF_FFF0u32), 0u32..0x100_0000],
    ) {
        workload(seed, Faults { drop, dup, reorder }, psn, false)?;
    }
}

#[test]
fn lossless_wire_is_the_same_workload() {
    workload(
        1,
        Faults {
            drop: 0,
            dup: 0,
            reorder: 0,
        },
        0,
        true,
    )
    .unwrap();
}

#[test]
fn lost_packets_are_retransmitted_after_the_ack_timeout() {
    let mut a = host(1);
    let mut b = host(2);
    connect(&mut a, &mut b, 3, 7, 0);
    b.dev
        .post_recv(b.qp.handle, &[RecvWr::new(1, vec![b.mr.sge(0, 64)])])
        .unwrap();
    a.dev
        .post_send(a.qp.handle, &[SendWr::send(1, vec![a.mr.sge(0, 64)])])
        .unwrap();
    // The first transmission is lost.
    assert!(a.dev.poll_transmit(SimTime::ZERO).is_some());
    // timeout 8: 4.096 µs × 256 = 1048.576 µs.
    assert_eq!(a.dev.poll_timeout(), Some(SimTime::from_nanos(4096 << 8)));
    let mut rng = SplitMix64(0);
    let end = run(
        &mut a,
        &mut b,
        Faults {
            drop: 0,
            dup: 0,
            reorder: 0,
        },
        &mut rng,
        SimTime::ZERO,
    );
    assert_eq!(end, SimTime::from_nanos(4096 << 8));
    assert_eq!(poll(&mut a).len(), 1);
    assert_eq!(poll(&mut b).len(), 1);
    assert_eq!(a.dev.counters().timeouts, 1);
}

#[test]
fn retry_cnt_exhausted_is_retry_exc_err_then_flush() {
    let mut a = host(1);
    let mut b = host(2);
    connect(&mut a, &mut b, 2, 7, 0);
    let wrs: Vec<_> = (0..3)
        .map(|i| SendWr::send(i, vec![a.mr.sge(0, 8)]))
        .collect();
    a.dev.post_send(a.qp.handle, &wrs).unwrap();
    let mut rng = SplitMix64(0);
    // Everything is lost: 1 transmission + 2 retries, then the head fails.
    let end = run(
        &mut a,
        &mut b,
        Faults {
            drop: 1000,
            dup: 0,
            reorder: 0,
        },
        &mut rng,
        SimTime::ZERO,
    );
    assert_eq!(end, SimTime::from_nanos(3 * (4096 << 8)));
    let st: Vec<_> = poll(&mut a).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(
        a.dev.query_qp(a.qp.handle).unwrap().0.qp_state,
        QpState::Err
    );
}

#[test]
fn timeout_zero_never_retransmits() {
    // TIMEOUT may change in SQD -> SQD only: RTS -> SQD -> SQD(timeout 0) -> RTS.
    let mut a = host(3);
    let mut b = host(4);
    connect(&mut a, &mut b, 2, 7, 0);
    let mut at = a.dev.query_qp(a.qp.handle).unwrap().0;
    at.qp_state = QpState::Sqd;
    a.dev
        .modify_qp(a.qp.handle, &at, QpAttrMask::STATE)
        .unwrap();
    at.qp_state = QpState::Sqd;
    at.timeout = 0;
    a.dev
        .modify_qp(a.qp.handle, &at, QpAttrMask::TIMEOUT)
        .unwrap();
    at.qp_state = QpState::Rts;
    a.dev
        .modify_qp(a.qp.handle, &at, QpAttrMask::STATE)
        .unwrap();
    a.dev
        .post_send(a.qp.handle, &[SendWr::send(1, vec![a.mr.sge(0, 8)])])
        .unwrap();
    assert!(a.dev.poll_transmit(SimTime::ZERO).is_some());
    assert_eq!(a.dev.poll_timeout(), None);
}

#[test]
fn rnr_retry_exhausted_is_rnr_retry_exc_err_and_7_is_infinite() {
    for rnr_retry in [2u8, 7] {
        let mut a = host(1);
        let mut b = host(2);
        connect(&mut a, &mut b, 7, rnr_retry, 0);
        a.dev
            .post_send(
                a.qp.handle,
                &[
                    SendWr::send(1, vec![a.mr.sge(0, 8)]),
                    SendWr::send(2, vec![a.mr.sge(0, 8)]),
                ],
            )
            .unwrap();
        let mut rng = SplitMix64(0);
        let none = Faults {
            drop: 0,
            dup: 0,
            reorder: 0,
        };
        if rnr_retry == 7 {
            // Infinite: keep going for many RNR rounds, then post and see it succeed.
            let mut now = SimTime::ZERO;
            for _ in 0..50 {
                while let Some(t) = a.dev.poll_transmit(now) {
                    b.dev.handle_packet(now, a.dev.gid(), t.packet);
                }
                while let Some(t) = b.dev.poll_transmit(now) {
                    a.dev.handle_packet(now, b.dev.gid(), t.packet);
                }
                now = a.dev.poll_timeout().unwrap();
                a.dev.handle_timeout(now);
            }
            assert_eq!(b.dev.counters().rnr_naks_sent, 50);
            b.dev
                .post_recv(
                    b.qp.handle,
                    &[
                        RecvWr::new(1, vec![b.mr.sge(0, 8)]),
                        RecvWr::new(2, vec![b.mr.sge(0, 8)]),
                    ],
                )
                .unwrap();
            run(&mut a, &mut b, none, &mut rng, now);
            assert!(poll(&mut a).iter().all(|w| w.status == WcStatus::Success));
        } else {
            let end = run(&mut a, &mut b, none, &mut rng, SimTime::ZERO);
            // min_rnr_timer 3 = 30 µs per back-off, two back-offs.
            assert_eq!(end, SimTime::from_micros(60));
            let st: Vec<_> = poll(&mut a).iter().map(|w| (w.wr_id, w.status)).collect();
            assert_eq!(
                st,
                vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
            );
        }
    }
}

#[test]
fn out_of_sequence_request_gets_one_nak_and_go_back_n_recovers() {
    let mut a = host(1);
    let mut b = host(2);
    connect(&mut a, &mut b, 7, 7, 0);
    let recvs: Vec<_> = (0..3)
        .map(|i| RecvWr::new(i, vec![b.mr.sge(i * 64, 64)]))
        .collect();
    b.dev.post_recv(b.qp.handle, &recvs).unwrap();
    let wrs: Vec<_> = (0..3)
        .map(|i| SendWr::send(i, vec![a.mr.sge(0, 8)]))
        .collect();
    a.dev.post_send(a.qp.handle, &wrs).unwrap();
    let p: Vec<_> = std::iter::from_fn(|| a.dev.poll_transmit(SimTime::ZERO)).collect();
    assert_eq!(p.len(), 3);
    // Lose the first: the other two are out of sequence, one NAK comes back.
    b.dev
        .handle_packet(SimTime::ZERO, a.dev.gid(), p[1].packet.clone());
    b.dev
        .handle_packet(SimTime::ZERO, a.dev.gid(), p[2].packet.clone());
    let back: Vec<_> = std::iter::from_fn(|| b.dev.poll_transmit(SimTime::ZERO)).collect();
    assert_eq!(back.len(), 1);
    assert_eq!(b.dev.counters().seq_naks_sent, 1);
    for t in back {
        a.dev.handle_packet(SimTime::ZERO, b.dev.gid(), t.packet);
    }
    let mut rng = SplitMix64(0);
    let end = run(
        &mut a,
        &mut b,
        Faults {
            drop: 0,
            dup: 0,
            reorder: 0,
        },
        &mut rng,
        SimTime::ZERO,
    );
    assert_eq!(end, SimTime::ZERO, "the NAK recovered without a timeout");
    assert_eq!(poll(&mut a).len(), 3);
    assert_eq!(
        poll(&mut b).iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

#[test]
fn duplicate_requests_are_reacked_without_double_delivery() {
    let mut a = host(1);
    let mut b = host(2);
    connect(&mut a, &mut b, 7, 7, 0);
    b.dev
        .post_recv(
            b.qp.handle,
            &[
                RecvWr::new(1, vec![b.mr.sge(0, 64)]),
                RecvWr::new(2, vec![b.mr.sge(64, 64)]),
            ],
        )
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                SendWr::send(1, vec![a.mr.sge(0, 8)]),
                SendWr::atomic_fetch_and_add(2, a.mr.sge(8, 8), b.mr.addr + 0x100, b.mr.rkey, 10),
            ],
        )
        .unwrap();
    let p: Vec<_> = std::iter::from_fn(|| a.dev.poll_transmit(SimTime::ZERO)).collect();
    for _ in 0..3 {
        for t in &p {
            b.dev
                .handle_packet(SimTime::ZERO, a.dev.gid(), t.packet.clone());
        }
    }
    assert_eq!(b.dev.counters().duplicate_requests, 4);
    let back: Vec<_> = std::iter::from_fn(|| b.dev.poll_transmit(SimTime::ZERO)).collect();
    for t in back {
        a.dev.handle_packet(SimTime::ZERO, b.dev.gid(), t.packet);
    }
    assert_eq!(poll(&mut b).len(), 1, "the SEND was delivered once");
    let mut cell = [0u8; 8];
    b.dev.mr_read(b.mr.handle, 0x100, &mut cell).unwrap();
    assert_eq!(u64::from_le_bytes(cell), 10, "the atomic ran once");
    let wa = poll(&mut a);
    assert_eq!(wa.len(), 2);
    a.dev.mr_read(a.mr.handle, 8, &mut cell).unwrap();
    assert_eq!(u64::from_le_bytes(cell), 0);
}
