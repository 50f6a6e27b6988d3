//! Gallery of rdma_cm rules, one test per rule, written as an application would use the API:
//! two hosts (cm-core over the simulated RNIC) on the deterministic fabric. Covers
//! `rdma_migrate_id`, synchronous ids, a destroyed event channel, `rdma_notify`/
//! `rdma_establish` called twice, the listen backlog 0, a connect abandoned before its
//! CONNECT_RESPONSE is read, device removal and address change (docs/cm-semantics.md,
//! "rdma_cm layer" and "Device removal and address change").

use cm_core::api::{
    CmEvent, CmEventType as E, CmIdHandle, ConnParam, EventChannel, RdmaCm, RdmaCmState,
};
use cm_core::blocking::SharedCm;
use cm_core::engine::{CmConfig, IbCmState};
use cm_core::wire::RdmaPortSpace;
use rnic_sim::fabric::{FaultPlan, PathFaults, SimFabric, Simulation};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use rnic_testbed::host::Host;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use verbs_core::{
    AccessFlags, AsyncEventType, CqHandle, Device, Errno, Gid, Qp, QpCap, QpInitAttr, QpState,
    SendWr, SimTime, WcStatus,
};

const CLIENT: usize = 0;
const SERVER: usize = 1;
const PORT: u16 = 7471;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn server_addr() -> SocketAddr {
    SocketAddr::new(ip(2), PORT)
}

fn host(last: u8) -> Host {
    let nic = SimNic::at_gid(SimDevice::new(SimDeviceConfig::new(
        format!("sim{last}"),
        Gid::from_ip(ip(last)),
    )));
    let cfg = CmConfig {
        ca_guid: 0x0002_c903_0000_0000 | u64::from(last),
        seed: u64::from(last) * 0x9e37_79b9,
        ..CmConfig::default()
    };
    Host::new(nic, cfg).unwrap()
}

struct Net {
    sim: Simulation<Host>,
}

impl Net {
    fn new() -> Net {
        let mut sim = Simulation::new(SimFabric::with_seed(
            1,
            FaultPlan::new(PathFaults::perfect()),
        ));
        sim.add_endpoint(host(1)).unwrap();
        sim.add_endpoint(host(2)).unwrap();
        Net { sim }
    }

    fn cm(&mut self, h: usize) -> &mut RdmaCm {
        self.sim.endpoint_mut(h).unwrap().split().0
    }

    /// Runs `f` with host `h`'s CM, device and the current time.
    fn call<R>(
        &mut self,
        h: usize,
        f: impl FnOnce(&mut RdmaCm, &mut SimDevice, SimTime) -> R,
    ) -> R {
        let now = self.sim.now();
        let (cm, dev) = self.sim.endpoint_mut(h).unwrap().split();
        f(cm, dev, now)
    }

    /// 1 ms: far more than a round trip, far less than any CM timer.
    fn step(&mut self) {
        let t = self.sim.now().plus_nanos(1_000_000);
        self.sim.run_until(t);
    }

    fn run_for_s(&mut self, s: u64) {
        let t = self.sim.now().plus_nanos(s * 1_000_000_000);
        self.sim.run_until(t);
    }

    /// The next event on `ch` of host `h`, acked.
    fn event(&mut self, h: usize, ch: EventChannel) -> Result<CmEvent, verbs_core::Error> {
        let ev = self.call(h, |cm, dev, now| cm.get_cm_event(dev, now, ch))?;
        self.cm(h).ack_cm_event(ev.clone()).unwrap();
        Ok(ev)
    }

    fn expect(&mut self, h: usize, ch: EventChannel, want: E) -> CmEvent {
        let ev = self
            .event(h, ch)
            .unwrap_or_else(|e| panic!("host {h}: {e}, wanted {want:?}"));
        assert_eq!(ev.event, want, "host {h}: {ev:?}");
        ev
    }

    fn mads_sent(&mut self, h: usize) -> u64 {
        self.cm(h).counters().tx_mads
    }

