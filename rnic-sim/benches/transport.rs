//! In-process RC data path between two [`SimNic`]s: verbs → RC transport → RoCEv2 codec with
//! ICRC → bytes → codec → RC transport → memory, and back for the ACKs.
//!
//! Datagrams move directly through the [`Endpoint`] trait (`poll_transmit` →
//! `handle_datagram`) in a tight loop on one thread; virtual time stays at zero, so no timer
//! ever fires (the fabric is lossless). One variant runs the same WRITE through
//! [`Simulation`] on a perfect [`FaultPlan`] to show the cost of the event queue.
//!
//! * `transport_write_64k`: one signaled 64 KiB RDMA WRITE per iteration at path MTU 4096
//!   (16 packets, one coalesced ACK), posted, pumped to quiescence and its completion polled;
//!   ICRC computed on send and checked on receive (`icrc_on`) or not checked (`icrc_off`),
//!   against two `memcpy` baselines in the same group, both between page-aligned buffers:
//!   64 KiB (stays in L2: `memcpy_64kib`) and 64 MiB (memory bandwidth: `memcpy_64mib`).
//!   The RNIC's regions are page aligned too (device-owned memory is aligned as its virtual
//!   address), so no figure depends on where the heap put a buffer.
//! * `transport_send_64b`: 64-byte SENDs in batches of [`SEND_BATCH`] posted with one
//!   `post_send` call, every [`SIGNAL_EVERY`]th signaled; the receiver's receive queue is
//!   replenished from its CQ after every batch and both CQs are polled in batches.
//!
//! Run: `cargo bench -p rnic-sim --bench transport -- --warm-up-time 1 --measurement-time 3`.
//! Figures: docs/performance.md.

// A benchmark is not library code: a failed verbs call should abort it loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]
// criterion_group! generates an undocumented public fn.
#![allow(missing_docs)]

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use rnic_sim::fabric::{Endpoint, FaultPlan, PathFaults, RunOutcome, SimFabric, Simulation};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::{
    AccessFlags, CqHandle, Device, Gid, Mr, Mtu, Qp, RecvWr, SendFlags, SendWr, SimTime,
    WorkCompletion,
};

/// The WRITE message size, bytes.
const WRITE_LEN: usize = 64 * 1024;
/// The SEND message size, bytes.
const SEND_LEN: u32 = 64;
/// SENDs posted per `post_send` call (one criterion iteration).
const SEND_BATCH: usize = 64;
/// One SEND in this many is signaled (the last of each batch is among them).
const SIGNAL_EVERY: usize = 16;
/// Send/receive queue depth and CQ size.
const DEPTH: u32 = 1024;
/// The alignment of the memcpy baselines' buffers (the device aligns its own regions so too).
const PAGE: usize = 4096;

/// One side: a NIC with one RC QP, its CQs and one registered region.
struct Side {
    nic: SimNic,
    qp: Qp,
    scq: CqHandle,
    rcq: CqHandle,
    mr: Mr,
}

fn side(last: u8, check_icrc: bool) -> Side {
    let gid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last));
    let mut cfg = SimDeviceConfig::new(format!("sim{last}"), gid);
    cfg.active_mtu = Mtu::Mtu4096;
    let mut nic = SimNic::at_gid(SimDevice::new(cfg));
    nic.set_check_icrc(check_icrc);
    let spec = RcEndpointSpec {
        mr_len: WRITE_LEN,
        mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        cqe: DEPTH,
        sq_sig_all: false,
        ..RcEndpointSpec::default()
    }
    .queues(DEPTH, 1, 0);
    let RcEndpoint {
        qp,
        send_cq: scq,
        recv_cq: rcq,
        mr,
        ..
    } = RcEndpoint::create(nic.device_mut(), &spec).expect("endpoint");
    let fill: Vec<u8> = (0..WRITE_LEN).map(|i| (i * 7 + 3) as u8).collect();
    nic.mr_write(mr.handle, 0, &fill).expect("fill");
    Side {
        nic,
        qp,
        scq,
        rcq,
        mr,
    }
}

