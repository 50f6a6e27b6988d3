//! The C side of an rdma_cm id, below the entry points: the `IdBox` behind an `rdma_cm_id`
//! pointer and the addresses it shows, the `struct rdma_event_channel` of a synchronous id's
//! private channel, and the C event (`struct rdma_cm_event`, with the new id of a
//! CONNECT_REQUEST) made for an event of cm-core.

use super::objects::{leak, registry, ChannelBox, EventBox, IdBox};
use super::verbs::cm_context;
use crate::abi::convert::{ah_to_c, gid_to_c, sockaddr_in, sockaddr_in6};
use crate::abi::*;
use crate::runtime::{Node, Signal};
use cm_core::api::{CmEvent, EventChannel};
use std::net::SocketAddr;
use std::ptr::null_mut;

/// The `IdBox` of a C id pointer.
///
/// # Safety
/// `id` came from this library (`rdma_create_id` or a CONNECT_REQUEST) and is not destroyed.
pub(super) unsafe fn idbox<'a>(id: *mut rdma_cm_id) -> &'a mut IdBox {
    // SAFETY: the caller's contract; `rdma_cm_id` is the first field of the `#[repr(C)]`
    // `IdBox`, so the pointers coincide.
    unsafe { &mut *id.cast::<IdBox>() }
}

/// Updates the C id from the CM: addresses, `verbs` and `pd` once bound to the device (`pd`:
/// the rdma_cm PD, [`super::verbs::cm_pd`]).
pub(super) fn refresh(
    b: &mut IdBox,
    addrs: Option<(Option<SocketAddr>, Option<SocketAddr>)>,
    bound: bool,
    pd: Option<*mut ibv_pd>,
) {
    let Some((src, dst)) = addrs else { return };
    if let Some(s) = src {
        match s {
            SocketAddr::V4(a) => b.c.route.addr.src.src_sin = sockaddr_in(a),
            SocketAddr::V6(a) => b.c.route.addr.src.src_sin6 = sockaddr_in6(a),
        }
        b.c.route.addr.addr.ibaddr.sgid = gid_to_c(verbs_core::Gid::from_ip(s.ip()));
    }
    if let Some(d) = dst {
        match d {
            SocketAddr::V4(a) => b.c.route.addr.dst.dst_sin = sockaddr_in(a),
            SocketAddr::V6(a) => b.c.route.addr.dst.dst_sin6 = sockaddr_in6(a),
        }
        b.c.route.addr.addr.ibaddr.dgid = gid_to_c(verbs_core::Gid::from_ip(d.ip()));
    }
    if bound && b.c.verbs.is_null() {
        b.c.verbs = cm_context();
        b.c.port_num = 1;
    }
    if let (true, true, Some(pd)) = (bound, b.c.pd.is_null(), pd) {
        b.c.pd = pd;
    }
}

/// A `ChannelBox` for `ch`, a private channel cm-core made for a synchronous id, with its
/// descriptor registered for readiness. Called under the node lock.
///
/// # Errors
/// What `socketpair(2)` returns (`EMFILE`…).
pub(super) fn private_channel(
    n: &mut Node,
    ch: EventChannel,
) -> Result<*mut rdma_event_channel, i32> {
    let signal = Signal::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    let (raw, fd) = (signal.raw_fd(), signal.ends());
    n.cm_signals.insert(ch, signal);
    Ok(leak(ChannelBox {
        c: rdma_event_channel { fd: raw },
        handle: ch,
        fd,
    })
    .cast())
}

/// Frees the box of a private channel cm-core has destroyed (librdmacm `ucma_free_id`, and
/// `rdma_migrate_id` away from a synchronous id). Nothing else waits on a private channel.
///
/// # Safety
/// `channel` was made by [`private_channel`] and is not used afterwards.
pub(super) unsafe fn free_private_channel(n: &mut Node, channel: *mut rdma_event_channel) {
    if channel.is_null() {
        return;
    }
    // SAFETY: the caller's contract; made by `leak` in `private_channel`.
    let b = unsafe { Box::from_raw(channel.cast::<ChannelBox>()) };
    n.cm_signals.remove(&b.handle);
}

