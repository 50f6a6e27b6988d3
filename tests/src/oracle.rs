//! The oracle: the disconnect invariants of TESTING.md (S1–S7 safety, L1–L3 liveness) checked
//! in **one pass** over a [`History`], plus the "sometimes" situations it reached.
//!
//! Keys: a CM id is `(host, life, id)`; a WR is its `wr_id` (unique per World); a queue is
//! `(host, life, QPN, send/recv)`. Comm IDs from the CM events connect ids to the MADs on the
//! wire (cm-spec §2.9).
//!
//! What each check uses (and where it is deliberately coarse):
//! * **S1** per id: ≤ 1 DISCONNECTED, no ESTABLISHED after it, TIMEWAIT_EXIT ≤ 1, only after
//!   DISCONNECTED and not before its TimeWait (`ms(qp.timeout)`, cm-spec §3.2, §4.5).
//! * **S2** per WR: ≤ 1 completion; at quiescence exactly 1 for WRs of a host life that is
//!   still running, unless the CQ of its queue overran (CQ_ERR: completions are lost).
//! * **S3** per queue: completions in post order (`wr_id`s grow in post order).
//! * **S4** a WR posted to a QP in ERR, or completing after the QP was seen in ERR, completes
//!   with WR_FLUSH_ERR; no SUCCESS after a flush on the same queue.
//! * **S5** a DISCONNECTED with status 0 follows a DREQ or DREP received for the id's comm ID
//!   (the peer's CM acted); status −110 follows `1 + max_cm_retries` DREQs sent (cm-spec §3.2;
//!   a passive id takes the smaller of its host's and the REQ's `max_cm_retries`, as Linux
//!   `cm_req_handler` does, so with per-host budgets the bound is the smallest budget of any
//!   host that is not hostile);
//!   a REJECTED follows a REJ received for the id's comm ID (or a REJ "timeout", which names
//!   the connection by the sender's CA GUID and comm ID, cm-spec §2.5). What a hostile host
//!   sent ([`History::hostile`]) is no such evidence: a forgery must not end a connection (no
//!   unrelated teardown). The hostile host's own records are not checked.
//! * **S6** every successful completion's `data_ok` (checked by the World at poll time).
//! * **S7** the errno of `rdma_disconnect` (§4.4; and a 0 means its QP is in ERR by the next
//!   instant, §4.4 step 2), `rdma_destroy_id` (§4.6: EBUSY while an
//!   event is un-acked; a CONNECT_REQUEST is the listener's event until acked, as ucma.c
//!   reports it on the listen context), `ibv_post_*` (§5.4: sends EINVAL before RTS, accepted in ERR; receives
//!   accepted from INIT; an active QP is ready when ESTABLISHED is read: librdmacm moves it to
//!   RTS when the application fetches the CONNECT_RESPONSE, so a deaf host's stays in INIT), by
//!   the state tracked from the history; other calls may return only 0 or EINVAL.
//! * **L1–L3** (only when the history was healed and is quiescent): an id on which disconnect
//!   was called after ESTABLISHED gets exactly one DISCONNECTED (L1; unless a REJ came instead:
//!   Linux cm.c enters TimeWait on a REJ in DREQ_SENT and rdma_cm reports REJECTED, §4.5); a DISCONNECTED(0) caused by
//!   a peer id's DREQ/DREP means that peer id got DISCONNECTED too (L2); an id that reached
//!   TimeWait (DISCONNECTED after a DREP, with −110, or answered by a disconnect call) gets
//!   TIMEWAIT_EXIT; nothing is left armed (L3). Ids destroyed, of hosts that crashed, or of
//!   applications that never read events are exempt.
//!
//! The device's async events and the CM's disruptions (`oracle/device_events.rs`;
//! docs/semantics-verbs.md "Async events", "Shared receive queues", "CQ overrun";
//! docs/cm-semantics.md "Device removal and address change"), by invariant:
//! * **S1** (at most once, nothing after the end): no event on an id after its
//!   DEVICE_REMOVAL; no second ESTABLISHED on an id (also after `rdma_notify`); COMM_EST at
//!   most once per QP per life (a World QP enters RTR once); DEVICE_FATAL at most once per
//!   device life, and no async event after it.
//! * **S2**: a receive posted to a host's SRQ ([`SRQ_QPN`]) completes on whichever QP of the
//!   host took it; one never taken needs no completion (it goes with the SRQ). WRs of a
//!   removed device are flushed (its CQs stay readable) and still need their one completion.
//! * **S4** (ERR and flush order): LAST_WQE_REACHED at most once per QP (per entry to ERR)
//!   and no receive completion of the QP after it (it follows the QP's last flush); QP_FATAL
//!   only after a CQ_ERR of one of the host's CQs (every World QP shares them).
//! * **S5** (cause and wire): DEVICE_REMOVAL and DEVICE_FATAL only after the host's device was
//!   removed, ADDR_CHANGE (status 0) only after its address changed; a host whose device was
//!   removed sends no MAD and no RC packet afterwards. Its peer hears nothing: its DREQs retry
//!   out, DISCONNECTED −110 after `1 + max_cm_retries` DREQs (the usual S5 rule).
//! * **S7** (errnos): after a removal, verbs (posts, `ibv_modify_qp`) return EIO, calls on an
//!   id that got DEVICE_REMOVAL return ENXIO (or EIO where librdmacm touches the QP first),
//!   other rdma_cm calls fail; `rdma_ack_cm_event` and `rdma_destroy_id` keep their rules.
//!   `rdma_notify` returns 0 only on an id not ESTABLISHED yet, else EISCONN/EINVAL/ENXIO/EIO.
//! * **L1–L3**: a host whose device was removed is exempt, as one that crashed. ADDR_CHANGE
//!   changes no state: its ids are checked by every rule above exactly as without it.

