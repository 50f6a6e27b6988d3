//! Device and port attributes: `struct ibv_device_attr`, `struct ibv_port_attr`.

use super::*;

/// `struct ibv_device_attr` [verbs.h, man:ibv_query_device.3]: device limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (network order value).
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest registrable MR, in bytes.
    pub max_mr_size: u64,
    /// Vendor ID.
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum WRs per queue.
    pub max_qp_wr: u32,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Maximum number of CQs.
    pub max_cq: u32,
    /// Maximum CQEs per CQ.
    pub max_cqe: u32,
    /// Maximum number of MRs.
    pub max_mr: u32,
    /// Maximum number of PDs.
    pub max_pd: u32,
    /// Maximum outstanding READ/atomic per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding READ/atomic per QP as initiator.
    pub max_qp_init_rd_atom: u32,
    /// Maximum number of shared receive queues (0: no SRQ support).
    pub max_srq: u32,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: u32,
    /// Maximum SGEs per SRQ receive WR.
    pub max_srq_sge: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` [verbs.h, man:ibv_query_port.3].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// Length of the GID table.
    pub gid_tbl_len: u32,
    /// Largest message size in bytes.
    pub max_msg_sz: u32,
    /// Length of the P_Key table.
    pub pkey_tbl_len: u16,
    /// Base LID (0 on RoCE).
    pub lid: u16,
    /// `IBV_LINK_LAYER_ETHERNET` (2) for RoCE.
    pub link_layer: u8,
}

/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;

/// The default P_Key on RoCE (full membership, default partition).
pub const DEFAULT_PKEY: u16 = 0xFFFF;
