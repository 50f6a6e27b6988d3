//! Extended QPs: `ibv_create_qp_ex` (the context's `create_qp_ex` slot), `ibv_qp_to_qp_ex`,
//! and the post API the header inlines over `struct ibv_qp_ex`'s function pointers
//! (ibv_wr_post(3)): `ibv_wr_start`, the builders (`ibv_wr_send`, `ibv_wr_rdma_write`, …),
//! the setters (`ibv_wr_set_sge`, `ibv_wr_set_inline_data`, `ibv_wr_set_ud_addr`, …),
//! `ibv_wr_complete` and `ibv_wr_abort`.
//!
//! As rxe's provider (rdma-core `providers/rxe/rxe.c`, `check_qp_init_attr`,
//! `set_qp_send_ops`, `wr_*`): `comp_mask` may hold `PD`, `CREATE_FLAGS` (no flag) and
//! `SEND_OPS_FLAGS`; a QP gets the builders its `send_ops_flags` ask for (the others stay
//! NULL), and `send_ops_flags` beyond the operations the simulated device has (RC: SEND,
//! SEND_WITH_IMM, RDMA WRITE, WRITE_WITH_IMM, READ, the two atomics; UD: SEND,
//! SEND_WITH_IMM) are `EOPNOTSUPP`, logged; every QP of `ibv_create_qp_ex` is extended
//! (`ibv_qp_to_qp_ex` returns it). Each builder starts a WR with the QP's current `wr_id`
//! and `wr_flags`; each setter completes the last one; an inline setter copies the data at
//! once (the application may reuse its buffer), and one longer than `max_inline_data` (or an
//! SGE list longer than `max_send_sge`) makes `ibv_wr_complete` fail with `ENOSPC` and post
//! nothing, as rxe's `qp->err`. `ibv_wr_complete` posts the WRs as one `ibv_post_send` list
//! would be: errors are the post's (`EINVAL`, `ENOMEM`, …).

use super::memory::post_send_with_inline;
use super::objects::{AhBox, QpBox, WrBatch};
use super::qp::create_qp;
use super::{errno_of, fail_null, guard, rt, unsupported};
use crate::abi::*;
use libc::{c_int, c_void, size_t};
use std::ptr::null_mut;
use std::sync::PoisonError;
use verbs_core::{AtomicWr, PdHandle, QpHandle, RdmaWr, SendFlags, SendWr, Sge, UdWr, WrOpcode};

/// The `send_ops_flags` an RC QP may ask for: the operations the simulated device has.
const RC_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

/// The `send_ops_flags` a UD QP may ask for (rxe's `RXE_SUP_UD_QP_SEND_OPS_FLAGS`).
const UD_SEND_OPS: u64 = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

/// The `comp_mask` bits accepted (rxe's `RXE_QP_COMP_MASK_SUP`).
const COMP_MASK: u32 =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

/// `verbs_context.create_qp_ex` (the header's inline `ibv_create_qp_ex`, which calls
/// `ibv_create_qp` itself when `comp_mask` is just `IBV_QP_INIT_ATTR_PD`). Errors (NULL +
/// `errno`): `EOPNOTSUPP` for the attributes above (logged once each); `EINVAL` without a PD;
/// else as `ibv_create_qp`.
pub(super) unsafe extern "C" fn create_qp_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard("ibv_create_qp_ex", null_mut(), || {
        if attr.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: a readable `struct ibv_qp_init_attr_ex` (ibv_create_qp_ex(3)).
        let a = unsafe { *attr };
        if a.comp_mask & !COMP_MASK != 0 {
            return fail_null(unsupported(
                "ibv_create_qp_ex with comp_mask beyond PD, CREATE_FLAGS and SEND_OPS_FLAGS (XRC, RSS, TSO)",
            ));
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return fail_null(unsupported("ibv_create_qp_ex with create_flags"));
        }
        let ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            let allowed = match a.qp_type {
                IBV_QPT_RC => RC_SEND_OPS,
                IBV_QPT_UD => UD_SEND_OPS,
                _ => 0,
            };
            if a.send_ops_flags & !allowed != 0 {
                return fail_null(unsupported(
                    "ibv_create_qp_ex with send_ops_flags the device lacks (LOCAL_INV, BIND_MW, SEND_WITH_INV, TSO, ATOMIC_WRITE; on UD anything but SEND)",
                ));
            }
            a.send_ops_flags
        } else {
            0
        };
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return fail_null(libc::EINVAL);
        }
        let init = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let qp = match create_qp(a.pd, &init) {
            Ok(qp) => qp,
            Err(e) => return fail_null(e),
        };
        // SAFETY: `attr` is writable (ibv_create_qp_ex(3) writes the granted caps back).
        super::qp::granted_cap(qp, unsafe { &mut (*attr).cap });
        // SAFETY: `qp` is the `QpBox` just made; nothing else uses it yet.
        let b = unsafe { &mut *qp.cast::<QpBox>() };
        b.extended = true;
        set_send_ops(&mut b.c, ops);
        qp
    })
}