    fn listen(&mut self, backlog: u32) -> (EventChannel, CmIdHandle) {
        let cm = self.cm(SERVER);
        let ch = cm.create_event_channel();
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.bind_addr(id, server_addr()).unwrap();
        cm.listen(id, backlog).unwrap();
        (ch, id)
    }

    /// A client id on `ch` with address and route resolved.
    fn resolved(&mut self, ch: EventChannel) -> CmIdHandle {
        let cm = self.cm(CLIENT);
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.resolve_addr(id, None, server_addr()).unwrap();
        self.expect(CLIENT, ch, E::AddrResolved);
        self.cm(CLIENT).resolve_route(id).unwrap();
        self.expect(CLIENT, ch, E::RouteResolved);
        id
    }
}

fn qp(cm: &mut RdmaCm, dev: &mut SimDevice, id: CmIdHandle) -> (Qp, CqHandle) {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let init = QpInitAttr::rc(cq, cq, QpCap::uniform(16, 1, 0), true);
    (cm.create_qp(dev, id, pd, &init).unwrap(), cq)
}

/// A connected pair with QPs: (client channel, client id, client QP and CQ, server channel,
/// server id, server QP).
struct Conn {
    cch: EventChannel,
    cid: CmIdHandle,
    cqp: Qp,
    ccq: CqHandle,
    sch: EventChannel,
    sid: CmIdHandle,
    sqp: Qp,
    lid: CmIdHandle,
}

fn connected(net: &mut Net) -> Conn {
    let (sch, lid) = net.listen(4);
    let cch = net.cm(CLIENT).create_event_channel();
    let cid = net.resolved(cch);
    let (cqp, ccq) = net.call(CLIENT, |cm, dev, now| {
        let r = qp(cm, dev, cid);
        cm.connect(dev, now, cid, &ConnParam::rping_defaults())
            .unwrap();
        r
    });
    net.step();
    let sid = net.expect(SERVER, sch, E::ConnectRequest).id;
    let (sqp, _) = net.call(SERVER, |cm, dev, now| {
        let r = qp(cm, dev, sid);
        cm.accept(dev, now, sid, &ConnParam::rping_defaults())
            .unwrap();
        r
    });
    net.step();
    net.expect(CLIENT, cch, E::Established);
    net.step();
    net.expect(SERVER, sch, E::Established);
    Conn {
        cch,
        cid,
        cqp,
        ccq,
        sch,
        sid,
        sqp,
        lid,
    }
}

// ---- rdma_migrate_id ------------------------------------------------------------------------

#[test]
fn migrate_id_moves_the_unread_events_and_the_later_ones_to_the_new_channel() {
    let mut net = Net::new();
    let c = connected(&mut net);
    // The server disconnects; the client has not read its DISCONNECTED yet.
    net.call(SERVER, |cm, dev, now| cm.disconnect(dev, now, c.sid))
        .unwrap();
    net.step();
    assert_eq!(net.cm(CLIENT).pending_events(c.cch), 1);
    let other = net.cm(CLIENT).create_event_channel();
    net.cm(CLIENT).migrate_id(c.cid, Some(other)).unwrap();
    // The event went with the id (ucma_migrate_id moves the id's queued events).
    assert_eq!(net.cm(CLIENT).pending_events(c.cch), 0);
    assert_eq!(net.event(CLIENT, c.cch).unwrap_err().errno, Errno::EAGAIN);
    net.expect(CLIENT, other, E::Disconnected);
    // Later events arrive on the new channel too.
    net.call(CLIENT, |cm, dev, now| cm.disconnect(dev, now, c.cid))
        .unwrap();
    net.run_for_s(1);
    net.expect(CLIENT, other, E::TimewaitExit);
    // The old channel has no id left: it can go.
    net.cm(CLIENT).destroy_event_channel(c.cch).unwrap();
}

