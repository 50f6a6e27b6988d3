//! A ping node: one host (a NIC and its [`RdmaCm`](cm_core::api::RdmaCm)) behind the fault
//! layer on its UDP driver, its event channel and its completion channel — what a
//! [`Session`](super::session::Session) runs a connection on. A server's node serves one
//! session after another.

use super::capture::CaptureSink;
use super::endpoint::{PingEndpoint, PingHost};
use super::lobby::{lobby_size, Candidate, Ctx, Lobby, Refusal};
use super::nic::{DeviceWaker, PingNic};
use super::node_config::cm_config;
use super::report::WireRecord;
use super::wire::FaultyEndpoint;
use super::{PingError, WireOptions};
use cm_core::api::{CmEvent, CmEventType, CmIdHandle, EventChannel};
use cm_core::engine::{CmConfig, IbCmState};
use rnic_hw::HwOptions;
use rnic_sim::fabric::udp::{
    size_socket_buffers, SpawnedUdpDriver, UdpDriver, UdpHandle, SOCKET_BUFFER_BYTES,
};
use rnic_sim::nic::SimNic;
use rnic_sim::rng::Rng;
use rnic_testbed::host::Host;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use verbs_core::{CompChannel, Device, Gid, PdHandle, SimTime};

/// The most requests a server keeps waiting for their IP address to be free (a second client
/// of an IP whose client is in session or has completed its handshake): past it the newest
/// is refused with a REJ ("server busy").
pub const MAX_DEFERRED: usize = 8;

/// The backlog a ping server listens with: connection requests the CM holds until the
/// server reads them (each a passive id; Linux's `max_backlog` default, 1024). The server
/// reads them into its lobby whenever it runs, so under a flood a real client's REQ finds
/// room more often than behind a backlog of a few.
pub const LISTEN_BACKLOG: u32 = 1024;

/// [`Rng::fork`] label of the drop decisions' seed ("drop").
const DROP_SEED_STREAM: u64 = 0x6472_6f70;

/// A host (a NIC + RdmaCm) behind the fault layer, running on a real UDP socket: the
/// simulated RNIC by default, or a hardware RNIC whose events a second thread waits for
/// ([`DeviceWaker`]).
pub struct Node<N: PingNic = SimNic> {
    driver: SpawnedUdpDriver<PingEndpoint<N>>,
    waker: Option<DeviceWaker>,
    ch: EventChannel,
    pd: PdHandle,
    cfg: CmConfig,
    /// The seed the node was made with ([`WireOptions::seed`]).
    seed: u64,
    comp: CompChannel,
    /// [`PingNic::describe`] of the NIC, taken at start.
    described: String,
    /// Clients refused for want of room in `deferred`.
    refused: AtomicU64,
    /// Events of other ids read while a session ran (a second client's CONNECT_REQUEST
    /// while the server is busy): the next [`next_event`](Self::next_event) returns them
    /// first. On a server, only CONNECT_REQUESTs the lobby could not take yet (their IP
    /// address had a client already).
    deferred: Mutex<VecDeque<CmEvent>>,
    /// A server's lobby ([`Node::open_lobby`]): it runs the handshakes of waiting clients.
    lobby: Mutex<Option<Lobby>>,
    /// The receive buffer the kernel granted the socket, bytes (the lobby's size follows it).
    recv_buffer: usize,
    /// The wire counters at the last report: the next report counts from there, so that what
    /// arrived while a server waited between clients (a flood, refused requests) shows in the
    /// next client's report.
    reported: Mutex<WireRecord>,
}

