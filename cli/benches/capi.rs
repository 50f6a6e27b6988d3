//! Unmodified perftest on `librnic.so`, each figure next to a baseline of what this machine's
//! kernel does between two processes on loopback, measured in the same run. A benchmark run on
//! demand, not a test: it checks that the programs ran and printed their tables (the harness
//! of `cli/tests/capi_programs.rs` does), never how fast they were.
//!
//! | rnic (both sides under `rnic exec`, default MTU 1024) | baseline (kernel, `std::net`) |
//! |---|---|
//! | `ib_write_bw -s 65536 -n 2000`: the client's `BW average` | TCP stream: one process writes 64 KiB chunks (2 GiB in all) as fast as it can over a loopback TCP connection, the other reads them |
//! | `ib_send_lat -s 64 -n 10000`: the client's `t_typical` (and `t_avg`) | UDP ping-pong of 64-byte datagrams, blocking sockets: the median (and mean) round trip of 10 000, after 1 000 not counted, halved |
//! | `ib_send_lat -s 64 -n 10000`: 2 × `t_typical`, a round trip | `rnic ping --op send -S 64 -C 10000` (rnic's own transport without the C ABI, both sides `rnic ping`): the client's median round trip |
//! | `ibv_rc_pingpong -s 64 -n 10000` (spins on `ibv_poll_cq`): the client's `usec/iter`, a mean round trip | the same `rnic ping`'s mean round trip |
//! | `ib_write_bw -s 65536 -n 2000` under `rnic exec --mtu 4096`: the client's `BW average` | `rnic ping --op write -S 65536 --mtu 4096 --depth 16 -C 2000`: its throughput |
//!
//! The last three rows hold the C ABI to the transport's speed: a program that busy-polls
//! through librnic within 1.2× of `rnic ping`'s round trip, and perftest's WRITE stream at
//! least 0.8× of `rnic ping`'s on the same transport and MTU.
//!
//! Units are perftest's: MB/s is 2^20 bytes per second (perftest's `MB/sec`), and a latency
//! is one way, half of a round trip — perftest's `t_typical` is the median of its round trips
//! divided by 2, `t_avg` their mean (less the 2 largest) divided by 2 — so the UDP baseline is
//! reported as its median (mean) round trip / 2.
//!
//! Every measurement runs `RNIC_BENCH_ROUNDS` rounds (default 5), the four measurements
//! interleaved round by round (so that a busy moment of a shared machine hurts both sides of
//! a comparison alike); the table gives the median of the rounds of each and the ratio
//! rnic / baseline, followed by every round's figure.
//!
//! Each baseline runs between this process and a second one: `rnic bench-peer tcp-sink ADDR`
//! or `rnic bench-peer udp-echo ADDR`, which binds ADDR, prints `ready ADDR` and serves one
//! round. The baselines, their peers and the table are `rnic bench`'s
//! (`rnic_cli::bench`). The perftest pairs run through
//! `cli/tests/common_programs` (server on 127.0.N.1, client on 127.0.N.2, port 19000 + N),
//! whose reports (both commands, both outputs) are printed as each run ends.
//!
//! Addresses: `ib_write_bw` 127.0.60.1/.2 (port 19060) and the TCP sink 127.0.60.3:19160;
//! `ib_send_lat` 127.0.61.1/.2 (port 19061) and the UDP echo 127.0.61.3:19161 (client
//! 127.0.61.4); `rnic ping` 127.0.66.1:19066 / 127.0.66.2; `ibv_rc_pingpong` 127.0.67.1/.2
//! (port 19067).
//!
//! Run (release profile; perftest from the Debian package `perftest`):
//!
//!     cargo bench -p rnic-cli --bench capi
//!     RNIC_BENCH_ROUNDS=3 cargo bench -p rnic-cli --bench capi
//!
//! Without perftest (or without `librnic.so` beside `rnic`) it prints `SKIP …` and exits 0,
//! unless `RNIC_REQUIRE_RDMA_TOOLS` is set. librnic's own variables (`RNIC_MTU`, …) set for
//! the bench reach both programs; `RNIC_PROGRAM_TIMEOUT_SECS` bounds each perftest run.
//!
//! The `rnic` binary is `env!("CARGO_BIN_EXE_rnic")` (in the harness): cargo sets it when it
//! builds a benchmark, as for an integration test, and builds the binary first.

