//! What the device queues for the wire: a packet and its destination ([`Transmit`]), and the
//! same with its payload still in registered memory ([`Outgoing`]).

use crate::gather::Gather;
use crate::roce::codec::pad_cnt_for;
use crate::roce::Packet;
use bytes::Bytes;
use verbs_core::Gid;

/// A packet the device wants on the wire: the RoCEv2 transport packet and the GID of the node
/// it is for. The source GID is the device's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Destination GID (the peer's IPv4-mapped address on RoCEv2).
    pub dst: Gid,
    /// The packet.
    pub packet: Packet,
}

/// A packet queued for the wire, with its payload still in registered memory when `gather` is
/// set (then `transmit.packet.payload` is empty until it is read).
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// The packet and its destination.
    pub transmit: Transmit,
    /// Where its payload is, if not in the packet.
    pub gather: Option<Gather>,
}

impl From<Transmit> for Outgoing {
    fn from(transmit: Transmit) -> Self {
        Outgoing {
            transmit,
            gather: None,
        }
    }
}

/// Puts `payload` into `t`'s packet (and the pad count that goes with it).
pub(crate) fn fill(t: &mut Transmit, payload: Bytes) {
    t.packet.bth.pad_cnt = pad_cnt_for(payload.len());
    t.packet.payload = payload;
}
