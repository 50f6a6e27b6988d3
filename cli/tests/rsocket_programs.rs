//! rsockets (`<rdma/rsocket.h>`) on librnic.so, with unmodified programs: rdmacm-utils'
//! `rstream`, `rcopy` and `riostream`, and ordinary TCP programs (`iperf3`, `sockperf`) turned
//! into rsocket programs by rdma-core's `librspreload.so` (`rnic exec --rsockets`). Each
//! server and client runs under `rnic exec` on a simulated RNIC of its own (127.0.N.1 and
//! 127.0.N.2), and each test asserts what the programs print and their exit codes:
//!
//! * `rstream`: its default test (latency and bandwidth at 64 B, 4 KiB, 64 KiB, 1 MiB; non-
//!   blocking calls, as rstream's default is), then custom sizes blocking (`-T b`), non-blocking
//!   (`-T n`) and through `rpoll` (`-T a`), with the data verified (`-T v`);
//! * `rcopy`: a 3 MB file copied to the server, compared byte for byte;
//! * `riostream`: `riowrite` into the peer's `riomap`'ed buffer, verified;
//! * `iperf3` and `sockperf` over librspreload: the server's listener is an rsocket (its
//!   `rdma_listen on` log line) and the bytes arrive.
//!
//! Network numbers N: 112–119 (ports 19000 + N). The harness is `common_programs/`; its
//! environment variables apply (`RNIC_REQUIRE_RDMA_TOOLS=1` turns a missing program or
//! librspreload.so into a failure).
//!
//!     cargo test -p rnic-cli --test rsocket_programs -- --nocapture

// The harness's result parsers (perftest, qperf) are not used here.
#[allow(unused_imports)]
mod common_programs;

use common_programs::{
    run_pair, tools_available, tools_required, Net, PairOutcome, PairSpec, Program, Ready,
    REQUIRE_ENV,
};
use std::path::PathBuf;

/// One result line of rstream/riostream (`name bytes xfers iters total time Gb/sec usec/xfer`).
#[derive(Debug, Clone, PartialEq)]
struct PerfLine {
    name: String,
    bytes: String,
    xfers: String,
    iters: String,
    gbps: f64,
    usec: f64,
}

/// The result lines of an rstream/riostream output (after the header).
fn perf_lines(out: &str) -> Vec<PerfLine> {
    out.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() != 8 || w[0] == "name" {
                return None;
            }
            Some(PerfLine {
                name: w[0].to_string(),
                bytes: w[1].to_string(),
                xfers: w[2].to_string(),
                iters: w[3].to_string(),
                gbps: w[6].parse().ok()?,
                usec: w[7].parse().ok()?,
            })
        })
        .collect()
}

/// Both sides exited 0 and printed exactly the lines `want` (name, bytes, xfers, iters), each
/// with a positive rate.
fn check_perf(out: &PairOutcome, want: &[(&str, &str, &str, &str)]) {
    out.assert_success();
    for (side, text) in [
        ("server", &out.server.stdout),
        ("client", &out.client.stdout),
    ] {
        let got = perf_lines(text);
        let names: Vec<(&str, &str, &str, &str)> = got
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.bytes.as_str(),
                    p.xfers.as_str(),
                    p.iters.as_str(),
                )
            })
            .collect();
        out.check(names == want, || {
            format!("the {side}'s result lines are {names:?}, expected {want:?}")
        });
        out.check(got.iter().all(|p| p.gbps > 0.0 && p.usec > 0.0), || {
            format!("the {side} printed a zero rate: {got:?}")
        });
    }
}

fn pair(name: &str, net: Net, prog: &str, server: &[&str], client: &[&str]) -> PairSpec {
    let mut s = vec![prog.to_string()];
    s.extend(server.iter().map(|a| a.to_string()));
    let mut c = vec![prog.to_string()];
    c.extend(client.iter().map(|a| a.to_string()));
    PairSpec {
        name: name.to_string(),
        server: Program::new(&net.server_ip(), &s),
        client: Program::new(&net.client_ip(), &c),
        ready: Ready::RdmaListen,
        server_stays: false,
    }
}

