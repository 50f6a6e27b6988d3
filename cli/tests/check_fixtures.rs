//! `rnic exec --check` on the fixtures of `capi/tests/c/check/`: each C program breaks one
//! rule of the checker (docs/check.md) and must give exactly that finding in its JSON report;
//! `clean.c` breaks none and must give none, nor must `established_unfetched.c` (a server
//! that never reads its ESTABLISHED, as perftest's `-R`) unless it leaves its ids to the exit
//! (then a leak only). Also: `--check=fail` turns the exit 0 of a program with findings into 3
//! and leaves a clean one's 0; a program that hangs in `rdma_destroy_id` gets its report when
//! `timeout(1)` sends SIGTERM.
//!
//! Addresses 127.0.26.1–127.0.26.19 (one per test). Needs `cc`, rdma-core's headers
//! (`RNIC_REQUIRE_RDMA_HEADERS=1` fails instead of skipping without them) and librnic.so.

#[allow(unused_imports)] // the harness re-exports its parsers, which these tests do not need
mod common_programs;

use common_programs::{tools_available, RNIC};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// The fixture `name` (`capi/tests/c/check/<name>.c`) compiled once; `None` after `SKIP`
/// when the headers are missing and that is allowed.
fn fixture(test: &str, name: &str) -> Option<PathBuf> {
    for h in [
        "/usr/include/rdma/rdma_cma.h",
        "/usr/include/infiniband/verbs.h",
    ] {
        if !Path::new(h).exists() {
            assert!(
                std::env::var("RNIC_REQUIRE_RDMA_HEADERS").as_deref() != Ok("1"),
                "RNIC_REQUIRE_RDMA_HEADERS=1 but {h} is missing"
            );
            println!("SKIP {test}: {h} missing (libibverbs-dev, librdmacm-dev)");
            return None;
        }
    }
    if !tools_available(test, &[]) {
        return None;
    }
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/tests/c/check");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("check_fixtures");
    let bin = dir.join(name);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !built.iter().any(|b| b == name) {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let src = src_dir.join(format!("{name}.c"));
        let out = Command::new("cc")
            .args(["-O1", "-Wall", "-Werror"])
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
        built.push(name.to_string());
    }
    Some(bin)
}

/// Runs `bin ARGS…` under `rnic exec --addr ADDR --check… --check-report FILE` (with
/// `extra` options before `--`), under `timeout(1)` (SIGTERM after `secs`); the output and
/// the report's rule names.
fn run(
    bin: &Path,
    args: &[&str],
    addr: &str,
    check: &str,
    extra: &[&str],
    secs: u32,
) -> (Output, Vec<String>) {
    let report = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("check_fixtures")
        .join(format!("{addr}.json"));
    let _ = std::fs::remove_file(&report);
    let out = Command::new("timeout")
        .args([
            "-s",
            "TERM",
            &secs.to_string(),
            RNIC,
            "exec",
            "--addr",
            addr,
            check,
        ])
        .arg("--check-report")
        .arg(&report)
        .args(extra)
        .arg("--")
        .arg(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("timeout {RNIC}: {e}"));
    let json = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; stderr:\n{}",
            report.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
    assert_eq!(v["pid"].as_u64().map(|_| ()), Some(()), "{json}");
    assert_eq!(v["faults"], serde_json::json!([]), "{json}");
    let rules = v["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings array: {json}"))
        .iter()
        .map(|f| {
            assert!(f["source"].is_string() && f["at_ms"].is_u64(), "{f}");
            f["rule"].as_str().unwrap_or("").to_string()
        })
        .collect();
    (out, rules)
}

