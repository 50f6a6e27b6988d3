//! The receive side of the [`CmEngine`]: decoding a MAD and the handler of each message
//! (Linux `cm.c`'s `cm_*_handler`s, cm-spec §3.3, §3.4). A MAD that fails to decode or match
//! is counted in [`CmCounters`](super::CmCounters) and dropped.

use super::*;

impl CmEngine {
    /// Processes one received MAD from `src` (cm-spec §3.3, §3.4). Never panics; anything that
    /// fails to decode or match is counted in [`CmCounters`] and dropped. A REP, RTU, MRA,
    /// REJ, DREQ or DREP is taken only from its connection's peer (`rx_wrong_source`
    /// otherwise): a difference from Linux, which matches on the comm IDs alone.
    ///
    /// Returns whether the MAD was *accepted*: handled by a connection or answered as Linux
    /// answers it (a REQ taken or refused with a REJ, a DREQ for an unknown connection answered
    /// with a DREP), as opposed to dropped by one of the `rx_*` drop counters (duplicates
    /// included). A NIC learns a route to a new socket only for an accepted MAD
    /// (`rnic_sim::peers`).
    pub fn handle_datagram(&mut self, now: SimTime, src: Gid, mad: &[u8]) -> bool {
        let refused = self.refused_mads();
        self.receive(now, src, mad);
        self.refused_mads() == refused
    }

