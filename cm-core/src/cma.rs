//! The kernel side of rdma_cm: Linux `drivers/infiniband/core/cma.c` as user space reaches it
//! through `ucma.c` (cm-spec §4.1, §4.2, §4.4, §4.6).
//!
//! One [`Cma`] per host/device owns the [`CmEngine`] (the IB CM), the rdma_cm ids with their
//! addresses and `enum rdma_cm_state`, the event channels and the events queued on them. Like the
//! kernel for a user-space id, it never touches a QP: the QP belongs to the application and
//! librdmacm moves it ([`crate::librdmacm`], which drives this layer as librdmacm drives
//! `ucma`). All it needs of the device is the GSI endpoint, for the MADs: every call that can
//! send one takes it (`&mut dyn GsiEndpoint`) with the current time, and sends what the engine
//! queued before returning. It never blocks and never reads a clock.
//!
//! Events are made as `cma_ib_handler` makes them for an id without a kernel QP: a REP is
//! CONNECT_RESPONSE (never ESTABLISHED), a REJ is REJECTED and no QP moves. What the
//! application then sees is decided by librdmacm when it fetches the event.
//!
//! Every event goes through one guard (`Cma::deliver`, private): IB CM events other than
//! TIMEWAIT_EXIT pass only while the id is in CONNECT, DISCONNECTED only through the atomic
//! CONNECT → DISCONNECT swap, TIMEWAIT_EXIT only in DISCONNECT (cm-spec §4.2), so DISCONNECTED
//! is raised at most once per id and TIMEWAIT_EXIT only after it.

use crate::engine::{
    CmConfig, CmCounters, CmEngine, IbCmEvent, IbCmEventKind, IbCmId, IbCmState, QpParams,
    RepParams, ReqInfo, ReqParams,
};
use crate::shared::{
    CmEvent, CmEventType, CmIdHandle, ConnEventParam, ConnParam, EventChannel, RdmaCmState, UdParam,
};
use crate::wire::{ip_service_id, parse_ip_service_id, IpCmHeader, RdmaPortSpace, RejectReason};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use verbs_core::{Errno, Error, Gid, GsiEndpoint, SimTime};

mod events;
mod migrate;
mod multicast;
mod removal;
mod ud;

pub use multicast::{multicast_gid, MAX_JOINS_PER_ID};

/// What the kernel keeps of one rdma_cm id (`struct rdma_id_private`, the parts modelled).
#[derive(Debug, Clone)]
struct KernelId {
    channel: EventChannel,
    ps: RdmaPortSpace,
    state: RdmaCmState,
    /// Bound to the device (`id->device` non-NULL).
    bound: bool,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    /// An IB CM id is in use (connect, listen or passive child): cm-spec §4.4 row "never
    /// connected".
    has_cm_id: bool,
    listen_id: Option<CmIdHandle>,
    /// ucma's `ctx->uid` is set: the id was created by the application, or is a passive id it
    /// accepted (`ucma_accept`). Until then ucma drops the id's events (`ucma_event_handler`:
    /// "We ignore events for new connections until userspace has set their context").
    uid_set: bool,
    /// The device went away under the id (DEVICE_REMOVAL): ucma closed it (`ucma_close_id`),
    /// every call but destroy returns `ENXIO`.
    removed: bool,
    /// `id_priv->qkey`: 0 until the id's UD QP, a SIDR_REP or a multicast join gives it one
    /// (`cma_set_qkey`, cma/ud.rs).
    qkey: u32,
    /// Multicast groups joined (`id_priv->mc_list`, cma/multicast.rs).
    joins: Vec<multicast::Join>,
}

impl KernelId {
    fn new(channel: EventChannel, ps: RdmaPortSpace) -> KernelId {
        KernelId {
            channel,
            ps,
            state: RdmaCmState::Idle,
            bound: false,
            src: None,
            dst: None,
            has_cm_id: false,
            listen_id: None,
            uid_set: true,
            removed: false,
            qkey: 0,
            joins: Vec::new(),
        }
    }
}

