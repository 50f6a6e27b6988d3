//! The CM messages (IBTA vol. 1 ch. 12 tables 106–120) as Rust structs, and their layouts.
//!
//! Every offset below is a *msg offset* (from the first byte after the MAD header), exactly as
//! cm-spec §2.2–§2.6 and Linux `ibta_vol1_c12.h` \[c12\] give it. Fields narrower than their
//! Rust type are masked to their width on encode (as Linux's `IBA_SET` does); reserved bits are
//! written as zero and ignored on decode.

use verbs_core::Gid;

use super::field::{
    bits_at, bytes, flag_at, flow_label_at, put_bits, put_bytes, put_flag, put_flow_label,
    put_slice, put_u16, put_u24, put_u32, put_u64, put_u8, u16_at, u24_at, u32_at, u64_at, u8_at,
    vec_at,
};
use super::{CmMsgResponse, WireError};

/// AttributeID of REQ (cm-spec §2.1).
pub const CM_REQ_ATTR_ID: u16 = 0x0010;
/// AttributeID of MRA.
pub const CM_MRA_ATTR_ID: u16 = 0x0011;
/// AttributeID of REJ.
pub const CM_REJ_ATTR_ID: u16 = 0x0012;
/// AttributeID of REP.
pub const CM_REP_ATTR_ID: u16 = 0x0013;
/// AttributeID of RTU.
pub const CM_RTU_ATTR_ID: u16 = 0x0014;
/// AttributeID of DREQ.
pub const CM_DREQ_ATTR_ID: u16 = 0x0015;
/// AttributeID of DREP.
pub const CM_DREP_ATTR_ID: u16 = 0x0016;
/// AttributeID of SIDR_REQ.
pub const CM_SIDR_REQ_ATTR_ID: u16 = 0x0017;
/// AttributeID of SIDR_REP.
pub const CM_SIDR_REP_ATTR_ID: u16 = 0x0018;
/// AttributeID of LAP (not decoded by this codec).
pub const CM_LAP_ATTR_ID: u16 = 0x0019;
/// AttributeID of APR (not decoded by this codec).
pub const CM_APR_ATTR_ID: u16 = 0x001A;

/// REQ private-data capacity, bytes (`IB_CM_REQ_PRIVATE_DATA_SIZE`, cm-spec §2.1).
pub const IB_CM_REQ_PRIVATE_DATA_SIZE: usize = 92;
/// MRA private-data capacity, bytes.
pub const IB_CM_MRA_PRIVATE_DATA_SIZE: usize = 222;
/// REJ private-data capacity, bytes.
pub const IB_CM_REJ_PRIVATE_DATA_SIZE: usize = 148;
/// REP private-data capacity, bytes.
pub const IB_CM_REP_PRIVATE_DATA_SIZE: usize = 196;
/// RTU private-data capacity, bytes.
pub const IB_CM_RTU_PRIVATE_DATA_SIZE: usize = 224;
/// DREQ private-data capacity, bytes.
pub const IB_CM_DREQ_PRIVATE_DATA_SIZE: usize = 220;
/// DREP private-data capacity, bytes.
pub const IB_CM_DREP_PRIVATE_DATA_SIZE: usize = 224;
/// SIDR_REQ private-data capacity, bytes.
pub const IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE: usize = 216;
/// SIDR_REP private-data capacity, bytes.
pub const IB_CM_SIDR_REP_PRIVATE_DATA_SIZE: usize = 136;
/// REJ ARI field size, bytes (`IB_CM_REJ_ARI_LENGTH`).
pub const IB_CM_REJ_ARI_LENGTH: usize = 72;
/// SIDR_REP additional-information field size, bytes (`IB_CM_SIDR_REP_INFO_LENGTH`).
pub const IB_CM_SIDR_REP_INFO_LENGTH: usize = 72;

fn put_private_data(
    d: &mut [u8],
    off: usize,
    max: usize,
    pd: &[u8],
    attribute_id: u16,
) -> Result<(), WireError> {
    if pd.len() > max {
        return Err(WireError::PrivateDataTooLong {
            attribute_id,
            len: pd.len(),
            max,
        });
    }
    put_slice(d, off, pd);
    Ok(())
}

