//! The checker of `rnic exec --check` (docs/check.md): when `RNIC_CHECK` is set, librnic's
//! entry points tell it what the program does — objects made and destroyed, CM events fetched
//! and acked, completions polled — and it applies the rules that bind a *program*
//! ([`rules::Rule`]) as the program calls and at exit, then reports ([`report`]) on stderr and,
//! with `RNIC_CHECK_REPORT=FILE`, as JSON.
//!
//! Cost: with the checker off, one relaxed atomic load per entry point. With it on, the data
//! path (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`) adds relaxed atomic increments; the
//! rest takes a mutex on calls that make, destroy or fetch something.
//!
//! Files: [`rules`] (names and sources), [`state`] (the history kept and the rules applied to
//! it), [`counts`] (data-path counters), [`report`] (text and JSON).

pub mod counts;
pub mod report;
pub mod rules;
pub mod state;

use report::Report;
use state::{Live, State};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// The environment variable that turns the checker on: `1` (report) or `fail` (report; `rnic
/// exec` then fails a run with findings that exited 0).
pub const CHECK_ENV: &str = "RNIC_CHECK";
/// The environment variable naming the JSON report's file.
pub const REPORT_ENV: &str = "RNIC_CHECK_REPORT";

/// What the environment asks of the checker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckConfig {
    /// `RNIC_CHECK=fail`.
    pub fail: bool,
    /// Where to write the JSON report (`RNIC_CHECK_REPORT`).
    pub report: Option<PathBuf>,
}

impl CheckConfig {
    /// The checker's configuration from the values of `RNIC_CHECK` and `RNIC_CHECK_REPORT`;
    /// `None` (off) when `RNIC_CHECK` is unset, empty or `0`.
    ///
    /// # Errors
    /// A value of `RNIC_CHECK` other than `0`, `1` and `fail`.
    pub fn from_values(check: Option<&str>, report: Option<&str>) -> Result<Option<Self>, String> {
        let fail = match check.unwrap_or("") {
            "" | "0" => return Ok(None),
            "1" => false,
            "fail" => true,
            other => return Err(format!("{CHECK_ENV}={other:?}: expected 0, 1 or fail")),
        };
        Ok(Some(CheckConfig {
            fail,
            report: report.filter(|r| !r.is_empty()).map(PathBuf::from),
        }))
    }
}

static CONFIG: OnceLock<Option<CheckConfig>> = OnceLock::new();
static STATE: Mutex<Option<State>> = Mutex::new(None);
static REPORTED: AtomicBool = AtomicBool::new(false);
static START: OnceLock<Instant> = OnceLock::new();

/// The checker's configuration, read from the environment once (a bad `RNIC_CHECK` is
/// reported once and turns the checker on).
pub fn config() -> Option<&'static CheckConfig> {
    CONFIG
        .get_or_init(|| {
            let check = std::env::var(CHECK_ENV).ok();
            let report = std::env::var(REPORT_ENV).ok();
            CheckConfig::from_values(check.as_deref(), report.as_deref()).unwrap_or_else(|e| {
                eprintln!("librnic: {e}; checking as with 1");
                Some(CheckConfig {
                    fail: false,
                    report: report.map(PathBuf::from),
                })
            })
        })
        .as_ref()
}

/// Whether the checker is on.
#[inline]
pub fn enabled() -> bool {
    config().is_some()
}

/// Milliseconds since the checker started (its first use).
pub fn now_ms() -> u64 {
    // The checker is a driver-side observer: the wall clock dates what it saw.
    #[allow(clippy::disallowed_methods)]
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Runs `f` on the checker's state when the checker is on (`None` when off).
pub fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    if !enabled() {
        return None;
    }
    let mut g = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    Some(f(g.get_or_insert_with(State::default)))
}

/// How the program ends.
#[derive(Debug)]
pub enum Exit<'a> {
    /// `exit()` or a return from `main`: the exit rules run on what is still alive.
    Normal(&'a Live),
    /// Dying of this signal: no exit rule runs (the program did not get to tear down).
    Signal(i32),
}

/// The program's name (`argv[0]`).
fn program() -> String {
    std::env::args()
        .next()
        .or_else(|| {
            let c = std::fs::read("/proc/self/cmdline").ok()?;
            let first = c.split(|b| *b == 0).next()?;
            Some(String::from_utf8_lossy(first).into_owned())
        })
        .unwrap_or_default()
}

/// Ends the check: applies the exit rules, prints the report on stderr and writes its JSON
/// (`RNIC_CHECK_REPORT`). Once per process (later calls return `None`), and not when the
/// checker is off. On a signal the state's lock is only tried for a while (the signalled
/// thread may hold it): past that, the report says it is incomplete.
pub fn finish(exit: Exit<'_>) -> Option<Report> {
    let cfg = config()?;
    if REPORTED.swap(true, Ordering::SeqCst) {
        return None;
    }
    let at = now_ms();
    let mut guard = match exit {
        Exit::Normal(_) => Some(STATE.lock().unwrap_or_else(PoisonError::into_inner)),
        Exit::Signal(_) => try_lock_for(Duration::from_millis(500)),
    };
    let mut incomplete = None;
    let (findings, cm_events) = match guard.as_deref_mut() {
        Some(slot) => {
            let s = slot.get_or_insert_with(State::default);
            match exit {
                Exit::Normal(live) => s.at_exit(live, at),
                Exit::Signal(sig) => {
                    incomplete = Some(format!(
                        "the program died of signal {sig} ({}): the rules checked at exit \
                         were not checked",
                        signal_name(sig)
                    ))
                }
            }
            (s.findings.clone(), s.cm_events.clone())
        }
        None => {
            incomplete = Some("the checker's state was busy when the signal came".into());
            Default::default()
        }
    };
    drop(guard);
    let mut counts = counts::snapshot();
    for (k, v) in cm_events {
        counts.insert(format!("cm_event.{k}"), v);
    }
    let report = Report {
        program: program(),
        pid: std::process::id(),
        findings,
        counts,
        // What the fault layer (`RNIC_FAULTS`) fired, its time in ms of the RNIC's clock.
        faults: crate::inject::fired()
            .into_iter()
            .map(|(description, at_ms)| report::Fault { description, at_ms })
            .collect(),
        incomplete,
    };
    eprint!("{}", report.text());
    if let Some(path) = &cfg.report {
        if let Err(e) = std::fs::write(path, report.json()) {
            eprintln!("rnic check: cannot write {}: {e}", path.display());
        }
    }
    Some(report)
}

fn try_lock_for(d: Duration) -> Option<std::sync::MutexGuard<'static, Option<State>>> {
    let step = Duration::from_millis(5);
    let mut waited = Duration::ZERO;
    loop {
        match STATE.try_lock() {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if waited < d => {
                std::thread::sleep(step);
                waited += step;
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig).map_or("?", |s| s.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_values() {
        assert_eq!(CheckConfig::from_values(None, Some("x")), Ok(None));
        assert_eq!(CheckConfig::from_values(Some("0"), None), Ok(None));
        let on = CheckConfig::from_values(Some("1"), Some("/tmp/r.json"));
        assert_eq!(
            on,
            Ok(Some(CheckConfig {
                fail: false,
                report: Some(PathBuf::from("/tmp/r.json"))
            }))
        );
        assert!(matches!(
            CheckConfig::from_values(Some("fail"), None),
            Ok(Some(CheckConfig { fail: true, .. }))
        ));
        assert!(CheckConfig::from_values(Some("yes"), None).is_err());
    }
}
