//! rdma_cm connect+disconnect between two processes over real UDP, on the wall clock: a
//! [`CmNode`] is one process's side (a [`Host`] — SimNic + RdmaCm — on a `UdpDriver`, driven
//! from the caller's thread through `UdpHandle::with` / `wait_until`); [`serve_cycles`] is the
//! server process (`rnic bench-peer cm-server`), [`connect_disconnect`] the measuring client.
//! `cli/tests/cm_udp.rs` builds its two-process tests on the same node.
//!
//! One cycle, on the client: `create_id` → `resolve_addr` → `resolve_route` → `create_qp` →
//! `connect` → ESTABLISHED → `disconnect` → DISCONNECTED → `destroy_qp` + `destroy_id`; the
//! server accepts every CONNECT_REQUEST (with a QP) and answers DISCONNECTED with its own
//! `disconnect` (DREP), then destroys QP and id. 5 MADs a cycle (REQ, REP, RTU, DREQ, DREP).
//! TimeWait is not on the client's critical path (it destroys the id in TIMEWAIT).

// A real-time measurement: it times cycles on the wall clock (`Instant::now`), which the
// workspace's clippy.toml forbids in the simulated, deterministic path only.
#![allow(clippy::disallowed_methods)]

use super::baseline::Ready;
use super::stats::per_second;
use super::{verbs, BenchError};
use cm_core::api::{CmEvent, CmEventType, CmIdHandle, ConnParam, EventChannel};
use cm_core::engine::CmConfig;
use cm_core::wire::RdmaPortSpace;
use rnic_sim::fabric::udp::{SpawnedUdpDriver, UdpDriver, UdpHandle};
use rnic_sim::nic::SimNic;
use rnic_sim::{SimDevice, SimDeviceConfig};
use rnic_testbed::host::Host;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use verbs_core::{
    AccessFlags, CompChannel, CqHandle, Device, Gid, Mr, PdHandle, Qp, QpCap, QpInitAttr, RecvWr,
};

/// Upper bound of every wait for a CM event.
pub const WAIT: Duration = Duration::from_secs(30);
/// The rdma_cm port a server listens on (in the service ID; not a UDP port).
pub const CM_PORT: u16 = 7471;
/// Bytes of each node's memory region.
pub const MR_LEN: usize = 8192;

/// Short CM timers for a node on `ip`: packet lifetime and ACK delay 12 give av.timeout 14 on
/// both sides, so TimeWait = ms(14) = 64 ms instead of 512 ms (docs/cm-semantics.md, Timers).
/// The REQ/DREQ retransmission timeout stays at Linux's 2·ms(12) + ms(20) ≈ 4.1 s (no loss on
/// loopback). The QP's transport timeout is 4.096 µs × 2^14 ≈ 67 ms. The CA GUID and the
/// seed come from the address's last octet.
pub fn cm_config(ip: Ipv4Addr) -> CmConfig {
    let last = ip.octets()[3];
    CmConfig {
        ca_guid: 0x0002_c903_0000_0000 | u64::from(last),
        seed: u64::from(last) * 0x9e37_79b9,
        packet_life_time: 12,
        ack_delay: 12,
        ..CmConfig::default()
    }
}

/// One process's side: the host on its UDP driver, an event channel, and verbs resources
/// (PD, an [`MR_LEN`]-byte MR, a CQ on a completion channel) made before the driver started.
pub struct CmNode {
    driver: SpawnedUdpDriver<Host>,
    ch: EventChannel,
    pd: PdHandle,
    mr: Mr,
    cq: CqHandle,
    comp: CompChannel,
}

