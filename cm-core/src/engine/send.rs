//! The send side of the [`CmEngine`]: the API commands that put a MAD on the wire — REQ, REP,
//! RTU, REJ, DREQ, DREP — and `establish` (Linux `ib_send_cm_*`, cm-spec §3.1, §4).

use super::*;

impl CmEngine {
    /// `ib_send_cm_req`: IDLE → REQ_SENT; the REQ is retransmitted every
    /// `2·ms(PLT) + ms(cm_response_timeout)` up to `max_cm_retries` times (cm-spec §3.2).
    ///
    /// # Errors
    /// `EINVAL` unless IDLE, or when the private data exceeds 92 bytes.
    pub fn send_req(&mut self, now: SimTime, id: IbCmId, p: &ReqParams) -> Result<(), Error> {
        let cfg = self.cfg;
        let tid;
        let msg;
        {
            let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
            if c.state != IbCmState::Idle {
                return Err(wrong_state("send_req", c.state));
            }
            tid = self.form_tid(c.local_comm_id);
            let subnet_local = cfg.hop_limit <= 1;
            let lid = if subnet_local { 0 } else { 0xFFFF };
            msg = CmMessage::Req(Req {
                local_comm_id: c.local_comm_id,
                service_id: p.service_id,
                local_ca_guid: cfg.ca_guid,
                local_qpn: p.local_qpn & QPN_MASK,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                remote_cm_response_timeout: cfg.cm_response_timeout,
                starting_psn: c.psn,
                local_cm_response_timeout: cfg.cm_response_timeout,
                retry_count: p.retry_count.min(7),
                partition_key: DEFAULT_PKEY,
                path_packet_payload_mtu: cfg.path_mtu.raw(),
                rnr_retry_count: p.rnr_retry_count.min(7),
                max_cm_retries: cfg.max_cm_retries,
                srq: p.srq,
                primary_path: ReqPath {
                    local_port_lid: lid,
                    remote_port_lid: lid,
                    local_port_gid: p.local_gid,
                    remote_port_gid: p.remote_gid,
                    hop_limit: cfg.hop_limit,
                    subnet_local,
                    local_ack_timeout: cm_ack_timeout(cfg.ack_delay, cfg.packet_life_time),
                    ..ReqPath::default()
                },
                private_data: p.private_data.clone(),
                ..Req::default()
            });
        }
        let mad = Self::encode(&msg, tid)?;
        if let Some(c) = conn_mut!(self, id) {
            c.tid = tid;
            c.local_gid = p.local_gid;
            c.local_qpn = p.local_qpn & QPN_MASK;
            c.responder_resources = p.responder_resources;
            c.initiator_depth = p.initiator_depth;
            c.retry_count = p.retry_count.min(7);
            c.rnr_retry_count = p.rnr_retry_count.min(7);
            c.max_cm_retries = cfg.max_cm_retries;
            c.av_timeout = cfg.packet_life_time.saturating_add(1).min(31);
            c.timeout_ms = 2 * cm_convert_to_ms(cfg.packet_life_time)
                + cm_convert_to_ms(cfg.cm_response_timeout);
            c.set_state(id, IbCmState::ReqSent);
        }
        self.set_peer(id, p.remote_gid);
        self.queue_with_retries(now, id, p.remote_gid, mad);
        Ok(())
    }