/// The largest listen backlog, and the one `rdma_listen` with backlog 0 gets (Linux
/// `drivers/infiniband/core/ucma.c`: `max_backlog`, 1024).
pub const UCMA_MAX_BACKLOG: u32 = 1024;

/// The kernel-side rdma_cm of one host/device. See the module docs. `Clone` is a full,
/// independent snapshot, engine included.
#[derive(Debug, Clone)]
pub struct Cma {
    engine: CmEngine,
    local_gid: Gid,
    ids: BTreeMap<CmIdHandle, KernelId>,
    channels: BTreeMap<EventChannel, VecDeque<CmEvent>>,
    next_channel: u32,
    next_seq: u64,
    next_port: u16,
    /// The device was removed ([`Cma::device_removal`]): no MAD leaves or is taken any more.
    device_removed: bool,
}

fn inval(what: &str) -> Error {
    Error::inval(what.to_string())
}

impl Cma {
    /// The rdma_cm of the device whose address (GID index 0 of port 1) is `local_gid`.
    pub fn new(local_gid: Gid, cfg: CmConfig) -> Cma {
        Cma {
            engine: CmEngine::new(cfg),
            local_gid,
            ids: BTreeMap::new(),
            channels: BTreeMap::new(),
            next_channel: 1,
            next_seq: 1,
            // ephemeral ports as Linux's default ip_local_port_range, start drawn from the seed
            next_port: 32768 + (cfg.seed % 28232) as u16,
            device_removed: false,
        }
    }

    /// The engine (read-only): IB CM states, counters, timers.
    pub fn engine(&self) -> &CmEngine {
        &self.engine
    }