fn check_info_len(len: usize, max: usize, attribute_id: u16) -> Result<(), WireError> {
    if len > max {
        return Err(WireError::InfoTooLong {
            attribute_id,
            len,
            max,
        });
    }
    Ok(())
}

fn msg_response(v: u8) -> Result<CmMsgResponse, WireError> {
    CmMsgResponse::try_from(v).map_err(WireError::BadMsgResponse)
}

fn gid_at(d: &[u8], off: usize) -> Gid {
    Gid(bytes(d, off))
}

/// One path of a REQ (primary at msg offset 52, alternate at 96; 44 bytes each; cm-spec §2.2).
///
/// Relative offsets: local LID +0, remote LID +2, local GID +4, remote GID +20, flow label top
/// 20 bits of dword +36, packet rate +39 bits 5..0, traffic class +40, hop limit +41, SL +42
/// bits 7..4, subnet local +42 bit 3, local ACK timeout +43 bits 7..3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReqPath {
    /// Local port LID (0xFFFF permissive when the path leaves the subnet).
    pub local_port_lid: u16,
    /// Remote port LID.
    pub remote_port_lid: u16,
    /// Local port GID (path SGID; IPv4-mapped on RoCEv2/IPv4).
    pub local_port_gid: Gid,
    /// Remote port GID (path DGID).
    pub remote_port_gid: Gid,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Packet rate (IB rate enum), 6 bits.
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level, 4 bits.
    pub sl: u8,
    /// Subnet local: set when the path stays in the subnet (hop limit ≤ 1).
    pub subnet_local: bool,
    /// Local ACK timeout exponent (4.096 µs × 2^n), 5 bits.
    pub local_ack_timeout: u8,
}

impl ReqPath {
    fn encode_into(&self, d: &mut [u8], p: usize) {
        put_u16(d, p, self.local_port_lid);
        put_u16(d, p + 2, self.remote_port_lid);
        put_bytes(d, p + 4, self.local_port_gid.0);
        put_bytes(d, p + 20, self.remote_port_gid.0);
        put_flow_label(d, p + 36, self.flow_label);
        put_bits(d, p + 39, 2, 6, self.packet_rate);
        put_u8(d, p + 40, self.traffic_class);
        put_u8(d, p + 41, self.hop_limit);
        put_bits(d, p + 42, 0, 4, self.sl);
        put_flag(d, p + 42, 4, self.subnet_local);
        put_bits(d, p + 43, 0, 5, self.local_ack_timeout);
    }

    fn decode_from(d: &[u8], p: usize) -> Self {
        ReqPath {
            local_port_lid: u16_at(d, p),
            remote_port_lid: u16_at(d, p + 2),
            local_port_gid: gid_at(d, p + 4),
            remote_port_gid: gid_at(d, p + 20),
            flow_label: flow_label_at(d, p + 36),
            packet_rate: bits_at(d, p + 39, 2, 6),
            traffic_class: u8_at(d, p + 40),
            hop_limit: u8_at(d, p + 41),
            sl: bits_at(d, p + 42, 0, 4),
            subnet_local: flag_at(d, p + 42, 4),
            local_ack_timeout: bits_at(d, p + 43, 0, 5),
        }
    }
}

