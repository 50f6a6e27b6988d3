//! librdmacm: event channels, ids, address and route resolution, QP creation on an id,
//! connect/listen/accept/reject/disconnect, events. Each call is the same call of
//! [`cm_core::api::RdmaCm`] (the librdmacm-side layer, which does librdmacm's QP transitions and
//! its fetch-time work in `get_cm_event`); this file adds what librdmacm adds around the kernel:
//! the C structs, blocking on the channel's fd, and `rdma_destroy_id`'s wait for acks.
//! Return convention: 0, or -1 with `errno`.

use super::convert::*;
use super::objects::{leak, registry, ChannelBox, EventBox, IdBox};
use super::verbs::{cm_context, cm_pd, create_qp};
use super::{errno_of, fail, fail_null, guard, rt, unsupported};
use crate::abi::*;
use crate::runtime::{wait_token, Signal};
use cm_core::api::{CmEvent, CmIdHandle, ConnParam};
use cm_core::engine::QpAction;
use cm_core::wire::RdmaPortSpace;
use libc::{c_char, c_int, c_void};
use std::net::SocketAddr;
use std::ptr::null_mut;
use std::sync::Arc;
use verbs_core::{AccessFlags, Errno, Error};

/// The `IdBox` of a C id pointer.
///
/// # Safety
/// `id` came from this library (`rdma_create_id` or a CONNECT_REQUEST) and is not destroyed.
unsafe fn idbox<'a>(id: *mut rdma_cm_id) -> &'a mut IdBox {
    // SAFETY: the caller's contract; `rdma_cm_id` is the first field of the `#[repr(C)]`
    // `IdBox`, so the pointers coincide.
    unsafe { &mut *id.cast::<IdBox>() }
}

/// Updates the C id from the CM: addresses, `verbs` once bound to the device.
fn refresh(b: &mut IdBox, addrs: Option<(Option<SocketAddr>, Option<SocketAddr>)>, bound: bool) {
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
}

