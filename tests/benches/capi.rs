//! Unmodified perftest on `librnic.so`, each figure next to a baseline of what this machine's
//! kernel does between two processes on loopback, measured in the same run. A benchmark run on
//! demand, not a test: it checks that the programs ran and printed their tables (the harness
//! of `tests/tests/capi_programs.rs` does), never how fast they were.
//!
//! | rnic (both sides under `rnic exec`, default MTU 1024) | baseline (kernel, `std::net`) |
//! |---|---|
//! | `ib_write_bw -s 65536 -n 2000`: the client's `BW average` | TCP stream: one process writes 64 KiB chunks (2 GiB in all) as fast as it can over a loopback TCP connection, the other reads them |
//! | `ib_send_lat -s 64 -n 10000`: the client's `t_typical` (and `t_avg`) | UDP ping-pong of 64-byte datagrams, blocking sockets: the median (and mean) round trip of 10 000, after 1 000 not counted, halved |
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
//! Each baseline runs between this process and a second one: this same bench binary,
//! re-executed with `RNIC_BENCH_PEER=tcp-sink ADDR` or `RNIC_BENCH_PEER=udp-echo ADDR`, which
//! binds ADDR, prints `ready` and serves one round. The perftest pairs run through
//! `tests/tests/common_programs` (server on 127.0.N.1, client on 127.0.N.2, port 19000 + N),
//! whose reports (both commands, both outputs) are printed as each run ends.
//!
//! Addresses: `ib_write_bw` 127.0.60.1/.2 (port 19060) and the TCP sink 127.0.60.3:19160;
//! `ib_send_lat` 127.0.61.1/.2 (port 19061) and the UDP echo 127.0.61.3:19161 (client
//! 127.0.61.4).
//!
//! Run (release profile; perftest from the Debian package `perftest`):
//!
//!     cargo bench -p rnic-testbed --bench capi
//!     RNIC_BENCH_ROUNDS=3 cargo bench -p rnic-testbed --bench capi
//!
//! Without perftest (or without `librnic.so` beside `rnic`) it prints `SKIP …` and exits 0,
//! unless `RNIC_REQUIRE_RDMA_TOOLS` is set. librnic's own variables (`RNIC_MTU`, …) set for
//! the bench reach both programs; `RNIC_PROGRAM_TIMEOUT_SECS` bounds each perftest run.
//!
//! The `rnic` binary is `env!("CARGO_BIN_EXE_rnic")` (in the harness): cargo sets it when it
//! builds a benchmark, as for an integration test, and builds the binary first.

// A real-time benchmark: it times its baselines on the wall clock (`Instant::now`), which the
// workspace's clippy.toml forbids in the simulated, deterministic path only.
#![allow(clippy::disallowed_methods)]

// Cargo compiles a `harness = false` bench with `--cfg test` but without `--test`: the harness's
// `#[cfg(test)] mod parser_tests` is compiled with its `#[test]` functions stripped, and its
// `use super::*` would warn.
#[allow(unused_imports)]
#[path = "../tests/common_programs/mod.rs"]
mod common_programs;

use std::fmt::Display;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common_programs::{run_perftest, tools_available, Net, Perftest};

/// Set (with the address as the argument) in the re-executed peer: `tcp-sink` or `udp-echo`.
const PEER_ENV: &str = "RNIC_BENCH_PEER";
/// The number of rounds of each measurement.
const ROUNDS_ENV: &str = "RNIC_BENCH_ROUNDS";
const DEFAULT_ROUNDS: usize = 5;

/// `ib_write_bw`: 127.0.60.1 / 127.0.60.2, port 19060.
const BW_NET: Net = Net::new(60);
/// `ib_send_lat`: 127.0.61.1 / 127.0.61.2, port 19061.
const LAT_NET: Net = Net::new(61);
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
const TCP_CHUNKS: usize = 32_768;
/// perftest's latency message size and the UDP datagram's.
const LAT_SIZE: usize = 64;
/// `ib_send_lat -n` and the UDP baseline's counted round trips.
const LAT_ITERS: u32 = 10_000;
/// UDP round trips before the counted ones.
const UDP_WARMUP: u32 = LAT_ITERS / 10;

/// perftest's MB: `MB/sec` is bytes / 2^20 per second.
const MB: f64 = 1_048_576.0;
/// Deadline of a baseline socket operation, and of a peer's exit.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

