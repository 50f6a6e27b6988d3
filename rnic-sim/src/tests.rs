//! Unit tests of the verbs and RC rules, one test per rule, named after it.

mod memory;

use crate::roce::{AethKind, Opcode};
use crate::testutil::*;
use crate::{pump::pump_pair, SimDevice, SimDeviceConfig};
use verbs_core::*;

fn send(n: &Node, id: u64, off: u64, len: u32) -> SendWr {
    SendWr::send(id, vec![n.mr.sge(off, len)])
}

fn recv(n: &Node, id: u64, off: u64, len: u32) -> RecvWr {
    RecvWr::new(id, vec![n.mr.sge(off, len)])
}

fn err_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    }
}

fn state(n: &Node) -> QpState {
    n.dev.query_qp(n.qp.handle).unwrap().0.qp_state
}

// ---------------------------------------------------------------------------------------
// Object creation and identity

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

// ---------------------------------------------------------------------------------------
// Posting

#[test]
fn post_send_in_reset_init_rtr_is_einval() {
    let mut a = node(1);
    let b = node(2);
    let wr = send(&a, 1, 0, 8);
    assert_eq!(
        a.dev
            .post_send(a.qp.handle, std::slice::from_ref(&wr))
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    to_init(&mut a);
    assert_eq!(
        a.dev
            .post_send(a.qp.handle, std::slice::from_ref(&wr))
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    to_rtr(&mut a, &conn_attr(b.dev.gid(), b.qp.qp_num, 0));
    let e = a.dev.post_send(a.qp.handle, &[wr]).unwrap_err();
    assert_eq!((e.errno(), e.bad_wr), (Errno::EINVAL, 0));
}

#[test]
fn post_recv_in_reset_is_einval_and_allowed_from_init() {
    let mut a = node(1);
    let wr = recv(&a, 1, 0, 8);
    assert_eq!(
        a.dev
            .post_recv(a.qp.handle, std::slice::from_ref(&wr))
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    to_init(&mut a);
    a.dev.post_recv(a.qp.handle, &[wr]).unwrap();
}

#[test]
fn post_send_beyond_max_send_wr_is_enomem_and_earlier_wrs_are_posted() {
    let (mut a, mut b) = pair();
    let wrs: Vec<_> = (0..20).map(|i| send(&a, i, 0, 4)).collect();
    let e = a.dev.post_send(a.qp.handle, &wrs).unwrap_err();
    assert_eq!((e.errno(), e.bad_wr), (Errno::ENOMEM, 16));
    let rwrs: Vec<_> = (0..16).map(|i| recv(&b, 100 + i, 0, 4)).collect();
    b.dev.post_recv(b.qp.handle, &rwrs).unwrap();
    pump(&mut a, &mut b);
    let ids: Vec<u64> = poll(&mut a.dev, a.scq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..16).collect::<Vec<_>>());
}

#[test]
fn post_recv_beyond_max_recv_wr_is_enomem() {
    let (mut a, _b) = pair();
    let wrs: Vec<_> = (0..17).map(|i| recv(&a, i, 0, 4)).collect();
    let e = a.dev.post_recv(a.qp.handle, &wrs).unwrap_err();
    assert_eq!((e.errno(), e.bad_wr), (Errno::ENOMEM, 16));
}

#[test]
fn more_sges_than_max_sge_is_einval_and_bad_wr_names_it() {
    let (mut a, mut b) = pair();
    let five = SendWr::send(3, vec![a.mr.sge(0, 1); 5]);
    let e = a
        .dev
        .post_send(
            a.qp.handle,
            &[
                send(&a, 1, 0, 1),
                send(&a, 2, 0, 1),
                five,
                send(&a, 4, 0, 1),
            ],
        )
        .unwrap_err();
    assert_eq!((e.errno(), e.bad_wr), (Errno::EINVAL, 2));
    let e = a
        .dev
        .post_recv(a.qp.handle, &[RecvWr::new(9, vec![a.mr.sge(0, 1); 5])])
        .unwrap_err();
    assert_eq!((e.errno(), e.bad_wr), (Errno::EINVAL, 0));
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 1, 0, 8), recv(&b, 2, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

#[test]
fn atomic_with_wrong_length_or_misaligned_address_is_einval_at_post() {
    let (mut a, _b) = pair();
    let mis = SendWr::atomic_fetch_and_add(1, a.mr.sge(0, 8), 0x1004, 1, 1);
    assert_eq!(
        a.dev.post_send(a.qp.handle, &[mis]).unwrap_err().errno(),
        Errno::EINVAL
    );
    let short = SendWr::atomic_fetch_and_add(1, a.mr.sge(0, 4), 0x1000, 1, 1);
    assert_eq!(
        a.dev.post_send(a.qp.handle, &[short]).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn inline_longer_than_max_inline_data_is_einval() {
    let (mut a, _b) = pair();
    let wr = send(&a, 1, 0, 65).with_flags(SendFlags::SIGNALED | SendFlags::INLINE);
    assert_eq!(
        a.dev.post_send(a.qp.handle, &[wr]).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn bad_lkey_is_checked_at_execution_loc_prot_err_then_flush() {
    let (mut a, mut b) = pair();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 50, 0, 64)])
        .unwrap();
    let mut bad = send(&a, 2, 0, 8);
    bad.sg_list[0].lkey ^= 0xFF;
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 8), bad, send(&a, 3, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(state(&a), QpState::Err);
    assert_eq!(state(&b), QpState::Rts, "the peer never saw the bad WR");
}

#[test]
fn inline_send_copies_at_post_time_and_skips_lkey() {
    let (mut a, mut b) = pair();
    a.dev.mr_write(a.mr.handle, 0, b"inline!!").unwrap();
    let mut wr = send(&a, 1, 0, 8).with_flags(SendFlags::SIGNALED | SendFlags::INLINE);
    wr.sg_list[0].lkey = 0xdead;
    a.dev.post_send(a.qp.handle, &[wr]).unwrap();
    a.dev.mr_write(a.mr.handle, 0, b"changed!").unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 9, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    let mut got = [0u8; 8];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(&got, b"inline!!");
}

// ---------------------------------------------------------------------------------------
// modify_qp

#[test]
fn modify_qp_illegal_transition_is_einval_and_changes_nothing() {
    let mut a = node(1);
    let e = a
        .dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "RESET -> ERR is not in the table");
    assert_eq!(state(&a), QpState::Reset);
    to_init(&mut a);
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..conn_attr(gid(2), 5, 0)
    };
    assert_eq!(
        a.dev
            .modify_qp(a.qp.handle, &rts, RTS_MASK)
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    assert_eq!(state(&a), QpState::Init);
}

#[test]
fn modify_qp_missing_required_attribute_is_einval() {
    let mut a = node(1);
    let attr = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    let e = a
        .dev
        .modify_qp(a.qp.handle, &attr, QpAttrMask::STATE | QpAttrMask::PORT)
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
    assert_eq!(state(&a), QpState::Reset);
}

#[test]
fn modify_qp_out_of_range_attribute_is_einval_and_changes_nothing() {
    let mut a = node(1);
    to_init(&mut a);
    let good = conn_attr(gid(2), 5, 7);
    for bad in [
        QpAttr {
            max_dest_rd_atomic: 200,
            ..good
        },
        QpAttr {
            ah_attr: AhAttr {
                is_global: false,
                ..good.ah_attr
            },
            ..good
        },
        QpAttr {
            dest_qp_num: 1 << 24,
            ..good
        },
        QpAttr {
            min_rnr_timer: 32,
            ..good
        },
    ] {
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            ..bad
        };
        assert_eq!(
            a.dev
                .modify_qp(a.qp.handle, &attr, RTR_MASK)
                .unwrap_err()
                .errno,
            Errno::EINVAL
        );
        assert_eq!(state(&a), QpState::Init);
    }
    to_rtr(&mut a, &good);
    for bad in [
        QpAttr {
            timeout: 32,
            ..good
        },
        QpAttr {
            retry_cnt: 8,
            ..good
        },
        QpAttr {
            rnr_retry: 8,
            ..good
        },
        QpAttr {
            max_rd_atomic: 255,
            ..good
        },
    ] {
        let attr = QpAttr {
            qp_state: QpState::Rts,
            ..bad
        };
        assert_eq!(
            a.dev
                .modify_qp(a.qp.handle, &attr, RTS_MASK)
                .unwrap_err()
                .errno,
            Errno::EINVAL
        );
        assert_eq!(state(&a), QpState::Rtr);
    }
}

#[test]
fn psns_are_masked_to_24_bits() {
    let mut a = node(1);
    to_init(&mut a);
    let at = conn_attr(gid(2), 5, 0x7F12_3456);
    to_rtr(&mut a, &at);
    to_rts(&mut a, &at);
    let (q, _) = a.dev.query_qp(a.qp.handle).unwrap();
    assert_eq!((q.sq_psn, q.rq_psn), (0x12_3456, 0x12_3456));
}

// ---------------------------------------------------------------------------------------
// ERR and flushes

#[test]
fn entry_to_err_flushes_sq_then_rq_in_post_order() {
    let (mut a, _b) = pair();
    a.dev
        .post_recv(
            a.qp.handle,
            &[recv(&a, 10, 0, 8), recv(&a, 11, 0, 8), recv(&a, 12, 0, 8)],
        )
        .unwrap();
    let unsignaled = send(&a, 2, 0, 8).with_flags(SendFlags::empty());
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 1, 0, 8), unsignaled, send(&a, 3, 0, 8)],
        )
        .unwrap();
    // Nothing pumped: all outstanding. The flush happens inside modify_qp.
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        statuses(&s),
        vec![
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ],
        "unsignaled WRs are flushed too"
    );
    assert!(s
        .iter()
        .all(|w| *w == WorkCompletion::error(w.wr_id, w.status, a.qp.qp_num)));
    let r = poll(&mut a.dev, a.rcq);
    assert_eq!(
        statuses(&r),
        vec![
            (10, WcStatus::WrFlushErr),
            (11, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr)
        ]
    );
    // ERR -> ERR flushes nothing again.
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert!(poll(&mut a.dev, a.scq).is_empty());
}

