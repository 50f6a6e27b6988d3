//! QPs and address handles: create/modify/query/destroy, and the posting calls
//! `<infiniband/verbs.h>` inlines through `context->ops` (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv`). Return conventions as in [`super::verbs`].

use super::memory::post_send_with_inline;
use super::objects::{leak, registry, AhBox, QpBox};
use super::raw::gid_from_c;
use super::{destroy_boxed, errno_of, fail_null, guard, rt};
use crate::abi::convert::*;
use crate::abi::*;
use libc::c_int;
use std::ptr::null_mut;
use verbs_core::{
    AtomicWr, CqHandle, Device, PdHandle, Qp, QpHandle, QpInitAttr, RdmaWr, RecvWr, SendFlags,
    SendWr, Sge, SrqHandle, UdWr, WrOpcode,
};

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    guard("ibv_create_qp", null_mut(), || {
        if pd.is_null() || attr.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: `attr` is a readable and writable `struct ibv_qp_init_attr`
        // (ibv_create_qp(3): the granted caps are written back).
        let a = unsafe { &mut *attr };
        match create_qp(pd, a) {
            Ok(qp) => {
                granted_cap(qp, &mut a.cap);
                qp
            }
            Err(e) => fail_null(e),
        }
    })
}

/// Creates a QP of `pd` as `ibv_create_qp` does; also the body of `rdma_create_qp`.
pub(super) fn create_qp(pd: *mut ibv_pd, a: &ibv_qp_init_attr) -> Result<*mut ibv_qp, i32> {
    let r = rt()?;
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        return Err(libc::EINVAL);
    }
    match a.qp_type {
        IBV_QPT_UC => {
            return Err(super::unsupported(
                "ibv_create_qp of a UC QP (IBV_QPT_UC; the simulated device has RC and UD)",
            ))
        }
        IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => {
            return Err(super::unsupported(
                "ibv_create_qp of an XRC QP (IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV)",
            ))
        }
        _ => {}
    }
    let qp_type = qp_type_from_c(a.qp_type).map_err(|e| errno_of(&e))?;
    // SAFETY: `pd` and both CQs came from this library and are live.
    let (context, pdh, scq, rcq) = unsafe {
        (
            (*pd).context,
            PdHandle((*pd).handle),
            CqHandle((*a.send_cq).handle),
            CqHandle((*a.recv_cq).handle),
        )
    };
    // A QP on an SRQ (`init_attr->srq`, a live SRQ of this library or NULL).
    // SAFETY: as above.
    let srq = (!a.srq.is_null()).then(|| SrqHandle(unsafe { (*a.srq).handle }));
    let mut init = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        cap: cap_from_c(&a.cap),
        qp_type,
        sq_sig_all: a.sq_sig_all != 0,
        srq,
    };
    let qp = r
        .with(|n, _| {
            let cfg = n.device().config();
            rxe_send_caps(&mut init.cap, cfg.max_sge, cfg.max_inline_data);
            n.dev().create_qp(pdh, &init)
        })
        .map_err(|e| errno_of(&e))?;
    let mut granted = *a;
    granted.cap = cap_to_c(&init.cap);
    Ok(leak_qp(context, pd, &granted, qp))
}

/// The send queue's limits as rxe grants them (`rxe_qp_init_req`): a send WQE holds
/// max(16 × `max_send_sge`, `max_inline_data`) bytes (16: `sizeof(struct ib_sge)`), and both
/// limits grow to fill it — a QP asked for one SGE can send 16 bytes inline (rdma_xclient
/// does), one asked for 64 inline bytes takes 4 SGEs — up to the device's maxima (rxe lets
/// `max_inline_data` pass its maximum there; this device does not). Requests past the maxima
/// are left for the device to refuse (`EINVAL`).
fn rxe_send_caps(cap: &mut verbs_core::QpCap, max_sge: u32, max_inline: u32) {
    if cap.max_send_sge > max_sge || cap.max_inline_data > max_inline {
        return;
    }
    let wqe = cap.max_send_sge.saturating_mul(16).max(cap.max_inline_data);
    cap.max_inline_data = wqe.min(max_inline);
    cap.max_send_sge = (wqe / 16).min(max_sge).max(cap.max_send_sge);
}

