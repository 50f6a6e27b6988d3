//! Service ID Resolution (IBTA vol. 1 §12.11; Linux `cm.c`: `ib_send_cm_sidr_req`,
//! `cm_sidr_req_handler`, `ib_send_cm_sidr_rep`, `cm_sidr_rep_handler`): how a UD consumer
//! learns the QPN and Q_Key behind a service ID. No connection results: the active id goes
//! IDLE → SIDR_REQ_SENT → IDLE (SIDR_REP received, or SIDR_REQ_ERROR once its retries ran out),
//! the passive one is made in SIDR_REQ_RCVD and goes IDLE when the SIDR_REP leaves.

use super::*;

/// `enum ib_cm_sidr_status` [ib_cm.h] (IBTA vol. 1 table 120, "Status"), same names and
/// numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum SidrStatus {
    /// `IB_SIDR_SUCCESS`: QPN and Q_Key are valid.
    Success = 0,
    /// `IB_SIDR_UNSUPPORTED`: no listener on the service ID.
    Unsupported = 1,
    /// `IB_SIDR_REJECT`: the consumer rejected the request (`rdma_reject`, or the id was
    /// destroyed before it answered).
    Reject = 2,
    /// `IB_SIDR_NO_QP`.
    NoQp = 3,
    /// `IB_SIDR_REDIRECT`.
    Redirect = 4,
    /// `IB_SIDR_UNSUPPORTED_VERSION`.
    UnsupportedVersion = 5,
}

/// Parameters of `send_sidr_req` (`struct ib_cm_sidr_req_param` as rdma_cm's
/// `cma_resolve_ib_udp` fills it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqParams {
    /// Service ID (rdma_cm: [`wire::ip_service_id`] of the UDP or IPoIB port space).
    pub service_id: u64,
    /// This side's GID.
    pub local_gid: Gid,
    /// The passive side's GID; the SIDR_REQ is sent there.
    pub remote_gid: Gid,
    /// Partition key.
    pub pkey: u16,
    /// SIDR_REQ private data (≤ 216 bytes, else EINVAL).
    pub private_data: Vec<u8>,
}

/// Parameters of `send_sidr_rep` (`struct ib_cm_sidr_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepParams {
    /// The answer.
    pub status: SidrStatus,
    /// This side's UD QPN (meaningful with [`SidrStatus::Success`]).
    pub qpn: u32,
    /// The Q_Key the active side must send with (meaningful with [`SidrStatus::Success`]).
    pub qkey: u32,
    /// Additional information (≤ 72 bytes, else EINVAL).
    pub info: Vec<u8>,
    /// SIDR_REP private data (≤ 136 bytes, else EINVAL).
    pub private_data: Vec<u8>,
}

impl SidrRepParams {
    /// A SIDR_REP carrying only `status` (no QPN, Q_Key, information or private data).
    pub fn status(status: SidrStatus) -> Self {
        SidrRepParams {
            status,
            qpn: 0,
            qkey: 0,
            info: Vec::new(),
            private_data: Vec::new(),
        }
    }
}

