//! Posting: `post_send`/`post_recv` state, queue-depth, SGE, atomic and inline checks.

use super::*;

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