/// A CM over a lone simulated RNIC behind the blocking layer (no peer needed).
fn shared_alone() -> SharedCm<SimDevice> {
    let dev = SimDevice::new(SimDeviceConfig::new(
        "sim9".to_string(),
        Gid::from_ip(ip(9)),
    ));
    let cm = RdmaCm::new(&dev, CmConfig::default()).unwrap();
    SharedCm::new(cm, dev, SimTime::default)
}

#[test]
fn migrate_id_waits_until_the_ids_events_are_acked() {
    let shared = shared_alone();
    let (id, ev, other) = shared.with(|cm, dev| {
        let ch = cm.create_event_channel();
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.resolve_addr(id, None, server_addr()).unwrap();
        // The application holds the ADDR_RESOLVED without acking it.
        let ev = cm.get_cm_event(dev, SimTime::default(), ch).unwrap();
        (id, ev, cm.create_event_channel())
    });
    // librdmacm blocks until the ack: here the wait runs out (timeout 0); the id moved.
    let e = shared
        .migrate_id(id, Some(other), Duration::ZERO)
        .unwrap_err();
    assert_eq!(e.errno, Errno::EAGAIN);
    assert_eq!(shared.with(|cm, _| cm.channel_of(id)), Some(other));
    shared.with(|cm, _| cm.ack_cm_event(ev)).unwrap();
    shared.migrate_id(id, Some(other), Duration::ZERO).unwrap();
    // A synchronous id cannot be made synchronous again; an ordinary one can.
    shared.migrate_id(id, None, Duration::ZERO).unwrap();
    assert_eq!(shared.with(|cm, _| cm.is_sync(id)), Some(true));
    let e = shared.migrate_id(id, None, Duration::ZERO).unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
}

// ---- synchronous ids ------------------------------------------------------------------------