impl CmNode {
    /// A node on `ip` (UDP port chosen by the OS) with the CM configured by [`cm_config`].
    ///
    /// # Errors
    /// [`BenchError::Io`] when the socket cannot be bound or the driver started;
    /// [`BenchError::Verbs`] when a verbs object cannot be made.
    pub fn new(ip: Ipv4Addr) -> Result<CmNode, BenchError> {
        let socket =
            UdpSocket::bind((ip, 0)).map_err(|e| BenchError::io(format!("bind {ip}"), e))?;
        let addr = socket
            .local_addr()
            .map_err(|e| BenchError::io("local_addr", e))?;
        let last = ip.octets()[3];
        let dev = SimDevice::new(SimDeviceConfig::new(
            format!("sim{last}"),
            Gid::from_ipv4(ip),
        ));
        let mut nic = SimNic::new(dev, addr);
        let comp = CompChannel::new();
        let pd = nic.alloc_pd().map_err(verbs("alloc_pd"))?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = nic.reg_mr(pd, MR_LEN, access).map_err(verbs("reg_mr"))?;
        let cq = nic.create_cq(64, Some(&comp)).map_err(verbs("create_cq"))?;
        let mut host = Host::new(nic, cm_config(ip)).map_err(verbs("the CM's GID"))?;
        let ch = host.split().0.create_event_channel();
        let driver = UdpDriver::spawn(host, socket)
            .map_err(|e| BenchError::io("start the UDP driver", e))?;
        Ok(CmNode {
            driver,
            ch,
            pd,
            mr,
            cq,
            comp,
        })
    }

    /// The handle of the node's driver (`with`, `wait_until`, `stats`).
    pub fn handle(&self) -> &UdpHandle<Host> {
        self.driver.handle()
    }

    /// The node's UDP socket.
    pub fn local_addr(&self) -> SocketAddr {
        self.driver.local_addr()
    }

    /// The node's CM event channel.
    pub fn channel(&self) -> EventChannel {
        self.ch
    }

    /// The node's memory region ([`MR_LEN`] bytes, local and remote write).
    pub fn mr(&self) -> Mr {
        self.mr
    }

    /// The CQ of every QP the node creates (send and receive).
    pub fn cq(&self) -> CqHandle {
        self.cq
    }

    /// The completion channel of [`cq`](Self::cq).
    pub fn comp(&self) -> &CompChannel {
        &self.comp
    }

    /// Routes the GID of `ip` to the UDP socket `addr`.
    pub fn set_peer(&self, ip: Ipv4Addr, addr: SocketAddr) {
        self.handle()
            .with(|host, _| host.nic_mut().set_peer_addr(Gid::from_ipv4(ip), addr));
    }

    /// The next CM event (acked), waiting at most [`WAIT`] for one; `want` names what the
    /// caller expects, for the error.
    ///
    /// # Errors
    /// [`BenchError::Measure`] when none comes within [`WAIT`]; [`BenchError::Verbs`] when it
    /// cannot be read.
    pub fn event(&self, want: CmEventType) -> Result<CmEvent, BenchError> {
        let ch = self.ch;
        if !self
            .handle()
            .wait_until(WAIT, |host| host.cm().pending_events(ch) > 0)
        {
            return Err(BenchError::Measure(format!(
                "no CM event within {WAIT:?} (expected {want:?})"
            )));
        }
        self.handle().with(|host, now| {
            let (cm, dev) = host.split();
            let ev = cm
                .get_cm_event(dev, now, ch)
                .map_err(verbs("rdma_get_cm_event"))?;
            cm.ack_cm_event(ev.clone())
                .map_err(verbs("rdma_ack_cm_event"))?;
            Ok(ev)
        })
    }

    /// The next CM event, which must be `want` with status `status`.
    ///
    /// # Errors
    /// As [`event`](Self::event); [`BenchError::Measure`] for another event or status.
    pub fn expect(&self, want: CmEventType, status: i32) -> Result<CmEvent, BenchError> {
        let ev = self.event(want)?;
        if (ev.event, ev.status) == (want, status) {
            Ok(ev)
        } else {
            Err(BenchError::Measure(format!(
                "expected {want:?} with status {status}, got {ev:?}"
            )))
        }
    }