/// Two sides with their RC QPs connected at `mtu`.
fn pair(mtu: Mtu, check_icrc: bool) -> (Side, Side) {
    let mut a = side(1, check_icrc);
    let mut b = side(2, check_icrc);
    let ia = RcPeerInfo {
        gid: a.nic.gid(),
        qpn: a.qp.qp_num,
        psn: 0x100,
    };
    let ib = RcPeerInfo {
        gid: b.nic.gid(),
        qpn: b.qp.qp_num,
        psn: 0x200,
    };
    let p = RcParams {
        mtu,
        ..RcParams::default()
    };
    connect_rc(&mut *a.nic, a.qp.handle, &ia, &ib, &p).expect("connect a");
    connect_rc(&mut *b.nic, b.qp.handle, &ib, &ia, &p).expect("connect b");
    (a, b)
}

/// Moves datagrams between the two NICs until neither has anything to send. Returns the
/// number of datagrams moved.
fn pump(a: &mut SimNic, b: &mut SimNic) -> usize {
    let now = SimTime::ZERO;
    let (aa, ba) = (a.addr(), b.addr());
    let mut moved = 0;
    loop {
        let before = moved;
        while let Some((_, bytes)) = a.poll_transmit(now) {
            b.handle_datagram(now, aa, bytes);
            moved += 1;
        }
        while let Some((_, bytes)) = b.poll_transmit(now) {
            a.handle_datagram(now, ba, bytes);
            moved += 1;
        }
        if moved == before {
            return moved;
        }
    }
}

fn write_wr(a: &Side, b: &Side) -> SendWr {
    SendWr::rdma_write(1, vec![a.mr.sge(0, WRITE_LEN as u32)], b.mr.addr, b.mr.rkey)
}

/// Polls `cq` into `wcs` (cleared first) and checks every completion succeeded.
fn drain(nic: &mut SimNic, cq: CqHandle, wcs: &mut Vec<WorkCompletion>) -> usize {
    wcs.clear();
    let n = nic.poll_cq(cq, DEPTH as usize, wcs).expect("poll_cq");
    assert!(wcs
        .iter()
        .all(|w| w.status == verbs_core::WcStatus::Success));
    n
}

/// `len` bytes of `fill` starting at a page boundary, in safe code: an over-allocated `Vec` and
/// the offset of its first page-aligned byte.
struct PageAligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageAligned {
    fn new(len: usize, fill: u8) -> Self {
        let buf = vec![fill; len + PAGE];
        let start = buf.as_ptr().align_offset(PAGE);
        assert!(start < PAGE, "cannot align");
        PageAligned { buf, start, len }
    }
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// One `copy_from_slice` of `len` bytes between two page-aligned buffers, per iteration.
fn bench_memcpy(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, len: usize) {
    g.throughput(Throughput::Bytes(len as u64));
    g.bench_function(name, |bch| {
        let src = PageAligned::new(len, 0x5a);
        let mut dst = PageAligned::new(len, 0);
        bch.iter(|| {
            dst.as_mut_slice()
                .copy_from_slice(black_box(src.as_slice()));
            black_box(dst.as_slice());
        })
    });
}

fn bench_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("transport_write_64k");
    bench_memcpy(&mut g, "memcpy_64kib", WRITE_LEN);
    // 64 MiB: out of every cache but L3 (the machine's is 480 MiB, shared); fewer samples,
    // each ~10 ms.
    g.sample_size(20);
    bench_memcpy(&mut g, "memcpy_64mib", 64 << 20);
    g.sample_size(100);
    g.throughput(Throughput::Bytes(WRITE_LEN as u64));

