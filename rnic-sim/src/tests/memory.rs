//! Memory backings: regions over caller-supplied memory ([`ExternalMemory`],
//! `SimDevice::reg_mr_external`). Every byte the device moves lands in or comes from the
//! caller's memory, regions are found by key even where addresses overlap, and registration
//! checks its arguments as `reg_mr` does.

use crate::testutil::*;
use crate::{ExternalMemory, SimDevice, SimDeviceConfig};
use std::sync::{Arc, Mutex, PoisonError};
use verbs_core::*;

/// The application's buffer, as the C ABI's raw-pointer memory would be, made safe.
#[derive(Debug)]
struct AppBuf(Mutex<Vec<u8>>);

impl AppBuf {
    fn new(len: usize) -> Arc<Self> {
        Arc::new(AppBuf(Mutex::new(vec![0; len])))
    }

    fn bytes(&self) -> Vec<u8> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The application writes its own buffer directly (no verbs call).
    fn fill(&self, off: usize, data: &[u8]) {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v[off..off + data.len()].copy_from_slice(data);
    }
}

impl ExternalMemory for AppBuf {
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn read(&self, offset: usize, buf: &mut [u8]) -> bool {
        let v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        buf.copy_from_slice(&v[offset..offset + buf.len()]);
        true
    }

    fn write(&self, offset: usize, data: &[u8]) -> bool {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v[offset..offset + data.len()].copy_from_slice(data);
        true
    }
}

/// A user-space-like address, far from the bump allocator's 0x1000_0000.
const USER_VA: u64 = 0x7f00_dead_0000;

fn reg(n: &mut Node, buf: &Arc<AppBuf>, iova: u64) -> Mr {
    n.dev
        .reg_mr_external(n.pd, buf.clone(), iova, ALL_ACCESS)
        .unwrap()
}

