//! The GSI endpoint ("QP1"): the datagram service the connection manager uses.
//!
//! Every device owns a GSI QP numbered 1 from its creation. It is not a verbs QP: no handle
//! reaches it through [`verbs_core::Device`] (as on Linux, where the kernel owns QP1), and it
//! needs no PD, MR or CQ. The CM (through the testbed) sends a MAD with
//! [`SimDevice::gsi_send`](crate::SimDevice::gsi_send) and takes received ones with [`SimDevice::gsi_recv`](crate::SimDevice::gsi_recv). On the wire a
//! GSI datagram is a RoCEv2 UD SEND ONLY (BTH opcode 0x64, P_Key 0xFFFF) with a DETH carrying
//! Q_Key 0x80010000 and source QP 1 (cm-spec §1.2, §1.3, §6 item 1).

use crate::roce::{Deth, Opcode, Packet};
use crate::shared::Counters;
use bytes::Bytes;
use std::collections::VecDeque;
use verbs_core::Gid;

/// The GSI QP number.
pub const GSI_QPN: u32 = 1;

/// The well-known Q_Key of QP1 (`IB_QP1_QKEY`, cm-spec §1.3).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Received GSI datagrams kept until [`SimDevice::gsi_recv`](crate::SimDevice::gsi_recv) takes them; more are dropped and
/// counted (`Counters::ud_no_recv`), as a full QP1 receive queue drops MADs.
pub const GSI_RECV_DEPTH: usize = 256;

/// A datagram received on QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GsiDatagram {
    /// The sender's GID.
    pub src: Gid,
    /// The sender's QP number from the DETH (1 for a peer's CM).
    pub src_qp: u32,
    /// The payload (a 256-byte MAD for the CM).
    pub payload: Bytes,
}

/// State of the device's QP1.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gsi {
    /// PSN of the next datagram sent (UD receivers do not check it).
    pub psn: u32,
    /// Received datagrams, oldest first.
    pub rx: VecDeque<GsiDatagram>,
}

/// Size of a MAD: every GSI datagram the CM sends is exactly this long (cm-spec §1.4).
pub const MAD_SIZE: usize = 256;

/// The packet QP1 sends to QP `dest_qp` (normally [`GSI_QPN`]): a UD SEND ONLY with PSN
/// `psn`, a DETH with Q_Key [`GSI_QKEY`] and source QP [`GSI_QPN`], and `payload` (cm-spec
/// §1.2, §1.3). What a hardware backend, whose QP1 the kernel owns, puts on its CM socket too.
pub fn gsi_packet(dest_qp: u32, psn: u32, payload: Bytes) -> Packet {
    let mut p = Packet::bare(Opcode::UdSendOnly, dest_qp, psn, payload);
    p.deth = Some(Deth {
        qkey: GSI_QKEY,
        src_qp: GSI_QPN,
    });
    p
}

/// Why a packet to QP1 was refused ([`gsi_payload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsiRefusal {
    /// Not a UD SEND ONLY.
    WrongQpType,
    /// No DETH.
    Malformed,
    /// A DETH whose Q_Key is not [`GSI_QKEY`].
    QkeyMismatch,
}

/// The datagram a packet addressed to QP1 carries: only a UD SEND with the GSI Q_Key is one.
///
/// # Errors
/// The [`GsiRefusal`] naming what is wrong.
pub fn gsi_payload(src: Gid, packet: Packet) -> std::result::Result<GsiDatagram, GsiRefusal> {
    if packet.bth.opcode != Opcode::UdSendOnly {
        return Err(GsiRefusal::WrongQpType);
    }
    let deth = packet.deth.ok_or(GsiRefusal::Malformed)?;
    if deth.qkey != GSI_QKEY {
        return Err(GsiRefusal::QkeyMismatch);
    }
    Ok(GsiDatagram {
        src,
        src_qp: deth.src_qp,
        payload: packet.payload,
    })
}

/// Handles a packet addressed to QP1: UD SEND with the GSI Q_Key only.
pub(crate) fn on_gsi_packet(gsi: &mut Gsi, counters: &mut Counters, src: Gid, packet: Packet) {
    let d = match gsi_payload(src, packet) {
        Ok(d) => d,
        Err(GsiRefusal::WrongQpType) => return counters.wrong_qp_type += 1,
        Err(GsiRefusal::Malformed) => return counters.malformed += 1,
        Err(GsiRefusal::QkeyMismatch) => return counters.qkey_mismatch += 1,
    };
    if gsi.rx.len() >= GSI_RECV_DEPTH {
        counters.ud_no_recv += 1;
        return;
    }
    gsi.rx.push_back(d);
}
