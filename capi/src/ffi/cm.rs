//! librdmacm: event channels, ids, address and route resolution, QP creation on an id,
//! connect/listen/accept/reject/disconnect, events. Each call is the same call of
//! [`cm_core::api::RdmaCm`] (the librdmacm-side layer, which does librdmacm's QP transitions and
//! its fetch-time work in `get_cm_event`); this file adds what librdmacm adds around the kernel:
//! the C structs, blocking on the channel's fd, and `rdma_destroy_id`'s wait for acks.
//! Return convention: 0, or -1 with `errno`.

use super::cm_id::{idbox, refresh};
use super::cm_sync::{complete_after, create_sync_id, only_kept_unacked, private_of, release_sync};
use super::objects::{leak, registry, ChannelBox, IdBox};
use super::raw::sockaddr_from_c;
use super::verbs::cm_context;
use super::{errno_of, fail, fail_null, guard, rt, unsupported};
use crate::abi::convert::*;
use crate::abi::*;
use crate::runtime::Signal;
use cm_core::api::{CmIdHandle, ConnParam};
use cm_core::engine::QpAction;
use cm_core::wire::RdmaPortSpace;
use libc::{c_int, c_void};
use std::ptr::null_mut;
use verbs_core::{AccessFlags, Errno, Error};

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
        let (res, addrs, pd) = r.with(|n, now| {
            let res = f(n, now, h);
            let pd = (bound_after && res.is_ok())
                .then(|| super::verbs::cm_pd_in(n).ok())
                .flatten();
            (res, n.cm().addrs(h), pd)
        });
        refresh(b, addrs, bound_after && res.is_ok(), pd);
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
        let (raw, fd) = (signal.raw_fd(), signal.ends());
        let handle = r.with(|n, _| {
            let (cm, _) = n.split();
            let ch = cm.create_event_channel();
            n.cm_signals.insert(ch, signal);
            ch
        });
        let p = leak(ChannelBox {
            c: rdma_event_channel { fd: raw },
            handle,
            fd,
        });
        crate::check::with_state(|s| s.channels.insert(p as usize));
        p.cast()
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
        if crate::check::enabled() {
            let users = registry()
                .ids
                .values()
                // SAFETY: registered ids are live boxes.
                .filter(|&&p| unsafe { (*(p as *const IdBox)).c.channel } == channel)
                .count();
            let at = crate::check::now_ms();
            crate::check::with_state(|s| s.destroying_channel(channel as usize, users, at));
        }
        let res = r.with(|n, _| {
            let res = n.split().0.destroy_event_channel(h);
            if res.is_ok() {
                n.cm_signals.remove(&h);
            }
            res
        });
        // The box is never freed (a few bytes and its two descriptors per destroyed
        // channel): a thread of the application may still be inside, or about to enter,
        // `rdma_get_cm_event` on it — rping's CM thread acks the event `rdma_destroy_id` waits
        // for and calls `rdma_get_cm_event` again while `main` destroys the channel. With the
        // kernel's channel that thread sleeps in `read` for good; here it does too
        // (`rdma_get_cm_event` on a destroyed channel never returns) instead of reading freed
        // memory.
        if let Err(e) = res {
            // librdmacm closes it regardless; ids still report to it here.
            tracing::warn!("rdma_destroy_event_channel: {e} (channel kept)");
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
        let made = if channel.is_null() {
            // A synchronous id (librdmacm `ucma_alloc_id`).
            create_sync_id(r, context, ps, space, qp_type)
        } else {
            // SAFETY: `channel` came from `rdma_create_event_channel`.
            let ch = unsafe { (*channel.cast::<ChannelBox>()).handle };
            r.with(|n, _| {
                let h = n.split().0.create_id(ch, space)?;
                let p = leak(IdBox::new(h, channel, context, ps, qp_type));
                registry().ids.insert(h, p as usize);
                Ok::<_, Error>(p)
            })
            .map_err(|e| errno_of(&e))
        };
        match made {
            Ok(p) => {
                // SAFETY: `id` is a writable out-parameter (rdma_create_id(3)).
                unsafe { *id = p.cast() };
                0
            }
            Err(e) => fail(e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    guard("rdma_bind_addr", -1, || {
        // SAFETY: `addr` is a readable socket address (rdma_bind_addr(3)).
        let Some(mut a) = (unsafe { sockaddr_from_c(addr) }) else {
            return fail(libc::EINVAL);
        };
        // A loopback address other than the RNIC's (127.0.0.1 while the RNIC is 127.0.0.5,
        // ::1) binds to the device, as the kernel binds loopback to the first device with an
        // active port (`cma_bind_loopback`): libfabric's verbs provider binds every interface
        // address to find its device. The id's source is the RNIC's address, the only one it
        // can send from.
        if let Ok(r) = rt() {
            let own = r.addr().ip();
            if a.ip().is_loopback() && a.ip() != own {
                tracing::debug!("rdma_bind_addr {a}: loopback, bound to the RNIC at {own}");
                a = std::net::SocketAddr::new(own, a.port());
            }
        }
        let bound = !a.ip().is_unspecified();
        // SAFETY: `id` is an id of this library.
        let ret = unsafe {
            id_call("rdma_bind_addr", id, bound, |n, _, h| {
                n.split().0.bind_addr(h, a)
            })
        };
        if ret != 0 && nix::errno::Errno::last_raw() == libc::EADDRNOTAVAIL {
            if let Ok(r) = rt() {
                tracing::warn!(
                    "rdma_bind_addr {a}: not this process's RNIC address, which is {} \
                     (RNIC_ADDR / rnic exec --addr)",
                    r.addr().ip()
                );
            }
        }
        ret
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
        // librdmacm (`ucma_addrlen`): a destination, or a given source, of no family it
        // resolves is EINVAL.
        let (Some(dst), false) = (dst, !src_addr.is_null() && src.is_none()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is an id of this library.
        unsafe {
            let ret = id_call("rdma_resolve_addr", id, true, |n, now, h| {
                n.split().0.resolve_addr(h, src, dst)?;
                resolving(n, now, id);
                Ok(())
            });
            complete_after(ret, id)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    guard("rdma_resolve_route", -1, || {
        // SAFETY: `id` is an id of this library.
        unsafe {
            let ret = id_call("rdma_resolve_route", id, true, |n, now, h| {
                n.split().0.resolve_route(h)?;
                resolving(n, now, id);
                Ok(())
            });
            complete_after(ret, id)
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

/// The device's `max_qp_rd_atom` and `max_qp_init_rd_atom` as librdmacm keeps them
/// (`ucma_init_device`: `max_responder_resources`, `max_initiator_depth`, each cast to
/// `uint8_t`).
fn device_rd_atom() -> Result<(u8, u8), i32> {
    let r = rt()?;
    let d = r.with_quiet(|n, _| verbs_core::Device::query_device(n.device()));
    // The C casts truncate; the simulated device's maxima (128) fit.
    let cast = |v: u32| u8::try_from(v & 0xff).unwrap_or(u8::MAX);
    Ok((cast(d.max_qp_rd_atom), cast(d.max_qp_init_rd_atom)))
}

/// librdmacm's `ucma_valid_param`, which `rdma_connect` and `rdma_accept` run first: on an
/// `RDMA_PS_TCP` id, parameters are required unless the id has a QP, and their responder
/// resources and initiator depth must be within the device's (or `RDMA_MAX_RESP_RES` /
/// `RDMA_MAX_INIT_DEPTH`, 255: "the device's maximum"). EINVAL otherwise.
///
/// # Safety
/// `id` is NULL or an id of this library; `p` is NULL or a readable parameter block.
unsafe fn valid_param(id: *mut rdma_cm_id, p: *const rdma_conn_param) -> Result<(), i32> {
    const MAX: u8 = 0xFF;
    // SAFETY: the caller's contract.
    let Some(c) = (unsafe { id.as_ref() }) else {
        return Ok(()); // the call itself refuses a NULL id
    };
    if c.ps != RDMA_PS_TCP {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    let Some(p) = (unsafe { p.as_ref() }) else {
        return if c.qp.is_null() {
            Err(libc::EINVAL)
        } else {
            Ok(())
        };
    };
    let r = rt()?;
    let d = r.with_quiet(|n, _| verbs_core::Device::query_device(n.device()));
    let over = |v: u8, max: u32| v != MAX && u32::from(v) > max;
    if over(p.responder_resources, d.max_qp_rd_atom)
        || over(p.initiator_depth, d.max_qp_init_rd_atom)
    {
        return Err(libc::EINVAL);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    guard("rdma_connect", -1, || {
        // SAFETY: `id` is NULL or an id of this library, `param` NULL or readable.
        if let Err(e) = unsafe { valid_param(id, param) } {
            return fail(e);
        }
        let Ok((max_resp, max_init)) = device_rd_atom() else {
            return fail(libc::ENODEV);
        };
        // librdmacm's `rdma_connect`: without parameters, or with `RDMA_MAX_INIT_DEPTH` /
        // `RDMA_MAX_RESP_RES` (255), the device's maxima; retry counts 7 without parameters
        // (`ucma_copy_conn_param_to_kern`).
        let defaults = ConnParam {
            responder_resources: max_resp,
            initiator_depth: max_init,
            ..ConnParam::rping_defaults()
        };
        // SAFETY: NULL or a readable parameter block (rdma_connect(3)).
        let mut p = unsafe { conn_param(param, defaults) };
        if p.initiator_depth == RDMA_MAX_INIT_DEPTH {
            p.initiator_depth = max_init;
        }
        if p.responder_resources == RDMA_MAX_RESP_RES {
            p.responder_resources = max_resp;
        }
        // SAFETY: `id` is an id of this library.
        unsafe {
            let ret = id_call("rdma_connect", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                cm.connect(dev, now, h, &p)
            });
            complete_after(ret, id)
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
        // SAFETY: `id` is an id of this library, `param` NULL or readable.
        if let Err(e) = unsafe { valid_param(id, param) } {
            return fail(e);
        }
        let Ok((max_resp, max_init)) = device_rd_atom() else {
            return fail(libc::ENODEV);
        };
        // librdmacm's `rdma_accept`: without parameters, or with `RDMA_MAX_INIT_DEPTH` /
        // `RDMA_MAX_RESP_RES`, the request's values capped at the device's maxima.
        // SAFETY: `id` is an id of this library.
        let (rr, id_) = unsafe { idbox(id).req_resources };
        let (rr, id_) = (rr.min(max_resp), id_.min(max_init));
        let defaults = ConnParam {
            responder_resources: rr,
            initiator_depth: id_,
            ..ConnParam::rping_defaults()
        };
        // SAFETY: NULL or a readable parameter block (rdma_accept(3)).
        let mut p = unsafe { conn_param(param, defaults) };
        if p.initiator_depth == RDMA_MAX_INIT_DEPTH {
            p.initiator_depth = id_;
        }
        if p.responder_resources == RDMA_MAX_RESP_RES {
            p.responder_resources = rr;
        }
        // SAFETY: `id` is an id of this library.
        // librdmacm's `rdma_accept` completes only for a connected (not UD) QP type.
        unsafe {
            let ret = id_call("rdma_accept", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                cm.accept(dev, now, h, &p)
            });
            if (*id).qp_type == IBV_QPT_UD {
                ret
            } else {
                complete_after(ret, id)
            }
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
        // SAFETY: as above.
        unsafe { complete_after(r, id) }
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
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_destroy_id", -1, || {
        let (Ok(r), false) = (rt(), id.is_null()) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: `id` is an id of this library.
        let (h, private) = unsafe { (idbox(id).handle, private_of(r, id)) };
        if crate::check::enabled() {
            // SAFETY: as above (`qp` is only compared with the live QPs, not read).
            let qp = unsafe { (*id).qp } as usize;
            let qp = (qp != 0 && registry().qps.values().any(|&p| p == qp)).then_some(qp);
            let (thread, at) = (std::thread::current().id(), crate::check::now_ms());
            crate::check::with_state(|s| s.destroying_id(id as usize, qp, thread, at));
        }
        // librdmacm blocks until every event it returned for this id is acked (another thread
        // may fetch one more meanwhile: then wait again), but for a synchronous call's
        // `id->event`, which it acks itself.
        let res = loop {
            r.wait_for_acks(|| r.with_quiet(|n, _| only_kept_unacked(n, h)));
            let res = r.with(|n, now| {
                let (cm, dev) = n.split();
                cm.destroy_id(dev, now, h)
            });
            if !matches!(&res, Err(e) if e.errno == Errno::EBUSY) {
                break res;
            }
        };
        match res {
            Ok(()) => {
                registry().ids.remove(&h);
                crate::check::with_state(|s| s.id_destroyed(id as usize));
                // SAFETY: as above; freed once, after the CM forgot it, with its kept event
                // and private channel.
                unsafe {
                    release_sync(r, id, private);
                    drop(Box::from_raw(id.cast::<IdBox>()));
                }
                0
            }
            Err(e) => fail(errno_of(&e)),
        }
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

/// `rdma_notify(id, event)`: librdmacm passes any event to the kernel (ucma NOTIFY), whose
/// `ib_cm_notify` takes `IBV_EVENT_COMM_EST` (a passive id in REP_SENT/MRA_REP_RCVD becomes
/// ESTABLISHED; `EISCONN` when it is already) and `IBV_EVENT_PATH_MIG` (0 on an ESTABLISHED
/// connection, `cm_migrate`; nothing changes, there is no alternate path) and refuses every
/// other event with `EINVAL` (`default: ret = -EINVAL`). −1 + `errno` on error: `EINVAL` also
/// for a NULL or unknown id and outside those states, `ENXIO` once the device was removed.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    guard("rdma_notify", -1, || {
        let comm_est = event == IBV_EVENT_COMM_EST as c_int;
        let path_mig = event == IBV_EVENT_PATH_MIG as c_int;
        // SAFETY: `id` is an id of this library.
        unsafe {
            id_call("rdma_notify", id, true, |n, now, h| {
                let (cm, dev) = n.split();
                if comm_est {
                    cm.notify(dev, now, h)
                } else {
                    cm.notify_other(h, path_mig)
                }
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    guard("rdma_init_qp_attr", -1, || {
        let (Ok(r), false) = (
            rt(),
            id.is_null() || qp_attr.is_null() || qp_attr_mask.is_null(),
        ) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: an id of this library; `qp_attr` is readable and writable and
        // `qp_attr_mask` writable (rdma_init_qp_attr(3)).
        let (h, want) = unsafe { (idbox(id).handle, (*qp_attr).qp_state) };
        // A UD id (kernel `cma_ib_init_qp_attr`): P_Key index, port and the id's Q_Key, in
        // the state asked for.
        // SAFETY: as above.
        if unsafe { (*id).qp_type } == IBV_QPT_UD {
            return match r.with(|n, _| n.split().0.ud_qkey(h)) {
                Ok(qkey) => {
                    // SAFETY: as above.
                    unsafe {
                        let a = &mut *qp_attr;
                        a.pkey_index = 0;
                        a.port_num = 1;
                        a.qkey = qkey;
                        *qp_attr_mask =
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
                    }
                    0
                }
                Err(e) => fail(errno_of(&e)),
            };
        }
        // The attributes the CM would apply itself (Linux `rdma_init_qp_attr` →
        // `ib_cm_init_qp_attr`): INIT from the id alone, RTR and RTS once the peer is known.
        let action = r.with_quiet(|n, _| {
            let params = n.cm().engine().qp_params(cm_core::engine::IbCmId(h.0));
            match want {
                IBV_QPS_INIT => Ok(params.map_or_else(
                    |_| QpAction::init(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ),
                    |p| p.actions()[0],
                )),
                IBV_QPS_RTR => params.map(|p| p.actions()[1]),
                IBV_QPS_RTS => params.map(|p| p.actions()[2]),
                _ => Err(verbs_core::Error::inval(
                    "no CM attributes for this QP state",
                )),
            }
        });
        match action {
            Ok(a) => {
                let (attr, mask) = a.attr_mask();
                // SAFETY: as above.
                unsafe {
                    *qp_attr = qp_attr_to_c(&attr);
                    *qp_attr_mask = mask.bits() as c_int;
                }
                0
            }
            Err(e) => fail(errno_of(&e)),
        }
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
