//! The extended verbs of `/usr/include/infiniband/verbs.h` (rdma-core 44) and the two structs of
//! libibverbs's private `libibverbs/driver.h` that providers and libraries reach through the
//! public ones, x86-64 layout:
//!
//! * [`verbs_context`]: the table of extended operations that precedes every provider's
//!   `struct ibv_context` in memory. The header's inline functions (`ibv_query_port`,
//!   `ibv_query_device_ex`, `ibv_create_cq_ex`, `ibv_create_qp_ex`, `ibv_create_flow`, …) find it
//!   with `verbs_get_ctx` (`context->abi_compat == __VERBS_ABI_IS_EXTENDED`, then
//!   `container_of`) and call a slot only when `sz` covers it and it is not NULL
//!   (`verbs_get_ctx_op`).
//! * [`verbs_device`] (`driver.h`): the provider's device, whose first member is the
//!   `struct ibv_device` handed to applications; provider libraries (`libefa`'s `is_efa_dev`,
//!   `libmlx5`'s `is_mlx5_dev`) read its `ops` with `container_of` to tell their devices from
//!   others. [`verbs_device_ops`] is what `ops` points to.
//! * [`ibv_device_attr_ex`] and its parts (`ibv_query_device_ex`), [`ibv_cq_ex`] and
//!   [`ibv_cq_init_attr_ex`] (`ibv_create_cq_ex` and the `ibv_start_poll` API), [`ibv_qp_ex`] and
//!   [`ibv_data_buf`] (`ibv_qp_to_qp_ex` and the `ibv_wr_*` API).
//!
//! `driver.h` is not installed by `libibverbs-dev`: the layout test checks [`verbs_device`],
//! [`verbs_device_ops`] and [`list_node`] against a transcription of rdma-core 44's definition
//! compiled by the same C compiler.

// The types and fields carry the C names (`ABI_placeholder1` included); a field means what the
// header says it means, so only the types carry docs.
#![allow(missing_docs, non_snake_case)]

use libc::{c_char, c_int, c_uint, c_void, size_t};

use super::{
    __be32, ibv_context, ibv_cq, ibv_device, ibv_device_attr, ibv_mr, ibv_mw, ibv_mw_bind_info,
    ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_init_attr_ex, ibv_rwq_ind_table, ibv_sge, ibv_srq,
    ibv_srq_init_attr_ex, ibv_td, ibv_wc_opcode, ibv_wc_status, ibv_wq, ibv_xrcd,
};
use super::{ibv_ah, ibv_comp_channel};

/// `__VERBS_ABI_IS_EXTENDED` (`infiniband/verbs.h`): the value of `ibv_context.abi_compat` that
/// says a [`verbs_context`] precedes the context, `(void *)UINTPTR_MAX`.
pub const __VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// An object of a kind this crate does not define (counters, flows, device memory, work
/// queue attributes …): the extended slots that take or return one are typed with it.
pub type ibv_opaque = c_void;

// ---------------------------------------------------------------------------------------------
// driver.h: the device.

/// `struct list_node` (ccan `list.h`, used by `driver.h`): a doubly linked list link.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct list_node {
    pub next: *mut list_node,
    pub prev: *mut list_node,
}

/// `struct verbs_device_ops` (`libibverbs/driver.h`): a provider's description; `name` is the
/// provider's name (`"rxe"`, `"mlx5"`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct verbs_device_ops {
    pub name: *const c_char,
    pub match_min_abi_version: u32,
    pub match_max_abi_version: u32,
    pub match_table: *const c_void,
    pub static_providers: *mut *const verbs_device_ops,
    pub match_device: Option<unsafe extern "C" fn(sysfs_dev: *mut c_void) -> bool>,
    pub alloc_context: Option<
        unsafe extern "C" fn(
            device: *mut ibv_device,
            cmd_fd: c_int,
            private_data: *mut c_void,
        ) -> *mut verbs_context,
    >,
    pub import_context:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut verbs_context>,
    pub alloc_device: Option<unsafe extern "C" fn(sysfs_dev: *mut c_void) -> *mut verbs_device>,
    pub uninit_device: Option<unsafe extern "C" fn(device: *mut verbs_device)>,
}