    /// An RC QP for `id` through `rdma_create_qp`, on the node's PD and CQ (16 sends, 1
    /// receive).
    ///
    /// # Errors
    /// [`BenchError::Verbs`] from `rdma_create_qp`.
    pub fn create_qp(&self, id: CmIdHandle) -> Result<Qp, BenchError> {
        let init = QpInitAttr::rc(self.cq, self.cq, QpCap::uniform(16, 1, 0), true);
        let pd = self.pd;
        self.handle().with(|host, _| {
            let (cm, dev) = host.split();
            cm.create_qp(dev, id, pd, &init)
                .map_err(verbs("rdma_create_qp"))
        })
    }

    /// `ibv_destroy_qp` + `rdma_destroy_id`.
    ///
    /// # Errors
    /// [`BenchError::Verbs`] from either.
    pub fn destroy(&self, id: CmIdHandle, qp: Qp) -> Result<(), BenchError> {
        self.handle().with(|host, now| {
            let (cm, dev) = host.split();
            dev.destroy_qp(qp.handle).map_err(verbs("ibv_destroy_qp"))?;
            cm.detach_qp(id).map_err(verbs("detach the QP"))?;
            cm.destroy_id(dev, now, id)
                .map_err(verbs("rdma_destroy_id"))
        })
    }

    /// `rdma_disconnect`.
    ///
    /// # Errors
    /// [`BenchError::Verbs`] from it.
    pub fn disconnect(&self, id: CmIdHandle) -> Result<(), BenchError> {
        self.handle().with(|host, now| {
            let (cm, dev) = host.split();
            cm.disconnect(dev, now, id)
                .map_err(verbs("rdma_disconnect"))
        })
    }

    /// The client's resolve → route → QP → connect → ESTABLISHED, to the server listening on
    /// `server` (its IP and [`CM_PORT`]). Returns the id and its QP.
    ///
    /// # Errors
    /// [`BenchError::Verbs`] from a call; [`BenchError::Measure`] for a missing or unexpected
    /// event.
    pub fn connect(&self, server: SocketAddr) -> Result<(CmIdHandle, Qp), BenchError> {
        let ch = self.ch;
        let id = self.handle().with(|host, _| {
            let (cm, _) = host.split();
            let id = cm
                .create_id(ch, RdmaPortSpace::Tcp)
                .map_err(verbs("rdma_create_id"))?;
            cm.resolve_addr(id, None, server)
                .map_err(verbs("rdma_resolve_addr"))?;
            Ok::<_, BenchError>(id)
        })?;
        self.expect(CmEventType::AddrResolved, 0)?;
        self.handle().with(|host, _| {
            host.split()
                .0
                .resolve_route(id)
                .map_err(verbs("rdma_resolve_route"))
        })?;
        self.expect(CmEventType::RouteResolved, 0)?;
        let qp = self.create_qp(id)?;
        self.handle().with(|host, now| {
            let (cm, dev) = host.split();
            cm.connect(dev, now, id, &ConnParam::rping_defaults())
                .map_err(verbs("rdma_connect"))
        })?;
        let est = self.expect(CmEventType::Established, 0)?;
        if est.id != id {
            return Err(BenchError::Measure(format!(
                "ESTABLISHED for another id: {est:?}"
            )));
        }
        Ok((id, qp))
    }

    /// The server's bind + listen on `addr` (backlog 8); returns the listening id.
    ///
    /// # Errors
    /// [`BenchError::Verbs`] from a call.
    pub fn listen(&self, addr: SocketAddr) -> Result<CmIdHandle, BenchError> {
        let ch = self.ch;
        self.handle().with(|host, _| {
            let (cm, _) = host.split();
            let id = cm
                .create_id(ch, RdmaPortSpace::Tcp)
                .map_err(verbs("rdma_create_id"))?;
            cm.bind_addr(id, addr).map_err(verbs("rdma_bind_addr"))?;
            cm.listen(id, 8).map_err(verbs("rdma_listen"))?;
            Ok(id)
        })
    }

