//! One RC exchange between two OS processes over loopback UDP: this test process is the
//! requester; it re-runs its own executable as the responder (the `responder_process` test,
//! which only acts when `RNIC_RC_PEER` is set). QP numbers, PSNs, the rkey and the socket
//! addresses are exchanged out of band over the child's stdin/stdout, as `ibv_rc_pingpong`
//! does over TCP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use rnic_sim::fabric::udp::{SpawnedUdpDriver, UdpDriver};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;
use verbs_core::manual::{connect_rc, RcEndpoint, RcEndpointSpec, RcParams, RcPeerInfo};
use verbs_core::{
    AccessFlags, CompChannel, CqHandle, Device, Gid, Mr, Qp, RecvWr, SendWr, WcStatus,
    WorkCompletion,
};

const LEN: u32 = 64 * 1024;
const WAIT: Duration = Duration::from_secs(30);

struct Side {
    driver: SpawnedUdpDriver<SimNic>,
    channel: CompChannel,
    mr: Mr,
    cq: CqHandle,
    qp: Qp,
    info: RcPeerInfo,
}

/// A NIC with GID `ip` on a UDP socket bound to `ip:0`, with one MR, a CQ on a completion
/// channel and an RC QP, driven by a real-UDP driver thread.
fn side(ip: Ipv4Addr, psn: u32) -> Side {
    let socket = UdpSocket::bind((ip, 0)).unwrap();
    let addr = socket.local_addr().unwrap();
    let gid = Gid::from_ipv4(ip);
    let mut nic = SimNic::new(SimDevice::new(SimDeviceConfig::new("sim", gid)), addr);
    let channel = CompChannel::new();
    let spec = RcEndpointSpec {
        mr_len: 2 * LEN as usize,
        mr_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        cqe: 64,
        shared_cq: true,
        channel: Some(channel.clone()),
        sq_sig_all: true,
        ..RcEndpointSpec::default()
    }
    .queues(16, 1, 0);
    let ep = RcEndpoint::create(nic.device_mut(), &spec).unwrap();
    let info = ep.info(gid, psn);
    let driver = UdpDriver::spawn(nic, socket).unwrap();
    Side {
        driver,
        channel,
        mr: ep.mr,
        cq: ep.send_cq,
        qp: ep.qp,
        info,
    }
}

/// `PEER qpn psn gid-ip socket rkey addr` on one line.
fn info_line(s: &Side) -> String {
    format!(
        "PEER {} {} {} {} {} {}\n",
        s.info.qpn,
        s.info.psn,
        s.info.gid.to_ip(),
        s.driver.local_addr(),
        s.mr.rkey,
        s.mr.addr
    )
}

struct Remote {
    info: RcPeerInfo,
    addr: SocketAddr,
    rkey: u32,
    va: u64,
}

fn parse_line(line: &str) -> Remote {
    let at = line.find("PEER ").expect("no PEER marker") + 5;
    let f: Vec<&str> = line[at..].split_whitespace().collect();
    assert_eq!(f.len(), 6, "bad peer line {line:?}");
    Remote {
        info: RcPeerInfo {
            qpn: f[0].parse().unwrap(),
            psn: f[1].parse().unwrap(),
            gid: Gid::from_ip(f[2].parse().unwrap()),
        },
        addr: f[3].parse().unwrap(),
        rkey: f[4].parse().unwrap(),
        va: f[5].parse().unwrap(),
    }
}

fn connect(s: &Side, r: &Remote) {
    let (qp, local) = (s.qp.handle, s.info);
    let (peer, peer_addr) = (r.info, r.addr);
    s.driver.handle().with(|nic, _| {
        nic.set_peer_addr(peer.gid, peer_addr);
        // Real time on a shared machine: the peer process may reach RTR, or be scheduled,
        // late. A 1.07 s ACK timeout (4.096 µs × 2^18) × 7 retries rides that out, where the
        // default 67 ms × 7 ran out under load.
        let params = RcParams {
            timeout: 18,
            ..RcParams::default()
        };
        connect_rc(nic.device_mut(), qp, &local, &peer, &params).unwrap();
        nic.req_notify_cq(s.cq, false).unwrap();
    });
}

