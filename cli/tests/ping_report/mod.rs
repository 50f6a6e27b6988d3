//! Reading `rnic ping --json` output in tests: the report object and its CM events. Shared by
//! `cli/tests/ping.rs` (the simulated RNIC) and `cli/tests/hw.rs` (`--device`).

#![allow(clippy::unwrap_used, dead_code)] // test helpers; each test file uses some

use serde_json::Value;
use std::net::SocketAddr;

/// The address in a server's first line: `listening on ADDR` or `{"listening":"ADDR"}`.
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    match line.strip_prefix("listening on ") {
        Some(a) => a.trim().parse().ok(),
        None => serde_json::from_str::<Value>(line).ok()?["listening"]
            .as_str()?
            .parse()
            .ok(),
    }
}

/// The report object in a `--json` output (the line with a verdict).
pub fn report(out: &str) -> Value {
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("verdict").is_some())
        .unwrap_or_else(|| panic!("no JSON report in:\n{out}"))
}

/// The report's CM events as (name, status).
pub fn events(r: &Value) -> Vec<(String, i64)> {
    r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["status"].as_i64().unwrap(),
            )
        })
        .collect()
}
