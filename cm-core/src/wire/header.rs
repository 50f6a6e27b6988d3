//! The 24-byte MAD common header (cm-spec §1.4 [ib_mad.h, cm.c `cm_format_mad_hdr`]).

use super::field::{bytes, put_bytes, u16_at, u32_at, u64_at};
use super::{CM_CLASS_VERSION, IB_MGMT_BASE_VERSION, IB_MGMT_CLASS_CM, IB_MGMT_METHOD_SEND};

/// Size of the MAD common header, in bytes (`IB_MGMT_MAD_HDR`).
pub const MAD_HEADER_SIZE: usize = 24;

/// The MAD common header (`struct ib_mad_hdr`), fields in host order.
///
/// Layout (MAD offsets): BaseVersion 0, MgmtClass 1, ClassVersion 2, Method 3 (R bit 0x80 +
/// method), Status 4–5, ClassSpecific 6–7, TransactionID 8–15, AttributeID 16–17, reserved
/// 18–19, AttributeModifier 20–23; all big-endian (cm-spec §1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// 1 (`IB_MGMT_BASE_VERSION`).
    pub base_version: u8,
    /// 0x07 for the CM (`IB_MGMT_CLASS_CM`).
    pub mgmt_class: u8,
    /// 2 for the CM (`IB_CM_CLASS_VERSION`).
    pub class_version: u8,
    /// Method byte including the R (response) bit 0x80; 0x03 Send for every CM message.
    pub method: u8,
    /// Status; 0 on CM sends.
    pub status: u16,
    /// Class-specific field; 0 for the CM.
    pub class_specific: u16,
    /// Transaction ID: `hi_tid << 32 | local Comm ID` for new requests, copied for replies
    /// (cm-spec §1.6).
    pub transaction_id: u64,
    /// Attribute ID: which CM message follows (cm-spec §2.1).
    pub attribute_id: u16,
    /// Attribute modifier: 0, except ECE option bits on REQ/REP/SIDR in newer kernels.
    pub attribute_modifier: u32,
}

impl MadHeader {
    /// The header Linux's `cm_format_mad_hdr` writes: base version 1, class 0x07, class
    /// version 2, method Send, status 0, class-specific 0.
    pub fn cm(attribute_id: u16, transaction_id: u64, attribute_modifier: u32) -> Self {
        MadHeader {
            base_version: IB_MGMT_BASE_VERSION,
            mgmt_class: IB_MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: IB_MGMT_METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier,
        }
    }

    /// The 24 wire bytes of this header (reserved bytes 18–19 are zero).
    pub fn encode(&self) -> [u8; MAD_HEADER_SIZE] {
        let mut h = [0u8; MAD_HEADER_SIZE];
        put_bytes(
            &mut h,
            0,
            [
                self.base_version,
                self.mgmt_class,
                self.class_version,
                self.method,
            ],
        );
        put_bytes(&mut h, 4, self.status.to_be_bytes());
        put_bytes(&mut h, 6, self.class_specific.to_be_bytes());
        put_bytes(&mut h, 8, self.transaction_id.to_be_bytes());
        put_bytes(&mut h, 16, self.attribute_id.to_be_bytes());
        put_bytes(&mut h, 20, self.attribute_modifier.to_be_bytes());
        h
    }

    /// Reads the header fields from the first 24 bytes of `mad` without validating them
    /// (missing bytes read as zero; [`decode`](super::decode) checks the length first).
    pub fn parse(mad: &[u8]) -> Self {
        let [base_version, mgmt_class, class_version, method] = bytes::<4>(mad, 0);
        MadHeader {
            base_version,
            mgmt_class,
            class_version,
            method,
            status: u16_at(mad, 4),
            class_specific: u16_at(mad, 6),
            transaction_id: u64_at(mad, 8),
            attribute_id: u16_at(mad, 16),
            attribute_modifier: u32_at(mad, 20),
        }
    }
}
