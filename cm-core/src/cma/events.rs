//! Kernel-side event making: the engine's MADs leave and its IB CM events become rdma_cm
//! events (`cma_ib_handler` for an id without a kernel QP, cm-spec §4.2), through the one
//! guard every event passes (`gate`, `deliver`).

use super::*;

impl Cma {
    /// Sends the engine's MADs through the GSI endpoint and turns its events into rdma_cm
    /// events, until both queues are empty.
    pub(super) fn flush(&mut self, gsi: &mut dyn GsiEndpoint, now: SimTime) {
        if self.device_removed {
            self.engine.discard_transmit();
        }
        loop {
            while let Some((dst, mad)) = self.engine.poll_transmit() {
                // UD is unreliable: a send error is a lost datagram; the CM retries.
                let _ = gsi.gsi_send(dst, &mad);
            }
            match self.engine.poll_event() {
                Some(ev) => self.on_engine_event(now, ev),
                None => break,
            }
        }
    }

    /// `cma_ib_handler` for an id without a kernel QP (cm-spec §4.2).
    fn on_engine_event(&mut self, now: SimTime, ev: IbCmEvent) {
        use CmEventType as E;
        let id = CmIdHandle(ev.id.0);
        let none = ConnEventParam::default;
        let (event, status, param) = match ev.kind {
            IbCmEventKind::ReqReceived(info) => return self.on_req_received(now, ev.id, info),
            IbCmEventKind::RepReceived(info) => {
                let param = ConnEventParam {
                    private_data: info.private_data,
                    responder_resources: info.responder_resources,
                    initiator_depth: info.initiator_depth,
                    rnr_retry_count: info.rnr_retry_count,
                    srq: info.srq,
                    qp_num: info.remote_qpn,
                    ..ConnEventParam::default()
                };
                (E::ConnectResponse, 0, param)
            }
            IbCmEventKind::RtuReceived(_) | IbCmEventKind::UserEstablished => {
                (E::Established, 0, none())
            }
            IbCmEventKind::ReqError | IbCmEventKind::RepError => {
                (E::Unreachable, -Errno::ETIMEDOUT.code(), none())
            }
            IbCmEventKind::DreqError => (E::Disconnected, -Errno::ETIMEDOUT.code(), none()),
            IbCmEventKind::DreqReceived(pd) | IbCmEventKind::DrepReceived(pd) => {
                let param = ConnEventParam {
                    private_data: pd,
                    ..ConnEventParam::default()
                };
                (E::Disconnected, 0, param)
            }
            IbCmEventKind::TimewaitExit => (E::TimewaitExit, 0, none()),
            IbCmEventKind::MraReceived => return,
            IbCmEventKind::RejReceived {
                reason,
                private_data,
                ..
            } => {
                let param = ConnEventParam {
                    private_data,
                    ..ConnEventParam::default()
                };
                (E::Rejected, i32::from(reason), param)
            }
            IbCmEventKind::SidrReqReceived(info) => {
                return self.on_sidr_req_received(now, ev.id, info)
            }
            IbCmEventKind::SidrRepReceived(info) => return self.on_sidr_rep_received(id, info),
            IbCmEventKind::SidrReqError => (E::Unreachable, -Errno::ETIMEDOUT.code(), none()),
        };
        self.deliver(id, event, status, None, param);
    }

    fn on_req_received(&mut self, now: SimTime, ib: IbCmId, info: ReqInfo) {
        let listen = CmIdHandle(info.listen_id.0);
        // cma_ib_check_req_qp_type: a REQ is for a connected listener, not a UD one.
        let listener = self
            .ids
            .get(&listen)
            .filter(|r| r.state == RdmaCmState::Listen && !r.is_ud())
            .map(|r| (r.channel, r.ps));
        // cma_save_ip_info: a REQ without a valid IP-CM header is refused (REJ 28 via
        // destroy, cm-spec §2.10).
        let hdr = IpCmHeader::split(&info.private_data);
        let (Some((channel, ps)), Ok((hdr, user))) = (listener, hdr) else {
            tracing::debug!(
                id = ib.0,
                listen_id = listen.0,
                "REQ refused: the listener is gone or the REQ has no valid IP-CM header"
            );
            self.engine.release_backlog(info.listen_id);
            self.engine.destroy_id(now, ib);
            return;
        };
        let id = CmIdHandle(ib.0);
        self.passive_id(id, listen, (channel, ps), &hdr, info.service_id);
        let param = ConnEventParam {
            private_data: user.to_vec(),
            responder_resources: info.responder_resources,
            initiator_depth: info.initiator_depth,
            retry_count: info.retry_count,
            rnr_retry_count: info.rnr_retry_count,
            srq: info.srq,
            qp_num: info.remote_qpn,
        };
        self.deliver(id, CmEventType::ConnectRequest, 0, Some(listen), param);
    }