#[test]
fn entry_to_err_from_init_and_rtr_flushes_receives() {
    let mut a = node(1);
    to_init(&mut a);
    a.dev.post_recv(a.qp.handle, &[recv(&a, 1, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(
        statuses(&poll(&mut a.dev, a.rcq)),
        vec![(1, WcStatus::WrFlushErr)]
    );
}

#[test]
fn unsignaled_successful_send_makes_no_completion() {
    let (mut a, mut b) = pair();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 1, 0, 8), recv(&b, 2, 0, 8)])
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                send(&a, 1, 0, 8).with_flags(SendFlags::empty()),
                send(&a, 2, 0, 8),
            ],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(2, WcStatus::Success)]
    );
    assert_eq!(poll(&mut b.dev, b.rcq).len(), 2);
}

#[test]
fn sq_sig_all_signals_every_send() {
    let mut a = node_with(1, caps(8), 64, true);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 1, 0, 8).with_flags(SendFlags::empty())],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
}

#[test]
fn post_in_err_is_accepted_and_flushed_immediately() {
    let (mut a, _b) = pair();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                send(&a, 1, 0, 8).with_flags(SendFlags::empty()),
                send(&a, 2, 0, 8),
            ],
        )
        .unwrap();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 3, 0, 8)]).unwrap();
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        statuses(&poll(&mut a.dev, a.rcq)),
        vec![(3, WcStatus::WrFlushErr)]
    );
    // Malformed WRs are still refused in ERR.
    let five = SendWr::send(4, vec![a.mr.sge(0, 1); 5]);
    assert_eq!(
        a.dev.post_send(a.qp.handle, &[five]).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn posts_in_err_never_fill_the_queue_because_the_flush_is_synchronous() {
    let mut a = node_with(1, caps(2), 256, false);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    let ss: Vec<_> = (0..5).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    let rs: Vec<_> = (10..15).map(|i| recv(&a, i, 0, 8)).collect();
    a.dev.post_recv(a.qp.handle, &rs).unwrap();
    let flushed =
        |ids: std::ops::Range<u64>| -> Vec<_> { ids.map(|i| (i, WcStatus::WrFlushErr)).collect() };
    assert_eq!(statuses(&poll(&mut a.dev, a.scq)), flushed(0..5));
    assert_eq!(statuses(&poll(&mut a.dev, a.rcq)), flushed(10..15));
}

#[test]
fn err_to_reset_and_rts_to_reset_empty_queues_without_completions() {
    let (mut a, _b) = pair();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 2, 0, 8)]).unwrap();
    let reset = QpAttr::default();
    a.dev
        .modify_qp(a.qp.handle, &reset, QpAttrMask::STATE)
        .unwrap();
    assert!(poll(&mut a.dev, a.scq).is_empty() && poll(&mut a.dev, a.rcq).is_empty());
    to_init(&mut a);
    a.dev.post_recv(a.qp.handle, &[recv(&a, 3, 0, 8)]).unwrap();
    a.dev
        .modify_qp(a.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(poll(&mut a.dev, a.rcq).len(), 1);
    a.dev
        .modify_qp(a.qp.handle, &reset, QpAttrMask::STATE)
        .unwrap();
    assert!(poll(&mut a.dev, a.rcq).is_empty());
    assert_eq!(state(&a), QpState::Reset);
}

