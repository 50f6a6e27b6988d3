//! `rnic flood`: a connection-request flood at an rdma_cm listener over loopback UDP, to test a
//! server under attack — many REQs from many addresses, none of which will ever answer the
//! REP.
//!
//! Each REQ is what a real active side sends — the CM engine's own REQ (a RoCEv2 UD SEND to
//! QP1 carrying a CM REQ with an IP-CM header and Linux's timeout fields) for a fresh id: a
//! new comm ID, starting PSN and random QPN each, one CA GUID per flood — from one of
//! `sources` loopback addresses in turn (`first_source`, the next one, …; any 127/8 address
//! is local on Linux). With `ping_shaped` the REQ's private data also carries
//! a valid `rnic ping` client's parameters, so a ping server cannot refuse it on its contents:
//! the worst case, a phantom client. The flood only sends; it never reads its sockets —
//! unless `complete`: then each phantom waits for its REP and answers with the RTU, completing
//! the handshake, and is silent from then on (a client that connected and went away: what a
//! server must not wait for).

use crate::ping::params::Params;
use crate::ping::{DisconnectBy, PingOp};
use bytes::Bytes;
use cm_core::engine::{CmConfig, CmEngine, IbCmEventKind, IbCmId, ReqParams};
use cm_core::wire::{ip_service_id, IpCmHeader, RdmaPortSpace};
use rnic_sim::rng::Rng;
use rnic_sim::roce::{decode_bytes, encode, Flow};
use rnic_sim::{gsi_packet, gsi_payload, GSI_QPN};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use verbs_core::{Gid, SimTime, QPN_MASK};

/// Sockets kept open at once; with more sources, each REQ binds its own socket.
const MAX_OPEN_SOCKETS: u32 = 1024;

/// What to send (the options of `rnic flood`).
#[derive(Debug, Clone, clap::Args)]
pub struct FloodOptions {
    /// The listener's `IP:PORT` (an `rnic ping --listen`, or any rdma_cm listener on rnic).
    #[arg(long)]
    pub target: SocketAddr,
    /// REQs to send.
    #[arg(long, default_value_t = 1_000_000)]
    pub count: u64,
    /// Source addresses, used round robin, from `--first-source` on.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub sources: u32,
    /// The first source address; all must stay in 127.0.0.0/8 (every such address is local
    /// on Linux). The default range starts far from the 127.1–127.64 addresses `rnic ping`
    /// clients take, so that the flood does not speak for a real client's address.
    #[arg(long, default_value = "127.128.0.1")]
    pub first_source: Ipv4Addr,
    /// Carry a valid `rnic ping` client's parameters: phantom clients a ping server cannot
    /// refuse on their contents.
    #[arg(long)]
    pub ping_shaped: bool,
    /// Seed of the REQs' random IDs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// REQs per second at most (0: as fast as the sockets take them).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Complete each handshake: wait (up to 2 s) for the REP and send the RTU, then stay
    /// silent (a phantom that connected). One REQ at a time.
    #[arg(long)]
    pub complete: bool,
}

/// What was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodReport {
    /// REQs the kernel accepted.
    pub sent: u64,
    /// Source addresses used.
    pub sources: u32,
    /// REQs refused because nothing listens at the target (ECONNREFUSED: an earlier REQ drew
    /// an ICMP port unreachable).
    pub unreachable: u64,
    /// REQs the kernel refused for another reason (e.g. ENOBUFS).
    pub send_errors: u64,
    /// Handshakes completed (RTU sent), with `complete`.
    pub completed: u64,
    /// Wall time of the flood.
    pub elapsed: Duration,
}

/// Sends the flood.
///
/// # Errors
/// `InvalidInput` for a target that is not IPv4 or a source range that leaves 127.0.0.0/8; a
/// source address cannot be bound; the REQ cannot be encoded.
#[allow(clippy::disallowed_methods)] // a driver: real sockets and the wall clock for its rate
pub fn run(opts: &FloodOptions) -> std::io::Result<FloodReport> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    if !opts.target.is_ipv4() {
        return Err(invalid(format!(
            "--target {}: an IPv4 address (the sources are 127.0.0.0/8 addresses)",
            opts.target
        )));
    }
    let sources = opts.sources.max(1);
    let first = u32::from(opts.first_source);
    let last = first.checked_add(sources - 1);
    if first >> 24 != 127 || last.is_none_or(|l| l >> 24 != 127) {
        return Err(invalid(format!(
            "--first-source {} --sources {sources}: the addresses must stay in 127.0.0.0/8",
            opts.first_source
        )));
    }
    let mut rng = Rng::new(opts.seed);
    // Linux's REQ, as rdma_cm sends it (timeouts, retries, path), from one CA of its own.
    let mut cm = CmEngine::new(CmConfig {
        ca_guid: rng.next_u64(),
        seed: rng.next_u64(),
        ..CmConfig::default()
    });
    let mut open: BTreeMap<u32, UdpSocket> = BTreeMap::new();
    let start = Instant::now();
    let (mut sent, mut unreachable, mut send_errors, mut completed) = (0, 0, 0, 0);
    for i in 0..opts.count {
        if opts.rate > 0 && i % 16 == 0 {
            // Paced in steps of 16 REQs (a burst of hundreds would overflow the target's
            // socket buffer at any rate): sleep until the i-th is due.
            let due = Duration::from_nanos(i.saturating_mul(1_000_000_000) / opts.rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let k = (i % u64::from(sources)) as u32;
        let ip = Ipv4Addr::from(first + k);
        let fresh;
        let socket = if sources <= MAX_OPEN_SOCKETS {
            match open.entry(k) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(bind(ip, opts.target)?),
            }
        } else {
            fresh = bind(ip, opts.target)?;
            &fresh
        };
        let from = socket.local_addr()?;
        let (id, datagram) = req_datagram(&mut cm, &mut rng, from, opts.target, opts.ping_shaped)?;
        match socket.send(&datagram) {
            Ok(_) => sent += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => unreachable += 1,
            Err(_) => send_errors += 1,
        }
        if opts.complete {
            completed += u64::from(complete(&mut cm, id, socket, opts.target)?);
        } else {
            cm.destroy_id(SimTime::ZERO, id);
            while cm.poll_transmit().is_some() {}
        }
    }
    Ok(FloodReport {
        sent,
        sources: u32::try_from(opts.count).map_or(sources, |c| c.min(sources)),
        unreachable,
        send_errors,
        completed,
        elapsed: start.elapsed(),
    })
}

