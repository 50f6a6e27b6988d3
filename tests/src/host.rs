//! [`Host`]: one machine — a NIC ([`SimNic`] by default, or any [`Nic`]) plus the [`RdmaCm`]
//! that drives it — as a fabric [`Endpoint`], so the connection manager and the RNIC run
//! together on the deterministic [`Simulation`](rnic_sim::fabric::Simulation) (or any other
//! fabric driver). With a hardware NIC (`rnic_cli::hw_nic::HwNic`, the `rnic` tool's) the wire
//! carries only the CM's MADs; the data moves through the real device.
//!
//! Datagrams from the wire go to the NIC; after every input (datagram or timeout) the host
//! hands the MADs that arrived on QP1 to the CM ([`RdmaCm::poll_gsi`]), and the CM's own timers
//! run through [`RdmaCm::handle_timeout`] (cm-core's sans-IO contract, `docs/cm-semantics.md`).
//! MADs the CM sends leave through the NIC's GSI QP (`impl GsiEndpoint for SimDevice`).
//!
//! Routes to peers on sockets other than `(GID's IP, 4791)`: the NIC learns one only for a MAD
//! that decoded, came from a GID no live QP or CM connection uses, and that the CM then
//! accepted ([`Nic::receive`] → [`RdmaCm::poll_gsi_with`] → [`Nic::settle_candidate`];
//! `rnic_sim::peers`). Nothing is learned before decoding, and a route in use never moves.
//!
//! Application calls (`connect`, `accept`, `disconnect`, verbs) are made between simulation
//! runs on [`Host::split`] with the simulation's current time; what they queue is sent at the
//! next run.

use bytes::Bytes;
use cm_core::api::CmDevice;
use cm_core::api::RdmaCm;
use cm_core::engine::CmConfig;
use rnic_sim::fabric::Endpoint;
use rnic_sim::nic::SimNic;
use rnic_sim::SimDevice;
use std::net::SocketAddr;
use verbs_core::{Device, Error, Gid, SimTime};

/// A NIC a [`Host`] runs on: a fabric [`Endpoint`] whose device the CM drives.
pub trait Nic: Endpoint {
    /// The device: verbs for the QPs, the GSI endpoint for the CM's MADs.
    type Dev: CmDevice;

    /// The device.
    fn device(&self) -> &Self::Dev;

    /// The device, mutably.
    fn device_mut(&mut self) -> &mut Self::Dev;

    /// Sends what is for `gid` to the socket `addr` (see [`SimNic::set_peer_addr`]), until
    /// [`release_peer`](Self::release_peer).
    fn set_peer_addr(&mut self, gid: Gid, addr: SocketAddr);

    /// Takes a datagram from the wire: decoded, then admitted by its source socket, where
    /// `cm_uses` says which GIDs the host's CM has a live connection with (see
    /// [`SimNic::receive`]).
    fn receive(
        &mut self,
        now: SimTime,
        src: SocketAddr,
        bytes: Bytes,
        cm_uses: &dyn Fn(Gid) -> bool,
    );

    /// The GID of the candidate (a MAD from an unknown socket) the last datagram was, if it
    /// was one and is not settled yet.
    fn candidate(&self) -> Option<Gid>;

    /// Learns the candidate's socket as its GID's route if `accepted` (the CM accepted its
    /// MAD), else forgets it (see [`SimNic::settle_candidate`]).
    fn settle_candidate(&mut self, accepted: bool, cm_uses: &dyn Fn(Gid) -> bool);

    /// Makes a route [`set_peer_addr`](Self::set_peer_addr) held an ordinary learned one.
    fn release_peer(&mut self, gid: Gid);

    /// The socket what is for `gid` goes to.
    fn peer_addr(&self, gid: Gid) -> SocketAddr;

    /// True when completions arrive without the fabric driver's involvement (a hardware
    /// device): an application that reacts to completions inside the endpoint must arm its
    /// CQs, and the driver must wait for the device's events too. False for the simulated
    /// RNIC, whose completions only ever follow a datagram or a timeout.
    const ASYNC_COMPLETIONS: bool = false;

    /// The GID the CM uses as this host's address: GID index 0 of port 1 by default.
    ///
    /// # Errors
    /// The device's `query_gid` error.
    fn cm_gid(&self) -> Result<Gid, Error> {
        self.device().query_gid(1, 0)
    }
}

impl Nic for SimNic {
    type Dev = SimDevice;

    fn device(&self) -> &SimDevice {
        SimNic::device(self)
    }

    fn device_mut(&mut self) -> &mut SimDevice {
        SimNic::device_mut(self)
    }

    fn set_peer_addr(&mut self, gid: Gid, addr: SocketAddr) {
        SimNic::set_peer_addr(self, gid, addr)
    }

    fn receive(
        &mut self,
        now: SimTime,
        src: SocketAddr,
        bytes: Bytes,
        cm_uses: &dyn Fn(Gid) -> bool,
    ) {
        SimNic::receive(self, now, src, bytes, cm_uses)
    }

    fn candidate(&self) -> Option<Gid> {
        SimNic::candidate(self)
    }

    fn settle_candidate(&mut self, accepted: bool, cm_uses: &dyn Fn(Gid) -> bool) {
        SimNic::settle_candidate(self, accepted, cm_uses)
    }

