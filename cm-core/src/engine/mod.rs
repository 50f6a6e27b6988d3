//! The sans-IO IB CM protocol engine (Linux `drivers/infiniband/core/cm.c` behaviour, cm-spec §3).
//!
//! A [`CmEngine`] holds every CM id of one node. Inputs: API commands (`send_req`, `send_rep`,
//! `send_rtu`, `send_rej`, `send_dreq`, `send_drep`, `establish`, `destroy_id`, `listen`),
//! received MADs ([`CmEngine::handle_datagram`]) and time ([`CmEngine::handle_timeout`]).
//! Outputs: MADs to send ([`CmEngine::poll_transmit`]), IB CM events
//! ([`CmEngine::poll_event`], numbered as `enum ib_cm_event_type`) and the next deadline
//! ([`CmEngine::poll_timeout`]). QP attributes for INIT/RTR/RTS come from
//! [`CmEngine::qp_params`] → [`QpParams::actions`] (Linux `ib_cm_init_qp_attr`, cm-spec §5.2).
//!
//! The engine never reads a clock and draws randomness only from the seed in [`CmConfig`].
//! Malformed or unmatched MADs are counted in [`CmCounters`] and dropped; they never panic
//! and never touch a connection they do not match.

mod events;
mod qp;
mod timers;

pub use events::{
    IbCmEvent, IbCmEventKind, IbCmEventType, RepInfo, ReqInfo, SidrRepInfo, SidrReqInfo,
};
pub use qp::{QpAction, QpParams};
pub use timers::{cm_ack_timeout, cm_convert_to_ms, Backoff};

use crate::wire::{
    self, CmMessage, CmMsgResponse, Drep, Dreq, Mra, Rej, RejectReason, Rep, Req, ReqPath, Rtu,
    SidrRep, SidrReq, MAD_SIZE,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use verbs_core::{Errno, Error, Gid, Mtu, SimTime, DEFAULT_PKEY, PSN_MASK, QPN_MASK};

/// `enum ib_cm_state` [ib_cm.h] (cm-spec §3.1), same names and numbers. The two SIDR states
/// are those of Service ID Resolution ([`CmEngine::send_sidr_req`], IBTA vol. 1 §12.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // each variant is the Linux name of its value
pub enum IbCmState {
    Idle = 0,
    Listen = 1,
    ReqSent = 2,
    ReqRcvd = 3,
    MraReqSent = 4,
    MraReqRcvd = 5,
    RepSent = 6,
    RepRcvd = 7,
    MraRepSent = 8,
    MraRepRcvd = 9,
    Established = 10,
    DreqSent = 11,
    DreqRcvd = 12,
    Timewait = 13,
    SidrReqSent = 14,
    SidrReqRcvd = 15,
}

/// `IB_WC_RESP_TIMEOUT_ERR`: the send status carried by `*_ERROR` events (cm-spec §1.7).
pub const IB_WC_RESP_TIMEOUT_ERR: i32 = 20;

/// Engine configuration. Defaults are Linux's rdma_cm values on RoCE (cm-spec §3.2):
/// response timeout 20, 15 retries, packet lifetime 16, CA ack delay 15 (→ TimeWait 512 ms),
/// MRA service timeout 24, linear retransmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// This node's CA GUID: stable and unique per node; the duplicate/stale tables key on it
    /// (cm-spec §2.9, §3.4).
    pub ca_guid: u64,
    /// Seed of the engine's PRNG: the comm-ID XOR value, the MAD-agent `hi_tid`, starting PSNs.
    pub seed: u64,
    /// CM response timeout exponent written in both REQ timeout fields
    /// (`CMA_CM_RESPONSE_TIMEOUT` = 20; 4.096 µs × 2^t).
    pub cm_response_timeout: u8,
    /// Max CM retries written in the REQ and used for REQ/DREQ (`CMA_MAX_CM_RETRIES` = 15).
    pub max_cm_retries: u8,
    /// Path packet lifetime exponent (`CMA_IBOE_PACKET_LIFETIME` = 16 on current Linux).
    pub packet_life_time: u8,
    /// Local CA ACK delay exponent (rxe: 15), sent as REP Target ACK Delay.
    pub ack_delay: u8,
    /// MRA service timeout exponent (`CMA_CM_MRA_SETTING` & 0x1f = 24).
    pub mra_service_timeout: u8,
    /// Retransmission schedule (cm-spec §1.7).
    pub backoff: Backoff,
    /// Path MTU written in the REQ and used for RTR.
    pub path_mtu: Mtu,
    /// Hop limit of the path (RoCE: the IP TTL); > 1 makes the REQ carry permissive LIDs.
    pub hop_limit: u8,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            ca_guid: 0x0002_c903_0000_0001,
            seed: 0,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            ack_delay: 15,
            mra_service_timeout: 24,
            backoff: Backoff::Linear,
            path_mtu: Mtu::Mtu1024,
            hop_limit: 64,
        }
    }
}