    for (name, check) in [("rdma_write_icrc_on", true), ("rdma_write_icrc_off", false)] {
        g.bench_function(name, |bch| {
            let (mut a, mut b) = pair(Mtu::Mtu4096, check);
            let wr = [write_wr(&a, &b)];
            let mut wcs = Vec::new();
            bch.iter(|| {
                a.nic.post_send(a.qp.handle, &wr).expect("post_send");
                pump(&mut a.nic, &mut b.nic);
                assert_eq!(drain(&mut a.nic, a.scq, &mut wcs), 1);
            });
            let (ca, cb) = (a.nic.datagram_counters(), b.nic.datagram_counters());
            assert_eq!(ca.rx_decode_errors + cb.rx_decode_errors, 0);
        });
    }

    g.bench_function("rdma_write_icrc_on_simulation", |bch| {
        let (a, b) = pair(Mtu::Mtu4096, true);
        let wr = [write_wr(&a, &b)];
        let (qp, scq) = (a.qp.handle, a.scq);
        let mut fabric = SimFabric::with_seed(1, FaultPlan::new(PathFaults::perfect()));
        fabric.set_trace_recording(false);
        let mut sim: Simulation<SimNic> = Simulation::new(fabric);
        let ia = sim.add_endpoint(a.nic).expect("add a");
        sim.add_endpoint(b.nic).expect("add b");
        let mut wcs = Vec::new();
        bch.iter(|| {
            let nic = sim.endpoint_mut(ia).expect("a");
            nic.post_send(qp, &wr).expect("post_send");
            let far = sim.now().plus_nanos(1_000_000_000);
            assert_eq!(sim.run_until_idle(far), RunOutcome::Idle);
            let nic = sim.endpoint_mut(ia).expect("a");
            assert_eq!(drain(nic, scq, &mut wcs), 1);
        });
    });
    g.finish();
}

fn bench_send(c: &mut Criterion) {
    let mut g = c.benchmark_group("transport_send_64b");
    g.throughput(Throughput::Elements(SEND_BATCH as u64));
    for (name, check) in [("send_icrc_on", true), ("send_icrc_off", false)] {
        g.bench_function(name, |bch| {
            let (mut a, mut b) = pair(Mtu::Mtu1024, check);
            // Receives: 2 batches' worth outstanding, each a 64-byte slot of b's region.
            let recv = |i: usize| RecvWr::new(i as u64, vec![b.mr.sge(i as u64 * 64, SEND_LEN)]);
            let recvs: Vec<RecvWr> = (0..2 * SEND_BATCH).map(recv).collect();
            b.nic.post_recv(b.qp.handle, &recvs).expect("post_recv");
            let sends: Vec<SendWr> = (0..SEND_BATCH)
                .map(|i| {
                    let wr = SendWr::send(i as u64, vec![a.mr.sge(i as u64 * 64, SEND_LEN)]);
                    let flags = if (i + 1) % SIGNAL_EVERY == 0 {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::empty()
                    };
                    wr.with_flags(flags)
                })
                .collect();
            let mut wcs = Vec::new();
            let mut repost: Vec<RecvWr> = Vec::with_capacity(SEND_BATCH);
            bch.iter(|| {
                a.nic.post_send(a.qp.handle, &sends).expect("post_send");
                pump(&mut a.nic, &mut b.nic);
                assert_eq!(
                    drain(&mut a.nic, a.scq, &mut wcs),
                    SEND_BATCH / SIGNAL_EVERY
                );
                assert_eq!(drain(&mut b.nic, b.rcq, &mut wcs), SEND_BATCH);
                repost.clear();
                repost.extend(wcs.iter().map(|w| recv(w.wr_id as usize)));
                b.nic.post_recv(b.qp.handle, &repost).expect("post_recv");
            });
            let (ca, cb) = (a.nic.datagram_counters(), b.nic.datagram_counters());
            assert_eq!(ca.rx_decode_errors + cb.rx_decode_errors, 0);
        });
    }
    g.finish();
}

criterion_group!(benches, bench_write, bench_send);
criterion_main!(benches);
