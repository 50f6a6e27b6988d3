//! More unmodified RDMA programs on librnic.so (the harness of `capi_programs.rs`): the ones
//! that exercise how a program waits for completions — by spinning on `ibv_poll_cq` or through a
//! completion channel — on RC and UD.
//!
//! * `ibv_rc_pingpong` without `-e` (it spins on `ibv_poll_cq`), with 2 % of the datagrams
//!   dropped both ways: the spinning program receives its peer's messages itself (librnic's
//!   progress from the caller) and the transport's retransmission timers still fire from the
//!   progress thread, or the lost messages would never be resent and the run would hang;
//! * `ibv_ud_pingpong -e` and `ib_send_lat -c UD -e`: UD SEND completions, made when the
//!   datagram leaves, wake the completion channel (they were made after the channel was
//!   signalled, and `ib_send_lat -c UD -e` hung);
//! * `rdma_xserver`/`rdma_xclient` (RC): `rdma_getaddrinfo` with `RAI_PASSIVE` and no node,
//!   `rdma_create_ep`, `rdma_connect(id, NULL)` (the device's maximum RDMA resources) and a
//!   16-byte `IBV_SEND_INLINE` SEND on a QP that asked for one send SGE and no inline data
//!   (rxe grants 16 inline bytes).
//!
//! Each test has its own addresses (server 127.0.N.1, client 127.0.N.2, N in 75..89) and its
//! own TCP / rdma_cm port (19000 + N). Run one with both outputs shown:
//!
//!     cargo test -p rnic-cli --test capi_verbs_programs ud_pingpong -- --nocapture
//!
//! Environment: as `capi_programs.rs` (`RNIC_REQUIRE_RDMA_TOOLS`, `RNIC_PROGRAM_TIMEOUT_SECS`,
//! `RNIC_PROGRAM_PARALLEL`, `RNIC_LIB`, `RUST_LOG`).

mod common_programs;

use common_programs::{
    run_pair, run_perftest, tools_available, Net, PairSpec, Perftest, Program, Ready, DEVICE,
};

/// `rdma_xserver`/`rdma_xclient` (rdma-core `librdmacm/examples`): one 16-byte inline SEND from
/// the client, received by the server; each prints `<name>: start` and `<name>: end 0`.
#[test]
fn rdma_xserver_xclient() {
    let name = "rdma_xserver/rdma_xclient";
    if !tools_available(name, &["rdma_xserver", "rdma_xclient"]) {
        return;
    }
    let net = Net::new(78);
    let (server_ip, port) = (net.server_ip(), net.port_arg());
    let spec = PairSpec {
        name: name.into(),
        server: Program::new(&server_ip, &["rdma_xserver", "-p", &port]),
        client: Program::new(
            &net.client_ip(),
            &["rdma_xclient", "-s", &server_ip, "-p", &port],
        ),
        ready: Ready::RdmaListen,
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    for (side, stdout) in [
        ("rdma_xserver", &out.server.stdout),
        ("rdma_xclient", &out.client.stdout),
    ] {
        let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
        let want = [format!("{side}: start"), format!("{side}: end 0")];
        out.check(lines == want, || {
            format!("{side} printed {lines:?}, not {want:?}")
        });
    }
    out.show();
}

/// Iterations of the pingpong tests.
const PINGPONG_ITERS: &str = "300";

/// An ibverbs-utils pingpong (`ibv_rc_pingpong`, `ibv_ud_pingpong`) on network `n` with
/// `extra` arguments on both sides and `exec_args` for both `rnic exec`s; checks both exit 0
/// and print `300 iters in … usec/iter`.
fn pingpong(tool: &str, n: u8, extra: &[&str], exec_args: &[&str]) {
    if !tools_available(tool, &[tool]) {
        return;
    }
    let net = Net::new(n);
    let port = net.port_arg();
    let mut server_argv = vec![
        tool,
        "-d",
        DEVICE,
        "-g",
        "0",
        "-p",
        &port,
        "-n",
        PINGPONG_ITERS,
    ];
    server_argv.extend(extra);
    let mut client_argv = server_argv.clone();
    let server_ip = net.server_ip();
    client_argv.push(&server_ip);
    let with_exec = |mut p: Program| {
        p.exec_args = exec_args.iter().map(|s| s.to_string()).collect();
        p
    };
    let spec = PairSpec {
        name: format!("{tool} {}", extra.join(" ")),
        server: with_exec(Program::new(&server_ip, &server_argv)),
        client: with_exec(Program::new(&net.client_ip(), &client_argv)),
        ready: Ready::TcpListen(net.port),
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    for (side, stdout) in [
        ("server", &out.server.stdout),
        ("client", &out.client.stdout),
    ] {
        out.check(
            stdout.lines().any(|l| {
                l.starts_with(&format!("{PINGPONG_ITERS} iters in")) && l.ends_with("usec/iter")
            }),
            || format!("the {side} did not print `{PINGPONG_ITERS} iters in … usec/iter`"),
        );
    }
    out.show();
}

/// `ibv_rc_pingpong` spinning on `ibv_poll_cq` (no `-e`), buffers checked (`-c`), with 2 % of
/// the datagrams dropped in each direction (fixed seeds) and short transport timers.
#[test]
fn rc_pingpong_polling_with_losses() {
    pingpong(
        "ibv_rc_pingpong",
        75,
        &["-c"],
        &["--drop-rate", "0.02", "--seed", "24", "--fast-timers"],
    );
}

/// `ibv_ud_pingpong -e`: UD, waiting on a completion channel.
#[test]
fn ud_pingpong_events() {
    pingpong("ibv_ud_pingpong", 76, &["-e"], &[]);
}

/// `ib_send_lat -c UD -e`: perftest's UD latency test waiting on a completion channel; it
/// waits for each SEND's completion event, which comes from the send step.
#[test]
fn ib_send_lat_ud_events() {
    let p = Perftest {
        tool: "ib_send_lat",
        rdma_cm: false,
        iters: 300,
        size: None,
        extra: vec!["-c".into(), "UD".into(), "-e".into()],
        exec_args: Vec::new(),
    };
    if let Some(r) = run_perftest("ib_send_lat -c UD -e", Net::new(77), &p) {
        println!(
            "ib_send_lat -c UD -e: t_avg = {:?}",
            r.client_value("t_avg")
        );
    }
}