/// Writes the send limits granted to `qp` (a QP of this library) into `cap`, as
/// `ibv_create_qp` and `rdma_create_qp` report them.
pub(super) fn granted_cap(qp: *mut ibv_qp, cap: &mut ibv_qp_cap) {
    // SAFETY: every QP of this library is a live `QpBox` (the caller just made it).
    let b = unsafe { &*qp.cast::<QpBox>() };
    cap.max_send_sge = b.max_send_sge;
    cap.max_inline_data = b.max_inline_data;
}

/// The `struct ibv_qp` of a created QP (the first member of its [`QpBox`]), registered under
/// its number (async events name it).
pub(super) fn leak_qp(
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    a: &ibv_qp_init_attr,
    qp: Qp,
) -> *mut ibv_qp {
    let base = ibv_qp {
        context,
        qp_context: a.qp_context,
        pd,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        handle: qp.handle.0,
        qp_num: qp.qp_num,
        state: IBV_QPS_RESET,
        qp_type: a.qp_type,
        // SAFETY: all-zero is the static initializer of both on glibc.
        mutex: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        cond: unsafe { std::mem::zeroed() },
        events_completed: 0,
    };
    let p = leak(QpBox::new(base, &a.cap)).cast::<ibv_qp>();
    registry().qps.insert(qp.qp_num, p as usize);
    p
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    guard("ibv_modify_qp", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null() || attr.is_null()) else {
            return libc::EINVAL;
        };
        // Mask bits past IBV_QP_DEST_QPN are EOPNOTSUPP: libibverbs's `ibv_cmd_modify_qp`
        // refuses IBV_QP_RATE_LIMIT and up (they need the extended command), the kernel the
        // bits between (`IB_QP_ATTR_STANDARD_BITS`).
        if attr_mask as u32 & !((IBV_QP_DEST_QPN as u32) << 1).wrapping_sub(1) != 0 {
            return libc::EOPNOTSUPP;
        }
        // SAFETY: `attr` is a readable `struct ibv_qp_attr` (ibv_modify_qp(3)).
        let c = unsafe { &*attr };
        let (a, m) = match qp_attr_from_c(c, attr_mask as u32, gid_from_c(&c.ah_attr.grh.dgid)) {
            Ok(v) => v,
            Err(e) => return errno_of(&e),
        };
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        match r.with(|n, _| n.dev().modify_qp(h, &a, m)) {
            Ok(()) => {
                if m.contains(verbs_core::QpAttrMask::STATE) {
                    // SAFETY: as above (libibverbs keeps `qp->state` in step the same way).
                    unsafe { (*qp).state = a.qp_state as _ };
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("ibv_query_qp", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null() || attr.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        match r.with(|n, _| n.device().query_qp(h)) {
            Ok((a, init)) => {
                // SAFETY: `attr` (and a non-NULL `init_attr`) are writable (ibv_query_qp(3));
                // `qp`'s pointers are the ones it was created with.
                unsafe {
                    *attr = qp_attr_to_c(&a);
                    (*qp).state = a.qp_state as _;
                    if !init_attr.is_null() {
                        *init_attr = ibv_qp_init_attr {
                            qp_context: (*qp).qp_context,
                            send_cq: (*qp).send_cq,
                            recv_cq: (*qp).recv_cq,
                            srq: (*qp).srq,
                            cap: cap_to_c(&init.cap),
                            qp_type: (*qp).qp_type,
                            sq_sig_all: c_int::from(init.sq_sig_all),
                        };
                    }
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard("ibv_destroy_qp", libc::EIO, || {
        // SAFETY: `qp` is NULL or came from `ibv_create_qp` (ibv_destroy_qp(3)): a live QP.
        let qpn = (!qp.is_null()).then(|| unsafe { (*qp).qp_num });
        // The registry forgets the QP before its box is freed (an async event of it that is
        // still queued is then skipped).
        let destroy = |d: &mut rnic_sim::SimDevice, h| {
            d.destroy_qp(QpHandle(h))?;
            if let Some(n) = qpn {
                registry().qps.remove(&n);
            }
            Ok(())
        };
        // SAFETY: as above; every QP is a `QpBox`.
        unsafe { destroy_boxed(qp.cast::<QpBox>(), |q| q.c.qp_base.handle, destroy) }
    })
}

/// What a post may read of a WR list, from the queue's capacities: checked before the list
/// is read, so that a count the application got wrong (`num_sge` = 2^30, a list longer than
/// the queue, a cycle) is an error and not a read of whatever memory follows.
#[derive(Debug, Clone, Copy)]
pub(super) struct PostLimits {
    /// WRs the queue holds at most (`max_send_wr`, `max_recv_wr`, the SRQ's `max_wr`).
    pub wrs: u32,
    /// SGEs per WR at most (`max_send_sge`, `max_recv_sge`, the SRQ's `max_sge`).
    pub sges: u32,
    /// Inline bytes per WR at most (`max_inline_data`; 0 for receive queues).
    pub inline: u32,
}

impl PostLimits {
    /// A QP's send queue.
    fn send(cap: &verbs_core::QpCap) -> Self {
        PostLimits {
            wrs: cap.max_send_wr,
            sges: cap.max_send_sge,
            inline: cap.max_inline_data,
        }
    }

    /// A QP's receive queue.
    fn recv(cap: &verbs_core::QpCap) -> Self {
        PostLimits {
            wrs: cap.max_recv_wr,
            sges: cap.max_recv_sge,
            inline: 0,
        }
    }
}

/// The SGEs of a WR, at most `max` of them. `num_sge` above `max` is `EINVAL` before the list
/// is read — rxe's errno (`validate_send_wr`, `post_one_recv` in rdma-core's providers/rxe:
/// "num_sge > max_sge" → EINVAL), though rxe itself sums the send list's lengths first; mlx5
/// checks first too, with ENOMEM (`mlx5_post_send`: `num_sge > qp->sq.max_gs`).
///
/// # Safety
/// `sg_list` points to `num_sge` readable `struct ibv_sge` (or `num_sge` is 0) when
/// `num_sge <= max`.
unsafe fn sges(sg_list: *const ibv_sge, num_sge: c_int, max: u32) -> Result<Vec<Sge>, i32> {
    let n = usize::try_from(num_sge).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if n > max as usize {
        return Err(libc::EINVAL);
    }
    if sg_list.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(sg_list, n) };
    Ok(s.iter()
        .map(|g| Sge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        })
        .collect())
}

/// One `struct ibv_send_wr` as a [`SendWr`], its SGE count and inline length checked against
/// `lim` first (EINVAL as rxe's `validate_send_wr`: `num_sge > max_sge`, inline length
/// `> max_inline`; the inline bytes themselves are read by the device only after that).
///
/// # Safety
/// `w` is a readable WR whose `sg_list` and (on a UD QP, `ud`) `wr.ud.ah` are valid.
unsafe fn send_wr(w: &ibv_send_wr, ud: bool, lim: &PostLimits) -> Result<SendWr, i32> {
    let opcode = u8::try_from(w.opcode)
        .ok()
        .and_then(WrOpcode::from_raw)
        .ok_or(libc::EINVAL)?;
    // SAFETY: the caller's contract.
    let sg_list = unsafe { sges(w.sg_list, w.num_sge, lim.sges)? };
    let send_flags = SendFlags::from_bits_truncate(w.send_flags);
    if send_flags.contains(SendFlags::INLINE)
        && sg_list.iter().map(|s| u64::from(s.length)).sum::<u64>() > u64::from(lim.inline)
    {
        return Err(libc::EINVAL);
    }
    let mut wr = SendWr::send(w.wr_id, sg_list);
    wr.opcode = opcode;
    wr.send_flags = send_flags;
    // SAFETY: the immediate union is two u32 views of the same 4 bytes.
    wr.imm_data = unsafe { w.ex.imm_data };
    // SAFETY: `wr` is a union of plain-data structs; the opcode says which one the
    // application filled, and each read below is of that one (an unused view reads
    // whatever bytes are there, all valid integers or a pointer not dereferenced).
    unsafe {
        match opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                wr.rdma = RdmaWr {
                    remote_addr: w.wr.rdma.remote_addr,
                    rkey: w.wr.rdma.rkey,
                };
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                wr.atomic = AtomicWr {
                    remote_addr: w.wr.atomic.remote_addr,
                    compare_add: w.wr.atomic.compare_add,
                    swap: w.wr.atomic.swap,
                    rkey: w.wr.atomic.rkey,
                };
            }
            // Only a UD QP's SEND carries an address handle; an RC SEND leaves `wr` as it was.
            WrOpcode::Send | WrOpcode::SendWithImm if ud => {
                let ah = w.wr.ud.ah;
                if !ah.is_null() {
                    wr.ud = UdWr {
                        ah: (*ah.cast::<AhBox>()).attr,
                        remote_qpn: w.wr.ud.remote_qpn,
                        remote_qkey: w.wr.ud.remote_qkey,
                    };
                }
            }
            WrOpcode::Send | WrOpcode::SendWithImm => {}
        }
    }
    Ok(wr)
}

/// `context->ops.post_send` (`ibv_post_send` is inline in verbs.h).
pub(super) unsafe extern "C" fn rnic_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard("ibv_post_send", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live QP of this library.
        let ud = unsafe { (*qp).qp_type } == IBV_QPT_UD;
        // SAFETY: a live QP of this library, whose PD is live.
        let (h, pd) = unsafe { (QpHandle((*qp).handle), PdHandle((*(*qp).pd).handle)) };
        // The list is read under the node lock, after the QP's capacities are known.
        r.with_send(|n, _| {
            let lim = match n.device().query_qp(h) {
                Ok((_, init)) => PostLimits::send(&init.cap),
                Err(e) => return set_bad(bad_wr, wr, errno_of(&e)),
            };
            // SAFETY: `wr` is a NULL-terminated list of readable WRs, with their SGEs and
            // AHs (ibv_post_send(3)).
            let (ptrs, wrs, refused) =
                unsafe { read_list(wr, &lim, |w: &ibv_send_wr| (w.next, send_wr(w, ud, &lim))) };
            post_prefix(bad_wr, wr, &ptrs, refused, || {
                // SAFETY: ibv_post_send(3): inline SGEs are readable during the post.
                unsafe { post_send_with_inline(n.dev(), pd, h, &wrs) }
            })
        })
    })
}

/// The end of a post: the WRs before the first one that could not be read (`refused`) are
/// posted (`post`), as ibv_post_send(3) says of every WR before `*bad_wr`; then `*bad_wr` is
/// the first WR the device refused, or else the unreadable one.
pub(super) fn post_prefix<T>(
    bad_wr: *mut *mut T,
    first: *mut T,
    ptrs: &[*mut T],
    refused: Option<(*mut T, i32)>,
    post: impl FnOnce() -> Result<(), verbs_core::PostError>,
) -> c_int {
    if refused.is_none() || !ptrs.is_empty() {
        if let Err(pe) = post() {
            return set_bad(
                bad_wr,
                ptrs.get(pe.bad_wr).copied().unwrap_or(first),
                errno_of(&pe.error),
            );
        }
    }
    match refused {
        Some((p, e)) => set_bad(bad_wr, p, e),
        None => 0,
    }
}

/// Stores the failing WR in `*bad_wr` (when given) and returns `e`.
pub(super) fn set_bad<T>(bad_wr: *mut *mut T, wr: *mut T, e: i32) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: `bad_wr` is a writable out-parameter (ibv_post_send(3)).
        unsafe { *bad_wr = wr };
    }
    e
}

