//! Verbs types, named and numbered as libibverbs names and numbers them (`<infiniband/verbs.h>`,
//! cm-spec §5.1).

use bitflags::bitflags;
use std::fmt;

/// Declares a `#[repr(uN)]` enum whose values equal rdma-core's, with `from_raw`.
macro_rules! numbered_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident : $repr:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr($repr)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value, )+
        }

        impl $name {
            /// Every value, in numeric order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value from its rdma-core number; `None` for a number rdma-core does not define.
            pub const fn from_raw(raw: $repr) -> Option<Self> {
                match raw {
                    $( $value => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// The rdma-core number of this value.
            pub const fn raw(self) -> $repr {
                self as $repr
            }
        }
    };
}

numbered_enum! {
    /// `enum ibv_qp_state` [verbs.h]: the state of a queue pair.
    pub enum QpState: u8 {
        /// `IBV_QPS_RESET` (0): freshly created or reset; queues empty, nothing accepted.
        Reset = 0,
        /// `IBV_QPS_INIT` (1): receives may be posted, nothing is processed.
        Init = 1,
        /// `IBV_QPS_RTR` (2): ready to receive.
        Rtr = 2,
        /// `IBV_QPS_RTS` (3): ready to send.
        Rts = 3,
        /// `IBV_QPS_SQD` (4): send queue drained.
        Sqd = 4,
        /// `IBV_QPS_SQE` (5): send queue error (UD/UC only).
        Sqe = 5,
        /// `IBV_QPS_ERR` (6): error; every WR is flushed with `IBV_WC_WR_FLUSH_ERR`.
        Err = 6,
        /// `IBV_QPS_UNKNOWN` (7).
        Unknown = 7,
    }
}

numbered_enum! {
    /// `enum ibv_qp_type` [verbs.h].
    pub enum QpType: u8 {
        /// `IBV_QPT_RC` (2): reliable connected.
        Rc = 2,
        /// `IBV_QPT_UC` (3): unreliable connected.
        Uc = 3,
        /// `IBV_QPT_UD` (4): unreliable datagram.
        Ud = 4,
    }
}

numbered_enum! {
    /// `enum ibv_mtu` [verbs.h]: path MTU.
    pub enum Mtu: u8 {
        /// `IBV_MTU_256` (1).
        Mtu256 = 1,
        /// `IBV_MTU_512` (2).
        Mtu512 = 2,
        /// `IBV_MTU_1024` (3).
        Mtu1024 = 3,
        /// `IBV_MTU_2048` (4).
        Mtu2048 = 4,
        /// `IBV_MTU_4096` (5).
        Mtu4096 = 5,
    }
}

impl Mtu {
    /// The MTU in bytes (256 × 2^(value − 1)).
    pub const fn bytes(self) -> u32 {
        256 << (self as u32 - 1)
    }

    /// The MTU of `bytes` (256, 512, 1024, 2048 or 4096), if it is one.
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ]
        .into_iter()
        .find(|m| m.bytes() == bytes)
    }
}

