//! Verbs types, named and numbered as libibverbs names and numbers them (`<infiniband/verbs.h>`,
//! cm-spec §5.1).

use bitflags::bitflags;
use std::fmt;

mod addr;
mod attrs;
mod wc;
mod wr;
pub use addr::*;
pub use attrs::*;
pub use wc::*;
pub use wr::*;

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
