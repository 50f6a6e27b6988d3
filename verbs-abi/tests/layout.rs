//! `verbs_abi` against rdma-core's own headers: a C probe, compiled with `cc` against
//! `<infiniband/verbs.h>`, `<infiniband/sa.h>`, `<infiniband/ib.h>` and `<rdma/rdma_cma.h>`,
//! prints the size and alignment of every type, the offset and size of every field (nested
//! ones included), the size and signedness of every enum type and the value of every constant
//! of [`abi::CONSTANTS`]; the same numbers computed in Rust must be equal, one by one. Each
//! prototype of [`abi::functions`] is spelled in C from its Rust type and must be compatible
//! with the header's declaration (`__builtin_types_compatible_p`).
//!
//! The tables below are written once: `layout_checks!` turns each row into both the C
//! expression and the Rust value. Without the headers (libibverbs-dev, librdmacm-dev) the test
//! prints `SKIP` and passes, unless `RNIC_REQUIRE_RDMA_HEADERS=1` (CI) makes that a failure.

#![allow(clippy::expect_used)] // test helpers outside #[test] functions

use std::marker::PhantomData;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use verbs_abi as abi;

/// The headers the probe includes, by package: their absence means "not installed".
const HEADERS: [(&str, &str); 2] = [
    ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
    ("/usr/include/rdma/rdma_cma.h", "librdmacm-dev"),
];

/// One number both sides compute.
struct Check {
    /// What it is, for the report, e.g. `offsetof(struct ibv_wc, imm_data) [Rust ex.imm_data]`.
    what: String,
    /// The C expression the probe prints.
    c: String,
    /// The value Rust computes.
    rust: i128,
}

impl Check {
    fn new(what: String, c: String, rust: usize) -> Self {
        let rust = rust as i128;
        Check { what, c, rust }
    }
}

/// The type at the end of a field path, found without `unsafe` (reading a union field is
/// `unsafe`, assigning one is not): each [`field`](Self::field) step names one field by a
/// closure that assigns to it, and the closure's argument type is the field's type. The
/// closures are never called.
struct FieldOf<T>(PhantomData<T>);

impl<T> FieldOf<T> {
    fn new() -> Self {
        FieldOf(PhantomData)
    }

    fn field<F>(self, _assign: fn(&mut T, F)) -> FieldOf<F> {
        FieldOf(PhantomData)
    }

    fn size(self) -> usize {
        size_of::<T>()
    }

    fn c(self) -> String
    where
        T: CType,
    {
        T::c()
    }
}

/// `a.b.c` as a string.
macro_rules! path_str {
    ($first:ident $(. $rest:ident)*) => {
        concat!(stringify!($first) $(, ".", stringify!($rest))*)
    };
}

/// The C path of a row: the one after `=>` if there is one, else the Rust path.
macro_rules! c_path {
    ([$($rust:ident).+]) => {
        path_str!($($rust).+)
    };
    ([$($rust:ident).+] [$($c:ident).+]) => {
        path_str!($($c).+)
    };
}

/// Rows `struct name { field, nested.field, rust.path => c.path, … }` (or `union name {…}`)
/// → the size and alignment of `abi::name` and the offset and size of each field, each with
/// the C expression for the same number. `=> c.path` is for the fields whose Rust path differs
/// from the C one: C's anonymous unions (`ex.imm_data => imm_data`) and `r#type => type`.
macro_rules! layout_checks {
    ($(
        $kind:tt $name:ident {
            $($($rust:ident).+ $(=> $($c:ident).+)?),* $(,)?
        }
    )*) => {{
        let mut checks = Vec::new();
        $(
            let ctype = concat!(stringify!($kind), " ", stringify!($name));
            type_checks(&mut checks, ctype, size_of::<abi::$name>(), align_of::<abi::$name>());
            $(
                field_checks(
                    &mut checks,
                    ctype,
                    path_str!($($rust).+),
                    c_path!([$($rust).+] $([$($c).+])?),
                    offset_of!(abi::$name, $($rust).+),
                    FieldOf::<abi::$name>::new()$(.field(|s, v| s.$rust = v))+.size(),
                );
            )*
        )*
        checks
    }};
}

