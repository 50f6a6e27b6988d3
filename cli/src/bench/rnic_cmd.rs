//! The `rnic` commands a measure runs as users run them, each a process of the `rnic` binary
//! whose `--json` output is read: a `rnic ping --listen` / `rnic ping --connect` pair
//! ([`ping_pair`]; the report's fields are [`crate::ping::PingReport`]'s) and
//! `rnic explore --jobs 1` ([`explore_rate`]).

use super::process::{run, Proc};
use super::BenchError;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// How long a `rnic ping` client or `rnic explore` may run before it is killed.
const RUN_DEADLINE: Duration = Duration::from_secs(600);
/// How long a `rnic ping --once` server may take to exit once its client has (its
/// disconnect, TimeWait: 512 ms with Linux's timers).
const SERVER_DEADLINE: Duration = Duration::from_secs(60);

/// Both reports of one ping: the client's and the server's `--json` objects.
#[derive(Debug, Clone)]
pub struct PingSides {
    /// The client's report.
    pub client: Value,
    /// The server's report.
    pub server: Value,
}

impl PingSides {
    /// True when both sides' verdicts are `PASS`.
    pub fn passed(&self) -> bool {
        self.client["verdict"] == "PASS" && self.server["verdict"] == "PASS"
    }

    /// `wire.NAME` summed over both sides (e.g. `rc_retransmits`); a side without the field
    /// counts 0.
    pub fn wire_sum(&self, name: &str) -> u64 {
        [&self.client, &self.server]
            .iter()
            .map(|r| r["wire"][name].as_u64().unwrap_or(0))
            .sum()
    }
}

/// The number at `path` (object keys) in `v`.
///
/// # Errors
/// [`BenchError::Measure`] when there is none, naming `what`.
pub fn number(v: &Value, path: &[&str], what: &str) -> Result<f64, BenchError> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .ok_or_else(|| {
            BenchError::Measure(format!("{what}: no number at {} in {v}", path.join(".")))
        })
}

/// The report object in a `--json` output: the last line that is a JSON object with a
/// `verdict`.
fn report(out: &str, what: &str) -> Result<Value, BenchError> {
    out.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("verdict").is_some())
        .ok_or_else(|| BenchError::Measure(format!("{what}: no JSON report in:\n{out}")))
}

/// One ping between two `rnic` processes: `rnic ping --listen LISTEN --once --json
/// SERVER_ARGS`, then, once it listens, `rnic ping --connect ADDR --json CLIENT_ARGS`. Both
/// reports, whatever their verdicts (a failed check is the caller's to judge).
///
/// # Errors
/// [`BenchError::Io`] when a process cannot be started; [`BenchError::Process`] when the
/// server does not print its address, or a side does not finish in time;
/// [`BenchError::Measure`] when a side printed no report (its output is in the error).
pub fn ping_pair(
    rnic: &Path,
    listen: SocketAddr,
    server_args: &[String],
    client_args: &[String],
) -> Result<PingSides, BenchError> {
    let mut cmd = Command::new(rnic);
    cmd.args(["ping", "--once", "--json", "--listen", &listen.to_string()])
        .args(server_args);
    let mut server = Proc::spawn("the rnic ping server", cmd)?;
    let line = server.read_line()?;
    let addr = serde_json::from_str::<Value>(&line)
        .ok()
        .and_then(|v| v["listening"].as_str()?.parse::<SocketAddr>().ok())
        .ok_or_else(|| {
            BenchError::Process(format!(
                "the rnic ping server printed {line:?}, not {{\"listening\":ADDR}}"
            ))
        })?;
    let mut cmd = Command::new(rnic);
    cmd.args(["ping", "--json", "--connect", &addr.to_string()])
        .args(client_args);
    let c = run("the rnic ping client", cmd, RUN_DEADLINE)?;
    let s = server.finish(SERVER_DEADLINE)?;
    let client = report(&c.stdout, "rnic ping client")
        .map_err(|e| BenchError::Measure(format!("{e}\nclient stderr:\n{}", c.stderr)))?;
    let server = report(&s.stdout, "rnic ping server")
        .map_err(|e| BenchError::Measure(format!("{e}\nserver stderr:\n{}", s.stderr)))?;
    Ok(PingSides { client, server })
}

/// `rnic explore --seeds SEEDS --jobs 1 --json`: its own figure of scenarios per second
/// (`timing.scenarios_per_s`, timed around the seeds only). A seed that fails the oracle
/// does not stop the measure (it is printed on stderr).
///
/// # Errors
/// [`BenchError::Process`] when it exits with a status other than 0 (passed) or 1 (a seed
/// failed); [`BenchError::Measure`] when its output has no figure.
pub fn explore_rate(rnic: &Path, seeds: u64) -> Result<f64, BenchError> {
    let mut cmd = Command::new(rnic);
    cmd.args([
        "explore",
        "--jobs",
        "1",
        "--json",
        "--seeds",
        &seeds.to_string(),
    ]);
    let f = run("rnic explore", cmd, RUN_DEADLINE)?;
    match f.status.code() {
        Some(0) => {}
        Some(1) => eprintln!(
            "rnic bench: rnic explore found failing seeds:\n{}",
            f.stderr
        ),
        _ => {
            return Err(BenchError::Process(format!(
                "rnic explore failed ({}); stderr:\n{}",
                f.status, f.stderr
            )))
        }
    }
    let v: Value = serde_json::from_str(&f.stdout)
        .map_err(|e| BenchError::Measure(format!("rnic explore --json: {e} in:\n{}", f.stdout)))?;
    number(&v, &["timing", "scenarios_per_s"], "rnic explore --json")
}
