//! UCX, libfabric and OpenMPI, unmodified, on librnic.so (the harness of `capi_programs.rs`):
//!
//! * `ucx_info -d` lists `rc_verbs` and `ud_verbs` on `rnic0:1` under `rnic exec` (UCX 1.13
//!   lists a device only if `/dev/infiniband/uverbs0` is a character device, which
//!   `rnic exec` makes visible in the program's own mount namespace), and not with
//!   `--device-files off`;
//! * `ucx_perftest`: the UCP tag-matching latency test over `rc_verbs` (with `ud_verbs`, the
//!   transport UCP connects RC through) and the UCT active-message and RDMA WRITE latency
//!   tests on `rc_verbs`;
//! * OpenMPI 4.1 over UCX (`--mca pml ucx`, UCX limited to the verbs transports, so nothing
//!   crosses shared memory): two ranks, each under its own `rnic exec`, run
//!   `cli/tests/programs/mpi_pingpong.c` (a checked ping-pong and an allreduce);
//! * libfabric's `fi_pingpong -p verbs -e msg` and `-p "verbs;ofi_rxm" -e rdm`, in a network
//!   namespace with the RNICs' addresses on a veth interface: libfabric's verbs provider maps
//!   addresses to devices through `getifaddrs` and skips the interface `lo`
//!   (`vrb_getifaddrs`), so on loopback addresses it offers no MSG endpoint.
//!
//! Addresses 127.0.160.x–127.0.164.x (192.0.2.1/2 inside the network namespace). Run one with
//! its output:
//!
//!     cargo test -p rnic-cli --test hpc_programs mpi -- --nocapture
//!
//! Environment: `RNIC_REQUIRE_HPC_TOOLS=1` (CI) turns a missing program (Debian packages
//! ucx-utils, libfabric-bin, openmpi-bin, libopenmpi-dev), a missing librnic.so or a network
//! namespace that cannot be made into a failure instead of a `SKIP`; otherwise as
//! `capi_programs.rs`.

// Children run under timeout(1) or the harness's deadlines (wall clock by nature).
#![allow(clippy::disallowed_methods)]

#[allow(unused_imports)] // this file uses a part of the harness
mod common_programs;

use common_programs::{
    library_available, on_path, run_pair, Net, PairSpec, Program, Ready, Slot, RNIC,
};
use std::process::{Command, Stdio};

/// Set (to anything but `0` or empty) by CI: a missing program, library or namespace fails.
const REQUIRE_ENV: &str = "RNIC_REQUIRE_HPC_TOOLS";

/// UCX on librnic's device only: its verbs transports, not TCP or shared memory.
const UCX_ENV: [(&str, &str); 3] = [
    ("UCX_NET_DEVICES", "rnic0:1"),
    ("UCX_TLS", "rc_verbs,ud_verbs"),
    ("UCX_LOG_LEVEL", "warn"),
];

/// `true` when `progs` and librnic.so are there; otherwise `SKIP` (or a panic under
/// [`REQUIRE_ENV`]).
fn available(test: &str, progs: &[&str]) -> bool {
    let missing: Vec<&str> = progs.iter().copied().filter(|p| !on_path(p)).collect();
    let why = if missing.is_empty() {
        library_available().err()
    } else {
        Some(format!(
            "{} not installed (Debian packages ucx-utils, libfabric-bin, openmpi-bin, \
             libopenmpi-dev)",
            missing.join(", ")
        ))
    };
    skip_unless(test, why)
}

/// `true` without a reason to skip; else prints `SKIP` or, under [`REQUIRE_ENV`], panics.
fn skip_unless(test: &str, why: Option<String>) -> bool {
    let Some(why) = why else { return true };
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
        panic!("{test}: {why}, and {REQUIRE_ENV} is set");
    }
    println!("SKIP {test}: {why}");
    false
}

