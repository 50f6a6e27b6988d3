//! A program's death under `rnic exec`, as its peer sees it: on Linux the RNIC and the CM live
//! in the kernel, which outlives the program, so whatever ends the program — SIGKILL, a crash,
//! an unhandled SIGTERM or SIGINT, a normal exit — its connections are destroyed as
//! `ucma_close` → `cm_destroy_id` destroys them, and the peer gets DISCONNECTED (or REJECTED in
//! a handshake) within a round trip. `rnic exec` plays that part (docs/capi.md, "Process
//! death"); `--on-death power-loss` keeps the host-that-vanished outcome.
//!
//! Real programs on both sides (rping, ucmatose, and `programs/rdma_die.c` where a program must
//! stop at a precise point: a normal exit in the middle of a connection, a connection request
//! taken and not accepted); each test kills one side the way it names and asserts on what the
//! other side prints and when, and on `rnic exec`'s own exit status (the program's: the same
//! signal, or the same exit code).
//!
//! * rping, established, the server dies (SIGKILL, SIGSEGV to the program; SIGTERM, SIGINT to
//!   `rnic exec`, which passes them on) or the client dies (SIGKILL): the peer prints
//!   `DISCONNECT EVENT` and exits within [`PROMPT`] of the signal, with no RC retry failure
//!   (`cq completion failed status 12`).
//! * a normal `exit(3)` while connected: the rping server gets DISCONNECTED; `rnic exec` exits 3.
//! * `--on-death power-loss`, the rping server SIGKILLed: after [`PROMPT`] the client has seen
//!   no DISCONNECTED and still waits, as for a host that lost power.
//! * a handshake, the server holding a ucmatose client's request without accepting it
//!   (`rdma_die hold-request`) dies (each kind): its CM sends the REJ (consumer defined, 28)
//!   `cm_destroy_id` sends in REQ_RCVD, and the client reports `RDMA_CM_EVENT_REJECTED, error:
//!   28` rather than timing out.
//! * a handshake, the ucmatose server stopped (SIGSTOP) before the client's REQ arrives, then
//!   SIGKILLed: the REQ waiting in its socket is answered as by a kernel with no listener (REJ
//!   8: `RDMA_CM_EVENT_REJECTED, error: 8`); with power-loss (and the client's fast timers) it
//!   goes unanswered (`RDMA_CM_EVENT_UNREACHABLE, error: -110`).
//!
//! * the RDMA program run by a shell (`sh -c 'rping …; exit 7'`), SIGKILLed: it owned the RNIC
//!   though a grandchild, so its peer gets DISCONNECTED when the shell ends; `rnic exec` exits 7.
//!
//! Addresses 127.0.N.1 (server) and 127.0.N.2 (client), N in 50 … 69, one per test.
//!
//!     cargo test -p rnic-cli --test exec_death -- --nocapture

// Real processes on the wall clock: deadlines and the pipes' reader threads.
#![allow(clippy::disallowed_methods)]

#[allow(unused_imports)] // the harness re-exports its parsers, which these tests do not need
mod common_programs;

use common_programs::{
    program_timeout, tools_available, Net, Program, Running, Slot, LISTEN_LOG, LISTEN_MARKER, POLL,
};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How soon after the death the peer must have its DISCONNECTED (and have exited): far less
/// than an RC retry exhaustion with Linux's timers (7 × 0.5 s) or a CM timeout, far more than
/// a round trip, even on a loaded machine.
const PROMPT: Duration = Duration::from_secs(3);

/// How a test ends the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Death {
    /// A signal sent to the program itself.
    Program(nix::sys::signal::Signal),
    /// A signal sent to `rnic exec`, which passes it on.
    Supervisor(nix::sys::signal::Signal),
}

impl Death {
    fn signal(self) -> nix::sys::signal::Signal {
        match self {
            Death::Program(s) | Death::Supervisor(s) => s,
        }
    }

    fn deliver(self, victim: &Running) {
        let pid = match self {
            Death::Program(_) => victim
                .program_id()
                .unwrap_or_else(|| panic!("rnic exec {} has no child", victim.id())),
            Death::Supervisor(_) => victim.id(),
        };
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::kill(pid, self.signal())
            .unwrap_or_else(|e| panic!("kill {pid} {:?}: {e}", self.signal()));
    }
}

