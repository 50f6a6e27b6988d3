//! libibverbs: device list, contexts (made by [`super::context`]: an `ops` table pointing at
//! the data-path calls of [`super::cq`] and [`super::qp`], the extended operations, and
//! [`super::async_event`]'s `async_fd`), queries,
//! PD, MR, the calls not implemented, and the string helpers. Return conventions are
//! libibverbs's: objects or NULL + `errno`; `int` calls return 0 or the errno value itself
//! (`ibv_modify_qp`, `ibv_post_send`, `ibv_dealloc_pd`, …); `ibv_poll_cq` a count or a negative
//! value; `ibv_get_cq_event`/`ibv_get_async_event`/`ibv_query_gid` -1 + `errno`.

use super::context::{device, free_context, new_context};
use super::memory::UserMemory;
use super::objects::leak;
use super::{destroy_boxed, errno_of, fail, fail_null, guard, rt, unsupported};
use crate::abi::convert::*;
use crate::abi::*;
use crate::runtime::Node;
use libc::{c_char, c_int, c_void};
use std::ptr::{self, null_mut};
use std::sync::{Arc, OnceLock};
use verbs_core::{Device, MrHandle, PdHandle};

/// The context rdma_cm ids report as `id->verbs` (librdmacm opens one per device). Its
/// `async_fd` is -1 if no descriptor could be made.
pub(super) fn cm_context() -> *mut ibv_context {
    static CTX: OnceLock<usize> = OnceLock::new();
    *CTX.get_or_init(|| new_context(super::async_event::new_async_fd().unwrap_or(-1)) as usize)
        as *mut ibv_context
}

/// librdmacm's per-device PD (`cma_dev->pd`), made once.
static CM_PD: OnceLock<usize> = OnceLock::new();

/// The PD of rdma_cm ids, `id->pd` once an id is bound to the device and the PD
/// `rdma_create_qp(id, NULL, …)` uses (librdmacm `ucma_get_device`: `id->pd = cma_dev->pd`).
///
/// # Errors
/// `ENODEV` (no runtime), the device's errno (`ENOMEM` past `max_pd`).
pub(super) fn cm_pd() -> Result<*mut ibv_pd, i32> {
    if let Some(p) = CM_PD.get() {
        return Ok(*p as *mut ibv_pd);
    }
    rt()?.with(|n, _| cm_pd_in(n))
}

