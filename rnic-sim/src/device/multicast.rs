//! The device's side of UD multicast (module [`crate::multicast`]): QPs attached to groups
//! (`ibv_attach_mcast`, `ibv_detach_mcast`), a multicast datagram received delivered to each
//! of them, and a multicast datagram sent delivered to them too (the sender's own loopback).

use super::*;
use crate::multicast::is_multicast_gid;

impl SimDevice {
    /// `ibv_attach_mcast` (Linux `ib_attach_mcast`, rxe `rxe_attach_mcast`).
    pub(super) fn mcast_attach(&mut self, qp: QpHandle, gid: Gid, _lid: u16) -> Result<()> {
        self.alive()?;
        let q = self.qps.get(&qp.0).ok_or_else(qp_handle_err)?;
        if !is_multicast_gid(gid) {
            return Err(Error::inval("not a multicast GID"));
        }
        if q.init.qp_type != QpType::Ud {
            return Err(Error::inval("only UD QPs join multicast groups"));
        }
        self.mcast.attach(gid, qp.0)?;
        tracing::debug!(qpn = qp.0, group = %gid.to_ip(), "QP attached to a multicast group");
        Ok(())
    }

    /// `ibv_detach_mcast` (Linux `ib_detach_mcast`, rxe `rxe_detach_mcast`).
    pub(super) fn mcast_detach(&mut self, qp: QpHandle, gid: Gid, _lid: u16) -> Result<()> {
        self.alive()?;
        let q = self.qps.get(&qp.0).ok_or_else(qp_handle_err)?;
        if !is_multicast_gid(gid) || q.init.qp_type != QpType::Ud {
            return Err(Error::inval("not a multicast GID, or not a UD QP"));
        }
        self.mcast.detach(gid, qp.0)?;
        tracing::debug!(qpn = qp.0, group = %gid.to_ip(), "QP detached from a multicast group");
        Ok(())
    }

    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` for QP `qp` (`ibv_create_qp_ex(3)`: "this QP won't
    /// receive its own multicast packets"): set at creation by the C library, which has the
    /// flag.
    ///
    /// # Errors
    /// `EINVAL` for an unknown QP.
    pub fn set_block_self_multicast(&mut self, qp: QpHandle, on: bool) -> Result<()> {
        self.qps.get(&qp.0).ok_or_else(qp_handle_err)?;
        if on {
            self.mcast.block_self.insert(qp.0);
        } else {
            self.mcast.block_self.remove(&qp.0);
        }
        Ok(())
    }

    /// The multicast groups at least one QP of the device is attached to, in GID order: the
    /// groups this RNIC belongs to.
    pub fn multicast_groups(&self) -> Vec<Gid> {
        self.mcast.groups().collect()
    }

    /// The groups this RNIC joined (true: a first QP attached) or left (false: the last one
    /// detached or destroyed) since the last call, for the fabric's
    /// [`GroupDirectory`](crate::multicast::GroupDirectory).
    pub fn take_multicast_changes(&mut self) -> Vec<(Gid, bool)> {
        self.mcast.take_changes()
    }

    /// A multicast datagram for group `mgid` from `src` (its destination QPN 0xFFFFFF): a copy
    /// goes to each QP attached to the group, as a UD datagram to that QP (Q_Key check,
    /// receive WQE, GRH). Counted in [`Counters::mcast_unattached`] when none is; a packet
    /// that is not a consistent UD SEND is dropped as [`SimDevice::handle_packet`] drops it.
    pub fn handle_multicast(&mut self, now: SimTime, src: Gid, mgid: Gid, packet: Packet) {
        let _ = now;
        if self.removed {
            return;
        }
        let c = &mut self.sh.counters;
        if !packet.is_consistent() || (packet.bth.opcode as u8) >> 5 != 3 {
            c.malformed += 1;
            return;
        }
        if packet.bth.pkey & 0x7FFF != 0x7FFF {
            c.bad_pkey += 1;
            return;
        }
        self.deliver_to_group(src, mgid, None, &packet);
    }

    /// Delivers `packet` to every QP attached to `mgid` but `skip`.
    fn deliver_to_group(&mut self, src: Gid, mgid: Gid, skip: Option<u32>, packet: &Packet) {
        let qpns: Vec<u32> = self
            .mcast
            .attached(mgid)
            .filter(|&q| Some(q) != skip)
            .collect();
        if qpns.is_empty() {
            self.sh.counters.mcast_unattached += 1;
            return;
        }
        for qpn in qpns {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.on_ud(&mut self.sh, src, mgid, packet.clone());
                qp.settle(&mut self.sh);
            }
            self.sync_deadline(qpn);
        }
    }

    /// Delivers the multicast datagrams this device's QPs sent to its own QPs attached to
    /// their groups — the sender among them unless it blocks its own loopback (a multicast
    /// send is received by every member of the group, this RNIC included).
    pub(super) fn deliver_multicast_loopback(&mut self) {
        while let Some((mgid, sender, packet)) = self.sh.mcast_loop.pop_front() {
            let skip = self.mcast.block_self.contains(&sender).then_some(sender);
            if self.mcast.attached(mgid).any(|q| Some(q) != skip) {
                self.deliver_to_group(self.sh.gid, mgid, skip, &packet);
            }
        }
    }
}
