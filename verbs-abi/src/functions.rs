//! The prototypes of the libibverbs functions that both directions of the ABI use, as
//! function pointer types named as the C functions (`functions::ibv_open_device`): the
//! hardware backend calls these (resolved with `dlsym`), and librnic.so exports them
//! (rnic-capi checks at compile time that each of its exports has exactly this type). Each
//! doc gives the C prototype of `infiniband/verbs.h` (rdma-core 44) the type transcribes, with
//! the struct types of this crate; `enum` parameters are the integer the enum is
//! ([`consts`] has the enum types).
//!
//! The functions verbs.h implements inline (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) are not here: they are the
//! `ops` of [`ibv_context_ops`], which a caller goes through as the header does.

// The types carry the C functions' names.
#![allow(non_camel_case_types)]

use crate::*;
use libc::{c_char, c_int, c_uint, c_void, size_t};

/// `struct ibv_device **ibv_get_device_list(int *num_devices)`.
pub type ibv_get_device_list =
    unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut ibv_device;
/// `void ibv_free_device_list(struct ibv_device **list)`.
pub type ibv_free_device_list = unsafe extern "C" fn(list: *mut *mut ibv_device);
/// `const char *ibv_get_device_name(struct ibv_device *device)`.
pub type ibv_get_device_name = unsafe extern "C" fn(device: *mut ibv_device) -> *const c_char;
/// `struct ibv_context *ibv_open_device(struct ibv_device *device)`.
pub type ibv_open_device = unsafe extern "C" fn(device: *mut ibv_device) -> *mut ibv_context;
/// `int ibv_close_device(struct ibv_context *context)`.
pub type ibv_close_device = unsafe extern "C" fn(context: *mut ibv_context) -> c_int;
/// `int ibv_query_device(struct ibv_context *, struct ibv_device_attr *)`.
pub type ibv_query_device =
    unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
/// `int ibv_query_port(struct ibv_context *, uint8_t port_num, struct _compat_ibv_port_attr *)`:
/// the exported function, which verbs.h's inline `ibv_query_port` calls (after zeroing the
/// whole `struct ibv_port_attr`) for a context that is not extended; it fills the prefix of
/// `struct ibv_port_attr` the old layout has (`state` … `link_layer`, `flags`).
pub type ibv_query_port = unsafe extern "C" fn(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut _compat_ibv_port_attr,
) -> c_int;
/// `int ibv_query_gid(struct ibv_context *, uint8_t port_num, int index, union ibv_gid *)`.
pub type ibv_query_gid = unsafe extern "C" fn(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int;
/// `struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *)`.
pub type ibv_create_comp_channel =
    unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_comp_channel;
/// `int ibv_destroy_comp_channel(struct ibv_comp_channel *)`.
pub type ibv_destroy_comp_channel = unsafe extern "C" fn(channel: *mut ibv_comp_channel) -> c_int;
/// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *)`.
pub type ibv_alloc_pd = unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd;
/// `int ibv_dealloc_pd(struct ibv_pd *)`.
pub type ibv_dealloc_pd = unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int;
/// `struct ibv_mr *ibv_reg_mr(struct ibv_pd *, void *addr, size_t length, int access)`: the
/// exported function verbs.h's `ibv_reg_mr` macro calls when `access` has no
/// `IBV_ACCESS_OPTIONAL_*` bit.
pub type ibv_reg_mr = unsafe extern "C" fn(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    access: c_int,
) -> *mut ibv_mr;
/// `int ibv_dereg_mr(struct ibv_mr *)`.
pub type ibv_dereg_mr = unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int;
/// `struct ibv_cq *ibv_create_cq(struct ibv_context *, int cqe, void *cq_context,
/// struct ibv_comp_channel *, int comp_vector)`.
pub type ibv_create_cq = unsafe extern "C" fn(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq;
/// `int ibv_destroy_cq(struct ibv_cq *)`.
pub type ibv_destroy_cq = unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int;
/// `int ibv_get_cq_event(struct ibv_comp_channel *, struct ibv_cq **, void **cq_context)`.
pub type ibv_get_cq_event = unsafe extern "C" fn(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int;
/// `void ibv_ack_cq_events(struct ibv_cq *, unsigned int nevents)`.
pub type ibv_ack_cq_events = unsafe extern "C" fn(cq: *mut ibv_cq, nevents: c_uint);
/// `struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)`.
pub type ibv_create_qp =
    unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
/// `int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask)`.
pub type ibv_modify_qp =
    unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
/// `int ibv_query_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask,
/// struct ibv_qp_init_attr *)`.
pub type ibv_query_qp = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int;
/// `int ibv_destroy_qp(struct ibv_qp *)`.
pub type ibv_destroy_qp = unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int;
/// `struct ibv_srq *ibv_create_srq(struct ibv_pd *, struct ibv_srq_init_attr *)`.
pub type ibv_create_srq =
    unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
/// `int ibv_modify_srq(struct ibv_srq *, struct ibv_srq_attr *, int srq_attr_mask)`.
pub type ibv_modify_srq =
    unsafe extern "C" fn(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int;
/// `int ibv_query_srq(struct ibv_srq *, struct ibv_srq_attr *)`.
pub type ibv_query_srq = unsafe extern "C" fn(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int;
/// `int ibv_destroy_srq(struct ibv_srq *)`.
pub type ibv_destroy_srq = unsafe extern "C" fn(srq: *mut ibv_srq) -> c_int;
/// `int ibv_get_async_event(struct ibv_context *, struct ibv_async_event *)`.
pub type ibv_get_async_event =
    unsafe extern "C" fn(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
/// `void ibv_ack_async_event(struct ibv_async_event *)`.
pub type ibv_ack_async_event = unsafe extern "C" fn(event: *mut ibv_async_event);
/// `int ibv_query_gid_type(struct ibv_context *, uint8_t port_num, unsigned int index, enum
/// ibv_gid_type_sysfs *type)` (`infiniband/driver.h`, exported as `IBVERBS_PRIVATE_*`): the
/// type of a GID table entry, `IBV_GID_TYPE_SYSFS_ROCE_V2` = 1 for RoCE v2.
pub type ibv_query_gid_type = unsafe extern "C" fn(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    gid_type: *mut c_uint,
) -> c_int;