    fn receive(&mut self, now: SimTime, src: Gid, mad: &[u8]) {
        self.counters.rx_mads += 1;
        let (hdr, msg) = match wire::decode(mad) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(peer = %src.to_ip(), error = %e, "MAD dropped: malformed");
                self.counters.rx_malformed += 1;
                return;
            }
        };
        log::mad_received(src, mad);
        let tid = hdr.transaction_id;
        match msg {
            CmMessage::Req(m) => self.on_req(now, src, tid, m),
            CmMessage::Mra(m) => self.on_mra(now, src, m),
            CmMessage::Rej(m) => self.on_rej(now, src, m),
            CmMessage::Rep(m) => self.on_rep(now, src, tid, m),
            CmMessage::Rtu(m) => self.on_rtu(src, m),
            CmMessage::Dreq(m) => self.on_dreq(src, tid, m),
            CmMessage::Drep(m) => self.on_drep(now, src, m),
            CmMessage::SidrReq(m) => self.on_sidr_req(src, tid, m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(src, m),
        }
    }

    /// The id whose local ID is `local` and whose remote ID is `remote` (`cm_acquire_id`).
    pub(super) fn lookup(&self, local: u32, remote: u32) -> Option<IbCmId> {
        let id = *self.by_local.get(&local)?;
        (self.conns.get(&id)?.remote_comm_id == remote).then_some(id)
    }

    /// Whether a message for `id` came from `id`'s peer; if not, it is counted
    /// (`rx_wrong_source`) and must be dropped. Linux matches a MAD to its connection by the
    /// comm IDs alone (`cm_acquire_id`), so anyone who learns or guesses them can reject or
    /// disconnect it from anywhere; here the sender's address must also be the peer's (the
    /// address the REQ went to, or came from).
    pub(super) fn sent_by_peer(&mut self, id: IbCmId, src: Gid) -> bool {
        let peer = self.conns.get(&id).map(|c| c.remote_gid);
        let ok = peer == Some(src);
        if !ok {
            tracing::debug!(
                id = id.0,
                peer = %src.to_ip(),
                expected = ?peer.map(Gid::to_ip),
                why = %"rx_wrong_source: not from the connection's peer",
                "MAD dropped"
            );
            self.counters.rx_wrong_source += 1;
        }
        ok
    }

    /// `cm_issue_rej`: a REJ without a cm_id; IDs swapped from the received message, TID copied.
    fn issue_rej(
        &mut self,
        dst: Gid,
        tid: u64,
        rcvd_local: u32,
        rcvd_remote: u32,
        reason: RejectReason,
        msg: CmMsgResponse,
    ) {
        let rej = CmMessage::Rej(Rej {
            local_comm_id: rcvd_remote,
            remote_comm_id: rcvd_local,
            message_rejected: msg,
            reason: reason.into(),
            ..Rej::default()
        });
        if let Ok(mad) = Self::encode(&rej, tid) {
            self.queue(dst, mad);
        }
    }

    /// Stale connection on the old id: try a DREQ (succeeds only when ESTABLISHED, §3.4).
    fn dreq_stale(&mut self, now: SimTime, old: IbCmId) {
        // Only ESTABLISHED sends one (asked first: a refusal formats an error to drop).
        if self.state(old) == Some(IbCmState::Established) {
            let _ = self.send_dreq(now, old, &[]);
        }
    }

    fn on_req(&mut self, now: SimTime, src: Gid, tid: u64, r: Req) {
        let guid = r.local_ca_guid;
        if let Some(&dup) = self.remote_ids.get(&(guid, r.local_comm_id)) {
            log::mad_dropped("REQ", "rx_duplicates: a REQ already received");
            self.counters.rx_duplicates += 1;
            self.dup_req(now, dup, src, tid, &r);
            return;
        }
        if let Some(&old) = self.remote_qpns.get(&(guid, r.local_qpn)) {
            // A REQ reusing a live connection's (CA GUID, QPN) says its peer restarted (the
            // old connection is stale and gets a DREQ): believed only from that peer's
            // address, else anyone who knows the two numbers could end the connection.
            if !self.sent_by_peer(old, src) {
                return;
            }
            log::mad_dropped("REQ", "rx_stale: its QPN is a live connection's (REJ 10)");
            self.counters.rx_stale += 1;
            self.issue_rej(
                src,
                tid,
                r.local_comm_id,
                0,
                RejectReason::StaleConn,
                CmMsgResponse::Req,
            );
            self.dreq_stale(now, old);
            return;
        }
        let Some(&listen_id) = self.listeners.get(&r.service_id) else {
            log::mad_dropped(
                "REQ",
                "rx_no_listener: no listener on its service ID (REJ 8)",
            );
            self.counters.rx_no_listener += 1;
            self.issue_rej(
                src,
                tid,
                r.local_comm_id,
                0,
                RejectReason::InvalidServiceId,
                CmMsgResponse::Req,
            );
            return;
        };
        if !self.take_backlog_slot(listen_id) {
            // ucma's handler fails with -ENOMEM: the REQ is dropped without REJ (§4.2).
            log::mad_dropped(
                "REQ",
                "rx_backlog_full: the listener's backlog is full (no REJ)",
            );
            self.counters.rx_backlog_full += 1;
            return;
        }
        let id = self.create_id();
        let plt = r.primary_path.local_ack_timeout.saturating_sub(1);
        let expires = now.plus_nanos(self.request_lifetime_ms(&r, false) * 1_000_000);
        // The REQ's path MTU, as is: both ends must run the same one, and the REP carries
        // none back (Linux cm_req_handler: `path_mtu = cm_req_get_path_mtu(req_msg)`).
        let path_mtu = Mtu::from_raw(r.path_packet_payload_mtu).unwrap_or(self.cfg.path_mtu);
        if let Some(c) = conn_mut!(self, id) {
            c.remote_comm_id = r.local_comm_id;
            c.remote_ca_guid = guid;
            c.remote_qpn = r.local_qpn;
            c.local_gid = r.primary_path.remote_port_gid;
            c.sq_psn = r.starting_psn;
            c.responder_resources = r.initiator_depth;
            c.initiator_depth = r.responder_resources;
            c.retry_count = r.retry_count;
            c.rnr_retry_count = r.rnr_retry_count;
            c.path_mtu = path_mtu;
            c.av_timeout = plt.saturating_add(1).min(31);
            // The REP's retransmission timeout and retries, as the REQ asks (Linux
            // `cm_req_handler`) but no more than this node's own: a REQ cannot make this side
            // resend a REP for hours to an address that never answers.
            c.timeout_ms = cm_convert_to_ms(
                r.local_cm_response_timeout
                    .min(self.cfg.cm_response_timeout),
            );
            c.max_cm_retries = r.max_cm_retries.min(self.cfg.max_cm_retries);
            c.tid = tid;
            c.listen_id = Some(listen_id);
            c.request_expires = Some(expires);
            c.in_tables = true;
            c.set_state(id, IbCmState::ReqRcvd);
        }
        self.set_peer(id, src);
        self.remote_ids.insert((guid, r.local_comm_id), id);
        self.remote_qpns.insert((guid, r.local_qpn), id);
        self.event(
            id,
            IbCmEventKind::ReqReceived(ReqInfo {
                listen_id,
                remote_gid: src,
                remote_qpn: r.local_qpn,
                service_id: r.service_id,
                responder_resources: r.initiator_depth,
                initiator_depth: r.responder_resources,
                retry_count: r.retry_count,
                rnr_retry_count: r.rnr_retry_count,
                srq: r.srq,
                private_data: r.private_data,
            }),
        );
        // rdma_cm arms a delayed MRA right after REQ_RECEIVED (cm-spec §4.2): nothing on the
        // wire until a duplicate REQ arrives.
        if let Some(c) = conn_mut!(self, id) {
            c.set_state(id, IbCmState::MraReqSent);
        }
    }

    /// `cm_dup_req_handler`: MRA_REQ_SENT → resend MRA; TIMEWAIT → REJ 10; else drop.
    /// The MRA moves the request's expiry to the active side's budget after an MRA (only
    /// from the REQ's own sender: the request's peer).
    fn dup_req(&mut self, now: SimTime, id: IbCmId, src: Gid, tid: u64, r: &Req) {
        let after_mra = now.plus_nanos(self.request_lifetime_ms(r, true) * 1_000_000);
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        match c.state {
            IbCmState::MraReqSent => {
                if c.remote_gid == src {
                    c.request_expires = Some(after_mra);
                }
                let mra = CmMessage::Mra(Mra {
                    local_comm_id: c.local_comm_id,
                    remote_comm_id: c.remote_comm_id,
                    message_mraed: CmMsgResponse::Req,
                    service_timeout: self.cfg.mra_service_timeout,
                    private_data: Vec::new(),
                });
                if let Ok(mad) = Self::encode(&mra, c.tid) {
                    self.queue(src, mad);
                }
            }
            IbCmState::Timewait => self.issue_rej(
                src,
                tid,
                r.local_comm_id,
                0,
                RejectReason::StaleConn,
                CmMsgResponse::Req,
            ),
            _ => {}
        }
    }

    fn on_rep(&mut self, now: SimTime, src: Gid, tid: u64, p: Rep) {
        let first = self.lookup(p.remote_comm_id, 0).filter(|id| {
            matches!(
                self.state(*id),
                Some(IbCmState::ReqSent | IbCmState::MraReqRcvd)
            )
        });
        let Some(id) = first else {
            self.dup_rep(src, &p);
            return;
        };
        if !self.sent_by_peer(id, src) {
            return;
        }
        let guid = p.local_ca_guid;
        if self.remote_ids.contains_key(&(guid, p.local_comm_id)) {
            log::mad_dropped("REP", "rx_duplicates: its comm ID is a known connection's");
            self.counters.rx_duplicates += 1;
            return;
        }
        if let Some(&old) = self.remote_qpns.get(&(guid, p.local_qpn)) {
            log::mad_dropped("REP", "rx_stale: its QPN is a live connection's (REJ 10)");
            self.counters.rx_stale += 1;
            self.issue_rej(
                src,
                tid,
                p.local_comm_id,
                p.remote_comm_id,
                RejectReason::StaleConn,
                CmMsgResponse::Rep,
            );
            self.dreq_stale(now, old);
            return;
        }
        if let Some(c) = conn_mut!(self, id) {
            c.remote_comm_id = p.local_comm_id;
            c.remote_ca_guid = guid;
            c.remote_qpn = p.local_qpn;
            c.sq_psn = p.starting_psn;
            c.responder_resources = p.initiator_depth;
            c.initiator_depth = p.responder_resources;
            c.rnr_retry_count = p.rnr_retry_count;
            c.av_timeout = cm_ack_timeout(p.target_ack_delay, c.av_timeout.saturating_sub(1));
            c.pending = None;
            c.in_tables = true;
            c.set_state(id, IbCmState::RepRcvd);
        }
        self.remote_ids.insert((guid, p.local_comm_id), id);
        self.remote_qpns.insert((guid, p.local_qpn), id);
        self.event(
            id,
            IbCmEventKind::RepReceived(RepInfo {
                remote_qpn: p.local_qpn,
                responder_resources: p.initiator_depth,
                initiator_depth: p.responder_resources,
                rnr_retry_count: p.rnr_retry_count,
                srq: p.srq,
                private_data: p.private_data,
            }),
        );
    }

    /// `cm_dup_rep_handler`: ESTABLISHED → resend RTU; MRA_REP_SENT → resend MRA; else drop.
    fn dup_rep(&mut self, src: Gid, p: &Rep) {
        let Some(id) = self.lookup(p.remote_comm_id, p.local_comm_id) else {
            log::mad_dropped("REP", "rx_unmatched: no id has these comm IDs");
            self.counters.rx_unmatched += 1;
            return;
        };
        log::mad_dropped("REP", "rx_duplicates: a REP already received");
        self.counters.rx_duplicates += 1;
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let msg = match c.state {
            IbCmState::Established => Self::rtu_msg(c, &c.rtu_private_data),
            IbCmState::MraRepSent => CmMessage::Mra(Mra {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                message_mraed: CmMsgResponse::Rep,
                service_timeout: self.cfg.mra_service_timeout,
                private_data: Vec::new(),
            }),
            _ => return,
        };
        if let Ok(mad) = Self::encode(&msg, c.tid) {
            self.queue(src, mad);
        }
    }

    fn on_rtu(&mut self, src: Gid, m: Rtu) {
        let Some(id) = self.lookup(m.remote_comm_id, m.local_comm_id) else {
            log::mad_dropped("RTU", "rx_unmatched: no id has these comm IDs");
            self.counters.rx_unmatched += 1;
            return;
        };
        if !self.sent_by_peer(id, src) {
            return;
        }
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        if !matches!(c.state, IbCmState::RepSent | IbCmState::MraRepRcvd) {
            log::mad_dropped("RTU", "rx_duplicates: not waiting for an RTU");
            self.counters.rx_duplicates += 1;
            return;
        }
        c.pending = None;
        c.set_state(id, IbCmState::Established);
        self.event(id, IbCmEventKind::RtuReceived(m.private_data));
    }

    fn on_mra(&mut self, now: SimTime, src: Gid, m: Mra) {
        let found = match m.message_mraed {
            CmMsgResponse::Req => self.lookup(m.remote_comm_id, 0),
            _ => self.lookup(m.remote_comm_id, m.local_comm_id),
        };
        let Some(id) = found else {
            log::mad_dropped("MRA", "rx_unmatched: no id has these comm IDs");
            self.counters.rx_unmatched += 1;
            return;
        };
        if !self.sent_by_peer(id, src) {
            return;
        }
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        let next = match (c.state, m.message_mraed) {
            (IbCmState::ReqSent, CmMsgResponse::Req) => IbCmState::MraReqRcvd,
            (IbCmState::RepSent, CmMsgResponse::Rep) => IbCmState::MraRepRcvd,
            (IbCmState::MraReqRcvd | IbCmState::MraRepRcvd, _) => {
                log::mad_dropped("MRA", "rx_duplicates: an MRA already received");
                self.counters.rx_duplicates += 1;
                return;
            }
            _ => {
                log::mad_dropped("MRA", "rx_wrong_state: nothing of ours to MRA");
                self.counters.rx_wrong_state += 1;
                return;
            }
        };
        // Timer pushed back to ms(service timeout) + ms(av.timeout) (cm-spec §3.2).
        let extra = cm_convert_to_ms(m.service_timeout) + cm_convert_to_ms(c.av_timeout);
        if let Some(p) = c.pending.as_mut() {
            p.deadline = now.plus_nanos(extra * 1_000_000);
        }
        c.set_state(id, next);
        self.event(id, IbCmEventKind::MraReceived);
    }

    fn on_rej(&mut self, now: SimTime, src: Gid, m: Rej) {
        use IbCmState as S;
        // cm_acquire_rejected_id (cm-spec §2.5).
        let found = if m.reason == u16::from(RejectReason::Timeout) {
            let guid = m
                .ari
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_be_bytes);
            guid.and_then(|g| self.remote_ids.get(&(g, m.local_comm_id)).copied())
        } else if m.message_rejected == CmMsgResponse::Req {
            self.lookup(m.remote_comm_id, 0)
        } else {
            self.lookup(m.remote_comm_id, m.local_comm_id)
        };
        let Some(id) = found else {
            log::mad_dropped("REJ", "rx_unmatched: no id has these comm IDs");
            self.counters.rx_unmatched += 1;
            return;
        };
        if !self.sent_by_peer(id, src) {
            return;
        }
        let Some(state) = self.state(id) else {
            return;
        };
        let stale = m.reason == u16::from(RejectReason::StaleConn);
        match state {
            S::ReqSent
            | S::MraReqRcvd
            | S::RepSent
            | S::MraRepRcvd
            | S::ReqRcvd
            | S::MraReqSent => {
                if stale {
                    self.enter_timewait(now, id);
                } else {
                    self.reset_to_idle(id);
                }
            }
            S::DreqSent | S::RepRcvd | S::MraRepSent | S::Established => {
                self.enter_timewait(now, id)
            }
            _ => {
                log::mad_dropped("REJ", "rx_wrong_state: nothing to reject in this state");
                self.counters.rx_wrong_state += 1;
                return;
            }
        }
        self.event(
            id,
            IbCmEventKind::RejReceived {
                reason: m.reason,
                ari: m.ari,
                private_data: m.private_data,
            },
        );
    }

    fn on_dreq(&mut self, src: Gid, tid: u64, m: Dreq) {
        use IbCmState as S;
        let Some(id) = self.lookup(m.remote_comm_id, m.local_comm_id) else {
            // cm_issue_drep: answer anyway, IDs swapped, TID copied (cm-spec §3.3).
            log::mad_dropped("DREQ", "rx_dreq_unknown: no such connection (DREP sent)");
            self.counters.rx_dreq_unknown += 1;
            let drep = CmMessage::Drep(Drep {
                local_comm_id: m.remote_comm_id,
                remote_comm_id: m.local_comm_id,
                private_data: Vec::new(),
            });
            if let Ok(mad) = Self::encode(&drep, tid) {
                self.queue(src, mad);
            }
            return;
        };
        if !self.sent_by_peer(id, src) {
            return;
        }
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        if c.local_qpn != m.remote_qpn_eecn {
            log::mad_dropped(
                "DREQ",
                "rx_wrong_qpn: its Remote QPN is not the connection's",
            );
            self.counters.rx_wrong_qpn += 1;
            return;
        }
        match c.state {
            S::RepSent | S::DreqSent | S::MraRepRcvd | S::Established => c.pending = None,
            S::Timewait => {
                log::mad_dropped("DREQ", "rx_duplicates: in TIMEWAIT (DREP sent again)");
                self.counters.rx_duplicates += 1;
                let msg = Self::drep_msg(c, &c.drep_private_data);
                let dst = c.remote_gid;
                if let Ok(mad) = Self::encode(&msg, tid) {
                    self.queue(dst, mad);
                }
                return;
            }
            S::DreqRcvd => {
                log::mad_dropped("DREQ", "rx_duplicates: a DREQ already received");
                self.counters.rx_duplicates += 1;
                return;
            }
            _ => {
                log::mad_dropped("DREQ", "rx_wrong_state: not connected");
                self.counters.rx_wrong_state += 1;
                return;
            }
        }
        c.set_state(id, S::DreqRcvd);
        c.dreq_tid = tid;
        self.event(id, IbCmEventKind::DreqReceived(m.private_data));
    }

    fn on_drep(&mut self, now: SimTime, src: Gid, m: Drep) {
        let Some(id) = self.lookup(m.remote_comm_id, m.local_comm_id) else {
            log::mad_dropped("DREP", "rx_unmatched: no id has these comm IDs");
            self.counters.rx_unmatched += 1;
            return;
        };
        if !self.sent_by_peer(id, src) {
            return;
        }
        if !matches!(
            self.state(id),
            Some(IbCmState::DreqSent | IbCmState::DreqRcvd)
        ) {
            log::mad_dropped("DREP", "rx_wrong_state: no DREQ to answer");
            self.counters.rx_wrong_state += 1;
            return;
        }
        self.enter_timewait(now, id);
        self.event(id, IbCmEventKind::DrepReceived(m.private_data));
    }
}
