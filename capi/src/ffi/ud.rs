//! UD verbs beyond the QP itself: multicast attachment (`ibv_attach_mcast`,
//! `ibv_detach_mcast`) and the address vector that answers a received datagram
//! (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`). Return conventions as in
//! [`super::verbs`]: the errno value for the `int` verbs, −1 + `errno` for
//! `ibv_init_ah_from_wc`, NULL + `errno` for the AH.

use super::qp::ibv_create_ah;
use super::raw::gid_from_c;
use super::{errno_of, fail, fail_null, guard, rt};
use crate::abi::convert::{ah_from_wc, ah_to_c, GidType, WcRoute};
use crate::abi::*;
use libc::c_int;
use std::ptr::null_mut;
use verbs_core::{Device, QpHandle};

/// `ibv_attach_mcast` / `ibv_detach_mcast` on the device.
///
/// # Safety
/// `qp` is NULL or a live QP of this library; `gid` NULL or readable.
unsafe fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16, attach: bool) -> c_int {
    let (Ok(r), false) = (rt(), qp.is_null() || gid.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's contract.
    let (h, g) = unsafe { (QpHandle((*qp).handle), gid_from_c(&*gid)) };
    let res = r.with(|n, _| {
        if attach {
            n.dev().attach_mcast(h, g, lid)
        } else {
            n.dev().detach_mcast(h, g, lid)
        }
    });
    match res {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `ibv_attach_mcast(3)`: the UD QP receives the datagrams sent to the group `gid` (a
/// multicast GID: `::ffff:224.0.0.0/100` or `ff00::/8`; `lid` 0 on RoCE) by any RNIC, this
/// one included (`docs/capi.md`, "Multicast"). 0, or `EINVAL` (not a multicast GID, not a UD
/// QP), `ENOMEM` (rxe's limits: 56 QPs a group).
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    guard("ibv_attach_mcast", libc::EIO, || {
        // SAFETY: the caller's arguments (ibv_attach_mcast(3)).
        unsafe { mcast(qp, gid, lid, true) }
    })
}

/// `ibv_detach_mcast(3)`: undoes `ibv_attach_mcast`; `EINVAL` when the QP is not attached.
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    guard("ibv_detach_mcast", libc::EIO, || {
        // SAFETY: the caller's arguments (ibv_detach_mcast(3)).
        unsafe { mcast(qp, gid, lid, false) }
    })
}

/// `ibv_init_ah_from_wc(3)`: the address vector back to the sender of the datagram of `wc`
/// whose receive buffer starts with `grh` (libibverbs `verbs.c`, through
/// [`crate::abi::convert::ah_from_wc`]): the GRH's RoCEv2 IPv4 (or IPv6) header names the
/// sender and the GID it was sent to, which must be this port's. 0, or −1 with `errno`
/// (`EINVAL` for a datagram sent to a multicast group or another GID, `EPROTONOSUPPORT` for a
/// GRH of neither IP version).
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard("ibv_init_ah_from_wc", -1, || {
        let (Ok(r), false) = (
            rt(),
            context.is_null() || wc.is_null() || grh.is_null() || ah_attr.is_null(),
        ) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `wc` is a readable work completion and `grh` 40 readable bytes (the start
        // of the datagram's receive buffer), ibv_init_ah_from_wc(3).
        let (route, bytes) = unsafe {
            let w = &*wc;
            let route = WcRoute {
                wc_flags: w.wc_flags,
                slid: w.slid,
                sl: w.sl,
                dlid_path_bits: w.dlid_path_bits,
            };
            (route, *grh.cast::<[u8; 40]>())
        };
        let gid = r.with_quiet(|n, _| n.device().query_gid(1, 0));
        let table = match gid {
            Ok(g) if port_num == 1 => vec![(g, GidType::RoceV2)],
            _ => Vec::new(),
        };
        match ah_from_wc(&route, &bytes, port_num, &table) {
            Ok(ah) => {
                // SAFETY: `ah_attr` is writable (ibv_init_ah_from_wc(3)).
                unsafe { *ah_attr = ah_to_c(&ah) };
                0
            }
            Err(e) => fail(e),
        }
    })
}

/// `ibv_create_ah_from_wc(3)`: `ibv_init_ah_from_wc`, then `ibv_create_ah` on `pd`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    guard("ibv_create_ah_from_wc", null_mut(), || {
        if pd.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: a zeroed address vector is a valid one to fill.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `pd` is live; the other pointers are the caller's (ibv_create_ah_from_wc(3)).
        let ret = unsafe { ibv_init_ah_from_wc((*pd).context, port_num, wc, grh, &mut attr) };
        if ret != 0 {
            return null_mut(); // errno set
        }
        // SAFETY: `pd` is live and `attr` filled.
        unsafe { ibv_create_ah(pd, &mut attr) }
    })
}
