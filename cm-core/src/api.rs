//! The rdma_cm-shaped API (librdmacm + kernel cma/ucma behaviour, cm-spec §4).
//!
//! One [`RdmaCm`] per host/device owns the [`CmEngine`] and the event channels. Ids are named by
//! [`CmIdHandle`]. Every call that can send a MAD, arm a timer or move a QP takes the device
//! (`&mut dyn CmDevice`: the verbs [`Device`] for QP transitions and its [`GsiEndpoint`] for
//! MADs) and the current time; the API itself stays sans-IO and never blocks. Events are read
//! with [`RdmaCm::get_cm_event`] (non-blocking, `EAGAIN` when empty) and must be acked with
//! [`RdmaCm::ack_cm_event`]. The blocking and async waits are in [`crate::blocking`].
//!
//! Every event goes through one guard (`RdmaCm::deliver`, private): IB CM events other than
//! TIMEWAIT_EXIT pass only while the id is in CONNECT, DISCONNECTED only through the atomic
//! CONNECT → DISCONNECT swap, TIMEWAIT_EXIT only in DISCONNECT (cm-spec §4.2), so DISCONNECTED
//! is raised at most once per id and TIMEWAIT_EXIT only after it.

use crate::engine::{
    CmConfig, CmCounters, CmEngine, IbCmEvent, IbCmEventKind, IbCmId, IbCmState, QpAction,
    RepParams, ReqParams,
};
use crate::wire::{ip_service_id, parse_ip_service_id, IpCmHeader, RdmaPortSpace, RejectReason};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use verbs_core::{
    AccessFlags, Device, Errno, Error, Gid, GsiEndpoint, PdHandle, Qp, QpInitAttr, SimTime,
};

/// A device the CM can drive: verbs for the QP, GSI for the MADs.
pub trait CmDevice: Device + GsiEndpoint {}
impl<T: Device + GsiEndpoint + ?Sized> CmDevice for T {}

/// `enum rdma_cm_state` \[cma_priv\] (cm-spec §4.1), same names and numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // each variant is the Linux name of its value
pub enum RdmaCmState {
    Idle = 0,
    AddrQuery = 1,
    AddrResolved = 2,
    RouteQuery = 3,
    RouteResolved = 4,
    Connect = 5,
    Disconnect = 6,
    AddrBound = 7,
    Listen = 8,
    DeviceRemoval = 9,
    Destroying = 10,
}

/// `enum rdma_cm_event_type` [rdma_cma.h] (cm-spec §4.7), same names and numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // each variant is the librdmacm name of its value
pub enum CmEventType {
    AddrResolved = 0,
    AddrError = 1,
    RouteResolved = 2,
    RouteError = 3,
    ConnectRequest = 4,
    ConnectResponse = 5,
    ConnectError = 6,
    Unreachable = 7,
    Rejected = 8,
    Established = 9,
    Disconnected = 10,
    DeviceRemoval = 11,
    MulticastJoin = 12,
    MulticastError = 13,
    AddrChange = 14,
    TimewaitExit = 15,
    AddrinfoResolved = 16,
    AddrinfoError = 17,
    User = 18,
    Internal = 19,
}

/// An rdma_cm id (`struct rdma_cm_id *`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CmIdHandle(pub u32);

/// An event channel (`struct rdma_event_channel *`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventChannel(pub u32);

/// `struct rdma_conn_param` for `connect` and `accept` [man:rdma_connect.3].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnParam {
    /// User private data: ≤ 56 bytes for connect (after the 36-byte IP-CM header), ≤ 196 for
    /// accept; longer is EINVAL.
    pub private_data: Vec<u8>,
    /// RDMA READ/atomic requests this side accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests this side issues.
    pub initiator_depth: u8,
    /// Transport retry count (clamped to 7).
    pub retry_count: u8,
    /// RNR retry count (clamped to 7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// QPN to advertise when no QP is attached to the id (ignored otherwise).
    pub qp_num: u32,
}

impl ConnParam {
    /// What rdma-core's `rping` passes to `rdma_connect`/`rdma_accept`: one RDMA READ in
    /// flight each way (`responder_resources = initiator_depth = 1`), `retry_count` 7,
    /// `rnr_retry_count` 7 (retry RNR NAKs forever), no private data [rping.c].
    pub fn rping_defaults() -> ConnParam {
        ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }
    }
}

