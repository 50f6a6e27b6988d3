//! Unmodified RDMA programs on librnic.so: each test runs a server and a client of a Debian
//! package's tool (perftest, rdmacm-utils, qperf) under `rnic exec`, each process on a
//! simulated RNIC of its own whose GID is its loopback address (RoCEv2 on UDP 4791 of it), and
//! checks what the tools themselves check and print: exit codes, results tables, ping counts,
//! "return status 0".
//!
//! * perftest, RC: `ib_send_bw`, `ib_write_bw`, `ib_read_bw` (64 KiB messages) and
//!   `ib_send_lat`, `ib_write_lat` (the default 2 bytes), with the QP numbers exchanged over
//!   TCP (perftest's default) and again with `-R` (connected through rdma_cm);
//! * `rping`: 100 verified ping-pongs (SEND, RDMA READ, RDMA WRITE) and the disconnect;
//! * `ucmatose`: 10 rdma_cm connections, messages on each, disconnect;
//! * `rdma_server`/`rdma_client`: synchronous ids (`rdma_create_ep`, `rdma_get_request`), one
//!   message each way, disconnect;
//! * `qperf` `rc_bw` and `rc_lat` over the RDMA CM (`-cm1`);
//! * `udaddy`: UD QPs through rdma_cm (SIDR), 10 datagrams each way;
//! * `mckey`: a multicast sender and a receiver (`rdma_join_multicast`), 10 datagrams to the
//!   group;
//! * `rping` whose server's RNIC is removed while it pings (`rnic exec --remove-device-after`):
//!   the server reports the device removal and fails; the client, whose peer falls silent,
//!   waits as it would on Linux and is killed.
//!
//! Each test has its own addresses (server 127.0.N.1, client 127.0.N.2) and its own TCP /
//! rdma_cm port (19000 + N), so they run in parallel. The harness is in `common_programs/`.
//!
//! Run one test, with both programs' outputs shown:
//!
//!     cargo test -p rnic-cli --test capi_programs rping -- --nocapture
//!
//! Environment:
//! * `RNIC_REQUIRE_RDMA_TOOLS=1` (CI): a missing program or librnic.so fails the test instead
//!   of printing `SKIP <test>: …`;
//! * `RNIC_PROGRAM_TIMEOUT_SECS`: the deadline of one server/client run (default 60 s), after
//!   which both are killed and the test fails with both commands and outputs;
//! * `RNIC_PROGRAM_PARALLEL`: how many server/client pairs run at once (default 3);
//! * `RNIC_LIB`: the librnic.so `rnic exec` preloads (default: the one cargo built beside
//!   `rnic`);
//! * `RUST_LOG`: passed to the programs (librnic.so's log, on their stderr). When unset, the
//!   rdma_cm servers get `RUST_LOG=rnic=info`: their `rdma_listen on` line tells the harness
//!   they are ready (so a `RUST_LOG` of yours must keep info for `rnic`, e.g. `rnic=debug`).

mod common_programs;

use common_programs::{
    lines_starting_with, program_timeout, run_pair, run_perftest, tools_available, Net,
    PairOutcome, PairSpec, Perftest, Program, QperfResult, Ready, Running, LISTEN_LOG,
    LISTEN_MARKER, MULTICAST_MARKER, POLL,
};
use std::time::Instant;

// ---------------------------------------------------------------------------------------------
// perftest

/// Iterations of the bandwidth tests (`-n`): small, the machine is slow.
const BW_ITERS: u32 = 200;
/// Iterations of the latency tests.
const LAT_ITERS: u32 = 300;
/// Message size of the bandwidth tests (`-s`).
const BW_SIZE: u64 = 65536;