/// REQ, connection request (AttributeID 0x0010; cm-spec §2.2, IBTA table 106).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Req {
    /// Local Communication ID (msg 0–3).
    pub local_comm_id: u32,
    /// ECE vendor ID, 24 bits (msg 5–7; newer kernels only).
    pub vendor_id: u32,
    /// Service ID (msg 8–15); see [`ip_service_id`](super::ip_service_id).
    pub service_id: u64,
    /// Local CA GUID (msg 16–23).
    pub local_ca_guid: u64,
    /// Local Q_Key (msg 28–31; unused for RC).
    pub local_q_key: u32,
    /// Local QPN, 24 bits (msg 32–34).
    pub local_qpn: u32,
    /// Responder resources (msg 35).
    pub responder_resources: u8,
    /// Local EECN, 24 bits (msg 36–38; RD only).
    pub local_eecn: u32,
    /// Initiator depth (msg 39).
    pub initiator_depth: u8,
    /// Remote EECN, 24 bits (msg 40–42).
    pub remote_eecn: u32,
    /// Remote CM response timeout exponent, 5 bits (msg 43 bits 7..3).
    pub remote_cm_response_timeout: u8,
    /// Transport service type, 2 bits (msg 43 bits 2..1): 0 RC, 1 UC, 3 extended.
    pub transport_service_type: u8,
    /// End-to-end flow control (msg 43 bit 0).
    pub end_to_end_flow_control: bool,
    /// Starting PSN, 24 bits (msg 44–46); how each side uses it: cm-spec §2.2 notes.
    pub starting_psn: u32,
    /// Local CM response timeout exponent, 5 bits (msg 47 bits 7..3).
    pub local_cm_response_timeout: u8,
    /// Retry count, 3 bits (msg 47 bits 2..0).
    pub retry_count: u8,
    /// Partition key (msg 48–49).
    pub partition_key: u16,
    /// Path packet payload MTU (IB enum 1=256 … 5=4096), 4 bits (msg 50 bits 7..4).
    pub path_packet_payload_mtu: u8,
    /// RDC exists (msg 50 bit 3).
    pub rdc_exists: bool,
    /// RNR retry count, 3 bits (msg 50 bits 2..0; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Max CM retries, 4 bits (msg 51 bits 7..4).
    pub max_cm_retries: u8,
    /// SRQ (msg 51 bit 3).
    pub srq: bool,
    /// Extended transport type, 3 bits (msg 51 bits 2..0; 1 = XRC).
    pub extended_transport_type: u8,
    /// Primary path (msg 52–95).
    pub primary_path: ReqPath,
    /// Alternate path (msg 96–139); all zero when there is none.
    pub alternate_path: ReqPath,
    /// SAP supported (msg 139 bit 2).
    pub sap_supported: bool,
    /// Private data (msg 140–231), at most 92 bytes; decoded as the full 92 bytes.
    pub private_data: Vec<u8>,
}

impl Req {
    fn encode_into(&self, d: &mut [u8]) -> Result<(), WireError> {
        put_u32(d, 0, self.local_comm_id);
        put_u24(d, 5, self.vendor_id);
        put_u64(d, 8, self.service_id);
        put_u64(d, 16, self.local_ca_guid);
        put_u32(d, 28, self.local_q_key);
        put_u24(d, 32, self.local_qpn);
        put_u8(d, 35, self.responder_resources);
        put_u24(d, 36, self.local_eecn);
        put_u8(d, 39, self.initiator_depth);
        put_u24(d, 40, self.remote_eecn);
        put_bits(d, 43, 0, 5, self.remote_cm_response_timeout);
        put_bits(d, 43, 5, 2, self.transport_service_type);
        put_flag(d, 43, 7, self.end_to_end_flow_control);
        put_u24(d, 44, self.starting_psn);
        put_bits(d, 47, 0, 5, self.local_cm_response_timeout);
        put_bits(d, 47, 5, 3, self.retry_count);
        put_u16(d, 48, self.partition_key);
        put_bits(d, 50, 0, 4, self.path_packet_payload_mtu);
        put_flag(d, 50, 4, self.rdc_exists);
        put_bits(d, 50, 5, 3, self.rnr_retry_count);
        put_bits(d, 51, 0, 4, self.max_cm_retries);
        put_flag(d, 51, 4, self.srq);
        put_bits(d, 51, 5, 3, self.extended_transport_type);
        self.primary_path.encode_into(d, 52);
        self.alternate_path.encode_into(d, 96);
        put_flag(d, 139, 5, self.sap_supported);
        put_private_data(
            d,
            140,
            IB_CM_REQ_PRIVATE_DATA_SIZE,
            &self.private_data,
            CM_REQ_ATTR_ID,
        )
    }