fn wait_for(what: &str, r: &mut Running, mut cond: impl FnMut(&mut Running) -> bool) {
    let deadline = Instant::now() + program_timeout();
    while !cond(r) {
        if let Some(s) = r.poll() {
            if !cond(r) {
                panic!(
                    "{what}: exited ({s}) first\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    r.stdout_text(),
                    r.stderr_text()
                );
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            program_timeout(),
            r.stdout_text(),
            r.stderr_text()
        );
        std::thread::sleep(POLL);
    }
}

/// Waits until `r` exits, at most `limit`; its exit status and how long it took.
fn exit_within(r: &mut Running, limit: Duration) -> Option<(ExitStatus, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(s) = r.poll() {
            return Some((s, start.elapsed()));
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

fn output(r: &Running) -> String {
    format!("{}{}", r.stdout_text(), r.stderr_text())
}

/// A listening rdma_cm server under `rnic exec` (`RUST_LOG` makes librnic log its listen).
fn start_server(p: &mut Program) -> Running {
    p.env.push(("RUST_LOG".into(), LISTEN_LOG.into()));
    let mut s = Running::spawn("server", p).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the server's rdma_listen", &mut s, |s| {
        s.stderr_text().contains(LISTEN_MARKER)
    });
    s
}

/// The status a process killed by `sig` has.
fn killed_by(s: ExitStatus) -> Option<i32> {
    s.signal()
}

fn rping_pair(n: u8, exec_args: &[&str]) -> (Program, Program) {
    let net = Net::new(n);
    let (ip, port) = (net.server_ip(), net.port_arg());
    let mut server = Program::new(&ip, &["rping", "-s", "-a", &ip, "-p", &port, "-v", "-d"]);
    let mut client = Program::new(
        &net.client_ip(),
        &[
            "rping", "-c", "-a", &ip, "-p", &port, "-v", "-d", "-C", "1000000",
        ],
    );
    for p in [&mut server, &mut client] {
        p.exec_args = exec_args.iter().map(|s| s.to_string()).collect();
    }
    (server, client)
}

/// rping server and client ping; `death` ends the server (or the client, `kill_client`); the
/// other side must get DISCONNECTED within [`PROMPT`] and exit, and the victim's `rnic exec`
/// must report the same death.
fn rping_death(name: &str, n: u8, death: Death, kill_client: bool) {
    if !tools_available(name, &["rping"]) {
        return;
    }
    let _slot = Slot::take();
    let (mut sp, cp) = rping_pair(n, &[]);
    let mut server = start_server(&mut sp);
    let mut client = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the client's first pings", &mut client, |c| {
        c.stdout_text().matches("ping data: ").count() >= 3
    });
    let (victim, peer, side) = if kill_client {
        (&mut client, &mut server, "server")
    } else {
        (&mut server, &mut client, "client")
    };
    death.deliver(victim);
    let peer_exit = exit_within(peer, PROMPT);
    let victim_exit = exit_within(victim, program_timeout());
    let (peer_out, victim_out) = (output(peer), output(victim));
    let report = format!(
        "{name}: peer ({side}) {peer_exit:?}, victim {victim_exit:?}\n--- peer ---\n{}\n--- victim ---\n{}",
        tail(&peer_out),
        tail(&victim_out)
    );
    assert!(
        peer_exit.is_some(),
        "the peer did not exit within {PROMPT:?}\n{report}"
    );
    assert!(
        peer_out.contains(&format!("{side} DISCONNECT EVENT")),
        "the peer got no DISCONNECTED\n{report}"
    );
    assert!(
        !peer_out.contains("cq completion failed status 12"),
        "the peer's RC retries ran out (RETRY_EXC_ERR) instead of a flush\n{report}"
    );
    let status = victim_exit.map(|(s, _)| s);
    assert_eq!(
        status.and_then(killed_by),
        Some(death.signal() as i32),
        "rnic exec's status is not the program's death\n{report}"
    );
}