/// `tool` (RC) on network `n`, through rdma_cm if `rdma_cm`.
fn perftest(n: u8, tool: &'static str, rdma_cm: bool) {
    let lat = tool.ends_with("_lat");
    let p = Perftest {
        tool,
        rdma_cm,
        iters: if lat { LAT_ITERS } else { BW_ITERS },
        size: (!lat).then_some(BW_SIZE),
        extra: Vec::new(),
        exec_args: Vec::new(),
    };
    let name = format!("{tool}{}", if rdma_cm { " -R" } else { "" });
    if let Some(r) = run_perftest(&name, Net::new(n), &p) {
        let col = if lat { "t_avg" } else { "BW average" };
        println!(
            "{name}: {} bytes, client {col} = {:?}",
            r.size,
            r.client_value(col)
        );
    }
}

#[test]
fn perftest_ib_send_bw() {
    perftest(21, "ib_send_bw", false);
}

#[test]
fn perftest_ib_write_bw() {
    perftest(22, "ib_write_bw", false);
}

#[test]
fn perftest_ib_read_bw() {
    perftest(23, "ib_read_bw", false);
}

#[test]
fn perftest_ib_send_lat() {
    perftest(24, "ib_send_lat", false);
}

#[test]
fn perftest_ib_write_lat() {
    perftest(25, "ib_write_lat", false);
}

#[test]
fn perftest_ib_send_bw_rdma_cm() {
    perftest(26, "ib_send_bw", true);
}

#[test]
fn perftest_ib_write_bw_rdma_cm() {
    perftest(27, "ib_write_bw", true);
}

#[test]
fn perftest_ib_read_bw_rdma_cm() {
    perftest(28, "ib_read_bw", true);
}

#[test]
fn perftest_ib_send_lat_rdma_cm() {
    perftest(29, "ib_send_lat", true);
}

#[test]
fn perftest_ib_write_lat_rdma_cm() {
    perftest(30, "ib_write_lat", true);
}

// ---------------------------------------------------------------------------------------------
// rdmacm-utils

/// Ping-pongs of the rping test.
const RPING_COUNT: usize = 100;

/// rping (rdma-core's librdmacm/examples/rping.c): per ping the client SENDs its buffer's
/// address, the server RDMA READs it, SENDs, the client SENDs its sink's address, the server
/// RDMA WRITEs the data back and SENDs; `-V` makes the client compare the data, `-v` prints it
/// (`ping data: rdma-ping-<i>: …`; the server: `server ping data: …`). After `-C` pings the
/// client disconnects; the server prints `server DISCONNECT EVENT...` and exits 0. The server
/// ignores `-C` (it loops until the disconnect).
#[test]
fn rping() {
    rping_pair("rping", 31, &[]);
}

/// rping `-q`: each side creates its QP itself (`ibv_create_qp`), moves it with the attributes
/// `rdma_init_qp_attr` gives, and the client calls `rdma_establish` after CONNECT_RESPONSE.
#[test]
fn rping_self_created_qp() {
    rping_pair("rping -q", 35, &["-q"]);
}

