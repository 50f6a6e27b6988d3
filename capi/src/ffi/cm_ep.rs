//! librdmacm's endpoint calls (`<rdma/rdma_verbs.h>`'s exported half): `rdma_create_ep`, which
//! makes a synchronous id from an `rdma_getaddrinfo` result and either binds it (passive) or
//! resolves address and route and makes its QP (active), and `rdma_destroy_ep`. The rest of
//! `rdma_verbs.h` (`rdma_reg_msgs`, `rdma_post_send`, `rdma_get_send_comp`…) is inline in the
//! header and calls `ibv_*`. Source: rdma-core `librdmacm/cma.c` (`rdma_create_ep`,
//! `ucma_passive_ep`, `rdma_destroy_ep`). Return convention: 0, or -1 with `errno`.

use super::cm::rdma_resolve_route;
use super::cm::{rdma_bind_addr, rdma_create_id, rdma_destroy_id, rdma_resolve_addr};
use super::cm_id::idbox;
use super::cm_qp::{rdma_create_qp, rdma_destroy_qp};
use super::cm_srq::rdma_destroy_srq;
use super::{fail, guard};
use crate::abi::*;
use libc::c_int;
use std::ptr::null_mut;

/// The resolution timeout `rdma_create_ep` passes (librdmacm: 2000 ms).
const EP_TIMEOUT_MS: c_int = 2000;

/// `rdma_create_ep(&id, res, pd, qp_init_attr)`: a synchronous id of `res`'s port space and
/// QP type. With `RAI_PASSIVE` in `res->ai_flags` it is bound to `res->ai_src_addr`, `pd`
/// becomes its PD and `qp_init_attr` is kept for the QPs `rdma_get_request` makes; otherwise
/// it resolves `res->ai_dst_addr` (from `ai_src_addr` if given) and the route, waiting for
/// each, and makes its QP when `qp_init_attr` is given (type `res->ai_qp_type`; the granted
/// caps are written back). On any error the endpoint is destroyed and the step's errno
/// returned (−1): `EINVAL` for a NULL `id` or `res`, then those of `rdma_create_id`,
/// `rdma_bind_addr`, `rdma_resolve_addr`/`rdma_resolve_route` (their event's result) and
/// `rdma_create_qp`. `res->ai_route` and `ai_connect` are not used (this library's
/// `rdma_getaddrinfo` never sets them).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("rdma_create_ep", -1, || {
        // SAFETY: NULL or a readable `struct rdma_addrinfo` (rdma_create_ep(3)).
        let (false, Some(ai)) = (id.is_null(), unsafe { res.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        let mut cm_id = null_mut();
        let ps = ai.ai_port_space as rdma_port_space;
        // SAFETY: `cm_id` is a writable local.
        if unsafe { rdma_create_id(null_mut(), &mut cm_id, null_mut(), ps) } != 0 {
            return -1;
        }
        // SAFETY: `cm_id` was just made; the addresses of `ai` are NULL or readable; `pd` and
        // `qp_init_attr` are the caller's (NULL or valid).
        let ret = unsafe {
            (*cm_id).qp_type = ai.ai_qp_type as ibv_qp_type;
            if ai.ai_flags & RAI_PASSIVE != 0 {
                passive_ep(cm_id, ai, pd, qp_init_attr)
            } else {
                active_ep(cm_id, ai, pd, qp_init_attr)
            }
        };
        if ret != 0 {
            let e = nix::errno::Errno::last_raw();
            // SAFETY: `cm_id` is ours.
            unsafe { rdma_destroy_ep(cm_id) };
            return fail(e);
        }
        // SAFETY: `id` is a writable out-parameter.
        unsafe { *id = cm_id };
        0
    })
}

/// librdmacm `ucma_passive_ep`.
///
/// # Safety
/// As [`rdma_create_ep`]'s arguments; `id` a live id of this library.
unsafe fn passive_ep(
    id: *mut rdma_cm_id,
    ai: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        if rdma_bind_addr(id, ai.ai_src_addr) != 0 {
            return -1;
        }
        if !pd.is_null() {
            (*id).pd = pd;
        }
        if let Some(a) = qp_init_attr.as_ref() {
            let mut a = *a;
            a.qp_type = ai.ai_qp_type as ibv_qp_type;
            idbox(id).qp_init_attr = Some(a);
        }
    }
    0
}

/// The active half of librdmacm `rdma_create_ep`.
///
/// # Safety
/// As [`passive_ep`].
unsafe fn active_ep(
    id: *mut rdma_cm_id,
    ai: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        if rdma_resolve_addr(id, ai.ai_src_addr, ai.ai_dst_addr, EP_TIMEOUT_MS) != 0
            || rdma_resolve_route(id, EP_TIMEOUT_MS) != 0
        {
            return -1;
        }
        if !qp_init_attr.is_null() {
            (*qp_init_attr).qp_type = ai.ai_qp_type as ibv_qp_type;
            return rdma_create_qp(id, pd, qp_init_attr);
        }
    }
    0
}

/// `rdma_destroy_ep(id)`: destroys the id's QP (and the CQs `rdma_create_qp` made for it),
/// its SRQ (`rdma_destroy_srq`), the kept QP attributes of a passive endpoint, then the id
/// (`rdma_destroy_id`, which acks its `id->event` and destroys its private channel). A NULL
/// `id` does nothing.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard("rdma_destroy_ep", (), || {
        if id.is_null() {
            return;
        }
        // SAFETY: `id` is a live id of this library (rdma_destroy_ep(3)).
        unsafe {
            if !(*id).qp.is_null() {
                rdma_destroy_qp(id);
            }
            if !(*id).srq.is_null() {
                rdma_destroy_srq(id);
            }
            idbox(id).qp_init_attr = None;
            if rdma_destroy_id(id) != 0 {
                tracing::warn!(
                    "rdma_destroy_ep: rdma_destroy_id failed (errno {})",
                    nix::errno::Errno::last_raw()
                );
            }
        }
    })
}