#[test]
fn qp_can_be_reconnected_after_err_and_reset() {
    let (mut a, mut b) = pair();
    for n in [&mut a, &mut b] {
        n.dev
            .modify_qp(n.qp.handle, &err_attr(), QpAttrMask::STATE)
            .unwrap();
        n.dev
            .modify_qp(n.qp.handle, &QpAttr::default(), QpAttrMask::STATE)
            .unwrap();
    }
    connect_with(&mut a, &mut b, |at| {
        at.sq_psn = 0x500;
        at.rq_psn = 0x500;
    });
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
}

// ---------------------------------------------------------------------------------------
// CQs, channels, events

#[test]
fn cq_overrun_raises_cq_err_and_moves_the_qp_to_err() {
    let mut a = node_with(1, caps(8), 2, false);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    let rs: Vec<_> = (0..4).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    a.dev.post_recv(a.qp.handle, &[recv(&a, 99, 0, 8)]).unwrap();
    let ss: Vec<_> = (0..4).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        a.dev.get_async_event(),
        Some(AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: AsyncElement::Cq(a.scq)
        })
    );
    assert_eq!(state(&a), QpState::Err);
    // Stored entries come out first, then the CQ reports EIO.
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    let mut v = Vec::new();
    assert_eq!(
        a.dev.poll_cq(a.scq, 4, &mut v).unwrap_err().errno,
        Errno::EIO
    );
    // The receive queue's flush goes to its own (healthy) CQ.
    assert_eq!(
        statuses(&poll(&mut a.dev, a.rcq)),
        vec![(99, WcStatus::WrFlushErr)]
    );
    assert!(a.dev.counters().completions_lost >= 2);
}