use crate::history::{Entry, Fault, History, Queue, Record, SRQ_QPN};
use cm_core::api::CmEventType as E;
use cm_core::wire::{
    RejectReason, CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ, CM_MRA_ATTR_ID as MRA,
    CM_REJ_ATTR_ID as REJ, CM_REP_ATTR_ID as REP_ATTR, CM_REQ_ATTR_ID as REQ_ATTR,
};
use rnic_sim::fabric::DropReason;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use verbs_core::{SimTime, WcStatus};

mod calls;
mod device_events;
mod sometimes;
mod violation;
pub use sometimes::Sometimes;
pub use violation::{Invariant, Violation};

type IdKey = (u8, u8, u32);
type QueueKey = (u8, u8, u32, Queue);

#[derive(Debug, Default)]
struct IdState {
    comm_id: u32,
    has_cm_id: bool,
    established: bool,
    destroyed: bool,
    disconnected: u32,
    disc_at: Option<(SimTime, u64, i32, usize)>,
    timewait_exit: u32,
    unacked: u32,
    /// Disconnect called (errno 0) after ESTABLISHED.
    disconnect_connected: bool,
    /// Disconnect called (errno 0) after DISCONNECTED.
    answered: bool,
    /// A DREP addressed to this id arrived.
    drep_rcvd: bool,
    /// DISCONNECTED(0) came after a DREQ/DREP from this peer comm ID.
    caused_by: Option<u32>,
    qpn: u32,
    /// REJECTED was reported (a REJ in ESTABLISHED/DREQ_SENT: TimeWait without DISCONNECTED,
    /// cm-spec §4.5).
    rejected: bool,
    /// DEVICE_REMOVAL was reported: no event may follow, every call but destroy fails.
    removed: bool,
    /// `rdma_notify` returned 0 on it.
    notified: bool,
}

#[derive(Debug)]
struct WrState {
    key: QueueKey,
    qp_err: bool,
    done: u32,
}