    fn decode_from(d: &[u8]) -> Self {
        Req {
            local_comm_id: u32_at(d, 0),
            vendor_id: u24_at(d, 5),
            service_id: u64_at(d, 8),
            local_ca_guid: u64_at(d, 16),
            local_q_key: u32_at(d, 28),
            local_qpn: u24_at(d, 32),
            responder_resources: u8_at(d, 35),
            local_eecn: u24_at(d, 36),
            initiator_depth: u8_at(d, 39),
            remote_eecn: u24_at(d, 40),
            remote_cm_response_timeout: bits_at(d, 43, 0, 5),
            transport_service_type: bits_at(d, 43, 5, 2),
            end_to_end_flow_control: flag_at(d, 43, 7),
            starting_psn: u24_at(d, 44),
            local_cm_response_timeout: bits_at(d, 47, 0, 5),
            retry_count: bits_at(d, 47, 5, 3),
            partition_key: u16_at(d, 48),
            path_packet_payload_mtu: bits_at(d, 50, 0, 4),
            rdc_exists: flag_at(d, 50, 4),
            rnr_retry_count: bits_at(d, 50, 5, 3),
            max_cm_retries: bits_at(d, 51, 0, 4),
            srq: flag_at(d, 51, 4),
            extended_transport_type: bits_at(d, 51, 5, 3),
            primary_path: ReqPath::decode_from(d, 52),
            alternate_path: ReqPath::decode_from(d, 96),
            sap_supported: flag_at(d, 139, 5),
            private_data: vec_at(d, 140, IB_CM_REQ_PRIVATE_DATA_SIZE),
        }
    }
}

/// MRA, message receipt acknowledgement (AttributeID 0x0011; cm-spec §2.5, table 107).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mra {
    /// Local Communication ID (msg 0–3).
    pub local_comm_id: u32,
    /// Remote Communication ID (msg 4–7).
    pub remote_comm_id: u32,
    /// Which message is acknowledged (msg 8 bits 7..6).
    pub message_mraed: CmMsgResponse,
    /// Service timeout exponent, 5 bits (msg 9 bits 7..3).
    pub service_timeout: u8,
    /// Private data (msg 10–231), at most 222 bytes; decoded as the full 222 bytes.
    pub private_data: Vec<u8>,
}

impl Mra {
    fn encode_into(&self, d: &mut [u8]) -> Result<(), WireError> {
        put_u32(d, 0, self.local_comm_id);
        put_u32(d, 4, self.remote_comm_id);
        put_bits(d, 8, 0, 2, self.message_mraed as u8);
        put_bits(d, 9, 0, 5, self.service_timeout);
        put_private_data(
            d,
            10,
            IB_CM_MRA_PRIVATE_DATA_SIZE,
            &self.private_data,
            CM_MRA_ATTR_ID,
        )
    }

    fn decode_from(d: &[u8]) -> Result<Self, WireError> {
        Ok(Mra {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            message_mraed: msg_response(bits_at(d, 8, 0, 2))?,
            service_timeout: bits_at(d, 9, 0, 5),
            private_data: vec_at(d, 10, IB_CM_MRA_PRIVATE_DATA_SIZE),
        })
    }
}

/// REJ, reject (AttributeID 0x0012; cm-spec §2.5, table 108).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rej {
    /// Local Communication ID (msg 0–3); 0 when rejecting from REQ_RCVD.
    pub local_comm_id: u32,
    /// Remote Communication ID (msg 4–7).
    pub remote_comm_id: u32,
    /// Which message is rejected (msg 8 bits 7..6).
    pub message_rejected: CmMsgResponse,
    /// Reason code (msg 10–11), raw; see [`RejectReason`](super::RejectReason).
    pub reason: u16,
    /// Additional reject information (msg 12–83), at most 72 bytes; its length goes in the
    /// 7-bit "Reject Info Length" (msg 9 bits 7..1).
    pub ari: Vec<u8>,
    /// Private data (msg 84–231), at most 148 bytes; decoded as the full 148 bytes.
    pub private_data: Vec<u8>,
}