/// The enum types (`abi::name` is `enum name`): size and signedness.
macro_rules! enum_checks {
    ($($name:ident),* $(,)?) => {{
        let mut checks = Vec::new();
        $(
            let ctype = concat!("enum ", stringify!($name));
            let size = size_of::<abi::$name>();
            checks.push(Check::new(format!("sizeof({ctype})"), format!("sizeof({ctype})"), size));
            let signed = usize::from(<abi::$name>::MIN != 0);
            checks.push(Check::new(format!("{ctype} is signed"), format!("(({ctype})-1 < 0)"), signed));
        )*
        checks
    }};
}

fn type_checks(checks: &mut Vec<Check>, ctype: &str, size: usize, align: usize) {
    checks.push(Check::new(
        format!("sizeof({ctype})"),
        format!("sizeof({ctype})"),
        size,
    ));
    checks.push(Check::new(
        format!("alignof({ctype})"),
        format!("_Alignof({ctype})"),
        align,
    ));
}

fn field_checks(
    checks: &mut Vec<Check>,
    ctype: &str,
    rust_path: &str,
    c_path: &str,
    offset: usize,
    size: usize,
) {
    let rust_name = if rust_path == c_path {
        String::new()
    } else {
        format!(" [Rust {rust_path}]")
    };
    let offset_c = format!("offsetof({ctype}, {c_path})");
    checks.push(Check::new(
        format!("{offset_c}{rust_name}"),
        offset_c,
        offset,
    ));
    let size_c = format!("sizeof((({ctype} *)0)->{c_path})");
    checks.push(Check::new(
        format!("sizeof({ctype}.{c_path}){rust_name}"),
        size_c,
        size,
    ));
}

/// Every libibverbs type of `abi::verbs`, every field.
fn verbs_checks() -> Vec<Check> {
    layout_checks! {
        union ibv_gid { raw, global, global.subnet_prefix, global.interface_id }
        struct _ibv_device_ops { _dummy1, _dummy2 }
        struct ibv_device {
            _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
        }
        struct ibv_context_ops {
            _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
            _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
            _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
            _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
            _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
            _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
            _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
        }
        struct ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        struct ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
        }
        struct ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
            qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
            init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
            port_cap_flags2,
        }
        struct ibv_async_event {
            element, element.cq, element.qp, element.srq, element.wq, element.port_num,
            event_type,
        }
        struct ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len,
            ex.imm_data => imm_data, ex.invalidated_rkey => invalidated_rkey,
            qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits,
        }
        struct ibv_pd { context, handle }
        struct ibv_td { context }
        struct ibv_xrcd { context }
        struct ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        struct ibv_mw { context, pd, rkey, handle, r#type => type }
        struct ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        struct ibv_mw_bind { wr_id, send_flags, bind_info }
        struct ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        struct ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
        struct ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        struct ibv_ah { context, pd, handle }
        struct ibv_comp_channel { context, fd, refcnt }
        struct ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed,
        }
        struct ibv_srq_attr { max_wr, max_sge, srq_limit }
        struct ibv_srq_init_attr { srq_context, attr }
        struct ibv_tm_cap { max_num_tags, max_ops }
        struct ibv_srq_init_attr_ex {
            srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap,
        }
        struct ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
        struct ibv_wq {
            context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond,
            events_completed, comp_mask,
        }
        struct ibv_rwq_ind_table { context, ind_tbl_handle, ind_tbl_num, comp_mask }
        struct ibv_qp_cap {
            max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
        }
        struct ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        struct ibv_rx_hash_conf {
            rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask,
        }
        struct ibv_qp_init_attr_ex {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
            create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
        }
        struct ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
            en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
            port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
        }
        struct ibv_qp {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
            mutex, cond, events_completed,
        }
        struct ibv_sge { addr, length, lkey }
        struct ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags,
            ex.imm_data => imm_data, ex.invalidate_rkey => invalidate_rkey,
            wr, wr.rdma, wr.rdma.remote_addr, wr.rdma.rkey,
            wr.atomic, wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap,
            wr.atomic.rkey,
            wr.ud, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
            qp_type, qp_type.xrc, qp_type.xrc.remote_srqn,
            bind_tso.bind_mw => bind_mw, bind_tso.bind_mw.mw => bind_mw.mw,
            bind_tso.bind_mw.rkey => bind_mw.rkey, bind_tso.bind_mw.bind_info => bind_mw.bind_info,
            bind_tso.tso => tso, bind_tso.tso.hdr => tso.hdr, bind_tso.tso.hdr_sz => tso.hdr_sz,
            bind_tso.tso.mss => tso.mss,
        }
        struct ibv_recv_wr { wr_id, next, sg_list, num_sge }
    }
}