    /// The engine, for what concerns only the IB CM's bookkeeping: change tracking and
    /// snapshots of connections ([`CmEngine::track_changes`], [`CmEngine::take_changed`]).
    pub fn engine_mut(&mut self) -> &mut CmEngine {
        &mut self.engine
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

    /// Whether `id` is bound to the device (`id->verbs` non-NULL in librdmacm); `None` for an
    /// unknown id.
    pub fn is_bound(&self, id: CmIdHandle) -> Option<bool> {
        self.ids.get(&id).map(|r| r.bound)
    }

    /// Local and peer addresses of `id` (`rdma_get_local_addr`/`rdma_get_peer_addr`).
    pub fn addrs(&self, id: CmIdHandle) -> Option<(Option<SocketAddr>, Option<SocketAddr>)> {
        self.ids.get(&id).map(|r| (r.src, r.dst))
    }

    /// The listener a passive id was created from; `None` for an active id or an unknown one.
    pub fn listen_id(&self, id: CmIdHandle) -> Option<CmIdHandle> {
        self.ids.get(&id).and_then(|r| r.listen_id)
    }

    /// Ids that exist, in handle order.
    pub fn ids(&self) -> Vec<CmIdHandle> {
        self.ids.keys().copied().collect()
    }

    /// Whether `id` exists.
    pub fn contains(&self, id: CmIdHandle) -> bool {
        self.ids.contains_key(&id)
    }

    /// The id for a ucma command: `EINVAL` for an unknown one, `ENXIO` for one whose device
    /// went away (`ucma_get_ctx`: `refcount_inc_not_zero` fails once `ucma_close_id` ran).
    fn rec(&mut self, id: CmIdHandle) -> Result<&mut KernelId, Error> {
        match self.ids.get_mut(&id) {
            None => Err(inval("unknown rdma_cm id")),
            Some(r) if r.removed => Err(Error::new(
                Errno::ENXIO,
                "the id's device was removed (only rdma_destroy_id is left)",
            )),
            Some(r) => Ok(r),
        }
    }

    /// `EBADF` for a destroyed channel (its descriptor is closed), `EINVAL` for one never
    /// made.
    fn bad_channel(&self, ch: EventChannel) -> Error {
        if ch.0 < self.next_channel {
            Error::new(Errno::EBADF, "event channel destroyed (descriptor closed)")
        } else {
            inval("unknown event channel")
        }
    }

    /// `rdma_create_event_channel` (opening `/dev/infiniband/rdma_cm`).
    pub fn create_event_channel(&mut self) -> EventChannel {
        let ch = EventChannel(self.next_channel);
        self.next_channel += 1;
        self.channels.insert(ch, VecDeque::new());
        ch
    }

    /// `rdma_destroy_event_channel`.
    ///
    /// # Errors
    /// `EBUSY` while an id still reports to it; `EBADF` for a channel destroyed already,
    /// `EINVAL` for one never made.
    pub fn destroy_event_channel(&mut self, ch: EventChannel) -> Result<(), Error> {
        if !self.channels.contains_key(&ch) {
            return Err(self.bad_channel(ch));
        }
        if self.ids.values().any(|r| r.channel == ch) {
            return Err(Error::new(Errno::EBUSY, "event channel still has ids"));
        }
        self.channels.remove(&ch);
        Ok(())
    }

    /// ucma CREATE_ID: a new id in IDLE reporting to `channel`.
    ///
    /// # Errors
    /// `EBADF` for a destroyed channel, `EINVAL` for one never made.
    pub fn create_id(
        &mut self,
        channel: EventChannel,
        ps: RdmaPortSpace,
    ) -> Result<CmIdHandle, Error> {
        if !self.channels.contains_key(&channel) {
            return Err(self.bad_channel(channel));
        }
        let id = CmIdHandle(self.engine.create_id().0);
        self.ids.insert(id, KernelId::new(channel, ps));
        Ok(id)
    }

    fn local_addr(&mut self, want: Option<SocketAddr>) -> Result<SocketAddr, Error> {
        self.device_present(want)?;
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
                // A removed id's port is free: ucma_close_id destroyed its cm_id.
                r.ps == ps
                    && !r.removed
                    && r.dst.is_none()
                    && r.src.map(|s| s.port()) == Some(addr.port())
            })
        {
            return Err(Error::new(Errno::EADDRINUSE, "port already bound"));
        }
        let local = self.local_addr(Some(addr))?;
        let r = self.rec(id)?;
        r.bound = !addr.ip().is_unspecified();
        r.src = Some(local);
        r.set_state(id, RdmaCmState::AddrBound);
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
        r.set_state(id, RdmaCmState::AddrQuery);
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
        r.set_state(id, RdmaCmState::RouteQuery);
        self.deliver(
            id,
            CmEventType::RouteResolved,
            0,
            None,
            ConnEventParam::default(),
        );
        Ok(())
    }

    /// `rdma_connect` (ucma CONNECT, cma `cma_connect_ib`): ROUTE_RESOLVED → CONNECT; sends a
    /// REQ with the IP service ID and the IP-CM header (cm-spec §2.10, §4.3) advertising
    /// `qp_num` (the QP is librdmacm's; the kernel only names it). A UD id sends a SIDR_REQ
    /// instead (`cma_resolve_ib_udp`, cma/ud.rs).
    ///
    /// # Errors
    /// `EINVAL` unless ROUTE_RESOLVED, or for private data over 56 bytes (UD: 180).
    pub fn connect(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
        param: &ConnParam,
        qp_num: u32,
    ) -> Result<(), Error> {
        if self.rec(id)?.is_ud() {
            return self.connect_ud(gsi, now, id, param);
        }
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
            local_qpn: qp_num,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            retry_count: param.retry_count,
            rnr_retry_count: param.rnr_retry_count,
            srq: false,
            private_data,
        };
        self.engine.send_req(now, IbCmId(id.0), &req)?;
        let r = self.rec(id)?;
        r.set_state(id, RdmaCmState::Connect);
        r.has_cm_id = true;
        self.flush(gsi, now);
        Ok(())
    }

    /// `rdma_listen`: ADDR_BOUND → LISTEN on the service ID of the bound port; `backlog`
    /// CONNECT_REQUESTs may be unread at once (more REQs are dropped without REJ, cm-spec
    /// §4.2). A backlog of 0 or above [`UCMA_MAX_BACKLOG`] is [`UCMA_MAX_BACKLOG`], as the
    /// kernel's `ucma_listen` makes it (so `rdma_listen(id, 0)`, which ucmatose uses, takes many
    /// requests at once).
    ///
    /// An id still IDLE is first bound to the wildcard address and an ephemeral port, as
    /// Linux's `rdma_listen` does.
    ///
    /// # Errors
    /// `EINVAL` unless IDLE or ADDR_BOUND; `EBUSY` when the port already has a listener.
    pub fn listen(&mut self, id: CmIdHandle, backlog: u32) -> Result<(), Error> {
        let backlog = if backlog == 0 || backlog > UCMA_MAX_BACKLOG {
            UCMA_MAX_BACKLOG
        } else {
            backlog
        };
        if self.rec(id)?.state == RdmaCmState::Idle {
            // Linux `rdma_listen` binds an unbound id to the wildcard address, port 0 (an
            // ephemeral port), itself.
            self.bind_addr(id, SocketAddr::from(([0, 0, 0, 0], 0)))?;
        }
        let r = self.rec(id)?;
        let (RdmaCmState::AddrBound, Some(src)) = (r.state, r.src) else {
            return Err(inval("rdma_listen: id not bound"));
        };
        let sid = ip_service_id(r.ps, src.port());
        self.engine.listen(IbCmId(id.0), sid, backlog)?;
        let r = self.rec(id)?;
        r.set_state(id, RdmaCmState::Listen);
        r.has_cm_id = true;
        Ok(())
    }

    /// `rdma_init_qp_attr` (ucma INIT_QP_ATTR → `ib_cm_init_qp_attr`): the negotiated QP
    /// attributes librdmacm moves the QP with (cm-spec §5.2).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id or one whose peer is not known yet (no REQ/REP received);
    /// `ENXIO` once the id's device was removed.
    pub fn init_qp_attr(&self, id: CmIdHandle) -> Result<QpParams, Error> {
        match self.ids.get(&id) {
            None => return Err(inval("unknown rdma_cm id")),
            Some(r) if r.removed => {
                return Err(Error::new(Errno::ENXIO, "the id's device was removed"))
            }
            Some(_) => {}
        }
        self.engine.qp_params(IbCmId(id.0))
    }

    /// ucma ACCEPT → cma `rdma_accept`. Passive id (IB CM REQ_RCVD/MRA_REQ_SENT): sends the
    /// REP advertising `qp_num`, with `param`'s resources, RNR retry count and private data
    /// (ESTABLISHED follows the RTU). Active id after CONNECT_RESPONSE (REP_RCVD/
    /// MRA_REP_SENT): sends the RTU with `param.private_data` (`cma_rep_recv`, what
    /// librdmacm's internal accept in `ucma_process_conn_resp` asks for); no event follows on
    /// this side: the kernel reports none for a user-space id (cm-spec §4.2).
    ///
    /// A UD passive id answers its SIDR_REQ with a SIDR_REP naming `qp_num` (cma/ud.rs).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id, unless the id is in CONNECT with a REQ/REP to answer, or for
    /// private data over 196 (REP) / 224 (RTU) bytes (UD: 136); nothing is sent then.
    pub fn accept(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
        param: &ConnParam,
        qp_num: u32,
    ) -> Result<(), Error> {
        let r = self.rec(id)?;
        if r.state != RdmaCmState::Connect {
            return Err(inval("rdma_accept: id not in CONNECT"));
        }
        if r.is_ud() {
            return self.accept_ud(gsi, now, id, param, qp_num);
        }
        let ib = IbCmId(id.0);
        let res = match self.engine.state(ib) {
            Some(IbCmState::ReqRcvd | IbCmState::MraReqSent) => {
                let rep = RepParams {
                    local_qpn: qp_num,
                    responder_resources: param.responder_resources,
                    initiator_depth: param.initiator_depth,
                    rnr_retry_count: param.rnr_retry_count,
                    srq: false,
                    private_data: param.private_data.clone(),
                };
                self.engine.send_rep(now, ib, &rep)
            }
            Some(IbCmState::RepRcvd | IbCmState::MraRepSent) => {
                self.engine.send_rtu(ib, &param.private_data)
            }
            _ => Err(inval("rdma_accept: nothing to accept")),
        };
        if res.is_ok() {
            // ucma_accept: "The uid must be set atomically with the handler".
            self.rec(id)?.uid_set = true;
        }
        self.flush(gsi, now);
        res
    }

    /// `rdma_reject`: REJ reason 28 (consumer defined) with `private_data` (≤ 148 bytes); on
    /// a UD passive id a SIDR_REP with status 2, reject (≤ 136 bytes, cma/ud.rs).
    ///
    /// # Errors
    /// `EINVAL` unless the id is in CONNECT with a REQ/REP not yet answered (IB CM REQ_RCVD,
    /// MRA_REQ_SENT, REP_RCVD, MRA_REP_SENT, REP_SENT, MRA_REP_RCVD; UD: SIDR_REQ_RCVD), or
    /// for long private data.
    pub fn reject(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let r = self.rec(id)?;
        if r.state != RdmaCmState::Connect {
            return Err(inval("rdma_reject: id not in CONNECT"));
        }
        if r.is_ud() {
            return self.reject_ud(gsi, now, id, private_data);
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
        self.flush(gsi, now);
        Ok(())
    }

    /// `rdma_notify(IB_EVENT_COMM_EST)`: the passive side saw data before the RTU; the id
    /// becomes ESTABLISHED (USER_ESTABLISHED → ESTABLISHED, cm-spec §4.3).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id or unless the IB CM id is in REP_SENT/MRA_REP_RCVD.
    pub fn notify(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        self.rec(id)?;
        self.engine.establish(IbCmId(id.0))?;
        self.flush(gsi, now);
        Ok(())
    }

    /// `rdma_notify(id, event)` for an event other than `IB_EVENT_COMM_EST` (ucma NOTIFY →
    /// cma `rdma_notify` → `ib_cm_notify`): `IB_EVENT_PATH_MIG` (`path_mig`) is accepted on an
    /// ESTABLISHED IB CM id with no LAP exchange under way (`cm_migrate`; this CM never has
    /// one) and changes nothing here (Linux swaps in the alternate path's address vector,
    /// which is empty without an alternate path; this CM has none to swap); every other event
    /// is refused (`ib_cm_notify`'s `default: ret = -EINVAL`).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id, for `IB_EVENT_PATH_MIG` outside ESTABLISHED, and for any
    /// other event; `ENXIO` once the id's device was removed (`ucma_get_ctx`).
    pub fn notify_other(&mut self, id: CmIdHandle, path_mig: bool) -> Result<(), Error> {
        self.rec(id)?;
        if path_mig && self.ib_cm_state(id) == Some(IbCmState::Established) {
            return Ok(());
        }
        Err(inval(
            "rdma_notify: only COMM_EST, and PATH_MIG when ESTABLISHED",
        ))
    }

    /// The kernel half of `rdma_disconnect` (ucma DISCONNECT → cma `rdma_disconnect`, cm-spec
    /// §4.4): a DREQ if the IB CM id is ESTABLISHED, else a DREP if it is DREQ_RCVD, else
    /// nothing, and `Ok` in each of these cases. Moving the QP to ERR first is librdmacm's
    /// half.
    ///
    /// # Errors
    /// `EINVAL` for an unknown id, one not bound to the device, or one that never connected,
    /// accepted or listened (no IB CM id); nothing is sent then.
    pub fn disconnect(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let r = self.rec(id)?;
        if !r.bound {
            return Err(inval("rdma_disconnect: id not bound to a device"));
        }
        if !r.has_cm_id {
            return Err(inval("rdma_disconnect: id never connected"));
        }
        let ib = IbCmId(id.0);
        // A DREQ from ESTABLISHED, a DREP from DREQ_RCVD, nothing in any other state (where
        // both calls refuse, changing nothing). The state is asked first: a refused call would
        // format an error message only for it to be dropped.
        match self.engine.state(ib) {
            Some(IbCmState::Established) => {
                let _ = self.engine.send_dreq(now, ib, &[]);
            }
            Some(IbCmState::DreqRcvd) => {
                let _ = self.engine.send_drep(now, ib, &[]);
            }
            _ => {}
        }
        self.flush(gsi, now);
        Ok(())
    }

    /// ucma DESTROY_ID: frees the id; the IB CM id is destroyed per state (cm-spec §3.3: one
    /// DREQ without retries from ESTABLISHED, DREP from DREQ_RCVD, REJ from setup states).
    /// Unread events of the id are discarded; a listener also destroys the child ids whose
    /// CONNECT_REQUEST is unread (they get REJ 28).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id.
    pub fn destroy_id(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let channel = self
            .ids
            .get(&id)
            .ok_or_else(|| inval("unknown rdma_cm id"))?
            .channel;
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
        self.flush(gsi, now);
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

    /// ucma GET_EVENT on a non-blocking channel: takes the oldest event. Reading a
    /// CONNECT_REQUEST frees its listener's backlog slot (cm-spec §4.6).
    ///
    /// # Errors
    /// `EAGAIN` when the channel is empty; `EBADF` for a destroyed channel (librdmacm's
    /// `write` on the closed descriptor), `EINVAL` for one never made.
    pub fn get_event(&mut self, channel: EventChannel) -> Result<CmEvent, Error> {
        if !self.channels.contains_key(&channel) {
            return Err(self.bad_channel(channel));
        }
        let q = self
            .channels
            .get_mut(&channel)
            .ok_or_else(|| inval("unknown event channel"))?;
        let ev = q
            .pop_front()
            .ok_or_else(|| Error::new(Errno::EAGAIN, "no CM event"))?;
        if let (CmEventType::ConnectRequest, Some(l)) = (ev.event, ev.listen_id) {
            self.engine.release_backlog(IbCmId(l.0));
        }
        Ok(ev)
    }

    /// The events queued on `channel` and not read yet, oldest first (none for an unknown
    /// channel).
    pub fn queued(&self, channel: EventChannel) -> impl Iterator<Item = &CmEvent> {
        self.channels.get(&channel).into_iter().flatten()
    }

    /// Feeds one received MAD to the CM.
    pub fn handle_datagram(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        src: Gid,
        mad: &[u8],
    ) {
        if self.device_removed {
            return;
        }
        self.engine.handle_datagram(now, src, mad);
        self.flush(gsi, now);
    }

    /// Takes every MAD waiting on the GSI endpoint and processes it.
    pub fn poll_gsi(&mut self, gsi: &mut dyn GsiEndpoint, now: SimTime) {
        self.poll_gsi_with(gsi, now, &mut |_, _| {});
    }

    /// [`poll_gsi`](Self::poll_gsi), telling `verdict` for each MAD its sender and whether
    /// the CM accepted it ([`CmEngine::handle_datagram`]'s verdict; false when the device
    /// was removed).
    pub fn poll_gsi_with(
        &mut self,
        gsi: &mut dyn GsiEndpoint,
        now: SimTime,
        verdict: &mut dyn FnMut(Gid, bool),
    ) {
        while let Some(d) = gsi.gsi_recv() {
            if self.device_removed {
                verdict(d.peer, false);
                continue;
            }
            let accepted = self.engine.handle_datagram(now, d.peer, &d.mad);
            verdict(d.peer, accepted);
            self.flush(gsi, now);
        }
    }

    /// Runs the CM timers due at `now`.
    pub fn handle_timeout(&mut self, gsi: &mut dyn GsiEndpoint, now: SimTime) {
        if self.device_removed {
            return;
        }
        self.engine.handle_timeout(now);
        self.flush(gsi, now);
    }

    /// The next time [`Cma::handle_timeout`] has work, if any.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.engine.poll_timeout()
    }
}