fn rping_pair(name: &str, n: u8, extra: &[&str]) {
    if !tools_available(name, &["rping"]) {
        return;
    }
    let net = Net::new(n);
    let (server_ip, port, count) = (net.server_ip(), net.port_arg(), RPING_COUNT.to_string());
    let mut server = vec![
        "rping", "-s", "-a", &server_ip, "-p", &port, "-v", "-C", &count,
    ];
    let mut client = vec![
        "rping", "-c", "-a", &server_ip, "-p", &port, "-v", "-V", "-C", &count,
    ];
    server.extend_from_slice(extra);
    client.extend_from_slice(extra);
    let spec = PairSpec {
        name: name.into(),
        server: Program::new(&server_ip, &server),
        client: Program::new(&net.client_ip(), &client),
        ready: Ready::RdmaListen,
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    let pings = lines_starting_with(&out.client.stdout, "ping data: ");
    out.check(pings.len() == RPING_COUNT, || {
        format!(
            "the client printed {} `ping data:` lines, not {RPING_COUNT}",
            pings.len()
        )
    });
    for (i, l) in pings.iter().enumerate() {
        let want = format!("ping data: rdma-ping-{i}: ");
        out.check(l.starts_with(&want), || {
            format!("ping {i} is `{l}`, not `{want}…`")
        });
    }
    let served = lines_starting_with(&out.server.stdout, "server ping data: ");
    out.check(served.len() == RPING_COUNT, || {
        format!(
            "the server printed {} `server ping data:` lines, not {RPING_COUNT}",
            served.len()
        )
    });
    out.check(
        out.server.stderr.contains("server DISCONNECT EVENT..."),
        || "the server did not see the client's disconnect".into(),
    );
    out.check(!out.client.stderr.contains("data mismatch"), || {
        "the client's -V check failed".into()
    });
    out.show();
}

/// A hot-unplug under a running rping server: `rnic exec --remove-device-after` removes its
/// RNIC while the client pings. rping's event handler answers `RDMA_CM_EVENT_DEVICE_REMOVAL`
/// with "cma detected device removal!!!!" and the server exits with -1 (rping.c
/// `rping_cma_event_handler`), or with 5 when its main thread's `ibv_post_send` met the removed
/// device first (EIO). The client hears nothing from a removed device (no DREQ, no
/// ACK: docs/cm-semantics.md, "Device removal and address change"); with nothing of its own
/// outstanding it waits, as on Linux, and the test kills it.
#[test]
#[allow(clippy::disallowed_methods)] // deadlines of real processes: wall-clock time, as the harness
fn rping_server_sees_its_device_removed_mid_run() {
    let name = "rping_server_sees_its_device_removed_mid_run";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let net = Net::new(39);
    let (server_ip, port) = (net.server_ip(), net.port_arg());
    let mut server = Program::new(
        &server_ip,
        &[
            "rping", "-s", "-a", &server_ip, "-p", &port, "-C", "1000000",
        ],
    );
    server.exec_args = vec!["--remove-device-after".into(), "1500".into()];
    server.env = vec![("RUST_LOG".into(), LISTEN_LOG.into())];
    let client = Program::new(
        &net.client_ip(),
        &[
            "rping", "-c", "-a", &server_ip, "-p", &port, "-v", "-C", "1000000",
        ],
    );
    let deadline = Instant::now() + program_timeout();
    let mut s = Running::spawn("server", &server).unwrap();
    while !s.stderr_text().contains(LISTEN_MARKER) && s.poll().is_none() {
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(POLL);
    }
    let mut c = Running::spawn("client", &client).unwrap();
    while s.poll().is_none() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    c.kill();
    let (s, c) = (s.finish(), c.finish());
    let report = format!("{s:?}\n{c:?}");
    assert!(
        s.stderr.contains("cma detected device removal!!!!"),
        "the server did not report the removal\n{report}"
    );
    // rping's two threads race to the exit: its CM thread's DEVICE_REMOVAL ends the run with
    // -1 (255), unless its main thread's next ibv_post_send met the removed device first and
    // returned EIO (5, "post send error 5"), as after a real hot-unplug (uverbs disassociate).
    let code = s.status.and_then(|st| st.code());
    assert!(
        code == Some(255) || (code == Some(5) && s.stderr.contains("post send error 5")),
        "{report}"
    );
    assert!(
        !lines_starting_with(&c.stdout, "ping data: ").is_empty(),
        "the removal came before any ping\n{report}"
    );
}

/// rdma_server / rdma_client (rdma-core's librdmacm/examples/rdma_server.c, rdma_client.c):
/// synchronous ids throughout — `rdma_getaddrinfo`, `rdma_create_ep` (the server's passive
/// endpoint keeps the QP attributes, the client's resolves and makes its QP), `rdma_listen`,
/// `rdma_get_request` (which makes the new id's QP), `rdma_accept`/`rdma_connect` returning
/// once ESTABLISHED — then one 16-byte SEND each way (`rdma_post_send` with `IBV_SEND_INLINE`
/// from an unregistered buffer, `rdma_get_send_comp`/`rdma_get_recv_comp`), `rdma_disconnect`
/// returning with DISCONNECTED, and `rdma_destroy_ep`. Each prints `<name>: start` and
/// `<name>: end 0` (`run()`'s result, also its exit code) after a clean run.
#[test]
fn rdma_server_client() {
    let name = "rdma_server/rdma_client";
    if !tools_available(name, &["rdma_server", "rdma_client"]) {
        return;
    }
    let net = Net::new(36);
    let (server_ip, port) = (net.server_ip(), net.port_arg());
    let spec = PairSpec {
        name: name.into(),
        server: Program::new(&server_ip, &["rdma_server", "-s", &server_ip, "-p", &port]),
        client: Program::new(
            &net.client_ip(),
            &["rdma_client", "-s", &server_ip, "-p", &port],
        ),
        ready: Ready::RdmaListen,
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    for (side, stdout) in [
        ("rdma_server", &out.server.stdout),
        ("rdma_client", &out.client.stdout),
    ] {
        let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
        let want = [format!("{side}: start"), format!("{side}: end 0")];
        out.check(lines == want, || {
            format!("{side} printed {lines:?}, not {want:?}")
        });
    }
    out.show();
}

/// Connections of the ucmatose test.
const UCMATOSE_CONNECTIONS: usize = 10;

/// ucmatose (cmatose.c): `-c` rdma_cm connections to the server's `-b` address and port `-p`;
/// the server sends `-C` (default 10) messages of `-S` (default 100) bytes on each, the client
/// receives them and replies, then the server disconnects them all. Both print
/// `data transfers complete`, `test complete` and `return status 0` (their exit code).
#[test]
fn ucmatose() {
    let name = "ucmatose";
    if !tools_available(name, &["ucmatose"]) {
        return;
    }
    let net = Net::new(32);
    let (server_ip, client_ip) = (net.server_ip(), net.client_ip());
    let (port, conns) = (net.port_arg(), UCMATOSE_CONNECTIONS.to_string());
    let spec = PairSpec {
        name: name.into(),
        server: Program::new(
            &server_ip,
            &["ucmatose", "-b", &server_ip, "-p", &port, "-c", &conns],
        ),
        client: Program::new(
            &client_ip,
            &[
                "ucmatose", "-s", &server_ip, "-b", &client_ip, "-p", &port, "-c", &conns,
            ],
        ),
        ready: Ready::RdmaListen,
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    assert_cmatose_lines(&out);
    out.check(
        out.server
            .stdout
            .lines()
            .any(|l| l.trim() == "disconnected"),
        || "the server did not print `disconnected`".into(),
    );
    out.show();
}

/// The lines both sides of cmatose.c, udaddy.c and mckey.c print after a clean run.
fn assert_cmatose_lines(out: &PairOutcome) {
    for (side, stdout) in [
        ("server", &out.server.stdout),
        ("client", &out.client.stdout),
    ] {
        for line in [
            "data transfers complete",
            "test complete",
            "return status 0",
        ] {
            out.check(stdout.lines().any(|l| l.trim() == line), || {
                format!("the {side} did not print `{line}`")
            });
        }
    }
}

/// udaddy (udaddy.c): UD QPs through rdma_cm (RDMA_PS_UDP), the server's `-b` address and the
/// fixed port 7174 (its `-p` is the port *space*, not a port). The client's `rdma_connect` is a
/// SIDR_REQ, its ESTABLISHED carries the server's QPN and Q_Key; it sends 10 datagrams (SEND
/// with its QPN as immediate data), the server answers each through an AH made from the
/// received GRH (`ibv_create_ah_from_wc`). Same result lines as ucmatose.
#[test]
fn udaddy() {
    let name = "udaddy";
    if !tools_available(name, &["udaddy"]) {
        return;
    }
    let net = Net::new(90);
    let (server_ip, client_ip) = (net.server_ip(), net.client_ip());
    let spec = PairSpec {
        name: name.into(),
        server: Program::new(&server_ip, &["udaddy", "-b", &server_ip]),
        client: Program::new(&client_ip, &["udaddy", "-s", &server_ip, "-b", &client_ip]),
        ready: Ready::RdmaListen,
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    assert_cmatose_lines(&out);
    out.show();
}

/// mckey (mckey.c): the receiver and the sender each resolve the group's address (an
/// IPv4 multicast address), make a UD QP, join the group (`rdma_join_multicast_ex`: the QP is
/// attached when MULTICAST_JOIN is read) and print the group's GID; the sender sends 10
/// datagrams to it (QPN 0xFFFFFF), which reach the receiver's RNIC through the group directory
/// (docs/capi.md, "Multicast") and its attached QP; the receiver polls until it has all 10.
/// Both leave the group and print `data transfers complete`, `test complete`,
/// `return status 0`.
#[test]
fn mckey() {
    let name = "mckey";
    if !tools_available(name, &["mckey"]) {
        return;
    }
    let net = Net::new(91);
    let (receiver_ip, sender_ip) = (net.server_ip(), net.client_ip());
    // A group of this test's own (tests run at once on one machine share the directory).
    let group = format!("239.0.{}.1", net.n);
    let spec = PairSpec {
        name: name.into(),
        server: Program::new(&receiver_ip, &["mckey", "-m", &group, "-b", &receiver_ip]),
        client: Program::new(&sender_ip, &["mckey", "-m", &group, "-s", "-b", &sender_ip]),
        ready: Ready::Stderr(MULTICAST_MARKER),
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    assert_cmatose_lines(&out);
    for (side, stdout) in [
        ("receiver", &out.server.stdout),
        ("sender", &out.client.stdout),
    ] {
        let joined = format!("mckey: joined dgid: ::ffff:{group} mlid 0x0 sl 0");
        out.check(stdout.lines().any(|l| l.trim() == joined), || {
            format!("the {side} did not print `{joined}`")
        });
    }
    out.check(
        out.server
            .stdout
            .lines()
            .any(|l| l.trim() == "receiving data transfers"),
        || "the receiver did not print `receiving data transfers`".into(),
    );
    out.check(
        out.client
            .stdout
            .lines()
            .any(|l| l.trim() == "initiating data transfers"),
        || "the sender did not print `initiating data transfers`".into(),
    );
    out.show();
}

// ---------------------------------------------------------------------------------------------
// qperf

/// qperf's option to connect the RC QPs through the RDMA CM (`--use_cm 1`, short `-cm1`; the
/// server takes it from the client's request). Without it qperf connects with the LID only and
/// no GRH, which a RoCE device cannot route: `None` to try that.
const QPERF_CM: Option<&str> = Some("-cm1");
/// Seconds each qperf test runs (`-t`).
const QPERF_SECONDS: &str = "1";

/// qperf: the server (`qperf -lp PORT`) listens on TCP for its clients' requests and stays; the
/// client runs `rc_bw` (RC SEND streaming) and `rc_lat` (RC SEND ping-pong) and prints
/// `bw = <n> <unit>/sec` and `latency = <n> us` under each test's name.
#[test]
fn qperf() {
    let name = "qperf";
    if !tools_available(name, &["qperf"]) {
        return;
    }
    let net = Net::new(33);
    let (server_ip, port) = (net.server_ip(), net.port_arg());
    let mut client_argv = vec![
        "qperf",
        server_ip.as_str(),
        "-lp",
        &port,
        "-t",
        QPERF_SECONDS,
    ];
    client_argv.extend(QPERF_CM);
    client_argv.extend(["rc_bw", "rc_lat"]);
    let spec = PairSpec {
        name: name.into(),
        server: Program::new(&server_ip, &["qperf", "-lp", &port]),
        client: Program::new(&net.client_ip(), &client_argv),
        ready: Ready::TcpListen(net.port),
        server_stays: true,
    };
    let out = run_pair(&spec);
    out.assert_success();
    let results = QperfResult::parse(&out.client.stdout);
    for (test, quantity) in [("rc_bw", "bw"), ("rc_lat", "latency")] {
        let r = results
            .iter()
            .find(|r| r.test == test && r.name == quantity);
        out.check(
            r.is_some_and(|r| r.value > 0.0 && r.base_value().is_some()),
            || format!("no positive `{quantity} = <n> <unit>` under `{test}:` ({results:?})"),
        );
    }
    out.show();
}