/// `ucx_info -d` under `rnic exec` with `exec_args`: its stdout.
fn ucx_devices(addr: &str, exec_args: &[&str]) -> String {
    let out = Command::new("timeout")
        .args(["60", RNIC, "exec", "--addr", addr])
        .args(exec_args)
        .args(["--", "ucx_info", "-d"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run ucx_info: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ucx_info -d failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The transports `ucx_info -d` lists on device `rnic0:1`.
fn transports_on_rnic(listing: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut transport = None;
    for line in listing.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix("#      Transport:") {
            transport = Some(t.trim().to_string());
        } else if let Some(d) = line.strip_prefix("#         Device:") {
            if d.trim() == "rnic0:1" {
                found.extend(transport.take());
            }
        }
    }
    found
}

#[test]
fn ucx_lists_the_verbs_transports_on_the_rnic() {
    let name = "ucx_info -d";
    if !available(name, &["ucx_info"]) {
        return;
    }
    let addr = Net::new(164).server_ip();
    let with = transports_on_rnic(&ucx_devices(&addr, &[]));
    assert!(
        with.iter().any(|t| t == "rc_verbs") && with.iter().any(|t| t == "ud_verbs"),
        "UCX lists {with:?} on rnic0:1, not rc_verbs and ud_verbs"
    );
    let without = transports_on_rnic(&ucx_devices(&addr, &["--device-files", "off"]));
    assert!(
        without.is_empty(),
        "without the device files UCX still lists {without:?} on rnic0:1"
    );
}

/// `ucx_perftest` server and client on network `n` with `test_args` on both sides; checks both
/// exit 0 and the client's `Final:` line counts `iters` iterations.
fn ucx_perftest(name: &str, n: u8, test_args: &[&str]) {
    if !available(name, &["ucx_perftest"]) {
        return;
    }
    let net = Net::new(n);
    let iters = "200";
    let port = net.port_arg();
    let common: Vec<&str> = [test_args, &["-n", iters, "-p", &port]].concat();
    let program = |addr: &str, argv: Vec<&str>| Program {
        env: UCX_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Program::new(addr, &argv)
    };
    let server_ip = net.server_ip();
    let spec = PairSpec {
        name: name.into(),
        server: program(&server_ip, [&["ucx_perftest"], &common[..]].concat()),
        client: program(
            &net.client_ip(),
            [&["ucx_perftest", &server_ip], &common[..]].concat(),
        ),
        ready: Ready::TcpListen(net.port),
        server_stays: false,
    };
    let out = run_pair(&spec);
    out.assert_success();
    let done = out.client.stdout.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.first() == Some(&"Final:") && w.get(1) == Some(&iters)
    });
    out.check(done, || {
        format!("no `Final: {iters} …` line from the client")
    });
    out.show();
}

#[test]
fn ucx_perftest_tag_latency_over_rc_verbs() {
    ucx_perftest("ucx_perftest -t tag_lat", 161, &["-t", "tag_lat"]);
}

#[test]
fn ucx_perftest_uct_active_message_latency_on_rc_verbs() {
    ucx_perftest(
        "ucx_perftest -t am_lat -x rc_verbs",
        162,
        &["-t", "am_lat", "-x", "rc_verbs", "-d", "rnic0:1"],
    );
}

#[test]
fn ucx_perftest_uct_rdma_write_latency_on_rc_verbs() {
    ucx_perftest(
        "ucx_perftest -t put_lat -x rc_verbs",
        163,
        &["-t", "put_lat", "-x", "rc_verbs", "-d", "rnic0:1"],
    );
}

