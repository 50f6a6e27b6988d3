//! The librdmacm side of rdma_cm: what rdma-core's `librdmacm/cma.c` does in the application
//! (cm-spec §4.3, §4.4, §4.6), over the kernel side in [`crate::cma`].
//!
//! One [`RdmaCm`] per host/device owns a [`Cma`] (the kernel: engine, ids, channels, event
//! queues) and the library's own per-id records: the id's QP, the events handed out and not
//! acked, and `connect_error`. Every QP transition of rdma_cm happens here, never in the
//! kernel layer, exactly where librdmacm makes it:
//!
//! * [`RdmaCm::create_qp`]: creates the QP and moves it to INIT (`rdma_create_qp`,
//!   `ucma_init_conn_qp`).
//! * [`RdmaCm::accept`]: INIT → RTR → RTS (`ucma_modify_qp_rtr`, `ucma_modify_qp_rts`), then
//!   the kernel sends the REP (`rdma_accept`).
//! * [`RdmaCm::disconnect`]: the QP to ERR (`ucma_shutdown`), then the kernel sends the DREQ or
//!   DREP (`rdma_disconnect`).
//! * [`RdmaCm::get_cm_event`] — work done *when the application fetches an event*
//!   (`rdma_get_cm_event`): a CONNECT_RESPONSE for an id with a QP moves the QP RTR/RTS, has
//!   the kernel send the RTU and is reported as ESTABLISHED (`ucma_process_conn_resp`); if
//!   that fails the QP goes to ERR, the event is CONNECT_ERROR and `connect_error` is set, so
//!   that id's later REJECTED and DISCONNECTED are swallowed. A REJECTED moves the id's QP to
//!   ERR. An id without a QP gets CONNECT_RESPONSE and completes with [`RdmaCm::accept`] or
//!   [`RdmaCm::establish`] (which send the RTU).
//! * [`RdmaCm::destroy_id`]: librdmacm blocks until every event returned for the id is acked;
//!   this non-blocking API returns `EBUSY` instead (a blocking caller waits and retries).
//!
//! Calls that can send a MAD or move a QP take the device (`&mut dyn CmDevice`: the verbs
//! [`Device`] for the QP, its [`GsiEndpoint`](verbs_core::GsiEndpoint) for the MADs) and the
//! current time; the layer stays sans-IO and never blocks. Events are read with
//! [`RdmaCm::get_cm_event`] (non-blocking, `EAGAIN` when empty) and must be acked with
//! [`RdmaCm::ack_cm_event`]. The blocking and async waits are in [`crate::blocking`].

mod removal;
mod sync;
mod ud;

use crate::cma::Cma;
use crate::engine::{CmConfig, CmCounters, CmEngine, ConnSnapshot, IbCmId, IbCmState, QpAction};
use crate::shared::{
    CmDevice, CmEvent, CmEventType, CmIdHandle, ConnParam, EventChannel, RdmaCmState,
};
use crate::wire::{RdmaPortSpace, IB_CM_REP_PRIVATE_DATA_SIZE};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use verbs_core::{AccessFlags, Device, Errno, Error, Gid, PdHandle, Qp, QpInitAttr, SimTime};

/// The id whose count of un-acked events `event` is on: the listener for a CONNECT_REQUEST,
/// the event's own id otherwise. The kernel reports a connection request on the listener's
/// context (ucma.c `ucma_event_handler`: `uevent->ctx` is the listen context, the new one only
/// `conn_req_ctx`; `ucma_get_event` counts `uevent->ctx->events_reported`), librdmacm acks it
/// there (`evt->id_priv` is the listener's), so `rdma_destroy_id`/`rdma_migrate_id` of the new
/// id do not wait for it, and destroying the listener does.
fn accounted_to(event: &CmEvent) -> CmIdHandle {
    match (event.event, event.listen_id) {
        (CmEventType::ConnectRequest, Some(l)) => l,
        _ => event.id,
    }
}

