//! Connection setup and teardown rate of the rdma_cm (cm-core) over the simulated RNIC on the
//! deterministic fabric, on one core.
//!
//! Two [`Host`]s (SimNic + RdmaCm) on a [`Simulation`] with a perfect [`FaultPlan`], trace
//! recording off. One iteration is one whole connection lifetime, as an rdma_cm application
//! does it:
//!
//! 1. client: `create_id`, `resolve_addr` (ADDR_RESOLVED), `resolve_route` (ROUTE_RESOLVED),
//!    `create_qp`, `connect` (REQ);
//! 2. server: CONNECT_REQUEST → `create_qp`, `accept` (REP); client ESTABLISHED (RTU), server
//!    ESTABLISHED;
//! 3. client `disconnect` (QP → ERR, DREQ); server DISCONNECTED → `disconnect` (DREP); client
//!    DISCONNECTED;
//! 4. TimeWait (512 ms of virtual time) expires on both: TIMEWAIT_EXIT on both;
//! 5. both destroy their QP and id.
//!
//! The simulation advances from event to event (never past the next one), so no CM
//! retransmission fires; every event is acked. Throughput is in connections per second.
//!
//! Run: `cargo bench -p rnic-testbed --bench cm -- --warm-up-time 1 --measurement-time 3`.
//! Figures: docs/performance.md.

// A benchmark is not library code: a failed call should abort it loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]
// criterion_group! generates an undocumented public fn.
#![allow(missing_docs)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use cm_core::api::{CmEventType, CmIdHandle, ConnParam, EventChannel};
use cm_core::engine::CmConfig;
use cm_core::wire::RdmaPortSpace;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rnic_sim::fabric::{FaultPlan, PathFaults, RunOutcome, SimFabric, Simulation};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use rnic_testbed::host::Host;
use verbs_core::{CqHandle, Device, Gid, PdHandle, Qp, QpCap, QpInitAttr};

const CLIENT: usize = 0;
const SERVER: usize = 1;
const PORT: u16 = 7471;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// A host with its PD, CQ and event channel.
fn host(last: u8) -> (Host, PdHandle, CqHandle, EventChannel) {
    let dev = SimDevice::new(SimDeviceConfig::new(
        format!("sim{last}"),
        Gid::from_ip(ip(last)),
    ));
    let mut nic = SimNic::at_gid(dev);
    let pd = nic.alloc_pd().unwrap();
    let cq = nic.create_cq(64, None).unwrap();
    let cfg = CmConfig {
        ca_guid: 0x0002_c903_0000_0000 | u64::from(last),
        seed: u64::from(last) * 0x9e37_79b9,
        ..CmConfig::default()
    };
    let mut h = Host::new(nic, cfg).unwrap();
    let ch = h.split().0.create_event_channel();
    (h, pd, cq, ch)
}

struct World {
    sim: Simulation<Host>,
    pd: [PdHandle; 2],
    cq: [CqHandle; 2],
    ch: [EventChannel; 2],
}

fn world() -> World {
    let mut fabric = SimFabric::with_seed(1, FaultPlan::new(PathFaults::perfect()));
    fabric.set_trace_recording(false);
    let mut sim = Simulation::new(fabric);
    let (c, cpd, ccq, cch) = host(1);
    let (s, spd, scq, sch) = host(2);
    sim.add_endpoint(c).unwrap();
    sim.add_endpoint(s).unwrap();
    let (cm, _) = sim.endpoint_mut(SERVER).unwrap().split();
    let id = cm.create_id(sch, RdmaPortSpace::Tcp).unwrap();
    cm.bind_addr(id, SocketAddr::new(ip(2), PORT)).unwrap();
    cm.listen(id, 16).unwrap();
    World {
        sim,
        pd: [cpd, spd],
        cq: [ccq, scq],
        ch: [cch, sch],
    }
}