#[derive(Debug, Default)]
struct HostState {
    epoch: u8,
    dead: bool,
    max_cm_retries: u8,
    /// (remote comm ID, attribute) of received DREQ/DREP, with the sender's comm ID.
    rx: BTreeMap<(u32, u16), u32>,
    /// local comm ID → DREQs sent.
    dreq_tx: BTreeMap<u32, u32>,
    /// local comm IDs a DREP was sent for.
    drep_tx: BTreeSet<u32>,
    /// Remote comm IDs of the REJs received (from hosts that are not hostile).
    rej_rx: BTreeSet<u32>,
    /// A REJ "timeout" (reason 4, matched by ARI) was received from a host that is not hostile.
    rej_timeout_rx: bool,
    /// QPNs (current life) that reached RTS or ERR.
    ready: BTreeSet<u32>,
    /// QPNs seen in ERR.
    err: BTreeSet<u32>,
    /// Local comm IDs an MRA was sent for.
    mra_tx: BTreeSet<u32>,
    /// The host's send / receive CQ overran (CQ_ERR): its completions may be lost.
    cq_err: [bool; 2],
    /// The device's async events and removal (`oracle/device_events.rs`).
    dev: device_events::DevState,
    /// The id of the host's last `rdma_listen` (this life): its CONNECT_REQUESTs count as its
    /// un-acked events, not the new ids' (ucma.c reports them on the listen context).
    listener: Option<u32>,
}

/// The one-pass checker. See the module docs.
#[derive(Debug, Default)]
struct Checker {
    out: Vec<Violation>,
    hosts: Vec<HostState>,
    /// [`History::hostile`].
    hostile: Vec<bool>,
    ids: BTreeMap<IdKey, IdState>,
    wrs: BTreeMap<u64, WrState>,
    queues: BTreeMap<QueueKey, (u64, bool)>,
    sometimes: Sometimes,
    /// WRs outstanding per queue (posted, not completed yet).
    outstanding: BTreeMap<QueueKey, u32>,
    /// A targeted fault dropped a REQ, REP or MRA.
    setup_msg_dropped: bool,
    /// rdma_disconnect calls that returned 0: their QP must be in ERR by the next instant
    /// (cm-spec §4.4 step 2): (host, life, QPN, the call), in history (= time) order.
    must_be_err: VecDeque<(u8, u8, u32, Entry)>,
    /// Un-acked CONNECT_REQUESTs per listener (they are the listener's events, S7).
    listener_unacked: BTreeMap<IdKey, u32>,
}

impl Checker {
    fn violate(&mut self, inv: Invariant, e: &Entry, message: String) {
        self.out.push(Violation {
            invariant: inv,
            host: usize::from(e.host),
            at: e.at,
            message,
            events: vec![e.to_string()],
        });
    }

    fn host(&mut self, h: u8) -> &mut HostState {
        let h = usize::from(h);
        if self.hosts.len() <= h {
            self.hosts.resize_with(h + 1, HostState::default);
        }
        &mut self.hosts[h]
    }

    fn is_hostile(&self, h: u8) -> bool {
        self.hostile.get(usize::from(h)).copied().unwrap_or(false)
    }