/// An engine CM id (Linux `struct ib_cm_id *`). The rdma_cm layer uses the same number for its
/// `CmIdHandle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IbCmId(pub u32);

/// Counters of received and sent MADs. Every dropped MAD increments exactly one `rx_*` drop
/// counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CmCounters {
    /// MADs handed to `handle_datagram`.
    pub rx_mads: u64,
    /// Dropped: failed to decode (bad length/version/class/method/attribute…).
    pub rx_malformed: u64,
    /// Dropped: no CM id matches the comm IDs (or a SIDR_REP's Request ID).
    pub rx_unmatched: u64,
    /// Duplicates (REQ, REP, RTU, MRA, DREQ in DREQ_RCVD, a SIDR_REQ being answered …);
    /// some are answered.
    pub rx_duplicates: u64,
    /// Dropped: arrived in a state that does not accept it.
    pub rx_wrong_state: u64,
    /// Dropped: DREQ whose Remote QPN is not the connection's local QPN.
    pub rx_wrong_qpn: u64,
    /// REQ/REP answered with REJ 10 (remote QPN still in use).
    pub rx_stale: u64,
    /// REQ answered with REJ 8, SIDR_REQ with SIDR_REP status 1 (no listener).
    pub rx_no_listener: u64,
    /// REQ dropped because the listener's backlog is full (no REJ, cm-spec §4.2); SIDR_REQ
    /// answered with SIDR_REP status 2 (reject) for the same reason.
    pub rx_backlog_full: u64,
    /// DREQ for an unknown connection answered with DREP.
    pub rx_dreq_unknown: u64,
    /// Dropped: a REP, RTU, MRA, REJ, DREQ or DREP whose comm IDs name a connection whose peer
    /// is another address (a forgery, or a stray from an old peer; see [`CmEngine::handle_datagram`]).
    pub rx_wrong_source: u64,
    /// MADs queued for transmission (first sends and retransmissions).
    pub tx_mads: u64,
    /// Retransmissions.
    pub tx_retransmits: u64,
    /// Sends whose retries ran out.
    pub tx_timeouts: u64,
    /// Passive requests that expired unanswered: the consumer neither accepted nor rejected
    /// them before their active side gave up (see [`CmEngine::handle_timeout`]).
    pub requests_expired: u64,
}

/// Parameters of `send_req` (`struct ib_cm_req_param` as rdma_cm fills it, cm-spec §4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqParams {
    /// Service ID (rdma_cm: [`wire::ip_service_id`]).
    pub service_id: u64,
    /// This side's GID (path SGID).
    pub local_gid: Gid,
    /// The passive side's GID (path DGID); the REQ is sent there.
    pub remote_gid: Gid,
    /// This side's QPN (24 bits).
    pub local_qpn: u32,
    /// RDMA READ/atomic depth this side accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic depth this side issues.
    pub initiator_depth: u8,
    /// Transport retry count, clamped to 7.
    pub retry_count: u8,
    /// RNR retry count, clamped to 7 (7 = infinite).
    pub rnr_retry_count: u8,
    /// SRQ flag.
    pub srq: bool,
    /// REQ private data (≤ 92 bytes, else EINVAL).
    pub private_data: Vec<u8>,
}

/// Parameters of `send_rep` (`struct ib_cm_rep_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepParams {
    /// This side's QPN.
    pub local_qpn: u32,
    /// RDMA READ/atomic depth this side accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic depth this side issues.
    pub initiator_depth: u8,
    /// RNR retry count the active side should use, clamped to 7.
    pub rnr_retry_count: u8,
    /// SRQ flag.
    pub srq: bool,
    /// REP private data (≤ 196 bytes, else EINVAL).
    pub private_data: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Pending {
    dst: Gid,
    mad: [u8; MAD_SIZE],
    timeout_ms: u64,
    retries_left: u8,
    sends: u32,
    deadline: SimTime,
}

