//! The data path on librnic's simulated RNIC loaded as libibverbs.so.1: two RC QPs of the one
//! device connected to each other, every opcode with every byte checked, the completion
//! events, and the flush of posted WRs when a QP goes to ERR.

#![cfg(feature = "hw")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{all_access, collect, connect, is_child, run_child, to_rtr, wait_readable, Lib};
use rnic_hw::{EventWaiter, HwDevice, HwOptions};
use std::net::Ipv4Addr;
use std::time::Duration;
use verbs_core::{AsyncElement, AsyncEvent, AsyncEventType};
use verbs_core::{
    CompChannel, Device, Errno, Gid, Mtu, PortState, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    QpState, RecvWr, SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion, LINK_LAYER_ETHERNET,
};

fn open(addr: Ipv4Addr) -> HwDevice {
    let opts = HwOptions {
        device: Some("rnic0".into()),
        ..HwOptions::default()
    };
    let dev = HwDevice::open(&opts).expect("open rnic0");
    assert_eq!(dev.name(), "rnic0");
    assert_eq!(dev.port_num(), 1);
    assert_eq!(dev.gid_index(), 0);
    assert_eq!(dev.gid(), Gid::from_ipv4(addr));
    dev
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn split(wcs: &[WorkCompletion], qp_num: u32) -> Vec<WorkCompletion> {
    wcs.iter().filter(|w| w.qp_num == qp_num).copied().collect()
}

#[test]
fn loopback_every_opcode() {
    const NAME: &str = "loopback_every_opcode";
    if !is_child(NAME) {
        return run_child(NAME, "127.0.0.41", Lib::Rnic);
    }
    fn assert_send<T: Send + 'static>() {}
    assert_send::<HwDevice>();
    assert_send::<EventWaiter>();

    let mut dev = open(Ipv4Addr::new(127, 0, 0, 41));
    assert_eq!(dev.event_fds().len(), 2, "comp channel fd and async fd");
    assert_eq!(dev.query_device().phys_port_cnt, 1);
    let port = dev.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.link_layer, LINK_LAYER_ETHERNET);
    assert_eq!(dev.query_gid(1, 0).unwrap(), dev.gid());

    let pd = dev.alloc_pd().unwrap();
    let a = dev.reg_mr(pd, 8192, all_access()).unwrap();
    let b = dev.reg_mr(pd, 8192, all_access()).unwrap();
    assert_eq!(a.addr % 4096, 0, "page-aligned");
    assert_eq!((a.length, b.length), (8192, 8192));
    let mut zero = vec![1u8; 8192];
    dev.mr_read(b.handle, 0, &mut zero).unwrap();
    assert!(zero.iter().all(|&x| x == 0), "zero-filled");

    let chan = CompChannel::new();
    let cq = dev.create_cq(64, Some(&chan)).unwrap();
    let cap = QpCap::uniform(16, 2, 0);
    let qa = dev
        .create_qp(pd, &QpInitAttr::rc(cq, cq, cap, false))
        .unwrap();
    let qb = dev
        .create_qp(pd, &QpInitAttr::rc(cq, cq, cap, false))
        .unwrap();
    assert_ne!(qa.qp_num, qb.qp_num);
    let gid = dev.gid();
    connect(&mut dev, qa.handle, qb.qp_num, gid);
    connect(&mut dev, qb.handle, qa.qp_num, gid);

    // The device filled in GRH, source GID index and port, and clamped the MTU.
    let (attr, init) = dev.query_qp(qa.handle).unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!(attr.dest_qp_num, qb.qp_num);
    assert_eq!(attr.path_mtu, port.active_mtu.min(Mtu::Mtu4096));
    assert!(attr.ah_attr.is_global);
    assert_eq!(attr.ah_attr.grh.sgid_index, 0);
    assert_eq!(attr.ah_attr.grh.dgid, gid);
    assert_eq!(attr.ah_attr.port_num, 1);
    assert!(init.cap.max_send_wr >= 16 && init.cap.max_recv_sge >= 2);
    assert_eq!((init.send_cq, init.recv_cq), (cq, cq));

    // Receives: SEND, SEND_WITH_IMM, WRITE_WITH_IMM.
    let recvs = [
        RecvWr::new(100, vec![b.sge(0, 256)]),
        RecvWr::new(101, vec![b.sge(256, 128), b.sge(384, 128)]),
        RecvWr::new(102, vec![b.sge(512, 64)]),
    ];
    dev.post_recv(qb.handle, &recvs).unwrap();

    // 1. SEND, woken by the completion channel: arm, post, poll(2) the fds (here through an
    // EventWaiter, as a driver's event thread does; then the device's own fds).
    let waiter = dev.event_waiter().unwrap();
    assert_eq!(dev.process_events(), 0);
    assert!(
        !waiter.wait(Duration::from_millis(20)).unwrap(),
        "no event yet"
    );
    assert_eq!(
        chan.try_get_cq_event().map_err(|e| e.errno),
        Err(Errno::EAGAIN)
    );
    dev.req_notify_cq(cq, false).unwrap();
    let msg = pattern(200, 1);
    dev.mr_write(a.handle, 0, &msg).unwrap();
    dev.post_send(qa.handle, &[SendWr::send(1, vec![a.sge(0, 200)])])
        .unwrap();
    assert!(
        waiter.wait(Duration::from_secs(5)).unwrap(),
        "no CQ event within 5 s"
    );
    assert!(
        wait_readable(&dev.event_fds(), 0),
        "the device's fd is the same file"
    );
    assert!(dev.process_events() >= 1);
    assert_eq!(chan.try_get_cq_event(), Ok(cq));
    let (wcs, _) = collect(&mut dev, &chan, cq, 2);
    let (s, r) = (split(&wcs, qa.qp_num), split(&wcs, qb.qp_num));
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(r[0].wr_id, 100);
    assert_eq!(r[0].status, WcStatus::Success);
    assert_eq!(r[0].opcode, WcOpcode::Recv);
    assert_eq!(r[0].byte_len, 200);
    assert_eq!(r[0].wc_flags, WcFlags::empty());
    let mut got = vec![0; 200];
    dev.mr_read(b.handle, 0, &mut got).unwrap();
    assert_eq!(got, msg);

    // 2. SEND_WITH_IMM of 200 bytes into two SGEs of the receive.
    let msg = pattern(200, 2);
    dev.mr_write(a.handle, 1024, &msg).unwrap();
    let imm = 0x1234_5678;
    let wr = SendWr::send_with_imm(2, vec![a.sge(1024, 200)], imm);
    dev.post_send(qa.handle, &[wr]).unwrap();
    let (wcs, events) = collect(&mut dev, &chan, cq, 2);
    println!("SEND_WITH_IMM: {events} CQ events");
    let (s, r) = (split(&wcs, qa.qp_num), split(&wcs, qb.qp_num));
    assert_eq!((s[0].wr_id, s[0].opcode), (2, WcOpcode::Send));
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len),
        (101, WcOpcode::Recv, 200)
    );
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(r[0].imm_data, imm);
    assert_eq!(r[0].qp_num, qb.qp_num);
    let mut got = vec![0; 200];
    dev.mr_read(b.handle, 256, &mut got).unwrap();
    assert_eq!(got, msg);

    // 3. RDMA WRITE: no receive consumed.
    let msg = pattern(300, 3);
    dev.mr_write(a.handle, 2048, &msg).unwrap();
    let wr = SendWr::rdma_write(3, vec![a.sge(2048, 300)], b.addr + 1024, b.rkey);
    dev.post_send(qa.handle, &[wr]).unwrap();
    let (wcs, _) = collect(&mut dev, &chan, cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::Success));
    assert_eq!(
        (wcs[0].opcode, wcs[0].qp_num),
        (WcOpcode::RdmaWrite, qa.qp_num)
    );
    let mut got = vec![0; 300];
    dev.mr_read(b.handle, 1024, &mut got).unwrap();
    assert_eq!(got, msg);

    // 4. RDMA WRITE_WITH_IMM: the data, and a receive with the immediate and no payload.
    let msg = pattern(50, 4);
    dev.mr_write(a.handle, 2400, &msg).unwrap();
    let imm = 0xdead_beef;
    let wr = SendWr::rdma_write_with_imm(4, vec![a.sge(2400, 50)], b.addr + 1500, b.rkey, imm);
    dev.post_send(qa.handle, &[wr]).unwrap();
    let (wcs, _) = collect(&mut dev, &chan, cq, 2);
    let (s, r) = (split(&wcs, qa.qp_num), split(&wcs, qb.qp_num));
    assert_eq!((s[0].wr_id, s[0].opcode), (4, WcOpcode::RdmaWrite));
    assert_eq!((r[0].wr_id, r[0].status), (102, WcStatus::Success));
    assert_eq!(r[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(r[0].byte_len, 50);
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(r[0].imm_data, imm);
    let mut got = vec![0; 50];
    dev.mr_read(b.handle, 1500, &mut got).unwrap();
    assert_eq!(got, msg);

    // 5. RDMA READ.
    let msg = pattern(400, 5);
    dev.mr_write(b.handle, 3000, &msg).unwrap();
    let wr = SendWr::rdma_read(5, vec![a.sge(4096, 400)], b.addr + 3000, b.rkey);
    dev.post_send(qa.handle, &[wr]).unwrap();
    let (wcs, _) = collect(&mut dev, &chan, cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (5, WcStatus::Success));
    assert_eq!(wcs[0].opcode, WcOpcode::RdmaRead);
    let mut got = vec![0; 400];
    dev.mr_read(a.handle, 4096, &mut got).unwrap();
    assert_eq!(got, msg);

    // 6. Atomics on a host-order u64: compare-and-swap 5 -> 9, then fetch-and-add 3.
    dev.mr_write(b.handle, 4096, &5u64.to_ne_bytes()).unwrap();
    let cas = SendWr::atomic_cmp_and_swp(6, a.sge(6000, 8), b.addr + 4096, b.rkey, 5, 9);
    let faa = SendWr::atomic_fetch_and_add(7, a.sge(6008, 8), b.addr + 4096, b.rkey, 3);
    dev.post_send(qa.handle, &[cas, faa]).unwrap();
    let (wcs, _) = collect(&mut dev, &chan, cq, 2);
    let ops: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        ops,
        [
            (6, WcStatus::Success, WcOpcode::CompSwap),
            (7, WcStatus::Success, WcOpcode::FetchAdd)
        ]
    );
    let mut word = [0u8; 8];
    let read = |dev: &HwDevice, mr, off, w: &mut [u8; 8]| {
        dev.mr_read(mr, off, w).unwrap();
        u64::from_ne_bytes(*w)
    };
    assert_eq!(
        read(&dev, a.handle, 6000, &mut word),
        5,
        "CAS returns the original"
    );
    assert_eq!(
        read(&dev, a.handle, 6008, &mut word),
        9,
        "FAA returns the swapped value"
    );
    assert_eq!(read(&dev, b.handle, 4096, &mut word), 12);

    // 7. bad_wr: the third WR has more SGEs than the QP allows; the first two are posted.
    let three = vec![a.sge(0, 8), a.sge(8, 8), a.sge(16, 8)];
    let wrs = [
        SendWr::rdma_write(8, vec![a.sge(0, 8)], b.addr, b.rkey),
        SendWr::rdma_write(9, vec![a.sge(0, 8)], b.addr, b.rkey),
        SendWr::rdma_write(10, three, b.addr, b.rkey),
    ];
    let e = dev.post_send(qa.handle, &wrs).unwrap_err();
    assert_eq!((e.bad_wr, e.errno()), (2, Errno::EINVAL), "{e}");
    let (wcs, _) = collect(&mut dev, &chan, cq, 2);
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [8, 9]);
    let bad_recv = [
        RecvWr::new(11, vec![b.sge(0, 8)]),
        RecvWr::new(12, vec![b.sge(0, 8), b.sge(8, 8), b.sge(16, 8)]),
    ];
    let e = dev.post_recv(qb.handle, &bad_recv).unwrap_err();
    assert_eq!((e.bad_wr, e.errno()), (1, Errno::EINVAL), "{e}");

    // No async events on a healthy device but COMM_EST: librnic's device raises it once on
    // each QP's first request (docs/semantics-verbs.md, "Async events"); rxe never does.
    while let Some(e) = dev.get_async_event() {
        assert_eq!(e.event_type, AsyncEventType::CommEst, "{e:?}");
    }

    // Orderly teardown through the trait.
    dev.destroy_qp(qa.handle).unwrap();
    dev.destroy_qp(qb.handle).unwrap();
    dev.destroy_cq(cq).unwrap();
    dev.dereg_mr(a.handle).unwrap();
    dev.dereg_mr(b.handle).unwrap();
    dev.dealloc_pd(pd).unwrap();
}