/// What librdmacm keeps of one id (`struct cma_id_private`, the parts modelled).
#[derive(Debug, Clone, Default)]
struct UserId {
    /// `id->qp`.
    qp: Option<Qp>,
    /// Events handed out and not acked: seq → type and, for a multicast event, its join's
    /// address (`events_completed` vs. the kernel's `events_reported`, of the id and of the
    /// join: `rdma_leave_multicast` waits for the latter).
    unacked: BTreeMap<u64, (CmEventType, Option<SocketAddr>)>,
    /// CONNECT_ERROR was reported: later REJECTED/DISCONNECTED are swallowed.
    connect_error: bool,
    /// `id_priv->sync`: a synchronous id (made with a NULL channel) on a private channel;
    /// its calls complete through `ucma_complete` ([`RdmaCm::complete`]).
    sync: bool,
    /// `id->event`: the event the last synchronous call returned, acked by the next one or
    /// by `rdma_destroy_id`.
    event: Option<CmEvent>,
    /// `id_priv->mc_list`: the multicast joins (librdmacm/ud.rs).
    joins: Vec<ud::UserJoin>,
}

/// The rdma_cm of one host/device, as an application linked with librdmacm sees it. See the
/// module docs. `Clone` is a full, independent snapshot, kernel side and engine included (used
/// by the model checker).
#[derive(Debug, Clone)]
pub struct RdmaCm {
    cma: Cma,
    ids: BTreeMap<CmIdHandle, UserId>,
}

fn inval(what: &str) -> Error {
    Error::inval(what.to_string())
}

/// The span of one call on `id` (`cm_id`, level DEBUG, with the id's QP number once it has a
/// QP): the QP transitions librdmacm makes, the MADs the call sends and the state changes it
/// causes are logged inside it.
fn span(ids: &BTreeMap<CmIdHandle, UserId>, id: CmIdHandle) -> tracing::span::EnteredSpan {
    let qpn = || ids.get(&id).and_then(|u| u.qp).map(|q| q.qp_num);
    tracing::debug_span!("cm_id", id = id.0, qpn = qpn()).entered()
}

/// `ibv_modify_qp` of the id's QP, if it has one (librdmacm's `if (!id->qp) return 0`).
fn modify(dev: &mut dyn CmDevice, qp: Option<Qp>, action: &QpAction) -> Result<(), Error> {
    match qp {
        Some(qp) => {
            let (attr, mask) = action.attr_mask();
            dev.modify_qp(qp.handle, &attr, mask)
        }
        None => Ok(()),
    }
}

impl RdmaCm {
    /// The CM of the device `dev`: its address is GID index 0 of port 1.
    ///
    /// # Errors
    /// What `query_gid` returns.
    pub fn new(dev: &dyn Device, cfg: CmConfig) -> Result<Self, Error> {
        Ok(RdmaCm::with_local_gid(dev.query_gid(1, 0)?, cfg))
    }

    /// The CM of a device whose address is `local_gid`: on hardware, the port's RoCEv2 GID
    /// of the IP the CM serves, which is rarely index 0 (rdma_cm binds an id to the GID that
    /// holds its source IP, `cma_acquire_dev_by_src_ip` in cma.c).
    pub fn with_local_gid(local_gid: Gid, cfg: CmConfig) -> Self {
        RdmaCm {
            cma: Cma::new(local_gid, cfg),
            ids: BTreeMap::new(),
        }
    }

    /// The kernel side (read-only): ids, their rdma_cm states and the events queued and not
    /// fetched yet.
    pub fn cma(&self) -> &Cma {
        &self.cma
    }

    /// The engine (read-only): IB CM states, counters, timers.
    pub fn engine(&self) -> &CmEngine {
        self.cma.engine()
    }

    /// Starts noting which connections change, for [`take_conn_changes`](Self::take_conn_changes)
    /// (what `rnic exec`'s supervisor needs to finish them when the program dies;
    /// [`CmEngine::track_changes`]).
    pub fn track_conn_changes(&mut self, on: bool) {
        self.cma.engine_mut().track_changes(on);
    }