    fn release_peer(&mut self, gid: Gid) {
        SimNic::release_peer(self, gid)
    }

    fn peer_addr(&self, gid: Gid) -> SocketAddr {
        SimNic::peer_addr(self, gid)
    }
}

/// A host: a NIC and the [`RdmaCm`] of its device. See the module docs.
#[derive(Debug)]
pub struct Host<N: Nic = SimNic> {
    nic: N,
    cm: RdmaCm,
    pinned: Option<SocketAddr>,
}

impl<N: Nic> Host<N> {
    /// The host of `nic`, with a CM configured by `cfg` (give every host its own
    /// `ca_guid` and `seed`). The CM's address is [`Nic::cm_gid`].
    ///
    /// # Errors
    /// What [`Nic::cm_gid`] returns (the device's `query_gid` error).
    pub fn new(nic: N, cfg: CmConfig) -> Result<Self, Error> {
        let cm = RdmaCm::with_local_gid(nic.cm_gid()?, cfg);
        Ok(Host {
            nic,
            cm,
            pinned: None,
        })
    }

    /// Serve only `peer` among the sockets of its IP (`None`: all). Several processes on one
    /// IP share one GID (the GID is the IP), so while a server is busy with one client, a
    /// second client on the same IP would otherwise take over the GID's route and receive the
    /// first one's packets. While pinned, the route is held ([`Nic::set_peer_addr`]), so the
    /// NIC drops datagrams from another socket of `peer`'s IP and counts them
    /// (`rx_foreign_socket`); the second client's CM retries its REQ until the server is free.
    pub fn pin_peer(&mut self, peer: Option<SocketAddr>) {
        if let Some(old) = self.pinned.take() {
            self.nic.release_peer(Gid::from_ip(old.ip()));
        }
        self.pinned = peer;
        if let Some(p) = peer {
            self.nic.set_peer_addr(Gid::from_ip(p.ip()), p);
        }
    }

    /// The NIC (verbs queries, counters, capture).
    pub fn nic(&self) -> &N {
        &self.nic
    }

    /// The NIC, mutably (verbs calls, `start_capture`/`take_capture`).
    pub fn nic_mut(&mut self) -> &mut N {
        &mut self.nic
    }

    /// The device (verbs calls).
    pub fn dev(&self) -> &N::Dev {
        self.nic.device()
    }

    /// The device, mutably (verbs calls).
    pub fn dev_mut(&mut self) -> &mut N::Dev {
        self.nic.device_mut()
    }

    /// The CM (state and counter queries).
    pub fn cm(&self) -> &RdmaCm {
        &self.cm
    }

    /// The CM and the device at once, for the rdma_cm calls that take the device:
    /// `let (cm, dev) = host.split(); cm.connect(dev, now, id, &param)`.
    pub fn split(&mut self) -> (&mut RdmaCm, &mut N::Dev) {
        (&mut self.cm, self.nic.device_mut())
    }

    /// Hands every MAD waiting on QP1 to the CM.
    fn poll_gsi(&mut self, now: SimTime) {
        let (cm, dev) = self.split();
        cm.poll_gsi(dev, now);
    }
}

impl<N: Nic> Endpoint for Host<N> {
    /// The NIC decodes the datagram (RC traffic or a MAD for QP1); the CM then takes the MADs.
    /// A MAD from a socket the NIC does not know yet is a candidate: its route is learned
    /// only if the CM accepts it (see the module docs).
    fn handle_datagram(&mut self, now: SimTime, src: SocketAddr, bytes: Bytes) {
        let cm = &self.cm;
        self.nic.receive(now, src, bytes, &|g| cm.peer_in_use(g));
        let Some(gid) = self.nic.candidate() else {
            self.poll_gsi(now);
            return;
        };
        let mut accepted = false;
        let (cm, dev) = self.split();
        cm.poll_gsi_with(dev, now, &mut |peer, ok| accepted |= ok && peer == gid);
        let cm = &self.cm;
        self.nic.settle_candidate(accepted, &|g| cm.peer_in_use(g));
    }

    /// The NIC's next datagram: its RC/UD packets and the CM's MADs, in the order queued.
    fn poll_transmit(&mut self, now: SimTime) -> Option<(SocketAddr, Bytes)> {
        Endpoint::poll_transmit(&mut self.nic, now)
    }

    /// The earlier of the NIC's (transport retransmission) and the CM's (MAD retry, TimeWait)
    /// deadlines.
    fn poll_timeout(&self) -> Option<SimTime> {
        match (Endpoint::poll_timeout(&self.nic), self.cm.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs whichever of the NIC's and the CM's timers are due at `now`, then hands any MAD
    /// that arrived meanwhile to the CM.
    fn handle_timeout(&mut self, now: SimTime) {
        if Endpoint::poll_timeout(&self.nic).is_some_and(|t| t <= now) {
            Endpoint::handle_timeout(&mut self.nic, now);
        }
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            let (cm, dev) = self.split();
            cm.handle_timeout(dev, now);
        }
        self.poll_gsi(now);
    }

    /// The NIC's address (its GID's IP, UDP port 4791).
    fn addr(&self) -> SocketAddr {
        Endpoint::addr(&self.nic)
    }
}