impl Rej {
    fn encode_into(&self, d: &mut [u8]) -> Result<(), WireError> {
        check_info_len(self.ari.len(), IB_CM_REJ_ARI_LENGTH, CM_REJ_ATTR_ID)?;
        put_u32(d, 0, self.local_comm_id);
        put_u32(d, 4, self.remote_comm_id);
        put_bits(d, 8, 0, 2, self.message_rejected as u8);
        // ≤ 72 checked above, so it fits the 7-bit field.
        put_bits(d, 9, 0, 7, u8::try_from(self.ari.len()).unwrap_or(0));
        put_u16(d, 10, self.reason);
        put_slice(d, 12, &self.ari);
        put_private_data(
            d,
            84,
            IB_CM_REJ_PRIVATE_DATA_SIZE,
            &self.private_data,
            CM_REJ_ATTR_ID,
        )
    }

    fn decode_from(d: &[u8]) -> Result<Self, WireError> {
        let ari_len = usize::from(bits_at(d, 9, 0, 7));
        check_info_len(ari_len, IB_CM_REJ_ARI_LENGTH, CM_REJ_ATTR_ID)?;
        Ok(Rej {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            message_rejected: msg_response(bits_at(d, 8, 0, 2))?,
            reason: u16_at(d, 10),
            ari: vec_at(d, 12, ari_len),
            private_data: vec_at(d, 84, IB_CM_REJ_PRIVATE_DATA_SIZE),
        })
    }
}

/// REP, reply to a REQ (AttributeID 0x0013; cm-spec §2.3, table 110).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rep {
    /// Local Communication ID (msg 0–3).
    pub local_comm_id: u32,
    /// Remote Communication ID (msg 4–7) = the REQ's local Comm ID.
    pub remote_comm_id: u32,
    /// Local Q_Key (msg 8–11).
    pub local_q_key: u32,
    /// Local QPN, 24 bits (msg 12–14).
    pub local_qpn: u32,
    /// Local EE context number, 24 bits (msg 16–18; XRC: the target QPN).
    pub local_eecn: u32,
    /// Starting PSN, 24 bits (msg 20–22).
    pub starting_psn: u32,
    /// ECE vendor ID, 24 bits: high byte at msg 15, middle at 19, low at 23.
    pub vendor_id: u32,
    /// Responder resources (msg 24).
    pub responder_resources: u8,
    /// Initiator depth (msg 25).
    pub initiator_depth: u8,
    /// Target ACK delay exponent, 5 bits (msg 26 bits 7..3).
    pub target_ack_delay: u8,
    /// Failover accepted, 2 bits (msg 26 bits 2..1).
    pub failover_accepted: u8,
    /// End-to-end flow control (msg 26 bit 0).
    pub end_to_end_flow_control: bool,
    /// RNR retry count, 3 bits (msg 27 bits 7..5).
    pub rnr_retry_count: u8,
    /// SRQ (msg 27 bit 4).
    pub srq: bool,
    /// Local CA GUID (msg 28–35).
    pub local_ca_guid: u64,
    /// Private data (msg 36–231), at most 196 bytes; decoded as the full 196 bytes.
    pub private_data: Vec<u8>,
}

impl Rep {
    fn encode_into(&self, d: &mut [u8]) -> Result<(), WireError> {
        let [_, vendor_h, vendor_m, vendor_l] = self.vendor_id.to_be_bytes();
        put_u32(d, 0, self.local_comm_id);
        put_u32(d, 4, self.remote_comm_id);
        put_u32(d, 8, self.local_q_key);
        put_u24(d, 12, self.local_qpn);
        put_u8(d, 15, vendor_h);
        put_u24(d, 16, self.local_eecn);
        put_u8(d, 19, vendor_m);
        put_u24(d, 20, self.starting_psn);
        put_u8(d, 23, vendor_l);
        put_u8(d, 24, self.responder_resources);
        put_u8(d, 25, self.initiator_depth);
        put_bits(d, 26, 0, 5, self.target_ack_delay);
        put_bits(d, 26, 5, 2, self.failover_accepted);
        put_flag(d, 26, 7, self.end_to_end_flow_control);
        put_bits(d, 27, 0, 3, self.rnr_retry_count);
        put_flag(d, 27, 3, self.srq);
        put_u64(d, 28, self.local_ca_guid);
        put_private_data(
            d,
            36,
            IB_CM_REP_PRIVATE_DATA_SIZE,
            &self.private_data,
            CM_REP_ATTR_ID,
        )
    }

