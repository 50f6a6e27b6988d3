//! librdmacm's QP calls on an id: `rdma_create_qp` (with the CQs librdmacm makes when given
//! none), `rdma_create_qp_ex`, `rdma_destroy_qp`. Return convention: 0, or -1 with `errno`.

use super::cm_id::idbox;
use super::objects::IdBox;
use super::qp::create_qp;
use super::verbs::cm_pd;
use super::{errno_of, fail, guard, rt, unsupported};
use crate::abi::*;
use cm_core::engine::QpAction;
use libc::c_int;
use std::ptr::null_mut;
use verbs_core::AccessFlags;

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("rdma_create_qp", -1, || {
        // SAFETY: the caller's arguments, passed on.
        unsafe { create_qp_on_id(id, pd, qp_init_attr, false) }
    })
}

/// `rdma_create_qp`'s body; `block_self` is `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`
/// (`rdma_create_qp_ex`).
///
/// # Safety
/// As `rdma_create_qp`.
unsafe fn create_qp_on_id(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
    block_self: bool,
) -> c_int {
    {
        let (Ok(r), false) = (rt(), id.is_null() || qp_init_attr.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is an id of this library; `qp_init_attr` is readable and writable
        // (rdma_create_qp(3): the granted caps are written back).
        let (b, attr) = unsafe { (idbox(id), &mut *qp_init_attr) };
        // librdmacm `rdma_create_qp_ex`: an id has one QP, and a PD must be of the id's
        // context. Checked before anything is made (CQs made for a second QP would replace
        // the first's in the id and leak).
        if b.c.verbs.is_null() || !b.c.qp.is_null() {
            return fail(libc::EINVAL); // not bound to a device yet, or has a QP
        }
        // `pd ? pd : id->pd` (librdmacm `rdma_create_qp`); a NULL `id->pd` stands for the
        // device's PD, which librdmacm's bound id always has (`ucma_get_device`).
        let pd = if !pd.is_null() {
            pd
        } else if !b.c.pd.is_null() {
            b.c.pd
        } else {
            match cm_pd() {
                Ok(p) => p,
                Err(e) => return fail(e),
            }
        };
        // SAFETY: `pd` came from `ibv_alloc_pd` and is live.
        if unsafe { (*pd).context } != b.c.verbs {
            return fail(libc::EINVAL);
        }
        let mut a = *attr;
        // The id's SRQ (`rdma_create_srq`) unless the attributes name one: librdmacm
        // `rdma_create_qp_ex`, `if (id->srq && !attr->srq) attr->srq = id->srq`.
        if a.srq.is_null() {
            a.srq = b.c.srq;
        }
        if a.send_cq.is_null() || a.recv_cq.is_null() {
            match create_id_cqs(b, &a) {
                Ok((s, rc)) => {
                    a.send_cq = s;
                    a.recv_cq = rc;
                }
                // librdmacm's `ucma_create_cqs` reports any failure as ENOMEM.
                Err(_) => return fail(libc::ENOMEM),
            }
        }
        // Make the QP, then let the CM move it to INIT and own it (librdmacm
        // `rdma_create_qp_ex` → `ucma_init_conn_qp`; a UD id's to RTS with the id's Q_Key,
        // `ucma_init_ud_qp`). On an error the CQs made for it go (librdmacm's
        // `ucma_destroy_cqs`).
        let qp = match create_qp(pd, &a) {
            Ok(qp) => qp,
            Err(e) => {
                destroy_id_cqs(b);
                return fail(e);
            }
        };
        // SAFETY: `qp` was just made by this library.
        let (qh, qpn) = unsafe { ((*qp).handle, (*qp).qp_num) };
        let handle = verbs_core::Qp {
            handle: verbs_core::QpHandle(qh),
            qp_num: qpn,
        };
        let h = b.handle;
        let ud = b.c.qp_type == IBV_QPT_UD;
        let res = r.with(|n, _| {
            let (cm, dev) = n.split();
            cm.attach_qp(h, handle)?;
            let moved = if ud {
                cm.init_ud_qp(dev, h, handle)
            } else {
                let (attr, mask) = QpAction::init(AccessFlags::empty()).attr_mask();
                verbs_core::Device::modify_qp(dev, handle.handle, &attr, mask)
            };
            let moved =
                moved.and_then(|()| dev.set_block_self_multicast(handle.handle, block_self));
            moved.inspect_err(|_| {
                let _ = cm.detach_qp(h);
            })
        });
        if let Err(e) = res {
            // SAFETY: `qp` is ours and unused.
            unsafe { super::qp::ibv_destroy_qp(qp) };
            destroy_id_cqs(b);
            return fail(errno_of(&e));
        }
        // SAFETY: `qp` is live.
        unsafe { (*qp).state = if ud { IBV_QPS_RTS } else { IBV_QPS_INIT } };
        b.c.qp = qp;
        b.c.pd = pd;
        super::qp::granted_cap(qp, &mut attr.cap);
        attr.send_cq = a.send_cq;
        attr.recv_cq = a.recv_cq;
        attr.srq = a.srq;
        0
    }
}

/// The CQs (and their completion channels) librdmacm makes when `rdma_create_qp` is given
/// none (`ucma_create_cqs`): one pair for each direction whose CQ is NULL, sized by its WR
/// count; a CQ the application gave is the QP's. Returns the QP's (send, receive) CQs.
fn create_id_cqs(b: &mut IdBox, a: &ibv_qp_init_attr) -> Result<(*mut ibv_cq, *mut ibv_cq), i32> {
    let ctx = b.c.verbs;
    let make = |entries: u32| -> Result<(*mut ibv_comp_channel, *mut ibv_cq), i32> {
        // SAFETY: `ctx` is the id's live context.
        let ch = unsafe { super::cq::ibv_create_comp_channel(ctx) };
        if ch.is_null() {
            return Err(nix::errno::Errno::last_raw());
        }
        // SAFETY: as above; `ch` was just made.
        let cq =
            unsafe { super::cq::ibv_create_cq(ctx, entries.max(1) as c_int, null_mut(), ch, 0) };
        if cq.is_null() {
            let e = nix::errno::Errno::last_raw();
            // SAFETY: `ch` is ours and has no CQ.
            unsafe { super::cq::ibv_destroy_comp_channel(ch) };
            return Err(e);
        }
        Ok((ch, cq))
    };
    let recv = if a.recv_cq.is_null() {
        Some(make(a.cap.max_recv_wr)?)
    } else {
        None
    };
    let send = if a.send_cq.is_null() {
        match make(a.cap.max_send_wr) {
            Ok(p) => Some(p),
            Err(e) => {
                if let Some((rch, rcq)) = recv {
                    // SAFETY: the receive pair was just made and nothing uses it.
                    unsafe {
                        super::cq::ibv_destroy_cq(rcq);
                        super::cq::ibv_destroy_comp_channel(rch);
                    }
                }
                return Err(e);
            }
        }
    } else {
        None
    };
    if let Some((rch, rcq)) = recv {
        b.c.recv_cq_channel = rch;
        b.c.recv_cq = rcq;
    }
    if let Some((sch, scq)) = send {
        b.c.send_cq_channel = sch;
        b.c.send_cq = scq;
    }
    b.own_cqs = true;
    Ok((
        send.map_or(a.send_cq, |p| p.1),
        recv.map_or(a.recv_cq, |p| p.1),
    ))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard("rdma_create_qp_ex", -1, || {
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `attr` is a readable `ibv_qp_init_attr_ex` (rdma_create_qp_ex(3)).
        let a = unsafe { &mut *attr };
        let known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        let flags = if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
            a.create_flags
        } else {
            0
        };
        // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (mckey -l) is the one creation flag honoured.
        if a.comp_mask & !known != 0 || flags & !IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0 {
            return fail(unsupported("rdma_create_qp_ex with extended attributes"));
        }
        let mut plain = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            null_mut()
        };
        let block_self = flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0;
        // SAFETY: forwarding the caller's pointers.
        let r = unsafe { create_qp_on_id(id, pd, &mut plain, block_self) };
        a.send_cq = plain.send_cq;
        a.recv_cq = plain.recv_cq;
        a.srq = plain.srq;
        if r == 0 {
            // librdmacm sets `attr->pd` to the PD used (`id->pd` when none was given).
            // SAFETY: `id` is live and has its QP's PD now.
            a.pd = unsafe { (*id).pd };
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard("rdma_destroy_qp", (), || {
        let (Ok(r), false) = (rt(), id.is_null()) else {
            return;
        };
        // SAFETY: `id` is an id of this library.
        let b = unsafe { idbox(id) };
        let h = b.handle;
        r.with(|n, _| n.split().0.detach_qp(h)).ok();
        if !b.c.qp.is_null() {
            // SAFETY: the id's QP, made by `rdma_create_qp`.
            unsafe { super::qp::ibv_destroy_qp(b.c.qp) };
            b.c.qp = null_mut();
        }
        destroy_id_cqs(b);
    })
}

/// Destroys the CQs and channels `rdma_create_qp` made for the id, if it made them (after its
/// QP is gone, or when the QP could not be made).
pub(super) fn destroy_id_cqs(b: &mut IdBox) {
    if !b.own_cqs {
        return;
    }
    for (cq, ch) in [
        (b.c.send_cq, b.c.send_cq_channel),
        (b.c.recv_cq, b.c.recv_cq_channel),
    ] {
        if !cq.is_null() {
            // SAFETY: a CQ and channel `create_id_cqs` made for this id; no QP uses them now.
            unsafe {
                super::cq::ibv_destroy_cq(cq);
                super::cq::ibv_destroy_comp_channel(ch);
            }
        }
    }
    b.c.send_cq = null_mut();
    b.c.recv_cq = null_mut();
    b.c.send_cq_channel = null_mut();
    b.c.recv_cq_channel = null_mut();
    b.own_cqs = false;
}