/// The C event for `ev` (and, for a CONNECT_REQUEST, the new id), under the node lock so the
/// registry and the CM agree. A new id of a synchronous listener reports to a private channel
/// of its own (librdmacm `ucma_process_conn_req` → `rdma_migrate_id(id, NULL)`), which cm-core
/// made: its `ChannelBox` is made here.
pub(super) fn make_event(
    n: &mut Node,
    ev: CmEvent,
    channel: *mut rdma_event_channel,
) -> *mut EventBox {
    let addrs = n.cm().addrs(ev.id);
    let private = match (n.cm().is_sync(ev.id), n.cm().channel_of(ev.id)) {
        (Some(true), Some(ch)) if !registry().ids.contains_key(&ev.id) => {
            private_channel(n, ch).ok()
        }
        _ => None,
    };
    let channel = private.unwrap_or(channel);
    let mut reg = registry();
    let listen = ev
        .listen_id
        .and_then(|l| reg.ids.get(&l).copied())
        .unwrap_or(0) as *mut IdBox;
    let id = match reg.ids.get(&ev.id) {
        Some(&p) => p as *mut IdBox,
        None => {
            // A CONNECT_REQUEST's new id: it reports to the listener's channel with the
            // listener's context, port space and QP type (librdmacm `ucma_process_conn_req`).
            let (context, ps, qp_type) = if listen.is_null() {
                (null_mut(), RDMA_PS_TCP, IBV_QPT_RC)
            } else {
                // SAFETY: registered ids are live.
                unsafe { ((*listen).c.context, (*listen).c.ps, (*listen).c.qp_type) }
            };
            let p = leak(IdBox::new(ev.id, channel, context, ps, qp_type));
            // SAFETY: just made.
            unsafe {
                (*p).req_resources = (ev.param.responder_resources, ev.param.initiator_depth);
            }
            reg.ids.insert(ev.id, p as usize);
            p
        }
    };
    drop(reg);
    let pd = super::verbs::cm_pd_in(n).ok();
    // SAFETY: `id` is live (registered or just made).
    unsafe { refresh(&mut *id, addrs, true, pd) };
    // SAFETY: as above.
    if unsafe { (*id).c.qp_type } == IBV_QPT_UD {
        // SAFETY: as above.
        return ud_event(unsafe { &*id }, ev, listen);
    }
    let private_data = ev.param.private_data.clone();
    let b = leak(EventBox {
        c: rdma_cm_event {
            id: id.cast(),
            listen_id: listen.cast(),
            event: ev.event as rdma_cm_event_type,
            status: ev.status,
            param: rdma_cm_event_param {
                conn: rdma_conn_param {
                    private_data: std::ptr::null(),
                    private_data_len: 0,
                    responder_resources: ev.param.responder_resources,
                    initiator_depth: ev.param.initiator_depth,
                    flow_control: 0,
                    retry_count: ev.param.retry_count,
                    rnr_retry_count: ev.param.rnr_retry_count,
                    srq: u8::from(ev.param.srq),
                    qp_num: ev.param.qp_num,
                },
            },
        },
        event: ev,
        private_data,
    });
    // SAFETY: `b` was just made; the Vec's buffer does not move while the box lives.
    unsafe {
        if !(*b).private_data.is_empty() {
            (*b).c.param.conn.private_data = (*b).private_data.as_ptr().cast();
            (*b).c.param.conn.private_data_len =
                u8::try_from((*b).private_data.len()).unwrap_or(u8::MAX);
        }
    }
    b
}

/// The C event of a UD id (librdmacm `ucma_copy_ud_event`): `param.ud` with the private data,
/// the address vector, the QPN and the Q_Key; a multicast event's private data is the join's
/// `context` (`evt->event.param.ud.private_data = evt->mc->context`), with length 0.
fn ud_event(b: &IdBox, ev: CmEvent, listen: *mut IdBox) -> *mut EventBox {
    let ud = ev.ud.as_deref().copied().unwrap_or_default();
    let context = ev
        .multicast
        .and_then(|a| b.mc_contexts.iter().find(|(m, _)| *m == a))
        .map_or(0, |(_, c)| *c);
    let private_data = if ev.multicast.is_some() {
        Vec::new()
    } else {
        ev.param.private_data.clone()
    };
    let c = rdma_cm_event {
        id: std::ptr::from_ref(b).cast_mut().cast(),
        listen_id: listen.cast(),
        event: ev.event as rdma_cm_event_type,
        status: ev.status,
        param: rdma_cm_event_param {
            ud: rdma_ud_param {
                private_data: context as *const libc::c_void,
                private_data_len: 0,
                ah_attr: ah_to_c(&ud.ah_attr),
                qp_num: ud.qp_num,
                qkey: ud.qkey,
            },
        },
    };
    let b = leak(EventBox {
        c,
        event: ev,
        private_data,
    });
    // SAFETY: `b` was just made; the Vec's buffer does not move while the box lives.
    unsafe {
        if !(*b).private_data.is_empty() {
            (*b).c.param.ud.private_data = (*b).private_data.as_ptr().cast();
            (*b).c.param.ud.private_data_len =
                u8::try_from((*b).private_data.len()).unwrap_or(u8::MAX);
        }
    }
    b
}
