//! [`SimNic`]: a [`SimDevice`] on a wire — the RoCEv2 codec between the device's structured
//! packets and UDP datagrams, as a fabric [`Endpoint`].
//!
//! The same `SimNic` runs on the deterministic [`Simulation`](crate::fabric::Simulation) and on
//! the real [`udp`](crate::fabric::udp) driver. Each datagram is a RoCEv2 UDP payload
//! (BTH … ICRC) sent to UDP port 4791 of the peer's IP, which is its GID
//! (cm-spec §1.1; docs/roce-wire.md for the ICRC pseudo header).

use crate::device::SimDevice;
use crate::fabric::Endpoint;
use crate::fanout::NicMulticast;
use crate::gsi::GSI_QPN;
use crate::multicast::{is_multicast_gid, GroupDirectory, MULTICAST_QPN};
use crate::peers::{Admission, PeerTable};
use crate::roce::codec::encode_from;
use crate::roce::{decode_bytes, encode, CodecError, Flow, ROCE_V2_UDP_DPORT};
use bytes::Bytes;
use std::net::SocketAddr;
use verbs_core::{Gid, SimTime, QPN_MASK};

/// Datagrams a [`SimNic`] refused, by reason. Bad input is counted and dropped, never a panic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct NicCounters {
    /// Datagrams encoded and handed to the wire.
    pub tx_datagrams: u64,
    /// Datagrams received and decoded.
    pub rx_datagrams: u64,
    /// Datagrams that failed to decode (bad ICRC, truncated, unknown opcode, …).
    pub rx_decode_errors: u64,
    /// Packets the device produced that the codec refused to encode (a device bug if non-zero).
    pub tx_encode_errors: u64,
    /// Datagrams dropped because they came from a socket other than the one their sender's GID
    /// is routed to (another port of a peer's IP): RC/UD traffic from any unknown socket, and
    /// MADs from an unknown socket of a GID in use ([`crate::peers`]; the route counters,
    /// [`SimNic::peers`], tell the two apart).
    pub rx_foreign_socket: u64,
    /// Copies of multicast datagrams sent, one per other member of the group
    /// ([`crate::multicast`]).
    pub tx_multicast_copies: u64,
    /// Multicast datagrams no other RNIC was sent a copy of (no directory, or no other member).
    pub tx_multicast_no_members: u64,
    /// Members of a group left without a copy because it had more than
    /// [`MAX_GROUP_MEMBERS`](crate::multicast::MAX_GROUP_MEMBERS) others.
    pub tx_multicast_members_cut: u64,
    /// Multicast datagrams received for a group of this RNIC.
    pub rx_multicast: u64,
}

/// One captured datagram: when, between which sockets, and its bytes (the RoCEv2 UDP payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Time it was sent or received.
    pub at: SimTime,
    /// Source and destination sockets (what the ICRC pseudo header is built from).
    pub flow: Flow,
    /// The UDP payload.
    pub bytes: Bytes,
}

/// The most payload bytes a [`Capture`] holds between two [`take`](Capture::take)s: past
/// it, datagrams are counted ([`Capture::not_captured`]) instead of kept, so that a flood
/// arriving while nobody takes the recording cannot grow memory without bound.
pub const CAPTURE_LIMIT_BYTES: usize = 64 << 20;

/// A recording of the datagrams a NIC sent and received, off until [`start`](Self::start)
/// (for pcap export), at most [`CAPTURE_LIMIT_BYTES`] between two takes.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    records: Option<Vec<Captured>>,
    bytes: usize,
    not_captured: u64,
}

impl Capture {
    /// Starts recording.
    pub fn start(&mut self) {
        self.records.get_or_insert_with(Vec::new);
    }