/// The fixture `name` run on `addr` gives exactly `rule` (and exit 0, the program's).
fn gives(test: &str, name: &str, addr: &str, extra: &[&str], rule: &str) {
    let Some(bin) = fixture(test, name) else {
        return;
    };
    let (out, rules) = run(&bin, &[], addr, "--check", extra, 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(rules, [rule], "{stderr}");
    assert!(stderr.contains(&format!("[{rule}] at ")), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn a_clean_program_has_no_finding_even_with_check_fail() {
    let name = "a_clean_program_has_no_finding_even_with_check_fail";
    let Some(bin) = fixture(name, "clean") else {
        return;
    };
    let (out, rules) = run(&bin, &[], "127.0.26.1", "--check=fail", &[], 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(rules.is_empty(), "{rules:?}\n{stderr}");
    assert!(stderr.contains("rnic check: no findings in"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn check_fail_turns_exit_0_with_a_finding_into_3() {
    let name = "check_fail_turns_exit_0_with_a_finding_into_3";
    let Some(bin) = fixture(name, "leak") else {
        return;
    };
    let (out, rules) = run(&bin, &[], "127.0.26.2", "--check=fail", &[], 30);
    assert_eq!(rules, ["leak"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[test]
fn leak() {
    gives("leak", "leak", "127.0.26.3", &[], "leak");
}

#[test]
fn cq_overrun() {
    gives("cq_overrun", "cq_overrun", "127.0.26.4", &[], "cq-overrun");
}

#[test]
fn dereg_mr_under_posted_wr() {
    let t = "dereg_mr_under_posted_wr";
    gives(t, t, "127.0.26.5", &[], "dereg-mr-under-posted-wr");
}

#[test]
fn destroy_channel_with_ids() {
    let t = "destroy_channel_with_ids";
    gives(t, t, "127.0.26.6", &[], "destroy-channel-with-ids");
}

#[test]
fn destroy_id_with_qp() {
    let t = "destroy_id_with_qp";
    gives(t, t, "127.0.26.7", &[], "destroy-id-with-qp");
}

#[test]
fn event_not_acked() {
    let t = "event_not_acked";
    gives(t, t, "127.0.26.8", &[], "event-not-acked");
}

#[test]
fn device_removal_ignored() {
    let t = "device_removal_ignored";
    let extra = ["--remove-device-after", "100"];
    gives(t, t, "127.0.26.9", &extra, "device-removal-ignored");
}

/// The program hangs in `rdma_destroy_id` (as with librdmacm): the finding was made when it
/// called, and the report comes when SIGTERM ends it, marked incomplete.
#[test]
fn destroy_id_unacked_event_is_reported_when_the_hung_program_is_terminated() {
    let name = "destroy_id_unacked_event_is_reported_when_the_hung_program_is_terminated";
    let Some(bin) = fixture(name, "destroy_id_unacked_event") else {
        return;
    };
    let (out, rules) = run(&bin, &[], "127.0.26.10", "--check", &[], 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(rules, ["destroy-id-unacked-event"], "{stderr}");
    assert!(
        stderr.contains("incomplete: the program died of signal 15"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(124), "timeout's status: {stderr}");
}

#[test]
fn event_never_fetched() {
    let t = "event_never_fetched";
    gives(t, t, "127.0.26.11", &[], "event-never-fetched");
}

/// perftest's `-R` server accepts its control connection and never reads the ESTABLISHED:
/// legal (rdma_accept already moved the QP to RTS). Torn down, no finding; with its ids left
/// to the exit, as perftest leaves them, the leak only.
#[test]
fn an_unread_established_of_a_passive_id_is_no_finding() {
    let t = "an_unread_established_of_a_passive_id_is_no_finding";
    let Some(bin) = fixture(t, "established_unfetched") else {
        return;
    };
    let (out, rules) = run(&bin, &[], "127.0.26.12", "--check=fail", &[], 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(rules.is_empty(), "{rules:?}\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn an_unread_established_of_a_leaked_passive_id_is_a_leak_only() {
    let t = "an_unread_established_of_a_leaked_passive_id_is_a_leak_only";
    let Some(bin) = fixture(t, "established_unfetched") else {
        return;
    };
    let (out, rules) = run(&bin, &["leave"], "127.0.26.13", "--check", &[], 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(rules, ["leak"], "{stderr}");
    let leak = stderr
        .lines()
        .find(|l| l.contains("[leak]"))
        .unwrap_or_else(|| panic!("{stderr}"));
    // Both ids and both channels: the server's is not excused by its unread ESTABLISHED.
    assert_eq!(leak.matches(" id 0x").count(), 2, "{leak}");
    assert_eq!(leak.matches("event channel 0x").count(), 2, "{leak}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
