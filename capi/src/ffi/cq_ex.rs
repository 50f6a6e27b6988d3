//! Extended CQs: `ibv_create_cq_ex` (the context's `create_cq_ex` slot) and the poll API the
//! header inlines over `struct ibv_cq_ex`'s function pointers — `ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll` and the `ibv_wc_read_*` readers (ibv_create_cq_ex(3)).
//!
//! As rxe's provider (rdma-core `providers/rxe/rxe.c`, `rxe_create_cq_ex` and `cq_*`): the
//! `wc_flags` it accepts are `IBV_WC_STANDARD_FLAGS` (byte_len, imm, qp_num, src_qp, slid, sl,
//! dlid_path_bits; others `EOPNOTSUPP`), and the readers of the fields not asked for stay NULL;
//! `start_poll` and `next_poll` return `ENOENT` (and set `errno`) when the CQ is empty. Each
//! completion is taken off the device's CQ when the poll reaches it, so `end_poll` after any
//! number of `next_poll`s leaves no completion half-consumed. The CQ is the same device CQ as
//! one of `ibv_create_cq`: `ibv_poll_cq` on `ibv_cq_ex_to_cq(cq)`, completion channels and
//! `ibv_req_notify_cq` work on it too.

use super::cq::{make_cq, poll_device};
use super::objects::CqBox;
use super::{fail_null, guard, unsupported};
use crate::abi::convert::wc_to_c;
use crate::abi::*;
use libc::{c_int, c_uint};
use std::ptr::null_mut;
use verbs_core::CqHandle;

/// The `wc_flags` rxe supports (`RXE_SUP_WC_EX_FLAGS`).
const SUPPORTED_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS;

/// The `ibv_cq_init_attr_ex.flags` accepted: `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` is a hint to
/// the provider's locking (nothing to do); `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` reaches the
/// kernel, whose rxe driver refuses CQ flags (`rxe_create_cq`: `EOPNOTSUPP`).
const SUPPORTED_CQ_FLAGS: u32 = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

/// `verbs_context.create_cq_ex` (the header's inline `ibv_create_cq_ex`). Errors (NULL +
/// `errno`): `EINVAL` for a NULL `attr` or `comp_vector` past the context's one vector (the
/// kernel's `create_cq`); `EOPNOTSUPP` for `comp_mask` bits other than `FLAGS`/`PD`
/// (libibverbs `ibv_cmd_create_cq_ex`), `wc_flags` beyond the standard ones and flags other
/// than `SINGLE_THREADED` (rxe), each logged once; else as `ibv_create_cq`.
pub(super) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard("ibv_create_cq_ex", null_mut(), || {
        if attr.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: a readable `struct ibv_cq_init_attr_ex` (ibv_create_cq_ex(3)).
        let a = unsafe { *attr };
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            return fail_null(unsupported("ibv_create_cq_ex with unknown comp_mask bits"));
        }
        if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
            return fail_null(unsupported(
                "ibv_create_cq_ex with wc_flags beyond IBV_WC_STANDARD_FLAGS (timestamps, cvlan, flow tag, tag matching)",
            ));
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !SUPPORTED_CQ_FLAGS != 0 {
            return fail_null(unsupported(
                "ibv_create_cq_ex with flags other than IBV_CREATE_CQ_ATTR_SINGLE_THREADED",
            ));
        }
        if a.comp_vector != 0 {
            return fail_null(libc::EINVAL); // one completion vector (num_comp_vectors 1)
        }
        let cq = match make_cq(context, a.cqe, a.cq_context, a.channel) {
            Ok(cq) => cq,
            Err(e) => return fail_null(e),
        };
        // SAFETY: `cq` is the live box just made; nothing else uses it yet.
        let c = unsafe { &mut (*cq).c };
        c.start_poll = Some(start_poll);
        c.next_poll = Some(next_poll);
        c.end_poll = Some(end_poll);
        c.read_opcode = Some(read_opcode);
        c.read_vendor_err = Some(read_vendor_err);
        c.read_wc_flags = Some(read_wc_flags);
        let want = |bit: u64| a.wc_flags & bit != 0;
        if want(IBV_WC_EX_WITH_BYTE_LEN) {
            c.read_byte_len = Some(read_byte_len);
        }
        if want(IBV_WC_EX_WITH_IMM) {
            c.read_imm_data = Some(read_imm_data);
        }
        if want(IBV_WC_EX_WITH_QP_NUM) {
            c.read_qp_num = Some(read_qp_num);
        }
        if want(IBV_WC_EX_WITH_SRC_QP) {
            c.read_src_qp = Some(read_src_qp);
        }
        if want(IBV_WC_EX_WITH_SLID) {
            c.read_slid = Some(read_slid);
        }
        if want(IBV_WC_EX_WITH_SL) {
            c.read_sl = Some(read_sl);
        }
        if want(IBV_WC_EX_WITH_DLID_PATH_BITS) {
            c.read_dlid_path_bits = Some(read_dlid_path_bits);
        }
        cq.cast()
    })
}

