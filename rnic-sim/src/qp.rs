//! Queue pairs: the verbs side (queues, post checks, state changes, flushes). The RC transport
//! that moves the queues' work over the wire is in [`crate::rc`].

use crate::gather::Gather;
use crate::mr::MrTable;
use crate::shared::{Shared, WcQueue};
use bytes::Bytes;
use std::collections::VecDeque;
use std::ops::Range;
use verbs_core::{
    AsyncElement, AsyncEvent, AsyncEventType, CqHandle, Errno, Error, Gid, QpAttr, QpInitAttr,
    QpState, QpType, RecvWr, SendFlags, SendWr, SimTime, WcFlags, WcStatus, WorkCompletion,
    WrOpcode,
};

/// Largest message, in bytes (`RXE_PORT_MAX_MSG_SZ`, 2^31 [rxe_param.h]).
pub(crate) const MAX_MSG_SZ: u64 = 1 << 31;

/// A send WQE and the requester's progress on it.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    /// The posted request.
    pub wr: SendWr,
    /// The payload of an INLINE SEND/WRITE, copied at post time. Otherwise `None`: each
    /// packet reads its part of the SGE list's memory when it leaves (crate `gather`).
    pub payload: Option<Bytes>,
    /// True once PSNs are assigned and the first packet left.
    pub started: bool,
    /// First PSN of the message.
    pub first_psn: u32,
    /// Last PSN of the message (a READ spans one PSN per response packet).
    pub last_psn: u32,
    /// Packets (PSNs) the message spans.
    pub npkts: u32,
    /// Index of the next packet to (re)transmit.
    pub next_pkt: u32,
    /// True while it holds one of the QP's `max_rd_atomic` READ/atomic credits.
    pub rd_credit: bool,
    /// A local error found when the requester started it; it completes with this status when
    /// it reaches the head of the send queue [rxe_req.c, rxe_comp.c `wqe_state_error`].
    pub error: Option<WcStatus>,
}

impl SendWqe {
    fn new(wr: SendWr, payload: Option<Bytes>) -> Self {
        SendWqe {
            wr,
            payload,
            started: false,
            first_psn: 0,
            last_psn: 0,
            npkts: 0,
            next_pkt: 0,
            rd_credit: false,
            error: None,
        }
    }

    /// True for READ and the atomics (they need a credit and a response).
    pub fn is_rd_atomic(&self) -> bool {
        self.wr.opcode == WrOpcode::RdmaRead || self.wr.opcode.is_atomic()
    }
}

/// The requester and completer state of a QP (rxe's `qp->req` and `qp->comp`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Requester {
    /// Index into the send queue of the WQE to transmit from next.
    pub next: usize,
    /// PSN the next new WQE starts at (24 bits); retransmissions take their PSNs from the
    /// WQE's own `first_psn`.
    pub psn: u32,
    /// Oldest PSN not yet acknowledged (24 bits).
    pub comp_psn: u32,
    /// READ/atomic requests outstanding (bounded by `max_rd_atomic`).
    pub rd_outstanding: u32,
    /// Packets sent since the last one that asked for an ACK.
    pub noack_pkts: u32,
    /// Transport retries left (from `retry_cnt`).
    pub retry_left: u8,
    /// RNR retries left (from `rnr_retry`; 7 = infinite).
    pub rnr_left: u8,
    /// Retransmit timer deadline.
    pub retrans_at: Option<SimTime>,
    /// RNR back-off deadline: the requester sends nothing until then.
    pub rnr_at: Option<SimTime>,
    /// True while READ response packets of a multi-packet response are arriving.
    pub read_cont: bool,
    /// A go-back-N caused by a NAK or a response past a missing one is under way: further such
    /// triggers are ignored until progress is made or the timer fires (rxe
    /// `comp.started_retry` [rxe_comp.c]).
    pub started_retry: bool,
    /// One past the highest PSN a request sent covers (a READ request covers the PSNs of
    /// its responses): PSNs from `comp_psn` to it are charged to the peer's send budget.
    pub sent_high: u32,
    /// Bytes this QP has charged to the send budget of `charged_to` (crate `shared::budget`).
    pub charged: u64,
    /// The peer the charge is counted at.
    pub charged_to: Gid,
}

/// A message the responder is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cont {
    /// SEND FIRST or MIDDLE seen.
    Send,
    /// RDMA WRITE FIRST or MIDDLE seen.
    Write,
}