    fn decode_from(d: &[u8]) -> Self {
        Rep {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            local_q_key: u32_at(d, 8),
            local_qpn: u24_at(d, 12),
            local_eecn: u24_at(d, 16),
            starting_psn: u24_at(d, 20),
            vendor_id: u32::from_be_bytes([0, u8_at(d, 15), u8_at(d, 19), u8_at(d, 23)]),
            responder_resources: u8_at(d, 24),
            initiator_depth: u8_at(d, 25),
            target_ack_delay: bits_at(d, 26, 0, 5),
            failover_accepted: bits_at(d, 26, 5, 2),
            end_to_end_flow_control: flag_at(d, 26, 7),
            rnr_retry_count: bits_at(d, 27, 0, 3),
            srq: flag_at(d, 27, 3),
            local_ca_guid: u64_at(d, 28),
            private_data: vec_at(d, 36, IB_CM_REP_PRIVATE_DATA_SIZE),
        }
    }
}

/// RTU, ready to use (AttributeID 0x0014; cm-spec §2.4, table 111).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rtu {
    /// Local Communication ID (msg 0–3).
    pub local_comm_id: u32,
    /// Remote Communication ID (msg 4–7).
    pub remote_comm_id: u32,
    /// Private data (msg 8–231), at most 224 bytes; decoded as the full 224 bytes.
    pub private_data: Vec<u8>,
}

/// DREQ, disconnect request (AttributeID 0x0015; cm-spec §2.4, table 112).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dreq {
    /// Local Communication ID (msg 0–3).
    pub local_comm_id: u32,
    /// Remote Communication ID (msg 4–7).
    pub remote_comm_id: u32,
    /// Remote QPN/EECN, 24 bits (msg 8–10): the receiver's QPN; a mismatch makes the receiver
    /// drop the DREQ [cm.c `cm_dreq_handler`].
    pub remote_qpn_eecn: u32,
    /// Private data (msg 12–231), at most 220 bytes; decoded as the full 220 bytes.
    pub private_data: Vec<u8>,
}

/// DREP, disconnect reply (AttributeID 0x0016; cm-spec §2.4, table 113).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Drep {
    /// Local Communication ID (msg 0–3).
    pub local_comm_id: u32,
    /// Remote Communication ID (msg 4–7).
    pub remote_comm_id: u32,
    /// Private data (msg 8–231), at most 224 bytes; decoded as the full 224 bytes.
    pub private_data: Vec<u8>,
}

/// Encodes the "two Comm IDs then private data" shape shared by RTU and DREP.
fn encode_ids_pd(
    d: &mut [u8],
    local: u32,
    remote: u32,
    pd: &[u8],
    max: usize,
    attribute_id: u16,
) -> Result<(), WireError> {
    put_u32(d, 0, local);
    put_u32(d, 4, remote);
    put_private_data(d, 8, max, pd, attribute_id)
}

impl Dreq {
    fn encode_into(&self, d: &mut [u8]) -> Result<(), WireError> {
        put_u32(d, 0, self.local_comm_id);
        put_u32(d, 4, self.remote_comm_id);
        put_u24(d, 8, self.remote_qpn_eecn);
        put_private_data(
            d,
            12,
            IB_CM_DREQ_PRIVATE_DATA_SIZE,
            &self.private_data,
            CM_DREQ_ATTR_ID,
        )
    }

    fn decode_from(d: &[u8]) -> Self {
        Dreq {
            local_comm_id: u32_at(d, 0),
            remote_comm_id: u32_at(d, 4),
            remote_qpn_eecn: u24_at(d, 8),
            private_data: vec_at(d, 12, IB_CM_DREQ_PRIVATE_DATA_SIZE),
        }
    }
}

/// SIDR_REQ, service ID resolution request (AttributeID 0x0017; cm-spec §2.6, table 119).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SidrReq {
    /// Request ID (msg 0–3).
    pub request_id: u32,
    /// Partition key (msg 4–5).
    pub partition_key: u16,
    /// Service ID (msg 8–15).
    pub service_id: u64,
    /// Private data (msg 16–231), at most 216 bytes; decoded as the full 216 bytes.
    pub private_data: Vec<u8>,
}

