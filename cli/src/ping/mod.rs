//! `rnic ping`: rdma-core's `rping` for the simulated RNIC over real UDP. A [`Server`] and a
//! [`Client`], each a simulated host (SimNic + RdmaCm) on its own UDP socket (usually in two
//! processes, possibly on two hosts), connect through the CM, exchange buffer addresses and
//! keys by SEND, run `count` iterations of RDMA WRITE, RDMA READ and SEND with every byte
//! verified, then one side disconnects with receives still posted. Each side returns a
//! [`PingReport`]: CM events with timestamps, completions, QP states, a verdict.
//!
//! One iteration (`--op all`): the client WRITEs pattern `W` into the server's write region and
//! SENDs pattern `S`; the server checks both (the WRITE was posted first on the same QP, so it
//! has landed), fills its read region with `R` and SENDs `P` back; the client checks `P`, READs
//! the server's read region and checks `R`. `--op send` is the SEND/reply ping-pong only (the
//! latency benchmark); `--op write` is a stream of WRITEs, the last one checked by the server.
//! A FIN / FIN-ACK exchange ends the data phase; then the `--disconnect-by` side calls
//! `rdma_disconnect` and the other answers DISCONNECTED with its own (cm-spec §4.4, §4.5).
//!
//! Faults ([`wire`]) live between the UDP driver and the host: seeded loss and a dead peer.

pub mod app;
pub mod capture;
pub mod cli;
pub mod drops;
pub mod endpoint;
pub mod lobby;
pub mod nic;
pub mod node;
pub mod node_config;
pub mod params;
pub mod report;
pub mod session;
pub mod wire;

pub use node::Node;
pub use params::{Group, Params};
pub use report::PingReport;

use capture::{CaptureSink, PcapFile};
use cm_core::wire::RdmaPortSpace;
use nic::PingNic;
use rnic_hw::HwOptions;
use rnic_sim::nic::SimNic;
use session::Session;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use verbs_core::Mtu;

/// The largest `--size`, bytes (1 MiB).
pub const MAX_SIZE: u32 = 1 << 20;

/// The largest `--recvs`.
pub const MAX_RECVS: u32 = 1024;

/// The largest `--depth` (perftest's `-t` default is 128).
pub const MAX_DEPTH: u32 = 1024;

/// The largest `--qps`: connections one client runs at once.
pub const MAX_QPS: u16 = 64;

/// What went wrong outside the checks: bad options, a socket, the device, the capture file.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    /// An option is out of range.
    #[error("{0}")]
    Options(String),
    /// A socket or file operation failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The UDP socket could not be bound to this address (e.g. `EADDRINUSE`: another process
    /// has it; `EADDRNOTAVAIL`: not an address of this host).
    #[error("cannot bind UDP {0}: {1}")]
    Bind(std::net::SocketAddr, std::io::Error),
    /// No route from this host to the server's address (e.g. `ENETUNREACH`).
    #[error("cannot reach {0}: {1}")]
    Route(std::net::SocketAddr, std::io::Error),
    /// The device refused a verbs or CM call.
    #[error("{0}")]
    Verbs(#[from] verbs_core::Error),
    /// The pcap file could not be written.
    #[error("pcap: {0}")]
    Pcap(String),
    /// The hardware device cannot be used (`--device`).
    #[error("{0}")]
    Hardware(#[from] rnic_hw::HwError),
}

/// Which side of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The active side (`rdma_connect`).
    Client,
    /// The passive side (`rdma_listen`/`rdma_accept`).
    Server,
}

impl Role {
    /// `client` or `server`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }
}

/// Who calls `rdma_disconnect` first (`--disconnect-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[repr(u8)]
pub enum DisconnectBy {
    /// The client disconnects; the server answers.
    Client = 0,
    /// The server disconnects; the client answers.
    Server = 1,
}

impl DisconnectBy {
    /// The role that disconnects.
    pub fn role(self) -> Role {
        match self {
            DisconnectBy::Client => Role::Client,
            DisconnectBy::Server => Role::Server,
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(DisconnectBy::Client),
            1 => Some(DisconnectBy::Server),
            _ => None,
        }
    }
}

/// What each iteration does (`--op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[repr(u8)]
pub enum PingOp {
    /// RDMA WRITE, SEND and its reply, RDMA READ; every byte checked.
    All = 0,
    /// SEND and its reply only (latency).
    Send = 1,
    /// RDMA WRITE only, `--depth` outstanding (throughput); the server checks the last one.
    Write = 2,
}

