//! The responder's resources of an RC QP: the READ and atomic requests it executed, kept
//! (`max_dest_rd_atomic` of them) so that a duplicate request is answered again — READ
//! responses re-read from the region, atomics with the original value, never executed twice
//! [rxe_resp.c `duplicate_request`].

use super::*;

impl SimQp {
    pub(super) fn push_resource(&mut self, res: RdRes) {
        let cap = usize::from(self.attr.max_dest_rd_atomic.max(1));
        while self.resp.resources.len() >= cap {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(res);
    }

    pub(super) fn send_atomic_ack(&self, sh: &mut Shared, psn: u32, orig: u64) {
        let mut p = self.packet(Opcode::RcAtomicAcknowledge, psn, Bytes::new());
        p.aeth = Some(Aeth {
            syndrome: AethKind::Ack(ACK_UNLIMITED),
            msn: self.resp.msn,
        });
        p.atomic_ack_eth = Some(AtomicAckEth { orig });
        self.send(sh, p);
    }

    /// Sends the READ responses of `res` from PSN `from` on, reading the region now
    /// [rxe_resp.c `read_reply`]. A region that went away meanwhile drops the replay.
    pub(super) fn emit_read(&self, sh: &mut Shared, res: RdRes, from: u32) {
        let RdRes::Read {
            first_psn,
            va,
            rkey,
            len,
            ..
        } = res
        else {
            return;
        };
        let mtu = self.mtu() as usize;
        let n = npkts(u64::from(len), self.mtu());
        let k0 = psn_diff(from, first_psn).max(0) as u32;
        let mut region = None;
        if len > 0 {
            let Some(r) =
                sh.mrs
                    .check_remote(self.pd, rkey, va, u64::from(len), AccessFlags::REMOTE_READ)
            else {
                sh.counters.duplicate_requests += 1;
                return;
            };
            region = Some(r);
        }
        let len = len as usize;
        for k in k0..n {
            let opcode = match (n == 1, k == 0, k + 1 == n) {
                (true, _, _) => Opcode::RcRdmaReadResponseOnly,
                (false, true, _) => Opcode::RcRdmaReadResponseFirst,
                (false, false, true) => Opcode::RcRdmaReadResponseLast,
                (false, false, false) => Opcode::RcRdmaReadResponseMiddle,
            };
            let start = (k as usize * mtu).min(len);
            let end = (start + mtu).min(len);
            let mut p = self.packet(opcode, psn_add(first_psn, k), Bytes::new());
            if opcode != Opcode::RcRdmaReadResponseMiddle {
                p.aeth = Some(Aeth {
                    syndrome: AethKind::Ack(ACK_UNLIMITED),
                    msn: self.resp.msn,
                });
            }
            let gather = region
                .filter(|_| end > start)
                .map(|(h, off)| Gather::span(h, off + start, end - start));
            self.send_gathered(sh, p, gather);
        }
    }

    /// A request with a PSN already executed: SEND/WRITE are re-ACKed without delivering
    /// again (IBTA C9-105); READ and atomic are answered from the responder resources, not
    /// executed again [rxe_resp.c `duplicate_request`]. Unknown duplicates are dropped.
    pub(super) fn duplicate(&mut self, sh: &mut Shared, pkt: &Packet) {
        let psn = pkt.bth.psn;
        match pkt.bth.opcode {
            Opcode::RcRdmaReadRequest => {
                let found = self.resp.resources.iter().copied().find(|r| {
                    matches!(*r, RdRes::Read { first_psn, last_psn, .. }
                        if psn_diff(psn, first_psn) >= 0 && psn_diff(psn, last_psn) <= 0)
                });
                let Some(
                    res @ RdRes::Read {
                        first_psn,
                        va,
                        rkey,
                        ..
                    },
                ) = found
                else {
                    return;
                };
                let k = psn_diff(psn, first_psn) as u64;
                let want_va = va.wrapping_add(k * u64::from(self.mtu()));
                if pkt.reth.is_none_or(|r| r.rkey != rkey || r.va != want_va) {
                    return;
                }
                self.flush_pending_ack(sh);
                self.emit_read(sh, res, psn);
            }
            Opcode::RcCompareSwap | Opcode::RcFetchAdd => {
                let orig = self.resp.resources.iter().find_map(|r| match *r {
                    RdRes::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                if let Some(orig) = orig {
                    self.flush_pending_ack(sh);
                    self.send_atomic_ack(sh, psn, orig);
                }
            }
            _ => {
                self.resp.pending_ack = Some(psn_add(self.resp.psn, PSN_MASK));
            }
        }
    }
}
