//! The measures of `rnic bench` ([`Measure`]): the rows each adds to the table
//! ([`Measure::rows`]) and one round of each ([`Measure::round`]): the rnic figure, then its
//! baseline, measured back to back so that a busy moment of a shared machine hurts both.
//!
//! Addresses (loopback, apart from the tests' 127.0.0.x and the capi bench's 127.0.6x.y):
//!
//! | measure | rnic | baseline |
//! |---|---|---|
//! | `write-stream` | ping server 127.0.70.1 | TCP sink 127.0.70.3 |
//! | `write-1m` | ping server 127.0.71.1 | — |
//! | `send-rtt` | ping server 127.0.72.1 | UDP echo 127.0.72.3, pinger 127.0.72.4 |
//! | `cm` | CM client 127.0.73.2, server 127.0.73.3 | TCP server 127.0.73.5 |
//!
//! Ports are the OS's choice (port 0); each peer prints the one it got. A ping client picks
//! its own loopback address (127.a.b.c from its process ID, a ≥ 1: `rnic ping`'s rule).

use super::baseline::{self, memcpy_bytes_per_s};
use super::cm::{self, CmNode};
use super::inproc::WritePair;
use super::peer::{Peer, PeerRole};
use super::rnic_cmd::{self, number, PingSides};
use super::table::{Check, Goal, Row};
use super::BenchError;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// 10^6 bytes.
const MB: f64 = 1e6;
/// 10^9 bytes.
const GB: f64 = 1e9;
/// The WRITE stream's message size, and the TCP stream's write size.
const WRITE_SIZE: usize = 65536;
/// The large WRITEs' size.
const BIG_SIZE: usize = 1 << 20;
/// The path MTU of both WRITE measures.
const WRITE_MTU: &str = "4096";
/// The ping-pong's message size (SEND and UDP datagram).
const RTT_SIZE: usize = 64;
/// The in-process WRITE's size.
const INPROC_SIZE: usize = 64 * 1024;
/// The memory-bandwidth memcpy's size.
const MEMCPY_BIG: usize = 64 << 20;

const fn sock(a: u8, b: u8) -> SocketAddr {
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, a, b)), 0)
}

/// One of the measures of `rnic bench` (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Measure {
    /// `rnic ping --op write --size 65536 --mtu 4096` MB/s against a TCP stream of 64 KiB
    /// writes.
    WriteStream,
    /// 1 MiB WRITEs with Linux's timers: all pass, RC retransmissions and timeouts.
    #[value(name = "write-1m")]
    Write1m,
    /// `rnic ping --op send --size 64` median RTT against a UDP ping-pong of 64 B.
    SendRtt,
    /// CM connect+disconnect per second against TCP connect+close, two processes.
    Cm,
    /// The in-process RDMA WRITE of 64 KiB (ICRC checked) against memcpy.
    Inproc,
    /// `rnic explore --jobs 1` scenarios per second.
    Explore,
}

impl Measure {
    /// Every measure, in table order.
    pub const ALL: [Measure; 6] = [
        Measure::WriteStream,
        Measure::Write1m,
        Measure::SendRtt,
        Measure::Cm,
        Measure::Inproc,
        Measure::Explore,
    ];

    /// Its `--only` name.
    pub fn name(self) -> &'static str {
        match self {
            Measure::WriteStream => "write-stream",
            Measure::Write1m => "write-1m",
            Measure::SendRtt => "send-rtt",
            Measure::Cm => "cm",
            Measure::Inproc => "inproc",
            Measure::Explore => "explore",
        }
    }
}

/// How much each round of each measure does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// 64 KiB WRITEs of the WRITE stream (the TCP stream sends as many bytes).
    pub write_count: u32,
    /// 1 MiB WRITEs.
    pub big_count: u32,
    /// Timed round trips of the SEND ping-pong and of the UDP one (which adds 1/10 as
    /// warm-up).
    pub rtt_count: u32,
    /// Timed CM and TCP cycles (each adds 1/10 as warm-up).
    pub cm_cycles: u32,
    /// Timed in-process WRITEs (1/10 more as warm-up).
    pub inproc_writes: u32,
    /// `rnic explore` seeds.
    pub explore_seeds: u64,
}

/// What every round needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The `rnic` binary that runs the pings, explore and the peers.
    pub rnic: PathBuf,
    /// `--depth` for the WRITE pings.
    pub depth: u32,
    /// How much each round does.
    pub sizes: Sizes,
}

