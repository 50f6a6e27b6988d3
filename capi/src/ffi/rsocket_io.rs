//! `<rdma/rsocket.h>`, the data calls: `rrecv`, `rrecvfrom`, `rrecvmsg`, `rread`, `rreadv`,
//! `rsend`, `rsendto`, `rsendmsg`, `rwrite`, `rwritev`, and the iomap calls `riomap`,
//! `riounmap`, `riowrite`. The application's buffers are read or written only during the call
//! (send(2)/recv(2)'s contract); `riomap`'s buffer becomes a region the peer writes into
//! ([`UserMemory`]). Return convention (rsocket.c): the count, else −1 with `errno`.

use super::memory::UserMemory;
use super::rsocket::addr_out;
use super::{fail, guard, rt};
use crate::runtime::rsocket::api;
use crate::runtime::Runtime;
use libc::{c_int, c_void, iovec, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::Arc;

/// The runtime, or −1 with `errno` from `f`'s error.
fn call_sz(name: &'static str, f: impl FnOnce(&'static Runtime) -> Result<usize, i32>) -> ssize_t {
    guard(name, -1, || match rt().and_then(f) {
        Ok(n) => n as ssize_t,
        Err(e) => fail(e) as ssize_t,
    })
}

/// `len` bytes at `buf` as a slice (empty for NULL or 0).
///
/// # Safety
/// `buf` is NULL or readable for `len` bytes for the duration of the call.
unsafe fn bytes<'a>(buf: *const c_void, len: size_t) -> &'a [u8] {
    if buf.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
}

/// `len` bytes at `buf` as a mutable slice (empty for NULL or 0).
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes for the duration of the call, not otherwise
/// referenced by Rust.
unsafe fn bytes_mut<'a>(buf: *mut c_void, len: size_t) -> &'a mut [u8] {
    if buf.is_null() || len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
}

/// The buffers of an iovec array.
///
/// # Safety
/// `iov` is NULL or `cnt` readable iovecs, each readable for its length.
unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> Result<Vec<&'a [u8]>, i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if iov.is_null() || cnt == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's contract.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    // SAFETY: each iovec's buffer is readable for its length (caller).
    Ok(v.iter()
        .map(|e| unsafe { bytes(e.iov_base, e.iov_len) })
        .collect())
}