impl CmEngine {
    /// `ib_send_cm_sidr_req`: IDLE → SIDR_REQ_SENT. The SIDR_REQ carries the id's Local Comm
    /// ID as its Request ID and is retransmitted every `ms(cm_response_timeout)` (rdma_cm:
    /// `1 << (CMA_CM_RESPONSE_TIMEOUT − 8)` = 4096 ms) up to `max_cm_retries` times; then
    /// the id goes back to IDLE with [`IbCmEventKind::SidrReqError`].
    ///
    /// # Errors
    /// `EINVAL` unless IDLE, or when the private data exceeds 216 bytes.
    pub fn send_sidr_req(
        &mut self,
        now: SimTime,
        id: IbCmId,
        p: &SidrReqParams,
    ) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        if c.state != IbCmState::Idle {
            return Err(wrong_state("send_sidr_req", c.state));
        }
        let tid = self.form_tid(c.local_comm_id);
        let msg = CmMessage::SidrReq(SidrReq {
            request_id: c.local_comm_id,
            partition_key: p.pkey,
            service_id: p.service_id,
            private_data: p.private_data.clone(),
        });
        let mad = Self::encode(&msg, tid)?;
        let cfg = self.cfg;
        if let Some(c) = conn_mut!(self, id) {
            c.tid = tid;
            c.service_id = p.service_id;
            c.local_gid = p.local_gid;
            c.remote_gid = p.remote_gid;
            c.timeout_ms = cm_convert_to_ms(cfg.cm_response_timeout);
            c.max_cm_retries = cfg.max_cm_retries;
            c.set_state(id, IbCmState::SidrReqSent);
        }
        self.queue_with_retries(now, id, p.remote_gid, mad);
        Ok(())
    }

    /// `ib_send_cm_sidr_rep`: SIDR_REQ_RCVD → IDLE; the SIDR_REP (Request ID, service ID and
    /// TID of the request) is sent once: a duplicate SIDR_REQ arriving later starts a new
    /// request, as on Linux.
    ///
    /// # Errors
    /// `EINVAL` in any other state, or for information over 72 / private data over 136 bytes
    /// (nothing sent then).
    pub fn send_sidr_rep(&mut self, id: IbCmId, p: &SidrRepParams) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        if c.state != IbCmState::SidrReqRcvd {
            return Err(wrong_state("send_sidr_rep", c.state));
        }
        let ok = p.status == SidrStatus::Success;
        let msg = CmMessage::SidrRep(SidrRep {
            request_id: c.remote_comm_id,
            status: p.status as u8,
            qpn: if ok { p.qpn & QPN_MASK } else { 0 },
            service_id: c.service_id,
            q_key: if ok { p.qkey } else { 0 },
            additional_information: p.info.clone(),
            private_data: p.private_data.clone(),
            ..SidrRep::default()
        });
        let (mad, dst) = (Self::encode(&msg, c.tid)?, c.remote_gid);
        let key = (c.remote_gid, c.remote_comm_id);
        if self.remote_sidr.get(&key) == Some(&id) {
            self.remote_sidr.remove(&key);
        }
        if let Some(c) = conn_mut!(self, id) {
            if ok {
                c.local_qpn = p.qpn & QPN_MASK;
            }
            c.set_state(id, IbCmState::Idle);
        }
        self.queue(dst, mad);
        Ok(())
    }

    /// `cm_sidr_req_handler`: a SIDR_REQ already being answered (same sender and Request ID)
    /// is a duplicate and dropped (`rx_duplicates`); one whose service ID has no listener is
    /// answered with status 1, unsupported (`rx_no_listener`); one for a listener whose
    /// backlog is full with status 2, reject (`rx_backlog_full`: ucma's handler fails, and
    /// Linux's `cm_destroy_id` rejects a SIDR_REQ_RCVD id); otherwise a new passive id in
    /// SIDR_REQ_RCVD reports [`IbCmEventKind::SidrReqReceived`].
    pub(super) fn on_sidr_req(&mut self, src: Gid, tid: u64, m: SidrReq) {
        let key = (src, m.request_id);
        if self.remote_sidr.contains_key(&key) {
            log::mad_dropped("SIDR_REQ", "rx_duplicates: a SIDR_REQ already received");
            self.counters.rx_duplicates += 1;
            return;
        }
        let answer = |e: &mut CmEngine, status: SidrStatus| {
            let rep = CmMessage::SidrRep(SidrRep {
                request_id: m.request_id,
                status: status as u8,
                service_id: m.service_id,
                ..SidrRep::default()
            });
            if let Ok(mad) = Self::encode(&rep, tid) {
                e.queue(src, mad);
            }
        };
        let Some(&listen_id) = self.listeners.get(&m.service_id) else {
            log::mad_dropped(
                "SIDR_REQ",
                "rx_no_listener: no listener on its service ID (SIDR_REP status 1)",
            );
            self.counters.rx_no_listener += 1;
            answer(self, SidrStatus::Unsupported);
            return;
        };
        if !self.take_backlog_slot(listen_id) {
            log::mad_dropped(
                "SIDR_REQ",
                "rx_backlog_full: the listener's backlog is full (SIDR_REP status 2)",
            );
            self.counters.rx_backlog_full += 1;
            answer(self, SidrStatus::Reject);
            return;
        }
        let id = self.create_id();
        if let Some(c) = conn_mut!(self, id) {
            c.remote_comm_id = m.request_id;
            c.remote_gid = src;
            c.service_id = m.service_id;
            c.tid = tid;
            c.listen_id = Some(listen_id);
            c.set_state(id, IbCmState::SidrReqRcvd);
        }
        self.remote_sidr.insert(key, id);
        self.event(
            id,
            IbCmEventKind::SidrReqReceived(SidrReqInfo {
                listen_id,
                remote_gid: src,
                service_id: m.service_id,
                pkey: m.partition_key,
                private_data: m.private_data,
            }),
        );
    }

    /// `cm_sidr_rep_handler`: the id whose Local Comm ID is the Request ID, in SIDR_REQ_SENT and
    /// talking to the sender, goes back to IDLE (its retransmission cancelled) and reports
    /// [`IbCmEventKind::SidrRepReceived`]; anything else is dropped (`rx_unmatched`,
    /// `rx_wrong_state`, `rx_wrong_source`).
    pub(super) fn on_sidr_rep(&mut self, src: Gid, m: SidrRep) {
        let Some(id) = self.lookup(m.request_id, 0) else {
            log::mad_dropped("SIDR_REP", "rx_unmatched: no id has this Request ID");
            self.counters.rx_unmatched += 1;
            return;
        };
        if self.state(id) != Some(IbCmState::SidrReqSent) {
            log::mad_dropped("SIDR_REP", "rx_wrong_state: no SIDR_REQ outstanding");
            self.counters.rx_wrong_state += 1;
            return;
        }
        if !self.sent_by_peer(id, src) {
            return;
        }
        if let Some(c) = conn_mut!(self, id) {
            c.pending = None;
            c.set_state(id, IbCmState::Idle);
        }
        self.event(
            id,
            IbCmEventKind::SidrRepReceived(SidrRepInfo {
                status: m.status,
                qpn: m.qpn,
                qkey: m.q_key,
                info: m.additional_information,
                private_data: m.private_data,
            }),
        );
    }

    /// Takes one backlog slot of listener `listen_id`; false when it has none left (or is not
    /// a listener).
    pub(super) fn take_backlog_slot(&mut self, listen_id: IbCmId) -> bool {
        self.conns
            .get_mut(&listen_id)
            .and_then(|c| c.listener.as_mut())
            .is_some_and(|l| {
                if l.pending >= l.backlog {
                    false
                } else {
                    l.pending += 1;
                    true
                }
            })
    }
}