#[test]
fn req_notify_cq_notifies_once_then_disarms() {
    let ch = CompChannel::new();
    let mut a = node(1);
    let mut b = node(2);
    let cq = b.dev.create_cq(16, Some(&ch)).unwrap();
    // Give b a QP that reports receives to the channel CQ.
    b.dev.destroy_qp(b.qp.handle).unwrap();
    b.qp = b
        .dev
        .create_qp(
            b.pd,
            &QpInitAttr {
                send_cq: b.scq,
                recv_cq: cq,
                cap: caps(8),
                qp_type: QpType::Rc,
                sq_sig_all: false,
            },
        )
        .unwrap();
    b.rcq = cq;
    connect_with(&mut a, &mut b, |_| {});
    assert_eq!(
        b.dev.req_notify_cq(b.scq, false).unwrap_err().errno,
        Errno::EINVAL
    );
    b.dev.req_notify_cq(cq, false).unwrap();
    let rs: Vec<_> = (0..3).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 8), send(&a, 2, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(ch.try_get_cq_event().unwrap(), cq);
    assert_eq!(
        ch.try_get_cq_event().unwrap_err().errno,
        Errno::EAGAIN,
        "disarmed"
    );
    // Solicited-only ignores an unsolicited receive, fires on a solicited one.
    b.dev.req_notify_cq(cq, true).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 3, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert!(ch.try_get_cq_event().is_err());
    b.dev.post_recv(b.qp.handle, &[recv(&b, 5, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 4, 0, 8).with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(ch.try_get_cq_event().unwrap(), cq);
}

#[test]
fn comm_est_is_raised_when_a_packet_arrives_in_rtr() {
    let mut a = node(1);
    let mut b = node(2);
    let ab = conn_attr(b.dev.gid(), b.qp.qp_num, 0);
    let ba = conn_attr(a.dev.gid(), a.qp.qp_num, 0);
    to_init(&mut a);
    to_rtr(&mut a, &ab);
    to_rts(&mut a, &ab);
    to_init(&mut b);
    to_rtr(&mut b, &ba);
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        b.dev.get_async_event(),
        Some(AsyncEvent {
            event_type: AsyncEventType::CommEst,
            element: AsyncElement::Qp(b.qp.qp_num)
        })
    );
    assert_eq!(b.dev.get_async_event(), None);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(1, WcStatus::Success)]
    );
}

// ---------------------------------------------------------------------------------------
// RC data path

#[test]
fn send_recv_is_byte_exact_across_segmentation() {
    let (mut a, mut b) = pair();
    let data = pattern(1000, 3);
    a.dev.mr_write(a.mr.handle, 100, &data).unwrap();
    // Two receive SGEs to check scattering across them.
    b.dev
        .post_recv(
            b.qp.handle,
            &[RecvWr::new(7, vec![b.mr.sge(0, 300), b.mr.sge(4096, 800)])],
        )
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::send_with_imm(1, vec![a.mr.sge(100, 1000)], 0xabcd)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let wc = poll(&mut b.dev, b.rcq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 1000)
    );
    assert_eq!(
        (wc[0].imm_data, wc[0].wc_flags),
        (0xabcd, WcFlags::WITH_IMM)
    );
    let mut got = vec![0u8; 300];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    let mut rest = vec![0u8; 700];
    b.dev.mr_read(b.mr.handle, 4096, &mut rest).unwrap();
    got.extend(rest);
    assert_eq!(got, data);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        (s[0].status, s[0].opcode, s[0].byte_len),
        (WcStatus::Success, WcOpcode::Send, 1000)
    );
}

#[test]
fn segmentation_uses_first_middle_last_and_only_by_path_mtu() {
    let (mut a, b) = pair();
    a.dev
        .post_send(
            a.qp.handle,
            &[send(&a, 1, 0, 600), send(&a, 2, 0, 256), send(&a, 3, 0, 0)],
        )
        .unwrap();
    let mut ops = Vec::new();
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        assert_eq!(t.dst, b.dev.gid());
        assert!(t.packet.is_consistent());
        ops.push((
            t.packet.bth.opcode,
            t.packet.payload.len(),
            t.packet.bth.psn,
            t.packet.bth.ack_req,
        ));
    }
    use Opcode::*;
    assert_eq!(
        ops,
        vec![
            (RcSendFirst, 256, 0x10, false),
            (RcSendMiddle, 256, 0x11, false),
            (RcSendLast, 88, 0x12, true),
            (RcSendOnly, 256, 0x13, true),
            (RcSendOnly, 0, 0x14, true),
        ]
    );
}

#[test]
fn psn_wraps_at_24_bits() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| {
        at.sq_psn = 0xFF_FFFE;
        at.rq_psn = 0xFF_FFFE;
    });
    let data = pattern(1024, 9);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 1, 0, 2048)])
        .unwrap();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 1024), send(&a, 2, 0, 10)])
        .unwrap();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 2, 4096, 16)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let (q, _) = a.dev.query_qp(a.qp.handle).unwrap();
    assert_eq!(q.sq_psn, 3, "0xfffffe + 5 packets wraps to 3");
    let mut got = vec![0u8; 1024];
    b.dev.mr_read(b.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn rdma_write_is_byte_exact_and_consumes_no_receive() {
    let (mut a, mut b) = pair();
    let data = pattern(700, 1);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write(
                1,
                vec![a.mr.sge(0, 700)],
                b.mr.addr + 1000,
                b.mr.rkey,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        (s[0].status, s[0].opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut got = vec![0u8; 700];
    b.dev.mr_read(b.mr.handle, 1000, &mut got).unwrap();
    assert_eq!(got, data);
    assert!(poll(&mut b.dev, b.rcq).is_empty(), "no receive consumed");
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    let (mut a, mut b) = pair();
    let data = pattern(300, 2);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 5, 0, 0)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_write_with_imm(
                1,
                vec![a.mr.sge(0, 300)],
                b.mr.addr + 64,
                b.mr.rkey,
                77,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let r = poll(&mut b.dev, b.rcq);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm_data),
        (5, WcOpcode::RecvRdmaWithImm, 300, 77)
    );
    let mut got = vec![0u8; 300];
    b.dev.mr_read(b.mr.handle, 64, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn rdma_read_is_byte_exact_across_response_packets() {
    let (mut a, mut b) = pair();
    let data = pattern(900, 5);
    b.dev.mr_write(b.mr.handle, 2000, &data).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                SendWr::rdma_read(
                    1,
                    vec![a.mr.sge(0, 400), a.mr.sge(8192, 500)],
                    b.mr.addr + 2000,
                    b.mr.rkey,
                ),
                send(&a, 2, 0, 4),
            ],
        )
        .unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        statuses(&s),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!((s[0].opcode, s[0].byte_len), (WcOpcode::RdmaRead, 900));
    let mut got = vec![0u8; 400];
    a.dev.mr_read(a.mr.handle, 0, &mut got).unwrap();
    let mut rest = vec![0u8; 500];
    a.dev.mr_read(a.mr.handle, 8192, &mut rest).unwrap();
    got.extend(rest);
    assert_eq!(got, data);
}

#[test]
fn read_credits_limit_outstanding_reads_to_max_rd_atomic() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| at.max_rd_atomic = 1);
    let r = |id| SendWr::rdma_read(id, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey);
    a.dev.post_send(a.qp.handle, &[r(1), r(2), r(3)]).unwrap();
    let mut first = Vec::new();
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        first.push(t);
    }
    assert_eq!(first.len(), 1, "one READ in flight with max_rd_atomic 1");
    for t in first {
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    pump(&mut a, &mut b);
    assert_eq!(poll(&mut a.dev, a.scq).len(), 3);
}