impl PingOp {
    /// `all`, `send` or `write`.
    pub fn name(self) -> &'static str {
        match self {
            PingOp::All => "all",
            PingOp::Send => "send",
            PingOp::Write => "write",
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(PingOp::All),
            1 => Some(PingOp::Send),
            2 => Some(PingOp::Write),
            _ => None,
        }
    }
}

/// The wire and timers of one node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WireOptions {
    /// Probability of dropping each datagram, in either direction (`--drop-rate`, 0 ..= 1).
    pub drop_rate: f64,
    /// The seed (`--seed`; `rnic ping` draws one from the OS without it): with the node's
    /// socket address it seeds the CM's identifiers ([`node_config::cm_config`]) and the simulated
    /// RNIC's ([`node_config::device_seed`]); alone, the drop decisions. [`Default`] gives 1, for
    /// tests in one process; a driver facing a network should use
    /// [`os_seed`](rnic_sim::fabric::udp::os_seed).
    pub seed: u64,
    /// Short CM and transport timers (`--fast-timers`): DREQ gives up (-110) after ≈ 120 ms,
    /// RC retries (RETRY_EXC_ERR) after ≈ 134 ms, TimeWait 16 ms. Otherwise Linux's defaults.
    pub fast_timers: bool,
    /// Path MTU.
    pub mtu: Mtu,
}

impl Default for WireOptions {
    fn default() -> Self {
        WireOptions {
            drop_rate: 0.0,
            seed: 1,
            fast_timers: false,
            mtu: Mtu::Mtu1024,
        }
    }
}

/// This side's application options.
#[derive(Debug, Clone, PartialEq)]
pub struct SideOptions {
    /// Receives kept posted (`--recvs`, 1 ..= 1024); all are still posted at the disconnect.
    pub recvs: u32,
    /// Treat the peer as dead after this many iterations (`--kill-peer-after`).
    pub kill_peer_after: Option<u32>,
    /// WRITEs kept outstanding by a `--op write` client (`--depth`, 1 ..= [`MAX_DEPTH`]).
    pub depth: u32,
    /// Longest wait for the peer in the data phase before giving up (`--timeout`).
    pub timeout: Duration,
    /// Write every datagram this side sent and received to this pcap file (`--pcap`).
    pub pcap: Option<PathBuf>,
    /// Bytes of each frame the pcap file keeps (`--snaplen`).
    pub snaplen: u32,
    /// The hardware RNIC to run on (`--device`; needs a [`nic::PingNic`] that takes one).
    pub device: Option<HwOptions>,
    /// Print a progress line on stderr every second (`--progress`).
    pub progress: bool,
    /// Print one line per iteration on stderr (`--per-iteration`, rping's `-v`).
    pub per_iteration: bool,
}

impl Default for SideOptions {
    fn default() -> Self {
        SideOptions {
            recvs: 4,
            kill_peer_after: None,
            depth: 1,
            timeout: Duration::from_secs(10),
            pcap: None,
            snaplen: capture::DEFAULT_SNAPLEN,
            device: None,
            progress: false,
            per_iteration: false,
        }
    }
}

impl SideOptions {
    fn validate(&self) -> Result<(), PingError> {
        if !(1..=MAX_RECVS).contains(&self.recvs) {
            return Err(PingError::Options(format!(
                "--recvs must be 1..={MAX_RECVS}"
            )));
        }
        if !(1..=MAX_DEPTH).contains(&self.depth) {
            return Err(PingError::Options(format!(
                "--depth must be 1..={MAX_DEPTH}"
            )));
        }
        Ok(())
    }
}

fn validate_params(p: &Params) -> Result<(), PingError> {
    if !(1..=MAX_SIZE).contains(&p.size) {
        return Err(PingError::Options(format!("--size must be 1..={MAX_SIZE}")));
    }
    Ok(())
}

fn validate_wire(w: &WireOptions) -> Result<(), PingError> {
    if !(0.0..=1.0).contains(&w.drop_rate) {
        return Err(PingError::Options("--drop-rate must be 0..=1".into()));
    }
    Ok(())
}

/// The `--pcap` file of `side`, created with its header, as the fault layer's capture sink.
fn pcap_sink(side: &SideOptions) -> Result<Option<Box<dyn CaptureSink>>, PingError> {
    let Some(path) = side.pcap.as_deref() else {
        return Ok(None);
    };
    Ok(Some(Box::new(PcapFile::create(path, side.snaplen)?)))
}