/// rstream on network `n` with the test options `opts` (both sides).
fn rstream(name: &str, n: u8, opts: &[&str], want: &[(&str, &str, &str, &str)]) {
    if !tools_available(name, &["rstream"]) {
        return;
    }
    let net = Net::new(n);
    let port = net.port_arg();
    let server_ip = net.server_ip();
    let mut server = vec!["-p", &port];
    server.extend_from_slice(opts);
    let mut client = vec!["-s", &server_ip, "-p", &port];
    client.extend_from_slice(opts);
    let out = run_pair(&pair(name, net, "rstream", &server, &client));
    check_perf(&out, want);
    out.show();
}

#[test]
fn rstream_default_test() {
    let sizes = [("64", "100k"), ("4k", "10k"), ("64k", "1k"), ("1m", "100")];
    let mut want: Vec<(String, String, String, String)> = Vec::new();
    for (s, n) in sizes {
        want.push((format!("{s}_lat"), s.into(), "1".into(), n.into()));
    }
    for (s, n) in sizes {
        want.push((format!("{s}_bw"), s.into(), n.into(), "1".into()));
    }
    let want: Vec<(&str, &str, &str, &str)> = want
        .iter()
        .map(|(a, b, c, d)| (a.as_str(), b.as_str(), c.as_str(), d.as_str()))
        .collect();
    rstream("rstream (default test)", 112, &[], &want);
}

#[test]
fn rstream_blocking_verified() {
    rstream(
        "rstream -T b -T v",
        113,
        &["-S", "100", "-C", "2000", "-T", "b", "-T", "v"],
        &[("custom", "100", "2k", "1")],
    );
}

#[test]
fn rstream_nonblocking_large_verified() {
    rstream(
        "rstream -T n -T v",
        114,
        &["-S", "1000000", "-C", "30", "-T", "n", "-T", "v"],
        &[("custom", "976k", "30", "1")],
    );
}

#[test]
fn rstream_async_rpoll_verified() {
    rstream(
        "rstream -T a -T v",
        115,
        &["-S", "65536", "-C", "200", "-I", "2", "-T", "a", "-T", "v"],
        &[("custom", "64k", "200", "2")],
    );
}