#[test]
fn error_state_flushes_posted_receives_in_order() {
    const NAME: &str = "error_state_flushes_posted_receives_in_order";
    if !is_child(NAME) {
        return run_child(NAME, "127.0.0.42", Lib::Rnic);
    }
    let mut dev = open(Ipv4Addr::new(127, 0, 0, 42));
    let pd = dev.alloc_pd().unwrap();
    let mr = dev.reg_mr(pd, 4096, all_access()).unwrap();
    let chan = CompChannel::new();
    let cq = dev.create_cq(32, Some(&chan)).unwrap();
    let cap = QpCap::uniform(8, 1, 0);
    let qa = dev
        .create_qp(pd, &QpInitAttr::rc(cq, cq, cap, false))
        .unwrap();
    let qb = dev
        .create_qp(pd, &QpInitAttr::rc(cq, cq, cap, false))
        .unwrap();
    let gid = dev.gid();
    connect(&mut dev, qa.handle, qb.qp_num, gid);
    connect(&mut dev, qb.handle, qa.qp_num, gid);

    let recvs: Vec<RecvWr> = (0..6)
        .map(|i| RecvWr::new(50 + i, vec![mr.sge(i * 256, 256)]))
        .collect();
    dev.post_recv(qb.handle, &recvs).unwrap();
    let mut wcs = Vec::new();
    assert_eq!(
        dev.poll_cq(cq, 16, &mut wcs),
        Ok(0),
        "nothing completes by itself"
    );

    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    dev.modify_qp(qb.handle, &err, QpAttrMask::STATE).unwrap();
    assert_eq!(dev.query_qp(qb.handle).unwrap().0.qp_state, QpState::Err);

    let (wcs, events) = collect(&mut dev, &chan, cq, 6);
    println!("flush: {events} CQ events");
    for (i, w) in wcs.iter().enumerate() {
        assert_eq!(w.wr_id, 50 + i as u64, "in posting order: {wcs:?}");
        assert_eq!(w.status, WcStatus::WrFlushErr);
        assert_eq!(w.qp_num, qb.qp_num);
    }
    // The peer is untouched.
    assert_eq!(dev.query_qp(qa.handle).unwrap().0.qp_state, QpState::Rts);
    // Dropping the device with everything still created destroys it all; a waiter on its
    // descriptors then learns (on librnic, whose channel is a socket pair) that no event will
    // come.
    let waiter = dev.event_waiter().unwrap();
    drop(dev);
    let after = waiter.wait(Duration::from_millis(100));
    let kind = after.map_err(|e| e.kind());
    assert_eq!(
        kind,
        Err(std::io::ErrorKind::BrokenPipe),
        "librnic's channel hangs up"
    );
}