    /// The server's QP for a CONNECT_REQUEST's id, optionally a receive of `recv` bytes at the
    /// start of the MR (wr_id 7), then `rdma_accept`.
    ///
    /// # Errors
    /// [`BenchError::Verbs`] from a call.
    pub fn accept(&self, id: CmIdHandle, recv: Option<u32>) -> Result<Qp, BenchError> {
        let qp = self.create_qp(id)?;
        let mr = self.mr;
        self.handle().with(|host, now| {
            let (cm, dev) = host.split();
            if let Some(len) = recv {
                dev.post_recv(qp.handle, &[RecvWr::new(7, vec![mr.sge(0, len)])])
                    .map_err(|e| e.error)
                    .map_err(verbs("ibv_post_recv"))?;
            }
            cm.accept(dev, now, id, &ConnParam::rping_defaults())
                .map_err(verbs("rdma_accept"))
        })?;
        Ok(qp)
    }

    /// Stops the driver.
    ///
    /// # Errors
    /// [`BenchError::Io`]: the error the driver ended with.
    pub fn shutdown(self) -> Result<(), BenchError> {
        self.driver
            .shutdown()
            .map_err(|e| BenchError::io("the UDP driver", e))
    }
}

/// The server process of the CM rate: a node on `ip` whose peer `client` (a UDP socket on
/// another IP) is routed, listening on `ip`:[`CM_PORT`]; calls `ready` with its UDP socket,
/// then serves `cycles` connections: CONNECT_REQUEST → accept → ESTABLISHED → DISCONNECTED →
/// disconnect → destroy.
///
/// # Errors
/// [`BenchError::Measure`] for an unexpected event or a wait of more than [`WAIT`]; the
/// errors of the calls.
pub fn serve_cycles(
    ip: Ipv4Addr,
    client: SocketAddr,
    cycles: u64,
    ready: Ready<'_>,
) -> Result<(), BenchError> {
    let s = CmNode::new(ip)?;
    let SocketAddr::V4(client_v4) = client else {
        return Err(BenchError::Options(format!(
            "cm-server --client {client}: give an IPv4 socket"
        )));
    };
    s.set_peer(*client_v4.ip(), client);
    s.listen(SocketAddr::new(ip.into(), CM_PORT))?;
    ready(s.local_addr())?;
    let mut qps = BTreeMap::new();
    let mut done = 0;
    while done < cycles {
        let ev = s.event(CmEventType::ConnectRequest)?;
        match ev.event {
            CmEventType::ConnectRequest => {
                qps.insert(ev.id, s.accept(ev.id, None)?);
            }
            CmEventType::Established => {}
            CmEventType::Disconnected if ev.status == 0 => {
                s.disconnect(ev.id)?;
                let qp = qps.remove(&ev.id).ok_or_else(|| {
                    BenchError::Measure(format!("DISCONNECTED for an id without a QP: {ev:?}"))
                })?;
                s.destroy(ev.id, qp)?;
                done += 1;
            }
            _ => {
                return Err(BenchError::Measure(format!(
                    "cm-server: unexpected event {ev:?}"
                )))
            }
        }
    }
    s.shutdown()
}

/// Connect+disconnect cycles of the client node `c` against a [`serve_cycles`] server on
/// `server_ip` (which must serve `warmup + cycles` connections): `warmup` cycles, then
/// `cycles` timed ones. Returns cycles per second.
///
/// # Errors
/// [`BenchError::Measure`] for 0 cycles, an unexpected event or a wait of more than
/// [`WAIT`]; the errors of the calls.
pub fn connect_disconnect(
    c: &CmNode,
    server_ip: Ipv4Addr,
    warmup: u64,
    cycles: u64,
) -> Result<f64, BenchError> {
    if cycles == 0 {
        return Err(BenchError::Measure(
            "CM connect+disconnect: 0 cycles".into(),
        ));
    }
    let server = SocketAddr::new(server_ip.into(), CM_PORT);
    let cycle = || -> Result<(), BenchError> {
        let (id, qp) = c.connect(server)?;
        c.disconnect(id)?;
        c.expect(CmEventType::Disconnected, 0)?;
        c.destroy(id, qp)
    };
    for _ in 0..warmup {
        cycle()?;
    }
    let start = Instant::now();
    for _ in 0..cycles {
        cycle()?;
    }
    Ok(per_second(cycles, start.elapsed()))
}