numbered_enum! {
    /// `enum ibv_wc_status` [verbs.h, man:ibv_poll_cq.3]: the status of a work completion.
    pub enum WcStatus: u8 {
        /// `IBV_WC_SUCCESS` (0).
        Success = 0,
        /// `IBV_WC_LOC_LEN_ERR` (1): the receive buffer is smaller than the incoming message.
        LocLenErr = 1,
        /// `IBV_WC_LOC_QP_OP_ERR` (2): internal QP consistency error (e.g. CQ overrun on rdmavt).
        LocQpOpErr = 2,
        /// `IBV_WC_LOC_EEC_OP_ERR` (3).
        LocEecOpErr = 3,
        /// `IBV_WC_LOC_PROT_ERR` (4): an SGE does not lie in a local MR with the right access.
        LocProtErr = 4,
        /// `IBV_WC_WR_FLUSH_ERR` (5): flushed because the QP is in the error state.
        WrFlushErr = 5,
        /// `IBV_WC_MW_BIND_ERR` (6).
        MwBindErr = 6,
        /// `IBV_WC_BAD_RESP_ERR` (7).
        BadRespErr = 7,
        /// `IBV_WC_LOC_ACCESS_ERR` (8): local access violation on an incoming RDMA.
        LocAccessErr = 8,
        /// `IBV_WC_REM_INV_REQ_ERR` (9): the responder found the request invalid.
        RemInvReqErr = 9,
        /// `IBV_WC_REM_ACCESS_ERR` (10): bad rkey, bounds or access at the responder.
        RemAccessErr = 10,
        /// `IBV_WC_REM_OP_ERR` (11): the responder could not complete the operation.
        RemOpErr = 11,
        /// `IBV_WC_RETRY_EXC_ERR` (12): transport retries (`retry_cnt`) exhausted.
        RetryExcErr = 12,
        /// `IBV_WC_RNR_RETRY_EXC_ERR` (13): RNR retries (`rnr_retry`) exhausted.
        RnrRetryExcErr = 13,
        /// `IBV_WC_LOC_RDD_VIOL_ERR` (14).
        LocRddViolErr = 14,
        /// `IBV_WC_REM_INV_RD_REQ_ERR` (15).
        RemInvRdReqErr = 15,
        /// `IBV_WC_REM_ABORT_ERR` (16).
        RemAbortErr = 16,
        /// `IBV_WC_INV_EECN_ERR` (17).
        InvEecnErr = 17,
        /// `IBV_WC_INV_EEC_STATE_ERR` (18).
        InvEecStateErr = 18,
        /// `IBV_WC_FATAL_ERR` (19).
        FatalErr = 19,
        /// `IBV_WC_RESP_TIMEOUT_ERR` (20).
        RespTimeoutErr = 20,
        /// `IBV_WC_GENERAL_ERR` (21).
        GeneralErr = 21,
        /// `IBV_WC_TM_ERR` (22).
        TmErr = 22,
        /// `IBV_WC_TM_RNDV_INCOMPLETE` (23).
        TmRndvIncomplete = 23,
    }
}

impl WcStatus {
    /// `ibv_wc_status_str()`'s text for this status.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
            WcStatus::TmErr => "TM error",
            WcStatus::TmRndvIncomplete => "TM software rendezvous",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

numbered_enum! {
    /// `enum ibv_wc_opcode` [verbs.h]: what a work completion completed.
    pub enum WcOpcode: u8 {
        /// `IBV_WC_SEND` (0). Also what error completions read as (rxe zero-fills them).
        Send = 0,
        /// `IBV_WC_RDMA_WRITE` (1).
        RdmaWrite = 1,
        /// `IBV_WC_RDMA_READ` (2).
        RdmaRead = 2,
        /// `IBV_WC_COMP_SWAP` (3).
        CompSwap = 3,
        /// `IBV_WC_FETCH_ADD` (4).
        FetchAdd = 4,
        /// `IBV_WC_BIND_MW` (5).
        BindMw = 5,
        /// `IBV_WC_LOCAL_INV` (6).
        LocalInv = 6,
        /// `IBV_WC_TSO` (7).
        Tso = 7,
        /// `IBV_WC_RECV` (128): a receive consumed by SEND (with or without immediate).
        Recv = 128,
        /// `IBV_WC_RECV_RDMA_WITH_IMM` (129): a receive consumed by RDMA WRITE with immediate.
        RecvRdmaWithImm = 129,
    }
}

numbered_enum! {
    /// `enum ibv_wr_opcode` [verbs.h]: the operation of a send work request.
    pub enum WrOpcode: u8 {
        /// `IBV_WR_RDMA_WRITE` (0).
        RdmaWrite = 0,
        /// `IBV_WR_RDMA_WRITE_WITH_IMM` (1): write, then consume a receive at the responder.
        RdmaWriteWithImm = 1,
        /// `IBV_WR_SEND` (2).
        Send = 2,
        /// `IBV_WR_SEND_WITH_IMM` (3).
        SendWithImm = 3,
        /// `IBV_WR_RDMA_READ` (4).
        RdmaRead = 4,
        /// `IBV_WR_ATOMIC_CMP_AND_SWP` (5): 8-byte compare and swap.
        AtomicCmpAndSwp = 5,
        /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (6): 8-byte fetch and add.
        AtomicFetchAndAdd = 6,
    }
}

impl WrOpcode {
    /// The completion opcode a successful send WR of this opcode reports.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        }
    }

    /// True for the two atomic operations (8 bytes, 8-byte aligned remote address).
    pub const fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    /// True when the operation carries immediate data.
    pub const fn has_imm(self) -> bool {
        matches!(self, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm)
    }
}

