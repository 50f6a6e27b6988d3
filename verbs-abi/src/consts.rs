//! The constants of `/usr/include/infiniband/verbs.h` and `/usr/include/rdma/rdma_cma.h`
//! (rdma-core 44), with rdma-core's values, and the integer types of the C enums they belong to.
//! [`CONSTANTS`] lists them all by C name; the layout test checks each against the header.

use libc::{c_int, c_uint};

// ---------------------------------------------------------------------------------------------
// The C `enum` types: each the integer type gcc gives it on x86-64 (`unsigned int`, or `int`
// when it has a negative value).

/// `enum ibv_node_type` (`infiniband/verbs.h`): `ibv_device.node_type`; has `-1`, so `int`.
pub type ibv_node_type = c_int;
/// `enum ibv_transport_type` (`infiniband/verbs.h`): `ibv_device.transport_type`; `int`.
pub type ibv_transport_type = c_int;
/// `enum ibv_atomic_cap` (`infiniband/verbs.h`): `ibv_device_attr.atomic_cap`.
pub type ibv_atomic_cap = c_uint;
/// `enum ibv_mtu` (`infiniband/verbs.h`): port and path MTU.
pub type ibv_mtu = c_uint;
/// `enum ibv_port_state` (`infiniband/verbs.h`): `ibv_port_attr.state`.
pub type ibv_port_state = c_uint;
/// `enum ibv_event_type` (`infiniband/verbs.h`): `ibv_async_event.event_type`.
pub type ibv_event_type = c_uint;
/// `enum ibv_wc_status` (`infiniband/verbs.h`): `ibv_wc.status`.
pub type ibv_wc_status = c_uint;
/// `enum ibv_wc_opcode` (`infiniband/verbs.h`): `ibv_wc.opcode`.
pub type ibv_wc_opcode = c_uint;
/// `enum ibv_mw_type` (`infiniband/verbs.h`): `ibv_mw.type`, `ibv_alloc_mw`'s `type`.
pub type ibv_mw_type = c_uint;
/// `enum ibv_srq_type` (`infiniband/verbs.h`): `ibv_srq_init_attr_ex.srq_type`.
pub type ibv_srq_type = c_uint;
/// `enum ibv_wq_type` (`infiniband/verbs.h`): `ibv_wq.wq_type`.
pub type ibv_wq_type = c_uint;
/// `enum ibv_wq_state` (`infiniband/verbs.h`): `ibv_wq.state`.
pub type ibv_wq_state = c_uint;
/// `enum ibv_qp_type` (`infiniband/verbs.h`): `ibv_qp.qp_type`, `ibv_qp_init_attr.qp_type`.
pub type ibv_qp_type = c_uint;
/// `enum ibv_qp_state` (`infiniband/verbs.h`): `ibv_qp.state`, `ibv_qp_attr.qp_state`.
pub type ibv_qp_state = c_uint;
/// `enum ibv_mig_state` (`infiniband/verbs.h`): `ibv_qp_attr.path_mig_state`.
pub type ibv_mig_state = c_uint;
/// `enum ibv_wr_opcode` (`infiniband/verbs.h`): `ibv_send_wr.opcode`.
pub type ibv_wr_opcode = c_uint;
/// `enum rdma_cm_event_type` (`rdma/rdma_cma.h`): `rdma_cm_event.event`.
pub type rdma_cm_event_type = c_uint;
/// `enum rdma_port_space` (`rdma/rdma_cma.h`): `rdma_cm_id.ps`, `rdma_create_id`'s `ps`.
pub type rdma_port_space = c_uint;

// ---------------------------------------------------------------------------------------------
// The values.