/// Where an incoming RDMA WRITE lands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteCtx {
    /// MR handle.
    pub mr: u32,
    /// Byte offset of the next byte in the MR.
    pub off: usize,
    /// Bytes still expected.
    pub resid: u32,
    /// Total DMA length of the message.
    pub len: u32,
}

/// A responder resource: what is needed to answer a duplicate READ or atomic again
/// [rxe_resp.c `resp_res`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum RdRes {
    /// An RDMA READ.
    Read {
        /// First response PSN.
        first_psn: u32,
        /// Last response PSN.
        last_psn: u32,
        /// Remote address requested.
        va: u64,
        /// Remote key.
        rkey: u32,
        /// Length requested.
        len: u32,
    },
    /// An atomic, with the original value it returned.
    Atomic {
        /// Its PSN.
        psn: u32,
        /// The value before the operation.
        orig: u64,
    },
}

/// The responder state of a QP (rxe's `qp->resp`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Responder {
    /// Expected PSN of the next request (24 bits).
    pub psn: u32,
    /// Message sequence number: completed requests (24 bits).
    pub msn: u32,
    /// Message in progress.
    pub cont: Option<Cont>,
    /// True while the head receive WQE is being filled by the current message.
    pub recv_in_use: bool,
    /// Bytes already scattered into the head receive WQE.
    pub recv_offset: u64,
    /// Target of the RDMA WRITE in progress.
    pub write: Option<WriteCtx>,
    /// A PSN-sequence NAK was sent and no in-order packet arrived since (send it once).
    pub sent_psn_nak: bool,
    /// A coalesced ACK to send (its PSN), emitted when the device next transmits.
    pub pending_ack: Option<u32>,
    /// READ/atomic responder resources, oldest first (at most `max_dest_rd_atomic`).
    pub resources: VecDeque<RdRes>,
}

/// A queue pair of the simulated device.
#[derive(Debug, Clone)]
pub(crate) struct SimQp {
    /// QP number (24 bits; never 0; 1 only for the GSI QP).
    pub qpn: u32,
    /// Protection domain handle value.
    pub pd: u32,
    /// Creation attributes (with the granted caps).
    pub init: QpInitAttr,
    /// Current attributes; `attr.qp_state` is the state.
    pub attr: QpAttr,
    /// Send queue, oldest first; completed WQEs are removed.
    pub sq: VecDeque<SendWqe>,
    /// Receive queue, oldest first. On a QP created with an SRQ it holds at most the one WQE
    /// the message in progress took from the SRQ (rxe's `qp->resp.srq_wqe`).
    pub rq: VecDeque<RecvWr>,
    /// Requester/completer state.
    pub req: Requester,
    /// Responder state.
    pub resp: Responder,
    /// A completion was lost to a CQ overrun: the QP enters ERR when the current operation ends
    /// (rdmavt behaviour).
    pub overrun: bool,
    /// COMM_EST was raised since the last entry to RTR.
    pub comm_est_raised: bool,
    /// QP_FATAL was raised for a completion lost to a CQ overrun since the QP last left RESET
    /// (raised once).
    pub fatal_raised: bool,
    /// The QP's own transport counters, over its whole life.
    pub counters: crate::shared::QpCounters,
}

impl SimQp {
    /// A QP in RESET.
    pub fn new(qpn: u32, pd: u32, init: QpInitAttr) -> Self {
        let attr = QpAttr {
            cap: init.cap,
            ..QpAttr::default()
        };
        SimQp {
            qpn,
            pd,
            init,
            attr,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            req: Requester::default(),
            resp: Responder::default(),
            overrun: false,
            comm_est_raised: false,
            fatal_raised: false,
            counters: crate::shared::QpCounters::default(),
        }
    }

    /// The state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// Path MTU in bytes.
    pub fn mtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// Pushes a completion to `cq`; a lost completion (overrun) marks the QP for ERR and, the
    /// first time, raises `QP_FATAL` on it — after the CQ's `CQ_ERR` when this completion is
    /// the one that overran the CQ (IBTA C11-37; docs/semantics-verbs.md "CQ overrun").
    pub fn complete(&mut self, sh: &mut Shared, cq: CqHandle, wc: WorkCompletion, se: bool) {
        if !sh.complete(cq, wc, se) {
            self.overrun = true;
            if !self.fatal_raised {
                self.fatal_raised = true;
                sh.qp_event(AsyncEventType::QpFatal, self.qpn);
            }
        }
    }

