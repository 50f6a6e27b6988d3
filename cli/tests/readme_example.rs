//! The README's one-process example, `docs/examples/self_connect.c`, compiled with `cc` and run
//! under `rnic exec` as the README says: a listener and a client in one process, one SEND, a
//! disconnect with a receive posted; asserts the events and completions it prints.

use std::path::Path;
use std::process::{Command, Stdio};

const RNIC: &str = env!("CARGO_BIN_EXE_rnic");

/// The lines the example prints, in order, with the ephemeral port left out.
const EXPECTED: &[&str] = &[
    "server: listening on 127.0.98.9:",
    "client: RDMA_CM_EVENT_ADDR_RESOLVED (status 0)",
    "client: RDMA_CM_EVENT_ROUTE_RESOLVED (status 0)",
    "server: RDMA_CM_EVENT_CONNECT_REQUEST (status 0)",
    "client: RDMA_CM_EVENT_ESTABLISHED (status 0)",
    "server: RDMA_CM_EVENT_ESTABLISHED (status 0)",
    "client: completion wr_id 1: success (0)",
    "server: completion wr_id 1: success (0)",
    "server: received \"hello from the client\"",
    "client: rdma_disconnect",
    "server: RDMA_CM_EVENT_DISCONNECTED (status 0)",
    "server: rdma_disconnect",
    "server: completion wr_id 2: Work Request Flushed Error (5)",
    "client: RDMA_CM_EVENT_DISCONNECTED (status 0)",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT (status 0)",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT (status 0)",
    "OK",
];

#[test]
fn one_process_connects_to_itself_and_disconnects_as_the_readme_shows() {
    let headers = [
        "/usr/include/rdma/rdma_cma.h",
        "/usr/include/infiniband/verbs.h",
    ];
    if let Some(h) = headers.iter().find(|h| !Path::new(h).exists()) {
        assert!(
            std::env::var("RNIC_REQUIRE_RDMA_HEADERS").as_deref() != Ok("1"),
            "RNIC_REQUIRE_RDMA_HEADERS=1 but {h} is missing"
        );
        println!("SKIP: {h} missing (libibverbs-dev, librdmacm-dev)");
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/self_connect.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme_example");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let bin = dir.join("self_connect");
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .unwrap_or_else(|e| panic!("cc (gcc is needed for this test): {e}"));
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );

    // Under timeout(1): a hang fails the test instead of holding the suite.
    let out = Command::new("timeout")
        .args(["60", RNIC, "exec", "--addr", "127.0.98.9", "--"])
        .arg(&bin)
        .arg("127.0.98.9")
        // Also: librnic's log and counters on a stderr that is no terminal.
        .env("RUST_LOG", "debug")
        .env("RNIC_STATS", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("timeout {RNIC}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        out.status.success() && lines.len() == EXPECTED.len(),
        "status {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for (got, want) in lines.iter().zip(EXPECTED) {
        assert!(
            got.starts_with(want) || got.ends_with(want),
            "line {got:?}, expected {want:?}\nstdout:\n{stdout}"
        );
    }
    // Plain text on a stderr that is a pipe: log lines without ANSI colours, and the
    // counters as a table (RNIC_STATS=1), not Rust structs.
    assert!(stderr.contains("DEBUG"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "ANSI escapes in:\n{stderr}");
    let table = stderr
        .find("librnic 127.0.98.9:4791 at ")
        .map(|at| &stderr[at..])
        .unwrap_or_else(|| panic!("no counters in:\n{stderr}"));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[1], ["group", "counter", "value"], "{table}");
    // The connection's MADs: the CM group's first line.
    assert!(rows.iter().any(|r| r.first() == Some(&"cm")), "{table}");
    assert!(!table.contains(" { "), "{table}");
}