/// Runs `f` on the CM with the id's handle and refreshes the C id; 0 or -1 + errno.
///
/// # Safety
/// As [`idbox`].
unsafe fn id_call(
    name: &'static str,
    id: *mut rdma_cm_id,
    bound_after: bool,
    f: impl FnOnce(&mut crate::runtime::Node, verbs_core::SimTime, CmIdHandle) -> Result<(), Error>,
) -> c_int {
    guard(name, -1, || {
        let (Ok(r), false) = (rt(), id.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: the caller's contract.
        let b = unsafe { idbox(id) };
        let h = b.handle;
        let (res, addrs) = r.with(|n, now| {
            let res = f(n, now, h);
            (res, n.cm().addrs(h))
        });
        refresh(b, addrs, bound_after && res.is_ok());
        tracing::debug!(id = h.0, "{name}: {res:?}");
        match res {
            Ok(()) => 0,
            Err(e) => fail(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard("rdma_create_event_channel", null_mut(), || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail_null(e),
        };
        let signal = match Signal::new() {
            Ok(s) => s,
            Err(e) => return fail_null(e.raw_os_error().unwrap_or(libc::EMFILE)),
        };
        let (raw, fd) = (signal.raw_fd(), signal.fd());
        let handle = r.with(|n, _| {
            let (cm, _) = n.split();
            let ch = cm.create_event_channel();
            n.cm_signals.insert(ch, signal);
            ch
        });
        leak(ChannelBox {
            c: rdma_event_channel { fd: raw },
            handle,
            fd,
        })
        .cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard("rdma_destroy_event_channel", (), || {
        let (Ok(r), false) = (rt(), channel.is_null()) else {
            return;
        };
        let b = channel.cast::<ChannelBox>();
        // SAFETY: `channel` came from `rdma_create_event_channel`.
        let h = unsafe { (*b).handle };
        let res = r.with(|n, _| {
            let res = n.split().0.destroy_event_channel(h);
            if res.is_ok() {
                n.cm_signals.remove(&h);
            }
            res
        });
        match res {
            // SAFETY: as above; freed once, after the CM forgot it.
            Ok(()) => drop(unsafe { Box::from_raw(b) }),
            // librdmacm frees it regardless; keeping it alive is the safe choice while ids
            // still report to it.
            Err(e) => tracing::warn!("rdma_destroy_event_channel: {e} (channel kept)"),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    guard("rdma_create_id", -1, || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        if channel.is_null() {
            return fail(unsupported(
                "rdma_create_id without an event channel (synchronous id)",
            ));
        }
        let Some(space) = u16::try_from(ps)
            .ok()
            .and_then(|p| RdmaPortSpace::try_from(p).ok())
        else {
            return fail(libc::EINVAL);
        };
        let qp_type = match space {
            RdmaPortSpace::Udp | RdmaPortSpace::Ipoib => IBV_QPT_UD,
            _ => IBV_QPT_RC,
        };
        // SAFETY: `channel` came from `rdma_create_event_channel`.
        let ch = unsafe { (*channel.cast::<ChannelBox>()).handle };
        let made = r.with(|n, _| {
            let h = n.split().0.create_id(ch, space)?;
            let p = leak(IdBox::new(h, channel, context, ps, qp_type));
            registry().ids.insert(h, p as usize);
            Ok::<_, Error>(p)
        });
        match made {
            Ok(p) => {
                // SAFETY: `id` is a writable out-parameter (rdma_create_id(3)).
                unsafe { *id = p.cast() };
                0
            }
            Err(e) => fail(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    guard("rdma_bind_addr", -1, || {
        // SAFETY: `addr` is a readable socket address (rdma_bind_addr(3)).
        let Some(a) = (unsafe { sockaddr_from_c(addr) }) else {
            return fail(libc::EINVAL);
        };
        let bound = !a.ip().is_unspecified();
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_bind_addr", id, bound, |n, _, h| {
                n.split().0.bind_addr(h, a)
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    guard("rdma_resolve_addr", -1, || {
        // SAFETY: NULL or readable socket addresses (rdma_resolve_addr(3)).
        let (src, dst) = unsafe { (sockaddr_from_c(src_addr), sockaddr_from_c(dst_addr)) };
        let Some(dst) = dst else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_resolve_addr", id, true, |n, now, h| {
                n.split().0.resolve_addr(h, src, dst)?;
                resolving(n, now, id);
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    guard("rdma_resolve_route", -1, || {
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_resolve_route", id, true, |n, now, h| {
                n.split().0.resolve_route(h)?;
                resolving(n, now, id);
                Ok(())
            })
        }
    })
}

/// Holds back the readiness of `id`'s channel while its resolution "runs" (`Node::resolving`).
fn resolving(n: &mut crate::runtime::Node, now: verbs_core::SimTime, id: *mut rdma_cm_id) {
    // SAFETY: `id` is a live id of this library (the caller's entry point checked it) and its
    // channel a live `ChannelBox`.
    let ch = unsafe { (*(*id).channel.cast::<ChannelBox>()).handle };
    n.resolving(ch, now);
}

/// `struct rdma_conn_param` as [`ConnParam`]; NULL → `defaults`.
///
/// # Safety
/// `p` is NULL or a readable `rdma_conn_param` whose `private_data` holds
/// `private_data_len` bytes.
unsafe fn conn_param(p: *const rdma_conn_param, defaults: ConnParam) -> ConnParam {
    if p.is_null() {
        return defaults;
    }
    // SAFETY: the caller's contract.
    let c = unsafe { &*p };
    let private_data = if c.private_data.is_null() || c.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's contract.
        unsafe {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), usize::from(c.private_data_len))
        }
        .to_vec()
    };
    ConnParam {
        private_data,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        retry_count: c.retry_count.min(7),
        rnr_retry_count: c.rnr_retry_count.min(7),
        qp_num: c.qp_num,
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard("rdma_connect", -1, || {
        // SAFETY: NULL or a readable parameter block (rdma_connect(3)).
        let p = unsafe { conn_param(param, ConnParam::rping_defaults()) };
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_connect", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                cm.connect(dev, now, h, &p)
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard("rdma_listen", -1, || {
        let backlog = u32::try_from(backlog).unwrap_or(0);
        // SAFETY: `id` is an id of this library.
        let r = unsafe {
            id_call("rdma_listen", id, false, |n, _, h| {
                n.split().0.listen(h, backlog)
            })
        };
        if r == 0 {
            // SAFETY: as above; the source address was set by `rdma_bind_addr`.
            let addr = unsafe { sockaddr_from_c(&(*id).route.addr.src.src_addr) };
            // Tests wait for this line (`RUST_LOG=rnic=info`) before starting a client.
            tracing::info!(
                "rdma_listen on {}",
                addr.map_or_else(String::new, |a| a.to_string())
            );
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard("rdma_accept", -1, || {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `id` is an id of this library.
        let (rr, id_) = unsafe { idbox(id).req_resources };
        let defaults = ConnParam {
            responder_resources: rr,
            initiator_depth: id_,
            ..ConnParam::rping_defaults()
        };
        // SAFETY: NULL or a readable parameter block (rdma_accept(3)).
        let p = unsafe { conn_param(param, defaults) };
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_accept", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                cm.accept(dev, now, h, &p)
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("rdma_reject", -1, || {
        let pd = if private_data.is_null() {
            Vec::new()
        } else {
            // SAFETY: `private_data` holds `private_data_len` bytes (rdma_reject(3)).
            unsafe {
                std::slice::from_raw_parts(private_data.cast::<u8>(), usize::from(private_data_len))
            }
            .to_vec()
        };
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_reject", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                cm.reject(dev, now, h, &pd)
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_disconnect", -1, || {
        // SAFETY: `id` is an id of this library.
        let r = unsafe {
            id_call("rdma_disconnect", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                cm.disconnect(dev, now, h)
            })
        };
        if r == 0 && !id.is_null() {
            // SAFETY: as above; `qp` is the id's QP or NULL.
            unsafe {
                let qp = (*id).qp;
                if !qp.is_null() {
                    (*qp).state = IBV_QPS_ERR;
                }
            }
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_establish", -1, || {
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_establish", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                cm.establish(dev, now, h)
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("rdma_create_qp", -1, || {
        let (Ok(r), false) = (rt(), id.is_null() || qp_init_attr.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is an id of this library; `qp_init_attr` is readable and writable
        // (rdma_create_qp(3): the granted caps are written back).
        let (b, attr) = unsafe { (idbox(id), &mut *qp_init_attr) };
        if b.c.verbs.is_null() {
            return fail(libc::EINVAL); // not bound to a device yet
        }
        let pd = if pd.is_null() {
            match cm_pd() {
                Ok(p) => p,
                Err(e) => return fail(e),
            }
        } else {
            pd
        };
        let mut a = *attr;
        if a.send_cq.is_null() || a.recv_cq.is_null() {
            match create_id_cqs(b, &a) {
                Ok((s, rc)) => {
                    a.send_cq = s;
                    a.recv_cq = rc;
                }
                Err(e) => return fail(e),
            }
        }
        // Make the QP, then let the CM move it to INIT and own it (librdmacm
        // `rdma_create_qp_ex` → `ucma_init_conn_qp`).
        let qp = match create_qp(pd, &a) {
            Ok(qp) => qp,
            Err(e) => return fail(e),
        };
        // SAFETY: `qp` was just made by this library.
        let (qh, qpn) = unsafe { ((*qp).handle, (*qp).qp_num) };
        let handle = verbs_core::Qp {
            handle: verbs_core::QpHandle(qh),
            qp_num: qpn,
        };
        let h = b.handle;
        let res = r.with(|n, _| {
            let (cm, dev) = n.split();
            cm.attach_qp(h, handle)?;
            let (attr, mask) = QpAction::init(AccessFlags::empty()).attr_mask();
            verbs_core::Device::modify_qp(dev, handle.handle, &attr, mask).inspect_err(|_| {
                let _ = cm.detach_qp(h);
            })
        });
        if let Err(e) = res {
            // SAFETY: `qp` is ours and unused.
            unsafe { super::verbs::ibv_destroy_qp(qp) };
            return fail(errno_of(&e));
        }
        // SAFETY: `qp` is live.
        unsafe { (*qp).state = IBV_QPS_INIT };
        b.c.qp = qp;
        b.c.pd = pd;
        attr.send_cq = a.send_cq;
        attr.recv_cq = a.recv_cq;
        0
    })
}

/// The CQs (and their completion channels) librdmacm makes when `rdma_create_qp` is given
/// none (`ucma_create_cqs`): one pair per direction, sized by the WR counts.
fn create_id_cqs(b: &mut IdBox, a: &ibv_qp_init_attr) -> Result<(*mut ibv_cq, *mut ibv_cq), i32> {
    let ctx = b.c.verbs;
    let make = |entries: u32| -> Result<(*mut ibv_comp_channel, *mut ibv_cq), i32> {
        // SAFETY: `ctx` is the id's live context.
        let ch = unsafe { super::verbs::ibv_create_comp_channel(ctx) };
        if ch.is_null() {
            return Err(nix::errno::Errno::last_raw());
        }
        // SAFETY: as above; `ch` was just made.
        let cq =
            unsafe { super::verbs::ibv_create_cq(ctx, entries.max(1) as c_int, null_mut(), ch, 0) };
        if cq.is_null() {
            let e = nix::errno::Errno::last_raw();
            // SAFETY: `ch` is ours and has no CQ.
            unsafe { super::verbs::ibv_destroy_comp_channel(ch) };
            return Err(e);
        }
        Ok((ch, cq))
    };
    let (rch, rcq) = make(a.cap.max_recv_wr)?;
    let (sch, scq) = make(a.cap.max_send_wr)?;
    b.c.recv_cq_channel = rch;
    b.c.recv_cq = rcq;
    b.c.send_cq_channel = sch;
    b.c.send_cq = scq;
    b.own_cqs = true;
    Ok((scq, rcq))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard("rdma_create_qp_ex", -1, || {
        if attr.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `attr` is a readable `ibv_qp_init_attr_ex` (rdma_create_qp_ex(3)).
        let a = unsafe { &mut *attr };
        let known = IBV_QP_INIT_ATTR_PD;
        if a.comp_mask & !known != 0 {
            return fail(unsupported("rdma_create_qp_ex with extended attributes"));
        }
        let mut plain = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            null_mut()
        };
        // SAFETY: forwarding the caller's pointers.
        let r = unsafe { rdma_create_qp(id, pd, &mut plain) };
        a.send_cq = plain.send_cq;
        a.recv_cq = plain.recv_cq;
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard("rdma_destroy_qp", (), || {
        let (Ok(r), false) = (rt(), id.is_null()) else {
            return;
        };
        // SAFETY: `id` is an id of this library.
        let b = unsafe { idbox(id) };
        let h = b.handle;
        r.with(|n, _| n.split().0.detach_qp(h)).ok();
        if !b.c.qp.is_null() {
            // SAFETY: the id's QP, made by `rdma_create_qp`.
            unsafe { super::verbs::ibv_destroy_qp(b.c.qp) };
            b.c.qp = null_mut();
        }
        if b.own_cqs {
            // SAFETY: the CQs and channels `rdma_create_qp` made for this id, now unused.
            unsafe {
                super::verbs::ibv_destroy_cq(b.c.send_cq);
                super::verbs::ibv_destroy_cq(b.c.recv_cq);
                super::verbs::ibv_destroy_comp_channel(b.c.send_cq_channel);
                super::verbs::ibv_destroy_comp_channel(b.c.recv_cq_channel);
            }
            b.c.send_cq = null_mut();
            b.c.recv_cq = null_mut();
            b.c.send_cq_channel = null_mut();
            b.c.recv_cq_channel = null_mut();
            b.own_cqs = false;
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_destroy_id", -1, || {
        let (Ok(r), false) = (rt(), id.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is an id of this library.
        let h = unsafe { idbox(id).handle };
        // librdmacm blocks until every event it returned for this id is acked.
        let mut res = Err(Error::new(Errno::EBUSY, "not tried"));
        r.wait_for_acks(|| {
            res = r.with(|n, now| {
                let (cm, dev) = n.split();
                cm.destroy_id(dev, now, h)
            });
            !matches!(&res, Err(e) if e.errno == Errno::EBUSY)
        });
        match res {
            Ok(()) => {
                registry().ids.remove(&h);
                // SAFETY: as above; freed once, after the CM forgot it.
                drop(unsafe { Box::from_raw(id.cast::<IdBox>()) });
                0
            }
            Err(e) => fail(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard("rdma_get_cm_event", -1, || {
        let (Ok(r), false) = (rt(), channel.is_null() || event.is_null()) else {
            return fail(libc::EINVAL);
        };
        let cb = channel.cast::<ChannelBox>();
        // SAFETY: `channel` came from `rdma_create_event_channel`; the Arc keeps its eventfd
        // alive while this thread waits outside every lock.
        let (ch, fd) = unsafe { ((*cb).handle, Arc::clone(&(*cb).fd)) };
        loop {
            if let Err(e) = wait_token(&fd) {
                return fail(e.raw_os_error().unwrap_or(libc::EIO));
            }
            let got = r.with(|n, now| {
                if let Some(s) = n.cm_signals.get_mut(&ch) {
                    s.claimed();
                }
                let (cm, dev) = n.split();
                match cm.get_cm_event(dev, now, ch) {
                    Ok(ev) => {
                        let addrs = n.cm().addrs(ev.id);
                        Some(make_event(ev, channel, addrs))
                    }
                    Err(_) => None,
                }
            });
            if let Some(p) = got {
                // SAFETY: `p` was just made by `make_event`.
                let (ev, st) = unsafe { ((*p).event.event, (*p).c.status) };
                tracing::debug!("rdma_get_cm_event: {ev:?} status {st}");
                // SAFETY: `event` is a writable out-parameter (rdma_get_cm_event(3)).
                unsafe { *event = p.cast() };
                return 0;
            }
        }
    })
}

/// The C event for `ev` (and, for a CONNECT_REQUEST, the new id), under the node lock so the
/// registry and the CM agree.
fn make_event(
    ev: CmEvent,
    channel: *mut rdma_event_channel,
    addrs: Option<(Option<SocketAddr>, Option<SocketAddr>)>,
) -> *mut EventBox {
    let mut reg = registry();
    let listen = ev
        .listen_id
        .and_then(|l| reg.ids.get(&l).copied())
        .unwrap_or(0) as *mut IdBox;
    let id = match reg.ids.get(&ev.id) {
        Some(&p) => p as *mut IdBox,
        None => {
            // A CONNECT_REQUEST's new id: it reports to the listener's channel with the
            // listener's context (librdmacm `ucma_process_conn_req`).
            let (context, ps) = if listen.is_null() {
                (null_mut(), RDMA_PS_TCP)
            } else {
                // SAFETY: registered ids are live.
                unsafe { ((*listen).c.context, (*listen).c.ps) }
            };
            let p = leak(IdBox::new(ev.id, channel, context, ps, IBV_QPT_RC));
            // SAFETY: just made.
            unsafe {
                (*p).req_resources = (ev.param.responder_resources, ev.param.initiator_depth);
            }
            reg.ids.insert(ev.id, p as usize);
            p
        }
    };
    drop(reg);
    // SAFETY: `id` is live (registered or just made).
    unsafe { refresh(&mut *id, addrs, true) };
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
        (*id).c.event = b.cast();
    }
    b
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard("rdma_ack_cm_event", -1, || {
        let (Ok(r), false) = (rt(), event.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `event` came from `rdma_get_cm_event` and is acked once.
        let b = unsafe { Box::from_raw(event.cast::<EventBox>()) };
        let res = r.with(|n, _| n.split().0.ack_cm_event(b.event.clone()));
        r.note_ack();
        match res {
            Ok(()) => 0,
            Err(e) => fail(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    guard("rdma_event_str", c"UNKNOWN EVENT".as_ptr(), || {
        const NAMES: [&std::ffi::CStr; 19] = [
            c"RDMA_CM_EVENT_ADDR_RESOLVED",
            c"RDMA_CM_EVENT_ADDR_ERROR",
            c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            c"RDMA_CM_EVENT_ROUTE_ERROR",
            c"RDMA_CM_EVENT_CONNECT_REQUEST",
            c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            c"RDMA_CM_EVENT_CONNECT_ERROR",
            c"RDMA_CM_EVENT_UNREACHABLE",
            c"RDMA_CM_EVENT_REJECTED",
            c"RDMA_CM_EVENT_ESTABLISHED",
            c"RDMA_CM_EVENT_DISCONNECTED",
            c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            c"RDMA_CM_EVENT_MULTICAST_JOIN",
            c"RDMA_CM_EVENT_MULTICAST_ERROR",
            c"RDMA_CM_EVENT_ADDR_CHANGE",
            c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
            c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
            c"RDMA_CM_EVENT_ADDRINFO_ERROR",
            c"RDMA_CM_EVENT_USER",
        ];
        usize::try_from(event)
            .ok()
            .and_then(|i| NAMES.get(i))
            .map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    _optlen: usize,
) -> c_int {
    guard("rdma_set_option", -1, || {
        if id.is_null() || optval.is_null() {
            return fail(libc::EINVAL);
        }
        match (level, optname) {
            // Accepted and without effect on the simulated fabric: TOS, REUSEADDR, AFONLY,
            // the RC ACK timeout (the CM derives it from the path, as Linux without the
            // option).
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY)
            | (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                tracing::debug!(level, optname, "rdma_set_option accepted, no effect");
                0
            }
            _ => fail(unsupported("rdma_set_option (this level/option)")),
        }
    })
}

/// The port of the id's source address, network order (`rdma_get_src_port(3)`).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    guard("rdma_get_src_port", 0, || {
        if id.is_null() {
            return 0;
        }
        // SAFETY: an id of this library; `src_addr` is set from a v4 or v6 address or all zero.
        match unsafe { sockaddr_from_c(&(*id).route.addr.src.src_addr) } {
            Some(a) => a.port().to_be(),
            None => 0,
        }
    })
}

/// The port of the id's destination address, network order (`rdma_get_dst_port(3)`).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    guard("rdma_get_dst_port", 0, || {
        if id.is_null() {
            return 0;
        }
        // SAFETY: as `rdma_get_src_port`.
        match unsafe { sockaddr_from_c(&(*id).route.addr.dst.dst_addr) } {
            Some(a) => a.port().to_be(),
            None => 0,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    _id: *mut rdma_cm_id,
    _channel: *mut rdma_event_channel,
) -> c_int {
    guard("rdma_migrate_id", -1, || {
        fail(unsupported("rdma_migrate_id"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    guard("rdma_notify", -1, || {
        if event != IBV_EVENT_COMM_EST as c_int {
            return 0; // librdmacm ignores every other event
        }
        // SAFETY: forwarding the caller's id (rdma_establish guards itself).
        unsafe { rdma_establish(id) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    _id: *mut rdma_cm_id,
    _qp_attr: *mut ibv_qp_attr,
    _qp_attr_mask: *mut c_int,
) -> c_int {
    guard("rdma_init_qp_attr", -1, || {
        fail(unsupported("rdma_init_qp_attr"))
    })
}

/// The one device's context, as librdmacm lists the contexts it opened.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    guard("rdma_get_devices", null_mut(), || {
        if let Err(e) = rt() {
            return fail_null(e);
        }
        if !num_devices.is_null() {
            // SAFETY: a writable out-parameter.
            unsafe { *num_devices = 1 };
        }
        Box::into_raw(Box::new([cm_context(), null_mut()])).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    guard("rdma_free_devices", (), || {
        if !list.is_null() {
            // SAFETY: `list` came from `rdma_get_devices`, a leaked `Box<[_; 2]>`.
            drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_context; 2]>()) });
        }
    })
}

/// `rpoll` of librdmacm's rsocket API: for descriptors that are not rsockets (ours never are)
/// it is `poll(2)`. rping and ucmatose import it.
#[no_mangle]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    guard("rpoll", -1, || {
        // SAFETY: the caller's `poll(2)` arguments, passed through.
        unsafe { libc::poll(fds, nfds, timeout) }
    })
}