/// The connection parameters an event carries (`event->param.conn`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnEventParam {
    /// Private data: CONNECT_REQUEST 56 bytes (past the IP-CM header), ESTABLISHED/
    /// CONNECT_RESPONSE 196 (the REP's) on the active side, REJECTED 148, DISCONNECTED the
    /// DREQ/DREP's; empty otherwise.
    pub private_data: Vec<u8>,
    /// The peer's view, in this side's perspective.
    pub responder_resources: u8,
    /// The peer's view, in this side's perspective.
    pub initiator_depth: u8,
    /// Retry count from the REQ.
    pub retry_count: u8,
    /// RNR retry count from the REQ/REP.
    pub rnr_retry_count: u8,
    /// SRQ flag.
    pub srq: bool,
    /// The peer's QPN.
    pub qp_num: u32,
}

/// `struct rdma_cm_event`. Must be handed back to [`RdmaCm::ack_cm_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    /// What happened.
    pub event: CmEventType,
    /// The id (for CONNECT_REQUEST: the new passive id).
    pub id: CmIdHandle,
    /// For CONNECT_REQUEST: the listening id.
    pub listen_id: Option<CmIdHandle>,
    /// 0, −errno (−110 for timeouts) or a positive REJ reason (cm-spec §4.7).
    pub status: i32,
    /// Connection parameters and private data.
    pub param: ConnEventParam,
    seq: u64,
}

#[derive(Debug, Clone)]
struct IdRec {
    channel: EventChannel,
    ps: RdmaPortSpace,
    state: RdmaCmState,
    /// Bound to the device (`id->verbs` non-NULL).
    bound: bool,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    qp: Option<Qp>,
    /// An IB CM id is in use (connect, listen or passive child): §4.4 row "never connected".
    has_cm_id: bool,
    listen_id: Option<CmIdHandle>,
    /// Events handed out and not acked: seq → type.
    unacked: BTreeMap<u64, CmEventType>,
    /// CONNECT_ERROR was reported: later REJECTED/DISCONNECTED are suppressed [lib-cma].
    connect_error: bool,
}

/// The rdma_cm of one host/device. See the module docs. `Clone` is a full, independent
/// snapshot, engine included (used by the model checker).
#[derive(Debug, Clone)]
pub struct RdmaCm {
    engine: CmEngine,
    local_gid: Gid,
    ids: BTreeMap<CmIdHandle, IdRec>,
    channels: BTreeMap<EventChannel, VecDeque<CmEvent>>,
    next_channel: u32,
    next_seq: u64,
    next_port: u16,
}

fn inval(what: &str) -> Error {
    Error::inval(what.to_string())
}

impl RdmaCm {
    /// The CM of the device `dev`: its address is GID index 0 of port 1.
    ///
    /// # Errors
    /// What `query_gid` returns.
    pub fn new(dev: &dyn Device, cfg: CmConfig) -> Result<Self, Error> {
        let local_gid = dev.query_gid(1, 0)?;
        Ok(RdmaCm {
            engine: CmEngine::new(cfg),
            local_gid,
            ids: BTreeMap::new(),
            channels: BTreeMap::new(),
            next_channel: 1,
            next_seq: 1,
            // ephemeral ports as Linux's default ip_local_port_range, start drawn from the seed
            next_port: 32768 + (cfg.seed % 28232) as u16,
        })
    }

    /// The engine (read-only): IB CM states, counters, timers.
    pub fn engine(&self) -> &CmEngine {
        &self.engine
    }

    /// MAD counters of the engine.
    pub fn counters(&self) -> &CmCounters {
        self.engine.counters()
    }

    /// This host's GID.
    pub fn local_gid(&self) -> Gid {
        self.local_gid
    }

    /// The rdma_cm state of `id`.
    pub fn state(&self, id: CmIdHandle) -> Option<RdmaCmState> {
        self.ids.get(&id).map(|r| r.state)
    }

    /// The IB CM state under `id`.
    pub fn ib_cm_state(&self, id: CmIdHandle) -> Option<IbCmState> {
        self.engine.state(IbCmId(id.0))
    }

    /// The QP attached to `id`.
    pub fn qp(&self, id: CmIdHandle) -> Option<Qp> {
        self.ids.get(&id).and_then(|r| r.qp)
    }

    /// Local and peer addresses of `id` (`rdma_get_local_addr`/`rdma_get_peer_addr`).
    pub fn addrs(&self, id: CmIdHandle) -> Option<(Option<SocketAddr>, Option<SocketAddr>)> {
        self.ids.get(&id).map(|r| (r.src, r.dst))
    }

    /// Ids that exist, in handle order.
    pub fn ids(&self) -> Vec<CmIdHandle> {
        self.ids.keys().copied().collect()
    }

