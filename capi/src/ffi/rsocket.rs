//! `<rdma/rsocket.h>`, the socket calls: `rsocket`, `rbind`, `rlisten`, `raccept`,
//! `rconnect`, `rshutdown`, `rclose`, `rgetpeername`, `rgetsockname`, `rsetsockopt`,
//! `rgetsockopt`, `rfcntl`. The logic is safe code in [`crate::runtime::rsocket`]; this file
//! reads and writes the C arguments. Return convention (rsocket.c): 0 or the value, else −1
//! with `errno`.

use super::raw::sockaddr_from_c;
use super::{fail, guard, rt, unsupported};
use crate::abi::convert::{sockaddr_in, sockaddr_in6};
use crate::runtime::rsocket::{api, How};
use crate::runtime::Runtime;
use libc::{c_int, c_long, c_void, sockaddr, socklen_t};
use std::net::SocketAddr;

/// The runtime, or −1 with `errno` from `f`'s error.
pub(super) fn call(
    name: &'static str,
    f: impl FnOnce(&'static Runtime) -> Result<c_int, i32>,
) -> c_int {
    guard(name, -1, || match rt().and_then(f) {
        Ok(v) => v,
        Err(e) => fail(e),
    })
}

/// Reads the socket address of `len` bytes at `sa`.
///
/// # Safety
/// `sa` is NULL or points to `len` readable bytes.
pub(super) unsafe fn addr_in(sa: *const sockaddr, len: socklen_t) -> Result<SocketAddr, i32> {
    if sa.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-NULL, at least the family is readable (caller).
    let family = i32::from(unsafe { (*sa).sa_family });
    let need = match family {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(libc::EAFNOSUPPORT),
    };
    if (len as usize) < need {
        return Err(libc::EINVAL);
    }
    // SAFETY: the family's whole struct is readable (checked against `len`).
    unsafe { sockaddr_from_c(sa) }.ok_or(libc::EAFNOSUPPORT)
}

/// Writes `a` to `out` as getsockname(2) does (rsocket.c `rs_copy_addr`): at most `*len`
/// bytes, `*len` set to the address's full size. Nothing when `out` or `len` is NULL.
///
/// # Safety
/// `out` is NULL or writable for `*len` bytes; `len` is NULL or a valid `socklen_t`.
pub(super) unsafe fn addr_out(a: SocketAddr, out: *mut sockaddr, len: *mut socklen_t) {
    if out.is_null() || len.is_null() {
        return;
    }
    let (buf, size): ([u8; 28], usize) = match a {
        SocketAddr::V4(v4) => {
            let s = sockaddr_in(v4);
            let mut b = [0u8; 28];
            // SAFETY: `sockaddr_in` is plain data of 16 bytes; read as bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts((&s as *const libc::sockaddr_in).cast::<u8>(), 16)
            };
            b[..16].copy_from_slice(bytes);
            (b, 16)
        }
        SocketAddr::V6(v6) => {
            let s = sockaddr_in6(v6);
            let mut b = [0u8; 28];
            // SAFETY: `sockaddr_in6` is plain data of 28 bytes; read as bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts((&s as *const libc::sockaddr_in6).cast::<u8>(), 28)
            };
            b.copy_from_slice(bytes);
            (b, 28)
        }
    };
    // SAFETY: `len` is a valid socklen_t; `out` has room for `*len` bytes (caller).
    unsafe {
        let n = (*len as usize).min(size);
        std::ptr::copy_nonoverlapping(buf.as_ptr(), out.cast::<u8>(), n);
        *len = size as socklen_t;
    }
}

