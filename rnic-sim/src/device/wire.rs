//! The device's wire side: packets out ([`SimDevice::poll_transmit`]), packets in
//! ([`SimDevice::handle_packet`]), transport timers ([`SimDevice::poll_timeout`],
//! [`SimDevice::handle_timeout`]), and the bookkeeping that keeps them from scanning every QP.

use super::*;

/// Notes in `pending` (`SimDevice::tx_pending`) that QP `qpn` may have something to send,
/// keeping the list at most about twice the device's `qps` QPs however long nobody polls.
fn note_tx(pending: &mut Vec<u32>, qps: usize, qpn: u32) {
    if pending.last() != Some(&qpn) {
        pending.push(qpn);
    }
    if pending.len() > 2 * qps + 64 {
        pending.sort_unstable();
        pending.dedup();
    }
}

/// Logs a received packet dropped, and why (the name of the [`Counters`] field it is counted
/// in first).
fn dropped(src: Gid, p: &Packet, why: &'static str) {
    tracing::debug!(
        peer = %src.to_ip(),
        qpn = p.bth.dest_qp & QPN_MASK,
        opcode = ?p.bth.opcode,
        psn = p.bth.psn,
        why = %why,
        "packet dropped"
    );
}

impl SimDevice {
    /// The next packet to put on the wire, or `None` when the device has nothing to send now.
    /// Runs the requesters (new and retransmitted requests), then emits the coalesced ACKs:
    /// within one turn every QP's requests go out before any pure ACK, so a reply the
    /// application posted on receiving a message never waits behind that message's ACK (on a
    /// real-time driver each datagram is a system call, and the peer's wake-up). `now` starts
    /// retransmit timers. A SEND/WRITE request's or READ response's payload is read from its
    /// region now (crate `gather`): a caller that buffers packets must drain this before the
    /// next verbs call, as the fabric drivers do.
    pub fn poll_transmit(&mut self, now: SimTime) -> Option<Transmit> {
        let (mut t, payload) = self.poll_outgoing(now)?;
        if let Some(p) = payload {
            crate::shared::fill(&mut t, p.to_bytes());
        }
        Some(t)
    }

