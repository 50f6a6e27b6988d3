//! libibverbs calls the simulated RNIC does not implement, exported so that they answer
//! cleanly instead of running in the real libibverbs on this library's objects: each logs its
//! name once ([`unsupported`]) and fails as libibverbs does when the provider lacks the op
//! (`libibverbs/dummy_ops.c`): objects as NULL + `errno` `EOPNOTSUPP`, `int` calls as the
//! errno value, `ibv_rereg_mr` as `IBV_REREG_MR_ERR_INPUT` + `errno`. Arguments are checked
//! first where libibverbs checks them itself.

use super::{fail_null, guard, set_errno, unsupported};
use crate::abi::{ibv_ah_attr, ibv_context, ibv_mr, ibv_pd, ibv_qp};
use libc::{c_int, c_void, size_t};
use std::ptr::null_mut;

/// `struct ibv_ece` (`infiniband/verbs.h`).
#[repr(C)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `IBV_REREG_MR_ERR_INPUT`.
const REREG_ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_FLAGS_SUPPORTED`.
const REREG_FLAGS: c_int = 0b111;
/// `IBV_REREG_MR_CHANGE_TRANSLATION`, `IBV_REREG_MR_CHANGE_ACCESS`.
const REREG_TRANSLATION: c_int = 1;
const REREG_ACCESS: c_int = 4;

/// `ibv_import_device` (device.c): a descriptor that is not a character device is EINVAL;
/// otherwise no device of this library has one to import from (it has no uverbs file).
#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    guard("ibv_import_device", null_mut(), || {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes the whole struct when it succeeds; a number that is not open
        // fails with EBADF and writes nothing (then `st` is not read).
        let chr = unsafe { libc::fstat(cmd_fd, st.as_mut_ptr()) } == 0
            // SAFETY: initialised by the successful fstat above.
            && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFCHR;
        if !chr {
            return fail_null(libc::EINVAL);
        }
        fail_null(unsupported("ibv_import_device"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_import_pd(_context: *mut ibv_context, _pd_handle: u32) -> *mut ibv_pd {
    guard("ibv_import_pd", null_mut(), || {
        fail_null(unsupported("ibv_import_pd"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _mr_handle: u32) -> *mut ibv_mr {
    guard("ibv_import_mr", null_mut(), || {
        fail_null(unsupported("ibv_import_mr"))
    })
}

/// `ibv_import_dm` (returns `struct ibv_dm *`, a type this library never makes).
#[no_mangle]
pub unsafe extern "C" fn ibv_import_dm(_context: *mut ibv_context, _dm_handle: u32) -> *mut c_void {
    guard("ibv_import_dm", null_mut(), || {
        fail_null(unsupported("ibv_import_dm"))
    })
}

/// `ibv_unimport_pd`: nothing was imported; logged.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {
    guard("ibv_unimport_pd", (), || {
        unsupported("ibv_unimport_pd");
    })
}

/// `ibv_unimport_mr`: nothing was imported; logged.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {
    guard("ibv_unimport_mr", (), || {
        unsupported("ibv_unimport_mr");
    })
}

/// `ibv_unimport_dm`: nothing was imported; logged.
#[no_mangle]
pub unsafe extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {
    guard("ibv_unimport_dm", (), || {
        unsupported("ibv_unimport_dm");
    })
}

/// `ibv_reg_dmabuf_mr`: device memory through a dma-buf descriptor.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: size_t,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_dmabuf_mr", null_mut(), || {
        fail_null(unsupported("ibv_reg_dmabuf_mr"))
    })
}

/// `ibv_rereg_mr` (verbs.c): libibverbs's argument checks (EINVAL), then the missing op.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    _pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    access: c_int,
) -> c_int {
    guard("ibv_rereg_mr", REREG_ERR_INPUT, || {
        let bad = mr.is_null()
            || flags & !REREG_FLAGS != 0
            || (flags & REREG_TRANSLATION != 0 && (length == 0 || addr.is_null()))
            || (access != 0 && flags & REREG_ACCESS == 0);
        set_errno(if bad {
            libc::EINVAL
        } else {
            unsupported("ibv_rereg_mr")
        });
        REREG_ERR_INPUT
    })
}

/// `ibv_set_ece` (verbs.c): `vendor_id` 0 is EOPNOTSUPP before the provider; no provider
/// op here either. Returns the errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    guard("ibv_set_ece", libc::EIO, || {
        let e = unsupported("ibv_set_ece");
        set_errno(e);
        e
    })
}

/// `ibv_query_ece`: no ECE here. Returns the errno value.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    guard("ibv_query_ece", libc::EIO, || unsupported("ibv_query_ece"))
}

/// `ibv_resolve_eth_l2_from_gid` (verbs.c): a neighbour lookup for a RoCE MAC address; the
/// simulated fabric has no Ethernet layer. Returns `-EOPNOTSUPP` (libibverbs returns a
/// negative errno from this call).
#[no_mangle]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    guard("ibv_resolve_eth_l2_from_gid", -libc::EIO, || {
        -unsupported("ibv_resolve_eth_l2_from_gid")
    })
}
