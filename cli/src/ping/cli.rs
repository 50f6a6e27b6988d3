//! The `rnic ping` command line: [`PingArgs`] (clap) and [`main`], which prints the reports
//! and returns the exit code.

use super::nic::PingNic;
use super::{
    Client, DisconnectBy, Params, PingError, PingOp, PingReport, Server, SideOptions, WireOptions,
    MAX_DEPTH, MAX_QPS, MAX_RECVS, MAX_SIZE,
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

/// `rnic ping --listen ADDR` (server) or `rnic ping --connect ADDR` (client). Short flags
/// follow rping (`-C` count, `-S` size) and perftest (`-n` iterations, `-D` duration, `-t`
/// tx depth, `-r` rx depth, `-q` QPs, `-d` device, `-i` port, `-x` GID index, `-m` MTU).
/// Options of the other role are refused (exit 2).
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["listen", "connect"])))]
pub struct PingArgs {
    /// Serve on this UDP socket (HOST:PORT, a name or an address; port 0 picks one, printed
    /// as `listening on ADDR`).
    #[arg(short, long, value_name = "HOST:PORT", value_parser = parse_host_port)]
    pub listen: Option<SocketAddr>,
    /// Connect to the server's UDP socket (HOST:PORT, e.g. `localhost:7471`; one host: not a
    /// multicast or broadcast address).
    #[arg(short, long, value_name = "HOST:PORT", value_parser = parse_peer)]
    pub connect: Option<SocketAddr>,
    /// Client: bind this UDP socket (ip or ip:port; rping's -I), not the route's IP (on
    /// loopback an own 127.x.y.z from the process ID) and a port the OS picks. With --seed, a
    /// fixed ip:port repeats the identifiers.
    #[arg(short = 'I', long, value_name = "ADDR", value_parser = parse_bind, conflicts_with = "listen")]
    pub bind: Option<SocketAddr>,
    /// Iterations (client; rping's -C, perftest's -n; at least 1: for an open-ended run give
    /// --duration) [default: 10].
    #[arg(short = 'C', long, short_alias = 'n', conflicts_with_all = ["listen", "duration"], value_parser = clap::value_parser!(u32).range(1..))]
    pub count: Option<u32>,
    /// Run for this many seconds instead of a count (client; perftest's -D): the iteration in
    /// progress then finishes and the FIN tells the server how many ran.
    #[arg(short = 'D', long, value_name = "SECS", conflicts_with = "listen")]
    pub duration: Option<f64>,
    /// Bytes per SEND, WRITE and READ (client; 1..=1048576; rping's -S) [default: 4096].
    #[arg(short = 'S', long, conflicts_with = "listen", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SIZE)))]
    pub size: Option<u32>,
    /// What each iteration does (client): all = WRITE+SEND+reply+READ, send = ping-pong,
    /// write = WRITE stream [default: all].
    #[arg(long, value_enum, conflicts_with = "listen")]
    pub op: Option<PingOp>,
    /// Who calls rdma_disconnect first (client; it decides for both) [default: client].
    #[arg(long, value_enum, conflicts_with = "listen")]
    pub disconnect_by: Option<DisconnectBy>,
    /// WRITEs kept outstanding (client, `--op write` only; perftest's -t) [default: 1]. Every
    /// WRITE but the last sends one buffer written once; the last is posted alone with its
    /// own pattern, which the server checks.
    #[arg(short = 't', long, conflicts_with = "listen", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DEPTH)))]
    pub depth: Option<u32>,
    /// Connections run at once (client; perftest's -q with -R: one rdma_cm id and QP each,
    /// each its own run of --count iterations, every byte checked; the server serves them as
    /// one group) [default: 1].
    #[arg(short = 'q', long, conflicts_with = "listen", value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_QPS)))]
    pub qps: Option<u16>,
    /// Receives kept posted (all still posted, then flushed, at the disconnect; perftest's
    /// -r).
    #[arg(short = 'r', long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_RECVS)))]
    pub recvs: u32,
    /// Print the report as one JSON object (server: one per line, after a
    /// `{"listening":ADDR}` line). No progress line then.
    #[arg(long)]
    pub json: bool,
    /// Server: serve one connection, then exit with its verdict.
    #[arg(long, conflicts_with = "connect")]
    pub once: bool,
    /// A progress line on stderr every second (iterations, rate, bandwidth,
    /// retransmissions). Default: on when stderr is a terminal and without --json.
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,
    /// No progress line.
    #[arg(long)]
    pub no_progress: bool,
    /// One line per iteration on stderr, as rping's -v prints each ping.
    #[arg(long)]
    pub per_iteration: bool,
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
    /// The verdict then expects RETRY_EXC_ERR and DISCONNECTED with status -110. A client
    /// refuses a value above its --count; on a server a value past the client's count means
    /// "at the close".
    #[arg(long, value_name = "N")]
    pub kill_peer_after: Option<u32>,
    /// Write the datagrams this side sent and received to a pcap file, as it goes. Its
    /// timestamps are wall-clock (UTC), so that two sides' captures line up with each other
    /// and with logs; the report's times count from the process's start.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Bytes of each frame the --pcap file keeps (as tcpdump's -s): the default keeps every
    /// header and a whole CM MAD; 0 keeps whole frames.
    #[arg(long, value_name = "BYTES", requires = "pcap", default_value_t = super::capture::DEFAULT_SNAPLEN)]
    pub snaplen: u32,
    /// Seconds without progress before giving up: waiting for ESTABLISHED, for the peer's
    /// messages, for the next completion of the data phase, for the disconnect.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub timeout: f64,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096; on hardware at most the port's
    /// active MTU; perftest's -m).
    #[arg(short, long, default_value_t = 1024, value_parser = parse_mtu)]
    pub mtu: u32,
    /// Run on this hardware RDMA device (e.g. rxe0, mlx5_0) instead of the simulated RNIC;
    /// `any` takes the first with an active port. Needs a build with `--features hw`; both
    /// ends give it. The CM's MADs still use the UDP socket of --listen / the client's
    /// (perftest's -d).
    #[arg(short = 'd', long, value_name = "NAME")]
    pub device: Option<String>,
    /// With --device: the port (default: the first active one; perftest's -i).
    #[arg(short = 'i', long, value_name = "N", requires = "device")]
    pub ib_port: Option<u8>,
    /// With --device: the GID index (default: the RoCEv2 GID of the socket's IPv4 address;
    /// perftest's -x).
    #[arg(short = 'x', long, value_name = "N", requires = "device")]
    pub gid_index: Option<u32>,
}

