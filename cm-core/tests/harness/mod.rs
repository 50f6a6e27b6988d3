//! Test harness: two `RdmaCm`s on test-double devices, an in-memory MAD queue with per-message
//! faults chosen by the test, and a virtual clock that jumps to the next deadline.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use cm_core::api::{CmEvent, CmEventType, CmIdHandle, ConnParam, EventChannel, RdmaCm};
use cm_core::engine::CmConfig;
use cm_core::wire::RdmaPortSpace;
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use verbs_core::*;

/// A device that tracks QP state with `check_modify` and carries MADs in queues.
pub struct TestDevice {
    pub gid: Gid,
    pub qps: BTreeMap<u32, (QpAttr, QpInitAttr, u32)>,
    pub next_qpn: u32,
    pub outbox: VecDeque<(Gid, Vec<u8>)>,
    pub inbox: VecDeque<GsiDatagram>,
    /// Every successful modify: (qpn, new state).
    pub modify_log: Vec<(u32, QpState)>,
    /// Multicast attachments: (qpn, group).
    pub mcast: std::collections::BTreeSet<(u32, Gid)>,
}

impl TestDevice {
    pub fn new(ip: Ipv4Addr, first_qpn: u32) -> Self {
        TestDevice {
            gid: Gid::from_ipv4(ip),
            qps: BTreeMap::new(),
            next_qpn: first_qpn,
            outbox: VecDeque::new(),
            inbox: VecDeque::new(),
            modify_log: Vec::new(),
            mcast: std::collections::BTreeSet::new(),
        }
    }

    pub fn qp_attr(&self, qp: Qp) -> QpAttr {
        self.qps[&qp.handle.0].0
    }
}

fn nosys<T>() -> Result<T> {
    Err(Error::new(Errno::ENOSYS, "not in the test double"))
}