// Cargo compiles a `harness = false` bench with `--cfg test` but without `--test`: the harness's
// `#[cfg(test)] mod parser_tests` is compiled with its `#[test]` functions stripped, and its
// `use super::*` would warn.
#[allow(unused_imports)]
#[path = "../tests/common_programs/mod.rs"]
mod common_programs;

use std::fmt::Display;
use std::net::SocketAddr;
use std::path::Path;

use common_programs::{
    run_pair, run_perftest, tools_available, Net, PairSpec, Perftest, Program, Ready, DEVICE, RNIC,
};
use rnic_cli::bench::baseline::{tcp_stream, udp_pingpong};
use rnic_cli::bench::peer::{Peer, PeerRole};
use rnic_cli::bench::table::{render, render_rounds, Goal, Row};

/// The number of rounds of each measurement.
const ROUNDS_ENV: &str = "RNIC_BENCH_ROUNDS";
const DEFAULT_ROUNDS: usize = 5;

/// `ib_write_bw`: 127.0.60.1 / 127.0.60.2, port 19060.
const BW_NET: Net = Net::new(60);
/// `ib_send_lat`: 127.0.61.1 / 127.0.61.2, port 19061.
const LAT_NET: Net = Net::new(61);
/// `rnic ping`: server 127.0.66.1:19066, client 127.0.66.2.
const PING_NET: Net = Net::new(66);
/// `ibv_rc_pingpong`: 127.0.67.1 / 127.0.67.2, port 19067.
const PINGPONG_NET: Net = Net::new(67);
/// The TCP baseline's sink.
const TCP_SINK: &str = "127.0.60.3:19160";
/// The UDP baseline's echo peer, and the measuring side's address.
const UDP_ECHO: &str = "127.0.61.3:19161";
const UDP_CLIENT: &str = "127.0.61.4:0";

/// perftest's bandwidth message size and the TCP baseline's write size.
const BW_SIZE: usize = 65536;
/// `ib_write_bw -n` (perftest's default is 5000: at the tens of MB/s librnic reaches with
/// perftest's 128 WRITEs in flight, a run would take half of the harness's 60 s deadline).
const BW_ITERS: u32 = 2000;
/// 64 KiB chunks the TCP baseline writes per round: 2 GiB.
const TCP_CHUNKS: u64 = 32_768;
/// The MTU of the WRITE-stream row against `rnic ping --op write` (both sides).
const BW_MTU: u32 = 4096;
/// perftest's latency message size and the UDP datagram's.
const LAT_SIZE: usize = 64;
/// `ib_send_lat -n` and the UDP baseline's counted round trips.
const LAT_ITERS: u32 = 10_000;
/// UDP round trips before the counted ones.
const UDP_WARMUP: u32 = LAT_ITERS / 10;

/// perftest's MB: `MB/sec` is bytes / 2^20 per second.
const MB: f64 = 1_048_576.0;