#[derive(Debug, Clone, Copy)]
struct Listener {
    service_id: u64,
    backlog: u32,
    pending: u32,
}

#[derive(Debug, Clone)]
struct Conn {
    state: IbCmState,
    local_comm_id: u32,
    remote_comm_id: u32,
    local_gid: Gid,
    remote_gid: Gid,
    remote_ca_guid: u64,
    local_qpn: u32,
    remote_qpn: u32,
    /// Own starting (receive) PSN, 24 bits.
    psn: u32,
    /// The peer's advertised PSN = this side's send PSN.
    sq_psn: u32,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    path_mtu: Mtu,
    /// Address-vector local ACK timeout exponent (cm-spec §3.2): QP `timeout` and TimeWait.
    av_timeout: u8,
    /// Retransmission timeout of REQ/REP/DREQ for this id, ms.
    timeout_ms: u64,
    max_cm_retries: u8,
    /// TID of the REQ (sent or received), reused by REP/MRA/REJ/RTU (cm-spec §1.6).
    tid: u64,
    /// TID of the received DREQ, reused by DREP.
    dreq_tid: u64,
    rtu_private_data: Vec<u8>,
    drep_private_data: Vec<u8>,
    pending: Option<Pending>,
    timewait_at: Option<SimTime>,
    /// A passive request's expiry: when its active side has given up waiting for the REP
    /// (armed only in REQ_RCVD and MRA_REQ_SENT; see `CmEngine::request_lifetime_ms`).
    request_expires: Option<SimTime>,
    listener: Option<Listener>,
    listen_id: Option<IbCmId>,
    in_tables: bool,
    /// Service ID of a SIDR_REQ sent or received (the SIDR_REP repeats it).
    service_id: u64,
}

