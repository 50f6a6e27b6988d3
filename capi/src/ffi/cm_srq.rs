//! librdmacm's SRQ calls on an id: `rdma_create_srq`, `rdma_create_srq_ex`,
//! `rdma_destroy_srq`. The SRQ is the id's (`id->srq`): `rdma_create_qp` puts a QP made without
//! an SRQ of its own on it, `rdma_destroy_ep` destroys it. Source: rdma-core
//! `librdmacm/cma.c` (`rdma_create_srq_ex`, `rdma_create_srq`, `rdma_destroy_srq`,
//! `rdma_create_qp_ex`, `rdma_destroy_ep`). Return convention: 0, or -1 with `errno`.

use super::cm_id::idbox;
use super::cm_qp::destroy_id_cqs;
use super::srq::{ibv_create_srq, ibv_destroy_srq};
use super::verbs::cm_pd;
use super::{fail, guard, unsupported};
use crate::abi::*;
use libc::c_int;
use std::ptr::null_mut;

/// `rdma_create_srq_ex(id, attr)`: a basic SRQ on the id's device, kept as `id->srq`.
///
/// `attr->comp_mask` must have `IBV_SRQ_INIT_ATTR_TYPE`; without `IBV_SRQ_INIT_ATTR_PD` or
/// with a NULL `attr->pd` the id's PD is used (`id->pd`, else the device's PD, which librdmacm
/// gives every bound id in `ucma_get_device`) and written to `attr->pd` with the `PD` bit set.
/// The granted `attr->attr.max_wr`/`max_sge` are written back (ibv_create_srq(3)). When
/// `id->pd` is NULL it becomes the device's PD, as librdmacm's id has it from its bind on.
///
/// Errors (−1 + errno): `EINVAL` for a NULL argument, an id not bound to a device yet, no
/// `IBV_SRQ_INIT_ATTR_TYPE` bit (librdmacm's check), or a PD of another context (the kernel's
/// handle lookup); `EOPNOTSUPP` for `IBV_SRQT_XRC`/`IBV_SRQT_TM` or the `XRCD`/`CQ`/`TM`
/// attributes (no XRC domains or tag matching here; rxe has neither); those of
/// `ibv_create_srq`. An `id->srq` made before is replaced, not destroyed, as librdmacm does.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    guard("rdma_create_srq_ex", -1, || {
        if id.is_null() || attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `id` is an id of this library; `attr` is readable and writable
        // (rdma_create_srq_ex(3): the granted attributes are written back).
        let (b, a) = unsafe { (idbox(id), &mut *attr) };
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || b.c.verbs.is_null() {
            return fail(libc::EINVAL);
        }
        let dev_pd = if b.c.pd.is_null() {
            match cm_pd() {
                Ok(p) => p,
                Err(e) => return fail(e),
            }
        } else {
            b.c.pd
        };
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.pd = dev_pd;
            a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        }
        if a.srq_type != IBV_SRQT_BASIC
            || a.comp_mask & !(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD) != 0
        {
            return fail(unsupported("rdma_create_srq_ex (XRC or tag-matching SRQ)"));
        }
        // SAFETY: a non-NULL `pd` came from `ibv_alloc_pd` and is live.
        if unsafe { (*a.pd).context } != b.c.verbs {
            return fail(libc::EINVAL);
        }
        let mut plain = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        // SAFETY: `a.pd` is live; `plain` is a local.
        let srq = unsafe { ibv_create_srq(a.pd, &mut plain) };
        if srq.is_null() {
            return -1; // errno set by ibv_create_srq
        }
        a.attr = plain.attr;
        if b.c.pd.is_null() {
            b.c.pd = dev_pd;
        }
        b.c.srq = srq;
        0
    })
}

/// `rdma_create_srq(id, pd, attr)`: [`rdma_create_srq_ex`] with `pd` (NULL: the id's PD) and
/// a basic SRQ (`IBV_SRQT_XRC` for an id of type `IBV_QPT_XRC_RECV`, which is refused with
/// `EOPNOTSUPP`); the granted limits are written back to `attr->attr`. `EINVAL` for a NULL
/// `id` or `attr`; otherwise the errors of [`rdma_create_srq_ex`].
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    guard("rdma_create_srq", -1, || {
        if id.is_null() || attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `id` is an id of this library; `attr` is readable and writable.
        let (qp_type, a) = unsafe { ((*id).qp_type, &mut *attr) };
        let mut ex = ibv_srq_init_attr_ex {
            srq_context: a.srq_context,
            attr: a.attr,
            comp_mask: IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
            srq_type: if qp_type == IBV_QPT_XRC_RECV {
                IBV_SRQT_XRC
            } else {
                IBV_SRQT_BASIC
            },
            pd,
            xrcd: null_mut(),
            cq: null_mut(),
            tm_cap: ibv_tm_cap {
                max_num_tags: 0,
                max_ops: 0,
            },
        };
        // SAFETY: forwarding the caller's id; `ex` is a local.
        let ret = unsafe { rdma_create_srq_ex(id, &mut ex) };
        a.srq_context = ex.srq_context;
        a.attr = ex.attr;
        ret
    })
}

/// `rdma_destroy_srq(id)`: destroys `id->srq` and sets it to NULL, then the CQs
/// `rdma_create_qp` made for the id if the id has no QP left (librdmacm calls
/// `ucma_destroy_cqs` unconditionally; with a QP still on them that would fail with EBUSY and
/// forget them, here `rdma_destroy_qp` frees them later). As librdmacm (a `void` call),
/// `id->srq` is NULL afterwards even when `ibv_destroy_srq` fails (EBUSY while a QP uses the
/// SRQ: the SRQ is then leaked; logged). A NULL `id` or `id->srq` does nothing.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    guard("rdma_destroy_srq", (), || {
        if id.is_null() {
            return;
        }
        // SAFETY: `id` is an id of this library.
        let b = unsafe { idbox(id) };
        if !b.c.srq.is_null() {
            // SAFETY: the id's SRQ, made by `rdma_create_srq` (or set by the application).
            let rc = unsafe { ibv_destroy_srq(b.c.srq) };
            if rc != 0 {
                tracing::warn!("rdma_destroy_srq: ibv_destroy_srq failed (errno {rc})");
            }
            b.c.srq = null_mut();
        }
        if b.c.qp.is_null() {
            destroy_id_cqs(b);
        }
    })
}
