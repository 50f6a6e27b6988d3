//! UD ids (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`) on the kernel side: no connection but Service ID
//! Resolution — `rdma_connect` sends a SIDR_REQ (cma.c `cma_resolve_ib_udp`), a listener's
//! SIDR_REQ is a CONNECT_REQUEST (`cma_ib_req_handler`, `cma_ib_new_udp_id`), `rdma_accept`
//! and `rdma_reject` answer with a SIDR_REP (`cma_send_sidr_rep`), and the SIDR_REP is
//! ESTABLISHED or UNREACHABLE on the active side (`cma_sidr_rep_handler`) — and the id's
//! Q_Key (`cma_set_qkey`).

use super::*;
use crate::engine::{SidrRepInfo, SidrRepParams, SidrReqInfo, SidrReqParams, SidrStatus};
use crate::shared::{UdParam, RDMA_UDP_QKEY};
use verbs_core::{AhAttr, GlobalRoute, DEFAULT_PKEY};

impl KernelId {
    /// A UD id: its port space's QPs are UD (librdmacm `ucma_get_qp_type`).
    pub(super) fn is_ud(&self) -> bool {
        matches!(self.ps, RdmaPortSpace::Udp | RdmaPortSpace::Ipoib)
    }
}

/// The RoCEv2 flow label of an IPv4 path from `src` to `dst` (cma.c
/// `cma_get_roce_udp_flow_label`: `(sport · 31 + dport) & 0xFFFFF`).
fn roce_flow_label(src: SocketAddr, dst: SocketAddr) -> u32 {
    (u32::from(src.port()) * 31 + u32::from(dst.port())) & 0xF_FFFF
}

impl Cma {
    /// Whether `id` is a UD id (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`); `None` for an unknown id.
    pub fn is_ud(&self, id: CmIdHandle) -> Option<bool> {
        self.ids.get(&id).map(KernelId::is_ud)
    }

    /// `cma_set_qkey(id, qkey)`: an id keeps the first Q_Key it is given — `qkey`, or with 0
    /// the port space's default, [`RDMA_UDP_QKEY`] — and refuses another one. Returns the
    /// id's Q_Key.
    ///
    /// `RDMA_PS_IPOIB` takes [`RDMA_UDP_QKEY`] too: Linux reads an IPoIB id's Q_Key from the
    /// SA's record of the IPoIB broadcast group, which a RoCE port does not have.
    ///
    /// # Errors
    /// `EINVAL` for a Q_Key other than the id's, or an unknown id.
    pub(super) fn set_qkey(&mut self, id: CmIdHandle, qkey: u32) -> Result<u32, Error> {
        let r = self.rec(id)?;
        match (r.qkey, qkey) {
            (0, 0) => r.qkey = RDMA_UDP_QKEY,
            (0, q) => r.qkey = q,
            (have, q) if q != 0 && q != have => {
                return Err(inval("the id has another Q_Key (cma_set_qkey)"))
            }
            _ => {}
        }
        Ok(r.qkey)
    }

    /// The Q_Key a UD id's QP gets (`rdma_init_qp_attr` → `cma_ib_init_qp_attr` →
    /// `cma_set_qkey(id, 0)`): the id's, [`RDMA_UDP_QKEY`] unless it has another already.
    ///
    /// # Errors
    /// `EINVAL` for an unknown id or one that is not UD; `ENXIO` once its device was removed.
    pub fn ud_qkey(&mut self, id: CmIdHandle) -> Result<u32, Error> {
        if !self.rec(id)?.is_ud() {
            return Err(inval("not a UD id"));
        }
        self.set_qkey(id, 0)
    }

