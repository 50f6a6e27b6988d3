//! The rdma_cm (cm-core) over real UDP between two OS processes, on the wall clock: this test
//! process is the client; it re-runs its own executable as the server (the `server_process`
//! test, which only acts when `RNIC_CM_PEER` is set). Each side is a [`Host`] (SimNic + RdmaCm)
//! on a `UdpDriver`, on loopback 127.0.0.2 (client) and 127.0.0.3 (server), UDP ports chosen by
//! the OS. The two socket addresses are exchanged over the child's stdin/stdout, then a `READY`
//! line says the server listens; everything else goes through the CM.
//!
//! Also here, `#[ignore]`d: the connect/disconnect rate of the CM between the two processes
//! next to TCP connect/close on loopback, measured in the same run (docs/performance.md):
//!
//!     cargo test --release -p rnic-testbed --test cm_udp -- --ignored --nocapture

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use cm_core::api::{CmEvent, CmEventType, CmIdHandle, ConnParam, EventChannel, RdmaCmState};
use cm_core::engine::CmConfig;
use cm_core::wire::RdmaPortSpace;
use rnic_sim::fabric::udp::{SpawnedUdpDriver, UdpDriver, UdpHandle};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use rnic_testbed::host::Host;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use verbs_core::{
    AccessFlags, CompChannel, CqHandle, Device, Gid, Mr, PdHandle, Qp, QpCap, QpInitAttr, QpState,
    RecvWr, SendWr, WcStatus, WorkCompletion,
};

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(30);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// The rdma_cm port the server listens on (in the service ID; not a UDP port).
const CM_PORT: u16 = 7471;
/// Bytes of the SEND (5 packets at path MTU 1024).
const SEND_LEN: u32 = 5000;
const MR_LEN: usize = 8192;

/// Short CM timers: packet lifetime and ACK delay 12 give av.timeout 14 on both sides, so
/// TimeWait = ms(14) = 64 ms instead of 512 ms (docs/cm-semantics.md, Timers). The REQ/DREQ
/// retransmission timeout stays at Linux's 2·ms(12) + ms(20) ≈ 4.1 s (no loss on loopback).
/// The QP's transport timeout is 4.096 µs × 2^14 ≈ 67 ms.
fn cm_config(last: u8) -> CmConfig {
    CmConfig {
        ca_guid: 0x0002_c903_0000_0000 | u64::from(last),
        seed: u64::from(last) * 0x9e37_79b9,
        packet_life_time: 12,
        ack_delay: 12,
        ..CmConfig::default()
    }
}

/// One process's side: the host on its UDP driver, an event channel, and verbs resources
/// (PD, MR, a CQ on a completion channel) made before the driver started.
struct Node {
    driver: SpawnedUdpDriver<Host>,
    ch: EventChannel,
    pd: PdHandle,
    mr: Mr,
    cq: CqHandle,
    comp: CompChannel,
}

impl Node {
    fn new(ip: Ipv4Addr) -> Node {
        let socket = UdpSocket::bind((ip, 0)).unwrap();
        let addr = socket.local_addr().unwrap();
        let last = ip.octets()[3];
        let dev = SimDevice::new(SimDeviceConfig::new(
            format!("sim{last}"),
            Gid::from_ipv4(ip),
        ));
        let mut nic = SimNic::new(dev, addr);
        let comp = CompChannel::new();
        let pd = nic.alloc_pd().unwrap();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = nic.reg_mr(pd, MR_LEN, access).unwrap();
        let cq = nic.create_cq(64, Some(&comp)).unwrap();
        let mut host = Host::new(nic, cm_config(last)).unwrap();
        let ch = host.split().0.create_event_channel();
        let driver = UdpDriver::spawn(host, socket).unwrap();
        Node {
            driver,
            ch,
            pd,
            mr,
            cq,
            comp,
        }
    }

    fn h(&self) -> &UdpHandle<Host> {
        self.driver.handle()
    }

    /// Routes the peer's GID to its UDP socket.
    fn set_peer(&self, ip: Ipv4Addr, addr: SocketAddr) {
        self.h()
            .with(|host, _| host.nic_mut().set_peer_addr(Gid::from_ipv4(ip), addr));
    }

