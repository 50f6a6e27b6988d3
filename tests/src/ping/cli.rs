//! The `rnic ping` command line: [`PingArgs`] (clap) and [`main`], which prints the reports
//! and returns the exit code.

use super::nic::PingNic;
use super::{
    Client, DisconnectBy, Params, PingError, PingOp, PingReport, Server, SideOptions, WireOptions,
    MAX_DEPTH, MAX_RECVS, MAX_SIZE,
};
use crate::hw_nic::HwNic;
use rnic_hw::HwOptions;
use rnic_sim::fabric::udp::os_seed;
use rnic_sim::nic::SimNic;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use verbs_core::Mtu;

/// `rnic ping --listen ADDR` (server) or `rnic ping --connect ADDR` (client).
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["listen", "connect"])))]
pub struct PingArgs {
    /// Serve on this UDP socket (ip:port; port 0 picks one, printed as `listening on ADDR`).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Connect to the server's UDP socket (ip:port).
    #[arg(long, value_name = "ADDR")]
    pub connect: Option<SocketAddr>,
    /// Client: bind this UDP socket (ip or ip:port; rping's -I), not the route's IP (on
    /// loopback an own 127.x.y.z from the process ID) and a port the OS picks. With --seed, a
    /// fixed ip:port repeats the identifiers.
    #[arg(long, value_name = "ADDR", value_parser = parse_bind, conflicts_with = "listen")]
    pub bind: Option<SocketAddr>,
    /// Iterations (client).
    #[arg(long, default_value_t = 10)]
    pub count: u32,
    /// Bytes per SEND, WRITE and READ (client; 1..=1048576).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SIZE)))]
    pub size: u32,
    /// What each iteration does (client): all = WRITE+SEND+reply+READ, send = ping-pong,
    /// write = WRITE stream.
    #[arg(long, value_enum, default_value_t = PingOp::All)]
    pub op: PingOp,
    /// Who calls rdma_disconnect first (client decides for both).
    #[arg(long, value_enum, default_value_t = DisconnectBy::Client)]
    pub disconnect_by: DisconnectBy,
    /// WRITEs kept outstanding (client, `--op write`; perftest's `-t`). Every WRITE but the
    /// last sends one buffer written once; the last is posted alone with its own pattern, which
    /// the server checks.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DEPTH)))]
    pub depth: u32,
    /// Receives kept posted (all still posted, then flushed, at the disconnect).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_RECVS)))]
    pub recvs: u32,
    /// Print the report as one JSON object (server: one per line, after a
    /// `{"listening":ADDR}` line).
    #[arg(long)]
    pub json: bool,
    /// Server: serve one connection, then exit with its verdict.
    #[arg(long)]
    pub once: bool,
    /// Short CM and transport timers: DREQ gives up after ≈ 0.12 s, RC retries after ≈ 0.13 s,
    /// TimeWait 16 ms (Linux: ≈ 74 s, ≈ 0.5 s, 512 ms).
    #[arg(long)]
    pub fast_timers: bool,
    /// Drop each datagram (either direction) with this probability (0..=1). Each datagram's
    /// fate is a function of --seed, its direction, its bytes and how many copies of those
    /// bytes came before (a retransmission is decided anew): not of the order datagrams
    /// cross the wire in.
    #[arg(long, default_value_t = 0.0)]
    pub drop_rate: f64,
    /// Seed of the identifiers a peer must not guess (the CM's comm IDs, transaction IDs and
    /// start PSNs; the RNIC's QPNs, lkeys/rkeys and MR addresses) and of the drop decisions.
    /// Default: 8 bytes from /dev/urandom. The report prints the seed used. Given again with
    /// the same options and socket addresses (server --listen, client --bind) it repeats the
    /// identifiers, so the datagrams, and each datagram's fate; not the timing: a
    /// retransmission or ACK a timer adds in one run only is decided on its own (README,
    /// "Injecting faults").
    #[arg(long)]
    pub seed: Option<u64>,
    /// After this many iterations treat the peer as dead: drop every datagram to and from it.
    /// The verdict then expects RETRY_EXC_ERR and DISCONNECTED with status -110.
    #[arg(long, value_name = "N")]
    pub kill_peer_after: Option<u32>,
    /// Write the datagrams this side sent and received to a pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Seconds to wait for the peer before giving up: for ESTABLISHED, and in the data phase
    /// for progress.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096; on hardware at most the port's
    /// active MTU).
    #[arg(long, default_value_t = 1024, value_parser = parse_mtu)]
    pub mtu: u32,
    /// Run on this hardware RDMA device (e.g. rxe0, mlx5_0) instead of the simulated RNIC;
    /// `any` takes the first with an active port. Needs a build with `--features hw`; both
    /// ends give it. The CM's MADs still use the UDP socket of --listen / the client's.
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// With --device: the port (default: the first active one).
    #[arg(long, value_name = "N", requires = "device")]
    pub ib_port: Option<u8>,
    /// With --device: the GID index (default: the RoCEv2 GID of the socket's IPv4 address).
    #[arg(long, value_name = "N", requires = "device")]
    pub gid_index: Option<u32>,
}