impl<N: PingNic> Node<N> {
    /// Binds `bind` (a concrete IP; port 0 for any) and starts the driver. The device's GID is
    /// the socket's IP (`device`: the hardware device's RoCEv2 GID of that IP); a peer's
    /// socket is learned from the wire once the CM accepted a MAD from it (the host's route
    /// rule, `rnic_testbed::host`). `capture` records every datagram as
    /// it crosses the fault layer (`--pcap`, [`FaultyEndpoint::set_capture`]).
    ///
    /// # Errors
    /// [`PingError::Io`] if the socket cannot be bound; [`PingError::Verbs`] from the device;
    /// [`PingError::Hardware`] if the hardware device cannot be opened.
    pub fn new(
        name: &str,
        bind: SocketAddr,
        wire: &WireOptions,
        device: Option<&HwOptions>,
        capture: Option<Box<dyn CaptureSink>>,
    ) -> Result<Node<N>, PingError> {
        if bind.ip().is_unspecified() {
            return Err(PingError::Options(format!(
                "{bind}: give a concrete IP address (the RNIC's GID is that address)"
            )));
        }
        let socket = std::net::UdpSocket::bind(bind).map_err(|e| PingError::Bind(bind, e))?;
        let addr = socket.local_addr()?;
        let buffers = size_socket_buffers(&socket, SOCKET_BUFFER_BYTES);
        if buffers.capped() {
            eprintln!(
                "warning: {addr}: UDP socket buffers {} KiB receive / {} KiB send, asked {} KiB \
                 (capped by net.core.rmem_max / wmem_max): each QP keeps at most {} KiB in \
                 flight",
                buffers.recv >> 10,
                buffers.send >> 10,
                SOCKET_BUFFER_BYTES >> 10,
                buffers.rc_window_bytes() >> 10
            );
        }
        let mut nic = N::open(name, addr, wire, device)?;
        nic.set_window_bytes(buffers.rc_window_bytes());
        // A route for every client a server's lobby may run a handshake with, and for those
        // waiting in the CM's backlog and in `deferred`, with room to spare.
        let recv_buffer = buffers.recv;
        nic.set_route_capacity(2 * lobby_size(recv_buffer, LISTEN_BACKLOG as usize));
        let pd = nic.device_mut().alloc_pd()?;
        let waiter = nic.event_waiter()?;
        let described = nic.describe();
        let mut cfg = cm_config(addr, wire);
        if let Some(max) = nic.max_path_mtu() {
            cfg.path_mtu = cfg.path_mtu.min(max);
        }
        let mut host = Host::new(nic, cfg)?;
        let ch = host.split().0.create_event_channel();
        // The drop decisions depend on the seed and each datagram ([`super::drops`]), not on
        // the socket as the identifiers do.
        let drop_seed = Rng::new(wire.seed).fork(DROP_SEED_STREAM).key();
        let mut ep = FaultyEndpoint::new(PingHost::new(host), wire.drop_rate, drop_seed);
        if let Some(sink) = capture {
            ep.set_capture(sink);
        }
        let driver = UdpDriver::spawn(ep, socket)?;
        // The application waits for completions (through the CQs' channel) and CM events
        // only: ACKs and other traffic do not wake it.
        let comp = CompChannel::new();
        let events = comp.clone();
        driver
            .handle()
            .set_wake_filter(move |ep: &PingEndpoint<N>| {
                let mut any = false;
                while events.try_get_cq_event().is_ok() {
                    any = true;
                }
                let h = ep.inner();
                let cm = h.host().cm().pending_events(ch) > 0 || h.heard();
                if h.data.is_empty() {
                    any || cm || h.has_comm_est()
                } else {
                    // The data phases run in the driver: wake the application when one
                    // settles or has per-iteration lines to print (and for completions of a
                    // session past its data phase, while others still run).
                    any || cm || h.any_settled() || h.data_lines(None)
                }
            });
        let waker = waiter
            .map(|w| DeviceWaker::spawn(w, driver.handle().clone(), comp.clone()))
            .transpose()?;
        // A signal wakes the application's waits (they check it in their conditions).
        let h = driver.handle().clone();
        crate::interrupt::on_interrupt(move || h.with(|_, _| ()));
        Ok(Node {
            driver,
            waker,
            ch,
            pd,
            cfg,
            seed: wire.seed,
            comp,
            described,
            refused: AtomicU64::new(0),
            deferred: Mutex::new(VecDeque::new()),
            lobby: Mutex::new(None),
            recv_buffer,
            reported: Mutex::new(WireRecord::default()),
        })
    }

    /// What the node runs on ([`PingNic::describe`]), for the report.
    pub fn described(&self) -> &str {
        &self.described
    }

    /// The seed the node was made with ([`WireOptions::seed`]): `--seed` repeats its run.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The CM's configuration (its timers, the path MTU it negotiates).
    pub fn cfg(&self) -> &CmConfig {
        &self.cfg
    }

    /// The driver handle.
    pub fn handle(&self) -> &UdpHandle<PingEndpoint<N>> {
        self.driver.handle()
    }