numbered_enum! {
    /// `enum ibv_event_type` [verbs.h, man:ibv_get_async_event.3]: asynchronous events.
    pub enum AsyncEventType: u8 {
        /// `IBV_EVENT_CQ_ERR` (0): CQ overrun; the CQ is no longer usable.
        CqErr = 0,
        /// `IBV_EVENT_QP_FATAL` (1).
        QpFatal = 1,
        /// `IBV_EVENT_QP_REQ_ERR` (2).
        QpReqErr = 2,
        /// `IBV_EVENT_QP_ACCESS_ERR` (3).
        QpAccessErr = 3,
        /// `IBV_EVENT_COMM_EST` (4): first request received on a QP since it entered RTR
        /// (rnic-sim: in RTR or RTS, docs/semantics-verbs.md "Async events").
        CommEst = 4,
        /// `IBV_EVENT_SQ_DRAINED` (5).
        SqDrained = 5,
        /// `IBV_EVENT_PATH_MIG` (6).
        PathMig = 6,
        /// `IBV_EVENT_PATH_MIG_ERR` (7).
        PathMigErr = 7,
        /// `IBV_EVENT_DEVICE_FATAL` (8).
        DeviceFatal = 8,
        /// `IBV_EVENT_PORT_ACTIVE` (9).
        PortActive = 9,
        /// `IBV_EVENT_PORT_ERR` (10).
        PortErr = 10,
        /// `IBV_EVENT_LID_CHANGE` (11).
        LidChange = 11,
        /// `IBV_EVENT_PKEY_CHANGE` (12).
        PkeyChange = 12,
        /// `IBV_EVENT_SM_CHANGE` (13).
        SmChange = 13,
        /// `IBV_EVENT_SRQ_ERR` (14).
        SrqErr = 14,
        /// `IBV_EVENT_SRQ_LIMIT_REACHED` (15).
        SrqLimitReached = 15,
        /// `IBV_EVENT_QP_LAST_WQE_REACHED` (16).
        QpLastWqeReached = 16,
        /// `IBV_EVENT_CLIENT_REREGISTER` (17).
        ClientReregister = 17,
        /// `IBV_EVENT_GID_CHANGE` (18).
        GidChange = 18,
        /// `IBV_EVENT_WQ_FATAL` (19).
        WqFatal = 19,
        /// `IBV_EVENT_DEVICE_SPEED_CHANGE` (20).
        DeviceSpeedChange = 20,
    }
}

numbered_enum! {
    /// `enum ibv_port_state` [verbs.h].
    pub enum PortState: u8 {
        /// `IBV_PORT_NOP` (0).
        Nop = 0,
        /// `IBV_PORT_DOWN` (1).
        Down = 1,
        /// `IBV_PORT_INIT` (2).
        Init = 2,
        /// `IBV_PORT_ARMED` (3).
        Armed = 3,
        /// `IBV_PORT_ACTIVE` (4).
        Active = 4,
        /// `IBV_PORT_ACTIVE_DEFER` (5).
        ActiveDefer = 5,
    }
}

bitflags! {
    /// `enum ibv_access_flags` [verbs.h]: what a memory region or QP allows.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE` (1): the device may write the MR (receives, READ responses).
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE` (2): peers may RDMA WRITE (requires LOCAL_WRITE on an MR).
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ` (4): peers may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC` (8): peers may run atomics (requires LOCAL_WRITE on an MR).
        const REMOTE_ATOMIC = 1 << 3;
        /// `IBV_ACCESS_MW_BIND` (16).
        const MW_BIND = 1 << 4;
        /// `IBV_ACCESS_ZERO_BASED` (32).
        const ZERO_BASED = 1 << 5;
        /// `IBV_ACCESS_ON_DEMAND` (64).
        const ON_DEMAND = 1 << 6;
    }
}

bitflags! {
    /// `enum ibv_send_flags` [verbs.h].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    pub struct SendFlags: u32 {
        /// `IBV_SEND_FENCE` (1): wait for prior READs/atomics before starting.
        const FENCE = 1;
        /// `IBV_SEND_SIGNALED` (2): generate a completion on success.
        const SIGNALED = 1 << 1;
        /// `IBV_SEND_SOLICITED` (4): set the solicited-event bit.
        const SOLICITED = 1 << 2;
        /// `IBV_SEND_INLINE` (8): copy the payload at post time; lkeys are not checked.
        const INLINE = 1 << 3;
    }
}

bitflags! {
    /// `enum ibv_wc_flags` [verbs.h].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    pub struct WcFlags: u32 {
        /// `IBV_WC_GRH` (1): a GRH is present (UD receives).
        const GRH = 1;
        /// `IBV_WC_WITH_IMM` (2): `imm_data` is valid.
        const WITH_IMM = 1 << 1;
    }
}

bitflags! {
    /// `enum ibv_qp_attr_mask` [verbs.h, cm-spec §5.1]: which [`QpAttr`] fields a modify uses.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `IBV_QP_STATE`.
        const STATE = 1;
        /// `IBV_QP_CUR_STATE`.
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`.
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`.
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`.
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY`.
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`.
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`.
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`.
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`.
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`.
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`.
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`.
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`.
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`.
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`.
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`.
        const DEST_QPN = 1 << 20;
        /// `IBV_QP_RATE_LIMIT`.
        const RATE_LIMIT = 1 << 25;
    }
}