    fn rec(&mut self, id: CmIdHandle) -> Result<&mut IdRec, Error> {
        self.ids
            .get_mut(&id)
            .ok_or_else(|| inval("unknown rdma_cm id"))
    }

    /// `rdma_create_event_channel`.
    pub fn create_event_channel(&mut self) -> EventChannel {
        let ch = EventChannel(self.next_channel);
        self.next_channel += 1;
        self.channels.insert(ch, VecDeque::new());
        ch
    }

    /// `rdma_destroy_event_channel`.
    ///
    /// # Errors
    /// `EBUSY` while an id still reports to it; `EINVAL` for an unknown channel.
    pub fn destroy_event_channel(&mut self, ch: EventChannel) -> Result<(), Error> {
        if !self.channels.contains_key(&ch) {
            return Err(inval("unknown event channel"));
        }
        if self.ids.values().any(|r| r.channel == ch) {
            return Err(Error::new(Errno::EBUSY, "event channel still has ids"));
        }
        self.channels.remove(&ch);
        Ok(())
    }

    /// `rdma_create_id(channel, &id, ctx, ps)`: a new id in IDLE.
    ///
    /// # Errors
    /// `EINVAL` for an unknown channel.
    pub fn create_id(
        &mut self,
        channel: EventChannel,
        ps: RdmaPortSpace,
    ) -> Result<CmIdHandle, Error> {
        if !self.channels.contains_key(&channel) {
            return Err(inval("unknown event channel"));
        }
        let id = CmIdHandle(self.engine.create_id().0);
        self.ids.insert(id, Self::new_rec(channel, ps));
        Ok(id)
    }

    fn new_rec(channel: EventChannel, ps: RdmaPortSpace) -> IdRec {
        IdRec {
            channel,
            ps,
            state: RdmaCmState::Idle,
            bound: false,
            src: None,
            dst: None,
            qp: None,
            has_cm_id: false,
            listen_id: None,
            unacked: BTreeMap::new(),
            connect_error: false,
        }
    }

    fn local_addr(&mut self, want: Option<SocketAddr>) -> Result<SocketAddr, Error> {
        let local_ip = self.local_gid.to_ip();
        let ip = match want.map(|a| a.ip()) {
            None => local_ip,
            Some(ip) if ip.is_unspecified() || ip == local_ip => local_ip,
            Some(_) => {
                return Err(Error::new(
                    Errno::EADDRNOTAVAIL,
                    "address is not this device's",
                ))
            }
        };
        let port = match want.map(|a| a.port()) {
            Some(p) if p != 0 => p,
            _ => {
                let p = self.next_port;
                self.next_port = if p >= 60999 { 32768 } else { p + 1 };
                p
            }
        };
        Ok(SocketAddr::new(ip, port))
    }

    /// `rdma_bind_addr`: IDLE → ADDR_BOUND. Port 0 picks an ephemeral port; a wildcard IP
    /// does not bind the id to the device.
    ///
    /// # Errors
    /// `EINVAL` unless IDLE; `EADDRNOTAVAIL` for an IP that is not this device's;
    /// `EADDRINUSE` when another id of the port space listens/binds on the port.
    pub fn bind_addr(&mut self, id: CmIdHandle, addr: SocketAddr) -> Result<(), Error> {
        if self.rec(id)?.state != RdmaCmState::Idle {
            return Err(inval("rdma_bind_addr: id not IDLE"));
        }
        let ps = self.rec(id)?.ps;
        if addr.port() != 0
            && self.ids.values().any(|r| {
                r.ps == ps && r.dst.is_none() && r.src.map(|s| s.port()) == Some(addr.port())
            })
        {
            return Err(Error::new(Errno::EADDRINUSE, "port already bound"));
        }
        let local = self.local_addr(Some(addr))?;
        let r = self.rec(id)?;
        r.bound = !addr.ip().is_unspecified();
        r.src = Some(local);
        r.state = RdmaCmState::AddrBound;
        Ok(())
    }

