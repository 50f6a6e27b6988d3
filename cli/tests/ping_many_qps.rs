//! Many QPs to one peer under load: `rnic ping -q 64` moves large messages on 64 connections
//! at once between two processes, more than the peer's socket buffer holds, and every QP
//! passes — the QPs share one send budget towards the peer (docs/performance.md, "Many QPs to
//! one peer"). Each side runs under `timeout(1)`, so a hang fails the test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions
#![allow(clippy::disallowed_methods)] // drives real processes: a thread drains the server's reports

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const RNIC: &str = env!("CARGO_BIN_EXE_rnic");

/// `rnic ARGS` under `timeout -s KILL SECS`.
fn rnic(secs: u32, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-s", "KILL", &secs.to_string(), RNIC]).args(args);
    c
}

#[test]
fn sixty_four_qps_with_large_messages_all_pass() {
    let mut server = rnic(
        180,
        &["ping", "--listen", "127.0.190.20:0", "--once", "--json"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let v: Value = serde_json::from_str(first.trim()).expect(&first);
    let addr = v["listening"].as_str().unwrap().to_string();
    // Its 64 reports must not fill the pipe while the client runs.
    let drain = std::thread::spawn(move || out.lines().count());
    // 64 × 256 KiB per operation: far more than the peer's receive buffer (at most 4 MiB,
    // 208 KiB on a default Linux), so the shared budget has to hold the QPs back.
    let client = rnic(
        150,
        &[
            "ping",
            "--connect",
            &addr,
            "--bind",
            "127.0.190.21:0",
            "-q",
            "64",
            "-S",
            "262144",
            "-C",
            "3",
            "--json",
        ],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&client.stdout);
    let stderr = String::from_utf8_lossy(&client.stderr);
    assert_eq!(client.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).expect(&stdout);
    assert_eq!(v["qps"], 64);
    assert_eq!(v["verdict"], "PASS");
    assert_eq!(v["iterations"], 64 * 3);
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 64);
    let mut retries = 0;
    for r in reports {
        assert_eq!(r["verdict"], "PASS", "{r}");
        assert_eq!(r["iterations"], 3);
        retries += r["wire"]["rc_retransmits"].as_u64().unwrap();
    }
    // Per-QP retries are each QP's own: together no more than a handful per QP (without the
    // budget, QPs ran out of their 7 retries).
    assert!(retries < 64 * 7, "{retries} RC retries");
    let served = server.wait().unwrap();
    assert_eq!(served.code(), Some(0));
    assert_eq!(drain.join().unwrap(), 64, "one report per connection");
}