impl Config {
    /// The WRITE pings' client arguments: op, size, MTU, count, depth.
    fn write_args(&self, size: usize, count: u32) -> Vec<String> {
        let mut v: Vec<String> = ["--op", "write", "--mtu", WRITE_MTU, "--size"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend([size.to_string(), "--count".into(), count.to_string()]);
        v.extend(["--depth".into(), self.depth.to_string()]);
        v
    }

    fn depth_text(&self) -> String {
        format!(" --depth {}", self.depth)
    }
}

/// 1/10 of `n`, at least 1: the warm-up before `n` timed repetitions.
fn warmup(n: u32) -> u64 {
    u64::from(n / 10).max(1)
}

/// The client's data-phase throughput, bytes per second.
fn throughput(p: &PingSides, what: &str) -> Result<f64, BenchError> {
    let bytes = number(&p.client, &["throughput", "bytes"], what)?;
    let secs = number(&p.client, &["throughput", "seconds"], what)?;
    Ok(bytes / secs)
}

/// `p` must have passed on both sides.
fn passed(p: &PingSides, what: &str) -> Result<(), BenchError> {
    if p.passed() {
        Ok(())
    } else {
        Err(BenchError::Measure(format!(
            "{what}: a side failed its checks\nclient: {}\nserver: {}",
            p.client, p.server
        )))
    }
}

impl Measure {
    /// The rows this measure adds to the table (figures come with [`round`](Self::round)).
    pub fn rows(self, cfg: &Config) -> Vec<Row> {
        let s = &cfg.sizes;
        match self {
            Measure::WriteStream => vec![Row::new(
                self.name(),
                format!(
                    "rnic ping --op write --size 65536 --mtu 4096{}",
                    cfg.depth_text()
                ),
                Some("TCP stream, 64 KiB writes"),
                "MB/s",
                1,
                Goal::RatioAtLeast(0.5),
            )],
            Measure::Write1m => vec![Row::new(
                self.name(),
                format!(
                    "rnic ping --op write --size 1048576 --count {} --mtu 4096{}, Linux timers",
                    s.big_count,
                    cfg.depth_text()
                ),
                None,
                "MB/s",
                1,
                Goal::Clean,
            )],
            Measure::SendRtt => vec![Row::new(
                self.name(),
                "rnic ping --op send --size 64, median RTT",
                Some("UDP ping-pong 64 B, median RTT"),
                "µs",
                1,
                Goal::RatioAtMost(1.5),
            )],
            Measure::Cm => vec![Row::new(
                self.name(),
                "CM connect+disconnect, 2 processes",
                Some("TCP connect+close, 2 processes"),
                "/s",
                0,
                Goal::RatioAtLeast(0.8),
            )],
            Measure::Inproc => vec![
                Row::new(
                    self.name(),
                    "in-process RDMA WRITE 64 KiB, ICRC checked",
                    Some("memcpy 64 MiB (memory bandwidth)"),
                    "GB/s",
                    2,
                    Goal::RatioAtLeast(0.5),
                ),
                Row::new(
                    "inproc-cache",
                    "in-process RDMA WRITE 64 KiB, ICRC checked",
                    Some("memcpy 64 KiB (in cache)"),
                    "GB/s",
                    2,
                    Goal::None,
                ),
            ],
            Measure::Explore => vec![Row::new(
                self.name(),
                "rnic explore --jobs 1",
                None,
                "scenarios/s",
                0,
                Goal::AtLeast(20_000.0),
            )],
        }
    }

