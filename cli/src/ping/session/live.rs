//! What a session prints while it runs, on stderr: a progress line every second
//! (`--progress`; by default when stderr is a terminal and the report is not JSON) and, with
//! `--per-iteration`, one line per iteration as rping's `-v` does. The report on stdout is
//! not affected.

use crate::ping::Params;
use std::io::Write as _;
use verbs_core::SimTime;

/// Time between two progress lines, ns.
const PROGRESS_NS: u64 = 1_000_000_000;

/// The live output of one session.
#[derive(Debug, Default)]
pub struct Live {
    /// Print a progress line every second.
    pub progress: bool,
    /// Print one line per iteration.
    pub per_iteration: bool,
    /// Put before each per-iteration line (`qp N: ` for a `--qps` connection).
    pub prefix: String,
    /// When the next progress line is due.
    next: Option<SimTime>,
    /// The time and iteration count of the last progress line (for the rate since).
    last: Option<(SimTime, u32)>,
}

impl Live {
    /// Live output as asked.
    pub fn new(progress: bool, per_iteration: bool) -> Live {
        Live {
            progress,
            per_iteration,
            ..Live::default()
        }
    }

    /// The same, with `prefix` before each per-iteration line.
    pub fn with_prefix(self, prefix: String) -> Live {
        Live { prefix, ..self }
    }

    /// When the next progress line is due (`None` without `--progress`): a waiter wakes up
    /// then.
    pub fn next_line_at(&self) -> Option<SimTime> {
        self.progress.then_some(self.next).flatten()
    }

    /// Whether a progress line is due at `now`; the first call only starts the clock.
    pub fn line_due(&mut self, now: SimTime) -> bool {
        if !self.progress {
            return false;
        }
        match self.next {
            None => {
                self.next = Some(now.plus_nanos(PROGRESS_NS));
                false
            }
            Some(t) if now >= t => {
                self.next = Some(now.plus_nanos(PROGRESS_NS));
                true
            }
            Some(_) => false,
        }
    }

    /// Prints the per-iteration lines.
    pub fn print_lines(&self, lines: &[String]) {
        if lines.is_empty() {
            return;
        }
        let mut err = std::io::stderr().lock();
        for l in lines {
            let _ = writeln!(err, "{}{l}", self.prefix);
        }
    }

    /// Prints one progress line: time since `start`, iterations done (of how many, or of
    /// how long a run), the rate and bandwidth since the last line, retransmissions so far.
    pub fn print_progress(
        &mut self,
        who: &str,
        now: SimTime,
        start: SimTime,
        iterations: u32,
        p: Params,
        retransmits: u64,
    ) {
        let (t0, i0) = self.last.unwrap_or((start, 0));
        self.last = Some((now, iterations));
        let secs = (now.as_nanos().saturating_sub(t0.as_nanos())) as f64 / 1e9;
        let per_s = f64::from(iterations.saturating_sub(i0)) / secs.max(1e-9);
        let of = match p.duration {
            Some(d) => format!("iterations of a {:.1} s run", d.as_secs_f64()),
            None => format!("of {} iterations", p.count),
        };
        let mbit = per_s * f64::from(p.size) * 8.0 / 1e6;
        let elapsed = now.as_nanos().saturating_sub(start.as_nanos()) as f64 / 1e9;
        eprintln!(
            "rnic ping {who}: {elapsed:.1} s, {iterations} {of}, {per_s:.0}/s, {mbit:.1} Mbit/s, {retransmits} retransmits"
        );
    }
}
