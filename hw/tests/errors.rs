//! Failures: opening what does not exist, handles the device never gave out, out-of-range
//! memory accesses, busy objects, illegal transitions, the GSI queues' limits, and a process
//! without libibverbs.

#![cfg(feature = "hw")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{is_child, real_libibverbs_loaded, run_child, Lib};
use rnic_hw::{HwDevice, HwError, HwOptions, MAD_SIZE, QUEUE_CAPACITY};
use std::net::{IpAddr, Ipv4Addr};
use verbs_core::{
    AccessFlags, CompChannel, CqHandle, Device, Errno, Gid, GsiDatagram, GsiEndpoint, MrHandle,
    PdHandle, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType, RecvWr, SendWr,
};

fn named(name: &str) -> HwOptions {
    HwOptions {
        device: Some(name.into()),
        ..HwOptions::default()
    }
}

#[test]
fn open_failures_name_the_problem() {
    const NAME: &str = "open_failures_name_the_problem";
    if !is_child(NAME) {
        return run_child(NAME, "127.0.0.43", Lib::Rnic);
    }
    let e = HwDevice::open(&named("nosuch0")).unwrap_err();
    assert_eq!(
        e,
        HwError::DeviceNotFound {
            name: "nosuch0".into(),
            available: vec!["rnic0".into()]
        }
    );
    assert_eq!(e.errno(), Errno::ENODEV);
    assert!(e.to_string().contains("rnic0"), "{e}");

    let other_ip = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 99)));
    let e = HwDevice::open(&HwOptions {
        ip: other_ip,
        ..named("rnic0")
    })
    .unwrap_err();
    assert_eq!(
        e,
        HwError::NoRoceV2Gid {
            device: "rnic0".into(),
            port: 1,
            ip: other_ip
        }
    );
    assert_eq!(e.errno(), Errno::EADDRNOTAVAIL);
    assert!(e.to_string().contains("127.0.0.99"), "{e}");

    let e = HwDevice::open(&HwOptions {
        port: Some(2),
        ..HwOptions::default()
    })
    .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let e = HwDevice::open(&HwOptions {
        gid_index: Some(5),
        ..HwOptions::default()
    })
    .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");

    // The defaults, and the device's own IP, find it.
    let mine = Ipv4Addr::new(127, 0, 0, 43);
    let dev = HwDevice::open(&HwOptions::default()).unwrap();
    assert_eq!((dev.name(), dev.port_num()), ("rnic0", 1));
    assert_eq!(dev.gid(), Gid::from_ipv4(mine));
    drop(dev);
    let dev = HwDevice::open(&HwOptions {
        ip: Some(IpAddr::V4(mine)),
        gid_index: None,
        port: Some(1),
        ..named("rnic0")
    })
    .unwrap();
    assert_eq!(dev.gid_index(), 0);
}

