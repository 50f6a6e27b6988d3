//! The peer process of a baseline or of the CM rate: `rnic bench-peer ROLE …` (hidden from
//! `rnic --help`). It binds, prints `ready ADDR` (the address it bound: a port 0 becomes the
//! one the OS chose), serves one round and exits 0. [`Peer`] starts one and waits for that
//! line; [`serve`] is the peer's side.

use super::baseline;
use super::cm;
use super::process::Proc;
use super::BenchError;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

/// How long a peer may take to exit after its round.
const EXIT_DEADLINE: Duration = Duration::from_secs(30);

/// What a peer process serves (`rnic bench-peer ROLE`).
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum PeerRole {
    /// Accept one TCP connection on ADDR, read it to EOF, answer the byte count, exit.
    TcpSink {
        /// ip:port to listen on (port 0: any).
        addr: SocketAddr,
    },
    /// Echo UDP datagrams on ADDR until a 1-byte `Q`, exit.
    UdpEcho {
        /// ip:port to bind (port 0: any).
        addr: SocketAddr,
    },
    /// Serve COUNT TCP connections on ADDR one after the other (read to EOF, close), exit.
    TcpAccept {
        /// ip:port to listen on (port 0: any).
        addr: SocketAddr,
        /// Connections to serve.
        #[arg(long)]
        count: u64,
    },
    /// An rdma_cm server on IP (simulated RNIC over UDP): accept CYCLES connections and
    /// answer each DISCONNECTED with rdma_disconnect, exit.
    CmServer {
        /// The IPv4 address to bind (UDP port chosen by the OS; the CM port is fixed).
        ip: Ipv4Addr,
        /// The client's UDP socket (its GID is routed there).
        #[arg(long)]
        client: SocketAddr,
        /// Connections to serve.
        #[arg(long)]
        cycles: u64,
    },
}

impl PeerRole {
    /// The arguments after `rnic bench-peer`.
    fn args(&self) -> Vec<String> {
        match self {
            PeerRole::TcpSink { addr } => vec!["tcp-sink".into(), addr.to_string()],
            PeerRole::UdpEcho { addr } => vec!["udp-echo".into(), addr.to_string()],
            PeerRole::TcpAccept { addr, count } => vec![
                "tcp-accept".into(),
                addr.to_string(),
                "--count".into(),
                count.to_string(),
            ],
            PeerRole::CmServer { ip, client, cycles } => vec![
                "cm-server".into(),
                ip.to_string(),
                "--client".into(),
                client.to_string(),
                "--cycles".into(),
                cycles.to_string(),
            ],
        }
    }

    fn name(&self) -> &'static str {
        match self {
            PeerRole::TcpSink { .. } => "tcp-sink",
            PeerRole::UdpEcho { .. } => "udp-echo",
            PeerRole::TcpAccept { .. } => "tcp-accept",
            PeerRole::CmServer { .. } => "cm-server",
        }
    }
}

/// A running peer process (killed if still running when dropped).
#[derive(Debug)]
pub struct Peer {
    proc: Proc,
    addr: SocketAddr,
}

impl Peer {
    /// Starts `rnic bench-peer ROLE` (`rnic` is the path of the `rnic` binary) and waits for
    /// its `ready ADDR` line.
    ///
    /// # Errors
    /// [`BenchError::Io`] when it cannot be started; [`BenchError::Process`] when it exits or
    /// prints something else first.
    pub fn start(rnic: &Path, role: &PeerRole) -> Result<Peer, BenchError> {
        let mut cmd = std::process::Command::new(rnic);
        cmd.arg("bench-peer").args(role.args());
        let mut proc = Proc::spawn(format!("the {} peer", role.name()), cmd)?;
        let line = proc.read_line()?;
        let addr = line
            .strip_prefix("ready ")
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| {
                BenchError::Process(format!(
                    "the {} peer printed {line:?}, not `ready ADDR`",
                    role.name()
                ))
            })?;
        Ok(Peer { proc, addr })
    }

    /// The address it bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for it to exit 0 (it does after its round).
    ///
    /// # Errors
    /// [`BenchError::Process`] when it fails or does not exit within 30 s.
    pub fn finish(self) -> Result<(), BenchError> {
        self.proc.finish_ok(EXIT_DEADLINE).map(|_| ())
    }
}

/// The peer's side: serves `role`, printing `ready ADDR` on stdout once it can be reached.
///
/// # Errors
/// What the role's serving half returns (socket errors, an unexpected CM event …).
pub fn serve(role: &PeerRole) -> Result<(), BenchError> {
    let mut ready = |addr: SocketAddr| -> Result<(), BenchError> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready {addr}")
            .and_then(|()| out.flush())
            .map_err(|e| BenchError::io("stdout", e))
    };
    match role {
        PeerRole::TcpSink { addr } => baseline::tcp_sink(*addr, &mut ready),
        PeerRole::UdpEcho { addr } => baseline::udp_echo(*addr, &mut ready),
        PeerRole::TcpAccept { addr, count } => baseline::tcp_accept(*addr, *count, &mut ready),
        PeerRole::CmServer { ip, client, cycles } => {
            cm::serve_cycles(*ip, *client, *cycles, &mut ready)
        }
    }
}