    /// The address vector to the id's peer, as the kernel makes it from the route's path
    /// record on RoCE (`ib_init_ah_attr_from_path`): a GRH to the destination's GID, the
    /// route's hop limit, the RoCEv2 flow label of the two ports, port 1, SGID index 0.
    fn path_ah_attr(&self, r: &KernelId) -> AhAttr {
        let (src, dst) = (r.src, r.dst);
        AhAttr {
            grh: GlobalRoute {
                dgid: dst.map_or_else(Gid::default, |d| Gid::from_ip(d.ip())),
                flow_label: match (src, dst) {
                    (Some(s), Some(d)) => roce_flow_label(s, d),
                    _ => 0,
                },
                sgid_index: 0,
                hop_limit: self.engine.config().hop_limit,
                traffic_class: 0,
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        }
    }

    /// `rdma_connect` on a UD id (`cma_resolve_ib_udp`): ROUTE_RESOLVED → CONNECT; sends a
    /// SIDR_REQ with the IP service ID and the IP-CM header in front of `param`'s private
    /// data, retransmitted every 4096 ms up to 15 times (`CMA_CM_RESPONSE_TIMEOUT`,
    /// `CMA_MAX_CM_RETRIES`; the configured timers).
    ///
    /// # Errors
    /// `EINVAL` unless ROUTE_RESOLVED, or for private data over 180 bytes.
    pub(super) fn connect_ud(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
        param: &ConnParam,
    ) -> Result<(), Error> {
        let local_gid = self.local_gid;
        let r = self.rec(id)?;
        if r.state != RdmaCmState::RouteResolved {
            return Err(inval("rdma_connect: route not resolved"));
        }
        let (Some(src), Some(dst)) = (r.src, r.dst) else {
            return Err(inval("rdma_connect: no address"));
        };
        let hdr = IpCmHeader {
            src_port: src.port(),
            src_addr: src.ip(),
            dst_addr: dst.ip(),
        };
        let private_data = hdr
            .sidr_req_private_data(&param.private_data)
            .map_err(|e| Error::new(e.errno(), e.to_string()))?;
        let req = SidrReqParams {
            service_id: ip_service_id(r.ps, dst.port()),
            local_gid,
            remote_gid: Gid::from_ip(dst.ip()),
            pkey: DEFAULT_PKEY,
            private_data,
        };
        self.engine.send_sidr_req(now, IbCmId(id.0), &req)?;
        let r = self.rec(id)?;
        r.set_state(id, RdmaCmState::Connect);
        r.has_cm_id = true;
        self.flush(gsi, now);
        Ok(())
    }

    /// `rdma_accept` on a UD passive id (`cma_send_sidr_rep` with `IB_SIDR_SUCCESS`): the
    /// SIDR_REP names `qp_num` and the id's Q_Key ([`RDMA_UDP_QKEY`] unless its QP got another).
    /// No event follows on either side but the active side's ESTABLISHED.
    ///
    /// # Errors
    /// `EINVAL` unless the id has a SIDR_REQ to answer, or for private data over 136 bytes.
    pub(super) fn accept_ud(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
        param: &ConnParam,
        qp_num: u32,
    ) -> Result<(), Error> {
        let ib = IbCmId(id.0);
        if self.engine.state(ib) != Some(IbCmState::SidrReqRcvd) {
            return Err(inval("rdma_accept: no SIDR_REQ to answer"));
        }
        let qkey = self.set_qkey(id, 0)?;
        let rep = SidrRepParams {
            status: SidrStatus::Success,
            qpn: qp_num,
            qkey,
            info: Vec::new(),
            private_data: param.private_data.clone(),
        };
        let res = self.engine.send_sidr_rep(ib, &rep);
        if res.is_ok() {
            self.rec(id)?.uid_set = true;
        }
        self.flush(gsi, now);
        res
    }

    /// `rdma_reject` on a UD passive id: a SIDR_REP with status 2, reject, and
    /// `private_data` (`cma_send_sidr_rep(id, IB_SIDR_REJECT, …)`).
    ///
    /// # Errors
    /// `EINVAL` unless the id has a SIDR_REQ to answer, or for private data over 136 bytes.
    pub(super) fn reject_ud(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let ib = IbCmId(id.0);
        if self.engine.state(ib) != Some(IbCmState::SidrReqRcvd) {
            return Err(inval("rdma_reject: no SIDR_REQ to answer"));
        }
        let rep = SidrRepParams {
            private_data: private_data.to_vec(),
            ..SidrRepParams::status(SidrStatus::Reject)
        };
        self.engine.send_sidr_rep(ib, &rep)?;
        self.flush(gsi, now);
        Ok(())
    }

    /// `cma_ib_req_handler` for a SIDR_REQ: a CONNECT_REQUEST on the listener's channel for a
    /// new UD id whose addresses come from the IP-CM header, with the private data past it
    /// (180 bytes) and no other parameter. A listener gone, not UD (`cma_ib_check_req_qp_type`)
    /// or a request without a valid IP-CM header destroys the new IB CM id, which answers with
    /// status 2, reject (`cm_destroy_id` in SIDR_REQ_RCVD).
    pub(super) fn on_sidr_req_received(&mut self, now: SimTime, ib: IbCmId, info: SidrReqInfo) {
        let listen = CmIdHandle(info.listen_id.0);
        let listener = self
            .ids
            .get(&listen)
            .filter(|r| r.state == RdmaCmState::Listen && r.is_ud())
            .map(|r| (r.channel, r.ps));
        let hdr = IpCmHeader::split(&info.private_data);
        let (Some(listener), Ok((hdr, user))) = (listener, hdr) else {
            tracing::debug!(
                id = ib.0,
                listen_id = listen.0,
                "SIDR_REQ refused: the listener is gone or not UD, or no valid IP-CM header"
            );
            self.engine.release_backlog(info.listen_id);
            self.engine.destroy_id(now, ib);
            return;
        };
        let id = CmIdHandle(ib.0);
        self.passive_id(id, listen, listener, &hdr, info.service_id);
        let param = ConnEventParam {
            private_data: user.to_vec(),
            ..ConnEventParam::default()
        };
        self.deliver_ud(
            id,
            CmEventType::ConnectRequest,
            0,
            Some(listen),
            param,
            Some(UdParam::default()),
            None,
        );
    }

    /// `cma_sidr_rep_handler`: a SIDR_REP with status 0 is ESTABLISHED with the peer's QPN and
    /// Q_Key and the address vector of the route (status 0) — unless its Q_Key is not the
    /// id's, then ADDR_ERROR with −EINVAL (`cma_set_qkey`); any other status is UNREACHABLE
    /// with that status as the event's (positive) status. The SIDR_REP's private data (136
    /// bytes) comes with either.
    pub(super) fn on_sidr_rep_received(&mut self, id: CmIdHandle, info: SidrRepInfo) {
        let param = ConnEventParam {
            private_data: info.private_data,
            ..ConnEventParam::default()
        };
        if info.status != SidrStatus::Success as u8 {
            let status = i32::from(info.status);
            self.deliver(id, CmEventType::Unreachable, status, None, param);
            return;
        }
        if let Err(e) = self.set_qkey(id, info.qkey) {
            let status = -e.errno.code();
            self.deliver(id, CmEventType::AddrError, status, None, param);
            return;
        }
        let Some(ah_attr) = self.ids.get(&id).map(|r| self.path_ah_attr(r)) else {
            return;
        };
        let ud = UdParam {
            ah_attr,
            qp_num: info.qpn,
            qkey: info.qkey,
        };
        let param = ConnEventParam {
            qp_num: info.qpn,
            ..param
        };
        self.deliver_ud(id, CmEventType::Established, 0, None, param, Some(ud), None);
    }
}
