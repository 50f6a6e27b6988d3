//! The device's QP1 calls: GSI datagrams sent and received for the connection manager
//! ([`crate::gsi`] holds QP1's state and wire rules).

use super::{SimDevice, Transmit};
use crate::gsi::{gsi_packet, GsiDatagram, GSI_QPN, MAD_SIZE};
use crate::psn::psn_add;
use bytes::Bytes;
use verbs_core::{Error, Gid, GsiEndpoint, Result};

impl SimDevice {
    /// Sends `payload` from QP1 to QP `dest_qp` (normally [`GSI_QPN`]) of the node `dst`, as a
    /// UD SEND ONLY with Q_Key [`GSI_QKEY`](crate::gsi::GSI_QKEY). Queued for [`SimDevice::poll_transmit`]; UD gives
    /// no delivery guarantee.
    ///
    /// # Errors
    /// `EINVAL` when the payload is larger than the port's active MTU; `EIO` once the device
    /// was removed.
    pub fn gsi_send(&mut self, dst: Gid, dest_qp: u32, payload: Bytes) -> Result<()> {
        self.alive()?;
        if payload.len() > self.config().active_mtu.bytes() as usize {
            return Err(Error::inval("GSI datagram larger than the active MTU"));
        }
        let psn = self.gsi_mut().psn;
        self.gsi_mut().psn = psn_add(psn, 1);
        let packet = gsi_packet(dest_qp, psn, payload);
        self.push_tx(Transmit { dst, packet });
        Ok(())
    }

    /// The oldest datagram received on QP1, if any.
    pub fn gsi_recv(&mut self) -> Option<GsiDatagram> {
        self.gsi_mut().rx.pop_front()
    }
}

/// The CM's view of QP1: MADs to and from the GSI QP of the peer, so `cm_core::api::RdmaCm`
/// drives the simulated RNIC unchanged. Delegates to the inherent [`SimDevice::gsi_send`]
/// (destination QP [`GSI_QPN`]) and [`SimDevice::gsi_recv`] (cm-spec §1.1–1.3).
impl GsiEndpoint for SimDevice {
    /// Sends `mad` from QP1 to QP1 of the node `dst` as a UD SEND ONLY with Q_Key
    /// [`GSI_QKEY`](crate::gsi::GSI_QKEY). Unreliable, as UD is.
    ///
    /// # Errors
    /// `EINVAL` when `mad` is not [`MAD_SIZE`] (256) bytes, or larger than the active MTU.
    fn gsi_send(&mut self, dst: Gid, mad: &[u8]) -> Result<()> {
        if mad.len() != MAD_SIZE {
            return Err(Error::inval(format!(
                "MAD is {} bytes, not {MAD_SIZE}",
                mad.len()
            )));
        }
        SimDevice::gsi_send(self, dst, GSI_QPN, Bytes::copy_from_slice(mad))
    }

    /// The oldest datagram received on QP1 as (sender GID, MAD bytes). The sender's QP is not
    /// checked: the CM validates the MAD itself.
    fn gsi_recv(&mut self) -> Option<verbs_core::GsiDatagram> {
        SimDevice::gsi_recv(self).map(|d| verbs_core::GsiDatagram {
            peer: d.src,
            mad: d.payload.to_vec(),
        })
    }
}