    /// The UDP socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.driver.local_addr()
    }

    /// The wall-clock instant of the driver's time zero (to merge two nodes' timelines).
    pub fn epoch(&self) -> std::time::Instant {
        self.handle().epoch()
    }

    /// The node's event channel.
    pub fn channel(&self) -> EventChannel {
        self.ch
    }

    /// The node's protection domain.
    pub fn pd(&self) -> PdHandle {
        self.pd
    }

    /// The completion channel every CQ of the node's sessions reports to.
    pub fn comp(&self) -> &CompChannel {
        &self.comp
    }

    /// Routes the GID of `peer`'s IP to `peer` (the client, before connecting).
    pub fn set_peer(&self, peer: SocketAddr) {
        self.handle().with(|ep, _| {
            ep.inner_mut()
                .host_mut()
                .nic_mut()
                .set_peer_addr(Gid::from_ip(peer.ip()), peer)
        });
    }

    /// Whether the capture (`--pcap`) failed to write, and why (the file and the OS error).
    ///
    /// # Errors
    /// [`PingError::Pcap`] with the first write error: the capture stopped there.
    pub fn capture_result(&self) -> Result<(), PingError> {
        match self
            .handle()
            .with(|ep, _| ep.capture().and_then(|c| c.error()))
        {
            Some(e) => Err(PingError::Pcap(e)),
            None => Ok(()),
        }
    }

    /// Makes this node a server's: from now on, requests of waiting clients go to a
    /// [`Lobby`] whose QPs keep `recvs` receives posted once in session, sized for the
    /// socket's receive buffer ([`lobby_size`]), whose connected clients may stay silent for
    /// `silent` (the server's `--timeout`).
    pub fn open_lobby(&self, recvs: u32, silent: Duration) {
        let size = lobby_size(self.recv_buffer, LISTEN_BACKLOG as usize);
        *lock(&self.lobby) = Some(Lobby::new(recvs, size, silent));
    }

    /// Reads (and acks) every CM event on the channel: returns id `id`'s, and routes the
    /// others ([`route`](Self::route)). Call under the endpoint lock (`handle().with`).
    pub(super) fn own_events(
        &self,
        ep: &mut PingEndpoint<N>,
        now: SimTime,
        id: Option<CmIdHandle>,
    ) -> Vec<CmEvent> {
        let mut own = id.map_or_else(Vec::new, |id| ep.inner_mut().take_mail(id));
        while let Some(ev) = get_event(ep, now, self.ch) {
            if Some(ev.id) == id {
                own.push(ev);
            } else if let Some(ev) = ep.inner_mut().post(ev) {
                // Not a session's in progress.
                self.route(ep, now, ev);
            }
        }
        let comm_est = ep.inner_mut().take_comm_est();
        if let Some(lobby) = lock(&self.lobby).as_mut() {
            let mut cx = self.ctx(ep, now);
            for qpn in comm_est {
                lobby.on_comm_est(&mut cx, qpn);
            }
        }
        own
    }

    /// An event of another id than the session's. With a lobby (a server): requests enter it
    /// (or wait in `deferred` when their IP address has a client already), events of its
    /// candidates go to it, and the rest (late events of earlier connections, of withdrawn
    /// requests) are dropped. Without one (a client), events wait in `deferred`. Past
    /// [`MAX_DEFERRED`] waiting requests, the newest is refused ("server busy").
    fn route(&self, ep: &mut PingEndpoint<N>, now: SimTime, ev: CmEvent) {
        let mut lobby = lock(&self.lobby);
        let ev = match lobby.as_mut() {
            None => ev,
            Some(lobby) => {
                let mut cx = self.ctx(ep, now);
                if ev.event != CmEventType::ConnectRequest {
                    // Not a candidate's: nothing waits for it.
                    let _ = lobby.on_event(&mut cx, ev);
                    return;
                }
                match lobby.admit(&mut cx, ev) {
                    Ok(()) => return,
                    Err(Refusal::Wait(ev)) => ev,
                    Err(Refusal::Reject { id, why, quiet }) => {
                        if !quiet {
                            eprintln!("rnic ping: refused a client: {why}");
                        }
                        refuse(ep, now, id, &why);
                        return;
                    }
                }
            }
        };
        let mut deferred = lock(&self.deferred);
        if deferred.len() < MAX_DEFERRED {
            deferred.push_back(ev);
        } else if ev.event == CmEventType::ConnectRequest {
            // More clients waiting than the listen backlog: refuse the newest, as a full
            // backlog would have dropped its REQ (the queue is the backlog's continuation:
            // fetching events frees backlog room, so without this bound a flood of REQs
            // would queue without end).
            refuse(ep, now, ev.id, "server busy");
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The next client whose handshake completed, waiting at most `wait` for one; requests
    /// that waited for their IP address enter the lobby as soon as it is free. `None` when
    /// none came in time.
    pub(super) fn next_client(&self, wait: Duration) -> Option<Candidate> {
        self.next_client_by(wait, |l, cx| l.take_ready(cx))
    }

    /// The next connection of the group `nonce` of address `ip` (a `--qps` client's) whose
    /// handshake completed, waiting at most `wait`.
    pub(super) fn next_of_group(
        &self,
        wait: Duration,
        ip: std::net::IpAddr,
        nonce: u32,
    ) -> Option<Candidate> {
        self.next_client_by(wait, |l, _| l.take_ready_of(ip, nonce))
    }

    fn next_client_by(
        &self,
        wait: Duration,
        take: impl Fn(&mut Lobby, &mut Ctx<'_, N>) -> Option<Candidate>,
    ) -> Option<Candidate> {
        let deadline = self
            .handle()
            .now()
            .plus_nanos(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
        loop {
            let (ready, expiry) = self.handle().with(|ep, now| {
                self.own_events(ep, now, None);
                self.admit_deferred(ep, now);
                ep.inner_mut().take_heard();
                let mut lobby = lock(&self.lobby);
                let Some(lobby) = lobby.as_mut() else {
                    return (None, None);
                };
                let mut cx = self.ctx(ep, now);
                let expiry = lobby.expire_silent(&mut cx);
                (take(lobby, &mut cx), expiry)
            });
            if ready.is_some() {
                return ready;
            }
            let now = self.handle().now();
            if now >= deadline {
                return None;
            }
            if crate::interrupt::requested() {
                return None;
            }
            let until = expiry.map_or(deadline, |e| e.min(deadline));
            if until <= now {
                continue;
            }
            let ch = self.ch;
            self.handle().wait_until(until - now, |ep| {
                ep.inner().host().cm().pending_events(ch) > 0
                    || ep.inner().has_comm_est()
                    || ep.inner().heard()
                    || crate::interrupt::requested()
            });
        }
    }

    /// Moves the deferred requests whose IP address is free into the lobby (dropping those
    /// withdrawn meanwhile: their client gave up).
    fn admit_deferred(&self, ep: &mut PingEndpoint<N>, now: SimTime) {
        let waiting = std::mem::take(&mut *lock(&self.deferred));
        for ev in waiting {
            let alive = matches!(
                ep.inner().host().cm().ib_cm_state(ev.id),
                Some(IbCmState::ReqRcvd | IbCmState::MraReqSent)
            );
            if !alive {
                let (cm, dev) = ep.inner_mut().host_mut().split();
                let _ = cm.destroy_id(dev, now, ev.id);
                continue;
            }
            self.route(ep, now, ev);
        }
    }

    /// What the lobby works with: the endpoint (under the driver's lock), `now`, the PD and
    /// the completion channel.
    fn ctx<'a>(&'a self, ep: &'a mut PingEndpoint<N>, now: SimTime) -> Ctx<'a, N> {
        Ctx {
            ep,
            now,
            pd: self.pd,
            comp: &self.comp,
        }
    }

    /// Ends every client waiting for its session (see [`Lobby::close`]) and refuses the
    /// requests still deferred, with `why`: what a server does when a signal stops it.
    pub(super) fn close_lobby(&self, why: &str) {
        self.handle().with(|ep, now| {
            self.own_events(ep, now, None);
            if let Some(lobby) = lock(&self.lobby).as_mut() {
                let mut cx = self.ctx(ep, now);
                lobby.close(&mut cx, why);
            }
            let deferred = std::mem::take(&mut *lock(&self.deferred));
            for ev in deferred {
                if ev.event == CmEventType::ConnectRequest {
                    refuse(ep, now, ev.id, why);
                }
            }
        });
    }

    /// Notes the IP address of the client in session (`None`: the session ended).
    pub(super) fn set_serving(&self, ip: Option<std::net::IpAddr>) {
        if let Some(l) = lock(&self.lobby).as_mut() {
            l.set_serving(ip);
        }
    }

    /// The wire counters since the last report (or the start), and marks them reported.
    pub(super) fn wire_since_report(&self) -> WireRecord {
        let now = wire_counters(self);
        let mut reported = lock(&self.reported);
        let since = now.since(&reported);
        *reported = now;
        since
    }

    /// QP `qpn`'s own RC retries and timeouts over its life, where the NIC tells.
    pub(super) fn qp_rc_counters(&self, qpn: u32) -> Option<(u64, u64)> {
        self.handle()
            .with(|ep, _| ep.inner().host().nic().qp_rc_counters(qpn))
    }

    /// The wire counters now (since the node started).
    pub(super) fn wire_now(&self) -> WireRecord {
        wire_counters(self)
    }

    /// Requests evicted from the lobby by newer ones while still in their handshake.
    pub fn evicted(&self) -> u64 {
        lock(&self.lobby).as_ref().map_or(0, |l| l.evicted)
    }

    /// Clients disconnected for staying silent after their handshake completed.
    pub fn silent(&self) -> u64 {
        lock(&self.lobby).as_ref().map_or(0, |l| l.silent)
    }

    /// Clients refused because [`MAX_DEFERRED`] were already waiting.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The next CM event on the node's channel (acked), waiting at most `timeout`.
    pub fn next_event(&self, timeout: Duration) -> Option<CmEvent> {
        if let Some(ev) = lock(&self.deferred).pop_front() {
            return Some(ev);
        }
        let ch = self.ch;
        self.handle().wait_until(timeout, |ep| {
            ep.inner().host().cm().pending_events(ch) > 0 || crate::interrupt::requested()
        });
        self.handle().with(|ep, now| get_event(ep, now, ch))
    }

    /// Stops the driver.
    ///
    /// # Errors
    /// The driver's receive error, if it ended with one.
    pub fn shutdown(mut self) -> Result<(), PingError> {
        if let Some(w) = self.waker.take() {
            w.stop();
        }
        Ok(self.driver.shutdown()?)
    }
}

/// `rdma_reject` + `rdma_destroy_id`; a failure to refuse changes nothing.
fn refuse<N: PingNic>(ep: &mut PingEndpoint<N>, now: SimTime, id: CmIdHandle, why: &str) {
    let (cm, dev) = ep.inner_mut().host_mut().split();
    let _ = cm.reject(dev, now, id, why.as_bytes());
    let _ = cm.destroy_id(dev, now, id);
}

/// `rdma_get_cm_event` + `rdma_ack_cm_event`. Fetching a CONNECT_RESPONSE sends the RTU
/// (librdmacm's work at fetch time); the driver transmits it when the caller's `with` ends.
fn get_event<N: PingNic>(
    ep: &mut PingEndpoint<N>,
    now: SimTime,
    ch: EventChannel,
) -> Option<CmEvent> {
    let (cm, dev) = ep.inner_mut().host_mut().split();
    let ev = cm.get_cm_event(dev, now, ch).ok()?;
    // Acking an event we hold cannot fail; nothing to do if it did.
    let _ = cm.ack_cm_event(ev.clone());
    Some(ev)
}

/// The node's wire counters since it started.
fn wire_counters<N: PingNic>(node: &Node<N>) -> WireRecord {
    let udp = node.handle().stats();
    node.handle().with(|ep, _| {
        let host = ep.inner().host();
        let nic = host.nic().datagram_counters();
        WireRecord {
            nic_tx: nic.tx_datagrams,
            nic_rx: nic.rx_datagrams,
            faults: ep.stats(),
            other_client_drops: nic.rx_foreign_socket,
            cm_retransmits: host.cm().counters().tx_retransmits,
            rc_retransmits: host.nic().rc_retransmits(),
            send_calls: udp.send_calls,
            recv_calls: udp.recv_calls,
            rc_timeouts: host.nic().rc_timeouts(),
            drops: drop_counters(
                host.cm().counters(),
                host.nic(),
                node,
                ep.capture().map_or(0, |c| c.not_written()),
            ),
        }
    })
}

/// Every reason input was refused for, by name (zero counts too; [`WireRecord::since`] keeps
/// the ones that counted).
fn drop_counters<N: PingNic>(
    c: &cm_core::engine::CmCounters,
    nic: &N,
    node: &Node<N>,
    capture_not_written: u64,
) -> std::collections::BTreeMap<String, u64> {
    let cm = [
        ("cm.rx_malformed", c.rx_malformed),
        ("cm.rx_unmatched", c.rx_unmatched),
        ("cm.rx_wrong_state", c.rx_wrong_state),
        ("cm.rx_wrong_qpn", c.rx_wrong_qpn),
        ("cm.rx_wrong_source", c.rx_wrong_source),
        ("cm.rx_backlog_full", c.rx_backlog_full),
        ("cm.rx_no_listener", c.rx_no_listener),
        ("cm.rx_dreq_unknown", c.rx_dreq_unknown),
        ("cm.requests_expired", c.requests_expired),
    ];
    cm.into_iter()
        .chain(nic.drop_counters())
        .chain([
            ("pcap.not_written", capture_not_written),
            ("ping.clients_refused", node.refused()),
            ("ping.handshakes_evicted", node.evicted()),
            ("ping.silent_clients", node.silent()),
        ])
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// Locks `m`; a lock poisoned by a panicking session thread still guards consistent data
/// (every critical section here is a few assignments).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