    /// Completes the head send WQE with `status` (a completion is made when unsuccessful,
    /// signaled or `sq_sig_all` [rxe_comp.c `do_complete`, IBTA 10.7.3.1]) and removes it.
    pub fn complete_head(&mut self, sh: &mut Shared, status: WcStatus) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        self.req.next = self.req.next.saturating_sub(1);
        if w.rd_credit {
            self.req.rd_outstanding = self.req.rd_outstanding.saturating_sub(1);
        }
        let signaled = self.init.sq_sig_all || w.wr.send_flags.contains(SendFlags::SIGNALED);
        if status == WcStatus::Success && !signaled {
            return;
        }
        let wc = if status == WcStatus::Success {
            let mut wc = WorkCompletion::success(
                w.wr.wr_id,
                w.wr.opcode.wc_opcode(),
                u32::try_from(w.wr.total_len()).unwrap_or(u32::MAX),
                self.qpn,
            );
            if w.wr.opcode.has_imm() {
                wc.wc_flags = WcFlags::WITH_IMM;
            }
            wc
        } else {
            crate::log::completion_error(self.qpn, w.wr.wr_id, status, "send");
            sh.error_wc(w.wr.wr_id, status, self.qpn, WcQueue::Send)
        };
        self.complete(sh, self.init.send_cq, wc, false);
    }

    /// Completes the head receive WQE with an error status and removes it.
    pub fn fail_recv_head(&mut self, sh: &mut Shared, status: WcStatus) {
        if let Some(r) = self.rq.pop_front() {
            crate::log::completion_error(self.qpn, r.wr_id, status, "recv");
            let wc = sh.error_wc(r.wr_id, status, self.qpn, WcQueue::Recv);
            self.complete(sh, self.init.recv_cq, wc, true);
        }
        self.resp.recv_in_use = false;
        self.resp.recv_offset = 0;
    }

    /// Enters ERR and flushes synchronously: every send WQE, then every receive WQE, completes
    /// with `WR_FLUSH_ERR` in post order (man:ibv_modify_qp.3, cm-spec §5.3). A WQE that caused
    /// the error must have been completed with its real status before this is called.
    ///
    /// rxe flushes from its tasks shortly after the state change; doing it here, inside the
    /// call that caused the error, gives the same order and makes the moment deterministic.
    ///
    /// A coalesced ACK still pending is sent first, on every path into ERR (fatal NAK, CQ
    /// overrun, requester error, `modify_qp`): rxe acknowledges each ACK-requesting packet
    /// while handling it [rxe_resp.c `COMPLETE` → `ACKNOWLEDGE` → `send_ack`], so every
    /// message the responder executed and completed is acknowledged even if the QP fails
    /// right after.
    pub fn enter_err(&mut self, sh: &mut Shared) {
        self.flush_pending_ack(sh);
        crate::log::entered_err(self.qpn, self.state(), self.sq.len(), self.rq.len());
        self.attr.qp_state = QpState::Err;
        self.release_charge(sh);
        sh.entered_err.insert(self.qpn);
        while let Some(w) = self.sq.pop_front() {
            let wc = sh.error_wc(w.wr.wr_id, WcStatus::WrFlushErr, self.qpn, WcQueue::Send);
            self.complete(sh, self.init.send_cq, wc, false);
        }
        while let Some(r) = self.rq.pop_front() {
            let wc = sh.error_wc(r.wr_id, WcStatus::WrFlushErr, self.qpn, WcQueue::Recv);
            self.complete(sh, self.init.recv_cq, wc, true);
        }
        if self.init.srq.is_some() {
            // The SRQ's own WQEs stay for its other QPs: only the one taken above is flushed.
            // Then the QP will take no more: Last WQE Reached, once per entry to ERR (IBTA
            // 11.6.3 affiliated asynchronous events; mlx5 `MLX5_EVENT_TYPE_SRQ_LAST_WQE`; rxe
            // `flush_recv_queue`, which raises it each time its receiver task runs in ERR
            // and flushes no taken WQE; the event kernel `ib_drain_qp` → `__ib_drain_srq`
            // waits for).
            sh.qp_event(AsyncEventType::QpLastWqeReached, self.qpn);
        }
        self.clear_transport();
        self.overrun = false;
    }

    /// Makes sure a receive WQE is at the head of `rq` for a message that needs one: on a QP
    /// with an SRQ, takes the SRQ's oldest WQE when `rq` is empty (rxe `get_srq_wqe`), raising
    /// `IBV_EVENT_SRQ_LIMIT_REACHED` when that take fired the SRQ's limit. False when there is
    /// none (the caller answers RNR, or drops a UD datagram).
    pub fn claim_recv(&mut self, sh: &mut Shared) -> bool {
        if !self.rq.is_empty() {
            return true;
        }
        let Some(h) = self.init.srq else {
            return false;
        };
        let Some((wr, fired)) = sh.srqs.get_mut(&h.0).and_then(crate::srq::Srq::take) else {
            return false;
        };
        if fired {
            let e = AsyncEvent {
                event_type: AsyncEventType::SrqLimitReached,
                element: AsyncElement::Srq(h),
            };
            crate::log::async_event(&e);
            sh.events.push_back(e);
        }
        self.rq.push_back(wr);
        true
    }

    /// The receive WQE the next message would land in, not taken: the head of `rq`, else the
    /// SRQ's oldest.
    pub fn peek_recv<'a>(&'a self, sh: &'a Shared) -> Option<&'a RecvWr> {
        match (self.rq.front(), self.init.srq) {
            (Some(r), _) => Some(r),
            (None, Some(h)) => sh.srqs.get(&h.0).and_then(crate::srq::Srq::front),
            (None, None) => None,
        }
    }

    /// If a completion was lost to an overrun during the current operation, enters ERR.
    pub fn settle(&mut self, sh: &mut Shared) {
        if self.overrun && self.state() != QpState::Err {
            self.enter_err(sh);
        }
        self.overrun = false;
    }

    /// Back to RESET: both queues emptied without completions, transport state cleared.
    pub fn reset(&mut self) {
        self.sq.clear();
        self.rq.clear();
        self.clear_transport();
        if self.state() != QpState::Reset {
            crate::log::qp_state(self.qpn, self.state(), QpState::Reset);
        }
        self.attr.qp_state = QpState::Reset;
        self.comm_est_raised = false;
        self.fatal_raised = false;
    }

    /// Clears requester/responder progress (keeps the attributes).
    fn clear_transport(&mut self) {
        self.req = Requester {
            psn: self.attr.sq_psn,
            comp_psn: self.attr.sq_psn,
            sent_high: self.attr.sq_psn,
            retry_left: self.attr.retry_cnt,
            rnr_left: self.attr.rnr_retry,
            ..Requester::default()
        };
        self.resp = Responder {
            psn: self.attr.rq_psn,
            ..Responder::default()
        };
    }

    /// Raises COMM_EST once, on the first request packet the responder accepts since the QP
    /// entered RTR — in RTR or, as after `rdma_accept` (which moves the passive QP to RTR and
    /// RTS before the REP leaves), in RTS or SQD. IBTA 11.6.3.1 names the event for a QP in
    /// RTR; ConnectX raises it as a firmware event (`MLX5_EVENT_TYPE_COMM_EST` →
    /// `IB_EVENT_COMM_EST`, `mlx5_ib_qp_event`) and the kernel's rdma_cm targets that accept in
    /// RTS answer it with `rdma_notify` (nvmet-rdma `nvmet_rdma_qp_event`, isert); rdmavt
    /// raises it in RTR only; rxe never. docs/semantics-verbs.md "Async events".
    pub fn note_first_request(&mut self, sh: &mut Shared) {
        if !self.comm_est_raised {
            self.comm_est_raised = true;
            sh.qp_event(AsyncEventType::CommEst, self.qpn);
        }
    }

    /// Checks one send WR as `ibv_post_send` does before queueing it [rxe_verbs.c
    /// `validate_send_wr`] and returns its inline payload, if any.
    pub fn validate_send(&self, sh: &Shared, wr: &SendWr) -> Result<Option<Bytes>, Error> {
        let ok_opcode = match self.init.qp_type {
            QpType::Ud => matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            QpType::Rc | QpType::Uc => true,
        };
        if !ok_opcode {
            return Err(Error::inval(format!(
                "{:?} not valid on a {:?} QP",
                wr.opcode, self.init.qp_type
            )));
        }
        if wr.sg_list.len() > self.init.cap.max_send_sge as usize {
            return Err(Error::inval(format!(
                "{} SGEs > max_send_sge {}",
                wr.sg_list.len(),
                self.init.cap.max_send_sge
            )));
        }
        let len = wr.total_len();
        if len > MAX_MSG_SZ {
            return Err(Error::inval("message longer than 2^31 bytes"));
        }
        if wr.opcode.is_atomic() {
            if len != 8 {
                return Err(Error::inval("atomic length != 8"));
            }
            if wr.atomic.remote_addr & 7 != 0 {
                return Err(Error::inval("misaligned atomic address"));
            }
        }
        if self.init.qp_type == QpType::Ud && len > u64::from(self.mtu()) {
            return Err(Error::inval("UD message longer than the path MTU"));
        }
        if wr.send_flags.contains(SendFlags::INLINE) {
            if !matches!(
                wr.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
            ) {
                return Err(Error::inval("opcode does not take inline data"));
            }
            if len > u64::from(self.init.cap.max_inline_data) {
                return Err(Error::inval("inline data longer than max_inline_data"));
            }
            let data = sh
                .mrs
                .gather_inline(&wr.sg_list)
                .ok_or_else(|| Error::inval("inline SGE outside every registered region"))?;
            return Ok(Some(Bytes::from(data)));
        }
        Ok(None)
    }

    /// `ibv_post_send` on this QP.
    pub fn post_send(
        &mut self,
        sh: &mut Shared,
        wrs: &[SendWr],
    ) -> Result<(), verbs_core::PostError> {
        use verbs_core::PostError;
        if matches!(
            self.state(),
            QpState::Reset | QpState::Init | QpState::Rtr | QpState::Unknown
        ) {
            return Err(PostError {
                error: Error::inval(format!("post_send in {:?}", self.state())),
                bad_wr: 0,
            });
        }
        for (i, wr) in wrs.iter().enumerate() {
            let payload = self
                .validate_send(sh, wr)
                .map_err(|error| PostError { error, bad_wr: i })?;
            if self.state() == QpState::Err {
                // Accepted and flushed at once (rxe; cm-spec §5.4).
                let wc = sh.error_wc(wr.wr_id, WcStatus::WrFlushErr, self.qpn, WcQueue::Send);
                self.complete(sh, self.init.send_cq, wc, false);
                continue;
            }
            if self.sq.len() >= self.init.cap.max_send_wr as usize {
                return Err(PostError {
                    error: Error::new(Errno::ENOMEM, "send queue full"),
                    bad_wr: i,
                });
            }
            self.sq.push_back(SendWqe::new(wr.clone(), payload));
        }
        self.settle(sh);
        Ok(())
    }

    /// `ibv_post_recv` on this QP.
    pub fn post_recv(
        &mut self,
        sh: &mut Shared,
        wrs: &[RecvWr],
    ) -> Result<(), verbs_core::PostError> {
        use verbs_core::PostError;
        if self.init.srq.is_some() {
            // rdma-core `providers/rxe/rxe.c` `rxe_post_recv`: a QP on an SRQ has no receive
            // queue (`!rq->queue`) → EINVAL, before the state is looked at.
            return Err(PostError {
                error: Error::inval("post_recv on a QP created with an SRQ"),
                bad_wr: 0,
            });
        }
        if matches!(self.state(), QpState::Reset | QpState::Unknown) {
            return Err(PostError {
                error: Error::inval("post_recv in RESET"),
                bad_wr: 0,
            });
        }
        for (i, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.init.cap.max_recv_sge as usize {
                return Err(PostError {
                    error: Error::inval(format!(
                        "{} SGEs > max_recv_sge {}",
                        wr.sg_list.len(),
                        self.init.cap.max_recv_sge
                    )),
                    bad_wr: i,
                });
            }
            if self.state() == QpState::Err {
                let wc = sh.error_wc(wr.wr_id, WcStatus::WrFlushErr, self.qpn, WcQueue::Recv);
                self.complete(sh, self.init.recv_cq, wc, true);
                continue;
            }
            if self.rq.len() >= self.init.cap.max_recv_wr as usize {
                return Err(PostError {
                    error: Error::new(Errno::ENOMEM, "receive queue full"),
                    bad_wr: i,
                });
            }
            self.rq.push_back(wr.clone());
        }
        self.settle(sh);
        Ok(())
    }
}

/// The payload of bytes `range` of a SEND/WRITE WQE's message: a slice of its inline data, or
/// empty bytes and the [`Gather`] of its SGE list that the packet leaves with (none for an
/// empty range). `None` when an SGE no longer resolves ([`Gather::of_sges`]).
pub(crate) fn request_payload(
    mrs: &MrTable,
    pd: u32,
    w: &SendWqe,
    range: Range<usize>,
) -> Option<(Bytes, Option<Gather>)> {
    if let Some(inline) = &w.payload {
        let end = range.end.min(inline.len());
        return Some((inline.slice(range.start.min(end)..end), None));
    }
    if range.is_empty() {
        return Some((Bytes::new(), None));
    }
    let g = Gather::of_sges(mrs, pd, &w.wr.sg_list, range.start as u64, range.len())?;
    Some((Bytes::new(), Some(g)))
}
