//! # Gallery: async events and completions
//!
//! One test per rule of docs/semantics-verbs.md sections "Async events", "CQ overrun",
//! "Entering ERR and flushing" and "CQEs of a destroyed QP", written as an application over
//! the rdma_cm (cm-core) and the simulated RNIC (rnic-sim) would: two [`Host`]s on the
//! deterministic fabric, connected with `rdma_connect`/`rdma_accept`, then verbs and
//! `ibv_get_async_event` (`Device::get_async_event`).
//!
//! (The [`World`](rnic_testbed::world::World) reads and discards QP events while it polls its
//! CQs, so these tests drive the hosts on a `Simulation` directly.)

use cm_core::api::{CmEvent, CmEventType as E, CmIdHandle, ConnParam, EventChannel, RdmaCm};
use cm_core::engine::{CmConfig, IbCmState};
use cm_core::wire::RdmaPortSpace;
use rnic_sim::fabric::{FaultPlan, Partition, PathFaults, SimFabric, Simulation};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use rnic_testbed::host::Host;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use verbs_core::{
    AccessFlags, AsyncElement, AsyncEvent, AsyncEventType as A, CqHandle, Device, Gid, Mr, Qp,
    QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, RecvWr, SendWr, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};

const CLIENT: usize = 0;
const SERVER: usize = 1;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;

fn ip(h: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, h as u8 + 1))
}

/// A host whose device has `cfg` applied.
fn host(h: usize, cfg: impl Fn(&mut SimDeviceConfig)) -> Host {
    let mut c = SimDeviceConfig::new(format!("sim{h}"), Gid::from_ip(ip(h)));
    c.seed = 0x5eed + h as u64;
    cfg(&mut c);
    let cm = CmConfig {
        ca_guid: 0x0002_c903_0000_0000 | h as u64,
        seed: h as u64 + 1,
        ..CmConfig::default()
    };
    Host::new(SimNic::at_gid(SimDevice::new(c)), cm).unwrap()
}

/// One side of a connection: channel, id, QP, MR, CQ (send and receive share it).
#[derive(Clone, Copy)]
struct Side {
    ch: EventChannel,
    id: CmIdHandle,
    qp: Qp,
    mr: Mr,
    cq: CqHandle,
}

struct Net {
    sim: Simulation<Host>,
}

impl Net {
    fn run_for(&mut self, ns: u64) {
        let t = self.sim.now().plus_nanos(ns);
        self.sim.run_until(t);
    }

    fn dev(&mut self, h: usize) -> &mut SimDevice {
        self.sim.endpoint_mut(h).unwrap().split().1
    }

    fn event(&mut self, h: usize, ch: EventChannel) -> Option<CmEvent> {
        let now = self.sim.now();
        let (cm, dev) = self.sim.endpoint_mut(h).unwrap().split();
        let ev = cm.get_cm_event(dev, now, ch).ok()?;
        cm.ack_cm_event(ev.clone()).unwrap();
        Some(ev)
    }

    fn expect(&mut self, h: usize, ch: EventChannel, want: E) -> CmEvent {
        let ev = self.event(h, ch).expect("an event");
        assert_eq!(ev.event, want, "host {h}: {ev:?}");
        ev
    }

    fn async_events(&mut self, h: usize) -> Vec<AsyncEvent> {
        let dev = self.dev(h);
        std::iter::from_fn(|| dev.get_async_event()).collect()
    }

    fn poll(&mut self, h: usize, cq: CqHandle) -> Vec<WorkCompletion> {
        let dev = self.dev(h);
        let mut out = Vec::new();
        while dev.poll_cq(cq, 16, &mut out).unwrap() > 0 {}
        out
    }

    fn ib_cm_state(&self, h: usize, id: CmIdHandle) -> Option<IbCmState> {
        self.sim.endpoint(h).unwrap().cm().ib_cm_state(id)
    }
}

fn resources(cm: &mut RdmaCm, dev: &mut SimDevice, id: CmIdHandle, cqe: u32) -> (Qp, Mr, CqHandle) {
    let pd = dev.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = dev.reg_mr(pd, 4096, access).unwrap();
    let cq = dev.create_cq(cqe, None).unwrap();
    let init = QpInitAttr::rc(cq, cq, QpCap::uniform(16, 1, 0), true);
    let qp = cm.create_qp(dev, id, pd, &init).unwrap();
    (qp, mr, cq)
}

