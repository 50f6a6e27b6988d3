//! Every `unsafe` line of the crate: loading libibverbs (`library.rs`), the calls into it, the
//! pointers it returns, the unions of its structs, and the memory regions' buffers. The C
//! structs are `verbs-abi`'s, checked against rdma-core's headers. The rest of the crate sees
//! safe types whose invariants this module keeps:
//!
//! * `Lib` (`library.rs`) holds the loaded library and its functions, for the rest of the
//!   process.
//! * `Context` owns an open `struct ibv_context` and closes it when dropped.
//! * [`Verbs`] owns a context, its completion channel and every PD, MR (with its buffer), CQ
//!   QP and SRQ created through it, in tables keyed by handle; a handle not in its table is refused
//!   before any call, and dropping it destroys everything in dependency order.
//!
//! Return conventions differ per call, as rdma-core documents them: object constructors return
//! NULL and set `errno`; most `int` calls (`ibv_modify_qp`, `ibv_query_port`, the `ops` of the
//! data path, …) return the errno value itself; `ibv_query_gid`, `ibv_get_cq_event` and
//! `ibv_get_async_event` return −1 and set `errno`. [`check`] accepts both forms.

#![allow(unsafe_code)]

mod context;
mod events;
mod fd;
mod library;
mod open;
mod post;
mod srq;
mod verbs;

pub(crate) use fd::poll_readable;
pub(crate) use open::open;
pub(crate) use verbs::Verbs;

use crate::error::verbs_error;
use verbs_core::{Error, Gid};

/// The bytes of a `union ibv_gid`.
pub(crate) fn gid_of(g: &verbs_abi::ibv_gid) -> Gid {
    // SAFETY: both members of the union (`raw: [u8; 16]`, `global: two u64`) are plain integers
    // covering the same 16 bytes, so every bit pattern is a valid `raw`.
    Gid(unsafe { g.raw })
}

/// The immediate data of a work completion: the raw value of `ibv_wc`'s union, in network
/// order as the wire carried it (meaningful when `wc_flags` has `IBV_WC_WITH_IMM`; with
/// `IBV_WC_WITH_INV` the same bits are the invalidated rkey).
pub(crate) fn wc_imm(w: &verbs_abi::ibv_wc) -> u32 {
    // SAFETY: both members of the union are `u32`: every bit pattern is valid for either.
    unsafe { w.ex.imm_data }
}

/// The calling thread's `errno`, read right after a failed call (`EIO` if it is somehow 0).
fn last_errno() -> i32 {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(e) if e > 0 => e,
        _ => libc::EIO,
    }
}

/// The errno of a failed `int` call's return value: a positive value is the errno itself; −1
/// means "see `errno`"; another negative value is a negated errno.
fn errno_of_ret(ret: libc::c_int) -> i32 {
    match ret {
        r if r > 0 => r,
        -1 => last_errno(),
        r => r.checked_neg().unwrap_or(libc::EIO),
    }
}

/// `Ok` for 0, else the [`Error`] of `call` with [`errno_of_ret`]'s errno.
fn check(call: &str, ret: libc::c_int) -> Result<(), Error> {
    if ret == 0 {
        Ok(())
    } else {
        Err(verbs_error(call, errno_of_ret(ret)))
    }
}

/// The [`Error`] of a constructor `call` that returned NULL (errno set).
fn null_error(call: &str) -> Error {
    verbs_error(call, last_errno())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_conventions() {
        assert!(check("x", 0).is_ok());
        assert_eq!(errno_of_ret(22), 22);
        assert_eq!(errno_of_ret(-95), 95);
        assert_eq!(errno_of_ret(i32::MIN), libc::EIO);
        let e = check("ibv_modify_qp", 22).err();
        assert_eq!(e.map(|e| e.errno), Some(verbs_core::Errno::EINVAL));
        let e = check("ibv_poll_cq", 1234).err();
        assert_eq!(e.map(|e| e.errno), Some(verbs_core::Errno::EIO));
    }
}