    /// The next CM event (acked), waiting at most [`WAIT`] for one.
    fn event(&self, who: &str, want: CmEventType) -> CmEvent {
        let ch = self.ch;
        assert!(
            self.h()
                .wait_until(WAIT, |host| host.cm().pending_events(ch) > 0),
            "{who}: no CM event within {WAIT:?} (expected {want:?})"
        );
        self.h().with(|host, now| {
            let (cm, dev) = host.split();
            let ev = cm.get_cm_event(dev, now, ch).unwrap();
            cm.ack_cm_event(ev.clone()).unwrap();
            ev
        })
    }

    /// The next CM event, which must be `want` with status `status`.
    fn expect(&self, who: &str, want: CmEventType, status: i32) -> CmEvent {
        let ev = self.event(who, want);
        assert_eq!((ev.event, ev.status), (want, status), "{who}: {ev:?}");
        ev
    }

    /// An RC QP for `id` through `rdma_create_qp`, on the node's PD and CQ.
    fn create_qp(&self, id: CmIdHandle) -> Qp {
        let init = QpInitAttr::rc(self.cq, self.cq, QpCap::uniform(16, 1, 0), true);
        let pd = self.pd;
        self.h().with(|host, _| {
            let (cm, dev) = host.split();
            cm.create_qp(dev, id, pd, &init).unwrap()
        })
    }

    /// `rdma_destroy_qp` + `rdma_destroy_id`.
    fn destroy(&self, id: CmIdHandle, qp: Qp) {
        self.h().with(|host, now| {
            let (cm, dev) = host.split();
            dev.destroy_qp(qp.handle).unwrap();
            cm.detach_qp(id).unwrap();
            cm.destroy_id(dev, now, id).unwrap();
        });
    }

    fn disconnect(&self, id: CmIdHandle) {
        self.h().with(|host, now| {
            let (cm, dev) = host.split();
            cm.disconnect(dev, now, id).unwrap();
        });
    }

    fn qp_state(&self, qp: Qp) -> QpState {
        self.h()
            .with(|host, _| host.nic().query_qp(qp.handle).unwrap().0.qp_state)
    }

    /// Every completion now in the CQ.
    fn poll(&self) -> Vec<WorkCompletion> {
        let cq = self.cq;
        let mut wcs = Vec::new();
        self.h()
            .with(|host, _| while host.nic_mut().poll_cq(cq, 16, &mut wcs).unwrap() > 0 {});
        wcs
    }

    /// Waits on the completion channel until `n` completions have been polled.
    fn completions(&self, who: &str, n: usize) -> Vec<WorkCompletion> {
        let cq = self.cq;
        let mut wcs = Vec::new();
        loop {
            self.h().with(|host, _| {
                let nic = host.nic_mut();
                while nic.poll_cq(cq, 16, &mut wcs).unwrap() > 0 {}
                nic.req_notify_cq(cq, false).unwrap();
                // A completion between the poll and re-arming would not notify.
                while nic.poll_cq(cq, 16, &mut wcs).unwrap() > 0 {}
            });
            if wcs.len() >= n {
                return wcs;
            }
            self.comp.get_cq_event_timeout(WAIT).unwrap_or_else(|e| {
                panic!(
                    "{who}: {} of {n} completions within {WAIT:?}: {e}",
                    wcs.len()
                )
            });
        }
    }
}

fn conn_param() -> ConnParam {
    ConnParam::rping_defaults()
}

fn pattern(len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 8) as u8 ^ 0x5a)
        .collect()
}