/// A ping server: a node listening on its UDP socket's address (the rdma_cm port is the UDP
/// port), on the simulated RNIC or (`Server<HwNic>`) a hardware one.
pub struct Server<N: PingNic = SimNic> {
    node: Node<N>,
    side: SideOptions,
}

impl<N: PingNic> Server<N> {
    /// Binds `listen` (a concrete IP; port 0 for any) and listens.
    ///
    /// # Errors
    /// Bad options; the socket cannot be bound; the pcap file cannot be created.
    pub fn bind(
        listen: SocketAddr,
        side: &SideOptions,
        wire: &WireOptions,
    ) -> Result<Server<N>, PingError> {
        side.validate()?;
        validate_wire(wire)?;
        let node = Node::new(
            "sim-server",
            listen,
            wire,
            side.device.as_ref(),
            pcap_sink(side)?,
        )?;
        let (addr, ch) = (node.local_addr(), node.channel());
        node.handle().with(|ep, _| {
            let (cm, _) = ep.inner_mut().host_mut().split();
            let id = cm.create_id(ch, RdmaPortSpace::Tcp)?;
            cm.bind_addr(id, addr)?;
            cm.listen(id, node::LISTEN_BACKLOG)
        })?;
        node.open_lobby(side.recvs, side.timeout);
        Ok(Server {
            node,
            side: side.clone(),
        })
    }

    /// The bound address (print it: `listening on ADDR`).
    pub fn local_addr(&self) -> SocketAddr {
        self.node.local_addr()
    }

    /// The node (for the demo's common timeline).
    pub fn node(&self) -> &Node<N> {
        &self.node
    }

    /// Waits (up to `wait`) for the next ping client whose connection handshake completed
    /// (the [`lobby`] runs the handshakes of every waiting client, so a request that
    /// never completes one holds nobody up) and serves it to the end. `Ok(None)` when no
    /// client came in time.
    ///
    /// # Errors
    /// The capture cannot be written.
    pub fn serve_one(&mut self, wait: Duration) -> Result<Option<PingReport>, PingError> {
        Ok(self.serve_next(wait)?.into_iter().next())
    }

    /// As [`serve_one`](Self::serve_one), for a client that may run several connections at
    /// once (`--qps`): waits (up to `--timeout` more) for the rest of its group and serves
    /// them all at once, one thread per connection. The reports in the connections' order;
    /// empty when no client came in time.
    ///
    /// # Errors
    /// The capture cannot be written.
    pub fn serve_next(&mut self, wait: Duration) -> Result<Vec<PingReport>, PingError> {
        let Some(first) = self.node.next_client(wait) else {
            return Ok(Vec::new());
        };
        let (ip, group) = (first.ip, first.params.group);
        let mut clients = vec![first];
        if let Some(g) = group {
            while clients.len() < usize::from(g.qps) {
                match self.node.next_of_group(self.side.timeout, ip, g.nonce) {
                    Some(c) => clients.push(c),
                    // The rest did not come: those that did are served (their client's
                    // other connections fail on its side).
                    None => break,
                }
            }
            clients.sort_by_key(|c| c.params.group.map(|g| g.index));
        }
        // The client's socket: the route the lobby held for it since its ESTABLISHED (one
        // socket for a whole group).
        let peer = clients[0].peer;
        // One client at a time: another on the same IP (a second process on one host) waits,
        // its datagrams dropped and retried, instead of taking over the route of the IP's GID.
        self.node
            .handle()
            .with(|ep, _| ep.inner_mut().host_mut().pin_peer(Some(peer)));
        self.node.set_serving(Some(ip));
        let sessions: Vec<Session<'_, N>> = clients
            .into_iter()
            .map(|c| {
                let mut setup = vec![(c.request, c.t0)];
                setup.extend(c.established);
                Session::new(
                    &self.node,
                    Role::Server,
                    c.id,
                    c.peer,
                    c.params,
                    &self.side,
                    c.t0,
                    setup,
                )
                .adopt(c.qp, c.cq)
            })
            .collect();
        let reports = run_sessions(sessions);
        self.node.set_serving(None);
        self.node
            .handle()
            .with(|ep, _| ep.inner_mut().host_mut().pin_peer(None));
        self.node.capture_result()?;
        Ok(reports)
    }