/// A 128-bit global identifier (`union ibv_gid`), in network byte order.
///
/// On RoCEv2 over IPv4 the GID is the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID `::ffff:a.b.c.d` of an IPv4 address.
    pub fn from_ipv4(addr: std::net::Ipv4Addr) -> Self {
        Gid(addr.to_ipv6_mapped().octets())
    }

    /// The GID of an IP address (IPv4 addresses are mapped).
    pub fn from_ip(addr: std::net::IpAddr) -> Self {
        match addr {
            std::net::IpAddr::V4(v4) => Gid::from_ipv4(v4),
            std::net::IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for (an IPv4-mapped GID gives the IPv4 address).
    pub fn to_ip(self) -> std::net::IpAddr {
        let v6 = std::net::Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(v6),
        }
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", self)
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::net::Ipv6Addr::from(self.0))
    }
}

/// `struct ibv_global_route` [verbs.h]: the GRH part of an address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Index of the source GID in the local port's GID table.
    pub sgid_index: u8,
    /// Hop limit (IP TTL on RoCEv2).
    pub hop_limit: u8,
    /// Traffic class (IP TOS/DSCP on RoCEv2).
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` [verbs.h]: an address vector. RoCE requires `is_global` with a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// The global route (destination GID etc.).
    pub grh: GlobalRoute,
    /// Destination LID (unused on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// True when `grh` is valid (always on RoCE).
    pub is_global: bool,
    /// Local port number (1-based).
    pub port_num: u8,
}

/// `struct ibv_qp_cap` [verbs.h]: queue sizes of a QP, in work requests and SGEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Maximum outstanding send WRs.
    pub max_send_wr: u32,
    /// Maximum outstanding receive WRs.
    pub max_recv_wr: u32,
    /// Maximum SGEs per send WR.
    pub max_send_sge: u32,
    /// Maximum SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Maximum inline payload in bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr` [verbs.h, man:ibv_modify_qp.3]: QP attributes; the fields a modify
/// reads are chosen by a [`QpAttrMask`].
///
/// Units: `timeout` is the IBTA exponent (4.096 µs × 2^timeout, 0 = infinite); `min_rnr_timer`
/// the IBTA RNR-timer code (0 = 655.36 ms, 1 = 0.01 ms … 31 = 491.52 ms); PSNs are 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state (`IBV_QP_STATE`).
    pub qp_state: QpState,
    /// Assumed current state (`IBV_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU (`IBV_QP_PATH_MTU`).
    pub path_mtu: Mtu,
    /// Q_Key for UD (`IBV_QP_QKEY`).
    pub qkey: u32,
    /// Expected PSN of the next incoming request, 24 bits (`IBV_QP_RQ_PSN`).
    pub rq_psn: u32,
    /// PSN of the next outgoing request, 24 bits (`IBV_QP_SQ_PSN`).
    pub sq_psn: u32,
    /// Remote QP number, 24 bits (`IBV_QP_DEST_QPN`).
    pub dest_qp_num: u32,
    /// What remote peers may do (`IBV_QP_ACCESS_FLAGS`).
    pub qp_access_flags: AccessFlags,
    /// Queue sizes (read-only here; reported by query).
    pub cap: QpCap,
    /// Primary path address vector (`IBV_QP_AV`).
    pub ah_attr: AhAttr,
    /// P_Key index (`IBV_QP_PKEY_INDEX`).
    pub pkey_index: u16,
    /// SQ-drained async event on entering SQD (`IBV_QP_EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
    /// True while the SQ drains in SQD (query only).
    pub sq_draining: bool,
    /// Outstanding RDMA READ/atomic requests this QP may issue (`IBV_QP_MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomic requests this QP accepts (`IBV_QP_MAX_DEST_RD_ATOMIC`).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder advertises (`IBV_QP_MIN_RNR_TIMER`).
    pub min_rnr_timer: u8,
    /// Port number, 1-based (`IBV_QP_PORT`).
    pub port_num: u8,
    /// Local ACK timeout exponent (`IBV_QP_TIMEOUT`).
    pub timeout: u8,
    /// Transport retries, 0–7 (`IBV_QP_RETRY_CNT`).
    pub retry_cnt: u8,
    /// RNR retries, 0–7, 7 = infinite (`IBV_QP_RNR_RETRY`).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::empty(),
            cap: QpCap::default(),
            ah_attr: AhAttr::default(),
            pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

