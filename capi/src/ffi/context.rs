//! The device and its contexts as rdma-core's providers lay them out: the `struct ibv_device`
//! handed to applications is the first member of a `struct verbs_device` (libibverbs
//! `driver.h`), and every `struct ibv_context` is the last member of a `struct verbs_context`
//! whose `abi_compat` says so (`__VERBS_ABI_IS_EXTENDED`).
//!
//! That is what code built against `<infiniband/verbs.h>` relies on: the header's inline
//! `ibv_query_port`, `ibv_query_device_ex`, `ibv_create_cq_ex`, `ibv_create_qp_ex`,
//! `ibv_create_flow`, … find the extended operations with `verbs_get_ctx` (a NULL context
//! makes them fall back or fail with `EOPNOTSUPP`), and provider libraries reached through
//! their direct-verbs entry points (libfabric's EFA provider calls `efadv_query_device` on
//! every device) use `verbs_get_ctx(ctx)->context.device` and `verbs_get_device(dev)->ops`
//! without checking for NULL.
//!
//! The extended slots librnic implements: `query_port` (the full `struct ibv_port_attr`),
//! `query_device_ex`, `create_cq_ex` ([`super::cq_ex`]) and `create_qp_ex`
//! ([`super::qp_ex`]). Every other slot is a stub that logs the call's name once and fails
//! with `EOPNOTSUPP` ([`super::unsupported`]), so a program learns why instead of finding a
//! NULL slot.

use super::objects::leak;
use super::{errno_of, fail_null, guard, rt, unsupported};
use crate::abi::convert::{device_attr_to_c, port_attr_to_c};
use crate::abi::*;
use libc::{c_char, c_int, c_uint, c_void, size_t};
use std::ptr::{self, null_mut};
use std::sync::OnceLock;
use verbs_core::Device;

/// The name `verbs_get_device(device)->ops->name` gives: the provider's.
const PROVIDER_NAME: &std::ffi::CStr = c"rnic";

/// The one device, leaked once: a `struct verbs_device` whose `device` has the configured
/// name. Returns the pointer to that `device` (the first member, so the same address).
pub(super) fn device() -> *mut ibv_device {
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
        let ops = leak(verbs_device_ops {
            name: PROVIDER_NAME.as_ptr(),
            match_min_abi_version: 0,
            match_max_abi_version: 0,
            match_table: ptr::null(),
            static_providers: null_mut(),
            match_device: None,
            alloc_context: None,
            import_context: None,
            alloc_device: None,
            uninit_device: None,
        });
        let vd = leak(verbs_device {
            device: d,
            ops,
            refcount: 1,
            entry: list_node {
                next: null_mut(),
                prev: null_mut(),
            },
            sysfs: null_mut(),
            core_support: 0,
        });
        vd as usize
    }) as *mut ibv_device
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
}