fn main() {
    if let Ok(role) = std::env::var(PEER_ENV) {
        let addr = std::env::args().nth(1).unwrap_or_default();
        peer(&role, &addr);
        return;
    }
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
    if !tools_available("capi bench", &["ib_write_bw", "ib_send_lat"]) {
        return;
    }

    let mut write_bw = Vec::new();
    let mut tcp = Vec::new();
    let mut lat_typical = Vec::new();
    let mut lat_avg = Vec::new();
    let mut udp_median = Vec::new();
    let mut udp_mean = Vec::new();
    for r in 1..=rounds {
        println!("===== capi bench: round {r}/{rounds} =====");
        let Some(bw) = perftest_write_bw(r) else {
            return;
        };
        write_bw.push(bw);
        tcp.push(tcp_stream_round());
        let Some((typical, avg)) = perftest_send_lat(r) else {
            return;
        };
        lat_typical.push(typical);
        lat_avg.push(avg);
        let (median_rtt, mean_rtt) = udp_pingpong_round();
        udp_median.push(median_rtt / 2.0);
        udp_mean.push(mean_rtt / 2.0);
        println!(
            "round {r}: ib_write_bw {bw:.1} MB/s, TCP {:.1} MB/s; ib_send_lat t_typical {typical:.2} \
             µs, t_avg {avg:.2} µs; UDP RTT/2 median {:.2} µs, mean {:.2} µs",
            tcp[r - 1],
            udp_median[r - 1],
            udp_mean[r - 1]
        );
    }

    let rows = [
        Row {
            what: "ib_write_bw -s 65536, BW average",
            rnic: &write_bw,
            baseline_what: "TCP stream, 64 KiB writes",
            baseline: &tcp,
            unit: "MB/s",
            digits: 1,
        },
        Row {
            what: "ib_send_lat -s 64, t_typical",
            rnic: &lat_typical,
            baseline_what: "UDP ping-pong 64 B, median RTT/2",
            baseline: &udp_median,
            unit: "µs",
            digits: 2,
        },
        Row {
            what: "ib_send_lat -s 64, t_avg",
            rnic: &lat_avg,
            baseline_what: "UDP ping-pong 64 B, mean RTT/2",
            baseline: &udp_mean,
            unit: "µs",
            digits: 2,
        },
    ];
    print_table(rounds, &rows);
}

// ---------------------------------------------------------------------------------------------
// perftest through librnic.so

/// One `ib_write_bw -s 65536` pair: the client's `BW average` (MB/s). `None`: skipped.
fn perftest_write_bw(round: usize) -> Option<f64> {
    let p = Perftest {
        tool: "ib_write_bw",
        rdma_cm: false,
        iters: BW_ITERS,
        size: Some(BW_SIZE as u64),
        extra: Vec::new(),
        exec_args: Vec::new(),
    };
    let r = run_perftest(&format!("ib_write_bw round {round}"), BW_NET, &p)?;
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

// ---------------------------------------------------------------------------------------------
// Baselines: this process against a peer process (this binary, re-executed)

/// Fails the benchmark with `what` and the error.
fn or_die<T, E: Display>(r: Result<T, E>, what: impl FnOnce() -> String) -> T {
    r.unwrap_or_else(|e| panic!("{}: {e}", what()))
}

/// A zeroed buffer of `len` bytes starting on a 4 KiB boundary (kept in `storage`): the
/// copies in and out of the socket run at the same speed from round to round and as in the C
/// references (this CPU copies up to 18x slower at some alignments).
fn aligned(storage: &mut Vec<u8>, len: usize, fill: u8) -> &mut [u8] {
    *storage = vec![fill; len + 4096];
    let off = storage.as_ptr().align_offset(4096);
    &mut storage[off..off + len]
}

/// The re-executed peer process (killed by its id if still running when dropped).
struct Peer {
    role: &'static str,
    child: Child,
}

impl Peer {
    /// Starts this binary as `role` on `addr` and waits for its `ready` line (it has bound
    /// `addr`).
    fn start(role: &'static str, addr: &str) -> Peer {
        let exe = or_die(std::env::current_exe(), || "current_exe".into());
        let mut child = or_die(
            Command::new(&exe)
                .arg(addr)
                .env(PEER_ENV, role)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn(),
            || format!("cannot start {} as {PEER_ENV}={role}", exe.display()),
        );
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            // The peer prints `ready` or exits (closing the pipe): this read cannot hang.
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let mut peer = Peer { role, child };
        if line.trim() != "ready" {
            peer.kill();
            panic!("the {role} peer on {addr} did not start (it printed {line:?})");
        }
        peer
    }

    /// Waits for the peer to exit 0 (it does after its round).
    fn finish(mut self) {
        let until = Instant::now() + IO_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return,
                Ok(Some(s)) => panic!("the {} peer failed: {s}", self.role),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
                Ok(None) => panic!("the {} peer did not exit within {IO_TIMEOUT:?}", self.role),
                Err(e) => panic!("waiting for the {} peer: {e}", self.role),
            }
        }
    }

    fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The peer process: `tcp-sink` or `udp-echo` on `addr`, for one round.