    /// The datagrams recorded since [`start`](Self::start) or the last take, leaving the
    /// recording on and empty.
    pub fn take(&mut self) -> Vec<Captured> {
        self.bytes = 0;
        self.records
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Records one datagram of `flow` at `at`, if recording and under the limit.
    pub fn record(&mut self, at: SimTime, flow: Flow, bytes: &Bytes) {
        if let Some(c) = self.records.as_mut() {
            if self.bytes + bytes.len() > CAPTURE_LIMIT_BYTES {
                self.not_captured += 1;
                return;
            }
            self.bytes += bytes.len();
            c.push(Captured {
                at,
                flow,
                bytes: bytes.clone(),
            });
        }
    }

    /// Datagrams left out because the recording was full.
    pub fn not_captured(&self) -> u64 {
        self.not_captured
    }
}

/// A simulated RNIC attached to a wire at `addr`. Dereferences to its [`SimDevice`], so verbs
/// calls go straight to the device.
#[derive(Debug)]
pub struct SimNic {
    dev: SimDevice,
    addr: SocketAddr,
    /// Peers whose socket is not `(GID's IP, 4791)`, e.g. two processes on one loopback IP.
    peers: PeerTable,
    check_icrc: bool,
    counters: NicCounters,
    capture: Capture,
    /// Multicast: the group directory and the copies still to send.
    mcast: NicMulticast,
}

impl SimNic {
    /// `dev` on the wire at `addr` (normally its GID's IP and port 4791; a real UDP driver must
    /// pass the socket's actual address, since the ICRC covers it).
    pub fn new(dev: SimDevice, addr: SocketAddr) -> Self {
        SimNic {
            dev,
            addr,
            peers: PeerTable::default(),
            check_icrc: true,
            counters: NicCounters::default(),
            capture: Capture::default(),
            mcast: NicMulticast::default(),
        }
    }

    /// `dev` at its GID's IP address, UDP port 4791.
    pub fn at_gid(dev: SimDevice) -> Self {
        let addr = SocketAddr::new(dev.gid().to_ip(), ROCE_V2_UDP_DPORT);
        SimNic::new(dev, addr)
    }

    /// Routes packets for `gid` to `addr` instead of `(gid's IP, 4791)`, and recognises
    /// datagrams from `addr` as coming from `gid` ([`PeerTable::set`]: held until released).
    pub fn set_peer_addr(&mut self, gid: Gid, addr: SocketAddr) {
        self.peers.set(gid, addr);
    }

    /// Whether `gid` is in use by this NIC's device (a QP has it as destination,
    /// [`SimDevice::has_qp_to`]) or, as `cm_uses` says, by the host's CM.
    fn in_use(dev: &SimDevice, cm_uses: &dyn Fn(Gid) -> bool, gid: Gid) -> bool {
        dev.has_qp_to(gid) || cm_uses(gid)
    }

    /// Takes one datagram from `src` (the [`Endpoint::handle_datagram`] of a host whose CM
    /// says, through `cm_uses`, which GIDs it has a live connection with). It is decoded first;
    /// then [`PeerTable::admit`] decides whose it is: a datagram from an unknown socket reaches
    /// the device only as a *candidate* — a MAD for QP1 of a GID neither the device's QPs nor
    /// the CM use — and is otherwise dropped (`rx_foreign_socket`). After the CM took the MADs,
    /// the host calls [`settle_candidate`](Self::settle_candidate).
    pub fn receive(
        &mut self,
        now: SimTime,
        src: SocketAddr,
        bytes: Bytes,
        cm_uses: &dyn Fn(Gid) -> bool,
    ) {
        let flow = Flow::new(src, self.addr);
        self.capture.record(now, flow, &bytes);
        let decoded = decode_bytes(&bytes, &flow, self.check_icrc);
        // A multicast datagram's ICRC covers its group's address, not this NIC's.
        let maybe_multicast = match &decoded {
            Ok(p) => p.bth.dest_qp & QPN_MASK == MULTICAST_QPN,
            Err(e) => matches!(e, CodecError::BadIcrc { .. }),
        };
        if maybe_multicast {
            if let Some((mgid, packet)) = NicMulticast::match_group(&self.dev, &bytes, src) {
                let dev = &self.dev;
                let in_use = |g: Gid| Self::in_use(dev, cm_uses, g);
                // Not a MAD: taken only from a member's known socket.
                match self.peers.admit(src, ROCE_V2_UDP_DPORT, false, &in_use) {
                    Admission::Known(gid) | Admission::Candidate(gid) => {
                        self.counters.rx_datagrams += 1;
                        self.counters.rx_multicast += 1;
                        self.dev.handle_multicast(now, gid, mgid, packet);
                    }
                    Admission::Refused(_) => self.counters.rx_foreign_socket += 1,
                }
                return;
            }
        }
        let packet = match decoded {
            Ok(p) => p,
            Err(e) => {
                self.counters.rx_decode_errors += 1;
                tracing::debug!(%src, error = %e, "dropped undecodable RoCEv2 datagram");
                return;
            }
        };
        let gsi = packet.bth.dest_qp & QPN_MASK == GSI_QPN;
        let dev = &self.dev;
        let in_use = |g: Gid| Self::in_use(dev, cm_uses, g);
        match self.peers.admit(src, ROCE_V2_UDP_DPORT, gsi, &in_use) {
            Admission::Known(gid) | Admission::Candidate(gid) => {
                self.counters.rx_datagrams += 1;
                self.dev.handle_packet(now, gid, packet);
            }
            Admission::Refused(why) => {
                // A peer's traffic comes from the one socket its GID is routed to: a datagram
                // from another port of its IP is someone else's (a forgery, or another process
                // on that host), and must not reach the peer's QPs nor move its route.
                self.counters.rx_foreign_socket += 1;
                tracing::debug!(%src, ?why, "dropped a datagram from an unknown socket");
            }
        }
    }