fn main() {
    let rounds = match std::env::var(ROUNDS_ENV) {
        Err(_) => DEFAULT_ROUNDS,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!("{ROUNDS_ENV}={v:?}: expected a positive number of rounds");
                std::process::exit(2);
            }
        },
    };
    if !tools_available(
        "capi bench",
        &["ib_write_bw", "ib_send_lat", "ibv_rc_pingpong"],
    ) {
        return;
    }

    let mut rows = [
        Row::new(
            "ib_write_bw",
            "ib_write_bw -s 65536, BW average",
            Some("TCP stream, 64 KiB writes"),
            "MB/s",
            1,
            Goal::None,
        ),
        Row::new(
            "ib_send_lat_typical",
            "ib_send_lat -s 64, t_typical",
            Some("UDP ping-pong 64 B, median RTT/2"),
            "µs",
            2,
            Goal::None,
        ),
        Row::new(
            "ib_send_lat_avg",
            "ib_send_lat -s 64, t_avg",
            Some("UDP ping-pong 64 B, mean RTT/2"),
            "µs",
            2,
            Goal::None,
        ),
        Row::new(
            "ib_send_lat_rtt",
            "ib_send_lat -s 64, 2 × t_typical (RTT)",
            Some("rnic ping --op send -S 64, median RTT"),
            "µs",
            2,
            Goal::RatioAtMost(1.2),
        ),
        Row::new(
            "ibv_rc_pingpong",
            "ibv_rc_pingpong -s 64, usec/iter (mean RTT)",
            Some("rnic ping --op send -S 64, mean RTT"),
            "µs",
            2,
            Goal::RatioAtMost(1.2),
        ),
        Row::new(
            "ib_write_bw_mtu4096",
            "ib_write_bw -s 65536 (MTU 4096), BW average",
            Some("rnic ping --op write -S 65536 --mtu 4096 --depth 16"),
            "MB/s",
            1,
            Goal::RatioAtLeast(0.8),
        ),
    ];
    for r in 1..=rounds {
        println!("===== capi bench: round {r}/{rounds} =====");
        let Some(bw) = perftest_write_bw(r, None) else {
            return;
        };
        let tcp = tcp_stream_round();
        let Some(bw4096) = perftest_write_bw(r, Some(BW_MTU)) else {
            return;
        };
        let ping_bw = rnic_ping_write_round(r);
        let Some((typical, avg)) = perftest_send_lat(r) else {
            return;
        };
        let (median_rtt, mean_rtt) = udp_pingpong_round();
        let (ping_median, ping_mean) = rnic_ping_round(r);
        let Some(rc) = rc_pingpong_round(r) else {
            return;
        };
        println!(
            "round {r}: ib_write_bw {bw:.1} MB/s, TCP {tcp:.1} MB/s; MTU 4096: ib_write_bw \
             {bw4096:.1} MB/s, rnic ping {ping_bw:.1} MB/s; ib_send_lat t_typical {typical:.2} \
             µs, t_avg {avg:.2} µs; UDP RTT/2 median {:.2} µs, mean {:.2} µs; rnic ping RTT median \
             {ping_median:.2} µs, mean {ping_mean:.2} µs; ibv_rc_pingpong {rc:.2} µs/iter",
            median_rtt / 2.0,
            mean_rtt / 2.0
        );
        let [w, t, a, rtt, pp, w4] = &mut rows;
        w.rnic.push(bw);
        w.baseline.push(tcp);
        w4.rnic.push(bw4096);
        w4.baseline.push(ping_bw);
        t.rnic.push(typical);
        t.baseline.push(median_rtt / 2.0);
        a.rnic.push(avg);
        a.baseline.push(mean_rtt / 2.0);
        rtt.rnic.push(2.0 * typical);
        rtt.baseline.push(ping_median);
        pp.rnic.push(rc);
        pp.baseline.push(ping_mean);
    }

    let summaries: Vec<_> = rows.iter().map(Row::summary).collect();
    println!();
    println!("capi bench: median of {rounds} round(s) each ({ROUNDS_ENV}); MB = 2^20 bytes;");
    println!(
        "latencies one way = round trip / 2, as perftest reports them; ratio = rnic / baseline"
    );
    print!("{}", render(&summaries));
    println!();
    print!("{}", render_rounds(&summaries));
}

// ---------------------------------------------------------------------------------------------
// perftest through librnic.so

