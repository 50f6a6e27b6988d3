//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`, and `context->ops.post_srq_recv` (`ibv_post_srq_recv` is inline in
//! verbs.h, as `ibv_post_recv` is). The rules are the simulated device's
//! (`docs/semantics-verbs.md`, "Shared receive queues"); the return conventions libibverbs's:
//! `ibv_create_srq` the SRQ or NULL + `errno`, the others 0 or the errno value.

use super::objects::{leak, registry};
use super::qp::{post_prefix, read_recv_wrs, set_bad, PostLimits};
use super::{destroy_boxed, errno_of, fail_null, guard, rt};
use crate::abi::convert::{srq_attr_from_c, srq_attr_to_c};
use crate::abi::*;
use libc::c_int;
use std::ptr::null_mut;
use verbs_core::{Device, PdHandle, SrqAttrMask, SrqHandle, SrqInitAttr};

/// `ibv_create_srq(3)`: on success `srq_init_attr->attr.max_wr`/`max_sge` are updated to what
/// was granted, as the man page says.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    srq_init_attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    guard("ibv_create_srq", null_mut(), || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail_null(e),
        };
        if pd.is_null() || srq_init_attr.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: `srq_init_attr` is a readable and writable `struct ibv_srq_init_attr`, `pd`
        // a live PD of this library (ibv_create_srq(3)).
        let (a, pdh, context) =
            unsafe { (&mut *srq_init_attr, PdHandle((*pd).handle), (*pd).context) };
        let init = SrqInitAttr {
            attr: srq_attr_from_c(&a.attr),
        };
        let made = r.with(|n, _| {
            let d = n.dev();
            let h = d.create_srq(pdh, &init)?;
            d.query_srq(h).map(|granted| (h, granted))
        });
        let (h, granted) = match made {
            Ok(v) => v,
            Err(e) => return fail_null(errno_of(&e)),
        };
        a.attr.max_wr = granted.max_wr;
        a.attr.max_sge = granted.max_sge;
        let p = leak(ibv_srq {
            context,
            srq_context: a.srq_context,
            pd,
            handle: h.0,
            // SAFETY: all-zero is the static initializer of both on glibc.
            mutex: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            cond: unsafe { std::mem::zeroed() },
            events_completed: 0,
        });
        registry().srqs.insert(h.0, p as usize);
        p
    })
}

/// `ibv_modify_srq(3)`: `srq_attr_mask` bits other than `IBV_SRQ_MAX_WR`/`IBV_SRQ_LIMIT` are
/// ignored, as the kernel's `ib_uverbs_modify_srq` passes them to a driver that looks at
/// those two only.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    srq_attr: *mut ibv_srq_attr,
    srq_attr_mask: c_int,
) -> c_int {
    guard("ibv_modify_srq", libc::EIO, || {
        let (Ok(r), false) = (rt(), srq.is_null() || srq_attr.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live SRQ of this library; `srq_attr` is readable (ibv_modify_srq(3)).
        let (h, a) = unsafe { (SrqHandle((*srq).handle), srq_attr_from_c(&*srq_attr)) };
        let mask = SrqAttrMask::from_bits_truncate(srq_attr_mask as u32);
        match r.with(|n, _| n.dev().modify_srq(h, &a, mask)) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_query_srq(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
    guard("ibv_query_srq", libc::EIO, || {
        let (Ok(r), false) = (rt(), srq.is_null() || srq_attr.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live SRQ of this library.
        let h = SrqHandle(unsafe { (*srq).handle });
        match r.with(|n, _| n.device().query_srq(h)) {
            Ok(a) => {
                // SAFETY: `srq_attr` is writable (ibv_query_srq(3)).
                unsafe {
                    *srq_attr = srq_attr_to_c(&a);
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_destroy_srq(3)`: `EBUSY` while a QP uses the SRQ (the SRQ stays usable then).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard("ibv_destroy_srq", libc::EIO, || {
        // The registry forgets the SRQ before its box is freed (a queued event of it is then
        // skipped).
        let destroy = |d: &mut rnic_sim::SimDevice, h| {
            d.destroy_srq(SrqHandle(h))?;
            registry().srqs.remove(&h);
            Ok(())
        };
        // SAFETY: `srq` is NULL or came from `ibv_create_srq` (ibv_destroy_srq(3)).
        unsafe { destroy_boxed(srq, |s| s.handle, destroy) }
    })
}

/// `context->ops.post_srq_recv` (`ibv_post_srq_recv` is inline in verbs.h): the WRs before
/// `*bad_wr` are posted (ibv_post_srq_recv(3)).
pub(super) unsafe extern "C" fn rnic_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("ibv_post_srq_recv", libc::EIO, || {
        let (Ok(r), false) = (rt(), srq.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live SRQ of this library.
        let h = SrqHandle(unsafe { (*srq).handle });
        r.with_local(|n, _| {
            let lim = match n.device().query_srq(h) {
                Ok(a) => PostLimits {
                    wrs: a.max_wr,
                    sges: a.max_sge,
                    inline: 0,
                },
                Err(e) => return set_bad(bad_wr, wr, errno_of(&e)),
            };
            // SAFETY: `wr` is a NULL-terminated list of readable WRs (ibv_post_srq_recv(3)).
            let (ptrs, wrs, refused) = unsafe { read_recv_wrs(wr, &lim) };
            post_prefix(bad_wr, wr, &ptrs, refused, || {
                n.dev().post_srq_recv(h, &wrs)
            })
        })
    })
}
