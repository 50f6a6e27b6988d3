//! The rdma_cm / IB CM rules of cm-spec §3.3–§4.5, one test each, on the deterministic fabric
//! with the real simulated RNIC: every test runs two (or more) [`Host`]s — a `SimDevice` in a
//! `SimNic` plus its `RdmaCm` — on a `Simulation` + `SimFabric`, posts receives (and sends where
//! the connection carries data) before the disconnect, and ends with [`World::check`], the
//! oracle of docs/design/TESTING.md:
//!
//! * **S1** per CM id at most one DISCONNECTED, no ESTABLISHED after it, TIMEWAIT_EXIT at most
//!   once, only after DISCONNECTED and not before the TimeWait delay (`ms(av.timeout)`, read
//!   from the id's QP `timeout`, which is av.timeout — cm-spec §3.2);
//! * **S2** after quiescence every posted WR completed exactly once (WRs of a host that crashed
//!   for good, or of a host's life before a restart, at most once);
//! * **S3** per send and per receive queue, completions in post order;
//! * **S4** a WR posted to a QP in ERR, or outstanding when the QP was seen in ERR, completes with
//!   WR_FLUSH_ERR, and no SUCCESS follows a flush on the same queue.
//!
//! The application reads (and acks) every CM event and polls every CQ after each simulation
//! event, so the recorded times are the virtual times at which things happened. Single messages
//! are dropped with a partition window timed around the instant they are sent (virtual time
//! makes that exact); each such test asserts that exactly the intended MAD was dropped.
//! Scenario-specific expectations (statuses, REJ reasons, QP and IB CM states, MADs on the wire)
//! are asserted in the tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use cm_core::api::{CmEvent, CmEventType as E, CmIdHandle, ConnParam, EventChannel, RdmaCm};
use cm_core::engine::{CmConfig, IbCmState};
use cm_core::wire::{
    self, CmMessage, RdmaPortSpace, CM_DREP_ATTR_ID as DREP, CM_DREQ_ATTR_ID as DREQ,
    CM_MRA_ATTR_ID as MRA, CM_REJ_ATTR_ID as REJ, CM_REP_ATTR_ID as REP, CM_REQ_ATTR_ID as REQ,
    CM_RTU_ATTR_ID as RTU,
};
use rnic_sim::fabric::{
    Crash, DropReason, FabricEventKind, FaultPlan, Partition, PathFaults, SimFabric, Simulation,
};
use rnic_sim::nic::SimNic;
use rnic_sim::roce::decode_bytes;
use rnic_sim::{SimDevice, SimDeviceConfig, GSI_QPN};
use rnic_testbed::host::Host;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use verbs_core::{
    AccessFlags, CqHandle, Device, Errno, Error, Gid, Mr, PdHandle, Qp, QpAttr, QpAttrMask, QpCap,
    QpInitAttr, QpState, RecvWr, SendWr, SimTime, WcStatus,
};

const PORT: u16 = 7471;
const MS: u64 = 1_000_000;
/// Default active DREQ retransmission timeout: 2·ms(PLT 16) + ms(20) = 4608 ms (cm-spec §3.2).
const DREQ_TIMEOUT_NS: u64 = 4608 * MS;
/// DREQ sends before DREQ_ERROR: 1 + CMA_MAX_CM_RETRIES (15) (cm-spec §3.2).
const DREQ_SENDS: u64 = 16;
/// How long a scenario may still run after its last call before it must be quiescent.
const QUIESCE_NS: u64 = 400_000 * MS;

fn ip(h: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, h as u8 + 1))
}

/// The CM configuration of host `h`: its own CA GUID and seed, Linux's default timers.
fn cfg(h: usize) -> CmConfig {
    CmConfig {
        ca_guid: 0x0002_c903_0000_0000 | (h as u64 + 1),
        seed: (h as u64 + 1) * 0x9e37_79b9,
        ..CmConfig::default()
    }
}

/// Host `h`'s configuration with short CM timers: PLT 10 and response timeout 10 make the
/// active DREQ timeout 2·ms(10) + ms(10) = 12 ms and TimeWait ms(cm_ack_timeout(15, 10)) =
/// ms(15) = 128 ms on both sides (cm-spec §3.2).
fn fast_cfg(h: usize) -> CmConfig {
    CmConfig {
        packet_life_time: 10,
        cm_response_timeout: 10,
        ..cfg(h)
    }
}

/// TimeWait for an av.timeout (= the QP's RTS `timeout`): `ms(t) = 1 << max(t − 8, 0)` ms.
fn timewait_ns(timeout: u8) -> u64 {
    (1u64 << timeout.saturating_sub(8)) * MS
}

