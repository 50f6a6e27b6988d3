//! The simulated RNIC: [`SimDevice`] implements [`verbs_core::Device`] and exchanges RoCEv2
//! packets with its fabric through a sans-IO interface (`poll_transmit`, `handle_packet`,
//! `poll_timeout`, `handle_timeout`).

use crate::cq::Cq;
use crate::gather::Payload;
use crate::mr::{range_error, MrTable};
use crate::qp::SimQp;
use crate::roce::Packet;
use crate::shared::Shared;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use verbs_core::{
    check_modify, AccessFlags, AsyncElement, AsyncEvent, CompChannel, CqHandle, Device, DeviceAttr,
    Errno, Error, Gid, Mr, MrHandle, Mtu, PdHandle, PortAttr, PortState, PostError, Qp, QpAttr,
    QpAttrMask, QpHandle, QpInitAttr, QpState, QpType, RecvWr, Result, SendWr, SimTime, SrqAttr,
    SrqAttrMask, SrqHandle, SrqInitAttr, WorkCompletion, LINK_LAYER_ETHERNET, PSN_MASK, QPN_MASK,
};

mod config;
mod gsi;
mod multicast;
mod registration;
mod removal;
mod srq;
mod wire;

pub use crate::shared::{Counters, ObjectCounts, QpCounters, Transmit};
pub use config::SimDeviceConfig;

/// The simulated RNIC. Deterministic: no randomness but its configuration's seed, no clock,
/// ordered maps only. `Clone` is a
/// full, independent snapshot (the model checker, `tests/tests/model_check.rs`, explores from
/// copies), except for regions over caller-supplied memory
/// ([`SimDevice::reg_mr_external`]): a clone shares their [`crate::ExternalMemory`] (the
/// `Arc`), so both devices read and write the same bytes there.
#[derive(Debug, Clone)]
pub struct SimDevice {
    cfg: SimDeviceConfig,
    sh: Shared,
    pds: BTreeSet<u32>,
    next_pd: u32,
    next_cq: u32,
    /// The next SRQ handle value (live handles are skipped).
    next_srq: u32,
    qps: BTreeMap<u32, SimQp>,
    /// How many QP ends (send and receive) use each CQ: `destroy_cq` refuses a used one
    /// (EBUSY) without scanning every QP.
    cq_users: BTreeMap<u32, u32>,
    /// The QPN counter (2..=0xFF_FFFF, wrapping); the QPN is its image under `qpn_order`.
    next_qpn: u32,
    /// The seed's permutation of QPNs (the identity with seed 0).
    qpn_order: crate::ids::Perm24,
    /// QPNs of destroyed QPs whose completions are still in a CQ, with how many remain: such
    /// a QPN is not handed out again until they are polled or their CQ is destroyed, so a
    /// completion's `qp_num` never names a QP other than the one that made it
    /// (docs/semantics-verbs.md, "CQEs of a destroyed QP").
    lingering: BTreeMap<u32, usize>,
    gsi: crate::gsi::Gsi,
    /// QPs touched since the last [`SimDevice::poll_transmit`] ran the requesters: only they
    /// can have something new to send (a QP's requester emits all it may in one go, and only
    /// an operation on that QP — a post, a packet, a modify, a timer — lets it send more).
    /// Runs in QPN order, as a scan of every QP would (sorted and deduplicated then: a `Vec`
    /// keeps its buffer, where a set allocates a node whenever it fills again).
    tx_pending: Vec<u32>,
    /// Every armed transport timer, `(earliest deadline, QPN)`, one entry per QP, kept exact
    /// after each operation on a QP ([`SimDevice::sync_deadline`]).
    deadlines: BTreeSet<(SimTime, u32)>,
    /// The deadline each QP has in `deadlines`.
    deadline_of: BTreeMap<u32, SimTime>,
    /// The device was removed ([`SimDevice::remove`], device/removal.rs): verbs calls return
    /// `EIO`, nothing is sent or taken.
    removed: bool,
    /// QPs attached to multicast groups (device/multicast.rs).
    mcast: crate::multicast::McastTable,
    /// `(destination GID, QPN)` of every QP whose address vector is set (from the modify that
    /// set it to RESET or destruction): the peers whose routes a NIC must not move
    /// ([`SimDevice::has_qp_to`]).
    dest_index: BTreeSet<(Gid, u32)>,
}