/// Waits (at most 10 s) for the next async event: `poll(2)` on the device's descriptors,
/// `process_events`, then the trait's `get_async_event`.
fn next_async_event(dev: &mut HwDevice) -> AsyncEvent {
    for _ in 0..100 {
        if let Some(e) = dev.get_async_event() {
            return e;
        }
        if wait_readable(&dev.event_fds(), 100) {
            dev.process_events();
        }
    }
    panic!("no async event after 10 s");
}

/// Async events through the context's async fd: a CQ overrun raises `CQ_ERR` on that CQ, and
/// the first packet reaching a QP still in RTR raises `COMM_EST` on that QP (librnic's
/// simulated RNIC raises both; cm-spec §5).
#[test]
fn async_events_name_their_cq_and_qp() {
    const NAME: &str = "async_events_name_their_cq_and_qp";
    if !is_child(NAME) {
        return run_child(NAME, "127.0.0.47", Lib::Rnic);
    }
    let mut dev = open(Ipv4Addr::new(127, 0, 0, 47));
    let pd = dev.alloc_pd().unwrap();
    let mr = dev.reg_mr(pd, 4096, all_access()).unwrap();
    let small = dev.create_cq(1, None).unwrap();
    let cq = dev.create_cq(32, None).unwrap();
    let cap = QpCap::uniform(8, 1, 0);
    let qa = dev
        .create_qp(pd, &QpInitAttr::rc(small, cq, cap, true))
        .unwrap();
    let qb = dev
        .create_qp(pd, &QpInitAttr::rc(cq, cq, cap, true))
        .unwrap();
    let gid = dev.gid();
    assert_eq!(dev.get_async_event(), None);

    // qb stays in RTR: qa's first WRITE reaching it is COMM_EST on qb.
    connect(&mut dev, qa.handle, qb.qp_num, gid);
    to_rtr(&mut dev, qb.handle, qa.qp_num, gid);
    let write = |id| SendWr::rdma_write(id, vec![mr.sge(0, 8)], mr.addr + 64, mr.rkey);
    dev.post_send(qa.handle, &[write(1)]).unwrap();
    assert_eq!(
        next_async_event(&mut dev),
        AsyncEvent {
            event_type: AsyncEventType::CommEst,
            element: AsyncElement::Qp(qb.qp_num),
        }
    );
    // Two signaled completions into a one-entry CQ: CQ_ERR on that CQ.
    dev.post_send(qa.handle, &[write(2)]).unwrap();
    assert_eq!(
        next_async_event(&mut dev),
        AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: AsyncElement::Cq(small),
        }
    );
    // Then QP_FATAL on the QP whose completion was lost, where the device raises it (librnic,
    // mlx5, rdmavt; rxe does not), and nothing else.
    if let Some(e) = dev.get_async_event() {
        assert_eq!(
            e,
            AsyncEvent {
                event_type: AsyncEventType::QpFatal,
                element: AsyncElement::Qp(qa.qp_num),
            }
        );
    }
    assert_eq!(dev.get_async_event(), None);
}