impl Device for TestDevice {
    fn name(&self) -> &str {
        "test0"
    }
    fn query_device(&self) -> DeviceAttr {
        DeviceAttr {
            fw_ver: String::new(),
            node_guid: 0,
            sys_image_guid: 0,
            max_mr_size: 0,
            vendor_id: 0,
            vendor_part_id: 0,
            max_qp: 64,
            max_qp_wr: 64,
            max_sge: 4,
            max_cq: 64,
            max_cqe: 64,
            max_mr: 64,
            max_pd: 64,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            max_srq: 0,
            max_srq_wr: 0,
            max_srq_sge: 0,
            phys_port_cnt: 1,
        }
    }
    fn query_port(&self, _port_num: u8) -> Result<PortAttr> {
        nosys()
    }
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        if port_num == 1 && index == 0 {
            Ok(self.gid)
        } else {
            Err(Error::inval("bad gid index"))
        }
    }
    fn alloc_pd(&mut self) -> Result<PdHandle> {
        Ok(PdHandle(1))
    }
    fn dealloc_pd(&mut self, _pd: PdHandle) -> Result<()> {
        Ok(())
    }
    fn reg_mr(&mut self, _pd: PdHandle, _length: usize, _access: AccessFlags) -> Result<Mr> {
        nosys()
    }
    fn dereg_mr(&mut self, _mr: MrHandle) -> Result<()> {
        nosys()
    }
    fn mr_write(&mut self, _mr: MrHandle, _offset: u64, _data: &[u8]) -> Result<()> {
        nosys()
    }
    fn mr_read(&self, _mr: MrHandle, _offset: u64, _buf: &mut [u8]) -> Result<()> {
        nosys()
    }
    fn create_cq(&mut self, _cqe: u32, _channel: Option<&CompChannel>) -> Result<CqHandle> {
        Ok(CqHandle(1))
    }
    fn destroy_cq(&mut self, _cq: CqHandle) -> Result<()> {
        Ok(())
    }
    fn req_notify_cq(&mut self, _cq: CqHandle, _solicited_only: bool) -> Result<()> {
        Ok(())
    }
    fn poll_cq(
        &mut self,
        _cq: CqHandle,
        _max: usize,
        _out: &mut Vec<WorkCompletion>,
    ) -> Result<usize> {
        Ok(0)
    }
    fn create_qp(&mut self, _pd: PdHandle, init: &QpInitAttr) -> Result<Qp> {
        let qpn = self.next_qpn;
        self.next_qpn += 1;
        self.qps.insert(qpn, (QpAttr::default(), *init, qpn));
        Ok(Qp {
            handle: QpHandle(qpn),
            qp_num: qpn,
        })
    }
    fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let (cur, init, qpn) = self
            .qps
            .get(&qp.0)
            .copied()
            .ok_or_else(|| Error::inval("no QP"))?;
        let next = check_modify(
            init.qp_type,
            cur.qp_state,
            mask,
            attr.qp_state,
            attr.cur_qp_state,
        )?;
        let mut new = cur;
        new.qp_state = next;
        if mask.contains(QpAttrMask::RQ_PSN) {
            new.rq_psn = attr.rq_psn;
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            new.sq_psn = attr.sq_psn;
        }
        if mask.contains(QpAttrMask::QKEY) {
            new.qkey = attr.qkey;
        }
        if mask.contains(QpAttrMask::DEST_QPN) {
            new.dest_qp_num = attr.dest_qp_num;
        }
        if mask.contains(QpAttrMask::AV) {
            new.ah_attr = attr.ah_attr;
        }
        if mask.contains(QpAttrMask::TIMEOUT) {
            new.timeout = attr.timeout;
        }
        if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
            new.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            new.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        self.qps.insert(qp.0, (new, init, qpn));
        self.modify_log.push((qpn, next));
        Ok(())
    }
    fn query_qp(&self, qp: QpHandle) -> Result<(QpAttr, QpInitAttr)> {
        self.qps
            .get(&qp.0)
            .map(|(a, i, _)| (*a, *i))
            .ok_or_else(|| Error::inval("no QP"))
    }
    fn destroy_qp(&mut self, qp: QpHandle) -> Result<()> {
        self.qps
            .remove(&qp.0)
            .map(|_| ())
            .ok_or_else(|| Error::inval("no QP"))
    }
    fn post_send(&mut self, _qp: QpHandle, _wrs: &[SendWr]) -> Result<(), PostError> {
        Ok(())
    }
    fn post_recv(&mut self, _qp: QpHandle, _wrs: &[RecvWr]) -> Result<(), PostError> {
        Ok(())
    }
    fn create_srq(&mut self, _pd: PdHandle, _init: &SrqInitAttr) -> Result<SrqHandle> {
        nosys()
    }
    fn modify_srq(&mut self, _srq: SrqHandle, _attr: &SrqAttr, _mask: SrqAttrMask) -> Result<()> {
        nosys()
    }
    fn query_srq(&self, _srq: SrqHandle) -> Result<SrqAttr> {
        nosys()
    }
    fn destroy_srq(&mut self, _srq: SrqHandle) -> Result<()> {
        nosys()
    }
    fn post_srq_recv(&mut self, _srq: SrqHandle, _wrs: &[RecvWr]) -> Result<(), PostError> {
        Err(PostError {
            error: Error::new(Errno::ENOSYS, "not in the test double"),
            bad_wr: 0,
        })
    }
    fn get_async_event(&mut self) -> Option<AsyncEvent> {
        None
    }
    fn attach_mcast(&mut self, qp: QpHandle, gid: Gid, _lid: u16) -> Result<()> {
        self.qps.get(&qp.0).ok_or_else(|| Error::inval("no QP"))?;
        self.mcast.insert((qp.0, gid));
        Ok(())
    }
    fn detach_mcast(&mut self, qp: QpHandle, gid: Gid, _lid: u16) -> Result<()> {
        if self.mcast.remove(&(qp.0, gid)) {
            Ok(())
        } else {
            Err(Error::inval("not attached"))
        }
    }
}

impl GsiEndpoint for TestDevice {
    fn gsi_send(&mut self, dst: Gid, mad: &[u8]) -> Result<()> {
        self.outbox.push_back((dst, mad.to_vec()));
        Ok(())
    }
    fn gsi_recv(&mut self) -> Option<GsiDatagram> {
        self.inbox.pop_front()
    }
}

/// What the network does with one MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Deliver,
    Drop,
    Duplicate,
    DelayMs(u64),
}

/// A MAD on the wire, as the fault function and the log see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub at: SimTime,
    pub from: usize,
    pub attr_id: u16,
    pub fate: Fate,
}

pub struct Host {
    pub cm: RdmaCm,
    pub dev: TestDevice,
    pub ch: EventChannel,
    /// Every event read, with the time it was read.
    pub events: Vec<(SimTime, CmEvent)>,
    /// When false, events are kept un-acked in `held`.
    pub auto_ack: bool,
    pub held: Vec<CmEvent>,
    pub crashed: bool,
    /// When false, the harness leaves events in the channel.
    pub read_events: bool,
}

pub const LATENCY_NS: u64 = 10_000;
pub const PORT: u16 = 7471;

pub fn ip(h: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, h as u8 + 1)
}

pub fn cfg(h: usize, seed: u64) -> CmConfig {
    CmConfig {
        ca_guid: 0x1000 + h as u64,
        seed,
        ..CmConfig::default()
    }
}