/// Counts `wcs` off the lingering completions of destroyed QPs.
fn forget<'a>(lingering: &mut BTreeMap<u32, usize>, wcs: impl Iterator<Item = &'a WorkCompletion>) {
    if lingering.is_empty() {
        return;
    }
    for wc in wcs {
        if let Some(n) = lingering.get_mut(&wc.qp_num) {
            *n -= 1;
            if *n == 0 {
                lingering.remove(&wc.qp_num);
            }
        }
    }
}

fn qp_handle_err() -> Error {
    Error::inval("unknown QP handle")
}

impl SimDevice {
    /// A device with configuration `cfg`, no objects, port active.
    pub fn new(cfg: SimDeviceConfig) -> Self {
        let sh = Shared {
            gid: cfg.gid,
            mrs: MrTable::new(cfg.mr_base_va, cfg.seed),
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            events: VecDeque::new(),
            tx: VecDeque::new(),
            mcast_loop: VecDeque::new(),
            counters: Counters::default(),
            max_unacked_psns: cfg.max_unacked_psns.clamp(1, 1 << 22),
            max_unacked_bytes: cfg.max_unacked_bytes,
            budgets: crate::shared::PeerBudgets::new(cfg.max_unacked_bytes),
            max_pkts_per_ack: cfg.max_pkts_per_ack.max(1),
            entered_err: BTreeSet::new(),
            poison: cfg
                .poison_undefined_wc_fields
                .then(|| crate::shared::WcPoison::new(cfg.seed)),
        };
        let first = cfg.first_qpn & QPN_MASK;
        SimDevice {
            next_qpn: if first < 2 { 2 } else { first },
            qpn_order: crate::ids::Perm24::new(cfg.seed, crate::ids::QPN_STREAM),
            cfg,
            sh,
            pds: BTreeSet::new(),
            next_pd: 1,
            next_cq: 1,
            next_srq: 1,
            qps: BTreeMap::new(),
            lingering: BTreeMap::new(),
            cq_users: BTreeMap::new(),
            gsi: crate::gsi::Gsi::default(),
            tx_pending: Vec::new(),
            deadlines: BTreeSet::new(),
            deadline_of: BTreeMap::new(),
            removed: false,
            mcast: crate::multicast::McastTable::default(),
            dest_index: BTreeSet::new(),
        }
    }

    /// Whether a QP of this device has `gid` as its destination (its address vector was set
    /// and it was neither reset nor destroyed since): a connected QP's peer, whose route a
    /// NIC must not let the wire move (`rnic_sim::peers`).
    pub fn has_qp_to(&self, gid: Gid) -> bool {
        self.dest_index
            .range((gid, 0)..=(gid, u32::MAX))
            .next()
            .is_some()
    }

    pub(crate) fn gsi_mut(&mut self) -> &mut crate::gsi::Gsi {
        &mut self.gsi
    }

    pub(crate) fn push_tx(&mut self, t: Transmit) {
        self.sh.tx.push_back(t.into());
    }

    /// The port's GID.
    pub fn gid(&self) -> Gid {
        self.cfg.gid
    }

    /// Sets the requester window in bytes ([`SimDeviceConfig::max_unacked_bytes`]) of every QP,
    /// from the next packet on.
    pub fn set_max_unacked_bytes(&mut self, bytes: u64) {
        self.cfg.max_unacked_bytes = bytes;
        self.sh.max_unacked_bytes = bytes;
        self.sh.budgets.set_ceiling(bytes);
    }

    /// The configuration.
    pub fn config(&self) -> &SimDeviceConfig {
        &self.cfg
    }

    /// Drop and transport counters.
    pub fn counters(&self) -> Counters {
        self.sh.counters
    }

    /// The transport counters of QP `qpn` since it was created (`None`: no such QP).
    pub fn qp_counters(&self, qpn: u32) -> Option<QpCounters> {
        self.qps.get(&qpn).map(|q| q.counters)
    }

