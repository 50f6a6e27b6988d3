//! One `rnic check` run: the server and the client, each under `rnic exec` on its own
//! address with its faults, waited for with a deadline, and the verdict.

use super::draw::Side;
use super::CheckOptions;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// What one side is to run.
#[derive(Debug, Clone)]
pub struct SideSpec {
    /// Which side.
    pub side: Side,
    /// The `rnic exec` arguments (everything after `rnic`), placeholders replaced.
    pub args: Vec<String>,
    /// Where its `--check-report` goes.
    pub report: PathBuf,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// Whether a `kill:` fault is on it.
    pub kill_fault: bool,
}

/// How one side ended.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SideResult {
    /// Exit code, if it exited.
    pub exit: Option<i32>,
    /// Signal, if it died of one.
    pub signal: Option<i32>,
    /// Killed by us at the deadline.
    pub hung: bool,
    /// Stopped by us because `rnic check` was interrupted: the run does not count.
    #[serde(skip)]
    pub interrupted: bool,
    /// `rnic: fault fired: …` lines.
    pub fired: Vec<String>,
    /// The report's findings (`rule: message`).
    pub findings: Vec<String>,
    /// The report's counts.
    pub counts: BTreeMap<String, u64>,
    /// Whether a report was read.
    pub report: bool,
}

/// Why a wait ended before the program's own exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The run's deadline passed.
    Deadline,
    /// SIGINT or SIGTERM reached `rnic check` ([`crate::interrupt`]).
    Interrupt,
}

/// Waits for `child` until `deadline` or an interrupt; then kills the program `rnic exec`
/// runs ([`kill_programs`]), gives `rnic exec` a little time to finish the program's
/// connections, and kills it. Returns the status and why it was stopped, if it was.
#[allow(clippy::disallowed_methods)] // a real-time deadline on real processes
fn wait_until(
    child: &mut Child,
    deadline: std::time::Instant,
) -> (Option<ExitStatus>, Option<Stop>) {
    let stop = loop {
        match child.try_wait() {
            Ok(Some(st)) => return (Some(st), None),
            Ok(None) if crate::interrupt::requested() => break Stop::Interrupt,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(POLL);
            }
            Ok(None) => break Stop::Deadline,
            Err(_) => return (None, None),
        }
    };
    // rnic exec finishes the program's connections, then exits; give it a little time. The
    // programs are killed again each round, in case rnic exec had not started its own yet.
    let grace = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        kill_programs(child.id());
        if let Ok(Some(st)) = child.try_wait() {
            return (Some(st), Some(stop));
        }
        if std::time::Instant::now() >= grace {
            break;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    (child.wait().ok(), Some(stop))
}

/// How often a wait looks at the children.
const POLL: Duration = Duration::from_millis(20);

/// SIGKILLs the children of process `pid` (`rnic exec`: the program), each with its process
/// group when it leads one (as a program started outside a terminal's foreground does), so
/// that nothing it started is left running. A child still listed has not been reaped, so its
/// process ID is still its own.
fn kill_programs(pid: u32) {
    use nix::sys::signal::{kill, killpg, Signal::SIGKILL};
    use nix::unistd::{getpgid, Pid};
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            let c = Pid::from_raw(c);
            if getpgid(Some(c)) == Ok(c) {
                let _ = killpg(c, SIGKILL);
            }
            let _ = kill(c, SIGKILL);
        }
    }
}

/// Sleeps `d`, or less if an interrupt comes; whether it slept the whole time.
#[allow(clippy::disallowed_methods)] // a real-time pause between real processes
fn pause(d: Duration) -> bool {
    let end = std::time::Instant::now() + d;
    while !crate::interrupt::requested() {
        let now = std::time::Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep(POLL.min(end - now));
    }
    false
}

fn spawn(rnic: &Path, s: &SideSpec) -> std::io::Result<Child> {
    // A report left by an earlier run of the same seed must not be taken for this one's.
    let _ = std::fs::remove_file(&s.report);
    let log = std::fs::File::create(&s.log)?;
    let mut cmd = Command::new(rnic);
    cmd.env(
        crate::exec::supervise::DIE_WITH_ENV,
        std::process::id().to_string(),
    )
    .args(&s.args)
    .stdin(Stdio::null())
    .stdout(log.try_clone()?)
    .stderr(log);
    cmd.spawn()
}