/// Parses `--bind`: `ip:port`, or an IP alone (port 0: any).
///
/// # Errors
/// Neither a socket address nor an IP address.
pub fn parse_bind(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, 0))
        })
        .map_err(|_| format!("{s}: give an IP address or ip:port"))
}

/// Parses an MTU in bytes (256, 512, 1024, 2048, 4096).
///
/// # Errors
/// Any other value.
pub fn parse_mtu(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|e| format!("{e}"))?;
    match Mtu::from_bytes(v) {
        Some(_) => Ok(v),
        None => Err("MTU must be 256, 512, 1024, 2048 or 4096".into()),
    }
}

/// The [`Mtu`] of a byte count [`parse_mtu`] accepted (1024 for anything else).
pub fn mtu(bytes: u32) -> Mtu {
    Mtu::from_bytes(bytes).unwrap_or(Mtu::Mtu1024)
}

fn print_report(r: &PingReport, json: bool) {
    let mut out = std::io::stdout().lock();
    let text = if json {
        serde_json::to_string(r).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")) + "\n"
    } else {
        r.to_text()
    };
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Runs `rnic ping`; returns the exit code: 0 when every check held, 1 when one failed, 2 on
/// an error (bad option, socket, file).
pub fn main(a: &PingArgs) -> u8 {
    match run(a) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("rnic ping: {e}");
            2
        }
    }
}

fn run(a: &PingArgs) -> Result<bool, PingError> {
    // (NaN fails both comparisons.)
    if !(a.timeout > 0.0 && a.timeout <= 1e6) {
        return Err(PingError::Options(format!(
            "--timeout {}: give seconds, more than 0 and at most 1000000",
            a.timeout
        )));
    }
    let device = a.device.as_ref().map(|name| HwOptions {
        device: (name != "any").then(|| name.clone()),
        port: a.ib_port,
        gid_index: a.gid_index,
        ip: None,
    });
    if device.is_some() && a.kill_peer_after.is_some() {
        return Err(PingError::Options(
            "--kill-peer-after cannot be used with --device: it drops what crosses this \
             process's socket, which on hardware carries only the CM's MADs, not the data"
                .into(),
        ));
    }
    let side = SideOptions {
        recvs: a.recvs,
        kill_peer_after: a.kill_peer_after,
        depth: a.depth,
        timeout: Duration::from_secs_f64(a.timeout),
        pcap: a.pcap.clone(),
        device,
    };
    let wire = WireOptions {
        drop_rate: a.drop_rate,
        seed: a.seed.unwrap_or_else(os_seed),
        fast_timers: a.fast_timers,
        mtu: mtu(a.mtu),
    };
    match side.device {
        Some(_) => run_on::<HwNic>(a, &side, &wire),
        None => run_on::<SimNic>(a, &side, &wire),
    }
}

/// The client or server on the NIC `N`.
fn run_on<N: PingNic>(
    a: &PingArgs,
    side: &SideOptions,
    wire: &WireOptions,
) -> Result<bool, PingError> {
    let (side, wire) = (side.clone(), *wire);
    if let Some(server) = a.connect {
        let mut c = Client::<N>::bind_at(server, a.bind, &side, &wire)?;
        let params = Params {
            op: a.op,
            count: a.count,
            size: a.size,
            disconnect_by: a.disconnect_by,
        };
        let r = c.run(server, params)?;
        print_report(&r, a.json);
        c.shutdown()?;
        return Ok(r.passed());
    }
    let Some(listen) = a.listen else {
        return Err(PingError::Options("--listen or --connect".into()));
    };
    let mut s = Server::<N>::bind(listen, &side, &wire)?;
    let line = if a.json {
        format!("{{\"listening\":\"{}\"}}\n", s.local_addr())
    } else {
        format!("listening on {}\n", s.local_addr())
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }
    let mut all = true;
    loop {
        if let Some(r) = s.serve_one(Duration::from_secs(3600))? {
            print_report(&r, a.json);
            all &= r.passed();
            if a.once {
                break;
            }
        }
    }
    if a.drop_rate > 0.0 {
        // Losses are on purpose here: the DREP this side sent may be one of them.
        s.linger();
    }
    s.shutdown()?;
    Ok(all)
}