/// A new context whose `async_fd` is `async_fd` (owned by the context from now on): a leaked
/// `struct verbs_context`; the returned pointer is its `context` member.
pub(super) fn new_context(async_fd: c_int) -> *mut ibv_context {
    // SAFETY: every member of `ibv_context_ops` is an `Option` of a function pointer: all-zero
    // is all `None` (NULL), the value libibverbs gives unused slots.
    let mut ops: ibv_context_ops = unsafe { std::mem::zeroed() };
    ops.poll_cq = Some(super::cq::rnic_poll_cq);
    ops.req_notify_cq = Some(super::cq::rnic_req_notify_cq);
    ops.post_send = Some(super::qp::rnic_post_send);
    ops.post_recv = Some(super::qp::rnic_post_recv);
    ops.post_srq_recv = Some(super::srq::rnic_post_srq_recv);
    let vctx = leak(verbs_context {
        query_port: Some(query_port_ex),
        advise_mr: Some(advise_mr),
        alloc_null_mr: Some(alloc_null_mr),
        read_counters: Some(read_counters),
        attach_counters_point_flow: Some(attach_counters_point_flow),
        create_counters: Some(create_counters),
        destroy_counters: Some(destroy_counters),
        reg_dm_mr: Some(reg_dm_mr),
        alloc_dm: Some(alloc_dm),
        free_dm: Some(free_dm),
        modify_flow_action_esp: Some(modify_flow_action_esp),
        destroy_flow_action: Some(destroy_flow_action),
        create_flow_action_esp: Some(create_flow_action_esp),
        modify_qp_rate_limit: Some(modify_qp_rate_limit),
        alloc_parent_domain: Some(alloc_parent_domain),
        dealloc_td: Some(dealloc_td),
        alloc_td: Some(alloc_td),
        modify_cq: Some(modify_cq),
        post_srq_ops: Some(post_srq_ops),
        destroy_rwq_ind_table: Some(destroy_rwq_ind_table),
        create_rwq_ind_table: Some(create_rwq_ind_table),
        destroy_wq: Some(destroy_wq),
        modify_wq: Some(modify_wq),
        create_wq: Some(create_wq),
        query_rt_values: Some(query_rt_values),
        create_cq_ex: Some(super::cq_ex::create_cq_ex),
        r#priv: null_mut(),
        query_device_ex: Some(query_device_ex),
        ibv_destroy_flow: Some(destroy_flow),
        ABI_placeholder2: None,
        ibv_create_flow: Some(create_flow),
        ABI_placeholder1: None,
        open_qp: Some(open_qp),
        create_qp_ex: Some(super::qp_ex::create_qp_ex),
        get_srq_num: Some(get_srq_num),
        create_srq_ex: Some(create_srq_ex),
        open_xrcd: Some(open_xrcd),
        close_xrcd: Some(close_xrcd),
        _ABI_placeholder3: 0,
        sz: std::mem::size_of::<verbs_context>(),
        context: ibv_context {
            device: device(),
            ops,
            cmd_fd: -1,
            async_fd,
            num_comp_vectors: 1,
            // SAFETY: an all-zero pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER on glibc.
            mutex: unsafe { std::mem::zeroed() },
            abi_compat: __VERBS_ABI_IS_EXTENDED as *mut c_void,
        },
    });
    // SAFETY: `vctx` is a live leaked box; the pointer to one of its fields stays valid as
    // long as it does.
    unsafe { ptr::addr_of_mut!((*vctx).context) }
}