#[test]
fn bad_handles_ranges_and_states() {
    const NAME: &str = "bad_handles_ranges_and_states";
    if !is_child(NAME) {
        return run_child(NAME, "127.0.0.44", Lib::Rnic);
    }
    let mut dev = HwDevice::open(&named("rnic0")).unwrap();
    let inval = Some(Errno::EINVAL);
    let errno = |r: Result<(), verbs_core::Error>| r.err().map(|e| e.errno);

    // Handles never given out: EINVAL, before any libibverbs call.
    let (pd9, mr9, cq9, qp9) = (PdHandle(999), MrHandle(999), CqHandle(999), QpHandle(999));
    assert_eq!(errno(dev.dealloc_pd(pd9)), inval);
    assert_eq!(
        errno(dev.reg_mr(pd9, 64, AccessFlags::LOCAL_WRITE).map(drop)),
        inval
    );
    assert_eq!(errno(dev.dereg_mr(mr9)), inval);
    assert_eq!(errno(dev.mr_write(mr9, 0, &[1])), inval);
    assert_eq!(errno(dev.mr_read(mr9, 0, &mut [0])), inval);
    assert_eq!(errno(dev.destroy_cq(cq9)), inval);
    assert_eq!(errno(dev.req_notify_cq(cq9, false)), inval);
    assert_eq!(errno(dev.poll_cq(cq9, 1, &mut Vec::new()).map(drop)), inval);
    assert_eq!(
        errno(dev.modify_qp(qp9, &QpAttr::default(), QpAttrMask::STATE)),
        inval
    );
    assert_eq!(errno(dev.query_qp(qp9).map(drop)), inval);
    assert_eq!(errno(dev.destroy_qp(qp9)), inval);
    let e = dev.post_send(qp9, &[SendWr::send(1, vec![])]).unwrap_err();
    assert_eq!((e.bad_wr, e.errno()), (0, Errno::EINVAL));
    let e = dev.post_recv(qp9, &[RecvWr::new(1, vec![])]).unwrap_err();
    assert_eq!((e.bad_wr, e.errno()), (0, Errno::EINVAL));

    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8, None).unwrap();
    let cap = QpCap::uniform(4, 1, 0);
    let unknown_cq = QpInitAttr::rc(cq9, cq, cap, false);
    assert_eq!(errno(dev.create_qp(pd, &unknown_cq).map(drop)), inval);
    assert_eq!(
        errno(
            dev.create_qp(pd9, &QpInitAttr::rc(cq, cq, cap, false))
                .map(drop)
        ),
        inval
    );
    let ud = QpInitAttr {
        qp_type: QpType::Ud,
        ..QpInitAttr::rc(cq, cq, cap, false)
    };
    assert_eq!(
        errno(dev.create_qp(pd, &ud).map(drop)),
        Some(Errno::EOPNOTSUPP)
    );

    // Queries out of range.
    assert_eq!(errno(dev.query_port(0).map(drop)), inval);
    assert_eq!(errno(dev.query_port(2).map(drop)), inval);
    assert_eq!(errno(dev.query_gid(1, 5).map(drop)), inval);

    // Memory regions: zero length, bounds.
    assert_eq!(
        errno(dev.reg_mr(pd, 0, AccessFlags::LOCAL_WRITE).map(drop)),
        inval
    );
    // REMOTE_WRITE without LOCAL_WRITE: the library refuses it (man:ibv_reg_mr.3), its errno
    // comes through.
    let remote_only = dev.reg_mr(pd, 64, AccessFlags::REMOTE_WRITE);
    assert_eq!(errno(remote_only.map(drop)), inval);
    let mr = dev.reg_mr(pd, 100, AccessFlags::LOCAL_WRITE).unwrap();
    let efault = Some(Errno::EFAULT);
    assert_eq!(errno(dev.mr_read(mr.handle, 99, &mut [0; 2])), efault);
    assert_eq!(errno(dev.mr_read(mr.handle, 101, &mut [])), efault);
    assert_eq!(errno(dev.mr_read(mr.handle, u64::MAX, &mut [0])), efault);
    assert_eq!(errno(dev.mr_write(mr.handle, 1, &[0; 100])), efault);
    assert_eq!(errno(dev.mr_write(mr.handle, u64::MAX, &[0])), efault);
    dev.mr_write(mr.handle, 98, &[7, 8]).unwrap();
    let mut two = [0; 2];
    dev.mr_read(mr.handle, 98, &mut two).unwrap();
    assert_eq!(two, [7, 8]);
    dev.mr_read(mr.handle, 100, &mut []).unwrap();

    // CQs: size 0, no channel to arm.
    assert_eq!(errno(dev.create_cq(0, None).map(drop)), inval);
    assert_eq!(errno(dev.req_notify_cq(cq, false)), inval);
    let chan = CompChannel::new();
    let armed = dev.create_cq(8, Some(&chan)).unwrap();
    dev.req_notify_cq(armed, true).unwrap();

    // QPs: posting in RESET, an illegal transition, busy PD and CQ.
    let qp = dev
        .create_qp(pd, &QpInitAttr::rc(cq, armed, cap, false))
        .unwrap();
    let e = dev
        .post_send(qp.handle, &[SendWr::send(1, vec![mr.sge(0, 8)])])
        .unwrap_err();
    assert_eq!((e.bad_wr, e.errno()), (0, Errno::EINVAL));
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    assert_eq!(
        errno(dev.modify_qp(qp.handle, &rts, QpAttrMask::STATE)),
        inval
    );
    assert_eq!(dev.query_qp(qp.handle).unwrap().0.qp_state, QpState::Reset);
    let busy = Some(Errno::EBUSY);
    assert_eq!(errno(dev.dealloc_pd(pd)), busy);
    assert_eq!(errno(dev.destroy_cq(armed)), busy);
    dev.destroy_qp(qp.handle).unwrap();
    assert_eq!(
        errno(dev.destroy_qp(qp.handle)),
        inval,
        "a destroyed handle is unknown"
    );
    dev.destroy_cq(armed).unwrap();
    dev.dereg_mr(mr.handle).unwrap();
    assert_eq!(errno(dev.mr_read(mr.handle, 0, &mut [0])), inval);
    dev.destroy_cq(cq).unwrap();
    dev.dealloc_pd(pd).unwrap();

    // GSI: 256-byte MADs only; bounded queues, oldest dropped.
    let peer = Gid::from_ipv4(Ipv4Addr::new(127, 0, 0, 1));
    assert_eq!(errno(dev.gsi_send(peer, &[0; 100])), inval);
    assert_eq!(dev.take_gsi_send(), None);
    for i in 0..QUEUE_CAPACITY + 3 {
        let mut mad = vec![0; MAD_SIZE];
        mad[0] = i as u8;
        dev.gsi_send(peer, &mad).unwrap();
    }
    assert_eq!(dev.gsi_dropped(), 3);
    let (to, first) = dev.take_gsi_send().unwrap();
    assert_eq!((to, first[0]), (peer, 3));
    assert_eq!(dev.gsi_recv(), None);
    let d = GsiDatagram {
        peer,
        mad: vec![5; MAD_SIZE],
    };
    dev.push_gsi_recv(d.clone());
    assert_eq!(dev.gsi_recv(), Some(d));
    assert_eq!(dev.gsi_recv(), None);
    assert_eq!(dev.get_async_event(), None);
}

