//! [`HwNic`]: a real RNIC ([`HwDevice`], libibverbs) as a [`Nic`] of a [`Host`](rnic_testbed::host::Host).
//!
//! The data moves through the device; the wire of this endpoint carries only the connection
//! manager's MADs. On hardware the kernel owns QP1, so the MADs cannot go through the device's
//! GSI QP: they travel over the host's UDP socket instead (ARCHITECTURE.md), framed exactly as
//! the simulated RNIC's QP1 frames them — a RoCEv2 UD SEND ONLY to QP1 with the GSI Q_Key and
//! an ICRC ([`rnic_sim::gsi_packet`]) — so captures decode the same and the CM cannot tell the
//! two NICs apart. Both ends of a hardware connection run this CM (a peer whose kernel runs
//! rdma_cm listens on QP1, which no UDP socket reaches).
//!
//! The device's completion and async events do not arrive on the socket: the driver waits
//! for them with [`HwDevice::event_waiter`] and hands them in with [`HwNic::device_events`].

use bytes::Bytes;
use rnic_hw::HwDevice;
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::{Capture, Captured, NicCounters};
use rnic_sim::peers::{Admission, PeerTable};
use rnic_sim::roce::{decode_bytes, encode, Flow};
use rnic_sim::{gsi_packet, gsi_payload, psn_add, GSI_QPN};
use rnic_testbed::host::Nic;
use std::net::SocketAddr;
use verbs_core::{Error, Gid, GsiDatagram, SimTime};

/// A hardware RNIC whose CM datagrams use the UDP socket at `addr`. See the module docs.
pub struct HwNic {
    dev: HwDevice,
    addr: SocketAddr,
    /// The CM sockets of peers, learned from the wire or set before connecting.
    peers: PeerTable,
    /// PSN of the next MAD sent (UD receivers do not check it).
    psn: u32,
    counters: NicCounters,
    /// Datagrams that decoded but were not a MAD for QP1.
    not_gsi: u64,
    capture: Capture,
}

impl std::fmt::Debug for HwNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwNic")
            .field("device", &verbs_core::Device::name(&self.dev))
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl HwNic {
    /// `dev`, its CM talking on the UDP socket bound at `addr`.
    pub fn new(dev: HwDevice, addr: SocketAddr) -> HwNic {
        HwNic {
            dev,
            addr,
            peers: PeerTable::default(),
            psn: 0,
            counters: NicCounters::default(),
            not_gsi: 0,
            capture: Capture::default(),
        }
    }

    /// Takes the device's completion-channel and async events (non-blocking): completion
    /// events reach the CQs' [`CompChannel`](verbs_core::CompChannel)s. Returns how many.
    pub fn device_events(&mut self) -> usize {
        self.dev.process_events()
    }

    /// Records every datagram of the CM socket from now on.
    pub fn start_capture(&mut self) {
        self.capture.start();
    }

    /// The datagrams recorded since the last call.
    pub fn take_capture(&mut self) -> Vec<Captured> {
        self.capture.take()
    }

    /// Datagrams the capture left out because it was full.
    pub fn not_captured(&self) -> u64 {
        self.capture.not_captured()
    }

    /// The CM socket's refusals by reason: undecodable datagrams, datagrams that were not a
    /// MAD for QP1, datagrams from an unknown socket, and the route decisions
    /// (`rnic_sim::peers`).
    pub fn drop_counters(&self) -> Vec<(&'static str, u64)> {
        let r = self.peers.counters();
        vec![
            ("nic.undecodable", self.counters.rx_decode_errors),
            ("nic.not_gsi", self.not_gsi),
            ("nic.foreign_socket", self.counters.rx_foreign_socket),
            ("nic.route_in_use", r.route_in_use),
            ("nic.candidates_discarded", r.candidates_discarded),
            ("nic.peers_evicted", r.evicted),
            ("nic.peers_refused", r.refused_full),
            ("pcap.not_captured", self.capture.not_captured()),
        ]
    }

    /// [`Nic::receive`]: a MAD from a peer's CM socket, decoded (ICRC checked), admitted by its
    /// socket as the simulated NIC admits it (`rnic_sim::peers`: only the CM can use a GID
    /// here, the device's QPs are the kernel's), and handed to the device's GSI queue;
    /// anything else is counted and dropped.
    fn take(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes, cm_uses: &dyn Fn(Gid) -> bool) {
        let flow = Flow::new(src, self.addr);
        self.capture.record(now, flow, &bytes);
        let Ok(packet) = decode_bytes(&bytes, &flow, true) else {
            self.counters.rx_decode_errors += 1;
            return;
        };
        let gsi = packet.bth.dest_qp == GSI_QPN;
        let gid = match self.peers.admit(src, self.addr.port(), gsi, cm_uses) {
            Admission::Known(g) | Admission::Candidate(g) => g,
            Admission::Refused(_) => {
                self.counters.rx_foreign_socket += 1;
                return;
            }
        };
        if !gsi {
            self.not_gsi += 1;
            return;
        }
        match gsi_payload(gid, packet) {
            Ok(d) => {
                self.counters.rx_datagrams += 1;
                self.dev.push_gsi_recv(GsiDatagram {
                    peer: d.src,
                    mad: d.payload.to_vec(),
                });
            }
            Err(_) => self.not_gsi += 1,
        }
    }

    /// Keeps up to `n` routes learned from the wire ([`PeerTable::set_capacity`]).
    pub fn set_route_capacity(&mut self, n: usize) {
        self.peers.set_capacity(n);
    }

    /// The CM socket's datagram counters (decode errors include datagrams that were not a
    /// MAD for QP1).
    pub fn datagram_counters(&self) -> NicCounters {
        NicCounters {
            rx_decode_errors: self.counters.rx_decode_errors + self.not_gsi,
            ..self.counters
        }
    }
}