c_constants! {
    /// Every constant of this module, `(C name, value)`: the layout test compares each with
    /// the header's.
    CONSTANTS;

    /// `enum { IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX }`, the lengths of `ibv_device`'s names.
    usize {
        IBV_SYSFS_NAME_MAX = 64,
        IBV_SYSFS_PATH_MAX = 256,
    }
    /// `enum ibv_node_type`.
    ibv_node_type {
        IBV_NODE_UNKNOWN = -1,
        IBV_NODE_CA = 1,
        IBV_NODE_SWITCH = 2,
        IBV_NODE_ROUTER = 3,
        IBV_NODE_RNIC = 4,
        IBV_NODE_USNIC = 5,
        IBV_NODE_USNIC_UDP = 6,
        IBV_NODE_UNSPECIFIED = 7,
    }
    /// `enum ibv_transport_type`.
    ibv_transport_type {
        IBV_TRANSPORT_UNKNOWN = -1,
        IBV_TRANSPORT_IB = 0,
        IBV_TRANSPORT_IWARP = 1,
        IBV_TRANSPORT_USNIC = 2,
        IBV_TRANSPORT_USNIC_UDP = 3,
        IBV_TRANSPORT_UNSPECIFIED = 4,
    }
    /// `enum ibv_atomic_cap`.
    ibv_atomic_cap {
        IBV_ATOMIC_NONE = 0,
        IBV_ATOMIC_HCA = 1,
        IBV_ATOMIC_GLOB = 2,
    }
    /// `enum ibv_mtu`.
    ibv_mtu {
        IBV_MTU_256 = 1,
        IBV_MTU_512 = 2,
        IBV_MTU_1024 = 3,
        IBV_MTU_2048 = 4,
        IBV_MTU_4096 = 5,
    }
    /// `enum ibv_port_state`.
    ibv_port_state {
        IBV_PORT_NOP = 0,
        IBV_PORT_DOWN = 1,
        IBV_PORT_INIT = 2,
        IBV_PORT_ARMED = 3,
        IBV_PORT_ACTIVE = 4,
        IBV_PORT_ACTIVE_DEFER = 5,
    }
    /// `enum { IBV_LINK_LAYER_* }`, for `ibv_port_attr.link_layer` (`uint8_t`).
    u8 {
        IBV_LINK_LAYER_UNSPECIFIED = 0,
        IBV_LINK_LAYER_INFINIBAND = 1,
        IBV_LINK_LAYER_ETHERNET = 2,
    }
    /// `enum ibv_event_type`.
    ibv_event_type {
        IBV_EVENT_CQ_ERR = 0,
        IBV_EVENT_QP_FATAL = 1,
        IBV_EVENT_QP_REQ_ERR = 2,
        IBV_EVENT_QP_ACCESS_ERR = 3,
        IBV_EVENT_COMM_EST = 4,
        IBV_EVENT_SQ_DRAINED = 5,
        IBV_EVENT_PATH_MIG = 6,
        IBV_EVENT_PATH_MIG_ERR = 7,
        IBV_EVENT_DEVICE_FATAL = 8,
        IBV_EVENT_PORT_ACTIVE = 9,
        IBV_EVENT_PORT_ERR = 10,
        IBV_EVENT_LID_CHANGE = 11,
        IBV_EVENT_PKEY_CHANGE = 12,
        IBV_EVENT_SM_CHANGE = 13,
        IBV_EVENT_SRQ_ERR = 14,
        IBV_EVENT_SRQ_LIMIT_REACHED = 15,
        IBV_EVENT_QP_LAST_WQE_REACHED = 16,
        IBV_EVENT_CLIENT_REREGISTER = 17,
        IBV_EVENT_GID_CHANGE = 18,
        IBV_EVENT_WQ_FATAL = 19,
    }
    /// `enum ibv_wc_status`.
    ibv_wc_status {
        IBV_WC_SUCCESS = 0,
        IBV_WC_LOC_LEN_ERR = 1,
        IBV_WC_LOC_QP_OP_ERR = 2,
        IBV_WC_LOC_EEC_OP_ERR = 3,
        IBV_WC_LOC_PROT_ERR = 4,
        IBV_WC_WR_FLUSH_ERR = 5,
        IBV_WC_MW_BIND_ERR = 6,
        IBV_WC_BAD_RESP_ERR = 7,
        IBV_WC_LOC_ACCESS_ERR = 8,
        IBV_WC_REM_INV_REQ_ERR = 9,
        IBV_WC_REM_ACCESS_ERR = 10,
        IBV_WC_REM_OP_ERR = 11,
        IBV_WC_RETRY_EXC_ERR = 12,
        IBV_WC_RNR_RETRY_EXC_ERR = 13,
        IBV_WC_LOC_RDD_VIOL_ERR = 14,
        IBV_WC_REM_INV_RD_REQ_ERR = 15,
        IBV_WC_REM_ABORT_ERR = 16,
        IBV_WC_INV_EECN_ERR = 17,
        IBV_WC_INV_EEC_STATE_ERR = 18,
        IBV_WC_FATAL_ERR = 19,
        IBV_WC_RESP_TIMEOUT_ERR = 20,
        IBV_WC_GENERAL_ERR = 21,
        IBV_WC_TM_ERR = 22,
        IBV_WC_TM_RNDV_INCOMPLETE = 23,
    }
    /// `enum ibv_wc_opcode` (a receive has `opcode & IBV_WC_RECV`).
    ibv_wc_opcode {
        IBV_WC_SEND = 0,
        IBV_WC_RDMA_WRITE = 1,
        IBV_WC_RDMA_READ = 2,
        IBV_WC_COMP_SWAP = 3,
        IBV_WC_FETCH_ADD = 4,
        IBV_WC_BIND_MW = 5,
        IBV_WC_LOCAL_INV = 6,
        IBV_WC_TSO = 7,
        IBV_WC_ATOMIC_WRITE = 9,
        IBV_WC_RECV = 1 << 7,
        IBV_WC_RECV_RDMA_WITH_IMM = 129,
        IBV_WC_TM_ADD = 130,
        IBV_WC_TM_DEL = 131,
        IBV_WC_TM_SYNC = 132,
        IBV_WC_TM_RECV = 133,
        IBV_WC_TM_NO_TAG = 134,
        IBV_WC_DRIVER1 = 135,
        IBV_WC_DRIVER2 = 136,
        IBV_WC_DRIVER3 = 137,
    }
    /// `enum ibv_wc_flags`, bits of `ibv_wc.wc_flags` (`unsigned int`).
    c_uint {
        IBV_WC_GRH = 1 << 0,
        IBV_WC_WITH_IMM = 1 << 1,
        IBV_WC_IP_CSUM_OK = 1 << 2,
        IBV_WC_WITH_INV = 1 << 3,
        IBV_WC_TM_SYNC_REQ = 1 << 4,
        IBV_WC_TM_MATCH = 1 << 5,
        IBV_WC_TM_DATA_VALID = 1 << 6,
    }
    /// `enum ibv_create_cq_wc_flags`, bits of `ibv_cq_init_attr_ex.wc_flags` (`uint64_t`): the fields an extended CQ lets the application read.
    u64 {
        IBV_WC_EX_WITH_BYTE_LEN = 1 << 0,
        IBV_WC_EX_WITH_IMM = 1 << 1,
        IBV_WC_EX_WITH_QP_NUM = 1 << 2,
        IBV_WC_EX_WITH_SRC_QP = 1 << 3,
        IBV_WC_EX_WITH_SLID = 1 << 4,
        IBV_WC_EX_WITH_SL = 1 << 5,
        IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7,
        IBV_WC_EX_WITH_CVLAN = 1 << 8,
        IBV_WC_EX_WITH_FLOW_TAG = 1 << 9,
        IBV_WC_EX_WITH_TM_INFO = 1 << 10,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11,
        IBV_WC_STANDARD_FLAGS = 0x7f,
        IBV_CREATE_CQ_SUP_WC_FLAGS = 0xfff,
    }
    /// `enum ibv_cq_init_attr_mask`, bits of `ibv_cq_init_attr_ex.comp_mask` (`uint32_t`).
    u32 {
        IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0,
        IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1,
    }
    /// `enum ibv_create_cq_attr_flags`, bits of `ibv_cq_init_attr_ex.flags` (`uint32_t`).
    u32 {
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0,
        IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1,
    }
    /// `enum ibv_access_flags`, bits of `ibv_qp_attr.qp_access_flags` (`unsigned int`; `ibv_reg_mr` takes them as `int`).
    c_uint {
        IBV_ACCESS_LOCAL_WRITE = 1,
        IBV_ACCESS_REMOTE_WRITE = 1 << 1,
        IBV_ACCESS_REMOTE_READ = 1 << 2,
        IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
        IBV_ACCESS_MW_BIND = 1 << 4,
        IBV_ACCESS_ZERO_BASED = 1 << 5,
        IBV_ACCESS_ON_DEMAND = 1 << 6,
        IBV_ACCESS_HUGETLB = 1 << 7,
        IBV_ACCESS_RELAXED_ORDERING = 1 << 20,
    }
    /// `enum ibv_mw_type`.
    ibv_mw_type {
        IBV_MW_TYPE_1 = 1,
        IBV_MW_TYPE_2 = 2,
    }
    /// `enum ibv_srq_attr_mask`, `ibv_modify_srq`'s `srq_attr_mask` (`int`).
    c_int {
        IBV_SRQ_MAX_WR = 1 << 0,
        IBV_SRQ_LIMIT = 1 << 1,
    }
    /// `enum ibv_srq_type`.
    ibv_srq_type {
        IBV_SRQT_BASIC = 0,
        IBV_SRQT_XRC = 1,
        IBV_SRQT_TM = 2,
    }
    /// `enum ibv_srq_init_attr_mask`, bits of `ibv_srq_init_attr_ex.comp_mask` (`uint32_t`).
    u32 {
        IBV_SRQ_INIT_ATTR_TYPE = 1 << 0,
        IBV_SRQ_INIT_ATTR_PD = 1 << 1,
        IBV_SRQ_INIT_ATTR_XRCD = 1 << 2,
        IBV_SRQ_INIT_ATTR_CQ = 1 << 3,
        IBV_SRQ_INIT_ATTR_TM = 1 << 4,
    }
    /// `enum ibv_wq_type`.
    ibv_wq_type {
        IBV_WQT_RQ = 0,
    }
    /// `enum ibv_wq_state`.
    ibv_wq_state {
        IBV_WQS_RESET = 0,
        IBV_WQS_RDY = 1,
        IBV_WQS_ERR = 2,
        IBV_WQS_UNKNOWN = 3,
    }
    /// `enum ibv_qp_type`.
    ibv_qp_type {
        IBV_QPT_RC = 2,
        IBV_QPT_UC = 3,
        IBV_QPT_UD = 4,
        IBV_QPT_RAW_PACKET = 8,
        IBV_QPT_XRC_SEND = 9,
        IBV_QPT_XRC_RECV = 10,
        IBV_QPT_DRIVER = 0xff,
    }
    /// `enum ibv_qp_init_attr_mask`, bits of `ibv_qp_init_attr_ex.comp_mask` (`uint32_t`).
    u32 {
        IBV_QP_INIT_ATTR_PD = 1 << 0,
        IBV_QP_INIT_ATTR_XRCD = 1 << 1,
        IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3,
        IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4,
        IBV_QP_INIT_ATTR_RX_HASH = 1 << 5,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6,
    }
    /// `enum ibv_qp_create_flags`, bits of `ibv_qp_init_attr_ex.create_flags` (`uint32_t`).
    u32 {
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB = 1 << 1,
        IBV_QP_CREATE_SCATTER_FCS = 1 << 8,
        IBV_QP_CREATE_CVLAN_STRIPPING = 1 << 9,
        IBV_QP_CREATE_SOURCE_QPN = 1 << 10,
        IBV_QP_CREATE_PCI_WRITE_END_PADDING = 1 << 11,
    }
    /// `enum ibv_qp_create_send_ops_flags`, bits of `ibv_qp_init_attr_ex.send_ops_flags` (`uint64_t`): the `ibv_wr_*` builders of an extended QP.
    u64 {
        IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0,
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1,
        IBV_QP_EX_WITH_SEND = 1 << 2,
        IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3,
        IBV_QP_EX_WITH_RDMA_READ = 1 << 4,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6,
        IBV_QP_EX_WITH_LOCAL_INV = 1 << 7,
        IBV_QP_EX_WITH_BIND_MW = 1 << 8,
        IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9,
        IBV_QP_EX_WITH_TSO = 1 << 10,
        IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12,
    }
    /// `enum ibv_qp_attr_mask`, `ibv_modify_qp`'s and `ibv_query_qp`'s `attr_mask` (`int`).
    c_int {
        IBV_QP_STATE = 1 << 0,
        IBV_QP_CUR_STATE = 1 << 1,
        IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
        IBV_QP_ACCESS_FLAGS = 1 << 3,
        IBV_QP_PKEY_INDEX = 1 << 4,
        IBV_QP_PORT = 1 << 5,
        IBV_QP_QKEY = 1 << 6,
        IBV_QP_AV = 1 << 7,
        IBV_QP_PATH_MTU = 1 << 8,
        IBV_QP_TIMEOUT = 1 << 9,
        IBV_QP_RETRY_CNT = 1 << 10,
        IBV_QP_RNR_RETRY = 1 << 11,
        IBV_QP_RQ_PSN = 1 << 12,
        IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
        IBV_QP_ALT_PATH = 1 << 14,
        IBV_QP_MIN_RNR_TIMER = 1 << 15,
        IBV_QP_SQ_PSN = 1 << 16,
        IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
        IBV_QP_PATH_MIG_STATE = 1 << 18,
        IBV_QP_CAP = 1 << 19,
        IBV_QP_DEST_QPN = 1 << 20,
        IBV_QP_RATE_LIMIT = 1 << 25,
    }
    /// `enum ibv_qp_state`.
    ibv_qp_state {
        IBV_QPS_RESET = 0,
        IBV_QPS_INIT = 1,
        IBV_QPS_RTR = 2,
        IBV_QPS_RTS = 3,
        IBV_QPS_SQD = 4,
        IBV_QPS_SQE = 5,
        IBV_QPS_ERR = 6,
        IBV_QPS_UNKNOWN = 7,
    }
    /// `enum ibv_mig_state`.
    ibv_mig_state {
        IBV_MIG_MIGRATED = 0,
        IBV_MIG_REARM = 1,
        IBV_MIG_ARMED = 2,
    }
    /// `enum ibv_wr_opcode`.
    ibv_wr_opcode {
        IBV_WR_RDMA_WRITE = 0,
        IBV_WR_RDMA_WRITE_WITH_IMM = 1,
        IBV_WR_SEND = 2,
        IBV_WR_SEND_WITH_IMM = 3,
        IBV_WR_RDMA_READ = 4,
        IBV_WR_ATOMIC_CMP_AND_SWP = 5,
        IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
        IBV_WR_LOCAL_INV = 7,
        IBV_WR_BIND_MW = 8,
        IBV_WR_SEND_WITH_INV = 9,
        IBV_WR_TSO = 10,
        IBV_WR_DRIVER1 = 11,
        IBV_WR_ATOMIC_WRITE = 15,
    }
    /// `enum ibv_send_flags`, bits of `ibv_send_wr.send_flags` (`unsigned int`).
    c_uint {
        IBV_SEND_FENCE = 1 << 0,
        IBV_SEND_SIGNALED = 1 << 1,
        IBV_SEND_SOLICITED = 1 << 2,
        IBV_SEND_INLINE = 1 << 3,
        IBV_SEND_IP_CSUM = 1 << 4,
    }

    /// `enum rdma_cm_event_type`.
    rdma_cm_event_type {
        RDMA_CM_EVENT_ADDR_RESOLVED = 0,
        RDMA_CM_EVENT_ADDR_ERROR = 1,
        RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
        RDMA_CM_EVENT_ROUTE_ERROR = 3,
        RDMA_CM_EVENT_CONNECT_REQUEST = 4,
        RDMA_CM_EVENT_CONNECT_RESPONSE = 5,
        RDMA_CM_EVENT_CONNECT_ERROR = 6,
        RDMA_CM_EVENT_UNREACHABLE = 7,
        RDMA_CM_EVENT_REJECTED = 8,
        RDMA_CM_EVENT_ESTABLISHED = 9,
        RDMA_CM_EVENT_DISCONNECTED = 10,
        RDMA_CM_EVENT_DEVICE_REMOVAL = 11,
        RDMA_CM_EVENT_MULTICAST_JOIN = 12,
        RDMA_CM_EVENT_MULTICAST_ERROR = 13,
        RDMA_CM_EVENT_ADDR_CHANGE = 14,
        RDMA_CM_EVENT_TIMEWAIT_EXIT = 15,
    }
    /// `enum rdma_port_space`.
    rdma_port_space {
        RDMA_PS_IPOIB = 0x0002,
        RDMA_PS_TCP = 0x0106,
        RDMA_PS_UDP = 0x0111,
        RDMA_PS_IB = 0x013F,
    }
    /// `#define RDMA_UDP_QKEY`, the Q_Key of the RDMA CM's UD QPs (`rdma_ud_param.qkey`).
    u32 {
        RDMA_UDP_QKEY = 0x0123_4567,
    }
    /// `enum { RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH }`, for `rdma_conn_param`'s `uint8_t`s.
    u8 {
        RDMA_MAX_RESP_RES = 0xFF,
        RDMA_MAX_INIT_DEPTH = 0xFF,
    }
    /// `#define RAI_*`, bits of `rdma_addrinfo.ai_flags` (`int`).
    c_int {
        RAI_PASSIVE = 0x0000_0001,
        RAI_NUMERICHOST = 0x0000_0002,
        RAI_NOROUTE = 0x0000_0004,
        RAI_FAMILY = 0x0000_0008,
    }
    /// `#define AF_IB` (`infiniband/ib.h`), `sockaddr_ib.sib_family`, `rdma_addrinfo.ai_family`.
    c_int {
        AF_IB = 27,
    }
    /// option levels, `rdma_set_option`'s `level` (`int`).
    c_int {
        RDMA_OPTION_ID = 0,
        RDMA_OPTION_IB = 1,
    }
    /// `RDMA_OPTION_ID` options, `rdma_set_option`'s `optname` (`int`).
    c_int {
        RDMA_OPTION_ID_TOS = 0,
        RDMA_OPTION_ID_REUSEADDR = 1,
        RDMA_OPTION_ID_AFONLY = 2,
        RDMA_OPTION_ID_ACK_TIMEOUT = 3,
    }
    /// `RDMA_OPTION_IB` options, `rdma_set_option`'s `optname` (`int`).
    c_int {
        RDMA_OPTION_IB_PATH = 1,
    }
    /// `enum rdma_cm_join_mc_attr_mask`, bits of `rdma_cm_join_mc_attr_ex.comp_mask`.
    u32 {
        RDMA_CM_JOIN_MC_ATTR_ADDRESS = 1 << 0,
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS = 1 << 1,
        RDMA_CM_JOIN_MC_ATTR_RESERVED = 1 << 2,
    }
    /// `enum rdma_cm_mc_join_flags`, `rdma_cm_join_mc_attr_ex.join_flags`.
    u32 {
        RDMA_MC_JOIN_FLAG_FULLMEMBER = 0,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER = 1,
        RDMA_MC_JOIN_FLAG_RESERVED = 2,
    }
}
