//! The RC transport of a QP: requester (segmentation, PSNs, READ credits, go-back-N),
//! completer (ACK/NAK/READ response/atomic ACK handling, retry and RNR counters) and responder
//! (PSN check, opcode sequence, access and length checks, execution, ACK coalescing, responder
//! resources for duplicate READs and atomics). Modelled on rxe's `rxe_req.c`, `rxe_comp.c` and
//! `rxe_resp.c` state machines and IBTA vol. 1 ch. 9.7; the differences are in
//! docs/semantics-verbs.md.

mod budget;
mod completer;
mod resources;

use crate::gather::Gather;
use crate::psn::{psn_add, psn_diff};
use crate::qp::{request_payload, Cont, RdRes, SimQp, WriteCtx};
use crate::roce::{Aeth, AethKind, AtomicAckEth, AtomicEth, NakCode, Opcode, Packet, Reth};
use crate::shared::Outgoing;
use crate::shared::Shared;
use crate::shared::Transmit;
use bytes::Bytes;
use verbs_core::{
    AccessFlags, QpState, SendFlags, SimTime, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode, PSN_MASK,
};

/// AETH ACK credit value meaning "no end-to-end flow control" (`AETH_ACK_UNLIMITED`
/// [rxe_hdr.h]).
pub(crate) const ACK_UNLIMITED: u8 = 0x1F;

/// The IBTA RNR NAK timer table (IBTA Table 45; rxe `rnrnak_usec` [rxe_comp.c]), in µs, indexed
/// by the 5-bit timer code. Code 0 is the longest, 655.36 ms.
const RNR_TIMER_US: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// The RNR back-off of a 5-bit timer code, in ns.
pub(crate) fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_US[usize::from(code & 0x1F)] * 1_000
}

/// The local ACK timeout of the `timeout` exponent in ns (4.096 µs × 2^timeout), or `None`
/// for 0 = infinite (IBTA 9.7.6.1.3; rxe `qp_timeout_jiffies` [rxe_qp.c]).
pub(crate) fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

/// Why the responder refused a request.
enum RespErr {
    /// No receive WQE: RNR NAK, the requester retries later (class B).
    Rnr,
    /// Class C: NAK with `nak`, complete the receive WQE in use (if any) with `recv_status`,
    /// responder QP to ERR [rxe_resp.c `do_class_ac_error`].
    Fatal { nak: NakCode, recv_status: WcStatus },
}

/// The affiliated async event of a class C responder error that no receive WQE can report
/// (IBTA C9-222.1.1: "If the error can be related to a particular QP but cannot be related to
/// a particular WQE on that receive queue (e.g. the error occurred while executing an RDMA
/// Write Request without immediate data), the error shall be reported to the responder's
/// client as an Affiliated Asynchronous error"): a remote access NAK is a Local Access
/// Violation Work Queue Error (`QP_ACCESS_ERR`), an invalid request NAK an Invalid Request
/// Local Work Queue Error (`QP_REQ_ERR`), anything else a catastrophic error (`QP_FATAL`).
/// mlx5 reports them as firmware events (`MLX5_EVENT_TYPE_WQ_ACCESS_ERROR`,
/// `MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR`, `mlx5_ib_qp_event`); siw raises `QP_ACCESS_ERR` on a
/// bad STag (`siw_qp_rx.c`); rxe raises none (a v2 patch, "RDMA/rxe: Generate async error for
/// r_key violations", Feb 2026, adds `QP_ACCESS_ERR`).
fn responder_error_event(nak: NakCode) -> verbs_core::AsyncEventType {
    use verbs_core::AsyncEventType as T;
    match nak {
        NakCode::RemoteAccessError => T::QpAccessErr,
        NakCode::InvalidRequest => T::QpReqErr,
        _ => T::QpFatal,
    }
}

fn inv_req() -> RespErr {
    RespErr::Fatal {
        nak: NakCode::InvalidRequest,
        recv_status: WcStatus::RemInvReqErr,
    }
}