impl SidrReq {
    fn encode_into(&self, d: &mut [u8]) -> Result<(), WireError> {
        put_u32(d, 0, self.request_id);
        put_u16(d, 4, self.partition_key);
        put_u64(d, 8, self.service_id);
        put_private_data(
            d,
            16,
            IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE,
            &self.private_data,
            CM_SIDR_REQ_ATTR_ID,
        )
    }

    fn decode_from(d: &[u8]) -> Self {
        SidrReq {
            request_id: u32_at(d, 0),
            partition_key: u16_at(d, 4),
            service_id: u64_at(d, 8),
            private_data: vec_at(d, 16, IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE),
        }
    }
}

/// SIDR_REP, service ID resolution reply (AttributeID 0x0018; cm-spec §2.6, table 120).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SidrRep {
    /// Request ID (msg 0–3), copied from the SIDR_REQ.
    pub request_id: u32,
    /// Status (msg 4): 0 success, 1 unsupported, 2 reject, 3 no QP, 4 redirect,
    /// 5 unsupported version (`enum ib_cm_sidr_status`).
    pub status: u8,
    /// ECE vendor ID, 24 bits: high 16 bits at msg 6–7, low byte at msg 11.
    pub vendor_id: u32,
    /// QPN, 24 bits (msg 8–10).
    pub qpn: u32,
    /// Service ID (msg 12–19).
    pub service_id: u64,
    /// Q_Key (msg 20–23).
    pub q_key: u32,
    /// Additional information (msg 24–95), at most 72 bytes; its length goes in msg 5.
    pub additional_information: Vec<u8>,
    /// Private data (msg 96–231), at most 136 bytes; decoded as the full 136 bytes.
    pub private_data: Vec<u8>,
}

impl SidrRep {
    fn encode_into(&self, d: &mut [u8]) -> Result<(), WireError> {
        let info_len = self.additional_information.len();
        check_info_len(info_len, IB_CM_SIDR_REP_INFO_LENGTH, CM_SIDR_REP_ATTR_ID)?;
        let [_, vendor_h, vendor_m, vendor_l] = self.vendor_id.to_be_bytes();
        put_u32(d, 0, self.request_id);
        put_u8(d, 4, self.status);
        put_u8(d, 5, u8::try_from(info_len).unwrap_or(0));
        put_bytes(d, 6, [vendor_h, vendor_m]);
        put_u24(d, 8, self.qpn);
        put_u8(d, 11, vendor_l);
        put_u64(d, 12, self.service_id);
        put_u32(d, 20, self.q_key);
        put_slice(d, 24, &self.additional_information);
        put_private_data(
            d,
            96,
            IB_CM_SIDR_REP_PRIVATE_DATA_SIZE,
            &self.private_data,
            CM_SIDR_REP_ATTR_ID,
        )
    }

    fn decode_from(d: &[u8]) -> Result<Self, WireError> {
        let info_len = usize::from(u8_at(d, 5));
        check_info_len(info_len, IB_CM_SIDR_REP_INFO_LENGTH, CM_SIDR_REP_ATTR_ID)?;
        let [vendor_h, vendor_m] = bytes::<2>(d, 6);
        Ok(SidrRep {
            request_id: u32_at(d, 0),
            status: u8_at(d, 4),
            vendor_id: u32::from_be_bytes([0, vendor_h, vendor_m, u8_at(d, 11)]),
            qpn: u24_at(d, 8),
            service_id: u64_at(d, 12),
            q_key: u32_at(d, 20),
            additional_information: vec_at(d, 24, info_len),
            private_data: vec_at(d, 96, IB_CM_SIDR_REP_PRIVATE_DATA_SIZE),
        })
    }
}

/// A decoded CM message, one variant per AttributeID this codec understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    /// REQ (0x0010).
    Req(Req),
    /// MRA (0x0011).
    Mra(Mra),
    /// REJ (0x0012).
    Rej(Rej),
    /// REP (0x0013).
    Rep(Rep),
    /// RTU (0x0014).
    Rtu(Rtu),
    /// DREQ (0x0015).
    Dreq(Dreq),
    /// DREP (0x0016).
    Drep(Drep),
    /// SIDR_REQ (0x0017).
    SidrReq(SidrReq),
    /// SIDR_REP (0x0018).
    SidrRep(SidrRep),
}

