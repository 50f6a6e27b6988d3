//! `rnic bench` as users run it, with tiny sizes so that a run takes seconds: the shape of
//! its ratio table and of its `--json` report, every figure a positive number, exit code 0.
//! Never how fast anything was (docs/performance.md has the figures).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use serde_json::Value;
use std::process::{Command, Output};

const RNIC: &str = env!("CARGO_BIN_EXE_rnic");

/// `rnic bench --rounds 1` with every size tiny, plus `args`.
fn bench(args: &[&str]) -> Output {
    Command::new(RNIC)
        .args(["bench", "--rounds", "1"])
        .args([
            "--write-count",
            "20",
            "--big-count",
            "2",
            "--rtt-count",
            "200",
        ])
        .args([
            "--cm-cycles",
            "20",
            "--inproc-writes",
            "200",
            "--explore-seeds",
            "20",
        ])
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The number at the start of a figure cell (`12.3 MB/s`), which must be positive.
#[track_caller]
fn positive(cell: &str, table: &str) -> f64 {
    let n: f64 = cell
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("not a figure: {cell:?} in\n{table}"));
    assert!(n > 0.0 && n.is_finite(), "{cell:?} in\n{table}");
    n
}

#[test]
fn bench_prints_a_ratio_table_with_positive_figures() {
    // All but `write-1m`: 1 MiB WRITEs with Linux's timers may wait out retransmission
    // timeouts (≈ 0.5 s each) or the ping's 10 s timeout — not a quick test.
    let out = bench(&["--only", "write-stream,send-rtt,cm,inproc,explore"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // Progress went to stderr, a line per measure and round.
    assert!(stderr.contains("round 1/1: explore:"), "{stderr}");
    // A build with debug assertions (this test's profile unless --release) says, once, that
    // its figures are not to be trusted.
    assert_eq!(
        stderr.matches("is a debug build").count(),
        usize::from(cfg!(debug_assertions)),
        "{stderr}"
    );

    let table: Vec<Vec<String>> = stdout
        .lines()
        .filter(|l| l.starts_with("| "))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    let header = [
        "measure",
        "rnic",
        "baseline",
        "baseline figure",
        "ratio",
        "goal",
        "met",
    ];
    assert_eq!(table[0], header, "{stdout}");
    // write-stream, send-rtt, cm, inproc (against two memcpys), explore.
    assert_eq!(table.len(), 1 + 6, "{stdout}");
    for row in &table[1..] {
        assert_eq!(row.len(), header.len(), "{row:?}\n{stdout}");
        positive(&row[1], &stdout);
        assert!(
            ["met", "NOT met", "—"].contains(&row[6].as_str()),
            "{row:?}"
        );
        if row[2] == "—" {
            assert_eq!(row[3], "—", "{row:?}");
        } else {
            positive(&row[3], &stdout);
            positive(&row[4], &stdout);
        }
    }
    let by_start = |s: &str| {
        table[1..]
            .iter()
            .find(|r| r[0].starts_with(s))
            .unwrap_or_else(|| panic!("no row {s}:\n{stdout}"))
    };
    assert!(by_start("rnic ping --op write --size 65536")[2].starts_with("TCP stream"));
    assert!(by_start("rnic ping --op send --size 64")[2].starts_with("UDP ping-pong"));
    assert!(by_start("CM connect+disconnect")[2].starts_with("TCP connect+close"));
    assert!(by_start("rnic explore --jobs 1")[5].contains("20000"));
    // Every round's figures follow the table.
    assert!(stdout.contains("\nrounds:\n"), "{stdout}");
}

#[test]
fn bench_json_has_one_summary_per_row_with_positive_figures() {
    let out = bench(&["--json", "--only", "explore,inproc"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["rounds"], 1);
    assert!(v["machine"]["cpus"].as_u64().unwrap() >= 1);
    let rows = v["rows"].as_array().unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    // Table order, whatever the order given to --only.
    assert_eq!(keys, ["inproc", "inproc-cache", "explore"]);
    for r in rows {
        assert!(r["rnic"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["rnic_rounds"].as_array().unwrap().len(), 1, "{r}");
    }
    for r in &rows[..2] {
        assert!(r["baseline"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ratio"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(rows[0]["goal"]["kind"], "ratio_at_least");
    assert!(rows[0]["met"].is_boolean());
    assert!(rows[1]["met"].is_null());
    assert!(rows[2]["baseline"].is_null());
}

#[test]
fn bench_peer_is_hidden_and_bad_measures_are_refused() {
    let help = text(&Command::new(RNIC).arg("--help").output().unwrap().stdout);
    assert!(help.contains("bench"), "{help}");
    assert!(!help.contains("bench-peer"), "{help}");
    let out = bench(&["--only", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
}

mod signals;

use nix::sys::signal::Signal;
use std::time::Duration;

/// `rnic bench --rounds 1 ARGS`, signalled with `sig` once it has a child whose command line
/// contains `child`; the children it had then, and what it printed.
fn interrupted_bench(
    args: &[&str],
    child: &str,
    sig: Signal,
) -> (Vec<signals::Proc>, signals::Ended) {
    let mut p = signals::start(RNIC, &[&["bench", "--rounds", "1"], args].concat());
    let mut kids = Vec::new();
    p.wait_until(
        &format!("running {child:?}"),
        Duration::from_secs(60),
        |pid| {
            kids = signals::children(pid);
            kids.iter().any(|k| k.cmdline.contains(child))
        },
    );
    p.signal(sig);
    let ended = p.end(Duration::from_secs(30));
    (kids, ended)
}

#[test]
fn sigterm_kills_the_ping_processes_and_exits_143() {
    // A WRITE stream no test waits for: its `rnic ping` server and client run until killed.
    let (kids, out) = interrupted_bench(
        &["--only", "write-stream", "--write-count", "100000000"],
        "--connect",
        Signal::SIGTERM,
    );
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        kids.iter().any(|k| k.cmdline.contains("--listen")),
        "{kids:?}"
    );
    for k in &kids {
        assert!(!k.alive(), "still running after bench exited: {k:?}");
    }
    assert!(
        out.stderr.contains("interrupted by SIGTERM"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout
            .starts_with("rnic bench: INTERRUPTED: no measure finished a round"),
        "{}",
        out.stdout
    );
}

#[test]
fn sigint_kills_the_explore_process_and_prints_the_rounds_finished() {
    // inproc's round is done (in this process) before explore's `rnic explore` starts.
    let (kids, out) = interrupted_bench(
        &[
            "--json",
            "--only",
            "inproc,explore",
            "--inproc-writes",
            "200",
            "--explore-seeds",
            "100000000",
        ],
        "explore",
        Signal::SIGINT,
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert!(
        !kids[0].alive(),
        "still running after bench exited: {:?}",
        kids[0]
    );
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["partial"], true, "{v}");
    let keys: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["inproc", "inproc-cache"], "{v}");
}