/// Posts `wrs` on `a`, pumps, and returns `a`'s send completions as (wr_id, status, opcode).
fn run_sends(a: &mut Node, b: &mut Node, wrs: &[SendWr]) -> Vec<(u64, WcStatus, WcOpcode)> {
    a.dev.post_send(a.qp.handle, wrs).unwrap();
    pump(a, b);
    let wcs = poll(&mut a.dev, a.scq);
    wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

#[test]
fn rdma_write_from_and_into_external_memory_moves_the_application_bytes() {
    let (mut a, mut b) = pair();
    let (src, dst) = (AppBuf::new(4096), AppBuf::new(4096));
    let (sm, dm) = (
        reg(&mut a, &src, USER_VA),
        reg(&mut b, &dst, USER_VA + 0x10_0000),
    );
    let data = pattern(1000, 3); // four packets at MTU 256
    src.fill(24, &data);
    let w = SendWr::rdma_write(1, vec![sm.sge(24, 1000)], dm.addr + 100, dm.rkey);
    assert_eq!(
        run_sends(&mut a, &mut b, &[w]),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    let got = dst.bytes();
    assert_eq!(&got[100..1100], &data[..]);
    assert!(got[..100].iter().chain(&got[1100..]).all(|&x| x == 0));
    // mr_read goes through the same backing.
    let mut via_verbs = vec![0; 1000];
    b.dev.mr_read(dm.handle, 100, &mut via_verbs).unwrap();
    assert_eq!(via_verbs, data);
}

#[test]
fn send_gathers_from_and_scatters_into_external_memory() {
    let (mut a, mut b) = pair();
    let (src, dst) = (AppBuf::new(512), AppBuf::new(2048));
    let (sm, dm) = (reg(&mut a, &src, USER_VA), reg(&mut b, &dst, USER_VA));
    src.fill(0, &pattern(512, 9));
    // Two SGEs on each side, crossing an SGE boundary in the middle of a packet.
    let rwr = RecvWr::new(7, vec![dm.sge(0, 300), dm.sge(1024, 700)]);
    b.dev.post_recv(b.qp.handle, &[rwr]).unwrap();
    let swr = SendWr::send(8, vec![sm.sge(0, 200), sm.sge(300, 212)]);
    a.dev.post_send(a.qp.handle, &[swr]).unwrap();
    pump(&mut a, &mut b);
    let rc = poll(&mut b.dev, b.rcq);
    assert_eq!(statuses(&rc), [(7, WcStatus::Success)]);
    assert_eq!((rc[0].opcode, rc[0].byte_len), (WcOpcode::Recv, 412));
    let sent: Vec<u8> = [&pattern(512, 9)[0..200], &pattern(512, 9)[300..512]].concat();
    let got = dst.bytes();
    assert_eq!(&got[0..300], &sent[0..300]);
    assert_eq!(&got[1024..1136], &sent[300..412]);
    assert!(got[1136..].iter().all(|&x| x == 0));
}

#[test]
fn rdma_read_serves_external_bytes_and_lands_in_external_memory() {
    let (mut a, mut b) = pair();
    let (local, remote) = (AppBuf::new(2048), AppBuf::new(2048));
    let (lm, rm) = (reg(&mut a, &local, USER_VA), reg(&mut b, &remote, USER_VA));
    // The remote application writes its buffer after registration, without any verbs call:
    // the READ response is taken from the memory as it is when the READ executes.
    remote.fill(8, &pattern(900, 5));
    let w = SendWr::rdma_read(1, vec![lm.sge(16, 900)], rm.addr + 8, rm.rkey);
    assert_eq!(
        run_sends(&mut a, &mut b, &[w]),
        [(1, WcStatus::Success, WcOpcode::RdmaRead)]
    );
    assert_eq!(&local.bytes()[16..916], &pattern(900, 5)[..]);
}

#[test]
fn atomics_read_modify_write_external_memory() {
    let (mut a, mut b) = pair();
    let (local, remote) = (AppBuf::new(64), AppBuf::new(64));
    let (lm, rm) = (reg(&mut a, &local, USER_VA), reg(&mut b, &remote, USER_VA));
    remote.fill(8, &100u64.to_le_bytes());
    let cs = SendWr::atomic_cmp_and_swp(1, lm.sge(0, 8), rm.addr + 8, rm.rkey, 100, 7);
    let fa = SendWr::atomic_fetch_and_add(2, lm.sge(8, 8), rm.addr + 8, rm.rkey, 5);
    assert_eq!(
        run_sends(&mut a, &mut b, &[cs, fa]),
        [
            (1, WcStatus::Success, WcOpcode::CompSwap),
            (2, WcStatus::Success, WcOpcode::FetchAdd)
        ]
    );
    let word = |v: &[u8], i: usize| u64::from_le_bytes(v[i..i + 8].try_into().unwrap());
    let l = local.bytes();
    assert_eq!((word(&l, 0), word(&l, 8)), (100, 7));
    assert_eq!(word(&remote.bytes(), 8), 12);
}

#[test]
fn write_past_the_end_of_an_external_region_is_rem_access_err_and_writes_nothing() {
    let (mut a, mut b) = pair();
    let dst = AppBuf::new(100);
    let dm = reg(&mut b, &dst, USER_VA);
    a.dev.mr_write(a.mr.handle, 0, &[0xAB; 64]).unwrap();
    let w = SendWr::rdma_write(1, vec![a.mr.sge(0, 64)], dm.addr + 50, dm.rkey);
    a.dev.post_send(a.qp.handle, &[w]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        [(1, WcStatus::RemAccessErr)]
    );
    assert_eq!(dst.bytes(), vec![0; 100]);
}

#[test]
fn external_region_overlapping_a_device_owned_one_is_resolved_by_key() {
    let (mut a, mut b) = pair();
    // Same virtual address as b's device-owned region, and a second external region inside it.
    let (ext, inner) = (AppBuf::new(4096), AppBuf::new(64));
    let base = b.mr.addr;
    let em = reg(&mut b, &ext, base);
    let im = reg(&mut b, &inner, base + 32);
    assert_eq!(em.addr, b.mr.addr);
    assert!(em.rkey != b.mr.rkey && im.rkey != em.rkey);
    a.dev.mr_write(a.mr.handle, 0, &[1; 16]).unwrap();
    a.dev.mr_write(a.mr.handle, 16, &[2; 16]).unwrap();
    a.dev.mr_write(a.mr.handle, 32, &[3; 16]).unwrap();
    let wrs = [
        SendWr::rdma_write(1, vec![a.mr.sge(0, 16)], b.mr.addr + 32, b.mr.rkey),
        SendWr::rdma_write(2, vec![a.mr.sge(16, 16)], em.addr + 32, em.rkey),
        SendWr::rdma_write(3, vec![a.mr.sge(32, 16)], im.addr, im.rkey),
    ];
    let done = run_sends(&mut a, &mut b, &wrs);
    assert!(done.len() == 3 && done.iter().all(|c| c.1 == WcStatus::Success));
    let mut owned = [0u8; 16];
    b.dev.mr_read(b.mr.handle, 32, &mut owned).unwrap();
    assert_eq!(owned, [1; 16]);
    assert_eq!(&ext.bytes()[32..48], &[2; 16]);
    assert_eq!(&inner.bytes()[0..16], &[3; 16]);

    // Local SGEs too: a SEND from b gathers by lkey, from the external region.
    a.dev
        .post_recv(a.qp.handle, &[RecvWr::new(9, vec![a.mr.sge(100, 16)])])
        .unwrap();
    let s = SendWr::send(4, vec![em.sge(32, 16)]);
    b.dev.post_send(b.qp.handle, &[s]).unwrap();
    pump(&mut a, &mut b);
    let mut got = [0u8; 16];
    a.dev.mr_read(a.mr.handle, 100, &mut got).unwrap();
    assert_eq!(got, [2; 16]);
}

#[test]
fn inline_gather_takes_the_oldest_region_containing_the_range() {
    let (mut a, mut b) = pair();
    // `over` overlaps a's device-owned region and is registered after it; `alone` overlaps
    // nothing.
    let (over, alone) = (AppBuf::new(256), AppBuf::new(64));
    over.fill(0, &[5; 256]);
    alone.fill(0, &[7; 64]);
    let base = a.mr.addr;
    let om = reg(&mut a, &over, base);
    let am = reg(&mut a, &alone, USER_VA);
    a.dev.mr_write(a.mr.handle, 0, &[6; 16]).unwrap();
    let rwrs = [
        RecvWr::new(1, vec![b.mr.sge(0, 16)]),
        RecvWr::new(2, vec![b.mr.sge(16, 16)]),
    ];
    b.dev.post_recv(b.qp.handle, &rwrs).unwrap();
    let inline = |id, sge| SendWr::send(id, vec![sge]).with_flags(SendFlags::INLINE);
    // Both regions contain the first SGE's range: the device-owned one is older and wins.
    let wrs = [inline(1, om.sge(0, 16)), inline(2, am.sge(0, 16))];
    a.dev.post_send(a.qp.handle, &wrs).unwrap();
    // An inline SGE inside no region is EINVAL at post time (keys are not looked at).
    let outside = Sge {
        addr: am.addr + 60,
        length: 8,
        lkey: am.lkey,
    };
    let e = a
        .dev
        .post_send(a.qp.handle, &[inline(3, outside)])
        .unwrap_err();
    assert_eq!(e.error.errno, Errno::EINVAL);
    pump(&mut a, &mut b);
    assert_eq!(poll(&mut b.dev, b.rcq).len(), 2);
    let mut got = [0u8; 32];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got[..16], [6; 16]);
    assert_eq!(got[16..], [7; 16]);
}

#[test]
fn dereg_mr_drops_the_external_memory_and_clones_share_it() {
    let mut d = SimDevice::new(SimDeviceConfig::new("x", gid(9)));
    let pd = d.alloc_pd().unwrap();
    let buf = AppBuf::new(64);
    let mr = d
        .reg_mr_external(pd, buf.clone(), USER_VA, ALL_ACCESS)
        .unwrap();
    assert_eq!((mr.addr, mr.length), (USER_VA, 64));
    assert_eq!(Arc::strong_count(&buf), 2);
    // A clone of the device shares the memory: a write through the clone is seen by both.
    let mut c = d.clone();
    assert_eq!(Arc::strong_count(&buf), 3);
    c.mr_write(mr.handle, 8, &[4; 8]).unwrap();
    let mut got = [0u8; 8];
    d.mr_read(mr.handle, 8, &mut got).unwrap();
    assert_eq!(got, [4; 8]);
    drop(c);
    // mr_read/mr_write are bounded by the registered length.
    let e = d.mr_write(mr.handle, 60, &[0; 8]).unwrap_err();
    assert_eq!(e.errno, Errno::EFAULT);
    assert_eq!(
        d.mr_read(mr.handle, u64::MAX, &mut got).unwrap_err().errno,
        Errno::EFAULT
    );
    d.dereg_mr(mr.handle).unwrap();
    assert_eq!(Arc::strong_count(&buf), 1);
    assert_eq!(
        d.mr_read(mr.handle, 0, &mut got).unwrap_err().errno,
        Errno::EINVAL
    );
    // The PD is free again.
    d.dealloc_pd(pd).unwrap();
}

#[test]
fn reg_mr_external_refuses_what_reg_mr_refuses_and_drops_the_memory() {
    let mut cfg = SimDeviceConfig::new("x", gid(9));
    cfg.max_mr = 2;
    cfg.max_mr_size = 4096;
    let mut d = SimDevice::new(cfg);
    let pd = d.alloc_pd().unwrap();
    let buf = AppBuf::new(64);
    let lw = AccessFlags::LOCAL_WRITE;
    let errno = |d: &mut SimDevice, mem: Arc<AppBuf>, iova: u64, acc: AccessFlags| {
        d.reg_mr_external(pd, mem, iova, acc).unwrap_err().errno
    };
    let bad_pd = d.reg_mr_external(PdHandle(99), buf.clone(), USER_VA, lw);
    assert_eq!(bad_pd.unwrap_err().errno, Errno::EINVAL);
    assert_eq!(
        errno(&mut d, buf.clone(), USER_VA, AccessFlags::REMOTE_WRITE),
        Errno::EINVAL
    );
    assert_eq!(
        errno(&mut d, buf.clone(), USER_VA, AccessFlags::REMOTE_ATOMIC),
        Errno::EINVAL
    );
    let unknown_bit = AccessFlags::from_bits_retain(lw.bits() | 1 << 15);
    assert_eq!(
        errno(&mut d, buf.clone(), USER_VA, unknown_bit),
        Errno::EINVAL
    );
    assert_eq!(errno(&mut d, buf.clone(), u64::MAX - 8, lw), Errno::EINVAL);
    assert_eq!(errno(&mut d, AppBuf::new(0), USER_VA, lw), Errno::EINVAL);
    assert_eq!(errno(&mut d, AppBuf::new(4097), USER_VA, lw), Errno::EINVAL);
    assert_eq!(
        Arc::strong_count(&buf),
        1,
        "a refused registration keeps no reference"
    );
    // IBV_ACCESS_RELAXED_ORDERING (an optional bit, as perftest passes it) is accepted.
    let relaxed = AccessFlags::from_bits_retain(lw.bits() | 1 << 20);
    let m = d
        .reg_mr_external(pd, buf.clone(), USER_VA, relaxed)
        .unwrap();
    // Length 0 at an unaligned address spans one page: accepted, as ib_umem_get accepts it.
    let z = d
        .reg_mr_external(pd, AppBuf::new(0), USER_VA + 1, lw)
        .unwrap();
    assert_eq!((z.length, z.rkey), (0, 0));
    assert_eq!(errno(&mut d, buf.clone(), USER_VA, lw), Errno::ENOMEM);
    assert!(m.lkey >> 8 < z.lkey >> 8, "same index scheme as reg_mr");
}

#[test]
fn reg_mr_accepts_optional_access_bits_and_refuses_unsupported_ones() {
    let mut d = SimDevice::new(SimDeviceConfig::new("x", gid(9)));
    let pd = d.alloc_pd().unwrap();
    let with = |bit: u32| AccessFlags::from_bits_retain(ALL_ACCESS.bits() | bit);
    for optional in [1 << 20, 1 << 29, 0x3ff0_0000] {
        let mr = d.reg_mr(pd, 64, with(optional)).unwrap();
        assert_ne!(mr.rkey, 0);
    }
    // HUGETLB (1 << 7) and FLUSH_PERSISTENT (1 << 9) are IB_ACCESS_SUPPORTED bits: accepted.
    for known in [1 << 7, 1 << 9] {
        d.reg_mr(pd, 64, with(known)).unwrap();
    }
    for unsupported in [1 << 10, 1 << 19, 1 << 30, 1 << 31] {
        let e = d.reg_mr(pd, 64, with(unsupported)).unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL, "bit {unsupported:#x}");
    }
}