#[test]
fn atomics_compare_swap_and_fetch_add_are_exact() {
    let (mut a, mut b) = pair();
    b.dev
        .mr_write(b.mr.handle, 64, &100u64.to_le_bytes())
        .unwrap();
    let cs_hit = SendWr::atomic_cmp_and_swp(1, a.mr.sge(0, 8), b.mr.addr + 64, b.mr.rkey, 100, 7);
    let cs_miss = SendWr::atomic_cmp_and_swp(2, a.mr.sge(8, 8), b.mr.addr + 64, b.mr.rkey, 100, 9);
    let fa = SendWr::atomic_fetch_and_add(3, a.mr.sge(16, 8), b.mr.addr + 64, b.mr.rkey, 5);
    a.dev
        .post_send(a.qp.handle, &[cs_hit, cs_miss, fa])
        .unwrap();
    pump(&mut a, &mut b);
    let s = poll(&mut a.dev, a.scq);
    assert_eq!(
        s.iter().map(|w| (w.status, w.opcode)).collect::<Vec<_>>(),
        vec![
            (WcStatus::Success, WcOpcode::CompSwap),
            (WcStatus::Success, WcOpcode::CompSwap),
            (WcStatus::Success, WcOpcode::FetchAdd)
        ]
    );
    let mut got = [0u8; 24];
    a.dev.mr_read(a.mr.handle, 0, &mut got).unwrap();
    let v = |i: usize| u64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!((v(0), v(1), v(2)), (100, 7, 7));
    let mut cell = [0u8; 8];
    b.dev.mr_read(b.mr.handle, 64, &mut cell).unwrap();
    assert_eq!(u64::from_le_bytes(cell), 12);
}

#[test]
fn bad_rkey_is_rem_access_err_and_both_qps_go_to_err() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 40, 0, 8)]).unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[
                send(&a, 1, 0, 8),
                SendWr::rdma_write(2, vec![a.mr.sge(0, 8)], b.mr.addr, b.mr.rkey ^ 0x1),
                send(&a, 3, 0, 8),
            ],
        )
        .unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 41, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::RemAccessErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(state(&a), QpState::Err);
    // rxe: class C error moves the responder to ERR too; its remaining receives flush.
    assert_eq!(state(&b), QpState::Err);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(40, WcStatus::Success), (41, WcStatus::WrFlushErr)]
    );
}

#[test]
fn out_of_bounds_or_missing_mr_access_is_rem_access_err() {
    for case in 0..3 {
        let (mut a, mut b) = pair();
        let ro = b.dev.reg_mr(b.pd, 64, AccessFlags::REMOTE_READ).unwrap();
        let wr = match case {
            0 => SendWr::rdma_write(
                1,
                vec![a.mr.sge(0, 16)],
                b.mr.addr + b.mr.length - 8,
                b.mr.rkey,
            ),
            1 => SendWr::rdma_write(1, vec![a.mr.sge(0, 16)], ro.addr, ro.rkey),
            _ => SendWr::atomic_fetch_and_add(1, a.mr.sge(0, 8), ro.addr, ro.rkey, 1),
        };
        a.dev.post_send(a.qp.handle, &[wr]).unwrap();
        pump(&mut a, &mut b);
        assert_eq!(
            statuses(&poll(&mut a.dev, a.scq)),
            vec![(1, WcStatus::RemAccessErr)],
            "case {case}"
        );
    }
}

#[test]
fn qp_without_remote_access_flag_naks_invalid_request() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |_| {});
    let attr = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    b.dev
        .modify_qp(b.qp.handle, &attr, QpAttrMask::ACCESS_FLAGS)
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[SendWr::rdma_read(
                1,
                vec![a.mr.sge(0, 8)],
                b.mr.addr,
                b.mr.rkey,
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RemInvReqErr)]
    );
    assert_eq!(state(&b), QpState::Err);
}