    /// The send budget towards `peer` that all RC QPs to it share: `(window, in flight)` in
    /// bytes, or `None` when it is at its ceiling with nothing in flight, or there is no
    /// budget ([`SimDeviceConfig::max_unacked_bytes`] is `u64::MAX`).
    pub fn peer_budget(&self, peer: Gid) -> Option<(u64, u64)> {
        self.sh.budgets.get(peer).map(|b| (b.window, b.in_flight))
    }

    /// How many objects the device holds: what every destroy call gives back. A caller that
    /// destroyed all it made sees the counts it started with (librnic's fuzz target checks
    /// that nothing leaks across its inputs).
    pub fn object_counts(&self) -> ObjectCounts {
        ObjectCounts {
            pds: self.pds.len(),
            mrs: self.sh.mrs.len(),
            cqs: self.sh.cqs.len(),
            qps: self.qps.len(),
            srqs: self.sh.srqs.len(),
        }
    }

    /// The oldest WR still posted on a QP of this device (not yet completed, so the device may
    /// still read or write its buffers) whose SGE list names `lkey`: its QP number and `wr_id`.
    /// Send queues first, then receive queues; WRs waiting on an SRQ are not searched. For
    /// librnic's checker (an MR deregistered under a posted WR).
    pub fn posted_wr_using(&self, lkey: u32) -> Option<(u32, u64)> {
        let uses = |sges: &[verbs_core::Sge]| sges.iter().any(|s| s.lkey == lkey && s.length > 0);
        let sends = self.qps.values().flat_map(|q| {
            q.sq.iter()
                .filter(|w| w.payload.is_none() && uses(&w.wr.sg_list))
                .map(move |w| (q.qpn, w.wr.wr_id))
        });
        let recvs = self.qps.values().flat_map(|q| {
            q.rq.iter()
                .filter(|w| uses(&w.sg_list))
                .map(move |w| (q.qpn, w.wr_id))
        });
        sends.chain(recvs).next()
    }

    /// Whether CQ `cq` lost a completion to an overrun (IBTA C11-37); false for an unknown CQ.
    pub fn cq_overran(&self, cq: CqHandle) -> bool {
        self.sh.cqs.get(&cq.0).is_some_and(|c| c.overrun)
    }

    /// How many async events are queued, not yet taken by [`Device::get_async_event`]: what
    /// makes a context's `async_fd` readable (librnic tops its descriptor up to this count).
    pub fn pending_async_events(&self) -> usize {
        self.sh.events.len()
    }

