//! libibverbs: the structs of `/usr/include/infiniband/verbs.h` (rdma-core 44), x86-64 layout.
//! Their constants and enum types are in [`consts`](super::consts). See [the module
//! above](super) for the naming rules.

// The types and fields carry the C names; a field means what the header says it means, so
// only the types carry docs.
#![allow(missing_docs)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, size_t};

use super::{
    __be16, __be32, __be64, ibv_atomic_cap, ibv_event_type, ibv_mig_state, ibv_mtu, ibv_mw_type,
    ibv_node_type, ibv_port_state, ibv_qp_state, ibv_qp_type, ibv_srq_type, ibv_transport_type,
    ibv_wc_opcode, ibv_wc_status, ibv_wq_state, ibv_wq_type, ibv_wr_opcode, IBV_SYSFS_NAME_MAX,
    IBV_SYSFS_PATH_MAX,
};

// ---------------------------------------------------------------------------------------------
// Device, context, attributes.

/// `union ibv_gid` (`infiniband/verbs.h`): a GID, 16 bytes in network byte order.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

/// `union ibv_gid`'s `global` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_global {
    pub subnet_prefix: __be64,
    pub interface_id: __be64,
}

/// `struct _ibv_device_ops` (`infiniband/verbs.h`): obsolete, never called; keep `NULL`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct _ibv_device_ops {
    pub _dummy1:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut ibv_context>,
    pub _dummy2: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
}

/// `struct ibv_device` (`infiniband/verbs.h`): what `ibv_get_device_list` returns.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: ibv_node_type,
    pub transport_type: ibv_transport_type,
    /// Kernel IB device name, e.g. `"mlx5_0"` (NUL-terminated).
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name, e.g. `"uverbs0"`.
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the `infiniband_verbs` class device.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// sysfs path of the `infiniband` class device.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `struct _compat_ibv_port_attr` (`infiniband/verbs.h`): declared, never defined (opaque).
#[repr(C)]
pub struct _compat_ibv_port_attr {
    _opaque: [u8; 0],
}

/// A `void *(*)(void)` slot of [`ibv_context_ops`] kept for ABI compatibility only.
pub type ibv_compat_fn = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `struct ibv_context_ops` (`infiniband/verbs.h`), every slot in header order. The inline
/// `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and
/// `ibv_req_notify_cq` of the header call through `poll_cq`, `req_notify_cq`,
/// `post_srq_recv`, `post_send` and `post_recv`; the `_compat_*` slots are never called.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<
        unsafe extern "C" fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int,
    >,
    pub _compat_query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut _compat_ibv_port_attr,
        ) -> c_int,
    >,
    pub _compat_alloc_pd: ibv_compat_fn,
    pub _compat_dealloc_pd: ibv_compat_fn,
    pub _compat_reg_mr: ibv_compat_fn,
    pub _compat_rereg_mr: ibv_compat_fn,
    pub _compat_dereg_mr: ibv_compat_fn,
    pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw>,
    pub bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int,
    >,
    pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
    pub _compat_create_cq: ibv_compat_fn,
    pub poll_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int>,
    pub req_notify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int>,
    pub _compat_cq_event: ibv_compat_fn,
    pub _compat_resize_cq: ibv_compat_fn,
    pub _compat_destroy_cq: ibv_compat_fn,
    pub _compat_create_srq: ibv_compat_fn,
    pub _compat_modify_srq: ibv_compat_fn,
    pub _compat_query_srq: ibv_compat_fn,
    pub _compat_destroy_srq: ibv_compat_fn,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub _compat_create_qp: ibv_compat_fn,
    pub _compat_query_qp: ibv_compat_fn,
    pub _compat_modify_qp: ibv_compat_fn,
    pub _compat_destroy_qp: ibv_compat_fn,
    pub post_send: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_send_wr,
            bad_wr: *mut *mut ibv_send_wr,
        ) -> c_int,
    >,
    pub post_recv: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_recv_wr,
            bad_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub _compat_create_ah: ibv_compat_fn,
    pub _compat_destroy_ah: ibv_compat_fn,
    pub _compat_attach_mcast: ibv_compat_fn,
    pub _compat_detach_mcast: ibv_compat_fn,
    pub _compat_async_event: ibv_compat_fn,
}