#[test]
fn receive_too_small_is_loc_len_err_and_requester_gets_rem_inv_req_err() {
    let (mut a, mut b) = pair();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 1, 0, 100), recv(&b, 2, 0, 100)])
        .unwrap();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 600), send(&a, 2, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn bad_receive_lkey_is_loc_prot_err_and_requester_gets_rem_op_err() {
    let (mut a, mut b) = pair();
    let mut r = recv(&b, 1, 0, 100);
    r.sg_list[0].lkey ^= 0x55;
    b.dev.post_recv(b.qp.handle, &[r]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 10)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(1, WcStatus::LocProtErr)]
    );
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RemOpErr)]
    );
}

#[test]
fn responder_in_err_drops_requests_without_ack() {
    let (mut a, mut b) = pair();
    b.dev
        .modify_qp(b.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    let moved = pump(&mut a, &mut b);
    assert_eq!(moved, 1, "the request went, nothing came back");
    assert_eq!(b.dev.counters().qp_not_ready, 1);
    assert!(poll(&mut a.dev, a.scq).is_empty());
}

#[test]
fn acks_are_coalesced() {
    let (mut a, mut b) = pair();
    let rs: Vec<_> = (0..5).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    let ss: Vec<_> = (0..5).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        b.dev.counters().acks_sent,
        1,
        "one ACK covers five messages"
    );
    assert_eq!(poll(&mut a.dev, a.scq).len(), 5);
}

/// b's receive CQ holds 2; a (timeout 1, retry_cnt 2) sends 3 messages in one burst.
fn overrun_pair() -> (Node, Node) {
    let mut a = node(1);
    let mut b = node_with(2, caps(8), 2, false);
    connect_with(&mut a, &mut b, |at| {
        at.timeout = 1;
        at.retry_cnt = 2;
    });
    let rs: Vec<_> = (0..5).map(|i| recv(&b, i, 0, 8)).collect();
    b.dev.post_recv(b.qp.handle, &rs).unwrap();
    (a, b)
}

#[test]
fn entry_to_err_by_cq_overrun_acks_what_was_completed_first() {
    let (mut a, mut b) = overrun_pair();
    let ss: Vec<_> = (0..3).map(|i| send(&a, i, 0, 8)).collect();
    a.dev.post_send(a.qp.handle, &ss).unwrap();
    run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(state(&b), QpState::Err, "the third receive overran");
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    assert_eq!(
        b.dev.counters().acks_sent,
        1,
        "one ACK covers messages 0 and 1"
    );
    // The message whose completion was lost is not acknowledged.
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::RetryExcErr)
        ]
    );
}

#[test]
fn entry_to_err_by_modify_qp_acks_what_was_completed_first() {
    let (mut a, mut b) = overrun_pair();
    a.dev
        .post_send(a.qp.handle, &[send(&a, 0, 0, 8), send(&a, 1, 0, 8)])
        .unwrap();
    // Deliver a's requests without letting b transmit.
    while let Some(t) = a.dev.poll_transmit(SimTime::ZERO) {
        b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    }
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    b.dev
        .modify_qp(b.qp.handle, &err_attr(), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(b.dev.counters().acks_sent, 1);
    run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    assert_eq!(state(&a), QpState::Rts);
}

#[test]
fn rnr_retry_zero_with_no_receive_is_rnr_retry_exc_err() {
    let mut a = node(1);
    let mut b = node(2);
    connect_with(&mut a, &mut b, |at| at.rnr_retry = 0);
    a.dev
        .post_send(a.qp.handle, &[send(&a, 1, 0, 8), send(&a, 2, 0, 8)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        state(&b),
        QpState::Rts,
        "RNR is not an error at the responder"
    );
}

#[test]
fn rnr_nak_backs_off_by_min_rnr_timer_then_retries() {
    let (mut a, mut b) = pair();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.dev.counters().rnr_naks_sent, 1);
    // min_rnr_timer 1 = 10 µs.
    assert_eq!(a.dev.poll_timeout(), Some(SimTime::from_micros(10)));
    b.dev.post_recv(b.qp.handle, &[recv(&b, 9, 0, 8)]).unwrap();
    let end = run(&mut a, &mut b, SimTime::ZERO);
    assert_eq!(end, SimTime::from_micros(10));
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(9, WcStatus::Success)]
    );
}

/// The deadline index follows every QP's timers: armed by a send, re-armed by the ACK's
/// arrival, gone with the QP. (`poll_timeout` also cross-checks against a scan in unit tests.)
#[test]
fn transport_timers_are_indexed_per_qp_and_leave_with_the_qp() {
    let (mut a, mut b) = pair();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    assert_eq!(a.dev.poll_timeout(), None, "nothing sent yet");
    let out = a.dev.poll_transmit(SimTime::ZERO);
    assert!(out.is_some());
    assert!(a.dev.poll_timeout().is_some(), "retransmit timer armed");
    a.dev.destroy_qp(a.qp.handle).unwrap();
    assert_eq!(a.dev.poll_timeout(), None);
    assert!(a.dev.poll_transmit(SimTime::ZERO).is_none());
    let _ = &mut b;
}