fn tail(s: &str) -> &str {
    let mut i = s.len().saturating_sub(4000);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

use nix::sys::signal::Signal;

#[test]
fn rping_server_sigkill_is_a_disconnect() {
    rping_death(
        "rping_server_sigkill_is_a_disconnect",
        50,
        Death::Program(Signal::SIGKILL),
        false,
    );
}

#[test]
fn rping_server_sigsegv_is_a_disconnect() {
    rping_death(
        "rping_server_sigsegv_is_a_disconnect",
        51,
        Death::Program(Signal::SIGSEGV),
        false,
    );
}

#[test]
fn rping_server_sigterm_through_rnic_exec_is_a_disconnect() {
    rping_death(
        "rping_server_sigterm_through_rnic_exec_is_a_disconnect",
        52,
        Death::Supervisor(Signal::SIGTERM),
        false,
    );
}

#[test]
fn rping_server_sigint_through_rnic_exec_is_a_disconnect() {
    rping_death(
        "rping_server_sigint_through_rnic_exec_is_a_disconnect",
        53,
        Death::Supervisor(Signal::SIGINT),
        false,
    );
}

#[test]
fn rping_client_sigkill_is_a_disconnect() {
    rping_death(
        "rping_client_sigkill_is_a_disconnect",
        54,
        Death::Program(Signal::SIGKILL),
        true,
    );
}

/// `rdma_die.c`, compiled with `cc` against rdma-core's headers (once); `None` (after `SKIP`)
/// when they are missing and that is allowed (`RNIC_REQUIRE_RDMA_HEADERS`).
fn rdma_die(test: &str) -> Option<String> {
    let headers = [
        "/usr/include/rdma/rdma_cma.h",
        "/usr/include/infiniband/verbs.h",
    ];
    if let Some(h) = headers.iter().find(|h| !Path::new(h).exists()) {
        assert!(
            std::env::var("RNIC_REQUIRE_RDMA_HEADERS").as_deref() != Ok("1"),
            "RNIC_REQUIRE_RDMA_HEADERS=1 but {h} is missing"
        );
        println!("SKIP {test}: {h} missing (libibverbs-dev, librdmacm-dev)");
        return None;
    }
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/rdma_die.c");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec_death");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let bin = dir.join("rdma_die");
        let out = Command::new("cc")
            .args(["-O1", "-Wall"])
            .arg(&src)
            .arg("-o")
            .arg(&bin)
            .args(["-libverbs", "-lrdmacm"])
            .output()
            .unwrap_or_else(|e| panic!("cc (gcc is needed for these tests): {e}"));
        assert!(
            out.status.success(),
            "cc {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    });
    Some(bin.to_string_lossy().into_owned())
}

#[test]
fn a_normal_exit_while_connected_is_a_disconnect_and_keeps_its_code() {
    let name = "a_normal_exit_while_connected_is_a_disconnect_and_keeps_its_code";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let Some(bin) = rdma_die(name) else {
        return;
    };
    let _slot = Slot::take();
    let net = Net::new(55);
    let (ip, port) = (net.server_ip(), net.port_arg());
    let mut sp = Program::new(&ip, &["rping", "-s", "-a", &ip, "-p", &port, "-v", "-d"]);
    let mut server = start_server(&mut sp);
    let cp = Program::new(
        &net.client_ip(),
        &[bin.as_str(), "exit-connected", &ip, &port, "3"],
    );
    let mut client = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    let client_exit = exit_within(&mut client, program_timeout());
    let server_exit = exit_within(&mut server, PROMPT);
    let report = format!(
        "client {client_exit:?}: {}\nserver {server_exit:?}:\n{}",
        output(&client),
        tail(&output(&server))
    );
    assert!(client.stdout_text().contains("connected"), "{report}");
    assert_eq!(
        client_exit.and_then(|(s, _)| s.code()),
        Some(3),
        "rnic exec's exit code is not the program's\n{report}"
    );
    assert!(
        output(&server).contains("server DISCONNECT EVENT"),
        "the server got no DISCONNECTED\n{report}"
    );
    assert!(server_exit.is_some(), "the server did not exit\n{report}");
}

#[test]
fn power_loss_leaves_the_peer_waiting() {
    let name = "power_loss_leaves_the_peer_waiting";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let _slot = Slot::take();
    let (mut sp, cp) = rping_pair(56, &["--on-death", "power-loss"]);
    let mut server = start_server(&mut sp);
    let mut client = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the client's first pings", &mut client, |c| {
        c.stdout_text().matches("ping data: ").count() >= 3
    });
    Death::Program(Signal::SIGKILL).deliver(&server);
    let server_exit = exit_within(&mut server, program_timeout());
    // What `--on-death kernel` delivers within PROMPT must not come.
    let client_exit = exit_within(&mut client, PROMPT);
    let out = output(&client);
    let report = format!("client {client_exit:?}:\n{}", tail(&out));
    assert_eq!(
        server_exit.and_then(|(s, _)| killed_by(s)),
        Some(Signal::SIGKILL as i32)
    );
    assert!(
        !out.contains("DISCONNECT EVENT"),
        "the peer of a host that lost power got DISCONNECTED\n{report}"
    );
    assert!(
        client_exit.is_none(),
        "the peer of a host that lost power did not wait\n{report}"
    );
}

