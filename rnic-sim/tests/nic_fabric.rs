//! Two SimNics on the deterministic fabric: RC traffic as RoCEv2 datagrams with ICRC, byte-exact,
//! deterministic, and recordable to a pcap that tshark decodes.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use bytes::Bytes;
use rnic_sim::fabric::{FaultPlan, PathFaults, RunOutcome, SimFabric, Simulation};
use rnic_sim::nic::SimNic;
use rnic_sim::roce::pcap::PcapWriter;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::net::Ipv4Addr;
use std::process::Command;
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::{
    AccessFlags, CqHandle, Device, Gid, Mr, Qp, RecvWr, SendWr, SimTime, WcStatus, WorkCompletion,
};

struct Side {
    mr: Mr,
    cq: CqHandle,
    qp: Qp,
}

fn setup(nic: &mut SimNic, len: usize) -> Side {
    let spec = RcEndpointSpec {
        mr_len: len,
        mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        cqe: 256,
        shared_cq: true,
        sq_sig_all: true,
        ..RcEndpointSpec::default()
    }
    .queues(64, 2, 0);
    let ep = RcEndpoint::create(nic.device_mut(), &spec).unwrap();
    Side {
        mr: ep.mr,
        cq: ep.send_cq,
        qp: ep.qp,
    }
}

fn nic(last: u8) -> SimNic {
    let gid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last));
    SimNic::at_gid(SimDevice::new(SimDeviceConfig::new(
        format!("sim{last}"),
        gid,
    )))
}

/// Two connected NICs on a fabric with `plan` and `seed`; returns the simulation and both sides.
fn world(seed: u64, plan: FaultPlan, len: usize) -> (Simulation<SimNic>, Side, Side) {
    let mut a = nic(1);
    let mut b = nic(2);
    let sa = setup(&mut a, len);
    let sb = setup(&mut b, len);
    let ia = RcPeerInfo {
        gid: a.gid(),
        qpn: sa.qp.qp_num,
        psn: 0xFF_FFF0, // wraps after 16 packets
    };
    let ib = RcPeerInfo {
        gid: b.gid(),
        qpn: sb.qp.qp_num,
        psn: 0x12_3456,
    };
    let p = RcParams::default();
    connect_rc(a.device_mut(), sa.qp.handle, &ia, &ib, &p).unwrap();
    connect_rc(b.device_mut(), sb.qp.handle, &ib, &ia, &p).unwrap();
    let mut sim = Simulation::new(SimFabric::with_seed(seed, plan));
    sim.add_endpoint(a).unwrap();
    sim.add_endpoint(b).unwrap();
    (sim, sa, sb)
}

fn drain(nic: &mut SimNic, cq: CqHandle) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    while nic.poll_cq(cq, 64, &mut out).unwrap() > 0 {}
    out
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// SEND 10 KiB, WRITE 10 KiB and READ 10 KiB from host 0 to host 1 over the fabric; returns the
/// completions and the fabric trace hash.
fn exchange(sim: &mut Simulation<SimNic>, sa: &Side, sb: &Side) -> (Vec<WorkCompletion>, u64) {
    const N: u32 = 10 * 1024;
    let n = N as usize;
    let send = pattern(1, n);
    let write = pattern(2, n);
    let read = pattern(3, n);
    {
        let a = sim.endpoint_mut(0).unwrap();
        a.mr_write(sa.mr.handle, 0, &send).unwrap();
        a.mr_write(sa.mr.handle, N as u64, &write).unwrap();
    }
    {
        let b = sim.endpoint_mut(1).unwrap();
        b.mr_write(sb.mr.handle, 2 * N as u64, &read).unwrap();
        b.post_recv(sb.qp.handle, &[RecvWr::new(10, vec![sb.mr.sge(0, N)])])
            .unwrap();
    }
    let remote_write = sb.mr.addr + N as u64;
    let remote_read = sb.mr.addr + 2 * N as u64;
    sim.endpoint_mut(0)
        .unwrap()
        .post_send(
            sa.qp.handle,
            &[
                SendWr::send(1, vec![sa.mr.sge(0, N)]),
                SendWr::rdma_write(2, vec![sa.mr.sge(N as u64, N)], remote_write, sb.mr.rkey),
                SendWr::rdma_read(3, vec![sa.mr.sge(2 * N as u64, N)], remote_read, sb.mr.rkey),
            ],
        )
        .unwrap();
    assert_eq!(
        sim.run_until_idle(SimTime::from_millis(10_000)),
        RunOutcome::Idle
    );
    let mut wcs = drain(sim.endpoint_mut(0).unwrap(), sa.cq);
    wcs.extend(drain(sim.endpoint_mut(1).unwrap(), sb.cq));
    let mut got = vec![0u8; n];
    let b = sim.endpoint(1).unwrap();
    b.mr_read(sb.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, send, "SEND payload");
    b.mr_read(sb.mr.handle, N as u64, &mut got).unwrap();
    assert_eq!(got, write, "WRITE payload");
    let a = sim.endpoint(0).unwrap();
    a.mr_read(sa.mr.handle, 2 * N as u64, &mut got).unwrap();
    assert_eq!(got, read, "READ payload");
    (wcs, sim.fabric.trace_hash())
}