/// `struct verbs_device` (`libibverbs/driver.h`): `device` must be first (applications get a
/// pointer to it; `verbs_get_device` is `container_of`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct verbs_device {
    pub device: ibv_device,
    pub ops: *const verbs_device_ops,
    /// `atomic_int`.
    pub refcount: c_int,
    pub entry: list_node,
    /// `struct verbs_sysfs_dev *`.
    pub sysfs: *mut c_void,
    pub core_support: u64,
}

// ---------------------------------------------------------------------------------------------
// The extended context.

/// `struct verbs_context` (`infiniband/verbs.h`): the extended operations, "growing up" (a
/// new slot is added at the top), then `sz` (this struct's size) and the `ibv_context` itself,
/// which must be last. The C member `priv` is `r#priv`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct verbs_context {
    pub query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut ibv_port_attr,
            port_attr_len: size_t,
        ) -> c_int,
    >,
    pub advise_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            advice: c_uint,
            flags: u32,
            sg_list: *mut ibv_sge,
            num_sges: u32,
        ) -> c_int,
    >,
    pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
    pub read_counters: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_opaque,
            counters_value: *mut u64,
            ncounters: u32,
            flags: u32,
        ) -> c_int,
    >,
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_opaque,
            attr: *mut ibv_opaque,
            flow: *mut ibv_opaque,
        ) -> c_int,
    >,
    pub create_counters: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_opaque,
        ) -> *mut ibv_opaque,
    >,
    pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut ibv_opaque) -> c_int>,
    pub reg_dm_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            dm: *mut ibv_opaque,
            dm_offset: u64,
            length: size_t,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    pub alloc_dm: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_opaque) -> *mut ibv_opaque,
    >,
    pub free_dm: Option<unsafe extern "C" fn(dm: *mut ibv_opaque) -> c_int>,
    pub modify_flow_action_esp:
        Option<unsafe extern "C" fn(action: *mut ibv_opaque, attr: *mut ibv_opaque) -> c_int>,
    pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut ibv_opaque) -> c_int>,
    pub create_flow_action_esp: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_opaque) -> *mut ibv_opaque,
    >,
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_opaque) -> c_int>,
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_opaque) -> *mut ibv_pd,
    >,
    pub dealloc_td: Option<unsafe extern "C" fn(td: *mut ibv_td) -> c_int>,
    pub alloc_td: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut ibv_opaque) -> *mut ibv_td,
    >,
    pub modify_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_opaque) -> c_int>,
    pub post_srq_ops: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            op: *mut ibv_opaque,
            bad_op: *mut *mut ibv_opaque,
        ) -> c_int,
    >,
    pub destroy_rwq_ind_table:
        Option<unsafe extern "C" fn(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int>,
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_opaque,
        ) -> *mut ibv_rwq_ind_table,
    >,
    pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut ibv_wq) -> c_int>,
    pub modify_wq: Option<unsafe extern "C" fn(wq: *mut ibv_wq, wq_attr: *mut ibv_opaque) -> c_int>,
    pub create_wq: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            wq_init_attr: *mut ibv_opaque,
        ) -> *mut ibv_wq,
    >,
    pub query_rt_values:
        Option<unsafe extern "C" fn(context: *mut ibv_context, values: *mut ibv_opaque) -> c_int>,
    pub create_cq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_cq_init_attr_ex,
        ) -> *mut ibv_cq_ex,
    >,
    /// `struct verbs_ex_private *priv`: libibverbs's own; NULL outside libibverbs.
    pub r#priv: *mut c_void,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            input: *const ibv_query_device_ex_input,
            attr: *mut ibv_device_attr_ex,
            attr_size: size_t,
        ) -> c_int,
    >,
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(flow: *mut ibv_opaque) -> c_int>,
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    pub ibv_create_flow: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut ibv_opaque) -> *mut ibv_opaque,
    >,
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    pub open_qp: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_opaque) -> *mut ibv_qp,
    >,
    pub create_qp_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
        ) -> *mut ibv_qp,
    >,
    pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
    pub create_srq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
        ) -> *mut ibv_srq,
    >,
    pub open_xrcd: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            xrcd_init_attr: *mut ibv_opaque,
        ) -> *mut ibv_xrcd,
    >,
    pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
    pub _ABI_placeholder3: u64,
    /// `sizeof(struct verbs_context)` for the library that made it (`verbs_get_ctx_op`
    /// compares it with each slot's offset).
    pub sz: size_t,
    pub context: ibv_context,
}