/// Client (host 0) connects to server (host 1). With `lose_rtu` the client's RTU is dropped
/// (a one-way cut client → server from the accept until 500 µs later) and the server stays in
/// REP_SENT; otherwise both ends are ESTABLISHED. The client's CQ holds `cqe` completions,
/// the server's 64. Returns the
/// hosts, the client's side and the server's.
fn connect(lose_rtu: bool, cqe: u32, cfg: impl Fn(&mut SimDeviceConfig)) -> (Net, Side, Side) {
    let mut sim = Simulation::new(SimFabric::with_seed(
        1,
        FaultPlan::new(PathFaults::perfect()),
    ));
    sim.add_endpoint(host(CLIENT, &cfg)).unwrap();
    sim.add_endpoint(host(SERVER, &cfg)).unwrap();
    let mut net = Net { sim };
    let server_addr = SocketAddr::new(ip(SERVER), 7471);
    let (sch, lid) = {
        let (cm, _) = net.sim.endpoint_mut(SERVER).unwrap().split();
        let ch = cm.create_event_channel();
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.bind_addr(id, server_addr).unwrap();
        cm.listen(id, 4).unwrap();
        (ch, id)
    };
    let (cch, cid) = {
        let (cm, _) = net.sim.endpoint_mut(CLIENT).unwrap().split();
        let ch = cm.create_event_channel();
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.resolve_addr(id, None, server_addr).unwrap();
        (ch, id)
    };
    net.expect(CLIENT, cch, E::AddrResolved);
    net.sim
        .endpoint_mut(CLIENT)
        .unwrap()
        .split()
        .0
        .resolve_route(cid)
        .unwrap();
    net.expect(CLIENT, cch, E::RouteResolved);
    let now = net.sim.now();
    let (cqp, cmr, ccq) = {
        let (cm, dev) = net.sim.endpoint_mut(CLIENT).unwrap().split();
        let r = resources(cm, dev, cid, cqe);
        cm.connect(dev, now, cid, &ConnParam::rping_defaults())
            .unwrap();
        r
    };
    net.run_for(MS);
    let req = net.expect(SERVER, sch, E::ConnectRequest);
    assert_eq!(req.listen_id, Some(lid));
    let now = net.sim.now();
    let (sqp, smr, scq) = {
        let (cm, dev) = net.sim.endpoint_mut(SERVER).unwrap().split();
        let r = resources(cm, dev, req.id, 64);
        cm.accept(dev, now, req.id, &ConnParam::rping_defaults())
            .unwrap();
        r
    };
    if lose_rtu {
        let heal = now.plus_nanos(500 * US);
        let plan = net.sim.fabric.plan_mut();
        plan.partitions
            .push(Partition::one_way(ip(CLIENT), ip(SERVER), now, Some(heal)));
    }
    net.run_for(100 * US);
    // Reading ESTABLISHED moves the client's QP to RTS and sends the RTU.
    net.expect(CLIENT, cch, E::Established);
    net.run_for(MS);
    let client = Side {
        ch: cch,
        id: cid,
        qp: cqp,
        mr: cmr,
        cq: ccq,
    };
    let server = Side {
        ch: sch,
        id: req.id,
        qp: sqp,
        mr: smr,
        cq: scq,
    };
    if lose_rtu {
        assert!(net.event(SERVER, sch).is_none(), "the RTU was lost");
        assert_eq!(net.ib_cm_state(SERVER, req.id), Some(IbCmState::RepSent));
    } else {
        net.expect(SERVER, sch, E::Established);
    }
    (net, client, server)
}

fn qp_event(event_type: A, qp: Qp) -> AsyncEvent {
    AsyncEvent {
        event_type,
        element: AsyncElement::Qp(qp.qp_num),
    }
}

fn recv(s: Side, wr_id: u64) -> RecvWr {
    RecvWr::new(wr_id, vec![s.mr.sge(0, 64)])
}