/// `struct ibv_context` (`infiniband/verbs.h`): an open device. `abi_compat` must not be
/// `(void *)UINTPTR_MAX` (`__VERBS_ABI_IS_EXTENDED`) unless a `struct verbs_context` precedes
/// this struct in memory: the header's inline verbs look for one there.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `struct ibv_device_attr` (`infiniband/verbs.h`): what `ibv_query_device` fills.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: __be64,
    pub sys_image_guid: __be64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: ibv_atomic_cap,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (`infiniband/verbs.h`): what `ibv_query_port` fills.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: ibv_port_state,
    pub max_mtu: ibv_mtu,
    pub active_mtu: ibv_mtu,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_async_event` (`infiniband/verbs.h`): what `ibv_get_async_event` returns.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: ibv_event_type,
}

/// `struct ibv_async_event`'s `element` union (`infiniband/verbs.h`): the object the event
/// is about, by `event_type`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut ibv_wq,
    pub port_num: c_int,
}

// ---------------------------------------------------------------------------------------------
// Completions.

/// `struct ibv_wc` (`infiniband/verbs.h`): a work completion, what `ibv_poll_cq` fills.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// C's anonymous union `{ imm_data; invalidated_rkey; }`.
    pub ex: ibv_wc_ex,
    pub qp_num: u32,
    pub src_qp: u32,
    /// `IBV_WC_GRH`, `IBV_WC_WITH_IMM`, ….
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_wc`'s anonymous union (`infiniband/verbs.h`), the Rust field `ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_wc_ex {
    /// With `IBV_WC_WITH_IMM`: the immediate data, network byte order.
    pub imm_data: __be32,
    /// With `IBV_WC_WITH_INV`: the invalidated rkey.
    pub invalidated_rkey: u32,
}

// ---------------------------------------------------------------------------------------------
// PD, MR, MW, AH and the objects only met behind pointers.

/// `struct ibv_pd` (`infiniband/verbs.h`): a protection domain.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_td` (`infiniband/verbs.h`): a thread domain.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_xrcd` (`infiniband/verbs.h`): an XRC domain.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `struct ibv_mr` (`infiniband/verbs.h`): a memory region.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: size_t,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw` (`infiniband/verbs.h`): a memory window. C's `type` is `r#type`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub r#type: ibv_mw_type,
}

/// `struct ibv_mw_bind_info` (`infiniband/verbs.h`): the region a memory window binds to.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    /// `IBV_ACCESS_*`.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (`infiniband/verbs.h`): `ibv_bind_mw`'s request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    /// `IBV_SEND_*`.
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_global_route` (`infiniband/verbs.h`): the GRH part of an address vector.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_grh` (`infiniband/verbs.h`): the 40-byte global route header a UD receive
/// buffer starts with.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    pub version_tclass_flow: __be32,
    pub paylen: __be16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

/// `struct ibv_ah_attr` (`infiniband/verbs.h`): an address vector.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_ah` (`infiniband/verbs.h`): an address handle.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

// ---------------------------------------------------------------------------------------------
// CQ, SRQ, WQ.

/// `struct ibv_comp_channel` (`infiniband/verbs.h`): a completion event channel.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq` (`infiniband/verbs.h`): a completion queue.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_srq_attr` (`infiniband/verbs.h`): SRQ limits.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` (`infiniband/verbs.h`): `ibv_create_srq`'s attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap` (`infiniband/verbs.h`): tag matching limits of a `IBV_SRQT_TM` SRQ.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex` (`infiniband/verbs.h`): `ibv_create_srq_ex`'s and
/// `rdma_create_srq_ex`'s attributes; `comp_mask` (`IBV_SRQ_INIT_ATTR_*`) says which of the
/// fields after it are valid.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    /// `IBV_SRQT_*`.
    pub srq_type: ibv_srq_type,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_srq` (`infiniband/verbs.h`): a shared receive queue.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_wq` (`infiniband/verbs.h`): a work queue (RSS); here only for