/// Frees a context made by [`new_context`] and returns its `async_fd`.
///
/// # Safety
/// `context` came from [`new_context`] and is not used afterwards.
pub(super) unsafe fn free_context(context: *mut ibv_context) -> c_int {
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: `context` is the `context` member of a leaked `verbs_context` (the caller's
    // contract): `container_of`, as libibverbs's `verbs_get_ctx`.
    let vctx = unsafe { Box::from_raw(context.byte_sub(off).cast::<verbs_context>()) };
    vctx.context.async_fd
}

/// The device's attributes as `ibv_query_device` reports them.
///
/// # Errors
/// The runtime did not start (`ENODEV`).
pub(super) fn device_attr() -> Result<ibv_device_attr, i32> {
    let r = rt()?;
    let d = r.with_quiet(|n, _| n.device().query_device());
    // SAFETY: `ibv_device_attr` is plain integers and arrays of them: all-zero is valid.
    let mut out: ibv_device_attr = unsafe { std::mem::zeroed() };
    device_attr_to_c(&d, &mut out);
    Ok(out)
}

/// Port `port_num`'s attributes, every field of `struct ibv_port_attr` (the ones past the old
/// layout, `flags` and `port_cap_flags2`, are 0 as rxe's kernel driver reports them).
///
/// # Errors
/// `ENODEV` (no runtime), the device's errno for a bad port (`EINVAL`).
pub(super) fn port_attr(port_num: u8) -> Result<ibv_port_attr, i32> {
    let r = rt()?;
    let p = r
        .with_quiet(|n, _| n.device().query_port(port_num))
        .map_err(|e| errno_of(&e))?;
    // SAFETY: `ibv_port_attr` is plain integers: all-zero is valid.
    let mut out: ibv_port_attr = unsafe { std::mem::zeroed() };
    port_attr_to_c(&p, &mut out);
    Ok(out)
}

/// `verbs_context.query_port`, which verbs.h's inline `ibv_query_port` calls with
/// `sizeof(struct ibv_port_attr)` of the program's header: as libibverbs's `__lib_query_port`,
/// a shorter struct (an older program) gets the prefix that fits, a longer one zeros past ours.
unsafe extern "C" fn query_port_ex(
    _context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: size_t,
) -> c_int {
    guard("ibv_query_port", libc::EIO, || {
        if port_attr.is_null() {
            return libc::EINVAL;
        }
        let attr = match self::port_attr(port_num) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let n = port_attr_len.min(std::mem::size_of::<ibv_port_attr>());
        // SAFETY: `port_attr` holds `port_attr_len` writable bytes (the header passes the
        // size of the struct it points to); `attr` is a distinct local.
        unsafe {
            ptr::write_bytes(port_attr.cast::<u8>(), 0, port_attr_len);
            ptr::copy_nonoverlapping(ptr::addr_of!(attr).cast::<u8>(), port_attr.cast(), n);
        }
        0
    })
}

/// `verbs_context.query_device_ex` (`ibv_query_device_ex(3)`), as libibverbs's
/// `ibv_cmd_query_device_any` fills it for rxe: `input->comp_mask` must be 0 (`EINVAL`),
/// `attr_size` at least `struct ibv_device_attr` (`EINVAL`); `orig_attr` as
/// `ibv_query_device`, `device_cap_flags_ex` the same capability bits, `phys_port_cnt_ex` 1, no
/// ODP, TSO, RSS, tag matching, CQ moderation, packet pacing or completion timestamps (all 0).
/// A shorter `attr_size` (an older program) gets the prefix that fits.
unsafe extern "C" fn query_device_ex(
    _context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: size_t,
) -> c_int {
    guard("ibv_query_device_ex", libc::EIO, || {
        // SAFETY: a non-NULL `input` is a readable struct (ibv_query_device_ex(3)).
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return libc::EINVAL;
        }
        if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        let orig = match device_attr() {
            Ok(a) => a,
            Err(e) => return e,
        };
        // SAFETY: `ibv_device_attr_ex` is plain integers: all-zero is valid.
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        ex.orig_attr = orig;
        ex.device_cap_flags_ex = u64::from(orig.device_cap_flags);
        ex.phys_port_cnt_ex = u32::from(orig.phys_port_cnt);
        let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: `attr` holds `attr_size` writable bytes (the header passes the size of the
        // struct it points to); `ex` is a distinct local.
        unsafe {
            ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
            ptr::copy_nonoverlapping(ptr::addr_of!(ex).cast::<u8>(), attr.cast(), n);
        }
        0
    })
}

/// Stubs for the extended slots librnic does not implement: each logs the C call's name once
/// ([`unsupported`]) and fails as the header expects of a provider without the feature —
/// `EOPNOTSUPP` returned, or NULL with `errno` `EOPNOTSUPP`.
macro_rules! unsupported_slots {
    ($(
        $(#[$doc:meta])*
        $fn:ident = $call:literal ($($arg:ident: $ty:ty),*) -> $ret:ident;
    )*) => {$(
        $(#[$doc])*
        unsafe extern "C" fn $fn($(_: $ty),*) -> unsupported_slots!(@type $ret) {
            guard($call, unsupported_slots!(@panic $ret), || {
                unsupported_slots!(@fail $ret, unsupported($call))
            })
        }
    )*};
    (@type int) => { c_int };
    (@type ptr) => { *mut c_void };
    (@type pd) => { *mut ibv_pd };
    (@type mr) => { *mut ibv_mr };
    (@type td) => { *mut ibv_td };
    (@type qp) => { *mut ibv_qp };
    (@type wq) => { *mut ibv_wq };
    (@type srq) => { *mut ibv_srq };
    (@type xrcd) => { *mut ibv_xrcd };
    (@type ind) => { *mut ibv_rwq_ind_table };
    (@panic int) => { libc::EIO };
    (@panic $other:ident) => { null_mut() };
    (@fail int, $e:expr) => { $e };
    (@fail $other:ident, $e:expr) => { fail_null($e) };
}

unsupported_slots! {
    advise_mr = "ibv_advise_mr" (pd: *mut ibv_pd, advice: c_uint, flags: u32, sg: *mut ibv_sge, n: u32) -> int;
    alloc_null_mr = "ibv_alloc_null_mr" (pd: *mut ibv_pd) -> mr;
    read_counters = "ibv_read_counters" (c: *mut c_void, v: *mut u64, n: u32, f: u32) -> int;
    attach_counters_point_flow = "ibv_attach_counters_point_flow" (c: *mut c_void, a: *mut c_void, f: *mut c_void) -> int;
    create_counters = "ibv_create_counters" (ctx: *mut ibv_context, a: *mut c_void) -> ptr;
    destroy_counters = "ibv_destroy_counters" (c: *mut c_void) -> int;
    reg_dm_mr = "ibv_reg_dm_mr" (pd: *mut ibv_pd, dm: *mut c_void, off: u64, len: size_t, access: c_uint) -> mr;
    alloc_dm = "ibv_alloc_dm" (ctx: *mut ibv_context, a: *mut c_void) -> ptr;
    free_dm = "ibv_free_dm" (dm: *mut c_void) -> int;
    modify_flow_action_esp = "ibv_modify_flow_action_esp" (a: *mut c_void, b: *mut c_void) -> int;
    destroy_flow_action = "ibv_destroy_flow_action" (a: *mut c_void) -> int;
    create_flow_action_esp = "ibv_create_flow_action_esp" (ctx: *mut ibv_context, a: *mut c_void) -> ptr;
    modify_qp_rate_limit = "ibv_modify_qp_rate_limit" (qp: *mut ibv_qp, a: *mut c_void) -> int;
    alloc_parent_domain = "ibv_alloc_parent_domain" (ctx: *mut ibv_context, a: *mut c_void) -> pd;
    dealloc_td = "ibv_dealloc_td" (td: *mut ibv_td) -> int;
    alloc_td = "ibv_alloc_td" (ctx: *mut ibv_context, a: *mut c_void) -> td;
    modify_cq = "ibv_modify_cq" (cq: *mut ibv_cq, a: *mut c_void) -> int;
    post_srq_ops = "ibv_post_srq_ops" (srq: *mut ibv_srq, op: *mut c_void, bad: *mut *mut c_void) -> int;
    destroy_rwq_ind_table = "ibv_destroy_rwq_ind_table" (t: *mut ibv_rwq_ind_table) -> int;
    create_rwq_ind_table = "ibv_create_rwq_ind_table" (ctx: *mut ibv_context, a: *mut c_void) -> ind;
    destroy_wq = "ibv_destroy_wq" (wq: *mut ibv_wq) -> int;
    modify_wq = "ibv_modify_wq" (wq: *mut ibv_wq, a: *mut c_void) -> int;
    create_wq = "ibv_create_wq" (ctx: *mut ibv_context, a: *mut c_void) -> wq;
    query_rt_values = "ibv_query_rt_values_ex" (ctx: *mut ibv_context, v: *mut c_void) -> int;
    destroy_flow = "ibv_destroy_flow" (f: *mut c_void) -> int;
    create_flow = "ibv_create_flow" (qp: *mut ibv_qp, a: *mut c_void) -> ptr;
    open_qp = "ibv_open_qp" (ctx: *mut ibv_context, a: *mut c_void) -> qp;
    get_srq_num = "ibv_get_srq_num" (srq: *mut ibv_srq, n: *mut u32) -> int;
    /// Only the SRQs `ibv_create_srq` cannot make (XRC, tag matching) reach this slot: the
    /// header's inline `ibv_create_srq_ex` calls `ibv_create_srq` for a basic one.
    create_srq_ex = "ibv_create_srq_ex (XRC or tag-matching SRQ)" (ctx: *mut ibv_context, a: *mut ibv_srq_init_attr_ex) -> srq;
    open_xrcd = "ibv_open_xrcd" (ctx: *mut ibv_context, a: *mut c_void) -> xrcd;
    close_xrcd = "ibv_close_xrcd" (x: *mut ibv_xrcd) -> int;
}
