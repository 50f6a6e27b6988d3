//! The conversions that [`verbs_abi::convert`] leaves to the FFI crate because each needs
//! `unsafe`: reading a union member, reading a socket address behind a pointer, zeroing a C
//! struct.

use crate::abi::convert::{sockaddr_in6_to_rust, sockaddr_in_to_rust};
use crate::abi::*;
use std::net::SocketAddr;
use verbs_core::Gid;

/// A `union ibv_gid` as a [`Gid`].
pub fn gid_from_c(g: &ibv_gid) -> Gid {
    // SAFETY: both members of `ibv_gid` are plain integers covering the same 16 bytes, so any
    // bit pattern is a valid `raw`.
    Gid(unsafe { g.raw })
}

/// An all-zero `sockaddr_storage`.
pub fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: `sockaddr_storage` is plain integers and padding; all-zero is a valid value
    // (AF_UNSPEC).
    unsafe { std::mem::zeroed() }
}

/// Reads the socket address at `sa` (`AF_INET` or `AF_INET6`).
///
/// # Safety
/// `sa` is NULL or points to a `sockaddr` whose family's struct is readable in full.
pub unsafe fn sockaddr_from_c(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-NULL and readable as a `sockaddr` (caller); the family selects the struct,
    // which the caller guarantees is readable in full.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => Some(sockaddr_in_to_rust(&*(sa.cast::<libc::sockaddr_in>()))),
            libc::AF_INET6 => Some(sockaddr_in6_to_rust(&*(sa.cast::<libc::sockaddr_in6>()))),
            _ => None,
        }
    }
}
