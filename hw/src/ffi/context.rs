//! An open device context (`struct ibv_context`) and the queries on it.

use super::library::Lib;
use super::{check, null_error};
use crate::error::verbs_error;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use verbs_abi as abi;
use verbs_core::{Error, Gid};

/// An open `struct ibv_context`, closed (`ibv_close_device`) when dropped.
///
/// Invariant: `ptr` came from `lib`'s `ibv_open_device` and has not been closed.
pub(crate) struct Context {
    ptr: NonNull<abi::ibv_context>,
    /// The library the context belongs to: every call on it and its objects goes there.
    pub(super) lib: &'static Lib,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("ptr", &self.ptr)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// `ibv_open_device`.
    ///
    /// # Safety
    /// `device` is an entry of a device list from `lib`'s `ibv_get_device_list` that has not
    /// been freed.
    pub(super) unsafe fn open(
        lib: &'static Lib,
        device: NonNull<abi::ibv_device>,
    ) -> Result<Context, Error> {
        // SAFETY: `device` is a live list entry of `lib` (the caller's contract).
        let ptr = unsafe { (lib.ibv_open_device)(device.as_ptr()) };
        NonNull::new(ptr)
            .map(|ptr| Context { ptr, lib })
            .ok_or_else(|| null_error("ibv_open_device"))
    }

    /// The raw context, for calls on it.
    pub(super) fn as_ptr(&self) -> *mut abi::ibv_context {
        self.ptr.as_ptr()
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> Result<abi::ibv_device_attr, Error> {
        // SAFETY: `ibv_device_attr` is integers and a `c_char` array: all-zero is valid.
        let mut attr: abi::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context (invariant) and a writable struct of the right type.
        let ret = unsafe { (self.lib.ibv_query_device)(self.as_ptr(), &mut attr) };
        check("ibv_query_device", ret).map(|()| attr)
    }

    /// `ibv_query_port`: the exported function, as verbs.h's inline calls it for a context that
    /// is not extended (librnic's); on an extended one (rdma-core's providers) it fills the
    /// same fields through the provider (see `library.rs`).
    pub(crate) fn query_port(&self, port: u8) -> Result<abi::ibv_port_attr, Error> {
        // SAFETY: `ibv_port_attr` is integers: all-zero is valid (and the compat path writes
        // only a prefix of it, so the rest must be initialised, as verbs.h's memset does).
        let mut attr: abi::ibv_port_attr = unsafe { std::mem::zeroed() };
        // The compat layout is a prefix of the full one (verbs.h's inline casts the same way).
        let compat = (&raw mut attr).cast::<abi::_compat_ibv_port_attr>();
        // SAFETY: a live context and a writable, full-size `ibv_port_attr`.
        let ret = unsafe { (self.lib.ibv_query_port)(self.as_ptr(), port, compat) };
        check("ibv_query_port", ret).map(|()| attr)
    }

    /// `ibv_query_gid`.
    pub(crate) fn query_gid(&self, port: u8, index: u32) -> Result<Gid, Error> {
        let index =
            libc::c_int::try_from(index).map_err(|_| verbs_error("ibv_query_gid", libc::EINVAL))?;
        let mut gid = abi::ibv_gid { raw: [0; 16] };
        // SAFETY: a live context and a writable `union ibv_gid`.
        let ret = unsafe { (self.lib.ibv_query_gid)(self.as_ptr(), port, index, &mut gid) };
        check("ibv_query_gid", ret).map(|()| super::gid_of(&gid))
    }

    /// `ibv_query_gid_type` (rdma-core's `IBVERBS_PRIVATE` symbol of driver.h): the raw
    /// `enum ibv_gid_type_sysfs`, or the errno (`EOPNOTSUPP` where the symbol is missing).
    pub(crate) fn query_gid_type(&self, port: u8, index: u32) -> Result<u32, i32> {
        let Some(f) = self.lib.ibv_query_gid_type else {
            return Err(libc::EOPNOTSUPP);
        };
        let mut ty: libc::c_uint = 0;
        // SAFETY: a live context and a writable enum-sized integer.
        let ret = unsafe { f(self.as_ptr(), port, index, &mut ty) };
        if ret == 0 {
            Ok(ty)
        } else {
            Err(super::errno_of_ret(ret))
        }
    }

    /// `context->async_fd`, −1 if the library has none.
    pub(crate) fn async_fd(&self) -> RawFd {
        // SAFETY: a live context; the field is set at open and not changed afterwards.
        unsafe { (*self.as_ptr()).async_fd }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: a live context (invariant), closed exactly once, here. Its objects were
        // destroyed first by their owner ([`super::Verbs`]); a failure leaves nothing to do.
        let _ = unsafe { (self.lib.ibv_close_device)(self.as_ptr()) };
    }
}

/// Sets `O_NONBLOCK` on `fd` (`fcntl(2)`), so that `ibv_get_cq_event`/`ibv_get_async_event`
/// fail with `EAGAIN` instead of blocking.
pub(super) fn set_nonblocking(fd: RawFd) -> Result<(), Error> {
    // SAFETY: F_GETFL on any descriptor number is harmless (EBADF for a closed one).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(null_error("fcntl(F_GETFL)"));
    }
    // SAFETY: as above; only the status flags of `fd`, which the context owns, change.
    let ret = unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if ret < 0 {
        return Err(null_error("fcntl(F_SETFL, O_NONBLOCK)"));
    }
    Ok(())
}