    /// One round: pushes this round's figures to `rows` (as made by [`rows`](Self::rows)).
    /// Returns them in words, for the progress line.
    ///
    /// # Errors
    /// The measure's or its baseline's failure: a process that failed or did not finish, a
    /// socket error, a ping that failed its checks (except for `write-1m`, whose failures
    /// are figures).
    pub fn round(self, cfg: &Config, rows: &mut [Row]) -> Result<String, BenchError> {
        let s = &cfg.sizes;
        let rnic = cfg.rnic.as_path();
        match (self, rows) {
            (Measure::WriteStream, [row]) => {
                let what = "WRITE stream";
                let mtu = [String::from("--mtu"), WRITE_MTU.into()];
                let args = cfg.write_args(WRITE_SIZE, s.write_count);
                let p = rnic_cmd::ping_pair(rnic, sock(70, 1), &mtu, &args)?;
                passed(&p, what)?;
                let r = throughput(&p, what)? / MB;
                let peer = Peer::start(rnic, &PeerRole::TcpSink { addr: sock(70, 3) })?;
                let tcp = baseline::tcp_stream(peer.addr(), WRITE_SIZE, u64::from(s.write_count))?;
                peer.finish()?;
                row.rnic.push(r);
                row.baseline.push(tcp / MB);
                Ok(format!("rnic {r:.1} MB/s, TCP {:.1} MB/s", tcp / MB))
            }
            (Measure::Write1m, [row]) => {
                let mtu = [String::from("--mtu"), WRITE_MTU.into()];
                let args = cfg.write_args(BIG_SIZE, s.big_count);
                let p = rnic_cmd::ping_pair(rnic, sock(71, 1), &mtu, &args)?;
                let check = Check {
                    passed: p.passed(),
                    rc_retransmits: p.wire_sum("rc_retransmits"),
                    rc_timeouts: p.wire_sum("rc_timeouts"),
                };
                // A failed run may have no throughput: its figure is then 0.
                let r = throughput(&p, "1 MiB WRITEs").unwrap_or(0.0) / MB;
                row.rnic.push(r);
                row.checks.push(check);
                let why = if check.passed {
                    String::new()
                } else {
                    let stopped =
                        |r: &serde_json::Value| r["stopped"].as_str().unwrap_or("-").to_string();
                    format!(
                        " (client stopped: {}; server stopped: {})",
                        stopped(&p.client),
                        stopped(&p.server)
                    )
                };
                Ok(format!(
                    "{} {r:.1} MB/s, {} RC retransmissions, {} RC timeouts{why}",
                    if check.passed { "PASS" } else { "FAIL" },
                    check.rc_retransmits,
                    check.rc_timeouts
                ))
            }
            (Measure::SendRtt, [row]) => {
                let args: Vec<String> = ["--op", "send", "--size", "64", "--count"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([s.rtt_count.to_string()])
                    .collect();
                let p = rnic_cmd::ping_pair(rnic, sock(72, 1), &[], &args)?;
                passed(&p, "SEND ping-pong")?;
                let r = number(&p.client, &["latency", "median_us"], "SEND ping-pong")?;
                let peer = Peer::start(rnic, &PeerRole::UdpEcho { addr: sock(72, 3) })?;
                let u = baseline::udp_pingpong(
                    peer.addr(),
                    sock(72, 4),
                    RTT_SIZE,
                    warmup(s.rtt_count),
                    u64::from(s.rtt_count),
                )?;
                peer.finish()?;
                row.rnic.push(r);
                row.baseline.push(u.median_us);
                Ok(format!("rnic {r:.1} µs, UDP {:.1} µs", u.median_us))
            }
            (Measure::Cm, [row]) => {
                let (client_ip, server_ip) =
                    (Ipv4Addr::new(127, 0, 73, 2), Ipv4Addr::new(127, 0, 73, 3));
                let total = warmup(s.cm_cycles) + u64::from(s.cm_cycles);
                let node = CmNode::new(client_ip)?;
                let role = PeerRole::CmServer {
                    ip: server_ip,
                    client: node.local_addr(),
                    cycles: total,
                };
                let peer = Peer::start(rnic, &role)?;
                node.set_peer(server_ip, peer.addr());
                let rate = cm::connect_disconnect(
                    &node,
                    server_ip,
                    warmup(s.cm_cycles),
                    u64::from(s.cm_cycles),
                )?;
                peer.finish()?;
                node.shutdown()?;
                let role = PeerRole::TcpAccept {
                    addr: sock(73, 5),
                    count: total,
                };
                let peer = Peer::start(rnic, &role)?;
                let tcp = baseline::tcp_connect_close(
                    peer.addr(),
                    warmup(s.cm_cycles),
                    u64::from(s.cm_cycles),
                )?;
                peer.finish()?;
                row.rnic.push(rate);
                row.baseline.push(tcp);
                Ok(format!("CM {rate:.0}/s, TCP {tcp:.0}/s"))
            }
            (Measure::Inproc, [big, cache]) => {
                let mut pair = WritePair::new(INPROC_SIZE)?;
                let w = pair.bytes_per_s(warmup(s.inproc_writes), u64::from(s.inproc_writes))? / GB;
                let m_big = memcpy_bytes_per_s(MEMCPY_BIG, 2, 5) / GB;
                let m_cache = memcpy_bytes_per_s(INPROC_SIZE, 1000, 20) / GB;
                big.rnic.push(w);
                big.baseline.push(m_big);
                cache.rnic.push(w);
                cache.baseline.push(m_cache);
                Ok(format!(
                    "WRITE {w:.2} GB/s, memcpy 64 MiB {m_big:.2} GB/s, 64 KiB {m_cache:.2} GB/s"
                ))
            }
            (Measure::Explore, [row]) => {
                let r = rnic_cmd::explore_rate(rnic, s.explore_seeds)?;
                row.rnic.push(r);
                Ok(format!("{r:.0} scenarios/s"))
            }
            (m, rows) => Err(BenchError::Measure(format!(
                "{}: {} rows given, not the measure's own",
                m.name(),
                rows.len()
            ))),
        }
    }
}