/// Fills the builders `flags` asks for, and every setter, as rxe's `set_qp_send_ops`.
fn set_send_ops(c: &mut ibv_qp_ex, flags: u64) {
    let has = |bit: u64| flags & bit != 0;
    if has(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) {
        c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    }
    if has(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) {
        c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    }
    if has(IBV_QP_EX_WITH_RDMA_READ) {
        c.wr_rdma_read = Some(wr_rdma_read);
    }
    if has(IBV_QP_EX_WITH_RDMA_WRITE) {
        c.wr_rdma_write = Some(wr_rdma_write);
    }
    if has(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) {
        c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    }
    if has(IBV_QP_EX_WITH_SEND) {
        c.wr_send = Some(wr_send);
    }
    if has(IBV_QP_EX_WITH_SEND_WITH_IMM) {
        c.wr_send_imm = Some(wr_send_imm);
    }
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
}

/// `ibv_qp_to_qp_ex(3)`: the extended view of a QP of `ibv_create_qp_ex`, NULL for any other
/// (libibverbs returns the QP only when its provider marked it `VERBS_QP_EX`).
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard("ibv_qp_to_qp_ex", null_mut(), || {
        if qp.is_null() {
            return null_mut();
        }
        let b = qp.cast::<QpBox>();
        // SAFETY: every QP of this library is a live `QpBox` (ibv_qp_to_qp_ex(3) takes a QP).
        if unsafe { (*b).extended } {
            // SAFETY: as above; `c` is the box's first member.
            unsafe { std::ptr::addr_of_mut!((*b).c) }
        } else {
            null_mut()
        }
    })
}

/// Runs `f` on the batch of `qp` (an extended QP of this library) with the box.
///
/// # Safety
/// `qp` is a live QP of `ibv_create_qp_ex` (its slot led here).
unsafe fn with_batch<R>(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpBox, &mut WrBatch) -> R) -> R {
    // SAFETY: the caller's contract; only shared access (the batch has its own lock).
    let b = unsafe { &*qp.cast::<QpBox>() };
    let mut batch = b.batch.lock().unwrap_or_else(PoisonError::into_inner);
    f(b, &mut batch)
}

/// A builder: starts a WR of `opcode` with the QP's `wr_id` and `wr_flags`, then `fill`s it.
///
/// # Safety
/// As [`with_batch`].
unsafe fn build(qp: *mut ibv_qp_ex, opcode: WrOpcode, fill: impl FnOnce(&mut SendWr)) {
    // SAFETY: the caller's contract.
    unsafe {
        with_batch(qp, |b, batch| {
            let mut wr = SendWr::send(b.c.wr_id, Vec::new());
            wr.opcode = opcode;
            wr.send_flags = SendFlags::from_bits_truncate(b.c.wr_flags);
            fill(&mut wr);
            batch.wrs.push(wr);
        })
    }
}

