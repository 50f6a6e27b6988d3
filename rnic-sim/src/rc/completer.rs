//! The completer of an RC QP: ACK, NAK, READ response and atomic ACK handling, retry and RNR
//! counters [rxe_comp.c].

use super::*;

impl SimQp {
    /// Handles a response (ACK, NAK, READ response, atomic ACK) [rxe_comp.c]; what it
    /// acknowledged is released from the peer's send budget.
    pub(crate) fn on_response(&mut self, sh: &mut Shared, now: SimTime, pkt: Packet) {
        self.complete_response(sh, now, pkt);
        self.sync_charge(sh, true);
    }

    fn complete_response(&mut self, sh: &mut Shared, now: SimTime, pkt: Packet) {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) {
            sh.counters.qp_not_ready += 1;
            return;
        }
        let psn = pkt.bth.psn;
        let op = pkt.bth.opcode;
        // A response past a SEND/WRITE's last PSN acknowledges it implicitly.
        loop {
            let Some(head) = self.sq.front() else {
                sh.counters.unexpected_responses += 1;
                return;
            };
            if !head.started {
                sh.counters.unexpected_responses += 1;
                self.complete_local_errors(sh);
                return;
            }
            if psn_diff(psn, head.last_psn) <= 0 {
                break;
            }
            if head.is_rd_atomic() {
                // Responses of this READ/atomic were lost: go back [rxe_comp.c check_psn].
                sh.counters.stale_responses += 1;
                self.retry(sh, false);
                return;
            }
            if psn_diff(head.last_psn, self.req.comp_psn) >= 0 {
                self.req.comp_psn = psn_add(head.last_psn, 1);
            }
            self.reset_retry_counters();
            self.complete_head(sh, WcStatus::Success);
            self.rearm(now);
        }
        let Some(head) = self.sq.front() else {
            return;
        };
        let diff = psn_diff(psn, self.req.comp_psn);
        if diff < 0 || (diff > 0 && head.is_rd_atomic()) {
            sh.counters.stale_responses += 1;
            return;
        }
        let head_op = head.wr.opcode;
        let head_last = head.last_psn;
        let ack_ok = |p: &Packet| matches!(p.aeth.map(|a| a.syndrome), Some(AethKind::Ack(_)));
        match op {
            Opcode::RcRdmaReadResponseFirst
            | Opcode::RcRdmaReadResponseMiddle
            | Opcode::RcRdmaReadResponseLast
            | Opcode::RcRdmaReadResponseOnly => {
                let starts = matches!(
                    op,
                    Opcode::RcRdmaReadResponseFirst | Opcode::RcRdmaReadResponseOnly
                );
                let in_seq = if self.req.read_cont {
                    !starts
                } else {
                    // After go-back-N a replay may resume in the middle [rxe_resp.c].
                    starts || psn != head.first_psn
                };
                let has_aeth = op != Opcode::RcRdmaReadResponseMiddle;
                if head_op != WrOpcode::RdmaRead || !in_seq || (has_aeth && !ack_ok(&pkt)) {
                    self.fail(sh, WcStatus::BadRespErr);
                    return;
                }
                let off =
                    u64::from(psn_diff(psn, head.first_psn).max(0) as u32) * u64::from(self.mtu());
                let sges = head.wr.sg_list.clone();
                match sh.mrs.scatter(self.pd, &sges, off, &pkt.payload) {
                    Ok(()) => {}
                    Err(crate::mr::ScatterError::Protection) => {
                        return self.fail(sh, WcStatus::LocProtErr)
                    }
                    // More data than the READ asked for.
                    Err(crate::mr::ScatterError::Length) => {
                        return self.fail(sh, WcStatus::BadRespErr)
                    }
                }
                self.reset_retry_counters();
                self.req.comp_psn = psn_add(psn, 1);
                let ends = matches!(
                    op,
                    Opcode::RcRdmaReadResponseLast | Opcode::RcRdmaReadResponseOnly
                );
                self.req.read_cont = !ends;
                // A LAST before the WQE's last PSN ends one of its requests (see
                // `read_chunk` in `transmit_rc`); the next one's responses follow.
                if ends && psn == head_last {
                    self.complete_head(sh, WcStatus::Success);
                }
                self.rearm(now);
            }
            Opcode::RcAtomicAcknowledge => {
                if !head_op.is_atomic() || !ack_ok(&pkt) {
                    self.fail(sh, WcStatus::BadRespErr);
                    return;
                }
                let orig = pkt.atomic_ack_eth.map(|a| a.orig).unwrap_or(0);
                let sges = head.wr.sg_list.clone();
                if sh
                    .mrs
                    .scatter(self.pd, &sges, 0, &orig.to_le_bytes())
                    .is_err()
                {
                    self.fail(sh, WcStatus::LocProtErr);
                    return;
                }
                self.reset_retry_counters();
                self.req.comp_psn = psn_add(psn, 1);
                self.complete_head(sh, WcStatus::Success);
                self.rearm(now);
            }
            Opcode::RcAcknowledge => {
                let Some(aeth) = pkt.aeth else {
                    sh.counters.malformed += 1;
                    return;
                };
                match aeth.syndrome {
                    AethKind::Ack(_) => {
                        if head_op == WrOpcode::RdmaRead || head_op.is_atomic() {
                            sh.counters.stale_responses += 1;
                            return;
                        }
                        self.reset_retry_counters();
                        self.req.comp_psn = psn_add(psn, 1);
                        if psn == head_last {
                            self.complete_head(sh, WcStatus::Success);
                        }
                        self.rearm(now);
                    }
                    AethKind::RnrNak(code) => {
                        sh.counters.rnr_naks_received += 1;
                        tracing::debug!(
                            qpn = self.qpn,
                            psn,
                            rnr_retries_left = self.req.rnr_left,
                            timer_ns = rnr_timer_ns(code),
                            "RNR NAK received"
                        );
                        if self.req.rnr_left == 0 {
                            self.fail(sh, WcStatus::RnrRetryExcErr);
                            return;
                        }
                        if self.req.rnr_left != 7 {
                            self.req.rnr_left -= 1;
                        }
                        self.req.comp_psn = psn;
                        self.go_back_n();
                        self.req.retrans_at = None;
                        self.req.rnr_at = Some(now.plus_nanos(rnr_timer_ns(code)));
                    }
                    AethKind::Nak(NakCode::PsnSeqError) => {
                        sh.counters.seq_naks_received += 1;
                        tracing::debug!(qpn = self.qpn, psn, "PSN sequence NAK received");
                        // The NAK acknowledges every PSN before it: progress if it moved.
                        if psn_diff(psn, self.req.comp_psn) > 0 {
                            self.reset_retry_counters();
                        }
                        self.req.comp_psn = psn;
                        self.retry(sh, false);
                    }
                    AethKind::Nak(code) => {
                        tracing::debug!(qpn = self.qpn, psn, nak = ?code, "NAK received");
                        let status = match code {
                            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            _ => WcStatus::RemOpErr,
                        };
                        self.fail(sh, status);
                    }
                }
            }
            _ => sh.counters.wrong_qp_type += 1,
        }
        self.complete_local_errors(sh);
    }

    /// The head WQE failed: it completes with `status`, the QP enters ERR, the rest flush.
    fn fail(&mut self, sh: &mut Shared, status: WcStatus) {
        self.complete_head(sh, status);
        self.enter_err(sh);
    }
}
