//! The IB CM wire codec: the 256-byte CM MADs of IBTA vol. 1 ch. 12.
//!
//! A CM MAD is a 24-byte [`MadHeader`] followed by 232 bytes of message data (cm-spec §1.1,
//! §1.4). [`CmMessage::encode`] builds one from a message; [`decode`] parses one and is total:
//! any input, of any length, gives either a message or a [`WireError`], never a panic. All
//! multi-byte fields are big-endian; bit-field placement follows cm-spec §2.1
//! ("Field-location rules") and Linux `ibta_vol1_c12.h` \[c12\].
//!
//! rdma_cm's use of the REQ — the IP service ID and the 36-byte IP-CM private-data header —
//! is in [`ip_service_id`], [`parse_ip_service_id`] and [`IpCmHeader`] (cm-spec §2.10).
//!
//! Private data: on encode a message carries at most its capacity (shorter is zero-padded on
//! the wire); on decode it always comes back at full capacity, as Linux hands it to the
//! consumer (cm-spec §2.10, last bullet).

mod error;
mod field;
mod header;
mod ip_cm;
mod messages;
mod reason;

pub use error::WireError;
pub use header::{MadHeader, MAD_HEADER_SIZE};
pub use ip_cm::{
    ip_service_id, parse_ip_service_id, IpCmHeader, RdmaPortSpace, CMA_VERSION, IP_CM_HEADER_SIZE,
    RDMA_IB_IP_PS_IB, RDMA_IB_IP_PS_MASK, RDMA_IB_IP_PS_TCP, RDMA_IB_IP_PS_UDP,
    RDMA_TCP_REQ_USER_PRIVATE_DATA_MAX, RDMA_UDP_SIDR_REQ_USER_PRIVATE_DATA_MAX,
};
pub use messages::*;
pub use reason::{attribute_name, ibcm_reject_msg, CmMsgResponse, RejectReason};

/// Size of a MAD, bytes (`IB_MGMT_MAD_SIZE`, cm-spec §1.1).
pub const MAD_SIZE: usize = 256;
/// Size of the class data after the header, bytes (`IB_MGMT_MAD_DATA`).
pub const MAD_DATA_SIZE: usize = MAD_SIZE - MAD_HEADER_SIZE;
/// MAD BaseVersion (`IB_MGMT_BASE_VERSION`).
pub const IB_MGMT_BASE_VERSION: u8 = 1;
/// MgmtClass of the CM (`IB_MGMT_CLASS_CM`).
pub const IB_MGMT_CLASS_CM: u8 = 0x07;
/// ClassVersion of the CM (`IB_CM_CLASS_VERSION`, "IB spec 1.2").
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send (`IB_MGMT_METHOD_SEND`), used by every CM message.
pub const IB_MGMT_METHOD_SEND: u8 = 0x03;

impl CmMessage {
    /// The 256-byte MAD carrying this message, with the header Linux writes
    /// ([`MadHeader::cm`]): the given transaction ID (cm-spec §1.6) and attribute modifier
    /// (0 unless ECE).
    ///
    /// Fields are masked to their wire width (a 24-bit QPN keeps its low 24 bits).
    /// Errors: [`WireError::PrivateDataTooLong`] when the private data exceeds the message's
    /// capacity; [`WireError::InfoTooLong`] when a REJ ARI or SIDR_REP additional information
    /// exceeds 72 bytes (Linux `ib_send_cm_*` return -EINVAL).
    pub fn encode(
        &self,
        transaction_id: u64,
        attribute_modifier: u32,
    ) -> Result<[u8; MAD_SIZE], WireError> {
        let header = MadHeader::cm(self.attribute_id(), transaction_id, attribute_modifier);
        let mut mad = [0u8; MAD_SIZE];
        let (h, data) = mad.split_at_mut(MAD_HEADER_SIZE);
        h.copy_from_slice(&header.encode());
        self.encode_data(data)?;
        Ok(mad)
    }
}

/// Parses a CM MAD.
///
/// Checks, in this order: length exactly 256 ([`WireError::BadLength`]), BaseVersion 1,
/// MgmtClass 0x07, ClassVersion 2, Method Send, then the AttributeID
/// ([`WireError::UnknownAttributeId`] for anything but REQ, MRA, REJ, REP, RTU, DREQ, DREP,
/// SIDR_REQ, SIDR_REP), then the message's own fields (reserved MRA/REJ message code, a
/// REJ/SIDR_REP info length over 72). Status, class-specific and reserved bits are not checked.
/// Never panics.
pub fn decode(mad: &[u8]) -> Result<(MadHeader, CmMessage), WireError> {
    if mad.len() != MAD_SIZE {
        return Err(WireError::BadLength { len: mad.len() });
    }
    let header = MadHeader::parse(mad);
    if header.base_version != IB_MGMT_BASE_VERSION {
        return Err(WireError::BadBaseVersion(header.base_version));
    }
    if header.mgmt_class != IB_MGMT_CLASS_CM {
        return Err(WireError::BadMgmtClass(header.mgmt_class));
    }
    if header.class_version != CM_CLASS_VERSION {
        return Err(WireError::BadClassVersion(header.class_version));
    }
    if header.method != IB_MGMT_METHOD_SEND {
        return Err(WireError::BadMethod(header.method));
    }
    let data = mad.get(MAD_HEADER_SIZE..).unwrap_or_default();
    let msg = CmMessage::decode_data(header.attribute_id, data)?;
    Ok((header, msg))
}