/// An RDMA WRITE outside the target MR or its access: remote access NAK; a receive it would
/// have consumed (WRITE with immediate) completes with LOC_ACCESS_ERR.
fn write_access_err() -> RespErr {
    RespErr::Fatal {
        nak: NakCode::RemoteAccessError,
        recv_status: WcStatus::LocAccessErr,
    }
}

/// Number of packets (PSNs) a message of `len` bytes needs at `mtu` (at least 1).
fn npkts(len: u64, mtu: u32) -> u32 {
    u32::try_from(len.div_ceil(u64::from(mtu)).max(1)).unwrap_or(u32::MAX)
}

impl SimQp {
    fn packet(&self, opcode: Opcode, psn: u32, payload: Bytes) -> Packet {
        Packet::bare(opcode, self.attr.dest_qp_num, psn, payload)
    }

    fn send(&self, sh: &mut Shared, packet: Packet) {
        self.send_gathered(sh, packet, None);
    }

    /// Queues `packet`, its payload read from `gather` when it leaves (crate `gather`).
    fn send_gathered(&self, sh: &mut Shared, packet: Packet, gather: Option<Gather>) {
        let dst = self.attr.ah_attr.grh.dgid;
        let transmit = Transmit { dst, packet };
        sh.tx.push_back(Outgoing { transmit, gather });
    }

    // ------------------------------------------------------------------------------------
    // Requester