    /// The new passive id of a connection request (REQ or SIDR_REQ) whose IP-CM header says
    /// where it came from, reporting to the listener's channel in its port space (`cma_ib_new_conn_id`,
    /// `cma_ib_new_udp_id`: `cma_save_net_info`).
    pub(super) fn passive_id(
        &mut self,
        id: CmIdHandle,
        listen: CmIdHandle,
        (channel, ps): (EventChannel, RdmaPortSpace),
        hdr: &IpCmHeader,
        service_id: u64,
    ) {
        let port = parse_ip_service_id(service_id).map_or(0, |(_, p)| p);
        let mut rec = KernelId::new(channel, ps);
        rec.set_state(id, RdmaCmState::Connect);
        rec.bound = true;
        rec.has_cm_id = true;
        rec.src = Some(SocketAddr::new(hdr.dst_addr, port));
        rec.dst = Some(SocketAddr::new(hdr.src_addr, hdr.src_port));
        rec.listen_id = Some(listen);
        rec.uid_set = false;
        self.ids.insert(id, rec);
    }

    /// Whether `event` may be raised for `id` now (the cm-spec §4.2 gate).
    fn gate(&self, id: CmIdHandle, event: CmEventType) -> bool {
        use CmEventType as E;
        use RdmaCmState as S;
        let Some(r) = self.ids.get(&id) else {
            return false;
        };
        match event {
            E::AddrResolved => r.state == S::AddrQuery,
            // Also a UD id's SIDR_REP with another Q_Key (`cma_sidr_rep_handler`).
            E::AddrError => r.state == S::AddrQuery || (r.state == S::Connect && r.is_ud()),
            E::RouteResolved | E::RouteError => r.state == S::RouteQuery,
            E::TimewaitExit => r.state == S::Disconnect,
            // Set up by `device_removal` / `address_change` (cma/removal.rs); ucma drops both
            // for a passive id not accepted yet.
            E::DeviceRemoval => r.state == S::DeviceRemoval && r.uid_set,
            E::AddrChange => r.uid_set && !r.removed,
            // Made at once by the join (`cma_iboe_join_multicast` queues it), which requires
            // ADDR_BOUND or ADDR_RESOLVED.
            E::MulticastJoin | E::MulticastError => {
                matches!(r.state, S::AddrBound | S::AddrResolved) && !r.removed
            }
            _ => r.state == S::Connect,
        }
    }

    /// The one path by which events reach a channel. Applies the gate and the state change the
    /// event implies (ADDR_QUERY → ADDR_RESOLVED, ROUTE_QUERY → ROUTE_RESOLVED, the atomic
    /// CONNECT → DISCONNECT swap of DISCONNECTED), so DISCONNECTED is raised at most once per
    /// id.
    pub(super) fn deliver(
        &mut self,
        id: CmIdHandle,
        event: CmEventType,
        status: i32,
        listen_id: Option<CmIdHandle>,
        param: ConnEventParam,
    ) {
        self.deliver_ud(id, event, status, listen_id, param, None, None);
    }

    /// [`deliver`](Self::deliver) with the UD parameters and the multicast join an event of a
    /// UD id carries.
    #[allow(clippy::too_many_arguments)] // the fields of `struct rdma_cm_event`
    pub(super) fn deliver_ud(
        &mut self,
        id: CmIdHandle,
        event: CmEventType,
        status: i32,
        listen_id: Option<CmIdHandle>,
        param: ConnEventParam,
        ud: Option<UdParam>,
        multicast: Option<SocketAddr>,
    ) {
        let ud = ud.map(Box::new);
        use CmEventType as E;
        if !self.gate(id, event) {
            tracing::debug!(
                id = id.0,
                event = %event.name(),
                status,
                state = ?self.ids.get(&id).map(|r| r.state.name()),
                "rdma_cm event not raised in this state"
            );
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let Some(r) = self.ids.get_mut(&id) else {
            return;
        };
        match event {
            E::AddrResolved => r.set_state(id, RdmaCmState::AddrResolved),
            E::RouteResolved => r.set_state(id, RdmaCmState::RouteResolved),
            E::Disconnected => r.set_state(id, RdmaCmState::Disconnect),
            _ => {}
        }
        tracing::debug!(id = id.0, event = %event.name(), status, "rdma_cm event queued");
        let ev = CmEvent {
            event,
            id,
            listen_id,
            status,
            param,
            ud,
            multicast,
            seq,
        };
        if let Some(q) = self.channels.get_mut(&r.channel) {
            q.push_back(ev);
        }
    }
}

impl KernelId {
    /// Moves the id to `to` (`enum rdma_cm_state`), logging the change.
    pub(super) fn set_state(&mut self, id: CmIdHandle, to: RdmaCmState) {
        if self.state != to {
            tracing::debug!(
                id = id.0,
                from = %self.state.name(),
                state = %to.name(),
                "rdma_cm state"
            );
        }
        self.state = to;
    }
}