fn send(s: Side, wr_id: u64) -> SendWr {
    SendWr::send(wr_id, vec![s.mr.sge(0, 16)])
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

// =============================================================================================
// COMM_EST
// =============================================================================================

#[test]
fn passive_side_whose_rtu_was_lost_gets_comm_est_on_the_first_send_and_rdma_notify_establishes_it()
{
    let (mut net, c, s) = connect(true, 64, |_| {});
    net.dev(SERVER)
        .post_recv(s.qp.handle, &[recv(s, 1)])
        .unwrap();
    net.dev(CLIENT)
        .post_send(c.qp.handle, &[send(c, 2)])
        .unwrap();
    net.run_for(MS);
    // The server's QP (RTS since rdma_accept) raises COMM_EST on the first request.
    assert_eq!(net.async_events(SERVER), [qp_event(A::CommEst, s.qp)]);
    assert_eq!(statuses(&net.poll(SERVER, s.cq)), [(1, WcStatus::Success)]);
    // rdma_notify(IBV_EVENT_COMM_EST) (librdmacm's rdma_establish on a passive id).
    let now = net.sim.now();
    let (cm, dev) = net.sim.endpoint_mut(SERVER).unwrap().split();
    cm.establish(dev, now, s.id).unwrap();
    net.expect(SERVER, s.ch, E::Established);
    assert_eq!(net.ib_cm_state(SERVER, s.id), Some(IbCmState::Established));
    assert_eq!(statuses(&net.poll(CLIENT, c.cq)), [(2, WcStatus::Success)]);
}

#[test]
fn comm_est_is_raised_once_per_qp_and_rdma_notify_on_an_established_id_is_eisconn() {
    let (mut net, c, s) = connect(false, 64, |_| {});
    net.dev(SERVER)
        .post_recv(s.qp.handle, &[recv(s, 1), recv(s, 2)])
        .unwrap();
    net.dev(CLIENT)
        .post_send(c.qp.handle, &[send(c, 3), send(c, 4)])
        .unwrap();
    net.run_for(MS);
    assert_eq!(net.async_events(SERVER), [qp_event(A::CommEst, s.qp)]);
    let now = net.sim.now();
    let (cm, dev) = net.sim.endpoint_mut(SERVER).unwrap().split();
    assert_eq!(
        cm.establish(dev, now, s.id).unwrap_err().errno,
        verbs_core::Errno::EISCONN
    );
}

// =============================================================================================
// Responder errors: QP_ACCESS_ERR, QP_REQ_ERR
// =============================================================================================

#[test]
fn rdma_write_with_a_bad_rkey_raises_qp_access_err_on_the_responders_qp() {
    let (mut net, c, s) = connect(false, 64, |_| {});
    let wr = SendWr::rdma_write(5, vec![c.mr.sge(0, 16)], s.mr.addr, s.mr.rkey ^ 0x80);
    net.dev(CLIENT).post_send(c.qp.handle, &[wr]).unwrap();
    net.run_for(MS);
    assert_eq!(
        statuses(&net.poll(CLIENT, c.cq)),
        [(5, WcStatus::RemAccessErr)]
    );
    let evs: Vec<_> = net
        .async_events(SERVER)
        .into_iter()
        .filter(|e| e.event_type != A::CommEst)
        .collect();
    assert_eq!(evs, [qp_event(A::QpAccessErr, s.qp)]);
    assert_eq!(
        net.dev(SERVER).query_qp(s.qp.handle).unwrap().0.qp_state,
        QpState::Err
    );
    assert!(
        net.async_events(CLIENT).is_empty(),
        "the requester has its completion"
    );
}

#[test]
fn rdma_read_of_a_region_without_remote_read_raises_qp_access_err() {
    let (mut net, c, s) = connect(false, 64, |_| {});
    let wo = net
        .dev(SERVER)
        .reg_mr(
            verbs_core::PdHandle(1),
            64,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let wr = SendWr::rdma_read(6, vec![c.mr.sge(0, 16)], wo.addr, wo.rkey);
    net.dev(CLIENT).post_send(c.qp.handle, &[wr]).unwrap();
    net.run_for(MS);
    assert_eq!(
        statuses(&net.poll(CLIENT, c.cq)),
        [(6, WcStatus::RemAccessErr)]
    );
    assert!(net
        .async_events(SERVER)
        .contains(&qp_event(A::QpAccessErr, s.qp)));
}

#[test]
fn rdma_write_to_a_qp_without_remote_write_raises_qp_req_err() {
    let (mut net, c, s) = connect(false, 64, |_| {});
    let attr = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    net.dev(SERVER)
        .modify_qp(
            s.qp.handle,
            &attr,
            QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
    let wr = SendWr::rdma_write(7, vec![c.mr.sge(0, 16)], s.mr.addr, s.mr.rkey);
    net.dev(CLIENT).post_send(c.qp.handle, &[wr]).unwrap();
    net.run_for(MS);
    assert_eq!(
        statuses(&net.poll(CLIENT, c.cq)),
        [(7, WcStatus::RemInvReqErr)]
    );
    assert!(net
        .async_events(SERVER)
        .contains(&qp_event(A::QpReqErr, s.qp)));
}

// =============================================================================================
// CQ overrun
// =============================================================================================

#[test]
fn cq_overrun_raises_cq_err_then_qp_fatal_on_the_qp_whose_completion_overflowed() {
    let (mut net, c, s) = connect(false, 2, |_| {});
    let rs: Vec<_> = (0..4).map(|i| recv(s, i)).collect();
    net.dev(SERVER).post_recv(s.qp.handle, &rs).unwrap();
    let ss: Vec<_> = (10..14).map(|i| send(c, i)).collect();
    net.dev(CLIENT).post_send(c.qp.handle, &ss).unwrap();
    net.run_for(MS);
    // Client: signaled sends (sq_sig_all), a CQ of two.
    assert_eq!(
        net.async_events(CLIENT),
        [
            AsyncEvent {
                event_type: A::CqErr,
                element: AsyncElement::Cq(c.cq)
            },
            qp_event(A::QpFatal, c.qp)
        ]
    );
    assert_eq!(
        net.dev(CLIENT).query_qp(c.qp.handle).unwrap().0.qp_state,
        QpState::Err
    );
}

// =============================================================================================
// Completions: undefined fields, CQEs of a destroyed QP
// =============================================================================================

#[test]
fn flushed_completions_read_zero_in_their_undefined_fields_by_default() {
    let (mut net, c, _) = connect(false, 64, |_| {});
    net.dev(CLIENT)
        .post_recv(c.qp.handle, &[recv(c, 1)])
        .unwrap();
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    net.dev(CLIENT)
        .modify_qp(c.qp.handle, &err, QpAttrMask::STATE)
        .unwrap();
    let wcs = net.poll(CLIENT, c.cq);
    assert_eq!(
        wcs,
        [WorkCompletion::error(1, WcStatus::WrFlushErr, c.qp.qp_num)]
    );
    assert_eq!((wcs[0].opcode, wcs[0].byte_len), (WcOpcode::Send, 0));
}

#[test]
fn with_poisoning_a_flushed_receive_reads_as_nonsense_in_every_undefined_field() {
    let (mut net, c, _) = connect(false, 64, |c| c.poison_undefined_wc_fields = true);
    net.dev(CLIENT)
        .post_recv(c.qp.handle, &[recv(c, 1)])
        .unwrap();
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    net.dev(CLIENT)
        .modify_qp(c.qp.handle, &err, QpAttrMask::STATE)
        .unwrap();
    let wcs = net.poll(CLIENT, c.cq);
    assert_eq!(statuses(&wcs), [(1, WcStatus::WrFlushErr)]);
    let wc = wcs[0];
    // Valid: wr_id, status, qp_num, vendor_err. The rest must not be trusted.
    assert_eq!((wc.qp_num, wc.vendor_err), (c.qp.qp_num, 0));
    assert!(!matches!(
        wc.opcode,
        WcOpcode::Recv | WcOpcode::RecvRdmaWithImm
    ));
    assert_ne!(wc.byte_len, 0);
    assert!(wc.wc_flags.contains(WcFlags::WITH_IMM));
}

#[test]
fn completions_of_a_destroyed_qp_can_still_be_polled_and_its_qpn_waits_for_them() {
    let (mut net, c, _) = connect(false, 64, |_| {});
    net.dev(CLIENT)
        .post_recv(c.qp.handle, &[recv(c, 1)])
        .unwrap();
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    let dev = net.dev(CLIENT);
    dev.modify_qp(c.qp.handle, &err, QpAttrMask::STATE).unwrap();
    dev.destroy_qp(c.qp.handle).unwrap();
    // A new QP on the same CQ never takes the QPN the lingering completion names.
    let pd = verbs_core::PdHandle(1);
    let init = QpInitAttr::rc(c.cq, c.cq, QpCap::uniform(4, 1, 0), false);
    let q = dev.create_qp(pd, &init).unwrap();
    assert_ne!(q.qp_num, c.qp.qp_num);
    let wcs = net.poll(CLIENT, c.cq);
    assert_eq!(
        wcs,
        [WorkCompletion::error(1, WcStatus::WrFlushErr, c.qp.qp_num)]
    );
}
