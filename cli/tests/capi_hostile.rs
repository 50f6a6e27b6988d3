//! Unmodified C programs under `rnic exec` on a shared network (issue 25): what another
//! process on the host can send at a librnic program's RoCEv2 socket must neither end its
//! connection nor grow its memory without bound.
//!
//! * A datagram from the client's IP on another port — a 1-byte one, a well-formed CM DREQ, a
//!   well-formed RC SEND, 100 of each — during a live `rping` session: before issue 25 the
//!   first one moved the client's route to the attacker's socket and the session died
//!   (server status 12, client hung). Now the session completes, the attacker receives
//!   nothing.
//! * Junk from many spoofed source addresses (one loopback address each, random bytes and
//!   REQs for a port nobody listens on) at an idle `rping -s`: its resident set stays bounded
//!   (the learned routes are capped, junk that does not decode is never remembered).
//!   `RNIC_JUNK_SOURCES` sets how many (default 100 000; the closing note of issue 25 used
//!   10^6).
//!
//!     cargo test -p rnic-cli --test capi_hostile -- --nocapture

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions
#![allow(clippy::disallowed_methods)] // drives real processes and sockets on the wall clock

mod common_programs;

use bytes::Bytes;
use cm_core::wire::{CmMessage, Dreq};
use common_programs::{
    lines_starting_with, program_timeout, tools_available, Net, Program, Running, LISTEN_LOG,
    LISTEN_MARKER, POLL,
};
use rnic_sim::roce::{encode, Flow, Opcode, Packet};
use rnic_sim::{gsi_packet, GSI_QPN};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Instant;

/// The RoCEv2 port every librnic process listens on.
const ROCE: u16 = 4791;

/// Waits (up to the program timeout) until `cond` holds for `p`, or `p` exits.
fn wait_for(p: &mut Running, what: &str, cond: impl Fn(&Running) -> bool) {
    let deadline = Instant::now() + program_timeout();
    while !cond(p) {
        assert!(p.poll().is_none(), "the program exited before {what}");
        assert!(Instant::now() < deadline, "no {what} in time");
        std::thread::sleep(POLL);
    }
}

/// The three forgeries from `from` to `to`: one byte, a well-formed CM DREQ to QP1, a
/// well-formed RC SEND ONLY to QP `qpn` (each with the ICRC right for its own socket).
fn forgeries(from: SocketAddr, to: SocketAddr, qpn: u32) -> Vec<Bytes> {
    let flow = Flow::new(from, to);
    let dreq = CmMessage::Dreq(Dreq {
        local_comm_id: 0x1234_5678,
        remote_comm_id: 0x9abc_def0,
        remote_qpn_eecn: qpn,
        private_data: Vec::new(),
    })
    .encode(0x42, 0)
    .unwrap();
    let mad = encode(
        &gsi_packet(GSI_QPN, 0, Bytes::copy_from_slice(&dreq)),
        &flow,
    )
    .unwrap()
    .freeze();
    let send = encode(
        &Packet::bare(Opcode::RcSendOnly, qpn, 0, Bytes::from_static(&[0xa5; 64])),
        &flow,
    )
    .unwrap()
    .freeze();
    vec![Bytes::from_static(&[0]), mad, send]
}

#[test]
fn a_datagram_from_the_clients_ip_on_another_port_does_not_end_an_rping_session() {
    let name = "rping_hijack";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let net = Net::new(36);
    let (server_ip, port) = (net.server_ip(), net.port_arg());
    let count = "3000";
    let mut server = Program::new(
        &server_ip,
        &[
            "rping", "-s", "-a", &server_ip, "-p", &port, "-v", "-C", count,
        ],
    );
    server.env = vec![("RUST_LOG".into(), LISTEN_LOG.into())];
    let client = Program::new(
        &net.client_ip(),
        &[
            "rping", "-c", "-a", &server_ip, "-p", &port, "-v", "-V", "-C", count,
        ],
    );
    let mut s = Running::spawn("server", &server).unwrap();
    wait_for(&mut s, "rdma_listen", |s| {
        s.stderr_text().contains(LISTEN_MARKER)
    });
    let mut c = Running::spawn("client", &client).unwrap();
    wait_for(&mut c, "ping 20", |c| {
        c.stdout_text().contains("rdma-ping-20:")
    });
    // The attacker: the client's IP, another port, at the server's RoCEv2 socket.
    let attacker = UdpSocket::bind((net.client_ip().as_str(), 5555)).unwrap();
    let to: SocketAddr = format!("{server_ip}:{ROCE}").parse().unwrap();
    let from = attacker.local_addr().unwrap();
    for qpn in 0..100u32 {
        for d in forgeries(from, to, 0x11 + qpn) {
            attacker.send_to(&d, to).unwrap();
        }
    }
    let mid_session = c.poll().is_none() && s.poll().is_none();
    let deadline = Instant::now() + program_timeout();
    while (c.poll().is_none() || s.poll().is_none()) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    let (s, c) = (s.finish(), c.finish());
    let report = format!("{s:?}\n{c:?}");
    assert!(mid_session, "the session ended before the attack\n{report}");
    assert!(s.succeeded() && c.succeeded(), "a side failed\n{report}");
    assert_eq!(
        lines_starting_with(&c.stdout, "ping data: ").len(),
        3000,
        "{report}"
    );
    attacker.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    let got = attacker.recv_from(&mut buf);
    assert!(
        got.is_err(),
        "the attacker's socket received a datagram from {:?}\n{report}",
        got.map(|(_, a)| a)
    );
}