    /// The connections changed since the last call, each with its snapshot now (`None`: gone);
    /// see [`CmEngine::take_changed`].
    pub fn take_conn_changes(&mut self) -> Vec<(IbCmId, Option<ConnSnapshot>)> {
        self.cma.engine_mut().take_changed()
    }

    /// MAD counters of the engine.
    pub fn counters(&self) -> &CmCounters {
        self.cma.counters()
    }

    /// This host's GID.
    pub fn local_gid(&self) -> Gid {
        self.cma.local_gid()
    }

    /// The rdma_cm state of `id`.
    pub fn state(&self, id: CmIdHandle) -> Option<RdmaCmState> {
        self.cma.state(id)
    }

    /// The IB CM state under `id`.
    pub fn ib_cm_state(&self, id: CmIdHandle) -> Option<IbCmState> {
        self.cma.ib_cm_state(id)
    }

    /// The QP attached to `id`.
    pub fn qp(&self, id: CmIdHandle) -> Option<Qp> {
        self.ids.get(&id).and_then(|r| r.qp)
    }

    /// Local and peer addresses of `id` (`rdma_get_local_addr`/`rdma_get_peer_addr`).
    pub fn addrs(&self, id: CmIdHandle) -> Option<(Option<SocketAddr>, Option<SocketAddr>)> {
        self.cma.addrs(id)
    }

    /// Ids that exist, in handle order.
    pub fn ids(&self) -> Vec<CmIdHandle> {
        self.cma.ids()
    }

    /// The library's record of `id`, made when first needed (a passive id's is made when its
    /// CONNECT_REQUEST is fetched, as `ucma_process_conn_req` does).
    fn user(&mut self, id: CmIdHandle) -> Result<&mut UserId, Error> {
        if !self.cma.contains(id) {
            return Err(inval("unknown rdma_cm id"));
        }
        Ok(self.ids.entry(id).or_default())
    }

    /// How many events `get_cm_event` returned for `id` that are not acked yet (what
    /// librdmacm's `rdma_destroy_id` waits on); 0 for an unknown id.
    pub fn unacked_events(&self, id: CmIdHandle) -> usize {
        self.ids.get(&id).map_or(0, |u| u.unacked.len())
    }

    /// `rdma_create_event_channel`.
    pub fn create_event_channel(&mut self) -> EventChannel {
        self.cma.create_event_channel()
    }

    /// `rdma_destroy_event_channel`.
    ///
    /// # Errors
    /// `EBUSY` while an id still reports to it; `EINVAL` for an unknown channel.
    pub fn destroy_event_channel(&mut self, ch: EventChannel) -> Result<(), Error> {
        self.cma.destroy_event_channel(ch)
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
        let id = self.cma.create_id(channel, ps)?;
        self.ids.insert(id, UserId::default());
        Ok(id)
    }

    /// `rdma_bind_addr`: IDLE → ADDR_BOUND. Port 0 picks an ephemeral port; a wildcard IP
    /// does not bind the id to the device.
    ///
    /// # Errors
    /// `EINVAL` unless IDLE; `EADDRNOTAVAIL` for an IP that is not this device's;
    /// `EADDRINUSE` when another id of the port space listens/binds on the port.
    pub fn bind_addr(&mut self, id: CmIdHandle, addr: SocketAddr) -> Result<(), Error> {
        self.cma.bind_addr(id, addr)
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
        let _span = span(&self.ids, id);
        self.cma.resolve_addr(id, src, dst)
    }