/// readv(2) over rsockets: the first buffer as `rrecv` with `flags`, the next ones with what
/// is already there (`MSG_DONTWAIT`), stopping at the first short read.
///
/// # Safety
/// As [`iovecs`], each buffer writable.
unsafe fn recv_iov(
    r: &Runtime,
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    flags: c_int,
) -> Result<usize, i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if iov.is_null() || cnt == 0 {
        return Ok(0);
    }
    // SAFETY: the caller's contract.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut done = 0;
    for (i, e) in v.iter().enumerate() {
        // SAFETY: each buffer writable for its length (caller).
        let buf = unsafe { bytes_mut(e.iov_base, e.iov_len) };
        if buf.is_empty() {
            continue;
        }
        let f = if i == 0 || done == 0 {
            flags
        } else {
            flags | libc::MSG_DONTWAIT
        };
        match api::rrecv(r, fd, buf, f) {
            Ok(n) => {
                done += n;
                if n < e.iov_len {
                    break;
                }
            }
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[no_mangle]
pub unsafe extern "C" fn rrecv(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    call_sz("rrecv", |r| {
        // SAFETY: recv(2)'s contract.
        api::rrecv(r, socket, unsafe { bytes_mut(buf, len) }, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    src_addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    call_sz("rrecvfrom", |r| {
        // SAFETY: recvfrom(2)'s contract.
        let n = api::rrecv(r, socket, unsafe { bytes_mut(buf, len) }, flags)?;
        if n > 0 && !src_addr.is_null() {
            if let Ok(a) = api::rgetpeername(r, socket) {
                // SAFETY: recvfrom(2)'s contract for `src_addr`/`addrlen`.
                unsafe { addr_out(a, src_addr, addrlen) };
            }
        }
        Ok(n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    call_sz("rrecvmsg", |r| {
        if msg.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: recvmsg(2)'s contract: `msg` is a valid msghdr.
        let m = unsafe { &*msg };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(libc::ENOTSUP);
        }
        // SAFETY: as above, for its iovecs.
        unsafe { recv_iov(r, socket, m.msg_iov, m.msg_iovlen as c_int, flags) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    call_sz("rread", |r| {
        // SAFETY: read(2)'s contract.
        api::rrecv(r, socket, unsafe { bytes_mut(buf, count) }, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: readv(2)'s contract.
    call_sz("rreadv", |r| unsafe { recv_iov(r, socket, iov, iovcnt, 0) })
}

#[no_mangle]
pub unsafe extern "C" fn rsend(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    call_sz("rsend", |r| {
        // SAFETY: send(2)'s contract.
        api::rsend(r, socket, unsafe { bytes(buf, len) }, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    dest_addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    call_sz("rsendto", |r| {
        // A stream socket's destination is its peer: the address is ignored, as Linux TCP
        // does (rsocket.c answers EISCONN, which stops sockperf's TCP client).
        let _ = (dest_addr, addrlen);
        // SAFETY: sendto(2)'s contract.
        api::rsend(r, socket, unsafe { bytes(buf, len) }, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    call_sz("rsendmsg", |r| {
        if msg.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: sendmsg(2)'s contract: `msg` is a valid msghdr.
        let m = unsafe { &*msg };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(libc::ENOTSUP);
        }
        // SAFETY: as above, for its iovecs.
        let bufs = unsafe { iovecs(m.msg_iov, m.msg_iovlen as c_int) }?;
        api::rsendv(r, socket, &bufs, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    call_sz("rwrite", |r| {
        // SAFETY: write(2)'s contract.
        api::rsend(r, socket, unsafe { bytes(buf, count) }, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    call_sz("rwritev", |r| {
        // SAFETY: writev(2)'s contract.
        let bufs = unsafe { iovecs(iov, iovcnt) }?;
        api::rsendv(r, socket, &bufs, 0)
    })
}

/// `riomap(socket, buf, len, prot, flags, offset)`: `prot` `PROT_WRITE` makes `buf` a region
/// the peer may `riowrite` into (announced in order with the stream), `PROT_NONE` a local
/// registration only; `offset` −1 names the region by `buf`'s address. The buffer must stay
/// mapped until `riounmap`.
#[no_mangle]
pub unsafe extern "C" fn riomap(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    prot: c_int,
    _flags: c_int,
    offset: off_t,
) -> off_t {
    guard("riomap", -1, || {
        let res = rt().and_then(|r| {
            if prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0 || buf.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: riomap's contract: `buf` is `len` bytes the application keeps mapped
            // until `riounmap` (as ibv_reg_mr's).
            let mem = unsafe { UserMemory::new(buf as usize, len) };
            let writable = prot & libc::PROT_WRITE != 0;
            api::riomap(r, socket, Arc::new(mem), buf as u64, writable, offset)
        });
        match res {
            Ok(o) => o as off_t,
            Err(e) => fail(e) as off_t,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> c_int {
    super::rsocket::call("riounmap", |r| {
        api::riounmap(r, socket, buf as u64, len as u64).map(|()| 0)
    })
}

/// `riowrite`: returns the count, or `(size_t)-1` with `errno`.
#[no_mangle]
pub unsafe extern "C" fn riowrite(
    socket: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
    flags: c_int,
) -> size_t {
    guard("riowrite", usize::MAX, || {
        let res = rt().and_then(|r| {
            // SAFETY: riowrite's contract: `buf` is readable for `count` bytes.
            let data = unsafe { bytes(buf, count) };
            api::riowrite(r, socket, data, offset as u64, flags)
        });
        match res {
            Ok(n) => n,
            Err(e) => {
                fail(e);
                usize::MAX
            }
        }
    })
}