/// The client's resolve → route → QP → connect → ESTABLISHED. Returns the id and its QP.
fn client_connect(c: &Node) -> (CmIdHandle, Qp) {
    let server = SocketAddr::new(SERVER_IP.into(), CM_PORT);
    let ch = c.ch;
    let id = c.h().with(|host, _| {
        let (cm, _) = host.split();
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.resolve_addr(id, None, server).unwrap();
        id
    });
    c.expect("client", CmEventType::AddrResolved, 0);
    c.h()
        .with(|host, _| host.split().0.resolve_route(id).unwrap());
    c.expect("client", CmEventType::RouteResolved, 0);
    let qp = c.create_qp(id);
    c.h().with(|host, now| {
        let (cm, dev) = host.split();
        cm.connect(dev, now, id, &conn_param()).unwrap();
    });
    let est = c.expect("client", CmEventType::Established, 0);
    assert_eq!(est.id, id);
    (id, qp)
}

/// The server's bind + listen on [`CM_PORT`]; returns the listening id.
fn server_listen(s: &Node) -> CmIdHandle {
    let ch = s.ch;
    s.h().with(|host, _| {
        let (cm, _) = host.split();
        let id = cm.create_id(ch, RdmaPortSpace::Tcp).unwrap();
        cm.bind_addr(id, SocketAddr::new(SERVER_IP.into(), CM_PORT))
            .unwrap();
        cm.listen(id, 8).unwrap();
        id
    })
}

/// The server's QP for a CONNECT_REQUEST's id, optionally a posted receive, then `rdma_accept`.
fn server_accept(s: &Node, id: CmIdHandle, recv: Option<u32>) -> Qp {
    let qp = s.create_qp(id);
    let mr = s.mr;
    s.h().with(|host, now| {
        let (cm, dev) = host.split();
        if let Some(len) = recv {
            dev.post_recv(qp.handle, &[RecvWr::new(7, vec![mr.sge(0, len)])])
                .unwrap();
        }
        cm.accept(dev, now, id, &conn_param()).unwrap();
    });
    qp
}

/// `PEER <udp socket> <tcp listener>` on one line (the TCP listener is for the rate test).
fn peer_line(udp: SocketAddr, tcp: SocketAddr) -> String {
    format!("PEER {udp} {tcp}\n")
}

fn parse_peer(line: &str) -> (SocketAddr, SocketAddr) {
    let at = line.find("PEER ").expect("no PEER marker") + 5;
    let f: Vec<&str> = line[at..].split_whitespace().collect();
    assert_eq!(f.len(), 2, "bad peer line {line:?}");
    (f[0].parse().unwrap(), f[1].parse().unwrap())
}

/// The server: the single exchange (`RNIC_CM_PEER=once`) or `n` accept/disconnect cycles and
/// a TCP accept loop (`RNIC_CM_PEER=cycles:<n>`). Prints `OK` when everything checked out.
#[test]
#[allow(clippy::disallowed_methods)] // a process of the real-UDP test: its TCP accept thread
fn server_process() {
    let Some(mode) = std::env::var_os("RNIC_CM_PEER") else {
        return; // only runs as the child of the tests below
    };
    let mode = mode.into_string().unwrap();
    let s = Node::new(SERVER_IP);
    let tcp = TcpListener::bind((SERVER_IP, 0)).unwrap();
    let mut out = std::io::stdout();
    out.write_all(peer_line(s.driver.local_addr(), tcp.local_addr().unwrap()).as_bytes())
        .unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let (client_udp, _) = parse_peer(&line);
    s.set_peer(CLIENT_IP, client_udp);
    let listen_id = server_listen(&s);
    match mode.strip_prefix("cycles:") {
        None => {
            out.write_all(b"READY\n").unwrap();
            out.flush().unwrap();
            server_once(&s, listen_id);
        }
        Some(n) => {
            let n: usize = n.parse().unwrap();
            std::thread::spawn(move || {
                for stream in tcp.incoming() {
                    // Read to the client's FIN, then close: the orderly close of both halves.
                    let mut stream = stream.unwrap();
                    let _ = stream.read(&mut [0u8; 1]);
                }
            });
            out.write_all(b"READY\n").unwrap();
            out.flush().unwrap();
            server_cycles(&s, n);
        }
    }
    // Stay up (the TCP listener too) until the client closes our stdin.
    while std::io::stdin().read_line(&mut line).unwrap() > 0 {}
    println!("OK");
}

