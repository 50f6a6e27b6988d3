//! librdmacm's Enhanced Connection Establishment calls (`rdma_set_local_ece`,
//! `rdma_get_remote_ece`, `rdma_reject_ece`; rdma-core `librdmacm/cma.c`). ECE is a vendor
//! option exchange in the CM's REQ/REP that this CM does not carry: setting a local ECE is
//! refused (EOPNOTSUPP, logged once) after librdmacm's own argument checks; the remote ECE
//! reads as none (vendor 0), what librdmacm reports for a peer that sent none;
//! `rdma_reject_ece` rejects as `rdma_reject` does, with reason 28 (consumer defined) instead
//! of 35 (vendor option not supported).

use super::cm::rdma_reject;
use super::verbs_unsupported::ibv_ece;
use super::{fail, guard, unsupported};
use crate::abi::rdma_cm_id;
use libc::{c_int, c_void};

#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard("rdma_set_local_ece", -1, || {
        // SAFETY: `id` is NULL or an id of this library, `ece` NULL or a valid ibv_ece.
        let bad = unsafe {
            id.is_null()
                || !(*id).qp.is_null()
                || ece.is_null()
                || (*ece).vendor_id == 0
                || (*ece).comp_mask != 0
        };
        if bad {
            return fail(libc::EINVAL);
        }
        fail(unsupported("rdma_set_local_ece"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard("rdma_get_remote_ece", -1, || {
        // SAFETY: as above.
        unsafe {
            if id.is_null() || !(*id).qp.is_null() || ece.is_null() {
                return fail(libc::EINVAL);
            }
            (*ece).vendor_id = 0;
            (*ece).options = 0;
            (*ece).comp_mask = 0;
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    // SAFETY: rdma_reject's contract, which is this call's.
    unsafe { rdma_reject(id, private_data, private_data_len) }
}