/// A setter: applies `set` to the last WR built; without one, the batch fails with `EINVAL`.
/// After an earlier error it does nothing (rxe: `if (qp->err) return;`).
///
/// # Safety
/// As [`with_batch`].
unsafe fn set(qp: *mut ibv_qp_ex, set: impl FnOnce(&QpBox, &mut WrBatch) -> Result<(), i32>) {
    // SAFETY: the caller's contract.
    unsafe {
        with_batch(qp, |b, batch| {
            if batch.err != 0 {
                return;
            }
            if batch.wrs.is_empty() {
                batch.err = libc::EINVAL;
                return;
            }
            if let Err(e) = set(b, batch) {
                batch.err = e;
            }
        })
    }
}

/// The last WR of a batch [`set`] found non-empty.
fn last(batch: &mut WrBatch) -> Result<&mut SendWr, i32> {
    batch.wrs.last_mut().ok_or(libc::EINVAL)
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    guard("ibv_wr_start", (), || {
        // SAFETY: the slot led here.
        unsafe { with_batch(qp, |_, batch| *batch = WrBatch::default()) }
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    guard("ibv_wr_abort", (), || {
        // SAFETY: the slot led here.
        unsafe { with_batch(qp, |_, batch| *batch = WrBatch::default()) }
    })
}

/// `ibv_wr_complete`: posts the batch (see the module docs); 0 or the errno.
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    guard("ibv_wr_complete", libc::EIO, || {
        // SAFETY: the slot led here.
        let batch = unsafe { with_batch(qp, |_, batch| std::mem::take(batch)) };
        if batch.err != 0 {
            return batch.err;
        }
        if batch.wrs.is_empty() {
            return 0;
        }
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return e,
        };
        // SAFETY: a live QP of this library, whose PD is live.
        let (h, pd) = unsafe {
            let base = &(*qp).qp_base;
            (QpHandle(base.handle), PdHandle((*base.pd).handle))
        };
        // SAFETY: the inline SGEs point into `batch.inline`, alive until after the post; the
        // others are the application's registered memory.
        let posted =
            r.with_send(|n, _| unsafe { post_send_with_inline(n.dev(), pd, h, &batch.wrs) });
        match posted {
            Ok(()) => 0,
            Err(pe) => errno_of(&pe.error),
        }
    })
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    guard("ibv_wr_send", (), || {
        // SAFETY: the slot led here.
        unsafe { build(qp, WrOpcode::Send, |_| {}) }
    })
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: __be32) {
    guard("ibv_wr_send_imm", (), || {
        // SAFETY: the slot led here.
        unsafe { build(qp, WrOpcode::SendWithImm, |w| w.imm_data = imm_data) }
    })
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    guard("ibv_wr_rdma_write", (), || {
        // SAFETY: the slot led here.
        unsafe {
            build(qp, WrOpcode::RdmaWrite, |w| {
                w.rdma = RdmaWr { remote_addr, rkey }
            })
        }
    })
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: __be32,
) {
    guard("ibv_wr_rdma_write_imm", (), || {
        // SAFETY: the slot led here.
        unsafe {
            build(qp, WrOpcode::RdmaWriteWithImm, |w| {
                w.rdma = RdmaWr { remote_addr, rkey };
                w.imm_data = imm_data;
            })
        }
    })
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    guard("ibv_wr_rdma_read", (), || {
        // SAFETY: the slot led here.
        unsafe {
            build(qp, WrOpcode::RdmaRead, |w| {
                w.rdma = RdmaWr { remote_addr, rkey }
            })
        }
    })
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    guard("ibv_wr_atomic_cmp_swp", (), || {
        // SAFETY: the slot led here.
        unsafe {
            build(qp, WrOpcode::AtomicCmpAndSwp, |w| {
                w.atomic = AtomicWr {
                    remote_addr,
                    compare_add: compare,
                    swap,
                    rkey,
                }
            })
        }
    })
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    guard("ibv_wr_atomic_fetch_add", (), || {
        // SAFETY: the slot led here.
        unsafe {
            build(qp, WrOpcode::AtomicFetchAndAdd, |w| {
                w.atomic = AtomicWr {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                }
            })
        }
    })
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    guard("ibv_wr_set_ud_addr", (), || {
        // SAFETY: the slot led here.
        unsafe {
            set(qp, |_, batch| {
                if ah.is_null() {
                    return Err(libc::EINVAL);
                }
                // SAFETY: a non-NULL `ah` came from `ibv_create_ah` (an `AhBox`).
                let attr = (*ah.cast::<AhBox>()).attr;
                last(batch)?.ud = UdWr {
                    ah: attr,
                    remote_qpn,
                    remote_qkey,
                };
                Ok(())
            })
        }
    })
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    guard("ibv_wr_set_sge", (), || {
        // SAFETY: the slot led here.
        unsafe {
            set(qp, |_, batch| {
                // A zero length leaves the WR without an SGE (rxe's `wr_set_sge`).
                last(batch)?.sg_list = if length > 0 {
                    vec![Sge { addr, length, lkey }]
                } else {
                    Vec::new()
                };
                Ok(())
            })
        }
    })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: size_t, sg_list: *const ibv_sge) {
    guard("ibv_wr_set_sge_list", (), || {
        // SAFETY: the slot led here.
        unsafe {
            set(qp, |b, batch| {
                if num_sge > b.max_send_sge as usize {
                    return Err(libc::ENOSPC);
                }
                if num_sge > 0 && sg_list.is_null() {
                    return Err(libc::EINVAL);
                }
                let list = if num_sge == 0 {
                    &[][..]
                } else {
                    // SAFETY: `sg_list` holds `num_sge` readable SGEs (ibv_wr_post(3));
                    // `num_sge` is at most `max_send_sge` (checked above).
                    std::slice::from_raw_parts(sg_list, num_sge)
                };
                last(batch)?.sg_list = list
                    .iter()
                    .map(|g| Sge {
                        addr: g.addr,
                        length: g.length,
                        lkey: g.lkey,
                    })
                    .collect();
                Ok(())
            })
        }
    })
}