fn peer(role: &str, addr: &str) {
    match role {
        "tcp-sink" => tcp_sink(addr),
        "udp-echo" => udp_echo(addr),
        _ => {
            eprintln!("{PEER_ENV}={role:?}: expected tcp-sink or udp-echo");
            std::process::exit(2);
        }
    }
}

fn say_ready() {
    let mut out = std::io::stdout().lock();
    or_die(writeln!(out, "ready").and_then(|()| out.flush()), || {
        "stdout".into()
    });
}

/// Accepts one connection, reads until EOF, answers with the number of bytes read (8 bytes,
/// little endian) and closes.
fn tcp_sink(addr: &str) {
    let listener = or_die(TcpListener::bind(addr), || format!("tcp-sink: bind {addr}"));
    say_ready();
    let (mut s, _) = or_die(listener.accept(), || "tcp-sink: accept".into());
    or_die(s.set_nodelay(true), || "tcp-sink: TCP_NODELAY".into());
    or_die(s.set_read_timeout(Some(IO_TIMEOUT)), || {
        "tcp-sink: timeout".into()
    });
    let mut storage = Vec::new();
    let buf = aligned(&mut storage, 4 << 20, 0);
    let mut total: u64 = 0;
    loop {
        match s.read(buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("tcp-sink: read: {e}"),
        }
    }
    or_die(s.write_all(&total.to_le_bytes()), || {
        "tcp-sink: write".into()
    });
}

/// One TCP stream round: 2 GiB in 64 KiB writes to the sink, from the first write until the
/// sink has read it all (its byte count arrives after our FIN): MB/s.
fn tcp_stream_round() -> f64 {
    let peer = Peer::start("tcp-sink", TCP_SINK);
    let mut s = or_die(TcpStream::connect(TCP_SINK), || {
        format!("connect {TCP_SINK}")
    });
    or_die(s.set_nodelay(true), || "TCP_NODELAY".into());
    or_die(s.set_write_timeout(Some(IO_TIMEOUT)), || "timeout".into());
    or_die(s.set_read_timeout(Some(IO_TIMEOUT)), || "timeout".into());
    let mut storage = Vec::new();
    let chunk = aligned(&mut storage, BW_SIZE, 0x5a);
    let start = Instant::now();
    for _ in 0..TCP_CHUNKS {
        or_die(s.write_all(chunk), || "write to the tcp-sink".into());
    }
    or_die(s.shutdown(Shutdown::Write), || "shutdown".into());
    let mut count = [0u8; 8];
    or_die(s.read_exact(&mut count), || {
        "the tcp-sink's byte count".into()
    });
    let secs = start.elapsed().as_secs_f64();
    let sent = (TCP_CHUNKS * BW_SIZE) as u64;
    assert_eq!(
        u64::from_le_bytes(count),
        sent,
        "the tcp-sink read a different number of bytes"
    );
    peer.finish();
    #[allow(clippy::cast_precision_loss)] // 2^31 bytes
    let bytes = sent as f64;
    bytes / secs / MB
}

/// Echoes every datagram to its sender until a 1-byte `Q`.
fn udp_echo(addr: &str) {
    let s = or_die(UdpSocket::bind(addr), || format!("udp-echo: bind {addr}"));
    or_die(s.set_read_timeout(Some(IO_TIMEOUT)), || {
        "udp-echo: timeout".into()
    });
    say_ready();
    let mut buf = [0u8; 2048];
    loop {
        let (n, from) = or_die(s.recv_from(&mut buf), || "udp-echo: recv".into());
        if n == 1 && buf[0] == b'Q' {
            return;
        }
        or_die(s.send_to(&buf[..n], from), || "udp-echo: send".into());
    }
}

