//! Object creation and identity: QPNs, keys and addresses (sequential and seeded),
//! registration checks, limits, and destroying objects.

use super::*;
use crate::{SimDevice, SimDeviceConfig};

#[test]
fn qpns_are_24_bit_never_0_or_1_and_unique_while_alive() {
    let mut cfg = SimDeviceConfig::new("x", gid(9));
    cfg.first_qpn = 0;
    let mut d = SimDevice::new(cfg);
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(4, None).unwrap();
    let init = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: caps(2),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        srq: None,
    };
    let a = d.create_qp(pd, &init).unwrap();
    let b = d.create_qp(pd, &init).unwrap();
    assert!(a.qp_num >= 2 && b.qp_num >= 2 && a.qp_num != b.qp_num);
    assert!(a.qp_num <= QPN_MASK);
}

#[test]
fn keys_and_addresses_are_deterministic_and_regions_do_not_overlap() {
    let mk = || {
        let mut d = SimDevice::new(SimDeviceConfig::new("x", gid(9)));
        let pd = d.alloc_pd().unwrap();
        let a = d.reg_mr(pd, 5000, AccessFlags::LOCAL_WRITE).unwrap();
        let b = d.reg_mr(pd, 10, ALL_ACCESS).unwrap();
        (a, b)
    };
    let (a, b) = mk();
    assert_eq!(mk(), (a, b));
    assert!(a.addr + a.length < b.addr);
    assert_eq!(a.rkey, 0, "no remote access, no rkey (rxe)");
    assert_eq!(b.rkey, b.lkey);
    assert_ne!(a.lkey >> 8, b.lkey >> 8);
}

fn seeded(seed: u64) -> SimDevice {
    let mut cfg = SimDeviceConfig::new("x", gid(9));
    cfg.seed = seed;
    SimDevice::new(cfg)
}

/// `n` RC QPs on `d` (one PD and CQ), their QPNs in creation order.
fn qpns(d: &mut SimDevice, n: usize) -> Vec<u32> {
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(4, None).unwrap();
    let init = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        cap: caps(2),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        srq: None,
    };
    (0..n)
        .map(|_| d.create_qp(pd, &init).unwrap().qp_num)
        .collect()
}

/// Two regions with remote access, then one without: `(lkey, rkey, addr)` of each.
fn keys(d: &mut SimDevice) -> Vec<(u32, u32, u64)> {
    let pd = d.alloc_pd().unwrap();
    [ALL_ACCESS, ALL_ACCESS, AccessFlags::LOCAL_WRITE]
        .into_iter()
        .map(|acc| {
            let m = d.reg_mr(pd, 100, acc).unwrap();
            (m.lkey, m.rkey, m.addr)
        })
        .collect()
}

#[test]
fn seed_0_keeps_the_sequential_qpns_keys_and_addresses() {
    assert_eq!(qpns(&mut seeded(0), 3), [0x11, 0x12, 0x13]);
    assert_eq!(
        keys(&mut seeded(0)),
        [
            (0x100, 0x100, 0x1000_0000),
            (0x201, 0x201, 0x1000_2000),
            (0x302, 0, 0x1000_4000)
        ]
    );
}

#[test]
fn seeded_qpns_repeat_per_seed_differ_between_seeds_and_do_not_count_up() {
    let a = qpns(&mut seeded(7), 64);
    assert_eq!(a, qpns(&mut seeded(7), 64), "same seed, same QPNs");
    assert_ne!(a, qpns(&mut seeded(8), 64));
    let mut sorted = a.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), a.len(), "unique while alive");
    assert!(a.iter().all(|&q| (2..=QPN_MASK).contains(&q)));
    assert!(
        a.windows(2).all(|w| w[1].wrapping_sub(w[0]) & QPN_MASK > 1),
        "{a:x?}: one QPN tells the next"
    );
    assert_ne!(a[0], 0x11, "the sequence starts at a seeded point");
}

#[test]
fn a_seeded_qpn_counter_that_meets_a_live_qpn_skips_it() {
    let mut d = seeded(3);
    let first = qpns(&mut d, 1)[0];
    // Back to the counter value that gave `first`: its QPN is live, so the next one is taken.
    d.set_qpn_counter(0x11);
    let again = qpns(&mut d, 1)[0];
    let mut fresh = seeded(3);
    let expected = qpns(&mut fresh, 2)[1];
    assert_ne!(again, first);
    assert_eq!(again, expected, "the next counter value's QPN");
}

