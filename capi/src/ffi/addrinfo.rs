//! `rdma_getaddrinfo(3)` / `rdma_freeaddrinfo`, as librdmacm 44 does it for IP addresses
//! (`librdmacm/addrinfo.c`):
//!
//! * `node` and `service` both NULL with no `hints` is `EINVAL` (−1 + `errno`);
//! * with a `node` or a `service`, the system's `getaddrinfo(3)` resolves them with the hints
//!   translated as `ucma_convert_to_ai` does (`RAI_PASSIVE` → `AI_PASSIVE`, `RAI_NUMERICHOST`
//!   → `AI_NUMERICHOST`, the family, the socket type of the QP type and the protocol of the
//!   port space), and its first answer becomes the one `rdma_addrinfo` (`ucma_convert_to_rai`):
//!   the source address with `RAI_PASSIVE` (then the only flag set), the destination
//!   otherwise; QP type and port space from the hints, else from the answer's socket type and
//!   protocol (stream → RC and `RDMA_PS_TCP`, datagram → UD and `RDMA_PS_UDP`). A failed lookup
//!   returns `getaddrinfo`'s own code (`EAI_NONAME` …, negative), as librdmacm does;
//! * with neither, the result is the hints' flags, family, QP type, port space and destination
//!   address;
//! * either way, a source address in the hints is copied when the result has none.
//!
//! `AF_IB` (hints with `RAI_FAMILY` and `ai_family` `AF_IB`) is not offered: there is no IB
//! addressing here (logged once, `EOPNOTSUPP`). Route and connect data (`ai_route`,
//! `ai_connect`, from IB ACM) are never set.

use super::objects::leak;
use super::raw::zeroed_storage;
use super::{fail, guard, unsupported};
use crate::abi::*;
use libc::{c_char, c_int};
use std::ptr::null_mut;

/// `struct rdma_addrinfo` and the addresses it points to.
#[repr(C)]
struct AddrInfoBox {
    ai: rdma_addrinfo,
    src: libc::sockaddr_storage,
    dst: libc::sockaddr_storage,
}

/// The `struct addrinfo` hints of `rai` (librdmacm `ucma_convert_to_ai`).
fn to_ai_hints(rai: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: `addrinfo` is integers and pointers: all-zero is valid (no hints, NULLs).
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if rai.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags = libc::AI_PASSIVE;
    }
    if rai.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if rai.ai_family != AF_IB {
        ai.ai_family = rai.ai_family;
    }
    ai.ai_socktype = match rai.ai_qp_type as ibv_qp_type {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match rai.ai_port_space as rdma_port_space {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_IPOIB | RDMA_PS_UDP => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// Copies the `len` bytes of the socket address at `src` into `dst` (at most its size);
/// returns the length kept.
///
/// # Safety
/// `src` is NULL or readable for `len` bytes.
unsafe fn copy_addr(
    dst: &mut libc::sockaddr_storage,
    src: *const libc::sockaddr,
    len: libc::socklen_t,
) -> libc::socklen_t {
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    if src.is_null() || n == 0 {
        return 0;
    }
    // SAFETY: `src` is readable for `len` ≥ `n` bytes (the caller's contract); `dst` holds
    // `n` bytes; a caller's buffer is not inside our box.
    unsafe {
        std::ptr::copy_nonoverlapping(src.cast::<u8>(), std::ptr::from_mut(dst).cast::<u8>(), n)
    };
    n as libc::socklen_t
}

/// The result of `getaddrinfo(node, service)` with the hints of `h`, as an `rdma_addrinfo`
/// (librdmacm `ucma_getaddrinfo` and `ucma_convert_to_rai`); the address goes into `b`. `Err`
/// is `getaddrinfo`'s code.
///
/// # Safety
/// `node` and `service` are NULL or NUL-terminated strings.
unsafe fn lookup(
    node: *const c_char,
    service: *const c_char,
    h: Option<&rdma_addrinfo>,
    b: &mut AddrInfoBox,
) -> Result<(), c_int> {
    let hints = h.map(to_ai_hints);
    let mut res: *mut libc::addrinfo = null_mut();
    // SAFETY: the strings are valid or NULL (the caller's contract); `hints` is a valid
    // `addrinfo` or NULL; `res` is written on success and freed below.
    let rc = unsafe {
        libc::getaddrinfo(
            node,
            service,
            hints.as_ref().map_or(std::ptr::null(), |a| a as *const _),
            &mut res,
        )
    };
    if rc != 0 {
        return Err(rc);
    }
    if res.is_null() {
        return Err(libc::EAI_NONAME);
    }
    // SAFETY: `getaddrinfo` succeeded: `res` is its first answer, readable until freed.
    let ai = unsafe { &*res };
    let zero = rdma_addrinfo_zeroed();
    let h = h.unwrap_or(&zero);
    b.ai.ai_qp_type = if h.ai_qp_type != 0 {
        h.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC as c_int,
            libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
            _ => 0,
        }
    };
    b.ai.ai_port_space = if h.ai_port_space != 0 {
        h.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP as c_int,
            libc::IPPROTO_UDP => RDMA_PS_UDP as c_int,
            _ => 0,
        }
    };
    b.ai.ai_family = ai.ai_family;
    // SAFETY: `ai_addr` holds `ai_addrlen` bytes (getaddrinfo(3)).
    unsafe {
        if ai.ai_flags & libc::AI_PASSIVE != 0 {
            b.ai.ai_flags = RAI_PASSIVE;
            b.ai.ai_src_len = copy_addr(&mut b.src, ai.ai_addr, ai.ai_addrlen);
        } else {
            b.ai.ai_dst_len = copy_addr(&mut b.dst, ai.ai_addr, ai.ai_addrlen);
        }
        libc::freeaddrinfo(res);
    }
    Ok(())
}