impl CmMessage {
    /// The AttributeID this message travels under (cm-spec §2.1).
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => CM_REQ_ATTR_ID,
            CmMessage::Mra(_) => CM_MRA_ATTR_ID,
            CmMessage::Rej(_) => CM_REJ_ATTR_ID,
            CmMessage::Rep(_) => CM_REP_ATTR_ID,
            CmMessage::Rtu(_) => CM_RTU_ATTR_ID,
            CmMessage::Dreq(_) => CM_DREQ_ATTR_ID,
            CmMessage::Drep(_) => CM_DREP_ATTR_ID,
            CmMessage::SidrReq(_) => CM_SIDR_REQ_ATTR_ID,
            CmMessage::SidrRep(_) => CM_SIDR_REP_ATTR_ID,
        }
    }

    /// Writes the message into the 232-byte CM data area `d`.
    pub(crate) fn encode_data(&self, d: &mut [u8]) -> Result<(), WireError> {
        match self {
            CmMessage::Req(m) => m.encode_into(d),
            CmMessage::Mra(m) => m.encode_into(d),
            CmMessage::Rej(m) => m.encode_into(d),
            CmMessage::Rep(m) => m.encode_into(d),
            CmMessage::Rtu(m) => encode_ids_pd(
                d,
                m.local_comm_id,
                m.remote_comm_id,
                &m.private_data,
                IB_CM_RTU_PRIVATE_DATA_SIZE,
                CM_RTU_ATTR_ID,
            ),
            CmMessage::Dreq(m) => m.encode_into(d),
            CmMessage::Drep(m) => encode_ids_pd(
                d,
                m.local_comm_id,
                m.remote_comm_id,
                &m.private_data,
                IB_CM_DREP_PRIVATE_DATA_SIZE,
                CM_DREP_ATTR_ID,
            ),
            CmMessage::SidrReq(m) => m.encode_into(d),
            CmMessage::SidrRep(m) => m.encode_into(d),
        }
    }

    /// Reads the message with AttributeID `attribute_id` from the 232-byte data area `d`.
    pub(crate) fn decode_data(attribute_id: u16, d: &[u8]) -> Result<Self, WireError> {
        Ok(match attribute_id {
            CM_REQ_ATTR_ID => CmMessage::Req(Req::decode_from(d)),
            CM_MRA_ATTR_ID => CmMessage::Mra(Mra::decode_from(d)?),
            CM_REJ_ATTR_ID => CmMessage::Rej(Rej::decode_from(d)?),
            CM_REP_ATTR_ID => CmMessage::Rep(Rep::decode_from(d)),
            CM_RTU_ATTR_ID => CmMessage::Rtu(Rtu {
                local_comm_id: u32_at(d, 0),
                remote_comm_id: u32_at(d, 4),
                private_data: vec_at(d, 8, IB_CM_RTU_PRIVATE_DATA_SIZE),
            }),
            CM_DREQ_ATTR_ID => CmMessage::Dreq(Dreq::decode_from(d)),
            CM_DREP_ATTR_ID => CmMessage::Drep(Drep {
                local_comm_id: u32_at(d, 0),
                remote_comm_id: u32_at(d, 4),
                private_data: vec_at(d, 8, IB_CM_DREP_PRIVATE_DATA_SIZE),
            }),
            CM_SIDR_REQ_ATTR_ID => CmMessage::SidrReq(SidrReq::decode_from(d)),
            CM_SIDR_REP_ATTR_ID => CmMessage::SidrRep(SidrRep::decode_from(d)?),
            other => return Err(WireError::UnknownAttributeId(other)),
        })
    }
}

macro_rules! impl_from_msg {
    ($($t:ident),*) => {$(
        impl From<$t> for CmMessage {
            fn from(m: $t) -> Self {
                CmMessage::$t(m)
            }
        }
    )*};
}
impl_from_msg!(Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep);