    /// Emits the new or retransmitted request packets this QP may send now, within the PSN
    /// window and READ credit limit. Its coalesced ACK, if any, is not sent here: the device
    /// sends every QP's requests of one turn before the ACKs ([`SimDevice::poll_transmit`]).
    ///
    /// [`SimDevice::poll_transmit`]: crate::SimDevice::poll_transmit
    pub(crate) fn transmit_rc(&mut self, sh: &mut Shared, now: SimTime) {
        if !matches!(self.state(), QpState::Rts | QpState::Sqd) || self.req.rnr_at.is_some() {
            return;
        }
        let mtu = self.mtu();
        // Packets in flight at most: the PSN window, and the byte window in path-MTU packets.
        let window =
            (sh.max_unacked_bytes / u64::from(mtu)).clamp(1, u64::from(sh.max_unacked_psns));
        let window = i32::try_from(window).unwrap_or(i32::MAX);
        // Ask for an ACK at least twice per window, or a window smaller than
        // `max_pkts_per_ack` would stall until the retransmit timer (rxe: 64 in 128).
        let ack_every = sh.max_pkts_per_ack.min((window as u32).div_ceil(2)).max(1);
        // A byte window also bounds the responses one READ request may draw, which nothing
        // acknowledges: a long READ is asked for half a window at a time (so the next request
        // can go while the last one's responses arrive), each request resuming where the
        // last one's responses end, as a READ replayed after go-back-N does. Without a byte
        // window (the default, rxe's behaviour) a READ is one request.
        let read_chunk = if sh.max_unacked_bytes == u64::MAX {
            u32::MAX
        } else {
            (window as u32 / 2).max(1)
        };
        loop {
            let idx = self.req.next;
            if idx >= self.sq.len() {
                break;
            }
            let rd_out = self.req.rd_outstanding;
            let new_psn = self.req.psn;
            let max_rd = u32::from(self.attr.max_rd_atomic);
            let state = self.state();
            let pd = self.pd;
            let w = &mut self.sq[idx];
            if w.error.is_some() {
                break;
            }
            if !w.started {
                // New work: not in SQD, within the PSN window, with a READ credit if needed,
                // after outstanding READ/atomics when fenced.
                if state == QpState::Sqd
                    || psn_diff(new_psn, self.req.comp_psn) >= window
                    || (w.wr.send_flags.contains(SendFlags::FENCE) && rd_out > 0)
                    || (w.is_rd_atomic() && rd_out >= max_rd)
                {
                    break;
                }
                // Local checks happen when the WQE is executed, not at post time
                // [rxe_req.c: copy_data failure -> IB_WC_LOC_PROT_ERR].
                let local_ok = match w.wr.opcode {
                    WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm => {
                        w.payload.is_some() || sh.mrs.check_readable(pd, &w.wr.sg_list)
                    }
                    _ => sh.mrs.check_writable(pd, &w.wr.sg_list),
                };
                if !local_ok {
                    w.error = Some(WcStatus::LocProtErr);
                    break;
                }
                w.started = true;
                w.npkts = npkts(w.wr.total_len(), mtu);
                if w.wr.opcode.is_atomic() {
                    w.npkts = 1;
                }
                w.first_psn = new_psn;
                w.last_psn = psn_add(w.first_psn, w.npkts - 1);
                w.next_pkt = 0;
                self.req.psn = psn_add(w.last_psn, 1);
                if w.is_rd_atomic() {
                    w.rd_credit = true;
                    self.req.rd_outstanding += 1;
                }
            }
            let w = &self.sq[idx];
            let k = w.next_pkt;
            let psn = psn_add(w.first_psn, k);
            // The window holds for every packet, not only a WQE's first (rxe_req.c checks
            // `req.psn` against `comp.psn + RXE_MAX_UNACKED_PSNS` before each packet): a long
            // message goes out as ACKs open the window, so one QP never has more than
            // `window` packets in flight.
            if psn_diff(psn, self.req.comp_psn) >= window {
                break;
            }
            let last = k + 1 >= w.npkts;
            // The PSNs this packet covers end before `cover_end`: a READ request's, its responses.
            let mut cover_end = psn_add(psn, 1);
            let mut p;
            let mut gather = None;
            match w.wr.opcode {
                WrOpcode::RdmaRead => {
                    let off = u64::from(k) * u64::from(mtu);
                    // Pieces start at multiples of `read_chunk`, so that a request resumed
                    // after go-back-N asks again for part of one piece the responder
                    // executed, never for part of a piece it may not have seen.
                    let chunk = w
                        .npkts
                        .saturating_sub(k)
                        .min(read_chunk - k % read_chunk)
                        .max(1);
                    cover_end = psn_add(psn, chunk);
                    // With a byte window, every response the request draws must fit it.
                    if read_chunk != u32::MAX
                        && psn_diff(psn_add(psn, chunk - 1), self.req.comp_psn) >= window
                    {
                        break;
                    }
                    if !self.budget_admits(sh, cover_end) {
                        break;
                    }
                    let len =
                        w.wr.total_len()
                            .saturating_sub(off)
                            .min(u64::from(chunk) * u64::from(mtu));
                    p = self.packet(Opcode::RcRdmaReadRequest, psn, Bytes::new());
                    p.reth = Some(Reth {
                        va: w.wr.rdma.remote_addr.wrapping_add(off),
                        rkey: w.wr.rdma.rkey,
                        dma_len: u32::try_from(len).unwrap_or(u32::MAX),
                    });
                    p.bth.ack_req = true;
                    self.sq[idx].next_pkt = k + chunk;
                }
                WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                    if !self.budget_admits(sh, cover_end) {
                        break;
                    }
                    let cmp = w.wr.opcode == WrOpcode::AtomicCmpAndSwp;
                    p = self.packet(
                        if cmp {
                            Opcode::RcCompareSwap
                        } else {
                            Opcode::RcFetchAdd
                        },
                        psn,
                        Bytes::new(),
                    );
                    p.atomic_eth = Some(AtomicEth {
                        va: w.wr.atomic.remote_addr,
                        rkey: w.wr.atomic.rkey,
                        swap_add: if cmp {
                            w.wr.atomic.swap
                        } else {
                            w.wr.atomic.compare_add
                        },
                        compare: if cmp { w.wr.atomic.compare_add } else { 0 },
                    });
                    p.bth.ack_req = true;
                    self.sq[idx].next_pkt = 1;
                }
                op => {
                    if !self.budget_admits(sh, cover_end) {
                        break;
                    }
                    let len = usize::try_from(w.wr.total_len()).unwrap_or(usize::MAX);
                    let start = (k as usize).saturating_mul(mtu as usize).min(len);
                    let end = start.saturating_add(mtu as usize).min(len);
                    let Some((data, g)) = request_payload(&sh.mrs, pd, w, start..end) else {
                        // A region deregistered since the WQE started [rxe_req.c].
                        self.sq[idx].error = Some(WcStatus::LocProtErr);
                        break;
                    };
                    gather = g;
                    let write = matches!(op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm);
                    let imm = op.has_imm();
                    let only = w.npkts == 1;
                    let opcode = match (write, only, k == 0, last, imm) {
                        (false, true, _, _, false) => Opcode::RcSendOnly,
                        (false, true, _, _, true) => Opcode::RcSendOnlyWithImm,
                        (false, false, true, _, _) => Opcode::RcSendFirst,
                        (false, false, false, false, _) => Opcode::RcSendMiddle,
                        (false, false, false, true, false) => Opcode::RcSendLast,
                        (false, false, false, true, true) => Opcode::RcSendLastWithImm,
                        (true, true, _, _, false) => Opcode::RcRdmaWriteOnly,
                        (true, true, _, _, true) => Opcode::RcRdmaWriteOnlyWithImm,
                        (true, false, true, _, _) => Opcode::RcRdmaWriteFirst,
                        (true, false, false, false, _) => Opcode::RcRdmaWriteMiddle,
                        (true, false, false, true, false) => Opcode::RcRdmaWriteLast,
                        (true, false, false, true, true) => Opcode::RcRdmaWriteLastWithImm,
                    };
                    p = self.packet(opcode, psn, data);
                    if write && k == 0 {
                        p.reth = Some(Reth {
                            va: w.wr.rdma.remote_addr,
                            rkey: w.wr.rdma.rkey,
                            dma_len: u32::try_from(len).unwrap_or(u32::MAX),
                        });
                    }
                    if last {
                        if imm {
                            p.imm = Some(w.wr.imm_data);
                        }
                        p.bth.se = w.wr.send_flags.contains(SendFlags::SOLICITED);
                    }
                    self.req.noack_pkts += 1;
                    // A packet after which the peer's budget has no room for another asks
                    // for an ACK: only ACKs open the budget again.
                    let tight = !self.budget_room(sh, psn_add(cover_end, 1));
                    p.bth.ack_req = last || tight || self.req.noack_pkts >= ack_every;
                    if p.bth.ack_req {
                        self.req.noack_pkts = 0;
                    }
                    self.sq[idx].next_pkt = k + 1;
                }
            }
            if self.sq[idx].next_pkt >= self.sq[idx].npkts {
                self.req.next = idx + 1;
            }
            self.send_gathered(sh, p, gather);
            self.budget_sent(sh, cover_end);
            if self.req.retrans_at.is_none() {
                self.req.retrans_at =
                    ack_timeout_ns(self.attr.timeout).map(|ns| now.plus_nanos(ns));
            }
        }
        self.complete_local_errors(sh);
    }

    /// Completes, at the head of the send queue, WQEs that failed their local checks, then
    /// moves the QP to ERR [rxe_comp.c `COMPST_ERROR`].
    pub(crate) fn complete_local_errors(&mut self, sh: &mut Shared) {
        if let Some(status) = self.sq.front().and_then(|w| w.error) {
            self.complete_head(sh, status);
            self.enter_err(sh);
        }
    }

    /// Go-back-N: retransmit from the oldest unacknowledged PSN (IBTA 9.7.5.2.8).
    fn go_back_n(&mut self) {
        self.req.next = 0;
        self.req.read_cont = false;
        let comp = self.req.comp_psn;
        for w in self.sq.iter_mut().filter(|w| w.started) {
            let k = psn_diff(comp, w.first_psn).max(0) as u32;
            w.next_pkt = k.min(w.npkts.saturating_sub(1));
        }
    }

    /// A retry (timeout or sequence NAK): uses one of `retry_cnt`; when none is left the head
    /// WQE completes with `RETRY_EXC_ERR` and the QP enters ERR [rxe_comp.c
    /// `COMPST_ERROR_RETRY`]. Unlike rxe, `retry_cnt` 7 is 7 retries, not infinite (IBTA
    /// 9.7.6.1.3: only `rnr_retry` 7 is infinite).
    fn retry(&mut self, sh: &mut Shared, timeout: bool) {
        if self.req.started_retry && !timeout {
            return;
        }
        if self.req.retry_left == 0 {
            tracing::debug!(
                qpn = self.qpn,
                retry_cnt = self.attr.retry_cnt,
                timeout,
                "RC retry count exceeded"
            );
            self.complete_head(sh, WcStatus::RetryExcErr);
            self.enter_err(sh);
            return;
        }
        self.req.retry_left -= 1;
        self.req.started_retry = true;
        sh.counters.retries += 1;
        self.counters.retries += 1;
        self.budget_loss(sh);
        tracing::debug!(
            qpn = self.qpn,
            from_psn = self.req.comp_psn,
            retries_left = self.req.retry_left,
            cause = %if timeout { "ACK timeout" } else { "NAK or lost response" },
            "RC retransmission (go-back-N)"
        );
        self.go_back_n();
    }

    /// Re-arms or clears the retransmit timer after an acknowledgement.
    fn rearm(&mut self, now: SimTime) {
        let outstanding = psn_diff(self.req.psn, self.req.comp_psn) > 0;
        self.req.retrans_at = if outstanding {
            ack_timeout_ns(self.attr.timeout).map(|ns| now.plus_nanos(ns))
        } else {
            None
        };
    }

    /// Progress was made: the retry budgets are full again and a new retry may start
    /// [rxe_comp.c `reset_retry_counters`].
    fn reset_retry_counters(&mut self) {
        self.req.retry_left = self.attr.retry_cnt;
        self.req.rnr_left = self.attr.rnr_retry;
        self.req.started_retry = false;
    }

    /// The retransmit or RNR timer fired.
    pub(crate) fn timeout_rc(&mut self, sh: &mut Shared, now: SimTime) {
        if let Some(t) = self.req.rnr_at {
            if now >= t {
                self.req.rnr_at = None;
            }
        }
        if let Some(t) = self.req.retrans_at {
            if now >= t {
                self.req.retrans_at = None;
                let outstanding = psn_diff(self.req.psn, self.req.comp_psn) > 0;
                if outstanding && self.sq.front().is_some_and(|w| w.started) {
                    sh.counters.timeouts += 1;
                    self.counters.timeouts += 1;
                    self.retry(sh, true);
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // Responder

    fn send_ack(&self, sh: &mut Shared, syndrome: AethKind, psn: u32) {
        let mut p = self.packet(Opcode::RcAcknowledge, psn, Bytes::new());
        p.aeth = Some(Aeth {
            syndrome,
            msn: self.resp.msn,
        });
        self.send(sh, p);
    }

    /// Sends the coalesced ACK, if one is pending. Called before any other response so the
    /// peer sees acknowledgements in PSN order.
    pub(crate) fn flush_pending_ack(&mut self, sh: &mut Shared) {
        if let Some(psn) = self.resp.pending_ack.take() {
            sh.counters.acks_sent += 1;
            self.send_ack(sh, AethKind::Ack(ACK_UNLIMITED), psn);
        }
    }

    /// Handles a request packet [rxe_resp.c `rxe_responder`].
    pub(crate) fn on_request(&mut self, sh: &mut Shared, pkt: Packet) {
        if !matches!(self.state(), QpState::Rtr | QpState::Rts | QpState::Sqd) {
            // A responder in ERR (or not yet RTR) drops requests without answering.
            sh.counters.qp_not_ready += 1;
            return;
        }
        self.note_first_request(sh);
        let psn = pkt.bth.psn;
        let diff = psn_diff(psn, self.resp.psn);
        if diff > 0 {
            // Class B: NAK once, drop until the expected PSN arrives.
            sh.counters.psn_out_of_seq += 1;
            if !self.resp.sent_psn_nak {
                self.resp.sent_psn_nak = true;
                self.flush_pending_ack(sh);
                tracing::debug!(
                    qpn = self.qpn,
                    psn,
                    expected = self.resp.psn,
                    "PSN sequence NAK sent"
                );
                sh.counters.seq_naks_sent += 1;
                self.send_ack(sh, AethKind::Nak(NakCode::PsnSeqError), self.resp.psn);
            }
            return;
        }
        if diff < 0 {
            sh.counters.duplicate_requests += 1;
            self.duplicate(sh, &pkt);
            return;
        }
        self.resp.sent_psn_nak = false;
        match self.execute(sh, &pkt) {
            Ok(()) => {}
            Err(RespErr::Rnr) => {
                // Until the NAKed PSN comes back, later packets are dropped without another
                // NAK (IBTA 9.7.5.2.8: one NAK per sequence), so RNR rounds do not burn
                // retry_cnt through sequence NAKs.
                self.resp.sent_psn_nak = true;
                self.flush_pending_ack(sh);
                sh.counters.rnr_naks_sent += 1;
                let code = self.attr.min_rnr_timer & 0x1F;
                tracing::debug!(qpn = self.qpn, psn, "RNR NAK sent (no receive posted)");
                self.send_ack(sh, AethKind::RnrNak(code), psn);
            }
            Err(RespErr::Fatal { nak, recv_status }) => {
                // ACK what was executed before the NAK (enter_err would, but after the NAK).
                self.flush_pending_ack(sh);
                tracing::debug!(qpn = self.qpn, psn, nak = ?nak, "NAK sent (responder error)");
                self.send_ack(sh, AethKind::Nak(nak), psn);
                if self.resp.recv_in_use {
                    // The error belongs to a receive WQE: its completion reports it.
                    self.fail_recv_head(sh, recv_status);
                } else {
                    // No receive WQE to carry it: an affiliated async error on this QP.
                    sh.qp_event(responder_error_event(nak), self.qpn);
                }
                self.enter_err(sh);
            }
        }
    }

    fn execute(&mut self, sh: &mut Shared, pkt: &Packet) -> Result<(), RespErr> {
        use Opcode::*;
        let op = pkt.bth.opcode;
        let psn = pkt.bth.psn;
        let seq_ok = match self.resp.cont {
            Some(Cont::Send) => matches!(op, RcSendMiddle | RcSendLast | RcSendLastWithImm),
            Some(Cont::Write) => matches!(
                op,
                RcRdmaWriteMiddle | RcRdmaWriteLast | RcRdmaWriteLastWithImm
            ),
            None => !matches!(
                op,
                RcSendMiddle
                    | RcSendLast
                    | RcSendLastWithImm
                    | RcRdmaWriteMiddle
                    | RcRdmaWriteLast
                    | RcRdmaWriteLastWithImm
            ),
        };
        if !seq_ok {
            return Err(inv_req());
        }
        let is_send = matches!(
            op,
            RcSendFirst
                | RcSendMiddle
                | RcSendLast
                | RcSendLastWithImm
                | RcSendOnly
                | RcSendOnlyWithImm
        );
        let is_write = matches!(
            op,
            RcRdmaWriteFirst
                | RcRdmaWriteMiddle
                | RcRdmaWriteLast
                | RcRdmaWriteLastWithImm
                | RcRdmaWriteOnly
                | RcRdmaWriteOnlyWithImm
        );
        let is_read = op == RcRdmaReadRequest;
        let is_atomic = matches!(op, RcCompareSwap | RcFetchAdd);
        // QP access flags [rxe_resp.c check_op_valid: missing flag -> NAK invalid request].
        let acc = self.attr.qp_access_flags;
        if (is_write && !acc.contains(AccessFlags::REMOTE_WRITE))
            || (is_read && !acc.contains(AccessFlags::REMOTE_READ))
            || (is_atomic && !acc.contains(AccessFlags::REMOTE_ATOMIC))
        {
            return Err(inv_req());
        }
        // Resources [check_resource].
        let needs_recv = matches!(
            op,
            RcSendFirst
                | RcSendOnly
                | RcSendOnlyWithImm
                | RcRdmaWriteLastWithImm
                | RcRdmaWriteOnlyWithImm
        );
        if needs_recv && !self.resp.recv_in_use {
            // From the QP's own RQ, or taken from its SRQ (rxe `check_resource` →
            // `get_srq_wqe`); none: RNR NAK either way.
            if !self.claim_recv(sh) {
                return Err(RespErr::Rnr);
            }
            self.resp.recv_in_use = true;
            self.resp.recv_offset = 0;
        }
        if (is_read || is_atomic) && self.attr.max_dest_rd_atomic == 0 {
            return Err(inv_req());
        }
        // Packet lengths [check_length].
        let mtu = self.mtu() as usize;
        let plen = pkt.payload.len();
        let first = matches!(op, RcSendFirst | RcRdmaWriteFirst);
        let middle = matches!(op, RcSendMiddle | RcRdmaWriteMiddle);
        let last = matches!(
            op,
            RcSendLast | RcSendLastWithImm | RcRdmaWriteLast | RcRdmaWriteLastWithImm
        );
        let len_ok = if first || middle {
            plen == mtu
        } else if last {
            plen > 0 && plen <= mtu
        } else {
            plen <= mtu
        };
        if !len_ok {
            return Err(inv_req());
        }
        let ends = !(first || middle);
        if is_send {
            let Some(r) = self.rq.front() else {
                return Err(inv_req());
            };
            match sh
                .mrs
                .scatter(self.pd, &r.sg_list, self.resp.recv_offset, &pkt.payload)
            {
                Ok(()) => {}
                // Receive buffer too small: the receiver sees LOC_LEN_ERR, the requester a
                // NAK invalid request (IBTA C9-... class C; rxe reports REM_INV_REQ_ERR on the
                // receive side instead).
                Err(crate::mr::ScatterError::Length) => {
                    return Err(RespErr::Fatal {
                        nak: NakCode::InvalidRequest,
                        recv_status: WcStatus::LocLenErr,
                    })
                }
                Err(crate::mr::ScatterError::Protection) => {
                    return Err(RespErr::Fatal {
                        nak: NakCode::RemoteOperationalError,
                        recv_status: WcStatus::LocProtErr,
                    })
                }
            }
            self.resp.recv_offset += plen as u64;
            if ends {
                let byte_len = u32::try_from(self.resp.recv_offset).unwrap_or(u32::MAX);
                self.complete_recv(sh, WcOpcode::Recv, byte_len, pkt);
                self.resp.cont = None;
            } else {
                self.resp.cont = Some(Cont::Send);
            }
        } else if is_write {
            if let Some(reth) = pkt.reth {
                self.resp.write = Some(if reth.dma_len == 0 {
                    WriteCtx {
                        mr: 0,
                        off: 0,
                        resid: 0,
                        len: 0,
                    }
                } else {
                    let (mr, off) = sh
                        .mrs
                        .check_remote(
                            self.pd,
                            reth.rkey,
                            reth.va,
                            u64::from(reth.dma_len),
                            AccessFlags::REMOTE_WRITE,
                        )
                        .ok_or_else(write_access_err)?;
                    WriteCtx {
                        mr,
                        off,
                        resid: reth.dma_len,
                        len: reth.dma_len,
                    }
                });
            }
            let Some(mut ctx) = self.resp.write else {
                return Err(inv_req());
            };
            let plen32 = plen as u32;
            let fits = if ends {
                plen32 == ctx.resid
            } else {
                ctx.resid > plen32
            };
            if !fits {
                return Err(inv_req());
            }
            if plen > 0 {
                sh.mrs
                    .get_mut(ctx.mr)
                    .and_then(|e| e.memory.write(ctx.off, &pkt.payload))
                    .ok_or_else(write_access_err)?;
            }
            ctx.off += plen;
            ctx.resid -= plen32;
            self.resp.write = Some(ctx);
            if ends {
                if pkt.imm.is_some() {
                    self.complete_recv(sh, WcOpcode::RecvRdmaWithImm, ctx.len, pkt);
                }
                self.resp.write = None;
                self.resp.cont = None;
            } else {
                self.resp.cont = Some(Cont::Write);
            }
        } else if is_read {
            let Some(reth) = pkt.reth else {
                return Err(inv_req());
            };
            if reth.dma_len > 0 {
                // The region, and (for the application's own memory) that it is still there:
                // its bytes are read when each response leaves.
                sh.mrs
                    .check_remote(
                        self.pd,
                        reth.rkey,
                        reth.va,
                        u64::from(reth.dma_len),
                        AccessFlags::REMOTE_READ,
                    )
                    .filter(|&(h, off)| sh.mrs.readable(h, off, reth.dma_len as usize))
                    .ok_or(RespErr::Fatal {
                        nak: NakCode::RemoteAccessError,
                        recv_status: WcStatus::RemAccessErr,
                    })?;
            }
            let n = npkts(u64::from(reth.dma_len), self.mtu());
            let res = RdRes::Read {
                first_psn: psn,
                last_psn: psn_add(psn, n - 1),
                va: reth.va,
                rkey: reth.rkey,
                len: reth.dma_len,
            };
            self.push_read_resource(res);
            // The MSN counts the READ when it is executed (IBTA C9-148, rxe).
            self.resp.msn = psn_add(self.resp.msn, 1);
            self.resp.psn = psn_add(psn, n);
            self.flush_pending_ack(sh);
            self.emit_read(sh, res, psn);
            return Ok(());
        } else if is_atomic {
            let Some(a) = pkt.atomic_eth else {
                return Err(inv_req());
            };
            let (mr, off) = sh
                .mrs
                .check_remote(self.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
                .ok_or(RespErr::Fatal {
                    nak: NakCode::RemoteAccessError,
                    recv_status: WcStatus::RemAccessErr,
                })?;
            if a.va & 7 != 0 {
                return Err(inv_req());
            }
            let Some(e) = sh.mrs.get_mut(mr) else {
                return Err(inv_req());
            };
            // A read-modify-write within this call: atomic towards every other device
            // operation (see `ExternalMemory`). Inside the region (checked above), so only
            // memory the application unmapped since can fail: a remote access error.
            let gone = || RespErr::Fatal {
                nak: NakCode::RemoteAccessError,
                recv_status: WcStatus::RemAccessErr,
            };
            let mut b = [0u8; 8];
            e.memory.read(off, &mut b).ok_or_else(gone)?;
            // Atomics operate on little-endian u64s (the byte order of rxe on x86 hosts).
            let orig = u64::from_le_bytes(b);
            let new = if op == RcCompareSwap {
                if orig == a.compare {
                    a.swap_add
                } else {
                    orig
                }
            } else {
                orig.wrapping_add(a.swap_add)
            };
            e.memory.write(off, &new.to_le_bytes()).ok_or_else(gone)?;
            self.push_resource(RdRes::Atomic { psn, orig });
            self.resp.msn = psn_add(self.resp.msn, 1);
            self.resp.psn = psn_add(psn, 1);
            self.flush_pending_ack(sh);
            self.send_atomic_ack(sh, psn, orig);
            return Ok(());
        }
        if self.overrun {
            // Its completion was lost to a CQ overrun: the message is not acknowledged and
            // the QP enters ERR when this packet's handling ends [rxe_resp.c
            // `RESPST_ERR_CQ_OVERFLOW` → `RESPST_ERROR`, no ACK].
            return Ok(());
        }
        if ends {
            self.resp.msn = psn_add(self.resp.msn, 1);
        }
        self.resp.psn = psn_add(psn, 1);
        if pkt.bth.ack_req {
            self.resp.pending_ack = Some(psn);
        }
        Ok(())
    }

    fn complete_recv(&mut self, sh: &mut Shared, opcode: WcOpcode, byte_len: u32, pkt: &Packet) {
        let Some(r) = self.rq.pop_front() else {
            return;
        };
        let mut wc = WorkCompletion::success(r.wr_id, opcode, byte_len, self.qpn);
        if let Some(imm) = pkt.imm {
            wc.imm_data = imm;
            wc.wc_flags |= WcFlags::WITH_IMM;
        }
        self.resp.recv_in_use = false;
        self.resp.recv_offset = 0;
        self.complete(sh, self.init.recv_cq, wc, pkt.bth.se);
    }
}