/// Accept, receive the SEND and check it, get DISCONNECTED(0) with the QP untouched,
/// disconnect, TIMEWAIT_EXIT.
fn server_once(s: &Node, listen_id: CmIdHandle) {
    let req = s.expect("server", CmEventType::ConnectRequest, 0);
    assert_eq!(req.listen_id, Some(listen_id));
    let id = req.id;
    let qp = server_accept(s, id, Some(SEND_LEN));
    s.expect("server", CmEventType::Established, 0);
    let wcs = s.completions("server", 1);
    assert_eq!(
        (wcs.len(), wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
        (1, 7, WcStatus::Success, SEND_LEN)
    );
    let mr = s.mr;
    let mut got = vec![0u8; SEND_LEN as usize];
    s.h()
        .with(|host, _| host.nic().mr_read(mr.handle, 0, &mut got).unwrap());
    assert!(got == pattern(SEND_LEN), "SEND payload differs");

    let ev = s.expect("server", CmEventType::Disconnected, 0);
    assert_eq!(ev.id, id);
    // Receiving the DREQ does not touch the QP (docs/cm-semantics.md).
    assert_eq!(s.qp_state(qp), QpState::Rts);
    s.disconnect(id);
    assert_eq!(s.qp_state(qp), QpState::Err);
    let ev = s.expect("server", CmEventType::TimewaitExit, 0);
    assert_eq!(ev.id, id);
    assert_eq!(
        s.h().with(|host, _| host.cm().state(listen_id)),
        Some(RdmaCmState::Listen)
    );
}

/// `n` times: CONNECT_REQUEST → accept → ESTABLISHED → DISCONNECTED → disconnect → destroy.
fn server_cycles(s: &Node, n: usize) {
    let mut qps = std::collections::BTreeMap::new();
    let mut done = 0;
    while done < n {
        let ev = s.event("server", CmEventType::ConnectRequest);
        match ev.event {
            CmEventType::ConnectRequest => {
                qps.insert(ev.id, server_accept(s, ev.id, None));
            }
            CmEventType::Established => {}
            CmEventType::Disconnected => {
                assert_eq!(ev.status, 0, "{ev:?}");
                s.disconnect(ev.id);
                s.destroy(ev.id, qps.remove(&ev.id).unwrap());
                done += 1;
            }
            other => panic!("server: unexpected {other:?}: {ev:?}"),
        }
    }
}

/// The server child process and the client's node, connected out of band.
struct Pair {
    child: Child,
    child_out: BufReader<ChildStdout>,
    stdin: ChildStdin,
    client: Node,
    server_tcp: SocketAddr,
}

/// The next line of the child's stdout that contains `marker`.
fn read_marker(out: &mut BufReader<ChildStdout>, marker: &str) -> String {
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "server exited before printing {marker}"
        );
        if line.contains(marker) {
            return line;
        }
    }
}

/// Starts the server child in `mode`, exchanges the addresses and waits for its READY.
fn pair(mode: &str) -> Pair {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "server_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RNIC_CM_PEER", mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child_out = BufReader::new(child.stdout.take().unwrap());
    // The test harness prints its own text too; the server's line carries the PEER marker.
    let (server_udp, server_tcp) = parse_peer(&read_marker(&mut child_out, "PEER "));
    let client = Node::new(CLIENT_IP);
    client.set_peer(SERVER_IP, server_udp);
    let mut stdin = child.stdin.take().unwrap();
    let unused_tcp = SocketAddr::new(CLIENT_IP.into(), 0);
    stdin
        .write_all(peer_line(client.driver.local_addr(), unused_tcp).as_bytes())
        .unwrap();
    stdin.flush().unwrap();
    read_marker(&mut child_out, "READY");
    Pair {
        child,
        child_out,
        stdin,
        client,
        server_tcp,
    }
}

impl Pair {
    /// Waits for the server to exit and checks it printed `OK`.
    fn finish(mut self) {
        drop(self.stdin);
        let mut rest = String::new();
        let _ = self.child_out.read_to_string(&mut rest);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "server failed:\n{rest}");
        assert!(
            rest.lines().any(|l| l.trim() == "OK"),
            "server said:\n{rest}"
        );
        self.client.driver.shutdown().unwrap();
    }
}

