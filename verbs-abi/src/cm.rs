//! librdmacm: the structs of `/usr/include/rdma/rdma_cma.h`, with `ibv_sa_path_rec` from
//! `/usr/include/infiniband/sa.h` and `sockaddr_ib` from `/usr/include/infiniband/ib.h`
//! (rdma-core 44), x86-64 layout. See [the module above](super) for the naming rules.

// The types and fields carry the C names; a field means what the header says it means, so
// only the types carry docs.
#![allow(missing_docs)]

use libc::{
    c_char, c_int, c_ushort, c_void, size_t, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage,
    socklen_t,
};

use super::{
    __be16, __be32, __be64, ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd,
    ibv_qp, ibv_qp_type, ibv_srq, rdma_cm_event_type, rdma_port_space,
};

/// `struct ibv_sa_path_rec` (`infiniband/sa.h`): a path record (`rdma_route.path_rec`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: __be16,
    pub slid: __be16,
    pub raw_traffic: c_int,
    pub flow_label: __be32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: __be16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_addr` (`infiniband/ib.h`): a GID as `sockaddr_ib.sib_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_addr {
    pub ib_u: ib_addr_ib_u,
}

/// `struct ib_addr`'s `ib_u` union (`infiniband/ib.h`): 16 bytes in network byte order.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_addr_ib_u {
    pub uib_addr8: [u8; 16],
    pub uib_addr16: [__be16; 8],
    pub uib_addr32: [__be32; 4],
    pub uib_addr64: [__be64; 2],
}

/// `struct sockaddr_ib` (`infiniband/ib.h`): an `AF_IB` socket address.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sockaddr_ib {
    /// `AF_IB`.
    pub sib_family: c_ushort,
    pub sib_pkey: __be16,
    pub sib_flowinfo: __be32,
    pub sib_addr: ib_addr,
    pub sib_sid: __be64,
    pub sib_sid_mask: __be64,
    pub sib_scope_id: u64,
}

/// `struct rdma_ib_addr` (`rdma/rdma_cma.h`): the GIDs and P_Key of a route.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: __be16,
}

/// `struct rdma_addr` (`rdma/rdma_cma.h`): the source and destination of an `rdma_cm_id`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    /// C's first anonymous union `{ src_addr; src_sin; src_sin6; src_storage; }`.
    pub src: rdma_addr_src,
    /// C's second anonymous union `{ dst_addr; dst_sin; dst_sin6; dst_storage; }`.
    pub dst: rdma_addr_dst,
    pub addr: rdma_addr_addr,
}

/// `struct rdma_addr`'s first anonymous union (`rdma/rdma_cma.h`), the Rust field `src`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_src {
    pub src_addr: sockaddr,
    pub src_sin: sockaddr_in,
    pub src_sin6: sockaddr_in6,
    pub src_storage: sockaddr_storage,
}

/// `struct rdma_addr`'s second anonymous union (`rdma/rdma_cma.h`), the Rust field `dst`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_dst {
    pub dst_addr: sockaddr,
    pub dst_sin: sockaddr_in,
    pub dst_sin6: sockaddr_in6,
    pub dst_storage: sockaddr_storage,
}

/// `struct rdma_addr`'s `addr` union (`rdma/rdma_cma.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_addr {
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route` (`rdma/rdma_cma.h`): the addresses and paths of an `rdma_cm_id`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel` (`rdma/rdma_cma.h`): where CM events are reported.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id` (`rdma/rdma_cma.h`): a communication identifier.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: rdma_port_space,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: ibv_qp_type,
}

/// `struct rdma_conn_param` (`rdma/rdma_cma.h`): `rdma_connect`'s and `rdma_accept`'s
/// parameters, and those a connection event reports.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param` (`rdma/rdma_cma.h`): what a UD (`RDMA_PS_UDP`) event reports.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `struct rdma_cm_event` (`rdma/rdma_cma.h`): what `rdma_get_cm_event` returns.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: rdma_cm_event_type,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_cm_event`'s `param` union (`rdma/rdma_cma.h`): `conn` for connected port
/// spaces, `ud` for `RDMA_PS_UDP`/`RDMA_PS_IPOIB`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_join_mc_attr_ex` (`rdma/rdma_cma.h`): `rdma_join_multicast_ex`'s
/// attributes; `comp_mask` (`RDMA_CM_JOIN_MC_ATTR_*`) says which are set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    /// `RDMA_MC_JOIN_FLAG_*`.
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

/// `struct rdma_addrinfo` (`rdma/rdma_cma.h`): a result of `rdma_getaddrinfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addrinfo {
    /// `RAI_*`.
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: size_t,
    pub ai_route: *mut c_void,
    pub ai_connect_len: size_t,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}
