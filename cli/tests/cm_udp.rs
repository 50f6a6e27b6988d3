//! The rdma_cm (cm-core) over real UDP between two OS processes, on the wall clock: this test
//! process is the client; it re-runs its own executable as the server (the `server_process`
//! test, which only acts when `RNIC_CM_PEER` is set). Each side is a [`Host`] (SimNic + RdmaCm)
//! on a `UdpDriver`, on loopback 127.0.0.2 (client) and 127.0.0.3 (server), UDP ports chosen by
//! the OS. The two socket addresses are exchanged over the child's stdin/stdout, then a `READY`
//! line says the server listens; everything else goes through the CM.
//!
//! The node ([`CmNode`]) is the library's (`rnic_cli::bench::cm`): `rnic bench --only cm`
//! measures the connect/disconnect rate of the CM between two processes on it, next to TCP
//! connect/close (docs/performance.md).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use cm_core::api::{CmEventType, RdmaCmState};
use rnic_cli::bench::cm::{CmNode, CM_PORT, WAIT};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use verbs_core::{Device, Qp, QpState, RecvWr, SendWr, WcStatus, WorkCompletion};

const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// Bytes of the SEND (5 packets at path MTU 1024).
const SEND_LEN: u32 = 5000;

fn qp_state(n: &CmNode, qp: Qp) -> QpState {
    n.handle()
        .with(|host, _| host.nic().query_qp(qp.handle).unwrap().0.qp_state)
}

/// Every completion now in the node's CQ.
fn poll(n: &CmNode) -> Vec<WorkCompletion> {
    let cq = n.cq();
    let mut wcs = Vec::new();
    n.handle()
        .with(|host, _| while host.nic_mut().poll_cq(cq, 16, &mut wcs).unwrap() > 0 {});
    wcs
}

/// Waits on the completion channel until `n` completions have been polled.
fn completions(node: &CmNode, who: &str, n: usize) -> Vec<WorkCompletion> {
    let cq = node.cq();
    let mut wcs = Vec::new();
    loop {
        node.handle().with(|host, _| {
            let nic = host.nic_mut();
            while nic.poll_cq(cq, 16, &mut wcs).unwrap() > 0 {}
            nic.req_notify_cq(cq, false).unwrap();
            // A completion between the poll and re-arming would not notify.
            while nic.poll_cq(cq, 16, &mut wcs).unwrap() > 0 {}
        });
        if wcs.len() >= n {
            return wcs;
        }
        node.comp().get_cq_event_timeout(WAIT).unwrap_or_else(|e| {
            panic!(
                "{who}: {} of {n} completions within {WAIT:?}: {e}",
                wcs.len()
            )
        });
    }
}

fn pattern(len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 8) as u8 ^ 0x5a)
        .collect()
}

/// `PEER <udp socket>` on one line.
fn peer_line(udp: SocketAddr) -> String {
    format!("PEER {udp}\n")
}

fn parse_peer(line: &str) -> SocketAddr {
    let at = line.find("PEER ").expect("no PEER marker") + 5;
    line[at..].trim().parse().unwrap()
}