#[test]
fn cm_over_udp_between_two_processes_connects_sends_and_disconnects_with_flush_and_timewait() {
    let p = pair("once");
    let c = &p.client;
    let (id, qp) = client_connect(c);
    assert_eq!(c.qp_state(qp), QpState::Rts);

    // A SEND of SEND_LEN bytes; the server checks every byte.
    let mr = c.mr;
    c.h().with(|host, _| {
        let nic = host.nic_mut();
        nic.mr_write(mr.handle, 0, &pattern(SEND_LEN)).unwrap();
        nic.post_send(qp.handle, &[SendWr::send(1, vec![mr.sge(0, SEND_LEN)])])
            .unwrap();
    });
    let wcs = c.completions("client", 1);
    let st: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(st, [(1, WcStatus::Success)]);

    // rdma_disconnect: the client's QP goes to ERR at once and its receives flush in order.
    c.h().with(|host, _| {
        let wrs: Vec<RecvWr> = (100..103)
            .map(|i| RecvWr::new(i, vec![mr.sge(0, 64)]))
            .collect();
        host.nic_mut().post_recv(qp.handle, &wrs).unwrap();
    });
    c.disconnect(id);
    assert_eq!(c.qp_state(qp), QpState::Err);
    let fl = WcStatus::WrFlushErr;
    let st: Vec<(u64, WcStatus)> = c.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(st, [(100, fl), (101, fl), (102, fl)]);

    // The server's DREP (after its own DISCONNECTED and disconnect) ends the client's wait.
    let ev = c.expect("client", CmEventType::Disconnected, 0);
    assert_eq!(ev.id, id);
    let ev = c.expect("client", CmEventType::TimewaitExit, 0);
    assert_eq!(ev.id, id);
    // Nothing more: no second flush, no further event.
    assert!(c.poll().is_empty());
    assert_eq!(c.h().with(|host, _| host.cm().pending_events(c.ch)), 0);
    p.finish();
}

fn per_second(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// Connect/disconnect rate of the CM between the two processes, and TCP connect/close on the
/// same loopback addresses in the same run. Prints both; asserts nothing about speed.
#[test]
#[allow(clippy::disallowed_methods)] // a wall-clock measurement is this test's point
#[ignore = "benchmark: cargo test --release -p rnic-testbed --test cm_udp -- --ignored --nocapture"]
fn bench_cm_connect_disconnect_vs_tcp_over_loopback() {
    const WARMUP: usize = 200;
    const CYCLES: usize = 2000;
    let p = pair(&format!("cycles:{}", WARMUP + CYCLES));
    let c = &p.client;
    let cycle = || {
        let (id, qp) = client_connect(c);
        c.disconnect(id);
        c.expect("client", CmEventType::Disconnected, 0);
        c.destroy(id, qp);
    };
    for _ in 0..WARMUP {
        cycle();
    }
    let t = Instant::now();
    for _ in 0..CYCLES {
        cycle();
    }
    let cm = t.elapsed();
    // TCP: connect (3-way handshake), shutdown the write half, read the server's FIN.
    let tcp_cycle = || {
        let mut s = TcpStream::connect(p.server_tcp).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0);
    };
    for _ in 0..WARMUP {
        tcp_cycle();
    }
    let t = Instant::now();
    for _ in 0..CYCLES {
        tcp_cycle();
    }
    let tcp = t.elapsed();
    println!(
        "CM  connect+disconnect over UDP, 2 processes: {CYCLES} cycles in {cm:?} = {:.0}/s ({:.1} µs each)",
        per_second(CYCLES, cm),
        cm.as_secs_f64() * 1e6 / CYCLES as f64
    );
    println!(
        "TCP connect+close on loopback:                {CYCLES} cycles in {tcp:?} = {:.0}/s ({:.1} µs each)",
        per_second(CYCLES, tcp),
        tcp.as_secs_f64() * 1e6 / CYCLES as f64
    );
    let stats = c.h().stats();
    println!("client UDP stats: {stats:?}");
    p.finish();
}