    /// `rdma_resolve_addr`: IDLE/ADDR_BOUND → ADDR_QUERY; ADDR_RESOLVED is queued at once
    /// (the fabric is flat: every address resolves to the GID of that IP). Binds the id to
    /// the device.
    ///
    /// # Errors
    /// `EINVAL` in another state; `EADDRNOTAVAIL` for a foreign `src`.
    pub fn resolve_addr(
        &mut self,
        id: CmIdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Result<(), Error> {
        let r = self.rec(id)?;
        if !matches!(r.state, RdmaCmState::Idle | RdmaCmState::AddrBound) {
            return Err(inval("rdma_resolve_addr: wrong state"));
        }
        let want = src.or(r.src);
        let local = self.local_addr(want)?;
        let r = self.rec(id)?;
        r.src = Some(local);
        r.dst = Some(dst);
        r.bound = true;
        r.state = RdmaCmState::AddrQuery;
        self.deliver(
            id,
            CmEventType::AddrResolved,
            0,
            None,
            ConnEventParam::default(),
        );
        Ok(())
    }

    /// `rdma_resolve_route`: ADDR_RESOLVED → ROUTE_QUERY; ROUTE_RESOLVED is queued at once.
    ///
    /// # Errors
    /// `EINVAL` unless ADDR_RESOLVED.
    pub fn resolve_route(&mut self, id: CmIdHandle) -> Result<(), Error> {
        let r = self.rec(id)?;
        if r.state != RdmaCmState::AddrResolved {
            return Err(inval("rdma_resolve_route: address not resolved"));
        }
        r.state = RdmaCmState::RouteQuery;
        self.deliver(
            id,
            CmEventType::RouteResolved,
            0,
            None,
            ConnEventParam::default(),
        );
        Ok(())
    }

    /// `rdma_create_qp`: creates an RC QP on the device and moves it to INIT (librdmacm
    /// `ucma_init_conn_qp`); the CM moves it through RTR/RTS on connect/accept.
    ///
    /// # Errors
    /// `EINVAL` when the id is not bound to the device or already has a QP; what the device
    /// returns for `create_qp`/`modify_qp` (the QP is destroyed again then).
    pub fn create_qp(
        &mut self,
        dev: &mut dyn CmDevice,
        id: CmIdHandle,
        pd: PdHandle,
        init: &QpInitAttr,
    ) -> Result<Qp, Error> {
        let r = self.rec(id)?;
        if !r.bound || r.qp.is_some() {
            return Err(inval("rdma_create_qp: id unbound or has a QP"));
        }
        let qp = dev.create_qp(pd, init)?;
        let (attr, mask) = QpAction::init(AccessFlags::empty()).attr_mask();
        if let Err(e) = dev.modify_qp(qp.handle, &attr, mask) {
            let _ = dev.destroy_qp(qp.handle);
            return Err(e);
        }
        self.rec(id)?.qp = Some(qp);
        Ok(qp)
    }

    /// Attaches a QP the application created itself; the CM drives it exactly as one from
    /// [`RdmaCm::create_qp`] but leaves its current state alone until connect/accept.
    ///
    /// # Errors
    /// `EINVAL` when the id already has a QP.
    pub fn attach_qp(&mut self, id: CmIdHandle, qp: Qp) -> Result<(), Error> {
        let r = self.rec(id)?;
        if r.qp.is_some() {
            return Err(inval("id already has a QP"));
        }
        r.qp = Some(qp);
        Ok(())
    }

    /// Forgets the id's QP (after the application destroyed it, `rdma_destroy_qp`).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id.
    pub fn detach_qp(&mut self, id: CmIdHandle) -> Result<Option<Qp>, Error> {
        Ok(self.rec(id)?.qp.take())
    }

    /// `rdma_connect`: ROUTE_RESOLVED → CONNECT; sends a REQ with the IP service ID and the
    /// IP-CM header (cm-spec §2.10, §4.3).
    ///
    /// # Errors
    /// `EINVAL` unless ROUTE_RESOLVED, or for private data over 56 bytes.
    pub fn connect(
        &mut self,
        dev: &mut dyn CmDevice,
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
            .req_private_data(&param.private_data)
            .map_err(|e| Error::new(e.errno(), e.to_string()))?;
        let req = ReqParams {
            service_id: ip_service_id(r.ps, dst.port()),
            local_gid,
            remote_gid: Gid::from_ip(dst.ip()),
            local_qpn: r.qp.map_or(param.qp_num, |q| q.qp_num),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            retry_count: param.retry_count,
            rnr_retry_count: param.rnr_retry_count,
            srq: false,
            private_data,
        };
        self.engine.send_req(now, IbCmId(id.0), &req)?;
        let r = self.rec(id)?;
        r.state = RdmaCmState::Connect;
        r.has_cm_id = true;
        self.flush(dev, now);
        Ok(())
    }

    /// `rdma_listen`: ADDR_BOUND → LISTEN on the service ID of the bound port; `backlog`
    /// CONNECT_REQUESTs may be unread at once (more REQs are dropped without REJ, §4.2).
    ///
    /// # Errors
    /// `EINVAL` unless ADDR_BOUND; `EBUSY` when the port already has a listener.
    pub fn listen(&mut self, id: CmIdHandle, backlog: u32) -> Result<(), Error> {
        let r = self.rec(id)?;
        let (RdmaCmState::AddrBound, Some(src)) = (r.state, r.src) else {
            return Err(inval("rdma_listen: id not bound"));
        };
        let sid = ip_service_id(r.ps, src.port());
        self.engine.listen(IbCmId(id.0), sid, backlog)?;
        let r = self.rec(id)?;
        r.state = RdmaCmState::Listen;
        r.has_cm_id = true;
        Ok(())
    }

    fn apply_qp(dev: &mut dyn CmDevice, qp: Option<Qp>, action: &QpAction) -> Result<(), Error> {
        match qp {
            Some(qp) => {
                let (attr, mask) = action.attr_mask();
                dev.modify_qp(qp.handle, &attr, mask)
            }
            None => Ok(()),
        }
    }

    /// `rdma_accept`. Passive id: moves the QP INIT → RTR → RTS with the negotiated
    /// attributes, then sends the REP (ESTABLISHED follows the RTU). Active id without a QP
    /// after CONNECT_RESPONSE: sends the RTU and reports ESTABLISHED.
    ///
    /// # Errors
    /// `EINVAL` unless the id is in CONNECT with a REQ/REP to answer, or for private data over
    /// 196 bytes; a QP transition error (the QP is then moved to ERR and REJ 28 sent, §4.8).
    pub fn accept(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
        param: &ConnParam,
    ) -> Result<(), Error> {
        let r = self.rec(id)?;
        if r.state != RdmaCmState::Connect {
            return Err(inval("rdma_accept: id not in CONNECT"));
        }
        let qp = r.qp;
        let ib = IbCmId(id.0);
        let res = match self.engine.state(ib) {
            Some(IbCmState::ReqRcvd | IbCmState::MraReqSent) => {
                self.accept_passive(dev, now, ib, qp, param)
            }
            Some(IbCmState::RepRcvd | IbCmState::MraRepSent) => {
                self.engine.send_rtu(ib, &param.private_data)?;
                self.deliver(
                    id,
                    CmEventType::Established,
                    0,
                    None,
                    ConnEventParam::default(),
                );
                Ok(())
            }
            _ => Err(inval("rdma_accept: nothing to accept")),
        };
        self.flush(dev, now);
        res
    }

    fn accept_passive(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        ib: IbCmId,
        qp: Option<Qp>,
        param: &ConnParam,
    ) -> Result<(), Error> {
        if param.private_data.len() > crate::wire::IB_CM_REP_PRIVATE_DATA_SIZE {
            return Err(inval("rdma_accept: private data over 196 bytes"));
        }
        let mut qpp = self.engine.qp_params(ib)?;
        qpp.responder_resources = param.responder_resources;
        qpp.initiator_depth = param.initiator_depth;
        let moved = qpp
            .actions()
            .iter()
            .try_for_each(|a| Self::apply_qp(dev, qp, a));
        if let Err(e) = moved {
            let _ = Self::apply_qp(dev, qp, &QpAction::Err);
            let _ = self
                .engine
                .send_rej(now, ib, RejectReason::ConsumerDefined, &[], &[]);
            return Err(e);
        }
        let rep = RepParams {
            local_qpn: qp.map_or(param.qp_num, |q| q.qp_num),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            rnr_retry_count: param.rnr_retry_count,
            srq: false,
            private_data: param.private_data.clone(),
        };
        self.engine.send_rep(now, ib, &rep)
    }

    /// `rdma_reject`: REJ reason 28 (consumer defined) with `private_data` (≤ 148 bytes).
    ///
    /// # Errors
    /// `EINVAL` unless the id is in CONNECT with a REQ/REP not yet answered (IB CM REQ_RCVD,
    /// MRA_REQ_SENT, REP_RCVD, MRA_REP_SENT, REP_SENT, MRA_REP_RCVD), or for long private data.
    pub fn reject(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
        private_data: &[u8],
    ) -> Result<(), Error> {
        if self.rec(id)?.state != RdmaCmState::Connect {
            return Err(inval("rdma_reject: id not in CONNECT"));
        }
        let ib = IbCmId(id.0);
        if matches!(
            self.engine.state(ib),
            Some(IbCmState::ReqSent | IbCmState::MraReqRcvd)
        ) {
            return Err(inval("rdma_reject: nothing to reject"));
        }
        self.engine
            .send_rej(now, ib, RejectReason::ConsumerDefined, &[], private_data)?;
        self.flush(dev, now);
        Ok(())
    }

    /// `rdma_establish` / `rdma_notify(IBV_EVENT_COMM_EST)`: the passive side saw data before
    /// the RTU; the id becomes ESTABLISHED (USER_ESTABLISHED → ESTABLISHED, §4.3).
    ///
    /// # Errors
    /// `EINVAL` unless the IB CM id is in REP_SENT/MRA_REP_RCVD.
    pub fn establish(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        self.rec(id)?;
        self.engine.establish(IbCmId(id.0))?;
        self.flush(dev, now);
        Ok(())
    }

    /// `rdma_disconnect`, exactly as cm-spec §4.4: the attached QP goes to ERR first (so the
    /// device flushes its WRs), then a DREQ if the IB CM id is ESTABLISHED, else a DREP if it is
    /// DREQ_RCVD, else nothing. Returns `Ok` in every connected, connecting or disconnecting
    /// state, also on a second call.
    ///
    /// # Errors
    /// `EINVAL` when the id is not bound to the device, when it never connected/accepted/
    /// listened (no IB CM id; the QP was still moved to ERR), or the QP modify's error (e.g.
    /// a QP still in RESET: RESET → ERR is illegal) — then nothing is sent.
    pub fn disconnect(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let r = self.rec(id)?;
        if !r.bound {
            return Err(inval("rdma_disconnect: id not bound to a device"));
        }
        let (qp, has_cm_id) = (r.qp, r.has_cm_id);
        Self::apply_qp(dev, qp, &QpAction::Err)?;
        if !has_cm_id {
            return Err(inval("rdma_disconnect: id never connected"));
        }
        let ib = IbCmId(id.0);
        if self.engine.send_dreq(now, ib, &[]).is_err() {
            let _ = self.engine.send_drep(now, ib, &[]);
        }
        self.flush(dev, now);
        Ok(())
    }

    /// `rdma_destroy_id`: frees the id; the IB CM id is destroyed per state (cm-spec §3.3: one
    /// DREQ without retries from ESTABLISHED, DREP from DREQ_RCVD, REJ from setup states).
    /// Unread events of the id are discarded; a listener also destroys the child ids whose
    /// CONNECT_REQUEST is unread (they get REJ 28). The QP is not touched (destroy it first,
    /// man:rdma_destroy_id.3).
    ///
    /// # Errors
    /// `EBUSY` while an event of this id handed out by `get_cm_event` is not acked (librdmacm
    /// would block forever; a `tracing` warning names the event); `EINVAL` for an unknown id.
    pub fn destroy_id(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let r = self.rec(id)?;
        if let Some((_, ev)) = r.unacked.iter().next() {
            tracing::warn!(
                id = id.0,
                event = ?ev,
                unacked = r.unacked.len(),
                "rdma_destroy_id: un-acked {ev:?} event (librdmacm would block forever)"
            );
            return Err(Error::new(
                Errno::EBUSY,
                format!("un-acked {ev:?} event on this id"),
            ));
        }
        let channel = r.channel;
        let unread_children: Vec<CmIdHandle> = self
            .channels
            .get(&channel)
            .map(|q| {
                q.iter()
                    .filter(|e| e.event == CmEventType::ConnectRequest && e.listen_id == Some(id))
                    .map(|e| e.id)
                    .collect()
            })
            .unwrap_or_default();
        for child in unread_children {
            self.destroy_inner(now, child);
        }
        self.destroy_inner(now, id);
        self.flush(dev, now);
        Ok(())
    }

    fn destroy_inner(&mut self, now: SimTime, id: CmIdHandle) {
        let Some(rec) = self.ids.remove(&id) else {
            return;
        };
        if let Some(q) = self.channels.get_mut(&rec.channel) {
            let mut unread_request = false;
            q.retain(|e| {
                let mine = e.id == id;
                unread_request |= mine && e.event == CmEventType::ConnectRequest;
                !mine
            });
            if let (true, Some(l)) = (unread_request, rec.listen_id) {
                self.engine.release_backlog(IbCmId(l.0));
            }
        }
        self.engine.destroy_id(now, IbCmId(id.0));
    }

    /// `rdma_get_cm_event` on a non-blocking channel: the oldest event.
    ///
    /// # Errors
    /// `EAGAIN` when the channel is empty; `EINVAL` for an unknown channel.
    pub fn get_cm_event(&mut self, channel: EventChannel) -> Result<CmEvent, Error> {
        let q = self
            .channels
            .get_mut(&channel)
            .ok_or_else(|| inval("unknown event channel"))?;
        let ev = q
            .pop_front()
            .ok_or_else(|| Error::new(Errno::EAGAIN, "no CM event"))?;
        if let Some(r) = self.ids.get_mut(&ev.id) {
            r.unacked.insert(ev.seq, ev.event);
        }
        if let (CmEventType::ConnectRequest, Some(l)) = (ev.event, ev.listen_id) {
            // The backlog slot is held until the request is read (cm-spec §4.6).
            self.engine.release_backlog(IbCmId(l.0));
        }
        Ok(ev)
    }

    /// Number of unread events on `channel`.
    pub fn pending_events(&self, channel: EventChannel) -> usize {
        self.channels.get(&channel).map_or(0, VecDeque::len)
    }

    /// `rdma_ack_cm_event`: releases an event returned by `get_cm_event`.
    ///
    /// # Errors
    /// `EINVAL` when the event was not handed out or was already acked.
    pub fn ack_cm_event(&mut self, event: CmEvent) -> Result<(), Error> {
        self.ids
            .get_mut(&event.id)
            .and_then(|r| r.unacked.remove(&event.seq))
            .map(|_| ())
            .ok_or_else(|| inval("rdma_ack_cm_event: event not outstanding"))
    }

    /// Feeds one received MAD to the CM.
    pub fn handle_datagram(&mut self, dev: &mut dyn CmDevice, now: SimTime, src: Gid, mad: &[u8]) {
        self.engine.handle_datagram(now, src, mad);
        self.flush(dev, now);
    }

    /// Takes every MAD waiting on the device's GSI endpoint and processes it.
    pub fn poll_gsi(&mut self, dev: &mut dyn CmDevice, now: SimTime) {
        while let Some(d) = dev.gsi_recv() {
            self.engine.handle_datagram(now, d.peer, &d.mad);
            self.flush(dev, now);
        }
    }

    /// Runs the CM timers due at `now`.
    pub fn handle_timeout(&mut self, dev: &mut dyn CmDevice, now: SimTime) {
        self.engine.handle_timeout(now);
        self.flush(dev, now);
    }

    /// The next time [`RdmaCm::handle_timeout`] has work, if any.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.engine.poll_timeout()
    }