    fn entry(&mut self, e: &Entry) {
        let (h, ep) = (e.host, e.epoch);
        if self.is_hostile(h) {
            return;
        }
        match e.rec {
            Record::Boot { max_cm_retries } => {
                let hs = self.host(h);
                *hs = HostState {
                    epoch: ep,
                    max_cm_retries,
                    ..HostState::default()
                };
            }
            Record::Fault(Fault::Crash { restart_ns }) => {
                if restart_ns.is_none() {
                    self.host(h).dead = true;
                }
            }
            Record::Fault(Fault::Dropped { msg, reason }) => {
                if msg.attr == DREP && reason != DropReason::NoListener {
                    self.sometimes.drep_lost = true;
                }
            }
            Record::Fault(Fault::TargetedDrop { msg, .. }) => {
                self.sometimes.targeted_drop = true;
                self.setup_msg_dropped |= matches!(msg.attr, REQ_ATTR | REP_ATTR | MRA);
            }
            Record::Fault(Fault::Delayed { .. }) => self.sometimes.targeted_delay = true,
            Record::Fault(Fault::Duplicated { .. } | Fault::Corrupted { .. }) => {}
            Record::Wire { tx, peer, msg } => {
                if tx {
                    self.removed_tx(e, msg);
                }
                if tx || !self.is_hostile(peer) {
                    self.wire(e, tx, msg);
                }
            }
            Record::Event {
                id,
                event,
                status,
                comm_id,
                timewait_ns,
            } => self.event(e, (h, ep, id), event, status, comm_id, timewait_ns),
            Record::Call { call, errno } => self.call(e, call, errno),
            Record::Posted {
                qpn,
                wr_id,
                queue,
                qp_err,
                ..
            } => {
                if qp_err {
                    self.sometimes.wr_posted_after_err = true;
                }
                let n = self.outstanding.entry((h, ep, qpn, queue)).or_default();
                *n += 1;
                if *n > 32 {
                    self.sometimes.deep_post = true;
                }
                self.wrs.insert(
                    wr_id,
                    WrState {
                        key: (h, ep, qpn, queue),
                        qp_err,
                        done: 0,
                    },
                );
            }
            Record::Completion {
                qpn,
                wr_id,
                queue,
                status,
                data_ok,
                ..
            } => self.completion(e, qpn, wr_id, queue, status, data_ok),
            Record::QpErr { qpn } => {
                let hs = self.host(h);
                hs.err.insert(qpn);
                hs.ready.insert(qpn);
            }
            Record::CqErr { queue } => self.host(h).cq_err[queue as usize] = true,
            Record::Async { event, on } => self.async_event(e, event, on),
            Record::Fault(f @ (Fault::DeviceRemoved { .. } | Fault::AddressChange)) => {
                self.device_fault(e, f)
            }
        }
    }

