//! The responder's resources of an RC QP: the READ and atomic requests it executed, kept
//! (`max_dest_rd_atomic` of them) so that a duplicate request is answered again — READ
//! responses re-read from the region, atomics with the original value, never executed twice
//! [rxe_resp.c `duplicate_request`].

use super::*;

impl SimQp {
    /// Takes a responder resource for the READ request `res` (one not yet executed): the
    /// continuation of the newest resource — its next PSN, its next byte, the same rkey,
    /// after whole packets — is a later piece of the same READ (see `read_chunk` in
    /// `transmit_rc`) and extends it, so that all the pieces of one READ hold one resource,
    /// as the one READ request of rxe does (IBTA 9.4.4: `max_dest_rd_atomic` counts READ
    /// operations, and the requester took one credit for it). Pieces holding a resource each
    /// would push out the resource of an earlier piece whose responses are still on the way;
    /// its retransmitted request would then find none and be dropped (class D), until
    /// `RETRY_EXC_ERR`.
    pub(super) fn push_read_resource(&mut self, res: RdRes) {
        let mtu = self.mtu();
        if let (
            Some(RdRes::Read {
                last_psn,
                va,
                rkey,
                len,
                ..
            }),
            RdRes::Read {
                first_psn: next_psn,
                last_psn: next_last,
                va: next_va,
                rkey: next_rkey,
                len: next_len,
            },
        ) = (self.resp.resources.back_mut(), res)
        {
            let continues = psn_add(*last_psn, 1) == next_psn
                && *rkey == next_rkey
                && *len > 0
                && *len % mtu == 0
                && va.wrapping_add(u64::from(*len)) == next_va;
            if let Some(total) = len.checked_add(next_len).filter(|_| continues) {
                *last_psn = next_last;
                *len = total;
                return;
            }
        }
        self.push_resource(res);
    }

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
    /// [rxe_resp.c `read_reply`]: the first is a FIRST (or ONLY) when it is the resource's
    /// first PSN, the last a LAST (or ONLY). A region that went away meanwhile drops the
    /// replay.
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
                let off = k * u64::from(self.mtu());
                let want_va = va.wrapping_add(off);
                let Some(reth) = pkt.reth.filter(|r| r.rkey == rkey && r.va == want_va) else {
                    return;
                };
                // Replay what the request asks for, within the resource [rxe_resp.c
                // `duplicate_request`: "the same as the previous one or a subset of it"]:
                // the request may cover only part of a READ of several pieces.
                let RdRes::Read { len, last_psn, .. } = res else {
                    return;
                };
                let end = off
                    .saturating_add(u64::from(reth.dma_len))
                    .min(u64::from(len));
                let n = npkts(end.saturating_sub(off), self.mtu());
                let upto = RdRes::Read {
                    first_psn,
                    last_psn: if psn_diff(psn_add(psn, n - 1), last_psn) < 0 {
                        psn_add(psn, n - 1)
                    } else {
                        last_psn
                    },
                    va,
                    rkey,
                    len: u32::try_from(end).unwrap_or(len),
                };
                self.flush_pending_ack(sh);
                self.emit_read(sh, upto, psn);
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