/// Parses HOST:PORT: an address (`127.0.0.1:7471`, `[::1]:7471`) or a host name resolved by
/// the system (`localhost:7471`; its first IPv4 address, else its first).
///
/// # Errors
/// No port, or the name does not resolve.
pub fn parse_host_port(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s)
        .map_err(|e| format!("{e} (give HOST:PORT, e.g. localhost:7471 or 192.0.2.1:7471)"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{s}: the name has no address"))
}

/// Parses `--connect`: [`parse_host_port`], one host. An RC connection has one peer: a
/// multicast or the limited broadcast address is refused (RDMA multicast is UD's, through
/// `rdma_join_multicast`).
///
/// # Errors
/// What [`parse_host_port`] refuses; a multicast or broadcast address.
pub fn parse_peer(s: &str) -> Result<SocketAddr, String> {
    let a = parse_host_port(s)?;
    let group = match a.ip() {
        std::net::IpAddr::V4(ip) if ip.is_broadcast() => Some("the broadcast address"),
        ip if ip.is_multicast() => Some("a multicast address"),
        _ => None,
    };
    match group {
        Some(what) => Err(format!(
            "{} is {what}: an RC connection goes to one host (give the server's unicast address)",
            a.ip()
        )),
        None => Ok(a),
    }
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

/// The reports of a `--qps` client's connections, then their sum: one JSON object
/// (`{"qps":N,"reports":[…],"iterations":…,"mbit_per_s":…,"verdict":…}`) or text.
fn print_group(reports: &[PingReport], json: bool) {
    let iterations: u64 = reports.iter().map(|r| u64::from(r.iterations)).sum();
    let mbit: f64 = reports
        .iter()
        .filter_map(|r| r.throughput.as_ref())
        .map(|t| t.mbit_per_s)
        .sum();
    // The wire counters are the process's (one socket for every QP): each report has what
    // came since the previous one, so the sum is the whole.
    let (sent, received) = reports
        .iter()
        .fold((0, 0), |(s, r), p| (s + p.wire.nic_tx, r + p.wire.nic_rx));
    let verdict = if reports.iter().any(|r| r.interrupted.is_some()) {
        "INTERRUPTED"
    } else if reports.iter().all(PingReport::passed) {
        "PASS"
    } else {
        "FAIL"
    };
    let text = if json {
        let v = serde_json::json!({
            "qps": reports.len(),
            "reports": reports,
            "iterations": iterations,
            "mbit_per_s": mbit,
            "datagrams_sent": sent,
            "datagrams_received": received,
            "verdict": verdict,
        });
        v.to_string() + "\n"
    } else {
        let mut s = String::new();
        for (i, r) in reports.iter().enumerate() {
            s.push_str(&format!("--- QP {i} of {} ---\n", reports.len()));
            s.push_str(&r.to_text());
        }
        s.push_str(&format!(
            "--- {} QPs: {iterations} iterations, {mbit:.1} Mbit/s together; {sent} datagrams sent, {received} received by this process (per QP above: datagrams since the previous report, RC retransmits and timeouts the QP's own) ---\nverdict: {verdict}\n",
            reports.len()
        ));
        s
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Runs `rnic ping`; returns the exit code: 0 when every check held, 1 when one failed, 2 on
/// an error (bad option, socket, file), 128 + the signal's number (130 for SIGINT) when a
/// signal stopped it (its report printed first, marked interrupted).
pub fn main(a: &PingArgs) -> u8 {
    match run(a) {
        _ if crate::interrupt::requested() => crate::interrupt::exit_status(),
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("rnic ping: {e}");
            2
        }
    }
}

/// A positive number of seconds, at most 10⁶ (`what` names the option).
fn seconds(what: &str, v: f64) -> Result<Duration, PingError> {
    // (NaN fails both comparisons.)
    if !(v > 0.0 && v <= 1e6) {
        return Err(PingError::Options(format!(
            "{what} {v}: give seconds, more than 0 and at most 1000000"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

/// The client's parameters, checked against each other (clap checked each alone and the
/// options of the other role).
fn client_params(a: &PingArgs) -> Result<Params, PingError> {
    let op = a.op.unwrap_or(PingOp::All);
    if a.depth.is_some() && op != PingOp::Write {
        return Err(PingError::Options(format!(
            "--depth applies to --op write only (each {} iteration waits for its reply)",
            op.name()
        )));
    }
    let duration = a.duration.map(|d| seconds("--duration", d)).transpose()?;
    let count = match duration {
        // A bound the run will not reach: the FIN says how many ran.
        Some(_) => u32::MAX,
        None => a.count.unwrap_or(10),
    };
    if let (Some(k), None) = (a.kill_peer_after, duration) {
        if k > count {
            return Err(PingError::Options(format!(
                "--kill-peer-after {k} is past --count {count}: give at most {count} (the \
                 peer then dies at the close)"
            )));
        }
    }
    Ok(Params {
        op,
        count,
        size: a.size.unwrap_or(4096),
        disconnect_by: a.disconnect_by.unwrap_or(DisconnectBy::Client),
        duration,
        group: None,
    })
}

fn run(a: &PingArgs) -> Result<bool, PingError> {
    let timeout = seconds("--timeout", a.timeout)?;
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
    let params = a.connect.map(|_| client_params(a)).transpose()?;
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let side = SideOptions {
        recvs: a.recvs,
        kill_peer_after: a.kill_peer_after,
        depth: a.depth.unwrap_or(1),
        timeout,
        pcap: a.pcap.clone(),
        snaplen: match a.snaplen {
            0 => rnic_sim::roce::pcap::SNAPLEN,
            n => n,
        },
        device,
        progress: a.progress || (terminal && !a.json && !a.no_progress),
        per_iteration: a.per_iteration,
    };
    let wire = WireOptions {
        drop_rate: a.drop_rate,
        seed: a.seed.unwrap_or_else(os_seed),
        fast_timers: a.fast_timers,
        mtu: mtu(a.mtu),
    };
    match side.device {
        Some(_) => run_on::<HwNic>(a, params, &side, &wire),
        None => run_on::<SimNic>(a, params, &side, &wire),
    }
}

/// The client (with its `params`) or server on the NIC `N`.
fn run_on<N: PingNic>(
    a: &PingArgs,
    params: Option<Params>,
    side: &SideOptions,
    wire: &WireOptions,
) -> Result<bool, PingError> {
    let (side, wire) = (side.clone(), *wire);
    if let (Some(server), Some(params)) = (a.connect, params) {
        let mut c = Client::<N>::bind_at(server, a.bind, &side, &wire)?;
        let reports = c.run_qps(server, params, a.qps.unwrap_or(1))?;
        for r in &reports {
            if r.path_mtu.is_none() {
                if let Some(why) = &r.stopped {
                    eprintln!("rnic ping: no connection: {why}");
                }
            }
        }
        match reports.as_slice() {
            [r] => print_report(r, a.json),
            all => print_group(all, a.json),
        }
        c.shutdown()?;
        return Ok(reports.iter().all(PingReport::passed));
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
    let (mut all, mut served, mut connections, mut passed) = (true, 0u64, 0u64, 0u64);
    while !crate::interrupt::requested() {
        let reports = s.serve_next(Duration::from_secs(3600))?;
        for r in &reports {
            print_report(r, a.json);
            all &= r.passed();
            passed += u64::from(r.passed());
            connections += 1;
        }
        if !reports.is_empty() {
            served += 1;
            if a.once {
                break;
            }
        }
    }
    if crate::interrupt::requested() {
        s.close_waiting();
        let sig = crate::interrupt::signal_name();
        let line = if a.json {
            format!("{{\"interrupted\":\"{sig}\",\"served\":{served},\"connections\":{connections},\"passed\":{passed}}}\n")
        } else {
            format!("interrupted by {sig}: served {served} client(s), {connections} connection(s), {passed} passed\n")
        };
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    } else if a.drop_rate > 0.0 {
        // Losses are on purpose here: the DREP this side sent may be one of them.
        s.linger();
    }
    s.shutdown()?;
    Ok(all)
}