#[test]
fn rc_exchange_over_the_deterministic_fabric_is_byte_exact() {
    let (mut sim, sa, sb) = world(1, FaultPlan::new(PathFaults::perfect()), 64 * 1024);
    let (wcs, _) = exchange(&mut sim, &sa, &sb);
    let ids: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (10, WcStatus::Success)
        ]
    );
    let a = sim.endpoint(0).unwrap().datagram_counters();
    let b = sim.endpoint(1).unwrap().datagram_counters();
    assert_eq!(a.rx_decode_errors + b.rx_decode_errors, 0);
    assert_eq!(a.tx_datagrams, b.rx_datagrams);
    assert_eq!(b.tx_datagrams, a.rx_datagrams);
}

#[test]
fn same_seed_same_fabric_trace() {
    let plan = || FaultPlan::new(PathFaults::perfect());
    let (mut s1, a1, b1) = world(7, plan(), 64 * 1024);
    let (mut s2, a2, b2) = world(7, plan(), 64 * 1024);
    let (_, h1) = exchange(&mut s1, &a1, &b1);
    let (_, h2) = exchange(&mut s2, &a2, &b2);
    assert_eq!(h1, h2);
    assert_eq!(s1.fabric.trace(), s2.fabric.trace());
}

#[test]
fn corrupted_datagrams_are_counted_and_dropped_by_the_icrc() {
    let mut a = nic(1);
    let flow_src = std::net::SocketAddr::from(([10, 0, 0, 2], 4791));
    use rnic_sim::fabric::Endpoint;
    a.handle_datagram(
        SimTime::ZERO,
        flow_src,
        Bytes::from_static(&[0x04, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1, 1, 2, 3, 4]),
    );
    a.handle_datagram(SimTime::ZERO, flow_src, Bytes::from_static(&[1, 2, 3]));
    assert_eq!(a.datagram_counters().rx_decode_errors, 2);
    assert_eq!(a.datagram_counters().rx_datagrams, 0);
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn recorded_exchange_decodes_in_tshark_as_roce_without_malformed_packets() {
    let (mut sim, sa, sb) = world(3, FaultPlan::new(PathFaults::perfect()), 64 * 1024);
    sim.endpoint_mut(0).unwrap().start_capture();
    exchange(&mut sim, &sa, &sb);
    // Host 0 saw every datagram of the exchange (it sent or received each one).
    let captured = sim.endpoint_mut(0).unwrap().take_capture();
    assert!(captured.len() >= 3 * 10 + 3, "{} datagrams", captured.len());
    let dir = std::env::temp_dir().join(format!("rnic-nic-fabric-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("exchange.pcap");
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for c in &captured {
        w.write_datagram(c.at, &c.flow, &c.bytes).unwrap();
    }
    drop(w);
    if !tshark_available() {
        assert!(
            std::env::var_os("RNIC_REQUIRE_TSHARK").is_none(),
            "RNIC_REQUIRE_TSHARK is set but tshark is not on PATH"
        );
        println!("SKIP recorded_exchange_decodes_in_tshark: tshark not found on PATH");
        return;
    }
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args([
            "--disable-protocol",
            "rpcordma",
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), captured.len());
    for (i, line) in lines.iter().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert!(
            !fields[0].is_empty(),
            "packet {} not decoded as InfiniBand: {line}",
            i + 1
        );
        assert!(
            fields.iter().skip(1).all(|f| f.is_empty()),
            "packet {} malformed or with expert info: {line}",
            i + 1
        );
    }
    // The exchange has SENDs, WRITEs, a READ request and responses, and ACKs.
    for op in ["0", "6", "12", "13", "17"] {
        assert!(
            lines.iter().any(|l| l.split('\t').next() == Some(op)),
            "no opcode {op} in capture:\n{text}"
        );
    }
}