impl QpCap {
    /// Both queues holding `wr` work requests of up to `sge` scatter/gather elements each, and
    /// up to `max_inline_data` bytes of inline data.
    pub const fn uniform(wr: u32, sge: u32, max_inline_data: u32) -> Self {
        QpCap {
            max_send_wr: wr,
            max_recv_wr: wr,
            max_send_sge: sge,
            max_recv_sge: sge,
            max_inline_data,
        }
    }
}

/// Mask of valid PSN bits (PSNs are 24 bits wide).
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// Mask of valid QP-number bits (QPNs are 24 bits wide).
pub const QPN_MASK: u32 = 0x00FF_FFFF;

/// `struct ibv_sge` [verbs.h]: a scatter/gather element in a registered MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address (the MR's `addr` plus an offset).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR that holds `[addr, addr + length)`.
    pub lkey: u32,
}

/// The RDMA part of a send WR (`wr.rdma` of `ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaWr {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// Remote key of the target MR.
    pub rkey: u32,
}

/// The atomic part of a send WR (`wr.atomic` of `ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicWr {
    /// Remote virtual address, 8-byte aligned.
    pub remote_addr: u64,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP only).
    pub swap: u64,
    /// Remote key of the target MR.
    pub rkey: u32,
}

/// The UD part of a send WR (`wr.ud` of `ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdWr {
    /// Address vector of the destination.
    pub ah: AhAttr,
    /// Destination QP number (24 bits).
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// `struct ibv_send_wr` [verbs.h, man:ibv_post_send.3]: a send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Local buffers (gathered for SEND/WRITE, scattered into for READ/atomics).
    pub sg_list: Vec<Sge>,
    /// The operation.
    pub opcode: WrOpcode,
    /// Flags (SIGNALED, SOLICITED, INLINE, FENCE).
    pub send_flags: SendFlags,
    /// Immediate data (network order value) for `*_WITH_IMM`.
    pub imm_data: u32,
    /// RDMA WRITE/READ target.
    pub rdma: RdmaWr,
    /// Atomic target and operands.
    pub atomic: AtomicWr,
    /// UD destination.
    pub ud: UdWr,
}

impl SendWr {
    fn base(wr_id: u64, opcode: WrOpcode, sg_list: Vec<Sge>) -> Self {
        SendWr {
            wr_id,
            sg_list,
            opcode,
            send_flags: SendFlags::SIGNALED,
            imm_data: 0,
            rdma: RdmaWr::default(),
            atomic: AtomicWr::default(),
            ud: UdWr::default(),
        }
    }

    /// A signaled SEND of `sg_list`.
    pub fn send(wr_id: u64, sg_list: Vec<Sge>) -> Self {
        SendWr::base(wr_id, WrOpcode::Send, sg_list)
    }

    /// A signaled SEND_WITH_IMM.
    pub fn send_with_imm(wr_id: u64, sg_list: Vec<Sge>, imm_data: u32) -> Self {
        SendWr {
            imm_data,
            ..SendWr::base(wr_id, WrOpcode::SendWithImm, sg_list)
        }
    }