#[test]
fn a_synchronous_id_returns_each_calls_event_as_its_result() {
    let mut net = Net::new();
    let (sch, _) = net.listen(4);
    let cm = net.cm(CLIENT);
    let id = cm.create_sync_id(RdmaPortSpace::Tcp).unwrap();
    assert_eq!(cm.is_sync(id), Some(true));
    cm.resolve_addr(id, None, server_addr()).unwrap();
    net.call(CLIENT, |cm, dev, now| cm.complete(dev, now, id))
        .unwrap();
    assert_eq!(
        net.cm(CLIENT).sync_event(id).unwrap().event,
        E::AddrResolved
    );
    net.cm(CLIENT).resolve_route(id).unwrap();
    net.call(CLIENT, |cm, dev, now| cm.complete(dev, now, id))
        .unwrap();
    assert_eq!(net.cm(CLIENT).state(id), Some(RdmaCmState::RouteResolved));
    net.call(CLIENT, |cm, dev, now| {
        qp(cm, dev, id);
        cm.connect(dev, now, id, &ConnParam::rping_defaults())
    })
    .unwrap();
    // rdma_connect blocks for its event: EAGAIN here until the REP is in.
    let e = net
        .call(CLIENT, |cm, dev, now| cm.complete(dev, now, id))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EAGAIN);
    net.step();
    let sid = net.expect(SERVER, sch, E::ConnectRequest).id;
    net.call(SERVER, |cm, dev, now| {
        qp(cm, dev, sid);
        cm.accept(dev, now, sid, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    net.call(CLIENT, |cm, dev, now| cm.complete(dev, now, id))
        .unwrap();
    assert_eq!(net.cm(CLIENT).sync_event(id).unwrap().event, E::Established);
    // rdma_destroy_id acks id->event and frees the private channel.
    let ch = net.cm(CLIENT).channel_of(id).unwrap();
    net.call(CLIENT, |cm, dev, now| cm.destroy_id(dev, now, id))
        .unwrap();
    assert_eq!(net.event(CLIENT, ch).unwrap_err().errno, Errno::EBADF);
}

#[test]
fn a_synchronous_connect_to_a_port_nobody_listens_on_fails_with_econnrefused() {
    let mut net = Net::new();
    let cm = net.cm(CLIENT);
    let id = cm.create_sync_id(RdmaPortSpace::Tcp).unwrap();
    cm.resolve_addr(id, None, server_addr()).unwrap();
    net.call(CLIENT, |cm, dev, now| cm.complete(dev, now, id))
        .unwrap();
    net.cm(CLIENT).resolve_route(id).unwrap();
    net.call(CLIENT, |cm, dev, now| cm.complete(dev, now, id))
        .unwrap();
    net.call(CLIENT, |cm, dev, now| {
        qp(cm, dev, id);
        cm.connect(dev, now, id, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    // REJ 8 → REJECTED → ucma_complete: ECONNREFUSED.
    let e = net
        .call(CLIENT, |cm, dev, now| cm.complete(dev, now, id))
        .unwrap_err();
    assert_eq!(e.errno, Errno::ECONNREFUSED);
    let ev = net.cm(CLIENT).sync_event(id).unwrap();
    assert_eq!((ev.event, ev.status), (E::Rejected, 8));
}

#[test]
fn a_synchronous_listener_hands_out_synchronous_ids_with_get_request() {
    let mut net = Net::new();
    let cm = net.cm(SERVER);
    let lid = cm.create_sync_id(RdmaPortSpace::Tcp).unwrap();
    cm.bind_addr(lid, server_addr()).unwrap();
    cm.listen(lid, 4).unwrap();
    let e = net
        .call(SERVER, |cm, dev, now| cm.get_request(dev, now, lid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EAGAIN);
    let cch = net.cm(CLIENT).create_event_channel();
    let cid = net.resolved(cch);
    net.call(CLIENT, |cm, dev, now| {
        qp(cm, dev, cid);
        cm.connect(dev, now, cid, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    let sid = net
        .call(SERVER, |cm, dev, now| cm.get_request(dev, now, lid))
        .unwrap();
    let cm = net.cm(SERVER);
    assert_eq!(cm.is_sync(sid), Some(true));
    assert_eq!(cm.sync_event(sid).unwrap().event, E::ConnectRequest);
    assert_ne!(cm.channel_of(sid), cm.channel_of(lid));
    // rdma_accept on the synchronous id completes with the ESTABLISHED the RTU brings.
    net.call(SERVER, |cm, dev, now| {
        qp(cm, dev, sid);
        cm.accept(dev, now, sid, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    net.expect(CLIENT, cch, E::Established);
    net.step();
    net.call(SERVER, |cm, dev, now| cm.complete(dev, now, sid))
        .unwrap();
    assert_eq!(
        net.cm(SERVER).sync_event(sid).unwrap().event,
        E::Established
    );
    // rdma_get_request on an id that is not synchronous: EINVAL.
    let e = net
        .call(CLIENT, |cm, dev, now| cm.get_request(dev, now, cid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
}

// ---- event channels, notify, listen ---------------------------------------------------------

#[test]
fn a_destroyed_event_channel_answers_ebadf() {
    let mut net = Net::new();
    let cm = net.cm(CLIENT);
    let ch = cm.create_event_channel();
    cm.destroy_event_channel(ch).unwrap();
    assert_eq!(net.event(CLIENT, ch).unwrap_err().errno, Errno::EBADF);
    let cm = net.cm(CLIENT);
    assert_eq!(
        cm.create_id(ch, RdmaPortSpace::Tcp).unwrap_err().errno,
        Errno::EBADF
    );
    assert_eq!(
        cm.destroy_event_channel(ch).unwrap_err().errno,
        Errno::EBADF
    );
    // A blocking wait entered after the destroy fails at once.
    let shared = shared_alone();
    let ch = shared.with(|cm, _| {
        let ch = cm.create_event_channel();
        cm.destroy_event_channel(ch).unwrap();
        ch
    });
    let e = shared.wait_event(ch, Duration::ZERO).unwrap_err();
    assert_eq!(e.errno, Errno::EBADF);
}

#[test]
fn rdma_notify_on_an_established_connection_is_eisconn() {
    let mut net = Net::new();
    let c = connected(&mut net);
    let e = net
        .call(SERVER, |cm, dev, now| cm.notify(dev, now, c.sid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EISCONN);
    let e = net
        .call(SERVER, |cm, dev, now| cm.establish(dev, now, c.sid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EISCONN);
}

/// `rdma_notify` with another event than COMM_EST (Linux `ib_cm_notify`): PATH_MIG is
/// `cm_migrate`, accepted on an ESTABLISHED connection only; anything else is EINVAL.
#[test]
fn rdma_notify_takes_path_mig_when_established_and_refuses_other_events() {
    let mut net = Net::new();
    let c = connected(&mut net);
    for id in [c.sid, c.cid] {
        let side = if id == c.sid { SERVER } else { CLIENT };
        net.call(side, |cm, _, _| cm.notify_other(id, true))
            .unwrap();
        let e = net
            .call(side, |cm, _, _| cm.notify_other(id, false))
            .unwrap_err();
        assert_eq!(e.errno, Errno::EINVAL);
    }
    // The listener has no connection: PATH_MIG is EINVAL there (`cm_migrate`).
    let e = net
        .call(SERVER, |cm, _, _| cm.notify_other(c.lid, true))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
}

#[test]
fn rdma_establish_a_second_time_on_the_active_side_is_einval() {
    let mut net = Net::new();
    let (sch, _) = net.listen(4);
    let cch = net.cm(CLIENT).create_event_channel();
    let cid = net.resolved(cch);
    // Without a QP: CONNECT_RESPONSE, then rdma_establish sends the RTU.
    let param = ConnParam {
        qp_num: 0x1234,
        ..ConnParam::rping_defaults()
    };
    net.call(CLIENT, |cm, dev, now| cm.connect(dev, now, cid, &param))
        .unwrap();
    net.step();
    let sid = net.expect(SERVER, sch, E::ConnectRequest).id;
    net.call(SERVER, |cm, dev, now| {
        qp(cm, dev, sid);
        cm.accept(dev, now, sid, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    net.expect(CLIENT, cch, E::ConnectResponse);
    net.call(CLIENT, |cm, dev, now| cm.establish(dev, now, cid))
        .unwrap();
    let e = net
        .call(CLIENT, |cm, dev, now| cm.establish(dev, now, cid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
}

#[test]
fn listen_backlog_0_takes_ucmas_max_backlog() {
    let mut net = Net::new();
    let (sch, _) = net.listen(0);
    let cch = net.cm(CLIENT).create_event_channel();
    for n in 0..8 {
        let id = net.resolved(cch);
        // Distinct QPNs: a REQ reusing a live request's QPN is a stale one (REJ 10).
        let p = ConnParam {
            qp_num: 0x90 + n,
            ..ConnParam::rping_defaults()
        };
        net.call(CLIENT, |cm, dev, now| cm.connect(dev, now, id, &p))
            .unwrap();
    }
    net.step();
    assert_eq!(net.cm(SERVER).pending_events(sch), 8);
    assert_eq!(net.cm(SERVER).counters().rx_backlog_full, 0);
}

// ---- a CONNECT_REQUEST is the listener's event ----------------------------------------------

/// The kernel reports a connection request on the listener's context (ucma.c
/// `ucma_event_handler`: `uevent->ctx` is the listen context, the new id only
/// `conn_req_ctx`), and librdmacm acks it there (`evt->id_priv`): a server may reject,
/// migrate or destroy the new id before acking its CONNECT_REQUEST (`ucma_process_conn_req`
/// itself migrates it for a synchronous listener), while the listener cannot be destroyed
/// until the ack.
#[test]
fn a_connect_request_counts_on_the_listener_not_the_new_id() {
    let mut net = Net::new();
    let (sch, lid) = net.listen(4);
    let cch = net.cm(CLIENT).create_event_channel();
    let cid = net.resolved(cch);
    net.call(CLIENT, |cm, dev, now| {
        cm.connect(dev, now, cid, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    let req = net
        .call(SERVER, |cm, dev, now| cm.get_cm_event(dev, now, sch))
        .unwrap();
    assert_eq!((req.event, req.listen_id), (E::ConnectRequest, Some(lid)));
    let pid = req.id;
    assert_eq!(net.cm(SERVER).unacked_events(pid), 0);
    assert_eq!(net.cm(SERVER).unacked_events(lid), 1);
    // Migrating the new id does not wait for the request's ack.
    let other = net.cm(SERVER).create_event_channel();
    net.cm(SERVER).migrate_id(pid, Some(other)).unwrap();
    // The listener is busy until the ack; the new id is not.
    let busy = net.call(SERVER, |cm, dev, now| cm.destroy_id(dev, now, lid));
    assert_eq!(busy.unwrap_err().errno, Errno::EBUSY);
    net.call(SERVER, |cm, dev, now| cm.reject(dev, now, pid, &[]))
        .unwrap();
    net.call(SERVER, |cm, dev, now| cm.destroy_id(dev, now, pid))
        .unwrap();
    net.cm(SERVER).ack_cm_event(req).unwrap();
    net.call(SERVER, |cm, dev, now| cm.destroy_id(dev, now, lid))
        .unwrap();
    net.step();
    net.expect(CLIENT, cch, E::Rejected);
}

// ---- a connect abandoned before its CONNECT_RESPONSE is read --------------------------------

#[test]
fn a_connect_abandoned_by_rdma_disconnect_rejects_only_at_rdma_destroy_id() {
    let mut net = Net::new();
    let (sch, _) = net.listen(4);
    let cch = net.cm(CLIENT).create_event_channel();
    let cid = net.resolved(cch);
    net.call(CLIENT, |cm, dev, now| {
        qp(cm, dev, cid);
        cm.connect(dev, now, cid, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    let sid = net.expect(SERVER, sch, E::ConnectRequest).id;
    net.call(SERVER, |cm, dev, now| {
        qp(cm, dev, sid);
        cm.accept(dev, now, sid, &ConnParam::rping_defaults())
    })
    .unwrap();
    net.step();
    // The REP is in; the application disconnects before reading CONNECT_RESPONSE: its QP goes
    // to ERR, nothing is sent (no DREQ outside ESTABLISHED, no DREP outside DREQ_RCVD).
    let before = net.mads_sent(CLIENT);
    net.call(CLIENT, |cm, dev, now| cm.disconnect(dev, now, cid))
        .unwrap();
    assert_eq!(net.mads_sent(CLIENT), before);
    // Reading the CONNECT_RESPONSE now fails at the QP step: CONNECT_ERROR, still nothing sent.
    let ev = net.expect(CLIENT, cch, E::ConnectError);
    assert!(ev.status < 0);
    assert_eq!(net.mads_sent(CLIENT), before);
    assert_eq!(net.cm(CLIENT).ib_cm_state(cid), Some(IbCmState::RepRcvd));
    // rdma_destroy_id sends the REJ (28, from REP_RCVD).
    net.call(CLIENT, |cm, dev, now| cm.destroy_id(dev, now, cid))
        .unwrap();
    assert_eq!(net.mads_sent(CLIENT), before + 1);
    net.step();
    let rej = net.expect(SERVER, sch, E::Rejected);
    assert_eq!(rej.status, 28);
}

// ---- device removal -------------------------------------------------------------------------

/// Removes host `h`'s device, as a hot-unplug: the RNIC first, then its CM learns of it.
fn remove_device(net: &mut Net, h: usize) -> Vec<CmIdHandle> {
    net.call(h, |cm, dev, _| {
        dev.remove();
        cm.device_removal()
    })
}

#[test]
fn device_removal_reaches_every_id_on_the_device_and_leaves_only_destroy() {
    let mut net = Net::new();
    let c = connected(&mut net);
    let idle = net.cm(SERVER).create_id(c.sch, RdmaPortSpace::Tcp).unwrap();
    let removed = remove_device(&mut net, SERVER);
    assert_eq!(removed, vec![c.lid, c.sid]);
    // The listener on the device's address and the connected id: DEVICE_REMOVAL, status 0.
    let mut got: Vec<(CmIdHandle, i32)> = (0..2)
        .map(|_| {
            let ev = net.expect(SERVER, c.sch, E::DeviceRemoval);
            (ev.id, ev.status)
        })
        .collect();
    got.sort();
    assert_eq!(got, vec![(c.lid, 0), (c.sid, 0)]);
    assert_eq!(net.event(SERVER, c.sch).unwrap_err().errno, Errno::EAGAIN);
    assert_eq!(
        net.cm(SERVER).state(c.sid),
        Some(RdmaCmState::DeviceRemoval)
    );
    // Every call but destroy: ENXIO (EIO where librdmacm touches the QP first).
    let sid = c.sid;
    let e = net
        .call(SERVER, |cm, dev, now| cm.disconnect(dev, now, sid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::EIO);
    net.cm(SERVER).detach_qp(sid).unwrap();
    let e = net
        .call(SERVER, |cm, dev, now| cm.disconnect(dev, now, sid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::ENXIO);
    let e = net
        .call(SERVER, |cm, dev, now| cm.notify(dev, now, sid))
        .unwrap_err();
    assert_eq!(e.errno, Errno::ENXIO);
    assert_eq!(
        net.cm(SERVER).listen(c.lid, 1).unwrap_err().errno,
        Errno::ENXIO
    );
    // The unbound id got nothing and still works, but cannot reach the device.
    assert_eq!(net.cm(SERVER).state(idle), Some(RdmaCmState::Idle));
    let e = net.cm(SERVER).bind_addr(idle, server_addr()).unwrap_err();
    assert_eq!(e.errno, Errno::ENODEV);
    // Destroy works and sends nothing.
    let before = net.mads_sent(SERVER);
    net.call(SERVER, |cm, dev, now| cm.destroy_id(dev, now, sid))
        .unwrap();
    net.call(SERVER, |cm, dev, now| cm.destroy_id(dev, now, c.lid))
        .unwrap();
    assert_eq!(net.mads_sent(SERVER), before);
}

#[test]
fn a_removed_device_raises_device_fatal_flushes_its_qps_and_then_answers_eio() {
    let mut net = Net::new();
    let c = connected(&mut net);
    let dev = net.sim.endpoint_mut(CLIENT).unwrap().nic_mut().device_mut();
    let mr = {
        let pd = dev.alloc_pd().unwrap();
        dev.reg_mr(pd, 64, AccessFlags::LOCAL_WRITE).unwrap()
    };
    dev.remove();
    assert_eq!(
        dev.get_async_event().unwrap().event_type,
        AsyncEventType::DeviceFatal
    );
    assert_eq!(dev.query_qp(c.cqp.handle).unwrap_err().errno, Errno::EIO);
    assert_eq!(dev.alloc_pd().unwrap_err().errno, Errno::EIO);
    let wr = SendWr::send(1, vec![mr.sge(0, 8)]);
    assert_eq!(
        dev.post_send(c.cqp.handle, &[wr]).unwrap_err().error.errno,
        Errno::EIO
    );
    // The QP's receive WRs (none posted here) would flush; the CQ stays readable.
    let mut out = Vec::new();
    assert!(dev.poll_cq(c.ccq, 16, &mut out).is_ok());
}

#[test]
fn the_peer_of_a_removed_device_hears_nothing_and_its_dreq_times_out() {
    let mut net = Net::new();
    let c = connected(&mut net);
    let before = net.mads_sent(SERVER);
    remove_device(&mut net, SERVER);
    net.step();
    // No DREQ, no REJ: the client sees nothing.
    assert_eq!(net.mads_sent(SERVER), before);
    assert_eq!(net.event(CLIENT, c.cch).unwrap_err().errno, Errno::EAGAIN);
    // Its next send retries out (the removed RNIC never ACKs)…
    let dev = net.sim.endpoint_mut(CLIENT).unwrap().nic_mut().device_mut();
    let pd = dev.alloc_pd().unwrap();
    let mr = dev.reg_mr(pd, 64, AccessFlags::LOCAL_WRITE).unwrap();
    dev.post_send(c.cqp.handle, &[SendWr::send(7, vec![mr.sge(0, 8)])])
        .unwrap();
    // …and its DREQ goes unanswered until the retries run out: DISCONNECTED −110.
    net.call(CLIENT, |cm, dev, now| cm.disconnect(dev, now, c.cid))
        .unwrap();
    net.run_for_s(120);
    let ev = net.expect(CLIENT, c.cch, E::Disconnected);
    assert_eq!(ev.status, -110);
    let dev = net.sim.endpoint_mut(CLIENT).unwrap().nic_mut().device_mut();
    let mut out = Vec::new();
    dev.poll_cq(c.ccq, 16, &mut out).unwrap();
    assert!(
        out.iter()
            .any(|wc| wc.wr_id == 7 && wc.status != WcStatus::Success),
        "{out:?}"
    );
    let _ = c.sqp;
}

#[test]
fn a_passive_id_not_accepted_yet_gets_no_device_removal_but_is_closed() {
    let mut net = Net::new();
    let (sch, lid) = net.listen(4);
    let cch = net.cm(CLIENT).create_event_channel();
    let cid = net.resolved(cch);
    let p = ConnParam {
        qp_num: 0x77,
        ..ConnParam::rping_defaults()
    };
    net.call(CLIENT, |cm, dev, now| cm.connect(dev, now, cid, &p))
        .unwrap();
    net.step();
    let sid = net.expect(SERVER, sch, E::ConnectRequest).id;
    remove_device(&mut net, SERVER);
    // Only the listener hears of it (ucma drops a not-accepted id's events)…
    let ev = net.expect(SERVER, sch, E::DeviceRemoval);
    assert_eq!(ev.id, lid);
    assert_eq!(net.event(SERVER, sch).unwrap_err().errno, Errno::EAGAIN);
    // …but the request is gone all the same.
    let e = net
        .call(SERVER, |cm, dev, now| {
            cm.accept(dev, now, sid, &ConnParam::rping_defaults())
        })
        .unwrap_err();
    assert_eq!(e.errno, Errno::ENXIO);
    net.call(SERVER, |cm, dev, now| cm.destroy_id(dev, now, sid))
        .unwrap();
}

// ---- address change -------------------------------------------------------------------------

#[test]
fn address_change_reaches_the_ids_on_the_device_and_changes_nothing_else() {
    let mut net = Net::new();
    let c = connected(&mut net);
    let cm = net.cm(CLIENT);
    let idle = cm.create_id(c.cch, RdmaPortSpace::Tcp).unwrap();
    let wildcard = cm.create_id(c.cch, RdmaPortSpace::Tcp).unwrap();
    cm.bind_addr(
        wildcard,
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
    )
    .unwrap();
    assert_eq!(cm.address_change(), vec![c.cid]);
    let ev = net.expect(CLIENT, c.cch, E::AddrChange);
    assert_eq!((ev.id, ev.status), (c.cid, 0));
    assert_eq!(net.event(CLIENT, c.cch).unwrap_err().errno, Errno::EAGAIN);
    let cm = net.cm(CLIENT);
    assert_eq!(cm.state(c.cid), Some(RdmaCmState::Connect));
    assert_eq!(cm.ib_cm_state(c.cid), Some(IbCmState::Established));
    assert_eq!(cm.state(idle), Some(RdmaCmState::Idle));
    // The connection goes on: an orderly disconnect still works.
    net.call(CLIENT, |cm, dev, now| cm.disconnect(dev, now, c.cid))
        .unwrap();
    net.step();
    net.expect(SERVER, c.sch, E::Disconnected);
    assert_eq!(
        net.sim
            .endpoint(CLIENT)
            .unwrap()
            .nic()
            .query_qp(c.cqp.handle)
            .unwrap()
            .0
            .qp_state,
        QpState::Err
    );
}
