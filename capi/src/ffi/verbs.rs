//! libibverbs: device list, context, PD, MR, completion channel, CQ, QP, AH, and the data-path
//! calls that `<infiniband/verbs.h>` inlines through `context->ops` (post send/recv, poll and
//! arm CQ). Return conventions are libibverbs's: objects or NULL + `errno`; `int` calls return
//! 0 or the errno value itself (`ibv_modify_qp`, `ibv_post_send`, `ibv_dealloc_pd`, …);
//! `ibv_poll_cq` a count or a negative value; `ibv_get_cq_event`/`ibv_query_gid` -1 + `errno`.

use super::convert::*;
use super::memory::UserMemory;
use super::objects::{leak, registry, AhBox, CompChannelBox};
use super::{errno_of, fail, fail_null, guard, rt, unsupported};
use crate::abi::*;
use crate::runtime::wait_token;
use libc::{c_char, c_int, c_void};
use std::ptr::{self, null_mut};
use std::sync::{Arc, OnceLock};
use verbs_core::{
    AtomicWr, CqHandle, Device, MrHandle, PdHandle, Qp, QpHandle, QpInitAttr, QpState, RdmaWr,
    RecvWr, SendFlags, SendWr, Sge, UdWr, WorkCompletion, WrOpcode,
};

/// The one device, leaked once: `struct ibv_device` with the configured name.
fn device() -> *mut ibv_device {
    static DEVICE: OnceLock<usize> = OnceLock::new();
    *DEVICE.get_or_init(|| {
        let name = rt().map_or_else(|_| "rnic0".to_string(), |r| r.config().device.clone());
        let mut d = ibv_device {
            _ops: _ibv_device_ops {
                _dummy1: None,
                _dummy2: None,
            },
            node_type: IBV_NODE_CA,
            transport_type: IBV_TRANSPORT_IB,
            name: [0; 64],
            dev_name: [0; 64],
            dev_path: [0; 256],
            ibdev_path: [0; 256],
        };
        copy_cstr(&mut d.name, &name);
        copy_cstr(&mut d.dev_name, "uverbs0");
        copy_cstr(&mut d.dev_path, "/sys/class/infiniband_verbs/uverbs0");
        copy_cstr(&mut d.ibdev_path, &format!("/sys/class/infiniband/{name}"));
        leak(d) as usize
    }) as *mut ibv_device
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
}

/// The context rdma_cm ids report as `id->verbs` (librdmacm opens one per device).
pub(super) fn cm_context() -> *mut ibv_context {
    static CTX: OnceLock<usize> = OnceLock::new();
    *CTX.get_or_init(|| new_context() as usize) as *mut ibv_context
}

/// The PD `rdma_create_qp(id, NULL, …)` uses (librdmacm's per-device PD).
pub(super) fn cm_pd() -> Result<*mut ibv_pd, i32> {
    static PD: OnceLock<usize> = OnceLock::new();
    if let Some(p) = PD.get() {
        return Ok(*p as *mut ibv_pd);
    }
    // SAFETY: `cm_context()` is a live context of this library.
    let pd = unsafe { ibv_alloc_pd(cm_context()) };
    if pd.is_null() {
        return Err(nix::errno::Errno::last_raw());
    }
    Ok(*PD.get_or_init(|| pd as usize) as *mut ibv_pd)
}