    /// Sends the engine's MADs through the GSI endpoint and turns its events into rdma_cm
    /// events, until both queues are empty.
    fn flush(&mut self, dev: &mut dyn CmDevice, now: SimTime) {
        loop {
            while let Some((dst, mad)) = self.engine.poll_transmit() {
                // UD is unreliable: a send error is a lost datagram; the CM retries.
                let _ = dev.gsi_send(dst, &mad);
            }
            match self.engine.poll_event() {
                Some(ev) => self.on_engine_event(dev, now, ev),
                None => break,
            }
        }
    }

    fn on_engine_event(&mut self, dev: &mut dyn CmDevice, now: SimTime, ev: IbCmEvent) {
        use CmEventType as E;
        let id = CmIdHandle(ev.id.0);
        let none = ConnEventParam::default;
        match ev.kind {
            IbCmEventKind::ReqReceived(info) => self.on_req_received(now, ev.id, info),
            IbCmEventKind::RepReceived(info) => {
                if !self.gate(id, E::ConnectResponse) {
                    return;
                }
                let param = ConnEventParam {
                    private_data: info.private_data,
                    responder_resources: info.responder_resources,
                    initiator_depth: info.initiator_depth,
                    rnr_retry_count: info.rnr_retry_count,
                    srq: info.srq,
                    qp_num: info.remote_qpn,
                    ..ConnEventParam::default()
                };
                let Some(qp) = self.ids.get(&id).and_then(|r| r.qp) else {
                    self.deliver(id, E::ConnectResponse, 0, None, param);
                    return;
                };
                // librdmacm: CONNECT_RESPONSE → QP RTR/RTS → internal accept (RTU) (§4.3).
                let moved = self.engine.qp_params(ev.id).and_then(|p| {
                    p.actions()
                        .iter()
                        .try_for_each(|a| Self::apply_qp(dev, Some(qp), a))
                });
                match moved.and_then(|()| self.engine.send_rtu(ev.id, &[])) {
                    Ok(()) => {
                        self.deliver(id, E::Established, 0, None, param);
                    }
                    Err(e) => {
                        let _ = Self::apply_qp(dev, Some(qp), &QpAction::Err);
                        let _ = self.engine.send_rej(
                            now,
                            ev.id,
                            RejectReason::ConsumerDefined,
                            &[],
                            &[],
                        );
                        self.deliver(id, E::ConnectError, -e.errno.code(), None, param);
                        if let Some(r) = self.ids.get_mut(&id) {
                            r.connect_error = true;
                        }
                    }
                }
            }
            IbCmEventKind::RtuReceived(_) | IbCmEventKind::UserEstablished => {
                self.deliver(id, E::Established, 0, None, none());
            }
            IbCmEventKind::ReqError | IbCmEventKind::RepError => {
                self.deliver(id, E::Unreachable, -Errno::ETIMEDOUT.code(), None, none());
            }
            IbCmEventKind::DreqError => {
                self.deliver(id, E::Disconnected, -Errno::ETIMEDOUT.code(), None, none());
            }
            IbCmEventKind::DreqReceived(pd) | IbCmEventKind::DrepReceived(pd) => {
                let param = ConnEventParam {
                    private_data: pd,
                    ..ConnEventParam::default()
                };
                self.deliver(id, E::Disconnected, 0, None, param);
            }
            IbCmEventKind::TimewaitExit => {
                self.deliver(id, E::TimewaitExit, 0, None, none());
            }
            IbCmEventKind::MraReceived => {}
            IbCmEventKind::RejReceived {
                reason,
                private_data,
                ..
            } => {
                if !self.gate(id, E::Rejected) {
                    return;
                }
                // cma moves the QP to ERR before reporting REJECTED (§4.2).
                let qp = self.ids.get(&id).and_then(|r| r.qp);
                let _ = Self::apply_qp(dev, qp, &QpAction::Err);
                let param = ConnEventParam {
                    private_data,
                    ..ConnEventParam::default()
                };
                self.deliver(id, E::Rejected, i32::from(reason), None, param);
            }
        }
    }