/// Bytes waiting in the receive queue of the UDP socket bound to `ip`:4791, per
/// `/proc/net/udp` (`local_address` `HEXIP:HEXPORT`, `tx_queue:rx_queue` in hex).
fn udp_rx_queue(ip: &str) -> u64 {
    let ip: std::net::Ipv4Addr = ip.parse().unwrap_or_else(|e| panic!("{ip}: {e}"));
    let want = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.get(1)?.eq_ignore_ascii_case(&want))
                .then(|| u64::from_str_radix(cols.get(4)?.split(':').nth(1)?, 16).ok())?
        })
        .sum()
}

/// The ucmatose server is stopped, a client's REQ reaches its socket, then the server is
/// SIGKILLed (the one signal a stopped process dies of at once); the client must report `want`
/// (its REQ answered, or not).
fn ucmatose_stopped_server_killed(name: &str, n: u8, on_death: &str, want: &str) {
    if !tools_available(name, &["ucmatose"]) {
        return;
    }
    let _slot = Slot::take();
    let net = Net::new(n);
    let (ip, port) = (net.server_ip(), net.port_arg());
    let mut sp = Program::new(&ip, &["ucmatose", "-b", &ip, "-p", &port]);
    sp.exec_args = vec!["--on-death".into(), on_death.into()];
    let mut server = start_server(&mut sp);
    let program = nix::unistd::Pid::from_raw(
        server
            .program_id()
            .unwrap_or_else(|| panic!("rnic exec {} has no child", server.id())) as i32,
    );
    nix::sys::signal::kill(program, Signal::SIGSTOP).unwrap_or_else(|e| panic!("SIGSTOP: {e}"));
    let mut cp = Program::new(
        &net.client_ip(),
        &["ucmatose", "-s", &ip, "-b", &net.client_ip(), "-p", &port],
    );
    if on_death == "power-loss" {
        // Unanswered, its REQ times out after 5 tries of 24 ms instead of 16 of 4 s.
        cp.exec_args = vec!["--fast-timers".into()];
    }
    let mut client = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + program_timeout();
    while udp_rx_queue(&ip) == 0 {
        assert!(
            Instant::now() < deadline && client.poll().is_none(),
            "{name}: no REQ reached the stopped server's socket\n{}",
            output(&client)
        );
        std::thread::sleep(POLL);
    }
    Death::Program(Signal::SIGKILL).deliver(&server);
    let server_exit = exit_within(&mut server, program_timeout());
    let client_exit = exit_within(&mut client, PROMPT);
    let out = output(&client);
    let report = format!(
        "{name}: client {client_exit:?}, server {server_exit:?}\n--- client ---\n{out}\n--- server ---\n{}",
        tail(&output(&server))
    );
    assert!(
        out.contains(want),
        "the client did not report {want}\n{report}"
    );
    assert_eq!(
        server_exit.and_then(|(s, _)| killed_by(s)),
        Some(Signal::SIGKILL as i32),
        "rnic exec's status is not the program's death\n{report}"
    );
}

#[test]
fn a_req_left_in_a_dead_servers_socket_is_rejected() {
    ucmatose_stopped_server_killed(
        "a_req_left_in_a_dead_servers_socket_is_rejected",
        57,
        "kernel",
        "event: RDMA_CM_EVENT_REJECTED, error: 8",
    );
}

#[test]
fn with_power_loss_the_req_goes_unanswered() {
    ucmatose_stopped_server_killed(
        "with_power_loss_the_req_goes_unanswered",
        58,
        "power-loss",
        "event: RDMA_CM_EVENT_UNREACHABLE, error: -110",
    );
}

/// `rdma_die hold-request` takes a ucmatose client's request and dies by `death` before
/// accepting it: the client must be rejected (REJ 28, as `cm_destroy_id` sends in REQ_RCVD).
fn held_request_death(name: &str, n: u8, death: Death) {
    if !tools_available(name, &["ucmatose"]) {
        return;
    }
    let Some(bin) = rdma_die(name) else {
        return;
    };
    let _slot = Slot::take();
    let net = Net::new(n);
    let (ip, port) = (net.server_ip(), net.port_arg());
    let mut sp = Program::new(&ip, &[bin.as_str(), "hold-request", &ip, &port]);
    let mut server = start_server(&mut sp);
    let cp = Program::new(
        &net.client_ip(),
        &["ucmatose", "-s", &ip, "-b", &net.client_ip(), "-p", &port],
    );
    let mut client = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the server's CONNECT_REQUEST", &mut server, |s| {
        s.stdout_text().contains("request")
    });
    death.deliver(&server);
    let server_exit = exit_within(&mut server, program_timeout());
    let client_exit = exit_within(&mut client, PROMPT);
    let out = output(&client);
    let report = format!(
        "{name}: client {client_exit:?}, server {server_exit:?}\n--- client ---\n{out}\n--- server ---\n{}",
        tail(&output(&server))
    );
    let want = "event: RDMA_CM_EVENT_REJECTED, error: 28";
    assert!(
        out.contains(want),
        "the client did not report {want}\n{report}"
    );
    assert_eq!(
        server_exit.and_then(|(s, _)| killed_by(s)),
        Some(death.signal() as i32),
        "rnic exec's status is not the program's death\n{report}"
    );
}