impl Endpoint for HwNic {
    /// [`Nic::receive`] with no CM (a candidate is never confirmed).
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        self.take(now, src, bytes, &|_| false);
    }

    /// The next MAD the CM sent, framed as a UD SEND to the peer's QP1.
    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        loop {
            let (gid, mad) = self.dev.take_gsi_send()?;
            let packet = gsi_packet(GSI_QPN, self.psn, Bytes::from(mad));
            self.psn = psn_add(self.psn, 1);
            let dst = Nic::peer_addr(self, gid);
            let flow = Flow::new(self.addr, dst);
            match encode(&packet, &flow) {
                Ok(b) => {
                    let bytes = b.freeze();
                    self.counters.tx_datagrams += 1;
                    self.capture.record(now, flow, &bytes);
                    return Some((dst, bytes));
                }
                Err(_) => self.counters.tx_encode_errors += 1,
            }
        }
    }

    /// None: the device runs its own transport timers.
    fn poll_timeout(&self) -> Option<SimTime> {
        None
    }

    fn handle_timeout(&mut self, _now: SimTime) {}

    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Nic for HwNic {
    type Dev = HwDevice;

    const ASYNC_COMPLETIONS: bool = true;

    fn device(&self) -> &HwDevice {
        &self.dev
    }

    fn device_mut(&mut self) -> &mut HwDevice {
        &mut self.dev
    }

    fn set_peer_addr(&mut self, gid: Gid, addr: SocketAddr) {
        self.peers.set(gid, addr);
    }

    fn receive(
        &mut self,
        now: SimTime,
        src: SocketAddr,
        bytes: Bytes,
        cm_uses: &dyn Fn(Gid) -> bool,
    ) {
        self.take(now, src, bytes, cm_uses);
    }

    fn candidate(&self) -> Option<Gid> {
        self.peers.candidate().map(|(g, _)| g)
    }

    fn settle_candidate(&mut self, accepted: bool, cm_uses: &dyn Fn(Gid) -> bool) {
        self.peers.settle(|_| accepted, cm_uses);
    }

    fn release_peer(&mut self, gid: Gid) {
        self.peers.release(gid);
    }

    /// The peer's CM socket: learned or set; else the GID's IP on this socket's port.
    fn peer_addr(&self, gid: Gid) -> SocketAddr {
        self.peers
            .addr(gid)
            .unwrap_or_else(|| SocketAddr::new(gid.to_ip(), self.addr.port()))
    }

    /// The GID the device was opened on (the RoCEv2 GID of the socket's IP).
    fn cm_gid(&self) -> Result<Gid, Error> {
        Ok(self.dev.gid())
    }
}