    /// The GID of the candidate [`receive`](Self::receive) let through and not settled yet.
    pub fn candidate(&self) -> Option<Gid> {
        self.peers.candidate().map(|(g, _)| g)
    }

    /// After the CM handled the MADs of the last datagram: if `accepted` (the CM accepted a
    /// MAD from the candidate's GID), the candidate's socket becomes that GID's route
    /// ([`PeerTable::settle`]); else it is forgotten. `cm_uses` as in
    /// [`receive`](Self::receive).
    pub fn settle_candidate(&mut self, accepted: bool, cm_uses: &dyn Fn(Gid) -> bool) {
        let dev = &self.dev;
        let in_use = |g: Gid| Self::in_use(dev, cm_uses, g);
        if let Some((gid, addr)) = self.peers.settle(|_| accepted, &in_use) {
            tracing::debug!(peer = %gid.to_ip(), %addr, "route learned");
        }
    }

    /// Makes the route [`set_peer_addr`](Self::set_peer_addr) held an ordinary learned one.
    pub fn release_peer(&mut self, gid: Gid) {
        self.peers.release(gid);
    }

    /// The routes to peers.
    pub fn peers(&self) -> &PeerTable {
        &self.peers
    }

    /// Uses `dir` to know which RNICs of the fabric belong to which multicast group: this NIC
    /// joins a group there while one of its device's QPs is attached to it, and sends a copy
    /// of each multicast datagram to every other member ([`crate::multicast`]). Without one,
    /// multicast datagrams reach only this device's own QPs.
    pub fn set_group_directory(&mut self, dir: Box<dyn GroupDirectory>) {
        self.mcast.set_directory(dir);
    }

    /// Sets how many routes learned from the wire the NIC keeps ([`PeerTable::set_capacity`]).
    pub fn set_route_capacity(&mut self, n: usize) {
        self.peers.set_capacity(n);
    }

    /// Turns ICRC checking of received datagrams on (default) or off.
    pub fn set_check_icrc(&mut self, on: bool) {
        self.check_icrc = on;
    }

    /// Starts recording every datagram sent and received (for pcap export).
    pub fn start_capture(&mut self) {
        self.capture.start();
    }

    /// The datagrams recorded since [`start_capture`](Self::start_capture), leaving the
    /// recording on and empty.
    pub fn take_capture(&mut self) -> Vec<Captured> {
        self.capture.take()
    }

    /// Datagrams the capture left out because it was full ([`CAPTURE_LIMIT_BYTES`]).
    pub fn not_captured(&self) -> u64 {
        self.capture.not_captured()
    }