#[test]
fn without_libibverbs_open_says_what_to_install() {
    const NAME: &str = "without_libibverbs_open_says_what_to_install";
    if !is_child(NAME) {
        return run_child(NAME, "127.0.0.45", Lib::Empty);
    }
    // LD_LIBRARY_PATH holds nothing: the system's libibverbs loads if it is installed.
    let r = HwDevice::open(&HwOptions::default());
    if real_libibverbs_loaded() {
        match r {
            Err(e) => {
                println!("the system's libibverbs loaded and lists no device: {e}");
                assert_eq!(e, HwError::NoDevice, "{e}");
                assert_eq!(e.errno(), Errno::ENODEV);
                assert!(e.to_string().contains("rdma link add rxe0 type rxe"), "{e}");
            }
            Ok(dev) => println!("SKIP: this host has an RDMA device ({})", dev.name()),
        }
    } else {
        let e = r.unwrap_err();
        println!("no libibverbs installed: {e}");
        assert_eq!(e, HwError::NoLibrary);
        assert!(e.to_string().contains("libibverbs1"), "{e}");
    }
}

#[test]
fn unloadable_libibverbs_is_no_library() {
    const NAME: &str = "unloadable_libibverbs_is_no_library";
    if !is_child(NAME) {
        return run_child(NAME, "127.0.0.46", Lib::NotElf);
    }
    assert!(!real_libibverbs_loaded());
    let e = HwDevice::open(&named("rnic0")).unwrap_err();
    assert_eq!(e, HwError::NoLibrary);
    assert_eq!(e.errno(), Errno::EOPNOTSUPP);
    let text = e.to_string();
    assert!(
        text.contains("libibverbs.so.1") && text.contains("libibverbs1"),
        "{text}"
    );
}