/// Every type of `abi::verbs_ex`, every field; `verbs_device`, `verbs_device_ops` and
/// `list_node` against [`DRIVER_H`], the others against `verbs.h`.
fn verbs_ex_checks() -> Vec<Check> {
    let mut checks = layout_checks! {
        struct list_node { next, prev }
        struct verbs_device_ops {
            name, match_min_abi_version, match_max_abi_version, match_table, static_providers,
            match_device, alloc_context, import_context, alloc_device, uninit_device,
        }
        struct verbs_device { device, ops, refcount, entry, sysfs, core_support }
        struct verbs_context {
            query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
            create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
            modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
            modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
            post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
            create_wq, query_rt_values, create_cq_ex, r#priv => priv, query_device_ex,
            ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp,
            create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3,
            sz, context,
        }
        struct ibv_query_device_ex_input { comp_mask }
        struct ibv_odp_caps {
            general_caps, per_transport_caps, per_transport_caps.rc_odp_caps,
            per_transport_caps.uc_odp_caps, per_transport_caps.ud_odp_caps,
        }
        struct ibv_tso_caps { max_tso, supported_qpts }
        struct ibv_rss_caps {
            supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
            rx_hash_fields_mask, rx_hash_function,
        }
        struct ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
        struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
        struct ibv_cq_moderation_caps { max_cq_count, max_cq_period }
        struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap }
        struct ibv_device_attr_ex {
            orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
            device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
            raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
            phys_port_cnt_ex,
        }
        struct ibv_cq_init_attr_ex {
            cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
        }
        struct ibv_poll_cq_attr { comp_mask }
        struct ibv_wc_tm_info { tag, r#priv => priv }
        struct ibv_cq_ex {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
            read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num,
            read_src_qp, read_wc_flags, read_slid, read_sl, read_dlid_path_bits,
            read_completion_ts, read_cvlan, read_flow_tag, read_tm_info,
            read_completion_wallclock_ns,
        }
        struct ibv_data_buf { addr, length }
        struct ibv_qp_ex {
            qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
            wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
            wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
            wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
            wr_complete, wr_abort, wr_atomic_write,
        }
    };
    checks.push(Check::new(
        "__VERBS_ABI_IS_EXTENDED".into(),
        format!(
            "(uintptr_t)__VERBS_ABI_IS_EXTENDED == (uintptr_t){}ULL",
            abi::__VERBS_ABI_IS_EXTENDED
        ),
        1,
    ));
    checks
}

/// libibverbs's `driver.h` (rdma-core 44, `libibverbs/driver.h` and ccan's `list.h`), which no
/// package installs: the definitions `abi::verbs_ex` transcribes, compiled into the probe.
const DRIVER_H: &str = "\
struct verbs_match_ent;
struct verbs_sysfs_dev;
struct verbs_context;
struct list_node { struct list_node *next, *prev; };
struct verbs_device_ops {
\tconst char *name;
\tuint32_t match_min_abi_version;
\tuint32_t match_max_abi_version;
\tconst struct verbs_match_ent *match_table;
\tconst struct verbs_device_ops **static_providers;
\tbool (*match_device)(struct verbs_sysfs_dev *sysfs_dev);
\tstruct verbs_context *(*alloc_context)(struct ibv_device *device, int cmd_fd, void *private_data);
\tstruct verbs_context *(*import_context)(struct ibv_device *device, int cmd_fd);
\tstruct verbs_device *(*alloc_device)(struct verbs_sysfs_dev *sysfs_dev);
\tvoid (*uninit_device)(struct verbs_device *device);
};
struct verbs_device {
\tstruct ibv_device device;
\tconst struct verbs_device_ops *ops;
\tatomic_int refcount;
\tstruct list_node entry;
\tstruct verbs_sysfs_dev *sysfs;
\tuint64_t core_support;
};
";