/// Waits on the completion channel until `n` completions have been polled.
fn wait_completions(s: &Side, n: usize) -> Vec<WorkCompletion> {
    let mut wcs = Vec::new();
    let cq = s.cq;
    loop {
        s.driver.handle().with(|nic, _| {
            while nic.poll_cq(cq, 16, &mut wcs).unwrap() > 0 {}
            nic.req_notify_cq(cq, false).unwrap();
            // Completions that arrived between the poll and re-arming would not notify.
            while nic.poll_cq(cq, 16, &mut wcs).unwrap() > 0 {}
        });
        if wcs.len() >= n {
            return wcs;
        }
        s.channel
            .get_cq_event_timeout(WAIT)
            .expect("no completion within 30 s");
    }
}

fn pattern(len: u32, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 253) as u8 ^ seed ^ (i >> 9) as u8)
        .collect()
}

/// The responder: posts a receive, then checks the WRITE and the SEND that the requester
/// makes, and prints `OK` when every byte matched.
#[test]
fn responder_process() {
    if std::env::var_os("RNIC_RC_PEER").is_none() {
        return; // only runs as the child of rc_exchange_between_two_processes
    }
    let s = side(Ipv4Addr::new(127, 0, 0, 3), 0x00_0100);
    let (qp, mr) = (s.qp.handle, s.mr);
    let mut out = std::io::stdout();
    out.write_all(info_line(&s).as_bytes()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    connect(&s, &parse_line(&line));
    // In RTR now (receives are refused in RESET). A SEND that arrives before this receive is
    // posted gets an RNR NAK and is retried (rnr_retry 7 = infinite).
    s.driver.handle().with(|nic, _| {
        nic.post_recv(qp, &[RecvWr::new(7, vec![mr.sge(0, LEN)])])
            .unwrap();
    });
    // Like rping's handshake: the requester starts only once this side can receive, so the
    // outcome does not depend on how fast this process is scheduled.
    out.write_all(b"READY\n").unwrap();
    out.flush().unwrap();
    let wcs = wait_completions(&s, 1);
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
        (7, WcStatus::Success, LEN)
    );
    let mut got = vec![0u8; 2 * LEN as usize];
    s.driver
        .handle()
        .with(|nic, _| nic.mr_read(mr.handle, 0, &mut got).unwrap());
    assert_eq!(&got[..LEN as usize], &pattern(LEN, 1)[..], "SEND payload");
    assert_eq!(&got[LEN as usize..], &pattern(LEN, 2)[..], "WRITE payload");
    println!("OK");
}

#[test]
fn rc_exchange_between_two_processes() {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "responder_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RNIC_RC_PEER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child_out = BufReader::new(child.stdout.take().unwrap());
    // The test harness prints its own text too; the peer's line carries the PEER marker.
    let remote = loop {
        let mut line = String::new();
        assert!(
            child_out.read_line(&mut line).unwrap() > 0,
            "child exited early"
        );
        if line.contains("PEER ") {
            break parse_line(&line);
        }
    };
    let s = side(Ipv4Addr::new(127, 0, 0, 2), 0xFF_FFF8);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(info_line(&s).as_bytes()).unwrap();
    stdin.flush().unwrap();
    connect(&s, &remote);
    loop {
        let mut line = String::new();
        assert!(
            child_out.read_line(&mut line).unwrap() > 0,
            "child exited early"
        );
        if line.contains("READY") {
            break;
        }
    }
    let (qp, mr) = (s.qp.handle, s.mr);
    s.driver.handle().with(|nic, _| {
        nic.mr_write(mr.handle, 0, &pattern(LEN, 1)).unwrap();
        nic.mr_write(mr.handle, u64::from(LEN), &pattern(LEN, 2))
            .unwrap();
        // WRITE first, then the SEND that tells the responder it is done (RC keeps order).
        nic.post_send(
            qp,
            &[
                SendWr::rdma_write(
                    1,
                    vec![mr.sge(u64::from(LEN), LEN)],
                    remote.va + u64::from(LEN),
                    remote.rkey,
                ),
                SendWr::send(2, vec![mr.sge(0, LEN)]),
            ],
        )
        .unwrap();
    });
    let wcs = wait_completions(&s, 2);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut child_out, &mut rest);
    let status = child.wait().unwrap();
    assert!(status.success(), "responder failed:\n{rest}");
    assert!(
        rest.lines().any(|l| l.trim() == "OK"),
        "responder said:\n{rest}"
    );
    let stats = s.driver.handle().stats();
    s.driver.shutdown().unwrap();
    println!("requester UDP stats: {stats:?}");
}