/// [`cm_pd`] for a caller that holds the node `n` (the PD is made under the node lock, so two
/// threads cannot both make it).
///
/// # Errors
/// As [`cm_pd`].
pub(super) fn cm_pd_in(n: &mut Node) -> Result<*mut ibv_pd, i32> {
    if let Some(p) = CM_PD.get() {
        return Ok(*p as *mut ibv_pd);
    }
    let h = n.dev().alloc_pd().map_err(|e| errno_of(&e))?;
    let pd = leak(ibv_pd {
        context: cm_context(),
        handle: h.0,
    });
    Ok(*CM_PD.get_or_init(|| pd as usize) as *mut ibv_pd)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard("ibv_get_device_list", null_mut(), || {
        if let Err(e) = rt() {
            if !num_devices.is_null() {
                // SAFETY: a non-NULL `num_devices` is writable (ibv_get_device_list(3)).
                unsafe { *num_devices = 0 };
            }
            return fail_null(e);
        }
        if !num_devices.is_null() {
            // SAFETY: as above.
            unsafe { *num_devices = 1 };
        }
        Box::into_raw(Box::new([device(), null_mut()])).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard("ibv_free_device_list", (), || {
        if !list.is_null() {
            // SAFETY: `list` came from `ibv_get_device_list`, a leaked `Box<[_; 2]>`.
            drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_device; 2]>()) });
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    guard("ibv_get_device_name", ptr::null(), || {
        if device.is_null() {
            return fail_null::<c_char>(libc::EINVAL).cast_const();
        }
        // SAFETY: a device pointer from `ibv_get_device_list`; its name is NUL-terminated.
        unsafe { (*device).name.as_ptr() }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(_device: *mut ibv_device) -> u64 {
    guard("ibv_get_device_guid", 0, || match rt() {
        Ok(r) => r.with(|n, _| n.device().query_device().node_guid.to_be()),
        Err(_) => 0,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard("ibv_open_device", null_mut(), || {
        if device.is_null() {
            return fail_null(libc::EINVAL);
        }
        // A context without its async descriptor is not made, as libibverbs fails when it
        // cannot open the device's file.
        match super::async_event::new_async_fd() {
            Ok(fd) => new_context(fd),
            Err(e) => fail_null(e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    guard("ibv_close_device", libc::EIO, || {
        if context.is_null() || context == cm_context() {
            return 0; // the rdma_cm context lives as long as the process
        }
        // SAFETY: `context` came from `ibv_open_device` (`new_context`), closed once.
        let async_fd = unsafe { free_context(context) };
        if async_fd >= 0 {
            // SAFETY: the async fd is the duplicate made for this context (`new_async_fd`);
            // nothing else owns it (the other contexts' are other descriptors).
            drop(unsafe {
                <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(async_fd)
            });
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    _context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    guard("ibv_query_device", libc::EIO, || {
        if device_attr.is_null() {
            return libc::EINVAL;
        }
        match super::context::device_attr() {
            Ok(a) => {
                // SAFETY: `device_attr` is a writable `struct ibv_device_attr`
                // (ibv_query_device(3)).
                unsafe { *device_attr = a };
                0
            }
            Err(e) => e,
        }
    })
}

/// `ibv_query_port` through the old ABI: `verbs.h`'s inline `ibv_query_port` calls it with
/// `struct _compat_ibv_port_attr`, the layout without the last fields, when the context is not
/// extended (a program built before rdma-core 18, or one that calls the symbol directly; the
/// header's inline version takes the context's `query_port`, [`super::context`]).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    _context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut _compat_ibv_port_attr,
) -> c_int {
    let port_attr = port_attr.cast::<ibv_port_attr>();
    guard("ibv_query_port", libc::EIO, || {
        if port_attr.is_null() {
            return libc::EINVAL;
        }
        match super::context::port_attr(port_num) {
            Ok(p) => {
                // The old layout ends at `link_layer` (and a reserved byte, now `flags`).
                let n = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);
                // SAFETY: `port_attr` points to at least a `_compat_ibv_port_attr`, which is
                // the first `n` bytes of `ibv_port_attr`; `p` is a distinct local.
                unsafe {
                    ptr::copy_nonoverlapping(ptr::addr_of!(p).cast::<u8>(), port_attr.cast(), n)
                };
                0
            }
            Err(e) => e,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    _context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard("ibv_query_gid", -1, || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        let Ok(index) = u32::try_from(index) else {
            return fail(libc::EINVAL);
        };
        if gid.is_null() {
            return fail(libc::EINVAL);
        }
        match r.with(|n, _| n.device().query_gid(port_num, index)) {
            Ok(g) => {
                // SAFETY: `gid` is a writable `union ibv_gid` (ibv_query_gid(3)).
                unsafe { *gid = gid_to_c(g) };
                0
            }
            Err(e) => fail(errno_of(&e)),
        }
    })
}

/// `ibv_query_gid_type` (libibverbs `IBVERBS_PRIVATE`, `driver.h`): the GID's type as sysfs
/// gives it. `ibv_devinfo -v` calls it; the one GID is a RoCE v2 GID.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    _context: *mut ibv_context,
    port_num: u8,
    index: libc::c_uint,
    gid_type: *mut libc::c_uint,
) -> c_int {
    guard("ibv_query_gid_type", libc::EIO, || {
        if port_num != 1 || index != 0 || gid_type.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: `gid_type` is a writable `enum ibv_gid_type_sysfs`.
        unsafe { *gid_type = 1 }; // IBV_GID_TYPE_SYSFS_ROCE_V2
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    _context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut __be16,
) -> c_int {
    guard("ibv_query_pkey", -1, || {
        if port_num != 1 || index != 0 || pkey.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `pkey` is a writable `__be16`. The one P_Key is the default full member.
        unsafe { *pkey = 0xffff_u16.to_be() };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard("ibv_alloc_pd", null_mut(), || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail_null(e),
        };
        match r.with(|n, _| n.dev().alloc_pd()) {
            Ok(pd) => {
                let p = leak(ibv_pd {
                    context,
                    handle: pd.0,
                });
                crate::check::with_state(|s| s.pds.insert(p as usize));
                p
            }
            Err(e) => fail_null(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard("ibv_dealloc_pd", libc::EIO, || {
        // SAFETY: `pd` is NULL or came from `ibv_alloc_pd` (ibv_dealloc_pd(3)).
        let rc = unsafe { destroy_boxed(pd, |p| p.handle, |d, h| d.dealloc_pd(PdHandle(h))) };
        if rc == 0 {
            crate::check::with_state(|s| s.pds.remove(&(pd as usize)));
        }
        rc
    })
}

/// The page size the kernel checks registrations against (x86-64).
const PAGE_SIZE: u64 = 4096;

fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    let r = match rt() {
        Ok(r) => r,
        Err(e) => return fail_null(e),
    };
    if pd.is_null() || (addr.is_null() && length > 0) {
        return fail_null(libc::EINVAL);
    }
    // The kernel's `ib_uverbs_reg_mr`: the region's address and its iova lie at the same
    // offset in their pages (4 KiB on x86-64). With `ibv_reg_mr` they are equal.
    if (addr as u64 ^ iova) & (PAGE_SIZE - 1) != 0 {
        return fail_null(libc::EINVAL);
    }
    // Every bit goes to the device, which refuses unknown ones and ignores the optional
    // range (RELAXED_ORDERING, which perftest passes), as libibverbs and rxe do.
    let access = verbs_core::AccessFlags::from_bits_retain(access as u32);
    // SAFETY: `pd` came from `ibv_alloc_pd`.
    let (context, pdh) = unsafe { ((*pd).context, PdHandle((*pd).handle)) };
    // SAFETY: ibv_reg_mr(3): the buffer is the application's registered memory while
    // registered (if it goes away, the copies fail: `UserMemory`).
    let mem = unsafe { UserMemory::new(addr as usize, length) };
    let registered = r.with(|n, _| n.dev().reg_mr_external(pdh, Arc::new(mem), iova, access));
    // The kernel pins the pages after checking the arguments (`ib_uverbs_reg_mr` →
    // `ib_umem_get`): unmapped, or mapped without the protection the access needs → EFAULT.
    let writable = access.intersects(
        verbs_core::AccessFlags::LOCAL_WRITE
            | verbs_core::AccessFlags::REMOTE_WRITE
            | verbs_core::AccessFlags::REMOTE_ATOMIC
            | verbs_core::AccessFlags::MW_BIND,
    );
    let registered = registered.and_then(|mr| {
        match crate::mappings::check(addr as u64, length as u64, writable) {
            Ok(()) => Ok(mr),
            Err(why) => {
                let _ = r.with(|n, _| n.dev().dereg_mr(mr.handle));
                Err(verbs_core::Error::new(
                    verbs_core::Errno::EFAULT,
                    format!("ibv_reg_mr: range not mapped as asked ({why:?})"),
                ))
            }
        }
    });
    match registered {
        Ok(mr) => {
            let p = leak(ibv_mr {
                context,
                pd,
                addr,
                length,
                handle: mr.handle.0,
                lkey: mr.lkey,
                rkey: mr.rkey,
            });
            crate::check::with_state(|s| s.mrs.insert(p as usize));
            p
        }
        Err(e) => fail_null(errno_of(&e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr", null_mut(), || {
        reg_mr(pd, addr, length, addr as u64, access)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova", null_mut(), || {
        reg_mr(pd, addr, length, iova, access)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: libc::c_uint,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova2", null_mut(), || {
        reg_mr(pd, addr, length, iova, access as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard("ibv_dereg_mr", libc::EIO, || {
        if crate::check::enabled() && !mr.is_null() {
            if let Ok(r) = rt() {
                // SAFETY: as below.
                let lkey = unsafe { (*mr).lkey };
                let posted = r.with_quiet(|n, _| n.device().posted_wr_using(lkey));
                let at = crate::check::now_ms();
                crate::check::with_state(|s| s.deregistering(mr as usize, lkey, posted, at));
            }
        }
        // SAFETY: `mr` is NULL or came from `ibv_reg_mr*` (ibv_dereg_mr(3)).
        unsafe { destroy_boxed(mr, |m| m.handle, |d, h| d.dereg_mr(MrHandle(h))) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    guard("ibv_resize_cq", libc::EIO, || unsupported("ibv_resize_cq"))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_fork_init() -> c_int {
    guard("ibv_fork_init", 0, || {
        0 // no pinned pages to protect: registered memory is the application's own
    })
}

/// The `ibv_wc_status_str(3)` strings, as rdma-core spells them.
#[no_mangle]
pub unsafe extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
    guard("ibv_wc_status_str", c"unknown".as_ptr(), || {
        static STRINGS: OnceLock<Vec<std::ffi::CString>> = OnceLock::new();
        let s = STRINGS.get_or_init(|| {
            (0u8..=23)
                .map(|v| {
                    let text = verbs_core::WcStatus::from_raw(v).map_or("unknown", |w| w.as_str());
                    std::ffi::CString::new(text).unwrap_or_default()
                })
                .collect()
        });
        static UNKNOWN: &std::ffi::CStr = c"unknown";
        usize::try_from(status)
            .ok()
            .and_then(|i| s.get(i))
            .map_or(UNKNOWN.as_ptr(), |c| c.as_ptr())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
    guard("ibv_node_type_str", c"unknown".as_ptr(), || {
        match node_type as i64 {
            1 => c"InfiniBand channel adapter".as_ptr(),
            _ => c"unknown".as_ptr(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
    guard("ibv_port_state_str", c"unknown".as_ptr(), || {
        match port_state as i64 {
            1 => c"PORT_DOWN".as_ptr(),
            2 => c"PORT_INIT".as_ptr(),
            3 => c"PORT_ARMED".as_ptr(),
            4 => c"PORT_ACTIVE".as_ptr(),
            5 => c"PORT_ACTIVE_DEFER".as_ptr(),
            _ => c"PORT_NOP".as_ptr(),
        }
    })
}
