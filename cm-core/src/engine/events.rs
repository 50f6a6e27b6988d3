//! The IB CM's events (`struct ib_cm_event` [ib_cm.h], cm-spec §3.1): what the engine reports
//! to its consumer, the rdma_cm layer ([`crate::cma`]).

use verbs_core::Gid;

use super::IbCmId;

/// `enum ib_cm_event_type` [ib_cm.h] (cm-spec §3.1), same names and numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // each variant is the Linux name of its value
pub enum IbCmEventType {
    ReqError = 0,
    ReqReceived = 1,
    RepError = 2,
    RepReceived = 3,
    RtuReceived = 4,
    UserEstablished = 5,
    DreqError = 6,
    DreqReceived = 7,
    DrepReceived = 8,
    TimewaitExit = 9,
    MraReceived = 10,
    RejReceived = 11,
    LapError = 12,
    LapReceived = 13,
    AprReceived = 14,
    SidrReqError = 15,
    SidrReqReceived = 16,
    SidrRepReceived = 17,
}

/// What the passive side learns from a REQ (`struct ib_cm_req_event_param`), already in the
/// passive perspective: `responder_resources` is the REQ's Initiator Depth and vice versa
/// (cm-spec §2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    /// The listening id the REQ matched.
    pub listen_id: IbCmId,
    /// The sender's GID.
    pub remote_gid: Gid,
    /// The active side's QPN (24 bits).
    pub remote_qpn: u32,
    /// Service ID of the REQ.
    pub service_id: u64,
    /// RDMA READ/atomic depth this side should accept.
    pub responder_resources: u8,
    /// RDMA READ/atomic depth this side may issue.
    pub initiator_depth: u8,
    /// Transport retry count requested (3 bits).
    pub retry_count: u8,
    /// RNR retry count requested (3 bits).
    pub rnr_retry_count: u8,
    /// SRQ flag.
    pub srq: bool,
    /// REQ private data, 92 bytes (IP-CM header first when rdma_cm sent it).
    pub private_data: Vec<u8>,
}

/// What the active side learns from a REP (`struct ib_cm_rep_event_param`), in its own
/// perspective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepInfo {
    /// The passive side's QPN.
    pub remote_qpn: u32,
    /// RDMA READ/atomic depth this side should accept (= REP Initiator Depth).
    pub responder_resources: u8,
    /// RDMA READ/atomic depth this side may issue (= REP Responder Resources).
    pub initiator_depth: u8,
    /// RNR retry count for this side's sends.
    pub rnr_retry_count: u8,
    /// SRQ flag.
    pub srq: bool,
    /// REP private data, 196 bytes.
    pub private_data: Vec<u8>,
}

/// What the passive side learns from a SIDR_REQ (`struct ib_cm_sidr_req_event_param`, Linux
/// `cm_format_sidr_req_event`; IBTA vol. 1 §12.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqInfo {
    /// The listening id whose service ID the SIDR_REQ named.
    pub listen_id: IbCmId,
    /// The sender's GID (where the SIDR_REP goes).
    pub remote_gid: Gid,
    /// Service ID of the SIDR_REQ.
    pub service_id: u64,
    /// Partition key of the SIDR_REQ.
    pub pkey: u16,
    /// SIDR_REQ private data, 216 bytes (IP-CM header first when rdma_cm sent it).
    pub private_data: Vec<u8>,
}

/// What the active side learns from a SIDR_REP (`struct ib_cm_sidr_rep_event_param`, Linux
/// `cm_format_sidr_rep_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepInfo {
    /// `enum ib_cm_sidr_status`: 0 success (the QPN and Q_Key are valid), 1 unsupported
    /// (no listener on the service ID), 2 reject, 3 no QP, 4 redirect, 5 unsupported version.
    pub status: u8,
    /// The passive side's UD QPN (24 bits).
    pub qpn: u32,
    /// The Q_Key to send to that QP with.
    pub qkey: u32,
    /// Additional information (its length as the SIDR_REP gives it, at most 72 bytes).
    pub info: Vec<u8>,
    /// SIDR_REP private data, 136 bytes.
    pub private_data: Vec<u8>,
}

/// The payload of an IB CM event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IbCmEventKind {
    /// REQ retries exhausted; the id is back in IDLE.
    ReqError,
    /// A new connection request; the event's id is the new passive id (state MRA_REQ_SENT,
    /// as rdma_cm arms a delayed MRA at once, cm-spec §4.2).
    ReqReceived(ReqInfo),
    /// REP retries exhausted; the id is back in IDLE.
    RepError,
    /// REP accepted; the id is in REP_RCVD and waits for `send_rtu` or `send_rej`.
    RepReceived(RepInfo),
    /// RTU received; ESTABLISHED.
    RtuReceived(Vec<u8>),
    /// `establish` (COMM_EST) moved the passive id to ESTABLISHED.
    UserEstablished,
    /// DREQ retries exhausted; the id is in TIMEWAIT.
    DreqError,
    /// DREQ received; the id is in DREQ_RCVD and waits for `send_drep` (or destroy).
    DreqReceived(Vec<u8>),
    /// DREP received; the id is in TIMEWAIT.
    DrepReceived(Vec<u8>),
    /// TimeWait over; the id is back in IDLE.
    TimewaitExit,
    /// MRA received; the pending retransmission was pushed back.
    MraReceived,
    /// REJ received.
    RejReceived {
        /// REJ reason (cm-spec §2.5), raw.
        reason: u16,
        /// Additional reject information.
        ari: Vec<u8>,
        /// REJ private data, 148 bytes.
        private_data: Vec<u8>,
    },
    /// SIDR_REQ retries exhausted without a SIDR_REP; the id is back in IDLE.
    SidrReqError,
    /// A new SIDR_REQ; the event's id is the new passive id, in SIDR_REQ_RCVD until
    /// `send_sidr_rep` (or destroy, which answers with status 2, reject).
    SidrReqReceived(SidrReqInfo),
    /// The SIDR_REP of this id's SIDR_REQ; the id is back in IDLE.
    SidrRepReceived(SidrRepInfo),
}

impl IbCmEventKind {
    /// The `ib_cm_event_type` of this event.
    pub fn event_type(&self) -> IbCmEventType {
        use IbCmEventKind as K;
        match self {
            K::ReqError => IbCmEventType::ReqError,
            K::ReqReceived(_) => IbCmEventType::ReqReceived,
            K::RepError => IbCmEventType::RepError,
            K::RepReceived(_) => IbCmEventType::RepReceived,
            K::RtuReceived(_) => IbCmEventType::RtuReceived,
            K::UserEstablished => IbCmEventType::UserEstablished,
            K::DreqError => IbCmEventType::DreqError,
            K::DreqReceived(_) => IbCmEventType::DreqReceived,
            K::DrepReceived(_) => IbCmEventType::DrepReceived,
            K::TimewaitExit => IbCmEventType::TimewaitExit,
            K::MraReceived => IbCmEventType::MraReceived,
            K::RejReceived { .. } => IbCmEventType::RejReceived,
            K::SidrReqError => IbCmEventType::SidrReqError,
            K::SidrReqReceived(_) => IbCmEventType::SidrReqReceived,
            K::SidrRepReceived(_) => IbCmEventType::SidrRepReceived,
        }
    }
}

/// An IB CM event for one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbCmEvent {
    /// The id it concerns (for REQ_RECEIVED: the new passive id).
    pub id: IbCmId,
    /// What happened.
    pub kind: IbCmEventKind,
}