/// Reads what a side left: its fault lines and its report.
fn collect(s: &SideSpec, (status, stop): (Option<ExitStatus>, Option<Stop>)) -> SideResult {
    let mut r = SideResult {
        exit: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        hung: stop == Some(Stop::Deadline),
        interrupted: stop == Some(Stop::Interrupt),
        ..SideResult::default()
    };
    let log = std::fs::read_to_string(&s.log).unwrap_or_default();
    r.fired = log
        .lines()
        .filter_map(|l| l.strip_prefix("rnic: fault fired: "))
        .map(str::to_string)
        .collect();
    let report = std::fs::read_to_string(&s.report)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    if let Some(rep) = report {
        r.report = true;
        if let Some(f) = rep.get("findings").and_then(|f| f.as_array()) {
            r.findings = f
                .iter()
                .map(|f| {
                    let s = |k: &str| f.get(k).and_then(|v| v.as_str()).unwrap_or("");
                    format!("{}: {}", s("rule"), s("message"))
                })
                .collect();
        }
        if let Some(c) = rep.get("counts").and_then(|c| c.as_object()) {
            r.counts = c
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .collect();
        }
    }
    r
}

/// Runs the server, waits `server_delay`, runs the client, and waits for both until
/// `timeout` after the server started. An interrupt stops both (their results say
/// `interrupted`).
#[allow(clippy::disallowed_methods)] // a real-time deadline on real processes
pub fn run(
    rnic: &Path,
    server: &SideSpec,
    client: &SideSpec,
    server_delay: Duration,
    timeout: Duration,
) -> Result<(SideResult, SideResult), String> {
    let start = std::time::Instant::now();
    let deadline = start + timeout;
    let mut s = spawn(rnic, server).map_err(|e| format!("cannot start {}: {e}", rnic.display()))?;
    if !pause(server_delay) {
        let not_run = SideResult {
            interrupted: true,
            ..SideResult::default()
        };
        return Ok((collect(server, wait_until(&mut s, start)), not_run));
    }
    let mut c = match spawn(rnic, client) {
        Ok(c) => c,
        Err(e) => {
            let _ = wait_until(&mut s, start);
            return Err(format!("cannot start {}: {e}", rnic.display()));
        }
    };
    let cr = collect(client, wait_until(&mut c, deadline));
    let sr = collect(server, wait_until(&mut s, deadline));
    Ok((sr, cr))
}

/// What the exit status may be (`--expect-exit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// This code.
    Code(i32),
    /// Any exit code (not a signal).
    Any,
}

/// Why a side failed, if it did: a hang, a signal other than the SIGKILL of a `kill:` fault
/// that fired on it, an exit status other than `--expect-exit` (not judged when `faulted`: a
/// kill, removal or silence fired on either side, after which a program may rightly fail), a
/// finding of its report whose rule `--allow` does not name.
pub fn verdict(side: &SideSpec, r: &SideResult, opts: &CheckOptions, faulted: bool) -> Vec<String> {
    let name = match side.side {
        Side::Server => "server",
        Side::Client => "client",
    };
    let mut why = Vec::new();
    let kill_fired = side.kill_fault && r.fired.iter().any(|f| f.starts_with("kill:"));
    if r.hung {
        why.push(format!("{name} hung (killed at the deadline)"));
    } else if let Some(sig) = r.signal {
        if !(kill_fired && sig == 9) {
            why.push(format!("{name} died of signal {sig}"));
        }
    } else if let (Some(code), Expect::Code(want), false) = (r.exit, &opts.expect_exit, faulted) {
        if code != *want {
            why.push(format!("{name} exited {code} (expected {want})"));
        }
    }
    let allowed = |f: &String| {
        f.split_once(':')
            .is_some_and(|(rule, _)| opts.allow.iter().any(|a| a == rule))
    };
    for f in r.findings.iter().filter(|f| !allowed(f)) {
        why.push(format!("{name} finding: {f}"));
    }
    why
}
