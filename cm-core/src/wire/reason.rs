//! Numbered enumerations carried in CM messages: REJ reasons and the MRA/REJ message codes;
//! the names logs give attribute IDs and REJ reasons.

/// REJ reason codes, numbered and named as Linux `enum ib_cm_rej_reason` \[ib_cm.h\]
/// (cm-spec §2.5). Value 34 is unassigned.
///
/// [`Rej::reason`](super::Rej::reason) holds the raw 16-bit value so a REJ with an unlisted
/// code still decodes; convert with `RejectReason::try_from(u16)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u16)]
#[allow(missing_docs)] // each variant is the Linux name of its code; see cm-spec §2.5
pub enum RejectReason {
    NoQp = 1,
    NoEec = 2,
    NoResources = 3,
    /// Sent with the sender's CA GUID as ARI (cm-spec §2.5).
    Timeout = 4,
    Unsupported = 5,
    InvalidCommId = 6,
    InvalidCommInstance = 7,
    /// No listener for the Service ID.
    InvalidServiceId = 8,
    InvalidTransportType = 9,
    StaleConn = 10,
    RdcNotExist = 11,
    InvalidGid = 12,
    InvalidLid = 13,
    InvalidSl = 14,
    InvalidTrafficClass = 15,
    InvalidHopLimit = 16,
    InvalidPacketRate = 17,
    InvalidAltGid = 18,
    InvalidAltLid = 19,
    InvalidAltSl = 20,
    InvalidAltTrafficClass = 21,
    InvalidAltHopLimit = 22,
    InvalidAltPacketRate = 23,
    PortCmRedirect = 24,
    PortRedirect = 25,
    InvalidMtu = 26,
    InsufficientRespResources = 27,
    /// `rdma_reject`, destroy during setup, accept failure.
    ConsumerDefined = 28,
    InvalidRnrRetry = 29,
    DuplicateLocalCommId = 30,
    InvalidClassVersion = 31,
    InvalidFlowLabel = 32,
    InvalidAltFlowLabel = 33,
    /// ECE, newer kernels.
    VendorOptionNotSupported = 35,
}

impl RejectReason {
    /// Every reason, in numeric order.
    pub const ALL: [RejectReason; 34] = {
        use RejectReason::*;
        [
            NoQp,
            NoEec,
            NoResources,
            Timeout,
            Unsupported,
            InvalidCommId,
            InvalidCommInstance,
            InvalidServiceId,
            InvalidTransportType,
            StaleConn,
            RdcNotExist,
            InvalidGid,
            InvalidLid,
            InvalidSl,
            InvalidTrafficClass,
            InvalidHopLimit,
            InvalidPacketRate,
            InvalidAltGid,
            InvalidAltLid,
            InvalidAltSl,
            InvalidAltTrafficClass,
            InvalidAltHopLimit,
            InvalidAltPacketRate,
            PortCmRedirect,
            PortRedirect,
            InvalidMtu,
            InsufficientRespResources,
            ConsumerDefined,
            InvalidRnrRetry,
            DuplicateLocalCommId,
            InvalidClassVersion,
            InvalidFlowLabel,
            InvalidAltFlowLabel,
            VendorOptionNotSupported,
        ]
    };
}

impl From<RejectReason> for u16 {
    fn from(r: RejectReason) -> u16 {
        r as u16
    }
}

impl TryFrom<u16> for RejectReason {
    /// The unlisted value itself.
    type Error = u16;

    fn try_from(v: u16) -> Result<Self, u16> {
        RejectReason::ALL
            .iter()
            .copied()
            .find(|r| *r as u16 == v)
            .ok_or(v)
    }
}

/// Which message an MRA acknowledges ("Message MRAed") or a REJ rejects ("Message Rejected"):
/// a 2-bit field, Linux `enum cm_msg_response` \[cm_msgs.h\] (cm-spec §2.5). Value 3 is reserved
/// and fails to decode ([`WireError::BadMsgResponse`](super::WireError::BadMsgResponse)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum CmMsgResponse {
    /// The REQ (`CM_MSG_RESPONSE_REQ`).
    #[default]
    Req = 0,
    /// The REP (`CM_MSG_RESPONSE_REP`).
    Rep = 1,
    /// Another message, e.g. LAP (`CM_MSG_RESPONSE_OTHER`).
    Other = 2,
}

impl TryFrom<u8> for CmMsgResponse {
    /// The reserved value itself.
    type Error = u8;

    fn try_from(v: u8) -> Result<Self, u8> {
        match v {
            0 => Ok(CmMsgResponse::Req),
            1 => Ok(CmMsgResponse::Rep),
            2 => Ok(CmMsgResponse::Other),
            other => Err(other),
        }
    }
}

/// The IBTA name of CM attribute `attribute_id` (cm-spec §2.1: REQ 0x10 … APR 0x1A), for logs
/// and reports; `"unknown"` for any other value.
pub const fn attribute_name(attribute_id: u16) -> &'static str {
    match attribute_id {
        super::CM_REQ_ATTR_ID => "REQ",
        super::CM_MRA_ATTR_ID => "MRA",
        super::CM_REJ_ATTR_ID => "REJ",
        super::CM_REP_ATTR_ID => "REP",
        super::CM_RTU_ATTR_ID => "RTU",
        super::CM_DREQ_ATTR_ID => "DREQ",
        super::CM_DREP_ATTR_ID => "DREP",
        super::CM_SIDR_REQ_ATTR_ID => "SIDR_REQ",
        super::CM_SIDR_REP_ATTR_ID => "SIDR_REP",
        super::CM_LAP_ATTR_ID => "LAP",
        super::CM_APR_ATTR_ID => "APR",
        _ => "unknown",
    }
}

/// The text of REJ reason `reason`, as Linux `ibcm_reject_msg()` gives it
/// (`drivers/infiniband/core/cm.c`, `ibcm_rej_reason_strs`): `"stale conn"` for 10,
/// `"consumer defined"` for 28, `"unrecognized reason"` for a value with no name.
pub const fn ibcm_reject_msg(reason: u16) -> &'static str {
    match reason {
        1 => "no QP",
        2 => "no EEC",
        3 => "no resources",
        4 => "timeout",
        5 => "unsupported",
        6 => "invalid comm ID",
        7 => "invalid comm instance",
        8 => "invalid service ID",
        9 => "invalid transport type",
        10 => "stale conn",
        11 => "RDC not exist",
        12 => "invalid GID",
        13 => "invalid LID",
        14 => "invalid SL",
        15 => "invalid traffic class",
        16 => "invalid hop limit",
        17 => "invalid packet rate",
        18 => "invalid alt GID",
        19 => "invalid alt LID",
        20 => "invalid alt SL",
        21 => "invalid alt traffic class",
        22 => "invalid alt hop limit",
        23 => "invalid alt packet rate",
        24 => "port CM redirect",
        25 => "port redirect",
        26 => "invalid MTU",
        27 => "insufficient resp resources",
        28 => "consumer defined",
        29 => "invalid RNR retry",
        30 => "duplicate local comm ID",
        31 => "invalid class version",
        32 => "invalid flow label",
        33 => "invalid alt flow label",
        35 => "vendor option is not supported",
        _ => "unrecognized reason",
    }
}