/// The slots of the extended structs that librnic fills, each against the C member's type
/// (`__builtin_types_compatible_p`): a parameter of another type would corrupt every call.
macro_rules! slot_checks {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {{
        let mut checks = Vec::new();
        $($(
            let c_type = FieldOf::<abi::$ty>::new().field(|s, v| s.$field = v).c();
            checks.push(Check::new(
                format!("type of {}.{}: {c_type}", stringify!($ty), stringify!($field)),
                format!(
                    "__builtin_types_compatible_p(__typeof__(((struct {} *)0)->{}), {c_type})",
                    stringify!($ty),
                    stringify!($field)
                ),
                1,
            ));
        )*)*
        checks
    }};
}

fn slot_type_checks() -> Vec<Check> {
    slot_checks! {
        verbs_context { query_port, create_cq_ex, query_device_ex, create_qp_ex }
        ibv_cq_ex {
            start_poll, next_poll, end_poll, read_opcode, read_vendor_err, read_byte_len,
            read_imm_data, read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl,
            read_dlid_path_bits,
        }
        ibv_qp_ex {
            wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_rdma_read, wr_rdma_write,
            wr_rdma_write_imm, wr_send, wr_send_imm, wr_set_ud_addr, wr_set_inline_data,
            wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete,
            wr_abort,
        }
    }
}

/// Every librdmacm (and `sa.h`, `ib.h`) type of `abi::cm`, every field.
fn cm_checks() -> Vec<Check> {
    layout_checks! {
        struct ibv_sa_path_rec {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class,
            reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate,
            packet_life_time_selector, packet_life_time, preference,
        }
        struct ib_addr {
            ib_u, ib_u.uib_addr8, ib_u.uib_addr16, ib_u.uib_addr32, ib_u.uib_addr64,
        }
        struct sockaddr_ib {
            sib_family, sib_pkey, sib_flowinfo, sib_addr, sib_sid, sib_sid_mask, sib_scope_id,
        }
        struct rdma_ib_addr { sgid, dgid, pkey }
        struct rdma_addr {
            src.src_addr => src_addr, src.src_sin => src_sin, src.src_sin6 => src_sin6,
            src.src_storage => src_storage,
            dst.dst_addr => dst_addr, dst.dst_sin => dst_sin, dst.dst_sin6 => dst_sin6,
            dst.dst_storage => dst_storage,
            addr, addr.ibaddr,
        }
        struct rdma_route { addr, path_rec, num_paths }
        struct rdma_event_channel { fd }
        struct rdma_cm_id {
            verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
            recv_cq_channel, recv_cq, srq, pd, qp_type,
        }
        struct rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth, flow_control,
            retry_count, rnr_retry_count, srq, qp_num,
        }
        struct rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
        struct rdma_cm_event { id, listen_id, event, status, param, param.conn, param.ud }
        struct rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr }
        struct rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
            ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route,
            ai_connect_len, ai_connect, ai_next,
        }
    }
}

/// Every enum type of `abi::consts`.
fn enum_type_checks() -> Vec<Check> {
    enum_checks! {
        ibv_node_type, ibv_transport_type, ibv_atomic_cap, ibv_mtu, ibv_port_state,
        ibv_event_type, ibv_wc_status, ibv_wc_opcode, ibv_mw_type, ibv_wq_type, ibv_wq_state,
        ibv_srq_type, ibv_qp_type, ibv_qp_state, ibv_mig_state, ibv_wr_opcode, rdma_cm_event_type,
        rdma_port_space,
    }
}

/// Every constant of `abi::CONSTANTS`, by its C name.
fn constant_checks() -> Vec<Check> {
    abi::CONSTANTS
        .iter()
        .map(|&(name, value)| Check {
            what: name.to_owned(),
            c: name.to_owned(),
            rust: value,
        })
        .collect()
}