pub struct World {
    pub now: SimTime,
    pub hosts: Vec<Host>,
    in_flight: Vec<(SimTime, u64, usize, Gid, Vec<u8>)>,
    seq: u64,
    pub fault: Box<dyn FnMut(&Sent) -> Fate>,
    pub wire: Vec<Sent>,
}

impl World {
    pub fn new() -> Self {
        Self::with_cfgs(cfg(0, 7), cfg(1, 8))
    }

    pub fn with_cfgs(c0: CmConfig, c1: CmConfig) -> Self {
        let hosts = vec![Self::host(0, c0), Self::host(1, c1)];
        World {
            now: SimTime::ZERO,
            hosts,
            in_flight: Vec::new(),
            seq: 0,
            fault: Box::new(|_| Fate::Deliver),
            wire: Vec::new(),
        }
    }

    pub fn host(h: usize, cfg: CmConfig) -> Host {
        let dev = TestDevice::new(ip(h), 0x100 * (h as u32 + 1));
        let mut cm = RdmaCm::new(&dev, cfg).unwrap();
        let ch = cm.create_event_channel();
        Host {
            cm,
            dev,
            ch,
            events: Vec::new(),
            auto_ack: true,
            held: Vec::new(),
            crashed: false,
            read_events: true,
        }
    }

    /// Replaces host `h` with a fresh one (same GID, GUID and first QPN; new comm-ID seed).
    pub fn restart(&mut self, h: usize, seed: u64) {
        self.hosts[h] = Self::host(h, cfg(h, seed));
        self.in_flight.retain(|m| m.2 != h);
    }

    fn host_of(&self, gid: Gid) -> Option<usize> {
        self.hosts.iter().position(|x| x.dev.gid == gid)
    }

    /// Reads events (fetching one may send a MAD: librdmacm's RTU), then moves outboxes onto
    /// the wire (through the fault function).
    pub fn collect(&mut self) {
        let now = self.now;
        for h in self.hosts.iter_mut().filter(|h| h.read_events) {
            while let Ok(ev) = h.cm.get_cm_event(&mut h.dev, now, h.ch) {
                h.events.push((now, ev.clone()));
                if h.auto_ack {
                    h.cm.ack_cm_event(ev).unwrap();
                } else {
                    h.held.push(ev);
                }
            }
        }
        for from in 0..self.hosts.len() {
            while let Some((dst, mad)) = self.hosts[from].dev.outbox.pop_front() {
                let attr_id = u16::from_be_bytes([mad[16], mad[17]]);
                let mut sent = Sent {
                    at: self.now,
                    from,
                    attr_id,
                    fate: Fate::Deliver,
                };
                sent.fate = if self.hosts[from].crashed {
                    Fate::Drop
                } else {
                    (self.fault)(&sent)
                };
                self.wire.push(sent);
                let Some(to) = self.host_of(dst) else {
                    continue;
                };
                let src = self.hosts[from].dev.gid;
                let copies = match sent.fate {
                    Fate::Drop => 0,
                    Fate::Duplicate => 2,
                    _ => 1,
                };
                let delay = match sent.fate {
                    Fate::DelayMs(ms) => ms * 1_000_000,
                    _ => 0,
                };
                for _ in 0..copies {
                    self.seq += 1;
                    self.in_flight.push((
                        self.now.plus_nanos(LATENCY_NS + delay),
                        self.seq,
                        to,
                        src,
                        mad.clone(),
                    ));
                }
            }
        }
    }