/// A file of `len` bytes that no two runs share a prefix of by accident.
fn test_file(path: &PathBuf, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ u64::from(std::process::id());
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(path, &data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    data
}

#[test]
fn rcopy_copies_a_file() {
    let name = "rcopy";
    if !tools_available(name, &["rcopy"]) {
        return;
    }
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rcopy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let (src, dst) = (dir.join("source.bin"), dir.join("copy.bin"));
    let _ = std::fs::remove_file(&dst);
    let data = test_file(&src, 3_000_000);
    let net = Net::new(116);
    let port = net.port_arg();
    let target = format!("{}:{}", net.server_ip(), dst.display());
    let src_arg = src.display().to_string();
    let mut spec = pair(
        name,
        net,
        "rcopy",
        &["-p", &port],
        &[&src_arg, &target, "-p", &port],
    );
    spec.server_stays = true; // rcopy's server serves one client after another
    let out = run_pair(&spec);
    out.check(out.client.succeeded(), || {
        "the client did not exit 0".into()
    });
    out.check(
        out.client
            .stdout
            .contains("opening...transferring...closing...done")
            && out.client.stdout.contains("3000000 bytes in"),
        || "the client did not report the transfer".into(),
    );
    out.check(
        out.server.stdout.contains(&format!(
            "opening: {}, transferring...3000000 bytes...closing...done",
            dst.display()
        )),
        || "the server did not report the file".into(),
    );
    let copy = std::fs::read(&dst).unwrap_or_default();
    out.check(copy == data, || {
        format!(
            "the copy differs: {} bytes, {} expected",
            copy.len(),
            data.len()
        )
    });
    out.show();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn riostream_iomap_verified() {
    let name = "riostream -T v";
    if !tools_available(name, &["riostream"]) {
        return;
    }
    // riostream waits for each transfer by spinning on the last byte of its buffer, without
    // calling the library: few round trips, or spinning programs starve the progress threads
    // of a small machine.
    let net = Net::new(117);
    let port = net.port_arg();
    let server_ip = net.server_ip();
    let opts = ["-S", "65536", "-C", "50", "-I", "3", "-T", "v"];
    let mut server = vec!["-p", port.as_str()];
    server.extend_from_slice(&opts);
    let mut client = vec!["-s", server_ip.as_str(), "-p", port.as_str()];
    client.extend_from_slice(&opts);
    let out = run_pair(&pair(name, net, "riostream", &server, &client));
    check_perf(&out, &[("custom", "64k", "50", "3")]);
    out.show();
}

/// rdma-core's librspreload.so, or `None` after a SKIP line (a failure under
/// `RNIC_REQUIRE_RDMA_TOOLS`).
fn rspreload(test: &str) -> Option<PathBuf> {
    match rnic_cli::rspreload::find_rspreload() {
        Ok(p) => Some(p),
        Err(e) if tools_required() => panic!("{test}: {e}, and {REQUIRE_ENV} is set"),
        Err(e) => {
            println!("SKIP {test}: {e}");
            None
        }
    }
}

/// The server's listener was an rsocket on librnic (not a kernel TCP socket): its
/// `rdma_listen on … (rlisten` line.
fn check_listener_is_rsocket(out: &PairOutcome) {
    out.check(out.server.stderr.contains("(rlisten, rsocket"), || {
        "the server's stderr has no rlisten line: its socket was not an rsocket on librnic".into()
    });
}

#[test]
fn iperf3_over_rsockets() {
    let name = "iperf3 over librspreload";
    if !tools_available(name, &["iperf3"]) || rspreload(name).is_none() {
        return;
    }
    let net = Net::new(118);
    let (port, server_ip) = (net.port_arg(), net.server_ip());
    let mut spec = pair(
        name,
        net,
        "iperf3",
        &["-s", "-B", &server_ip, "-p", &port, "-1"],
        &["-c", &server_ip, "-p", &port, "-t", "1", "-J"],
    );
    for p in [&mut spec.server, &mut spec.client] {
        p.exec_args.push("--rsockets".into());
    }
    let out = run_pair(&spec);
    out.assert_success();
    check_listener_is_rsocket(&out);
    let json: serde_json::Value = serde_json::from_str(&out.client.stdout)
        .unwrap_or_else(|e| out.fail(&format!("the client's -J output is not JSON: {e}")));
    let bytes = |k: &str| json["end"][k]["bytes"].as_u64().unwrap_or(0);
    let (sent, received) = (bytes("sum_sent"), bytes("sum_received"));
    // The last bytes in flight when the client stops count as sent, not received.
    out.check(received > 0 && received <= sent, || {
        format!("sum_sent {sent} bytes, sum_received {received}")
    });
    println!("{name}: {received} bytes in 1 s");
}

#[test]
fn sockperf_over_rsockets() {
    let name = "sockperf over librspreload";
    if !tools_available(name, &["sockperf"]) || rspreload(name).is_none() {
        return;
    }
    let net = Net::new(119);
    let (port, server_ip) = (net.port_arg(), net.server_ip());
    let mut spec = pair(
        name,
        net,
        "sockperf",
        &["server", "--tcp", "-i", &server_ip, "-p", &port],
        &[
            "ping-pong",
            "--tcp",
            "-i",
            &server_ip,
            "-p",
            &port,
            "-t",
            "1",
        ],
    );
    spec.server_stays = true;
    for p in [&mut spec.server, &mut spec.client] {
        p.exec_args.push("--rsockets".into());
    }
    let out = run_pair(&spec);
    out.check(out.client.succeeded(), || {
        "the client did not exit 0".into()
    });
    check_listener_is_rsocket(&out);
    let text = format!("{}{}", out.client.stdout, out.client.stderr);
    let received = text
        .split("ReceivedMessages=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    out.check(
        received > 0 && text.contains("# dropped messages = 0"),
        || format!("ReceivedMessages={received}, or messages were dropped"),
    );
    println!("{name}: {received} round trips");
}