    /// Keeps the RNIC answering for two DREQ retransmission intervals
    /// ([`cm_core::engine::CmConfig::dreq_timeout_ms`]) before the process goes: if the DREP
    /// that answered the client's DREQ was lost, the client's next DREQ still gets one (a
    /// host's kernel outlives the process that disconnected), instead of its disconnect ending
    /// in −110.
    pub fn linger(&self) {
        let ms = 2 * self.node.cfg().dreq_timeout_ms();
        // Waits on the driver's condition with a condition that never holds: a bounded wait
        // while the driver thread runs, not a sleep of this logic.
        self.node
            .handle()
            .wait_until(Duration::from_millis(ms), |_| false);
    }

    /// Ends every client waiting in the lobby as a dying process's ids end: a connected one
    /// gets a DREQ, one in its handshake a REJ saying "server shutting down" (after a signal).
    pub fn close_waiting(&self) {
        self.node.close_lobby("server shutting down");
    }

    /// Stops the driver.
    ///
    /// # Errors
    /// The driver ended with a socket error.
    pub fn shutdown(self) -> Result<(), PingError> {
        self.node.shutdown()
    }
}

/// Runs `sessions` to the end, at once (one thread each beside this one, which runs the
/// first); their reports in order.
fn run_sessions<N: PingNic>(mut sessions: Vec<Session<'_, N>>) -> Vec<PingReport> {
    if sessions.len() <= 1 {
        return sessions.into_iter().map(Session::run).collect();
    }
    let first = sessions.remove(0);
    std::thread::scope(|scope| {
        let others: Vec<_> = sessions
            .into_iter()
            .map(|s| scope.spawn(move || s.run()))
            .collect();
        let mut reports = vec![first.run()];
        // A session thread that panicked has no report; its panic is re-raised by the scope.
        reports.extend(others.into_iter().filter_map(|h| h.join().ok()));
        reports
    })
}

/// A loopback address of this process's own, 127.a.b.c with `a` ≥ 1 taken from the process
/// ID: each process is a simulated RNIC, and its GID is its IP, so two clients on 127.0.0.1
/// would share a GID and the server could not tell their packets' destinations apart (real
/// RNICs never share an IP). Every 127/8 address is the loopback interface on Linux.
pub(crate) fn own_loopback_ip() -> IpAddr {
    let pid = std::process::id();
    let a = 1 + ((pid >> 16) % 254) as u8;
    IpAddr::from([127, a, (pid >> 8) as u8, pid as u8])
}

/// The local IP the OS would use to reach `server`, as the NIC `N` takes it
/// ([`PingNic::client_ip`]).
fn route_ip<N: PingNic>(server: SocketAddr, side: &SideOptions) -> Result<IpAddr, PingError> {
    let probe = std::net::UdpSocket::bind(SocketAddr::new(
        match server {
            SocketAddr::V4(_) => IpAddr::from([0, 0, 0, 0]),
            SocketAddr::V6(_) => IpAddr::from([0u16; 8]),
        },
        0,
    ))?;
    probe
        .connect(server)
        .map_err(|e| PingError::Route(server, e))?;
    N::client_ip(probe.local_addr()?.ip(), side.device.as_ref())
}

/// `--bind local` for a client of `server`: the same IP family, and (on the simulated RNIC,
/// whose GID is its IP) not the server's IP.
fn check_local(local: SocketAddr, server: SocketAddr, side: &SideOptions) -> Result<(), PingError> {
    if local.is_ipv4() != server.is_ipv4() {
        return Err(PingError::Options(format!(
            "--bind {local}: not the IP family of --connect {server}"
        )));
    }
    if side.device.is_none() && local.ip() == server.ip() {
        return Err(PingError::Options(format!(
            "--bind {local}: that is the server's IP, and each simulated RNIC's GID is its IP; \
             give another (every 127.x.y.z is loopback on Linux)"
        )));
    }
    Ok(())
}

/// A ping client: a node on a socket of the local IP that routes to the server, on the
/// simulated RNIC or (`Client<HwNic>`) a hardware one.
pub struct Client<N: PingNic = SimNic> {
    node: Node<N>,
    side: SideOptions,
}