fn conn_param() -> ConnParam {
    ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// A work queue: (host, epoch, QPN, send or receive).
type QueueKey = (usize, u32, u32, Queue);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Queue {
    Send,
    Recv,
}

/// One end of a connection: its host, rdma_cm id and QP.
#[derive(Debug, Clone, Copy)]
struct End {
    host: usize,
    id: CmIdHandle,
    qp: Qp,
}

/// A connection: the active end (`a`, called connect) and the passive one (`p`, accepted).
#[derive(Debug, Clone, Copy)]
struct Conn {
    a: End,
    p: End,
}

/// The application's objects on one host (one event channel for all its ids). `epoch` counts
/// restarts with amnesia.
struct Node {
    ch: EventChannel,
    pd: PdHandle,
    mr: Mr,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    epoch: u32,
}

impl Node {
    fn create(host: &mut Host, epoch: u32) -> Node {
        host.nic_mut().start_capture();
        let (cm, dev) = host.split();
        let ch = cm.create_event_channel();
        let pd = dev.alloc_pd().unwrap();
        let mr = dev.reg_mr(pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
        let send_cq = dev.create_cq(256, None).unwrap();
        let recv_cq = dev.create_cq(256, None).unwrap();
        Node {
            ch,
            pd,
            mr,
            send_cq,
            recv_cq,
            epoch,
        }
    }
}

/// A CM event as the application read it.
#[derive(Debug)]
struct Seen {
    at: SimTime,
    host: usize,
    epoch: u32,
    ev: CmEvent,
    /// For DISCONNECTED: the TimeWait of the id's QP at that moment.
    timewait_ns: Option<u64>,
}

/// A posted WR and its completions.
#[derive(Debug)]
struct Posted {
    host: usize,
    epoch: u32,
    qpn: u32,
    queue: Queue,
    /// Posted while the QP was in ERR.
    in_err: bool,
    done: Vec<Done>,
}

#[derive(Debug, Clone, Copy)]
struct Done {
    status: WcStatus,
    /// The QP had been seen in ERR before this completion was polled.
    after_err: bool,
    /// Global poll order.
    seq: u64,
}

/// A CM MAD sent or received by a host's NIC (from its capture).
#[derive(Debug)]
struct Mad {
    at: SimTime,
    host: usize,
    epoch: u32,
    tx: bool,
    msg: CmMessage,
    attr: u16,
}

/// The simulation, the application's view of it, and the history the oracle checks.
struct World {
    sim: Simulation<Host>,
    cfgs: Vec<CmConfig>,
    nodes: Vec<Node>,
    events: Vec<Seen>,
    posted: BTreeMap<u64, Posted>,
    next_wr: u64,
    /// (host, epoch, QPN) → (QP, seen in ERR).
    qps: BTreeMap<(usize, u32, u32), (Qp, bool)>,
    wire: Vec<Mad>,
    /// Every datagram each host sent, in send order: (host, time, CM attribute or 0).
    tx_log: Vec<(usize, SimTime, u16)>,
    polls: u64,
    /// Completions that match no posted WR.
    strays: Vec<String>,
}

fn new_host(h: usize, cfg: CmConfig) -> Host {
    let dev = SimDevice::new(SimDeviceConfig::new(format!("sim{h}"), Gid::from_ip(ip(h))));
    Host::new(SimNic::at_gid(dev), cfg).unwrap()
}

impl World {
    /// `n` hosts with [`cfg`] on a perfect fabric.
    fn new(n: usize) -> World {
        World::with_cfgs((0..n).map(cfg).collect())
    }

    fn with_cfgs(cfgs: Vec<CmConfig>) -> World {
        let mut sim = Simulation::new(SimFabric::with_seed(
            1,
            FaultPlan::new(PathFaults::perfect()),
        ));
        let mut nodes = Vec::new();
        for (h, c) in cfgs.iter().enumerate() {
            let i = sim.add_endpoint(new_host(h, *c)).unwrap();
            nodes.push(Node::create(sim.endpoint_mut(i).unwrap(), 0));
        }
        World {
            sim,
            cfgs,
            nodes,
            events: Vec::new(),
            posted: BTreeMap::new(),
            next_wr: 1,
            qps: BTreeMap::new(),
            wire: Vec::new(),
            tx_log: Vec::new(),
            polls: 0,
            strays: Vec::new(),
        }
    }

    fn now(&self) -> SimTime {
        self.sim.now()
    }

    fn host(&mut self, h: usize) -> &mut Host {
        self.sim.endpoint_mut(h).unwrap()
    }

    // ---- observation: what the application sees after every simulation event ----

    /// Lets what the hosts queued leave now, then reads the NICs' captures (CM MADs), every
    /// host's CM events (acked at once) and CQs.
    fn observe(&mut self) {
        self.sim.next_event_time();
        let now = self.now();
        for h in 0..self.nodes.len() {
            let (epoch, ch) = (self.nodes[h].epoch, self.nodes[h].ch);
            let (send_cq, recv_cq) = (self.nodes[h].send_cq, self.nodes[h].recv_cq);
            let host = self.sim.endpoint_mut(h).unwrap();
            for c in host.nic_mut().take_capture() {
                let tx = c.flow.src.ip() == ip(h);
                let p = decode_bytes(&c.bytes, &c.flow, false).expect("RoCEv2 decodes");
                let mad = (p.bth.dest_qp == GSI_QPN)
                    .then(|| wire::decode(&p.payload).expect("CM MAD decodes"));
                let attr = mad.as_ref().map_or(0, |(hdr, _)| hdr.attribute_id);
                if tx {
                    self.tx_log.push((h, c.at, attr));
                }
                if let Some((_, msg)) = mad {
                    self.wire.push(Mad {
                        at: c.at,
                        host: h,
                        epoch,
                        tx,
                        msg,
                        attr,
                    });
                }
            }
            let (cm, dev) = host.split();
            while let Ok(ev) = cm.get_cm_event(ch) {
                cm.ack_cm_event(ev.clone()).unwrap();
                let timewait_ns = (ev.event == E::Disconnected)
                    .then(|| cm.qp(ev.id))
                    .flatten()
                    .and_then(|qp| dev.query_qp(qp.handle).ok())
                    .map(|(attr, _)| timewait_ns(attr.timeout));
                self.events.push(Seen {
                    at: now,
                    host: h,
                    epoch,
                    ev,
                    timewait_ns,
                });
            }
            let mut wcs = Vec::new();
            for (cq, queue) in [(send_cq, Queue::Send), (recv_cq, Queue::Recv)] {
                let mut got = Vec::new();
                while dev.poll_cq(cq, 64, &mut got).unwrap() > 0 {}
                wcs.extend(got.into_iter().map(|wc| (queue, wc)));
            }
            for (queue, wc) in wcs {
                let after_err = self.qps.get(&(h, epoch, wc.qp_num)).is_some_and(|q| q.1);
                self.polls += 1;
                let done = Done {
                    status: wc.status,
                    after_err,
                    seq: self.polls,
                };
                match self.posted.get_mut(&wc.wr_id) {
                    Some(p)
                        if (p.host, p.epoch, p.qpn, p.queue) == (h, epoch, wc.qp_num, queue) =>
                    {
                        p.done.push(done)
                    }
                    _ => self.strays.push(format!(
                        "host {h}: {queue:?} completion of no posted WR: {wc:?}"
                    )),
                }
            }
        }
        self.refresh_qp_states();
    }

    /// Notes which QPs are in ERR now (their later completions must be flushes, S4).
    fn refresh_qp_states(&mut self) {
        for (&(h, epoch, _), (qp, err)) in self.qps.iter_mut() {
            if epoch != self.nodes[h].epoch {
                continue;
            }
            let dev = self.sim.endpoint(h).unwrap().nic();
            if let Ok((attr, _)) = dev.query_qp(qp.handle) {
                *err |= attr.qp_state == QpState::Err;
            }
        }
    }

    fn track(&mut self, h: usize, qp: Qp) {
        let epoch = self.nodes[h].epoch;
        self.qps.insert((h, epoch, qp.qp_num), (qp, false));
        self.refresh_qp_states();
    }

    /// Runs every simulation event up to `deadline`, observing after each.
    fn run_until(&mut self, deadline: SimTime) {
        self.observe();
        while let Some(t) = self.sim.next_event_time().filter(|&t| t <= deadline) {
            self.sim.run_until(t);
            self.observe();
        }
        self.sim.run_until(deadline);
        self.observe();
    }

    fn run_for(&mut self, ns: u64) {
        let t = self.now().plus_nanos(ns);
        self.run_until(t);
    }

    /// Runs until nothing is left (no datagram in flight, no timer armed).
    fn run_idle(&mut self) {
        let limit = self.now().plus_nanos(QUIESCE_NS);
        self.observe();
        while let Some(t) = self.sim.next_event_time() {
            assert!(t <= limit, "not quiescent by {limit}:\n{}", self.history());
            self.sim.run_until(t);
            self.observe();
        }
    }

    /// Runs until host `h` (current life) has read an event matching `pred`; returns the first.
    fn wait_for(&mut self, h: usize, what: &str, pred: impl Fn(&CmEvent) -> bool) -> CmEvent {
        let limit = self.now().plus_nanos(QUIESCE_NS);
        self.observe();
        loop {
            let epoch = self.nodes[h].epoch;
            let found = self
                .events
                .iter()
                .find(|s| s.host == h && s.epoch == epoch && pred(&s.ev));
            if let Some(s) = found {
                return s.ev.clone();
            }
            match self.sim.next_event_time() {
                Some(t) if t <= limit => {
                    self.sim.run_until(t);
                    self.observe();
                }
                _ => panic!("host {h}: no {what}\n{}", self.history()),
            }
        }
    }

    /// Runs until `e`'s id has an event of type `kind`; returns it.
    fn wait_event(&mut self, e: End, kind: E) -> CmEvent {
        self.wait_id(e.host, e.id, kind)
    }

    /// Runs until id `id` of host `h` has an event of type `kind`; returns it.
    fn wait_id(&mut self, h: usize, id: CmIdHandle, kind: E) -> CmEvent {
        self.wait_for(h, &format!("{kind:?} on {id:?}"), |ev| {
            ev.id == id && ev.event == kind
        })
    }

    /// Events and MADs so far, for failure messages.
    fn history(&self) -> String {
        let mut s = String::new();
        for e in &self.events {
            let ev = &e.ev;
            s += &format!(
                "{} host {}.{} {:?} {:?} status {}\n",
                e.at, e.host, e.epoch, ev.id, ev.event, ev.status
            );
        }
        for m in self.wire.iter().filter(|m| m.tx) {
            s += &format!("{} host {}.{} sent {:?}\n", m.at, m.host, m.epoch, m.msg);
        }
        s
    }

    // ---- the application's calls ----

    /// Runs `f` on host `h`'s CM and device at the current time, observing before and after
    /// (QP states first, so that the flushes the call caused are checked as flushes); what the
    /// call queued leaves at once.
    fn call<R>(
        &mut self,
        h: usize,
        f: impl FnOnce(&mut RdmaCm, &mut SimDevice, SimTime) -> R,
    ) -> R {
        self.observe();
        let now = self.now();
        let (cm, dev) = self.host(h).split();
        let r = f(cm, dev, now);
        self.refresh_qp_states();
        self.observe();
        r
    }

    fn qp_init(&self, h: usize) -> QpInitAttr {
        let n = &self.nodes[h];
        QpInitAttr::rc(n.send_cq, n.recv_cq, QpCap::uniform(16, 1, 0), true)
    }

    /// Host `h` listens on PORT.
    fn listen(&mut self, h: usize) -> CmIdHandle {
        let ch = self.nodes[h].ch;
        self.call(h, |cm, _, _| {
            let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
            cm.bind_addr(id, SocketAddr::new(ip(h), PORT)).unwrap();
            cm.listen(id, 8).unwrap();
            id
        })
    }

    /// Host `h`: rdma_create_id, rdma_resolve_addr/route to `to`:PORT, rdma_create_qp (INIT).
    fn active_id(&mut self, h: usize, to: usize) -> End {
        let (ch, pd, init) = (self.nodes[h].ch, self.nodes[h].pd, self.qp_init(h));
        let e = self.call(h, |cm, dev, _| {
            let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
            cm.resolve_addr(id, None, SocketAddr::new(ip(to), PORT))
                .unwrap();
            cm.resolve_route(id).unwrap();
            let qp = cm.create_qp(dev, id, pd, &init).unwrap();
            End { host: h, id, qp }
        });
        self.track(h, e.qp);
        e
    }

    fn connect(&mut self, e: End) {
        self.call(e.host, |cm, dev, now| {
            cm.connect(dev, now, e.id, &conn_param())
        })
        .unwrap();
    }

    /// Runs until host `h` has a CONNECT_REQUEST; returns the new passive id.
    fn connect_request(&mut self, h: usize) -> CmIdHandle {
        self.wait_for(h, "CONNECT_REQUEST", |ev| ev.event == E::ConnectRequest)
            .id
    }

    /// Host `h` gives the passive id a QP (rdma_create_qp) and accepts.
    fn accept(&mut self, h: usize, id: CmIdHandle) -> End {
        let (pd, init) = (self.nodes[h].pd, self.qp_init(h));
        let qp = self.call(h, |cm, dev, now| {
            let qp = cm.create_qp(dev, id, pd, &init).unwrap();
            cm.accept(dev, now, id, &conn_param()).unwrap();
            qp
        });
        self.track(h, qp);
        End { host: h, id, qp }
    }

    /// `p` listens, `a` connects, `p` accepts: both ESTABLISHED with their QPs in RTS.
    fn establish(&mut self, a: usize, p: usize) -> Conn {
        self.listen(p);
        let ae = self.active_id(a, p);
        self.connect(ae);
        let pid = self.connect_request(p);
        let pe = self.accept(p, pid);
        let c = Conn { a: ae, p: pe };
        for e in [c.a, c.p] {
            assert_eq!(self.wait_event(e, E::Established).status, 0);
            assert_eq!(self.qp_state(e), QpState::Rts);
            assert_eq!(self.ib_state(e), Some(IbCmState::Established));
        }
        c
    }

    /// Like [`establish`](Self::establish), with the RTU cut by a one-way partition a → p from
    /// the accept until 1 ms later (the RTU is the only datagram `a` sends in that window): `a`
    /// is ESTABLISHED, `p` stays in REP_SENT.
    fn establish_without_rtu(&mut self, a: usize, p: usize) -> Conn {
        self.listen(p);
        let ae = self.active_id(a, p);
        self.connect(ae);
        let pid = self.connect_request(p);
        let t = self.now();
        let cut = Partition::one_way(ip(a), ip(p), t, Some(t.plus_nanos(MS)));
        self.sim.fabric.plan_mut().partitions.push(cut);
        let pe = self.accept(p, pid);
        self.wait_event(ae, E::Established);
        self.run_for(MS);
        assert_eq!(self.dropped(), [(a, RTU, DropReason::Partitioned)]);
        assert_eq!(self.ib_state(pe), Some(IbCmState::RepSent));
        assert!(!self.kinds(pe).contains(&E::Established));
        Conn { a: ae, p: pe }
    }

    /// Posts `n` WRs on `e`'s QP (receives of 64 bytes, or signaled SENDs of 32 bytes).
    fn post(&mut self, e: End, queue: Queue, n: usize) -> Vec<u64> {
        self.observe();
        let ids: Vec<u64> = (self.next_wr..self.next_wr + n as u64).collect();
        self.next_wr += n as u64;
        let mr = self.nodes[e.host].mr;
        let nic = self.host(e.host).nic_mut();
        match queue {
            Queue::Recv => {
                let wrs: Vec<RecvWr> = ids
                    .iter()
                    .map(|&id| RecvWr::new(id, vec![mr.sge(0, 64)]))
                    .collect();
                nic.post_recv(e.qp.handle, &wrs).unwrap();
            }
            Queue::Send => {
                let wrs: Vec<SendWr> = ids
                    .iter()
                    .map(|&id| SendWr::send(id, vec![mr.sge(0, 32)]))
                    .collect();
                nic.post_send(e.qp.handle, &wrs).unwrap();
            }
        }
        let epoch = self.nodes[e.host].epoch;
        let in_err = self.qps[&(e.host, epoch, e.qp.qp_num)].1;
        for &id in &ids {
            let p = Posted {
                host: e.host,
                epoch,
                qpn: e.qp.qp_num,
                queue,
                in_err,
                done: Vec::new(),
            };
            self.posted.insert(id, p);
        }
        self.refresh_qp_states();
        ids
    }

    fn post_recvs(&mut self, e: End, n: usize) -> Vec<u64> {
        self.post(e, Queue::Recv, n)
    }

    /// Each end posts 3 receives, then one SEND; both SENDs and the first receive of each end
    /// complete successfully. The other receives stay posted (for the disconnect to flush).
    fn traffic(&mut self, c: Conn) {
        let ra = self.post_recvs(c.a, 3);
        let rp = self.post_recvs(c.p, 3);
        let sa = self.post(c.a, Queue::Send, 1);
        let sp = self.post(c.p, Queue::Send, 1);
        self.run_for(MS);
        for wr in [sa[0], sp[0], ra[0], rp[0]] {
            assert_eq!(self.status(wr), Some(WcStatus::Success), "WR {wr}");
        }
        for wr in [&ra[1..], &rp[1..]].concat() {
            assert_eq!(self.status(wr), None, "WR {wr} still posted");
        }
    }

    fn disconnect(&mut self, e: End) -> Result<(), Error> {
        self.call(e.host, |cm, dev, now| cm.disconnect(dev, now, e.id))
    }

    fn destroy(&mut self, h: usize, id: CmIdHandle) {
        self.call(h, |cm, dev, now| cm.destroy_id(dev, now, id))
            .unwrap();
    }

    /// The application's verbs teardown of a QP the CM left alone: ibv_modify_qp(ERR), which
    /// flushes what is still posted.
    fn qp_to_err(&mut self, e: End) {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        self.call(e.host, |_, dev, _| {
            dev.modify_qp(e.qp.handle, &attr, QpAttrMask::STATE)
        })
        .unwrap();
    }

    /// The peer's part of a disconnect that `init` started: the peer reads DISCONNECTED(0) with
    /// its QP untouched (cm-spec §4.2), and answers with rdma_disconnect (DREP, QP → ERR).
    fn answer(&mut self, init: End, peer: End) {
        let ev = self.wait_event(peer, E::Disconnected);
        assert_eq!(ev.status, 0);
        assert_eq!(
            self.qp_state(peer),
            QpState::Rts,
            "DREQ does not touch the QP"
        );
        assert!(
            self.disconnected(init).is_empty(),
            "initiator waits for the DREP"
        );
        assert_eq!(self.disconnect(peer), Ok(()));
        assert_eq!(self.qp_state(peer), QpState::Err);
    }

    /// Host `h` reboots with amnesia: a fresh host with the same address and CA GUID (so its
    /// first QP gets the same QPN), a new seed, new application objects.
    fn restart(&mut self, h: usize, seed: u64) {
        self.observe();
        let cfg = CmConfig {
            seed,
            ..self.cfgs[h]
        };
        *self.host(h) = new_host(h, cfg);
        let epoch = self.nodes[h].epoch + 1;
        self.nodes[h] = Node::create(self.host(h), epoch);
    }

    // ---- inspection ----

    fn qp_state(&self, e: End) -> QpState {
        let nic = self.sim.endpoint(e.host).unwrap().nic();
        nic.query_qp(e.qp.handle).unwrap().0.qp_state
    }

    fn ib_state(&self, e: End) -> Option<IbCmState> {
        self.ib_state_of(e.host, e.id)
    }

    fn ib_state_of(&self, h: usize, id: CmIdHandle) -> Option<IbCmState> {
        self.sim.endpoint(h).unwrap().cm().ib_cm_state(id)
    }

    /// The events `e`'s id got, in order.
    fn kinds(&self, e: End) -> Vec<E> {
        self.seen(e).map(|s| s.ev.event).collect()
    }

    fn seen(&self, e: End) -> impl Iterator<Item = &Seen> {
        let epoch = self.nodes[e.host].epoch;
        self.events
            .iter()
            .filter(move |s| s.host == e.host && s.epoch == epoch && s.ev.id == e.id)
    }

    /// The statuses of `e`'s DISCONNECTED events.
    fn disconnected(&self, e: End) -> Vec<i32> {
        self.statuses(e, E::Disconnected)
    }

    fn statuses(&self, e: End, kind: E) -> Vec<i32> {
        self.seen(e)
            .filter(|s| s.ev.event == kind)
            .map(|s| s.ev.status)
            .collect()
    }

    /// Exactly one DISCONNECTED on `e`'s id, with `status`.
    fn assert_one_disconnected(&self, e: End, status: i32) {
        assert_eq!(self.disconnected(e), [status], "{e:?}\n{}", self.history());
    }

    /// The only completion status of WR `wr`, if it completed.
    fn status(&self, wr: u64) -> Option<WcStatus> {
        self.posted[&wr].done.first().map(|d| d.status)
    }

    /// CM MADs with attribute `attr` host `h` sent (current life).
    fn sent(&self, h: usize, attr: u16) -> usize {
        self.sent_mads(h, attr).count()
    }

    fn sent_mads(&self, h: usize, attr: u16) -> impl Iterator<Item = &Mad> {
        let epoch = self.nodes[h].epoch;
        self.wire
            .iter()
            .filter(move |m| m.tx && m.host == h && m.epoch == epoch && m.attr == attr)
    }

    /// Every CM MAD host `h` sent (current life), as attribute IDs.
    fn sent_attrs(&self, h: usize) -> Vec<u16> {
        let epoch = self.nodes[h].epoch;
        self.wire
            .iter()
            .filter(|m| m.tx && m.host == h && m.epoch == epoch)
            .map(|m| m.attr)
            .collect()
    }

    /// The reasons of the REJs host `h` sent.
    fn rej_reasons(&self, h: usize) -> Vec<u16> {
        self.sent_mads(h, REJ)
            .filter_map(|m| match &m.msg {
                CmMessage::Rej(r) => Some(r.reason),
                _ => None,
            })
            .collect()
    }

    /// The datagrams the fabric dropped: (sending host, CM attribute or 0 for RC traffic, why).
    /// A dropped packet is identified by its rank among the datagrams its host sent at that
    /// instant (the fabric numbers packets in send order; its payload digest cannot tell
    /// datagrams apart: `fabric_trace_digest_tells_different_payloads_apart`).
    fn dropped(&self) -> Vec<(usize, u16, DropReason)> {
        let host_of = |a: SocketAddr| (0..self.nodes.len()).find(|&h| ip(h) == a.ip()).unwrap();
        let sent: Vec<(u64, usize, SimTime)> = self
            .sim
            .fabric
            .trace()
            .iter()
            .filter(|ev| matches!(ev.kind, FabricEventKind::Sent { .. }))
            .map(|ev| (ev.packet, host_of(ev.src), ev.at))
            .collect();
        self.sim
            .fabric
            .trace()
            .iter()
            .filter_map(|ev| match ev.kind {
                FabricEventKind::Dropped(reason) => Some((ev.packet, reason)),
                _ => None,
            })
            .map(|(packet, reason)| {
                let &(_, h, at) = sent.iter().find(|s| s.0 == packet).unwrap();
                let rank = sent
                    .iter()
                    .filter(|s| s.1 == h && s.2 == at && s.0 < packet)
                    .count();
                let attr = self
                    .tx_log
                    .iter()
                    .filter(|t| t.0 == h && t.1 == at)
                    .nth(rank)
                    .map(|t| t.2)
                    .unwrap();
                (h, attr, reason)
            })
            .collect()
    }

    // ---- the oracle ----

    /// Runs to quiescence, then checks S1–S4 (module docs) over the whole history.
    fn check(&mut self) {
        self.run_idle();
        assert!(self.strays.is_empty(), "{:?}", self.strays);
        self.check_events();
        self.check_wrs();
    }

    /// S1, per CM id.
    fn check_events(&self) {
        let mut by_id: BTreeMap<(usize, u32, CmIdHandle), Vec<&Seen>> = BTreeMap::new();
        for s in &self.events {
            by_id.entry((s.host, s.epoch, s.ev.id)).or_default().push(s);
        }
        for (key, evs) in by_id {
            let kinds: Vec<E> = evs.iter().map(|s| s.ev.event).collect();
            let ctx = format!("S1 host {}.{} {:?}: {kinds:?}", key.0, key.1, key.2);
            let pos = |k: E| kinds.iter().position(|&x| x == k);
            let count = |k: E| kinds.iter().filter(|&&x| x == k).count();
            assert!(count(E::Disconnected) <= 1, "{ctx}: two DISCONNECTED");
            assert!(count(E::TimewaitExit) <= 1, "{ctx}: two TIMEWAIT_EXIT");
            if let Some(d) = pos(E::Disconnected) {
                assert!(
                    !kinds[d..].contains(&E::Established),
                    "{ctx}: ESTABLISHED after DISCONNECTED"
                );
            }
            if let Some(x) = pos(E::TimewaitExit) {
                let d = pos(E::Disconnected)
                    .filter(|&d| d < x)
                    .unwrap_or_else(|| panic!("{ctx}: TIMEWAIT_EXIT without DISCONNECTED"));
                let tw = evs[d].timewait_ns.expect("DISCONNECTED id has a QP");
                assert!(
                    evs[x].at >= evs[d].at.plus_nanos(tw),
                    "{ctx}: TIMEWAIT_EXIT at {} < DISCONNECTED at {} + TimeWait {tw} ns",
                    evs[x].at,
                    evs[d].at
                );
            }
        }
    }

    /// S2–S4, per WR and per queue.
    fn check_wrs(&self) {
        let now = self.now();
        let mut queues: BTreeMap<QueueKey, Vec<(u64, Done)>> = BTreeMap::new();
        for (&wr, p) in &self.posted {
            let ctx = format!(
                "WR {wr} ({:?} on host {}.{} QPN {:#x})",
                p.queue, p.host, p.epoch, p.qpn
            );
            assert!(p.done.len() <= 1, "S2 {ctx}: completed {:?}", p.done);
            let alive = p.epoch == self.nodes[p.host].epoch
                && !self.sim.fabric.plan().is_down(ip(p.host), now);
            if alive {
                assert_eq!(p.done.len(), 1, "S2 {ctx}: never completed");
            }
            if let Some(&d) = p.done.first() {
                if p.in_err || d.after_err {
                    assert_eq!(d.status, WcStatus::WrFlushErr, "S4 {ctx}: QP in ERR");
                }
                queues
                    .entry((p.host, p.epoch, p.qpn, p.queue))
                    .or_default()
                    .push((wr, d));
            }
        }
        for (q, mut done) in queues {
            done.sort_by_key(|(_, d)| d.seq);
            let order: Vec<u64> = done.iter().map(|(wr, _)| *wr).collect();
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "S3 {q:?}: completions out of post order: {order:?}"
            );
            if let Some(f) = done
                .iter()
                .position(|(_, d)| d.status == WcStatus::WrFlushErr)
            {
                assert!(
                    done[f..].iter().all(|(_, d)| d.status != WcStatus::Success),
                    "S4 {q:?}: SUCCESS after a flush: {done:?}"
                );
            }
        }
    }
}

/// A test world with one established connection 0 → 1 that carried traffic.
fn established() -> (World, Conn) {
    let mut w = World::new(2);
    let c = w.establish(0, 1);
    w.traffic(c);
    (w, c)
}

/// The orderly end of a connection both of whose ends are done: the initiator's DISCONNECTED
/// and the responder's both status 0, one DREQ and one DREP on the wire, TIMEWAIT_EXIT on both.
fn assert_orderly(w: &World, init: End, resp: End) {
    w.assert_one_disconnected(init, 0);
    w.assert_one_disconnected(resp, 0);
    assert_eq!(w.sent(init.host, DREQ), 1);
    assert_eq!(w.sent(resp.host, DREP), 1);
    for e in [init, resp] {
        assert_eq!(w.statuses(e, E::TimewaitExit), [0], "{e:?}");
        assert_eq!(w.kinds(e).last(), Some(&E::TimewaitExit));
    }
}

// ---- handshake ----

#[test]
fn handshake_establishes_both_qps_in_rts_with_crossed_qpns_and_psns_and_carries_sends() {
    let (mut w, c) = established();
    let nic = |h: usize| w.sim.endpoint(h).unwrap().nic();
    let qa = nic(0).query_qp(c.a.qp.handle).unwrap().0;
    let qp = nic(1).query_qp(c.p.qp.handle).unwrap().0;
    assert_eq!(
        (qa.dest_qp_num, qp.dest_qp_num),
        (c.p.qp.qp_num, c.a.qp.qp_num)
    );
    assert_eq!((qa.sq_psn, qp.sq_psn), (qp.rq_psn, qa.rq_psn));
    assert_eq!(
        (qa.timeout, qp.timeout),
        (17, 17),
        "av.timeout, TimeWait 512 ms"
    );
    assert_eq!(
        w.kinds(c.a),
        [E::AddrResolved, E::RouteResolved, E::Established]
    );
    assert_eq!(w.kinds(c.p), [E::ConnectRequest, E::Established]);
    assert_eq!(w.sent_attrs(0), [REQ, RTU]);
    assert_eq!(w.sent_attrs(1), [REP]);
    w.disconnect(c.a).unwrap();
    w.answer(c.a, c.p);
    w.check();
    assert_orderly(&w, c.a, c.p);
}

// ---- cm-spec §4.4, one row each ----

#[test]
fn disconnect_row_first_call_established_active_sends_dreq_returns_0() {
    let (mut w, c) = established();
    assert_eq!(w.disconnect(c.a), Ok(()));
    assert_eq!(w.qp_state(c.a), QpState::Err);
    assert_eq!(w.ib_state(c.a), Some(IbCmState::DreqSent));
    assert_eq!(w.sent(0, DREQ), 1, "the DREQ leaves in the same instant");
    w.answer(c.a, c.p);
    w.check();
    assert_orderly(&w, c.a, c.p);
}

#[test]
fn disconnect_row_first_call_established_passive_sends_dreq_returns_0() {
    let (mut w, c) = established();
    assert_eq!(w.disconnect(c.p), Ok(()));
    assert_eq!(w.qp_state(c.p), QpState::Err);
    assert_eq!(w.ib_state(c.p), Some(IbCmState::DreqSent));
    assert_eq!(w.sent(1, DREQ), 1);
    w.answer(c.p, c.a);
    w.check();
    assert_orderly(&w, c.p, c.a);
}

#[test]
fn disconnect_row_after_disconnected_from_peer_dreq_sends_drep_returns_0() {
    let (mut w, c) = established();
    w.disconnect(c.a).unwrap();
    w.wait_event(c.p, E::Disconnected);
    assert_eq!(w.ib_state(c.p), Some(IbCmState::DreqRcvd));
    assert_eq!(w.sent(1, DREP), 0);
    assert_eq!(w.disconnect(c.p), Ok(()));
    assert_eq!(w.ib_state(c.p), Some(IbCmState::Timewait));
    assert_eq!(w.qp_state(c.p), QpState::Err);
    assert_eq!(w.sent(1, DREP), 1);
    assert_eq!(w.wait_event(c.a, E::Disconnected).status, 0);
    w.check();
    assert_orderly(&w, c.a, c.p);
}

#[test]
fn disconnect_row_second_call_while_own_dreq_outstanding_returns_0_sends_nothing() {
    let (mut w, c) = established();
    w.disconnect(c.a).unwrap();
    let more = w.post_recvs(c.a, 2); // posted in ERR: flushed
    assert_eq!(w.disconnect(c.a), Ok(()));
    assert_eq!(w.ib_state(c.a), Some(IbCmState::DreqSent));
    assert_eq!(w.qp_state(c.a), QpState::Err);
    assert_eq!(w.sent(0, DREQ), 1);
    w.answer(c.a, c.p);
    w.check();
    assert_orderly(&w, c.a, c.p);
    for wr in more {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn disconnect_row_after_disconnected_in_timewait_returns_0_sends_nothing() {
    let (mut w, c) = established();
    w.disconnect(c.a).unwrap();
    w.answer(c.a, c.p);
    w.wait_event(c.a, E::Disconnected);
    let before = w.wire.len();
    for e in [c.a, c.p] {
        assert_eq!(w.ib_state(e), Some(IbCmState::Timewait));
        assert_eq!(w.disconnect(e), Ok(()));
    }
    w.run_idle();
    // ... and again after TIMEWAIT_EXIT (IB CM id IDLE)
    for e in [c.a, c.p] {
        assert_eq!(w.kinds(e).last(), Some(&E::TimewaitExit));
        assert_eq!(w.disconnect(e), Ok(()));
    }
    w.check();
    assert_eq!(w.wire.len(), before, "nothing sent");
    assert_orderly(&w, c.a, c.p);
}

#[test]
fn disconnect_row_never_connected_id_is_einval_after_moving_its_qp_to_err() {
    let (mut w, c) = established();
    let idle = w.active_id(0, 1);
    let wrs = w.post_recvs(idle, 2);
    let before = w.wire.len();
    assert_eq!(w.disconnect(idle).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(w.qp_state(idle), QpState::Err);
    w.run_for(MS);
    assert_eq!(w.wire.len(), before, "nothing sent");
    assert_eq!(w.kinds(idle), [E::AddrResolved, E::RouteResolved]);
    for wr in wrs {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
    // The live connection is not disturbed.
    assert_eq!(w.qp_state(c.a), QpState::Rts);
    w.disconnect(c.a).unwrap();
    w.answer(c.a, c.p);
    w.check();
    assert_orderly(&w, c.a, c.p);
}

#[test]
fn disconnect_row_unbound_id_is_einval_and_sends_nothing() {
    let (mut w, c) = established();
    let ch = w.nodes[0].ch;
    let unbound = w.call(0, |cm, _, _| cm.create_id(ch, RdmaPortSpace::Tcp).unwrap());
    let before = w.wire.len();
    let r = w.call(0, |cm, dev, now| cm.disconnect(dev, now, unbound));
    assert_eq!(r.unwrap_err().errno, Errno::EINVAL);
    w.run_for(MS);
    assert_eq!(w.wire.len(), before, "nothing sent");
    assert_eq!(w.qp_state(c.a), QpState::Rts);
    w.disconnect(c.a).unwrap();
    w.answer(c.a, c.p);
    w.check();
    assert_orderly(&w, c.a, c.p);
}

#[test]
fn disconnect_row_while_connecting_returns_0_moves_qp_to_err_sends_no_dreq_or_drep() {
    let mut w = World::new(2);
    w.listen(1);
    let a = w.active_id(0, 1);
    let ra = w.post_recvs(a, 3);
    w.connect(a);
    assert_eq!(w.disconnect(a), Ok(()));
    assert_eq!(w.ib_state(a), Some(IbCmState::ReqSent));
    assert_eq!(w.qp_state(a), QpState::Err);
    // The REQ is answered: the REP cannot move the active QP (ERR) to RTR, so the active side
    // reports CONNECT_ERROR and rejects with 28; the passive side gets REJECTED(28).
    let pid = w.connect_request(1);
    let p = w.accept(1, pid);
    let rp = w.post_recvs(p, 3);
    w.check();
    assert_eq!(w.statuses(a, E::ConnectError), [-(Errno::EINVAL as i32)]);
    assert_eq!(w.statuses(p, E::Rejected), [28]);
    assert_eq!(w.rej_reasons(0), [28]);
    assert_eq!(w.qp_state(p), QpState::Err);
    for e in [a, p] {
        assert!(w.disconnected(e).is_empty(), "{e:?}");
        assert!(!w.kinds(e).contains(&E::Established));
        assert_eq!(w.sent(e.host, DREQ) + w.sent(e.host, DREP), 0);
    }
    for wr in [ra, rp].concat() {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn disconnect_row_qp_in_reset_is_einval_and_sends_nothing() {
    let (mut w, c) = established();
    let (pd, init) = (w.nodes[0].pd, w.qp_init(0));
    // Swap in a QP that never left RESET (ibv_create_qp + attach).
    let fresh = w.call(0, |cm, dev, _| {
        let fresh = dev.create_qp(pd, &init).unwrap();
        assert_eq!(cm.detach_qp(c.a.id).unwrap(), Some(c.a.qp));
        cm.attach_qp(c.a.id, fresh).unwrap();
        fresh
    });
    let reset = End { qp: fresh, ..c.a };
    assert_eq!(w.qp_state(reset), QpState::Reset);
    assert_eq!(w.disconnect(reset).unwrap_err().errno, Errno::EINVAL);
    w.run_for(MS);
    assert_eq!(w.sent(0, DREQ), 0);
    assert_eq!(w.ib_state(c.a), Some(IbCmState::Established));
    assert!(w.kinds(c.p).iter().all(|&k| k != E::Disconnected));
    // Put the real QP back: the same call now disconnects normally.
    w.call(0, |cm, dev, _| {
        cm.detach_qp(c.a.id).unwrap();
        dev.destroy_qp(fresh.handle).unwrap();
        cm.attach_qp(c.a.id, c.a.qp).unwrap();
    });
    assert_eq!(w.qp_state(c.a), QpState::Rts);
    w.disconnect(c.a).unwrap();
    w.answer(c.a, c.p);
    w.check();
    assert_orderly(&w, c.a, c.p);
}

// ---- disconnect sequences (cm-spec §4.5) ----

#[test]
fn normal_disconnect_flushes_caller_qp_only_responder_disconnected_on_dreq_initiator_on_drep() {
    let (mut w, c) = established();
    let extra_p = w.post_recvs(c.p, 2);
    // Two SENDs posted in the instant of the disconnect are flushed on the initiator at once,
    // although their packets were already queued to the wire: the responder (RTS) receives
    // them. A flush says nothing about delivery.
    let sends = w.post(c.a, Queue::Send, 2);
    w.disconnect(c.a).unwrap();
    for wr in sends {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
    let t_dreq = w.now();
    let ev = w.wait_event(c.p, E::Disconnected);
    assert_eq!(ev.status, 0);
    // Responder: QP untouched, its receives still posted until it calls disconnect.
    assert_eq!(w.qp_state(c.p), QpState::Rts);
    let pending_p: Vec<u64> = w
        .posted
        .iter()
        .filter(|(_, p)| p.host == 1 && p.done.is_empty())
        .map(|(&wr, _)| wr)
        .collect();
    assert_eq!(
        pending_p, extra_p,
        "the in-flight SENDs consumed two receives"
    );
    w.run_for(10 * MS);
    assert!(w.disconnected(c.a).is_empty(), "no DREP yet");
    assert_eq!(w.sent(0, DREQ), 1, "no DREQ retransmission within 10 ms");
    w.disconnect(c.p).unwrap();
    let t_drep = w.now();
    w.check();
    for wr in pending_p {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
    assert_orderly(&w, c.a, c.p);
    let at = |e: End, k: E| w.seen(e).find(|s| s.ev.event == k).unwrap().at;
    assert!(at(c.p, E::Disconnected) < t_dreq.plus_nanos(MS));
    assert!(at(c.a, E::Disconnected) >= t_drep);
    for e in [c.a, c.p] {
        let d = at(e, E::Disconnected);
        assert!(at(e, E::TimewaitExit) >= d.plus_nanos(512 * MS));
    }
}

#[test]
fn simultaneous_disconnect_each_side_gets_one_disconnected_and_timewait_after_second_call() {
    let (mut w, c) = established();
    // Both call at the same virtual instant: DREQs cross.
    assert_eq!(w.disconnect(c.a), Ok(()));
    assert_eq!(w.disconnect(c.p), Ok(()));
    w.run_for(MS);
    for e in [c.a, c.p] {
        w.assert_one_disconnected(e, 0);
        assert_eq!(
            w.ib_state(e),
            Some(IbCmState::DreqRcvd),
            "own DREQ cancelled"
        );
        assert_eq!(w.qp_state(e), QpState::Err);
    }
    // No DREP and no TIMEWAIT_EXIT until each side calls again (cm-spec §4.5).
    w.run_for(60_000 * MS);
    assert_eq!(w.sent(0, DREP) + w.sent(1, DREP), 0);
    assert_eq!(
        (w.sent(0, DREQ), w.sent(1, DREQ)),
        (1, 1),
        "cancelled: no retries"
    );
    for e in [c.a, c.p] {
        assert_eq!(w.kinds(e).last(), Some(&E::Disconnected));
    }
    assert_eq!(w.disconnect(c.a), Ok(()));
    assert_eq!(w.disconnect(c.p), Ok(()));
    w.check();
    for e in [c.a, c.p] {
        w.assert_one_disconnected(e, 0);
        assert_eq!(w.sent(e.host, DREP), 1);
        assert_eq!(w.statuses(e, E::TimewaitExit), [0]);
    }
}

// ---- unanswered disconnect: DISCONNECTED(-110) after the retry budget ----

/// The initiator disconnects at `t0` and nothing answers: 16 DREQs 4608 ms apart, then
/// DISCONNECTED(-110) exactly 16 × 4608 ms after `t0` (cm-spec §3.2, §4.2), then TimeWait.
fn assert_dreq_timeout(w: &mut World, init: End, t0: SimTime) {
    let ev = w.wait_event(init, E::Disconnected);
    assert_eq!(ev.status, -110);
    let at = w
        .seen(init)
        .find(|s| s.ev.event == E::Disconnected)
        .unwrap()
        .at;
    assert_eq!(at, t0.plus_nanos(DREQ_SENDS * DREQ_TIMEOUT_NS));
    let times: Vec<SimTime> = w.sent_mads(init.host, DREQ).map(|m| m.at).collect();
    let want: Vec<SimTime> = (0..DREQ_SENDS)
        .map(|i| t0.plus_nanos(i * DREQ_TIMEOUT_NS))
        .collect();
    assert_eq!(times, want, "DREQ send times");
    assert_eq!(w.ib_state(init), Some(IbCmState::Timewait));
}

#[test]
fn unanswered_disconnect_peer_crashed_gives_disconnected_minus_110_after_retry_budget() {
    let (mut w, c) = established();
    let t0 = w.now();
    let crash = Crash {
        host: ip(1),
        at: t0,
        restart: None,
    };
    w.sim.fabric.plan_mut().crashes.push(crash);
    w.disconnect(c.a).unwrap();
    assert_dreq_timeout(&mut w, c.a, t0);
    w.check();
    w.assert_one_disconnected(c.a, -110);
    assert_eq!(w.statuses(c.a, E::TimewaitExit), [0]);
    let drops = w.dropped();
    assert_eq!(drops.len(), 16);
    assert!(drops
        .iter()
        .all(|&d| d == (0, DREQ, DropReason::DestinationCrashed)));
}

#[test]
fn unanswered_disconnect_peer_partitioned_gives_minus_110_then_peer_dreq_answered_from_timewait() {
    let (mut w, c) = established();
    let t0 = w.now();
    let cut = Partition::symmetric(ip(0), ip(1), t0, None);
    w.sim.fabric.plan_mut().partitions.push(cut);
    w.disconnect(c.a).unwrap();
    assert_dreq_timeout(&mut w, c.a, t0);
    assert!(w.kinds(c.p).iter().all(|&k| k != E::Disconnected));
    assert_eq!(w.ib_state(c.p), Some(IbCmState::Established));
    // Heal; the peer (which heard nothing) disconnects while the initiator is in TimeWait:
    // its DREQ is answered with a DREP from TIMEWAIT (cm-spec §3.3).
    let healed = w.now();
    w.sim.fabric.plan_mut().partitions[0].heal = Some(healed);
    assert_eq!(w.disconnect(c.p), Ok(()));
    assert_eq!(w.wait_event(c.p, E::Disconnected).status, 0);
    w.check();
    w.assert_one_disconnected(c.a, -110);
    w.assert_one_disconnected(c.p, 0);
    assert_eq!(w.sent(0, DREP), 1);
    for e in [c.a, c.p] {
        assert_eq!(w.statuses(e, E::TimewaitExit), [0]);
    }
}

#[test]
fn unanswered_disconnect_peer_alive_but_never_disconnecting_gives_minus_110_peer_one_disconnected()
{
    let (mut w, c) = established();
    let t0 = w.now();
    w.disconnect(c.a).unwrap();
    assert_dreq_timeout(&mut w, c.a, t0);
    w.run_idle();
    w.assert_one_disconnected(c.p, 0);
    assert_eq!(w.ib_state(c.p), Some(IbCmState::DreqRcvd));
    assert_eq!(
        w.qp_state(c.p),
        QpState::Rts,
        "the lazy peer's QP is untouched"
    );
    let dups = w
        .sim
        .endpoint(1)
        .unwrap()
        .cm()
        .engine()
        .counters()
        .rx_duplicates;
    assert_eq!(
        dups, 15,
        "the 15 DREQ retransmissions are dropped in DREQ_RCVD"
    );
    assert_eq!(w.sent(1, DREP), 0);
    assert!(!w.kinds(c.p).contains(&E::TimewaitExit));
    // The lazy application finally tears its verbs down (no CM call): the flush is checked.
    w.qp_to_err(c.p);
    w.check();
    w.assert_one_disconnected(c.a, -110);
    assert_eq!(w.statuses(c.a, E::TimewaitExit), [0]);
}

// ---- setup races ----

#[test]
fn disconnect_during_connection_setup_passive_rep_sent_returns_0_then_established_and_torn_down() {
    let mut w = World::new(2);
    w.listen(1);
    let a = w.active_id(0, 1);
    let ra = w.post_recvs(a, 2);
    w.connect(a);
    let pid = w.connect_request(1);
    let p = w.accept(1, pid);
    let rp = w.post_recvs(p, 2);
    // The passive side gives up right after accepting (REP_SENT): QP → ERR, nothing sent.
    assert_eq!(w.ib_state(p), Some(IbCmState::RepSent));
    assert_eq!(w.disconnect(p), Ok(()));
    assert_eq!(w.qp_state(p), QpState::Err);
    // The REP already left: the active side completes the handshake, the RTU makes the
    // passive IB CM ESTABLISHED (its QP stays in ERR).
    assert_eq!(w.wait_event(a, E::Established).status, 0);
    assert_eq!(w.wait_event(p, E::Established).status, 0);
    assert_eq!(w.qp_state(p), QpState::Err);
    assert_eq!(w.sent(1, DREQ) + w.sent(1, DREP), 0);
    // The passive side's disconnect now starts the ordinary teardown.
    assert_eq!(w.disconnect(p), Ok(()));
    w.answer(p, a);
    w.check();
    assert_orderly(&w, p, a);
    for wr in [ra, rp].concat() {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn dreq_before_rtu_gives_passive_disconnected_without_established() {
    let mut w = World::new(2);
    let c = w.establish_without_rtu(0, 1);
    let ra = w.post_recvs(c.a, 2);
    let rp = w.post_recvs(c.p, 2);
    w.disconnect(c.a).unwrap();
    w.answer(c.a, c.p);
    w.check();
    assert_orderly(&w, c.a, c.p);
    assert!(!w.kinds(c.p).contains(&E::Established));
    assert_eq!(
        w.kinds(c.p),
        [E::ConnectRequest, E::Disconnected, E::TimewaitExit]
    );
    assert_eq!(
        w.sent(1, REP),
        1,
        "the DREQ cancelled the REP retransmission"
    );
    for wr in [ra, rp].concat() {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

// ---- destroy in every state the CM distinguishes (cm-spec §3.3) ----

#[test]
fn destroy_idle_and_listen_ids_sends_nothing() {
    let mut w = World::new(2);
    let l = w.listen(1);
    let a = w.active_id(0, 1);
    let wrs = w.post_recvs(a, 2);
    w.destroy(1, l);
    w.destroy(0, a.id);
    assert_eq!(
        w.qp_state(a),
        QpState::Init,
        "destroy does not touch the QP"
    );
    w.qp_to_err(a);
    w.check();
    assert!(w.wire.is_empty());
    assert!(w.sim.endpoint(1).unwrap().cm().ids().is_empty());
    for wr in wrs {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

/// Host 1 listens, host 0 connects; runs until host 1 has the CONNECT_REQUEST (not accepted).
fn requested(w: &mut World) -> (End, CmIdHandle) {
    w.listen(1);
    let a = w.active_id(0, 1);
    w.post_recvs(a, 2);
    w.connect(a);
    let pid = w.connect_request(1);
    (a, pid)
}

/// The active id destroyed in `state` (REQ_SENT or MRA_REQ_RCVD) sends REJ 4 (TIMEOUT, ARI =
/// own CA GUID); the passive child gets REJECTED(4).
fn assert_destroy_active_rejects_4(w: &mut World, a: End, pid: CmIdHandle, state: IbCmState) {
    assert_eq!(w.ib_state(a), Some(state));
    w.destroy(0, a.id);
    w.qp_to_err(a);
    assert_eq!(w.wait_id(1, pid, E::Rejected).status, 4);
    w.destroy(1, pid);
    w.check();
    assert_eq!(w.rej_reasons(0), [4]);
    let rej = w.sent_mads(0, REJ).next().unwrap();
    let CmMessage::Rej(r) = &rej.msg else {
        unreachable!()
    };
    assert_eq!(r.ari, cfg(0).ca_guid.to_be_bytes());
    assert!(
        !w.kinds(a).contains(&E::Rejected),
        "a destroyed id gets no events"
    );
}

#[test]
fn destroy_req_sent_sends_rej_4_with_guid_and_passive_is_rejected() {
    let mut w = World::new(2);
    let (a, pid) = requested(&mut w);
    assert_destroy_active_rejects_4(&mut w, a, pid, IbCmState::ReqSent);
}

#[test]
fn destroy_mra_req_rcvd_sends_rej_4_and_passive_is_rejected() {
    let mut w = World::new(2);
    let (a, pid) = requested(&mut w);
    // The passive app sits on the request: the REQ retransmission (4608 ms) meets
    // MRA_REQ_SENT and is answered with an MRA.
    w.run_for(4700 * MS);
    assert_eq!(w.sent(0, REQ), 2);
    assert_eq!(w.sent(1, MRA), 1);
    assert_destroy_active_rejects_4(&mut w, a, pid, IbCmState::MraReqRcvd);
}

#[test]
fn destroy_passive_before_accept_mra_req_sent_sends_rej_28_active_rejected() {
    let mut w = World::new(2);
    let (a, pid) = requested(&mut w);
    assert_eq!(w.ib_state_of(1, pid), Some(IbCmState::MraReqSent));
    w.destroy(1, pid);
    assert_eq!(w.wait_event(a, E::Rejected).status, 28);
    assert_eq!(w.qp_state(a), QpState::Err, "REJ moves the QP to ERR");
    assert_eq!(w.ib_state(a), Some(IbCmState::Idle));
    w.check();
    assert_eq!(w.rej_reasons(1), [28]);
    assert!(w.disconnected(a).is_empty());
}

#[test]
fn destroy_rep_sent_sends_rej_28_established_active_gets_rejected_not_disconnected() {
    let mut w = World::new(2);
    let c = w.establish_without_rtu(0, 1);
    let ra = w.post_recvs(c.a, 2);
    let rp = w.post_recvs(c.p, 2);
    w.destroy(1, c.p.id);
    assert_eq!(
        w.qp_state(c.p),
        QpState::Rts,
        "destroy does not touch the QP"
    );
    w.qp_to_err(c.p);
    assert_eq!(w.wait_event(c.a, E::Rejected).status, 28);
    assert_eq!(w.qp_state(c.a), QpState::Err, "REJ moves the QP to ERR");
    assert_eq!(w.ib_state(c.a), Some(IbCmState::Timewait));
    w.check();
    assert_eq!(w.rej_reasons(1), [28]);
    assert_eq!(w.sent(1, REP), 1, "REP retransmission cancelled");
    // REJECTED while ESTABLISHED: the rdma_cm id stays in CONNECT, so no DISCONNECTED and no
    // TIMEWAIT_EXIT (cm-spec §4.5).
    assert_eq!(w.kinds(c.a).last(), Some(&E::Rejected));
    assert!(w.disconnected(c.a).is_empty());
    for wr in [ra, rp].concat() {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn destroy_established_sends_one_dreq_without_retries_peer_disconnected() {
    let (mut w, c) = established();
    w.destroy(0, c.a.id);
    assert_eq!(
        w.qp_state(c.a),
        QpState::Rts,
        "destroy does not touch the QP"
    );
    w.qp_to_err(c.a);
    w.answer(c.a, c.p);
    w.check();
    assert_eq!(w.sent(0, DREQ), 1, "one DREQ, no retransmission");
    w.assert_one_disconnected(c.p, 0);
    assert_eq!(w.sent(1, DREP), 1);
    assert_eq!(w.statuses(c.p, E::TimewaitExit), [0]);
    assert_eq!(
        w.kinds(c.a),
        [E::AddrResolved, E::RouteResolved, E::Established]
    );
}

#[test]
fn destroy_dreq_sent_sends_nothing_more_peer_disconnected() {
    let (mut w, c) = established();
    w.disconnect(c.a).unwrap();
    w.destroy(0, c.a.id);
    w.answer(c.a, c.p);
    w.check();
    assert_eq!(w.sent(0, DREQ), 1);
    assert_eq!(w.sent_attrs(0), [REQ, RTU, DREQ]);
    w.assert_one_disconnected(c.p, 0);
    assert!(w.disconnected(c.a).is_empty());
    assert_eq!(w.statuses(c.p, E::TimewaitExit), [0]);
}

#[test]
fn destroy_dreq_rcvd_answers_with_drep_initiator_gets_status_0() {
    let (mut w, c) = established();
    w.disconnect(c.a).unwrap();
    w.wait_event(c.p, E::Disconnected);
    assert_eq!(w.ib_state(c.p), Some(IbCmState::DreqRcvd));
    w.destroy(1, c.p.id);
    assert_eq!(
        w.qp_state(c.p),
        QpState::Rts,
        "destroy does not touch the QP"
    );
    w.qp_to_err(c.p);
    w.check();
    assert_eq!(w.sent(1, DREP), 1);
    w.assert_one_disconnected(c.a, 0);
    w.assert_one_disconnected(c.p, 0);
    assert_eq!(w.statuses(c.a, E::TimewaitExit), [0]);
    assert!(!w.kinds(c.p).contains(&E::TimewaitExit));
}

#[test]
fn destroy_timewait_sends_nothing_and_suppresses_timewait_exit() {
    let (mut w, c) = established();
    w.disconnect(c.a).unwrap();
    w.answer(c.a, c.p);
    assert_eq!(w.ib_state(c.p), Some(IbCmState::Timewait));
    let before = w.sent_attrs(1);
    w.destroy(1, c.p.id);
    w.check();
    assert_eq!(w.sent_attrs(1), before);
    w.assert_one_disconnected(c.a, 0);
    w.assert_one_disconnected(c.p, 0);
    assert_eq!(w.statuses(c.a, E::TimewaitExit), [0]);
    assert!(!w.kinds(c.p).contains(&E::TimewaitExit));
}

// ---- lost DREP ----

/// `init` disconnects; the peer answers, and its DREP is cut by a one-way partition peer → init
/// from the instant it is sent until 1 ms later.
fn disconnect_losing_the_drep(w: &mut World, init: End, peer: End) {
    w.disconnect(init).unwrap();
    w.wait_event(peer, E::Disconnected);
    let t = w.now();
    let cut = Partition::one_way(ip(peer.host), ip(init.host), t, Some(t.plus_nanos(MS)));
    w.sim.fabric.plan_mut().partitions.push(cut);
    w.answer(init, peer);
    w.run_for(MS);
    assert_eq!(w.dropped(), [(peer.host, DREP, DropReason::Partitioned)]);
}

#[test]
fn lost_drep_duplicate_dreq_is_answered_from_timewait_initiator_gets_status_0() {
    let mut w = World::with_cfgs(vec![fast_cfg(0), fast_cfg(1)]);
    let c = w.establish(0, 1);
    w.traffic(c);
    let t0 = w.now();
    disconnect_losing_the_drep(&mut w, c.a, c.p);
    // The DREQ retransmission (12 ms) lands in the peer's TimeWait (128 ms): DREP again.
    assert_eq!(w.wait_event(c.a, E::Disconnected).status, 0);
    assert_eq!(w.now(), t0.plus_nanos(12 * MS + 20_000));
    w.check();
    assert_eq!(w.sent(0, DREQ), 2);
    assert_eq!(w.sent(1, DREP), 2);
    w.assert_one_disconnected(c.a, 0);
    w.assert_one_disconnected(c.p, 0);
    for e in [c.a, c.p] {
        assert_eq!(w.statuses(e, E::TimewaitExit), [0]);
    }
}

#[test]
fn lost_drep_with_default_timers_dreq_retransmission_after_timewait_is_dropped_initiator_times_out()
{
    // Linux (docs/cm-semantics.md, "Finding"): the DREQ retransmission (4608 ms) comes after
    // the peer's TimeWait (512 ms); the peer's IDLE id still matches it and drops it.
    let (mut w, c) = established();
    let t0 = w.now();
    disconnect_losing_the_drep(&mut w, c.a, c.p);
    assert_dreq_timeout(&mut w, c.a, t0);
    w.check();
    w.assert_one_disconnected(c.a, -110);
    w.assert_one_disconnected(c.p, 0);
    assert_eq!(w.sent(1, DREP), 1);
    for e in [c.a, c.p] {
        assert_eq!(w.statuses(e, E::TimewaitExit), [0]);
    }
}

// ---- connection setup rejections ----

#[test]
fn stale_connection_req_reusing_a_live_qpn_after_restart_gets_rej_10_and_old_connection_dreq() {
    let (mut w, c) = established();
    // Host 0 crashes and comes back 1 ms later with amnesia: same CA GUID and first QPN, new
    // comm IDs. Host 1's connection is still ESTABLISHED.
    let t = w.now();
    let crash = Crash {
        host: ip(0),
        at: t,
        restart: Some(t.plus_nanos(MS)),
    };
    w.sim.fabric.plan_mut().crashes.push(crash);
    w.restart(0, 0x5eed);
    w.run_for(MS);
    let a2 = w.active_id(0, 1);
    assert_eq!(a2.qp.qp_num, c.a.qp.qp_num, "QPN reused");
    let ra2 = w.post_recvs(a2, 2);
    w.connect(a2);
    assert_eq!(w.wait_event(a2, E::Rejected).status, 10);
    assert_eq!(w.qp_state(a2), QpState::Err);
    // Host 1 rejected the REQ (10) and sent a DREQ on the old connection, which the rebooted
    // host answers as unknown: the old id gets DISCONNECTED(0); its app disconnects (QP → ERR).
    assert_eq!(w.wait_event(c.p, E::Disconnected).status, 0);
    assert_eq!(w.disconnect(c.p), Ok(()));
    w.check();
    assert_eq!(w.rej_reasons(1), [10]);
    assert_eq!(w.sent(1, DREQ), 1);
    assert_eq!(w.sent_attrs(0), [REQ, DREP]);
    let cm0 = w.sim.endpoint(0).unwrap().cm().engine().counters();
    assert_eq!(cm0.rx_dreq_unknown, 1);
    let cm1 = w.sim.endpoint(1).unwrap().cm().engine().counters();
    assert_eq!(cm1.rx_stale, 1);
    w.assert_one_disconnected(c.p, 0);
    assert_eq!(w.statuses(c.p, E::TimewaitExit), [0]);
    assert!(w.disconnected(a2).is_empty());
    assert!(!w.kinds(a2).contains(&E::Established));
    for wr in ra2 {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

#[test]
fn rej_8_when_nobody_listens_on_the_service_id() {
    let mut w = World::new(2);
    let a = w.active_id(0, 1);
    let wrs = w.post_recvs(a, 3);
    w.connect(a);
    assert_eq!(w.wait_event(a, E::Rejected).status, 8);
    w.check();
    assert_eq!(w.rej_reasons(1), [8]);
    assert_eq!(w.sent_attrs(0), [REQ]);
    assert_eq!(w.qp_state(a), QpState::Err);
    assert_eq!(w.ib_state(a), Some(IbCmState::Idle));
    assert_eq!(w.kinds(a), [E::AddrResolved, E::RouteResolved, E::Rejected]);
    for wr in wrs {
        assert_eq!(w.status(wr), Some(WcStatus::WrFlushErr));
    }
}

// ---- found while writing these tests ----

/// Regression: the fabric trace's payload digest used to be a CRC-32 of the RoCEv2 UDP payload,
/// which ends with its own ICRC; CRC-32 being affine, that digest depended only on the flow, the
/// length and the masked fields, so the REQ and the RTU (both 280 bytes, 10.0.0.1 → 10.0.0.2)
/// got the same digest and trace hashes could not see payload divergence.
#[test]
fn fabric_trace_digest_tells_different_payloads_apart() {
    let (w, _) = established();
    let digests: Vec<(SimTime, usize, u64)> = w
        .sim
        .fabric
        .trace()
        .iter()
        .filter(|ev| ev.src.ip() == ip(0))
        .filter_map(|ev| match ev.kind {
            FabricEventKind::Sent { len, digest } => Some((ev.at, len, digest)),
            _ => None,
        })
        .collect();
    let mads: Vec<u64> = digests.iter().filter(|d| d.1 == 280).map(|d| d.2).collect();
    assert_eq!(w.sent_attrs(0)[..2], [REQ, RTU]);
    assert_eq!(mads.len(), 2, "{digests:?}");
    assert_ne!(
        mads[0], mads[1],
        "REQ and RTU have the same digest: {digests:?}"
    );
}