/// The server (`RNIC_CM_PEER=once`): the single exchange. Prints `OK` when everything checked
/// out.
#[test]
fn server_process() {
    if std::env::var_os("RNIC_CM_PEER").is_none() {
        return; // only runs as the child of the test below
    }
    let s = CmNode::new(SERVER_IP).unwrap();
    let mut out = std::io::stdout();
    out.write_all(peer_line(s.local_addr()).as_bytes()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    s.set_peer(CLIENT_IP, parse_peer(&line));
    let listen_id = s
        .listen(SocketAddr::new(SERVER_IP.into(), CM_PORT))
        .unwrap();
    out.write_all(b"READY\n").unwrap();
    out.flush().unwrap();
    server_once(&s, listen_id);
    // Stay up until the client closes our stdin.
    while std::io::stdin().read_line(&mut line).unwrap() > 0 {}
    println!("OK");
}

/// Accept, receive the SEND and check it, get DISCONNECTED(0) with the QP untouched,
/// disconnect, TIMEWAIT_EXIT.
fn server_once(s: &CmNode, listen_id: cm_core::api::CmIdHandle) {
    let req = s.expect(CmEventType::ConnectRequest, 0).unwrap();
    assert_eq!(req.listen_id, Some(listen_id));
    let id = req.id;
    let qp = s.accept(id, Some(SEND_LEN)).unwrap();
    s.expect(CmEventType::Established, 0).unwrap();
    let wcs = completions(s, "server", 1);
    assert_eq!(
        (wcs.len(), wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
        (1, 7, WcStatus::Success, SEND_LEN)
    );
    let mr = s.mr();
    let mut got = vec![0u8; SEND_LEN as usize];
    s.handle()
        .with(|host, _| host.nic().mr_read(mr.handle, 0, &mut got).unwrap());
    assert!(got == pattern(SEND_LEN), "SEND payload differs");

    let ev = s.expect(CmEventType::Disconnected, 0).unwrap();
    assert_eq!(ev.id, id);
    // Receiving the DREQ does not touch the QP (docs/cm-semantics.md).
    assert_eq!(qp_state(s, qp), QpState::Rts);
    s.disconnect(id).unwrap();
    assert_eq!(qp_state(s, qp), QpState::Err);
    let ev = s.expect(CmEventType::TimewaitExit, 0).unwrap();
    assert_eq!(ev.id, id);
    assert_eq!(
        s.handle().with(|host, _| host.cm().state(listen_id)),
        Some(RdmaCmState::Listen)
    );
}

/// The server child process and the client's node, connected out of band.
struct Pair {
    child: Child,
    child_out: BufReader<ChildStdout>,
    stdin: ChildStdin,
    client: CmNode,
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

/// Starts the server child, exchanges the addresses and waits for its READY.
fn pair() -> Pair {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "server_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RNIC_CM_PEER", "once")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child_out = BufReader::new(child.stdout.take().unwrap());
    // The test harness prints its own text too; the server's line carries the PEER marker.
    let server_udp = parse_peer(&read_marker(&mut child_out, "PEER "));
    let client = CmNode::new(CLIENT_IP).unwrap();
    client.set_peer(SERVER_IP, server_udp);
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(peer_line(client.local_addr()).as_bytes())
        .unwrap();
    stdin.flush().unwrap();
    read_marker(&mut child_out, "READY");
    Pair {
        child,
        child_out,
        stdin,
        client,
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
        self.client.shutdown().unwrap();
    }
}

#[test]
fn cm_over_udp_between_two_processes_connects_sends_and_disconnects_with_flush_and_timewait() {
    let p = pair();
    let c = &p.client;
    let (id, qp) = c
        .connect(SocketAddr::new(SERVER_IP.into(), CM_PORT))
        .unwrap();
    assert_eq!(qp_state(c, qp), QpState::Rts);

    // A SEND of SEND_LEN bytes; the server checks every byte.
    let mr = c.mr();
    c.handle().with(|host, _| {
        let nic = host.nic_mut();
        nic.mr_write(mr.handle, 0, &pattern(SEND_LEN)).unwrap();
        nic.post_send(qp.handle, &[SendWr::send(1, vec![mr.sge(0, SEND_LEN)])])
            .unwrap();
    });
    let wcs = completions(c, "client", 1);
    let st: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(st, [(1, WcStatus::Success)]);

    // rdma_disconnect: the client's QP goes to ERR at once and its receives flush in order.
    c.handle().with(|host, _| {
        let wrs: Vec<RecvWr> = (100..103)
            .map(|i| RecvWr::new(i, vec![mr.sge(0, 64)]))
            .collect();
        host.nic_mut().post_recv(qp.handle, &wrs).unwrap();
    });
    c.disconnect(id).unwrap();
    assert_eq!(qp_state(c, qp), QpState::Err);
    let fl = WcStatus::WrFlushErr;
    let st: Vec<(u64, WcStatus)> = poll(c).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(st, [(100, fl), (101, fl), (102, fl)]);

    // The server's DREP (after its own DISCONNECTED and disconnect) ends the client's wait.
    let ev = c.expect(CmEventType::Disconnected, 0).unwrap();
    assert_eq!(ev.id, id);
    let ev = c.expect(CmEventType::TimewaitExit, 0).unwrap();
    assert_eq!(ev.id, id);
    // Nothing more: no second flush, no further event.
    assert!(poll(c).is_empty());
    let ch = c.channel();
    assert_eq!(c.handle().with(|host, _| host.cm().pending_events(ch)), 0);
    p.finish();
}