/// `ibv_async_event.element.wq`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wq {
    pub context: *mut ibv_context,
    pub wq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub wq_num: u32,
    pub handle: u32,
    pub state: ibv_wq_state,
    pub wq_type: ibv_wq_type,
    pub post_recv: Option<
        unsafe extern "C" fn(
            current: *mut ibv_wq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub comp_mask: u32,
}

/// `struct ibv_rwq_ind_table` (`infiniband/verbs.h`): an RSS indirection table.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rwq_ind_table {
    pub context: *mut ibv_context,
    pub ind_tbl_handle: c_int,
    pub ind_tbl_num: c_int,
    pub comp_mask: u32,
}

// ---------------------------------------------------------------------------------------------
// QP.

/// `struct ibv_qp_cap` (`infiniband/verbs.h`): QP queue sizes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (`infiniband/verbs.h`): `ibv_create_qp`'s attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: ibv_qp_type,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf` (`infiniband/verbs.h`): RSS hashing of `ibv_qp_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex` (`infiniband/verbs.h`): `ibv_create_qp_ex`'s and
/// `rdma_create_qp_ex`'s attributes; `comp_mask` (`IBV_QP_INIT_ATTR_*`) says which of the
/// fields after it are set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: ibv_qp_type,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_attr` (`infiniband/verbs.h`): `ibv_modify_qp`'s and `ibv_query_qp`'s
/// attributes, selected by an `IBV_QP_*` mask.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_attr {
    pub qp_state: ibv_qp_state,
    pub cur_qp_state: ibv_qp_state,
    pub path_mtu: ibv_mtu,
    pub path_mig_state: ibv_mig_state,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    /// `IBV_ACCESS_*`.
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_qp` (`infiniband/verbs.h`): a queue pair.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: ibv_qp_state,
    pub qp_type: ibv_qp_type,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

// ---------------------------------------------------------------------------------------------
// Work requests.

/// `struct ibv_sge` (`infiniband/verbs.h`): a scatter/gather element.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` (`infiniband/verbs.h`): a send work request (`ibv_post_send`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: ibv_wr_opcode,
    /// `IBV_SEND_*`.
    pub send_flags: c_uint,
    /// C's anonymous union `{ imm_data; invalidate_rkey; }`.
    pub ex: ibv_send_wr_ex,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// C's anonymous union `{ bind_mw; tso; }`.
    pub bind_tso: ibv_send_wr_bind_tso,
}

/// `struct ibv_send_wr`'s first anonymous union (`infiniband/verbs.h`), the Rust field `ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ex {
    /// For `*_WITH_IMM`: the immediate data, network byte order.
    pub imm_data: __be32,
    /// For `*_INV`: the rkey to invalidate.
    pub invalidate_rkey: u32,
}

/// `struct ibv_send_wr`'s `wr` union (`infiniband/verbs.h`), by opcode and QP type.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `ibv_send_wr.wr.rdma` (`infiniband/verbs.h`): RDMA read and write.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.atomic` (`infiniband/verbs.h`): compare-and-swap and fetch-and-add.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.ud` (`infiniband/verbs.h`): the destination of a UD send.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `struct ibv_send_wr`'s `qp_type` union (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// `ibv_send_wr.qp_type.xrc` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// `struct ibv_send_wr`'s last anonymous union (`infiniband/verbs.h`), the Rust field
/// `bind_tso`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_tso {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `ibv_send_wr.bind_mw` (`infiniband/verbs.h`): `IBV_WR_BIND_MW`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr.tso` (`infiniband/verbs.h`): `IBV_WR_TSO`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// `struct ibv_recv_wr` (`infiniband/verbs.h`): a receive work request (`ibv_post_recv`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}