    /// Datagram counters (encode/decode). The device's own transport counters are
    /// `device().counters()` (named differently so that `Deref` does not hide them).
    pub fn datagram_counters(&self) -> NicCounters {
        NicCounters {
            tx_multicast_copies: self.mcast.copies,
            tx_multicast_no_members: self.mcast.no_members,
            tx_multicast_members_cut: self.mcast.members_cut,
            ..self.counters
        }
    }

    /// The device.
    pub fn device(&self) -> &SimDevice {
        &self.dev
    }

    /// The device, mutably (for verbs calls).
    pub fn device_mut(&mut self) -> &mut SimDevice {
        &mut self.dev
    }

    /// The device, consuming the NIC.
    pub fn into_device(self) -> SimDevice {
        self.dev
    }

    /// The socket datagrams to `gid` go to: the one [`set_peer_addr`](Self::set_peer_addr)
    /// gave or the wire confirmed, else the GID's IP on UDP port 4791.
    pub fn peer_addr(&self, gid: Gid) -> SocketAddr {
        route(&self.peers, gid)
    }
}

/// The socket datagrams to `gid` go to ([`SimNic::peer_addr`]).
fn route(peers: &PeerTable, gid: Gid) -> SocketAddr {
    peers
        .addr(gid)
        .unwrap_or_else(|| SocketAddr::new(gid.to_ip(), ROCE_V2_UDP_DPORT))
}

impl std::ops::Deref for SimNic {
    type Target = SimDevice;
    fn deref(&self) -> &SimDevice {
        &self.dev
    }
}

impl std::ops::DerefMut for SimNic {
    fn deref_mut(&mut self) -> &mut SimDevice {
        &mut self.dev
    }
}

impl Endpoint for SimNic {
    /// [`SimNic::receive`] with no CM: only the device's QPs pin routes, and a candidate is
    /// never confirmed (nobody accepts its MAD).
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        self.receive(now, src, bytes, &|_| false);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        self.mcast.sync(&mut self.dev, self.addr);
        loop {
            if let Some(copy) = self.mcast.pop() {
                return Some(copy);
            }
            // A payload still in registered memory is copied once, straight into the datagram.
            let (t, payload) = self.dev.poll_outgoing(now)?;
            let dst = route(&self.peers, t.dst);
            let flow = Flow::new(self.addr, dst);
            let encoded = match &payload {
                Some(p) => encode_from(&t.packet, p, &flow),
                None => encode(&t.packet, &flow),
            };
            match encoded {
                Ok(b) => {
                    let bytes = b.freeze();
                    self.counters.tx_datagrams += 1;
                    self.capture.record(now, flow, &bytes);
                    if is_multicast_gid(t.dst) {
                        // One copy per other member of the group, each the datagram a
                        // multicast to the group's address would carry (its ICRC over it).
                        self.mcast.fan_out(t.dst, self.addr, &bytes);
                        continue;
                    }
                    return Some((dst, bytes));
                }
                Err(e) => {
                    self.counters.tx_encode_errors += 1;
                    tracing::warn!(error = %e, "device produced a packet the codec refuses");
                }
            }
        }
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.dev.poll_timeout()
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.dev.handle_timeout(now)
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimDeviceConfig;
    use std::net::{IpAddr, Ipv4Addr};

    fn nic(last: u8) -> SimNic {
        let ip = Ipv4Addr::new(10, 0, 0, last);
        SimNic::at_gid(SimDevice::new(SimDeviceConfig::new(
            format!("sim{last}"),
            Gid::from_ipv4(ip),
        )))
    }

    /// A MAD from `n` to the GID `to`, as the bytes `n` puts on the wire.
    fn mad_from(n: &mut SimNic, to: Gid) -> Bytes {
        n.device_mut()
            .gsi_send(to, crate::GSI_QPN, Bytes::from_static(&[7; 256]))
            .ok();
        n.poll_transmit(SimTime::ZERO)
            .unwrap_or_else(|| panic!("queued"))
            .1
    }