    fn wire(&mut self, e: &Entry, tx: bool, msg: crate::history::WireMsg) {
        let hs = self.host(e.host);
        match (tx, msg.attr) {
            (true, DREQ) => *hs.dreq_tx.entry(msg.local_comm_id).or_default() += 1,
            (true, DREP) => {
                hs.drep_tx.insert(msg.local_comm_id);
            }
            (true, REJ) if msg.reason == 10 => self.sometimes.stale_connection_rej = true,
            (true, MRA) => {
                hs.mra_tx.insert(msg.local_comm_id);
                self.sometimes.mra_sent = true;
            }
            (false, DREQ) => {
                let crossed = hs.dreq_tx.contains_key(&msg.remote_comm_id);
                let in_tw = hs.drep_tx.contains(&msg.remote_comm_id);
                hs.rx.insert((msg.remote_comm_id, DREQ), msg.local_comm_id);
                self.sometimes.dreqs_crossed |= crossed;
                self.sometimes.dup_dreq_in_timewait |= in_tw;
            }
            (false, DREP) => {
                hs.rx.insert((msg.remote_comm_id, DREP), msg.local_comm_id);
            }
            (false, REJ) => {
                hs.rej_rx.insert(msg.remote_comm_id);
                hs.rej_timeout_rx |= msg.reason == u16::from(RejectReason::Timeout);
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        e: &Entry,
        key: IdKey,
        event: E,
        status: i32,
        comm_id: u32,
        timewait_ns: u64,
    ) {
        // The smallest retry budget of the (non-hostile) hosts: a passive id's is the REQ's if
        // smaller than its host's (module docs). Only a DISCONNECTED(−110) needs it.
        let least = if event == E::Disconnected && status == -110 {
            (0..self.hosts.len())
                .filter(|&i| !self.is_hostile(i as u8))
                .map(|i| self.hosts[i].max_cm_retries)
                .min()
                .unwrap_or(u8::MAX)
        } else {
            u8::MAX
        };
        let (dreq_from, drep_from, dreq_sent, max_retries, rej_rcvd, mra_sent) = {
            let hs = self.host(e.host);
            (
                hs.rx.get(&(comm_id, DREQ)).copied(),
                hs.rx.get(&(comm_id, DREP)).copied(),
                hs.dreq_tx.get(&comm_id).copied().unwrap_or(0),
                hs.max_cm_retries.min(least),
                hs.rej_timeout_rx || hs.rej_rx.contains(&comm_id),
                comm_id != 0 && hs.mra_tx.contains(&comm_id),
            )
        };
        if event == E::Unreachable && status == -110 && self.setup_msg_dropped {
            self.sometimes.cm_retries_exhausted_by_targeted_drop = true;
        }
        let (removal, changed) = {
            let d = &self.host(e.host).dev;
            (d.removed, d.addr_changes)
        };
        let id = self.ids.entry(key).or_default();
        if comm_id != 0 {
            id.comm_id = comm_id;
        }
        // A CONNECT_REQUEST counts against the listener until acked (module docs, S7).
        match (event, self.host(key.0).listener) {
            (E::ConnectRequest, Some(l)) => {
                *self.listener_unacked.entry((key.0, key.1, l)).or_default() += 1;
            }
            _ => self.ids.entry(key).or_default().unacked += 1,
        }
        let id = self.ids.entry(key).or_default();
        let mut v: Vec<(Invariant, String)> = Vec::new();
        if id.removed {
            v.push((Invariant::S1, format!("{event:?} after DEVICE_REMOVAL")));
        }
        match event {
            E::DeviceRemoval => {
                id.removed = true;
                self.sometimes.device_removed = true;
                if !removal || status != 0 {
                    v.push((
                        Invariant::S5,
                        format!("DEVICE_REMOVAL (status {status}) without a device removal"),
                    ));
                }
            }
            E::AddrChange => {
                self.sometimes.addr_change = true;
                if changed == 0 || status != 0 {
                    v.push((
                        Invariant::S5,
                        format!("ADDR_CHANGE (status {status}) without an address change"),
                    ));
                }
            }
            E::ConnectRequest => id.has_cm_id = true,
            E::Rejected => {
                id.rejected = true;
                // A passive request nobody answered expires with REJECTED status 4 (Timeout)
                // and no REJ on the wire (cm-semantics.md: passive request expiry).
                let expired = id.has_cm_id && !id.established && status == 4;
                if !rej_rcvd && !expired {
                    v.push((
                        Invariant::S5,
                        "REJECTED without a REJ received for the id".into(),
                    ));
                }
            }
            E::Established => {
                if id.disconnected > 0 {
                    v.push((Invariant::S1, "ESTABLISHED after DISCONNECTED".into()));
                }
                if id.established {
                    v.push((Invariant::S1, "a second ESTABLISHED".into()));
                }
                self.sometimes.comm_est_notify_established |= id.notified;
                self.sometimes.mra_then_established |= mra_sent;
                id.established = true;
            }
            E::Disconnected => {
                id.disconnected += 1;
                if id.disconnected > 1 {
                    v.push((Invariant::S1, "a second DISCONNECTED".into()));
                }
                id.drep_rcvd = drep_from.is_some();
                if id.disc_at.is_none() {
                    id.disc_at = Some((e.at, timewait_ns, status, 0));
                }
                if status == 0 {
                    match drep_from.or(dreq_from) {
                        Some(peer) => id.caused_by = Some(peer),
                        None => v.push((
                            Invariant::S5,
                            "DISCONNECTED(0) without a DREQ or DREP received for the id".into(),
                        )),
                    }
                } else if status == -110 {
                    self.sometimes.dreq_retries_exhausted = true;
                    if dreq_sent < 1 + u32::from(max_retries) {
                        v.push((
                            Invariant::S5,
                            format!(
                                "DISCONNECTED(-110) after {dreq_sent} DREQs, not 1 + {max_retries}"
                            ),
                        ));
                    }
                }
            }
            E::TimewaitExit => {
                id.timewait_exit += 1;
                if id.timewait_exit > 1 {
                    v.push((Invariant::S1, "a second TIMEWAIT_EXIT".into()));
                }
                match id.disc_at {
                    None => v.push((Invariant::S1, "TIMEWAIT_EXIT without DISCONNECTED".into())),
                    Some((at, tw, _, _)) if e.at < at.plus_nanos(tw) => v.push((
                        Invariant::S1,
                        format!(
                            "TIMEWAIT_EXIT before DISCONNECTED at {} µs + TimeWait {} µs",
                            at.as_nanos() / 1000,
                            tw / 1000
                        ),
                    )),
                    _ => {}
                }
            }
            _ => {}
        }
        for (inv, m) in v {
            self.violate(inv, e, m);
        }
    }

    /// Marks ESTABLISHED ids' QPs ready (the active QP is RTS when ESTABLISHED is read).
    fn mark_ready(&mut self, e: &Entry) {
        if let Record::Event {
            id,
            event: E::Established,
            ..
        } = e.rec
        {
            let qpn = self.ids.get(&(e.host, e.epoch, id)).map_or(0, |s| s.qpn);
            self.host(e.host).ready.insert(qpn);
        }
    }

    fn completion(
        &mut self,
        e: &Entry,
        qpn: u32,
        wr_id: u64,
        queue: Queue,
        status: WcStatus,
        data_ok: bool,
    ) {
        let key = (e.host, e.epoch, qpn, queue);
        let seen_err = self.host(e.host).err.contains(&qpn);
        if queue == Queue::Recv {
            self.recv_completion(e, qpn);
        }
        if let Some(n) = self.outstanding.get_mut(&key) {
            *n = n.saturating_sub(1);
        }
        let mut v: Vec<(Invariant, String)> = Vec::new();
        match self.wrs.get_mut(&wr_id) {
            None => v.push((
                Invariant::S2,
                format!("completion of WR {wr_id} never posted"),
            )),
            Some(w) => {
                w.done += 1;
                if w.done > 1 {
                    v.push((Invariant::S2, format!("WR {wr_id} completed twice")));
                }
                let srq_taken =
                    w.key.2 == SRQ_QPN && (w.key.0, w.key.1, w.key.3) == (key.0, key.1, key.3);
                if w.key != key && !srq_taken {
                    v.push((
                        Invariant::S2,
                        format!("WR {wr_id} completed on another queue"),
                    ));
                }
                if (w.qp_err || seen_err) && status != WcStatus::WrFlushErr {
                    v.push((
                        Invariant::S4,
                        format!("WR {wr_id} completed {status:?} with its QP in ERR"),
                    ));
                }
            }
        }
        let q = self.queues.entry(key).or_insert((0, false));
        if wr_id <= q.0 {
            v.push((
                Invariant::S3,
                format!("WR {wr_id} completed after WR {} of the same queue", q.0),
            ));
        }
        q.0 = q.0.max(wr_id);
        if q.1 && status == WcStatus::Success {
            v.push((Invariant::S4, format!("WR {wr_id} SUCCESS after a flush")));
        }
        q.1 |= status == WcStatus::WrFlushErr;
        if status == WcStatus::Success && !data_ok {
            v.push((
                Invariant::S6,
                format!("WR {wr_id}: destination bytes differ from the bytes posted"),
            ));
        }
        for (inv, m) in v {
            self.violate(inv, e, m);
        }
    }

    /// S7 for the disconnects whose instant has passed: their QP went to ERR.
    fn settle_disconnects(&mut self, now: Option<SimTime>) {
        while let Some(&(h, ep, qpn, call)) = self.must_be_err.front() {
            if now.is_some_and(|t| t <= call.at) {
                break;
            }
            self.must_be_err.pop_front();
            let hs = self.host(h);
            if hs.epoch == ep && !hs.err.contains(&qpn) {
                self.violate(
                    Invariant::S7,
                    &call,
                    format!("rdma_disconnect returned 0 but QP {qpn:#x} was not moved to ERR"),
                );
            }
        }
    }

    fn finish(&mut self, history: &History) {
        self.settle_disconnects(None);
        let end = history.entries.last().map_or(SimTime::ZERO, |e| e.at);
        let running = |hosts: &[HostState], h: u8, ep: u8| {
            hosts
                .get(usize::from(h))
                .is_some_and(|s| s.epoch == ep && !s.dead)
        };
        // L1–L3 exempt a host whose device was removed, as one that crashed.
        let alive = |hosts: &[HostState], h: u8, ep: u8| {
            running(hosts, h, ep) && hosts.get(usize::from(h)).is_some_and(|s| !s.dev.removed)
        };
        let deaf = |h: u8| history.deaf.get(usize::from(h)).copied().unwrap_or(false);
        let mut v: Vec<Violation> = Vec::new();
        let mk = |inv, h: u8, message: String| Violation {
            invariant: inv,
            host: usize::from(h),
            at: end,
            message,
            events: Vec::new(),
        };
        if history.quiescent {
            for (wr, w) in &self.wrs {
                let lost_to_overrun = |hs: &[HostState]| {
                    hs.get(usize::from(w.key.0))
                        .is_some_and(|s| s.cq_err[w.key.3 as usize])
                };
                // A receive still in an SRQ is not completed: it goes with the SRQ.
                let in_srq = w.key.2 == SRQ_QPN;
                if w.done == 0
                    && running(&self.hosts, w.key.0, w.key.1)
                    && !lost_to_overrun(&self.hosts)
                    && !in_srq
                {
                    v.push(mk(
                        Invariant::S2,
                        w.key.0,
                        format!("WR {wr} ({:?} QP {:#x}) never completed", w.key.3, w.key.2),
                    ));
                }
            }
        }
        if history.healed_at.is_some() && history.quiescent {
            for (&(h, ep, id), s) in &self.ids {
                if s.destroyed || deaf(h) || !alive(&self.hosts, h, ep) {
                    continue;
                }
                if s.disconnect_connected
                    && s.disconnected != 1
                    && !(s.rejected && s.disconnected == 0)
                {
                    v.push(mk(
                        Invariant::L1,
                        h,
                        format!(
                            "id {id}: disconnect called, {} DISCONNECTED",
                            s.disconnected
                        ),
                    ));
                }
                if let Some(peer) = s.caused_by {
                    for (&(ph, pep, pid), p) in &self.ids {
                        if ph != h
                            && p.comm_id == peer
                            && p.disconnected == 0
                            && !p.destroyed
                            && !deaf(ph)
                            && alive(&self.hosts, ph, pep)
                        {
                            v.push(mk(
                                Invariant::L2,
                                ph,
                                format!(
                                    "id {pid}: its CM answered host {h} id {id}'s disconnect but it got no DISCONNECTED"
                                ),
                            ));
                        }
                    }
                }
                let status = s.disc_at.map_or(0, |d| d.2);
                let timewait = s.disconnected > 0 && (s.answered || s.drep_rcvd || status != 0);
                if timewait && s.timewait_exit != 1 {
                    v.push(mk(
                        Invariant::L3,
                        h,
                        format!("id {id}: in TimeWait but {} TIMEWAIT_EXIT", s.timewait_exit),
                    ));
                }
            }
        }
        self.removed_sent_nothing(history, end);
        if history.healed_at.is_some() && !history.quiescent {
            v.push(mk(
                Invariant::L3,
                0,
                "not quiescent: a timer or datagram is left after the liveness phase".into(),
            ));
        }
        self.out.extend(v);
    }
}

/// Checks S1–S7 and L1–L3 (module docs) in one pass over `history`; returns the violations
/// (empty = pass).
pub fn check(history: &History) -> Vec<Violation> {
    check_with_sometimes(history).0
}

/// [`check`], also returning the "sometimes" situations reached.
pub fn check_with_sometimes(history: &History) -> (Vec<Violation>, Sometimes) {
    let mut c = Checker {
        hostile: history.hostile.clone(),
        ..Checker::default()
    };
    for e in &history.entries {
        if !c.must_be_err.is_empty() {
            c.settle_disconnects(Some(e.at));
        }
        c.mark_ready(e);
        c.entry(e);
    }
    c.finish(history);
    (c.out, c.sometimes)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_device;
