//! The C API's semantics, from C: small programs under `tests/c/`, compiled with `cc` against
//! rdma-core's installed headers and run with `LD_PRELOAD=librnic.so`, check what real programs
//! (perftest, rping, ucmatose, qperf in `cli/tests/capi_programs.rs`) rely on without pinning
//! down — return conventions, file-descriptor channels, flushes, memory, teardown order — each
//! against what rdma-core and Linux do (the C sources cite the lines).
//!
//! * `verbs_basics.c`: one device `rnic0` (or `RNIC_DEVICE`); port 1 ACTIVE, Ethernet; GID 0
//!   is the IPv4-mapped `RNIC_ADDR`, GID 5 is -1/EINVAL; `ibv_dealloc_pd` of a PD with an MR
//!   is EBUSY; unknown access bits are EINVAL, RELAXED_ORDERING is accepted; RESET→RTS is
//!   EINVAL; `ibv_post_send` on a RESET QP is EINVAL with `*bad_wr` the first WR.
//! * `comp_channel.c`: an O_NONBLOCK completion channel gives EAGAIN, `poll()` sees the event
//!   of an armed CQ (SEND between two loopback RC QPs of one device), `ibv_get_cq_event`
//!   returns the CQ and its `cq_context`, one event per arm; destroying a channel a CQ uses is
//!   EBUSY.
//! * `flush.c`: to ERR, N posted receives complete with FLUSH_ERR in post order, no more; a
//!   SEND or RECV posted in ERR is flushed too (rxe).
//! * `user_memory.c`: an RDMA WRITE lands in the peer's malloc'd buffer, exactly on its range;
//!   an RDMA READ returns what the application stored after registration; out of range is
//!   REM_ACCESS_ERR.
//! * `async_event.c`: `ctx->async_fd` is not readable before any event; overrunning a CQ of one
//!   entry (two signaled WRITEs) makes it readable; `ibv_get_async_event` returns
//!   `IBV_EVENT_COMM_EST` on the receiving QP (in RTS), `IBV_EVENT_CQ_ERR` with `element.cq` that
//!   CQ, `IBV_EVENT_QP_FATAL` with `element.qp` the overrunning QP; then, O_NONBLOCK, -1/EAGAIN and not
//!   readable; a WRITE to a QP in RTR gives `IBV_EVENT_COMM_EST` with `element.qp` that QP; the
//!   event of a QP destroyed before it is read is skipped (EAGAIN, not readable); an RDMA WRITE
//!   with a bad rkey gives `IBV_EVENT_QP_ACCESS_ERR` on the responder's QP, which is in ERR.
//! * `srq.c`: `ibv_create_srq` writes the granted sizes back; `ibv_post_recv` on a QP with an
//!   SRQ is EINVAL; SENDs on two QPs sharing the SRQ take its receives oldest first, each
//!   completion naming its QP; `srq_limit` above `max_wr` is EINVAL; the armed limit raises
//!   `IBV_EVENT_SRQ_LIMIT_REACHED` (`element.srq`) and reads 0 after; a receiving QP to ERR
//!   raises `IBV_EVENT_QP_LAST_WQE_REACHED` (`element.qp`) and flushes nothing of the SRQ;
//!   `ibv_destroy_srq` is EBUSY while a QP uses it.
//! * `device_removal.c` (`RNIC_REMOVE_DEVICE_MS=300`): a listener and an id with a QP get
//!   `RDMA_CM_EVENT_DEVICE_REMOVAL` (status 0); the context gets `IBV_EVENT_DEVICE_FATAL`; the
//!   posted receive is flushed; then `rdma_listen` is ENXIO and `ibv_post_recv` EIO;
//!   `rdma_destroy_id` works.
//! * `cm_channel.c`: an O_NONBLOCK event channel gives EAGAIN; `rdma_resolve_addr` makes the
//!   fd readable with ADDR_RESOLVED (status 0); `rdma_destroy_id` blocks until another thread
//!   acks the id's event; a NULL channel makes a synchronous id with a private channel.
//! * `cm_listen_unbound.c`: `rdma_listen` on an unbound id binds it to INADDR_ANY and a free
//!   port, as Linux does.
//! * `cm_id_event_field.c`: `id->event` of an id with a channel stays NULL, as librdmacm sets
//!   it only for synchronous ids.
//! * `cm_teardown.c` (two processes, fork before the first RDMA call): the client's
//!   `rdma_disconnect` puts its QP in ERR; the server gets DISCONNECTED with its QP still RTS,
//!   its own `rdma_disconnect` flushes its 4 receives; the client gets DISCONNECTED; both get
//!   TIMEWAIT_EXIT (status 0), as librdmacm passes it through.
//! * `hostile_memory.c` (issue 25): `ibv_reg_mr` of a PROT_READ mapping with a writable access,
//!   of a PROT_NONE mapping, of unmapped memory or a range running into a hole is NULL/EFAULT
//!   (a read-only registration of PROT_READ memory succeeds); an RDMA WRITE or READ aimed at a
//!   region the program unmapped (or made read-only) after registering it completes with
//!   REM_ACCESS_ERR and the process lives on; `num_sge` = 2^30 is EINVAL for `ibv_post_send`
//!   and `ibv_post_recv` with `*bad_wr` the WR (the list is not read), inline data past
//!   `max_inline_data` is EINVAL, and a cyclic receive list fills the queue, then ENOMEM.
//! * `fork_exit.c` (two processes): the client forks a child once connected; in the child
//!   `ibv_alloc_pd` fails with ENODEV, and its `exit()` sends nothing: the server sees no event
//!   for 500 ms, its QP stays RTS, and the client's next SEND arrives.
//! * `cm_sync.c` (two processes): synchronous ids. `rdma_resolve_addr`/`rdma_resolve_route`
//!   return once resolved with `id->event` ADDR_RESOLVED/ROUTE_RESOLVED; `rdma_connect` to a
//!   port nobody listens on is -1/ECONNREFUSED with `id->event` REJECTED; `rdma_get_request`
//!   returns a new synchronous id (its own channel, the listener's context, `id->event` the
//!   CONNECT_REQUEST); `rdma_accept`/`rdma_connect` return with ESTABLISHED and the QP in RTS;
//!   `rdma_disconnect` returns with DISCONNECTED; `rdma_get_request` on a listener with a
//!   channel is EINVAL; `rdma_migrate_id` to a channel drops `id->event`, to NULL gives a new
//!   private channel, and to NULL again is EINVAL.
//! * `verbs_ex.c`: the extended verbs. The context is a `struct verbs_context`
//!   (`verbs_get_ctx`, `sz`, the slots); `ibv_query_device_ex` (its `orig_attr` is
//!   `ibv_query_device`'s; input `comp_mask` 1 is EINVAL); the extended `ibv_query_port`;
//!   `ibv_create_cq_ex` (timestamps EOPNOTSUPP, readers as asked) and `ibv_create_qp_ex`
//!   (LOCAL_INV EOPNOTSUPP, builders as asked, `ibv_qp_to_qp_ex` NULL for a plain QP); between
//!   two loopback QPs, `ibv_wr_send` + `ibv_wr_set_sge` and `ibv_wr_send_imm` +
//!   `ibv_wr_set_inline_data` polled with `ibv_start_poll`/`ibv_next_poll` (wr_id, opcode,
//!   byte_len, imm, qp_num), `ibv_wr_rdma_write` with an SGE list and `ibv_wr_rdma_read`,
//!   inline data past `max_inline_data` (ENOSPC, nothing posted), `ibv_wr_abort`, an inline
//!   list; `ibv_poll_cq` on `ibv_cq_ex_to_cq`; libefa's `efadv_query_device` is EOPNOTSUPP and
//!   libmlx5's `mlx5dv_is_supported` false (both read `verbs_device`/`verbs_context`).
//! * `cm_details.c` (one process, a listener and a client): `rdma_getaddrinfo` with no node,
//!   service or hints is EINVAL, with hints only gives their flags, types and addresses, copies
//!   a source address of the hints beside a resolved destination, and returns `EAI_NONAME` for
//!   a numeric lookup of a name; `rdma_bind_addr` to a loopback address that is not the RNIC's
//!   binds to the device; a bound id has `id->pd`; `rdma_create_qp` writes back rxe's send
//!   limits (16 inline bytes for one SGE); `RDMA_MAX_RESP_RES`/`RDMA_MAX_INIT_DEPTH` in
//!   `rdma_connect`/`rdma_accept` are the device's maxima in the request; a 16-byte inline
//!   SEND; UC and XRC QPs are EOPNOTSUPP; the disconnect of both sides.
//! * `ud_multicast.c`: UD ids, SIDR and multicast in one process — a UD id's QP is in RTS with
//!   `RDMA_UDP_QKEY`; `rdma_connect` is SIDR: CONNECT_REQUEST with 180 bytes of private data in
//!   `param.ud`, `rdma_accept` returns at once, ESTABLISHED carries the passive QPN, the Q_Key
//!   and an address vector; a datagram through it arrives with a GRH and
//!   `ibv_create_ah_from_wc` answers it; `rdma_reject` is UNREACHABLE status 2;
//!   `rdma_join_multicast` on an unbound id is EINVAL, `rdma_join_multicast_ex` checks its
//!   attributes (EINVAL, ENOTSUP); MULTICAST_JOIN has QPN 0xFFFFFF, the Q_Key, the group's GID
//!   and the join's context; a send to the group comes back to the attached sending QP, and
//!   `ibv_create_ah_from_wc` refuses it (EINVAL); `ibv_attach_mcast` refuses a unicast GID and
//!   an RC QP, `ibv_detach_mcast` a group not attached; a second `rdma_leave_multicast` is
//!   EADDRNOTAVAIL.
//! * `rsocket.c` (two processes): rsockets (`<rdma/rsocket.h>`), as rsocket.c behaves: the
//!   number is an open descriptor, other numbers are EBADF (and `rclose` leaves them open);
//!   `SOCK_DGRAM` is ENOTSUP; ENOTCONN, EAGAIN (non-blocking recv and accept), EINVAL
//!   (`SOL_RDMA` after connecting); `rconnect` to no listener is ECONNREFUSED, non-blocking
//!   EINPROGRESS then POLLOUT|POLLERR and `SO_ERROR`; `MSG_PEEK`, `MSG_WAITALL`; `rpoll` and
//!   `rselect` over a pipe and an rsocket; `riowrite` lands before the data sent after it;
//!   `rshutdown(SHUT_WR)` is end-of-file for the peer, which still sends back; the peer's
//!   `rclose` gives POLLHUP, end-of-file and ECONNRESET.
//! * `verbs_misc.c`: the calls exported for completeness (docs/capi.md, "Exports"): rate
//!   conversions, `ibv_get_pkey_index`, `ibv_query_gid_ex`/`ibv_query_gid_table`,
//!   `ibv_is_fork_initialized`, `ibv_copy_ah_attr_from_kern` as rdma-core computes them;
//!   `ibv_import_pd`, `ibv_rereg_mr`, `rdma_set_local_ece` as clean errors (EOPNOTSUPP, after
//!   the libraries' own EINVAL checks); `rdma_get_remote_ece` reads no ECE.
//!
//! Each program prints `OK <check>` lines and exits 0, or prints `FAIL <check>: …` and exits 1;
//! a test asserts the exit status and the exact set of `OK` lines, kills the program after
//! 30 s, and shows both outputs on failure. Each test has its own RNIC address 127.0.N.1
//! (N in 32..59, 70.., 92 for `ud_multicast.c`, 111 for `rsocket.c`, 120 for `verbs_misc.c`; the forked client takes 127.0.N.2), so they run in parallel.
//!
//! Run:
//!
//!     cargo test -p rnic-capi --test c_semantics
//!     cargo test -p rnic-capi --test c_semantics flush -- --nocapture   # one, with timings
//!
//! The compiled programs stay in `target/tmp/c_semantics/`; rerun one by hand with the
//! command a failure prints (`LD_PRELOAD=… RNIC_ADDR=… PROGRAM`).
//!
//! Environment:
//! * `RNIC_REQUIRE_RDMA_HEADERS=1` (CI): missing `libibverbs-dev`/`librdmacm-dev` headers fail
//!   the tests instead of printing `SKIP`;
//! * `RNIC_LIB`: the `librnic.so` to preload, instead of the one cargo built beside this test
//!   (`target/<profile>/deps/librnic.so` or `target/<profile>/librnic.so`);
//! * `RNIC_DEVICE`, `RUST_LOG`: passed through to the programs (the device name check follows
//!   `RNIC_DEVICE`); `RNIC_DROP_RATE`, `RNIC_PORT` and `RNIC_FAST_TIMERS` are not (the tests
//!   set what they need).