fn new_context() -> *mut ibv_context {
    // SAFETY: every member of `ibv_context_ops` is an `Option` of a function pointer: all-zero
    // is all `None` (NULL), the value libibverbs gives unused slots.
    let mut ops: ibv_context_ops = unsafe { std::mem::zeroed() };
    ops.poll_cq = Some(rnic_poll_cq);
    ops.req_notify_cq = Some(rnic_req_notify_cq);
    ops.post_send = Some(rnic_post_send);
    ops.post_recv = Some(rnic_post_recv);
    ops.post_srq_recv = Some(rnic_post_srq_recv);
    let async_fd = nix::sys::eventfd::EventFd::new()
        .map(|fd| std::os::fd::IntoRawFd::into_raw_fd(std::os::fd::OwnedFd::from(fd)))
        .unwrap_or(-1);
    leak(ibv_context {
        device: device(),
        ops,
        cmd_fd: -1,
        async_fd,
        num_comp_vectors: 1,
        // SAFETY: an all-zero pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER on glibc.
        mutex: unsafe { std::mem::zeroed() },
        abi_compat: null_mut(),
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard("ibv_get_device_list", null_mut(), || {
        if let Err(e) = rt() {
            if !num_devices.is_null() {
                // SAFETY: a non-NULL `num_devices` is writable (ibv_get_device_list(3)).
                unsafe { *num_devices = 0 };
            }
            return fail_null(e);
        }
        if !num_devices.is_null() {
            // SAFETY: as above.
            unsafe { *num_devices = 1 };
        }
        Box::into_raw(Box::new([device(), null_mut()])).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard("ibv_free_device_list", (), || {
        if !list.is_null() {
            // SAFETY: `list` came from `ibv_get_device_list`, a leaked `Box<[_; 2]>`.
            drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_device; 2]>()) });
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    guard("ibv_get_device_name", ptr::null(), || {
        if device.is_null() {
            return fail_null::<c_char>(libc::EINVAL).cast_const();
        }
        // SAFETY: a device pointer from `ibv_get_device_list`; its name is NUL-terminated.
        unsafe { (*device).name.as_ptr() }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(_device: *mut ibv_device) -> u64 {
    guard("ibv_get_device_guid", 0, || match rt() {
        Ok(r) => r.with(|n, _| n.device().query_device().node_guid.to_be()),
        Err(_) => 0,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard("ibv_open_device", null_mut(), || {
        if device.is_null() {
            return fail_null(libc::EINVAL);
        }
        if let Err(e) = rt() {
            return fail_null(e);
        }
        new_context()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    guard("ibv_close_device", libc::EIO, || {
        if context.is_null() || context == cm_context() {
            return 0; // the rdma_cm context lives as long as the process
        }
        // SAFETY: `context` came from `ibv_open_device`: a leaked box, closed once.
        let ctx = unsafe { Box::from_raw(context) };
        if ctx.async_fd >= 0 {
            // SAFETY: the async fd is the eventfd made for this context; nothing else owns it.
            drop(unsafe {
                <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(ctx.async_fd)
            });
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    _context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    guard("ibv_query_device", libc::EIO, || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return e,
        };
        if device_attr.is_null() {
            return libc::EINVAL;
        }
        let d = r.with(|n, _| n.device().query_device());
        // SAFETY: `device_attr` is a writable `struct ibv_device_attr` (ibv_query_device(3));
        // zeroing first leaves no field unset.
        unsafe {
            ptr::write_bytes(device_attr, 0, 1);
            device_attr_to_c(&d, &mut *device_attr);
        }
        0
    })
}

/// `ibv_query_port` through the old ABI: `verbs.h`'s inline `ibv_query_port` calls it with
/// `struct _compat_ibv_port_attr`, the layout without the last fields, when the context is not
/// extended (ours is not), after zeroing the caller's whole struct.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    _context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    guard("ibv_query_port", libc::EIO, || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return e,
        };
        if port_attr.is_null() {
            return libc::EINVAL;
        }
        match r.with(|n, _| n.device().query_port(port_num)) {
            Ok(p) => {
                // SAFETY: `port_attr` points to at least a `_compat_ibv_port_attr`, and
                // `port_attr_to_c` writes only the fields that layout has (a prefix of
                // `ibv_port_attr`).
                unsafe { port_attr_to_c(&p, &mut *port_attr) };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    _context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard("ibv_query_gid", -1, || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        let Ok(index) = u32::try_from(index) else {
            return fail(libc::EINVAL);
        };
        if gid.is_null() {
            return fail(libc::EINVAL);
        }
        match r.with(|n, _| n.device().query_gid(port_num, index)) {
            Ok(g) => {
                // SAFETY: `gid` is a writable `union ibv_gid` (ibv_query_gid(3)).
                unsafe { *gid = gid_to_c(g) };
                0
            }
            Err(e) => fail(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    _context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut __be16,
) -> c_int {
    guard("ibv_query_pkey", -1, || {
        if port_num != 1 || index != 0 || pkey.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: `pkey` is a writable `__be16`. The one P_Key is the default full member.
        unsafe { *pkey = 0xffff_u16.to_be() };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard("ibv_alloc_pd", null_mut(), || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail_null(e),
        };
        match r.with(|n, _| n.dev().alloc_pd()) {
            Ok(pd) => leak(ibv_pd {
                context,
                handle: pd.0,
            }),
            Err(e) => fail_null(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard("ibv_dealloc_pd", libc::EIO, || {
        let (Ok(r), false) = (rt(), pd.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: `pd` came from `ibv_alloc_pd` and is not yet deallocated.
        let h = PdHandle(unsafe { (*pd).handle });
        match r.with(|n, _| n.dev().dealloc_pd(h)) {
            Ok(()) => {
                // SAFETY: as above; freed once, after the device let go of it.
                drop(unsafe { Box::from_raw(pd) });
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    let r = match rt() {
        Ok(r) => r,
        Err(e) => return fail_null(e),
    };
    if pd.is_null() || (addr.is_null() && length > 0) {
        return fail_null(libc::EINVAL);
    }
    // Every bit goes to the device, which refuses unknown ones and ignores the optional
    // range (RELAXED_ORDERING, which perftest passes), as libibverbs and rxe do.
    let access = verbs_core::AccessFlags::from_bits_retain(access as u32);
    // SAFETY: `pd` came from `ibv_alloc_pd`.
    let (context, pdh) = unsafe { ((*pd).context, PdHandle((*pd).handle)) };
    // SAFETY: ibv_reg_mr(3): the buffer stays allocated while registered.
    let mem = unsafe { UserMemory::new(addr as usize, length) };
    match r.with(|n, _| n.dev().reg_mr_external(pdh, Arc::new(mem), iova, access)) {
        Ok(mr) => leak(ibv_mr {
            context,
            pd,
            addr,
            length,
            handle: mr.handle.0,
            lkey: mr.lkey,
            rkey: mr.rkey,
        }),
        Err(e) => fail_null(errno_of(&e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr", null_mut(), || {
        reg_mr(pd, addr, length, addr as u64, access)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova", null_mut(), || {
        reg_mr(pd, addr, length, iova, access)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: libc::c_uint,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova2", null_mut(), || {
        reg_mr(pd, addr, length, iova, access as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard("ibv_dereg_mr", libc::EIO, || {
        let (Ok(r), false) = (rt(), mr.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: `mr` came from `ibv_reg_mr*` and is not yet deregistered.
        let h = MrHandle(unsafe { (*mr).handle });
        match r.with(|n, _| n.dev().dereg_mr(h)) {
            Ok(()) => {
                // SAFETY: as above; freed once.
                drop(unsafe { Box::from_raw(mr) });
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    guard("ibv_create_comp_channel", null_mut(), || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail_null(e),
        };
        let made = r.with(|n, _| {
            n.add_comp_channel()
                .map(|(num, cs)| (num, cs.signal.raw_fd(), cs.signal.fd()))
        });
        match made {
            Ok((num, raw, fd)) => leak(CompChannelBox {
                c: ibv_comp_channel {
                    context,
                    fd: raw,
                    refcnt: 0,
                },
                num,
                fd,
            })
            .cast(),
            Err(e) => fail_null(e.raw_os_error().unwrap_or(libc::EMFILE)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard("ibv_destroy_comp_channel", libc::EIO, || {
        let (Ok(r), false) = (rt(), channel.is_null()) else {
            return libc::EINVAL;
        };
        let b = channel.cast::<CompChannelBox>();
        // SAFETY: `channel` came from `ibv_create_comp_channel` (a `CompChannelBox`).
        let (num, refcnt) = unsafe { ((*b).num, (*b).c.refcnt) };
        if refcnt > 0 {
            return libc::EBUSY; // CQs still report to it (libibverbs)
        }
        r.with(|n, _| n.comp.remove(&num));
        // SAFETY: as above; freed once.
        drop(unsafe { Box::from_raw(b) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut ibv_cq {
    guard("ibv_create_cq", null_mut(), || {
        let r = match rt() {
            Ok(r) => r,
            Err(e) => return fail_null(e),
        };
        let Ok(cqe) = u32::try_from(cqe) else {
            return fail_null(libc::EINVAL);
        };
        let num = (!channel.is_null()).then(|| {
            // SAFETY: a non-NULL channel came from `ibv_create_comp_channel`.
            unsafe { (*channel.cast::<CompChannelBox>()).num }
        });
        let made = r.with(|n, _| {
            let ch = num
                .and_then(|k| n.comp.get(&k))
                .map(|cs| cs.channel.clone());
            n.dev().create_cq(cqe, ch.as_ref())
        });
        match made {
            Ok(h) => {
                if !channel.is_null() {
                    // SAFETY: as above; the count makes destroying the channel EBUSY.
                    unsafe { (*channel).refcnt += 1 };
                }
                let cq = leak(ibv_cq {
                    context,
                    channel,
                    cq_context,
                    handle: h.0,
                    cqe: cqe as c_int,
                    // SAFETY: all-zero is the static initializer of both on glibc.
                    mutex: unsafe { std::mem::zeroed() },
                    // SAFETY: as above.
                    cond: unsafe { std::mem::zeroed() },
                    comp_events_completed: 0,
                    async_events_completed: 0,
                });
                registry().cqs.insert(h.0, cq as usize);
                cq
            }
            Err(e) => fail_null(errno_of(&e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard("ibv_destroy_cq", libc::EIO, || {
        let (Ok(r), false) = (rt(), cq.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: `cq` came from `ibv_create_cq` and is not yet destroyed.
        let (h, channel) = unsafe { ((*cq).handle, (*cq).channel) };
        match r.with(|n, _| n.dev().destroy_cq(CqHandle(h))) {
            Ok(()) => {
                registry().cqs.remove(&h);
                if !channel.is_null() {
                    // SAFETY: the CQ's channel outlives it (its refcnt held it).
                    unsafe { (*channel).refcnt -= 1 };
                }
                // SAFETY: as above; freed once.
                drop(unsafe { Box::from_raw(cq) });
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard("ibv_get_cq_event", -1, || {
        let (Ok(r), false) = (rt(), channel.is_null() || cq.is_null()) else {
            return fail(libc::EINVAL);
        };
        let b = channel.cast::<CompChannelBox>();
        // SAFETY: `channel` came from `ibv_create_comp_channel`; the Arc keeps the eventfd
        // alive while this thread waits outside every lock.
        let (num, fd) = unsafe { ((*b).num, Arc::clone(&(*b).fd)) };
        loop {
            if let Err(e) = wait_token(&fd) {
                return fail(e.raw_os_error().unwrap_or(libc::EIO));
            }
            let got = r.with(|n, _| {
                let cs = n.comp.get_mut(&num)?;
                cs.signal.claimed();
                cs.channel.try_get_cq_event().ok()
            });
            let Some(h) = got else { continue };
            let Some(&p) = registry().cqs.get(&h.0) else {
                continue; // the CQ was destroyed meanwhile
            };
            let p = p as *mut ibv_cq;
            // SAFETY: `cq`/`cq_context` are writable out-parameters; `p` is a live CQ.
            unsafe {
                *cq = p;
                if !cq_context.is_null() {
                    *cq_context = (*p).cq_context;
                }
            }
            return 0;
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: libc::c_uint) {
    guard("ibv_ack_cq_events", (), || {
        if !cq.is_null() {
            // SAFETY: a live CQ; only the application's event thread writes this counter.
            unsafe {
                (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents)
            };
        }
    })
}

/// `context->ops.req_notify_cq` (`ibv_req_notify_cq` is inline in verbs.h).
unsafe extern "C" fn rnic_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard("ibv_req_notify_cq", libc::EIO, || {
        let (Ok(r), false) = (rt(), cq.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live CQ of this library.
        let h = CqHandle(unsafe { (*cq).handle });
        match r.with_quiet(|n, _| n.dev().req_notify_cq(h, solicited_only != 0)) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

thread_local! {
    static WC_BUF: std::cell::RefCell<Vec<WorkCompletion>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `context->ops.poll_cq` (`ibv_poll_cq` is inline in verbs.h): up to `num_entries`
/// completions into `wc`; the count, or a negative errno.
unsafe extern "C" fn rnic_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard("ibv_poll_cq", -libc::EIO, || {
        let (Ok(r), false) = (rt(), cq.is_null()) else {
            return -libc::EINVAL;
        };
        let Ok(max) = usize::try_from(num_entries) else {
            return -libc::EINVAL;
        };
        if max > 0 && wc.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: a live CQ of this library.
        let h = CqHandle(unsafe { (*cq).handle });
        WC_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.clear();
            match r.with_quiet(|n, _| n.dev().poll_cq(h, max, &mut buf)) {
                Ok(_) => {
                    for (i, w) in buf.iter().enumerate().take(max) {
                        // SAFETY: `wc` holds `num_entries` writable entries (ibv_poll_cq(3)).
                        unsafe { wc.add(i).write(wc_to_c(w)) };
                    }
                    buf.len().min(max) as c_int
                }
                Err(e) => -errno_of(&e),
            }
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    guard("ibv_create_qp", null_mut(), || {
        if pd.is_null() || attr.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: `attr` is a readable `struct ibv_qp_init_attr` (ibv_create_qp(3)).
        let a = unsafe { &*attr };
        match create_qp(pd, a) {
            Ok(qp) => qp,
            Err(e) => fail_null(e),
        }
    })
}

/// Creates a QP of `pd` as `ibv_create_qp` does; also the body of `rdma_create_qp`.
pub(super) fn create_qp(pd: *mut ibv_pd, a: &ibv_qp_init_attr) -> Result<*mut ibv_qp, i32> {
    let r = rt()?;
    if !a.srq.is_null() {
        return Err(unsupported("ibv_create_qp with an SRQ"));
    }
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        return Err(libc::EINVAL);
    }
    let qp_type = qp_type_from_c(a.qp_type).map_err(|e| errno_of(&e))?;
    // SAFETY: `pd` and both CQs came from this library and are live.
    let (context, pdh, scq, rcq) = unsafe {
        (
            (*pd).context,
            PdHandle((*pd).handle),
            CqHandle((*a.send_cq).handle),
            CqHandle((*a.recv_cq).handle),
        )
    };
    let init = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        cap: cap_from_c(&a.cap),
        qp_type,
        sq_sig_all: a.sq_sig_all != 0,
    };
    let qp = r
        .with(|n, _| n.dev().create_qp(pdh, &init))
        .map_err(|e| errno_of(&e))?;
    Ok(leak_qp(context, pd, a, qp))
}

/// The `struct ibv_qp` of a created QP.
pub(super) fn leak_qp(
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    a: &ibv_qp_init_attr,
    qp: Qp,
) -> *mut ibv_qp {
    leak(ibv_qp {
        context,
        qp_context: a.qp_context,
        pd,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: null_mut(),
        handle: qp.handle.0,
        qp_num: qp.qp_num,
        state: IBV_QPS_RESET,
        qp_type: a.qp_type,
        // SAFETY: all-zero is the static initializer of both on glibc.
        mutex: unsafe { std::mem::zeroed() },
        // SAFETY: as above.
        cond: unsafe { std::mem::zeroed() },
        events_completed: 0,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    guard("ibv_modify_qp", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null() || attr.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: `attr` is a readable `struct ibv_qp_attr` (ibv_modify_qp(3)).
        let (a, m) = match qp_attr_from_c(unsafe { &*attr }, attr_mask as u32) {
            Ok(v) => v,
            Err(e) => return errno_of(&e),
        };
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        match r.with(|n, _| n.dev().modify_qp(h, &a, m)) {
            Ok(()) => {
                if m.contains(verbs_core::QpAttrMask::STATE) {
                    // SAFETY: as above (libibverbs keeps `qp->state` in step the same way).
                    unsafe { (*qp).state = a.qp_state as _ };
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("ibv_query_qp", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null() || attr.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        match r.with(|n, _| n.device().query_qp(h)) {
            Ok((a, init)) => {
                // SAFETY: `attr` (and a non-NULL `init_attr`) are writable (ibv_query_qp(3));
                // `qp`'s pointers are the ones it was created with.
                unsafe {
                    qp_attr_to_c(&a, &mut *attr);
                    (*qp).state = a.qp_state as _;
                    if !init_attr.is_null() {
                        *init_attr = ibv_qp_init_attr {
                            qp_context: (*qp).qp_context,
                            send_cq: (*qp).send_cq,
                            recv_cq: (*qp).recv_cq,
                            srq: null_mut(),
                            cap: cap_to_c(&init.cap),
                            qp_type: (*qp).qp_type,
                            sq_sig_all: c_int::from(init.sq_sig_all),
                        };
                    }
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard("ibv_destroy_qp", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        match r.with(|n, _| n.dev().destroy_qp(h)) {
            Ok(()) => {
                // SAFETY: as above; freed once.
                drop(unsafe { Box::from_raw(qp) });
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// The SGEs of a WR.
///
/// # Safety
/// `sg_list` points to `num_sge` readable `struct ibv_sge` (or `num_sge` is 0).
unsafe fn sges(sg_list: *const ibv_sge, num_sge: c_int) -> Result<Vec<Sge>, i32> {
    let n = usize::try_from(num_sge).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if sg_list.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(sg_list, n) };
    Ok(s.iter()
        .map(|g| Sge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        })
        .collect())
}

/// One `struct ibv_send_wr` as a [`SendWr`].
///
/// # Safety
/// `w` is a readable WR whose `sg_list` and (on a UD QP, `ud`) `wr.ud.ah` are valid.
unsafe fn send_wr(w: &ibv_send_wr, ud: bool) -> Result<SendWr, i32> {
    let opcode = u8::try_from(w.opcode)
        .ok()
        .and_then(WrOpcode::from_raw)
        .ok_or(libc::EINVAL)?;
    // SAFETY: the caller's contract.
    let sg_list = unsafe { sges(w.sg_list, w.num_sge)? };
    let mut wr = SendWr::send(w.wr_id, sg_list);
    wr.opcode = opcode;
    wr.send_flags = SendFlags::from_bits_truncate(w.send_flags);
    // SAFETY: the immediate union is two u32 views of the same 4 bytes.
    wr.imm_data = unsafe { w.ex.imm_data };
    // SAFETY: `wr` is a union of plain-data structs; the opcode says which one the
    // application filled, and each read below is of that one (an unused view reads
    // whatever bytes are there, all valid integers or a pointer not dereferenced).
    unsafe {
        match opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                wr.rdma = RdmaWr {
                    remote_addr: w.wr.rdma.remote_addr,
                    rkey: w.wr.rdma.rkey,
                };
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                wr.atomic = AtomicWr {
                    remote_addr: w.wr.atomic.remote_addr,
                    compare_add: w.wr.atomic.compare_add,
                    swap: w.wr.atomic.swap,
                    rkey: w.wr.atomic.rkey,
                };
            }
            // Only a UD QP's SEND carries an address handle; an RC SEND leaves `wr` as it was.
            WrOpcode::Send | WrOpcode::SendWithImm if ud => {
                let ah = w.wr.ud.ah;
                if !ah.is_null() {
                    wr.ud = UdWr {
                        ah: (*ah.cast::<AhBox>()).attr,
                        remote_qpn: w.wr.ud.remote_qpn,
                        remote_qkey: w.wr.ud.remote_qkey,
                    };
                }
            }
            WrOpcode::Send | WrOpcode::SendWithImm => {}
        }
    }
    Ok(wr)
}

/// `context->ops.post_send` (`ibv_post_send` is inline in verbs.h).
unsafe extern "C" fn rnic_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard("ibv_post_send", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null()) else {
            return libc::EINVAL;
        };
        // SAFETY: a live QP of this library.
        let ud = unsafe { (*qp).qp_type } == IBV_QPT_UD;
        let mut ptrs = Vec::new();
        let mut wrs = Vec::new();
        let mut p = wr;
        while !p.is_null() {
            // SAFETY: `wr` is a NULL-terminated list of readable WRs (ibv_post_send(3)).
            let w = unsafe { &*p };
            // SAFETY: same contract for its SGEs and AH.
            match unsafe { send_wr(w, ud) } {
                Ok(s) => wrs.push(s),
                Err(e) => return set_bad(bad_wr, p, e),
            }
            ptrs.push(p);
            p = w.next;
        }
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        match r.with(|n, _| n.dev().post_send(h, &wrs)) {
            Ok(()) => 0,
            Err(pe) => set_bad(
                bad_wr,
                ptrs.get(pe.bad_wr).copied().unwrap_or(wr),
                errno_of(&pe.error),
            ),
        }
    })
}

/// Stores the failing WR in `*bad_wr` (when given) and returns `e`.
fn set_bad<T>(bad_wr: *mut *mut T, wr: *mut T, e: i32) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: `bad_wr` is a writable out-parameter (ibv_post_send(3)).
        unsafe { *bad_wr = wr };
    }
    e
}

/// `context->ops.post_recv` (`ibv_post_recv` is inline in verbs.h).
unsafe extern "C" fn rnic_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("ibv_post_recv", libc::EIO, || {
        let (Ok(r), false) = (rt(), qp.is_null()) else {
            return libc::EINVAL;
        };
        let mut ptrs = Vec::new();
        let mut wrs = Vec::new();
        let mut p = wr;
        while !p.is_null() {
            // SAFETY: `wr` is a NULL-terminated list of readable WRs (ibv_post_recv(3)).
            let w = unsafe { &*p };
            // SAFETY: same contract for its SGEs.
            match unsafe { sges(w.sg_list, w.num_sge) } {
                Ok(sg_list) => wrs.push(RecvWr {
                    wr_id: w.wr_id,
                    sg_list,
                }),
                Err(e) => return set_bad(bad_wr, p, e),
            }
            ptrs.push(p);
            p = w.next;
        }
        // SAFETY: a live QP of this library.
        let h = QpHandle(unsafe { (*qp).handle });
        match r.with(|n, _| n.dev().post_recv(h, &wrs)) {
            Ok(()) => 0,
            Err(pe) => set_bad(
                bad_wr,
                ptrs.get(pe.bad_wr).copied().unwrap_or(wr),
                errno_of(&pe.error),
            ),
        }
    })
}

/// `context->ops.post_srq_recv`: no SRQs (they cannot be created).
unsafe extern "C" fn rnic_post_srq_recv(
    _srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("ibv_post_srq_recv", libc::EIO, || {
        set_bad(bad_wr, wr, unsupported("ibv_post_srq_recv"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard("ibv_create_ah", null_mut(), || {
        if pd.is_null() || attr.is_null() {
            return fail_null(libc::EINVAL);
        }
        // SAFETY: `pd` is live; `attr` is a readable `struct ibv_ah_attr`.
        let b = unsafe { AhBox::new(pd, (*pd).context, &*attr) };
        if !b.attr.is_global {
            return fail_null(libc::EINVAL); // RoCE: an address vector needs a GRH
        }
        leak(b).cast()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_destroy_ah", libc::EIO, || {
        if ah.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: `ah` came from `ibv_create_ah` (an `AhBox`); freed once.
        drop(unsafe { Box::from_raw(ah.cast::<AhBox>()) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    _pd: *mut ibv_pd,
    _wc: *mut ibv_wc,
    _grh: *mut c_void,
    _port_num: u8,
) -> *mut ibv_ah {
    guard("ibv_create_ah_from_wc", null_mut(), || {
        fail_null(unsupported("ibv_create_ah_from_wc"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    _pd: *mut ibv_pd,
    _attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    guard("ibv_create_srq", null_mut(), || {
        fail_null(unsupported("ibv_create_srq"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(_srq: *mut ibv_srq) -> c_int {
    guard("ibv_destroy_srq", libc::EIO, || {
        unsupported("ibv_destroy_srq")
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    guard("ibv_attach_mcast", libc::EIO, || {
        unsupported("ibv_attach_mcast")
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    guard("ibv_detach_mcast", libc::EIO, || {
        unsupported("ibv_detach_mcast")
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    guard("ibv_resize_cq", libc::EIO, || unsupported("ibv_resize_cq"))
}

/// The extended QP API is not offered: perftest calls this only for `--use_new_post_send`.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    guard("ibv_qp_to_qp_ex", null_mut(), || {
        fail_null(unsupported("ibv_qp_to_qp_ex"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_fork_init() -> c_int {
    guard("ibv_fork_init", 0, || {
        0 // no pinned pages to protect: registered memory is the application's own
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    _context: *mut ibv_context,
    _event: *mut ibv_async_event,
) -> c_int {
    guard("ibv_get_async_event", -1, || {
        fail(unsupported("ibv_get_async_event"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}

/// The `ibv_wc_status_str(3)` strings, as rdma-core spells them.
#[no_mangle]
pub unsafe extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
    guard("ibv_wc_status_str", c"unknown".as_ptr(), || {
        static STRINGS: OnceLock<Vec<std::ffi::CString>> = OnceLock::new();
        let s = STRINGS.get_or_init(|| {
            (0u8..=23)
                .map(|v| {
                    let text = verbs_core::WcStatus::from_raw(v).map_or("unknown", |w| w.as_str());
                    std::ffi::CString::new(text).unwrap_or_default()
                })
                .collect()
        });
        static UNKNOWN: &std::ffi::CStr = c"unknown";
        usize::try_from(status)
            .ok()
            .and_then(|i| s.get(i))
            .map_or(UNKNOWN.as_ptr(), |c| c.as_ptr())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
    guard("ibv_node_type_str", c"unknown".as_ptr(), || {
        match node_type as i64 {
            1 => c"InfiniBand channel adapter".as_ptr(),
            _ => c"unknown".as_ptr(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
    guard("ibv_port_state_str", c"unknown".as_ptr(), || {
        match port_state as i64 {
            1 => c"PORT_DOWN".as_ptr(),
            2 => c"PORT_INIT".as_ptr(),
            3 => c"PORT_ARMED".as_ptr(),
            4 => c"PORT_ACTIVE".as_ptr(),
            5 => c"PORT_ACTIVE_DEFER".as_ptr(),
            _ => c"PORT_NOP".as_ptr(),
        }
    })
}

/// Silences "unused" for the QP-state import used only in conversions' type inference.
const _: QpState = QpState::Reset;