impl<N: PingNic> Client<N> {
    /// Binds a UDP socket (any port) on the local address the OS would use to reach `server`.
    ///
    /// # Errors
    /// Bad options; no route to `server`; the socket cannot be bound; the pcap file cannot be
    /// created.
    pub fn bind(
        server: SocketAddr,
        side: &SideOptions,
        wire: &WireOptions,
    ) -> Result<Client<N>, PingError> {
        Client::bind_at(server, None, side, wire)
    }

    /// [`bind`](Self::bind), on the socket `local` if given (`--bind`, rping's `-I`; port 0
    /// for any): with a fixed address (and `--seed`) the identifiers repeat from run to run
    /// ([`node_config::cm_config`]). On the simulated RNIC `local`'s IP must differ from the
    /// server's (each RNIC's GID is its IP).
    ///
    /// # Errors
    /// As [`bind`](Self::bind); [`PingError::Options`] if `local`'s IP is the server's or
    /// its family differs; [`PingError::Bind`] if it cannot be bound (`EADDRNOTAVAIL`: not
    /// an address of this host; `EADDRINUSE`).
    pub fn bind_at(
        server: SocketAddr,
        local: Option<SocketAddr>,
        side: &SideOptions,
        wire: &WireOptions,
    ) -> Result<Client<N>, PingError> {
        side.validate()?;
        validate_wire(wire)?;
        if server.ip().is_unspecified() || server.port() == 0 {
            return Err(PingError::Options(format!(
                "--connect {server}: give the server's address and port"
            )));
        }
        let bind = match local {
            Some(l) => {
                check_local(l, server, side)?;
                l
            }
            None => SocketAddr::new(route_ip::<N>(server, side)?, 0),
        };
        let node = Node::new(
            "sim-client",
            bind,
            wire,
            side.device.as_ref(),
            pcap_sink(side)?,
        )?;
        node.set_peer(server);
        Ok(Client {
            node,
            side: side.clone(),
        })
    }

    /// The node (for the demo's common timeline).
    pub fn node(&self) -> &Node<N> {
        &self.node
    }

    /// Connects to `server` (its UDP socket; the rdma_cm port is the same number) and runs
    /// the exchange with `params`.
    ///
    /// # Errors
    /// Bad parameters; the CM refuses the id; the capture cannot be written.
    pub fn run(&mut self, server: SocketAddr, params: Params) -> Result<PingReport, PingError> {
        let mut reports = self.run_qps(server, params, 1)?;
        reports
            .pop()
            .ok_or_else(|| PingError::Options("no connection".into()))
    }

    /// Runs `qps` connections to `server` at once, each its own rdma_cm id and QP with
    /// `params` (perftest's `-q` with `-R`), one thread each; the server serves them as one
    /// group. The reports in the connections' order.
    ///
    /// # Errors
    /// Bad parameters (`qps` 1 ..= [`MAX_QPS`]); the CM refuses an id; the capture cannot be
    /// written.
    pub fn run_qps(
        &mut self,
        server: SocketAddr,
        params: Params,
        qps: u16,
    ) -> Result<Vec<PingReport>, PingError> {
        validate_params(&params)?;
        if !(1..=MAX_QPS).contains(&qps) {
            return Err(PingError::Options(format!("--qps must be 1..={MAX_QPS}")));
        }
        // The group's nonce: this process and socket.
        let nonce = std::process::id() << 16 ^ u32::from(self.node.local_addr().port());
        let ch = self.node.channel();
        let mut sessions = Vec::new();
        for index in 0..qps {
            let (id, t0) = self.node.handle().with(|ep, now| {
                let (cm, _) = ep.inner_mut().host_mut().split();
                let id = cm.create_id(ch, RdmaPortSpace::Tcp)?;
                cm.resolve_addr(id, None, server)?;
                Ok::<_, verbs_core::Error>((id, now))
            })?;
            let mut setup = Vec::new();
            if let Some(ev) = self.node.next_event(self.side.timeout) {
                setup.push((ev, t0));
            }
            let params = Params {
                group: (qps > 1).then_some(Group { qps, index, nonce }),
                ..params
            };
            sessions.push(Session::new(
                &self.node,
                Role::Client,
                id,
                server,
                params,
                &self.side,
                t0,
                setup,
            ));
        }
        let reports = run_sessions(sessions);
        self.node.capture_result()?;
        Ok(reports)
    }

    /// Stops the driver.
    ///
    /// # Errors
    /// The driver ended with a socket error.
    pub fn shutdown(self) -> Result<(), PingError> {
        self.node.shutdown()
    }
}