/// One `ib_write_bw -s 65536` pair, both under `rnic exec` with `--mtu mtu` when given (else
/// librnic's default, 1024): the client's `BW average` (MB/s). `None`: skipped.
fn perftest_write_bw(round: usize, mtu: Option<u32>) -> Option<f64> {
    let p = Perftest {
        tool: "ib_write_bw",
        rdma_cm: false,
        iters: BW_ITERS,
        size: Some(BW_SIZE as u64),
        extra: Vec::new(),
        exec_args: mtu.map_or_else(Vec::new, |m| vec!["--mtu".into(), m.to_string()]),
    };
    let r = run_perftest(&format!("ib_write_bw {mtu:?} round {round}"), BW_NET, &p)?;
    Some(
        r.client_value("BW average")
            .unwrap_or_else(|| r.outcome.fail("no `BW average` in the client's table")),
    )
}

/// One `ib_send_lat -s 64` pair: the client's `t_typical` and `t_avg` (µs). `None`: skipped.
fn perftest_send_lat(round: usize) -> Option<(f64, f64)> {
    let p = Perftest {
        tool: "ib_send_lat",
        rdma_cm: false,
        iters: LAT_ITERS,
        size: Some(LAT_SIZE as u64),
        extra: Vec::new(),
        exec_args: Vec::new(),
    };
    let r = run_perftest(&format!("ib_send_lat round {round}"), LAT_NET, &p)?;
    let v = |col: &str| {
        r.client_value(col)
            .unwrap_or_else(|| r.outcome.fail(&format!("no `{col}` in the client's table")))
    };
    Some((v("t_typical"), v("t_avg")))
}

/// One `ibv_rc_pingpong -s 64` pair (spinning on `ibv_poll_cq`): the client's `usec/iter`.
/// `None`: skipped.
fn rc_pingpong_round(round: usize) -> Option<f64> {
    let port = PINGPONG_NET.port_arg();
    let iters = LAT_ITERS.to_string();
    let server_argv = [
        "ibv_rc_pingpong",
        "-d",
        DEVICE,
        "-g",
        "0",
        "-s",
        "64",
        "-p",
        &port,
        "-n",
        &iters,
    ];
    let server_ip = PINGPONG_NET.server_ip();
    let mut client_argv = server_argv.to_vec();
    client_argv.push(&server_ip);
    let spec = PairSpec {
        name: format!("ibv_rc_pingpong round {round}"),
        server: Program::new(&server_ip, &server_argv),
        client: Program::new(&PINGPONG_NET.client_ip(), &client_argv),
        ready: Ready::TcpListen(PINGPONG_NET.port),
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    out.show();
    let per_iter = out.client.stdout.lines().find_map(|l| {
        l.strip_suffix(" usec/iter")?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    });
    Some(per_iter.unwrap_or_else(|| out.fail("no `… usec/iter` in the client's output")))
}

// ---------------------------------------------------------------------------------------------
// rnic's own transport: `rnic ping` on both sides

/// One `rnic ping --op send -S 64 -C 10000` pair: the client's median and mean round trip
/// (µs), from its `--json` report.
fn rnic_ping_round(round: usize) -> (f64, f64) {
    let count = LAT_ITERS.to_string();
    let (json, report) = rnic_ping_pair(round, &[], &["--op", "send", "-S", "64", "-C", &count]);
    let field = |name: &str| {
        json["latency"][name]
            .as_f64()
            .unwrap_or_else(|| panic!("no latency.{name} in rnic ping's report: {report}"))
    };
    (field("median_us"), field("mean_us"))
}

/// One `rnic ping --op write -S 65536 --mtu 4096 --depth 16` pair ([`BW_ITERS`] WRITEs): the
/// client's throughput (MB/s), from its `--json` report.
fn rnic_ping_write_round(round: usize) -> f64 {
    let (count, mtu) = (BW_ITERS.to_string(), BW_MTU.to_string());
    let size = BW_SIZE.to_string();
    let (json, report) = rnic_ping_pair(
        round,
        &["--mtu", &mtu],
        &[
            "--op", "write", "-S", &size, "--mtu", &mtu, "--depth", "16", "-C", &count,
        ],
    );
    let field = |name: &str| {
        json["throughput"][name]
            .as_f64()
            .filter(|v| *v > 0.0)
            .unwrap_or_else(|| panic!("no throughput.{name} in rnic ping's report: {report}"))
    };
    field("bytes") / field("seconds") / MB
}

/// Runs `rnic ping -l … --once --json` (with `server_args`) and `rnic ping -c … --json` (with
/// `client_args`) on [`PING_NET`]: the client's report, parsed and as printed.
fn rnic_ping_pair(
    round: usize,
    server_args: &[&str],
    client_args: &[&str],
) -> (serde_json::Value, String) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let listen = format!("{}:{}", PING_NET.server_ip(), PING_NET.port);
    let mut server = or_die(
        Command::new(RNIC)
            .args(["ping", "-l", &listen, "--once", "--json"])
            .args(server_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn(),
        "rnic ping -l",
    );
    // The server prints `{"listening":ADDR}` once it listens.
    // Kept open until the server exits: its report goes there at the end.
    let mut server_out = server.stdout.take().map(|o| BufReader::new(o).lines());
    let listening = server_out
        .as_mut()
        .and_then(|l| l.next()?.ok())
        .unwrap_or_default();
    assert!(
        listening.contains("listening"),
        "rnic ping -l {listen} (round {round}) printed {listening:?}, not its listening line"
    );
    let out = or_die(
        Command::new(RNIC)
            .args(["ping", "-c", &listen, "-I", &PING_NET.client_ip()])
            .args(client_args)
            .arg("--json")
            .stderr(Stdio::inherit())
            .output(),
        "rnic ping -c",
    );
    if let Some(rest) = server_out {
        rest.for_each(drop);
    }
    let _ = server.wait();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rnic ping -c {client_args:?} (round {round}) failed: {report}"
    );
    let json = or_die(serde_json::from_str(&report), "rnic ping's report");
    (json, report)
}