    /// `ib_send_cm_rep`: REQ_RCVD/MRA_REQ_SENT → REP_SENT; retransmitted every
    /// `ms(REQ.LocalCMResponseTimeout)` up to REQ.MaxCMRetries times (cm-spec §3.2).
    ///
    /// # Errors
    /// `EINVAL` in any other state, or when the private data exceeds 196 bytes.
    pub fn send_rep(&mut self, now: SimTime, id: IbCmId, p: &RepParams) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        if !matches!(c.state, IbCmState::ReqRcvd | IbCmState::MraReqSent) {
            return Err(wrong_state("send_rep", c.state));
        }
        let msg = CmMessage::Rep(Rep {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            local_qpn: p.local_qpn & QPN_MASK,
            starting_psn: c.psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.cfg.ack_delay,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq,
            local_ca_guid: self.cfg.ca_guid,
            private_data: p.private_data.clone(),
            ..Rep::default()
        });
        let (mad, dst) = (Self::encode(&msg, c.tid)?, c.remote_gid);
        if let Some(c) = conn_mut!(self, id) {
            c.local_qpn = p.local_qpn & QPN_MASK;
            c.responder_resources = p.responder_resources;
            c.initiator_depth = p.initiator_depth;
            c.set_state(id, IbCmState::RepSent);
        }
        self.queue_with_retries(now, id, dst, mad);
        Ok(())
    }

    /// `ib_send_cm_rtu`: REP_RCVD/MRA_REP_SENT → ESTABLISHED; RTU sent once (no retries); its
    /// private data is kept to answer duplicate REPs.
    ///
    /// # Errors
    /// `EINVAL` in any other state or for private data over 224 bytes.
    pub fn send_rtu(&mut self, id: IbCmId, private_data: &[u8]) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        if !matches!(c.state, IbCmState::RepRcvd | IbCmState::MraRepSent) {
            return Err(wrong_state("send_rtu", c.state));
        }
        let mad = Self::encode(&Self::rtu_msg(c, private_data), c.tid)?;
        let dst = c.remote_gid;
        if let Some(c) = conn_mut!(self, id) {
            c.rtu_private_data = private_data.to_vec();
            c.set_state(id, IbCmState::Established);
        }
        self.queue(dst, mad);
        Ok(())
    }

    pub(super) fn rtu_msg(c: &Conn, private_data: &[u8]) -> CmMessage {
        CmMessage::Rtu(Rtu {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            private_data: private_data.to_vec(),
        })
    }

    /// `ib_send_cm_rej` (cm-spec §3.3): from REQ_SENT, MRA_REQ_RCVD, REQ_RCVD, MRA_REQ_SENT,
    /// REP_RCVD, MRA_REP_SENT → IDLE; from REP_SENT, MRA_REP_RCVD → TIMEWAIT. The REJ's
    /// Local Comm ID and Message Rejected follow `cm_format_rej` (cm-spec §2.5).
    ///
    /// # Errors
    /// `EINVAL` in any other state, or ARI over 72 / private data over 148 bytes.
    pub fn send_rej(
        &mut self,
        now: SimTime,
        id: IbCmId,
        reason: RejectReason,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), Error> {
        use IbCmState as S;
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        let timewait = match c.state {
            S::ReqSent
            | S::MraReqRcvd
            | S::ReqRcvd
            | S::MraReqSent
            | S::RepRcvd
            | S::MraRepSent => false,
            S::RepSent | S::MraRepRcvd => true,
            other => return Err(wrong_state("send_rej", other)),
        };
        let (local, msg_rej) = match c.state {
            S::ReqRcvd => (0, CmMsgResponse::Req),
            S::MraReqSent => (c.local_comm_id, CmMsgResponse::Req),
            S::RepRcvd | S::MraRepSent => (c.local_comm_id, CmMsgResponse::Rep),
            _ => (c.local_comm_id, CmMsgResponse::Other),
        };
        let msg = CmMessage::Rej(Rej {
            local_comm_id: local,
            remote_comm_id: c.remote_comm_id,
            message_rejected: msg_rej,
            reason: reason.into(),
            ari: ari.to_vec(),
            private_data: private_data.to_vec(),
        });
        let mad = Self::encode(&msg, c.tid)?;
        let dst = c.remote_gid;
        if timewait {
            self.enter_timewait(now, id);
        } else {
            self.reset_to_idle(id);
        }
        self.queue(dst, mad);
        Ok(())
    }

    /// `ib_send_cm_dreq`: ESTABLISHED → DREQ_SENT; the DREQ is retransmitted with the id's
    /// timeout and retry budget (cm-spec §3.2, §3.3).
    ///
    /// # Errors
    /// `EINVAL` in any other state (nothing sent) or for private data over 220 bytes.
    pub fn send_dreq(
        &mut self,
        now: SimTime,
        id: IbCmId,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        if c.state != IbCmState::Established {
            return Err(wrong_state("send_dreq", c.state));
        }
        let msg = CmMessage::Dreq(Dreq {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            remote_qpn_eecn: c.remote_qpn,
            private_data: private_data.to_vec(),
        });
        let mad = Self::encode(&msg, self.form_tid(c.local_comm_id))?;
        let dst = c.remote_gid;
        if let Some(c) = conn_mut!(self, id) {
            c.set_state(id, IbCmState::DreqSent);
        }
        self.queue_with_retries(now, id, dst, mad);
        Ok(())
    }

    /// `ib_send_cm_drep`: DREQ_RCVD → TIMEWAIT, DREP sent once with the DREQ's TID; its private
    /// data is kept to answer duplicate DREQs during TimeWait (cm-spec §3.3).
    ///
    /// # Errors
    /// `EINVAL` in any other state (nothing sent) or for private data over 224 bytes.
    pub fn send_drep(
        &mut self,
        now: SimTime,
        id: IbCmId,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        if c.state != IbCmState::DreqRcvd {
            return Err(wrong_state("send_drep", c.state));
        }
        let mad = Self::encode(&Self::drep_msg(c, private_data), c.dreq_tid)?;
        let dst = c.remote_gid;
        if let Some(c) = conn_mut!(self, id) {
            c.drep_private_data = private_data.to_vec();
        }
        self.enter_timewait(now, id);
        self.queue(dst, mad);
        Ok(())
    }

    pub(super) fn drep_msg(c: &Conn, private_data: &[u8]) -> CmMessage {
        CmMessage::Drep(Drep {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            private_data: private_data.to_vec(),
        })
    }

    /// `ib_cm_notify(IB_EVENT_COMM_EST)`: REP_SENT/MRA_REP_RCVD → ESTABLISHED with event
    /// USER_ESTABLISHED (data arrived before the RTU, cm-spec §4.3 step 5).
    ///
    /// # Errors
    /// `EISCONN` when already ESTABLISHED; `EINVAL` in any other state (Linux `cm_establish`:
    /// `case IB_CM_ESTABLISHED: ret = -EISCONN`, `default: ret = -EINVAL`).
    pub fn establish(&mut self, id: IbCmId) -> Result<(), Error> {
        let c = conn_mut!(self, id).ok_or_else(|| no_id(id))?;
        if c.state == IbCmState::Established {
            return Err(Error::new(
                Errno::EISCONN,
                "establish: the connection is ESTABLISHED already",
            ));
        }
        if !matches!(c.state, IbCmState::RepSent | IbCmState::MraRepRcvd) {
            return Err(wrong_state("establish", c.state));
        }
        c.pending = None;
        c.set_state(id, IbCmState::Established);
        self.event(id, IbCmEventKind::UserEstablished);
        Ok(())
    }
}
