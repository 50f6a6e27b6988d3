//! `rnic exec --check`: turns librnic's checker on in the program (docs/check.md) and, after
//! the program's end, reads its JSON report: says when there is none (a program killed by
//! SIGKILL cannot write it), and with `--check=fail` turns an exit 0 with findings into
//! [`CHECK_FAILED`].

use rnic::check::{CHECK_ENV, REPORT_ENV};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// The exit status of `rnic exec --check=fail` when the program exited 0 but broke a rule.
pub const CHECK_FAILED: u8 = 3;

/// How `--check` was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckMode {
    /// Report the findings; the exit status is the program's.
    #[default]
    Report,
    /// Report, and exit with 3 when the program exited 0 with findings.
    Fail,
}

/// Where the program writes its report, and whether `rnic exec` chose the file (and removes
/// it after reading it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checking {
    /// `--check` or `--check=fail`.
    pub mode: CheckMode,
    /// The JSON report's file.
    pub report: PathBuf,
    /// The file is a temporary one of `rnic exec`'s (no `--check-report`).
    pub temporary: bool,
}

/// The checking asked for: `--check[=MODE]` and/or `--check-report FILE` (which implies
/// `--check`); `None` without either.
pub fn checking(mode: Option<CheckMode>, report: Option<&Path>) -> Option<Checking> {
    if mode.is_none() && report.is_none() {
        return None;
    }
    let (report, temporary) = match report {
        // Absolute: the program may change directory.
        Some(p) => (
            std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
            false,
        ),
        None => (
            std::env::temp_dir().join(format!("rnic-check-{}.json", std::process::id())),
            true,
        ),
    };
    Some(Checking {
        mode: mode.unwrap_or_default(),
        report,
        temporary,
    })
}

impl Checking {
    /// Sets the program's environment for the checker (`RNIC_CHECK`, `RNIC_CHECK_REPORT`).
    pub fn set_env(&self, cmd: &mut Command) {
        let v = match self.mode {
            CheckMode::Report => "1",
            CheckMode::Fail => "fail",
        };
        cmd.env(CHECK_ENV, v);
        cmd.env(REPORT_ENV, &self.report);
        let _ = std::fs::remove_file(&self.report); // a stale one is not this run's
    }

    /// After the program (`program`, process `pid`) ended with `status`: how many findings its report
    /// has (`None`: no report; then says why on stderr, and writes a report with no finding
    /// and the reason as `"incomplete"` where `--check-report` asked for one).
    pub fn findings(&self, program: &str, pid: u32, status: ExitStatus) -> Option<usize> {
        use std::os::unix::process::ExitStatusExt;
        let read = std::fs::read_to_string(&self.report)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok());
        if self.temporary {
            let _ = std::fs::remove_file(&self.report);
        }
        if let Some(v) = read {
            return Some(v["findings"].as_array().map_or(0, Vec::len));
        }
        let why = match status.signal() {
            Some(sig) => format!(
                "the program died of signal {sig} ({}) before librnic could report",
                nix::sys::signal::Signal::try_from(sig).map_or("?", |s| s.as_str())
            ),
            None => "the program made no verbs or rdma_cm call (or librnic was not loaded)".into(),
        };
        eprintln!("rnic exec: no check report: {why}");
        if !self.temporary {
            let stub = serde_json::json!({
                "program": program, "pid": pid, "findings": [], "counts": {}, "faults": [],
                "incomplete": why,
            });
            let _ = std::fs::write(&self.report, stub.to_string());
        }
        None
    }
}

/// The exit status `rnic exec` ends with: the program's, but [`CHECK_FAILED`] for an exit 0
/// with findings under `--check=fail`.
pub fn verdict(mode: CheckMode, status: ExitStatus, findings: Option<usize>) -> Option<u8> {
    (mode == CheckMode::Fail && status.code() == Some(0) && findings.is_some_and(|n| n > 0))
        .then_some(CHECK_FAILED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn report_implies_check_and_a_temporary_file_otherwise() {
        assert_eq!(checking(None, None), None);
        let c = checking(None, Some(Path::new("r.json"))).unwrap();
        assert_eq!(c.mode, CheckMode::Report);
        assert!(c.report.is_absolute() && !c.temporary);
        let c = checking(Some(CheckMode::Fail), None).unwrap();
        assert!(c.temporary);
    }

    #[test]
    fn only_fail_mode_turns_a_clean_exit_with_findings_into_a_failure() {
        let ok = ExitStatus::from_raw(0);
        let one = ExitStatus::from_raw(1 << 8);
        assert_eq!(verdict(CheckMode::Fail, ok, Some(2)), Some(CHECK_FAILED));
        assert_eq!(verdict(CheckMode::Fail, ok, Some(0)), None);
        assert_eq!(verdict(CheckMode::Fail, one, Some(2)), None);
        assert_eq!(verdict(CheckMode::Report, ok, Some(2)), None);
        assert_eq!(verdict(CheckMode::Fail, ok, None), None);
    }
}
