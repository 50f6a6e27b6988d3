//! `rnic -v ping`: the client's debug log reads as the story of its connection, in order;
//! without `-v` nothing is logged.

use super::*;

/// `rnic -v ping --connect …`: the lines of `log`, each holding every string of its step, found
/// in the order of `steps` (other lines may come between); panics naming the first step
/// missing.
#[track_caller]
fn assert_log_in_order(log: &str, steps: &[&[&str]]) {
    let mut lines = log.lines();
    for step in steps {
        if !lines.any(|l| step.iter().all(|s| l.contains(s))) {
            panic!("no line with {step:?} after the previous step's; the log:\n{log}");
        }
    }
}

/// A client's stderr for `rnic [-v] ping --connect ADDR --count 2 --fast-timers` against a
/// fresh server, `RUST_LOG` set to `rust_log` or removed: (client exit code, stderr).
fn client_log(verbose: bool, rust_log: Option<&str>) -> (i32, String) {
    let s = spawn_server(&[], "127.0.0.1:0", &["--fast-timers"]);
    let mut cmd = Command::new(RNIC);
    cmd.env_remove("RUST_LOG");
    if let Some(l) = rust_log {
        cmd.env("RUST_LOG", l);
    }
    if verbose {
        cmd.arg("-v");
    }
    let out = cmd
        .args(["ping", "--connect", &s.addr.to_string()])
        .args(["--count", "2", "--fast-timers"])
        .output()
        .unwrap();
    let (sc, sout) = s.finish();
    assert_eq!(sc, 0, "server: {sout}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 15 item 7: with `-v` a client's log on stderr reads as the story of its connection —
/// in order, inside the span of the connection (`conn{role=client peer=… id=…}`) and of the
/// rdma_cm id: the QP to INIT, the REQ sent, the REP received, the QP to RTR and RTS,
/// ESTABLISHED, then the client's disconnect (QP to ERR with its posted receives flushed, DREQ
/// sent), the DREP, TIMEWAIT and TIMEWAIT_EXIT. Without `-v` and `RUST_LOG` stderr carries no
/// log line; `RUST_LOG=cm_core=debug` logs the CM alone.
#[test]
fn verbose_client_log_tells_the_story_of_the_connection() {
    let (code, log) = client_log(true, None);
    assert_eq!(code, 0, "{log}");
    let conn = "conn{role=client peer=127.0.0.1:";
    assert_log_in_order(
        &log,
        &[
            &[conn, "QP state", "from=RESET", "state=INIT"],
            &[conn, "IB CM state", "from=IDLE", "state=REQ_SENT"],
            &[conn, "MAD sent", "attr=REQ", "remote_comm_id=0"],
            &["MAD received", "attr=REP"],
            // From REQ_SENT, or from MRA_REQ_RCVD if a busy server sent an MRA.
            &["IB CM state", "state=REP_RCVD"],
            &["rdma_cm event queued", "event=CONNECT_RESPONSE", "status=0"],
            &[conn, "QP state", "from=INIT", "state=RTR"],
            &[conn, "QP state", "from=RTR", "state=RTS"],
            &[conn, "IB CM state", "from=REP_RCVD", "state=ESTABLISHED"],
            &[conn, "MAD sent", "attr=RTU"],
            &[conn, "rdma_get_cm_event", "event=ESTABLISHED", "status=0"],
            &[conn, "QP state", "from=RTS", "state=ERR", "flushed_recv=4"],
            &[conn, "IB CM state", "from=ESTABLISHED", "state=DREQ_SENT"],
            &[conn, "MAD sent", "attr=DREQ"],
            &["MAD received", "attr=DREP"],
            &["IB CM state", "from=DREQ_SENT", "state=TIMEWAIT"],
            &[conn, "rdma_get_cm_event", "event=DISCONNECTED", "status=0"],
            &["IB CM state", "from=TIMEWAIT", "state=IDLE"],
            &[conn, "rdma_get_cm_event", "event=TIMEWAIT_EXIT", "status=0"],
        ],
    );
    // The received MADs are handled on the UDP driver's thread, in its span.
    assert_log_in_order(&log, &[&["udp{local=", "MAD received", "attr=REP"]]);

    let (code, quiet) = client_log(false, None);
    assert_eq!(code, 0);
    for level in ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"] {
        assert!(!quiet.contains(level), "{quiet}");
    }

    let (code, cm_only) = client_log(false, Some("cm_core=debug"));
    assert_eq!(code, 0, "{cm_only}");
    assert!(cm_only.contains("state=ESTABLISHED"), "{cm_only}");
    assert!(!cm_only.contains("rnic_sim"), "{cm_only}");
}