    fn on_req_received(&mut self, now: SimTime, ib: IbCmId, info: crate::engine::ReqInfo) {
        let listen = CmIdHandle(info.listen_id.0);
        let listener = self
            .ids
            .get(&listen)
            .filter(|r| r.state == RdmaCmState::Listen)
            .map(|r| (r.channel, r.ps));
        // cma_save_ip_info: a REQ without a valid IP-CM header is refused (REJ 28 via
        // destroy, cm-spec §2.10).
        let hdr = IpCmHeader::split(&info.private_data);
        let (Some((channel, ps)), Ok((hdr, user))) = (listener, hdr) else {
            self.engine.release_backlog(info.listen_id);
            self.engine.destroy_id(now, ib);
            return;
        };
        let port = parse_ip_service_id(info.service_id).map_or(0, |(_, p)| p);
        let id = CmIdHandle(ib.0);
        let mut rec = Self::new_rec(channel, ps);
        rec.state = RdmaCmState::Connect;
        rec.bound = true;
        rec.has_cm_id = true;
        rec.src = Some(SocketAddr::new(hdr.dst_addr, port));
        rec.dst = Some(SocketAddr::new(hdr.src_addr, hdr.src_port));
        rec.listen_id = Some(listen);
        self.ids.insert(id, rec);
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

    /// Whether `event` may be raised for `id` now (cm-spec §4.2 gate, lib-cma suppression).
    fn gate(&self, id: CmIdHandle, event: CmEventType) -> bool {
        use CmEventType as E;
        use RdmaCmState as S;
        let Some(r) = self.ids.get(&id) else {
            return false;
        };
        match event {
            E::AddrResolved | E::AddrError => r.state == S::AddrQuery,
            E::RouteResolved | E::RouteError => r.state == S::RouteQuery,
            E::TimewaitExit => r.state == S::Disconnect,
            E::Rejected | E::Disconnected => r.state == S::Connect && !r.connect_error,
            _ => r.state == S::Connect,
        }
    }

    /// The one path by which events reach a channel. Applies the gate and the state change the
    /// event implies (ADDR_QUERY → ADDR_RESOLVED, ROUTE_QUERY → ROUTE_RESOLVED, the atomic
    /// CONNECT → DISCONNECT swap of DISCONNECTED), so DISCONNECTED is raised at most once per
    /// id. Returns whether the event was queued.
    fn deliver(
        &mut self,
        id: CmIdHandle,
        event: CmEventType,
        status: i32,
        listen_id: Option<CmIdHandle>,
        param: ConnEventParam,
    ) -> bool {
        use CmEventType as E;
        if !self.gate(id, event) {
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let Some(r) = self.ids.get_mut(&id) else {
            return false;
        };
        match event {
            E::AddrResolved => r.state = RdmaCmState::AddrResolved,
            E::RouteResolved => r.state = RdmaCmState::RouteResolved,
            E::Disconnected => r.state = RdmaCmState::Disconnect,
            _ => {}
        }
        let ev = CmEvent {
            event,
            id,
            listen_id,
            status,
            param,
            seq,
        };
        match self.channels.get_mut(&r.channel) {
            Some(q) => {
                q.push_back(ev);
                true
            }
            None => false,
        }
    }
}