    /// A signaled RDMA WRITE of `sg_list` to `remote_addr`/`rkey`.
    pub fn rdma_write(wr_id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            rdma: RdmaWr { remote_addr, rkey },
            ..SendWr::base(wr_id, WrOpcode::RdmaWrite, sg_list)
        }
    }

    /// A signaled RDMA_WRITE_WITH_IMM.
    pub fn rdma_write_with_imm(
        wr_id: u64,
        sg_list: Vec<Sge>,
        remote_addr: u64,
        rkey: u32,
        imm_data: u32,
    ) -> Self {
        SendWr {
            imm_data,
            rdma: RdmaWr { remote_addr, rkey },
            ..SendWr::base(wr_id, WrOpcode::RdmaWriteWithImm, sg_list)
        }
    }

    /// A signaled RDMA READ of `remote_addr`/`rkey` into `sg_list`.
    pub fn rdma_read(wr_id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> Self {
        SendWr {
            rdma: RdmaWr { remote_addr, rkey },
            ..SendWr::base(wr_id, WrOpcode::RdmaRead, sg_list)
        }
    }

    /// A signaled 8-byte compare-and-swap; the original value lands in `sge` (8 bytes).
    pub fn atomic_cmp_and_swp(
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        SendWr {
            atomic: AtomicWr {
                remote_addr,
                compare_add: compare,
                swap,
                rkey,
            },
            ..SendWr::base(wr_id, WrOpcode::AtomicCmpAndSwp, vec![sge])
        }
    }

    /// A signaled 8-byte fetch-and-add; the original value lands in `sge` (8 bytes).
    pub fn atomic_fetch_and_add(
        wr_id: u64,
        sge: Sge,
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> Self {
        SendWr {
            atomic: AtomicWr {
                remote_addr,
                compare_add: add,
                swap: 0,
                rkey,
            },
            ..SendWr::base(wr_id, WrOpcode::AtomicFetchAndAdd, vec![sge])
        }
    }

    /// This WR with `send_flags` replaced.
    pub fn with_flags(mut self, send_flags: SendFlags) -> Self {
        self.send_flags = send_flags;
        self
    }

    /// Total bytes described by the SGEs.
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// `struct ibv_recv_wr` [verbs.h, man:ibv_post_recv.3]: a receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffers an incoming SEND is scattered into.
    pub sg_list: Vec<Sge>,
}

impl RecvWr {
    /// A receive WR.
    pub fn new(wr_id: u64, sg_list: Vec<Sge>) -> Self {
        RecvWr { wr_id, sg_list }
    }

    /// Total bytes described by the SGEs.
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// `struct ibv_wc` [verbs.h, man:ibv_poll_cq.3]: a work completion.
///
/// For a status other than `Success` only `wr_id`, `status`, `qp_num` and `vendor_err` are
/// valid; the simulated device zeroes the other fields, as rxe does (cm-spec §5.3), or fills
/// them with junk when `SimDeviceConfig::poison_undefined_wc_fields` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` of the completed work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (valid on success only).
    pub opcode: WcOpcode,
    /// Vendor syndrome (0 on the simulated device).
    pub vendor_err: u32,
    /// Bytes transferred (receives: bytes received; valid on success only).
    pub byte_len: u32,
    /// Immediate data (valid when `wc_flags` has `WITH_IMM`).
    pub imm_data: u32,
    /// Local QP number (24 bits).
    pub qp_num: u32,
    /// Source QP number (UD receives).
    pub src_qp: u32,
    /// Completion flags.
    pub wc_flags: WcFlags,
    /// P_Key index (UD receives).
    pub pkey_index: u16,
    /// Source LID (UD receives; 0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
}

impl WorkCompletion {
    /// An error completion: only `wr_id`, `status`, `qp_num` (and `vendor_err` = 0) set; the
    /// rest zeroed (opcode reads as `Send` = 0), as rxe fills them (cm-spec §5.3).
    pub fn error(wr_id: u64, status: WcStatus, qp_num: u32) -> Self {
        WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::empty(),
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }
    }

    /// A successful completion of `opcode` with `byte_len` bytes.
    pub fn success(wr_id: u64, opcode: WcOpcode, byte_len: u32, qp_num: u32) -> Self {
        WorkCompletion {
            opcode,
            byte_len,
            ..WorkCompletion::error(wr_id, WcStatus::Success, qp_num)
        }
    }
}

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