/// Takes the next completion of `cq` into its box: 0, `ENOENT` (empty; `errno` set too, as
/// rxe's `cq_start_poll`), or the device's errno.
///
/// # Safety
/// `cq` is a live CQ of `create_cq_ex`.
unsafe fn advance(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the caller's contract: `cq` is a live `CqBox`.
    let b = unsafe { &mut *cq.cast::<CqBox>() };
    match poll_device(CqHandle(b.c.handle)) {
        Ok(Some(w)) => {
            b.cur = wc_to_c(&w);
            b.c.status = b.cur.status;
            b.c.wr_id = b.cur.wr_id;
            0
        }
        Ok(None) => {
            super::set_errno(libc::ENOENT);
            libc::ENOENT
        }
        Err(e) => e,
    }
}

/// `ibv_start_poll`: `attr->comp_mask` must be 0 (no bits are defined).
unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    guard("ibv_start_poll", libc::EIO, || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a non-NULL `attr` is readable (ibv_create_cq_ex(3)).
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        // SAFETY: `cq` is one of ours (its `start_poll` slot led here).
        unsafe { advance(cq) }
    })
}

/// `ibv_next_poll`.
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    guard("ibv_next_poll", libc::EIO, || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: as in `start_poll`.
        unsafe { advance(cq) }
    })
}

/// `ibv_end_poll`: nothing is held between the calls (each completion was taken when reached).
unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

/// The current completion of `cq`'s poll.
///
/// # Safety
/// `cq` is a live CQ of `create_cq_ex`.
unsafe fn cur<'a>(cq: *mut ibv_cq_ex) -> &'a ibv_wc {
    // SAFETY: the caller's contract.
    unsafe { &(*cq.cast::<CqBox>()).cur }
}

/// Defines the `ibv_wc_read_*` readers: each returns one field of the current completion.
macro_rules! readers {
    ($($fn:ident -> $ty:ty = |$w:ident| $e:expr;)*) => {$(
        unsafe extern "C" fn $fn(cq: *mut ibv_cq_ex) -> $ty {
            // No panic can happen here (a field read); `guard` is not needed.
            // SAFETY: `cq` is one of ours (the slot led here), during a poll (the API's rule).
            let $w = unsafe { cur(cq) };
            $e
        }
    )*};
}

readers! {
    read_opcode -> ibv_wc_opcode = |w| w.opcode;
    read_vendor_err -> u32 = |w| w.vendor_err;
    read_byte_len -> u32 = |w| w.byte_len;
    read_qp_num -> u32 = |w| w.qp_num;
    read_src_qp -> u32 = |w| w.src_qp;
    read_wc_flags -> c_uint = |w| w.wc_flags;
    read_slid -> u32 = |w| u32::from(w.slid);
    read_sl -> u8 = |w| w.sl;
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: `cq` is one of ours (the slot led here), during a poll (the API's rule); both
    // members of the `imm_data`/`invalidated_rkey` union are the same `u32`.
    unsafe { cur(cq).ex.imm_data }
}