/// `take_entered_err` reports each QP that entered ERR once, whatever moved it there, and
/// forgets destroyed QPs.
#[test]
fn entered_err_reports_each_qp_once_and_forgets_destroyed_ones() {
    let (mut a, mut b) = pair();
    assert!(a.dev.take_entered_err().is_empty());
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    a.dev
        .modify_qp(a.qp.handle, &err, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(
        a.dev.take_entered_err().into_iter().collect::<Vec<_>>(),
        [a.qp.qp_num]
    );
    assert!(a.dev.take_entered_err().is_empty(), "taken");
    b.dev
        .modify_qp(b.qp.handle, &err, QpAttrMask::STATE)
        .unwrap();
    b.dev.destroy_qp(b.qp.handle).unwrap();
    assert!(
        b.dev.take_entered_err().is_empty(),
        "destroyed QPs are left out"
    );
}

// ---------------------------------------------------------------------------------------
// Bad packets

#[test]
fn bad_packets_are_counted_and_dropped() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    let t = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    let now = SimTime::ZERO;
    let mut p = t.packet.clone();
    p.reth = Some(Default::default());
    b.dev.handle_packet(now, a.dev.gid(), p);
    let mut p = t.packet.clone();
    p.bth.dest_qp = 0x77_7777;
    b.dev.handle_packet(now, a.dev.gid(), p);
    b.dev.handle_packet(now, gid(99), t.packet.clone());
    let mut p = t.packet.clone();
    p.bth.pkey = 0x1234;
    b.dev.handle_packet(now, a.dev.gid(), p);
    let c = b.dev.counters();
    assert_eq!(
        (c.malformed, c.unknown_qp, c.wrong_source, c.bad_pkey),
        (1, 1, 1, 1)
    );
    assert!(poll(&mut b.dev, b.rcq).is_empty());
    // The good one still works afterwards.
    b.dev.handle_packet(now, a.dev.gid(), t.packet);
    pump(&mut a, &mut b);
    assert_eq!(poll(&mut a.dev, a.scq).len(), 1);
}

#[test]
fn unexpected_and_duplicate_responses_are_ignored() {
    let (mut a, mut b) = pair();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 1, 0, 8)]).unwrap();
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    let req = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), req.packet);
    let ack = b.dev.poll_transmit(SimTime::ZERO).unwrap();
    assert!(matches!(
        ack.packet.aeth.unwrap().syndrome,
        AethKind::Ack(_)
    ));
    a.dev
        .handle_packet(SimTime::ZERO, b.dev.gid(), ack.packet.clone());
    a.dev.handle_packet(SimTime::ZERO, b.dev.gid(), ack.packet);
    assert_eq!(a.dev.counters().unexpected_responses, 1);
    assert_eq!(poll(&mut a.dev, a.scq).len(), 1);
}

#[test]
fn pump_drops_packets_for_other_gids() {
    let mut a = node(1);
    let mut b = node(2);
    let mut c = node(3);
    connect_with(&mut a, &mut c, |_| {});
    a.dev.post_send(a.qp.handle, &[send(&a, 1, 0, 8)]).unwrap();
    assert_eq!(pump_pair(&mut a.dev, &mut b.dev, SimTime::ZERO), 0);
}

// ---------------------------------------------------------------------------------------
// UD and the GSI endpoint

fn ud_node(last: u8, qkey: u32) -> Node {
    let mut n = node(last);
    n.dev.destroy_qp(n.qp.handle).unwrap();
    n.qp = n
        .dev
        .create_qp(
            n.pd,
            &QpInitAttr {
                send_cq: n.scq,
                recv_cq: n.rcq,
                cap: caps(8),
                qp_type: QpType::Ud,
                sq_sig_all: false,
            },
        )
        .unwrap();
    use QpAttrMask as M;
    let mut at = QpAttr {
        qp_state: QpState::Init,
        qkey,
        path_mtu: Mtu::Mtu1024,
        ..QpAttr::default()
    };
    n.dev
        .modify_qp(
            n.qp.handle,
            &at,
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
        )
        .unwrap();
    at.qp_state = QpState::Rtr;
    n.dev.modify_qp(n.qp.handle, &at, M::STATE).unwrap();
    at.qp_state = QpState::Rts;
    n.dev
        .modify_qp(n.qp.handle, &at, M::STATE | M::SQ_PSN)
        .unwrap();
    n
}

fn ud_send(n: &Node, id: u64, len: u32, to: &Node, qkey: u32) -> SendWr {
    let mut wr = send(n, id, 0, len);
    wr.ud = UdWr {
        ah: AhAttr {
            grh: GlobalRoute {
                dgid: to.dev.gid(),
                ..GlobalRoute::default()
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        },
        remote_qpn: to.qp.qp_num,
        remote_qkey: qkey,
    };
    wr
}

#[test]
fn ud_send_delivers_a_datagram_behind_a_grh_with_src_qp() {
    let mut a = ud_node(1, 0x1111);
    let mut b = ud_node(2, 0x2222);
    let data = pattern(100, 4);
    a.dev.mr_write(a.mr.handle, 0, &data).unwrap();
    b.dev
        .post_recv(b.qp.handle, &[recv(&b, 7, 0, 40 + 100)])
        .unwrap();
    a.dev
        .post_send(
            a.qp.handle,
            &[ud_send(&a, 1, 100, &b, 0x2222)
                .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut a.dev, a.scq)),
        vec![(1, WcStatus::Success)]
    );
    let r = poll(&mut b.dev, b.rcq);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (
            r[0].status,
            r[0].opcode,
            r[0].byte_len,
            r[0].src_qp,
            r[0].wc_flags
        ),
        (
            WcStatus::Success,
            WcOpcode::Recv,
            140,
            a.qp.qp_num,
            WcFlags::GRH
        )
    );
    let mut buf = vec![0u8; 140];
    b.dev.mr_read(b.mr.handle, 0, &mut buf).unwrap();
    assert_eq!(&buf[8..24], &a.dev.gid().0, "GRH SGID");
    assert_eq!(&buf[24..40], &b.dev.gid().0, "GRH DGID");
    assert_eq!(&buf[40..], &data[..]);
}