/// The C spelling of a Rust type of the ABI, for the prototype checks: `c_int` is `int`, a
/// struct is `struct name`, `*mut T` is `T *`, a function pointer `R (*)(A, B)`.
trait CType {
    fn c() -> String;
}

macro_rules! c_types {
    ($($rust:ty => $c:literal),* $(,)?) => {
        $(impl CType for $rust {
            fn c() -> String {
                $c.to_owned()
            }
        })*
    };
}

c_types! {
    () => "void",
    libc::c_void => "void",
    libc::c_char => "char",
    libc::c_int => "int",
    libc::c_uint => "unsigned int",
    u8 => "uint8_t",
    u16 => "uint16_t",
    u64 => "uint64_t",
    usize => "size_t",
    abi::ibv_device => "struct ibv_device",
    abi::ibv_context => "struct ibv_context",
    abi::ibv_device_attr => "struct ibv_device_attr",
    abi::_compat_ibv_port_attr => "struct _compat_ibv_port_attr",
    abi::ibv_gid => "union ibv_gid",
    abi::ibv_comp_channel => "struct ibv_comp_channel",
    abi::ibv_pd => "struct ibv_pd",
    abi::ibv_mr => "struct ibv_mr",
    abi::ibv_cq => "struct ibv_cq",
    abi::ibv_qp => "struct ibv_qp",
    abi::ibv_qp_attr => "struct ibv_qp_attr",
    abi::ibv_qp_init_attr => "struct ibv_qp_init_attr",
    abi::ibv_srq => "struct ibv_srq",
    abi::ibv_srq_attr => "struct ibv_srq_attr",
    abi::ibv_srq_init_attr => "struct ibv_srq_init_attr",
    abi::ibv_async_event => "struct ibv_async_event",
    abi::ibv_port_attr => "struct ibv_port_attr",
    abi::ibv_cq_ex => "struct ibv_cq_ex",
    abi::ibv_cq_init_attr_ex => "struct ibv_cq_init_attr_ex",
    abi::ibv_poll_cq_attr => "struct ibv_poll_cq_attr",
    abi::ibv_query_device_ex_input => "struct ibv_query_device_ex_input",
    abi::ibv_device_attr_ex => "struct ibv_device_attr_ex",
    abi::ibv_qp_ex => "struct ibv_qp_ex",
    abi::ibv_qp_init_attr_ex => "struct ibv_qp_init_attr_ex",
    abi::ibv_ah => "struct ibv_ah",
    abi::ibv_sge => "struct ibv_sge",
    abi::ibv_data_buf => "struct ibv_data_buf",
}

impl<F: CType> CType for Option<F> {
    fn c() -> String {
        F::c()
    }
}

impl<T: CType> CType for *mut T {
    fn c() -> String {
        format!("{} *", T::c())
    }
}

impl<T: CType> CType for *const T {
    fn c() -> String {
        format!("const {} *", T::c())
    }
}

macro_rules! c_fn_types {
    ($(($($arg:ident),+)),* $(,)?) => {
        $(impl<R: CType, $($arg: CType),+> CType for unsafe extern "C" fn($($arg),+) -> R {
            fn c() -> String {
                let args: Vec<String> = vec![$($arg::c()),+];
                format!("{} (*)({})", R::c(), args.join(", "))
            }
        })*
    };
}

c_fn_types!((A), (A, B), (A, B, C), (A, B, C, D), (A, B, C, D, E));

/// Each prototype of `abi::functions` against the header's declaration of the function.
macro_rules! prototype_checks {
    ($($name:ident),* $(,)?) => {
        vec![$({
            let c_type = <abi::functions::$name as CType>::c();
            Check::new(
                format!("prototype of {}: {c_type}", stringify!($name)),
                format!(
                    "__builtin_types_compatible_p(__typeof__(&{}), {c_type})",
                    stringify!($name)
                ),
                1,
            )
        }),*]
    };
}