    /// Checks the attribute values a modify uses (rxe `rxe_qp_chk_attr` [rxe_qp.c] and
    /// `ib_modify_qp` range checks); `EINVAL` on the first bad one.
    fn check_attr_ranges(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let bad = |what: &str| Err(Error::inval(what.to_string()));
        if mask.contains(QpAttrMask::PORT) && attr.port_num != 1 {
            return bad("invalid port number");
        }
        if mask.contains(QpAttrMask::PKEY_INDEX) && attr.pkey_index != 0 {
            return bad("P_Key index past the P_Key table");
        }
        if mask.contains(QpAttrMask::AV)
            && (!attr.ah_attr.is_global
                || attr.ah_attr.grh.sgid_index != 0
                || (attr.ah_attr.port_num != 0 && attr.ah_attr.port_num != 1))
        {
            return bad("RoCE address vector needs a GRH with sgid_index 0 on port 1");
        }
        if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC)
            && u32::from(attr.max_rd_atomic) > self.cfg.max_qp_init_rd_atom
        {
            return bad("max_rd_atomic above the device limit");
        }
        if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC)
            && u32::from(attr.max_dest_rd_atomic) > self.cfg.max_qp_rd_atom
        {
            return bad("max_dest_rd_atomic above the device limit");
        }
        if mask.contains(QpAttrMask::TIMEOUT) && attr.timeout > 31 {
            return bad("timeout > 31");
        }
        if mask.contains(QpAttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
            return bad("retry_cnt > 7");
        }
        if mask.contains(QpAttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
            return bad("rnr_retry > 7");
        }
        if mask.contains(QpAttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return bad("min_rnr_timer > 31");
        }
        if mask.contains(QpAttrMask::DEST_QPN) && attr.dest_qp_num > QPN_MASK {
            return bad("dest_qp_num wider than 24 bits");
        }
        Ok(())
    }

    /// Sets the QPN counter (tests: make it meet a live QPN without 2^24 allocations).
    #[cfg(test)]
    pub(crate) fn set_qpn_counter(&mut self, counter: u32) {
        self.next_qpn = counter;
    }

    /// Forgets the lingering completions among `wcs` (polled, or in a destroyed CQ).
    fn forget_lingering<'a>(&mut self, wcs: impl Iterator<Item = &'a WorkCompletion>) {
        forget(&mut self.lingering, wcs);
    }

    /// The next QPN: the counter's image under the seed's permutation of `2..2^24` (the
    /// counter itself with seed 0), skipping live QPNs.
    fn allocate_qpn(&mut self) -> Option<u32> {
        for _ in 0..=QPN_MASK {
            let c = self.next_qpn;
            self.next_qpn = if c >= QPN_MASK { 2 } else { c + 1 };
            let n = self.qpn_order.apply_from(2, c);
            if n >= 2 && !self.qps.contains_key(&n) && !self.lingering.contains_key(&n) {
                return Some(n);
            }
        }
        None
    }
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn query_device(&self) -> DeviceAttr {
        let c = &self.cfg;
        DeviceAttr {
            fw_ver: "rnic-sim 0.1".into(),
            node_guid: c.node_guid,
            sys_image_guid: c.node_guid,
            max_mr_size: c.max_mr_size,
            vendor_id: 0xFFFFFF,
            vendor_part_id: 0,
            max_qp: c.max_qp,
            max_qp_wr: c.max_qp_wr,
            max_sge: c.max_sge,
            max_cq: c.max_cq,
            max_cqe: c.max_cqe,
            max_mr: c.max_mr,
            max_pd: c.max_pd,
            max_qp_rd_atom: c.max_qp_rd_atom,
            max_qp_init_rd_atom: c.max_qp_init_rd_atom,
            max_srq: c.max_srq,
            max_srq_wr: c.max_srq_wr,
            max_srq_sge: c.max_srq_sge,
            phys_port_cnt: 1,
        }
    }

    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        self.alive()?;
        if port_num != 1 {
            return Err(Error::inval("invalid port number"));
        }
        Ok(PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.cfg.active_mtu,
            gid_tbl_len: 1,
            max_msg_sz: crate::qp::MAX_MSG_SZ as u32,
            pkey_tbl_len: 1,
            lid: 0,
            link_layer: LINK_LAYER_ETHERNET,
        })
    }

    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        self.alive()?;
        if port_num != 1 || index != 0 {
            return Err(Error::inval("no such GID"));
        }
        Ok(self.cfg.gid)
    }

    fn alloc_pd(&mut self) -> Result<PdHandle> {
        self.alive()?;
        if self.pds.len() >= self.cfg.max_pd as usize {
            return Err(Error::new(Errno::ENOMEM, "max_pd reached"));
        }
        let h = self.next_pd;
        self.next_pd = self.next_pd.wrapping_add(1).max(1);
        self.pds.insert(h);
        Ok(PdHandle(h))
    }

    fn dealloc_pd(&mut self, pd: PdHandle) -> Result<()> {
        self.alive()?;
        if !self.pds.contains(&pd.0) {
            return Err(Error::inval("unknown PD"));
        }
        if self.sh.mrs.pd_in_use(pd.0)
            || self.qps.values().any(|q| q.pd == pd.0)
            || self.pd_has_srq(pd.0)
        {
            return Err(Error::new(
                Errno::EBUSY,
                "PD still used by an MR, QP or SRQ",
            ));
        }
        self.pds.remove(&pd.0);
        Ok(())
    }

    fn reg_mr(&mut self, pd: PdHandle, length: usize, access: AccessFlags) -> Result<Mr> {
        self.alive()?;
        // Device-owned regions start on a page boundary, so the zero-page rule is length 0.
        self.check_reg_mr(pd, length as u64, 0, access)?;
        let (h, addr, lkey, rkey) = self
            .sh
            .mrs
            .register(pd.0, length, access)
            .ok_or_else(|| Error::new(Errno::ENOMEM, "MR key or address space exhausted"))?;
        Ok(Mr {
            handle: MrHandle(h),
            addr,
            length: length as u64,
            lkey,
            rkey,
        })
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<()> {
        self.alive()?;
        if self.sh.mrs.deregister(mr.0) {
            Ok(())
        } else {
            Err(Error::inval("unknown MR"))
        }
    }

    fn mr_write(&mut self, mr: MrHandle, offset: u64, data: &[u8]) -> Result<()> {
        let e = self
            .sh
            .mrs
            .get_mut(mr.0)
            .ok_or_else(|| Error::inval("unknown MR"))?;
        usize::try_from(offset)
            .ok()
            .and_then(|o| e.memory.write(o, data))
            .ok_or_else(range_error)
    }

    fn mr_read(&self, mr: MrHandle, offset: u64, buf: &mut [u8]) -> Result<()> {
        let e = self
            .sh
            .mrs
            .get(mr.0)
            .ok_or_else(|| Error::inval("unknown MR"))?;
        usize::try_from(offset)
            .ok()
            .and_then(|o| e.memory.read(o, buf))
            .ok_or_else(range_error)
    }

    fn create_cq(&mut self, cqe: u32, channel: Option<&CompChannel>) -> Result<CqHandle> {
        self.alive()?;
        if cqe == 0 || cqe > self.cfg.max_cqe {
            return Err(Error::inval("cqe 0 or above max_cqe"));
        }
        if self.sh.cqs.len() >= self.cfg.max_cq as usize {
            return Err(Error::new(Errno::ENOMEM, "max_cq reached"));
        }
        let h = CqHandle(self.next_cq);
        self.next_cq = self.next_cq.wrapping_add(1).max(1);
        self.sh.cqs.insert(
            h.0,
            Cq::new(h, cqe as usize, channel.map(CompChannel::notifier)),
        );
        Ok(h)
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<()> {
        self.alive()?;
        if !self.sh.cqs.contains_key(&cq.0) {
            return Err(Error::inval("unknown CQ"));
        }
        if self.cq_users.contains_key(&cq.0) {
            return Err(Error::new(Errno::EBUSY, "CQ still used by a QP"));
        }
        if let Some(c) = self.sh.cqs.remove(&cq.0) {
            self.forget_lingering(c.entries.iter());
        }
        self.sh.forget_events_of(AsyncElement::Cq(cq));
        Ok(())
    }

    fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<()> {
        self.alive()?;
        let c = self
            .sh
            .cqs
            .get_mut(&cq.0)
            .ok_or_else(|| Error::inval("unknown CQ"))?;
        if c.notifier.is_none() {
            return Err(Error::inval("CQ has no completion channel"));
        }
        // Arming for any completion wins over solicited-only until it fires [rxe_cq.c].
        c.armed = Some(c.armed != Some(false) && solicited_only);
        Ok(())
    }

    fn poll_cq(
        &mut self,
        cq: CqHandle,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        let c = self
            .sh
            .cqs
            .get_mut(&cq.0)
            .ok_or_else(|| Error::inval("unknown CQ"))?;
        if c.overrun && c.entries.is_empty() {
            return Err(Error::new(Errno::EIO, "CQ overrun (CQ_ERR)"));
        }
        let n = max.min(c.entries.len());
        let start = out.len();
        out.extend(c.entries.drain(..n));
        forget(&mut self.lingering, out[start..].iter());
        Ok(n)
    }

    fn create_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<Qp> {
        self.alive()?;
        if !self.pds.contains(&pd.0) {
            return Err(Error::inval("unknown PD"));
        }
        if !self.sh.cqs.contains_key(&init.send_cq.0) || !self.sh.cqs.contains_key(&init.recv_cq.0)
        {
            return Err(Error::inval("unknown CQ"));
        }
        if init.qp_type == QpType::Uc {
            return Err(Error::new(Errno::EOPNOTSUPP, "UC QPs are not simulated"));
        }
        // With an SRQ the receive caps are ignored (rxe `rxe_qp_chk_cap` checks them only
        // without one).
        let init = &self.srq_attach(init)?;
        let c = &init.cap;
        let cfg = &self.cfg;
        if c.max_send_wr > cfg.max_qp_wr
            || c.max_recv_wr > cfg.max_qp_wr
            || c.max_send_sge > cfg.max_sge
            || c.max_recv_sge > cfg.max_sge
            || c.max_inline_data > cfg.max_inline_data
        {
            return Err(Error::inval("QP capability above the device limit"));
        }
        if c.max_send_wr == 0 && c.max_recv_wr == 0 && init.srq.is_none() {
            return Err(Error::inval("QP with neither send nor receive WRs"));
        }
        if self.qps.len() >= cfg.max_qp as usize {
            return Err(Error::new(Errno::ENOMEM, "max_qp reached"));
        }
        let qpn = self
            .allocate_qpn()
            .ok_or_else(|| Error::new(Errno::ENOMEM, "QP numbers exhausted"))?;
        for cq in [init.send_cq, init.recv_cq] {
            *self.cq_users.entry(cq.0).or_default() += 1;
        }
        self.srq_count_user(init, true);
        self.qps.insert(qpn, SimQp::new(qpn, pd.0, *init));
        tracing::debug!(qpn, qp_type = ?init.qp_type, state = %"RESET", "QP created");
        Ok(Qp {
            handle: QpHandle(qpn),
            qp_num: qpn,
        })
    }

    fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.alive()?;
        let (qp_type, cur) = {
            let q = self.qps.get(&qp.0).ok_or_else(qp_handle_err)?;
            (q.init.qp_type, q.state())
        };
        let next = check_modify(qp_type, cur, mask, attr.qp_state, attr.cur_qp_state)?;
        self.check_attr_ranges(attr, mask)?;
        let sh = &mut self.sh;
        let q = self.qps.get_mut(&qp.0).ok_or_else(qp_handle_err)?;
        let a = &mut q.attr;
        use QpAttrMask as M;
        if mask.contains(M::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if mask.contains(M::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if mask.contains(M::PORT) {
            a.port_num = attr.port_num;
        }
        if mask.contains(M::QKEY) {
            a.qkey = attr.qkey;
        }
        if mask.contains(M::AV) {
            self.dest_index.remove(&(a.ah_attr.grh.dgid, qp.0));
            a.ah_attr = attr.ah_attr;
            if qp_type != QpType::Ud {
                self.dest_index.insert((a.ah_attr.grh.dgid, qp.0));
            }
        }
        if mask.contains(M::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if mask.contains(M::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if mask.contains(M::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            q.req.retry_left = attr.retry_cnt;
        }
        if mask.contains(M::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            q.req.rnr_left = attr.rnr_retry;
        }
        if mask.contains(M::RQ_PSN) {
            a.rq_psn = attr.rq_psn & PSN_MASK;
            q.resp.psn = a.rq_psn;
        }
        if mask.contains(M::SQ_PSN) {
            a.sq_psn = attr.sq_psn & PSN_MASK;
            q.req.psn = a.sq_psn;
            q.req.comp_psn = a.sq_psn;
            q.req.sent_high = a.sq_psn;
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask.contains(M::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask.contains(M::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if mask.contains(M::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        match next {
            QpState::Reset => {
                self.dest_index.remove(&(q.attr.ah_attr.grh.dgid, qp.0));
                q.release_charge(sh);
                q.reset()
            }
            QpState::Err => {
                if cur != QpState::Err {
                    q.enter_err(sh);
                }
            }
            QpState::Rtr => {
                if cur != QpState::Rtr {
                    q.comm_est_raised = false;
                }
                q.attr.qp_state = next;
            }
            s => q.attr.qp_state = s,
        }
        if !matches!(next, QpState::Reset | QpState::Err) && next != cur {
            crate::log::qp_state(qp.0, cur, next);
        }
        q.settle(sh);
        self.touched(qp.0);
        Ok(())
    }

    fn query_qp(&self, qp: QpHandle) -> Result<(QpAttr, QpInitAttr)> {
        self.alive()?;
        let q = self.qps.get(&qp.0).ok_or_else(qp_handle_err)?;
        let mut a = q.attr;
        a.cur_qp_state = a.qp_state;
        a.sq_psn = q.req.psn;
        a.rq_psn = q.resp.psn;
        a.cap = q.init.cap;
        Ok((a, q.init))
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<()> {
        self.alive()?;
        let mut q = self.qps.remove(&qp.0).ok_or_else(qp_handle_err)?;
        self.dest_index.remove(&(q.attr.ah_attr.grh.dgid, qp.0));
        q.release_charge(&mut self.sh);
        tracing::debug!(qpn = qp.0, state = %crate::log::qp_state_name(q.state()), "QP destroyed");
        self.srq_count_user(&q.init, false);
        for cq in [q.init.send_cq, q.init.recv_cq] {
            if let Some(n) = self.cq_users.get_mut(&cq.0) {
                *n -= 1;
                if *n == 0 {
                    self.cq_users.remove(&cq.0);
                }
            }
        }
        // Its completions stay in the CQs and may be polled [rxe; man ibv_destroy_qp(3) says
        // nothing of them]; its QPN waits until they are gone.
        let mut left = 0;
        for cq in [q.init.send_cq, q.init.recv_cq]
            .into_iter()
            .collect::<BTreeSet<_>>()
        {
            if let Some(c) = self.sh.cqs.get(&cq.0) {
                left += c.entries.iter().filter(|w| w.qp_num == qp.0).count();
            }
        }
        if left > 0 {
            self.lingering.insert(qp.0, left);
        }
        self.tx_pending.retain(|&q| q != qp.0);
        self.sh.entered_err.remove(&qp.0);
        self.sh.forget_events_of(AsyncElement::Qp(qp.0));
        self.mcast.detach_all(qp.0);
        self.sync_deadline(qp.0);
        Ok(())
    }

    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr]) -> Result<(), PostError> {
        self.alive()
            .map_err(|error| PostError { error, bad_wr: 0 })?;
        let sh = &mut self.sh;
        let q = self.qps.get_mut(&qp.0).ok_or_else(|| PostError {
            error: qp_handle_err(),
            bad_wr: 0,
        })?;
        let r = q.post_send(sh, wrs);
        self.touched(qp.0);
        r
    }

    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.alive()
            .map_err(|error| PostError { error, bad_wr: 0 })?;
        let sh = &mut self.sh;
        let q = self.qps.get_mut(&qp.0).ok_or_else(|| PostError {
            error: qp_handle_err(),
            bad_wr: 0,
        })?;
        let r = q.post_recv(sh, wrs);
        self.touched(qp.0);
        r
    }

    fn create_srq(&mut self, pd: PdHandle, init: &SrqInitAttr) -> Result<SrqHandle> {
        self.alive()?;
        self.srq_create(pd, init)
    }

    fn modify_srq(&mut self, srq: SrqHandle, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.alive()?;
        self.srq_modify(srq, attr, mask)
    }

    fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr> {
        self.alive()?;
        self.srq_query(srq)
    }

    fn destroy_srq(&mut self, srq: SrqHandle) -> Result<()> {
        self.alive()?;
        self.srq_destroy(srq)
    }

    fn post_srq_recv(&mut self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.alive()
            .map_err(|error| PostError { error, bad_wr: 0 })?;
        self.srq_post_recv(srq, wrs)
    }

    fn get_async_event(&mut self) -> Option<AsyncEvent> {
        self.sh.events.pop_front()
    }

    fn attach_mcast(&mut self, qp: QpHandle, gid: Gid, lid: u16) -> Result<()> {
        self.mcast_attach(qp, gid, lid)
    }

    fn detach_mcast(&mut self, qp: QpHandle, gid: Gid, lid: u16) -> Result<()> {
        self.mcast_detach(qp, gid, lid)
    }
}