#[test]
fn a_held_request_is_rejected_on_sigkill() {
    held_request_death(
        "a_held_request_is_rejected_on_sigkill",
        59,
        Death::Program(Signal::SIGKILL),
    );
}

#[test]
fn a_held_request_is_rejected_on_sigsegv() {
    held_request_death(
        "a_held_request_is_rejected_on_sigsegv",
        60,
        Death::Program(Signal::SIGSEGV),
    );
}

#[test]
fn a_held_request_is_rejected_on_sigterm_through_rnic_exec() {
    held_request_death(
        "a_held_request_is_rejected_on_sigterm_through_rnic_exec",
        61,
        Death::Supervisor(Signal::SIGTERM),
    );
}

#[test]
fn a_held_request_is_rejected_on_sigint_through_rnic_exec() {
    held_request_death(
        "a_held_request_is_rejected_on_sigint_through_rnic_exec",
        63,
        Death::Supervisor(Signal::SIGINT),
    );
}

/// The exit status passes through, and an option misspelled before the program is refused by
/// the parser instead of being run as the program.
#[test]
fn exit_codes_signals_and_misspelled_options() {
    let rnic = env!("CARGO_BIN_EXE_rnic");
    let run = |args: &[&str]| {
        Command::new(rnic)
            .arg("exec")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{rnic}: {e}"))
    };
    assert_eq!(
        run(&["--addr", "127.0.62.1", "--", "sh", "-c", "exit 3"])
            .status
            .code(),
        Some(3)
    );
    assert_eq!(
        run(&["--addr", "127.0.62.1", "sh", "-c", "exit 4"])
            .status
            .code(),
        Some(4),
        "no `--`"
    );
    let s = run(&["--addr", "127.0.62.1", "--", "sh", "-c", "kill -TERM $$"]).status;
    assert_eq!(s.signal(), Some(Signal::SIGTERM as i32), "{s}");
    let misspelled = run(&["--adr", "127.0.62.1", "--", "true"]);
    assert_eq!(misspelled.status.code(), Some(2), "{misspelled:?}");
    let err = String::from_utf8_lossy(&misspelled.stderr);
    assert!(err.contains("--adr"), "{err}");
    let missing = run(&["--addr", "127.0.62.1", "--", "/nonexistent/program"]);
    assert_eq!(missing.status.code(), Some(127), "{missing:?}");
}

/// The RDMA program is a grandchild of `rnic exec` (a shell runs it, then more): it owns the
/// RNIC all the same, and when it is SIGKILLed its peer gets DISCONNECTED once the shell ends;
/// `rnic exec` exits with the shell's code.
#[test]
fn a_program_a_shell_started_owns_the_rnic() {
    let name = "a_program_a_shell_started_owns_the_rnic";
    if !tools_available(name, &["rping"]) {
        return;
    }
    let _slot = Slot::take();
    let net = Net::new(64);
    let (ip, port) = (net.server_ip(), net.port_arg());
    let script = format!("rping -s -a {ip} -p {port} -v -d; exit 7");
    let mut sp = Program::new(&ip, &["sh", "-c", script.as_str()]);
    let mut server = start_server(&mut sp);
    let (_, cp) = rping_pair(64, &[]);
    let mut client = Running::spawn("client", &cp).unwrap_or_else(|e| panic!("{e}"));
    wait_for("the client's first pings", &mut client, |c| {
        c.stdout_text().matches("ping data: ").count() >= 3
    });
    let shell = server
        .program_id()
        .unwrap_or_else(|| panic!("rnic exec {} has no child", server.id()));
    let rping = common_programs::descendants(shell);
    assert_eq!(rping.len(), 1, "the shell's children: {rping:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(rping[0] as i32), Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("kill: {e}"));
    let client_exit = exit_within(&mut client, PROMPT);
    let server_exit = exit_within(&mut server, program_timeout());
    let out = output(&client);
    let report = format!(
        "client {client_exit:?}, server {server_exit:?}\n--- client ---\n{}\n--- server ---\n{}",
        tail(&out),
        tail(&output(&server))
    );
    assert!(out.contains("client DISCONNECT EVENT"), "{report}");
    assert_eq!(server_exit.and_then(|(s, _)| s.code()), Some(7), "{report}");
}
