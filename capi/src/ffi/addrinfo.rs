//! `rdma_getaddrinfo(3)` / `rdma_freeaddrinfo`: names and ports to `struct rdma_addrinfo`,
//! as librdmacm does for IP addresses (its `ucma_convert_to_rai`): with `RAI_PASSIVE` the
//! address is the source (to bind and listen on), otherwise the destination. Host names go
//! through the system resolver; IPv4 results come first.

use super::objects::leak;
use super::raw::zeroed_storage;
use super::{fail, guard};
use crate::abi::convert::{sockaddr_in, sockaddr_in6};
use crate::abi::*;
use libc::{c_char, c_int};
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::ptr::null_mut;

/// `struct rdma_addrinfo` and the address it points to.
#[repr(C)]
struct AddrInfoBox {
    ai: rdma_addrinfo,
    addr: libc::sockaddr_storage,
}

/// Resolves `node` (a name or numeric address; NULL: the wildcard, or loopback for an active
/// lookup, as getaddrinfo) and `service` (a port number; NULL: 0).
fn resolve(node: Option<&str>, service: Option<&str>, passive: bool) -> Result<SocketAddr, c_int> {
    let port: u16 = match service {
        None => 0,
        Some(s) => s.trim().parse().map_err(|_| libc::EINVAL)?,
    };
    let Some(node) = node else {
        let ip = if passive {
            Ipv4Addr::UNSPECIFIED
        } else {
            Ipv4Addr::LOCALHOST
        };
        return Ok(SocketAddr::new(IpAddr::V4(ip), port));
    };
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let mut all: Vec<SocketAddr> = (node, port)
        .to_socket_addrs()
        .map_err(|_| libc::EADDRNOTAVAIL)?
        .collect();
    all.sort_by_key(|a| !a.is_ipv4());
    all.first().copied().ok_or(libc::EADDRNOTAVAIL)
}

/// # Safety
/// A non-NULL `p` is a NUL-terminated string.
unsafe fn opt_str<'a>(p: *const c_char) -> Result<Option<&'a str>, c_int> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| libc::EINVAL)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard("rdma_getaddrinfo", -1, || {
        if res.is_null() || (node.is_null() && service.is_null()) {
            return fail(libc::EINVAL);
        }
        // SAFETY: NUL-terminated strings or NULL (rdma_getaddrinfo(3)).
        let (node, service) = match unsafe { (opt_str(node), opt_str(service)) } {
            (Ok(n), Ok(s)) => (n, s),
            _ => return fail(libc::EINVAL),
        };
        // SAFETY: NULL or a readable `struct rdma_addrinfo`.
        let h = unsafe { hints.as_ref() };
        let flags = h.map_or(0, |h| h.ai_flags);
        let passive = flags & RAI_PASSIVE != 0;
        let addr = match resolve(node, service, passive) {
            Ok(a) => a,
            Err(e) => return fail(e),
        };
        let mut storage = zeroed_storage();
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = sockaddr_in(a);
                // SAFETY: `sockaddr_storage` is larger than and aligned for `sockaddr_in`.
                unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = sockaddr_in6(a);
                // SAFETY: as above, for `sockaddr_in6`.
                unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        let b = leak(AddrInfoBox {
            ai: rdma_addrinfo {
                ai_flags: flags,
                ai_family: if addr.is_ipv4() {
                    libc::AF_INET
                } else {
                    libc::AF_INET6
                },
                ai_qp_type: h
                    .map(|h| h.ai_qp_type)
                    .filter(|t| *t != 0)
                    .unwrap_or(IBV_QPT_RC as c_int),
                ai_port_space: h
                    .map(|h| h.ai_port_space)
                    .filter(|p| *p != 0)
                    .unwrap_or(RDMA_PS_TCP as c_int),
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
            },
            addr: storage,
        });
        // SAFETY: `b` was just made; the address lives in the same box.
        unsafe {
            let p = (&raw mut (*b).addr).cast::<libc::sockaddr>();
            if passive {
                (*b).ai.ai_src_addr = p;
                (*b).ai.ai_src_len = len as libc::socklen_t;
            } else {
                (*b).ai.ai_dst_addr = p;
                (*b).ai.ai_dst_len = len as libc::socklen_t;
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