// ---------------------------------------------------------------------------------------------
// ibv_query_device_ex.

/// `struct ibv_query_device_ex_input` (`infiniband/verbs.h`): `comp_mask` must be 0.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_odp_caps` (`infiniband/verbs.h`): on-demand paging.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_caps_per_transport,
}

/// `ibv_odp_caps.per_transport_caps` (an anonymous struct in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps_per_transport {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_tso_caps` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps` (`infiniband/verbs.h`): tag matching.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex` (`infiniband/verbs.h`): what `ibv_query_device_ex` fills.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

// ---------------------------------------------------------------------------------------------
// ibv_create_cq_ex and the poll API.

/// `struct ibv_cq_init_attr_ex` (`infiniband/verbs.h`): `ibv_create_cq_ex`'s attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    /// Bits of `enum ibv_create_cq_wc_flags` (`IBV_WC_EX_WITH_*`).
    pub wc_flags: u64,
    /// Bits of `enum ibv_cq_init_attr_mask`.
    pub comp_mask: u32,
    /// Bits of `enum ibv_create_cq_attr_flags`.
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_poll_cq_attr` (`infiniband/verbs.h`): `ibv_start_poll`'s argument.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info` (`infiniband/verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc_tm_info {
    pub tag: u64,
    pub r#priv: u32,
}

/// `struct ibv_cq_ex` (`infiniband/verbs.h`): an extended CQ. Its first members are
/// `struct ibv_cq`'s (`ibv_cq_ex_to_cq` is a cast); `status` and `wr_id` describe the current
/// completion between `start_poll` and `end_poll`, the `read_*` slots its other fields.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: ibv_wc_status,
    pub wr_id: u64,
    pub start_poll:
        Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> ibv_wc_opcode>,
    pub read_vendor_err: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> __be32>,
    pub read_qp_num: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
    pub read_cvlan: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u16>,
    pub read_flow_tag: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    pub read_tm_info:
        Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info)>,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
}

// ---------------------------------------------------------------------------------------------
// ibv_qp_ex and the work request builders.

/// `struct ibv_data_buf` (`infiniband/verbs.h`): one buffer of `ibv_wr_set_inline_data_list`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: size_t,
}

/// `struct ibv_qp_ex` (`infiniband/verbs.h`): a QP with the `ibv_wr_*` post API. `qp_base` is
/// the `struct ibv_qp`; `wr_id` and `wr_flags` (`IBV_SEND_*`) apply to the next WR a builder
/// (`wr_send`, `wr_rdma_write`, …) starts; the setters (`wr_set_sge`, …) complete the last one.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            compare: u64,
            swap: u64,
        ),
    >,
    pub wr_atomic_fetch_add:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64)>,
    pub wr_bind_mw: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            mw: *mut ibv_mw,
            rkey: u32,
            bind_info: *const ibv_mw_bind_info,
        ),
    >,
    pub wr_local_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    pub wr_rdma_write:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    pub wr_rdma_write_imm: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: __be32),
    >,
    pub wr_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, imm_data: __be32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_send_tso:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16)>,
    pub wr_set_ud_addr: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            ah: *mut ibv_ah,
            remote_qpn: u32,
            remote_qkey: u32,
        ),
    >,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, remote_srqn: u32)>,
    pub wr_set_inline_data:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, addr: *mut c_void, length: size_t)>,
    pub wr_set_inline_data_list: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_buf: size_t, buf_list: *const ibv_data_buf),
    >,
    pub wr_set_sge:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32)>,
    pub wr_set_sge_list:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_sge: size_t, sg_list: *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            atomic_wr: *const c_void,
        ),
    >,
}