#[no_mangle]
pub unsafe extern "C" fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if crate::runtime::starting_here() {
        // The runtime's own UDP socket, through librspreload's `socket`: a real socket.
        return fail(libc::ENOTSUP);
    }
    call("rsocket", |r| {
        let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
        if domain == libc::AF_IB {
            return Err(unsupported("rsocket(AF_IB)"));
        }
        if matches!(domain, libc::AF_INET | libc::AF_INET6) && base == libc::SOCK_DGRAM {
            return Err(unsupported("rsocket(SOCK_DGRAM)"));
        }
        api::rsocket(r, domain, ty, protocol)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    call("rbind", |r| {
        // SAFETY: bind(2)'s contract: `addr` is readable for `addrlen` bytes.
        let a = unsafe { addr_in(addr, addrlen) }?;
        api::rbind(r, socket, a).map(|()| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    call("rlisten", |r| {
        api::rlisten(r, socket, backlog)?;
        let addr = api::rgetsockname(r, socket).map_or_else(|_| String::new(), |a| a.to_string());
        // Tests wait for this line (`RUST_LOG=rnic=info`) before starting a client.
        tracing::info!("rdma_listen on {addr} (rlisten, rsocket {socket})");
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn raccept(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    call("raccept", |r| {
        let (fd, peer) = api::raccept(r, socket)?;
        if let Some(p) = peer {
            // SAFETY: accept(2)'s contract for `addr`/`addrlen` (each may be NULL).
            unsafe { addr_out(p, addr, addrlen) };
        }
        Ok(fd)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rconnect(
    socket: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> c_int {
    call("rconnect", |r| {
        // SAFETY: connect(2)'s contract: `addr` is readable for `addrlen` bytes.
        let a = unsafe { addr_in(addr, addrlen) }?;
        api::rconnect(r, socket, a).map(|()| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    call("rshutdown", |r| {
        let how = match how {
            libc::SHUT_RD => How::Read,
            libc::SHUT_WR => How::Write,
            libc::SHUT_RDWR => How::Both,
            _ => return Err(libc::EINVAL),
        };
        api::rshutdown(r, socket, how).map(|()| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rclose(socket: c_int) -> c_int {
    call("rclose", |r| api::rclose(r, socket).map(|()| 0))
}

#[no_mangle]
pub unsafe extern "C" fn rgetpeername(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    call("rgetpeername", |r| {
        let a = api::rgetpeername(r, socket)?;
        // SAFETY: getpeername(2)'s contract.
        unsafe { addr_out(a, addr, addrlen) };
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockname(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    call("rgetsockname", |r| {
        let a = api::rgetsockname(r, socket)?;
        // SAFETY: getsockname(2)'s contract.
        unsafe { addr_out(a, addr, addrlen) };
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    call("rsetsockopt", |r| {
        let val: &[u8] = if optval.is_null() || optlen == 0 {
            &[]
        } else {
            // SAFETY: setsockopt(2)'s contract: `optval` is readable for `optlen` bytes.
            unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen as usize) }
        };
        api::rsetsockopt(r, socket, level, optname, val).map(|()| 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    call("rgetsockopt", |r| {
        if optval.is_null() || optlen.is_null() {
            return Err(libc::EFAULT);
        }
        let v = api::rgetsockopt(r, socket, level, optname)?;
        // SAFETY: getsockopt(2)'s contract: `optval` is writable for `*optlen` bytes.
        unsafe {
            let n = (*optlen as usize).min(v.len());
            std::ptr::copy_nonoverlapping(v.as_ptr(), optval.cast::<u8>(), n);
            *optlen = n as socklen_t;
        }
        Ok(0)
    })
}

/// `int rfcntl(int socket, int cmd, ... /* arg */)`. Declared with one `long` argument in
/// place of the variadic part: on x86-64 (System V) a variadic integer argument travels in the
/// same register as the third fixed one, so `rfcntl(fd, F_SETFL, O_NONBLOCK)` from C arrives
/// here intact; for `F_GETFL` the argument is not read.
#[no_mangle]
pub unsafe extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
    call("rfcntl", |r| match cmd {
        libc::F_GETFL => api::getfl(r, socket),
        libc::F_SETFL => api::setfl(r, socket, arg as c_int).map(|()| 0),
        _ => Err(libc::ENOTSUP),
    })
}