    /// Runs one step: delivers what is due, fires due timers, or jumps the clock to the next
    /// deadline not after `limit`. Returns false when nothing is left before `limit`.
    pub fn step(&mut self, limit: SimTime) -> bool {
        self.collect();
        self.in_flight.sort_by_key(|m| (m.0, m.1));
        if let Some(pos) = self.in_flight.iter().position(|m| m.0 <= self.now) {
            let (_, _, to, src, mad) = self.in_flight.remove(pos);
            let now = self.now;
            let h = &mut self.hosts[to];
            if !h.crashed {
                h.cm.handle_datagram(&mut h.dev, now, src, &mad);
            }
            self.collect();
            return true;
        }
        let mut next: Option<SimTime> = self.in_flight.first().map(|m| m.0);
        for h in &self.hosts {
            if let Some(t) = h.cm.poll_timeout().filter(|_| !h.crashed) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        let Some(next) = next.filter(|t| *t <= limit) else {
            return false;
        };
        self.now = self.now.max(next);
        let now = self.now;
        for h in &mut self.hosts {
            if !h.crashed && h.cm.poll_timeout().is_some_and(|t| t <= now) {
                h.cm.handle_timeout(&mut h.dev, now);
            }
        }
        self.collect();
        true
    }

    pub fn run(&mut self) {
        while self.step(SimTime::MAX) {}
    }

    pub fn run_for_ms(&mut self, ms: u64) {
        let limit = self.now.plus_nanos(ms * 1_000_000);
        while self.step(limit) {}
        self.now = self.now.max(limit);
    }

    /// Runs until `h` has read an event of type `t` (or nothing is left).
    pub fn run_until(&mut self, h: usize, t: CmEventType) -> bool {
        loop {
            if self.has(h, t) {
                return true;
            }
            if !self.step(SimTime::MAX) {
                return self.has(h, t);
            }
        }
    }

    pub fn has(&self, h: usize, t: CmEventType) -> bool {
        self.hosts[h].events.iter().any(|(_, e)| e.event == t)
    }

    pub fn events_of(&self, h: usize, t: CmEventType) -> Vec<(SimTime, CmEvent)> {
        self.hosts[h]
            .events
            .iter()
            .filter(|(_, e)| e.event == t)
            .cloned()
            .collect()
    }

    pub fn types(&self, h: usize) -> Vec<CmEventType> {
        self.hosts[h].events.iter().map(|(_, e)| e.event).collect()
    }

    pub fn sent(&self, from: usize, attr_id: u16) -> usize {
        self.wire
            .iter()
            .filter(|s| s.from == from && s.attr_id == attr_id)
            .count()
    }

    /// Host 1 listens on PORT.
    pub fn listen(&mut self) -> CmIdHandle {
        let h = &mut self.hosts[1];
        let l = h.cm.create_id(h.ch, RdmaPortSpace::Tcp).unwrap();
        h.cm.bind_addr(l, SocketAddr::new(IpAddr::V4(ip(1)), PORT))
            .unwrap();
        h.cm.listen(l, 8).unwrap();
        l
    }

    /// Host 0: id with a route to host 1 and a QP in INIT.
    pub fn active_id(&mut self) -> CmIdHandle {
        let h = &mut self.hosts[0];
        let id = h.cm.create_id(h.ch, RdmaPortSpace::Tcp).unwrap();
        h.cm.resolve_addr(id, None, SocketAddr::new(IpAddr::V4(ip(1)), PORT))
            .unwrap();
        h.cm.resolve_route(id).unwrap();
        h.cm.create_qp(&mut h.dev, id, PdHandle(1), &qp_init())
            .unwrap();
        self.collect();
        id
    }

    pub fn connect(&mut self, id: CmIdHandle) {
        let now = self.now;
        let h = &mut self.hosts[0];
        h.cm.connect(&mut h.dev, now, id, &conn_param()).unwrap();
    }

    /// Host 1 creates a QP on the newest CONNECT_REQUEST id and accepts; returns the id.
    pub fn accept_last(&mut self) -> CmIdHandle {
        let now = self.now;
        let child = self
            .events_of(1, CmEventType::ConnectRequest)
            .last()
            .unwrap()
            .1
            .id;
        let h = &mut self.hosts[1];
        h.cm.create_qp(&mut h.dev, child, PdHandle(1), &qp_init())
            .unwrap();
        h.cm.accept(&mut h.dev, now, child, &conn_param()).unwrap();
        child
    }

    /// Full handshake: (active id, listener, passive id), both ESTABLISHED.
    pub fn established() -> (World, CmIdHandle, CmIdHandle) {
        let mut w = World::new();
        w.listen();
        let a = w.active_id();
        w.connect(a);
        assert!(w.run_until(1, CmEventType::ConnectRequest));
        let b = w.accept_last();
        assert!(w.run_until(0, CmEventType::Established));
        assert!(w.run_until(1, CmEventType::Established));
        (w, a, b)
    }

    pub fn disconnect(&mut self, h: usize, id: CmIdHandle) -> Result<()> {
        let now = self.now;
        let x = &mut self.hosts[h];
        let r = x.cm.disconnect(&mut x.dev, now, id);
        self.collect();
        r
    }

    pub fn destroy(&mut self, h: usize, id: CmIdHandle) -> Result<()> {
        let now = self.now;
        let x = &mut self.hosts[h];
        let r = x.cm.destroy_id(&mut x.dev, now, id);
        self.collect();
        r
    }

    pub fn qp_state(&self, h: usize, id: CmIdHandle) -> QpState {
        let qp = self.hosts[h].cm.qp(id).unwrap();
        self.hosts[h].dev.qp_attr(qp).qp_state
    }
}

pub fn qp_init() -> QpInitAttr {
    QpInitAttr::rc(CqHandle(1), CqHandle(1), QpCap::uniform(16, 1, 0), false)
}

pub fn conn_param() -> ConnParam {
    ConnParam {
        private_data: b"hello".to_vec(),
        ..ConnParam::rping_defaults()
    }
}