/// `context->ops.post_recv` (`ibv_post_recv` is inline in verbs.h).
pub(super) unsafe extern "C" fn rnic_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("ibv_post_recv", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        r.with_local(|n, _| {
            let lim = match n.device().query_qp(h) {
                // A QP on an SRQ takes no receives (rxe: EINVAL), whatever the list holds.
                Ok((_, init)) if init.srq.is_some() && !wr.is_null() => {
                    return set_bad(bad_wr, wr, libc::EINVAL)
                }
                Ok((_, init)) => PostLimits::recv(&init.cap),
                Err(e) => return set_bad(bad_wr, wr, errno_of(&e)),
            };
            // SAFETY: `wr` is a NULL-terminated list of readable WRs (ibv_post_recv(3)).
            let (ptrs, wrs, refused) = unsafe { read_recv_wrs(wr, &lim) };
            post_prefix(bad_wr, wr, &ptrs, refused, || n.dev().post_recv(h, &wrs))
        })
    })
}

/// Reads the WR list at `first` with `one` (a WR's `next` and its conversion), within `lim`:
/// up to the first WR that cannot be converted (returned with its errno), and never more than
/// the queue holds — a WR past `lim.wrs` is refused with `ENOMEM` (a full queue, rxe's errno)
/// without being read, so a list that is too long, or a cycle, ends there.
///
/// # Safety
/// `first` is NULL or a NULL-terminated list of readable WRs of type `T`; `one` may read
/// what its WR points to as the WR's man page allows.
unsafe fn read_list<T, W>(
    first: *mut T,
    lim: &PostLimits,
    one: impl Fn(&T) -> (*mut T, Result<W, i32>),
) -> (Vec<*mut T>, Vec<W>, Option<(*mut T, i32)>) {
    let mut ptrs = Vec::new();
    let mut wrs = Vec::new();
    let mut p = first;
    while !p.is_null() {
        if wrs.len() >= lim.wrs as usize {
            return (ptrs, wrs, Some((p, libc::ENOMEM)));
        }
        // SAFETY: the caller's contract.
        let (next, w) = one(unsafe { &*p });
        match w {
            Ok(w) => wrs.push(w),
            Err(e) => return (ptrs, wrs, Some((p, e))),
        }
        ptrs.push(p);
        p = next;
    }
    (ptrs, wrs, None)
}

