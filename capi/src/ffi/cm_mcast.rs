//! librdmacm's multicast calls: `rdma_join_multicast`, `rdma_join_multicast_ex`,
//! `rdma_leave_multicast` (rdma-core `librdmacm/cma.c`: `rdma_join_multicast2`,
//! `rdma_leave_multicast`). cm-core joins the id to the group and queues MULTICAST_JOIN; when
//! it is fetched, the id's QP is attached to the group (`ucma_process_join`); the C event's
//! `param.ud.private_data` is the join's `context` (cm_id.rs). Return convention: 0, or −1
//! with `errno`.

use super::cm_id::{idbox, refresh};
use super::cm_sync::complete_after;
use super::raw::sockaddr_from_c;
use super::{errno_of, fail, guard, rt, unsupported};
use crate::abi::*;
use libc::{c_int, c_void};
use std::net::SocketAddr;

/// The join of `id` to the group of `addr`.
///
/// # Safety
/// `id` is NULL or a live id of this library; `addr` NULL or a readable socket address.
unsafe fn join(
    name: &'static str,
    id: *mut rdma_cm_id,
    addr: *const libc::sockaddr,
    send_only: bool,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract. librdmacm's `ucma_addrlen`: no address, or one of
    // another family, is EINVAL.
    let a = unsafe { sockaddr_from_c(addr) };
    let (Ok(r), false, Some(a)) = (rt(), id.is_null(), a) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the caller's contract.
    let b = unsafe { idbox(id) };
    let h = b.handle;
    let (res, addrs) = r.with(|n, _| {
        // Under the node lock, as `make_event` reads the contexts there: the event can be
        // fetched by another thread as soon as the join is made.
        b.mc_contexts.push((a, context as usize));
        let res = n.split().0.join_multicast(h, a, send_only);
        if res.is_err() {
            b.mc_contexts.pop();
        }
        (res, n.cm().addrs(h))
    });
    refresh(b, addrs, false, None);
    tracing::debug!(id = h.0, %a, send_only, "{name}: {res:?}");
    let ret = match res {
        Ok(()) => 0,
        Err(e) => fail(errno_of(&e)),
    };
    // SAFETY: as above (a synchronous id waits for its MULTICAST_JOIN, `ucma_complete`).
    unsafe { complete_after(ret, id) }
}

/// `rdma_join_multicast(3)`: joins the group of `addr` (an IPv4 address: the group's GID is
/// `::ffff:a.b.c.d`) as a full member; `RDMA_CM_EVENT_MULTICAST_JOIN` follows with the UD
/// parameters to send to the group (QPN 0xFFFFFF, `RDMA_UDP_QKEY`, an address vector), and
/// the id's QP, if it has one then, is attached to the group when the event is fetched.
/// `EINVAL` for an id not bound to the device (resolve or bind it first) or not in
/// ADDR_BOUND/ADDR_RESOLVED, or the zero address; `EOPNOTSUPP` for an IPv6 group.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    guard("rdma_join_multicast", -1, || {
        // SAFETY: the caller's arguments (rdma_join_multicast(3)).
        unsafe { join("rdma_join_multicast", id, addr, false, context) }
    })
}

/// `rdma_join_multicast_ex(3)`: as `rdma_join_multicast` with the attributes' address and
/// join flags, both required (`EINVAL` without; a comp_mask bit past them is `ENOTSUP`); a
/// send-only full member (`RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`) is not attached.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    guard("rdma_join_multicast_ex", -1, || {
        // SAFETY: NULL or a readable attribute block (rdma_join_multicast_ex(3)).
        let Some(a) = (unsafe { mc_join_attr.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return fail(unsupported(
                "rdma_join_multicast_ex with unknown attributes",
            ));
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0
            || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
        {
            return fail(libc::EINVAL);
        }
        let send_only = a.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
        // SAFETY: the caller's arguments.
        unsafe { join("rdma_join_multicast_ex", id, a.addr, send_only, context) }
    })
}

/// `rdma_leave_multicast(3)`: the id's join of `addr` goes (its QP detached from the group,
/// its MULTICAST_JOIN dropped if not read yet); then, as librdmacm, it waits until every event
/// of the join returned by `rdma_get_cm_event` is acked. `EADDRNOTAVAIL` when the id did not
/// join `addr`; `EINVAL` for no address.
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    guard("rdma_leave_multicast", -1, || {
        // SAFETY: NULL or a readable socket address (rdma_leave_multicast(3)).
        let a = unsafe { sockaddr_from_c(addr) };
        let (Ok(r), false, Some(a)) = (rt(), id.is_null(), a) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is a live id of this library.
        let b = unsafe { idbox(id) };
        let h = b.handle;
        let res = r.with(|n, _| {
            let (cm, dev) = n.split();
            let res = cm.leave_multicast(dev, h, a);
            if res.is_ok() {
                forget_context(&mut b.mc_contexts, a);
            }
            res
        });
        tracing::debug!(id = h.0, %a, "rdma_leave_multicast: {res:?}");
        if let Err(e) = res {
            return fail(errno_of(&e));
        }
        r.wait_for_acks(|| r.with_quiet(|n, _| n.cm().multicast_unacked(h, a) == 0));
        0
    })
}

/// Drops the first context kept for a join of `a`.
fn forget_context(contexts: &mut Vec<(SocketAddr, usize)>, a: SocketAddr) {
    if let Some(i) = contexts.iter().position(|(m, _)| *m == a) {
        contexts.remove(i);
    }
}