/// Every prototype of `abi::functions` declared in the installed headers (`ibv_query_gid_type`
/// is in rdma-core's private `driver.h`, which no package installs: not checked).
fn function_checks() -> Vec<Check> {
    prototype_checks! {
        ibv_get_device_list, ibv_free_device_list, ibv_get_device_name, ibv_open_device,
        ibv_close_device, ibv_query_device, ibv_query_port, ibv_query_gid,
        ibv_create_comp_channel, ibv_destroy_comp_channel, ibv_alloc_pd, ibv_dealloc_pd,
        ibv_reg_mr, ibv_dereg_mr, ibv_create_cq, ibv_destroy_cq, ibv_get_cq_event,
        ibv_ack_cq_events, ibv_create_qp, ibv_modify_qp, ibv_query_qp, ibv_destroy_qp,
        ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_destroy_srq, ibv_get_async_event,
        ibv_ack_async_event,
    }
}

/// The C probe: prints each check's expression, one decimal per line, in order.
fn probe_source(checks: &[Check]) -> String {
    let mut src = String::from(
        "#include <stdatomic.h>\n\
         #include <stdbool.h>\n\
         #include <stddef.h>\n\
         #include <stdint.h>\n\
         #include <stdio.h>\n\
         #include <infiniband/verbs.h>\n\
         #include <infiniband/sa.h>\n\
         #include <infiniband/ib.h>\n\
         #include <rdma/rdma_cma.h>\n",
    );
    src.push_str(DRIVER_H);
    src.push_str("\nint main(void)\n{\n");
    for check in checks {
        src.push_str(&format!(
            "\tprintf(\"%lld\\n\", (long long)({}));\n",
            check.c
        ));
    }
    src.push_str("\treturn 0;\n}\n");
    src
}

/// Writes the probe into `dir`, compiles it with `cc`, runs it and returns its numbers.
fn run_probe(dir: &Path, checks: &[Check]) -> Vec<i128> {
    std::fs::create_dir_all(dir).expect("create the probe directory");
    let source = dir.join("probe.c");
    let binary = dir.join("probe");
    std::fs::write(&source, probe_source(checks)).expect("write probe.c");

    let cc = Command::new("cc")
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("run cc (gcc is needed to check the ABI layout)");
    assert!(
        cc.status.success(),
        "cc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&cc.stderr)
    );

    let run = Command::new(&binary).output().expect("run the probe");
    assert!(run.status.success(), "the probe failed: {:?}", run.status);
    String::from_utf8(run.stdout)
        .expect("the probe prints ASCII")
        .lines()
        .map(|line| line.parse().expect("the probe prints one integer a line"))
        .collect()
}

fn headers_missing() -> Option<String> {
    let missing: Vec<String> = HEADERS
        .iter()
        .filter(|(header, _)| !Path::new(header).exists())
        .map(|(header, package)| format!("{header} ({package})"))
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}

#[test]
fn abi_matches_rdma_core_headers() {
    if let Some(missing) = headers_missing() {
        assert!(
            std::env::var("RNIC_REQUIRE_RDMA_HEADERS").as_deref() != Ok("1"),
            "RNIC_REQUIRE_RDMA_HEADERS=1 but the rdma-core headers are missing: {missing}"
        );
        println!("SKIP layout: libibverbs-dev/librdmacm-dev not installed (missing {missing})");
        return;
    }

    let checks: Vec<Check> = [
        verbs_checks(),
        verbs_ex_checks(),
        slot_type_checks(),
        cm_checks(),
        enum_type_checks(),
        constant_checks(),
        function_checks(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("layout-probe-{}", std::process::id()));
    let c_values = run_probe(&dir, &checks);
    assert_eq!(
        c_values.len(),
        checks.len(),
        "the probe printed a number per check"
    );

    let mismatches: Vec<String> = checks
        .iter()
        .zip(&c_values)
        .filter(|(check, &c)| check.rust != c)
        .map(|(check, c)| format!("{}: C {c}, Rust {}", check.what, check.rust))
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} layout checks differ from rdma-core's headers (probe kept in {}):\n  {}",
        mismatches.len(),
        checks.len(),
        dir.display(),
        mismatches.join("\n  ")
    );
    std::fs::remove_dir_all(&dir).expect("remove the probe directory");
    println!(
        "layout: {} checks, all equal to rdma-core's headers",
        checks.len()
    );
}