    /// `rdma_resolve_route`: ADDR_RESOLVED → ROUTE_QUERY; ROUTE_RESOLVED is queued at once.
    ///
    /// # Errors
    /// `EINVAL` unless ADDR_RESOLVED.
    pub fn resolve_route(&mut self, id: CmIdHandle) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        self.cma.resolve_route(id)
    }

    /// `rdma_create_qp`: creates an RC QP on the device and moves it to INIT (librdmacm
    /// `ucma_init_conn_qp`); it goes through RTR/RTS on accept or when the application fetches
    /// the CONNECT_RESPONSE. A UD id's QP goes to RTS at once, with the id's Q_Key
    /// ([`RdmaCm::init_ud_qp`], `ucma_init_ud_qp`).
    ///
    /// # Errors
    /// `EINVAL` when the id is unknown, not bound to the device or already has a QP; what the
    /// device returns for `create_qp`/`modify_qp` (the QP is destroyed again then).
    pub fn create_qp(
        &mut self,
        dev: &mut dyn CmDevice,
        id: CmIdHandle,
        pd: PdHandle,
        init: &QpInitAttr,
    ) -> Result<Qp, Error> {
        let _span = span(&self.ids, id);
        let bound = self.cma.is_bound(id) == Some(true);
        let u = self.user(id)?;
        if !bound || u.qp.is_some() {
            return Err(inval("rdma_create_qp: id unbound or has a QP"));
        }
        let qp = dev.create_qp(pd, init)?;
        let moved = if self.cma.is_ud(id) == Some(true) {
            self.init_ud_qp(dev, id, qp)
        } else {
            modify(dev, Some(qp), &QpAction::init(AccessFlags::empty()))
        };
        if let Err(e) = moved {
            let _ = dev.destroy_qp(qp.handle);
            return Err(e);
        }
        self.user(id)?.qp = Some(qp);
        Ok(qp)
    }

    /// Attaches a QP the application created itself; librdmacm drives it exactly as one from
    /// [`RdmaCm::create_qp`] but leaves its current state alone until connect/accept.
    ///
    /// # Errors
    /// `EINVAL` for an unknown id or when the id already has a QP.
    pub fn attach_qp(&mut self, id: CmIdHandle, qp: Qp) -> Result<(), Error> {
        let u = self.user(id)?;
        if u.qp.is_some() {
            return Err(inval("id already has a QP"));
        }
        u.qp = Some(qp);
        Ok(())
    }

    /// Forgets the id's QP (after the application destroyed it, `rdma_destroy_qp`).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id.
    pub fn detach_qp(&mut self, id: CmIdHandle) -> Result<Option<Qp>, Error> {
        Ok(self.user(id)?.qp.take())
    }

    /// `rdma_connect`: ROUTE_RESOLVED → CONNECT; the kernel sends a REQ with the IP service ID
    /// and the IP-CM header (cm-spec §2.10, §4.3), advertising the id's QP number (or
    /// `param.qp_num` without a QP).
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
        let _span = span(&self.ids, id);
        let qp_num = self.qp(id).map_or(param.qp_num, |q| q.qp_num);
        self.cma.connect(dev, now, id, param, qp_num)
    }

    /// `rdma_listen`: ADDR_BOUND → LISTEN on the service ID of the bound port; `backlog`
    /// CONNECT_REQUESTs may be unread at once (more REQs are dropped without REJ, cm-spec
    /// §4.2).
    ///
    /// # Errors
    /// `EINVAL` unless ADDR_BOUND; `EBUSY` when the port already has a listener.
    pub fn listen(&mut self, id: CmIdHandle, backlog: u32) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        self.cma.listen(id, backlog)
    }

    /// `rdma_accept` [lib-cma]: moves the id's QP INIT → RTR → RTS with the negotiated
    /// attributes (`param`'s responder resources and initiator depth; the INIT step refreshes
    /// the QP as `ucma_modify_qp_rtr` does), then the kernel answers. Passive id: the kernel
    /// sends the REP (ESTABLISHED follows the RTU). Active id without a QP after
    /// CONNECT_RESPONSE: the kernel sends the RTU; no event follows on this side.
    ///
    /// # Errors
    /// `EINVAL` unless the id is in CONNECT with a REQ/REP to answer, or for private data over
    /// 196 bytes (nothing touched); `ENXIO` once the id's device was removed; a QP transition's error (returned as is, nothing sent: the
    /// QP stays where the failed step left it, as with librdmacm); the kernel's error (the QP
    /// is then moved to ERR, `ucma_modify_qp_err`).
    pub fn accept(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
        param: &ConnParam,
    ) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        match self.cma.state(id) {
            Some(RdmaCmState::Connect) => {}
            // librdmacm's first kernel call (INIT_QP_ATTR or ACCEPT) meets the closed id.
            Some(RdmaCmState::DeviceRemoval) => {
                return Err(Error::new(Errno::ENXIO, "the id's device was removed"))
            }
            _ => return Err(inval("rdma_accept: id not in CONNECT")),
        }
        if self.cma.is_ud(id) == Some(true) {
            // librdmacm's `rdma_accept` moves no UD QP (it is in RTS since `rdma_create_qp`).
            let qp_num = self.qp(id).map_or(param.qp_num, |q| q.qp_num);
            return self.cma.accept(dev, now, id, param, qp_num);
        }
        match self.cma.ib_cm_state(id) {
            Some(IbCmState::ReqRcvd | IbCmState::MraReqSent) => {
                if param.private_data.len() > IB_CM_REP_PRIVATE_DATA_SIZE {
                    return Err(inval("rdma_accept: private data over 196 bytes"));
                }
            }
            Some(IbCmState::RepRcvd | IbCmState::MraRepSent) => {}
            _ => return Err(inval("rdma_accept: nothing to accept")),
        }
        let qp = self.qp(id);
        if qp.is_some() {
            let mut qpp = self.cma.init_qp_attr(id)?;
            qpp.responder_resources = param.responder_resources;
            qpp.initiator_depth = param.initiator_depth;
            for a in qpp.actions() {
                modify(dev, qp, &a)?;
            }
        }
        let qp_num = qp.map_or(param.qp_num, |q| q.qp_num);
        self.cma
            .accept(dev, now, id, param, qp_num)
            .inspect_err(|_| {
                let _ = modify(dev, qp, &QpAction::Err);
            })
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
        let _span = span(&self.ids, id);
        self.cma.reject(dev, now, id, private_data)
    }

    /// Active id without a QP after CONNECT_RESPONSE (IB CM REP_RCVD/MRA_REP_SENT):
    /// `rdma_establish`, which has the kernel send the RTU (`ucma_process_conn_resp` without a
    /// QP; no event follows on this side). Otherwise `rdma_notify(IBV_EVENT_COMM_EST)`: the
    /// passive side saw data before the RTU and the id becomes ESTABLISHED (USER_ESTABLISHED →
    /// ESTABLISHED, cm-spec §4.3).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id, for an active id that has a QP (`rdma_establish`'s rule),
    /// or unless the IB CM id is in REP_RCVD/MRA_REP_SENT (active, also on a second call) or
    /// REP_SENT/MRA_REP_RCVD (passive); `EISCONN` for a passive id ESTABLISHED already (the
    /// `rdma_notify` rule, [`RdmaCm::notify`]); `ENXIO` once the id's device was removed.
    pub fn establish(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        match self.cma.ib_cm_state(id) {
            Some(IbCmState::RepRcvd | IbCmState::MraRepSent) => {
                if self.qp(id).is_some() {
                    return Err(inval("rdma_establish: the id has a QP"));
                }
                self.cma.accept(dev, now, id, &ConnParam::default(), 0)
            }
            // rdma_establish on an active id with no CONNECT_RESPONSE to answer: the kernel's
            // `rdma_accept` → `cma_rep_recv` → `ib_send_cm_rtu` refuses (EINVAL) outside
            // REP_RCVD/MRA_REP_SENT, also on a second call once ESTABLISHED.
            Some(_) if self.cma.listen_id(id).is_none() => {
                self.cma
                    .state(id)
                    .ok_or_else(|| inval("unknown rdma_cm id"))?;
                Err(inval("rdma_establish: no CONNECT_RESPONSE to answer"))
            }
            _ => self.cma.notify(dev, now, id),
        }
    }

    /// `rdma_notify(id, IBV_EVENT_COMM_EST)` (ucma NOTIFY → `ib_cm_notify` → `cm_establish`):
    /// a passive id in REP_SENT/MRA_REP_RCVD saw data before the RTU and becomes ESTABLISHED
    /// (cm-spec §4.3).
    ///
    /// # Errors
    /// `EISCONN` when the connection is ESTABLISHED already (a second call, or after the RTU);
    /// `EINVAL` in any other IB CM state or for an unknown id; `ENXIO` for an id whose device
    /// was removed.
    pub fn notify(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        self.cma.notify(dev, now, id)
    }

    /// `rdma_notify(id, event)` for an event other than `IBV_EVENT_COMM_EST` (Linux
    /// `ib_cm_notify`): `IBV_EVENT_PATH_MIG` (`path_mig`) succeeds on an ESTABLISHED
    /// connection and changes nothing (no alternate path here), anything else is refused.
    ///
    /// # Errors
    /// As [`Cma::notify_other`]: `EINVAL`, or `ENXIO` once the id's device was removed.
    pub fn notify_other(&mut self, id: CmIdHandle, path_mig: bool) -> Result<(), Error> {
        self.cma.notify_other(id, path_mig)
    }

    /// `rdma_disconnect`, exactly as cm-spec §4.4: the attached QP goes to ERR first (so the
    /// device flushes its WRs), then the kernel sends a DREQ if the IB CM id is ESTABLISHED,
    /// else a DREP if it is DREQ_RCVD, else nothing. Returns `Ok` in every connected,
    /// connecting or disconnecting state, also on a second call.
    ///
    /// # Errors
    /// `EINVAL` for an unknown id, when the id is not bound to the device, when it never
    /// connected/accepted/listened (no IB CM id; the QP was still moved to ERR), or the QP
    /// modify's error (e.g. a QP still in RESET: RESET → ERR is illegal) — then nothing is
    /// sent.
    pub fn disconnect(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        match self.cma.is_bound(id) {
            None => return Err(inval("unknown rdma_cm id")),
            Some(false) => return Err(inval("rdma_disconnect: id not bound to a device")),
            Some(true) => {}
        }
        modify(dev, self.qp(id), &QpAction::Err)?;
        self.cma.disconnect(dev, now, id)
    }

    /// `rdma_destroy_id`: frees the id; the kernel destroys the IB CM id per state (cm-spec
    /// §3.3: one DREQ without retries from ESTABLISHED, DREP from DREQ_RCVD, REJ from setup
    /// states). Unread events of the id are discarded; a listener also destroys the child ids
    /// whose CONNECT_REQUEST is unread (they get REJ 28). The QP is not touched (destroy it
    /// first, man:rdma_destroy_id.3).
    ///
    /// # Errors
    /// `EBUSY` while an event of this id handed out by `get_cm_event` is not acked (librdmacm
    /// would block until it is; a `tracing` warning names the event), nothing done then;
    /// `EINVAL` for an unknown id.
    pub fn destroy_id(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
    ) -> Result<(), Error> {
        let _span = span(&self.ids, id);
        // librdmacm acks `id->event` (a synchronous call's event) itself.
        if let Some(ev) = self.user(id)?.event.take() {
            let _ = self.ack_cm_event(ev);
        }
        let u = self.user(id)?;
        let private = u.sync.then(|| self.cma.channel_of(id)).flatten();
        let u = self.user(id)?;
        if let Some((_, (ev, _))) = u.unacked.iter().next() {
            tracing::warn!(
                id = id.0,
                event = ?ev,
                unacked = u.unacked.len(),
                "rdma_destroy_id: un-acked {ev:?} event (librdmacm would block until it is acked)"
            );
            return Err(Error::new(
                Errno::EBUSY,
                format!("un-acked {ev:?} event on this id"),
            ));
        }
        let listener = self.cma.state(id) == Some(RdmaCmState::Listen);
        self.cma.destroy_id(dev, now, id)?;
        // The id is gone from the kernel, and with a listener its children too (a scan of
        // every id, so only then: a server destroying ids one by one stays O(log n) each).
        if listener {
            let cma = &self.cma;
            self.ids.retain(|i, _| cma.contains(*i));
        } else {
            self.ids.remove(&id);
        }
        // ucma_free_id: a synchronous id's private channel goes with it.
        if let Some(ch) = private {
            let _ = self.cma.destroy_event_channel(ch);
        }
        Ok(())
    }

    /// The process's rdma_cm file is closed (the process exits or is killed): the kernel's
    /// `ucma_close` destroys every id whatever events are un-acked, each as
    /// [`destroy_id`](Self::destroy_id) would (DREQ from ESTABLISHED, DREP from DREQ_RCVD, REJ
    /// from the setup states), so peers learn at once that this side is gone instead of
    /// waiting out their DREQ retries. QPs are left as they are (the device goes with the
    /// process). Returns how many ids were destroyed.
    pub fn close(&mut self, dev: &mut dyn CmDevice, now: SimTime) -> usize {
        let mut n = 0;
        for id in self.cma.ids() {
            if !self.cma.contains(id) {
                continue; // a child already destroyed with its listener
            }
            let _span = span(&self.ids, id);
            if self.cma.destroy_id(dev, now, id).is_ok() {
                n += 1;
            }
        }
        self.ids.clear();
        n
    }

    /// `rdma_get_cm_event` on a non-blocking channel: the oldest event, after librdmacm's
    /// fetch-time work (module docs): CONNECT_RESPONSE of an id with a QP → QP RTR/RTS, RTU
    /// (flushed through `dev`'s GSI before this returns), ESTABLISHED — or QP to ERR and
    /// CONNECT_ERROR with −errno as status (librdmacm puts −1 there and the errno in `errno`)
    /// and `connect_error` set; REJECTED → QP to ERR first; REJECTED and DISCONNECTED of an id
    /// with `connect_error` are swallowed (acked internally, never returned).
    ///
    /// # Errors
    /// `EAGAIN` when no event is left to return; `EINVAL` for an unknown channel.
    pub fn get_cm_event(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        channel: EventChannel,
    ) -> Result<CmEvent, Error> {
        use CmEventType as E;
        loop {
            let mut ev = self.cma.get_event(channel)?;
            let _span = span(&self.ids, ev.id);
            let u = self.ids.entry(ev.id).or_default();
            let (qp, connect_error) = (u.qp, u.connect_error);
            match ev.event {
                E::Rejected | E::Disconnected if connect_error => {
                    tracing::debug!(
                        event = %ev.event.name(),
                        "rdma_get_cm_event: swallowed after CONNECT_ERROR (librdmacm)"
                    );
                    continue;
                }
                E::Rejected => {
                    // Its error (e.g. a QP in RESET) is ignored, as librdmacm ignores it.
                    let _ = modify(dev, qp, &QpAction::Err);
                }
                E::ConnectRequest => {
                    // ucma_process_conn_req: a synchronous listener's new id is synchronous
                    // too, on a private channel of its own (`rdma_migrate_id(id, NULL)`).
                    let sync = ev
                        .listen_id
                        .and_then(|l| self.ids.get(&l))
                        .is_some_and(|l| l.sync);
                    if sync {
                        let ch = self.cma.create_event_channel();
                        if self.cma.migrate_id(ev.id, ch).is_ok() {
                            self.ids.entry(ev.id).or_default().sync = true;
                        } else {
                            let _ = self.cma.destroy_event_channel(ch);
                        }
                    }
                }
                E::MulticastJoin => self.process_join(dev, &mut ev),
                E::ConnectResponse => {
                    if let Some(qp) = qp {
                        match self.process_conn_resp(dev, now, ev.id, qp) {
                            Ok(()) => ev.event = E::Established,
                            Err(e) => {
                                ev.event = E::ConnectError;
                                ev.status = -e.errno.code();
                                self.ids.entry(ev.id).or_default().connect_error = true;
                            }
                        }
                    }
                }
                _ => {}
            }
            self.ids
                .entry(accounted_to(&ev))
                .or_default()
                .unacked
                .insert(ev.seq, (ev.event, ev.multicast));
            tracing::debug!(event = %ev.event.name(), status = ev.status, "rdma_get_cm_event");
            return Ok(ev);
        }
    }

    /// `ucma_process_conn_resp`: the QP INIT (refresh) → RTR → RTS with the kernel's
    /// attributes, then the kernel's accept, which sends the RTU; on any error the QP goes to
    /// ERR and the error is returned.
    fn process_conn_resp(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        id: CmIdHandle,
        qp: Qp,
    ) -> Result<(), Error> {
        let moved = self.cma.init_qp_attr(id).and_then(|p| {
            p.actions()
                .iter()
                .try_for_each(|a| modify(dev, Some(qp), a))
        });
        let res = moved.and_then(|()| {
            self.cma
                .accept(dev, now, id, &ConnParam::default(), qp.qp_num)
        });
        if res.is_err() {
            let _ = modify(dev, Some(qp), &QpAction::Err);
        }
        res
    }

    /// Number of events [`RdmaCm::get_cm_event`] would return from `channel`: the kernel's
    /// unread events minus those librdmacm will swallow (REJECTED/DISCONNECTED of an id with
    /// `connect_error`). When a fetched CONNECT_RESPONSE turns into CONNECT_ERROR, that id's
    /// REJECTED/DISCONNECTED queued behind it stop counting, so whenever this is above 0,
    /// `get_cm_event` returns an event.
    pub fn pending_events(&self, channel: EventChannel) -> usize {
        self.cma
            .queued(channel)
            .filter(|e| !self.swallowed(e))
            .count()
    }

    fn swallowed(&self, e: &CmEvent) -> bool {
        matches!(e.event, CmEventType::Rejected | CmEventType::Disconnected)
            && self.ids.get(&e.id).is_some_and(|u| u.connect_error)
    }

    /// `rdma_ack_cm_event`: releases an event returned by `get_cm_event`.
    ///
    /// # Errors
    /// `EINVAL` when the event was not handed out or was already acked.
    pub fn ack_cm_event(&mut self, event: CmEvent) -> Result<(), Error> {
        self.ids
            .get_mut(&accounted_to(&event))
            .and_then(|r| r.unacked.remove(&event.seq))
            .map(|_| ())
            .ok_or_else(|| inval("rdma_ack_cm_event: event not outstanding"))
    }

    /// Feeds one received MAD to the CM.
    pub fn handle_datagram(&mut self, dev: &mut dyn CmDevice, now: SimTime, src: Gid, mad: &[u8]) {
        self.cma.handle_datagram(dev, now, src, mad);
    }

    /// Takes every MAD waiting on the device's GSI endpoint and processes it.
    pub fn poll_gsi(&mut self, dev: &mut dyn CmDevice, now: SimTime) {
        self.cma.poll_gsi(dev, now);
    }

    /// [`poll_gsi`](Self::poll_gsi), with each MAD's sender and whether the CM accepted it
    /// ([`Cma::poll_gsi_with`]): what a NIC needs to confirm a route to a new socket.
    pub fn poll_gsi_with(
        &mut self,
        dev: &mut dyn CmDevice,
        now: SimTime,
        verdict: &mut dyn FnMut(Gid, bool),
    ) {
        self.cma.poll_gsi_with(dev, now, verdict);
    }

    /// Whether an id has a connection with `gid` in progress ([`CmEngine::peer_in_use`]):
    /// its route must not move.
    pub fn peer_in_use(&self, gid: Gid) -> bool {
        self.cma.engine().peer_in_use(gid)
    }

    /// Runs the CM timers due at `now`.
    pub fn handle_timeout(&mut self, dev: &mut dyn CmDevice, now: SimTime) {
        self.cma.handle_timeout(dev, now);
    }

    /// The next time [`RdmaCm::handle_timeout`] has work, if any.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.cma.poll_timeout()
    }
}