    /// [`poll_transmit`](Self::poll_transmit), leaving a payload that is in registered memory
    /// there: [`SimNic`](crate::nic::SimNic) encodes it straight from the region into the
    /// datagram. The packet's own `payload` is empty when the second part is `Some`. A packet
    /// whose region was deregistered since it was queued is dropped
    /// ([`Counters::tx_region_gone`]).
    pub(crate) fn poll_outgoing(
        &mut self,
        now: SimTime,
    ) -> Option<(Transmit, Option<Payload<'_>>)> {
        if self.removed {
            return None;
        }
        self.wake_budget_waiters();
        if self.sh.tx.is_empty() && !self.tx_pending.is_empty() {
            let mut pending = std::mem::take(&mut self.tx_pending);
            pending.sort_unstable();
            pending.dedup();
            for &qpn in &pending {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    qp.transmit(&mut self.sh, now);
                    qp.settle(&mut self.sh);
                }
            }
            for &qpn in &pending {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    qp.flush_pending_ack(&mut self.sh);
                }
                self.sync_deadline(qpn);
            }
            pending.clear();
            self.tx_pending = pending;
        }
        if !self.sh.mcast_loop.is_empty() {
            self.deliver_multicast_loopback();
        }
        loop {
            let o = self.sh.tx.pop_front()?;
            let Some(g) = o.gather else {
                return Some((o.transmit, None));
            };
            match g.resolve(&self.sh.mrs) {
                Some(p) => return Some((o.transmit, Some(p))),
                None => self.sh.counters.tx_region_gone += 1,
            }
        }
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) has work: a packet queued, or a QP
    /// touched since its last transmit pass. When false, it returns `None` and changes nothing
    /// (an observer may skip reading the device's completions after it).
    pub fn transmit_pending(&self) -> bool {
        !self.sh.tx.is_empty() || !self.tx_pending.is_empty() || self.sh.budgets.has_woken()
    }

    /// The QPNs of the QPs that entered the ERR state (by `modify_qp`, a transport error or a
    /// CQ overrun) since the last call, each once, in QPN order; destroyed QPs are left out.
    /// Lets an observer (the testbed's World) follow QP states without querying every QP
    /// after every event. At most one entry per QP, so it stays bounded if never taken.
    pub fn take_entered_err(&mut self) -> BTreeSet<u32> {
        std::mem::take(&mut self.sh.entered_err)
    }

    /// Whether [`take_entered_err`](Self::take_entered_err) has anything to give.
    pub fn has_entered_err(&self) -> bool {
        !self.sh.entered_err.is_empty()
    }

    /// After an operation on QP `qpn`: it may have something to send, and its timers may have
    /// moved. Keeps `poll_transmit` and `poll_timeout` from scanning every QP (a World holds
    /// tens of thousands).
    pub(super) fn touched(&mut self, qpn: u32) {
        note_tx(&mut self.tx_pending, self.qps.len(), qpn);
        self.sync_deadline(qpn);
        self.wake_budget_waiters();
    }

    /// QPs that waited for room in a peer's send budget, woken by a release: they may send.
    fn wake_budget_waiters(&mut self) {
        for qpn in self.sh.budgets.take_woken() {
            note_tx(&mut self.tx_pending, self.qps.len(), qpn);
        }
    }

    /// Re-files QP `qpn`'s earliest armed timer (none if it is gone) in `deadlines`.
    pub(super) fn sync_deadline(&mut self, qpn: u32) {
        let new = self
            .qps
            .get(&qpn)
            .and_then(|q| q.req.retrans_at.into_iter().chain(q.req.rnr_at).min());
        let old = match new {
            Some(t) => self.deadline_of.insert(qpn, t),
            None => self.deadline_of.remove(&qpn),
        };
        if old != new {
            if let Some(t) = old {
                self.deadlines.remove(&(t, qpn));
            }
            if let Some(t) = new {
                self.deadlines.insert((t, qpn));
            }
        }
    }

    /// Handles a packet from `src`. Bad packets are counted in [`Counters`] and dropped.
    pub fn handle_packet(&mut self, now: SimTime, src: Gid, packet: Packet) {
        if self.removed {
            return; // a removed device takes nothing from the wire
        }
        let c = &mut self.sh.counters;
        if !packet.is_consistent() {
            dropped(src, &packet, "malformed: headers do not match the opcode");
            c.malformed += 1;
            return;
        }
        if packet.bth.pkey & 0x7FFF != 0x7FFF {
            dropped(src, &packet, "bad_pkey: not the default partition");
            c.bad_pkey += 1;
            return;
        }
        let qpn = packet.bth.dest_qp & QPN_MASK;
        if qpn == crate::gsi::GSI_QPN {
            crate::gsi::on_gsi_packet(&mut self.gsi, c, src, packet);
            return;
        }
        let qps = self.qps.len();
        let Some(qp) = self.qps.get_mut(&qpn) else {
            dropped(src, &packet, "unknown_qp: no such QP");
            c.unknown_qp += 1;
            return;
        };
        let ud_op = (packet.bth.opcode as u8) >> 5 == 3;
        match qp.init.qp_type {
            QpType::Rc => {
                if ud_op {
                    dropped(src, &packet, "wrong_qp_type: a UD packet for an RC QP");
                    c.wrong_qp_type += 1;
                    return;
                }
                if matches!(qp.state(), QpState::Reset | QpState::Init) {
                    tracing::trace!(qpn, "packet dropped: qp_not_ready (RESET or INIT)");
                    c.qp_not_ready += 1;
                    return;
                }
                if src != qp.attr.ah_attr.grh.dgid {
                    dropped(src, &packet, "wrong_source: not from the QP's peer");
                    c.wrong_source += 1;
                    return;
                }
                // Only now may the QP have something to send (an ACK, a response, a
                // retransmission): a packet refused above costs it no transmit pass.
                note_tx(&mut self.tx_pending, qps, qpn);
                if packet.bth.opcode.is_response() {
                    qp.on_response(&mut self.sh, now, packet);
                } else {
                    qp.on_request(&mut self.sh, packet);
                }
            }
            QpType::Ud => {
                if !ud_op {
                    dropped(src, &packet, "wrong_qp_type: an RC packet for a UD QP");
                    c.wrong_qp_type += 1;
                    return;
                }
                let dst = self.sh.gid;
                qp.on_ud(&mut self.sh, src, dst, packet);
            }
            QpType::Uc => {
                dropped(src, &packet, "wrong_qp_type: UC is not simulated");
                c.wrong_qp_type += 1;
                return;
            }
        }
        qp.settle(&mut self.sh);
        self.sync_deadline(qpn);
    }

    /// The earliest deadline of a retransmit or RNR timer, if any is armed.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        if self.removed {
            return None;
        }
        let t = self.deadlines.first().map(|&(t, _)| t);
        #[cfg(test)]
        {
            let scan = self
                .qps
                .values()
                .flat_map(|q| [q.req.retrans_at, q.req.rnr_at])
                .flatten()
                .min();
            assert_eq!(t, scan, "deadline index out of step with the QPs' timers");
        }
        t
    }

    /// Fires the timers due at `now`, QP by QP in QPN order.
    pub fn handle_timeout(&mut self, now: SimTime) {
        if self.removed {
            return;
        }
        let mut due: Vec<u32> = self
            .deadlines
            .iter()
            .take_while(|&&(t, _)| t <= now)
            .map(|&(_, qpn)| qpn)
            .collect();
        due.sort_unstable();
        for qpn in due {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.timeout(&mut self.sh, now);
                qp.settle(&mut self.sh);
            }
            self.touched(qpn);
        }
    }
}
