//! Errors of the CM wire codec.

use verbs_core::Errno;

/// Why a MAD could not be decoded, or a message or IP-CM header could not be encoded.
///
/// Decoding errors describe bad input from the network: the caller counts and drops the MAD
/// (Linux's MAD layer and `cm.c` drop such MADs silently). Every variant maps to an errno via
/// [`WireError::errno`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is not exactly [`MAD_SIZE`](super::MAD_SIZE) = 256 bytes (cm-spec §1.1).
    #[error("a CM MAD is 256 bytes, got {len}")]
    BadLength {
        /// Length of the buffer that was offered, in bytes.
        len: usize,
    },
    /// BaseVersion is not 1 (`IB_MGMT_BASE_VERSION`, cm-spec §1.4).
    #[error("MAD base version {0}, expected 1")]
    BadBaseVersion(u8),
    /// MgmtClass is not 0x07 (`IB_MGMT_CLASS_CM`, cm-spec §1.4).
    #[error("MAD management class {0:#04x}, expected 0x07 (CM)")]
    BadMgmtClass(u8),
    /// ClassVersion is not 2 (`IB_CM_CLASS_VERSION`, cm-spec §1.4).
    #[error("CM class version {0}, expected 2")]
    BadClassVersion(u8),
    /// Method is not 0x03 Send; every CM message is a Send (cm-spec §1.4).
    #[error("MAD method {0:#04x}, expected 0x03 (Send)")]
    BadMethod(u8),
    /// The AttributeID is not one this codec decodes (cm-spec §2.1). LAP, APR and
    /// ClassPortInfo land here: Linux drops LAP/APR on RoCE ports (cm-spec §2.7).
    #[error("unknown or unsupported CM attribute ID {0:#06x}")]
    UnknownAttributeId(u16),
    /// Private data longer than the message's capacity (cm-spec §2.1 capacities; for the
    /// IP-CM helpers, capacity minus the 36-byte header, cm-spec §2.10). Linux's
    /// `ib_send_cm_*` return -EINVAL for this.
    #[error("private data of {len} bytes exceeds the {max}-byte capacity of attribute {attribute_id:#06x}")]
    PrivateDataTooLong {
        /// AttributeID of the message (cm-spec §2.1).
        attribute_id: u16,
        /// Offered length, in bytes.
        len: usize,
        /// Capacity, in bytes.
        max: usize,
    },
    /// REJ ARI or SIDR_REP additional information longer than its 72-byte field, on encode,
    /// or a length field on the wire that claims more (cm-spec §2.5, §2.6).
    #[error("additional information of {len} bytes exceeds {max} bytes in attribute {attribute_id:#06x}")]
    InfoTooLong {
        /// AttributeID of the message.
        attribute_id: u16,
        /// Offered or claimed length, in bytes.
        len: usize,
        /// Size of the field, in bytes (72).
        max: usize,
    },
    /// MRA "Message MRAed" or REJ "Message Rejected" holds the reserved value 3 (cm-spec §2.5).
    #[error("reserved message-response value {0} in MRA/REJ")]
    BadMsgResponse(u8),
    /// IP-CM private data shorter than the 36-byte header (cm-spec §2.10).
    #[error("IP-CM private data of {len} bytes is shorter than the 36-byte header")]
    IpCmTooShort {
        /// Length offered, in bytes.
        len: usize,
    },
    /// IP-CM header version byte is not 0 (`CMA_VERSION`); Linux `cma_save_ip_info` fails
    /// with -EINVAL (cm-spec §2.10).
    #[error("IP-CM header version {0:#04x}, expected 0")]
    BadCmaVersion(u8),
    /// IP-CM header IP version (high nibble of byte 1) is neither 4 nor 6; Linux fails with
    /// -EAFNOSUPPORT (cm-spec §2.10).
    #[error("IP-CM header IP version {0}, expected 4 or 6")]
    BadIpVersion(u8),
}

impl WireError {
    /// The errno Linux reports for the same condition.
    ///
    /// All cases are `EINVAL` except [`WireError::BadIpVersion`], where Linux returns
    /// `EAFNOSUPPORT` (97) [cma.c `cma_save_ip_info`].
    pub fn errno(&self) -> Errno {
        match self {
            WireError::BadIpVersion(_) => Errno::EAFNOSUPPORT,
            _ => Errno::EINVAL,
        }
    }
}