#[test]
fn seeded_keys_and_addresses_repeat_per_seed_and_differ_between_seeds() {
    let a = keys(&mut seeded(11));
    assert_eq!(a, keys(&mut seeded(11)));
    let b = keys(&mut seeded(12));
    assert_ne!(a, b);
    for k in [&a, &b] {
        assert_eq!(
            (k[0].0, k[1].0),
            (k[0].1, k[1].1),
            "rkey = lkey with remote access"
        );
        assert_eq!(k[2].1, 0, "no remote access, no rkey");
        assert!(k.iter().all(|&(l, _, _)| l >> 8 != 0));
        assert!(k[0].2 < k[1].2 && k[1].2 < k[2].2, "addresses still ascend");
        assert_ne!(
            k[0].2, 0x1000_0000,
            "the address allocator starts at a seeded page"
        );
        assert_ne!(
            k[1].0 >> 8,
            (k[0].0 >> 8) + 1,
            "key indices do not count up"
        );
    }
    // The three key indices are distinct (one region each).
    assert!(a[0].0 >> 8 != a[1].0 >> 8 && a[1].0 >> 8 != a[2].0 >> 8);
}

#[test]
fn seeded_rkeys_work_and_a_stale_rkey_after_reregistration_is_rem_access_err() {
    let mut a = node_seeded(1, caps(16), 256, false, 21);
    let mut b = node_seeded(2, caps(16), 256, false, 22);
    connect_with(&mut a, &mut b, |_| {});
    let (stale_addr, stale_rkey) = (b.mr.addr, b.mr.rkey);
    b.dev.dereg_mr(b.mr.handle).unwrap();
    let fresh = b.dev.reg_mr(b.pd, 64 * 1024, ALL_ACCESS).unwrap();
    assert_ne!(fresh.rkey, stale_rkey);
    a.dev
        .mr_write(a.mr.handle, 0, &[7, 7, 7, 7, 7, 7, 7, 7])
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write(
                1,
                vec![a.mr.sge(0, 8)],
                fresh.addr,
                fresh.rkey,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    let mut got = [0; 8];
    b.dev.mr_read(fresh.handle, 0, &mut got).unwrap();
    assert_eq!(got, [7; 8]);
    // The old region's key (and address) name nothing any more.
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write(
                2,
                vec![a.mr.sge(0, 8)],
                stale_addr,
                stale_rkey,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(2, WcStatus::RemAccessErr)]
    );
}

#[test]
fn reg_mr_remote_write_without_local_write_is_einval() {
    let mut d = SimDevice::new(SimDeviceConfig::new("x", gid(9)));
    let pd = d.alloc_pd().unwrap();
    let e = d.reg_mr(pd, 64, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
    assert_eq!(
        d.reg_mr(pd, 0, AccessFlags::LOCAL_WRITE).unwrap_err().errno,
        Errno::EINVAL
    );
}

#[test]
fn mr_write_read_outside_the_region_is_efault() {
    let mut n = node(1);
    let e = n
        .dev
        .mr_write(n.mr.handle, n.mr.length - 1, &[1, 2])
        .unwrap_err();
    assert_eq!(e.errno, Errno::EFAULT);
    n.dev.mr_write(n.mr.handle, 3, &[7, 8]).unwrap();
    let mut b = [0; 2];
    n.dev.mr_read(n.mr.handle, 3, &mut b).unwrap();
    assert_eq!(b, [7, 8]);
}

#[test]
fn limits_are_enomem_or_einval() {
    let mut cfg = SimDeviceConfig::new("x", gid(9));
    cfg.max_pd = 1;
    cfg.max_cqe = 8;
    let mut d = SimDevice::new(cfg);
    d.alloc_pd().unwrap();
    assert_eq!(d.alloc_pd().unwrap_err().errno, Errno::ENOMEM);
    assert_eq!(d.create_cq(9, None).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(d.create_cq(0, None).unwrap_err().errno, Errno::EINVAL);
}

#[test]
fn destroy_cq_or_pd_in_use_is_ebusy() {
    let mut n = node(1);
    assert_eq!(n.dev.destroy_cq(n.scq).unwrap_err().errno, Errno::EBUSY);
    assert_eq!(n.dev.dealloc_pd(n.pd).unwrap_err().errno, Errno::EBUSY);
    n.dev.destroy_qp(n.qp.handle).unwrap();
    n.dev.destroy_cq(n.scq).unwrap();
    assert_eq!(
        n.dev.dealloc_pd(n.pd).unwrap_err().errno,
        Errno::EBUSY,
        "MR uses it"
    );
    n.dev.dereg_mr(n.mr.handle).unwrap();
    n.dev.dealloc_pd(n.pd).unwrap();
}

#[test]
fn destroy_qp_discards_wrs_without_completions() {
    let (mut a, _b) = pair();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 2, 0, 8)]).unwrap();
    a.dev.destroy_qp(a.qp.handle).unwrap();
    assert!(poll(&mut a.dev, a.scq).is_empty());
    assert!(poll(&mut a.dev, a.rcq).is_empty());
    assert_eq!(
        a.dev
            .post_send(a.qp.handle, &[send(&a, 3, 0, 8)])
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
}