impl Conn {
    /// The earliest of the pending MAD's deadline, the TimeWait expiry and, while the
    /// consumer has not answered it, the passive request's expiry.
    fn deadline(&self) -> Option<SimTime> {
        let waiting = matches!(self.state, IbCmState::ReqRcvd | IbCmState::MraReqSent);
        [
            self.pending.as_ref().map(|p| p.deadline),
            self.timewait_at,
            self.request_expires.filter(|_| waiting),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// Per-node IB CM: ids, lookup tables, timers, output queues. See the module docs. `Clone` is
/// a full, independent snapshot (used by the model checker).
#[derive(Debug, Clone)]
pub struct CmEngine {
    cfg: CmConfig,
    rng: u64,
    comm_id_xor: u32,
    hi_tid: u32,
    next_index: u32,
    next_id: u32,
    conns: BTreeMap<IbCmId, Conn>,
    /// Interior mutability so that `poll_timeout(&self)` can bring the index up to date.
    timers: RefCell<TimerIndex>,
    by_local: BTreeMap<u32, IbCmId>,
    remote_ids: BTreeMap<(u64, u32), IbCmId>,
    remote_qpns: BTreeMap<(u64, u32), IbCmId>,
    listeners: BTreeMap<u64, IbCmId>,
    /// Passive SIDR ids not answered yet, by (sender, Request ID): Linux's
    /// `remote_sidr_table`, which makes a retransmitted SIDR_REQ a duplicate.
    remote_sidr: BTreeMap<(Gid, u32), IbCmId>,
    transmit: VecDeque<(Gid, [u8; MAD_SIZE])>,
    events: VecDeque<IbCmEvent>,
    counters: CmCounters,
    /// Ids changed since [`CmEngine::take_changed`], while change tracking is on.
    changed: Option<BTreeSet<IbCmId>>,
    /// `(remote GID, id)` of every id that has a peer (`engine/peers.rs`).
    by_peer: BTreeSet<(Gid, IbCmId)>,
}

/// `self.conns.get_mut(&id)`, noting that the id's deadlines may change (see `TimerIndex`) and
/// that it may have changed (`CmEngine::take_changed`).
/// A macro rather than a method so that only the `conns` and `timers` fields are borrowed.
macro_rules! conn_mut {
    ($engine:ident, $id:expr) => {{
        let id: IbCmId = $id;
        $engine.timers.get_mut().touch(id);
        if let Some(changed) = $engine.changed.as_mut() {
            changed.insert(id);
        }
        $engine.conns.get_mut(&id)
    }};
}

// The handlers of received MADs and the API commands that send one (after `conn_mut!`,
// which they use).
mod deadlines;
mod log;
mod peers;
mod receive;
mod removal;
mod send;
mod sidr;
mod snapshot;

pub use sidr::{SidrRepParams, SidrReqParams, SidrStatus};
pub use snapshot::{ConnSnapshot, SNAPSHOT_LEN};

use deadlines::TimerIndex;

fn wrong_state(what: &str, state: IbCmState) -> Error {
    Error::inval(format!("{what} not allowed in IB CM state {state:?}"))
}

fn no_id(id: IbCmId) -> Error {
    Error::inval(format!("unknown CM id {}", id.0))
}

impl CmEngine {
    /// A new engine for one node.
    pub fn new(cfg: CmConfig) -> Self {
        let mut e = CmEngine {
            cfg,
            rng: cfg.seed,
            comm_id_xor: 0,
            hi_tid: 0,
            next_index: 0,
            next_id: 1,
            conns: BTreeMap::new(),
            timers: RefCell::new(TimerIndex::default()),
            by_local: BTreeMap::new(),
            remote_ids: BTreeMap::new(),
            remote_qpns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            remote_sidr: BTreeMap::new(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
            changed: None,
            by_peer: BTreeSet::new(),
        };
        // Linux: random value chosen at module load XORed into every comm ID (cm-spec §2.9).
        e.comm_id_xor = e.next_random() as u32;
        e.hi_tid = e.next_random() as u32;
        e
    }

    /// splitmix64 (Steele, Lea, Flood 2014): pinned, tiny, deterministic.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// The MAD counters.
    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }

    /// Allocates an id in IDLE with a fresh Local Comm ID (cyclic index XOR the per-node random
    /// value, never 0 and never one in use, cm-spec §2.9) and a random 24-bit starting PSN
    /// (cma `seq_num`, cm-spec §4.3).
    pub fn create_id(&mut self) -> IbCmId {
        let local_comm_id = loop {
            let cand = self.next_index ^ self.comm_id_xor;
            self.next_index = self.next_index.wrapping_add(1);
            if cand != 0 && !self.by_local.contains_key(&cand) {
                break cand;
            }
        };
        let id = IbCmId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let psn = (self.next_random() as u32) & PSN_MASK;
        let av_timeout = self.cfg.packet_life_time.saturating_add(1).min(31);
        self.conns.insert(
            id,
            Conn {
                state: IbCmState::Idle,
                local_comm_id,
                remote_comm_id: 0,
                local_gid: Gid::default(),
                remote_gid: Gid::default(),
                remote_ca_guid: 0,
                local_qpn: 0,
                remote_qpn: 0,
                psn,
                sq_psn: 0,
                responder_resources: 0,
                initiator_depth: 0,
                retry_count: 0,
                rnr_retry_count: 0,
                path_mtu: self.cfg.path_mtu,
                av_timeout,
                timeout_ms: 0,
                max_cm_retries: self.cfg.max_cm_retries,
                tid: 0,
                dreq_tid: 0,
                rtu_private_data: Vec::new(),
                drep_private_data: Vec::new(),
                pending: None,
                timewait_at: None,
                request_expires: None,
                listener: None,
                listen_id: None,
                in_tables: false,
                service_id: 0,
            },
        );
        self.by_local.insert(local_comm_id, id);
        self.note_changed(id);
        id
    }

    /// The state of `id`, or `None` when it does not exist.
    pub fn state(&self, id: IbCmId) -> Option<IbCmState> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// The Local Comm ID of `id`.
    pub fn local_comm_id(&self, id: IbCmId) -> Option<u32> {
        self.conns.get(&id).map(|c| c.local_comm_id)
    }

    /// The listening id a passive id was created from.
    pub fn listen_id(&self, id: IbCmId) -> Option<IbCmId> {
        self.conns.get(&id).and_then(|c| c.listen_id)
    }

    /// TimeWait duration of `id` in ms: `ms(av.timeout)` (cm-spec §3.2; 512 ms by default).
    pub fn timewait_ms(&self, id: IbCmId) -> Option<u64> {
        self.conns.get(&id).map(|c| cm_convert_to_ms(c.av_timeout))
    }

    /// The negotiated QP parameters once the peer is known (after REQ received or REP
    /// received), for [`QpParams::actions`] (Linux `ib_cm_init_qp_attr`).
    ///
    /// # Errors
    /// `EINVAL` for an unknown id or one with no peer yet.
    pub fn qp_params(&self, id: IbCmId) -> Result<QpParams, Error> {
        let c = self.conns.get(&id).ok_or_else(|| no_id(id))?;
        if c.remote_comm_id == 0 {
            return Err(wrong_state("QP attributes", c.state));
        }
        Ok(QpParams {
            remote_gid: c.remote_gid,
            dest_qp_num: c.remote_qpn,
            rq_psn: c.psn,
            sq_psn: c.sq_psn,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
            timeout: c.av_timeout,
            path_mtu: c.path_mtu,
            hop_limit: self.cfg.hop_limit,
        })
    }

    /// `ib_cm_listen`: IDLE → LISTEN on `service_id` (exact match) with room for `backlog`
    /// REQ_RECEIVED events not yet released ([`CmEngine::release_backlog`]).
    ///
    /// # Errors
    /// `EINVAL` unless IDLE; `EBUSY` when another id listens on the service ID (Linux).
    pub fn listen(&mut self, id: IbCmId, service_id: u64, backlog: u32) -> Result<(), Error> {
        if self.listeners.contains_key(&service_id) {
            return Err(Error::new(
                Errno::EBUSY,
                "service ID already has a listener",
            ));
        }
        let c = conn_mut!(self, id).ok_or_else(|| no_id(id))?;
        if c.state != IbCmState::Idle {
            return Err(wrong_state("listen", c.state));
        }
        c.set_state(id, IbCmState::Listen);
        c.listener = Some(Listener {
            service_id,
            backlog: backlog.max(1),
            pending: 0,
        });
        self.listeners.insert(service_id, id);
        Ok(())
    }

    /// Frees one backlog slot of listener `listen_id` (the consumer read a CONNECT_REQUEST or
    /// its id went away, cm-spec §4.6). Unknown ids are ignored.
    pub fn release_backlog(&mut self, listen_id: IbCmId) {
        if let Some(l) = self
            .conns
            .get_mut(&listen_id)
            .and_then(|c| c.listener.as_mut())
        {
            l.pending = l.pending.saturating_sub(1);
        }
    }

    fn form_tid(&self, local_comm_id: u32) -> u64 {
        (u64::from(self.hi_tid) << 32) | u64::from(local_comm_id)
    }

    fn encode(msg: &CmMessage, tid: u64) -> Result<[u8; MAD_SIZE], Error> {
        msg.encode(tid, 0)
            .map_err(|e| Error::new(e.errno(), format!("cannot encode CM message: {e}")))
    }

    fn queue(&mut self, dst: Gid, mad: [u8; MAD_SIZE]) {
        self.queue_send(dst, mad, 1);
    }

    /// Queues send number `send` of a MAD (1: the first; more: a retransmission).
    fn queue_send(&mut self, dst: Gid, mad: [u8; MAD_SIZE], send: u32) {
        log::mad_sent(dst, &mad, send);
        self.counters.tx_mads += 1;
        self.transmit.push_back((dst, mad));
    }

    /// Sends a MAD that expects an answer, with the id's retry budget (cm-spec §1.7).
    fn queue_with_retries(&mut self, now: SimTime, id: IbCmId, dst: Gid, mad: [u8; MAD_SIZE]) {
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        let timeout_ms = c.timeout_ms;
        c.pending = Some(Pending {
            dst,
            mad,
            timeout_ms,
            retries_left: c.max_cm_retries,
            sends: 1,
            deadline: now.plus_nanos(self.cfg.backoff.timeout_ms(timeout_ms, 1) * 1_000_000),
        });
        self.queue(dst, mad);
    }

    fn event(&mut self, id: IbCmId, kind: IbCmEventKind) {
        log::event(id, &kind);
        self.events.push_back(IbCmEvent { id, kind });
    }

    fn remove_from_tables(&mut self, id: IbCmId) {
        let Some(c) = conn_mut!(self, id) else {
            return;
        };
        if c.in_tables {
            c.in_tables = false;
            let (k1, k2) = (
                (c.remote_ca_guid, c.remote_comm_id),
                (c.remote_ca_guid, c.remote_qpn),
            );
            if self.remote_ids.get(&k1) == Some(&id) {
                self.remote_ids.remove(&k1);
            }
            if self.remote_qpns.get(&k2) == Some(&id) {
                self.remote_qpns.remove(&k2);
            }
        }
    }

    /// `cm_reset_to_idle`: cancel, leave the lookup tables, IDLE.
    fn reset_to_idle(&mut self, id: IbCmId) {
        self.remove_from_tables(id);
        if let Some(c) = conn_mut!(self, id) {
            c.pending = None;
            c.timewait_at = None;
            c.set_state(id, IbCmState::Idle);
        }
    }

    /// `cm_enter_timewait`: cancel, leave the lookup tables (current Linux, cm-spec §3.4),
    /// TIMEWAIT for `ms(av.timeout)`.
    fn enter_timewait(&mut self, now: SimTime, id: IbCmId) {
        self.remove_from_tables(id);
        if let Some(c) = conn_mut!(self, id) {
            c.pending = None;
            c.set_state(id, IbCmState::Timewait);
            c.timewait_at = Some(now.plus_nanos(cm_convert_to_ms(c.av_timeout) * 1_000_000));
        }
    }

    /// `ib_destroy_cm_id` (cm-spec §3.3 "Destroy"): LISTEN → stop listening; REQ_SENT/
    /// MRA_REQ_RCVD → REJ 4 with this node's CA GUID as ARI; REQ_RCVD, MRA_REQ_SENT, REP_RCVD,
    /// MRA_REP_SENT, REP_SENT, MRA_REP_RCVD → REJ 28; ESTABLISHED → one DREQ without
    /// retries; DREQ_RCVD → DREP; SIDR_REQ_RCVD → SIDR_REP status 2 (reject); DREQ_SENT,
    /// TIMEWAIT, SIDR_REQ_SENT → nothing more. Then the id is freed: no
    /// further event, and DREQs for it are answered as for an unknown connection.
    pub fn destroy_id(&mut self, now: SimTime, id: IbCmId) {
        use IbCmState as S;
        let Some(state) = self.state(id) else {
            return;
        };
        tracing::debug!(id = id.0, state = %state.name(), "IB CM id destroyed");
        match state {
            S::ReqSent | S::MraReqRcvd => {
                let ari = self.cfg.ca_guid.to_be_bytes();
                let _ = self.send_rej(now, id, RejectReason::Timeout, &ari, &[]);
            }
            S::ReqRcvd
            | S::MraReqSent
            | S::RepRcvd
            | S::MraRepSent
            | S::RepSent
            | S::MraRepRcvd => {
                let _ = self.send_rej(now, id, RejectReason::ConsumerDefined, &[], &[]);
            }
            S::Established => {
                // Linux sends the DREQ, then cancels it: it goes out once (cm-spec §3.3).
                let _ = self.send_dreq(now, id, &[]);
                self.enter_timewait(now, id);
            }
            S::DreqRcvd => {
                let _ = self.send_drep(now, id, &[]);
            }
            S::SidrReqRcvd => {
                let _ = self.send_sidr_rep(id, &SidrRepParams::status(SidrStatus::Reject));
            }
            _ => {}
        }
        self.remove_from_tables(id);
        self.forget_sidr(id);
        if let Some(c) = self.conns.remove(&id) {
            self.timers.get_mut().touch(id);
            self.note_changed(id);
            self.by_peer.remove(&(c.remote_gid, id));
            self.by_local.remove(&c.local_comm_id);
            if let Some(l) = c.listener {
                self.listeners.remove(&l.service_id);
            }
        }
        self.events.retain(|e| e.id != id);
    }

    /// Drops `id` from the table of unanswered SIDR requests.
    fn forget_sidr(&mut self, id: IbCmId) {
        if let Some(c) = self.conns.get(&id) {
            let key = (c.remote_gid, c.remote_comm_id);
            if self.remote_sidr.get(&key) == Some(&id) {
                self.remote_sidr.remove(&key);
            }
        }
    }

    /// The next MAD to send and its destination GID.
    pub fn poll_transmit(&mut self) -> Option<(Gid, [u8; MAD_SIZE])> {
        self.transmit.pop_front()
    }

    /// The next IB CM event.
    pub fn poll_event(&mut self) -> Option<IbCmEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod sidr_tests;
#[cfg(test)]
mod tests;