/// The `datagrams.rx_datagrams` counter of each `RNIC_STATS=json` report in `stderr`.
fn rx_datagrams(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|l| l.starts_with("{\"librnic\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["datagrams"]["rx_datagrams"].as_u64())
        .collect()
}

#[test]
fn openmpi_over_ucx_pingpong_and_allreduce() {
    let name = "OpenMPI over UCX";
    if !available(name, &["mpicc", "mpirun"]) {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hpc_programs");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let prog = dir.join("mpi_pingpong");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/mpi_pingpong.c");
    let cc = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&prog)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("mpicc: {e}"));
    assert!(
        cc.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let prog = prog.to_string_lossy().into_owned();
    let _slot = Slot::take();
    let net = Net::new(160);
    let (a, b) = (net.server_ip(), net.client_ip());
    // One rank per `rnic exec` (MPMD), each its own RNIC; -x passes the variables on.
    let mut cmd = Command::new("timeout");
    cmd.args(["120", "mpirun", "--allow-run-as-root", "--oversubscribe"])
        .args(["--mca", "pml", "ucx", "--mca", "btl", "self"]);
    for (k, v) in UCX_ENV.iter().chain(&[("RNIC_STATS", "json")]) {
        cmd.env(k, v).args(["-x", k]);
    }
    for addr in [&a, &b] {
        cmd.args(["-np", "1", RNIC, "exec", "--addr", addr, "--", &prog, ":"]);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("mpirun: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let report = format!("{}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(out.status.success(), "mpirun failed: {report}");
    for want in [
        "pingpong: 50 rounds of 4096 bytes, 0 bad bytes",
        "rank 0: allreduce sum 3",
        "rank 1: allreduce sum 3",
        "OK",
    ] {
        assert!(
            stdout.lines().any(|l| l.trim() == want),
            "no line {want:?}: {report}"
        );
    }
    // 50 round trips of 4 KiB at a 1024-byte MTU: at least 200 datagrams into each RNIC.
    let rx = rx_datagrams(&stderr);
    assert!(
        rx.len() == 2 && rx.iter().all(|&n| n >= 200),
        "RNIC_STATS: datagrams received {rx:?}, not ≥ 200 by each of the two RNICs: {report}"
    );
    println!("{report}");
}

/// `fi_pingpong` with `args` on both sides, server on 192.0.2.1 and client on 192.0.2.2, in a
/// network namespace of its own where both addresses are on a veth interface; checks both
/// sides print the result line of 100 transfers of 64 bytes and exit 0.
fn fi_pingpong(name: &str, args: &str) {
    if !available(name, &["fi_pingpong", "unshare", "ip", "timeout"]) {
        return;
    }
    let probe = Command::new("unshare")
        .args(["-rn", "true"])
        .output()
        .map_err(|e| e.to_string())
        .and_then(|o| {
            o.status
                .success()
                .then_some(())
                .ok_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned())
        });
    if !skip_unless(
        name,
        probe
            .err()
            .map(|e| format!("no network namespace (unshare -rn: {})", e.trim())),
    ) {
        return;
    }
    // Inside: the server in the background, the client once the server's control port
    // (47592 = 0xB9E8) listens, then the server's exit status.
    let script = format!(
        r#"set -u
ip link set lo up && ip link add rnic-a type veth peer name rnic-b && ip link set rnic-b up &&
ip addr add 192.0.2.1/24 dev rnic-a && ip addr add 192.0.2.2/24 dev rnic-a && ip link set rnic-a up || exit 90
timeout 60 {RNIC} exec --addr 192.0.2.1 -- fi_pingpong {args} >"$0.server" 2>&1 &
server=$!
i=0
until grep -q ':B9E8 00000000:0000 0A' /proc/net/tcp; do
  i=$((i+1)); [ $i -lt 400 ] || {{ echo "server not listening"; cat "$0.server"; exit 91; }}; sleep 0.05
done
timeout 60 {RNIC} exec --addr 192.0.2.2 -- fi_pingpong {args} 192.0.2.1
client=$?
wait $server
server_rc=$?
echo "== server (exit $server_rc) =="
cat "$0.server"
echo "== client exit $client =="
"#
    );
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "fi_pingpong-{}",
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ));
    let _slot = Slot::take();
    let out = Command::new("unshare")
        .args(["-rn", "sh", "-c", &script])
        .arg(&base)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("unshare: {e}"));
    let text = format!(
        "{}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(base.with_extension("server"));
    assert!(
        text.contains("== server (exit 0) ==") && text.contains("== client exit 0 =="),
        "{name}: a side failed:\n{text}"
    );
    let results = text
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.get(..3) == Some(&["64", "100", "=100"])
        })
        .count();
    assert_eq!(
        results, 2,
        "{name}: not one `64 100 =100 …` line per side:\n{text}"
    );
    println!("{text}");
}

#[test]
fn fi_pingpong_verbs_msg() {
    fi_pingpong("fi_pingpong -e msg", "-p verbs -e msg -S 64 -I 100");
}

#[test]
fn fi_pingpong_verbs_rdm_over_ofi_rxm() {
    fi_pingpong(
        "fi_pingpong -e rdm (ofi_rxm)",
        "-p 'verbs;ofi_rxm' -e rdm -S 64 -I 100",
    );
}