/// One UDP ping-pong round: 64-byte datagrams, one in flight, blocking sockets;
/// [`UDP_WARMUP`] round trips, then [`LAT_ITERS`] timed ones: their median and mean (µs).
fn udp_pingpong_round() -> (f64, f64) {
    let peer = Peer::start("udp-echo", UDP_ECHO);
    let s = or_die(UdpSocket::bind(UDP_CLIENT), || format!("bind {UDP_CLIENT}"));
    or_die(s.connect(UDP_ECHO), || format!("connect {UDP_ECHO}"));
    or_die(s.set_read_timeout(Some(IO_TIMEOUT)), || "timeout".into());
    let msg = [0xabu8; LAT_SIZE];
    let mut buf = [0u8; 2048];
    let mut rtts = Vec::with_capacity(LAT_ITERS as usize);
    for i in 0..UDP_WARMUP + LAT_ITERS {
        let t = Instant::now();
        or_die(s.send(&msg), || "send to the udp-echo".into());
        let n = or_die(s.recv(&mut buf), || "receive from the udp-echo".into());
        let rtt = t.elapsed();
        assert_eq!(n, LAT_SIZE, "the udp-echo answered {n} bytes");
        if i >= UDP_WARMUP {
            rtts.push(rtt.as_secs_f64() * 1e6);
        }
    }
    or_die(s.send(b"Q"), || "send to the udp-echo".into());
    peer.finish();
    (median(&rtts), mean(&rtts))
}

// ---------------------------------------------------------------------------------------------
// Statistics and the table

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// `x` with 3 significant digits (a bandwidth ratio can be 0.00x).
fn ratio(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        return format!("{x}");
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 0..=2 + a small log
    let digits = (2.0 - x.log10().floor()).max(0.0) as usize;
    format!("{x:.digits$}")
}

fn mean(v: &[f64]) -> f64 {
    #[allow(clippy::cast_precision_loss)] // at most a few thousand values
    let n = v.len() as f64;
    v.iter().sum::<f64>() / n
}

/// One line of the table: an rnic figure and its baseline, per round.
struct Row<'a> {
    what: &'static str,
    rnic: &'a [f64],
    baseline_what: &'static str,
    baseline: &'a [f64],
    unit: &'static str,
    digits: usize,
}

fn print_table(rounds: usize, rows: &[Row<'_>]) {
    let mut lines = vec![[
        "measurement (librnic.so)".to_string(),
        "rnic".to_string(),
        "baseline (kernel, loopback)".to_string(),
        "baseline".to_string(),
        "rnic/baseline".to_string(),
    ]];
    for r in rows {
        let (a, b) = (median(r.rnic), median(r.baseline));
        lines.push([
            r.what.to_string(),
            format!("{a:.*} {}", r.digits, r.unit),
            r.baseline_what.to_string(),
            format!("{b:.*} {}", r.digits, r.unit),
            ratio(a / b),
        ]);
    }
    let mut width = [0usize; 5];
    for l in &lines {
        for (w, c) in width.iter_mut().zip(l) {
            *w = (*w).max(c.chars().count());
        }
    }
    println!();
    println!("capi bench: median of {rounds} round(s) each ({ROUNDS_ENV}); MB = 2^20 bytes;");
    println!("latencies one way = round trip / 2, as perftest reports them");
    for (i, l) in lines.iter().enumerate() {
        let cell = |c: usize| {
            let pad = width[c] - l[c].chars().count();
            if c == 0 || c == 2 {
                format!("{}{}", l[c], " ".repeat(pad))
            } else {
                format!("{}{}", " ".repeat(pad), l[c])
            }
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            cell(0),
            cell(1),
            cell(2),
            cell(3),
            cell(4)
        );
        if i == 0 {
            let dashes: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
            println!("|-{}-|", dashes.join("-|-"));
        }
    }
    println!();
    println!("rounds:");
    let list = |v: &[f64], digits: usize| {
        v.iter()
            .map(|x| format!("{x:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for r in rows {
        println!("  {} ({}): {}", r.what, r.unit, list(r.rnic, r.digits));
        println!(
            "  {} ({}): {}",
            r.baseline_what,
            r.unit,
            list(r.baseline, r.digits)
        );
    }
}
