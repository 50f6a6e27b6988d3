//! Argument checks of the C entry points, called in process through `rnic::calls` (the safe
//! layer the fuzz target `capi_calls` drives): the cases the fuzzer found where librnic
//! answered otherwise than rdma-core, each against what rdma-core does.
//!
//! One runtime for the test binary, in a closed world (every datagram dropped), as the fuzz
//! target runs it.

#![allow(clippy::expect_used)] // test helpers outside #[test] functions

use rnic::abi::*;
use rnic::calls::{
    self, BadWr, Calls, ConnParam, Kind, MrAddr, QpInit, QpRef, RecvWr, SendWr, SockAddr,
};
use rnic::config::Config;
use std::net::{Ipv4Addr, SocketAddr};
use verbs_core::QpCap;

const ENOMEM: i32 = 12;
const EBUSY: i32 = 16;
const EINVAL: i32 = 22;
const EOPNOTSUPP: i32 = 95;

/// The tests take turns: they compare process-wide object counts.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn own_ip() -> Ipv4Addr {
    let cfg = Config {
        drop_rate: 1.0,
        resolve_us: 0,
        seed: Some(1),
        ..Config::default()
    };
    let r = calls::start(cfg).expect("runtime");
    match r.addr().ip() {
        std::net::IpAddr::V4(ip) => ip,
        std::net::IpAddr::V6(ip) => panic!("IPv6 runtime address {ip}"),
    }
}

/// The slots of a CQ and an RC QP on it.
struct RcQp {
    cq: usize,
    qp: usize,
}

/// Opens a device and makes a PD, a CQ of `cqe` entries and an RC QP of `wr` WRs each way on
/// them (`sq_sig_all` as given).
fn rc_qp(c: &mut Calls, cqe: i32, wr: u32, sq_sig_all: i32) -> RcQp {
    let ctx = c.open_device(false).slot.expect("context");
    let pd = c.alloc_pd(ctx).and_then(|m| m.slot).expect("pd");
    let cq = c
        .create_cq(ctx, cqe, None)
        .and_then(|m| m.slot)
        .expect("cq");
    let init = QpInit {
        send_cq: Some(cq),
        recv_cq: Some(cq),
        cap: cap(wr),
        qp_type: IBV_QPT_RC,
        sq_sig_all,
    };
    let qp = c
        .create_qp(Some(pd), Some(&init))
        .and_then(|m| m.slot)
        .expect("qp");
    RcQp { cq, qp }
}