/// The receive WRs of the list at `wr`, within `lim` ([`read_list`]), and their C pointers.
///
/// # Safety
/// `wr` is NULL or a NULL-terminated list of readable `struct ibv_recv_wr` whose `sg_list`s
/// hold `num_sge` readable SGEs (ibv_post_recv(3), ibv_post_srq_recv(3)).
pub(super) unsafe fn read_recv_wrs(wr: *mut ibv_recv_wr, lim: &PostLimits) -> RecvList {
    let one = |w: &ibv_recv_wr| {
        // SAFETY: the caller's contract for its SGEs (read only within `lim.sges`).
        let sg = unsafe { sges(w.sg_list, w.num_sge, lim.sges) };
        (
            w.next,
            sg.map(|sg_list| RecvWr {
                wr_id: w.wr_id,
                sg_list,
            }),
        )
    };
    // SAFETY: the caller's contract.
    unsafe { read_list(wr, lim, one) }
}

/// What [`read_recv_wrs`] returns: the C pointers of the WRs read, the WRs, and the first
/// unreadable one with its errno.
pub(super) type RecvList = (
    Vec<*mut ibv_recv_wr>,
    Vec<RecvWr>,
    Option<(*mut ibv_recv_wr, i32)>,
);

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard("ibv_create_ah", null_mut(), || {
        if pd.is_null() || attr.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: `pd` is live; `attr` is a readable `struct ibv_ah_attr`.
        let b = unsafe { AhBox::new(pd, (*pd).context, &*attr) };
        if !b.attr.is_global {
            return fail_null(libc::EINVAL); // RoCE: an address vector needs a GRH
        }
        leak(b).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_destroy_ah", libc::EIO, || {
        if ah.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: `ah` came from `ibv_create_ah` (an `AhBox`); freed once.
        drop(unsafe { Box::from_raw(ah.cast::<AhBox>()) });
        0
    })
}