// A driver of real processes: the wall clock for the deadline, threads to drain their pipes.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The headers the programs include, by package: their absence means "not installed".
const HEADERS: [(&str, &str); 2] = [
    ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
    ("/usr/include/rdma/rdma_cma.h", "librdmacm-dev"),
];

/// A program still running after this is killed (with its forked child) and the test fails.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Variables of the caller's environment that would change what the programs check.
const CLEARED_ENV: [&str; 4] = [
    "RNIC_ADDR",
    "RNIC_DROP_RATE",
    "RNIC_PORT",
    "RNIC_FAST_TIMERS",
];

fn headers_missing() -> Option<String> {
    let missing: Vec<String> = HEADERS
        .iter()
        .filter(|(header, _)| !Path::new(header).exists())
        .map(|(header, package)| format!("{header} ({package})"))
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// False (after printing `SKIP`) when the headers are missing and that is allowed.
fn can_run(test: &str) -> bool {
    let Some(missing) = headers_missing() else {
        return true;
    };
    assert!(
        std::env::var("RNIC_REQUIRE_RDMA_HEADERS").as_deref() != Ok("1"),
        "RNIC_REQUIRE_RDMA_HEADERS=1 but the rdma-core headers are missing: {missing}"
    );
    println!("SKIP {test}: libibverbs-dev/librdmacm-dev not installed (missing {missing})");
    false
}

/// `librnic.so`: `RNIC_LIB`, else the cdylib cargo built with this test.
fn librnic() -> PathBuf {
    if let Some(lib) = std::env::var_os("RNIC_LIB") {
        return PathBuf::from(lib);
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    // target/<profile>/deps/c_semantics-HASH → target/<profile>/deps, target/<profile>
    let deps = exe
        .parent()
        .unwrap_or_else(|| panic!("{} has no parent directory", exe.display()));
    let candidates: Vec<PathBuf> = [Some(deps), deps.parent()]
        .into_iter()
        .flatten()
        .map(|dir| dir.join("librnic.so"))
        .collect();
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "librnic.so not found (looked at {}); build it with `cargo build -p rnic-capi` \
                 or set RNIC_LIB",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// Compiles `tests/c/<name>.c` into the test's scratch directory; returns the executable.
fn compile(name: &str) -> PathBuf {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let source = src_dir.join(format!("{name}.c"));
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_semantics");
    std::fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("create {}: {e}", out_dir.display()));
    let binary = out_dir.join(name);
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-I"])
        .arg(&src_dir)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .args(["-libverbs", "-lrdmacm", "-lpthread"])
        .output()
        .unwrap_or_else(|e| panic!("run cc (gcc is needed for the C semantics tests): {e}"));
    assert!(
        cc.status.success(),
        "cc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    binary
}

/// What a program did.
struct Outcome {
    command: String,
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Outcome {
    /// Both outputs and how it ended, for a failure message.
    fn report(&self) -> String {
        let ended = match self.status {
            Some(s) => format!("{s}"),
            None => format!("killed after {TIMEOUT:?} (timeout)"),
        };
        format!(
            "{}\n  ended: {ended} after {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.command, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Reads a pipe to the end on a thread of its own.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let mut bytes = Vec::new();
            let _ = p.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

/// Runs `binary` on RNIC address 127.0.`net`.1 with `env`, in a process group of its own
/// (killed whole at the deadline, forked client included).
fn run(binary: &Path, net: u8, env: &[(&str, &str)]) -> Outcome {
    use std::os::unix::process::CommandExt;

    let lib = librnic();
    let addr = format!("127.0.{net}.1");
    let mut cmd = Command::new(binary);
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("LD_PRELOAD", &lib).env("RNIC_ADDR", &addr);
    let mut shown = format!("LD_PRELOAD={} RNIC_ADDR={addr}", lib.display());
    for (k, v) in env {
        cmd.env(k, v);
        shown.push_str(&format!(" {k}={v}"));
    }
    let command = format!("{shown} {}", binary.display());
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);

    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command}: {e}"));
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() >= TIMEOUT => {
                // The whole group: a forked client would keep the pipes open.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("wait for {command}: {e}"),
        }
    };
    let elapsed = start.elapsed();
    Outcome {
        command,
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed,
    }
}

/// Compiles and runs `tests/c/<name>.c` on network `net` and requires exit status 0, no `FAIL`
/// line and exactly the `OK` lines `expected`.
fn check(name: &str, net: u8, env: &[(&str, &str)], expected: &[&str]) {
    if !can_run(name) {
        return;
    }
    let binary = compile(name);
    let outcome = run(&binary, net, env);
    let report = outcome.report();
    let fails: Vec<&str> = outcome
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .collect();
    assert!(fails.is_empty(), "{name}: {}\n{report}", fails.join("\n  "));
    assert!(
        outcome.status.is_some_and(|s| s.success()),
        "{name} did not exit with status 0\n{report}"
    );
    let got: BTreeSet<&str> = outcome
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("OK "))
        .collect();
    let want: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(
        got, want,
        "{name}: the OK lines differ from the expected checks\n{report}"
    );
    println!("{name}: {} checks OK in {:?}", want.len(), outcome.elapsed);
}

#[test]
fn verbs_device_and_error_returns() {
    check(
        "verbs_basics",
        40,
        &[],
        &[
            "device_list",
            "query_port",
            "query_gid",
            "query_gid_bad_index",
            "dealloc_pd_busy",
            "reg_mr_unknown_access_bit",
            "reg_mr_relaxed_ordering",
            "reg_mr_remote_write_needs_local_write",
            "modify_qp_reset_to_rts",
            "post_send_in_reset",
            "teardown",
        ],
    );
}

#[test]
fn completion_channel_fd() {
    check(
        "comp_channel",
        41,
        &[],
        &[
            "get_cq_event_nonblocking_eagain",
            "fd_not_readable_before_event",
            "fd_readable_after_completion",
            "get_cq_event_returns_cq_and_context",
            "one_event_per_arm",
            "destroy_channel_in_use_ebusy",
            "teardown",
        ],
    );
}

#[test]
fn flush_on_err() {
    check(
        "flush",
        42,
        &[],
        &[
            "recvs_flushed_in_order",
            "send_after_err_flushed",
            "recv_after_err_flushed",
            "teardown",
        ],
    );
}

#[test]
fn rdma_on_user_memory() {
    check(
        "user_memory",
        43,
        &[],
        &[
            "rdma_write_lands_in_user_buffer",
            "rdma_read_sees_application_stores",
            "rdma_write_outside_region_fails",
            "teardown",
        ],
    );
}

#[test]
fn cm_event_channel_and_destroy() {
    check(
        "cm_channel",
        44,
        &[],
        &[
            "get_cm_event_nonblocking_eagain",
            "create_id_null_channel_sync",
            "resolve_addr_event_through_poll",
            "destroy_id_waits_for_ack",
            "teardown",
        ],
    );
}

#[test]
fn cm_listen_on_unbound_id() {
    check(
        "cm_listen_unbound",
        45,
        &[],
        &["listen_unbound_binds_any", "teardown"],
    );
}

#[test]
fn cm_id_event_field_of_async_id() {
    check(
        "cm_id_event_field",
        47,
        &[],
        &[
            "event_field_null_while_unacked",
            "event_field_null_after_ack",
            "teardown",
        ],
    );
}

#[test]
fn cm_teardown_two_processes() {
    check(
        "cm_teardown",
        46,
        &[("RNIC_FAST_TIMERS", "1")],
        &[
            "server_listen",
            "server_accept",
            "client_connect",
            "server_recvs_posted",
            "client_disconnect_moves_qp_to_err",
            "server_disconnected_event",
            "server_qp_still_rts_after_disconnected",
            "server_disconnect_flushes_recvs",
            "client_disconnected_event",
            "server_timewait_exit",
            "client_timewait_exit",
            "server_teardown",
            "client_teardown",
            "client_exit_status",
        ],
    );
}

#[test]
fn async_events_through_async_fd() {
    check(
        "async_event",
        48,
        &[],
        &[
            "fd_not_readable_before_event",
            "cq_overrun_makes_fd_readable",
            "get_async_event_comm_est_rts",
            "get_async_event_cq_err",
            "get_async_event_qp_fatal_after_cq_err",
            "nonblocking_eagain_when_drained",
            "get_async_event_comm_est_qp",
            "event_of_destroyed_qp_skipped",
            "get_async_event_qp_access_err_on_responder",
            "teardown",
        ],
    );
}

#[test]
fn shared_receive_queues() {
    check(
        "srq",
        49,
        &[],
        &[
            "create_srq",
            "post_recv_on_srq_qp_einval",
            "sends_consume_srq_in_order",
            "srq_limit_above_max_wr_einval",
            "srq_limit_reached_event",
            "err_qp_last_wqe_reached_srq_kept",
            "destroy_srq_busy",
            "teardown",
        ],
    );
}

#[test]
fn device_removal_reaches_ids_and_context() {
    check(
        "device_removal",
        57,
        &[("RNIC_REMOVE_DEVICE_MS", "300")],
        &[
            "device_removal_event_on_every_id",
            "device_fatal_async_event",
            "posted_receive_flushed",
            "calls_after_removal_fail",
            "destroy_id_works",
        ],
    );
}

#[test]
fn cm_synchronous_ids_two_processes() {
    check(
        "cm_sync",
        50,
        &[("RNIC_FAST_TIMERS", "1")],
        &[
            "server_listen",
            "server_get_request",
            "server_accept_blocks_until_established",
            "server_recv",
            "server_disconnect_blocks_until_disconnected",
            "server_get_request_on_async_listener_einval",
            "server_migrate_to_channel",
            "server_migrate_to_null",
            "server_teardown",
            "client_resolve_blocks_until_resolved",
            "client_connect_to_no_listener_econnrefused",
            "client_connect_blocks_until_established",
            "client_send",
            "client_disconnect_blocks_until_disconnected",
            "client_teardown",
            "client_exit_status",
        ],
    );
}

#[test]
fn cm_id_srq_and_notify() {
    check(
        "cm_srq",
        58,
        &[],
        &[
            "create_srq_on_id",
            "create_qp_uses_id_srq",
            "post_recv_on_srq_qp_einval",
            "notify_other_event_einval",
            "destroy_srq_clears_id_srq",
            "destroy_ep_destroys_srq",
            "teardown",
        ],
    );
}

#[test]
fn extended_verbs() {
    check(
        "verbs_ex",
        70,
        &[],
        &[
            "verbs_context",
            "query_device_ex",
            "query_port_extended",
            "create_cq_ex_unsupported_flags",
            "create_qp_ex_unsupported_ops",
            "qp_to_qp_ex",
            "wr_send_and_poll_ex",
            "wr_rdma_write_sge_list_and_read",
            "wr_inline_too_long_enospc",
            "wr_abort_posts_nothing",
            "poll_cq_on_cq_ex",
            "provider_probes",
            "teardown",
        ],
    );
}

#[test]
fn hostile_memory_and_post_arguments() {
    check(
        "hostile_memory",
        32,
        &[],
        &[
            "reg_mr_remote_write_on_prot_read_is_efault",
            "reg_mr_read_only_on_prot_read_succeeds",
            "reg_mr_on_prot_none_is_efault",
            "reg_mr_on_unmapped_memory_is_efault",
            "remote_write_into_memory_unmapped_after_registration_is_rem_access_err",
            "remote_read_of_memory_unmapped_after_registration_is_rem_access_err",
            "remote_write_into_memory_made_read_only_is_rem_access_err",
            "post_send_num_sge_2_30_is_einval_unread",
            "post_recv_num_sge_2_30_is_einval_unread",
            "inline_longer_than_max_inline_is_einval",
            "a_cyclic_recv_list_fills_the_queue_then_enomem",
            "alive_after_all",
        ],
    );
}

#[test]
fn rsockets_two_processes() {
    check(
        "rsocket",
        111,
        &[("RNIC_FAST_TIMERS", "1")],
        &[
            "server_dgram_enotsup",
            "server_number_is_an_open_descriptor",
            "server_not_an_rsocket_ebadf",
            "server_recv_unconnected_enotconn",
            "server_rcvbuf_doubled",
            "server_getsockname_bound",
            "server_accept_nonblocking_eagain",
            "server_listener_pollin",
            "server_accept_peer_addr",
            "server_rdma_option_after_connect_einval",
            "server_recv_nonblocking_eagain",
            "server_peek_then_read",
            "server_waitall",
            "server_rpoll_mixed",
            "server_rselect_mixed",
            "server_riowrite_before_later_data",
            "server_riounmap",
            "server_half_close_eof",
            "server_peer_close_hup",
            "server_closed_number_ebadf",
            "client_connect_refused",
            "client_connect_nonblocking_refused",
            "client_connect",
            "client_riowrite",
            "client_half_close_still_receives",
            "client_exit_status",
        ],
    );
}

#[test]
fn a_forked_childs_exit_disconnects_nothing() {
    check(
        "fork_exit",
        33,
        &[("RNIC_FAST_TIMERS", "1")],
        &[
            "server_accept",
            "client_connect",
            "client_a_forked_child_may_not_use_the_library_and_exits_quietly",
            "server_nothing_when_the_clients_child_exits",
            "server_the_connection_still_carries_a_send",
            "client_send_after_the_childs_exit",
            "client_disconnect",
            "server_disconnected_by_the_client",
            "client_exit_status",
        ],
    );
}

#[test]
fn librdmacm_details() {
    check(
        "cm_details",
        71,
        &[],
        &[
            "getaddrinfo_all_null_einval",
            "getaddrinfo_hints_only",
            "getaddrinfo_node_with_source_hint",
            "getaddrinfo_failure_is_eai_code",
            "bind_loopback_binds_the_device",
            "bound_id_has_pd",
            "create_qp_rounds_inline_as_rxe",
            "max_resources_mean_the_device_maxima",
            "inline_send_of_16_bytes",
            "uc_and_xrc_qps_eopnotsupp",
            "teardown",
        ],
    );
}

#[test]
fn verbs_and_cm_calls_exported_for_completeness() {
    check(
        "verbs_misc",
        120,
        &[],
        &[
            "rate_conversions",
            "pkey_index",
            "query_gid_ex_and_table",
            "fork_unneeded",
            "copy_ah_attr_from_kern",
            "unsupported_verbs",
            "ece",
        ],
    );
}

#[test]
fn ud_sidr_and_multicast() {
    check(
        "ud_multicast",
        92,
        &[],
        &[
            "ud_qp_in_rts_with_rdma_udp_qkey",
            "sidr_connect_request_and_established_with_ud_params",
            "datagram_and_reply_through_ah_from_wc",
            "reject_is_unreachable_status_2",
            "join_checks",
            "multicast_join_event",
            "group_send_loops_back_to_the_attached_sender",
            "attach_detach_checks",
            "leave",
            "teardown",
        ],
    );
}
