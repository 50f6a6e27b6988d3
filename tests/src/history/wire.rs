//! A datagram as the history keeps it: a few fields read from the raw bytes.

use rnic_sim::GSI_QPN;

/// A datagram as the history keeps it: the CM attribute and key fields of a MAD, or attribute
/// 0 for any other (RC) packet — whose other fields are 0, except for a packet
/// [injected](crate::world::World::inject): destination QPN, PSN, opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WireMsg {
    /// CM attribute ID (REQ 0x10 … DREP 0x16, cm-spec §2.1); 0 for RC packets.
    pub attr: u16,
    /// Local Comm ID (bytes 0..4 of the CM message).
    pub local_comm_id: u32,
    /// Remote Comm ID (bytes 4..8; reserved 0 in a REQ).
    pub remote_comm_id: u32,
    /// The REJ reason (REJ bytes 10..12), 0 otherwise.
    pub reason: u16,
}

impl WireMsg {
    /// Reads a RoCEv2 UDP payload: BTH (12 bytes; dest QP in bytes 5..8) then, for QP1,
    /// DETH (8) and the MAD (header 24 bytes, attribute ID at 16..18), cm-spec §1.2–§1.4.
    pub fn parse(bytes: &[u8]) -> WireMsg {
        let be16 = |o: usize| {
            bytes
                .get(o..o + 2)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
        };
        let be32 = |o: usize| {
            bytes
                .get(o..o + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let dqp = be32(4) & 0x00ff_ffff;
        if dqp != GSI_QPN {
            return WireMsg::default();
        }
        const MAD: usize = 20;
        const DATA: usize = MAD + 24;
        let attr = be16(MAD + 16);
        WireMsg {
            attr,
            local_comm_id: be32(DATA),
            remote_comm_id: be32(DATA + 4),
            reason: if attr == cm_core::wire::CM_REJ_ATTR_ID {
                be16(DATA + 10)
            } else {
                0
            },
        }
    }

    /// The IBTA name of the attribute (`"RC"` for 0).
    pub fn name(&self) -> &'static str {
        attr_name(self.attr)
    }
}

/// The IBTA name of CM attribute `attr` (cm-spec §2.1), `"RC"` for 0.
pub fn attr_name(attr: u16) -> &'static str {
    // The CM's names (cm_core::wire::attribute_name), with RC packets and unknown MADs named
    // as the World's traces always did.
    match (attr, cm_core::wire::attribute_name(attr)) {
        (0, _) => "RC",
        (_, "unknown") => "MAD?",
        (_, name) => name,
    }
}