fn rdma_addrinfo_zeroed() -> rdma_addrinfo {
    rdma_addrinfo {
        ai_flags: 0,
        ai_family: 0,
        ai_qp_type: 0,
        ai_port_space: 0,
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: null_mut(),
        ai_dst_addr: null_mut(),
        ai_src_canonname: null_mut(),
        ai_dst_canonname: null_mut(),
        ai_route_len: 0,
        ai_route: null_mut(),
        ai_connect_len: 0,
        ai_connect: null_mut(),
        ai_next: null_mut(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard("rdma_getaddrinfo", -1, || {
        if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
            return fail(libc::EINVAL);
        }
        // SAFETY: NULL or a readable `struct rdma_addrinfo` (rdma_getaddrinfo(3)).
        let h = unsafe { hints.as_ref() };
        if h.is_some_and(|h| h.ai_flags & RAI_FAMILY != 0 && h.ai_family == AF_IB) {
            return fail(unsupported("rdma_getaddrinfo with AF_IB addresses"));
        }
        let mut b = Box::new(AddrInfoBox {
            ai: rdma_addrinfo_zeroed(),
            src: zeroed_storage(),
            dst: zeroed_storage(),
        });
        if !node.is_null() || !service.is_null() {
            // SAFETY: NUL-terminated strings or NULL (rdma_getaddrinfo(3)).
            if let Err(rc) = unsafe { lookup(node, service, h, &mut b) } {
                return rc;
            }
        } else if let Some(h) = h {
            b.ai.ai_flags = h.ai_flags;
            b.ai.ai_family = h.ai_family;
            b.ai.ai_qp_type = h.ai_qp_type;
            b.ai.ai_port_space = h.ai_port_space;
            // SAFETY: the hints' address holds `ai_dst_len` bytes.
            b.ai.ai_dst_len = unsafe { copy_addr(&mut b.dst, h.ai_dst_addr, h.ai_dst_len) };
        }
        if let Some(h) = h {
            if b.ai.ai_src_len == 0 && h.ai_src_len != 0 {
                // SAFETY: the hints' address holds `ai_src_len` bytes.
                b.ai.ai_src_len = unsafe { copy_addr(&mut b.src, h.ai_src_addr, h.ai_src_len) };
            }
        }
        let b = leak(*b);
        // SAFETY: `b` was just made; the addresses live in the same box, which is freed by
        // `rdma_freeaddrinfo` only.
        unsafe {
            if (*b).ai.ai_src_len != 0 {
                (*b).ai.ai_src_addr = (&raw mut (*b).src).cast();
            }
            if (*b).ai.ai_dst_len != 0 {
                (*b).ai.ai_dst_addr = (&raw mut (*b).dst).cast();
            }
            *res = b.cast();
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard("rdma_freeaddrinfo", (), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: `res` came from `rdma_getaddrinfo`: a list of `AddrInfoBox`es.
            let b = unsafe { Box::from_raw(p.cast::<AddrInfoBox>()) };
            p = b.ai.ai_next;
        }
    })
}