#[test]
fn ud_qkey_mismatch_and_missing_receive_drop_silently() {
    let mut a = ud_node(1, 0x1111);
    let mut b = ud_node(2, 0x2222);
    a.dev
        .post_send(a.qp.handle, &[ud_send(&a, 1, 8, &b, 0x3333)])
        .unwrap();
    b.dev.post_recv(b.qp.handle, &[recv(&b, 7, 0, 64)]).unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.dev.counters().qkey_mismatch, 1);
    // High-bit Q_Key: the sender's own Q_Key is used (0x1111 != 0x2222): dropped too.
    a.dev
        .post_send(a.qp.handle, &[ud_send(&a, 2, 8, &b, 0x8000_0000)])
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.dev.counters().qkey_mismatch, 2);
    a.dev
        .post_send(
            a.qp.handle,
            &[ud_send(&a, 3, 8, &b, 0x2222), ud_send(&a, 4, 8, &b, 0x2222)],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(
        statuses(&poll(&mut b.dev, b.rcq)),
        vec![(7, WcStatus::Success)]
    );
    assert_eq!(b.dev.counters().ud_no_recv, 1);
    assert_eq!(
        b.dev.query_qp(b.qp.handle).unwrap().0.qp_state,
        QpState::Rts
    );
    assert_eq!(
        poll(&mut a.dev, a.scq).len(),
        4,
        "UD sends complete once sent"
    );
}

#[test]
fn ud_message_longer_than_the_mtu_is_einval_at_post() {
    let a = ud_node(1, 1);
    let b = ud_node(2, 1);
    let mut a = a;
    let e = a
        .dev
        .post_send(a.qp.handle, &[ud_send(&a, 1, 1025, &b, 1)])
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    let rdma = SendWr::rdma_write(2, vec![a.mr.sge(0, 8)], 0, 0);
    assert_eq!(
        a.dev.post_send(a.qp.handle, &[rdma]).unwrap_err().errno(),
        Errno::EINVAL
    );
}

#[test]
fn gsi_endpoint_exchanges_datagrams_on_qp1() {
    use crate::{GSI_QKEY, GSI_QPN};
    let mut a = node(1);
    let mut b = node(2);
    let mad = bytes::Bytes::from(pattern(256, 1));
    a.dev.gsi_send(b.dev.gid(), GSI_QPN, mad.clone()).unwrap();
    let t = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    assert_eq!(t.packet.bth.opcode, Opcode::UdSendOnly);
    assert_eq!((t.packet.bth.dest_qp, t.packet.bth.pkey), (1, 0xFFFF));
    let deth = t.packet.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, 1));
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    let d = b.dev.gsi_recv().unwrap();
    assert_eq!((d.src, d.src_qp, d.payload), (a.dev.gid(), 1, mad));
    assert!(b.dev.gsi_recv().is_none());
    // QP1 is not reachable as a verbs QP.
    assert_eq!(
        b.dev.query_qp(QpHandle(1)).unwrap_err().errno,
        Errno::EINVAL
    );
    // Wrong Q_Key is dropped.
    let mut p = crate::rc::bare_packet(Opcode::UdSendOnly, 1, 0, bytes::Bytes::new());
    p.deth = Some(crate::roce::Deth { qkey: 5, src_qp: 1 });
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), p);
    assert_eq!(b.dev.counters().qkey_mismatch, 1);
    assert!(b.dev.gsi_recv().is_none());
    let big = bytes::Bytes::from(vec![0u8; 2048]);
    assert_eq!(
        a.dev.gsi_send(b.dev.gid(), 1, big).unwrap_err().errno,
        Errno::EINVAL
    );
}

#[test]
fn gsi_endpoint_trait_sends_256_byte_mads_to_qp1_and_refuses_other_sizes() {
    let mut a = node(1);
    let mut b = node(2);
    let mad = pattern(crate::MAD_SIZE, 3);
    GsiEndpoint::gsi_send(&mut a.dev, b.dev.gid(), &mad).unwrap();
    let t = a.dev.poll_transmit(SimTime::ZERO).unwrap();
    assert_eq!(t.packet.bth.dest_qp, crate::GSI_QPN);
    b.dev.handle_packet(SimTime::ZERO, a.dev.gid(), t.packet);
    let d = GsiEndpoint::gsi_recv(&mut b.dev).unwrap();
    assert_eq!(
        d,
        GsiDatagram {
            peer: a.dev.gid(),
            mad
        }
    );
    assert!(GsiEndpoint::gsi_recv(&mut b.dev).is_none());
    for len in [0, 255, 257] {
        let e = GsiEndpoint::gsi_send(&mut a.dev, b.dev.gid(), &vec![0; len]).unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL, "{len} bytes");
    }
    assert!(a.dev.poll_transmit(SimTime::ZERO).is_none());
}