/// Makes the last WR inline with a copy of `parts`' bytes.
///
/// # Safety
/// Each `(addr, len)` of `parts` is readable for `len` bytes.
unsafe fn set_inline(
    b: &QpBox,
    batch: &mut WrBatch,
    parts: &[(*const u8, usize)],
) -> Result<(), i32> {
    let total = parts.iter().try_fold(0usize, |t, &(_, n)| t.checked_add(n));
    let total = total.ok_or(libc::ENOSPC)?;
    if total > b.max_inline_data as usize {
        return Err(libc::ENOSPC); // rxe's `wr_set_inline_data`
    }
    let mut data = Vec::with_capacity(total);
    for &(p, n) in parts {
        if n > 0 {
            if p.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's contract.
            data.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
        }
    }
    let sge = Sge {
        addr: data.as_ptr() as u64,
        length: total as u32, // at most max_inline_data
        lkey: 0,
    };
    let wr = last(batch)?;
    wr.sg_list = if total > 0 { vec![sge] } else { Vec::new() };
    wr.send_flags |= SendFlags::INLINE;
    // The vector's heap buffer does not move when the vector does: the SGE stays valid.
    batch.inline.push(data);
    Ok(())
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: size_t) {
    guard("ibv_wr_set_inline_data", (), || {
        // SAFETY: the slot led here; `addr` holds `length` readable bytes (ibv_wr_post(3)).
        unsafe {
            set(qp, |b, batch| {
                set_inline(b, batch, &[(addr.cast(), length)])
            })
        }
    })
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: size_t,
    buf_list: *const ibv_data_buf,
) {
    guard("ibv_wr_set_inline_data_list", (), || {
        // SAFETY: the slot led here.
        unsafe {
            set(qp, |b, batch| {
                if num_buf > 0 && buf_list.is_null() {
                    return Err(libc::EINVAL);
                }
                let bufs = if num_buf == 0 {
                    &[][..]
                } else {
                    // SAFETY: `buf_list` holds `num_buf` readable entries (ibv_wr_post(3)).
                    std::slice::from_raw_parts(buf_list, num_buf)
                };
                let parts: Vec<(*const u8, usize)> = bufs
                    .iter()
                    .map(|d| (d.addr.cast_const().cast(), d.length))
                    .collect();
                // SAFETY: each buffer holds `length` readable bytes (ibv_wr_post(3)).
                set_inline(b, batch, &parts)
            })
        }
    })
}
