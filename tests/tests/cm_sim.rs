//! The rdma_cm (cm-core) driving the simulated RNIC (rnic-sim) over the deterministic fabric:
//! two [`Host`]s on a `Simulation`, connection setup, data transfer, rdma_disconnect(3)
//! semantics, a crashed peer, and a pcap of the exchange cross-checked with tshark.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use cm_core::api::{
    CmEvent, CmEventType, CmIdHandle, ConnParam, EventChannel, RdmaCm, RdmaCmState,
};
use cm_core::engine::{CmConfig, IbCmId};
use cm_core::wire::RdmaPortSpace;
use rnic_sim::fabric::{Crash, FaultPlan, PathFaults, SimFabric, Simulation};
use rnic_sim::nic::SimNic;
use rnic_sim::roce::pcap::PcapWriter;
use rnic_sim::{SimDevice, SimDeviceConfig};
use rnic_testbed::host::Host;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use verbs_core::{
    AccessFlags, CqHandle, Device, Gid, Mr, Qp, QpCap, QpInitAttr, QpState, RecvWr, SendWr,
    SimTime, WcStatus, WorkCompletion,
};

const CLIENT: usize = 0;
const SERVER: usize = 1;
const PORT: u16 = 7471;
const MR_LEN: usize = 8192;
/// One step of the scenario: far more than a round trip on a perfect path, far less than any
/// CM timer (TimeWait 512 ms, REQ/DREQ retry 4608 ms).
const STEP_NS: u64 = 1_000_000;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn host(last: u8) -> Host {
    let gid = Gid::from_ip(ip(last));
    let nic = SimNic::at_gid(SimDevice::new(SimDeviceConfig::new(
        format!("sim{last}"),
        gid,
    )));
    let cfg = CmConfig {
        ca_guid: 0x0002_c903_0000_0000 | u64::from(last),
        seed: u64::from(last) * 0x9e37_79b9,
        ..CmConfig::default()
    };
    Host::new(nic, cfg).unwrap()
}

/// One side's resources: its event channel, connected id, QP, MR and CQ.
struct Side {
    ch: EventChannel,
    id: CmIdHandle,
    qp: Qp,
    mr: Mr,
    cq: CqHandle,
}

struct World {
    sim: Simulation<Host>,
    client: Side,
    server: Side,
    listen_id: CmIdHandle,
}

fn step(sim: &mut Simulation<Host>) {
    let t = sim.now().plus_nanos(STEP_NS);
    sim.run_until(t);
}

/// The next event of `ch` on host `h`, acked; `None` when the channel is empty.
fn event(sim: &mut Simulation<Host>, h: usize, ch: EventChannel) -> Option<CmEvent> {
    let now = sim.now();
    let (cm, dev) = sim.endpoint_mut(h).unwrap().split();
    let ev = cm.get_cm_event(dev, now, ch).ok()?;
    cm.ack_cm_event(ev.clone()).unwrap();
    Some(ev)
}

fn expect_event(
    sim: &mut Simulation<Host>,
    h: usize,
    ch: EventChannel,
    want: CmEventType,
) -> CmEvent {
    let ev = event(sim, h, ch).unwrap_or_else(|| panic!("host {h}: no event, expected {want:?}"));
    assert_eq!(ev.event, want, "host {h}: {ev:?}");
    ev
}

fn all_events(sim: &mut Simulation<Host>, h: usize, ch: EventChannel) -> Vec<CmEvent> {
    std::iter::from_fn(|| event(sim, h, ch)).collect()
}

/// PD, MR and CQ on `dev`, and the QP of `id` created through `rdma_create_qp`.
fn resources(cm: &mut RdmaCm, dev: &mut SimDevice, id: CmIdHandle) -> (Qp, Mr, CqHandle) {
    let pd = dev.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = dev.reg_mr(pd, MR_LEN, access).unwrap();
    let cq = dev.create_cq(64, None).unwrap();
    let init = QpInitAttr::rc(cq, cq, QpCap::uniform(16, 1, 0), true);
    let qp = cm.create_qp(dev, id, pd, &init).unwrap();
    (qp, mr, cq)
}

fn conn_param() -> ConnParam {
    ConnParam::rping_defaults()
}