/// Waits (2 s at most) on `socket` for the REP of `id`'s REQ and sends the RTU; true if it did.
#[allow(clippy::disallowed_methods)] // a driver: a real socket and the wall clock for its wait
fn complete(
    cm: &mut CmEngine,
    id: IbCmId,
    socket: &UdpSocket,
    target: SocketAddr,
) -> std::io::Result<bool> {
    let from = socket.local_addr()?;
    socket.set_read_timeout(Some(Duration::from_millis(200)))?;
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = vec![0u8; 4096];
    while Instant::now() < deadline {
        let n = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        let bytes = Bytes::copy_from_slice(buf.get(..n).unwrap_or(&[]));
        let Ok(packet) = decode_bytes(&bytes, &Flow::new(target, from), true) else {
            continue;
        };
        let Ok(d) = gsi_payload(Gid::from_ip(target.ip()), packet) else {
            continue;
        };
        cm.handle_datagram(SimTime::ZERO, d.src, &d.payload);
        while cm.poll_transmit().is_some() {}
        let rep = std::iter::from_fn(|| cm.poll_event())
            .any(|e| e.id == id && matches!(e.kind, IbCmEventKind::RepReceived(_)));
        if rep && cm.send_rtu(id, &[]).is_ok() {
            if let Some((_, mad)) = cm.poll_transmit() {
                let packet = gsi_packet(GSI_QPN, 1, Bytes::copy_from_slice(&mad));
                let bytes = encode(&packet, &Flow::new(from, target)).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
                })?;
                socket.send(&bytes)?;
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn bind(ip: Ipv4Addr, target: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0))
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding {ip}: {e}")))?;
    // Linux refuses a 127/8 source toward another host (EINVAL, `ip_route_output_key_hash`):
    // say so rather than "Invalid argument".
    s.connect(target).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "--target {target}: cannot send there from {ip} ({e}): the flood's sources are \
                 127.0.0.0/8 addresses, which reach only this machine's own addresses"
            ),
        )
    })?;
    Ok(s)
}

/// One REQ from `from` to `to`'s listener, framed as the simulated RNIC's QP1 frames it: the
/// REQ `cm` sends for a fresh id, returned with the id (the caller destroys it, or completes
/// its handshake).
fn req_datagram(
    cm: &mut CmEngine,
    rng: &mut Rng,
    from: SocketAddr,
    to: SocketAddr,
    ping_shaped: bool,
) -> std::io::Result<(IbCmId, Bytes)> {
    let hdr = IpCmHeader {
        src_port: from.port(),
        src_addr: from.ip(),
        dst_addr: to.ip(),
    };
    let mut private_data = hdr.encode().to_vec();
    if ping_shaped {
        let params = Params {
            op: PingOp::Send,
            count: 1,
            size: 64,
            disconnect_by: DisconnectBy::Client,
            duration: None,
            group: None,
        };
        private_data.extend_from_slice(&params.encode(false));
    }
    let req = ReqParams {
        service_id: ip_service_id(RdmaPortSpace::Tcp, to.port()),
        local_gid: Gid::from_ip(from.ip()),
        remote_gid: Gid::from_ip(to.ip()),
        local_qpn: (rng.next_u64() as u32) & QPN_MASK,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        private_data,
    };
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let id = cm.create_id();
    let sent = cm.send_req(SimTime::ZERO, id, &req);
    let mad = cm.poll_transmit().map(|(_, mad)| mad);
    sent.map_err(|e| invalid(format!("the REQ: {e}")))?;
    let mad = mad.ok_or_else(|| invalid("the CM sent no REQ".into()))?;
    let packet = gsi_packet(GSI_QPN, 0, Bytes::copy_from_slice(&mad));
    encode(&packet, &Flow::new(from, to))
        .map(|b| (id, b.freeze()))
        .map_err(|e| invalid(format!("encoding the RoCEv2 packet: {e}")))
}