    /// Another process on `of`'s IP, on `port` (its ICRC right for its own socket).
    fn twin(of: u8, port: u16) -> SimNic {
        let at = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, of)), port);
        SimNic::new(nic(of).into_device(), at)
    }

    /// A MAD from another port of a peer's IP whose GID the CM uses does not reach the
    /// device; the same bytes from the peer's socket do.
    #[test]
    fn mads_from_a_foreign_socket_of_a_gid_in_use_are_dropped() {
        let (mut a, mut b) = (nic(1), nic(2));
        let mut other = twin(1, 5555);
        let (a_gid, to_b) = (a.device().gid(), b.device().gid());
        let cm_uses_a = move |g: Gid| g == a_gid;
        b.receive(
            SimTime::ZERO,
            other.addr(),
            mad_from(&mut other, to_b),
            &cm_uses_a,
        );
        assert_eq!(b.datagram_counters().rx_foreign_socket, 1);
        assert_eq!(b.peers().counters().route_in_use, 1);
        assert!(b.device_mut().gsi_recv().is_none());
        b.receive(SimTime::ZERO, a.addr(), mad_from(&mut a, to_b), &cm_uses_a);
        assert_eq!(b.datagram_counters().rx_datagrams, 1);
        assert!(b.device_mut().gsi_recv().is_some());
        assert_eq!(b.peer_addr(a_gid), a.addr());
    }

    /// A MAD from an unknown socket of a GID nobody uses reaches the device as a candidate;
    /// its socket becomes the GID's route only when the CM accepted it.
    #[test]
    fn a_candidate_is_learned_only_once_the_cm_accepts_it() {
        let mut b = nic(2);
        let mut other = twin(1, 5555);
        let (gid, to_b) = (other.device().gid(), b.device().gid());
        let nobody = |_: Gid| false;
        b.receive(
            SimTime::ZERO,
            other.addr(),
            mad_from(&mut other, to_b),
            &nobody,
        );
        assert!(b.device_mut().gsi_recv().is_some());
        assert_eq!(b.candidate(), Some(gid));
        b.settle_candidate(false, &nobody);
        assert_eq!(b.peer_addr(gid).port(), ROCE_V2_UDP_DPORT);
        assert_eq!(b.peers().counters().candidates_discarded, 1);
        b.receive(
            SimTime::ZERO,
            other.addr(),
            mad_from(&mut other, to_b),
            &nobody,
        );
        b.settle_candidate(true, &nobody);
        assert_eq!(b.peer_addr(gid), other.addr());
        // What b sends to that GID now goes to that socket.
        let _ = mad_from(&mut b, gid);
        assert_eq!(b.peers().counters().learned, 1);
    }

    /// RC traffic from an unknown socket never reaches the device and moves no route; a QP
    /// whose destination is a GID pins that GID's route against candidates.
    #[test]
    fn rc_from_an_unknown_socket_is_dropped_and_a_connected_qp_pins_its_route() {
        use crate::testutil::{conn_attr, node, to_init, to_rtr};
        let mut n = node(2);
        let peer = crate::testutil::gid(1);
        to_init(&mut n);
        to_rtr(&mut n, &conn_attr(peer, 0x77, 0));
        let mut b = SimNic::at_gid(n.dev);
        let qpn = n.qp.qp_num;
        let spoof = SocketAddr::new(peer.to_ip(), 5555);
        let packet = crate::roce::Packet::bare(
            crate::roce::Opcode::RcSendOnly,
            qpn,
            0,
            Bytes::from_static(&[1; 16]),
        );
        let bytes = encode(&packet, &Flow::new(spoof, b.addr()))
            .unwrap_or_else(|e| panic!("{e}"))
            .freeze();
        b.receive(SimTime::ZERO, spoof, bytes, &|_| false);
        assert_eq!(b.datagram_counters().rx_foreign_socket, 1);
        assert_eq!(b.device().counters().rnr_naks_sent, 0);
        let mut other = twin(1, 5555);
        let to_b = b.device().gid();
        b.receive(SimTime::ZERO, spoof, mad_from(&mut other, to_b), &|_| false);
        assert_eq!(b.peers().counters().route_in_use, 1);
        assert!(b.device_mut().gsi_recv().is_none());
        assert_eq!(b.candidate(), None);
    }
}