// ---------------------------------------------------------------------------------------------
// Baselines: this process against a peer process (`rnic bench-peer`)

/// Fails the benchmark with `what` and the error.
fn or_die<T, E: Display>(r: Result<T, E>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn addr(a: &str) -> SocketAddr {
    or_die(a.parse(), a)
}

/// One TCP stream round: 2 GiB in 64 KiB writes to the sink, from the first write until the
/// sink has read it all (its byte count arrives after our FIN): MB/s.
fn tcp_stream_round() -> f64 {
    let role = PeerRole::TcpSink {
        addr: addr(TCP_SINK),
    };
    let peer = or_die(Peer::start(Path::new(RNIC), &role), "the tcp-sink peer");
    let bps = or_die(tcp_stream(peer.addr(), BW_SIZE, TCP_CHUNKS), "TCP stream");
    or_die(peer.finish(), "the tcp-sink peer");
    bps / MB
}

/// One UDP ping-pong round: 64-byte datagrams, one in flight, blocking sockets;
/// [`UDP_WARMUP`] round trips, then [`LAT_ITERS`] timed ones: their median and mean (µs).
fn udp_pingpong_round() -> (f64, f64) {
    let role = PeerRole::UdpEcho {
        addr: addr(UDP_ECHO),
    };
    let peer = or_die(Peer::start(Path::new(RNIC), &role), "the udp-echo peer");
    let rtts = or_die(
        udp_pingpong(
            peer.addr(),
            addr(UDP_CLIENT),
            LAT_SIZE,
            u64::from(UDP_WARMUP),
            u64::from(LAT_ITERS),
        ),
        "UDP ping-pong",
    );
    or_die(peer.finish(), "the udp-echo peer");
    (rtts.median_us, rtts.mean_us)
}