/// The resident set of the `rping` process `rnic exec` runs (it or its descendant), kB.
fn rss_kb(pid: u32) -> u64 {
    let target = find_rping(pid).unwrap_or(pid);
    let status = std::fs::read_to_string(format!("/proc/{target}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// `pid` itself if it is `rping`, else its first descendant that is.
fn find_rping(pid: u32) -> Option<u32> {
    let comm = |p: u32| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
    if comm(pid).trim() == "rping" {
        return Some(pid);
    }
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find_map(find_rping)
}

/// `n` junk datagrams at `to`, each from its own loopback address from 127.100.0.1 on: every
/// eighth a REQ for a port nobody listens on (valid, so the CM answers it and its route may be
/// learned), the rest random bytes.
fn junk(to: SocketAddr, n: u32) {
    let first = u32::from(Ipv4Addr::new(127, 100, 0, 1));
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..n {
        let ip = Ipv4Addr::from(first + i);
        let Ok(s) = UdpSocket::bind((ip, 0)) else {
            continue;
        };
        let from = s.local_addr().unwrap();
        let bytes = if i % 8 == 0 {
            let req = rnic_cli_req(from, to, i);
            encode(
                &gsi_packet(GSI_QPN, 0, Bytes::copy_from_slice(&req)),
                &Flow::new(from, to),
            )
            .unwrap()
            .freeze()
        } else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Bytes::from(x.to_le_bytes().repeat(1 + (i % 16) as usize))
        };
        let _ = s.send_to(&bytes, to);
    }
}

/// A CM REQ from `from` for rdma_cm port 1 of `to` (nobody listens there: REJ 8).
fn rnic_cli_req(from: SocketAddr, to: SocketAddr, i: u32) -> Vec<u8> {
    use cm_core::engine::{CmConfig, CmEngine, ReqParams};
    use cm_core::wire::{ip_service_id, IpCmHeader, RdmaPortSpace};
    use verbs_core::{Gid, SimTime};
    let mut cm = CmEngine::new(CmConfig {
        seed: u64::from(i),
        ..CmConfig::default()
    });
    let id = cm.create_id();
    let hdr = IpCmHeader {
        src_port: from.port(),
        src_addr: from.ip(),
        dst_addr: to.ip(),
    };
    let req = ReqParams {
        service_id: ip_service_id(RdmaPortSpace::Tcp, 1),
        local_gid: Gid::from_ip(from.ip()),
        remote_gid: Gid::from_ip(to.ip()),
        local_qpn: 0x100 + (i & 0xffff),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        private_data: hdr.encode().to_vec(),
    };
    cm.send_req(SimTime::ZERO, id, &req).unwrap();
    cm.poll_transmit().unwrap().1.to_vec()
}

#[test]
fn junk_from_many_spoofed_sources_leaves_an_idle_rping_server_bounded() {
    let name = "rping_junk";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let sources: u32 = std::env::var("RNIC_JUNK_SOURCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let net = Net::new(37);
    let (server_ip, port) = (net.server_ip(), net.port_arg());
    let mut server = Program::new(&server_ip, &["rping", "-s", "-a", &server_ip, "-p", &port]);
    server.env = vec![
        ("RUST_LOG".into(), LISTEN_LOG.into()),
        ("RNIC_STATS".into(), "1".into()),
    ];
    let mut s = Running::spawn("server", &server).unwrap();
    wait_for(&mut s, "rdma_listen", |s| {
        s.stderr_text().contains(LISTEN_MARKER)
    });
    let pid = s_pid(&s);
    let before = rss_kb(pid);
    let start = Instant::now();
    junk(format!("{server_ip}:{ROCE}").parse().unwrap(), sources);
    let sent_in = start.elapsed();
    // The progress thread has taken in everything once the socket's queue is empty.
    let to: SocketAddr = format!("{server_ip}:{ROCE}").parse().unwrap();
    let deadline = Instant::now() + program_timeout();
    while rx_queue(to).is_some_and(|q| q > 0) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    let after = rss_kb(pid);
    let alive = s.poll().is_none();
    let s = s.finish();
    println!(
        "idle rping -s: RSS {before} kB before, {after} kB after {sources} junk datagrams from \
         {sources} addresses (sent in {sent_in:.2?})"
    );
    assert!(alive, "the server died\n{s:?}");
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} kB to {after} kB\n{s:?}"
    );
}

/// The process id of a running program.
fn s_pid(r: &Running) -> u32 {
    r.pid()
}

/// Bytes queued on the UDP socket bound at `addr`, from `/proc/net/udp` (`tx_queue:rx_queue`
/// in hex, column 5).
fn rx_queue(addr: SocketAddr) -> Option<u64> {
    let SocketAddr::V4(a) = addr else { return None };
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(a.ip().octets()),
        a.port()
    );
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    table.lines().skip(1).find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        if cols.get(1) != Some(&want.as_str()) {
            return None;
        }
        let (_, rx) = cols.get(4)?.split_once(':')?;
        u64::from_str_radix(rx, 16).ok()
    })
}