fn qp_state(sim: &Simulation<Host>, h: usize, qp: Qp) -> QpState {
    sim.endpoint(h)
        .unwrap()
        .nic()
        .query_qp(qp.handle)
        .unwrap()
        .0
        .qp_state
}

fn drain(sim: &mut Simulation<Host>, h: usize, cq: CqHandle) -> Vec<WorkCompletion> {
    let nic = sim.endpoint_mut(h).unwrap().nic_mut();
    let mut out = Vec::new();
    while nic.poll_cq(cq, 16, &mut out).unwrap() > 0 {}
    out
}

/// Two hosts on a perfect fabric (captured on the client if `capture`), connected through the
/// rdma_cm: the client resolves, creates its QP and connects; the server listens and accepts.
/// Checks both ends ESTABLISHED with their QPs in RTS.
fn connected(capture: bool) -> World {
    let mut sim = Simulation::new(SimFabric::with_seed(
        1,
        FaultPlan::new(PathFaults::perfect()),
    ));
    sim.add_endpoint(host(1)).unwrap();
    sim.add_endpoint(host(2)).unwrap();
    if capture {
        sim.endpoint_mut(CLIENT).unwrap().nic_mut().start_capture();
    }
    let server_addr = SocketAddr::new(ip(2), PORT);

    // Server: bind + listen.
    let (sch, listen_id) = {
        let (cm, _) = sim.endpoint_mut(SERVER).unwrap().split();
        let ch = cm.create_event_channel();
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.bind_addr(id, server_addr).unwrap();
        cm.listen(id, 4).unwrap();
        (ch, id)
    };

    // Client: resolve address and route, create the QP, connect.
    let cch = sim
        .endpoint_mut(CLIENT)
        .unwrap()
        .split()
        .0
        .create_event_channel();
    let cid = {
        let (cm, _) = sim.endpoint_mut(CLIENT).unwrap().split();
        let id = cm.create_id(cch, RdmaPortSpace::Tcp).unwrap();
        cm.resolve_addr(id, None, server_addr).unwrap();
        id
    };
    expect_event(&mut sim, CLIENT, cch, CmEventType::AddrResolved);
    sim.endpoint_mut(CLIENT)
        .unwrap()
        .split()
        .0
        .resolve_route(cid)
        .unwrap();
    expect_event(&mut sim, CLIENT, cch, CmEventType::RouteResolved);
    let now = sim.now();
    let (cqp, cmr, ccq) = {
        let (cm, dev) = sim.endpoint_mut(CLIENT).unwrap().split();
        let r = resources(cm, dev, cid);
        cm.connect(dev, now, cid, &conn_param()).unwrap();
        r
    };
    step(&mut sim);

    // Server: the CONNECT_REQUEST names a new id; give it a QP and accept.
    let req = expect_event(&mut sim, SERVER, sch, CmEventType::ConnectRequest);
    assert_eq!(req.listen_id, Some(listen_id));
    assert_eq!(req.param.qp_num, cqp.qp_num);
    let sid = req.id;
    let now = sim.now();
    let (sqp, smr, scq) = {
        let (cm, dev) = sim.endpoint_mut(SERVER).unwrap().split();
        let r = resources(cm, dev, sid);
        cm.accept(dev, now, sid, &conn_param()).unwrap();
        r
    };
    step(&mut sim);

    // Fetching the CONNECT_RESPONSE moves the client's QP to RTS and sends the RTU (librdmacm's
    // work in rdma_get_cm_event); the server is ESTABLISHED once the RTU arrives.
    let est = expect_event(&mut sim, CLIENT, cch, CmEventType::Established);
    assert_eq!((est.status, est.param.qp_num), (0, sqp.qp_num));
    assert_eq!(qp_state(&sim, CLIENT, cqp), QpState::Rts);
    step(&mut sim);
    let est = expect_event(&mut sim, SERVER, sch, CmEventType::Established);
    assert_eq!(est.status, 0);
    assert_eq!(qp_state(&sim, CLIENT, cqp), QpState::Rts);
    assert_eq!(qp_state(&sim, SERVER, sqp), QpState::Rts);
    World {
        sim,
        client: Side {
            ch: cch,
            id: cid,
            qp: cqp,
            mr: cmr,
            cq: ccq,
        },
        server: Side {
            ch: sch,
            id: sid,
            qp: sqp,
            mr: smr,
            cq: scq,
        },
        listen_id,
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// SEND 1000 bytes (into a posted receive) and RDMA WRITE 3000 bytes client → server.
fn send_and_write(w: &mut World) {
    let send = pattern(1, 1000);
    let write = pattern(2, 3000);
    let (c, s) = (&w.client, &w.server);
    {
        let nic = w.sim.endpoint_mut(SERVER).unwrap().nic_mut();
        nic.post_recv(s.qp.handle, &[RecvWr::new(50, vec![s.mr.sge(0, 1024)])])
            .unwrap();
    }
    {
        let nic = w.sim.endpoint_mut(CLIENT).unwrap().nic_mut();
        nic.mr_write(c.mr.handle, 0, &send).unwrap();
        nic.mr_write(c.mr.handle, 4096, &write).unwrap();
        nic.post_send(
            c.qp.handle,
            &[
                SendWr::send(1, vec![c.mr.sge(0, 1000)]),
                SendWr::rdma_write(2, vec![c.mr.sge(4096, 3000)], s.mr.addr + 4096, s.mr.rkey),
            ],
        )
        .unwrap();
    }
    step(&mut w.sim);
    let cwc = drain(&mut w.sim, CLIENT, w.client.cq);
    let swc = drain(&mut w.sim, SERVER, w.server.cq);
    let st = |v: &[WorkCompletion]| v.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>();
    assert_eq!(st(&cwc), [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(st(&swc), [(50, WcStatus::Success)]);
    assert_eq!(swc[0].byte_len, 1000);
    let nic = w.sim.endpoint(SERVER).unwrap().nic();
    let mut got = vec![0u8; 1000];
    nic.mr_read(w.server.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, send, "SEND payload");
    let mut got = vec![0u8; 3000];
    nic.mr_read(w.server.mr.handle, 4096, &mut got).unwrap();
    assert_eq!(got, write, "RDMA WRITE payload");
}

fn post_recvs(w: &mut World, h: usize, ids: &[u64]) {
    let side = if h == CLIENT { &w.client } else { &w.server };
    let wrs: Vec<RecvWr> = ids
        .iter()
        .map(|&id| RecvWr::new(id, vec![side.mr.sge(0, 64)]))
        .collect();
    let (qp, nic) = (side.qp, w.sim.endpoint_mut(h).unwrap().nic_mut());
    nic.post_recv(qp.handle, &wrs).unwrap();
}

fn disconnect(w: &mut World, h: usize) {
    let id = if h == CLIENT {
        w.client.id
    } else {
        w.server.id
    };
    let now = w.sim.now();
    let (cm, dev) = w.sim.endpoint_mut(h).unwrap().split();
    cm.disconnect(dev, now, id).unwrap();
}

fn flushed(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// TimeWait with the default timers: ms(av.timeout) = 512 ms (docs/cm-semantics.md, Timers).
const TIMEWAIT_NS: u64 = 512_000_000;

/// The whole active/passive disconnect of rdma_disconnect(3), from the established connection,
/// with its checks: only the caller's QP goes to ERR and flushes (once, in post order), the
/// peer gets DISCONNECTED(0), both get TIMEWAIT_EXIT once after TimeWait.
fn orderly_disconnect(w: &mut World) {
    post_recvs(w, CLIENT, &[100, 101, 102]);
    post_recvs(w, SERVER, &[200, 201]);

    // Client: QP → ERR at once, its receives flush in post order; DREQ leaves.
    disconnect(w, CLIENT);
    assert_eq!(qp_state(&w.sim, CLIENT, w.client.qp), QpState::Err);
    step(&mut w.sim);
    let fl = WcStatus::WrFlushErr;
    assert_eq!(
        flushed(&drain(&mut w.sim, CLIENT, w.client.cq)),
        [(100, fl), (101, fl), (102, fl)]
    );
    // Server: DISCONNECTED(0), QP untouched, receives still posted.
    let ev = expect_event(&mut w.sim, SERVER, w.server.ch, CmEventType::Disconnected);
    assert_eq!((ev.id, ev.status), (w.server.id, 0));
    assert_eq!(qp_state(&w.sim, SERVER, w.server.qp), QpState::Rts);
    assert!(drain(&mut w.sim, SERVER, w.server.cq).is_empty());
    // The client waits for the DREP: no event yet.
    assert!(event(&mut w.sim, CLIENT, w.client.ch).is_none());

    // Server: its disconnect flushes its receives and sends the DREP.
    disconnect(w, SERVER);
    assert_eq!(qp_state(&w.sim, SERVER, w.server.qp), QpState::Err);
    let server_tw = w.sim.now();
    step(&mut w.sim);
    assert_eq!(
        flushed(&drain(&mut w.sim, SERVER, w.server.cq)),
        [(200, fl), (201, fl)]
    );
    let ev = expect_event(&mut w.sim, CLIENT, w.client.ch, CmEventType::Disconnected);
    assert_eq!((ev.id, ev.status), (w.client.id, 0));

    // TIMEWAIT_EXIT on both, not before TimeWait, then exactly once each.
    w.sim.run_until(server_tw.plus_nanos(TIMEWAIT_NS - STEP_NS));
    assert!(event(&mut w.sim, CLIENT, w.client.ch).is_none());
    assert!(event(&mut w.sim, SERVER, w.server.ch).is_none());
    assert_eq!(
        w.sim.run_until_idle(SimTime::from_millis(60_000)),
        rnic_sim::fabric::RunOutcome::Idle
    );
    let done = w.sim.now();
    assert!(done >= server_tw.plus_nanos(TIMEWAIT_NS), "{done:?}");
    for (h, ch, id) in [
        (CLIENT, w.client.ch, w.client.id),
        (SERVER, w.server.ch, w.server.id),
    ] {
        let evs = all_events(&mut w.sim, h, ch);
        let kinds: Vec<(CmEventType, CmIdHandle)> = evs.iter().map(|e| (e.event, e.id)).collect();
        assert_eq!(kinds, [(CmEventType::TimewaitExit, id)], "host {h}");
    }
    // Nothing more: no second flush, no further event.
    assert!(drain(&mut w.sim, CLIENT, w.client.cq).is_empty());
    assert!(drain(&mut w.sim, SERVER, w.server.cq).is_empty());
}

#[test]
fn handshake_establishes_both_qps_in_rts_and_carries_send_and_rdma_write() {
    let mut w = connected(false);
    send_and_write(&mut w);
    // The connection stays up: no stray CM events.
    assert!(event(&mut w.sim, CLIENT, w.client.ch).is_none());
    assert!(event(&mut w.sim, SERVER, w.server.ch).is_none());
    let listener = w.sim.endpoint(SERVER).unwrap().cm().state(w.listen_id);
    assert_eq!(listener, Some(RdmaCmState::Listen));
}

#[test]
fn rdma_disconnect_flushes_own_qp_only_and_both_sides_get_disconnected_then_timewait_exit() {
    let mut w = connected(false);
    orderly_disconnect(&mut w);
}

#[test]
fn disconnect_from_crashed_server_ends_in_disconnected_etimedout_after_dreq_retries() {
    let mut w = connected(false);
    let start = w.sim.now();
    *w.sim.fabric.plan_mut() = FaultPlan::new(PathFaults::perfect()).with_crash(Crash {
        host: ip(2),
        at: start,
        restart: None,
    });
    let tx_before = w
        .sim
        .endpoint(CLIENT)
        .unwrap()
        .nic()
        .datagram_counters()
        .tx_datagrams;
    disconnect(&mut w, CLIENT);
    // 16 DREQs, 4608 ms apart: the give-up comes after 16 × 4608 ms = 73.728 s (§3.2).
    w.sim.run_until(start.plus_nanos(73_000_000_000));
    assert!(event(&mut w.sim, CLIENT, w.client.ch).is_none());
    w.sim.run_until(start.plus_nanos(75_000_000_000));
    let ev = expect_event(&mut w.sim, CLIENT, w.client.ch, CmEventType::Disconnected);
    assert_eq!((ev.id, ev.status), (w.client.id, -110));
    // The client's QP is in ERR (no RC traffic): everything it sent was a DREQ.
    let tx = w
        .sim
        .endpoint(CLIENT)
        .unwrap()
        .nic()
        .datagram_counters()
        .tx_datagrams
        - tx_before;
    assert_eq!(tx, 16, "DREQ transmissions");
    // DREQ timeout → TimeWait (§3.3): TIMEWAIT_EXIT follows, no second DISCONNECTED.
    w.sim.run_until_idle(SimTime::from_millis(200_000));
    let later: Vec<CmEventType> = all_events(&mut w.sim, CLIENT, w.client.ch)
        .iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(later, [CmEventType::TimewaitExit]);
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The value tshark -V shows for `name` in one frame's text (first occurrence).
fn field<'a>(frame: &'a str, name: &str) -> Option<&'a str> {
    frame
        .lines()
        .filter_map(|l| l.trim().split_once(": "))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[test]
fn pcap_of_the_whole_exchange_decodes_in_tshark_with_our_comm_ids_qpns_and_service_id() {
    let mut w = connected(true);
    send_and_write(&mut w);
    orderly_disconnect(&mut w);
    let comm_id = |w: &World, h: usize, id: CmIdHandle| {
        w.sim
            .endpoint(h)
            .unwrap()
            .cm()
            .engine()
            .local_comm_id(IbCmId(id.0))
            .unwrap()
    };
    let c_comm = comm_id(&w, CLIENT, w.client.id);
    let s_comm = comm_id(&w, SERVER, w.server.id);
    let captured = w.sim.endpoint_mut(CLIENT).unwrap().nic_mut().take_capture();
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cm_sim_exchange.pcap");
    let mut pw = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for c in &captured {
        pw.write_datagram(c.at, &c.flow, &c.bytes).unwrap();
    }
    drop(pw);
    if !tshark_available() {
        println!("SKIP pcap_of_the_whole_exchange: tshark not found on PATH");
        return;
    }
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["--disable-protocol", "rpcordma", "-V"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let cm_frames: Vec<&str> = text
        .split("\nFrame ")
        .filter_map(|f| f.split_once("MAD Header").map(|(_, mad)| mad))
        .collect();
    let attr = |f: &str| field(f, "Attribute ID").unwrap_or("?").to_string();
    let attrs: Vec<String> = cm_frames.iter().map(|f| attr(f)).collect();
    assert_eq!(
        attrs,
        ["0x0010", "0x0013", "0x0014", "0x0015", "0x0016"],
        "CM frames in the capture:\n{text}"
    );
    let hex8 = |v: u32| format!("0x{v:08x}");
    let hex6 = |v: u32| format!("0x{v:06x}");
    let expect = |f: &str, want: &[(&str, String)]| {
        for (name, value) in want {
            let got = field(f, name);
            assert!(
                got.is_some_and(|g| g.starts_with(value.as_str())),
                "field {name:?}: tshark shows {got:?}, expected {value:?}\n{f}"
            );
        }
    };
    let [req, rep, rtu, dreq, drep] = cm_frames[..] else {
        unreachable!()
    };
    expect(
        req,
        &[
            ("Local Communication ID", hex8(c_comm)),
            ("Local QPN", hex6(w.client.qp.qp_num)),
            ("Prefix", "0000000001".into()),
            ("Protocol", "0x06".into()),
            ("Destination Port", format!("0x{PORT:04x}")),
            ("IP CM Source IP", "10.0.0.1".into()),
            ("IP CM Destination IP", "10.0.0.2".into()),
        ],
    );
    expect(
        rep,
        &[
            ("Local Communication ID", hex8(s_comm)),
            ("Remote Communication ID", hex8(c_comm)),
            ("Local QPN", hex6(w.server.qp.qp_num)),
        ],
    );
    expect(
        rtu,
        &[
            ("Local Communication ID", hex8(c_comm)),
            ("Remote Communication ID", hex8(s_comm)),
        ],
    );
    expect(
        dreq,
        &[
            ("Local Communication ID", hex8(c_comm)),
            ("Remote Communication ID", hex8(s_comm)),
            ("Remote QPN/EECN", hex6(w.server.qp.qp_num)),
        ],
    );
    expect(
        drep,
        &[
            ("Local Communication ID", hex8(s_comm)),
            ("Remote Communication ID", hex8(c_comm)),
        ],
    );
    assert!(!text.contains("Malformed"), "{text}");
}