impl World {
    /// Runs the simulation event by event until host `h` has a CM event, then returns it
    /// (acked) after checking its type and status 0.
    fn expect(&mut self, h: usize, want: CmEventType) -> CmIdHandle {
        let ch = self.ch[h];
        while self.sim.endpoint(h).unwrap().cm().pending_events(ch) == 0 {
            let t = self
                .sim
                .next_event_time()
                .unwrap_or_else(|| panic!("host {h}: idle while waiting for {want:?}"));
            self.sim.run_until(t);
        }
        let now = self.sim.now();
        let (cm, dev) = self.sim.endpoint_mut(h).unwrap().split();
        let ev = cm.get_cm_event(dev, now, ch).unwrap();
        assert_eq!((ev.event, ev.status), (want, 0), "host {h}: {ev:?}");
        let id = ev.id;
        cm.ack_cm_event(ev).unwrap();
        id
    }

    fn create_qp(&mut self, h: usize, id: CmIdHandle) -> Qp {
        let init = QpInitAttr::rc(self.cq[h], self.cq[h], QpCap::uniform(16, 1, 0), false);
        let pd = self.pd[h];
        let (cm, dev) = self.sim.endpoint_mut(h).unwrap().split();
        cm.create_qp(dev, id, pd, &init).unwrap()
    }

    fn disconnect(&mut self, h: usize, id: CmIdHandle) {
        let now = self.sim.now();
        let (cm, dev) = self.sim.endpoint_mut(h).unwrap().split();
        cm.disconnect(dev, now, id).unwrap();
    }

    /// `rdma_destroy_qp` + `rdma_destroy_id`.
    fn destroy(&mut self, h: usize, id: CmIdHandle, qp: Qp) {
        let now = self.sim.now();
        let (cm, dev) = self.sim.endpoint_mut(h).unwrap().split();
        dev.destroy_qp(qp.handle).unwrap();
        cm.detach_qp(id).unwrap();
        cm.destroy_id(dev, now, id).unwrap();
    }

    /// One connection lifetime (module docs).
    fn connection(&mut self) {
        let param = ConnParam::rping_defaults();
        let cid = {
            let (cm, _) = self.sim.endpoint_mut(CLIENT).unwrap().split();
            let id = cm.create_id(self.ch[CLIENT], RdmaPortSpace::Tcp).unwrap();
            cm.resolve_addr(id, None, SocketAddr::new(ip(2), PORT))
                .unwrap();
            id
        };
        self.expect(CLIENT, CmEventType::AddrResolved);
        let (cm, _) = self.sim.endpoint_mut(CLIENT).unwrap().split();
        cm.resolve_route(cid).unwrap();
        self.expect(CLIENT, CmEventType::RouteResolved);
        let cqp = self.create_qp(CLIENT, cid);
        let now = self.sim.now();
        let (cm, dev) = self.sim.endpoint_mut(CLIENT).unwrap().split();
        cm.connect(dev, now, cid, &param).unwrap();

        let sid = self.expect(SERVER, CmEventType::ConnectRequest);
        let sqp = self.create_qp(SERVER, sid);
        let now = self.sim.now();
        let (cm, dev) = self.sim.endpoint_mut(SERVER).unwrap().split();
        cm.accept(dev, now, sid, &param).unwrap();
        self.expect(CLIENT, CmEventType::Established);
        self.expect(SERVER, CmEventType::Established);

        self.disconnect(CLIENT, cid);
        self.expect(SERVER, CmEventType::Disconnected);
        self.disconnect(SERVER, sid);
        self.expect(CLIENT, CmEventType::Disconnected);
        self.expect(CLIENT, CmEventType::TimewaitExit);
        self.expect(SERVER, CmEventType::TimewaitExit);
        self.destroy(CLIENT, cid, cqp);
        self.destroy(SERVER, sid, sqp);
    }
}

fn bench_connections(c: &mut Criterion) {
    let mut w = world();
    // The world is reused across iterations: check once that a lifetime leaves nothing behind.
    w.connection();
    assert_eq!(w.sim.run_until_idle(w.sim.now()), RunOutcome::Idle);
    assert_eq!(w.sim.endpoint(CLIENT).unwrap().cm().ids().len(), 0);
    assert_eq!(w.sim.endpoint(SERVER).unwrap().cm().ids().len(), 1);

    let mut g = c.benchmark_group("cm_connection");
    g.throughput(Throughput::Elements(1));
    g.bench_function("connect_disconnect_timewait", |b| b.iter(|| w.connection()));
    g.finish();
}

criterion_group!(benches, bench_connections);
criterion_main!(benches);