fn cap(wr: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// A zeroed `ibv_qp_attr` with `qp_state`.
fn attr(state: ibv_qp_state) -> ibv_qp_attr {
    let gid = ibv_gid { raw: [0; 16] };
    let ah = ibv_ah_attr {
        grh: ibv_global_route {
            dgid: gid,
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 0,
            traffic_class: 0,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 0,
        port_num: 0,
    };
    ibv_qp_attr {
        qp_state: state,
        cur_qp_state: 0,
        path_mtu: 0,
        path_mig_state: 0,
        qkey: 0,
        rq_psn: 0,
        sq_psn: 0,
        dest_qp_num: 0,
        qp_access_flags: 0,
        cap: ibv_qp_cap {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        },
        ah_attr: ah,
        alt_ah_attr: ah,
        pkey_index: 0,
        alt_pkey_index: 0,
        en_sqd_async_notify: 0,
        sq_draining: 0,
        max_rd_atomic: 0,
        max_dest_rd_atomic: 0,
        min_rnr_timer: 0,
        port_num: 1,
        timeout: 0,
        retry_cnt: 0,
        rnr_retry: 0,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    }
}

/// libibverbs's `ibv_cmd_modify_qp` refuses IBV_QP_RATE_LIMIT and up with EOPNOTSUPP, the
/// kernel the bits between DEST_QPN and it (`IB_QP_ATTR_STANDARD_BITS`); librnic said EINVAL.
/// A QP's access flags are never refused (the kernel and rxe store them as they are).
#[test]
fn modify_qp_mask_bits_past_dest_qpn_are_eopnotsupp_and_access_bits_are_taken() {
    let _turn = serial();
    own_ip();
    let mut c = Calls::new();
    let qp = rc_qp(&mut c, 4, 2, 0).qp;
    let a = attr(IBV_QPS_INIT);
    let to_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    for extra in [IBV_QP_RATE_LIMIT, 1 << 21, 1 << 24, 1 << 30, i32::MIN] {
        let r = c.modify_qp(Some(QpRef::Qp(qp)), Some(&a), to_init | extra);
        assert_eq!(r.map(|r| r.rc), Some(EOPNOTSUPP), "mask bit {extra:#x}");
    }
    // The standard bits stay the transition table's: an extra CAP bit is EINVAL.
    let r = c.modify_qp(Some(QpRef::Qp(qp)), Some(&a), to_init | IBV_QP_CAP);
    assert_eq!(r.map(|r| r.rc), Some(EINVAL));
    // Access bits the simulated device does not model (HUGETLB, the optional range) are
    // ignored, as providers ignore them; they were EINVAL.
    let mut b = a;
    b.qp_access_flags = 0xFF | IBV_ACCESS_RELAXED_ORDERING | 1 << 31;
    let r = c.modify_qp(Some(QpRef::Qp(qp)), Some(&b), to_init);
    assert_eq!(r.map(|r| r.rc), Some(0));
    assert!(c.teardown().is_empty());
}

/// The kernel's `ib_uverbs_reg_mr`: the iova must lie at the buffer's offset in its page;
/// librnic registered any iova.
#[test]
fn reg_mr_iova_at_another_page_offset_is_einval() {
    let _turn = serial();
    own_ip();
    let mut c = Calls::new();
    let ctx = c.open_device(false).slot.expect("context");
    let pd = c.alloc_pd(ctx).and_then(|m| m.slot).expect("pd");
    let base = c.arena_addr();
    assert_eq!(base % 4096, 0, "the arena is page aligned");
    let m = c
        .reg_mr(Some(pd), MrAddr::Arena(16), 100, Some(0x7000), 1)
        .expect("called");
    assert_eq!((m.slot, m.errno), (None, EINVAL));
    // Same offset, another page: registered.
    let m = c
        .reg_mr(Some(pd), MrAddr::Arena(16), 100, Some(0x7010), 1)
        .expect("called");
    assert!(m.slot.is_some(), "{m:?}");
    // NULL and zero length at an unaligned iova: no page offset in common, refused.
    let m = c
        .reg_mr(Some(pd), MrAddr::Null, 0, Some(0x10), 1)
        .expect("called");
    assert_eq!((m.slot, m.errno), (None, EINVAL));
    assert!(c.teardown().is_empty());
}

/// librdmacm's `rdma_create_qp_ex`: an id with a QP refuses another (EINVAL), as does a PD of
/// another context than `id->verbs`. librnic made the second QP's CQs first, leaking them
/// (and the first QP's) when the CM then refused it, and took any PD.
#[test]
fn rdma_create_qp_twice_or_with_a_foreign_pd_is_einval_and_leaks_nothing() {
    let _turn = serial();
    let ip = own_ip();
    let before = calls::counts().expect("runtime");
    let mut c = Calls::new();
    let id = c
        .create_id(Some(0), RDMA_PS_TCP, false)
        .and_then(|m| m.slot)
        .expect("id");
    let own = SockAddr::Ip(SocketAddr::new(ip.into(), 0));
    assert_eq!(c.bind_addr(Some(id), Some(&own)).map(|r| r.rc), Some(0));
    let init = QpInit {
        send_cq: None,
        recv_cq: None,
        cap: cap(4),
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    };
    let ctx = c.open_device(false).slot.expect("context");
    let foreign_pd = c.alloc_pd(ctx).and_then(|m| m.slot).expect("pd");
    let r = c.rdma_create_qp(Some(id), Some(foreign_pd), Some(&init));
    assert_eq!(
        r.map(|r| (r.rc, r.errno)),
        Some((-1, EINVAL)),
        "PD of another context"
    );
    let cm_ctx = c.cm_context();
    let pd = c.alloc_pd(cm_ctx).and_then(|m| m.slot).expect("pd");
    let r = c.rdma_create_qp(Some(id), Some(pd), Some(&init));
    assert_eq!(r.map(|r| r.rc), Some(0));
    let made = calls::counts().expect("runtime");
    let r = c.rdma_create_qp(Some(id), None, Some(&init));
    assert_eq!(r.map(|r| (r.rc, r.errno)), Some((-1, EINVAL)), "second QP");
    assert_eq!(calls::counts(), Some(made), "the refused call made nothing");
    assert!(c.id_info(id).is_some_and(|i| i.has_qp));
    c.rdma_destroy_qp(Some(id));
    assert!(c.live(Kind::Id).contains(&id));
    assert!(c.teardown().is_empty());
    assert_eq!(calls::counts(), Some(before));
}

/// librdmacm destroys the CQs it made for `rdma_create_qp` when the QP cannot be made
/// (`ucma_destroy_cqs`); librnic kept them, set in the id, so they leaked.
#[test]
fn rdma_create_qp_that_fails_destroys_the_cqs_it_made() {
    let _turn = serial();
    let ip = own_ip();
    let before = calls::counts().expect("runtime");
    let mut c = Calls::new();
    let id = c
        .create_id(Some(1), RDMA_PS_TCP, false)
        .and_then(|m| m.slot)
        .expect("id");
    let own = SockAddr::Ip(SocketAddr::new(ip.into(), 0));
    assert_eq!(c.bind_addr(Some(id), Some(&own)).map(|r| r.rc), Some(0));
    let mut init = QpInit {
        send_cq: None,
        recv_cq: None,
        cap: cap(4),
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    };
    // CQs it cannot make: ENOMEM, as librdmacm's `ucma_create_cqs` says (it was the CQ's
    // EINVAL).
    let cm_ctx = c.cm_context();
    let pd = c.alloc_pd(cm_ctx).and_then(|m| m.slot).expect("pd");
    let during = calls::counts();
    init.cap.max_send_wr = u32::MAX;
    let r = c.rdma_create_qp(Some(id), Some(pd), Some(&init));
    assert_eq!(r.map(|r| (r.rc, r.errno)), Some((-1, ENOMEM)));
    assert_eq!(calls::counts(), during, "no CQ left");
    init.cap.max_send_wr = 4;
    init.cap.max_send_sge = u32::MAX; // the QP is refused after its CQs were made
    let r = c.rdma_create_qp(Some(id), Some(pd), Some(&init));
    assert_eq!(r.map(|r| (r.rc, r.errno)), Some((-1, EINVAL)));
    assert_eq!(calls::counts(), during, "nothing left of the refused QP");
    // The id takes a QP after that, and gives everything back.
    init.cap.max_send_sge = 1;
    assert_eq!(
        c.rdma_create_qp(Some(id), Some(pd), Some(&init))
            .map(|r| r.rc),
        Some(0)
    );
    assert!(c.teardown().is_empty());
    assert_eq!(calls::counts(), Some(before));
}

/// ibv_post_send(3)/ibv_post_recv(3): every WR before `*bad_wr` is posted. librnic read the
/// whole list before posting any, so a WR it could not read (an unknown opcode, a negative
/// `num_sge`) named itself in `*bad_wr` while the WRs before it were not posted either; and
/// on a QP whose state refuses every post, it named that WR instead of the first.
#[test]
fn a_post_with_an_unreadable_wr_posts_the_ones_before_it() {
    let _turn = serial();
    own_ip();
    let mut c = Calls::new();
    let RcQp { cq, qp } = rc_qp(&mut c, 16, 4, 1);
    let q = Some(QpRef::Qp(qp));
    let mut a = attr(IBV_QPS_INIT);
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    let to_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    assert_eq!(c.modify_qp(q, Some(&a), to_init).map(|r| r.rc), Some(0));
    // In INIT no send is posted: the first WR is named, not the unreadable third.
    let send = |wr_id, opcode| SendWr {
        wr_id,
        opcode,
        ..SendWr::default()
    };
    let wrs = [send(1, IBV_WR_SEND), send(2, IBV_WR_SEND), send(3, 99)];
    assert_eq!(c.post_send(q, &wrs, true), Some((EINVAL, BadWr::Index(0))));
    // Receives: the first two are posted, the third (num_sge -1) is refused.
    let recv = |wr_id, num_sge| RecvWr {
        wr_id,
        sg_list: Some(Vec::new()),
        num_sge,
    };
    let wrs = [recv(10, 0), recv(11, 0), recv(12, -1), recv(13, 0)];
    assert_eq!(c.post_recv(q, &wrs, true), Some((EINVAL, BadWr::Index(2))));
    // To ERR: exactly the two posted receives are flushed.
    assert_eq!(
        c.modify_qp(q, Some(&attr(IBV_QPS_ERR)), IBV_QP_STATE)
            .map(|r| r.rc),
        Some(0)
    );
    let (n, wcs) = c.poll_cq(Some(cq), 8, false).expect("polled");
    let flushed: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        (n, flushed),
        (
            2,
            vec![(10, IBV_WC_WR_FLUSH_ERR), (11, IBV_WC_WR_FLUSH_ERR)]
        )
    );
    assert!(c.teardown().is_empty());
}

/// librdmacm's `ucma_addrlen` in `rdma_resolve_addr`: a given source address of no family it
/// knows is EINVAL (librnic ignored it). Its `ucma_valid_param`, run by `rdma_connect` and
/// `rdma_accept` before anything else: an RDMA_PS_TCP id without a QP needs parameters, and
/// responder resources or an initiator depth above the device's (other than 255, "the
/// maximum") are EINVAL (librnic connected with defaults, and took any value).
#[test]
fn rdma_resolve_addr_and_rdma_connect_check_their_arguments_as_librdmacm() {
    let _turn = serial();
    let ip = own_ip();
    let mut c = Calls::new();
    let ctx = c.open_device(false).slot.expect("context");
    let (_, dev) = c.query_device(ctx, false).expect("queried");
    let max_rr = dev.expect("attributes").max_qp_rd_atom as u8;
    let id = c
        .create_id(Some(0), RDMA_PS_TCP, false)
        .and_then(|m| m.slot)
        .expect("id");
    let peer = SockAddr::Ip(SocketAddr::new(ip.into(), 7471));
    // A source address of no family librdmacm knows: EINVAL (it was ignored).
    let r = c.resolve_addr(Some(id), Some(&SockAddr::Family(0)), Some(&peer), 100);
    assert_eq!(r.map(|r| (r.rc, r.errno)), Some((-1, EINVAL)));
    assert_eq!(
        c.resolve_addr(Some(id), None, Some(&peer), 100)
            .map(|r| r.rc),
        Some(0)
    );
    assert_eq!(c.resolve_route(Some(id), 100).map(|r| r.rc), Some(0));
    let einval = Some((-1, EINVAL));
    let rc = |r: Option<calls::Ret>| r.map(|r| (r.rc, r.errno));
    assert_eq!(
        rc(c.connect(Some(id), None)),
        einval,
        "no QP, no parameters"
    );
    assert_eq!(rc(c.accept(Some(id), None)), einval);
    let p = |rr: u8, depth: u8| ConnParam {
        responder_resources: rr,
        initiator_depth: depth,
        ..ConnParam::default()
    };
    assert_eq!(rc(c.connect(Some(id), Some(&p(max_rr + 1, 1)))), einval);
    assert_eq!(rc(c.connect(Some(id), Some(&p(1, max_rr + 1)))), einval);
    // 255 is "the device's maximum"; within the limits the id connects.
    assert_eq!(rc(c.connect(Some(id), Some(&p(255, 1)))), Some((0, 0)));
    assert!(c.teardown().is_empty());
}

/// librdmacm's `rdma_create_qp` makes a CQ only for a direction the application gave none;
/// librnic replaced both when one was NULL, so the application's CQ got no completions (and
/// could be destroyed under the QP).
#[test]
fn rdma_create_qp_keeps_the_cq_it_was_given() {
    let _turn = serial();
    let ip = own_ip();
    let mut c = Calls::new();
    let id = c
        .create_id(Some(0), RDMA_PS_TCP, false)
        .and_then(|m| m.slot)
        .expect("id");
    let own = SockAddr::Ip(SocketAddr::new(ip.into(), 0));
    assert_eq!(c.bind_addr(Some(id), Some(&own)).map(|r| r.rc), Some(0));
    let cm_ctx = c.cm_context();
    let cq = c
        .create_cq(cm_ctx, 8, None)
        .and_then(|m| m.slot)
        .expect("cq");
    let init = QpInit {
        send_cq: None,
        recv_cq: Some(cq),
        cap: cap(4),
        qp_type: IBV_QPT_RC,
        sq_sig_all: 0,
    };
    assert_eq!(
        c.rdma_create_qp(Some(id), None, Some(&init)).map(|r| r.rc),
        Some(0)
    );
    assert_eq!(
        c.destroy_cq(Some(cq)).map(|r| r.rc),
        Some(EBUSY),
        "the QP's receive CQ"
    );
    // A receive, flushed when the QP goes to ERR, completes on it.
    let wr = RecvWr {
        wr_id: 7,
        sg_list: Some(Vec::new()),
        num_sge: 0,
    };
    assert_eq!(
        c.post_recv(Some(QpRef::Id(id)), &[wr], true),
        Some((0, BadWr::Untouched))
    );
    let to_err = c.modify_qp(Some(QpRef::Id(id)), Some(&attr(IBV_QPS_ERR)), IBV_QP_STATE);
    assert_eq!(to_err.map(|r| r.rc), Some(0));
    let (n, wcs) = c.poll_cq(Some(cq), 4, false).expect("polled");
    assert_eq!((n, wcs.first().map(|w| w.wr_id)), (1, Some(7)));
    c.rdma_destroy_qp(Some(id));
    assert_eq!(c.destroy_cq(Some(cq)).map(|r| r.rc), Some(0));
    assert!(c.teardown().is_empty());
}
